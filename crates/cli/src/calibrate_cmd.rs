//! `pdsim calibrate --out DIR RUN_DIR...`: fit a few of the roofline's named
//! coefficients to measured runs and write them as BLIS-compatible
//! CoefficientSet files a scenario can name.
//!
//! A run folder has the inference-sim training layout: `exp-config.yaml`
//! (model, tensor parallelism, scheduler limits), `results/config.yaml` (the
//! inference-perf configuration, replayed as its workload) and
//! `results/summary_lifecycle_metrics.json` (what inference-perf measured).
//! Each run is simulated in this process with the scenario and deployment
//! pair of its model and tensor parallelism (the bundled
//! `scenarios/real-runs/` documents, as `tools/accuracy/run` picks them, or
//! `--scenario`/`--deployment`), with the run's own limits written into the
//! deployment.
//!
//! Runs sharing a scope — (model, hardware, tp), the dimensions a
//! coefficient's `scope` is matched on — are fitted together: one set per
//! scope, `calibrated-<model>-<hardware>-tp<tp>`, in
//! `DIR/coefficients/<set>.yaml`. The fit is a compass search on log scale
//! from the values the pair resolves today, within bounds that say why they
//! are physically plausible, with a fixed budget, minimising the mean
//! absolute relative error of TTFT mean, E2E mean and the per-token TPOT.
//! Every candidate is simulated exactly as `pdsim run --catalog DIR` with a
//! scenario naming the set would run it (the set is served from memory at
//! the path it is later written to), so the figures printed "after" are the
//! figures such a run gives.
//!
//! Deterministic: the search has no randomness, candidates are rounded to
//! four significant digits before they are simulated (so the file holds
//! exactly what was simulated), and parallel evaluations are collected in
//! order, so the files do not depend on `--jobs`.

use crate::session::{
    Failure, How, Overlay, Staging, WorkloadChoice, failure, load_all, prepare_in, results_readme,
    scaled, simulate,
};
use pdsim_spec::catalog::{Coefficient, CoefficientSet};
use pdsim_spec::files::{FileKind, Files, ReadError};
use pdsim_workload::RequestSpec;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The output folder: DIR/coefficients/<set>.yaml per scope, DIR/calibration.json
    /// (every run's figures before and after) and DIR/README.md. An existing folder is
    /// replaced only when it is an earlier pdsim result.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// Measured run folders (exp-config.yaml, results/config.yaml,
    /// results/summary_lifecycle_metrics.json).
    #[arg(value_name = "RUN_DIR", required = true)]
    runs: Vec<PathBuf>,
    /// The Scenario for every run (default: the bundled real-runs scenario of the run's
    /// model and tensor parallelism). Give it with --deployment.
    #[arg(long, value_name = "FILE", requires = "deployment")]
    scenario: Option<PathBuf>,
    /// The Deployment for every run (default: the bundled real-runs deployment); the
    /// run's exp-config.yaml limits are written into each pool's engine.
    #[arg(long, value_name = "FILE", requires = "scenario")]
    deployment: Option<PathBuf>,
    /// A user catalog folder, searched after the built-in catalog. Repeatable.
    #[arg(long, value_name = "DIR")]
    catalog: Vec<PathBuf>,
    /// The coefficients to fit, comma-separated (default: host_api_request, hbm_derate,
    /// gemm_eps_max_bf16, host_replay_graph_per_step).
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    fit: Vec<String>,
    /// Search iterations (each evaluates two candidates per coefficient on every run).
    #[arg(long, default_value_t = 10, value_name = "N", allow_negative_numbers = true, value_parser = crate::flags::whole::<u32>)]
    iterations: u32,
    /// Also fit runs that are overloaded (client failures, or mean TTFT above 1 s):
    /// their latencies measure a growing queue, so by default they are only reported.
    #[arg(long)]
    fit_overloaded: bool,
    /// Simulations run at once (default: the cores). Results do not depend on it.
    #[arg(long, short = 'j', value_name = "N", allow_negative_numbers = true, value_parser = crate::flags::whole::<usize>)]
    jobs: Option<usize>,
}

/// The most search iterations `--iterations` accepts.
const MAX_ITERATIONS: u32 = 200;

/// A run is overloaded when its client saw failures or its mean TTFT is
/// above this (the rule `tools/accuracy/run` uses).
const OVERLOAD_TTFT_MS: f64 = 1000.0;

/// One coefficient the search may move: its units as the roofline reads
/// them, its plausible range and why, and the first step of the search.
struct Knob {
    name: &'static str,
    units: &'static str,
    lo: f64,
    hi: f64,
    /// The first step, as a factor (the search moves on log scale).
    step_factor: f64,
    bounds_why: &'static str,
}

const KNOBS: &[Knob] = &[
    Knob {
        name: "host_admission_per_token",
        units: "us_per_token",
        lo: 0.05,
        hi: 2.0,
        step_factor: 2.0,
        bounds_why: "Hugging Face tokenizers, the Rust library vLLM's frontend tokenizes with, \
            tokenize a GB of text in under 20 s on a server CPU (tokenizers README), about 0.1 us \
            per token; 2 us per token allows twenty times that for rendering, Python and one \
            thread. A free fit of the TTFT gap reaches 18-46 us per token (issue 12), which is \
            a missing mechanism, not admission, so the range stops here",
    },
    Knob {
        name: "hbm_derate",
        units: "dimensionless",
        lo: 0.5,
        hi: 1.0,
        step_factor: 1.15,
        bounds_why: "the share of the datasheet HBM bandwidth reached: 1 is the datasheet figure \
            itself; NVIDIA's AISimulate descriptors use 0.8 (BLIS cost-model-primitives); 0.5 is \
            a search bound",
    },
    Knob {
        name: "gemm_eps_max_bf16",
        units: "dimensionless",
        lo: 0.75,
        hi: 1.0,
        step_factor: 1.1,
        bounds_why: "the share of the BF16 tensor-core peak a large GEMM reaches: at most 1 by \
            definition; the BLIS registry measured 0.903 on H100 (cost-model-primitives). Below \
            0.75 (83% of that measurement) a fit is using GEMM efficiency to stand in for the \
            missing first-token stage of issue 12: leave-one-out fits that reached 0.52-0.59 \
            slowed every prefill enough to saturate the 20 req/s stages of the runs left out \
            (Llama-2-70B general: 6.8 s mean TTFT against 103 ms measured)",
    },
    Knob {
        name: "gemm_eps_max_fp8",
        units: "dimensionless",
        lo: 0.65,
        hi: 1.0,
        step_factor: 1.1,
        bounds_why: "the share of the FP8 tensor-core peak a large GEMM reaches: at most 1 by \
            definition; the BLIS registry measured 0.784 on H100 (cost-model-primitives); 0.65 \
            is 83% of it, the same margin as for BF16",
    },
    Knob {
        name: "host_replay_graph_per_step",
        units: "us_per_step",
        lo: 1.0,
        hi: 300.0,
        step_factor: 3.0,
        bounds_why: "the host time of a step that no GPU work hides: 7 us is the BLIS registry's \
            graph replay (assumed there); vLLM's model runner also prepares inputs and samples \
            every step, which pdsim does not price by name, and inference-sim's trained per-step \
            term, fitted on H100 with vLLM 0.15.1, is about 126 us (research/inference-sim.md \
            section 1.7); 300 us allows between two and three times that. A fit that wants more \
            is closing the TTFT gap with a per-step cost, which also slows every decode step, \
            so the range stops here",
    },
    Knob {
        name: "host_api_request",
        units: "us_per_request",
        lo: 100.0,
        hi: 10_000.0,
        step_factor: 2.0,
        bounds_why: "the API server's own work to take one request in on its event loop (HTTP \
            request, CompletionRequest validation, create_completion, the input processor and \
            the hand-off to the engine core) plus the client's connection: below 100 us not \
            even an empty FastAPI request is served; 10 ms is a search bound. The pieces have \
            no published per-request cost, so this is the one stage of the first token's path \
            that only a measurement prices",
    },
    Knob {
        name: "host_output_token",
        units: "us_per_token",
        lo: 5.0,
        hi: 200.0,
        step_factor: 1.5,
        bounds_why: "the API server's work per streamed token (detokenizing it, one SSE chunk): \
            the BLIS registry holds 45.9 us (inference-sim trained-physics alpha2); 5 and 200 \
            us are search bounds around it",
    },
    Knob {
        name: "host_completion",
        units: "us_per_request",
        lo: 10.0,
        hi: 5_000.0,
        step_factor: 2.0,
        bounds_why: "the API server's work to end a finished stream: the BLIS registry holds \
            777.3 us (inference-sim trained-physics alpha1); 10 us and 5 ms are search bounds",
    },
    Knob {
        name: "hbm_constant_latency",
        units: "us_per_transfer",
        lo: 0.5,
        hi: 10.0,
        step_factor: 1.5,
        bounds_why: "the fixed floor of a kernel's memory access: NVIDIA's AISimulate \
            descriptors use 3 us; 0.5 and 10 us are search bounds around it",
    },
];

const DEFAULT_FIT: &[&str] = &[
    "host_api_request",
    "hbm_derate",
    "gemm_eps_max_bf16",
    "host_replay_graph_per_step",
];

/// The bundled scenario and deployment of each (exp-config `model`,
/// `tensor_parallelism`), as `scenarios/real-runs/README.md` lists them and
/// `tools/accuracy/run` picks them.
const PAIRS: &[(&str, u64, &str, &str, &str, &str)] = &[
    (
        "meta-llama/Llama-2-7b-hf",
        1,
        "builtin:scenarios/real-runs/llama-2-7b-tp1-h100.yaml",
        include_str!("../../../scenarios/real-runs/llama-2-7b-tp1-h100.yaml"),
        "builtin:deployments/real-runs/llama-2-7b-tp1.yaml",
        include_str!("../../../deployments/real-runs/llama-2-7b-tp1.yaml"),
    ),
    (
        "meta-llama/Llama-2-70b-hf",
        4,
        "builtin:scenarios/real-runs/llama-2-70b-tp4-h100.yaml",
        include_str!("../../../scenarios/real-runs/llama-2-70b-tp4-h100.yaml"),
        "builtin:deployments/real-runs/llama-2-70b-tp4.yaml",
        include_str!("../../../deployments/real-runs/llama-2-70b-tp4.yaml"),
    ),
    (
        "mistralai/Mixtral-8x7B-v0.1",
        2,
        "builtin:scenarios/real-runs/mixtral-8x7b-tp2-h100.yaml",
        include_str!("../../../scenarios/real-runs/mixtral-8x7b-tp2-h100.yaml"),
        "builtin:deployments/real-runs/mixtral-8x7b-tp2.yaml",
        include_str!("../../../deployments/real-runs/mixtral-8x7b-tp2.yaml"),
    ),
    (
        "codellama/CodeLlama-34b-Instruct-hf",
        2,
        "builtin:scenarios/real-runs/codellama-34b-instruct-tp2-h100.yaml",
        include_str!("../../../scenarios/real-runs/codellama-34b-instruct-tp2-h100.yaml"),
        "builtin:deployments/real-runs/codellama-34b-instruct-tp2.yaml",
        include_str!("../../../deployments/real-runs/codellama-34b-instruct-tp2.yaml"),
    ),
];

/// exp-config.yaml keys written into the deployment's engine.
const LIMIT_KEYS: &[&str] = &["max_model_len", "max_num_batched_tokens", "max_num_seqs"];

/// Where candidate sets are served from while the search runs: a folder
/// name no run reads from disk (only the one file is intercepted).
const CANDIDATE_DIR: &str = "calibrate:candidate";

/// The overlay plus one candidate set file.
struct WithSet<'a> {
    base: &'a Overlay,
    path: PathBuf,
    text: String,
}

impl Files for WithSet<'_> {
    fn kind(&self, path: &Path) -> FileKind {
        if path == self.path {
            FileKind::File
        } else {
            self.base.kind(path)
        }
    }
    fn read(&self, path: &Path) -> Result<String, ReadError> {
        if path == self.path {
            Ok(self.text.clone())
        } else {
            self.base.read(path)
        }
    }
    fn list(&self, path: &Path) -> Vec<String> {
        self.base.list(path)
    }
}

/// The figures compared, in ms; `None` where a side has none.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
struct Figures {
    completed: u64,
    failed: u64,
    ttft_mean_ms: Option<f64>,
    ttft_p90_ms: Option<f64>,
    e2e_mean_ms: Option<f64>,
    e2e_p90_ms: Option<f64>,
    /// Per token: measured as (E2E mean − TTFT mean) / (output tokens − 1),
    /// since inference-perf's own TPOT counts streamed chunks; pdsim's
    /// `tpot_ms` mean.
    tpot_ms: Option<f64>,
}

/// The metrics the objective averages, and those only reported.
const FITTED_METRICS: &[&str] = &["ttft_mean", "e2e_mean", "tpot"];
const REPORTED_METRICS: &[(&str, &str)] = &[
    ("ttft_mean", "TTFT mean"),
    ("ttft_p90", "TTFT p90"),
    ("e2e_mean", "E2E mean"),
    ("e2e_p90", "E2E p90"),
    ("tpot", "TPOT (per token)"),
];

impl Figures {
    fn get(&self, metric: &str) -> Option<f64> {
        match metric {
            "ttft_mean" => self.ttft_mean_ms,
            "ttft_p90" => self.ttft_p90_ms,
            "e2e_mean" => self.e2e_mean_ms,
            "e2e_p90" => self.e2e_p90_ms,
            "tpot" => self.tpot_ms,
            _ => None,
        }
    }
}

/// Signed relative error of `pred` against `meas`.
fn rel_error(pred: Option<f64>, meas: Option<f64>) -> Option<f64> {
    match (pred, meas) {
        (Some(p), Some(m)) if m != 0.0 && m.is_finite() && p.is_finite() => Some((p - m) / m),
        _ => None,
    }
}

/// A metric pdsim cannot produce (no request completed) counts as this
/// relative error, so the search moves away from it.
const MISSING_ERROR: f64 = 10.0;

/// One measured run, read and ready to simulate.
struct Run {
    dir: PathBuf,
    name: String,
    model: String,
    hardware: String,
    tp: u64,
    /// The scenario as given (no calibrated set) and the deployment with
    /// the run's limits, as overlay paths.
    scenario: PathBuf,
    deployment: PathBuf,
    /// The scenario naming the scope's set, beside the scenario.
    calibrated_scenario: PathBuf,
    specs: Vec<RequestSpec>,
    class_names: Vec<String>,
    trace_label: String,
    measured: Figures,
    overloaded: bool,
    /// What the pair resolves today for every coefficient the roofline
    /// reads: name → (value, units, source).
    resolved: BTreeMap<String, (f64, String, String)>,
    inputs: Vec<PathBuf>,
}

/// A scope: the runs fitted together.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Scope {
    model: String,
    hardware: String,
    tp: u64,
}

impl Scope {
    fn set_name(&self) -> String {
        format!(
            "calibrated-{}-{}-tp{}",
            name_part(&self.model),
            name_part(&self.hardware),
            self.tp
        )
    }
}

/// A catalog name made safe as a file name part: lower case, letters,
/// digits, `.` and `-`.
fn name_part(name: &str) -> String {
    name.to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect()
}

fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    crate::session::print_failure("calibrate", &message.to_string());
    ExitCode::from(code)
}

pub fn run(args: &Args) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => fail(f.code, f.message),
    }
}

/// Rounds to four significant digits: candidates are simulated at the
/// value the file will hold.
fn round4(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let digits = 3 - v.abs().log10().floor() as i32;
    let scale = 10f64.powi(digits);
    (v * scale).round() / scale
}

fn knob(name: &str) -> Option<&'static Knob> {
    KNOBS.iter().find(|k| k.name == name)
}

fn run_inner(args: &Args) -> Result<(), Failure> {
    if args.iterations == 0 || args.iterations > MAX_ITERATIONS {
        return Err(failure(
            2,
            format!(
                "--iterations {}: must lie between 1 and {MAX_ITERATIONS}",
                args.iterations
            ),
        ));
    }
    let names: Vec<String> = if args.fit.is_empty() {
        DEFAULT_FIT.iter().map(|s| s.to_string()).collect()
    } else {
        args.fit.iter().map(|s| s.trim().to_string()).collect()
    };
    let mut knobs: Vec<&'static Knob> = Vec::new();
    for n in &names {
        let Some(k) = knob(n) else {
            return Err(failure(
                2,
                format!(
                    "--fit {n}: pdsim calibrate fits only {}",
                    KNOBS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
                ),
            ));
        };
        if knobs.iter().any(|x| x.name == k.name) {
            return Err(failure(2, format!("--fit {n}: named twice")));
        }
        knobs.push(k);
    }
    crate::flags::catalogs(&args.catalog)?;
    // What the flags name, which the fitted sets may not replace (a folder
    // calibrate wrote is a catalog, and may be given as --catalog to fit
    // again); what the run folders hold is kept apart as it is read.
    let mut named = args.runs.clone();
    named.extend(args.scenario.clone());
    named.extend(args.deployment.clone());
    named.extend(args.catalog.iter().cloned());
    crate::output::check_out_for(&args.out, &named)?;
    let threads = crate::flags::jobs("calibrate", args.jobs)?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| failure(2, format!("cannot start worker threads: {e}")))?;

    let candidate_dir = PathBuf::from(CANDIDATE_DIR);
    let mut catalogs = args.catalog.clone();
    catalogs.push(candidate_dir.clone());

    // Read every run, and its documents into the overlay.
    let mut overlay = Overlay::default();
    let mut runs: Vec<Run> = Vec::new();
    for dir in &args.runs {
        let run = read_run(args, dir, &mut overlay, &catalogs)?;
        if runs.iter().any(|r| r.dir == run.dir) {
            return Err(failure(2, format!("{}: given twice", dir.display())));
        }
        runs.push(run);
    }

    // Group by scope, in the order scopes first appear sorted by scope.
    let mut scopes: BTreeMap<Scope, Vec<usize>> = BTreeMap::new();
    for (i, r) in runs.iter().enumerate() {
        scopes
            .entry(Scope {
                model: r.model.clone(),
                hardware: r.hardware.clone(),
                tp: r.tp,
            })
            .or_default()
            .push(i);
    }

    let staging = Staging::new(&args.out, "calibrate", &named)?;
    let mut report_runs: BTreeMap<String, RunReport> = BTreeMap::new();
    let mut report_sets: Vec<SetReport> = Vec::new();
    let mut printed = String::new();
    for (scope, members) in &scopes {
        let set_name = scope.set_name();
        let set_path = candidate_dir
            .join("coefficients")
            .join(format!("{set_name}.yaml"));
        // The scenario naming the set, per run.
        for &i in members {
            let text = overlay
                .read(&runs[i].scenario)
                .map_err(|e| failure(2, format!("{}: {e}", runs[i].scenario.display())))?;
            let named = scenario_naming(&text, &set_name)
                .map_err(|e| failure(1, format!("{}: {e}", runs[i].scenario.display())))?;
            overlay
                .docs
                .insert(runs[i].calibrated_scenario.clone(), named);
        }
        // The knobs the pair reads, with their start values (the first
        // run's; runs of one scope resolve the same values).
        let first = &runs[members[0]];
        let mut fitted: Vec<(&'static Knob, f64, String)> = Vec::new();
        let mut not_read: Vec<&str> = Vec::new();
        for k in &knobs {
            match first.resolved.get(k.name) {
                Some((value, units, source)) if units == k.units => {
                    fitted.push((k, round4(value.clamp(k.lo, k.hi)), source.clone()));
                }
                _ => not_read.push(k.name),
            }
        }
        for n in &not_read {
            printed.push_str(&format!(
                "{set_name}: {n} is not read by the cost model of this deployment, so it cannot change its runs; not fitted\n"
            ));
        }
        let fit_runs: Vec<usize> = members
            .iter()
            .copied()
            .filter(|&i| args.fit_overloaded || !runs[i].overloaded)
            .collect();

        // Before: the pair as it is.
        let before: Vec<Figures> = pool.install(|| {
            members
                .par_iter()
                .map(|&i| evaluate(&runs[i], &overlay, &args.catalog, None))
                .collect::<Result<Vec<_>, _>>()
        })?;

        let mut search = Search {
            runs: &runs,
            overlay: &overlay,
            catalogs: &catalogs,
            set_path: &set_path,
            set_name: &set_name,
            scope,
            fit_runs: &fit_runs,
            pool: &pool,
            evaluations: 0,
        };
        if fit_runs.is_empty() || fitted.is_empty() {
            let why = if fitted.is_empty() {
                "none of the coefficients to fit is read by this deployment's cost model"
            } else {
                "every run of this scope is overloaded (see --fit-overloaded)"
            };
            printed.push_str(&format!("{set_name}: not written: {why}\n"));
            for (j, &i) in members.iter().enumerate() {
                report_runs.insert(
                    runs[i].name.clone(),
                    RunReport::new(&runs[i], &set_name, false, &before[j], None),
                );
            }
            continue;
        }
        let start: Vec<f64> = fitted.iter().map(|f| f.1).collect();
        let ks: Vec<&'static Knob> = fitted.iter().map(|f| f.0).collect();
        let (best, best_objective, start_objective) = search.run(&ks, &start, args.iterations)?;
        // After: every run of the scope at the fitted values.
        let after: Vec<Figures> = pool.install(|| {
            members
                .par_iter()
                .map(|&i| {
                    evaluate(
                        &runs[i],
                        &overlay,
                        &catalogs,
                        Some((&set_path, set_text(scope, &set_name, &ks, &best, None))),
                    )
                })
                .collect::<Result<Vec<_>, _>>()
        })?;
        let fit_names: Vec<String> = fit_runs.iter().map(|&i| runs[i].name.clone()).collect();
        let notes = SetNotes {
            runs: fit_names.clone(),
            before: start_objective,
            after: best_objective,
            evaluations: search.evaluations,
            iterations: args.iterations,
            starts: fitted
                .iter()
                .map(|(k, v, s)| (k.name.to_string(), (*v, s.clone())))
                .collect(),
        };
        let text = set_text(scope, &set_name, &ks, &best, Some(&notes));
        staging.write(&format!("coefficients/{set_name}.yaml"), &text)?;
        let mut at_bound = Vec::new();
        for (k, v) in ks.iter().zip(&best) {
            if *v >= round4(k.hi) || *v <= round4(k.lo) {
                at_bound.push(format!("{} = {v} {}", k.name, k.units));
            }
        }
        report_sets.push(SetReport {
            name: set_name.clone(),
            file: format!("coefficients/{set_name}.yaml"),
            scope: format!(
                "model {}, hardware {}, tp {}",
                scope.model, scope.hardware, scope.tp
            ),
            fitted_on: fit_names,
            objective_before: start_objective,
            objective_after: best_objective,
            evaluations: search.evaluations,
            values: ks
                .iter()
                .zip(&best)
                .map(|(k, v)| (k.name.to_string(), *v))
                .collect(),
            at_bound: at_bound.clone(),
        });
        printed.push_str(&format!(
            "{set_name}: fitted on {} run(s), {} evaluations; objective (mean |error| of TTFT mean, E2E mean, TPOT) {:.2}% -> {:.2}%\n",
            fit_runs.len(),
            search.evaluations,
            start_objective * 100.0,
            best_objective * 100.0
        ));
        for (k, v) in ks.iter().zip(&best) {
            let was = fitted
                .iter()
                .find(|f| f.0.name == k.name)
                .map_or(0.0, |f| f.1);
            printed.push_str(&format!(
                "  {} = {v} {} (was {was}; bounds [{}, {}])\n",
                k.name, k.units, k.lo, k.hi
            ));
        }
        for b in &at_bound {
            printed.push_str(&format!(
                "  warning: {b} sits at its bound: the runs ask for more than the plausible range, so a mechanism is missing rather than this coefficient wrong\n"
            ));
        }
        for (j, &i) in members.iter().enumerate() {
            report_runs.insert(
                runs[i].name.clone(),
                RunReport::new(
                    &runs[i],
                    &set_name,
                    fit_runs.contains(&i),
                    &before[j],
                    Some(&after[j]),
                ),
            );
        }
    }

    // Per-run table.
    for r in &runs {
        let Some(rep) = report_runs.get(&r.name) else {
            continue;
        };
        printed.push_str(&format!(
            "\n{} ({}; {})\n",
            r.name,
            rep.set,
            if rep.fitted {
                "fitted".to_string()
            } else if r.overloaded {
                "overloaded, not fitted".to_string()
            } else {
                "not fitted".to_string()
            }
        ));
        printed.push_str(&format!(
            "  {:<18} {:>12} {:>22} {:>22}\n",
            "metric", "measured ms", "before ms (error)", "after ms (error)"
        ));
        for (key, label) in REPORTED_METRICS {
            let m = rep.measured.get(key);
            let b = rep.before.get(key);
            let a = rep.after.as_ref().and_then(|f| f.get(key));
            let cell = |v: Option<f64>| match v {
                Some(v) => format!("{v:.2} ({})", pct(rel_error(Some(v), m))),
                None => "n/a".to_string(),
            };
            printed.push_str(&format!(
                "  {:<18} {:>12} {:>22} {:>22}\n",
                label,
                m.map_or("n/a".to_string(), |v| format!("{v:.2}")),
                cell(b),
                if rep.after.is_some() {
                    cell(a)
                } else {
                    "not fitted".to_string()
                }
            ));
        }
    }

    let json = serde_json::to_string_pretty(&CalibrationReport {
        pdsim_version: env!("CARGO_PKG_VERSION"),
        fitted_metrics: FITTED_METRICS,
        sets: report_sets,
        runs: runs
            .iter()
            .filter_map(|r| report_runs.remove(&r.name))
            .collect(),
    })
    .map_err(|e| failure(2, format!("cannot encode calibration.json: {e}")))?
        + "\n";
    staging.write("calibration.json", &json)?;
    let mut inputs = Vec::new();
    for r in &runs {
        inputs.extend(r.inputs.iter().cloned());
    }
    let mut readme = results_readme(
        "pdsim calibrate: coefficients fitted to measured runs",
        "0",
        &inputs,
        &CALIBRATE_FILES,
    );
    readme.push_str(USAGE);
    staging.write("README.md", readme)?;
    let out = staging.commit()?;
    printed.push_str(&format!("\nresults: {}\n", out.display()));
    let _ = std::io::stdout().lock().write_all(printed.as_bytes());
    Ok(())
}

fn pct(e: Option<f64>) -> String {
    e.map_or("n/a".to_string(), |e| format!("{:+.1}%", e * 100.0))
}

const CALIBRATE_FILES: [(&str, &str); 3] = [
    (
        "coefficients/",
        "one CoefficientSet per (model, hardware, tp) scope, `calibrated-<model>-<hardware>-tp<tp>.yaml`",
    ),
    (
        "calibration.json",
        "every run's measured figures and pdsim's before and after the fit, the search's objective and values",
    ),
    ("README.md", "this file"),
];

const USAGE: &str = "
## Using the sets

This folder is a catalog folder. A scenario uses a set by naming it last in
its `coefficients` list (the last applicable entry of the last set wins), and
`pdsim run` finds it with `--catalog` pointing here:

```yaml
coefficients:
  - cost-model-host-overheads
  - calibrated-llama-2-7b-h100-tp1
```

```
pdsim run --catalog THIS_FOLDER --scenario SCENARIO --deployment DEPLOYMENT --trace RUN/results/config.yaml
```

Each entry is scoped to its model, hardware and tp, so naming a set in a
scenario of another scope changes nothing. `calibration.json` lists the
figures such a run gives for every calibrated run.
";

/// The scenario text with `set` appended to its `coefficients` list.
fn scenario_naming(text: &str, set: &str) -> Result<String, String> {
    let mut doc: serde_yaml::Value = pdsim_spec::load::from_str(text)?;
    let Some(list) = doc
        .get_mut("coefficients")
        .and_then(|c| c.as_sequence_mut())
    else {
        return Err("`coefficients` is not a list".to_string());
    };
    list.retain(|v| v.as_str() != Some(set));
    list.push(serde_yaml::Value::from(set));
    serde_yaml::to_string(&doc).map_err(|e| e.to_string())
}

/// A flat `key: value` exp-config.yaml.
fn read_exp_config(path: &Path) -> Result<BTreeMap<String, serde_yaml::Value>, Failure> {
    let text = crate::disk::DiskFiles
        .read(path)
        .map_err(|e| failure(2, format!("{}: {e}", path.display())))?;
    let map: BTreeMap<String, serde_yaml::Value> = pdsim_spec::load::from_str(&text)
        .map_err(|e| failure(1, format!("{}: {e}", path.display())))?;
    Ok(map)
}

/// Reads one run folder and puts its documents in the overlay.
fn read_run(
    args: &Args,
    dir: &Path,
    overlay: &mut Overlay,
    catalogs: &[PathBuf],
) -> Result<Run, Failure> {
    if !dir.is_dir() {
        return Err(failure(2, format!("{}: not a run folder", dir.display())));
    }
    let name = dir
        .components()
        .next_back()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string());
    let exp_path = dir.join("exp-config.yaml");
    let config_path = dir.join("results").join("config.yaml");
    let metrics_path = dir.join("results").join("summary_lifecycle_metrics.json");
    for p in [&exp_path, &config_path, &metrics_path] {
        if !p.is_file() {
            return Err(failure(2, format!("{}: no such file", p.display())));
        }
    }
    let exp = read_exp_config(&exp_path)?;
    for key in exp.keys() {
        if key != "model"
            && key != "tensor_parallelism"
            && key != "app"
            && !LIMIT_KEYS.contains(&key.as_str())
        {
            return Err(failure(
                1,
                format!(
                    "{}: key `{key}`: pdsim calibrate does not apply it to the deployment, so the run would be simulated without it; known keys are model, tensor_parallelism, app, {}",
                    exp_path.display(),
                    LIMIT_KEYS.join(", ")
                ),
            ));
        }
    }
    if let Some(app) = exp.get("app")
        && app.as_str() != Some("inference-perf")
    {
        return Err(failure(
            1,
            format!(
                "{}: key `app`: only inference-perf runs are read",
                exp_path.display()
            ),
        ));
    }
    let model = exp
        .get("model")
        .and_then(|v| v.as_str())
        .ok_or_else(|| failure(1, format!("{}: key `model` is missing", exp_path.display())))?
        .to_string();
    let tp = exp
        .get("tensor_parallelism")
        .and_then(|v| v.as_u64())
        .filter(|t| *t >= 1)
        .ok_or_else(|| {
            failure(
                1,
                format!(
                    "{}: key `tensor_parallelism` is missing or not a positive integer",
                    exp_path.display()
                ),
            )
        })?;

    // The pair.
    let (scenario, deployment_base) = match (&args.scenario, &args.deployment) {
        (Some(s), Some(d)) => (s.clone(), d.clone()),
        _ => {
            let Some(pair) = PAIRS.iter().find(|p| p.0 == model && p.1 == tp) else {
                return Err(failure(
                    1,
                    format!(
                        "{}: no bundled scenario for model `{model}` at tensor_parallelism {tp}; give --scenario and --deployment",
                        exp_path.display()
                    ),
                ));
            };
            overlay
                .docs
                .insert(PathBuf::from(pair.2), pair.3.to_string());
            overlay
                .docs
                .insert(PathBuf::from(pair.4), pair.5.to_string());
            (PathBuf::from(pair.2), PathBuf::from(pair.4))
        }
    };
    // The deployment with the run's limits, beside the given one (so its
    // relative references still resolve).
    let dtext = overlay
        .read(&deployment_base)
        .map_err(|e| failure(2, format!("{}: {e}", deployment_base.display())))?;
    let mut ddoc: serde_yaml::Value = pdsim_spec::load::from_str(&dtext)
        .map_err(|e| failure(1, format!("{}: {e}", deployment_base.display())))?;
    if let Some(pools) = ddoc.get_mut("pools").and_then(|p| p.as_sequence_mut()) {
        for pool in pools {
            let Some(pool) = pool.as_mapping_mut() else {
                continue;
            };
            let engine = pool
                .entry("engine".into())
                .or_insert_with(|| serde_yaml::Value::Mapping(Default::default()));
            if let Some(engine) = engine.as_mapping_mut() {
                for key in LIMIT_KEYS {
                    if let Some(v) = exp.get(*key) {
                        engine.insert((*key).into(), v.clone());
                    }
                }
            }
            if let Some(parallel) = pool.get_mut("parallel").and_then(|p| p.as_mapping_mut()) {
                let given = parallel.get("tp").and_then(|v| v.as_u64());
                if given != Some(tp) {
                    return Err(failure(
                        1,
                        format!(
                            "{}: pools[].parallel.tp is {}, but {} says tensor_parallelism {tp}",
                            deployment_base.display(),
                            given.map_or("absent".to_string(), |g| g.to_string()),
                            exp_path.display()
                        ),
                    ));
                }
            }
        }
    }
    let stem = deployment_base
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let deployment = deployment_base.with_file_name(format!("{stem}+{}.yaml", name_part(&name)));
    overlay.docs.insert(
        deployment.clone(),
        serde_yaml::to_string(&ddoc).map_err(|e| failure(2, e))?,
    );
    let sstem = scenario
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();

    // The scope: the scenario's model and hardware names.
    let stext = overlay
        .read(&scenario)
        .map_err(|e| failure(2, format!("{}: {e}", scenario.display())))?;
    let sdoc: serde_yaml::Value = pdsim_spec::load::from_str(&stext)
        .map_err(|e| failure(1, format!("{}: {e}", scenario.display())))?;
    let model_name = sdoc
        .get("model")
        .and_then(|v| v.as_str())
        .ok_or_else(|| failure(1, format!("{}: `model` is missing", scenario.display())))?
        .to_ascii_lowercase();
    let hardware = sdoc
        .get("cluster")
        .and_then(|c| c.get("hardware"))
        .and_then(|v| v.as_str())
        .ok_or_else(|| {
            failure(
                1,
                format!("{}: `cluster.hardware` is missing", scenario.display()),
            )
        })?
        .to_ascii_lowercase();
    let scope = Scope {
        model: model_name.clone(),
        hardware: hardware.clone(),
        tp,
    };
    let calibrated_scenario = scenario.with_file_name(format!("{sstem}+{}.yaml", scope.set_name()));

    // What the pair resolves today.
    let report = pdsim_spec::validate::validate(&pdsim_spec::validate::Request {
        files: &*overlay,
        catalog_dirs: catalogs.to_vec(),
        scenario: Some(scenario.clone()),
        documents: vec![deployment.clone()],
    });
    let (Some(resolved_scenario), Some(bundle)) = (&report.scenario, report.deployments.first())
    else {
        let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
        return Err(failure(
            1,
            format!(
                "{}\n{}: its scenario and deployment do not validate",
                problems.join("\n"),
                dir.display()
            ),
        ));
    };
    let Some(pool) = bundle.resolution.pools.first() else {
        return Err(failure(
            1,
            format!("{}: the deployment has no pool", deployment.display()),
        ));
    };
    let roofline = pdsim_cost::Roofline::for_pool(resolved_scenario, pool)
        .map_err(|e| failure(1, format!("{}: {e}", deployment.display())))?;
    let resolved: BTreeMap<String, (f64, String, String)> = roofline
        .provenance_rows()
        .into_iter()
        .map(|(n, v, units, source)| (n, (v, units, source)))
        .collect();

    // The workload, once.
    let prepared = prepare_in(&*overlay, catalogs, &scenario, &deployment)?;
    let loaded = load_all(
        &prepared,
        &WorkloadChoice {
            trace: Some(&config_path),
            rate: None,
            requests: None,
            seed: 0,
        },
    )?;
    let measured_json = crate::disk::DiskFiles
        .read(&metrics_path)
        .map_err(|e| failure(2, format!("{}: {e}", metrics_path.display())))?;
    let output_tokens = mean_output_tokens(&loaded.specs);
    let measured = measured_figures(&metrics_path, &measured_json, output_tokens)?;
    let overloaded =
        measured.failed > 0 || measured.ttft_mean_ms.is_some_and(|t| t > OVERLOAD_TTFT_MS);
    Ok(Run {
        dir: dir.to_path_buf(),
        name,
        model: model_name,
        hardware,
        tp,
        scenario,
        deployment,
        calibrated_scenario,
        specs: loaded.specs,
        class_names: loaded.names,
        trace_label: loaded.label,
        measured,
        overloaded,
        resolved,
        inputs: vec![exp_path, config_path, metrics_path],
    })
}

/// The output tokens every request asks for, on average (inference-perf's
/// `ignore_eos` makes it exact per request).
fn mean_output_tokens(specs: &[RequestSpec]) -> f64 {
    if specs.is_empty() {
        return 0.0;
    }
    specs.iter().map(|s| s.output_tokens as f64).sum::<f64>() / specs.len() as f64
}

/// The figures of a measured `summary_lifecycle_metrics.json`.
fn measured_figures(path: &Path, text: &str, output_tokens: f64) -> Result<Figures, Failure> {
    let d: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| failure(1, format!("{}: not JSON: {e}", path.display())))?;
    let num = |keys: &[&str]| -> Result<f64, Failure> {
        let mut v = &d;
        for k in keys {
            v = v.get(k).ok_or_else(|| {
                failure(
                    1,
                    format!("{}: key `{}` is missing", path.display(), keys.join(".")),
                )
            })?;
        }
        v.as_f64().ok_or_else(|| {
            failure(
                1,
                format!(
                    "{}: key `{}` is not a number",
                    path.display(),
                    keys.join(".")
                ),
            )
        })
    };
    // Counts are whole and not negative, latencies finite and above zero:
    // anything else is not a measurement, and fitting to it would write a
    // set marked fitted to nonsense.
    let bad = |keys: &[&str], what: &str, value: f64| {
        failure(
            1,
            format!(
                "{}: key `{}` must be {what}, found {value}",
                path.display(),
                keys.join(".")
            ),
        )
    };
    let count = |keys: &[&str]| -> Result<u64, Failure> {
        let value = num(keys)?;
        if value.is_finite() && value >= 0.0 && value.fract() == 0.0 && value < 1e15 {
            Ok(value as u64)
        } else {
            Err(bad(keys, "a whole number of requests, not negative", value))
        }
    };
    let completed = count(&["successes", "count"])?;
    let failed = if d.get("failures").and_then(|f| f.get("count")).is_some() {
        count(&["failures", "count"])?
    } else {
        0
    };
    if completed + failed == 0 {
        return Err(failure(
            1,
            format!(
                "{}: the run sent no request (successes.count and failures.count are 0): there \
                 is nothing to compare or fit",
                path.display()
            ),
        ));
    }
    let lat = |metric: &str, stat: &str| -> Result<Option<f64>, Failure> {
        if completed == 0 {
            return Ok(None);
        }
        let keys = ["successes", "latency", metric, stat];
        let seconds = num(&keys)?;
        if !(seconds.is_finite() && seconds > 0.0) {
            return Err(bad(&keys, "a latency in seconds above 0", seconds));
        }
        Ok(Some(seconds * 1000.0))
    };
    let ttft_mean_ms = lat("time_to_first_token", "mean")?;
    let e2e_mean_ms = lat("request_latency", "mean")?;
    let tpot_ms = match (ttft_mean_ms, e2e_mean_ms) {
        (Some(t), Some(e)) if output_tokens > 1.0 => Some((e - t) / (output_tokens - 1.0)),
        _ => None,
    };
    Ok(Figures {
        completed,
        failed,
        ttft_mean_ms,
        ttft_p90_ms: lat("time_to_first_token", "p90")?,
        e2e_mean_ms,
        e2e_p90_ms: lat("request_latency", "p90")?,
        tpot_ms,
    })
}

/// Simulates one run: as the pair is (`set` None), or with the candidate
/// set file at `set.0` holding `set.1`.
fn evaluate(
    run: &Run,
    overlay: &Overlay,
    catalogs: &[PathBuf],
    set: Option<(&Path, String)>,
) -> Result<Figures, Failure> {
    let (files, scenario): (Box<dyn Files + '_>, &Path) = match set {
        Some((path, text)) => (
            Box::new(WithSet {
                base: overlay,
                path: path.to_path_buf(),
                text,
            }),
            &run.calibrated_scenario,
        ),
        None => (
            Box::new(WithSet {
                base: overlay,
                path: PathBuf::new(),
                text: String::new(),
            }),
            &run.scenario,
        ),
    };
    let prepared = prepare_in(&*files, catalogs, scenario, &run.deployment)?;
    let slo = crate::session::SloArgs::default()
        .plan(&prepared, pdsim_report::ClassNames::new(&run.class_names))?;
    let outcome = simulate(
        &prepared,
        &mut scaled(&run.specs, 1.0),
        How {
            trace_label: &run.trace_label,
            seed: 0,
            check: false,
            slo,
            gpu_hour_usd: None,
            stages: &[],
        },
        &mut pdsim_report::Fanout(Vec::new()),
    )
    .map_err(|f| failure(f.code, format!("{}: {}", run.dir.display(), f.message)))?;
    let s = &outcome.summary;
    let some = |l: &pdsim_report::Latency, v: f64| (l.count > 0).then_some(v);
    Ok(Figures {
        completed: s.requests.completed,
        failed: s.requests.aborted + s.requests.rejected,
        ttft_mean_ms: some(&s.ttft_ms, s.ttft_ms.mean),
        ttft_p90_ms: some(&s.ttft_ms, s.ttft_ms.p90),
        e2e_mean_ms: some(&s.e2e_ms, s.e2e_ms.mean),
        e2e_p90_ms: some(&s.e2e_ms, s.e2e_ms.p90),
        tpot_ms: some(&s.tpot_ms, s.tpot_ms.mean),
    })
}

/// The objective of one run: mean |relative error| over the fitted metrics.
fn run_objective(pred: &Figures, meas: &Figures) -> f64 {
    let mut sum = 0.0;
    let mut n = 0.0;
    for m in FITTED_METRICS {
        if meas.get(m).is_none() {
            continue;
        }
        sum += rel_error(pred.get(m), meas.get(m)).map_or(MISSING_ERROR, f64::abs);
        n += 1.0;
    }
    if n == 0.0 { 0.0 } else { sum / n }
}

/// Why a set has its values, for its entries' rationale.
struct SetNotes {
    runs: Vec<String>,
    before: f64,
    after: f64,
    evaluations: u64,
    iterations: u32,
    starts: BTreeMap<String, (f64, String)>,
}

/// A set's YAML: `method: measured`, `fitted: true`, scoped to its
/// model, hardware and tp. Candidates carry no notes.
fn set_text(
    scope: &Scope,
    set_name: &str,
    knobs: &[&'static Knob],
    values: &[f64],
    notes: Option<&SetNotes>,
) -> String {
    let mut scope_map = BTreeMap::new();
    scope_map.insert(
        "hardware".to_string(),
        vec![serde_yaml::Value::from(scope.hardware.as_str())],
    );
    scope_map.insert(
        "model".to_string(),
        vec![serde_yaml::Value::from(scope.model.as_str())],
    );
    scope_map.insert("tp".to_string(), vec![serde_yaml::Value::from(scope.tp)]);
    let coefficients = knobs
        .iter()
        .zip(values)
        .map(|(k, v)| {
            let rationale = notes.map(|n| {
                let (start, source) = n.starts.get(k.name).cloned().unwrap_or_default();
                format!(
                    "Fitted by pdsim calibrate on {} measured run(s) of this scope ({}), with the \
                     other coefficients of the set: compass search on log scale from {start} \
                     {units} ({source}), {} iterations, {} evaluations, minimising the mean \
                     absolute relative error of TTFT mean, E2E mean and per-token TPOT \
                     ({:.2}% at the start, {:.2}% fitted). Bounds [{}, {}] {units}: {}. No ci95: \
                     the simulator is deterministic and a run's measurement noise is unknown, so \
                     {} run(s) give no sampling distribution from which a 95% interval could be \
                     stated honestly.",
                    n.runs.len(),
                    n.runs.join(", "),
                    n.iterations,
                    n.evaluations,
                    n.before * 100.0,
                    n.after * 100.0,
                    k.lo,
                    k.hi,
                    k.bounds_why,
                    n.runs.len(),
                    units = k.units,
                )
            });
            let mut entry = BTreeMap::new();
            entry.insert(
                k.name.to_string(),
                Coefficient {
                    value: *v,
                    units: k.units.to_string(),
                    method: "measured".to_string(),
                    fitted: true,
                    scope: scope_map.clone(),
                    ci95: None,
                    sources: Vec::new(),
                    rationale,
                    copied_from: None,
                    supersedes: None,
                    validated: None,
                    unsupported: None,
                },
            );
            entry
        })
        .collect();
    let set = CoefficientSet {
        kind: "CoefficientSet".to_string(),
        name: set_name.to_string(),
        coefficients,
    };
    let body = serde_yaml::to_string(&set).unwrap_or_default();
    format!(
        "# Written by pdsim calibrate ({}). A scenario uses this set by naming\n\
         # `{set_name}` last in its `coefficients` list; run with --catalog\n\
         # pointing at the folder that holds coefficients/.\n{body}",
        env!("CARGO_PKG_VERSION")
    )
}

/// The compass search of one scope.
struct Search<'a> {
    runs: &'a [Run],
    overlay: &'a Overlay,
    catalogs: &'a [PathBuf],
    set_path: &'a Path,
    set_name: &'a str,
    scope: &'a Scope,
    fit_runs: &'a [usize],
    pool: &'a rayon::ThreadPool,
    evaluations: u64,
}

impl Search<'_> {
    /// The objectives of `candidates` (values per knob), in order.
    fn objectives(
        &mut self,
        knobs: &[&'static Knob],
        candidates: &[Vec<f64>],
    ) -> Result<Vec<f64>, Failure> {
        let tasks: Vec<(usize, usize)> = (0..candidates.len())
            .flat_map(|c| self.fit_runs.iter().map(move |&r| (c, r)))
            .collect();
        let (runs, overlay, catalogs, set_path) =
            (self.runs, self.overlay, self.catalogs, self.set_path);
        let (scope, set_name) = (self.scope, self.set_name);
        let per_task: Vec<f64> = self.pool.install(|| {
            tasks
                .par_iter()
                .map(|&(c, r)| {
                    let text = set_text(scope, set_name, knobs, &candidates[c], None);
                    let figures = evaluate(&runs[r], overlay, catalogs, Some((set_path, text)))?;
                    Ok(run_objective(&figures, &runs[r].measured))
                })
                .collect::<Result<Vec<f64>, Failure>>()
        })?;
        self.evaluations += candidates.len() as u64;
        let n = self.fit_runs.len().max(1);
        Ok(per_task
            .chunks(n)
            .map(|c| c.iter().sum::<f64>() / n as f64)
            .collect())
    }

    /// Compass search on log scale: each iteration tries every knob a step
    /// up and a step down, moves to the best candidate that improves, and
    /// halves every step when none does. Returns (values, objective,
    /// objective at the start).
    fn run(
        &mut self,
        knobs: &[&'static Knob],
        start: &[f64],
        iterations: u32,
    ) -> Result<(Vec<f64>, f64, f64), Failure> {
        let mut x = start.to_vec();
        let mut best = self.objectives(knobs, std::slice::from_ref(&x))?[0];
        let start_objective = best;
        let mut steps: Vec<f64> = knobs.iter().map(|k| k.step_factor.ln()).collect();
        for _ in 0..iterations {
            if steps.iter().all(|s| *s < 1e-3) {
                break;
            }
            let mut candidates: Vec<Vec<f64>> = Vec::new();
            for (i, k) in knobs.iter().enumerate() {
                for dir in [1.0, -1.0] {
                    let v = round4((x[i].ln() + dir * steps[i]).exp().clamp(k.lo, k.hi));
                    if v != x[i] && !candidates.iter().any(|c| c[i] == v) {
                        let mut c = x.clone();
                        c[i] = v;
                        candidates.push(c);
                    }
                }
            }
            if candidates.is_empty() {
                break;
            }
            let values = self.objectives(knobs, &candidates)?;
            // The first best candidate, so ties resolve by knob order.
            let mut pick: Option<usize> = None;
            for (i, v) in values.iter().enumerate() {
                if *v < best && pick.is_none_or(|p| *v < values[p]) {
                    pick = Some(i);
                }
            }
            match pick {
                Some(i) => {
                    best = values[i];
                    x = candidates[i].clone();
                }
                None => steps.iter_mut().for_each(|s| *s *= 0.5),
            }
        }
        Ok((x, best, start_objective))
    }
}

#[derive(Serialize)]
struct CalibrationReport {
    pdsim_version: &'static str,
    fitted_metrics: &'static [&'static str],
    sets: Vec<SetReport>,
    runs: Vec<RunReport>,
}

#[derive(Serialize)]
struct SetReport {
    name: String,
    file: String,
    scope: String,
    fitted_on: Vec<String>,
    objective_before: f64,
    objective_after: f64,
    evaluations: u64,
    values: BTreeMap<String, f64>,
    at_bound: Vec<String>,
}

#[derive(Serialize)]
struct RunReport {
    run: String,
    set: String,
    fitted: bool,
    overloaded: bool,
    measured: Figures,
    before: Figures,
    after: Option<Figures>,
    error_before: BTreeMap<String, Option<f64>>,
    error_after: BTreeMap<String, Option<f64>>,
}

impl RunReport {
    fn new(
        run: &Run,
        set: &str,
        fitted: bool,
        before: &Figures,
        after: Option<&Figures>,
    ) -> RunReport {
        let errors = |f: Option<&Figures>| {
            REPORTED_METRICS
                .iter()
                .map(|(k, _)| {
                    (
                        k.to_string(),
                        f.and_then(|f| rel_error(f.get(k), run.measured.get(k))),
                    )
                })
                .collect()
        };
        RunReport {
            run: run.name.clone(),
            set: set.to_string(),
            fitted,
            overloaded: run.overloaded,
            measured: run.measured.clone(),
            before: before.clone(),
            after: after.cloned(),
            error_before: errors(Some(before)),
            error_after: errors(after),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{measured_figures, round4, scenario_naming};

    /// Counts that are negative or fractional, a run that sent nothing and
    /// latencies at or below zero are refused, naming the key; a sound
    /// summary gives its figures in milliseconds.
    #[test]
    fn measured_figures_that_are_not_measurements_are_refused() {
        let path = std::path::Path::new("m.json");
        let summary = |successes: &str, failures: &str, ttft: &str| {
            format!(
                "{{\"successes\": {{\"count\": {successes}, \"latency\": {{\
                 \"time_to_first_token\": {{\"mean\": {ttft}, \"p90\": 0.05}},\
                 \"request_latency\": {{\"mean\": 2.0, \"p90\": 3.0}}}}}},\
                 \"failures\": {{\"count\": {failures}}}}}"
            )
        };
        let f = measured_figures(path, &summary("10", "0", "0.02"), 11.0).unwrap();
        assert_eq!((f.completed, f.failed), (10, 0));
        assert_eq!(f.ttft_mean_ms, Some(20.0));
        assert_eq!(f.tpot_ms, Some((2000.0 - 20.0) / 10.0));
        for (successes, failures, ttft, key) in [
            ("-5", "0", "0.02", "successes.count"),
            ("2.5", "0", "0.02", "successes.count"),
            ("10", "-1", "0.02", "failures.count"),
            ("0", "0", "0.02", "sent no request"),
            (
                "10",
                "0",
                "-0.02",
                "successes.latency.time_to_first_token.mean",
            ),
            ("10", "0", "0", "successes.latency.time_to_first_token.mean"),
        ] {
            let e = measured_figures(path, &summary(successes, failures, ttft), 11.0)
                .err()
                .unwrap_or_else(|| panic!("{successes} {failures} {ttft}: accepted"));
            assert!(e.message.contains(key), "{key}: {}", e.message);
        }
    }

    #[test]
    fn rounding_keeps_four_significant_digits() {
        assert_eq!(round4(0.123456), 0.1235);
        assert_eq!(round4(1234.56), 1235.0);
        assert_eq!(round4(7.0), 7.0);
        assert_eq!(round4(0.35), 0.35);
    }

    #[test]
    fn a_scenario_names_the_set_last_once() {
        let text = "kind: Scenario\ncoefficients:\n  - a\n  - s\n  - b\n";
        let out = scenario_naming(text, "s").unwrap();
        let doc: serde_yaml::Value = serde_yaml::from_str(&out).unwrap();
        let list: Vec<&str> = doc["coefficients"]
            .as_sequence()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(list, ["a", "b", "s"]);
        assert!(scenario_naming("kind: Scenario\n", "s").is_err());
    }
}
