//! Problems found in input documents, each located by file, line and key path.
//!
//! Validation never stops at the first problem: every check runs and adds to a
//! [`Problems`] list, so a user fixes a document in one pass rather than one
//! error per run.

use serde::Serialize;

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
/// scripts match on; `message` is for people.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Problem {
    pub severity: Severity,
    pub file: String,
    pub line: Option<u32>,
    pub path: String,
    pub code: String,
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
            write!(f, "{}: ", self.path)?;
        }
        write!(f, "{} [{}]", self.message, self.code)
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
