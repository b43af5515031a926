//! What the model-family resolution tests share: validating a scenario and
//! a deployment held in memory, and reading one resolved setting.

use pdsim_spec::files::MemoryFiles;
use pdsim_spec::resolve::PoolResolution;
use pdsim_spec::validate::{Report, Request, validate};

/// The report of validating `scenario` (`s.yaml`) with `deployment`
/// (`d.yaml`).
pub fn validate_pair(scenario: &str, deployment: &str) -> Report {
    let files = MemoryFiles::new()
        .with("s.yaml", scenario)
        .with("d.yaml", deployment);
    validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    })
}

/// The resolved value of setting `key` in `pool`.
pub fn setting<'a>(pool: &'a PoolResolution, key: &str) -> &'a str {
    &pool
        .settings
        .iter()
        .find(|s| s.key == key)
        .unwrap_or_else(|| panic!("no setting {key}: {:?}", pool.settings))
        .value
}
