//! Strict loading of one YAML document into a typed value.
//!
//! Every document type denies unknown keys. A document that does not load
//! produces one located problem: the key path comes from
//! `serde_path_to_error`, the line from the YAML parser's own position (or,
//! failing that, from the [`LineIndex`]).

use crate::lines::LineIndex;
use crate::problem::{Problem, Problems, Severity};
use serde::de::DeserializeOwned;

/// A document's text with the label used in problems and its line index.
#[derive(Clone, Debug)]
pub struct Source {
    /// How the file is named in problems (the path as the user gave it).
    pub file: String,
    pub text: String,
    pub lines: LineIndex,
}

impl Source {
    pub fn new(file: impl Into<String>, text: impl Into<String>) -> Source {
        let text = text.into();
        let lines = LineIndex::build(&text);
        Source {
            file: file.into(),
            text,
            lines,
        }
    }

    /// A problem at `path` in this document, with the path's line.
    pub fn problem(
        &self,
        severity: Severity,
        path: &str,
        code: &str,
        message: impl Into<String>,
    ) -> Problem {
        Problem {
            severity,
            file: self.file.clone(),
            line: self.lines.line_of(path),
            path: path.to_string(),
            code: code.to_string(),
            message: message.into(),
        }
    }

    pub fn error(&self, path: &str, code: &str, message: impl Into<String>) -> Problem {
        self.problem(Severity::Error, path, code, message)
    }

    pub fn warning(&self, path: &str, code: &str, message: impl Into<String>) -> Problem {
        self.problem(Severity::Warning, path, code, message)
    }
}

/// Parses `source` as `T`, or returns the one problem that stopped it.
pub fn load<T: DeserializeOwned>(source: &Source) -> Result<T, Problems> {
    if source.text.trim().is_empty() {
        let mut problems = Problems::new();
        problems.push(source.error("", "document-empty", "the document is empty"));
        return Err(problems);
    }
    let deserializer = serde_yaml::Deserializer::from_str(&source.text);
    match serde_path_to_error::deserialize::<_, T>(deserializer) {
        Ok(value) => Ok(value),
        Err(error) => {
            let path = clean_path(&error.path().to_string());
            let inner = error.into_inner();
            let line = inner
                .location()
                .map(|l| u32::try_from(l.line()).unwrap_or(u32::MAX))
                .or_else(|| source.lines.line_of(&path));
            let (code, message) = classify(&inner.to_string());
            let mut problems = Problems::new();
            problems.push(Problem {
                severity: Severity::Error,
                file: source.file.clone(),
                line,
                path,
                code: code.to_string(),
                message,
            });
            Err(problems)
        }
    }
}

/// `serde_path_to_error` writes `.` for the root; we write nothing.
fn clean_path(path: &str) -> String {
    if path == "." {
        String::new()
    } else {
        path.to_string()
    }
}

/// Sorts serde_yaml's messages into stable codes and strips the position
/// suffix, which the problem carries separately.
fn classify(message: &str) -> (&'static str, String) {
    let mut text = message.to_string();
    if let Some(cut) = text.rfind(" at line ") {
        text.truncate(cut);
    }
    // serde_yaml prefixes nested errors with their path; we carry the path
    // separately, so drop a leading `a.b[0]: ` when present.
    if let Some((head, tail)) = text.split_once(": ")
        && !head.contains(' ')
        && (head.contains('.') || head.contains('['))
    {
        text = tail.to_string();
    }
    let code = if text.contains("unknown field") || text.contains("unknown variant") {
        "unknown-key"
    } else if text.contains("missing field") {
        "missing-key"
    } else if text.contains("duplicate") {
        "duplicate-key"
    } else if text.contains("invalid type") {
        "wrong-type"
    } else if text.contains("invalid value") || text.contains("invalid length") {
        "invalid-value"
    } else if text.contains("more than one document") {
        "multiple-documents"
    } else if text.contains("recursion limit") {
        "too-deep"
    } else if message.contains("while parsing")
        || message.contains("while scanning")
        || message.contains("did not find")
        || message.contains("found character")
    {
        "yaml-syntax"
    } else {
        "invalid-value"
    };
    (code, text)
}
