//! pdsim's shared vocabulary, used by every simulation crate: simulated time
//! as integer nanoseconds, request ids, seeded random streams per purpose,
//! and prompts as content-addressed segments from which block hashes at any
//! block size are derived.
//!
//! **Architecture invariant:** no I/O, no clock, no threads, no floating
//! point in time.

pub mod kv_events;
pub mod lru;
pub mod prompt;
pub mod rng;
pub mod time;

pub use prompt::{BlockHasher, Prompt, Segment};
pub use rng::{Purpose, Stream};
pub use time::{ARRIVAL_HORIZON, RUN_HORIZON, SimDuration, SimTime};

/// A request's index in the run's flat request storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct RequestId(pub u32);

impl RequestId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}
