//! `scheduling/profilehandler/disagg/`: the disagg profile handler
//! (`disagg_profile_handler.go`), the deprecated pd-profile-handler
//! (`pd_profile_handler.go`), and the P/D deciders they ask whether to run
//! the prefill profile for a request, given the decode profile's target.

mod always_disagg_pd_decider;
mod prefix_based_pd_decider;

use super::{Picked, ProfileHandler, Profiles};
use crate::config::{DisaggParams, PdParams, Plugin};
use crate::cycle::RequestContext;
use crate::plugins::Cycle;

/// disagg-profile-handler.
#[derive(Clone, Debug)]
pub(crate) struct DisaggProfileHandler {
    params: DisaggParams,
}

impl DisaggProfileHandler {
    pub fn new(params: DisaggParams) -> DisaggProfileHandler {
        DisaggProfileHandler { params }
    }

    pub fn decider(&self) -> Option<&str> {
        self.params.decider.as_deref()
    }
}

impl ProfileHandler for DisaggProfileHandler {
    fn pick(&self, _request: &RequestContext<'_>, profiles: &mut dyn Profiles) -> Option<Picked> {
        let p = &self.params;
        let (target, other) = if p.prefill_first {
            // stageOrder prefill-first (`pickPrefillFirst`): the prefill
            // profile runs first for every request (no decider is
            // allowed), then decode; a failed prefill leaves the request
            // decode-only. The decode profile sees the prefill pick as
            // its peer endpoint.
            let other = if profiles.exists(&p.prefill) {
                profiles
                    .run(&p.prefill, None)
                    .map(|t| (p.prefill.clone(), t))
            } else {
                None
            };
            (profiles.run(&p.decode, other.as_ref().map(|o| o.1))?, other)
        } else {
            // decode-first (`pickDecodeFirst`): decode, then the prefill
            // profile if it exists and the decider, given the decode
            // target, says so; the prefill profile sees the decode pick as
            // its peer endpoint.
            let target = profiles.run(&p.decode, None)?;
            let other = if profiles.exists(&p.prefill) && profiles.disaggregate(target) {
                profiles
                    .run(&p.prefill, Some(target))
                    .map(|t| (p.prefill.clone(), t))
            } else {
                None
            };
            (target, other)
        };
        Some(Picked {
            primary: p.decode.clone(),
            target,
            other,
        })
    }
}

/// The deprecated pd-profile-handler (`PdProfileHandler.Pick`): decode
/// first; its Pick stops once as many profiles ran as are configured, so
/// with the decode profile alone the decider is never asked; otherwise the
/// prefill profile runs when the decider says so. (Were the decider to say
/// yes with three or more profiles, the EPP would pick the prefill profile
/// again on every round; pdsim runs it once.)
#[derive(Clone, Debug)]
pub(crate) struct PdProfileHandler {
    params: PdParams,
    /// How many profiles the configuration has.
    profiles: usize,
}

impl PdProfileHandler {
    pub fn new(params: PdParams, profiles: usize) -> PdProfileHandler {
        PdProfileHandler { params, profiles }
    }

    pub fn decider(&self) -> &str {
        &self.params.decider
    }
}

impl ProfileHandler for PdProfileHandler {
    fn pick(&self, _request: &RequestContext<'_>, profiles: &mut dyn Profiles) -> Option<Picked> {
        let p = &self.params;
        // It publishes no peer endpoint (only disagg-profile-handler does).
        let target = profiles.run(&p.decode, None)?;
        let other = if self.profiles > 1 && p.prefill != p.decode && profiles.disaggregate(target) {
            profiles
                .run(&p.prefill, None)
                .map(|t| (p.prefill.clone(), t))
        } else {
            None
        };
        Some(Picked {
            primary: p.decode.clone(),
            target,
            other,
        })
    }
}

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
