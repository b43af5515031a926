//! The inference-perf configurations of the 12 inference-sim training runs
//! (`../shared/reference/inference-sim/real-runs-training/default_args/`),
//! read as their own files say.
//!
//! The shared data lives outside the repository: it is found through
//! `PDSIM_SHARED` only; without it each test says on the terminal that it
//! skipped (`pdsim_testkit::shared`), and under CI it fails.

use pdsim_workload::{InferencePerf, RequestSpec, TurnClient};
use std::collections::BTreeSet;
use std::path::PathBuf;

fn runs_dir() -> Option<PathBuf> {
    let tail = "reference/inference-sim/real-runs-training/default_args";
    let shared = pdsim_testkit::shared(
        "inference_perf_runs",
        "the training runs' inference-perf configurations",
    )?;
    let dir = shared.join(tail);
    assert!(dir.is_dir(), "{} is missing", dir.display());
    Some(dir)
}

fn runs(dir: &PathBuf) -> Vec<PathBuf> {
    let mut runs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("results/config.yaml").is_file())
        .collect();
    runs.sort();
    runs
}

/// The stages as the expanded config writes them, read independently of
/// the reader: `- rate: R` then `duration: D` lines.
fn stages_in(text: &str) -> Vec<(f64, u64)> {
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
fn every_expanded_config_replays_with_its_stage_counts() {
    let Some(dir) = runs_dir() else { return };
    let runs = runs(&dir);
    assert_eq!(runs.len(), 12, "{}", dir.display());
    for run in &runs {
        let path = run.join("results/config.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.display().to_string();
        let reader = InferencePerf::new(&text, &name, 42).unwrap_or_else(|e| panic!("{e}"));
        let expected = stages_in(&text);
        assert!(!expected.is_empty(), "{name}");
        let planned: Vec<u64> = reader.stages().iter().map(|s| s.requests).collect();
        let wanted: Vec<u64> = expected
            .iter()
            .map(|(r, d)| (r * *d as f64) as u64)
            .collect();
        assert_eq!(planned, wanted, "{name}");
        // The client timeout is null in these runs: aiohttp's 300 s.
        assert_eq!(reader.client_timeout_s(), 300.0, "{name}");
        // num_workers 224 × 100 in flight never binds at these rates: no
        // note about the client's concurrency cap.
        assert!(
            !reader.notes().iter().any(|n| n.contains("in flight")),
            "{name}"
        );
        let stages = reader.stages().to_vec();
        let specs: Vec<RequestSpec> = reader.map(|r| r.unwrap()).collect();
        assert_eq!(specs.len() as u64, wanted.iter().sum::<u64>(), "{name}");
        // 10 groups of 10 (the defaults the build fell back to), single
        // turn: every prompt is system + question tokens, never growing.
        let groups: BTreeSet<u64> = specs.iter().map(|s| s.prompt.segments[0].id).collect();
        let prompts: BTreeSet<(u64, u64)> = specs
            .iter()
            .map(|s| (s.prompt.segments[0].id, s.prompt.segments[1].id))
            .collect();
        assert_eq!((groups.len(), prompts.len()), (10, 100), "{name}");
        let first = specs[0].prompt.tokens();
        assert!(specs.iter().all(|s| s.prompt.tokens() == first), "{name}");
        // Each stage's requests lie in its own time window.
        for pair in stages.windows(2) {
            let last = &specs[(pair[0].first_request + pair[0].requests - 2) as usize];
            let next = &specs[(pair[1].first_request - 1) as usize];
            assert!(next.arrival > last.arrival, "{name}");
        }
    }
}

/// The profiles ask for multi-turn chat under the v0.4.0 names, which the
/// build that ran did not know; read as the releases that know them, each
/// is `num_unique_system_prompts × num_users_per_system_prompt` user
/// sessions, every request a turn of one, request n of a stage a turn of
/// session n mod that count.
#[test]
fn the_profiles_multi_turn_chat_makes_one_session_per_user() {
    let Some(dir) = runs_dir() else { return };
    for run in runs(&dir) {
        let path = run.join("profile.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.display().to_string();
        // The profile's own numbers, read without the reader.
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let sp = &json["data"]["shared_prefix"];
        assert_eq!(sp["enable_multi_turn_chat"], true, "{name}");
        let users = sp["num_unique_system_prompts"].as_u64().unwrap()
            * sp["num_users_per_system_prompt"].as_u64().unwrap();
        let reader = InferencePerf::new(&text, &name, 0).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            reader
                .notes()
                .iter()
                .any(|n| n.contains("enable_multi_turn_chat is replayed")),
            "{name}"
        );
        let stages = reader.stages().to_vec();
        let specs: Vec<RequestSpec> = reader.map(|r| r.unwrap()).collect();
        let keys: Vec<u64> = specs
            .iter()
            .map(|s| {
                let turn = s.session.expect("every request is a turn");
                assert_eq!(turn.client, TurnClient::InferencePerf, "{name}");
                turn.key
            })
            .collect();
        assert_eq!(
            keys.iter().collect::<BTreeSet<_>>().len() as u64,
            users,
            "{name}"
        );
        for stage in &stages {
            let first = (stage.first_request - 1) as usize;
            for n in 0..stage.requests as usize {
                assert_eq!(
                    keys[first + n],
                    keys[first + n % users as usize],
                    "{name}: request {n} of stage {}",
                    stage.index
                );
            }
        }
    }
}
