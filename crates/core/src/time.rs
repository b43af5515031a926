//! Simulated time: integer nanoseconds (DESIGN decision 1). Floating point
//! appears only when a report converts to milliseconds.

use serde::Serialize;
use std::ops::{Add, AddAssign, Sub};

/// An instant of simulated time, nanoseconds since the run's origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct SimTime(pub u64);

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
