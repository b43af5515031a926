//! A drafter's acceptance per position as the scenario's coefficient sets
//! give it: `spec_acceptance_<method>_pos<i>` (dimensionless, 0-based),
//! chosen by scope as every coefficient is (`coefficients`: the last entry
//! applying to the pool's hardware, model, tp, ep and nodes spanned wins),
//! so a set measured on one model or chip changes only the pools it is
//! scoped to. The defaults per method are the cluster's
//! (`pdsim_cluster::build::default_acceptance`).

use crate::coefficients::{Deployment, Resolver};
use pdsim_spec::catalog::CoefficientSet;
use pdsim_spec::layout::PoolLayout;

/// Of positions `0..positions` of `method`'s drafts, the acceptance the
/// sets give, `None` where no applicable entry names the position. A value
/// outside [0, 1], or in other units than `dimensionless`, is an error
/// naming the coefficient.
pub fn acceptance_overrides(
    chip_name: &str,
    chip_gpus_per_node: Option<i64>,
    model_name: &str,
    layout: &PoolLayout,
    method: &str,
    positions: usize,
    sets: &[CoefficientSet],
) -> Result<Vec<Option<f64>>, String> {
    let deployment = Deployment::of(chip_name, model_name, layout, chip_gpus_per_node);
    let mut r = Resolver::new(deployment, sets)?;
    (0..positions)
        .map(|pos| {
            let name = format!("spec_acceptance_{method}_pos{pos}");
            if r.has_entry(&name) {
                r.value(&name, "dimensionless", None, 0.0, 1.0).map(Some)
            } else {
                Ok(None)
            }
        })
        .collect()
}
