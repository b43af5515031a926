//! `pdsim engine replay` on bad input: a clear message naming the file (and
//! the line of a workload), exit 1 for invalid input and 2 for a missing
//! file, never a panic or a partial result.

use std::path::PathBuf;
use std::process::Command;

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pdsim-engine-replay-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

const CONFIG: &str = r#"{"release":"0.31.0","block_size":16,"num_gpu_blocks":101,"max_num_seqs":8,"max_num_batched_tokens":512,"max_model_len":2048,"long_prefill_token_threshold":0,"enable_prefix_caching":true,"scheduling_policy":"fcfs","async_scheduling":false}"#;

fn replay(config: &str, workload: &str, name: &str) -> (i32, String, String) {
    let d = dir(name);
    std::fs::write(d.join("config.json"), config).expect("write");
    std::fs::write(d.join("workload.jsonl"), workload).expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args(["engine", "replay"])
        .arg(d.join("config.json"))
        .arg(d.join("workload.jsonl"))
        .output()
        .expect("run pdsim");
    let _ = std::fs::remove_dir_all(&d);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_small_workload_replays_to_one_line_per_step() {
    let workload = "{\"id\":0,\"arrive_step\":0,\"prompt\":[1,2,3,4,5],\"max_tokens\":3}\n";
    let (code, out, err) = replay(CONFIG, workload, "ok");
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    // tools/vllm-oracle/run prints these three steps for vLLM 0.31.0 too.
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(
        lines[0],
        r#"{"computed":{"0":5},"drafts":{},"finished":[],"free_blocks":99,"preempted":[],"scheduled":{"0":5},"step":0}"#
    );
    assert!(lines[2].contains(r#""finished":[0]"#), "{out}");
}

#[test]
fn an_unknown_config_key_is_invalid_input() {
    let config = CONFIG.replace("\"release\"", "\"relase\":1,\"release\"");
    let (code, out, err) = replay(&config, "", "badkey");
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(
        err.contains("config.json") && err.contains("relase"),
        "{err}"
    );
}

#[test]
fn a_bad_workload_line_names_its_line() {
    let workload = "{\"id\":0,\"arrive_step\":0,\"prompt\":[1],\"max_tokens\":1}\n{\"id\":1,\"arrive_step\":0,\"prompt\":[],\"max_tokens\":1}\n";
    let (code, out, err) = replay(CONFIG, workload, "badline");
    assert_eq!(code, 1);
    assert!(out.is_empty());
    assert!(
        err.contains("workload.jsonl:2") && err.contains("prompt"),
        "{err}"
    );
}

#[test]
fn an_unknown_release_and_a_missing_file_are_refused() {
    let config = CONFIG.replace("0.31.0", "0.1.0");
    let (code, _, err) = replay(&config, "", "release");
    assert_eq!(code, 1);
    assert!(err.contains("release") && err.contains("0.31.0"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args([
            "engine",
            "replay",
            "/nonexistent/config.json",
            "/nonexistent/w.jsonl",
        ])
        .output()
        .expect("run pdsim");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/config.json"));
}
