//! The Kubernetes manifests the EPP reads (`research/epp.md` §7):
//! `InferencePool`, `InferenceObjective` and `InferenceModelRewrite`; other
//! kinds are ignored, as the EPP ignores them.

use crate::RouterProblem;
use crate::config::GoType;
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
    // Bounds the parser's work (nesting depth, alias expansion) first.
    let text = match pdsim_spec::load::check_yaml(text) {
        Ok(text) => text,
        Err(refusal) => {
            return Err(vec![RouterProblem {
                file: file.into(),
                path: String::new(),
                line: refusal.line,
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
        let mut non_finite = Vec::new();
        non_finite_numbers(&value, "", &mut non_finite);
        let mut wrong = |path: String, message: String| {
            problems.push(RouterProblem {
                file: file.into(),
                path,
                line: None,
                code: "wrong-type",
                message,
            });
        };
        let document = format!("document {d}");
        if !non_finite.is_empty() {
            // The document does not convert to JSON, so nothing in it is
            // read (`kubectl` stops at the same conversion).
            for (path, number) in non_finite {
                wrong(format!("{document}.{path}"), non_finite_message(number));
            }
            locate(&mut problems[first_of_document..], &mut lines, text, d, "");
            continue;
        }
        // The fields pdsim reads, typed as the Kubernetes API types them
        // (`metadata.name` a string, `spec` an object).
        if let Some(v) = map.get("kind").filter(|v| !v.is_string()) {
            wrong(
                format!("{document}.kind"),
                format!("kind must be a string, not {}", yaml_type(v)),
            );
        }
        if let Some(v) = map
            .get("metadata")
            .filter(|v| !(v.is_mapping() || v.is_null()))
        {
            wrong(
                format!("{document}.metadata"),
                format!("metadata must be a mapping, not {}", yaml_type(v)),
            );
        }
        if let Some(v) = map
            .get("metadata")
            .and_then(|m| m.get("name"))
            .filter(|v| !v.is_string())
        {
            wrong(
                format!("{document}.metadata.name"),
                format!("metadata.name must be a string, not {}", yaml_type(v)),
            );
        }
        if let Some(v) = map.get("spec").filter(|v| !(v.is_mapping() || v.is_null())) {
            wrong(
                format!("{document}.spec"),
                format!("spec must be a mapping, not {}", yaml_type(v)),
            );
        }
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
                let labels_at = if selector.contains_key("matchLabels") {
                    format!("{at}.selector.matchLabels")
                } else {
                    format!("{at}.selector")
                };
                let mut match_labels = BTreeMap::new();
                for (k, v) in &labels {
                    match (k.as_str(), v.as_str()) {
                        (Some(k), Some(v)) => {
                            match_labels.insert(k.to_string(), v.to_string());
                        }
                        // A label value is a string in the API; 8000 or
                        // true must be quoted.
                        _ => problems.push(RouterProblem {
                            file: file.into(),
                            path: format!("{labels_at}.{}", quoted(k)),
                            line: None,
                            code: "wrong-type",
                            message: format!(
                                "a label is a string key with a string value; this one's value is {}",
                                yaml_type(v)
                            ),
                        }),
                    }
                }
                // `PortNumber`: an int32 the CRD bounds to 1..=65535.
                let mut port_of = |value: Option<&Value>, path: String| -> Option<u32> {
                    let value = value?;
                    let port = value
                        .as_i64()
                        .filter(|p| (1..=65_535).contains(p))
                        .filter(|_| crate::config::go_accepts(GoType::Int, value));
                    if port.is_none() {
                        problems.push(RouterProblem {
                            file: file.into(),
                            path,
                            line: None,
                            code: "wrong-type",
                            message: format!(
                                "a target port is an integer from 1 to 65535, not {}",
                                match value {
                                    Value::Number(_) | Value::String(_) => quoted(value),
                                    other => yaml_type(other).to_string(),
                                }
                            ),
                        });
                    }
                    port.map(|p| p as u32)
                };
                let mut target_ports: Vec<u32> = Vec::new();
                match spec.get("targetPorts") {
                    None | Some(Value::Null) => {}
                    Some(Value::Sequence(list)) => {
                        for (i, entry) in list.iter().enumerate() {
                            let path = format!("{at}.targetPorts[{i}].number");
                            let number = entry.as_mapping().and_then(|m| m.get("number"));
                            let number = number.or(Some(&Value::Null));
                            if let Some(port) = port_of(number, path) {
                                target_ports.push(port);
                            }
                        }
                    }
                    Some(other) => {
                        // Not a list: refused, and no port is taken from it.
                        let _ = port_of(Some(other), format!("{at}.targetPorts"));
                    }
                }
                if let Some(port) = port_of(
                    spec.get("targetPortNumber"),
                    format!("{at}.targetPortNumber"),
                ) {
                    target_ports.push(port);
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
                    // `InferenceObjectiveSpec` (`apix/v1alpha2/
                    // inferenceobjective_types.go`) has these two fields and
                    // no other; `targetModels` was the retired InferenceModel
                    // CRD's, and the API server's strict decoding refuses it
                    // as any unknown field.
                    &["priority", "poolRef"],
                );
                // `Priority *int`; omitted or null is 0.
                let priority_value = spec.get("priority").unwrap_or(&Value::Null);
                if !crate::config::go_accepts(GoType::Int, priority_value) {
                    problems.push(RouterProblem {
                        file: file.into(),
                        path: format!("{at}.priority"),
                        line: None,
                        code: "wrong-type",
                        message: format!(
                            "priority must be an integer, not {}",
                            match priority_value {
                                Value::Number(_) | Value::String(_) => quoted(priority_value),
                                other => yaml_type(other).to_string(),
                            }
                        ),
                    });
                }
                let priority = priority_value
                    .as_i64()
                    .or_else(|| priority_value.as_f64().map(|f| f as i64))
                    .unwrap_or(0)
                    .clamp(i32::MIN as i64, i32::MAX as i64) as i32;
                let pool_ref = spec.get("poolRef").unwrap_or(&Value::Null);
                let pool_name = pool_ref.get("name").unwrap_or(&Value::Null);
                if !(pool_ref.is_mapping() || pool_ref.is_null())
                    || !(pool_name.is_string() || pool_name.is_null())
                {
                    problems.push(RouterProblem {
                        file: file.into(),
                        path: format!("{at}.poolRef"),
                        line: None,
                        code: "wrong-type",
                        message: "poolRef is a mapping whose name is a string".into(),
                    });
                }
                let pool = pool_name.as_str().unwrap_or("").to_string();
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

/// Every NaN or infinity in `value`, with its key path under `path`.
/// Kubernetes objects and the EPP's configuration are JSON once decoded,
/// and JSON has no such numbers.
pub(crate) fn non_finite_numbers(value: &Value, path: &str, out: &mut Vec<(String, f64)>) {
    match value {
        Value::Number(n) => {
            if let Some(f) = n.as_f64().filter(|f| !f.is_finite()) {
                out.push((path.to_string(), f));
            }
        }
        Value::Sequence(items) => {
            for (i, item) in items.iter().enumerate() {
                non_finite_numbers(item, &format!("{path}[{i}]"), out);
            }
        }
        Value::Mapping(map) => {
            for (key, item) in map {
                let key = key.as_str().map_or_else(|| quoted(key), str::to_string);
                let child = if path.is_empty() {
                    key
                } else {
                    format!("{path}.{key}")
                };
                non_finite_numbers(item, &child, out);
            }
        }
        Value::Tagged(tagged) => non_finite_numbers(&tagged.value, path, out),
        _ => {}
    }
}

pub(crate) fn non_finite_message(number: f64) -> String {
    let written = if number.is_nan() {
        ".nan"
    } else if number > 0.0 {
        ".inf (or a number too large for a float64)"
    } else {
        "-.inf (or a number too large for a float64)"
    };
    format!(
        "{written} is not a JSON number: the file is converted to JSON before it is decoded, and JSON holds no NaN or infinity"
    )
}

/// A short rendering of a scalar for messages, at most 40 characters.
pub(crate) fn quoted(value: &Value) -> String {
    let text = match value {
        Value::String(s) => s.clone(),
        other => serde_yaml::to_string(other)
            .unwrap_or_default()
            .trim_end()
            .to_string(),
    };
    if text.chars().count() > 40 {
        format!("{}…", text.chars().take(40).collect::<String>())
    } else {
        text
    }
}

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
    let document = format!("document {d}");
    for problem in problems.iter_mut().filter(|p| p.line.is_none()) {
        let inner = [prefix, document.as_str()]
            .into_iter()
            .filter(|p| !p.is_empty())
            .find_map(|p| problem.path.strip_prefix(p))
            .map_or("", |rest| rest.trim_start_matches('.'));
        problem.line = index.line_of(inner).or_else(|| index.line_of(""));
    }
}

#[cfg(test)]
mod tests {
    use super::load_manifests;

    #[test]
    fn an_inference_objective_field_the_crd_lacks_is_an_unknown_field() {
        let text = "apiVersion: inference.networking.x-k8s.io/v1alpha2\nkind: InferenceObjective\nmetadata:\n  name: chat\nspec:\n  priority: 5\n  poolRef:\n    name: pool\n  targetModels:\n  - name: adapter-a\n";
        let problems = load_manifests("m.yaml", text).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        let p = &problems[0];
        assert_eq!(p.code, "unknown-key");
        assert_eq!(p.message, "unknown field `targetModels`");
        assert_eq!(p.line, Some(9), "{p:?}");
        // Without it, the objective loads with its priority and pool.
        let text = text.split("  targetModels").next().unwrap();
        let m = load_manifests("m.yaml", text).unwrap();
        assert_eq!(
            (m.objectives[0].priority, m.objectives[0].pool.as_str()),
            (5, "pool")
        );
    }
}
