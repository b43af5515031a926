//! soft-reflective-ceiling-policy
//! (`flowcontrol/usagelimits/softreflectiveceiling/policy.go`).

/// `ComputeLimit` for the bands pdsim runs it with. Band 0 (the highest)
/// always gets 1.0. A lower band `i` of `n` is open (1.0) while saturation
/// is below its reflective ceiling `1 − i·s/(n − 1)`, closed (0.0) at
/// saturation ≥ 1, and otherwise alternates open on one call in
/// `round(s/(1 − s))` by a policy-wide tick that counts every dispatch
/// cycle. pdsim's requests are all in band 0 and the loader admits this
/// policy only where band 0 is the highest provisioned band, so the lower
/// bands are always empty and the tick's phase cannot change what is
/// dispatched; they are given their closed value in that regime.
pub(super) fn compute(saturation: f64, out: &mut [f64]) {
    // With one band only `i == 0` is reached, so `n - 1` divides only
    // when there are at least two.
    let n = out.len();
    for (i, c) in out.iter_mut().enumerate() {
        let open = i == 0 || saturation < 1.0 - i as f64 * saturation / (n - 1) as f64;
        *c = if open { 1.0 } else { 0.0 };
    }
}

/// Why the loader refuses the policy where `why` puts a band above band 0.
pub(crate) fn refusal(why: &str) -> String {
    format!(
        "pdsim does not simulate soft-reflective-ceiling-policy with a band above priority 0 ({why}): band 0, where every request of pdsim's is, would then open on one dispatch cycle in round(s/(1-s)) by a tick over every cycle, which pdsim's event loop does not run one by one"
    )
}

#[cfg(test)]
mod tests {
    use super::compute;

    #[test]
    fn the_highest_band_is_never_gated_below_full_saturation() {
        // Three bands at saturation 0.4: band 1's ceiling is 1 − 0.4/2 =
        // 0.8 (open), band 2's 1 − 0.4 = 0.6 (open).
        let mut out = vec![1.0; 3];
        compute(0.4, &mut out);
        assert_eq!(out, vec![1.0, 1.0, 1.0]);
        // At 0.7: band 1's ceiling 0.65 ≤ 0.7 and band 2's 0.3: past them.
        compute(0.7, &mut out);
        assert_eq!(out, vec![1.0, 0.0, 0.0]);
        // At its ceiling exactly (band 2 at 0.5 = 1 − 0.5) a band is past
        // it (`saturation < reflectiveCeiling` fails).
        compute(0.5, &mut out);
        assert_eq!(out, vec![1.0, 1.0, 0.0]);
        let mut one = vec![0.5];
        compute(0.99, &mut one);
        assert_eq!(one, vec![1.0]);
    }
}
