//! Strict loading of one YAML document into a typed value.
//!
//! Every document type denies unknown keys. A document that does not load
//! produces one located problem: the key path comes from
//! `serde_path_to_error`, the line from the YAML parser's own position (or,
//! failing that, from the [`LineIndex`]).

use crate::lines::LineIndex;
use crate::problem::{Problem, Problems, Severity, bound_message, quote, shorten_quotes};
use saphyr_parser::{Event, Parser};
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;

/// The deepest nesting of mappings and sequences a YAML document may have.
///
/// pdsim's documents nest about six levels, Kubernetes manifests about ten.
/// The limit exists because the YAML scanner behind `serde_yaml` does work
/// proportional to the nesting depth for every token, so a 200 KB line of
/// `[[[[…` takes minutes to refuse; checking the depth first, with a parser
/// that stops at once, turns that into a refusal in milliseconds.
pub const MAX_YAML_DEPTH: usize = 64;

/// The most nodes that aliases (`*name`) may add to a YAML document by
/// repeating what their anchors name.
///
/// Anchors and aliases save repetition in hand-written documents, a few
/// hundred nodes at most; a chain of aliases to aliases ("billion laughs")
/// multiplies a small text into billions of nodes, all of which a parser
/// would build in memory.
pub const MAX_ALIAS_NODES: u64 = 100_000;

/// The most nodes (scalars, mappings, sequences, aliases) a YAML text may
/// hold.
///
/// Parsing costs a few hundred bytes of memory per node (the parser's
/// events, the value built from them, the line index), so a text under
/// [`MAX_DOCUMENT_BYTES`](crate::files::MAX_DOCUMENT_BYTES) made of `[],`
/// would take about 1 GB and ten seconds. A million nodes is ten megabytes
/// of `key: value` lines, thousands of times pdsim's largest documents, and
/// costs a few hundred megabytes at most.
pub const MAX_YAML_NODES: u64 = 1_000_000;

/// Why a YAML text was refused before it was parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct YamlRefusal {
    /// The 1-based line where the limit was crossed, when known.
    pub line: Option<u32>,
    /// A stable problem code: `too-deep`, `too-many-nodes` or
    /// `too-many-aliases`.
    pub code: &'static str,
    pub message: String,
}

impl std::fmt::Display for YamlRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(line) = self.line {
            write!(f, "line {line}: ")?;
        }
        write!(f, "{}", self.message)
    }
}

fn too_deep(line: Option<u32>) -> YamlRefusal {
    YamlRefusal {
        line,
        code: "too-deep",
        message: format!(
            "mappings and sequences are nested more than {MAX_YAML_DEPTH} levels deep, more than \
             pdsim reads"
        ),
    }
}

/// Checks, in time linear in its length, that `text` stays within
/// [`MAX_YAML_DEPTH`] and [`MAX_ALIAS_NODES`], so the parsers that follow do
/// bounded work, and returns the text to parse: `text` without a leading
/// UTF-8 byte-order mark, which the YAML parser would take for the start
/// of a second document. Every YAML text pdsim parses goes through this
/// first.
///
/// The check walks the events of `saphyr_parser`, which limits flow nesting
/// itself and stops as soon as a limit is crossed. A text that this parser
/// rejects for another reason (a syntax error, which the real parse then
/// reports) is checked by a conservative scan of its brackets instead, so
/// no text reaches `serde_yaml` without a bound on its nesting.
pub fn check_yaml(text: &str) -> Result<&str, YamlRefusal> {
    check_within(text, MAX_YAML_NODES)
}

/// [`check_yaml`] with a node limit of `max_nodes`, so tests can reach it.
fn check_within(text: &str, max_nodes: u64) -> Result<&str, YamlRefusal> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut seen: u64 = 0;
    // For each open collection: its anchor (0 for none) and the nodes in
    // it so far, with aliases counted as the nodes they repeat.
    let mut open: Vec<(usize, u64)> = Vec::new();
    // Nodes under each anchor, by saphyr's anchor id.
    let mut anchored: BTreeMap<usize, u64> = BTreeMap::new();
    let mut repeated: u64 = 0;
    let line_of = |line: usize| Some(u32::try_from(line).unwrap_or(u32::MAX));
    for item in Parser::new_from_str(text) {
        let (event, span) = match item {
            Ok(item) => item,
            Err(e) if e.info().contains("recursion limit") => {
                return Err(too_deep(line_of(e.marker().line())));
            }
            Err(_) => return scan_brackets(text).map(|()| text),
        };
        if matches!(
            event,
            Event::MappingStart(..)
                | Event::SequenceStart(..)
                | Event::Scalar(..)
                | Event::Alias(_)
        ) {
            seen += 1;
            if seen > max_nodes {
                return Err(YamlRefusal {
                    line: line_of(span.start.line()),
                    code: "too-many-nodes",
                    message: format!(
                        "the document has more than {max_nodes} values (keys, items, \
                         collections), more than pdsim reads"
                    ),
                });
            }
        }
        let nodes = match event {
            Event::MappingStart(anchor, _) | Event::SequenceStart(anchor, _) => {
                if open.len() >= MAX_YAML_DEPTH {
                    return Err(too_deep(line_of(span.start.line())));
                }
                open.push((anchor, 1));
                continue;
            }
            Event::MappingEnd | Event::SequenceEnd => {
                let Some((anchor, nodes)) = open.pop() else {
                    continue;
                };
                if anchor > 0 {
                    anchored.insert(anchor, nodes);
                }
                nodes
            }
            Event::Scalar(_, _, anchor, _) => {
                if anchor > 0 {
                    anchored.insert(anchor, 1);
                }
                1
            }
            Event::Alias(anchor) => {
                let nodes = anchored.get(&anchor).copied().unwrap_or(1);
                repeated = repeated.saturating_add(nodes);
                if repeated > MAX_ALIAS_NODES {
                    return Err(YamlRefusal {
                        line: line_of(span.start.line()),
                        code: "too-many-aliases",
                        message: format!(
                            "aliases repeat more than {MAX_ALIAS_NODES} nodes of the document, \
                             more than pdsim reads; write the repeated parts out, or repeat \
                             less"
                        ),
                    });
                }
                nodes
            }
            _ => continue,
        };
        if let Some((_, total)) = open.last_mut() {
            *total = total.saturating_add(nodes);
        }
    }
    Ok(text)
}

/// The fallback of [`check_yaml`]: counts flow brackets outside comments and
/// quoted scalars. It may count a bracket inside a plain scalar (`a[b`),
/// which only makes it stricter, and it sees every bracket that opens a
/// collection, so the depth it finds is at least the real flow depth.
fn scan_brackets(text: &str) -> Result<(), YamlRefusal> {
    let bytes = text.as_bytes();
    let (mut depth, mut line) = (0usize, 1u32);
    let mut i = 0;
    let mut previous = b'\n';
    while i < bytes.len() {
        let b = bytes[i];
        let token_start = matches!(
            previous,
            b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b',' | b':'
        );
        match b {
            b'\n' => line = line.saturating_add(1),
            b'#' if matches!(previous, b' ' | b'\t' | b'\n' | b'\r') => {
                while i + 1 < bytes.len() && bytes[i + 1] != b'\n' {
                    i += 1;
                }
            }
            b'"' | b'\'' if token_start => {
                // Skips to the closing quote; `\"` escapes in double quotes,
                // `''` in single quotes is a close and a reopen.
                i += 1;
                while i < bytes.len() && bytes[i] != b {
                    if bytes[i] == b'\n' {
                        line = line.saturating_add(1);
                    }
                    if b == b'"' && bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_YAML_DEPTH {
                    return Err(too_deep(Some(line)));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        previous = bytes.get(i).copied().unwrap_or(b'\n');
        i += 1;
    }
    Ok(())
}

/// Parses a YAML text into any type after [`check_yaml`], for code outside
/// the strict loader (documents read as loose values). The error is a short
/// message: library errors quote the input, and values are cut to a few
/// hundred characters.
pub fn from_str<T: DeserializeOwned>(text: &str) -> Result<T, String> {
    let text = check_yaml(text).map_err(|e| e.to_string())?;
    serde_yaml::from_str(text)
        .map_err(|e| bound_message(&shorten_quotes(&e.to_string())).into_owned())
}

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
        let mut text = text.into();
        // A UTF-8 byte-order mark says only "UTF-8"; files read from disk
        // lose it on reading, texts from elsewhere lose it here.
        if text.starts_with('\u{feff}') {
            text.drain(..'\u{feff}'.len_utf8());
        }
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
    if let Err(refusal) = check_yaml(&source.text) {
        let mut problems = Problems::new();
        problems.push(Problem {
            severity: Severity::Error,
            file: source.file.clone(),
            line: refusal.line,
            path: String::new(),
            code: refusal.code.to_string(),
            message: refusal.message,
        });
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
            let (code, mut message) = classify(&inner.to_string());
            // serde_yaml prefixes the path of a top-level key too, which the
            // problem carries separately.
            if let Some(rest) = message.strip_prefix(&format!("{path}: ")) {
                message = rest.to_string();
            }
            let path = shorten_path(&path);
            let mut problems = Problems::new();
            // A chart's template is not YAML until Helm renders it, and what
            // the parser makes of its `{{ ... }}` actions says nothing useful.
            if let Some(at) = template_action_line(&source.text) {
                problems.push(Problem {
                    severity: Severity::Error,
                    file: source.file.clone(),
                    line: Some(at),
                    path: String::new(),
                    code: "helm-template".into(),
                    message: format!(
                        "this line holds a Helm template action (`{{{{ ... }}}}`): pdsim reads rendered YAML, not chart templates; render the chart first (`helm template`) and give pdsim what it prints (the parser's own complaint: {message})"
                    ),
                });
                return Err(problems);
            }
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

/// The `kind` of each non-empty document of `text` (`None` for one with
/// none), as far as the first document that does not parse: after an
/// error, serde_yaml's document iterator yields the same error again
/// without end, so it must not be walked past one.
pub fn document_kinds(text: &str) -> Vec<Option<String>> {
    let mut kinds = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let Ok(value) = <serde_yaml::Value as serde::Deserialize>::deserialize(document) else {
            break;
        };
        if !value.is_null() {
            kinds.push(
                value
                    .get("kind")
                    .and_then(serde_yaml::Value::as_str)
                    .map(str::to_string),
            );
        }
    }
    kinds
}

/// The first line (1-based) holding a Go template action, `{{` before
/// `}}`, outside a comment: the mark of a Helm chart's template.
pub fn template_action_line(text: &str) -> Option<u32> {
    text.lines()
        .position(|line| {
            let code = line.trim_start();
            !code.starts_with('#')
                && code
                    .find("{{")
                    .is_some_and(|open| code[open..].contains("}}"))
        })
        .map(|i| u32::try_from(i + 1).unwrap_or(u32::MAX))
}

/// `serde_path_to_error` writes `.` for the root; we write nothing.
fn clean_path(path: &str) -> String {
    if path == "." {
        String::new()
    } else {
        path.to_string()
    }
}

/// `path` with every key longer than a quote allows cut to its start and
/// length, so a problem about a 1 MB key does not carry it whole.
fn shorten_path(path: &str) -> String {
    if path.len() <= crate::problem::QUOTE_CHARS {
        return path.to_string();
    }
    path.split('.')
        .map(|part| quote(part).into_owned())
        .collect::<Vec<_>>()
        .join(".")
}

/// serde's "unknown field `x`, expected one of `a`, `b`" (or "expected
/// `a` or `b`", "expected `a`"), with the nearest expected name named
/// first when it is close enough to be a misspelling: "unknown field
/// `max_num_seq`: did you mean `max_num_seqs`? Expected one of ...".
fn with_suggestion(text: String) -> String {
    let Some((head, expected)) = text.split_once(", expected ") else {
        return text;
    };
    let Some(unknown) = head.split('`').nth(1) else {
        return text;
    };
    match crate::names::nearest(unknown, expected.split('`').skip(1).step_by(2)) {
        Some(name) => format!("{head}: did you mean `{name}`? Expected {expected}"),
        None => text,
    }
}

/// Sorts serde_yaml's messages into stable codes and strips the position
/// suffix, which the problem carries separately.
fn classify(message: &str) -> (&'static str, String) {
    let mut text = shorten_quotes(message);
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
        text = with_suggestion(text);
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
    (code, bound_message(&text).into_owned())
}

#[cfg(test)]
mod tests {
    use super::{
        MAX_ALIAS_NODES, MAX_YAML_DEPTH, MAX_YAML_NODES, Source, check_within, check_yaml,
        from_str, load,
    };
    use std::collections::BTreeMap;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        kind: String,
        #[serde(default)]
        nodes: u64,
        #[serde(default)]
        items: Vec<serde_yaml::Value>,
    }

    fn refusal(text: &str) -> crate::problem::Problem {
        let problems = load::<Doc>(&Source::new("d.yaml", text)).unwrap_err();
        assert_eq!(problems.len(), 1);
        problems.into_vec().pop().unwrap()
    }

    #[test]
    fn deep_nesting_is_refused_at_once_whatever_the_depth() {
        let n = 100_000;
        let cases = [
            "[".repeat(n),
            format!("{}{}", "[".repeat(n), "]".repeat(n)),
            "{a: ".repeat(n),
            format!("kind: x\nitems: {}", "{a: [".repeat(n)),
            format!(
                "kind: x\nitems:\n{}",
                (0..200)
                    .map(|i| format!("{}- \n", " ".repeat(i)))
                    .collect::<String>()
            ),
            // A syntax error before the deep part: the fallback scan sees it.
            format!("kind: x\n  bad: - [\n{}", "[".repeat(n)),
        ];
        for text in &cases {
            let problem = refusal(text);
            assert_eq!(problem.code, "too-deep", "{problem}");
            assert!(problem.message.contains("64 levels"), "{problem}");
            assert!(problem.line.is_some(), "{problem}");
        }
        // The limit itself is fine.
        let ok = format!(
            "kind: x\nitems: {}{}",
            "[".repeat(MAX_YAML_DEPTH - 1),
            "]".repeat(MAX_YAML_DEPTH - 1)
        );
        assert!(check_yaml(&ok).is_ok());
        assert!(load::<Doc>(&Source::new("d.yaml", ok)).is_ok());
    }

    #[test]
    fn alias_bombs_are_refused_before_expansion() {
        let mut text =
            String::from("kind: x\nl0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for level in 1..9 {
            let prev = level - 1;
            let refs = vec![format!("*l{prev}"); 10].join(", ");
            text.push_str(&format!("l{level}: &l{level} [{refs}]\n"));
        }
        let error = check_yaml(&text).unwrap_err();
        assert_eq!(error.code, "too-many-aliases");
        let problem = refusal(&text);
        assert_eq!(problem.code, "too-many-aliases");
        assert!(
            problem.message.contains(&MAX_ALIAS_NODES.to_string()),
            "{problem}"
        );
        // A few aliases are fine.
        let fine = "kind: x\nitems: [&a {b: 1}, *a, *a]\n";
        assert!(load::<Doc>(&Source::new("d.yaml", fine)).is_ok());
    }

    #[test]
    fn a_document_of_too_many_nodes_is_refused_at_the_first_beyond() {
        let text = format!("kind: x\nitems:\n{}", "- [a, b]\n".repeat(100));
        // The mapping, two keys, a value and the list, then 3 nodes per item.
        assert!(check_within(&text, 5 + 300).is_ok());
        let error = check_within(&text, 5 + 299).unwrap_err();
        assert_eq!((error.code, error.line), ("too-many-nodes", Some(102)));
        assert!(error.message.contains("more than 304 values"), "{error}");
        assert_eq!(MAX_YAML_NODES, 1_000_000);
    }

    #[test]
    fn a_big_flat_document_under_the_size_cap_loads() {
        let mut text = String::new();
        for i in 0..100_000 {
            text.push_str(&format!("key{i}: {i}\n"));
        }
        let map: BTreeMap<String, u64> = from_str(&text).unwrap();
        assert_eq!(map.len(), 100_000);
    }

    #[test]
    fn a_bom_is_dropped_and_long_values_are_quoted_short() {
        assert_eq!(
            load::<Doc>(&Source::new("d.yaml", "\u{feff}kind: x\n"))
                .unwrap()
                .kind,
            "x"
        );
        let key = "k".repeat(1_000_000);
        // A plain key longer than 1024 characters is a syntax error; an
        // explicit key (`? key`) may be as long as it likes.
        let problem = refusal(&format!("kind: x\n? {key}\n: 1\n"));
        assert_eq!(problem.code, "unknown-key");
        assert!(problem.to_string().len() <= 600, "{problem}");
        let problem = refusal(&format!("kind: x\n{key}: 1\n"));
        assert_eq!(problem.code, "yaml-syntax");
        assert!(problem.to_string().len() <= 300, "{problem}");
        let value = "v".repeat(1_000_000);
        let problem = refusal(&format!("kind: x\nnodes: {value}\n"));
        assert_eq!(
            (problem.code.as_str(), problem.line),
            ("wrong-type", Some(2))
        );
        assert!(problem.to_string().len() <= 300, "{problem}");
        let error = from_str::<BTreeMap<String, u64>>(&format!("a: {value}")).unwrap_err();
        assert!(error.len() <= 300, "{error}");
    }

    #[test]
    fn an_unknown_key_close_to_a_known_one_is_named_as_its_likely_spelling() {
        // One edit from `nodes`, two (a swap counts one) from `items`: named.
        for (typo, meant) in [("node", "nodes"), ("itmes", "items"), ("kidn", "kind")] {
            let problem = refusal(&format!("kind: x\n{typo}: 1\n"));
            assert_eq!(problem.code, "unknown-key");
            assert!(
                problem.message.contains(&format!(
                    "unknown field `{typo}`: did you mean `{meant}`? Expected one of"
                )),
                "{problem}"
            );
        }
        // Nothing like any of them: the list alone.
        let problem = refusal("kind: x\ncolour: 1\n");
        assert!(!problem.message.contains("did you mean"), "{problem}");
        assert!(
            problem
                .message
                .contains("expected one of `kind`, `nodes`, `items`"),
            "{problem}"
        );
    }
}
