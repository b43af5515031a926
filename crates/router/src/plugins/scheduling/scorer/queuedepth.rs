//! queue-scorer (`scheduling/scorer/queuedepth/queue.go`).

use super::{Scorer, min_max};
use crate::plugins::Cycle;

/// Min-max over the candidates' waiting queues, the shortest 1. No
/// parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueueScorer;

impl Scorer for QueueScorer {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        min_max(
            candidates
                .iter()
                .map(|c| cycle.endpoints[*c].waiting as f64),
            out,
        );
    }
}
