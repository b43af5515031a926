//! concurrency-detector (`saturationdetector/concurrency/detector.go`): the
//! EPP's in-flight counters against a per-endpoint capacity.

use super::ConcurrencyMode;
use crate::cycle::Router;
use crate::plugins::Checks;

/// `Saturation` over `set`: in-flight requests (or tokens) over the
/// stage's capacity, or in hybrid mode the mean over endpoints of the
/// worse of their two ratios. A zero capacity is full.
pub(super) fn saturation(
    set: &[usize],
    router: &Router,
    max_concurrency: u64,
    max_tokens: u64,
    mode: ConcurrencyMode,
) -> f64 {
    let ratio = |load: u64, cap: u64| {
        if cap == 0 {
            1.0
        } else {
            load as f64 / cap as f64
        }
    };
    let n = set.len() as u64;
    let (mut requests, mut tokens, mut hybrid) = (0u64, 0u64, 0.0);
    for e in set {
        let (r, t) = router.inflight(*e);
        requests += r;
        tokens += t;
        hybrid += ratio(r, max_concurrency).max(ratio(t, max_tokens));
    }
    match mode {
        ConcurrencyMode::Requests => ratio(requests, max_concurrency.saturating_mul(n)),
        ConcurrencyMode::Tokens => ratio(tokens, max_tokens.saturating_mul(n)),
        ConcurrencyMode::Hybrid => hybrid / n as f64,
    }
}

/// `concurrency/config.go`, `validateConfig`.
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    for key in ["maxConcurrency", "maxTokenConcurrency"] {
        if let Some(v) = parameters.get(key)
            && v.as_i64().is_none_or(|n| n <= 0)
        {
            c.bad(key, format!("{key} must be a strictly positive integer"));
        }
    }
    if let Some(v) = parameters.get("headroom")
        && !v.as_f64().is_some_and(|v| v >= 0.0)
    {
        c.bad("headroom", "headroom must be a non-negative number");
    }
    if let Some(v) = parameters.get("concurrencyMode")
        && !matches!(v.as_str(), Some("requests" | "tokens" | "hybrid"))
    {
        c.bad(
            "concurrencyMode",
            "concurrencyMode must be \"requests\", \"tokens\" or \"hybrid\"",
        );
    }
    if let Some(v) = parameters.get("inFlightLoadProducerName")
        && !v.is_string()
    {
        c.bad(
            "inFlightLoadProducerName",
            "inFlightLoadProducerName must be a string",
        );
    }
}
