//! topology-affinity-filter (`scheduling/filter/topologyaffinity/filter.go`).

use super::Filter;
use crate::config::Plugin;
use crate::plugins::Checks;
use crate::plugins::datalayer::topology::{self, Topology};
use crate::plugins::scheduling::util::topology::{Level, compare, peer_topology};
use crate::plugins::{Build, Cycle};
use pdsim_core::Stream;
use serde_yaml::Value;

/// Keeps the candidates co-located with the peer endpoint (the decode pick,
/// or the prefill pick in prefill-first order) at `minAffinity` (default
/// `host`) or tighter. It fails open: with no peer topology, or when no
/// candidate qualifies, every candidate stays; a candidate without the
/// attribute is dropped otherwise.
#[derive(Clone, Debug)]
pub(crate) struct TopologyAffinityFilter {
    min_affinity: Level,
    /// The attribute each endpoint carries from the extractor this filter
    /// reads (`topologyProducerName`), fixed for the run.
    topology: Vec<Option<Topology>>,
}

impl TopologyAffinityFilter {
    /// The loader has checked `minAffinity` against `ParseLevel`.
    pub fn new(plugin: &Plugin, build: &Build<'_>) -> TopologyAffinityFilter {
        TopologyAffinityFilter {
            min_affinity: plugin
                .parameters
                .get("minAffinity")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .and_then(Level::parse)
                .unwrap_or(Level::Host),
            topology: topology::consumed_by(plugin, build),
        }
    }
}

impl Filter for TopologyAffinityFilter {
    fn filter(&mut self, cycle: &Cycle<'_, '_>, _rng: &mut Stream, candidates: &mut Vec<usize>) {
        let Some(peer) = peer_topology(cycle.peer, &self.topology) else {
            return;
        };
        let kept: Vec<usize> = candidates
            .iter()
            .copied()
            // A candidate without the attribute compares as `Level::None`,
            // looser than any `minAffinity`, so it is dropped.
            .filter(|e| compare(Some(peer), self.topology[*e].as_ref()) <= self.min_affinity)
            .collect();
        if !kept.is_empty() {
            *candidates = kept;
        }
    }
}

/// `topologyaffinity.Factory` (filter): an empty level is `host`, anything
/// else must be a level `ParseLevel` knows.
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    if let Some(serde_yaml::Value::String(level)) = parameters.get("minAffinity")
        && !level.is_empty()
        && crate::plugins::scheduling::util::topology::Level::parse(level).is_none()
    {
        c.bad(
            "minAffinity",
            format!("invalid topology level {level:?}, must be one of host, rack, zone, region"),
        );
    }
}
