//! `scheduling/picker/`: the picker chooses the profile's target from the
//! weighted scores, after the shuffle every picker shares
//! (`picker/common.go`, `ShuffleScoredEndpoints`).

mod maxscore;
mod random;
mod weightedrandom;

use crate::config::Plugin;
use pdsim_core::Stream;

/// A picker's extension point (`framework.Picker`).
pub(crate) trait Picker {
    /// The index (into `totals`) of the pick, given the candidates' total
    /// scores and the shuffled order of their indices.
    fn pick(&self, totals: &[f64], order: &[usize], rng: &mut Stream) -> usize;
}

/// A profile's picker; `max-score-picker` when the profile names none
/// (the EPP's default, `scheduler_profile.go`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PickerPlugin {
    MaxScore(maxscore::MaxScorePicker),
    Random(random::RandomPicker),
    WeightedRandom(weightedrandom::WeightedRandomPicker),
}

impl PickerPlugin {
    pub fn new(plugin: Option<&Plugin>) -> PickerPlugin {
        match plugin.map(|p| p.plugin_type.as_str()) {
            Some("random-picker") => PickerPlugin::Random(random::RandomPicker),
            Some("weighted-random-picker") => {
                PickerPlugin::WeightedRandom(weightedrandom::WeightedRandomPicker)
            }
            _ => PickerPlugin::MaxScore(maxscore::MaxScorePicker),
        }
    }
}

impl Picker for PickerPlugin {
    fn pick(&self, totals: &[f64], order: &[usize], rng: &mut Stream) -> usize {
        match self {
            PickerPlugin::MaxScore(p) => p.pick(totals, order, rng),
            PickerPlugin::Random(p) => p.pick(totals, order, rng),
            PickerPlugin::WeightedRandom(p) => p.pick(totals, order, rng),
        }
    }
}

/// The EPP's shuffle before every pick (a Fisher–Yates over the
/// candidates' indices from the seeded stream, standing for Go's
/// `rand.Shuffle` in `ShuffleScoredEndpoints`).
pub(crate) fn shuffle(order: &mut Vec<usize>, n: usize, rng: &mut Stream) {
    order.clear();
    order.extend(0..n);
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
}
