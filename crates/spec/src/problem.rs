//! Problems found in input documents, each located by file, line and key path.
//!
//! Validation never stops at the first problem: every check runs and adds to a
//! [`Problems`] list, so a user fixes a document in one pass rather than one
//! error per run.

use serde::Serialize;
use std::borrow::Cow;

/// The most characters of one value (a key, a field, a line of a file) that
/// a message quotes. A value longer than this is shown by its start and its
/// length: a person can recognise it, and a 1 MB key cannot turn one error
/// into a megabyte of terminal output.
pub const QUOTE_CHARS: usize = 200;

/// The most characters of one problem's message (and, separately, of its
/// key path) that are ever shown: a safety net for messages built from
/// several quoted values, or from a library's error text that quotes input.
pub const MESSAGE_CHARS: usize = 1_000;

/// `text` as a terminal should be shown it: every control character but
/// the line feed and the tab escaped (`\u{1b}`), so input quoted in a
/// message (a key, a field, a file name) cannot move the cursor, recolour
/// the terminal or hide what came before it.
pub fn printable(text: &str) -> Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() && c != '\n' && c != '\t' {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// The longest plain decimal form in which [`number`] shows a number:
/// room for every whole number up to 10^20 and for a fraction written with
/// all its significant digits (`0.30000000000000004`).
pub const PLAIN_NUMBER_CHARS: usize = 21;

/// `x` as a message shows it: as `{}` writes it when that is at most
/// [`PLAIN_NUMBER_CHARS`] characters (every ordinary value, so `0.4`,
/// `131072` and `0.00001` read as typed), else in exponent form, so that
/// 1e300 is `1e300` and not three hundred and one digits, and 1e-300 is
/// `1e-300` and not three hundred zeros.
pub fn number(x: f64) -> String {
    let plain = x.to_string();
    if plain.len() <= PLAIN_NUMBER_CHARS {
        plain
    } else {
        format!("{x:e}")
    }
}

/// What serde writes before a floating-point value it refuses
/// (`Unexpected::Float`: ``invalid type: floating point `1e300`, expected
/// u32``), with the value in its plain decimal form.
const SERDE_FLOAT: &str = "floating point `";

/// `inner`, the quoted part after [`SERDE_FLOAT`], in [`number`]'s form when
/// it is a long plain decimal that reads back as a float; `None` otherwise.
fn compact_float(inner: &str) -> Option<String> {
    if inner.len() <= PLAIN_NUMBER_CHARS {
        return None;
    }
    inner.parse::<f64>().ok().map(number)
}

/// `value` as a message should quote it: whole when it has at most
/// [`QUOTE_CHARS`] characters, else its first [`QUOTE_CHARS`] and its length.
pub fn quote(value: &str) -> Cow<'_, str> {
    cut(value, QUOTE_CHARS)
}

/// `message` (typically a library's error text, which quotes the input: an
/// unknown key, a value of the wrong type) with every quoted part, between
/// backticks or double quotes, longer than [`QUOTE_CHARS`] cut by [`quote`].
/// Inside double quotes a backslash escapes the next character, as Rust's
/// `Debug` and JSON write strings.
pub fn shorten_quotes(message: &str) -> String {
    if message.len() <= QUOTE_CHARS && !message.contains(SERDE_FLOAT) {
        return message.to_string();
    }
    let mut out = String::with_capacity(message.len().min(4 * MESSAGE_CHARS));
    let bytes = message.as_bytes();
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let delimiter = bytes[i];
        if delimiter != b'`' && delimiter != b'"' {
            i += 1;
            continue;
        }
        // Finds the closing delimiter (or the end of the message).
        let start = i + 1;
        let mut end = start;
        while end < bytes.len() && bytes[end] != delimiter {
            if delimiter == b'"' && bytes[end] == b'\\' {
                end += 1;
            }
            end += 1;
        }
        let end = end.min(bytes.len());
        // Delimiters are ASCII, so both cuts are on character boundaries.
        let inner = &message[start..end];
        out.push_str(&message[copied..start]);
        // serde quotes a refused float as `{}` writes it, which for 1e300
        // is 301 digits; it is shown as [`number`] shows it instead.
        match message[..start]
            .ends_with(SERDE_FLOAT)
            .then(|| compact_float(inner))
            .flatten()
        {
            Some(compact) => out.push_str(&compact),
            None => out.push_str(&quote(inner)),
        }
        copied = end;
        i = end + 1;
    }
    out.push_str(&message[copied..]);
    out
}

/// `text` with at most [`MESSAGE_CHARS`] characters, marked when cut.
pub fn bound_message(text: &str) -> Cow<'_, str> {
    cut(text, MESSAGE_CHARS)
}

/// Room for the `… (N bytes)` a cut appends: a text at most this much
/// longer than the limit is kept whole, so cutting what was already cut
/// (a message shortened when it was made, and again when it is shown)
/// changes nothing.
const CUT_SLACK_CHARS: usize = 32;

/// The first `max_chars` characters of `text` and `… (N bytes)` when it is
/// longer (by more than [`CUT_SLACK_CHARS`]); `text` itself otherwise. Looks
/// at no more of `text` than it keeps.
fn cut(text: &str, max_chars: usize) -> Cow<'_, str> {
    if text
        .char_indices()
        .nth(max_chars + CUT_SLACK_CHARS)
        .is_none()
    {
        return Cow::Borrowed(text);
    }
    let end = text
        .char_indices()
        .nth(max_chars)
        .map_or(text.len(), |(i, _)| i);
    Cow::Owned(format!("{}… ({} bytes)", &text[..end], text.len()))
}

/// `text` as a message shows it: every quoted part cut by
/// [`shorten_quotes`], and the whole cut by [`bound_message`]. Problems and
/// trace errors are shown through this, so no check can make one quote a
/// value whole, however it built its message.
pub fn shorten(text: &str) -> Cow<'_, str> {
    if text.len() <= QUOTE_CHARS && !text.contains(SERDE_FLOAT) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(bound_message(&shorten_quotes(text)).into_owned())
}

fn serialize_bounded<S: serde::Serializer>(text: &str, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&shorten(text))
}

/// How bad a problem is. Errors make a bundle invalid; warnings do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One problem in one document.
///
/// `path` is the dotted key path (`pools[1].parallel.dp_local`), empty for the
/// document as a whole. `code` is a stable kebab-case identifier that tests and
/// scripts match on; `message` is for people. Both the path and the message
/// are shown (displayed or serialized) through [`shorten`]: quoted values cut
/// to [`QUOTE_CHARS`] characters and the whole to [`MESSAGE_CHARS`], whatever
/// a check put in them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub severity: Severity,
    pub file: String,
    pub line: Option<u32>,
    #[serde(serialize_with = "serialize_bounded")]
    pub path: String,
    pub code: String,
    #[serde(serialize_with = "serialize_bounded")]
    pub message: String,
}

impl std::fmt::Display for Problem {
    /// `file:line: severity: path: message`, the format editors jump to.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.file)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, ": {}: ", self.severity.as_str())?;
        if !self.path.is_empty() {
            write!(f, "{}: ", shorten(&self.path))?;
        }
        write!(f, "{} [{}]", shorten(&self.message), self.code)
    }
}

/// An ordered list of problems.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Problems {
    items: Vec<Problem>,
}

impl Problems {
    pub fn new() -> Problems {
        Problems::default()
    }

    pub fn push(&mut self, problem: Problem) {
        self.items.push(problem);
    }

    pub fn extend(&mut self, other: Problems) {
        self.items.extend(other.items);
    }

    pub fn has_errors(&self) -> bool {
        self.items.iter().any(|p| p.severity == Severity::Error)
    }

    pub fn error_count(&self) -> usize {
        self.items
            .iter()
            .filter(|p| p.severity == Severity::Error)
            .count()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, Problem> {
        self.items.iter()
    }

    pub fn into_vec(self) -> Vec<Problem> {
        self.items
    }

    /// Sorts by file, then line, then path, so output is stable and readable
    /// whatever order the checks ran in.
    pub fn sort(&mut self) {
        self.items.sort_by(|a, b| {
            (&a.file, a.line.unwrap_or(0), &a.path, &a.code).cmp(&(
                &b.file,
                b.line.unwrap_or(0),
                &b.path,
                &b.code,
            ))
        });
    }
}

impl<'a> IntoIterator for &'a Problems {
    type Item = &'a Problem;
    type IntoIter = std::slice::Iter<'a, Problem>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped_for_the_terminal() {
        use super::printable;
        assert!(matches!(
            printable("a\tb\nc"),
            std::borrow::Cow::Borrowed("a\tb\nc")
        ));
        assert_eq!(
            printable("key\u{1b}[2J\rx\u{7f}"),
            "key\\u{1b}[2J\\u{d}x\\u{7f}"
        );
    }

    use super::{MESSAGE_CHARS, Problem, QUOTE_CHARS, Severity, quote, shorten, shorten_quotes};

    #[test]
    fn long_values_are_quoted_by_their_start_and_length() {
        assert_eq!(quote("short"), "short");
        let exact = "é".repeat(QUOTE_CHARS);
        assert_eq!(quote(&exact), exact.as_str());
        assert_eq!(quote(&quote(&"q".repeat(5_000))), quote(&"q".repeat(5_000)));
        let long = "k".repeat(1_000_000);
        let quoted = quote(&long);
        assert!(quoted.chars().count() <= QUOTE_CHARS + 20, "{quoted}");
        assert!(quoted.ends_with("… (1000000 bytes)"), "{quoted}");
        // A cut never splits a character.
        let wide = "é".repeat(QUOTE_CHARS + 100);
        assert!(quote(&wide).starts_with(&"é".repeat(QUOTE_CHARS)));
    }

    /// Ordinary numbers read as `{}` writes them; one whose plain form
    /// runs to hundreds of digits is shown in exponent form.
    #[test]
    fn numbers_are_plain_when_short_and_in_exponent_form_when_long() {
        use super::number;
        for (x, shown) in [
            (0.4, "0.4"),
            (131_072.0, "131072"),
            (0.00001, "0.00001"),
            (-2.5, "-2.5"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e20, "100000000000000000000"),
            (0.0, "0"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-inf"),
            (1e21, "1e21"),
            (1e300, "1e300"),
            (-1e300, "-1e300"),
            (1e-300, "1e-300"),
            (-1.5e-300, "-1.5e-300"),
        ] {
            assert_eq!(number(x), shown, "{x:e}");
        }
    }

    /// serde quotes a refused float in its plain form (301 digits for
    /// 1e300): the message shows it as `number` does, whatever its length,
    /// and leaves other quoted digits (a user's string) as they are.
    #[test]
    fn a_float_serde_refuses_is_shown_compactly() {
        for (text, shown) in [
            ("1e300", "`1e300`"),
            ("-1e300", "`-1e300`"),
            ("1e-300", "`1e-300`"),
            ("1e100", "`1e100`"),
            ("2.5", "`2.5`"),
        ] {
            let e = serde_yaml::from_str::<u32>(text).unwrap_err().to_string();
            for message in [shorten_quotes(&e), shorten(&e).into_owned()] {
                assert!(
                    message.contains(&format!("floating point {shown}")),
                    "{text}: {message}"
                );
            }
        }
        let digits = "1".repeat(300);
        let message = format!("unknown field `{digits}`, expected `kind`");
        assert!(
            shorten_quotes(&message).starts_with(&format!("unknown field `{}", &digits[..200]))
        );
    }

    #[test]
    fn quoted_parts_of_library_messages_are_cut() {
        let key = "k".repeat(1_000_000);
        let message = format!("unknown field `{key}`, expected one of `kind`, `pools`");
        let short = shorten_quotes(&message);
        assert!(short.len() < 300, "{}", short.len());
        assert!(short.starts_with("unknown field `kkk"), "{short}");
        assert!(
            short.ends_with("(1000000 bytes)`, expected one of `kind`, `pools`"),
            "{short}"
        );
        let value = "v\\\"".repeat(100_000);
        let message = format!("invalid type: string \"{value}\", expected u64");
        let short = shorten_quotes(&message);
        assert!(short.len() < 400, "{short}");
        assert!(short.ends_with("\", expected u64"), "{short}");
        assert_eq!(shorten_quotes("no `quotes` here"), "no `quotes` here");
        // An unclosed quote is cut too.
        assert!(shorten_quotes(&format!("found `{key}")).len() < 300);
    }

    #[test]
    fn a_problem_shows_at_most_a_bounded_message_and_path() {
        let huge = "x".repeat(1_000_000);
        let mut problem = Problem {
            severity: Severity::Error,
            file: "a.yaml".into(),
            line: Some(3),
            path: huge.clone(),
            code: "unknown-key".into(),
            message: format!("unknown field `{huge}`"),
        };
        let shown = problem.to_string();
        assert!(
            shown.len() < MESSAGE_CHARS + QUOTE_CHARS + 100,
            "{}",
            shown.len()
        );
        assert!(
            shown.starts_with("a.yaml:3: error: xxx"),
            "{}",
            &shown[..40]
        );
        // The quoted key is cut to a quote's length ...
        assert!(
            shown.ends_with("(1000000 bytes)` [unknown-key]"),
            "{}",
            &shown[shown.len() - 60..]
        );
        // ... and a message that quotes nothing is cut as a whole.
        problem.message = huge.replace('x', "y ");
        let shown = problem.to_string();
        assert!(
            shown.ends_with("… (2000000 bytes) [unknown-key]"),
            "{}",
            &shown[shown.len() - 60..]
        );
        // Shortening is idempotent.
        let once = shorten(&problem.message).into_owned();
        assert_eq!(shorten(&once), once.as_str());
        assert!(shown.len() < 2 * MESSAGE_CHARS + 100, "{}", shown.len());
        let json = serde_json::to_string(&problem).unwrap();
        assert!(json.len() < 2 * MESSAGE_CHARS + 200, "{}", json.len());
    }
}
