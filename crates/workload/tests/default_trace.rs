//! The bundled default trace, `traces/default.jsonl`, must parse completely
//! and keep the statistics `traces/README.md` states, so the README and the
//! file cannot drift apart unnoticed.

use pdsim_core::SimTime;
use pdsim_workload::{MooncakeReader, RequestSource, RequestSpec, TraceFormat, TraceReader};
use std::collections::BTreeSet;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces/default.jsonl")
}

#[test]
fn the_default_trace_parses_and_matches_its_readme() {
    let file = BufReader::new(File::open(path()).expect("traces/default.jsonl is bundled"));
    let mut reader = MooncakeReader::new(file, "traces/default.jsonl");
    let all: Vec<RequestSpec> = reader
        .by_ref()
        .map(|r| r.unwrap_or_else(|e| panic!("{e}")))
        .collect();
    assert_eq!(all.len(), 2_000);
    assert_eq!(reader.outputs_raised(), 0);
    let input: u64 = all.iter().map(|r| r.prompt.tokens()).sum();
    let output: u64 = all.iter().map(|r| r.output_tokens as u64).sum();
    assert_eq!((input, output), (3_975_556, 543_020));
    assert_eq!(all[0].arrival, SimTime::ZERO);
    assert_eq!(all.last().unwrap().arrival, SimTime::from_ms(201_057 - 117));
    assert!(
        all.iter()
            .all(|r| (500..=8_000).contains(&r.prompt.tokens()))
    );
    assert!(all.iter().all(|r| (50..=800).contains(&r.output_tokens)));

    // Tokens in a leading run of segments some earlier request already had:
    // what an unbounded prefix cache could reuse (62.7 % in the README).
    let mut seen = BTreeSet::new();
    let mut reused = 0u64;
    for r in &all {
        let mut leading = true;
        for s in &r.prompt.segments {
            leading &= seen.contains(&(s.id, s.tokens)) || seen.contains(&(s.id, 512));
            if leading {
                reused += s.tokens as u64;
            }
        }
        seen.extend(r.prompt.segments.iter().map(|s| (s.id, s.tokens)));
    }
    assert_eq!(reused, 2_492_416);
}

#[test]
fn the_default_trace_is_sniffed_as_mooncake() {
    let file = BufReader::new(File::open(path()).unwrap());
    let reader = TraceReader::sniff(file, "traces/default.jsonl", None, 0).unwrap();
    assert_eq!(reader.format(), TraceFormat::Mooncake);
    assert_eq!(reader.filter(Result::is_ok).count(), 2_000);
}
