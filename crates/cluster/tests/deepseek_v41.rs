//! DeepSeek-V4.1 runs, and each of the Deployment specification's keys for
//! it changes what the specification says it changes:
//!
//! - `swa_bounded_replay`, "the sliding-window cache in or out of prefix
//!   caching, recomputing a hit's last window": out of it (true), a hit no
//!   longer than the window is dropped and a longer one recomputes its last
//!   128 tokens; in it (false), a hit needs the window's tail cached in
//!   every window group and recomputes nothing;
//! - `engram_config`, the Engram tables' residency: in GPU memory they take
//!   a rank's share from the KV cache and are read from HBM; in host memory
//!   they are read over the host link, stalling a step only past the
//!   layers before each lookup's;
//! - the mega-MoE backend, under which the model turns on its own sequence
//!   parallelism: an all-gather and a reduce-scatter around attention
//!   instead of all-reduces, and each rank dispatching its share of the
//!   tokens.
//!
//! The engine's window, full and ring groups are checked against vLLM
//! 0.31.0's own scheduler in `crates/engine/tests/golden/0.31.0/sparse-*`;
//! the cost terms are pinned in the roofline's own tests.

mod common;

use pdsim_cluster::{Cluster, RequestRecord};
use pdsim_cost::{Batch, GraphMode};

/// One B200 node: one DeepSeek-V4.1 engine at TP 8 with expert parallelism.
const SCENARIO: &str = "kind: Scenario
name: one-deepseek
model: deepseek-v4.1
coefficients:
  - cost-model-host-overheads
engine_version: \"0.31.0\"
workload:
  shape: chatbot
cluster:
  hardware: b200
  nodes: 1
  gpus_per_node: 8
  fabric: ib-400g
";

fn deployment(keys: &str) -> String {
    let engine = common::engine_lines(keys);
    format!(
        "kind: Deployment
name: deepseek
pools:
  - role: colocated
    nodes: 1
    parallel:
      tp: 8
      pp: 1
      dp: 1
      enable_expert_parallel: true
    engine:
      max_num_batched_tokens: 8192
      max_num_seqs: 64
      max_model_len: 32768
{engine}"
    )
}

fn cluster(keys: &str) -> Cluster {
    common::build(SCENARIO, &deployment(keys), &[]).expect("builds")
}

fn records(cluster: &Cluster, trace: &str) -> Vec<RequestRecord> {
    common::completed_records(cluster, trace)
}

/// The same prompt of `prompt` tokens `n` times, a second apart.
fn resends(n: u64, prompt: u64) -> String {
    let ids: Vec<String> = (0..prompt.div_ceil(512)).map(|h| h.to_string()).collect();
    (0..n)
        .map(|i| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": {prompt}, \"output_length\": 8, \"hash_ids\": [{}]}}\n",
                i * 1000,
                ids.join(", ")
            )
        })
        .collect()
}

fn prefill(tokens: u32) -> Batch {
    Batch {
        num_reqs: 1,
        prefill_reqs: 1,
        decode_reqs: 0,
        prefill_tokens: tokens,
        decode_tokens: 0,
        spec_tokens: 0,
        padded_tokens: tokens,
        graph: GraphMode::Piecewise,
        attn_context_tokens: tokens as u64,
        attn_pairs: tokens as u64 * (tokens as u64 + 1) / 2,
        dbo: false,
    }
}

#[test]
fn bounded_replay_drops_a_hit_within_the_window_and_recomputes_it_in_a_longer_one() {
    // A 2,000-token resend hits 1,920 tokens (15 blocks of 128, the last
    // token recomputed) and recomputes the last 128 of them: 1,792 are
    // reused. A 200-token resend hits one block, no longer than the window:
    // dropped, the whole prompt recomputed.
    let c = cluster("swa_bounded_replay: true");
    let w = c.pools[0].engine.window.expect("window groups");
    assert_eq!(
        (w.window, w.block_size, w.replay, w.groups),
        (128, 32, 128, 5)
    );
    assert!(w.ring);
    let long = records(&c, &resends(3, 2000));
    assert_eq!(long[0].cached_tokens, 0);
    for r in &long[1..] {
        assert_eq!(r.cached_tokens, 1792, "{r:?}");
    }
    let short = records(&c, &resends(3, 200));
    for r in &short {
        assert_eq!(r.cached_tokens, 0, "{r:?}");
    }
    // With the window in the prefix cache, the resend resumes at the tail
    // kept at its prompt's replay boundary (1,920 and 128 tokens), whole.
    let c = cluster("swa_bounded_replay: false");
    let w = c.pools[0].engine.window.unwrap();
    assert!(w.cached && w.replay == 0 && w.hit_alignment == 128);
    let long = records(&c, &resends(3, 2000));
    assert_eq!(long[0].cached_tokens, 0);
    for r in &long[1..] {
        assert_eq!(r.cached_tokens, 1920, "{r:?}");
    }
    let short = records(&c, &resends(3, 200));
    for r in &short[1..] {
        assert_eq!(r.cached_tokens, 128, "{r:?}");
    }
    // A prompt sharing only a prefix with an earlier one finds the full
    // group's blocks but no window tail there, so it pins the junction and
    // keeps the tail: the third request resumes at it.
    let shared = "0, 1, 2, 3";
    let t: String = (0..3u64)
        .map(|i| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": 3000, \"output_length\": 4, \"hash_ids\": [{shared}, {}, {}]}}\n",
                i * 1000,
                100 + 2 * i,
                101 + 2 * i,
            )
        })
        .collect();
    let r = records(&c, &t);
    assert_eq!(
        (r[0].cached_tokens, r[1].cached_tokens, r[2].cached_tokens),
        (0, 0, 2048)
    );
}

#[test]
fn engram_tables_in_gpu_memory_take_kv_blocks_and_hbm_reads() {
    let gpu = cluster("engram_config:\n  cpu_offload: false");
    let host = cluster("engram_config:\n  cpu_offload: true");
    // 202.76 GB of tables over 8 shards: 25.3 GB a rank less for KV, in
    // 135,168-byte blocks.
    let lost = host.pools[0].engine.num_blocks - gpu.pools[0].engine.num_blocks;
    let expected = 25_344_754_050.0 / 135_168.0;
    assert!(
        (lost as f64 - expected).abs() < 2.0,
        "{lost} blocks, expected about {expected}"
    );
    // A step reads the rows from HBM with the tables on the GPU; from the
    // host they come over the link, hidden behind the layers before them.
    let batch = prefill(8192);
    let (g, h) = (
        gpu.pools[0].cost.step(&batch),
        host.pools[0].cost.step(&batch),
    );
    assert!(g.memory_ns > h.memory_ns, "{g:?} {h:?}");
    // A host link too slow to hide the lookups stalls the step.
    let slow_set = "kind: CoefficientSet
name: slow-host-link
coefficients:
  - engram_host_read_bw:
      value: 50
      units: bytes_per_us
      method: assumed
      fitted: false
      rationale: a test's slow link
      scope: {}
";
    let slow = common::build_with_catalog(
        &SCENARIO.replace(
            "  - cost-model-host-overheads\n",
            "  - cost-model-host-overheads\n  - slow-host-link\n",
        ),
        &deployment("engram_config:\n  cpu_offload: true"),
        &[],
        &[("coefficients/slow-host-link.yaml", slow_set)],
    )
    .expect("builds");
    let s = slow.pools[0].cost.step(&batch);
    assert!(s.total > h.total, "{s:?} {h:?}");
}

#[test]
fn a_mega_moe_backend_turns_on_the_models_sequence_parallelism() {
    let sp = cluster("moe_backend: deep_gemm_mega_moe");
    let plain = cluster("");
    // Each rank dispatches an eighth of a prefill's tokens, and gathers
    // and scatters around attention instead of all-reducing twice a layer.
    let batch = prefill(4096);
    let (a, b) = (
        sp.pools[0].cost.step(&batch),
        plain.pools[0].cost.step(&batch),
    );
    assert!(
        a.communication_ns < b.communication_ns,
        "{} vs {}",
        a.communication_ns,
        b.communication_ns
    );
    // And the run goes through.
    let r = records(&sp, &resends(2, 3000));
    // 2,944 tokens hit (23 blocks), the last 128 recomputed.
    assert_eq!(r[1].cached_tokens, 2944 - 128);
}

#[test]
fn another_release_is_refused_by_name() {
    let old = SCENARIO.replace("\"0.31.0\"", "\"0.29.0\"");
    let e = match common::build(&old, &deployment(""), &[]) {
        Ok(_) => panic!("0.29.0 runs DeepSeek-V4.1"),
        Err(e) => e,
    };
    assert!(e.contains("follow vLLM 0.31.0"), "{e}");
}
