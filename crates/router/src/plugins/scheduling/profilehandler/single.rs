//! single-profile-handler
//! (`scheduling/profilehandler/single/single_profile_handler.go`).

use super::{Picked, ProfileHandler, Profiles};
use crate::cycle::RequestContext;

/// Runs the one profile.
#[derive(Clone, Debug)]
pub(crate) struct SingleProfileHandler {
    /// The first profile's name; empty when there is none.
    profile: String,
}

impl SingleProfileHandler {
    pub fn new(names: &[String]) -> SingleProfileHandler {
        SingleProfileHandler {
            profile: names.first().cloned().unwrap_or_default(),
        }
    }
}

impl ProfileHandler for SingleProfileHandler {
    fn pick(&self, _request: &RequestContext<'_>, profiles: &mut dyn Profiles) -> Option<Picked> {
        let target = profiles.run(&self.profile, None)?;
        Some(Picked {
            primary: self.profile.clone(),
            target,
            other: None,
        })
    }
}
