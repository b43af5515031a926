//! single-profile-handler
//! (`scheduling/profilehandler/single/single_profile_handler.go`).

use super::{Picked, ProfileHandler, Profiles};
use crate::cycle::RequestContext;

/// Runs the one profile.
#[derive(Clone, Debug)]
pub(crate) struct SingleProfileHandler {
    /// The first profile; `None` when there is none.
    profile: Option<usize>,
}

impl SingleProfileHandler {
    pub fn new(names: &[String]) -> SingleProfileHandler {
        SingleProfileHandler {
            profile: (!names.is_empty()).then_some(0),
        }
    }
}

impl ProfileHandler for SingleProfileHandler {
    fn pick(&self, _request: &RequestContext<'_>, profiles: &mut dyn Profiles) -> Option<Picked> {
        let profile = self.profile?;
        let target = profiles.run(profile, None)?;
        Some(Picked {
            primary: profile,
            target,
            other: None,
        })
    }
}
