//! Idle stretches: while nothing is happening the observation loops (the
//! EPP's scrapes, the per-second samples) pause until the next arrival, so
//! time and output grow with the work done, not with simulated idle time.
//! Pausing changes nothing else: every record, emission, step, link window
//! and total is what the loops running through the stretch give, and every
//! sample it skips is the one before it again. Arrivals past the horizon
//! and extreme accepted durations are input errors or end the run; none is
//! an invariant failure.

use pdsim_cluster::{
    CoreSample, LinkWindow, MemorySink, Observation, RecordSink, RequestRecord, RunError, RunStats,
    SAMPLE_NS, StepSample, run, run_observing,
};
use pdsim_core::{ARRIVAL_HORIZON, SimDuration, SimTime};
use pdsim_spec::files::MemoryFiles;
use pdsim_spec::validate::{Request, validate};
use pdsim_workload::{MooncakeReader, RequestSpec, Synthetic, TraceError};

const SCENARIO: &str = include_str!("../../../scenarios/default.yaml");
const DEPLOYMENT: &str = include_str!("../../../deployments/default.yaml");
const H200: &str = include_str!("../../../scenarios/4x8-h200.yaml");
const P1D3: &str = include_str!("../../../deployments/1p3d-ep8.yaml");
const ALWAYS: &str = include_str!("../../../deployments/pd/epp-always-pd.yaml");

/// Everything a run hands its sink.
#[derive(Default)]
struct Recorder {
    memory: MemorySink,
    samples: Vec<CoreSample>,
    windows: Vec<LinkWindow>,
    steps: Vec<StepSample>,
}

impl RecordSink for Recorder {
    fn record(&mut self, record: &RequestRecord) {
        self.memory.record(record);
    }
    fn emission(&mut self, gap_ns: u64, tokens: u32) {
        self.memory.emission(gap_ns, tokens);
    }
    fn link_window(&mut self, window: LinkWindow) {
        self.windows.push(window);
    }
    fn core_sample(&mut self, sample: &CoreSample) {
        self.samples.push(*sample);
    }
    fn step(&mut self, step: &StepSample) {
        self.steps.push(*step);
    }
}

/// A deployment on `scenario`, validated and built with the router inputs
/// it names; `router_path` holds `router_text`.
fn cluster_from(
    scenario: &str,
    deployment: &str,
    router_path: &str,
    router_text: &str,
) -> pdsim_cluster::Cluster {
    let files = MemoryFiles::new()
        .with("s.yaml", scenario)
        .with("d.yaml", deployment)
        .with(router_path, router_text);
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
    pdsim_cluster::build_with_router(
        &report.deployments[0],
        report.scenario.as_ref().unwrap(),
        inputs,
    )
    .unwrap()
}

fn colocated() -> pdsim_cluster::Cluster {
    cluster_from(SCENARIO, DEPLOYMENT, "unused.yaml", "")
}

/// The default deployment routed by an EPP configuration.
fn colocated_with_router(epp: &str) -> pdsim_cluster::Cluster {
    let deployment = format!("{DEPLOYMENT}router:\n  endpoint_picker_config: epp.yaml\n");
    cluster_from(SCENARIO, &deployment, "epp.yaml", epp)
}

/// The bundled 1P3D deployment, its router disaggregating every request.
fn pd() -> pdsim_cluster::Cluster {
    cluster_from(H200, P1D3, "pd/epp-always-pd.yaml", ALWAYS)
}

/// Flow control whose detector reads the scraped queues, so what a scrape
/// saw and when decides dispatches.
const SCRAPED_FLOW: &str = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: queue-scorer
- type: utilization-detector
  parameters: {queueDepthThreshold: 1}
";

/// Flow control with a concurrency ceiling and a TTL.
const CONCURRENCY_FLOW: &str = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: queue-scorer
- type: concurrency-detector
  parameters: {maxConcurrency: 4}
flowControl:
  maxRequests: \"500\"
  defaultRequestTTL: 3s
  saturationDetector: {pluginRef: concurrency-detector}
";

/// Mooncake rows at `times_ms`, each a 4000-token prompt sharing its first
/// block with the others and 40 output tokens.
fn rows(times_ms: &[u64]) -> String {
    times_ms
        .iter()
        .enumerate()
        .map(|(i, t)| {
            format!(
                "{{\"timestamp\": {t}, \"input_length\": 4000, \"output_length\": 40, \"hash_ids\": [7, {}, {}, {}]}}\n",
                100 + 3 * i,
                101 + 3 * i,
                102 + 3 * i
            )
        })
        .collect()
}

/// Bursts with idle gaps between them: short ones (under a second, so no
/// pause), long ones, and arrivals exactly on the sample grid.
fn gappy_times_ms() -> Vec<u64> {
    let mut times = Vec::new();
    for start in [
        0, 9_000, 9_700, 30_000, 45_000, 45_500, 100_000, 160_250, 400_000,
    ] {
        times.extend((0..48).map(|i| start + i * 2));
    }
    times
}

fn source(text: &str) -> MooncakeReader<std::io::Cursor<Vec<u8>>> {
    MooncakeReader::new(std::io::Cursor::new(text.as_bytes().to_vec()), "gaps.jsonl")
}

fn both(
    cluster: &pdsim_cluster::Cluster,
    text: &str,
) -> ((RunStats, Recorder), (RunStats, Recorder)) {
    let mut sparse = Recorder::default();
    let paused = run(cluster, &mut source(text), 5, true, &mut sparse).expect("runs");
    let mut dense = Recorder::default();
    let through = run_observing(
        cluster,
        &mut source(text),
        5,
        true,
        &mut dense,
        Observation::EveryTick,
    )
    .expect("runs");
    ((paused, sparse), (through, dense))
}

/// A sample's identity: its core and time.
fn key(s: &CoreSample) -> (u16, u32, u16, u64) {
    (s.pool, s.pod, s.rank, s.time.as_ns())
}

/// Every dense sample the sparse series lacks is the previous sample of the
/// same core again, nothing waiting or running unless `stuck`; everything
/// else is identical.
fn check_skipped_samples_repeat(
    sparse: &[CoreSample],
    dense: &[CoreSample],
    cores: usize,
    stuck: bool,
) -> usize {
    let kept: std::collections::BTreeSet<_> = sparse.iter().map(key).collect();
    assert!(sparse.len() < dense.len(), "nothing was skipped");
    let mut in_dense = dense.iter();
    for s in sparse {
        assert!(in_dense.any(|d| d == s), "{s:?} is not a dense sample");
    }
    let mut skipped = 0;
    for (i, d) in dense.iter().enumerate() {
        if kept.contains(&key(d)) {
            continue;
        }
        skipped += 1;
        let before = &dense[i - cores];
        assert_eq!(
            (before.pool, before.pod, before.rank),
            (d.pool, d.pod, d.rank)
        );
        assert_eq!(before.time + SimDuration(SAMPLE_NS), d.time);
        assert_eq!(
            CoreSample {
                time: d.time,
                ..*before
            },
            *d,
            "a skipped sample changed"
        );
        if !stuck {
            assert_eq!((d.waiting, d.running), (0, 0), "{d:?}");
        }
    }
    skipped
}

#[test]
fn pausing_over_idle_stretches_changes_nothing_but_the_samples_it_skips() {
    let text = rows(&gappy_times_ms());
    let clusters = [
        ("colocated", colocated()),
        ("pd", pd()),
        ("scraped flow control", colocated_with_router(SCRAPED_FLOW)),
        (
            "concurrency flow control",
            colocated_with_router(CONCURRENCY_FLOW),
        ),
    ];
    let delay = |r: &RequestRecord| r.enqueued.unwrap().as_ns() - r.arrival.as_ns();
    let mut frontend_delay = 0;
    for (name, cluster) in clusters {
        let ((paused, sparse), (through, dense)) = both(&cluster, &text);
        // Under flow control some requests must wait at the EPP after an
        // idle stretch, or the comparison would not exercise the views the
        // paused scrapes left.
        if name == "colocated" {
            frontend_delay = sparse.memory.records.iter().map(delay).max().unwrap();
        } else if name.contains("flow") {
            let held = sparse
                .memory
                .records
                .iter()
                .filter(|r| r.enqueued.is_some() && delay(r) > frontend_delay)
                .count();
            assert!(held > 0, "{name}: nothing waited at the EPP");
        }
        assert_eq!(paused.requests, 432, "{name}");
        assert_eq!(sparse.memory.records, dense.memory.records, "{name}");
        assert_eq!(sparse.memory.emissions, dense.memory.emissions, "{name}");
        assert_eq!(sparse.steps, dense.steps, "{name}");
        assert_eq!(sparse.windows, dense.windows, "{name}");
        assert_eq!(
            format!("{:?}", (&paused.cores, &paused.links, paused.end)),
            format!("{:?}", (&through.cores, &through.links, through.end)),
            "{name}"
        );
        assert_eq!(
            (
                paused.completed,
                paused.rejected,
                paused.aborted,
                paused.kv_hold_expiries
            ),
            (
                through.completed,
                through.rejected,
                through.aborted,
                through.kv_hold_expiries
            ),
            "{name}"
        );
        assert!(
            paused.events < through.events,
            "{name}: the pauses skipped no event"
        );
        let cores = paused.cores.len();
        let skipped = check_skipped_samples_repeat(&sparse.samples, &dense.samples, cores, false);
        // The 400 s run is idle most of the time.
        assert!(
            skipped > 300 * cores,
            "{name}: only {skipped} samples skipped"
        );
        eprintln!(
            "{name}: {} samples and {} events with pauses, {} and {} without",
            sparse.samples.len(),
            paused.events,
            dense.samples.len(),
            through.events
        );
    }
}

/// A scrape loop over an engine that holds nothing goes dormant, and is
/// queued again when the engine is admitted a request: the bursts and gaps
/// of the gappy trace go through every case (engines idle beside busy
/// ones, dormant loops over the stretches where every other loop pauses,
/// the cluster busy again, the run's end). Every record, emission, step,
/// link window, sample and total is what queuing every scrape gives; only
/// the events differ.
#[test]
fn dormant_scrape_loops_change_nothing_but_the_events() {
    let text = rows(&gappy_times_ms());
    for (name, cluster) in [("colocated", colocated()), ("pd", pd())] {
        let mut lazy = Recorder::default();
        let slept = run(&cluster, &mut source(&text), 5, true, &mut lazy).expect("runs");
        let mut every = Recorder::default();
        let queued = run_observing(
            &cluster,
            &mut source(&text),
            5,
            true,
            &mut every,
            Observation::EveryScrape,
        )
        .expect("runs");
        assert!(slept.scrape_sleeps > 0, "{name}: no loop went dormant");
        assert_eq!(queued.scrape_sleeps, 0, "{name}");
        // The reference also indexes the prefix caches by vLLM's table.
        assert!(slept.chain_indexed_cores > 0, "{name}");
        assert_eq!(queued.chain_indexed_cores, 0, "{name}");
        assert!(slept.events < queued.events, "{name}: no scrape skipped");
        assert_eq!(lazy.memory.records, every.memory.records, "{name}");
        assert_eq!(lazy.memory.emissions, every.memory.emissions, "{name}");
        assert_eq!(lazy.steps, every.steps, "{name}");
        assert_eq!(lazy.windows, every.windows, "{name}");
        assert_eq!(lazy.samples, every.samples, "{name}");
        assert_eq!(
            format!(
                "{:?}",
                (&slept.cores, &slept.links, slept.end, slept.completed)
            ),
            format!(
                "{:?}",
                (&queued.cores, &queued.links, queued.end, queued.completed)
            ),
            "{name}"
        );
        eprintln!(
            "{name}: {} events with dormant loops ({} sleeps), {} with every scrape",
            slept.events, slept.scrape_sleeps, queued.events
        );
    }
}

#[test]
fn samples_resume_after_a_gap_too_short_to_pause_slower_scrapes() {
    // With the EPP scraping every 2 s, a gap of under 2 s pauses the
    // per-second samples but not the scrapes: the next arrival must restart
    // the samples even though every scrape loop is still running.
    let epp = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n";
    let deployment = format!(
        "{DEPLOYMENT}router:\n  endpoint_picker_config: epp.yaml\n  epp_flags: [--refresh-metrics-interval=2s]\n"
    );
    let cluster = cluster_from(SCENARIO, &deployment, "epp.yaml", epp);
    let times: Vec<u64> = (0..30).map(|i| i * 2_300).collect();
    let ((paused, sparse), (through, dense)) = both(&cluster, &rows(&times));
    assert_eq!(sparse.memory.records, dense.memory.records);
    assert_eq!(paused.completed, through.completed);
    let cores = paused.cores.len();
    let skipped = check_skipped_samples_repeat(&sparse.samples, &dense.samples, cores, false);
    assert!(skipped > 0);
    // Samples run to the end: the last one is the run's last in both.
    assert_eq!(sparse.samples.last(), dense.samples.last());
}

#[test]
fn two_requests_a_billion_milliseconds_apart_cost_a_few_samples() {
    // 10^9 ms is about 11.6 days: within the horizon.
    let text = rows(&[0, 1_000_000_000]);
    for cluster in [colocated(), pd()] {
        let mut sink = Recorder::default();
        let stats = run(&cluster, &mut source(&text), 1, false, &mut sink).unwrap();
        assert_eq!(stats.completed, 2);
        let rounds = sink.samples.len() / stats.cores.len();
        assert!(rounds <= 12, "{rounds} sample rounds");
        // The loop did not walk the gap: a few thousand events, not 10^6
        // seconds of scrapes.
        assert!(stats.events < 20_000, "{} events", stats.events);
        assert!(stats.end >= SimTime::from_ms(1_000_000_000));
        let last_finish = sink
            .memory
            .records
            .iter()
            .map(|r| r.finished)
            .max()
            .unwrap();
        assert_eq!(
            sink.samples.last().unwrap().time.as_ns() / SAMPLE_NS,
            last_finish.as_ns().div_ceil(SAMPLE_NS),
            "the last sample is the first idle second after the last request"
        );
    }
}

#[test]
fn a_gap_past_the_horizon_is_an_input_error_naming_the_line() {
    // 10^12 ms is about 31.7 years.
    let text = rows(&[0, 1_000_000_000_000]);
    let err = run(
        &colocated(),
        &mut source(&text),
        1,
        false,
        &mut MemorySink::default(),
    )
    .unwrap_err();
    let RunError::Trace(e) = &err else {
        panic!("{err}")
    };
    assert_eq!((e.file.as_str(), e.line), ("gaps.jsonl", 2), "{e}");
}

fn shape() -> pdsim_spec::catalog::Shape {
    let d = |tokens| pdsim_spec::catalog::LengthDistribution {
        tokens,
        tokens_stdev: 0.0,
        tokens_min: 0,
        tokens_max: 0,
    };
    pdsim_spec::catalog::Shape {
        prefix_tokens: 0,
        prompt: d(500.0),
        output: d(20.0),
    }
}

#[test]
fn a_tiny_synthetic_rate_is_an_input_error_or_bounded_never_an_invariant() {
    let cluster = colocated();
    for rate in [1e-300, 1e-9] {
        let mut source = Synthetic::new("chat", &shape(), 5, rate, 0).unwrap();
        let err = run(&cluster, &mut source, 0, true, &mut MemorySink::default()).unwrap_err();
        assert!(
            matches!(&err, RunError::Trace(e) if e.column.as_deref() == Some("rate")),
            "{rate}: {err}"
        );
    }
    // 10^-4 per second: 20 requests over about two simulated days, and a
    // handful of sample rounds per request.
    let mut source = Synthetic::new("chat", &shape(), 20, 1e-4, 0).unwrap();
    let mut sink = Recorder::default();
    let stats = run(&cluster, &mut source, 0, true, &mut sink).unwrap();
    assert_eq!(stats.completed, 20);
    assert!(stats.end.as_ns() > 50_000 * SAMPLE_NS);
    let rounds = sink.samples.len() / stats.cores.len();
    assert!(rounds <= 20 * 4, "{rounds} sample rounds");
}

#[test]
fn an_arrival_past_the_horizon_from_any_source_is_refused() {
    // A source that does not check (a replay rescaling arrival times).
    let text = rows(&[0, 5]);
    let mut specs: Vec<RequestSpec> = source(&text).map(Result::unwrap).collect();
    specs[1].arrival = SimTime(u64::MAX);
    let mut stream = specs.into_iter().map(Ok::<_, TraceError>);
    let err = run(
        &colocated(),
        &mut stream,
        0,
        true,
        &mut MemorySink::default(),
    )
    .unwrap_err();
    let RunError::Trace(e) = &err else {
        panic!("{err}")
    };
    assert_eq!(e.line, 2, "{e}");
    // The last instant the horizon allows runs.
    let mut specs: Vec<RequestSpec> = source(&text).map(Result::unwrap).collect();
    specs[1].arrival = ARRIVAL_HORIZON;
    let mut stream = specs.into_iter().map(Ok::<_, TraceError>);
    let stats = run(
        &colocated(),
        &mut stream,
        0,
        true,
        &mut MemorySink::default(),
    )
    .unwrap();
    assert_eq!(stats.completed, 2);
}

#[test]
fn durations_at_the_end_of_time_end_the_run_without_overflow() {
    // A prefill hold that never times out and scrapes as far apart as
    // nanoseconds allow: everything still completes, and time saturates
    // instead of wrapping (which the event loop would report as time
    // going back).
    let mut cluster = pd();
    cluster.kv_lease = pdsim_cluster::KvLease::fixed(SimDuration(u64::MAX));
    cluster.epp.flags.refresh_interval_ns = u64::MAX / 2;
    let text = rows(&[0, 3, 2_000, 2_000_000]);
    for pauses in [true, false] {
        let mut sink = Recorder::default();
        let stats = if pauses {
            run(&cluster, &mut source(&text), 2, true, &mut sink)
        } else {
            run_observing(
                &cluster,
                &mut source(&text),
                2,
                true,
                &mut sink,
                Observation::EveryTick,
            )
        }
        .unwrap();
        assert_eq!(stats.completed, 4);
    }
}

#[test]
fn a_request_that_can_never_run_pauses_the_loops_until_the_next_arrival() {
    // Engines with 8 blocks of KV: a 4000-token prompt fits the model's
    // context but never the cache, so it waits for ever; the next request,
    // 100 s later, is served elsewhere; the stuck one ends aborted.
    let mut cluster = colocated();
    cluster.pools[0].engine.num_blocks = 8;
    let text = format!(
        "{}{}",
        rows(&[0]),
        "{\"timestamp\": 100000, \"input_length\": 40, \"output_length\": 4, \"hash_ids\": [9]}\n"
    );
    let ((paused, sparse), (through, dense)) = both(&cluster, &text);
    assert_eq!((paused.completed, paused.aborted), (1, 1));
    assert_eq!(sparse.memory.records, dense.memory.records);
    assert_eq!(
        format!("{:?}", (&paused.cores, paused.end)),
        format!("{:?}", (&through.cores, through.end))
    );
    let cores = paused.cores.len();
    let skipped = check_skipped_samples_repeat(&sparse.samples, &dense.samples, cores, true);
    assert!(skipped > 90 * cores, "only {skipped} samples skipped");
    // The stuck request shows as waiting in the rows around the stretch.
    assert!(sparse.samples.iter().any(|s| s.waiting == 1));
}

/// A request whose client gave up does not keep the observation loops
/// running: they pause over the idle stretch after it as they do after a
/// completed request, so a timed-out first request and a second one 600 s
/// later cost no more events than the same two without the deadline.
#[test]
fn a_request_the_client_gave_up_on_does_not_keep_the_run_busy() {
    let cluster = colocated();
    let text = rows(&[0, 600_000]);
    let specs: Vec<RequestSpec> = source(&text).map(|r| r.unwrap()).collect();
    let mut timed = specs.clone();
    timed[0].deadline = Some(timed[0].arrival + SimDuration::from_ms(200));
    let events = |specs: &[RequestSpec]| {
        let mut sink = Recorder::default();
        let stats = run(
            &cluster,
            &mut specs.iter().cloned().map(Ok),
            5,
            true,
            &mut sink,
        )
        .expect("runs");
        (stats.events, stats.aborted)
    };
    let (free, aborted_free) = events(&specs);
    let (gave_up, aborted) = events(&timed);
    assert_eq!((aborted_free, aborted), (0, 1));
    assert!(
        gave_up <= free,
        "{gave_up} events with the client giving up, {free} without"
    );
}

/// Each link window's utilization is its bytes over the link's capacity
/// for the window's one second: the 1P3D layout's KV goes out of the
/// prefill node's NICs, ib-400g's 400 Gb/s = 50 GB/s per GPU
/// (`catalog/networks/ib-400g.yaml`), and the windows of the NIC egress
/// carry every byte the records say was transferred.
#[test]
fn link_windows_report_bytes_over_the_link_capacity_of_their_second() {
    let cluster = pd();
    let mut sink = Recorder::default();
    run(
        &cluster,
        &mut source(&rows(&[0, 10, 1_500, 2_600])),
        5,
        true,
        &mut sink,
    )
    .expect("runs");
    let transferred: u64 = sink.memory.records.iter().map(|r| r.transfer_bytes).sum();
    assert!(transferred > 0, "the requests were disaggregated");
    let out: Vec<&LinkWindow> = sink
        .windows
        .iter()
        .filter(|w| w.kind == "nic-out" && w.bytes > 0.0)
        .collect();
    assert!(!out.is_empty());
    for w in &out {
        let capacity_bytes = w.bytes / w.utilization;
        assert!(
            (capacity_bytes - 50e9).abs() <= 1e-3,
            "{w:?}: {capacity_bytes} bytes per window"
        );
        assert!(w.utilization <= 1.0, "{w:?}");
    }
    // Windows are the whole seconds of simulated time; the first one with
    // NIC traffic is the second the first transfer started in.
    for w in &out {
        assert_eq!(w.window_start.as_ns() % 1_000_000_000, 0, "{w:?}");
    }
    let first_transfer = sink
        .memory
        .records
        .iter()
        .filter_map(|r| r.transfer_start)
        .min()
        .expect("a transfer");
    // Every second in which a transfer started has its window.
    for r in &sink.memory.records {
        if let Some(start) = r.transfer_start {
            let second = start.as_ns() / 1_000_000_000 * 1_000_000_000;
            assert!(
                out.iter().any(|w| w.window_start.as_ns() == second),
                "no window for the transfer at {start:?}"
            );
        }
    }
    let first_window = out.iter().map(|w| w.window_start).min().unwrap();
    assert_eq!(
        first_window.as_ns(),
        first_transfer.as_ns() / 1_000_000_000 * 1_000_000_000,
        "first transfer at {first_transfer:?}"
    );
    // Egress is on the prefill node's GPUs (0–7), ingress on the decode
    // nodes' (8–31): each window names its GPU, not its link kind.
    assert!(out.iter().all(|w| w.gpu < 8), "{out:?}");
    let inbound: Vec<&LinkWindow> = sink
        .windows
        .iter()
        .filter(|w| w.kind == "nic-in" && w.bytes > 0.0)
        .collect();
    assert!(
        !inbound.is_empty() && inbound.iter().all(|w| (8..32).contains(&w.gpu)),
        "{inbound:?}"
    );
    let carried: f64 = out.iter().map(|w| w.bytes).sum();
    assert!(
        (carried - transferred as f64).abs() <= 1e-3 * transferred as f64,
        "{carried} bytes in windows, {transferred} in records"
    );
}
