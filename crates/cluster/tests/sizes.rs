//! Real cluster sizes run: a 2,048-node × 8-GPU cluster (16,384 GPUs, as
//! large clusters are built) is laid out, built and serves requests, its
//! engines' structures growing with what they use rather than with their
//! capacity. Not timed: the test asserts the run completes every request.

use pdsim_cluster::{MemorySink, Outcome, build_with_router, run};
use pdsim_spec::files::MemoryFiles;
use pdsim_spec::validate::{Request, validate};
use pdsim_workload::{MooncakeReader, RequestSpec};

const NODES: u32 = 2048;

/// The default scenario's H200 nodes serving Llama-3.1-8B, 2,048 of them
/// on InfiniBand.
fn scenario() -> String {
    format!(
        "kind: Scenario
name: big
model: llama-3.1-8b
coefficients:
  - cost-model-host-overheads
  - pd-transfer-estimates
engine_version: \"0.31.0\"
cluster:
  hardware: h200
  fabric: ib-400g
  nodes: {NODES}
  gpus_per_node: 8
  storage:
    - cpu_dram
"
    )
}

/// `n` requests arriving a millisecond apart, each with a prompt of its own.
fn requests(n: usize) -> Vec<RequestSpec> {
    let text: String = (0..n)
        .map(|i| {
            format!(
                "{{\"timestamp\": {i}, \"input_length\": 512, \"output_length\": 8, \"hash_ids\": [{}]}}\n",
                1000 + i
            )
        })
        .collect();
    MooncakeReader::new(std::io::Cursor::new(text.into_bytes()), "r.jsonl")
        .map(|r| r.unwrap())
        .collect()
}

/// Validates and builds `deployment` on the big scenario (with `router`
/// files), runs `n` requests, and returns the run's statistics and records.
fn serve(
    deployment: &str,
    router: &[(&str, &str)],
    n: usize,
) -> (pdsim_cluster::RunStats, MemorySink) {
    let mut files = MemoryFiles::new()
        .with("s.yaml", &scenario())
        .with("d.yaml", deployment);
    for (path, text) in router {
        files.insert(path, text);
    }
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    assert!(report.valid, "{:#?}", report.problems);
    let inputs = report.loaded[0].1.router.as_ref().map(|block| {
        pdsim_router::check_router_inputs(&files, "d.yaml", Some(block)).expect("router loads")
    });
    let cluster = build_with_router(
        &report.deployments[0],
        report.scenario.as_ref().unwrap(),
        inputs,
    )
    .expect("a 2,048-node cluster builds");
    let mut sink = MemorySink::default();
    let mut source = requests(n).into_iter().map(Ok);
    let stats = run(&cluster, &mut source, 1, false, &mut sink).expect("runs");
    (stats, sink)
}

fn assert_all_completed(stats: &pdsim_cluster::RunStats, sink: &MemorySink, n: usize) {
    assert_eq!(stats.requests, n as u64);
    assert_eq!(sink.records.len(), n);
    for r in &sink.records {
        assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    }
}

#[test]
fn a_2048_node_colocated_cluster_of_16384_engines_serves_requests() {
    let deployment = format!(
        "kind: Deployment
name: big-tp1
pools:
  - role: colocated
    nodes: {NODES}
    parallel: {{tp: 1, pp: 1, dp: 1}}
"
    );
    let n = 64;
    let (stats, sink) = serve(&deployment, &[], n);
    assert_eq!(stats.cores.len(), NODES as usize * 8, "one core per GPU");
    assert_all_completed(&stats, &sink, n);
}

#[test]
fn a_2048_node_pd_cluster_with_offload_moves_kv_and_serves_requests() {
    let deployment = format!(
        "kind: Deployment
name: big-pd
pools:
  - role: prefill
    nodes: {}
    parallel: {{tp: 1, pp: 1, dp: 1}}
  - role: decode
    nodes: {}
    parallel: {{tp: 1, pp: 1, dp: 1}}
offload:
  tiers:
    - tier: cpu_dram
      bytes: 107374182400
pd_transfer:
  connector: NixlConnector
router:
  endpoint_picker_config: epp.yaml
",
        NODES / 4,
        NODES - NODES / 4
    );
    let epp = include_str!("../../../deployments/pd/epp-always-pd.yaml");
    let n = 32;
    let (stats, sink) = serve(&deployment, &[("epp.yaml", epp)], n);
    assert_eq!(stats.cores.len(), NODES as usize * 8);
    assert_all_completed(&stats, &sink, n);
    assert!(
        sink.records.iter().all(|r| r.transfer_bytes > 0),
        "every request was disaggregated and pulled its KV"
    );
}
