//! running-requests-size-scorer
//! (`scheduling/scorer/runningrequests/runningrequest.go`).

use super::{Scorer, min_max};
use crate::plugins::Cycle;

/// Min-max over the candidates' running requests, the fewest 1. No
/// parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RunningRequestsScorer;

impl Scorer for RunningRequestsScorer {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        min_max(
            candidates
                .iter()
                .map(|c| cycle.endpoints[*c].running as f64),
            out,
        );
    }
}
