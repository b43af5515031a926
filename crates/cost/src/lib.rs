//! Step, transfer and offload times. The engine describes a step as a
//! [`Batch`]; a [`CostModel`] prices it and says where the time went.
//!
//! **Architecture invariant:** pure functions of their inputs — no I/O, no
//! clock, no randomness. Time comes back as integer nanoseconds.
//!
//! Two models implement [`CostModel`]:
//!
//! - [`Roofline`] prices a step from the model's shapes, the chip's datasheet
//!   figures and cited coefficients (GEMM efficiency envelope, HBM derate,
//!   measured collective curves, host overheads), with CUDA-graph padding,
//!   dual-batch overlap, pipeline stages and per-backend expert-parallel
//!   collectives. It needs no measurement of the deployment, so it can rank
//!   layouts nobody has run; its coefficients say where each number came
//!   from ([`Roofline::provenance`]).
//! - [`Linear`] is a four-term fit for a deployment that has been measured,
//!   where a calibrated fit beats first principles.
//!
//! Both resolve their coefficients once, when built, by the BLIS selection
//! rule (`coefficients`): built-in defaults, then the scenario's sets in
//! order, last applicable entry winning. `step` is then plain arithmetic on
//! precomputed fields, because the engine calls it once per simulated step,
//! millions of times per run.

mod acceptance;
mod coefficients;
mod collective;
mod linear;
mod roofline;
#[cfg(test)]
mod tests;
mod transfer;

pub use acceptance::acceptance_overrides;
pub use collective::{Curve, Op};
pub use linear::{LINEAR_COEFFICIENTS, Linear};
pub use roofline::{All2AllFamily, Roofline};
pub use transfer::TransferModel;

use pdsim_core::SimDuration;
use serde::Serialize;

/// How a step's forward pass runs (`vllm/v1/cudagraph_dispatcher.py`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub enum GraphMode {
    /// A full CUDA graph replays the whole step (uniform decode batches).
    Full,
    /// Piecewise graphs: attention runs eagerly between captured pieces.
    Piecewise,
    /// No graph: every kernel is launched from the host.
    #[default]
    Eager,
}

/// What one engine step computes, per data-parallel rank, as the cost model
/// needs it. The engine fills it from the scheduler's decisions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Batch {
    /// Requests scheduled in the step.
    pub num_reqs: u32,
    /// Requests whose scheduled tokens include prompt (or recomputed) tokens.
    pub prefill_reqs: u32,
    /// Requests in the decode phase (one token plus drafts).
    pub decode_reqs: u32,
    /// New tokens of prefill chunks.
    pub prefill_tokens: u32,
    /// Tokens of decode requests, draft tokens included.
    pub decode_tokens: u32,
    /// Draft tokens among `decode_tokens` (speculative decoding).
    pub spec_tokens: u32,
    /// Tokens the forward pass runs on after CUDA-graph padding; equals
    /// `prefill_tokens + decode_tokens` when the step runs eager.
    pub padded_tokens: u32,
    pub graph: GraphMode,
    /// Σ over requests of the context each one's attention reads (tokens
    /// already computed plus the new ones): drives KV bytes read.
    pub attn_context_tokens: u64,
    /// Σ over requests of query × key pairs under the causal mask:
    /// q·c + q·(q+1)/2 for q new tokens after c computed ones. Drives
    /// attention FLOPs.
    pub attn_pairs: u64,
    /// The step is split into two microbatches (dual-batch overlap).
    pub dbo: bool,
}

impl Batch {
    pub fn tokens(&self) -> u32 {
        self.prefill_tokens + self.decode_tokens
    }
}

/// Where a step's time went, in nanoseconds. `total` is what the step takes;
/// the parts explain it and need not add up to it when resources overlap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StepCost {
    pub total: SimDuration,
    pub compute_ns: u64,
    pub memory_ns: u64,
    pub communication_ns: u64,
    pub host_ns: u64,
    /// Time spent on padded (not useful) tokens.
    pub padding_ns: u64,
}

/// Prices engine steps and per-request host work for one pool.
/// `Send + Sync` so that a built cluster can be shared by the parallel runs
/// of `compare` and `plan` (each run still runs on one thread).
pub trait CostModel: Send + Sync {
    /// The duration of one step and its breakdown.
    fn step(&self, batch: &Batch) -> StepCost;
    /// How long the frontend takes to render and tokenize a prompt before
    /// the engine sees it.
    fn admission_delay(&self, prompt_tokens: u32) -> SimDuration;
    /// The frontend's tokenizer micro-batching, when it has one: the
    /// Python API server tokenizes text prompts through vLLM's
    /// `AsyncMicrobatchTokenizer` (`vllm/utils/async_utils.py`, used by
    /// `CompletionRenderer._create_prompt_from_text` in
    /// `vllm/entrypoints/renderer.py`), which holds the first prompt of a
    /// batch until the batch's wait ends or the batch is full, then
    /// tokenizes the batch in one call. `None`: each prompt is tokenized on
    /// its own as it arrives.
    fn tokenizer_batching(&self) -> Option<TokenizerBatching> {
        None
    }
    /// The work the API server does for requests on its one event-loop
    /// thread, apart from tokenizing. Zero unless the model prices it.
    fn api_server(&self) -> ApiServerCosts {
        ApiServerCosts::default()
    }
}

/// The API server's own work for requests (`vllm/entrypoints/openai/api_server.py`
/// under uvicorn, one asyncio event loop):
///
/// * `request`: taking a request in, a latency before its prompt reaches
///   the tokenizer: the client's connection, the HTTP request, the
///   `CompletionRequest` validation and `create_completion`
///   (`vllm/entrypoints/openai/completion/serving.py`), the input processor
///   and the hand-off to the engine core (`AsyncLLM.add_request`,
///   `vllm/v1/engine/async_llm.py`). `host_api_request`. Not held on the
///   loop: how much of it is loop work rather than waiting is not
///   measured.
///
/// The other two are work on the event loop, so each waits for the work
/// handed to the loop before it:
///
/// * `output_token`: every token the engine core returns for a streaming
///   request: `output_handler` hands each step's outputs to
///   `OutputProcessor.process_outputs` (`vllm/v1/engine/output_processor.py`,
///   incremental detokenization) in the order the step lists them, and each
///   request's `completion_stream_generator` turns its tokens into an SSE
///   chunk. `host_output_token`.
/// * `completion`: a finished request's last response and teardown.
///   `host_completion`.
///
/// The Rust frontend does the same work outside Python, priced by the same
/// assumed `frontend_rust_admission_ratio` as its tokenizing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApiServerCosts {
    pub request: SimDuration,
    pub output_token: SimDuration,
    pub completion: SimDuration,
}

impl ApiServerCosts {
    pub(crate) fn new(
        engine: &pdsim_spec::resolve::EngineConfig,
        request_us: f64,
        output_token_us: f64,
        completion_us: f64,
        rust_ratio: f64,
    ) -> ApiServerCosts {
        let scale = if engine.frontend == "rust" {
            rust_ratio
        } else {
            1.0
        };
        let of = |us: f64| SimDuration::from_ns(ns(us * scale * 1e3));
        ApiServerCosts {
            request: of(request_us),
            output_token: of(output_token_us),
            completion: of(completion_us),
        }
    }
}

/// How the frontend batches prompts for its tokenizer
/// (`AsyncMicrobatchTokenizer._batch_encode_loop`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenizerBatching {
    /// How long a batch stays open after its first prompt
    /// (`batch_wait_timeout_s`).
    pub wait: SimDuration,
    /// A batch closes at once when it holds this many prompts
    /// (`max_batch_size`).
    pub max_prompts: usize,
}

/// The tokenizer batching of a frontend: the Python API server's
/// (`frontend: python`, vLLM's own) from the two coefficients; none for the
/// Rust frontend, which tokenizes each prompt as it comes.
pub(crate) fn tokenizer_batching(
    engine: &pdsim_spec::resolve::EngineConfig,
    wait_us: f64,
    max_prompts: f64,
) -> Option<TokenizerBatching> {
    // Only the Python server of a release that has the batcher (the rules
    // pack's `microbatch_tokenizer`: 0.15.1, not 0.29.0 or 0.31.0).
    (engine.frontend != "rust" && engine.microbatch_tokenizer).then(|| TokenizerBatching {
        wait: SimDuration::from_ns(ns(wait_us * 1e3)),
        max_prompts: max_prompts.round().max(1.0) as usize,
    })
}

/// Rounds non-negative nanoseconds to an integer, halves away from zero
/// as `f64::round`; NaN and negatives become zero and values beyond `u64`
/// saturate.
///
/// Every step is priced through here six times. `f64::round` is a call
/// into software rounding on the baseline x86-64 target (no SSE4.1), which
/// was 2 % of a low-load run (`perf`, 1P3D at 4 req/s); the truncating
/// cast and one subtraction give the same integer: below 2^53 the
/// subtraction of the whole part is exact, so the remainder is compared
/// with one half exactly, and from 2^53 on every `f64` is a whole number
/// (remainder 0) or past `u64` (the cast saturates, as `round() as u64`
/// does). `ns_rounds_as_f64_round` holds it to `f64::round`.
#[inline]
pub(crate) fn ns(value: f64) -> u64 {
    if value.is_nan() || value <= 0.0 {
        return 0;
    }
    if value < TWO_POW_53 {
        // Signed: one conversion instruction each way (an unsigned one
        // is a sequence of them on x86-64).
        let whole = value as i64;
        (whole + i64::from(value - whole as f64 >= 0.5)) as u64
    } else {
        value as u64
    }
}

/// 2^53: from here on every `f64` is a whole number.
const TWO_POW_53: f64 = 9_007_199_254_740_992.0;
