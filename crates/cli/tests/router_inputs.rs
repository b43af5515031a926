//! Router files on disk that cannot be used, through the `pdsim` binary:
//! `validate` and `run` refuse them alike, and `run`'s "see above" has the
//! located reason above it.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pdsim(args: &[&str]) -> (i32, String, String) {
    pdsim_testkit::run_pdsim(env!("CARGO_BIN_EXE_pdsim"), &root(), args)
}

/// `pdsim validate` of `deployment` on `scenario`.
fn validate(scenario: &str, deployment: &str) -> (i32, String, String) {
    pdsim(&["validate", "--scenario", scenario, deployment])
}

/// `pdsim run` of `deployment` on the bundled 4×8 H200 scenario, with
/// `requests` synthetic requests at `rate`, into `out`.
fn run_into(deployment: &str, rate: &str, requests: &str, out: &Path) -> (i32, String, String) {
    pdsim(&[
        "run",
        "--scenario",
        "scenarios/4x8-h200.yaml",
        "--deployment",
        deployment,
        "--rate",
        rate,
        "--requests",
        requests,
        "--out",
        &out.to_string_lossy(),
    ])
}

/// `pdsim export` of `deployment` on the bundled 4×8 H200 scenario into
/// `out` (removed first).
fn export_into(deployment: &Path, out: &Path) -> (i32, String, String) {
    let _ = std::fs::remove_dir_all(out);
    pdsim(&[
        "export",
        "--scenario",
        "scenarios/4x8-h200.yaml",
        "--deployment",
        &deployment.to_string_lossy(),
        "--out",
        &out.to_string_lossy(),
    ])
}

/// A copy of the bundled EPP example whose EndpointPickerConfig is `epp`
/// (bytes, or a folder when `None`), in a fresh folder.
fn case(name: &str, epp: Option<&[u8]>) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("router-inputs-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("pd")).unwrap();
    std::fs::copy(
        root().join("deployments/1p3d-ep8-epp.yaml"),
        dir.join("d.yaml"),
    )
    .unwrap();
    let config = dir.join("pd/epp-prefix-pd.yaml");
    match epp {
        Some(bytes) => std::fs::write(&config, bytes).unwrap(),
        None => std::fs::create_dir_all(&config).unwrap(),
    }
    dir.join("d.yaml")
}

#[test]
fn an_unusable_epp_config_is_refused_by_validate_and_run_at_its_key_and_line() {
    let not_utf8: &[u8] = b"apiVersion: llm-d.ai/v1alpha1\nkind: \xff\xfe\n";
    let wrong_type: &[u8] = b"apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: default\n  plugins: queue-scorer\n";
    for (name, bytes, expected) in [
        (
            "not-utf8",
            Some(not_utf8),
            "d.yaml:36: error: router.endpoint_picker_config: ",
        ),
        (
            "folder",
            None,
            "d.yaml:36: error: router.endpoint_picker_config: ",
        ),
        (
            "wrong-type",
            Some(wrong_type),
            "epp-prefix-pd.yaml:7: error: schedulingProfiles[0].plugins: ",
        ),
    ] {
        let deployment = case(name, bytes);
        let deployment = deployment.to_string_lossy();
        let (code, stdout, stderr) = validate("scenarios/4x8-h200.yaml", &deployment);
        assert_eq!(code, 1, "{name}: {stdout}{stderr}");
        assert!(stdout.contains(expected), "{name}: {stdout}");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("router-inputs-{name}-out"));
        let (code, _, stderr) = run_into(&deployment, "1", "5", &out);
        assert_eq!(code, 1, "{name}: {stderr}");
        let lines: Vec<&str> = stderr.lines().collect();
        let see_above = lines
            .iter()
            .position(|l| l.contains("see above"))
            .unwrap_or_else(|| panic!("{name}: {stderr}"));
        assert!(
            lines[..see_above].iter().any(|l| l.contains(expected)),
            "{name}: the reason is not above the refusal: {stderr}"
        );
        assert!(!out.exists(), "{name}: nothing is written");
    }
}

/// `text` as the EndpointPickerConfig inside Helm values of llm-d-router's
/// standalone chart (`router.epp.pluginsCustomConfig`, selected by
/// `pluginsConfigFile`), with flags of the chart's own.
fn in_chart_values(text: &str, flags: &str) -> String {
    let mut values = format!(
        "# Helm values for llm-d-router-standalone\nrouter:\n  epp:\n    replicas: 1\n    flags:\n{flags}    pluginsConfigFile: \"pd-plugins.yaml\"\n    pluginsCustomConfig:\n      pd-plugins.yaml: |\n"
    );
    for line in text.lines() {
        if line.is_empty() {
            values.push('\n');
        } else {
            values.push_str(&format!("        {line}\n"));
        }
    }
    values
}

/// The bundled P/D configuration given as a guide's Helm values: the run is
/// the run of the configuration file itself, byte for byte, and the
/// values' flags take effect as the deployment's would.
#[test]
fn an_epp_config_inside_helm_values_runs_as_the_file_itself() {
    let text = std::fs::read_to_string(root().join("deployments/pd/epp-prefix-pd.yaml")).unwrap();
    let values = in_chart_values(&text, "      v: 4\n      enable-pprof: \"true\"\n");
    let plain = case("values-plain", Some(text.as_bytes()));
    let charted = case("values-chart", Some(values.as_bytes()));
    let mut summaries = Vec::new();
    for (name, deployment) in [("plain", &plain), ("chart", &charted)] {
        let deployment = deployment.to_string_lossy();
        let (code, stdout, stderr) = validate("scenarios/4x8-h200.yaml", &deployment);
        assert_eq!(code, 0, "{name}: {stdout}{stderr}");
        let out =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("router-inputs-values-{name}-out"));
        let _ = std::fs::remove_dir_all(&out);
        let (code, _, stderr) = run_into(&deployment, "20", "200", &out);
        assert_eq!(code, 0, "{name}: {stderr}");
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        summaries.push((
            summary["requests"].clone(),
            summary["ttft_ms"].clone(),
            summary["pools"].clone(),
        ));
    }
    assert_eq!(summaries[0], summaries[1]);
    // `export` writes the configuration itself into the inferencepool
    // values, under the values' file name, with the values' flags after the
    // deployment's.
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("router-inputs-values-export");
    let (code, _, stderr) = export_into(&charted, &out);
    assert_eq!(code, 0, "{stderr}");
    let gaie = std::fs::read_to_string(out.join("gaie-values.yaml")).unwrap();
    assert!(
        gaie.contains("pluginsConfigFile: pd-plugins.yaml"),
        "{gaie}"
    );
    let parsed: serde_yaml::Value = serde_yaml::from_str(&gaie).unwrap();
    assert_eq!(
        parsed["inferenceExtension"]["pluginsCustomConfig"]["pd-plugins.yaml"].as_str(),
        Some(text.as_str()),
        "{gaie}"
    );
    assert!(!gaie.contains("router:\n  epp:"), "{gaie}");
    for flag in ["pool-name: deepseek-v3", "v: '4'", "enable-pprof: 'true'"] {
        assert!(gaie.contains(flag), "{flag}: {gaie}");
    }

    // A problem inside the embedded configuration is reported in the
    // values file, at its line there and under its key path; a flag of the
    // values at its own key; the deployment's `--pool-name` and the
    // values' one are the same flag given twice.
    let broken = text.replacen("type: prefix-cache-scorer", "type: no-such-scorer", 1);
    assert_ne!(broken, text, "the bundled file has a prefix-cache-scorer");
    let values = in_chart_values(
        &broken,
        "      pool-name: other\n      no-such-flag: 1\n      ha-enable-leader-election=false: \"\"\n",
    );
    let bad_line = values
        .lines()
        .position(|l| l.contains("no-such-scorer"))
        .unwrap()
        + 1;
    let deployment = case("values-broken", Some(values.as_bytes()));
    let (code, stdout, stderr) = validate("scenarios/4x8-h200.yaml", &deployment.to_string_lossy());
    assert_eq!(code, 1, "{stdout}{stderr}");
    // `export` refuses them alike, writing nothing.
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("router-inputs-values-broken-export");
    let (code, _, export_err) = export_into(&deployment, &out);
    assert_eq!(code, 1, "{export_err}");
    assert!(
        export_err.contains("error: router.epp.flags.no-such-flag"),
        "{export_err}"
    );
    assert!(!out.exists());
    for expected in [
        format!("epp-prefix-pd.yaml:{bad_line}: error: router.epp.pluginsCustomConfig.pd-plugins.yaml.plugins["),
        "epp-prefix-pd.yaml:6: error: router.epp.flags.pool-name: --pool-name is set here and by the deployment's router.epp_flags[0]".to_string(),
        "epp-prefix-pd.yaml:7: error: router.epp.flags.no-such-flag: --no-such-flag is not an EPP flag".to_string(),
        // A key with `=` in it, rendered as the chart renders it.
        "epp-prefix-pd.yaml:8: error: router.epp.flags.ha-enable-leader-election=false: --ha-enable-leader-election `false=` is not a boolean".to_string(),
        "here `--ha-enable-leader-election=false=`".to_string(),
    ] {
        assert!(stdout.contains(&expected), "{expected}\n{stdout}");
    }
}

/// llm-d's guides deploy the EPP through Helm values (`reference/epp/
/// *values.yaml`). Named as a deployment's EndpointPickerConfig, each is
/// read as the chart reads it: every problem is located inside the values
/// (under the chart's EPP block, at a line of the values file), none is the
/// values file taken for a configuration of its own (`apiVersion` missing).
/// Which of them run depends on the EPP pdsim follows (a guide written for
/// a newer EPP names an apiVersion or parameter `ebab687` does not have);
/// each one that is refused is refused for a reason inside it.
#[test]
fn the_guides_helm_values_are_read_as_the_chart_reads_them() {
    let Some(shared) = pdsim_testkit::shared(
        "the_guides_helm_values_are_read_as_the_chart_reads_them",
        "the llm-d guides' Helm values in reference/epp",
    ) else {
        return;
    };
    let paths: Vec<PathBuf> = pdsim_testkit::entries(&shared.join("reference/epp"))
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with("values.yaml"))
        .collect();
    assert!(paths.len() >= 4, "{paths:?}");
    for path in paths {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let case = Path::new(env!("CARGO_TARGET_TMPDIR")).join("router-inputs-guides");
        let _ = std::fs::remove_dir_all(&case);
        std::fs::create_dir_all(&case).unwrap();
        std::fs::copy(&path, case.join("values.yaml")).unwrap();
        let pd = name.contains("pd-disaggregation");
        let pools = if pd {
            "  - role: prefill\n    nodes: 1\n    parallel: {tp: 1, pp: 1, dp: 1}\n  - role: decode\n    nodes: 1\n    parallel: {tp: 1, pp: 1, dp: 1}\npd_transfer: {connector: NixlConnector}\n"
        } else {
            "  - role: colocated\n    nodes: 2\n    parallel: {tp: 1, pp: 1, dp: 1}\n"
        };
        std::fs::write(
            case.join("d.yaml"),
            format!("kind: Deployment\nname: guide\npools:\n{pools}router:\n  endpoint_picker_config: values.yaml\n"),
        )
        .unwrap();
        let (code, stdout, stderr) = validate(
            "benches/peer/scenario.yaml",
            &case.join("d.yaml").to_string_lossy(),
        );
        assert!(code == 0 || code == 1, "{name}: {stdout}{stderr}");
        assert!(!stdout.contains("apiVersion ``"), "{name}: {stdout}");
        for line in stdout.lines().filter(|l| l.contains(": error: ")) {
            let located = line.starts_with(&format!("{}/values.yaml:", case.display()))
                && (line.contains(": error: router.epp.")
                    || line.contains(": error: inferenceExtension."));
            assert!(located, "{name}: a problem not inside the values: {line}");
        }
    }
}
