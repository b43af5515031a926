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

/// Where the built-in configuration comes from, as reports name it.
pub const BUILTIN_ORIGIN: &str = "built-in default EndpointPickerConfig";

impl RouterInputs {
    /// The router of a deployment without a `router` block: the EPP's
    /// built-in default configuration over every pod, with default flags
    /// and no manifests (the Deployment specification, `router`: "Absent:
    /// the router's built-in configuration over every pod").
    pub fn builtin() -> RouterInputs {
        let config = load_config(BUILTIN_ORIGIN, DEFAULT_CONFIG, false)
            .unwrap_or_else(|p| unreachable!("the built-in configuration loads: {p:?}"));
        RouterInputs {
            flags: EppFlags::default(),
            config,
            config_origin: BUILTIN_ORIGIN.to_string(),
            manifests: Manifests::default(),
        }
    }

    /// Whether this is the EPP's built-in configuration.
    pub fn is_builtin(&self) -> bool {
        self.config_origin == BUILTIN_ORIGIN
    }
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
        (BUILTIN_ORIGIN.to_string(), DEFAULT_CONFIG.to_string())
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

#[cfg(test)]
mod tests {
    use super::RouterInputs;

    #[test]
    fn the_builtin_router_is_the_epp_default_with_default_flags() {
        let inputs = RouterInputs::builtin();
        assert!(inputs.is_builtin());
        // The EPP scrapes every 50 ms unless told otherwise; a zero here
        // once made the event loop spin on scrapes.
        assert_eq!(inputs.flags.refresh_interval_ns, 50_000_000);
        let profile = &inputs.config.profiles[0];
        assert_eq!(inputs.config.profiles.len(), 1);
        assert_eq!(inputs.config.handler, "single-profile-handler");
        assert_eq!(
            profile.scorers,
            vec![
                ("queue-scorer".to_string(), 2.0),
                ("kv-cache-utilization-scorer".to_string(), 2.0),
                ("prefix-cache-scorer".to_string(), 3.0),
            ]
        );
        assert_eq!(profile.picker, "max-score-picker");
    }
}
