//! `scheduling/profilehandler/disagg/`: the P/D deciders a disagg (or the
//! deprecated pd) profile handler asks whether to run the prefill profile
//! for a request, given the decode profile's target.

mod always_disagg_pd_decider;
mod prefix_based_pd_decider;

use crate::config::Plugin;
use crate::plugins::Cycle;

/// A decider's extension point.
pub(crate) trait Decider {
    /// Whether to disaggregate the request whose decode target is `decode`.
    fn disaggregate(&self, cycle: &Cycle<'_, '_>, decode: usize) -> bool;
}

/// The decider a handler names, resolved at load.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum DeciderPlugin {
    /// The handler names none (or a plugin that is not there): never.
    None,
    Always(always_disagg_pd_decider::AlwaysDisaggPdDecider),
    PrefixBased(prefix_based_pd_decider::PrefixBasedPdDecider),
}

impl DeciderPlugin {
    pub fn new(plugin: Option<&Plugin>) -> DeciderPlugin {
        match plugin {
            None => DeciderPlugin::None,
            Some(p) if p.plugin_type == "always-disagg-pd-decider" => {
                DeciderPlugin::Always(always_disagg_pd_decider::AlwaysDisaggPdDecider)
            }
            Some(p) => {
                DeciderPlugin::PrefixBased(prefix_based_pd_decider::PrefixBasedPdDecider::new(p))
            }
        }
    }
}

impl Decider for DeciderPlugin {
    fn disaggregate(&self, cycle: &Cycle<'_, '_>, decode: usize) -> bool {
        match self {
            DeciderPlugin::None => false,
            DeciderPlugin::Always(d) => d.disaggregate(cycle, decode),
            DeciderPlugin::PrefixBased(d) => d.disaggregate(cycle, decode),
        }
    }
}
