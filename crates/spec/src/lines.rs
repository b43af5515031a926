//! Maps key paths to the line they are written on.
//!
//! serde gives us typed documents but forgets where each value came from, so a
//! second, event-level pass over the same text records the line of every key
//! and every sequence item under the same dotted path the validators use
//! (`pools[1].parallel.dp_local`). A check that finds a problem at a path asks
//! this index for the line; a path that is not written (an omitted key) falls
//! back to its nearest written ancestor.

use saphyr_parser::{Event, Parser};
use std::collections::BTreeMap;

/// Line numbers (1-based) of the keys and items of one YAML document.
#[derive(Clone, Debug, Default)]
pub struct LineIndex {
    lines: BTreeMap<String, u32>,
}

enum Frame {
    /// A mapping at `path`; `key` holds the key whose value comes next.
    Map { path: String, key: Option<String> },
    /// A sequence at `path`; `next` is the index of the next item.
    Seq { path: String, next: usize },
    /// A node used as a mapping key (rare, e.g. `? [a, b]`); ignored.
    ComplexKey,
}

fn join(parent: &str, key: &str) -> String {
    if parent.is_empty() {
        key.to_string()
    } else {
        format!("{parent}.{key}")
    }
}

impl LineIndex {
    /// Builds the index. Text the event parser rejects yields whatever was
    /// indexed before the error; the typed loader reports the error itself.
    pub fn build(text: &str) -> LineIndex {
        let mut lines = BTreeMap::new();
        let mut stack: Vec<Frame> = Vec::new();
        let mut events: u64 = 0;
        for item in Parser::new_from_str(text) {
            let Ok((event, span)) = item else { break };
            // A text with more nodes than this is refused by `check_yaml`
            // before it is loaded (a node is at most two events).
            events += 1;
            if events > 2 * crate::load::MAX_YAML_NODES + 8 {
                break;
            }
            let line = u32::try_from(span.start.line()).unwrap_or(u32::MAX);
            match event {
                Event::Scalar(value, ..) => {
                    if let Some(Frame::Map { path, key }) = stack.last_mut()
                        && key.is_none()
                    {
                        let child = join(path, &value);
                        lines.entry(child).or_insert(line);
                        *key = Some(value.into_owned());
                        continue;
                    }
                    Self::value_done(&mut stack, &mut lines, line);
                }
                Event::Alias(_) => Self::value_done(&mut stack, &mut lines, line),
                Event::MappingStart(..) | Event::SequenceStart(..) => {
                    // Deeper text is refused by `check_yaml` before it is
                    // loaded; indexing it would only build longer paths.
                    if stack.len() >= crate::load::MAX_YAML_DEPTH {
                        break;
                    }
                    let is_map = matches!(event, Event::MappingStart(..));
                    let path = match stack.last_mut() {
                        None => Some(String::new()),
                        Some(Frame::Map { key: None, .. }) | Some(Frame::ComplexKey) => None,
                        Some(Frame::Map {
                            path,
                            key: Some(key),
                        }) => Some(join(path, key)),
                        Some(Frame::Seq { path, next }) => {
                            let child = format!("{path}[{next}]");
                            lines.entry(child.clone()).or_insert(line);
                            Some(child)
                        }
                    };
                    stack.push(match (path, is_map) {
                        (None, _) => Frame::ComplexKey,
                        (Some(path), true) => Frame::Map { path, key: None },
                        (Some(path), false) => Frame::Seq { path, next: 0 },
                    });
                }
                Event::MappingEnd | Event::SequenceEnd => {
                    let done = stack.pop();
                    match (done, stack.last_mut()) {
                        (Some(Frame::ComplexKey), Some(Frame::Map { key, .. }))
                            if key.is_none() =>
                        {
                            *key = Some("?".to_string());
                        }
                        (_, Some(Frame::Map { key, .. })) => *key = None,
                        (_, Some(Frame::Seq { next, .. })) => *next += 1,
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        LineIndex { lines }
    }

    /// Records the end of a scalar value in whatever container holds it.
    fn value_done(stack: &mut [Frame], lines: &mut BTreeMap<String, u32>, line: u32) {
        match stack.last_mut() {
            Some(Frame::Map { key, .. }) => *key = None,
            Some(Frame::Seq { path, next }) => {
                lines.entry(format!("{path}[{next}]")).or_insert(line);
                *next += 1;
            }
            _ => {}
        }
    }

    /// One index per document of a multi-document text (`---` separated,
    /// as Kubernetes manifests are written), each with the lines of the
    /// whole text. A text without documents yields one empty index.
    pub fn build_documents(text: &str) -> Vec<LineIndex> {
        let mut starts: Vec<usize> = Vec::new();
        for item in Parser::new_from_str(text) {
            let Ok((event, span)) = item else { break };
            if let Event::DocumentStart(..) = event {
                starts.push(span.start.line().max(1));
            }
        }
        if starts.is_empty() {
            return vec![LineIndex::default()];
        }
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        let mut out = Vec::with_capacity(starts.len());
        for (i, start) in starts.iter().enumerate() {
            let end = starts.get(i + 1).copied().unwrap_or(lines.len() + 1);
            let from = (*start - 1).min(lines.len());
            let to = (end.max(*start) - 1).min(lines.len());
            let slice: String = lines[from..to].concat();
            let offset = u32::try_from(from).unwrap_or(u32::MAX);
            let mut index = LineIndex::build(&slice);
            for line in index.lines.values_mut() {
                *line = line.saturating_add(offset);
            }
            // The empty path is the document itself, for a problem with
            // the document as a whole (a scalar where an object belongs).
            index.lines.insert(String::new(), offset.saturating_add(1));
            out.push(index);
        }
        out
    }

    /// The line of `path`, or of its nearest ancestor that is written down.
    pub fn line_of(&self, path: &str) -> Option<u32> {
        let mut current = path;
        loop {
            if let Some(line) = self.lines.get(current) {
                return Some(*line);
            }
            let cut = current.rfind(['.', '['])?;
            current = &current[..cut];
            if current.is_empty() {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::LineIndex;

    #[test]
    fn keys_and_items_get_their_lines() {
        let text = "kind: Deployment\npools:\n  - role: prefill\n    parallel:\n      tp: 1\n  - role: decode\n    nodes: 3\noffload:\n  tiers: [{tier: a, bytes: 1}]\n";
        let index = LineIndex::build(text);
        assert_eq!(index.line_of("kind"), Some(1));
        assert_eq!(index.line_of("pools"), Some(2));
        assert_eq!(index.line_of("pools[0]"), Some(3));
        assert_eq!(index.line_of("pools[0].parallel.tp"), Some(5));
        assert_eq!(index.line_of("pools[1].nodes"), Some(7));
        assert_eq!(index.line_of("offload.tiers[0].bytes"), Some(9));
        // An omitted key falls back to its nearest written ancestor.
        assert_eq!(index.line_of("pools[1].parallel.dp_local"), Some(6));
        assert_eq!(index.line_of("pd_transfer"), None);
    }

    #[test]
    fn each_document_of_a_stream_gets_its_own_lines() {
        let text = "# pools\nkind: InferencePool\nspec:\n  targetPorts: [{number: 8000}]\n---\nkind: InferenceObjective\nspec:\n  priority: 1\n  poolRef:\n    name: p\n";
        let docs = LineIndex::build_documents(text);
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].line_of("kind"), Some(2));
        assert_eq!(docs[0].line_of("spec.targetPorts"), Some(4));
        assert_eq!(docs[1].line_of("kind"), Some(6));
        assert_eq!(docs[1].line_of("spec.poolRef.name"), Some(10));
        assert_eq!(
            docs[1].line_of("spec.targetPorts"),
            Some(7),
            "not the first document's"
        );
        assert_eq!(
            docs[1].line_of(""),
            Some(5),
            "the document starts at its `---`"
        );
        assert_eq!(LineIndex::build_documents("").len(), 1);
    }
}
