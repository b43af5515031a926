//! Data-parallel ranks of a mixture-of-experts engine step together, and
//! dual-batch overlap (DBO) splits a step into two microbatches only when
//! every rank attempts it: an idle rank runs a dummy batch that does not
//! (`coordinate_batch_across_dp`, `vllm/v1/worker/dp_utils.py`).

mod common;

use common::build;
use pdsim_cluster::{MemorySink, run};
use pdsim_core::{Prompt, Segment, SimTime};
use pdsim_workload::RequestSpec;

const H200: &str = include_str!("../../../scenarios/4x8-h200.yaml");

/// One node of DeepSeek-V3 at DP 8 with expert parallelism, DBO on or off
/// at the lowest thresholds vLLM accepts (2 tokens, one per microbatch).
fn deployment(dbo: bool) -> String {
    format!(
        "kind: Deployment\nname: dbo\npools:\n  - role: colocated\n    nodes: 1\n    parallel: {{tp: 1, pp: 1, dp: 8, dp_local: 8, enable_expert_parallel: true}}\n    engine:\n      all2all_backend: deepep_low_latency\n      dbo: {{enable_dbo: {dbo}, dbo_decode_token_threshold: 2, dbo_prefill_token_threshold: 2}}\n"
    )
}

/// Request `i`: a prompt of `tokens` distinct tokens arriving at
/// `arrival_ns`, answered in `output` tokens.
fn spec(i: u64, arrival_ns: u64, tokens: u32, output: u32) -> RequestSpec {
    RequestSpec {
        arrival: SimTime(arrival_ns),
        prompt: Prompt::new(vec![Segment {
            id: 1_000 + i,
            tokens,
        }]),
        output_tokens: output,
        priority: 0,
        slo_class: 0,
        source_line: i + 1,
        deadline: None,
        session: None,
        output_id: None,
    }
}

/// The records of `n` requests arriving together, in pdsim's debug form.
fn records(dbo: bool, n: u64) -> String {
    let scenario = H200.replace("  nodes: 4\n", "  nodes: 1\n");
    assert_ne!(scenario, H200);
    let cluster = build(&scenario, &deployment(dbo), &[]).expect("builds");
    let specs = (0..n).map(|i| spec(i, 0, 512, 20));
    let mut sink = MemorySink::default();
    run(&cluster, &mut specs.map(Ok), 1, true, &mut sink).expect("runs");
    assert_eq!(sink.records.len() as u64, n);
    format!("{:?}", sink.records)
}

#[test]
fn dual_batch_overlap_runs_only_when_every_rank_has_a_batch() {
    // One request: seven ranks idle, so no step is split and the run is
    // the run without DBO, record for record.
    assert_eq!(records(true, 1), records(false, 1));
    // 64 requests keep all eight ranks busy: the steps are split, and the
    // timings differ from the run without DBO.
    assert_ne!(records(true, 64), records(false, 64));
}

/// vLLM's API server picks a data-parallel rank after tokenizing the
/// prompt, so by the coordinator's next publication the rank's engine holds
/// the request. pdsim picks before its frontend delay, and counts the
/// requests still in that delay as waiting on their rank
/// (`pdsim_cluster::dp_lb`). Two ranks behind one endpoint (two API
/// servers, vLLM 0.31.0's score); A's 100,000-token prompt is tokenized for
/// a second (10 us a token); B, C and D are short and done in a few ms.
/// A goes to rank 0 (server 0), B and C to rank 1 (server 1 scans from rank
/// 1, server 0 sees its own request in flight on rank 0). D reaches server
/// 1, whose scan now starts at rank 0: rank 0 holds A, still being
/// tokenized, so D goes to rank 1.
#[test]
fn a_request_still_being_tokenized_counts_on_its_rank() {
    let set = "kind: CoefficientSet\nname: slow-tokenizer\ncoefficients:\n  - host_admission_per_token:\n      value: 10\n      units: us_per_token\n      method: assumed\n      fitted: false\n      rationale: the test makes tokenization long\n      scope: {}\n";
    let scenario = include_str!("../../../scenarios/default.yaml")
        .replace("  gpus_per_node: 8\n", "  gpus_per_node: 2\n")
        .replace(
            "  - cost-model-host-overheads\n",
            "  - cost-model-host-overheads\n  - slow-tokenizer\n",
        );
    let deployment = "kind: Deployment\nname: dp2\npools:\n  - role: colocated\n    nodes: 1\n    parallel: {tp: 1, pp: 1, dp: 2}\n";
    let cluster = common::build_with_catalog(
        &scenario,
        deployment,
        &[],
        &[("coefficients/slow-tokenizer.yaml", set)],
    )
    .expect("builds");
    let specs = [(0, 100_000), (200, 16), (400, 16), (600, 16)]
        .into_iter()
        .enumerate()
        .map(|(i, (ms, tokens))| spec(i as u64, ms * 1_000_000, tokens, 4));
    let mut sink = MemorySink::default();
    run(&cluster, &mut specs.map(Ok), 1, true, &mut sink).expect("runs");
    let mut ranks: Vec<(u32, u16)> = sink.records.iter().map(|r| (r.id.0, r.rank)).collect();
    ranks.sort();
    assert_eq!(
        ranks,
        vec![(0, 0), (1, 1), (2, 1), (3, 1)],
        "{:?}",
        sink.records
    );
}

/// With the Rust frontend one API server fronts both ranks and sees all
/// its picks; with Python's, two servers each see only their own between
/// the coordinator's publications (`pdsim_cluster::dp_lb`). Four requests
/// at one instant: Python's servers send them to ranks 0, 1, 1, 0 (each
/// server's own increments only); Rust's one server to 0, 1, 0, 1.
#[test]
fn the_rust_frontend_balances_from_one_view() {
    let ranks = |frontend: &str| {
        let scenario = include_str!("../../../scenarios/default.yaml")
            .replace("  gpus_per_node: 8\n", "  gpus_per_node: 2\n");
        let deployment = format!(
            "kind: Deployment\nname: dp2\npools:\n  - role: colocated\n    nodes: 1\n    parallel: {{tp: 1, pp: 1, dp: 2}}\n    engine: {{frontend: {frontend}}}\n"
        );
        let cluster = build(&scenario, &deployment, &[]).expect("builds");
        let specs = (0..4).map(|i| spec(i, 0, 64, 4));
        let mut sink = MemorySink::default();
        run(&cluster, &mut specs.map(Ok), 1, true, &mut sink).expect("runs");
        let mut ranks: Vec<(u32, u16)> = sink.records.iter().map(|r| (r.id.0, r.rank)).collect();
        ranks.sort();
        ranks
            .into_iter()
            .map(|(_, rank)| rank)
            .collect::<Vec<u16>>()
    };
    assert_eq!(ranks("python"), vec![0, 1, 1, 0]);
    assert_eq!(ranks("rust"), vec![0, 1, 0, 1]);
}
