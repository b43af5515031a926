//! The vLLM 0.15.1 rules pack against vLLM 0.15.1's own source.
//!
//! `EXPECTED` holds, for every key of the pack, the figure read from the
//! release's wheel (`pip download --no-deps vllm==0.15.1`; paths inside its
//! `vllm/` package) and where it was read. The test flattens the pack as it
//! loads and requires the two to agree key by key, so a key added to the
//! pack without a sourced figure here, or a figure changed in one place and
//! not the other, fails.

use pdsim_spec::files::MemoryFiles;
use pdsim_spec::rules::pack;
use pdsim_spec::validate::{Request, validate};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// (flattened key, value in 0.15.1, source in the 0.15.1 wheel).
fn expected() -> Vec<(&'static str, Value, &'static str)> {
    vec![
        ("name", json!("vllm-0.15.1"), "pdsim's name for the pack"),
        ("engine", json!("vllm"), "upstream vLLM, not a plugin"),
        ("engine_versions", json!(["0.15.1"]), "vllm/_version.py"),
        (
            "enums.all2all_backend",
            json!([
                "allgather_reducescatter",
                "deepep_high_throughput",
                "deepep_low_latency",
                "flashinfer_all2allv",
                "mori",
                "naive",
                "pplx"
            ]),
            "config/parallel.py:41 All2AllBackend",
        ),
        (
            "enums.allreduce_backend",
            json!(["custom", "nccl"]),
            "config/parallel.py:170 disable_custom_all_reduce, which the key states \
             (0.15.1 has no --allreduce-backend flag)",
        ),
        (
            "enums.cudagraph_mode",
            json!([
                "FULL",
                "FULL_AND_PIECEWISE",
                "FULL_DECODE_ONLY",
                "NONE",
                "PIECEWISE"
            ]),
            "config/compilation.py:55 CUDAGraphMode",
        ),
        (
            "enums.cache_dtype",
            json!([
                "auto",
                "bfloat16",
                "fp8",
                "fp8_ds_mla",
                "fp8_e4m3",
                "fp8_e5m2",
                "fp8_inc"
            ]),
            "config/cache.py:24 CacheDType",
        ),
        (
            "enums.mamba_cache_dtype",
            json!(["auto", "float16", "float32"]),
            "config/cache.py:33 MambaDType",
        ),
        (
            "enums.mamba_ssm_cache_dtype",
            json!(["auto", "float16", "float32"]),
            "config/cache.py:33 MambaDType (mamba_ssm_cache_dtype, :123)",
        ),
        (
            "enums.mamba_cache_mode",
            json!(["align", "all", "none"]),
            "config/cache.py:34 MambaCacheMode",
        ),
        (
            "enums.scheduling_policy",
            json!(["fcfs", "priority"]),
            "config/scheduler.py:23 SchedulerPolicy",
        ),
        (
            "enums.speculative_method",
            json!([
                "deepseek_mtp",
                "draft_model",
                "eagle",
                "eagle3",
                "ernie_mtp",
                "exaone_moe_mtp",
                "glm4_moe_lite_mtp",
                "glm4_moe_mtp",
                "longcat_flash_mtp",
                "medusa",
                "mimo_mtp",
                "mlp_speculator",
                "mtp",
                "ngram",
                "pangu_ultra_moe_mtp",
                "qwen3_next_mtp",
                "step3p5_mtp",
                "suffix"
            ]),
            "config/speculative.py:32-53 SpeculativeMethod, MTPModelTypes, EagleModelTypes",
        ),
        (
            "enums.offload_spec",
            json!(["CPUOffloadingSpec"]),
            "v1/kv_offload/factory.py:56 register_spec",
        ),
        (
            "enums.frontend",
            json!(["python"]),
            "engine/arg_utils.py has no frontend flag",
        ),
        (
            "enums.data_parallel_load_balancing",
            json!(["internal", "hybrid", "external"]),
            "engine/arg_utils.py:843-848 --data-parallel-hybrid-lb, --data-parallel-external-lb",
        ),
        (
            "soft_enums.quantization",
            json!([
                "awq",
                "awq_marlin",
                "bitblas",
                "bitsandbytes",
                "compressed-tensors",
                "cpu_awq",
                "experts_int8",
                "fbgemm_fp8",
                "fp8",
                "fp_quant",
                "gguf",
                "gptq",
                "gptq_bitblas",
                "gptq_marlin",
                "gptq_marlin_24",
                "inc",
                "ipex",
                "modelopt",
                "modelopt_fp4",
                "moe_wna16",
                "mxfp4",
                "petit_nvfp4",
                "ptpc_fp8",
                "quark",
                "torchao"
            ]),
            "model_executor/layers/quantization/__init__.py:12 QuantizationMethods",
        ),
        (
            "soft_enums.connector",
            json!([
                "DecodeBenchConnector",
                "ExampleConnector",
                "LMCacheConnectorV1",
                "LMCacheMPConnector",
                "MoRIIOConnector",
                "MooncakeConnector",
                "MultiConnector",
                "NixlConnector",
                "OffloadingConnector",
                "P2pNcclConnector"
            ]),
            "distributed/kv_transfer/kv_connector/factory.py:146-203 register_connector",
        ),
        (
            "soft_enums.eviction_policy",
            json!(["arc", "lru"]),
            "v1/kv_offload/cpu.py:60-81 CPUOffloadingSpec.get_manager",
        ),
        (
            "unsupported_keys",
            json!([
                "engine.dcp_comm_backend",
                "engine.dcp_q_replicate",
                "engine.moe_backend",
                "parallel.pcp"
            ]),
            "no such field in config/parallel.py or engine/arg_utils.py; pcp: \
             v1/attention/backend.py:608 supports_pcp = False",
        ),
        (
            "sp_moe_backends",
            json!([
                "allgather_reducescatter",
                "deepep_high_throughput",
                "deepep_low_latency",
                "mori",
                "naive"
            ]),
            "config/parallel.py:440 use_sequence_parallel_moe",
        ),
        (
            "async_incompatible_spec_methods",
            json!(["draft_model", "medusa", "mlp_speculator", "ngram", "suffix"]),
            "config/vllm.py:589-601, methods outside EagleModelTypes",
        ),
        (
            "eagle_style_spec_methods",
            json!([
                "deepseek_mtp",
                "eagle",
                "eagle3",
                "ernie_mtp",
                "exaone_moe_mtp",
                "glm4_moe_lite_mtp",
                "glm4_moe_mtp",
                "longcat_flash_mtp",
                "mimo_mtp",
                "mtp",
                "pangu_ultra_moe_mtp",
                "qwen3_next_mtp",
                "step3p5_mtp"
            ]),
            "config/speculative.py:705 use_eagle after the rename to mtp at :275-279",
        ),
        (
            "custom_allreduce_world_sizes",
            json!([2, 4, 6, 8]),
            "distributed/device_communicators/custom_all_reduce.py:52 _SUPPORTED_WORLD_SIZES",
        ),
        (
            "features.long_prefill_waiver_when_alone",
            json!(false),
            "v1/core/sched/scheduler.py:375-376, 650-652 Scheduler.schedule",
        ),
        (
            "features.pad_spec_decode",
            json!("never"),
            "v1/core/sched/scheduler.py Scheduler.schedule: no pad_spec_decode",
        ),
        (
            "features.victim_blocks_must_be_freeable",
            json!(false),
            "v1/core/sched/scheduler.py Scheduler.schedule: no _request_blocks_can_be_freed",
        ),
        (
            "features.kv_holding_first",
            json!(false),
            "v1/core/sched/scheduler.py Scheduler.schedule: one waiting queue, skipped_waiting_requests prepended back",
        ),
        (
            "features.microbatch_tokenizer",
            json!(true),
            "utils/async_utils.py AsyncMicrobatchTokenizer, entrypoints/renderer.py",
        ),
        (
            "features.arrival_stamp",
            json!("input_processor"),
            "v1/engine/input_processor.py InputProcessor.process_inputs: arrival_time = time.time(), \
             after entrypoints/openai/serving_chat.py tokenized the prompt",
        ),
        (
            "features.capture_size_extras",
            json!("none"),
            "config/vllm.py _set_cudagraph_sizes: the stride grid alone",
        ),
        (
            "features.async_load_reserve",
            json!("none"),
            "v1/core/sched/scheduler.py Scheduler.schedule: no reserved_blocks, no limit_lookahead_tokens",
        ),
        (
            "features.deferred_block_frees",
            json!(false),
            "v1/core/sched/scheduler.py: no defer_block_free",
        ),
        (
            "features.dbo_refuses_threshold_below_microbatches",
            json!(false),
            "config/parallel.py:178, 183 (plain ints)",
        ),
        (
            "features.pcp_excludes_dp",
            json!(false),
            "no pcp-with-dp check; pcp refused outright",
        ),
        (
            "features.pp_excludes_dp",
            json!(false),
            "no pp-with-dp check in config/parallel.py",
        ),
        (
            "features.has_swa_bounded_replay",
            json!(false),
            "engine/arg_utils.py has no such flag",
        ),
        (
            "features.has_engram_config",
            json!(false),
            "engine/arg_utils.py has no such flag",
        ),
        (
            "features.reserve_full_prompt",
            json!(false),
            "v1/core/sched/scheduler.py:710-719, no scheduler_reserve_full_isl",
        ),
        (
            "features.unhashed_blocks_to_front",
            json!(false),
            "v1/core/block_pool.py:389-403 free_blocks append_n",
        ),
        (
            "features.cuda_graphs",
            json!(true),
            "config/vllm.py:770 _set_cudagraph_sizes",
        ),
        (
            "features.lone_prefill_steps",
            json!(false),
            "v1/core/sched/scheduler.py Scheduler.schedule mixes running decodes and \
             waiting prefills in one step (vllm-rbln's scheduler does not)",
        ),
        (
            "features.multi_module_mtp",
            json!(false),
            "config/speculative.py has no use_multi_module_mtp and \
             v1/core/sched/scheduler.py no num_prefill_lookahead",
        ),
        (
            "features.drafter_input_slots",
            json!(false),
            "v1/core/sched/scheduler.py keeps the token budget alone: no input_budget or \
             draft_slots, and config/speculative.py no max_num_new_slots_for_drafting",
        ),
        (
            "features.delay_cache_blocks",
            json!(false),
            "v1/core/kv_cache_manager.py allocate_slots ends with cache_blocks",
        ),
        (
            "features.sub_block_prefix_reuse",
            json!(false),
            "vllm-rbln only; vLLM reuses whole blocks",
        ),
        (
            "features.long_prefill_refused_above_max_model_len",
            json!(false),
            "config/scheduler.py verify_max_model_len, only with max_num_partial_prefills > 1, \
             refused at engine/arg_utils.py:1782-1788",
        ),
        (
            "features.cascade_attention_by_default",
            json!(true),
            "config/model.py:220 disable_cascade_attn = False",
        ),
        (
            "defaults.block_size",
            json!(16),
            "platforms/cuda.py:160-161",
        ),
        (
            "defaults.mla_block_size",
            json!(64),
            "platforms/cuda.py:218-223 FlashMLA",
        ),
        (
            "defaults.gpu_memory_utilization",
            json!(0.9),
            "config/cache.py:51",
        ),
        (
            "defaults.dbo_decode_token_threshold",
            json!(32),
            "config/parallel.py:178",
        ),
        (
            "defaults.dbo_prefill_token_threshold",
            json!(512),
            "config/parallel.py:183",
        ),
        (
            "defaults.cudagraph_mode",
            json!("FULL_AND_PIECEWISE"),
            "config/vllm.py:239 O2, :135-148 OPTIMIZATION_LEVEL_02",
        ),
        (
            "defaults.max_cudagraph_capture_size",
            json!(512),
            "config/vllm.py:1126-1134 _set_cudagraph_sizes",
        ),
        (
            "defaults.max_cudagraph_capture_size_sm100",
            json!(512),
            "config/vllm.py:1126-1134, no per-device cap",
        ),
        (
            "defaults.scheduling_policy",
            json!("fcfs"),
            "config/scheduler.py:103",
        ),
        ("defaults.frontend", json!("python"), "the only API server"),
        (
            "defaults.data_parallel_load_balancing",
            json!("internal"),
            "config/parallel.py:125, 130 (both flags False)",
        ),
        (
            "defaults.all2all_backend",
            json!("allgather_reducescatter"),
            "config/parallel.py:154",
        ),
        ("defaults.cache_dtype", json!("auto"), "config/cache.py:61"),
        (
            "defaults.kv_lease_duration_s",
            json!(480),
            "envs.py:208, 1410-1411 VLLM_NIXL_ABORT_REQUEST_TIMEOUT; \
             nixl_connector.py request_finished",
        ),
        (
            "defaults.kv_lease_heartbeats",
            json!(false),
            "nixl_connector.py: no heartbeat, a fixed expiry",
        ),
        (
            "defaults.lmcache_chunk_tokens",
            json!(256),
            "not vLLM's: LMCache's own `chunk_size` default (lmcache/v1/config.py), \
             read by the LMCacheConnectorV1 adapter 0.15.1 ships",
        ),
        (
            "defaults.dp_lb_score",
            json!("waiting_x4_plus_running"),
            "v1/engine/core_client.py DPLBAsyncMPClient.get_core_engine_for_request: \
             score = waiting * 4 + running",
        ),
        (
            "defaults.batch_defaults[0].min_memory_gib",
            json!(70.0),
            "engine/arg_utils.py:1837 device_memory >= 70 * GiB_bytes",
        ),
        (
            "defaults.batch_defaults[0].exclude_chips",
            json!(["a100-80g"]),
            "engine/arg_utils.py:1837 \"a100\" not in device_name",
        ),
        (
            "defaults.batch_defaults[0].max_num_batched_tokens",
            json!(8192),
            "engine/arg_utils.py:1841 OPENAI_API_SERVER",
        ),
        (
            "defaults.batch_defaults[0].max_num_seqs",
            json!(1024),
            "engine/arg_utils.py:1845 OPENAI_API_SERVER",
        ),
        (
            "defaults.batch_defaults[1].min_memory_gib",
            json!(0.0),
            "engine/arg_utils.py:1847 else branch",
        ),
        (
            "defaults.batch_defaults[1].exclude_chips",
            json!([]),
            "engine/arg_utils.py:1847 else branch",
        ),
        (
            "defaults.batch_defaults[1].max_num_batched_tokens",
            json!(2048),
            "engine/arg_utils.py:1851 OPENAI_API_SERVER",
        ),
        (
            "defaults.batch_defaults[1].max_num_seqs",
            json!(256),
            "engine/arg_utils.py:1855 OPENAI_API_SERVER",
        ),
        (
            "memory.non_torch_bytes",
            json!(1_610_612_736u64),
            "measured by v1/worker/gpu_worker.py:318-341; the figure is assumed, as in 0.29.0",
        ),
        (
            "memory.cudagraph_bytes_per_size",
            json!(0),
            "v1/worker/gpu_worker.py:450-462: graphs are outside the KV budget",
        ),
    ]
}

/// Flattens a value to `a.b[0].c` keys. Lists of scalars stay whole; maps
/// under `unsupported_keys` flatten to their sorted key list (the reasons are
/// prose, checked by the rule cases).
fn flatten(prefix: &str, value: &Value, out: &mut BTreeMap<String, Value>) {
    match value {
        Value::Object(map) if prefix == "unsupported_keys" => {
            out.insert(prefix.to_string(), json!(map.keys().collect::<Vec<_>>()));
        }
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Array(items) if items.iter().any(|i| i.is_object()) => {
            for (i, v) in items.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), v, out);
            }
        }
        _ => {
            out.insert(prefix.to_string(), value.clone());
        }
    }
}

fn the_pack() -> &'static pack::RulesPack {
    pack::for_version("0.15.1").expect("a pack covers vLLM 0.15.1")
}

#[test]
fn every_pack_value_is_the_figure_read_from_the_0_15_1_source() {
    let mut actual = BTreeMap::new();
    flatten(
        "",
        &serde_json::to_value(the_pack()).expect("serializes"),
        &mut actual,
    );
    let expected = expected();
    let mut mismatches = Vec::new();
    for (key, value, source) in &expected {
        match actual.get(*key) {
            None => mismatches.push(format!(
                "{key}: expected {value} ({source}), not in the pack"
            )),
            Some(found) if found != value => mismatches.push(format!(
                "{key}: pack says {found}, 0.15.1 has {value} ({source})"
            )),
            Some(_) => {}
        }
    }
    for key in actual.keys() {
        if !expected.iter().any(|(k, _, _)| k == key) {
            mismatches.push(format!(
                "{key}: in the pack with no sourced figure in this test"
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// The pack is internally consistent: every default is one of its own
/// accepted values, and every unsupported key comes with a reason.
#[test]
fn the_0_15_1_pack_validates() {
    let p = the_pack();
    assert_eq!(p.name, "vllm-0.15.1");
    assert_eq!(p.engine_versions, ["0.15.1"]);
    let d = &p.defaults;
    for (set, value) in [
        ("cudagraph_mode", &d.cudagraph_mode),
        ("scheduling_policy", &d.scheduling_policy),
        ("frontend", &d.frontend),
        (
            "data_parallel_load_balancing",
            &d.data_parallel_load_balancing,
        ),
        ("all2all_backend", &d.all2all_backend),
        ("cache_dtype", &d.cache_dtype),
    ] {
        let list = p.enums.get(set).unwrap_or_else(|| panic!("no enum {set}"));
        assert!(
            list.contains(value),
            "default {set} {value} not in {list:?}"
        );
    }
    for method in p
        .async_incompatible_spec_methods
        .iter()
        .chain(&p.eagle_style_spec_methods)
    {
        assert!(p.enums["speculative_method"].contains(method), "{method}");
    }
    for backend in &p.sp_moe_backends {
        assert!(p.enums["all2all_backend"].contains(backend), "{backend}");
    }
    // A method is either drafted EAGLE-style (async-capable) or async-incompatible.
    for method in &p.eagle_style_spec_methods {
        assert!(
            !p.async_incompatible_spec_methods.contains(method),
            "{method}"
        );
    }
    for (key, reason) in &p.unsupported_keys {
        assert!(
            reason.contains("0.15.1") && reason.len() > 40,
            "{key}: {reason}"
        );
    }
    // Batch defaults are searched in order: the last must catch every chip.
    assert_eq!(d.batch_defaults.last().map(|b| b.min_memory_gib), Some(0.0));
}

/// A scenario naming engine release 0.15.1 resolves through this pack, with
/// 0.15.1's defaults on an H100.
#[test]
fn a_scenario_on_0_15_1_resolves() {
    let scenario = "\
kind: Scenario
name: s
model: llama-2-7b
coefficients:
  - cost-model-host-overheads
engine_version: \"0.15.1\"
cluster:
  hardware: h100
  nodes: 1
  gpus_per_node: 1
";
    let deployment = "\
kind: Deployment
name: d
pools:
  - role: colocated
    nodes: 1
    parallel: {tp: 1, pp: 1, dp: 1}
";
    let files = MemoryFiles::new()
        .with("s.yaml", scenario)
        .with("d.yaml", deployment);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    assert!(report.valid, "{:?}", report.problems);
    let resolution = &report.resolutions[0];
    assert_eq!(resolution.rules_pack, "vllm-0.15.1");
    let pool = &resolution.pools[0];
    let engine = &pool.engine;
    // engine/arg_utils.py get_batch_defaults: an 80 GiB H100 serving the
    // OpenAI API gets 8192 batched tokens and 1024 sequences.
    assert_eq!(engine.max_num_batched_tokens, 8192);
    assert_eq!(engine.max_num_seqs, 1024);
    // min(1024 × 2, 512) = 512: 1, 2, 4, 31 steps of 8 to 248, 256..=512 by 16.
    assert_eq!(engine.cudagraph_capture_sizes.len(), 3 + 31 + 17);
    assert_eq!(engine.cudagraph_capture_sizes.last(), Some(&512));
    assert!(engine.async_scheduling);
    assert!(engine.cascade_attention);
    assert!(!engine.reserve_full_prompt);
    assert!(!engine.unhashed_blocks_to_front);
    assert!(!engine.long_prefill_waiver_when_alone);
    assert_eq!(pool.memory.cudagraph_bytes, 0);
}
