//! Every router problem names the line it is on: in the EndpointPickerConfig,
//! in each document of a manifest file, and for flags and the router block's
//! own keys in the deployment. The lines below are counted by hand from the
//! texts, so a change in how paths are written or indexed shows up here.

use pdsim_router::{check_router_inputs, load_config, load_manifests};
use pdsim_spec::deployment::Router;
use pdsim_spec::files::MemoryFiles;
use pdsim_spec::problem::Problem;

/// (code, path, line) of every problem of a config text.
fn config_problems(text: &str) -> Vec<(&'static str, String, Option<u32>)> {
    load_config("epp.yaml", text, false)
        .unwrap_err()
        .into_iter()
        .map(|p| (p.code, p.path, p.line))
        .collect()
}

const CONFIG: &str = "\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
# plugins, in order
plugins:
- type: queue-scorer
- type: warp-drive-scorer
- type: max-score-picker
  parameters:
    maxNumOfEndpoints: 1
    speed: 9
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: no-such-plugin
    weight: 2
";

#[test]
fn an_unknown_type_a_bad_parameter_and_a_bad_reference_name_their_lines() {
    let found = config_problems(CONFIG);
    assert_eq!(
        found,
        vec![
            ("epp-plugin-unknown", "plugins[1].type".to_string(), Some(6)),
            (
                "epp-plugin-parameter",
                "plugins[2].parameters.speed".to_string(),
                Some(10)
            ),
            (
                "epp-plugin-ref",
                "schedulingProfiles[0].plugins[1].pluginRef".to_string(),
                Some(15)
            ),
        ]
    );
    // The text form is the one editors jump to.
    let shown = load_config("epp.yaml", CONFIG, false).unwrap_err()[0].to_string();
    assert!(shown.starts_with("epp.yaml:6: plugins[1].type: "), "{shown}");
}

#[test]
fn a_problem_found_by_plugin_name_gets_the_plugin_s_line() {
    // The disagg handler's checks run after the plugin list is read and
    // name the handler by its plugin name; the path and line are its entry.
    let text = "\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: disagg-profile-handler
  name: pd
  parameters:
    stageOrder: sideways
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: prefill-filter}, {pluginRef: max-score-picker}]
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: max-score-picker}]
";
    assert_eq!(
        config_problems(text),
        vec![(
            "epp-plugin-parameter",
            "plugins[3].parameters.stageOrder".to_string(),
            Some(10)
        )]
    );
}

#[test]
fn yaml_syntax_errors_and_a_config_that_is_not_a_mapping_are_located() {
    let found = config_problems("apiVersion: llm-d.ai/v1alpha1\nplugins:\n- type: [queue\n");
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].0, "yaml-syntax");
    assert!(found[0].2.is_some_and(|l| l >= 3), "{found:?}");
    let found = config_problems("# a list, not a config\n\n- type: queue-scorer\n");
    assert_eq!(found, vec![("config-shape", String::new(), Some(3))]);
}

#[test]
fn a_bad_manifest_field_names_the_line_in_its_own_document() {
    let text = "\
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata:
  name: pool
spec:
  selector:
    matchLabels: {app: vllm}
  targetPorts: [{number: 8000}]
---
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceObjective
metadata:
  name: chat
spec:
  priority: 1
  criticality: Critical
  poolRef:
    name: pool
---
just a string
";
    let found: Vec<(&str, String, Option<u32>)> = load_manifests("m.yaml", text)
        .unwrap_err()
        .into_iter()
        .map(|p| (p.code, p.path, p.line))
        .collect();
    assert_eq!(
        found,
        vec![
            (
                "unknown-key",
                "InferenceObjective/chat.spec.criticality".to_string(),
                Some(16)
            ),
            ("epp-manifest", "document 2".to_string(), Some(19)),
        ]
    );
}

fn router(yaml: &str) -> Router {
    serde_yaml::from_str(yaml).unwrap()
}

fn located(problems: &[Problem]) -> Vec<(String, String, Option<u32>, String)> {
    problems
        .iter()
        .map(|p| (p.file.clone(), p.path.clone(), p.line, p.code.clone()))
        .collect()
}

const DEPLOYMENT_HEAD: &str = "\
kind: Deployment
name: d
pools:
  - role: colocated
    nodes: 1
router:
";

#[test]
fn a_bad_flag_names_its_item_in_the_deployment() {
    let block = "  epp_flags:\n    - --pool-name=p\n    - --warp=9\n    - --refresh-metrics-interval=fast\n";
    let files = MemoryFiles::new().with("d/d.yaml", &format!("{DEPLOYMENT_HEAD}{block}"));
    let problems =
        check_router_inputs(&files, "d/d.yaml", Some(&router(&block.replace("  ", "")))).unwrap_err();
    assert_eq!(
        located(&problems),
        vec![
            (
                "d/d.yaml".to_string(),
                "router.epp_flags[1]".to_string(),
                Some(9),
                "epp-flag-unknown".to_string()
            ),
            (
                "d/d.yaml".to_string(),
                "router.epp_flags[2]".to_string(),
                Some(10),
                "epp-flag-value".to_string()
            ),
        ]
    );
}

#[test]
fn config_text_problems_point_at_the_flag_that_holds_the_text() {
    let block = "  epp_flags:\n    - --pool-name=p\n    - '--config-text=apiVersion: llm-d.ai/v1alpha1\n\n      kind: EndpointPickerConfig\n\n      plugins: [{type: warp-scorer}]'\n";
    let files = MemoryFiles::new().with("d.yaml", &format!("{DEPLOYMENT_HEAD}{block}"));
    let parsed: Router = serde_yaml::from_str(&block.replacen("  epp_flags", "epp_flags", 1)).unwrap();
    let problems = check_router_inputs(&files, "d.yaml", Some(&parsed)).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].file, "d.yaml (--config-text)");
    assert_eq!(problems[0].path, "plugins[0].type");
    assert_eq!(problems[0].line, Some(9), "the line of the --config-text item");
}

#[test]
fn router_files_that_cannot_be_used_are_problems_at_the_key_naming_them() {
    let block = "  endpoint_picker_config: epp.yaml\n  manifests:\n    - pools.yaml\n    - folder\n";
    let files = MemoryFiles::new()
        .with("d/d.yaml", &format!("{DEPLOYMENT_HEAD}{block}"))
        .with("d/folder/x.yaml", "kind: InferencePool\n");
    let problems = check_router_inputs(
        &files,
        "d/d.yaml",
        Some(&router(
            "endpoint_picker_config: epp.yaml\nmanifests: [pools.yaml, folder]\n",
        )),
    )
    .unwrap_err();
    assert_eq!(
        located(&problems),
        vec![
            (
                "d/d.yaml".to_string(),
                "router.endpoint_picker_config".to_string(),
                Some(7),
                "router-file-missing".to_string()
            ),
            (
                "d/d.yaml".to_string(),
                "router.manifests[0]".to_string(),
                Some(9),
                "router-file-missing".to_string()
            ),
            (
                "d/d.yaml".to_string(),
                "router.manifests[1]".to_string(),
                Some(10),
                "router-file-missing".to_string()
            ),
        ]
    );
    assert!(problems[0].message.contains("d/epp.yaml"), "{problems:?}");
    assert!(problems[2].message.contains("is a directory"), "{problems:?}");
}
