//! `pdsim compare`, `pdsim plan` and the reports, as users call them:
//! results that do not depend on `--jobs`, plan shards that merge into the
//! whole plan, and snapshots of the tables and `summary.json`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn pdsim(args: &[&str]) -> (i32, String, String) {
    pdsim_testkit::run_pdsim(env!("CARGO_BIN_EXE_pdsim"), &root(), args)
}

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("study")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// The first `n` requests of the bundled trace, as a file.
fn small_trace(n: usize) -> PathBuf {
    let text = std::fs::read_to_string(root().join("traces/default.jsonl")).unwrap();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("study");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("first-{n}.jsonl"));
    let head: Vec<&str> = text.lines().take(n).collect();
    std::fs::write(&path, head.join("\n") + "\n").unwrap();
    path
}

/// Every file under `dir`, by relative path.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(base, &path, out);
            } else {
                let rel = path
                    .strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn assert_same_files(a: &Path, b: &Path) {
    let (x, y) = (files(a), files(b));
    assert_eq!(
        x.keys().collect::<Vec<_>>(),
        y.keys().collect::<Vec<_>>(),
        "the two result folders hold different files"
    );
    for (name, bytes) in &x {
        assert!(bytes == &y[name], "{name} differs");
    }
}

const H200: &str = "scenarios/4x8-h200.yaml";
const LAYOUTS: [&str; 3] = [
    "deployments/1p3d-ep8.yaml",
    "deployments/2p2d-ep8.yaml",
    "deployments/colocated-tp8.yaml",
];

fn compare(out: &Path, jobs: &str, trace: &Path) -> (i32, String, String) {
    let mut args = vec![
        "compare",
        "--scenario",
        H200,
        "--trace",
        trace.to_str().unwrap(),
        "--seeds",
        "2",
        "--slo",
        "ttft_ms=500,itl_ms=40",
        "--gpu-hour-usd",
        "2.5",
        "--jobs",
        jobs,
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(LAYOUTS);
    pdsim(&args)
}

#[test]
fn compare_gives_the_same_bytes_whatever_the_jobs_and_explains_the_winner() {
    let trace = small_trace(200);
    let (a, b) = (tmp("compare-j1"), tmp("compare-j2"));
    let (code, stdout, stderr) = compare(&a, "1", &trace);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let (code, stdout2, stderr) = compare(&b, "2", &trace);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout.replace(&*a.to_string_lossy(), ""),
        stdout2.replace(&*b.to_string_lossy(), "")
    );
    assert_same_files(&a, &b);

    // The table has every deployment, and the deltas against the first.
    for name in ["1p3d-ep8", "2p2d-ep8", "colocated-tp8"] {
        assert!(stdout.contains(name), "{stdout}");
    }
    assert!(stdout.contains("wins on goodput per GPU"), "{stdout}");
    // The others against the winner, in words: `… carries 1.23× as much as
    // 1p3d-ep8` (or nothing carried), each at its TTFT p90.
    let verdict = stdout
        .lines()
        .find(|l| l.contains("wins on"))
        .expect("a verdict line");
    assert_eq!(verdict.matches(" at TTFT p90 ").count(), 3, "{verdict}");
    assert_eq!(
        verdict.matches("× as much as ").count()
            + verdict.matches("where nothing is carried by").count(),
        2,
        "{verdict}"
    );
    assert!(
        stdout.contains("TTFT p99 (ms)") && stdout.contains('%'),
        "{stdout}"
    );
    let report = std::fs::read_to_string(a.join("report.html")).unwrap();
    for needle in [
        "<svg",
        "Verdict",
        "Per-pool utilisation",
        "Where the time goes",
        "ttft_cdf",
        "kv_usage",
    ] {
        assert!(report.contains(needle), "report.html lacks {needle}");
    }
    assert!(!report.contains("<script"), "the report runs no script");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("summary.json")).unwrap()).unwrap();
    let runs = summary["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    assert_eq!(
        runs[0]["summaries"].as_array().unwrap().len(),
        2,
        "one summary per seed"
    );
    // P/D layouts split every request; the colocated one none.
    assert_eq!(runs[0]["summaries"][0]["requests"]["disaggregated"], 200);
    assert_eq!(runs[2]["summaries"][0]["requests"]["disaggregated"], 0);
    assert!(a.join("runs/2p2d-ep8/seed1/requests.csv").exists());
}

#[test]
fn compare_refuses_bad_options_and_writes_nothing() {
    let out = tmp("compare-bad");
    for (bad, needle) in [
        (vec!["--slo", "ttft_ms=-3"], "positive"),
        (vec!["--slo", "latency=3"], "unknown SLO key"),
        (vec!["--seeds", "0"], "--seeds"),
        (vec!["--jobs", "0"], "--jobs"),
        (vec!["--gpu-hour-usd", "NaN"], "--gpu-hour-usd"),
    ] {
        let mut args = vec![
            "compare",
            "--scenario",
            H200,
            "--trace",
            "traces/default.jsonl",
        ];
        args.extend(bad.iter().copied());
        args.extend(["--out", out.to_str().unwrap(), LAYOUTS[0]]);
        let (code, stdout, stderr) = pdsim(&args);
        assert_eq!(code, 2, "{bad:?}: {stdout}{stderr}");
        assert!(stderr.contains(needle), "{bad:?}: {stderr}");
        assert!(!out.exists(), "{bad:?} left a result behind");
    }
}

fn plan(out: &Path, extra: &[&str], trace: &Path) -> (i32, String, String) {
    let mut args = vec![
        "plan",
        "--scenario",
        H200,
        "--vary-nodes",
        "--trace",
        trace.to_str().unwrap(),
        "--slo",
        "ttft_ms=1000,itl_ms=50",
        "--max-runs",
        "4",
        "--target-rate",
        "20",
        "--out",
        out.to_str().unwrap(),
        "deployments/1p3d-ep8.yaml",
        "deployments/colocated-tp8.yaml",
    ];
    args.extend(extra);
    pdsim(&args)
}

#[test]
fn plan_shards_merge_into_the_whole_plan() {
    let trace = small_trace(150);
    let whole = tmp("plan-whole");
    let (code, stdout, stderr) = plan(&whole, &["--jobs", "2"], &trace);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let parsed: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(whole.join("plan.json")).unwrap()).unwrap();
    let layouts = parsed["layouts"].as_array().unwrap();
    // 1P3D's two pools over 2–4 of the 4 nodes (6 splits), colocated on 1–4.
    assert_eq!(layouts.len(), 10);
    let found = layouts
        .iter()
        .filter(|l| l["max_rate_req_s"].is_number())
        .count();
    assert!(found >= 6, "{stdout}");
    for l in layouts {
        assert!(
            l["probes"].as_array().unwrap().len() <= 4,
            "the search is bounded"
        );
    }
    assert!(
        stdout.contains("| 1 |") && stdout.contains("Pareto"),
        "{stdout}"
    );

    let (s0, s1) = (tmp("plan-s0"), tmp("plan-s1"));
    for (i, dir) in [(0, &s0), (1, &s1)] {
        let shard = format!("{i}/2");
        let (code, stdout, stderr) = plan(dir, &["--shard", &shard, "--jobs", "1"], &trace);
        assert_eq!(code, 0, "{stdout}{stderr}");
        assert!(stdout.contains("plan merge"), "{stdout}");
    }
    let merged = tmp("plan-merged");
    let (code, stdout, stderr) = pdsim(&[
        "plan",
        "merge",
        s1.to_str().unwrap(),
        s0.to_str().unwrap(),
        "--out",
        merged.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    // The best-ranked layout's llm-d files, written by the whole plan and
    // by the merge alike.
    assert!(
        whole.join("deploy/ms-values.yaml").is_file(),
        "the whole plan writes deploy/"
    );
    let report = std::fs::read_to_string(whole.join("report.md")).unwrap();
    assert!(report.contains("## What to deploy"), "{report}");
    for file in [
        "plan.json",
        "report.md",
        "report.html",
        "plots/pareto.svg",
        "plots/ttft_vs_rate.svg",
        "deploy/ms-values.yaml",
        "deploy/gaie-values.yaml",
        "deploy/README.md",
    ] {
        let (x, y) = (
            std::fs::read(whole.join(file)).unwrap(),
            std::fs::read(merged.join(file)).unwrap(),
        );
        assert!(
            x == y,
            "{file}: the merged plan differs from the whole plan"
        );
    }
    // A shard given twice, or one missing, is refused.
    let (code, _, stderr) = pdsim(&[
        "plan",
        "merge",
        s0.to_str().unwrap(),
        "--out",
        tmp("plan-bad").to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(stderr.contains("appears 0 times"), "{stderr}");
}

#[test]
fn the_comparison_table_and_a_summary_are_pinned() {
    let trace = small_trace(120);
    let out = tmp("snap-compare");
    let mut args = vec![
        "compare",
        "--scenario",
        H200,
        "--trace",
        trace.to_str().unwrap(),
        "--slo",
        "ttft_ms=500,itl_ms=40",
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(LAYOUTS);
    let (code, stdout, stderr) = pdsim(&args);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let table = std::fs::read_to_string(out.join("comparison.txt")).unwrap();
    insta::assert_snapshot!("comparison_table", table);
    let compared: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    cross_check_table(&table, &compared);

    let run = tmp("snap-run");
    let (code, stdout, stderr) = pdsim(&[
        "run",
        "--trace",
        trace.to_str().unwrap(),
        "--slo",
        "ttft_ms=50,itl_ms=10",
        "--gpu-hour-usd",
        "3",
        "--out",
        run.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let mut summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("summary.json")).unwrap()).unwrap();
    // The trace's path depends on where the tests build.
    summary["run"]["trace"] = "first-120.jsonl".into();
    insta::assert_json_snapshot!("small_run_summary", summary);
    // The snapshot only says the figures did not change; these say they
    // are right, recomputed from the run's own per-request rows.
    cross_check_summary(
        &summary,
        &std::fs::read_to_string(run.join("requests.csv")).unwrap(),
    );
}

/// The comparison table's key rows against the runs' own summaries (the
/// comparison's `summary.json`), independently of the code that renders
/// the table: each cell is its run's figure to the digits shown, and each
/// change is (figure / first layout's − 1) in whole percent, `±0%` when
/// it rounds to zero.
fn cross_check_table(table: &str, compared: &serde_json::Value) {
    let runs = compared["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 3);
    let figure = |run: usize, path: &[&str]| {
        path.iter()
            .fold(&runs[run]["summaries"][0], |v, k| &v[*k])
            .as_f64()
            .unwrap_or_else(|| panic!("{path:?} of run {run}"))
    };
    // A duration row is in the unit that suits its largest value; the
    // label says which.
    let rows = [
        ("TTFT mean (", &["ttft_ms", "mean"][..]),
        ("E2E mean (", &["e2e_ms", "mean"][..]),
        ("throughput (req/s)", &["throughput", "requests_per_s"][..]),
    ];
    for (label, path) in rows {
        let line = table
            .lines()
            .find(|l| l.contains(label))
            .unwrap_or_else(|| panic!("row {label}"));
        let per_ms = [
            ("(ms)", 1.0),
            ("(s)", 1e3),
            ("(min)", 60e3),
            ("(h)", 3600e3),
        ]
        .iter()
        .find(|(u, _)| line.contains(u))
        .map_or(1.0, |(_, size)| *size);
        let figure = |run: usize, path: &[&str]| {
            let v = figure(run, path);
            if path[0].ends_with("_ms") {
                v / per_ms
            } else {
                v
            }
        };
        let cells: Vec<&str> = line
            .trim_matches(|c| c == '│' || c == ' ')
            .split('┆')
            .map(str::trim)
            .skip(1)
            .collect();
        assert_eq!(cells.len(), 3, "{line}");
        let base = figure(0, path);
        for (run, cell) in cells.iter().enumerate() {
            let mut parts = cell.split(' ');
            let shown = parts.next().unwrap();
            let value: f64 = shown.parse().unwrap();
            let decimals = shown.split('.').nth(1).map_or(0, str::len);
            let half_unit = 0.5 * 10f64.powi(-(decimals as i32));
            let exact = figure(run, path);
            assert!(
                (value - exact).abs() <= half_unit + 1e-9,
                "{label}, run {run}: shown {shown}, summary {exact}"
            );
            if run > 0 {
                let pct = ((exact / base - 1.0) * 100.0).round() as i64;
                let want = match pct {
                    0 => "±0%".to_string(),
                    p if p > 0 => format!("+{p}%"),
                    p => format!("−{}%", -p),
                };
                assert_eq!(parts.next(), Some(want.as_str()), "{label}, run {run}");
            }
        }
    }
}

/// The key figures of `summary.json`, computed again from `requests.csv`
/// (whole microseconds) with the definitions the README gives:
/// means over completed requests, throughput and goodput per second of the
/// run's duration, GPU-hours as GPUs × duration, cost per million output
/// tokens. The run is the built-in default (one 8-GPU H200 server) with the
/// SLO TTFT ≤ 50 ms, ITL ≤ 10 ms and $3 per GPU-hour.
fn cross_check_summary(summary: &serde_json::Value, csv: &str) {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (ttft, e2e, tpot, out, outcome) = (
        col("ttft_ms"),
        col("e2e_ms"),
        col("tpot_ms"),
        col("output_tokens"),
        col("outcome"),
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let done: Vec<&Vec<&str>> = rows.iter().filter(|r| r[outcome] == "completed").collect();
    let num = |r: &Vec<&str>, i: usize| r[i].parse::<f64>().unwrap();
    let n = done.len() as f64;
    let figure = |path: &[&str]| {
        path.iter()
            .fold(summary, |v, k| &v[*k])
            .as_f64()
            .unwrap_or_else(|| panic!("{path:?} in summary.json"))
    };
    let near = |what: &str, got: f64, want: f64, tol: f64| {
        assert!(
            (got - want).abs() <= tol,
            "{what}: summary.json {got}, recomputed {want}"
        );
    };
    assert_eq!(
        done.len(),
        120,
        "every request of this light load completes"
    );
    // The CSV keeps whole microseconds, so each value and a mean of them is
    // within 0.001 ms of the exact one.
    let mean = |i: usize| done.iter().map(|r| num(r, i)).sum::<f64>() / n;
    near("TTFT mean", figure(&["ttft_ms", "mean"]), mean(ttft), 1e-3);
    near("E2E mean", figure(&["e2e_ms", "mean"]), mean(e2e), 1e-3);
    let max = |i: usize| done.iter().map(|r| num(r, i)).fold(f64::MIN, f64::max);
    // Percentiles come from an HDR histogram with 3 significant digits.
    let e2e_max = max(e2e);
    near(
        "E2E max",
        figure(&["e2e_ms", "max"]),
        e2e_max,
        e2e_max * 1e-3,
    );
    let duration_s = figure(&["duration_s"]);
    near(
        "requests per second",
        figure(&["throughput", "requests_per_s"]),
        n / duration_s,
        1e-9,
    );
    let output_tokens: f64 = done.iter().map(|r| num(r, out)).sum();
    near(
        "output tokens per second",
        figure(&["throughput", "output_tokens_per_s"]),
        output_tokens / duration_s,
        1e-6,
    );
    near(
        "output tokens per second per GPU",
        figure(&["throughput", "output_tokens_per_s_per_gpu"]),
        output_tokens / duration_s / 8.0,
        1e-6,
    );
    // Goodput: TTFT ≤ 50 and, for requests with more than one token,
    // TPOT ≤ 10. The rounding cannot move a request across a bound unless
    // it lies within 0.001 ms of it; none does here.
    let met = done
        .iter()
        .filter(|r| {
            let tpot_ok = r[tpot].is_empty() || num(r, tpot) <= 10.0;
            num(r, ttft) <= 50.0 && tpot_ok
        })
        .count() as f64;
    assert_eq!(figure(&["goodput", "requests_met"]), met);
    near(
        "goodput per second",
        figure(&["goodput", "requests_per_s"]),
        met / duration_s,
        1e-9,
    );
    near(
        "met share",
        figure(&["goodput", "met_share"]),
        met / n,
        1e-12,
    );
    let gpu_hours = 8.0 * duration_s / 3600.0;
    near(
        "GPU-hours",
        figure(&["cost", "gpu_hours"]),
        gpu_hours,
        1e-12,
    );
    near(
        "cost",
        figure(&["cost", "total_usd"]),
        3.0 * gpu_hours,
        1e-12,
    );
    near(
        "USD per million output tokens",
        figure(&["cost", "usd_per_million_output_tokens"]),
        3.0 * gpu_hours / (output_tokens / 1e6),
        1e-9,
    );
}

/// `--vary-nodes --vary-parallel` over a large cluster is counted before a
/// layout is generated: two pools over 256 nodes and every parallel shape
/// of an 8-GPU node are 326,400 layouts, refused at once (it ran for
/// minutes and took gigabytes before), naming the flags and the count,
/// with nothing written.
#[test]
fn a_plan_of_too_many_generated_layouts_is_refused_at_once() {
    let dir = tmp("plan-too-many");
    std::fs::create_dir_all(&dir).unwrap();
    let scenario = std::fs::read_to_string(root().join(H200))
        .unwrap()
        .replace("nodes: 4", "nodes: 256");
    assert!(scenario.contains("nodes: 256"));
    std::fs::write(dir.join("s.yaml"), scenario).unwrap();
    let out = dir.join("out");
    let start = std::time::Instant::now();
    let (code, stdout, stderr) = pdsim(&[
        "plan",
        "--scenario",
        dir.join("s.yaml").to_str().unwrap(),
        "--vary-nodes",
        "--vary-parallel",
        "--slo",
        "ttft_ms=1000",
        "--max-runs",
        "1",
        "--shard",
        "0/100000",
        "--out",
        out.to_str().unwrap(),
        "deployments/1p3d-ep8.yaml",
    ]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("--vary-nodes --vary-parallel: the candidates would generate at least 326400 layouts, more than the 10000 a plan tries")
            && stderr.contains("32640 splits of its 2 pools over the scenario's 256 nodes × 10 tensor × data parallel shapes"),
        "{stderr}"
    );
    assert!(
        start.elapsed() < std::time::Duration::from_secs(20),
        "refused in {:?}",
        start.elapsed()
    );
    assert!(!out.exists());
}
