//! KV transfer between a prefill and a decode engine: the fixed cost of one
//! transfer and the share of nominal link bandwidth its payload gets
//! (DESIGN decision 7, `research/blis-documents.md` §7: effective bandwidth
//! = the fabric's `InterNodeBwGBps` × `pd_transfer_overhead`). The links
//! themselves, and how concurrent transfers share them, are the cluster's.

use crate::coefficients::{Builtin, Deployment, Resolver};
use pdsim_core::SimDuration;
use pdsim_spec::catalog::{Chip, CoefficientSet};
use pdsim_spec::layout::PoolLayout;

/// Per-transfer constants of one pool pair.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransferModel {
    /// Descriptor exchange and completion notice before bytes flow.
    pub base_latency: SimDuration,
    /// Effective over nominal bandwidth, in (0, 1].
    pub overhead: f64,
}

impl TransferModel {
    /// Reads `pd_transfer_base_latency` (us_per_transfer) and
    /// `pd_transfer_overhead` (dimensionless) from the scenario's sets, scoped
    /// to the decode pool, falling back to the BLIS registry's placeholders
    /// (50 µs and 1.0, both `assumed` there).
    pub fn new(
        chip_name: &str,
        model_name: &str,
        layout: &PoolLayout,
        chip: &Chip,
        sets: &[CoefficientSet],
    ) -> Result<TransferModel, String> {
        let deployment = Deployment::of(chip_name, model_name, layout, chip.gpus_per_node);
        let mut resolver = Resolver::new(deployment, sets)?;
        let source = "BLIS registry pd-transfer-estimates (assumed placeholder)";
        let base_us = resolver.value(
            "pd_transfer_base_latency",
            "us_per_transfer",
            Some(Builtin::new(50.0, source)),
            0.0,
            1e7,
        )?;
        let overhead = resolver.value(
            "pd_transfer_overhead",
            "dimensionless",
            Some(Builtin::new(1.0, source)),
            1e-6,
            1.0,
        )?;
        Ok(TransferModel {
            base_latency: SimDuration::from_secs_f64(base_us * 1e-6),
            overhead,
        })
    }
}
