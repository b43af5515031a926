//! Line and CSV record readers that keep reusable buffers, count lines from
//! 1 and treat invalid UTF-8 as a problem of that line rather than of the
//! stream, which is what streaming trace readers need.
//!
//! CSV is split here rather than with the `csv` crate because messages must
//! name the line a row starts on, and the `csv` crate's record positions
//! are off after `\r\n` line endings (the Azure files use them) and after
//! skipped blank lines. The dialect is RFC 4180 as Go's `encoding/csv`
//! writes it (BLIS's TraceV2 writer): comma-separated fields, a field in
//! double quotes may hold commas, doubled quotes and line breaks, and blank
//! lines are skipped. Like Go's reader with `LazyQuotes`, a stray quote is
//! kept as text rather than refused.

use crate::TraceError;
use std::io::BufRead;

/// What reading one line produced.
pub(crate) enum Line<'a> {
    /// A line's text without its line ending, and its 1-based number.
    Text(u64, &'a str),
    /// A line that is not valid UTF-8.
    NotUtf8(u64),
    /// Reading failed; the stream is over.
    Failed(u64, std::io::Error),
}

/// Reads `input` one line at a time into one buffer.
pub(crate) struct Lines<R> {
    input: R,
    buf: Vec<u8>,
    line: u64,
    done: bool,
}

impl<R: BufRead> Lines<R> {
    pub(crate) fn new(input: R) -> Lines<R> {
        Lines {
            input,
            buf: Vec::new(),
            line: 0,
            done: false,
        }
    }

    /// The next line, or `None` at the end of the input or after a failure.
    pub(crate) fn next_line(&mut self) -> Option<Line<'_>> {
        if self.done {
            return None;
        }
        self.buf.clear();
        match self.input.read_until(b'\n', &mut self.buf) {
            Ok(0) => {
                self.done = true;
                None
            }
            Ok(_) => {
                self.line += 1;
                let mut end = self.buf.len();
                if end > 0 && self.buf[end - 1] == b'\n' {
                    end -= 1;
                }
                if end > 0 && self.buf[end - 1] == b'\r' {
                    end -= 1;
                }
                match std::str::from_utf8(&self.buf[..end]) {
                    Ok(text) => Some(Line::Text(self.line, text)),
                    Err(_) => Some(Line::NotUtf8(self.line)),
                }
            }
            // `read_until` already retries interrupted reads.
            Err(e) => {
                self.done = true;
                Some(Line::Failed(self.line + 1, e))
            }
        }
    }
}

/// The fields of one CSV record, decoded, in one buffer.
#[derive(Default)]
pub(crate) struct Fields {
    text: String,
    ends: Vec<usize>,
}

impl Fields {
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    pub(crate) fn get(&self, i: usize) -> Option<&str> {
        let end = *self.ends.get(i)?;
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        Some(&self.text[start..end])
    }

    /// Every field, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).filter_map(|i| self.get(i))
    }
}

/// What reading one CSV record produced.
pub(crate) enum Record<'a> {
    /// A record and the line it starts on.
    Fields(u64, &'a Fields),
    /// A record that cannot be split (bad UTF-8, an unclosed quote), with
    /// the line it starts on and why.
    Bad(u64, &'static str),
    /// Reading failed; the stream is over.
    Failed(u64, std::io::Error),
}

impl<'a> Record<'a> {
    /// The record's fields and line, or the trace error a bad record or a
    /// failed read is, named against `file`.
    pub(crate) fn fields(self, file: &str) -> Result<(u64, &'a Fields), TraceError> {
        match self {
            Record::Fields(line, fields) => Ok((line, fields)),
            Record::Bad(line, why) => Err(TraceError::new(file, line, None, why)),
            Record::Failed(line, e) => Err(TraceError::new(
                file,
                line,
                None,
                format!("cannot read the trace: {e}"),
            )),
        }
    }
}

/// Reads CSV records one at a time into one reusable [`Fields`].
pub(crate) struct CsvRecords<R> {
    lines: Lines<R>,
    fields: Fields,
}

impl<R: BufRead> CsvRecords<R> {
    /// Reads the header row: the column names trimmed, a UTF-8 byte-order
    /// mark dropped from the first. `empty` says what the file should start
    /// with when it has no row at all.
    pub(crate) fn header(&mut self, file: &str, empty: &str) -> Result<Vec<String>, TraceError> {
        let Some(record) = self.next_record() else {
            return Err(TraceError::new(file, 1, None, empty));
        };
        let (_, fields) = record.fields(file)?;
        Ok(fields
            .iter()
            .enumerate()
            .map(|(i, field)| {
                let field = if i == 0 {
                    field.trim_start_matches('\u{feff}')
                } else {
                    field
                };
                field.trim().to_string()
            })
            .collect())
    }

    pub(crate) fn new(input: R) -> CsvRecords<R> {
        CsvRecords {
            lines: Lines::new(input),
            fields: Fields::default(),
        }
    }

    /// The next record, or `None` at the end of the input or after a
    /// failure.
    pub(crate) fn next_record(&mut self) -> Option<Record<'_>> {
        let fields = &mut self.fields;
        fields.text.clear();
        fields.ends.clear();
        let mut start = 0;
        let mut quoted = false;
        loop {
            let (line, text) = match self.lines.next_line() {
                None if start == 0 => return None,
                None => return Some(Record::Bad(start, "a quoted field is not closed")),
                Some(Line::Failed(line, e)) => return Some(Record::Failed(line, e)),
                Some(Line::NotUtf8(line)) => {
                    let first = if start == 0 { line } else { start };
                    return Some(Record::Bad(first, "is not valid UTF-8"));
                }
                Some(Line::Text(line, text)) => (line, text),
            };
            if start == 0 {
                if text.is_empty() {
                    continue;
                }
                start = line;
            } else {
                // A quoted field goes on over a line break.
                fields.text.push('\n');
            }
            let mut chars = text.chars().peekable();
            let mut at_field_start = !quoted;
            while let Some(c) = chars.next() {
                if quoted {
                    if c == '"' {
                        if chars.peek() == Some(&'"') {
                            chars.next();
                            fields.text.push('"');
                        } else {
                            quoted = false;
                        }
                    } else {
                        fields.text.push(c);
                    }
                } else if c == ',' {
                    fields.ends.push(fields.text.len());
                    at_field_start = true;
                    continue;
                } else if c == '"' && at_field_start {
                    quoted = true;
                } else {
                    fields.text.push(c);
                }
                at_field_start = false;
            }
            if !quoted {
                fields.ends.push(fields.text.len());
                return Some(Record::Fields(start, &self.fields));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{CsvRecords, Line, Lines, Record};

    #[test]
    fn counts_lines_strips_endings_and_flags_bad_utf8() {
        let input: &[u8] = b"a\r\n\xff\nlast";
        let mut lines = Lines::new(input);
        assert!(matches!(lines.next_line(), Some(Line::Text(1, "a"))));
        assert!(matches!(lines.next_line(), Some(Line::NotUtf8(2))));
        assert!(matches!(lines.next_line(), Some(Line::Text(3, "last"))));
        assert!(lines.next_line().is_none());
        assert!(lines.next_line().is_none());
    }

    fn records(input: &[u8]) -> Vec<(u64, Result<Vec<String>, String>)> {
        let mut reader = CsvRecords::new(input);
        let mut out = Vec::new();
        while let Some(record) = reader.next_record() {
            out.push(match record {
                Record::Fields(line, f) => (line, Ok(f.iter().map(str::to_string).collect())),
                Record::Bad(line, why) => (line, Err(why.to_string())),
                Record::Failed(line, e) => (line, Err(e.to_string())),
            });
        }
        out
    }

    fn ok(line: u64, fields: &[&str]) -> (u64, Result<Vec<String>, String>) {
        (line, Ok(fields.iter().map(|f| f.to_string()).collect()))
    }

    #[test]
    fn csv_records_know_their_lines() {
        assert_eq!(
            records(b"h,i\r\na,\r\n\r\n\"b\r\n,x\",\"q\"\"\"\r\nc\r\n"),
            [
                ok(1, &["h", "i"]),
                ok(2, &["a", ""]),
                ok(4, &["b\n,x", "q\""]),
                ok(6, &["c"])
            ]
        );
        assert_eq!(records(b"h\n\n\na"), [ok(1, &["h"]), ok(4, &["a"])]);
        assert_eq!(records(b",\n\"\""), [ok(1, &["", ""]), ok(2, &[""])]);
        assert_eq!(records(b"a\"b,c"), [ok(1, &["a\"b", "c"])]);
        assert_eq!(
            records(b"x\n\"open\nmore"),
            [
                ok(1, &["x"]),
                (2, Err("a quoted field is not closed".into()))
            ]
        );
        assert_eq!(
            records(b"x\n\xff,1\ny"),
            [
                ok(1, &["x"]),
                (2, Err("is not valid UTF-8".into())),
                ok(3, &["y"])
            ]
        );
    }
}
