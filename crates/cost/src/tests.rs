//! Behavioural tests of both cost models on built-in catalog entries: the
//! direction of every effect the roofline claims to model, plausible
//! magnitudes for a few well-known deployments, coefficient selection by
//! scope, and the linear model's exactness.

use crate::{Batch, CostModel, GraphMode, LINEAR_COEFFICIENTS, Linear, Roofline, StepCost};
use pdsim_spec::catalog::{Catalog, Chip, CoefficientSet, Fabric};
use pdsim_spec::deployment::Pool;
use pdsim_spec::files::MemoryFiles;
use pdsim_spec::layout::PoolLayout;
use pdsim_spec::model::Model;
use pdsim_spec::resolve::{EngineConfig, resolve_pool};
use proptest::prelude::*;
use std::sync::OnceLock;

pub(crate) struct Setup {
    pub(crate) model: Model,
    pub(crate) chip: Chip,
    pub(crate) chip_name: String,
    fabric: Fabric,
    pub(crate) layout: PoolLayout,
    engine: EngineConfig,
}

impl Setup {
    pub(crate) fn roofline(&self, sets: &[CoefficientSet]) -> Result<Roofline, String> {
        Roofline::new(
            &self.model,
            &self.chip,
            &self.chip_name,
            Some(&self.fabric),
            &self.layout,
            &self.engine,
            sets,
        )
    }

    fn linear(&self, sets: &[CoefficientSet]) -> Result<Linear, String> {
        Linear::new(
            &self.model,
            &self.chip_name,
            self.chip.gpus_per_node,
            &self.layout,
            &self.engine,
            sets,
        )
    }
}

/// A pool of `nodes` 8-GPU nodes with the given widths and engine keys
/// (a YAML flow mapping), resolved by the vLLM 0.31.0 rules pack.
pub(crate) fn setup(model: &str, chip: &str, parallel: &str, engine: &str, nodes: u32) -> Setup {
    setup_for("0.31.0", model, chip, parallel, engine, nodes)
}

/// [`setup`] under another release's rules pack.
fn setup_for(
    release: &str,
    model: &str,
    chip: &str,
    parallel: &str,
    engine: &str,
    nodes: u32,
) -> Setup {
    let files = MemoryFiles::new();
    let catalog = Catalog::new(&files, Vec::new());
    let model = catalog.model(model).expect("built-in model").value;
    let chip_value = catalog.chip(chip).expect("built-in chip").value;
    let fabric = catalog.fabric("ib-400g").expect("built-in fabric").value;
    let yaml = format!("role: colocated\nnodes: {nodes}\nparallel: {parallel}\nengine: {engine}\n");
    let pool: Pool = serde_yaml::from_str(&yaml).expect("pool yaml");
    let layout = PoolLayout::derive(0, &pool, Some(8));
    let pack = pdsim_spec::rules::pack::for_version(release).expect("rules pack");
    let engine = resolve_pool(pack, &pool, &layout, chip, &chip_value, &model).engine;
    Setup {
        model,
        chip: chip_value,
        chip_name: chip.to_string(),
        fabric,
        layout,
        engine,
    }
}

pub(crate) fn llama8b_tp1() -> Setup {
    setup("llama-3.1-8b", "h100", "{tp: 1, pp: 1, dp: 1}", "{}", 1)
}

pub(crate) fn deepseek_ep(dp: u32, backend: &str) -> Setup {
    setup(
        "deepseek-v3",
        "h200",
        &format!("{{tp: 1, pp: 1, dp: {dp}, enable_expert_parallel: true}}"),
        &format!("{{all2all_backend: {backend}}}"),
        dp.div_ceil(8),
    )
}

/// Decode requests each at `context` tokens (the new one included), plus
/// one prefill chunk of `chunk` tokens after `computed` cached ones.
pub(crate) fn batch(
    decodes: u32,
    context: u64,
    chunk: u32,
    computed: u64,
    graph: GraphMode,
) -> Batch {
    let prefill_reqs = u32::from(chunk > 0);
    let q = chunk as u64;
    Batch {
        num_reqs: decodes + prefill_reqs,
        prefill_reqs,
        decode_reqs: decodes,
        prefill_tokens: chunk,
        decode_tokens: decodes,
        spec_tokens: 0,
        padded_tokens: decodes + chunk,
        graph,
        attn_context_tokens: decodes as u64 * context + computed + q,
        attn_pairs: decodes as u64 * context + q * computed + q * (q + 1) / 2,
        dbo: false,
    }
}

pub(crate) fn decode(requests: u32, context: u64) -> Batch {
    batch(requests, context, 0, 0, GraphMode::Full)
}

fn prefill(tokens: u32) -> Batch {
    batch(0, 0, tokens, 0, GraphMode::Piecewise)
}

fn ms(cost: &StepCost) -> f64 {
    cost.total.as_ms_f64()
}

/// A one-entry coefficient set written as YAML.
pub(crate) fn set(name: &str, entries: &str) -> CoefficientSet {
    serde_yaml::from_str(&format!(
        "kind: CoefficientSet\nname: {name}\ncoefficients:\n{entries}"
    ))
    .expect("coefficient set yaml")
}

pub(crate) fn entry(name: &str, value: f64, units: &str, scope: &str) -> String {
    format!(
        "  - {name}:\n      value: {value}\n      units: {units}\n      method: assumed\n      \
         fitted: false\n      rationale: test\n      scope: {scope}\n"
    )
}

#[test]
fn llama_8b_decode_is_memory_bound_at_the_weight_read_time() {
    let model = llama8b_tp1().roofline(&[]).unwrap();
    let cost = model.step(&decode(1, 1024));
    // 16 GB of weights at 3.35 TB/s × 0.8 is 6.0 ms; kernel floors add ~1.
    assert!(
        (5.0..9.0).contains(&ms(&cost)),
        "decode of one token took {} ms",
        ms(&cost)
    );
    assert!(cost.memory_ns > 2 * cost.compute_ns, "{cost:?}");
    assert_eq!(cost.communication_ns, 0);
    assert_eq!(cost.padding_ns, 0);
}

#[test]
fn a_long_prefill_is_compute_bound() {
    let model = llama8b_tp1().roofline(&[]).unwrap();
    let cost = model.step(&prefill(8192));
    assert!(cost.compute_ns > 5 * cost.memory_ns, "{cost:?}");
    // 2 · 8192 · 7e9 FLOP plus attention at ~0.85 of 989 TFLOP/s.
    assert!((100.0..400.0).contains(&ms(&cost)), "{} ms", ms(&cost));
}

#[test]
fn padding_costs_time_and_is_reported() {
    let model = llama8b_tp1().roofline(&[]).unwrap();
    let real = decode(100, 2048);
    let padded = Batch {
        padded_tokens: 128,
        ..real
    };
    let a = model.step(&real);
    let b = model.step(&padded);
    assert!(b.total > a.total, "{a:?} vs {b:?}");
    assert!(b.padding_ns > 0);
    assert_eq!(a.padding_ns, 0);
    // A compute-bound prefill pays for its padding nearly in proportion.
    let chunk = prefill(4000);
    let padded_chunk = Batch {
        padded_tokens: 4096,
        ..chunk
    };
    let (c, d) = (model.step(&chunk), model.step(&padded_chunk));
    assert!(d.total > c.total);
    assert!(d.padding_ns as f64 > 0.02 * d.compute_ns as f64);
}

#[test]
fn full_graphs_cost_the_host_least_and_eager_the_most() {
    let model = llama8b_tp1().roofline(&[]).unwrap();
    let host = |graph| {
        model
            .step(&Batch {
                graph,
                ..decode(8, 512)
            })
            .host_ns
    };
    let (full, piecewise, eager) = (
        host(GraphMode::Full),
        host(GraphMode::Piecewise),
        host(GraphMode::Eager),
    );
    assert!(
        full < piecewise && piecewise < eager,
        "{full} {piecewise} {eager}"
    );
}

#[test]
fn tensor_parallelism_adds_communication() {
    let tp1 = llama8b_tp1().roofline(&[]).unwrap();
    let tp8 = setup("llama-3.1-8b", "h100", "{tp: 8, pp: 1, dp: 1}", "{}", 1)
        .roofline(&[])
        .unwrap();
    let b = decode(64, 1024);
    let (one, eight) = (tp1.step(&b), tp8.step(&b));
    assert_eq!(one.communication_ns, 0);
    // 64 all-reduces of 512 KiB at ~8 µs (custom) each.
    assert!(eight.communication_ns > 300_000, "{eight:?}");
    assert!(eight.memory_ns < one.memory_ns / 6);
    // NCCL instead of the custom kernel costs more on small messages.
    let nccl = setup(
        "llama-3.1-8b",
        "h100",
        "{tp: 8, pp: 1, dp: 1}",
        "{disable_custom_all_reduce: true}",
        1,
    )
    .roofline(&[])
    .unwrap();
    assert!(nccl.step(&b).communication_ns > eight.communication_ns);
}

#[test]
fn expert_parallel_all_to_all_grows_with_the_group() {
    for backend in [
        "allgather_reducescatter",
        "deepep_high_throughput",
        "deepep_low_latency",
        "pplx",
        "naive",
    ] {
        let mut last = 0;
        for dp in [2u32, 4, 8, 16] {
            let model = setup(
                "qwen3-30b-a3b",
                "h100",
                &format!("{{tp: 1, pp: 1, dp: {dp}, enable_expert_parallel: true}}"),
                &format!("{{all2all_backend: {backend}}}"),
                dp.div_ceil(8),
            )
            .roofline(&[])
            .unwrap();
            let comm = model.step(&decode(64, 1024)).communication_ns;
            assert!(comm > last, "{backend} at ep {dp}: {comm} after {last}");
            last = comm;
        }
    }
}

#[test]
fn low_latency_all_to_all_wins_small_batches_and_loses_large_ones() {
    let ll = deepseek_ep(8, "deepep_low_latency").roofline(&[]).unwrap();
    let ht = deepseek_ep(8, "deepep_high_throughput")
        .roofline(&[])
        .unwrap();
    let small = decode(8, 1024);
    assert!(ll.step(&small).communication_ns < ht.step(&small).communication_ns);
    let large = prefill(8192);
    assert!(ll.step(&large).communication_ns > ht.step(&large).communication_ns);
}

#[test]
fn dual_batch_overlap_is_never_slower_than_its_microbatches_in_series() {
    let model = deepseek_ep(16, "deepep_high_throughput")
        .roofline(&[])
        .unwrap();
    for (decodes, chunk) in [(64, 0), (256, 0), (0, 4096), (32, 2048)] {
        let whole = batch(decodes, 2048, chunk, 0, GraphMode::Piecewise);
        let half = batch(decodes / 2, 2048, chunk / 2, 0, GraphMode::Piecewise);
        let dbo = model.step(&Batch { dbo: true, ..whole });
        let serial = model.step(&half).total.as_ns() * 2;
        assert!(dbo.total.as_ns() <= serial, "{dbo:?} vs 2 × {serial}");
    }
    // Where communication is heavy and compute-bound work large, the
    // overlap pays for re-reading the weights.
    // The two microbatches share the links: overlap hides compute behind
    // communication, never communication behind itself.
    for decodes in [64, 256, 1024] {
        let cost = model.step(&Batch {
            dbo: true,
            ..batch(decodes, 2048, 0, 0, GraphMode::Piecewise)
        });
        assert!(cost.communication_ns > 0);
        assert!(cost.total.as_ns() + 1 >= cost.communication_ns, "{cost:?}");
    }
    let big = prefill(8192);
    let plain = model.step(&big);
    let overlapped = model.step(&Batch { dbo: true, ..big });
    assert!(
        overlapped.total < plain.total,
        "{overlapped:?} vs {plain:?}"
    );
    // Each microbatch launches its own kernels or graph: one launch more
    // of host time than the step run whole, whatever the graph mode.
    for graph in [GraphMode::Full, GraphMode::Piecewise, GraphMode::Eager] {
        let b = batch(64, 2048, 0, 0, graph);
        let (plain, overlapped) = (model.step(&b), model.step(&Batch { dbo: true, ..b }));
        assert!(
            overlapped.host_ns > plain.host_ns,
            "{graph:?}: {overlapped:?} vs {plain:?}"
        );
    }
}

#[test]
fn a_scoped_coefficient_overrides_only_where_its_scope_applies() {
    let s = llama8b_tp1();
    let base = ms(&s.roofline(&[]).unwrap().step(&decode(1, 1024)));
    let slow = |scope: &str| {
        let sets = [set(
            "user",
            &entry("hbm_derate", 0.4, "dimensionless", scope),
        )];
        ms(&s.roofline(&sets).unwrap().step(&decode(1, 1024)))
    };
    // Hardware names compare case-insensitively; an omitted dimension does
    // not constrain.
    assert!(slow("{hardware: [H100]}") > 1.5 * base);
    assert!(slow("{}") > 1.5 * base);
    assert!(slow("{hardware: [h100], model: [Llama-3.1-8B], tp: [1]}") > 1.5 * base);
    assert_eq!(slow("{hardware: [h200]}"), base);
    assert_eq!(slow("{tp: [2, 4]}"), base);
    assert_eq!(slow("{hardware: [h100], ep: [8]}"), base);
    // The last applicable entry wins, across sets and within one.
    let sets = [
        set("first", &entry("hbm_derate", 0.4, "dimensionless", "{}")),
        set(
            "second",
            &(entry("hbm_derate", 0.2, "dimensionless", "{hardware: [h100]}")
                + &entry("hbm_derate", 0.8, "dimensionless", "{hardware: [h200]}")),
        ),
    ];
    let model = s.roofline(&sets).unwrap();
    let derate = model
        .provenance()
        .into_iter()
        .find(|p| p.0 == "hbm_derate")
        .unwrap();
    assert_eq!(derate.1, 0.2);
    assert!(derate.2.contains("set `second`"), "{}", derate.2);
}

#[test]
fn an_invalid_coefficient_is_named() {
    let s = llama8b_tp1();
    let too_efficient = [set(
        "user",
        &entry("gemm_eps_max_bf16", 1.5, "dimensionless", "{}"),
    )];
    let error = s.roofline(&too_efficient).unwrap_err();
    assert!(error.contains("gemm_eps_max_bf16"), "{error}");
    let wrong_units = [set(
        "user",
        &entry("hbm_constant_latency", 3.0, "us_per_step", "{}"),
    )];
    let error = s.roofline(&wrong_units).unwrap_err();
    assert!(
        error.contains("hbm_constant_latency") && error.contains("us_per_transfer"),
        "{error}"
    );
}

#[test]
fn provenance_cites_every_coefficient_read() {
    let model = deepseek_ep(8, "deepep_low_latency").roofline(&[]).unwrap();
    let table = model.provenance();
    for name in [
        "gemm_eps_max_fp8",
        "gemm_m_half_fp8",
        "hbm_derate",
        "hbm_constant_latency",
        "moe_routing_imbalance_median",
        "host_replay_graph_per_step",
        "collective_floor_alltoall_fp16_8rank_h200",
        "all2all_low_latency_bw_efficiency",
    ] {
        let row = table.iter().find(|p| p.0 == name);
        assert!(row.is_some_and(|p| !p.2.is_empty()), "{name} missing");
    }
    // A chip pdsim has a vendor description of cites it for the memory
    // terms, not the generic default of the same value.
    for name in ["hbm_derate", "hbm_constant_latency"] {
        let row = table.iter().find(|p| p.0 == name).unwrap();
        assert!(
            row.2
                .starts_with(crate::coefficients::SRC_PRIMITIVES_VENDOR),
            "{name}: {}",
            row.2
        );
    }
    // One it has no description of cites the generic default instead.
    let other = setup("llama-3.1-8b", "rebel100", "{tp: 1, pp: 1, dp: 1}", "{}", 1)
        .roofline(&[])
        .unwrap()
        .provenance();
    for name in ["hbm_derate", "hbm_constant_latency"] {
        let row = other.iter().find(|p| p.0 == name).unwrap();
        assert!(
            row.2.starts_with(crate::coefficients::SRC_GENERIC),
            "{name}: {}",
            row.2
        );
    }
    // The same for the pipeline's send latency, read only with stages.
    for (chip, source) in [
        ("h100", crate::coefficients::SRC_PRIMITIVES_VENDOR),
        ("rebel100", crate::coefficients::SRC_GENERIC),
    ] {
        let staged = setup("llama-3.1-8b", chip, "{tp: 1, pp: 2, dp: 1}", "{}", 1)
            .roofline(&[])
            .unwrap()
            .provenance();
        let row = staged.iter().find(|p| p.0 == "p2p_latency").unwrap();
        assert_eq!(row.1, 10.0, "{chip}");
        assert!(row.2.starts_with(source), "{chip}: {}", row.2);
    }
    let eps = table.iter().find(|p| p.0 == "gemm_eps_max_fp8").unwrap();
    assert_eq!(eps.1, 0.788);
    assert!(eps.2.contains("cost-model-primitives"));
    let replay = table
        .iter()
        .find(|p| p.0 == "host_replay_graph_per_step")
        .unwrap();
    assert!(replay.2.contains("cost-model-host-overheads"));
}

#[test]
fn pipeline_stages_add_sends_but_keep_decode_near_the_weight_read_time() {
    let pp1 = setup("llama-3.1-70b", "h100", "{tp: 4, pp: 1, dp: 1}", "{}", 1)
        .roofline(&[])
        .unwrap();
    let pp2 = setup("llama-3.1-70b", "h100", "{tp: 4, pp: 2, dp: 1}", "{}", 1)
        .roofline(&[])
        .unwrap();
    let b = decode(64, 1024);
    let (one, two) = (pp1.step(&b), pp2.step(&b));
    // Each request still passes every layer once per token.
    let ratio = ms(&two) / ms(&one);
    assert!((0.8..1.3).contains(&ratio), "pp2/pp1 = {ratio}");
    assert!(two.communication_ns > 0);
}

#[test]
fn speculative_drafting_costs_time() {
    let plain = llama8b_tp1().roofline(&[]).unwrap();
    let eagle = setup(
        "llama-3.1-8b",
        "h100",
        "{tp: 1, pp: 1, dp: 1}",
        "{speculative: {method: eagle3, num_spec_tokens: 3}}",
        1,
    )
    .roofline(&[])
    .unwrap();
    let b = decode(16, 1024);
    assert!(eagle.step(&b).total > plain.step(&b).total);
}

#[test]
fn an_empty_step_costs_nothing() {
    let model = llama8b_tp1().roofline(&[]).unwrap();
    assert_eq!(model.step(&Batch::default()), StepCost::default());
}

#[test]
fn admission_is_per_prompt_token_and_cheaper_in_the_rust_frontend() {
    let python = llama8b_tp1().roofline(&[]).unwrap();
    assert_eq!(python.admission_delay(1000).as_ns(), 350_000);
    assert_eq!(python.admission_delay(0).as_ns(), 0);
    let rust = setup(
        "llama-3.1-8b",
        "h100",
        "{tp: 1, pp: 1, dp: 1}",
        "{frontend: rust}",
        1,
    )
    .roofline(&[])
    .unwrap();
    assert!(rust.admission_delay(1000) < python.admission_delay(1000));
    // The API server's own work: the built-in host set's values, in ns.
    let api = python.api_server();
    assert_eq!(api.request.as_ns(), 3_900_000);
    assert_eq!(api.output_token.as_ns(), 45_900);
    assert_eq!(api.completion.as_ns(), 777_300);
    // The Rust frontend does it at `frontend_rust_admission_ratio` (0.5).
    let rust_api = rust.api_server();
    assert_eq!(rust_api.request.as_ns(), 1_950_000);
    assert_eq!(rust_api.output_token.as_ns(), 22_950);
    assert_eq!(rust_api.completion.as_ns(), 388_650);
}

#[test]
fn the_python_frontend_batches_prompts_for_its_tokenizer_and_the_rust_one_does_not() {
    // vLLM 0.15.1's AsyncMicrobatchTokenizer defaults (vllm/utils/async_utils.py).
    let python = setup_for(
        "0.15.1",
        "llama-3.1-8b",
        "h100",
        "{tp: 1, pp: 1, dp: 1}",
        "{}",
        1,
    )
    .roofline(&[])
    .unwrap();
    // 0.31.0 has no such batcher.
    assert_eq!(
        llama8b_tp1().roofline(&[]).unwrap().tokenizer_batching(),
        None
    );
    assert_eq!(
        python.tokenizer_batching(),
        Some(crate::TokenizerBatching {
            wait: pdsim_core::SimDuration::from_ns(2_000_000),
            max_prompts: 32,
        })
    );
    let rust = setup(
        "llama-3.1-8b",
        "h100",
        "{tp: 1, pp: 1, dp: 1}",
        "{frontend: rust}",
        1,
    )
    .roofline(&[])
    .unwrap();
    assert_eq!(rust.tokenizer_batching(), None);
    // A set can change the wait, in its own units.
    let set = set(
        "frontend",
        &entry("host_tokenizer_batch_wait", 500.0, "us_per_batch", "{}"),
    );
    let tuned = setup_for(
        "0.15.1",
        "llama-3.1-8b",
        "h100",
        "{tp: 1, pp: 1, dp: 1}",
        "{}",
        1,
    )
    .roofline(&[set])
    .unwrap();
    assert_eq!(
        tuned.tokenizer_batching().map(|b| b.wait.as_ns()),
        Some(500_000)
    );
}

fn linear_set(scope: &str) -> CoefficientSet {
    let values = [2000.0, 50.0, 100.0, 0.5];
    let entries: String = LINEAR_COEFFICIENTS
        .iter()
        .zip(values)
        .map(|((name, units), value)| entry(name, value, units, scope))
        .collect();
    set("fit", &entries)
}

#[test]
fn the_linear_model_is_its_formula_exactly() {
    let model = llama8b_tp1().linear(&[linear_set("{}")]).unwrap();
    let b = batch(10, 1000, 300, 200, GraphMode::Piecewise);
    // 2000 µs + 50 µs · 300 + 100 µs · 10 + 0.5 µs · (10·1000 + 200 + 300).
    let expected_us = 2000.0 + 50.0 * 300.0 + 100.0 * 10.0 + 0.5 * 10_500.0;
    let cost = model.step(&b);
    assert_eq!(cost.total.as_ns(), (expected_us * 1e3) as u64);
    assert_eq!(
        cost.compute_ns + cost.memory_ns + cost.host_ns,
        cost.total.as_ns()
    );
    assert_eq!(model.admission_delay(100).as_ns(), 35_000);
    // The API server's work is priced by the host set, as under the
    // roofline: 3.9 ms to take a request in, 45.9 µs per streamed token,
    // 777.3 µs per completion.
    let api = model.api_server();
    assert_eq!(
        (
            api.request.as_ns(),
            api.output_token.as_ns(),
            api.completion.as_ns()
        ),
        (3_900_000, 45_900, 777_300)
    );
    let direct = Linear::from_us(2000.0, 50.0, 100.0, 0.5);
    assert_eq!(direct.step(&b).total, cost.total);
    // Every term read is cited with the set it came from; the host terms
    // from the built-in pack.
    let cited = model.provenance();
    for ((name, _), value) in LINEAR_COEFFICIENTS.iter().zip([2000.0, 50.0, 100.0, 0.5]) {
        let row = cited.iter().find(|row| row.0 == *name);
        assert!(
            row.is_some_and(|row| row.1 == value && !row.2.is_empty()),
            "{name}: {row:?}"
        );
    }
    assert!(
        cited.iter().any(|row| row.0 == "host_api_request"),
        "{cited:?}"
    );
}

#[test]
fn the_linear_model_batches_tokenization_as_the_roofline_does() {
    // The host terms are the roofline's: 0.15.1's Python frontend batches
    // prompts for its tokenizer (2 ms, 32 prompts), 0.31.0's does not.
    let on_0151 = setup_for(
        "0.15.1",
        "llama-3.1-8b",
        "h100",
        "{tp: 1, pp: 1, dp: 1}",
        "{}",
        1,
    );
    let linear = on_0151.linear(&[linear_set("{}")]).unwrap();
    assert_eq!(
        linear.tokenizer_batching(),
        Some(crate::TokenizerBatching {
            wait: pdsim_core::SimDuration::from_ns(2_000_000),
            max_prompts: 32,
        })
    );
    assert_eq!(
        linear.tokenizer_batching(),
        on_0151.roofline(&[]).unwrap().tokenizer_batching()
    );
    assert_eq!(
        llama8b_tp1()
            .linear(&[linear_set("{}")])
            .unwrap()
            .tokenizer_batching(),
        None
    );
}

#[test]
fn the_linear_model_needs_its_coefficients() {
    let s = llama8b_tp1();
    let error = s.linear(&[]).unwrap_err();
    assert!(error.contains("linear_step_us"), "{error}");
    // A fit scoped to another chip does not apply.
    let error = s.linear(&[linear_set("{hardware: [h200]}")]).unwrap_err();
    assert!(error.contains("linear_step_us"), "{error}");
}

/// A step's breakdown is of one stage's GPU time, as its duration is: with
/// two pipeline stages each runs 40 of Llama-3.1-70B's 80 layers over the
/// whole batch (in two microbatches), so a compute-bound prefill reports
/// about half the compute of one stage of 80 layers (a little more: the
/// smaller microbatches run their GEMMs less efficiently).
#[test]
fn a_pipeline_stage_reports_the_compute_of_its_own_layers() {
    let one = setup("llama-3.1-70b", "h100", "{tp: 8, pp: 1, dp: 1}", "{}", 1)
        .roofline(&[])
        .unwrap()
        .step(&prefill(8192));
    let two = setup("llama-3.1-70b", "h100", "{tp: 8, pp: 2, dp: 1}", "{}", 2)
        .roofline(&[])
        .unwrap()
        .step(&prefill(8192));
    let ratio = two.compute_ns as f64 / one.compute_ns as f64;
    assert!((0.5..0.6).contains(&ratio), "pp 2 / pp 1 compute: {ratio}");
}

/// A chip figure the roofline divides by must be a positive number; the
/// model refuses to build rather than price steps at infinite speed.
#[test]
fn a_chip_without_positive_figures_is_refused() {
    for (key, value) in [
        ("TFlopsPeak", 0.0),
        ("BwPeakTBs", f64::NAN),
        ("IntraNodeBwGBps", -1.0),
    ] {
        let mut s = llama8b_tp1();
        match key {
            "TFlopsPeak" => s.chip.t_flops_peak = value,
            "BwPeakTBs" => s.chip.bw_peak_tbs = value,
            _ => s.chip.intra_node_bw_gbps = value,
        }
        let Err(error) = s.roofline(&[]) else {
            panic!("{key} {value} was accepted");
        };
        assert!(error.contains(key) && error.contains("positive"), "{error}");
    }
}

/// The linear model is chosen for a pool only when a set scoped to it gives
/// all four terms; none chooses the roofline; some but not all is refused
/// by name.
#[test]
fn the_linear_model_is_selected_by_its_four_terms() {
    let s = llama8b_tp1();
    let selected = |sets: &[CoefficientSet]| {
        Linear::selected(
            &s.model,
            &s.chip_name,
            s.chip.gpus_per_node,
            &s.layout,
            sets,
        )
    };
    assert_eq!(selected(&[]), Ok(false));
    assert_eq!(selected(&[linear_set("{}")]), Ok(true));
    assert_eq!(
        selected(&[linear_set("{hardware: [h200]}")]),
        Ok(false),
        "scoped elsewhere"
    );
    // Each scope dimension is matched by value: this pool has tp 1 and
    // no expert parallelism (ep 1).
    assert_eq!(selected(&[linear_set("{ep: [8]}")]), Ok(false), "ep 8");
    assert_eq!(selected(&[linear_set("{ep: [1, 8]}")]), Ok(true), "ep 1");
    assert_eq!(selected(&[linear_set("{tp: [2]}")]), Ok(false), "tp 2");
    assert_eq!(selected(&[linear_set("{tp: [1]}")]), Ok(true), "tp 1");
    assert_eq!(
        selected(&[linear_set("{nodes_spanned: [2]}")]),
        Ok(false),
        "2 nodes"
    );
    assert_eq!(
        selected(&[linear_set("{nodes_spanned: [1]}")]),
        Ok(true),
        "1 node"
    );
    let (name, units) = LINEAR_COEFFICIENTS[0];
    let partial = set("half", &entry(name, 1.0, units, "{}"));
    let error = selected(&[partial]).unwrap_err();
    assert!(
        error.contains(name) && error.contains("all four"),
        "{error}"
    );
}

/// Models shared by the property tests, built once.
fn fleet() -> &'static Vec<Roofline> {
    static FLEET: OnceLock<Vec<Roofline>> = OnceLock::new();
    FLEET.get_or_init(|| {
        vec![
            llama8b_tp1().roofline(&[]).unwrap(),
            setup("llama-3.1-70b", "h100", "{tp: 8, pp: 2, dp: 1}", "{}", 2)
                .roofline(&[])
                .unwrap(),
            deepseek_ep(8, "deepep_low_latency").roofline(&[]).unwrap(),
            deepseek_ep(16, "allgather_reducescatter")
                .roofline(&[])
                .unwrap(),
            setup(
                "mixtral-8x7b",
                "h100",
                "{tp: 2, pp: 1, dp: 2, enable_expert_parallel: true}",
                "{all2all_backend: deepep_high_throughput, speculative: {method: eagle, num_spec_tokens: 2}}",
                1,
            )
            .roofline(&[])
            .unwrap(),
        ]
    })
}

proptest! {
    #[test]
    fn more_tokens_or_context_is_never_faster(
        which in 0usize..5,
        decodes in 0u32..300,
        context in 1u64..20_000,
        chunk in 0u32..4096,
        computed in 0u64..20_000,
        more in 1u32..512,
        more_context in 1u64..5000,
        dbo in any::<bool>(),
        eager in any::<bool>(),
    ) {
        let model = &fleet()[which];
        let graph = if eager { GraphMode::Eager } else { GraphMode::Piecewise };
        let with = |b: Batch| Batch { dbo, ..b };
        let base = model.step(&with(batch(decodes, context, chunk, computed, graph))).total;
        let more_decodes =
            model.step(&with(batch(decodes + more, context, chunk, computed, graph))).total;
        let longer_contexts =
            model.step(&with(batch(decodes, context + more_context, chunk, computed, graph))).total;
        let longer_chunk =
            model.step(&with(batch(decodes, context, chunk + more, computed, graph))).total;
        let deeper_chunk =
            model.step(&with(batch(decodes, context, chunk, computed + more_context, graph))).total;
        prop_assert!(more_decodes >= base);
        prop_assert!(longer_contexts >= base);
        prop_assert!(longer_chunk >= base);
        if chunk > 0 {
            prop_assert!(deeper_chunk >= base);
        }
    }

    #[test]
    fn padding_never_makes_a_step_faster(
        which in 0usize..5,
        decodes in 1u32..300,
        context in 1u64..20_000,
        pad in 0u32..64,
    ) {
        let model = &fleet()[which];
        let b = decode(decodes, context);
        let padded = Batch { padded_tokens: b.padded_tokens + pad, ..b };
        let (plain, padded) = (model.step(&b), model.step(&padded));
        prop_assert!(padded.total >= plain.total);
        prop_assert!(padded.padding_ns <= padded.compute_ns);
    }
}

/// Sample step times for sanity checks by eye:
/// `cargo test -p pdsim-cost sample_step_times -- --nocapture`.
#[test]
fn sample_step_times() {
    let llama = llama8b_tp1().roofline(&[]).unwrap();
    let deepseek = deepseek_ep(8, "deepep_low_latency").roofline(&[]).unwrap();
    let show = |label: &str, cost: StepCost| {
        println!(
            "{label:<44} {:>9.3} ms  compute {:>8.3}  memory {:>8.3}  comm {:>7.3}  host {:>6.3}",
            cost.total.as_ms_f64(),
            cost.compute_ns as f64 / 1e6,
            cost.memory_ns as f64 / 1e6,
            cost.communication_ns as f64 / 1e6,
            cost.host_ns as f64 / 1e6,
        );
        cost
    };
    let d1 = show(
        "llama-3.1-8b h100 tp1 decode 1 @1k",
        llama.step(&decode(1, 1024)),
    );
    let d64 = show(
        "llama-3.1-8b h100 tp1 decode 64 @1k",
        llama.step(&decode(64, 1024)),
    );
    let d256 = show(
        "llama-3.1-8b h100 tp1 decode 256 @1k",
        llama.step(&decode(256, 1024)),
    );
    let p512 = show(
        "llama-3.1-8b h100 tp1 prefill 512",
        llama.step(&prefill(512)),
    );
    let p2k = show(
        "llama-3.1-8b h100 tp1 prefill 2048",
        llama.step(&prefill(2048)),
    );
    let p8k = show(
        "llama-3.1-8b h100 tp1 prefill 8192",
        llama.step(&prefill(8192)),
    );
    let ds = show(
        "deepseek-v3 h200 ep8 (dp8) LL decode 64 @1k",
        deepseek.step(&decode(64, 1024)),
    );
    let ds_dbo = show(
        "deepseek-v3 h200 ep8 LL decode 64 @1k dbo",
        deepseek.step(&Batch {
            dbo: true,
            ..decode(64, 1024)
        }),
    );
    let ht = deepseek_ep(8, "deepep_high_throughput")
        .roofline(&[])
        .unwrap();
    show(
        "deepseek-v3 h200 ep8 HT prefill 8192",
        ht.step(&prefill(8192)),
    );
    assert!(d1.total < d64.total && d64.total < d256.total);
    assert!(p512.total < p2k.total && p2k.total < p8k.total);
    assert!((15.0..60.0).contains(&ms(&ds)), "{} ms", ms(&ds));
    assert!(ds_dbo.total.as_ns() > 0);
}

#[test]
fn every_pool_of_a_validated_deployment_gets_a_roofline() {
    let scenario = "kind: Scenario\nname: s\nmodel: deepseek-v3\ncoefficients:\n  \
        - cost-model-host-overheads\n  - pd-transfer-estimates\nengine_version: \"0.31.0\"\n\
        workload:\n  shape: summarization\ncluster:\n  hardware: h200\n  fabric: ib-400g\n  \
        nodes: 4\n  gpus_per_node: 8\n";
    let deployment = "kind: Deployment\nname: d\npools:\n  - role: prefill\n    nodes: 1\n    \
        parallel: {tp: 1, pp: 1, dp: 8, dp_local: 8, enable_expert_parallel: true}\n    \
        engine: {all2all_backend: deepep_high_throughput, max_num_batched_tokens: 16384}\n  \
        - role: decode\n    nodes: 3\n    \
        parallel: {tp: 1, pp: 1, dp: 8, dp_local: 8, enable_expert_parallel: true}\n    \
        engine: {all2all_backend: deepep_low_latency, max_num_seqs: 512}\n\
        pd_transfer:\n  connector: NixlConnector\n";
    let files = MemoryFiles::new()
        .with("/w/scenario.yaml", scenario)
        .with("/w/deployment.yaml", deployment);
    let report = pdsim_spec::validate(&pdsim_spec::Request {
        files: &files,
        catalog_dirs: Vec::new(),
        scenario: Some("/w/scenario.yaml".into()),
        documents: vec!["/w/deployment.yaml".into()],
    });
    assert!(report.valid, "{:?}", report.problems);
    let scenario = report.scenario.as_ref().expect("resolved scenario");
    let pools = &report.deployments[0].resolution.pools;
    let prefill_pool = Roofline::for_pool(scenario, &pools[0]).unwrap();
    let decode_pool = Roofline::for_pool(scenario, &pools[1]).unwrap();
    assert!(prefill_pool.step(&prefill(8192)).communication_ns > 0);
    assert!(decode_pool.step(&decode(64, 1024)).total.as_ns() > 0);
    // The scenario's own listing of the host set is what provenance cites.
    let replay = decode_pool
        .provenance()
        .into_iter()
        .find(|p| p.0 == "host_replay_graph_per_step")
        .unwrap();
    assert!(
        replay.2.starts_with("set `cost-model-host-overheads`"),
        "{}",
        replay.2
    );
}

#[test]
fn every_built_in_chip_and_model_prices_finite_steps() {
    let models = [
        "codellama-34b",
        "codellama-34b-instruct",
        "deepseek-v3",
        "llama-2-70b",
        "llama-2-7b",
        "llama-3.1-70b",
        "llama-3.1-8b",
        "minimax-m2.7",
        "mixtral-8x7b",
        "qwen3-14b",
        "qwen3-30b-a3b",
    ];
    let chips = ["a100-80g", "b200", "h100", "h200", "l40s", "rebel100"];
    let layouts = [
        ("{tp: 1, pp: 1, dp: 1}", 1),
        ("{tp: 4, pp: 2, dp: 1}", 1),
        ("{tp: 2, pp: 1, dp: 8, enable_expert_parallel: true}", 2),
    ];
    for model in models {
        for chip in chips {
            for (parallel, nodes) in layouts {
                let roofline = setup(model, chip, parallel, "{}", nodes)
                    .roofline(&[])
                    .unwrap_or_else(|e| panic!("{model} on {chip} {parallel}: {e}"));
                for b in [decode(32, 4096), prefill(2048), Batch::default()] {
                    let cost = roofline.step(&b);
                    let total = cost.total.as_ns();
                    assert!(
                        total < 60_000_000_000,
                        "{model} on {chip} {parallel}: {cost:?}"
                    );
                    assert_eq!(total == 0, b.tokens() == 0, "{model} on {chip}");
                }
            }
        }
    }
}

/// A step's time is at least its FLOPs at the chip's dense peak, whatever
/// the efficiency coefficients. Llama-3.1-8B (hidden 4096, 32 layers, 32
/// heads of 128, 8 KV heads, MLP 14336) prefilling 32,768 tokens alone on
/// one H100 (989.5 dense BF16 TFLOP/s):
/// - GEMMs: per layer q and o 2 · 4096², k and v 2 · 4096 · 1024, MLP
///   3 · 4096 · 14336: 218.1 M parameters, 6.979 G over 32 layers;
///   2 · 32,768 · 6.979 G = 4.574e14 FLOPs.
/// - attention: 32,768 · 32,769 / 2 = 536.9 M causal pairs, each 4 · 32
///   heads · 128 FLOPs per layer: 536.9 M · 16,384 · 32 = 2.815e14 FLOPs.
///
/// Together 7.389e14 FLOPs, 746.7 ms at peak. Without the attention term
/// the GEMMs alone would allow 462 ms.
#[test]
fn a_long_prefill_pays_for_its_gemm_and_attention_flops() {
    let model = llama8b_tp1().roofline(&[]).unwrap();
    let cost = model.step(&prefill(32_768));
    assert!(ms(&cost) >= 746.7, "{} ms", ms(&cost));
}

/// The same bound for the routed experts of an MoE prefill: Mixtral-8x7B
/// at tp 2 (8 experts, top 2, expert MLP 3 · 4096 · 14336 split in two per
/// rank, 32 layers) prefilling 8,192 tokens runs, per rank, 8,192 · 2
/// experts · 2 FLOPs · 3 · 4096 · 7168 · 32 layers = 9.235e13 FLOPs of
/// expert GEMMs: 93.3 ms at 989.5 TFLOP/s before anything else. Its
/// weights (46.7 GB per rank) read in 14 ms at the datasheet's 3.35 TB/s,
/// so only the FLOPs can make the step this long.
#[test]
fn an_moe_prefill_pays_for_its_expert_flops() {
    let model = setup("mixtral-8x7b", "h100", "{tp: 2, pp: 1, dp: 1}", "{}", 1)
        .roofline(&[])
        .unwrap();
    let cost = model.step(&prefill(8_192));
    assert!(ms(&cost) >= 93.3, "{} ms", ms(&cost));
}

/// Without dual-batch overlap or pipeline stages a step's collectives run
/// between its kernels, so the step lasts at least its memory traffic plus
/// its communication (`NoOverlap`, the module's header).
#[test]
fn communication_is_added_to_the_kernels_not_overlapped() {
    let tp8 = setup("llama-3.1-8b", "h100", "{tp: 8, pp: 1, dp: 1}", "{}", 1)
        .roofline(&[])
        .unwrap();
    let cost = tp8.step(&decode(64, 1024));
    assert!(cost.communication_ns > 0, "{cost:?}");
    assert!(
        cost.total.as_ns() >= cost.memory_ns + cost.communication_ns,
        "{cost:?}"
    );
}

#[test]
fn provenance_rows_are_the_provenance_with_units() {
    let model = deepseek_ep(8, "deepep_low_latency").roofline(&[]).unwrap();
    let cited = model.provenance();
    let rows = model.provenance_rows();
    assert!(rows.len() > 10, "{rows:?}");
    assert_eq!(rows.len(), cited.len());
    // `provenance` folds the units into the source as `source [units]`.
    for ((name, value, units, source), (n, v, s)) in rows.iter().zip(&cited) {
        assert_eq!((name, value), (n, v));
        assert!(!units.is_empty(), "{name} has no units");
        assert_eq!(&format!("{source} [{units}]"), s);
    }
    let eps = rows.iter().find(|r| r.0 == "gemm_eps_max_fp8").unwrap();
    assert_eq!((eps.1, eps.2.as_str()), (0.788, "dimensionless"));
}

#[test]
fn a_chip_without_measured_collectives_gets_the_h100_curve_scaled_by_its_links() {
    use crate::coefficients::builtin_collective;
    // The registry's H100 all-reduce at 8 ranks: floor 15.59 µs, peak
    // 127,156.7 and transition 91,250 bytes/µs, measured at 450 GB/s per
    // direction. A chip with 300 GB/s links keeps the floor and gets 2/3
    // of each rate: 84,771.13 and 60,833.33 bytes/µs.
    let [floor, peak, transition] = builtin_collective("a100", "all_reduce", 8, 300.0);
    assert_eq!(floor.value, 15.59);
    assert!(
        (peak.value - 127_156.7 * 2.0 / 3.0).abs() < 1e-6,
        "{}",
        peak.value
    );
    assert!((transition.value - 91_250.0 * 2.0 / 3.0).abs() < 1e-6);
    assert!(floor.source.contains("assumed"), "{}", floor.source);
    // A chip with its own curves gets them unscaled (H200 all-reduce, 8).
    let [floor, peak, _] = builtin_collective("h200", "all_reduce", 8, 1.0);
    assert_eq!((floor.value, peak.value), (15.98, 131_566.0));
}

#[test]
fn a_scope_may_quote_its_widths() {
    // YAML that quotes a width (`tp: ["1"]`) scopes as the number would.
    let s = llama8b_tp1();
    let base = ms(&s.roofline(&[]).unwrap().step(&decode(1, 1024)));
    let slow = |scope: &str| {
        let sets = [set(
            "user",
            &entry("hbm_derate", 0.4, "dimensionless", scope),
        )];
        ms(&s.roofline(&sets).unwrap().step(&decode(1, 1024)))
    };
    assert!(slow("{tp: [\"1\"]}") > 1.5 * base);
    assert!(slow("{tp: [\" 1 \"]}") > 1.5 * base);
    assert_eq!(slow("{tp: [\"2\"]}"), base);
}

/// A decode step reads every request's KV: Llama-3.1-8B caches 32 layers ×
/// 8 KV heads × 128 × 2 (K and V) × 2 bytes = 131,072 B per token, so 64
/// requests at 8,192 tokens read 68.72 GB, and the weights (8.03 G
/// parameters, 16.06 GB) are read once more: 84.78 GB, 25.3 ms at the H100
/// datasheet's 3.35 TB/s before any derate.
#[test]
fn a_long_context_decode_pays_for_its_kv_reads() {
    let model = llama8b_tp1().roofline(&[]).unwrap();
    let cost = model.step(&decode(64, 8192));
    assert!(ms(&cost) >= 25.3, "{} ms", ms(&cost));
}

/// An MoE decode reads the experts its tokens touch: Mixtral-8x7B at tp 2
/// with 8 decodes, top 2 of 8 experts routed uniformly, touches
/// 8 · (1 − (6/8)^8) = 7.199 experts per layer, each 3 · 4096 · 7168 · 2
/// bytes = 176.2 MB on a rank: 40.59 GB over 32 layers, 12.1 ms at 3.35
/// TB/s, whatever else the step does.
#[test]
fn an_moe_decode_pays_for_the_experts_it_touches() {
    let model = setup("mixtral-8x7b", "h100", "{tp: 2, pp: 1, dp: 1}", "{}", 1)
        .roofline(&[])
        .unwrap();
    let cost = model.step(&decode(8, 512));
    assert!(ms(&cost) >= 12.1, "{} ms", ms(&cost));
}

/// The routed experts' load, worked by hand. Mixtral-8x7B at tp 2 (no
/// expert parallelism): 8 tokens stay on the rank, make 8 · 2 = 16 pairs
/// and touch 8 · (1 − (6/8)^8) = 7.1991 of its 8 experts. DeepSeek-V3 at
/// EP 8 (tp 1): 4 tokens per rank bring 4 · 8 = 32 into each rank, whose
/// 256 / 8 = 32 experts take 32 · 8/8 = 32 pairs and are touched
/// 32 · (1 − (248/256)^32) = 20.4142 times in expectation.
#[test]
fn the_routed_experts_load_follows_the_tokens_into_the_rank() {
    let close = |a: (f64, f64, f64), b: (f64, f64, f64)| {
        (a.0 - b.0).abs() < 1e-9 && (a.1 - b.1).abs() < 1e-9 && (a.2 - b.2).abs() < 1e-4
    };
    let mixtral = setup("mixtral-8x7b", "h100", "{tp: 2, pp: 1, dp: 1}", "{}", 1)
        .roofline(&[])
        .unwrap();
    let load = mixtral.expert_load(8.0).unwrap();
    assert!(close(load, (8.0, 16.0, 7.1991)), "{load:?}");
    let deepseek = deepseek_ep(8, "deepep_low_latency").roofline(&[]).unwrap();
    let load = deepseek.expert_load(4.0).unwrap();
    assert!(close(load, (32.0, 32.0, 20.4142)), "{load:?}");
    assert!(
        llama8b_tp1()
            .roofline(&[])
            .unwrap()
            .expert_load(1.0)
            .is_none()
    );
}

/// Kernel launches the graph mode does not hide are paid on top of the GPU
/// work: the same batch run eager takes longer than replayed as one full
/// graph, by at least the difference in their host launch cost.
#[test]
fn launches_add_to_the_step() {
    let model = llama8b_tp1().roofline(&[]).unwrap();
    let step = |graph| {
        model.step(&Batch {
            graph,
            ..decode(8, 512)
        })
    };
    let (full, eager) = (step(GraphMode::Full), step(GraphMode::Eager));
    assert!(eager.host_ns > full.host_ns, "{full:?} {eager:?}");
    assert!(
        eager.total.as_ns() - full.total.as_ns() >= eager.host_ns - full.host_ns,
        "{full:?} {eager:?}"
    );
}

/// Attention also writes the step's new tokens into the KV cache: two
/// batches alike in everything the GEMMs, the head and the attention reads
/// see (padded tokens, requests, context, pairs) but with 100 more new
/// tokens in the second move 100 tokens' KV more, 32 layers × 4,096 bytes
/// (8 KV heads × 128 × K and V × 2 bytes) each: 13.1 MB, about 4–5 µs at
/// H100's derated bandwidth (3.35 TB/s × 0.8).
#[test]
fn new_tokens_are_written_to_the_kv_cache() {
    let model = llama8b_tp1().roofline(&[]).unwrap();
    let base = Batch {
        num_reqs: 1,
        prefill_reqs: 1,
        decode_reqs: 0,
        prefill_tokens: 100,
        decode_tokens: 0,
        spec_tokens: 0,
        padded_tokens: 200,
        graph: GraphMode::Piecewise,
        attn_context_tokens: 1000,
        attn_pairs: 100_000,
        dbo: false,
    };
    let more = Batch {
        prefill_tokens: 200,
        ..base
    };
    let delta = model.step(&more).memory_ns as f64 - model.step(&base).memory_ns as f64;
    let expected_ns = 32.0 * 4096.0 * 100.0 / (3.35e12 * 0.8) * 1e9;
    assert!(
        (delta - expected_ns).abs() <= 0.05 * expected_ns + 1.0,
        "{delta} ns more memory time, expected {expected_ns:.0}"
    );
}

/// A trip through `pp` stages sends the activations `pp − 1` times. With
/// tp 1 the sends are a step's only communication, and for one decode
/// token each is essentially the link's latency: four stages send three
/// times as often as two.
#[test]
fn pipeline_stages_send_once_between_each_pair() {
    let comm = |pp: u32| {
        setup(
            "llama-3.1-8b",
            "h100",
            &format!("{{tp: 1, pp: {pp}, dp: 1}}"),
            "{}",
            1,
        )
        .roofline(&[])
        .unwrap()
        .step(&decode(1, 16))
        .communication_ns as f64
    };
    let (two, four) = (comm(2), comm(4));
    assert!(two > 0.0);
    assert!(
        (four / two - 3.0).abs() < 0.1,
        "pp 4: {four} ns, pp 2: {two} ns"
    );
    // Each send carries every padded token's activations: an 8192-token
    // prefill sends 8192 × 4096 × 2 B = 64 MiB per stage boundary, several
    // times the link's latency that a one-token decode pays (8.4× here).
    let prefill_comm = setup("llama-3.1-8b", "h100", "{tp: 1, pp: 2, dp: 1}", "{}", 1)
        .roofline(&[])
        .unwrap()
        .step(&prefill(8192))
        .communication_ns as f64;
    assert!(
        prefill_comm > 4.0 * two,
        "prefill {prefill_comm} ns, decode {two} ns"
    );
}

/// Asserts that a one-token decode on `model` lasts at least its memory
/// traffic plus `kernels` HBM floors (`hbm_constant_latency`), the floor
/// every kernel pays on top of its roofline time.
fn assert_pays_kernel_floors(model: &Roofline, kernels: f64) {
    let floor_us = model
        .provenance()
        .into_iter()
        .find(|p| p.0 == "hbm_constant_latency")
        .expect("read")
        .1;
    assert!(floor_us > 0.0);
    let cost = model.step(&decode(1, 16));
    let floors_ns = kernels * floor_us * 1e3;
    assert!(
        cost.total.as_ns() as f64 >= cost.memory_ns as f64 + floors_ns,
        "{cost:?}, floors {floors_ns} ns"
    );
}

/// An MoE layer runs 16 kernels: Mixtral-8x7B's 32 MoE layers and its head
/// make 32 · 16 + 3 = 515 floors.
#[test]
fn an_moe_layer_pays_the_floor_of_each_of_its_kernels() {
    let model = setup("mixtral-8x7b", "h100", "{tp: 2, pp: 1, dp: 1}", "{}", 1)
        .roofline(&[])
        .unwrap();
    assert_pays_kernel_floors(&model, 515.0);
}

/// A dense layer runs 9 kernels (norm, QKV, rotary and cache write,
/// attention, output projection, norm, gate-up, activation, down):
/// Llama-3.1-8B's 32 layers and its head make 32 · 9 + 3 = 291 floors.
#[test]
fn a_dense_layer_pays_the_floor_of_each_of_its_kernels() {
    assert_pays_kernel_floors(&llama8b_tp1().roofline(&[]).unwrap(), 291.0);
}

/// The all-gather families move every token's hidden state, 16-bit, to
/// each of the EP group's ranks, of which each TP group holds one copy:
/// DeepSeek-V3 (hidden 7168) with tp 2 and dp 4 under expert parallelism
/// (ep 8) gathers 7168 · 2 · 8 / 2 = 57,344 bytes per token for dispatch
/// and the same for combine (`all2all_backend: allgather_reducescatter`);
/// with tp 1 and dp 8, 114,688.
#[test]
fn all_gather_expert_bytes_follow_the_group_and_the_tp_width() {
    let bytes = |parallel: &str| {
        setup(
            "deepseek-v3",
            "h200",
            parallel,
            "{all2all_backend: allgather_reducescatter}",
            1,
        )
        .roofline(&[])
        .unwrap()
        .expert_bytes_per_token()
        .expect("expert parallel")
    };
    assert_eq!(
        bytes("{tp: 2, pp: 1, dp: 4, enable_expert_parallel: true}"),
        (57_344.0, 57_344.0)
    );
    assert_eq!(
        bytes("{tp: 1, pp: 1, dp: 8, enable_expert_parallel: true}"),
        (114_688.0, 114_688.0)
    );
}

/// Expert parallelism exchanges tokens twice per MoE layer: DeepSeek-V3
/// has 61 layers, the first 3 dense (`first_k_dense_replace`), so a pass
/// pays 58 dispatches and 58 combines. With tp 1 there is no tensor-parallel
/// collective, so that is all its communication.
#[test]
fn expert_exchanges_are_paid_once_per_moe_layer() {
    let roofline = setup(
        "deepseek-v3",
        "h200",
        "{tp: 1, pp: 1, dp: 8, enable_expert_parallel: true}",
        "{all2all_backend: deepep_low_latency}",
        1,
    )
    .roofline(&[])
    .unwrap();
    for tokens in [1.0, 64.0, 512.0] {
        let (comm, per_layer, moe) = roofline.pass_communication_ns(tokens);
        assert_eq!(moe, 58.0);
        assert!(per_layer > 0.0);
        assert!(
            (comm - 58.0 * per_layer).abs() <= 1e-9 * comm,
            "{tokens} tokens: {comm} ns against 58 × {per_layer}"
        );
    }
}

/// `ns` as it was: `f64::round`, saturating.
fn ns_by_round(value: f64) -> u64 {
    if value.is_nan() || value <= 0.0 {
        0
    } else {
        value.round() as u64
    }
}

#[test]
fn ns_rounds_as_f64_round_at_the_edges() {
    let half_below = 0.5f64.next_down();
    let edges = [
        0.0,
        -0.0,
        -1.5,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MIN_POSITIVE,
        half_below,
        0.5,
        0.5f64.next_up(),
        1.5,
        2.5,
        1.0 + half_below,
        4_503_599_627_370_495.5, // 2^52 − ½: the last halves
        4_503_599_627_370_496.0,
        9_007_199_254_740_991.0,
        9_007_199_254_740_992.0, // 2^53
        9_007_199_254_740_994.0,
        18_446_744_073_709_549_568.0, // the last f64 below 2^64
        18_446_744_073_709_551_616.0, // 2^64: saturates
        1e300,
    ];
    for x in edges {
        assert_eq!(crate::ns(x), ns_by_round(x), "{x:e}");
    }
    // Every half from 0.5 to 1000.5, and its neighbours either side.
    for i in 0..=1000u32 {
        let x = f64::from(i) + 0.5;
        for y in [x.next_down(), x, x.next_up()] {
            assert_eq!(crate::ns(y), ns_by_round(y), "{y:e}");
        }
    }
}

proptest! {
    #[test]
    fn ns_rounds_as_f64_round(bits in any::<u64>(), scaled in 0.0f64..1e12) {
        // Any bit pattern (every sign, exponent and NaN), and the range
        // step prices live in.
        let x = f64::from_bits(bits);
        prop_assert_eq!(crate::ns(x), ns_by_round(x));
        prop_assert_eq!(crate::ns(scaled), ns_by_round(scaled));
    }
}
