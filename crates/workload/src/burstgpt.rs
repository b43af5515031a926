//! The BurstGPT trace reader (CSV).
//!
//! BurstGPT (`HPMLL/BurstGPT`; Wang et al., "BurstGPT: A Real-world Workload
//! Dataset to Optimize LLM Serving Systems", 2024) logs ChatGPT and GPT-4
//! requests of an Azure OpenAI service: arrival times and token counts, no
//! text. Its release files have one of two headers:
//!
//! ```text
//! Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
//! Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type
//! ```
//!
//! Columns are found by their header names, so their order does not matter
//! and the columns pdsim does not use (`Model`, `Total tokens`, `Log Type`,
//! `Elapsed time`, `Session ID`) may be absent. `Timestamp` is seconds
//! (an integer or a decimal fraction) on the trace's own clock; arrivals are
//! relative to the first row, and rows must be in arrival order.
//! `Request tokens` must be at least 1 (vLLM refuses an empty prompt);
//! `Response tokens` 0 marks a request that failed in the logged service
//! (the `BurstGPT_without_fails` files leave those rows out) and is replayed
//! as 1 token and counted, as the other readers do.
//!
//! The trace says nothing about content, so every prompt is one segment
//! unique to its row. A `Session ID` groups a conversation's requests, but
//! without their text or lengths of shared history it does not say which
//! tokens one turn shares with the last, so it gives no prefix sharing, and
//! its turns arrive at their logged times; the reader says so in a note
//! ([`BurstGptReader::notes`]) when the header has the column.

use crate::lines::{CsvRecords, Fields};
use crate::{
    ArrivalOrder, BURSTGPT_SALT, RequestSource, RequestSpec, TraceError, check_tokens, parse_count,
    raise_output,
};
use pdsim_core::prompt::content_id;
use pdsim_core::{Prompt, Segment};
use pdsim_spec::problem::quote;
use std::io::BufRead;

/// Reads a BurstGPT trace one row at a time.
pub struct BurstGptReader<R> {
    records: CsvRecords<R>,
    state: State,
    notes: Vec<String>,
}

/// Everything but the input.
struct State {
    name: String,
    /// Indices of `Timestamp`, `Request tokens`, `Response tokens`.
    columns: [usize; 3],
    order: ArrivalOrder,
    raised: u64,
}

/// The three columns pdsim reads, by header name.
const COLUMNS: [&str; 3] = ["Timestamp", "Request tokens", "Response tokens"];

/// The header of BurstGPT's release files without sessions, for messages.
pub const HEADER: &str = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type";

impl<R: BufRead> BurstGptReader<R> {
    /// A reader of `input`; `name` is the file name used in messages. Reads
    /// the header row and finds the columns.
    pub fn new(input: R, name: impl Into<String>) -> Result<BurstGptReader<R>, TraceError> {
        let name = name.into();
        let mut records = CsvRecords::new(input);
        let names = records.header(
            &name,
            &format!("the file is empty; a BurstGPT trace starts with the header row {HEADER}"),
        )?;
        let mut columns = [0; 3];
        for (slot, wanted) in columns.iter_mut().zip(COLUMNS) {
            *slot = names.iter().position(|n| n == wanted).ok_or_else(|| {
                TraceError::new(&name, 1, Some(wanted), "is missing from the header row")
            })?;
        }
        let mut notes = Vec::new();
        if names.iter().any(|n| n == "Session ID") {
            notes.push(
                "the `Session ID` column groups a conversation's requests, but BurstGPT holds \
                 no text, so which tokens a turn shares with the one before is unknown: every \
                 prompt is unique to its row, and turns arrive at their logged times"
                    .to_string(),
            );
        }
        let state = State {
            name,
            columns,
            order: ArrivalOrder::default(),
            raised: 0,
        };
        Ok(BurstGptReader {
            records,
            state,
            notes,
        })
    }

    /// What the reader cannot take from the file, one message each, for
    /// the run to print.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }
}

impl<R: BufRead> Iterator for BurstGptReader<R> {
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

impl<R: BufRead> RequestSource for BurstGptReader<R> {
    fn outputs_raised(&self) -> u64 {
        self.state.raised
    }
}

impl State {
    fn parse(&mut self, line: u64, record: &Fields) -> Result<RequestSpec, TraceError> {
        let error = |i: usize, message: String| {
            TraceError::new(&self.name, line, Some(COLUMNS[i]), message)
        };
        let mut fields = [""; 3];
        for (i, field) in fields.iter_mut().enumerate() {
            *field = record.get(self.columns[i]).ok_or_else(|| {
                error(
                    i,
                    format!("is missing: the row has {} columns", record.len()),
                )
            })?;
        }
        let time = parse_seconds(fields[0].trim()).ok_or_else(|| {
            error(
                0,
                format!(
                    "`{}` is not a number of seconds (digits, optionally a decimal point and \
                     more digits; at most 18,000,000,000 s)",
                    quote(fields[0])
                ),
            )
        })?;
        let mut counts = [0u64; 2];
        for (i, count) in counts.iter_mut().enumerate() {
            *count = parse_count(fields[i + 1].trim())
                .and_then(check_tokens)
                .map_err(|message| error(i + 1, message))?;
        }
        let [input, output] = counts;
        if input == 0 {
            return Err(error(
                1,
                "must be at least 1 (vLLM refuses an empty prompt)".into(),
            ));
        }
        let arrival = self
            .order
            .arrive(time, line, &quote(fields[0]))
            .map_err(|message| error(0, message))?;
        Ok(RequestSpec {
            arrival,
            prompt: Prompt::new(vec![Segment {
                id: content_id(line, BURSTGPT_SALT),
                tokens: input as u32,
            }]),
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

/// Nanoseconds in `text`, a non-negative number of seconds written as digits
/// with an optional decimal point and fraction (`5`, `0.000001`,
/// `5270414.0`). Digits past the ninth of the fraction are below a
/// nanosecond and are dropped. `None` for anything else, or beyond
/// 18,000,000,000 s (about 570 years: far past the one-year replay horizon,
/// so the caller's horizon check names the row, and within the nanoseconds
/// a `u64` holds, about 584 years).
fn parse_seconds(text: &str) -> Option<u64> {
    const MAX_SECONDS: u64 = 18_000_000_000;
    let (whole, fraction) = match text.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (text, None),
    };
    if whole.is_empty() && fraction.is_none_or(str::is_empty) {
        return None;
    }
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || !fraction.is_none_or(digits) {
        return None;
    }
    let seconds: u64 = if whole.is_empty() {
        0
    } else {
        // More than 11 digits is beyond the bound whatever they are.
        if whole.trim_start_matches('0').len() > 11 {
            return None;
        }
        whole.parse().ok()?
    };
    if seconds > MAX_SECONDS {
        return None;
    }
    let mut nanos = 0u64;
    if let Some(f) = fraction {
        for (i, b) in f.bytes().take(9).enumerate() {
            nanos += (b - b'0') as u64 * 10u64.pow(8 - i as u32);
        }
    }
    Some(seconds * 1_000_000_000 + nanos)
}

#[cfg(test)]
mod tests {
    use super::{BurstGptReader, parse_seconds};
    use crate::{RequestSource, RequestSpec, TraceError};
    use pdsim_core::SimTime;

    fn read(text: &str) -> Vec<Result<RequestSpec, TraceError>> {
        BurstGptReader::new(text.as_bytes(), "b.csv")
            .unwrap()
            .collect()
    }

    #[test]
    fn seconds_are_read_exactly() {
        assert_eq!(parse_seconds("0"), Some(0));
        assert_eq!(parse_seconds("5"), Some(5_000_000_000));
        assert_eq!(parse_seconds("0.000001"), Some(1_000));
        assert_eq!(parse_seconds("5270414.0"), Some(5_270_414_000_000_000));
        assert_eq!(parse_seconds(".5"), Some(500_000_000));
        assert_eq!(parse_seconds("7."), Some(7_000_000_000));
        assert_eq!(parse_seconds("1.0000000019"), Some(1_000_000_001));
        // Eleven digits are read; the bound itself is accepted, one more
        // second is not (its nanoseconds would not fit in a u64 far beyond).
        assert_eq!(
            parse_seconds("12345678901"),
            Some(12_345_678_901_000_000_000)
        );
        assert_eq!(
            parse_seconds("18000000000"),
            Some(18_000_000_000_000_000_000)
        );
        assert_eq!(parse_seconds("18000000001"), None);
        assert_eq!(parse_seconds("99999999999"), None);
        for bad in [
            "",
            ".",
            "-1",
            "1e3",
            "1,5",
            "nan",
            "inf",
            " 1",
            "1.2.3",
            "99999999999999",
        ] {
            assert_eq!(parse_seconds(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_both_release_headers_relative_to_the_first_row() {
        let v1 = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                  5,ChatGPT,472,18,490,Conversation log\n\
                  45,ChatGPT,1087,230,1317,Conversation log\n\
                  118.5,GPT-4,417,0,417,API log\n";
        let mut reader = BurstGptReader::new(v1.as_bytes(), "b.csv").unwrap();
        let all: Vec<RequestSpec> = reader.by_ref().map(Result::unwrap).collect();
        let arrivals: Vec<SimTime> = all.iter().map(|r| r.arrival).collect();
        assert_eq!(
            arrivals,
            [
                SimTime::ZERO,
                SimTime(40_000_000_000),
                SimTime(113_500_000_000)
            ]
        );
        assert_eq!((all[0].prompt.tokens(), all[0].output_tokens), (472, 18));
        // A failed request (0 response tokens) is replayed as one token.
        assert_eq!(all[2].output_tokens, 1);
        assert_eq!(reader.outputs_raised(), 1);
        assert!(reader.notes().is_empty());
        // Every prompt is its own content.
        assert_ne!(all[0].prompt.segments[0].id, all[1].prompt.segments[0].id);
        assert_eq!(all[2].source_line, 4);

        let v3 = "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,\
                  Total tokens,Log Type\n\
                  0.25,a1b2,1.5,ChatGPT,10,20,30,Conversation log\n\
                  0.75,,2.0,ChatGPT,11,21,32,API log\n";
        let mut reader = BurstGptReader::new(v3.as_bytes(), "b3.csv").unwrap();
        let all: Vec<RequestSpec> = reader.by_ref().map(Result::unwrap).collect();
        assert_eq!(all[1].arrival, SimTime(500_000_000));
        assert_eq!((all[1].prompt.tokens(), all[1].output_tokens), (11, 21));
        assert_eq!(reader.outputs_raised(), 0);
        assert_eq!(reader.notes().len(), 1);
        assert!(reader.notes()[0].contains("Session ID"));
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = BurstGptReader::new("Timestamp,Model,Request tokens\n".as_bytes(), "b.csv")
            .err()
            .unwrap();
        assert_eq!((e.line, e.column.as_deref()), (1, Some("Response tokens")));
        let h = "Timestamp,Request tokens,Response tokens\n";
        for (row, column, needle) in [
            ("x,1,1", "Timestamp", "not a number of seconds"),
            ("-3,1,1", "Timestamp", "not a number of seconds"),
            ("1,0,1", "Request tokens", "at least 1"),
            ("1,-2,1", "Request tokens", ""),
            ("1,1,abc", "Response tokens", ""),
            ("1,1", "Response tokens", "missing"),
        ] {
            let e = read(&format!("{h}{row}\n")).pop().unwrap().unwrap_err();
            assert_eq!((e.line, e.column.as_deref()), (2, Some(column)), "{row}");
            assert!(e.message.contains(needle), "{row}: {}", e.message);
        }
        let e = read(&format!("{h}5,1,1\n4,1,1\n"))
            .pop()
            .unwrap()
            .unwrap_err();
        assert_eq!((e.line, e.column.as_deref()), (3, Some("Timestamp")));
        assert!(e.message.contains("line 2"), "{}", e.message);
        // At the one-year horizon exactly: still replayed.
        let at = read(&format!("{h}0,1,1\n31536000,1,1\n"));
        assert!(at.iter().all(Result::is_ok), "{at:?}");
        // Beyond the one-year horizon, named by its row.
        let e = read(&format!("{h}0,1,1\n40000000,1,1\n"))
            .pop()
            .unwrap()
            .unwrap_err();
        assert!(e.message.contains("365 days"), "{}", e.message);
    }
}
