//! data-parallel-profile-handler
//! (`scheduling/profilehandler/dataparallel/dp_profile_handler.go`).

use super::{Picked, ProfileHandler, Profiles};
use crate::cycle::RequestContext;

/// Exactly one profile, else its Pick returns nothing and the request
/// fails. The picked endpoint is the data-parallel rank, named to the
/// sidecar by `x-data-parallel-host-port` while the destination port is
/// rewritten to `primaryPort`. The sidecar forwards to that rank
/// (`pkg/sidecar/proxy/data_parallel.go`), so the request runs on the
/// endpoint picked, as pdsim's endpoints already are ranks (or the pod's
/// internally balanced group of them).
#[derive(Clone, Debug)]
pub(crate) struct DataParallelProfileHandler {
    /// The lone profile; `None` when there are none or several.
    profile: Option<usize>,
}

impl DataParallelProfileHandler {
    pub fn new(names: &[String]) -> DataParallelProfileHandler {
        DataParallelProfileHandler {
            profile: (names.len() == 1).then_some(0),
        }
    }
}

impl ProfileHandler for DataParallelProfileHandler {
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
