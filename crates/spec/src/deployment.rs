//! The Deployment document: how a scenario's cluster is divided into pools,
//! each pool's parallel layout and engine settings, offload tiers, the P/D
//! transfer connector and the router's own input files.
//!
//! The types mirror the specification key for key (`seeds/000`, "Deployment").
//! Numbers that a check must be able to call negative load as signed integers;
//! the checks in `validate::deployment` decide what is allowed. Omitted
//! booleans stay `None` ("the engine's default"), which is not the same as
//! `false`.

use crate::quantity::MaxModelLen;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Deployment {
    pub kind: String,
    pub name: String,
    pub pools: Vec<Pool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offload: Option<Offload>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pd_transfer: Option<PdTransfer>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router: Option<Router>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Pool {
    pub role: String,
    pub nodes: i64,
    pub parallel: Parallel,
    #[serde(default)]
    pub engine: Engine,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// A pool's role, once the field check has accepted the string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Colocated,
    Prefill,
    Decode,
}

impl Role {
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "colocated" => Some(Role::Colocated),
            "prefill" => Some(Role::Prefill),
            "decode" => Some(Role::Decode),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Colocated => "colocated",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }

    /// The `llm-d.ai/role` label llm-d puts on the pool's pods.
    pub fn llm_d_label(self) -> &'static str {
        match self {
            Role::Colocated => "prefill-decode",
            Role::Prefill => "prefill",
            Role::Decode => "decode",
        }
    }
}

/// The label key llm-d's filters select on.
pub const ROLE_LABEL: &str = "llm-d.ai/role";

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Parallel {
    pub tp: i64,
    pub pp: i64,
    pub dp: i64,
    #[serde(default)]
    pub dp_local: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_parallel_load_balancing: Option<String>,
    #[serde(default)]
    pub pcp: i64,
    #[serde(default)]
    pub dcp: i64,
    #[serde(default)]
    pub enable_expert_parallel: bool,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Engine {
    // Communication.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all2all_backend: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_custom_all_reduce: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allreduce_backend: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dbo: Option<Dbo>,
    // Scheduling and memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_batched_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_seqs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_prefill_token_threshold: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<MaxModelLen>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_memory_utilization: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub async_scheduling: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cudagraph_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cudagraph_capture_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cudagraph_capture_sizes: Option<Vec<i64>>,
    // Weights and caches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_backend: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_dtype: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_prefix_caching: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub swa_bounded_replay: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba_cache_dtype: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba_ssm_cache_dtype: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mamba_cache_mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_cascade_attn: Option<bool>,
    // Speculation and experts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speculative: Option<Speculative>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eplb: Option<Eplb>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engram_config: Option<EngramConfig>,
    // Decode-context parallelism.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcp_comm_backend: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dcp_q_replicate: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cp_kv_cache_interleave_size: Option<i64>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Dbo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_dbo: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dbo_decode_token_threshold: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dbo_prefill_token_threshold: Option<i64>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Eplb {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enable_eplb: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub num_redundant_experts: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_size: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_interval: Option<i64>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Speculative {
    pub method: String,
    pub num_spec_tokens: i64,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EngramConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_offload: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dp_shared_memory: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_thp: Option<bool>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Offload {
    pub tiers: Vec<OffloadTier>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefetch_depth: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct OffloadTier {
    pub tier: String,
    pub bytes: i64,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PdTransfer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connector: Option<String>,
}

/// The router's own inputs, exactly as the real EPP reads them.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Router {
    /// `--name=value` flags. A Helm `epp.flags` map (`name: value`) is
    /// accepted too and rendered to this list in key order, as Helm's
    /// `range` renders a map.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "epp_flags"
    )]
    pub epp_flags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint_picker_config: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifests: Option<Vec<String>>,
}

/// Reads `epp_flags` as a list of strings or a Helm-style map of scalars.
fn epp_flags<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<String>>, D::Error> {
    use serde::de::Error;
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Flags {
        List(Vec<String>),
        Map(BTreeMap<String, serde_yaml::Value>),
    }
    let flags = match Flags::deserialize(deserializer) {
        Ok(flags) => flags,
        Err(_) => {
            return Err(D::Error::custom(
                "epp_flags must be a list of `--name=value` strings or a Helm map of `name: value`",
            ));
        }
    };
    match flags {
        Flags::List(list) => Ok(Some(list)),
        Flags::Map(map) => map
            .into_iter()
            .map(|(name, value)| {
                let value = match value {
                    serde_yaml::Value::String(s) => s,
                    serde_yaml::Value::Bool(b) => b.to_string(),
                    serde_yaml::Value::Number(n) => n.to_string(),
                    _ => {
                        return Err(D::Error::custom(format!(
                            "epp_flags.{name} must be a string, number or boolean"
                        )));
                    }
                };
                Ok(format!("--{name}={value}"))
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some),
    }
}
