//! The Kubernetes manifests the EPP reads (`research/epp.md` §7):
//! `InferencePool`, `InferenceObjective` and `InferenceModelRewrite`; other
//! kinds are ignored, as the EPP ignores them.

use crate::RouterProblem;
use serde_yaml::{Mapping, Value};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct InferencePool {
    pub name: String,
    pub match_labels: BTreeMap<String, String>,
    pub target_ports: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct InferenceObjective {
    pub name: String,
    pub priority: i32,
    pub pool: String,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Manifests {
    pub pools: Vec<InferencePool>,
    pub objectives: Vec<InferenceObjective>,
    /// Kinds seen and ignored, for reports.
    pub ignored: Vec<String>,
}

fn keys_only(
    problems: &mut Vec<RouterProblem>,
    file: &str,
    path: &str,
    map: &Mapping,
    allowed: &[&str],
) {
    for key in map.keys() {
        let key = key.as_str().unwrap_or("?");
        if !allowed.contains(&key) {
            problems.push(RouterProblem {
                file: file.to_string(),
                path: format!("{path}.{key}"),
                code: "unknown-key",
                message: format!("unknown field `{key}`"),
            });
        }
    }
}

/// Loads every document of a manifest file.
pub fn load_manifests(file: &str, text: &str) -> Result<Manifests, Vec<RouterProblem>> {
    let mut out = Manifests::default();
    let mut problems = Vec::new();
    // Bounds the parser's work (nesting depth, alias expansion) first.
    let text = match pdsim_spec::load::check_yaml(text) {
        Ok(text) => text,
        Err(refusal) => {
            return Err(vec![RouterProblem {
                file: file.into(),
                path: String::new(),
                code: refusal.code,
                message: refusal.to_string(),
            }]);
        }
    };
    for (d, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = match Value::deserialize(document) {
            Ok(v) => v,
            Err(e) => {
                problems.push(RouterProblem {
                    file: file.into(),
                    path: format!("document {d}"),
                    code: "yaml-syntax",
                    message: e.to_string(),
                });
                break;
            }
        };
        let Some(map) = value.as_mapping() else {
            continue;
        };
        let kind = map.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = map
            .get("metadata")
            .and_then(Value::as_mapping)
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let spec = map
            .get("spec")
            .and_then(Value::as_mapping)
            .cloned()
            .unwrap_or_default();
        let at = format!("{kind}/{name}.spec");
        match kind {
            "InferencePool" => {
                keys_only(
                    &mut problems,
                    file,
                    &at,
                    &spec,
                    &[
                        "selector",
                        "targetPorts",
                        "targetPortNumber",
                        "appProtocol",
                        "endpointPickerRef",
                        "extensionRef",
                    ],
                );
                let selector = spec
                    .get("selector")
                    .and_then(Value::as_mapping)
                    .cloned()
                    .unwrap_or_default();
                // v1 nests labels under matchLabels; v1alpha2 writes them directly.
                let labels = selector
                    .get("matchLabels")
                    .and_then(Value::as_mapping)
                    .cloned()
                    .unwrap_or(selector.clone());
                let mut match_labels = BTreeMap::new();
                for (k, v) in &labels {
                    if let (Some(k), Some(v)) = (k.as_str(), v.as_str()) {
                        match_labels.insert(k.to_string(), v.to_string());
                    }
                }
                let mut target_ports: Vec<u32> = spec
                    .get("targetPorts")
                    .and_then(Value::as_sequence)
                    .into_iter()
                    .flatten()
                    .filter_map(|p| {
                        p.as_mapping()
                            .and_then(|m| m.get("number"))
                            .and_then(Value::as_u64)
                    })
                    .map(|p| p as u32)
                    .collect();
                if let Some(port) = spec.get("targetPortNumber").and_then(Value::as_u64) {
                    target_ports.push(port as u32);
                }
                if target_ports.len() > 8 {
                    problems.push(RouterProblem {
                        file: file.into(),
                        path: format!("{at}.targetPorts"),
                        code: "epp-manifest",
                        message: "an InferencePool lists at most 8 target ports".into(),
                    });
                }
                out.pools.push(InferencePool {
                    name,
                    match_labels,
                    target_ports,
                });
            }
            "InferenceObjective" => {
                keys_only(
                    &mut problems,
                    file,
                    &at,
                    &spec,
                    &["priority", "poolRef", "targetModels"],
                );
                if spec.contains_key("targetModels") {
                    problems.push(RouterProblem {
                        file: file.into(),
                        path: format!("{at}.targetModels"),
                        code: "epp-not-simulated",
                        message: "`targetModels` sends requests to LoRA adapters; pdsim serves no adapters".into(),
                    });
                }
                let priority = spec
                    .get("priority")
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
                    .clamp(i32::MIN as i64, i32::MAX as i64) as i32;
                let pool = spec
                    .get("poolRef")
                    .and_then(Value::as_mapping)
                    .and_then(|m| m.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                out.objectives.push(InferenceObjective {
                    name,
                    priority,
                    pool,
                });
            }
            "InferenceModelRewrite" => {
                problems.push(RouterProblem {
                    file: file.into(),
                    path: format!("{kind}/{name}"),
                    code: "epp-not-simulated",
                    message: "InferenceModelRewrite renames models; pdsim serves one model and does not simulate rewrites yet".into(),
                });
            }
            other => out.ignored.push(other.to_string()),
        }
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

use serde::Deserialize;
