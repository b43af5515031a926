//! concurrency-detector (`saturationdetector/concurrency/detector.go`): the
//! EPP's in-flight counters against a per-endpoint capacity.

use super::ConcurrencyMode;
use crate::plugins::Checks;

/// `Saturation` over `set`: in-flight requests (or tokens) over the
/// stage's capacity, or in hybrid mode the mean over endpoints of the
/// worse of their two ratios. A zero capacity is full. `inflight` gives
/// an endpoint's (requests, tokens), the EPP's in-flight counters.
pub(super) fn saturation(
    set: &[usize],
    inflight: impl Fn(usize) -> (u64, u64),
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
        let (r, t) = inflight(*e);
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

#[cfg(test)]
mod tests {
    use super::saturation;
    use crate::plugins::flowcontrol::saturationdetector::ConcurrencyMode;

    #[test]
    fn each_mode_weighs_the_counters_against_its_capacity() {
        // `concurrency/detector.go`: endpoints 0 and 1 with (2 requests,
        // 300 tokens) and (1, 900); 4 requests and 1000 tokens each.
        let load = |e: usize| [(2, 300), (1, 900)][e];
        let s = |mode| saturation(&[0, 1], load, 4, 1000, mode);
        // Requests: 3 of 8. Tokens: 1200 of 2000. Hybrid: the mean of
        // max(2/4, 0.3) = 0.5 and max(1/4, 0.9) = 0.9.
        assert!((s(ConcurrencyMode::Requests) - 0.375).abs() < 1e-12);
        assert!((s(ConcurrencyMode::Tokens) - 0.6).abs() < 1e-12);
        assert!((s(ConcurrencyMode::Hybrid) - 0.7).abs() < 1e-12);
        // A capacity of 0 is full.
        assert_eq!(
            saturation(&[0], load, 0, 1000, ConcurrencyMode::Requests),
            1.0
        );
    }
}
