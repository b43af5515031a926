//! token-load-scorer (`scheduling/scorer/tokenload/token_load.go`).

use super::Scorer;
use crate::config::Plugin;
use crate::plugins::{Cycle, param_f64};

/// In-flight tokens plus the uncached prompt, 1 when idle, falling linearly
/// to 0 at `queueThresholdTokens`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TokenLoadScorer {
    /// `queueThresholdTokens` above 0, else 4,194,304.
    threshold: f64,
}

impl TokenLoadScorer {
    pub fn new(plugin: &Plugin) -> TokenLoadScorer {
        TokenLoadScorer {
            threshold: param_f64(plugin, "queueThresholdTokens")
                .filter(|t| *t > 0.0)
                .unwrap_or(4_194_304.0),
        }
    }
}

impl Scorer for TokenLoadScorer {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        let threshold = self.threshold;
        out.extend(candidates.iter().map(|c| {
            let load = cycle.inflight_tokens(*c) + cycle.uncached_tokens(*c);
            if load == 0 {
                1.0
            } else {
                1.0 - (load as f64).min(threshold) / threshold
            }
        }));
    }
}
