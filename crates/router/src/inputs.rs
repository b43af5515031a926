//! The deployment's `router` block resolved into the EPP's inputs: flags,
//! the configuration (file or `--config-text`, else the built-in default)
//! and manifests, with every problem reported against the file it is in.

use crate::RouterProblem;
use crate::config::{DEFAULT_CONFIG, EndpointPickerConfig, load_config};
use crate::flags::{EppFlags, parse_flags};
use crate::manifests::{Manifests, load_manifests};
use pdsim_spec::deployment::Router;
use pdsim_spec::files::Files;
use pdsim_spec::problem::{Problem, Severity};
use std::path::Path;

/// Everything the simulated EPP starts from.
#[derive(Clone, Debug)]
pub struct RouterInputs {
    pub flags: EppFlags,
    pub config: EndpointPickerConfig,
    /// Where the configuration came from, for reports.
    pub config_origin: String,
    pub manifests: Manifests,
}

fn to_problem(p: RouterProblem) -> Problem {
    Problem {
        severity: Severity::Error,
        file: p.file,
        line: None,
        path: p.path,
        code: p.code.to_string(),
        message: p.message,
    }
}

/// Loads a deployment's router inputs; `router` absent means the EPP's
/// built-in default configuration over every pod.
pub fn check_router_inputs(
    files: &dyn Files,
    deployment_file: &str,
    router: Option<&Router>,
) -> Result<RouterInputs, Vec<Problem>> {
    let base = Path::new(deployment_file).parent().unwrap_or(Path::new(""));
    let mut problems: Vec<Problem> = Vec::new();
    let empty = Router::default();
    let router = router.unwrap_or(&empty);
    let flags = match parse_flags(deployment_file, router.epp_flags.as_deref().unwrap_or(&[])) {
        Ok(flags) => flags,
        Err(found) => {
            problems.extend(found.into_iter().map(|mut p| {
                p.path = format!("router.{}", p.path);
                to_problem(p)
            }));
            EppFlags::default()
        }
    };
    let (label, text) = if let Some(path) = &router.endpoint_picker_config {
        let full = base.join(path);
        match files.read(&full) {
            Ok(text) => (full.display().to_string(), text),
            // The spec's checks already reported a missing file.
            Err(_) => return Err(problems),
        }
    } else if let Some(text) = &flags.config_text {
        (format!("{deployment_file} (--config-text)"), text.clone())
    } else if let Some(path) = &flags.config_file {
        problems.push(Problem {
            severity: Severity::Error,
            file: deployment_file.to_string(),
            line: None,
            path: "router.epp_flags".into(),
            code: "epp-config-file-flag".into(),
            message: format!("--config-file={path} names a path inside the EPP's container; name the file with router.endpoint_picker_config instead"),
        });
        return Err(problems);
    } else {
        (
            "built-in default EndpointPickerConfig".to_string(),
            DEFAULT_CONFIG.to_string(),
        )
    };
    let config = match load_config(&label, &text, flags.allow_experimental) {
        Ok(config) => Some(config),
        Err(found) => {
            problems.extend(found.into_iter().map(to_problem));
            None
        }
    };
    let mut manifests = Manifests::default();
    for path in router.manifests.iter().flatten() {
        let full = base.join(path);
        let Ok(text) = files.read(&full) else {
            continue;
        };
        match load_manifests(&full.display().to_string(), &text) {
            Ok(m) => {
                manifests.pools.extend(m.pools);
                manifests.objectives.extend(m.objectives);
                manifests.ignored.extend(m.ignored);
            }
            Err(found) => problems.extend(found.into_iter().map(to_problem)),
        }
    }
    if flags.endpoint_selector.is_some() && !manifests.objectives.is_empty() {
        problems.push(Problem {
            severity: Severity::Error,
            file: deployment_file.to_string(),
            line: None,
            path: "router.manifests".into(),
            code: "epp-objectives-standalone".into(),
            message: "InferenceObjectives take effect only for an InferencePool (--pool-name); with --endpoint-selector the EPP does not reconcile them".into(),
        });
    }
    match (config, problems.is_empty()) {
        (Some(config), true) => Ok(RouterInputs {
            flags,
            config,
            config_origin: label,
            manifests,
        }),
        _ => Err(problems),
    }
}
