//! `EndpointPickerConfig` loading as the EPP does it (llm-d-router
//! `pkg/epp/config/loader/{configloader,defaults,validation}.go`,
//! `research/epp.md` §1): a strict decoder, registered apiVersions only,
//! plugins instantiated by type with strictly decoded parameters, profiles
//! checked and completed with the loader's defaults. What pdsim cannot run
//! faithfully is refused here by name.

use crate::RouterProblem;
use crate::registry::{self, REMOVED, Role};
use serde_yaml::{Mapping, Value};
use std::collections::BTreeSet;

/// apiVersions the EPP registers for its config (`apix/config/v1alpha1`);
/// the second is the deprecated group, still accepted.
pub const API_VERSIONS: &[&str] = &[
    "llm-d.ai/v1alpha1",
    "inference.networking.x-k8s.io/v1alpha1",
];

/// Feature gates the EPP knows.
pub const FEATURE_GATES: &[&str] = &["flowControl", "dataLayer", "enableLegacyMetrics"];

const TOP_LEVEL: &[&str] = &[
    "apiVersion",
    "kind",
    "plugins",
    "schedulingProfiles",
    "featureGates",
    "saturationDetector",
    "data",
    "dataLayer",
    "flowControl",
    "parser",
    "requestHandler",
];

/// One instantiated plugin.
#[derive(Clone, Debug, PartialEq)]
pub struct Plugin {
    pub name: String,
    pub plugin_type: String,
    pub parameters: Mapping,
}

/// A scheduling profile: its plugins in order, scorers with their weights.
#[derive(Clone, Debug, PartialEq)]
pub struct Profile {
    pub name: String,
    pub filters: Vec<String>,
    pub scorers: Vec<(String, f64)>,
    pub picker: String,
}

/// A loaded configuration, defaults applied.
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointPickerConfig {
    pub api_version: String,
    pub plugins: Vec<Plugin>,
    pub profiles: Vec<Profile>,
    /// The profile handler's plugin name.
    pub handler: String,
    pub feature_gates: Vec<String>,
}

impl EndpointPickerConfig {
    pub fn plugin(&self, name: &str) -> Option<&Plugin> {
        self.plugins.iter().find(|p| p.name == name)
    }
}

struct Loader<'a> {
    file: &'a str,
    problems: Vec<RouterProblem>,
}

impl Loader<'_> {
    fn problem(&mut self, path: &str, code: &'static str, message: impl Into<String>) {
        self.problems.push(RouterProblem {
            file: self.file.to_string(),
            path: path.to_string(),
            code,
            message: message.into(),
        });
    }
}

fn str_of<'v>(map: &'v Mapping, key: &str) -> Option<&'v str> {
    map.get(key).and_then(Value::as_str)
}

/// The EPP's built-in configuration when no file is given: queue 2,
/// KV-cache utilisation 2, prefix cache 3 in one profile (`defaults.go`).
pub const DEFAULT_CONFIG: &str = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
";

/// Loads a configuration text, or returns every problem found.
pub fn load_config(
    file: &str,
    text: &str,
    allow_experimental: bool,
) -> Result<EndpointPickerConfig, Vec<RouterProblem>> {
    let mut loader = Loader {
        file,
        problems: Vec::new(),
    };
    let text = if text.trim().is_empty() {
        DEFAULT_CONFIG
    } else {
        text
    };
    let value: Value = match serde_yaml::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            loader.problem("", "yaml-syntax", e.to_string());
            return Err(loader.problems);
        }
    };
    let Some(top) = value.as_mapping() else {
        loader.problem("", "config-shape", "an EndpointPickerConfig is a mapping");
        return Err(loader.problems);
    };
    let api_version = str_of(top, "apiVersion").unwrap_or("").to_string();
    if !API_VERSIONS.contains(&api_version.as_str()) {
        loader.problem(
            "apiVersion",
            "epp-api-version",
            format!(
                "apiVersion `{api_version}` is not registered by the EPP pdsim follows (llm-d-router @ ebab687): it knows {}",
                API_VERSIONS.join(" and ")
            ),
        );
        return Err(loader.problems);
    }
    if str_of(top, "kind") != Some("EndpointPickerConfig") {
        loader.problem("kind", "epp-kind", "kind must be EndpointPickerConfig");
    }
    for key in top.keys() {
        let key = key.as_str().unwrap_or("?");
        if !TOP_LEVEL.contains(&key) {
            loader.problem(
                key,
                "unknown-key",
                format!("unknown field `{key}` (the EPP decodes its config strictly)"),
            );
        }
    }

    // Feature gates.
    let mut feature_gates = Vec::new();
    for (i, gate) in top
        .get("featureGates")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let gate = gate.as_str().unwrap_or("");
        if !FEATURE_GATES.contains(&gate) {
            loader.problem(
                &format!("featureGates[{i}]"),
                "epp-feature-gate",
                format!("feature gate `{gate}` is not registered"),
            );
        } else if gate == "flowControl" {
            loader.problem(
                &format!("featureGates[{i}]"),
                "epp-not-simulated",
                "the flowControl gate turns on the flow-control layer, which pdsim does not simulate yet",
            );
        }
        feature_gates.push(gate.to_string());
    }

    // Plugins, in list order.
    let mut plugins: Vec<Plugin> = Vec::new();
    let mut names = BTreeSet::new();
    for (i, entry) in top
        .get("plugins")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("plugins[{i}]");
        let Some(map) = entry.as_mapping() else {
            loader.problem(
                &at,
                "config-shape",
                "a plugin is a mapping with type, name and parameters",
            );
            continue;
        };
        for key in map.keys() {
            let key = key.as_str().unwrap_or("?");
            if !["type", "name", "parameters"].contains(&key) {
                loader.problem(
                    &format!("{at}.{key}"),
                    "unknown-key",
                    format!("unknown field `{key}`"),
                );
            }
        }
        let Some(plugin_type) = str_of(map, "type") else {
            loader.problem(
                &format!("{at}.type"),
                "missing-key",
                "a plugin needs a type",
            );
            continue;
        };
        let name = str_of(map, "name").unwrap_or(plugin_type).to_string();
        if !names.insert(name.clone()) {
            loader.problem(
                &format!("{at}.name"),
                "epp-duplicate-plugin",
                format!("plugin name `{name}` is used twice"),
            );
        }
        let parameters = match map.get("parameters") {
            None | Some(Value::Null) => Mapping::new(),
            Some(Value::Mapping(m)) => m.clone(),
            Some(_) => {
                loader.problem(
                    &format!("{at}.parameters"),
                    "wrong-type",
                    "parameters must be a mapping",
                );
                Mapping::new()
            }
        };
        if let Some((_, why)) = REMOVED.iter().find(|(n, _)| *n == plugin_type) {
            loader.problem(
                &format!("{at}.type"),
                "epp-plugin-removed",
                format!("plugin type `{plugin_type}` is not registered: {why}"),
            );
            continue;
        }
        let Some(kind) = registry::lookup(plugin_type) else {
            loader.problem(
                &format!("{at}.type"),
                "epp-plugin-unknown",
                format!("plugin type `{plugin_type}` is not registered"),
            );
            continue;
        };
        if kind.alpha && !allow_experimental {
            loader.problem(
                &format!("{at}.type"),
                "epp-plugin-alpha",
                format!("plugin type `{plugin_type}` is Alpha and loads only with --allow-experimental-plugins"),
            );
        }
        if let Some(schema) = kind.params {
            for key in parameters.keys() {
                let key = key.as_str().unwrap_or("?");
                if !schema.contains(&key) {
                    loader.problem(
                        &format!("{at}.parameters.{key}"),
                        "epp-plugin-parameter",
                        format!("`{key}` is not a parameter of `{plugin_type}` (parameters are decoded strictly){}", if schema.is_empty() { ", which takes none".to_string() } else { format!("; it takes {}", schema.join(", ")) }),
                    );
                }
            }
        }
        check_parameters(&mut loader, &at, plugin_type, &parameters);
        if let Some(why) = kind.not_simulated {
            loader.problem(
                &format!("{at}.type"),
                "epp-not-simulated",
                format!("pdsim does not simulate plugin `{name}` (type `{plugin_type}`): {why}"),
            );
        }
        plugins.push(Plugin {
            name,
            plugin_type: plugin_type.to_string(),
            parameters,
        });
    }

    let role_of = |plugins: &[Plugin], name: &str| -> Option<Role> {
        plugins
            .iter()
            .find(|p| p.name == name)
            .and_then(|p| registry::lookup(&p.plugin_type))
            .map(|t| t.role)
    };

    // Scheduling profiles.
    let mut profiles = Vec::new();
    let mut profile_names = BTreeSet::new();
    let declared = top
        .get("schedulingProfiles")
        .and_then(Value::as_sequence)
        .cloned()
        .unwrap_or_default();
    for (i, entry) in declared.iter().enumerate() {
        let at = format!("schedulingProfiles[{i}]");
        let Some(map) = entry.as_mapping() else {
            loader.problem(
                &at,
                "config-shape",
                "a profile is a mapping with name and plugins",
            );
            continue;
        };
        for key in map.keys() {
            let key = key.as_str().unwrap_or("?");
            if !["name", "plugins"].contains(&key) {
                loader.problem(
                    &format!("{at}.{key}"),
                    "unknown-key",
                    format!("unknown field `{key}`"),
                );
            }
        }
        let name = str_of(map, "name").unwrap_or("").to_string();
        if name.is_empty() || !profile_names.insert(name.clone()) {
            loader.problem(
                &format!("{at}.name"),
                "epp-profile-name",
                "profile names must be non-empty and unique",
            );
        }
        let mut profile = Profile {
            name,
            filters: Vec::new(),
            scorers: Vec::new(),
            picker: String::new(),
        };
        for (j, slot) in map
            .get("plugins")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let pat = format!("{at}.plugins[{j}]");
            let Some(slot) = slot.as_mapping() else {
                continue;
            };
            for key in slot.keys() {
                let key = key.as_str().unwrap_or("?");
                if !["pluginRef", "weight"].contains(&key) {
                    loader.problem(
                        &format!("{pat}.{key}"),
                        "unknown-key",
                        format!("unknown field `{key}`"),
                    );
                }
            }
            let reference = str_of(slot, "pluginRef").unwrap_or("").to_string();
            let weight = slot.get("weight").map_or(Some(1.0), Value::as_f64);
            let Some(weight) = weight.filter(|w| w.is_finite()) else {
                loader.problem(
                    &format!("{pat}.weight"),
                    "wrong-type",
                    "weight must be a number",
                );
                continue;
            };
            match role_of(&plugins, &reference) {
                None if !names.contains(&reference) => loader.problem(
                    &format!("{pat}.pluginRef"),
                    "epp-plugin-ref",
                    format!("`{reference}` names no plugin defined in plugins"),
                ),
                None => {}
                Some(Role::Filter) => profile.filters.push(reference),
                Some(Role::Scorer) => profile.scorers.push((reference, weight)),
                Some(Role::Picker) => {
                    if !profile.picker.is_empty() {
                        loader.problem(
                            &format!("{pat}.pluginRef"),
                            "epp-profile-picker",
                            "a profile takes at most one picker",
                        );
                    }
                    profile.picker = reference;
                }
                Some(Role::Saturation) => loader.problem(
                    &format!("{pat}.pluginRef"),
                    "epp-not-simulated",
                    format!("`{reference}` used as a filter is not simulated yet"),
                ),
                Some(_) => loader.problem(
                    &format!("{pat}.pluginRef"),
                    "epp-profile-plugin",
                    format!("`{reference}` is not a filter, scorer or picker"),
                ),
            }
        }
        profiles.push(profile);
    }
    if declared.is_empty() {
        // No profiles: one `default` with every filter, scorer and picker.
        let mut profile = Profile {
            name: "default".into(),
            filters: Vec::new(),
            scorers: Vec::new(),
            picker: String::new(),
        };
        for plugin in &plugins {
            match registry::lookup(&plugin.plugin_type).map(|t| t.role) {
                Some(Role::Filter) => profile.filters.push(plugin.name.clone()),
                Some(Role::Scorer) => profile.scorers.push((plugin.name.clone(), 1.0)),
                Some(Role::Picker) if profile.picker.is_empty() => {
                    profile.picker = plugin.name.clone()
                }
                _ => {}
            }
        }
        profiles.push(profile);
    }
    // A profile without a picker gets the first picker defined, else a
    // max-score-picker.
    let first_picker = plugins
        .iter()
        .find(|p| role_of(&plugins, &p.name) == Some(Role::Picker))
        .map(|p| p.name.clone());
    let mut injected_picker = false;
    for profile in &mut profiles {
        if profile.picker.is_empty() {
            profile.picker = first_picker.clone().unwrap_or_else(|| {
                injected_picker = true;
                "max-score-picker".to_string()
            });
        }
    }
    if injected_picker && !names.contains("max-score-picker") {
        plugins.push(Plugin {
            name: "max-score-picker".into(),
            plugin_type: "max-score-picker".into(),
            parameters: Mapping::new(),
        });
    }

    // Exactly one profile handler.
    let handlers: Vec<&Plugin> = plugins
        .iter()
        .filter(|p| role_of(&plugins, &p.name) == Some(Role::ProfileHandler))
        .collect();
    let handler = match (handlers.len(), profiles.len()) {
        (0, 1) => {
            plugins.push(Plugin {
                name: "single-profile-handler".into(),
                plugin_type: "single-profile-handler".into(),
                parameters: Mapping::new(),
            });
            "single-profile-handler".to_string()
        }
        (0, _) => {
            loader.problem(
                "plugins",
                "epp-profile-handler",
                "no profile handler configured for several profiles",
            );
            String::new()
        }
        (1, n) => {
            let h = handlers[0];
            if h.plugin_type == "single-profile-handler" && n > 1 {
                loader.problem(
                    "schedulingProfiles",
                    "epp-profile-handler",
                    "single-profile-handler runs exactly one profile",
                );
            }
            h.name.clone()
        }
        _ => {
            loader.problem(
                "plugins",
                "epp-profile-handler",
                "more than one profile handler is configured",
            );
            String::new()
        }
    };
    if let Some(h) = plugins
        .iter()
        .find(|p| p.name == handler && p.plugin_type == "disagg-profile-handler")
    {
        check_disagg(&mut loader, h, &plugins, &profiles);
    }

    // Saturation detector, data layer and parsers: references must resolve.
    if let Some(reference) = top
        .get("saturationDetector")
        .and_then(Value::as_mapping)
        .and_then(|m| str_of(m, "pluginRef"))
        && role_of(&plugins, reference) != Some(Role::Saturation)
    {
        loader.problem(
            "saturationDetector.pluginRef",
            "epp-plugin-ref",
            format!("`{reference}` is not a saturation detector defined in plugins"),
        );
    }
    for section in ["data", "dataLayer"] {
        let Some(map) = top.get(section).and_then(Value::as_mapping) else {
            continue;
        };
        for key in map.keys() {
            let key = key.as_str().unwrap_or("?");
            if key == "discovery" || key == "peerDiscovery" {
                loader.problem(
                    &format!("{section}.{key}"),
                    "epp-not-simulated",
                    format!("`{key}` plugins are not simulated yet"),
                );
            } else if !["injectDefaults", "sources"].contains(&key) {
                loader.problem(
                    &format!("{section}.{key}"),
                    "epp-not-simulated",
                    format!("data-layer field `{key}` is not simulated yet"),
                );
            }
        }
        for (i, source) in map
            .get("sources")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let at = format!("{section}.sources[{i}]");
            let Some(source) = source.as_mapping() else {
                continue;
            };
            let mut refs: Vec<(String, String)> = Vec::new();
            if let Some(r) = str_of(source, "pluginRef") {
                refs.push((format!("{at}.pluginRef"), r.to_string()));
            }
            for (j, extractor) in source
                .get("extractors")
                .and_then(Value::as_sequence)
                .into_iter()
                .flatten()
                .enumerate()
            {
                if let Some(r) = extractor.as_mapping().and_then(|m| str_of(m, "pluginRef")) {
                    refs.push((format!("{at}.extractors[{j}].pluginRef"), r.to_string()));
                }
            }
            for (path, reference) in refs {
                if !names.contains(&reference) {
                    loader.problem(
                        &path,
                        "epp-plugin-ref",
                        format!("`{reference}` names no plugin defined in plugins"),
                    );
                }
            }
        }
    }
    let mut parser_refs: Vec<(String, String)> = Vec::new();
    if let Some(r) = top
        .get("parser")
        .and_then(Value::as_mapping)
        .and_then(|m| str_of(m, "pluginRef"))
    {
        parser_refs.push(("parser.pluginRef".into(), r.to_string()));
    }
    if let Some(handler_section) = top.get("requestHandler").and_then(Value::as_mapping) {
        for key in handler_section.keys() {
            let key = key.as_str().unwrap_or("?");
            if key != "parsers" {
                loader.problem(
                    &format!("requestHandler.{key}"),
                    "unknown-key",
                    format!("unknown field `{key}`"),
                );
            }
        }
        for (i, p) in handler_section
            .get("parsers")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(r) = p.as_mapping().and_then(|m| str_of(m, "pluginRef")) {
                parser_refs.push((
                    format!("requestHandler.parsers[{i}].pluginRef"),
                    r.to_string(),
                ));
            }
        }
    }
    for (path, reference) in parser_refs {
        if role_of(&plugins, &reference) != Some(Role::Parser) && !names.contains(&reference) {
            loader.problem(
                &path,
                "epp-plugin-ref",
                format!("`{reference}` is not a parser defined in plugins"),
            );
        }
    }
    if top.get("flowControl").is_some() && !feature_gates.iter().any(|g| g == "flowControl") {
        // The EPP honours flowControl only with its gate; without it the
        // section has no effect there either.
    }

    if loader.problems.is_empty() {
        Ok(EndpointPickerConfig {
            api_version,
            plugins,
            profiles,
            handler,
            feature_gates,
        })
    } else {
        Err(loader.problems)
    }
}

fn number(parameters: &Mapping, key: &str) -> Option<f64> {
    parameters.get(key).and_then(Value::as_f64)
}

/// Value checks the plugin factories make.
fn check_parameters(loader: &mut Loader<'_>, at: &str, plugin_type: &str, parameters: &Mapping) {
    let mut bad = |key: &str, message: &str| {
        loader.problem(
            &format!("{at}.parameters.{key}"),
            "epp-plugin-parameter",
            format!("`{plugin_type}`: {message}"),
        );
    };
    match plugin_type {
        "prefix-based-pd-decider"
            if number(parameters, "nonCachedTokens").is_some_and(|v| v < 0.0) =>
        {
            bad("nonCachedTokens", "nonCachedTokens must not be negative");
        }
        "approx-prefix-cache-producer" => {
            if parameters.contains_key("blockSize") && !parameters.contains_key("blockSizeTokens") {
                bad(
                    "blockSize",
                    "blockSize (characters) is deprecated and needs blockSizeTokens",
                );
            }
            let auto_tune = parameters
                .get("autoTune")
                .and_then(Value::as_bool)
                .unwrap_or(true);
            if !auto_tune && !number(parameters, "blockSizeTokens").is_some_and(|v| v > 0.0) {
                bad(
                    "blockSizeTokens",
                    "with autoTune false, blockSizeTokens must be above 0",
                );
            }
        }
        // Parameters the loader knows but the simulation does not honour
        // are refused, never ignored: estimated output tokens need an
        // output-length estimator pdsim does not model, and the latency
        // predictor is a separate service.
        "inflight-load-producer" => {
            let adds = parameters
                .get("addEstimatedOutputTokens")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            for key in [
                "addEstimatedOutputTokens",
                "outputRatio",
                "maxEstimatedOutputTokens",
            ] {
                if parameters.contains_key(key) && (adds || key != "addEstimatedOutputTokens") {
                    loader.problem(
                        &format!("{at}.parameters.{key}"),
                        "epp-not-simulated",
                        format!("`{plugin_type}`: estimated output tokens (`{key}`) are not simulated; the in-flight load counts prompt tokens only"),
                    );
                }
            }
        }
        "prefix-cache-affinity-filter"
            if parameters.get("ttftSource").and_then(Value::as_str) == Some("latencyPredictor") =>
        {
            loader.problem(
                &format!("{at}.parameters.ttftSource"),
                "epp-not-simulated",
                format!("`{plugin_type}`: ttftSource latencyPredictor needs the latency predictor, which is not simulated"),
            );
        }
        "utilization-detector"
            if number(parameters, "kvCacheUtilThreshold")
                .is_some_and(|v| !(v > 0.0 && v <= 1.0)) =>
        {
            bad(
                "kvCacheUtilThreshold",
                "kvCacheUtilThreshold must lie in (0, 1]",
            );
        }
        _ => {}
    }
}

/// The disagg handler's profiles and deciders must resolve
/// (`disagg_profile_handler.go`): nested or flat form, not both.
fn check_disagg(
    loader: &mut Loader<'_>,
    handler: &Plugin,
    plugins: &[Plugin],
    profiles: &[Profile],
) {
    let p = &handler.parameters;
    let nested = p.contains_key("profiles") || p.contains_key("deciders");
    let flat = [
        "decodeProfile",
        "prefillProfile",
        "encodeProfile",
        "prefillDeciderPluginName",
        "encodeDeciderPluginName",
        "deciderPluginName",
    ]
    .iter()
    .any(|k| p.contains_key(*k));
    if nested && flat {
        loader.problem(
            &format!("plugins.{}.parameters", handler.name),
            "epp-plugin-parameter",
            "disagg-profile-handler takes the nested or the flat form, not both",
        );
    }
    let profile_names = disagg_profiles(p);
    for (role, name) in [("decode", &profile_names.0), ("prefill", &profile_names.1)] {
        if !profiles.iter().any(|prof| &prof.name == name) && role == "decode" {
            loader.problem(
                "schedulingProfiles",
                "epp-profile-handler",
                format!("disagg-profile-handler needs a `{name}` profile"),
            );
        }
    }
    if let Some(decider) = &profile_names.2 {
        let ok = plugins.iter().any(|pl| {
            &pl.name == decider
                && registry::lookup(&pl.plugin_type).map(|t| t.role) == Some(Role::Decider)
        });
        if !ok {
            loader.problem(
                &format!("plugins.{}.parameters", handler.name),
                "epp-plugin-ref",
                format!("decider `{decider}` names no decider plugin defined in plugins"),
            );
        }
    }
}

/// (decode profile, prefill profile, prefill decider) of a disagg handler.
pub fn disagg_profiles(p: &Mapping) -> (String, String, Option<String>) {
    let nested = |section: &str, key: &str| {
        p.get(section)
            .and_then(Value::as_mapping)
            .and_then(|m| str_of(m, key))
            .map(str::to_string)
    };
    let decode = nested("profiles", "decode")
        .or_else(|| str_of(p, "decodeProfile").map(str::to_string))
        .unwrap_or_else(|| "decode".into());
    let prefill = nested("profiles", "prefill")
        .or_else(|| str_of(p, "prefillProfile").map(str::to_string))
        .unwrap_or_else(|| "prefill".into());
    let decider = nested("deciders", "prefill")
        .or_else(|| str_of(p, "prefillDeciderPluginName").map(str::to_string))
        .or_else(|| str_of(p, "deciderPluginName").map(str::to_string));
    (decode, prefill, decider)
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_CONFIG, load_config};

    #[test]
    fn the_built_in_default_is_what_an_empty_file_gets() {
        let config = load_config("empty.yaml", "", false).unwrap();
        assert_eq!(
            config,
            load_config("default", DEFAULT_CONFIG, false).unwrap()
        );
        assert_eq!(
            config.handler, "single-profile-handler",
            "injected for a single profile"
        );
        let profile = &config.profiles[0];
        assert_eq!(
            profile.scorers,
            vec![
                ("queue-scorer".to_string(), 2.0),
                ("kv-cache-utilization-scorer".to_string(), 2.0),
                ("prefix-cache-scorer".to_string(), 3.0)
            ]
        );
        assert_eq!(profile.picker, "max-score-picker", "a picker is injected");
    }

    #[test]
    fn no_profiles_means_one_default_profile_with_every_plugin() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: decode-filter\n- type: queue-scorer\n- type: random-picker\n";
        let config = load_config("f", text, false).unwrap();
        assert_eq!(config.profiles.len(), 1);
        assert_eq!(config.profiles[0].filters, vec!["decode-filter"]);
        assert_eq!(
            config.profiles[0].scorers,
            vec![("queue-scorer".to_string(), 1.0)]
        );
        assert_eq!(config.profiles[0].picker, "random-picker");
    }

    #[test]
    fn profile_handlers_and_references_are_checked() {
        let two_profiles = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: a\n  plugins: [{pluginRef: queue-scorer}]\n- name: b\n  plugins: [{pluginRef: nope}]\n";
        let problems = load_config("f", two_profiles, false).unwrap_err();
        let codes: Vec<&str> = problems.iter().map(|p| p.code).collect();
        assert!(codes.contains(&"epp-plugin-ref"), "{problems:?}");
        assert!(codes.contains(&"epp-profile-handler"), "{problems:?}");
        let bad_decider = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: decode-filter\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: missing-decider}}\nschedulingProfiles:\n- name: decode\n  plugins: [{pluginRef: decode-filter}]\n";
        let problems = load_config("f", bad_decider, false).unwrap_err();
        assert!(
            problems
                .iter()
                .any(|p| p.message.contains("missing-decider")),
            "{problems:?}"
        );
    }

    #[test]
    fn alpha_plugins_need_the_experimental_flag() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: session-affinity-scorer\n";
        let problems = load_config("f", text, false).unwrap_err();
        assert!(problems.iter().any(|p| p.code == "epp-plugin-alpha"));
        // With the flag it is no longer Alpha-refused, but still not simulated.
        let problems = load_config("f", text, true).unwrap_err();
        assert!(
            problems.iter().all(|p| p.code == "epp-not-simulated"),
            "{problems:?}"
        );
    }

    #[test]
    fn parameters_the_simulation_would_ignore_are_refused_by_name() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: inflight-load-producer\n  parameters: {addEstimatedOutputTokens: true}\n- type: token-load-scorer\n";
        let problems = load_config("f", text, false).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].code, "epp-not-simulated");
        assert!(
            problems[0]
                .path
                .ends_with("parameters.addEstimatedOutputTokens")
        );
        // Off, as the default is, it loads.
        let off = text.replace("true", "false");
        assert!(load_config("f", &off, false).is_ok());
    }
}
