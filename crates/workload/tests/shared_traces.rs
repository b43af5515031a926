//! Whole public traces from the project's shared data, read end to end.
//!
//! They live outside the repository, so these tests run only when the
//! environment variable `PDSIM_SHARED` names the shared directory (the one
//! holding `traces/`); otherwise each says on the terminal that it skipped
//! (`pdsim_testkit::shared`), and under CI it fails. The expected totals were
//! computed independently from the files (`shared/traces/README.md` gives the
//! same counts and means).

use pdsim_core::SimTime;
use pdsim_workload::{AzureReader, MooncakeReader, RequestSource, RequestSpec};
use std::fs::File;
use std::io::BufReader;

fn shared_trace(name: &str) -> Option<BufReader<File>> {
    let dir = pdsim_testkit::shared("shared_traces", &format!("traces/{name}"))?;
    let path = dir.join("traces").join(name);
    Some(BufReader::new(
        File::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    ))
}

fn collect(source: &mut impl RequestSource) -> Vec<RequestSpec> {
    source
        .by_ref()
        .map(|r| r.unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

#[test]
fn the_mooncake_conversation_trace_reads_completely() {
    let Some(file) = shared_trace("mooncake_conversation_trace.jsonl") else {
        return;
    };
    let mut reader = MooncakeReader::new(file, "mooncake_conversation_trace.jsonl");
    let all = collect(&mut reader);
    assert_eq!(all.len(), 12_031);
    let input: u64 = all.iter().map(|r| r.prompt.tokens()).sum();
    let output: u64 = all.iter().map(|r| r.output_tokens as u64).sum();
    let blocks: usize = all.iter().map(|r| r.prompt.segments.len()).sum();
    assert_eq!((input, output, blocks), (144_793_823, 4_122_048, 288_500));
    assert_eq!(all.last().unwrap().arrival, SimTime::from_ms(3_536_999));
    assert_eq!(reader.outputs_raised(), 0);
    // The first rows share their first 512-token block, as the file says.
    assert_eq!(all[0].prompt.segments[0], all[1].prompt.segments[0]);
}

#[test]
fn the_azure_conversation_trace_reads_completely() {
    let Some(file) = shared_trace("azure_llm_2023_conv.csv") else {
        return;
    };
    let mut reader = AzureReader::new(file, "azure_llm_2023_conv.csv").unwrap();
    let all = collect(&mut reader);
    assert_eq!(all.len(), 19_366);
    let input: u64 = all.iter().map(|r| r.prompt.tokens()).sum();
    let output: u64 = all.iter().map(|r| r.output_tokens as u64).sum();
    assert_eq!((input, output), (22_361_870, 4_088_665));
    // 18:15:46.6805900 to 19:14:08.4025270.
    assert_eq!(all.last().unwrap().arrival, SimTime(3_501_721_937_000));
    assert_eq!(all.last().unwrap().source_line, 19_367);
}

#[test]
fn the_other_shared_traces_read_completely() {
    if let Some(file) = shared_trace("azure_llm_2023_code.csv") {
        let mut reader = AzureReader::new(file, "azure_llm_2023_code.csv").unwrap();
        let all = collect(&mut reader);
        let input: u64 = all.iter().map(|r| r.prompt.tokens()).sum();
        assert_eq!((all.len(), input), (8_819, 18_059_974));
    }
    if let Some(file) = shared_trace("mooncake_synthetic_trace.jsonl") {
        let mut reader = MooncakeReader::new(file, "mooncake_synthetic_trace.jsonl");
        let all = collect(&mut reader);
        let input: u64 = all.iter().map(|r| r.prompt.tokens()).sum();
        assert_eq!((all.len(), input), (3_993, 61_194_628));
    }
}
