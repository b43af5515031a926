//! What would run: each pool's engine settings with every omitted one filled
//! by the release's default, the requests the engine does not honor, and an
//! estimate of KV capacity per engine with its memory breakdown.
//!
//! The memory model follows how vLLM sizes its KV cache
//! (`vllm/v1/worker/gpu_worker.py` `determine_available_memory`,
//! `vllm/utils/mem_utils.py`): the requested fraction of device memory, less
//! the weights each rank loads, the profile run's activation peak, CUDA-graph
//! memory and non-torch allocations, divided into blocks of `block_size`
//! tokens (`vllm/v1/core/kv_cache_utils.py`). The weights and KV figures are
//! exact for the model structure; activation, graph and non-torch memory are
//! estimates, labelled as such.
//!
//! A release whose rules pack carries `memory.rbln_estimate` (vllm-rbln)
//! sizes KV by vllm-rbln's formula instead (`rbln_memory`): no profile run,
//! kernel sizes aligned per layer, and a buffer per compiled runtime.

use crate::catalog::Chip;
use crate::deployment::{Deployment, Pool, ROLE_LABEL};
use crate::layout::PoolLayout;
use crate::model::{Attention, Model};
use crate::quantity::MaxModelLen;
use crate::rules::pack::{CaptureSizeExtras, RulesPack};
use crate::validate::scenario::ResolvedScenario;
use serde::Serialize;
use std::collections::BTreeMap;

/// One engine setting as it will run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Setting {
    pub key: String,
    pub value: String,
    /// `stated`, `default` (the release's) or `derived`.
    pub origin: &'static str,
}

/// A request the engine does not honor as written.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Override {
    pub field: String,
    pub requested: String,
    pub resolved: String,
    pub reason: String,
}

/// The settings one pool's engines run with, typed for later stages.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineConfig {
    /// Whether the model uses EAGLE-style drafting (its own KV, lookahead
    /// slots, last hit block dropped).
    pub spec_eagle_style: bool,
    /// KV slots reserved past a request's tokens for the drafter
    /// (`num_lookahead_tokens`).
    pub spec_lookahead_tokens: u64,
    /// Model inputs the drafter adds to every scheduled request, paid from
    /// the step's input budget where the release keeps one
    /// (`drafter_input_slots`): `SpeculativeConfig.max_num_new_slots_for_drafting`.
    pub spec_draft_slots: u64,
    pub block_size: u64,
    pub max_num_batched_tokens: u64,
    pub max_num_seqs: u64,
    /// 0 leaves prefills uncapped.
    pub long_prefill_token_threshold: u64,
    pub long_prefill_waiver_when_alone: bool,
    /// The release's `pad_spec_decode` condition.
    pub pad_spec_decode: crate::rules::pack::PadSpecDecode,
    /// The release's `victim_blocks_must_be_freeable`.
    pub victim_blocks_must_be_freeable: bool,
    /// The release's `kv_holding_first`.
    pub kv_holding_first: bool,
    /// The release's `deferred_block_frees`.
    pub deferred_block_frees: bool,
    /// The release's `async_load_reserve`.
    pub async_load_reserve: crate::rules::pack::AsyncLoadReserve,
    /// The release's frontend batches prompts for its tokenizer
    /// (`microbatch_tokenizer`).
    pub microbatch_tokenizer: bool,
    /// Where the release's API server stamps a request's arrival time
    /// (`arrival_stamp`).
    pub arrival_stamp: crate::rules::pack::ArrivalStamp,
    /// Admission reserves blocks for the whole remaining prompt
    /// (`scheduler_reserve_full_isl`, `vllm/config/scheduler.py`).
    pub reserve_full_prompt: bool,
    /// Freed blocks without a hash are reused first (`BlockPool.free_blocks`,
    /// `vllm/v1/core/block_pool.py`).
    pub unhashed_blocks_to_front: bool,
    /// The release runs a prefill alone in its step (`lone_prefill_steps`).
    pub lone_prefill_steps: bool,
    /// The release caches a step's blocks once its schedule is final
    /// (`delay_cache_blocks`).
    pub delay_cache_blocks: bool,
    /// The release runs a many-module MTP drafter as multi-module MTP
    /// (`multi_module_mtp`).
    pub multi_module_mtp: bool,
    pub gpu_memory_utilization: f64,
    pub scheduling_policy: String,
    pub async_scheduling: bool,
    pub frontend: String,
    pub cudagraph_mode: String,
    pub cudagraph_capture_sizes: Vec<u64>,
    pub enable_prefix_caching: bool,
    /// Tokens per prefix-reuse unit: block_size, or max_num_batched_tokens
    /// under vllm-rbln's sub-block prefix caching.
    pub prefix_reuse_tokens: u64,
    pub cache_dtype: String,
    pub all2all_backend: String,
    /// `custom`, `nccl`, or `none` when there is no tensor-parallel all-reduce.
    pub allreduce_backend: String,
    pub sequence_parallel_moe: bool,
    pub cascade_attention: bool,
    pub dbo_enabled: bool,
    pub dbo_decode_token_threshold: u64,
    pub dbo_prefill_token_threshold: u64,
    pub spec_method: Option<String>,
    pub num_spec_tokens: u64,
    pub eplb_enabled: bool,
    pub num_redundant_experts: u64,
    pub weight_bits: u32,
    /// LMCache's chunk size when the pool's engines run LMCache
    /// (`offload.connector: LMCacheConnectorV1`; under P/D only the
    /// prefill pools, where the serving chart sets LMCache's environment):
    /// the deployment has no key for it, so it is the rules pack's
    /// `lmcache_chunk_tokens`. `None` without LMCache.
    pub lmcache_chunk_tokens: Option<u64>,
    /// A hybrid model's recurrent state (see [`HybridState`]); `None` for
    /// models whose layers all keep KV per token.
    pub hybrid: Option<HybridState>,
    /// DeepSeek-V4.1's cache (see [`SparseCache`]).
    pub sparse: Option<SparseCache>,
}

/// DeepSeek-V4.1's KV cache, Engram residency and parallelism as vLLM
/// 0.31.0 sets them up (`vllm/models/deepseek_v41/`; the layout and its
/// figures: `research/deepseek-v4.1-in-vllm-0.31.0.md` section 2).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SparseCache {
    /// `sm100` (mega attention, nvfp4-packed compressed latents) or `sm90`.
    pub layout: String,
    /// Bytes of one compressed latent state and of one window record.
    pub compressed_state_bytes: u64,
    pub window_record_bytes: u64,
    /// Bytes a block of the full group holds (compressed latents and
    /// indexer keys of every kv-source layer): a block id's size.
    pub full_block_bytes: u64,
    /// The window cache's page (32 tokens) and its groups sharing the pool.
    pub window_page_bytes: u64,
    pub window_groups: u64,
    /// Window blocks a decoding request holds per window group (the 128
    /// window plus the token being computed, in 32-token blocks), and the
    /// one compressor ring block.
    pub window_blocks_per_group: u64,
    pub ring_blocks: u64,
    /// The sliding window, tokens, kept in 32-token window blocks.
    pub sliding_window: u64,
    /// `swa_bounded_replay` as resolved, and the tokens a prefix hit
    /// recomputes (the window) with it.
    pub swa_bounded_replay: bool,
    pub prefix_replay_tokens: u64,
    /// Sequence parallelism the model turns on itself.
    pub sequence_parallel: bool,
    /// Where the Engram tables live: `gpu`, `host-shared` (one copy a
    /// node), `host-split` (split across the node's replicas) or `host`
    /// (one copy a replica); `none` without Engram.
    pub engram_residency: String,
    pub engram_gpu_bytes_per_rank: u64,
    pub engram_host_bytes_per_node: u64,
    /// Rows of its head shard a rank reads for each token in each Engram
    /// layer (`cdiv(lookups, shards)`, `common/engram.py`); 0 without
    /// Engram.
    pub engram_rows_per_rank: u64,
}

/// How a hybrid model's Mamba2 states are kept, as vLLM 0.31.0 resolves
/// it: the cache mode, the state dtypes, the per-layer page each state
/// fills, and the KV cache groups that share the block pool.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HybridState {
    /// `none`, `align` or `all` after resolution: prefix caching on turns
    /// `none` into `align`, off forces `none`
    /// (`MambaModelConfig.verify_and_update_config`,
    /// `vllm/model_executor/models/config.py`).
    pub mamba_cache_mode: String,
    pub conv_dtype: String,
    pub ssm_dtype: String,
    /// One sequence's state in one Mamba2 layer on one rank, before the
    /// page is padded up to the attention page.
    pub state_bytes_per_layer: f64,
    /// The attention block size the state forced (`block_size` is at least
    /// this; `Platform._align_hybrid_block_size`, `vllm/platforms/interface.py`).
    pub attention_block_tokens: u64,
    /// KV cache groups of `group_layers` layers each sharing one pool of
    /// blocks (`_get_kv_cache_groups_uniform_page_size`,
    /// `vllm/v1/core/kv_cache_utils.py`): attention groups and Mamba groups.
    pub group_layers: u64,
    pub attention_groups: u64,
    pub mamba_groups: u64,
    /// Blocks a running request holds for its states: one a Mamba group
    /// (the state is updated in place; `align` holds a second one in the
    /// step after it crosses a block boundary, which the engine simulates,
    /// `crates/engine/src/mamba.rs`).
    pub state_blocks_per_request: u64,
}

/// Per-rank memory, in bytes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryBreakdown {
    pub device_bytes: u64,
    pub requested_bytes: u64,
    pub weights_bytes: u64,
    pub draft_weights_bytes: u64,
    pub activation_peak_bytes: u64,
    pub cudagraph_bytes: u64,
    pub non_torch_bytes: u64,
    /// What is left for KV; negative when the rest does not fit.
    pub kv_bytes: i64,
    /// vllm-rbln's estimate, when the release sizes KV that way; then
    /// `requested_bytes` is the usable DRAM after the system reserve,
    /// `weights_bytes` and `draft_weights_bytes` are the kernel sizes and
    /// `cudagraph_bytes` is the runtime buffers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rbln: Option<RblnMemory>,
}

/// The terms of vllm-rbln's KV estimate for one rank
/// (`vllm_rbln/v1/worker/utils.py` `estimate_available_memory`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RblnMemory {
    /// DRAM the runtime keeps for itself, outside `requested_bytes`.
    pub system_reserved_bytes: u64,
    /// The decode batch buckets, each compiled as its own runtime.
    pub decode_batch_buckets: Vec<u64>,
    /// Whether each decode bucket has a second, padded MoE runtime.
    pub specialized_moe_decode: bool,
    /// Prefill, decode and draft runtimes that each reserve a buffer.
    pub num_runtimes: u64,
    pub chiplets: u64,
    pub buffer_bytes_per_runtime_chiplet: u64,
    /// What the subtraction leaves before the KV heads are spread over the
    /// chiplets.
    pub kv_bytes_before_chiplet_split: i64,
    /// Chiplets that each hold a full copy of the KV (fewer KV heads than
    /// chiplets), dividing the KV memory.
    pub kv_replicas: u64,
    /// KV heads of the fullest chiplet when the heads do not divide evenly;
    /// 0 when they do.
    pub kv_heads_per_chiplet_uneven: u64,
}

/// KV capacity of one data-parallel rank (one engine core's scheduler).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KvCapacity {
    pub kv_bytes_per_token_rank: f64,
    pub num_gpu_blocks: u64,
    /// num_gpu_blocks × block_size, as `vllm:cache_config_info` implies.
    pub tokens_per_rank: u64,
    /// Summed over the engine's data-parallel ranks.
    pub tokens_per_engine: u64,
    pub max_model_len: u64,
    pub max_model_len_origin: &'static str,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PoolResolution {
    pub index: usize,
    pub layout: PoolLayout,
    pub labels: BTreeMap<String, String>,
    pub settings: Vec<Setting>,
    pub overrides: Vec<Override>,
    pub engine: EngineConfig,
    pub memory: MemoryBreakdown,
    pub kv: KvCapacity,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Resolution {
    pub deployment: String,
    pub scenario: String,
    pub engine_version: String,
    pub rules_pack: String,
    pub model: String,
    pub chip: String,
    pub pools: Vec<PoolResolution>,
}

const GIB: f64 = (1u64 << 30) as f64;

fn batch_defaults(pack: &RulesPack, chip_name: &str, chip: &Chip) -> (u64, u64) {
    pack.defaults
        .batch_defaults
        .iter()
        .find(|b| {
            chip.memory_gib >= b.min_memory_gib && !b.exclude_chips.iter().any(|c| c == chip_name)
        })
        .map(|b| (b.max_num_batched_tokens, b.max_num_seqs))
        .unwrap_or((2048, 256))
}

/// The capture sizes vLLM generates up to `max`: 1, 2, 4, then steps of 8 to
/// 248, then steps of 16 (`vllm/config/vllm.py`, `_set_cudagraph_sizes`).
pub fn generated_capture_sizes(max: u64) -> Vec<u64> {
    // The field checks refuse larger sizes; the clamp keeps this function
    // total for any caller.
    let max = max.min(crate::validate::limits::MAX_CAPTURE_SIZE as u64);
    let mut sizes: Vec<u64> = [1, 2, 4].into_iter().filter(|s| *s <= max).collect();
    sizes.extend((8..=248).step_by(8).filter(|s| *s <= max));
    sizes.extend((256..=max.max(256)).step_by(16).filter(|s| *s <= max));
    sizes
}

/// The capture sizes `_set_cudagraph_sizes` (`vllm/config/vllm.py`) picks
/// when none are stated: the grid up to the ceiling — the stated
/// `max_cudagraph_capture_size`, or `max_num_seqs · (1 + k) · 2` within the
/// platform's `cap` — and the `max_num_batched_tokens` budget, plus the
/// release's extras: the budget itself when within the ceiling, even off the
/// stride, and, when the ceiling is the default, the uniform decode sizes
/// n · (1 + k) with drafts or (0.31.0) `max_num_seqs` without them.
pub fn default_capture_sizes(
    extras: CaptureSizeExtras,
    max_num_seqs: u64,
    num_spec_tokens: u64,
    max_num_batched_tokens: u64,
    cap: u64,
    stated_max: Option<u64>,
) -> Vec<u64> {
    let query_len = 1 + num_spec_tokens;
    let default_max = max_num_seqs
        .saturating_mul(query_len)
        .saturating_mul(2)
        .min(cap);
    let ceiling = stated_max.unwrap_or(default_max);
    let max = ceiling.min(max_num_batched_tokens);
    let mut sizes = generated_capture_sizes(max);
    if extras == CaptureSizeExtras::None {
        return sizes;
    }
    // "ensure max_num_tokens is captured if within max capture size".
    if max_num_batched_tokens <= max {
        sizes.push(max_num_batched_tokens);
    }
    if stated_max.is_none() {
        let uniform: Vec<u64> = if query_len > 1 {
            uniform_decode_request_counts(max_num_seqs, cap)
                .into_iter()
                .map(|n| n.saturating_mul(query_len))
                .filter(|s| *s <= ceiling)
                .collect()
        } else if extras == CaptureSizeExtras::MaxTokensUniformDecodeAndMaxSeqs
            && max_num_seqs <= ceiling
        {
            vec![max_num_seqs]
        } else {
            Vec::new()
        };
        sizes.extend(uniform.into_iter().filter(|s| *s <= max_num_batched_tokens));
    }
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// `request_counts` in `_set_cudagraph_sizes` (`vllm/config/vllm.py`,
/// 0.29.0 and later): the request counts whose uniform decode batches are
/// captured with drafts — 1, 2, 4, steps of 8 below 256, steps of 16 from
/// 256, and `max_num_seqs` itself, at most the platform's default ceiling.
pub fn uniform_decode_request_counts(max_num_seqs: u64, platform_max: u64) -> Vec<u64> {
    let max = max_num_seqs
        .min(platform_max)
        .min(crate::validate::limits::MAX_CAPTURE_SIZE as u64);
    let mut counts: Vec<u64> = [1, 2, 4].into_iter().filter(|n| *n <= max).collect();
    counts.extend((8..(max + 1).min(256)).step_by(8));
    counts.extend((256..=max.max(255)).step_by(16).filter(|n| *n <= max));
    counts.push(max);
    counts.sort_unstable();
    counts.dedup();
    counts
}

fn is_sm100(chip: &Chip) -> bool {
    chip.compute_capability
        .as_deref()
        .is_some_and(|c| c.starts_with("10."))
}

/// Bits per weight for a `quantization` override, or `None` to keep the
/// checkpoint's format.
fn quantization_bits(name: &str) -> Option<u32> {
    Some(match name {
        "fp8"
        | "fp8_per_block"
        | "fp8_per_channel"
        | "fp8_per_tensor"
        | "fbgemm_fp8"
        | "deepseek_v4_fp8"
        | "modelopt"
        | "modelopt_mxfp8"
        | "mxfp8"
        | "experts_int8"
        | "int8_per_channel_weight_only" => 8,
        "awq" | "awq_marlin" | "auto_awq" | "gptq" | "gptq_marlin" | "auto_gptq" | "moe_wna16"
        | "mxfp4" | "gpt_oss_mxfp4" | "modelopt_fp4" | "nvfp4_per_token" => 4,
        _ => return None,
    })
}

fn put(settings: &mut Vec<Setting>, key: &str, value: String, stated: bool) {
    settings.push(Setting {
        key: key.to_string(),
        value,
        origin: if stated { "stated" } else { "default" },
    });
}

/// Resolves one pool. `pool` has passed the field checks.
pub fn resolve_pool(
    pack: &RulesPack,
    pool: &Pool,
    layout: &PoolLayout,
    chip_name: &str,
    chip: &Chip,
    model: &Model,
) -> PoolResolution {
    let e = &pool.engine;
    let d = &pack.defaults;
    let mut settings = Vec::new();
    let mut overrides = Vec::new();
    let pick_u = |v: Option<i64>, default: u64| v.map(|x| x.max(0) as u64).unwrap_or(default);
    let pick_s =
        |v: &Option<String>, default: &str| v.clone().unwrap_or_else(|| default.to_string());

    let is_mla = matches!(model.attention, Attention::Mla { .. });
    let block_default = if is_mla {
        d.mla_block_size
    } else {
        d.block_size
    };
    let block_size = pick_u(e.block_size, block_default).max(1);
    put(
        &mut settings,
        "block_size",
        block_size.to_string(),
        e.block_size.is_some(),
    );
    let (mbt_default, seqs_default) = batch_defaults(pack, chip_name, chip);
    let max_num_batched_tokens = pick_u(e.max_num_batched_tokens, mbt_default).max(1);
    put(
        &mut settings,
        "max_num_batched_tokens",
        max_num_batched_tokens.to_string(),
        e.max_num_batched_tokens.is_some(),
    );
    let max_num_seqs = pick_u(e.max_num_seqs, seqs_default).max(1);
    put(
        &mut settings,
        "max_num_seqs",
        max_num_seqs.to_string(),
        e.max_num_seqs.is_some(),
    );
    let long_prefill = pick_u(e.long_prefill_token_threshold, 0);
    put(
        &mut settings,
        "long_prefill_token_threshold",
        long_prefill.to_string(),
        e.long_prefill_token_threshold.is_some(),
    );
    let gmu = e
        .gpu_memory_utilization
        .filter(|v| *v > 0.0)
        .unwrap_or(d.gpu_memory_utilization);
    put(
        &mut settings,
        "gpu_memory_utilization",
        format!("{gmu}"),
        e.gpu_memory_utilization.is_some_and(|v| v > 0.0),
    );
    let policy = pick_s(&e.scheduling_policy, &d.scheduling_policy);
    put(
        &mut settings,
        "scheduling_policy",
        policy.clone(),
        e.scheduling_policy.is_some(),
    );
    let frontend = pick_s(&e.frontend, &d.frontend);
    put(
        &mut settings,
        "frontend",
        frontend.clone(),
        e.frontend.is_some(),
    );
    let cache_dtype = pick_s(&e.cache_dtype, &d.cache_dtype);
    put(
        &mut settings,
        "cache_dtype",
        cache_dtype.clone(),
        e.cache_dtype.is_some(),
    );
    let prefix_caching = e.enable_prefix_caching.unwrap_or(true);
    put(
        &mut settings,
        "enable_prefix_caching",
        prefix_caching.to_string(),
        e.enable_prefix_caching.is_some(),
    );
    let lb = pick_s(
        &pool.parallel.data_parallel_load_balancing,
        &d.data_parallel_load_balancing,
    );
    put(
        &mut settings,
        "data_parallel_load_balancing",
        lb,
        pool.parallel.data_parallel_load_balancing.is_some(),
    );

    // Speculation.
    let spec_method = e.speculative.as_ref().map(|s| s.method.clone());
    let k = e
        .speculative
        .as_ref()
        .map_or(0, |s| s.num_spec_tokens.max(0) as u64);
    let drafter = spec_method
        .as_deref()
        .map(|m| pack.drafter(m, k))
        .unwrap_or_default();
    if let Some(method) = &spec_method {
        put(&mut settings, "speculative.method", method.clone(), true);
        put(
            &mut settings,
            "speculative.num_spec_tokens",
            k.to_string(),
            true,
        );
    }

    // CUDA graphs.
    let requested_mode = pick_s(&e.cudagraph_mode, &d.cudagraph_mode);
    let (cudagraph_mode, capture_sizes) = if !pack.features.cuda_graphs {
        if e.cudagraph_mode.as_deref().is_some_and(|m| m != "NONE") {
            overrides.push(Override {
                field: "cudagraph_mode".into(),
                requested: requested_mode.clone(),
                resolved: "NONE".into(),
                reason: format!(
                    "{} compiles static graphs; CUDA graphs do not apply",
                    pack.name
                ),
            });
        }
        ("NONE".to_string(), Vec::new())
    } else if requested_mode == "NONE" {
        (requested_mode, Vec::new())
    } else {
        let sizes = match &e.cudagraph_capture_sizes {
            Some(stated) => {
                let mut kept: Vec<u64> = stated
                    .iter()
                    .filter(|s| **s >= 1 && (**s as u64) <= max_num_batched_tokens)
                    .map(|s| *s as u64)
                    .collect();
                kept.sort_unstable();
                kept.dedup();
                kept
            }
            None => {
                let cap = if is_sm100(chip) {
                    d.max_cudagraph_capture_size_sm100
                } else {
                    d.max_cudagraph_capture_size
                };
                default_capture_sizes(
                    pack.features.capture_size_extras,
                    max_num_seqs,
                    k,
                    max_num_batched_tokens,
                    cap,
                    e.max_cudagraph_capture_size.map(|m| m.max(0) as u64),
                )
            }
        };
        (requested_mode, sizes)
    };
    put(
        &mut settings,
        "cudagraph_mode",
        cudagraph_mode.clone(),
        e.cudagraph_mode.is_some(),
    );
    put(
        &mut settings,
        "max_cudagraph_capture_size",
        capture_sizes
            .last()
            .map_or("none".into(), |m| m.to_string()),
        e.max_cudagraph_capture_size.is_some(),
    );
    put(
        &mut settings,
        "cudagraph_capture_sizes",
        format!("{} sizes", capture_sizes.len()),
        e.cudagraph_capture_sizes.is_some(),
    );

    // Communication.
    let all2all = pick_s(&e.all2all_backend, &d.all2all_backend);
    if model.is_moe() {
        put(
            &mut settings,
            "all2all_backend",
            all2all.clone(),
            e.all2all_backend.is_some(),
        );
    }
    let requested_ar = match (&e.allreduce_backend, e.disable_custom_all_reduce) {
        (Some(b), _) => b.clone(),
        (None, Some(true)) => "nccl".into(),
        _ => "custom".into(),
    };
    let stated_ar = e.allreduce_backend.is_some() || e.disable_custom_all_reduce.is_some();
    let tp = layout.tp;
    let allreduce = if tp == 1 {
        if stated_ar {
            overrides.push(Override {
                field: "allreduce_backend".into(),
                requested: requested_ar.clone(),
                resolved: "none".into(),
                reason: "tp is 1, so there is no tensor-parallel all-reduce".into(),
            });
        }
        "none".to_string()
    } else if requested_ar == "custom" {
        let size_ok = pack.custom_allreduce_world_sizes.contains(&tp);
        let node_ok = layout
            .cluster
            .as_ref()
            .is_none_or(|c| tp <= c.gpus_per_node);
        let nvidia = chip.compute_capability.is_some();
        if size_ok && node_ok && nvidia {
            "custom".into()
        } else {
            let reason = if !nvidia {
                "the custom all-reduce kernel is CUDA-only".to_string()
            } else if !size_ok {
                format!(
                    "the custom kernel runs only at tp {:?}",
                    pack.custom_allreduce_world_sizes
                )
            } else {
                "the custom kernel runs only inside one node".to_string()
            };
            if stated_ar || !size_ok || !node_ok || !nvidia {
                overrides.push(Override {
                    field: "allreduce_backend".into(),
                    requested: "custom".into(),
                    resolved: "nccl".into(),
                    reason,
                });
            }
            "nccl".into()
        }
    } else {
        requested_ar.clone()
    };
    settings.push(Setting {
        key: "allreduce_backend".into(),
        value: allreduce.clone(),
        origin: "derived",
    });
    // vLLM's ParallelConfig.use_sequence_parallel_moe (`vllm/config/
    // parallel.py`): expert parallelism on,
    // an SP-MoE all2all backend, and both tp and dp above 1.
    let sequence_parallel_moe = model.is_moe()
        && pool.parallel.enable_expert_parallel
        && pack.sp_moe_backends.contains(&all2all)
        && layout.tp > 1
        && layout.dp > 1;

    // Async scheduling: the engine decides through its disqualifying conditions.
    let mut disqualifier = None;
    if layout.pp > 1 {
        disqualifier = Some("pipeline parallelism".to_string());
    }
    if let Some(method) = &spec_method
        && pack.async_incompatible_spec_methods.contains(method)
    {
        disqualifier = Some(format!("speculative method `{method}`"));
    }
    let async_scheduling = disqualifier.is_none() && e.async_scheduling != Some(false);
    if let (Some(true), Some(reason)) = (e.async_scheduling, &disqualifier) {
        overrides.push(Override {
            field: "async_scheduling".into(),
            requested: "true".into(),
            resolved: "false".into(),
            reason: format!("async scheduling is disabled with {reason}"),
        });
    }
    settings.push(Setting {
        key: "async_scheduling".into(),
        value: async_scheduling.to_string(),
        origin: if e.async_scheduling.is_some() {
            "stated"
        } else {
            "derived"
        },
    });

    // Cascade attention is opt-in, or opt-out where the release turns it
    // on by default (vLLM 0.15.1).
    // It never runs with decode-context parallelism
    // (`use_cascade_attention` returns False); only a stated opt-in is
    // reported as overridden.
    let cascade = e
        .disable_cascade_attn
        .map_or(pack.features.cascade_attention_by_default, |off| !off)
        && layout.dcp <= 1;
    if e.disable_cascade_attn == Some(false) && layout.dcp > 1 {
        overrides.push(Override {
            field: "disable_cascade_attn".into(),
            requested: "false".into(),
            resolved: "true".into(),
            reason: "cascade attention does not run with decode-context parallelism".into(),
        });
    }
    settings.push(Setting {
        key: "cascade_attention".into(),
        value: cascade.to_string(),
        origin: if e.disable_cascade_attn.is_some() {
            "stated"
        } else {
            "default"
        },
    });

    // Decode-context keys have no effect without dcp.
    if layout.dcp <= 1 {
        let dcp_keys = [
            ("dcp_comm_backend", e.dcp_comm_backend.clone()),
            ("dcp_q_replicate", e.dcp_q_replicate.map(|b| b.to_string())),
            (
                "cp_kv_cache_interleave_size",
                e.cp_kv_cache_interleave_size.map(|v| v.to_string()),
            ),
        ];
        for (key, value) in dcp_keys {
            if let Some(value) = value {
                overrides.push(Override {
                    field: key.into(),
                    requested: value,
                    resolved: "unused".into(),
                    reason: "dcp is 0 or 1, so decode-context settings have no effect".into(),
                });
            }
        }
    }

    // DBO.
    let dbo = e.dbo.clone().unwrap_or_default();
    let dbo_enabled = dbo.enable_dbo == Some(true);
    let dbo_decode = pick_u(dbo.dbo_decode_token_threshold, d.dbo_decode_token_threshold);
    let dbo_prefill = pick_u(
        dbo.dbo_prefill_token_threshold,
        d.dbo_prefill_token_threshold,
    );
    if dbo_enabled {
        put(
            &mut settings,
            "dbo.dbo_decode_token_threshold",
            dbo_decode.to_string(),
            dbo.dbo_decode_token_threshold.is_some(),
        );
        put(
            &mut settings,
            "dbo.dbo_prefill_token_threshold",
            dbo_prefill.to_string(),
            dbo.dbo_prefill_token_threshold.is_some(),
        );
    }

    let eplb = e.eplb.clone().unwrap_or_default();
    let eplb_enabled = eplb.enable_eplb == Some(true);
    let redundant = if eplb_enabled {
        eplb.num_redundant_experts.unwrap_or(0).max(0) as u64
    } else {
        0
    };

    let weight_bits = e
        .quantization
        .as_deref()
        .and_then(quantization_bits)
        .unwrap_or(model.weight_bits);
    let prefix_reuse_tokens = if pack.features.sub_block_prefix_reuse {
        max_num_batched_tokens
    } else {
        block_size
    };
    if pack.features.sub_block_prefix_reuse {
        settings.push(Setting {
            key: "prefix_reuse_tokens".into(),
            value: prefix_reuse_tokens.to_string(),
            origin: "derived",
        });
    }

    // A hybrid model's states decide its block size, before anything is
    // sized in blocks.
    let hybrid = model.recurrent.as_ref().map(|r| {
        resolve_hybrid(
            r,
            model,
            e,
            layout,
            &cache_dtype,
            prefix_caching,
            block_size,
        )
    });
    let block_size = match &hybrid {
        Some(h) if h.attention_block_tokens > block_size => {
            overrides.push(Override {
                field: "block_size".into(),
                requested: block_size.to_string(),
                resolved: h.attention_block_tokens.to_string(),
                reason: format!(
                    "an attention page of this model must hold one Mamba2 state ({:.0} bytes a layer on a rank), so vLLM raises the attention block (`_align_hybrid_block_size`, vllm/platforms/interface.py)",
                    h.state_bytes_per_layer
                ),
            });
            h.attention_block_tokens
        }
        _ => block_size,
    };
    if let (Some(h), Some(r)) = (&hybrid, &model.recurrent) {
        let requested = e.mamba_cache_mode.clone();
        if let Some(req) = requested.filter(|m| *m != h.mamba_cache_mode) {
            overrides.push(Override {
                field: "mamba_cache_mode".into(),
                requested: req,
                resolved: h.mamba_cache_mode.clone(),
                reason: if prefix_caching {
                    "with prefix caching on, vLLM caches Mamba states at block boundaries (`none` becomes `align`; MambaModelConfig.verify_and_update_config, vllm/model_executor/models/config.py)".into()
                } else {
                    "without prefix caching vLLM keeps one state a sequence (`none`)".into()
                },
            });
        } else {
            put(
                &mut settings,
                "mamba_cache_mode",
                h.mamba_cache_mode.clone(),
                e.mamba_cache_mode.is_some(),
            );
        }
        put(
            &mut settings,
            "mamba_cache_dtype",
            h.conv_dtype.clone(),
            e.mamba_cache_dtype.is_some(),
        );
        settings.push(Setting {
            key: "mamba_ssm_cache_dtype".into(),
            value: h.ssm_dtype.clone(),
            origin: if e
                .mamba_ssm_cache_dtype
                .as_deref()
                .is_some_and(|d| d != "auto")
            {
                "stated"
            } else if r.ssm_dtype_auto.is_some() {
                "model"
            } else {
                "derived"
            },
        });
        settings.push(Setting {
            key: "mamba_state_blocks".into(),
            value: format!(
                "{} a request ({} Mamba groups of {} layers; {:.0} bytes of state a layer on a rank)",
                h.state_blocks_per_request, h.mamba_groups, h.group_layers, h.state_bytes_per_layer
            ),
            origin: "derived",
        });
    }
    let sparse = model.sparse.as_ref().map(|sp| {
        resolve_sparse(
            sp,
            e,
            layout,
            chip,
            &cache_dtype,
            &mut settings,
            &mut overrides,
        )
    });
    let block_size = match &sparse {
        Some(sc) => {
            let backend_block = if sc.layout == "sm100" { 128 } else { 64 };
            if backend_block != block_size {
                overrides.push(Override {
                    field: "block_size".into(),
                    requested: block_size.to_string(),
                    resolved: backend_block.to_string(),
                    reason: "DeepSeek-V4.1's sparse attention and indexer take only this block on this GPU; vLLM picks the block every backend accepts (vllm/platforms/interface.py)".into(),
                });
            }
            backend_block
        }
        None => block_size,
    };
    let prefix_reuse_tokens = if pack.features.sub_block_prefix_reuse {
        prefix_reuse_tokens
    } else {
        block_size
    };
    let engine = EngineConfig {
        block_size,
        max_num_batched_tokens,
        max_num_seqs,
        long_prefill_token_threshold: long_prefill,
        long_prefill_waiver_when_alone: pack.features.long_prefill_waiver_when_alone,
        pad_spec_decode: pack.features.pad_spec_decode,
        victim_blocks_must_be_freeable: pack.features.victim_blocks_must_be_freeable,
        kv_holding_first: pack.features.kv_holding_first,
        deferred_block_frees: pack.features.deferred_block_frees,
        async_load_reserve: pack.features.async_load_reserve,
        microbatch_tokenizer: pack.features.microbatch_tokenizer,
        arrival_stamp: pack.features.arrival_stamp,
        reserve_full_prompt: pack.features.reserve_full_prompt,
        unhashed_blocks_to_front: pack.features.unhashed_blocks_to_front,
        lone_prefill_steps: pack.features.lone_prefill_steps,
        delay_cache_blocks: pack.features.delay_cache_blocks,
        multi_module_mtp: pack.features.multi_module_mtp,
        gpu_memory_utilization: gmu,
        scheduling_policy: policy,
        async_scheduling,
        frontend,
        cudagraph_mode,
        cudagraph_capture_sizes: capture_sizes,
        enable_prefix_caching: prefix_caching,
        prefix_reuse_tokens,
        cache_dtype,
        all2all_backend: all2all,
        allreduce_backend: allreduce,
        sequence_parallel_moe,
        cascade_attention: cascade,
        dbo_enabled,
        dbo_decode_token_threshold: dbo_decode,
        dbo_prefill_token_threshold: dbo_prefill,
        spec_eagle_style: drafter.eagle_style,
        spec_lookahead_tokens: drafter.lookahead_tokens,
        spec_draft_slots: drafter.draft_slots,
        spec_method,
        num_spec_tokens: k,
        eplb_enabled,
        num_redundant_experts: redundant,
        weight_bits,
        lmcache_chunk_tokens: None,
        hybrid,
        sparse,
    };
    let (memory, kv) = memory_and_kv(pack, pool, layout, chip, model, &engine);
    let mut labels = pool.labels.clone();
    labels.insert(
        ROLE_LABEL.to_string(),
        layout.role.llm_d_label().to_string(),
    );
    PoolResolution {
        index: layout.index,
        layout: layout.clone(),
        labels,
        settings,
        overrides,
        engine,
        memory,
        kv,
    }
}

/// Weights one rank loads, in bytes.
fn weights_per_rank(layout: &PoolLayout, model: &Model, engine: &EngineConfig) -> (f64, f64) {
    let p = &model.params;
    let bytes = engine.weight_bits as f64 / 8.0;
    let tp = layout.tp as f64;
    let pp = layout.pp as f64;
    // Embedding and output head stay 16-bit and are vocab-parallel; with
    // pipeline stages the first holds the embedding and the last the head.
    let embedding = p.embedding as f64 * 2.0 / tp / if layout.pp > 1 { 2.0 } else { 1.0 };
    let dense = p.dense as f64 * bytes / tp / pp;
    let expert_share = if layout.expert_parallel_width > 1 {
        layout.expert_parallel_width as f64
    } else {
        tp
    };
    let redundancy = if model.experts > 0 {
        (model.experts + engine.num_redundant_experts) as f64 / model.experts as f64
    } else {
        1.0
    };
    let expert_bytes = model.expert_weight_bits.map_or(bytes, |b| b / 8.0);
    let experts = p.experts as f64 * expert_bytes / expert_share / pp * redundancy;
    // DeepSeek-V4.1's Engram tables, when kept in GPU memory, load with
    // the weights.
    let engram = engine
        .sparse
        .as_ref()
        .map_or(0.0, |s| s.engram_gpu_bytes_per_rank as f64);
    let shared = p.moe_shared as f64 * bytes / tp / pp;
    let mut draft = 0.0;
    if let Some(method) = &engine.spec_method {
        let mtp_like = method.ends_with("mtp");
        if mtp_like && model.mtp_layers > 0 {
            // The checkpoint's MTP layers load on every rank that drafts.
            draft = p.mtp as f64 * bytes / expert_share.max(1.0);
        } else if engine.spec_eagle_style || method == "draft_model" {
            // An EAGLE head: one decoder layer, a fusion projection and its
            // own output head, in 16 bits, replicated per rank [estimate].
            let h = model.hidden_size as f64;
            let layer = 4.0 * h * h
                + 3.0 * h * (model.intermediate_size.max(model.expert_intermediate_size) as f64);
            draft = (layer + 3.0 * h * h + model.vocab_size as f64 * h) * 2.0 / tp;
        }
    }
    (embedding + dense + experts + shared + engram, draft)
}

fn memory_and_kv(
    pack: &RulesPack,
    pool: &Pool,
    layout: &PoolLayout,
    chip: &Chip,
    model: &Model,
    engine: &EngineConfig,
) -> (MemoryBreakdown, KvCapacity) {
    let device = chip.memory_gib * GIB;
    let (weights, draft) = weights_per_rank(layout, model, engine);
    if let Some(rules) = &pack.memory.rbln_estimate {
        let memory = rbln_memory(rules, layout, model, engine, device, weights, draft);
        let kv = kv_capacity(pool, layout, model, engine, memory.kv_bytes as f64);
        return (memory, kv);
    }
    let requested = (device * engine.gpu_memory_utilization).ceil();
    // Profile run: max_num_batched_tokens tokens through one layer's widest
    // tensors (residual stream, attention output, gate+up of the MLP or of
    // the routed experts), plus fp32 logits for up to max_num_seqs rows
    // [estimate, vllm/v1/worker/gpu_model_runner.py profile_run].
    let tokens = engine.max_num_batched_tokens as f64;
    let h = model.hidden_size as f64;
    let mlp_width = if model.is_moe() {
        (model.expert_intermediate_size * model.experts_per_token) as f64
    } else {
        model.intermediate_size as f64
    };
    let activation = tokens * (4.0 * h + 2.0 * mlp_width / layout.tp as f64) * 2.0
        + (engine.max_num_seqs.min(engine.max_num_batched_tokens)) as f64 * model.vocab_size as f64
            / layout.tp as f64
            * 4.0;
    let cudagraph = engine.cudagraph_capture_sizes.len() as f64
        * pack.memory.cudagraph_bytes_per_size as f64
        + if pack.features.cuda_graphs {
            0.0
        } else {
            engine.max_num_seqs as f64 * pack.memory.cudagraph_bytes_per_size as f64
        };
    let non_torch = pack.memory.non_torch_bytes as f64;
    let kv_bytes = requested - weights - draft - activation - cudagraph - non_torch;
    let memory = MemoryBreakdown {
        device_bytes: device as u64,
        requested_bytes: requested as u64,
        weights_bytes: weights as u64,
        draft_weights_bytes: draft as u64,
        activation_peak_bytes: activation as u64,
        cudagraph_bytes: cudagraph as u64,
        non_torch_bytes: non_torch as u64,
        kv_bytes: kv_bytes as i64,
        rbln: None,
    };
    let kv = kv_capacity(pool, layout, model, engine, kv_bytes);
    (memory, kv)
}

/// Rounds `x` up to a multiple of `unit` (`align` in vllm-rbln's utils).
fn align_up(x: f64, unit: f64) -> f64 {
    if unit <= 0.0 {
        x
    } else {
        (x / unit).ceil() * unit
    }
}

/// The decode batch buckets of vllm-rbln's default `exponential` strategy
/// (`ExponentialBucketingManager._build_decode_buckets`): the largest is
/// `max_num_seqs // pp`, each next one the previous divided by `step`, until
/// `limit` buckets or one below `min`.
pub fn rbln_decode_buckets(max_batch: u64, limit: u64, step: u64, min: u64) -> Vec<u64> {
    let mut buckets = vec![max_batch.max(1)];
    while (buckets.len() as u64) < limit && step > 1 {
        let next = buckets[buckets.len() - 1] / step;
        if next < min.max(1) {
            break;
        }
        buckets.push(next);
    }
    buckets.sort_unstable();
    buckets.dedup();
    buckets
}

/// vllm-rbln's KV memory for one rank (`RBLNWorker.determine_available_memory`
/// and `estimate_available_memory` in `vllm_rbln/v1/worker/`): the usable
/// DRAM after the runtime's own reserve, less the target's and the drafter's
/// kernel sizes and a buffer per runtime per chiplet, then spread over the
/// chiplets' KV-head shares. No profile run, activation or graph-capture
/// term enters it.
fn rbln_memory(
    rules: &crate::rules::pack::RblnEstimateRules,
    layout: &PoolLayout,
    model: &Model,
    engine: &EngineConfig,
    device: f64,
    weights: f64,
    draft: f64,
) -> MemoryBreakdown {
    let align = rules.kernel_alignment_bytes as f64;
    let tp = layout.tp as f64;
    let reserved = rules.system_reserved_bytes as f64;
    // `int(available_dram_bytes * gpu_memory_utilization)`.
    let usable = ((device - reserved).max(0.0) * engine.gpu_memory_utilization).floor();

    // estimate_model_kernel_size: the LM head at lm_head_bits over a vocab
    // padded to a multiple of 64, aligned per TP rank; the rest of the
    // weights (what the rank holds less an LM head and a word embedding of
    // that size) aligned per layer.
    let lm_params = align_up(
        model.vocab_size as f64,
        rules.lm_head_vocab_alignment as f64,
    ) * model.hidden_size as f64;
    let lm_bytes = lm_params * rules.lm_head_bits as f64 / 8.0;
    let lm_nbytes = align_up(lm_bytes / tp, align) * tp;
    let kernel = |layer_bytes: f64, layers: f64| -> f64 {
        align_up(layer_bytes.max(0.0) / layers.max(1.0), align) * layers.max(1.0) + lm_nbytes
    };
    let layers = model.layers.div_ceil(layout.pp) as f64;
    let target_kernel = kernel(weights - 2.0 * lm_bytes, layers);

    // The drafter's parameters include the embedding it shares with the
    // target and its own head, so the same subtraction leaves its layers:
    // an EAGLE head's estimate already counts its own head, an MTP
    // module's does not.
    let drafts = draft > 0.0;
    let draft_kernel = if drafts {
        let method = engine.spec_method.as_deref().unwrap_or("");
        let (layer_bytes, n) = if method.ends_with("mtp") {
            (draft, model.mtp_layers.max(1) as f64)
        } else {
            (draft - lm_bytes, 1.0)
        };
        kernel(layer_bytes, n)
    } else {
        0.0
    };

    // num_runtimes = 1 + (1 + specialized_moe_decode) * buckets, and a
    // drafter adds 1 + buckets; each reserves a buffer on every chiplet.
    let max_batch = (engine.max_num_seqs / layout.pp).max(1);
    let buckets = rbln_decode_buckets(
        max_batch,
        rules.decode_batch_bucket_limit,
        rules.decode_batch_bucket_step,
        rules.decode_batch_bucket_min,
    );
    let b = buckets.len() as u64;
    let specialized = layout.dp > 1 && rules.specialize_moe_decode;
    let mut runtimes = 1 + (1 + u64::from(specialized)) * b;
    if drafts {
        runtimes += 1 + b;
    }
    let buffer =
        (rules.buffer_bytes_per_runtime_chiplet * rules.chiplets_per_device * runtimes) as f64;
    let before_split = usable - target_kernel - draft_kernel - buffer;

    // The KV heads are spread over the chiplets: with fewer heads than
    // chiplets each chiplet group holds a copy, and with heads that do not
    // divide evenly the fullest chiplet decides.
    let kv_heads = match model.attention {
        Attention::Gqa { kv_heads, .. } => (kv_heads / layout.tp).max(1),
        Attention::Mla { .. } => 1,
    };
    let chiplets = rules.chiplets_per_device.max(1);
    let replicas = (chiplets / kv_heads).max(1);
    let mut kv = if before_split > 0.0 {
        (before_split as i64) / replicas as i64
    } else {
        before_split as i64
    };
    let mut uneven = 0;
    if kv_heads % chiplets != 0 {
        uneven = kv_heads.div_ceil(chiplets);
        if kv > 0 {
            kv = ((kv as i128 * kv_heads as i128) / (chiplets as i128 * uneven as i128)) as i64;
        }
    }
    MemoryBreakdown {
        device_bytes: device as u64,
        requested_bytes: usable as u64,
        weights_bytes: target_kernel as u64,
        draft_weights_bytes: draft_kernel as u64,
        activation_peak_bytes: 0,
        cudagraph_bytes: buffer as u64,
        non_torch_bytes: 0,
        kv_bytes: kv,
        rbln: Some(RblnMemory {
            system_reserved_bytes: rules.system_reserved_bytes,
            decode_batch_buckets: buckets,
            specialized_moe_decode: specialized,
            num_runtimes: runtimes,
            chiplets,
            buffer_bytes_per_runtime_chiplet: rules.buffer_bytes_per_runtime_chiplet,
            kv_bytes_before_chiplet_split: before_split as i64,
            kv_replicas: replicas,
            kv_heads_per_chiplet_uneven: uneven,
        }),
    }
}

/// DeepSeek-V4.1's cache as vLLM 0.31.0 sets it up on this chip; records
/// what it resolved in `settings` and `overrides`.
#[allow(clippy::too_many_arguments)]
fn resolve_sparse(
    sp: &crate::model::SparseLatent,
    e: &crate::deployment::Engine,
    layout: &PoolLayout,
    chip: &Chip,
    cache_dtype: &str,
    settings: &mut Vec<Setting>,
    overrides: &mut Vec<Override>,
) -> SparseCache {
    // Blackwell (compute capability 10.x) runs mega attention by default,
    // which packs compressed latents as nvfp4 (288 bytes) and window
    // records as MXFP8 (528 bytes), aligned to 512; other GPUs keep the
    // V4 records (584 bytes), aligned to 576, in 64-token blocks
    // (`attention.py` `_state_bytes`, `sparse_swa.py`, `sparse_mla.py`).
    let sm100 = chip
        .compute_capability
        .as_deref()
        .and_then(|c| c.split('.').next())
        .and_then(|m| m.parse::<u32>().ok())
        .is_some_and(|m| m >= 10);
    let (block, align, compressed, record) = if sm100 {
        (
            128u64,
            512u64,
            if cache_dtype == "fp8_ds_mla" {
                528u64
            } else {
                288
            },
            528u64,
        )
    } else {
        (64, 576, 584, 584)
    };
    let round_up = |x: u64| x.div_ceil(align) * align;
    // The FP8 indexer key: 128 values and one fp32 scale (132 bytes).
    let index_key = sp.index_head_dim + 4;
    let full_block_bytes: u64 = sp
        .kv_sources
        .iter()
        .map(|&l| {
            let ratio = sp.ratios[l as usize].max(1);
            round_up(block / ratio * compressed) + round_up(block / ratio * index_key)
        })
        .sum();
    let window_page = round_up(32 * record);
    let window_layers = sp.ratios.len() as u64;
    let per_group = (full_block_bytes / window_page).max(1);
    let window_groups = window_layers.div_ceil(per_group);
    // A decode step's window spans the 127 tokens before and the one being
    // computed: 5 blocks of 32 at most.
    let window_blocks_per_group = sp.sliding_window.div_ceil(32) + 1;
    let ring_blocks = u64::from(sp.kv_sources.iter().any(|&l| sp.ratios[l as usize] == 2));
    // swa_bounded_replay: on by default under model runner V2; vLLM turns
    // it off under prefill context parallelism (`attention.py`).
    let requested = e.swa_bounded_replay;
    let replay = requested.unwrap_or(true) && layout.pcp <= 1;
    if requested == Some(true) && !replay {
        overrides.push(Override {
            field: "swa_bounded_replay".into(),
            requested: "true".into(),
            resolved: "false".into(),
            reason: "vLLM turns bounded replay off under prefill context parallelism".into(),
        });
    } else {
        put(
            settings,
            "swa_bounded_replay",
            replay.to_string(),
            requested.is_some(),
        );
    }
    settings.push(Setting {
        key: "prefix_replay_tokens".into(),
        value: if replay { sp.sliding_window } else { 0 }.to_string(),
        origin: "derived",
    });
    // The model's own sequence parallelism (`nvidia/model.py`): one stage,
    // expert parallelism, tensor parallelism, and a mega-MoE backend or
    // data parallelism.
    let mega = e
        .moe_backend
        .as_deref()
        .is_some_and(crate::rules::is_mega_moe);
    let ep = layout.expert_parallel_width > 1;
    let sequence_parallel = layout.pp == 1 && ep && layout.tp > 1 && (mega || layout.dp > 1);
    settings.push(Setting {
        key: "sequence_parallel (DeepSeek-V4.1)".into(),
        value: sequence_parallel.to_string(),
        origin: "derived",
    });
    // Engram: tables in pinned host memory unless `cpu_offload: false`;
    // shared by a node's replicas by default when there are several.
    let (residency, gpu, host, rows_per_rank) = match &sp.engram {
        None => ("none".to_string(), 0, 0, 0),
        Some(engram) => {
            let table = engram.table_bytes();
            let cfg = e.engram_config.clone().unwrap_or_default();
            let cpu = cfg.cpu_offload.unwrap_or(true);
            let thp = cfg.use_thp.unwrap_or(false);
            let shared = cfg.dp_shared_memory.unwrap_or(cpu && !thp && layout.dp > 1);
            // Replicas on a node form the Engram-DP group that splits the
            // heads when the tables are not shared.
            let per_node = if layout.dp_local > 0 {
                layout.dp_local
            } else {
                layout.dp
            };
            let edp = if shared {
                1
            } else {
                gcd(layout.dp.max(1), per_node.max(1))
            };
            let shards = layout.tp * edp;
            let part = engram.lookups_per_token.div_ceil(shards.max(1));
            let per_rank = table as f64 * part as f64 / engram.lookups_per_token as f64;
            let (residency, gpu, host) = if !cpu {
                ("gpu", per_rank as u64, 0)
            } else if shared {
                ("host-shared", 0, table)
            } else if edp > 1 {
                ("host-split", 0, table)
            } else {
                ("host", 0, table.saturating_mul(per_node.max(1)))
            };
            settings.push(Setting {
                key: "engram_config".into(),
                value: format!(
                    "tables {:.2} GB in {}: {} bytes of GPU memory a rank, {} bytes of host memory a node",
                    table as f64 / 1e9,
                    residency,
                    gpu,
                    host
                ),
                origin: if e.engram_config.is_some() { "stated" } else { "default" },
            });
            (residency.to_string(), gpu, host, part)
        }
    };
    settings.push(Setting {
        key: "sparse_cache_blocks".into(),
        value: format!(
            "blocks of {block} tokens of {full_block_bytes} bytes; a decoding request holds its context's blocks, {} window blocks ({window_groups} groups of {} layers, {} blocks each) and {ring_blocks} compressor ring block",
            window_groups * window_blocks_per_group,
            per_group.min(window_layers),
            window_blocks_per_group
        ),
        origin: "derived",
    });
    SparseCache {
        layout: if sm100 { "sm100" } else { "sm90" }.into(),
        compressed_state_bytes: compressed,
        window_record_bytes: record,
        full_block_bytes,
        window_page_bytes: window_page,
        window_groups,
        window_blocks_per_group,
        ring_blocks,
        sliding_window: sp.sliding_window,
        swa_bounded_replay: replay,
        prefix_replay_tokens: if replay { sp.sliding_window } else { 0 },
        sequence_parallel,
        engram_residency: residency,
        engram_gpu_bytes_per_rank: gpu,
        engram_host_bytes_per_node: host,
        engram_rows_per_rank: rows_per_rank,
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// The Mamba2 side of a hybrid pool as vLLM 0.31.0 sets it up.
fn resolve_hybrid(
    r: &crate::model::Recurrent,
    model: &Model,
    e: &crate::deployment::Engine,
    layout: &PoolLayout,
    cache_dtype: &str,
    prefix_caching: bool,
    block_size: u64,
) -> HybridState {
    use crate::model::mamba_dtype_bits;
    // The cache mode: prefix caching on keeps `align` and `all` (Nemotron-H
    // supports Mamba prefix caching) and turns `none` (or nothing) into
    // `align`; off forces `none`.
    let mode = if !prefix_caching {
        "none"
    } else if e.mamba_cache_mode.as_deref() == Some("all") {
        "all"
    } else {
        "align"
    };
    // `mamba_cache_dtype` (auto: the model's dtype) is the conv state's;
    // `mamba_ssm_cache_dtype` (auto: the architecture's, else the conv
    // state's) the SSM state's (`MambaStateDtypeCalculator`,
    // `vllm/model_executor/layers/mamba/mamba_utils.py`).
    let model_bits = if model.weight_dtype == "float32" {
        32.0
    } else {
        16.0
    };
    let model_dtype = if model_bits == 32.0 {
        "float32"
    } else {
        "bfloat16"
    };
    let conv_dtype = match e.mamba_cache_dtype.as_deref() {
        None | Some("auto") => model_dtype.to_string(),
        Some(d) => d.to_string(),
    };
    let ssm_dtype = match e.mamba_ssm_cache_dtype.as_deref() {
        None | Some("auto") => r
            .ssm_dtype_auto
            .clone()
            .unwrap_or_else(|| conv_dtype.clone()),
        Some(d) => d.to_string(),
    };
    let bits = |d: &str| mamba_dtype_bits(d, model_bits).unwrap_or(model_bits);
    let state = r.state_bytes_per_layer(layout.tp, bits(&conv_dtype), bits(&ssm_dtype));
    // One token's attention page in one layer on one rank.
    let attention_token = match model.attention {
        Attention::Gqa { kv_heads, .. } => {
            let per_layer = model.kv_bytes_per_token_layer(cache_dtype).unwrap_or(0.0);
            let heads_per_rank = (kv_heads as f64 / layout.tp.max(1) as f64).max(1.0);
            per_layer * heads_per_rank / kv_heads as f64
        }
        Attention::Mla { .. } => model.kv_bytes_per_token_layer(cache_dtype).unwrap_or(0.0),
    }
    .max(1.0);
    // FlashAttention's kernel blocks are multiples of 16 tokens
    // (`get_supported_kernel_block_sizes`, vllm/v1/attention/backends/
    // flash_attn.py), and the alignment is at least the cache's block.
    let align = block_size.max(16);
    let attention_block_tokens = if mode == "all" {
        let chunk = lcm(r.chunk_size.max(1), align);
        let tokens_per_state = (state / attention_token).ceil() as u64;
        chunk * tokens_per_state.div_ceil(chunk)
    } else {
        align * ((state / (align as f64 * attention_token)).ceil() as u64).max(1)
    };
    let group_layers = r.attention_layers.min(r.mamba_layers).max(1);
    let attention_groups = r.attention_layers.div_ceil(group_layers);
    let mamba_groups = r.mamba_layers.div_ceil(group_layers);
    HybridState {
        mamba_cache_mode: mode.to_string(),
        conv_dtype,
        ssm_dtype,
        state_bytes_per_layer: state,
        attention_block_tokens,
        group_layers,
        attention_groups,
        mamba_groups,
        state_blocks_per_request: mamba_groups,
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b).max(1) * b
}

/// Blocks of `block_size` tokens that `kv_bytes` holds, with the draft's
/// layers in every block (`vllm/v1/core/kv_cache_utils.py`
/// `get_kv_cache_config`: memory // page size // layers).
fn kv_capacity(
    pool: &Pool,
    layout: &PoolLayout,
    model: &Model,
    engine: &EngineConfig,
    kv_bytes: f64,
) -> KvCapacity {
    let per_layer = model
        .kv_bytes_per_token_layer(&engine.cache_dtype)
        .unwrap_or(0.0);
    let per_layer_rank = match model.attention {
        Attention::Gqa { kv_heads, .. } => {
            let heads_per_rank = (kv_heads as f64 / layout.tp as f64).max(1.0);
            per_layer * heads_per_rank / kv_heads as f64
        }
        // MLA keeps one latent per token, replicated across TP ranks.
        Attention::Mla { .. } => per_layer,
    } / (layout.dcp * layout.pcp) as f64;
    let layers_per_rank = model.kv_layers().div_ceil(layout.pp) as f64;
    let mut draft_layers = 0.0;
    if let Some(method) = &engine.spec_method {
        if method.ends_with("mtp") {
            draft_layers = model.mtp_layers.max(1) as f64;
        } else if engine.spec_eagle_style {
            draft_layers = 1.0;
        }
    }
    let per_token_rank = per_layer_rank * (layers_per_rank + draft_layers);
    let per_token_rank = match &engine.sparse {
        Some(sc) => sc.full_block_bytes as f64 / engine.block_size as f64,
        None => per_token_rank,
    };
    let block_bytes = match &engine.hybrid {
        // A hybrid's groups share one pool: a block id holds one page of
        // `group_layers` layers in every group, the Mamba page padded to
        // the attention page (`get_kv_cache_config_from_groups`).
        Some(h) => per_layer_rank * engine.block_size as f64 * h.group_layers as f64,
        None => per_token_rank * engine.block_size as f64,
    };
    let num_gpu_blocks = if kv_bytes > 0.0 && block_bytes > 0.0 {
        (kv_bytes / block_bytes).floor() as u64
    } else {
        0
    };
    let tokens_per_rank = num_gpu_blocks * engine.block_size;
    let (max_model_len, origin) = match pool.engine.max_model_len {
        Some(MaxModelLen::Tokens(n)) => (n.max(0) as u64, "stated"),
        Some(MaxModelLen::Auto) => (model.max_position_embeddings.min(tokens_per_rank), "auto"),
        None => (model.max_position_embeddings, "model"),
    };
    KvCapacity {
        kv_bytes_per_token_rank: per_token_rank,
        num_gpu_blocks,
        tokens_per_rank,
        tokens_per_engine: tokens_per_rank.saturating_mul(layout.dp),
        max_model_len,
        max_model_len_origin: origin,
    }
}

/// Whether a pool's engines run LMCache: the deployment's offload connector
/// is `LMCacheConnectorV1`, and under P/D the pool is a prefill pool (the
/// llm-d serving chart sets LMCache's environment for the prefill pods
/// only, `modelserver.extraServeEnv.prefill` in seeds/001; decode pods run
/// NixlConnector alone).
pub fn runs_lmcache(deployment: &Deployment, pool: &Pool) -> bool {
    let lmcache = deployment
        .offload
        .as_ref()
        .is_some_and(|o| o.connector.as_deref() == Some("LMCacheConnectorV1"));
    let pd = deployment.pools.iter().any(|p| p.role == "prefill");
    lmcache && (!pd || pool.role == "prefill")
}

/// Whether LMCache's tier is an NVMe storage class, which lmcache-rbln
/// serves with its RDS backend (NVMe read and written by the device
/// directly).
pub fn runs_lmcache_rds(deployment: &Deployment) -> bool {
    deployment.offload.as_ref().is_some_and(|o| {
        o.connector.as_deref() == Some("LMCacheConnectorV1")
            && o.tiers.len() == 1
            && o.tiers[0].tier.starts_with("nvme")
    })
}

/// Resolves every pool of a deployment against a resolved scenario.
pub fn resolve(
    deployment: &Deployment,
    scenario: &ResolvedScenario,
    pack: &RulesPack,
    layouts: &[PoolLayout],
) -> Resolution {
    let chip_name = &scenario.chip.origin.name;
    let chip = &scenario.chip.value;
    let model = &scenario.model.value;
    Resolution {
        deployment: deployment.name.clone(),
        scenario: scenario.scenario.name.clone(),
        engine_version: scenario.scenario.engine_version.clone(),
        rules_pack: pack.name.clone(),
        model: model.name.clone(),
        chip: chip_name.clone(),
        pools: deployment
            .pools
            .iter()
            .zip(layouts)
            .map(|(pool, layout)| {
                let mut resolved = resolve_pool(pack, pool, layout, chip_name, chip, model);
                if runs_lmcache(deployment, pool) {
                    let chunk = pack.defaults.lmcache_chunk_tokens;
                    resolved.engine.lmcache_chunk_tokens = Some(chunk);
                    resolved.settings.push(Setting {
                        key: "offload.lmcache.chunk_size".into(),
                        value: chunk.to_string(),
                        origin: "default",
                    });
                    if let Some(max) = pack.defaults.lmcache_rds_max_chunks
                        && runs_lmcache_rds(deployment)
                    {
                        resolved.settings.push(Setting {
                            key: "offload.lmcache.rds_max_chunks".into(),
                            value: max.to_string(),
                            origin: "default",
                        });
                    }
                }
                // TieringOffloadingSpec's secondary tiers: the deployment
                // names only their storage class and bytes; vLLM's tier
                // type and its settings are the spec's defaults.
                if let Some(o) = deployment
                    .offload
                    .as_ref()
                    .filter(|o| o.spec.as_deref() == Some("TieringOffloadingSpec"))
                {
                    for (i, t) in o.tiers.iter().enumerate().skip(1) {
                        resolved.settings.push(Setting {
                            key: format!("offload.tiers[{i}].secondary_tier"),
                            value: format!(
                                "fs on {} (vLLM's filesystem tier: one file per chunk, never evicted, a write beyond its bytes fails; asynchronous lookups; no back-pressure detector)",
                                t.tier
                            ),
                            origin: "default",
                        });
                    }
                }
                resolved
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::rbln_decode_buckets;

    /// `ExponentialBucketingManager` with its defaults (limit 1) keeps one
    /// bucket; the docs' example (limit 4, step 2, max 8) gives 1, 2, 4, 8.
    #[test]
    fn decode_buckets_follow_the_exponential_strategy() {
        assert_eq!(rbln_decode_buckets(8, 1, 2, 1), vec![8]);
        assert_eq!(rbln_decode_buckets(8, 4, 2, 1), vec![1, 2, 4, 8]);
        assert_eq!(rbln_decode_buckets(8, 10, 2, 1), vec![1, 2, 4, 8]);
        assert_eq!(rbln_decode_buckets(8, 10, 2, 3), vec![4, 8]);
        assert_eq!(rbln_decode_buckets(0, 1, 2, 1), vec![1]);
    }
}
