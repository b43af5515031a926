//! A pool's engine settings as `vllm serve` arguments, and back: the flags
//! vLLM 0.31.0's `EngineArgs` defines for each Deployment key
//! (`vllm/engine/arg_utils.py`: a dataclass field `x_y` is the flag
//! `--x-y`; a boolean field takes `--x-y` / `--no-x-y`
//! (`argparse.BooleanOptionalAction`); a dict-valued config takes JSON).
//!
//! The tensor- and data-parallel widths are not here: llm-d's model-service
//! chart renders `--tensor-parallel-size`, `--data-parallel-size` and
//! `--data-parallel-size-local` itself from each role's `parallelism`
//! (`llm-d-modelservice.vllmServeModelCommand` in the chart's
//! `_helpers.tpl`), so [`super::modelservice`] carries them.
//!
//! A setting with no faithful form is refused with the reason, never
//! dropped: the arguments either start the engine pdsim simulates or are
//! not written.

use crate::deployment::{
    Dbo, Deployment, Engine, EngramConfig, Eplb, Offload, OffloadTier, Parallel, PdTransfer, Pool,
    Speculative,
};
use crate::quantity::MaxModelLen;
use serde_json::{Value, json};

/// The environment variable that selects vLLM's Rust frontend (the
/// specification's `frontend: rust`).
pub const RUST_FRONTEND_ENV: &str = "VLLM_USE_RUST_FRONTEND";

/// One pool's `vllm serve` arguments (each flag and each value its own
/// list entry, as the llm-d guides write a container's `args`) and the
/// environment variables it needs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServeArgs {
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl ServeArgs {
    fn flag(&mut self, name: &str, value: impl ToString) {
        self.args.push(format!("--{name}"));
        self.args.push(value.to_string());
    }

    fn boolean(&mut self, name: &str, on: bool) {
        self.args.push(if on {
            format!("--{name}")
        } else {
            format!("--no-{name}")
        });
    }

    fn json(&mut self, name: &str, value: &Value) {
        self.flag(name, value.to_string());
    }
}

/// The arguments of `pool` of deployment `d` (bar the parallel widths the
/// chart renders); an error names the key and why it has no faithful form.
pub fn serve_args(d: &Deployment, pool_index: usize) -> Result<ServeArgs, String> {
    let pool = &d.pools[pool_index];
    let at = |key: &str| format!("pools[{pool_index}].{key}");
    let mut out = ServeArgs::default();
    let p = &pool.parallel;
    if p.pp > 1 {
        return Err(format!(
            "{}: {} — the model-service chart requests dataLocal × tensor GPUs per pod and has no pipeline-parallel width, so a pod would get too few GPUs",
            at("parallel.pp"),
            p.pp
        ));
    }
    match p.data_parallel_load_balancing.as_deref() {
        None => {}
        Some("internal") => {
            // vLLM's default: neither `--data-parallel-hybrid-lb` nor
            // `--data-parallel-external-lb`. Stated, so it survives.
        }
        Some(mode) => {
            return Err(format!(
                "{}: `{mode}` — the model-service chart starts one `vllm serve` per pod without the per-rank `--data-parallel-rank` / `--data-parallel-start-rank` this mode needs",
                at("parallel.data_parallel_load_balancing")
            ));
        }
    }
    if p.pcp != 0 {
        out.flag("prefill-context-parallel-size", p.pcp);
    }
    if p.dcp != 0 {
        out.flag("decode-context-parallel-size", p.dcp);
    }
    if p.enable_expert_parallel {
        out.boolean("enable-expert-parallel", true);
    }
    engine_args(&pool.engine, &at, &mut out)?;
    kv_transfer(d, pool_index, &mut out)?;
    Ok(out)
}

fn engine_args(e: &Engine, at: &dyn Fn(&str) -> String, out: &mut ServeArgs) -> Result<(), String> {
    if let Some(v) = &e.all2all_backend {
        out.flag("all2all-backend", v);
    }
    // `allreduce_backend` has no flag of its own: `nccl` is the custom
    // kernel disabled, `custom` it enabled (the validation refuses the
    // pair when they contradict).
    let disable = e
        .disable_custom_all_reduce
        .or(match e.allreduce_backend.as_deref() {
            Some("nccl") => Some(true),
            Some("custom") => Some(false),
            _ => None,
        });
    if let Some(v) = disable {
        out.boolean("disable-custom-all-reduce", v);
    }
    if let Some(dbo) = &e.dbo {
        if let Some(v) = dbo.enable_dbo {
            out.boolean("enable-dbo", v);
        }
        if let Some(v) = dbo.dbo_decode_token_threshold {
            out.flag("dbo-decode-token-threshold", v);
        }
        if let Some(v) = dbo.dbo_prefill_token_threshold {
            out.flag("dbo-prefill-token-threshold", v);
        }
    }
    for (name, value) in [
        ("block-size", e.block_size),
        ("max-num-batched-tokens", e.max_num_batched_tokens),
        ("max-num-seqs", e.max_num_seqs),
        (
            "long-prefill-token-threshold",
            e.long_prefill_token_threshold,
        ),
        ("max-cudagraph-capture-size", e.max_cudagraph_capture_size),
        // 0 means unstated (the specification), which vLLM's flag cannot
        // say: the flag is left out.
        (
            "cp-kv-cache-interleave-size",
            e.cp_kv_cache_interleave_size.filter(|v| *v != 0),
        ),
    ] {
        if let Some(v) = value {
            out.flag(name, v);
        }
    }
    match &e.max_model_len {
        Some(MaxModelLen::Auto) => out.flag("max-model-len", "auto"),
        Some(MaxModelLen::Tokens(n)) => out.flag("max-model-len", n),
        None => {}
    }
    // 0 means the engine's default (the specification), which the flag
    // says by its absence: written as 0 it would ask for no memory at all.
    if let Some(v) = e.gpu_memory_utilization.filter(|v| *v > 0.0) {
        out.flag("gpu-memory-utilization", v);
    }
    for (name, value) in [
        ("scheduling-policy", &e.scheduling_policy),
        ("quantization", &e.quantization),
        ("moe-backend", &e.moe_backend),
        ("kv-cache-dtype", &e.cache_dtype),
        ("mamba-cache-dtype", &e.mamba_cache_dtype),
        ("mamba-ssm-cache-dtype", &e.mamba_ssm_cache_dtype),
        ("mamba-cache-mode", &e.mamba_cache_mode),
        ("dcp-comm-backend", &e.dcp_comm_backend),
    ] {
        if let Some(v) = value {
            out.flag(name, v);
        }
    }
    for (name, value) in [
        ("async-scheduling", e.async_scheduling),
        ("enable-prefix-caching", e.enable_prefix_caching),
        ("swa-bounded-replay", e.swa_bounded_replay),
        ("disable-cascade-attn", e.disable_cascade_attn),
        ("dcp-q-replicate", e.dcp_q_replicate),
    ] {
        if let Some(v) = value {
            out.boolean(name, v);
        }
    }
    match e.frontend.as_deref() {
        None | Some("python") => {
            // The default frontend: nothing to set. `python` stated and
            // omitted resolve alike.
        }
        Some("rust") => out.env.push((RUST_FRONTEND_ENV.into(), "1".into())),
        Some(other) => {
            return Err(format!(
                "{}: unknown frontend `{other}`",
                at("engine.frontend")
            ));
        }
    }
    if let Some(sizes) = &e.cudagraph_capture_sizes {
        out.args.push("--cudagraph-capture-sizes".into());
        out.args.extend(sizes.iter().map(i64::to_string));
    }
    if let Some(mode) = &e.cudagraph_mode {
        // No flag of its own: a field of `--compilation-config`.
        out.json("compilation-config", &json!({ "cudagraph_mode": mode }));
    }
    if let Some(s) = &e.speculative {
        out.json(
            "speculative-config",
            &json!({ "method": s.method, "num_speculative_tokens": s.num_spec_tokens }),
        );
    }
    if let Some(eplb) = &e.eplb {
        if let Some(v) = eplb.enable_eplb {
            out.boolean("enable-eplb", v);
        }
        let mut config = serde_json::Map::new();
        for (key, value) in [
            ("num_redundant_experts", eplb.num_redundant_experts),
            ("window_size", eplb.window_size),
            ("step_interval", eplb.step_interval),
        ] {
            if let Some(v) = value {
                config.insert(key.into(), v.into());
            }
        }
        if !config.is_empty() {
            out.json("eplb-config", &Value::Object(config));
        }
    }
    if let Some(engram) = &e.engram_config {
        let mut config = serde_json::Map::new();
        for (key, value) in [
            ("cpu_offload", engram.cpu_offload),
            ("dp_shared_memory", engram.dp_shared_memory),
            ("use_thp", engram.use_thp),
        ] {
            if let Some(v) = value {
                config.insert(key.into(), v.into());
            }
        }
        out.json("engram-config", &Value::Object(config));
    }
    Ok(())
}

/// The KV connectors of a pool: NixlConnector on a P/D pool, vLLM's native
/// CPU offloading where the deployment offloads, both through a
/// MultiConnector. `--kv-offloading-size` alone would replace the P/D
/// connector (`_post_init_kv_transfer_config` in `vllm/config/vllm.py` sets
/// `kv_connector` to OffloadingConnector), so with P/D the offload goes
/// into the MultiConnector with its `cpu_bytes_to_use`.
fn kv_transfer(d: &Deployment, pool_index: usize, out: &mut ServeArgs) -> Result<(), String> {
    let pool = &d.pools[pool_index];
    let pd = pool.role != "colocated";
    let offload_bytes = match &d.offload {
        None => None,
        Some(o) => Some(offload_bytes(o)?),
    };
    let nixl = || {
        let connector = d
            .pd_transfer
            .as_ref()
            .and_then(|t| t.connector.clone())
            .unwrap_or_else(|| "NixlConnector".into());
        json!({ "kv_connector": connector, "kv_role": "kv_both" })
    };
    let offloading = |bytes: i64| {
        json!({
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": { "cpu_bytes_to_use": bytes },
        })
    };
    match (pd, offload_bytes) {
        (false, None) => {}
        (false, Some(bytes)) => {
            if bytes % (1 << 30) == 0 {
                out.flag("kv-offloading-size", bytes / (1 << 30));
            } else {
                out.json("kv-transfer-config", &offloading(bytes));
            }
        }
        (true, None) => out.json("kv-transfer-config", &nixl()),
        (true, Some(bytes)) => out.json(
            "kv-transfer-config",
            &json!({
                "kv_connector": "MultiConnector",
                "kv_role": "kv_both",
                "kv_connector_extra_config": { "connectors": [nixl(), offloading(bytes)] },
            }),
        ),
    }
    Ok(())
}

/// The one tier pdsim runs (vLLM's native CPU offloading to host memory),
/// or why the offload block has no `vllm serve` form here.
fn offload_bytes(o: &Offload) -> Result<i64, String> {
    let [tier] = o.tiers.as_slice() else {
        return Err(format!(
            "offload.tiers: {} tiers — vLLM 0.31.0's native offloading has one, in host memory",
            o.tiers.len()
        ));
    };
    if tier.tier != "cpu_dram" {
        return Err(format!(
            "offload.tiers[0].tier: `{}` — vLLM's native offloading (OffloadingConnector) stores to host memory (cpu_dram)",
            tier.tier
        ));
    }
    if let Some(policy) = o.eviction_policy.as_deref().filter(|p| *p != "lru") {
        return Err(format!(
            "offload.eviction_policy: `{policy}` is not exported: pdsim runs LRU only"
        ));
    }
    if o.prefetch_depth.is_some() {
        return Err("offload.prefetch_depth is not exported: pdsim does not run it".into());
    }
    if let Some(c) = o
        .connector
        .as_deref()
        .filter(|c| *c != "OffloadingConnector")
    {
        return Err(format!(
            "offload.connector: `{c}` is not exported: only OffloadingConnector (vLLM's native offloading) is"
        ));
    }
    if let Some(s) = o.spec.as_deref().filter(|s| *s != "CPUOffloadingSpec") {
        return Err(format!(
            "offload.spec: `{s}` is not exported: only CPUOffloadingSpec is"
        ));
    }
    Ok(tier.bytes)
}

/// What a pool's `vllm serve` arguments say, read back.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReadArgs {
    pub pp: Option<i64>,
    pub pcp: i64,
    pub dcp: i64,
    pub enable_expert_parallel: bool,
    pub engine: Engine,
    /// Bytes of the host-memory offload tier, if the pool offloads.
    pub offload_bytes: Option<i64>,
    /// The P/D connector, if the pool has one.
    pub pd_connector: Option<String>,
}

/// Flags `vllm serve` takes that change nothing pdsim simulates, each with
/// whether it takes a value and why it changes nothing: they are read and
/// dropped on import.
pub const NO_EFFECT: [(&str, bool, &str); 7] = [
    ("port", true, "the HTTP port"),
    ("served-model-name", true, "the name clients ask for"),
    ("disable-uvicorn-access-log", false, "HTTP access logging"),
    ("disable-log-requests", false, "request logging"),
    ("enable-log-requests", false, "request logging"),
    (
        "trust-remote-code",
        false,
        "how the checkpoint's code is loaded",
    ),
    (
        "kv-events-config",
        true,
        "where KV events are published: pdsim's engines publish them to the EPP whenever its configuration indexes them (the precise prefix path)",
    ),
];

/// Reads `vllm serve` arguments back into the Deployment's keys; `env` is
/// the container's environment. A flag pdsim has no key for is an error
/// naming it, unless it is one of [`NO_EFFECT`].
pub fn read_args(args: &[String], env: &[(String, String)]) -> Result<ReadArgs, String> {
    let mut r = ReadArgs::default();
    let e = &mut r.engine;
    let mut i = 0;
    let bad = |flag: &str, value: &str, why: &str| format!("`--{flag} {value}`: {why}");
    while i < args.len() {
        let arg = &args[i];
        let Some(body) = arg.strip_prefix("--") else {
            return Err(format!("`{arg}`: expected a `--flag`"));
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (body.to_string(), None),
        };
        i += 1;
        // A boolean flag: `--x`, `--no-x`, or `--x=true|false`.
        let boolean = |name: &str| -> Option<(String, bool)> {
            let (base, on) = match name.strip_prefix("no-") {
                Some(base) => (base, false),
                None => (name, true),
            };
            BOOLEANS.contains(&base).then(|| (base.to_string(), on))
        };
        if let Some((base, on)) = boolean(&name) {
            let on = match inline.as_deref() {
                None => on,
                Some("true") | Some("True") => on,
                Some("false") | Some("False") => !on,
                Some(other) => return Err(bad(&name, other, "not a boolean")),
            };
            match base.as_str() {
                "enable-expert-parallel" => r.enable_expert_parallel = on,
                "disable-custom-all-reduce" => e.disable_custom_all_reduce = Some(on),
                "enable-dbo" => e.dbo.get_or_insert_with(Dbo::default).enable_dbo = Some(on),
                "async-scheduling" => e.async_scheduling = Some(on),
                "enable-prefix-caching" => e.enable_prefix_caching = Some(on),
                "swa-bounded-replay" => e.swa_bounded_replay = Some(on),
                "disable-cascade-attn" => e.disable_cascade_attn = Some(on),
                "dcp-q-replicate" => e.dcp_q_replicate = Some(on),
                "enable-eplb" => e.eplb.get_or_insert_with(Eplb::default).enable_eplb = Some(on),
                _ => unreachable!("every boolean is handled"),
            }
            continue;
        }
        if let Some((_, takes_value, _)) = NO_EFFECT.iter().find(|(n, _, _)| *n == name) {
            if *takes_value && inline.is_none() {
                i += 1;
            }
            continue;
        }
        if name == "cudagraph-capture-sizes" {
            let mut sizes = Vec::new();
            let mut values: Vec<String> = inline.into_iter().collect();
            while i < args.len() && !args[i].starts_with("--") {
                values.push(args[i].clone());
                i += 1;
            }
            for v in values
                .iter()
                .flat_map(|v| v.split([',', ' ']))
                .filter(|v| !v.is_empty())
            {
                sizes.push(v.parse().map_err(|_| bad(&name, v, "not an integer"))?);
            }
            e.cudagraph_capture_sizes = Some(sizes);
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => {
                let v = args
                    .get(i)
                    .ok_or_else(|| format!("`--{name}` has no value"))?
                    .clone();
                i += 1;
                v
            }
        };
        let int = |v: &str| -> Result<i64, String> {
            v.trim()
                .parse()
                .map_err(|_| bad(&name, v, "not an integer"))
        };
        let object = |v: &str| -> Result<serde_json::Map<String, Value>, String> {
            match serde_json::from_str::<Value>(v) {
                Ok(Value::Object(m)) => Ok(m),
                _ => Err(bad(&name, v, "not a JSON object")),
            }
        };
        match name.as_str() {
            "pipeline-parallel-size" => r.pp = Some(int(&value)?),
            "prefill-context-parallel-size" => r.pcp = int(&value)?,
            "decode-context-parallel-size" => r.dcp = int(&value)?,
            "all2all-backend" => e.all2all_backend = Some(value),
            "dbo-decode-token-threshold" => {
                e.dbo
                    .get_or_insert_with(Dbo::default)
                    .dbo_decode_token_threshold = Some(int(&value)?)
            }
            "dbo-prefill-token-threshold" => {
                e.dbo
                    .get_or_insert_with(Dbo::default)
                    .dbo_prefill_token_threshold = Some(int(&value)?)
            }
            "block-size" => e.block_size = Some(int(&value)?),
            "max-num-batched-tokens" => e.max_num_batched_tokens = Some(int(&value)?),
            "max-num-seqs" => e.max_num_seqs = Some(int(&value)?),
            "long-prefill-token-threshold" => e.long_prefill_token_threshold = Some(int(&value)?),
            "max-cudagraph-capture-size" => e.max_cudagraph_capture_size = Some(int(&value)?),
            "cp-kv-cache-interleave-size" => e.cp_kv_cache_interleave_size = Some(int(&value)?),
            "max-model-len" => {
                e.max_model_len = Some(match value.trim() {
                    "auto" | "-1" => MaxModelLen::Auto,
                    v => MaxModelLen::Tokens(int(v)?),
                })
            }
            "gpu-memory-utilization" => {
                e.gpu_memory_utilization = Some(
                    value
                        .trim()
                        .parse()
                        .map_err(|_| bad(&name, &value, "not a number"))?,
                )
            }
            "scheduling-policy" => e.scheduling_policy = Some(value),
            "quantization" => e.quantization = Some(value),
            "moe-backend" => e.moe_backend = Some(value),
            "kv-cache-dtype" => e.cache_dtype = Some(value),
            "mamba-cache-dtype" => e.mamba_cache_dtype = Some(value),
            "mamba-ssm-cache-dtype" => e.mamba_ssm_cache_dtype = Some(value),
            "mamba-cache-mode" => e.mamba_cache_mode = Some(value),
            "dcp-comm-backend" => e.dcp_comm_backend = Some(value),
            "compilation-config" => {
                for (key, v) in object(&value)? {
                    match (key.as_str(), v) {
                        ("cudagraph_mode", Value::String(mode)) => e.cudagraph_mode = Some(mode),
                        (key, _) => {
                            return Err(format!(
                                "`--compilation-config`: `{key}` has no Deployment key (pdsim reads cudagraph_mode only)"
                            ));
                        }
                    }
                }
            }
            "speculative-config" => {
                let m = object(&value)?;
                let method = m.get("method").and_then(Value::as_str);
                let n = m.get("num_speculative_tokens").and_then(Value::as_i64);
                if let Some(key) = m
                    .keys()
                    .find(|k| !["method", "num_speculative_tokens"].contains(&k.as_str()))
                {
                    return Err(format!(
                        "`--speculative-config`: `{key}` has no Deployment key (engine.speculative has method and num_spec_tokens)"
                    ));
                }
                let (Some(method), Some(n)) = (method, n) else {
                    return Err(
                        "`--speculative-config` needs `method` and `num_speculative_tokens`".into(),
                    );
                };
                e.speculative = Some(Speculative {
                    method: method.into(),
                    num_spec_tokens: n,
                });
            }
            "eplb-config" => {
                let eplb = e.eplb.get_or_insert_with(Eplb::default);
                for (key, v) in object(&value)? {
                    let n = v
                        .as_i64()
                        .ok_or_else(|| format!("`--eplb-config`: `{key}` is not an integer"))?;
                    match key.as_str() {
                        "num_redundant_experts" => eplb.num_redundant_experts = Some(n),
                        "window_size" => eplb.window_size = Some(n),
                        "step_interval" => eplb.step_interval = Some(n),
                        other => {
                            return Err(format!(
                                "`--eplb-config`: `{other}` has no Deployment key"
                            ));
                        }
                    }
                }
            }
            "engram-config" => {
                let mut engram = EngramConfig::default();
                for (key, v) in object(&value)? {
                    let b = v
                        .as_bool()
                        .ok_or_else(|| format!("`--engram-config`: `{key}` is not a boolean"))?;
                    match key.as_str() {
                        "cpu_offload" => engram.cpu_offload = Some(b),
                        "dp_shared_memory" => engram.dp_shared_memory = Some(b),
                        "use_thp" => engram.use_thp = Some(b),
                        other => {
                            return Err(format!(
                                "`--engram-config`: `{other}` has no Deployment key"
                            ));
                        }
                    }
                }
                e.engram_config = Some(engram);
            }
            "kv-offloading-size" => {
                let gib: f64 = value
                    .trim()
                    .parse()
                    .map_err(|_| bad(&name, &value, "not a number"))?;
                r.offload_bytes = Some((gib * (1u64 << 30) as f64).round() as i64);
            }
            "kv-transfer-config" => {
                read_kv_transfer(&object(&value)?, &mut r.offload_bytes, &mut r.pd_connector)?
            }
            other => {
                return Err(format!(
                    "`--{other}`: pdsim has no Deployment key for this vLLM flag, so a deployment with it cannot be read faithfully"
                ));
            }
        }
    }
    for (name, value) in env {
        if name == RUST_FRONTEND_ENV && value == "1" {
            r.engine.frontend = Some("rust".into());
        }
    }
    Ok(r)
}

/// Every boolean flag [`read_args`] knows, without `--`.
const BOOLEANS: [&str; 9] = [
    "enable-expert-parallel",
    "disable-custom-all-reduce",
    "enable-dbo",
    "async-scheduling",
    "enable-prefix-caching",
    "swa-bounded-replay",
    "disable-cascade-attn",
    "dcp-q-replicate",
    "enable-eplb",
];

fn read_kv_transfer(
    m: &serde_json::Map<String, Value>,
    offload_bytes: &mut Option<i64>,
    pd_connector: &mut Option<String>,
) -> Result<(), String> {
    let connector = m
        .get("kv_connector")
        .and_then(Value::as_str)
        .ok_or("`--kv-transfer-config` names no kv_connector")?;
    match connector {
        "MultiConnector" => {
            let list = m
                .get("kv_connector_extra_config")
                .and_then(|c| c.get("connectors"))
                .and_then(Value::as_array)
                .ok_or("`--kv-transfer-config`: a MultiConnector lists its connectors")?;
            for c in list {
                let Value::Object(c) = c else {
                    return Err("`--kv-transfer-config`: a connector is not an object".into());
                };
                read_kv_transfer(c, offload_bytes, pd_connector)?;
            }
        }
        "OffloadingConnector" => {
            let bytes = m
                .get("kv_connector_extra_config")
                .and_then(|c| c.get("cpu_bytes_to_use"))
                .and_then(Value::as_f64)
                .ok_or("`--kv-transfer-config`: OffloadingConnector without cpu_bytes_to_use")?;
            *offload_bytes = Some(bytes.round() as i64);
        }
        other => *pd_connector = Some(other.to_string()),
    }
    Ok(())
}

/// The deployment-level blocks [`read_args`] gives, from the pools' reads:
/// the offload tier and the P/D connector, which every pool must agree on.
pub fn shared_blocks(reads: &[ReadArgs]) -> Result<(Option<Offload>, Option<PdTransfer>), String> {
    let offload: Vec<Option<i64>> = reads.iter().map(|r| r.offload_bytes).collect();
    let offload = match offload.first().copied().flatten() {
        Some(bytes) if offload.iter().all(|o| *o == Some(bytes)) => Some(Offload {
            tiers: vec![OffloadTier {
                tier: "cpu_dram".into(),
                bytes,
            }],
            eviction_policy: None,
            prefetch_depth: None,
            connector: None,
            spec: None,
        }),
        None if offload.iter().all(Option::is_none) => None,
        _ => {
            return Err(
                "the roles offload differently; a Deployment's offload block applies to every pool"
                    .into(),
            );
        }
    };
    let pd = reads
        .iter()
        .find_map(|r| r.pd_connector.clone())
        .map(|connector| PdTransfer {
            connector: Some(connector),
        });
    Ok((offload, pd))
}

/// The pool a read gives, with the chart's parallel widths.
pub fn pool(role: &str, nodes: i64, tp: i64, dp: i64, dp_local: i64, read: &ReadArgs) -> Pool {
    Pool {
        role: role.into(),
        nodes,
        parallel: Parallel {
            tp,
            pp: read.pp.unwrap_or(1),
            dp,
            dp_local,
            data_parallel_load_balancing: None,
            pcp: read.pcp,
            dcp: read.dcp,
            enable_expert_parallel: read.enable_expert_parallel,
        },
        engine: read.engine.clone(),
        labels: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deployment::Router;

    fn deployment(engine: Engine, parallel: Parallel, role: &str) -> Deployment {
        Deployment {
            kind: "Deployment".into(),
            name: "d".into(),
            pools: vec![Pool {
                role: role.into(),
                nodes: 1,
                parallel,
                engine,
                labels: Default::default(),
            }],
            offload: None,
            pd_transfer: None,
            router: Some(Router::default()),
        }
    }

    fn parallel() -> Parallel {
        Parallel {
            tp: 2,
            pp: 1,
            dp: 2,
            dp_local: 2,
            data_parallel_load_balancing: None,
            pcp: 0,
            dcp: 2,
            enable_expert_parallel: true,
        }
    }

    /// Every engine key set, so every flag is written and read back.
    fn every_key() -> Engine {
        Engine {
            all2all_backend: Some("deepep_low_latency".into()),
            disable_custom_all_reduce: Some(true),
            allreduce_backend: None,
            dbo: Some(Dbo {
                enable_dbo: Some(true),
                dbo_decode_token_threshold: Some(32),
                dbo_prefill_token_threshold: Some(512),
            }),
            block_size: Some(64),
            max_num_batched_tokens: Some(8192),
            max_num_seqs: Some(256),
            long_prefill_token_threshold: Some(2048),
            max_model_len: Some(MaxModelLen::Auto),
            gpu_memory_utilization: Some(0.85),
            scheduling_policy: Some("priority".into()),
            async_scheduling: Some(false),
            frontend: Some("rust".into()),
            cudagraph_mode: Some("FULL_DECODE_ONLY".into()),
            max_cudagraph_capture_size: Some(256),
            cudagraph_capture_sizes: Some(vec![1, 2, 4, 8, 256]),
            quantization: Some("fp8".into()),
            moe_backend: Some("deep_gemm".into()),
            cache_dtype: Some("fp8".into()),
            enable_prefix_caching: Some(false),
            swa_bounded_replay: Some(true),
            mamba_cache_dtype: Some("float32".into()),
            mamba_ssm_cache_dtype: Some("float16".into()),
            mamba_cache_mode: Some("all".into()),
            disable_cascade_attn: Some(false),
            speculative: Some(Speculative {
                method: "mtp".into(),
                num_spec_tokens: 3,
            }),
            eplb: Some(Eplb {
                enable_eplb: Some(true),
                num_redundant_experts: Some(32),
                window_size: Some(1000),
                step_interval: Some(3000),
            }),
            engram_config: Some(EngramConfig {
                cpu_offload: Some(true),
                dp_shared_memory: Some(false),
                use_thp: Some(true),
            }),
            dcp_comm_backend: Some("a2a".into()),
            dcp_q_replicate: Some(true),
            cp_kv_cache_interleave_size: Some(16),
        }
    }

    #[test]
    fn every_engine_key_survives_the_round_trip_through_vllm_flags() {
        let d = deployment(every_key(), parallel(), "colocated");
        let serve = serve_args(&d, 0).unwrap();
        // Spot checks of the flag forms vLLM 0.31.0 parses.
        let joined = serve.args.join(" ");
        for needle in [
            "--no-async-scheduling",
            "--no-enable-prefix-caching",
            "--no-disable-cascade-attn",
            "--cudagraph-capture-sizes 1 2 4 8 256",
            "--max-model-len auto",
            r#"--compilation-config {"cudagraph_mode":"FULL_DECODE_ONLY"}"#,
            r#"--speculative-config {"method":"mtp","num_speculative_tokens":3}"#,
            "--kv-cache-dtype fp8",
            "--decode-context-parallel-size 2",
        ] {
            assert!(joined.contains(needle), "{needle} not in {joined}");
        }
        assert_eq!(
            serve.env,
            [(RUST_FRONTEND_ENV.to_string(), "1".to_string())]
        );
        assert!(
            !joined.contains("--prefill-context-parallel-size"),
            "pcp 0 is off: {joined}"
        );
        let read = read_args(&serve.args, &serve.env).unwrap();
        assert_eq!(read.engine, every_key());
        assert_eq!(
            (read.pcp, read.dcp, read.enable_expert_parallel),
            (0, 2, true)
        );
        assert_eq!(
            (read.offload_bytes, read.pd_connector.as_deref()),
            (None, None)
        );
        let mut p = parallel();
        p.pcp = 3;
        let args = serve_args(&deployment(Engine::default(), p, "colocated"), 0)
            .unwrap()
            .args;
        assert_eq!(read_args(&args, &[]).unwrap().pcp, 3);
    }

    /// A 0 that the specification reads as "the engine's default" or
    /// "unstated" is not written as a flag vLLM would refuse.
    #[test]
    fn zeros_that_mean_unstated_are_left_out() {
        let e = Engine {
            gpu_memory_utilization: Some(0.0),
            cp_kv_cache_interleave_size: Some(0),
            long_prefill_token_threshold: Some(0),
            ..Engine::default()
        };
        let args = serve_args(&deployment(e, parallel(), "colocated"), 0)
            .unwrap()
            .args
            .join(" ");
        assert!(!args.contains("--gpu-memory-utilization"), "{args}");
        assert!(!args.contains("--cp-kv-cache-interleave-size"), "{args}");
        // 0 is vLLM's own default here, and a value it takes.
        assert!(args.contains("--long-prefill-token-threshold 0"), "{args}");
        let e = Engine {
            gpu_memory_utilization: Some(0.5),
            cp_kv_cache_interleave_size: Some(4),
            ..Engine::default()
        };
        let args = serve_args(&deployment(e, parallel(), "colocated"), 0)
            .unwrap()
            .args
            .join(" ");
        assert!(args.contains("--gpu-memory-utilization 0.5"), "{args}");
        assert!(args.contains("--cp-kv-cache-interleave-size 4"), "{args}");
    }

    #[test]
    fn allreduce_backend_becomes_the_custom_kernel_flag() {
        let mut e = Engine {
            allreduce_backend: Some("nccl".into()),
            ..Engine::default()
        };
        let d = deployment(e.clone(), parallel(), "colocated");
        let args = serve_args(&d, 0).unwrap().args;
        assert!(args.contains(&"--disable-custom-all-reduce".to_string()));
        e.allreduce_backend = Some("custom".into());
        let d = deployment(e, parallel(), "colocated");
        let args = serve_args(&d, 0).unwrap().args;
        assert!(args.contains(&"--no-disable-custom-all-reduce".to_string()));
    }

    #[test]
    fn offload_and_pd_connectors_take_vllms_forms() {
        let mut d = deployment(Engine::default(), parallel(), "colocated");
        d.offload = Some(Offload {
            tiers: vec![OffloadTier {
                tier: "cpu_dram".into(),
                bytes: 64 << 30,
            }],
            eviction_policy: None,
            prefetch_depth: None,
            connector: None,
            spec: None,
        });
        // Colocated: the size flag, in GiB, as `--kv-offloading-size` takes it.
        let args = serve_args(&d, 0).unwrap().args;
        assert!(
            args.join(" ").contains("--kv-offloading-size 64"),
            "{args:?}"
        );
        assert_eq!(read_args(&args, &[]).unwrap().offload_bytes, Some(64 << 30));
        // P/D: both connectors through a MultiConnector, as the size flag
        // would replace NixlConnector.
        d.pools[0].role = "decode".into();
        let args = serve_args(&d, 0).unwrap().args;
        let read = read_args(&args, &[]).unwrap();
        assert_eq!(read.offload_bytes, Some(64 << 30));
        assert_eq!(read.pd_connector.as_deref(), Some("NixlConnector"));
        assert!(args.join(" ").contains("MultiConnector"));
        // What pdsim does not run is not exported.
        let o = d.offload.clone().unwrap();
        for (change, says) in [
            (
                Offload {
                    connector: Some("LMCacheConnectorV1".into()),
                    ..o.clone()
                },
                "only OffloadingConnector",
            ),
            (
                Offload {
                    spec: Some("GPUSpec".into()),
                    ..o.clone()
                },
                "only CPUOffloadingSpec",
            ),
            (
                Offload {
                    eviction_policy: Some("arc".into()),
                    ..o.clone()
                },
                "LRU only",
            ),
            (
                Offload {
                    prefetch_depth: Some(2),
                    ..o.clone()
                },
                "prefetch_depth",
            ),
            (
                Offload {
                    tiers: vec![o.tiers[0].clone(), o.tiers[0].clone()],
                    ..o.clone()
                },
                "2 tiers",
            ),
        ] {
            d.offload = Some(change);
            assert!(serve_args(&d, 0).unwrap_err().contains(says), "{says}");
        }
        // Stated as the defaults, they are.
        d.offload = Some(Offload {
            connector: Some("OffloadingConnector".into()),
            spec: Some("CPUOffloadingSpec".into()),
            eviction_policy: Some("lru".into()),
            ..o.clone()
        });
        assert!(serve_args(&d, 0).is_ok());
        d.offload.as_mut().unwrap().tiers[0].tier = "nvme_gen4".into();
        assert!(serve_args(&d, 0).unwrap_err().contains("host memory"));
        // Roles that offload differently have no one offload block.
        let with = ReadArgs {
            offload_bytes: Some(1 << 30),
            ..ReadArgs::default()
        };
        let without = ReadArgs::default();
        assert!(
            shared_blocks(&[with.clone(), without.clone()])
                .unwrap_err()
                .contains("offload differently")
        );
        assert!(shared_blocks(&[without.clone(), with.clone()]).is_err());
        assert_eq!(
            shared_blocks(&[without.clone(), without]).unwrap(),
            (None, None)
        );
    }

    #[test]
    fn what_has_no_faithful_form_is_refused_with_the_reason() {
        let mut p = parallel();
        p.pp = 2;
        let d = deployment(Engine::default(), p, "colocated");
        assert!(serve_args(&d, 0).unwrap_err().contains("pipeline-parallel"));
        let mut p = parallel();
        p.data_parallel_load_balancing = Some("external".into());
        let d = deployment(Engine::default(), p, "colocated");
        assert!(
            serve_args(&d, 0)
                .unwrap_err()
                .contains("--data-parallel-rank")
        );
        // Reading: a flag with no Deployment key is named, one with no
        // effect on a simulation is dropped.
        let unknown = read_args(&["--enforce-eager".into()], &[]).unwrap_err();
        assert!(unknown.contains("--enforce-eager"), "{unknown}");
        let read = read_args(
            &[
                "--port".into(),
                "8200".into(),
                "--disable-uvicorn-access-log".into(),
            ],
            &[],
        )
        .unwrap();
        assert_eq!(read, ReadArgs::default());
        assert!(
            read_args(&["--max-num-seqs".into()], &[])
                .unwrap_err()
                .contains("no value")
        );
        assert!(
            read_args(&["--block-size=x".into()], &[])
                .unwrap_err()
                .contains("not an integer")
        );
    }
}
