//! The Scenario document (BLIS-compatible, `research/blis-documents.md` §1):
//! the fixed problem a deployment is laid out against — the model, the cluster
//! inventory, the engine release, the workload and the coefficient sets.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub kind: String,
    pub name: String,
    pub model: String,
    pub coefficients: Vec<String>,
    pub engine_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<Workload>,
    pub cluster: Cluster,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Cluster {
    pub hardware: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fabric: Option<String>,
    pub nodes: i64,
    pub gpus_per_node: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_rack: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Vec<String>>,
}

/// Exactly one of `shape` (a catalog workload shape) or `trace`, and how
/// long each client waits.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceRef>,
    /// Seconds a client waits for its whole response before it gives up
    /// (inference-perf's `load.request_timeout`); omitted, clients wait for
    /// ever, unless a request carries its own deadline (TraceV2
    /// `deadline_us`). A positive, finite number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_timeout_s: Option<f64>,
}

/// The longest client timeout a document or flag may give, in seconds:
/// the thirty days of `MAX_DURATION_MS`; no client waits longer.
pub const MAX_CLIENT_TIMEOUT_S: f64 = 30.0 * 24.0 * 3_600.0;

/// Why a client timeout in seconds cannot be used, if it cannot: not a
/// positive finite number, or longer than [`MAX_CLIENT_TIMEOUT_S`].
pub fn client_timeout_problem(seconds: f64) -> Option<String> {
    if !seconds.is_finite() || seconds <= 0.0 {
        Some(format!(
            "{} is not a positive, finite number of seconds (leave it out for clients \
             that never give up)",
            crate::problem::number(seconds)
        ))
    } else if seconds > MAX_CLIENT_TIMEOUT_S {
        Some(format!(
            "{seconds:e} s is beyond any real client (at most {MAX_CLIENT_TIMEOUT_S} s, thirty days)"
        ))
    } else {
        None
    }
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceRef {
    /// The trace's CSV path, relative to the scenario file's directory.
    pub data: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rows: Option<i64>,
    pub header: TraceHeader,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceHeader {
    pub trace_version: i64,
    pub time_unit: String,
    pub mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload_seed: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<TraceServer>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub goodput_slo_targets: BTreeMap<String, SloTarget>,
    /// How a conversation's later turns' `input_tokens` are meant
    /// (inference-sim's `TraceHeader.SessionContextGrowth`,
    /// `sim/workload/tracev2.go`): `accumulate`, each later turn's prompt is
    /// the previous turn's prompt and answer followed by `input_tokens` new
    /// tokens; absent or empty, every turn's prompt is its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_context_growth: Option<String>,
}

/// The values `session_context_growth` may take (inference-sim refuses any
/// other: `LoadTraceV2SessionBlueprints`, `sim/workload/replay.go`).
pub const SESSION_CONTEXT_GROWTH: [&str; 2] = ["", "accumulate"];

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TraceServer {
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "type")]
    pub server_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_parallel: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_seqs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_utilization: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<i64>,
}

/// Goodput thresholds of one SLO class; 0 leaves a dimension unconstrained.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SloTarget {
    #[serde(default)]
    pub ttft_ms: f64,
    #[serde(default)]
    pub itl_ms: f64,
    #[serde(default)]
    pub e2e_ms: f64,
}

/// The time units a TraceV2 header may name.
pub const TIME_UNITS: &[&str] = &[
    "ns",
    "nanoseconds",
    "us",
    "microseconds",
    "ms",
    "milliseconds",
    "s",
    "seconds",
];

/// The TraceV2 versions pdsim's reader reads.
pub const TRACE_V2_VERSIONS: std::ops::RangeInclusive<i64> = 1..=3;

/// The time units pdsim's TraceV2 reader reads: the timestamp columns are
/// integer microseconds (`arrival_time_us`), so a header naming another
/// unit contradicts its own columns and is refused rather than guessed.
pub const TRACE_V2_READ_TIME_UNITS: &[&str] = &["us", "microseconds"];

/// The modes a TraceV2 header may name.
pub const TRACE_MODES: &[&str] = &["real", "generated", "replayed"];
