//! A request's path to its first token: the API server between its arrival
//! and its engine core — the Python frontend's tokenizer batcher (vLLM's
//! `AsyncMicrobatchTokenizer`, `vllm/utils/async_utils.py`), which holds a
//! batch open for `batch_wait_timeout_s` after its first prompt or until it
//! holds `max_batch_size` prompts, then tokenizes the batch in one call —
//! and the engine core's async-scheduling loop, which first schedules it
//! after the step it finds running and runs it in the step after the next.
//! Before the tokenizer the API server takes the request in
//! (`host_api_request`); after the step, its event loop processes the
//! step's outputs in the step's order (`host_output_token` each), so a new
//! request's first token waits for the running requests' tokens, and a
//! finished stream's last response (`host_completion`) follows its last
//! token.

use pdsim_cluster::{MemorySink, Outcome, RecordSink, RequestRecord, StepSample, build, run};
use pdsim_core::SimDuration;
use pdsim_spec::files::MemoryFiles;
use pdsim_spec::validate::{Request, validate};
use pdsim_workload::{MooncakeReader, RequestSpec, TraceError};

// One engine (the inference-sim real runs' Llama-2-7B), so every prompt
// goes through one API server's batcher.
const SCENARIO: &str = include_str!("../../../scenarios/real-runs/llama-2-7b-tp1-h100.yaml");
const DEPLOYMENT: &str = include_str!("../../../deployments/real-runs/llama-2-7b-tp1.yaml");

fn cluster() -> pdsim_cluster::Cluster {
    let files = MemoryFiles::new()
        .with("s.yaml", SCENARIO)
        .with("d.yaml", DEPLOYMENT);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    assert!(report.valid, "{:#?}", report.problems);
    build(&report.deployments[0], report.scenario.as_ref().unwrap()).expect("builds")
}

/// Requests of 1000 distinct prompt tokens at the given times (ms).
fn requests(at_ms: &[u64]) -> String {
    at_ms
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "{{\"timestamp\": {t}, \"input_length\": 1000, \"output_length\": 4, \"hash_ids\": [{}, {}]}}\n",
                2 * i,
                2 * i + 1
            )
        })
        .collect()
}

fn records(cluster: &pdsim_cluster::Cluster, trace: &str) -> Vec<RequestRecord> {
    let mut source: Box<dyn Iterator<Item = Result<RequestSpec, TraceError>>> = Box::new(
        MooncakeReader::new(std::io::Cursor::new(trace.as_bytes()), "t.jsonl"),
    );
    let mut sink = MemorySink::default();
    run(cluster, &mut source, 0, true, &mut sink).expect("runs");
    let mut records = sink.records;
    records.sort_by_key(|r| r.arrival);
    for r in &records {
        assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
    }
    records
}

fn enqueue_delay(r: &RequestRecord) -> SimDuration {
    r.enqueued.expect("admitted").since(r.arrival)
}

#[test]
fn a_lone_request_waits_for_its_batch_then_for_its_own_tokens() {
    let cluster = cluster();
    let cost = &cluster.pools[0].cost;
    let batching = cost
        .tokenizer_batching()
        .expect("the default frontend is vLLM's Python API server");
    assert_eq!(batching.wait, SimDuration::from_ns(2_000_000));
    assert_eq!(batching.max_prompts, 32);
    let intake = cost.api_server().request;
    assert_eq!(intake, SimDuration::from_ns(3_900_000));
    let records = records(&cluster, &requests(&[0, 500]));
    for r in &records {
        assert_eq!(
            enqueue_delay(r),
            intake + batching.wait + cost.admission_delay(r.prompt_tokens),
            "{r:?}"
        );
    }
}

#[test]
fn a_request_joins_the_open_batch_and_leaves_with_it() {
    let cluster = cluster();
    let cost = &cluster.pools[0].cost;
    let wait = cost.tokenizer_batching().unwrap().wait;
    // Two prompts 1 ms apart on the same engine share the first one's
    // batch: both reach the engine when the batch of both is tokenized.
    let records = records(&cluster, &requests(&[0, 1]));
    let done = records[0].arrival
        + cost.api_server().request
        + wait
        + cost.admission_delay(records[0].prompt_tokens * 2);
    for r in &records {
        assert_eq!(r.enqueued, Some(done), "{r:?}");
    }
}

#[test]
fn a_full_batch_closes_at_once_and_the_next_waits_for_the_batcher() {
    let cluster = cluster();
    assert_eq!((cluster.pools.len(), cluster.pools[0].pods), (1, 1));
    let cost = &cluster.pools[0].cost;
    let batching = cost.tokenizer_batching().unwrap();
    let intake = cost.api_server().request;
    let n = batching.max_prompts + 8;
    let records = records(&cluster, &requests(&vec![0; n]));
    let tokens = records[0].prompt_tokens;
    let full = cost.admission_delay(tokens * batching.max_prompts as u32);
    let rest = cost.admission_delay(tokens * 8);
    let mut at = std::collections::BTreeMap::new();
    for r in &records {
        *at.entry(enqueue_delay(r)).or_insert(0usize) += 1;
    }
    // The first 32 are tokenized without waiting; the other 8 open the next
    // batch when the batcher is free again and wait its full window.
    let expected: std::collections::BTreeMap<_, _> = [
        (intake + full, batching.max_prompts),
        (intake + full + batching.wait + rest, 8),
    ]
    .into_iter()
    .collect();
    assert_eq!(at, expected);
}

/// Keeps the records and every step's GPU interval.
#[derive(Default)]
struct StepSink {
    records: Vec<RequestRecord>,
    steps: Vec<(pdsim_core::SimTime, pdsim_core::SimTime, u32)>,
}

impl RecordSink for StepSink {
    fn record(&mut self, record: &RequestRecord) {
        self.records.push(record.clone());
    }
    fn emission(&mut self, _gap_ns: u64, _tokens: u32) {}
    fn step(&mut self, step: &StepSample) {
        self.steps
            .push((step.start, step.start + step.duration, step.prefill_tokens));
    }
}

#[test]
fn a_request_at_a_busy_engine_first_runs_in_the_step_after_the_next() {
    // vLLM 0.15.1 with async scheduling: `EngineCore.step_with_batch_queue`
    // keeps two steps queued; the loop blocks on the older one, applies its
    // output, then takes new requests (`_process_input_queue`) and
    // schedules a step that runs on the GPU behind the one still running.
    let cluster = cluster();
    assert!(cluster.pools[0].engine.async_scheduling);
    // A decodes alone; B arrives 40 ms into it.
    let trace = "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 100, \"hash_ids\": [0, 1]}\n\
                 {\"timestamp\": 40, \"input_length\": 1000, \"output_length\": 4, \"hash_ids\": [2, 3]}\n";
    let mut source: Box<dyn Iterator<Item = Result<RequestSpec, TraceError>>> = Box::new(
        MooncakeReader::new(std::io::Cursor::new(trace.as_bytes()), "t.jsonl"),
    );
    let mut sink = StepSink::default();
    run(&cluster, &mut source, 0, true, &mut sink).expect("runs");
    let b = sink
        .records
        .iter()
        .find(|r| r.output_tokens == 4)
        .expect("B ends");
    let enqueued = b.enqueued.unwrap();
    // The GPU runs the steps back to back while A decodes.
    for pair in sink.steps.windows(2) {
        assert!(pair[1].0 >= pair[0].1, "steps overlap: {pair:?}");
    }
    // The loop was waiting on step k when B reached the engine core.
    let k = sink
        .steps
        .iter()
        .position(|&(start, end, _)| start <= enqueued && enqueued < end)
        .expect("the engine was busy when B arrived");
    assert_eq!(
        b.scheduled,
        Some(sink.steps[k].1),
        "scheduled when step k's output is applied"
    );
    // Step k+1 was already queued behind k; B's prefill is step k+2.
    let (start, end, prefill) = sink.steps[k + 2];
    assert!(prefill > 0, "step k+2 runs B's prompt");
    assert_eq!(sink.steps[k + 1].2, 0, "step k+1 is A's decode only");
    assert_eq!(start, sink.steps[k + 1].1);
    // B's first token is step k+2's output, which the API server's loop
    // (idle since A's token of step k+1) processes in the step's order: A's
    // token, then B's.
    let api = cluster.pools[0].cost.api_server();
    assert!(api.output_token > SimDuration::ZERO);
    assert_eq!(
        b.first_token,
        Some(end + api.output_token + api.output_token),
        "B's first token is step k+2's output, after A's"
    );
    // B's last response follows its last token on the same loop.
    assert_eq!(b.finished, b.last_token.unwrap() + api.completion);
}

/// The real-runs engine with the API server's intake not charged, so that a
/// request's path to its engine core has one hop at equal times (the
/// tokenizer batch's admissions) and their order is not undone by another.
fn cluster_without_intake() -> pdsim_cluster::Cluster {
    let set = "kind: CoefficientSet\nname: no-intake\ncoefficients:\n  - host_api_request:\n      value: 0\n      units: us_per_request\n      method: not_charged\n      fitted: false\n      rationale: the test removes the intake latency\n      scope: {}\n";
    let scenario = SCENARIO.replace(
        "  - cost-model-host-overheads\n",
        "  - cost-model-host-overheads\n  - no-intake\n",
    );
    let files = MemoryFiles::new()
        .with("s.yaml", &scenario)
        .with("d.yaml", DEPLOYMENT)
        .with("cat/coefficients/no-intake.yaml", set);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec!["cat".into()],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    assert!(report.valid, "{:#?}", report.problems);
    build(&report.deployments[0], report.scenario.as_ref().unwrap()).expect("builds")
}

#[test]
fn requests_arriving_together_are_served_in_trace_order() {
    // Two prompts at the same instant go through one tokenizer batch and
    // reach the engine core in one instant. Events at equal times are
    // handled in the order they were queued, so the first row is admitted
    // first: the idle engine core starts its step with it (as vLLM's busy
    // loop does with the request it wakes on), and the second waits for
    // the next step.
    let cluster = cluster_without_intake();
    assert_eq!(
        cluster.pools[0].cost.api_server().request,
        SimDuration::ZERO
    );
    let records = records(&cluster, &requests(&[0, 0]));
    let (a, b) = (&records[0], &records[1]);
    assert_eq!((a.source_line, b.source_line), (1, 2));
    assert_eq!(a.enqueued, b.enqueued, "one tokenizer batch");
    assert!(a.id < b.id);
    assert!(a.scheduled.unwrap() < b.scheduled.unwrap(), "{a:?}\n{b:?}");
    assert!(
        a.first_token.unwrap() < b.first_token.unwrap(),
        "{a:?}\n{b:?}"
    );
}

/// A core's KV usage is weighted by step time: one 1000-token request
/// holds 63 blocks (⌈1004 / 16⌉, its prompt and four tokens) in every step,
/// so its time-weighted mean usage equals its peak.
#[test]
fn kv_usage_is_weighted_by_the_time_each_step_takes() {
    let cluster = cluster();
    let mut source: Box<dyn Iterator<Item = Result<RequestSpec, TraceError>>> = Box::new(
        MooncakeReader::new(std::io::Cursor::new(requests(&[0]).into_bytes()), "t.jsonl"),
    );
    let mut sink = MemorySink::default();
    let stats = run(&cluster, &mut source, 0, true, &mut sink).expect("runs");
    let core = &stats.cores[0];
    assert!(core.busy_ns > 0 && core.kv_usage_peak > 0.0, "{core:?}");
    let mean = core.kv_usage_ns / core.busy_ns as f64;
    assert!(
        (mean - core.kv_usage_peak).abs() <= 1e-9 * core.kv_usage_peak,
        "mean {mean}, peak {}",
        core.kv_usage_peak
    );
}
