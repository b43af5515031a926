//! soft-reflective-ceiling-policy
//! (`flowcontrol/usagelimits/softreflectiveceiling/policy.go`).
//!
//! `ComputeLimit` gives band 0 of the ordered bands (the highest) 1.0, and
//! band `i` of `n` 1.0 while the saturation `s` is below its reflective
//! ceiling `1 − i·s/(n − 1)`, 0.0 at `s ≥ 1`, and otherwise, in the
//! alternating regime (`s ≥ 1 − s`, `s < 1`), 1.0 on one call in
//! `round(s/(1 − s))` by a policy-wide tick that advances on every call in
//! that regime. The framework calls it once per dispatch cycle: on every
//! 1 ms tick of the processor's dispatch ticker and after every enqueue
//! (`controller/internal/processor.go`, `Run`), whether or not anything
//! is queued. pdsim's event loop does not run the idle cycles one by one,
//! so [`SoftTick`] counts them: the ticks between two changes of the
//! saturation detector's inputs all saw the same saturation, and the
//! utilization detector's only change in between is a view turning stale,
//! at a known instant.

/// The regime in which a gated band alternates (`inAlternatingRegime`).
pub(crate) fn alternating(saturation: f64) -> bool {
    saturation >= 1.0 - saturation && saturation < 1.0
}

/// `period := max(1, round(s / (1 − s + 1e-9)))`; Go's `math.Round` rounds
/// half away from zero, as Rust's `f64::round` does.
pub(super) fn period(saturation: f64) -> u64 {
    (saturation / (1.0 - saturation + 1e-9)).round().max(1.0) as u64
}

/// `ComputeLimit` for the ordered bands, `open` the alternation's state
/// on this call.
pub(super) fn compute(saturation: f64, open: bool, out: &mut [f64]) {
    // With one band only `i == 0` is reached, so `n - 1` divides only
    // when there are at least two.
    let n = out.len();
    for (i, c) in out.iter_mut().enumerate() {
        let reflective = if i == 0 {
            f64::INFINITY
        } else {
            1.0 - i as f64 * saturation / (n - 1) as f64
        };
        *c = if saturation < reflective || (saturation < 1.0 && open) {
            1.0
        } else {
            0.0
        };
    }
}

/// The policy's tick over simulated time: how many cycles in the
/// alternating regime have run, and up to when the dispatch ticker's
/// instants are counted. Before the run the engines are idle, so the
/// saturation is below the regime and the tick starts at 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SoftTick {
    pub tick: u64,
    /// Every ticker instant before this is counted.
    pub through_ns: u64,
    /// The dispatch ticker's phase: its instants are `phase + k · 1 ms`.
    pub phase_ns: u64,
}

/// The dispatch ticker's period (`p.clock.NewTicker(time.Millisecond)`).
pub(crate) const TICK_NS: u64 = 1_000_000;

impl SoftTick {
    /// The ticker's instants in `[from, to)`.
    pub fn instants(&self, from: u64, to: u64) -> u64 {
        let first = |t: u64| {
            // Instants before `t`: those at or after the phase, up to t.
            t.saturating_sub(self.phase_ns).div_ceil(TICK_NS)
        };
        if to <= from {
            0
        } else {
            first(to) - first(from)
        }
    }

    /// The `m`-th ticker instant (1-based) at or after `from`.
    pub fn nth_instant(&self, from: u64, m: u64) -> u64 {
        let k = from.saturating_sub(self.phase_ns).div_ceil(TICK_NS) + m - 1;
        self.phase_ns.saturating_add(k.saturating_mul(TICK_NS))
    }

    /// One call of `ComputeLimit` at saturation `s`: the tick advances in
    /// the alternating regime; returns whether the alternation is open.
    pub fn call(&mut self, saturation: f64) -> bool {
        if !alternating(saturation) {
            return false;
        }
        self.tick += 1;
        self.tick.is_multiple_of(period(saturation))
    }

    /// When, from `through_ns` on, the ticker's calls at saturation `s`
    /// next open the alternation.
    pub fn next_open_ns(&self, saturation: f64) -> u64 {
        let p = period(saturation);
        self.nth_instant(self.through_ns, p - self.tick % p)
    }
}

#[cfg(test)]
mod tests {
    use super::{SoftTick, compute, period};

    #[test]
    fn the_highest_band_is_never_gated_below_full_saturation() {
        // Three bands at saturation 0.4: band 1's ceiling is 1 − 0.4/2 =
        // 0.8 (open), band 2's 1 − 0.4 = 0.6 (open).
        let mut out = vec![1.0; 3];
        compute(0.4, false, &mut out);
        assert_eq!(out, vec![1.0, 1.0, 1.0]);
        // At 0.7: band 1's ceiling 0.65 ≤ 0.7 and band 2's 0.3: past
        // them, so they alternate, closed on this call and open on another.
        compute(0.7, false, &mut out);
        assert_eq!(out, vec![1.0, 0.0, 0.0]);
        compute(0.7, true, &mut out);
        assert_eq!(out, vec![1.0, 1.0, 1.0]);
        // At its ceiling exactly (band 2 at 0.5 = 1 − 0.5) a band is past
        // it (`saturation < reflectiveCeiling` fails).
        compute(0.5, false, &mut out);
        assert_eq!(out, vec![1.0, 1.0, 0.0]);
        // Full saturation closes every band but the highest, open or not.
        compute(1.0, true, &mut out);
        assert_eq!(out, vec![1.0, 0.0, 0.0]);
        let mut one = vec![0.5];
        compute(0.99, false, &mut one);
        assert_eq!(one, vec![1.0]);
    }

    #[test]
    fn the_tick_opens_one_call_in_a_period_and_counts_ticker_instants() {
        // round(0.75 / 0.25) = 3; 0.5 → 1; 0.9 → 9; 0.6 / (0.4 + 1e-9) is
        // just under 1.5, so 1, the guard's shave deciding the half.
        assert_eq!(
            (period(0.75), period(0.6), period(0.5), period(0.9)),
            (3, 1, 1, 9)
        );
        let mut t = SoftTick {
            tick: 0,
            through_ns: 0,
            phase_ns: 300_000,
        };
        // Below the regime the tick stays; in it, calls 3, 6, … open.
        assert!(!t.call(0.4));
        let opens: Vec<bool> = (0..6).map(|_| t.call(0.75)).collect();
        assert_eq!(opens, [false, false, true, false, false, true]);
        assert!(!t.call(1.0), "full saturation is outside the regime");
        assert_eq!(t.tick, 6);
        // Instants at 0.3 ms, 1.3 ms, …: two in [0, 1.3 ms], none in
        // [0.4 ms, 1.2 ms], one in [1.3 ms, 1.3 ms + 1 ns).
        assert_eq!(t.instants(0, 1_300_001), 2);
        assert_eq!(t.instants(400_000, 1_200_000), 0);
        assert_eq!(t.instants(1_300_000, 1_300_001), 1);
        assert_eq!(t.nth_instant(0, 1), 300_000);
        assert_eq!(t.nth_instant(300_001, 2), 2_300_000);
        // Tick 7 at period 3: two calls more open it, at the second
        // instant from 0.
        t.tick = 7;
        assert_eq!(t.next_open_ns(0.75), 1_300_000);
        t.tick = 6;
        assert_eq!(t.next_open_ns(0.75), 2_300_000, "a full period on");
    }
}
