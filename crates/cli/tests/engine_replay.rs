//! `pdsim engine replay` on bad input: a clear message naming the file (and
//! the line of a workload), exit 1 for invalid input and 2 for a missing
//! file or one that is not a regular file, never a panic, a hang or a
//! partial result.

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

/// Neither input is read without bound: `/dev/zero` (which never ends) and
/// a FIFO no one writes to (whose opening blocks) are refused before they
/// are opened, as `pdsim run` refuses them, exit 2, naming the path.
#[test]
fn a_device_or_a_fifo_is_refused_without_reading_it() {
    let d = dir("special");
    let config = d.join("config.json");
    let workload = d.join("workload.jsonl");
    std::fs::write(&config, CONFIG).unwrap();
    std::fs::write(
        &workload,
        "{\"id\":0,\"arrive_step\":0,\"prompt\":[1],\"max_tokens\":1}\n",
    )
    .unwrap();
    let fifo = d.join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    let fifo_made = made.is_ok_and(|s| s.success());
    let mut cases = vec![
        (PathBuf::from("/dev/zero"), workload.clone(), "/dev/zero"),
        (config.clone(), PathBuf::from("/dev/zero"), "/dev/zero"),
    ];
    if fifo_made {
        cases.push((config.clone(), fifo.clone(), "fifo"));
        cases.push((fifo.clone(), workload.clone(), "fifo"));
    } else {
        pdsim_testkit::skipped(
            "a_device_or_a_fifo_is_refused_without_reading_it",
            "its FIFO cases",
            "the `mkfifo` command is not available",
        );
    }
    for (c, w, named) in cases {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pdsim"))
            .args(["engine", "replay"])
            .arg(&c)
            .arg(&w)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run pdsim");
        // A read without bound would grow for ever and a FIFO would block:
        // either is a failure here, not a hang of the test.
        let start = std::time::Instant::now();
        while child.try_wait().unwrap().is_none() {
            if start.elapsed() > std::time::Duration::from_secs(20) {
                let _ = child.kill();
                panic!("{c:?} {w:?}: still running after 20 s");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{c:?} {w:?}: {err}");
        assert!(out.stdout.is_empty());
        assert!(
            err.contains(named) && err.contains("not a regular file"),
            "{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&d);
}

/// A request that can never finish is bad input, found before the first
/// step: exit 1 with its line and why, nothing on stdout, never the
/// engine's invariant (exit 3) after 100,000 lines.
#[test]
fn a_request_that_can_never_finish_is_invalid_input_found_before_any_step() {
    let prompt: Vec<String> = (1..=4000).map(|t| t.to_string()).collect();
    let small = CONFIG
        .replace("\"num_gpu_blocks\":101", "\"num_gpu_blocks\":32")
        .replace("\"max_model_len\":2048", "\"max_model_len\":16384");
    for (config, row, why) in [
        (
            small.as_str(),
            format!(
                "{{\"id\":5,\"arrive_step\":0,\"prompt\":[{}],\"max_tokens\":4000}}",
                prompt.join(",")
            ),
            "workload.jsonl:2: request 5: its prompt of 4000 tokens and up to 4000 output tokens need at least 500 KV blocks",
        ),
        (
            small.as_str(),
            "{\"id\":5,\"arrive_step\":0,\"prompt\":[1,2,3],\"max_tokens\":4294967295}".to_string(),
            "workload.jsonl:2: request 5: its prompt of 3 tokens and up to 16381 output tokens",
        ),
        (
            CONFIG,
            "{\"id\":5,\"arrive_step\":1000000000000,\"prompt\":[1],\"max_tokens\":1}".to_string(),
            "workload.jsonl:2: `arrive_step` 1000000000000 is at or past the replay's cap of 100000 steps",
        ),
        (
            CONFIG,
            "{\"id\":5,\"arrive_step\":0,\"prompt\":[1],\"max_tokens\":0}".to_string(),
            "workload.jsonl:2: `max_tokens` is 0",
        ),
    ] {
        let workload =
            format!("{{\"id\":0,\"arrive_step\":0,\"prompt\":[1],\"max_tokens\":1}}\n{row}\n");
        let (code, out, err) = replay(config, &workload, "never");
        assert_eq!(code, 1, "{why}: {err}");
        assert!(out.is_empty(), "{why}: {} bytes printed", out.len());
        assert!(err.contains(why), "{why}: {err}");
    }
    let (code, out, err) = replay(CONFIG, "\n", "empty");
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty());
    assert!(
        err.contains("workload.jsonl: the workload holds no request"),
        "{err}"
    );
}

/// A golden case on which vLLM 0.29.0's scheduler spins (it prints the
/// same 400 steps, `max_steps`): without the bound the replay runs to its
/// cap and says the engine spins, exit 1, rather than report a broken
/// invariant; with it, the 400 steps are vLLM's.
#[test]
fn a_spinning_engine_is_reported_as_spinning() {
    let case = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../engine/tests/golden/0.29.0/spin-007/"
    );
    let config = std::fs::read_to_string(format!("{case}config.json")).expect("golden config");
    let workload =
        std::fs::read_to_string(format!("{case}workload.jsonl")).expect("golden workload");
    let vllm = std::fs::read_to_string(format!("{case}vllm.jsonl")).expect("golden trace");
    let (code, out, err) = replay(&config, &workload, "spin-bounded");
    assert_eq!((code, out.as_str()), (0, vllm.as_str()), "{err}");
    let unbounded = config.replace(", \"max_steps\": 400", "");
    assert_ne!(unbounded, config, "the golden config bounds the steps");
    let (code, out, err) = replay(&unbounded, &workload, "spin");
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("not drained after 100000 steps: the engine spins, preempted"),
        "{err}"
    );
    assert_eq!(out.lines().count(), 100_000);
}
