//! `scheduling/filter/`: each filter narrows the profile's candidates; the
//! chain stops when one empties the set (`scheduler_profile.go`,
//! `runFilterPlugins`).

mod bylabel;
mod contextlengthaware;
pub(crate) mod endpointattribute;
pub(crate) mod prefixcacheaffinity;
pub(crate) mod sessionaffinity;
pub(crate) mod topologyaffinity;
pub(crate) mod utilization;

use crate::config::Plugin;
use crate::plugins::{Build, Cycle, PrefixSource};
use pdsim_core::Stream;

/// A filter's extension point (`framework.Filter`).
pub(crate) trait Filter {
    /// Narrows `candidates` (endpoint indices, in order); `rng` is the
    /// router's one seeded stream.
    fn filter(&mut self, cycle: &Cycle<'_, '_>, rng: &mut Stream, candidates: &mut Vec<usize>);
}

/// One configured filter instance, by type.
#[derive(Clone, Debug)]
pub(crate) enum FilterPlugin {
    ByLabel(bylabel::ByLabelFilter),
    ContextLengthAware(contextlengthaware::ContextLengthAwareFilter),
    PrefixCacheAffinity(prefixcacheaffinity::PrefixCacheAffinityFilter),
    SessionAffinity(sessionaffinity::SessionAffinityFilter),
    TopologyAffinity(topologyaffinity::TopologyAffinityFilter),
    Utilization(utilization::UtilizationFilter),
    EndpointAttribute(endpointattribute::EndpointAttributeFilter),
    /// A plugin that filters nothing pdsim runs (the loader has refused
    /// every filter type it does not simulate): every candidate stays.
    PassAll,
}

impl FilterPlugin {
    /// The filter `plugin` configures; `source` is whose prefix match info
    /// it would read.
    pub fn new(plugin: &Plugin, build: &Build<'_>, source: PrefixSource) -> FilterPlugin {
        if let Some(filter) = bylabel::ByLabelFilter::new(plugin, build.labels) {
            return FilterPlugin::ByLabel(filter);
        }
        match plugin.plugin_type.as_str() {
            "context-length-aware" => FilterPlugin::ContextLengthAware(
                contextlengthaware::ContextLengthAwareFilter::new(plugin),
            ),
            "prefix-cache-affinity-filter" => FilterPlugin::PrefixCacheAffinity(
                prefixcacheaffinity::PrefixCacheAffinityFilter::new(plugin, source),
            ),
            "session-affinity-filter" => FilterPlugin::SessionAffinity(
                sessionaffinity::SessionAffinityFilter::new(plugin, build.profiles),
            ),
            "topology-affinity-filter" => FilterPlugin::TopologyAffinity(
                topologyaffinity::TopologyAffinityFilter::new(plugin, build),
            ),
            "utilization-filter" => {
                FilterPlugin::Utilization(utilization::UtilizationFilter::new(plugin))
            }
            "endpoint-attribute-filter" => FilterPlugin::EndpointAttribute(
                endpointattribute::EndpointAttributeFilter::new(plugin, build.plugins),
            ),
            _ => FilterPlugin::PassAll,
        }
    }
}

impl Filter for FilterPlugin {
    fn filter(&mut self, cycle: &Cycle<'_, '_>, rng: &mut Stream, candidates: &mut Vec<usize>) {
        match self {
            FilterPlugin::ByLabel(f) => f.filter(cycle, rng, candidates),
            FilterPlugin::ContextLengthAware(f) => f.filter(cycle, rng, candidates),
            FilterPlugin::PrefixCacheAffinity(f) => f.filter(cycle, rng, candidates),
            FilterPlugin::SessionAffinity(f) => f.filter(cycle, rng, candidates),
            FilterPlugin::TopologyAffinity(f) => f.filter(cycle, rng, candidates),
            FilterPlugin::Utilization(f) => f.filter(cycle, rng, candidates),
            FilterPlugin::EndpointAttribute(f) => f.filter(cycle, rng, candidates),
            FilterPlugin::PassAll => {}
        }
    }
}
