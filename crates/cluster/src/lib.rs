//! The event loop: the pools, pods and engine cores of a deployment as
//! resolved, the requests of a trace flowing through them, and a record of
//! every request's life.
//!
//! **Architecture invariants:** integer-nanosecond time that never goes
//! backwards; events ordered by (time, insertion sequence); one seeded
//! stream per purpose; no I/O, no clock, no threads. Every request that
//! arrives ends `completed`, `rejected` or `aborted`, with its reason, and
//! is handed to a [`RecordSink`] as it ends, so memory holds only the
//! requests in flight.

mod build;
pub mod dp_lb;
mod fabric;
mod records;
mod sim;

pub use build::{
    BuildError, Cluster, KvLease, PoolRuntime, build, build_with_router, default_acceptance,
};
pub use records::{
    CoreSample, Emission, LINK_WINDOW_NS, LinkWindow, MemorySink, Outcome, RecordSink,
    RequestRecord, SAMPLE_NS, StepSample,
};
pub use sim::{
    CLIENT_TIMEOUT, CoreStats, ENGINE_SPINNING, MAX_IN_FLIGHT, Observation, RunError, RunStats,
    SPIN_PREEMPTIONS, run, run_observing,
};
