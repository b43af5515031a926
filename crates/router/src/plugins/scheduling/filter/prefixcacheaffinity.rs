//! prefix-cache-affinity-filter
//! (`scheduling/filter/prefixcacheaffinity/plugin.go`).

use super::Filter;
use crate::config::Plugin;
use crate::plugins::Checks;
use crate::plugins::{Cycle, PrefixSource, param_f64};
use pdsim_core::Stream;

/// Keep the endpoints whose prefix match reaches the threshold, unless
/// exploring, none qualifies, or their in-flight prefill backlog would cost
/// more TTFT than `maxTTFTPenaltyMs` over the best other endpoint.
#[derive(Clone, Debug)]
pub(crate) struct PrefixCacheAffinityFilter {
    /// `affinityThreshold`, default 0.80; at most 0 disables the filter.
    threshold: f64,
    /// `explorationProbability`, default 0.
    explore: f64,
    /// `maxTTFTPenaltyMs`, default 18,000; at most 0 disables the check.
    penalty_ms: f64,
    /// `peakPrefillThroughput` in tokens/s, above 0, else 15,928.
    peak: f64,
    source: PrefixSource,
}

impl PrefixCacheAffinityFilter {
    pub fn new(plugin: &Plugin, source: PrefixSource) -> PrefixCacheAffinityFilter {
        PrefixCacheAffinityFilter {
            threshold: param_f64(plugin, "affinityThreshold").unwrap_or(0.80),
            explore: param_f64(plugin, "explorationProbability").unwrap_or(0.0),
            penalty_ms: param_f64(plugin, "maxTTFTPenaltyMs").unwrap_or(18_000.0),
            peak: param_f64(plugin, "peakPrefillThroughput")
                .filter(|p| *p > 0.0)
                .unwrap_or(15_928.0),
            source,
        }
    }
}

impl Filter for PrefixCacheAffinityFilter {
    fn filter(&mut self, cycle: &Cycle<'_, '_>, rng: &mut Stream, candidates: &mut Vec<usize>) {
        if candidates.len() <= 1 || self.threshold <= 0.0 {
            return;
        }
        if self.explore > 0.0 && rng.bernoulli(self.explore) {
            return;
        }
        let info = cycle.match_info(self.source);
        let score = |e: usize| {
            if info.total == 0 {
                0.0
            } else {
                info.matches[e] as f64 / info.total as f64
            }
        };
        let (sticky, other): (Vec<usize>, Vec<usize>) = candidates
            .iter()
            .partition(|e| score(**e) >= self.threshold);
        if sticky.is_empty() {
            return;
        }
        if self.penalty_ms > 0.0 && !other.is_empty() {
            let tokens = |e: usize| cycle.inflight_tokens(e) as f64;
            let ttft = |set: &[usize]| {
                set.iter()
                    .map(|e| tokens(*e) / self.peak * 1000.0)
                    .fold(f64::MAX, f64::min)
            };
            if ttft(&sticky) - ttft(&other) > self.penalty_ms {
                return;
            }
        }
        *candidates = sticky;
    }
}

/// `ttftSource: latencyPredictor` needs the latency predictor, a separate
/// service pdsim does not simulate (`filter/prefixcacheaffinity/plugin.go`).
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    if parameters
        .get("ttftSource")
        .and_then(serde_yaml::Value::as_str)
        == Some("latencyPredictor")
    {
        c.not_simulated(
            "ttftSource",
            "ttftSource latencyPredictor needs the latency predictor, which is not simulated",
        );
    }
}
