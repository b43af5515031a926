//! priority-holdback-policy
//! (`flowcontrol/usagelimits/priorityholdback/{priority_holdback,config}.go`).

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
