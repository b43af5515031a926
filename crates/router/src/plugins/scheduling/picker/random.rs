//! random-picker (`scheduling/picker/random/picker.go`).

use super::Picker;
use pdsim_core::Stream;

/// The first candidate after the shuffle; scores are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RandomPicker;

impl Picker for RandomPicker {
    fn pick(&self, _totals: &[f64], order: &[usize], _rng: &mut Stream) -> usize {
        order[0]
    }
}
