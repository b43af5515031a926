//! The simulated llm-d Endpoint Picker (EPP).
//!
//! This crate loads the router's real inputs exactly as the EPP does — the
//! `EndpointPickerConfig` file, the command-line flags and the Kubernetes
//! manifests — and says, naming the plugin, parameter, flag or apiVersion,
//! what it refuses. pdsim follows the EPP of llm-d-router at commit
//! `ebab687` (2026-08-22), the newest EPP code read for `research/epp.md`.
//!
//! **Architecture invariant:** no I/O. Texts come in as strings with the
//! name to report them under.

pub mod config;
pub mod cycle;
pub mod flags;
pub mod flowcontrol;
pub mod manifests;
pub(crate) mod plugins;
pub mod registry;

pub mod chart;
mod inputs;
mod role;
pub use inputs::{RouterInputs, check_router_inputs};

pub use config::{EndpointPickerConfig, load_config};
pub use cycle::{BurstJoin, BurstMember, Decision, EndpointView, Router, Ticket};
pub use flags::{EppFlags, parse_flags};
pub use flowcontrol::{FlowControl, FlowController};
pub use manifests::{Manifests, load_manifests};

/// A problem with one router input, located by file and key path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouterProblem {
    pub file: String,
    /// The key path inside the file (`plugins[3].parameters.foo`), or the
    /// flag name.
    pub path: String,
    /// The line `path` is written on (1-based), or its nearest written
    /// ancestor's; `None` when the file has no such place (a default).
    pub line: Option<u32>,
    pub code: &'static str,
    pub message: String,
}

impl std::fmt::Display for RouterProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": ")?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{} [{}]", self.message, self.code)
    }
}
