//! `pdsim run`: replay a trace against a deployment and write the results.
//!
//! With no arguments it runs the built-in default (embedded in the binary,
//! so it works from any directory): `scenarios/default.yaml`,
//! `deployments/default.yaml` and the bundled `traces/default.jsonl`.

use crate::disk::DiskFiles;
use pdsim_cluster::run;
use pdsim_report::{Aggregator, CsvSink, LinkCsvSink, RunInfo, Tee, render_text};
use pdsim_spec::files::{FileKind, Files, ReadError};
use pdsim_spec::validate::{Request, validate};
use pdsim_workload::{RequestSpec, Synthetic, TraceError, TraceReader};
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const DEFAULT_SCENARIO: &str = "builtin:scenarios/default.yaml";
const DEFAULT_DEPLOYMENT: &str = "builtin:deployments/default.yaml";
const DEFAULT_TRACE: &str = "builtin:traces/default.jsonl";

const EMBEDDED: &[(&str, &str)] = &[
    (
        DEFAULT_SCENARIO,
        include_str!("../../../scenarios/default.yaml"),
    ),
    (
        DEFAULT_DEPLOYMENT,
        include_str!("../../../deployments/default.yaml"),
    ),
    (DEFAULT_TRACE, include_str!("../../../traces/default.jsonl")),
];

/// The disk, plus the built-in default documents under `builtin:` names.
struct WithDefaults;

fn embedded(path: &Path) -> Option<&'static str> {
    let name = path.to_str()?;
    EMBEDDED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, text)| *text)
}

impl Files for WithDefaults {
    fn kind(&self, path: &Path) -> FileKind {
        if embedded(path).is_some() {
            FileKind::File
        } else {
            DiskFiles.kind(path)
        }
    }
    fn read(&self, path: &Path) -> Result<String, ReadError> {
        match embedded(path) {
            Some(text) => Ok(text.to_string()),
            None => DiskFiles.read(path),
        }
    }
    fn list(&self, path: &Path) -> Vec<String> {
        DiskFiles.list(path)
    }
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The Scenario (default: the built-in one-node H200 Llama-3.1-8B scenario).
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// The Deployment (default: the built-in eight single-GPU colocated engines).
    #[arg(long, value_name = "FILE")]
    deployment: Option<PathBuf>,
    /// A trace: Mooncake JSONL, TraceV2 CSV (header from the scenario) or Azure 2023 CSV.
    /// Default: the scenario's workload, else the bundled default trace.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Requests per second for a scenario whose workload is a catalog shape.
    #[arg(long, value_name = "R")]
    rate: Option<f64>,
    /// How many requests to draw from a workload shape.
    #[arg(long, value_name = "N")]
    requests: Option<u64>,
    /// The seed of every random stream.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// The output folder (default: results/<deployment>--<scenario>--seed<N>).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Check the engines' invariants after every step.
    #[arg(long)]
    check: bool,
    /// A user catalog folder (BLIS layout), searched after the built-in catalog. Repeatable.
    #[arg(long, value_name = "DIR")]
    catalog: Vec<PathBuf>,
    /// Output format of the summary on stdout.
    #[arg(long, value_enum, default_value_t = crate::validate_cmd::Format::Text)]
    format: crate::validate_cmd::Format,
}

/// Exit codes of `run`: 0 done, 1 invalid input (documents, trace rows, a
/// deployment pdsim refuses), 2 usage or I/O error, 3 an invariant broke.
fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("pdsim run: {message}");
    ExitCode::from(code)
}

pub fn run_command(args: &Args) -> ExitCode {
    let files = WithDefaults;
    let scenario_path = args
        .scenario
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SCENARIO));
    let deployment_path = args
        .deployment
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DEPLOYMENT));
    let mut report = validate(&Request {
        files: &files,
        catalog_dirs: args.catalog.clone(),
        scenario: Some(scenario_path.clone()),
        documents: vec![deployment_path.clone()],
    });
    crate::validate_cmd::add_router_problems(&files, &mut report);
    for problem in &report.problems {
        eprintln!("{problem}");
    }
    if report.io_error {
        return ExitCode::from(2);
    }
    let (Some(scenario), Some(bundle)) = (report.scenario.as_ref(), report.deployments.first())
    else {
        return fail(1, "the documents are invalid (see above)");
    };
    let router = match &bundle.deployment.router {
        None => None,
        Some(block) => {
            match pdsim_router::check_router_inputs(&files, &bundle.source.file, Some(block)) {
                Ok(inputs) => Some(inputs),
                Err(problems) => {
                    for problem in problems {
                        eprintln!("{problem}");
                    }
                    return fail(1, "the router inputs are invalid (see above)");
                }
            }
        }
    };
    // The specification routes a deployment without a router block with the
    // EPP's built-in configuration, which has no P/D profile: say so, since
    // a user who wrote prefill pools most likely meant them to be used.
    if router.is_none() && bundle.deployment.pools.iter().any(|p| p.role == "prefill") {
        eprintln!(
            "{}: note: no router block, so the EPP's built-in configuration routes every request whole to any pod and none is disaggregated; name an EndpointPickerConfig with a disagg-profile-handler under `router` to run P/D",
            deployment_path.display()
        );
    }
    let cluster = match pdsim_cluster::build_with_router(bundle, scenario, router) {
        Ok(cluster) => cluster,
        Err(e) => return fail(1, format!("{}: {e}", deployment_path.display())),
    };

    // The request source.
    let workload = scenario.scenario.workload.as_ref();
    let header = workload
        .and_then(|w| w.trace.as_ref())
        .map(|t| t.header.clone());
    let (trace_label, mut source): (
        String,
        Box<dyn Iterator<Item = Result<RequestSpec, TraceError>>>,
    ) = if let Some(path) = &args.trace {
        match open_trace(path, header.as_ref()) {
            Ok(reader) => (path.display().to_string(), reader),
            Err(code) => return code,
        }
    } else if let Some(path) = &scenario.trace_path {
        match open_trace(path, header.as_ref()) {
            Ok(reader) => (path.display().to_string(), reader),
            Err(code) => return code,
        }
    } else if let Some(shape) = &scenario.shape {
        let (Some(rate), Some(count)) = (args.rate, args.requests) else {
            return fail(
                2,
                format!(
                    "the scenario's workload is the shape `{}`; give --rate R (requests per second) and --requests N",
                    shape.origin.name
                ),
            );
        };
        match Synthetic::new(&shape.origin.name, &shape.value, count, rate, args.seed) {
            Ok(s) => (
                format!("shape {} at {rate} req/s", shape.origin.name),
                Box::new(s),
            ),
            Err(e) => return fail(1, e),
        }
    } else {
        let text = embedded(Path::new(DEFAULT_TRACE)).unwrap_or_default();
        match TraceReader::sniff(std::io::Cursor::new(text.as_bytes()), DEFAULT_TRACE, None) {
            Ok(reader) => (DEFAULT_TRACE.to_string(), Box::new(reader)),
            Err(e) => return fail(1, e),
        }
    };

    // Output folder, written under a temporary name and renamed at the end so
    // a failed run never leaves a complete-looking result.
    let name = format!(
        "{}--{}--seed{}",
        bundle.deployment.name, scenario.scenario.name, args.seed
    );
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(&name));
    let staging = staging_dir(&out);
    if let Err(e) = std::fs::create_dir_all(&staging) {
        return fail(2, format!("cannot create {}: {e}", staging.display()));
    }
    let csv_file = match std::fs::File::create(staging.join("requests.csv")) {
        Ok(f) => f,
        Err(e) => {
            return fail(
                2,
                format!(
                    "cannot write {}: {e}",
                    staging.join("requests.csv").display()
                ),
            );
        }
    };
    let links_file = match std::fs::File::create(staging.join("links.csv")) {
        Ok(f) => f,
        Err(e) => {
            return fail(
                2,
                format!("cannot write {}: {e}", staging.join("links.csv").display()),
            );
        }
    };
    let mut csv = CsvSink::new(std::io::BufWriter::new(csv_file));
    let mut links = LinkCsvSink::new(std::io::BufWriter::new(links_file));
    let mut aggregator = Aggregator::default();
    let result = {
        let mut files = Tee {
            first: &mut csv,
            second: &mut links,
        };
        let mut tee = Tee {
            first: &mut aggregator,
            second: &mut files,
        };
        run(&cluster, &mut source, args.seed, args.check, &mut tee)
    };
    let stats = match result {
        Ok(stats) => stats,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&staging);
            let code = if matches!(e, pdsim_cluster::RunError::Invariant(_)) {
                3
            } else {
                1
            };
            return fail(code, format!("{e}; no results were written"));
        }
    };
    if let Err(e) = csv.finish() {
        let _ = std::fs::remove_dir_all(&staging);
        return fail(2, format!("writing requests.csv failed: {e}"));
    }
    if let Err(e) = links.finish() {
        let _ = std::fs::remove_dir_all(&staging);
        return fail(2, format!("writing links.csv failed: {e}"));
    }
    let engines: u64 = cluster.pools.iter().map(|p| p.pods as u64).sum();
    let gpus: u64 = bundle
        .layouts
        .iter()
        .filter_map(|l| {
            l.cluster
                .as_ref()
                .map(|c| c.engines.saturating_mul(l.gpus_per_engine))
        })
        .map(|g| g.min(u64::MAX as u128) as u64)
        .sum();
    let summary = aggregator.summary(
        &stats,
        RunInfo {
            scenario: scenario.scenario.name.clone(),
            deployment: bundle.deployment.name.clone(),
            trace: trace_label,
            seed: args.seed,
            router: stats.router.to_string(),
            engines,
            gpus,
        },
    );
    let json = match serde_json::to_string_pretty(&summary) {
        Ok(json) => json + "\n",
        Err(e) => return fail(2, format!("cannot encode the summary: {e}")),
    };
    if let Err(e) = std::fs::write(staging.join("summary.json"), &json) {
        let _ = std::fs::remove_dir_all(&staging);
        return fail(2, format!("cannot write summary.json: {e}"));
    }
    if out.exists()
        && let Err(e) = std::fs::remove_dir_all(&out)
    {
        return fail(2, format!("cannot replace {}: {e}", out.display()));
    }
    if let Err(e) = std::fs::rename(&staging, &out) {
        return fail(
            2,
            format!("cannot move results into {}: {e}", out.display()),
        );
    }
    let text = match args.format {
        crate::validate_cmd::Format::Json => json,
        crate::validate_cmd::Format::Text => {
            format!("{}results: {}\n", render_text(&summary), out.display())
        }
    };
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(text.as_bytes());
    ExitCode::SUCCESS
}

fn staging_dir(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".into());
    out.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

type Source = Box<dyn Iterator<Item = Result<RequestSpec, TraceError>>>;

fn open_trace(
    path: &Path,
    header: Option<&pdsim_spec::scenario::TraceHeader>,
) -> Result<Source, ExitCode> {
    let file = match std::fs::File::open(path) {
        Ok(f) if f.metadata().map(|m| m.is_dir()).unwrap_or(false) => {
            return Err(fail(
                2,
                format!("{}: is a directory, not a trace file", path.display()),
            ));
        }
        Ok(f) => f,
        Err(e) => return Err(fail(2, format!("{}: {e}", path.display()))),
    };
    let name = path.display().to_string();
    match TraceReader::sniff(BufReader::new(file), &name, header) {
        Ok(reader) => Ok(Box::new(reader)),
        Err(e) => Err(fail(1, e)),
    }
}
