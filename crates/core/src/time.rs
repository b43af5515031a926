//! Simulated time: integer nanoseconds (DESIGN decision 1). Floating point
//! appears only when a report converts to milliseconds.

use serde::Serialize;
use std::ops::{Add, AddAssign, Sub};

/// An instant of simulated time, nanoseconds since the run's origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SimTime(pub u64);

/// The latest instant at which a request may arrive: one year (365 days)
/// after the run's origin.
///
/// The longest public LLM-serving traces span days to a few months (the
/// Azure LLM inference traces an hour to a week, Mooncake's an hour), so a
/// year leaves a wide margin for any real replay, while a trace or a rate
/// that puts an arrival further out is corrupt or a typo (a timestamp in
/// the wrong unit, `--rate 1e-300`) and is refused as an input error. It
/// also keeps every instant of a run far from the end of `u64`
/// nanoseconds (about 584 years), so adding the durations the event loop
/// schedules after an arrival never comes near overflow.
pub const ARRIVAL_HORIZON: SimTime = SimTime(365 * 24 * 3_600 * 1_000_000_000);

/// How far a run's simulated clock may go: two years, the arrival horizon
/// and as long again for the last requests to be served. A run that needs
/// longer serves far slower than its load (or its hardware is implausibly
/// slow); it stops with an error instead of simulating, and writing a row
/// a second for, years.
pub const RUN_HORIZON: SimTime = SimTime(2 * ARRIVAL_HORIZON.0);

/// A span of simulated time in nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SimDuration(pub u64);

impl SimTime {
    pub const ZERO: SimTime = SimTime(0);

    pub fn from_us(us: u64) -> SimTime {
        SimTime(us.saturating_mul(1_000))
    }

    pub fn from_ms(ms: u64) -> SimTime {
        SimTime(ms.saturating_mul(1_000_000))
    }

    /// `count` units of `unit_ns` nanoseconds (a trace's milliseconds or
    /// microseconds), or `None` if that does not fit in `u64` nanoseconds.
    pub fn checked_from_units(count: u64, unit_ns: u64) -> Option<SimTime> {
        count.checked_mul(unit_ns).map(SimTime)
    }

    /// `self + span`, or `None` if that does not fit.
    pub fn checked_add(self, span: SimDuration) -> Option<SimTime> {
        self.0.checked_add(span.0).map(SimTime)
    }

    pub fn as_ns(self) -> u64 {
        self.0
    }

    /// Milliseconds, for reports only.
    pub fn as_ms_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }

    /// The span from `earlier` to `self`; zero if `earlier` is later.
    pub fn since(self, earlier: SimTime) -> SimDuration {
        SimDuration(self.0.saturating_sub(earlier.0))
    }
}

impl SimDuration {
    pub const ZERO: SimDuration = SimDuration(0);

    pub fn from_ns(ns: u64) -> SimDuration {
        SimDuration(ns)
    }

    pub fn from_us(us: u64) -> SimDuration {
        SimDuration(us.saturating_mul(1_000))
    }

    pub fn from_ms(ms: u64) -> SimDuration {
        SimDuration(ms.saturating_mul(1_000_000))
    }

    /// Rounds a non-negative number of seconds to the nearest nanosecond;
    /// negative and NaN inputs become zero, infinities saturate.
    pub fn from_secs_f64(seconds: f64) -> SimDuration {
        if seconds.is_nan() || seconds <= 0.0 {
            return SimDuration::ZERO;
        }
        let ns = (seconds * 1e9).round();
        SimDuration(if ns >= u64::MAX as f64 {
            u64::MAX
        } else {
            ns as u64
        })
    }

    /// A non-negative, finite number of seconds rounded to the nearest
    /// nanosecond, or `None` when it is NaN, negative, infinite or does not
    /// fit in `u64` nanoseconds. For input values, where a silent clamp
    /// would hide a broken input.
    pub fn checked_from_secs_f64(seconds: f64) -> Option<SimDuration> {
        if !seconds.is_finite() || seconds < 0.0 {
            return None;
        }
        let ns = (seconds * 1e9).round();
        // `u64::MAX as f64` rounds up to 2^64, so `<` keeps the cast exact.
        (ns < u64::MAX as f64).then_some(SimDuration(ns as u64))
    }

    pub fn as_ns(self) -> u64 {
        self.0
    }

    pub fn as_ms_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
}

impl Add<SimDuration> for SimTime {
    type Output = SimTime;
    fn add(self, rhs: SimDuration) -> SimTime {
        SimTime(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign<SimDuration> for SimTime {
    fn add_assign(&mut self, rhs: SimDuration) {
        self.0 = self.0.saturating_add(rhs.0);
    }
}

impl Add for SimDuration {
    type Output = SimDuration;
    fn add(self, rhs: SimDuration) -> SimDuration {
        SimDuration(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for SimDuration {
    fn add_assign(&mut self, rhs: SimDuration) {
        self.0 = self.0.saturating_add(rhs.0);
    }
}

impl Sub for SimTime {
    type Output = SimDuration;
    fn sub(self, rhs: SimTime) -> SimDuration {
        self.since(rhs)
    }
}

#[cfg(test)]
mod tests {
    use super::{ARRIVAL_HORIZON, SimDuration, SimTime};

    #[test]
    fn checked_conversions_refuse_what_does_not_fit() {
        assert_eq!(
            SimTime::checked_from_units(3, 1_000_000),
            Some(SimTime(3_000_000))
        );
        assert_eq!(
            SimTime::checked_from_units(u64::MAX / 1_000 + 1, 1_000),
            None
        );
        assert_eq!(
            SimTime(u64::MAX - 1).checked_add(SimDuration(1)),
            Some(SimTime(u64::MAX))
        );
        assert_eq!(SimTime(u64::MAX).checked_add(SimDuration(1)), None);
        assert_eq!(
            SimDuration::checked_from_secs_f64(1.5),
            Some(SimDuration(1_500_000_000))
        );
        assert_eq!(
            SimDuration::checked_from_secs_f64(0.0),
            Some(SimDuration::ZERO)
        );
        for bad in [
            f64::NAN,
            -1.0,
            f64::INFINITY,
            f64::NEG_INFINITY,
            1e300,
            1.9e10,
        ] {
            assert_eq!(SimDuration::checked_from_secs_f64(bad), None, "{bad}");
        }
        // The largest whole second that fits is accepted.
        assert!(SimDuration::checked_from_secs_f64(18_446_744_073.0).is_some());
    }

    #[test]
    fn the_horizon_is_one_year_and_far_from_overflow() {
        assert_eq!(ARRIVAL_HORIZON.as_ns(), 31_536_000_000_000_000);
        // Another 500 years of durations still fit.
        assert!(
            ARRIVAL_HORIZON
                .checked_add(SimDuration(500 * 31_536_000_000_000_000))
                .is_some()
        );
    }
}
