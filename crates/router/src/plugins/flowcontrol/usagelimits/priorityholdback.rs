//! priority-holdback-policy
//! (`flowcontrol/usagelimits/priorityholdback/{priority_holdback,config}.go`).

use crate::plugins::Checks;

/// How priorities map onto the ceiling range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Domain {
    /// Equal steps by rank (`computeLimitStepwiseSpread`).
    Rank,
    /// Proportional to the priority values (`computeLimitLinearProportional`).
    Value,
}

/// The policy as its factory validates it: `minCeiling` (required, in
/// [0, 1)), `maxCeiling` (default 1.0, in (0, 1]) with min < max,
/// `shape: linear`, `domain` `rank` (default) or `value`. It ignores the
/// saturation: the ceilings depend only on the provisioned bands.
#[derive(Clone, Debug, PartialEq)]
pub struct PriorityHoldback {
    pub min_ceiling: f64,
    pub max_ceiling: f64,
    pub domain: Domain,
}

impl PriorityHoldback {
    /// `ComputeLimit`: one band gets `maxCeiling`; otherwise the domain's
    /// linear spread from `maxCeiling` (highest) to `minCeiling` (lowest).
    pub(super) fn compute(&self, priorities: &[i64], out: &mut [f64]) {
        let (c_min, c_max) = (self.min_ceiling, self.max_ceiling);
        let n = priorities.len();
        if n == 0 {
            return;
        }
        if n == 1 {
            out[0] = c_max;
            return;
        }
        match self.domain {
            Domain::Rank => {
                let spread = c_max - c_min;
                let steps = (n - 1) as f64;
                for (i, c) in out.iter_mut().enumerate() {
                    *c = c_max - i as f64 * spread / steps;
                }
            }
            Domain::Value => {
                let p_min = priorities[n - 1] as f64;
                let p_max = priorities[0] as f64;
                let range = p_max - p_min;
                if range == 0.0 {
                    out.fill(c_max);
                    return;
                }
                let spread = c_max - c_min;
                for (c, p) in out.iter_mut().zip(priorities) {
                    *c = c_min + (*p as f64 - p_min) / range * spread;
                }
            }
        }
    }
}

/// `priorityholdback/config.go`, `buildConfig`: every failure is
/// reported, as `validateConfig` joins them.
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    use crate::plugins::number;
    use serde_yaml::Value;
    let min = number(parameters, "minCeiling");
    let max = number(parameters, "maxCeiling").unwrap_or(1.0);
    // A *float64 left nil (absent or null); a value of the wrong type is
    // the decoder's error, reported already.
    if parameters.get("minCeiling").is_none_or(Value::is_null) {
        c.bad("minCeiling", "minCeiling is required");
    }
    if let Some(shape) = parameters.get("shape").and_then(Value::as_str)
        && shape != "linear"
    {
        c.bad(
            "shape",
            format!("unsupported shape {shape:?}, must be \"linear\""),
        );
    }
    if let Some(domain) = parameters.get("domain").and_then(Value::as_str)
        && !matches!(domain, "rank" | "value")
    {
        c.bad(
            "domain",
            format!("unsupported domain {domain:?}, must be one of: \"rank\", \"value\""),
        );
    }
    if let Some(min) = min {
        if !(0.0..1.0).contains(&min) {
            c.bad(
                "minCeiling",
                format!("minCeiling must be in [0.0, 1.0), got {min:.6}"),
            );
        }
        if min >= max {
            c.bad(
                "minCeiling",
                format!("minCeiling ({min:.6}) must be strictly less than maxCeiling ({max:.6})"),
            );
        }
    }
    if !(max > 0.0 && max <= 1.0) {
        c.bad(
            "maxCeiling",
            format!("maxCeiling must be in (0.0, 1.0], got {max:.6}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ceilings(domain: Domain, priorities: &[i64]) -> Vec<f64> {
        let policy = PriorityHoldback {
            min_ceiling: 0.4,
            max_ceiling: 0.9,
            domain,
        };
        let mut out = vec![1.0; priorities.len()];
        policy.compute(priorities, &mut out);
        out
    }

    #[test]
    fn rank_spreads_equal_steps_from_max_to_min() {
        // c_i = 0.9 − i · 0.5 / 2 over three bands.
        assert_eq!(ceilings(Domain::Rank, &[100, 0, -10]), vec![0.9, 0.65, 0.4]);
        // One band: maxCeiling, holdback bypassed.
        assert_eq!(ceilings(Domain::Rank, &[0]), vec![0.9]);
    }

    #[test]
    fn value_spreads_in_proportion_to_the_priorities() {
        // r = (p − (−10)) / 110: 1, 10/110, 0 → 0.4 + r · 0.5.
        let c = ceilings(Domain::Value, &[100, 0, -10]);
        assert_eq!(c[0], 0.9);
        assert!((c[1] - (0.4 + 10.0 / 110.0 * 0.5)).abs() < 1e-12);
        assert_eq!(c[2], 0.4);
    }
}
