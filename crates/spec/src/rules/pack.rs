//! Rules packs as data: one YAML file per engine release under
//! `crates/spec/rules/`, compiled in. The rule logic in `rules/mod.rs` is the
//! same for every release; what differs (accepted names, defaults, feature
//! switches) lives in the pack.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RulesPack {
    pub name: String,
    pub engine: String,
    pub engine_versions: Vec<String>,
    /// Names outside these sets are errors.
    pub enums: BTreeMap<String, Vec<String>>,
    /// Names outside these sets are warnings (a plugin may add more).
    pub soft_enums: BTreeMap<String, Vec<String>>,
    pub sp_moe_backends: Vec<String>,
    pub async_incompatible_spec_methods: Vec<String>,
    /// Drafters that keep their own KV and reserve lookahead slots.
    pub eagle_style_spec_methods: Vec<String>,
    pub custom_allreduce_world_sizes: Vec<u64>,
    /// Deployment keys (relative to a pool, e.g. `engine.moe_backend`) the
    /// release has no flag or no support for, each with the reason and its
    /// source. Stating one is an error (`key-unsupported-by-release`). Every
    /// key must be one of [`UNSUPPORTABLE_KEYS`].
    #[serde(default)]
    pub unsupported_keys: BTreeMap<String, String>,
    pub features: Features,
    pub defaults: Defaults,
    pub memory: MemoryDefaults,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Features {
    pub long_prefill_waiver_when_alone: bool,
    pub dbo_refuses_threshold_below_microbatches: bool,
    pub pcp_excludes_dp: bool,
    pub pp_excludes_dp: bool,
    pub has_swa_bounded_replay: bool,
    pub has_engram_config: bool,
    /// `SchedulerConfig.scheduler_reserve_full_isl` (`vllm/config/
    /// scheduler.py`): admission needs blocks for the whole prompt, not
    /// its first chunk (`allocate_slots(..., full_sequence_must_fit)`).
    pub reserve_full_prompt: bool,
    /// Freed blocks without a hash go to the front of the free queue
    /// (`BlockPool.free_blocks`, `vllm/v1/core/block_pool.py`).
    pub unhashed_blocks_to_front: bool,
    pub cuda_graphs: bool,
    #[serde(default)]
    pub sub_block_prefix_reuse: bool,
    /// A step runs either decodes or one prefill alone, never both:
    /// vllm-rbln's scheduler (`RBLNScheduler.schedule`,
    /// `vllm_rbln/v1/core/rbln_scheduler.py`, guards (A)-(D) of its
    /// "no-mixed-batching invariant") schedules a running request still
    /// prefilling alone and admits at most one waiting prefill a step,
    /// dropping the step's decodes to run it. vLLM's own scheduler mixes
    /// them. (Its `DecodeBatchBudget`, which balances pipeline
    /// microbatches, is not mirrored: see `Engine::schedule`.) Every pack
    /// states it.
    pub lone_prefill_steps: bool,
    /// The scheduler caches the blocks a step fills only once the step's
    /// schedule is final, for the requests scheduled in it (running, then
    /// new, then resumed), rather than as each allocation is made
    /// (`delay_cache_blocks=True` on both of `RBLNScheduler.schedule`'s
    /// `allocate_slots` calls, then `cache_blocks` over the scheduled
    /// requests, `vllm_rbln/v1/core/rbln_scheduler.py`): a decode that a
    /// prefill takes the step from caches nothing, and a request admitted
    /// later in the step cannot hit a block one scheduled before it fills.
    /// Every pack states it.
    pub delay_cache_blocks: bool,
    /// The release runs an MTP drafter with more than one module as
    /// multi-module MTP (`SpeculativeConfig.use_multi_module_mtp`,
    /// `vllm/config/speculative.py`: method `mtp`, to which vLLM renames
    /// every MTP model type, and `min(num_nextn_predict_layers,
    /// num_speculative_tokens) > 1`), with scheduling rules of its own that
    /// pdsim does not simulate, so the cluster refuses such a deployment on
    /// a release that has them. Every pack states it.
    pub multi_module_mtp: bool,
    /// The scheduler keeps an input budget beside the token budget: every
    /// scheduled request also takes the drafter's new input slots
    /// (`SpeculativeConfig.max_num_new_slots_for_drafting`) from
    /// `max_num_batched_tokens` (`input_budget` and `draft_slots` in
    /// `Scheduler.schedule`, `vllm/v1/core/sched/scheduler.py`). Every pack
    /// states it.
    pub drafter_input_slots: bool,
    /// When the scheduler pads a newly admitted one-token request to
    /// `1 + num_spec_tokens` with placeholder drafts, so that the step stays
    /// a uniform decode (`pad_spec_decode` in `Scheduler.schedule`,
    /// `vllm/v1/core/sched/scheduler.py`).
    pub pad_spec_decode: PadSpecDecode,
    /// With deferred block frees (async scheduling and a consuming KV
    /// connector), a preemption victim whose blocks a step in flight may
    /// still write is not preempted, and the request is not scheduled
    /// (`_request_blocks_can_be_freed` in `Scheduler.schedule`,
    /// `vllm/v1/core/sched/scheduler.py`); without it the victim is
    /// preempted and its blocks come back when that step is processed.
    pub victim_blocks_must_be_freeable: bool,
    /// Under the priority policy, a waiting request whose outside KV is
    /// ready is taken before the waiting queue whatever its priority: 0.31.0
    /// keeps such requests in `kv_holding_waiting` and takes `request_queue
    /// = self.kv_holding_waiting or self.waiting` (`Scheduler.schedule`,
    /// `vllm/v1/core/sched/scheduler.py`). Without it the heads of the two
    /// queues are compared by (priority, arrival, request id)
    /// (`_select_waiting_queue_for_scheduling` over `skipped_waiting` and
    /// `waiting`, 0.29.0 and 0.30.0; one priority queue for both in
    /// 0.15.1). Under fcfs every release takes the ready ones first.
    pub kv_holding_first: bool,
    /// Under async scheduling with a consuming KV connector, frees wait for
    /// the steps in flight (`defer_block_free`), and a preempted request's
    /// output in flight is stale (`num_stale_output_tokens`), in
    /// `vllm/v1/core/sched/scheduler.py`. vLLM 0.15.1 has neither.
    #[serde(default = "yes")]
    pub deferred_block_frees: bool,
    /// How an async KV load (a P/D consumer, an offload load) is admitted:
    /// `reserved_blocks` in `Scheduler.schedule` and its lookahead slots.
    pub async_load_reserve: AsyncLoadReserve,
    /// The capture sizes vLLM adds to its default grid
    /// (`_set_cudagraph_sizes`, `vllm/config/vllm.py`).
    pub capture_size_extras: CaptureSizeExtras,
    /// The Python API server tokenizes text prompts through
    /// `AsyncMicrobatchTokenizer` (`vllm/utils/async_utils.py`), which holds
    /// a batch open for other prompts; later releases tokenize each prompt
    /// as it comes.
    pub microbatch_tokenizer: bool,
    /// Where the API server stamps a request's `arrival_time`, the key
    /// (after priority) by which the priority policy orders its waiting
    /// queue and picks preemption victims (`Request.__lt__`,
    /// `vllm/v1/request.py`). Every pack states it.
    pub arrival_stamp: ArrivalStamp,
    /// The release refuses a `long_prefill_token_threshold` above
    /// `max_model_len`. vLLM 0.15.1 checks it only with concurrent partial
    /// prefills, which it does not support, so it accepts the threshold.
    #[serde(default = "yes")]
    pub long_prefill_refused_above_max_model_len: bool,
    /// Cascade attention is on unless `disable_cascade_attn` says otherwise
    /// (vLLM 0.15.1's `ModelConfig.disable_cascade_attn` defaults to False);
    /// off, it is opt-in.
    #[serde(default)]
    pub cascade_attention_by_default: bool,
}

/// What `_set_cudagraph_sizes` adds to the 1, 2, 4, 8-stride, 16-stride
/// grid when the capture sizes are not stated.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CaptureSizeExtras {
    /// The grid alone (0.15.1).
    None,
    /// `max_num_batched_tokens` when within the ceiling, even off the
    /// stride, and with drafts the uniform decode sizes n · (1 + k)
    /// (0.29.0).
    MaxTokensAndUniformDecode,
    /// As above, and without drafts `max_num_seqs` itself (0.31.0).
    MaxTokensUniformDecodeAndMaxSeqs,
}

/// The gate on an async KV load's allocation (`Scheduler.schedule`,
/// `vllm/v1/core/sched/scheduler.py`).
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum AsyncLoadReserve {
    /// No reservation; the load's lookahead slots are allocated as any
    /// request's.
    None,
    /// No lookahead slots; the free blocks less what the in-flight
    /// prefills still need (0.29.0: `_inflight_prefill_reserved_blocks`).
    InFlightPrefills,
    /// As above, each in-flight prefill and the load itself also reserving
    /// one speculative decode step (0.31.0: `_spec_decode_step_blocks`).
    InFlightPrefillsAndSpecStep,
    /// No reservation, and no lookahead slots for the load of an
    /// EAGLE-style drafter's request (vllm-rbln 0.12.0's scheduler:
    /// `limit_lookahead_tokens = load_kv_async and self.use_eagle`, no
    /// `reserved_blocks`, `vllm_rbln/v1/core/rbln_scheduler.py`).
    EagleLoadWithoutLookahead,
}

/// The condition of `pad_spec_decode`, beyond a one-token request, a fixed
/// draft count and no partial prefill among the running requests scheduled
/// in the step.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PadSpecDecode {
    /// The release has no such padding.
    Never,
    /// Some running request was scheduled in the step (0.29.0:
    /// `scheduled_running_reqs and not prefill_scheduled`).
    WithRunning,
    /// Some running request was scheduled, or the request has computed
    /// tokens (a prefix hit, or KV that arrived) (0.31.0:
    /// `scheduled_running_reqs or num_computed_tokens > 0`).
    WithRunningOrComputed,
}

/// The moment a request's `arrival_time` is taken (`time.time()` on the
/// API server), never the client's own send time.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ArrivalStamp {
    /// When the server starts rendering the prompt, before tokenizing it
    /// (`render_cmpl`, `render_chat` in `vllm/renderers/base.py`, which
    /// store it in the engine input that `InputProcessor.process_inputs`
    /// reads; 0.29.0, 0.30.0, 0.31.0).
    Render,
    /// When the tokenized prompt reaches `InputProcessor.process_inputs`
    /// (`vllm/v1/engine/input_processor.py`, `arrival_time = time.time()`),
    /// after the serving layer tokenized it (0.15.1).
    InputProcessor,
}

fn yes() -> bool {
    true
}

/// The deployment keys a pack may list in `unsupported_keys`: the rule knows
/// how to tell whether each is stated.
pub const UNSUPPORTABLE_KEYS: &[&str] = &[
    "engine.allreduce_backend",
    "engine.dcp_comm_backend",
    "engine.dcp_q_replicate",
    "engine.moe_backend",
    "parallel.pcp",
];

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Defaults {
    pub block_size: u64,
    pub mla_block_size: u64,
    pub gpu_memory_utilization: f64,
    pub dbo_decode_token_threshold: u64,
    pub dbo_prefill_token_threshold: u64,
    pub cudagraph_mode: String,
    pub max_cudagraph_capture_size: u64,
    pub max_cudagraph_capture_size_sm100: u64,
    pub scheduling_policy: String,
    pub frontend: String,
    pub data_parallel_load_balancing: String,
    pub all2all_backend: String,
    pub cache_dtype: String,
    /// The prefill engine's lease on a finished request's blocks, held for
    /// the decode side's read: NixlConnector's `kv_connector_extra_config`
    /// key `kv_lease_duration` (integer seconds, as vLLM reads it). It starts
    /// when the prefill finishes (`request_finished`) and, at its end, the
    /// blocks are freed unless the read happened or a heartbeat renewed it.
    pub kv_lease_duration_s: u64,
    /// Whether the decode side renews the lease with heartbeats while it
    /// holds the request (every `kv_lease_duration // 6` s, each pushing the
    /// expiry to `kv_lease_duration * 2 // 3` s past its arrival). Without
    /// them the lease is a fixed timeout from prefill completion.
    pub kv_lease_heartbeats: bool,
    /// LMCache's chunk size in tokens (`chunk_size`, `LMCACHE_CHUNK_SIZE`)
    /// where the deployment cannot state it: it has no key for it.
    pub lmcache_chunk_tokens: u64,
    /// lmcache-rbln's RDS backend (LMCache storing chunks on NVMe devices
    /// bound to Rebellions Direct Storage): the chunks each rank keeps
    /// (`rds_max_chunks`) where the deployment cannot state it. Absent in
    /// releases without the backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lmcache_rds_max_chunks: Option<u64>,
    /// The release's OffloadingConnector CPU manager, of those pdsim
    /// mirrors (`pdsim_engine::offload::Release`); absent where pdsim does
    /// not mirror the release's manager (such a run is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload_manager: Option<OffloadManagerRelease>,
    /// How the API servers in front of an engine's data-parallel ranks
    /// score them when they balance requests (`DPLBAsyncMPClient.
    /// get_core_engine_for_request`, `vllm/v1/engine/core_client.py`).
    pub dp_lb_score: DpLbScore,
    pub batch_defaults: Vec<BatchDefault>,
}

/// See `pdsim_cluster::dp_lb::DpLbRule`.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DpLbScore {
    /// `waiting * 4 + running`.
    WaitingX4PlusRunning,
    /// `max(client_count * inflight, waiting + running)` plus the KV
    /// pressure penalty, the scan's start rotating.
    InflightAndKvPressure,
}

/// The CPU offloading managers pdsim mirrors, by the vLLM release that
/// ships them.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub enum OffloadManagerRelease {
    /// A request's chunks are touched at every lookup and successful store.
    #[serde(rename = "0.29.0")]
    V0_29_0,
    /// A request's observed chunks take their recency when it ends.
    #[serde(rename = "0.31.0")]
    V0_31_0,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BatchDefault {
    pub min_memory_gib: f64,
    pub exclude_chips: Vec<String>,
    pub max_num_batched_tokens: u64,
    pub max_num_seqs: u64,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MemoryDefaults {
    pub non_torch_bytes: u64,
    pub cudagraph_bytes_per_size: u64,
    /// vllm-rbln's own KV sizing, which replaces the profile-run model
    /// (`non_torch_bytes`, `cudagraph_bytes_per_size`) when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rbln_estimate: Option<RblnEstimateRules>,
}

/// The constants of vllm-rbln's KV sizing for a REBEL device
/// (`vllm_rbln/v1/worker/rbln_worker.py` `determine_available_memory` and
/// `vllm_rbln/v1/worker/utils.py` `estimate_available_memory`,
/// `estimate_model_kernel_size`), and the environment defaults that decide
/// how many runtimes it reserves buffers for (`vllm_rbln/rbln_envs.py`).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RblnEstimateRules {
    /// Device DRAM the runtime keeps for itself (`REBEL_SYS_DRAM_NBYTES`).
    pub system_reserved_bytes: u64,
    /// Chiplets per device, each with its own share of DRAM and its own copy
    /// of every runtime's buffer (`REBEL_CHIPLET_SIZE`, `rsd_size`).
    pub chiplets_per_device: u64,
    /// Buffer reserved per compiled runtime per chiplet
    /// (`buffer_per_runtime_per_core`).
    pub buffer_bytes_per_runtime_chiplet: u64,
    /// Each layer's weights and the LM head are placed in units of this
    /// many bytes (`align_2MB`).
    pub kernel_alignment_bytes: u64,
    /// Bits per LM-head weight in the kernel estimate
    /// (`default_bits_per_param` for REBEL).
    pub lm_head_bits: u32,
    /// The vocabulary is padded to a multiple of this for the LM head.
    pub lm_head_vocab_alignment: u64,
    /// `VLLM_RBLN_DECODE_BATCH_BUCKET_LIMIT`, `_STEP`, `_MIN` defaults of the
    /// default `exponential` strategy.
    pub decode_batch_bucket_limit: u64,
    pub decode_batch_bucket_step: u64,
    pub decode_batch_bucket_min: u64,
    /// `VLLM_RBLN_SPECIALIZE_MOE_DECODE` default: with data parallelism each
    /// decode bucket gets a second, padded runtime.
    pub specialize_moe_decode: bool,
}

const PACKS: &[(&str, &str)] = &[
    (
        "vllm-0.15.1.yaml",
        include_str!("../../rules/vllm-0.15.1.yaml"),
    ),
    (
        "vllm-0.29.0.yaml",
        include_str!("../../rules/vllm-0.29.0.yaml"),
    ),
    (
        "vllm-0.31.0.yaml",
        include_str!("../../rules/vllm-0.31.0.yaml"),
    ),
    ("vllm-rbln.yaml", include_str!("../../rules/vllm-rbln.yaml")),
];

/// Every built-in pack, parsed once. The packs are compiled in and tested to
/// load, so a pack that fails to parse is a build defect, caught by the
/// test `every_pack_loads`.
pub fn all() -> &'static [RulesPack] {
    static PARSED: std::sync::OnceLock<Vec<RulesPack>> = std::sync::OnceLock::new();
    PARSED.get_or_init(|| {
        PACKS
            .iter()
            .map(|(file, text)| {
                serde_yaml::from_str(text)
                    .unwrap_or_else(|e| panic!("built-in rules pack {file} is malformed: {e}"))
            })
            .collect()
    })
}

/// What a drafting method asks of the release's scheduler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drafter {
    /// An EAGLE-style method: a prefix hit's last block is dropped.
    pub eagle_style: bool,
    /// KV slots a request reserves past its tokens
    /// (`VllmConfig.num_lookahead_tokens`).
    pub lookahead_tokens: u64,
    /// Model inputs the method adds to every scheduled request, paid from
    /// the step's input budget (`max_num_new_slots_for_drafting`).
    pub draft_slots: u64,
}

impl RulesPack {
    /// What drafting method `method` with `k` speculative tokens asks of
    /// this release's scheduler.
    pub fn drafter(&self, method: &str, k: u64) -> Drafter {
        let eagle_style = self.eagle_style_spec_methods.iter().any(|e| e == method);
        Drafter {
            eagle_style,
            // `VllmConfig.num_lookahead_tokens` (`vllm/config/vllm.py`,
            // 0.29.0 and 0.31.0; `Scheduler.__init__` in 0.15.1): the
            // drafter writes KV past the target's query range for
            // EAGLE-style methods and the draft model, one slot more for
            // DFlash.
            lookahead_tokens: match method {
                "dflash" => k + 1,
                "draft_model" => k,
                _ if eagle_style => k,
                _ => 0,
            },
            // `SpeculativeConfig.max_num_new_slots_for_drafting`
            // (`vllm/config/speculative.py`, 0.29.0 to 0.31.0): DFlash's
            // bonus query and K mask queries, DSpark's (parallel drafting)
            // K - 1 masked queries, an autoregressive draft model's one
            // unsliced token; EAGLE, MTP and n-gram add none
            // (`parallel_drafting`, which P-EAGLE and PARD set, is not a
            // deployment key).
            draft_slots: match method {
                _ if !self.features.drafter_input_slots => 0,
                "dflash" => k,
                "dspark" => k.saturating_sub(1),
                "draft_model" => 1,
                _ => 0,
            },
        }
    }
}

/// The pack for an engine version, if pdsim has one.
pub fn for_version(engine_version: &str) -> Option<&'static RulesPack> {
    all()
        .iter()
        .find(|p| p.engine_versions.iter().any(|v| v == engine_version))
}

/// Every engine version some pack covers, for messages.
pub fn known_versions() -> Vec<String> {
    let mut versions: Vec<String> = all()
        .iter()
        .flat_map(|p| p.engine_versions.iter().cloned())
        .collect();
    versions.sort();
    versions
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_pack_loads() {
        let packs = super::all();
        assert_eq!(packs.len(), 4);
        assert!(super::for_version("0.15.1").is_some());
        assert!(super::for_version("0.29.0").is_some());
        assert!(super::for_version("0.31.0").is_some());
        assert!(super::for_version("vllm-rbln-0.12.0").is_some());
        assert!(super::for_version("0.30.0").is_none());
        assert!(super::for_version("0.15.0").is_none());
    }

    /// Every key a pack calls unsupported is one the rule can check, so a
    /// misspelt key cannot silently refuse nothing.
    #[test]
    fn unsupported_keys_are_checkable() {
        for pack in super::all() {
            for key in pack.unsupported_keys.keys() {
                assert!(
                    super::UNSUPPORTABLE_KEYS.contains(&key.as_str()),
                    "{}: `{key}` is not one of {:?}",
                    pack.name,
                    super::UNSUPPORTABLE_KEYS
                );
            }
        }
    }
}
