//! `pdsim validate FILE` on a router input rather than a deployment: an
//! EndpointPickerConfig, the ConfigMap that carries one, the Helm values of
//! the EPP's charts, or the manifests the EPP reads. Each is checked on its
//! own as a deployment's `router` block would load it, with a warning that
//! the checks against a deployment were skipped; a Helm template is named
//! as one. Real files from llm-d-router and the guides (`$PDSIM_SHARED/
//! reference/epp/`) are all taken as router inputs, never as deployments.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// `pdsim validate ARGS...` from the repository root: (exit code, stdout).
fn validate(args: &[&str]) -> (i32, String) {
    let args: Vec<&str> = std::iter::once("validate")
        .chain(args.iter().copied())
        .collect();
    let (code, out, _) = pdsim_testkit::run_pdsim(env!("CARGO_BIN_EXE_pdsim"), &root(), &args);
    (code, out)
}

/// A fresh folder for one test, with `files` (name, text) written into it.
fn folder(test: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("validate-router-{test}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_string_lossy().into_owned()
}

/// The deployment schema's complaint about a Kubernetes object's keys: the
/// sign a router input was read as a pdsim Deployment.
const READ_AS_DEPLOYMENT: &str = "expected one of `kind`, `name`, `pools`";

const CONFIG: &str = "apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: no-such-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
";

#[test]
fn every_bundled_router_configuration_validates_on_its_own() {
    for folder in ["deployments/pd", "deployments/rebel100"] {
        let mut names: Vec<PathBuf> = std::fs::read_dir(root().join(folder))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        assert!(!names.is_empty(), "{folder} holds router configurations");
        for file in names {
            let (code, out) = validate(&[&file.to_string_lossy()]);
            assert_eq!(code, 0, "{}:\n{out}", file.display());
            assert!(out.contains("[router-input-alone]"), "{out}");
            assert!(
                out.contains("valid: 1 file(s), 0 error(s), 1 warning(s)"),
                "{out}"
            );
        }
    }
}

#[test]
fn a_configuration_given_alone_names_the_plugin_and_its_line() {
    let dir = folder("alone", &[("epp.yaml", CONFIG)]);
    let (code, out) = validate(&[&path(&dir, "epp.yaml")]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("epp.yaml:5: error: plugins[1].type: plugin type `no-such-scorer` is not registered [epp-plugin-unknown]"),
        "{out}"
    );
    assert!(!out.contains(READ_AS_DEPLOYMENT), "{out}");
    // Fixed, it is valid, with the warning that no deployment was checked.
    let fixed = CONFIG.replace("- type: no-such-scorer\n", "");
    let dir = folder("alone-fixed", &[("epp.yaml", &fixed)]);
    let (code, out) = validate(&[&path(&dir, "epp.yaml")]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("router.endpoint_picker_config would load it"),
        "{out}"
    );
}

/// A ConfigMap as the EPP's chart renders it: its configuration under
/// `data`, a literal block whose lines are the file's.
fn config_map(configs: &[(&str, &str)]) -> String {
    let mut text = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: epp\ndata:\n  README: plain text\n",
    );
    for (key, config) in configs {
        text.push_str(&format!("  {key}: |\n"));
        for line in config.lines() {
            text.push_str(&format!("    {line}\n"));
        }
    }
    text
}

#[test]
fn a_config_map_holding_one_configuration_is_read_as_it() {
    let text = config_map(&[("default-plugins.yaml", CONFIG)]);
    let dir = folder("configmap", &[("cm.yaml", &text)]);
    let (code, out) = validate(&[&path(&dir, "cm.yaml")]);
    assert_eq!(code, 1, "{out}");
    // `default-plugins.yaml: |` is line 7, so the configuration's fifth
    // line, the unknown plugin's, is the file's twelfth.
    assert!(
        out.contains("cm.yaml:12: error: data.default-plugins.yaml.plugins[1].type: plugin type `no-such-scorer`"),
        "{out}"
    );
    // Fixed, a deployment names it and validates and runs on it.
    let fixed = config_map(&[(
        "default-plugins.yaml",
        &CONFIG.replace("- type: no-such-scorer\n", ""),
    )]);
    let deployment = std::fs::read_to_string(root().join("deployments/default.yaml")).unwrap();
    assert!(
        !deployment.contains("\nrouter:"),
        "the default deployment names no router inputs"
    );
    let deployment = format!("{deployment}\nrouter:\n  endpoint_picker_config: cm.yaml\n");
    let dir = folder(
        "configmap-fixed",
        &[("cm.yaml", &fixed), ("d.yaml", &deployment)],
    );
    let (code, out) = validate(&[&path(&dir, "cm.yaml")]);
    assert_eq!(code, 0, "{out}");
    let (code, out) = validate(&[
        "--scenario",
        "scenarios/default.yaml",
        &path(&dir, "d.yaml"),
    ]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_config_map_holding_several_configurations_is_refused_naming_each() {
    let fixed = CONFIG.replace("- type: no-such-scorer\n", "");
    let text = config_map(&[("a.yaml", &fixed), ("b.yaml", &fixed)]);
    let dir = folder("configmap-two", &[("cm.yaml", &text)]);
    let (code, out) = validate(&[&path(&dir, "cm.yaml")]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("[epp-configmap-config]"), "{out}");
    assert!(
        out.contains("2 EndpointPickerConfigs (data.a.yaml, data.b.yaml)"),
        "{out}"
    );
    // One with none says so.
    let dir = folder("configmap-none", &[("cm.yaml", &config_map(&[]))]);
    let (code, out) = validate(&[&path(&dir, "cm.yaml")]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("no EndpointPickerConfig under `data`"),
        "{out}"
    );
}

#[test]
fn manifests_and_helm_values_are_checked_as_router_inputs() {
    // An InferencePool after an object the EPP ignores.
    let manifests = "apiVersion: v1
kind: Service
metadata:
  name: s
---
apiVersion: inference.networking.k8s.io/v1
kind: InferencePool
metadata:
  name: pool
spec:
  selector:
    matchLabels:
      app: vllm
  targetPorts:
  - number: 8000
  endpointPickerRef:
    name: epp
    port:
      number: 9002
";
    let values = format!(
        "router:\n  epp:\n    pluginsConfigFile: mine.yaml\n    pluginsCustomConfig:\n      mine.yaml: |\n{}",
        CONFIG
            .lines()
            .map(|l| format!("        {l}\n"))
            .collect::<String>()
    );
    let dir = folder(
        "manifests",
        &[("pool.yaml", manifests), ("values.yaml", &values)],
    );
    let (code, out) = validate(&[&path(&dir, "pool.yaml")]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("router.manifests would load it"), "{out}");
    let (code, out) = validate(&[&path(&dir, "values.yaml")]);
    assert_eq!(code, 1, "{out}");
    // `mine.yaml: |` is line 5: the plugin's line is the file's tenth.
    assert!(
        out.contains(
            "values.yaml:10: error: router.epp.pluginsCustomConfig.mine.yaml.plugins[1].type"
        ),
        "{out}"
    );
}

#[test]
fn a_helm_template_is_named_as_one() {
    // A chart's ConfigMap whose configuration is templated too: its
    // metadata alone would still parse, its configuration does not load.
    let template = "apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include \"epp.name\" . }}
data:
  default-plugins.yaml: |
    apiVersion: inference.networking.x-k8s.io/v1alpha1
    kind: EndpointPickerConfig
    plugins:
    - type: {{ .Values.scorer }}
";
    // One whose configuration is not even YAML until rendered.
    let unparsed = "apiVersion: v1
kind: ConfigMap
metadata:
  name: epp
data:
  default-plugins.yaml: |
    apiVersion: inference.networking.x-k8s.io/v1alpha1
    kind: EndpointPickerConfig
    plugins:
    {{- range .Values.scorers }}
    - type: {{ . }}
    {{- end }}
";
    let deployment = "kind: Deployment\nname: {{ .Release.Name }}\npools: []\n";
    let dir = folder(
        "template",
        &[
            ("cm.yaml", template),
            ("cm2.yaml", unparsed),
            ("d.yaml", deployment),
        ],
    );
    for (file, line) in [("cm.yaml", 10), ("cm2.yaml", 10), ("d.yaml", 2)] {
        let (code, out) = validate(&[&path(&dir, file)]);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains(&format!("{file}:{line}: error: ")), "{out}");
        assert!(out.contains("[helm-template]"), "{out}");
    }
}

#[test]
fn every_real_router_file_is_taken_as_a_router_input() {
    let test = "every_real_router_file_is_taken_as_a_router_input";
    let Some(shared) = pdsim_testkit::shared(test, "reference/epp/*.yaml") else {
        return;
    };
    let dir = shared.join("reference/epp");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 20,
        "{} router files in {}",
        files.len(),
        dir.display()
    );
    for file in files {
        let (code, out) = validate(&[&file.to_string_lossy()]);
        assert!(
            code == 0 || code == 1,
            "{}: exit {code}\n{out}",
            file.display()
        );
        // A chart template that is not YAML at all is named as a template
        // (quoting what the parser made of it); anything else is read as a
        // router input.
        if !out.contains("[helm-template]") {
            assert!(
                !out.contains(READ_AS_DEPLOYMENT),
                "{}:\n{out}",
                file.display()
            );
            assert!(
                out.contains("[router-input-alone]"),
                "{}:\n{out}",
                file.display()
            );
        }
    }
}

#[test]
fn epp_flags_for_a_file_given_alone_come_from_the_command_line() {
    // An Alpha plugin loads only with the flag a deployment would give.
    let alpha = CONFIG.replace("no-such-scorer", "soft-reflective-ceiling-policy");
    let dir = folder("flags", &[("epp.yaml", &alpha)]);
    let file = path(&dir, "epp.yaml");
    let (code, out) = validate(&[&file]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("epp.yaml:5: error: plugins[1].type: plugin type `soft-reflective-ceiling-policy` is Alpha"), "{out}");
    let (code, out) = validate(&["--epp-flag=--allow-experimental-plugins", &file]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("with the --epp-flag flags"), "{out}");
    // A flag's problem is the command line's.
    let (code, out) = validate(&["--epp-flag=--no-such-flag=1", &file]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("command line: error: --epp-flag[0]: --no-such-flag is not an EPP flag"),
        "{out}"
    );
    // With no router file given alone, the flag would do nothing: refused.
    let (code, out) = validate(&[
        "--epp-flag=--allow-experimental-plugins",
        "--scenario",
        "scenarios/default.yaml",
        "deployments/default.yaml",
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("[epp-flag-unused]"), "{out}");
}

#[test]
fn the_epps_config_file_flag_picks_a_config_maps_configuration() {
    let fixed = CONFIG.replace("- type: no-such-scorer\n", "");
    // `a.yaml: |` is line 7 and its eight lines follow, so b.yaml's key
    // is line 16 and its unknown plugin, its fifth line, the file's 21st.
    let text = config_map(&[("a.yaml", &fixed), ("b.yaml", CONFIG)]);
    let deployment = std::fs::read_to_string(root().join("deployments/default.yaml")).unwrap();
    let with_flag = |flag: &str| {
        format!(
            "{deployment}\nrouter:\n  endpoint_picker_config: cm.yaml\n  epp_flags: [\"{flag}\"]\n"
        )
    };
    let dir = folder(
        "configmap-flag",
        &[
            ("cm.yaml", &text),
            ("a.yaml", &with_flag("--config-file=/config/a.yaml")),
            ("b.yaml", &with_flag("--config-file=/config/b.yaml")),
            ("c.yaml", &with_flag("--config-file=/config/c.yaml")),
        ],
    );
    let deployment_at =
        |name: &str| validate(&["--scenario", "scenarios/default.yaml", &path(&dir, name)]);
    // The one the flag names is read: a.yaml is valid, b.yaml is not.
    let (code, out) = deployment_at("a.yaml");
    assert_eq!(code, 0, "{out}");
    let (code, out) = deployment_at("b.yaml");
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "cm.yaml:21: error: data.b.yaml.plugins[1].type: plugin type `no-such-scorer`"
        ),
        "{out}"
    );
    // A key the ConfigMap does not hold is refused, naming those it does.
    let (code, out) = deployment_at("c.yaml");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("names `c.yaml`, which is not an EndpointPickerConfig under this ConfigMap's data (its configurations: data.a.yaml, data.b.yaml)"), "{out}");
    // Given on its own, --epp-flag gives the flag.
    let (code, out) = validate(&[
        "--epp-flag=--config-file=/config/a.yaml",
        &path(&dir, "cm.yaml"),
    ]);
    assert_eq!(code, 0, "{out}");
    // --config-file beside a configuration that is not a ConfigMap still
    // names the configuration twice.
    std::fs::write(dir.join("cm.yaml"), &fixed).unwrap();
    let (code, out) = deployment_at("a.yaml");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("[router-config-twice]"), "{out}");
}

#[test]
fn a_rendered_chart_named_as_the_configuration_says_how_to_split_it() {
    let fixed = CONFIG.replace("- type: no-such-scorer\n", "");
    // `helm template` output: the configuration's ConfigMap among the
    // EPP's other objects (its second document's `kind` is line 7).
    let rendered = format!(
        "---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: epp\n---\nkind: ConfigMap\napiVersion: v1\nmetadata:\n  name: epp\n{}---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: epp\n",
        config_map(&[("default-plugins.yaml", &fixed)])
            .split_once("\ndata:\n")
            .map(|(_, data)| format!("data:\n{data}"))
            .unwrap()
    );
    let deployment = std::fs::read_to_string(root().join("deployments/default.yaml")).unwrap();
    let deployment = format!("{deployment}\nrouter:\n  endpoint_picker_config: rendered.yaml\n");
    let dir = folder(
        "rendered",
        &[("rendered.yaml", &rendered), ("d.yaml", &deployment)],
    );
    for args in [
        vec!["--scenario", "scenarios/default.yaml", "d.yaml"],
        vec!["rendered.yaml"],
    ] {
        let args: Vec<String> = args
            .iter()
            .map(|a| {
                if a.ends_with(".yaml") && !a.starts_with("scenarios/") {
                    path(&dir, a)
                } else {
                    a.to_string()
                }
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out) = validate(&args);
        assert_eq!(code, 1, "{out}");
        assert!(
            out.contains("rendered.yaml:7: error: the file holds 3 documents (ServiceAccount, ConfigMap, Deployment)"),
            "{out}"
        );
        assert!(out.contains("[epp-config-documents]"), "{out}");
    }
}
