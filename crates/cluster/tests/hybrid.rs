//! A hybrid model (Nemotron-H-8B: Mamba2 mixers, attention and MLP layers)
//! runs, and each of the Deployment specification's recurrent keys changes
//! what the specification says it changes:
//!
//! - `mamba_ssm_cache_dtype`, "the format of the SSM state alone": the
//!   state's bytes, hence the block vLLM raises to hold it, and the state a
//!   decode step reads and writes for every request;
//! - `mamba_cache_dtype`, "the format of a recurrent layer's state": the
//!   convolution state (and the SSM state when that one follows it);
//! - `mamba_cache_mode`, "whether recurrent state is fixed per sequence or
//!   grows with context": `none` keeps one state a sequence, updated in
//!   place, and reuses nothing; `align` keeps states at block boundaries as
//!   the context grows, cuts prefill chunks to reach them, and a later
//!   request resumes from one.
//!
//! The engine's state blocks are checked against vLLM 0.31.0's own
//! scheduler in `crates/engine/tests/golden/0.31.0/hybrid-*`; here the
//! keys go through the whole path: documents, resolution, engine, cost.

mod common;

use pdsim_cluster::{Cluster, RequestRecord};
use pdsim_cost::{Batch, GraphMode};

/// One H100 pair: one Nemotron-H-8B engine at tensor parallelism 2.
const SCENARIO: &str = "kind: Scenario
name: one-nemotron-h
model: nemotron-h-8b
coefficients:
  - cost-model-host-overheads
engine_version: \"0.31.0\"
workload:
  shape: chatbot
cluster:
  hardware: h100
  nodes: 1
  gpus_per_node: 2
  fabric: ib-400g
";

/// The engine with `keys` (YAML lines under `engine:`) besides the
/// deployment's own.
fn deployment(keys: &str) -> String {
    let engine = common::engine_lines(keys);
    format!(
        "kind: Deployment
name: nemotron
pools:
  - role: colocated
    nodes: 1
    parallel:
      tp: 2
      pp: 1
      dp: 1
    engine:
      max_num_batched_tokens: 8192
      max_num_seqs: 64
      gpu_memory_utilization: 0.9
      max_model_len: 8192
{engine}"
    )
}

fn cluster(keys: &str) -> Cluster {
    common::build(SCENARIO, &deployment(keys), &[]).expect("builds")
}

fn refusal(keys: &str) -> String {
    match common::build(SCENARIO, &deployment(keys), &[]) {
        Ok(_) => panic!("{keys}: expected a refusal"),
        Err(e) => e,
    }
}

fn records(cluster: &Cluster, trace: &str) -> Vec<RequestRecord> {
    common::completed_records(cluster, trace)
}

/// `n` requests a second apart, each of `prompt` tokens of its own
/// content (or all the same content when `same`) and `output` tokens.
fn trace(n: u64, prompt: u64, output: u64, same: bool) -> String {
    let blocks = prompt.div_ceil(512);
    (0..n)
        .map(|i| {
            let first = if same { 0 } else { i * blocks };
            let ids: Vec<String> = (first..first + blocks).map(|h| h.to_string()).collect();
            format!(
                "{{\"timestamp\": {}, \"input_length\": {prompt}, \"output_length\": {output}, \"hash_ids\": [{}]}}\n",
                i * 1000,
                ids.join(", ")
            )
        })
        .collect()
}

/// The mean time between a request's tokens after its first.
fn mean_itl_ms(records: &[RequestRecord]) -> f64 {
    let (sum, n) = records.iter().fold((0.0, 0.0), |(s, n), r| {
        let span = r
            .last_token
            .unwrap()
            .since(r.first_token.unwrap())
            .as_ms_f64();
        (s + span / (r.output_tokens - 1) as f64, n + 1.0)
    });
    sum / n
}

/// A decode step of `requests` requests at `context` tokens each.
fn decode(requests: u32, context: u64) -> Batch {
    Batch {
        num_reqs: requests,
        prefill_reqs: 0,
        decode_reqs: requests,
        prefill_tokens: 0,
        decode_tokens: requests,
        spec_tokens: 0,
        padded_tokens: requests,
        graph: GraphMode::Full,
        attn_context_tokens: context * requests as u64,
        attn_pairs: context * requests as u64,
        dbo: false,
    }
}

#[test]
fn the_ssm_states_format_sizes_the_state_its_block_and_each_decode_step() {
    // Nemotron-H keeps its SSM state in float32 unless told otherwise: the
    // state of a layer on one of two ranks is 2,127,872 bytes, which vLLM
    // rounds up to a 1,040-token attention page; in bfloat16 the SSM part
    // halves (1,079,296 bytes) and the block is 528 tokens.
    let fp32 = cluster("");
    let bf16 = cluster("mamba_ssm_cache_dtype: bfloat16");
    assert_eq!(fp32.pools[0].engine.block_size, 1040);
    assert_eq!(bf16.pools[0].engine.block_size, 528);
    for c in [&fp32, &bf16] {
        let m = c.pools[0].engine.mamba.expect("a hybrid engine");
        assert_eq!(m.groups, 6);
        assert_eq!(m.mode, pdsim_engine::mamba::MambaMode::Align);
        assert_eq!(m.block_size, c.pools[0].engine.block_size);
    }
    // Each decode step reads and writes every request's state once a Mamba
    // layer: 24 layers × 2 × (2,127,872 − 1,079,296) bytes more per request
    // in float32, so the gap grows with the batch.
    let gap = |requests: u32| {
        let batch = decode(requests, 1000);
        fp32.pools[0].cost.step(&batch).total.as_ms_f64()
            - bf16.pools[0].cost.step(&batch).total.as_ms_f64()
    };
    assert!(gap(1) > 0.0, "{}", gap(1));
    assert!(gap(32) > 8.0 * gap(1), "{} vs {}", gap(32), gap(1));
    // And a run of the same trace decodes faster with the smaller state.
    let t = trace(24, 600, 200, false);
    let slow = mean_itl_ms(&records(&fp32, &t));
    let fast = mean_itl_ms(&records(&bf16, &t));
    assert!(fast < slow, "bf16 {fast} ms, fp32 {slow} ms");
}

#[test]
fn the_states_format_sizes_the_convolution_state() {
    // `mamba_cache_dtype: float32` doubles the convolution state (3 ×
    // 10,240 values a layer, over two ranks: 61,440 bytes instead of
    // 30,720); the SSM state stays float32 either way, and the page grows
    // past 1,040 tokens' worth to 1,056.
    let auto = cluster("mamba_cache_dtype: auto");
    let wide = cluster("mamba_cache_dtype: float32");
    assert_eq!(auto.pools[0].engine.block_size, 1040);
    assert_eq!(wide.pools[0].engine.block_size, 1056);
    let batch = decode(16, 1000);
    assert!(
        wide.pools[0].cost.step(&batch).total > auto.pools[0].cost.step(&batch).total,
        "a wider state costs each decode step more"
    );
    // With both states in bfloat16 the block is the smallest.
    let narrow = cluster("mamba_cache_dtype: bfloat16\nmamba_ssm_cache_dtype: bfloat16");
    assert_eq!(narrow.pools[0].engine.block_size, 528);
}

#[test]
fn align_keeps_a_state_where_the_prompt_resumes_and_none_keeps_one_state_a_sequence() {
    // The same 3,000-token prompt every second. In align mode (prefix
    // caching on) the first prefill is cut at its last full block, 2,080
    // tokens, whose state is kept; every later request resumes there. With
    // prefix caching off vLLM runs `none`: one state a sequence, updated in
    // place, nothing reused.
    let t = trace(6, 3000, 8, true);
    let align = records(&cluster("mamba_cache_mode: align"), &t);
    let none_cluster = cluster("enable_prefix_caching: false\nmamba_cache_mode: none");
    assert_eq!(
        none_cluster.pools[0].engine.mamba.unwrap().mode,
        pdsim_engine::mamba::MambaMode::None
    );
    let none = records(&none_cluster, &t);
    assert_eq!(align[0].cached_tokens, 0);
    for r in &align[1..] {
        assert_eq!(r.cached_tokens, 2080, "{r:?}");
    }
    for r in &none {
        assert_eq!(r.cached_tokens, 0, "{r:?}");
    }
    // Resuming from the state skips most of the prefill.
    let ttft = |r: &RequestRecord| r.first_token.unwrap().since(r.arrival).as_ms_f64();
    assert!(ttft(&align[3]) < ttft(&none[3]) * 0.8);
    // The first request's prefill is cut in two in align mode (the cut and
    // the rest), so it takes longer to its first token than in none mode,
    // where the whole prompt runs in one step.
    assert!(ttft(&align[0]) > ttft(&none[0]));
    // `mamba_cache_mode: none` with prefix caching on becomes align, as
    // vLLM's `MambaModelConfig.verify_and_update_config` turns it.
    assert_eq!(
        cluster("mamba_cache_mode: none").pools[0]
            .engine
            .mamba
            .unwrap()
            .mode,
        pdsim_engine::mamba::MambaMode::Align
    );
}

#[test]
fn a_prompt_sharing_a_prefix_with_no_state_pins_the_junction_for_the_next() {
    // Prompts that share their first 2,080 tokens and differ after. The
    // second request finds the attention blocks of the shared part but no
    // state there (the first kept one only at its own replay boundary), so
    // it stops its first chunk at the junction, 2,080, and keeps that
    // state: the third request resumes from it.
    let shared = "0, 1, 2, 3";
    let t: String = (0..3u64)
        .map(|i| {
            format!(
                "{{\"timestamp\": {}, \"input_length\": 4000, \"output_length\": 4, \"hash_ids\": [{shared}, {}, {}, {}, {}]}}\n",
                i * 1000,
                100 + 4 * i,
                101 + 4 * i,
                102 + 4 * i,
                103 + 4 * i,
            )
        })
        .collect();
    let r = records(&cluster(""), &t);
    // Blocks of 512 tokens: the shared part is 2,048 tokens, one full
    // 1,040-token block (1,040 tokens): the first request keeps its state at
    // 3,120 (its replay boundary), the second finds one attention block
    // and no state, pins the junction at 1,040, and the third resumes there.
    assert_eq!(r[0].cached_tokens, 0);
    assert_eq!(r[1].cached_tokens, 0);
    assert_eq!(r[2].cached_tokens, 1040);
}

#[test]
fn what_the_hybrid_engine_does_not_simulate_is_refused_by_name() {
    for (keys, needle) in [
        ("mamba_cache_mode: all", "`all` (deprecated"),
        (
            "speculative:\n  method: ngram\n  num_spec_tokens: 2",
            "num_speculative_blocks",
        ),
    ] {
        let e = refusal(keys);
        assert!(e.contains(needle), "{keys}: {e}");
        assert!(e.contains("nemotron-h-8b"), "{e}");
    }
    let old = SCENARIO.replace("\"0.31.0\"", "\"0.29.0\"");
    let e = match common::build(&old, &deployment(""), &[]) {
        Ok(_) => panic!("0.29.0 runs a hybrid"),
        Err(e) => e,
    };
    assert!(e.contains("follows vLLM 0.31.0's MambaManager"), "{e}");
}
