//! topology-extractor (`datalayer/extractor/topology/extractor.go`) and the
//! `Topology` attribute it stamps on each endpoint
//! (`datalayer/attribute/topology/data_types.go`).
//!
//! The extractor reads four pod labels, each name configurable, defaulting
//! to the Kubernetes topology labels. A pdsim pod's labels are its pool's
//! `labels` (plus `llm-d.ai/role`), as the pool's pod template sets them,
//! so every pod of a pool has the same topology. When the hostname label is
//! absent the EPP falls back to the Pod's `spec.hostname`; a deployment
//! document has no pod spec (its labels restate the template, seed
//! document, `pools[].labels`), so there is no fallback value here, which
//! is what the EPP sees of a pod template that sets no `hostname`.

use crate::config::Plugin;
use crate::plugins::Build;
use serde_yaml::Value;
use std::collections::BTreeMap;

/// The plugin type, and the default producer name a consumer reads
/// (`attrtopology.TopologyExtractorType`, `TopologyAttributeKey`).
pub(crate) const TYPE: &str = "topology-extractor";

/// An endpoint's locality (`attrtopology.Topology`); an empty field is
/// unknown.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Topology {
    pub hostname: String,
    pub rack: String,
    pub zone: String,
    pub region: String,
}

/// One configured extractor: the label each field is read from.
#[derive(Clone, Debug)]
pub(crate) struct TopologyExtractor {
    hostname: String,
    rack: String,
    zone: String,
    region: String,
}

impl TopologyExtractor {
    /// The extractor `plugin` configures, with the factory's defaults for
    /// empty or absent label names (`defaultHostnameLabel` and the rest).
    pub fn new(plugin: &Plugin) -> TopologyExtractor {
        let label = |key: &str, default: &str| {
            plugin
                .parameters
                .get(key)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or(default)
                .to_string()
        };
        TopologyExtractor {
            hostname: label("hostname", "kubernetes.io/hostname"),
            rack: label("rack", "topology.kubernetes.io/rack"),
            zone: label("zone", "topology.kubernetes.io/zone"),
            region: label("region", "topology.kubernetes.io/region"),
        }
    }

    /// The attribute for a pod with these labels: none when every field is
    /// empty (`endpointHandler.Extract` puts nothing then).
    pub fn extract(&self, labels: &BTreeMap<String, String>) -> Option<Topology> {
        let get = |key: &String| labels.get(key).cloned().unwrap_or_default();
        let topology = Topology {
            hostname: get(&self.hostname),
            rack: get(&self.rack),
            zone: get(&self.zone),
            region: get(&self.region),
        };
        (topology != Topology::default()).then_some(topology)
    }
}

/// The `Topology` attribute a consumer reads, per endpoint: the one written
/// by the extractor named `producer` (`topologyProducerName`, default the
/// producer `topology-extractor`; an extractor writes under its own
/// instance name, `WithNonEmptyProducerName(name)`), or none on every
/// endpoint when no such extractor is configured (the consumers declare the
/// attribute an optional dependency, so the EPP only warns).
pub(crate) fn read(
    plugins: &[Plugin],
    producer: Option<&str>,
    labels: &[BTreeMap<String, String>],
) -> Vec<Option<Topology>> {
    let producer = producer.filter(|s| !s.is_empty()).unwrap_or(TYPE);
    let extractor = plugins
        .iter()
        .find(|p| p.plugin_type == TYPE && p.name == producer)
        .map(TopologyExtractor::new);
    labels
        .iter()
        .map(|l| extractor.as_ref().and_then(|e| e.extract(l)))
        .collect()
}

/// What the consumer `plugin` (topology-affinity-filter or -scorer) reads,
/// by its `topologyProducerName`.
pub(crate) fn consumed_by(plugin: &Plugin, build: &Build<'_>) -> Vec<Option<Topology>> {
    let producer = plugin
        .parameters
        .get("topologyProducerName")
        .and_then(Value::as_str);
    read(build.plugins, producer, build.labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plugin(parameters: &str) -> Plugin {
        Plugin {
            name: TYPE.to_string(),
            plugin_type: TYPE.to_string(),
            parameters: serde_yaml::from_str(parameters).unwrap(),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_default_labels_are_the_kubernetes_topology_labels() {
        let e = TopologyExtractor::new(&plugin("{}"));
        let t = e
            .extract(&labels(&[
                ("kubernetes.io/hostname", "node-a"),
                ("topology.kubernetes.io/rack", "r1"),
                ("topology.kubernetes.io/zone", "z1"),
                ("topology.kubernetes.io/region", "eu"),
                ("llm-d.ai/role", "decode"),
            ]))
            .unwrap();
        assert_eq!(
            t,
            Topology {
                hostname: "node-a".into(),
                rack: "r1".into(),
                zone: "z1".into(),
                region: "eu".into()
            }
        );
    }

    #[test]
    fn configured_label_names_replace_the_defaults_and_no_field_means_no_attribute() {
        let e = TopologyExtractor::new(&plugin("{zone: my/zone, hostname: ''}"));
        // The default zone label is no longer read; an empty name keeps
        // the default hostname label.
        assert_eq!(
            e.extract(&labels(&[("topology.kubernetes.io/zone", "z1")])),
            None
        );
        let t = e
            .extract(&labels(&[
                ("my/zone", "z2"),
                ("kubernetes.io/hostname", "h"),
            ]))
            .unwrap();
        assert_eq!((t.zone.as_str(), t.hostname.as_str()), ("z2", "h"));
        assert_eq!(e.extract(&labels(&[("llm-d.ai/role", "decode")])), None);
    }

    #[test]
    fn a_consumer_reads_only_the_extractor_it_names() {
        let mut named = plugin("{}");
        named.name = "topo".to_string();
        let l = vec![labels(&[("topology.kubernetes.io/zone", "z1")])];
        // The default key is Topology/topology-extractor: an extractor
        // named otherwise writes a key it does not read.
        assert_eq!(read(std::slice::from_ref(&named), None, &l), vec![None]);
        assert!(read(std::slice::from_ref(&named), Some("topo"), &l)[0].is_some());
        assert!(read(&[plugin("{}")], Some(""), &l)[0].is_some());
        assert_eq!(read(&[], None, &l), vec![None]);
    }
}
