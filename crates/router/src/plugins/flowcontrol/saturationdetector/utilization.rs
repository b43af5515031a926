//! utilization-detector (`saturationdetector/utilization/detector.go`,
//! `Saturation`).

use crate::cycle::EndpointView;

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
