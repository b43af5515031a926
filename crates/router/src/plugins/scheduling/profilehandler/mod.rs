//! `scheduling/profilehandler/`: the profile handler decides which
//! scheduling profiles run for a request, in which order, and which
//! result is primary (`framework.ProfileHandler`, `Pick` and
//! `ProcessResults`).

mod dataparallel;
pub(crate) mod disagg;
pub(crate) mod headerprofile;
mod single;

use crate::config::{EndpointPickerConfig, Plugin, disagg_params, pd_params};
use crate::cycle::RequestContext;
use crate::plugins::Checks;

/// What a handler asks of the cycle: run a profile (by its index in the
/// configuration's `schedulingProfiles`, which handlers resolve from names
/// at build), ask the P/D decider, or find a profile a request names.
pub(crate) trait Profiles {
    /// Runs profile `profile` with `peer` published as the request's
    /// `peer-endpoint` (the endpoint an earlier profile picked); its
    /// target, or `None` when its filters left nothing.
    fn run(&mut self, profile: usize, peer: Option<usize>) -> Option<usize>;
    /// The decider's verdict on the decode target.
    fn disaggregate(&mut self, decode: usize) -> bool;
    /// The profile of this name, for a handler that reads a name off the
    /// request (the EPP's own map lookup, `profiles[name]`).
    fn index_of(&self, name: &str) -> Option<usize>;
}

/// What the profiles gave: the primary profile and its target, and the
/// other profile that ran, with its target.
pub(crate) struct Picked {
    pub primary: usize,
    pub target: usize,
    pub other: Option<(usize, usize)>,
}

/// The index of the profile called `name` among `names`.
fn position(names: &[String], name: &str) -> Option<usize> {
    names.iter().position(|n| n == name)
}

/// A handler's extension point.
pub(crate) trait ProfileHandler {
    /// Runs the profiles for one request; `None` when there is no primary
    /// result (the EPP answers 503).
    fn pick(&self, request: &RequestContext<'_>, profiles: &mut dyn Profiles) -> Option<Picked>;
}

/// The configured handler, by type.
#[derive(Clone, Debug)]
pub(crate) enum HandlerPlugin {
    Single(single::SingleProfileHandler),
    Disagg(disagg::DisaggProfileHandler),
    Pd(disagg::PdProfileHandler),
    DataParallel(dataparallel::DataParallelProfileHandler),
    Header(headerprofile::HeaderProfileHandler),
}

impl HandlerPlugin {
    /// The handler `config` names, with the names of its profiles; the
    /// single-profile handler when it names none pdsim knows.
    pub fn new(config: &EndpointPickerConfig) -> HandlerPlugin {
        let names: Vec<String> = config.profiles.iter().map(|p| p.name.clone()).collect();
        let plugin: Option<&Plugin> = config.plugin(&config.handler);
        match plugin.map(|h| (h.plugin_type.as_str(), h)) {
            Some(("disagg-profile-handler", h)) => HandlerPlugin::Disagg(
                disagg::DisaggProfileHandler::new(disagg_params(&h.parameters), &names),
            ),
            Some(("pd-profile-handler", h)) => HandlerPlugin::Pd(disagg::PdProfileHandler::new(
                pd_params(&h.parameters),
                &names,
            )),
            Some(("data-parallel-profile-handler", _)) => {
                HandlerPlugin::DataParallel(dataparallel::DataParallelProfileHandler::new(&names))
            }
            Some(("header-profile-handler", h)) => {
                HandlerPlugin::Header(headerprofile::HeaderProfileHandler::new(h, &names))
            }
            _ => HandlerPlugin::Single(single::SingleProfileHandler::new(&names)),
        }
    }

    /// The decider plugin's name, for the handlers that ask one.
    pub fn decider(&self) -> Option<&str> {
        match self {
            HandlerPlugin::Disagg(h) => h.decider(),
            HandlerPlugin::Pd(h) => Some(h.decider()),
            _ => None,
        }
    }
}

impl ProfileHandler for HandlerPlugin {
    fn pick(&self, request: &RequestContext<'_>, profiles: &mut dyn Profiles) -> Option<Picked> {
        match self {
            HandlerPlugin::Single(h) => h.pick(request, profiles),
            HandlerPlugin::Disagg(h) => h.pick(request, profiles),
            HandlerPlugin::Pd(h) => h.pick(request, profiles),
            HandlerPlugin::DataParallel(h) => h.pick(request, profiles),
            HandlerPlugin::Header(h) => h.pick(request, profiles),
        }
    }
}

/// `primaryPort`: 0 (no rewrite) or a port (`pd_profile_handler.go`,
/// `dp_profile_handler.go`).
pub(crate) fn check_primary_port(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    if let Some(port) = parameters.get("primaryPort") {
        match port.as_i64() {
            Some(n) if n == 0 || (1..=65_535).contains(&n) => {}
            Some(n) => c.bad(
                "primaryPort",
                format!("invalid primaryPort: must be between 1 and 65535, got {n}"),
            ),
            None => c.bad("primaryPort", "primaryPort must be an integer"),
        }
    }
}
