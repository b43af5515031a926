//! prefix-cache-scorer (`scheduling/scorer/prefix/plugin.go`), and the
//! legacy precise-prefix-cache-scorer, whose inner prefix-cache-scorer has
//! neither length parameter
//! (`scheduling/scorer/preciseprefixcache/precise_prefix_cache.go`).

use super::Scorer;
use crate::config::Plugin;
use crate::plugins::{Cycle, PrefixSource, param_f64};

/// Matched blocks over total, blended with the squared match length:
/// `weight · min(matched · block / scale, 1)² + (1 − weight) · ratio`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PrefixScorer {
    /// `matchLengthWeight` clamped to [0, 1], default 0 (legacy: 0).
    weight: f64,
    /// `matchLengthScaleTokens` above 0, else 8,192 (legacy: 8,192).
    scale: f64,
    source: PrefixSource,
}

impl PrefixScorer {
    pub fn new(plugin: &Plugin, source: PrefixSource) -> PrefixScorer {
        let legacy = plugin.plugin_type == "precise-prefix-cache-scorer";
        let param = |key: &str| if legacy { None } else { param_f64(plugin, key) };
        PrefixScorer {
            weight: param("matchLengthWeight").unwrap_or(0.0).clamp(0.0, 1.0),
            scale: param("matchLengthScaleTokens")
                .filter(|s| *s > 0.0)
                .unwrap_or(8192.0),
            source,
        }
    }
}

impl Scorer for PrefixScorer {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        let info = cycle.match_info(self.source);
        let (weight, scale) = (self.weight, self.scale);
        out.extend(candidates.iter().map(|c| {
            if info.total == 0 {
                return 0.0;
            }
            let matched = info.matches[*c] as f64;
            let ratio = (matched / info.total as f64).min(1.0);
            let length = (matched * info.block_size as f64 / scale).min(1.0);
            weight * length * length + (1.0 - weight) * ratio
        }));
    }
}
