//! topology-affinity-scorer (`scheduling/scorer/topologyaffinity/scorer.go`).

use super::Scorer;
use crate::config::Plugin;
use crate::plugins::datalayer::topology::{self, Topology};
use crate::plugins::scheduling::util::topology::{Level, compare, peer_topology};
use crate::plugins::{Build, Cycle};

/// The score of the tightest tier a candidate shares with the peer
/// (`levelScores`, fixed in the Go source: shaped by the KV-transfer
/// bandwidth of each tier, NVLink within a host).
fn level_score(level: Level) -> f64 {
    match level {
        Level::Host => 1.00,
        Level::Rack => 0.20,
        Level::Zone => 0.05,
        Level::Region => 0.02,
        Level::None => 0.00,
    }
}

/// Grades each candidate by its proximity to the peer endpoint; 0 for
/// every candidate without peer topology, and for a candidate without the
/// attribute.
#[derive(Clone, Debug)]
pub(crate) struct TopologyAffinityScorer {
    topology: Vec<Option<Topology>>,
}

impl TopologyAffinityScorer {
    pub fn new(plugin: &Plugin, build: &Build<'_>) -> TopologyAffinityScorer {
        TopologyAffinityScorer {
            topology: topology::consumed_by(plugin, build),
        }
    }
}

impl Scorer for TopologyAffinityScorer {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        let peer = peer_topology(cycle.peer, &self.topology);
        out.extend(candidates.iter().map(|e| match peer {
            None => 0.0,
            Some(p) => level_score(compare(Some(p), self.topology[*e].as_ref())),
        }));
    }
}
