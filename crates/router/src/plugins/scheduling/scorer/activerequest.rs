//! active-request-scorer (`scheduling/scorer/activerequest/active_request.go`).

use super::Scorer;
use crate::config::Plugin;
use crate::plugins::{Cycle, param_f64};

/// In-flight requests: at most `idleThreshold` 1, else
/// (max − n)/max · `maxBusyScore`, max over the candidates.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ActiveRequestScorer {
    /// `idleThreshold`, default 0.
    idle: f64,
    /// `maxBusyScore`, default 1.
    max_busy: f64,
}

impl ActiveRequestScorer {
    pub fn new(plugin: &Plugin) -> ActiveRequestScorer {
        ActiveRequestScorer {
            idle: param_f64(plugin, "idleThreshold").unwrap_or(0.0),
            max_busy: param_f64(plugin, "maxBusyScore").unwrap_or(1.0),
        }
    }
}

impl Scorer for ActiveRequestScorer {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        let requests = |c: usize| cycle.inflight_requests(c) as f64;
        let max_n = candidates.iter().map(|c| requests(*c)).fold(0.0, f64::max);
        out.extend(candidates.iter().map(|c| {
            let n = requests(*c);
            if n <= self.idle || max_n == 0.0 {
                1.0
            } else {
                (max_n - n) / max_n * self.max_busy
            }
        }));
    }
}
