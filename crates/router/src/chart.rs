//! An `EndpointPickerConfig` inside the Helm values llm-d users deploy the
//! EPP with, rather than a file of its own: llm-d-router's charts
//! (`config/charts/routerlib`, through `llm-d-router-gateway` and
//! `llm-d-router-standalone`: `router.epp`) and the Gateway API Inference
//! Extension's `inferencepool` chart (`inferenceExtension`). Both put the
//! configuration files into the EPP's ConfigMap from `pluginsCustomConfig`
//! and start the EPP with `--config-file=/config/<pluginsConfigFile>`, and
//! render each `flags` entry as `--name=value` after their own flags
//! (`templates/_config.yaml` and `templates/_deployment.yaml` of routerlib
//! at llm-d-router `ebab687`).
//!
//! The same goes for the ConfigMap those charts render, or one a user
//! writes: the EPP reads its configuration from a file the ConfigMap's
//! `data` becomes once mounted (routerlib's `templates/_deployment.yaml`
//! mounts it at `/config` and passes `--config-file`, the path
//! `pkg/epp/server/options.go` reads the configuration from). A ConfigMap holding one EndpointPickerConfig
//! is read as that configuration. Which of several it reads is the EPP's
//! own `--config-file` (the mounted file's path, in the EPP's Deployment):
//! given among the deployment's `router.epp_flags`, its file name selects
//! the `data` key; without it, a ConfigMap holding several is refused,
//! naming them.
//!
//! A values file that selects one of a chart's own files is refused,
//! naming the file, as pdsim reads only a configuration written out in
//! `pluginsCustomConfig`: routerlib's (`default-plugins.yaml`,
//! `payload-agnostic.yaml`) are templates rendered from other values
//! (model-server type and protocol, parsers, the latency predictor, the
//! metrics source), and the inferencepool chart's come with the chart
//! version installed, not with the values.

use crate::RouterProblem;
use pdsim_spec::lines::LineIndex;
use serde_yaml::Value;

/// The configuration a values file selects, with what locating its
/// problems in the values file takes.
#[derive(Clone, Debug)]
pub struct Embedded {
    /// The key path of the chart's EPP block: `router.epp` (`epp` in
    /// routerlib's own values) or `inferenceExtension`; `data` for a
    /// ConfigMap.
    pub block: &'static str,
    /// `pluginsConfigFile`, or the ConfigMap's key.
    pub file: String,
    /// The key path of the configuration's text in the file
    /// (`<block>.pluginsCustomConfig.<file>`, or `data.<file>`).
    pub path: String,
    /// The configuration's text.
    pub text: String,
    /// The values file's line just above the configuration's first line,
    /// for a literal block scalar (`name: |`), whose lines are the file's;
    /// otherwise the line of its key, which every problem in it gets.
    pub line: Option<u32>,
    pub block_scalar: bool,
    /// `flags`, each rendered `--name=value` as the chart renders it, with
    /// its key path in the values file.
    pub flags: Vec<(String, String)>,
}

/// llm-d-router's chart's own configuration files (routerlib's
/// `templates/_config.yaml`), rendered from other values.
const CHART_FILES: [&str; 2] = ["default-plugins.yaml", "payload-agnostic.yaml"];

/// The configuration inside `text` when it is the Helm values of one of
/// the EPP's charts (no `apiVersion` or `kind` of its own, and a
/// `router.epp` or `inferenceExtension` mapping, or an `epp` one naming
/// a configuration); `None` for any other document, which is then loaded
/// as an EndpointPickerConfig.
pub fn embedded(file: &str, text: &str) -> Option<Result<Embedded, Vec<RouterProblem>>> {
    embedded_with(file, text, None)
}

/// [`embedded`], a ConfigMap's configuration chosen by the EPP's
/// `--config-file`, `config_file` (the flag's value: a path whose file name
/// is the `data` key mounted there), when the deployment gives one.
pub fn embedded_with(
    file: &str,
    text: &str,
    config_file: Option<&str>,
) -> Option<Result<Embedded, Vec<RouterProblem>>> {
    let checked = pdsim_spec::load::check_yaml(text).ok()?;
    if let Some(refused) = several_documents(file, checked) {
        return Some(Err(refused));
    }
    let value: Value = serde_yaml::from_str(checked).ok()?;
    let top = value.as_mapping()?;
    if value.get("kind").and_then(Value::as_str) == Some("ConfigMap") {
        return Some(config_map(file, checked, &value, config_file));
    }
    if top.contains_key("apiVersion") || top.contains_key("kind") {
        return None;
    }
    let names_config = |block: &Value| {
        block.get("pluginsConfigFile").is_some() || block.get("pluginsCustomConfig").is_some()
    };
    let (block, epp) = match (
        value.get("router").and_then(|r| r.get("epp")),
        value.get("inferenceExtension"),
        value.get("epp"),
    ) {
        (Some(epp), _, _) if epp.is_mapping() => ("router.epp", epp),
        (_, Some(ext), _) if ext.is_mapping() => ("inferenceExtension", ext),
        // routerlib's own values (the library chart's defaults), read
        // only when they name a configuration.
        (_, _, Some(epp)) if epp.is_mapping() && names_config(epp) => ("epp", epp),
        _ => return None,
    };
    let lines = LineIndex::build(text);
    let problem = |path: String, code: &'static str, message: String| RouterProblem {
        file: file.to_string(),
        line: lines.line_of(&path),
        path,
        code,
        message,
    };
    let mut problems = Vec::new();
    let chosen = match epp.get("pluginsConfigFile") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => Some(name.clone()),
        Some(_) => {
            problems.push(problem(
                format!("{block}.pluginsConfigFile"),
                "wrong-type",
                "pluginsConfigFile must be a file name".into(),
            ));
            return Some(Err(problems));
        }
    };
    let custom = match epp.get("pluginsCustomConfig") {
        None | Some(Value::Null) => None,
        Some(Value::Mapping(m)) => Some(m),
        Some(_) => {
            problems.push(problem(
                format!("{block}.pluginsCustomConfig"),
                "wrong-type",
                "pluginsCustomConfig must map file names to their texts".into(),
            ));
            return Some(Err(problems));
        }
    };
    let name = chosen.unwrap_or_else(|| CHART_FILES[0].to_string());
    if !pdsim_spec::llmd::inferencepool::config_map_key(&name) {
        problems.push(problem(
            format!("{block}.pluginsConfigFile"),
            "epp-chart-config",
            format!(
                "{:?} is not a ConfigMap key (1 to 253 letters, digits, `-`, `_` and `.`, not `.` or `..`): Kubernetes refuses the chart's ConfigMap, and the EPP never starts",
                pdsim_spec::problem::quote(&name)
            ),
        ));
        return Some(Err(problems));
    }
    let config_path = format!("{block}.pluginsCustomConfig.{name}");
    let text = match custom.and_then(|c| c.get(name.as_str())) {
        Some(Value::String(text)) => text.clone(),
        Some(_) => {
            problems.push(problem(
                config_path,
                "wrong-type",
                format!("pluginsCustomConfig.{name} must be the configuration file's text"),
            ));
            return Some(Err(problems));
        }
        None if block != "inferenceExtension" && CHART_FILES.contains(&name.as_str()) => {
            problems.push(problem(
                format!("{block}.pluginsConfigFile"),
                "epp-chart-config",
                format!(
                    "selects llm-d-router's chart's own `{name}`, which the chart renders from other values (the model server's type and protocol, parsers, the latency predictor, the metrics source); pdsim reads a configuration written out under {block}.pluginsCustomConfig: put the rendered file there (`helm template` shows it) and name it in pluginsConfigFile"
                ),
            ));
            return Some(Err(problems));
        }
        None if block != "inferenceExtension" => {
            problems.push(problem(
                format!("{block}.pluginsConfigFile"),
                "epp-chart-config",
                format!(
                    "names `{name}`, which is neither under {block}.pluginsCustomConfig nor one of llm-d-router's chart's own files ({}): the EPP would start without a configuration file",
                    CHART_FILES.join(", ")
                ),
            ));
            return Some(Err(problems));
        }
        None => {
            // The inferencepool chart's own files differ between its
            // versions (0.5.1: `default-plugins.yaml`, `plugins-v2.yaml`).
            problems.push(problem(
                format!("{block}.pluginsConfigFile"),
                "epp-chart-config",
                format!(
                    "names `{name}`, which is not under {block}.pluginsCustomConfig: the inferencepool chart's own configuration files come with the chart version installed, not with these values; pdsim reads a configuration written out under pluginsCustomConfig"
                ),
            ));
            return Some(Err(problems));
        }
    };
    let line = lines.line_of(&config_path);
    let block_scalar = is_block_scalar(checked, line, &name);
    let mut flags = Vec::new();
    match epp.get("flags") {
        None | Some(Value::Null) => {}
        Some(Value::Mapping(m)) => {
            for (k, v) in m {
                let Some(key) = k.as_str() else {
                    problems.push(problem(
                        format!("{block}.flags"),
                        "wrong-type",
                        "a flag's name must be a string".into(),
                    ));
                    continue;
                };
                let path = format!("{block}.flags.{key}");
                // `printf "--%s=%v"` of the value Helm decoded.
                let rendered = match v {
                    Value::String(s) => s.clone(),
                    Value::Bool(b) => b.to_string(),
                    Value::Number(n) => n.to_string(),
                    _ => {
                        problems.push(problem(
                            path,
                            "wrong-type",
                            format!("flag `{key}` must be a string, number or boolean"),
                        ));
                        continue;
                    }
                };
                flags.push((format!("--{key}={rendered}"), path));
            }
            // Helm's `range` over a map goes in key order.
            flags.sort_by(|a, b| a.1.cmp(&b.1));
        }
        Some(_) => problems.push(problem(
            format!("{block}.flags"),
            "wrong-type",
            "flags must be a map of flag names to values".into(),
        )),
    }
    if !problems.is_empty() {
        return Some(Err(problems));
    }
    Some(Ok(Embedded {
        block,
        file: name,
        path: config_path,
        text,
        line,
        block_scalar,
        flags,
    }))
}

/// Whether documents of these kinds (`pdsim_spec::load::document_kinds`)
/// are several, one of which carries a configuration (an
/// EndpointPickerConfig, or a ConfigMap): a rendered chart, say.
pub fn configuration_among_others(kinds: &[Option<String>]) -> bool {
    kinds.len() > 1
        && kinds
            .iter()
            .any(|k| matches!(k.as_deref(), Some("EndpointPickerConfig" | "ConfigMap")))
}

/// The refusal of a file of several documents one of which carries the
/// configuration (an EndpointPickerConfig, or a ConfigMap): a rendered
/// chart (`helm template`), say, whose other documents (the EPP's
/// Deployment and its flags, the InferencePool) pdsim takes from keys of
/// their own. `None` for a file of one document, or of several none of
/// which carries a configuration.
fn several_documents(file: &str, text: &str) -> Option<Vec<RouterProblem>> {
    let found = pdsim_spec::load::document_kinds(text);
    if !configuration_among_others(&found) {
        return None;
    }
    let kinds: Vec<&str> = found
        .iter()
        .map(|k| k.as_deref().unwrap_or("(no kind)"))
        .collect();
    let line = text
        .lines()
        .position(|l| l == "kind: ConfigMap" || l == "kind: EndpointPickerConfig")
        .map(|i| u32::try_from(i + 1).unwrap_or(u32::MAX));
    Some(vec![RouterProblem {
        file: file.to_string(),
        line,
        path: String::new(),
        code: "epp-config-documents",
        message: format!(
            "the file holds {} documents ({}); pdsim reads one configuration per file: put the {} in a file of its own and name that here, an InferencePool in router.manifests, and the EPP container's args (its Deployment's) in router.epp_flags",
            kinds.len(),
            kinds.join(", "),
            if kinds.contains(&"ConfigMap") {
                "ConfigMap"
            } else {
                "EndpointPickerConfig"
            }
        ),
    }])
}

/// Whether a literal block scalar (`key: |`) holds the value of `key` on
/// line `line` of `text`: its lines are then the file's, from the next one
/// on (a folded one, `>`, joins lines, so its problems take the key's line).
fn is_block_scalar(text: &str, line: Option<u32>, key: &str) -> bool {
    line.and_then(|l| text.lines().nth((l as usize).checked_sub(1)?))
        .and_then(|l| l.split_once(&format!("{key}:")))
        .is_some_and(|(_, rest)| rest.trim_start().starts_with('|'))
}

/// The EndpointPickerConfig a ConfigMap holds (`value`, parsed from
/// `text`): the `data` entry the file name of `config_file` (the EPP's
/// `--config-file`) names, or else its one entry whose text is an
/// EndpointPickerConfig.
fn config_map(
    file: &str,
    text: &str,
    value: &Value,
    config_file: Option<&str>,
) -> Result<Embedded, Vec<RouterProblem>> {
    let lines = LineIndex::build(text);
    let problem = |path: &str, code: &'static str, message: String| {
        vec![RouterProblem {
            file: file.to_string(),
            line: lines.line_of(path),
            path: path.to_string(),
            code,
            message,
        }]
    };
    let is_config = |text: &str| {
        pdsim_spec::load::check_yaml(text)
            .ok()
            .and_then(|t| serde_yaml::from_str::<Value>(t).ok())
            .and_then(|v| v.get("kind").and_then(Value::as_str).map(str::to_string))
            .is_some_and(|kind| kind == "EndpointPickerConfig")
    };
    let configs: Vec<(String, String)> = value
        .get("data")
        .and_then(Value::as_mapping)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())))
        .filter(|(_, v)| is_config(v))
        .collect();
    // The EPP reads the file its --config-file names, mounted from the
    // ConfigMap's key of that file name (the mount's folder is the EPP
    // Deployment's, which pdsim does not read).
    let chosen: Vec<(String, String)> = match config_file {
        None => configs,
        Some(flag) => {
            let key = flag.rsplit('/').next().unwrap_or(flag);
            match configs.iter().find(|(k, _)| k == key) {
                Some(found) => vec![found.clone()],
                None => {
                    let keys: Vec<String> =
                        configs.iter().map(|(k, _)| format!("data.{k}")).collect();
                    return Err(problem(
                        "data",
                        "epp-configmap-config",
                        format!(
                            "--config-file={flag} names `{key}`, which is not an EndpointPickerConfig under this ConfigMap's data (its configurations: {})",
                            if keys.is_empty() {
                                "none".to_string()
                            } else {
                                keys.join(", ")
                            }
                        ),
                    ));
                }
            }
        }
    };
    match chosen.as_slice() {
        // A chart's template: its configuration is not YAML until rendered.
        [] if let Some(at) = pdsim_spec::load::template_action_line(text) => Err(vec![RouterProblem {
            file: file.to_string(),
            line: Some(at),
            path: String::new(),
            code: "helm-template",
            message: "this line holds a Helm template action (`{{ ... }}`): pdsim reads a rendered ConfigMap, not a chart template; render the chart first (`helm template`) and name what it prints".into(),
        }]),
        [] => Err(problem(
            "data",
            "epp-configmap-config",
            "a ConfigMap with no EndpointPickerConfig under `data`: the EPP reads its configuration from a file this ConfigMap's data would have to hold".into(),
        )),
        [(key, config)] => {
            let path = format!("data.{key}");
            let line = lines.line_of(&path);
            Ok(Embedded {
                block: "data",
                file: key.clone(),
                block_scalar: is_block_scalar(text, line, key),
                path,
                text: config.clone(),
                line,
                flags: Vec::new(),
            })
        }
        several => {
            let keys: Vec<String> = several.iter().map(|(k, _)| format!("data.{k}")).collect();
            Err(problem(
                "data",
                "epp-configmap-config",
                format!(
                    "the ConfigMap holds {} EndpointPickerConfigs ({}); the EPP reads the one its --config-file names: give that flag, as the EPP's Deployment does, in router.epp_flags (`--config-file=/config/<key>`)",
                    several.len(),
                    keys.join(", ")
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::embedded;

    const VALUES: &str = "# A guide's values
router:
  epp:
    flags:
      v: 4
      enable-pprof: \"true\"
      health-checking: true
    pluginsConfigFile: \"mine.yaml\"
    pluginsCustomConfig:
      mine.yaml: |
        apiVersion: llm-d.ai/v1alpha1
        kind: EndpointPickerConfig
        plugins:
        - type: queue-scorer
";

    #[test]
    fn the_selected_custom_file_and_the_flags_come_out_with_their_lines() {
        let e = embedded("v.yaml", VALUES).expect("values").expect("valid");
        assert_eq!(e.block, "router.epp");
        assert_eq!(e.file, "mine.yaml");
        assert!(e.text.starts_with("apiVersion: llm-d.ai/v1alpha1\n"));
        // `mine.yaml: |` is line 10; the text's first line is line 11.
        assert_eq!((e.line, e.block_scalar), (Some(10), true));
        let flags: Vec<&str> = e.flags.iter().map(|(f, _)| f.as_str()).collect();
        // In key order, as Helm's `range` renders a map.
        assert_eq!(
            flags,
            ["--enable-pprof=true", "--health-checking=true", "--v=4"]
        );
        assert_eq!(e.flags[2].1, "router.epp.flags.v");
    }

    #[test]
    fn a_folded_or_quoted_configuration_puts_its_problems_on_its_key() {
        for text in [
            "router:\n  epp:\n    pluginsConfigFile: a.yaml\n    pluginsCustomConfig:\n      a.yaml: >\n        kind: x\n",
            "router:\n  epp:\n    pluginsConfigFile: a.yaml\n    pluginsCustomConfig:\n      a.yaml: \"kind: x\"\n",
        ] {
            let e = embedded("v.yaml", text).expect("values").expect("valid");
            assert_eq!((e.line, e.block_scalar), (Some(5), false), "{text}");
        }
    }

    #[test]
    fn a_custom_config_that_is_not_a_map_is_a_wrong_type() {
        let problems = embedded(
            "v.yaml",
            "router:\n  epp:\n    pluginsCustomConfig: [1, 2]\n",
        )
        .expect("values")
        .unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(
            (
                problems[0].path.as_str(),
                problems[0].code,
                problems[0].line
            ),
            ("router.epp.pluginsCustomConfig", "wrong-type", Some(3))
        );
    }

    #[test]
    fn a_config_of_its_own_and_other_documents_are_not_values() {
        assert!(
            embedded(
                "c.yaml",
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
            )
            .is_none()
        );
        assert!(embedded("c.yaml", "plugins: []\n").is_none());
        assert!(embedded("c.yaml", "- a\n").is_none());
        assert!(embedded("c.yaml", "router: {epp: 3}\n").is_none());
    }

    #[test]
    fn the_charts_own_files_and_missing_ones_are_refused_by_name() {
        for (values, needle) in [
            (
                "router:\n  epp:\n    replicas: 1\n",
                "chart's own `default-plugins.yaml`, which the chart renders",
            ),
            (
                "router:\n  epp:\n    pluginsConfigFile: payload-agnostic.yaml\n",
                "chart's own `payload-agnostic.yaml`",
            ),
            (
                "router:\n  epp:\n    pluginsConfigFile: x.yaml\n    pluginsCustomConfig: {y.yaml: a}\n",
                "names `x.yaml`, which is neither",
            ),
            (
                "inferenceExtension:\n  pluginsConfigFile: default-plugins.yaml\n",
                "come with the chart version installed",
            ),
            (
                "inferenceExtension:\n  pluginsConfigFile: ../x.yaml\n  pluginsCustomConfig: {../x.yaml: a}\n",
                "is not a ConfigMap key",
            ),
        ] {
            let problems = embedded("v.yaml", values).expect("values").unwrap_err();
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].message.contains(needle), "{problems:?}");
            assert_eq!(problems[0].code, "epp-chart-config");
            assert!(problems[0].line.is_some(), "{problems:?}");
        }
        let problems = embedded(
            "v.yaml",
            "router:\n  epp:\n    flags: {v: [1]}\n    pluginsConfigFile: a.yaml\n    pluginsCustomConfig: {a.yaml: x}\n",
        )
        .expect("values")
        .unwrap_err();
        assert_eq!(problems[0].path, "router.epp.flags.v");
        assert_eq!(problems[0].line, Some(3));
    }
}
