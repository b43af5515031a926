//! The router's inputs as Helm values of the Gateway API Inference
//! Extension's `inferencepool` chart (the `gaie-values.yaml` of llm-d's
//! guides), and back: the EPP's flags as the `inferenceExtension.flags`
//! map (each `name: value` rendered `--name=value`), its
//! `EndpointPickerConfig` inline under `pluginsCustomConfig` and named by
//! `pluginsConfigFile`, and the InferencePool's selector and target port.

use serde_yaml::{Mapping, Value};
use std::collections::BTreeMap;

/// The file name the EndpointPickerConfig takes inside the chart's
/// ConfigMap, when the deployment's own file name is not a plain name.
pub const CONFIG_FILE: &str = "epp-config.yaml";

/// The router's inputs as the chart takes them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RouterValues {
    /// `--name=value` flags, without `--config-file` (the chart renders it
    /// from `pluginsConfigFile`).
    pub flags: Vec<String>,
    /// The EndpointPickerConfig's file name and text.
    pub config: (String, String),
    /// The labels the InferencePool selects pods by.
    pub match_labels: BTreeMap<String, String>,
    /// The port each model server listens on.
    pub target_port: u16,
}

/// The Helm release the chart is installed as. The chart names the
/// InferencePool after its release and starts the EPP with
/// `--pool-name <release>` before the `inferenceExtension.flags`
/// (`config/charts/inferencepool/templates/epp-deployment.yaml`), so a
/// deployment's own `--pool-name` must be the release for the EPP to watch
/// the pool the chart creates; without one, `gaie-<deployment>`, as llm-d's
/// guides name theirs.
pub fn release(flags: &[String], deployment: &str) -> String {
    flags
        .iter()
        .find_map(|f| f.strip_prefix("--pool-name="))
        .filter(|name| !name.is_empty())
        .map_or_else(|| format!("gaie-{deployment}"), str::to_string)
}

/// The chart's values, with a comment header naming the release.
pub fn values(r: &RouterValues, release: &str) -> Result<String, String> {
    let mut flags = Mapping::new();
    for flag in &r.flags {
        let body = flag
            .strip_prefix("--")
            .ok_or_else(|| format!("router.epp_flags: `{flag}` is not a `--name=value` flag"))?;
        let (name, value) = body.split_once('=').unwrap_or((body, "true"));
        if name == "config-file" {
            continue;
        }
        if flags.contains_key(name) {
            return Err(format!(
                "router.epp_flags: `--{name}` is given twice; the chart's flags map holds one value a flag"
            ));
        }
        flags.insert(name.into(), value.into());
    }
    let mut custom = Mapping::new();
    custom.insert(r.config.0.as_str().into(), r.config.1.as_str().into());
    let mut labels = Mapping::new();
    for (k, v) in &r.match_labels {
        labels.insert(k.as_str().into(), v.as_str().into());
    }
    let mut extension = Mapping::new();
    extension.insert("replicas".into(), 1.into());
    extension.insert("flags".into(), Value::Mapping(flags));
    extension.insert("pluginsConfigFile".into(), r.config.0.as_str().into());
    extension.insert("pluginsCustomConfig".into(), Value::Mapping(custom));
    let mut port = Mapping::new();
    port.insert("number".into(), i64::from(r.target_port).into());
    let mut servers = Mapping::new();
    servers.insert("matchLabels".into(), Value::Mapping(labels));
    let mut pool = Mapping::new();
    pool.insert(
        "targetPorts".into(),
        Value::Sequence(vec![Value::Mapping(port)]),
    );
    pool.insert("modelServerType".into(), "vllm".into());
    pool.insert("modelServers".into(), Value::Mapping(servers));
    let mut root = Mapping::new();
    root.insert("inferenceExtension".into(), Value::Mapping(extension));
    root.insert("inferencePool".into(), Value::Mapping(pool));
    let yaml = serde_yaml::to_string(&Value::Mapping(root)).map_err(|e| e.to_string())?;
    Ok(format!(
        "# Helm values for the Gateway API Inference Extension's inferencepool chart (the\n# EPP and its InferencePool), written by `pdsim export`:\n# `helm install {release} oci://registry.k8s.io/gateway-api-inference-extension/charts/inferencepool -f gaie-values.yaml`.\n{yaml}"
    ))
}

/// The router's inputs read back from the chart's values.
pub fn read(text: &str) -> Result<RouterValues, String> {
    let v: Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    let ext = v
        .get("inferenceExtension")
        .ok_or("no inferenceExtension block")?;
    let mut flags = Vec::new();
    match ext.get("flags") {
        None | Some(Value::Null) => {}
        Some(Value::Mapping(m)) => {
            for (k, val) in m {
                let name = k
                    .as_str()
                    .ok_or("inferenceExtension.flags: a flag name is not a string")?;
                let value = match val {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    Value::Bool(b) => b.to_string(),
                    _ => {
                        return Err(format!(
                            "inferenceExtension.flags.{name}: not a string, number or boolean"
                        ));
                    }
                };
                flags.push(format!("--{name}={value}"));
            }
        }
        Some(_) => return Err("inferenceExtension.flags: expected a map of `name: value`".into()),
    }
    let file = ext
        .get("pluginsConfigFile")
        .and_then(Value::as_str)
        .ok_or("inferenceExtension.pluginsConfigFile: not set (the chart's own default file is not pdsim's to know)")?
        .to_string();
    // The name is a key of the chart's ConfigMap, and `pdsim import` writes
    // the configuration under it beside the deployment: held to Kubernetes'
    // rule for a ConfigMap key, it is a plain file name, never a path that
    // leaves the output folder (`../x`, `/home/...`).
    if !config_map_key(&file) {
        return Err(format!(
            "inferenceExtension.pluginsConfigFile: {:?} is not a ConfigMap key (1 to 253 letters, digits, `-`, `_` and `.`, not `.` or `..`), so it names no file pdsim can write beside the deployment",
            crate::problem::quote(&file)
        ));
    }
    let text = ext
        .get("pluginsCustomConfig")
        .and_then(|c| c.get(file.as_str()))
        .and_then(Value::as_str)
        .ok_or_else(|| {
            format!("inferenceExtension.pluginsCustomConfig has no `{file}` (pluginsConfigFile)")
        })?
        .to_string();
    let pool = v.get("inferencePool");
    let mut match_labels = BTreeMap::new();
    if let Some(Value::Mapping(m)) = pool
        .and_then(|p| p.get("modelServers"))
        .and_then(|s| s.get("matchLabels"))
    {
        for (k, val) in m {
            if let (Some(k), Some(val)) = (k.as_str(), val.as_str()) {
                match_labels.insert(k.to_string(), val.to_string());
            }
        }
    }
    let target_port = pool
        .and_then(|p| p.get("targetPorts"))
        .and_then(Value::as_sequence)
        .and_then(|s| s.first())
        .and_then(|p| p.get("number"))
        .and_then(Value::as_u64)
        .and_then(|n| u16::try_from(n).ok())
        .unwrap_or(8000);
    Ok(RouterValues {
        flags,
        config: (file, text),
        match_labels,
        target_port,
    })
}

/// Whether `key` is a valid ConfigMap key (`IsConfigMapKey` in Kubernetes'
/// validation: 1 to 253 of `[-._a-zA-Z0-9]`, not `.` or `..`).
pub fn config_map_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router() -> RouterValues {
        RouterValues {
            flags: vec![
                "--pool-name=deepseek-v3".into(),
                "--config-file=ignored.yaml".into(),
                "--enable-pprof".into(),
                "--kv-cache-usage-percentage-metric=vllm:kv_cache_usage_perc".into(),
            ],
            config: (
                "pd.yaml".into(),
                "kind: EndpointPickerConfig\nplugins: []\n".into(),
            ),
            match_labels: [("llm-d.ai/inferenceServing".to_string(), "true".to_string())]
                .into_iter()
                .collect(),
            target_port: 8200,
        }
    }

    #[test]
    fn the_router_inputs_round_trip_through_the_charts_values() {
        assert_eq!(release(&router().flags, "d"), "deepseek-v3");
        assert_eq!(release(&[], "d"), "gaie-d");
        let text = values(&router(), "pool").unwrap();
        assert!(text.contains("helm install pool oci://"), "{text}");
        let back = read(&text).unwrap();
        // `--config-file` is the chart's to render from pluginsConfigFile;
        // a bare boolean flag reads back as `=true`.
        assert_eq!(
            back.flags,
            [
                "--pool-name=deepseek-v3",
                "--enable-pprof=true",
                "--kv-cache-usage-percentage-metric=vllm:kv_cache_usage_perc",
            ]
        );
        assert_eq!(back.config, router().config);
        assert_eq!(back.match_labels, router().match_labels);
        assert_eq!(back.target_port, 8200);
    }

    #[test]
    fn values_without_what_the_router_needs_are_refused_by_name() {
        let mut twice = router();
        twice.flags.push("--pool-name=other".into());
        assert!(values(&twice, "p").unwrap_err().contains("given twice"));
        let mut bare = router();
        bare.flags.push("pool-name=x".into());
        assert!(
            values(&bare, "p")
                .unwrap_err()
                .contains("not a `--name=value` flag")
        );
        assert!(
            read("inferencePool: {}\n")
                .unwrap_err()
                .contains("inferenceExtension")
        );
        let no_file = "inferenceExtension:\n  flags: {a: 1}\n";
        assert!(read(no_file).unwrap_err().contains("pluginsConfigFile"));
        let missing = "inferenceExtension:\n  pluginsConfigFile: x.yaml\n  pluginsCustomConfig: {y.yaml: z}\n";
        assert!(read(missing).unwrap_err().contains("has no `x.yaml`"));
        let list = "inferenceExtension:\n  flags: [a]\n  pluginsConfigFile: x\n";
        assert!(read(list).unwrap_err().contains("expected a map"));
        // Numbers and booleans in the flags map are flag values too; the
        // port defaults to vLLM's 8000.
        // The configuration's name is a plain file name, never a path.
        for file in [
            "../x.yaml",
            "/etc/x.yaml",
            "a/b.yaml",
            "..",
            ".",
            "a b",
            "x\ny",
        ] {
            let text = format!(
                "inferenceExtension:\n  pluginsConfigFile: {file:?}\n  pluginsCustomConfig: {{{file:?}: c}}\n"
            );
            assert!(
                read(&text).unwrap_err().contains("is not a ConfigMap key"),
                "{file:?}"
            );
        }
        let typed = "inferenceExtension:\n  flags: {v: 3, on: false}\n  pluginsConfigFile: x\n  pluginsCustomConfig: {x: c}\n";
        let back = read(typed).unwrap();
        assert_eq!(back.flags, ["--v=3", "--on=false"]);
        assert_eq!(back.target_port, 8000);
    }
}
