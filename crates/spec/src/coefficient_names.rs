//! The names of the coefficients pdsim reads from a scenario's coefficient
//! sets. An entry by any other name would change nothing in a run, so a set
//! holding one is refused by name (`coefficient-unread`) rather than taken
//! and ignored: a BLIS registry set such as `cost-model-attention` prices
//! mechanisms pdsim's cost model does not have, and a user naming it must
//! not believe it applied.
//!
//! Every read goes through `pdsim_cost::coefficients::Resolver::value`,
//! which asserts in debug builds (every test) that the name it is asked for
//! is one [`read_by_pdsim`] accepts, so a new read cannot be left off this
//! list; a test holds each exact name here to a string literal in the code
//! that reads it, so the list carries no name nothing reads.

/// Exact names, by the code that reads them.
pub const READ: &[&str] = &[
    // The roofline (`crates/cost/src/roofline.rs`): GEMM envelope, memory,
    // attention, host and MoE terms.
    "gemm_eps_max_bf16",
    "gemm_m_half_bf16",
    "gemm_eps_max_fp8",
    "gemm_m_half_fp8",
    "attention_eps_max",
    "hbm_derate",
    "hbm_constant_latency",
    "moe_routing_imbalance_median",
    "engram_host_read_bw",
    "allreduce_custom_floor_ratio",
    "p2p_latency",
    "collective_internode_floor",
    "collective_internode_efficiency",
    "all2all_high_throughput_handshake",
    "all2all_low_latency_bw_efficiency",
    "host_replay_graph_per_step",
    "host_launch_eager_per_layer",
    "host_launch_per_kernel",
    "host_schedule_per_step",
    "host_schedule_per_request",
    // Host terms both cost models read.
    "host_admission_per_token",
    "frontend_rust_admission_ratio",
    "host_api_request",
    "host_output_token",
    "host_completion",
    "host_tokenizer_batch_wait",
    "host_tokenizer_batch_max",
    // The fitted linear model (`crates/cost/src/linear.rs`).
    "linear_step_us",
    "linear_prefill_token_us",
    "linear_decode_token_us",
    "linear_kv_read_token_us",
    // KV transfers between P/D pools (`crates/cost/src/transfer.rs`).
    "pd_transfer_base_latency",
    "pd_transfer_overhead",
];

/// The collective operations whose measured curves are read per chip and
/// group width (`collective_curve` in `crates/cost/src/roofline.rs`).
const COLLECTIVE_OPS: &[&str] = &["all_reduce", "all_gather", "reduce_scatter", "alltoall"];

/// Whether pdsim reads a coefficient named `name`: an exact name of
/// [`READ`]; a collective curve term,
/// `collective_{floor,peak_rate,transition_rate}_<op>_fp16_{2,4,8}rank_<chip>`;
/// or a drafter's acceptance at a position,
/// `spec_acceptance_<method>_pos<N>` (`crates/cluster/src/build.rs`).
pub fn read_by_pdsim(name: &str) -> bool {
    READ.contains(&name) || is_collective_term(name) || is_acceptance(name)
}

fn is_collective_term(name: &str) -> bool {
    let Some(rest) = ["floor_", "peak_rate_", "transition_rate_"]
        .iter()
        .find_map(|term| name.strip_prefix("collective_")?.strip_prefix(term))
    else {
        return false;
    };
    COLLECTIVE_OPS.iter().any(|op| {
        rest.strip_prefix(op)
            .and_then(|r| r.strip_prefix("_fp16_"))
            .and_then(|r| {
                ["2rank_", "4rank_", "8rank_"]
                    .iter()
                    .find_map(|w| r.strip_prefix(w))
            })
            .is_some_and(|chip| {
                !chip.is_empty()
                    && chip
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            })
    })
}

fn is_acceptance(name: &str) -> bool {
    name.strip_prefix("spec_acceptance_")
        .and_then(|r| r.rsplit_once("_pos"))
        .is_some_and(|(method, pos)| {
            !method.is_empty() && !pos.is_empty() && pos.chars().all(|c| c.is_ascii_digit())
        })
}

#[cfg(test)]
mod tests {
    use super::read_by_pdsim;

    #[test]
    fn exact_names_and_the_two_families_are_read_and_nothing_else() {
        for name in [
            "hbm_derate",
            "linear_step_us",
            "pd_transfer_overhead",
            "collective_floor_all_reduce_fp16_8rank_h100",
            "collective_peak_rate_alltoall_fp16_2rank_a100_80g",
            "collective_transition_rate_reduce_scatter_fp16_4rank_b200",
            "spec_acceptance_eagle3_pos0",
            "spec_acceptance_deepseek_mtp_pos12",
        ] {
            assert!(read_by_pdsim(name), "{name}");
        }
        for name in [
            // The BLIS registry's attention and memory sets.
            "attention_decode_rate",
            "attention_decode_floor",
            "attention_prefill_work_scale",
            "host_link_bandwidth",
            "engine_workspace_bytes",
            "moe_routing_imbalance_p90",
            // Near misses of the families.
            "collective_floor_all_reduce_fp16_16rank_h100",
            "collective_floor_all_reduce_bf16_8rank_h100",
            "collective_floor_broadcast_fp16_8rank_h100",
            "collective_floor_all_reduce_fp16_8rank_",
            "collective_floor_all_reduce_fp16_8rank_H100",
            "spec_acceptance_eagle3_pos",
            "spec_acceptance__pos1",
            "spec_acceptance_eagle3_posx",
            "",
        ] {
            assert!(!read_by_pdsim(name), "{name}");
        }
    }
}
