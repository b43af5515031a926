//! Client deadlines: at its deadline a client gives up on a request that
//! has not finished. Queued at the EPP, the request is evicted there; in an
//! engine, the engine aborts it and frees its blocks; under P/D, what the
//! prefill side holds is let go as NixlConnector lets it go. The record
//! says `aborted`, `client-timeout`, and ends at the deadline.

use pdsim_cluster::{
    Cluster, CoreSample, MemorySink, Outcome, RecordSink, RequestRecord, RunStats, build, run,
};
use pdsim_core::{SimDuration, SimTime};
use pdsim_spec::files::MemoryFiles;
use pdsim_spec::validate::{Request, validate};
use pdsim_workload::{MooncakeReader, RequestSpec};

const SCENARIO: &str = include_str!("../../../scenarios/default.yaml");
const DEPLOYMENT: &str = include_str!("../../../deployments/default.yaml");
const TRACE: &str = include_str!("../../../traces/default.jsonl");
const H200: &str = include_str!("../../../scenarios/4x8-h200.yaml");
const P1D3: &str = include_str!("../../../deployments/1p3d-ep8.yaml");
const ALWAYS: &str = include_str!("../../../deployments/pd/epp-always-pd.yaml");

fn cluster_from(scenario: &str, deployment: &str, extra: Option<(&str, &str)>) -> Cluster {
    let mut files = MemoryFiles::new()
        .with("s.yaml", scenario)
        .with("d.yaml", deployment);
    if let Some((path, text)) = extra {
        files = files.with(path, text);
    }
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    assert!(report.valid, "{:#?}", report.problems);
    let inputs = report.loaded[0].1.router.as_ref().map(|block| {
        pdsim_router::check_router_inputs(&files, "d.yaml", Some(block)).expect("router loads")
    });
    match inputs {
        Some(inputs) => pdsim_cluster::build_with_router(
            &report.deployments[0],
            report.scenario.as_ref().unwrap(),
            Some(inputs),
        )
        .unwrap(),
        None => build(&report.deployments[0], report.scenario.as_ref().unwrap()).unwrap(),
    }
}

fn colocated() -> Cluster {
    cluster_from(SCENARIO, DEPLOYMENT, None)
}

fn pd() -> Cluster {
    cluster_from(H200, P1D3, Some(("pd/epp-always-pd.yaml", ALWAYS)))
}

fn mooncake(text: &str) -> Vec<RequestSpec> {
    MooncakeReader::new(std::io::Cursor::new(text.as_bytes()), "t.jsonl")
        .map(|r| r.unwrap())
        .collect()
}

/// Runs with the engines' invariants checked after every step; every
/// request must end exactly once and no engine may keep a block.
fn run_checked(cluster: &Cluster, specs: &[RequestSpec]) -> (RunStats, Vec<RequestRecord>) {
    let mut sink = MemorySink::default();
    let stats = run(
        cluster,
        &mut specs.iter().cloned().map(Ok),
        11,
        true,
        &mut sink,
    )
    .expect("runs");
    assert_eq!(sink.records.len(), specs.len(), "every request ends once");
    let mut ids: Vec<u32> = sink.records.iter().map(|r| r.id.0).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), specs.len(), "no request recorded twice");
    assert_eq!(stats.blocks_held_at_end, 0, "every block was freed");
    let mut records = sink.records;
    records.sort_by_key(|r| r.id);
    (stats, records)
}

fn with_deadline(mut spec: RequestSpec, deadline: SimTime) -> RequestSpec {
    spec.deadline = Some(deadline);
    spec
}

#[test]
fn a_deadline_mid_decode_aborts_the_request_and_its_engine_stops_working_on_it() {
    let cluster = colocated();
    let long = mooncake(
        "{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 3000, \"hash_ids\": [1, 2]}\n",
    );
    let (free_stats, free) = run_checked(&cluster, &long);
    let r = &free[0];
    assert_eq!(r.outcome, Outcome::Completed);
    let first = r.first_token.unwrap();
    let mid = SimTime(first.as_ns() + (r.finished.as_ns() - first.as_ns()) / 2);
    let (stats, timed) = run_checked(&cluster, &[with_deadline(long[0].clone(), mid)]);
    let t = &timed[0];
    assert_eq!(t.outcome, Outcome::Aborted, "{t:?}");
    assert_eq!(t.reason, "client-timeout");
    assert_eq!(t.finished, mid, "the record ends when the client gave up");
    assert_eq!(t.first_token, Some(first), "the same path until then");
    assert!(
        t.output_tokens > 1 && t.output_tokens < r.output_tokens,
        "{} of {}",
        t.output_tokens,
        r.output_tokens
    );
    assert_eq!(t.last_token.map(|l| l <= mid), Some(true));
    assert_eq!((stats.aborted, stats.completed), (1, 0));
    // The engine stopped decoding it: about half the steps, not all.
    let steps = |s: &RunStats| s.cores.iter().map(|c| c.steps).sum::<u64>();
    assert!(
        steps(&stats) < steps(&free_stats) * 6 / 10,
        "{} steps with the deadline, {} without",
        steps(&stats),
        steps(&free_stats)
    );
    assert!(stats.end < free_stats.end);
}

#[test]
fn a_deadline_that_never_comes_changes_nothing() {
    let cluster = colocated();
    let specs: Vec<RequestSpec> =
        MooncakeReader::new(std::io::Cursor::new(TRACE.as_bytes()), "default.jsonl")
            .take(200)
            .map(|r| r.unwrap())
            .collect();
    let (stats, records) = run_checked(&cluster, &specs);
    // Deadlines far beyond every request's end: the same records, the same
    // end of the run (stale deadline events do not move the clock).
    let late: Vec<RequestSpec> = specs
        .iter()
        .map(|s| with_deadline(s.clone(), s.arrival + SimDuration::from_ms(3_600_000)))
        .collect();
    let (late_stats, late_records) = run_checked(&cluster, &late);
    assert_eq!(records, late_records);
    assert_eq!(stats.end, late_stats.end);
    assert_eq!(stats.completed, late_stats.completed);
}

#[test]
fn a_deadline_in_an_engine_queue_drops_the_request_before_it_is_scheduled() {
    // A thousand long requests at once on eight engines: many wait in an
    // engine's queue (KV full); their clients give up after 2 s.
    let text: String = (0..1000)
        .map(|i| {
            format!(
                "{{\"timestamp\": 0, \"input_length\": 4000, \"output_length\": 400, \"hash_ids\": [{}]}}\n",
                10_000 + i
            )
        })
        .collect();
    let specs: Vec<RequestSpec> = mooncake(&text)
        .into_iter()
        .map(|s| {
            let at = s.arrival + SimDuration::from_ms(2_000);
            with_deadline(s, at)
        })
        .collect();
    let (stats, records) = run_checked(&colocated(), &specs);
    let queued: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.outcome == Outcome::Aborted && r.scheduled.is_none())
        .collect();
    assert!(!queued.is_empty(), "some timed out before being scheduled");
    for r in &queued {
        assert_eq!(r.reason, "client-timeout");
        assert_eq!(r.finished, SimTime::ZERO + SimDuration::from_ms(2_000));
        assert!(r.enqueued.is_some(), "it had reached an engine: {r:?}");
        assert!(r.first_token.is_none());
    }
    for r in &records {
        match r.outcome {
            Outcome::Completed => assert!(r.finished <= SimTime(2_000_000_000), "{r:?}"),
            Outcome::Aborted => assert_eq!(r.reason, "client-timeout"),
            Outcome::Rejected => panic!("{r:?}"),
        }
    }
    assert_eq!(stats.aborted + stats.completed, 1000);
}

const FLOW_EPP: &str = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: queue-scorer
- type: concurrency-detector
  parameters: {maxConcurrency: 4}
flowControl:
  maxRequests: \"500\"
  defaultRequestTTL: 30s
  saturationDetector: {pluginRef: concurrency-detector}
";

#[test]
fn a_deadline_in_the_flow_control_queue_evicts_the_request_there() {
    let deployment = format!("{DEPLOYMENT}router:\n  endpoint_picker_config: epp.yaml\n");
    let cluster = cluster_from(SCENARIO, &deployment, Some(("epp.yaml", FLOW_EPP)));
    let text: String = (0..200)
        .map(|i| {
            format!(
                "{{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 100, \"hash_ids\": [{}, {}]}}\n",
                1000 + 2 * i,
                1001 + 2 * i
            )
        })
        .collect();
    let deadline = SimTime(500_000_000);
    let specs: Vec<RequestSpec> = mooncake(&text)
        .into_iter()
        .map(|s| with_deadline(s, deadline))
        .collect();
    let (stats, records) = run_checked(&cluster, &specs);
    // Eight endpoints × 4: 32 dispatch at once; the rest wait at the EPP
    // until their clients give up, long before the 30 s TTL.
    let evicted: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.reason == "client-timeout" && r.enqueued.is_none())
        .collect();
    assert!(evicted.len() >= 100, "{}", evicted.len());
    for r in &evicted {
        assert_eq!(r.outcome, Outcome::Aborted);
        assert_eq!(r.finished, deadline);
    }
    assert!(records.iter().all(|r| r.reason != "flow-control-ttl"));
    assert_eq!(stats.rejected, 0);
    assert_eq!(stats.aborted + stats.completed, 200);
}

#[test]
fn deadlines_at_every_stage_of_a_disaggregated_request_free_everything() {
    let cluster = pd();
    let specs: Vec<RequestSpec> =
        MooncakeReader::new(std::io::Cursor::new(TRACE.as_bytes()), "default.jsonl")
            .take(60)
            .map(|r| r.unwrap())
            .collect();
    let (_, free) = run_checked(&cluster, &specs);
    // Each request's deadline at a point of its own undisturbed life:
    // during prefill, between prefill and transfer, mid-transfer, at the
    // first token, mid-decode.
    let timed: Vec<RequestSpec> = specs
        .iter()
        .zip(&free)
        .enumerate()
        .map(|(i, (s, r))| {
            let at = |t: Option<SimTime>| t.unwrap_or(r.finished);
            let mid = |a: SimTime, b: SimTime| SimTime(a.as_ns() + (b.as_ns() - a.as_ns()) / 2);
            let deadline = match i % 6 {
                0 => mid(r.arrival, at(r.prefill_done)),
                1 => mid(at(r.prefill_done), at(r.transfer_start)),
                2 => mid(at(r.transfer_start), at(r.transfer_end)),
                3 => at(r.first_token),
                4 => mid(at(r.first_token), r.finished),
                _ => r.finished + SimDuration(1),
            };
            with_deadline(s.clone(), deadline)
        })
        .collect();
    let (stats, records) = run_checked(&cluster, &timed);
    let mut aborted = 0;
    for (r, s) in records.iter().zip(&timed) {
        let deadline = s.deadline.unwrap();
        match r.outcome {
            Outcome::Aborted => {
                assert_eq!(r.reason, "client-timeout", "{r:?}");
                assert_eq!(r.finished, deadline);
                aborted += 1;
            }
            Outcome::Completed => assert!(r.finished <= deadline, "{r:?}"),
            Outcome::Rejected => panic!("{r:?}"),
        }
    }
    assert!(aborted >= 30, "{aborted} of 60 gave up");
    assert_eq!(stats.aborted, aborted);
    // Deterministic.
    let (_, again) = run_checked(&cluster, &timed);
    assert_eq!(records, again);
}

#[test]
fn a_deadline_before_the_arrival_ends_the_request_on_arrival() {
    let specs = mooncake(
        "{\"timestamp\": 5, \"input_length\": 100, \"output_length\": 10, \"hash_ids\": [1]}\n",
    );
    let spec = with_deadline(specs[0].clone(), specs[0].arrival);
    let (stats, records) = run_checked(&colocated(), &[spec]);
    assert_eq!(records[0].outcome, Outcome::Aborted);
    assert_eq!(records[0].reason, "client-timeout");
    assert_eq!(records[0].enqueued, None);
    assert_eq!(stats.aborted, 1);
}

/// Records and counts the per-core samples.
#[derive(Default)]
struct Counting {
    records: Vec<RequestRecord>,
    samples: u64,
}

impl RecordSink for Counting {
    fn record(&mut self, record: &RequestRecord) {
        self.records.push(record.clone());
    }
    fn emission(&mut self, _gap_ns: u64, _tokens: u32) {}
    fn core_sample(&mut self, _sample: &CoreSample) {
        self.samples += 1;
    }
}

#[test]
fn a_request_stuck_until_its_client_gives_up_costs_no_observations_meanwhile() {
    // A ceiling of 0 holds the EPP's queue for ever and no TTL evicts it:
    // only the clients, a day later, end these requests. The observation
    // loops stop through the wait instead of sampling every second of it.
    let epp = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: queue-scorer
- type: static-usage-limit-policy
  parameters: {threshold: 0}
flowControl:
  defaultRequestTTL: 0s
";
    let deployment = format!("{DEPLOYMENT}router:\n  endpoint_picker_config: epp.yaml\n");
    let cluster = cluster_from(SCENARIO, &deployment, Some(("epp.yaml", epp)));
    let day = SimDuration::from_ms(86_400_000);
    let specs: Vec<RequestSpec> = mooncake(
        "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 10, \"hash_ids\": [1]}\n\
         {\"timestamp\": 1000, \"input_length\": 100, \"output_length\": 10, \"hash_ids\": [2]}\n",
    )
    .into_iter()
    .map(|s| {
        let at = s.arrival + day;
        with_deadline(s, at)
    })
    .collect();
    let mut sink = Counting::default();
    let stats = run(
        &cluster,
        &mut specs.clone().into_iter().map(Ok),
        1,
        true,
        &mut sink,
    )
    .unwrap();
    assert_eq!(stats.aborted, 2);
    for (r, s) in sink.records.iter().zip(&specs) {
        assert_eq!((r.outcome, r.reason), (Outcome::Aborted, "client-timeout"));
        assert_eq!(r.finished, s.deadline.unwrap());
    }
    let cores = cluster
        .pools
        .iter()
        .map(|p| p.pods as u64 * p.ranks as u64)
        .sum::<u64>();
    assert!(
        sink.samples <= 10 * cores,
        "{} samples over a day-long stall",
        sink.samples
    );
}

/// Records the times the cluster was sampled at.
#[derive(Default)]
struct SampleTimes {
    records: Vec<RequestRecord>,
    times: Vec<SimTime>,
}

impl RecordSink for SampleTimes {
    fn record(&mut self, record: &RequestRecord) {
        self.records.push(record.clone());
    }
    fn emission(&mut self, _gap_ns: u64, _tokens: u32) {}
    fn core_sample(&mut self, sample: &CoreSample) {
        if self.times.last() != Some(&sample.time) {
            self.times.push(sample.time);
        }
    }
}

/// A client that gives up mid-transfer leaves its KV transfer running: the
/// network carries it to the end (NIXL reads are not cancelled), so the
/// cluster is not idle until it ends, and the observation loops go on
/// sampling through it; only after it do they pause until the next
/// arrival, a minute later.
#[test]
fn a_transfer_its_client_left_keeps_the_cluster_observed_until_it_ends() {
    let cluster = pd();
    let row = |ms: u64| {
        format!(
            "{{\"timestamp\": {ms}, \"input_length\": 60000, \"output_length\": 8, \"hash_ids\": []}}\n"
        )
    };
    let run_one = |specs: &[RequestSpec]| {
        let mut sink = SampleTimes::default();
        run(
            &cluster,
            &mut specs.iter().cloned().map(Ok),
            11,
            true,
            &mut sink,
        )
        .expect("runs");
        sink
    };
    // Place the request so that a whole second falls inside its transfer.
    let probe = run_one(&mooncake(&row(0)));
    let r = &probe.records[0];
    let (start, end) = (r.transfer_start.unwrap(), r.transfer_end.unwrap());
    let second = SimDuration::from_secs_f64(1.0).as_ns();
    let span = end.as_ns() - start.as_ns();
    assert!(span < second / 2, "a short transfer");
    // Arriving `shift` later starts the transfer half of it before the
    // next whole second (the run is alone on the cluster, so it shifts
    // whole); a second request comes a minute later.
    let tick = (start.as_ns() + span).div_ceil(second) * second;
    let shift = SimDuration(tick - span / 2 - start.as_ns());
    let mut specs = mooncake(&format!("{}{}", row(0), row(60_000)));
    for spec in &mut specs {
        spec.arrival += shift;
    }
    let placed = run_one(&specs);
    let r = &placed.records[0];
    let (start, end) = (r.transfer_start.unwrap(), r.transfer_end.unwrap());
    let tick = SimTime(start.as_ns().div_ceil(second) * second);
    assert!(start < tick && tick < end, "{start:?} {tick:?} {end:?}");
    // The client gives up after the transfer started, before that tick.
    let deadline = SimTime(start.as_ns() + (tick.as_ns() - start.as_ns()) / 2);
    let specs = [with_deadline(specs[0].clone(), deadline), specs[1].clone()];
    let left = run_one(&specs);
    assert_eq!(left.records[0].outcome, Outcome::Aborted);
    // Sampled at the tick in the transfer and at the first after its end.
    let after = SimTime(tick.as_ns() + second);
    assert!(after > end);
    assert!(left.times.contains(&tick), "{:?}", left.times);
    assert!(left.times.contains(&after), "{:?}", left.times);
    // Then paused until the next arrival.
    let next = specs[1].arrival;
    assert!(
        !left
            .times
            .iter()
            .any(|t| *t > SimTime(after.as_ns() + second) && *t < next),
        "{:?}",
        left.times
    );
}

/// Flow control in front of the queue scorer, with room for every request
/// and a TTL far beyond the tests' waits.
const FLOW_QUEUE_EPP: &str = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: queue-scorer
flowControl:
  maxRequests: \"500\"
  defaultRequestTTL: 30s
";

/// The EPP's scrape loops pause over an idle gap longer than their interval
/// and resume when the next request arrives, so its views are fresh again:
/// under flow control, whose utilization detector counts a view older than
/// `metricsStalenessThreshold` (200 ms) as saturated, a request arriving
/// 700 ms into the gap is dispatched at once instead of waiting for views
/// that would never come.
#[test]
fn scrapes_resume_after_an_idle_gap_so_the_views_are_fresh_again() {
    let deployment = format!("{DEPLOYMENT}router:\n  endpoint_picker_config: epp.yaml\n");
    let cluster = cluster_from(SCENARIO, &deployment, Some(("epp.yaml", FLOW_QUEUE_EPP)));
    let specs = mooncake(concat!(
        "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 4, \"hash_ids\": [1]}\n",
        "{\"timestamp\": 800, \"input_length\": 100, \"output_length\": 4, \"hash_ids\": [2]}\n",
    ));
    let (stats, records) = run_checked(&cluster, &specs);
    assert!(
        records[0].finished.as_ns() < 200_000_000,
        "the first is done long before the second: {:?}",
        records[0].finished
    );
    assert_eq!(stats.completed, 2, "{records:?}");
    let waited = records[1].enqueued.unwrap().as_ns() - records[1].arrival.as_ns();
    assert!(waited < 20_000_000, "held {waited} ns at the EPP");
}

/// With scrapes slower than `metricsStalenessThreshold` (every 1 s against
/// 200 ms), a request arriving after an idle gap finds every view stale and
/// waits in the flow controller. The next scrape reads the same idle
/// engine, but the view is fresh again, and that alone must wake the
/// controller: the request is dispatched at that scrape, within one
/// interval, not held until its TTL. The scrape phase is drawn from the
/// seed, so ten requests come after idle gaps of 5 s at offsets 100 ms
/// apart within the 1 s cycle, so that some land where the views are
/// stale (the last assertion checks that one did).
#[test]
fn a_scrape_that_refreshes_a_stale_view_wakes_the_flow_controller_even_unchanged() {
    let deployment = format!(
        "{DEPLOYMENT}router:\n  endpoint_picker_config: epp.yaml\n  epp_flags: [--refresh-metrics-interval=1s]\n"
    );
    let cluster = cluster_from(SCENARIO, &deployment, Some(("epp.yaml", FLOW_QUEUE_EPP)));
    let rows: String = (0..10u64)
        .map(|i| (i, i * 5_100))
        .map(|(i, t)| {
            format!(
                "{{\"timestamp\": {t}, \"input_length\": 100, \"output_length\": 4, \"hash_ids\": [{i}]}}\n"
            )
        })
        .collect();
    let (stats, records) = run_checked(&cluster, &mooncake(&rows));
    assert_eq!(stats.completed, 10, "{records:?}");
    let held: Vec<u64> = records
        .iter()
        .map(|r| r.enqueued.unwrap().as_ns() - r.arrival.as_ns())
        .collect();
    assert!(
        held.iter().all(|&ns| ns <= 1_000_000_000),
        "held at the EPP (ns): {held:?}"
    );
    // The case is the one described: some request did wait for a scrape.
    // (The frontend alone takes about 4 ms.)
    assert!(held.iter().any(|&ns| ns > 20_000_000), "{held:?}");
}
