//! always-disagg-pd-decider
//! (`scheduling/profilehandler/disagg/always_disagg_pd_decider.go`).

use super::Decider;
use crate::plugins::Cycle;

/// Every request is disaggregated. No parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct AlwaysDisaggPdDecider;

impl Decider for AlwaysDisaggPdDecider {
    fn disaggregate(&self, _cycle: &Cycle<'_, '_>, _decode: usize) -> bool {
        true
    }
}
