//! A hybrid recurrent model (Nemotron-H-8B: 24 Mamba2 mixers, 4 attention
//! layers, 24 MLPs) as vLLM 0.31.0 sets up its cache, and what each of the
//! Deployment's recurrent keys changes, figure by figure:
//!
//! - the state of one sequence in one Mamba2 layer
//!   (`vllm/model_executor/layers/mamba/mamba_utils.py` `mamba2_state_shape`,
//!   dtypes by `MambaStateDtypeCalculator`; Nemotron-H's SSM state is
//!   float32 under `auto`, `vllm/model_executor/models/config.py`);
//! - the attention block raised until one attention page holds a state
//!   (`Platform._align_hybrid_block_size`, `vllm/platforms/interface.py`);
//! - the cache mode (`MambaModelConfig.verify_and_update_config`);
//! - the pool's blocks: 4-layer groups (1 attention, 6 Mamba) sharing one
//!   pool, a block id holding one page of 4 layers
//!   (`vllm/v1/core/kv_cache_utils.py`).

mod common;

use common::{setting, validate_pair};
use pdsim_spec::resolve::PoolResolution;

const SCENARIO: &str = "kind: Scenario\nname: s\nmodel: nemotron-h-8b\ncoefficients: [cost-model-host-overheads]\nengine_version: \"0.31.0\"\nworkload: {shape: chatbot}\ncluster: {hardware: h100, nodes: 1, gpus_per_node: 8}\n";

fn resolve(engine: &str, tp: u64) -> PoolResolution {
    let deployment = format!(
        "kind: Deployment\nname: d\npools:\n  - role: colocated\n    nodes: 1\n    parallel: {{tp: {tp}, pp: 1, dp: 1}}\n    engine: {{max_model_len: 8192{engine}}}\n"
    );
    let report = validate_pair(SCENARIO, &deployment);
    assert!(report.valid, "{:#?}", report.problems);
    assert!(
        report
            .problems
            .iter()
            .all(|p| p.code != "mamba-cache-mode-matches-model"),
        "a hybrid model reads the mamba keys"
    );
    report.resolutions[0].pools[0].clone()
}

#[test]
fn the_model_counts_its_layers_and_parameters_by_kind() {
    let pool = resolve("", 1);
    // 16 GB of bf16 weights: 8,100,852,736 parameters (embedding and head
    // 1,073,741,824; 24 Mamba2 layers of 109,635,968; 4 attention layers of
    // 41,943,040; 24 relu2 MLPs of 176,160,768; 53 norms of 4,096).
    assert_eq!(pool.memory.weights_bytes, 2 * 8_100_852_736);
    // KV per token: only the four attention layers, 8 heads × 128 × 2 × 2 B.
    assert_eq!(pool.kv.kv_bytes_per_token_rank, 4.0 * 4096.0);
}

#[test]
fn by_default_the_state_is_bf16_conv_and_float32_ssm_in_1040_token_blocks() {
    let pool = resolve("", 1);
    let h = pool.engine.hybrid.as_ref().expect("hybrid");
    assert_eq!(
        (h.conv_dtype.as_str(), h.ssm_dtype.as_str()),
        ("bfloat16", "float32")
    );
    // 3 × 10,240 conv values in bf16 + 128 × 64 × 128 SSM values in fp32.
    assert_eq!(h.state_bytes_per_layer, 61_440.0 + 4_194_304.0);
    // 16 × ⌈4,255,744 / (16 × 4,096)⌉.
    assert_eq!(h.attention_block_tokens, 1040);
    assert_eq!(pool.engine.block_size, 1040);
    assert!(
        pool.overrides
            .iter()
            .any(|o| o.field == "block_size" && o.resolved == "1040")
    );
    assert_eq!(
        h.mamba_cache_mode, "align",
        "prefix caching is on by default"
    );
    assert_eq!(
        (h.group_layers, h.attention_groups, h.mamba_groups),
        (4, 1, 6)
    );
    assert_eq!(h.state_blocks_per_request, 6);
    // One block id holds a 4-layer page of 1,040 tokens: 17,039,360 bytes.
    let block_bytes = 4 * 1040 * 4096;
    assert_eq!(
        pool.kv.num_gpu_blocks,
        pool.memory.kv_bytes as u64 / block_bytes
    );
    assert_eq!(pool.kv.tokens_per_rank, pool.kv.num_gpu_blocks * 1040);
    assert_eq!(setting(&pool, "mamba_ssm_cache_dtype"), "float32");
}

#[test]
fn mamba_ssm_cache_dtype_sizes_the_ssm_state_and_so_the_block() {
    let pool = resolve(", mamba_ssm_cache_dtype: bfloat16", 1);
    let h = pool.engine.hybrid.as_ref().unwrap();
    assert_eq!(h.ssm_dtype, "bfloat16");
    assert_eq!(h.state_bytes_per_layer, 61_440.0 + 2_097_152.0);
    assert_eq!(
        pool.engine.block_size,
        16 * 2_158_592_u64.div_ceil(16 * 4096)
    );
    assert_eq!(pool.engine.block_size, 528);
    // Blocks of 528 tokens instead of 1,040 in the same bytes: 1,040 / 528
    // times as many, give or take the floor.
    let default = resolve("", 1);
    assert_eq!(
        pool.kv.num_gpu_blocks,
        pool.memory.kv_bytes as u64 / (4 * 528 * 4096)
    );
    assert!(pool.kv.num_gpu_blocks * 528 >= default.kv.num_gpu_blocks * 1040);
}

#[test]
fn mamba_cache_dtype_sizes_the_conv_state_and_the_ssm_state_under_auto_elsewhere() {
    let pool = resolve(", mamba_cache_dtype: float32", 1);
    let h = pool.engine.hybrid.as_ref().unwrap();
    assert_eq!(h.conv_dtype, "float32");
    // Nemotron-H's SSM state stays float32 under auto.
    assert_eq!(h.state_bytes_per_layer, 122_880.0 + 4_194_304.0);
    assert_eq!(pool.engine.block_size, 1056);
    let both = resolve(
        ", mamba_cache_dtype: float32, mamba_ssm_cache_dtype: float16",
        1,
    );
    let h = both.engine.hybrid.as_ref().unwrap();
    assert_eq!(h.state_bytes_per_layer, 122_880.0 + 2_097_152.0);
}

#[test]
fn mamba_cache_mode_all_aligns_blocks_to_the_chunk_and_none_needs_prefix_caching_off() {
    let all = resolve(", mamba_cache_mode: all", 1);
    let h = all.engine.hybrid.as_ref().unwrap();
    assert_eq!(h.mamba_cache_mode, "all");
    // 128 × ⌈⌈4,255,744 / 4,096⌉ / 128⌉: the SSD chunk of 128 tokens.
    assert_eq!(all.engine.block_size, 1152);
    // With prefix caching on, `none` becomes `align`, said as an override.
    let none = resolve(", mamba_cache_mode: none", 1);
    assert_eq!(
        none.engine.hybrid.as_ref().unwrap().mamba_cache_mode,
        "align"
    );
    assert!(
        none.overrides
            .iter()
            .any(|o| o.field == "mamba_cache_mode" && o.resolved == "align")
    );
    let off = resolve(", mamba_cache_mode: none, enable_prefix_caching: false", 1);
    assert_eq!(off.engine.hybrid.as_ref().unwrap().mamba_cache_mode, "none");
    assert_eq!(setting(&off, "mamba_cache_mode"), "none");
}

#[test]
fn tensor_parallelism_splits_the_state_and_the_page_alike() {
    let pool = resolve("", 2);
    let h = pool.engine.hybrid.as_ref().unwrap();
    assert_eq!(h.state_bytes_per_layer, (61_440.0 + 4_194_304.0) / 2.0);
    assert_eq!(pool.engine.block_size, 1040, "both pages halve");
}
