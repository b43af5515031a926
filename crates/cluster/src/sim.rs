//! The discrete-event loop.
//!
//! Events move a request: its arrival at the router, its admission into an
//! engine core once the frontend has rendered and tokenized the prompt, the
//! end of an engine step, and — under P/D — the start and progress of its KV
//! transfer and the end of the prefill engine's lease on its blocks, and the
//! moment its client gives up (its deadline: `Sim::client_timeout`). Events
//! are ordered by (time, sequence), so simultaneous events keep the order in
//! which they were scheduled (DESIGN decision 2). Arrivals are read from the
//! source one ahead, so a trace is streamed rather than loaded.
//!
//! The simulated Endpoint Picker routes every request (the deployment's
//! configuration, or the EPP's built-in one). A request its P/D profile
//! handler disaggregates runs as the llm-d sidecar runs it: the
//! prefill engine gets the request with one output token and holds its
//! blocks; the sidecar then sends the request to the decode engine, which
//! allocates, keeps its own prefix hit, pulls only the missing blocks over
//! the fabric, and decodes. The client's first token comes from the decode
//! engine. The sidecar's side is `handleNIXLV2` in llm-d-router's
//! `pkg/sidecar/proxy/connector_nixlv2.go` (prefill with `max_tokens` 1 and
//! `do_remote_decode`, then decode with the prefill's `kv_transfer_params`);
//! the engines' side is vLLM's
//! `vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`.

use crate::build::Cluster;
use crate::fabric::Network;
use crate::records::{
    CoreSample, Emission, LinkWindow, Outcome, RecordSink, RequestRecord, SAMPLE_NS, StepSample,
};
use pdsim_core::prompt::{content_id, mix64};
use pdsim_core::{Prompt, Purpose, RUN_HORIZON, RequestId, Segment, SimDuration, SimTime, Stream};
use pdsim_cost::{ApiServerCosts, StepCost};
use pdsim_engine::{Abort, Engine, EngineEvent, KvTransfer, NewRequest};
use pdsim_router::BurstJoin;
use pdsim_spec::deployment::Role;
use pdsim_workload::{RequestSpec, TraceError, TurnClient};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};

/// Why a run stopped before its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunError {
    /// The trace has a bad row; the run is not complete.
    Trace(TraceError),
    /// An invariant broke (only checked with `check`).
    Invariant(String),
    /// The run outgrew a safety limit ([`MAX_IN_FLIGHT`],
    /// [`pdsim_core::RUN_HORIZON`]): its results would be meaningless and
    /// holding or writing them unbounded.
    Limit(String),
}

/// See [`pdsim_engine::SPIN_PREEMPTIONS`].
pub use pdsim_engine::SPIN_PREEMPTIONS;

/// The most requests a run holds in flight at once, counted from the
/// oldest still in flight to the newest arrival (the in-flight table's
/// span, which is what its memory follows: about half a kilobyte each).
/// Beyond it the deployment is so far behind its load that every figure
/// would measure the queue; the run stops rather than hold millions of
/// requests (a rate of ten million a second would otherwise fill the
/// machine's memory within seconds).
pub const MAX_IN_FLIGHT: usize = 1_000_000;

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Trace(e) => write!(f, "{e}"),
            RunError::Invariant(m) => write!(f, "invariant violated: {m}"),
            RunError::Limit(m) => write!(f, "the run was stopped: {m}"),
        }
    }
}

/// Totals of one engine core.
#[derive(Clone, Debug, Default)]
pub struct CoreStats {
    pub pool: u16,
    pub pod: u32,
    pub rank: u16,
    /// When the core was first found spinning: [`SPIN_PREEMPTIONS`]
    /// preemptions since it last delivered a token, none of its requests
    /// with a client deadline ([`Sim::check_spin`]). Its requests never
    /// finish (`engine-spinning`).
    pub spun_at: Option<SimTime>,
    pub steps: u64,
    pub busy_ns: u64,
    pub tokens_scheduled: u64,
    pub tokens_padded: u64,
    pub preemptions: u64,
    pub prefix_queries_tokens: u64,
    pub prefix_hits_tokens: u64,
    /// Prompt tokens found in the offload tier (`vllm:external_prefix_cache_hits`).
    pub external_hits_tokens: u64,
    pub offload_stores: u64,
    pub offload_evictions: u64,
    /// LMCache's chunks stored and evicted.
    pub lmcache_stores: u64,
    pub lmcache_evictions: u64,
    /// KV bytes LMCache loaded into and stored from the core's GPUs, and
    /// the step time its synchronous copies took.
    pub lmcache_loaded_bytes: f64,
    pub lmcache_stored_bytes: f64,
    pub lmcache_io_ns: u64,
    /// Bytes written to and read from secondary offload tiers
    /// (`TieringOffloadingSpec`).
    pub tier_written_bytes: f64,
    pub tier_read_bytes: f64,
    /// Chunks the secondary tiers took, refused (full), and promoted into
    /// the host-memory tier.
    pub tier_written_chunks: u64,
    pub tier_failed_writes: u64,
    pub tier_promoted_chunks: u64,
    /// Σ KV usage × step duration, for a time-weighted mean.
    pub kv_usage_ns: f64,
    pub kv_usage_peak: f64,
    pub compute_ns: u64,
    pub memory_ns: u64,
    pub communication_ns: u64,
    pub host_ns: u64,
    pub padding_ns: u64,
    pub evictions: u64,
}

/// What a run did, beyond the per-request records.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    pub router: &'static str,
    pub requests: u64,
    pub completed: u64,
    pub rejected: u64,
    pub aborted: u64,
    pub end: SimTime,
    pub events: u64,
    /// Times a scrape loop went dormant over an engine holding nothing
    /// ([`Sim::may_sleep`]): each skips that loop's events until it wakes.
    pub scrape_sleeps: u64,
    /// Engine cores whose prefix cache is indexed by chains
    /// ([`pdsim_engine::chains::ChainIndex`]): every plain decoder's in
    /// [`run`], none in the reference runs.
    pub chain_indexed_cores: u64,
    pub cores: Vec<CoreStats>,
    /// Per link used by KV transfers: (bytes carried, bytes per second).
    pub links: Vec<(f64, f64)>,
    /// Prefill holds that timed out before the decode side read them.
    pub kv_hold_expiries: u64,
    /// KV block references engines still held when the run ended: 0 unless
    /// a request was stuck (ended `engine-stalled`), so a test can tell
    /// that every block an ended request held was freed.
    pub blocks_held_at_end: u64,
    /// Conversations' later turns, sent closed-loop ([`SessionTurn`]).
    pub session_turns_sent: u64,
    /// Later turns not sent because a turn before them in their
    /// conversation failed or timed out (the session is cancelled).
    pub session_turns_not_sent: u64,
    /// Later turns the trace lists after an arrival that comes later than
    /// the time they were due, so they were read, and sent, late; and the
    /// most any was late, in nanoseconds.
    pub session_turns_late: u64,
    pub session_turn_max_late_ns: u64,
}

/// An event in the queue: the earliest time first, and of equal times
/// the one pushed first, except that a scrape comes after every other event
/// due at its instant (its `seq` has the top bit set, [`Sim::push`]): a
/// scrape at `t` reads what the engines hold once everything due at `t` has
/// happened, so when it runs does not depend on when it was queued, which
/// lets a dormant loop be queued again at its tick ([`Sim::scrape`]). Every
/// push takes a new `seq`, so no two entries
/// compare equal and the event itself never decides an order; comparing
/// only the two numbers keeps the heap's comparison to two integers (a
/// tuple with the event in it made the compiler call a comparison
/// function for each step of every push and pop).
struct Queued {
    time: SimTime,
    seq: u64,
    event: Event,
}

impl Ord for Queued {
    fn cmp(&self, other: &Queued) -> std::cmp::Ordering {
        // Reversed: `BinaryHeap` pops its greatest entry.
        (other.time, other.seq).cmp(&(self.time, self.seq))
    }
}

impl PartialOrd for Queued {
    fn partial_cmp(&self, other: &Queued) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Queued {
    fn eq(&self, other: &Queued) -> bool {
        (self.time, self.seq) == (other.time, other.seq)
    }
}

impl Eq for Queued {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Arrival,
    Admit {
        id: RequestId,
        core: u32,
    },
    StepDone {
        group: u32,
    },
    TransferStart {
        id: RequestId,
    },
    LoadStart {
        id: RequestId,
        core: u32,
    },
    NetworkTick {
        generation: u64,
    },
    HoldExpiry {
        id: RequestId,
    },
    Scrape {
        pod: u32,
    },
    /// Every core's state is handed to the sink for the time series.
    Sample,
    /// A tick of the flow controller's dispatch ticker at which a dispatch
    /// cycle could release a queued request.
    FlowTick,
    /// The flow controller's cleanup sweep, due when the oldest queued
    /// request's TTL runs out.
    FlowSweep,
    /// A request's client gives up (its deadline). The loop skips it
    /// without moving the clock when the request ended first.
    Deadline {
        id: RequestId,
    },
    /// The wait of the tokenizer batch in front of an engine core ends
    /// (`AsyncMicrobatchTokenizer._batch_encode_loop`); stale when the
    /// batch filled and closed first.
    TokenizerClose {
        core: u32,
        generation: u64,
    },
    /// A conversation's next turn is due: its client sends it.
    Turn {
        key: u64,
    },
    /// The API server in front of `core` has taken a request in
    /// (`host_api_request`); its prompt goes to the tokenizer.
    Intake {
        id: RequestId,
        core: u32,
        prompt_tokens: u32,
    },
    /// The EPP's burst-prefix-cache-producer seals its batch window: the
    /// requests it held are placed and scheduled.
    BurstSeal,
    /// A secondary offload tier's job on `core` ended (a write of the
    /// primary's chunks, or a promotion's read).
    TierIo {
        core: u32,
        job: u64,
    },
    /// A secondary offload tier's lookup worker answered a batch.
    TierLookup {
        core: u32,
        tier: u8,
        batch: u64,
    },
}

/// The reason on the record of a request whose client gave up.
pub const CLIENT_TIMEOUT: &str = "client-timeout";

/// The reason of a request that never finished because its engine spins
/// ([`Sim::check_spin`]).
pub const ENGINE_SPINNING: &str = "engine-spinning";

impl Event {
    /// Scrapes and samples observe; they never move a request, so they do
    /// not keep a stalled run alive. Nor does a flow-control dispatch tick:
    /// it only re-reads what a scrape or a request's progress changed, and
    /// a tick that dispatches makes the request live. (Were ticks live, a
    /// queue held forever — TTL disabled — would keep the scrape loop and
    /// its ticks going for ever.) The TTL sweep is live: it ends requests.
    ///
    /// (A tokenizer batch's close is live: it moves the batch's requests to
    /// their engine.)
    ///
    /// A client's deadline is not live either, though it ends a request:
    /// until it comes nothing changes, so a request stuck until its client
    /// gives up must not keep the observation loops ticking through the
    /// wait (a deadline may lie days ahead). The loops stop, the clock
    /// jumps to the deadline, and the abort restarts them if it frees
    /// something ([`Sim::client_timeout`]).
    fn is_live(&self) -> bool {
        !matches!(
            self,
            Event::Scrape { .. } | Event::Sample | Event::FlowTick | Event::Deadline { .. }
        )
    }
}

struct Core {
    engine: Engine,
    pool: usize,
    rng: Stream,
    /// Requests sent here still in the API server's intake and
    /// tokenization, not yet in the engine's queues.
    pending: u32,
    stats: CoreStats,
    /// Global index of this rank's first GPU.
    first_gpu: u64,
    /// Aborts that arrived while this core's step ran, applied when it
    /// ends; `true` for a deadline at the very instant the step ends, whose
    /// abort waits for the step's output.
    aborts: Vec<(RequestId, bool)>,
    /// The API server's tokenizer batcher in front of this core.
    tokenizer: Tokenizer,
    /// The API server's own work for requests, from the pool's cost model.
    api_costs: ApiServerCosts,
    /// When the API server's event loop has done all the work handed to
    /// it so far ([`Sim::api_work`]).
    api_free_at: SimTime,
    /// Per secondary offload tier, when its device has read and written
    /// everything handed to it so far.
    tier_free_at: Vec<(SimTime, SimTime)>,
    /// Found spinning ([`Sim::check_spin`]): not stepped until an input
    /// from outside its engine ([`Sim::input_to`]).
    frozen: bool,
}

impl Core {
    /// Runs `work`, handed over at `now`, on the API server's event loop in
    /// front of this core and returns when it is done: the loop is one
    /// thread, so the work starts when the loop has finished what it was
    /// given before, or now. (A stream's end follows its own last token on
    /// the loop, so a finish never precedes it.)
    #[inline]
    fn api_work(&mut self, now: SimTime, work: SimDuration) -> SimTime {
        self.api_free_at = now.max(self.api_free_at) + work;
        self.api_free_at
    }
}

/// The Python API server's tokenizer batcher, vLLM's
/// `AsyncMicrobatchTokenizer` (`vllm/utils/async_utils.py`): its encode loop
/// takes a prompt from its queue, keeps taking prompts until
/// `batch_wait_timeout_s` after the first or until `max_batch_size` are in
/// hand, tokenizes them in one call on its one executor thread, hands every
/// prompt of the batch its tokens, and only then takes the next prompt.
/// One per engine core: each engine's API server has its own.
#[derive(Default)]
struct Tokenizer {
    /// The open batch: each request and its prompt tokens.
    batch: Vec<(RequestId, u32)>,
    /// When the open batch's wait ends; `None` when no batch is open.
    closes: Option<SimTime>,
    /// Counts batches opened, so a close event of a batch that filled and
    /// closed early is told apart.
    generation: u64,
    /// When the loop finishes tokenizing its last batch and takes the next
    /// prompt.
    free_at: SimTime,
}

struct Group {
    first: usize,
    len: usize,
    busy: bool,
    /// The engine cores run vLLM's async scheduling: each keeps up to two
    /// steps in flight (`EngineCore.step_with_batch_queue`).
    asynchronous: bool,
    /// Under async scheduling, the steps scheduled whose output is not
    /// applied yet, oldest first: when each is done on the GPU, and whether
    /// it scheduled any token.
    in_flight: std::collections::VecDeque<(SimTime, bool)>,
    /// When the GPU finishes the last step queued on it.
    gpu_free: SimTime,
    /// When the running step ends.
    ends: SimTime,
}

/// A request's state while it is in flight. Every emission reads and
/// writes the five fields that come first, so they are kept together at the
/// front (`repr(C)`): with the compiler's own order they were spread over
/// the entry's 500 bytes, and the emission path missed the L1 cache about
/// five times a token (cachegrind, 1P3D). The record's own `last_token`
/// and `output_tokens` are filled from them when the record is written
/// ([`InFlight::settled`]).
#[repr(C)]
struct InFlight {
    /// Under P/D: the prefill and decode cores.
    prefill_core: Option<u32>,
    decode_core: u32,
    /// Tokens the client has received, and when the last of them arrived.
    output_tokens: u32,
    last_token: Option<SimTime>,
    /// The record's `source_line`, which each emission reports.
    source_line: u64,
    record: RequestRecord,
    /// The prompt until the last engine that needs it takes it.
    prompt: Option<Prompt>,
    priority: i32,
    max_output: u32,
    /// The prefill engine still holds the request's blocks.
    held: bool,
    /// When the prefill engine's lease on those blocks runs out unless a
    /// heartbeat renews it first.
    lease_expiry: SimTime,
    /// When the decode core received the request and began heartbeating
    /// for its lease (`on_new_request` from `add_request`).
    decode_received: Option<SimTime>,
    missing_tokens: u32,
    flows_left: u32,
    /// An offload-tier load: the core loading and its flows still running.
    load_core: u32,
    load_tokens: u32,
    load_flows_left: u32,
    /// The EPP's in-flight load this request added.
    ticket: pdsim_router::Ticket,
    /// The API server (endpoint, server, rank) that balanced the request's
    /// prefill and its decode (or whole) part to a data-parallel rank,
    /// until the rank has finished it ([`crate::dp_lb`]).
    lb: [Option<(u32, u16, u16)>; 2],
    /// The EPP endpoint of the decode (or whole) part.
    decode_endpoint: u32,
    /// Waiting in the EPP, not yet routed: in the flow-control queue, or
    /// held in the burst producer's batch window.
    queued: bool,
    /// The client's deadline while its event is queued.
    deadline: Option<SimTime>,
    /// The client gave up and the record is written; the request stays
    /// here only while an engine or a transfer still holds its blocks.
    client_gone: bool,
    /// The request's conversation, when it is a turn of one.
    session: Option<u64>,
    /// The content id of its generated tokens, when a later turn repeats
    /// them.
    output_id: Option<u64>,
    /// When the API server of the engine part now under way started
    /// rendering the prompt: the arrival time a release that stamps it
    /// there gives the engine ([`crate::PoolRuntime::arrival_at_render`]).
    rendered: SimTime,
}

impl InFlight {
    /// A request that just arrived, not yet routed.
    fn new(record: RequestRecord, spec: RequestSpec, queued: bool) -> InFlight {
        InFlight {
            prefill_core: None,
            decode_core: 0,
            output_tokens: record.output_tokens,
            last_token: record.last_token,
            source_line: record.source_line,
            record,
            prompt: Some(spec.prompt),
            priority: spec.priority,
            max_output: spec.output_tokens,
            held: false,
            lease_expiry: SimTime(0),
            decode_received: None,
            missing_tokens: 0,
            flows_left: 0,
            load_core: 0,
            load_tokens: 0,
            load_flows_left: 0,
            ticket: pdsim_router::Ticket::default(),
            lb: [None, None],
            decode_endpoint: 0,
            queued,
            deadline: spec.deadline,
            client_gone: false,
            session: spec.session.map(|s| s.key),
            output_id: spec.output_id,
            rendered: SimTime(0),
        }
    }

    /// The record, with what the emissions counted.
    fn settled(&mut self) -> &RequestRecord {
        self.record.output_tokens = self.output_tokens;
        self.record.last_token = self.last_token;
        &self.record
    }
}

/// Requests in flight, indexed by id. Ids are handed out in arrival order,
/// so the live ones form a window: the table keeps only the span from the
/// oldest live id to the newest, and drops ended requests from its front.
/// Memory follows the requests in flight, not the trace.
#[derive(Default)]
struct InFlightTable {
    base: u32,
    slots: std::collections::VecDeque<Option<InFlight>>,
    /// Slots holding a request.
    live: usize,
}

/// Under `check`, notes that `id` ended and reports a second end. A free
/// function over the two fields, so a caller holding a borrow of its
/// in-flight entry can still call it.
fn note_end(check: bool, ended: &mut Vec<u64>, failure: &mut Option<RunError>, id: RequestId) {
    if !check {
        return;
    }
    let (word, bit) = ((id.0 / 64) as usize, id.0 % 64);
    if ended.len() <= word {
        ended.resize(word + 1, 0);
    }
    if ended[word] & (1 << bit) != 0 {
        failure.get_or_insert(RunError::Invariant(format!("request {} ended twice", id.0)));
    }
    ended[word] |= 1 << bit;
}

impl InFlightTable {
    fn insert(&mut self, id: RequestId, flight: InFlight) {
        if self.slots.is_empty() {
            self.base = id.0;
        }
        debug_assert!(
            id.0 >= self.base + self.slots.len() as u32,
            "ids arrive in order"
        );
        // Every arriving request enters the table, even one the EPP then
        // refuses at once; a gap in the ids would still leave empty slots.
        while self.base + (self.slots.len() as u32) < id.0 {
            self.slots.push_back(None);
        }
        self.slots.push_back(Some(flight));
        self.live += 1;
    }

    /// The slot of `id`, if the table's span covers it.
    fn index(&self, id: &RequestId) -> Option<usize> {
        id.0.checked_sub(self.base).map(|i| i as usize)
    }

    fn get_mut(&mut self, id: &RequestId) -> Option<&mut InFlight> {
        let index = self.index(id)?;
        self.slots.get_mut(index)?.as_mut()
    }

    fn get(&self, id: &RequestId) -> Option<&InFlight> {
        self.slots.get(self.index(id)?)?.as_ref()
    }

    fn remove(&mut self, id: &RequestId) -> Option<InFlight> {
        let index = self.index(id)?;
        let flight = self.slots.get_mut(index)?.take();
        if flight.is_some() {
            self.live -= 1;
        }
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        flight
    }

    /// Exact: `remove` trims leading empty slots, so an empty table has no
    /// slots at all.
    fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn ids(&self) -> Vec<RequestId> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, f)| f.is_some())
            .map(|(i, _)| RequestId(self.base + i as u32))
            .collect()
    }
}

struct Sim<'a> {
    cluster: &'a Cluster,
    cores: Vec<Core>,
    groups: Vec<Group>,
    /// Group of each core.
    group_of: Vec<u32>,
    queue: BinaryHeap<Queued>,
    seq: u64,
    /// Queued events other than scrapes: when none is left, nothing can
    /// move a request any more and the scrape loop must not keep the run
    /// alive (the run then aborts what is stuck as `engine-stalled`).
    live_events: u64,
    now: SimTime,
    in_flight: InFlightTable,
    next_arrival: Option<RequestSpec>,
    next_id: u32,
    stats: RunStats,
    check: bool,
    /// Under `check`, one bit per request id that has ended (its record
    /// written): every path that ends a request takes it out of flight or
    /// marks its client gone first, so a second end means two paths both
    /// believed they owned it. Empty without `check`.
    ended: Vec<u64>,
    events_buf: Vec<EngineEvent>,
    /// The emissions of the events being handled, handed to the sink
    /// together when they are done.
    emissions_buf: Vec<Emission>,
    tier_io_buf: Vec<pdsim_engine::tiering::TierIo>,
    network: Network,
    /// Link indices per GPU: NIC egress, NIC ingress, intra-node egress,
    /// intra-node ingress, offload-tier read, host-link ingress.
    gpu_links: Vec<[u32; 6]>,
    done_buf: Vec<u32>,
    /// The simulated Endpoint Picker.
    epp: pdsim_router::Router,
    /// Each core's EPP endpoint, when engines publish KV events.
    kv_endpoint: Vec<u32>,
    /// (first core, ranks) of every pod, all pools in order: the EPP's
    /// endpoints.
    pods: Vec<(usize, usize)>,
    /// The API servers balancing each endpoint of several ranks.
    balancers: Vec<Option<crate::dp_lb::Balancer>>,
    /// What the EPP saw at each pod's last scrape.
    views: Vec<pdsim_router::EndpointView>,
    /// Each pod's scrape phase within the refresh interval.
    scrape_phase: Vec<u64>,
    scrape_interval: u64,
    /// Pods whose scrape loop is running, and which ones.
    scraping: usize,
    scrape_running: Vec<bool>,
    /// The EPP's flow controller, with the `flowControl` gate on.
    flow: Option<pdsim_router::FlowController>,
    /// Phases of its dispatch ticker and cleanup sweep.
    flow_tick_phase: u64,
    flow_sweep_phase: u64,
    /// The earliest dispatch tick and sweep already queued.
    flow_tick_at: Option<SimTime>,
    /// The last dispatch tick that ran a cycle.
    flow_ticked_at: Option<SimTime>,
    flow_sweep_at: Option<SimTime>,
    /// Scratch for expired requests.
    expired_buf: Vec<u32>,
    /// Whether the sample loop is running.
    sampling: bool,
    /// Whether the observation loops pause over idle stretches (always,
    /// but for the tests that compare against the dense series).
    pause_when_idle: bool,
    /// Whether the sample loop paused over an idle stretch, and the time of
    /// its last sample.
    sample_paused: bool,
    last_sample: Option<SimTime>,
    /// Pods whose scrape loop paused over an idle stretch.
    scrape_paused: Vec<bool>,
    /// Pods whose scrape loop runs without an event queued
    /// ([`Sim::may_sleep`]): the engine it reads holds nothing and its view
    /// says so. The loop is queued again at its next tick when the engine
    /// is admitted a request.
    dormant: Vec<bool>,
    /// Whether loops may go dormant: with every scrape run instead for the
    /// tests that compare, and under flow control, whose detector reads
    /// each scrape's time.
    lazy_scrapes: bool,
    /// The pod whose metrics each core's engine gives (rank 0 of each
    /// pod), `u32::MAX` for the other ranks.
    pod_read_from: Vec<u32>,
    /// Groups with a step running.
    busy_groups: usize,
    /// [`MAX_IN_FLIGHT`], lowered by tests.
    max_in_flight: usize,
    /// The steps a group starts, reused.
    steps_buf: Vec<StepSample>,
    /// An invariant that broke where the caller cannot return it (an
    /// engine woken from inside another handler); the event loop stops on
    /// it after the event.
    failure: Option<RunError>,
    /// The batches a group's cores scheduled, reused.
    batches_buf: Vec<(usize, pdsim_cost::Batch)>,
    /// Every conversation a turn has been read of, by key.
    conversations: BTreeMap<u64, Conversation>,
    /// The turns queued to be sent (`Event::Turn`), by time.
    turns_due: BTreeSet<(SimTime, u64)>,
}

/// A conversation's state between its turns ([`SessionTurn`]). One per
/// conversation for the whole run: whether a later turn is coming is known
/// only when the trace ends.
#[derive(Default)]
struct Conversation {
    /// Later turns read from the trace whose turn before them is still
    /// going, in order.
    parked: VecDeque<RequestSpec>,
    /// The next turn, queued to be sent.
    due: Option<RequestSpec>,
    /// When the client had the last turn's whole answer (inference-perf's
    /// client: when the last turn ended, answered or not), while no later
    /// turn has been read.
    answered: Option<SimTime>,
    /// A turn failed or timed out: no later turn is sent
    /// ([`TurnClient::Session`] only).
    cancelled: bool,
    /// The conversation's client is inference-perf's, which sends every
    /// turn after the session's context.
    inference_perf: bool,
    /// inference-perf's session context: what the next turn is sent
    /// after.
    context: Vec<Segment>,
    /// inference-perf: the turn in flight, as sent, and its answer; it
    /// becomes the context if the turn is answered.
    sent: Option<(Vec<Segment>, Segment)>,
}

/// Salt of the content id of an inference-perf turn's answer when its
/// source gave none ([`RequestSpec::output_id`]); that answer is then
/// shared with nothing, so the next turn computes it anew.
const TURN_ANSWER_SALT: u64 = 0x7475_726e_616e_7377;

/// Runs `source` through `cluster` to the end, handing every request's
/// record to `sink` as it ends.
///
/// The observation loops (the EPP's metric scrapes, the per-second core
/// samples) pause while the cluster is idle — no request anywhere, no step
/// or transfer running — until the next arrival, when they resume on their
/// own grids: every observation they skip would have read the same engine
/// state. So an idle stretch costs nothing, however long, and the time
/// series gets one row per core for its first second only (see
/// [`RecordSink::core_sample`]).
pub fn run(
    cluster: &Cluster,
    source: &mut dyn Iterator<Item = Result<RequestSpec, TraceError>>,
    seed: u64,
    check: bool,
    sink: &mut dyn RecordSink,
) -> Result<RunStats, RunError> {
    run_observed(cluster, source, seed, check, sink, Observation::Fast)
}

/// How [`run_observing`] runs: [`run`]'s fast paths, or a reference that
/// tests hold them to. Both references also index every engine's prefix
/// cache by vLLM's literal `hash → blocks` table
/// ([`pdsim_engine::Engine::index_by_table`]) instead of by chains.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// As [`run`]: loops pause over idle stretches, a scrape loop over an
    /// engine that holds nothing goes dormant ([`Sim::may_sleep`]), and
    /// plain decoders' prefix caches are indexed by chains.
    Fast,
    /// A scrape queued at every tick of every running scrape loop (no
    /// dormant loops); loops still pause over idle stretches. The
    /// reference the swarm holds [`run`] to, byte for byte.
    EveryScrape,
    /// The loops running through idle stretches, as they did before they
    /// learned to pause: a scrape and a sample at every tick, and, under
    /// flow control, a dispatch cycle at every instant of the EPP's ticker
    /// (the fast path runs one only when something can change and counts
    /// the soft-reflective policy's other ticks in closed form). A long
    /// idle stretch costs time and output in proportion to its length.
    EveryTick,
}

/// [`run`] with the observation loops run as `observation` says, for the
/// tests that check the fast paths change nothing.
#[doc(hidden)]
pub fn run_observing(
    cluster: &Cluster,
    source: &mut dyn Iterator<Item = Result<RequestSpec, TraceError>>,
    seed: u64,
    check: bool,
    sink: &mut dyn RecordSink,
    observation: Observation,
) -> Result<RunStats, RunError> {
    run_observed(cluster, source, seed, check, sink, observation)
}

fn run_observed(
    cluster: &Cluster,
    source: &mut dyn Iterator<Item = Result<RequestSpec, TraceError>>,
    seed: u64,
    check: bool,
    sink: &mut dyn RecordSink,
    observation: Observation,
) -> Result<RunStats, RunError> {
    let mut sim = Sim::new(cluster, seed, check);
    if observation != Observation::Fast {
        // The reference runs also index each prefix cache by vLLM's own
        // `hash → blocks` table, which the chain index must agree with.
        for core in &mut sim.cores {
            core.engine.index_by_table();
        }
    }
    let pause_when_idle = observation != Observation::EveryTick;
    sim.pause_when_idle = pause_when_idle;
    sim.lazy_scrapes = observation == Observation::Fast;
    sim.pull_arrival(source)?;
    if !pause_when_idle && sim.flow.is_some() {
        // The reference path's ticker runs from the first instant on.
        sim.flow_tick_from(0);
    }
    while let Some(event) = sim.next_event()? {
        sim.stats.events += 1;
        if event.is_live() {
            sim.live_events -= 1;
        }
        match event {
            Event::Arrival => {
                sim.arrive(sink);
                sim.pull_arrival(source)?;
            }
            Event::Admit { id, core } => sim.admit(id, core as usize, sink),
            Event::TokenizerClose { core, generation } => {
                if sim.cores[core as usize].tokenizer.generation == generation {
                    sim.close_tokenizer_batch(core as usize);
                }
            }
            Event::Intake {
                id,
                core,
                prompt_tokens,
            } => sim.tokenize(id, core as usize, prompt_tokens),
            Event::Turn { key } => sim.send_turn(key, sink),
            Event::StepDone { group } => sim.step_done(group as usize, sink)?,
            Event::TransferStart { id } => sim.transfer_start(id, sink),
            Event::LoadStart { id, core } => sim.load_start(id, core as usize),
            Event::NetworkTick { generation } => sim.network_tick(generation, sink),
            Event::HoldExpiry { id } => sim.hold_expiry(id, sink),
            Event::Scrape { pod } => sim.scrape(pod as usize),
            Event::Sample => sim.sample(sink),
            Event::FlowTick => sim.flow_tick(sink),
            Event::FlowSweep => sim.flow_sweep(sink),
            Event::Deadline { id } => sim.client_timeout(id, sink),
            Event::BurstSeal => sim.burst_seal(sink),
            Event::TierIo { core, job } => {
                sim.cores[core as usize].engine.tier_io_done(job);
                sim.wake(core as usize, sink);
            }
            Event::TierLookup { core, tier, batch } => {
                sim.cores[core as usize]
                    .engine
                    .tier_lookup_done(tier, batch);
                sim.wake(core as usize, sink);
            }
        }
        if !sim.network.finished_windows.is_empty() {
            sim.drain_windows(sink);
        }
        if let Some(failure) = sim.failure.take() {
            return Err(failure);
        }
    }
    // Anything still in flight could not make progress: abort it, counted.
    // A request still in the EPP's queue (its TTL disabled, the detector
    // saturated with nothing left to change that) is aborted as such.
    for id in sim.in_flight.ids() {
        let (queued, spinning) = sim.in_flight.get(&id).map_or((false, false), |f| {
            let spun = |core: u32| sim.cores[core as usize].frozen;
            (
                f.queued,
                spun(f.decode_core) || f.prefill_core.is_some_and(spun),
            )
        });
        let reason = if queued {
            "flow-control-stalled"
        } else if spinning {
            ENGINE_SPINNING
        } else {
            "engine-stalled"
        };
        sim.finish(id, Outcome::Aborted, reason, sink);
    }
    if let Some(failure) = sim.failure.take() {
        return Err(failure);
    }
    // A later turn still held waits for a turn that never ended (a source
    // that gave no first turn): it was never sent.
    sim.stats.session_turns_not_sent += sim
        .conversations
        .values()
        .map(|c| c.parked.len() as u64)
        .sum::<u64>();
    sim.network.flush(sim.now);
    sim.drain_windows(sink);
    sim.stats.end = sim.now;
    sim.stats.blocks_held_at_end = sim.cores.iter().map(|c| c.engine.pool().referenced()).sum();
    sim.stats.chain_indexed_cores = sim
        .cores
        .iter()
        .filter(|c| c.engine.pool().by_chains())
        .count() as u64;
    sim.stats.links = sim
        .network
        .carried()
        .into_iter()
        .filter(|(carried, _)| *carried > 0.0)
        .collect();
    sim.stats.cores = sim
        .cores
        .iter()
        .map(|c| {
            let mut s = c.stats.clone();
            s.preemptions = c.engine.preemptions;
            s.prefix_queries_tokens = c.engine.prefix_queries_tokens;
            s.prefix_hits_tokens = c.engine.prefix_hits_tokens;
            s.evictions = c.engine.pool().evictions;
            s.external_hits_tokens = c.engine.external_hits_tokens;
            (s.offload_stores, s.offload_evictions) = c.engine.offload_counts();
            (s.lmcache_stores, s.lmcache_evictions) = c.engine.lmcache_counts();
            for tier in c.engine.tiering().map_or(&[][..], |t| &t.tiers) {
                s.tier_written_chunks += tier.stats.written;
                s.tier_failed_writes += tier.stats.failed_writes;
                s.tier_promoted_chunks += tier.stats.promoted;
            }
            s
        })
        .collect();
    Ok(sim.stats)
}

impl<'a> Sim<'a> {
    fn new(cluster: &'a Cluster, seed: u64, check: bool) -> Sim<'a> {
        let mut cores = Vec::new();
        let mut groups = Vec::new();
        let mut group_of = Vec::new();
        let mut pod_cores = Vec::new();
        let mut total_gpus = 0u64;
        for (pool_index, pool) in cluster.pools.iter().enumerate() {
            let mut pods = Vec::new();
            for pod in 0..pool.pods {
                let first = cores.len();
                for rank in 0..pool.ranks {
                    let lane = cores.len() as u32;
                    let first_gpu = pool.first_gpu
                        + pod as u64 * pool.gpus_per_engine
                        + rank as u64 * pool.world;
                    total_gpus = total_gpus.max(first_gpu + pool.world);
                    cores.push(Core {
                        engine: Engine::new(pool.engine.clone()),
                        pool: pool_index,
                        rng: Stream::new(seed, Purpose::Acceptance, lane),
                        pending: 0,
                        stats: CoreStats {
                            pool: pool_index as u16,
                            pod,
                            rank,
                            ..CoreStats::default()
                        },
                        first_gpu,
                        aborts: Vec::new(),
                        tokenizer: Tokenizer::default(),
                        api_costs: pool.cost.api_server(),
                        api_free_at: SimTime::ZERO,
                        tier_free_at: vec![
                            (SimTime::ZERO, SimTime::ZERO);
                            cluster.offload.as_ref().map_or(0, |o| o.secondary.len())
                        ],
                        frozen: false,
                    });
                }
                let len = pool.ranks as usize;
                let group = |first: usize, len: usize| Group {
                    first,
                    len,
                    busy: false,
                    asynchronous: pool.engine.async_scheduling,
                    in_flight: std::collections::VecDeque::new(),
                    gpu_free: SimTime::ZERO,
                    ends: SimTime::ZERO,
                };
                if pool.lockstep {
                    group_of.extend(std::iter::repeat_n(groups.len() as u32, len));
                    groups.push(group(first, len));
                } else {
                    for core in first..first + len {
                        group_of.push(groups.len() as u32);
                        groups.push(group(core, 1));
                    }
                }
                pods.push((first, len));
            }
            pod_cores.push(pods);
        }
        let disaggregated = cluster.disaggregated;
        // The router's endpoints: each pod the EPP's pool selects, or each
        // group of its ranks the load-balancing mode exposes separately. A
        // pod outside the selector is no endpoint and never gets a request.
        let mut pods = Vec::new();
        let mut api_servers = Vec::new();
        let mut pod_labels = Vec::new();
        for (pool, list) in pod_cores.iter().enumerate() {
            let labels = cluster.pool_labels.get(pool).cloned().unwrap_or_default();
            if !cluster.epp.selects(&labels) {
                continue;
            }
            let per = cluster.pools[pool].ranks_per_endpoint.max(1) as usize;
            for (first, len) in list {
                let mut start = *first;
                // The API servers past the pod's last target port get no
                // endpoint, so no traffic.
                let end = cluster
                    .endpoints_per_pod
                    .map_or(first + len, |ports| (first + ports * per).min(first + len));
                while start < end {
                    let n = per.min(end - start);
                    pods.push((start, n));
                    api_servers.push(if cluster.pools[pool].rust_frontend {
                        1
                    } else {
                        n
                    });
                    pod_labels.push(labels.clone());
                    start += n;
                }
            }
        }
        let endpoints = pod_labels.len();
        let flow = cluster
            .epp
            .config
            .flow_control
            .as_ref()
            .map(|settings| pdsim_router::FlowController::new(settings, &pod_labels));
        // The router keeps the one copy of each endpoint's labels: on a
        // cluster of thousands of pods a copy per view would be most of
        // what an endpoint costs.
        let epp = pdsim_router::Router::new(&cluster.epp, pod_labels, seed);
        // Engines publish KV events only when a precise producer reads them.
        let mut kv_endpoint = Vec::new();
        if epp.wants_kv_events() {
            kv_endpoint = vec![0u32; cores.len()];
            for (e, (first, len)) in pods.iter().enumerate() {
                for core in *first..first + len {
                    kv_endpoint[core] = e as u32;
                    cores[core].engine.enable_kv_events();
                }
            }
        }
        let scrape_interval = cluster.epp.flags.refresh_interval_ns.max(1);
        let mut phases = Stream::new(seed, Purpose::ScrapePhases, 0);
        let scrape_phase: Vec<u64> = pods.iter().map(|_| phases.below(scrape_interval)).collect();
        let mut pod_read_from = vec![u32::MAX; cores.len()];
        for (pod, &(first, _)) in pods.iter().enumerate() {
            pod_read_from[first] = pod as u32;
        }
        // The flow controller's tickers start with the EPP, long before
        // the run: their phases are seeded (a stream of their own).
        let mut flow_phases = Stream::new(seed, Purpose::ScrapePhases, 1);
        let flow_tick_phase = flow_phases.below(pdsim_router::flowcontrol::DISPATCH_TICK_NS);
        let mut flow = flow;
        if let Some(flow) = flow.as_mut() {
            flow.set_dispatch_phase(flow_tick_phase);
        }
        let flow_sweep_phase = flow_phases.below(pdsim_router::flowcontrol::SWEEP_NS);
        // What the EPP last scraped from each endpoint. No plugin reads
        // labels from a view (the router holds them), so views carry
        // metrics only.
        let views = vec![pdsim_router::EndpointView::default(); endpoints];
        let mut network = Network::default();
        let mut gpu_links = Vec::new();
        if disaggregated || cluster.offload.is_some() {
            let (tier, host) = cluster.offload.as_ref().map_or((1.0, 1.0), |o| {
                (o.read_bytes_per_s, o.host_link_bytes_per_s)
            });
            for _ in 0..total_gpus {
                gpu_links.push([
                    network.add_link(cluster.nic_bytes_per_s),
                    network.add_link(cluster.nic_bytes_per_s),
                    network.add_link(cluster.intra_node_bytes_per_s),
                    network.add_link(cluster.intra_node_bytes_per_s),
                    network.add_link(tier),
                    network.add_link(host),
                ]);
            }
        }
        Sim {
            cluster,
            cores,
            groups,
            group_of,
            queue: BinaryHeap::new(),
            seq: 0,
            live_events: 0,
            now: SimTime::ZERO,
            in_flight: InFlightTable::default(),
            next_arrival: None,
            conversations: BTreeMap::new(),
            turns_due: BTreeSet::new(),
            next_id: 0,
            stats: RunStats {
                router: cluster.router,
                ..RunStats::default()
            },
            check,
            ended: Vec::new(),
            events_buf: Vec::new(),
            emissions_buf: Vec::new(),
            tier_io_buf: Vec::new(),
            network,
            gpu_links,
            done_buf: Vec::new(),
            epp,
            kv_endpoint,
            balancers: pods
                .iter()
                .zip(&api_servers)
                .map(|(&(_, ranks), &servers)| {
                    (ranks > 1).then(|| crate::dp_lb::Balancer::new(cluster.dp_lb, ranks, servers))
                })
                .collect(),
            pods,
            views,
            scrape_running: vec![false; scrape_phase.len()],
            scrape_paused: vec![false; scrape_phase.len()],
            dormant: vec![false; scrape_phase.len()],
            lazy_scrapes: true,
            pod_read_from,
            scrape_phase,
            scrape_interval,
            scraping: 0,
            flow,
            flow_tick_phase,
            flow_sweep_phase,
            flow_tick_at: None,
            flow_ticked_at: None,
            flow_sweep_at: None,
            expired_buf: Vec::new(),
            sampling: false,
            pause_when_idle: true,
            sample_paused: false,
            last_sample: None,
            busy_groups: 0,
            max_in_flight: MAX_IN_FLIGHT,
            steps_buf: Vec::new(),
            failure: None,
            batches_buf: Vec::new(),
        }
    }

    /// The next event to handle, with the clock moved to its time.
    /// Deadlines of requests that ended first are dropped here. Time never
    /// goes back: every event is pushed at or after `now`, so an earlier one
    /// means a handler computed a time in the past, which is reported
    /// (checked always: it is one comparison per event).
    fn next_event(&mut self) -> Result<Option<Event>, RunError> {
        while let Some(Queued { time, event, .. }) = self.queue.pop() {
            if let Event::Deadline { id } = event
                && !self.deadline_pending(id)
            {
                // The request ended first.
                continue;
            }
            if time < self.now {
                return Err(RunError::Invariant(format!(
                    "time went back from {:?} to {:?}",
                    self.now, time
                )));
            }
            // Only a run with requests still in flight is stopped: an
            // event left far ahead once every request has ended (a lease
            // that never expires, a scrape as far apart as nanoseconds
            // allow) changes nothing, and the loop ends on it as before.
            if time > RUN_HORIZON && !self.in_flight.is_empty() {
                return Err(RunError::Limit(format!(
                    "the simulated clock passed {} s (two years) with {} requests still in \
                     flight: the deployment serves far slower than the load, or its hardware \
                     or coefficients are implausibly slow",
                    RUN_HORIZON.as_ns() / 1_000_000_000,
                    self.in_flight.live
                )));
            }
            self.now = time;
            return Ok(Some(event));
        }
        Ok(None)
    }

    fn push(&mut self, time: SimTime, event: Event) {
        self.seq += 1;
        if event.is_live() {
            self.live_events += 1;
        }
        // Scrapes after everything else due at their instant ([`Queued`]).
        let late = matches!(event, Event::Scrape { .. }) as u64;
        self.queue.push(Queued {
            time,
            seq: self.seq | (late << 63),
            event,
        });
    }

    fn pull_arrival(
        &mut self,
        source: &mut dyn Iterator<Item = Result<RequestSpec, TraceError>>,
    ) -> Result<(), RunError> {
        // A later turn of a conversation is sent when the one before it is
        // answered, not at the time the trace logged it: it is held, and
        // the next row read, until a row that arrives at its own time.
        loop {
            let spec = match source.next() {
                None => return Ok(()),
                Some(Err(e)) => return Err(RunError::Trace(e)),
                Some(Ok(spec)) => spec,
            };
            // Every source refuses such an arrival with its own file and
            // line; this guards a source that does not (a replay that
            // rescales arrival times).
            if spec.arrival > pdsim_core::ARRIVAL_HORIZON {
                return Err(RunError::Trace(TraceError {
                    file: "the request stream".into(),
                    line: spec.source_line,
                    column: None,
                    message: format!(
                        "request {} arrives {:.3e} s after the start, beyond the one year \
                         of simulated time pdsim replays",
                        spec.source_line,
                        spec.arrival.as_ns() as f64 / 1e9
                    ),
                }));
            }
            if spec.session.is_some_and(|s| s.round > 0) {
                self.read_turn(spec);
                continue;
            }
            let at = spec.arrival.max(self.now);
            self.next_arrival = Some(spec);
            self.push(at, Event::Arrival);
            return Ok(());
        }
    }

    /// A conversation's later turn, read from the trace: dropped if the
    /// conversation was cancelled, queued to be sent if the turn before it
    /// is answered, else held until it is.
    fn read_turn(&mut self, spec: RequestSpec) {
        let Some(turn) = spec.session else {
            return;
        };
        let conversation = self.conversations.entry(turn.key).or_default();
        if conversation.cancelled {
            self.stats.session_turns_not_sent += 1;
            return;
        }
        match conversation.answered.take() {
            Some(at) => self.queue_turn(spec, at),
            None => conversation.parked.push_back(spec),
        }
    }

    /// Queues `spec`, a later turn, to be sent its think time after
    /// `answered`; a turn read only after that time is sent now, and
    /// counted as late.
    fn queue_turn(&mut self, mut spec: RequestSpec, answered: SimTime) {
        let Some(turn) = spec.session else {
            return;
        };
        let due = match turn.client {
            TurnClient::Session => answered
                .checked_add(turn.think_time)
                .unwrap_or(SimTime(u64::MAX)),
            // inference-perf's worker sleeps until the turn's scheduled
            // time, then waits on the session's lock until the turn before
            // it has ended (`LocalUserSession.get_context`).
            TurnClient::InferencePerf => answered.max(spec.arrival),
        };
        let at = if due < self.now {
            self.stats.session_turns_late += 1;
            let late = self.now.since(due).as_ns();
            self.stats.session_turn_max_late_ns = self.stats.session_turn_max_late_ns.max(late);
            self.now
        } else {
            due
        };
        spec.move_arrival(at);
        self.conversations.entry(turn.key).or_default().due = Some(spec);
        self.turns_due.insert((at, turn.key));
        self.push(at, Event::Turn { key: turn.key });
    }

    /// inference-perf's client sends a turn after its session's context
    /// (`UserSessionCompletionAPIData.to_payload`: `prompt = context + " " +
    /// prompt`, `inference_perf/apis/user_session.py` at v0.4.0) and keeps
    /// what it sent, which the answer extends into the next context.
    fn with_context(&mut self, spec: &mut RequestSpec, key: u64, round: u32) {
        let conversation = self.conversations.entry(key).or_default();
        conversation.inference_perf = true;
        let mut segments = conversation.context.clone();
        segments.extend(spec.prompt.segments.iter().copied());
        spec.prompt = Prompt::new(segments);
        let answer = Segment {
            // Mixed before the turn is added, so no (conversation, turn)
            // pair can give another's id.
            id: spec.output_id.unwrap_or_else(|| {
                content_id(mix64(key).wrapping_add(u64::from(round)), TURN_ANSWER_SALT)
            }),
            tokens: spec.output_tokens,
        };
        conversation.sent = Some((spec.prompt.segments.clone(), answer));
    }

    /// A conversation's queued turn is due: its client sends it.
    fn send_turn(&mut self, key: u64, sink: &mut dyn RecordSink) {
        let Some(spec) = self.conversations.get_mut(&key).and_then(|c| c.due.take()) else {
            return;
        };
        self.turns_due.remove(&(self.now, key));
        self.stats.session_turns_sent += 1;
        self.arrive_spec(spec, sink);
    }

    /// A turn of conversation `key` ended at `at`, with `outcome`:
    /// answered, its next turn is queued (or waits to be read); failed or
    /// timed out, the conversation is cancelled and its held turns are not
    /// sent (inference-sim's `SessionManager.OnComplete` cancels a session
    /// on a timeout or a drop). inference-perf's client goes on in every
    /// case (`inference_perf/client/modelserver/openai_client.py` at
    /// v0.4.0): an answer, and also a server's error response, reaches
    /// `process_response`, which makes the context the prompt sent and the
    /// answer's text (none for an error); a timeout raises, and
    /// `process_failure` leaves the context as it was.
    fn turn_ended(&mut self, key: u64, outcome: Outcome, at: SimTime) {
        let conversation = self.conversations.entry(key).or_default();
        if conversation.inference_perf {
            if let Some((mut prompt, answer)) = conversation.sent.take() {
                match outcome {
                    Outcome::Completed => {
                        prompt.push(answer);
                        conversation.context = prompt;
                    }
                    Outcome::Rejected => conversation.context = prompt,
                    Outcome::Aborted => {}
                }
            }
        } else if outcome != Outcome::Completed {
            conversation.cancelled = true;
            self.stats.session_turns_not_sent += conversation.parked.len() as u64;
            conversation.parked.clear();
            return;
        }
        match conversation.parked.pop_front() {
            Some(next) => self.queue_turn(next, at),
            None => conversation.answered = Some(at),
        }
    }

    /// The core of `endpoint` a request goes to: its one rank, or the rank
    /// its API servers pick ([`crate::dp_lb`]), with that pick's
    /// (endpoint, server, rank) to count the request out when it ends.
    fn pick_rank(&mut self, endpoint: usize) -> (usize, Option<(u32, u16, u16)>) {
        let (first, _) = self.pods[endpoint];
        let Some(balancer) = self.balancers[endpoint].as_mut() else {
            return (first, None);
        };
        let cores = &self.cores;
        let (rank, client) = balancer.pick(self.now, |rank| {
            // vLLM's API server picks the rank after tokenizing, so the
            // engine has the request by the coordinator's next publication;
            // pdsim picks before its frontend delay, so the requests in
            // that delay count as waiting on the rank they were sent to.
            let core = &cores[first + rank];
            let engine = &core.engine;
            crate::dp_lb::RankLoad {
                waiting: engine.num_waiting() as u64 + u64::from(core.pending),
                running: engine.num_running() as u64,
                kv_usage: engine.kv_usage(),
            }
        });
        (first + rank, Some((endpoint as u32, client, rank as u16)))
    }

    /// The rank a balanced pick sent a request to has finished it.
    fn lb_finished(&mut self, pick: Option<(u32, u16, u16)>) {
        if let Some((endpoint, client, rank)) = pick
            && let Some(Some(balancer)) = self.balancers.get_mut(endpoint as usize)
        {
            balancer.finished(client, rank as usize);
        }
    }

    /// Starts every stopped pod's scrape loop at its phase, and the sample
    /// loop on its grid.
    fn start_scraping(&mut self) {
        let interval = self.scrape_interval;
        for pod in 0..self.pods.len() {
            if self.scrape_running[pod] {
                continue;
            }
            let phase = self.scrape_phase[pod];
            let now = self.now.as_ns();
            let mut next = Self::tick_at(now, phase, interval).as_ns();
            if std::mem::take(&mut self.scrape_paused[pod]) {
                // The loop paused over an idle stretch, in which every
                // scrape would have read the same engine state: the view is
                // what the last of them, on the tick before `next`, read,
                // and the loop goes on from `next` (never again at or before
                // a tick it ran).
                let last = self.views[pod].updated_ns;
                if let Some(last) = last.filter(|last| next <= *last) {
                    next = last.saturating_add(interval);
                }
                let skipped = next.saturating_sub(interval);
                if last.is_some_and(|last| skipped > last) {
                    self.read_metrics(pod, skipped);
                }
            } else if self.flow.is_some() && self.views[pod].updated_ns.is_none() {
                // The EPP scrapes from its start, long before the first
                // request: under flow control, whose detector treats a pod
                // never scraped as saturated, the pod's view is what its
                // last scrape before now read (the engine has been idle
                // since).
                let last = next.saturating_sub(interval).min(now);
                self.read_metrics(pod, last);
            }
            self.scrape_running[pod] = true;
            self.push(SimTime(next), Event::Scrape { pod: pod as u32 });
        }
        self.scraping = self.pods.len();
        if !self.sampling {
            self.sampling = true;
            let mut next = SimTime(
                self.now
                    .as_ns()
                    .div_ceil(SAMPLE_NS)
                    .saturating_mul(SAMPLE_NS),
            );
            if std::mem::take(&mut self.sample_paused)
                && let Some(last) = self.last_sample
            {
                next = next.max(last + SimDuration(SAMPLE_NS));
            }
            self.push(next, Event::Sample);
        }
    }

    /// Nothing is happening and nothing can until the next arrival, so
    /// engine state cannot change: no step and no transfer running, and
    /// either no request anywhere (routed, queued, in an engine or in
    /// transfer) or none that anything queued could move — nothing live
    /// queued but the next arrival itself, and the EPP's flow-control queue
    /// empty (the only thing a scrape or dispatch tick could release). The
    /// second case is a stall that a later arrival may end; the first is
    /// the common idle gap between requests.
    fn idle(&self) -> bool {
        if self.busy_groups > 0 || !self.network.is_idle() {
            return false;
        }
        // The live events that only wait for time to pass: the next
        // arrival and the turns due.
        let waiting = self.next_arrival.is_some() as u64 + self.turns_due.len() as u64;
        self.in_flight.is_empty()
            || (waiting > 0
                && self.live_events == waiting
                && self.flow.as_ref().is_none_or(|f| f.is_empty()))
    }

    /// Whether an observation loop whose tick at `now` just ran, and whose
    /// next tick would be `period_ns` later, pauses: the cluster is idle and
    /// the next arrival comes after that next tick (so the pause skips at
    /// least one observation, and the arrival, which resumes the loop, is
    /// processed before any tick the loop would have run at its time).
    fn pauses(&self, period_ns: u64) -> bool {
        if !self.pause_when_idle || !self.idle() {
            return false;
        }
        let next_tick = self.now.as_ns().saturating_add(period_ns);
        let arrival = self.next_arrival.as_ref().map(|spec| spec.arrival);
        let turn = self.turns_due.first().map(|&(at, _)| at);
        arrival
            .into_iter()
            .chain(turn)
            .min()
            .is_some_and(|wake| wake.as_ns() > next_tick)
    }

    /// Whether anything is left to route or serve: the observation loops
    /// (scrapes, samples) run only while it is.
    fn busy(&self) -> bool {
        self.next_arrival.is_some()
            || !self.turns_due.is_empty()
            || (self.live_events > 0 && !self.in_flight.is_empty())
    }

    /// Hands every engine core's state to the sink, once per
    /// [`SAMPLE_NS`] while the run is busy.
    fn sample(&mut self, sink: &mut dyn RecordSink) {
        for core in &self.cores {
            sink.core_sample(&CoreSample {
                time: self.now,
                pool: core.stats.pool,
                pod: core.stats.pod,
                rank: core.stats.rank,
                waiting: core.engine.num_waiting() as u32,
                running: core.engine.num_running() as u32,
                kv_usage: core.engine.kv_usage(),
                prefix_queries_tokens: core.engine.prefix_queries_tokens,
                prefix_hits_tokens: core.engine.prefix_hits_tokens,
                busy_ns: core.stats.busy_ns,
            });
        }
        self.last_sample = Some(self.now);
        let next = self.now.checked_add(SimDuration(SAMPLE_NS));
        if self.pauses(SAMPLE_NS) {
            self.sampling = false;
            self.sample_paused = true;
        } else if let (true, Some(next)) = (self.busy(), next) {
            self.push(next, Event::Sample);
        } else {
            // Not busy, or simulated time ran out of nanoseconds.
            self.sampling = false;
        }
    }

    /// The EPP scrapes a pod's metrics (rank 0's series: with equal sample
    /// times the extractor keeps the first series it reads:
    /// `pkg/epp/framework/plugins/datalayer/extractor/metrics/extractor.go`).
    /// The loop stops when nothing is left to route or serve, or when
    /// nothing but scrapes is queued (a stall), so a run always ends.
    fn scrape(&mut self, pod: usize) {
        let now = self.now.as_ns();
        if self.read_metrics(pod, now) {
            self.flow_wake(true);
        }
        let next = self.now.checked_add(SimDuration(self.scrape_interval));
        if self.pauses(self.scrape_interval) {
            self.stop_scraping(pod);
            self.scrape_paused[pod] = true;
        } else if let (true, Some(next)) = (self.busy(), next) {
            if self.may_sleep(pod) {
                self.dormant[pod] = true;
                self.stats.scrape_sleeps += 1;
            } else {
                self.push(next, Event::Scrape { pod: pod as u32 });
            }
        } else {
            self.stop_scraping(pod);
        }
    }

    /// Whether a pod's scrape loop, which goes on past this tick, can run
    /// without queued events until the engine it reads is admitted a
    /// request ([`Sim::admit`], which wakes it, [`Sim::wake_scrape`]): that
    /// engine holds no request and no block, so every scrape until then
    /// reads 0 waiting, 0 running and 0 KV usage, which the view already
    /// holds. Whether such a loop would meanwhile pause over an idle
    /// stretch, stop or go on changes nothing the view shows, and when the
    /// engine is admitted a request the loop would be running: the route
    /// that sent the request there restarted every stopped loop
    /// ([`Sim::route`]), and the request, live in the API server's intake
    /// or a KV transfer until its admission, keeps the cluster from idling
    /// or running out of work before then. Without flow control only: its
    /// detector reads each scrape's time, which a dormant loop does not
    /// move.
    fn may_sleep(&self, pod: usize) -> bool {
        let sleeps = self.lazy_scrapes
            && self.flow.is_none()
            && self.cores[self.pods[pod].0].engine.is_empty();
        debug_assert!(
            !sleeps || {
                let v = &self.views[pod];
                (v.waiting, v.running, v.kv_usage) == (0, 0, 0.0)
            },
            "an empty engine reads as idle"
        );
        sleeps
    }

    /// Queues a dormant loop's next tick (at or after now: a scrape due now
    /// runs after everything else due now, [`Queued`]) and wakes it.
    fn wake_scrape(&mut self, pod: usize) {
        if !std::mem::take(&mut self.dormant[pod]) {
            return;
        }
        let next = Self::tick_at(
            self.now.as_ns(),
            self.scrape_phase[pod],
            self.scrape_interval,
        );
        self.push(next, Event::Scrape { pod: pod as u32 });
    }

    /// A pod's scrape loop stops. `scraping` counts the running loops so
    /// that an arrival learns in O(1) whether any must restart; the debug
    /// check keeps that count honest against the per-pod flags.
    fn stop_scraping(&mut self, pod: usize) {
        self.scraping -= 1;
        self.scrape_running[pod] = false;
        debug_assert_eq!(
            self.scraping,
            self.scrape_running
                .iter()
                .filter(|&&running| running)
                .count(),
            "the count of running scrape loops"
        );
    }

    /// Reads a pod's metrics into its view as of `at_ns`; whether the flow
    /// controller's saturation detector could now answer differently (a
    /// metric changed, or the view was stale to it).
    fn read_metrics(&mut self, pod: usize, at_ns: u64) -> bool {
        self.flow_account();
        let core = &self.cores[self.pods[pod].0];
        let view = &mut self.views[pod];
        let before = (view.waiting, view.running, view.kv_usage);
        let was_fresh = self
            .flow
            .as_ref()
            .is_some_and(|f| f.detector().fresh(view, at_ns));
        view.waiting = core.engine.num_waiting() as u32;
        view.running = core.engine.num_running() as u32;
        view.kv_usage = core.engine.kv_usage();
        view.block_size = Some(core.engine.config().block_size);
        view.num_blocks = Some(core.engine.config().num_blocks as u64);
        view.updated_ns = Some(at_ns);
        !was_fresh || before != (view.waiting, view.running, view.kv_usage)
    }

    /// The record of a request arriving now, served at `location`.
    fn arrival_record(
        &self,
        id: RequestId,
        spec: &RequestSpec,
        location: (u16, u32, u16),
    ) -> RequestRecord {
        let prompt_tokens = spec.prompt.tokens().min(u32::MAX as u64) as u32;
        RequestRecord::arrived(
            id,
            spec.source_line,
            spec.slo_class,
            self.now,
            prompt_tokens,
            location,
        )
    }

    /// A request the EPP refused before routing it anywhere: it ends now,
    /// counted, and nothing it never took (a ticket, a queue slot) is
    /// released.
    fn reject(&mut self, id: RequestId, reason: &'static str, sink: &mut dyn RecordSink) {
        let Some(mut flight) = self.in_flight.remove(&id) else {
            return;
        };
        self.stats.rejected += 1;
        flight.record.outcome = Outcome::Rejected;
        flight.record.reason = reason;
        flight.record.finished = self.now;
        note_end(self.check, &mut self.ended, &mut self.failure, id);
        sink.record(flight.settled());
        if let Some(key) = flight.session {
            self.turn_ended(key, Outcome::Rejected, self.now);
        }
    }

    fn location(&self, core: usize) -> (u16, u32, u16) {
        let s = &self.cores[core].stats;
        (s.pool, s.pod, s.rank)
    }

    /// The engine cores an EPP decision sends a request to: (first core,
    /// prefill core, decode core).
    /// The picks of the ranks that balanced them, prefill then decode.
    #[allow(clippy::type_complexity)]
    fn place(
        &mut self,
        d: &pdsim_router::Decision,
    ) -> (usize, Option<u32>, usize, [Option<(u32, u16, u16)>; 2]) {
        // A colocated pod passes both the prefill and the decode filter;
        // when both profiles pick the same pod, one request reaches it and
        // its API server picks one rank: there is nothing to move, and the
        // request is served there whole.
        let (prefill, prefill_pick) = match d.prefill.filter(|p| *p != d.decode) {
            Some(p) => {
                let (core, pick) = self.pick_rank(p);
                (Some(core), pick)
            }
            None => (None, None),
        };
        // Under P/D the decode pod's API server sees the request only once
        // the prefill is done (the routing sidecar sends it on then), and
        // picks its rank at that moment ([`Sim::prefill_done`]); until then
        // the request is held against the pod's first rank.
        let (decode, decode_pick) = match prefill {
            Some(_) => (self.pods[d.decode].0, None),
            None => self.pick_rank(d.decode),
        };
        (
            prefill.unwrap_or(decode),
            prefill.map(|p| p as u32),
            decode,
            [prefill_pick, decode_pick],
        )
    }

    fn arrive(&mut self, sink: &mut dyn RecordSink) {
        let Some(spec) = self.next_arrival.take() else {
            return;
        };
        self.arrive_spec(spec, sink);
    }

    /// `spec` reaches the router now.
    fn arrive_spec(&mut self, mut spec: RequestSpec, sink: &mut dyn RecordSink) {
        if let Some(turn) = spec.session
            && turn.client == TurnClient::InferencePerf
        {
            self.with_context(&mut spec, turn.key, turn.round);
        }
        if self.in_flight.slots.len() >= self.max_in_flight {
            self.failure.get_or_insert(RunError::Limit(format!(
                "{} requests were in flight at once at {:.3} s (arrived and not yet ended, \
                 {} of them live), more than the {} pdsim holds: the deployment is far \
                 behind its load, and every figure would measure the queue; lower the rate \
                 or give a shorter trace",
                self.in_flight.slots.len(),
                self.now.as_ms_f64() / 1e3,
                self.in_flight.live,
                self.max_in_flight
            )));
            return;
        }
        let id = RequestId(self.next_id);
        self.next_id += 1;
        self.stats.requests += 1;
        if self.scraping < self.pods.len() || !self.sampling {
            self.start_scraping();
        }
        if let Some(deadline) = spec.deadline {
            if deadline <= self.now {
                // The client gave up before sending: it ends here, as
                // inference-sim's simulator times out a request whose
                // deadline has passed at injection.
                let record = self.arrival_record(id, &spec, (0, 0, 0));
                self.in_flight
                    .insert(id, InFlight::new(record, spec, false));
                self.give_up(id, sink);
                self.retire(id);
                return;
            }
            // Queued before the request's own events, so at an equal time
            // the client gives up before its admission.
            self.push(deadline, Event::Deadline { id });
        }
        if self.flow.is_some() {
            self.arrive_flow_controlled(id, spec, sink);
            return;
        }
        let record = self.arrival_record(id, &spec, (0, 0, 0));
        self.in_flight
            .insert(id, InFlight::new(record, spec, false));
        self.route(id, sink);
    }

    /// With the `flowControl` gate on, admission is
    /// `FlowControlAdmissionController.Admit` (`requestcontrol/
    /// admission.go`, under llm-d-router's `pkg/epp/`): the request is
    /// enqueued in the flow controller —
    /// refused at once when a global or band limit is full
    /// (`QueueOutcomeRejectedCapacity`, a 429) — and the processor runs a
    /// dispatch cycle right after the enqueue (`pkg/epp/flowcontrol/
    /// controller/internal/processor.go`, `Run`).
    fn arrive_flow_controlled(
        &mut self,
        id: RequestId,
        spec: RequestSpec,
        sink: &mut dyn RecordSink,
    ) {
        let now = self.now.as_ns();
        let bytes = pdsim_router::FlowController::request_bytes(spec.prompt.tokens());
        let record = self.arrival_record(id, &spec, (0, 0, 0));
        let Some(flow) = self.flow.as_mut() else {
            return;
        };
        let queued = flow.enqueue(id.0, now, bytes).is_ok();
        self.in_flight
            .insert(id, InFlight::new(record, spec, queued));
        if !queued {
            self.reject(id, "flow-control-capacity", sink);
            return;
        }
        self.schedule_sweep();
        self.flow_cycle(pdsim_router::flowcontrol::CycleKind::Enqueue, sink);
    }

    /// The first tick of a ticker with `phase` and `period` at or after
    /// `t` ns.
    fn tick_at(t: u64, phase: u64, period: u64) -> SimTime {
        SimTime(if t <= phase {
            phase
        } else {
            phase.saturating_add((t - phase).div_ceil(period).saturating_mul(period))
        })
    }

    /// Makes sure a dispatch tick is queued at `at` or earlier. Every tick
    /// of the real ticker runs a cycle, so an extra queued tick on its
    /// grid is harmless (a second one at an instant already ticked is
    /// dropped by [`Sim::flow_tick`], as the soft-reflective policy counts
    /// cycles); a missing one would lose a dispatch.
    fn request_flow_tick(&mut self, at: SimTime) {
        if self.flow_tick_at.is_some_and(|t| t <= at) {
            return;
        }
        self.flow_tick_at = Some(at);
        self.push(at, Event::FlowTick);
    }

    /// An input of the saturation detector changed (`metrics`: a scrape;
    /// else the EPP's in-flight counters): with requests queued, the next
    /// dispatch tick re-runs the cycle.
    fn flow_wake(&mut self, metrics: bool) {
        let Some(flow) = &self.flow else { return };
        if flow.is_empty() || flow.detector().reads_metrics() != metrics {
            return;
        }
        self.flow_tick_from(self.now.as_ns());
    }

    /// Makes sure a dispatch tick is queued at the ticker's first instant
    /// at or after `t_ns`.
    fn flow_tick_from(&mut self, t_ns: u64) {
        let at = Self::tick_at(
            t_ns,
            self.flow_tick_phase,
            pdsim_router::flowcontrol::DISPATCH_TICK_NS,
        );
        self.request_flow_tick(at);
    }

    fn flow_tick(&mut self, sink: &mut dyn RecordSink) {
        if self.flow_tick_at == Some(self.now) {
            self.flow_tick_at = None;
        }
        // The ticker runs one cycle per instant; a second tick queued for
        // the same instant is the same one.
        if self.flow_ticked_at == Some(self.now) {
            return;
        }
        self.flow_ticked_at = Some(self.now);
        self.flow_cycle(pdsim_router::flowcontrol::CycleKind::Tick, sink);
        // The reference path ticks at every instant of the ticker's grid
        // while anything is left, as the EPP's ticker does: what the fast
        // path counts in closed form (`flow_account`) and wakes for
        // (`flow_wake`, the staleness ticks) must come out the same.
        if !self.pause_when_idle && self.flow_tick_at.is_none() && self.busy() {
            self.flow_tick_from(self.now.as_ns().saturating_add(1));
        }
    }

    /// Counts the dispatch cycles the flow controller's ticker ran since it
    /// last looked, before the detector's inputs change now
    /// ([`pdsim_router::FlowController::account`]).
    fn flow_account(&mut self) {
        if let Some(flow) = self.flow.as_mut() {
            flow.account(&self.views, &self.epp, self.now.as_ns());
        }
    }

    /// One dispatch cycle. After a dispatch the ticker's next tick may
    /// dispatch again; while the head of the line is held, only a change of
    /// the detector's inputs (a scrape, the in-flight counters, a view
    /// turning stale) can release it, and those queue the next tick, or
    /// the soft-reflective policy's alternation, which names the tick at
    /// which it opens.
    fn flow_cycle(
        &mut self,
        kind: pdsim_router::flowcontrol::CycleKind,
        sink: &mut dyn RecordSink,
    ) {
        let now = self.now.as_ns();
        let Some(flow) = self.flow.as_mut() else {
            return;
        };
        let (dispatched, opens) = flow.dispatch_cycle(&self.views, &self.epp, now, kind);
        let stale = match (flow.next_stale_ns(&self.views, now), opens) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let waiting = !flow.is_empty();
        if let Some(token) = dispatched {
            self.route(RequestId(token), sink);
            if waiting {
                self.flow_tick_from(now.saturating_add(1));
            }
        } else if let (true, Some(at)) = (waiting, stale) {
            self.flow_tick_from(at);
        }
    }

    /// The EPP's scheduling cycle for a request admitted now (at arrival,
    /// or when the flow controller releases it), then the trip to the
    /// first engine through the frontend's admission delay. The router's
    /// clock moves to now first, so KV events and speculative entries due
    /// by now count.
    fn route(&mut self, id: RequestId, sink: &mut dyn RecordSink) {
        let Some(flight) = self.in_flight.get_mut(&id) else {
            return;
        };
        flight.queued = false;
        let prompt = flight.prompt.take().unwrap_or_default();
        self.epp.advance(self.now.as_ns());
        self.flow_account();
        // With a burst producer every request waits in its batch window
        // (an empty pool answers 503 before the producers run,
        // `director.go`).
        let decision = if self.epp.burst_window_ns().is_some() && !self.views.is_empty() {
            let now = self.now.as_ns();
            match self.epp.burst_join(id.0, &prompt, &self.views, now) {
                BurstJoin::Full => self.epp.pick_skipping_producers(&prompt, &self.views),
                joined => {
                    if let BurstJoin::Opened { seal_at_ns } = joined {
                        self.push(SimTime(seal_at_ns), Event::BurstSeal);
                    }
                    if let Some(flight) = self.in_flight.get_mut(&id) {
                        flight.queued = true;
                        flight.prompt = Some(prompt);
                    }
                    return;
                }
            }
        } else {
            self.epp.pick(&prompt, &self.views)
        };
        self.dispatch(id, prompt, decision, sink);
    }

    /// The burst producer's window ends: each request it held, in the
    /// order it joined, is scheduled on the endpoints as it found them
    /// (unless its client left meanwhile; it still counted in the joint
    /// placement, as its entry stays in the Go batch).
    fn burst_seal(&mut self, sink: &mut dyn RecordSink) {
        self.epp.advance(self.now.as_ns());
        self.flow_account();
        for member in self.epp.burst_seal() {
            let id = RequestId(member.token);
            let Some(flight) = self.in_flight.get_mut(&id).filter(|f| !f.client_gone) else {
                continue;
            };
            flight.queued = false;
            let prompt = flight.prompt.take().unwrap_or_default();
            let decision = self.epp.pick_member(&prompt, &member);
            self.dispatch(id, prompt, decision, sink);
        }
    }

    /// Sends a request where the EPP's decision says, through the
    /// frontend's admission delay; rejects it when no endpoint survived.
    fn dispatch(
        &mut self,
        id: RequestId,
        prompt: Prompt,
        decision: Option<pdsim_router::Decision>,
        sink: &mut dyn RecordSink,
    ) {
        let Some(d) = decision else {
            // No endpoint survived the filters: the EPP answers 503.
            self.reject(id, "no-endpoints", sink);
            return;
        };
        let (first_core, prefill_core, decode_core, picks) = self.place(&d);
        // What the router believed the engine that computes the prompt
        // held: the prefill endpoint's, or the decode one's when the
        // request is served whole.
        let predicted = self
            .epp
            .predicted_cached_tokens(d.prefill.filter(|p| *p != d.decode).unwrap_or(d.decode));
        let (decode_at, prefill_at) = (
            self.location(decode_core),
            prefill_core.map(|p| self.location(p as usize)),
        );
        self.cores[first_core].pending += 1;
        let Some(flight) = self.in_flight.get_mut(&id) else {
            return;
        };
        flight.prompt = Some(prompt);
        flight.ticket = d.ticket;
        flight.lb = picks;
        flight.decode_endpoint = d.decode as u32;
        flight.prefill_core = prefill_core;
        flight.decode_core = decode_core as u32;
        (flight.record.pool, flight.record.pod, flight.record.rank) = decode_at;
        flight.record.prefill = prefill_at;
        flight.record.router_cached_tokens =
            predicted.map(|t| t.min(flight.record.prompt_tokens as u64) as u32);
        let prompt_tokens = flight.record.prompt_tokens;
        self.frontend(id, first_core, prompt_tokens);
        // The request moves again: scrape loops that stopped meanwhile
        // resume.
        if self.scraping < self.pods.len() {
            self.start_scraping();
        }
    }

    /// Queues the cleanup sweep that will find the oldest request's budget
    /// spent: the first sweep tick at or after its expiry.
    fn schedule_sweep(&mut self) {
        let Some(due) = self.flow.as_ref().and_then(|f| f.next_expiry_ns()) else {
            return;
        };
        let at = Self::tick_at(
            due,
            self.flow_sweep_phase,
            pdsim_router::flowcontrol::SWEEP_NS,
        );
        if self.flow_sweep_at.is_some_and(|t| t <= at) {
            return;
        }
        self.flow_sweep_at = Some(at);
        self.push(at, Event::FlowSweep);
    }

    /// The cleanup sweep (`processor.go`, `sweepFinalizedItems`): requests
    /// whose queue-wait budget ran out are evicted, and the EPP answers
    /// 429 (`QueueOutcomeEvictedTTL`, `translateFlowControlOutcome`).
    fn flow_sweep(&mut self, sink: &mut dyn RecordSink) {
        if self.flow_sweep_at == Some(self.now) {
            self.flow_sweep_at = None;
        }
        let mut expired = std::mem::take(&mut self.expired_buf);
        if let Some(flow) = self.flow.as_mut() {
            flow.expire(self.now.as_ns(), &mut expired);
        }
        for token in expired.drain(..) {
            self.finish(
                RequestId(token),
                Outcome::Rejected,
                "flow-control-ttl",
                sink,
            );
        }
        self.expired_buf = expired;
        self.schedule_sweep();
    }

    /// The API server in front of `core` takes the request in
    /// (`host_api_request`), then tokenizes its prompt ([`Sim::tokenize`]).
    /// The intake is a latency, not work that holds the event loop: much
    /// of it is waiting (the client's new connection, the hand-off over
    /// ZMQ, the engine core's input thread), and how much holds the loop
    /// is not measured, so holding the loop for all of it would invent a
    /// throughput limit from a figure measured at low load. Priced whole
    /// before the tokenizer; the part vLLM runs after it (the input
    /// processor and the hand-off) only moves within one request's path.
    fn frontend(&mut self, id: RequestId, core: usize, prompt_tokens: u32) {
        let delay = self.cores[core].api_costs.request;
        if delay.as_ns() == 0 {
            return self.tokenize(id, core, prompt_tokens);
        }
        self.push(
            self.now + delay,
            Event::Intake {
                id,
                core: core as u32,
                prompt_tokens,
            },
        );
    }

    /// The API server in front of `core` renders and tokenizes the
    /// request's prompt, then hands it to the engine core (an `Admit`).
    /// The Python frontend tokenizes through its batcher ([`Tokenizer`]):
    /// the request joins the open batch, or opens one whose wait starts
    /// when the batcher is free; a full batch closes at once. Without a
    /// batcher the prompt is tokenized on its own, right away.
    fn tokenize(&mut self, id: RequestId, core: usize, prompt_tokens: u32) {
        // The renderer stamps the request's arrival time as it starts
        // (`render_cmpl`, `render_chat` in `vllm/renderers/base.py`). A
        // disaggregated request's parts reach their servers one after the
        // other (the decode part once the prefill is done), so one field
        // holds the part under way.
        if let Some(f) = self.in_flight.get_mut(&id) {
            f.rendered = self.now;
        }
        let cost = &self.cluster.pools[self.cores[core].pool].cost;
        let Some(batching) = cost.tokenizer_batching() else {
            let delay = cost.admission_delay(prompt_tokens);
            self.push(
                self.now + delay,
                Event::Admit {
                    id,
                    core: core as u32,
                },
            );
            return;
        };
        let now = self.now;
        let t = &mut self.cores[core].tokenizer;
        if t.closes.is_none() {
            let closes = now.max(t.free_at) + batching.wait;
            t.closes = Some(closes);
            t.generation += 1;
            let generation = t.generation;
            self.push(
                closes,
                Event::TokenizerClose {
                    core: core as u32,
                    generation,
                },
            );
        }
        let t = &mut self.cores[core].tokenizer;
        t.batch.push((id, prompt_tokens));
        if t.batch.len() >= batching.max_prompts {
            self.close_tokenizer_batch(core);
        }
    }

    /// The open batch in front of `core` closes: the batcher tokenizes its
    /// prompts in one call (the per-token admission cost over the batch's
    /// tokens), from now or from when it is free if it still tokenizes the
    /// batch before, and every request of the batch reaches the engine
    /// core when that call returns.
    fn close_tokenizer_batch(&mut self, core: usize) {
        let cost = &self.cluster.pools[self.cores[core].pool].cost;
        let t = &mut self.cores[core].tokenizer;
        let mut batch = std::mem::take(&mut t.batch);
        let tokens: u64 = batch.iter().map(|&(_, n)| n as u64).sum();
        let done =
            self.now.max(t.free_at) + cost.admission_delay(tokens.min(u32::MAX as u64) as u32);
        t.free_at = done;
        t.closes = None;
        for (id, _) in batch.drain(..) {
            self.push(
                done,
                Event::Admit {
                    id,
                    core: core as u32,
                },
            );
        }
        self.cores[core].tokenizer.batch = batch;
    }

    fn admit(&mut self, id: RequestId, core: usize, sink: &mut dyn RecordSink) {
        self.cores[core].pending -= 1;
        let Some(flight) = self.in_flight.get_mut(&id) else {
            return;
        };
        if flight.client_gone {
            // The client gave up while the frontend had the request: it
            // never reaches this engine core.
            return;
        }
        // The request's part at this core: the prefill side of a
        // disaggregated request, its decode side, or an ordinary request.
        let is_prefill = flight.prefill_core == Some(core as u32)
            && !flight.held
            && flight.record.prefill_done.is_none();
        let (kv, prompt, max_output) = if is_prefill {
            (
                KvTransfer::Produce,
                flight.prompt.clone().unwrap_or_default(),
                1,
            )
        } else if flight.prefill_core.is_some() {
            flight.record.enqueued = Some(self.now);
            // From here the decode scheduler heartbeats for the prefill
            // side's lease (`on_new_request`, `nixl/base_scheduler.py`).
            flight.decode_received = Some(self.now);
            (
                KvTransfer::Consume,
                flight.prompt.take().unwrap_or_default(),
                flight.max_output,
            )
        } else {
            flight.record.enqueued = Some(self.now);
            (
                KvTransfer::Local,
                flight.prompt.take().unwrap_or_default(),
                flight.max_output,
            )
        };
        // The arrival time the priority policy orders by is the API
        // server's own clock reading, taken per engine part: when it started
        // rendering the prompt, or, in a release that stamps it in the
        // input processor, now, as the tokenized prompt is handed on
        // (`InputProcessor.process_inputs`, `vllm/v1/engine/input_processor.py`).
        // A disaggregated request's decode part thus arrives at its engine
        // when the sidecar sends it, after the prefill.
        let arrival = if self.cluster.pools[self.cores[core].pool].arrival_at_render {
            flight.rendered
        } else {
            self.now
        };
        let request = NewRequest {
            id,
            arrival,
            priority: flight.priority,
            prompt,
            max_output_tokens: max_output,
            kv,
            output_id: flight.output_id,
        };
        self.cores[core].engine.add_request(request);
        // The engine's metrics may now move: a dormant scrape loop reading
        // it is queued again.
        if let Some(&pod) = self.pod_read_from.get(core)
            && pod != u32::MAX
        {
            self.wake_scrape(pod as usize);
        }
        self.handle_events(core, sink);
        self.input_to(core, sink);
    }

    /// Marks a group stepping or not, keeping the count of busy groups.
    fn set_busy(&mut self, group: usize, busy: bool) {
        if self.groups[group].busy != busy {
            self.groups[group].busy = busy;
            if busy {
                self.busy_groups += 1;
            } else {
                self.busy_groups -= 1;
            }
        }
    }

    /// Starts a step on a core's group if the group is idle.
    fn wake(&mut self, core: usize, sink: &mut dyn RecordSink) {
        let group = self.group_of[core] as usize;
        if !self.groups[group].busy {
            if self.groups[group].asynchronous {
                if let Err(e) = self.core_loop(group, false, sink) {
                    self.failure.get_or_insert(e);
                }
            } else {
                self.start_step(group, sink);
            }
        }
    }

    /// [`Sim::wake`] after an input from outside the engine (an arrival, an
    /// abort, a request's KV from its prefill side, a prefill's blocks
    /// released): it may change what a spinning engine does (an arrival of
    /// higher priority, blocks freed), so a frozen core is stepped again,
    /// and frozen again at its next preemption if it still spins
    /// ([`Sim::check_spin`]). The engine's own offload-tier work ending does
    /// not thaw it: that work is part of the spin.
    fn input_to(&mut self, core: usize, sink: &mut dyn RecordSink) {
        self.cores[core].frozen = false;
        self.wake(core, sink);
    }

    /// Without async scheduling: schedules a step on every core of a group
    /// and runs it (`EngineCore.step`, `vllm/v1/engine/core.py`).
    fn start_step(&mut self, group: usize, sink: &mut dyn RecordSink) {
        // A step that schedules nothing but preempted a request is followed
        // at once by another ([`Sim::schedule_group`]): the preemption ends
        // vLLM's running loop, and the blocks it freed may let the requests
        // after it run in the next.
        let duration = loop {
            let (duration, preempted) = self.schedule_group(group, self.now, sink);
            if preempted {
                self.check_spin(group);
            }
            if duration.is_some() || !preempted || !self.group_has_requests(group) {
                break duration;
            }
        };
        self.set_busy(group, duration.is_some());
        if let Some(duration) = duration {
            self.groups[group].ends = self.now + duration;
            self.push(
                self.now + duration,
                Event::StepDone {
                    group: group as u32,
                },
            );
        }
    }

    /// Under async scheduling, the engine core's loop
    /// (`EngineCore.step_with_batch_queue` with a queue of two,
    /// `vllm/v1/engine/core.py`), played from `now` until it blocks: while
    /// the cores have requests, schedule a step and queue it on the GPU
    /// behind the one running; go on scheduling while the queue has room
    /// and the step ran something or more could be scheduled; otherwise wait
    /// for the oldest step and apply its output, then go round again. So a
    /// step is scheduled while the one before it runs, seeing the outputs of
    /// the steps before that, and a request that arrives while the GPU is
    /// busy first runs in the step after the next.
    ///
    /// vLLM spins when nothing can be scheduled (a request waiting for its
    /// KV, say); those empty steps change nothing, so here the cores go idle
    /// instead until an event (an arrival, a transfer) wakes them. An empty
    /// step that preempted a request did change something, and the loop
    /// goes round again at once.
    ///
    /// `resume` is set when the step the loop blocked on is done: its output
    /// is applied first, as the engine core returns from waiting on it.
    fn core_loop(
        &mut self,
        group: usize,
        resume: bool,
        sink: &mut dyn RecordSink,
    ) -> Result<(), RunError> {
        let has_requests = |sim: &Sim| sim.group_has_requests(group);
        if resume {
            self.groups[group].in_flight.pop_front();
            self.complete_group(group, sink)?;
        }
        loop {
            if has_requests(self) {
                let start = self.now.max(self.groups[group].gpu_free);
                let (duration, preempted) = self.schedule_group(group, start, sink);
                if preempted {
                    self.check_spin(group);
                }
                let g = &mut self.groups[group];
                let executed = duration.is_some();
                if let Some(duration) = duration {
                    g.gpu_free = start + duration;
                }
                g.in_flight.push_back((g.gpu_free.max(self.now), executed));
                if !executed && g.in_flight.iter().all(|(_, ran)| !ran) {
                    // Nothing in flight runs anything: the loop would only
                    // spin. Apply the empty steps and wait for an event.
                    while self.groups[group].in_flight.pop_front().is_some() {
                        self.complete_group(group, sink)?;
                    }
                    // Unless the empty step preempted a request: that ended
                    // vLLM's running loop (a request that preempts itself
                    // breaks out of it, and a preemption skips the waiting
                    // queue), and the blocks it freed may let the requests
                    // after it run, which vLLM's loop, spinning, schedules
                    // at once. Each such step leaves fewer running, so the
                    // retries end.
                    if preempted {
                        continue;
                    }
                    self.set_busy(group, false);
                    return Ok(());
                }
                if self.groups[group].in_flight.len() < 2 && (executed || has_requests(self)) {
                    continue;
                }
            } else if self.groups[group].in_flight.is_empty() {
                self.set_busy(group, false);
                return Ok(());
            }
            let (done, _) = *self.groups[group]
                .in_flight
                .front()
                .expect("a step in flight");
            if done > self.now {
                self.set_busy(group, true);
                self.groups[group].ends = done;
                self.push(
                    done,
                    Event::StepDone {
                        group: group as u32,
                    },
                );
                return Ok(());
            }
            self.groups[group].in_flight.pop_front();
            self.complete_group(group, sink)?;
        }
    }

    /// Whether a core of `group` that is not frozen has requests.
    fn group_has_requests(&self, group: usize) -> bool {
        let (first, len) = (self.groups[group].first, self.groups[group].len);
        self.cores[first..first + len]
            .iter()
            .any(|c| !c.frozen && c.engine.has_requests())
    }

    /// Freezes each core of `group` that spins: it has preempted
    /// [`SPIN_PREEMPTIONS`] times since it last delivered a token
    /// ([`Engine::preemptions_since_output`]: its requests take turns being
    /// admitted again and preempted), and no request it holds has a client
    /// deadline, the one thing in the run that could end the spin (an
    /// abort frees the request's blocks). vLLM's scheduler, whose decisions
    /// the engine follows, would spin so for ever: the core is no longer
    /// stepped, which would change nothing but the clock, its requests
    /// never finish, and at the run's end they are aborted as
    /// `engine-spinning`, the time it was first found spinning in its
    /// stats. With a deadline pending the spin is played on until the
    /// client gives up.
    fn check_spin(&mut self, group: usize) {
        let (first, len) = (self.groups[group].first, self.groups[group].len);
        for core in first..first + len {
            if self.cores[core].frozen
                || self.cores[core].engine.preemptions_since_output() < SPIN_PREEMPTIONS
            {
                continue;
            }
            if self.cores[core]
                .engine
                .request_ids()
                .any(|id| self.deadline_pending(id))
            {
                continue;
            }
            let c = &mut self.cores[core];
            c.frozen = true;
            c.stats.spun_at.get_or_insert(self.now);
        }
    }

    /// Schedules a step on every core of a group and prices it, the step
    /// starting on the GPU at `start`; the group's step takes as long as its
    /// slowest core. `None` when no core scheduled anything; and whether a
    /// core preempted a request while scheduling, which an empty step can
    /// do (`Scheduler.schedule`, `vllm/v1/core/sched/scheduler.py`: a
    /// request that cannot get blocks preempts the last running one, itself
    /// included, and the running loop ends when it preempted itself).
    fn schedule_group(
        &mut self,
        group: usize,
        start: SimTime,
        sink: &mut dyn RecordSink,
    ) -> (Option<SimDuration>, bool) {
        let (first, len) = (self.groups[group].first, self.groups[group].len);
        let mut longest = StepCost::default();
        let mut any = false;
        let mut preempted = false;
        let mut steps = std::mem::take(&mut self.steps_buf);
        let mut batches = std::mem::take(&mut self.batches_buf);
        for core in first..first + len {
            if self.cores[core].frozen {
                continue;
            }
            let engine = &mut self.cores[core].engine;
            let before = engine.preemptions;
            if let Some(batch) = engine.schedule() {
                batches.push((core, batch));
            }
            preempted |= engine.preemptions != before;
            self.handle_events(core, sink);
        }
        // Data-parallel ranks split a step into microbatches only if every
        // rank attempts it; an idle rank runs a dummy batch that does not
        // (`coordinate_batch_across_dp`, `vllm/v1/worker/dp_utils.py`).
        // A lone rank meets the test only when its own batch asks for no
        // DBO, so the loop changes nothing for it.
        if batches.len() < len || batches.iter().any(|(_, b)| !b.dbo) {
            for (_, b) in batches.iter_mut() {
                b.dbo = false;
            }
        }
        for (core, batch) in batches.drain(..) {
            let pool = self.cores[core].pool;
            let mut cost = self.cluster.pools[pool].cost.step(&batch);
            let (load, store) = self.cores[core].engine.connector_io();
            if load + store > 0
                && let Some(tier) = &self.cluster.offload
            {
                // LMCache's copies are synchronous (see
                // `pdsim_engine::lmcache`): the retrieval before the forward
                // pass and the store after it lengthen the step. Each GPU
                // copies its share over the tier's bandwidth and its host
                // link, whichever is slower; RDS moves it between the
                // device and NVMe directly, at the drive's bandwidth.
                let per_token = self.cluster.pools[pool].kv_bytes_per_token_gpu;
                let copy = |tokens: u32, device: f64| {
                    if tokens == 0 {
                        return SimDuration::ZERO;
                    }
                    let rate = if tier.direct {
                        device
                    } else {
                        device.min(tier.host_link_bytes_per_s)
                    }
                    .max(1.0);
                    tier.base_latency + SimDuration::from_secs_f64(tokens as f64 * per_token / rate)
                };
                let io = copy(load, tier.read_bytes_per_s) + copy(store, tier.write_bytes_per_s);
                cost.total += io;
                let world = self.cluster.pools[pool].world as f64;
                let stats = &mut self.cores[core].stats;
                stats.lmcache_io_ns += io.as_ns();
                stats.lmcache_loaded_bytes += load as f64 * per_token * world;
                stats.lmcache_stored_bytes += store as f64 * per_token * world;
            }
            let c = &mut self.cores[core];
            steps.push(StepSample {
                core: core as u32,
                pool: c.stats.pool,
                pod: c.stats.pod,
                rank: c.stats.rank,
                start,
                duration: SimDuration::ZERO,
                requests: batch.num_reqs,
                prefill_requests: batch.prefill_reqs,
                decode_requests: batch.decode_reqs,
                prefill_tokens: batch.prefill_tokens,
                decode_tokens: batch.decode_tokens,
                padded_tokens: batch.padded_tokens,
            });
            c.stats.tokens_scheduled += batch.tokens() as u64;
            c.stats.tokens_padded += batch.padded_tokens as u64;
            c.stats.compute_ns += cost.compute_ns;
            c.stats.memory_ns += cost.memory_ns;
            c.stats.communication_ns += cost.communication_ns;
            c.stats.host_ns += cost.host_ns;
            c.stats.padding_ns += cost.padding_ns;
            if cost.total > longest.total {
                longest = cost;
            }
            any = true;
        }
        self.batches_buf = batches;
        let mut scheduled = None;
        if any {
            let duration = SimDuration(longest.total.as_ns().max(1));
            scheduled = Some(duration);
            for core in first..first + len {
                let c = &mut self.cores[core];
                let usage = c.engine.kv_usage();
                c.stats.kv_usage_ns += usage * duration.as_ns() as f64;
                c.stats.kv_usage_peak = c.stats.kv_usage_peak.max(usage);
                c.stats.busy_ns += duration.as_ns();
                c.stats.steps += 1;
            }
            for step in steps.iter_mut() {
                step.duration = duration;
                sink.step(step);
            }
        }
        steps.clear();
        self.steps_buf = steps;
        (scheduled, preempted)
    }

    fn step_done(&mut self, group: usize, sink: &mut dyn RecordSink) -> Result<(), RunError> {
        if self.groups[group].asynchronous {
            return self.core_loop(group, true, sink);
        }
        self.complete_group(group, sink)?;
        self.set_busy(group, false);
        self.start_step(group, sink);
        Ok(())
    }

    /// Applies the oldest step's output on every core of a group
    /// (`Scheduler.update_from_output`).
    fn complete_group(&mut self, group: usize, sink: &mut dyn RecordSink) -> Result<(), RunError> {
        let (first, len) = (self.groups[group].first, self.groups[group].len);
        for core in first..first + len {
            // Aborts that arrived during the step, before its output is
            // taken (`_process_aborts_queue` before `update_from_output`).
            if !self.cores[core].aborts.is_empty() {
                self.apply_aborts(core, false, sink);
            }
            let c = &mut self.cores[core];
            c.engine.complete_step(&mut c.rng);
            if let Some(batch) = c.engine.kv_events_mut() {
                let endpoint = self.kv_endpoint[core] as usize;
                self.epp.send_kv_events(self.now.as_ns(), endpoint, batch);
            }
            self.handle_events(core, sink);
            // A deadline at the instant the step ended: its output came
            // first, so a request it finished is done, not aborted.
            if !self.cores[core].aborts.is_empty() {
                self.apply_aborts(core, true, sink);
            }
            if self.check {
                self.cores[core]
                    .engine
                    .check()
                    .map_err(|e| RunError::Invariant(format!("core {core}: {e}")))?;
            }
        }
        Ok(())
    }

    /// Times the jobs and lookups a core's secondary offload tiers were
    /// handed: a job's chunks move at the device's bandwidth after what it
    /// was given before, in each direction, and end the class's base
    /// latency later; a lookup batch (one `faccessat` a key in vLLM's
    /// worker thread) is answered after one base latency.
    fn tier_io(&mut self, core: usize) {
        let mut io = std::mem::take(&mut self.tier_io_buf);
        self.cores[core].engine.take_tier_io(&mut io);
        if io.is_empty() {
            self.tier_io_buf = io;
            return;
        }
        let Some(offload) = self.cluster.offload.as_ref() else {
            io.clear();
            self.tier_io_buf = io;
            return;
        };
        let pool = &self.cluster.pools[self.cores[core].pool];
        // A chunk is one GPU block of every GPU of the engine.
        let chunk_bytes =
            pool.engine.block_size as f64 * pool.kv_bytes_per_token_gpu * pool.world as f64;
        for item in io.drain(..) {
            use pdsim_engine::tiering::TierIo;
            let (event, at) = match item {
                TierIo::Write { tier, job, chunks } | TierIo::Read { tier, job, chunks } => {
                    let device = offload.secondary[tier as usize];
                    let write = matches!(item, TierIo::Write { .. });
                    let bytes = chunks as f64 * chunk_bytes;
                    let stats = &mut self.cores[core].stats;
                    let (rate, free) = if write {
                        stats.tier_written_bytes += bytes;
                        (
                            device.write_bytes_per_s,
                            &mut self.cores[core].tier_free_at[tier as usize].1,
                        )
                    } else {
                        stats.tier_read_bytes += bytes;
                        (
                            device.read_bytes_per_s,
                            &mut self.cores[core].tier_free_at[tier as usize].0,
                        )
                    };
                    *free = self.now.max(*free) + SimDuration::from_secs_f64(bytes / rate.max(1.0));
                    let at = *free + device.base_latency;
                    (
                        Event::TierIo {
                            core: core as u32,
                            job,
                        },
                        at,
                    )
                }
                TierIo::Lookup { tier, batch, .. } => {
                    let device = offload.secondary[tier as usize];
                    (
                        Event::TierLookup {
                            core: core as u32,
                            tier,
                            batch,
                        },
                        self.now + device.base_latency,
                    )
                }
            };
            self.push(at, event);
        }
        self.tier_io_buf = io;
    }

    fn handle_events(&mut self, core: usize, sink: &mut dyn RecordSink) {
        self.tier_io(core);
        let mut events = std::mem::take(&mut self.events_buf);
        self.cores[core].engine.take_events(&mut events);
        for event in events.drain(..) {
            if let EngineEvent::Emitted { id, tokens } = event {
                self.emitted(core, id, tokens);
                continue;
            }
            // Events of a disaggregated request's prefill side, on its
            // prefill core, mean the prefill phase, whatever the pool.
            let id = match event {
                EngineEvent::Admitted { id, .. }
                | EngineEvent::Emitted { id, .. }
                | EngineEvent::Finished { id, .. }
                | EngineEvent::Preempted { id }
                | EngineEvent::Rejected { id }
                | EngineEvent::Held { id, .. }
                | EngineEvent::NeedsKv { id, .. }
                | EngineEvent::LoadsKv { id, .. }
                | EngineEvent::LmCacheHit { id, .. } => id,
            };
            // `place` never records a prefill core that is also the decode
            // core (the request is then served there whole).
            let prefill_side = self
                .in_flight
                .get_mut(&id)
                .is_some_and(|f| f.prefill_core == Some(core as u32));
            let role = if prefill_side {
                Role::Prefill
            } else {
                Role::Decode
            };
            match (event, role) {
                (EngineEvent::Admitted { id, cached_tokens }, Role::Prefill) => {
                    if let Some(f) = self.in_flight.get_mut(&id) {
                        f.record.prefill_scheduled = Some(self.now);
                        f.record.prefill_cached_tokens = cached_tokens;
                    }
                }
                (EngineEvent::Admitted { id, cached_tokens }, _) => {
                    if let Some(f) = self.in_flight.get_mut(&id) {
                        f.record.scheduled = Some(self.now);
                        f.record.cached_tokens = cached_tokens;
                    }
                }
                // Taken before the role look-up (above); `emitted` checks
                // the role itself.
                (EngineEvent::Emitted { id, tokens }, _) => self.emitted(core, id, tokens),
                (EngineEvent::Preempted { id }, _) => {
                    if let Some(f) = self.in_flight.get_mut(&id) {
                        f.record.preemptions += 1;
                    }
                }
                (EngineEvent::Held { id, .. }, _) => self.prefill_done(id),
                (EngineEvent::LmCacheHit { id, tokens }, _) => {
                    if let Some(f) = self.in_flight.get_mut(&id) {
                        f.record.lmcache_tokens = tokens;
                    }
                }
                (EngineEvent::LoadsKv { id, tokens, .. }, _) => {
                    if let Some(f) = self.in_flight.get_mut(&id) {
                        f.record.offload_tokens += tokens;
                        f.load_core = core as u32;
                        f.load_tokens = tokens;
                    }
                    let at = self.now
                        + self
                            .cluster
                            .offload
                            .as_ref()
                            .map_or(SimDuration::ZERO, |o| o.base_latency);
                    self.push(
                        at,
                        Event::LoadStart {
                            id,
                            core: core as u32,
                        },
                    );
                }
                (
                    EngineEvent::NeedsKv {
                        id,
                        cached_tokens,
                        missing_tokens,
                    },
                    _,
                ) => self.needs_kv(id, cached_tokens, missing_tokens),
                // A prefill engine ends its part when it frees the blocks.
                (EngineEvent::Finished { .. }, Role::Prefill) => {}
                (EngineEvent::Finished { id, .. }, _) => {
                    self.finish(id, Outcome::Completed, "", sink)
                }
                (EngineEvent::Rejected { id }, _) => {
                    self.release_prefill(id, sink);
                    self.finish(id, Outcome::Rejected, "prompt-exceeds-max-model-len", sink)
                }
            }
        }
        self.events_buf = events;
        // The step's emissions, once, in the order the events gave them
        // ([`RecordSink::emissions`]).
        if !self.emissions_buf.is_empty() {
            sink.emissions(&self.emissions_buf);
            self.emissions_buf.clear();
        }
    }

    /// A request's engine on `core` emitted `tokens` tokens. Handled apart
    /// from the other events, with one look-up of the request, as it is
    /// the event of every decode step.
    fn emitted(&mut self, core: usize, id: RequestId, tokens: u32) {
        // A first chunk moves the EPP's in-flight counters, so the flow
        // controller counts its ticker's cycles up to now first; later
        // chunks change nothing it reads, and are the hot path.
        if self.flow.is_some()
            && self
                .in_flight
                .get_mut(&id)
                .is_some_and(|f| f.last_token.is_none())
        {
            self.flow_account();
        }
        let Some(f) = self.in_flight.get_mut(&id) else {
            return;
        };
        // The prefill engine's one token is discarded by the sidecar; the
        // client's tokens come from the decode engine (`handleNIXLV2`,
        // `connector_nixlv2.go`, streams the decode response only).
        if f.prefill_core == Some(core as u32) && f.decode_core != core as u32 {
            return;
        }
        // The client sees the tokens once the API server has processed
        // them: its output handler (`AsyncLLM.output_handler`,
        // `vllm/v1/engine/async_llm.py`) takes the step's outputs in the
        // order the step lists them, which is the order the engine reports
        // them in here: `update_from_output` walks `num_scheduled_tokens`,
        // which `schedule` fills running requests first, new ones last
        // (`vllm/v1/core/sched/scheduler.py`). Each waits for the ones
        // before it. A new request's first token therefore waits for
        // the whole batch's outputs. (The EPP still learns of the first
        // chunk now, when the engine returns it: its counters move at the
        // step, not at the client.)
        let c = &mut self.cores[core];
        let per_token_ns = c.api_costs.output_token.as_ns();
        let at = if per_token_ns == 0 || tokens == 0 {
            self.now
        } else {
            let work = SimDuration::from_ns(per_token_ns.saturating_mul(tokens as u64));
            c.api_work(self.now, work)
        };
        let first = match f.last_token {
            None => {
                f.record.first_token = Some(at);
                self.epp.first_chunk(&mut f.ticket);
                true
            }
            Some(last) => {
                self.emissions_buf.push(Emission {
                    source_line: f.source_line,
                    gap_ns: at.since(last).as_ns(),
                    tokens,
                });
                false
            }
        };
        f.last_token = Some(at);
        f.output_tokens += tokens;
        if first {
            // The EPP's in-flight counters dropped.
            self.flow_wake(false);
        }
    }

    /// The prefill engine finished the prompt and holds the blocks; the
    /// sidecar sends the request to the decode engine (`handleNIXLV2`,
    /// `connector_nixlv2.go`). The hold lasts until the read or the end of
    /// the release's lease, which starts here (the deadline set in
    /// `request_finished`, `nixl/pull_scheduler.py`).
    fn prefill_done(&mut self, id: RequestId) {
        let Some(f) = self.in_flight.get_mut(&id) else {
            return;
        };
        f.record.prefill_done = Some(self.now);
        f.held = true;
        // The prefill engine reports the request finished (its one token
        // is out), so its API server counts it out of its in-flight ones.
        let prefill_pick = f.lb[0].take();
        let expiry = self.now + self.cluster.kv_lease.duration;
        f.lease_expiry = expiry;
        let endpoint = f.decode_endpoint as usize;
        self.lb_finished(prefill_pick);
        let (decode, decode_pick) = self.pick_rank(endpoint);
        let location = self.location(decode);
        let Some(f) = self.in_flight.get_mut(&id) else {
            return;
        };
        f.decode_core = decode as u32;
        f.lb[1] = decode_pick;
        (f.record.pool, f.record.pod, f.record.rank) = location;
        let prompt_tokens = f.record.prompt_tokens;
        self.cores[decode].pending += 1;
        self.frontend(id, decode, prompt_tokens);
        self.push(expiry, Event::HoldExpiry { id });
    }

    /// The decode engine admitted the request and waits for its KV.
    fn needs_kv(&mut self, id: RequestId, cached_tokens: u32, missing_tokens: u32) {
        let Some(f) = self.in_flight.get_mut(&id) else {
            return;
        };
        f.record.scheduled = Some(self.now);
        f.record.cached_tokens = cached_tokens;
        f.missing_tokens = missing_tokens;
        // The read starts after the base latency; when the hold has already
        // expired there is nothing to read and `transfer_start` hands the
        // request back to its engine to recompute, and wakes the engine,
        // at once. (Failing it here, inside the engine's own step, left an
        // engine with nothing else to do asleep.)
        let at = if f.held {
            self.now + self.cluster.transfer.base_latency
        } else {
            self.now
        };
        self.push(at, Event::TransferStart { id });
    }

    fn transfer_start(&mut self, id: RequestId, sink: &mut dyn RecordSink) {
        let Some(f) = self.in_flight.get_mut(&id) else {
            return;
        };
        let decode = f.decode_core as usize;
        let Some(prefill) = f.prefill_core.map(|p| p as usize) else {
            return;
        };
        if !f.held {
            self.cores[decode].engine.kv_failed(id);
            self.input_to(decode, sink);
            self.retire(id);
            return;
        }
        let decode_pool = &self.cluster.pools[self.cores[decode].pool];
        let prefill_pool = &self.cluster.pools[self.cores[prefill].pool];
        // Each decode GPU reads its share of every block it lacks, whole:
        // NixlConnector's decode side pulls the remote blocks matching its
        // unhashed local ones (`update_state_after_alloc` in
        // `vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py`
        // hands `blocks.get_unhashed_block_ids_all_groups()` to the worker's
        // `_read_blocks`), so a partly filled last block moves in full.
        let block_size = u64::from(decode_pool.engine.block_size.max(1));
        let cached = u64::from(f.record.cached_tokens);
        let blocks =
            (cached + u64::from(f.missing_tokens)).div_ceil(block_size) - cached / block_size;
        let per_gpu = (blocks * block_size) as f64 * decode_pool.kv_bytes_per_token_gpu;
        let (d_first, d_count) = (self.cores[decode].first_gpu, decode_pool.world);
        let (p_first, p_count) = (self.cores[prefill].first_gpu, prefill_pool.world);
        let total = per_gpu * d_count as f64;
        let flows = d_count.max(p_count);
        f.record.transfer_start = Some(self.now);
        f.record.transfer_bytes = total.round() as u64;
        f.flows_left = flows as u32;
        let gpn = self.cluster.gpus_per_node;
        // One flow per GPU pair: with equal tensor-parallel sizes each
        // decode rank reads its own prefill rank; with unequal ones this
        // spreads the bytes over both sides' GPUs, an approximation of the
        // `tp_ratio` mapping of remote ranks in `nixl_connector.py`.
        for j in 0..flows {
            let src = p_first + j % p_count;
            let dst = d_first + j % d_count;
            let same_node = src / gpn == dst / gpn;
            let (s, d) = (self.gpu_links[src as usize], self.gpu_links[dst as usize]);
            let links = if same_node {
                [s[2], d[3]]
            } else {
                [s[0], d[1]]
            };
            self.network
                .start(self.now, links, total / flows as f64, id.0 << 1);
        }
        self.schedule_tick();
    }

    /// Loads a request's offloaded blocks into its core's GPUs: each GPU
    /// reads its share over the tier's read bandwidth and its host link,
    /// shared with every other load on that GPU.
    fn load_start(&mut self, id: RequestId, core: usize) {
        let Some(f) = self.in_flight.get_mut(&id) else {
            return;
        };
        let pool = &self.cluster.pools[self.cores[core].pool];
        let per_gpu = f.load_tokens as f64 * pool.kv_bytes_per_token_gpu;
        f.record.offload_load_start = Some(self.now);
        f.load_flows_left = pool.world as u32;
        let first = self.cores[core].first_gpu;
        for g in first..first + pool.world {
            let links = self.gpu_links[g as usize];
            self.network
                .start(self.now, [links[4], links[5]], per_gpu, (id.0 << 1) | 1);
        }
        self.schedule_tick();
    }

    /// Hands finished link windows to the sink.
    fn drain_windows(&mut self, sink: &mut dyn RecordSink) {
        const KINDS: [&str; 6] = [
            "nic-out",
            "nic-in",
            "intra-out",
            "intra-in",
            "offload-read",
            "host-in",
        ];
        for (window, link, bytes) in std::mem::take(&mut self.network.finished_windows) {
            let seconds = crate::fabric::WINDOW_NS as f64 * 1e-9;
            sink.link_window(LinkWindow {
                window_start: SimTime(window * crate::fabric::WINDOW_NS),
                gpu: link / 6,
                kind: KINDS[(link % 6) as usize],
                bytes,
                utilization: bytes / (self.network.capacity(link) * seconds),
            });
        }
    }

    fn schedule_tick(&mut self) {
        if let Some(at) = self.network.next_completion() {
            let generation = self.network.generation;
            self.push(at.max(self.now), Event::NetworkTick { generation });
        }
    }

    fn network_tick(&mut self, generation: u64, sink: &mut dyn RecordSink) {
        if generation != self.network.generation {
            return;
        }
        let mut done = std::mem::take(&mut self.done_buf);
        self.network.finish_due(self.now, &mut done);
        for transfer in done.drain(..) {
            let id = RequestId(transfer >> 1);
            let Some(f) = self.in_flight.get_mut(&id) else {
                continue;
            };
            if transfer & 1 == 1 {
                // An offload-tier load.
                f.load_flows_left -= 1;
                if f.load_flows_left == 0 {
                    f.record.offload_load_end = Some(self.now);
                    let core = f.load_core as usize;
                    self.cores[core].engine.kv_loaded(id);
                    self.wake(core, sink);
                    self.retire(id);
                }
                continue;
            }
            f.flows_left -= 1;
            if f.flows_left == 0 {
                f.record.transfer_end = Some(self.now);
                let decode = f.decode_core as usize;
                self.cores[decode].engine.kv_arrived(id);
                self.input_to(decode, sink);
                self.release_prefill(id, sink);
                self.retire(id);
            }
        }
        self.done_buf = done;
        self.schedule_tick();
    }

    /// The decode side read the blocks (or gave up): the prefill engine
    /// frees them, exactly once.
    fn release_prefill(&mut self, id: RequestId, sink: &mut dyn RecordSink) {
        let Some(f) = self.in_flight.get_mut(&id) else {
            return;
        };
        let Some(prefill) = f.prefill_core.map(|p| p as usize) else {
            return;
        };
        if !f.held {
            return;
        }
        f.held = false;
        if self.cores[prefill].engine.release(id) {
            self.handle_events(prefill, sink);
            self.input_to(prefill, sink);
        }
        self.retire(id);
    }

    /// The prefill engine's hold timed out: if the read has not started, the
    /// blocks are freed (`_reqs_need_send` expiry, `nixl_connector.py`) and
    /// the decode side's load fails and recomputes the prompt (the
    /// `kv_load_failure_policy` recompute path, `vllm/v1/core/sched/
    /// scheduler.py` `_handle_invalid_blocks`).
    fn hold_expiry(&mut self, id: RequestId, sink: &mut dyn RecordSink) {
        let Some(f) = self.in_flight.get_mut(&id) else {
            return;
        };
        if !f.held || f.record.transfer_start.is_some() {
            return;
        }
        // While the decode core holds the request its scheduler sends a
        // heartbeat every `heartbeat_interval` (throttled in
        // `build_connector_meta`, `nixl/base_scheduler.py`), the first with
        // its first step after receiving it; each one moves the expiry to
        // `extension` past its arrival, never earlier (`_handle_heartbeat`,
        // `nixl/base_worker.py`). The beat is taken as steady from the
        // moment of receipt; the transport's delay is not modelled.
        let lease = self.cluster.kv_lease;
        if let (true, Some(received)) = (lease.heartbeats, f.decode_received)
            && received <= self.now
        {
            if self.cores[f.decode_core as usize].frozen {
                // A spinning decode engine steps, and heartbeats, for ever:
                // the lease holds while the core is frozen, and no expiry is
                // queued that would keep the run alive to the horizon.
                return;
            }
            let since = self.now.since(received).0;
            let interval = lease.heartbeat_interval.0;
            // An interval of zero (a lease under 6 s) beats every step,
            // taken here as continuously.
            let beats = since.checked_div(interval).map_or(since, |n| n * interval);
            let renewed = (received + SimDuration(beats)) + lease.extension;
            if renewed > self.now && renewed > f.lease_expiry {
                f.lease_expiry = renewed;
                self.push(renewed, Event::HoldExpiry { id });
                return;
            }
        }
        f.record.kv_hold_expired = true;
        self.stats.kv_hold_expiries += 1;
        self.release_prefill(id, sink);
    }

    fn finish(
        &mut self,
        id: RequestId,
        outcome: Outcome,
        reason: &'static str,
        sink: &mut dyn RecordSink,
    ) {
        let Some(mut flight) = self.in_flight.remove(&id) else {
            return;
        };
        if flight.client_gone {
            // Its record was written when the client gave up.
            return;
        }
        self.flow_account();
        self.epp.end_of_stream(&mut flight.ticket);
        for pick in std::mem::take(&mut flight.lb) {
            self.lb_finished(pick);
        }
        self.flow_wake(false);
        flight.record.finished = self.now;
        let (mut outcome, mut reason) = (outcome, reason);
        if outcome == Outcome::Completed {
            // The last response goes out after the last token's chunk, on
            // the same event loop (`host_completion`).
            let core = Self::client_core(&flight);
            let work = self.cores[core].api_costs.completion;
            flight.record.finished = self.cores[core].api_work(self.now, work);
            // The engine is done, but the client would see the end of the
            // stream after its deadline: it gave up first.
            if let Some(deadline) = flight.deadline.filter(|&d| d < flight.record.finished) {
                flight.record.finished = deadline;
                outcome = Outcome::Aborted;
                reason = CLIENT_TIMEOUT;
            }
        }
        flight.record.outcome = outcome;
        flight.record.reason = reason;
        if let Some(key) = flight.session {
            self.turn_ended(key, outcome, flight.record.finished);
        }
        match outcome {
            Outcome::Completed => self.stats.completed += 1,
            Outcome::Rejected => self.stats.rejected += 1,
            Outcome::Aborted => self.stats.aborted += 1,
        }
        note_end(self.check, &mut self.ended, &mut self.failure, id);
        sink.record(flight.settled());
    }
    /// Whether `id`'s deadline event is the live one: the request is in
    /// flight and its client has not given up yet.
    fn deadline_pending(&self, id: RequestId) -> bool {
        self.in_flight
            .get(&id)
            .is_some_and(|f| f.deadline.is_some() && !f.client_gone)
    }

    /// The client's deadline passed: it gives up on the request. In the
    /// EPP's flow-control queue the request is evicted there; otherwise the
    /// gateway sees the disconnect, the EPP releases its in-flight load at
    /// once, and the engine core holding the request aborts it
    /// ([`Engine::abort`]) — now if it is between steps, or when its running
    /// step ends (vLLM takes aborts that arrive during a step after the
    /// model runs and before `update_from_output`, `EngineCore.step` in
    /// `vllm/v1/engine/core.py`). The record ends now either way, with what
    /// the client had received.
    fn client_timeout(&mut self, id: RequestId, sink: &mut dyn RecordSink) {
        let Some(f) = self.in_flight.get_mut(&id) else {
            return;
        };
        // The event is spent.
        f.deadline = None;
        let queued = f.queued;
        let core = Self::client_core(f);
        // Observation stops while nothing live is queued (a request stuck
        // until its client gives up); what the client's leaving frees may
        // move requests again, so the loops resume (a no-op while they
        // run).
        if self.scraping < self.pods.len() || !self.sampling {
            self.start_scraping();
        }
        if queued {
            if let Some(flow) = self.flow.as_mut() {
                flow.cancel(id.0);
            }
            self.give_up(id, sink);
            self.retire(id);
            return;
        }
        let group = self.group_of[core] as usize;
        if self.groups[group].busy {
            let tie = self.groups[group].ends == self.now;
            self.cores[core].aborts.push((id, tie));
            if !tie {
                self.give_up(id, sink);
            }
            return;
        }
        self.give_up(id, sink);
        self.abort_at(core, id, sink);
    }

    /// The engine core whose engine has (or is about to get) the client's
    /// request: the prefill core until the prompt is done, then the
    /// decode (or only) core.
    fn client_core(f: &InFlight) -> usize {
        match f.prefill_core {
            Some(p) if f.record.prefill_done.is_none() => p as usize,
            _ => f.decode_core as usize,
        }
    }

    /// Applies the aborts queued on `core` during its step: the ones that
    /// arrived inside it (`ties` false), or those due at its very end.
    fn apply_aborts(&mut self, core: usize, ties: bool, sink: &mut dyn RecordSink) {
        let mut aborts = std::mem::take(&mut self.cores[core].aborts);
        aborts.retain(|&(id, tie)| {
            if tie != ties {
                return true;
            }
            if tie {
                // Its output came first: done unless it is still in flight.
                if self.in_flight.get_mut(&id).is_none_or(|f| f.client_gone) {
                    return false;
                }
                self.give_up(id, sink);
            }
            self.abort_at(core, id, sink);
            false
        });
        // Aborts queued meanwhile (none can be: the step is not over) stay.
        aborts.append(&mut self.cores[core].aborts);
        self.cores[core].aborts = aborts;
    }

    /// The engine on `core` aborts `id`, and what it held is let go as
    /// NixlConnector lets it go
    /// (`vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py`,
    /// `request_finished`):
    ///
    /// - freed on a decode side that had not yet allocated for it (still
    ///   `do_remote_prefill`): the connector tells the prefill side, with
    ///   no blocks to read, to free its held blocks now;
    /// - on a decode side waiting for its read, the blocks are freed when
    ///   the read ends, and the prefill side frees its own then too, as
    ///   after any read;
    /// - the decode side never had it (the client gave up between prefill
    ///   and decode): nobody reads or heartbeats, so the prefill side frees
    ///   at the end of its lease (`hold_expiry`);
    /// - on a prefill side still computing, the producer is freed at once
    ///   and no decode side ever hears of it.
    fn abort_at(&mut self, core: usize, id: RequestId, sink: &mut dyn RecordSink) {
        let outcome = self.cores[core].engine.abort(id);
        if outcome == Abort::Freed {
            let held = self.in_flight.get_mut(&id).is_some_and(|f| f.held);
            if held {
                self.release_prefill(id, sink);
            }
            // Freed blocks may let a waiting request in.
            self.input_to(core, sink);
        }
        self.retire(id);
    }

    /// The client gave up on `id`: its record ends now as aborted, and the
    /// EPP releases what the request added to its in-flight counters (the
    /// end of the stream, `PluginState.Delete`). The request stays in
    /// flight, marked, until nothing holds its blocks ([`Sim::retire`]).
    fn give_up(&mut self, id: RequestId, sink: &mut dyn RecordSink) {
        self.flow_account();
        let Some(f) = self.in_flight.get_mut(&id) else {
            return;
        };
        if f.client_gone {
            return;
        }
        f.client_gone = true;
        f.deadline = None;
        self.epp.end_of_stream(&mut f.ticket);
        let picks = std::mem::take(&mut f.lb);
        f.record.finished = self.now;
        f.record.outcome = Outcome::Aborted;
        f.record.reason = CLIENT_TIMEOUT;
        self.stats.aborted += 1;
        note_end(self.check, &mut self.ended, &mut self.failure, id);
        sink.record(f.settled());
        if let Some(key) = f.session {
            self.turn_ended(key, Outcome::Aborted, self.now);
        }
        for pick in picks {
            self.lb_finished(pick);
        }
        self.flow_wake(false);
    }

    /// Drops a request whose client gave up once no engine, transfer or
    /// prefill hold has anything of it left.
    fn retire(&mut self, id: RequestId) {
        let Some(f) = self.in_flight.get_mut(&id) else {
            return;
        };
        if !f.client_gone || f.held || f.flows_left > 0 || f.load_flows_left > 0 {
            return;
        }
        let (decode, prefill) = (f.decode_core as usize, f.prefill_core);
        if self.cores[decode].engine.holds(id)
            || prefill.is_some_and(|p| self.cores[p as usize].engine.holds(id))
        {
            return;
        }
        self.in_flight.remove(&id);
    }
}

/// The checker is checked: each test leaves behind what a bug in a handler
/// would (an event in the past, a request ended by two paths) and requires
/// the event loop's checks, which `pdsim run --check` relies on, to report
/// it rather than carry on.
#[cfg(test)]
mod checker_tests {
    use super::*;
    use crate::MemorySink;
    use pdsim_spec::files::MemoryFiles;
    use pdsim_spec::validate::{Request, validate};
    use pdsim_workload::MooncakeReader;

    fn cluster() -> Cluster {
        cluster_of(include_str!(
            "../../../scenarios/real-runs/llama-2-7b-tp1-h100.yaml"
        ))
    }

    /// The real-run deployment on `scenario`'s text.
    fn cluster_of(scenario: &str) -> Cluster {
        let files = MemoryFiles::new().with("s.yaml", scenario).with(
            "d.yaml",
            include_str!("../../../deployments/real-runs/llama-2-7b-tp1.yaml"),
        );
        let report = validate(&Request {
            files: &files,
            catalog_dirs: vec![],
            scenario: Some("s.yaml".into()),
            documents: vec!["d.yaml".into()],
        });
        assert!(report.valid, "{:#?}", report.problems);
        crate::build(&report.deployments[0], report.scenario.as_ref().unwrap()).expect("builds")
    }

    /// A run with one short request that has just arrived (it is in the
    /// API server's intake; no engine has it yet).
    fn one_arrived(cluster: &Cluster) -> (Sim<'_>, MemorySink) {
        let mut sim = Sim::new(cluster, 0, true);
        let trace =
            "{\"timestamp\": 0, \"input_length\": 32, \"output_length\": 4, \"hash_ids\": [1]}\n";
        let mut source: Box<dyn Iterator<Item = Result<RequestSpec, TraceError>>> = Box::new(
            MooncakeReader::new(std::io::Cursor::new(trace.as_bytes()), "t.jsonl"),
        );
        let mut sink = MemorySink::default();
        sim.pull_arrival(&mut source).expect("one request");
        assert!(matches!(sim.next_event(), Ok(Some(Event::Arrival))));
        sim.arrive(&mut sink);
        (sim, sink)
    }

    /// The in-flight table keeps a slot per id from its base: a gap in the
    /// ids leaves empty slots, so every id finds its own entry, and the
    /// base moves past the leading empty slots as entries leave.
    #[test]
    fn the_in_flight_table_finds_each_id_across_a_gap() {
        let spec = || {
            let trace = "{\"timestamp\": 0, \"input_length\": 32, \"output_length\": 4, \"hash_ids\": [1]}\n";
            MooncakeReader::new(std::io::Cursor::new(trace.as_bytes()), "t.jsonl")
                .next()
                .unwrap()
                .unwrap()
        };
        let flight = |id: u32| {
            let record = RequestRecord::arrived(RequestId(id), 1, 0, SimTime::ZERO, 32, (0, 0, 0));
            InFlight::new(record, spec(), false)
        };
        let mut table = InFlightTable::default();
        table.insert(RequestId(3), flight(3));
        table.insert(RequestId(7), flight(7));
        assert_eq!(table.slots.len(), 5, "ids 3 to 7, 4 to 6 empty");
        assert_eq!(
            table.get_mut(&RequestId(7)).unwrap().record.id,
            RequestId(7)
        );
        assert!(table.get_mut(&RequestId(5)).is_none());
        assert!(table.get_mut(&RequestId(2)).is_none(), "before the base");
        assert_eq!(table.remove(&RequestId(3)).unwrap().record.id, RequestId(3));
        assert_eq!(table.base, 7, "the empty slots before 7 are gone");
        assert_eq!(
            table.get_mut(&RequestId(7)).unwrap().record.id,
            RequestId(7)
        );
    }

    /// Runs `cluster` on a one-request trace until an engine core holds
    /// the request: the arrival time that engine orders it by, when the
    /// API server started rendering its prompt, and when the engine core
    /// got it. Only the events on the request's way in are handled.
    fn engine_arrival(cluster: &Cluster) -> (SimTime, SimTime, SimTime) {
        let (mut sim, mut sink) = one_arrived(cluster);
        let mut rendered = None;
        while let Ok(Some(event)) = sim.next_event() {
            match event {
                Event::Intake {
                    id,
                    core,
                    prompt_tokens,
                } => {
                    rendered = Some(sim.now);
                    sim.tokenize(id, core as usize, prompt_tokens);
                }
                Event::TokenizerClose { core, .. } => sim.close_tokenizer_batch(core as usize),
                Event::Admit { id, core } => {
                    sim.admit(id, core as usize, &mut sink);
                    let arrival = sim.cores[core as usize].engine.arrival(id);
                    return (
                        arrival.expect("admitted"),
                        rendered.expect("rendered"),
                        sim.now,
                    );
                }
                _ => {}
            }
        }
        panic!("the request never reached an engine core");
    }

    /// The engine orders requests of equal priority by the arrival time
    /// the release's API server stamps: vLLM 0.15.1's input processor
    /// stamps it once the frontend has tokenized the prompt, so the engine
    /// core's own arrival; 0.31.0's renderer stamps it before tokenizing.
    /// Neither is the trace's arrival (time 0 here), before the API
    /// server's intake.
    #[test]
    fn the_arrival_the_engine_orders_by_is_the_release_s_stamp() {
        let (arrival, rendered, admitted) = engine_arrival(&cluster());
        assert!(rendered > SimTime::ZERO && admitted > rendered);
        assert_eq!(arrival, admitted, "0.15.1: stamped in the input processor");
        let newer = cluster_of(
            &include_str!("../../../scenarios/real-runs/llama-2-7b-tp1-h100.yaml")
                .replace("engine_version: \"0.15.1\"", "engine_version: \"0.31.0\""),
        );
        let (arrival, rendered, admitted) = engine_arrival(&newer);
        assert!(rendered > SimTime::ZERO && admitted > rendered);
        assert_eq!(arrival, rendered, "0.31.0: stamped by the renderer");
    }

    fn invariant(e: RunError) -> String {
        match e {
            RunError::Invariant(m) => m,
            other => panic!("expected an invariant violation, got {other}"),
        }
    }

    /// Past two years of simulated time the run stops with an error
    /// rather than simulate (and write a row a second for) years more.
    #[test]
    fn the_clock_stops_at_the_run_horizon() {
        let cluster = cluster();
        let (mut sim, _sink) = one_arrived(&cluster);
        sim.queue.clear();
        sim.push(RUN_HORIZON, Event::Sample);
        assert!(matches!(sim.next_event(), Ok(Some(Event::Sample))));
        sim.push(SimTime(RUN_HORIZON.as_ns() + 1), Event::Sample);
        match sim.next_event() {
            Err(RunError::Limit(m)) => assert!(m.contains("two years"), "{m}"),
            other => panic!("expected the limit, got {:?}", other.map(|_| ())),
        }
        // With nothing in flight the event is let through.
        let mut idle = Sim::new(&cluster, 0, true);
        idle.push(SimTime(RUN_HORIZON.as_ns() + 1), Event::Sample);
        assert!(matches!(idle.next_event(), Ok(Some(Event::Sample))));
    }

    /// A load far beyond the deployment stops the run once more requests
    /// than the limit are in flight, instead of holding them all.
    #[test]
    fn a_run_with_too_many_requests_in_flight_stops() {
        let cluster = cluster();
        let mut sim = Sim::new(&cluster, 0, true);
        sim.max_in_flight = 3;
        let trace: String = (0..6)
            .map(|i| {
                format!(
                    "{{\"timestamp\": {i}, \"input_length\": 32, \"output_length\": 400, \"hash_ids\": [{i}]}}\n"
                )
            })
            .collect();
        let mut source: Box<dyn Iterator<Item = Result<RequestSpec, TraceError>>> = Box::new(
            MooncakeReader::new(std::io::Cursor::new(trace.into_bytes()), "t.jsonl"),
        );
        let mut sink = MemorySink::default();
        sim.pull_arrival(&mut source).unwrap();
        let mut arrivals = 0;
        while sim.failure.is_none() {
            match sim.next_event().unwrap() {
                Some(Event::Arrival) => {
                    arrivals += 1;
                    sim.arrive(&mut sink);
                    sim.pull_arrival(&mut source).unwrap();
                }
                Some(_) => {}
                None => break,
            }
        }
        assert_eq!(arrivals, 4, "the fourth arrival finds three in flight");
        assert_eq!(sim.in_flight.live, 3);
        match sim.failure.take() {
            Some(RunError::Limit(m)) => {
                assert!(m.contains("3 requests were in flight"), "{m}");
                assert!(m.contains("more than the 3"), "{m}");
            }
            other => panic!("expected the limit, got {other:?}"),
        }
    }

    #[test]
    fn an_event_in_the_past_is_reported_as_time_going_back() {
        let cluster = cluster();
        let mut sim = Sim::new(&cluster, 0, true);
        sim.push(SimTime(2_000), Event::Sample);
        assert!(matches!(sim.next_event(), Ok(Some(Event::Sample))));
        assert_eq!(sim.now, SimTime(2_000));
        // An event at the same instant is fine; one before it is not.
        sim.push(SimTime(2_000), Event::Sample);
        assert!(matches!(sim.next_event(), Ok(Some(Event::Sample))));
        sim.push(SimTime(1_999), Event::Sample);
        let m = invariant(sim.next_event().expect_err("time went back"));
        assert!(m.contains("time went back"), "{m}");
        assert!(m.contains("1999"), "{m}");
    }

    #[test]
    fn events_at_one_instant_come_out_in_the_order_they_were_queued() {
        // Whatever their kinds: the queue breaks time ties by a sequence
        // number, never by the event itself.
        let cluster = cluster();
        let mut sim = Sim::new(&cluster, 0, true);
        sim.push(SimTime(5), Event::Sample);
        sim.push(SimTime(5), Event::Arrival);
        sim.push(SimTime(5), Event::FlowTick);
        sim.push(SimTime(5), Event::Sample);
        let order: Vec<Event> = std::iter::from_fn(|| sim.next_event().unwrap()).collect();
        assert_eq!(
            order,
            vec![
                Event::Sample,
                Event::Arrival,
                Event::FlowTick,
                Event::Sample
            ]
        );
    }

    #[test]
    fn a_request_ending_twice_is_reported() {
        let cluster = cluster();
        let (mut sim, mut sink) = one_arrived(&cluster);
        let id = RequestId(0);
        sim.give_up(id, &mut sink);
        assert_eq!(sink.records.len(), 1);
        assert!(sim.failure.is_none(), "one end is sound");
        // The broken state: a path forgets the client is gone and ends the
        // request again.
        sim.in_flight
            .get_mut(&id)
            .expect("still in flight")
            .client_gone = false;
        sim.give_up(id, &mut sink);
        let m = invariant(sim.failure.take().expect("reported"));
        assert_eq!(m, "request 0 ended twice");
    }

    /// A request whose client gave up leaves the in-flight table as soon as
    /// nothing holds it; otherwise the table, which only trims its head,
    /// would keep a slot for every later request until the run ends.
    #[test]
    fn a_request_the_client_gave_up_on_leaves_the_in_flight_table() {
        let cluster = cluster();
        let (mut sim, mut sink) = one_arrived(&cluster);
        assert!(!sim.in_flight.is_empty());
        // Still in the API server's intake: no engine holds anything of it.
        sim.client_timeout(RequestId(0), &mut sink);
        assert_eq!(sink.records.len(), 1);
        assert_eq!(sink.records[0].reason, CLIENT_TIMEOUT);
        assert!(sim.in_flight.is_empty(), "retired at once");
    }

    #[test]
    fn without_check_a_second_end_is_not_tracked() {
        let mut ended = Vec::new();
        let mut failure = None;
        note_end(false, &mut ended, &mut failure, RequestId(7));
        note_end(false, &mut ended, &mut failure, RequestId(7));
        assert!(failure.is_none() && ended.is_empty());
        // With check, ids in different words and bits are kept apart.
        note_end(true, &mut ended, &mut failure, RequestId(7));
        note_end(true, &mut ended, &mut failure, RequestId(71));
        note_end(true, &mut ended, &mut failure, RequestId(135));
        assert!(failure.is_none(), "three distinct ids");
        assert_eq!(ended, vec![1 << 7, 1 << 7, 1 << 7]);
        note_end(true, &mut ended, &mut failure, RequestId(71));
        assert!(
            matches!(failure, Some(RunError::Invariant(ref m)) if m == "request 71 ended twice")
        );
    }

    /// A scrape runs after every other event due at its instant, whenever
    /// either was queued, and at its instant before anything later: what
    /// lets a dormant loop be queued again at its tick and still run where
    /// a loop queued all along would have ([`Queued`]).
    #[test]
    fn a_scrape_runs_after_every_other_event_due_at_its_instant() {
        let cluster = cluster();
        let mut sim = Sim::new(&cluster, 1, false);
        sim.push(SimTime(100), Event::Scrape { pod: 0 });
        sim.push(SimTime(50), Event::Scrape { pod: 0 });
        sim.push(SimTime(100), Event::Sample);
        sim.push(SimTime(100), Event::BurstSeal);
        sim.push(SimTime(101), Event::Sample);
        let mut order = Vec::new();
        while let Some(event) = sim.next_event().expect("in order") {
            order.push((sim.now.as_ns(), event));
        }
        assert_eq!(
            order,
            vec![
                (50, Event::Scrape { pod: 0 }),
                (100, Event::Sample),
                (100, Event::BurstSeal),
                (100, Event::Scrape { pod: 0 }),
                (101, Event::Sample),
            ]
        );
    }
}
