//! Checks of a Scenario and the resolution of its catalog references.

use crate::catalog::{
    Catalog, Chip, CoefficientSet, Entry, EntryKind, Fabric, ResolveError, Shape, StorageClass,
    is_bare_name,
};
use crate::files::{FileKind, Files};
use crate::load::Source;
use crate::model::Model;
use crate::problem::Problems;
use crate::scenario::{
    Scenario, TIME_UNITS, TRACE_MODES, TRACE_V2_READ_TIME_UNITS, TRACE_V2_VERSIONS,
};
use crate::validate::limits::{self, check_f64, check_int, check_opt};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// A scenario whose references all resolved.
#[derive(Clone, Debug)]
pub struct ResolvedScenario {
    pub scenario: Scenario,
    pub chip: Entry<Chip>,
    pub fabric: Option<Entry<Fabric>>,
    pub storage: Vec<Entry<StorageClass>>,
    pub model: Entry<Model>,
    pub shape: Option<Entry<Shape>>,
    pub coefficients: Vec<Entry<CoefficientSet>>,
    /// The trace path, resolved against the scenario file's directory.
    pub trace_path: Option<PathBuf>,
}

/// Field checks, then reference resolution. Returns the problems and, when
/// every reference resolved, the resolved scenario.
pub fn check(
    source: &Source,
    scenario: &Scenario,
    catalog: &Catalog<'_>,
    files: &dyn Files,
) -> (Problems, Option<ResolvedScenario>) {
    let mut problems = Problems::new();
    if scenario.kind != "Scenario" {
        problems.push(source.error(
            "kind",
            "scenario-kind",
            format!("kind must be `Scenario`, found `{}`", scenario.kind),
        ));
    }
    if scenario.name.trim().is_empty() {
        problems.push(source.error("name", "scenario-name-empty", "name must not be empty"));
    }
    super::limits::check_name(source, &mut problems, "name", &scenario.name);
    if scenario.engine_version.trim().is_empty() {
        problems.push(source.error(
            "engine_version",
            "engine-version-empty",
            "engine_version must name a release",
        ));
    }
    if scenario.coefficients.is_empty() {
        problems.push(source.error(
            "coefficients",
            "coefficients-empty",
            "a scenario names at least one coefficient set",
        ));
    }
    let cluster = &scenario.cluster;
    if cluster.nodes < 1 {
        problems.push(source.error(
            "cluster.nodes",
            "cluster-nodes-below-one",
            format!("nodes must be at least 1, found {}", cluster.nodes),
        ));
    }
    if cluster.gpus_per_node < 1 {
        problems.push(source.error(
            "cluster.gpus_per_node",
            "cluster-gpus-per-node-below-one",
            format!(
                "gpus_per_node must be at least 1, found {}",
                cluster.gpus_per_node
            ),
        ));
    }
    check_int(
        source,
        &mut problems,
        "cluster.nodes",
        cluster.nodes,
        limits::MAX_NODES,
    );
    check_int(
        source,
        &mut problems,
        "cluster.gpus_per_node",
        cluster.gpus_per_node,
        limits::MAX_GPUS_PER_NODE,
    );
    check_opt(
        source,
        &mut problems,
        "cluster.gpus_per_rack",
        cluster.gpus_per_rack,
        limits::MAX_GPUS_PER_RACK,
    );
    let gpus = cluster.nodes as i128 * cluster.gpus_per_node as i128;
    if (1..=limits::MAX_NODES).contains(&cluster.nodes)
        && (1..=limits::MAX_GPUS_PER_NODE).contains(&cluster.gpus_per_node)
        && gpus > limits::MAX_CLUSTER_GPUS
    {
        problems.push(source.error(
            "cluster.nodes",
            limits::CODE,
            format!(
                "{} nodes × {} GPUs = {gpus} GPUs is beyond any real cluster (at most {})",
                cluster.nodes,
                cluster.gpus_per_node,
                limits::MAX_CLUSTER_GPUS
            ),
        ));
    }
    if let Some(rack) = cluster.gpus_per_rack
        && cluster.gpus_per_node >= 1
        && (rack < 1 || rack % cluster.gpus_per_node != 0)
    {
        problems.push(source.error(
            "cluster.gpus_per_rack",
            "cluster-rack-multiple",
            format!(
                "gpus_per_rack {rack} must be a positive multiple of gpus_per_node {}",
                cluster.gpus_per_node
            ),
        ));
    }
    if cluster.nodes > 1 && cluster.fabric.is_none() {
        problems.push(source.error(
            "cluster.fabric",
            "cluster-fabric-missing",
            "a cluster of more than one node needs a fabric",
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, class) in cluster.storage.iter().flatten().enumerate() {
        if class.trim().is_empty() {
            problems.push(source.error(
                &format!("cluster.storage[{i}]"),
                "cluster-storage-empty",
                "a storage entry must name a class",
            ));
        } else if !seen.insert(class.as_str()) {
            problems.push(source.error(
                &format!("cluster.storage[{i}]"),
                "cluster-storage-duplicate",
                format!("storage class `{class}` is listed twice"),
            ));
        }
    }
    let mut trace_path = None;
    if let Some(workload) = &scenario.workload {
        if let Some(problem) = workload
            .client_timeout_s
            .and_then(crate::scenario::client_timeout_problem)
        {
            problems.push(source.error(
                "workload.client_timeout_s",
                "client-timeout-range",
                format!("client_timeout_s {problem}"),
            ));
        }
        match (&workload.shape, &workload.trace) {
            (Some(_), Some(_)) | (None, None) => problems.push(source.error(
                "workload",
                "workload-binding",
                "workload names exactly one of shape or trace",
            )),
            (None, Some(trace)) => {
                let base = Path::new(&source.file).parent().unwrap_or(Path::new(""));
                let path = base.join(&trace.data);
                if trace.data.trim().is_empty() {
                    problems.push(source.error(
                        "workload.trace.data",
                        "trace-file-missing",
                        "the trace path must not be blank",
                    ));
                } else {
                    match files.kind(&path) {
                        FileKind::File => trace_path = Some(path),
                        FileKind::Directory => problems.push(source.error(
                            "workload.trace.data",
                            "trace-file-missing",
                            format!("`{}` is a directory, not a trace file", path.display()),
                        )),
                        FileKind::Special(kind) => problems.push(source.error(
                            "workload.trace.data",
                            "trace-file-missing",
                            format!(
                                "`{}` is {kind}, not a regular file; pdsim reads traces only \
                                 from regular files",
                                path.display()
                            ),
                        )),
                        FileKind::Missing => problems.push(source.error(
                            "workload.trace.data",
                            "trace-file-missing",
                            format!(
                                "`{}` does not exist (the path is relative to the scenario file)",
                                path.display()
                            ),
                        )),
                    }
                }
                if let Some(sha) = &trace.sha256
                    && (sha.len() != 64 || !sha.chars().all(|c| c.is_ascii_hexdigit()))
                {
                    problems.push(source.error(
                        "workload.trace.sha256",
                        "trace-sha256",
                        "sha256 must be 64 hexadecimal digits",
                    ));
                }
                if let Some(rows) = trace.rows.filter(|r| *r < 0) {
                    problems.push(source.error(
                        "workload.trace.rows",
                        "trace-rows-negative",
                        format!("rows must not be negative, found {rows}"),
                    ));
                }
                let header = &trace.header;
                if header.trace_version < 1 {
                    problems.push(source.error(
                        "workload.trace.header.trace_version",
                        "trace-version",
                        "trace_version must be at least 1",
                    ));
                } else if !TRACE_V2_VERSIONS.contains(&header.trace_version) {
                    // `pdsim run` would refuse it: say so here.
                    problems.push(source.error(
                        "workload.trace.header.trace_version",
                        "trace-version",
                        format!(
                            "version {} is not one pdsim reads ({} to {})",
                            header.trace_version,
                            TRACE_V2_VERSIONS.start(),
                            TRACE_V2_VERSIONS.end()
                        ),
                    ));
                }
                if !TIME_UNITS.contains(&header.time_unit.as_str()) {
                    problems.push(source.error(
                        "workload.trace.header.time_unit",
                        "trace-time-unit",
                        format!("time_unit must be one of {}", TIME_UNITS.join(", ")),
                    ));
                } else if !TRACE_V2_READ_TIME_UNITS.contains(&header.time_unit.as_str()) {
                    problems.push(source.error(
                        "workload.trace.header.time_unit",
                        "trace-time-unit",
                        format!(
                            "is `{}`, but TraceV2 timestamp columns are integer microseconds (`arrival_time_us`); pdsim reads only {} rather than guess which of the two is wrong",
                            header.time_unit,
                            TRACE_V2_READ_TIME_UNITS.join(" or ")
                        ),
                    ));
                }
                if let Some(growth) = &header.session_context_growth
                    && !crate::scenario::SESSION_CONTEXT_GROWTH.contains(&growth.as_str())
                {
                    problems.push(source.error(
                        "workload.trace.header.session_context_growth",
                        "trace-session-growth",
                        format!(
                            "is `{growth}`; inference-sim knows only `accumulate` or empty \
                             (every turn's prompt its own)"
                        ),
                    ));
                }
                if !TRACE_MODES.contains(&header.mode.as_str()) {
                    problems.push(source.error(
                        "workload.trace.header.mode",
                        "trace-mode",
                        format!("mode must be one of {}", TRACE_MODES.join(", ")),
                    ));
                }
                if let Some(server) = &header.server {
                    let at = "workload.trace.header.server";
                    for (key, value, limit) in [
                        (
                            "tensor_parallel",
                            server.tensor_parallel,
                            limits::MAX_PARALLEL_WIDTH,
                        ),
                        ("max_num_seqs", server.max_num_seqs, limits::MAX_NUM_SEQS),
                        ("block_size", server.block_size, limits::MAX_BLOCK_SIZE),
                        ("max_model_len", server.max_model_len, limits::MAX_TOKENS),
                    ] {
                        check_opt(source, &mut problems, &format!("{at}.{key}"), value, limit);
                    }
                }
                for (class, target) in &header.goodput_slo_targets {
                    let at = format!("workload.trace.header.goodput_slo_targets.{class}");
                    for (key, value) in [
                        ("ttft_ms", target.ttft_ms),
                        ("itl_ms", target.itl_ms),
                        ("e2e_ms", target.e2e_ms),
                    ] {
                        check_f64(
                            source,
                            &mut problems,
                            &format!("{at}.{key}"),
                            value,
                            limits::MAX_DURATION_MS,
                        );
                    }
                    let values = [target.ttft_ms, target.itl_ms, target.e2e_ms];
                    if values.iter().any(|v| !v.is_finite() || *v < 0.0) {
                        problems.push(source.error(
                            &at,
                            "slo-target-range",
                            "SLO targets must be finite and not negative",
                        ));
                    } else if values.iter().all(|v| *v == 0.0) {
                        problems.push(source.error(
                            &at,
                            "slo-target-empty",
                            "an SLO class needs at least one non-zero target",
                        ));
                    }
                }
            }
            (Some(_), None) => {}
        }
    }

    // References: bare names, resolved in the catalog.
    let mut resolve_problems = Problems::new();
    let mut reference = |path: &str, name: &str, kind: EntryKind| -> bool {
        if !is_bare_name(name) {
            resolve_problems.push(source.error(
                path,
                "reference-not-bare",
                format!("`{name}` must be a bare {} name, not a path", kind.noun()),
            ));
            return false;
        }
        true
    };
    let model_ok = reference("model", &scenario.model, EntryKind::Model);
    let chip_ok = reference("cluster.hardware", &cluster.hardware, EntryKind::Chip);
    let fabric_ok = cluster
        .fabric
        .as_deref()
        .is_none_or(|f| reference("cluster.fabric", f, EntryKind::Fabric));
    let storage_ok: Vec<bool> = cluster
        .storage
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, s)| {
            !s.trim().is_empty()
                && reference(&format!("cluster.storage[{i}]"), s, EntryKind::Storage)
        })
        .collect();
    let shape_ok = scenario
        .workload
        .as_ref()
        .and_then(|w| w.shape.as_deref())
        .is_none_or(|s| reference("workload.shape", s, EntryKind::Shape));
    let coefficients_ok: Vec<bool> = scenario
        .coefficients
        .iter()
        .enumerate()
        .map(|(i, c)| reference(&format!("coefficients[{i}]"), c, EntryKind::CoefficientSet))
        .collect();

    let mut failed = false;
    let mut take =
        |path: &str, name: &str, kind: EntryKind, result: Result<(), ResolveError>| match result {
            Ok(()) => {}
            Err(ResolveError::Unknown { known }) => {
                failed = true;
                let why = match kind {
                    EntryKind::CoefficientSet => blis_set_note(name)
                        .map(|note| format!(" ({note})"))
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                resolve_problems.push(source.error(
                    path,
                    "unknown-reference",
                    format!(
                        "no {} named `{name}`{why}; known: {}",
                        kind.noun(),
                        known.join(", ")
                    ),
                ));
            }
            Err(ResolveError::Invalid(inner)) => {
                failed = true;
                resolve_problems.extend(inner);
                resolve_problems.push(source.error(
                    path,
                    "invalid-reference",
                    format!(
                        "the {} `{name}` is malformed (see the problems in its file)",
                        kind.noun()
                    ),
                ));
            }
        };
    let model = if model_ok {
        let r = catalog.model(&scenario.model);
        take(
            "model",
            &scenario.model,
            EntryKind::Model,
            r.as_ref().map(|_| ()).map_err(Clone::clone),
        );
        r.ok()
    } else {
        None
    };
    let chip = if chip_ok {
        let r = catalog.chip(&cluster.hardware);
        take(
            "cluster.hardware",
            &cluster.hardware,
            EntryKind::Chip,
            r.as_ref().map(|_| ()).map_err(Clone::clone),
        );
        r.ok()
    } else {
        None
    };
    let mut fabric = None;
    if let (true, Some(name)) = (fabric_ok, &cluster.fabric) {
        let r = catalog.fabric(name);
        take(
            "cluster.fabric",
            name,
            EntryKind::Fabric,
            r.as_ref().map(|_| ()).map_err(Clone::clone),
        );
        fabric = r.ok();
    }
    let mut storage = Vec::new();
    for ((i, name), ok) in cluster.storage.iter().flatten().enumerate().zip(storage_ok) {
        if ok {
            let r = catalog.storage(name);
            take(
                &format!("cluster.storage[{i}]"),
                name,
                EntryKind::Storage,
                r.as_ref().map(|_| ()).map_err(Clone::clone),
            );
            storage.extend(r.ok());
        }
    }
    let mut shape = None;
    if let (true, Some(name)) = (
        shape_ok,
        scenario.workload.as_ref().and_then(|w| w.shape.as_ref()),
    ) {
        let r = catalog.shape(name);
        take(
            "workload.shape",
            name,
            EntryKind::Shape,
            r.as_ref().map(|_| ()).map_err(Clone::clone),
        );
        shape = r.ok();
    }
    let mut coefficients = Vec::new();
    for ((i, name), ok) in scenario
        .coefficients
        .iter()
        .enumerate()
        .zip(coefficients_ok)
    {
        if ok {
            let r = catalog.coefficient_set(name);
            take(
                &format!("coefficients[{i}]"),
                name,
                EntryKind::CoefficientSet,
                r.as_ref().map(|_| ()).map_err(Clone::clone),
            );
            coefficients.extend(r.ok());
        }
    }
    let all_resolved = !failed && !resolve_problems.has_errors();
    problems.extend(resolve_problems);
    let resolved = match (all_resolved, model, chip) {
        (true, Some(model), Some(chip)) if !problems.has_errors() => Some(ResolvedScenario {
            scenario: scenario.clone(),
            chip,
            fabric,
            storage,
            model,
            shape,
            coefficients,
            trace_path,
        }),
        _ => None,
    };
    (problems, resolved)
}

/// What pdsim does with a BLIS registry coefficient set a scenario names
/// and no catalog holds (the BLIS scenarios name five of them), or `None`
/// for any other name.
fn blis_set_note(name: &str) -> Option<&'static str> {
    Some(match name {
        "cost-model-primitives" => {
            "a BLIS registry set: pdsim's built-in defaults are its GEMM envelope, HBM and MoE imbalance values (inference-sim/blis-registry @1dd3dc75) for h100, h200, b200, a100-80g and l40s, applied without naming it; remove the name, or give a set of your own with --catalog"
        }
        "cost-model-collectives" => {
            "a BLIS registry set: pdsim's built-in defaults are its NCCL curves (inference-sim/blis-registry @1dd3dc75) for h100 and h200, scaled by bandwidth for other chips, applied without naming it; remove the name, or give a set of your own with --catalog"
        }
        "cost-model-attention" => {
            "a BLIS registry set pdsim has no term for: it prices attention by its causal FLOPs at attention_eps_max and its KV bytes at the derated HBM rate (README, \"The cost models\"); remove the name"
        }
        "cost-model-recurrent" => {
            "a BLIS registry set pdsim has no term for: it prices a hybrid model's Mamba layers from their shapes (projections, the chunked scan, the state update); remove the name"
        }
        "cost-model-memory" => {
            "a BLIS registry set pdsim has no term for: its memory model is its own (`pdsim validate --resolve` shows it); remove the name"
        }
        _ => return None,
    })
}
