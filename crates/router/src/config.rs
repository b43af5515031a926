//! `EndpointPickerConfig` loading as the EPP does it (llm-d-router
//! `pkg/epp/config/loader/{configloader,defaults,validation}.go`,
//! `research/epp.md` §1): a strict decoder, registered apiVersions only,
//! plugins instantiated by type with strictly decoded parameters, profiles
//! checked and completed with the loader's defaults. What pdsim cannot run
//! faithfully is refused here by name.

use crate::RouterProblem;
use crate::flags::parse_go_duration;
use crate::flowcontrol::{self, Band, ConcurrencyMode, Detector, Fairness, FlowControl, Ordering};
use crate::plugins::Checks;
use crate::plugins::flowcontrol::usagelimits::{Domain, PriorityHoldback, UsageLimit};
use crate::registry::{self, REMOVED, Role};
use pdsim_spec::lines::LineIndex;
use serde_yaml::{Mapping, Value};
use std::collections::BTreeSet;

/// apiVersions the EPP registers for its config (`apix/config/v1alpha1`);
/// the second is the deprecated group, still accepted.
pub const API_VERSIONS: &[&str] = &[
    "llm-d.ai/v1alpha1",
    "inference.networking.x-k8s.io/v1alpha1",
];

/// Feature gates the EPP knows.
/// The feature gates the EPP registers, with their defaults
/// (`loader.RegisterFeatureGate` in `cmd/epp/runner/runner.go`:
/// `flowcontrol.FeatureGate` off, `runserver.HAPopulateNonLeaderDatastoreFeatureGate`
/// on). `haPopulateNonLeaderDatastore` concerns standby EPP replicas, which
/// pdsim does not run, so it changes nothing here.
pub const FEATURE_GATES: &[(&str, bool)] = &[
    ("flowControl", false),
    ("haPopulateNonLeaderDatastore", true),
];

/// A gate entry as `validateFeatureGates` and `loadFeatureConfig`
/// (`pkg/epp/config/loader/`) read it: `name` or `name=value`, the name
/// untrimmed, the value through Go's `strconv.ParseBool` after lower-casing
/// and trimming. `Err` carries the EPP's message.
fn parse_gate(entry: &str) -> Result<(&str, bool), String> {
    let mut parts = entry.split('=');
    let name = parts.next().unwrap_or("");
    if !FEATURE_GATES.iter().any(|(g, _)| *g == name) {
        return Err(format!("feature gate '{name}' is unknown or unregistered"));
    }
    let Some(value) = parts.next() else {
        return Ok((name, true));
    };
    crate::flags::parse_go_bool(&value.trim().to_lowercase())
        .map(|on| (name, on))
        .ok_or_else(|| {
            format!(
                "{value} is not a valid value for the feature gate {name} (strconv.ParseBool refuses it)"
            )
        })
}

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
    /// The flow-control layer, when the `flowControl` gate is on.
    pub flow_control: Option<FlowControl>,
    /// `dataLayer.sources[].extractors[]`: (source plugin, extractor plugin).
    pub extractors: Vec<(String, String)>,
}

impl EndpointPickerConfig {
    pub fn plugin(&self, name: &str) -> Option<&Plugin> {
        self.plugins.iter().find(|p| p.name == name)
    }
}

struct Loader<'a> {
    file: &'a str,
    /// The text as given, indexed for lines only when a problem needs one,
    /// so text the YAML parser refuses is never walked a second time.
    text: &'a str,
    lines: std::cell::OnceCell<LineIndex>,
    /// (plugin name, its index in `plugins`), for problems found after
    /// the list was read that name a plugin.
    declared: Vec<(String, usize)>,
    problems: Vec<RouterProblem>,
}

impl Loader<'_> {
    fn problem(&mut self, path: &str, code: &'static str, message: impl Into<String>) {
        let line = if path.is_empty() {
            None
        } else {
            self.lines
                .get_or_init(|| LineIndex::build(self.text))
                .line_of(path)
        };
        self.problems.push(RouterProblem {
            file: self.file.to_string(),
            path: path.to_string(),
            line,
            code,
            message: message.into(),
        });
    }

    /// Gives the last problem the line the YAML parser stopped at.
    fn at_parser_line(&mut self, location: Option<serde_yaml::Location>) {
        if let (Some(problem), Some(location)) = (self.problems.last_mut(), location) {
            problem.line = Some(u32::try_from(location.line()).unwrap_or(u32::MAX));
        }
    }

    /// The key path of the plugin named `name` as the file writes it
    /// (`plugins[2]`); `plugins` for one the loader added itself.
    fn plugin_at(&self, name: &str) -> String {
        self.declared
            .iter()
            .find(|(n, _)| n == name)
            .map_or_else(|| "plugins".to_string(), |(_, i)| format!("plugins[{i}]"))
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
        text,
        lines: std::cell::OnceCell::new(),
        declared: Vec::new(),
        problems: Vec::new(),
    };
    let text = if text.trim().is_empty() {
        DEFAULT_CONFIG
    } else {
        text
    };
    // Bounds the parser's work (nesting depth, alias expansion) first.
    let text = match pdsim_spec::load::check_yaml(text) {
        Ok(text) => text,
        Err(refusal) => {
            loader.problem("", refusal.code, refusal.to_string());
            if let Some(problem) = loader.problems.last_mut() {
                problem.line = refusal.line;
            }
            return Err(loader.problems);
        }
    };
    let value: Value = match serde_yaml::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            loader.problem("", "yaml-syntax", e.to_string());
            loader.at_parser_line(e.location());
            return Err(loader.problems);
        }
    };
    let Some(top) = value.as_mapping() else {
        loader.problem(
            "",
            "config-shape",
            format!(
                "an EndpointPickerConfig is a mapping (apiVersion, kind, plugins, ...); this file holds {}",
                crate::manifests::yaml_type(&value)
            ),
        );
        // The document as a whole is at fault: point at its first line
        // of content, past comments and blank lines.
        let first = text
            .lines()
            .position(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
            .map_or(1, |i| i + 1);
        loader.problems[0].line = Some(u32::try_from(first).unwrap_or(u32::MAX));
        return Err(loader.problems);
    };
    // The EPP converts its YAML to JSON before decoding (the Kubernetes
    // codec, `decodeRawConfig` in `config/loader/configloader.go`), and
    // JSON holds no NaN or infinity: such a value anywhere refuses the
    // whole file, so nothing below looks at it.
    let mut non_finite = Vec::new();
    crate::manifests::non_finite_numbers(&value, "", &mut non_finite);
    if !non_finite.is_empty() {
        for (path, number) in non_finite {
            loader.problem(
                &path,
                "wrong-type",
                crate::manifests::non_finite_message(number),
            );
        }
        return Err(loader.problems);
    }
    check_shapes(&mut loader, top);
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
    let mut gates_on: std::collections::BTreeMap<&str, bool> = std::collections::BTreeMap::new();
    for (i, gate) in top
        .get("featureGates")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let gate = gate.as_str().unwrap_or("");
        match parse_gate(gate) {
            Ok((name, on)) => gates_on.insert(name, on),
            Err(why) => {
                loader.problem(&format!("featureGates[{i}]"), "epp-feature-gate", why);
                None
            }
        };
        feature_gates.push(gate.to_string());
    }
    // Registered defaults, then the entries in order, the last one winning
    // (`loadFeatureConfig` assigns into one map).
    let gate_on = |name: &str| {
        gates_on.get(name).copied().unwrap_or_else(|| {
            FEATURE_GATES
                .iter()
                .find(|(g, _)| *g == name)
                .is_some_and(|(_, default)| *default)
        })
    };

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
            if map.get("type").is_some_and(|t| !t.is_null()) {
                // Not a string: `check_shapes` named its type.
                continue;
            }
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
            // A factory that never reads its decoder takes any JSON value.
            Some(_)
                if registry::lookup(plugin_type)
                    .is_some_and(|k| k.params.is_none() && k.not_simulated.is_none()) =>
            {
                Mapping::new()
            }
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
            let hint = pdsim_spec::names::nearest(
                plugin_type,
                registry::PLUGINS
                    .iter()
                    .map(|p| p.name)
                    .chain(REMOVED.iter().map(|(n, _)| *n)),
            )
            .map(|name| format!(": did you mean `{name}`?"))
            .unwrap_or_default();
            loader.problem(
                &format!("{at}.type"),
                "epp-plugin-unknown",
                format!("plugin type `{plugin_type}` is not registered{hint}"),
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
        check_parameter_types(&mut loader, &at, plugin_type, &parameters);
        check_parameters(&mut loader, &at, plugin_type, &parameters);
        if let Some(why) = kind.not_simulated {
            loader.problem(
                &format!("{at}.type"),
                "epp-not-simulated",
                format!("pdsim does not simulate plugin `{name}` (type `{plugin_type}`): {why}"),
            );
        }
        loader.declared.push((name.clone(), i));
        plugins.push(Plugin {
            name,
            plugin_type: plugin_type.to_string(),
            parameters,
        });
    }

    check_inflight_refs(&mut loader, &plugins);
    check_token_consumers(&mut loader, &plugins);
    // An endpoint attribute pdsim's scrape cannot give is refused.
    for (i, plugin) in plugins.iter().enumerate() {
        let key = match plugin.plugin_type.as_str() {
            "endpoint-attribute-filter" => "attribute",
            "endpoint-attribute-scorer" => "attributeKey",
            _ => continue,
        };
        let attribute = plugin
            .parameters
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("");
        let producer = plugin.parameters.get("producer").and_then(Value::as_str);
        if let Err(why) =
            crate::plugins::datalayer::metrics::custom_series(&plugins, attribute, producer)
        {
            let at = format!("plugins[{}]", loader.declared[i].1);
            loader.problem(
                &format!("{at}.parameters.{key}"),
                "epp-not-simulated",
                format!("`{}`: {why}", plugin.plugin_type),
            );
        }
    }
    // Each burst producer holds every request for its own window; pdsim
    // runs one window per EPP.
    if let Some((i, _)) = plugins
        .iter()
        .enumerate()
        .filter(|(_, p)| p.plugin_type == "burst-prefix-cache-producer")
        .nth(1)
    {
        let at = format!("plugins[{}]", loader.declared[i].1);
        loader.problem(
            &format!("{at}.type"),
            "epp-not-simulated",
            format!("pdsim does not simulate a second burst-prefix-cache-producer (`{}`): each holds every request for its own batch window, and pdsim runs one window per EPP", plugins[i].name),
        );
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
                loader.problem(
                    &pat,
                    "wrong-type",
                    format!(
                        "a profile's plugin is a mapping with pluginRef and weight, not {}",
                        crate::manifests::yaml_type(slot)
                    ),
                );
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
            // `Weight *float64`: omitted or null is the default 1.
            let weight = match slot.get("weight") {
                None | Some(Value::Null) => Some(1.0),
                Some(v) => v.as_f64(),
            };
            let Some(weight) = weight.filter(|w| w.is_finite()) else {
                loader.problem(
                    &format!("{pat}.weight"),
                    "wrong-type",
                    format!(
                        "weight must be a number (the EPP decodes it into a Go float64), not {}",
                        crate::manifests::yaml_type(slot.get("weight").unwrap_or(&Value::Null))
                    ),
                );
                continue;
            };
            match role_of(&plugins, &reference) {
                None if !names.contains(&reference) => loader.problem(
                    &format!("{pat}.pluginRef"),
                    "epp-plugin-ref",
                    format!(
                        "`{reference}` names no plugin defined in plugins{}",
                        did_you_mean(&reference, &names)
                    ),
                ),
                None => {}
                Some(Role::Filter) => {
                    if also_scorer(&plugins, &reference) {
                        profile.scorers.push((reference.clone(), weight));
                    }
                    profile.filters.push(reference)
                }
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
                // `SchedulerProfile.AddPlugins` (`pkg/epp/scheduling/
                // scheduler_profile.go`) keeps what is a filter, scorer or
                // picker and passes over anything else a profile names (a
                // parser, producer, decider or handler) without an error.
                Some(_) => {}
            }
        }
        // Go adds weight × score in float64 as pdsim does, so any finite
        // weight gives the same totals, negative ones included; only a
        // sum that can overflow to ±Inf (and NaN where both meet) would
        // leave the order to the EPP's sort, which pdsim does not mimic.
        let magnitude: f64 = profile.scorers.iter().map(|(_, w)| w.abs()).sum();
        if !magnitude.is_finite() {
            loader.problem(
                &format!("{at}.plugins"),
                "epp-not-simulated",
                "the scorers' weights are so large that a weighted sum overflows to an infinity (or NaN), whose order in the EPP's picker pdsim does not reproduce; scale the weights down",
            );
        }
        profiles.push(profile);
    }
    if declared.is_empty() {
        // No profiles: one `default` with every filter, scorer and picker
        // (`config/loader/defaults.go`, `ensureSchedulingLayer`).
        let mut profile = Profile {
            name: "default".into(),
            filters: Vec::new(),
            scorers: Vec::new(),
            picker: String::new(),
        };
        for plugin in &plugins {
            match registry::lookup(&plugin.plugin_type).map(|t| t.role) {
                Some(Role::Filter) => {
                    if also_scorer(&plugins, &plugin.name) {
                        profile.scorers.push((plugin.name.clone(), 1.0));
                    }
                    profile.filters.push(plugin.name.clone())
                }
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
    // max-score-picker (`ensureSchedulingLayer` in `config/loader/defaults.go`;
    // it takes the first picker of a Go map, pdsim the first declared).
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

    // Exactly one profile handler: a lone profile without one gets a
    // single-profile-handler (`ensureSchedulingLayer`,
    // `config/loader/defaults.go`); none for several, more than one, or a
    // single-profile-handler over several profiles is an error
    // (`config/loader/configloader.go`).
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
    if let Some(h) = plugins.iter().find(|p| p.name == handler) {
        match h.plugin_type.as_str() {
            "disagg-profile-handler" => check_disagg(&mut loader, h, &plugins, &profiles),
            "pd-profile-handler" => check_pd(&mut loader, h, &plugins, &profiles),
            _ => {}
        }
    }
    check_prefill_header_writers(&mut loader, &plugins, &handler);

    // Data layer and parsers: references must resolve. The saturation
    // detector and the flowControl section: `load_flow_control`.
    let flow_control = load_flow_control(&mut loader, top, &plugins, gate_on("flowControl"));
    let mut extractors: Vec<(String, String)> = Vec::new();
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
            if let Some((_, source_name)) = refs.first() {
                for (_, extractor) in refs.iter().skip(1) {
                    extractors.push((source_name.clone(), extractor.clone()));
                }
            }
            for (path, reference) in refs {
                if !names.contains(&reference) {
                    loader.problem(
                        &path,
                        "epp-plugin-ref",
                        format!(
                            "`{reference}` names no plugin defined in plugins{}",
                            did_you_mean(&reference, &names)
                        ),
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
    if loader.problems.is_empty() {
        Ok(EndpointPickerConfig {
            api_version,
            plugins,
            profiles,
            handler,
            feature_gates,
            flow_control,
            extractors,
        })
    } else {
        Err(loader.problems)
    }
}

/// The keys of `flowControl` (`apix/config/v1alpha1/
/// endpointpickerconfig_types.go`, `FlowControlConfig`), decoded strictly.
const FLOW_CONTROL_KEYS: &[&str] = &[
    "maxBytes",
    "maxRequests",
    "defaultRequestTTL",
    "noEndpointRequestTTL",
    "defaultPriorityBand",
    "defaultNegativePriorityBand",
    "priorityBands",
    "usageLimitPolicyPluginRef",
    "saturationDetector",
    "enableEviction",
];
/// `PriorityBandConfig`'s keys.
const BAND_KEYS: &[&str] = &[
    "priority",
    "maxBytes",
    "maxRequests",
    "fairnessPolicyRef",
    "orderingPolicyRef",
];

/// The flow-control policy a plugin type implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FlowKind {
    Fairness,
    Ordering,
    UsageLimit,
}

fn flow_kind(plugin_type: &str) -> Option<FlowKind> {
    match plugin_type {
        "global-strict-fairness-policy"
        | "round-robin-fairness-policy"
        | "program-aware-fairness" => Some(FlowKind::Fairness),
        "fcfs-ordering-policy" | "edf-ordering-policy" | "slo-deadline-ordering-policy" => {
            Some(FlowKind::Ordering)
        }
        "static-usage-limit-policy"
        | "priority-holdback-policy"
        | "soft-reflective-ceiling-policy" => Some(FlowKind::UsageLimit),
        _ => None,
    }
}

/// A Kubernetes quantity (`resource.Quantity`: a decimal number with an
/// optional binary `Ki`…`Ei`, decimal `n u m k M G T P E` or exponent
/// suffix), as `Value()` gives it: rounded up to an integer. A YAML number
/// is read as its text, as the JSON decoder reads an unquoted quantity.
pub fn parse_quantity(value: &Value) -> Option<i64> {
    let text = match value {
        Value::String(s) => s.trim().to_string(),
        Value::Number(n) => n.to_string(),
        _ => return None,
    };
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    if number.is_empty() || number.matches('.').count() > 1 {
        return None;
    }
    let mantissa: f64 = number.parse().ok()?;
    let scale = match suffix {
        "" => 1.0,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        exp if exp.starts_with(['e', 'E']) => 10f64.powi(exp[1..].parse::<i32>().ok()?),
        _ => return None,
    };
    let v = (mantissa * scale).ceil();
    (v.is_finite() && v.abs() < 9.2e18).then_some(v as i64)
}

/// A `metav1.Duration`: a JSON string Go's `time.ParseDuration` reads.
pub(crate) fn duration_of(value: &Value) -> Option<i64> {
    value.as_str().and_then(parse_go_duration)
}

/// Loads `flowControl` (and the deprecated top-level `saturationDetector`)
/// as the EPP does (`config/loader/configloader.go`, `flowcontrol.go`,
/// `defaults.go`, `validation.go`; `flowcontrol/controller/config.go`,
/// `flowcontrol/registry/config.go`). The section is decoded strictly
/// whatever the gate says; without the `flowControl` gate its settings
/// are ignored (the EPP logs a warning) and only the saturation detector
/// reference is validated, since legacy admission uses the detector for
/// sheddable requests only, of which pdsim has none. With the gate the
/// configuration is resolved: defaults, band 0, policy references.
fn load_flow_control(
    loader: &mut Loader<'_>,
    top: &Mapping,
    plugins: &[Plugin],
    gate: bool,
) -> Option<FlowControl> {
    let empty = Mapping::new();
    let section = match top.get("flowControl") {
        None | Some(Value::Null) => &empty,
        Some(Value::Mapping(m)) => m,
        Some(_) => {
            loader.problem("flowControl", "wrong-type", "flowControl must be a mapping");
            &empty
        }
    };
    for key in section.keys() {
        let key = key.as_str().unwrap_or("?");
        if !FLOW_CONTROL_KEYS.contains(&key) {
            loader.problem(
                &format!("flowControl.{key}"),
                "unknown-key",
                format!(
                    "unknown field `{key}` in flowControl (decoded strictly; it takes {})",
                    FLOW_CONTROL_KEYS.join(", ")
                ),
            );
        }
    }
    let problems_before = loader.problems.len();

    // The saturation detector: flowControl.saturationDetector, else the
    // deprecated top-level one, else `utilization-detector`, auto-created
    // with its defaults when no plugin has that name (`ensureSaturationDetector`).
    let mut detector_ref: Option<(String, String)> = None;
    for (path, value) in [
        ("saturationDetector", top.get("saturationDetector")),
        (
            "flowControl.saturationDetector",
            section.get("saturationDetector"),
        ),
    ] {
        let Some(value) = value.filter(|v| !v.is_null()) else {
            continue;
        };
        let Some(map) = value.as_mapping() else {
            loader.problem(
                path,
                "wrong-type",
                format!("{path} must be a mapping with pluginRef"),
            );
            continue;
        };
        for key in map.keys() {
            let key = key.as_str().unwrap_or("?");
            if key != "pluginRef" {
                loader.problem(
                    &format!("{path}.{key}"),
                    "unknown-key",
                    format!("unknown field `{key}` in {path} (it takes pluginRef only)"),
                );
            }
        }
        match map.get("pluginRef") {
            Some(Value::String(r)) if !r.is_empty() => {
                detector_ref = Some((format!("{path}.pluginRef"), r.clone()));
            }
            _ => loader.problem(
                &format!("{path}.pluginRef"),
                "epp-plugin-ref",
                "saturation detector plugin reference is empty",
            ),
        }
    }
    let detector_plugin = match &detector_ref {
        Some((path, reference)) => match plugins.iter().find(|p| &p.name == reference) {
            Some(p)
                if registry::lookup(&p.plugin_type).map(|t| t.role) == Some(Role::Saturation) =>
            {
                Some(p.clone())
            }
            None if reference == "utilization-detector" => None,
            _ => {
                loader.problem(
                    path,
                    "epp-plugin-ref",
                    format!("`{reference}` is not a saturation detector defined in plugins"),
                );
                None
            }
        },
        None => plugins
            .iter()
            .find(|p| p.name == "utilization-detector")
            .cloned(),
    };

    // Structure and types, checked with or without the gate.
    let quantity = |loader: &mut Loader<'_>, map: &Mapping, at: &str, key: &str| -> u64 {
        let Some(v) = map.get(key).filter(|v| !v.is_null()) else {
            return 0;
        };
        match parse_quantity(v) {
            Some(n) if n >= 0 => n as u64,
            Some(n) => {
                if gate {
                    loader.problem(
                        &format!("{at}.{key}"),
                        "epp-flow-control",
                        format!("{key} must be non-negative, got {n}"),
                    );
                }
                0
            }
            None => {
                loader.problem(
                    &format!("{at}.{key}"),
                    "wrong-type",
                    format!(
                        "{key} is not a Kubernetes quantity (such as \"500\", \"1k\" or \"1Gi\")"
                    ),
                );
                0
            }
        }
    };
    let duration = |loader: &mut Loader<'_>, key: &str| -> Option<i64> {
        let v = section.get(key).filter(|v| !v.is_null())?;
        match duration_of(v) {
            Some(ns) => Some(ns),
            None => {
                loader.problem(
                    &format!("flowControl.{key}"),
                    "wrong-type",
                    format!("{key} must be a duration string such as \"60s\""),
                );
                None
            }
        }
    };
    let max_bytes = quantity(loader, section, "flowControl", "maxBytes");
    let max_requests = quantity(loader, section, "flowControl", "maxRequests");
    let ttl = duration(loader, "defaultRequestTTL");
    let no_endpoint_ttl = duration(loader, "noEndpointRequestTTL");
    // enableEviction is simulated by what it does to pdsim's requests:
    // nothing, so only its type is checked. The runner builds the evictor
    // with the sheddable filter fixed in (`cmd/epp/runner/runner.go`,
    // `buildRequestEvictor`), which lets only priority < 0 requests into the
    // victim heap (`eviction/filtering/sheddable.go`, `eviction/queue.go`
    // `Track`), and pdsim's requests all have priority 0, so `maybeReclaim`
    // (`controller/internal/reclamation.go`) never finds a victim.
    if section
        .get("enableEviction")
        .is_some_and(|v| !(v.is_bool() || v.is_null()))
    {
        loader.problem(
            "flowControl.enableEviction",
            "wrong-type",
            "enableEviction must be a boolean",
        );
    }
    let usage_ref = match section.get("usageLimitPolicyPluginRef") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(_) => {
            loader.problem(
                "flowControl.usageLimitPolicyPluginRef",
                "wrong-type",
                "usageLimitPolicyPluginRef must be a string",
            );
            None
        }
    };
    // A band: its keys, limits and policy references (names).
    struct RawBand {
        at: String,
        priority: i64,
        max_bytes: u64,
        max_requests: u64,
        fairness: Option<String>,
        ordering: Option<String>,
    }
    let band_of = |loader: &mut Loader<'_>, at: String, value: &Value| -> Option<RawBand> {
        let Some(map) = value.as_mapping() else {
            loader.problem(&at, "wrong-type", "a priority band is a mapping");
            return None;
        };
        for key in map.keys() {
            let key = key.as_str().unwrap_or("?");
            if !BAND_KEYS.contains(&key) {
                loader.problem(
                    &format!("{at}.{key}"),
                    "unknown-key",
                    format!(
                        "unknown field `{key}` in a priority band (it takes {})",
                        BAND_KEYS.join(", ")
                    ),
                );
            }
        }
        let priority = match map.get("priority") {
            None | Some(Value::Null) => 0,
            Some(v) => match v.as_i64() {
                Some(p) => p,
                None => {
                    loader.problem(
                        &format!("{at}.priority"),
                        "wrong-type",
                        "priority must be an integer",
                    );
                    0
                }
            },
        };
        let mut reference = |key: &str| match map.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => {
                loader.problem(
                    &format!("{at}.{key}"),
                    "wrong-type",
                    format!("{key} must be a string"),
                );
                None
            }
        };
        let fairness = reference("fairnessPolicyRef");
        let ordering = reference("orderingPolicyRef");
        Some(RawBand {
            max_bytes: quantity(loader, map, &at, "maxBytes"),
            max_requests: quantity(loader, map, &at, "maxRequests"),
            at,
            priority,
            fairness,
            ordering,
        })
    };
    let default_band = section
        .get("defaultPriorityBand")
        .filter(|v| !v.is_null())
        .and_then(|v| band_of(loader, "flowControl.defaultPriorityBand".into(), v));
    let negative_band = section
        .get("defaultNegativePriorityBand")
        .filter(|v| !v.is_null())
        .and_then(|v| band_of(loader, "flowControl.defaultNegativePriorityBand".into(), v));
    let mut bands = Vec::new();
    match section.get("priorityBands") {
        None | Some(Value::Null) => {}
        Some(Value::Sequence(list)) => {
            for (i, v) in list.iter().enumerate() {
                if let Some(b) = band_of(loader, format!("flowControl.priorityBands[{i}]"), v) {
                    bands.push(b);
                }
            }
        }
        Some(_) => loader.problem(
            "flowControl.priorityBands",
            "wrong-type",
            "priorityBands must be a list",
        ),
    }
    if !gate {
        return None;
    }

    // With the gate: resolve. `controller.NewConfigFromAPI`: TTLs.
    for (key, v) in [
        ("defaultRequestTTL", ttl),
        ("noEndpointRequestTTL", no_endpoint_ttl),
    ] {
        if let Some(ns) = v.filter(|ns| *ns < 0) {
            loader.problem(
                &format!("flowControl.{key}"),
                "epp-flow-control",
                format!("{key} cannot be negative, but got {ns}ns"),
            );
        }
    }
    let ttl_ns = ttl.map_or(flowcontrol::DEFAULT_TTL_NS, |n| n.max(0) as u64);
    // Left unset, the no-endpoint budget follows defaultRequestTTL.
    let no_endpoint_ttl_ns = no_endpoint_ttl
        .or(ttl)
        .map_or(flowcontrol::DEFAULT_TTL_NS, |n| n.max(0) as u64);
    // `resolvePlugin`: a reference names a plugin (or one of the defaults
    // `ensureFlowControlLayer` injects when no plugin has its name) that
    // implements the policy.
    let resolve =
        |loader: &mut Loader<'_>, path: &str, reference: &str, want: FlowKind| -> Option<Plugin> {
            let found = plugins
                .iter()
                .find(|p| p.name == reference)
                .cloned()
                .or_else(|| {
                    [
                        "fcfs-ordering-policy",
                        "global-strict-fairness-policy",
                        "static-usage-limit-policy",
                    ]
                    .contains(&reference)
                    .then(|| Plugin {
                        name: reference.to_string(),
                        plugin_type: reference.to_string(),
                        parameters: Mapping::new(),
                    })
                });
            match found {
                None => {
                    loader.problem(
                        path,
                        "epp-plugin-ref",
                        format!("plugin `{reference}` not found"),
                    );
                    None
                }
                Some(p) if flow_kind(&p.plugin_type) == Some(want) => Some(p),
                Some(p) => {
                    loader.problem(
                        path,
                        "epp-plugin-ref",
                        format!(
                            "plugin `{reference}` (type `{}`) is not a {} policy",
                            p.plugin_type,
                            match want {
                                FlowKind::Fairness => "fairness",
                                FlowKind::Ordering => "ordering",
                                FlowKind::UsageLimit => "usage-limit",
                            }
                        ),
                    );
                    None
                }
            }
        };
    let resolve_band = |loader: &mut Loader<'_>, raw: &RawBand| -> Band {
        let fairness = raw
            .fairness
            .as_deref()
            .and_then(|r| {
                resolve(
                    loader,
                    &format!("{}.fairnessPolicyRef", raw.at),
                    r,
                    FlowKind::Fairness,
                )
            })
            .map_or(Fairness::GlobalStrict, |p| match p.plugin_type.as_str() {
                "round-robin-fairness-policy" => Fairness::RoundRobin,
                "program-aware-fairness" => Fairness::ProgramAware,
                _ => Fairness::GlobalStrict,
            });
        let ordering = raw
            .ordering
            .as_deref()
            .and_then(|r| {
                resolve(
                    loader,
                    &format!("{}.orderingPolicyRef", raw.at),
                    r,
                    FlowKind::Ordering,
                )
            })
            .map_or(Ordering::Fcfs, |p| match p.plugin_type.as_str() {
                "edf-ordering-policy" => Ordering::Edf,
                "slo-deadline-ordering-policy" => Ordering::SloDeadline,
                _ => Ordering::Fcfs,
            });
        // A zero (or omitted) band limit takes the default (`applyDefaults`).
        Band {
            priority: raw.priority,
            max_bytes: if raw.max_bytes == 0 {
                flowcontrol::DEFAULT_BAND_MAX_BYTES
            } else {
                raw.max_bytes
            },
            max_requests: if raw.max_requests == 0 {
                flowcontrol::DEFAULT_BAND_MAX_REQUESTS
            } else {
                raw.max_requests
            },
            fairness,
            ordering,
        }
    };
    let template = default_band.as_ref().map(|raw| resolve_band(loader, raw));
    if let Some(raw) = &negative_band {
        resolve_band(loader, raw);
    }
    let mut priorities: Vec<i64> = Vec::new();
    let mut band_zero = None;
    for raw in &bands {
        let band = resolve_band(loader, raw);
        if priorities.contains(&band.priority) {
            loader.problem(
                &format!("{}.priority", raw.at),
                "epp-flow-control",
                format!("duplicate priority level {}", band.priority),
            );
        }
        priorities.push(band.priority);
        if band.priority == 0 {
            band_zero = Some(band);
        }
    }
    // Priority 0 is always provisioned, from the default template when not
    // configured (`registry.NewConfig`).
    let band = band_zero.unwrap_or_else(|| {
        let mut b = template.unwrap_or(Band {
            priority: 0,
            max_bytes: flowcontrol::DEFAULT_BAND_MAX_BYTES,
            max_requests: flowcontrol::DEFAULT_BAND_MAX_REQUESTS,
            fairness: Fairness::GlobalStrict,
            ordering: Ordering::Fcfs,
        });
        b.priority = 0;
        priorities.push(0);
        b
    });
    priorities.sort_unstable_by(|a, b| b.cmp(a));
    let usage = resolve(
        loader,
        "flowControl.usageLimitPolicyPluginRef",
        usage_ref.as_deref().unwrap_or("static-usage-limit-policy"),
        FlowKind::UsageLimit,
    );
    let usage_limit = usage
        .as_ref()
        .map_or(UsageLimit::Static { threshold: 1.0 }, usage_limit_of);
    let detector = detector_of(detector_plugin.as_ref());
    if loader.problems.len() > problems_before {
        return None;
    }
    Some(FlowControl {
        ttl_ns,
        no_endpoint_ttl_ns,
        max_bytes,
        max_requests,
        band,
        priorities,
        usage_limit,
        detector,
    })
}

/// The usage-limit policy a plugin configures, its parameters checked by
/// `check_parameters` (`static-usage-limit-policy` when the type is none
/// of the others).
fn usage_limit_of(plugin: &Plugin) -> UsageLimit {
    let p = &plugin.parameters;
    match plugin.plugin_type.as_str() {
        "priority-holdback-policy" => UsageLimit::PriorityHoldback(PriorityHoldback {
            min_ceiling: number(p, "minCeiling").unwrap_or(0.0),
            max_ceiling: number(p, "maxCeiling").unwrap_or(1.0),
            domain: match p.get("domain").and_then(Value::as_str) {
                Some("value") => Domain::Value,
                _ => Domain::Rank,
            },
        }),
        "soft-reflective-ceiling-policy" => UsageLimit::SoftReflective,
        _ => UsageLimit::Static {
            threshold: number(p, "threshold").unwrap_or(1.0),
        },
    }
}

/// The detector with its factory's defaults (`utilization/config.go`,
/// `concurrency/config.go`); `None` is the auto-created utilization
/// detector. Values were validated by `check_parameters`.
fn detector_of(plugin: Option<&Plugin>) -> Detector {
    let p = plugin.map(|p| &p.parameters);
    let get = |k: &str| p.and_then(|m| number(m, k));
    if plugin.is_some_and(|p| p.plugin_type == "concurrency-detector") {
        let mode = match p.and_then(|m| str_of(m, "concurrencyMode")) {
            Some("tokens") => ConcurrencyMode::Tokens,
            Some("hybrid") => ConcurrencyMode::Hybrid,
            _ => ConcurrencyMode::Requests,
        };
        return Detector::Concurrency {
            max_concurrency: get("maxConcurrency").unwrap_or(100.0).max(1.0) as u64,
            max_tokens: get("maxTokenConcurrency").unwrap_or(1_000_000.0).max(1.0) as u64,
            mode,
        };
    }
    Detector::Utilization {
        queue_depth: get("queueDepthThreshold")
            .filter(|v| *v > 0.0)
            .unwrap_or(5.0),
        kv_util: get("kvCacheUtilThreshold")
            .filter(|v| *v > 0.0)
            .unwrap_or(0.8),
        staleness_ns: p
            .and_then(|m| m.get("metricsStalenessThreshold"))
            .and_then(duration_of)
            .filter(|n| *n > 0)
            .map_or(200_000_000, |n| n as u64),
    }
}

fn number(parameters: &Mapping, key: &str) -> Option<f64> {
    parameters.get(key).and_then(Value::as_f64)
}

/// The JSON types of the EPP's own structures around the plugins, as
/// `EndpointPickerConfig` declares them (`apix/config/v1alpha1/
/// endpointpickerconfig_types.go`). The strict JSON decoder refuses a
/// value of another type; `null` leaves a field at its zero value. The
/// loader below reads each field as if it had the right type, so every
/// other type is named here rather than read as absent.
fn check_shapes(loader: &mut Loader<'_>, top: &Mapping) {
    use crate::manifests::yaml_type;
    let expect = |loader: &mut Loader<'_>, path: &str, value: Option<&Value>, want: &str| {
        let Some(value) = value else { return };
        let ok = match want {
            "a list" => value.is_sequence() || value.is_null(),
            "a mapping" => value.is_mapping() || value.is_null(),
            "a string" => value.is_string() || value.is_null(),
            _ => true,
        };
        if !ok {
            loader.problem(
                path,
                "wrong-type",
                format!("{path} must be {want}, not {}", yaml_type(value)),
            );
        }
    };
    for (key, want) in [
        ("apiVersion", "a string"),
        ("kind", "a string"),
        ("plugins", "a list"),
        ("schedulingProfiles", "a list"),
        ("featureGates", "a list"),
        ("data", "a mapping"),
        ("dataLayer", "a mapping"),
        ("parser", "a mapping"),
        ("requestHandler", "a mapping"),
    ] {
        expect(loader, key, top.get(key), want);
    }
    for (i, gate) in top
        .get("featureGates")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .enumerate()
    {
        expect(
            loader,
            &format!("featureGates[{i}]"),
            Some(gate),
            "a string",
        );
    }
    for (i, plugin) in top
        .get("plugins")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .enumerate()
    {
        for key in ["type", "name"] {
            expect(
                loader,
                &format!("plugins[{i}].{key}"),
                plugin.get(key).filter(|_| plugin.is_mapping()),
                "a string",
            );
        }
    }
    // Lists of mappings with a string pluginRef: data-layer sources and
    // their extractors, the request handler's parsers.
    let refs =
        |loader: &mut Loader<'_>, path: &str, list: Option<&Value>| -> Vec<(usize, Mapping)> {
            expect(loader, path, list, "a list");
            let mut out = Vec::new();
            for (i, item) in list
                .and_then(Value::as_sequence)
                .into_iter()
                .flatten()
                .enumerate()
            {
                let at = format!("{path}[{i}]");
                match item.as_mapping() {
                    Some(map) => {
                        expect(
                            loader,
                            &format!("{at}.pluginRef"),
                            map.get("pluginRef"),
                            "a string",
                        );
                        out.push((i, map.clone()));
                    }
                    None if item.is_null() => {}
                    None => loader.problem(
                        &at,
                        "wrong-type",
                        format!(
                            "{at} must be a mapping with pluginRef, not {}",
                            yaml_type(item)
                        ),
                    ),
                }
            }
            out
        };
    for section in ["data", "dataLayer"] {
        let Some(map) = top.get(section).and_then(Value::as_mapping) else {
            continue;
        };
        let sources = refs(loader, &format!("{section}.sources"), map.get("sources"));
        for (i, source) in &sources {
            refs(
                loader,
                &format!("{section}.sources[{i}].extractors"),
                source.get("extractors"),
            );
        }
    }
    if let Some(parser) = top.get("parser").and_then(Value::as_mapping) {
        expect(
            loader,
            "parser.pluginRef",
            parser.get("pluginRef"),
            "a string",
        );
    }
    if let Some(handler) = top.get("requestHandler").and_then(Value::as_mapping) {
        refs(loader, "requestHandler.parsers", handler.get("parsers"));
    }
    for (i, profile) in top
        .get("schedulingProfiles")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let Some(map) = profile.as_mapping() else {
            continue;
        };
        expect(
            loader,
            &format!("schedulingProfiles[{i}].name"),
            map.get("name"),
            "a string",
        );
        expect(
            loader,
            &format!("schedulingProfiles[{i}].plugins"),
            map.get("plugins"),
            "a list",
        );
        for (j, slot) in map
            .get("plugins")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .enumerate()
        {
            expect(
                loader,
                &format!("schedulingProfiles[{i}].plugins[{j}].pluginRef"),
                slot.get("pluginRef").filter(|_| slot.is_mapping()),
                "a string",
            );
        }
    }
}

/// A Go field type, as the JSON decoder fills it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum GoType {
    Int,
    Float,
    Bool,
    Str,
    /// `[]string`.
    StrList,
    /// A struct whose fields, these, are all strings.
    Strings(&'static [&'static str]),
}

/// The Go types of the parameters pdsim's simulation reads, from the
/// factories' config structs (llm-d-router @ ebab687): `approximateprefix/
/// types.go`, `picker/common.go`, `nohitlru/no_hit_lru.go`,
/// `disagg/prefix_based_pd_decider.go`, `scorer/prefix/plugin.go`,
/// `loadaware/load_aware.go`, `tokenload/token_load.go`,
/// `activerequest/active_request.go`, `prefixcacheaffinity/plugin.go`,
/// `inflightload/producer.go`, `probabilisticadmitter/plugin.go`, and the
/// handlers' `disagg/{disagg_profile_handler,pd_profile_handler,
/// disagg_headers_handler}.go` and `filter/bylabel/filter.go` (a profile
/// name that is not a string would otherwise read as the default one).
const PARAM_TYPES: &[(&str, &[(&str, GoType)])] = {
    use GoType::{Bool, Float, Int, Str, StrList, Strings};
    const PICKER: &[(&str, GoType)] = &[("maxNumOfEndpoints", Int)];
    const HEADERS: &[(&str, GoType)] = &[("prefillProfile", Str), ("encodeProfile", Str)];
    const BY_LABEL: &[(&str, GoType)] = &[
        ("label", Str),
        ("validValues", StrList),
        ("allowsNoLabel", Bool),
    ];
    &[
        (
            "disagg-profile-handler",
            &[
                ("profiles", Strings(&["decode", "prefill", "encode"])),
                ("deciders", Strings(&["prefill", "encode"])),
                ("decodeProfile", Str),
                ("prefillProfile", Str),
                ("encodeProfile", Str),
                ("prefillDeciderPluginName", Str),
                ("encodeDeciderPluginName", Str),
                ("deciderPluginName", Str),
            ],
        ),
        (
            "pd-profile-handler",
            &[
                ("decodeProfile", Str),
                ("prefillProfile", Str),
                ("prefixPluginType", Str),
                ("prefixPluginName", Str),
                ("deciderPluginName", Str),
                ("prefixMatchInfoProducerName", Str),
            ],
        ),
        ("prefill-header-handler", HEADERS),
        ("disagg-headers-handler", HEADERS),
        ("by-label", BY_LABEL),
        (
            "approx-prefix-cache-producer",
            &[
                ("autoTune", Bool),
                ("blockSizeTokens", Int),
                ("blockSize", Int),
                ("maxPrefixBlocksToMatch", Int),
                ("maxPrefixTokensToMatch", Int),
                ("lruCapacityPerServer", Int),
            ],
        ),
        (
            "burst-prefix-cache-producer",
            &[
                ("windowDurationMs", Int),
                ("maxPerReplica", Int),
                ("blockSizeTokens", Int),
                ("maxPrefixTokensToMatch", Int),
                ("minColocateBlocks", Int),
                ("maxBatchSize", Int),
                ("balanceBy", Str),
            ],
        ),
        ("max-score-picker", PICKER),
        ("random-picker", PICKER),
        ("weighted-random-picker", PICKER),
        (
            "no-hit-lru-scorer",
            &[
                ("lruSize", Int),
                ("prefixPluginType", Str),
                ("prefixPluginName", Str),
                ("prefixMatchInfoProducerName", Str),
            ],
        ),
        (
            "prefix-based-pd-decider",
            &[("nonCachedTokens", Int), ("promptTokens", Int)],
        ),
        (
            "prefix-cache-scorer",
            &[
                ("matchLengthWeight", Float),
                ("matchLengthScaleTokens", Int),
                ("prefixMatchInfoProducerName", Str),
            ],
        ),
        ("load-aware-scorer", &[("threshold", Int)]),
        (
            "endpoint-attribute-filter",
            &[
                ("attribute", Str),
                ("producer", Str),
                ("onMissing", Str),
                ("fallbackOnEmpty", Bool),
            ],
        ),
        (
            "endpoint-attribute-scorer",
            &[("attributeKey", Str), ("producer", Str)],
        ),
        (
            "header-label-affinity-scorer",
            &[("headerName", Str), ("labelKey", Str)],
        ),
        (
            "session-id-producer",
            &[("headerName", Str), ("cookieName", Str)],
        ),
        (
            "priority-holdback-policy",
            &[
                ("shape", Str),
                ("domain", Str),
                ("minCeiling", Float),
                ("maxCeiling", Float),
            ],
        ),
        (
            "topology-extractor",
            &[
                ("hostname", Str),
                ("rack", Str),
                ("zone", Str),
                ("region", Str),
            ],
        ),
        (
            "topology-affinity-filter",
            &[("minAffinity", Str), ("topologyProducerName", Str)],
        ),
        ("topology-affinity-scorer", &[("topologyProducerName", Str)]),
        (
            "token-load-scorer",
            &[
                ("queueThresholdTokens", Int),
                ("inFlightLoadProducerName", Str),
            ],
        ),
        (
            "active-request-scorer",
            &[
                ("idleThreshold", Int),
                ("maxBusyScore", Float),
                ("requestTimeout", Str),
            ],
        ),
        (
            "prefix-cache-affinity-filter",
            &[
                ("affinityThreshold", Float),
                ("explorationProbability", Float),
                ("maxTTFTPenaltyMs", Float),
                ("peakPrefillThroughput", Float),
                ("ttftSource", Str),
                ("prefixMatchInfoProducerName", Str),
                ("inFlightLoadProducerName", Str),
            ],
        ),
        (
            "inflight-load-producer",
            &[
                ("addEstimatedOutputTokens", Bool),
                ("outputRatio", Float),
                ("maxEstimatedOutputTokens", Int),
                ("prefixMatchInfoProducerName", Str),
                ("syncCrossReplicaState", Bool),
            ],
        ),
        (
            "probabilistic-admitter",
            &[
                ("queueDepthThreshold", Int),
                ("kvCacheUtilThreshold", Float),
                ("power", Float),
                ("k", Float),
            ],
        ),
    ]
};

/// Whether Go's JSON decoder fills a field of type `want` from `value`
/// once the EPP has turned the YAML into JSON: `null` leaves the zero
/// value; an integer field takes a number written without fraction or
/// exponent, which is what a whole float such as `16.0` becomes in that
/// JSON (Go writes exponents only from 1e21), within int64.
pub(crate) fn go_accepts(want: GoType, value: &Value) -> bool {
    match (want, value) {
        (_, Value::Null) => true,
        (GoType::Int, Value::Number(n)) => {
            n.as_i64().is_some()
                || n.as_f64().is_some_and(|f| {
                    f.is_finite() && f.fract() == 0.0 && f.abs() < 1e21 && f.abs() < 9.2e18
                })
        }
        (GoType::Float, Value::Number(n)) => n.as_f64().is_some_and(f64::is_finite),
        (GoType::Bool, Value::Bool(_)) => true,
        (GoType::Str, Value::String(_)) => true,
        (GoType::StrList, Value::Sequence(items)) => {
            items.iter().all(|v| go_accepts(GoType::Str, v))
        }
        (GoType::Strings(fields), Value::Mapping(map)) => map.iter().all(|(k, v)| {
            k.as_str().is_some_and(|k| fields.contains(&k)) && go_accepts(GoType::Str, v)
        }),
        _ => false,
    }
}

/// Parameters of the wrong JSON type, which the factory's strict decoder
/// refuses (`cannot unmarshal string into Go struct field ... of type int`).
fn check_parameter_types(
    loader: &mut Loader<'_>,
    at: &str,
    plugin_type: &str,
    parameters: &Mapping,
) {
    let Some((_, fields)) = PARAM_TYPES.iter().find(|(t, _)| *t == plugin_type) else {
        return;
    };
    for (key, want) in fields.iter() {
        let Some(value) = parameters.get(*key) else {
            continue;
        };
        if !go_accepts(*want, value) {
            let expected = match want {
                GoType::Int => "an integer (a Go int)".to_string(),
                GoType::Float => "a number (a Go float64)".to_string(),
                GoType::Bool => "true or false".to_string(),
                GoType::Str => "a string".to_string(),
                GoType::StrList => "a list of strings".to_string(),
                GoType::Strings(fields) => {
                    format!("a mapping of {} to strings", fields.join(", "))
                }
            };
            let found = match value {
                Value::Number(_) => format!("the number {}", crate::manifests::quoted(value)),
                other => crate::manifests::yaml_type(other).to_string(),
            };
            loader.problem(
                &format!("{at}.parameters.{key}"),
                "wrong-type",
                format!("`{plugin_type}`: {key} must be {expected}, not {found}"),
            );
        }
    }
}

/// Value checks the plugin factories make, each in the plugin's module.
fn check_parameters(loader: &mut Loader<'_>, at: &str, plugin_type: &str, parameters: &Mapping) {
    use crate::plugins::flowcontrol::{fairness, saturationdetector, usagelimits};
    use crate::plugins::requestcontrol::{dataproducer as producer, requestattributereporter};
    use crate::plugins::scheduling::{filter, profilehandler, scorer, util};
    let mut report = |key: &str, code: &'static str, message: String| {
        loader.problem(
            &format!("{at}.parameters.{key}"),
            code,
            format!("`{plugin_type}`: {message}"),
        );
    };
    let c = &mut Checks::new(&mut report);
    let p = parameters;
    match plugin_type {
        "prefix-based-pd-decider" => profilehandler::disagg::prefix_based_pd_decider::check(c, p),
        "approx-prefix-cache-producer" => producer::approximateprefix::check(c, p),
        "inflight-load-producer" => producer::inflightload::check(c, p),
        "prefix-cache-affinity-filter" => filter::prefixcacheaffinity::check(c, p),
        "pd-profile-handler" | "data-parallel-profile-handler" => {
            profilehandler::check_primary_port(c, p)
        }
        "session-affinity-scorer" | "session-affinity-filter" => util::sessionaffinity::check(c, p),
        "utilization-filter" => filter::utilization::check(c, p),
        "header-profile-handler" => profilehandler::headerprofile::check(c, p),
        "topology-affinity-filter" => filter::topologyaffinity::check(c, p),
        "context-length-aware" => scorer::contextlengthaware::check(c, p),
        "precise-prefix-cache-producer" | "precise-prefix-cache-scorer" => {
            producer::preciseprefixcache::check(c, plugin_type, p)
        }
        "burst-prefix-cache-producer" => producer::burstprefix::check(c, p),
        "request-attribute-reporter" => requestattributereporter::check(c, p),
        "header-label-affinity-scorer" => scorer::headerlabelaffinity::check(c, p),
        "session-id-producer" => producer::sessionid::check(c, p),
        "token-producer" | "tokenizer" => producer::tokenizer::check(c, p),
        "utilization-detector" => saturationdetector::utilization::check(c, p),
        "concurrency-detector" => saturationdetector::concurrency::check(c, p),
        "static-usage-limit-policy" => usagelimits::check_static(c, p),
        "priority-holdback-policy" => usagelimits::priorityholdback::check(c, p),
        "program-aware-fairness" => fairness::check_program_aware(c, p),
        "core-metrics-extractor" => crate::plugins::datalayer::metrics::check(c, p),
        "endpoint-attribute-filter" => filter::endpointattribute::check(c, p),
        "endpoint-attribute-scorer" => scorer::endpointattribute::check(c, p),
        _ => {}
    }
}

/// Whether a plugin slotted as a filter is a scorer too, so a profile
/// referencing it runs it in both places (`scheduler_profile.go`,
/// `AddPlugins` slots a plugin by every interface it implements).
fn also_scorer(plugins: &[Plugin], name: &str) -> bool {
    plugins
        .iter()
        .any(|p| p.name == name && p.plugin_type == "context-length-aware")
}

/// context-length-aware requires the TokenizedPrompt key under its default
/// producer name, `token-producer` (`context_length_aware.go`, `Consumes`).
/// Unless a token producer of that name is configured, the EPP auto-creates
/// one with no parameters, which selects the `estimate` backend: it packs
/// the request's bytes into pseudo-tokens, four bytes each
/// (`dataproducer/tokenizer/{tokenizer,estimate}.go`), so the context length
/// it gives is the request body's length over four. pdsim's requests carry
/// token counts, not text, so that count cannot be reproduced.
fn check_token_consumers(loader: &mut Loader<'_>, plugins: &[Plugin]) {
    let tokenized = plugins.iter().any(|p| {
        p.name == "token-producer"
            && matches!(p.plugin_type.as_str(), "token-producer" | "tokenizer")
    });
    if tokenized {
        return;
    }
    for plugin in plugins
        .iter()
        .filter(|p| p.plugin_type == "context-length-aware")
    {
        loader.problem(
            &format!("{}.type", loader.plugin_at(&plugin.name)),
            "epp-not-simulated",
            format!("pdsim does not simulate plugin `{}` (type `context-length-aware`) without a token producer named `token-producer`: the EPP would auto-create one with the `estimate` backend, whose context length is the request's byte length over four, and pdsim's requests carry token counts, not text; configure a `token-producer` with the `vllm` or `udsTokenizerConfig` backend, whose count is the prompt's tokens", plugin.name),
        );
    }
}

/// Whether a utilization-filter consumes InFlightLoad: only when a
/// condition caps `active-requests` (`UtilizationFilter.Consumes`).
pub(crate) fn utilization_reads_load(plugin: &Plugin) -> bool {
    plugin.plugin_type == "utilization-filter"
        && plugin
            .parameters
            .get("conditions")
            .and_then(Value::as_sequence)
            .is_some_and(|list| {
                list.iter()
                    .any(|c| c.get("metric").and_then(Value::as_str) == Some("active-requests"))
            })
}

/// A consumer that names its InFlightLoad producer reads the key scoped to
/// that name; the default producer is auto-created only for the default
/// key (`inflight-load-producer`), so any other name must be an
/// inflight-load-producer the config defines, or the EPP fails to start
/// (`datalayer/data_graph.go`, `CreateMissingDataProducers`:
/// no default producer for the key).
fn check_inflight_refs(loader: &mut Loader<'_>, plugins: &[Plugin]) {
    for plugin in plugins {
        if !utilization_reads_load(plugin) {
            continue;
        }
        let Some(name) = str_of(&plugin.parameters, "inFlightLoadProducerName") else {
            continue;
        };
        let ok = name.is_empty()
            || name == "inflight-load-producer"
            || plugins
                .iter()
                .any(|p| p.name == name && p.plugin_type == "inflight-load-producer");
        if !ok {
            loader.problem(
                &format!(
                    "{}.parameters.inFlightLoadProducerName",
                    loader.plugin_at(&plugin.name)
                ),
                "epp-plugin-ref",
                format!("`{}`: no inflight-load-producer is named `{name}`, and the EPP auto-creates only the default one, so the InFlightLoad data it requires has no producer", plugin.name),
            );
        }
    }
}

/// Whether `name` is a decider plugin defined in `plugins`.
fn is_decider(plugins: &[Plugin], name: &str) -> bool {
    plugins.iter().any(|pl| {
        pl.name == name && registry::lookup(&pl.plugin_type).map(|t| t.role) == Some(Role::Decider)
    })
}

/// The disagg handler's profiles and deciders must resolve
/// (`disagg_profile_handler.go`, `DisaggProfileHandlerConfigParser` and
/// `HandlerFactory`): nested or flat form, not both; `stageOrder` one of
/// the names `ParseStageOrder` accepts; no prefill decider under
/// `prefill-first`.
fn check_disagg(
    loader: &mut Loader<'_>,
    handler: &Plugin,
    plugins: &[Plugin],
    profiles: &[Profile],
) {
    let p = &handler.parameters;
    let at = format!("{}.parameters", loader.plugin_at(&handler.name));
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
            &at,
            "epp-plugin-parameter",
            "disagg-profile-handler takes the nested or the flat form, not both",
        );
    }
    let stage = match p.get("stageOrder") {
        None => Some(false),
        Some(Value::String(s)) => parse_stage_order(s),
        Some(_) => None,
    };
    let params = disagg_params(p);
    match stage {
        None => loader.problem(
            &format!("{at}.stageOrder"),
            "epp-plugin-parameter",
            "disagg-profile-handler: stageOrder must be `decode-first` or `prefill-first`",
        ),
        Some(true) if params.decider.is_some() => loader.problem(
            &format!("{at}.stageOrder"),
            "epp-plugin-parameter",
            "disagg-profile-handler: a prefill decider is not supported in prefill-first stage order",
        ),
        Some(_) => {}
    }
    if !profiles.iter().any(|prof| prof.name == params.decode) {
        loader.problem(
            "schedulingProfiles",
            "epp-profile-handler",
            format!("disagg-profile-handler needs a `{}` profile", params.decode),
        );
    }
    if let Some(decider) = &params.decider
        && !is_decider(plugins, decider)
    {
        loader.problem(
            &at,
            "epp-plugin-ref",
            format!("decider `{decider}` names no decider plugin defined in plugins"),
        );
    }
}

/// The deprecated pd-profile-handler's factory checks
/// (`pd_profile_handler.go`, `PdProfileHandlerFactory`): `primaryPort` 0
/// or in 1..=65535, a decider name that is not empty and names a decider
/// plugin (the default is a plugin *named* `prefix-based-pd-decider`, so a
/// configuration relying on it must define one). Its `Pick` hands the
/// scheduler whatever it finds under the decode and prefill names, and the
/// scheduler runs a missing profile as a nil one, which fails the request
/// in the EPP; pdsim refuses such a configuration at load instead.
fn check_pd(loader: &mut Loader<'_>, handler: &Plugin, plugins: &[Plugin], profiles: &[Profile]) {
    let at = format!("{}.parameters", loader.plugin_at(&handler.name));
    let params = pd_params(&handler.parameters);
    if params.decider.is_empty() {
        loader.problem(
            &format!("{at}.deciderPluginName"),
            "epp-plugin-parameter",
            "pd-profile-handler: decider plugin name is not defined",
        );
    } else if !is_decider(plugins, &params.decider) {
        loader.problem(
            &format!("{at}.deciderPluginName"),
            "epp-plugin-ref",
            format!(
                "pd-profile-handler: decider `{}` names no decider plugin defined in plugins{}",
                params.decider,
                if handler.parameters.contains_key("deciderPluginName") {
                    ""
                } else {
                    " (the default deciderPluginName)"
                }
            ),
        );
    }
    for (key, name) in [
        ("decodeProfile", &params.decode),
        ("prefillProfile", &params.prefill),
    ] {
        if !profiles.iter().any(|prof| &prof.name == name) {
            loader.problem(
                &format!("{at}.{key}"),
                "epp-profile-handler",
                format!("pd-profile-handler needs a `{name}` profile: the EPP would run a missing profile as nil and fail the request"),
            );
        }
    }
}

/// Plugins whose PreRequest writes `x-prefiller-host-port`, the header on
/// which the decode sidecar disaggregates: the disagg-profile-handler
/// (when it is the handler) and every prefill-header-handler or
/// disagg-headers-handler (`disagg_headers_handler.go`). Each deletes the
/// header, then sets it from the first target of the profile it names.
/// The EPP runs PreRequest plugins in Go map order, so writers naming
/// different profiles would leave the header to chance; pdsim refuses that.
fn check_prefill_header_writers(loader: &mut Loader<'_>, plugins: &[Plugin], handler: &str) {
    let writers = prefill_header_writers(plugins, handler);
    if let Some((first, _)) = writers.first()
        && writers.iter().any(|(_, profile)| profile != &writers[0].1)
    {
        let list: Vec<String> = writers
            .iter()
            .map(|(name, profile)| format!("`{name}` reads `{profile}`"))
            .collect();
        loader.problem(
            &loader.plugin_at(first),
            "epp-prefill-header",
            format!(
                "plugins that set x-prefiller-host-port read different profiles ({}); the EPP runs them in map order, so which one wins is not determined",
                list.join(", ")
            ),
        );
    }
}

/// (plugin name, prefill profile it reads) for every writer of
/// `x-prefiller-host-port`, in plugin order.
pub fn prefill_header_writers(plugins: &[Plugin], handler: &str) -> Vec<(String, String)> {
    plugins
        .iter()
        .filter_map(|p| match p.plugin_type.as_str() {
            "disagg-profile-handler" if p.name == handler => {
                Some((p.name.clone(), disagg_params(&p.parameters).prefill))
            }
            // HeadersHandlerFactory: prefillProfile, default "prefill"
            // (an explicit empty string stays empty, as Go decodes it).
            "prefill-header-handler" | "disagg-headers-handler" => Some((
                p.name.clone(),
                str_of(&p.parameters, "prefillProfile")
                    .unwrap_or("prefill")
                    .to_string(),
            )),
            _ => None,
        })
        .collect()
}

/// `ParseStageOrder` (`disagg_profile_handler.go`): case, `-` and `_`
/// ignored; empty, `decodefirst` or `decode` is decode-first (`false`),
/// `prefillfirst` or `prefill` is prefill-first (`true`).
pub fn parse_stage_order(text: &str) -> Option<bool> {
    let key: String = text
        .chars()
        .filter(|c| *c != '-' && *c != '_')
        .flat_map(char::to_lowercase)
        .collect();
    match key.as_str() {
        "" | "decodefirst" | "decode" => Some(false),
        "prefillfirst" | "prefill" => Some(true),
        _ => None,
    }
}

/// The disagg-profile-handler's resolved parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DisaggParams {
    pub decode: String,
    pub prefill: String,
    /// The prefill decider's plugin name; `None`: P/D never runs.
    pub decider: Option<String>,
    /// `stageOrder: prefill-first`.
    pub prefill_first: bool,
}

/// The disagg handler's parameters in either form, with its defaults
/// (`DisaggProfileHandlerConfigParser`, `toDisaggParams`): empty names
/// fall back to `decode` / `prefill`; the flat `deciderPluginName` counts
/// only when `prefillDeciderPluginName` is empty.
pub fn disagg_params(p: &Mapping) -> DisaggParams {
    let given = |v: Option<&str>| v.filter(|s| !s.is_empty()).map(str::to_string);
    let nested = |section: &str, key: &str| {
        given(
            p.get(section)
                .and_then(Value::as_mapping)
                .and_then(|m| str_of(m, key)),
        )
    };
    let decode = nested("profiles", "decode")
        .or_else(|| given(str_of(p, "decodeProfile")))
        .unwrap_or_else(|| "decode".into());
    let prefill = nested("profiles", "prefill")
        .or_else(|| given(str_of(p, "prefillProfile")))
        .unwrap_or_else(|| "prefill".into());
    let decider = nested("deciders", "prefill")
        .or_else(|| given(str_of(p, "prefillDeciderPluginName")))
        .or_else(|| given(str_of(p, "deciderPluginName")));
    let prefill_first = str_of(p, "stageOrder")
        .and_then(parse_stage_order)
        .unwrap_or(false);
    DisaggParams {
        decode,
        prefill,
        decider,
        prefill_first,
    }
}

/// The deprecated pd-profile-handler's resolved parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PdParams {
    pub decode: String,
    pub prefill: String,
    pub decider: String,
}

/// `PdProfileHandlerConfigParser` (`pd_profile_handler.go`): defaults
/// `decode`, `prefill` and the decider named `prefix-based-pd-decider`,
/// replaced by whatever the parameters give, an empty string included (Go
/// decodes over the defaults).
pub fn pd_params(p: &Mapping) -> PdParams {
    let get = |key: &str, default: &str| str_of(p, key).unwrap_or(default).to_string();
    PdParams {
        decode: get("decodeProfile", "decode"),
        prefill: get("prefillProfile", "prefill"),
        decider: get("deciderPluginName", "prefix-based-pd-decider"),
    }
}

/// ": did you mean `name`?" for a plugin reference near one of the
/// plugins defined, else nothing.
fn did_you_mean(reference: &str, names: &BTreeSet<String>) -> String {
    pdsim_spec::names::nearest(reference, names.iter().map(String::as_str))
        .map(|name| format!(": did you mean `{name}`?"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_CONFIG, load_config};
    use crate::plugins::flowcontrol::usagelimits::{Domain, PriorityHoldback, UsageLimit};

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
    fn a_misspelt_plugin_type_or_reference_gets_a_did_you_mean() {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorr\n- type: prefix-cache-scorer\n  name: prefix\nschedulingProfiles:\n- name: a\n  plugins: [{pluginRef: prefx}, {pluginRef: lora}]\n";
        let problems = load_config("f", text, false).unwrap_err();
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert!(
            messages.contains(
                &"plugin type `queue-scorr` is not registered: did you mean `queue-scorer`?"
            ),
            "{messages:?}"
        );
        assert!(
            messages
                .contains(&"`prefx` names no plugin defined in plugins: did you mean `prefix`?"),
            "{messages:?}"
        );
        // Nothing near: no guess.
        assert!(
            messages.contains(&"`lora` names no plugin defined in plugins"),
            "{messages:?}"
        );
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
    fn a_profile_naming_a_non_scheduling_plugin_passes_over_it_as_the_epp_does() {
        // `SchedulerProfile.AddPlugins` keeps filters, scorers and pickers
        // and skips the rest: a parser and a decider named in a profile are
        // no error and take no part in it.
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: vllmhttp-parser\n- type: always-disagg-pd-decider\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: vllmhttp-parser}, {pluginRef: always-disagg-pd-decider}, {pluginRef: queue-scorer}]\n";
        let config = load_config("f", text, false).unwrap_or_else(|p| panic!("{p:?}"));
        let profile = &config.profiles[0];
        assert!(profile.filters.is_empty());
        assert_eq!(profile.scorers, vec![("queue-scorer".to_string(), 1.0)]);
    }

    #[test]
    fn registered_types_pdsim_does_not_run_are_refused_with_the_reason_not_as_unknown() {
        for (plugin_type, why) in [
            ("multicluster-queue-scorer", "several clusters"),
            ("p2p-source-producer", "P2P"),
            ("header-based-testing-filter", "conformance tests"),
        ] {
            let text = format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: {plugin_type}\n- type: queue-scorer\n"
            );
            let problems = load_config("f", &text, true).unwrap_err();
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert_eq!(problems[0].code, "epp-not-simulated", "{problems:?}");
            assert!(problems[0].message.contains(why), "{problems:?}");
        }
        // Registered and simulated as what they are: the agent-identity
        // header processor (no headers, so no identity) and the topology
        // extractor (its only readers are refused on their own).
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: agent-identity\n  parameters: {additionalSessionHeaders: [x-my-session]}\n- type: topology-extractor\n  parameters: {zone: my/zone}\n- type: queue-scorer\n";
        load_config("f", text, true).unwrap_or_else(|p| panic!("{p:?}"));
        let wrong = text.replace("zone: my/zone", "zones: my/zone");
        let problems = load_config("f", &wrong, true).unwrap_err();
        assert_eq!(problems[0].code, "epp-plugin-parameter", "{problems:?}");
    }

    #[test]
    fn the_burst_producer_is_checked_as_new_data_producer_checks_it() {
        let with = |params: &str| {
            format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: burst-prefix-cache-producer\n  parameters: {params}\n- type: prefix-cache-scorer\n  parameters: {{prefixMatchInfoProducerName: burst-prefix-cache-producer}}\n"
            )
        };
        // The sample's own parameters, and the full set at its edges.
        load_config(
            "f",
            &with("{windowDurationMs: 100, maxPerReplica: -1, minColocateBlocks: 0}"),
            true,
        )
        .unwrap_or_else(|p| panic!("{p:?}"));
        load_config("f", &with("{windowDurationMs: 10000, maxPerReplica: 1, blockSizeTokens: 1, maxPrefixTokensToMatch: 1, minColocateBlocks: 3, maxBatchSize: -1, balanceBy: tokens}"), true)
            .unwrap_or_else(|p| panic!("{p:?}"));
        // Alpha: refused without --allow-experimental-plugins.
        let problems = load_config("f", &with("{}"), false).unwrap_err();
        assert_eq!(problems[0].code, "epp-plugin-alpha", "{problems:?}");
        for (params, key, code) in [
            (
                "{windowDurationMs: 0}",
                "windowDurationMs",
                "epp-plugin-parameter",
            ),
            (
                "{windowDurationMs: 10001}",
                "windowDurationMs",
                "epp-plugin-parameter",
            ),
            ("{windowDurationMs: 1.5}", "windowDurationMs", "wrong-type"),
            (
                "{maxPerReplica: 0}",
                "maxPerReplica",
                "epp-plugin-parameter",
            ),
            (
                "{maxPerReplica: -2}",
                "maxPerReplica",
                "epp-plugin-parameter",
            ),
            (
                "{blockSizeTokens: 0}",
                "blockSizeTokens",
                "epp-plugin-parameter",
            ),
            (
                "{maxPrefixTokensToMatch: -1}",
                "maxPrefixTokensToMatch",
                "epp-plugin-parameter",
            ),
            (
                "{blockSizeTokens: 64, maxPrefixTokensToMatch: 63}",
                "maxPrefixTokensToMatch",
                "epp-plugin-parameter",
            ),
            (
                "{minColocateBlocks: -1}",
                "minColocateBlocks",
                "epp-plugin-parameter",
            ),
            ("{maxBatchSize: 0}", "maxBatchSize", "epp-plugin-parameter"),
            ("{balanceBy: bytes}", "balanceBy", "epp-plugin-parameter"),
            ("{balanceBy: 1}", "balanceBy", "wrong-type"),
            ("{window: 100}", "window", "epp-plugin-parameter"),
        ] {
            let problems = load_config("f", &with(params), true).unwrap_err();
            assert_eq!(problems.len(), 1, "{params}: {problems:?}");
            assert_eq!(problems[0].code, code, "{params}: {problems:?}");
            assert!(
                problems[0].path.ends_with(&format!("parameters.{key}")),
                "{params}: {problems:?}"
            );
        }
        // An empty balanceBy is the default.
        load_config("f", &with("{balanceBy: ''}"), true).unwrap_or_else(|p| panic!("{p:?}"));
        // A second producer is refused: pdsim runs one window.
        let two = with("{}").replace(
            "- type: prefix-cache-scorer",
            "- type: burst-prefix-cache-producer\n  name: second\n- type: prefix-cache-scorer",
        );
        let problems = load_config("f", &two, true).unwrap_err();
        assert_eq!(problems[0].code, "epp-not-simulated", "{problems:?}");
        assert!(problems[0].message.contains("`second`"), "{problems:?}");
    }

    #[test]
    fn the_attribute_reporter_loads_as_its_factory_loads_it() {
        let with = |params: &str| {
            format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- name: total-tokens-cost-reporter\n  type: request-attribute-reporter\n  parameters:\n{params}"
            )
        };
        // The README's configuration.
        let readme = "    attributes:\n    - key:\n        namespace: envoy.lb\n        name: x-gateway-inference-request-cost\n      expression: |\n        usage.prompt_tokens + usage.completion_tokens\n      condition: \"has(usage.prompt_tokens) && has(usage.completion_tokens)\"\n";
        load_config("f", &with(readme), false).unwrap_or_else(|p| panic!("{p:?}"));
        let problems = |params: &str| {
            load_config("f", &with(params), false)
                .unwrap_err()
                .into_iter()
                .map(|p| (p.code, p.path, p.message))
                .collect::<Vec<_>>()
        };
        let one = |params: &str| {
            let found = problems(params);
            assert_eq!(found.len(), 1, "{params}: {found:?}");
            found.into_iter().next().unwrap()
        };
        let at = |p: &str| format!("plugins[1].parameters.{p}");
        // `New`: exactly one attribute, a name, an expression.
        let (code, path, _) = one("    attributes: []\n");
        assert_eq!((code, path), ("epp-plugin-parameter", at("attributes")));
        let two = "    attributes:\n    - {key: {name: a}, expression: usage.a}\n    - {key: {name: b}, expression: usage.b}\n";
        assert_eq!(one(two).0, "epp-plugin-parameter");
        let (code, path, _) =
            one("    attributes:\n    - {key: {namespace: n}, expression: usage.a}\n");
        assert_eq!(
            (code, path),
            ("epp-plugin-parameter", at("attributes[0].key.name"))
        );
        let (code, path, _) = one("    attributes:\n    - {key: {name: a}}\n");
        assert_eq!(
            (code, path),
            ("epp-plugin-parameter", at("attributes[0].expression"))
        );
        // The CEL compile: an error cel-go reports, and an expression outside
        // what pdsim checks, each named.
        let (code, path, message) = one(
            "    attributes:\n    - {key: {name: a}, expression: usage.a, condition: 'usage.a + \"x\" > 1'}\n",
        );
        assert_eq!(
            (code, path.as_str()),
            (
                "epp-plugin-parameter",
                at("attributes[0].condition").as_str()
            )
        );
        assert!(message.contains("failed to compile condition"), "{message}");
        let (code, _, message) =
            one("    attributes:\n    - {key: {name: a}, expression: 'usage.tags[0]'}\n");
        assert_eq!(code, "epp-not-simulated");
        assert!(message.contains("indexing"), "{message}");
        // Decoded strictly, by type.
        let (code, path, _) =
            one("    attributes:\n    - {key: {name: a}, expression: usage.a, weight: 2}\n");
        assert_eq!((code, path), ("wrong-type", at("attributes[0]")));
        let (code, path, _) = one("    attributes:\n    - {key: {name: 7}, expression: usage.a}\n");
        assert_eq!((code, path), ("wrong-type", at("attributes[0].key.name")));
        let (code, path, _) = one("    attributes: {key: a}\n");
        assert_eq!((code, path), ("wrong-type", at("attributes")));
        let (code, _, _) = one("    attributes:\n    - {key: {name: a}, expression: [usage.a]}\n");
        assert_eq!(code, "wrong-type");
    }

    #[test]
    fn header_label_affinity_and_session_id_parameters_are_checked_as_their_factories_check_them() {
        let with = |plugin: &str, params: &str| {
            format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- type: {plugin}\n  parameters: {params}\n"
            )
        };
        let scorer = "header-label-affinity-scorer";
        load_config("f", &with(scorer, "{headerName: x-t, labelKey: t}"), true)
            .unwrap_or_else(|p| panic!("{p:?}"));
        // Alpha.
        assert!(load_config("f", &with(scorer, "{headerName: x-t, labelKey: t}"), false).is_err());
        for (params, key) in [
            ("{labelKey: t}", "headerName"),
            ("{headerName: x-t, labelKey: ''}", "labelKey"),
        ] {
            let p = load_config("f", &with(scorer, params), true).unwrap_err();
            assert_eq!(p.len(), 1, "{p:?}");
            assert_eq!(p[0].code, "epp-plugin-parameter");
            assert!(p[0].path.ends_with(key), "{p:?}");
        }
        let producer = "session-id-producer";
        for ok in [
            "{headerName: X-Session-Id}",
            "{cookieName: llm-d-session}",
            "{headerName: ' ', cookieName: c}",
        ] {
            load_config("f", &with(producer, ok), false).unwrap_or_else(|p| panic!("{ok}: {p:?}"));
        }
        for bad in ["{}", "{headerName: '  '}", "{headerName: h, cookieName: c}"] {
            let p = load_config("f", &with(producer, bad), false).unwrap_err();
            assert_eq!(p.len(), 1, "{bad}: {p:?}");
            assert!(
                p[0].message
                    .contains("exactly one of headerName or cookieName"),
                "{p:?}"
            );
        }
        let p = load_config("f", &with(producer, "{headerName: 7}"), false).unwrap_err();
        assert_eq!(p[0].code, "wrong-type", "{p:?}");
    }

    #[test]
    fn the_metrics_extractor_is_checked_as_its_factory_checks_it() {
        let with = |params: &str| {
            format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- type: core-metrics-extractor\n  parameters: {params}\n"
            )
        };
        load_config("f", &with("{engineConfigs: [{name: mine, queuedRequestsSpec: 'q{a=b}', customMetrics: [{attributeKey: k, metricSpec: m}]}], defaultEngine: mine}"), false)
            .unwrap_or_else(|p| panic!("{p:?}"));
        for (params, path, text) in [
            (
                "{engineConfigs: [{name: ''}]}",
                "engineConfigs[0].name",
                "cannot be empty",
            ),
            (
                "{engineConfigs: [{name: default}]}",
                "engineConfigs[0].name",
                "reserved",
            ),
            (
                "{engineConfigs: [{name: a}, {name: a}]}",
                "engineConfigs[1].name",
                "register",
            ),
            (
                "{engineConfigs: [{name: a, queueSpec: q}]}",
                "engineConfigs[0].queueSpec",
                "not a field",
            ),
            (
                "{engineConfigs: [{name: a, kvUsageSpec: '9bad'}]}",
                "engineConfigs[0].kvUsageSpec",
                "not a valid metric specification",
            ),
            (
                "{engineConfigs: [{name: a, customMetrics: [{attributeKey: k, metricSpec: 'm{x}'}]}]}",
                "engineConfigs[0].customMetrics[0].metricSpec",
                "invalid label pair",
            ),
            (
                "{defaultEngine: nothing}",
                "defaultEngine",
                "not found in engineConfigs",
            ),
        ] {
            let p = load_config("f", &with(params), false).unwrap_err();
            assert_eq!(p.len(), 1, "{params}: {p:?}");
            assert!(p[0].path.ends_with(path), "{params}: {p:?}");
            assert!(p[0].message.contains(text), "{params}: {p:?}");
        }
    }

    #[test]
    fn endpoint_attribute_plugins_are_checked_as_their_factories_check_them() {
        let with = |plugin: &str, params: &str| {
            format!(
                "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- type: core-metrics-extractor\n  parameters: {{engineConfigs: [{{name: vllm, queuedRequestsSpec: 'vllm:num_requests_waiting', runningRequestsSpec: 'vllm:num_requests_running', kvUsageSpec: 'vllm:kv_cache_usage_perc', cacheInfoSpec: 'vllm:cache_config_info', customMetrics: [{{attributeKey: q, metricSpec: 'vllm:num_requests_waiting'}}, {{attributeKey: p, metricSpec: 'vllm:num_preemptions_total'}}]}}]}}\n- type: {plugin}\n  parameters: {params}\n"
            )
        };
        let filter = "endpoint-attribute-filter";
        let scorer = "endpoint-attribute-scorer";
        let ok_filter = "{attribute: q, algorithm: {type: threshold, threshold: {operator: LessThan, value: 3}}}";
        let ok_scorer = "{attributeKey: q, algorithm: {type: linear_lower_is_better, normalization: {adaptiveRange: {}}}}";
        load_config("f", &with(filter, ok_filter), true).unwrap_or_else(|p| panic!("{p:?}"));
        load_config("f", &with(scorer, ok_scorer), true).unwrap_or_else(|p| panic!("{p:?}"));
        for (plugin, params, path, code, text) in [
            (
                filter,
                "{algorithm: {type: threshold}}",
                "attribute",
                "epp-plugin-parameter",
                "non-empty attribute",
            ),
            (
                filter,
                "{attribute: q, onMissing: Skip, algorithm: {type: threshold}}",
                "onMissing",
                "epp-plugin-parameter",
                "\"Pass\" or \"Fail\"",
            ),
            (
                filter,
                "{attribute: q, algorithm: {type: range}}",
                "algorithm.type",
                "epp-plugin-parameter",
                "must be \"threshold\"",
            ),
            (
                filter,
                "{attribute: q, algorithm: {type: threshold}}",
                "algorithm.threshold",
                "epp-plugin-parameter",
                "requires algorithm.threshold",
            ),
            (
                filter,
                "{attribute: q, algorithm: {type: threshold, threshold: {operator: Below, value: 1}}}",
                "algorithm.threshold.operator",
                "epp-plugin-parameter",
                "LessThan",
            ),
            (
                filter,
                "{attribute: q, algorithm: {type: threshold, threshold: {operator: Equal, value: high}}}",
                "algorithm.threshold.value",
                "wrong-type",
                "must be a number",
            ),
            (
                filter,
                "{attribute: q, algorithm: {type: threshold, limit: 1}}",
                "algorithm.limit",
                "epp-plugin-parameter",
                "not a field",
            ),
            (
                filter,
                "{attribute: q/core-metrics-extractor, algorithm: {type: threshold, threshold: {operator: Equal, value: 1}}}",
                "attribute",
                "epp-plugin-parameter",
                "no producer is set",
            ),
            (
                filter,
                "{attribute: p, algorithm: {type: threshold, threshold: {operator: Equal, value: 1}}}",
                "attribute",
                "epp-not-simulated",
                "vllm:num_preemptions_total",
            ),
            (
                scorer,
                "{algorithm: {type: linear_lower_is_better}}",
                "attributeKey",
                "epp-plugin-parameter",
                "non-empty attributeKey",
            ),
            (
                scorer,
                "{attributeKey: q, algorithm: {type: quadratic}}",
                "algorithm.type",
                "epp-plugin-parameter",
                "linear_lower_is_better",
            ),
            (
                scorer,
                "{attributeKey: q, algorithm: {type: linear_lower_is_better, normalization: {fixedRange: {min: 0, max: 1}, adaptiveRange: {}}}}",
                "algorithm.normalization",
                "epp-plugin-parameter",
                "at most one",
            ),
            (
                scorer,
                "{attributeKey: q, algorithm: {type: linear_lower_is_better, normalization: {fixedRange: {min: 2, max: 2}}}}",
                "algorithm.normalization.fixedRange",
                "epp-plugin-parameter",
                "min < max",
            ),
            (
                scorer,
                "{attributeKey: p, algorithm: {type: linear_lower_is_better}}",
                "attributeKey",
                "epp-not-simulated",
                "do not export",
            ),
        ] {
            let p = load_config("f", &with(plugin, params), true).unwrap_err();
            assert_eq!(p.len(), 1, "{params}: {p:?}");
            assert_eq!(p[0].code, code, "{params}: {p:?}");
            assert!(p[0].path.ends_with(path), "{params}: {p:?}");
            assert!(p[0].message.contains(text), "{params}: {p:?}");
        }
    }

    #[test]
    fn feature_gates_are_the_registered_ones_with_go_booleans() {
        // `validateFeatureGates` / `loadFeatureConfig`: `name[=bool]`, the
        // last entry for a name winning; unknown names and values that
        // `strconv.ParseBool` refuses are errors.
        let with = |gates: &str| {
            load_config(
                "f",
                &format!(
                    "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: {gates}\nplugins:\n- type: queue-scorer\n"
                ),
                false,
            )
        };
        let on = |gates: &str| {
            with(gates)
                .unwrap_or_else(|p| panic!("{gates}: {p:?}"))
                .flow_control
                .is_some()
        };
        assert!(on("[flowControl]"));
        assert!(on("[flowControl=TRUE]"));
        assert!(on("[\"flowControl= 1 \"]"));
        assert!(!on("[flowControl=f]"));
        assert!(
            !on("[flowControl, flowControl=false]"),
            "the last entry wins"
        );
        assert!(!on("[haPopulateNonLeaderDatastore]"));
        assert!(!on("[]"), "off by default");
        for (gates, why) in [
            (
                "[dataLayer]",
                "feature gate 'dataLayer' is unknown or unregistered",
            ),
            ("[enableLegacyMetrics]", "'enableLegacyMetrics' is unknown"),
            ("[\" flowControl\"]", "' flowControl' is unknown"),
            (
                "[flowControl=maybe]",
                "maybe is not a valid value for the feature gate flowControl",
            ),
        ] {
            let problems = with(gates).unwrap_err();
            assert_eq!(problems[0].code, "epp-feature-gate", "{problems:?}");
            assert!(problems[0].message.contains(why), "{gates}: {problems:?}");
        }
    }

    #[test]
    fn alpha_plugins_need_the_experimental_flag() {
        // session-affinity-scorer is registered StabilityAlpha
        // (`runner.go`, `registerInTreePlugins`).
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: session-affinity-scorer\n";
        let problems = load_config("f", text, false).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].code, "epp-plugin-alpha");
        assert!(load_config("f", text, true).is_ok());
    }

    fn codes(text: &str, experimental: bool) -> Vec<(&'static str, String)> {
        match load_config("f", text, experimental) {
            Ok(_) => Vec::new(),
            Err(problems) => problems.into_iter().map(|p| (p.code, p.path)).collect(),
        }
    }

    const HEAD: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n";
    const PD_PROFILES: &str = "schedulingProfiles:\n- name: prefill\n  plugins: [{pluginRef: prefill-filter}]\n- name: decode\n  plugins: [{pluginRef: decode-filter}]\n";

    #[test]
    fn topology_parameters_are_checked_as_their_factories_check_them() {
        let with = |plugin: &str, params: &str| {
            codes(
                &format!("{HEAD}- type: {plugin}\n  parameters: {params}\n"),
                true,
            )
        };
        for level in ["host", "rack", "zone", "region", "''", "null"] {
            assert!(
                with(
                    "topology-affinity-filter",
                    &format!("{{minAffinity: {level}}}")
                )
                .is_empty()
            );
        }
        let path = |key: &str| format!("plugins[0].parameters.{key}");
        assert_eq!(
            with("topology-affinity-filter", "{minAffinity: node}"),
            vec![("epp-plugin-parameter", path("minAffinity"))]
        );
        assert_eq!(
            with("topology-affinity-filter", "{minAffinity: Host}"),
            vec![("epp-plugin-parameter", path("minAffinity"))]
        );
        assert_eq!(
            with("topology-affinity-filter", "{minAffinity: 1}"),
            vec![("wrong-type", path("minAffinity"))]
        );
        assert_eq!(
            with("topology-affinity-scorer", "{topologyProducerName: [a]}"),
            vec![("wrong-type", path("topologyProducerName"))]
        );
        assert_eq!(
            with("topology-extractor", "{rack: 7}"),
            vec![("wrong-type", path("rack"))]
        );
        assert!(with("topology-extractor", "{rack: my/rack, zone: ''}").is_empty());
        // Alpha, so they need --allow-experimental-plugins.
        assert!(!codes(&format!("{HEAD}- type: topology-affinity-scorer\n"), false).is_empty());
    }

    #[test]
    fn session_affinity_parameters_are_decoded_strictly_and_validated() {
        let with = |params: &str| {
            codes(
                &format!("{HEAD}- type: session-affinity-scorer\n  parameters: {params}\n"),
                true,
            )
        };
        assert!(with("{}").is_empty());
        assert!(with("{strategy: session_id, sessionIdConfig: {sources: [{header: X-Id}, {attribute: agent-identity, producer: p}], evictionTtlSeconds: 60}}").is_empty());
        assert!(
            with("{encodedEndpointHeaderConfig: {header: x-t}, profileName: prefill}").is_empty()
        );
        for (params, path) in [
            ("{strategy: sticky}", "plugins[0].parameters.strategy"),
            (
                "{encodedEndpointHeaderConfig: {name: x}}",
                "plugins[0].parameters.encodedEndpointHeaderConfig",
            ),
            (
                "{strategy: session_id, sessionIdConfig: {sources: [{header: a, attribute: b}]}}",
                "plugins[0].parameters.sessionIdConfig.sources[0]",
            ),
            (
                "{strategy: session_id, sessionIdConfig: {sources: [{}]}}",
                "plugins[0].parameters.sessionIdConfig.sources[0]",
            ),
            (
                "{strategy: session_id, sessionIdConfig: {evictionTtlSeconds: -1}}",
                "plugins[0].parameters.sessionIdConfig.evictionTtlSeconds",
            ),
            (
                "{sessionIdConfig: {ttl: 3}}",
                "plugins[0].parameters.sessionIdConfig",
            ),
            ("{cookie: x}", "plugins[0].parameters.cookie"),
        ] {
            let found = with(params);
            assert_eq!(found.len(), 1, "{params}: {found:?}");
            assert_eq!(
                found[0],
                ("epp-plugin-parameter", path.to_string()),
                "{params}"
            );
        }
        // The session_id block is validated only under that strategy.
        assert!(with("{sessionIdConfig: {sources: [{}]}}").is_empty());
    }

    #[test]
    fn disagg_stage_order_is_parsed_as_the_epp_parses_it() {
        use super::parse_stage_order;
        for (text, prefill_first) in [
            ("", Some(false)),
            ("decode-first", Some(false)),
            ("Decode", Some(false)),
            ("prefill-first", Some(true)),
            ("PREFILL_FIRST", Some(true)),
            ("prefill", Some(true)),
            ("sideways", None),
        ] {
            assert_eq!(parse_stage_order(text), prefill_first, "{text}");
        }
        let config = |params: &str| {
            format!(
                "{HEAD}- type: prefill-filter\n- type: decode-filter\n- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {params}\n{PD_PROFILES}"
            )
        };
        assert!(codes(&config("{stageOrder: prefill-first}"), false).is_empty());
        assert!(
            codes(
                &config(
                    "{stageOrder: decode-first, deciders: {prefill: always-disagg-pd-decider}}"
                ),
                false
            )
            .is_empty()
        );
        assert!(
            codes(
                &config("{stageOrder: decode-first, deciderPluginName: always-disagg-pd-decider}"),
                false
            )
            .is_empty(),
            "flat form too"
        );
        let refused = codes(
            &config("{stageOrder: prefill-first, deciders: {prefill: always-disagg-pd-decider}}"),
            false,
        );
        assert_eq!(
            refused,
            vec![(
                "epp-plugin-parameter",
                "plugins[3].parameters.stageOrder".to_string()
            )]
        );
        let refused = codes(&config("{stageOrder: sideways}"), false);
        assert_eq!(refused.len(), 1, "{refused:?}");
    }

    #[test]
    fn the_deprecated_pd_handler_loads_with_its_own_parameters() {
        let plugins = "- type: prefill-filter\n- type: decode-filter\n- type: prefix-based-pd-decider\n  parameters: {nonCachedTokens: 8}\n- type: prefill-header-handler\n";
        let config = |handler: &str| format!("{HEAD}{plugins}{handler}{PD_PROFILES}");
        // All six of its own keys, plus prefixMatchInfoProducerName.
        let full = "- type: pd-profile-handler\n  parameters: {decodeProfile: decode, prefillProfile: prefill, prefixPluginType: prefix-cache-scorer, prefixPluginName: prefix-cache-scorer, primaryPort: 8000, deciderPluginName: prefix-based-pd-decider, prefixMatchInfoProducerName: approx-prefix-cache-producer}\n";
        assert!(
            codes(&config(full), false).is_empty(),
            "{:?}",
            codes(&config(full), false)
        );
        // The default decider is the plugin *named* prefix-based-pd-decider.
        assert!(codes(&config("- type: pd-profile-handler\n"), false).is_empty());
        let renamed = config("- type: pd-profile-handler\n").replace(
            "- type: prefix-based-pd-decider\n",
            "- type: prefix-based-pd-decider\n  name: d\n",
        );
        let refused = codes(&renamed, false);
        assert_eq!(
            refused,
            vec![(
                "epp-plugin-ref",
                "plugins[4].parameters.deciderPluginName".to_string()
            )]
        );
        for (params, code) in [
            ("{deciderPluginName: \"\"}", "epp-plugin-parameter"),
            ("{primaryPort: 70000}", "epp-plugin-parameter"),
            ("{decodeProfile: nowhere}", "epp-profile-handler"),
            ("{stageOrder: prefill-first}", "epp-plugin-parameter"),
        ] {
            let found = codes(
                &config(&format!(
                    "- type: pd-profile-handler\n  parameters: {params}\n"
                )),
                false,
            );
            assert_eq!(found.len(), 1, "{params}: {found:?}");
            assert_eq!(found[0].0, code, "{params}");
        }
        // The header handler takes encodeProfile too (one factory).
        let with_encode = config("- type: pd-profile-handler\n").replace("- type: prefill-header-handler\n", "- type: prefill-header-handler\n  parameters: {prefillProfile: prefill, encodeProfile: encode}\n");
        assert!(codes(&with_encode, false).is_empty());
    }

    #[test]
    fn header_writers_that_read_different_profiles_are_refused() {
        let text = format!(
            "{HEAD}- type: prefill-filter\n- type: decode-filter\n- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {{deciders: {{prefill: always-disagg-pd-decider}}}}\n- type: prefill-header-handler\n  parameters: {{prefillProfile: other}}\n{PD_PROFILES}"
        );
        let found = codes(&text, false);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].0, "epp-prefill-header");
        // Agreeing writers load.
        let agreeing = text.replace("  parameters: {prefillProfile: other}\n", "");
        assert!(codes(&agreeing, false).is_empty());
    }

    #[test]
    fn the_data_parallel_handler_checks_its_port() {
        let config = |params: &str| {
            format!(
                "{HEAD}- type: queue-scorer\n- type: data-parallel-profile-handler\n  parameters: {params}\nschedulingProfiles:\n- name: default\n  plugins: [{{pluginRef: queue-scorer}}]\n"
            )
        };
        assert!(codes(&config("{}"), false).is_empty());
        assert!(codes(&config("{primaryPort: 0}"), false).is_empty());
        assert_eq!(codes(&config("{primaryPort: 65536}"), false).len(), 1);
        assert_eq!(codes(&config("{primaryPort: -1}"), false).len(), 1);
    }

    #[test]
    fn precise_and_token_producer_parameters_are_decoded_strictly() {
        let with = |producer: &str, token: &str| {
            codes(
                &format!(
                    "{HEAD}- type: token-producer\n  parameters: {token}\n- type: precise-prefix-cache-producer\n  parameters: {producer}\n"
                ),
                false,
            )
        };
        let vllm = "{modelName: m, vllm: {url: 'http://x:8000', timeout: 5s}}";
        assert!(with("{tokenProcessorConfig: {blockSize: 16, hashSeed: '42'}, indexerConfig: {kvBlockIndexConfig: {inMemoryConfig: {size: 1000, podCacheSize: 4}}, kvCacheBackendConfigs: [{name: gpu, weight: 1.0}, {name: cpu, weight: 0.5}]}, kvEventsConfig: {zmqEndpoint: 'tcp://0.0.0.0:5557', discoverPods: false}, speculativeIndexing: true, speculativeTTL: 500ms}", vllm).is_empty());
        for (producer, token, code, path) in [
            (
                "{tokenProcessorConfig: {blokSize: 16}}",
                vllm,
                "epp-plugin-parameter",
                "plugins[1].parameters.tokenProcessorConfig.blokSize",
            ),
            (
                "{indexerConfig: {kvBlockIndexConfig: {redisConfig: {address: r}}}}",
                vllm,
                "epp-not-simulated",
                "plugins[1].parameters.indexerConfig.kvBlockIndexConfig.redisConfig",
            ),
            (
                "{indexerConfig: {tokenizersPoolConfig: {modelName: m}}}",
                vllm,
                "epp-plugin-parameter",
                "plugins[1].parameters.indexerConfig.tokenizersPoolConfig",
            ),
            (
                "{speculativeTTL: soon}",
                vllm,
                "epp-plugin-parameter",
                "plugins[1].parameters.speculativeTTL",
            ),
            // Go's `time.ParseDuration` refuses overflow (`prerequest.go`).
            (
                "{speculativeTTL: 9999999999h}",
                vllm,
                "epp-plugin-parameter",
                "plugins[1].parameters.speculativeTTL",
            ),
            (
                "{kvEventsConfig: {engineType: sglang}}",
                vllm,
                "epp-not-simulated",
                "plugins[1].parameters.kvEventsConfig.engineType",
            ),
            (
                "{}",
                "{vllm: {url: x}}",
                "epp-plugin-parameter",
                "plugins[0].parameters.modelName",
            ),
            (
                "{}",
                "{estimate: {}}",
                "epp-not-simulated",
                "plugins[0].parameters.estimate",
            ),
            (
                "{}",
                "{}",
                "epp-not-simulated",
                "plugins[0].parameters.modelName",
            ),
        ] {
            let found = with(producer, token);
            assert_eq!(found, vec![(code, path.to_string())], "{producer} {token}");
        }
        // One backend at most, whichever two are set (`tokenizer.go`).
        let two = (
            "epp-plugin-parameter",
            "plugins[0].parameters.vllm".to_string(),
        );
        for token in [
            "{modelName: m, estimate: {}, vllm: {url: x}}",
            "{modelName: m, estimate: {}, udsTokenizerConfig: {socketFile: /s}}",
            "{modelName: m, vllm: {url: x}, udsTokenizerConfig: {socketFile: /s}}",
        ] {
            assert!(
                with("{}", token).contains(&two),
                "{token}: {:?}",
                with("{}", token)
            );
        }
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

    const FC_HEAD: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: [flowControl]\nplugins:\n- type: queue-scorer\n";

    #[test]
    fn the_flow_control_gate_loads_with_the_epp_defaults() {
        use crate::flowcontrol::{Detector, Fairness, Ordering};
        let config = load_config("f", FC_HEAD, false).unwrap();
        let fc = config.flow_control.expect("the gate turns flow control on");
        assert_eq!(fc.ttl_ns, 60_000_000_000);
        assert_eq!(fc.no_endpoint_ttl_ns, 60_000_000_000);
        assert_eq!((fc.max_bytes, fc.max_requests), (0, 0), "no global limits");
        assert_eq!(fc.band.max_bytes, 1_000_000_000);
        assert_eq!(fc.band.max_requests, 5000);
        assert_eq!(fc.band.fairness, Fairness::GlobalStrict);
        assert_eq!(fc.band.ordering, Ordering::Fcfs);
        assert_eq!(fc.usage_limit, UsageLimit::Static { threshold: 1.0 });
        assert_eq!(
            fc.detector,
            Detector::Utilization {
                queue_depth: 5.0,
                kv_util: 0.8,
                staleness_ns: 200_000_000
            }
        );
        // Without the gate the section is read but not used.
        let off = FC_HEAD.replace("featureGates: [flowControl]\n", "")
            + "flowControl: {maxRequests: \"10\", defaultRequestTTL: 5s}\n";
        assert_eq!(load_config("f", &off, false).unwrap().flow_control, None);
    }

    #[test]
    fn the_flow_control_guide_config_resolves_band_zero() {
        use crate::flowcontrol::{ConcurrencyMode, Detector, Fairness};
        // The llm-d flow-control guide's config (reference/epp), its
        // apiVersion set to the one the EPP registers.
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates:\n- flowControl\nplugins:\n- type: queue-scorer\n- type: round-robin-fairness-policy\n- type: fcfs-ordering-policy\n- type: concurrency-detector\n  parameters:\n    maxConcurrency: 132\n    concurrencyMode: requests\n    headroom: 0.0\nflowControl:\n  maxBytes: \"10Gi\"\n  maxRequests: \"1k\"\n  defaultRequestTTL: \"60s\"\n  saturationDetector:\n    pluginRef: concurrency-detector\n  priorityBands:\n  - priority: 100\n    maxRequests: \"500\"\n    fairnessPolicyRef: round-robin-fairness-policy\n    orderingPolicyRef: fcfs-ordering-policy\n  - priority: 0\n    maxRequests: \"200\"\n    fairnessPolicyRef: round-robin-fairness-policy\n    orderingPolicyRef: fcfs-ordering-policy\n  - priority: -10\n    maxRequests: \"50\"\n";
        let fc = load_config("f", text, false).unwrap().flow_control.unwrap();
        assert_eq!(fc.max_bytes, 10 * 1024 * 1024 * 1024);
        assert_eq!(fc.max_requests, 1000);
        assert_eq!(fc.band.max_requests, 200);
        assert_eq!(fc.band.max_bytes, 1_000_000_000, "the band default");
        assert_eq!(fc.band.fairness, Fairness::RoundRobin);
        assert_eq!(fc.priorities, vec![100, 0, -10]);
        assert_eq!(
            fc.detector,
            Detector::Concurrency {
                max_concurrency: 132,
                max_tokens: 1_000_000,
                mode: ConcurrencyMode::Requests
            }
        );
    }

    #[test]
    fn flow_control_keys_and_values_are_checked_strictly() {
        let with = |section: &str, plugins: &str| {
            codes(&format!("{FC_HEAD}{plugins}flowControl:\n{section}"), false)
        };
        for (section, path) in [
            ("  maxQueue: 3\n", "flowControl.maxQueue"),
            (
                "  priorityBands: [{priority: 0, ttl: 5s}]\n",
                "flowControl.priorityBands[0].ttl",
            ),
            (
                "  defaultPriorityBand: {maxReqs: 3}\n",
                "flowControl.defaultPriorityBand.maxReqs",
            ),
            (
                "  saturationDetector: {pluginRef: utilization-detector, x: 1}\n",
                "flowControl.saturationDetector.x",
            ),
            ("  maxBytes: lots\n", "flowControl.maxBytes"),
            ("  defaultRequestTTL: 60\n", "flowControl.defaultRequestTTL"),
            (
                "  defaultRequestTTL: -1s\n",
                "flowControl.defaultRequestTTL",
            ),
            ("  maxRequests: \"-5\"\n", "flowControl.maxRequests"),
            (
                "  enableEviction: yes please\n",
                "flowControl.enableEviction",
            ),
            (
                "  usageLimitPolicyPluginRef: nowhere\n",
                "flowControl.usageLimitPolicyPluginRef",
            ),
            (
                "  usageLimitPolicyPluginRef: queue-scorer\n",
                "flowControl.usageLimitPolicyPluginRef",
            ),
            (
                "  saturationDetector: {pluginRef: queue-scorer}\n",
                "flowControl.saturationDetector.pluginRef",
            ),
            (
                "  defaultPriorityBand: {orderingPolicyRef: round-robin-fairness-policy}\n",
                "flowControl.defaultPriorityBand.orderingPolicyRef",
            ),
            (
                "  priorityBands: [{priority: 3}, {priority: 3}]\n",
                "flowControl.priorityBands[1].priority",
            ),
        ] {
            let found = with(section, "- type: round-robin-fairness-policy\n");
            assert_eq!(found.len(), 1, "{section}: {found:?}");
            assert_eq!(found[0].1, path, "{section}");
        }
        // References to the defaults resolve without declaring them; the
        // EPP injects them (`ensureFlowControlLayer`).
        assert!(with("  defaultPriorityBand: {orderingPolicyRef: fcfs-ordering-policy, fairnessPolicyRef: global-strict-fairness-policy}\n  usageLimitPolicyPluginRef: static-usage-limit-policy\n  noEndpointRequestTTL: 5m\n  defaultRequestTTL: 0s\n", "").is_empty());
    }

    #[test]
    fn flow_control_plugins_take_their_own_parameters() {
        let with = |plugin: &str| codes(&format!("{FC_HEAD}{plugin}"), false);
        assert!(
            with("- type: static-usage-limit-policy\n  parameters: {threshold: 0.8}\n").is_empty()
        );
        assert!(with("- type: program-aware-fairness\n  parameters: {strategy: las, lasHalfLifeSeconds: 0}\n").is_empty());
        // The sweep interval must be above 0; any positive one is taken.
        assert!(
            with("- type: program-aware-fairness\n  parameters: {evictionSweepSeconds: 0.5}\n")
                .is_empty()
        );
        assert!(
            with("- type: edf-ordering-policy\n- type: slo-deadline-ordering-policy\n").is_empty()
        );
        for (plugin, path) in [
            (
                "- type: static-usage-limit-policy\n  parameters: {limit: 0.8}\n",
                "plugins[1].parameters.limit",
            ),
            (
                "- type: static-usage-limit-policy\n  parameters: {threshold: high}\n",
                "plugins[1].parameters.threshold",
            ),
            (
                "- type: program-aware-fairness\n  parameters: {strategy: drr}\n",
                "plugins[1].parameters.strategy",
            ),
            (
                "- type: program-aware-fairness\n  parameters: {evictionSweepSeconds: 0}\n",
                "plugins[1].parameters.evictionSweepSeconds",
            ),
            (
                "- type: utilization-detector\n  parameters: {queueDepthThreshold: 0}\n",
                "plugins[1].parameters.queueDepthThreshold",
            ),
            (
                "- type: utilization-detector\n  parameters: {metricsStalenessThreshold: 0s}\n",
                "plugins[1].parameters.metricsStalenessThreshold",
            ),
            (
                "- type: utilization-detector\n  parameters: {headroom: -0.5}\n",
                "plugins[1].parameters.headroom",
            ),
            (
                "- type: concurrency-detector\n  parameters: {concurrencyMode: bytes}\n",
                "plugins[1].parameters.concurrencyMode",
            ),
            (
                "- type: concurrency-detector\n  parameters: {maxConcurrency: -1}\n",
                "plugins[1].parameters.maxConcurrency",
            ),
        ] {
            let found = with(plugin);
            assert_eq!(found.len(), 1, "{plugin}: {found:?}");
            assert_eq!(found[0].1, path, "{plugin}");
        }
    }

    #[test]
    fn a_factory_that_ignores_its_decoder_takes_any_parameters() {
        // `DecodeRoleFactory(name string, _ *json.Decoder, ...)` and the
        // queue scorer's factory never decode, so the EPP loads these.
        let text = format!(
            "{HEAD}- type: decode-filter\n  parameters: {{label: x}}\n- type: queue-scorer\n  parameters: 5\n- type: fcfs-ordering-policy\n  parameters: [a]\n"
        );
        assert_eq!(codes(&text, false), vec![]);
        // A factory that decodes strictly still refuses a key it lacks, and
        // a scalar where its struct is.
        assert_eq!(
            codes(
                &format!("{HEAD}- type: load-aware-scorer\n  parameters: {{limit: 3}}\n"),
                false
            ),
            vec![(
                "epp-plugin-parameter",
                "plugins[0].parameters.limit".to_string()
            )]
        );
        assert_eq!(
            codes(
                &format!("{HEAD}- type: load-aware-scorer\n  parameters: 5\n"),
                false
            ),
            vec![("wrong-type", "plugins[0].parameters".to_string())]
        );
    }

    #[test]
    fn eviction_loads_and_its_plugins_take_any_parameters() {
        // Nothing of pdsim's is evictable (priority 0, the filter takes
        // only priority < 0), so the switch and the policy plugins load.
        let text = format!(
            "{FC_HEAD}- type: sheddable-eviction-filter\n  parameters: {{anything: 1}}\n- type: priority-then-time-eviction-order-policy\nflowControl:\n  enableEviction: true\n"
        );
        assert_eq!(codes(&text, true), vec![]);
        // Alpha, as registered.
        assert_eq!(codes(&text, false).len(), 2);
    }

    #[test]
    fn the_usage_limit_policies_load_as_their_factories_build_them() {
        let policy = |plugin: &str, experimental: bool| {
            load_config(
                "f",
                &format!("{FC_HEAD}{plugin}flowControl:\n  usageLimitPolicyPluginRef: u\n  priorityBands: [{{priority: -5}}]\n"),
                experimental,
            )
            .map(|c| c.flow_control.unwrap().usage_limit)
            .map_err(|p| p.into_iter().map(|p| (p.code, p.path)).collect::<Vec<_>>())
        };
        assert_eq!(
            policy(
                "- name: u\n  type: static-usage-limit-policy\n  parameters: {threshold: 0.7}\n",
                false
            ),
            Ok(UsageLimit::Static { threshold: 0.7 })
        );
        assert_eq!(
            policy(
                "- name: u\n  type: priority-holdback-policy\n  parameters: {minCeiling: 0.4, domain: value}\n",
                true
            ),
            Ok(UsageLimit::PriorityHoldback(PriorityHoldback {
                min_ceiling: 0.4,
                max_ceiling: 1.0,
                domain: Domain::Value
            }))
        );
        // Alpha: refused without --allow-experimental-plugins.
        assert!(
            policy(
                "- name: u\n  type: priority-holdback-policy\n  parameters: {minCeiling: 0.4}\n",
                false
            )
            .is_err()
        );
        // Band -5 lies below band 0: the soft ceiling's tick cannot matter.
        assert_eq!(
            policy("- name: u\n  type: soft-reflective-ceiling-policy\n", true),
            Ok(UsageLimit::SoftReflective)
        );
        // It takes no parameters.
        assert_eq!(
            policy(
                "- name: u\n  type: soft-reflective-ceiling-policy\n  parameters: {period: 2}\n",
                true
            ),
            Err(vec![(
                "epp-plugin-parameter",
                "plugins[1].parameters.period".to_string()
            )])
        );
        // A band above 0: band 0 alternates below it, simulated.
        let found = codes(
            &format!(
                "{FC_HEAD}- type: soft-reflective-ceiling-policy\nflowControl:\n  usageLimitPolicyPluginRef: soft-reflective-ceiling-policy\n  priorityBands: [{{priority: 100}}]\n"
            ),
            true,
        );
        assert_eq!(found, vec![]);
        // priority-holdback-policy's checks, every failure reported.
        let holdback = |params: &str| {
            codes(
                &format!("{FC_HEAD}- type: priority-holdback-policy\n  parameters: {params}\n"),
                true,
            )
        };
        let at = |key: &str| {
            (
                "epp-plugin-parameter",
                format!("plugins[1].parameters.{key}"),
            )
        };
        assert_eq!(holdback("{}"), vec![at("minCeiling")]);
        assert_eq!(holdback("{minCeiling: null}"), vec![at("minCeiling")]);
        assert_eq!(
            holdback("{minCeiling: 1.0}"),
            vec![at("minCeiling"), at("minCeiling")]
        );
        assert_eq!(
            holdback("{minCeiling: 0.5, maxCeiling: 0.5}"),
            vec![at("minCeiling")]
        );
        assert_eq!(
            holdback("{minCeiling: 0.5, maxCeiling: 1.5}"),
            vec![at("maxCeiling")]
        );
        assert_eq!(
            holdback("{minCeiling: 0.0, maxCeiling: 0}"),
            vec![at("minCeiling"), at("maxCeiling")]
        );
        assert_eq!(
            holdback("{minCeiling: 0.2, shape: sigmoid, domain: rank}"),
            vec![at("shape")]
        );
        assert_eq!(
            holdback("{minCeiling: 0.2, domain: ordinal}"),
            vec![at("domain")]
        );
        assert_eq!(
            holdback("{minCeiling: high}"),
            vec![("wrong-type", "plugins[1].parameters.minCeiling".to_string())]
        );
        assert!(
            holdback("{minCeiling: 0, shape: linear, domain: value, maxCeiling: 1}").is_empty()
        );
    }

    #[test]
    fn kubernetes_quantities_read_as_the_api_reads_them() {
        use super::parse_quantity;
        use serde_yaml::Value;
        for (text, value) in [
            ("500", Some(500)),
            ("1k", Some(1000)),
            ("1Ki", Some(1024)),
            ("10Gi", Some(10 * 1024 * 1024 * 1024)),
            ("1G", Some(1_000_000_000)),
            ("1.5", Some(2)),
            ("1500m", Some(2)),
            ("2e3", Some(2000)),
            ("-3", Some(-3)),
            ("ten", None),
            ("1KB", None),
            ("", None),
        ] {
            assert_eq!(parse_quantity(&Value::String(text.into())), value, "{text}");
        }
        assert_eq!(
            parse_quantity(&serde_yaml::from_str("200").unwrap()),
            Some(200)
        );
    }

    #[test]
    fn utilization_filter_parameters_are_decoded_strictly_and_validated() {
        let with = |params: &str| {
            codes(
                &format!("{HEAD}- type: utilization-filter\n  parameters: {params}\n"),
                true,
            )
        };
        assert!(with("{conditions: [{metric: waiting-queue, maxValue: 5}]}").is_empty());
        assert!(with("{conditions: [{metric: kv-cache-utilization, maxValue: 1}, {metric: running-requests, maxValue: 0}], fallbackOnEmpty: true}").is_empty());
        // Alpha: refused without --allow-experimental-plugins.
        assert_eq!(
            codes(
                &format!(
                    "{HEAD}- type: utilization-filter\n  parameters: {{conditions: [{{metric: waiting-queue, maxValue: 5}}]}}\n"
                ),
                false
            ),
            vec![("epp-plugin-alpha", "plugins[0].type".to_string())]
        );
        for (params, path) in [
            ("{}", "plugins[0].parameters.conditions"),
            ("{conditions: []}", "plugins[0].parameters.conditions"),
            ("{conditions: 3}", "plugins[0].parameters.conditions"),
            (
                "{conditions: [{metric: gpu, maxValue: 1}]}",
                "plugins[0].parameters.conditions[0].metric",
            ),
            (
                "{conditions: [{metric: waiting-queue}]}",
                "plugins[0].parameters.conditions[0].maxValue",
            ),
            (
                "{conditions: [{metric: waiting-queue, maxValue: -1}]}",
                "plugins[0].parameters.conditions[0].maxValue",
            ),
            (
                "{conditions: [{metric: kv-cache-utilization, maxValue: 1.5}]}",
                "plugins[0].parameters.conditions[0].maxValue",
            ),
            (
                "{conditions: [{metric: waiting-queue, maxValue: '5'}]}",
                "plugins[0].parameters.conditions[0].maxValue",
            ),
            (
                "{conditions: [{metric: waiting-queue, maxValue: 5, min: 0}]}",
                "plugins[0].parameters.conditions[0].min",
            ),
            (
                "{conditions: [{metric: waiting-queue, maxValue: 5}], fallbackOnEmpty: yes-please}",
                "plugins[0].parameters.fallbackOnEmpty",
            ),
            (
                "{conditions: [{metric: waiting-queue, maxValue: 5}], headroom: 0.1}",
                "plugins[0].parameters.headroom",
            ),
        ] {
            let found = with(params);
            assert_eq!(found.len(), 1, "{params}: {found:?}");
            assert_eq!(found[0].1, path, "{params}");
            assert_eq!(found[0].0, "epp-plugin-parameter", "{params}");
        }
        // A named InFlightLoad producer must exist unless it is the default
        // one, and matters only when active-requests is capped.
        let active =
            "{conditions: [{metric: active-requests, maxValue: 2}], inFlightLoadProducerName: ";
        assert!(with(&format!("{active}inflight-load-producer}}")).is_empty());
        assert!(with(&format!("{active}''}}")).is_empty());
        assert_eq!(
            with(&format!("{active}mine}}")),
            vec![(
                "epp-plugin-ref",
                "plugins[0].parameters.inFlightLoadProducerName".to_string()
            )]
        );
        assert!(
            codes(
                &format!("{HEAD}- type: inflight-load-producer\n  name: mine\n- type: utilization-filter\n  parameters: {active}mine}}\n"),
                true
            )
            .is_empty()
        );
        assert!(
            with("{conditions: [{metric: waiting-queue, maxValue: 2}], inFlightLoadProducerName: mine}")
                .is_empty()
        );
    }

    const TOKENS: &str = "- type: token-producer\n  parameters: {modelName: m, vllm: {url: 'http://tokenizer:8000'}}\n";

    #[test]
    fn context_length_aware_is_a_filter_and_a_scorer_fed_by_a_real_tokenizer() {
        let profile =
            "schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: cla, weight: 3}]\n";
        let text = format!(
            "{HEAD}{TOKENS}- type: context-length-aware\n  name: cla\n  parameters: {{label: tier, enableFiltering: true}}\n{profile}"
        );
        let config = load_config("f", &text, false).unwrap();
        assert_eq!(config.profiles[0].filters, vec!["cla".to_string()]);
        assert_eq!(config.profiles[0].scorers, vec![("cla".to_string(), 3.0)]);
        // Without profiles the default one slots it both ways, weight 1.
        let text = format!("{HEAD}{TOKENS}- type: context-length-aware\n");
        let config = load_config("f", &text, false).unwrap();
        assert_eq!(config.profiles[0].filters, vec!["context-length-aware"]);
        assert_eq!(
            config.profiles[0].scorers,
            vec![("context-length-aware".to_string(), 1.0)]
        );
        // Strict parameters and the factory's check.
        for (params, path) in [
            ("{label: ''}", "plugins[1].parameters.label"),
            ("{label: 3}", "plugins[1].parameters.label"),
            (
                "{enableFiltering: 'on'}",
                "plugins[1].parameters.enableFiltering",
            ),
            ("{ranges: [0-10]}", "plugins[1].parameters.ranges"),
        ] {
            let found = codes(
                &format!("{HEAD}{TOKENS}- type: context-length-aware\n  parameters: {params}\n"),
                false,
            );
            assert_eq!(
                found,
                vec![("epp-plugin-parameter", path.to_string())],
                "{params}"
            );
        }
        // No token producer named `token-producer`: the EPP would create
        // the estimate backend, whose count needs the prompt text.
        for (producers, path) in [
            ("", "plugins[0].type"),
            (
                "- type: token-producer\n  name: mine\n  parameters: {modelName: m}\n",
                "plugins[1].type",
            ),
        ] {
            let found = codes(
                &format!("{HEAD}{producers}- type: context-length-aware\n"),
                false,
            );
            assert_eq!(
                found,
                vec![("epp-not-simulated", path.to_string())],
                "{producers}"
            );
        }
        // The legacy type under the default name serves too.
        let legacy = "- type: tokenizer\n  name: token-producer\n  parameters: {modelName: m, udsTokenizerConfig: {socketFile: /s}}\n";
        assert!(
            codes(
                &format!("{HEAD}{legacy}- type: context-length-aware\n"),
                false
            )
            .is_empty()
        );
    }

    #[test]
    fn session_affinity_filter_takes_the_scorer_parameters() {
        let with = |params: &str, experimental: bool| {
            load_config(
                "f",
                &format!("{HEAD}- type: session-affinity-filter\n  parameters: {params}\n"),
                experimental,
            )
        };
        assert!(with("{strategy: session_id, sessionIdConfig: {sources: [{header: x-id}]}, profileName: decode}", true).is_ok());
        let problems = with("{strategy: sticky}", true).unwrap_err();
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].path, "plugins[0].parameters.strategy");
        assert!(
            problems[0].message.contains("`session-affinity-filter`"),
            "{}",
            problems[0].message
        );
        let problems = with("{}", false).unwrap_err();
        assert_eq!(problems[0].code, "epp-plugin-alpha");
        let config = with("{}", true).unwrap();
        assert_eq!(config.profiles[0].filters, vec!["session-affinity-filter"]);
        assert!(config.profiles[0].scorers.is_empty());
    }

    #[test]
    fn header_profile_handler_parameters_are_two_strings() {
        let with = |params: &str| {
            codes(
                &format!(
                    "{HEAD}- type: prefill-filter\n- type: decode-filter\n- type: header-profile-handler\n  parameters: {params}\n{PD_PROFILES}"
                ),
                true,
            )
        };
        // Several profiles are its point; any default is accepted at load.
        assert!(with("{}").is_empty());
        assert!(with("{headerName: X-Stage, defaultProfile: nowhere}").is_empty());
        assert_eq!(
            with("{headerName: [a]}"),
            vec![(
                "epp-plugin-parameter",
                "plugins[2].parameters.headerName".to_string()
            )]
        );
        assert_eq!(
            with("{profiles: {decode: d}}"),
            vec![(
                "epp-plugin-parameter",
                "plugins[2].parameters.profiles".to_string()
            )]
        );
        assert_eq!(
            codes(
                &format!(
                    "{HEAD}- type: prefill-filter\n- type: decode-filter\n- type: header-profile-handler\n{PD_PROFILES}"
                ),
                false
            ),
            vec![("epp-plugin-alpha", "plugins[2].type".to_string())]
        );
    }
}
