//! End-to-end speed, five cases on four H200 nodes of eight GPUs, each run in
//! its own process so peak memory is its own:
//!
//! - `colocated`: 100,000 synthetic chat requests (the catalog's `chatbot`
//!   shape, 256 tokens in and out on average) at 400 requests per second
//!   through 32 colocated Llama-3.1-8B engines;
//! - `1p3d`: 100,000 of the same requests at 40 requests per second through
//!   the bundled 1P3D DeepSeek-V3 layout (one prefill node, three decode
//!   nodes, expert parallelism, KV moving over the fabric, a host-memory
//!   offload tier);
//! - `1p3d-epp`: the same through the Endpoint Picker's prefix-cache-aware
//!   P/D routing (`deployments/1p3d-ep8-epp.yaml`) instead of the built-in
//!   always-disaggregate policy;
//! - `colocated-precise`: the colocated case routed by the precise
//!   prefix-cache path (engines publish KV events to the EPP's index);
//! - `colocated-flow`: the colocated case behind the EPP's flow controller.
//!
//! Prints simulated requests per wall-second and peak resident memory.
//! Run with `cargo bench -p pdsim-benches --bench e2e`; `PDSIM_BENCH_CASE`
//! picks one case, `PDSIM_BENCH_REQUESTS` and `PDSIM_BENCH_RATE` change the
//! size and load.

use pdsim_cluster::run;
use pdsim_report::{Aggregator, RunInfo};
use pdsim_spec::validate::{Request, validate};
use pdsim_workload::Synthetic;
use std::time::Instant;

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn main() {
    let Ok(case) = std::env::var("PDSIM_BENCH_CASE") else {
        // Run each case in a child process so each reports its own peak.
        let exe = std::env::current_exe().expect("the bench binary");
        for case in [
            "colocated",
            "colocated-precise",
            "colocated-flow",
            "1p3d",
            "1p3d-epp",
        ] {
            let status = std::process::Command::new(&exe)
                .env("PDSIM_BENCH_CASE", case)
                .status()
                .expect("the bench runs");
            assert!(status.success(), "case {case} failed");
        }
        return;
    };
    let requests: u64 = std::env::var("PDSIM_BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let default_rate = if case.starts_with("1p3d") {
        40.0
    } else {
        400.0
    };
    let rate: f64 = std::env::var("PDSIM_BENCH_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_rate);
    let files = match case.as_str() {
        "1p3d" => pdsim_benches::pd_bundle(),
        "1p3d-epp" => pdsim_benches::pd_epp_bundle(),
        "colocated-precise" => pdsim_benches::e2e_precise_bundle(),
        "colocated-flow" => pdsim_benches::e2e_flow_bundle(),
        _ => pdsim_benches::e2e_bundle(),
    };
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    assert!(report.valid, "{:#?}", report.problems);
    let scenario = report.scenario.as_ref().expect("scenario");
    let bundle = &report.deployments[0];
    let router = bundle.deployment.router.as_ref().map(|block| {
        pdsim_router::check_router_inputs(&files, "d.yaml", Some(block))
            .expect("router inputs load")
    });
    let cluster = pdsim_cluster::build_with_router(bundle, scenario, router).expect("builds");
    let shape = scenario.shape.as_ref().expect("shape");
    let mut source =
        Synthetic::new(&shape.origin.name, &shape.value, requests, rate, 1).expect("shape");
    let mut aggregator = Aggregator::default();
    let start = Instant::now();
    let stats = run(&cluster, &mut source, 1, false, &mut aggregator).expect("runs");
    let wall = start.elapsed().as_secs_f64();
    let summary = aggregator.summary(
        &stats,
        RunInfo {
            scenario: scenario.scenario.name.clone(),
            deployment: bundle.deployment.name.clone(),
            trace: format!("chatbot at {rate} req/s"),
            seed: 1,
            router: stats.router.to_string(),
            engines: cluster.pools.iter().map(|p| p.pods as u64).sum(),
            gpus: 32,
            pools: Vec::new(),
            gpu_hour_usd: None,
            client_timeout_s: None,
        },
    );
    let steps: u64 = stats.cores.iter().map(|c| c.steps).sum();
    println!(
        "e2e [{case}]: {requests} requests, {} completed, {:.1} s simulated, {steps} engine steps, {} events in {wall:.3} s wall",
        stats.completed, summary.duration_s, stats.events
    );
    println!(
        "e2e [{case}]: {:.0} simulated requests per wall-second, {:.0} steps per wall-second, {:.0} output tokens per wall-second",
        requests as f64 / wall,
        steps as f64 / wall,
        summary.requests.output_tokens as f64 / wall
    );
    println!(
        "e2e [{case}]: TTFT p50 {:.1} ms p99 {:.1} ms, TPOT p50 {:.2} ms, KV usage mean {:.1}%",
        summary.ttft_ms.p50,
        summary.ttft_ms.p99,
        summary.tpot_ms.p50,
        summary.kv_usage.mean * 100.0
    );
    match peak_rss_kib() {
        Some(kib) => println!(
            "e2e [{case}]: peak resident memory {:.1} MiB",
            kib as f64 / 1024.0
        ),
        None => println!("e2e: peak resident memory unavailable (no /proc)"),
    }
}
