//! session-affinity-scorer (`scheduling/scorer/sessionaffinity/
//! session_affinity.go`, with `util/sessionaffinity/{encoded_endpoint_header,
//! session_id_header}.go`).

use super::Scorer;
use crate::config::Plugin;
use crate::plugins::Cycle;
use crate::plugins::scheduling::util::sessionaffinity::Session;

/// The session's endpoint 1, every other candidate 0; no session, or its
/// endpoint not a candidate: 0 everywhere. pdsim's requests carry no
/// session header, so in a run every request is a new session and scores
/// 0 everywhere, as the EPP scores a client that sends none.
#[derive(Clone, Debug)]
pub(crate) struct SessionAffinityScorer {
    pub(crate) session: Session,
}

impl SessionAffinityScorer {
    pub fn new(plugin: &Plugin, profiles: &[String]) -> SessionAffinityScorer {
        SessionAffinityScorer {
            session: Session::new(plugin, profiles),
        }
    }
}

impl Scorer for SessionAffinityScorer {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        let target = self.session.target(cycle.request, cycle.ids);
        out.extend(
            candidates
                .iter()
                .map(|c| if Some(*c) == target { 1.0 } else { 0.0 }),
        );
    }

    /// Under `session_id`, `Choose` writes `boundPodPresence`: whether the
    /// bound endpoint is among the candidates.
    fn scored(&mut self, cycle: &Cycle<'_, '_>, candidates: &[usize]) {
        self.session.note_presence(cycle.request, candidates);
    }
}
