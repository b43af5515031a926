//! The TraceV2 reader (BLIS / inference-sim CSV).
//!
//! TraceV2 is what BLIS writes when it runs, observes or replays a workload
//! (`inference-sim/inference-sim` `sim/workload/tracev2.go`;
//! `research/blis-documents.md` §4), so reading it lets pdsim replay exactly
//! the traffic a BLIS study used. A trace is a YAML header, which a Scenario
//! embeds and `pdsim-spec` parses into a [`TraceHeader`], plus a CSV data file
//! with a header row and one row per request.
//!
//! The CSV's 27 core columns are positional, in this order: `request_id,
//! client_id, tenant_id, slo_class, session_id, round_index, prefix_group,
//! prefix_length, streaming, input_tokens, output_tokens, text_tokens,
//! image_tokens, audio_tokens, video_tokens, reason_ratio, model,
//! deadline_us, server_input_tokens, arrival_time_us, send_time_us,
//! first_chunk_time_us, last_chunk_time_us, num_chunks, status,
//! error_message, finish_reason`. Two optional columns are inserted when the
//! header row names them: `vllm_priority` straight after `slo_class` and
//! `slo_target_us` straight after `deadline_us`. Trailing columns
//! (`x_request_id`, `adapter`, `think_time_us`, or anything newer) are
//! allowed and ignored. Because the layout is positional, this reader checks
//! that the header row names every core column where the layout puts it; a
//! shifted file is refused at line 1 instead of being misread row by row.
//!
//! Each row is checked the way inference-sim's `parseTraceRecord` checks it
//! (integers where integers belong, counts and `deadline_us` not negative,
//! `reason_ratio` in [0, 1], a deadline not before the arrival), so a file
//! BLIS refuses, pdsim refuses too, with the row and the column named.
//!
//! How a row becomes a request, following inference-sim's
//! `LoadTraceV2Requests` (`sim/workload/replay.go`):
//!
//! - Arrival is `arrival_time_us`, integer microseconds from the trace's own
//!   origin, kept as is (not shifted to the first row) so a replay keeps the
//!   trace's warm-up offset. The header's `time_unit` must say microseconds:
//!   the columns are named `_us` and BLIS writes them in µs, so a header
//!   naming another unit contradicts its own data and is refused rather than
//!   guessed at. inference-sim injects a request at `send_time_us` when that
//!   is set; pdsim models when the client wanted to send (the arrival), not
//!   when a client-side concurrency limit let it go. Rows must be in
//!   arrival order.
//! - In a row with a `prefix_group`, `input_tokens` counts only the tokens
//!   after the shared prefix: the prompt is `prefix_length` tokens of the
//!   group's shared content, then `input_tokens` unique tokens. The shared
//!   segment's id is a fixed hash of the group name, so every row of the
//!   group shares it; rows of one group with different `prefix_length`s
//!   share their common leading part. `prefix_length` without a group names
//!   no content to share and is an error.
//! - In a row without a group, the prompt is one unique segment of
//!   `server_input_tokens` tokens when that is positive (the server's count,
//!   which includes the chat template), else of `input_tokens`.
//! - `slo_class` names are interned in order of first appearance (the empty
//!   name is class 0); `vllm_priority` (0 = most urgent) becomes the
//!   request's priority; `output_tokens` 0 is replayed as 1 and counted.
//! - `deadline_us` (absolute, on the arrivals' clock; 0 = none) becomes the
//!   request's deadline: the client gives up then.
//! - A row with a `session_id` is a turn of that conversation, replayed
//!   closed-loop as inference-sim's session replay does
//!   (`LoadTraceV2SessionBlueprints` in `replay.go`, `SessionManager` in
//!   `session.go`): `round_index` 0 is sent at its arrival; a later turn's
//!   `round_index` must be one more than the session's turn before it (as
//!   there, non-consecutive rounds are an error), and the turn is sent its
//!   think time after the client has the previous turn's answer (the event
//!   loop does that from [`SessionTurn`]), not at its logged arrival. The
//!   think time is the trailing `think_time_us` when it is positive (the
//!   client's own, recorded); else the gap from the previous turn's
//!   `last_chunk_time_us` to this turn's arrival, when that was recorded
//!   (the real client's pause after its answer); else, as inference-sim
//!   does, the gap between the two turns' arrivals, which also holds the
//!   previous turn's service time. A failed or timed-out turn cancels its
//!   session's later turns.
//! - With the header's `session_context_growth: accumulate` a later turn's
//!   prompt is the previous turn's prompt, then its answer (under the
//!   answer's own content id, so the KV the engine cached while generating
//!   it is a prefix hit), then `input_tokens` new tokens (its
//!   `prefix_group` is part of the first turn and not added again); a row
//!   with a positive trailing `input_tokens_reset` starts the history anew
//!   as that many tokens (context compaction). Without it, every turn's
//!   prompt is its own, as for a row without a session.

use crate::lines::{CsvRecords, Fields};
use crate::{
    ArrivalOrder, MAX_SESSION_SEGMENTS, MAX_TOKENS, RequestSource, RequestSpec, SessionTurn,
    TRACEV2_OUTPUT_SALT, TRACEV2_PREFIX_SALT, TRACEV2_TAIL_SALT, TraceError, TurnClient,
    arrival_at, check_tokens, default_classes, fnv1a64, parse_count, raise_output,
};
use pdsim_core::prompt::content_id;
use pdsim_core::{ARRIVAL_HORIZON, Prompt, Segment, SimTime};
use pdsim_spec::problem::quote;
use pdsim_spec::scenario::{
    SESSION_CONTEXT_GROWTH, TRACE_V2_READ_TIME_UNITS, TRACE_V2_VERSIONS, TraceHeader,
};
use std::collections::BTreeMap;
use std::io::BufRead;

/// The 27 core columns, in file order, without the optional ones.
const CORE_COLUMNS: [&str; 27] = [
    "request_id",
    "client_id",
    "tenant_id",
    "slo_class",
    "session_id",
    "round_index",
    "prefix_group",
    "prefix_length",
    "streaming",
    "input_tokens",
    "output_tokens",
    "text_tokens",
    "image_tokens",
    "audio_tokens",
    "video_tokens",
    "reason_ratio",
    "model",
    "deadline_us",
    "server_input_tokens",
    "arrival_time_us",
    "send_time_us",
    "first_chunk_time_us",
    "last_chunk_time_us",
    "num_chunks",
    "status",
    "error_message",
    "finish_reason",
];

/// The index in [`CORE_COLUMNS`] of the column `name`. Used only to define
/// the constants below, at compile time, so a name that is not a core column
/// fails the build.
const fn core(name: &str) -> usize {
    let mut i = 0;
    while i < CORE_COLUMNS.len() {
        let (a, b) = (CORE_COLUMNS[i].as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return i;
            }
        }
        i += 1;
    }
    panic!("not a core TraceV2 column")
}

// Indices in `CORE_COLUMNS` of the core columns a row is checked against.
const REQUEST_ID: usize = core("request_id");
const SLO_CLASS: usize = core("slo_class");
const ROUND_INDEX: usize = core("round_index");
const PREFIX_GROUP: usize = core("prefix_group");
const PREFIX_LENGTH: usize = core("prefix_length");
const STREAMING: usize = core("streaming");
const INPUT_TOKENS: usize = core("input_tokens");
const OUTPUT_TOKENS: usize = core("output_tokens");
const MODALITY_TOKENS: [usize; 4] = [
    core("text_tokens"),
    core("image_tokens"),
    core("audio_tokens"),
    core("video_tokens"),
];
const REASON_RATIO: usize = core("reason_ratio");
const DEADLINE_US: usize = core("deadline_us");
const SERVER_INPUT_TOKENS: usize = core("server_input_tokens");
const ARRIVAL_TIME_US: usize = core("arrival_time_us");
const CLIENT_TIMES_US: [usize; 3] = [
    core("send_time_us"),
    core("first_chunk_time_us"),
    core("last_chunk_time_us"),
];
const NUM_CHUNKS: usize = core("num_chunks");
const SESSION_ID: usize = core("session_id");
const LAST_CHUNK_TIME_US: usize = core("last_chunk_time_us");

/// Reads a TraceV2 CSV one row at a time.
pub struct TraceV2Reader<R> {
    records: CsvRecords<R>,
    state: State,
}

/// Everything but the input.
struct State {
    name: String,
    /// The column names the layout expects, in order (core plus the
    /// optional columns the header row has).
    layout: Vec<&'static str>,
    /// Where each core column is in the layout, by its index in
    /// [`CORE_COLUMNS`].
    core: Box<[usize; CORE_COLUMNS.len()]>,
    priority: Option<usize>,
    slo_target: Option<usize>,
    classes: Vec<String>,
    class_index: BTreeMap<String, u16>,
    /// Arrival (µs) and line of the latest valid row.
    order: ArrivalOrder,
    raised: u64,
    /// `session_context_growth: accumulate`.
    accumulate: bool,
    /// The trailing `think_time_us` and `input_tokens_reset` columns, by
    /// header name.
    think_time: Option<usize>,
    reset: Option<usize>,
    /// Every session read so far, by its id: what its next turn builds on.
    /// Kept for the whole trace, as a later turn may come at any row.
    sessions: BTreeMap<String, Session>,
}

/// The last turn read of a session.
struct Session {
    key: u64,
    round: i64,
    arrival_us: u64,
    /// `last_chunk_time_us`, 0 when not recorded.
    last_chunk_us: i64,
    prompt: Prompt,
    output_id: u64,
    output_tokens: u32,
}

impl<R: BufRead> TraceV2Reader<R> {
    /// A reader of the CSV `input` described by `header`; `name` is the
    /// file name used in messages. Reads and checks the CSV's header row.
    pub fn new(
        header: &TraceHeader,
        input: R,
        name: impl Into<String>,
    ) -> Result<TraceV2Reader<R>, TraceError> {
        let name = name.into();
        // The same rules as the scenario check (`validate` refuses these
        // headers too); here for callers that bring their own header.
        if !TRACE_V2_VERSIONS.contains(&header.trace_version) {
            return Err(TraceError::new(
                &name,
                0,
                Some("trace_version"),
                format!(
                    "version {} is not one pdsim reads ({} to {})",
                    header.trace_version,
                    TRACE_V2_VERSIONS.start(),
                    TRACE_V2_VERSIONS.end()
                ),
            ));
        }
        if let Some(growth) = &header.session_context_growth
            && !SESSION_CONTEXT_GROWTH.contains(&growth.as_str())
        {
            return Err(TraceError::new(
                &name,
                0,
                Some("session_context_growth"),
                format!(
                    "is `{}`; inference-sim knows only `accumulate` or empty",
                    quote(growth)
                ),
            ));
        }
        if !TRACE_V2_READ_TIME_UNITS.contains(&header.time_unit.as_str()) {
            return Err(TraceError::new(
                &name,
                0,
                Some("time_unit"),
                format!(
                    "is `{}`, but TraceV2 timestamp columns are integer microseconds \
                     (`arrival_time_us`); pdsim reads only `us` or `microseconds` rather than \
                     guess which of the two is wrong",
                    quote(&header.time_unit)
                ),
            ));
        }
        let mut records = CsvRecords::new(input);
        let names = records.header(
            &name,
            "the file is empty; a TraceV2 CSV starts with a header row",
        )?;
        let has = |column: &str| names.iter().any(|n| n == column);
        let mut layout = Vec::with_capacity(CORE_COLUMNS.len() + 2);
        let mut core = [0; CORE_COLUMNS.len()];
        for (at, column) in core.iter_mut().zip(CORE_COLUMNS) {
            *at = layout.len();
            layout.push(column);
            if column == "slo_class" && has("vllm_priority") {
                layout.push("vllm_priority");
            }
            if column == "deadline_us" && has("slo_target_us") {
                layout.push("slo_target_us");
            }
        }
        for (i, expected) in layout.iter().enumerate() {
            match names.get(i) {
                Some(found) if found == expected => {}
                Some(found) => {
                    return Err(TraceError::new(
                        &name,
                        1,
                        Some(expected),
                        format!(
                            "column {} of the header row is `{}`, but TraceV2 puts \
                             `{expected}` there (core columns are positional)",
                            i + 1,
                            quote(found)
                        ),
                    ));
                }
                None => {
                    return Err(TraceError::new(
                        &name,
                        1,
                        Some(expected),
                        format!(
                            "is missing: the header row has {} columns and TraceV2 puts \
                             `{expected}` in column {}",
                            names.len(),
                            i + 1
                        ),
                    ));
                }
            }
        }
        let position = |column: &str| layout.iter().position(|c| *c == column);
        // Trailing columns are found by name, past the positional ones.
        let trailing = |column: &str| {
            names
                .iter()
                .skip(layout.len())
                .position(|n| n == column)
                .map(|i| i + layout.len())
        };
        let state = State {
            accumulate: header.session_context_growth.as_deref() == Some("accumulate"),
            think_time: trailing("think_time_us"),
            reset: trailing("input_tokens_reset"),
            sessions: BTreeMap::new(),
            priority: position("vllm_priority"),
            slo_target: position("slo_target_us"),
            layout,
            core: Box::new(core),
            name,
            classes: default_classes().to_vec(),
            class_index: BTreeMap::new(),
            order: ArrivalOrder::default(),
            raised: 0,
        };
        Ok(TraceV2Reader { records, state })
    }
}

impl<R: BufRead> Iterator for TraceV2Reader<R> {
    type Item = Result<RequestSpec, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        let state = &mut self.state;
        let record = self.records.next_record()?;
        Some(
            record
                .fields(&state.name)
                .and_then(|(line, fields)| state.parse(line, fields)),
        )
    }
}

impl<R: BufRead> RequestSource for TraceV2Reader<R> {
    fn slo_classes(&self) -> &[String] {
        &self.state.classes
    }

    fn outputs_raised(&self) -> u64 {
        self.state.raised
    }
}

/// Go's `strconv.ParseBool`, which wrote and reads the `streaming` column.
fn go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// One row being parsed: its fields and where it is, for messages.
struct Row<'s, 'r> {
    state: &'s State,
    line: u64,
    record: &'r Fields,
}

impl<'r> Row<'_, 'r> {
    fn error(&self, column: usize, message: impl Into<String>) -> TraceError {
        TraceError::new(
            &self.state.name,
            self.line,
            Some(self.state.column_name(column)),
            message,
        )
    }

    /// A field; the row's length was checked against the layout first.
    fn text(&self, column: usize) -> Result<&'r str, TraceError> {
        self.record
            .get(column)
            .ok_or_else(|| self.error(column, "is missing"))
    }

    fn int(&self, column: usize) -> Result<i64, TraceError> {
        let text = self.text(column)?;
        text.parse::<i64>()
            .map_err(|_| self.error(column, format!("`{}` is not an integer", quote(text))))
    }

    fn count(&self, column: usize) -> Result<u64, TraceError> {
        parse_count(self.text(column)?).map_err(|message| self.error(column, message))
    }

    fn tokens(&self, column: usize) -> Result<u64, TraceError> {
        check_tokens(self.count(column)?).map_err(|message| self.error(column, message))
    }
}

impl State {
    /// The name of column `column`: one of the layout's, or a trailing
    /// column found by its header name (past the layout).
    fn column_name(&self, column: usize) -> &'static str {
        if let Some(name) = self.layout.get(column) {
            name
        } else if self.think_time == Some(column) {
            "think_time_us"
        } else if self.reset == Some(column) {
            "input_tokens_reset"
        } else {
            "?"
        }
    }

    fn parse(&mut self, line: u64, record: &Fields) -> Result<RequestSpec, TraceError> {
        let row = Row {
            state: self,
            line,
            record,
        };
        let c = |core: usize| self.core[core];
        if record.len() < self.layout.len() {
            return Err(row.error(
                record.len(),
                format!(
                    "is missing: the row has {} columns, the layout needs {}",
                    record.len(),
                    self.layout.len()
                ),
            ));
        }
        row.int(c(REQUEST_ID))?;
        let slo_class = row.text(c(SLO_CLASS))?;
        let priority = match self.priority {
            None => 0,
            Some(column) => {
                let value = row.count(column)?;
                i32::try_from(value)
                    .map_err(|_| row.error(column, format!("{value} is too large")))?
            }
        };
        let round = row.int(c(ROUND_INDEX))?;
        let session_id = row.text(c(SESSION_ID))?;
        let group = row.text(c(PREFIX_GROUP))?;
        let prefix = row.tokens(c(PREFIX_LENGTH))?;
        let streaming = c(STREAMING);
        let text = row.text(streaming)?;
        if go_bool(text).is_none() {
            return Err(row.error(streaming, format!("`{}` is not a boolean", quote(text))));
        }
        let input = row.tokens(c(INPUT_TOKENS))?;
        let output = row.tokens(c(OUTPUT_TOKENS))?;
        for column in MODALITY_TOKENS {
            row.count(c(column))?;
        }
        let ratio_column = c(REASON_RATIO);
        let text = row.text(ratio_column)?;
        match text.parse::<f64>() {
            Ok(ratio) if (0.0..=1.0).contains(&ratio) => {}
            _ => {
                return Err(row.error(
                    ratio_column,
                    format!("`{}` is not a number in [0, 1]", quote(text)),
                ));
            }
        }
        let deadline = row.count(c(DEADLINE_US))?;
        if let Some(column) = self.slo_target {
            row.count(column)?;
        }
        let server_input = row.tokens(c(SERVER_INPUT_TOKENS))?;
        let arrival_column = c(ARRIVAL_TIME_US);
        let arrival = row.count(arrival_column)?;
        if arrival > u64::MAX / 1_000 {
            return Err(row.error(arrival_column, format!("{arrival} µs is too large")));
        }
        let arrival_time = arrival_at(arrival, 1_000, "µs", "from the trace's origin")
            .map_err(|message| row.error(arrival_column, message))?;
        for column in CLIENT_TIMES_US {
            row.int(c(column))?;
        }
        let last_chunk_us = row.int(c(LAST_CHUNK_TIME_US))?;
        let think_us = match self.think_time {
            Some(column) if !row.text(column)?.is_empty() => row.count(column)?,
            _ => 0,
        };
        // A turn's client thinks at most as long as the trace may last: a
        // longer think time is a corrupt row (or a column in the wrong
        // unit), and would carry the turn past the horizon every arrival
        // is held to.
        if let Some(column) = self.think_time
            && think_us > ARRIVAL_HORIZON.as_ns() / 1_000
        {
            return Err(row.error(
                column,
                format!(
                    "{think_us} µs is longer than the {} µs (one year) of simulated time pdsim \
                     replays; is the column in µs?",
                    ARRIVAL_HORIZON.as_ns() / 1_000
                ),
            ));
        }
        let reset = match self.reset {
            Some(column) if !row.text(column)?.is_empty() => row.tokens(column)?,
            _ => 0,
        };
        row.count(c(NUM_CHUNKS))?;
        if deadline > 0 && arrival > 0 && deadline < arrival {
            return Err(row.error(
                c(DEADLINE_US),
                format!("{deadline} µs is before the arrival, {arrival} µs"),
            ));
        }
        // `deadline_us` is absolute, on the clock of `arrival_time_us`, and
        // 0 means none (`DeadlineUs` in inference-sim's
        // `sim/workload/tracev2.go`; `LoadTraceV2Requests` in `replay.go`
        // copies it to the request's `Deadline`, which the simulator's
        // `TimeoutEvent` fires at). Arrivals keep the trace's origin, so
        // the deadline does too.
        // A client that waits longer than any real one is a corrupt row,
        // and refusing it keeps a request stuck until its client gives up
        // from idling the simulated clock through centuries.
        let max_wait_us = (pdsim_spec::scenario::MAX_CLIENT_TIMEOUT_S * 1e6) as u64;
        let deadline =
            if deadline == 0 {
                None
            } else if deadline - arrival.min(deadline) > max_wait_us {
                return Err(row.error(
                    c(DEADLINE_US),
                    format!(
                        "{deadline} µs is {} s after the arrival, beyond any real client (at most \
                     {} s, thirty days)",
                        (deadline - arrival) / 1_000_000,
                        max_wait_us / 1_000_000
                    ),
                ));
            } else {
                Some(SimTime::checked_from_units(deadline, 1_000).ok_or_else(|| {
                    row.error(c(DEADLINE_US), format!("{deadline} µs is too large"))
                })?)
            };

        let (prefix, tail) = if group.is_empty() {
            if prefix > 0 {
                return Err(row.error(
                    c(PREFIX_LENGTH),
                    format!("is {prefix} but prefix_group is empty; a shared prefix needs a group"),
                ));
            }
            (
                0,
                if server_input > 0 {
                    server_input
                } else {
                    input
                },
            )
        } else {
            (prefix, input)
        };
        if prefix + tail == 0 {
            return Err(row.error(
                c(INPUT_TOKENS),
                "the prompt is empty (no prefix and no input tokens); vLLM refuses an empty prompt",
            ));
        }
        if prefix + tail > MAX_TOKENS {
            return Err(row.error(
                c(INPUT_TOKENS),
                format!(
                    "the prompt, {prefix} prefix + {tail} tokens, is more than the {MAX_TOKENS} \
                     pdsim accepts"
                ),
            ));
        }
        if let Err((previous, previous_line)) = self.order.check(arrival) {
            return Err(row.error(
                arrival_column,
                format!(
                    "{arrival} µs is earlier than {previous} µs on line {previous_line}; rows \
                     must be in arrival order"
                ),
            ));
        }
        let own = Prompt::new(vec![
            Segment {
                id: content_id(fnv1a64(group.as_bytes()), TRACEV2_PREFIX_SALT),
                tokens: prefix as u32,
            },
            Segment {
                id: content_id(line, TRACEV2_TAIL_SALT),
                tokens: tail as u32,
            },
        ]);
        let mut raised = 0;
        let output_tokens = raise_output(output, &mut raised);
        let (prompt, session, output_id) = if session_id.is_empty() {
            (own, None, None)
        } else {
            let previous = self.sessions.get(session_id);
            let expected = previous.map_or(0, |s| s.round + 1);
            if round != expected {
                return Err(row.error(
                    c(ROUND_INDEX),
                    match previous {
                        None => format!(
                            "is {round}, but this is the first row of session `{}`: a \
                             session's rounds are consecutive from 0",
                            quote(session_id)
                        ),
                        Some(p) => format!(
                            "is {round}, but session `{}`'s previous row has round {}: a \
                             session's rounds are consecutive from 0",
                            quote(session_id),
                            p.round
                        ),
                    },
                ));
            }
            let key = previous.map_or_else(|| fnv1a64(session_id.as_bytes()), |p| p.key);
            let (think_time, prompt) = match previous {
                None => (pdsim_core::SimDuration::ZERO, own),
                Some(p) => {
                    let think = if think_us > 0 {
                        think_us
                    } else if p.last_chunk_us > 0 && arrival >= p.last_chunk_us as u64 {
                        arrival - p.last_chunk_us as u64
                    } else {
                        arrival.saturating_sub(p.arrival_us)
                    };
                    let prompt = if !self.accumulate {
                        own
                    } else if reset > 0 {
                        Prompt::new(vec![Segment {
                            id: content_id(line, TRACEV2_TAIL_SALT),
                            tokens: reset as u32,
                        }])
                    } else {
                        let delta = if server_input > 0 && group.is_empty() {
                            server_input
                        } else {
                            input
                        };
                        if p.prompt.segments.len() + 2 > MAX_SESSION_SEGMENTS {
                            return Err(row.error(
                                c(ROUND_INDEX),
                                format!(
                                    "session `{}`'s prompt would hold more than \
                                     {MAX_SESSION_SEGMENTS} pieces (each turn adds its answer and \
                                     its input); pdsim bounds a conversation's history there \
                                     (an `input_tokens_reset` starts it anew)",
                                    quote(session_id)
                                ),
                            ));
                        }
                        let mut segments = p.prompt.segments.clone();
                        segments.push(Segment {
                            id: p.output_id,
                            tokens: p.output_tokens,
                        });
                        segments.push(Segment {
                            id: content_id(line, TRACEV2_TAIL_SALT),
                            tokens: delta as u32,
                        });
                        Prompt::new(segments)
                    };
                    if prompt.tokens() > MAX_TOKENS {
                        return Err(row.error(
                            c(INPUT_TOKENS),
                            format!(
                                "session `{}`'s prompt grows to {} tokens with this turn \
                                 (history, answer and new input), more than the {MAX_TOKENS} \
                                 pdsim accepts",
                                quote(session_id),
                                prompt.tokens()
                            ),
                        ));
                    }
                    let think = pdsim_core::SimDuration::from_us(think);
                    (think, prompt)
                }
            };
            let output_id = content_id(key ^ (round as u64).rotate_left(32), TRACEV2_OUTPUT_SALT);
            let turn = SessionTurn {
                key,
                round: u32::try_from(round).unwrap_or(u32::MAX),
                think_time,
                client: TurnClient::Session,
            };
            let state = Session {
                key,
                round,
                arrival_us: arrival,
                last_chunk_us,
                prompt: prompt.clone(),
                output_id,
                output_tokens,
            };
            (prompt, Some((turn, state)), Some(output_id))
        };
        let known = if slo_class.is_empty() {
            Some(0)
        } else {
            self.class_index.get(slo_class).copied()
        };
        if known.is_none() && self.classes.len() > u16::MAX as usize {
            return Err(row.error(c(SLO_CLASS), "more than 65535 distinct SLO classes"));
        }
        let class = known.unwrap_or_else(|| {
            let index = self.classes.len() as u16;
            self.class_index.insert(slo_class.to_string(), index);
            self.classes.push(slo_class.to_string());
            index
        });
        self.raised += raised;
        let session = session.map(|(turn, state)| {
            self.sessions.insert(session_id.to_string(), state);
            turn
        });
        // TraceV2 arrivals keep the trace's own origin.
        self.order.accept(arrival, line);
        Ok(RequestSpec {
            arrival: arrival_time,
            prompt,
            output_tokens,
            priority,
            slo_class: class,
            source_line: line,
            deadline,
            session,
            output_id,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::TraceV2Reader;
    use crate::{RequestSource, RequestSpec, TraceError};
    use pdsim_core::SimTime;
    use pdsim_spec::scenario::TraceHeader;
    use std::collections::BTreeMap;

    fn header() -> TraceHeader {
        TraceHeader {
            trace_version: 3,
            time_unit: "microseconds".into(),
            mode: "generated".into(),
            workload_seed: Some(42),
            server: None,
            goodput_slo_targets: BTreeMap::new(),
            session_context_growth: None,
        }
    }

    const HEAD: &str = "request_id,client_id,tenant_id,slo_class,vllm_priority,session_id,round_index,prefix_group,prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason,adapter\n";

    /// A data row with the given slo_class, priority, group, prefix, input,
    /// output and arrival; everything else plausible.
    fn row(
        class: &str,
        prio: u32,
        group: &str,
        prefix: u32,
        input: u32,
        output: u32,
        at: u64,
    ) -> String {
        format!(
            "7,c1,,{class},{prio},,0,{group},{prefix},true,{input},{output},{input},0,0,0,0,,0,0,{at},{at},0,0,0,ok,,,\n"
        )
    }

    fn read(body: &str) -> Vec<Result<RequestSpec, TraceError>> {
        let text = format!("{HEAD}{body}");
        TraceV2Reader::new(&header(), text.as_bytes(), "t.csv")
            .unwrap()
            .collect()
    }

    /// A session row: session, round, input, output, arrival, last chunk
    /// and the trailing think time (µs).
    fn turn(
        session: &str,
        round: u32,
        input: u32,
        output: u32,
        at: u64,
        last: u64,
        think: &str,
    ) -> String {
        format!(
            "7,c1,,,0,{session},{round},,0,true,{input},{output},{input},0,0,0,0,,0,0,{at},{at},0,{last},0,ok,,,,{think}\n"
        )
    }

    fn read_sessions(growth: Option<&str>, body: &str) -> Vec<Result<RequestSpec, TraceError>> {
        let mut h = header();
        h.session_context_growth = growth.map(str::to_string);
        let head = HEAD.trim_end().to_string() + ",think_time_us\n";
        let text = format!("{head}{body}");
        TraceV2Reader::new(&h, text.as_bytes(), "t.csv")
            .unwrap()
            .collect()
    }

    #[test]
    fn a_bad_or_missing_trailing_column_is_an_error_naming_it() {
        // Each used to index the layout with the trailing column's
        // position and panic.
        for (think, expected) in [
            ("-1", "-1"),
            ("abc", "abc"),
            ("1.5", "1.5"),
            (
                "31536000000001",
                "longer than the 31536000000000 µs (one year)",
            ),
        ] {
            let body = turn("a", 0, 100, 20, 1_000, 0, think);
            let e = read_sessions(None, &body).remove(0).unwrap_err();
            assert_eq!(e.column.as_deref(), Some("think_time_us"), "{think}");
            assert_eq!(e.line, 2, "{think}");
            assert!(e.to_string().contains(expected), "{think}: {e}");
        }
        // The row stops before the trailing column.
        let body = turn("a", 0, 100, 20, 1_000, 0, "");
        let short = body.trim_end().strip_suffix(',').unwrap().to_string() + "\n";
        let e = read_sessions(None, &short).remove(0).unwrap_err();
        assert_eq!(e.column.as_deref(), Some("think_time_us"), "{e}");
        assert!(e.to_string().contains("is missing"), "{e}");
        // The longest think time accepted: one year.
        let body = turn("a", 0, 100, 20, 1_000, 0, "31536000000000");
        assert!(read_sessions(None, &body).remove(0).is_ok());
        // `input_tokens_reset` after it.
        let mut h = header();
        h.session_context_growth = Some("accumulate".into());
        let head = HEAD.trim_end().to_string() + ",think_time_us,input_tokens_reset\n";
        for reset in ["-1", "x", "99999999999"] {
            let row =
                turn("a", 0, 100, 20, 1_000, 0, "0").trim_end().to_string() + "," + reset + "\n";
            let text = format!("{head}{row}");
            let e = TraceV2Reader::new(&h, text.as_bytes(), "t.csv")
                .unwrap()
                .next()
                .unwrap()
                .unwrap_err();
            assert_eq!(
                e.column.as_deref(),
                Some("input_tokens_reset"),
                "{reset}: {e}"
            );
        }
    }

    #[test]
    fn session_turns_carry_their_history_and_think_time() {
        use pdsim_core::SimDuration;
        let body = [
            turn("a", 0, 100, 20, 1_000, 900_000, ""),
            // Think time from the previous turn's last chunk: 1.2 s - 0.9 s.
            turn("a", 1, 30, 10, 1_200_000, 0, ""),
            // Recorded think time wins.
            turn("a", 2, 5, 7, 9_000_000, 0, "250000"),
            // A second session, its own history; no last chunk recorded, so
            // the gap between arrivals, as inference-sim derives it.
            turn("b", 0, 40, 4, 9_100_000, 0, ""),
            turn("b", 1, 8, 4, 9_600_000, 0, ""),
        ]
        .concat();
        let all: Vec<RequestSpec> = read_sessions(Some("accumulate"), &body)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let turns: Vec<_> = all.iter().map(|r| r.session.unwrap()).collect();
        assert_eq!(turns[0].round, 0);
        assert_eq!(turns[0].think_time, SimDuration::ZERO);
        assert_eq!(turns[1].think_time, SimDuration::from_us(300_000));
        assert_eq!(turns[2].think_time, SimDuration::from_us(250_000));
        assert_eq!(turns[4].think_time, SimDuration::from_us(500_000));
        assert_eq!(turns[0].key, turns[2].key);
        assert_ne!(turns[0].key, turns[3].key);
        // Accumulate: each prompt is the last one, its answer, new tokens.
        let tokens: Vec<u64> = all.iter().map(|r| r.prompt.tokens()).collect();
        assert_eq!(tokens, [100, 100 + 20 + 30, 150 + 10 + 5, 40, 40 + 4 + 8]);
        let (p0, p1) = (&all[0].prompt.segments, &all[1].prompt.segments);
        assert_eq!(
            &p1[..p0.len()],
            &p0[..],
            "turn 1 starts with turn 0's prompt"
        );
        assert_eq!(
            p1[p0.len()],
            pdsim_core::Segment {
                id: all[0].output_id.unwrap(),
                tokens: 20
            },
            "then turn 0's answer, under the id its tokens are generated with"
        );
        assert_ne!(all[0].output_id, all[1].output_id);
        // Without accumulate every prompt is its own; the timing is the same.
        let own: Vec<RequestSpec> = read_sessions(None, &body)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let tokens: Vec<u64> = own.iter().map(|r| r.prompt.tokens()).collect();
        assert_eq!(tokens, [100, 30, 5, 40, 8]);
        assert_eq!(own[1].session, all[1].session);
    }

    #[test]
    fn a_conversation_may_grow_to_exactly_the_token_limit() {
        // 4 M prompt + 1 M answer + 5 M new input is exactly the limit; one
        // more input token is over it, and the row names its input column.
        let read_growing = |input: u32| {
            let body = [
                turn("big", 0, 4_000_000, 1_000_000, 10, 0, ""),
                turn("big", 1, input, 1, 20, 0, ""),
            ]
            .concat();
            read_sessions(Some("accumulate"), &body)
        };
        let fits = read_growing(5_000_000);
        assert_eq!(fits[1].as_ref().unwrap().prompt.tokens(), crate::MAX_TOKENS);
        let over = read_growing(5_000_001);
        let e = over[1].as_ref().unwrap_err();
        assert_eq!(e.column.as_deref(), Some("input_tokens"));
        assert!(e.message.contains("10000001 tokens"), "{e}");
    }

    #[test]
    fn an_endless_conversation_is_refused_where_its_history_is_bounded() {
        let body: String = (0..4097)
            .map(|r| turn("long", r, 1, 1, r as u64 * 10, 0, ""))
            .collect();
        let results = read_sessions(Some("accumulate"), &body);
        // Turn k's prompt holds 1 + 2k pieces: turn 4095 is the last that fits.
        assert!(results[..4096].iter().all(Result::is_ok));
        let e = results[4096].as_ref().unwrap_err();
        assert_eq!(e.column.as_deref(), Some("round_index"));
        assert!(e.message.contains("8192 pieces"), "{e}");
    }

    #[test]
    fn session_rounds_must_be_consecutive_and_growth_known() {
        let body = [
            turn("a", 0, 100, 20, 1_000, 0, ""),
            turn("a", 2, 30, 10, 2_000, 0, ""),
        ]
        .concat();
        let e = read_sessions(Some("accumulate"), &body)
            .pop()
            .unwrap()
            .unwrap_err();
        assert_eq!((e.line, e.column.as_deref()), (3, Some("round_index")));
        assert!(e.message.contains("previous row has round 0"), "{e}");
        let e = read_sessions(None, &turn("z", 1, 1, 1, 1, 0, ""))
            .pop()
            .unwrap()
            .unwrap_err();
        assert!(e.message.contains("first row of session"), "{e}");
        let mut h = header();
        h.session_context_growth = Some("Accumulate".into());
        let e = TraceV2Reader::new(&h, HEAD.as_bytes(), "t.csv")
            .err()
            .unwrap();
        assert_eq!(e.column.as_deref(), Some("session_context_growth"));
    }

    #[test]
    fn reads_rows_with_groups_classes_and_priorities() {
        let body = [
            row("", 0, "sys", 300, 50, 10, 1_000),
            row("critical", 0, "sys", 300, 70, 0, 1_000),
            row("batch", 4, "", 0, 90, 12, 2_500),
            row("critical", 1, "other", 300, 5, 1, 3_000),
        ]
        .concat();
        let text = format!("{HEAD}{body}");
        let mut reader = TraceV2Reader::new(&header(), text.as_bytes(), "t.csv").unwrap();
        let all: Vec<RequestSpec> = reader.by_ref().map(Result::unwrap).collect();
        assert_eq!(all.len(), 4);
        assert_eq!(all[0].arrival, SimTime::from_us(1_000));
        assert_eq!(all[0].source_line, 2);
        assert_eq!(all[0].prompt.tokens(), 350);
        assert_eq!(all[0].prompt.segments[0].tokens, 300);
        assert_eq!(all[0].prompt.segments[0], all[1].prompt.segments[0]);
        assert_ne!(all[0].prompt.segments[1].id, all[1].prompt.segments[1].id);
        assert_ne!(all[3].prompt.segments[0].id, all[0].prompt.segments[0].id);
        assert_eq!(all[1].output_tokens, 1);
        assert_eq!(all[2].prompt.segments.len(), 1);
        assert_eq!(all[2].prompt.tokens(), 90);
        assert_eq!(
            all.iter()
                .map(|r| (r.slo_class, r.priority))
                .collect::<Vec<_>>(),
            [(0, 0), (1, 0), (2, 4), (1, 1)]
        );
        assert_eq!(reader.slo_classes(), ["", "critical", "batch"]);
        assert_eq!(reader.outputs_raised(), 1);
    }

    #[test]
    fn reads_the_layout_blis_writes_without_optional_columns() {
        // The first rows of shared/reference/inference-sim/blis-runs-here/roundtrip_trace.csv.
        let text = "request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason\n\
            0,distribution,,,,0,,0,false,185,1208,0,0,0,0,0,,300049999,0,49999,49999,78526,21674164,0,ok,,\n\
            1,distribution,,,,0,,0,false,478,689,0,0,0,0,0,,300099998,0,99998,99998,129752,11009381,0,ok,,\n";
        let all: Vec<RequestSpec> = TraceV2Reader::new(&header(), text.as_bytes(), "rt.csv")
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].arrival, SimTime::from_us(49_999));
        assert_eq!((all[0].prompt.tokens(), all[0].output_tokens), (185, 1208));
        assert_eq!(all[1].source_line, 3);
        // BLIS wrote each row's deadline as its arrival plus the 300 s
        // session-client default (`computeDeadline`, `generator.go`): an
        // absolute time on the arrivals' clock.
        assert_eq!(all[0].deadline, Some(SimTime::from_us(300_049_999)));
        assert_eq!(
            all[1].deadline.unwrap().since(all[1].arrival),
            pdsim_core::SimDuration::from_ms(300_000)
        );
    }

    #[test]
    fn deadline_us_is_absolute_and_zero_means_none() {
        let with = |deadline: u64, at: u64| {
            row("", 0, "", 0, 10, 10, at).replace(
                &format!(",,0,0,{at},{at},"),
                &format!(",,{deadline},0,{at},{at},"),
            )
        };
        let body = [with(0, 1_000), with(5_000, 1_000), with(2_000, 2_000)].concat();
        let all: Vec<RequestSpec> = read(&body).into_iter().map(Result::unwrap).collect();
        assert_eq!(all[0].deadline, None, "0 is no deadline");
        assert_eq!(all[1].deadline, Some(SimTime::from_us(5_000)));
        assert_eq!(
            all[2].deadline,
            Some(SimTime::from_us(2_000)),
            "at the arrival"
        );
        // Before the arrival: refused, as inference-sim refuses it.
        let bad = read(&with(999, 1_000));
        let err = bad[0].as_ref().unwrap_err();
        assert_eq!(err.column.as_deref(), Some("deadline_us"), "{err}");
        assert_eq!(err.line, 2);
        // More than thirty days after it: beyond any client.
        let bad = read(&with(1_000 + 2_592_000_000_001, 1_000));
        let err = bad[0].as_ref().unwrap_err();
        assert!(err.message.contains("beyond any real client"), "{err}");
        let longest = read(&with(1_000 + 2_592_000_000_000, 1_000));
        assert!(longest[0].as_ref().is_ok_and(|s| s.deadline.is_some()));
    }

    #[test]
    fn quoted_fields_may_hold_commas_and_line_breaks() {
        let failed =
            row("", 0, "", 0, 10, 10, 100).replace(",ok,,,", ",error,\"boom, at\r\nline 2\",,");
        let text = format!("{HEAD}{failed}\r\n{}", row("", 0, "", 0, 5, 5, 200));
        let all: Vec<RequestSpec> = TraceV2Reader::new(&header(), text.as_bytes(), "t.csv")
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            all.iter().map(|r| r.source_line).collect::<Vec<_>>(),
            [2, 5]
        );
    }

    #[test]
    fn server_input_tokens_win_without_a_group() {
        let text = format!("{HEAD}7,c,,,0,,0,,0,false,100,5,0,0,0,0,0,,0,130,9,9,0,0,0,ok,,,\n");
        let r = TraceV2Reader::new(&header(), text.as_bytes(), "t")
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        assert_eq!(r.prompt.tokens(), 130);
    }

    #[test]
    fn header_problems_are_refused_at_line_one_or_the_header_key() {
        let e = TraceV2Reader::new(&header(), "".as_bytes(), "t.csv")
            .err()
            .unwrap();
        assert_eq!((e.line, e.column), (1, None));
        let shifted = HEAD.replacen("tenant_id,", "", 1);
        let e = TraceV2Reader::new(&header(), shifted.as_bytes(), "t.csv")
            .err()
            .unwrap();
        assert_eq!((e.line, e.column.as_deref()), (1, Some("tenant_id")), "{e}");
        let short = "request_id,client_id\n";
        let e = TraceV2Reader::new(&header(), short.as_bytes(), "t.csv")
            .err()
            .unwrap();
        assert_eq!(e.column.as_deref(), Some("tenant_id"));
        assert!(e.message.contains("missing"), "{e}");
        let mut ms = header();
        ms.time_unit = "ms".into();
        let e = TraceV2Reader::new(&ms, HEAD.as_bytes(), "t.csv")
            .err()
            .unwrap();
        assert_eq!((e.line, e.column.as_deref()), (0, Some("time_unit")));
        let mut v9 = header();
        v9.trace_version = 9;
        let e = TraceV2Reader::new(&v9, HEAD.as_bytes(), "t.csv")
            .err()
            .unwrap();
        assert_eq!(e.column.as_deref(), Some("trace_version"));
    }

    #[test]
    fn row_errors_name_line_and_column() {
        let good = row("", 0, "", 0, 10, 10, 100);
        let cases: Vec<(String, &str, &str)> = vec![
            (good.replacen("7,", "x,", 1), "request_id", "not an integer"),
            (
                good.replacen("c1,,,0,,", "c1,,,-1,,", 1),
                "vllm_priority",
                "negative",
            ),
            (good.replace("true", "yes"), "streaming", "not a boolean"),
            (
                row("", 0, "g", 0, 10, 10, 100).replace(",g,0,", ",g,-5,"),
                "prefix_length",
                "negative",
            ),
            (
                row("", 0, "", 7, 10, 10, 100),
                "prefix_length",
                "prefix_group is empty",
            ),
            (row("", 0, "", 0, 0, 10, 100), "input_tokens", "empty"),
            (
                row("", 0, "", 0, 10_000_001, 10, 100),
                "input_tokens",
                "more than",
            ),
            (
                row("", 0, "", 0, 10, 10, 100).replace(",10,10,10,", ",10,-10,10,"),
                "output_tokens",
                "negative",
            ),
            (
                good.replace(",0,0,0,0,,", ",0,0,0,1.5,,"),
                "reason_ratio",
                "[0, 1]",
            ),
            (
                good.replace(",,0,0,100,", ",,50,0,100,"),
                "deadline_us",
                "before the arrival",
            ),
            (row("", 0, "", 0, 10, 10, 50), "arrival_time_us", "line 2"),
            ("7,c,,\n".to_string(), "vllm_priority", "is missing"),
        ];
        for (bad, column, needle) in &cases {
            let all = read(&format!("{good}{bad}"));
            assert!(all[0].is_ok(), "{:?}", all[0]);
            let e = all[1].clone().expect_err(bad);
            assert_eq!(e.file, "t.csv");
            assert_eq!(e.line, 3, "{bad}: {e}");
            assert_eq!(e.column.as_deref(), Some(*column), "{bad}: {e}");
            assert!(e.message.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn a_utf8_bom_is_accepted_and_long_fields_are_quoted_short() {
        let text = format!("\u{feff}{HEAD}{}", row("", 0, "", 0, 5, 5, 200));
        let all: Vec<_> = TraceV2Reader::new(&header(), text.as_bytes(), "t.csv")
            .unwrap()
            .collect();
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].as_ref().unwrap().source_line, 2);
        let huge = "9x".repeat(500_000);
        let bad = row("", 0, "", 0, 5, 5, 200).replacen("7,", &format!("{huge},"), 1);
        let e = read(&bad).pop().unwrap().unwrap_err();
        assert_eq!((e.line, e.column.as_deref()), (2, Some("request_id")));
        assert!(e.to_string().len() < 300, "{e}");
        assert!(e.message.contains("(1000000 bytes)"), "{e}");
    }

    #[test]
    fn every_turn_of_every_session_answers_with_its_own_content() {
        // An answer's content id is keyed by session and round, so a later
        // turn's history holds each earlier answer as distinct content,
        // never one another's. 24 sessions of 4 rounds: 96 distinct ids.
        let body: String = (0..24)
            .flat_map(|s| {
                (0..4).map(move |r| {
                    turn(
                        &format!("s{s}"),
                        r,
                        10,
                        3,
                        1_000 * (100 * s + r + 1) as u64,
                        0,
                        "",
                    )
                })
            })
            .collect();
        let all: Vec<RequestSpec> = read_sessions(Some("accumulate"), &body)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(all.len(), 96);
        let ids: std::collections::BTreeSet<u64> = all
            .iter()
            .map(|r| r.output_id.expect("a session turn"))
            .collect();
        assert_eq!(ids.len(), 96, "two turns share an answer's content");
    }

    #[test]
    fn a_prompt_over_the_token_limit_is_refused_whatever_its_split() {
        // The limit is on prefix + input, so a prompt of no prefix and one
        // token over the limit is refused as surely as a split one.
        let over = (crate::MAX_TOKENS + 1) as u32;
        let max = crate::MAX_TOKENS as u32;
        // (max, 1): each part within the limit, their sum one over it.
        for (prefix, input) in [(0, over), (over - 5, 5), (max, 1)] {
            let text = format!("{HEAD}{}", row("", 0, "g", prefix, input, 1, 0));
            let rows: Vec<_> = TraceV2Reader::new(&header(), text.as_bytes(), "t.csv")
                .unwrap()
                .collect();
            let e = rows[0].as_ref().expect_err("too long");
            assert!(e.message.contains("is more than the 10000000"), "{e}");
        }
        let text = format!(
            "{HEAD}{}",
            row("", 0, "g", 0, crate::MAX_TOKENS as u32, 1, 0)
        );
        let rows: Vec<_> = TraceV2Reader::new(&header(), text.as_bytes(), "t.csv")
            .unwrap()
            .collect();
        assert!(rows[0].is_ok(), "exactly the limit is accepted");
    }

    #[test]
    fn an_arrival_too_large_to_scale_is_refused_apart_from_one_past_the_year() {
        // Past u64::MAX / 1000 µs the ns value would overflow; at that bound
        // it is a time pdsim could hold, refused for lying past the year.
        let bound = u64::MAX / 1_000;
        let message = |at: u64| {
            read(&row("", 0, "", 0, 10, 5, at))
                .pop()
                .unwrap()
                .unwrap_err()
                .to_string()
        };
        assert!(
            message(bound + 1).contains("is too large"),
            "{}",
            message(bound + 1)
        );
        assert!(message(bound).contains("beyond"), "{}", message(bound));
    }
}
