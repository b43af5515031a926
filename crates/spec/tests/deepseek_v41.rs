//! DeepSeek-V4.1 as vLLM 0.31.0 sets up its cache, and what each of the
//! Deployment's keys for it changes, figure by figure
//! (`research/deepseek-v4.1-in-vllm-0.31.0.md` derives each from vLLM's
//! `vllm/models/deepseek_v41/`, `vllm/config/engram.py`,
//! `vllm/v1/kv_cache_interface.py` and `vllm/v1/core/kv_cache_utils.py`):
//!
//! - the full group's block: every kv-source layer's compressed latents and
//!   indexer keys (Blackwell: 128-token blocks, nvfp4-packed latents of 288
//!   bytes, 132-byte FP8 indexer keys, pages aligned to 512 bytes);
//! - `engram_config`: the 202.76 GB of Engram tables in GPU memory (a
//!   rank's share of the heads, taken from the KV cache) or in host memory;
//! - `swa_bounded_replay`: the window cache in or out of prefix caching,
//!   the window replayed after a hit;
//! - `moe_backend`: a mega-MoE backend turns on the model's own sequence
//!   parallelism.

mod common;

use common::{setting, validate_pair};
use pdsim_spec::resolve::PoolResolution;

fn scenario(chip: &str) -> String {
    format!(
        "kind: Scenario\nname: s\nmodel: deepseek-v4.1\ncoefficients: [cost-model-host-overheads]\nengine_version: \"0.31.0\"\nworkload: {{shape: chatbot}}\ncluster: {{hardware: {chip}, nodes: 2, gpus_per_node: 8, fabric: ib-400g}}\n"
    )
}

fn resolve_on(chip: &str, parallel: &str, engine: &str) -> PoolResolution {
    let deployment = format!(
        "kind: Deployment\nname: d\npools:\n  - role: colocated\n    nodes: 2\n    parallel: {{{parallel}}}\n    engine: {{max_model_len: 131072{engine}}}\n"
    );
    let report = validate_pair(&scenario(chip), &deployment);
    // DeepSeek-V4.1 runs, so nothing is refused.
    assert!(report.valid, "{:#?}", report.problems);
    assert!(
        report.problems.iter().all(|p| !matches!(
            p.code.as_str(),
            "swa-bounded-replay-ignored" | "engram-config-without-engram"
        )),
        "DeepSeek-V4.1 reads its keys"
    );
    report.resolutions[0].pools[0].clone()
}

/// The two Engram tables' rows × 264 bytes (256 fp8 values and 8 scales).
const TABLES: u64 = (384_006_168 + 384_016_682) * 264;

const TP8_EP: &str = "tp: 8, pp: 1, dp: 1, enable_expert_parallel: true";

fn resolve(engine: &str) -> PoolResolution {
    resolve_on("b200", TP8_EP, engine)
}

#[test]
fn on_blackwell_a_block_is_128_tokens_of_compressed_latents_and_indexer_keys() {
    let pool = resolve("");
    let sc = pool.engine.sparse.as_ref().expect("the sparse cache");
    assert_eq!(sc.layout, "sm100");
    assert_eq!(pool.engine.block_size, 128);
    // Three ratio-2 sources: 64 latents of 288 B and 64 keys of 132 B
    // (8,448 → 8,704 aligned); one ratio-1 source: 128 of each.
    assert_eq!(
        sc.full_block_bytes,
        3 * (18_432 + 8_704) + (36_864 + 16_896)
    );
    assert_eq!(sc.full_block_bytes, 135_168);
    assert_eq!(pool.kv.kv_bytes_per_token_rank, 1_056.0);
    assert_eq!(
        pool.kv.num_gpu_blocks,
        pool.memory.kv_bytes as u64 / 135_168
    );
    // Window records of 528 B, 32 a page; 8 layers a group fill a block:
    // five groups for 40 layers, five blocks each, and one ring block.
    assert_eq!(sc.window_page_bytes, 16_896);
    assert_eq!(
        (sc.window_groups, sc.window_blocks_per_group, sc.ring_blocks),
        (5, 5, 1)
    );
}

#[test]
fn the_fp8_ds_mla_cache_and_hopper_change_the_records_and_the_block() {
    let fp8 = resolve(", cache_dtype: fp8_ds_mla");
    assert_eq!(
        fp8.engine.sparse.as_ref().unwrap().full_block_bytes,
        211_968
    );
    let hopper = resolve_on("h200", TP8_EP, "");
    let sc = hopper.engine.sparse.as_ref().unwrap();
    assert_eq!((sc.layout.as_str(), hopper.engine.block_size), ("sm90", 64));
    // 584-byte records aligned to 576 in 64-token blocks.
    assert_eq!(sc.full_block_bytes, 116_928);
    assert_eq!(sc.window_groups, 7);
}

#[test]
fn engram_config_puts_the_tables_in_gpu_or_host_memory() {
    let host = resolve("");
    let gpu = resolve(", engram_config: {cpu_offload: false}");
    let (h, g) = (host.engine.sparse.unwrap(), gpu.engine.sparse.unwrap());
    assert_eq!(
        h.engram_residency, "host",
        "one replica a node: its own copy"
    );
    assert_eq!(h.engram_gpu_bytes_per_rank, 0);
    assert_eq!(h.engram_host_bytes_per_node, TABLES);
    // TP 8 shares the 24 lookup columns three a rank: an eighth of the
    // tables on each GPU, out of the KV cache.
    assert_eq!(g.engram_residency, "gpu");
    assert_eq!(g.engram_gpu_bytes_per_rank, TABLES / 8);
    assert_eq!(
        host.memory.kv_bytes - gpu.memory.kv_bytes,
        g.engram_gpu_bytes_per_rank as i64
    );
    // Several replicas a node share one host copy by default, or split it.
    let dp = "tp: 4, pp: 1, dp: 4, dp_local: 2, enable_expert_parallel: true";
    let shared = resolve_on("b200", dp, "").engine.sparse.unwrap();
    assert_eq!(shared.engram_residency, "host-shared");
    let split = resolve_on("b200", dp, ", engram_config: {dp_shared_memory: false}")
        .engine
        .sparse
        .unwrap();
    assert_eq!(split.engram_residency, "host-split");
    // Without sharing, two replicas a node hold the tables in GPU memory
    // split over TP 4 × 2 ranks.
    let gpu_split = resolve_on("b200", dp, ", engram_config: {cpu_offload: false}")
        .engine
        .sparse
        .unwrap();
    assert_eq!(gpu_split.engram_gpu_bytes_per_rank, TABLES / 8);
    let gpu_tp4 = resolve_on(
        "b200",
        "tp: 4, pp: 1, dp: 2, dp_local: 1, enable_expert_parallel: true",
        ", engram_config: {cpu_offload: false}",
    );
    assert_eq!(
        gpu_tp4.engine.sparse.unwrap().engram_gpu_bytes_per_rank,
        TABLES / 4
    );
}

#[test]
fn swa_bounded_replay_decides_what_a_hit_recomputes() {
    let on = resolve("");
    assert_eq!(setting(&on, "swa_bounded_replay"), "true");
    assert_eq!(on.engine.sparse.as_ref().unwrap().prefix_replay_tokens, 128);
    let off = resolve(", swa_bounded_replay: false");
    assert_eq!(off.engine.sparse.as_ref().unwrap().prefix_replay_tokens, 0);
    assert!(!off.engine.sparse.unwrap().swa_bounded_replay);
}

#[test]
fn a_mega_moe_backend_turns_on_the_models_sequence_parallelism() {
    let plain = resolve("");
    assert!(!plain.engine.sparse.unwrap().sequence_parallel);
    let mega = resolve(", moe_backend: deep_gemm_mega_moe");
    assert!(mega.engine.sparse.unwrap().sequence_parallel);
    // Data parallelism does it too, with expert and tensor parallelism.
    let dp = resolve_on(
        "b200",
        "tp: 2, pp: 1, dp: 8, dp_local: 4, enable_expert_parallel: true",
        "",
    );
    assert!(dp.engine.sparse.unwrap().sequence_parallel);
}

#[test]
fn a_mega_moe_backend_without_expert_parallelism_is_refused() {
    let report = validate_pair(
        &scenario("b200"),
        "kind: Deployment\nname: d\npools:\n  - role: colocated\n    nodes: 2\n    parallel: {tp: 8, pp: 1, dp: 1}\n    engine: {max_model_len: 131072, moe_backend: deep_gemm_mega_moe}\n",
    );
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.code == "mega-moe-needs-expert-parallel")
    );
}
