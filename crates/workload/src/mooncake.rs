//! The Mooncake trace reader (JSON Lines).
//!
//! Mooncake's FAST'25 traces (Qin et al., "Mooncake: Trading More Storage
//! for Less Computation", FAST 2025; files in `kvcache-ai/Mooncake`
//! `FAST25-release/traces/`) are the only public traces that say which
//! prompts share content. Each line is one request:
//!
//! ```json
//! {"timestamp": 3052, "input_length": 7234, "output_length": 794, "hash_ids": [0, 28, 29]}
//! ```
//!
//! `timestamp` is the arrival in milliseconds since the trace began, the
//! lengths are tokens, and `hash_ids` holds one id per 512-token block of the
//! prompt, the last block possibly partial. Ids are remapped chained prefix
//! hashes: two requests share a prefix exactly as long as their id lists
//! agree from the start. That is the content addressing of `DESIGN.md`
//! decision 4 at a 512-token granularity, so each id becomes one segment and
//! the engine's 16-token block hashes follow from the segments.
//!
//! Choices where the format leaves room, each made strictly enough that a
//! broken file is reported rather than guessed at:
//!
//! - Arrivals are taken relative to the first row, and rows must be in
//!   arrival order (equal timestamps are common and keep file order); a row
//!   that goes back in time is an error naming both lines, because a
//!   streaming reader cannot sort.
//! - A row whose `input_length` is at most `512·(n−1)` for `n` listed ids has
//!   a last block with no tokens in it, which Mooncake never writes: error.
//!   A row whose `input_length` exceeds `512·n` gets the excess as one
//!   segment unique to that row (generators that list only the shared
//!   blocks write such rows).
//! - `input_length` must be at least 1 (vLLM refuses an empty prompt) and no
//!   length may exceed [`MAX_TOKENS`](crate::MAX_TOKENS).
//! - `output_length` 0 is replayed as 1 and counted
//!   ([`RequestSource::outputs_raised`]).
//! - A key other than the four is an error naming the file, the line and
//!   the key ([`MOONCAKE_KEYS`] says why).

use crate::lines::{Line, Lines};
use crate::{
    ArrivalOrder, MOONCAKE_SALT, MOONCAKE_UNIQUE_SALT, RequestSource, RequestSpec, TraceError,
    arrival_at, check_tokens, raise_output,
};
use pdsim_core::prompt::content_id;
use pdsim_core::{Prompt, Segment};
use pdsim_spec::problem::quote;
use serde_json::{Map, Value};
use std::io::BufRead;

/// Tokens per `hash_ids` entry in Mooncake's traces.
pub const MOONCAKE_BLOCK_TOKENS: u32 = 512;

/// The keys of a Mooncake row, and the only ones read.
///
/// Every row of Mooncake's own FAST'25 traces (`FAST25-release/traces/`;
/// the conversation and synthetic files in `shared/traces/`, 16,024 rows)
/// has exactly these four keys, and the format's other descriptions (the
/// README of Dynamo's `benchmarks/data_generator`, AIPerf's trace-replay
/// documentation) list these four and no more. The keys other tools add
/// to Mooncake-style files change what is replayed: AIPerf's
/// `MooncakeTrace` (`src/aiperf/dataset/loader/models.py`) takes
/// `session_id` and `delay` (a turn sent a delay after its session's
/// previous turn, not at a timestamp) and `text_input` or `messages` (the
/// prompt itself), and its `BailianTrace` rows add `chat_id`,
/// `parent_chat_id` and `turn` to a timestamp in seconds. Reading such a
/// row by the four keys alone would replay another workload than the file
/// describes, so any other key is refused, naming the file, the line and
/// the key.
pub const MOONCAKE_KEYS: [&str; 4] = ["timestamp", "input_length", "output_length", "hash_ids"];

/// Reads a Mooncake JSON Lines trace one line at a time.
pub struct MooncakeReader<R> {
    lines: Lines<R>,
    state: State,
}

/// Everything but the input, so a line borrowed from the input can be
/// parsed while the state is updated.
struct State {
    name: String,
    /// Timestamps (ms) of the first valid row, the origin of arrivals, and
    /// of the latest.
    order: ArrivalOrder,
    raised: u64,
}

impl<R: BufRead> MooncakeReader<R> {
    /// A reader of `input`; `name` is the file name used in messages.
    pub fn new(input: R, name: impl Into<String>) -> MooncakeReader<R> {
        MooncakeReader {
            lines: Lines::new(input),
            state: State {
                name: name.into(),
                order: ArrivalOrder::default(),
                raised: 0,
            },
        }
    }
}

impl<R: BufRead> Iterator for MooncakeReader<R> {
    type Item = Result<RequestSpec, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let state = &mut self.state;
            return match self.lines.next_line()? {
                // Blank lines (a trailing newline, a blank line between
                // rows) carry no request.
                Line::Text(_, text) if text.trim().is_empty() => continue,
                Line::Text(line, text) => Some(state.parse(line, text)),
                Line::Bad(line, why) => Some(Err(state.error(line, None, why))),
                Line::Failed(line, e) => Some(Err(state.error(
                    line,
                    None,
                    format!("cannot read the trace: {e}"),
                ))),
            };
        }
    }
}

impl<R: BufRead> RequestSource for MooncakeReader<R> {
    fn outputs_raised(&self) -> u64 {
        self.state.raised
    }
}

impl State {
    fn error(&self, line: u64, key: Option<&str>, message: impl Into<String>) -> TraceError {
        TraceError::new(&self.name, line, key, message)
    }

    fn parse(&mut self, line: u64, text: &str) -> Result<RequestSpec, TraceError> {
        let row = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(row)) => row,
            Ok(other) => {
                return Err(self.error(
                    line,
                    None,
                    format!("a row must be a JSON object, found {}", kind(&other)),
                ));
            }
            Err(e) => return Err(self.error(line, None, format!("not valid JSON: {e}"))),
        };
        if let Some(key) = row.keys().find(|k| !MOONCAKE_KEYS.contains(&k.as_str())) {
            return Err(self.error(
                line,
                Some(&quote(key)),
                format!(
                    "is not a key of a Mooncake trace row, which has only {}; \
                     pdsim does not replay a row by some of its keys and ignore the rest",
                    MOONCAKE_KEYS.join(", ")
                ),
            ));
        }
        let key_error = |(key, message): (&str, String)| self.error(line, Some(key), message);

        let timestamp = uint(&row, "timestamp").map_err(key_error)?;
        if timestamp > u64::MAX / 1_000_000 {
            return Err(key_error((
                "timestamp",
                format!("{timestamp} ms is too large"),
            )));
        }
        let input = uint(&row, "input_length").map_err(key_error)?;
        if input == 0 {
            return Err(key_error((
                "input_length",
                "must be at least 1 (vLLM refuses an empty prompt)".into(),
            )));
        }
        check_tokens(input).map_err(|message| key_error(("input_length", message)))?;
        let output = uint(&row, "output_length").map_err(key_error)?;
        check_tokens(output).map_err(|message| key_error(("output_length", message)))?;
        let ids = match row.get("hash_ids") {
            None => return Err(key_error(("hash_ids", "is missing".into()))),
            Some(Value::Array(ids)) => ids,
            Some(other) => {
                return Err(key_error((
                    "hash_ids",
                    format!("must be a list of integers, found {}", kind(other)),
                )));
            }
        };
        let block = MOONCAKE_BLOCK_TOKENS as u64;
        let blocks = ids.len() as u64;
        if blocks > 0 && input <= block.saturating_mul(blocks - 1) {
            return Err(key_error((
                "hash_ids",
                format!(
                    "lists {blocks} blocks of {block} tokens, but input_length {input} fills \
                     only {} (one id per block; the last block may be partial but not empty, \
                     so input_length must exceed {block}·({blocks}−1) = {})",
                    input.div_ceil(block),
                    block * (blocks - 1)
                ),
            )));
        }
        let mut segments = Vec::with_capacity(ids.len() + 1);
        for (i, id) in ids.iter().enumerate() {
            let Some(id) = id.as_u64() else {
                return Err(key_error((
                    "hash_ids",
                    format!(
                        "element {i} ({}) is not a non-negative integer",
                        quote(&id.to_string())
                    ),
                )));
            };
            let start = i as u64 * block;
            let tokens = block.min(input - start);
            segments.push(Segment {
                id: content_id(id, MOONCAKE_SALT),
                tokens: tokens as u32,
            });
        }
        let listed = block * blocks;
        if input > listed {
            segments.push(Segment {
                id: content_id(line, MOONCAKE_UNIQUE_SALT),
                tokens: (input - listed) as u32,
            });
        }

        if let Err((previous, previous_line)) = self.order.check(timestamp) {
            return Err(key_error((
                "timestamp",
                format!(
                    "{timestamp} ms is earlier than {previous} ms on line {previous_line}; \
                     rows must be in arrival order"
                ),
            )));
        }
        let arrival = arrival_at(
            self.order.offset(timestamp),
            1_000_000,
            "ms",
            "after the first row",
        )
        .map_err(|message| key_error(("timestamp", message)))?;
        self.order.accept(timestamp, line);

        Ok(RequestSpec {
            arrival,
            prompt: Prompt::new(segments),
            output_tokens: raise_output(output, &mut self.raised),
            priority: 0,
            slo_class: 0,
            source_line: line,
            deadline: None,
            session: None,
            output_id: None,
        })
    }
}

/// A required non-negative integer key, or the key and what is wrong.
fn uint<'a>(row: &Map<String, Value>, key: &'a str) -> Result<u64, (&'a str, String)> {
    match row.get(key) {
        None => Err((key, "is missing".into())),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(v) => Ok(v),
            None if n.as_i64().is_some() => Err((key, format!("{n} is negative"))),
            None => Err((key, format!("{} is not an integer", quote(&n.to_string())))),
        },
        Some(other) => Err((key, format!("must be an integer, found {}", kind(other)))),
    }
}

/// The JSON type of a value, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::MooncakeReader;
    use crate::{MOONCAKE_SALT, RequestSource, RequestSpec, TraceError};
    use pdsim_core::SimTime;
    use pdsim_core::prompt::{block_hashes, content_id};

    fn read(text: &str) -> Vec<Result<RequestSpec, TraceError>> {
        MooncakeReader::new(text.as_bytes(), "t.jsonl").collect()
    }

    fn only_error(text: &str) -> TraceError {
        let mut all = read(text);
        assert_eq!(all.len(), 1, "{all:?}");
        all.pop().unwrap().expect_err("an error")
    }

    #[test]
    fn reads_rows_with_shared_prefixes() {
        let text = concat!(
            "{\"timestamp\": 100, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [0, 1, 2]}\n",
            "{\"timestamp\": 100, \"input_length\": 700, \"output_length\": 9, \"hash_ids\": [0, 3]}\n",
            "\n",
            "{\"timestamp\": 2600, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [7]}\n",
        );
        let all: Vec<RequestSpec> = read(text).into_iter().map(Result::unwrap).collect();
        assert_eq!(all.len(), 3);
        let a = &all[0];
        assert_eq!(a.arrival, SimTime::ZERO);
        assert_eq!(a.prompt.tokens(), 1100);
        assert_eq!(a.prompt.segments.len(), 3);
        assert_eq!(a.prompt.segments[2].tokens, 1100 - 1024);
        assert_eq!(a.prompt.segments[0].id, content_id(0, MOONCAKE_SALT));
        assert_eq!(a.output_tokens, 5);
        assert_eq!(a.source_line, 1);
        let b = &all[1];
        assert_eq!(b.arrival, SimTime::ZERO);
        assert_eq!(b.prompt.segments[0], a.prompt.segments[0]);
        assert_ne!(b.prompt.segments[1].id, a.prompt.segments[1].id);
        // The shared 512-token block is 32 shared vLLM blocks, no more.
        let (ha, hb) = (block_hashes(&a.prompt, 16), block_hashes(&b.prompt, 16));
        assert_eq!(ha[..32], hb[..32]);
        assert_ne!(ha[32], hb[32]);
        let c = &all[2];
        assert_eq!(c.arrival, SimTime::from_ms(2500));
        assert_eq!(c.source_line, 4);
    }

    #[test]
    fn excess_beyond_the_listed_blocks_is_a_unique_segment() {
        let text = "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [4]}\n\
                    {\"timestamp\": 0, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [4]}\n\
                    {\"timestamp\": 0, \"input_length\": 20, \"output_length\": 3, \"hash_ids\": []}";
        let all: Vec<RequestSpec> = read(text).into_iter().map(Result::unwrap).collect();
        assert_eq!(all[0].prompt.segments.len(), 2);
        assert_eq!(all[0].prompt.segments[1].tokens, 88);
        assert_eq!(all[0].prompt.segments[0], all[1].prompt.segments[0]);
        assert_ne!(all[0].prompt.segments[1].id, all[1].prompt.segments[1].id);
        assert_eq!(all[2].prompt.tokens(), 20);
    }

    #[test]
    fn blocks_are_512_tokens_and_the_last_may_be_partial() {
        let text = "{\"timestamp\": 0, \"input_length\": 1064, \"output_length\": 3, \"hash_ids\": [1, 2, 3]}";
        let all: Vec<_> = MooncakeReader::new(text.as_bytes(), "t").collect();
        let r = all[0].as_ref().unwrap();
        let lengths: Vec<u32> = r.prompt.segments.iter().map(|s| s.tokens).collect();
        assert_eq!(lengths, [512, 512, 40]);
    }

    /// A timestamp whose nanoseconds would overflow is refused at the row,
    /// by key; the largest that fits is not refused as too large.
    #[test]
    fn a_timestamp_past_the_nanosecond_range_is_refused_as_too_large() {
        let row = |ms: u64| {
            format!(
                "{{\"timestamp\": {ms}, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [1]}}"
            )
        };
        let bound = u64::MAX / 1_000_000;
        let e = only_error(&row(bound + 1));
        assert_eq!(e.column.as_deref(), Some("timestamp"), "{e}");
        assert!(e.message.contains("is too large"), "{e}");
        for r in read(&row(bound)) {
            if let Err(e) = r {
                assert!(!e.message.contains("is too large"), "{e}");
            }
        }
    }

    #[test]
    fn zero_output_becomes_one_and_is_counted() {
        let text =
            "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 0, \"hash_ids\": [1]}";
        let mut reader = MooncakeReader::new(text.as_bytes(), "t");
        assert_eq!(reader.next().unwrap().unwrap().output_tokens, 1);
        assert_eq!(reader.outputs_raised(), 1);
        assert_eq!(reader.slo_classes(), [String::new()]);
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let cases: &[(&str, Option<&str>, &str)] = &[
            ("{\"timestamp\": 0", None, "not valid JSON"),
            ("[1, 2]", None, "JSON object"),
            (
                "{\"input_length\": 4, \"output_length\": 1, \"hash_ids\": [1]}",
                Some("timestamp"),
                "missing",
            ),
            (
                "{\"timestamp\": -1, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [1]}",
                Some("timestamp"),
                "negative",
            ),
            (
                "{\"timestamp\": 1.5, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [1]}",
                Some("timestamp"),
                "not an integer",
            ),
            (
                "{\"timestamp\": 0, \"input_length\": \"4\", \"output_length\": 1, \"hash_ids\": [1]}",
                Some("input_length"),
                "found a string",
            ),
            (
                "{\"timestamp\": 0, \"input_length\": 0, \"output_length\": 1, \"hash_ids\": []}",
                Some("input_length"),
                "at least 1",
            ),
            (
                "{\"timestamp\": 0, \"input_length\": 10000001, \"output_length\": 1, \"hash_ids\": []}",
                Some("input_length"),
                "more than",
            ),
            (
                "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 2.0, \"hash_ids\": [1]}",
                Some("output_length"),
                "not an integer",
            ),
            (
                "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 20000000, \"hash_ids\": [1]}",
                Some("output_length"),
                "more than",
            ),
            (
                "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1}",
                Some("hash_ids"),
                "missing",
            ),
            (
                "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": 3}",
                Some("hash_ids"),
                "list of integers",
            ),
            (
                "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [-3]}",
                Some("hash_ids"),
                "element 0",
            ),
            (
                "{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 1, \"hash_ids\": [1, 2]}",
                Some("hash_ids"),
                "512·(2−1)",
            ),
            // AIPerf's session keys change when a turn is sent: refused,
            // before the four keys are read.
            (
                "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [1], \"session_id\": \"s1\"}",
                Some("session_id"),
                "not a key of a Mooncake trace row, which has only timestamp, input_length, output_length, hash_ids",
            ),
            (
                "{\"delay\": 500, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [1]}",
                Some("delay"),
                "not a key of a Mooncake trace row",
            ),
            (
                "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [1], \"priority\": 2}",
                Some("priority"),
                "not a key of a Mooncake trace row",
            ),
        ];
        for (row, key, needle) in cases {
            let text = format!(
                "{{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [9]}}\n{row}\n"
            );
            let all = read(&text);
            assert_eq!(all.len(), 2, "{row}");
            assert!(all[0].is_ok());
            let e = all[1].clone().expect_err(row);
            assert_eq!(e.file, "t.jsonl");
            assert_eq!(e.line, 2, "{row}");
            assert_eq!(e.column.as_deref(), *key, "{row}: {e}");
            assert!(e.message.contains(needle), "{row}: {e}");
        }
    }

    #[test]
    fn out_of_order_rows_are_errors_naming_both_lines_and_reading_goes_on() {
        let text = "{\"timestamp\": 50, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n\
                    {\"timestamp\": 40, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n\
                    {\"timestamp\": 60, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [1]}\n";
        let all = read(text);
        let e = all[1].clone().unwrap_err();
        assert_eq!((e.line, e.column.as_deref()), (2, Some("timestamp")));
        assert!(e.message.contains("line 1"), "{e}");
        assert_eq!(all[2].as_ref().unwrap().arrival, SimTime::from_ms(10));
    }

    #[test]
    fn bad_utf8_is_an_error_of_its_line() {
        let e = MooncakeReader::new(&b"\xff\xfe\n"[..], "t")
            .next()
            .unwrap()
            .unwrap_err();
        assert_eq!((e.line, e.column), (1, None));
        let e = only_error(
            "{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [1, 2]}",
        );
        assert_eq!(e.column.as_deref(), Some("hash_ids"));
    }

    #[test]
    fn a_utf8_bom_is_accepted() {
        let text = "\u{feff}{\"timestamp\": 5, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [1]}\n";
        let all = read(text);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].as_ref().unwrap().prompt.tokens(), 4);
    }

    #[test]
    fn a_line_over_the_limit_is_refused_by_number_and_reading_goes_on() {
        let good =
            "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1, \"hash_ids\": [9]}\n";
        let huge = format!(
            "{{\"timestamp\": 0, \"pad\": \"{}\"}}\n",
            "p".repeat(2 << 20)
        );
        let all = read(&format!("{good}{huge}{good}"));
        assert_eq!(all.len(), 3);
        let e = all[1].clone().unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.line, e.column.as_deref()),
            ("t.jsonl", 2, None)
        );
        assert!(e.message.contains("1 MiB"), "{e}");
        assert_eq!(all[2].as_ref().unwrap().source_line, 3);
    }

    #[test]
    fn a_long_unknown_key_is_quoted_short() {
        let key = "k".repeat(100_000);
        let text = format!(
            "{{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [1], \"{key}\": 1}}\n"
        );
        let e = only_error(&text);
        assert!(e.message.contains("not a key of a Mooncake"), "{e}");
        assert!(e.to_string().len() < 500, "{e}");
    }

    #[test]
    fn a_long_value_is_quoted_short() {
        let ids = vec!["1"; 300_000].join(",");
        let text = format!(
            "{{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [[{ids}]]}}\n"
        );
        let e = only_error(&text);
        assert_eq!(e.column.as_deref(), Some("hash_ids"));
        assert!(e.to_string().len() < 300, "{e}");
    }
}
