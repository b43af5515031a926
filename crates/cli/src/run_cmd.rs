//! `pdsim run`: replay a trace against a deployment and write the results.
//!
//! With no arguments it runs the built-in default (embedded in the binary,
//! so it works from any directory): `scenarios/default.yaml`,
//! `deployments/default.yaml` and the bundled `traces/default.jsonl`.

use crate::flags::{identity, safe_part, short_hash, slo_and_catalog_parts, trace_parts};
use crate::output::OutFile;
use crate::session::{
    DEFAULT_DEPLOYMENT, DEFAULT_SCENARIO, Failure, How, Prepared, SloArgs, Staging, WorkloadChoice,
    failure, open_source, prepare, results_readme, simulate,
};
use pdsim_report::page::run_report;
use pdsim_report::perfetto::PerfettoSink;
use pdsim_report::series::SeriesSink;
use pdsim_report::{CsvSink, Fanout, LinkCsvSink, render_text};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The Scenario (default: the built-in one-node H200 Llama-3.1-8B scenario).
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// The Deployment (default: the built-in eight single-GPU colocated engines).
    #[arg(long, value_name = "FILE")]
    deployment: Option<PathBuf>,
    /// A trace: Mooncake JSONL, TraceV2 CSV (header from the scenario), Azure 2023 CSV, BurstGPT
    /// CSV, or an inference-perf configuration (YAML, or its one-line JSON profile).
    /// Default: the scenario's workload, else the bundled default trace.
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Requests per second for a scenario whose workload is a catalog shape.
    #[arg(long, value_name = "R", allow_negative_numbers = true)]
    rate: Option<f64>,
    /// How many requests to draw from a workload shape.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::flags::whole::<u64>)]
    requests: Option<u64>,
    /// The seed of every random stream.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = crate::flags::whole::<u64>)]
    seed: u64,
    /// The output folder (default:
    /// results/<deployment>--<scenario>--<trace>--seed<N>--<hash>, the hash
    /// telling apart runs whose inputs or SLOs differ). An existing folder
    /// is replaced only when it is an earlier pdsim result.
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
    #[command(flatten)]
    slo: SloArgs,
    /// Also write a Chrome/Perfetto trace: a track per engine core (steps
    /// with their batch), KV transfers, link utilisation. An existing FILE
    /// is replaced only when it is a trace pdsim wrote.
    #[arg(long, value_name = "FILE")]
    perfetto: Option<PathBuf>,
}

/// Exit codes of `run`: 0 done, 1 invalid input (documents, trace rows, a
/// deployment pdsim refuses), 2 usage or I/O error, 3 an invariant broke.
fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    crate::session::print_failure("run", &message.to_string());
    ExitCode::from(code)
}

pub fn run_command(args: &Args) -> ExitCode {
    match run_inner(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => fail(f.code, f.message),
    }
}

fn run_inner(args: &Args) -> Result<(), Failure> {
    let scenario_path = args
        .scenario
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SCENARIO));
    let deployment_path = args
        .deployment
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DEPLOYMENT));
    // The numbers are checked before anything is read or built.
    crate::flags::synthetic(args.rate, args.requests)?;
    args.slo.parse()?;
    crate::flags::catalogs(&args.catalog)?;
    // What the flags name, which the results may not replace; what the
    // documents name in turn (a router's configuration, a scenario's trace)
    // is kept apart as it is read.
    let mut named = vec![scenario_path.clone(), deployment_path.clone()];
    named.extend(args.trace.clone());
    named.extend(args.catalog.iter().cloned());
    if let Some(out) = &args.out {
        crate::output::check_out_for(out, &named)?;
    }
    let mut prepared = prepare(&args.catalog, &scenario_path, &deployment_path)?;
    prepared.client_timeout = args.slo.client_timeout(&prepared);
    for note in &prepared.notes {
        eprintln!("{}", pdsim_spec::problem::printable(note));
    }
    crate::flags::workload_flags(&prepared, args.trace.as_deref(), args.rate, args.requests)?;
    crate::flags::note_trace_override("run", &prepared, args.trace.as_deref());
    let (mut source, trace_file) = open_source(
        &prepared,
        &WorkloadChoice {
            trace: args.trace.as_deref(),
            rate: args.rate,
            requests: args.requests,
            seed: args.seed,
        },
    )?;
    for note in &source.notes {
        eprintln!("{}", pdsim_spec::problem::printable(note));
    }
    let slo = args.slo.plan(&prepared, source.names.clone())?;

    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("results").join(default_name(
            args,
            &prepared,
            &scenario_path,
            &deployment_path,
        ))
    });
    let mut inputs = prepared.inputs.clone();
    inputs.extend(trace_file);
    // The trace's file is checked before the results folder is made: a
    // trace inside it, over an input or over a file pdsim did not write is
    // refused before anything is written.
    let apart = crate::output::Apart {
        out: &out,
        inputs: &inputs,
    };
    if let Some(path) = &args.perfetto {
        OutFile::check("--perfetto", path, &apart)?;
    }
    named.extend(inputs.iter().cloned());
    let staging = Staging::new(&out, "run", &named)?;
    let mut csv = CsvSink::new(staging.file("requests.csv")?);
    let mut links = LinkCsvSink::new(staging.file("links.csv")?);
    let mut series = SeriesSink::new(
        prepared.pools.iter().map(|p| p.name.clone()).collect(),
        Some(staging.file("timeseries.csv")?),
    );
    // The Perfetto trace goes beside its final name until the run ends
    // (a FIFO or a device is written directly).
    let (perfetto_out, mut perfetto) = match &args.perfetto {
        Some(path) => {
            let (target, file) = OutFile::open("--perfetto", path, "run", &apart)?;
            let sink = PerfettoSink::new(
                std::io::BufWriter::new(file),
                prepared.pools.iter().map(|p| p.name.clone()).collect(),
            );
            (Some(target), Some(sink))
        }
        None => (None, None),
    };
    // Progress on stderr (hidden when it is not a terminal): a long trace
    // takes seconds. A bar with the time left when the source knows its
    // size, else a spinner counting requests.
    let bar = crate::session::progress(source.total.unwrap_or(0), "run");
    if source.total.is_some() {
        bar.set_message("requests read");
    }
    let mut counted = source.requests.by_ref().inspect(|_| bar.inc(1));
    let outcome = {
        let mut sinks: Vec<&mut dyn pdsim_cluster::RecordSink> =
            vec![&mut series, &mut csv, &mut links];
        if let Some(p) = perfetto.as_mut() {
            sinks.push(p);
        }
        simulate(
            &prepared,
            &mut counted,
            How {
                trace_label: &source.label,
                seed: args.seed,
                check: args.check,
                slo,
                gpu_hour_usd: args.slo.gpu_hour_usd,
                stages: &source.stages,
            },
            &mut Fanout(sinks),
        )
    };
    bar.finish_and_clear();
    let outcome = match outcome {
        Ok(o) => o,
        Err(f) => {
            if let Some(target) = &perfetto_out {
                target.discard();
            }
            return Err(f);
        }
    };
    if let (Some(sink), Some(target)) = (perfetto, &perfetto_out) {
        if let Err(e) = sink.finish() {
            target.discard();
            return Err(failure(
                2,
                format!("writing {} failed: {e}", target.writing.display()),
            ));
        }
        target.commit("--perfetto")?;
    }
    csv.finish()
        .map_err(|e| failure(2, format!("writing requests.csv failed: {e}")))?;
    links
        .finish()
        .map_err(|e| failure(2, format!("writing links.csv failed: {e}")))?;
    series
        .finish()
        .map_err(|e| failure(2, format!("writing timeseries.csv failed: {e}")))?;
    let summary = &outcome.summary;
    let json = serde_json::to_string_pretty(summary)
        .map_err(|e| failure(2, format!("cannot encode the summary: {e}")))?
        + "\n";
    staging.write("summary.json", &json)?;
    let text = render_text(summary);
    let doc = run_report(summary, &text, &outcome.cdfs, &outcome.series);
    staging.write("report.md", doc.markdown())?;
    staging.write("report.html", doc.html())?;
    for (name, svg) in doc.plots() {
        staging.write(&format!("plots/{name}.svg"), svg)?;
    }
    staging.write(
        "README.md",
        results_readme(
            &format!(
                "pdsim run: {} on {}",
                prepared.deployment, prepared.scenario
            ),
            &args.seed.to_string(),
            &inputs,
            &RUN_FILES,
        ),
    )?;
    let out = staging.commit()?;
    crate::flags::warn_unknown_classes("run", &args.slo, &source.names.snapshot());
    let printed = match args.format {
        crate::validate_cmd::Format::Json => json,
        crate::validate_cmd::Format::Text => format!("{text}results: {}\n", out.display()),
    };
    let _ = std::io::stdout().lock().write_all(printed.as_bytes());
    Ok(())
}

/// The default results folder name: what tells runs apart in words
/// (deployment, scenario, trace or shape, seed) and a short hash of every
/// input that changes the results, so that two different runs never share
/// a folder and the same command run again replaces its own.
fn default_name(args: &Args, p: &Prepared, scenario: &Path, deployment: &Path) -> String {
    let (trace_part, trace_id) = trace_parts(p, args.trace.as_deref(), args.rate, args.requests);
    let mut parts = vec![
        "run".to_string(),
        format!("scenario {}", identity(scenario)),
        format!("deployment {}", identity(deployment)),
        trace_id,
        format!("seed {}", args.seed),
    ];
    parts.extend(slo_and_catalog_parts(&args.slo, &args.catalog));
    format!(
        "{}--{}--{trace_part}--seed{}--{}",
        safe_part(&p.deployment, 40),
        safe_part(&p.scenario, 40),
        args.seed,
        short_hash(&parts)
    )
}

/// What a run's results folder holds.
pub const RUN_FILES: [(&str, &str); 8] = [
    ("summary.json", "every figure, units in the key names"),
    (
        "requests.csv",
        "one row per request: times, phases, pods, outcome",
    ),
    (
        "timeseries.csv",
        "every engine core once per simulated second: queue, running, KV usage, prefix hits, busy share; an idle stretch is written once, at its first second, so rows more than a second apart mean the seconds between were idle",
    ),
    (
        "links.csv",
        "each link KV transfers used, utilisation per second it carried bytes",
    ),
    ("report.md", "the report, plots linked"),
    (
        "report.html",
        "the same report, self-contained, plots inline",
    ),
    ("plots/", "the plots as SVG"),
    ("README.md", "this file"),
];
