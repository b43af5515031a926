//! Request streams for pdsim: readers for recorded traces and a synthetic
//! generator, all yielding the same [`RequestSpec`] one request at a time.
//!
//! Two decisions of `DESIGN.md` shape this crate. Prompts are
//! content-addressed segments (decision 4), so a reader never invents token
//! ids: it says which runs of tokens are shared content and which are unique,
//! and the engine and router derive block hashes at their own block sizes.
//! Traces are streamed, never loaded whole, so every reader here takes an
//! [`std::io::BufRead`], holds only the current line and a few counters, and
//! yields requests lazily; a trace of millions of rows costs no more memory
//! than a trace of ten.
//!
//! The crate does no file-system access of its own. The CLI opens files and
//! passes readers plus a display name, which every [`TraceError`] carries so a
//! problem is reported as `file:line: column: message`.
//!
//! The formats, with their sources:
//!
//! - [`MooncakeReader`]: Mooncake FAST'25 JSON Lines (`timestamp` in ms,
//!   `input_length`, `output_length`, `hash_ids` one per 512-token block);
//!   Qin et al., FAST 2025, files in `kvcache-ai/Mooncake`
//!   `FAST25-release/traces/`.
//! - [`TraceV2Reader`]: the BLIS / inference-sim TraceV2 CSV
//!   (`inference-sim/inference-sim` `sim/workload/tracev2.go` and
//!   `replay.go`; `research/blis-documents.md` §4), with its YAML header
//!   already parsed by `pdsim-spec`.
//! - [`AzureReader`]: the Azure LLM inference trace 2023 CSV (`TIMESTAMP`,
//!   `ContextTokens`, `GeneratedTokens`; `Azure/AzurePublicDataset`, Patel et
//!   al., "Splitwise", ISCA 2024).
//! - [`Synthetic`]: a catalog workload shape (`pdsim_spec::catalog::Shape`)
//!   with Poisson arrivals, seeded per purpose (decision 3).
//!
//! - [`InferencePerf`]: an inference-perf configuration (`shared_prefix`,
//!   `random` and `synthetic` data; `constant` and `poisson` load stages),
//!   generating what inference-perf sends (`kubernetes-sigs/inference-perf`
//!   at `3b6f82a`; see the module for the files mirrored).
//!
//! [`TraceFormat`] tells the file formats apart from a name and the first
//! bytes, and [`TraceReader`] wraps whichever reader applies.
//!
//! Readers do not stop at the first bad row: a row-level problem is yielded
//! as an `Err` and reading continues with the next row, so a checking tool can
//! list every problem in one pass. A simulation should stop at the first
//! error. A failure to read the input at all (an I/O error) ends the stream.

#![warn(missing_docs)]

mod azure;
mod burstgpt;
mod inference_perf;
mod lines;
mod mooncake;
mod sniff;
mod synthetic;
mod tracev2;

pub use azure::AzureReader;
pub use burstgpt::BurstGptReader;
pub use inference_perf::{
    AIOHTTP_DEFAULT_TIMEOUT_S, DEFAULT_MAX_TOKENS, IP_QUESTION_SALT, IP_RANDOM_SALT,
    IP_SONNET_SALT, IP_SYSTEM_SALT, InferencePerf, StagePlan,
};
pub use mooncake::{MOONCAKE_BLOCK_TOKENS, MooncakeReader};
pub use sniff::{TraceFormat, TraceReader};
pub use synthetic::Synthetic;
pub use tracev2::TraceV2Reader;

use pdsim_core::{ARRIVAL_HORIZON, Prompt, SimTime};
use pdsim_spec::problem::{quote, shorten};
use std::fmt;

/// The largest prompt or output length, in tokens, any reader accepts.
///
/// No served model has a context this long; a larger value is a corrupt row,
/// and refusing it keeps token sums far from overflow.
pub const MAX_TOKENS: u64 = 10_000_000;

/// The most pieces (inputs and answers) a conversation's accumulated
/// prompt may hold: every turn copies its history, so the bound keeps a
/// hostile trace of one endless conversation from costing time quadratic in
/// its length; 4,096 turns of realistic length (tens of tokens or more)
/// without a reset are far beyond any model's context window.
pub(crate) const MAX_SESSION_SEGMENTS: usize = 8192;

/// A count written as text (a CSV field): a non-negative integer, or the
/// message saying why the text is not one.
pub(crate) fn parse_count(text: &str) -> Result<u64, String> {
    let value = text
        .parse::<i64>()
        .map_err(|_| format!("`{}` is not an integer", quote(text)))?;
    u64::try_from(value).map_err(|_| format!("{value} is negative"))
}

/// `tokens` if it is at most [`MAX_TOKENS`], else the message saying it is
/// too many.
pub(crate) fn check_tokens(tokens: u64) -> Result<u64, String> {
    if tokens > MAX_TOKENS {
        return Err(format!(
            "{tokens} tokens is more than the {MAX_TOKENS} pdsim accepts"
        ));
    }
    Ok(tokens)
}

/// Keeps rows in arrival order: remembers the time and line of the latest
/// accepted row, and the time of the first, the origin of relative arrivals.
#[derive(Default)]
pub(crate) struct ArrivalOrder {
    first: Option<u64>,
    last: Option<(u64, u64)>,
}

impl ArrivalOrder {
    /// `Err((time, line))` of the latest accepted row if `time` is earlier
    /// than it.
    pub(crate) fn check(&self, time: u64) -> Result<(), (u64, u64)> {
        match self.last {
            Some((previous, previous_line)) if time < previous => Err((previous, previous_line)),
            _ => Ok(()),
        }
    }

    /// The time since the first recorded row a row at `time` would have
    /// (0 for the first row), without recording it.
    pub(crate) fn offset(&self, time: u64) -> u64 {
        time.saturating_sub(self.first.unwrap_or(time))
    }

    /// The arrival of a row at `time` (nanoseconds on the trace's own
    /// clock) on `line`, relative to the first row, recorded; or why it
    /// cannot be one, naming the row's timestamp `text`: it is earlier than
    /// the row before, or beyond [`ARRIVAL_HORIZON`] after the first. For
    /// the wall-clock traces (Azure, BurstGPT).
    pub(crate) fn arrive(&mut self, time: u64, line: u64, text: &str) -> Result<SimTime, String> {
        if let Err((_, previous_line)) = self.check(time) {
            return Err(format!(
                "`{text}` is earlier than the row on line {previous_line}; rows must be in \
                 arrival order"
            ));
        }
        let arrival = SimTime(self.offset(time));
        if arrival > ARRIVAL_HORIZON {
            return Err(format!(
                "`{text}` is {} days after the first row, beyond the 365 days (one year) of \
                 simulated time pdsim replays",
                arrival.as_ns() / (86_400 * 1_000_000_000)
            ));
        }
        self.accept(time, line);
        Ok(arrival)
    }

    /// Records a valid row at `time` on `line` and returns its time since
    /// the first recorded row. Call [`ArrivalOrder::check`] first.
    pub(crate) fn accept(&mut self, time: u64, line: u64) -> u64 {
        let first = *self.first.get_or_insert(time);
        self.last = Some((time, line));
        time.saturating_sub(first)
    }
}

/// The arrival of a row `offset` units of `unit_ns` nanoseconds after its
/// origin (`unit` names the unit and `origin` the origin in messages: "after
/// the first row"), or the message saying why it cannot be simulated: it
/// does not fit in nanoseconds, or it lies beyond [`ARRIVAL_HORIZON`].
pub(crate) fn arrival_at(
    offset: u64,
    unit_ns: u64,
    unit: &str,
    origin: &str,
) -> Result<SimTime, String> {
    let horizon = ARRIVAL_HORIZON.as_ns() / unit_ns;
    match SimTime::checked_from_units(offset, unit_ns) {
        Some(at) if at <= ARRIVAL_HORIZON => Ok(at),
        _ => Err(format!(
            "{offset} {unit} {origin} is beyond the {horizon} {unit} (one year) of \
             simulated time pdsim replays; is the column in {unit}?"
        )),
    }
}

/// Salt of segment ids derived from Mooncake `hash_ids`, so they can never
/// collide with ids another source derives from the same small integers.
pub const MOONCAKE_SALT: u64 = u64::from_be_bytes(*b"mooncake");
/// Salt of the unique segment that carries a Mooncake row's tokens beyond
/// its last listed block (keyed by line number).
pub const MOONCAKE_UNIQUE_SALT: u64 = u64::from_be_bytes(*b"moon-tai");
/// Salt of a TraceV2 `prefix_group`'s shared segment (keyed by a hash of
/// the group name).
pub const TRACEV2_PREFIX_SALT: u64 = u64::from_be_bytes(*b"tv2-pfx.");
/// Salt of a TraceV2 row's unique tail (keyed by line number).
pub const TRACEV2_TAIL_SALT: u64 = u64::from_be_bytes(*b"tv2-tail");
/// Salt of the answer of a TraceV2 session's turn (keyed by the session
/// and the round), which the session's next turn repeats.
pub const TRACEV2_OUTPUT_SALT: u64 = u64::from_be_bytes(*b"tv2-outp");
/// Salt of an Azure row's prompt, which is always unique (keyed by line
/// number).
pub const AZURE_SALT: u64 = u64::from_be_bytes(*b"azure-23");
/// Salt of a BurstGPT row's prompt, which is always unique (keyed by line
/// number).
pub const BURSTGPT_SALT: u64 = u64::from_be_bytes(*b"burstgpt");
/// Salt of a synthetic shape's shared prefix (keyed by the seed).
pub const SYNTHETIC_PREFIX_SALT: u64 = u64::from_be_bytes(*b"syn-pfx.");
/// Salt of a synthetic request's unique tail (keyed by request index, mixed
/// with the seed).
pub const SYNTHETIC_TAIL_SALT: u64 = u64::from_be_bytes(*b"syn-tail");

/// One request as a source describes it, before the simulation assigns it
/// an id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestSpec {
    /// When the request reaches the router.
    pub arrival: SimTime,
    /// The prompt as content-addressed segments; content shared between
    /// requests shares segment ids.
    pub prompt: Prompt,
    /// Tokens to generate; at least 1.
    pub output_tokens: u32,
    /// vLLM scheduling priority: lower is more urgent, 0 by default.
    pub priority: i32,
    /// Index into the source's [`RequestSource::slo_classes`]; 0 is the
    /// unnamed default class.
    pub slo_class: u16,
    /// 1-based line of the row in its input, for messages about this
    /// request; for synthetic requests and inference-perf configurations,
    /// the 1-based request number (by which results are split into an
    /// inference-perf configuration's stages).
    pub source_line: u64,
    /// When the client gives up on the request, on the same clock as
    /// `arrival`; `None` when it waits for ever. A deadline at or before
    /// the arrival ends the request on arrival. TraceV2's `deadline_us`
    /// sets it; a client timeout ([`with_client_timeout`]) sets or
    /// tightens it for every request.
    pub deadline: Option<SimTime>,
    /// The request's place in a multi-turn conversation whose client
    /// sends it closed-loop, or `None` for a request sent at `arrival`.
    pub session: Option<SessionTurn>,
    /// The content id of the tokens the request generates, when a later
    /// request repeats them (a conversation's next turn carries this
    /// answer in its prompt, under the same id, so it shares their KV);
    /// `None`: an id of the engine's own, shared with nothing.
    pub output_id: Option<u64>,
}

/// A turn of a conversation, sent closed-loop: the first turn at its own
/// arrival, every later one only once the turn before it has ended. How
/// the client waits and what it does after a failure is its
/// [`TurnClient`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionTurn {
    /// The conversation, as a hash of its id in the trace.
    pub key: u64,
    /// 0 for the first turn.
    pub round: u32,
    /// How long the client waits after the previous turn's answer before
    /// sending this one; 0 for the first turn.
    pub think_time: pdsim_core::SimDuration,
    /// Which client sends the conversation.
    pub client: TurnClient,
}

/// The two closed-loop clients pdsim replays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnClient {
    /// inference-sim's session replay (`SessionManager`,
    /// `sim/workload/session.go`): a later turn is sent `think_time` after
    /// the client has the previous turn's last token, whatever its logged
    /// arrival, and not at all once a turn of its conversation failed or
    /// timed out (the session is cancelled). The turn's prompt is whole as
    /// the source gives it.
    Session,
    /// inference-perf's multi-turn chat (`LocalUserSession`,
    /// `inference_perf/apis/user_session.py` at v0.4.0): a later turn is
    /// sent at its own scheduled time or, when the turn before it is still
    /// going then, as soon as that one ends (it waits on the session's
    /// lock); the client's timeout counts from the send. The source gives
    /// only the turn's own text; the client sends it after the session's
    /// context, which an answered turn replaces by its prompt and answer
    /// (`update_context(prompt + " " + response)`), a refused one (a
    /// server's error response) by its prompt alone, and a timed-out one
    /// leaves as it was (`process_failure`): the conversation goes on.
    InferencePerf,
}

impl RequestSpec {
    /// Moves the request to arrive at `at`, keeping its deadline the same
    /// time after the arrival: a replay that rescales or redraws arrivals
    /// changes when clients send, not how long each one waits.
    pub fn move_arrival(&mut self, at: SimTime) {
        if let Some(deadline) = self.deadline {
            let budget = deadline.since(self.arrival);
            self.deadline = Some(at.checked_add(budget).unwrap_or(SimTime(u64::MAX)));
        }
        self.arrival = at;
    }
}

/// Applies a client timeout to every request of `source`: each one's
/// deadline becomes `timeout` after its arrival, or stays the deadline it
/// has when that is earlier (the client gives up at whichever comes
/// first). `None` leaves the requests as they are.
///
/// This is inference-perf's per-request timeout (`load.request_timeout`,
/// seconds, `inference_perf/config/loadgen/config.py`), which its OpenAI
/// client passes to aiohttp as `ClientTimeout(total=...)`
/// (`inference_perf/client/modelserver/openai_client.py`): a bound on the
/// whole request, from sending it to the last byte of the response.
pub fn with_client_timeout<I>(
    source: I,
    timeout: Option<pdsim_core::SimDuration>,
) -> impl Iterator<Item = Result<RequestSpec, TraceError>>
where
    I: Iterator<Item = Result<RequestSpec, TraceError>>,
{
    source.map(move |item| {
        item.map(|mut spec| {
            if let Some(timeout) = timeout {
                let at = spec
                    .arrival
                    .checked_add(timeout)
                    .unwrap_or(SimTime(u64::MAX));
                spec.deadline = Some(spec.deadline.map_or(at, |d| d.min(at)));
            }
            spec
        })
    })
}

/// A problem with one row (or the header) of an input, located by file,
/// line and column. Its message quotes at most a few hundred characters of
/// the row and is shown cut to `pdsim_spec::problem::MESSAGE_CHARS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceError {
    /// The display name of the input, as the caller passed it.
    pub file: String,
    /// 1-based line; 0 when the problem concerns no particular line (a
    /// synthetic shape's parameters, or a header passed in separately).
    pub line: u64,
    /// The key or column name concerned, if one is.
    pub column: Option<String>,
    /// What is wrong, in a sentence.
    pub message: String,
}

impl TraceError {
    pub(crate) fn new(
        file: &str,
        line: u64,
        column: Option<&str>,
        message: impl Into<String>,
    ) -> TraceError {
        let message = message.into();
        TraceError {
            file: file.to_string(),
            line,
            column: column.map(str::to_string),
            message: shorten(&message).into_owned(),
        }
    }
}

impl fmt::Display for TraceError {
    /// `file:line: column: message`; the line is left out when it is 0 and
    /// the column when there is none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file)?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if let Some(column) = &self.column {
            write!(f, ": {column}")?;
        }
        write!(f, ": {}", shorten(&self.message))
    }
}

impl std::error::Error for TraceError {}

/// A stream of requests in arrival order.
///
/// Every source yields requests with non-decreasing arrival times; a row
/// that would go back in time is reported as an error instead.
pub trait RequestSource: Iterator<Item = Result<RequestSpec, TraceError>> {
    /// The names of the SLO classes seen so far, indexed by
    /// [`RequestSpec::slo_class`]. Entry 0 is always `""`, the class of
    /// requests that name none. Classes are added in order of first
    /// appearance, so the list is complete once the stream is exhausted.
    /// A source that names no classes has only that one.
    fn slo_classes(&self) -> &[String] {
        default_classes()
    }

    /// How many rows asked for 0 output tokens and were given 1.
    ///
    /// vLLM cannot run a request with `max_tokens` 0, and a request that
    /// ends at once still pays a full prefill, which is what its first
    /// sampled token costs; so pdsim replays such a row as one output token
    /// and counts it here for the run's report instead of changing it
    /// silently.
    fn outputs_raised(&self) -> u64 {
        0
    }
}

static UNNAMED: [String; 1] = [String::new()];

/// The list of class names every source starts with: only the unnamed
/// default class. Sources that name no classes keep it as their list.
pub(crate) fn default_classes() -> &'static [String] {
    &UNNAMED
}

/// Output lengths of 0 become 1 (see [`RequestSource::outputs_raised`]).
pub(crate) fn raise_output(tokens: u64, raised: &mut u64) -> u32 {
    if tokens == 0 {
        *raised += 1;
        1
    } else {
        tokens as u32
    }
}

/// FNV-1a over bytes: a hash that, unlike the standard library's, is fixed
/// forever, so a name hashes to the same segment id on every machine and
/// in every release.
pub(crate) fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        hash ^= b as u64;
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::{RequestSpec, TraceError, fnv1a64, with_client_timeout};
    use pdsim_core::{Prompt, SimDuration, SimTime};

    fn spec(arrival_ms: u64, deadline_ms: Option<u64>) -> RequestSpec {
        RequestSpec {
            arrival: SimTime::from_ms(arrival_ms),
            prompt: Prompt::default(),
            output_tokens: 1,
            priority: 0,
            slo_class: 0,
            source_line: 1,
            deadline: deadline_ms.map(SimTime::from_ms),
            session: None,
            output_id: None,
        }
    }

    #[test]
    fn a_client_timeout_sets_or_tightens_every_deadline() {
        let specs = vec![
            spec(100, None),
            spec(200, Some(250)),
            spec(300, Some(9_000)),
        ];
        let timeout = Some(SimDuration::from_ms(1_000));
        let out: Vec<RequestSpec> = with_client_timeout(specs.clone().into_iter().map(Ok), timeout)
            .map(Result::unwrap)
            .collect();
        let deadlines: Vec<Option<SimTime>> = out.iter().map(|s| s.deadline).collect();
        assert_eq!(
            deadlines,
            [
                Some(SimTime::from_ms(1_100)),
                Some(SimTime::from_ms(250)),
                Some(SimTime::from_ms(1_300))
            ]
        );
        let untouched: Vec<RequestSpec> =
            with_client_timeout(specs.clone().into_iter().map(Ok), None)
                .map(Result::unwrap)
                .collect();
        assert_eq!(untouched, specs);
    }

    #[test]
    fn moving_an_arrival_keeps_the_time_the_client_waits() {
        let mut s = spec(1_000, Some(1_300));
        s.move_arrival(SimTime::from_ms(5_000));
        assert_eq!(s.deadline, Some(SimTime::from_ms(5_300)));
        let mut s = spec(1_000, None);
        s.move_arrival(SimTime::from_ms(10));
        assert_eq!((s.arrival, s.deadline), (SimTime::from_ms(10), None));
    }

    #[test]
    fn errors_display_file_line_column_message() {
        let e = TraceError::new("t.jsonl", 3, Some("input_length"), "must be at least 1");
        assert_eq!(e.to_string(), "t.jsonl:3: input_length: must be at least 1");
        let e = TraceError::new("t.csv", 0, None, "empty");
        assert_eq!(e.to_string(), "t.csv: empty");
    }

    #[test]
    fn fnv_is_pinned() {
        // The published FNV-1a 64 test vector for "a".
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
    }
}
