//! Limits past which a value describes no deployment that exists or could
//! be built: refused at validation (`beyond-limit`) with the key, the line
//! and the limit, rather than handed to the simulator to allocate or count
//! up to. Each limit sits well above the largest real hardware or setting,
//! so no real plan is ever refused; each says why it is where it is.

use crate::load::Source;
use crate::problem::Problems;

/// The problem code of every limit here.
pub const CODE: &str = "beyond-limit";

/// Nodes in one cluster or pool: the largest GPU clusters built hold about
/// 200,000 GPUs, some 25,000 nodes; four times that is still refused by no
/// plan.
pub const MAX_NODES: i64 = 100_000;

/// GPUs in one node (the scale-up domain a scenario calls a node): NVL72
/// racks hold 72, announced rack-scale systems a few hundred.
pub const MAX_GPUS_PER_NODE: i64 = 1_024;

/// GPUs in one cluster, nodes × gpus_per_node: 262,144, above the largest
/// cluster built (about 200,000 GPUs in 2025). Every engine costs the event
/// loop about 2.75 KB, so this also keeps the largest accepted cluster's
/// build under 1 GiB (about 720 MB at one GPU per engine), the bound the
/// hostile-input suite holds every case to.
pub const MAX_CLUSTER_GPUS: i128 = 1 << 18;

/// GPUs in one rack: a multiple of the node's, at most the cluster's.
pub const MAX_GPUS_PER_RACK: i64 = 1 << 20;

/// One parallel width (tp, pp, dp, dp_local, pcp, dcp): the widest published
/// data-parallel expert deployments span a few hundred GPUs, tensor
/// parallelism a rack; 32,768 also keeps a rank index inside the event
/// loop's 16 bits.
pub const MAX_PARALLEL_WIDTH: i64 = 1 << 15;

/// Concurrent sequences one engine schedules (`max_num_seqs`): vLLM's
/// defaults are 256 to 1,024; a million is beyond any KV memory.
pub const MAX_NUM_SEQS: i64 = 1 << 20;

/// Tokens one engine step schedules (`max_num_batched_tokens`, capture
/// sizes): defaults are 2,048 to 16,384; 16 Mi tokens is a thousand times
/// the largest.
pub const MAX_BATCHED_TOKENS: i64 = 1 << 24;

/// Tokens per KV block (`block_size`): vLLM uses 16 to 256, vllm-rbln 4,096
/// to 16,384.
pub const MAX_BLOCK_SIZE: i64 = 1 << 20;

/// Any other token count (context lengths, thresholds, shape lengths): the
/// longest context any model serves is about 10 million tokens; 2^31 keeps
/// every count inside the engine's 32-bit token and block counters.
pub const MAX_TOKENS: i64 = 1 << 31;

/// KV blocks one engine rank holds, as the resolution derives them from
/// memory: block ids are 32-bit in vLLM's block pool and in pdsim's.
pub const MAX_KV_BLOCKS: u64 = 1 << 31;

/// The largest CUDA-graph capture size (`max_cudagraph_capture_size`):
/// vLLM's default is 512; capture sizes are generated up to it.
pub const MAX_CAPTURE_SIZE: i64 = 1 << 16;

/// Entries in an explicit `cudagraph_capture_sizes` list: vLLM generates
/// about 70.
pub const MAX_CAPTURE_LIST: usize = 1 << 12;

/// Draft tokens per step (`num_spec_tokens`): drafters propose 1 to 16.
pub const MAX_SPEC_TOKENS: i64 = 1 << 10;

/// Experts, redundant ones included: the largest models have a few hundred.
pub const MAX_EXPERTS: i64 = 1 << 16;

/// Engine steps in an EPLB window or interval: defaults are 1,000 and
/// 3,000 steps.
pub const MAX_STEPS: i64 = 1 << 31;

/// Bytes of one offload tier: the largest servers hold about 32 TiB of host
/// memory, and a tier is per engine; 1 PiB is thirty times that.
pub const MAX_OFFLOAD_BYTES: i64 = 1 << 50;

/// Blocks an offload connector prefetches ahead of admission.
pub const MAX_PREFETCH_DEPTH: i64 = 1 << 20;

/// Device memory of one chip in GiB: the largest accelerators hold 288 GiB;
/// 64 TiB is two hundred times that.
pub const MAX_CHIP_MEMORY_GIB: f64 = 65_536.0;

/// A duration in a document, in milliseconds (SLO thresholds): thirty days.
/// No latency objective or timeout is measured in months, and simulated time
/// is 64-bit nanoseconds, which a few centuries would exhaust.
pub const MAX_DURATION_MS: f64 = 30.0 * 24.0 * 3_600_000.0;

/// Characters in a scenario's or deployment's `name`: 253, the most a
/// Kubernetes object name may have (a DNS subdomain, RFC 1123), and the
/// deployments these documents describe are Kubernetes objects. A name is
/// an identity quoted whole in every message, report, results folder
/// README and summary, so one of a hundred thousand characters would make
/// each of those lines that long.
pub const MAX_NAME_CHARS: usize = 253;

/// Pushes a `beyond-limit` error when the `name` at `path` has more than
/// [`MAX_NAME_CHARS`] characters, quoting only its length.
pub fn check_name(source: &Source, problems: &mut Problems, path: &str, name: &str) {
    let chars = name.chars().count();
    if chars > MAX_NAME_CHARS {
        problems.push(source.error(
            path,
            CODE,
            format!(
                "a name of {chars} characters is longer than any deployment's (at most {MAX_NAME_CHARS}, a Kubernetes object name's limit)"
            ),
        ));
    }
}

/// Pushes a `beyond-limit` error when `value` exceeds `limit`. The message
/// quotes the value and the limit; the path and line come from the source.
pub fn check_int(source: &Source, problems: &mut Problems, path: &str, value: i64, limit: i64) {
    if value > limit {
        problems.push(source.error(path, CODE, beyond(value, limit)));
    }
}

/// As [`check_int`] for an optional value.
pub fn check_opt(
    source: &Source,
    problems: &mut Problems,
    path: &str,
    value: Option<i64>,
    limit: i64,
) {
    if let Some(value) = value {
        check_int(source, problems, path, value, limit);
    }
}

/// As [`check_int`] for a finite number (non-finite values are the range
/// checks' to refuse).
pub fn check_f64(source: &Source, problems: &mut Problems, path: &str, value: f64, limit: f64) {
    if value.is_finite() && value > limit {
        problems.push(source.error(path, CODE, beyond(short(value), limit)));
    }
}

/// A number as a message quotes it: plain when short, else in exponent
/// form, so that 1e300 is not quoted as three hundred digits.
fn short(value: f64) -> String {
    if value.abs() < 1e15 {
        format!("{value}")
    } else {
        format!("{value:e}")
    }
}

/// The message of a value beyond its limit.
pub fn beyond(value: impl std::fmt::Display, limit: impl std::fmt::Display) -> String {
    format!("{value} is beyond any real deployment (at most {limit})")
}
