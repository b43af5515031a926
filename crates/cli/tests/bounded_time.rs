//! Time and output stay bounded: an arrival too far out is an input error
//! (exit 1, never an invariant failure), and idle simulated time costs
//! neither wall time nor output.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs pdsim from the repository root; returns (exit code, stdout,
/// stderr, wall time).
fn pdsim(args: &[&str]) -> (i32, String, String, Duration) {
    let start = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("the pdsim binary runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        start.elapsed(),
    )
}

fn temp_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("bounded-time");
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// A two-row Mooncake trace whose rows are `gap_ms` apart.
fn two_rows(name: &str, gap_ms: u64) -> PathBuf {
    let path = temp_dir().join(name);
    let text = format!(
        "{{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [1]}}\n\
         {{\"timestamp\": {gap_ms}, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [2]}}\n"
    );
    std::fs::write(&path, text).expect("trace");
    path
}

/// A results folder that does not exist yet (pdsim's own, from an earlier
/// run of this test, is removed).
fn fresh_out(name: &str) -> PathBuf {
    let out = temp_dir().join(name);
    if out.exists() {
        std::fs::remove_dir_all(&out).expect("an earlier run's results");
    }
    out
}

#[test]
fn rows_a_billion_milliseconds_apart_run_at_once_with_a_few_rows() {
    // 10^9 ms is about 11.6 simulated days.
    let trace = two_rows("gap-1e9.jsonl", 1_000_000_000);
    let out = fresh_out("gap-1e9");
    let (code, stdout, stderr, wall) = pdsim(&[
        "run",
        "--trace",
        trace.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // Seconds, not the hours walking 10^6 simulated seconds would take
    // (a debug build on a busy machine included).
    assert!(wall < Duration::from_secs(20), "{wall:?}");
    let series = std::fs::read_to_string(out.join("timeseries.csv")).unwrap();
    // Eight engine cores, a few seconds around each request.
    let rows = series.lines().count() - 1;
    assert!(rows <= 8 * 6, "{rows} rows:\n{series}");
    let last: u64 = series
        .lines()
        .last()
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(last >= 1_000_000, "the second request is sampled: {last}");
}

#[test]
fn rows_too_far_apart_are_an_input_error_naming_the_line() {
    // 10^12 ms is about 31.7 years, past the one-year horizon.
    let trace = two_rows("gap-1e12.jsonl", 1_000_000_000_000);
    let out = fresh_out("gap-1e12");
    let (code, stdout, stderr, _) = pdsim(&[
        "run",
        "--trace",
        trace.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("gap-1e12.jsonl:2: timestamp:"), "{stderr}");
    assert!(!out.exists(), "no results are written");
}

#[test]
fn a_rate_too_low_for_its_requests_is_refused_not_an_invariant() {
    let out = fresh_out("rate-1e-300");
    let (code, stdout, stderr, _) = pdsim(&[
        "run",
        "--scenario",
        "scenarios/4x8-h200.yaml",
        "--deployment",
        "deployments/colocated-tp8.yaml",
        "--rate",
        "1e-300",
        "--requests",
        "5",
        "--out",
        out.to_str().unwrap(),
    ]);
    // An input error (1), or a usage error (2) should the command line
    // refuse such a rate before the run; never an invariant (3).
    assert!(code == 1 || code == 2, "exit {code}: {stdout}{stderr}");
    assert!(stderr.contains("rate"), "{stderr}");
    assert!(stderr.len() < 600, "{stderr}");
}

#[test]
fn a_low_rate_runs_with_output_bounded_by_the_work() {
    // 10^-4 requests per second: 20 requests over about two simulated days.
    let out = fresh_out("rate-1e-4");
    let (code, stdout, stderr, wall) = pdsim(&[
        "run",
        "--scenario",
        "scenarios/4x8-h200.yaml",
        "--deployment",
        "deployments/1p3d-ep8.yaml",
        "--rate",
        "1e-4",
        "--requests",
        "20",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(wall < Duration::from_secs(60), "{wall:?}");
    for (file, most_bytes) in [("timeseries.csv", 400_000), ("links.csv", 20_000)] {
        let bytes = std::fs::metadata(out.join(file)).unwrap().len();
        assert!(bytes < most_bytes, "{file}: {bytes} bytes");
    }
}
