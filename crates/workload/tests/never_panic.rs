//! Readers meet arbitrary files: whatever the bytes, they yield requests or
//! located errors and end, and never panic.

use pdsim_spec::scenario::TraceHeader;
use pdsim_workload::{
    AzureReader, BurstGptReader, MooncakeReader, RequestSource, TraceFormat, TraceV2Reader,
};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use std::collections::BTreeMap;

const TRACEV2_HEAD: &str = "request_id,client_id,tenant_id,slo_class,vllm_priority,session_id,round_index,prefix_group,prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,audio_tokens,video_tokens,reason_ratio,model,deadline_us,slo_target_us,server_input_tokens,arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,status,error_message,finish_reason\n";

fn header() -> TraceHeader {
    TraceHeader {
        trace_version: 3,
        time_unit: "us".into(),
        mode: "real".into(),
        workload_seed: None,
        server: None,
        goodput_slo_targets: BTreeMap::new(),
        session_context_growth: None,
    }
}

/// Consumes a source, checking that every error is located and every
/// request is sane; returns the number of items.
fn drain(source: &mut impl RequestSource, file: &str) -> usize {
    let mut items = 0;
    let mut last = None;
    let mut top_class = 0;
    for item in source.by_ref() {
        items += 1;
        match item {
            Ok(r) => {
                assert!(r.output_tokens >= 1);
                assert!(r.prompt.tokens() >= 1);
                assert!(r.source_line >= 1);
                assert!(last.is_none_or(|t| t <= r.arrival));
                top_class = top_class.max(r.slo_class as usize);
                last = Some(r.arrival);
            }
            Err(e) => {
                assert_eq!(e.file, file);
                assert!(!e.message.is_empty());
            }
        }
    }
    assert_eq!(source.slo_classes()[0], "");
    assert!(top_class < source.slo_classes().len());
    items
}

/// Pieces a Mooncake row is built from, so random rows are often nearly
/// valid and reach the deeper checks.
fn mooncake_line() -> impl Strategy<Value = String> {
    prop_oneof![
        ".*",
        (any::<i64>(), 0u64..3000, any::<i32>(), prop::collection::vec(-2i64..20, 0..8)).prop_map(
            |(ts, input, output, ids)| format!(
                "{{\"timestamp\": {ts}, \"input_length\": {input}, \"output_length\": {output}, \"hash_ids\": {ids:?}}}"
            )
        ),
        (0u64..100, prop::sample::select(vec!["1.5", "null", "\"7\"", "[]", "1e30", "-0"]))
            .prop_map(|(ts, v)| format!("{{\"timestamp\": {ts}, \"input_length\": {v}, \"output_length\": {v}, \"hash_ids\": [{v}]}}")),
    ]
}

/// A CSV row of `width` fields drawn from values that are valid somewhere.
fn csv_line(width: usize) -> impl Strategy<Value = String> {
    let field = prop_oneof![
        Just(String::new()),
        (-5i64..5_000).prop_map(|v| v.to_string()),
        Just("true".to_string()),
        Just("0.5".to_string()),
        Just("2023-11-16 18:15:46.6805900".to_string()),
        Just("\"quoted, field\"".to_string()),
        "[a-z0-9.:-]{0,12}",
    ];
    prop::collection::vec(field, 0..width + 3).prop_map(|fields| fields.join(","))
}

proptest! {
    #[test]
    fn mooncake_never_panics(lines in prop::collection::vec(mooncake_line(), 0..20)) {
        let text = lines.join("\n");
        let mut reader = MooncakeReader::new(text.as_bytes(), "m.jsonl");
        prop_assert!(drain(&mut reader, "m.jsonl") <= lines.len());
    }

    #[test]
    fn mooncake_never_panics_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        let mut reader = MooncakeReader::new(&bytes[..], "m.jsonl");
        drain(&mut reader, "m.jsonl");
        let _ = TraceFormat::detect("m.jsonl", &bytes);
    }

    #[test]
    fn tracev2_never_panics(rows in prop::collection::vec(csv_line(29), 0..12)) {
        let text = format!("{TRACEV2_HEAD}{}", rows.join("\n"));
        let mut reader = TraceV2Reader::new(&header(), text.as_bytes(), "t.csv").unwrap();
        drain(&mut reader, "t.csv");
    }

    /// Conversations of nearly valid turns (rounds sometimes skipped,
    /// repeated or out of order, lengths sometimes zero, an occasional
    /// reset) under `accumulate`: the reader never panics, and every turn it
    /// accepts holds its session's previous prompt and answer, then its own
    /// new tokens.
    #[test]
    fn tracev2_sessions_never_panic_and_accumulate(
        turns in prop::collection::vec(
            (0usize..3, prop_oneof![8 => Just(0i64), 1 => -1i64..3], 0u32..400, 0u32..60, 0u64..2_000_000, prop_oneof![6 => Just(0u32), 1 => 1u32..50]),
            0..14,
        )
    ) {
        let mut text = TRACEV2_HEAD.trim_end().to_string() + ",think_time_us,input_tokens_reset\n";
        let mut rounds = [0i64; 3];
        let mut at = 0u64;
        for (i, (session, skew, input, output, gap, reset)) in turns.iter().enumerate() {
            at += gap;
            let round = rounds[*session] + skew;
            rounds[*session] += 1;
            let reset = if *reset == 0 { String::new() } else { reset.to_string() };
            text.push_str(&format!(
                "{i},c,,,0,s{session},{round},,0,true,{input},{output},{input},0,0,0,0,,0,0,0,{at},{at},0,0,0,ok,,,0,{reset}\n"
            ));
        }
        let mut h = header();
        h.session_context_growth = Some("accumulate".into());
        let mut reader = TraceV2Reader::new(&h, text.as_bytes(), "s.csv").unwrap();
        let mut last: BTreeMap<u64, (u64, u32)> = BTreeMap::new();
        for item in reader.by_ref() {
            let Ok(r) = item else { break };
            let turn = r.session.expect("every row names a session");
            let row = &turns[r.source_line as usize - 2];
            let (new, reset) = (row.2 as u64, row.5 as u64);
            match last.get(&turn.key) {
                Some(&(prompt, answer)) if turn.round > 0 && reset == 0 => {
                    prop_assert_eq!(r.prompt.tokens(), prompt + answer as u64 + new);
                }
                Some(_) if turn.round > 0 => prop_assert_eq!(r.prompt.tokens(), reset),
                _ => prop_assert_eq!(r.prompt.tokens(), new),
            }
            last.insert(turn.key, (r.prompt.tokens(), r.output_tokens));
        }
    }

    #[test]
    fn tracev2_headers_never_panic(head in csv_line(30), bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let mut text = head.into_bytes();
        text.push(b'\n');
        text.extend(bytes);
        if let Ok(mut reader) = TraceV2Reader::new(&header(), &text[..], "t.csv") {
            drain(&mut reader, "t.csv");
        }
    }

    #[test]
    fn azure_never_panics(rows in prop::collection::vec(csv_line(3), 0..12), bytes in prop::collection::vec(any::<u8>(), 0..100)) {
        let mut text = format!("TIMESTAMP,ContextTokens,GeneratedTokens\n{}\n", rows.join("\n")).into_bytes();
        text.extend(bytes);
        let mut reader = AzureReader::new(&text[..], "a.csv").unwrap();
        drain(&mut reader, "a.csv");
    }

    #[test]
    fn burstgpt_never_panics(rows in prop::collection::vec(csv_line(6), 0..12), bytes in prop::collection::vec(any::<u8>(), 0..100)) {
        let mut text = format!(
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n{}\n",
            rows.join("\n")
        )
        .into_bytes();
        text.extend(bytes);
        let mut reader = BurstGptReader::new(&text[..], "b.csv").unwrap();
        drain(&mut reader, "b.csv");
    }
}

/// An inference-perf configuration built from nearly valid pieces, so
/// random values reach the stage, length and timer code.
fn inference_perf_config() -> impl Strategy<Value = String> {
    // Mostly small valid counts, sometimes a value to refuse.
    let number = prop_oneof![
        6 => (1u32..9).prop_map(|v| v.to_string()),
        1 => prop::sample::select(vec![
            "-1", "0", "0.5", "1e9", "-0.0", "nan", ".inf", "null", "\"3\"",
        ])
        .prop_map(str::to_string),
    ];
    (
        prop::sample::select(vec![
            "shared_prefix",
            "shared_prefix",
            "random",
            "synthetic",
            "mock",
            "other",
        ]),
        prop::sample::select(vec!["constant", "poisson", "sweep"]),
        prop::collection::vec((number.clone(), number.clone()), 0..4),
        prop::collection::vec(number, 9),
        ".{0,12}",
        // Three times in four, a comment that parses.
        prop::bool::weighted(0.75),
    )
        .prop_map(|(data, load, stages, n, junk, clean)| {
            let junk = if clean { String::new() } else { junk };
            let stages: String = stages
                .iter()
                .map(|(r, d)| format!("  - rate: {r}\n    duration: {d}\n"))
                .collect();
            // Each data type with the blocks it takes, so that valid
            // numbers give an accepted configuration.
            let body = if data == "shared_prefix" {
                format!(
                    "  shared_prefix: {{num_groups: {}, num_prompts_per_group: {}, system_prompt_len: {}, question_len: {}, output_len: {}}}\n",
                    n[0], n[1], n[2], n[3], n[4]
                )
            } else {
                format!(
                    "  input_distribution: {{min: {}, max: {}, mean: {}, std_dev: {}}}\n\
                     \x20 output_distribution: {{min: {}, max: {}}}\n",
                    n[5], n[6], n[7], n[8], n[0], n[1]
                )
            };
            format!(
                "api: {{type: completion, streaming: true}}\nserver: {{base_url: x}}\n\
                 data:\n  type: {data}\n{body}load:\n  type: {load}\n  stages:\n{stages}#{junk}\n"
            )
        })
}

/// The random configurations reach the generator: enough of them are
/// accepted.
#[test]
fn inference_perf_random_configurations_are_often_valid() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut accepted = 0;
    for _ in 0..400 {
        let text = inference_perf_config()
            .new_tree(&mut runner)
            .unwrap()
            .current();
        if pdsim_workload::InferencePerf::new(&text, "c.yaml", 1).is_ok() {
            accepted += 1;
        }
    }
    assert!(accepted >= 10, "only {accepted} of 400 accepted");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever the configuration, the reader yields requests or a located
    /// error, sends int(rate × duration) requests per accepted stage, and
    /// never panics.
    #[test]
    fn inference_perf_never_panics(text in inference_perf_config()) {
        match pdsim_workload::InferencePerf::new(&text, "c.yaml", 1) {
            Ok(mut reader) => {
                let planned: u64 = reader.stages().iter().map(|s| s.requests).sum();
                let items = drain(&mut reader, "c.yaml");
                prop_assert_eq!(items as u64, planned);
            }
            Err(e) => {
                prop_assert_eq!(e.file.as_str(), "c.yaml");
                prop_assert!(!e.message.is_empty());
            }
        }
    }
}
