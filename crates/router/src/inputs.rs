//! The deployment's `router` block resolved into the EPP's inputs: flags,
//! the configuration (file or `--config-text`, else the built-in default)
//! and manifests, with every problem reported against the file it is in.

use crate::RouterProblem;
use crate::config::{DEFAULT_CONFIG, EndpointPickerConfig, load_config};
use crate::flags::{EppFlags, parse_flags};
use crate::manifests::{Manifests, load_manifests};
use pdsim_spec::deployment::Router;
use pdsim_spec::files::{Files, ReadError};
use pdsim_spec::lines::LineIndex;
use pdsim_spec::problem::{Problem, Severity};
use std::path::Path;

/// Everything the simulated EPP starts from.
#[derive(Clone, Debug)]
pub struct RouterInputs {
    pub flags: EppFlags,
    pub config: EndpointPickerConfig,
    /// Where the configuration came from, for reports.
    pub config_origin: String,
    pub manifests: Manifests,
}

/// Where the built-in configuration comes from, as reports name it.
pub const BUILTIN_ORIGIN: &str = "built-in default EndpointPickerConfig";

impl RouterInputs {
    /// Whether the configuration has a precise prefix-cache producer or
    /// scorer, the plugins that read engines' KV events.
    pub fn reads_kv_events(&self) -> bool {
        crate::cycle::precise_plugin(&self.config.plugins).is_some()
    }

    /// The router of a deployment without a `router` block: the EPP's
    /// built-in default configuration over every pod, with default flags
    /// and no manifests (the Deployment specification, `router`: "Absent:
    /// the router's built-in configuration over every pod").
    pub fn builtin() -> RouterInputs {
        let config = load_config(BUILTIN_ORIGIN, DEFAULT_CONFIG, false)
            .unwrap_or_else(|p| unreachable!("the built-in configuration loads: {p:?}"));
        RouterInputs {
            flags: EppFlags::default(),
            config,
            config_origin: BUILTIN_ORIGIN.to_string(),
            manifests: Manifests::default(),
        }
    }

    /// The profile handler that splits a request into a prefill on one
    /// endpoint and a decode on another (`disagg-profile-handler`, the
    /// deprecated `pd-profile-handler`), if the configuration runs one.
    pub fn disaggregating_handler(&self) -> Option<&str> {
        let handler = self.config.plugin(&self.config.handler)?;
        matches!(
            handler.plugin_type.as_str(),
            "disagg-profile-handler" | "pd-profile-handler"
        )
        .then_some(handler.plugin_type.as_str())
    }

    /// Why a `disagg-profile-handler` configuration never splits a request
    /// although it names the handler, if it never does: its prefill
    /// profile is not among the scheduling profiles (`Pick` skips a stage
    /// whose profile is missing), or, in the decode-first order, it has no
    /// prefill decider (`HandlerFactory`: "No deciders.prefill configured,
    /// P/D disaggregation disabled"; both in llm-d-router's
    /// `pkg/epp/framework/plugins/scheduling/profilehandler/disagg/
    /// disagg_profile_handler.go`). The EPP runs such a configuration, so
    /// pdsim does too; the caller tells the user, whose prefill pools then
    /// idle.
    pub fn never_disaggregates(&self) -> Option<String> {
        let handler = self.config.plugin(&self.config.handler)?;
        if handler.plugin_type != "disagg-profile-handler" {
            return None;
        }
        let params = crate::config::disagg_params(&handler.parameters);
        if !self
            .config
            .profiles
            .iter()
            .any(|p| p.name == params.prefill)
        {
            return Some(format!(
                "the disagg-profile-handler's prefill profile `{}` is not among the \
                 schedulingProfiles, so the EPP skips the prefill stage of every request",
                params.prefill
            ));
        }
        if params.decider.is_none() && !params.prefill_first {
            return Some(
                "the disagg-profile-handler names no prefill decider (`deciders.prefill`), so \
                 the EPP never runs the prefill stage"
                    .into(),
            );
        }
        None
    }

    /// Whether this is the EPP's built-in configuration.
    pub fn is_builtin(&self) -> bool {
        self.config_origin == BUILTIN_ORIGIN
    }

    /// The labels a pod must carry to be one of the EPP's endpoints: the
    /// `--endpoint-selector` of a standalone EPP, or the `selector.matchLabels`
    /// of the InferencePool `--pool-name` names among the manifests (the
    /// EPP's datastore keeps the pods that match, `pkg/epp/datastore`). `None`:
    /// every pod, as for a deployment that gives neither (the pool is then
    /// taken to select the deployment's pods). [`check_router_inputs`] has
    /// refused a `--pool-name` that names none of the manifests' pools.
    pub fn endpoint_selector(&self) -> Option<&std::collections::BTreeMap<String, String>> {
        if let Some(selector) = &self.flags.endpoint_selector {
            return Some(selector);
        }
        let name = self.flags.pool_name.as_deref()?;
        self.manifests
            .pools
            .iter()
            .find(|p| p.name == name)
            .map(|p| &p.match_labels)
    }

    /// The ports of each selected pod the EPP makes an endpoint of, rank
    /// by rank (`podUpdateOrAddIfNotExist` in `pkg/epp/datastore/
    /// datastore.go`: endpoint `<pod>-rank-<i>` for the i-th port, every
    /// port active without the active-ports annotation): the standalone
    /// EPP's `--endpoint-target-ports`, or the `targetPorts` of the pool
    /// `--pool-name` names. `None` without either: the pool is then taken
    /// to reach every API server of each pod.
    pub fn target_ports(&self) -> Option<&[u32]> {
        if self.flags.endpoint_selector.is_some() {
            return Some(&self.flags.endpoint_target_ports);
        }
        let name = self.flags.pool_name.as_deref()?;
        self.manifests
            .pools
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.target_ports.as_slice())
            .filter(|ports| !ports.is_empty())
    }

    /// Whether a pod with these labels is an endpoint: every selector label
    /// present with its value (`matchLabels`).
    /// Why the EPP's metrics extractor would read, from a pod with these
    /// labels, series pdsim's vLLM engines do not export, if it would
    /// (`plugins::datalayer::metrics`). Without a configured
    /// core-metrics-extractor the EPP's default one reads vLLM's.
    pub fn metrics_mismatch(
        &self,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Option<String> {
        let extractor = self
            .config
            .plugins
            .iter()
            .find(|p| p.plugin_type == "core-metrics-extractor")?;
        crate::plugins::datalayer::metrics::mismatch(&extractor.parameters, labels)
            .map(|why| format!("`{}` (core-metrics-extractor): {why}", extractor.name))
    }

    pub fn selects(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.endpoint_selector()
            .is_none_or(|want| want.iter().all(|(k, v)| labels.get(k) == Some(v)))
    }
}

/// A flag's name, without its dashes and value.
fn flag_name(flag: &str) -> &str {
    let body = flag.trim_start_matches('-');
    body.split_once('=').map_or(body, |(name, _)| name)
}

/// A router problem as the spec reports problems; a problem without a line
/// of its own takes the line of its path in `lines` (the deployment's, for
/// flags and the router block).
fn to_problem(p: RouterProblem, lines: Option<&LineIndex>) -> Problem {
    let line = p
        .line
        .or_else(|| lines.and_then(|index| index.line_of(&p.path)));
    Problem {
        severity: Severity::Error,
        file: p.file,
        line,
        path: p.path,
        code: p.code.to_string(),
        message: p.message,
    }
}

/// Why a file the router block names cannot be used, located at the key
/// that names it. Missing files and folders share the code the spec's
/// existence check uses (`router-file-missing`), so a caller running both
/// checks can report each once.
fn unreadable(
    deployment_file: &str,
    lines: &LineIndex,
    key: &str,
    full: &Path,
    error: &ReadError,
) -> Problem {
    let code = match error {
        ReadError::Missing | ReadError::IsDirectory => "router-file-missing",
        ReadError::NotUtf8(_) => "router-file-not-utf8",
        _ => "router-file-unreadable",
    };
    Problem {
        severity: Severity::Error,
        file: deployment_file.to_string(),
        line: lines.line_of(key),
        path: key.to_string(),
        code: code.to_string(),
        message: format!(
            "`{}` {error} (paths are relative to the deployment file)",
            full.display()
        ),
    }
}

/// A configuration's text, where it comes from, and where its problems go.
struct ConfigSource {
    origin: String,
    text: String,
    /// The line every problem in it is at, for a text whose lines are not
    /// the file's (`--config-text`, a folded or quoted text in Helm values).
    line: Option<u32>,
    /// Inside Helm values ([`crate::chart`]): where in the values file.
    inside: Option<InValues>,
}

/// Where a configuration inside Helm values sits in the values file.
struct InValues {
    /// The key path of the text (`router.epp.pluginsCustomConfig.<file>`),
    /// which its problems' paths go under.
    prefix: String,
    /// For a literal block (`name: |`), whose lines are the file's: the
    /// line just above the text's first, added to each problem's line.
    shift: Option<u32>,
    /// The text's key's line, for a problem with no place in the text.
    key_line: Option<u32>,
}

/// Loads a deployment's router inputs; `router` absent means the EPP's
/// built-in default configuration over every pod. Every refusal comes
/// back as at least one problem naming the file, the key path and, where
/// the file has one, the line: an `Err` is never empty.
pub fn check_router_inputs(
    files: &dyn Files,
    deployment_file: &str,
    router: Option<&Router>,
) -> Result<RouterInputs, Vec<Problem>> {
    let base = Path::new(deployment_file).parent().unwrap_or(Path::new(""));
    let mut problems: Vec<Problem> = Vec::new();
    let empty = Router::default();
    let router = router.unwrap_or(&empty);
    // The deployment's lines locate the router block's own problems (its
    // flags, the files it names). A deployment that cannot be read again
    // leaves them without lines rather than without problems.
    let deployment_lines = files
        .read(Path::new(deployment_file))
        .map(|text| LineIndex::build(&text))
        .unwrap_or_default();
    let flag_list = router.epp_flags.as_deref().unwrap_or(&[]);
    // The configuration file first: Helm values of the EPP's charts carry
    // the configuration inside them, and flags of their own
    // ([`crate::chart`]).
    let mut file_text = None;
    if let Some(path) = &router.endpoint_picker_config {
        let full = base.join(path);
        match files.read(&full) {
            Ok(text) => file_text = Some((full.display().to_string(), text)),
            Err(error) => problems.push(unreadable(
                deployment_file,
                &deployment_lines,
                "router.endpoint_picker_config",
                &full,
                &error,
            )),
        }
    }
    let mut embedded = None;
    if let Some((origin, text)) = &file_text {
        let config_file = crate::flags::config_file(flag_list);
        match crate::chart::embedded_with(origin, text, config_file) {
            None => {}
            Some(Ok(e)) => embedded = Some(e),
            Some(Err(found)) => {
                // Helm values without a configuration pdsim can read: said
                // why, and not loaded as a configuration themselves.
                problems.extend(found.into_iter().map(|p| to_problem(p, None)));
                file_text = None;
            }
        }
    }
    // The values file's lines, which locate the problems of its flags.
    let values = match (&embedded, &file_text) {
        (Some(_), Some((origin, text))) => Some((origin.clone(), LineIndex::build(text))),
        _ => None,
    };
    // The chart renders its `flags` after its own, and the deployment's
    // flags stand for the chart's: a flag given in both is ambiguous.
    let mut all_flags: Vec<String> = flag_list.to_vec();
    let mut values_flag_paths: Vec<String> = Vec::new();
    if let (Some(e), Some((origin, values_lines))) = (&embedded, &values) {
        for (flag, path) in &e.flags {
            let name = flag_name(flag);
            if let Some(i) = flag_list.iter().position(|f| flag_name(f) == name) {
                problems.push(Problem {
                    severity: Severity::Error,
                    file: origin.clone(),
                    line: values_lines.line_of(path),
                    path: path.clone(),
                    code: "epp-flag-twice".into(),
                    message: format!(
                        "--{name} is set here and by the deployment's router.epp_flags[{i}] ({deployment_file}); give it once"
                    ),
                });
                continue;
            }
            all_flags.push(flag.clone());
            values_flag_paths.push(path.clone());
        }
    }
    let flags = match parse_flags(deployment_file, &all_flags) {
        Ok(flags) => flags,
        Err(found) => {
            problems.extend(found.into_iter().map(|mut p| {
                // A flag from the values file is reported there, at its key.
                let index = p
                    .path
                    .strip_prefix("epp_flags[")
                    .and_then(|rest| rest.split(']').next())
                    .and_then(|i| i.parse::<usize>().ok());
                let from_values = index
                    .and_then(|i| i.checked_sub(flag_list.len()))
                    .and_then(|j| values_flag_paths.get(j));
                match (from_values, &values) {
                    (Some(path), Some((origin, lines))) => {
                        p.file = origin.clone();
                        p.line = lines.line_of(path);
                        p.path = path.clone();
                        // A key with `=` in it is not a flag name: say what
                        // the chart makes of it.
                        if let Some(rendered) = index.and_then(|i| all_flags.get(i))
                            && path.rsplit("flags.").next().is_some_and(|k| k.contains('='))
                        {
                            p.message = format!(
                                "{} (the chart renders each flags entry as `--<key>=<value>`, `printf \"--%s=%v\"` in routerlib's templates/_deployment.yaml: here `{rendered}`)",
                                p.message
                            );
                        }
                        to_problem(p, None)
                    }
                    _ => {
                        p.path = format!("router.{}", p.path);
                        to_problem(p, Some(&deployment_lines))
                    }
                }
            }));
            EppFlags::default()
        }
    };
    // Where the configuration text comes from, and the lines its problems
    // get: a file's own; inside Helm values, the values file's, shifted to
    // where the text starts (its key's line for a text not written as a
    // block); for `--config-text` the flag's line in the deployment (the
    // text inside a flag has no lines of the file).
    let source = if let Some((origin, text)) = file_text {
        Some(match &embedded {
            Some(e) => ConfigSource {
                origin,
                text: e.text.clone(),
                line: if e.block_scalar { None } else { e.line },
                inside: Some(InValues {
                    prefix: e.path.clone(),
                    shift: e.line.filter(|_| e.block_scalar),
                    key_line: e.line,
                }),
            },
            None => ConfigSource {
                origin,
                text,
                line: None,
                inside: None,
            },
        })
    } else if router.endpoint_picker_config.is_some() {
        // Unreadable: said above.
        None
    } else if let Some(text) = &flags.config_text {
        let at = flag_list
            .iter()
            .position(|f| f.starts_with("--config-text"))
            .map_or("router.epp_flags".to_string(), |i| {
                format!("router.epp_flags[{i}]")
            });
        Some(ConfigSource {
            origin: format!("{deployment_file} (--config-text)"),
            text: text.clone(),
            line: deployment_lines.line_of(&at),
            inside: None,
        })
    } else if let Some(path) = &flags.config_file {
        problems.push(Problem {
            severity: Severity::Error,
            file: deployment_file.to_string(),
            line: deployment_lines.line_of("router.epp_flags"),
            path: "router.epp_flags".into(),
            code: "epp-config-file-flag".into(),
            message: format!("--config-file={path} names a path inside the EPP's container; name the file with router.endpoint_picker_config instead"),
        });
        None
    } else {
        Some(ConfigSource {
            origin: BUILTIN_ORIGIN.to_string(),
            text: DEFAULT_CONFIG.to_string(),
            line: None,
            inside: None,
        })
    };
    let mut config = None;
    let mut label = String::new();
    if let Some(source) = source {
        match load_config(&source.origin, &source.text, flags.allow_experimental) {
            Ok(loaded) => config = Some(loaded),
            // A chart's template is not YAML until Helm renders it: what the
            // loader makes of its `{{ ... }}` actions says nothing useful.
            Err(_) if let Some(at) = pdsim_spec::load::template_action_line(&source.text) => {
                let shift = source.inside.as_ref().and_then(|i| i.shift).unwrap_or(0);
                problems.push(Problem {
                    severity: Severity::Error,
                    file: source.origin.clone(),
                    line: source.line.or(Some(at.saturating_add(shift))),
                    path: source.inside.as_ref().map_or(String::new(), |i| i.prefix.clone()),
                    code: "helm-template".into(),
                    message: "this line holds a Helm template action (`{{ ... }}`): pdsim reads a rendered EndpointPickerConfig, not a chart template; render the chart first (`helm template`) and name what it prints".into(),
                });
            }
            Err(found) => problems.extend(found.into_iter().map(|mut p| {
                if source.line.is_some() {
                    p.line = source.line;
                }
                if let Some(inside) = &source.inside {
                    p.path = if p.path.is_empty() {
                        inside.prefix.clone()
                    } else {
                        format!("{}.{}", inside.prefix, p.path)
                    };
                    if let Some(shift) = inside.shift {
                        p.line = p.line.map(|l| l.saturating_add(shift));
                    }
                    // A problem with no place in the text (a key it lacks)
                    // is at the text's own key.
                    p.line = p.line.or(inside.key_line);
                }
                to_problem(p, None)
            })),
        }
        label = match &source.inside {
            Some(inside) => format!("{} ({})", source.origin, inside.prefix),
            None => source.origin,
        };
    }
    let mut manifests = Manifests::default();
    for (i, path) in router.manifests.iter().flatten().enumerate() {
        let full = base.join(path);
        let text = match files.read(&full) {
            Ok(text) => text,
            Err(error) => {
                problems.push(unreadable(
                    deployment_file,
                    &deployment_lines,
                    &format!("router.manifests[{i}]"),
                    &full,
                    &error,
                ));
                continue;
            }
        };
        match load_manifests(&full.display().to_string(), &text) {
            Ok(m) => {
                manifests.pools.extend(m.pools);
                manifests.objectives.extend(m.objectives);
                manifests.ignored.extend(m.ignored);
            }
            Err(found) => problems.extend(found.into_iter().map(|p| to_problem(p, None))),
        }
    }
    if let Some(name) = &flags.pool_name
        && !manifests.pools.is_empty()
        && !manifests.pools.iter().any(|p| &p.name == name)
    {
        let names: Vec<&str> = manifests.pools.iter().map(|p| p.name.as_str()).collect();
        problems.push(Problem {
            severity: Severity::Error,
            file: deployment_file.to_string(),
            line: deployment_lines.line_of("router.epp_flags"),
            path: "router.epp_flags".into(),
            code: "epp-pool-missing".into(),
            message: format!(
                "--pool-name={name} names none of the InferencePools in router.manifests ({}): the EPP would wait for that pool and never serve",
                names.join(", ")
            ),
        });
    }
    if flags.endpoint_selector.is_some() && !manifests.objectives.is_empty() {
        problems.push(Problem {
            severity: Severity::Error,
            file: deployment_file.to_string(),
            line: deployment_lines.line_of("router.manifests"),
            path: "router.manifests".into(),
            code: "epp-objectives-standalone".into(),
            message: "InferenceObjectives take effect only for an InferencePool (--pool-name); with --endpoint-selector the EPP does not reconcile them".into(),
        });
    }
    if let (Some(config), Some(pool)) = (config.as_mut(), flags.pool_name.as_deref()) {
        provision_objective_bands(config, &manifests, pool);
    }
    match (config, problems.is_empty()) {
        (Some(config), true) => Ok(RouterInputs {
            flags,
            config,
            config_origin: label,
            manifests,
        }),
        (None, true) => {
            // Every path above that leaves no configuration records why;
            // this says so should one ever not, rather than refusing in
            // silence.
            problems.push(Problem {
                severity: Severity::Error,
                file: deployment_file.to_string(),
                line: deployment_lines.line_of("router"),
                path: "router".into(),
                code: "epp-config-missing".into(),
                message: "the router block's EndpointPickerConfig could not be loaded".into(),
            });
            Err(problems)
        }
        _ => Err(problems),
    }
}

/// The priority bands the pool's InferenceObjectives provision: the EPP's
/// objective reconciler submits the priority of every objective of the pool
/// as a desired band (`syncPriorityBands`), which the registry provisions
/// and keeps (`ApplyDesiredPriorities`). Only the usage-limit policies that
/// look at the set of bands see them.
fn provision_objective_bands(config: &mut EndpointPickerConfig, manifests: &Manifests, pool: &str) {
    let Some(flow) = config.flow_control.as_mut() else {
        return;
    };
    for objective in manifests.objectives.iter().filter(|o| o.pool == pool) {
        let priority = i64::from(objective.priority);
        if flow.priorities.contains(&priority) {
            continue;
        }
        flow.priorities.push(priority);
    }
    flow.priorities.sort_unstable_by(|a, b| b.cmp(a));
}

#[cfg(test)]
mod tests {
    use super::RouterInputs;

    /// A problem inside a configuration given in Helm values that has no
    /// place in the text (a key it lacks) is put at the text's own key.
    #[test]
    fn a_problem_without_a_place_in_embedded_text_is_at_its_key() {
        let values = "router:\n  epp:\n    pluginsConfigFile: a.yaml\n    pluginsCustomConfig:\n      a.yaml: |\n        plugins: []\n";
        let files = pdsim_spec::files::MemoryFiles::new()
            .with("d.yaml", "kind: Deployment\n")
            .with("v.yaml", values);
        let router = pdsim_spec::deployment::Router {
            endpoint_picker_config: Some("v.yaml".into()),
            ..Default::default()
        };
        let problems =
            super::check_router_inputs(&files, "d.yaml", Some(&router)).expect_err("no apiVersion");
        let api = problems
            .iter()
            .find(|p| p.code == "epp-api-version")
            .unwrap_or_else(|| panic!("{problems:?}"));
        assert_eq!(api.path, "router.epp.pluginsCustomConfig.a.yaml.apiVersion");
        assert_eq!((api.file.as_str(), api.line), ("v.yaml", Some(5)));
    }

    /// The bundled prefix-based P/D configuration disaggregates; renaming
    /// its prefill profile, or dropping its decider, leaves a configuration
    /// the EPP runs but that never splits a request, and says why.
    #[test]
    fn a_disagg_handler_that_never_splits_a_request_is_told_apart() {
        let text = include_str!("../../../deployments/pd/epp-prefix-pd.yaml");
        let inputs = |text: &str| RouterInputs {
            config: crate::config::load_config("pd.yaml", text, false).expect("loads"),
            config_origin: "pd.yaml".into(),
            ..RouterInputs::builtin()
        };
        assert_eq!(inputs(text).never_disaggregates(), None);
        let renamed = text.replacen("- name: prefill\n", "- name: zz\n", 1);
        assert_ne!(renamed, text);
        let why = inputs(&renamed)
            .never_disaggregates()
            .expect("never splits");
        assert!(why.contains("prefill profile `prefill`"), "{why}");
        let undecided = text.replacen("      prefill: prefix-based-pd-decider\n", "", 1);
        assert_ne!(undecided, text);
        let why = inputs(&undecided)
            .never_disaggregates()
            .expect("never splits");
        assert!(why.contains("no prefill decider"), "{why}");
        assert_eq!(RouterInputs::builtin().never_disaggregates(), None);
    }

    #[test]
    fn the_builtin_router_is_the_epp_default_with_default_flags() {
        let inputs = RouterInputs::builtin();
        assert!(inputs.is_builtin());
        // The EPP scrapes every 50 ms unless told otherwise; a zero here
        // once made the event loop spin on scrapes.
        assert_eq!(inputs.flags.refresh_interval_ns, 50_000_000);
        let profile = &inputs.config.profiles[0];
        assert_eq!(inputs.config.profiles.len(), 1);
        assert_eq!(inputs.config.handler, "single-profile-handler");
        assert_eq!(
            profile.scorers,
            vec![
                ("queue-scorer".to_string(), 2.0),
                ("kv-cache-utilization-scorer".to_string(), 2.0),
                ("prefix-cache-scorer".to_string(), 3.0),
            ]
        );
        assert_eq!(profile.picker, "max-score-picker");
    }

    #[test]
    fn the_pools_objectives_provision_priority_bands() {
        use super::provision_objective_bands;
        use crate::config::load_config;
        use crate::manifests::{InferenceObjective, Manifests};
        let config = |policy: &str| {
            load_config(
                "f",
                &format!("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: [flowControl]\nplugins:\n- type: queue-scorer\n- type: {policy}\nflowControl:\n  usageLimitPolicyPluginRef: {policy}\n  priorityBands: [{{priority: -3}}]\n"),
                true,
            )
            .unwrap()
        };
        let objective = |name: &str, priority: i32, pool: &str| InferenceObjective {
            name: name.into(),
            priority,
            pool: pool.into(),
        };
        let manifests = Manifests {
            objectives: vec![
                objective("critical", 10, "p"),
                objective("other-pool", 50, "q"),
                objective("plain", 0, "p"),
                objective("batch", -3, "p"),
            ],
            ..Default::default()
        };
        let mut c = config("static-usage-limit-policy");
        provision_objective_bands(&mut c, &manifests, "p");
        assert_eq!(c.flow_control.unwrap().priorities, vec![10, 0, -3]);
        // Under the soft ceiling too: band 0 then alternates below band 10.
        let mut c = config("soft-reflective-ceiling-policy");
        provision_objective_bands(&mut c, &manifests, "p");
        assert_eq!(c.flow_control.unwrap().priorities, vec![10, 0, -3]);
    }
}
