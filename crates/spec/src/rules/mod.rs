//! Engine-release rules: what one vLLM release accepts and refuses. They run
//! only after the field checks passed, against a resolved deployment, and
//! their data comes from the release's pack (`pack.rs`).

pub mod pack;

use crate::deployment::Deployment;
use crate::load::Source;
use crate::model::Model;
use crate::problem::Problems;
use crate::quantity::MaxModelLen;
use crate::resolve::Resolution;
use pack::RulesPack;

/// Everything a rule may look at.
pub struct RuleContext<'a> {
    pub source: &'a Source,
    pub deployment: &'a Deployment,
    pub pack: &'a RulesPack,
    pub model: &'a Model,
    pub resolution: &'a Resolution,
}

/// A `moe_backend` as vLLM reads it: lower-cased, with `-` turned into `_`
/// (the argparse `type` in `vllm/engine/arg_utils.py` and the
/// `_normalize_moe_backend` validator of `KernelConfig` in
/// `vllm/config/kernel.py`, 0.29.0, 0.30.0 — which vllm-rbln 0.12.0 builds
/// on — and 0.31.0), so `Deep-GEMM` is `deep_gemm`.
pub fn moe_backend_name(backend: &str) -> String {
    backend.to_lowercase().replace('-', "_")
}

/// Whether a `moe_backend` runs the mega-MoE path (`MEGA_MOE_BACKENDS`,
/// `vllm/config/kernel.py` in 0.29.0, 0.30.0 and 0.31.0).
pub fn is_mega_moe(backend: &str) -> bool {
    matches!(
        moe_backend_name(backend).as_str(),
        "deep_gemm_mega_moe"
            | "flashinfer_moe_ep_mega_deep_gemm"
            | "flashinfer_moe_ep_mega_cutedsl"
    )
}

/// Every rule's code, for documentation and for the test that each has a
/// negative case.
pub const RULE_CODES: &[&str] = &[
    "all2all-backend-known",
    "allreduce-backend-known",
    "enum-values-known",
    "speculative-method-known",
    "dcp-comm-backend-known",
    "offload-spec-known",
    "quantization-known",
    "connector-known",
    "eviction-policy-known",
    "moe-backend-known",
    "cp-kv-cache-interleave-fits-block",
    "pcp-excludes-data-parallelism",
    "pp-excludes-data-parallelism",
    "expert-divisibility-under-eplb",
    "expert-imbalance-without-eplb",
    "custom-allreduce-reachable",
    "mamba-cache-mode-matches-model",
    "cascade-attention-is-opt-in",
    "dbo-thresholds-stated-when-enabled",
    "dbo-threshold-below-microbatches",
    "sequence-parallel-moe-implied",
    "long-prefill-above-max-model-len",
    "swa-bounded-replay-unsupported",
    "swa-bounded-replay-ignored",
    "engram-config-unsupported",
    "mega-moe-needs-expert-parallel",
    "engram-config-without-engram",
    "load-balancing-external-needs-experts",
    "load-balancing-hybrid-needs-dp-local",
    "load-balancing-hybrid-resolved",
    "cudagraph-capture-pair-mismatch",
    "batched-tokens-below-max-num-seqs",
    "max-model-len-exceeds-model",
    "weights-exceed-memory",
    "kv-capacity-below-max-model-len",
    "kv-capacity-is-rbln-pre-resize-estimate",
    "key-unsupported-by-release",
];

/// Runs every rule of the pack.
pub fn run(ctx: &RuleContext<'_>) -> Problems {
    let mut problems = Problems::new();
    for (index, pool) in ctx.deployment.pools.iter().enumerate() {
        let resolved = &ctx.resolution.pools[index];
        pool_rules(ctx, index, pool, resolved, &mut problems);
    }
    if let Some(offload) = &ctx.deployment.offload {
        if let Some(spec) = &offload.spec {
            enum_rule(
                ctx,
                &mut problems,
                "offload.spec",
                "offload_spec",
                spec,
                "offload-spec-known",
                true,
            );
        }
        if let Some(connector) = &offload.connector {
            enum_rule(
                ctx,
                &mut problems,
                "offload.connector",
                "connector",
                connector,
                "connector-known",
                false,
            );
        }
        if let Some(policy) = &offload.eviction_policy {
            enum_rule(
                ctx,
                &mut problems,
                "offload.eviction_policy",
                "eviction_policy",
                policy,
                "eviction-policy-known",
                false,
            );
        }
    }
    if let Some(connector) = ctx
        .deployment
        .pd_transfer
        .as_ref()
        .and_then(|p| p.connector.as_ref())
    {
        enum_rule(
            ctx,
            &mut problems,
            "pd_transfer.connector",
            "connector",
            connector,
            "connector-known",
            false,
        );
    }
    problems
}

/// A name must be in the pack's set for `set`; hard sets give errors, soft
/// sets warnings.
fn enum_rule(
    ctx: &RuleContext<'_>,
    problems: &mut Problems,
    path: &str,
    set: &str,
    value: &str,
    code: &str,
    hard: bool,
) {
    let list = if hard {
        ctx.pack.enums.get(set)
    } else {
        ctx.pack.soft_enums.get(set)
    };
    let Some(list) = list else { return };
    if list.iter().any(|v| v == value) {
        return;
    }
    let message = format!(
        "`{value}` is not a value of {set} that {} knows; known: {}",
        ctx.pack.name,
        list.join(", ")
    );
    problems.push(if hard {
        ctx.source.error(path, code, message)
    } else {
        ctx.source.warning(path, code, message)
    });
}

fn pool_rules(
    ctx: &RuleContext<'_>,
    index: usize,
    pool: &crate::deployment::Pool,
    resolved: &crate::resolve::PoolResolution,
    problems: &mut Problems,
) {
    let e = &pool.engine;
    let p = &pool.parallel;
    let layout = &resolved.layout;
    let engine = &resolved.engine;
    let features = &ctx.pack.features;
    let model = ctx.model;
    let at = |key: &str| format!("pools[{index}].{key}");

    // Keys this release has no flag or no support for.
    for (key, reason) in &ctx.pack.unsupported_keys {
        let stated = match key.as_str() {
            "engine.allreduce_backend" => e.allreduce_backend.clone(),
            "engine.dcp_comm_backend" => e.dcp_comm_backend.clone(),
            "engine.dcp_q_replicate" => e.dcp_q_replicate.map(|v| v.to_string()),
            "engine.moe_backend" => e.moe_backend.clone(),
            "parallel.pcp" => (p.pcp > 1).then(|| p.pcp.to_string()),
            // `pack::tests::unsupported_keys_are_checkable` keeps the packs
            // to the keys above.
            _ => None,
        };
        if let Some(value) = stated {
            problems.push(ctx.source.error(
                &at(key),
                "key-unsupported-by-release",
                format!(
                    "{key}: {value} is not accepted by {}: {reason}",
                    ctx.pack.name
                ),
            ));
        }
    }

    // Names this release knows.
    let hard: [(&str, &str, Option<&String>, &str); 9] = [
        (
            "engine.all2all_backend",
            "all2all_backend",
            e.all2all_backend.as_ref(),
            "all2all-backend-known",
        ),
        (
            "engine.allreduce_backend",
            "allreduce_backend",
            e.allreduce_backend.as_ref(),
            "allreduce-backend-known",
        ),
        (
            "engine.cudagraph_mode",
            "cudagraph_mode",
            e.cudagraph_mode.as_ref(),
            "enum-values-known",
        ),
        (
            "engine.cache_dtype",
            "cache_dtype",
            e.cache_dtype.as_ref(),
            "enum-values-known",
        ),
        (
            "engine.mamba_cache_dtype",
            "mamba_cache_dtype",
            e.mamba_cache_dtype.as_ref(),
            "enum-values-known",
        ),
        (
            "engine.mamba_ssm_cache_dtype",
            "mamba_ssm_cache_dtype",
            e.mamba_ssm_cache_dtype.as_ref(),
            "enum-values-known",
        ),
        (
            "engine.mamba_cache_mode",
            "mamba_cache_mode",
            e.mamba_cache_mode.as_ref(),
            "enum-values-known",
        ),
        (
            "engine.scheduling_policy",
            "scheduling_policy",
            e.scheduling_policy.as_ref(),
            "enum-values-known",
        ),
        (
            "engine.frontend",
            "frontend",
            e.frontend.as_ref(),
            "enum-values-known",
        ),
    ];
    for (path, set, value, code) in hard {
        if let Some(value) = value {
            enum_rule(ctx, problems, &at(path), set, value, code, true);
        }
    }
    if let Some(mode) = &p.data_parallel_load_balancing {
        enum_rule(
            ctx,
            problems,
            &at("parallel.data_parallel_load_balancing"),
            "data_parallel_load_balancing",
            mode,
            "enum-values-known",
            true,
        );
    }
    if let Some(spec) = &e.speculative {
        enum_rule(
            ctx,
            problems,
            &at("engine.speculative.method"),
            "speculative_method",
            &spec.method,
            "speculative-method-known",
            true,
        );
    }
    if let Some(backend) = &e.dcp_comm_backend {
        enum_rule(
            ctx,
            problems,
            &at("engine.dcp_comm_backend"),
            "dcp_comm_backend",
            backend,
            "dcp-comm-backend-known",
            true,
        );
    }
    if let Some(q) = &e.quantization {
        enum_rule(
            ctx,
            problems,
            &at("engine.quantization"),
            "quantization",
            q,
            "quantization-known",
            false,
        );
    }
    if let Some(b) = &e.moe_backend {
        // vLLM 0.29.0, 0.30.0 (vllm-rbln 0.12.0's base) and 0.31.0 refuse a
        // name outside `MoEBackend` (`vllm/config/kernel.py`):
        // `vllm/engine/arg_utils.py` gives the
        // Literal's values to argparse as `choices`, after lower-casing the
        // value and turning `-` into `_`, and `KernelConfig` validates the
        // same Literal. So the comparison is on that normalised name, and a
        // pack that lists `moe_backend` under `enums` makes an unknown name
        // an error (every pack that has the flag does); one that listed it
        // under `soft_enums` (a set not read from the release's source)
        // would only warn.
        let hard = ctx.pack.enums.contains_key("moe_backend");
        let list = if hard {
            ctx.pack.enums.get("moe_backend")
        } else {
            ctx.pack.soft_enums.get("moe_backend")
        };
        // The message quotes the name as written, not as normalised.
        if !list.is_some_and(|l| l.contains(&moe_backend_name(b))) {
            enum_rule(
                ctx,
                problems,
                &at("engine.moe_backend"),
                "moe_backend",
                b,
                "moe-backend-known",
                hard,
            );
        }
        // The mega-MoE path fuses dispatch into its expert kernel and exists
        // only under expert parallelism (`deepseek_v4/nvidia/model.py`:
        // NotImplementedError without --enable-expert-parallel).
        if is_mega_moe(b) && !p.enable_expert_parallel {
            problems.push(ctx.source.error(
                &at("engine.moe_backend"),
                "mega-moe-needs-expert-parallel",
                format!("`{b}` runs only with expert parallelism (parallel.enable_expert_parallel: true); vLLM refuses it otherwise"),
            ));
        }
    }

    // Decode-context interleave must tile a block when no connector moves KV.
    let has_connector = ctx
        .deployment
        .pd_transfer
        .as_ref()
        .is_some_and(|t| t.connector.is_some())
        || ctx
            .deployment
            .offload
            .as_ref()
            .is_some_and(|o| o.connector.is_some());
    if let Some(interleave) = e.cp_kv_cache_interleave_size.filter(|v| *v > 0) {
        let interleave = interleave as u64;
        if layout.dcp > 1
            && !has_connector
            && (engine.block_size < interleave || !engine.block_size.is_multiple_of(interleave))
        {
            problems.push(ctx.source.error(
                &at("engine.cp_kv_cache_interleave_size"),
                "cp-kv-cache-interleave-fits-block",
                format!("with dcp on and no KV connector, block_size {} must be at least and divisible by the interleave {interleave}", engine.block_size),
            ));
        }
    }
    if features.pcp_excludes_dp && p.pcp > 1 && p.dp > 1 {
        problems.push(ctx.source.error(
            &at("parallel.pcp"),
            "pcp-excludes-data-parallelism",
            format!("{} refuses prefill-context parallelism (pcp {}) together with data parallelism (dp {})", ctx.pack.name, p.pcp, p.dp),
        ));
    }
    if features.pp_excludes_dp && p.pp > 1 && p.dp > 1 {
        problems.push(ctx.source.error(
            &at("parallel.pp"),
            "pp-excludes-data-parallelism",
            format!("{} refuses pipeline parallel > 1 together with data parallel > 1 (pp {}, dp {}); use PP for one role and DP for the other", ctx.pack.name, p.pp, p.dp),
        ));
    }

    // Experts across expert-parallel ranks.
    if model.is_moe() && layout.expert_parallel_width > 1 {
        let ep = layout.expert_parallel_width;
        let experts = model.experts as u128;
        if engine.eplb_enabled {
            let total = experts + engine.num_redundant_experts as u128;
            if !total.is_multiple_of(ep) {
                problems.push(ctx.source.error(
                    &at("engine.eplb.num_redundant_experts"),
                    "expert-divisibility-under-eplb",
                    format!("with EPLB on, the expert-parallel width {ep} must divide experts plus redundant experts ({total})"),
                ));
            }
        } else if ep > experts {
            problems.push(ctx.source.error(
                &at("parallel.enable_expert_parallel"),
                "expert-imbalance-without-eplb",
                format!("expert-parallel width {ep} exceeds the model's {experts} experts, leaving ranks with none"),
            ));
        } else if !experts.is_multiple_of(ep) {
            let most = experts.div_ceil(ep);
            let least = experts / ep;
            problems.push(ctx.source.warning(
                &at("parallel.enable_expert_parallel"),
                "expert-imbalance-without-eplb",
                format!("{experts} experts over width {ep} split unevenly ({most} vs {least} per rank, ratio {:.2})", most as f64 / least.max(1) as f64),
            ));
        }
    }
    if engine.allreduce_backend == "nccl"
        && layout.tp > 1
        && e.allreduce_backend.as_deref() != Some("nccl")
        && e.disable_custom_all_reduce != Some(true)
    {
        let reason = resolved
            .overrides
            .iter()
            .find(|o| o.field == "allreduce_backend")
            .map_or("the custom kernel is unreachable".to_string(), |o| {
                o.reason.clone()
            });
        problems.push(ctx.source.warning(
            &at("parallel.tp"),
            "custom-allreduce-reachable",
            format!("the custom all-reduce kernel is not reachable at tp {}: {reason}; the all-reduce falls back to NCCL", layout.tp),
        ));
    }
    let has_mamba_keys = e.mamba_cache_dtype.is_some()
        || e.mamba_ssm_cache_dtype.is_some()
        || e.mamba_cache_mode.is_some();
    if has_mamba_keys && model.recurrent.is_none() {
        problems.push(ctx.source.warning(
            &at("engine"),
            "mamba-cache-mode-matches-model",
            format!(
                "mamba cache settings are set but {} has no recurrent layers; they have no effect",
                model.name
            ),
        ));
    }
    if e.disable_cascade_attn == Some(false) && !features.cascade_attention_by_default {
        problems.push(ctx.source.warning(
            &at("engine.disable_cascade_attn"),
            "cascade-attention-is-opt-in",
            "cascade attention is opted in; vLLM uses it only for batches that share a long common prefix",
        ));
    }
    if let Some(dbo) = &e.dbo
        && dbo.enable_dbo == Some(true)
    {
        if dbo.dbo_decode_token_threshold.is_none() || dbo.dbo_prefill_token_threshold.is_none() {
            problems.push(ctx.source.warning(
                    &at("engine.dbo"),
                    "dbo-thresholds-stated-when-enabled",
                    format!(
                        "DBO is on with a threshold left to the release default (decode {}, prefill {} tokens)",
                        engine.dbo_decode_token_threshold, engine.dbo_prefill_token_threshold
                    ),
                ));
        }
        if features.dbo_refuses_threshold_below_microbatches {
            for (key, value) in [
                ("dbo_decode_token_threshold", dbo.dbo_decode_token_threshold),
                (
                    "dbo_prefill_token_threshold",
                    dbo.dbo_prefill_token_threshold,
                ),
            ] {
                if let Some(v) = value.filter(|v| *v < 2) {
                    problems.push(ctx.source.error(
                        &at(&format!("engine.dbo.{key}")),
                        "dbo-threshold-below-microbatches",
                        format!(
                            "{} refuses a DBO threshold below the two microbatches; found {v}",
                            ctx.pack.name
                        ),
                    ));
                }
            }
        }
    }
    if engine.sequence_parallel_moe {
        problems.push(ctx.source.warning(
            &at("engine.all2all_backend"),
            "sequence-parallel-moe-implied",
            format!("`{}` with tp {} and dp {} makes the MoE input sequence-parallel: the all-reduce becomes a reduce-scatter plus an all-gather", engine.all2all_backend, layout.tp, layout.dp),
        ));
    }
    // The engine compares the threshold with max_model_len as it resolved
    // it: stated, fitted (`auto`) or the model's whole window.
    let resolved_len = resolved.kv.max_model_len;
    if let Some(threshold) = e.long_prefill_token_threshold.filter(|t| {
        features.long_prefill_refused_above_max_model_len
            && *t > 0
            && resolved_len > 0
            && *t as u64 > resolved_len
    }) {
        problems.push(ctx.source.error(
            &at("engine.long_prefill_token_threshold"),
            "long-prefill-above-max-model-len",
            format!(
                "long_prefill_token_threshold {threshold} exceeds max_model_len {resolved_len} ({}); the engine refuses it",
                resolved.kv.max_model_len_origin
            ),
        ));
    }
    // DeepSeek-V4.1 is the model with a sliding-window latent cache and
    // Engram tables (`model.sparse`).
    let is_deepseek_v41 = model.sparse.is_some();
    let has_engram = model.sparse.as_ref().is_some_and(|s| s.engram.is_some());
    if let Some(value) = e.swa_bounded_replay {
        if !features.has_swa_bounded_replay {
            problems.push(ctx.source.error(
                &at("engine.swa_bounded_replay"),
                "swa-bounded-replay-unsupported",
                format!("{} has no --swa-bounded-replay flag", ctx.pack.name),
            ));
        } else if !is_deepseek_v41 {
            problems.push(ctx.source.warning(
                &at("engine.swa_bounded_replay"),
                "swa-bounded-replay-ignored",
                format!(
                    "swa_bounded_replay: {value} is read only by DeepSeek-V4.1; {} ignores it",
                    model.name
                ),
            ));
        }
    }
    if e.engram_config.is_some() {
        if !features.has_engram_config {
            problems.push(ctx.source.error(
                &at("engine.engram_config"),
                "engram-config-unsupported",
                format!("{} has no --engram-config", ctx.pack.name),
            ));
        } else if !has_engram {
            problems.push(ctx.source.error(
                &at("engine.engram_config"),
                "engram-config-without-engram",
                format!(
                    "{} has no Engram lookups; {} refuses engram_config on it",
                    model.name, ctx.pack.name
                ),
            ));
        }
    }
    match p.data_parallel_load_balancing.as_deref() {
        Some("external") if !model.is_moe() => problems.push(ctx.source.error(
            &at("parallel.data_parallel_load_balancing"),
            "load-balancing-external-needs-experts",
            format!("external data-parallel load balancing is for mixture-of-experts models; {} is dense, so run independent engines instead", model.name),
        )),
        Some("hybrid") if p.dp_local == 0 => problems.push(ctx.source.error(
            &at("parallel.data_parallel_load_balancing"),
            "load-balancing-hybrid-needs-dp-local",
            "hybrid load balancing runs one API server per node and needs dp_local to say how many ranks each node holds",
        )),
        Some("hybrid") if p.dp_local >= p.dp => problems.push(ctx.source.warning(
            &at("parallel.data_parallel_load_balancing"),
            "load-balancing-hybrid-resolved",
            "every rank sits on one node (dp_local = dp), so hybrid load balancing runs as `internal`: one API server balances all ranks",
        )),
        _ => {}
    }
    if let (Some(max), Some(_)) = (e.max_cudagraph_capture_size, &e.cudagraph_capture_sizes)
        && let Some(largest) = engine.cudagraph_capture_sizes.last()
        && max as u64 != *largest
    {
        problems.push(ctx.source.error(
                    &at("engine.max_cudagraph_capture_size"),
                    "cudagraph-capture-pair-mismatch",
                    format!("max_cudagraph_capture_size {max} is not the largest capture size kept ({largest}, after dropping sizes above max_num_batched_tokens {}); the engine refuses the pair", engine.max_num_batched_tokens),
                ));
    }
    if engine.max_num_batched_tokens < engine.max_num_seqs {
        problems.push(ctx.source.error(
            &at("engine.max_num_batched_tokens"),
            "batched-tokens-below-max-num-seqs",
            format!(
                "max_num_batched_tokens {} must be at least max_num_seqs {}",
                engine.max_num_batched_tokens, engine.max_num_seqs
            ),
        ));
    }
    if let Some(MaxModelLen::Tokens(len)) = e.max_model_len
        && len > 0
        && model.max_position_embeddings > 0
        && len as u64 > model.max_position_embeddings
    {
        problems.push(ctx.source.error(
            &at("engine.max_model_len"),
            "max-model-len-exceeds-model",
            format!(
                "max_model_len {len} exceeds {}'s window of {} tokens",
                model.name, model.max_position_embeddings
            ),
        ));
    }
    let memory = &resolved.memory;
    let kv = &resolved.kv;
    if kv.kv_bytes_per_token_rank <= 0.0 {
        // An unknown cache dtype has no size; enum-values-known says so, and
        // the memory rules would only repeat it in a misleading way.
    } else if memory.kv_bytes <= 0 || kv.num_gpu_blocks == 0 {
        problems.push(ctx.source.error(
            &at("parallel"),
            "weights-exceed-memory",
            format!(
                "each rank needs {:.1} GiB of weights, {:.1} GiB of activations and {:.1} GiB of graphs and buffers but may use {:.1} GiB: no memory is left for KV",
                (memory.weights_bytes + memory.draft_weights_bytes) as f64 / (1u64 << 30) as f64,
                memory.activation_peak_bytes as f64 / (1u64 << 30) as f64,
                (memory.cudagraph_bytes + memory.non_torch_bytes) as f64 / (1u64 << 30) as f64,
                memory.requested_bytes as f64 / (1u64 << 30) as f64
            ),
        ));
    } else if kv.max_model_len_origin != "auto" && kv.max_model_len > kv.tokens_per_rank {
        let path = if e.max_model_len.is_some() {
            at("engine.max_model_len")
        } else {
            at("engine")
        };
        problems.push(ctx.source.error(
            &path,
            "kv-capacity-below-max-model-len",
            format!(
                "one request of max_model_len {} ({}) needs more KV than a rank holds ({} tokens); the engine refuses to start. Set max_model_len lower or to auto",
                kv.max_model_len,
                if kv.max_model_len_origin == "model" { "the model's whole window, as the key is omitted" } else { "stated" },
                kv.tokens_per_rank
            ),
        ));
    } else if ctx.pack.memory.rbln_estimate.is_some() {
        // vllm-rbln 0.12.0 sizes the KV cache on the device after compiling
        // (`DynamicKvSizer.compute_num_blocks`,
        // `vllm_rbln/v1/worker/dynamic_kv_sizer.py`: the compiled programs'
        // placements and a memory snapshot), which no source gives offline;
        // pdsim has only the estimate the worker makes before it
        // (`RBLNWorker.determine_available_memory`), larger than what the
        // device then keeps. The run would be optimistic without saying so.
        problems.push(ctx.source.warning(
            &at("engine"),
            "kv-capacity-is-rbln-pre-resize-estimate",
            format!(
                "vllm-rbln sizes its KV cache on the device after compiling (dynamic KV); pdsim uses the estimate made before that resize, {} blocks of {} tokens per rank, an upper bound (for the decode engines of the deployment in seeds/001 the device keeps 69 blocks where this estimate gives 129)",
                kv.num_gpu_blocks, resolved.engine.block_size
            ),
        ));
    }
}
