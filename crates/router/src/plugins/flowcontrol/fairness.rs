//! `flowcontrol/fairness/`: how a band chooses among its flows (a
//! `FairnessPolicy`).

use crate::plugins::Checks;

/// The configured fairness policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fairness {
    /// `global-strict-fairness-policy` (`fairness/globalstrict/
    /// global_strict.go`): the flow whose head item is best by the
    /// ordering policy.
    GlobalStrict,
    /// `round-robin-fairness-policy` (`fairness/roundrobin/roundrobin.go`):
    /// flows sorted by key, the next non-empty one after the last picked.
    RoundRobin,
    /// `program-aware-fairness` (`fairness/program-aware/plugin.go`,
    /// `strategy_las.go`): least attained service per fairness id. With one
    /// flow the LAS score has a single entry and picks it; pdsim never has
    /// more than one flow (see [`crate::flowcontrol`]).
    ProgramAware,
}

impl Fairness {
    /// The flow to serve next of `flows`, given each flow's head key by
    /// the ordering policy (`None`: empty) and the flow the policy picked
    /// last (round-robin's cursor). `None`: every flow is empty.
    pub(crate) fn pick(
        self,
        flows: usize,
        head: impl Fn(usize) -> Option<(u64, u64, u64)>,
        last: Option<usize>,
    ) -> Option<usize> {
        match self {
            Fairness::GlobalStrict | Fairness::ProgramAware => (0..flows)
                .filter_map(|i| head(i).map(|key| (key, i)))
                .min()
                .map(|(_, i)| i),
            Fairness::RoundRobin => {
                let start = last.map_or(0, |l| (l + 1) % flows.max(1));
                (0..flows)
                    .map(|k| (start + k) % flows)
                    .find(|i| head(*i).is_some())
            }
        }
    }
}

/// program-aware-fairness: `fairness/program-aware/plugin.go`,
/// `Config.validate` and `newStrategy` (only `las`).
pub(crate) fn check_program_aware(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    if let Some(v) = parameters.get("strategy")
        && !matches!(v.as_str(), Some("las" | ""))
    {
        c.bad("strategy", "strategy must be \"las\"");
    }
    for (key, strict) in [
        ("evictionTtlSeconds", false),
        ("evictionSweepSeconds", true),
        ("lasWeightService", false),
        ("lasWeightHeadWait", false),
        ("lasHalfLifeSeconds", false),
    ] {
        if let Some(v) = parameters.get(key)
            && !v
                .as_f64()
                .is_some_and(|v| if strict { v > 0.0 } else { v >= 0.0 })
        {
            c.bad(
                key,
                format!("{key} must be {}", if strict { "> 0" } else { ">= 0" }),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Fairness;

    #[test]
    fn global_strict_takes_the_best_head_and_round_robin_the_next_busy_flow() {
        // Three flows by their heads' keys: 0 empty, 1 later, 2 earlier.
        let heads = [None, Some((5, 1, 0)), Some((3, 2, 0))];
        let head = |i: usize| heads[i];
        for f in [Fairness::GlobalStrict, Fairness::ProgramAware] {
            assert_eq!(f.pick(3, head, None), Some(2), "{f:?}");
            assert_eq!(f.pick(3, head, Some(2)), Some(2), "{f:?}: no cursor");
        }
        // Equal heads: the first flow.
        let tie = [Some((1, 1, 0)), Some((1, 1, 0))];
        assert_eq!(Fairness::GlobalStrict.pick(2, |i| tie[i], None), Some(0));
        // Round-robin: from the flow after the last picked, skipping the
        // empty one, wrapping around.
        let rr = Fairness::RoundRobin;
        assert_eq!(rr.pick(3, head, None), Some(1));
        assert_eq!(rr.pick(3, head, Some(1)), Some(2));
        assert_eq!(rr.pick(3, head, Some(2)), Some(1));
        assert_eq!(rr.pick(3, |_| None, Some(0)), None);
        // With every flow busy the cursor moves one on and wraps.
        let busy = |_: usize| Some((1, 1, 0));
        assert_eq!(rr.pick(3, busy, Some(0)), Some(1));
        assert_eq!(rr.pick(3, busy, Some(1)), Some(2));
        assert_eq!(rr.pick(3, busy, Some(2)), Some(0));
    }
}
