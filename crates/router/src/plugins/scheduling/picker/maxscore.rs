//! max-score-picker (`scheduling/picker/maxscore/picker.go`).

use super::Picker;
use pdsim_core::Stream;

/// A stable sort by score, highest first, after the shuffle, so ties fall
/// uniformly at random: the first highest in shuffled order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MaxScorePicker;

impl Picker for MaxScorePicker {
    fn pick(&self, totals: &[f64], order: &[usize], _rng: &mut Stream) -> usize {
        let mut best = order[0];
        for &i in order {
            if totals[i] > totals[best] {
                best = i;
            }
        }
        best
    }
}
