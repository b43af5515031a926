//! session-affinity-filter (`scheduling/filter/sessionaffinity/
//! {encoded_endpoint_header,session_id_header}.go`, with
//! `util/sessionaffinity`).

use super::Filter;
use crate::config::Plugin;
use crate::plugins::Cycle;
use crate::plugins::scheduling::util::sessionaffinity::Session;
use pdsim_core::Stream;

/// The session's endpoint alone when it is among the candidates, else
/// every candidate, so the set never empties. Under `session_id` its
/// `Choose` records whether the bound endpoint was a candidate, which
/// decides a rebind at PreRequest. pdsim's requests carry no session
/// header: the filter passes every candidate and binds nothing, as the EPP
/// does for a client that sends none.
#[derive(Clone, Debug)]
pub(crate) struct SessionAffinityFilter {
    pub(crate) session: Session,
}

impl SessionAffinityFilter {
    pub fn new(plugin: &Plugin, profiles: &[String]) -> SessionAffinityFilter {
        SessionAffinityFilter {
            session: Session::new(plugin, profiles),
        }
    }
}

impl Filter for SessionAffinityFilter {
    fn filter(&mut self, cycle: &Cycle<'_, '_>, _rng: &mut Stream, candidates: &mut Vec<usize>) {
        self.session.note_presence(cycle.request, candidates);
        if let Some(target) = self.session.target(cycle.request, cycle.ids)
            && candidates.contains(&target)
        {
            *candidates = vec![target];
        }
    }
}
