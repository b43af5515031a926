//! Derived layout values, computed once and reused by every later stage:
//! ranks, expert-parallel width, engines per pool and GPUs per engine
//! (`research/blis-documents.md` §2a, "Parallel layouts" in the
//! specification).
//!
//! All products saturate rather than overflow: a document may state widths
//! whose product no integer holds, and the checks must still say "too many"
//! rather than wrap around to a small number.

use crate::deployment::{Pool, Role};
use serde::Serialize;

/// The expert-parallel width: tp × pcp × dp with each factor floored at 1
/// when expert parallelism is enabled, otherwise 1. There is no key for it.
pub fn expert_parallel_width(tp: i64, pcp: i64, dp: i64, enabled: bool) -> u128 {
    if !enabled {
        return 1;
    }
    floor1(tp)
        .saturating_mul(floor1(pcp))
        .saturating_mul(floor1(dp))
}

fn floor1(value: i64) -> u128 {
    value.max(1) as u128
}

/// One pool's derived layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PoolLayout {
    pub index: usize,
    pub role: Role,
    pub nodes: u64,
    pub tp: u64,
    pub pp: u64,
    pub dp: u64,
    /// Data-parallel replicas per node; 0 means the launch decides.
    pub dp_local: u64,
    /// Prefill-context parallel width, floored at 1.
    pub pcp: u64,
    /// Decode-context parallel width, floored at 1 (reuses TP ranks).
    pub dcp: u64,
    /// Ranks of one data-parallel replica: pp × tp × pcp.
    pub world_size: u128,
    /// GPUs of one engine (one GPU per rank): world × dp.
    pub gpus_per_engine: u128,
    pub expert_parallel_width: u128,
    /// Filled when the cluster is known.
    pub cluster: Option<PoolInCluster>,
}

/// What a pool's layout means on a concrete cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PoolInCluster {
    pub gpus_per_node: u64,
    pub pool_gpus: u128,
    /// Identical engines the pool holds, llm-d style.
    pub engines: u128,
    /// GPUs the engines leave unused.
    pub idle_gpus: u128,
    /// Nodes one engine spans at least.
    pub nodes_per_engine: u128,
}

impl PoolLayout {
    /// Derives a pool's layout. Callers run it only after the field checks
    /// passed, so widths are at least 1 and the role is known.
    pub fn derive(index: usize, pool: &Pool, gpus_per_node: Option<i64>) -> PoolLayout {
        let p = &pool.parallel;
        let world = floor1(p.pp)
            .saturating_mul(floor1(p.tp))
            .saturating_mul(floor1(p.pcp));
        let gpus_per_engine = world.saturating_mul(floor1(p.dp));
        let nodes = pool.nodes.max(0) as u64;
        let cluster = gpus_per_node.filter(|g| *g >= 1).map(|g| {
            let g = g as u128;
            let pool_gpus = (nodes as u128).saturating_mul(g);
            let engines = pool_gpus / gpus_per_engine.max(1);
            PoolInCluster {
                gpus_per_node: g as u64,
                pool_gpus,
                engines,
                idle_gpus: pool_gpus - engines.saturating_mul(gpus_per_engine),
                nodes_per_engine: gpus_per_engine.div_ceil(g),
            }
        });
        PoolLayout {
            index,
            role: Role::parse(&pool.role).unwrap_or(Role::Colocated),
            nodes,
            tp: p.tp.max(1) as u64,
            pp: p.pp.max(1) as u64,
            dp: p.dp.max(1) as u64,
            dp_local: p.dp_local.max(0) as u64,
            pcp: p.pcp.max(1) as u64,
            dcp: p.dcp.max(1) as u64,
            world_size: world,
            gpus_per_engine,
            expert_parallel_width: expert_parallel_width(
                p.tp,
                p.pcp,
                p.dp,
                p.enable_expert_parallel,
            ),
            cluster,
        }
    }
}

/// The verdict of the dp_local placement search.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    Fits,
    /// The last local replica would start beyond the node's last device.
    StartsOffNode,
    /// No per-node share of a replica fits beside the other local replicas.
    NoShareFits,
    /// The bounded search ran out of steps before deciding.
    Unknown,
}

/// The most steps the placement search takes before it answers `Unknown`.
pub const PLACEMENT_SEARCH_STEPS: u128 = 1 << 20;

/// Decides whether `dp_local` replicas of `world` ranks each can be placed
/// on nodes of `gpus_per_node` devices the way the engine places them: local
/// replica i occupies devices starting at i × world
/// (`vllm/v1/engine/utils.py`, the data-parallel launch), and a replica may
/// span k nodes, k a divisor of `world` no larger than the nodes a replica
/// group can claim. Mirrors BLIS `spec/deployment/validate.go`.
pub fn place_dp_local(
    world: u128,
    dp: u128,
    dp_local: u128,
    gpus_per_node: u128,
    pool_nodes: u128,
) -> Placement {
    if dp_local == 0 {
        return Placement::Fits;
    }
    let offset = (dp_local - 1).saturating_mul(world);
    if offset >= gpus_per_node {
        return Placement::StartsOffNode;
    }
    let groups = (dp / dp_local).max(1);
    let max_split = (pool_nodes / groups).max(1);
    let room = gpus_per_node - offset;
    let k_low = world.div_ceil(room);
    let k_high = max_split.min(world);
    if k_low > k_high {
        return Placement::NoShareFits;
    }
    let by_k = k_high - k_low + 1;
    let by_share = room.min(world);
    let mut steps: u128 = 0;
    if by_k <= by_share {
        let mut k = k_low;
        while k <= k_high {
            steps += 1;
            if steps > PLACEMENT_SEARCH_STEPS {
                return Placement::Unknown;
            }
            if world.is_multiple_of(k) {
                return Placement::Fits;
            }
            k += 1;
        }
    } else {
        for share in 1..=by_share {
            steps += 1;
            if steps > PLACEMENT_SEARCH_STEPS {
                return Placement::Unknown;
            }
            if world.is_multiple_of(share) {
                let k = world / share;
                if k >= k_low && k <= k_high {
                    return Placement::Fits;
                }
            }
        }
    }
    Placement::NoShareFits
}

#[cfg(test)]
mod tests {
    use super::{Placement, place_dp_local};

    /// The step bound is never reached by a bundle within the size limits
    /// (`validate::limits`): the search tries at most one candidate per
    /// node of the pool, and a pool holds at most `MAX_NODES` nodes. The
    /// worst case: a prime world of ranks, so no node count divides it
    /// early, over the most nodes allowed.
    #[test]
    fn the_placement_search_decides_within_the_limits() {
        use crate::validate::limits::{MAX_NODES, MAX_PARALLEL_WIDTH};
        const { assert!((MAX_NODES as u128) < super::PLACEMENT_SEARCH_STEPS) };
        let prime_world = 32_749; // the largest prime below 32,768
        assert!(prime_world <= MAX_PARALLEL_WIDTH as u128);
        for gpus_per_node in [2, 8, 16, 1024] {
            let verdict = place_dp_local(prime_world, 1, 1, gpus_per_node, MAX_NODES as u128);
            assert_ne!(verdict, Placement::Unknown, "{gpus_per_node} GPUs per node");
        }
    }

    #[test]
    fn the_specification_example() {
        // 2 nodes × 8 GPUs, tp 4, dp 4: dp_local 4 starts its last replica
        // at device 12; dp_local 2 fits.
        assert_eq!(place_dp_local(4, 4, 4, 8, 2), Placement::StartsOffNode);
        assert_eq!(place_dp_local(4, 4, 2, 8, 2), Placement::Fits);
    }

    #[test]
    fn a_replica_may_span_nodes_only_by_a_divisor() {
        // world 12 on 8-GPU nodes, one local replica, 3 nodes for one group:
        // shares of 6 (k = 2) fit; 12 does not.
        assert_eq!(place_dp_local(12, 1, 1, 8, 3), Placement::Fits);
        // world 7 (prime) beside a second local replica leaves room for one
        // rank per node, so a replica needs 7 nodes; a 2-node pool has not.
        assert_eq!(place_dp_local(7, 2, 2, 8, 2), Placement::NoShareFits);
        assert_eq!(place_dp_local(7, 2, 2, 8, 8), Placement::Fits);
    }

    #[test]
    fn an_undecidable_search_says_so() {
        // A large prime world with room for many shares and many nodes:
        // both ranges exceed the step bound, and no divisor is found early.
        let world: u128 = 1_099_511_627_791; // prime, about 2^40
        let room: u128 = 1 << 21;
        let gpus_per_node = world + room;
        assert_eq!(
            place_dp_local(world, 2, 2, gpus_per_node, 1 << 40),
            Placement::Unknown
        );
    }
}
