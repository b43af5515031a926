//! The flow controller's soft-reflective usage-limit policy end to end:
//! with band 0 the highest provisioned band its ceiling is 1.0, but with a
//! band above it (configured, or an InferenceObjective's) band 0, where
//! every request of pdsim's is, alternates open on one dispatch cycle in
//! round(s/(1 − s)) once the saturation s passes 1 − s, so requests wait
//! longer in the EPP's queue.

mod common;

use common::build;
use pdsim_cluster::{MemorySink, Observation, Outcome, RequestRecord, run, run_observing};
use pdsim_core::SimTime;
use pdsim_workload::{MooncakeReader, RequestSpec};

const SCENARIO: &str = include_str!("../../../scenarios/default.yaml");
const DEPLOYMENT: &str = include_str!("../../../deployments/default.yaml");
const TRACE: &str = include_str!("../../../traces/default.jsonl");

/// Flow control with the concurrency detector (saturation: requests in
/// flight over 2 per endpoint) and the soft-reflective policy over the
/// bands `BANDS`.
const EPP: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates:\n- flowControl\nplugins:\n- type: queue-scorer\n- type: concurrency-detector\n  parameters: {maxConcurrency: 2, concurrencyMode: requests}\n- type: soft-reflective-ceiling-policy\nflowControl:\n  defaultRequestTTL: \"600s\"\n  usageLimitPolicyPluginRef: soft-reflective-ceiling-policy\n  saturationDetector:\n    pluginRef: concurrency-detector\n  priorityBands: BANDS\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: queue-scorer\n";

/// 300 requests of the bundled trace at four times its rate, so the eight
/// engines hold more than the 16 in flight the detector calls full.
fn replay(bands: &str) -> Vec<RequestRecord> {
    replay_with(bands, true)
}

/// [`replay`], with the EPP's dispatch ticker run at every instant when
/// `!fast` instead of only when something can change.
fn replay_with(bands: &str, fast: bool) -> Vec<RequestRecord> {
    let deployment = format!(
        "{DEPLOYMENT}router:\n  endpoint_picker_config: epp.yaml\n  epp_flags: [\"--allow-experimental-plugins\"]\n"
    );
    let epp = EPP.replace("BANDS", bands);
    let cluster = build(SCENARIO, &deployment, &[("epp.yaml", &epp)]).expect("builds");
    let specs: Vec<RequestSpec> =
        MooncakeReader::new(std::io::Cursor::new(TRACE.as_bytes()), "default.jsonl")
            .take(300)
            .map(|r| {
                let mut spec = r.unwrap();
                spec.arrival = SimTime(spec.arrival.as_ns() / 4);
                spec
            })
            .collect();
    let mut sink = MemorySink::default();
    let mut source = specs.into_iter().map(Ok);
    if fast {
        run(&cluster, &mut source, 5, true, &mut sink).expect("runs");
    } else {
        run_observing(
            &cluster,
            &mut source,
            5,
            true,
            &mut sink,
            Observation::EveryTick,
        )
        .expect("runs");
    }
    sink.records
}

/// The mean time from arrival to the engine, in ms: mostly the wait in
/// the EPP's queue.
fn mean_wait_ms(records: &[RequestRecord]) -> f64 {
    let total: u64 = records
        .iter()
        .map(|r| r.enqueued.unwrap().since(r.arrival).as_ns())
        .sum();
    total as f64 / records.len() as f64 / 1e6
}

#[test]
fn a_band_above_band_zero_makes_it_alternate_and_requests_wait_longer() {
    let highest = replay("[]");
    let below = replay("[{priority: 100}]");
    for records in [&highest, &below] {
        assert_eq!(records.len(), 300);
        assert!(records.iter().all(|r| r.outcome == Outcome::Completed));
    }
    let (top, gated) = (mean_wait_ms(&highest), mean_wait_ms(&below));
    assert!(gated > top + 1.0, "{gated} ms against {top} ms");
    // Deterministic: the same run twice is the same run.
    assert_eq!(below, replay("[{priority: 100}]"));
}

#[test]
fn the_ticks_counted_in_closed_form_are_the_ticks_the_ticker_runs() {
    // The fast path runs a dispatch cycle only when something can change
    // and counts the alternation's other ticks in closed form; the EPP's
    // ticker runs one every millisecond. Same records, request for request.
    for bands in ["[]", "[{priority: 100}]"] {
        assert_eq!(
            replay_with(bands, true),
            replay_with(bands, false),
            "{bands}"
        );
    }
}
