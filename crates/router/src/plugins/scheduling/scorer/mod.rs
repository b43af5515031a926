//! `scheduling/scorer/`: each scorer gives every candidate a score; the
//! profile sums them by weight, each clamped to [0, 1] first
//! (`scheduler_profile.go`, `runScorerPlugins`, `enforceScoreRange`).

mod activerequest;
pub(crate) mod contextlengthaware;
pub(crate) mod endpointattribute;
pub(crate) mod headerlabelaffinity;
mod kvcacheutilization;
mod loadaware;
mod loraaffinity;
pub(crate) mod nohitlru;
mod prefix;
mod queuedepth;
mod runningrequests;
pub(crate) mod sessionaffinity;
mod tokenload;
mod topologyaffinity;

use crate::config::Plugin;
use crate::plugins::{Build, Cycle, PrefixSource};

/// A scorer's extension point (`framework.Scorer`).
pub(crate) trait Scorer {
    /// Scores each candidate, in order, into `out` (left empty on entry).
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>);

    /// What the scorer leaves in its per-request plugin state when it has
    /// scored these candidates; most keep none.
    fn scored(&mut self, _cycle: &Cycle<'_, '_>, _candidates: &[usize]) {}
}

/// One configured scorer instance, by type. An enum rather than boxed trait
/// objects: the set is closed, and the cycle calls it per request.
#[derive(Clone, Debug)]
pub(crate) enum ScorerPlugin {
    Queue(queuedepth::QueueScorer),
    RunningRequests(runningrequests::RunningRequestsScorer),
    KvCacheUtilization(kvcacheutilization::KvCacheUtilizationScorer),
    LoadAware(loadaware::LoadAwareScorer),
    LoraAffinity(loraaffinity::LoraAffinityScorer),
    TokenLoad(tokenload::TokenLoadScorer),
    ActiveRequest(activerequest::ActiveRequestScorer),
    NoHitLru(nohitlru::NoHitLruScorer),
    Prefix(prefix::PrefixScorer),
    ContextLengthAware(contextlengthaware::ContextLengthAwareScorer),
    SessionAffinity(sessionaffinity::SessionAffinityScorer),
    TopologyAffinity(topologyaffinity::TopologyAffinityScorer),
    HeaderLabelAffinity(headerlabelaffinity::HeaderLabelAffinityScorer),
    EndpointAttribute(endpointattribute::EndpointAttributeScorer),
    /// A plugin that is no scorer pdsim runs (the loader has refused every
    /// scorer type it does not simulate): every candidate scores 0.
    Zero,
}

impl ScorerPlugin {
    /// The scorer `plugin` configures; `source` is whose prefix match
    /// info it would read.
    pub fn new(plugin: &Plugin, build: &Build<'_>, source: PrefixSource) -> ScorerPlugin {
        match plugin.plugin_type.as_str() {
            "queue-scorer" => ScorerPlugin::Queue(queuedepth::QueueScorer),
            "running-requests-size-scorer" => {
                ScorerPlugin::RunningRequests(runningrequests::RunningRequestsScorer)
            }
            "kv-cache-utilization-scorer" => {
                ScorerPlugin::KvCacheUtilization(kvcacheutilization::KvCacheUtilizationScorer)
            }
            "load-aware-scorer" => ScorerPlugin::LoadAware(loadaware::LoadAwareScorer::new(plugin)),
            "lora-affinity-scorer" => ScorerPlugin::LoraAffinity(loraaffinity::LoraAffinityScorer),
            "token-load-scorer" => ScorerPlugin::TokenLoad(tokenload::TokenLoadScorer::new(plugin)),
            "active-request-scorer" => {
                ScorerPlugin::ActiveRequest(activerequest::ActiveRequestScorer::new(plugin))
            }
            "no-hit-lru-scorer" => {
                ScorerPlugin::NoHitLru(nohitlru::NoHitLruScorer::new(plugin, source))
            }
            "prefix-cache-scorer" | "precise-prefix-cache-scorer" => {
                ScorerPlugin::Prefix(prefix::PrefixScorer::new(plugin, source))
            }
            "context-length-aware" => ScorerPlugin::ContextLengthAware(
                contextlengthaware::ContextLengthAwareScorer::new(plugin),
            ),
            "session-affinity-scorer" => ScorerPlugin::SessionAffinity(
                sessionaffinity::SessionAffinityScorer::new(plugin, build.profiles),
            ),
            "topology-affinity-scorer" => ScorerPlugin::TopologyAffinity(
                topologyaffinity::TopologyAffinityScorer::new(plugin, build),
            ),
            "header-label-affinity-scorer" => ScorerPlugin::HeaderLabelAffinity(
                headerlabelaffinity::HeaderLabelAffinityScorer::new(plugin),
            ),
            "endpoint-attribute-scorer" => ScorerPlugin::EndpointAttribute(
                endpointattribute::EndpointAttributeScorer::new(plugin, build.plugins),
            ),
            _ => ScorerPlugin::Zero,
        }
    }

    fn inner(&self) -> Option<&dyn Scorer> {
        Some(match self {
            ScorerPlugin::Queue(s) => s,
            ScorerPlugin::RunningRequests(s) => s,
            ScorerPlugin::KvCacheUtilization(s) => s,
            ScorerPlugin::LoadAware(s) => s,
            ScorerPlugin::LoraAffinity(s) => s,
            ScorerPlugin::TokenLoad(s) => s,
            ScorerPlugin::ActiveRequest(s) => s,
            ScorerPlugin::NoHitLru(s) => s,
            ScorerPlugin::Prefix(s) => s,
            ScorerPlugin::ContextLengthAware(s) => s,
            ScorerPlugin::SessionAffinity(s) => s,
            ScorerPlugin::TopologyAffinity(s) => s,
            ScorerPlugin::HeaderLabelAffinity(s) => s,
            ScorerPlugin::EndpointAttribute(s) => s,
            ScorerPlugin::Zero => return None,
        })
    }
}

impl Scorer for ScorerPlugin {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        out.clear();
        match self.inner() {
            Some(scorer) => scorer.score(cycle, candidates, out),
            None => out.resize(candidates.len(), 0.0),
        }
    }

    fn scored(&mut self, cycle: &Cycle<'_, '_>, candidates: &[usize]) {
        match self {
            ScorerPlugin::NoHitLru(s) => s.scored(cycle, candidates),
            ScorerPlugin::SessionAffinity(s) => s.scored(cycle, candidates),
            _ => {}
        }
    }
}

/// Min-max over the candidates' values, the lowest 1 and the highest 0; all
/// equal: 1 everywhere (`scorer/queuedepth/queue.go`,
/// `scorer/runningrequests/runningrequest.go`).
fn min_max(values: impl Iterator<Item = f64>, out: &mut Vec<f64>) {
    // The values are collected into `out` and normalised in place: a
    // vector of its own per call cost an allocation over every endpoint.
    let start = out.len();
    out.extend(values);
    let (lo, hi) = out[start..]
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(*v), hi.max(*v)));
    for v in &mut out[start..] {
        *v = if hi > lo { (hi - *v) / (hi - lo) } else { 1.0 };
    }
}
