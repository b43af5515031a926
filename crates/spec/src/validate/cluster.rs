//! Checks of a Deployment against its scenario's cluster ("Against its
//! scenario's cluster" in the specification).

use crate::deployment::Deployment;
use crate::layout::{Placement, PoolLayout, place_dp_local};
use crate::load::Source;
use crate::problem::Problems;
use crate::scenario::Cluster;

/// Runs the cluster checks. `layouts` are the pools' derived layouts.
pub fn check(
    source: &Source,
    deployment: &Deployment,
    layouts: &[PoolLayout],
    cluster: &Cluster,
) -> Problems {
    let mut problems = Problems::new();
    let total: i128 = deployment.pools.iter().map(|p| p.nodes as i128).sum();
    if total != cluster.nodes as i128 {
        problems.push(source.error(
            "pools",
            "pool-nodes-sum",
            format!(
                "the pools' nodes sum to {total}, but the cluster has {} nodes; a deployment lays out the whole cluster",
                cluster.nodes
            ),
        ));
    }
    let gpus_per_node = cluster.gpus_per_node.max(1) as u128;
    for (pool, layout) in deployment.pools.iter().zip(layouts) {
        let at = |key: &str| format!("pools[{}].{key}", layout.index);
        let dp_local = pool.parallel.dp_local;
        if dp_local > 0 && cluster.gpus_per_node % dp_local != 0 {
            problems.push(source.error(
                &at("parallel.dp_local"),
                "dp-local-divides-gpus-per-node",
                format!(
                    "dp_local {dp_local} does not divide gpus_per_node {}",
                    cluster.gpus_per_node
                ),
            ));
        }
        let pool_gpus = (layout.nodes as u128).saturating_mul(gpus_per_node);
        if layout.gpus_per_engine > pool_gpus {
            problems.push(source.error(
                &at("parallel"),
                "ranks-exceed-pool",
                format!(
                    "one engine needs pp × tp × pcp × dp = {} GPUs, but the pool's {} nodes hold {pool_gpus}",
                    layout.gpus_per_engine, layout.nodes
                ),
            ));
        }
        if dp_local > 0 && dp_local <= pool.parallel.dp {
            let verdict = place_dp_local(
                layout.world_size,
                layout.dp as u128,
                dp_local as u128,
                gpus_per_node,
                layout.nodes as u128,
            );
            match verdict {
                Placement::Fits => {}
                Placement::StartsOffNode => problems.push(source.error(
                    &at("parallel.dp_local"),
                    "dp-local-placement",
                    format!(
                        "local replica {} would start at device {} of a {}-GPU node: {dp_local} replicas of {} ranks do not fit on one node",
                        dp_local - 1,
                        (dp_local as u128 - 1).saturating_mul(layout.world_size),
                        cluster.gpus_per_node,
                        layout.world_size
                    ),
                )),
                Placement::NoShareFits => problems.push(source.error(
                    &at("parallel.dp_local"),
                    "dp-local-placement",
                    format!(
                        "no launch can place {dp_local} local replicas of {} ranks: no per-node share of a replica fits beside the others within the pool's {} nodes",
                        layout.world_size, layout.nodes
                    ),
                )),
                Placement::Unknown => problems.push(source.warning(
                    &at("parallel.dp_local"),
                    "dp-local-fit-unverified",
                    "the placement search hit its step bound before deciding; this layout's fit is unverified",
                )),
            }
        }
    }
    if let (Some(offload), Some(storage)) = (&deployment.offload, &cluster.storage)
        && !storage.is_empty()
    {
        for (i, tier) in offload.tiers.iter().enumerate() {
            if !tier.tier.is_empty() && !storage.contains(&tier.tier) {
                problems.push(source.error(
                    &format!("offload.tiers[{i}].tier"),
                    "offload-tier-not-in-cluster",
                    format!(
                        "tier `{}` is not one of the cluster's storage classes: {}",
                        tier.tier,
                        storage.join(", ")
                    ),
                ));
            }
        }
    }
    problems
}
