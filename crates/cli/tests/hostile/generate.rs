//! The seeded generator: case number K under base seed S is always the
//! same case. Every case starts from the bundled files, read from the
//! repository at test time, and mutates them.

use super::case::{Case, FifoEnd, Setup, Sig, Step};
use pdsim_core::{Purpose, Stream};
use serde_yaml::Value;
use std::path::Path;

/// The bundled inputs every case mutates.
pub struct Bundle {
    scenarios: Vec<(String, String)>,
    deployments: Vec<(String, String)>,
    /// Router files by their path relative to `deployments/`.
    routers: Vec<(String, String)>,
    trace: Vec<String>,
    model: String,
}

fn read(root: &Path, rel: &str) -> String {
    std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml_files(root: &Path, dir: &str) -> Vec<(String, String)> {
    let mut names: Vec<String> = std::fs::read_dir(root.join(dir))
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let text = read(root, &format!("{dir}/{n}"));
            (n, text)
        })
        .collect()
}

impl Bundle {
    pub fn load(root: &Path) -> Bundle {
        let mut routers = Vec::new();
        for sub in ["pd", "rebel100"] {
            for (name, text) in yaml_files(root, &format!("deployments/{sub}")) {
                routers.push((format!("{sub}/{name}"), text));
            }
        }
        Bundle {
            scenarios: yaml_files(root, "scenarios"),
            deployments: yaml_files(root, "deployments"),
            routers,
            trace: read(root, "traces/default.jsonl")
                .lines()
                .take(200)
                .map(str::to_string)
                .collect(),
            model: read(root, "crates/spec/catalog/models/llama-3.1-8b.yaml"),
        }
    }

    fn scenario(&self, name: &str) -> &str {
        &self
            .scenarios
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("scenarios/{name}"))
            .1
    }

    fn deployment(&self, name: &str) -> &str {
        &self
            .deployments
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("deployments/{name}"))
            .1
    }

    fn router(&self, rel: &str) -> Option<&str> {
        self.routers
            .iter()
            .find(|(n, _)| n == rel)
            .map(|(_, t)| t.as_str())
    }
}

/// The case generator's random stream.
pub struct Rng(Stream);

impl Rng {
    pub fn new(seed: u64, case: u64) -> Rng {
        // The lane is 32 bits: case numbers beyond it fold into the seed.
        Rng(Stream::new(
            seed ^ (case >> 32).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            Purpose::Content,
            case as u32,
        ))
    }
    pub fn below(&mut self, n: usize) -> usize {
        self.0.below(n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, p: f64) -> bool {
        self.0.bernoulli(p)
    }
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }
}

/// Numbers no deployment has, and some it has.
const EXTREMES: &[&str] = &[
    "0",
    "-1",
    "1",
    "2",
    "3",
    "7",
    "1e308",
    "-1e308",
    "1e400",
    "18446744073709551616",
    "18446744073709551615",
    "9223372036854775807",
    "-9223372036854775808",
    "4294967296",
    "4294967295",
    "1000000000000",
    "1e12",
    "1e-300",
    "2048",
    "65536",
    "100000",
    ".nan",
    ".NaN",
    ".inf",
    "-.inf",
    "0.5",
    "-0",
    "0x10",
    "0o17",
    "1_000",
    "+1",
    "999999999999999999999999999999",
];

/// Values of another type.
const SWAPS: &[&str] = &[
    "\"12\"",
    "true",
    "false",
    "null",
    "~",
    "[]",
    "{}",
    "[1, 2]",
    "{a: 1}",
    "''",
    "x",
    "\"\\0\\x07\\u202e\"",
    "!!binary aGVsbG8=",
    "!custom tag",
    "!!float nan",
    "*undefined_alias",
    "<<: *nope",
    "|\n  block\n  text",
    "? complex\n: key",
];

/// A marker that no bundled file contains.
const MARK: &str = "FUZZMARK";

fn deep(rng: &mut Rng) -> String {
    let depth = *rng.pick(&[32usize, 200, 2_000, 20_000, 100_000]);
    if rng.chance(0.5) {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    } else {
        format!("{}1{}", "{a: ".repeat(depth), "}".repeat(depth))
    }
}

/// A YAML snippet to put in place of a value.
fn snippet(rng: &mut Rng) -> (String, String) {
    match rng.below(10) {
        0..=3 => {
            let n = rng.pick(EXTREMES).to_string();
            (n.clone(), format!("number {n}"))
        }
        4..=6 => {
            let s = rng.pick(SWAPS).to_string();
            (s.clone(), format!("type swap to {s:?}"))
        }
        7 => {
            let d = deep(rng);
            let label = format!("nesting of {} bytes", d.len());
            (d, label)
        }
        8 => {
            let n = *rng.pick(&[300usize, 5_000, 100_000]);
            (
                format!("\"{}\"", "x".repeat(n)),
                format!("a {n}-character string"),
            )
        }
        _ => {
            let n = rng.range(1, 5);
            let items: Vec<String> = (0..n).map(|_| rng.pick(EXTREMES).to_string()).collect();
            let s = format!("[{}]", items.join(", "));
            (s.clone(), format!("list {s}"))
        }
    }
}

/// Paths of every node in a YAML value: indices of entries.
fn node_paths(v: &Value, prefix: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
    out.push(prefix.clone());
    match v {
        Value::Mapping(m) => {
            for (i, (_, child)) in m.iter().enumerate() {
                prefix.push(i);
                node_paths(child, prefix, out);
                prefix.pop();
            }
        }
        Value::Sequence(s) => {
            for (i, child) in s.iter().enumerate() {
                prefix.push(i);
                node_paths(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {}
    }
}

fn node_mut<'a>(v: &'a mut Value, path: &[usize]) -> Option<&'a mut Value> {
    let Some((&first, rest)) = path.split_first() else {
        return Some(v);
    };
    match v {
        Value::Mapping(m) => node_mut(m.iter_mut().nth(first)?.1, rest),
        Value::Sequence(s) => node_mut(s.get_mut(first)?, rest),
        _ => None,
    }
}

/// Numeric leaves are where sizes live: they are mutated more often.
fn numeric_paths(v: &Value) -> Vec<Vec<usize>> {
    let mut all = Vec::new();
    node_paths(v, &mut Vec::new(), &mut all);
    let mut copy = v.clone();
    all.into_iter()
        .filter(|p| matches!(node_mut(&mut copy, p), Some(Value::Number(_))))
        .collect()
}

/// The largest document a second structural mutation is stacked on.
const STACKED_MUTATION_MAX_BYTES: usize = 64 * 1024;

/// One structural mutation of a YAML document, through a marker.
fn mutate_tree(rng: &mut Rng, text: &str) -> Option<(String, String)> {
    let mut value: Value = serde_yaml::from_str(text).ok()?;
    let mut paths = Vec::new();
    node_paths(&value, &mut Vec::new(), &mut paths);
    let numeric = numeric_paths(&value);
    let path = if !numeric.is_empty() && rng.chance(0.5) {
        rng.pick(&numeric).clone()
    } else {
        rng.pick(&paths[1.min(paths.len() - 1)..]).clone()
    };
    let what = rng.below(10);
    let label;
    let mut raw = None;
    if what < 6 {
        *node_mut(&mut value, &path)? = Value::String(MARK.into());
        let (s, l) = snippet(rng);
        raw = Some(s);
        label = format!("{l} at node {path:?}");
    } else if what < 8 {
        // Delete the node from its parent.
        let (last, parent) = path.split_last()?;
        match node_mut(&mut value, parent)? {
            Value::Mapping(m) => {
                let key = m.iter().nth(*last)?.0.clone();
                m.shift_remove(&key);
            }
            Value::Sequence(s) => {
                s.remove(*last);
            }
            _ => return None,
        }
        label = format!("node {path:?} deleted");
    } else {
        // An unknown or misspelt key beside the node.
        let (_, parent) = path.split_last()?;
        let key = rng
            .pick(&[
                "unknown_key",
                "nodes ",
                "Nodes",
                "max_num_seqs",
                "kind",
                "tp",
                "",
            ])
            .to_string();
        match node_mut(&mut value, parent)? {
            Value::Mapping(m) => {
                m.insert(Value::String(key.clone()), Value::String(MARK.into()));
            }
            Value::Sequence(s) => s.push(Value::String(MARK.into())),
            _ => return None,
        }
        let (s, _) = snippet(rng);
        raw = Some(s);
        label = format!("key {key:?} added beside node {path:?}");
    }
    let mut out = serde_yaml::to_string(&value).ok()?;
    if let Some(raw) = raw {
        // A multi-line snippet must sit on its own lines, indented.
        let raw = if raw.contains('\n') {
            let line_start = out
                .find(MARK)
                .map(|i| out[..i].rfind('\n').map_or(0, |j| j + 1));
            let indent = line_start
                .map(|s| out[s..].len() - out[s..].trim_start().len())
                .unwrap_or(0);
            raw.replace('\n', &format!("\n{}  ", " ".repeat(indent)))
        } else {
            raw
        };
        out = out.replacen(MARK, &raw, 1);
    }
    Some((out, label))
}

/// A byte-level mutation: truncation, junk, encodings, duplicates.
fn mutate_bytes(rng: &mut Rng, text: &str) -> (Vec<u8>, String) {
    let bytes = text.as_bytes();
    let at = rng.below(bytes.len() + 1);
    match rng.below(14) {
        0 => (bytes[..at].to_vec(), format!("truncated at byte {at}")),
        1 => {
            let mut b = bytes.to_vec();
            let junk: Vec<u8> = (0..rng.range(1, 64))
                .map(|_| rng.below(256) as u8)
                .collect();
            b.splice(at..at, junk.iter().copied());
            (b, format!("{} junk bytes at byte {at}", junk.len()))
        }
        2 => {
            let mut b = b"\xef\xbb\xbf".to_vec();
            b.extend_from_slice(bytes);
            (b, "UTF-8 BOM".into())
        }
        3 => {
            let le = rng.chance(0.5);
            let mut b = if le {
                vec![0xff, 0xfe]
            } else {
                vec![0xfe, 0xff]
            };
            for u in text.encode_utf16() {
                b.extend_from_slice(&if le { u.to_le_bytes() } else { u.to_be_bytes() });
            }
            (b, format!("UTF-16{}", if le { "LE" } else { "BE" }))
        }
        4 => {
            // Duplicate a line: a duplicated key at the same indentation.
            let lines: Vec<&str> = text.lines().collect();
            let i = rng.below(lines.len());
            let mut out: Vec<&str> = lines.clone();
            out.insert(i, lines.get(i).copied().unwrap_or(""));
            (
                (out.join("\n") + "\n").into_bytes(),
                format!("line {} duplicated", i + 1),
            )
        }
        5 => {
            let lines: Vec<&str> = text.lines().collect();
            let i = rng.below(lines.len());
            let out: Vec<&str> = lines
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, l)| *l)
                .collect();
            (
                (out.join("\n") + "\n").into_bytes(),
                format!("line {} deleted", i + 1),
            )
        }
        6 => {
            let n = *rng.pick(&[10_000usize, 200_000, 1 << 20]);
            let mut b = bytes.to_vec();
            let line = format!("# {}\n", "y".repeat(n));
            b.splice(0..0, line.bytes());
            (b, format!("a {n}-byte comment line first"))
        }
        7 => (
            text.replace('\n', "\r\n").into_bytes(),
            "CRLF line ends".into(),
        ),
        8 => {
            let mut b = bytes.to_vec();
            b.extend_from_slice(b"\n---\nkind: Deployment\n---\n...\n");
            (b, "more documents appended".into())
        }
        9 => {
            let mut b = bytes.to_vec();
            if at < b.len() {
                b[at] = rng.below(256) as u8;
            }
            (b, format!("byte {at} replaced"))
        }
        10 => (
            text.replacen("  ", "\t", 1).into_bytes(),
            "a tab in the indentation".into(),
        ),
        11 if rng.chance(0.3) => {
            // Billion laughs: nine levels of ten aliases each.
            let mut bomb =
                String::from("lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
            for i in 1..9 {
                let p = i - 1;
                bomb.push_str(&format!(
                    "lol{i}: &l{i} [*l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}]\n"
                ));
            }
            let mut b = bomb.into_bytes();
            b.extend_from_slice(bytes);
            (b, "an alias bomb before the document".into())
        }
        11 | 12 => {
            // An anchor on the first mapping value, aliased by a new key.
            let t = text.replacen(": ", ": &anchor ", 1) + "extra_alias: *anchor\n";
            (t.into_bytes(), "an anchor and an alias".into())
        }
        _ => (
            b"\x00\x01\x02\xff\xfe".repeat(rng.range(1, 200)),
            "binary junk only".into(),
        ),
    }
}

/// A mutated YAML document: a structural or a byte-level change, or both.
pub fn mutate_yaml(rng: &mut Rng, text: &str) -> (Vec<u8>, String) {
    let choice = rng.below(100);
    if choice < 60
        && let Some((t, l)) = mutate_tree(rng, text)
    {
        // A second mutation re-parses the first one's output; after a
        // snippet of deep nesting (hundreds of kilobytes) that parse alone
        // took the harness 20-40 s (libyaml's tokenizer), while pdsim
        // refuses such a file in milliseconds. Documents that large are
        // mutated once.
        if t.len() <= STACKED_MUTATION_MAX_BYTES
            && rng.chance(0.2)
            && let Some((t2, l2)) = mutate_tree(rng, &t)
        {
            return (t2.into_bytes(), format!("{l}; {l2}"));
        }
        return (t.into_bytes(), l);
    }
    if choice < 62 {
        // The alias bomb used as a value of the document (slow to refuse
        // in a debug build, so rarer than the other damage).
        let mut bomb = String::from("lol0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..9 {
            let p = i - 1;
            bomb.push_str(&format!(
                "lol{i}: &l{i} [*l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}, *l{p}]\n"
            ));
        }
        bomb.push_str(text);
        bomb.push_str("bomb: *l8\n");
        return (bomb.into_bytes(), "an alias bomb used as a value".into());
    }
    mutate_bytes(rng, text)
}

/// A window of the bundled trace, at most `max` rows.
fn trace_rows(rng: &mut Rng, b: &Bundle, max: usize) -> Vec<String> {
    let n = rng.range(1, max);
    let start = if rng.chance(0.7) {
        0
    } else {
        rng.below(b.trace.len() - n)
    };
    b.trace[start..start + n].to_vec()
}

const JSON_EXTREMES: &[&str] = &[
    "0",
    "-1",
    "1e308",
    "-1e308",
    "1e400",
    "18446744073709551616",
    "18446744073709551615",
    "9223372036854775807",
    "1000000000000",
    "1e12",
    "1e15",
    "NaN",
    "Infinity",
    "-Infinity",
    "-0",
    "1.5",
    "\"12\"",
    "null",
    "true",
    "[]",
    "{}",
    "[1e308]",
    "[-1, 18446744073709551616]",
];

/// A mutated Mooncake JSONL trace of at most 20 rows.
pub fn mooncake(rng: &mut Rng, b: &Bundle) -> (Vec<u8>, String) {
    let mut rows = trace_rows(rng, b, 20);
    let text = |rows: &[String]| rows.join("\n") + "\n";
    match rng.below(12) {
        0..=3 => {
            let i = rng.below(rows.len());
            let field = *rng.pick(&["timestamp", "input_length", "output_length", "hash_ids"]);
            let value = rng.pick(JSON_EXTREMES).to_string();
            let mut obj: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&rows[i]).unwrap_or_default();
            obj.insert(field.into(), serde_json::Value::String(MARK.into()));
            rows[i] = serde_json::to_string(&obj)
                .unwrap_or_default()
                .replace(&format!("\"{MARK}\""), &value);
            (
                text(&rows).into_bytes(),
                format!("row {} {field}: {value}", i + 1),
            )
        }
        4 => {
            // Rows far apart: simulated idle time between them.
            let gap = *rng.pick(&[1_000_000_000u64, 1_000_000_000_000, 1_000_000_000_000_000]);
            let mut out = Vec::new();
            for (i, row) in rows.iter().enumerate() {
                let mut obj: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(row).unwrap_or_default();
                obj.insert("timestamp".into(), (gap.saturating_mul(i as u64)).into());
                out.push(serde_json::to_string(&obj).unwrap_or_default());
            }
            (
                text(&out).into_bytes(),
                format!("{} rows {gap} ms apart", out.len()),
            )
        }
        5 => {
            let i = rng.below(rows.len());
            let n = *rng.pick(&[1_000usize, 100_000]);
            let ids: Vec<String> = (0..n).map(|k| k.to_string()).collect();
            let mut obj: serde_json::Map<String, serde_json::Value> =
                serde_json::from_str(&rows[i]).unwrap_or_default();
            obj.insert("hash_ids".into(), serde_json::Value::String(MARK.into()));
            rows[i] = serde_json::to_string(&obj)
                .unwrap_or_default()
                .replace(&format!("\"{MARK}\""), &format!("[{}]", ids.join(",")));
            (
                text(&rows).into_bytes(),
                format!("row {} with {n} hash ids", i + 1),
            )
        }
        6 => {
            let i = rng.below(rows.len());
            let n = *rng.pick(&[100usize, 100_000]);
            rows[i] = format!(
                "{{\"timestamp\": 1, \"input_length\": {}1{}, \"output_length\": 1, \"hash_ids\": [1]}}",
                "[".repeat(n),
                "]".repeat(n)
            );
            (
                text(&rows).into_bytes(),
                format!("row {} nested {n} deep", i + 1),
            )
        }
        7 => {
            let i = rng.below(rows.len());
            rows[i] = rows[i].replacen("{", "{\"timestamp\": 5, ", 1);
            (
                text(&rows).into_bytes(),
                format!("row {} with a duplicated key", i + 1),
            )
        }
        8 => {
            let n = *rng.pick(&[100_000usize, 2 << 20]);
            let i = rng.below(rows.len());
            rows.insert(i, format!("{{\"timestamp\": \"{}\"}}", "9".repeat(n)));
            (
                text(&rows).into_bytes(),
                format!("a {n}-byte line at row {}", i + 1),
            )
        }
        9 => {
            let mut t = b"\xef\xbb\xbf".to_vec();
            t.extend_from_slice(text(&rows).as_bytes());
            (t, "UTF-8 BOM (valid otherwise)".into())
        }
        _ => {
            let (t, l) = mutate_bytes(rng, &text(&rows));
            (t, format!("trace {l}"))
        }
    }
}

/// An Azure 2023 CSV trace of at most 20 rows, mutated or not.
pub fn azure(rng: &mut Rng) -> (Vec<u8>, String) {
    let n = rng.range(1, 20);
    let mut rows = vec!["TIMESTAMP,ContextTokens,GeneratedTokens".to_string()];
    for i in 0..n {
        rows.push(format!(
            "2023-11-16 18:{:02}:{:02}.{:07},{},{}",
            15 + i / 60,
            i % 60,
            rng.below(10_000_000),
            rng.range(1, 3000),
            rng.range(1, 400)
        ));
    }
    let label;
    match rng.below(5) {
        0 => {
            let i = rng.range(1, n);
            let col = rng.below(3);
            let value = *rng.pick(&[
                "-1",
                "0",
                "18446744073709551616",
                "1e308",
                "NaN",
                "",
                "\"unbalanced",
                "2023-13-45 99:99:99",
                "9999-12-31 23:59:59.9999999",
                "0001-01-01 00:00:00",
            ]);
            let mut cells: Vec<String> = rows[i].split(',').map(str::to_string).collect();
            cells[col] = value.to_string();
            rows[i] = cells.join(",");
            label = format!("azure row {} column {col}: {value:?}", i + 1);
        }
        1 => {
            let mut t = b"\xef\xbb\xbf".to_vec();
            t.extend_from_slice((rows.join("\n") + "\n").as_bytes());
            return (t, "azure with a UTF-8 BOM (valid otherwise)".into());
        }
        2 => {
            let (t, l) = mutate_bytes(rng, &(rows.join("\n") + "\n"));
            return (t, format!("azure {l}"));
        }
        _ => label = "azure unmutated".into(),
    }
    ((rows.join("\n") + "\n").into_bytes(), label)
}

const TRACEV2_HEAD: &str = "request_id,client_id,tenant_id,slo_class,vllm_priority,session_id,round_index,prefix_group,prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,model,deadline_us,server_input_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason,adapter";

/// A TraceV2 CSV and the scenario that names it (its header lives there).
pub fn tracev2(rng: &mut Rng, b: &Bundle) -> (Vec<u8>, String, String) {
    let n = rng.range(1, 20);
    let mut rows = vec![TRACEV2_HEAD.to_string()];
    for i in 0..n {
        let input = rng.range(1, 2000);
        let at = i * 50_000;
        rows.push(format!(
            "{i},c1,,{},0,,0,sys,{},true,{input},{},{input},0,0,0,0,,0,0,{at},{at},0,0,0,ok,,,",
            rng.pick(&["", "critical", "batch"]),
            rng.below(input),
            rng.range(1, 300)
        ));
    }
    let mut label = "tracev2 unmutated".to_string();
    if rng.chance(0.6) {
        let i = rng.range(1, n);
        let mut cells: Vec<String> = rows[i].split(',').map(str::to_string).collect();
        let col = rng.below(cells.len());
        let value = rng.pick(JSON_EXTREMES).to_string();
        cells[col] = value.clone();
        rows[i] = cells.join(",");
        label = format!("tracev2 row {} column {col}: {value}", i + 1);
    }
    let mut header = String::from(
        "workload:\n  trace:\n    data: t.csv\n    header:\n      trace_version: 3\n      time_unit: microseconds\n      mode: generated\n",
    );
    if rng.chance(0.3) {
        header.push_str(&format!(
            "      goodput_slo_targets:\n        critical:\n          ttft_ms: {}\n",
            rng.pick(EXTREMES)
        ));
    }
    let scenario = format!("{}\n{header}", b.scenario("default.yaml"));
    ((rows.join("\n") + "\n").into_bytes(), scenario, label)
}

/// A scenario and a deployment that belong together.
const PAIRS: &[(&str, &str)] = &[
    ("default.yaml", "default.yaml"),
    ("4x8-h200.yaml", "1p3d-ep8-epp.yaml"),
    ("4x8-h200.yaml", "1p3d-ep8.yaml"),
    ("4x8-h200.yaml", "2p2d-ep8.yaml"),
    ("4x8-h200.yaml", "colocated-tp8.yaml"),
    ("rebel100-minimax.yaml", "rebel100-4p4d-always.yaml"),
    ("rebel100-minimax.yaml", "rebel100-4p4d-hbm.yaml"),
    ("rebel100-minimax.yaml", "rebel100-4p4d.yaml"),
    ("rebel100-minimax.yaml", "rebel100-agg-512.yaml"),
    ("rebel100-minimax.yaml", "rebel100-agg.yaml"),
];

/// The router file a deployment names, if any.
fn router_of(deployment: &str) -> Option<String> {
    deployment
        .lines()
        .find_map(|l| l.trim().strip_prefix("endpoint_picker_config: "))
        .map(|s| s.trim().to_string())
}

/// Writes a pair into the case as `s.yaml`, `d.yaml` and the router file
/// beside the deployment; returns the router's path if there is one.
fn write_pair(case: &mut Case, b: &Bundle, pair: (&str, &str)) -> Option<String> {
    case.file("s.yaml", b.scenario(pair.0));
    let d = b.deployment(pair.1).to_string();
    let router = router_of(&d);
    if let Some(r) = &router {
        case.file(r, b.router(r).unwrap_or("").to_string());
    }
    case.file("d.yaml", d);
    router
}

fn text_of(case: &Case, path: &str) -> String {
    case.files
        .iter()
        .find(|(p, _)| p == path)
        .map(|(_, b)| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default()
}

/// Mutates one of the case's documents (scenario, deployment or router
/// file); says which and how.
fn mutate_documents(rng: &mut Rng, case: &mut Case, router: &Option<String>) -> String {
    let mut targets = vec!["s.yaml".to_string(), "d.yaml".to_string()];
    if let Some(r) = router {
        targets.push(r.clone());
    }
    let target = rng.pick(&targets).clone();
    let text = text_of(case, &target);
    let (bytes, label) = if target == "s.yaml" && rng.chance(0.15) {
        // Engine releases and models that may have no rules pack or entry.
        let version = *rng.pick(&["0.10.0", "0.31.1", "99.0.0", "0.0.0", "", "0.31", "latest"]);
        (
            text.replace("\"0.31.0\"", &format!("\"{version}\""))
                .into_bytes(),
            format!("engine_version {version:?}"),
        )
    } else if target == "d.yaml" && rng.chance(0.1) {
        let flags = *rng.pick(&[
            "[--pool-name=]",
            "[--unknown-flag=1]",
            "[--pool-name=a, --pool-name=b]",
            "[--kv-cache-usage-percentage-metric=x, --total-queued-requests-metric]",
            "[\"--pool-name=x\", 17, null]",
            "{a: b}",
            "[--pool-name]",
        ]);
        let t = if text.contains("epp_flags:") {
            let mut out = String::new();
            let mut skipping = false;
            for line in text.lines() {
                if line.trim_start().starts_with("epp_flags:") {
                    out.push_str(&format!("  epp_flags: {flags}\n"));
                    skipping = true;
                } else if skipping && line.trim_start().starts_with('-') {
                    continue;
                } else {
                    skipping = false;
                    out.push_str(line);
                    out.push('\n');
                }
            }
            out
        } else {
            format!("{text}router:\n  epp_flags: {flags}\n")
        };
        (t.into_bytes(), format!("epp_flags {flags}"))
    } else {
        mutate_yaml(rng, &text)
    };
    case.file(&target, bytes);
    format!("{target}: {label}")
}

fn small_trace(rng: &mut Rng, b: &Bundle, case: &mut Case, max: usize) {
    let rows = trace_rows(rng, b, max);
    case.file("t.jsonl", rows.join("\n") + "\n");
}

/// Special files and where they can be pointed from.
fn special(rng: &mut Rng, case: &mut Case, base: &str) -> (String, String) {
    match rng.below(11) {
        0 => ("/dev/zero".into(), "/dev/zero".into()),
        1 => ("/dev/null".into(), "/dev/null".into()),
        2 => {
            case.setup.push(Setup::Fifo {
                path: "z.fifo".into(),
                end: FifoEnd::Zeros,
            });
            ("z.fifo".into(), "a FIFO of endless zeros".into())
        }
        3 if rng.chance(0.3) => {
            case.file("row.bin", "{\"timestamp\": 1, ");
            case.setup.push(Setup::Fifo {
                path: "l.fifo".into(),
                end: FifoEnd::Loop("row.bin".into()),
            });
            ("l.fifo".into(), "a FIFO of one endless line".into())
        }
        3 => {
            case.file("feed.bin", base.to_string());
            case.setup.push(Setup::Fifo {
                path: "f.fifo".into(),
                end: FifoEnd::Feed("feed.bin".into()),
            });
            ("f.fifo".into(), "a FIFO carrying a valid file".into())
        }
        4 => {
            case.setup.push(Setup::Dir("adir".into()));
            ("adir".into(), "a directory".into())
        }
        5 => {
            case.setup.push(Setup::Symlink {
                path: "dangling".into(),
                target: "nowhere/missing.yaml".into(),
            });
            ("dangling".into(), "a dangling symlink".into())
        }
        6 => {
            case.setup.push(Setup::Symlink {
                path: "zlink".into(),
                target: "/dev/zero".into(),
            });
            ("zlink".into(), "a symlink to /dev/zero".into())
        }
        7 => {
            case.setup.push(Setup::Repeat {
                path: "huge.yaml".into(),
                count: 6 << 20,
                text: b"a".to_vec(),
            });
            ("huge.yaml".into(), "a 6 MiB one-line file".into())
        }
        8 => {
            case.file(
                "latin1.yaml",
                b"kind: Deployment\nname: caf\xe9\n\xff\xfe\n".to_vec(),
            );
            ("latin1.yaml".into(), "a file that is not UTF-8".into())
        }
        9 => {
            case.file("empty.yaml", Vec::new());
            ("empty.yaml".into(), "an empty file".into())
        }
        _ => ("missing.yaml".into(), "a file that does not exist".into()),
    }
}

/// One random value for a flag of the given kind.
fn value(rng: &mut Rng, kind: &str, files: &[&str]) -> String {
    let junk = [
        "", "-", "--", "x", "💥", "-1", "nan", "1e400", "0x10", " 1", "1 2",
    ];
    if rng.chance(0.12) {
        return rng.pick(&junk).to_string();
    }
    match kind {
        "u64" => rng
            .pick(&[
                "0",
                "1",
                "2",
                "3",
                "7",
                "-1",
                "18446744073709551615",
                "18446744073709551616",
                "4294967296",
                "100000000000",
                "1e11",
                "1000000",
            ])
            .to_string(),
        "small" => rng.pick(&["0", "1", "2", "3", "5"]).to_string(),
        // Counts: small mostly, sometimes absurd.
        "count" if rng.chance(0.8) => rng.pick(&["0", "1", "2", "3"]).to_string(),
        "count" => value(rng, "u64", files),
        "f64" => rng
            .pick(&[
                "0", "-1", "1", "0.5", "1e-300", "1e-4", "1e308", "1e400", "nan", "inf", "-inf",
                "NaN", "100", "5e-324", "-0",
            ])
            .to_string(),
        "share" => rng
            .pick(&["0", "1", "0.9", "-0.1", "1.5", "nan", "inf", "1e-300"])
            .to_string(),
        "slo" => rng
            .pick(&[
                "ttft_ms=500",
                "ttft_ms=500,itl_ms=50,e2e_ms=20000",
                "critical:ttft_ms=100",
                "ttft_ms=-1",
                "ttft_ms=nan",
                "ttft_ms=1e400",
                "ttft_ms=inf",
                "ttft_ms=",
                "=",
                ":",
                "a:b:c=1",
                "unknown_ms=5",
                "ttft_ms=1,ttft_ms=2",
                "ttft_ms=18446744073709551616",
            ])
            .to_string(),
        "format" => rng.pick(&["text", "json", "yaml", "TEXT"]).to_string(),
        "arrivals" => rng.pick(&["trace", "poisson", "uniform"]).to_string(),
        "shard" => rng
            .pick(&[
                "0/1",
                "0/2",
                "1/2",
                "2/2",
                "0/0",
                "1/0",
                "-1/2",
                "0/18446744073709551615",
                "0/100000000000",
                "x/y",
                "1",
                "/",
            ])
            .to_string(),
        "out" => rng
            .pick(&[
                "out",
                "out2",
                "user",
                ".",
                "results",
                "mine.txt",
                "deep/er/out",
                "",
            ])
            .to_string(),
        // Folders and `.` must be refused; a user's file that must survive
        // is aimed at by `output_paths`.
        "trace-out" => rng
            .pick(&["trace.json", "deep/x/trace.json", "user", ".", "", "out"])
            .to_string(),
        "dir" => rng
            .pick(&["cat", "adir", "missing-dir", "/dev/null", "s.yaml", "."])
            .to_string(),
        _ => rng.pick(files).to_string(),
    }
}

/// The flags of each subcommand and the kind of value each takes.
const RUN_FLAGS: &[(&str, &str)] = &[
    ("--scenario", "file"),
    ("--deployment", "file"),
    ("--trace", "file"),
    ("--rate", "f64"),
    ("--requests", "u64"),
    ("--seed", "u64"),
    ("--out", "out"),
    ("--check", ""),
    ("--catalog", "dir"),
    ("--format", "format"),
    ("--slo", "slo"),
    ("--gpu-hour-usd", "f64"),
    ("--perfetto", "trace-out"),
];
const VALIDATE_FLAGS: &[(&str, &str)] = &[
    ("--scenario", "file"),
    ("--catalog", "dir"),
    ("--resolve", ""),
    ("--format", "format"),
];
const COMPARE_FLAGS: &[(&str, &str)] = &[
    ("--scenario", "file"),
    ("--trace", "file"),
    ("--rate", "f64"),
    ("--requests", "u64"),
    ("--seeds", "count"),
    ("--seed", "u64"),
    ("--slo", "slo"),
    ("--gpu-hour-usd", "f64"),
    ("--jobs", "u64"),
    ("--out", "out"),
    ("--catalog", "dir"),
    ("--check", ""),
    ("--perfetto", ""),
];
const PLAN_FLAGS: &[(&str, &str)] = &[
    ("--scenario", "file"),
    ("--slo", "slo"),
    ("--vary-nodes", ""),
    ("--vary-parallel", ""),
    ("--trace", "file"),
    ("--max-requests", "count"),
    ("--arrivals", "arrivals"),
    ("--attainment", "share"),
    ("--max-runs", "count"),
    ("--target-rate", "f64"),
    ("--seed", "u64"),
    ("--shard", "shard"),
    ("--jobs", "u64"),
    ("--out", "out"),
    ("--catalog", "dir"),
];

/// Random command lines over valid small inputs.
fn command_line(rng: &mut Rng, b: &Bundle, case: &mut Case) {
    let pair = if rng.chance(0.6) {
        PAIRS[0]
    } else {
        *rng.pick(&PAIRS[1..5])
    };
    write_pair(case, b, pair);
    case.file("d2.yaml", b.deployment("colocated-tp8.yaml"));
    small_trace(rng, b, case, 8);
    case.file(
        "shape.yaml",
        format!(
            "{}\nworkload:\n  shape: chatbot\n",
            b.scenario("default.yaml")
        ),
    );
    case.file("user/thesis.txt", "chapter one\n");
    case.file("mine.txt", "my notes\n");
    case.setup.push(Setup::Keep("user".into()));
    case.setup.push(Setup::Keep("mine.txt".into()));
    let files = [
        "s.yaml",
        "d.yaml",
        "d2.yaml",
        "t.jsonl",
        "shape.yaml",
        "missing.yaml",
        "/dev/null",
        "user",
        "@ROOT@/scenarios/default.yaml",
        "@ROOT@/deployments/default.yaml",
    ];
    // compare and plan run several simulations: rarer, to keep the suite
    // within its time budget.
    let sub = match rng.below(50) {
        0..=19 => "run",
        20..=38 => "validate",
        39..=42 => "compare",
        43..=45 => "plan",
        _ => "other",
    };
    let mut args: Vec<String> = vec![sub.to_string()];
    let table = match sub {
        "run" => RUN_FLAGS,
        "validate" => VALIDATE_FLAGS,
        "compare" => COMPARE_FLAGS,
        "plan" => PLAN_FLAGS,
        _ => {
            const LINES: &[&[&str]] = &[
                &["--help"],
                &["--version"],
                &[],
                &["frobnicate"],
                &["plan", "merge"],
                &["plan", "merge", "user"],
                &["plan", "merge", "missing-dir", "--out", "user"],
                &["run", "--help"],
                &["-x"],
                &["--", "run"],
                &[
                    "export",
                    "--scenario",
                    "s.yaml",
                    "--deployment",
                    "d.yaml",
                    "--out",
                    "user",
                ],
                &[
                    "export",
                    "--scenario",
                    "s.yaml",
                    "--deployment",
                    "d.yaml",
                    "--out",
                    "x",
                ],
                &[
                    "export",
                    "--scenario",
                    "s.yaml",
                    "--deployment",
                    "/dev/null",
                ],
                &[
                    "export",
                    "--scenario",
                    "s.yaml",
                    "--deployment",
                    "d.yaml",
                    "--model-uri",
                    "",
                ],
                &["import", "--scenario", "s.yaml", "user"],
                &["import", "--scenario", "s.yaml", "/dev/null"],
                &[
                    "import",
                    "--scenario",
                    "s.yaml",
                    "missing-dir",
                    "--out",
                    "user",
                ],
                &["import", "--scenario", "s.yaml", "t.jsonl"],
            ];
            let line = *rng.pick(LINES);
            case.step(line);
            case.label = format!("command line {line:?}");
            return;
        }
    };
    // The valid core each command needs, most of the time.
    let scenario = if rng.chance(0.3) {
        "shape.yaml"
    } else {
        "s.yaml"
    };
    let mut given_trace = false;
    if rng.chance(0.85) {
        match sub {
            "run" => {
                args.extend(["--scenario".into(), scenario.into()]);
                args.extend(["--deployment".into(), "d.yaml".into()]);
                if scenario == "s.yaml" || rng.chance(0.5) {
                    args.extend(["--trace".into(), "t.jsonl".into()]);
                    given_trace = true;
                }
            }
            "validate" => args.extend(["--scenario".into(), "s.yaml".into(), "d.yaml".into()]),
            "compare" | "plan" => {
                args.extend(["--scenario".into(), scenario.into()]);
                if scenario == "s.yaml" || rng.chance(0.5) {
                    args.extend(["--trace".into(), "t.jsonl".into()]);
                    given_trace = true;
                }
                if sub == "plan" {
                    args.extend(["--slo".into(), "ttft_ms=500".into()]);
                    args.extend(["--max-runs".into(), "2".into()]);
                    args.extend(["--max-requests".into(), "5".into()]);
                }
                args.push("d.yaml".into());
                if rng.chance(0.5) {
                    args.push("d2.yaml".into());
                }
            }
            _ => {}
        }
    } else if sub == "run" {
        // Without a scenario, `run` replays the bundled 2,000-request trace:
        // seconds in a debug build, so a small trace stands in (the signal
        // cases run the default).
        args.extend(["--trace".into(), "t.jsonl".into()]);
        given_trace = true;
    }
    if scenario == "shape.yaml" && !given_trace && sub != "validate" && rng.chance(0.8) {
        args.extend(["--rate".into(), "5".into(), "--requests".into(), "5".into()]);
    }
    // Then random flags: present, repeated, without a value, odd values.
    for _ in 0..rng.range(0, 4) {
        let (flag, kind) = *rng.pick(table);
        let spelled = if rng.chance(0.05) {
            format!("{flag}x")
        } else {
            flag.to_string()
        };
        if kind.is_empty() {
            args.push(spelled);
            continue;
        }
        let v = value(rng, kind, &files);
        if flag == "--trace" {
            given_trace = true;
        }
        match rng.below(10) {
            0 => args.push(spelled),
            1 => args.push(format!("{spelled}={v}")),
            _ => {
                args.push(spelled);
                args.push(v);
            }
        }
    }
    if rng.chance(0.05) {
        args.push(rng.pick(&files).to_string());
    }
    // The 4x8 scenario has a workload shape too.
    let runs_shape = !given_trace
        && (args.iter().any(|a| a == "shape.yaml")
            || (pair.0 == "4x8-h200.yaml" && args.iter().any(|a| a == "s.yaml")));
    let label = format!("command line for {sub}");
    let step = Step {
        args,
        ..Step::default()
    };
    case.steps.push(step);
    let step = case.steps.last_mut().expect("pushed");
    if matches!(sub, "run" | "compare") && !runs_shape {
        for flag in ["--rate", "--requests"] {
            if step.args.iter().any(|a| a == flag) {
                step.unused.push(flag.to_string());
            }
        }
    }
    case.label = label;
}

/// Builds case number `index`.
pub fn generate(b: &Bundle, seed: u64, index: u64) -> Case {
    let mut rng = Rng::new(seed, index);
    let mut case = Case::default();
    let kind = rng.below(1000);
    let label = match kind {
        // Documents, validated.
        0..=349 | 987..=999 => {
            case.kind = "validate-documents";
            let pair = *rng.pick(PAIRS);
            let router = write_pair(&mut case, b, pair);
            let l = mutate_documents(&mut rng, &mut case, &router);
            let mut args = vec!["validate", "--scenario", "s.yaml", "d.yaml"];
            if rng.chance(0.3) {
                args.push("--resolve");
            }
            if rng.chance(0.2) {
                args.extend(["--format", "json"]);
            }
            case.step(&args);
            format!("validate {pair:?}, {l}")
        }
        // Documents, run on a tiny trace.
        350..=424 => {
            case.kind = "run-documents";
            let pair = *rng.pick(&PAIRS[..5]);
            let router = write_pair(&mut case, b, pair);
            small_trace(&mut rng, b, &mut case, 5);
            let l = mutate_documents(&mut rng, &mut case, &router);
            let mut args = vec![
                "run",
                "--scenario",
                "s.yaml",
                "--deployment",
                "d.yaml",
                "--trace",
                "t.jsonl",
                "--out",
                "out",
            ];
            if rng.chance(0.3) {
                args.push("--check");
            }
            case.step(&args);
            format!("run {pair:?}, {l}")
        }
        // validate and run must agree on the same documents.
        425..=454 => {
            case.kind = "validate-run-agree";
            let pair = *rng.pick(&PAIRS[..5]);
            let router = write_pair(&mut case, b, pair);
            small_trace(&mut rng, b, &mut case, 3);
            let l = mutate_documents(&mut rng, &mut case, &router);
            case.step(&["validate", "--scenario", "s.yaml", "d.yaml"]);
            case.step(&[
                "run",
                "--scenario",
                "s.yaml",
                "--deployment",
                "d.yaml",
                "--trace",
                "t.jsonl",
                "--out",
                "out",
            ])
            .agree = true;
            format!("validate then run {pair:?}, {l}")
        }
        // Traces.
        455..=564 => {
            case.kind = "traces";
            let (file, l) = match rng.below(10) {
                0..=6 => {
                    let (t, l) = mooncake(&mut rng, b);
                    case.file("t.jsonl", t);
                    ("t.jsonl", l)
                }
                7..=8 => {
                    let (t, l) = azure(&mut rng);
                    case.file("t.csv", t);
                    ("t.csv", l)
                }
                _ => {
                    let (t, s, l) = tracev2(&mut rng, b);
                    case.file("t.csv", t);
                    case.file("s.yaml", s);
                    ("t.csv", l)
                }
            };
            let bom_valid = l.contains("(valid otherwise)");
            let step = if case.files.iter().any(|(p, _)| p == "s.yaml") {
                if rng.chance(0.5) {
                    case.step(&["run", "--scenario", "s.yaml", "--out", "out"])
                } else {
                    case.step(&[
                        "run",
                        "--scenario",
                        "s.yaml",
                        "--trace",
                        file,
                        "--out",
                        "out",
                    ])
                }
            } else {
                case.step(&["run", "--trace", file, "--out", "out"])
            };
            if bom_valid {
                step.expect = Some(0);
            }
            format!("run on trace: {l}")
        }
        // Special files in every input slot.
        565..=664 => {
            case.kind = "special-files";
            let pair = *rng.pick(&PAIRS[..5]);
            let router = write_pair(&mut case, b, pair);
            small_trace(&mut rng, b, &mut case, 3);
            let slot = rng.below(9);
            let base = match slot {
                0 | 1 | 3 => text_of(&case, "s.yaml"),
                2 | 4 => text_of(&case, "d.yaml"),
                5 => text_of(&case, "t.jsonl"),
                6 => router
                    .as_ref()
                    .map(|r| text_of(&case, r))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            let (path, what) = special(&mut rng, &mut case, &base);
            let (args, slot_name): (Vec<String>, &str) = match slot {
                0 => (
                    vec![
                        "validate".into(),
                        "--scenario".into(),
                        path.clone(),
                        "d.yaml".into(),
                    ],
                    "validate --scenario",
                ),
                1 => (
                    vec!["validate".into(), path.clone()],
                    "validate positional document",
                ),
                2 => (
                    vec![
                        "validate".into(),
                        "--scenario".into(),
                        "s.yaml".into(),
                        path.clone(),
                    ],
                    "validate deployment",
                ),
                3 => (run_args(&path, "d.yaml", "t.jsonl"), "run --scenario"),
                4 => (run_args("s.yaml", &path, "t.jsonl"), "run --deployment"),
                5 => (run_args("s.yaml", "d.yaml", &path), "run --trace"),
                6 => {
                    // The deployment's router file.
                    let d = text_of(&case, "d.yaml");
                    let d = match &router {
                        Some(r) => d.replace(r.as_str(), &path),
                        None => format!("{d}router:\n  endpoint_picker_config: {path}\n"),
                    };
                    case.file("d.yaml", d);
                    if rng.chance(0.5) {
                        (
                            vec![
                                "validate".into(),
                                "--scenario".into(),
                                "s.yaml".into(),
                                "d.yaml".into(),
                            ],
                            "validate endpoint_picker_config",
                        )
                    } else {
                        (
                            run_args("s.yaml", "d.yaml", "t.jsonl"),
                            "run endpoint_picker_config",
                        )
                    }
                }
                7 => {
                    let mut a = run_args("s.yaml", "d.yaml", "t.jsonl");
                    a.extend(["--catalog".into(), path.clone()]);
                    (a, "run --catalog")
                }
                _ => {
                    // A plan shard folder whose plan.json is special, or
                    // the shard folder itself.
                    if rng.chance(0.5) {
                        case.setup.push(Setup::Dir("shard".into()));
                        let target = if path.starts_with('/') {
                            path.clone()
                        } else {
                            format!("../{path}")
                        };
                        case.setup.push(Setup::Symlink {
                            path: "shard/plan.json".into(),
                            target,
                        });
                        (
                            vec![
                                "plan".into(),
                                "merge".into(),
                                "shard".into(),
                                "--out".into(),
                                "merged".into(),
                            ],
                            "plan merge shard/plan.json",
                        )
                    } else {
                        (
                            vec![
                                "plan".into(),
                                "merge".into(),
                                path.clone(),
                                "--out".into(),
                                "merged".into(),
                            ],
                            "plan merge SHARD",
                        )
                    }
                }
            };
            case.steps.push(Step {
                args,
                ..Step::default()
            });
            format!("{what} as {slot_name}")
        }
        // A user catalog with a mutated model.
        665..=689 => {
            case.kind = "user-catalog";
            write_pair(&mut case, b, PAIRS[0]);
            small_trace(&mut rng, b, &mut case, 3);
            let (model, l) = mutate_yaml(&mut rng, &b.model);
            case.file("cat/models/fuzz-model.yaml", model);
            let s = text_of(&case, "s.yaml").replace("llama-3.1-8b", "fuzz-model");
            case.file("s.yaml", s);
            if rng.chance(0.5) {
                case.step(&[
                    "validate",
                    "--catalog",
                    "cat",
                    "--scenario",
                    "s.yaml",
                    "d.yaml",
                ]);
            } else {
                case.step(&[
                    "run",
                    "--catalog",
                    "cat",
                    "--scenario",
                    "s.yaml",
                    "--deployment",
                    "d.yaml",
                    "--trace",
                    "t.jsonl",
                    "--out",
                    "out",
                ]);
            }
            format!("user catalog model: {l}")
        }
        // Random command lines.
        690..=889 => {
            case.kind = "command-lines";
            command_line(&mut rng, b, &mut case);
            return finish(case, seed, index);
        }
        // Output paths: the user's files must survive.
        890..=939 => {
            case.kind = "output-paths";
            output_paths(&mut rng, b, &mut case)
        }
        // Documents with a BOM, valid otherwise: accepted.
        940..=959 => {
            case.kind = "bom";
            let pair = *rng.pick(&PAIRS[..5]);
            write_pair(&mut case, b, pair);
            let target = *rng.pick(&["s.yaml", "d.yaml"]);
            let mut t = b"\xef\xbb\xbf".to_vec();
            t.extend_from_slice(text_of(&case, target).as_bytes());
            case.file(target, t);
            case.step(&["validate", "--scenario", "s.yaml", "d.yaml"])
                .expect = Some(0);
            format!("{target} with a UTF-8 BOM, {pair:?}")
        }
        // Time and sizes: rates, far arrivals, big clusters.
        960..=974 => {
            case.kind = "rates";
            case.file(
                "shape.yaml",
                format!(
                    "{}\nworkload:\n  shape: chatbot\n",
                    b.scenario("default.yaml")
                ),
            );
            let rate = *rng.pick(&[
                "1e-300", "1e-4", "1e-9", "5e-324", "1e308", "0", "-1", "nan", "inf", "1e12",
            ]);
            let requests = *rng.pick(&["1", "2", "5", "0", "50"]);
            case.step(&[
                "run",
                "--scenario",
                "shape.yaml",
                "--rate",
                rate,
                "--requests",
                requests,
                "--out",
                "out",
            ]);
            format!("shape at --rate {rate}, --requests {requests}")
        }
        975..=979 => {
            case.kind = "cluster-sizes";
            let nodes = *rng.pick(&["16", "256", "2048", "1000000000000", "18446744073709551615"]);
            let gpus = *rng.pick(&["8", "8", "64", "1000000"]);
            let s = b
                .scenario("4x8-h200.yaml")
                .replace("nodes: 4", &format!("nodes: {nodes}"))
                .replace("gpus_per_node: 8", &format!("gpus_per_node: {gpus}"));
            case.file("s.yaml", s);
            case.file(
                "d.yaml",
                b.deployment("colocated-tp8.yaml")
                    .replace("nodes: 4", &format!("nodes: {nodes}")),
            );
            small_trace(&mut rng, b, &mut case, 5);
            case.step(&[
                "run",
                "--scenario",
                "s.yaml",
                "--deployment",
                "d.yaml",
                "--trace",
                "t.jsonl",
                "--out",
                "out",
            ]);
            format!("a cluster of {nodes} nodes x {gpus} GPUs")
        }
        // Interrupts.
        980..=982 => {
            case.kind = "signals";
            let sig = rng.pick(&[Sig::Int, Sig::Term, Sig::Kill]).clone();
            // Milliseconds after the staging folder appears; the run is
            // long enough (60,000 requests) to be still going.
            let ms = rng.range(0, 300) as u64;
            small_trace(&mut rng, b, &mut case, 3);
            case.file(
                "shape.yaml",
                SHAPE_SCENARIO.replace("@S@", b.scenario("default.yaml")),
            );
            case.step(&LONG_RUN).signal = Some((sig.clone(), ms));
            if sig == Sig::Kill {
                case.step(&["run", "--trace", "t.jsonl", "--out", "r"]);
            }
            format!("SIG{} after {ms} ms", sig.name())
        }
        // Two runs that differ only in the trace must not collide.
        983..=986 => {
            case.kind = "result-names";
            let rows = trace_rows(&mut rng, b, 4);
            case.file("t1.jsonl", rows.join("\n") + "\n");
            let rows2 = trace_rows(&mut rng, b, 4);
            case.file("t2.jsonl", rows2.join("\n") + "\n");
            case.step(&["run", "--trace", "t1.jsonl"]);
            case.step(&["run", "--trace", "t2.jsonl"]);
            "two runs with different traces, default output folder".into()
        }
        _ => unreachable!("the kind is below 1000"),
    };
    case.label = label;
    finish(case, seed, index)
}

/// The default scenario with a workload shape (`@S@` is its text).
const SHAPE_SCENARIO: &str = "@S@\nworkload:\n  shape: chatbot\n";

/// A run long enough to be interrupted while it writes.
const LONG_RUN: [&str; 9] = [
    "run",
    "--scenario",
    "shape.yaml",
    "--rate",
    "1000",
    "--requests",
    "60000",
    "--out",
    "r",
];

fn finish(mut case: Case, seed: u64, index: u64) -> Case {
    case.label = format!("seed {seed} case {index}: {}", case.label);
    case
}

fn run_args(scenario: &str, deployment: &str, trace: &str) -> Vec<String> {
    [
        "run",
        "--scenario",
        scenario,
        "--deployment",
        deployment,
        "--trace",
        trace,
        "--out",
        "out",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// `--out` and `--perfetto` aimed at things pdsim did not write.
fn output_paths(rng: &mut Rng, b: &Bundle, case: &mut Case) -> String {
    small_trace(rng, b, case, 3);
    case.file("user/thesis.txt", "chapter one\n");
    case.file("user/notes/a.md", "# notes\n");
    case.file("mine.txt", "my notes\n");
    let run = |out: &str| -> Vec<String> {
        ["run", "--trace", "t.jsonl", "--out", out]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    let (args, keep, label): (Vec<String>, &str, &str) = match rng.below(13) {
        0 => (run("user"), "user", "--out a user's folder"),
        1 => (run("."), "mine.txt", "--out ."),
        2 => (run("user/thesis.txt"), "user", "--out a user's file"),
        3 => {
            case.setup.push(Setup::Home("home".into()));
            case.file("home/.profile", "export A=1\n");
            (run("home"), "home", "--out the home folder")
        }
        4 => {
            case.setup.push(Setup::Fifo {
                path: "p.fifo".into(),
                end: FifoEnd::Drain,
            });
            let mut a = run("out");
            a.extend(["--perfetto".into(), "p.fifo".into()]);
            (a, "p.fifo", "--perfetto a FIFO")
        }
        5 => {
            let mut a = run("out");
            a.extend(["--perfetto".into(), "user".into()]);
            (a, "user", "--perfetto a user's folder")
        }
        6 => {
            case.setup.push(Setup::Symlink {
                path: "link".into(),
                target: "user".into(),
            });
            (run("link"), "user", "--out a symlink to a user's folder")
        }
        7 => {
            case.file("results/older/summary.json", "{}\n");
            (
                run("results"),
                "results",
                "--out the folder that holds results",
            )
        }
        8 => {
            case.file("s.yaml", b.scenario("4x8-h200.yaml"));
            case.file("d.yaml", b.deployment("colocated-tp8.yaml"));
            (
                [
                    "compare",
                    "--scenario",
                    "s.yaml",
                    "--trace",
                    "t.jsonl",
                    "--out",
                    "user",
                    "d.yaml",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect(),
                "user",
                "compare --out a user's folder",
            )
        }
        9 => {
            case.file("s.yaml", b.scenario("4x8-h200.yaml"));
            case.file("d.yaml", b.deployment("colocated-tp8.yaml"));
            (
                [
                    "plan",
                    "--scenario",
                    "s.yaml",
                    "--trace",
                    "t.jsonl",
                    "--slo",
                    "ttft_ms=500",
                    "--max-runs",
                    "1",
                    "--max-requests",
                    "3",
                    "--out",
                    "user",
                    "d.yaml",
                ]
                .iter()
                .map(|s| s.to_string())
                .collect(),
                "user",
                "plan --out a user's folder",
            )
        }
        10 => {
            // A result folder of pdsim's own, replaced by the same command.
            case.step(&["run", "--trace", "t.jsonl", "--out", "r"]);
            (run("r"), "mine.txt", "--out pdsim's own earlier result")
        }
        11 => {
            // A file pdsim did not write is never replaced by a trace.
            let mut a = run("out");
            a.extend(["--perfetto".into(), "mine.txt".into()]);
            (a, "mine.txt", "--perfetto a user's file")
        }
        _ => {
            case.file("user/trace.json", "precious\n");
            let mut a = run("out");
            a.extend(["--perfetto".into(), "user/notes".into()]);
            (a, "user", "--perfetto a user's subfolder")
        }
    };
    case.setup.push(Setup::Keep(keep.into()));
    if keep != "mine.txt" {
        case.setup.push(Setup::Keep("mine.txt".into()));
    }
    case.steps.push(Step {
        args,
        ..Step::default()
    });
    label.to_string()
}
