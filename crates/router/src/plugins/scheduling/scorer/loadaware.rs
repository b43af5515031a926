//! load-aware-scorer (`scheduling/scorer/loadaware/load_aware.go`).

use super::Scorer;
use crate::config::Plugin;
use crate::plugins::{Cycle, param_f64};

/// An empty queue 0.5, falling linearly to 0 at `threshold` waiting.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LoadAwareScorer {
    /// `threshold` above 0, else 128.
    threshold: f64,
}

impl LoadAwareScorer {
    pub fn new(plugin: &Plugin) -> LoadAwareScorer {
        LoadAwareScorer {
            threshold: param_f64(plugin, "threshold")
                .filter(|t| *t > 0.0)
                .unwrap_or(128.0),
        }
    }
}

impl Scorer for LoadAwareScorer {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        let threshold = self.threshold;
        out.extend(candidates.iter().map(|c| {
            let w = cycle.endpoints[*c].waiting as f64;
            if w == 0.0 {
                0.5
            } else {
                0.5 * (1.0 - w.min(threshold) / threshold)
            }
        }));
    }
}
