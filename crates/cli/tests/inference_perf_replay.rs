//! A real run's inference-perf configuration replayed end to end from its
//! own files: the inference-sim training run
//! `20260217-155451-llama-2-7b-tp1-codegen` (vLLM on one H100, Llama-2-7B,
//! two constant-rate stages of 600 s at 5 and 10 requests per second).
//!
//! The scenario and deployment are written from the run's `exp-config.yaml`
//! (model, tensor parallelism, max_model_len, max_num_batched_tokens,
//! max_num_seqs) and the requests come from its expanded
//! `results/config.yaml` through `pdsim run --trace`. The per-stage request
//! counts pdsim sends must be int(rate × duration), as inference-perf
//! sends them, and equal the counts the run measured in its
//! `results/stage_N_lifecycle_metrics.json`; `summary.json`, the text
//! summary and the report must carry the per-stage results.
//!
//! The run's files live in the shared data outside the repository, found
//! through `PDSIM_SHARED` only; without it the tests say on the terminal
//! that they skipped (`pdsim_testkit::shared`), and under CI they fail.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const RUN: &str = "20260217-155451-llama-2-7b-tp1-codegen";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn run_dir() -> Option<PathBuf> {
    let tail = Path::new("reference/inference-sim/real-runs-training/default_args").join(RUN);
    let shared = pdsim_testkit::shared("inference_perf_replay", "a training run's own files")?;
    let dir = shared.join(&tail);
    assert!(dir.is_dir(), "{} is missing", dir.display());
    Some(dir)
}

fn pdsim(args: &[&str]) -> (i32, String, String) {
    pdsim_testkit::run_pdsim(env!("CARGO_BIN_EXE_pdsim"), &root(), args)
}

/// `key: value` lines of the run's flat `exp-config.yaml`.
fn exp_config(run: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(run.join("exp-config.yaml"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// The catalog id of a Hugging Face model name: its last part, lower case,
/// without the `-hf` suffix (`meta-llama/Llama-2-7b-hf` → `llama-2-7b`).
fn catalog_model(name: &str) -> String {
    let last = name.rsplit('/').next().unwrap().to_ascii_lowercase();
    last.strip_suffix("-hf").unwrap_or(&last).to_string()
}

/// Writes the scenario and deployment of the run into `dir`.
fn documents(run: &Path, dir: &Path) -> (PathBuf, PathBuf) {
    let exp = exp_config(run);
    let get = |k: &str| {
        exp.get(k)
            .unwrap_or_else(|| panic!("exp-config.yaml has no {k}"))
    };
    let model = catalog_model(get("model"));
    assert!(
        root()
            .join(format!("crates/spec/catalog/models/{model}.yaml"))
            .is_file(),
        "the built-in catalog has no {model}"
    );
    let tp: u32 = get("tensor_parallelism").parse().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let scenario = dir.join("scenario.yaml");
    std::fs::write(
        &scenario,
        format!(
            "kind: Scenario\nname: {RUN}\nmodel: {model}\ncoefficients:\n  - cost-model-host-overheads\n\
             engine_version: \"0.31.0\"\ncluster:\n  hardware: h100\n  nodes: 1\n  gpus_per_node: {tp}\n"
        ),
    )
    .unwrap();
    let deployment = dir.join("deployment.yaml");
    std::fs::write(
        &deployment,
        format!(
            "kind: Deployment\nname: {model}-tp{tp}\npools:\n  - role: colocated\n    nodes: 1\n\
             \x20   parallel:\n      tp: {tp}\n      pp: 1\n      dp: 1\n    engine:\n\
             \x20     max_model_len: {}\n      max_num_batched_tokens: {}\n      max_num_seqs: {}\n",
            get("max_model_len"),
            get("max_num_batched_tokens"),
            get("max_num_seqs"),
        ),
    )
    .unwrap();
    (scenario, deployment)
}

/// The stages of the expanded config, read apart from pdsim's reader:
/// `- rate: R` then `duration: D`.
fn configured_stages(text: &str) -> Vec<(f64, u64)> {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .filter_map(|w| {
            let rate = w[0].trim().strip_prefix("- rate: ")?.parse().ok()?;
            let duration = w[1].trim().strip_prefix("duration: ")?.parse().ok()?;
            Some((rate, duration))
        })
        .collect()
}

#[test]
fn a_real_runs_inference_perf_config_replays_with_per_stage_results() {
    let Some(run) = run_dir() else { return };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("inference-perf-replay");
    let _ = std::fs::remove_dir_all(&dir);
    let (scenario, deployment) = documents(&run, &dir.join("docs"));
    let config = run.join("results/config.yaml");
    let out = dir.join("out");
    let (code, stdout, stderr) = pdsim(&[
        "run",
        "--scenario",
        scenario.to_str().unwrap(),
        "--deployment",
        deployment.to_str().unwrap(),
        "--trace",
        config.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // What the replay approximates is said, not hidden.
    assert!(
        stderr.contains("note: prompts are the configured token counts"),
        "{stderr}"
    );

    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let stages = summary["stages"]
        .as_array()
        .expect("summary.json has stages");
    let configured = configured_stages(&std::fs::read_to_string(&config).unwrap());
    assert_eq!(configured, [(5.0, 600), (10.0, 600)]);
    assert_eq!(stages.len(), configured.len());
    let mut total = 0;
    for (i, ((rate, duration), stage)) in configured.iter().zip(stages).enumerate() {
        // inference-perf sends int(rate × duration) requests per stage …
        let sent = (rate * *duration as f64) as u64;
        assert_eq!(stage["index"], i as u64);
        assert_eq!(stage["requests_sent"], sent, "stage {i}");
        // … which is what the run measured …
        let measured: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(run.join(format!("results/stage_{i}_lifecycle_metrics.json")))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(measured["load_summary"]["count"], sent, "stage {i}");
        // … and every one of them ended in its stage.
        let count = stage["count"].as_u64().unwrap();
        let ended = ["completed", "rejected", "aborted"]
            .iter()
            .map(|k| stage[k].as_u64().unwrap())
            .sum::<u64>();
        assert_eq!((count, ended), (sent, sent), "stage {i}");
        let completed = stage["completed"].as_u64().unwrap();
        for metric in ["ttft_ms", "itl_ms", "e2e_ms"] {
            let l = &stage[metric];
            for q in ["mean", "p50", "p90", "p99"] {
                assert!(l[q].as_f64().unwrap() > 0.0, "stage {i} {metric} {q}");
            }
            assert!(
                l["p50"].as_f64() <= l["p90"].as_f64() && l["p90"].as_f64() <= l["p99"].as_f64()
            );
        }
        assert_eq!(stage["ttft_ms"]["count"], completed);
        // Throughput over the stage's own span is near its rate when
        // everything completes.
        if completed == sent {
            let r = stage["requests_per_s"].as_f64().unwrap();
            assert!((r - rate).abs() / rate < 0.02, "stage {i}: {r} req/s");
        }
        total += sent;
    }
    assert_eq!(summary["requests"]["total"], total);
    // The stages' requests arrive in their own windows: stage 0 ends at
    // 600 s exactly; stage 1 starts after the 1 s poll, the 1 s interval
    // and the 1 s lead, and ends 600 s later.
    let csv = std::fs::read_to_string(out.join("requests.csv")).unwrap();
    let mut arrivals: BTreeMap<u64, f64> = BTreeMap::new();
    for row in csv.lines().skip(1) {
        let f: Vec<&str> = row.split(',').collect();
        arrivals.insert(f[1].parse().unwrap(), f[3].parse().unwrap());
    }
    assert_eq!(arrivals.len() as u64, total);
    let at = |line: u64| arrivals[&line] / 1000.0;
    assert!((at(3000) - 600.0).abs() < 1e-3, "{}", at(3000));
    assert!(at(3001) > 603.0 && at(3001) < 604.0, "{}", at(3001));
    assert!((at(9000) - 1203.0).abs() < 1e-3, "{}", at(9000));
    // The text summary and the report show the stages too.
    assert!(
        stdout.contains("stage 0: 5 req/s for 600 s: 3000 sent"),
        "{stdout}"
    );
    assert!(
        stdout.contains("stage 1: 10 req/s for 600 s: 6000 sent"),
        "{stdout}"
    );
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("## Load stages"), "{report}");
    assert!(report.contains("| 1 | 10 | 600 | 6000 |"), "{report}");
}

/// The run's `profile.yaml` asks for multi-turn chat, which its own
/// inference-perf build did not know; pdsim replays it as the later
/// releases that know it send it, and says so. 11 × 4 = 44 user sessions;
/// turn k of a session is 100 + 466 tokens of its first text plus (k − 1)
/// earlier questions and answers of 466 + 247: turn 5 is 3,418 tokens, and
/// turn 6, 4,131, reaches Llama-2's 4,096-token context, so vLLM refuses it
/// and every later turn, which only grows (a refused turn's prompt joins
/// the context). So exactly 44 × 5 = 220 turns complete.
#[test]
fn the_runs_profile_replays_its_multi_turn_chat_closed_loop() {
    let Some(run) = run_dir() else { return };
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("inference-perf-profile");
    let (scenario, deployment) = documents(&run, &dir);
    let profile = run.join("profile.yaml");
    let out = dir.join("out");
    let _ = std::fs::remove_dir_all(&out);
    let (code, stdout, stderr) = pdsim(&[
        "run",
        "--scenario",
        scenario.to_str().unwrap(),
        "--deployment",
        deployment.to_str().unwrap(),
        "--trace",
        profile.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stderr.contains("note: enable_multi_turn_chat is replayed as inference-perf v0.3.0"),
        "{stderr}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["requests"]["total"], 9000, "{summary}");
    assert_eq!(summary["requests"]["completed"], 220, "{summary}");
    assert_eq!(
        summary["requests"]["not_completed_by_reason"]["rejected:prompt-exceeds-max-model-len"],
        8780,
        "{summary}"
    );
    assert_eq!(summary["sessions"]["turns_sent"], 9000 - 44, "{summary}");
    assert_eq!(summary["sessions"]["turns_not_sent"], 0, "{summary}");
}

#[test]
fn a_run_without_stages_has_no_stages_in_its_summary() {
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("no-stages");
    let _ = std::fs::remove_dir_all(&out);
    let (code, stdout, stderr) = pdsim(&["run", "--out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let summary = std::fs::read_to_string(out.join("summary.json")).unwrap();
    assert!(!summary.contains("\"stages\""));
    assert!(!stdout.contains("stage 0"));
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(!report.contains("Load stages"));
}
