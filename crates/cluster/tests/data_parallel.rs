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

/// The records of `n` requests arriving together, in pdsim's debug form.
fn records(dbo: bool, n: u64) -> String {
    let scenario = H200.replace("  nodes: 4\n", "  nodes: 1\n");
    assert_ne!(scenario, H200);
    let cluster = build(&scenario, &deployment(dbo), &[]).expect("builds");
    let specs = (0..n).map(|i| RequestSpec {
        arrival: SimTime::ZERO,
        prompt: Prompt::new(vec![Segment {
            id: 1_000 + i,
            tokens: 512,
        }]),
        output_tokens: 20,
        priority: 0,
        slo_class: 0,
        source_line: i + 1,
        deadline: None,
        session: None,
        output_id: None,
    });
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
