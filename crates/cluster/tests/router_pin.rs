//! The router's decisions pinned byte for byte: every EndpointPickerConfig
//! in `tests/router-pin/` and `deployments/pd/`, and the built-in default,
//! routes the same requests over the same cluster, and each run's decisions
//! (which pod served each request, which prefilled it, its outcome and the
//! nanosecond of its first token) are reduced to one line of the snapshot.
//!
//! This is a change detector, not a derivation: the figures are what the
//! code produced when the snapshot was accepted. It exists so that the
//! router can be restructured (issue 13: one module per plugin) with proof
//! that no decision moved. A line that changes says which configuration's
//! routing changed; the formulas themselves are pinned by hand-worked unit
//! tests in `crates/router`.
//!
//! With `PDSIM_SHARED` set, the real router files of
//! `reference/epp/` that run get the same treatment in a second snapshot
//! (their figures are derived from third-party inputs, so only the digest
//! lines are committed, never the files).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

mod common;

use common::build;
use pdsim_cluster::{Cluster, MemorySink, Outcome, RequestRecord, run};
use pdsim_core::SimTime;
use pdsim_workload::{MooncakeReader, RequestSpec};

const SCENARIO: &str = include_str!("../../../scenarios/default.yaml");
const DEPLOYMENT: &str = include_str!("../../../deployments/default.yaml");
const TRACE: &str = include_str!("../../../traces/default.jsonl");

/// Requests replayed per configuration, and how much faster than the trace
/// they arrive: 600 requests in about 15 s over 8 engines loads them enough
/// that queue and KV scores differ between endpoints.
const REQUESTS: usize = 600;
const SPEEDUP: u64 = 4;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The layouts: the default's eight colocated engines, or eight prefill
/// and eight decode engines of the same model on two nodes.
fn documents(pd: bool) -> (String, String) {
    if !pd {
        return (SCENARIO.to_string(), DEPLOYMENT.to_string());
    }
    assert!(SCENARIO.contains("  nodes: 1\n"));
    let scenario = SCENARIO.replace("  nodes: 1\n", "  fabric: ib-400g\n  nodes: 2\n");
    let deployment = "kind: Deployment\nname: pin-pd\npools:\n  - role: prefill\n    nodes: 1\n    parallel: {tp: 1, pp: 1, dp: 1}\n  - role: decode\n    nodes: 1\n    parallel: {tp: 1, pp: 1, dp: 1}\npd_transfer:\n  connector: NixlConnector\n".to_string();
    (scenario, deployment)
}

fn cluster(config: Option<&str>, pd: bool) -> Result<Cluster, String> {
    let (scenario, mut deployment) = documents(pd);
    let mut extra = Vec::new();
    if let Some(text) = config {
        deployment.push_str("router:\n  endpoint_picker_config: epp.yaml\n  epp_flags: [\"--allow-experimental-plugins\"]\n");
        extra.push(("epp.yaml", text));
    }
    build(&scenario, &deployment, &extra)
}

fn specs() -> Vec<RequestSpec> {
    MooncakeReader::new(std::io::Cursor::new(TRACE.as_bytes()), "default.jsonl")
        .take(REQUESTS)
        .map(|r| {
            let mut spec = r.expect("the bundled trace reads");
            spec.arrival = SimTime(spec.arrival.as_ns() / SPEEDUP);
            spec
        })
        .collect()
}

/// FNV-1a, 64 bits: a digest that does not depend on std's hasher.
fn fnv(bytes: &[u8], mut h: u64) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// One line: how many completed, were disaggregated and were refused, the
/// requests each pod served, and the digest of every decision.
fn line(name: &str, records: &[RequestRecord], pods: usize) -> String {
    let mut served = vec![0u32; pods];
    let mut digest = 0xcbf2_9ce4_8422_2325;
    let (mut completed, mut disaggregated, mut other) = (0, 0, 0);
    for r in records {
        match r.outcome {
            Outcome::Completed => completed += 1,
            _ => other += 1,
        }
        disaggregated += u32::from(r.prefill.is_some());
        let slot = usize::from(r.pool) * 8 + r.pod as usize;
        if r.outcome == Outcome::Completed && slot < pods {
            served[slot] += 1;
        }
        let text = format!(
            "{} {}:{}:{} {:?} {:?} {} {}\n",
            r.id.0,
            r.pool,
            r.pod,
            r.rank,
            r.prefill,
            r.first_token.map(SimTime::as_ns),
            r.finished.as_ns(),
            r.reason
        );
        digest = fnv(text.as_bytes(), digest);
    }
    let served: Vec<String> = served.iter().map(u32::to_string).collect();
    format!(
        "{name}: completed {completed}, disaggregated {disaggregated}, other {other}; served [{}]; digest {digest:016x}\n",
        served.join(" ")
    )
}

fn replay(name: &str, config: Option<&str>, pd: bool) -> Result<String, String> {
    let cluster = cluster(config, pd)?;
    let mut sink = MemorySink::default();
    run(
        &cluster,
        &mut specs().into_iter().map(Ok),
        7,
        true,
        &mut sink,
    )
    .map_err(|e| format!("{e:?}"))?;
    assert_eq!(
        sink.records.len(),
        REQUESTS,
        "{name}: every request has a record"
    );
    Ok(line(name, &sink.records, if pd { 16 } else { 8 }))
}

/// The configurations this test pins, by file name, with whether each
/// needs the P/D layout (a first line `# layout: pd`).
fn bundled() -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for dir in ["crates/cluster/tests/router-pin", "deployments/pd"] {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(root().join(dir))
            .expect("the folder reads")
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        paths.sort();
        for path in paths {
            let text = std::fs::read_to_string(&path).unwrap();
            let pd = dir == "deployments/pd" || text.starts_with("# layout: pd");
            let name = format!("{dir}/{}", path.file_name().unwrap().to_string_lossy());
            out.push((name, text, pd));
        }
    }
    out
}

#[test]
fn every_bundled_router_configuration_routes_as_pinned() {
    let mut table = replay("built-in default", None, false).expect("the default runs");
    for (name, text, pd) in bundled() {
        match replay(&name, Some(&text), pd) {
            Ok(line) => table.push_str(&line),
            Err(e) => panic!("{name} does not run: {e}"),
        }
    }
    insta::assert_snapshot!("bundled", table);
}

#[test]
fn every_real_router_file_that_runs_routes_as_pinned() {
    let Some(shared) = pdsim_testkit::shared(
        "every_real_router_file_that_runs_routes_as_pinned",
        "the decisions of reference/epp's router files",
    ) else {
        return;
    };
    let paths: Vec<PathBuf> = pdsim_testkit::entries(&shared.join("reference/epp"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    let mut table = String::new();
    for path in paths {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        if !text.contains("kind: EndpointPickerConfig") {
            continue;
        }
        let outcome =
            replay(&name, Some(&text), false).or_else(|_| replay(&name, Some(&text), true));
        match outcome {
            Ok(line) => table.push_str(&line),
            Err(_) => writeln!(table, "{name}: does not run here").unwrap(),
        }
    }
    insta::assert_snapshot!("reference", table);
}
