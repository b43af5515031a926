//! One simulated vLLM V1 engine core (one data-parallel rank): the
//! scheduler, KV blocks and prefix cache, CUDA-graph padding, dual-batch
//! overlap and speculative decoding.
//!
//! **Architecture invariant:** the engine does no I/O, reads no clock and
//! starts no thread. Time is passed in; randomness comes from a stream the
//! caller owns. It knows nothing of pools, routers or networks: the cluster
//! crate composes engines.

pub mod chains;
pub mod graph;
pub mod kv;
pub mod lmcache;
pub mod mamba;
pub mod offload;
pub mod replay;
pub mod scheduler;
pub mod tiering;
pub mod window;

pub use graph::{CudaGraphMode, Dbo, Graphs};
pub use scheduler::{
    Abort, AsyncLoadReserve, Engine, EngineConfig, EngineEvent, KvTransfer, NewRequest,
    PadSpecDecode, Policy, SPIN_PREEMPTIONS, SpecConfig,
};
