//! `pdsim calibrate` on measured runs the test writes itself: two small
//! inference-perf runs of Llama-2-7B on one H100 whose "measurements" are
//! pdsim's own figures under known coefficients. Calibrating on them must
//! write the set, recover those coefficients, give the same bytes twice
//! (whatever `--jobs`), and `pdsim run --catalog` with a scenario naming the
//! set must give exactly the figures calibrate reports after the fit.
//! Needs nothing outside the repository.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pdsim(args: &[&str]) -> (i32, String, String) {
    pdsim_testkit::run_pdsim(env!("CARGO_BIN_EXE_pdsim"), &root(), args)
}

fn fresh(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const SCENARIO: &str = "scenarios/real-runs/llama-2-7b-tp1-h100.yaml";
const DEPLOYMENT: &str = "deployments/real-runs/llama-2-7b-tp1.yaml";
const SET: &str = "calibrated-llama-2-7b-h100-tp1";

/// The bundled scenario with `set` named last in its coefficient sets.
fn scenario_naming(dir: &Path, set: &str) -> PathBuf {
    let text = std::fs::read_to_string(root().join(SCENARIO)).unwrap();
    let needle = "  - cost-model-host-overheads\n";
    assert!(text.contains(needle), "the bundled scenario names its set");
    let path = dir.join(format!("scenario-{set}.yaml"));
    std::fs::write(&path, text.replace(needle, &format!("{needle}  - {set}\n"))).unwrap();
    path
}

/// The known coefficients the synthetic measurements are made with.
const TRUE_ADMISSION_US: f64 = 1.2;
const TRUE_DERATE: f64 = 0.65;

fn truth_catalog(dir: &Path) -> PathBuf {
    let catalog = dir.join("truth");
    std::fs::create_dir_all(catalog.join("coefficients")).unwrap();
    let entry = |name: &str, value: f64, units: &str| {
        format!(
            "  - {name}:\n      value: {value}\n      units: {units}\n      method: measured\n      fitted: false\n      scope: {{model: [llama-2-7b]}}\n"
        )
    };
    std::fs::write(
        catalog.join("coefficients/truth.yaml"),
        format!(
            "kind: CoefficientSet\nname: truth\ncoefficients:\n{}{}",
            entry(
                "host_admission_per_token",
                TRUE_ADMISSION_US,
                "us_per_token"
            ),
            entry("hbm_derate", TRUE_DERATE, "dimensionless"),
        ),
    )
    .unwrap();
    catalog
}

/// A run folder: exp-config.yaml, an inference-perf config.yaml, and the
/// lifecycle metrics of pdsim's own replay of it under the true set.
fn synthetic_run(dir: &Path, name: &str, question_len: u32, rate: f64) -> PathBuf {
    let run = dir.join(name);
    std::fs::create_dir_all(run.join("results")).unwrap();
    std::fs::write(
        run.join("exp-config.yaml"),
        "model: meta-llama/Llama-2-7b-hf\ntensor_parallelism: 1\nmax_model_len: 4096\nmax_num_batched_tokens: 2048\nmax_num_seqs: 128\napp: inference-perf\n",
    )
    .unwrap();
    let config = run.join("results/config.yaml");
    std::fs::write(
        &config,
        format!(
            "api:\n  type: completion\n  streaming: true\ndata:\n  type: shared_prefix\n  shared_prefix:\n    num_groups: 2\n    num_prompts_per_group: 3\n    system_prompt_len: 100\n    question_len: {question_len}\n    output_len: 24\nload:\n  type: constant\n  interval: 1.0\n  stages:\n  - rate: {rate}\n    duration: 8\n  request_timeout: null\nserver:\n  type: vllm\n  model_name: meta-llama/Llama-2-7b-hf\n  base_url: http://localhost:8000\n  ignore_eos: true\ntokenizer:\n  pretrained_model_name_or_path: meta-llama/Llama-2-7b-hf\n"
        ),
    )
    .unwrap();
    let truth = truth_catalog(dir);
    let scenario = scenario_naming(dir, "truth");
    let out = dir.join(format!("{name}-truth-run"));
    let (code, stdout, stderr) = pdsim(&[
        "run",
        "--catalog",
        truth.to_str().unwrap(),
        "--scenario",
        scenario.to_str().unwrap(),
        "--deployment",
        DEPLOYMENT,
        "--trace",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let s: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let sec = |metric: &str, stat: &str| s[metric][stat].as_f64().unwrap() / 1000.0;
    let metrics = serde_json::json!({
        "load_summary": {"count": s["requests"]["total"]},
        "successes": {
            "count": s["requests"]["completed"],
            "latency": {
                "time_to_first_token": {"mean": sec("ttft_ms", "mean"), "p90": sec("ttft_ms", "p90")},
                "request_latency": {"mean": sec("e2e_ms", "mean"), "p90": sec("e2e_ms", "p90")},
            },
        },
        "failures": {"count": 0},
    });
    std::fs::write(
        run.join("results/summary_lifecycle_metrics.json"),
        serde_json::to_string_pretty(&metrics).unwrap(),
    )
    .unwrap();
    std::fs::remove_dir_all(&out).unwrap();
    run
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The value of `name` in a written set.
fn value_in(set: &str, name: &str) -> f64 {
    let doc: serde_yaml::Value = serde_yaml::from_str(set).unwrap();
    doc["coefficients"]
        .as_sequence()
        .unwrap()
        .iter()
        .find_map(|e| e.get(name))
        .unwrap_or_else(|| panic!("{name} is in the set"))["value"]
        .as_f64()
        .unwrap()
}

#[test]
fn calibrate_recovers_known_coefficients_deterministically_and_run_uses_the_set() {
    let dir = fresh("calibrate-recovery");
    let a = synthetic_run(&dir, "run-a-short", 300, 3.0);
    let b = synthetic_run(&dir, "run-b-long", 3500, 2.0);
    let cal = dir.join("cal");
    let args = |out: &Path, jobs: &str| -> Vec<String> {
        vec![
            "calibrate".into(),
            "--out".into(),
            out.display().to_string(),
            "--fit".into(),
            "host_admission_per_token,hbm_derate".into(),
            "--iterations".into(),
            "40".into(),
            "--jobs".into(),
            jobs.into(),
            a.display().to_string(),
            b.display().to_string(),
        ]
    };
    let first = args(&cal, "2");
    let (code, stdout, stderr) = pdsim(&first.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("run-a-short") && stdout.contains("before ms (error)"));
    let set_path = cal.join(format!("coefficients/{SET}.yaml"));
    let set = read(&set_path);
    assert!(set.contains("method: measured") && set.contains("fitted: true"));
    let doc: serde_yaml::Value = serde_yaml::from_str(&set).unwrap();
    assert!(
        doc["coefficients"].as_sequence().unwrap().iter().all(|e| e
            .as_mapping()
            .unwrap()
            .values()
            .all(|c| c.get("ci95").is_none())),
        "no interval is claimed"
    );
    let admission = value_in(&set, "host_admission_per_token");
    let derate = value_in(&set, "hbm_derate");
    assert!(
        (admission / TRUE_ADMISSION_US - 1.0).abs() < 0.05,
        "host_admission_per_token {admission} against {TRUE_ADMISSION_US}\n{stdout}"
    );
    assert!(
        (derate / TRUE_DERATE - 1.0).abs() < 0.02,
        "hbm_derate {derate} against {TRUE_DERATE}\n{stdout}"
    );
    let report: serde_json::Value = serde_json::from_str(&read(&cal.join("calibration.json")))
        .expect("calibration.json is JSON");
    let before = report["sets"][0]["objective_before"].as_f64().unwrap();
    let after = report["sets"][0]["objective_after"].as_f64().unwrap();
    assert!(before > 0.03, "the start is off the truth: {before}");
    assert!(after < 0.005, "the fit reaches the truth: {after}");

    // Same inputs, other --jobs: the same bytes.
    let again = dir.join("cal-again");
    let second = args(&again, "1");
    let (code, _, stderr) = pdsim(&second.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{stderr}");
    for file in [
        format!("coefficients/{SET}.yaml"),
        "calibration.json".into(),
    ] {
        assert_eq!(
            read(&cal.join(&file)),
            read(&again.join(&file)),
            "{file} differs between two calibrations"
        );
    }
    // The same command replaces its own earlier result.
    let (code, _, stderr) = pdsim(&second.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code, 0, "{stderr}");

    // `run --catalog` with a scenario naming the set gives the figures
    // calibrate reported after the fit, and they differ from the pair's own.
    let scenario = scenario_naming(&dir, SET);
    let run_out = dir.join("run-with-set");
    let (code, stdout, stderr) = pdsim(&[
        "run",
        "--catalog",
        cal.to_str().unwrap(),
        "--scenario",
        scenario.to_str().unwrap(),
        "--deployment",
        DEPLOYMENT,
        "--trace",
        b.join("results/config.yaml").to_str().unwrap(),
        "--out",
        run_out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let s: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let entry = report["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["run"] == "run-b-long")
        .unwrap();
    for (summary_key, report_key) in [("ttft_ms", "ttft_mean_ms"), ("e2e_ms", "e2e_mean_ms")] {
        let ran = s[summary_key]["mean"].as_f64().unwrap();
        assert_eq!(ran, entry["after"][report_key].as_f64().unwrap());
        assert_ne!(ran, entry["before"][report_key].as_f64().unwrap());
    }
    // Without the set the run is the pair's own (the set was picked up).
    let plain_out = dir.join("run-without-set");
    let (code, stdout, stderr) = pdsim(&[
        "run",
        "--scenario",
        SCENARIO,
        "--deployment",
        DEPLOYMENT,
        "--trace",
        b.join("results/config.yaml").to_str().unwrap(),
        "--out",
        plain_out.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let plain: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        plain["ttft_ms"]["mean"].as_f64().unwrap(),
        entry["before"]["ttft_mean_ms"].as_f64().unwrap()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn calibrate_refuses_bad_input_by_name() {
    let dir = fresh("calibrate-refusals");
    let (code, _, stderr) = pdsim(&[
        "calibrate",
        "--out",
        dir.join("o").to_str().unwrap(),
        dir.join("missing").to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("missing"), "{stderr}");

    let run = dir.join("run");
    std::fs::create_dir_all(run.join("results")).unwrap();
    std::fs::write(
        run.join("exp-config.yaml"),
        "model: meta-llama/Llama-2-7b-hf\ntensor_parallelism: 1\ngpu_memory_utilization: 0.8\n",
    )
    .unwrap();
    std::fs::write(run.join("results/config.yaml"), "api: {}\n").unwrap();
    std::fs::write(run.join("results/summary_lifecycle_metrics.json"), "{}").unwrap();
    let (code, _, stderr) = pdsim(&[
        "calibrate",
        "--out",
        dir.join("o").to_str().unwrap(),
        run.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("gpu_memory_utilization") && stderr.contains("exp-config.yaml"),
        "{stderr}"
    );

    let (code, _, stderr) = pdsim(&[
        "calibrate",
        "--out",
        dir.join("o").to_str().unwrap(),
        "--fit",
        "host_tokenizer_batch_wait",
        run.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("host_tokenizer_batch_wait"), "{stderr}");

    // A folder pdsim did not write is not replaced.
    let foreign = dir.join("foreign");
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join("notes.txt"), "mine").unwrap();
    let (code, _, stderr) = pdsim(&[
        "calibrate",
        "--out",
        foreign.to_str().unwrap(),
        run.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(read(&foreign.join("notes.txt")), "mine");
    assert!(!dir.join("o").exists(), "nothing is written on a refusal");
    let _ = std::fs::remove_dir_all(&dir);
}
