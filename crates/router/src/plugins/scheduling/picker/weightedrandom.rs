//! weighted-random-picker (`scheduling/picker/weightedrandom/picker.go`).

use super::Picker;
use pdsim_core::Stream;

/// A-Res weighted sampling: each candidate draws key = U^(1/score), the
/// largest key wins; with every score 0 it falls back to the random picker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct WeightedRandomPicker;

impl Picker for WeightedRandomPicker {
    fn pick(&self, totals: &[f64], order: &[usize], rng: &mut Stream) -> usize {
        if !totals.iter().any(|t| *t > 0.0) {
            return order[0];
        }
        let mut best = (f64::MIN, order[0]);
        for &i in order {
            let u = rng.unit().max(1e-10);
            let key = if totals[i] > 0.0 {
                u.powf(1.0 / totals[i])
            } else {
                0.0
            };
            if key > best.0 {
                best = (key, i);
            }
        }
        best.1
    }
}
