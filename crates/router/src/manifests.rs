//! The Kubernetes manifests the EPP reads (`research/epp.md` §7):
//! `InferencePool`, `InferenceObjective` and `InferenceModelRewrite`; other
//! kinds are ignored, as the EPP ignores them.

use crate::RouterProblem;
use pdsim_spec::lines::LineIndex;
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
                line: None,
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
    // Built only when a document has a problem to locate.
    let mut lines: Option<Vec<LineIndex>> = None;
    for (d, document) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let value = match Value::deserialize(document) {
            Ok(v) => v,
            Err(e) => {
                problems.push(RouterProblem {
                    file: file.into(),
                    path: format!("document {d}"),
                    line: e
                        .location()
                        .map(|l| u32::try_from(l.line()).unwrap_or(u32::MAX)),
                    code: "yaml-syntax",
                    message: e.to_string(),
                });
                break;
            }
        };
        let first_of_document = problems.len();
        let Some(map) = value.as_mapping() else {
            // An empty document (`---` at the end) is nothing; anything
            // else that is not an object is not a manifest kubectl applies.
            if !value.is_null() {
                problems.push(RouterProblem {
                    file: file.into(),
                    path: format!("document {d}"),
                    line: None,
                    code: "epp-manifest",
                    message: format!(
                        "document {d} is {}, not a Kubernetes object (a mapping with apiVersion, kind, metadata and spec)",
                        yaml_type(&value)
                    ),
                });
                locate(&mut problems[first_of_document..], &mut lines, text, d, "");
            }
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
        let prefix = format!("{kind}/{name}");
        let at = format!("{prefix}.spec");
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
                        line: None,
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
                        line: None,
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
                    line: None,
                    code: "epp-not-simulated",
                    message: "InferenceModelRewrite renames models; pdsim serves one model and does not simulate rewrites yet".into(),
                });
            }
            other => out.ignored.push(other.to_string()),
        }
        locate(
            &mut problems[first_of_document..],
            &mut lines,
            text,
            d,
            &prefix,
        );
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

use serde::Deserialize;

/// What a YAML value is, for messages.
pub(crate) fn yaml_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// Gives each problem of document `d` the line of its key path. A
/// problem's path is `prefix` (`InferencePool/name`) then the path inside
/// the document (`.spec.targetPorts`); the bare prefix is the document.
fn locate(
    problems: &mut [RouterProblem],
    lines: &mut Option<Vec<LineIndex>>,
    text: &str,
    d: usize,
    prefix: &str,
) {
    if problems.is_empty() {
        return;
    }
    let documents = lines.get_or_insert_with(|| LineIndex::build_documents(text));
    let Some(index) = documents.get(d) else {
        return;
    };
    for problem in problems.iter_mut().filter(|p| p.line.is_none()) {
        let inner = problem
            .path
            .strip_prefix(prefix)
            .filter(|_| !prefix.is_empty())
            .map_or("", |rest| rest.trim_start_matches('.'));
        problem.line = index.line_of(inner).or_else(|| index.line_of(""));
    }
}
