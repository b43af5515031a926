//! What every command does before and around a simulation: validate a
//! scenario and a deployment, build the cluster, open the request source,
//! run it through sinks, and write results atomically.

use pdsim_cluster::{Cluster, RecordSink};
use pdsim_report::series::{PoolSeries, SeriesSink};
use pdsim_report::{Aggregator, ClassNames, Metric, PoolInfo, RunInfo, Slo, SloPlan, Summary};
use pdsim_spec::files::{FileKind, Files, ReadError};
use pdsim_spec::validate::{Request, validate};
use pdsim_workload::{RequestSource, RequestSpec, StagePlan, Synthetic, TraceError, TraceReader};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use crate::disk::DiskFiles;

pub const DEFAULT_SCENARIO: &str = "builtin:scenarios/default.yaml";
pub const DEFAULT_DEPLOYMENT: &str = "builtin:deployments/default.yaml";
pub const DEFAULT_TRACE: &str = "builtin:traces/default.jsonl";

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
pub struct WithDefaults;

/// [`WithDefaults`] with documents generated in memory at given paths —
/// beside their base file, so relative references (a router's config)
/// still resolve: `plan`'s generated layouts, `calibrate`'s pairs with a
/// run's limits and its scenarios naming a candidate set.
#[derive(Default)]
pub struct Overlay {
    pub docs: BTreeMap<PathBuf, String>,
}

impl Files for Overlay {
    fn kind(&self, path: &Path) -> FileKind {
        if self.docs.contains_key(path) {
            FileKind::File
        } else {
            WithDefaults.kind(path)
        }
    }
    fn read(&self, path: &Path) -> Result<String, ReadError> {
        match self.docs.get(path) {
            Some(text) => Ok(text.clone()),
            None => WithDefaults.read(path),
        }
    }
    fn list(&self, path: &Path) -> Vec<String> {
        WithDefaults.list(path)
    }
}

pub fn embedded(path: &Path) -> Option<&'static str> {
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

/// Why a command stops: the exit code and what to print.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

/// Prints a failure to stderr: the problems as they are, the last line
/// after the command's name.
pub fn print_failure(command: &str, message: &str) {
    let message = pdsim_spec::problem::printable(message);
    let mut lines: Vec<&str> = message.lines().collect();
    let last = lines.pop().unwrap_or("");
    for line in lines {
        eprintln!("{line}");
    }
    eprintln!("pdsim {command}: {last}");
}

pub fn failure(code: u8, message: impl std::fmt::Display) -> Failure {
    Failure {
        code,
        message: message.to_string(),
    }
}

/// Where requests come from when no trace is given.
#[derive(Clone, Debug)]
pub enum DefaultWorkload {
    Trace(PathBuf),
    Shape(String, pdsim_spec::catalog::Shape),
    Bundled,
}

/// A validated deployment on a scenario, built and ready to run.
pub struct Prepared {
    pub cluster: Cluster,
    pub deployment_file: PathBuf,
    pub deployment: String,
    pub scenario: String,
    pub pools: Vec<PoolInfo>,
    pub engines: u64,
    pub gpus: u64,
    /// Whole nodes the deployment's GPUs occupy.
    pub nodes: u64,
    /// Problems that did not stop the run (warnings, notes), to print.
    pub notes: Vec<String>,
    pub workload: DefaultWorkload,
    pub trace_header: Option<pdsim_spec::scenario::TraceHeader>,
    /// What the scenario states of its own trace, checked when that trace
    /// is replayed: its SHA-256 and its number of rows, with the scenario
    /// file they are stated in.
    pub trace_declared: Option<(PathBuf, Option<String>, Option<u64>)>,
    /// Files the run read (for the digests in the results' README).
    pub inputs: Vec<PathBuf>,
    /// How long each client waits before it gives up: the scenario's
    /// `workload.client_timeout_s`, or `--client-timeout-s`
    /// ([`SloArgs::client_timeout`]); `None` for clients that wait for ever.
    pub client_timeout: Option<pdsim_core::SimDuration>,
}

/// Validates and builds; refusals come back as a failure listing every
/// problem.
pub fn prepare(
    catalog_dirs: &[PathBuf],
    scenario_path: &Path,
    deployment_path: &Path,
) -> Result<Prepared, Failure> {
    prepare_in(&WithDefaults, catalog_dirs, scenario_path, deployment_path)
}

/// [`prepare`] reading documents through `files` (the plan's generated
/// layouts live in memory).
pub fn prepare_in(
    files: &dyn Files,
    catalog_dirs: &[PathBuf],
    scenario_path: &Path,
    deployment_path: &Path,
) -> Result<Prepared, Failure> {
    let mut report = validate(&Request {
        files,
        catalog_dirs: catalog_dirs.to_vec(),
        scenario: Some(scenario_path.to_path_buf()),
        documents: vec![deployment_path.to_path_buf()],
    });
    let clusters = crate::validate_cmd::check_runnable(files, &mut report);
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    if report.io_error {
        return Err(failure(2, problems.join("\n")));
    }
    let (Some(scenario), Some(bundle), Some(cluster)) = (
        report.scenario.as_ref(),
        report.deployments.first(),
        clusters.into_iter().next(),
    ) else {
        let failed = if report.scenario.is_none() {
            format!("the scenario {} did not resolve", scenario_path.display())
        } else {
            format!(
                "the deployment {} did not pass validation",
                deployment_path.display()
            )
        };
        let last =
            crate::validate_cmd::refusal(&report.problems, "the documents are invalid", &failed);
        let mut lines = problems;
        lines.push(last);
        return Err(failure(1, lines.join("\n")));
    };
    let mut notes = problems;
    let mut inputs = vec![scenario_path.to_path_buf(), deployment_path.to_path_buf()];
    if let Some(block) = &bundle.deployment.router {
        let base = deployment_path.parent().unwrap_or(Path::new(""));
        if let Some(config) = &block.endpoint_picker_config {
            inputs.push(base.join(config));
        }
    }
    // The specification routes a deployment without a router block with the
    // EPP's built-in configuration, which has no P/D profile: say so, since
    // a user who wrote prefill pools most likely meant them to be used.
    if bundle.deployment.router.is_none()
        && bundle.deployment.pools.iter().any(|p| p.role == "prefill")
    {
        notes.push(format!(
            "{}: note: no router block, so the EPP's built-in configuration routes every request whole to any pod and none is disaggregated; name an EndpointPickerConfig with a disagg-profile-handler under `router` to run P/D",
            deployment_path.display()
        ));
    }
    if let Some(why) = cluster.epp.never_disaggregates()
        && bundle.deployment.pools.iter().any(|p| p.role == "prefill")
    {
        notes.push(format!(
            "{}: note: {why}; every request is served whole on a decode pod and the prefill \
             pools stay idle",
            cluster.epp.config_origin
        ));
    }
    for (i, pool) in cluster.pools.iter().enumerate() {
        if pool.cost_model == "linear" {
            notes.push(format!(
                "{}: note: pools[{i}] is priced by the fitted linear cost model, whose four terms \
                 (linear_step_us, linear_prefill_token_us, linear_decode_token_us, \
                 linear_kv_read_token_us) the scenario's coefficient sets give for it, not by \
                 the roofline",
                scenario_path.display()
            ));
        }
    }
    let engines: u64 = cluster.pools.iter().map(|p| p.pods as u64).sum();
    let pools: Vec<PoolInfo> = bundle
        .deployment
        .pools
        .iter()
        .zip(&bundle.layouts)
        .enumerate()
        .map(|(i, (pool, layout))| PoolInfo {
            // Pools have no names: a pool is its role, numbered when a
            // role repeats (`pools[i]` in the document).
            name: if bundle
                .deployment
                .pools
                .iter()
                .filter(|q| q.role == pool.role)
                .count()
                > 1
            {
                format!("{}{i}", pool.role)
            } else {
                pool.role.clone()
            },
            role: pool.role.clone(),
            cost_model: cluster.pools[i].cost_model.to_string(),
            gpus: layout
                .cluster
                .as_ref()
                .map(|c| c.engines.saturating_mul(layout.gpus_per_engine))
                .unwrap_or(0)
                .min(u64::MAX as u128) as u64,
        })
        .collect();
    let gpus: u64 = pools.iter().map(|p| p.gpus).sum();
    let nodes = gpus.div_ceil(cluster.gpus_per_node.max(1));
    let workload = if let Some(path) = &scenario.trace_path {
        inputs.push(path.clone());
        DefaultWorkload::Trace(path.clone())
    } else if let Some(shape) = &scenario.shape {
        DefaultWorkload::Shape(shape.origin.name.clone(), shape.value.clone())
    } else {
        inputs.push(PathBuf::from(DEFAULT_TRACE));
        DefaultWorkload::Bundled
    };
    Ok(Prepared {
        cluster,
        deployment_file: deployment_path.to_path_buf(),
        deployment: bundle.deployment.name.clone(),
        scenario: scenario.scenario.name.clone(),
        pools,
        engines,
        gpus,
        nodes,
        notes,
        workload,
        trace_header: scenario
            .scenario
            .workload
            .as_ref()
            .and_then(|w| w.trace.as_ref())
            .map(|t| t.header.clone()),
        trace_declared: scenario
            .scenario
            .workload
            .as_ref()
            .and_then(|w| w.trace.as_ref())
            .map(|t| {
                (
                    scenario_path.to_path_buf(),
                    t.sha256.clone(),
                    t.rows.and_then(|r| u64::try_from(r).ok()),
                )
            }),
        inputs,
        // Validation refused any value `client_timeout_problem` rejects.
        client_timeout: scenario
            .scenario
            .workload
            .as_ref()
            .and_then(|w| w.client_timeout_s)
            .map(pdsim_core::SimDuration::from_secs_f64),
    })
}

/// A request source that also tells its SLO class names as it learns them.
pub struct Source {
    pub label: String,
    pub requests: Box<dyn Iterator<Item = Result<RequestSpec, TraceError>> + Send>,
    pub names: ClassNames,
    /// The source's load stages (an inference-perf configuration's), for
    /// per-stage results; empty for traces and shapes.
    pub stages: Vec<StagePlan>,
    /// What the source approximates, to print before the run.
    pub notes: Vec<String>,
    /// How many requests it holds, when that is known before reading it
    /// (a shape's `--requests`, an inference-perf configuration's stages),
    /// for a progress bar with an ETA; `None` for a trace file.
    pub total: Option<u64>,
}

/// Counts the rows of the scenario's own trace as they are read and, at
/// its end, fails the read when they are not the number the scenario's
/// `workload.trace.rows` states (a truncated or replaced file).
struct RowCount {
    inner: Box<dyn Iterator<Item = Result<RequestSpec, TraceError>> + Send>,
    seen: u64,
    expected: u64,
    scenario: String,
    trace: String,
    done: bool,
}

impl Iterator for RowCount {
    type Item = Result<RequestSpec, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.inner.next() {
            Some(Ok(spec)) => {
                self.seen += 1;
                Some(Ok(spec))
            }
            Some(Err(e)) => Some(Err(e)),
            None => {
                self.done = true;
                (self.seen != self.expected).then(|| {
                    Err(TraceError {
                        file: self.scenario.clone(),
                        line: 0,
                        column: Some("workload.trace.rows".into()),
                        message: format!(
                            "{} has {} rows, not the {} the scenario states (the file changed \
                             since the scenario was written?)",
                            self.trace, self.seen, self.expected
                        ),
                    })
                })
            }
        }
    }
}

/// Tells the SLO class names a streamed source has learnt after each row.
struct Tap<S> {
    inner: S,
    names: ClassNames,
}

impl<S: Iterator<Item = Result<RequestSpec, TraceError>> + RequestSource> Iterator for Tap<S> {
    type Item = Result<RequestSpec, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        let item = self.inner.next();
        self.names.update(self.inner.slo_classes());
        item
    }
}

fn tapped<S>(label: String, inner: S) -> Source
where
    S: Iterator<Item = Result<RequestSpec, TraceError>> + RequestSource + Send + 'static,
{
    let names = ClassNames::new(inner.slo_classes());
    Source {
        label,
        requests: Box::new(Tap {
            inner,
            names: names.clone(),
        }),
        names,
        stages: Vec::new(),
        notes: Vec::new(),
        total: None,
    }
}

/// What to replay: a trace file given on the command line, else the
/// scenario's workload (trace or shape), else the bundled trace.
pub struct WorkloadChoice<'a> {
    pub trace: Option<&'a Path>,
    pub rate: Option<f64>,
    pub requests: Option<u64>,
    pub seed: u64,
}

pub fn open_source(
    p: &Prepared,
    choice: &WorkloadChoice,
) -> Result<(Source, Option<PathBuf>), Failure> {
    let header = p.trace_header.as_ref();
    let trace = choice.trace.map(Path::to_path_buf).or(match &p.workload {
        DefaultWorkload::Trace(path) => Some(path.clone()),
        _ => None,
    });
    // The scenario's own trace is held to what the scenario states of it.
    let declared = match (&p.workload, choice.trace) {
        (DefaultWorkload::Trace(_), None) => p.trace_declared.clone(),
        _ => None,
    };
    if let Some(path) = trace {
        // A trace is read twice (replayed, then hashed for the results'
        // README), so a FIFO or a device could not be read as a trace even
        // if opening it did not block; only regular files are opened.
        let file = match crate::disk::open_input(&path) {
            Ok(f) => f,
            Err(ReadError::IsDirectory) => {
                return Err(failure(
                    2,
                    format!("{}: is a directory, not a trace file", path.display()),
                ));
            }
            Err(ReadError::NotRegular { kind }) => {
                return Err(failure(
                    2,
                    format!(
                        "{}: is {kind}, not a regular file; pdsim reads traces only from regular \
                         files (copy the trace to a file first)",
                        path.display()
                    ),
                ));
            }
            Err(ReadError::Missing) => {
                return Err(failure(2, format!("{}: no such file", path.display())));
            }
            Err(e) => return Err(failure(2, format!("{}: {e}", path.display()))),
        };
        let name = path.display().to_string();
        let mut rows = None;
        if let Some((scenario, sha256, declared_rows)) = declared {
            if let Some(expected) = sha256 {
                let actual = digest(&path);
                if !actual.eq_ignore_ascii_case(&expected) {
                    return Err(failure(
                        1,
                        format!(
                            "{}: workload.trace.sha256: {name} has SHA-256 {actual}, not the \
                             {expected} the scenario states (the file changed since the scenario \
                             was written?)",
                            scenario.display()
                        ),
                    ));
                }
            }
            rows = declared_rows.map(|r| (scenario.display().to_string(), r));
        }
        let reader = TraceReader::sniff(BufReader::new(file), &name, header, choice.seed)
            .map_err(|e| failure(1, e))?;
        let stages = reader.stages().to_vec();
        let notes = reader.notes().to_vec();
        let mut source = tapped(name, reader);
        if let Some((scenario, expected)) = rows {
            source.requests = Box::new(RowCount {
                inner: source.requests,
                seen: 0,
                expected,
                scenario,
                trace: source.label.clone(),
                done: false,
            });
        }
        if !stages.is_empty() {
            source.total = Some(stages.iter().map(|s| s.requests).sum());
        }
        source.stages = stages;
        source.notes = notes;
        return Ok((source, Some(path)));
    }
    match &p.workload {
        DefaultWorkload::Shape(name, shape) => {
            let (Some(rate), Some(count)) = (choice.rate, choice.requests) else {
                return Err(failure(
                    2,
                    format!(
                        "the scenario's workload is the shape `{name}`; give --rate R (requests per second) and --requests N"
                    ),
                ));
            };
            let s =
                Synthetic::new(name, shape, count, rate, choice.seed).map_err(|e| failure(1, e))?;
            let mut source = tapped(format!("shape {name} at {rate} req/s"), s);
            source.total = Some(count);
            Ok((source, None))
        }
        _ => {
            let text = embedded(Path::new(DEFAULT_TRACE)).unwrap_or_default();
            let reader = TraceReader::sniff(
                std::io::Cursor::new(text.as_bytes()),
                DEFAULT_TRACE,
                None,
                0,
            )
            .map_err(|e| failure(1, e))?;
            Ok((tapped(DEFAULT_TRACE.to_string(), reader), None))
        }
    }
}

/// A whole source in memory, for commands that replay it several times.
pub struct Loaded {
    pub label: String,
    pub specs: Vec<RequestSpec>,
    pub names: Vec<String>,
    pub file: Option<PathBuf>,
    pub stages: Vec<StagePlan>,
    /// What the source approximates, for the command to print once.
    pub notes: Vec<String>,
}

pub fn load_all(p: &Prepared, choice: &WorkloadChoice) -> Result<Loaded, Failure> {
    let (source, file) = open_source(p, choice)?;
    let stages = source.stages.clone();
    let notes = source.notes.clone();
    let specs = source
        .requests
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| failure(1, e))?;
    let names = source.names.snapshot();
    Ok(Loaded {
        label: source.label,
        specs,
        names,
        file,
        stages,
        notes,
    })
}

/// The SLO options of `run`, `compare` and `plan`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct SloArgs {
    /// An SLO: `ttft_ms=500,itl_ms=50,e2e_ms=20000` (any subset) for every
    /// request, or `CLASS:ttft_ms=…` for one SLO class. `itl_ms` (alias
    /// `tpot_ms`) bounds a request's mean inter-token latency, as vLLM's
    /// `--goodput tpot` does. Repeatable. A TraceV2 header's
    /// `goodput_slo_targets` apply to their classes unless overridden here.
    #[arg(long, value_name = "SLO")]
    pub slo: Vec<String>,
    /// The price of one GPU-hour in USD, for cost per million output tokens.
    #[arg(long, value_name = "USD", allow_negative_numbers = true)]
    pub gpu_hour_usd: Option<f64>,
    /// Seconds each client waits for its whole response before it gives
    /// up; the request is then aborted (`aborted`, `client-timeout`).
    /// inference-perf's `load.request_timeout`. Overrides the scenario's
    /// `workload.client_timeout_s`; a request's own earlier deadline
    /// (TraceV2 `deadline_us`) still applies.
    #[arg(
        long = "client-timeout-s",
        value_name = "S",
        allow_negative_numbers = true
    )]
    pub client_timeout_s: Option<f64>,
}

impl SloArgs {
    /// The SLO for every request and the SLOs by class name.
    pub fn parse(&self) -> Result<(Option<Slo>, BTreeMap<String, Slo>), Failure> {
        let mut all = None;
        let mut named = BTreeMap::new();
        for text in &self.slo {
            let (class, body) = match text.split_once(':') {
                Some((class, body)) => (Some(class.trim().to_string()), body),
                None => (None, text.as_str()),
            };
            // A request outside every SLO class has the empty class name, so
            // `:ttft_ms=…` would quietly become a second SLO for the
            // unclassed requests beside the one for every request; the
            // empty name before `:` is refused instead.
            if class.as_deref() == Some("") {
                return Err(failure(
                    2,
                    format!(
                        "--slo {}: the SLO class name before `:` is empty; write CLASS:{} for the requests of one class, or {} without the `:` for every request",
                        pdsim_spec::problem::quote(text),
                        pdsim_spec::problem::quote(body),
                        pdsim_spec::problem::quote(body)
                    ),
                ));
            }
            let slo = Slo::parse(body).map_err(|e| failure(2, format!("--slo {text}: {e}")))?;
            crate::flags::slo_ms(text, "ttft_ms", slo.ttft_ms)?;
            crate::flags::slo_ms(text, "itl_ms", slo.itl_ms)?;
            crate::flags::slo_ms(text, "e2e_ms", slo.e2e_ms)?;
            match class {
                None if all.is_some() => {
                    return Err(failure(
                        2,
                        format!("--slo {text}: an SLO for every request is already given"),
                    ));
                }
                None => all = Some(slo),
                Some(c) => {
                    if named.insert(c.clone(), slo).is_some() {
                        return Err(failure(
                            2,
                            format!("--slo {text}: class `{c}` already has an SLO"),
                        ));
                    }
                }
            }
        }
        if let Some(price) = self.gpu_hour_usd {
            crate::flags::gpu_hour_usd(price)?;
        }
        if let Some(seconds) = self.client_timeout_s
            && let Some(problem) = pdsim_spec::scenario::client_timeout_problem(seconds)
        {
            return Err(failure(2, format!("--client-timeout-s {problem}")));
        }
        Ok((all, named))
    }

    /// The client timeout of a run: `--client-timeout-s` when given, else
    /// the scenario's (already in `p`). Call [`SloArgs::parse`] first.
    pub fn client_timeout(&self, p: &Prepared) -> Option<pdsim_core::SimDuration> {
        self.client_timeout_s
            .map(pdsim_core::SimDuration::from_secs_f64)
            .or(p.client_timeout)
    }

    /// The plan for a run whose source learns `names`.
    pub fn plan(&self, p: &Prepared, names: ClassNames) -> Result<SloPlan, Failure> {
        let (all, named) = self.parse()?;
        let header: BTreeMap<String, Slo> = p
            .trace_header
            .as_ref()
            .map(|h| {
                h.goodput_slo_targets
                    .iter()
                    .filter_map(|(k, t)| {
                        let positive = |v: f64| (v > 0.0).then_some(v);
                        let slo = Slo {
                            ttft_ms: positive(t.ttft_ms),
                            itl_ms: positive(t.itl_ms),
                            e2e_ms: positive(t.e2e_ms),
                        };
                        (!slo.is_empty()).then(|| (k.clone(), slo))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(SloPlan::new(all, &named, &header, names))
    }
}

/// What one simulation gives back besides its files.
pub struct Outcome {
    pub summary: Summary,
    pub cdfs: Vec<(Metric, Vec<(f64, f64)>)>,
    pub series: Vec<PoolSeries>,
}

/// How one simulation runs and is reported.
pub struct How<'a> {
    pub trace_label: &'a str,
    pub seed: u64,
    /// Check the engines' invariants after every step.
    pub check: bool,
    pub slo: SloPlan,
    pub gpu_hour_usd: Option<f64>,
    /// The source's load stages, for per-stage results (none: no
    /// breakdown, and the summary is as without stages).
    pub stages: &'a [StagePlan],
}

/// Runs `requests` through the prepared cluster; `extra` also sees every
/// record (the CSV writers of `run`).
pub fn simulate(
    p: &Prepared,
    requests: &mut dyn Iterator<Item = Result<RequestSpec, TraceError>>,
    how: How,
    extra: &mut dyn RecordSink,
) -> Result<Outcome, Failure> {
    let How {
        trace_label,
        seed,
        check,
        slo,
        gpu_hour_usd,
        stages,
    } = how;
    let mut aggregator = Aggregator::with_slo(slo).with_stages(stages);
    let mut series: SeriesSink<std::io::Sink> =
        SeriesSink::new(p.pools.iter().map(|x| x.name.clone()).collect(), None);
    let result = {
        let mut sinks = pdsim_report::Fanout(vec![&mut aggregator, &mut series, extra]);
        let mut requests = pdsim_workload::with_client_timeout(requests, p.client_timeout);
        pdsim_cluster::run(&p.cluster, &mut requests, seed, check, &mut sinks)
    };
    let stats = result.map_err(|e| {
        let code = if matches!(e, pdsim_cluster::RunError::Invariant(_)) {
            3
        } else {
            1
        };
        failure(code, format!("{e}; no results were written"))
    })?;
    // A trace without a request (an empty file, or a header alone) would
    // give a results folder of zeros that reads as a run.
    if stats.requests == 0 {
        return Err(failure(
            1,
            format!("{trace_label} holds no request to replay; no results were written"),
        ));
    }
    let (series, _) = series.finish().map_err(|e| failure(2, e))?;
    let summary = aggregator.summary(
        &stats,
        RunInfo {
            scenario: p.scenario.clone(),
            deployment: p.deployment.clone(),
            trace: trace_label.to_string(),
            seed,
            router: stats.router.to_string(),
            engines: p.engines,
            gpus: p.gpus,
            pools: p.pools.clone(),
            gpu_hour_usd,
            client_timeout_s: p.client_timeout.map(|t| t.as_ns() as f64 / 1e9),
        },
    );
    let cdfs = [Metric::Ttft, Metric::Itl, Metric::E2e]
        .into_iter()
        .map(|m| (m, aggregator.cdf(m)))
        .collect();
    Ok(Outcome {
        summary,
        cdfs,
        series,
    })
}

/// Replays in-memory requests with their arrival times divided by
/// `speedup` (2.0 doubles the request rate).
pub fn scaled(
    specs: &[RequestSpec],
    speedup: f64,
) -> impl Iterator<Item = Result<RequestSpec, TraceError>> + '_ {
    specs.iter().map(move |s| {
        let mut s = s.clone();
        if speedup != 1.0 {
            s.move_arrival(pdsim_core::SimTime(
                (s.arrival.as_ns() as f64 / speedup).round() as u64,
            ));
        }
        Ok(s)
    })
}

/// Replays in-memory requests in their order (prompts, lengths, shared
/// prefixes and SLO classes kept) with Poisson arrivals at `rate_per_s`:
/// exponential gaps from a seeded stream, the first request at the trace's
/// first arrival. The same seed and rate give the same arrivals.
pub fn poisson(
    specs: &[RequestSpec],
    rate_per_s: f64,
    seed: u64,
) -> impl Iterator<Item = Result<RequestSpec, TraceError>> + '_ {
    let mut stream = pdsim_core::Stream::new(seed, pdsim_core::Purpose::Arrivals, 1);
    let mut at_ns = specs.first().map_or(0.0, |s| s.arrival.as_ns() as f64);
    specs.iter().enumerate().map(move |(i, s)| {
        let mut s = s.clone();
        if i > 0 {
            // Inverse transform of a uniform in (0, 1].
            let u = 1.0 - stream.unit();
            at_ns += -u.ln() / rate_per_s * 1e9;
        }
        s.move_arrival(pdsim_core::SimTime(at_ns.round() as u64));
        Ok(s)
    })
}

/// A results folder written under a temporary name and renamed into place
/// at the end, so a failed run never leaves a complete-looking result. The
/// rules for what may be replaced are in [`crate::output`].
pub struct Staging {
    staged: crate::output::Staged,
    committed: bool,
}

impl Staging {
    /// Refuses an `out` that pdsim may not replace, or that is or holds one
    /// of `inputs` (the files and folders the command's flags name) or
    /// anything the command has read (exit 2), before any simulation runs.
    pub fn new(out: &Path, command: &'static str, inputs: &[PathBuf]) -> Result<Staging, Failure> {
        let staged = crate::output::Staged::new(out, command, inputs)?;
        Ok(Staging {
            staged,
            committed: false,
        })
    }

    pub fn write(&self, name: &str, bytes: impl AsRef<[u8]>) -> Result<(), Failure> {
        let path = self.staged.path(name)?;
        std::fs::write(&path, bytes)
            .map_err(|e| failure(2, format!("cannot write {}: {e}", path.display())))
    }

    pub fn file(&self, name: &str) -> Result<std::io::BufWriter<std::fs::File>, Failure> {
        let path = self.staged.path(name)?;
        std::fs::File::create(&path)
            .map(std::io::BufWriter::new)
            .map_err(|e| failure(2, format!("cannot write {}: {e}", path.display())))
    }

    /// Moves the folder into place, replacing an earlier pdsim result.
    pub fn commit(mut self) -> Result<PathBuf, Failure> {
        let out = self.staged.commit()?;
        self.committed = true;
        Ok(out)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            self.staged.discard();
        }
    }
}

/// SHA-256 of an input, as hex; built-in inputs hash their embedded text.
/// A file is hashed as it is read, a buffer at a time, since a trace may be
/// gigabytes.
pub fn digest(path: &Path) -> String {
    let mut hasher = Sha256::new();
    match embedded(path) {
        Some(text) => hasher.update(text.as_bytes()),
        None => {
            let mut file = match crate::disk::open_regular(path) {
                Ok(f) => f,
                Err(e) => return format!("(unreadable: {e})"),
            };
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match std::io::Read::read(&mut file, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => hasher.update(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return format!("(unreadable: {e})"),
                }
            }
        }
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The README of a results folder: how to replay it byte for byte.
pub fn results_readme(
    title: &str,
    seeds: &str,
    inputs: &[PathBuf],
    files: &[(&str, &str)],
) -> String {
    // `--out` and `--jobs` do not change the results, so they are left out
    // and the README is the same wherever and however the run was made.
    let mut args: Vec<String> = Vec::new();
    let mut skip_next = false;
    for a in std::env::args().skip(1) {
        if skip_next {
            skip_next = false;
            continue;
        }
        if a == "--out" || a == "--jobs" || a == "-j" {
            skip_next = true;
            continue;
        }
        if a.starts_with("--out=") || a.starts_with("--jobs=") {
            continue;
        }
        args.push(a);
    }
    let args: Vec<String> = args
        .into_iter()
        .map(|a| {
            if a.contains(' ') || a.is_empty() {
                format!("'{a}'")
            } else {
                a
            }
        })
        .collect();
    let mut out = format!(
        "# {title}\n\nWritten by pdsim {}. The same command with the same inputs gives the same bytes.\n\n```\npdsim {}\n```\n\nSeed(s): {seeds}\n\n## Inputs (SHA-256)\n\n",
        env!("CARGO_PKG_VERSION"),
        args.join(" ")
    );
    // The files the flags name first, then every other file the command
    // read through `disk.rs` (an EndpointPickerConfig or manifest a
    // deployment names, a user catalog's entries, a scenario's own trace),
    // in path order: each changes the results, so replaying byte for byte
    // needs each. A file is listed once however its path was spelled.
    let mut seen = std::collections::BTreeSet::new();
    let key = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    // Folders are noted when listed; their files are what is read.
    let read = crate::disk::read_so_far()
        .into_iter()
        .filter(|p| p.is_file());
    for path in inputs.iter().cloned().chain(read) {
        if seen.insert(key(&path)) {
            out.push_str(&format!("- `{}`: `{}`\n", path.display(), digest(&path)));
        }
    }
    out.push_str("\n## Files\n\n");
    for (name, what) in files {
        out.push_str(&format!("- `{name}`: {what}\n"));
    }
    out
}

/// A thread pool of `--jobs` threads (the cores when not given; clamped
/// to them, with a note, when more).
pub fn pool(command: &str, jobs: Option<usize>) -> Result<rayon::ThreadPool, Failure> {
    let threads = crate::flags::jobs(command, jobs)?;
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| failure(2, format!("cannot start worker threads: {e}")))
}

pub fn progress(len: u64, what: &str) -> indicatif::ProgressBar {
    // Drawn on stderr, and hidden when stderr is not a terminal.
    let bar = indicatif::ProgressBar::with_draw_target(
        (len > 0).then_some(len),
        indicatif::ProgressDrawTarget::stderr(),
    );
    let template = if len == 0 {
        "{prefix} [{elapsed_precise}] {spinner} {human_pos} requests read"
    } else {
        "{prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg} (about {eta} left)"
    };
    if let Ok(style) = indicatif::ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.set_prefix(what.to_string());
    bar
}

#[cfg(test)]
mod tests {
    use super::{poisson, scaled};
    use pdsim_core::{Prompt, SimTime};
    use pdsim_workload::RequestSpec;

    fn specs(n: u64) -> Vec<RequestSpec> {
        (0..n)
            .map(|i| RequestSpec {
                arrival: SimTime(1_000_000_000 + i * 7),
                prompt: Prompt::default(),
                output_tokens: 1 + i as u32,
                priority: 0,
                slo_class: 0,
                source_line: i + 1,
                deadline: None,
                session: None,
                output_id: None,
            })
            .collect()
    }

    #[test]
    fn poisson_arrivals_keep_the_requests_and_reach_the_rate() {
        let input = specs(20_000);
        let out: Vec<RequestSpec> = poisson(&input, 50.0, 7).map(Result::unwrap).collect();
        assert_eq!(out.len(), input.len());
        assert_eq!(out[0].arrival, input[0].arrival, "the first keeps its time");
        assert!(out.windows(2).all(|w| w[0].arrival <= w[1].arrival));
        assert!(
            out.iter()
                .zip(&input)
                .all(|(a, b)| a.output_tokens == b.output_tokens)
        );
        let span_s = (out.last().unwrap().arrival.as_ns() - out[0].arrival.as_ns()) as f64 / 1e9;
        let rate = (out.len() - 1) as f64 / span_s;
        assert!((rate - 50.0).abs() < 2.0, "measured {rate} req/s");
        let again: Vec<RequestSpec> = poisson(&input, 50.0, 7).map(Result::unwrap).collect();
        assert_eq!(out, again, "same seed, same arrivals");
    }

    /// An SLO class with an empty name is refused, not taken as a second
    /// SLO for the requests outside every class (whose class name is
    /// empty); a named class and an SLO for every request still parse.
    #[test]
    fn an_slo_class_with_an_empty_name_is_refused() {
        let slo = |texts: &[&str]| super::SloArgs {
            slo: texts.iter().map(|t| t.to_string()).collect(),
            ..super::SloArgs::default()
        };
        for text in [":ttft_ms=200", " :ttft_ms=200", ":"] {
            let failure = slo(&[text]).parse().expect_err(text);
            assert_eq!(failure.code, 2, "{text}");
            assert!(
                failure.message.contains("class name before `:` is empty"),
                "{text}: {}",
                failure.message
            );
        }
        let (all, named) = slo(&["ttft_ms=500", "chat:ttft_ms=200"])
            .parse()
            .unwrap_or_else(|f| panic!("{}", f.message));
        assert!(all.is_some());
        assert_eq!(named.keys().collect::<Vec<_>>(), ["chat"]);
    }

    #[test]
    fn scaling_divides_arrival_times() {
        let input = specs(3);
        let out: Vec<RequestSpec> = scaled(&input, 2.0).map(Result::unwrap).collect();
        assert_eq!(out[0].arrival, SimTime(500_000_000));
        assert_eq!(out[2].arrival, SimTime(500_000_007));
    }

    #[test]
    fn a_source_knows_its_size_only_when_it_is_known_before_reading() {
        // A shape's `--requests` and an inference-perf configuration's
        // stages are counted in advance (the progress bar's total); a trace
        // file is not read twice to count it.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let p = super::prepare(
            &[],
            &root.join("scenarios/4x8-h200.yaml"),
            &root.join("deployments/1p3d-ep8.yaml"),
        )
        .unwrap_or_else(|f| panic!("{}", f.message));
        fn choice(trace: Option<&std::path::Path>) -> super::WorkloadChoice<'_> {
            super::WorkloadChoice {
                trace,
                rate: Some(5.0),
                requests: Some(123),
                seed: 1,
            }
        }
        let (shape, _) =
            super::open_source(&p, &choice(None)).unwrap_or_else(|f| panic!("{}", f.message));
        assert_eq!(shape.total, Some(123));
        let trace = root.join("traces/default.jsonl");
        let (file, _) = super::open_source(&p, &choice(Some(&trace)))
            .unwrap_or_else(|f| panic!("{}", f.message));
        assert_eq!(file.total, None);
        let config = std::env::temp_dir().join(format!("pdsim-total-{}.yaml", std::process::id()));
        std::fs::write(
            &config,
            "api: {type: completion, streaming: true}\ndata:\n  type: shared_prefix\n  shared_prefix: {num_groups: 1, num_prompts_per_group: 1, system_prompt_len: 10, question_len: 10, output_len: 10}\nload:\n  type: constant\n  stages: [{rate: 2.0, duration: 3}, {rate: 1.0, duration: 4}]\nserver: {type: vllm, model_name: m, base_url: 'http://x', ignore_eos: true}\n",
        )
        .unwrap();
        let opened = super::open_source(&p, &choice(Some(&config)));
        std::fs::remove_file(&config).unwrap();
        let (staged, _) = opened.unwrap_or_else(|f| panic!("{}", f.message));
        assert_eq!(staged.total, Some(2 * 3 + 4));
    }
}
