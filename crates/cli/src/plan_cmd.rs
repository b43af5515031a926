//! `pdsim plan`: for each candidate layout, the highest request rate it
//! sustains within an SLO, the ranking, the Pareto front, and the fewest
//! nodes for a target rate. `--shard I/N` runs one deterministic slice of
//! the layouts; `pdsim plan merge` joins the slices into the whole plan.

use crate::session::{
    Failure, How, Overlay, Prepared, SloArgs, Staging, WithDefaults, WorkloadChoice, failure,
    load_all, poisson, pool, prepare_in, print_failure, progress, results_readme, scaled, simulate,
};
use pdsim_report::plan::{LayoutResult, Plan, PlanQuestion, Probe, plan_report, ranking_table};
use pdsim_report::{ClassNames, Slo};
use pdsim_spec::files::Files;
use pdsim_workload::RequestSpec;
use rayon::prelude::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Args {
    #[command(subcommand)]
    merge: Option<Sub>,
    #[command(flatten)]
    plan: PlanArgs,
}

#[derive(clap::Subcommand, Debug)]
enum Sub {
    /// Join the `plan.json` of every shard into the whole plan and its report.
    Merge {
        /// The shards' result folders (or their plan.json files).
        #[arg(required = true, value_name = "SHARD")]
        parts: Vec<PathBuf>,
        /// The output folder (default: the shards' folder name without its
        /// `--shard-I-of-N`). An existing folder is replaced only when it is
        /// an earlier pdsim result.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
    },
}

#[derive(clap::Args, Debug)]
pub struct PlanArgs {
    /// The Scenario (its cluster bounds the layouts).
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// Candidate deployments.
    #[arg(value_name = "DEPLOYMENT")]
    deployments: Vec<PathBuf>,
    /// Also try every split of each candidate's pools over whole nodes that
    /// fits the scenario's cluster (each pool at least one node).
    #[arg(long)]
    vary_nodes: bool,
    /// Also try every tensor × data parallel shape (powers of two that
    /// divide a node's GPUs) for all pools of each candidate.
    #[arg(long)]
    vary_parallel: bool,
    /// A trace, or an inference-perf configuration (default: the scenario's workload, else the
    /// bundled trace).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// Use only the first N requests of the trace.
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = crate::flags::whole::<usize>)]
    max_requests: Option<usize>,
    /// How a probe reaches its rate: `trace` scales the trace's own arrival
    /// times (keeping its bursts), `poisson` keeps its requests in order
    /// but draws Poisson arrivals at the rate (seeded by --seed).
    #[arg(long, value_enum, default_value_t = Arrivals::Trace)]
    arrivals: Arrivals,
    #[command(flatten)]
    slo: SloArgs,
    /// Share of requests that must meet the SLO for a rate to be sustained.
    #[arg(
        long,
        default_value_t = 0.9,
        value_name = "SHARE",
        allow_negative_numbers = true
    )]
    attainment: f64,
    /// Most simulations per layout in the search.
    #[arg(long, default_value_t = 10, value_name = "N", allow_negative_numbers = true, value_parser = crate::flags::whole::<u32>)]
    max_runs: u32,
    /// A rate to carry: report the fewest nodes per layout that carry it.
    #[arg(long, value_name = "REQ_PER_S", allow_negative_numbers = true)]
    target_rate: Option<f64>,
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = crate::flags::whole::<u64>)]
    seed: u64,
    /// Run one slice of the layouts: `I/N` (0-based I), or `auto` to take
    /// them from a Kubernetes Indexed Job (JOB_COMPLETION_INDEX and
    /// PDSIM_SHARD_COUNT) or a Slurm array (SLURM_ARRAY_TASK_ID and
    /// SLURM_ARRAY_TASK_COUNT); see deploy/README.md.
    #[arg(long, value_name = "I/N|auto")]
    shard: Option<String>,
    /// Parallel simulations (default: the cores). Results do not depend on it.
    #[arg(long, short = 'j', value_name = "N", allow_negative_numbers = true, value_parser = crate::flags::whole::<usize>)]
    jobs: Option<usize>,
    /// The output folder (default:
    /// results/plan--<scenario>--<trace>--<hash>[--shard-I-of-N], the hash
    /// telling apart plans whose inputs or flags differ). An existing folder
    /// is replaced only when it is an earlier pdsim result.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// A user catalog folder. Repeatable.
    #[arg(long, value_name = "DIR")]
    catalog: Vec<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrivals {
    Trace,
    Poisson,
}

pub fn run(args: &Args) -> ExitCode {
    let result = match &args.merge {
        Some(Sub::Merge { parts, out }) => merge(parts, out.as_deref()),
        None => plan(&args.plan),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            print_failure("plan", &f.message);
            ExitCode::from(f.code)
        }
    }
}

/// The most layouts one plan generates with `--vary-nodes` and
/// `--vary-parallel`. Every layout is validated before any is simulated
/// (about 3 ms each in a release build, with its documents kept in memory),
/// and each then takes up to `--max-runs` simulations, so 10,000 layouts
/// are already some 30 s and 160 MB before the first simulation and a job
/// for many shards; past this a plan is refused at once, counted without
/// generating a layout, rather than spending minutes and gigabytes on
/// layouts it could never run. (Two pools over 256 nodes, every parallel
/// shape of an 8-GPU node: 326,400 layouts.)
pub const MAX_LAYOUTS: u64 = 10_000;

/// How many vectors [`splits`] gives for `k` pools over `total` nodes, the
/// binomial coefficient C(total, k) (a split is `k` positive counts and the
/// nodes left unused, summing to `total`), or `cap + 1` once it is more
/// than `cap`: it is counted without being generated, in `min(k, total - k)`
/// steps, so a count in the trillions costs nothing.
pub fn count_splits(k: u64, total: u64, cap: u64) -> u64 {
    if k == 0 || k > total {
        return 0;
    }
    // C(n, i) grows with i up to n/2, so on the shorter side every partial
    // product is at most the result, and once one passes `cap` the result
    // does too.
    let k = k.min(total - k);
    let mut c: u128 = 1;
    for i in 0..u128::from(k) {
        // C(n, i + 1) = C(n, i) * (n - i) / (i + 1), exactly; c is at most
        // `cap` here, so the product stays far inside 128 bits.
        c = c * (u128::from(total) - i) / (i + 1);
        if c > u128::from(cap) {
            return cap.saturating_add(1);
        }
    }
    c as u64
}

/// Every vector of `k` positive node counts summing to at most `total`,
/// in lexicographic order. Generated one after the other (each the
/// smallest after the last), not by recursion over the pools, so a
/// deployment of many pools cannot exhaust the stack; the caller bounds
/// how many there are with [`count_splits`] first.
pub fn splits(k: usize, total: u64) -> Vec<Vec<u64>> {
    let mut out = Vec::new();
    if k == 0 || total < k as u64 {
        return out;
    }
    let mut split = vec![1u64; k];
    let mut sum = k as u64;
    loop {
        out.push(split.clone());
        // The next split raises the last count that can still grow by one
        // and resets every count after it to 1.
        let mut after = 0u64;
        let mut next = None;
        for i in (0..k).rev() {
            let before = sum - after - split[i];
            if before + split[i] + 1 + (k - 1 - i) as u64 <= total {
                next = Some(i);
                break;
            }
            after += split[i];
        }
        let Some(i) = next else {
            return out;
        };
        split[i] += 1;
        for count in &mut split[i + 1..] {
            *count = 1;
        }
        sum = split.iter().sum();
    }
}

/// A candidate: where its document is and how to name it.
struct Candidate {
    /// The layout's name: the deployment's, with the generated split and
    /// shape after `@`.
    name: String,
    path: PathBuf,
    /// The scenario it runs on: the given one, or for a generated layout
    /// on fewer nodes, the same scenario with a cluster of that many nodes
    /// (a deployment lays out its whole cluster).
    scenario: PathBuf,
    source: String,
}

fn candidates(
    args: &PlanArgs,
    scenario: &Path,
    overlay: &mut Overlay,
) -> Result<Vec<Candidate>, Failure> {
    let mut out = Vec::new();
    // Layouts generated so far, over every candidate.
    let mut generated: u64 = 0;
    let (nodes, gpus_per_node) = if args.vary_nodes || args.vary_parallel {
        cluster_shape(scenario)?
    } else {
        (0, 0)
    };
    for d in &args.deployments {
        if !args.vary_nodes && !args.vary_parallel {
            out.push(Candidate {
                name: d.display().to_string(),
                path: d.clone(),
                scenario: scenario.to_path_buf(),
                source: d.display().to_string(),
            });
            continue;
        }
        let text = WithDefaults
            .read(d)
            .map_err(|e| failure(2, format!("{}: {e}", d.display())))?;
        let doc: serde_yaml::Value = pdsim_spec::load::from_str(&text)
            .map_err(|e| failure(1, format!("{}: {e}", d.display())))?;
        let pools: Vec<(String, u64)> = doc
            .get("pools")
            .and_then(|p| p.as_sequence())
            .map(|list| {
                list.iter()
                    .map(|pool| {
                        (
                            pool.get("role")
                                .and_then(|r| r.as_str())
                                .unwrap_or("pool")
                                .to_string(),
                            pool.get("nodes").and_then(|n| n.as_u64()).unwrap_or(1),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let name = doc
            .get("name")
            .and_then(|n| n.as_str())
            .unwrap_or("layout")
            .to_string();
        // Counted before anything is generated: past the limit the plan is
        // refused at once.
        let shape_count = if args.vary_parallel {
            parallel_shapes(gpus_per_node).len() as u64
        } else {
            1
        };
        // Counted exactly up to 2^62 (far past the limit), so the refusal
        // can say how many layouts the flags asked for.
        let split_count = if args.vary_nodes {
            count_splits(pools.len() as u64, nodes, COUNT_CAP)
        } else {
            1
        };
        let count = split_count.saturating_mul(shape_count);
        generated = generated.saturating_add(count);
        if generated > MAX_LAYOUTS {
            return Err(too_many_layouts(
                args,
                d,
                generated,
                pools.len(),
                nodes,
                [split_count, shape_count, count],
            ));
        }
        let node_splits = if args.vary_nodes {
            splits(pools.len(), nodes)
        } else {
            vec![pools.iter().map(|(_, n)| *n).collect()]
        };
        let shapes: Vec<Option<(u64, u64)>> = if args.vary_parallel {
            parallel_shapes(gpus_per_node)
                .into_iter()
                .map(Some)
                .collect()
        } else {
            vec![None]
        };
        for split in &node_splits {
            for shape in &shapes {
                let mut doc = doc.clone();
                let mut tag: String = pools
                    .iter()
                    .zip(split)
                    .map(|((role, _), n)| format!("{}{n}", role.chars().next().unwrap_or('x')))
                    .collect();
                if let Some((tp, dp)) = shape {
                    tag.push_str(&format!("-tp{tp}dp{dp}"));
                }
                if let Some(list) = doc.get_mut("pools").and_then(|p| p.as_sequence_mut()) {
                    for (pool, n) in list.iter_mut().zip(split) {
                        let Some(map) = pool.as_mapping_mut() else {
                            continue;
                        };
                        map.insert("nodes".into(), serde_yaml::Value::from(*n));
                        if let Some((tp, dp)) = shape
                            && let Some(parallel) =
                                map.get_mut("parallel").and_then(|p| p.as_mapping_mut())
                        {
                            parallel.insert("tp".into(), serde_yaml::Value::from(*tp));
                            parallel.insert("dp".into(), serde_yaml::Value::from(*dp));
                            if *dp > 1 {
                                parallel.insert("dp_local".into(), serde_yaml::Value::from(*dp));
                            } else {
                                parallel.remove("dp_local");
                            }
                        }
                    }
                }
                if let Some(map) = doc.as_mapping_mut() {
                    map.insert("name".into(), format!("{name}@{tag}").into());
                }
                let stem = d
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let path = d.with_file_name(format!("{stem}@{tag}.yaml"));
                let yaml = serde_yaml::to_string(&doc).map_err(|e| failure(2, e))?;
                overlay.docs.insert(path.clone(), yaml);
                let used: u64 = split.iter().sum();
                let scenario = if used == nodes {
                    scenario.to_path_buf()
                } else {
                    smaller_cluster(scenario, used, overlay)?
                };
                let mut source = format!("{} with pool nodes {split:?}", d.display());
                if let Some((tp, dp)) = shape {
                    source.push_str(&format!(", every pool tp {tp} dp {dp}"));
                }
                out.push(Candidate {
                    name: format!("{name}@{tag}"),
                    path,
                    scenario,
                    source,
                });
            }
        }
    }
    Ok(out)
}

/// The most [`count_splits`] counts exactly when `plan` sizes a plan.
const COUNT_CAP: u64 = 1 << 62;

/// The refusal of a plan whose generated layouts would pass
/// [`MAX_LAYOUTS`] at candidate `d`, naming the flags and what multiplies:
/// `generated` layouts so far, `d`'s pools over `nodes`, and its `[node
/// splits, parallel shapes, layouts]`.
fn too_many_layouts(
    args: &PlanArgs,
    d: &Path,
    generated: u64,
    pools: usize,
    nodes: u64,
    [split_count, shape_count, count]: [u64; 3],
) -> Failure {
    let shown = |n: u64| {
        if n > COUNT_CAP {
            format!("more than {COUNT_CAP}")
        } else {
            n.to_string()
        }
    };
    let mut flags = Vec::new();
    let mut factors = Vec::new();
    if args.vary_nodes {
        flags.push("--vary-nodes");
        factors.push(format!(
            "{} splits of its {pools} pools over the scenario's {nodes} nodes",
            shown(split_count)
        ));
    }
    if args.vary_parallel {
        flags.push("--vary-parallel");
        factors.push(format!("{shape_count} tensor × data parallel shapes"));
    }
    failure(
        2,
        format!(
            "{}: the candidates would generate at least {} layouts, more than the {MAX_LAYOUTS} a plan tries; {} alone gives {} ({}); give a scenario with fewer nodes, a deployment with fewer pools, or fewer of these flags",
            flags.join(" "),
            shown(generated),
            d.display(),
            shown(count),
            factors.join(" × ")
        ),
    )
}

/// Every (tp, dp) of powers of two whose product divides a node's GPUs:
/// the parallel layouts `--vary-parallel` tries (pipeline parallelism
/// stays 1; the validation refuses what does not fit or is not allowed).
///
/// The scenario's `gpus_per_node` is read here before validation, so any
/// u64 reaches this: the products are checked, as doubling past 2^63 would
/// overflow (a panic, or a wrap to 0 and a loop that never ends).
pub fn parallel_shapes(gpus_per_node: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut tp: u64 = 1;
    while tp <= gpus_per_node {
        let mut dp: u64 = 1;
        while let Some(width) = tp.checked_mul(dp).filter(|&w| w <= gpus_per_node) {
            if gpus_per_node.is_multiple_of(width) {
                out.push((tp, dp));
            }
            let Some(next) = dp.checked_mul(2) else {
                break;
            };
            dp = next;
        }
        let Some(next) = tp.checked_mul(2) else {
            break;
        };
        tp = next;
    }
    out
}

/// The scenario with a cluster of `nodes` nodes, in memory beside it.
fn smaller_cluster(scenario: &Path, nodes: u64, overlay: &mut Overlay) -> Result<PathBuf, Failure> {
    let stem = scenario
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let path = scenario.with_file_name(format!("{stem}@{nodes}-nodes.yaml"));
    if overlay.docs.contains_key(&path) {
        return Ok(path);
    }
    let text = WithDefaults
        .read(scenario)
        .map_err(|e| failure(2, format!("{}: {e}", scenario.display())))?;
    let mut doc: serde_yaml::Value = pdsim_spec::load::from_str(&text)
        .map_err(|e| failure(1, format!("{}: {e}", scenario.display())))?;
    if let Some(cluster) = doc.get_mut("cluster").and_then(|c| c.as_mapping_mut()) {
        cluster.insert("nodes".into(), serde_yaml::Value::from(nodes));
    }
    let yaml = serde_yaml::to_string(&doc).map_err(|e| failure(2, e))?;
    overlay.docs.insert(path.clone(), yaml);
    Ok(path)
}

fn cluster_shape(scenario: &Path) -> Result<(u64, u64), Failure> {
    let text = WithDefaults
        .read(scenario)
        .map_err(|e| failure(2, format!("{}: {e}", scenario.display())))?;
    let doc: serde_yaml::Value = pdsim_spec::load::from_str(&text)
        .map_err(|e| failure(1, format!("{}: {e}", scenario.display())))?;
    let get = |key: &str| {
        doc.get("cluster")
            .and_then(|c| c.get(key))
            .and_then(|n| n.as_u64())
            .ok_or_else(|| {
                failure(
                    1,
                    format!("{}: cluster.{key} is missing", scenario.display()),
                )
            })
    };
    Ok((get("nodes")?, get("gpus_per_node")?))
}

/// The bounded search of one layout: start at the trace's own rate, double
/// or halve until the answer flips, then bisect (geometrically) between the
/// highest sustained and the lowest unsustained rate.
fn search(
    p: &Prepared,
    specs: &[RequestSpec],
    label: &str,
    names: &[String],
    args: &PlanArgs,
    base_rate: f64,
    bar: &indicatif::ProgressBar,
) -> Result<Vec<Probe>, Failure> {
    let mut probes: Vec<Probe> = Vec::new();
    let mut probe = |speedup: f64| -> Result<bool, Failure> {
        let slo = args.slo.plan(p, ClassNames::new(names))?;
        let outcome = simulate(
            p,
            &mut match args.arrivals {
                Arrivals::Trace => Box::new(scaled(specs, speedup))
                    as Box<dyn Iterator<Item = Result<RequestSpec, pdsim_workload::TraceError>>>,
                Arrivals::Poisson => Box::new(poisson(specs, base_rate * speedup, args.seed)),
            },
            How {
                trace_label: label,
                seed: args.seed,
                check: false,
                slo,
                gpu_hour_usd: args.slo.gpu_hour_usd,
                // Rates are searched by scaling the arrivals, which moves
                // requests across the stages' times: no per-stage results.
                stages: &[],
            },
            &mut pdsim_report::Fanout(Vec::new()),
        )?;
        let s = &outcome.summary;
        let met = s.goodput.as_ref().map_or(0.0, |g| g.met_share);
        let sustained = met >= args.attainment;
        let over = |n: fn(&pdsim_report::slo::Missed) -> u64| {
            s.goodput
                .as_ref()
                .filter(|g| g.requests > 0)
                .map_or(0.0, |g| n(&g.missed) as f64 / g.requests as f64)
        };
        let ttft_mostly = s
            .ttft_share
            .largest()
            .map(|(name, share)| (name.to_string(), share));
        probes.push(Probe {
            speedup,
            rate_req_s: base_rate * speedup,
            met_share: met,
            completed_share: s.requests.completed as f64 / s.requests.total.max(1) as f64,
            ttft_ms_p99: s.ttft_ms.p99,
            itl_ms_p99: s.itl_ms.p99,
            tpot_ms_p99: s.tpot_ms.p99,
            output_tokens_per_s: s.throughput.output_tokens_per_s,
            sustained,
            over_ttft_share: over(|m| m.ttft),
            over_itl_share: over(|m| m.itl),
            over_e2e_share: over(|m| m.e2e),
            ttft_mostly,
        });
        bar.inc(1);
        Ok(sustained)
    };
    let max = args.max_runs.max(1);
    let mut runs = 0;
    let (mut lo, mut hi): (Option<f64>, Option<f64>) = (None, None);
    let mut s = 1.0;
    while runs < max && (lo.is_none() || hi.is_none()) {
        runs += 1;
        if probe(s)? {
            lo = Some(s);
            s *= 2.0;
        } else {
            hi = Some(s);
            s /= 2.0;
        }
        if !(1.0 / 4096.0..=4096.0).contains(&s) {
            break;
        }
    }
    while runs < max
        && let (Some(l), Some(h)) = (lo, hi)
    {
        runs += 1;
        let mid = (l * h).sqrt();
        if probe(mid)? {
            lo = Some(mid);
        } else {
            hi = Some(mid);
        }
    }
    bar.inc(u64::from(max - runs));
    Ok(probes)
}

fn plan(args: &PlanArgs) -> Result<(), Failure> {
    let Some(scenario) = &args.scenario else {
        return Err(failure(2, "give --scenario FILE (or `plan merge SHARD…`)"));
    };
    if args.deployments.is_empty() {
        return Err(failure(2, "give at least one candidate deployment"));
    }
    let (all, named) = args.slo.parse()?;
    if all.is_none() && named.is_empty() {
        return Err(failure(2, "a plan needs an SLO: --slo ttft_ms=…,itl_ms=…"));
    }
    if !(args.attainment > 0.0 && args.attainment <= 1.0) {
        return Err(failure(
            2,
            format!(
                "--attainment {}: must be in (0, 1]",
                crate::flags::shown(args.attainment)
            ),
        ));
    }
    // A plan's probes and ranking carry no cost, so a price would be
    // silently ignored.
    if let Some(price) = args.slo.gpu_hour_usd {
        return Err(failure(
            2,
            format!(
                "--gpu-hour-usd {}: cannot apply to a plan, which ranks layouts by sustained requests per GPU and reports no cost; use it with `run` or `compare`",
                crate::flags::shown(price)
            ),
        ));
    }
    // The numbers and `--out` are checked before anything is read or run.
    crate::flags::max_runs(args.max_runs)?;
    if let Some(n) = args.max_requests {
        crate::flags::max_requests(n)?;
    }
    if let Some(rate) = args.target_rate {
        crate::flags::rate("--target-rate", rate)?;
    }
    let shard = args.shard.as_deref().map(crate::flags::shard).transpose()?;
    crate::flags::catalogs(&args.catalog)?;
    // What the flags name, which the plan may not replace; what the
    // documents name in turn is kept apart as it is read.
    let mut apart = vec![scenario.clone()];
    apart.extend(args.deployments.iter().cloned());
    apart.extend(args.trace.clone());
    apart.extend(args.catalog.iter().cloned());
    if let Some(out) = &args.out {
        crate::output::check_out_for(out, &apart)?;
    }
    let mut overlay = Overlay::default();
    let cands = candidates(args, scenario, &mut overlay)?;
    // Every layout is validated (cheap); only this shard's are simulated.
    let mut layouts: Vec<(Candidate, Result<Prepared, String>)> = Vec::new();
    for c in cands {
        let p = prepare_in(&overlay, &args.catalog, &c.scenario, &c.path)
            .map(|mut p| {
                p.client_timeout = args.slo.client_timeout(&p);
                p
            })
            .map_err(|f| f.message.lines().collect::<Vec<_>>().join("; "));
        layouts.push((c, p));
    }
    let Some(first) = layouts.iter().find_map(|(_, p)| p.as_ref().ok()) else {
        let reasons: Vec<String> = layouts
            .iter()
            .filter_map(|(c, p)| p.as_ref().err().map(|e| format!("{}: {e}", c.source)))
            .collect();
        return Err(failure(
            1,
            format!("no candidate layout is valid:\n{}", reasons.join("\n")),
        ));
    };
    // A plan scales a trace's arrivals; a workload shape has none until
    // `run --rate` draws them, so it is refused rather than asked for flags
    // `plan` does not have.
    if args.trace.is_none()
        && let crate::session::DefaultWorkload::Shape(name, _) = &first.workload
    {
        return Err(failure(
            2,
            format!(
                "the scenario's workload is the shape `{name}`, and a plan replays a trace at scaled rates; give --trace FILE"
            ),
        ));
    }
    crate::flags::note_trace_override("plan", first, args.trace.as_deref());
    let mut loaded = load_all(
        first,
        &WorkloadChoice {
            trace: args.trace.as_deref(),
            rate: None,
            requests: None,
            seed: args.seed,
        },
    )?;
    for note in &loaded.notes {
        eprintln!("{}", pdsim_spec::problem::printable(note));
    }
    if let Some(n) = args.max_requests {
        if n > loaded.specs.len() {
            eprintln!(
                "pdsim plan: note: --max-requests {n}: the trace has only {} requests, so all of them are used",
                loaded.specs.len()
            );
        }
        loaded.specs.truncate(n);
    }
    if loaded.specs.len() < 2 {
        return Err(failure(
            1,
            "the trace needs at least two requests to have a rate",
        ));
    }
    let span_s = loaded
        .specs
        .last()
        .map(|l| {
            l.arrival
                .as_ns()
                .saturating_sub(loaded.specs[0].arrival.as_ns())
        })
        .unwrap_or(0) as f64
        / 1e9;
    if span_s <= 0.0 {
        return Err(failure(
            1,
            "every request of the trace arrives at once: it has no rate to scale",
        ));
    }
    let base_rate = loaded.specs.len() as f64 / span_s;
    // The trace's bursts: its distinct arrival times and the most requests
    // at one of them (the specs are in arrival order).
    let (mut instants, mut most, mut run) = (0u64, 0u64, 0u64);
    for (i, spec) in loaded.specs.iter().enumerate() {
        if i == 0 || spec.arrival != loaded.specs[i - 1].arrival {
            instants += 1;
            run = 0;
        }
        run += 1;
        most = most.max(run);
    }
    let slo_text = {
        let mut parts: Vec<String> = all.iter().map(Slo::describe).collect();
        parts.extend(named.iter().map(|(k, v)| format!("{k}: {}", v.describe())));
        parts.join("; ")
    };
    let question = PlanQuestion {
        scenario: first.scenario.clone(),
        trace: loaded.label.clone(),
        requests: loaded.specs.len() as u64,
        trace_rate_req_s: base_rate,
        arrivals: match args.arrivals {
            Arrivals::Trace => "trace",
            Arrivals::Poisson => "poisson",
        }
        .to_string(),
        slo: slo_text,
        slo_all: all,
        attainment: args.attainment,
        arrival_instants: instants,
        max_arrivals_at_one_instant: most,
        seed: args.seed,
        max_runs_per_layout: args.max_runs,
        target_rate_req_s: args.target_rate,
    };
    let names: Vec<String> = layouts
        .iter()
        .map(|(c, p)| match p {
            Ok(p) if !args.vary_nodes && !args.vary_parallel => p.deployment.clone(),
            _ => c.name.clone(),
        })
        .collect();
    let mine: Vec<usize> = (0..layouts.len())
        .filter(|i| shard.is_none_or(|[k, n]| i % n == k))
        .collect();
    if let Some([k, n]) = shard
        && mine.is_empty()
    {
        eprintln!(
            "pdsim plan: note: --shard {k}/{n}: there are only {} layouts, so this shard has none to run",
            layouts.len()
        );
    }
    // The folder is checked before the simulations, not after them.
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("results").join(default_name(args, &question, shard)));
    crate::output::check_out_for(&out, &apart)?;
    let bar = progress(mine.len() as u64 * u64::from(args.max_runs.max(1)), "plan");
    let pool = pool("plan", args.jobs)?;
    let results: Vec<Result<LayoutResult, Failure>> = pool.install(|| {
        mine.par_iter()
            .map(|&i| {
                let (c, p) = &layouts[i];
                let mut result = LayoutResult {
                    index: i,
                    name: names[i].clone(),
                    source: c.source.clone(),
                    nodes: 0,
                    gpus: 0,
                    refused: None,
                    max_rate_req_s: None,
                    probes: Vec::new(),
                    deploy: Default::default(),
                    deploy_refused: None,
                };
                match p {
                    Err(reason) => {
                        result.refused = Some(reason.clone());
                        bar.inc(u64::from(args.max_runs.max(1)));
                    }
                    Ok(p) => {
                        result.nodes = p.nodes;
                        result.gpus = p.gpus;
                        result.probes = search(
                            p,
                            &loaded.specs,
                            &loaded.label,
                            &loaded.names,
                            args,
                            base_rate,
                            &bar,
                        )
                        .map_err(|f| failure(f.code, format!("{}: {}", c.source, f.message)))?;
                        result.max_rate_req_s = result.best().map(|b| b.rate_req_s);
                        // What to deploy, for a layout worth deploying.
                        if result.max_rate_req_s.is_some() {
                            match crate::export_cmd::export_files(
                                &overlay,
                                &args.catalog,
                                &c.scenario,
                                &c.path,
                                None,
                            ) {
                                Ok(exported) => result.deploy = exported.files,
                                Err(f) => {
                                    result.deploy_refused =
                                        Some(f.message.lines().collect::<Vec<_>>().join("; "))
                                }
                            }
                        }
                    }
                }
                Ok(result)
            })
            .collect()
    });
    bar.finish_and_clear();
    let mut done = Vec::new();
    for r in results {
        done.push(r?);
    }
    let plan = Plan {
        pdsim_version: env!("CARGO_PKG_VERSION").to_string(),
        question,
        layout_names: names,
        shard,
        layouts: done,
    };
    let mut inputs = vec![scenario.clone()];
    inputs.extend(args.deployments.iter().cloned());
    inputs.extend(loaded.file.clone());
    apart.extend(loaded.file.clone());
    write_plan(&plan, &out, &inputs, &apart)?;
    crate::flags::warn_unknown_classes("plan", &args.slo, &loaded.names);
    Ok(())
}

/// The default results folder name: the scenario and trace in words and a
/// short hash of every flag and input that changes the plan, the same for
/// every shard of one plan (which then adds `--shard-I-of-N`).
fn default_name(args: &PlanArgs, question: &PlanQuestion, shard: Option<[usize; 2]>) -> String {
    use crate::flags::{identity, safe_part, short_hash, trace_stem};
    let mut parts = vec!["plan".to_string()];
    parts.extend(
        args.scenario
            .iter()
            .map(|s| format!("scenario {}", identity(s))),
    );
    parts.extend(
        args.deployments
            .iter()
            .map(|d| format!("deployment {}", identity(d))),
    );
    parts.extend([
        format!(
            "vary nodes {} parallel {}",
            args.vary_nodes, args.vary_parallel
        ),
        format!(
            "trace {}",
            args.trace
                .as_deref()
                .map(identity)
                .unwrap_or_else(|| question.trace.clone())
        ),
        format!("max requests {:?}", args.max_requests),
        format!("arrivals {}", question.arrivals),
        format!("attainment {}", args.attainment),
        format!("max runs {}", args.max_runs),
        format!("target rate {:?}", args.target_rate),
        format!("seed {}", args.seed),
    ]);
    parts.extend(crate::flags::slo_and_catalog_parts(
        &args.slo,
        &args.catalog,
    ));
    let mut name = format!(
        "plan--{}--{}--{}",
        safe_part(&question.scenario, 40),
        trace_stem(Path::new(&question.trace)),
        short_hash(&parts)
    );
    if let Some([i, n]) = shard {
        name.push_str(&format!("--shard-{i}-of-{n}"));
    }
    name
}

/// The default folder of a merged plan: the shards' own folder name
/// without its `--shard-I-of-N` when every shard agrees on it (so merging
/// the shards of a default-named plan gives the unsharded plan's name),
/// else a name from the merged plan's question.
fn merged_name(parts: &[PathBuf], plan: &Plan) -> String {
    let unsharded = |part: &PathBuf| -> Option<String> {
        let dir = if part.is_dir() {
            part.as_path()
        } else {
            part.parent()?
        };
        let name = dir.file_name()?.to_str()?;
        let (base, tail) = name.rsplit_once("--shard-")?;
        let (i, n) = tail.split_once("-of-")?;
        (i.parse::<usize>().is_ok() && n.parse::<usize>().is_ok()).then(|| base.to_string())
    };
    let bases: Vec<Option<String>> = parts.iter().map(unsharded).collect();
    if let Some(Some(first)) = bases.first()
        && bases.iter().all(|b| b.as_ref() == Some(first))
    {
        return first.clone();
    }
    let question = serde_json::to_string(&plan.question).unwrap_or_default();
    format!(
        "plan--{}--{}--{}",
        crate::flags::safe_part(&plan.question.scenario, 40),
        crate::flags::trace_stem(Path::new(&plan.question.trace)),
        crate::flags::short_hash(&[question, plan.layout_names.join("\n")])
    )
}

/// Writes `plan` to `out`: `inputs` are listed with their digests in the
/// README, and `out` may not be or hold one of `apart` (the files and
/// folders the command reads).
fn write_plan(
    plan: &Plan,
    out: &Path,
    inputs: &[PathBuf],
    apart: &[PathBuf],
) -> Result<(), Failure> {
    let staging = Staging::new(out, "plan", apart)?;
    let json = serde_json::to_string_pretty(plan).map_err(|e| failure(2, e))? + "\n";
    staging.write("plan.json", &json)?;
    let table = ranking_table(plan);
    let mut files = vec![(
        "plan.json",
        "every layout's search: each probe's rate, SLO attainment and latencies",
    )];
    if plan.shard.is_none() {
        let doc = plan_report(plan);
        staging.write("report.md", doc.markdown())?;
        staging.write("report.html", doc.html())?;
        for (name, svg) in doc.plots() {
            staging.write(&format!("plots/{name}.svg"), svg)?;
        }
        files.extend([
            (
                "report.md",
                "the ranking, the Pareto front and latency against rate",
            ),
            (
                "report.html",
                "the same report, self-contained, plots inline",
            ),
            ("plots/", "the plots as SVG"),
        ]);
        if let (Some(l), _) = plan.deployable() {
            for (name, text) in &l.deploy {
                staging.write(&format!("deploy/{name}"), text)?;
            }
            files.push((
                "deploy/",
                "what deploys the best-ranked layout on llm-d (pdsim export's files: Helm values, vllm serve commands)",
            ));
        }
    }
    files.push(("README.md", "this file"));
    staging.write(
        "README.md",
        results_readme(
            &format!("pdsim plan on {}", plan.question.scenario),
            &plan.question.seed.to_string(),
            inputs,
            &files,
        ),
    )?;
    let out = staging.commit()?;
    let mut stdout = std::io::stdout().lock();
    let what = match plan.shard {
        Some([i, n]) => format!(
            "shard {i}/{n}: {} of {} layouts; join the shards with `pdsim plan merge`\n",
            plan.layouts.len(),
            plan.layout_names.len()
        ),
        None => String::new(),
    };
    // The whole plan's explanations, each after a blank line when there
    // is one; a shard has none (its merge says them).
    let section = |heading: &str, text: String| {
        if plan.shard.is_some() || text.is_empty() {
            String::new()
        } else {
            format!("\n{heading}{text}")
        }
    };
    let unsustained = section(
        "Layouts that sustain no rate:\n",
        pdsim_report::plan::unsustained(plan),
    );
    let deploy = section("", pdsim_report::plan::what_to_deploy(plan));
    let _ = write!(
        stdout,
        "{table}{unsustained}{deploy}\n{what}results: {}\n",
        out.display()
    );
    Ok(())
}

fn merge(parts: &[PathBuf], out: Option<&Path>) -> Result<(), Failure> {
    let mut plans = Vec::new();
    for part in parts {
        let file = if part.is_dir() {
            part.join("plan.json")
        } else {
            part.clone()
        };
        let text = crate::disk::read_limited(&file, crate::disk::MAX_PLAN_BYTES)
            .and_then(pdsim_spec::files::decode)
            .map_err(|e| failure(2, format!("{}: {e}", file.display())))?;
        let plan: Plan = serde_json::from_str(&text).map_err(|e| {
            let why = pdsim_spec::problem::shorten(&e.to_string()).into_owned();
            failure(1, format!("{}: not a pdsim plan: {why}", file.display()))
        })?;
        plans.push(plan);
    }
    let plan = Plan::merge(plans).map_err(|e| failure(1, e))?;
    let out = out
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("results").join(merged_name(parts, &plan)));
    // A shard is a pdsim result, which --out may replace; but not while it
    // is what is being merged.
    write_plan(&plan, &out, parts, parts)
}

#[cfg(test)]
mod tests {
    use super::{MAX_LAYOUTS, count_splits, parallel_shapes, splits};

    /// The recursive enumeration `splits` replaced, as the reference.
    fn splits_by_recursion(k: usize, total: u64) -> Vec<Vec<u64>> {
        fn go(k: usize, left: u64, prefix: &mut Vec<u64>, out: &mut Vec<Vec<u64>>) {
            if k == 0 {
                out.push(prefix.clone());
                return;
            }
            for n in 1..=left.saturating_sub(k as u64 - 1) {
                prefix.push(n);
                go(k - 1, left - n, prefix, out);
                prefix.pop();
            }
        }
        let mut out = Vec::new();
        if k > 0 && total >= k as u64 {
            go(k, total, &mut Vec::new(), &mut out);
        }
        out
    }

    #[test]
    fn splits_are_counted_without_generating_them_and_generated_in_order() {
        for k in 0..6 {
            for total in 0..12 {
                let all = splits(k, total);
                assert_eq!(all, splits_by_recursion(k, total), "k {k} total {total}");
                assert_eq!(
                    count_splits(k as u64, total, MAX_LAYOUTS),
                    all.len() as u64,
                    "k {k} total {total}"
                );
            }
        }
        // Two pools over 256 nodes: C(256, 2).
        assert_eq!(count_splits(2, 256, 1 << 62), 32_640);
        // Past the cap the count says only that, at once, however large.
        assert_eq!(count_splits(2, 256, MAX_LAYOUTS), MAX_LAYOUTS + 1);
        assert_eq!(count_splits(50, u64::MAX, MAX_LAYOUTS), MAX_LAYOUTS + 1);
        assert_eq!(count_splits(u64::MAX - 1, u64::MAX, 1 << 62), 1 << 62 | 1);
        // Every pool on one node, as many pools as nodes: one split, made
        // without a frame of recursion a pool.
        assert_eq!(count_splits(200_000, 200_000, MAX_LAYOUTS), 1);
        assert_eq!(splits(200_000, 200_000), vec![vec![1; 200_000]]);
    }

    #[test]
    fn parallel_shapes_of_any_node_size_end() {
        // Doubling past 2^63 overflowed (a wrap to 0 looped for ever).
        let shapes = parallel_shapes(u64::MAX);
        assert_eq!(shapes, vec![(1, 1)]);
        let shapes = parallel_shapes(1 << 63);
        assert_eq!(shapes.len(), 64 * 65 / 2);
        assert!(parallel_shapes(0).is_empty());
    }

    #[test]
    fn node_splits_give_each_pool_a_node_and_fit_the_cluster() {
        assert_eq!(
            splits(2, 4),
            vec![
                vec![1, 1],
                vec![1, 2],
                vec![1, 3],
                vec![2, 1],
                vec![2, 2],
                vec![3, 1]
            ]
        );
        assert_eq!(splits(1, 3), vec![vec![1], vec![2], vec![3]]);
        assert!(splits(3, 2).is_empty());
    }

    #[test]
    fn parallel_shapes_divide_the_node() {
        let shapes = parallel_shapes(8);
        assert_eq!(shapes.len(), 10);
        assert!(shapes.contains(&(8, 1)) && shapes.contains(&(1, 8)) && shapes.contains(&(2, 4)));
        assert!(shapes.iter().all(|(t, d)| 8u64.is_multiple_of(t * d)));
    }
}
