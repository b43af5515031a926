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

#[cfg(test)]
mod tests {
    use super::acceptance_overrides;
    use crate::tests::{entry, llama8b_tp1, set};

    /// What the sets give positions 0..3 of EAGLE-3 for a Llama-3.1-8B pool
    /// on one H100 at tp 1.
    fn overrides(entries: &str) -> Result<Vec<Option<f64>>, String> {
        let s = llama8b_tp1();
        acceptance_overrides(
            &s.chip_name,
            s.chip.gpus_per_node,
            &s.model.name,
            &s.layout,
            "eagle3",
            3,
            &[set("accept", entries)],
        )
    }

    #[test]
    fn each_position_takes_the_last_entry_applying_to_the_pool() {
        let entries = [
            entry("spec_acceptance_eagle3_pos0", 0.9, "dimensionless", "{}"),
            entry(
                "spec_acceptance_eagle3_pos2",
                0.2,
                "dimensionless",
                "{model: [llama-3.1-8b]}",
            ),
            // Scoped elsewhere: not this pool's.
            entry(
                "spec_acceptance_eagle3_pos1",
                0.8,
                "dimensionless",
                "{hardware: [b200]}",
            ),
            entry(
                "spec_acceptance_eagle3_pos2",
                0.3,
                "dimensionless",
                "{tp: [8]}",
            ),
            // Another method's and a position past the drafts: not asked.
            entry("spec_acceptance_mtp_pos1", 0.7, "dimensionless", "{}"),
            entry("spec_acceptance_eagle3_pos3", 0.1, "dimensionless", "{}"),
            // A later applicable entry wins.
            entry(
                "spec_acceptance_eagle3_pos0",
                0.6,
                "dimensionless",
                "{hardware: [h100]}",
            ),
        ]
        .concat();
        assert_eq!(
            overrides(&entries).unwrap(),
            vec![Some(0.6), None, Some(0.2)]
        );
        assert_eq!(overrides("").unwrap(), vec![None, None, None]);
    }

    #[test]
    fn an_acceptance_is_a_probability_in_its_units() {
        for (value, units) in [
            (1.5, "dimensionless"),
            (-0.1, "dimensionless"),
            (0.5, "tokens"),
        ] {
            let entries = entry("spec_acceptance_eagle3_pos1", value, units, "{}");
            let err = overrides(&entries).unwrap_err();
            assert!(err.contains("spec_acceptance_eagle3_pos1"), "{err}");
        }
    }
}
