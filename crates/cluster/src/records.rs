//! What the simulation says about each request when it ends.

use pdsim_core::{RequestId, SimTime};
use serde::Serialize;

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Completed,
    Rejected,
    Aborted,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Rejected => "rejected",
            Outcome::Aborted => "aborted",
        }
    }
}

/// One request's life, written when it ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RequestRecord {
    pub id: RequestId,
    /// 1-based line of the request in its trace (0 for synthetic requests).
    pub source_line: u64,
    pub slo_class: u16,
    pub arrival: SimTime,
    /// When the engine got it, after the frontend's admission delay.
    pub enqueued: Option<SimTime>,
    /// When the engine first scheduled it.
    pub scheduled: Option<SimTime>,
    pub first_token: Option<SimTime>,
    pub last_token: Option<SimTime>,
    pub finished: SimTime,
    pub prompt_tokens: u32,
    pub output_tokens: u32,
    pub cached_tokens: u32,
    pub preemptions: u32,
    /// Pool index, engine (pod) index within the pool, data-parallel rank of
    /// the engine that served the request (the decode engine under P/D).
    pub pool: u16,
    pub pod: u32,
    pub rank: u16,
    /// Under P/D: the prefill engine (pool, pod, rank) and its phases.
    pub prefill: Option<(u16, u32, u16)>,
    pub prefill_scheduled: Option<SimTime>,
    pub prefill_done: Option<SimTime>,
    /// Tokens the prefill engine's own prefix cache had.
    pub prefill_cached_tokens: u32,
    /// The KV read from prefill to decode: when it started and ended, and
    /// how many bytes moved (all GPUs together).
    pub transfer_start: Option<SimTime>,
    pub transfer_end: Option<SimTime>,
    pub transfer_bytes: u64,
    /// The prefill engine freed the blocks before they were read (its hold
    /// timeout ran out); the decode engine recomputed the prompt.
    pub kv_hold_expired: bool,
    /// Tokens LMCache had beyond the HBM hit, on the engine that computed
    /// the prompt.
    pub lmcache_tokens: u32,
    /// Tokens loaded from the offload tier and when the load ran.
    pub offload_tokens: u32,
    pub offload_load_start: Option<SimTime>,
    pub offload_load_end: Option<SimTime>,
    /// The prompt tokens the router's prefix scorer believed the engine
    /// computing the prompt held (the prefill engine under P/D), when the
    /// router has a prefix scorer (see
    /// `pdsim_router::Router::predicted_cached_tokens`).
    pub router_cached_tokens: Option<u32>,
    pub outcome: Outcome,
    /// Why a request was rejected or aborted; empty when completed.
    pub reason: &'static str,
}

/// Receives requests as they end and token emissions as they happen.
pub trait RecordSink {
    /// A request ended.
    fn record(&mut self, record: &RequestRecord);
    /// A request got `tokens` more output tokens `gap` after its previous
    /// ones (not called for the first token).
    fn emission(&mut self, gap_ns: u64, tokens: u32);
    /// [`RecordSink::emission`] with the record of the request emitting,
    /// as it stands (for sinks that break results down by request, such
    /// as per load stage); by default only the emission is passed on.
    fn emission_of(&mut self, _record: &RequestRecord, gap_ns: u64, tokens: u32) {
        self.emission(gap_ns, tokens);
    }
    /// The emissions of one engine core's step, in the order the step
    /// produced them. The simulation hands them over once a step rather
    /// than once a token, so a fan-out of sinks costs one call a sink a
    /// step. By default each is passed to [`RecordSink::emission`]; a sink
    /// that needs the request emitting (as [`RecordSink::emission_of`]
    /// does) overrides this and reads [`Emission::source_line`].
    fn emissions(&mut self, batch: &[Emission]) {
        for e in batch {
            self.emission(e.gap_ns, e.tokens);
        }
    }
    /// A link's utilisation over one window of [`LINK_WINDOW_NS`]: which
    /// GPU it belongs to, what kind it is, and the share of its capacity
    /// used. Windows come in time order; idle links are left out.
    fn link_window(&mut self, _window: LinkWindow) {}
    /// One engine core's state at a sample time, every [`SAMPLE_NS`] on a
    /// grid from time zero while the run is busy, cores in order.
    ///
    /// Over an idle stretch (no step or transfer running, no request
    /// anywhere or none that can move, the next arrival more than one
    /// sample away) the first sample of the stretch is sent and the next
    /// ones are not, until the first grid time at or after the next
    /// arrival. A skipped sample would have been the one before it again:
    /// the same requests waiting and running (none, unless some are
    /// stuck), the same KV usage and cumulative counters, so no prefix
    /// query and no busy time in its window. Samples further apart than
    /// [`SAMPLE_NS`] mark such a stretch.
    fn core_sample(&mut self, _sample: &CoreSample) {}
    /// An engine core started a step (cores of a lockstep group share its
    /// duration).
    fn step(&mut self, _step: &StepSample) {}
}

/// A request got `tokens` more output tokens `gap_ns` after its previous
/// ones: one entry of [`RecordSink::emissions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Emission {
    /// The request's line in its trace ([`RequestRecord::source_line`]).
    pub source_line: u64,
    pub gap_ns: u64,
    pub tokens: u32,
}

/// One engine step: where, when, how long, and the batch's composition.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct StepSample {
    /// The core's index over the whole cluster, pools in order.
    pub core: u32,
    pub pool: u16,
    pub pod: u32,
    pub rank: u16,
    pub start: SimTime,
    pub duration: pdsim_core::SimDuration,
    pub requests: u32,
    pub prefill_requests: u32,
    pub decode_requests: u32,
    pub prefill_tokens: u32,
    pub decode_tokens: u32,
    /// Tokens after CUDA-graph padding.
    pub padded_tokens: u32,
}

/// The period of the per-core time series.
pub const SAMPLE_NS: u64 = 1_000_000_000;

/// One engine core's state at one instant. Counters are cumulative since
/// the start of the run, so a reader takes differences between samples.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct CoreSample {
    pub time: SimTime,
    pub pool: u16,
    pub pod: u32,
    pub rank: u16,
    /// `vllm:num_requests_waiting` and `vllm:num_requests_running`.
    pub waiting: u32,
    pub running: u32,
    /// `vllm:kv_cache_usage_perc`, 0–1.
    pub kv_usage: f64,
    pub prefix_queries_tokens: u64,
    pub prefix_hits_tokens: u64,
    /// Time the core spent stepping.
    pub busy_ns: u64,
}

/// The width of one link-utilisation window.
pub const LINK_WINDOW_NS: u64 = crate::fabric::WINDOW_NS;

/// One link's use over one window.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LinkWindow {
    pub window_start: SimTime,
    pub gpu: u32,
    /// `nic-out`, `nic-in`, `intra-out`, `intra-in`, `offload-read`, `host-in`.
    pub kind: &'static str,
    pub bytes: f64,
    pub utilization: f64,
}

/// A sink that keeps every record in memory, for tests.
#[derive(Clone, Debug, Default)]
pub struct MemorySink {
    pub records: Vec<RequestRecord>,
    pub emissions: Vec<(u64, u32)>,
}

impl RecordSink for MemorySink {
    fn record(&mut self, record: &RequestRecord) {
        self.records.push(record.clone());
    }
    fn emission(&mut self, gap_ns: u64, tokens: u32) {
        self.emissions.push((gap_ns, tokens));
    }
}

impl RequestRecord {
    /// A record for a request that arrived at `arrival`, not yet served,
    /// located at the engine that will serve it.
    pub fn arrived(
        id: RequestId,
        source_line: u64,
        slo_class: u16,
        arrival: SimTime,
        prompt_tokens: u32,
        (pool, pod, rank): (u16, u32, u16),
    ) -> RequestRecord {
        RequestRecord {
            id,
            source_line,
            slo_class,
            arrival,
            enqueued: None,
            scheduled: None,
            first_token: None,
            last_token: None,
            finished: arrival,
            prompt_tokens,
            output_tokens: 0,
            cached_tokens: 0,
            preemptions: 0,
            pool,
            pod,
            rank,
            prefill: None,
            prefill_scheduled: None,
            prefill_done: None,
            prefill_cached_tokens: 0,
            transfer_start: None,
            transfer_end: None,
            transfer_bytes: 0,
            kv_hold_expired: false,
            lmcache_tokens: 0,
            offload_tokens: 0,
            offload_load_start: None,
            offload_load_end: None,
            router_cached_tokens: None,
            outcome: Outcome::Completed,
            reason: "",
        }
    }
}
