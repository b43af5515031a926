//! `pdsim export` writes what an llm-d user deploys; `pdsim import` reads
//! it back. The round trip must give the same deployment: the imported one
//! replays the same requests to the same per-request results, byte for
//! byte. Layouts the model-service chart cannot express are refused with
//! the reason.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pdsim(args: &[&str]) -> (i32, String, String) {
    pdsim_testkit::run_pdsim(env!("CARGO_BIN_EXE_pdsim"), &root(), args)
}

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("export")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.parent().unwrap()).unwrap();
    dir
}

/// The first `n` requests of the bundled trace, as a file.
fn small_trace(n: usize) -> PathBuf {
    let text = std::fs::read_to_string(root().join("traces/default.jsonl")).unwrap();
    let path = tmp(&format!("first-{n}.jsonl"));
    let head: Vec<&str> = text.lines().take(n).collect();
    std::fs::write(&path, head.join("\n") + "\n").unwrap();
    path
}

/// `pdsim export` of `deployment` on `scenario` into `out`, with `extra`
/// flags.
fn export(scenario: &str, deployment: &str, extra: &[&str], out: &Path) -> (i32, String, String) {
    let mut args = vec![
        "export",
        "--scenario",
        scenario,
        "--deployment",
        deployment,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    pdsim(&args)
}

fn round_trip(scenario: &str, deployment: &str, trace: &Path) {
    let name = Path::new(deployment)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .to_string();
    let (exported, imported) = (tmp(&format!("{name}-x")), tmp(&format!("{name}-i")));
    let (code, out, err) = export(scenario, deployment, &[], &exported);
    assert_eq!(code, 0, "export {deployment}: {out}{err}");
    for file in ["ms-values.yaml", "gaie-values.yaml", "README.md"] {
        assert!(exported.join(file).is_file(), "{deployment}: no {file}");
    }
    let (code, out, err) = pdsim(&[
        "import",
        "--scenario",
        scenario,
        exported.to_str().unwrap(),
        "--out",
        imported.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "import {deployment}: {out}{err}");
    let mut results = Vec::new();
    for (which, d) in [
        ("original", PathBuf::from(deployment)),
        ("imported", imported.join("deployment.yaml")),
    ] {
        let out_dir = tmp(&format!("{name}-run-{which}"));
        let (code, out, err) = pdsim(&[
            "run",
            "--scenario",
            scenario,
            "--deployment",
            d.to_str().unwrap(),
            "--trace",
            trace.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "run {which} {deployment}: {out}{err}");
        results.push(std::fs::read(out_dir.join("requests.csv")).unwrap());
    }
    assert!(
        results[0] == results[1],
        "{deployment}: the imported deployment gives other per-request results"
    );
}

#[test]
fn exported_deployments_read_back_into_the_same_deployment() {
    let trace = small_trace(150);
    for (scenario, deployment) in [
        // P/D over NixlConnector with a host-memory offload tier (a
        // MultiConnector), an EPP configuration and flags.
        ("scenarios/4x8-h200.yaml", "deployments/1p3d-ep8.yaml"),
        // Colocated TP 8.
        ("scenarios/4x8-h200.yaml", "deployments/colocated-tp8.yaml"),
        // No router block: the EPP's built-in configuration, written out.
        ("scenarios/default.yaml", "deployments/default.yaml"),
        // A real run's layout, TP 4.
        (
            "scenarios/real-runs/llama-2-70b-tp4-h100.yaml",
            "deployments/real-runs/llama-2-70b-tp4.yaml",
        ),
    ] {
        round_trip(scenario, deployment, &trace);
    }
}

#[test]
fn the_export_says_what_it_wrote_and_refuses_what_the_chart_cannot_express() {
    let out = tmp("readme");
    let (code, _, err) = export(
        "scenarios/4x8-h200.yaml",
        "deployments/1p3d-ep8.yaml",
        &[],
        &out,
    );
    assert_eq!(code, 0, "{err}");
    let values = std::fs::read_to_string(out.join("ms-values.yaml")).unwrap();
    for needle in [
        "uri: hf://deepseek-ai/DeepSeek-V3",
        "modelCommand: vllmServe",
        "replicas: 3",
        "dataLocal: 8",
        "connector: nixlv2",
    ] {
        assert!(values.contains(needle), "{needle}:\n{values}");
    }
    let gaie = std::fs::read_to_string(out.join("gaie-values.yaml")).unwrap();
    assert!(
        gaie.contains("pool-name: deepseek-v3")
            && gaie.contains("pluginsConfigFile: epp-always-pd.yaml"),
        "{gaie}"
    );
    let script = std::fs::read_to_string(out.join("vllm/pool-1-decode.sh")).unwrap();
    assert!(
        script.contains("vllm serve deepseek-ai/DeepSeek-V3 --data-parallel-size 8"),
        "{script}"
    );
    // Pipeline parallelism: the chart requests dataLocal × tensor GPUs a
    // pod, so the layout has no faithful chart form.
    let (code, _, err) = export(
        "scenarios/rebel100-minimax.yaml",
        "deployments/rebel100-agg.yaml",
        &[],
        &tmp("refused"),
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("parallel.pp") && err.contains("too few GPUs"),
        "{err}"
    );
    assert!(!tmp("refused").exists(), "a refused export writes nothing");
    // A checkpoint is a URI the chart takes.
    let (code, _, err) = export(
        "scenarios/default.yaml",
        "deployments/default.yaml",
        &["--model-uri", "llama"],
        &tmp("bad-uri"),
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--model-uri \"llama\": expected hf://"),
        "{err}"
    );
    let out = tmp("pvc-uri");
    let (code, _, err) = export(
        "scenarios/default.yaml",
        "deployments/default.yaml",
        &["--model-uri", "pvc://models/llama-3.1-8b"],
        &out,
    );
    assert_eq!(code, 0, "{err}");
    let values = std::fs::read_to_string(out.join("ms-values.yaml")).unwrap();
    assert!(
        values.contains("uri: pvc://models/llama-3.1-8b"),
        "{values}"
    );
}

#[test]
fn a_plan_that_sustains_nothing_says_so_and_writes_no_deploy_folder() {
    let out = tmp("plan-nothing");
    let trace = small_trace(100);
    let (code, stdout, err) = pdsim(&[
        "plan",
        "--scenario",
        "scenarios/4x8-h200.yaml",
        "--trace",
        trace.to_str().unwrap(),
        "--max-runs",
        "2",
        "--slo",
        "ttft_ms=1",
        "--out",
        out.to_str().unwrap(),
        "deployments/colocated-tp8.yaml",
    ]);
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(
        stdout.contains("\nLayouts that sustain no rate:\n- **colocated-tp8** sustains no rate"),
        "{stdout}"
    );
    assert!(!stdout.contains("deploy/"), "{stdout}");
    assert!(!out.join("deploy").exists());
}

#[test]
fn export_and_import_never_replace_a_users_folder_but_replace_their_own() {
    let user = tmp("user-folder");
    std::fs::create_dir_all(&user).unwrap();
    std::fs::write(user.join("thesis.txt"), "chapter one\n").unwrap();
    let (code, _, err) = export(
        "scenarios/4x8-h200.yaml",
        "deployments/1p3d-ep8.yaml",
        &[],
        &user,
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a pdsim result"), "{err}");
    let exported = tmp("own-export");
    let (code, _, err) = export(
        "scenarios/4x8-h200.yaml",
        "deployments/1p3d-ep8.yaml",
        &[],
        &exported,
    );
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = pdsim(&[
        "import",
        "--scenario",
        "scenarios/4x8-h200.yaml",
        exported.to_str().unwrap(),
        "--out",
        user.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        std::fs::read_to_string(user.join("thesis.txt")).unwrap(),
        "chapter one\n",
        "the user's file is untouched"
    );
    assert_eq!(std::fs::read_dir(&user).unwrap().count(), 1);
    // An earlier export of pdsim's own is replaced by the next.
    let (code, _, err) = export(
        "scenarios/4x8-h200.yaml",
        "deployments/colocated-tp8.yaml",
        &[],
        &exported,
    );
    assert_eq!(code, 0, "{err}");
    let readme = std::fs::read_to_string(exported.join("README.md")).unwrap();
    assert!(
        readme.contains("`colocated-tp8` as llm-d deploys it"),
        "{readme}"
    );
    assert!(
        !exported.join("vllm/pool-1-decode.sh").exists(),
        "the earlier export is gone"
    );
    // The inferencepool release is the pool the EPP is told to watch.
    let (_, _, _) = export(
        "scenarios/4x8-h200.yaml",
        "deployments/1p3d-ep8.yaml",
        &[],
        &exported,
    );
    let readme = std::fs::read_to_string(exported.join("README.md")).unwrap();
    assert!(
        readme.contains("helm install ms-1p3d-ep8 llm-d-modelservice")
            && readme.contains("helm install deepseek-v3 oci://"),
        "{readme}"
    );
}

/// A checkpoint URI or a name that a shell would run is refused before
/// anything is written, naming the flag or the key and its line: the
/// generated scripts are run as they are, so `$(id)` in one would run.
#[test]
fn a_model_uri_or_a_name_a_shell_would_run_is_refused_and_nothing_is_written() {
    for uri in [
        "hf://org/$(id)",
        "hf://org/a;id",
        "hf://org/a\nid",
        "pvc://models/`id`",
        "oci://registry/x y",
    ] {
        let out = tmp("injected-uri");
        let (code, stdout, err) = export(
            "scenarios/4x8-h200.yaml",
            "deployments/colocated-tp8.yaml",
            &["--model-uri", uri],
            &out,
        );
        assert_eq!(code, 2, "{uri:?}: {stdout}{err}");
        assert!(err.contains("--model-uri \""), "{uri:?}: {err}");
        assert!(!out.exists(), "{uri:?}: a refused export writes nothing");
    }
    let colocated = std::fs::read_to_string(root().join("deployments/colocated-tp8.yaml")).unwrap();
    let dir = tmp("injected-name");
    std::fs::create_dir_all(&dir).unwrap();
    let named = dir.join("named.yaml");
    std::fs::write(
        &named,
        colocated.replace("name: colocated-tp8", "name: \"x$(id)\""),
    )
    .unwrap();
    let out = dir.join("out-named");
    let (code, _, err) = export(
        "scenarios/4x8-h200.yaml",
        named.to_str().unwrap(),
        &[],
        &out,
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("named.yaml:4: error: name: cannot export") && err.contains("x$(id)"),
        "{err}"
    );
    assert!(!out.exists());
    let pool_name = dir.join("pool-name.yaml");
    std::fs::write(
        &pool_name,
        format!("{colocated}router:\n  epp_flags:\n    - \"--pool-name=p;id\"\n"),
    )
    .unwrap();
    let (code, _, err) = export(
        "scenarios/4x8-h200.yaml",
        pool_name.to_str().unwrap(),
        &[],
        &out,
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("pool-name.yaml:17: error: router.epp_flags[0]: cannot export")
            && err.contains("p;id"),
        "{err}"
    );
    assert!(!out.exists());
    // A plain URI of another scheme is taken as it is.
    let out = dir.join("out-pvc-hf");
    let uri = "pvc+hf://model-cache/hub/deepseek-ai/DeepSeek-V3";
    let (code, _, err) = export(
        "scenarios/4x8-h200.yaml",
        "deployments/colocated-tp8.yaml",
        &["--model-uri", uri],
        &out,
    );
    assert_eq!(code, 0, "{err}");
    let values = std::fs::read_to_string(out.join("ms-values.yaml")).unwrap();
    assert!(values.contains(&format!("uri: {uri}\n")), "{values}");
}

/// `pdsim import` writes the EndpointPickerConfig under the name
/// `pluginsConfigFile` gives it: a path there (`../x`, `/home/...`) is
/// refused, since it wrote outside the output folder, over whatever was
/// there. A folder name with a line break stays inside the comment that
/// names it.
#[test]
fn import_writes_nothing_outside_its_folder_and_no_name_breaks_a_comment() {
    let dir = tmp("import-escape");
    std::fs::create_dir_all(&dir).unwrap();
    let exported = dir.join("exported\nkind: Scenario");
    let (code, _, err) = export(
        "scenarios/4x8-h200.yaml",
        "deployments/1p3d-ep8.yaml",
        &[],
        &exported,
    );
    assert_eq!(code, 0, "{err}");
    let imported = dir.join("imported");
    let (code, _, err) = pdsim(&[
        "import",
        "--scenario",
        "scenarios/4x8-h200.yaml",
        exported.to_str().unwrap(),
        "--out",
        imported.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let yaml = std::fs::read_to_string(imported.join("deployment.yaml")).unwrap();
    let first = yaml.lines().next().unwrap();
    assert!(
        first.starts_with("# Read by `pdsim import` from ")
            && first.contains("exported\\nkind: Scenario"),
        "{yaml}"
    );
    assert!(
        yaml.lines().nth(1).unwrap().starts_with("kind: Deployment"),
        "{yaml}"
    );
    let gaie = exported.join("gaie-values.yaml");
    let values = std::fs::read_to_string(&gaie).unwrap();
    assert!(values.contains("epp-always-pd.yaml"), "{values}");
    for escape in ["../escaped.yaml", "/tmp/pdsim-import-escaped.yaml"] {
        std::fs::write(&gaie, values.replace("epp-always-pd.yaml", escape)).unwrap();
        let out = dir.join("imported-escape");
        let (code, _, err) = pdsim(&[
            "import",
            "--scenario",
            "scenarios/4x8-h200.yaml",
            exported.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, 1, "{escape}: {err}");
        assert!(
            err.contains("gaie-values.yaml: inferenceExtension.pluginsConfigFile")
                && err.contains("is not a ConfigMap key"),
            "{err}"
        );
        assert!(!out.exists());
    }
    assert!(!dir.join("escaped.yaml").exists());
    assert!(!Path::new("/tmp/pdsim-import-escaped.yaml").exists());
}
