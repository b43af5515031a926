//! `pdsim validate`: check documents, print problems, optionally print what
//! would run.

use crate::disk::DiskFiles;
use pdsim_spec::resolve::{PoolResolution, Resolution};
use pdsim_spec::validate::{Request, validate};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The Scenario the deployments are laid out against.
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// A user catalog folder (BLIS layout), searched after the built-in catalog. Repeatable.
    #[arg(long, value_name = "DIR")]
    catalog: Vec<PathBuf>,
    /// Print what would run: layouts, settings with defaults, overrides, KV capacity.
    #[arg(long)]
    resolve: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Deployment documents (a Scenario among them is used as the scenario).
    #[arg(value_name = "FILE", required = true)]
    files: Vec<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

pub fn run(args: &Args) -> ExitCode {
    let files = DiskFiles;
    let request = Request {
        files: &files,
        catalog_dirs: args.catalog.clone(),
        scenario: args.scenario.clone(),
        documents: args.files.clone(),
    };
    let mut report = validate(&request);
    add_router_problems(&files, &mut report);
    let output = match args.format {
        Format::Json => {
            let resolution = args
                .resolve
                .then(|| serde_json::json!({ "deployments": report.resolutions }));
            let value = serde_json::json!({
                "valid": report.valid,
                "problems": report.problems,
                "resolution": resolution,
            });
            let mut text = serde_json::to_string_pretty(&value)
                .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
            text.push('\n');
            text
        }
        Format::Text => {
            let mut text = String::new();
            for problem in &report.problems {
                let _ = writeln!(text, "{problem}");
            }
            if args.resolve {
                for resolution in &report.resolutions {
                    text.push_str(&render_resolution(resolution));
                }
            }
            let errors = report.problems.error_count();
            let warnings = report.problems.len() - errors;
            let _ = writeln!(
                text,
                "{}: {} file(s), {errors} error(s), {warnings} warning(s)",
                if report.valid { "valid" } else { "invalid" },
                args.files.len() + usize::from(args.scenario.is_some()),
            );
            text
        }
    };
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(output.as_bytes())
        .and_then(|_| stdout.flush())
        .is_err()
    {
        // A closed pipe (`pdsim validate ... | head`) is not a failure of validation.
    }
    ExitCode::from(if report.io_error {
        2
    } else if report.valid {
        0
    } else {
        1
    })
}

const GIB: f64 = (1u64 << 30) as f64;

fn gib(bytes: impl Into<f64>) -> String {
    format!("{:.1} GiB", bytes.into() / GIB)
}

/// Groups digits in threes so token counts read at a glance.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn render_resolution(resolution: &Resolution) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "\ndeployment {} on scenario {} — model {} on {}, engine {} (rules pack {})",
        resolution.deployment,
        resolution.scenario,
        resolution.model,
        resolution.chip,
        resolution.engine_version,
        resolution.rules_pack
    );
    for pool in &resolution.pools {
        render_pool(&mut text, pool);
    }
    text
}

fn render_pool(text: &mut String, pool: &PoolResolution) {
    let l = &pool.layout;
    let (engines, idle) = l
        .cluster
        .as_ref()
        .map_or((0, 0), |c| (c.engines, c.idle_gpus));
    let _ = writeln!(
        text,
        "  pool {} {}: {} node(s), {engines} engine(s) × {} GPUs (pp {} × tp {} × pcp {} × dp {} = {} ranks, dcp {}), expert-parallel width {}, {idle} GPU(s) idle",
        pool.index,
        l.role.as_str(),
        l.nodes,
        l.gpus_per_engine,
        l.pp,
        l.tp,
        l.pcp,
        l.dp,
        l.gpus_per_engine,
        l.dcp,
        l.expert_parallel_width,
    );
    let labels: Vec<String> = pool
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let _ = writeln!(text, "    labels: {}", labels.join(", "));
    let settings: Vec<String> = pool
        .settings
        .iter()
        .map(|s| {
            if s.origin == "stated" {
                format!("{} {}", s.key, s.value)
            } else {
                format!("{} {} ({})", s.key, s.value, s.origin)
            }
        })
        .collect();
    let _ = writeln!(text, "    engine: {}", settings.join(", "));
    for o in &pool.overrides {
        let _ = writeln!(
            text,
            "    not honored: {} {} -> {}: {}",
            o.field, o.requested, o.resolved, o.reason
        );
    }
    let m = &pool.memory;
    let _ = writeln!(
        text,
        "    memory per rank: {} device, {} usable = weights {} + draft {} + activations {} + graphs {} + non-torch {} + KV {}",
        gib(m.device_bytes as f64),
        gib(m.requested_bytes as f64),
        gib(m.weights_bytes as f64),
        gib(m.draft_weights_bytes as f64),
        gib(m.activation_peak_bytes as f64),
        gib(m.cudagraph_bytes as f64),
        gib(m.non_torch_bytes as f64),
        gib(m.kv_bytes as f64),
    );
    let kv = &pool.kv;
    let _ = writeln!(
        text,
        "    KV capacity: {} B/token/rank; {} blocks × {} = {} tokens per rank, {} per engine; max_model_len {} ({})",
        grouped(kv.kv_bytes_per_token_rank.round() as u64),
        grouped(kv.num_gpu_blocks),
        pool.engine.block_size,
        grouped(kv.tokens_per_rank),
        grouped(kv.tokens_per_engine),
        grouped(kv.max_model_len),
        kv.max_model_len_origin,
    );
}

/// Runs the router's checks (the `pdsim-router` crate) on every deployment
/// that names router inputs, adding their problems to the report.
pub fn add_router_problems(
    files: &dyn pdsim_spec::files::Files,
    report: &mut pdsim_spec::validate::Report,
) {
    let mut found = Vec::new();
    for (file, deployment) in &report.loaded {
        if let Some(router) = &deployment.router
            && let Err(problems) = pdsim_router::check_router_inputs(files, file, Some(router))
        {
            found.extend(problems);
        }
    }
    if found.is_empty() {
        return;
    }
    let failed: Vec<String> = found.iter().map(|p| p.file.clone()).collect();
    for problem in found {
        report.problems.push(problem);
    }
    report.problems.sort();
    report.valid = !report.problems.has_errors();
    report
        .deployments
        .retain(|d| !failed.iter().any(|f| f == &d.source.file));
}
