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
    assert!(
        shown.starts_with("epp.yaml:6: plugins[1].type: "),
        "{shown}"
    );
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
    let problems = check_router_inputs(&files, "d/d.yaml", Some(&router(&block.replace("  ", ""))))
        .unwrap_err();
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
    let parsed: Router =
        serde_yaml::from_str(&block.replacen("  epp_flags", "epp_flags", 1)).unwrap();
    let problems = check_router_inputs(&files, "d.yaml", Some(&parsed)).unwrap_err();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].file, "d.yaml (--config-text)");
    assert_eq!(problems[0].path, "plugins[0].type");
    assert_eq!(
        problems[0].line,
        Some(9),
        "the line of the --config-text item"
    );
}

#[test]
fn router_files_that_cannot_be_used_are_problems_at_the_key_naming_them() {
    let block =
        "  endpoint_picker_config: epp.yaml\n  manifests:\n    - pools.yaml\n    - folder\n";
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
    assert!(
        problems[2].message.contains("is a directory"),
        "{problems:?}"
    );
}

// ---------------------------------------------------------------------------
// Wrong types, decoded as the EPP's Go decoder would: the YAML becomes JSON
// (no NaN or infinity), then strict `encoding/json` into typed structs.
// ---------------------------------------------------------------------------

const HEAD: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n";

#[test]
fn a_profile_s_plugins_given_as_a_scalar_is_refused_where_it_is_written() {
    let text = format!(
        "{HEAD}- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins: queue-scorer\n"
    );
    assert_eq!(
        config_problems(&text),
        vec![(
            "wrong-type",
            "schedulingProfiles[0].plugins".to_string(),
            Some(7)
        )]
    );
    let message = &load_config("e", &text, false).unwrap_err()[0].message;
    assert!(
        message.contains("must be a list, not a string"),
        "{message}"
    );
    // A slot that is not a mapping is refused too, not skipped.
    let text = format!(
        "{HEAD}- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - queue-scorer\n"
    );
    assert_eq!(
        config_problems(&text),
        vec![(
            "wrong-type",
            "schedulingProfiles[0].plugins[0]".to_string(),
            Some(8)
        )]
    );
}

#[test]
fn a_string_for_an_integer_and_a_fraction_are_refused_a_whole_float_is_not() {
    let approx = |value: &str| {
        format!(
            "{HEAD}- type: approx-prefix-cache-producer\n  parameters:\n    autoTune: false\n    blockSizeTokens: {value}\n"
        )
    };
    for bad in ["'16'", "16.5", "[16]", "1e30"] {
        assert_eq!(
            config_problems(&approx(bad)),
            vec![(
                "wrong-type",
                "plugins[0].parameters.blockSizeTokens".to_string(),
                Some(7)
            )],
            "{bad}"
        );
    }
    // YAML's 16.0 is the JSON number 16, which a Go int takes.
    for good in ["16", "16.0", "1e2", "~"] {
        assert!(
            load_config("e", &approx(good), false).is_ok(),
            "{good}: {:?}",
            load_config("e", &approx(good), false).err()
        );
    }
    let text = format!("{HEAD}- type: queue-scorer\n  name: 7\n- type: 3\n");
    assert_eq!(
        config_problems(&text),
        vec![
            ("wrong-type", "plugins[0].name".to_string(), Some(5)),
            ("wrong-type", "plugins[1].type".to_string(), Some(6)),
        ]
    );
}

#[test]
fn nan_and_infinities_anywhere_refuse_the_file_as_its_json_conversion_does() {
    let text = format!(
        "{HEAD}- type: approx-prefix-cache-producer\n  parameters:\n    blockSizeTokens: .nan\n- type: max-score-picker\n  parameters: {{maxNumOfEndpoints: -.inf}}\n"
    );
    let problems = load_config("e", &text, false).unwrap_err();
    let found: Vec<(&str, &str, Option<u32>)> = problems
        .iter()
        .map(|p| (p.code, p.path.as_str(), p.line))
        .collect();
    assert_eq!(
        found,
        vec![
            (
                "wrong-type",
                "plugins[0].parameters.blockSizeTokens",
                Some(6)
            ),
            (
                "wrong-type",
                "plugins[1].parameters.maxNumOfEndpoints",
                Some(8)
            ),
        ]
    );
    assert!(
        problems[0].message.starts_with(".nan is not a JSON number"),
        "{problems:?}"
    );
}

#[test]
fn weights_decode_as_go_float64s_and_overflowing_sums_are_refused() {
    let profile = |weights: &[&str]| {
        let slots: String = weights
            .iter()
            .enumerate()
            .map(|(i, w)| format!("  - pluginRef: s{i}\n    weight: {w}\n"))
            .collect();
        let plugins: String = (0..weights.len())
            .map(|i| format!("- type: queue-scorer\n  name: s{i}\n"))
            .collect();
        format!("{HEAD}{plugins}schedulingProfiles:\n- name: default\n  plugins:\n{slots}")
    };
    // The EPP takes any float64 weight, a negative one included; pdsim's
    // sums are the same float64 arithmetic, so it takes them too.
    let config = load_config("e", &profile(&["-1e308", "2"]), false).unwrap();
    assert_eq!(config.profiles[0].scorers[0].1, -1e308);
    // null is the default weight 1, as a nil *float64 is.
    let config = load_config("e", &profile(&["~"]), false).unwrap();
    assert_eq!(config.profiles[0].scorers[0].1, 1.0);
    assert_eq!(
        config_problems(&profile(&["'2'"])),
        vec![(
            "wrong-type",
            "schedulingProfiles[0].plugins[0].weight".to_string(),
            Some(10)
        )]
    );
    // Two weights whose magnitudes overflow a float64 sum.
    assert_eq!(
        config_problems(&profile(&["-1e308", "-1e308"])),
        vec![(
            "epp-not-simulated",
            "schedulingProfiles[0].plugins".to_string(),
            Some(10)
        )]
    );
}

#[test]
fn manifest_fields_of_the_wrong_type_are_refused_where_they_are_written() {
    let text = "\
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata:
  name: pool
spec:
  selector:
    matchLabels: {app: vllm, tier: 3}
  targetPorts: [{number: '8000'}, {number: 8001}, {number: 70000}]
---
apiVersion: inference.networking.x-k8s.io/v1alpha2
kind: InferenceObjective
metadata:
  name: chat
spec:
  priority: high
  poolRef:
    name: pool
---
kind: InferenceObjective
metadata: {name: batch}
spec: {priority: .inf}
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
                "wrong-type",
                "InferencePool/pool.spec.selector.matchLabels.tier".to_string(),
                Some(7)
            ),
            (
                "wrong-type",
                "InferencePool/pool.spec.targetPorts[0].number".to_string(),
                Some(8)
            ),
            (
                "wrong-type",
                "InferencePool/pool.spec.targetPorts[2].number".to_string(),
                Some(8)
            ),
            (
                "wrong-type",
                "InferenceObjective/chat.spec.priority".to_string(),
                Some(15)
            ),
            (
                "wrong-type",
                "document 2.spec.priority".to_string(),
                Some(21)
            ),
        ]
    );
}

#[test]
fn a_handler_s_profile_name_that_is_not_a_string_is_refused_not_defaulted() {
    // Read as absent, `decodeProfile: 3` would quietly become `decode`.
    let text = format!(
        "{HEAD}- type: decode-filter\n- type: pd-profile-handler\n  parameters:\n    decodeProfile: 3\n- type: disagg-profile-handler\n  name: d\n  parameters:\n    profiles: {{decode: [x], prefil: p}}\n"
    );
    let found = config_problems(&text);
    for expected in [
        (
            "wrong-type",
            "plugins[1].parameters.decodeProfile".to_string(),
            Some(7),
        ),
        (
            "wrong-type",
            "plugins[2].parameters.profiles".to_string(),
            Some(11),
        ),
    ] {
        assert!(found.contains(&expected), "{expected:?} not in {found:?}");
    }
}

#[test]
fn data_layer_and_parser_references_of_the_wrong_type_are_refused() {
    let text = "\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
dataLayer:
  sources:
  - 3
  - pluginRef: metrics-data-source
    extractors: core-metrics-extractor
parser:
  pluginRef: 1
";
    assert_eq!(
        config_problems(text),
        vec![
            ("wrong-type", "dataLayer.sources[0]".to_string(), Some(5)),
            (
                "wrong-type",
                "dataLayer.sources[1].extractors".to_string(),
                Some(7)
            ),
            ("wrong-type", "parser.pluginRef".to_string(), Some(9)),
            (
                "epp-plugin-ref",
                "dataLayer.sources[1].pluginRef".to_string(),
                Some(6)
            ),
        ]
    );
}
