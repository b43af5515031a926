//! The bundled documents for the inference-sim real runs
//! (`scenarios/real-runs/`, `deployments/real-runs/`): each pair validates on
//! vLLM 0.15.1 and resolves to the runs' engine settings, and, with
//! `PDSIM_SHARED` set, every one of the 12 runs' `exp-config.yaml` maps to a
//! pair that states its own model, tensor parallelism and scheduler limits.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// (exp-config.yaml `model`, tensor_parallelism, catalog model, file stem).
const PAIRS: &[(&str, u64, &str, &str)] = &[
    (
        "meta-llama/Llama-2-7b-hf",
        1,
        "llama-2-7b",
        "llama-2-7b-tp1",
    ),
    (
        "meta-llama/Llama-2-70b-hf",
        4,
        "llama-2-70b",
        "llama-2-70b-tp4",
    ),
    (
        "mistralai/Mixtral-8x7B-v0.1",
        2,
        "mixtral-8x7b",
        "mixtral-8x7b-tp2",
    ),
    (
        "codellama/CodeLlama-34b-Instruct-hf",
        2,
        "codellama-34b-instruct",
        "codellama-34b-instruct-tp2",
    ),
];

fn files(stem: &str) -> (String, String) {
    (
        format!("scenarios/real-runs/{stem}-h100.yaml"),
        format!("deployments/real-runs/{stem}.yaml"),
    )
}

/// `pdsim validate --resolve --format json` on one pair.
fn resolve(stem: &str) -> serde_json::Value {
    let (scenario, deployment) = files(stem);
    let output = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args([
            "validate",
            "--resolve",
            "--format",
            "json",
            "--scenario",
            &scenario,
            &deployment,
        ])
        .current_dir(root())
        .output()
        .expect("the pdsim binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stem}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{stem}: {e}: {stdout}"))
}

#[test]
fn every_real_run_pair_validates_on_vllm_0_15_1() {
    for (_, tp, model, stem) in PAIRS {
        let value = resolve(stem);
        assert_eq!(value["problems"], serde_json::json!([]), "{stem}");
        let d = &value["resolution"]["deployments"][0];
        assert_eq!(d["engine_version"], "0.15.1", "{stem}");
        assert_eq!(d["rules_pack"], "vllm-0.15.1", "{stem}");
        assert_eq!(d["model"], *model, "{stem}");
        assert_eq!(d["chip"], "h100", "{stem}");
        let pool = &d["pools"][0];
        assert_eq!(pool["layout"]["tp"], *tp, "{stem}");
        let engine = &pool["engine"];
        assert_eq!(engine["max_num_batched_tokens"], 2048, "{stem}");
        assert_eq!(engine["max_num_seqs"], 128, "{stem}");
        assert_eq!(pool["kv"]["max_model_len"], 4096, "{stem}");
        // vLLM 0.15.1's defaults on these runs: async scheduling on
        // (config/vllm.py), capture sizes up to min(128 × 2, 512) = 256
        // (_set_cudagraph_sizes), graphs outside the KV budget
        // (gpu_worker.py), cascade attention on (config/model.py).
        assert_eq!(engine["async_scheduling"], true, "{stem}");
        let sizes = engine["cudagraph_capture_sizes"].as_array().expect("sizes");
        assert_eq!(sizes.len(), 35, "{stem}");
        assert_eq!(sizes.last(), Some(&serde_json::json!(256)), "{stem}");
        assert_eq!(pool["memory"]["cudagraph_bytes"], 0, "{stem}");
        assert_eq!(engine["cascade_attention"], true, "{stem}");
    }
}

/// Reads one key of a flat `exp-config.yaml`.
fn key<'a>(config: &'a serde_yaml::Value, name: &str, run: &Path) -> &'a serde_yaml::Value {
    config
        .get(name)
        .unwrap_or_else(|| panic!("{}: exp-config.yaml has no `{name}`", run.display()))
}

#[test]
fn every_training_run_has_a_pair_with_its_own_settings() {
    let Some(shared) = pdsim_testkit::shared(
        "every_training_run_has_a_pair_with_its_own_settings",
        "the 12 inference-sim training runs",
    ) else {
        return;
    };
    let runs = shared.join("reference/inference-sim/real-runs-training/default_args");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&runs)
        .unwrap_or_else(|e| panic!("{}: {e}", runs.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("exp-config.yaml").is_file())
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 12, "{}", runs.display());
    for run in &dirs {
        let text = std::fs::read_to_string(run.join("exp-config.yaml")).expect("readable");
        let config: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
        let repo = key(&config, "model", run).as_str().expect("model is text");
        let tp = key(&config, "tensor_parallelism", run)
            .as_u64()
            .expect("tp");
        let (_, _, _, stem) = PAIRS
            .iter()
            .find(|(r, t, _, _)| *r == repo && *t == tp)
            .unwrap_or_else(|| panic!("{}: no pair for {repo} at tp {tp}", run.display()));
        let (_, deployment) = files(stem);
        let text = std::fs::read_to_string(root().join(&deployment)).expect("deployment");
        let doc: serde_yaml::Value = serde_yaml::from_str(&text).expect("YAML");
        let pool = &doc["pools"][0];
        assert_eq!(pool["parallel"]["tp"].as_u64(), Some(tp), "{deployment}");
        for name in ["max_model_len", "max_num_batched_tokens", "max_num_seqs"] {
            assert_eq!(
                pool["engine"][name].as_u64(),
                key(&config, name, run).as_u64(),
                "{}: {name} differs from {deployment}",
                run.display()
            );
        }
    }
}
