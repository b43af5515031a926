//! A fitted linear cost model, for calibrated use.
//!
//! When measured step times exist for a deployment, a handful of linear
//! terms fitted to them predicts steps of that deployment better than any
//! first-principles model, because every effect the roofline approximates
//! (kernel efficiency, launch gaps, scheduler work) is folded into the fit.
//! The form follows the step-time regressions peers fit per model and chip
//! (Vidur's per-operator regressions, inference-sim's removed `blackbox`
//! α/β backend, inference-lab's `alpha·t + beta` correction;
//! `research/peers.md`, `research/inference-sim.md` §1.7):
//!
//! `step = step_us + prefill_token_us · prefill_tokens
//!        + decode_token_us · decode_tokens + kv_read_token_us · attn_context_tokens`
//!
//! All four are in microseconds because the registry's unit list has no
//! nanosecond unit (`pdsim_spec::validate::catalog::UNITS`); a KV-read
//! coefficient is a small number of µs per token (say 0.0004), which an f64
//! carries exactly enough. The model prices real tokens: CUDA-graph padding
//! and dual-batch overlap are whatever the measurements it was fitted on
//! contained. Its coefficients must come from the scenario's sets, selected
//! by scope like every other coefficient; there is no built-in default,
//! since a linear fit is only meaningful for the deployment it was fitted on.

use crate::coefficients::{self, Deployment, Provenance, Resolver};
use crate::{Batch, CostModel, StepCost, ns};
use pdsim_core::SimDuration;
use pdsim_spec::catalog::CoefficientSet;
use pdsim_spec::layout::PoolLayout;
use pdsim_spec::model::Model;
use pdsim_spec::resolve::{EngineConfig, PoolResolution};
use pdsim_spec::validate::scenario::ResolvedScenario;

/// The linear cost model of one pool.
#[derive(Clone, Debug)]
pub struct Linear {
    step_ns: f64,
    prefill_token_ns: f64,
    decode_token_ns: f64,
    kv_read_token_ns: f64,
    admission_per_token_ns: f64,
    tokenizer_batching: Option<crate::TokenizerBatching>,
    api_server: crate::ApiServerCosts,
    provenance: Vec<Provenance>,
}

/// (name, units) of the four fitted terms.
pub const LINEAR_COEFFICIENTS: [(&str, &str); 4] = [
    ("linear_step_us", "us_per_step"),
    ("linear_prefill_token_us", "us_per_token"),
    ("linear_decode_token_us", "us_per_token"),
    ("linear_kv_read_token_us", "us_per_token"),
];

impl Linear {
    /// Reads the four terms from `coefficient_sets` (scope-selected for this
    /// pool); fails naming the first one no applicable entry provides. The
    /// admission delay and the API server's costs use the host coefficients
    /// (`host_admission_per_token`, `host_api_request`, `host_output_token`,
    /// `host_completion`) as the roofline does.
    pub fn new(
        model: &Model,
        chip_name: &str,
        chip_gpus_per_node: Option<i64>,
        layout: &PoolLayout,
        engine: &EngineConfig,
        coefficient_sets: &[CoefficientSet],
    ) -> Result<Linear, String> {
        let deployment = Deployment::of(chip_name, &model.name, layout, chip_gpus_per_node);
        let chip_key = deployment.hardware.clone();
        let mut r = Resolver::new(deployment, coefficient_sets)?;
        let mut terms = [0.0; 4];
        for (slot, (name, units)) in terms.iter_mut().zip(LINEAR_COEFFICIENTS) {
            *slot = r.value(name, units, None, 0.0, 1e9)?;
        }
        let mut get = |name: &str, units: &str, hi: f64| {
            r.value(name, units, coefficients::builtin(name, &chip_key), 0.0, hi)
        };
        let admission_us = get("host_admission_per_token", "us_per_token", 1e7)?;
        let rust_ratio = get("frontend_rust_admission_ratio", "dimensionless", 1.0)?;
        let batch_wait_us = get("host_tokenizer_batch_wait", "us_per_batch", 1e9)?;
        let batch_max = get("host_tokenizer_batch_max", "requests", 1e6)?;
        let api_request_us = get("host_api_request", "us_per_request", 1e9)?;
        let output_us = get("host_output_token", "us_per_token", 1e7)?;
        let completion_us = get("host_completion", "us_per_request", 1e9)?;
        let mut linear = Linear::from_us(terms[0], terms[1], terms[2], terms[3]);
        linear.admission_per_token_ns = if engine.frontend == "rust" {
            admission_us * rust_ratio * 1e3
        } else {
            admission_us * 1e3
        };
        linear.tokenizer_batching = crate::tokenizer_batching(engine, batch_wait_us, batch_max);
        linear.api_server = crate::ApiServerCosts::new(
            engine,
            api_request_us,
            output_us,
            completion_us,
            rust_ratio,
        );
        linear.provenance = r.into_provenance();
        Ok(linear)
    }

    /// Whether the scenario's sets choose the linear model for this pool:
    /// `true` when an entry applying to the pool (by scope, as every
    /// coefficient is chosen) gives each of the four terms, `false` when
    /// none does. Some but not all is an error naming the missing terms: a
    /// half-fitted model is neither the fit nor the roofline.
    pub fn selected(
        model: &Model,
        chip_name: &str,
        chip_gpus_per_node: Option<i64>,
        layout: &PoolLayout,
        coefficient_sets: &[CoefficientSet],
    ) -> Result<bool, String> {
        let deployment = Deployment::of(chip_name, &model.name, layout, chip_gpus_per_node);
        let r = Resolver::new(deployment, coefficient_sets)?;
        let (given, missing): (Vec<&str>, Vec<&str>) = LINEAR_COEFFICIENTS
            .iter()
            .map(|(name, _)| *name)
            .partition(|name| r.has_entry(name));
        match (given.is_empty(), missing.is_empty()) {
            (true, _) => Ok(false),
            (false, true) => Ok(true),
            (false, false) => Err(format!(
                "the coefficient sets give the linear cost model's {} for this pool but not {}: \
                 the linear model needs all four terms (or none, for the roofline)",
                given.join(", "),
                missing.join(", ")
            )),
        }
    }

    /// Builds the linear model of one resolved pool of a resolved scenario.
    pub fn for_pool(scenario: &ResolvedScenario, pool: &PoolResolution) -> Result<Linear, String> {
        let sets: Vec<CoefficientSet> = scenario
            .coefficients
            .iter()
            .map(|e| e.value.clone())
            .collect();
        Linear::new(
            &scenario.model.value,
            &scenario.chip.origin.name,
            scenario.chip.value.gpus_per_node,
            &pool.layout,
            &pool.engine,
            &sets,
        )
    }

    /// A linear model from its four terms in microseconds, with no
    /// admission delay.
    pub fn from_us(
        step_us: f64,
        prefill_token_us: f64,
        decode_token_us: f64,
        kv_read_token_us: f64,
    ) -> Linear {
        Linear {
            step_ns: step_us * 1e3,
            prefill_token_ns: prefill_token_us * 1e3,
            decode_token_ns: decode_token_us * 1e3,
            kv_read_token_ns: kv_read_token_us * 1e3,
            admission_per_token_ns: 0.0,
            tokenizer_batching: None,
            api_server: crate::ApiServerCosts::default(),
            provenance: Vec::new(),
        }
    }

    /// Every coefficient the model read: (name, value in its units, source).
    pub fn provenance(&self) -> Vec<(String, f64, String)> {
        self.provenance.iter().map(Provenance::row).collect()
    }
}

impl CostModel for Linear {
    /// The fitted sum. The breakdown puts the token terms under compute,
    /// the KV term under memory and the per-step term under host; nothing
    /// is attributed to communication or padding.
    fn step(&self, batch: &Batch) -> StepCost {
        let tokens_ns = self.prefill_token_ns * batch.prefill_tokens as f64
            + self.decode_token_ns * batch.decode_tokens as f64;
        let kv_ns = self.kv_read_token_ns * batch.attn_context_tokens as f64;
        StepCost {
            total: SimDuration::from_ns(ns(self.step_ns + tokens_ns + kv_ns)),
            compute_ns: ns(tokens_ns),
            memory_ns: ns(kv_ns),
            communication_ns: 0,
            host_ns: ns(self.step_ns),
            padding_ns: 0,
        }
    }

    fn admission_delay(&self, prompt_tokens: u32) -> SimDuration {
        SimDuration::from_ns(ns(self.admission_per_token_ns * prompt_tokens as f64))
    }

    fn tokenizer_batching(&self) -> Option<crate::TokenizerBatching> {
        self.tokenizer_batching
    }

    fn api_server(&self) -> crate::ApiServerCosts {
        self.api_server
    }
}
