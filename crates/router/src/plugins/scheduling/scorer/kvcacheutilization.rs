//! kv-cache-utilization-scorer
//! (`scheduling/scorer/kvcacheutilization/kvcache_utilization.go`).

use super::Scorer;
use crate::plugins::Cycle;

/// 1 − the endpoint's KV-cache usage. No parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KvCacheUtilizationScorer;

impl Scorer for KvCacheUtilizationScorer {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        out.extend(
            candidates
                .iter()
                .map(|c| 1.0 - cycle.endpoints[*c].kv_usage),
        );
    }
}
