//! `pdsim validate`: check documents, print problems, optionally print what
//! would run.

use crate::disk::DiskFiles;
use pdsim_spec::problem::quote;
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
    /// A trace to read and check row by row without simulating it (the
    /// format is detected as `run` detects it; a TraceV2 CSV takes its
    /// header from the scenario).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// An EPP flag (`--epp-flag=--name=value`, repeatable) the router inputs
    /// given on their own are loaded with, as a deployment's
    /// `router.epp_flags` would give it (`--allow-experimental-plugins` for
    /// an Alpha plugin, say).
    #[arg(long = "epp-flag", value_name = "FLAG", allow_hyphen_values = true)]
    epp_flags: Vec<String>,
    /// Deployment documents (a Scenario among them is used as the
    /// scenario, a CoefficientSet is checked on its own), and router inputs
    /// checked on their own as a deployment's `router` would load them: an
    /// EndpointPickerConfig, Helm values of the EPP's charts, or
    /// InferencePool / InferenceObjective / InferenceModelRewrite manifests.
    #[arg(value_name = "FILE", required_unless_present_any = ["trace", "scenario"])]
    files: Vec<PathBuf>,
}

/// What a trace holds, read to its end.
#[derive(Debug, Default, serde::Serialize)]
struct TraceSummary {
    file: String,
    format: String,
    requests: u64,
    first_arrival_s: f64,
    last_arrival_s: f64,
    prompt_tokens_total: u64,
    prompt_tokens_max: u64,
    output_tokens_total: u64,
    output_tokens_max: u64,
    /// Requests that are later turns of a closed-loop conversation.
    session_turns: u64,
}

/// Reads `path` as `run` would and checks every row; the summary, or the
/// first broken row's error (file, line, column) and whether it was an
/// input/output error (exit 2) rather than a bad row (exit 1).
fn check_trace(
    path: &std::path::Path,
    header: Option<&pdsim_spec::scenario::TraceHeader>,
) -> Result<TraceSummary, (String, bool)> {
    use pdsim_spec::files::ReadError;
    use pdsim_workload::{RequestSource, TraceReader};
    let shown = path.display().to_string();
    let file = crate::disk::open_input(path).map_err(|e| {
        let why = match e {
            ReadError::IsDirectory => "is a directory, not a trace file".to_string(),
            ReadError::NotRegular { kind } => {
                format!("is {kind}, not a regular file; pdsim reads traces only from regular files")
            }
            ReadError::Missing => "no such file".to_string(),
            other => other.to_string(),
        };
        (format!("{shown}: {why}"), true)
    })?;
    let mut reader = TraceReader::sniff(std::io::BufReader::new(file), &shown, header, 0)
        .map_err(|e| (e.to_string(), false))?;
    let mut s = TraceSummary {
        file: shown,
        format: format!("{:?}", reader.format()),
        ..TraceSummary::default()
    };
    for row in reader.by_ref() {
        let spec = row.map_err(|e| (e.to_string(), false))?;
        let arrival = spec.arrival.as_ns() as f64 / 1e9;
        if s.requests == 0 {
            s.first_arrival_s = arrival;
        }
        s.last_arrival_s = s.last_arrival_s.max(arrival);
        s.requests += 1;
        let prompt = spec.prompt.tokens();
        s.prompt_tokens_total += prompt;
        s.prompt_tokens_max = s.prompt_tokens_max.max(prompt);
        let output = u64::from(spec.output_tokens);
        s.output_tokens_total += output;
        s.output_tokens_max = s.output_tokens_max.max(output);
        s.session_turns += u64::from(spec.session.is_some_and(|t| t.round > 0));
    }
    let _ = reader.slo_classes();
    if s.requests == 0 {
        return Err((
            format!("{}: holds no request (only a header, or nothing)", s.file),
            false,
        ));
    }
    Ok(s)
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
}

/// Everything `validate` checks: the documents (the `pdsim-spec` crate),
/// then what `run` checks before it simulates ([`check_runnable`]).
///
/// Router inputs given on their own are loaded with `epp_flags` (the
/// command line's `--epp-flag`s).
pub fn check(request: &Request<'_>, epp_flags: &[String]) -> pdsim_spec::validate::Report {
    // Router inputs named on the command line are checked on their own;
    // the rest go to the documents' validation.
    let mut router_files = Vec::new();
    let mut documents = Vec::new();
    for path in &request.documents {
        match router_input_kind(request.files, path) {
            Some(kind) => router_files.push((path, kind)),
            None => documents.push(path.clone()),
        }
    }
    let documents_request = Request {
        files: request.files,
        catalog_dirs: request.catalog_dirs.clone(),
        scenario: request.scenario.clone(),
        documents,
    };
    let mut report = validate(&documents_request);
    check_runnable(request.files, &mut report);
    if router_files.is_empty() && !epp_flags.is_empty() {
        report.problems.push(pdsim_spec::problem::Problem {
            severity: pdsim_spec::problem::Severity::Error,
            file: "command line".into(),
            line: None,
            path: "--epp-flag".into(),
            code: "epp-flag-unused".into(),
            message: "--epp-flag gives the flags of router inputs checked on their own, and no file given is one; a deployment's EPP flags are its router.epp_flags".into(),
        });
    }
    for (path, kind) in router_files {
        check_router_file(request.files, path, kind, epp_flags, &mut report.problems);
    }
    report.problems.sort();
    report.valid = !report.problems.has_errors();
    report
}

/// What a router input given to `validate` is, and so which key of a
/// deployment's `router` block would name it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum RouterInput {
    /// `router.endpoint_picker_config`: an EndpointPickerConfig, or the Helm
    /// values of one of the EPP's charts.
    Config,
    /// `router.manifests`: the Kubernetes objects the EPP reads.
    Manifests,
}

/// The manifest kinds the EPP reads (`pdsim_router::manifests`).
const ROUTER_MANIFEST_KINDS: &[&str] = &[
    "InferencePool",
    "InferenceObjective",
    "InferenceModelRewrite",
];

/// Whether `path` holds a router input rather than a pdsim document: its
/// first document's `kind` is `EndpointPickerConfig`; any of its documents
/// is of a manifest kind the EPP reads; it holds several documents one of
/// which is an EndpointPickerConfig or a ConfigMap (a rendered chart with no
/// InferencePool); or it is the Helm values of one of
/// the EPP's charts (no `kind`, a `router.epp` or `inferenceExtension`
/// block) or a ConfigMap (`pdsim_router::chart::embedded` reads both). A
/// pdsim document (a `Scenario`, `Deployment` or `CoefficientSet` with no
/// `apiVersion`) is never one, and a file that cannot be read or parsed is
/// left to the documents' validation, which says why.
fn router_input_kind(
    files: &dyn pdsim_spec::files::Files,
    path: &std::path::Path,
) -> Option<RouterInput> {
    use serde_yaml::Value;
    let text = files.read(path).ok()?;
    let text = pdsim_spec::load::check_yaml(&text).ok()?;
    let first = serde_yaml::Deserializer::from_str(text).next()?;
    let value = <Value as serde::Deserialize>::deserialize(first).ok()?;
    let kinds = pdsim_spec::load::document_kinds(text);
    match value.get("kind").and_then(Value::as_str) {
        Some("EndpointPickerConfig") => Some(RouterInput::Config),
        Some("Scenario" | "Deployment" | "CoefficientSet") if value.get("apiVersion").is_none() => {
            None
        }
        // Manifests the EPP reads, other kinds among them ignored as it
        // ignores them (a rendered chart's ConfigMap and Deployment too).
        _ if kinds
            .iter()
            .flatten()
            .any(|k| ROUTER_MANIFEST_KINDS.contains(&k.as_str())) =>
        {
            Some(RouterInput::Manifests)
        }
        // Several documents carrying a configuration and no manifest:
        // loading it as a configuration says how to split it
        // (`pdsim_router::chart`).
        _ if pdsim_router::chart::configuration_among_others(&kinds) => Some(RouterInput::Config),
        Some("ConfigMap") | None => {
            pdsim_router::chart::embedded(&path.display().to_string(), text)
                .is_some()
                .then_some(RouterInput::Config)
        }
        Some(_) => None,
    }
}

/// Loads a router input on its own, as a deployment's `router` block
/// naming it would (`pdsim_router::check_router_inputs`), and adds what it
/// found to `problems`, with a warning that the checks against a
/// deployment's pools were not made.
fn check_router_file(
    files: &dyn pdsim_spec::files::Files,
    path: &std::path::Path,
    kind: RouterInput,
    epp_flags: &[String],
    problems: &mut pdsim_spec::problem::Problems,
) {
    use pdsim_spec::problem::{Problem, Severity};
    let file = path.display().to_string();
    // The router block names its files relative to the deployment's
    // folder: standing in for a deployment in the same folder, the file
    // is named by its own name.
    let name = path
        .file_name()
        .map_or_else(|| file.clone(), |n| n.to_string_lossy().into_owned());
    let router = pdsim_spec::deployment::Router {
        epp_flags: (!epp_flags.is_empty()).then(|| epp_flags.to_vec()),
        endpoint_picker_config: (kind == RouterInput::Config).then(|| name.clone()),
        manifests: (kind == RouterInput::Manifests).then(|| vec![name.clone()]),
    };
    if let Err(found) = pdsim_router::check_router_inputs(files, &file, Some(&router)) {
        for mut problem in found {
            // A flag's problem is the command line's, not the file's: it
            // came from --epp-flag, which stands for router.epp_flags.
            if let Some(rest) = problem.path.strip_prefix("router.epp_flags") {
                problem.path = format!("--epp-flag{rest}");
                problem.file = "command line".into();
                problem.line = None;
            }
            problems.push(problem);
        }
    }
    let key = match kind {
        RouterInput::Config => "router.endpoint_picker_config",
        RouterInput::Manifests => "router.manifests",
    };
    problems.push(Problem {
        severity: Severity::Warning,
        file,
        line: None,
        path: String::new(),
        code: "router-input-alone".into(),
        message: format!(
            "checked on its own, as a deployment's {key} would load it{}; the checks against a deployment (its pools' roles and labels) were skipped: validate the deployment that names it",
            if epp_flags.is_empty() {
                " with no EPP flags (--epp-flag gives them)"
            } else {
                ", with the --epp-flag flags"
            }
        ),
    });
}

pub fn run(args: &Args) -> ExitCode {
    let files = DiskFiles;
    let request = Request {
        files: &files,
        catalog_dirs: args.catalog.clone(),
        scenario: args.scenario.clone(),
        documents: args.files.clone(),
    };
    let report = check(&request, &args.epp_flags);
    let header = report
        .scenario
        .as_ref()
        .and_then(|s| s.scenario.workload.as_ref())
        .and_then(|w| w.trace.as_ref())
        .map(|t| &t.header);
    let trace = args.trace.as_deref().map(|path| check_trace(path, header));
    let trace_ok = trace.as_ref().is_none_or(Result::is_ok);
    let trace_io = matches!(&trace, Some(Err((_, true))));
    let output = match args.format {
        Format::Json => {
            let resolution = args
                .resolve
                .then(|| serde_json::json!({ "deployments": report.resolutions }));
            let trace = trace.as_ref().map(|t| match t {
                Ok(summary) => serde_json::json!({ "valid": true, "summary": summary }),
                Err((error, _)) => serde_json::json!({ "valid": false, "error": error }),
            });
            let value = serde_json::json!({
                "valid": report.valid && trace_ok,
                "problems": report.problems,
                "resolution": resolution,
                "trace": trace,
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
            let documents = args.files.len() + usize::from(args.scenario.is_some());
            if documents > 0 {
                let _ = writeln!(
                    text,
                    "{}: {documents} file(s), {errors} error(s), {warnings} warning(s)",
                    if report.valid { "valid" } else { "invalid" },
                );
            }
            match &trace {
                Some(Ok(t)) => {
                    let n = t.requests.max(1) as f64;
                    let _ = writeln!(
                        text,
                        "valid trace {}: {} requests ({}), arrivals from {:.3} s to {:.3} s; prompt tokens mean {:.1}, max {}; output tokens mean {:.1}, max {}; {} later conversation turns",
                        t.file,
                        t.requests,
                        t.format,
                        t.first_arrival_s,
                        t.last_arrival_s,
                        t.prompt_tokens_total as f64 / n,
                        t.prompt_tokens_max,
                        t.output_tokens_total as f64 / n,
                        t.output_tokens_max,
                        t.session_turns,
                    );
                }
                Some(Err((error, _))) => {
                    let _ = writeln!(text, "{error}");
                    let _ = writeln!(text, "invalid trace");
                }
                None => {}
            }
            text
        }
    };
    use std::io::Write;
    let output = pdsim_spec::problem::printable(&output);
    let mut stdout = std::io::stdout().lock();
    if stdout
        .write_all(output.as_bytes())
        .and_then(|_| stdout.flush())
        .is_err()
    {
        // A closed pipe (`pdsim validate ... | head`) is not a failure of validation.
    }
    ExitCode::from(if report.io_error || trace_io {
        2
    } else if report.valid && trace_ok {
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
        quote(&resolution.deployment),
        quote(&resolution.scenario),
        quote(&resolution.model),
        quote(&resolution.chip),
        quote(&resolution.engine_version),
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
    // Values echo what the documents state, an invalid one included (the
    // resolution is shown beside the errors): each is quoted as messages
    // quote values, at most a couple of hundred characters.
    let labels: Vec<String> = pool
        .labels
        .iter()
        .map(|(k, v)| format!("{}={}", quote(k), quote(v)))
        .collect();
    let _ = writeln!(text, "    labels: {}", labels.join(", "));
    let settings: Vec<String> = pool
        .settings
        .iter()
        .map(|s| {
            if s.origin == "stated" {
                format!("{} {}", s.key, quote(&s.value))
            } else {
                format!("{} {} ({})", s.key, quote(&s.value), s.origin)
            }
        })
        .collect();
    let _ = writeln!(text, "    engine: {}", settings.join(", "));
    for o in &pool.overrides {
        let _ = writeln!(
            text,
            "    not honored: {} {} -> {}: {}",
            o.field,
            quote(&o.requested),
            quote(&o.resolved),
            o.reason
        );
    }
    let m = &pool.memory;
    if let Some(r) = &m.rbln {
        render_rbln_memory(text, pool, r);
    } else {
        render_profiled_memory(text, m);
    }
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

/// vllm-rbln's estimate, term by term in the order
/// `estimate_available_memory` subtracts them, so a reader can redo it.
fn render_rbln_memory(
    text: &mut String,
    pool: &PoolResolution,
    r: &pdsim_spec::resolve::RblnMemory,
) {
    let m = &pool.memory;
    let mib = |b: f64| format!("{} MiB", grouped((b / (1u64 << 20) as f64).round() as u64));
    let buckets: Vec<String> = r.decode_batch_buckets.iter().map(u64::to_string).collect();
    let _ = writeln!(
        text,
        "    memory per rank (vllm-rbln estimate): ({} device − {} system) × {} = {} usable = kernel {} + draft kernel {} + runtime buffers {} ({} runtimes × {} chiplets × {}; decode buckets [{}]{}) + KV {}",
        gib(m.device_bytes as f64),
        gib(r.system_reserved_bytes as f64),
        pool.engine.gpu_memory_utilization,
        mib(m.requested_bytes as f64),
        mib(m.weights_bytes as f64),
        mib(m.draft_weights_bytes as f64),
        mib(m.cudagraph_bytes as f64),
        r.num_runtimes,
        r.chiplets,
        mib(r.buffer_bytes_per_runtime_chiplet as f64),
        buckets.join(", "),
        if r.specialized_moe_decode {
            ", each with a padded MoE twin"
        } else {
            ""
        },
        mib(m.kv_bytes as f64),
    );
    if r.kv_replicas > 1 || r.kv_heads_per_chiplet_uneven > 0 {
        let _ = writeln!(
            text,
            "    KV over {} chiplets: {} before the split, {} cop(ies), fullest chiplet {} head(s)",
            r.chiplets,
            mib(r.kv_bytes_before_chiplet_split as f64),
            r.kv_replicas,
            r.kv_heads_per_chiplet_uneven,
        );
    }
}

fn render_profiled_memory(text: &mut String, m: &pdsim_spec::resolve::MemoryBreakdown) {
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
}

/// What `run` checks after the documents' own validation, run by
/// `validate` too so the two agree: the router's inputs (the `pdsim-router`
/// crate) of every deployment that names them, then the simulator's build
/// of every deployment that passed (`pdsim_cluster::build_with_router`,
/// which refuses by key what it cannot run faithfully yet). Problems are
/// added to the report, deployments that fail either step leave
/// `report.deployments`, and the clusters of those that remain come back
/// in the same order, ready to run.
pub fn check_runnable(
    files: &dyn pdsim_spec::files::Files,
    report: &mut pdsim_spec::validate::Report,
) -> Vec<pdsim_cluster::Cluster> {
    use pdsim_spec::problem::{Problem, Severity};
    let mut found: Vec<Problem> = Vec::new();
    let mut inputs: Vec<(String, pdsim_router::RouterInputs)> = Vec::new();
    let mut failed: Vec<String> = Vec::new();
    for (file, deployment) in &report.loaded {
        let Some(router) = &deployment.router else {
            continue;
        };
        match pdsim_router::check_router_inputs(files, file, Some(router)) {
            Ok(loaded) => inputs.push((file.clone(), loaded)),
            Err(problems) => {
                failed.push(file.clone());
                found.extend(problems);
            }
        }
    }
    let mut clusters = Vec::new();
    let mut kept = Vec::new();
    for bundle in std::mem::take(&mut report.deployments) {
        let file = &bundle.source.file;
        if failed.contains(file) {
            continue;
        }
        let Some(scenario) = report.scenario.as_ref() else {
            continue;
        };
        let router = inputs
            .iter()
            .find(|(f, _)| f == file)
            .map(|(_, loaded)| loaded.clone());
        match pdsim_cluster::build_with_router(&bundle, scenario, router) {
            Ok(cluster) => {
                clusters.push(cluster);
                kept.push(bundle);
            }
            Err(error) => found.push(Problem {
                severity: Severity::Error,
                file: file.clone(),
                line: bundle.source.lines.line_of(&error.path),
                path: error.path,
                code: "run-refused".into(),
                message: error.message,
            }),
        }
    }
    report.deployments = kept;
    if found.is_empty() {
        return clusters;
    }
    for problem in found {
        // The spec's existence check and the router's read report a missing
        // router file alike; say it once.
        let repeated = report
            .problems
            .iter()
            .any(|p| p.file == problem.file && p.path == problem.path && p.code == problem.code);
        if !repeated {
            report.problems.push(problem);
        }
    }
    report.problems.sort();
    report.valid = !report.problems.has_errors();
    clusters
}

/// The last line of a refusal after validation: "`what` (see above)" when
/// errors are listed above it; otherwise, rather than point at nothing, it
/// says what failed and that no check said why.
pub fn refusal(problems: &pdsim_spec::problem::Problems, what: &str, failed: &str) -> String {
    if problems.has_errors() {
        format!("{what} (see above)")
    } else {
        format!(
            "{what}: {failed}, and no check reported an error saying why; this is a bug in pdsim, please report it with the documents"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{check, refusal};
    use crate::session::{WithDefaults, prepare_in};
    use pdsim_spec::files::{FileKind, Files, ReadError};
    use pdsim_spec::problem::{Problem, Problems, Severity};
    use pdsim_spec::validate::Request;
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// The repository's files, with some replaced: a text, or a read
    /// error (a file that is not UTF-8 or cannot be read).
    struct Overlay {
        replaced: BTreeMap<PathBuf, Result<String, ReadError>>,
    }

    impl Files for Overlay {
        fn kind(&self, path: &Path) -> FileKind {
            match self.replaced.get(path) {
                Some(Err(ReadError::Missing)) => FileKind::Missing,
                Some(Err(ReadError::IsDirectory)) => FileKind::Directory,
                Some(_) => FileKind::File,
                None => WithDefaults.kind(path),
            }
        }
        fn read(&self, path: &Path) -> Result<String, ReadError> {
            match self.replaced.get(path) {
                Some(result) => result.clone(),
                None => WithDefaults.read(path),
            }
        }
        fn list(&self, path: &Path) -> Vec<String> {
            WithDefaults.list(path)
        }
    }

    fn bundled(folder: &str) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(root().join(folder))
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        found.sort();
        found
    }

    /// `validate`'s verdict and whether `run` would start, with the lines
    /// `run` prints when it refuses.
    fn verdicts(
        files: &dyn Files,
        scenario: &Path,
        deployment: &Path,
    ) -> (bool, Result<(), String>) {
        let report = check(
            &Request {
                files,
                catalog_dirs: vec![],
                scenario: Some(scenario.to_path_buf()),
                documents: vec![deployment.to_path_buf()],
            },
            &[],
        );
        let run = prepare_in(files, &[], scenario, deployment)
            .map(|_| ())
            .map_err(|f| f.message);
        (report.valid, run)
    }

    #[test]
    fn validate_and_run_agree_on_every_bundled_pair() {
        let files = Overlay {
            replaced: BTreeMap::new(),
        };
        let (mut runs, mut refusals) = (0, 0);
        for scenario in bundled("scenarios") {
            for deployment in bundled("deployments") {
                let (valid, run) = verdicts(&files, &scenario, &deployment);
                assert_eq!(
                    valid,
                    run.is_ok(),
                    "{} on {}: validate says {valid}, run says {run:?}",
                    deployment.display(),
                    scenario.display()
                );
                if let Err(message) = run {
                    refusals += 1;
                    assert_refusal_has_reasons(&message);
                } else {
                    runs += 1;
                }
            }
        }
        // Both outcomes occur, so the comparison tested something.
        assert!(runs >= 5 && refusals >= 5, "{runs} run, {refusals} refused");
    }

    /// A refusal ends in "see above" only below at least one error line
    /// naming a file and a line.
    fn assert_refusal_has_reasons(message: &str) {
        let lines: Vec<&str> = message.lines().collect();
        let last = lines.last().copied().unwrap_or("");
        if last.contains("see above") {
            assert!(
                lines.iter().any(|l| l.contains(": error: ")),
                "nothing above: {message}"
            );
        }
        assert!(
            lines.iter().any(|l| l.contains(": error: ")),
            "no reason given: {message}"
        );
    }

    /// Refused variants of runnable documents: each must be refused by
    /// both, with the reason at the expected file, line and key.
    #[test]
    fn what_run_refuses_validate_refuses_at_the_same_key_and_line() {
        let scenario = root().join("scenarios/4x8-h200.yaml");
        let deployment = root().join("deployments/1p3d-ep8-epp.yaml");
        let epp = root().join("deployments/pd/epp-prefix-pd.yaml");
        let text = std::fs::read_to_string(&deployment).unwrap();
        let offload = "offload:\n  tiers:\n    - tier: cpu_dram\n      bytes: 549755813888\n";
        assert!(text.contains(offload), "the base deployment changed");
        let edit = |to: &str| text.replace(offload, to);
        type Case = (
            &'static str,
            Vec<(PathBuf, Result<String, ReadError>)>,
            &'static str,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                "arc eviction under LMCache",
                vec![(
                    deployment.clone(),
                    Ok(edit(&format!(
                        "{offload}  eviction_policy: arc\n  connector: LMCacheConnectorV1\n"
                    ))),
                )],
                "offload.eviction_policy",
                "1p3d-ep8-epp.yaml:33:",
            ),
            (
                "prefetching",
                vec![(
                    deployment.clone(),
                    Ok(edit(&format!("{offload}  prefetch_depth: 2\n"))),
                )],
                "offload.prefetch_depth",
                "1p3d-ep8-epp.yaml:33:",
            ),
            (
                "a tier below host memory",
                vec![(
                    deployment.clone(),
                    Ok(edit(&offload.replace("cpu_dram", "local_nvme"))),
                )],
                "offload.tiers[0].tier",
                "1p3d-ep8-epp.yaml:31:",
            ),
            (
                "LMCache's multi-process connector",
                vec![(
                    deployment.clone(),
                    Ok(edit(&format!("{offload}  connector: LMCacheMPConnector\n"))),
                )],
                "offload.connector",
                "1p3d-ep8-epp.yaml:33:",
            ),
            (
                "LMCache on a tier below host memory",
                vec![(
                    deployment.clone(),
                    Ok(edit(&format!(
                        "{}  connector: LMCacheConnectorV1\n",
                        offload.replace("cpu_dram", "local_nvme")
                    ))),
                )],
                "offload.tiers[0].tier",
                "1p3d-ep8-epp.yaml:31:",
            ),
            (
                "an EPP config that is not UTF-8",
                vec![(
                    epp.clone(),
                    Err(ReadError::NotUtf8(pdsim_spec::files::Encoding::Invalid {
                        offset: 0,
                        line: 1,
                    })),
                )],
                "router.endpoint_picker_config",
                "1p3d-ep8-epp.yaml:36:",
            ),
            (
                "an EPP config that cannot be read",
                vec![(
                    epp.clone(),
                    Err(ReadError::Other("permission denied".into())),
                )],
                "router.endpoint_picker_config",
                "1p3d-ep8-epp.yaml:36:",
            ),
            (
                "an EPP config that is a folder",
                vec![(epp.clone(), Err(ReadError::IsDirectory))],
                "router.endpoint_picker_config",
                "1p3d-ep8-epp.yaml:36:",
            ),
            (
                "an EPP config that is missing",
                vec![(epp.clone(), Err(ReadError::Missing))],
                "router.endpoint_picker_config",
                "1p3d-ep8-epp.yaml:36:",
            ),
            (
                "an EPP config of the wrong type",
                vec![(epp.clone(), Ok("- a\n- list\n".into()))],
                "",
                "epp-prefix-pd.yaml:1: error: an EndpointPickerConfig is a mapping (apiVersion, kind, plugins, ...); this file holds a list",
            ),
            (
                "a manifest that is not UTF-8",
                vec![
                    (
                        deployment.clone(),
                        Ok(text.replace("router:\n", "router:\n  manifests: [pool.yaml]\n")),
                    ),
                    (
                        root().join("deployments/pool.yaml"),
                        Err(ReadError::NotUtf8(pdsim_spec::files::Encoding::Invalid {
                            offset: 0,
                            line: 1,
                        })),
                    ),
                ],
                "router.manifests[0]",
                "1p3d-ep8-epp.yaml:36:",
            ),
            (
                "an engine version without a rules pack",
                vec![(
                    scenario.clone(),
                    Ok(std::fs::read_to_string(&scenario)
                        .unwrap()
                        .replace("engine_version: \"0.31.0\"", "engine_version: \"9.9.9\"")),
                )],
                "engine_version",
                "4x8-h200.yaml:10:",
            ),
        ];
        for (what, replaced, path, at) in cases {
            let files = Overlay {
                replaced: replaced.into_iter().collect(),
            };
            let report = check(
                &Request {
                    files: &files,
                    catalog_dirs: vec![],
                    scenario: Some(scenario.clone()),
                    documents: vec![deployment.clone()],
                },
                &[],
            );
            assert!(!report.valid, "{what}: validate passed it");
            let errors: Vec<String> = report
                .problems
                .iter()
                .filter(|p| p.severity == Severity::Error)
                .map(|p| p.to_string())
                .collect();
            let wanted = if path.is_empty() {
                at.to_string()
            } else {
                format!("{at} error: {path}:")
            };
            assert!(
                errors.iter().any(|e| e.contains(&wanted)),
                "{what}: no error at `{wanted}` in {errors:#?}"
            );
            let message = prepare_in(&files, &[], &scenario, &deployment)
                .err()
                .unwrap_or_else(|| panic!("{what}: run would start"))
                .message;
            assert_refusal_has_reasons(&message);
            assert!(message.contains(&wanted), "{what}: run says {message}");
            // The same problems, once each: a missing file is not reported
            // by the spec's check and the router's read both.
            assert_eq!(
                message.lines().filter(|l| l.contains(&wanted)).count(),
                1,
                "{what}: {message}"
            );
        }
    }

    #[test]
    fn see_above_only_points_at_an_error_above() {
        let mut problems = Problems::new();
        let bare = refusal(
            &problems,
            "the documents are invalid",
            "no deployment passed",
        );
        assert!(!bare.contains("see above"), "{bare}");
        assert!(bare.contains("no deployment passed"), "{bare}");
        problems.push(Problem {
            severity: Severity::Warning,
            file: "d.yaml".into(),
            line: Some(3),
            path: "pools".into(),
            code: "w".into(),
            message: "a warning".into(),
        });
        let warned = refusal(
            &problems,
            "the documents are invalid",
            "no deployment passed",
        );
        assert!(
            !warned.contains("see above"),
            "a warning is no reason: {warned}"
        );
        problems.push(Problem {
            severity: Severity::Error,
            ..problems.iter().next().unwrap().clone()
        });
        assert_eq!(
            refusal(
                &problems,
                "the documents are invalid",
                "no deployment passed"
            ),
            "the documents are invalid (see above)"
        );
    }
}
