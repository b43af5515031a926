//! Line and CSV record readers that keep reusable buffers, count lines from
//! 1 and treat invalid UTF-8 as a problem of that line rather than of the
//! stream, which is what streaming trace readers need.
//!
//! Memory is bounded whatever the input: a line, or a CSV record spanning
//! lines, longer than [`MAX_LINE_BYTES`] is reported as a problem of its
//! line and skipped without being held. A UTF-8 byte-order mark at the start
//! is dropped, and a file in UTF-16 or UTF-32 is refused at line 1 by name.
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
use pdsim_spec::files::{UTF8_BOM, foreign_encoding};
use std::io::BufRead;

/// The longest trace line, or CSV record, in bytes (without its line
/// ending).
///
/// The longest real rows are Mooncake rows listing the blocks of a
/// 10-million-token prompt (`MAX_TOKENS` / 512 ids of up to a dozen
/// characters, about 250 KB); a line longer than 1 MiB is not a trace row,
/// and reading it whole could exhaust memory (a file with no line breaks at
/// all is one line).
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// What reading one line produced.
pub(crate) enum Line<'a> {
    /// A line's text without its line ending, and its 1-based number.
    Text(u64, &'a str),
    /// A line that cannot be read as text (not UTF-8, too long), and why.
    /// Reading goes on with the next line.
    Bad(u64, String),
    /// Reading failed; the stream is over.
    Failed(u64, std::io::Error),
}

/// Why a line (or a CSV record, `what`) of `bytes` bytes is refused.
fn too_long(what: &str, bytes: usize) -> String {
    format!(
        "the {what} is longer than {} MiB ({MAX_LINE_BYTES} bytes), the most pdsim reads of one \
         trace row: it has {bytes} bytes",
        MAX_LINE_BYTES / (1024 * 1024)
    )
}

/// Why bytes whose first `valid` bytes are UTF-8 are not.
fn not_utf8(valid: usize) -> String {
    format!(
        "is not UTF-8 text (first invalid byte at byte {} of the line)",
        valid + 1
    )
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

    /// Reads up to and including the next `\n` into `buf`, keeping at most
    /// [`MAX_LINE_BYTES`] plus a line ending of it; returns the bytes read,
    /// whether the line was longer than that (then `buf` is empty) and how
    /// many of the bytes read were its line ending (`\n` or `\r\n`), so a
    /// refused line's length is reported without it.
    fn read_bounded(&mut self) -> std::io::Result<(usize, bool, usize)> {
        let (mut read, mut over) = (0usize, false);
        // The last byte consumed, for a `\r` that ends one buffer fill and
        // a `\n` that starts the next.
        let mut last = None;
        loop {
            let available = match self.input.fill_buf() {
                Ok(available) => available,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                return Ok((read, over, 0));
            }
            let (take, end) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (available.len(), false),
            };
            let before_newline = if take >= 2 {
                Some(available[take - 2])
            } else {
                last
            };
            last = Some(available[take - 1]);
            if !over {
                if self.buf.len() + take > MAX_LINE_BYTES + 2 {
                    over = true;
                    self.buf.clear();
                } else {
                    self.buf.extend_from_slice(&available[..take]);
                }
            }
            self.input.consume(take);
            read = read.saturating_add(take);
            if end {
                let ending = 1 + usize::from(before_newline == Some(b'\r'));
                return Ok((read, over, ending));
            }
        }
    }

    /// The next line, or `None` at the end of the input or after a failure.
    pub(crate) fn next_line(&mut self) -> Option<Line<'_>> {
        if self.done {
            return None;
        }
        self.buf.clear();
        match self.read_bounded() {
            Ok((0, _, _)) => {
                self.done = true;
                None
            }
            Ok((read, over, ending)) => {
                self.line += 1;
                if over {
                    return Some(Line::Bad(self.line, too_long("line", read - ending)));
                }
                let mut start = 0;
                if self.line == 1 {
                    if let Some(encoding) = foreign_encoding(&self.buf) {
                        // Nothing after this line could be read either.
                        self.done = true;
                        return Some(Line::Bad(1, format!("the file {encoding}")));
                    }
                    if self.buf.starts_with(UTF8_BOM) {
                        start = UTF8_BOM.len();
                    }
                }
                let mut end = self.buf.len();
                if end > start && self.buf[end - 1] == b'\n' {
                    end -= 1;
                }
                if end > start && self.buf[end - 1] == b'\r' {
                    end -= 1;
                }
                if end - start > MAX_LINE_BYTES {
                    return Some(Line::Bad(self.line, too_long("line", end - start)));
                }
                match std::str::from_utf8(&self.buf[start..end]) {
                    Ok(text) => Some(Line::Text(self.line, text)),
                    Err(e) => Some(Line::Bad(self.line, not_utf8(e.valid_up_to()))),
                }
            }
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
    /// A record that cannot be split (bad UTF-8, an unclosed quote, too
    /// long), with the line it starts on and why.
    Bad(u64, String),
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
    /// Reads the header row: the column names trimmed (a UTF-8 byte-order
    /// mark is already gone). `empty` says what the file should start with
    /// when it has no row at all.
    pub(crate) fn header(&mut self, file: &str, empty: &str) -> Result<Vec<String>, TraceError> {
        let Some(record) = self.next_record() else {
            return Err(TraceError::new(file, 1, None, empty));
        };
        let (_, fields) = record.fields(file)?;
        Ok(fields
            .iter()
            .map(|field| field.trim().to_string())
            .collect())
    }

    pub(crate) fn new(input: R) -> CsvRecords<R> {
        CsvRecords {
            lines: Lines::new(input),
            fields: Fields::default(),
        }
    }

    /// The next record, or `None` at the end of the input or after a
    /// failure. A record longer than [`MAX_LINE_BYTES`] is read to its end
    /// without keeping its text, then reported.
    pub(crate) fn next_record(&mut self) -> Option<Record<'_>> {
        let fields = &mut self.fields;
        fields.text.clear();
        fields.ends.clear();
        let mut start = 0;
        let mut quoted = false;
        // Bytes of the record so far, counted whether kept or not.
        let mut length = 0usize;
        loop {
            let (line, text) = match self.lines.next_line() {
                None if start == 0 => return None,
                None if length > MAX_LINE_BYTES => {
                    return Some(Record::Bad(start, too_long("record", length)));
                }
                None => {
                    return Some(Record::Bad(start, "a quoted field is not closed".into()));
                }
                Some(Line::Failed(line, e)) => return Some(Record::Failed(line, e)),
                Some(Line::Bad(line, why)) => {
                    // A line that cannot be read ends its record; the next
                    // line starts a new one.
                    let first = if start == 0 { line } else { start };
                    return Some(Record::Bad(first, why));
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
                length = length.saturating_add(1);
                if length <= MAX_LINE_BYTES {
                    fields.text.push('\n');
                }
            }
            length = length.saturating_add(text.len());
            let keep = length <= MAX_LINE_BYTES;
            if !keep {
                fields.text.clear();
                fields.ends.clear();
            }
            let mut chars = text.chars().peekable();
            let mut at_field_start = !quoted;
            while let Some(c) = chars.next() {
                if quoted {
                    if c == '"' {
                        if chars.peek() == Some(&'"') {
                            chars.next();
                            if keep {
                                fields.text.push('"');
                            }
                        } else {
                            quoted = false;
                        }
                    } else if keep {
                        fields.text.push(c);
                    }
                } else if c == ',' {
                    if keep {
                        fields.ends.push(fields.text.len());
                    }
                    at_field_start = true;
                    continue;
                } else if c == '"' && at_field_start {
                    quoted = true;
                } else if keep {
                    fields.text.push(c);
                }
                at_field_start = false;
            }
            if !quoted {
                if !keep {
                    return Some(Record::Bad(start, too_long("record", length)));
                }
                fields.ends.push(fields.text.len());
                return Some(Record::Fields(start, &self.fields));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{CsvRecords, Line, Lines, MAX_LINE_BYTES, Record};

    #[test]
    fn counts_lines_strips_endings_and_flags_bad_utf8() {
        let input: &[u8] = b"a\r\n\xff\nlast";
        let mut lines = Lines::new(input);
        assert!(matches!(lines.next_line(), Some(Line::Text(1, "a"))));
        assert!(
            matches!(lines.next_line(), Some(Line::Bad(2, why)) if why.contains("not UTF-8") && why.contains("byte 1"))
        );
        assert!(matches!(lines.next_line(), Some(Line::Text(3, "last"))));
        assert!(lines.next_line().is_none());
        assert!(lines.next_line().is_none());
    }

    #[test]
    fn a_line_over_the_limit_is_not_held_in_memory() {
        // However long a line, at most MAX_LINE_BYTES and its ending are
        // kept: past that the line is only counted, then refused by length.
        let long = vec![b'x'; MAX_LINE_BYTES * 3 / 2];
        let input = [&long[..], b"\nnext\n"].concat();
        let mut lines = Lines::new(std::io::BufReader::with_capacity(64 * 1024, &input[..]));
        match lines.next_line() {
            Some(Line::Bad(1, why)) => assert!(why.contains("1572864 bytes"), "{why}"),
            _ => panic!("the long line is refused"),
        }
        assert!(
            lines.buf.len() <= MAX_LINE_BYTES + 2,
            "{} bytes kept",
            lines.buf.len()
        );
        assert!(matches!(lines.next_line(), Some(Line::Text(2, "next"))));
    }

    /// A reader that is interrupted once, then reads its text, then fails
    /// for good.
    struct Flaky {
        calls: u32,
        text: &'static [u8],
    }

    impl std::io::Read for Flaky {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.calls += 1;
            match self.calls {
                1 => Err(std::io::ErrorKind::Interrupted.into()),
                2 => {
                    buf[..self.text.len()].copy_from_slice(self.text);
                    Ok(self.text.len())
                }
                _ => Err(std::io::Error::other("the disk went away")),
            }
        }
    }

    /// An interrupted read is retried, as `BufRead::read_until` retries it;
    /// any other error ends the input with that error, at the line after
    /// the last one read.
    #[test]
    fn an_interrupted_read_is_retried_and_another_error_ends_the_input() {
        let mut lines = Lines::new(std::io::BufReader::new(Flaky {
            calls: 0,
            text: b"one\n",
        }));
        assert!(matches!(lines.next_line(), Some(Line::Text(1, "one"))));
        match lines.next_line() {
            Some(Line::Failed(2, e)) => assert_eq!(e.to_string(), "the disk went away"),
            _ => panic!("the failure ends the input"),
        }
        assert!(lines.next_line().is_none());
    }

    fn records(input: &[u8]) -> Vec<(u64, Result<Vec<String>, String>)> {
        let mut reader = CsvRecords::new(input);
        let mut out = Vec::new();
        while let Some(record) = reader.next_record() {
            out.push(match record {
                Record::Fields(line, f) => (line, Ok(f.iter().map(str::to_string).collect())),
                Record::Bad(line, why) => (line, Err(why)),
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
                (
                    2,
                    Err("is not UTF-8 text (first invalid byte at byte 1 of the line)".into())
                ),
                ok(3, &["y"])
            ]
        );
    }

    #[test]
    fn a_bom_is_dropped_and_utf16_refused_at_line_1() {
        let mut lines = Lines::new(&b"\xef\xbb\xbf{}\n\xef\xbb\xbf"[..]);
        assert!(matches!(lines.next_line(), Some(Line::Text(1, "{}"))));
        // Only the first line's mark is a byte-order mark.
        assert!(matches!(lines.next_line(), Some(Line::Text(2, "\u{feff}"))));
        let mut lines = Lines::new(&b"\xff\xfe{\0}\0\n\0"[..]);
        assert!(
            matches!(lines.next_line(), Some(Line::Bad(1, why)) if why.starts_with("the file is UTF-16 text"))
        );
        assert!(lines.next_line().is_none());
        assert_eq!(
            records(b"\xef\xbb\xbfh,i\n1,2"),
            [ok(1, &["h", "i"]), ok(2, &["1", "2"])]
        );
    }

    #[test]
    fn over_long_lines_are_refused_by_number_and_skipped() {
        let mut input = b"first\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 2 * MAX_LINE_BYTES));
        input.extend(b"\nlast\n");
        let mut lines = Lines::new(&input[..]);
        assert!(matches!(lines.next_line(), Some(Line::Text(1, "first"))));
        match lines.next_line() {
            Some(Line::Bad(2, why)) => assert!(why.contains("1 MiB (1048576 bytes"), "{why}"),
            _ => panic!("line 2 is refused"),
        }
        assert!(matches!(lines.next_line(), Some(Line::Text(3, "last"))));
        // The buffer did not grow with the line.
        assert!(
            lines.buf.capacity() <= 2 * MAX_LINE_BYTES,
            "{}",
            lines.buf.capacity()
        );
        // Exactly the limit is fine, with either line ending.
        let mut input = vec![b'y'; MAX_LINE_BYTES];
        input.extend(b"\r\n");
        let mut lines = Lines::new(&input[..]);
        assert!(matches!(lines.next_line(), Some(Line::Text(1, t)) if t.len() == MAX_LINE_BYTES));
    }

    #[test]
    fn over_long_csv_records_are_refused_even_across_lines() {
        // One quoted field over many short lines: every line is short, the
        // record is not.
        let mut input = b"h\n\"".to_vec();
        for _ in 0..(2 * MAX_LINE_BYTES / 100) {
            input.extend(std::iter::repeat_n(b'q', 99));
            input.push(b'\n');
        }
        input.extend(b"\"\nafter\n");
        let got = records(&input);
        assert_eq!(
            got.len(),
            3,
            "{:?}",
            got.iter().map(|r| r.0).collect::<Vec<_>>()
        );
        assert_eq!(got[0], ok(1, &["h"]));
        assert_eq!(got[1].0, 2);
        assert!(
            got[1]
                .1
                .as_ref()
                .unwrap_err()
                .contains("record is longer than 1 MiB")
        );
        assert_eq!(got[2].0, (2 * MAX_LINE_BYTES / 100 + 3) as u64);
        assert_eq!(got[2].1, Ok(vec!["after".to_string()]));
        // An unclosed quote reaching the end of a long file says so too.
        let mut input = b"h\n\"".to_vec();
        input.extend(b"q\n".repeat(MAX_LINE_BYTES));
        let got = records(&input);
        assert!(
            got[1].1.as_ref().unwrap_err().contains("longer than"),
            "{:?}",
            got[1]
        );
        // At exactly the limit the record is not too long: what is wrong
        // with it is the quote. Its bytes: 100 on line 2, the line break,
        // and the rest on line 3.
        let mut input = b"h\n\"".to_vec();
        input.extend([b'q'; 99]);
        input.push(b'\n');
        input.extend(std::iter::repeat_n(b'q', MAX_LINE_BYTES - 101));
        input.push(b'\n');
        let got = records(&input);
        assert_eq!(got[1], (2, Err("a quoted field is not closed".into())));
    }

    #[test]
    fn a_line_over_the_limit_is_refused_with_its_length() {
        // One byte over the limit, then a line ending, then a short line.
        // `\r\n` overflows the buffer's allowance and is counted out after;
        // a bare `\n` fits it and is stripped before the check.
        for ending in [&b"\r\n"[..], b"\n"] {
            let mut input = vec![b'x'; MAX_LINE_BYTES + 1];
            input.extend_from_slice(ending);
            input.extend_from_slice(b"ok\n");
            let mut lines = Lines::new(&input[..]);
            match lines.next_line() {
                Some(Line::Bad(1, why)) => {
                    assert!(
                        why.contains(&format!("it has {} bytes", MAX_LINE_BYTES + 1)),
                        "{why}"
                    )
                }
                _ => panic!("the long line was not refused as too long"),
            }
            assert!(matches!(lines.next_line(), Some(Line::Text(2, "ok"))));
        }
        // Exactly at the limit is read.
        let mut input = vec![b'y'; MAX_LINE_BYTES];
        input.push(b'\n');
        let mut lines = Lines::new(&input[..]);
        assert!(
            matches!(lines.next_line(), Some(Line::Text(1, text)) if text.len() == MAX_LINE_BYTES)
        );
    }
}
