//! `flowcontrol/usagelimits/`: a usage-limit policy gives each provisioned
//! priority band a ceiling; a dispatch cycle walks the bands from the
//! highest priority down and stops at the first whose ceiling the pool's
//! saturation has reached (`controller/internal/processor.go`,
//! `dispatchCycle`). `static-usage-limit-policy` is in
//! `usagelimitpolicy.go`, the others in their own folders.

use crate::plugins::Checks;

pub(crate) mod priorityholdback;
pub(crate) mod softreflectiveceiling;

pub use priorityholdback::{Domain, PriorityHoldback};
pub(crate) use softreflectiveceiling::SoftTick;

/// The configured usage-limit policy (`flowControl.usageLimitPolicyPluginRef`;
/// the static policy with threshold 1.0 when none is named, as the
/// framework injects it).
#[derive(Clone, Debug, PartialEq)]
pub enum UsageLimit {
    /// `static-usage-limit-policy`: `threshold` (default 1.0, in (0, 1])
    /// for every band.
    Static { threshold: f64 },
    /// `priority-holdback-policy`.
    PriorityHoldback(PriorityHoldback),
    /// `soft-reflective-ceiling-policy`, its tick kept by the flow
    /// controller ([`SoftTick`]).
    SoftReflective,
}

impl UsageLimit {
    /// The ceiling of each band, `priorities` ordered highest first, as
    /// `ComputeLimit` writes them into a buffer pre-filled with 1.0
    /// (`processor.go`, `ceilingsBuffer`); `open` is the soft-reflective
    /// policy's alternation on this call.
    pub fn ceilings(&self, saturation: f64, priorities: &[i64], open: bool, out: &mut Vec<f64>) {
        out.clear();
        out.resize(priorities.len(), 1.0);
        match self {
            UsageLimit::Static { threshold } => out.fill(*threshold),
            UsageLimit::PriorityHoldback(p) => p.compute(priorities, out),
            UsageLimit::SoftReflective => softreflectiveceiling::compute(saturation, open, out),
        }
    }
}

/// `usagelimitpolicy.go`, `StaticPolicyFactory`.
pub(crate) fn check_static(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    if let Some(v) = parameters.get("threshold")
        && !v.as_f64().is_some_and(f64::is_finite)
    {
        c.bad("threshold", "threshold must be a number");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_static_policy_gives_every_band_its_threshold() {
        let mut out = Vec::new();
        UsageLimit::Static { threshold: 0.8 }.ceilings(0.3, &[5, 0, -5], false, &mut out);
        assert_eq!(out, vec![0.8, 0.8, 0.8]);
    }
}
