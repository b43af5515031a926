//! The label filters of `scheduling/filter/bylabel/`: label-selector-filter
//! (and its alias by-label-selector, `selector.go`), by-label
//! (`filter.go`), decode-filter and prefill-filter (`roles.go`).

use super::Filter;
use crate::config::Plugin;
use crate::plugins::Cycle;
use crate::role;
use pdsim_core::Stream;
use serde_yaml::Value;
use std::collections::BTreeMap;

/// A filter that reads only the endpoints' labels. Labels are fixed for a
/// run, so whether it keeps each endpoint is decided once, at build.
#[derive(Clone, Debug)]
pub(crate) struct ByLabelFilter {
    keeps: Vec<bool>,
}

impl ByLabelFilter {
    /// `None` when `plugin` is no label filter.
    pub fn new(plugin: &Plugin, labels: &[BTreeMap<String, String>]) -> Option<ByLabelFilter> {
        label_filter_passes(plugin, &BTreeMap::new())?;
        Some(ByLabelFilter {
            keeps: labels
                .iter()
                .map(|l| label_filter_passes(plugin, l) == Some(true))
                .collect(),
        })
    }
}

impl Filter for ByLabelFilter {
    fn filter(&mut self, _cycle: &Cycle<'_, '_>, _rng: &mut Stream, candidates: &mut Vec<usize>) {
        candidates.retain(|e| self.keeps[*e]);
    }
}

/// Whether a filter that reads only the endpoint's labels keeps an
/// endpoint with `labels`; `None` for every other filter type. Labels are
/// fixed for a run, so [`ByLabelFilter::new`] evaluates these once per
/// endpoint.
fn label_filter_passes(plugin: &Plugin, labels: &BTreeMap<String, String>) -> Option<bool> {
    let p = &plugin.parameters;
    Some(match plugin.plugin_type.as_str() {
        // A Kubernetes LabelSelector (`filter/bylabel/selector.go`): every
        // matchLabels pair and every matchExpressions requirement must hold.
        "label-selector-filter" | "by-label-selector" => {
            let labels_ok = p
                .get("matchLabels")
                .and_then(Value::as_mapping)
                .is_none_or(|m| {
                    m.iter().all(|(k, v)| {
                        labels.get(k.as_str().unwrap_or("")).map(String::as_str) == v.as_str()
                    })
                });
            let expressions_ok = p
                .get("matchExpressions")
                .and_then(Value::as_sequence)
                .is_none_or(|list| {
                    list.iter().all(|e| {
                        let key = e.get("key").and_then(Value::as_str).unwrap_or("");
                        let values: Vec<&str> = e
                            .get("values")
                            .and_then(Value::as_sequence)
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .collect();
                        let value = labels.get(key).map(String::as_str);
                        match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                            "In" => value.is_some_and(|v| values.contains(&v)),
                            "NotIn" => value.is_none_or(|v| !values.contains(&v)),
                            "Exists" => value.is_some(),
                            "DoesNotExist" => value.is_none(),
                            _ => false,
                        }
                    })
                });
            labels_ok && expressions_ok
        }
        // by-label (`filter/bylabel/filter.go`): keep a listed value, or an
        // absent label when allowed.
        "by-label" => {
            let key = p.get("label").and_then(Value::as_str).unwrap_or("");
            let allow_none = p
                .get("allowsNoLabel")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            match labels.get(key) {
                None => allow_none,
                Some(v) => p
                    .get("validValues")
                    .and_then(Value::as_sequence)
                    .is_some_and(|vals| vals.iter().any(|x| x.as_str() == Some(v.as_str()))),
            }
        }
        // `NewDecodeRole` / `NewPrefillRole` (`filter/bylabel/roles.go`).
        "decode-filter" => role::decode(labels),
        "prefill-filter" => role::prefill(labels),
        _ => return None,
    })
}
