//! utilization-detector (`saturationdetector/utilization/detector.go`,
//! `Saturation`).

use crate::cycle::EndpointView;
use crate::plugins::Checks;

/// The mean over `set` of max(waiting / `queue_depth`, KV usage /
/// `kv_util`); an endpoint whose metrics are missing or older than
/// `staleness_ns` at `now_ns` counts 1.0.
pub(super) fn saturation(
    set: &[usize],
    views: &[EndpointView],
    queue_depth: f64,
    kv_util: f64,
    staleness_ns: u64,
    now_ns: u64,
) -> f64 {
    let total: f64 = set
        .iter()
        .map(|e| {
            let v = &views[*e];
            match v.updated_ns {
                Some(at) if now_ns.saturating_sub(at) <= staleness_ns => {
                    (v.waiting as f64 / queue_depth).max(v.kv_usage / kv_util)
                }
                _ => 1.0,
            }
        })
        .sum();
    total / set.len() as f64
}

/// `utilization/config.go`, `validateConfig`; Go decodes
/// queueDepthThreshold into an int and the staleness into a
/// metav1.Duration string.
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    if let Some(v) = parameters.get("queueDepthThreshold")
        && v.as_i64().is_none_or(|n| n <= 0)
    {
        c.bad(
            "queueDepthThreshold",
            "queueDepthThreshold must be a strictly positive integer",
        );
    }
    if let Some(v) = parameters.get("kvCacheUtilThreshold")
        && !v.as_f64().is_some_and(|v| v > 0.0 && v <= 1.0)
    {
        c.bad(
            "kvCacheUtilThreshold",
            "kvCacheUtilThreshold must lie in (0, 1]",
        );
    }
    if let Some(v) = parameters.get("metricsStalenessThreshold")
        && crate::config::duration_of(v).is_none_or(|n| n <= 0)
    {
        c.bad(
            "metricsStalenessThreshold",
            "metricsStalenessThreshold must be a strictly positive duration such as \"200ms\"",
        );
    }
    if let Some(v) = parameters.get("headroom")
        && !v.as_f64().is_some_and(|v| v >= 0.0)
    {
        c.bad("headroom", "headroom must be a non-negative number");
    }
}
