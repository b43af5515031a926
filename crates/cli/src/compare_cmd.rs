//! `pdsim compare`: the same requests through several deployments (and
//! seeds), in parallel, printed side by side with the deltas and written as
//! a report that explains the difference.

use crate::session::{
    Failure, How, Loaded, Prepared, SloArgs, Staging, WorkloadChoice, failure, load_all, pool,
    prepare, print_failure, progress, results_readme, scaled, simulate,
};
use pdsim_report::page::compare_report;
use pdsim_report::perfetto::PerfettoSink;
use pdsim_report::table::{ComparedRun, text_table, verdict};
use pdsim_report::{ClassNames, CsvSink, Fanout, Metric, Summary};
use rayon::prelude::*;
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The Scenario every deployment runs on.
    #[arg(long, value_name = "FILE")]
    scenario: PathBuf,
    /// The deployments to compare (the first is the baseline for deltas).
    #[arg(required = true, value_name = "DEPLOYMENT")]
    deployments: Vec<PathBuf>,
    /// A trace, or an inference-perf configuration (default: the scenario's workload, else the
    /// bundled trace).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Requests per second, for a scenario whose workload is a shape.
    #[arg(long, value_name = "R", allow_negative_numbers = true)]
    rate: Option<f64>,
    /// Requests to draw from a workload shape.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::flags::whole::<u64>)]
    requests: Option<u64>,
    /// Seeds per deployment: seed, seed+1, … The table shows the range.
    #[arg(long, default_value_t = 1, value_name = "N", allow_negative_numbers = true, value_parser = crate::flags::whole::<u64>)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = crate::flags::whole::<u64>)]
    seed: u64,
    #[command(flatten)]
    slo: SloArgs,
    /// Parallel simulations (default: the cores). Results do not depend on it.
    #[arg(long, short = 'j', value_name = "N", allow_negative_numbers = true, value_parser = crate::flags::whole::<usize>)]
    jobs: Option<usize>,
    /// The output folder (default: results/compare--<scenario>--<trace>--<hash>,
    /// the hash telling apart comparisons whose inputs or flags differ). An
    /// existing folder is replaced only when it is an earlier pdsim result.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// A user catalog folder, searched after the built-in catalog. Repeatable.
    #[arg(long, value_name = "DIR")]
    catalog: Vec<PathBuf>,
    /// Check the engines' invariants after every step.
    #[arg(long)]
    check: bool,
    /// Also write each run's Chrome/Perfetto trace as
    /// `runs/<deployment>/seed<N>/perfetto.json`.
    #[arg(long)]
    perfetto: bool,
}

pub fn run(args: &Args) -> ExitCode {
    match compare(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            print_failure("compare", &f.message);
            ExitCode::from(f.code)
        }
    }
}

/// A folder name for a deployment: its name, made safe, numbered if it
/// repeats.
pub fn folder_names(names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let safe: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let safe =
            if out.contains(&safe) || names[..i].iter().chain(&names[i + 1..]).any(|n| n == name) {
                format!("{i}-{safe}")
            } else {
                safe
            };
        out.push(safe);
    }
    out
}

/// The default results folder name: the scenario and the trace in words,
/// and a short hash of everything that changes the results.
fn default_name(args: &Args, prepared: &[Prepared]) -> String {
    let (trace_part, trace_id) = crate::flags::trace_parts(
        &prepared[0],
        args.trace.as_deref(),
        args.rate,
        args.requests,
    );
    let mut parts = vec![
        "compare".to_string(),
        format!("scenario {}", crate::flags::identity(&args.scenario)),
    ];
    parts.extend(
        args.deployments
            .iter()
            .map(|d| format!("deployment {}", crate::flags::identity(d))),
    );
    parts.extend([
        trace_id,
        format!("seed {}", args.seed),
        format!("seeds {}", args.seeds),
        format!("perfetto {}", args.perfetto),
    ]);
    parts.extend(crate::flags::slo_and_catalog_parts(
        &args.slo,
        &args.catalog,
    ));
    format!(
        "compare--{}--{trace_part}--{}",
        crate::flags::safe_part(&prepared[0].scenario, 40),
        crate::flags::short_hash(&parts)
    )
}

#[derive(Serialize)]
struct CompareJson<'a> {
    pdsim_version: &'a str,
    scenario: &'a str,
    trace: &'a str,
    seeds: Vec<u64>,
    runs: &'a [ComparedRun],
    rows: Vec<pdsim_report::table::Row>,
}

fn compare(args: &Args) -> Result<(), Failure> {
    // The numbers and `--out` are checked before anything is read or built.
    crate::flags::seeds(args.seeds)?;
    crate::flags::synthetic(args.rate, args.requests)?;
    let (all_slo, _) = args.slo.parse()?;
    crate::flags::catalogs(&args.catalog)?;
    // What the flags name, which the results may not replace; what the
    // documents name in turn is kept apart as it is read.
    let mut named = vec![args.scenario.clone()];
    named.extend(args.deployments.iter().cloned());
    named.extend(args.trace.clone());
    named.extend(args.catalog.iter().cloned());
    if let Some(out) = &args.out {
        crate::output::check_out_for(out, &named)?;
    }
    let mut prepared: Vec<Prepared> = Vec::new();
    for d in &args.deployments {
        let mut p = prepare(&args.catalog, &args.scenario, d)?;
        p.client_timeout = args.slo.client_timeout(&p);
        for note in &p.notes {
            eprintln!("{}", pdsim_spec::problem::printable(note));
        }
        prepared.push(p);
    }
    crate::flags::workload_flags(
        &prepared[0],
        args.trace.as_deref(),
        args.rate,
        args.requests,
    )?;
    crate::flags::note_trace_override("compare", &prepared[0], args.trace.as_deref());
    let seeds: Vec<u64> = (0..args.seeds).map(|i| args.seed.wrapping_add(i)).collect();
    // The requests, once per seed for a synthetic shape (the seed draws
    // them), once for all seeds for a trace.
    let synthetic = args.trace.is_none()
        && matches!(
            prepared[0].workload,
            crate::session::DefaultWorkload::Shape(..)
        );
    let mut loads: Vec<Loaded> = Vec::new();
    // An inference-perf configuration (a source with load stages) draws
    // its shuffle, arrivals and lengths from the seed, as a shape does.
    let mut per_seed = synthetic;
    for (i, seed) in seeds.iter().enumerate() {
        if i == 0 || per_seed {
            loads.push(load_all(
                &prepared[0],
                &WorkloadChoice {
                    trace: args.trace.as_deref(),
                    rate: args.rate,
                    requests: args.requests,
                    seed: *seed,
                },
            )?);
            if i == 0 {
                for note in &loads[0].notes {
                    eprintln!("{}", pdsim_spec::problem::printable(note));
                }
                per_seed |= !loads[0].stages.is_empty();
            }
        }
    }
    let names: Vec<String> = prepared.iter().map(|p| p.deployment.clone()).collect();
    let folders = folder_names(&names);
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(default_name(args, &prepared)));
    for p in &prepared {
        named.extend(p.inputs.iter().cloned());
    }
    let staging = Staging::new(&out, "compare", &named)?;
    let tasks: Vec<(usize, usize)> = (0..prepared.len())
        .flat_map(|d| (0..seeds.len()).map(move |s| (d, s)))
        .collect();
    let bar = progress(tasks.len() as u64, "compare");
    let pool = pool("compare", args.jobs)?;
    let results: Vec<Result<crate::session::Outcome, Failure>> = pool.install(|| {
        tasks
            .par_iter()
            .map(|&(d, s)| {
                let p = &prepared[d];
                let load = &loads[if per_seed { s } else { 0 }];
                let slo = args.slo.plan(p, ClassNames::new(&load.names))?;
                let dir = format!("runs/{}/seed{}", folders[d], seeds[s]);
                let mut csv = CsvSink::new(staging.file(&format!("{dir}/requests.csv"))?);
                let mut perfetto = if args.perfetto {
                    Some(PerfettoSink::new(
                        staging.file(&format!("{dir}/perfetto.json"))?,
                        p.pools.iter().map(|x| x.name.clone()).collect(),
                    ))
                } else {
                    None
                };
                let mut sinks: Vec<&mut dyn pdsim_cluster::RecordSink> = vec![&mut csv];
                if let Some(t) = perfetto.as_mut() {
                    sinks.push(t);
                }
                let outcome = simulate(
                    p,
                    &mut scaled(&load.specs, 1.0),
                    How {
                        trace_label: &load.label,
                        seed: seeds[s],
                        check: args.check,
                        slo,
                        gpu_hour_usd: args.slo.gpu_hour_usd,
                        stages: &load.stages,
                    },
                    &mut Fanout(sinks),
                )
                .map_err(|f| {
                    failure(
                        f.code,
                        format!("{}: {}", p.deployment_file.display(), f.message),
                    )
                })?;
                csv.finish()
                    .map_err(|e| failure(2, format!("writing {dir}/requests.csv failed: {e}")))?;
                if let Some(trace) = perfetto {
                    trace.finish().map_err(|e| {
                        failure(2, format!("writing {dir}/perfetto.json failed: {e}"))
                    })?;
                }
                let json = serde_json::to_string_pretty(&outcome.summary)
                    .map_err(|e| failure(2, e))?
                    + "\n";
                staging.write(&format!("{dir}/summary.json"), json)?;
                bar.inc(1);
                Ok(outcome)
            })
            .collect()
    });
    bar.finish_and_clear();
    let mut outcomes = Vec::new();
    for r in results {
        outcomes.push(r?);
    }
    let mut runs: Vec<ComparedRun> = Vec::new();
    let mut it = outcomes.into_iter();
    for p in &prepared {
        let mine: Vec<crate::session::Outcome> = it.by_ref().take(seeds.len()).collect();
        let first = &mine[0];
        let cdf = |m: Metric| {
            first
                .cdfs
                .iter()
                .find(|(k, _)| *k == m)
                .map(|(_, v)| v.clone())
                .unwrap_or_default()
        };
        runs.push(ComparedRun {
            deployment: p.deployment.clone(),
            file: p.deployment_file.display().to_string(),
            ttft_cdf_ms: cdf(Metric::Ttft),
            itl_cdf_ms: cdf(Metric::Itl),
            e2e_cdf_ms: cdf(Metric::E2e),
            series: first.series.clone(),
            summaries: mine
                .into_iter()
                .map(|o| o.summary)
                .collect::<Vec<Summary>>(),
        });
    }
    let table = text_table(&runs);
    let verdict_text = verdict(&runs);
    let doc = compare_report(
        &runs,
        &prepared[0].scenario,
        &loads[0].label,
        seeds.len() as u64,
        all_slo.as_ref(),
    );
    let json = serde_json::to_string_pretty(&CompareJson {
        pdsim_version: env!("CARGO_PKG_VERSION"),
        scenario: &prepared[0].scenario,
        trace: &loads[0].label,
        seeds: seeds.clone(),
        runs: &runs,
        rows: pdsim_report::table::rows(&runs),
    })
    .map_err(|e| failure(2, e))?
        + "\n";
    staging.write("summary.json", json)?;
    staging.write("comparison.txt", &table)?;
    staging.write("report.md", doc.markdown())?;
    staging.write("report.html", doc.html())?;
    for (name, svg) in doc.plots() {
        staging.write(&format!("plots/{name}.svg"), svg)?;
    }
    let mut inputs = vec![args.scenario.clone()];
    for p in &prepared {
        inputs.extend(p.inputs.iter().skip(1).cloned());
    }
    inputs.extend(loads[0].file.clone());
    let seeds_text: Vec<String> = seeds.iter().map(u64::to_string).collect();
    staging.write(
        "README.md",
        results_readme(
            &format!("pdsim compare on {}", prepared[0].scenario),
            &seeds_text.join(", "),
            &inputs,
            &[
                ("summary.json", "every run's summary, and the compared rows"),
                ("comparison.txt", "the side-by-side table as printed"),
                ("report.md", "the report, plots linked"),
                (
                    "report.html",
                    "the same report, self-contained, plots inline",
                ),
                ("plots/", "the plots as SVG"),
                (
                    "runs/<deployment>/seed<N>/",
                    "each run's summary.json and requests.csv",
                ),
                ("README.md", "this file"),
            ],
        ),
    )?;
    let out = staging.commit()?;
    crate::flags::warn_unknown_classes("compare", &args.slo, &loads[0].names);
    let mut stdout = std::io::stdout().lock();
    let _ = write!(
        stdout,
        "{table}\n{}\nresults: {}\n",
        verdict_text.replace("**", ""),
        out.display()
    );
    Ok(())
}
