//! Validation of a bundle: one scenario (optional) and any number of
//! deployments, in two layers — field checks first, then the engine
//! release's rules, which run only when the field layer passed.

pub mod catalog;
pub mod cluster;
pub mod deployment;
pub mod limits;
pub mod scenario;

use crate::catalog::Catalog;
use crate::deployment::Deployment;
use crate::files::Files;
use crate::layout::PoolLayout;
use crate::load::{Source, load};
use crate::problem::{Problem, Problems, Severity};
use crate::resolve::{Resolution, resolve};
use crate::rules::{self, RuleContext, pack};
use crate::scenario::Scenario;
use scenario::ResolvedScenario;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What to validate.
pub struct Request<'a> {
    pub files: &'a dyn Files,
    pub catalog_dirs: Vec<PathBuf>,
    pub scenario: Option<PathBuf>,
    /// Deployment (or Scenario) documents. A Scenario among them is used as
    /// the scenario when `scenario` is not given.
    pub documents: Vec<PathBuf>,
}

/// A deployment that passed every check, ready for the simulator.
#[derive(Clone, Debug)]
pub struct ValidDeployment {
    pub source: Source,
    pub deployment: Deployment,
    pub layouts: Vec<PoolLayout>,
    pub resolution: Resolution,
}

/// The outcome of validation.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub valid: bool,
    /// True when a file could not be read at all (exit code 2).
    #[serde(skip)]
    pub io_error: bool,
    pub problems: Problems,
    #[serde(skip)]
    pub scenario: Option<ResolvedScenario>,
    #[serde(skip)]
    pub deployments: Vec<ValidDeployment>,
    /// Resolutions of the deployments whose rules ran.
    #[serde(skip)]
    pub resolutions: Vec<Resolution>,
    /// Every deployment that loaded, valid or not, with its file: the
    /// router's checks (another crate) run on these.
    #[serde(skip)]
    pub loaded: Vec<(String, Deployment)>,
}

fn read(
    files: &dyn Files,
    path: &Path,
    problems: &mut Problems,
    io_error: &mut bool,
) -> Option<Source> {
    let label = path.display().to_string();
    match files.read(path) {
        Ok(text) => Some(Source::new(label, text)),
        Err(error) => {
            *io_error = true;
            let code = error.code();
            problems.push(Problem {
                severity: Severity::Error,
                file: label.clone(),
                line: None,
                path: String::new(),
                code: code.to_string(),
                message: format!("`{label}` {error}"),
            });
            None
        }
    }
}

/// Reads the `kind` of a document without committing to a type.
fn kind_of(source: &Source) -> Option<String> {
    let value: serde_yaml::Value = crate::load::from_str(&source.text).ok()?;
    value.get("kind")?.as_str().map(str::to_string)
}

/// Limits on what the resolution derives rather than what a document
/// states: the KV blocks an engine rank's memory holds, which a chip with
/// enormous memory or a tiny block could push past the block pool's 32-bit
/// ids, and the context window a model's `max_position_embeddings` gives
/// when the deployment states none.
fn check_derived(source: &Source, resolution: &Resolution) -> Problems {
    let mut problems = Problems::new();
    for (i, pool) in resolution.pools.iter().enumerate() {
        if pool.kv.max_model_len > limits::MAX_TOKENS as u64 {
            problems.push(source.error(
                &format!("pools[{i}]"),
                limits::CODE,
                format!(
                    "the model's context window of {} tokens (max_position_embeddings) is beyond any real deployment (at most {}); state engine.max_model_len",
                    pool.kv.max_model_len,
                    limits::MAX_TOKENS
                ),
            ));
        }
        if pool.kv.num_gpu_blocks > limits::MAX_KV_BLOCKS {
            problems.push(source.error(
                &format!("pools[{i}]"),
                limits::CODE,
                format!(
                    "each rank's KV memory holds {} blocks of {} tokens, beyond any real deployment (at most {}); check the chip's MemoryGiB and engine.block_size",
                    pool.kv.num_gpu_blocks,
                    pool.engine.block_size,
                    limits::MAX_KV_BLOCKS
                ),
            ));
        }
    }
    problems
}

/// Validates a bundle and, for each deployment whose rules ran, resolves it.
pub fn validate(request: &Request<'_>) -> Report {
    let files = request.files;
    let catalog = Catalog::new(files, request.catalog_dirs.clone());
    let mut problems = Problems::new();
    let mut io_error = false;

    // Sort the documents: scenarios and deployments.
    let mut scenario_source = None;
    if let Some(path) = &request.scenario {
        scenario_source = read(files, path, &mut problems, &mut io_error);
    }
    let mut deployment_sources = Vec::new();
    for path in &request.documents {
        let Some(source) = read(files, path, &mut problems, &mut io_error) else {
            continue;
        };
        match kind_of(&source).as_deref() {
            Some("Scenario") if request.scenario.is_none() && scenario_source.is_none() => {
                scenario_source = Some(source);
            }
            Some("Scenario") => problems.push(source.error(
                "kind",
                "scenario-twice",
                "a bundle holds one scenario; this is a second one",
            )),
            // A coefficient set given directly is checked as the registry
            // validator checks it; it plays no part in the bundle.
            Some("CoefficientSet") => {
                match crate::catalog::load_commented::<crate::catalog::CoefficientSet>(&source) {
                    Ok(set) => {
                        if let Err(found) = catalog::check_coefficient_set(&source, &set) {
                            problems.extend(found);
                        }
                    }
                    Err(found) => problems.extend(found),
                }
            }
            _ => deployment_sources.push(source),
        }
    }

    // The scenario: field checks and catalog references.
    let mut resolved_scenario = None;
    let mut scenario_failed = false;
    if let Some(source) = &scenario_source {
        match load::<Scenario>(source) {
            Ok(doc) => {
                let (found, resolved) = scenario::check(source, &doc, &catalog, files);
                scenario_failed = found.has_errors();
                problems.extend(found);
                resolved_scenario = resolved;
            }
            Err(found) => {
                scenario_failed = true;
                problems.extend(found);
            }
        }
    }

    let mut deployments = Vec::new();
    let mut resolutions = Vec::new();
    let mut loaded = Vec::new();
    for source in &deployment_sources {
        let doc = match load::<Deployment>(source) {
            Ok(doc) => doc,
            Err(found) => {
                problems.extend(found);
                continue;
            }
        };
        loaded.push((source.file.clone(), doc.clone()));
        let mut found = deployment::check(source, &doc, files);
        if scenario_source.is_none() {
            found.push(source.warning(
                "",
                "scenario-missing",
                "validated without its scenario: the checks against the cluster and the engine release's rules were skipped (pass --scenario FILE)",
            ));
        }
        let field_ok = !found.has_errors();
        let gpus_per_node = resolved_scenario
            .as_ref()
            .map(|s| s.scenario.cluster.gpus_per_node);
        let layouts: Vec<PoolLayout> = doc
            .pools
            .iter()
            .enumerate()
            .map(|(i, p)| PoolLayout::derive(i, p, gpus_per_node))
            .collect();
        if let (true, Some(resolved)) = (field_ok, &resolved_scenario) {
            found.extend(cluster::check(
                source,
                &doc,
                &layouts,
                &resolved.scenario.cluster,
            ));
        }
        let field_layer_ok = !found.has_errors() && !scenario_failed;
        if let (true, Some(resolved)) = (field_layer_ok, &resolved_scenario) {
            let version = &resolved.scenario.engine_version;
            match pack::for_version(version) {
                // Without a pack nothing resolves the engine's settings,
                // so `run` cannot build the deployment: an error here,
                // where the reason can be named, not a bare refusal later.
                None => found.push(Problem {
                    severity: Severity::Error,
                    file: scenario_source.as_ref().map_or(String::new(), |s| s.file.clone()),
                    line: scenario_source.as_ref().and_then(|s| s.lines.line_of("engine_version")),
                    path: "engine_version".into(),
                    code: "engine-version-known".into(),
                    message: format!(
                        "no rules pack for engine version `{version}`: pdsim can neither check nor run a deployment on a release it has no rules for (packs: {})",
                        pack::known_versions().join(", ")
                    ),
                }),
                Some(pack) => {
                    let resolution = resolve(&doc, resolved, pack, &layouts);
                    found.extend(check_derived(source, &resolution));
                    let ctx = RuleContext {
                        source,
                        deployment: &doc,
                        pack,
                        model: &resolved.model.value,
                        resolution: &resolution,
                    };
                    found.extend(rules::run(&ctx));
                    if !found.has_errors() {
                        deployments.push(ValidDeployment {
                            source: source.clone(),
                            deployment: doc.clone(),
                            layouts: layouts.clone(),
                            resolution: resolution.clone(),
                        });
                    }
                    resolutions.push(resolution);
                }
            }
        }
        problems.extend(found);
    }
    if scenario_source.is_some()
        && deployment_sources.is_empty()
        && request.documents.is_empty()
        && !io_error
    {
        // A scenario on its own is fine; nothing more to check.
    }
    problems.sort();
    Report {
        valid: !problems.has_errors(),
        io_error,
        problems,
        scenario: resolved_scenario,
        deployments,
        resolutions,
        loaded,
    }
}
