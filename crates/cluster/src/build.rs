//! From validated documents to the runtime cluster: one pod per engine, one
//! engine core per data-parallel rank, each configured from the resolution,
//! and one cost model per pool.
//!
//! What the simulation cannot yet run faithfully is refused here, naming the
//! key and the reason — never silently replaced by something else.

use pdsim_cost::CostModel;
use pdsim_engine::{CudaGraphMode, Dbo, EngineConfig, Graphs, Policy, SpecConfig};
use pdsim_spec::catalog::CoefficientSet;
use pdsim_spec::deployment::Role;
use pdsim_spec::resolve::PoolResolution;
use pdsim_spec::validate::ValidDeployment;
use pdsim_spec::validate::scenario::ResolvedScenario;

/// Why a deployment cannot be simulated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildError {
    /// The key path in the deployment that asks for it.
    pub path: String,
    pub message: String,
}

impl std::fmt::Display for BuildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// One pool at run time.
pub struct PoolRuntime {
    pub role: Role,
    /// Engines (pods) in the pool and data-parallel ranks per engine.
    pub pods: u32,
    pub ranks: u16,
    /// Whether the ranks of one engine step in lockstep: vLLM runs
    /// data-parallel ranks of a mixture-of-experts model together, idle ranks
    /// stepping dummy batches so the expert collectives line up
    /// (`vllm/v1/engine/coordinator.py`).
    pub lockstep: bool,
    /// How many of an engine's data-parallel ranks one endpoint exposes to
    /// a router: all of them (`internal`), those of one node (`hybrid`,
    /// dp_local), or one (`external`) (`vllm/config/parallel.py`,
    /// `research/vllm-engine.md` §9).
    pub ranks_per_endpoint: u16,
    /// The engine runs vLLM's Rust frontend: one API server, whatever the
    /// ranks behind it.
    pub rust_frontend: bool,
    /// The API server stamps a request's arrival time, the priority
    /// policy's order among equal priorities, when it starts rendering the
    /// prompt (0.29.0 and later); otherwise when the tokenized prompt
    /// reaches the input processor (0.15.1). See [`ArrivalStamp`].
    ///
    /// [`ArrivalStamp`]: pdsim_spec::rules::pack::ArrivalStamp
    pub arrival_at_render: bool,
    pub engine: EngineConfig,
    pub cost: Box<dyn CostModel>,
    /// Which model prices the pool's steps: `roofline`, or `linear` when the
    /// scenario's coefficient sets give the fitted linear model's terms.
    pub cost_model: &'static str,
    /// Global index of the pool's first GPU: pools take the cluster's nodes
    /// in document order, engines take a pool's GPUs in order, and rank r of
    /// an engine holds the `world` GPUs after r × world.
    pub first_gpu: u64,
    pub gpus_per_engine: u64,
    /// GPUs of one data-parallel rank (pp × tp × pcp).
    pub world: u64,
    /// KV bytes one token takes on each GPU of a rank (its share of heads
    /// and layers, the draft head's layer included).
    pub kv_bytes_per_token_gpu: f64,
}

/// The offload tier as the event loop prices loads from it.
#[derive(Clone, Debug)]
pub struct OffloadRuntime {
    /// Per-GPU read bandwidth of the storage class.
    pub read_bytes_per_s: f64,
    /// Per-GPU write bandwidth of the storage class.
    pub write_bytes_per_s: f64,
    /// The chip's host link, per GPU.
    pub host_link_bytes_per_s: f64,
    /// The device reads and writes the tier directly (lmcache-rbln's RDS:
    /// NVMe bound to Rebellions Direct Storage), not through host memory
    /// and its link.
    pub direct: bool,
    pub base_latency: pdsim_core::SimDuration,
    /// The secondary tiers behind the host-memory tier
    /// (`TieringOffloadingSpec`), in order; empty otherwise.
    pub secondary: Vec<SecondaryRuntime>,
}

/// A secondary tier's device, as the event loop times its jobs: each
/// engine writes and reads its own files on a device of the tier's
/// storage class (a pod's local volume), reads and writes each in turn at
/// the class's bandwidth, each job after the class's base latency.
#[derive(Clone, Copy, Debug)]
pub struct SecondaryRuntime {
    pub read_bytes_per_s: f64,
    pub write_bytes_per_s: f64,
    pub base_latency: pdsim_core::SimDuration,
}

/// The cluster as the event loop runs it.
pub struct Cluster {
    pub pools: Vec<PoolRuntime>,
    /// Whether requests can be split into a prefill on one engine and a
    /// decode on another: a prefill or decode pool, or colocated pods under
    /// a P/D profile handler. The engines then run the KV connector.
    pub disaggregated: bool,
    /// How many of each selected pod's API servers the EPP makes endpoints
    /// of (its target ports), the first ones in rank order; `None`: all.
    pub endpoints_per_pod: Option<usize>,
    /// The name of the routing policy, for reports.
    pub router: &'static str,
    pub gpus_per_node: u64,
    /// Per-GPU NIC bandwidth for KV transfers: the fabric's figure times the
    /// PD-transfer coefficient.
    pub nic_bytes_per_s: f64,
    /// Per-GPU intra-node (NVLink or PCIe peer) bandwidth.
    pub intra_node_bytes_per_s: f64,
    pub transfer: pdsim_cost::TransferModel,
    /// How long a prefill engine holds blocks nobody has read.
    pub kv_lease: KvLease,
    pub offload: Option<OffloadRuntime>,
    /// How an endpoint's API servers balance its data-parallel ranks.
    pub dp_lb: crate::dp_lb::DpLbRule,
    /// The Endpoint Picker's inputs: the deployment's, or the EPP's
    /// built-in configuration over every pod when it has no router block.
    pub epp: pdsim_router::RouterInputs,
    /// The labels of each pool's pods, `llm-d.ai/role` derived from the role.
    pub pool_labels: Vec<std::collections::BTreeMap<String, String>>,
}

/// Unconditional acceptance probability per draft position, by method.
///
/// - eagle3: a public vLLM measurement of an EAGLE-3 head (gpt-oss-120b,
///   vLLM 0.17, temperature 1, chain of 8): 0.58, 0.31, 0.16, 0.08, 0.04,
///   0.02, 0.01, 0.00 (`research/vllm-engine.md` §5).
/// - deepseek_mtp / mtp-style single-module drafters: DeepSeek-V3's report
///   gives 85–90% acceptance of the second token; later positions reuse the
///   module and are taken to halve [assumed].
/// - eagle (EAGLE-1/2 heads): below EAGLE-3, taken as 0.5 and halving [assumed].
/// - ngram and other model-free drafters: workload dependent; 0.3 and halving
///   [assumed].
///
/// A scenario overrides position i of a method with a coefficient named
/// `spec_acceptance_<method>_pos<i>` (dimensionless, 0-based position).
pub fn default_acceptance(method: &str) -> Vec<f64> {
    let halving = |first: f64| {
        (0..16)
            .map(|i| first / f64::powi(2.0, i))
            .collect::<Vec<f64>>()
    };
    match method {
        "eagle3" => vec![0.58, 0.31, 0.16, 0.08, 0.04, 0.02, 0.01, 0.0],
        m if m.ends_with("mtp") => halving(0.87),
        "eagle" | "dflash" | "dspark" => halving(0.5),
        _ => halving(0.3),
    }
}

/// `acceptance` with the positions the scenario's sets give (`overrides`,
/// chosen by scope: `pdsim_cost::acceptance_overrides`) in place, then made
/// non-increasing: acceptance of position i+1 implies acceptance of
/// position i.
fn apply_acceptance(acceptance: &mut [f64], overrides: &[Option<f64>]) {
    for (a, o) in acceptance.iter_mut().zip(overrides) {
        if let Some(v) = o {
            *a = *v;
        }
    }
    for i in 1..acceptance.len() {
        acceptance[i] = acceptance[i].min(acceptance[i - 1]);
    }
}

/// The engine's settings for `pool`; `overrides` is what the scenario's
/// sets give its drafter's acceptance per position (empty without a
/// drafter).
fn engine_config(pool: &PoolResolution, overrides: &[Option<f64>]) -> EngineConfig {
    let e = &pool.engine;
    let spec = e.spec_method.as_ref().map(|method| {
        let mut acceptance = default_acceptance(method);
        acceptance.resize(e.num_spec_tokens as usize, 0.0);
        apply_acceptance(&mut acceptance, overrides);
        SpecConfig {
            num_spec_tokens: e.num_spec_tokens as u32,
            acceptance,
            eagle_style: e.spec_eagle_style,
            lookahead_tokens: e.spec_lookahead_tokens.min(u32::MAX as u64) as u32,
            draft_slots: e.spec_draft_slots.min(u32::MAX as u64) as u32,
        }
    });
    let clamp = |v: u64| v.min(u32::MAX as u64) as u32;
    EngineConfig {
        block_size: clamp(e.block_size),
        prefix_unit: clamp(e.prefix_reuse_tokens),
        num_blocks: clamp(pool.kv.num_gpu_blocks),
        max_num_batched_tokens: clamp(e.max_num_batched_tokens),
        max_num_seqs: clamp(e.max_num_seqs),
        long_prefill_token_threshold: clamp(e.long_prefill_token_threshold),
        long_prefill_waiver_when_alone: e.long_prefill_waiver_when_alone,
        policy: if e.scheduling_policy == "priority" {
            Policy::Priority
        } else {
            Policy::Fcfs
        },
        enable_prefix_caching: e.enable_prefix_caching,
        max_model_len: clamp(pool.kv.max_model_len),
        reserve_full_prompt: e.reserve_full_prompt,
        unhashed_blocks_to_front: e.unhashed_blocks_to_front,
        lone_prefill_steps: e.lone_prefill_steps,
        delay_cache_blocks: e.delay_cache_blocks,
        graphs: Graphs {
            mode: CudaGraphMode::parse(&e.cudagraph_mode),
            sizes: e
                .cudagraph_capture_sizes
                .iter()
                .map(|s| clamp(*s))
                .collect(),
        },
        dbo: Dbo {
            enabled: e.dbo_enabled,
            decode_threshold: clamp(e.dbo_decode_token_threshold),
            prefill_threshold: clamp(e.dbo_prefill_token_threshold),
        },
        spec,
        offload: None,
        offload_secondary: Vec::new(),
        lmcache: None,
        async_scheduling: e.async_scheduling,
        // Deployments cannot turn chunked prefill off (the key is refused by
        // strict loading); vLLM V1 has it on by default.
        enable_chunked_prefill: true,
        // Set for P/D pools once the layout is known (`build`).
        defer_block_free: false,
        drop_stale_output: false,
        pad_spec_decode: e.pad_spec_decode,
        victim_blocks_must_be_freeable: e.victim_blocks_must_be_freeable,
        kv_holding_first: e.kv_holding_first,
        async_load_reserve: e.async_load_reserve,
        // A hybrid's Mamba groups (what `hybrid_refusal` lets run: align
        // or none).
        mamba: e.hybrid.as_ref().map(|h| pdsim_engine::mamba::MambaConfig {
            groups: h.mamba_groups.min(u32::MAX as u64) as u32,
            mode: if h.mamba_cache_mode == "align" {
                pdsim_engine::mamba::MambaMode::Align
            } else {
                pdsim_engine::mamba::MambaMode::None
            },
            block_size: clamp(e.block_size),
        }),
        // DeepSeek-V4.1's window groups and ring (what `sparse_refusal`
        // lets run: with or without bounded replay, one engine core
        // serving whole requests). Model Runner V2 keeps `pp + 1` batches in flight under
        // async scheduling, `pp` otherwise (`VllmConfig.max_concurrent_batches`).
        window: e.sparse.as_ref().map(|sc| {
            let pp = pool.layout.pp.max(1);
            let batches = if e.async_scheduling { pp + 1 } else { pp };
            // The window block is 32 tokens (`sparse_swa.py`); without
            // bounded replay the window groups are prefix-cached and hits
            // align to the scheduler's block (the full group's).
            let window = clamp(sc.sliding_window);
            pdsim_engine::window::WindowConfig {
                cached: !sc.swa_bounded_replay,
                hit_alignment: clamp(e.block_size),
                groups: clamp(sc.window_groups),
                window,
                block_size: 32,
                ring: sc.ring_blocks > 0,
                admission_cap: pdsim_engine::window::WindowConfig::admission_cap(
                    window,
                    32,
                    clamp(batches.saturating_mul(e.max_num_batched_tokens)),
                    clamp(pool.kv.max_model_len),
                ),
                replay: clamp(sc.prefix_replay_tokens),
            }
        }),
    }
}

/// What a DeepSeek-V4.1 run needs that pdsim does not simulate, named: the
/// engine follows vLLM 0.31.0's window, full and ring groups with and
/// without bounded replay (`crates/engine/src/window.rs`, checked against
/// that release's scheduler), one engine core serving whole requests. `None` when the run
/// is faithful.
fn sparse_refusal(
    bundle: &ValidDeployment,
    scenario: &ResolvedScenario,
    router: Option<&pdsim_router::RouterInputs>,
) -> Option<BuildError> {
    let name = &scenario.model.origin.name;
    let refuse = |path: String, why: &str| {
        Some(BuildError {
            path,
            message: format!("`{name}` is DeepSeek-V4.1: {why}"),
        })
    };
    if scenario.scenario.engine_version != "0.31.0" {
        return refuse(
            "engine_version".into(),
            &format!(
                "pdsim's window and ring groups follow vLLM 0.31.0 (checked against that release's scheduler); {}'s are not read",
                scenario.scenario.engine_version
            ),
        );
    }
    if router.is_some_and(|r| r.reads_kv_events()) {
        return refuse(
            "router".into(),
            "the router's precise prefix-cache index reads the engines' KV events, and pdsim does not publish the events of its window and ring groups",
        );
    }
    if bundle.deployment.offload.is_some() {
        return refuse(
            "offload".into(),
            "offloading its window groups' and compressed caches' blocks is not simulated",
        );
    }
    for (i, (pool, resolved)) in bundle
        .deployment
        .pools
        .iter()
        .zip(&bundle.resolution.pools)
        .enumerate()
    {
        let e = &resolved.engine;
        if e.sparse.is_none() {
            continue;
        }
        if pool.role != "colocated" {
            return refuse(
                format!("pools[{i}].role"),
                "P/D moves its compressed, window and ring caches through the connector, which pdsim does not simulate for this model",
            );
        }
        if e.spec_method.is_some() {
            return refuse(
                format!("pools[{i}].engine.speculative"),
                "its DSpark drafter's layers and the ring's larger blocks are not simulated",
            );
        }
        if resolved.layout.dcp > 1 || resolved.layout.pcp > 1 {
            return refuse(
                format!("pools[{i}].parallel"),
                "vLLM's SlidingWindowManager asserts that decode and prefill context parallelism are off",
            );
        }
    }
    None
}

/// A pool whose MTP drafter has more than one module, on a release that
/// runs it as multi-module MTP (`SpeculativeConfig.use_multi_module_mtp`,
/// `vllm/config/speculative.py` in 0.29.0, 0.30.0 and 0.31.0: method `mtp`,
/// to which vLLM renames every MTP model type, and
/// `min(num_nextn_predict_layers, num_speculative_tokens) > 1`). Such a
/// drafter reads `num_speculative_tokens` prompt tokens past a chunk, so
/// vLLM's scheduler never ends a prefill chunk that close to the prompt's
/// end (`Scheduler._reserve_prefill_lookahead`,
/// `vllm/v1/core/sched/scheduler.py`), its KV cache manager leaves the last
/// `num_speculative_tokens - 1` computed tokens out of the prefix cache
/// (`num_reprefillable_tokens`, `vllm/v1/core/kv_cache_coordinator.py`),
/// and in 0.31.0 the prefill side of P/D stops that many tokens short for
/// the decode side to compute (`_prefill_backoff`,
/// `vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py`).
/// pdsim's engine has none of these, so it refuses rather than run the
/// drafter as a one-module one.
fn multi_module_mtp_refusal(
    bundle: &ValidDeployment,
    scenario: &ResolvedScenario,
) -> Option<BuildError> {
    let modules = scenario.model.value.mtp_layers;
    bundle
        .resolution
        .pools
        .iter()
        .enumerate()
        .find_map(|(i, resolved)| {
            let e = &resolved.engine;
            let mtp = e
                .spec_method
                .as_deref()
                .is_some_and(|m| m == "mtp" || m.ends_with("_mtp"));
            (e.multi_module_mtp && mtp && modules.min(e.num_spec_tokens) > 1).then(|| {
                BuildError {
                    path: format!("pools[{i}].engine.speculative"),
                    message: format!(
                        "`{}` has {modules} MTP modules (num_nextn_predict_layers), so vLLM {} runs {} speculative tokens as multi-module MTP (`SpeculativeConfig.use_multi_module_mtp`, vllm/config/speculative.py), whose scheduling pdsim does not simulate: no prefill chunk ends within num_speculative_tokens tokens of the prompt's end (`Scheduler._reserve_prefill_lookahead`), the last num_speculative_tokens - 1 computed tokens stay out of the prefix cache (`num_reprefillable_tokens`, vllm/v1/core/kv_cache_coordinator.py) and, in 0.31.0, P/D's prefill side leaves them to the decode side (`_prefill_backoff`, NIXL's base_scheduler.py); num_spec_tokens: 1 runs as one-module MTP",
                        scenario.model.origin.name,
                        scenario.scenario.engine_version,
                        e.num_spec_tokens,
                    ),
                }
            })
        })
}

/// What a hybrid model's run needs that pdsim does not simulate, named:
/// the engine follows vLLM 0.31.0's `MambaManager` and its scheduler's
/// block-aligned split (`crates/engine/src/mamba.rs`, checked against that
/// release's scheduler) for states in `align` and `none` mode, one engine
/// core serving whole requests. `None` when the run is faithful.
fn hybrid_refusal(
    bundle: &ValidDeployment,
    scenario: &ResolvedScenario,
    router: Option<&pdsim_router::RouterInputs>,
) -> Option<BuildError> {
    let name = &scenario.model.origin.name;
    let refuse = |path: String, why: String| {
        Some(BuildError {
            path,
            message: format!("`{name}` is a hybrid of Mamba2 and attention layers: {why}"),
        })
    };
    if scenario.scenario.engine_version != "0.31.0" {
        return refuse(
            "engine_version".into(),
            format!(
                "pdsim's hybrid engine follows vLLM 0.31.0's MambaManager and scheduler (checked against that release's own); {}'s are not read",
                scenario.scenario.engine_version
            ),
        );
    }
    if router.is_some_and(|r| r.reads_kv_events()) {
        return refuse(
            "router".into(),
            "the router's precise prefix-cache index reads the engines' KV events, and pdsim does not publish the events of a hybrid's Mamba groups".into(),
        );
    }
    if bundle.deployment.offload.is_some() {
        return refuse(
            "offload".into(),
            "offloading a hybrid's state blocks (the connectors' Mamba boundary states) is not simulated".into(),
        );
    }
    for (i, (pool, resolved)) in bundle
        .deployment
        .pools
        .iter()
        .zip(&bundle.resolution.pools)
        .enumerate()
    {
        let e = &resolved.engine;
        let Some(h) = &e.hybrid else { continue };
        if pool.role != "colocated" {
            return refuse(
                format!("pools[{i}].role"),
                "P/D moves the attention blocks and the Mamba states through the connector, which pdsim does not simulate for a hybrid".into(),
            );
        }
        if h.mamba_cache_mode == "all" {
            return refuse(
                format!("pools[{i}].engine.mamba_cache_mode"),
                "`all` (deprecated in vLLM 0.31.0, Model Runner V1 only) caches a state at every block boundary; pdsim simulates `align` (what prefix caching runs by default) and `none`".into(),
            );
        }
        if e.spec_method.is_some() {
            return refuse(
                format!("pools[{i}].engine.speculative"),
                "speculative decoding gives each Mamba group extra state blocks (`num_speculative_blocks`), which pdsim does not simulate".into(),
            );
        }
        if e.dbo_enabled {
            return refuse(
                format!("pools[{i}].engine.dbo"),
                "vLLM 0.31.0 refuses dual-batch overlap for hybrid models (`config/vllm.py`)"
                    .into(),
            );
        }
        if resolved.layout.dcp > 1 || resolved.layout.pcp > 1 {
            return refuse(
                format!("pools[{i}].parallel"),
                "vLLM's MambaManager asserts that decode and prefill context parallelism are off (\"DCP not support mamba now\")".into(),
            );
        }
        if e.prefix_reuse_tokens != e.block_size {
            return refuse(
                format!("pools[{i}].engine"),
                "prefix reuse finer than a block (`prefix_match_unit`, partial Mamba hits) is not simulated".into(),
            );
        }
    }
    None
}

/// The KV connector that implements a deployment's offload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OffloadConnector {
    /// vLLM's OffloadingConnector with CPUOffloadingSpec: blocks in host
    /// memory, loaded asynchronously.
    Offloading,
    /// LMCacheConnectorV1 with LMCache's local CPU backend: chunks in host
    /// memory, loaded and stored within the step (`pdsim_engine::lmcache`).
    LmCache,
}

/// The offload tier a deployment asks for, as [`offload_tier`] accepts it.
struct OffloadChoice {
    /// The tier's bytes (per engine).
    bytes: u64,
    class: pdsim_spec::catalog::StorageClass,
    connector: OffloadConnector,
    /// LMCache on NVMe under vllm-rbln: lmcache-rbln's RDS backend, capped
    /// at `rds_max_chunks` chunks an engine and copied without the host link.
    rds: bool,
    /// `TieringOffloadingSpec`'s secondary tiers (bytes per engine and
    /// storage class), in order after the host-memory tier.
    secondary: Vec<(u64, pdsim_spec::catalog::StorageClass)>,
}

/// The offload tier a deployment asks for, or the reason pdsim refuses it:
/// vLLM's OffloadingConnector with CPUOffloadingSpec stores blocks in host
/// memory (LRU or ARC), with TieringOffloadingSpec also in filesystem
/// tiers behind it (`vllm/v1/kv_offload/tiering/`), and
/// LMCacheConnectorV1 stores chunks in LMCache's local CPU backend or,
/// under vllm-rbln, on NVMe through lmcache-rbln's RDS backend, with LRU
/// eviction; anything else (prefetching, several LMCache tiers, LMCache's
/// local disk, object-store tiers) is not simulated yet and is refused by
/// key.
fn offload_tier(
    deployment: &pdsim_spec::deployment::Deployment,
    scenario: &ResolvedScenario,
    pack: &pdsim_spec::rules::pack::RulesPack,
) -> Result<Option<OffloadChoice>, BuildError> {
    let Some(offload) = &deployment.offload else {
        return Ok(None);
    };
    let refuse = |path: &str, message: String| {
        Err(BuildError {
            path: path.into(),
            message,
        })
    };
    if offload.prefetch_depth.is_some_and(|d| d > 0) {
        return refuse(
            "offload.prefetch_depth",
            "neither connector pdsim runs has a fetch depth to set: vLLM 0.31.0's OffloadingConnector looks a request up and loads it when the scheduler reaches it (`offloading/scheduler.py`, no prefetch setting), and LMCache's asynchronous loading (`enable_async_loading`, `StorageManager.async_lookup_and_prefetch`) fetches a whole lookup at once, not a number of steps ahead".into(),
        );
    }
    let connector = match offload.connector.as_deref() {
        None | Some("OffloadingConnector") => OffloadConnector::Offloading,
        Some("LMCacheConnectorV1") => OffloadConnector::LmCache,
        Some(other) => {
            return refuse(
                "offload.connector",
                format!(
                    "`{other}` is not simulated yet: pdsim runs vLLM's OffloadingConnector (CPUOffloadingSpec) and LMCacheConnectorV1 (LMCache's local CPU backend)"
                ),
            );
        }
    };
    if let Some(spec) = offload.spec.as_deref() {
        if connector == OffloadConnector::LmCache {
            return refuse(
                "offload.spec",
                format!(
                    "`{spec}` configures vLLM's OffloadingConnector; LMCacheConnectorV1 takes no offloading spec"
                ),
            );
        }
        if spec != "CPUOffloadingSpec" && spec != "TieringOffloadingSpec" {
            return refuse(
                "offload.spec",
                format!(
                    "`{spec}` is not simulated yet: CPUOffloadingSpec and TieringOffloadingSpec are"
                ),
            );
        }
    }
    let tiering = offload.spec.as_deref() == Some("TieringOffloadingSpec");
    if tiering
        && pack.defaults.offload_manager
            == Some(pdsim_spec::rules::pack::OffloadManagerRelease::V0_29_0)
    {
        return refuse(
            "offload.spec",
            "pdsim mirrors vLLM 0.31.0's tiering (`vllm/v1/kv_offload/tiering/`); 0.29.0's filesystem tier looks keys up without probe generations (`tiering/async_lookup.py`: a late answer lands on a newer probe of the same key, and a second answer fails its enqueue-once assertion), which is not simulated".into(),
        );
    }
    if offload.tiers.len() != 1 && !tiering {
        return refuse(
            "offload.tiers",
            match connector {
                OffloadConnector::Offloading => {
                    "CPUOffloadingSpec has one host-memory tier; several tiers are vLLM's TieringOffloadingSpec (`spec: TieringOffloadingSpec`)"
                }
                OffloadConnector::LmCache => {
                    "pdsim runs LMCache's local CPU backend alone; several tiers (LMCache's disk, lmcache-rbln's RDS) are not simulated yet"
                }
            }
            .into(),
        );
    }
    if connector == OffloadConnector::LmCache
        && let Some(policy) = offload.eviction_policy.as_deref().filter(|p| *p != "lru")
    {
        return refuse(
            "offload.eviction_policy",
            format!(
                "`{policy}` is a policy of vLLM's OffloadingConnector; pdsim runs LMCache's local CPU backend with its LRU policy only"
            ),
        );
    }
    let tier = &offload.tiers[0];
    // lmcache-rbln's RDS: LMCache on NVMe devices bound to Rebellions
    // Direct Storage, in the releases whose pack knows its chunk cap.
    let rds = connector == OffloadConnector::LmCache
        && pack.defaults.lmcache_rds_max_chunks.is_some()
        && pdsim_spec::resolve::runs_lmcache_rds(deployment);
    if tier.tier != "cpu_dram" && !rds {
        return refuse(
            "offload.tiers[0].tier",
            match connector {
                OffloadConnector::Offloading if tiering => format!(
                    "TieringOffloadingSpec's primary tier is host memory (cpu_dram), not `{}`: the secondary tiers follow it",
                    tier.tier
                ),
                OffloadConnector::Offloading => format!(
                    "CPUOffloadingSpec offloads to host memory (cpu_dram), not `{}`",
                    tier.tier
                ),
                OffloadConnector::LmCache => format!(
                    "pdsim runs LMCache's local CPU backend in host memory (cpu_dram) and, under vllm-rbln, lmcache-rbln's RDS backend on NVMe (nvme_gen3, nvme_gen4); a `{}` tier (LMCache's local disk or remote backends) is not simulated yet",
                    tier.tier
                ),
            },
        );
    }
    let class_of = |name: &str, index: usize| {
        scenario
            .storage
            .iter()
            .find(|s| s.origin.name == name)
            .map(|s| s.value.clone())
            .or_else(|| {
                let files = pdsim_spec::files::MemoryFiles::new();
                pdsim_spec::catalog::Catalog::new(&files, vec![])
                    .storage(name)
                    .ok()
                    .map(|e| e.value)
            })
            .ok_or_else(|| BuildError {
                path: format!("offload.tiers[{index}].tier"),
                message: "unknown storage class".into(),
            })
    };
    let class = class_of(&tier.tier, 0)?;
    // TieringOffloadingSpec's secondary tiers: vLLM's filesystem tier
    // (`type: fs`, `tiering/fs/manager.py`) on each later tier's device.
    // (The primary is the one host-memory tier: tiers[0] is cpu_dram, and
    // validation refuses a tier named twice.)
    let mut secondary = Vec::new();
    for (i, t) in offload.tiers.iter().enumerate().skip(1) {
        let path = format!("offload.tiers[{i}].tier");
        if t.tier == "s3" {
            return Err(BuildError {
                path,
                message: "an object-store tier is vLLM's `obj` secondary tier (`tiering/obj/manager.py`), configured by its own endpoint and bucket settings; it is not simulated yet (filesystem tiers on NVMe or SSD are)".into(),
            });
        }
        secondary.push((t.bytes.max(0) as u64, class_of(&t.tier, i)?));
    }
    Ok(Some(OffloadChoice {
        bytes: tier.bytes.max(0) as u64,
        class,
        connector,
        rds,
        secondary,
    }))
}

/// The OffloadingConnector's cache policy (`offload.eviction_policy`,
/// omitted means `lru`; the rules pack has checked the name).
fn offload_policy(
    deployment: &pdsim_spec::deployment::Deployment,
) -> Result<pdsim_engine::offload::EvictionPolicy, BuildError> {
    use pdsim_engine::offload::EvictionPolicy;
    match deployment
        .offload
        .as_ref()
        .and_then(|o| o.eviction_policy.as_deref())
    {
        None | Some("lru") => Ok(EvictionPolicy::Lru),
        Some("arc") => Ok(EvictionPolicy::Arc),
        Some(other) => Err(BuildError {
            path: "offload.eviction_policy".into(),
            message: format!(
                "`{other}` is not a cache policy vLLM's CPU offloading manager has (lru, arc)"
            ),
        }),
    }
}

/// The release's OffloadingConnector manager, from its rules pack; a
/// release whose manager pdsim does not mirror is refused rather than run
/// with another release's.
fn offload_manager(
    pack: &pdsim_spec::rules::pack::RulesPack,
) -> Result<pdsim_engine::offload::Release, BuildError> {
    use pdsim_engine::offload::Release;
    use pdsim_spec::rules::pack::OffloadManagerRelease;
    match pack.defaults.offload_manager {
        Some(OffloadManagerRelease::V0_29_0) => Ok(Release::V0_29_0),
        Some(OffloadManagerRelease::V0_31_0) => Ok(Release::V0_31_0),
        None => Err(BuildError {
            path: "offload.connector".into(),
            message: format!(
                "the OffloadingConnector of rules pack `{}` predates the CPU offloading manager pdsim mirrors (`vllm/v1/kv_offload/cpu/manager.py` of vLLM 0.29.0 and 0.31.0); its own (0.15.1's `vllm/v1/kv_offload/lru_manager.py` moves chunks being loaded and may evict the chunks a store offers) is not simulated",
                pack.name
            ),
        }),
    }
}

/// Builds the runtime cluster of a deployment without router inputs (see
/// `build_with_router`), or refuses what cannot run faithfully yet.
pub fn build(bundle: &ValidDeployment, scenario: &ResolvedScenario) -> Result<Cluster, BuildError> {
    build_with_router(bundle, scenario, None)
}

/// Builds the runtime cluster with the router's loaded inputs (see
/// `pdsim_router::check_router_inputs`). A deployment with a router block
/// must come with its inputs; without a block the EPP's built-in default
/// configuration routes over every pod, as the Deployment specification
/// says. Under P/D that configuration has no disaggregation profile, so
/// every request is served whole by the pod it lands on, prefill pods
/// included: exactly what an llm-d cluster without a P/D router does.
pub fn build_with_router(
    bundle: &ValidDeployment,
    scenario: &ResolvedScenario,
    router: Option<pdsim_router::RouterInputs>,
) -> Result<Cluster, BuildError> {
    let deployment = &bundle.deployment;
    let pack = pdsim_spec::rules::pack::for_version(&scenario.scenario.engine_version).ok_or_else(
        || BuildError {
            path: "engine_version".into(),
            message: "no rules pack".into(),
        },
    )?;
    if scenario.model.value.recurrent.is_some()
        && let Some(refusal) = hybrid_refusal(bundle, scenario, router.as_ref())
    {
        return Err(refusal);
    }
    if scenario.model.value.sparse.is_some()
        && let Some(refusal) = sparse_refusal(bundle, scenario, router.as_ref())
    {
        return Err(refusal);
    }
    if let Some(refusal) = multi_module_mtp_refusal(bundle, scenario) {
        return Err(refusal);
    }
    let offload = offload_tier(deployment, scenario, pack)?;
    if offload
        .as_ref()
        .is_some_and(|o| o.connector == OffloadConnector::LmCache)
        && router.as_ref().is_some_and(|r| r.reads_kv_events())
    {
        return Err(BuildError {
            path: "offload.connector".into(),
            message: "LMCache publishes its stored chunks as KV events (LMCACHE_ENABLE_KV_EVENTS) to the router's precise prefix-cache index; pdsim does not simulate LMCache's events yet, and refuses rather than leave that index without them".into(),
        });
    }
    if deployment.router.is_some() && router.is_none() {
        return Err(BuildError {
            path: "router".into(),
            message: "the router block's inputs were not loaded; refusing rather than routing with a different policy".into(),
        });
    }
    let sets: Vec<CoefficientSet> = scenario
        .coefficients
        .iter()
        .map(|e| e.value.clone())
        .collect();
    let gpus_per_node = scenario.scenario.cluster.gpus_per_node.max(1) as u64;
    let mut next_node = 0u64;
    let mut pools = Vec::new();
    for (i, (pool, resolved)) in deployment
        .pools
        .iter()
        .zip(&bundle.resolution.pools)
        .enumerate()
    {
        let (unit, block) = (
            resolved.engine.prefix_reuse_tokens,
            resolved.engine.block_size,
        );
        if unit == 0 || block % unit != 0 {
            return Err(BuildError {
                path: format!("pools[{i}].engine.max_num_batched_tokens"),
                message: format!(
                    "sub-block prefix reuse needs the reuse unit ({unit} tokens, max_num_batched_tokens) to divide \
                     block_size ({block}); pdsim cannot say how vllm-rbln reuses a unit that straddles blocks"
                ),
            });
        }
        let layout = &resolved.layout;
        let pods = layout
            .cluster
            .as_ref()
            .map_or(0, |c| c.engines)
            .min(u32::MAX as u128) as u32;
        if pods == 0 {
            return Err(BuildError {
                path: format!("pools[{i}]"),
                message: "the pool holds no engine".into(),
            });
        }
        // A scenario whose sets fit the linear model's four terms for this
        // pool prices it with that fit; otherwise the roofline does.
        let build_error = |message| BuildError {
            path: format!("pools[{i}]"),
            message,
        };
        let acceptance = match &resolved.engine.spec_method {
            Some(method) => pdsim_cost::acceptance_overrides(
                &scenario.chip.origin.name,
                scenario.chip.value.gpus_per_node,
                &scenario.model.value.name,
                layout,
                method,
                usize::try_from(resolved.engine.num_spec_tokens).unwrap_or(usize::MAX),
                &sets,
            )
            .map_err(build_error)?,
            None => Vec::new(),
        };
        let linear = pdsim_cost::Linear::selected(
            &scenario.model.value,
            &scenario.chip.origin.name,
            scenario.chip.value.gpus_per_node,
            layout,
            &sets,
        )
        .map_err(build_error)?;
        let (cost, cost_model): (Box<dyn CostModel>, &'static str) = if linear {
            let model = pdsim_cost::Linear::new(
                &scenario.model.value,
                &scenario.chip.origin.name,
                scenario.chip.value.gpus_per_node,
                layout,
                &resolved.engine,
                &sets,
            )
            .map_err(build_error)?;
            (Box::new(model), "linear")
        } else {
            let model = pdsim_cost::Roofline::new(
                &scenario.model.value,
                &scenario.chip.value,
                &scenario.chip.origin.name,
                scenario.fabric.as_ref().map(|f| &f.value),
                layout,
                &resolved.engine,
                &sets,
            )
            .map_err(build_error)?;
            (Box::new(model), "roofline")
        };
        let first_gpu = next_node * gpus_per_node;
        next_node += layout.nodes;
        pools.push(PoolRuntime {
            role: Role::parse(&pool.role).unwrap_or(Role::Colocated),
            pods,
            ranks: layout.dp.min(u16::MAX as u64) as u16,
            lockstep: scenario.model.value.is_moe() && layout.dp > 1,
            ranks_per_endpoint: match pool.parallel.data_parallel_load_balancing.as_deref() {
                Some("external") => 1,
                Some("hybrid") if layout.dp_local > 0 => layout.dp_local.min(layout.dp) as u16,
                _ => layout.dp.min(u16::MAX as u64) as u16,
            },
            // One API server per rank an endpoint fronts, one with the Rust
            // frontend (`api_server_count`, `vllm/entrypoints/cli/serve.py`).
            rust_frontend: resolved.engine.frontend == "rust",
            // vLLM's Rust frontend is not in the release's wheel, so where
            // it stamps the arrival cannot be read; it renders and tokenizes
            // as the Python one does, and is taken to stamp where the
            // release's Python renderer does.
            arrival_at_render: resolved.engine.arrival_stamp
                == pdsim_spec::rules::pack::ArrivalStamp::Render,
            engine: {
                let mut engine = engine_config(resolved, &acceptance);
                // The tier's bytes are per engine (vLLM's kv_offloading_size
                // is the total over an instance's ranks), split across its
                // data-parallel ranks; a block holds block_size tokens on
                // every GPU of a rank.
                let chunks_in = |bytes: u64, tokens: u64| {
                    let unit_bytes = tokens as f64
                        * resolved.kv.kv_bytes_per_token_rank
                        * layout.world_size as f64;
                    (bytes as f64 / layout.dp.max(1) as f64 / unit_bytes.max(1.0)).floor() as u64
                };
                let per_engine = |o: &OffloadChoice, tokens: u64| chunks_in(o.bytes, tokens);
                engine.offload = match offload
                    .as_ref()
                    .filter(|o| o.connector == OffloadConnector::Offloading)
                {
                    Some(o) => Some(pdsim_engine::offload::OffloadConfig {
                        chunks: per_engine(o, resolved.engine.block_size),
                        policy: offload_policy(deployment)?,
                        release: offload_manager(pack)?,
                    }),
                    None => None,
                };
                // Each secondary tier's bytes are per engine too, in
                // chunks of one GPU block (the primary's chunk: the
                // filesystem tier writes a file per primary chunk).
                engine.offload_secondary = offload
                    .as_ref()
                    .filter(|o| o.connector == OffloadConnector::Offloading)
                    .map_or_else(Vec::new, |o| {
                        o.secondary
                            .iter()
                            .map(|(bytes, _)| chunks_in(*bytes, resolved.engine.block_size))
                            .collect()
                    });
                // A prompt's chunks are promoted from the secondary tiers
                // into the primary before any is loaded (a lookup that
                // starts a promotion defers the request), and a promotion
                // may evict any ready chunk but its own: a prompt with more
                // chunks than the primary holds evicts what it promoted at
                // every step and is never scheduled.
                if let Some(tier) = engine.offload.filter(|_| !engine.offload_secondary.is_empty()) {
                    let block = resolved.engine.block_size.max(1);
                    let longest = resolved.kv.max_model_len.div_ceil(block);
                    if tier.chunks < longest {
                        return Err(BuildError {
                            path: "offload.tiers[0].bytes".into(),
                            message: format!(
                                "TieringOffloadingSpec's primary tier holds {} chunks of {block} tokens an engine in pool {i}, fewer than the {longest} of a prompt of max_model_len ({} tokens): vLLM promotes a prompt's chunks from the secondary tiers into the primary before loading any (`TieringOffloadingManager.lookup`, `vllm/v1/kv_offload/tiering/manager.py`), and a promotion may evict every ready chunk but its own, so such a prompt would evict the chunks it promoted at every step and never be scheduled; give the primary tier at least {} bytes an engine",
                                tier.chunks,
                                resolved.kv.max_model_len,
                                longest as f64
                                    * block as f64
                                    * resolved.kv.kv_bytes_per_token_rank
                                    * layout.world_size as f64
                                    * layout.dp.max(1) as f64
                            ),
                        });
                    }
                }
                // LMCache's local CPU backend holds `max_local_cpu_size`
                // per worker (rank); the tier's bytes are per engine like
                // the OffloadingConnector's, so the chunk count is the same.
                if let (Some(o), Some(chunk)) = (
                    offload
                        .as_ref()
                        .filter(|o| o.connector == OffloadConnector::LmCache),
                    resolved.engine.lmcache_chunk_tokens,
                ) {
                    let unit = engine.prefix_unit.max(1) as u64;
                    if chunk == 0 || chunk % unit != 0 || chunk > u32::MAX as u64 {
                        return Err(BuildError {
                            path: "offload.connector".into(),
                            message: format!(
                                "LMCache's chunk of {chunk} tokens is not a multiple of pool {}'s prefix-reuse unit ({unit} tokens); pdsim keys LMCache's chunks by the engine's block hashes",
                                i
                            ),
                        });
                    }
                    engine.lmcache = Some(pdsim_engine::lmcache::LmCacheConfig {
                        chunk_tokens: chunk as u32,
                        // lmcache-rbln's RDS keeps at most `rds_max_chunks`
                        // chunks a rank (engine process), evicting the least
                        // recently used before it stores a new one: the
                        // same set as LRU after the store, since the new
                        // chunk is never the victim.
                        capacity_chunks: match pack.defaults.lmcache_rds_max_chunks {
                            Some(max) if o.rds => per_engine(o, chunk).min(max),
                            _ => per_engine(o, chunk),
                        },
                    });
                }
                engine
            },
            cost,
            cost_model,
            first_gpu,
            gpus_per_engine: layout.gpus_per_engine.min(u64::MAX as u128) as u64,
            world: layout.world_size.min(u64::MAX as u128) as u64,
            kv_bytes_per_token_gpu: resolved.kv.kv_bytes_per_token_rank,
        });
    }
    // Under a P/D profile handler a deployment of colocated pods still
    // disaggregates: `prefill-filter` and `decode-filter` both keep
    // `llm-d.ai/role: prefill-decode` (llm-d-router
    // `pkg/epp/framework/plugins/scheduling/filter/bylabel/README.md`), so
    // the decider splits requests between those pods, which then run the
    // KV connector like prefill and decode pods do.
    let splitting_handler = router
        .as_ref()
        .and_then(|r| r.disaggregating_handler())
        .map(str::to_string);
    let colocated_split =
        pools.iter().all(|p| p.role == Role::Colocated) && splitting_handler.is_some();
    if colocated_split && deployment.pd_transfer.is_none() {
        return Err(BuildError {
            path: "router.endpoint_picker_config".into(),
            message: format!(
                "`{}` disaggregates requests, and with no prefill or decode pool its prefill profile runs on the \
                 colocated pods (`prefill-filter` keeps `llm-d.ai/role: prefill-decode`); the deployment declares \
                 no `pd_transfer` connector, so those pods could not move KV to each other, and pdsim does not \
                 simulate a split whose KV cannot move. Declare `pd_transfer: {{connector: NixlConnector}}`, or \
                 run `single-profile-handler`",
                splitting_handler.as_deref().unwrap_or_default()
            ),
        });
    }
    let disaggregated = colocated_split || pools.iter().any(|p| p.role != Role::Colocated);
    // The EPP reads each pod's metrics through its extractor's mapping for
    // the pod's engine type; pdsim's engines export vLLM's series only.
    if let Some(inputs) = router.as_ref() {
        for resolved in &bundle.resolution.pools {
            if inputs.selects(&resolved.labels)
                && let Some(why) = inputs.metrics_mismatch(&resolved.labels)
            {
                return Err(BuildError {
                    path: "router.endpoint_picker_config".into(),
                    message: why,
                });
            }
        }
    }
    // The EPP makes one endpoint of each target port of each selected pod
    // (`pkg/epp/datastore/datastore.go`), the i-th port reaching the pod's
    // i-th API server: one per pod under internal load balancing, one per
    // node's ranks under hybrid, one per rank under external
    // (`ranks_per_endpoint`). A port past the last API server is an address
    // nothing listens on.
    let endpoints_per_pod = router
        .as_ref()
        .and_then(|r| r.target_ports())
        .map(<[u32]>::len);
    if let (Some(ports), Some(inputs)) = (endpoints_per_pod, router.as_ref()) {
        for (i, (pool, resolved)) in pools.iter().zip(&bundle.resolution.pools).enumerate() {
            if !inputs.selects(&resolved.labels) {
                continue;
            }
            let servers = usize::from(pool.ranks.max(1))
                .div_ceil(usize::from(pool.ranks_per_endpoint.max(1)));
            if ports > servers {
                return Err(BuildError {
                    path: format!("pools[{i}].parallel"),
                    message: format!(
                        "the EPP sends to {ports} target port(s) of each pod, but each pod of this pool \
                         runs {servers} API server(s) ({} data-parallel rank(s), {} behind each): the \
                         EPP would route requests to ports nothing listens on, which pdsim does not \
                         simulate; list at most {servers} port(s), or expose more API servers \
                         (`data_parallel_load_balancing`)",
                        pool.ranks, pool.ranks_per_endpoint
                    ),
                });
            }
        }
    }
    let decode_layout = deployment
        .pools
        .iter()
        .zip(&bundle.resolution.pools)
        .find(|(p, _)| Role::parse(&p.role) == Some(Role::Decode))
        .or_else(|| deployment.pools.iter().zip(&bundle.resolution.pools).next())
        .map(|(_, r)| &r.layout)
        .ok_or_else(|| BuildError {
            path: "pools".into(),
            message: "no pool".into(),
        })?;
    let transfer = pdsim_cost::TransferModel::new(
        &scenario.chip.origin.name,
        &scenario.model.value.name,
        decode_layout,
        &scenario.chip.value,
        &sets,
    )
    .map_err(|message| BuildError {
        path: "pd_transfer".into(),
        message,
    })?;
    if disaggregated {
        // llm-d runs NixlConnector with `kv_role: kv_both` on both sides: a
        // consumer, so under async scheduling frees wait for the steps in
        // flight (`defer_block_free`), and a producer, so a preempted
        // request's output in flight is dropped (`requires_kv_delivery`);
        // `Scheduler.__init__`, `vllm/v1/core/sched/scheduler.py`.
        for (pool, resolved) in pools.iter_mut().zip(&bundle.resolution.pools) {
            let deferred = resolved.engine.deferred_block_frees;
            pool.engine.defer_block_free = deferred && pool.engine.async_scheduling;
            pool.engine.drop_stale_output = deferred;
        }
        let connector = deployment
            .pd_transfer
            .as_ref()
            .and_then(|t| t.connector.as_deref())
            .unwrap_or("NixlConnector");
        if connector != "NixlConnector" {
            return Err(BuildError {
                path: "pd_transfer.connector".into(),
                message: format!(
                    "only NixlConnector's pull flow is simulated; `{connector}` moves KV differently"
                ),
            });
        }
    }
    let fabric_gbps = scenario
        .fabric
        .as_ref()
        .map_or(0.0, |f| f.value.inter_node_bw_gbps);
    Ok(Cluster {
        pools,
        disaggregated,
        endpoints_per_pod,
        router: match &router {
            Some(inputs) if !inputs.is_builtin() => "epp",
            _ => "epp-builtin-default",
        },
        gpus_per_node,
        nic_bytes_per_s: fabric_gbps * 1e9 * transfer.overhead,
        intra_node_bytes_per_s: scenario.chip.value.intra_node_bw_gbps * 1e9,
        transfer,
        kv_lease: KvLease::from_pack(&pack.defaults),
        dp_lb: match pack.defaults.dp_lb_score {
            pdsim_spec::rules::pack::DpLbScore::WaitingX4PlusRunning => {
                crate::dp_lb::DpLbRule::WaitingTimesFourPlusRunning
            }
            pdsim_spec::rules::pack::DpLbScore::InflightAndKvPressure => {
                crate::dp_lb::DpLbRule::InflightAndKvPressure
            }
        },
        offload: offload.map(|o| OffloadRuntime {
            direct: o.rds,
            read_bytes_per_s: o.class.read_bandwidth_mb_s * 1e6,
            write_bytes_per_s: o.class.write_bandwidth_mb_s * 1e6,
            // Chips without a stated host link get PCIe Gen4 x16 [assumed].
            host_link_bytes_per_s: scenario.chip.value.host_link_gbps.unwrap_or(32.0) * 1e9,
            base_latency: pdsim_core::SimDuration::from_secs_f64(o.class.base_latency_us * 1e-6),
            secondary: o
                .secondary
                .iter()
                .map(|(_, class)| SecondaryRuntime {
                    read_bytes_per_s: class.read_bandwidth_mb_s * 1e6,
                    write_bytes_per_s: class.write_bandwidth_mb_s * 1e6,
                    base_latency: pdsim_core::SimDuration::from_secs_f64(
                        class.base_latency_us * 1e-6,
                    ),
                })
                .collect(),
        }),
        epp: router.unwrap_or_else(pdsim_router::RouterInputs::builtin),
        pool_labels: bundle
            .resolution
            .pools
            .iter()
            .map(|p| p.labels.clone())
            .collect(),
    })
}

/// The prefill engine's lease on a finished request's blocks (NixlConnector,
/// `nixl/base_scheduler.py` and `nixl/base_worker.py`): it runs `duration`
/// from prefill completion; with heartbeats on, the decode side renews it
/// every `heartbeat_interval` while it holds the request, each renewal
/// pushing the expiry to `extension` past it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvLease {
    pub duration: pdsim_core::SimDuration,
    pub heartbeats: bool,
    pub heartbeat_interval: pdsim_core::SimDuration,
    pub extension: pdsim_core::SimDuration,
}

impl KvLease {
    /// vLLM derives the interval and the extension from the integer lease in
    /// seconds with integer division (`kv_lease_duration // 6`,
    /// `kv_lease_duration * 2 // 3`), so they are computed the same way.
    pub fn from_pack(defaults: &pdsim_spec::rules::pack::Defaults) -> KvLease {
        let lease_s = defaults.kv_lease_duration_s;
        KvLease {
            duration: pdsim_core::SimDuration::from_secs_f64(lease_s as f64),
            heartbeats: defaults.kv_lease_heartbeats,
            heartbeat_interval: pdsim_core::SimDuration::from_secs_f64((lease_s / 6) as f64),
            extension: pdsim_core::SimDuration::from_secs_f64(
                (lease_s.saturating_mul(2) / 3) as f64,
            ),
        }
    }

    /// A fixed hold of `duration` that nothing renews.
    pub fn fixed(duration: pdsim_core::SimDuration) -> KvLease {
        KvLease {
            duration,
            heartbeats: false,
            heartbeat_interval: pdsim_core::SimDuration(0),
            extension: pdsim_core::SimDuration(0),
        }
    }
}
