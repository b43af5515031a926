//! `scheduling/profilehandler/disagg/`: the disagg profile handler
//! (`disagg_profile_handler.go`), the deprecated pd-profile-handler
//! (`pd_profile_handler.go`), and the P/D deciders they ask whether to run
//! the prefill profile for a request, given the decode profile's target.

mod always_disagg_pd_decider;
pub(crate) mod prefix_based_pd_decider;

use super::{Picked, ProfileHandler, Profiles, position};
use crate::config::{DisaggParams, PdParams, Plugin};
use crate::cycle::RequestContext;
use crate::plugins::Cycle;

/// disagg-profile-handler, its profiles resolved to indices (`None`: the
/// configuration has no profile of that name).
#[derive(Clone, Debug)]
pub(crate) struct DisaggProfileHandler {
    decode: Option<usize>,
    prefill: Option<usize>,
    prefill_first: bool,
    decider: Option<String>,
}

impl DisaggProfileHandler {
    pub fn new(params: DisaggParams, names: &[String]) -> DisaggProfileHandler {
        DisaggProfileHandler {
            decode: position(names, &params.decode),
            prefill: position(names, &params.prefill),
            prefill_first: params.prefill_first,
            decider: params.decider,
        }
    }

    pub fn decider(&self) -> Option<&str> {
        self.decider.as_deref()
    }
}

impl ProfileHandler for DisaggProfileHandler {
    fn pick(&self, _request: &RequestContext<'_>, profiles: &mut dyn Profiles) -> Option<Picked> {
        let (target, other) = if self.prefill_first {
            // stageOrder prefill-first (`pickPrefillFirst`): the prefill
            // profile runs first for every request (no decider is
            // allowed), then decode; a failed prefill leaves the request
            // decode-only. The decode profile sees the prefill pick as
            // its peer endpoint.
            let other = self
                .prefill
                .and_then(|p| profiles.run(p, None).map(|t| (p, t)));
            (profiles.run(self.decode?, other.map(|o| o.1))?, other)
        } else {
            // decode-first (`pickDecodeFirst`): decode, then the prefill
            // profile if it exists and the decider, given the decode
            // target, says so; the prefill profile sees the decode pick as
            // its peer endpoint.
            let target = profiles.run(self.decode?, None)?;
            let other = match self.prefill {
                Some(p) if profiles.disaggregate(target) => {
                    profiles.run(p, Some(target)).map(|t| (p, t))
                }
                _ => None,
            };
            (target, other)
        };
        Some(Picked {
            primary: self.decode?,
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
    decode: Option<usize>,
    /// The prefill profile, when a second profile can run: the
    /// configuration has more than one and the prefill profile is another
    /// than the decode one.
    prefill: Option<usize>,
    decider: String,
}

impl PdProfileHandler {
    pub fn new(params: PdParams, names: &[String]) -> PdProfileHandler {
        let second = names.len() > 1 && params.prefill != params.decode;
        PdProfileHandler {
            decode: position(names, &params.decode),
            prefill: position(names, &params.prefill).filter(|_| second),
            decider: params.decider,
        }
    }

    pub fn decider(&self) -> &str {
        &self.decider
    }
}

impl ProfileHandler for PdProfileHandler {
    fn pick(&self, _request: &RequestContext<'_>, profiles: &mut dyn Profiles) -> Option<Picked> {
        // It publishes no peer endpoint (only disagg-profile-handler does).
        let decode = self.decode?;
        let target = profiles.run(decode, None)?;
        let other = match self.prefill {
            Some(p) if profiles.disaggregate(target) => profiles.run(p, None).map(|t| (p, t)),
            _ => None,
        };
        Some(Picked {
            primary: decode,
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
