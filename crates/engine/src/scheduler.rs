//! The V1 scheduler step (`vllm/v1/core/sched/scheduler.py`, `schedule` and
//! `update_from_output`), one engine core at a time.
//!
//! There is no prefill phase and no decode phase: each request has a number
//! of computed tokens, and every step hands each request some new tokens so
//! that the count catches up with the request's tokens (prompt, output so
//! far, and draft tokens). Chunked prefill, prefix hits, recompute after
//! preemption and speculative decoding all follow from that rule.

use crate::graph::{Dbo, Graphs};
use crate::kv::BlockPool;
use pdsim_core::Segment;
use pdsim_core::kv_events::{KvEventBatch, Medium, Piece};
use pdsim_core::prompt::{BlockHasher, content_id};
use pdsim_core::{Prompt, RequestId, SimTime, Stream};
use pdsim_cost::Batch;
pub use pdsim_spec::rules::pack::{AsyncLoadReserve, PadSpecDecode};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// `scheduling_policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Fcfs,
    Priority,
}

/// Speculative decoding settings.
#[derive(Clone, Debug)]
pub struct SpecConfig {
    /// Draft tokens per step (`num_spec_tokens`).
    pub num_spec_tokens: u32,
    /// Probability that draft position i (0-based) is accepted, counted over
    /// all drafts (vLLM's `num_accepted_tokens_per_pos / num_drafts`); must
    /// not increase with i.
    pub acceptance: Vec<f64>,
    /// EAGLE-style drafters keep their own KV and reserve `num_spec_tokens`
    /// lookahead slots; a prefix hit drops its last block so the draft
    /// head's hidden states are recomputed.
    pub eagle_style: bool,
    /// KV slots a request reserves past its tokens for the drafter
    /// (`num_lookahead_tokens`): `num_spec_tokens` for EAGLE-style methods
    /// and the draft model, one more for DFlash, none for n-gram.
    pub lookahead_tokens: u32,
    /// Model inputs the drafter adds to every scheduled request, which the
    /// step's input budget (`max_num_batched_tokens`) pays for besides its
    /// tokens (`SpeculativeConfig.max_num_new_slots_for_drafting`,
    /// `vllm/config/speculative.py`: `num_spec_tokens` for DFlash, one for
    /// an autoregressive draft model, `num_spec_tokens - 1` for DSpark,
    /// none for EAGLE, MTP and n-gram), on releases whose scheduler keeps
    /// that budget (0.29.0 to 0.31.0); 0 elsewhere.
    pub draft_slots: u32,
}

/// Preemptions an engine may make without a step delivering a single
/// output token before it is taken to spin
/// ([`Engine::preemptions_since_output`]). A core that makes progress
/// delivers a token within a few steps of a preemption (a decode step
/// samples for every request it runs; a prompt of any admissible length is
/// prefilled within `max_model_len / max_num_batched_tokens` steps), so ten
/// thousand in a row is a spin, not a slow stretch; at a few preemptions a
/// step it is found within a few thousand steps.
pub const SPIN_PREEMPTIONS: u64 = 10_000;

/// What one engine core runs with, resolved from the documents.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub block_size: u32,
    /// Tokens per prefix-reuse unit: `block_size` in vLLM; a divisor of it
    /// under vllm-rbln's sub-block prefix caching (`max_num_batched_tokens`).
    pub prefix_unit: u32,
    /// Blocks in the pool, the null block included.
    pub num_blocks: u32,
    pub max_num_batched_tokens: u32,
    pub max_num_seqs: u32,
    /// 0 leaves prefills uncapped.
    pub long_prefill_token_threshold: u32,
    /// The release waives the cap for a request alone in the scheduler.
    pub long_prefill_waiver_when_alone: bool,
    pub policy: Policy,
    pub enable_prefix_caching: bool,
    pub max_model_len: u32,
    /// Admission needs free blocks for the whole remaining prompt, not just
    /// the first chunk (`scheduler_reserve_full_isl`).
    pub reserve_full_prompt: bool,
    pub unhashed_blocks_to_front: bool,
    /// vllm-rbln's step phases (the rules pack's `lone_prefill_steps`): a
    /// step runs decodes or one prefill alone, where vLLM mixes them. See
    /// [`Engine::schedule`].
    pub lone_prefill_steps: bool,
    /// vllm-rbln's delayed block caching (the rules pack's
    /// `delay_cache_blocks`): a step's blocks are cached once its schedule
    /// is final, not at each allocation. See [`Engine::cache_step_blocks`].
    pub delay_cache_blocks: bool,
    pub graphs: Graphs,
    pub dbo: Dbo,
    pub spec: Option<SpecConfig>,
    /// A host-memory offload tier (vLLM's OffloadingConnector with
    /// CPUOffloadingSpec, see [`crate::offload`]); `None` without offload.
    pub offload: Option<crate::offload::OffloadConfig>,
    /// Secondary tiers behind the host-memory tier (`TieringOffloadingSpec`,
    /// see [`crate::tiering`]): each one's capacity in chunks, in order.
    /// Empty with `CPUOffloadingSpec` alone.
    pub offload_secondary: Vec<u64>,
    /// LMCache through `LMCacheConnectorV1` (see [`crate::lmcache`]);
    /// `None` without it.
    pub lmcache: Option<crate::lmcache::LmCacheConfig>,
    /// vLLM's `AsyncScheduler` (`vllm/v1/core/sched/async_scheduler.py`):
    /// a step is scheduled while the one before it still runs, so each
    /// sampling request carries output placeholders, and the caller keeps
    /// up to two steps in flight (`EngineCore.step_with_batch_queue`,
    /// `vllm/v1/engine/core.py`), completing the oldest.
    pub async_scheduling: bool,
    /// `enable_chunked_prefill`: when false, a waiting request whose
    /// tokens exceed the step's budget ends the waiting loop instead of
    /// being admitted on a chunk (`Scheduler.schedule`,
    /// `vllm/v1/core/sched/scheduler.py`: "If chunked_prefill is disabled,
    /// we can stop the scheduling here").
    pub enable_chunked_prefill: bool,
    /// Blocks a step in flight may still write are returned to the pool
    /// only once that step's output is processed, and a victim whose blocks
    /// cannot be freed yet is not preempted: vLLM's `defer_block_free`,
    /// set when more than one batch can be in flight and a KV connector
    /// consumes (`Scheduler.__init__`, `_free_request_blocks`,
    /// `_drain_deferred_frees` in `vllm/v1/core/sched/scheduler.py`).
    pub defer_block_free: bool,
    /// A preempted request's output still in flight is dropped rather than
    /// delivered: the connector's `requires_kv_delivery`, true for a KV
    /// producer (`kv_producer` or `kv_both`;
    /// `vllm/distributed/kv_transfer/kv_connector/v1/base.py`).
    pub drop_stale_output: bool,
    /// When a newly admitted one-token request is padded with placeholder
    /// drafts (the rules pack's `pad_spec_decode`).
    pub pad_spec_decode: PadSpecDecode,
    /// With `defer_block_free`, a victim whose blocks cannot be freed yet is
    /// spared and the request is not scheduled (the rules pack's
    /// `victim_blocks_must_be_freeable`).
    pub victim_blocks_must_be_freeable: bool,
    /// Under the priority policy, requests whose outside KV is ready are
    /// taken before the waiting queue whatever their priority; otherwise
    /// the two queues' heads are compared (the rules pack's
    /// `kv_holding_first`; [`Engine::peek_waiting`]).
    pub kv_holding_first: bool,
    /// How an async KV load is gated (the rules pack's
    /// `async_load_reserve`).
    pub async_load_reserve: AsyncLoadReserve,
    /// A hybrid model's Mamba2 states (see [`crate::mamba`]); `None` when
    /// every layer keeps KV per token.
    pub mamba: Option<crate::mamba::MambaConfig>,
    /// DeepSeek-V4.1's window groups and ring under bounded replay (see
    /// [`crate::window`]); `None` for other models.
    pub window: Option<crate::window::WindowConfig>,
}

/// A request handed to the engine.
#[derive(Clone, Debug)]
pub struct NewRequest {
    pub id: RequestId,
    pub arrival: SimTime,
    pub priority: i32,
    pub prompt: Prompt,
    pub max_output_tokens: u32,
    pub kv: KvTransfer,
    /// The content id of the tokens the request generates, so that a later
    /// prompt that repeats them (a conversation's next turn) hits their
    /// cached blocks; `None`: an id derived from the request id, shared
    /// with nothing.
    pub output_id: Option<u64>,
}

/// A request's part in a P/D KV transfer (NixlConnector,
/// `vllm/distributed/kv_transfer/kv_connector/v1/nixl/`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum KvTransfer {
    /// An ordinary request.
    #[default]
    Local,
    /// Prefill side (`do_remote_decode`): computes the prompt and one token,
    /// then holds its blocks until the decode side has read them
    /// ([`Engine::release`]).
    Produce,
    /// Decode side (`do_remote_prefill`): allocates blocks for the whole
    /// prompt, keeps its own prefix hit, waits without compute for the
    /// missing blocks ([`Engine::kv_arrived`]), then continues from
    /// prompt − 1.
    Consume,
}

/// What a step did to requests, for the cluster to record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineEvent {
    /// The request was admitted for the first time; `cached_tokens` came
    /// from the prefix cache.
    Admitted { id: RequestId, cached_tokens: u32 },
    /// `tokens` output tokens were emitted (1 + accepted drafts).
    Emitted { id: RequestId, tokens: u32 },
    /// The request finished; its blocks are freed.
    Finished { id: RequestId, output_tokens: u32 },
    /// The request was preempted and will recompute.
    Preempted { id: RequestId },
    /// The request can never run on this engine (prompt beyond max_model_len).
    Rejected { id: RequestId },
    /// A producing request finished its prompt and holds `blocks` blocks for
    /// the decode side to read.
    Held { id: RequestId, blocks: u32 },
    /// A consuming request was admitted: it holds blocks for its whole
    /// prompt, `cached_tokens` of it from the local prefix cache, and waits
    /// for the other `missing_tokens` to arrive.
    NeedsKv {
        id: RequestId,
        cached_tokens: u32,
        missing_tokens: u32,
    },
    /// A request admitted for the first time found `tokens` more of its
    /// prefix in LMCache, loaded within its first step.
    LmCacheHit { id: RequestId, tokens: u32 },
    /// An admitted request found `tokens` more of its prefix in the offload
    /// tier; it waits without compute while they load
    /// ([`Engine::kv_loaded`]).
    LoadsKv {
        id: RequestId,
        cached_tokens: u32,
        tokens: u32,
    },
}

/// What [`Engine::abort`] did with a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abort {
    /// The engine does not hold the request: never added, or finished and
    /// freed already.
    Unknown,
    /// The request has finished here (a P/D producer holding its blocks
    /// for the decode side, or one aborted before): vLLM's
    /// `finish_requests` skips a finished request, so nothing changed.
    Finished,
    /// Taken out of running or waiting; its blocks are freed.
    Freed,
    /// Taken out of the queues while its KV was in flight (a P/D read or an
    /// offload load): its blocks are freed when that ends, in
    /// [`Engine::kv_arrived`], [`Engine::kv_failed`] or
    /// [`Engine::kv_loaded`].
    FreedAfterTransfer,
}

/// The fields every step reads for each running request come first and
/// in this order (`repr(C)`): the counters and block list in the first
/// cache line, then the flags, the output's segment, the block hasher and
/// the offload tier's next chunk, so a step touches three of a request's
/// eight lines rather than pieces of most of them. With the compiler's own
/// order, loads of a running request's counters were the costliest
/// instructions of `schedule` and `complete_step` (`perf annotate`, 1P3D,
/// 100,000 requests); cachegrind counts a fifth fewer L1 read misses on
/// 1P3D with this order. The layout changes no behaviour.
#[derive(Clone, Debug)]
#[repr(C)]
struct Req {
    blocks: Vec<u32>,
    id: RequestId,
    prompt_tokens: u32,
    max_output: u32,
    output: u32,
    computed: u32,
    /// Draft tokens proposed for the next step.
    drafts: u32,
    /// Async scheduling: tokens scheduled whose output is not back yet
    /// (`num_output_placeholders` in `vllm/v1/request.py`); counted in
    /// `computed`, not in `tokens()`.
    placeholders: u32,
    /// Tokens scheduled in steps still in flight (`num_in_flight_tokens`).
    in_flight: u32,
    /// Of those, the tokens of steps scheduled before a preemption, whose
    /// output is still delivered but changes no counter
    /// (`num_stale_output_tokens`, set in `Scheduler._preempt_request`).
    stale: u32,
    /// Prefix-reuse units of the request whose hash is registered in the pool.
    cached_units: u32,
    /// In `running` (status RUNNING).
    is_running: bool,
    /// The last step that scheduled the request left it mid-prefill
    /// (`is_prefill_chunk`).
    prefill_chunk: bool,
    /// The stale output is dropped, not delivered (`drop_stale_output`).
    drop_stale: bool,
    /// A producing request holding its blocks for the decode side.
    holding: bool,
    /// Aborted while its KV was in flight: out of every queue, its blocks
    /// kept until the transfer or load ends ([`Engine::abort`]).
    aborted: bool,
    admitted_once: bool,
    /// Preempted and not admitted since (vLLM's `RequestStatus.PREEMPTED`):
    /// admitted again, it is a resumed request, not a new one.
    preempted: bool,
    /// A consuming request whose transfer is over (or failed).
    remote_done: bool,
    /// In vLLM's `_inflight_prefills`: parked for an async load, or
    /// admitted on a chunk that leaves prompt to compute, until a step
    /// samples for it, it is preempted or it ends.
    inflight_prefill: bool,
    kv: KvTransfer,
    output_segment: u64,
    /// Hashes of every full prefix-reuse unit (a block, in vLLM) of prompt +
    /// output generated so far.
    hasher: BlockHasher,
    /// The offload tier's state of the request, with the tier on.
    off: crate::offload::RequestState,
    /// DeepSeek-V4.1's window and ring blocks, with `EngineConfig::window`.
    window: crate::window::Lane,
    /// The last non-empty step that scheduled the request
    /// (`last_sched_seq`), with `defer_block_free`.
    last_sched_seq: u64,
    /// Tokens being loaded from the offload tier.
    loading: u32,
    /// Tokens of the prompt the local prefix cache had at admission.
    local_hit: u32,
    /// Tokens whose full blocks are to be cached when the request is next
    /// taken up for admission (its outside KV arrived); 0 for none.
    cache_pending: u32,
    /// When the request was parked for outside KV (a counter), the order
    /// of the holding queue under fcfs.
    park_seq: u64,
    arrival: SimTime,
    priority: i32,
    /// The prompt's segments, kept only while KV events are published (the
    /// tokens of a `BlockStored` event).
    segments: Vec<Segment>,
    /// LMCache's tracker of the request, with LMCache on.
    lm: crate::lmcache::Tracker,
    /// A hybrid's Mamba state blocks, with `EngineConfig::mamba`.
    mamba: crate::mamba::Lane,
}

impl Req {
    fn tokens(&self) -> u32 {
        self.prompt_tokens + self.output
    }

    /// vllm-rbln's `is_prefill` (`vllm_rbln/v1/core/utils.py`): two or
    /// more tokens left to compute.
    fn is_prefill(&self) -> bool {
        self.computed + 1 < self.tokens()
    }
}

/// Of a hit's first `hit_blocks` blocks (whose first prefix-reuse units are
/// every `per_block`-th of `hashes`), those nobody holds: touching them
/// takes them out of the free queue, so an allocation needs them besides
/// its new blocks (`_get_num_evictable_blocks`,
/// `vllm/v1/core/single_type_kv_cache_manager.py`).
fn hit_blocks_free(pool: &BlockPool, hashes: &[u64], hit_blocks: u32, per_block: usize) -> u32 {
    let mut free = 0;
    pool.hit_blocks(hashes, per_block, hit_blocks as usize, |run| {
        free += run.iter().filter(|&&block| pool.is_free(block)).count() as u32;
    });
    free
}

/// Touches a hit's `hit_blocks` blocks (one reuse unit each) and gives
/// them to the request (`add_local_computed_blocks`).
fn take_hit_blocks(pool: &mut BlockPool, req: &mut Req, hit_blocks: u32, scratch: &mut Vec<u32>) {
    scratch.clear();
    pool.hit_blocks(&req.hasher.hashes, 1, hit_blocks as usize, |run| {
        scratch.extend_from_slice(run);
    });
    for block in scratch.iter() {
        pool.touch(*block);
    }
    req.blocks.extend(scratch.iter());
    req.cached_units = req.cached_units.max(hit_blocks);
}

/// The offload tier's key of a request's chunk `chunk` (one block): the
/// hash of the block's last prefix-reuse unit, as the connector takes every
/// `hashes_per_chunk`-th request block hash (`update_offload_keys`,
/// `offloading/scheduler.py`).
fn offload_key(hashes: &[u64], per_block: u32, chunk: u32) -> u64 {
    hashes[((chunk + 1) * per_block - 1) as usize]
}

/// The offload keys of every full chunk a request has, first to last.
fn offload_keys(hashes: &[u64], per_block: u32) -> impl DoubleEndedIterator<Item = u64> + '_ {
    (0..hashes.len() as u32 / per_block).map(move |c| offload_key(hashes, per_block, c))
}

/// Queues the `BlockStored(medium="GPU")` event for units `from..to` of a
/// request, as `BlockPool.cache_full_blocks` (`vllm/v1/core/block_pool.py`)
/// does for the blocks that became full: their hashes, the hash of the block
/// before them as parent (none for the first block), and their tokens (prompt
/// segments, then the request's output).
fn stored_event(log: &mut KvEventBatch, req: &Req, from: u32, to: u32, unit: u32) {
    let (start, end) = (from * unit, to * unit);
    // Blocks wholly in the output have no prompt piece: skip the segments.
    let prompt_segments = if start < req.prompt_tokens {
        &req.segments[..]
    } else {
        &[]
    };
    let prompt_pieces = prompt_segments
        .iter()
        .scan(0u32, |offset, segment| {
            let lo = *offset;
            *offset += segment.tokens;
            Some((lo, lo + segment.tokens, segment.id))
        })
        .skip_while(|&(_, hi, _)| hi <= start)
        .take_while(|&(lo, _, _)| lo < end)
        .map(|(lo, hi, id)| {
            let (a, b) = (lo.max(start), hi.min(end));
            Piece {
                id,
                start: a - lo,
                len: b - a,
            }
        });
    let output_piece = (end > req.prompt_tokens).then(|| {
        let a = start.max(req.prompt_tokens);
        Piece {
            id: req.output_segment,
            start: a - req.prompt_tokens,
            len: end - a,
        }
    });
    log.stored(
        Medium::Gpu,
        (from > 0).then(|| req.hasher.hashes[from as usize - 1]),
        &req.hasher.hashes[from as usize..to as usize],
        prompt_pieces.chain(output_piece),
    );
}

/// The chance that draft position `i` is accepted once position `i − 1` was
/// (position 0 always follows an accepted token), for each of the
/// `num_spec_tokens` positions: vLLM's acceptance rates count over all
/// drafts, so each is divided by the one before it. A position past the
/// given rates, or after a rate of 0, is never accepted.
fn conditional_acceptance(spec: &SpecConfig) -> Vec<f64> {
    (0..spec.num_spec_tokens as usize)
        .map(|pos| {
            let p_here = spec.acceptance.get(pos).copied().unwrap_or(0.0);
            let p_before = if pos == 0 {
                1.0
            } else {
                spec.acceptance.get(pos - 1).copied().unwrap_or(0.0)
            };
            if p_before > 0.0 {
                p_here / p_before
            } else {
                0.0
            }
        })
        .collect()
}

/// Where a step's accepted drafts come from.
enum Acceptance<'a> {
    /// Drawn per draft position from the configured rates.
    Draw(&'a mut Stream),
    /// Given per request (see [`Engine::complete_step_forced`]).
    Forced(&'a mut dyn FnMut(RequestId, u32) -> u32),
}

/// Waiting requests in policy order.
#[derive(Clone, Debug)]
enum WaitQueue {
    Fcfs(VecDeque<u32>),
    /// (priority, arrival, id) ascending: vLLM's `Request.__lt__`
    /// (`vllm/v1/request.py`) in the heap of `PriorityRequestQueue`
    /// (`vllm/v1/core/sched/request_queue.py`).
    Priority(BinaryHeap<Reverse<(i32, SimTime, RequestId, u32)>>),
}

/// One scheduled request in the current step.
#[derive(Clone, Copy, Debug)]
struct Scheduled {
    slot: u32,
    /// The request, so that a step completing after its request finished
    /// (and the slot was reused) leaves the new occupant alone.
    id: RequestId,
    tokens: u32,
    drafts: u32,
    /// Computed tokens before the step (for attention context).
    context: u32,
    /// The step samples for the request: it is not a partial prefill
    /// (`not request.is_prefill_chunk` after `_update_after_schedule`).
    samples: bool,
    /// The queue the request was scheduled from, in the order vLLM lists
    /// them (`scheduled_running_reqs`, `scheduled_new_reqs`,
    /// `scheduled_resumed_reqs`).
    origin: Origin,
}

/// Where a scheduled request came from this step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Origin {
    Running,
    New,
    Resumed,
}

/// One engine core.
#[derive(Clone, Debug)]
pub struct Engine {
    config: EngineConfig,
    pool: BlockPool,
    reqs: Vec<Option<Req>>,
    free_slots: Vec<u32>,
    running: Vec<u32>,
    waiting: WaitQueue,
    scheduled: Vec<Scheduled>,
    /// Scheduled steps whose output is not applied yet, oldest first: one
    /// at most without async scheduling, two with it. Under async
    /// scheduling an empty step is queued too, as the engine core queues
    /// it.
    in_flight: VecDeque<Vec<Scheduled>>,
    /// Emptied step buffers, reused so that a step allocates nothing.
    spare: Vec<Vec<Scheduled>>,
    /// Waiting requests passed over in this `schedule()` (stale output in
    /// flight), put back at the head in order when it ends.
    skipped: Vec<u32>,
    /// A request finished (or was held) since the last `schedule()`:
    /// vLLM's `finished_req_ids`, which keeps `has_requests()` true so the
    /// engine core schedules once more to report it.
    finished_unreported: bool,
    /// Finished requests holding their blocks for the decode side.
    held: u32,
    /// Non-empty steps scheduled and processed so far (`sched_step_seq`,
    /// `processed_step_seq`), and the frees waiting for a step to be
    /// processed (`deferred_frees`: the fence step and the blocks), with
    /// `defer_block_free`.
    sched_step_seq: u64,
    processed_step_seq: u64,
    deferred_frees: VecDeque<(u64, Vec<u32>)>,
    events: Vec<EngineEvent>,
    /// Scratch for allocations.
    scratch: Vec<u32>,
    /// Slots that finished in the step being completed.
    finished_buf: Vec<u32>,
    /// Slot of each live request, for the transfer callbacks.
    slot_of: rustc_hash::FxHashMap<RequestId, u32>,
    /// Consuming requests waiting for their KV.
    remote_waiting: u32,
    /// Requests parked so far (the next `park_seq`).
    parked: u64,
    /// Waiting requests that already hold KV blocks (their transfer
    /// arrived or failed); admitted before the waiting queue, as vLLM's
    /// `kv_holding_waiting` queue is, so blocks held outside `running`
    /// always drain.
    holding: VecDeque<u32>,
    offload: Option<crate::offload::OffloadManager>,
    /// The secondary tiers behind `offload`, with `TieringOffloadingSpec`.
    tiering: Option<crate::tiering::Tiering>,
    /// The chunks a request offers the offload tier when a block fills,
    /// reused.
    offer_buf: Vec<(u32, u64)>,
    /// Offload keys a load to the GPU is reading now
    /// (`OffloadingConnectorScheduler._chunks_being_loaded`, kept when
    /// prefix caching is on): a request whose hit includes one waits.
    being_loaded: rustc_hash::FxHashSet<u64>,
    lmcache: Option<crate::lmcache::LmCacheTier>,
    /// The chunks each step in flight stores in LMCache when it completes,
    /// in step order beside `in_flight`.
    lm_pending: VecDeque<Vec<u64>>,
    /// The chunks the step being scheduled stores, and a buffer for the
    /// keys of a lookup.
    lm_step_chunks: Vec<u64>,
    lm_keys: Vec<u64>,
    /// Tokens LMCache loads before and stores after the forward pass of
    /// the step last scheduled.
    step_connector_io: (u32, u32),
    /// Per draft position, the probability that it is accepted given the
    /// one before it was: `acceptance[i] / acceptance[i - 1]`, computed once
    /// here rather than per draft per step.
    draft_accept: Vec<f64>,
    /// Tokens found in the offload tier (`vllm:external_prefix_cache_hits`).
    pub external_hits_tokens: u64,
    /// Counters, as vLLM's metrics expose them.
    pub preemptions: u64,
    /// Preemptions since a step last delivered an output token: the
    /// caller's test for an engine that spins without progress (see
    /// [`Engine::preemptions_since_output`]).
    preemptions_since_output: u64,
    pub prefix_queries_tokens: u64,
    pub prefix_hits_tokens: u64,
    pub steps: u64,
    checks: u64,
    /// A hybrid's state hashes cached by requests scheduled in this step
    /// (`MambaManager.cached_blocks_this_step`): their states are written
    /// by the step, so a request hitting one waits for the next.
    mamba_cached_step: rustc_hash::FxHashSet<u64>,
    /// The blocks of the state a waiting request's hit ends on, one a
    /// Mamba group, from its lookup to its allocation.
    mamba_hit: Vec<u32>,
    mamba_newly: Vec<u64>,
    /// The window groups' tail a waiting request's hit ends on, from its
    /// lookup to its allocation (window groups prefix-cached).
    window_hit: Vec<u32>,
}

impl Engine {
    pub fn new(config: EngineConfig) -> Engine {
        let offload = config.offload.map(crate::offload::OffloadManager::new);
        let tiering = (offload.is_some() && !config.offload_secondary.is_empty())
            .then(|| crate::tiering::Tiering::new(&config.offload_secondary));
        let lmcache = config.lmcache.map(crate::lmcache::LmCacheTier::new);
        let draft_accept = config
            .spec
            .as_ref()
            .map_or_else(Vec::new, conditional_acceptance);
        let units = (config.block_size / config.prefix_unit.max(1)).max(1);
        let mut pool =
            BlockPool::with_units(config.num_blocks, units, config.unhashed_blocks_to_front);
        // A plain decoder's one attention group caches each block's hash
        // after the block before it (`cache_new_units`), so its pool can be
        // indexed by chains; Mamba and window groups cache keys of their
        // own, looked up by hash alone.
        if config.mamba.is_none() && config.window.is_none() {
            pool = pool.index_by_chains();
        }
        let waiting = match config.policy {
            Policy::Fcfs => WaitQueue::Fcfs(VecDeque::new()),
            Policy::Priority => WaitQueue::Priority(BinaryHeap::new()),
        };
        Engine {
            config,
            pool,
            reqs: Vec::new(),
            free_slots: Vec::new(),
            running: Vec::new(),
            waiting,
            scheduled: Vec::new(),
            in_flight: VecDeque::new(),
            spare: Vec::new(),
            skipped: Vec::new(),
            finished_unreported: false,
            held: 0,
            sched_step_seq: 0,
            processed_step_seq: 0,
            deferred_frees: VecDeque::new(),
            events: Vec::new(),
            scratch: Vec::new(),
            finished_buf: Vec::new(),
            slot_of: rustc_hash::FxHashMap::default(),
            remote_waiting: 0,
            parked: 0,
            holding: VecDeque::new(),
            offload,
            tiering,
            offer_buf: Vec::new(),
            being_loaded: rustc_hash::FxHashSet::default(),
            lmcache,
            lm_pending: VecDeque::new(),
            lm_step_chunks: Vec::new(),
            lm_keys: Vec::new(),
            step_connector_io: (0, 0),
            draft_accept,
            external_hits_tokens: 0,
            preemptions: 0,
            preemptions_since_output: 0,
            prefix_queries_tokens: 0,
            prefix_hits_tokens: 0,
            steps: 0,
            checks: 0,
            mamba_cached_step: rustc_hash::FxHashSet::default(),
            mamba_hit: Vec::new(),
            mamba_newly: Vec::new(),
            window_hit: Vec::new(),
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Indexes the prefix cache by vLLM's literal `hash → blocks` table
    /// instead of by chains: the reference the chain index is held to (the
    /// cluster's reference runs and the swarm). Only before the engine has
    /// cached anything, which is when it is built.
    pub fn index_by_table(&mut self) {
        assert!(
            self.pool.materialised() == 0,
            "the prefix cache's index is chosen before the engine runs"
        );
        let events = self.pool.kv_events.take();
        self.pool = BlockPool::with_units(
            self.config.num_blocks,
            self.pool.units_per_block(),
            self.config.unhashed_blocks_to_front,
        );
        self.pool.kv_events = events;
    }

    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// `vllm:num_requests_waiting`: `len(self.waiting)` in `make_stats`
    /// (`vllm/v1/core/sched/scheduler.py`). Requests waiting for remote KV
    /// stay in that queue with status `WAITING_FOR_REMOTE_KVS`, so they
    /// count, as do the requests holding loaded KV until they are admitted.
    pub fn num_waiting(&self) -> usize {
        self.holding.len()
            + self.remote_waiting as usize
            + match &self.waiting {
                WaitQueue::Fcfs(q) => q.len(),
                WaitQueue::Priority(h) => h.len(),
            }
    }

    /// `vllm:kv_cache_usage_perc`.
    pub fn kv_usage(&self) -> f64 {
        self.pool.usage()
    }

    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Whether the engine has anything to schedule.
    pub fn has_work(&self) -> bool {
        !self.running.is_empty() || self.num_waiting() > 0
    }

    /// Holds no request and no block and has no step in flight: its
    /// metrics are (0 waiting, 0 running, 0 KV usage), and only a new
    /// request ([`Engine::add_request`]) can change that.
    pub fn is_empty(&self) -> bool {
        self.slot_of.is_empty()
            && self.in_flight.is_empty()
            && self.pool.free() == self.pool.usable()
    }

    /// `Scheduler.has_requests` (`vllm/v1/core/sched/interface.py`):
    /// unfinished requests, or finished ones not yet reported by a
    /// `schedule()`, or (with a connector) finished ones whose blocks wait
    /// for the connector (`Scheduler.has_finished_requests`,
    /// `vllm/v1/core/sched/scheduler.py`: `len(self.requests) >
    /// num_running + num_waiting`). The engine core calls `schedule()` only
    /// when this holds.
    pub fn has_requests(&self) -> bool {
        self.has_work() || self.finished_unreported || self.held > 0
    }

    /// Steps scheduled whose output is not applied yet.
    pub fn steps_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Events produced since the last call, in order.
    pub fn drain_events(&mut self) -> std::vec::Drain<'_, EngineEvent> {
        self.events.drain(..)
    }

    /// Hands the events out by exchanging buffers with `empty`, which must
    /// be empty: the cluster takes every step's events this way, without
    /// copying them one by one as [`Engine::drain_events`] would.
    pub fn take_events(&mut self, empty: &mut Vec<EngineEvent>) {
        debug_assert!(empty.is_empty(), "take_events into a buffer holding events");
        std::mem::swap(&mut self.events, empty);
    }

    /// Adds a request to the waiting queue. An empty prompt or one that
    /// reaches max_model_len is rejected at once, as vLLM's input processor
    /// refuses it (`InputProcessor._validate_prompt_len` in
    /// `vllm/v1/engine/input_processor.py`, `processor.py` before the
    /// rename); the output budget is capped so prompt + output fits.
    pub fn add_request(&mut self, request: NewRequest) {
        let prompt_tokens = request.prompt.tokens().min(u32::MAX as u64) as u32;
        if prompt_tokens == 0 || prompt_tokens >= self.config.max_model_len {
            self.events.push(EngineEvent::Rejected { id: request.id });
            return;
        }
        let max_output = request
            .max_output_tokens
            .max(1)
            .min(self.config.max_model_len - prompt_tokens);
        let mut hasher = BlockHasher::new(self.config.prefix_unit.max(1));
        for segment in &request.prompt.segments {
            hasher.feed_segment(*segment);
        }
        // Window groups in the prefix cache hash their own blocks.
        let mut window_lane = crate::window::Lane::default();
        if let Some(w) = self.config.window.filter(|w| w.cached) {
            let mut h = BlockHasher::new(w.block_size.max(1));
            for segment in &request.prompt.segments {
                h.feed_segment(*segment);
            }
            window_lane.hasher = Some(h);
        }
        let segments = if self.pool.kv_events.is_some() {
            request.prompt.segments
        } else {
            Vec::new()
        };
        let req = Req {
            id: request.id,
            arrival: request.arrival,
            priority: request.priority,
            prompt_tokens,
            max_output,
            output: 0,
            computed: 0,
            drafts: 0,
            admitted_once: false,
            preempted: false,
            blocks: Vec::new(),
            cached_units: 0,
            hasher,
            output_segment: request
                .output_id
                .unwrap_or_else(|| content_id(request.id.0 as u64, 0x6f75_7470_7574)),
            kv: request.kv,
            local_hit: 0,
            remote_done: false,
            holding: false,
            loading: 0,
            park_seq: 0,
            cache_pending: 0,
            segments,
            placeholders: 0,
            in_flight: 0,
            stale: 0,
            is_running: false,
            prefill_chunk: false,
            drop_stale: false,
            last_sched_seq: 0,
            inflight_prefill: false,
            aborted: false,
            lm: crate::lmcache::Tracker::default(),
            off: crate::offload::RequestState::default(),
            mamba: crate::mamba::Lane::default(),
            window: window_lane,
        };
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.reqs[slot as usize] = Some(req);
                slot
            }
            None => {
                self.reqs.push(Some(req));
                (self.reqs.len() - 1) as u32
            }
        };
        self.slot_of.insert(request.id, slot);
        self.push_waiting(slot, false);
    }

    fn req(&self, slot: u32) -> &Req {
        self.reqs[slot as usize].as_ref().expect("live slot")
    }

    fn req_mut(&mut self, slot: u32) -> &mut Req {
        self.reqs[slot as usize].as_mut().expect("live slot")
    }

    fn push_waiting(&mut self, slot: u32, front: bool) {
        let (priority, arrival, id) = {
            let r = self.req(slot);
            (r.priority, r.arrival, r.id)
        };
        match &mut self.waiting {
            WaitQueue::Fcfs(q) if front => q.push_front(slot),
            WaitQueue::Fcfs(q) => q.push_back(slot),
            WaitQueue::Priority(h) => h.push(Reverse((priority, arrival, id, slot))),
        }
    }

    /// The next request the waiting loop takes: from the queue of requests
    /// whose outside KV is ready (`holding`), or from `waiting`. Under fcfs
    /// and with `kv_holding_first` the ready ones come first; otherwise,
    /// under priority, the two heads are compared and `waiting`'s is taken
    /// only when it orders first (`return self.waiting if waiting_req <
    /// skipped_req else self.skipped_waiting` in
    /// `_select_waiting_queue_for_scheduling`,
    /// `vllm/v1/core/sched/scheduler.py` 0.29.0; `Request.__lt__` orders by
    /// priority, arrival, request id).
    fn peek_waiting(&self) -> Option<u32> {
        match (self.holding.front(), self.waiting_head()) {
            (Some(&held), Some(next)) if self.waiting_first(held, next) => Some(next),
            (Some(&held), _) => Some(held),
            (None, next) => next,
        }
    }

    /// Whether `waiting`'s head `next` is taken before the ready `held`.
    fn waiting_first(&self, held: u32, next: u32) -> bool {
        if self.config.kv_holding_first || self.config.policy == Policy::Fcfs {
            return false;
        }
        let key = |slot: u32| {
            let r = self.req(slot);
            (r.priority, r.arrival, r.id)
        };
        key(next) < key(held)
    }

    /// The head of `waiting` alone.
    fn waiting_head(&self) -> Option<u32> {
        match &self.waiting {
            WaitQueue::Fcfs(q) => q.front().copied(),
            WaitQueue::Priority(h) => h.peek().map(|Reverse((_, _, _, slot))| *slot),
        }
    }

    /// Takes off its queue the request [`Engine::peek_waiting`] returned.
    fn pop_waiting(&mut self) {
        if let Some(&held) = self.holding.front()
            && !self
                .waiting_head()
                .is_some_and(|next| self.waiting_first(held, next))
        {
            self.holding.pop_front();
            return;
        }
        match &mut self.waiting {
            WaitQueue::Fcfs(q) => {
                q.pop_front();
            }
            WaitQueue::Priority(h) => {
                h.pop();
            }
        }
    }

    /// Lookahead KV slots a running request reserves beyond its tokens
    /// (`num_lookahead_tokens` in `vllm/v1/core/sched/scheduler.py`, from
    /// the drafting method: [`SpecConfig::lookahead_tokens`]).
    fn lookahead(&self) -> u32 {
        match &self.config.spec {
            Some(spec) => spec.lookahead_tokens,
            _ => 0,
        }
    }

    /// Longest cached prefix of a request with nothing computed
    /// (`KVCacheManager.get_computed_blocks` in
    /// `vllm/v1/core/kv_cache_manager.py`, walking
    /// `find_longest_cache_hit` in
    /// `vllm/v1/core/single_type_kv_cache_manager.py`): stops at the first miss,
    /// keeps at least one token to compute, and drops the last block (unit)
    /// for EAGLE-style drafters. Returns the hit in units and how many
    /// leading blocks can be shared as they are. With one unit per block the
    /// two agree; with sub-block units a block is shared only when all its
    /// units hit in one physical block, and a partially hit block is filled
    /// by copying into a fresh one (a device-local copy, not priced).
    fn prefix_hit(&self, slot: u32) -> (u32, u32) {
        if !self.config.enable_prefix_caching {
            return (0, 0);
        }
        let req = self.req(slot);
        let unit = self.config.prefix_unit.max(1);
        let per_block = self.pool.units_per_block();
        let max_units = (req.tokens() - 1) / unit;
        if per_block == 1 {
            // One unit a block: every hit unit is a whole shared block.
            let mut hit =
                self.pool
                    .cached_prefix(&req.hasher.hashes, max_units as usize) as u32;
            if hit > 0 && self.config.spec.as_ref().is_some_and(|s| s.eagle_style) {
                hit -= 1;
            }
            return (hit, hit);
        }
        let mut hit = 0;
        let mut shared = 0;
        let mut block_ok = true;
        let mut current_block = 0;
        for (i, hash) in req
            .hasher
            .hashes
            .iter()
            .take(max_units as usize)
            .enumerate()
        {
            let Some((block, slot_in_block)) = self.pool.lookup_unit(*hash) else {
                break;
            };
            let position = i as u32 % per_block;
            if position == 0 {
                current_block = block;
                block_ok = slot_in_block == 0;
            } else {
                block_ok &= block == current_block && slot_in_block == position;
            }
            hit += 1;
            if position == per_block - 1 && block_ok && shared * per_block + per_block == hit {
                shared += 1;
            }
        }
        if hit > 0 && self.config.spec.as_ref().is_some_and(|s| s.eagle_style) {
            hit -= 1;
        }
        (hit, shared.min(hit / per_block))
    }

    /// A hybrid's hit (see [`crate::mamba::longest_hit`]): the attention
    /// group's `attention` blocks cut to the last state every Mamba group
    /// holds, the state's blocks kept for the allocation and the junction
    /// pinned on the request. Without Mamba layers the hit is as given.
    fn hybrid_hit(&mut self, slot: u32, units: u32, attention: u32) -> (u32, u32) {
        let Some(m) = self.config.mamba else {
            return (units, attention);
        };
        self.mamba_hit.clear();
        if !self.config.enable_prefix_caching {
            return (0, 0);
        }
        let req = self.reqs[slot as usize].as_mut().expect("live slot");
        let (hit, junction) = crate::mamba::longest_hit(
            &self.pool,
            m,
            &req.hasher.hashes,
            attention,
            &mut self.mamba_hit,
        );
        req.mamba.junction = junction;
        (hit, hit)
    }

    /// The window groups' cut of the full group's hit of `full_tokens` when
    /// they are prefix-cached (see [`crate::window::longest_hit`]): the tail
    /// kept for the allocation, the junction pinned on the request.
    fn window_cached_hit(&mut self, slot: u32, full_tokens: u32) -> u32 {
        let w = self.config.window.expect("a windowed engine");
        let req = self.reqs[slot as usize].as_mut().expect("live slot");
        let hashes = req
            .window
            .hasher
            .as_ref()
            .map_or(&[][..], |h| &h.hashes[..]);
        let (hit, junction) =
            crate::window::longest_hit(&self.pool, &w, hashes, full_tokens, &mut self.window_hit);
        req.window.junction = junction;
        hit
    }

    /// `_mamba_block_aligned_split` in align mode for a chunk of `n` tokens
    /// from `start` (see [`crate::mamba::aligned_split`]); `n` otherwise.
    fn mamba_split(&self, slot: u32, start: u32, n: u32) -> u32 {
        match self.config.mamba {
            Some(m) if m.mode == crate::mamba::MambaMode::Align => {
                let r = self.req(slot);
                let max_prefill = match self.config.long_prefill_token_threshold {
                    0 => self.config.max_num_batched_tokens,
                    t => t.min(self.config.max_num_batched_tokens),
                };
                crate::mamba::aligned_split(
                    start,
                    n,
                    r.prompt_tokens,
                    r.tokens(),
                    r.mamba.junction,
                    self.config.block_size,
                    max_prefill,
                )
            }
            _ => n,
        }
    }

    /// Tokens of the prefix found in the offload tier right after the local
    /// hit of `hit_units` units, in whole blocks, leaving at least one token
    /// to compute (`OffloadingConnectorScheduler.get_num_new_matched_tokens`
    /// and `_maximal_prefix_lookup`,
    /// `vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py`
    /// in 0.29.0 and 0.31.0), or `None` when the request must wait: a
    /// secondary tier has not answered or a chunk is being promoted (the
    /// scan goes on past those, so every tier probes its keys at once), or
    /// a chunk of the hit is being loaded into the GPU for another request
    /// ("Delaying request ... since some of its chunks are already being
    /// loaded").
    fn offload_hit(&mut self, slot: u32, hit_units: u32) -> Option<u32> {
        let Some(tier) = &mut self.offload else {
            return Some(0);
        };
        let per_block = self.pool.units_per_block();
        if !hit_units.is_multiple_of(per_block) {
            return Some(0);
        }
        let req = self.reqs[slot as usize].as_mut().expect("live slot");
        let unit = self.config.prefix_unit.max(1);
        let max_units = (req.tokens() - 1) / unit;
        // Whole blocks only: the tier stores a block under the hash of its
        // last unit (`cache_units`), and the connector looks up every
        // `offloaded_block_size / hash_block_size`-th request block hash.
        let hashes = &req.hasher.hashes;
        let first = hit_units / per_block;
        let mut chunk = first;
        let mut hits = 0;
        let mut defer = false;
        while (chunk + 1) * per_block <= max_units && (chunk + 1) * per_block <= hashes.len() as u32
        {
            let key = offload_key(hashes, per_block, chunk);
            let found = match &mut self.tiering {
                Some(tiering) => tiering.lookup(
                    tier,
                    key,
                    chunk,
                    req.id,
                    &mut req.off,
                    self.pool.kv_events.as_mut(),
                ),
                None if tier.contains(key) => crate::tiering::TierLookup::Hit,
                None => crate::tiering::TierLookup::Miss,
            };
            match found {
                crate::tiering::TierLookup::Hit => hits += 1,
                crate::tiering::TierLookup::Pending => {
                    defer = true;
                    hits += 1;
                }
                crate::tiering::TierLookup::Retry => defer = true,
                crate::tiering::TierLookup::Miss => break,
            }
            chunk += 1;
        }
        if defer {
            return None;
        }
        if !self.being_loaded.is_empty()
            && (first..first + hits).any(|c| {
                self.being_loaded
                    .contains(&offload_key(hashes, per_block, c))
            })
        {
            return None;
        }
        Some(hits * per_block * unit)
    }

    /// Admits a waiting request whose KV comes from outside the engine (the
    /// P/D pull, or the offload connector's load of `loading` tokens): it
    /// gets blocks for its whole prompt now, keeps its local hit, and waits
    /// without compute or budget (`WAITING_FOR_REMOTE_KVS` in
    /// `vllm/v1/core/sched/scheduler.py`). Returns `None`, changing nothing,
    /// when the blocks do not fit.
    fn park_for_remote(
        &mut self,
        slot: u32,
        hit_blocks: u32,
        hit_tokens: u32,
        loading: u32,
    ) -> Option<RequestId> {
        let remaining = self.req(slot).tokens() - hit_tokens;
        // `allocate_slots(..., delay_cache_blocks=load_kv_async)`: the
        // blocks being loaded are not cached until the load completes, so
        // this goes to `allocate_blocks` directly, not through the caching
        // `allocate` (the hit blocks it shares are cached already).
        //
        // 0.29.0 and later allocate no lookahead slots for an async load
        // (`limit_lookahead_tokens` in `Scheduler.schedule`,
        // `vllm/v1/core/sched/scheduler.py`) and admit it only into the free
        // blocks less `reserved_blocks`: what the in-flight prefills still
        // need for their whole sequence, and in 0.31.0 one speculative
        // decode step's slots besides (`_inflight_prefill_reserved_blocks`,
        // `_spec_decode_step_blocks`), since a parked load cannot be
        // preempted. Releases without the gate keep the lookahead.
        let (lookahead, reserved) = match self.config.async_load_reserve {
            AsyncLoadReserve::None => (self.lookahead(), 0),
            AsyncLoadReserve::EagleLoadWithoutLookahead => {
                let eagle = self.config.spec.as_ref().is_some_and(|s| s.eagle_style);
                (if eagle { 0 } else { self.lookahead() }, 0)
            }
            AsyncLoadReserve::InFlightPrefills => (0, self.inflight_prefill_reserved(0)),
            AsyncLoadReserve::InFlightPrefillsAndSpecStep => {
                let step = self.spec_decode_step_blocks();
                (0, self.inflight_prefill_reserved(step) + step)
            }
        };
        if !self.allocate_blocks_with(
            slot, hit_blocks, hit_tokens, remaining, remaining, lookahead, reserved,
        ) {
            return None;
        }
        self.req_mut(slot).inflight_prefill = true;
        self.pop_waiting();
        self.remote_waiting += 1;
        let park_seq = self.parked;
        self.parked += 1;
        let req = self.req_mut(slot);
        req.computed = hit_tokens;
        req.local_hit = hit_tokens;
        req.loading = loading;
        req.park_seq = park_seq;
        req.admitted_once = true;
        Some(req.id)
    }

    /// `_spec_decode_step_blocks`: the blocks of one speculative decode
    /// step's slots, `1 + num_spec_tokens + lookahead`, or none without
    /// drafts.
    fn spec_decode_step_blocks(&self) -> u32 {
        match &self.config.spec {
            Some(spec) if spec.num_spec_tokens > 0 => {
                (1 + spec.num_spec_tokens + self.lookahead()).div_ceil(self.config.block_size)
            }
            _ => 0,
        }
    }

    /// `_inflight_prefill_reserved_blocks`: over the requests still
    /// prefilling (parked for a load, or admitted on a chunk that leaves
    /// prompt to compute), the blocks each lacks for its whole sequence
    /// (`_request_remaining_blocks`), plus `per_request` each (0.31.0 adds
    /// a spec decode step's). Linear in the live requests; it runs only
    /// when an async load is admitted.
    fn inflight_prefill_reserved(&self, per_request: u32) -> u32 {
        let bs = self.config.block_size;
        self.reqs
            .iter()
            .flatten()
            .filter(|r| r.inflight_prefill)
            .map(|r| {
                let full = r.tokens().min(self.config.max_model_len);
                full.div_ceil(bs).saturating_sub(r.blocks.len() as u32) + per_request
            })
            .sum()
    }

    /// Blocks a request lacks for `tokens` more tokens after `base`
    /// computed ones and `lookahead` slots, beyond the `have` it holds or is
    /// about to share (the block count of `KVCacheManager.allocate_slots`,
    /// `vllm/v1/core/kv_cache_manager.py`).
    fn blocks_short_with(&self, base: u32, tokens: u32, lookahead: u32, have: u32) -> u32 {
        let want = (base + tokens + lookahead).min(self.config.max_model_len);
        // Most calls are a decode token that fits in the blocks held:
        // answered by a multiplication, as the division below was one of
        // the costliest instructions of `schedule` (`perf annotate`).
        // `want <= have * block_size` exactly when `⌈want / block_size⌉ <= have`.
        if want <= have.saturating_mul(self.config.block_size) {
            return 0;
        }
        want.div_ceil(self.config.block_size).saturating_sub(have)
    }

    /// Blocks that must be free for an allocation of `new_tokens` slots
    /// (plus `lookahead`) with `must_fit` tokens gated. vLLM makes two
    /// checks in `KVCacheManager.allocate_slots`
    /// (`vllm/v1/core/kv_cache_manager.py`): with `full_sequence_must_fit`
    /// the whole sequence, `min(request.num_tokens, max_model_len)` tokens
    /// and no lookahead, must fit; then the chunk's slots,
    /// `num_new_tokens + num_lookahead_tokens` past the computed ones, must.
    /// Both must pass, so the larger count decides.
    fn blocks_needed(
        &self,
        base: u32,
        new_tokens: u32,
        must_fit: u32,
        lookahead: u32,
        have: u32,
    ) -> u32 {
        let chunk = self.blocks_short_with(base, new_tokens, lookahead, have);
        if must_fit > new_tokens {
            chunk.max(self.blocks_short_with(base, must_fit, 0, have))
        } else {
            chunk
        }
    }

    /// Allocates KV for `new_tokens` more tokens of a request (after any
    /// prefix-hit blocks, which are touched first), or returns false without
    /// changing anything when the free blocks do not suffice
    /// (`KVCacheManager.allocate_slots`, `vllm/v1/core/kv_cache_manager.py`).
    /// `must_fit` is the number of tokens whose blocks must be free at
    /// admission (the whole prompt when the release reserves it).
    ///
    /// Most calls are a running request's decode step whose token still fits
    /// in the blocks it holds: no hit to touch, and as no more tokens are
    /// allocated than must fit, nothing to allocate. That case is decided
    /// here, inline in the scheduler's loop (forced: it is asked for every
    /// running request every step); the rest is [`Engine::allocate_slow`].
    #[inline(always)]
    fn allocate(
        &mut self,
        slot: u32,
        hit_blocks: u32,
        hit_tokens: u32,
        new_tokens: u32,
        must_fit: u32,
    ) -> bool {
        // A hybrid's allocation frees old states on every call, and so does
        // a sliding window's, so neither has a path that decides nothing.
        if hit_blocks == 0 && self.config.mamba.is_none() && self.config.window.is_none() {
            let req = self.req(slot);
            let base = req.computed.max(hit_tokens);
            let held = req.blocks.len() as u32;
            if self.blocks_needed(base, new_tokens, must_fit, self.lookahead(), held) == 0 {
                self.cache_scheduled(slot, base + new_tokens);
                return true;
            }
        }
        self.allocate_slow(slot, hit_blocks, hit_tokens, new_tokens, must_fit)
    }

    /// [`Engine::allocate`] past its inline case: hybrids, windows, hits
    /// and allocations that take blocks.
    #[inline(never)]
    fn allocate_slow(
        &mut self,
        slot: u32,
        hit_blocks: u32,
        hit_tokens: u32,
        new_tokens: u32,
        must_fit: u32,
    ) -> bool {
        if self.config.mamba.is_some() {
            return self.allocate_hybrid(slot, hit_blocks, hit_tokens, new_tokens, must_fit);
        }
        if self.config.window.is_some() {
            return self.allocate_windowed(slot, hit_blocks, hit_tokens, new_tokens, must_fit);
        }
        if !self.allocate_blocks(slot, hit_blocks, hit_tokens, new_tokens, must_fit) {
            return false;
        }
        let base = self.req(slot).computed.max(hit_tokens);
        self.cache_scheduled(slot, base + new_tokens);
        true
    }

    /// Caches the blocks a successful allocation covers, at schedule time,
    /// as `KVCacheManager.allocate_slots` (`vllm/v1/core/kv_cache_manager.py`)
    /// ends with `cache_blocks(request, min(total_computed_tokens +
    /// num_new_tokens, request.num_tokens))`: the tokens scheduled this step
    /// count, draft tokens (beyond `request.num_tokens`) and lookahead slots
    /// do not. A request admitted later in the same step therefore hits the
    /// blocks of one scheduled before it. `upto` is computed + new tokens.
    #[inline]
    fn cache_scheduled(&mut self, slot: u32, upto: u32) {
        if self.config.delay_cache_blocks {
            return;
        }
        let req = self.req(slot);
        if req.hasher.hashes.len() as u32 > req.cached_units {
            let upto = upto.min(req.tokens());
            self.cache_units(slot, upto);
        }
    }

    /// [`Engine::allocate`] when blocks are shared or needed.
    fn allocate_blocks(
        &mut self,
        slot: u32,
        hit_blocks: u32,
        hit_tokens: u32,
        new_tokens: u32,
        must_fit: u32,
    ) -> bool {
        self.allocate_blocks_with(
            slot,
            hit_blocks,
            hit_tokens,
            new_tokens,
            must_fit,
            self.lookahead(),
            0,
        )
    }

    /// [`Engine::allocate_blocks`] with the lookahead slots given and
    /// `reserved` blocks kept free for others: `allocate_slots(...,
    /// reserved_blocks)` checks the chunk's blocks against the free blocks
    /// less the reservation, the full sequence against all free blocks
    /// (`vllm/v1/core/kv_cache_manager.py`).
    #[allow(clippy::too_many_arguments)]
    fn allocate_blocks_with(
        &mut self,
        slot: u32,
        hit_blocks: u32,
        hit_tokens: u32,
        new_tokens: u32,
        must_fit: u32,
        lookahead: u32,
        reserved: u32,
    ) -> bool {
        let per_block = self.pool.units_per_block() as usize;
        let (held, computed) = {
            let req = self.req(slot);
            (req.blocks.len() as u32, req.computed)
        };
        let base = computed.max(hit_tokens);
        let have = held + hit_blocks;
        let need_new = self.blocks_needed(base, new_tokens, must_fit, lookahead, have);
        // Hit blocks sitting in the free queue leave it when touched. Only
        // admissions have hits, so running requests skip this walk.
        let hit_free = hit_blocks_free(
            &self.pool,
            &self.req(slot).hasher.hashes,
            hit_blocks,
            per_block,
        );
        if need_new + hit_free > self.pool.free() {
            return false;
        }
        if reserved > 0
            && self.blocks_short_with(base, new_tokens, lookahead, have) + hit_free + reserved
                > self.pool.free()
        {
            return false;
        }
        let alloc_new = self.blocks_short_with(base, new_tokens, lookahead, have);
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        if hit_blocks > 0 {
            let req = self.reqs[slot as usize].as_ref().expect("live slot");
            self.pool
                .hit_blocks(&req.hasher.hashes, per_block, hit_blocks as usize, |run| {
                    scratch.extend_from_slice(run);
                });
            for block in &scratch {
                self.pool.touch(*block);
            }
        }
        self.pool.allocate(alloc_new, &mut scratch);
        let req = self.reqs[slot as usize].as_mut().expect("live slot");
        req.blocks.extend(scratch.iter());
        req.cached_units = req.cached_units.max(hit_blocks * per_block as u32);
        self.scratch = scratch;
        true
    }

    /// [`Engine::allocate`] for a hybrid model: `KVCacheManager.allocate_slots`
    /// (`vllm/v1/core/kv_cache_manager.py`) over the Mamba groups and the
    /// attention group, which share the pool. The whole sequence must fit
    /// first (`must_fit`); then the states the request has moved past are
    /// freed (`remove_skipped_blocks`, even if the allocation then fails);
    /// then the chunk's blocks must fit. The coordinator calls the Mamba
    /// groups before the attention group (Nemotron-H's first layer is a
    /// Mamba2 mixer, so its groups come first) when it touches, allocates
    /// and caches.
    fn allocate_hybrid(
        &mut self,
        slot: u32,
        hit_blocks: u32,
        hit_tokens: u32,
        new_tokens: u32,
        must_fit: u32,
    ) -> bool {
        let m = self.config.mamba.expect("a hybrid engine");
        let bs = self.config.block_size;
        let (held, computed, in_flight) = {
            let r = self.req(slot);
            (r.blocks.len() as u32, r.computed, r.in_flight)
        };
        let base = computed.max(hit_tokens);
        let have = held + hit_blocks;
        let state_hit = hit_blocks > 0 && !self.mamba_hit.is_empty();
        let hit = state_hit.then(|| (hit_blocks - 1, self.mamba_hit.as_slice()));
        let hit_free = hit_blocks_free(&self.pool, &self.req(slot).hasher.hashes, hit_blocks, 1);
        {
            let req = self.reqs[slot as usize].as_ref().expect("live slot");
            // A state cached by a request scheduled earlier in this step
            // is written by the step: `get_num_blocks_to_allocate` returns
            // more blocks than the pool has.
            if state_hit
                && self
                    .mamba_cached_step
                    .contains(&req.hasher.hashes[(hit_blocks - 1) as usize])
            {
                return false;
            }
            if must_fit > new_tokens {
                let need = self.blocks_short_with(base, must_fit, 0, have)
                    + hit_free
                    + req
                        .mamba
                        .blocks_to_allocate(&self.pool, m, base + must_fit, hit);
                if need > self.pool.free() {
                    return false;
                }
            }
        }
        {
            let req = self.reqs[slot as usize].as_mut().expect("live slot");
            req.mamba
                .remove_skipped(&mut self.pool, m, base.saturating_sub(in_flight));
        }
        let alloc_new = self.blocks_short_with(base, new_tokens, 0, have);
        let state_new =
            self.req(slot)
                .mamba
                .blocks_to_allocate(&self.pool, m, base + new_tokens, hit);
        if alloc_new + hit_free + state_new > self.pool.free() {
            return false;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut newly = std::mem::take(&mut self.mamba_newly);
        newly.clear();
        {
            let req = self.reqs[slot as usize].as_mut().expect("live slot");
            if state_hit {
                req.mamba
                    .add_hit(&mut self.pool, hit_blocks - 1, &self.mamba_hit);
            }
            take_hit_blocks(&mut self.pool, req, hit_blocks, &mut scratch);
            req.mamba
                .allocate(&mut self.pool, m, base + new_tokens, &mut scratch);
            scratch.clear();
            self.pool.allocate(alloc_new, &mut scratch);
            req.blocks.extend(scratch.iter());
            let upto = (base + new_tokens).min(req.tokens()) / bs * bs;
            if self.config.enable_prefix_caching {
                req.mamba.cache(
                    &mut self.pool,
                    m,
                    upto,
                    req.prompt_tokens,
                    &req.hasher.hashes,
                    &mut newly,
                );
            }
        }
        self.mamba_cached_step.extend(newly.iter().copied());
        self.mamba_hit.clear();
        self.scratch = scratch;
        self.mamba_newly = newly;
        self.cache_scheduled(slot, base + new_tokens);
        true
    }

    /// [`Engine::allocate`] for DeepSeek-V4.1: `KVCacheManager.allocate_slots`
    /// over the window groups, the full group (the engine's ordinary
    /// blocks, the only ones a hit shares) and the ring, in that order.
    /// `hit_tokens` is the hit before its replay: the window groups count
    /// from it, and `new_tokens` are the tokens past it.
    fn allocate_windowed(
        &mut self,
        slot: u32,
        hit_blocks: u32,
        hit_tokens: u32,
        new_tokens: u32,
        must_fit: u32,
    ) -> bool {
        let w = self.config.window.expect("a windowed engine");
        let (held, computed, in_flight) = {
            let r = self.req(slot);
            (r.blocks.len() as u32, r.computed, r.in_flight)
        };
        let base = computed.max(hit_tokens);
        let have = held + hit_blocks;
        let hit_free = hit_blocks_free(&self.pool, &self.req(slot).hasher.hashes, hit_blocks, 1);
        // The window groups' hit is this request's only when it is admitted
        // on a hit: the lookup that filled `window_hit` may have been for
        // another request whose admission failed, or for a hit dropped as
        // no longer than the replay. Counted without one, a running
        // request's allocation took the stale hit's positions as held and
        // asked the pool for nothing (oracle sweep, seed 37,
        // `0.31.0/sparse-cached-048`: two null blocks handed out).
        if hit_blocks == 0 {
            self.window_hit.clear();
        }
        {
            let req = self.reqs[slot as usize].as_ref().expect("live slot");
            if must_fit > new_tokens {
                let full = (base + must_fit).min(self.config.max_model_len);
                let need = self.blocks_short_with(base, must_fit, 0, have)
                    + hit_free
                    + req.window.blocks_to_allocate(
                        &self.pool,
                        &w,
                        full,
                        base,
                        true,
                        &self.window_hit,
                    );
                if need > self.pool.free() {
                    return false;
                }
            }
        }
        {
            let req = self.reqs[slot as usize].as_mut().expect("live slot");
            req.window
                .remove_skipped(&mut self.pool, &w, base.saturating_sub(in_flight));
        }
        let alloc_new = self.blocks_short_with(base, new_tokens, 0, have);
        let window_new = self.req(slot).window.blocks_to_allocate(
            &self.pool,
            &w,
            (base + new_tokens).min(self.config.max_model_len),
            base,
            false,
            &self.window_hit,
        );
        if alloc_new + hit_free + window_new > self.pool.free() {
            return false;
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        {
            let req = self.reqs[slot as usize].as_mut().expect("live slot");
            if hit_blocks > 0 {
                req.window.adopt(&mut self.pool, &w, base, &self.window_hit);
            }
            take_hit_blocks(&mut self.pool, req, hit_blocks, &mut scratch);
            req.window.allocate(
                &mut self.pool,
                &w,
                (base + new_tokens).min(self.config.max_model_len),
                &mut scratch,
            );
            scratch.clear();
            self.pool.allocate(alloc_new, &mut scratch);
            req.blocks.extend(scratch.iter());
            req.window.allocate_ring(&mut self.pool, &w);
            // The window groups cache before the full group, in the
            // coordinator's order, up to the scheduler's block.
            let upto = (base + new_tokens).min(req.tokens()) / w.hit_alignment.max(1)
                * w.hit_alignment.max(1);
            req.window
                .cache(&mut self.pool, &w, upto, req.prompt_tokens);
        }
        self.window_hit.clear();
        self.scratch = scratch;
        self.cache_scheduled(slot, base + new_tokens);
        true
    }

    /// Frees a request's blocks (tail first, as `SingleTypeKVCacheManager.free`
    /// in `vllm/v1/core/single_type_kv_cache_manager.py` does) and forgets
    /// them.
    ///
    /// With `defer_block_free`, blocks a step still in flight may write are
    /// kept referenced until that step is processed
    /// (`Scheduler._free_request_blocks`).
    fn free_blocks(&mut self, slot: u32) {
        if let Some(m) = self.config.mamba {
            // The Mamba groups come first in the coordinator's order.
            let req = self.reqs[slot as usize].as_mut().expect("live slot");
            if !req.mamba.is_empty() || req.mamba.junction > 0 {
                debug_assert!(
                    !self.config.defer_block_free,
                    "a hybrid engine runs without a connector, so frees are never deferred"
                );
                req.mamba.free_all(&mut self.pool, m);
            }
        }
        let window = self.config.window;
        if let Some(w) = &window {
            // The window groups come first in the coordinator's order, the
            // ring after the full group (below).
            debug_assert!(
                !self.config.defer_block_free,
                "a windowed engine runs without a connector, so frees are never deferred"
            );
            let req = self.reqs[slot as usize].as_mut().expect("live slot");
            req.window.free_window(&mut self.pool, w);
        }
        if !self.blocks_can_be_freed(slot) {
            let blocks = std::mem::take(&mut self.req_mut(slot).blocks);
            self.req_mut(slot).cached_units = 0;
            if !blocks.is_empty() {
                self.deferred_frees.push_back((self.sched_step_seq, blocks));
            }
            return;
        }
        let blocks = std::mem::take(&mut self.req_mut(slot).blocks);
        self.pool.release(&blocks);
        if window.is_some() {
            let req = self.reqs[slot as usize].as_mut().expect("live slot");
            req.window.free_ring(&mut self.pool);
        }
        let req = self.req_mut(slot);
        req.cached_units = 0;
        req.blocks = blocks;
        req.blocks.clear();
    }

    /// `Scheduler._request_blocks_can_be_freed`: no step that scheduled the
    /// request is still in flight, or frees are not deferred.
    fn blocks_can_be_freed(&self, slot: u32) -> bool {
        !self.config.defer_block_free || self.req(slot).last_sched_seq <= self.processed_step_seq
    }

    /// `Scheduler._drain_deferred_frees`: returns the deferred blocks whose
    /// fence step has been processed, in order, stopping at the first that
    /// has not (tail blocks first within each, as every free).
    fn drain_deferred_frees(&mut self) {
        while let Some((fence, _)) = self.deferred_frees.front() {
            if *fence > self.processed_step_seq {
                break;
            }
            let (_, blocks) = self.deferred_frees.pop_front().expect("front");
            self.pool.release(&blocks);
        }
    }

    /// Recompute preemption of the request in `running[index]`.
    fn preempt(&mut self, index: usize) {
        let slot = self.running.remove(index);
        self.free_blocks(slot);
        let drop_stale_output = self.config.drop_stale_output;
        let id = {
            let req = self.req_mut(slot);
            req.computed = 0;
            req.drafts = 0;
            req.is_running = false;
            req.preempted = true;
            req.inflight_prefill = false;
            // `Scheduler._preempt_request`: output of steps still in flight
            // is stale; it will be delivered but changes no counter. (A
            // connector that `requires_kv_delivery` drops it instead; no
            // connector pdsim runs under async scheduling does.)
            req.drop_stale = drop_stale_output || (req.drop_stale && req.stale > 0);
            req.stale = req.in_flight;
            req.placeholders = 0;
            req.id
        };
        self.preemptions += 1;
        self.preemptions_since_output += 1;
        self.events.push(EngineEvent::Preempted { id });
        self.push_waiting(slot, true);
    }

    /// The victim vLLM picks: the last admitted (fcfs) or the lowest
    /// priority, latest arrival (priority). Under priority vLLM takes
    /// `max(self.running, key=lambda r: (r.priority, r.arrival_time))`
    /// (`Scheduler.schedule`, `vllm/v1/core/sched/scheduler.py`): the key
    /// has no request id, and Python's `max` keeps the first of equal keys,
    /// so a tie goes to the earliest in running order; hence the strict `>`
    /// on (priority, arrival) alone.
    fn victim(&self) -> usize {
        match self.config.policy {
            Policy::Fcfs => self.running.len() - 1,
            Policy::Priority => {
                let mut best = 0;
                for (i, slot) in self.running.iter().enumerate() {
                    let r = self.req(*slot);
                    let b = self.req(self.running[best]);
                    if (r.priority, r.arrival) > (b.priority, b.arrival) {
                        best = i;
                    }
                }
                best
            }
        }
    }

    /// Runs one `schedule()` and returns the batch to price, or `None` when
    /// nothing was scheduled.
    ///
    /// With `lone_prefill_steps`, the step phases of vllm-rbln's scheduler
    /// (`RBLNScheduler.schedule`, `vllm_rbln/v1/core/rbln_scheduler.py`,
    /// vllm-rbln 0.12.0), which keeps a step all decodes or one prefill
    /// alone because RBLN compiles one graph per shape (the
    /// "no-mixed-batching invariant", `vllm_rbln/v1/core/utils.py`):
    /// (A) a running request still prefilling, always the last one admitted,
    /// is scheduled alone; (B) then no waiting request is tried; (C) a
    /// waiting prefill ends the waiting loop once a decode-ready request
    /// joined the step; (D) an admitted waiting prefill takes the step from
    /// the decodes scheduled before it (they keep the blocks they were
    /// given and run the next step) and ends the loop, its chunk capped by
    /// the whole token budget rather than what the decodes left. A request
    /// is prefilling while two or more of its tokens are left to compute
    /// (`is_prefill`).
    ///
    /// Not mirrored from that scheduler: its `DecodeBatchBudget` holds the
    /// decode batch to `max_num_seqs // pp` and `ceil(demand / pp)` to
    /// balance pipeline microbatches, which pdsim does not run (a step is
    /// one batch through every stage; at pp 1 the caps never bind beyond
    /// `max_num_seqs`, except that the soft cap also ends the waiting loop
    /// at a request whose KV is still arriving, which vLLM 0.30.0 visits
    /// ahead of new ones in `skipped_waiting` and pdsim keeps out of the
    /// queue until its KV is there); and `should_defer_spec_step`
    /// (pipeline-parallel speculative decoding). Its delayed block caching
    /// is mirrored, under `delay_cache_blocks` ([`Engine::cache_step_blocks`]).
    pub fn schedule(&mut self) -> Option<Batch> {
        self.scheduled.clear();
        // `kv_cache_manager.new_step_starts()`.
        self.mamba_cached_step.clear();
        self.step_connector_io = (0, 0);
        let mut budget = self.config.max_num_batched_tokens;
        let prefill_budget = budget;
        // The model's input budget (`input_budget` in `Scheduler.schedule`,
        // `vllm/v1/core/sched/scheduler.py`, 0.29.0 to 0.31.0): every
        // scheduled request takes its tokens and the drafter's new slots
        // from max_num_batched_tokens, so a drafter that adds inputs
        // (DFlash, a draft model) caps each request's tokens at what is left
        // less its slots and ends a loop once no more than those are left.
        // With no slots it moves with `budget` and never binds first.
        let draft_slots = self.config.spec.as_ref().map_or(0, |s| s.draft_slots);
        let mut input_budget = self.config.max_num_batched_tokens;
        let alone = self.running.len() + self.num_waiting() == 1;
        let long_cap = if alone && self.config.long_prefill_waiver_when_alone {
            0
        } else {
            self.config.long_prefill_token_threshold
        };
        let mut preempted = false;
        // A running request mid-prefill was scheduled (`prefill_scheduled`).
        let mut prefill_scheduled = false;
        let lone = self.config.lone_prefill_steps;

        // Running requests first, in admission order. Under vllm-rbln's
        // step phases, a trailing request still prefilling is scheduled
        // alone (guard (A)): the loop starts at it, the last one.
        let mut i = match self.running.last() {
            Some(&last) if lone && self.req(last).is_prefill() => self.running.len() - 1,
            _ => 0,
        };
        while i < self.running.len() && budget > 0 {
            if input_budget <= draft_slots {
                break;
            }
            let slot = self.running[i];
            let (mut n, drafts_avail, computed, tokens, placeholders) = {
                let r = self.req(slot);
                // Async scheduling: a request whose step in flight is sure
                // to reach max_tokens, even if every draft is rejected, gets
                // no further step (`Scheduler.schedule`,
                // `vllm/v1/core/sched/scheduler.py`: `num_computed_tokens + 2
                // - num_output_placeholders >= num_prompt_tokens +
                // max_tokens`).
                if r.placeholders > 0
                    && r.computed + 2 >= r.placeholders + r.prompt_tokens + r.max_output
                {
                    i += 1;
                    continue;
                }
                // `num_tokens_with_spec + num_output_placeholders -
                // num_computed_tokens`.
                (
                    (r.tokens() + r.drafts + r.placeholders).saturating_sub(r.computed),
                    r.drafts,
                    r.computed,
                    r.tokens(),
                    r.placeholders,
                )
            };
            if long_cap > 0 {
                n = n.min(long_cap);
            }
            // The input position stays below max_model_len, one sampled
            // token included (`max_model_len - num_computed_tokens -
            // num_sampled_tokens_per_step`); none left means no step.
            n = n
                .min(budget)
                .min(input_budget - draft_slots)
                .min(self.config.max_model_len.saturating_sub(computed + 1));
            // A chunk that cannot end where a state is cached waits
            // (`continue`: later requests may still be scheduled).
            n = self.mamba_split(slot, computed, n);
            if n == 0 {
                i += 1;
                continue;
            }
            let mut self_preempted = false;
            let mut stuck = false;
            while !self.allocate(slot, 0, 0, n, 0) {
                let victim = self.victim();
                let victim_slot = self.running[victim];
                // A deferred free would not help this allocation: the
                // request is not scheduled ("A deferred free will not help
                // with immediate allocation", `Scheduler.schedule`).
                if self.config.victim_blocks_must_be_freeable
                    && !self.blocks_can_be_freed(victim_slot)
                {
                    stuck = true;
                    break;
                }
                preempted = true;
                if let Some(pos) = self.scheduled.iter().position(|s| s.slot == victim_slot) {
                    budget += self.scheduled[pos].tokens;
                    input_budget += self.scheduled[pos].tokens + draft_slots;
                    self.scheduled.remove(pos);
                }
                self.preempt(victim);
                if victim_slot == slot {
                    self_preempted = true;
                    break;
                }
                if victim < i {
                    i -= 1;
                }
            }
            // A request that preempted itself ends the running loop under
            // either policy: vLLM breaks out of the allocation loop with
            // `new_blocks` None and then out of the running loop
            // (`if new_blocks is None: break` in `Scheduler.schedule`,
            // `vllm/v1/core/sched/scheduler.py`).
            if self_preempted || stuck {
                break;
            }
            // `num_new_tokens + num_computed_tokens - num_tokens -
            // num_output_placeholders` of the request's drafts are scheduled.
            let drafts = drafts_avail.min((n + computed).saturating_sub(tokens + placeholders));
            let id = self.req(slot).id;
            prefill_scheduled |= self.req(slot).prefill_chunk;
            self.scheduled.push(Scheduled {
                slot,
                id,
                tokens: n,
                drafts,
                context: computed,
                samples: false,
                origin: Origin::Running,
            });
            budget -= n;
            input_budget -= n + draft_slots;
            i += 1;
        }
        let scheduled_running = !self.scheduled.is_empty();
        // Guard (B): a running prefill scheduled alone takes the step.
        let running_prefill = lone
            && self
                .scheduled
                .first()
                .is_some_and(|s| self.req(s.slot).is_prefill());
        // Decode-ready requests admitted from the waiting queue this step
        // (`scheduled_new_reqs`, `scheduled_resumed_reqs`).
        let mut admitted_decodes = 0u32;

        // Then waiting requests, only if nothing was preempted.
        if !preempted && !running_prefill {
            while budget > 0 && (self.running.len() as u32) < self.config.max_num_seqs {
                if input_budget <= draft_slots {
                    break;
                }
                let Some(slot) = self.peek_waiting() else {
                    break;
                };
                // `request_token_budget`: what this request may take.
                let request_budget = budget.min(input_budget - draft_slots);
                if self.req(slot).stale > 0 && !self.req(slot).drop_stale {
                    // Async scheduling: a preempted request whose stale
                    // output is still in flight is passed over, as resuming
                    // it could resample a position that output delivers
                    // (`skip_request` in `Scheduler.schedule`).
                    self.pop_waiting();
                    self.skipped.push(slot);
                    continue;
                }
                let first = !self.req(slot).admitted_once;
                let (kv, remote_done, holds_blocks, computed) = {
                    let r = self.req(slot);
                    (r.kv, r.remote_done, !r.blocks.is_empty(), r.computed)
                };
                let tokens = self.req(slot).tokens();
                if kv == KvTransfer::Consume && !remote_done {
                    // Decode side of P/D: allocate for the whole prompt, keep
                    // the local hit, and wait for the rest without compute
                    // (WAITING_FOR_REMOTE_KVS; no token budget).
                    let (hit_units, hit_blocks) = self.prefix_hit(slot);
                    let hit_tokens = hit_units * self.config.prefix_unit.max(1);
                    let missing = tokens - hit_tokens;
                    let Some(id) = self.park_for_remote(slot, hit_blocks, hit_tokens, 0) else {
                        break;
                    };
                    self.prefix_queries_tokens += tokens as u64;
                    self.prefix_hits_tokens += hit_tokens as u64;
                    self.events.push(EngineEvent::NeedsKv {
                        id,
                        cached_tokens: hit_tokens,
                        missing_tokens: missing,
                    });
                    continue;
                }
                if holds_blocks {
                    // A consuming request whose KV arrived (or failed): it
                    // holds its prompt's blocks and continues from what it
                    // has, one token after a transfer. Reaching it is what
                    // promotes it in vLLM, caching its arrived blocks
                    // (`_update_waiting_for_remote_kv`), whether or not it
                    // is then admitted.
                    let pending = std::mem::take(&mut self.req_mut(slot).cache_pending);
                    if pending > 0 {
                        self.cache_units(slot, pending);
                    }
                    let mut n = tokens - computed;
                    let Some(pad) = self.pad_drafts(
                        n,
                        computed,
                        request_budget,
                        scheduled_running,
                        prefill_scheduled,
                    ) else {
                        break;
                    };
                    n += pad;
                    if long_cap > 0 {
                        n = n.min(long_cap);
                    }
                    if !self.config.enable_chunked_prefill && n > request_budget {
                        break;
                    }
                    n = n.min(if lone { prefill_budget } else { request_budget });
                    // Guard (C): a prefill waits for a step of its own once
                    // a decode-ready request joined this one.
                    if lone && self.req(slot).is_prefill() && admitted_decodes > 0 {
                        break;
                    }
                    if !self.allocate(slot, 0, 0, n, 0) {
                        break;
                    }
                    self.pop_waiting();
                    self.running.push(slot);
                    let (id, origin) = {
                        let req = self.req_mut(slot);
                        req.is_running = true;
                        let origin = if std::mem::take(&mut req.preempted) {
                            Origin::Resumed
                        } else {
                            Origin::New
                        };
                        (req.id, origin)
                    };
                    self.scheduled.push(Scheduled {
                        slot,
                        id,
                        tokens: n,
                        drafts: pad,
                        context: computed,
                        samples: false,
                        origin,
                    });
                    // A lone prefill's chunk may exceed what the decodes
                    // left; they leave the step with it (guard (D)).
                    budget = budget.saturating_sub(n);
                    input_budget = input_budget.saturating_sub(n + draft_slots);
                    if lone && self.req(slot).is_prefill() {
                        // Guard (D): the prefill runs alone.
                        self.take_step_from_decodes();
                        break;
                    }
                    admitted_decodes += 1;
                    continue;
                }
                let (hit_units, hit_blocks) = self.prefix_hit(slot);
                let (hit_units, hit_blocks) = self.hybrid_hit(slot, hit_units, hit_blocks);
                let hit_tokens = hit_units * self.config.prefix_unit.max(1);
                // Bounded replay: a hit within the window is dropped, a
                // longer one recomputes its last window (`replay` tokens).
                let (hit_tokens, replay) = match self.config.window {
                    Some(w) if w.cached => (self.window_cached_hit(slot, hit_tokens), 0),
                    Some(w) => crate::window::replayed_hit(&w, hit_tokens),
                    None => (hit_tokens, 0),
                };
                let (hit_units, hit_blocks) = if self.config.window.is_some_and(|w| w.cached) {
                    let b = hit_tokens / self.config.block_size.max(1);
                    (b, b)
                } else {
                    (hit_units, hit_blocks)
                };
                let (hit_units, hit_blocks) = if hit_tokens == 0 {
                    (0, 0)
                } else {
                    (hit_units, hit_blocks)
                };
                let (lm_external, lm_hit, lm_load) = self.lmcache_lookup(slot, hit_tokens);
                let external = self.offload_hit(slot, hit_units);
                self.offload_lookup_touch(slot);
                let Some(external) = external else {
                    // The connector cannot tell yet (`ext_tokens is None`):
                    // the request is passed over this step
                    // (`skip_request` in `Scheduler.schedule`).
                    self.pop_waiting();
                    self.skipped.push(slot);
                    continue;
                };
                if external > 0 {
                    // The connector's hit beyond the local one loads
                    // asynchronously: blocks for the whole prompt now, no
                    // budget, and the request waits (WAITING_FOR_REMOTE_KVS).
                    let Some(id) = self.park_for_remote(slot, hit_blocks, hit_tokens, external)
                    else {
                        break;
                    };
                    self.offload_start_load(slot, hit_units, external);
                    if first {
                        self.prefix_queries_tokens += tokens as u64;
                        self.prefix_hits_tokens += hit_tokens as u64;
                        self.external_hits_tokens += external as u64;
                        self.events.push(EngineEvent::Admitted {
                            id,
                            cached_tokens: hit_tokens,
                        });
                    }
                    self.events.push(EngineEvent::LoadsKv {
                        id,
                        cached_tokens: hit_tokens,
                        tokens: external,
                    });
                    continue;
                }
                // LMCache's hit beyond the local one is loaded within the
                // step (`load_kv_async` false): it counts as computed, takes
                // blocks but no budget (`num_external_computed_tokens` in
                // `Scheduler.schedule`, `vllm/v1/core/sched/scheduler.py`).
                let base = hit_tokens + lm_external - replay;
                let remaining = tokens - base;
                let mut n = remaining;
                let Some(pad) = self.pad_drafts(
                    n,
                    base,
                    request_budget,
                    scheduled_running,
                    prefill_scheduled,
                ) else {
                    break;
                };
                n += pad;
                if long_cap > 0 {
                    n = n.min(long_cap);
                }
                if !self.config.enable_chunked_prefill && n > request_budget {
                    break;
                }
                // vllm-rbln caps a prefill's chunk by the whole budget: the
                // decodes that spent part of it leave the step if it runs.
                n = n.min(if lone { prefill_budget } else { request_budget });
                // Guard (C), on the request's computed tokens before its
                // hit (`is_prefill(request)` ahead of the allocation).
                if lone && self.req(slot).is_prefill() && admitted_decodes > 0 {
                    break;
                }
                // A new request whose chunk cannot end where a state is
                // cached ends the waiting loop.
                n = self.mamba_split(slot, base, n);
                if n == 0 {
                    break;
                }
                let must_fit = if self.config.reserve_full_prompt {
                    remaining
                } else {
                    n
                };
                // The replayed tokens are scheduled but lie inside the hit,
                // whose blocks are shared: the allocation counts the tokens
                // past the hit (`num_tokens_past_hit`).
                if !self.allocate(
                    slot,
                    hit_blocks,
                    hit_tokens,
                    lm_external + n.saturating_sub(replay),
                    lm_external + must_fit.saturating_sub(replay),
                ) {
                    break;
                }
                self.pop_waiting();
                self.running.push(slot);
                let (id, origin) = {
                    let req = self.req_mut(slot);
                    req.computed = base;
                    req.admitted_once = true;
                    req.is_running = true;
                    let origin = if std::mem::take(&mut req.preempted) {
                        Origin::Resumed
                    } else {
                        Origin::New
                    };
                    // A new tracker, saved up to the LMCache hit
                    // (`RequestTracker.from_new_request`).
                    req.lm = crate::lmcache::Tracker {
                        saved: lm_hit,
                        decode: false,
                        new: true,
                    };
                    // "Only track requests that will still be prefilling
                    // after this chunk."
                    if base + n < req.tokens() {
                        req.inflight_prefill = true;
                    }
                    (req.id, origin)
                };
                self.step_connector_io.0 += lm_load;
                if first {
                    self.external_hits_tokens += lm_external as u64;
                    self.prefix_queries_tokens += tokens as u64;
                    self.prefix_hits_tokens += hit_tokens as u64;
                    // The request's own count skips the replayed window
                    // (`num_cached_tokens` is set from the rewound computed
                    // tokens); vLLM's prefix-cache counter above counts the
                    // whole hit.
                    self.events.push(EngineEvent::Admitted {
                        id,
                        cached_tokens: hit_tokens - replay,
                    });
                    if lm_external > 0 {
                        self.events.push(EngineEvent::LmCacheHit {
                            id,
                            tokens: lm_external,
                        });
                    }
                }
                self.scheduled.push(Scheduled {
                    slot,
                    id,
                    tokens: n,
                    drafts: pad,
                    context: base,
                    samples: false,
                    origin,
                });
                budget = budget.saturating_sub(n);
                input_budget = input_budget.saturating_sub(n + draft_slots);
                if lone {
                    // With its hit counted (`computed` is `base` now), a
                    // request with one token left joins the decode batch;
                    // any other runs alone (guard (D)).
                    if self.req(slot).is_prefill() {
                        self.take_step_from_decodes();
                        break;
                    }
                    admitted_decodes += 1;
                }
            }
            // The passed-over requests go back to the head, in order
            // (`self.waiting.prepend_requests(step_skipped_waiting)`).
            while let Some(slot) = self.skipped.pop() {
                self.push_waiting(slot, true);
            }
        }
        if self.config.delay_cache_blocks {
            self.cache_step_blocks();
        }
        // The connector's `build_connector_meta` ends the step's schedule
        // (`on_schedule_end`): the secondary tiers' completions, promotions
        // and lookups.
        if let (Some(tiering), Some(primary)) = (&mut self.tiering, &mut self.offload) {
            tiering.schedule_end(primary, self.pool.kv_events.as_mut());
        }
        self.update_after_schedule();
        if self.scheduled.is_empty() {
            return None;
        }
        Some(self.describe_batch())
    }

    /// vllm-rbln's block caching once the step's schedule is final: every
    /// request scheduled, running ones first, then new, then resumed, caches
    /// its blocks up to `min(num_computed_tokens + scheduled tokens,
    /// num_tokens)` (`RBLNScheduler.schedule`,
    /// `vllm_rbln/v1/core/rbln_scheduler.py`, after "NOTE(RBLN): All
    /// allocate_slots calls above used delay_cache_blocks=True"). The
    /// decodes a prefill took the step from (guard (D)) are no longer
    /// scheduled and cache nothing; a request's lookup earlier in the step
    /// saw none of these blocks.
    fn cache_step_blocks(&mut self) {
        for origin in [Origin::Running, Origin::New, Origin::Resumed] {
            for i in 0..self.scheduled.len() {
                let s = self.scheduled[i];
                if s.origin != origin {
                    continue;
                }
                let req = self.req(s.slot);
                if req.hasher.hashes.len() as u32 > req.cached_units {
                    let upto = (req.computed + s.tokens).min(req.tokens());
                    self.cache_units(s.slot, upto);
                }
            }
        }
    }

    /// Guard (D) of vllm-rbln's step phases: the prefill just admitted, the
    /// last entry, runs alone; the decodes scheduled before it leave the
    /// step, keeping the blocks they were given (the plugin's
    /// `_pending_runner_block_deltas`), and the decode batch is empty
    /// (`decode_budget.reset()`).
    fn take_step_from_decodes(&mut self) {
        let last = self.scheduled.len() - 1;
        self.scheduled.drain(..last);
    }

    /// `pad_spec_decode` (`Scheduler.schedule`,
    /// `vllm/v1/core/sched/scheduler.py`): a waiting request with one token
    /// to compute is scheduled with `num_spec_tokens` placeholder drafts
    /// besides, keeping the step a uniform decode for the full CUDA graph,
    /// when the drafter has a fixed draft count, no running partial prefill
    /// was scheduled, and the release's condition holds (some running
    /// request scheduled; in 0.31.0, or tokens already computed). Returns
    /// the drafts to add (0 for none), or `None` when the padded request
    /// does not fit the budget ("Prefer to not schedule than schedule
    /// un-padded": the waiting loop ends).
    fn pad_drafts(
        &self,
        n: u32,
        computed: u32,
        budget: u32,
        scheduled_running: bool,
        prefill_scheduled: bool,
    ) -> Option<u32> {
        let Some(spec) = &self.config.spec else {
            return Some(0);
        };
        let condition = match self.config.pad_spec_decode {
            PadSpecDecode::Never => false,
            PadSpecDecode::WithRunning => scheduled_running,
            PadSpecDecode::WithRunningOrComputed => scheduled_running || computed > 0,
        };
        if n != 1 || prefill_scheduled || !condition || spec.num_spec_tokens == 0 {
            return Some(0);
        }
        let padded = 1 + spec.num_spec_tokens;
        // Only when the sampled token still fits.
        if computed + padded + 1 > self.config.max_model_len {
            return Some(0);
        }
        if padded > budget {
            return None;
        }
        Some(spec.num_spec_tokens)
    }

    /// `Scheduler._update_after_schedule` and, under async scheduling,
    /// `AsyncScheduler._update_after_schedule`: each scheduled request's
    /// computed tokens advance by what it was scheduled (drafts included;
    /// rejected ones roll back when the output comes), it samples unless it
    /// is a partial prefill, and under async scheduling a sampling request
    /// gets placeholders for its sampled token and drafts, and placeholder
    /// drafts for the next step. The step is queued for completion.
    fn update_after_schedule(&mut self) {
        let num_spec = self.config.spec.as_ref().map_or(0, |s| s.num_spec_tokens);
        let async_scheduling = self.config.async_scheduling;
        for s in self.scheduled.iter_mut() {
            let req = self.reqs[s.slot as usize].as_mut().expect("live slot");
            req.computed += s.tokens;
            req.in_flight += s.tokens;
            s.samples = req.computed >= req.tokens() + req.placeholders;
            req.prefill_chunk = !s.samples;
            if s.samples {
                req.inflight_prefill = false;
            }
            // The drafts a request held are used up by this step (the
            // running loop's `request.spec_token_ids = []`).
            req.drafts = 0;
            if async_scheduling && s.samples {
                req.placeholders += 1 + s.drafts;
                req.drafts = num_spec;
            }
        }
        if self.lmcache.is_some() {
            self.lmcache_stores();
        }
        self.finished_unreported = false;
        if self.config.defer_block_free && !self.scheduled.is_empty() {
            self.sched_step_seq += 1;
            for s in &self.scheduled {
                self.reqs[s.slot as usize]
                    .as_mut()
                    .expect("live slot")
                    .last_sched_seq = self.sched_step_seq;
            }
        }
        if async_scheduling || !self.scheduled.is_empty() {
            let mut step = self.spare.pop().unwrap_or_default();
            step.clear();
            step.extend_from_slice(&self.scheduled);
            self.in_flight.push_back(step);
            if self.lmcache.is_some() {
                let chunks = std::mem::take(&mut self.lm_step_chunks);
                self.lm_pending.push_back(chunks);
            }
        }
        self.lm_step_chunks.clear();
    }

    /// LMCache's lookup for a waiting request with `local` tokens of the
    /// engine's own prefix hit (`get_num_new_matched_tokens` in
    /// `vllm_v1_adapter.py`; see [`crate::lmcache`]): the tokens to load
    /// beyond the local hit, LMCache's whole hit, and the tokens the load
    /// retrieves (from the chunk holding the local boundary on).
    fn lmcache_lookup(&mut self, slot: u32, local: u32) -> (u32, u32, u32) {
        let Some(tier) = &mut self.lmcache else {
            return (0, 0, 0);
        };
        let unit = self.config.prefix_unit.max(1);
        let chunk = tier.config.chunk_tokens.max(unit);
        let per_chunk = (chunk / unit).max(1);
        let req = self.reqs[slot as usize].as_ref().expect("live slot");
        let chunks = (req.prompt_tokens / chunk).min(req.hasher.hashes.len() as u32 / per_chunk);
        self.lm_keys.clear();
        self.lm_keys
            .extend((0..chunks).map(|c| req.hasher.hashes[((c + 1) * per_chunk - 1) as usize]));
        let hit = tier.lookup(&self.lm_keys) * chunk;
        // "In full-prompt-hit case, we need to recompute the last token."
        let need = i64::from(hit) - i64::from(local) - i64::from(hit == req.tokens());
        if need <= 0 {
            return (0, hit, 0);
        }
        (need as u32, hit, hit - local / chunk * chunk)
    }

    /// The chunks this step stores in LMCache (`from_request_tracker` for
    /// each scheduled request, stored by `wait_for_save` after the forward
    /// pass): queued for the step's completion and counted for its cost
    /// unless LMCache holds them already or the step stores them twice.
    fn lmcache_stores(&mut self) {
        let Some(tier) = &self.lmcache else {
            return;
        };
        let unit = self.config.prefix_unit.max(1);
        let chunk = tier.config.chunk_tokens.max(unit);
        let per_chunk = (chunk / unit).max(1);
        for s in &self.scheduled {
            let req = self.reqs[s.slot as usize].as_mut().expect("live slot");
            let input = req.computed.min(req.tokens());
            let (from, to) = req.lm.save(input, s.tokens, chunk);
            for c in from..to {
                let Some(&key) = req.hasher.hashes.get(((c + 1) * per_chunk - 1) as usize) else {
                    break;
                };
                if !tier.contains(key) && !self.lm_step_chunks.contains(&key) {
                    self.step_connector_io.1 += chunk;
                    self.lm_step_chunks.push(key);
                }
            }
        }
    }

    /// Tokens LMCache copies synchronously in the step last scheduled:
    /// loaded before its forward pass and stored after it. The caller
    /// prices them against the tier's bandwidth.
    pub fn connector_io(&self) -> (u32, u32) {
        self.step_connector_io
    }

    /// The batch the cost model prices, with CUDA-graph padding and the DBO
    /// decision.
    fn describe_batch(&self) -> Batch {
        let mut batch = Batch::default();
        let decode_len = 1 + self.config.spec.as_ref().map_or(0, |s| s.num_spec_tokens);
        let mut uniform = true;
        for s in &self.scheduled {
            let req = self.req(s.slot);
            let is_decode = s.context >= req.prompt_tokens;
            batch.num_reqs += 1;
            // Uniform decode is a matter of shape alone: every request
            // schedules 1 + num_spec_tokens tokens (`_is_uniform_decode` in
            // `vllm/v1/worker/gpu_model_runner.py`), so a P/D request's one
            // remaining prompt token counts as a decode for graph dispatch.
            uniform &= s.tokens == decode_len;
            // Drafts count wherever they are: a request padded with
            // placeholder drafts on admission (`pad_spec_decode`) may still
            // have its last prompt token to compute.
            batch.spec_tokens += s.drafts;
            if is_decode {
                batch.decode_reqs += 1;
                batch.decode_tokens += s.tokens;
            } else {
                batch.prefill_reqs += 1;
                batch.prefill_tokens += s.tokens;
            }
            let (q, c) = (s.tokens as u64, s.context as u64);
            batch.attn_context_tokens += c + q;
            batch.attn_pairs += q * c + q * (q + 1) / 2;
        }
        let tokens = batch.tokens();
        let (graph, padded) = self.config.graphs.dispatch(tokens, uniform);
        batch.graph = graph;
        batch.padded_tokens = padded;
        batch.dbo = self.config.dbo.splits(tokens, padded, uniform);
        batch
    }

    /// Applies the step's outcome (`update_from_output`): advances computed
    /// tokens, samples tokens for requests whose prompt is done, draws draft
    /// acceptance, finishes requests and frees them. Blocks are cached at
    /// schedule time, in [`Engine::allocate`], not here.
    pub fn complete_step(&mut self, acceptance: &mut Stream) {
        self.complete_step_with(Acceptance::Draw(acceptance));
    }

    /// [`Engine::complete_step`] with the accepted drafts given rather than
    /// drawn: `accepted(id, drafts)` is asked once for each request that
    /// verifies `drafts > 0` draft tokens this step and returns how many
    /// were accepted (capped at `drafts`). This is how a replay of vLLM's
    /// own decisions forces the acceptance vLLM was fed, step by step
    /// (`pdsim engine replay`, as `tools/vllm-oracle` builds the
    /// `ModelRunnerOutput` whose sampled tokens `update_from_output` counts).
    pub fn complete_step_forced(&mut self, accepted: &mut dyn FnMut(RequestId, u32) -> u32) {
        self.complete_step_with(Acceptance::Forced(accepted));
    }

    fn complete_step_with(&mut self, mut acceptance: Acceptance<'_>) {
        let Some(scheduled) = self.in_flight.pop_front() else {
            return;
        };
        // The step's LMCache stores are done (`wait_for_save`).
        if let Some(tier) = &mut self.lmcache
            && let Some(mut chunks) = self.lm_pending.pop_front()
        {
            for key in chunks.drain(..) {
                tier.put(key);
            }
            self.lm_step_chunks = chunks;
        }
        if scheduled.is_empty() {
            self.spare.push(scheduled);
            return;
        }
        self.steps += 1;
        // Every KV write of this step and the ones before it is done.
        if self.config.defer_block_free {
            self.processed_step_seq += 1;
            self.drain_deferred_frees();
        }
        let async_scheduling = self.config.async_scheduling;
        let window_hashed = self.config.window.is_some_and(|w| w.cached);
        // Borrowed out and put back, so a step allocates nothing.
        let spec = self.config.spec.take();
        for s in &scheduled {
            let Some(req) = self.reqs[s.slot as usize].as_mut() else {
                continue;
            };
            // A request that finished (or is held for the decode side)
            // while this step ran takes nothing from it: `request is None
            // or request.is_finished()` in `update_from_output`.
            if req.id != s.id || req.holding {
                continue;
            }
            req.in_flight -= s.tokens;
            let stale = req.stale > 0;
            if stale {
                req.stale -= s.tokens;
            }
            // Drop-mode stale output is discarded entirely.
            if !s.samples || (stale && req.drop_stale) {
                continue;
            }
            let mut accepted = 0;
            if s.drafts > 0 {
                match &mut acceptance {
                    Acceptance::Draw(stream) => {
                        for &conditional in self.draft_accept.iter().take(s.drafts as usize) {
                            if stream.bernoulli(conditional) {
                                accepted += 1;
                            } else {
                                break;
                            }
                        }
                    }
                    Acceptance::Forced(given) => {
                        accepted = given(req.id, s.drafts).min(s.drafts);
                    }
                }
                // Rejected drafts roll back the computed tokens and, under
                // async scheduling, the placeholders; a stale step's do not
                // (the preemption reset them).
                if !stale {
                    let rejected = s.drafts - accepted;
                    if req.computed > 0 {
                        req.computed -= rejected;
                    }
                    req.placeholders = req.placeholders.saturating_sub(rejected);
                }
            }
            // `_update_request_with_output`: tokens are appended until the
            // request stops (`check_stop`, `vllm/v1/core/sched/utils.py`).
            let emit = (1 + accepted).min(req.max_output - req.output);
            if async_scheduling && !stale {
                req.placeholders = req.placeholders.saturating_sub(emit);
            }
            let start = req.output;
            req.hasher.feed(req.output_segment, start, emit);
            // The window groups' hasher exists exactly when they are
            // prefix-cached ([`Engine::add_request`]); asking the
            // configuration first spares every other engine a load from a
            // cold cache line of the request per token.
            if window_hashed && let Some(h) = &mut req.window.hasher {
                h.feed(req.output_segment, start, emit);
            }
            req.output += emit;
            if emit > 0 {
                self.preemptions_since_output = 0;
            }
            if !async_scheduling {
                // The drafter proposes after every sampling step
                // (`EngineCore.post_step` → `update_draft_token_ids`).
                req.drafts = spec.as_ref().map_or(0, |sp| sp.num_spec_tokens);
            }
            let (id, output, running) = (req.id, req.output, req.is_running);
            let finished = req.output >= req.max_output;
            if async_scheduling && running {
                // `AsyncScheduler._update_request_with_output` caches the
                // blocks its delivered tokens filled, up to the computed
                // tokens without the placeholders still out.
                let upto = req.computed - req.placeholders;
                self.cache_units(s.slot, upto);
            }
            // Without async scheduling `update_from_output` caches nothing:
            // the blocks this step filled were cached when it was scheduled,
            // and those its sampled tokens fill are cached when the next
            // step is ([`Engine::cache_scheduled`]).
            if emit > 0 {
                self.events.push(EngineEvent::Emitted { id, tokens: emit });
            }
            if finished {
                self.finished_unreported = true;
                if running {
                    self.finished_buf.push(s.slot);
                } else {
                    // Stale output finished a preempted request: it leaves
                    // the waiting queue (`stopped_preempted_reqs`).
                    self.remove_waiting(s.slot);
                }
                self.offload_finish(s.slot);
                let req = self.req_mut(s.slot);
                req.is_running = false;
                let produce = req.kv == KvTransfer::Produce;
                if produce {
                    // NixlConnector's request_finished: free later, when the
                    // decode side has read the blocks.
                    req.holding = true;
                    let blocks = req.blocks.len() as u32;
                    self.held += 1;
                    self.events.push(EngineEvent::Held { id, blocks });
                } else {
                    self.free_blocks(s.slot);
                    self.reqs[s.slot as usize] = None;
                    self.slot_of.remove(&id);
                    self.free_slots.push(s.slot);
                    self.events.push(EngineEvent::Finished {
                        id,
                        output_tokens: output,
                    });
                }
            }
        }
        // One pass over the running list for all of the step's finished
        // requests, order kept (vLLM filters `self.running` once per step
        // in `update_from_output`, `vllm/v1/core/sched/scheduler.py`).
        if !self.finished_buf.is_empty() {
            self.finished_buf.sort_unstable();
            let done = &self.finished_buf;
            self.running.retain(|r| done.binary_search(r).is_err());
            self.finished_buf.clear();
        }
        self.spare.push(scheduled);
        self.config.spec = spec;
    }

    /// Takes a request out of the waiting queue wherever it is.
    fn remove_waiting(&mut self, slot: u32) {
        match &mut self.waiting {
            WaitQueue::Fcfs(q) => q.retain(|s| *s != slot),
            WaitQueue::Priority(h) => h.retain(|Reverse((_, _, _, s))| *s != slot),
        }
    }

    /// Queues a request whose outside KV arrived (or failed) for admission.
    /// vLLM keeps a parked request in its queue of KV-holding requests from
    /// the step it is parked (`kv_holding_waiting` in 0.31.0,
    /// `skipped_waiting` in 0.29.0; `vllm/v1/core/sched/scheduler.py`),
    /// skipping it while its KV is in flight and re-queueing the skipped in
    /// order. So the ready ones are admitted in the order they were parked,
    /// not the order their KV arrived, under fcfs; under priority that
    /// queue is a heap on (priority, arrival, id) like the waiting one.
    fn push_holding(&mut self, slot: u32) {
        let key = |r: &Req| match self.config.policy {
            Policy::Fcfs => (0, SimTime(0), RequestId(0), r.park_seq),
            Policy::Priority => (r.priority, r.arrival, r.id, r.park_seq),
        };
        let new = key(self.req(slot));
        let at = self
            .holding
            .iter()
            .position(|s| key(self.req(*s)) > new)
            .unwrap_or(self.holding.len());
        self.holding.insert(at, slot);
    }

    /// Prefill side: the decode side has read the blocks (or the lease ran
    /// out), so the held blocks go back to the free queue, hashes kept, and
    /// the request ends here: NixlConnector's `request_finished` delays the
    /// free until then
    /// (`vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py`,
    /// `nixl/scheduler.py` in later releases). Returns false if `id` holds
    /// nothing, so a second release is a no-op: blocks are freed exactly
    /// once.
    pub fn release(&mut self, id: RequestId) -> bool {
        let Some(&slot) = self.slot_of.get(&id) else {
            return false;
        };
        if !self.req(slot).holding {
            return false;
        }
        let output = self.req(slot).output;
        self.held -= 1;
        self.free_blocks(slot);
        self.reqs[slot as usize] = None;
        self.slot_of.remove(&id);
        self.free_slots.push(slot);
        self.events.push(EngineEvent::Finished {
            id,
            output_tokens: output,
        });
        true
    }

    /// The client gave up: the request ends here, as vLLM's
    /// `EngineCore.abort_requests` ends it with
    /// `Scheduler.finish_requests(ids, RequestStatus.FINISHED_ABORTED)`
    /// (`vllm/v1/engine/core.py`, `vllm/v1/core/sched/scheduler.py` of
    /// 0.31.0): taken out of `running` (order kept) or the waiting queues
    /// (`waiting`, `kv_holding_waiting`), then `_free_request` frees its
    /// blocks through `KVCacheManager.free`, tail first, their hashes kept,
    /// so its prompt stays a prefix-cache hit until the blocks are evicted.
    /// No event is queued: vLLM sends no output for an aborted request.
    ///
    /// The caller picks the moment. vLLM takes aborts between steps, and an
    /// abort that arrives while a step runs after that step's model output
    /// and before `update_from_output` (`_process_aborts_queue` in
    /// `EngineCore.step`), so a request of the step being completed is
    /// dropped from it here and its sampled tokens are never counted
    /// (`update_from_output` skips a finished request: "This can happen if
    /// the request is aborted while the model is executing it").
    ///
    /// A request waiting for KV from outside (`WAITING_FOR_REMOTE_KVS`: a
    /// P/D read or an offload load in flight) leaves the queues at once but
    /// keeps its blocks until the transfer ends (`delay_free_blocks` in
    /// `finish_requests`; `_update_from_kv_xfer_finished` then frees them),
    /// since the transfer still writes into them. A finished request is
    /// left alone (`request.is_finished()` is skipped), so a P/D producer
    /// holding its blocks for the decode side keeps them: NixlConnector's
    /// protocol, not the client, releases those ([`Engine::release`]).
    pub fn abort(&mut self, id: RequestId) -> Abort {
        let Some(&slot) = self.slot_of.get(&id) else {
            return Abort::Unknown;
        };
        {
            let req = self.req(slot);
            if req.holding || req.aborted {
                return Abort::Finished;
            }
        }
        // `self.scheduled` is not touched: by now it only records the last
        // schedule (for tests and the checker), and the queued copy of
        // each step in flight skips a slot whose request is gone by id.
        // `finish_requests` adds it to `finished_req_ids`, so the engine
        // core schedules once more to report it. Steps in flight that
        // scheduled it find its slot gone (or taken) and skip it.
        self.finished_unreported = true;
        if let Some(index) = self.running.iter().position(|s| *s == slot) {
            self.running.remove(index);
        } else if let Some(index) = self.holding.iter().position(|s| *s == slot) {
            self.holding.remove(index);
        } else {
            let queued = match &mut self.waiting {
                WaitQueue::Fcfs(q) => match q.iter().position(|s| *s == slot) {
                    Some(index) => {
                        q.remove(index);
                        true
                    }
                    None => false,
                },
                WaitQueue::Priority(h) => {
                    let before = h.len();
                    h.retain(|Reverse((_, _, _, s))| *s != slot);
                    h.len() < before
                }
            };
            if !queued {
                // In no queue: parked while its KV is in flight.
                self.remote_waiting -= 1;
                self.req_mut(slot).aborted = true;
                return Abort::FreedAfterTransfer;
            }
        }
        self.offload_finish(slot);
        self.free_blocks(slot);
        self.reqs[slot as usize] = None;
        self.slot_of.remove(&id);
        self.free_slots.push(slot);
        Abort::Freed
    }

    /// Frees a request aborted while its KV was in flight, now that the
    /// transfer has ended; false if `id` is no such request.
    fn free_aborted(&mut self, id: RequestId) -> bool {
        let Some(&slot) = self.slot_of.get(&id) else {
            return false;
        };
        if !self.req(slot).aborted {
            return false;
        }
        self.offload_finish(slot);
        self.free_blocks(slot);
        self.reqs[slot as usize] = None;
        self.slot_of.remove(&id);
        self.free_slots.push(slot);
        true
    }

    /// Whether the engine holds the request in any state (queued, running,
    /// holding blocks for a decode side, or aborted with its KV in flight).
    pub fn holds(&self, id: RequestId) -> bool {
        self.slot_of.contains_key(&id)
    }

    /// Decode side: the missing blocks arrived. The request is promoted
    /// (`finished_recving`): its blocks enter the prefix cache, it continues
    /// from prompt − 1 and goes back to the head of the waiting queue.
    pub fn kv_arrived(&mut self, id: RequestId) {
        if self.free_aborted(id) {
            return;
        }
        let Some(&slot) = self.slot_of.get(&id) else {
            return;
        };
        {
            let req = self.req_mut(slot);
            if req.kv != KvTransfer::Consume || req.remote_done {
                return;
            }
            req.remote_done = true;
        }
        self.remote_waiting -= 1;
        // `_update_waiting_for_remote_kv` (`vllm/v1/core/sched/scheduler.py`)
        // caches `num_computed_tokens` (the whole prompt, every token of it
        // having arrived) and only then steps back to `num_tokens - 1` so
        // that one token is computed to sample from. It runs when the
        // waiting loop of a later `schedule()` reaches the request, after
        // the running requests cached their blocks, so the caching waits
        // for that too (`cache_pending`, done in `schedule`).
        let req = self.req_mut(slot);
        let tokens = req.tokens();
        req.cache_pending = tokens;
        req.computed = tokens - 1;
        self.push_holding(slot);
    }

    /// The offload tier's blocks arrived: the request continues after them
    /// and goes to the holding queue (the OffloadingConnector's finished
    /// loads, `update_connector_output` in
    /// `vllm/distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py`,
    /// as `_update_waiting_for_remote_kv` in `vllm/v1/core/sched/scheduler.py`
    /// takes them).
    pub fn kv_loaded(&mut self, id: RequestId) {
        if let Some(&slot) = self.slot_of.get(&id)
            && let Some(tier) = &mut self.offload
            && let Some(req) = self.reqs[slot as usize].as_mut()
        {
            // The load job's chunks are no longer being loaded
            // (`_chunks_being_loaded.difference_update(job_status.keys)`).
            for key in req.off.loading() {
                self.being_loaded.remove(key);
            }
            tier.complete_load(&mut req.off);
        }
        if self.free_aborted(id) {
            return;
        }
        let Some(&slot) = self.slot_of.get(&id) else {
            return;
        };
        {
            let req = self.req_mut(slot);
            if req.loading == 0 {
                return;
            }
            req.computed = req.local_hit + req.loading;
            req.loading = 0;
        }
        self.remote_waiting -= 1;
        // `_update_waiting_for_remote_kv` caches `num_computed_tokens` when
        // the waiting loop reaches the request (see `kv_arrived`).
        let req = self.req_mut(slot);
        req.cache_pending = req.computed;
        self.push_holding(slot);
    }

    /// Registers the full units (blocks, in vLLM) among a request's first
    /// `upto` tokens in the prefix cache (`BlockPool.cache_full_blocks` in
    /// `vllm/v1/core/block_pool.py`, through
    /// `SingleTypeKVCacheManager.cache_blocks`, which caches
    /// `num_tokens // block_size` blocks), queues their `BlockStored`
    /// event and stores them in the offload tier.
    #[inline(always)]
    fn cache_units(&mut self, slot: u32, upto: u32) {
        // Nothing to do when every hashed unit is cached already and the
        // offload tier has been offered every full chunk: the units to
        // cache and the chunks to offer are bounded by the hashed units.
        // Under async scheduling this is asked after every sampled token,
        // and almost always holds.
        let per_block = self.pool.units_per_block();
        let req = self.reqs[slot as usize].as_ref().expect("live slot");
        let hashed = req.hasher.hashes.len() as u32;
        if hashed <= req.cached_units
            && (self.offload.is_none()
                || !self.config.enable_prefix_caching
                || hashed / per_block <= req.off.next_chunk)
        {
            return;
        }
        self.cache_new_units(slot, upto);
    }

    /// [`Engine::cache_units`] when there may be units to cache or chunks
    /// to offer. Kept out of line so that the check above inlines small.
    #[inline(never)]
    fn cache_new_units(&mut self, slot: u32, upto: u32) {
        let unit = self.config.prefix_unit.max(1);
        let per_block = self.pool.units_per_block();
        let req = self.reqs[slot as usize].as_mut().expect("live slot");
        let full = (upto.min(req.tokens()) / unit)
            .min(req.hasher.hashes.len() as u32)
            .min(req.blocks.len() as u32 * per_block);
        if full > req.cached_units {
            if self.config.enable_prefix_caching {
                if let Some(log) = &mut self.pool.kv_events {
                    stored_event(log, req, req.cached_units, full, unit);
                }
                if per_block == 1 {
                    // One unit a block: unit `u` is block `u`, and block
                    // `u − 1`, the request's own, caches the unit before.
                    for u in req.cached_units as usize..full as usize {
                        let parent = u.checked_sub(1).map(|p| req.blocks[p]);
                        self.pool
                            .cache_next(req.blocks[u], req.hasher.hashes[u], parent);
                    }
                } else {
                    for u in req.cached_units..full {
                        let block = req.blocks[(u / per_block) as usize];
                        self.pool
                            .cache_unit(block, u % per_block, req.hasher.hashes[u as usize]);
                    }
                }
            }
            req.cached_units = full;
        }
        // The connector offers the request's full chunks from the first
        // one it has not offered yet (`_build_store_jobs`,
        // `next_stored_chunk_idx`), those the GPU had cached already
        // included: held ones count as reused, the rest are stored.
        if self.config.enable_prefix_caching
            && let Some(tier) = &mut self.offload
        {
            let chunks = full / per_block;
            if chunks > req.off.next_chunk {
                let hashes = &req.hasher.hashes;
                let offer = &mut self.offer_buf;
                offer.clear();
                offer.extend(
                    (req.off.next_chunk..chunks).map(|c| (c, offload_key(hashes, per_block, c))),
                );
                let all = offload_keys(hashes, per_block);
                if let Some(tiering) = &mut self.tiering {
                    // `prepare_store` processes the tiers' completions
                    // first, so a finished cascade's chunks are evictable.
                    tiering.poll(tier, self.pool.kv_events.as_mut());
                }
                if tier
                    .store_keys(offer, &mut req.off, all, self.pool.kv_events.as_mut())
                    .is_some()
                {
                    req.off.next_chunk = chunks;
                    if let Some(tiering) = &mut self.tiering {
                        tier.cascade_inserted(tiering);
                    }
                }
            }
        }
    }

    /// A waiting request looked its prompt up in the offload tier
    /// (`get_num_new_matched_tokens`): 0.29.0 touches its chunks.
    fn offload_lookup_touch(&mut self, slot: u32) {
        let per_block = self.pool.units_per_block();
        if let Some(tier) = &mut self.offload
            && tier.release() == crate::offload::Release::V0_29_0
        {
            let req = self.reqs[slot as usize].as_ref().expect("live slot");
            tier.on_lookup(offload_keys(&req.hasher.hashes, per_block));
        }
    }

    /// The request loads `tokens` from the offload tier after its local
    /// hit of `hit_units` units (`update_state_after_alloc` →
    /// `prepare_load`): the chunks stay in the tier until the load ends,
    /// and the request's stores start after them (`next_stored_chunk_idx`
    /// set past the hit, `OffloadPolicy.CHUNK_LEVEL`).
    fn offload_start_load(&mut self, slot: u32, hit_units: u32, tokens: u32) {
        let per_block = self.pool.units_per_block();
        let unit = self.config.prefix_unit.max(1);
        let Some(tier) = &mut self.offload else {
            return;
        };
        let req = self.reqs[slot as usize].as_mut().expect("live slot");
        let first = hit_units / per_block;
        let end = (hit_units + tokens / unit) / per_block;
        let keys: Vec<u64> = (first..end)
            .map(|c| offload_key(&req.hasher.hashes, per_block, c))
            .collect();
        tier.prepare_load(first, &keys, &mut req.off);
        req.off.next_chunk = end;
        if self.config.enable_prefix_caching {
            self.being_loaded.extend(keys.iter().copied());
        }
    }

    /// The request has ended: the offload tier applies what it observed
    /// (`on_request_finished`).
    fn offload_finish(&mut self, slot: u32) {
        if let Some(tier) = &mut self.offload
            && let Some(req) = self.reqs[slot as usize].as_mut()
        {
            tier.on_request_finished(&mut req.off);
            if let Some(tiering) = &mut self.tiering {
                tiering.request_finished(req.id);
            }
        }
    }

    /// The secondary tiers' jobs and lookups submitted since the caller
    /// last took them, for the event loop to time.
    pub fn take_tier_io(&mut self, into: &mut Vec<crate::tiering::TierIo>) {
        if let Some(tiering) = &mut self.tiering {
            tiering.take_io(into);
        }
    }

    /// A secondary tier's job ended (see [`crate::tiering::Tiering::io_done`]).
    pub fn tier_io_done(&mut self, job: u64) {
        if let Some(tiering) = &mut self.tiering {
            tiering.io_done(job);
        }
    }

    /// A secondary tier answered a lookup batch.
    pub fn tier_lookup_done(&mut self, tier: u8, batch: u64) {
        if let Some(tiering) = &mut self.tiering {
            tiering.lookup_done(tier, batch);
        }
    }

    /// The secondary tiers, with `TieringOffloadingSpec`.
    pub fn tiering(&self) -> Option<&crate::tiering::Tiering> {
        self.tiering.as_ref()
    }

    /// Publishes KV events from now on (vLLM's `--kv-events-config` with
    /// `enable_kv_cache_events`). Off by default, so an engine whose events
    /// nobody reads queues none.
    pub fn enable_kv_events(&mut self) {
        self.pool
            .kv_events
            .get_or_insert_with(KvEventBatch::default);
    }

    /// The events queued since the caller last took them, if published.
    pub fn kv_events_mut(&mut self) -> Option<&mut KvEventBatch> {
        self.pool.kv_events.as_mut()
    }

    /// Blocks stored in and evicted from the offload tier so far.
    pub fn offload_counts(&self) -> (u64, u64) {
        self.offload
            .as_ref()
            .map_or((0, 0), |t| (t.stores, t.evictions))
    }

    /// The offload tier, if the engine has one.
    pub fn offload_tier(&self) -> Option<&crate::offload::OffloadManager> {
        self.offload.as_ref()
    }

    /// Chunks stored in and evicted from LMCache so far.
    pub fn lmcache_counts(&self) -> (u64, u64) {
        self.lmcache
            .as_ref()
            .map_or((0, 0), |t| (t.stores, t.evictions))
    }

    /// Decode side: the transfer failed (the prefill side freed its blocks
    /// first). The request keeps its blocks, cuts back to its local prefix
    /// hit and recomputes the rest here.
    pub fn kv_failed(&mut self, id: RequestId) {
        if self.free_aborted(id) {
            return;
        }
        let Some(&slot) = self.slot_of.get(&id) else {
            return;
        };
        {
            let req = self.req_mut(slot);
            if req.kv != KvTransfer::Consume || req.remote_done {
                return;
            }
            req.remote_done = true;
            req.computed = req.local_hit;
        }
        self.remote_waiting -= 1;
        self.push_holding(slot);
    }

    /// Consuming requests waiting for their KV.
    pub fn num_waiting_for_kv(&self) -> u32 {
        self.remote_waiting
    }

    /// Checks the engine's invariants cheaply, in O(live requests): the
    /// block references requests hold equal the pool's count, the free and
    /// referenced blocks add up to the pool, and running stays within
    /// max_num_seqs. Every 256th call also walks the whole pool
    /// ([`Engine::check_full`]). This is what `pdsim run --check` runs after
    /// every step.
    pub fn check(&mut self) -> Result<(), String> {
        self.checks += 1;
        if self.checks % 256 == 1 {
            return self.check_full();
        }
        self.check_counts()
    }

    fn check_counts(&self) -> Result<(), String> {
        if self.running.len() > self.config.max_num_seqs as usize {
            return Err(format!(
                "{} running > max_num_seqs {}",
                self.running.len(),
                self.config.max_num_seqs
            ));
        }
        // vLLM asserts both after every schedule
        // (`total_num_scheduled_tokens <= self.max_num_scheduled_tokens` and
        // `len(self.running) <= self.max_num_running_reqs`,
        // `vllm/v1/core/sched/scheduler.py`); drafts are part of a request's
        // scheduled tokens there as here. Summed wide, so a budget that
        // wrapped below zero shows as an excess rather than hiding.
        let step_tokens: u64 = self.scheduled.iter().map(|s| u64::from(s.tokens)).sum();
        if step_tokens > u64::from(self.config.max_num_batched_tokens) {
            return Err(format!(
                "the last step scheduled {step_tokens} tokens > max_num_batched_tokens {}",
                self.config.max_num_batched_tokens
            ));
        }
        let held: u64 = self
            .reqs
            .iter()
            .flatten()
            .map(|r| (r.blocks.len() + r.mamba.held() + r.window.held()) as u64)
            .sum::<u64>()
            + self
                .deferred_frees
                .iter()
                .map(|(_, b)| b.len() as u64)
                .sum::<u64>();
        if held != self.pool.referenced() {
            return Err(format!(
                "requests hold {held} block references but the pool counts {}",
                self.pool.referenced()
            ));
        }
        if self.pool.free() > self.pool.usable() {
            return Err(format!(
                "{} free blocks of {} usable",
                self.pool.free(),
                self.pool.usable()
            ));
        }
        Ok(())
    }

    /// Every invariant, walking every block: the free queue holds exactly
    /// the unreferenced blocks, and every reference belongs to a live
    /// request. O(blocks handed out so far); the property tests run it
    /// after every step.
    pub fn check_full(&self) -> Result<(), String> {
        self.pool.check()?;
        self.check_counts()?;
        let referenced = self.pool.recount_references();
        if referenced != self.pool.referenced() {
            return Err(format!(
                "blocks count {referenced} references, the pool's tally {}",
                self.pool.referenced()
            ));
        }
        Ok(())
    }

    /// Preemptions since a step last delivered an output token; at
    /// [`SPIN_PREEMPTIONS`] the engine spins. vLLM's scheduler can spin for
    /// ever without progress: when a few requests together need every
    /// block, they take turns, each admitted again on its own cached prefix
    /// and preempted (or preempting itself) before any of them samples a
    /// token. vLLM 0.29.0 does so under async scheduling with a KV
    /// connector, where a victim's blocks come back only after the step in
    /// flight (`defer_block_free`, `_free_request_blocks` in
    /// `vllm/v1/core/sched/scheduler.py`), so the allocation that preempted
    /// it still fails and preempts the next; the oracle's golden `spin`
    /// cases show vLLM doing it step for step.
    pub fn preemptions_since_output(&self) -> u64 {
        self.preemptions_since_output
    }

    /// The ids of every request the engine holds, in slot order.
    pub fn request_ids(&self) -> impl Iterator<Item = RequestId> + '_ {
        self.reqs.iter().flatten().map(|r| r.id)
    }

    /// Ids of the requests in `running`, in order (for tests).
    pub fn running_ids(&self) -> Vec<RequestId> {
        self.running.iter().map(|s| self.req(*s).id).collect()
    }

    /// Computed tokens of a live request (for tests).
    pub fn computed_tokens(&self, id: RequestId) -> Option<u32> {
        self.slot_of.get(&id).map(|&slot| self.req(slot).computed)
    }

    /// The arrival time a live request is ordered by under the priority
    /// policy (for tests).
    pub fn arrival(&self, id: RequestId) -> Option<SimTime> {
        self.slot_of.get(&id).map(|&slot| self.req(slot).arrival)
    }

    /// Tokens each request got in the last scheduled step (for tests).
    pub fn last_schedule(&self) -> Vec<(RequestId, u32)> {
        self.scheduled.iter().map(|s| (s.id, s.tokens)).collect()
    }

    /// Draft tokens each request got in the last scheduled step, for those
    /// that got any (vLLM's `scheduled_spec_decode_tokens`).
    pub fn last_schedule_drafts(&self) -> Vec<(RequestId, u32)> {
        self.scheduled
            .iter()
            .filter(|s| s.drafts > 0)
            .map(|s| (s.id, s.drafts))
            .collect()
    }
}

/// The checker is checked: each test breaks one invariant by hand (what a
/// bug in the scheduler would leave behind) and requires `check` and
/// `check_full`, which `pdsim run --check` and the property tests rely on,
/// to report it.
#[cfg(test)]
mod checker_tests {
    use super::*;
    use pdsim_core::{Prompt, Segment};

    fn small_config() -> EngineConfig {
        EngineConfig {
            block_size: 16,
            prefix_unit: 16,
            num_blocks: 1 + 64,
            max_num_batched_tokens: 256,
            max_num_seqs: 4,
            long_prefill_token_threshold: 0,
            long_prefill_waiver_when_alone: true,
            policy: Policy::Fcfs,
            enable_prefix_caching: true,
            max_model_len: 4096,
            reserve_full_prompt: true,
            unhashed_blocks_to_front: false,
            lone_prefill_steps: false,
            delay_cache_blocks: false,
            graphs: crate::Graphs {
                mode: crate::CudaGraphMode::None,
                sizes: vec![],
            },
            dbo: crate::Dbo {
                enabled: false,
                decode_threshold: 32,
                prefill_threshold: 512,
            },
            spec: None,
            offload: None,
            offload_secondary: Vec::new(),
            lmcache: None,
            async_scheduling: false,
            enable_chunked_prefill: true,
            defer_block_free: false,
            drop_stale_output: false,
            pad_spec_decode: PadSpecDecode::Never,
            victim_blocks_must_be_freeable: true,
            kv_holding_first: true,
            async_load_reserve: AsyncLoadReserve::None,
            mamba: None,
            window: None,
        }
    }

    fn engine_with_one_running() -> Engine {
        let mut engine = Engine::new(small_config());
        engine.add_request(NewRequest {
            id: RequestId(0),
            arrival: SimTime(0),
            priority: 0,
            prompt: Prompt::new(vec![Segment { id: 1, tokens: 40 }]),
            max_output_tokens: 8,
            kv: KvTransfer::Local,
            output_id: None,
        });
        engine.schedule().expect("a step");
        engine.check_full().expect("a sound state to start from");
        engine
    }

    #[test]
    fn a_spec_decode_step_takes_the_blocks_of_its_slots() {
        // `_spec_decode_step_blocks`: cdiv(1 + num_spec_tokens + lookahead,
        // block_size), 0 without drafts. 4-token blocks: EAGLE with 2
        // drafts (2 lookahead slots) needs cdiv(5, 4) = 2 blocks; n-gram
        // with 3 drafts and no lookahead cdiv(4, 4) = 1; DFlash with 3
        // drafts (4 slots) cdiv(8, 4) = 2.
        let blocks = |spec: Option<(u32, u32)>| {
            let config = EngineConfig {
                block_size: 4,
                prefix_unit: 4,
                spec: spec.map(|(k, lookahead)| SpecConfig {
                    num_spec_tokens: k,
                    acceptance: vec![0.5; k as usize],
                    eagle_style: lookahead > 0,
                    lookahead_tokens: lookahead,
                    draft_slots: 0,
                }),
                ..small_config()
            };
            Engine::new(config).spec_decode_step_blocks()
        };
        assert_eq!(blocks(Some((2, 2))), 2);
        assert_eq!(blocks(Some((3, 0))), 1);
        assert_eq!(blocks(Some((3, 4))), 2);
        assert_eq!(blocks(Some((0, 0))), 0);
        assert_eq!(blocks(None), 0);
    }

    #[test]
    fn a_plain_engine_indexes_its_prefix_cache_by_chains_the_reference_by_table() {
        let plain = EngineConfig {
            block_size: 4,
            prefix_unit: 4,
            ..small_config()
        };
        let mut engine = Engine::new(plain.clone());
        assert!(engine.pool().by_chains());
        engine.index_by_table();
        assert!(!engine.pool().by_chains());
        // Sub-block prefix units (vllm-rbln) keep the table.
        let units = Engine::new(EngineConfig {
            prefix_unit: 2,
            ..plain
        });
        assert!(!units.pool().by_chains());
    }

    fn running_req(engine: &mut Engine) -> &mut Req {
        let slot = engine.running[0];
        engine.reqs[slot as usize].as_mut().expect("live")
    }

    #[test]
    fn the_cheap_check_walks_the_whole_pool_on_its_first_call_and_every_256th() {
        let mut engine = engine_with_one_running();
        // A fault the counts cannot see, only the pool's full walk.
        engine.pool.break_untouched_marker();
        assert!(engine.check_counts().is_ok());
        let failed: Vec<usize> = (1..=600).filter(|_| engine.check().is_err()).collect();
        assert_eq!(failed, [1, 257, 513]);
    }

    #[test]
    fn a_leaked_block_is_reported() {
        let mut engine = engine_with_one_running();
        // The request forgets a block the pool still counts as referenced.
        running_req(&mut engine).blocks.pop();
        let e = engine.check_counts().unwrap_err();
        assert!(
            e.contains("requests hold 2 block references but the pool counts 3"),
            "{e}"
        );
        assert!(engine.check_full().is_err());
    }

    #[test]
    fn a_block_held_twice_is_reported() {
        let mut engine = engine_with_one_running();
        // A double reference the pool never handed out.
        let req = running_req(&mut engine);
        let first = req.blocks[0];
        req.blocks.push(first);
        let e = engine.check_full().unwrap_err();
        assert!(e.contains("requests hold 4"), "{e}");
    }

    #[test]
    fn a_step_over_the_token_budget_is_reported() {
        let mut engine = engine_with_one_running();
        // The one request's 40-token prefill is within the 256 budget; a
        // second entry of 217 tokens takes the step to 257.
        let first = engine.scheduled[0];
        assert_eq!(first.tokens, 40);
        engine.scheduled.push(Scheduled {
            tokens: 217,
            ..first
        });
        let e = engine.check_counts().unwrap_err();
        assert!(
            e.contains("the last step scheduled 257 tokens > max_num_batched_tokens 256"),
            "{e}"
        );
        assert!(engine.check().is_err());
        // Exactly at the budget is allowed, as vLLM's `<=` allows it.
        engine.scheduled.last_mut().expect("pushed").tokens = 216;
        engine
            .check_counts()
            .expect("256 of 256 tokens is within budget");
    }

    #[test]
    fn running_beyond_max_num_seqs_is_reported() {
        let mut engine = engine_with_one_running();
        let slot = engine.running[0];
        engine.running.extend([slot; 4]);
        let e = engine.check_counts().unwrap_err();
        assert!(e.contains("5 running > max_num_seqs 4"), "{e}");
    }
}

#[cfg(test)]
mod acceptance_tests {
    use super::{SpecConfig, conditional_acceptance};

    /// Rates counted over all drafts become rates given the position
    /// before was accepted: 0.8, 0.6, 0.3 → 0.8, 0.6/0.8, 0.3/0.6. After a
    /// rate of 0 nothing is accepted, and positions past the given rates
    /// are never accepted.
    #[test]
    fn acceptance_rates_are_conditioned_on_the_position_before() {
        let spec = |acceptance: Vec<f64>, num_spec_tokens| SpecConfig {
            num_spec_tokens,
            acceptance,
            eagle_style: true,
            lookahead_tokens: num_spec_tokens,
            draft_slots: 0,
        };
        assert_eq!(
            conditional_acceptance(&spec(vec![0.8, 0.6, 0.3], 4)),
            [0.8, 0.6 / 0.8, 0.3 / 0.6, 0.0]
        );
        assert_eq!(
            conditional_acceptance(&spec(vec![0.5, 0.0, 0.0], 3)),
            [0.5, 0.0, 0.0]
        );
    }
}
