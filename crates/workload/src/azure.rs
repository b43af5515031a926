//! The Azure LLM inference trace reader (2023 CSV).
//!
//! Microsoft published one hour of production arrivals for a coding and a
//! conversation service (`Azure/AzurePublicDataset`,
//! `data/AzureLLMInferenceTrace_{code,conv}.csv`, CC-BY 4.0; Patel et al.,
//! "Splitwise: Efficient generative LLM inference using phase splitting",
//! ISCA 2024). They give realistic burstiness and length mixes but say
//! nothing about shared content, so every prompt here is one segment unique
//! to its row. A file looks like:
//!
//! ```text
//! TIMESTAMP,ContextTokens,GeneratedTokens
//! 2023-11-16 18:15:46.6805900,374,44
//! ```
//!
//! Columns are found by their header names, so their order does not matter
//! and extra columns are ignored. `TIMESTAMP` is a wall-clock string,
//! `YYYY-MM-DD HH:MM:SS` with up to nine fractional digits (the files have
//! seven), read as UTC without a time-zone library since only differences
//! matter: arrivals are relative to the first row, and rows must be in
//! arrival order. `ContextTokens` must be at least 1; `GeneratedTokens` 0 is
//! replayed as 1 and counted.

use crate::lines::{CsvRecords, Fields};
use crate::{
    AZURE_SALT, ArrivalOrder, RequestSource, RequestSpec, TraceError, check_tokens, parse_count,
    raise_output,
};
use pdsim_core::prompt::content_id;
use pdsim_core::{Prompt, Segment};
use pdsim_spec::problem::quote;
use std::io::BufRead;

/// Reads an Azure LLM inference trace one row at a time.
pub struct AzureReader<R> {
    records: CsvRecords<R>,
    state: State,
}

/// Everything but the input.
struct State {
    name: String,
    /// Indices of `TIMESTAMP`, `ContextTokens`, `GeneratedTokens`.
    columns: [usize; 3],
    /// Nanoseconds since 1970 of the first and the latest valid row.
    order: ArrivalOrder,
    raised: u64,
}

/// The three columns, by header name.
const COLUMNS: [&str; 3] = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"];

impl<R: BufRead> AzureReader<R> {
    /// A reader of `input`; `name` is the file name used in messages. Reads
    /// the header row and finds the three columns.
    pub fn new(input: R, name: impl Into<String>) -> Result<AzureReader<R>, TraceError> {
        let name = name.into();
        let mut records = CsvRecords::new(input);
        let names = records.header(
            &name,
            "the file is empty; an Azure trace starts with the header row \
                     TIMESTAMP,ContextTokens,GeneratedTokens",
        )?;
        let mut columns = [0; 3];
        for (slot, wanted) in columns.iter_mut().zip(COLUMNS) {
            *slot = names.iter().position(|n| n == wanted).ok_or_else(|| {
                TraceError::new(&name, 1, Some(wanted), "is missing from the header row")
            })?;
        }
        let state = State {
            name,
            columns,
            order: ArrivalOrder::default(),
            raised: 0,
        };
        Ok(AzureReader { records, state })
    }
}

impl<R: BufRead> Iterator for AzureReader<R> {
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

impl<R: BufRead> RequestSource for AzureReader<R> {
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
        let time = parse_datetime(fields[0]).ok_or_else(|| {
            error(
                0,
                format!(
                    "`{}` is not a time of the form YYYY-MM-DD HH:MM:SS.fffffff (years 1970 to 2500)",
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
                id: content_id(line, AZURE_SALT),
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

/// Nanoseconds since 1970-01-01 00:00:00 UTC of `YYYY-MM-DD HH:MM:SS` with
/// an optional fraction of one to nine digits (a `T` may separate date and
/// time); `None` if the text is not such a time or lies outside 1970–2500.
fn parse_datetime(text: &str) -> Option<u64> {
    let b = text.trim().as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b' ' | b'T') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<u64> {
        let digits = &b[range];
        digits.iter().try_fold(0u64, |acc, &d| {
            d.is_ascii_digit().then(|| acc * 10 + (d - b'0') as u64)
        })
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1970..=2500).contains(&year)
        || !(1..=12).contains(&month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if day == 0 || day > month_days[month as usize - 1] {
        return None;
    }
    let mut nanos = 0;
    if b.len() > 19 {
        let fraction = &b[20..];
        if b[19] != b'.' || fraction.is_empty() || fraction.len() > 9 {
            return None;
        }
        nanos = number(20..b.len())? * 10u64.pow(9 - fraction.len() as u32);
    }
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second;
    Some(seconds * 1_000_000_000 + nanos)
}

/// Days from 1970-01-01 to a date on or after it in the proleptic Gregorian
/// calendar (Howard Hinnant's `days_from_civil`, restricted to years ≥ 1970).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y / 400;
    let year_of_era = y - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::{AzureReader, parse_datetime};
    use crate::{RequestSource, RequestSpec, TraceError};
    use pdsim_core::SimTime;

    fn read(text: &str) -> Vec<Result<RequestSpec, TraceError>> {
        AzureReader::new(text.as_bytes(), "az.csv")
            .unwrap()
            .collect()
    }

    #[test]
    fn datetimes_match_known_epochs() {
        assert_eq!(parse_datetime("1970-01-01 00:00:00"), Some(0));
        // 2023-11-16T18:15:46Z is Unix time 1700158546.
        assert_eq!(
            parse_datetime("2023-11-16 18:15:46.6805900"),
            Some(1_700_158_546_680_590_000)
        );
        // Nine digits, the most: nanoseconds.
        assert_eq!(
            parse_datetime("2023-11-16 18:15:46.680590012"),
            Some(1_700_158_546_680_590_012)
        );
        assert_eq!(
            parse_datetime("2000-02-29T00:00:00.5"),
            Some(951_782_400_500_000_000)
        );
        // Gregorian leap years: 2024 (divisible by 4, not by 100) has a
        // 29 February; 2100 (by 100, not by 400) has none.
        // 2024-02-29T12:00:00Z is Unix time 1709208000.
        assert_eq!(
            parse_datetime("2024-02-29 12:00:00"),
            Some(1_709_208_000_000_000_000)
        );
        assert_eq!(parse_datetime("2100-02-29 00:00:00"), None);
        // The last second of a day is a time; minute or second 60 is not.
        // 2023-11-16T23:59:59Z is Unix time 1700179199.
        assert_eq!(
            parse_datetime("2023-11-16 23:59:59"),
            Some(1_700_179_199_000_000_000)
        );
        for bad in [
            "2023-11-16 18:60:00",
            "2023-11-16 18:15:60",
            "2023-11-16",
            "2023-13-01 00:00:00",
            "2023-02-29 00:00:00",
            "2023-11-16 24:00:00",
            "2023-11-16 18:15:46.",
            "2023-11-16 18:15:46.1234567890",
            "2023-11-16 18:15:46,5",
            "1969-12-31 23:59:59",
            "2023-11-1x 18:15:46",
            // Each date separator alone wrong, then each time separator.
            "2023/11-16 18:15:46",
            "2023-11/16 18:15:46",
            "2023-11-16 18-15:46",
            "2023-11-16 18:15-46",
        ] {
            assert_eq!(parse_datetime(bad), None, "{bad}");
        }
    }

    #[test]
    fn reads_rows_relative_to_the_first_and_every_prompt_is_unique() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                    2023-11-16 18:15:46.6805900,374,44\n\
                    2023-11-16 18:15:50.9951690,396,0\n\
                    2023-11-16 18:15:50.9951690,396,7";
        let mut reader = AzureReader::new(text.as_bytes(), "az.csv").unwrap();
        let all: Vec<RequestSpec> = reader.by_ref().map(Result::unwrap).collect();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].arrival, SimTime::ZERO);
        assert_eq!(all[1].arrival, SimTime(4_314_579_000));
        assert_eq!(all[2].arrival, all[1].arrival);
        assert_eq!((all[0].prompt.tokens(), all[0].output_tokens), (374, 44));
        assert_eq!(all[1].output_tokens, 1);
        assert_ne!(all[1].prompt.segments[0].id, all[2].prompt.segments[0].id);
        assert_eq!(all[2].source_line, 4);
        assert_eq!(reader.outputs_raised(), 1);
    }

    #[test]
    fn lines_are_counted_through_crlf_endings_and_blank_lines() {
        let text = "TIMESTAMP,ContextTokens,GeneratedTokens\r\n\r\n\
                    2023-11-16 18:15:46.6805900,374,44\r\n\
                    2023-11-16 18:15:47.0000000,1,1";
        let lines: Vec<u64> = read(text)
            .into_iter()
            .map(|r| r.unwrap().source_line)
            .collect();
        assert_eq!(lines, [3, 4]);
    }

    #[test]
    fn columns_are_found_by_name() {
        let text = "GeneratedTokens,Extra,TIMESTAMP,ContextTokens\n5,x,2023-11-16 18:15:46,9\n";
        let r = read(text).pop().unwrap().unwrap();
        assert_eq!((r.prompt.tokens(), r.output_tokens), (9, 5));
    }

    #[test]
    fn errors_name_line_and_column() {
        let e = AzureReader::new("TIMESTAMP,ContextTokens\n".as_bytes(), "az.csv")
            .err()
            .unwrap();
        assert_eq!((e.line, e.column.as_deref()), (1, Some("GeneratedTokens")));
        let e = AzureReader::new("".as_bytes(), "az.csv").err().unwrap();
        assert_eq!((e.line, e.column), (1, None));
        let good = "2023-11-16 18:15:46.6805900,374,44\n";
        let cases = [
            (
                "2023-11-16 18:15:4x.6805900,374,44",
                "TIMESTAMP",
                "not a time",
            ),
            ("2023-11-16 18:15:45.0000000,374,44", "TIMESTAMP", "line 2"),
            ("2023-11-16 18:15:47,0,44", "ContextTokens", "at least 1"),
            ("2023-11-16 18:15:47,-3,44", "ContextTokens", "negative"),
            (
                "2023-11-16 18:15:47,12000000,44",
                "ContextTokens",
                "more than",
            ),
            (
                "2023-11-16 18:15:47,3,4.5",
                "GeneratedTokens",
                "not an integer",
            ),
            ("2023-11-16 18:15:47,3", "GeneratedTokens", "is missing"),
        ];
        for (bad, column, needle) in cases {
            let all = read(&format!(
                "TIMESTAMP,ContextTokens,GeneratedTokens\n{good}{bad}\n"
            ));
            assert!(all[0].is_ok());
            let e = all[1].clone().expect_err(bad);
            assert_eq!((e.file.as_str(), e.line), ("az.csv", 3), "{bad}");
            assert_eq!(e.column.as_deref(), Some(column), "{bad}: {e}");
            assert!(e.message.contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn a_utf8_bom_is_accepted() {
        let text = "\u{feff}TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\n";
        let all = read(text);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0].as_ref().unwrap().prompt.tokens(), 374);
    }
}
