//! Whole runs through the event loop: determinism, every request terminal,
//! and refusals of what the simulation cannot run yet.

use pdsim_cluster::{MemorySink, Outcome, build, run};
use pdsim_engine::offload::{EvictionPolicy, Release};
use pdsim_spec::files::MemoryFiles;
use pdsim_spec::validate::{Request, validate};
use pdsim_workload::{MooncakeReader, RequestSpec, TraceError};

const SCENARIO: &str = include_str!("../../../scenarios/default.yaml");
const DEPLOYMENT: &str = include_str!("../../../deployments/default.yaml");
const TRACE: &str = include_str!("../../../traces/default.jsonl");

fn bundle(deployment: &str) -> pdsim_spec::validate::Report {
    bundle_on(SCENARIO, deployment)
}

/// `deployment` validated on `scenario`.
fn bundle_on(scenario: &str, deployment: &str) -> pdsim_spec::validate::Report {
    let files = MemoryFiles::new()
        .with("s.yaml", scenario)
        .with("d.yaml", deployment);
    validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    })
}

/// The first `n` requests of the bundled trace.
fn trace(n: usize) -> Box<dyn Iterator<Item = Result<RequestSpec, TraceError>>> {
    Box::new(MooncakeReader::new(std::io::Cursor::new(TRACE.as_bytes()), "default.jsonl").take(n))
}

#[test]
fn a_run_is_deterministic_and_every_request_ends() {
    let report = bundle(DEPLOYMENT);
    assert!(report.valid, "{:#?}", report.problems);
    let scenario = report.scenario.as_ref().unwrap();
    let cluster = build(&report.deployments[0], scenario).expect("the default deployment builds");
    let mut first = MemorySink::default();
    let stats = run(&cluster, &mut trace(400), 7, true, &mut first).expect("runs");
    let mut second = MemorySink::default();
    run(&cluster, &mut trace(400), 7, true, &mut second).expect("runs");
    assert_eq!(
        first.records, second.records,
        "same inputs and seed, same records"
    );
    assert_eq!(first.emissions, second.emissions);
    assert_eq!(stats.requests, 400);
    assert_eq!(
        first.records.len(),
        400,
        "every request reached exactly one terminal state"
    );
    assert_eq!(stats.completed + stats.rejected + stats.aborted, 400);
    for r in &first.records {
        assert_eq!(r.outcome, Outcome::Completed, "{r:?}");
        let first_token = r
            .first_token
            .expect("completed requests have a first token");
        assert!(
            r.arrival <= r.enqueued.unwrap()
                && r.enqueued.unwrap() <= first_token
                && first_token <= r.finished
        );
        assert!(r.output_tokens >= 1);
    }
    // Shared system prompts make later requests hit the prefix cache.
    let hits: u64 = stats.cores.iter().map(|c| c.prefix_hits_tokens).sum();
    assert!(hits > 0);
}

#[test]
fn a_bad_trace_row_stops_the_run() {
    let report = bundle(DEPLOYMENT);
    let cluster = build(&report.deployments[0], report.scenario.as_ref().unwrap()).unwrap();
    let text = format!(
        "{}\n{{\"timestamp\": 5, \"input_length\": -3}}\n",
        TRACE.lines().next().unwrap()
    );
    let mut source = MooncakeReader::new(std::io::Cursor::new(text.into_bytes()), "bad.jsonl");
    let err = run(&cluster, &mut source, 0, false, &mut MemorySink::default()).unwrap_err();
    assert!(err.to_string().starts_with("bad.jsonl:2"), "{err}");
}

#[test]
fn unsupported_features_are_refused_by_name() {
    let with_router = format!("{DEPLOYMENT}router:\n  epp_flags: [--pool-name=x]\n");
    let report = bundle(&with_router);
    let err = build(&report.deployments[0], report.scenario.as_ref().unwrap())
        .err()
        .expect("refused");
    assert_eq!(err.path, "router");
    // Host-memory offload runs, through vLLM's OffloadingConnector (LRU or
    // ARC, with the release's recency rule) or LMCache (LRU); ARC under
    // LMCache, other connectors, an offloading spec for LMCache and LMCache
    // tiers below host memory are refused by key, and so is the
    // OffloadingConnector of a release whose manager pdsim does not mirror.
    let offload = "offload:\n  tiers: [{tier: cpu_dram, bytes: 1000000000}]\n";
    let report = bundle(&format!("{DEPLOYMENT}{offload}"));
    let cluster = build(&report.deployments[0], report.scenario.as_ref().unwrap()).expect("runs");
    let tier = cluster.pools[0].engine.offload.expect("the tier");
    assert_eq!(
        (tier.policy, tier.release),
        (EvictionPolicy::Lru, Release::V0_31_0),
        "omitted means lru; 0.31.0 ranks at the request's end"
    );
    let report = bundle(&format!("{DEPLOYMENT}{offload}  eviction_policy: arc\n"));
    let cluster = build(&report.deployments[0], report.scenario.as_ref().unwrap()).expect("runs");
    assert_eq!(
        cluster.pools[0].engine.offload.unwrap().policy,
        EvictionPolicy::Arc
    );
    for (version, release) in [("0.29.0", Some(Release::V0_29_0)), ("0.15.1", None)] {
        let scenario = SCENARIO.replace(
            "engine_version: \"0.31.0\"",
            &format!("engine_version: \"{version}\""),
        );
        assert_ne!(scenario, SCENARIO);
        let report = bundle_on(&scenario, &format!("{DEPLOYMENT}{offload}"));
        let built = build(&report.deployments[0], report.scenario.as_ref().unwrap());
        match release {
            Some(release) => assert_eq!(
                built.expect("runs").pools[0]
                    .engine
                    .offload
                    .unwrap()
                    .release,
                release
            ),
            None => {
                let err = built.err().expect("refused");
                assert_eq!(err.path, "offload.connector");
                assert!(err.message.contains("lru_manager.py"), "{}", err.message);
            }
        }
    }
    let lmcache = "  connector: LMCacheConnectorV1\n";
    let report = bundle(&format!("{DEPLOYMENT}{offload}{lmcache}"));
    let cluster = build(&report.deployments[0], report.scenario.as_ref().unwrap()).expect("runs");
    let lm = cluster.pools[0]
        .engine
        .lmcache
        .expect("LMCache on the colocated pool");
    assert_eq!(lm.chunk_tokens, 256, "LMCache's default chunk size");
    assert!(lm.capacity_chunks > 0);
    assert_eq!(cluster.pools[0].engine.offload, None);
    for (extra, path) in [
        (
            "  eviction_policy: arc\n  connector: LMCacheConnectorV1\n",
            "offload.eviction_policy",
        ),
        ("  connector: LMCacheMPConnector\n", "offload.connector"),
        (
            "  connector: LMCacheConnectorV1\n  spec: CPUOffloadingSpec\n",
            "offload.spec",
        ),
        ("  prefetch_depth: 2\n", "offload.prefetch_depth"),
    ] {
        let report = bundle(&format!("{DEPLOYMENT}{offload}{extra}"));
        let err = build(&report.deployments[0], report.scenario.as_ref().unwrap())
            .err()
            .expect("refused");
        assert_eq!(err.path, path);
    }
}

/// The drafter acceptance a pool gets with a set `accept` holding
/// positions 0 and 1 of EAGLE-3 at `values`, scoped by `scope`, on the
/// default scenario (Llama-3.1-8B on H200) with three draft tokens; or the
/// build's refusal.
fn acceptance_with(scope: &str, values: [f64; 2]) -> Result<Vec<f64>, pdsim_cluster::BuildError> {
    let entry = |pos: usize, value: f64| {
        format!(
            "  - spec_acceptance_eagle3_pos{pos}:\n      value: {value}\n      units: dimensionless\n      method: measured\n      fitted: true\n      scope: {scope}\n"
        )
    };
    let set = format!(
        "kind: CoefficientSet\nname: accept\ncoefficients:\n{}{}",
        entry(0, values[0]),
        entry(1, values[1])
    );
    let scenario = SCENARIO.replace(
        "  - pd-transfer-estimates\n",
        "  - pd-transfer-estimates\n  - accept\n",
    );
    let deployment = format!(
        "{DEPLOYMENT}    engine:\n      speculative: {{method: eagle3, num_spec_tokens: 3}}\n"
    );
    let files = MemoryFiles::new()
        .with("s.yaml", &scenario)
        .with("d.yaml", &deployment)
        .with("cat/coefficients/accept.yaml", &set);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec!["cat".into()],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    assert!(report.valid, "{:#?}", report.problems);
    let cluster = build(&report.deployments[0], report.scenario.as_ref().unwrap())?;
    let spec = cluster.pools[0]
        .engine
        .spec
        .as_ref()
        .expect("speculative decoding configured");
    assert_eq!(spec.num_spec_tokens, 3);
    assert!(spec.eagle_style);
    Ok(spec.acceptance.clone())
}

#[test]
fn speculative_acceptance_defaults_per_method_and_scenario_overrides() {
    let defaults = pdsim_cluster::default_acceptance("eagle3");
    assert_eq!(defaults[..3], [0.58, 0.31, 0.16]);
    // Position 1 is capped by position 0: a later draft cannot be accepted
    // more often than an earlier one.
    assert_eq!(
        acceptance_with("{}", [0.9, 0.95]).unwrap(),
        vec![0.9, 0.9, 0.16]
    );
    // Chosen by scope, as every coefficient is: a set measured on this
    // model or chip applies, one scoped to another does not.
    for scope in ["{model: [llama-3.1-8b]}", "{hardware: [h200], tp: [1]}"] {
        assert_eq!(
            acceptance_with(scope, [0.7, 0.5]).unwrap(),
            vec![0.7, 0.5, 0.16],
            "{scope}"
        );
    }
    for scope in ["{model: [qwen3-14b]}", "{hardware: [b200]}", "{tp: [8]}"] {
        assert_eq!(
            acceptance_with(scope, [0.7, 0.5]).unwrap(),
            defaults[..3],
            "{scope}"
        );
    }
    // An acceptance is a probability: outside [0, 1] is refused, naming
    // the coefficient, not clamped.
    let err = acceptance_with("{}", [1.5, 0.5]).unwrap_err();
    assert!(
        err.message.contains("spec_acceptance_eagle3_pos0"),
        "{}",
        err.message
    );
    assert_eq!(err.path, "pools[0]");
}

const H200: &str = include_str!("../../../scenarios/4x8-h200.yaml");
const P1D3: &str = include_str!("../../../deployments/1p3d-ep8.yaml");
const ALWAYS: &str = include_str!("../../../deployments/pd/epp-always-pd.yaml");

/// The bundled 1P3D deployment, its router disaggregating every request.
fn pd_cluster() -> pdsim_cluster::Cluster {
    pd_cluster_from(P1D3, "pd/epp-always-pd.yaml", ALWAYS)
}

/// A P/D deployment on the 4×8 H200 scenario, validated and built with
/// the router inputs it names; `router_path` holds `router_text`. Without a
/// router block the EPP's built-in configuration routes.
fn pd_cluster_from(
    deployment: &str,
    router_path: &str,
    router_text: &str,
) -> pdsim_cluster::Cluster {
    cluster_from(H200, deployment, router_path, router_text)
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

#[test]
fn pd_transfers_exactly_the_blocks_the_decode_side_lacks() {
    // The bundled decode ranks are one GPU each; at TP 2 each rank's two
    // GPUs hold a half of every block's heads, and both halves move.
    let tp2 = P1D3.replacen(
        "  - role: decode\n    nodes: 3\n    parallel:\n      tp: 1\n      pp: 1\n      dp: 8\n      dp_local: 8\n",
        "  - role: decode\n    nodes: 3\n    parallel:\n      tp: 2\n      pp: 1\n      dp: 4\n      dp_local: 4\n",
        1,
    );
    assert_ne!(tp2, P1D3);
    for (deployment, world) in [(P1D3, 1), (tp2.as_str(), 2)] {
        let cluster = pd_cluster_from(deployment, "pd/epp-always-pd.yaml", ALWAYS);
        assert_eq!(cluster.pools[1].world, world);
        transfers_exactly_the_blocks_the_decode_side_lacks(&cluster);
    }
}

fn transfers_exactly_the_blocks_the_decode_side_lacks(cluster: &pdsim_cluster::Cluster) {
    let decode = &cluster.pools[1];
    let mut sink = MemorySink::default();
    let stats = run(cluster, &mut trace(300), 3, true, &mut sink).unwrap();
    assert_eq!(stats.completed, 300);
    let mut saw_hit = false;
    for r in &sink.records {
        assert!(
            r.prefill.is_some() && r.prefill_done.is_some() && r.transfer_end.is_some(),
            "{r:?}"
        );
        // Every block the decode side lacks moves whole, on every GPU of
        // the decode rank (NixlConnector reads the remote blocks matching
        // its unhashed local ones, `nixl/pull_scheduler.py`); a decode-side
        // prefix hit takes exactly its blocks off the bill.
        let block = decode.engine.block_size as u64;
        let lacking = (r.prompt_tokens as u64).div_ceil(block) - r.cached_tokens as u64 / block;
        let expected = ((lacking * block) as f64
            * decode.kv_bytes_per_token_gpu
            * decode.world as f64)
            .round() as u64;
        assert_eq!(r.transfer_bytes, expected, "{r:?}");
        saw_hit |= r.cached_tokens > 0;
        // The client's first token comes from decode, after the transfer.
        assert!(r.first_token.unwrap() >= r.transfer_end.unwrap());
    }
    assert!(
        saw_hit,
        "the bundled trace's shared prompts hit on the decode side"
    );
}

#[test]
fn an_expired_prefill_hold_frees_once_and_the_decode_side_recomputes() {
    let mut cluster = pd_cluster();
    // Holds expire long before the decode side can start reading.
    cluster.kv_lease = pdsim_cluster::KvLease {
        duration: pdsim_core::SimDuration(1),
        ..cluster.kv_lease
    };
    let mut sink = MemorySink::default();
    let stats = run(&cluster, &mut trace(100), 3, true, &mut sink).unwrap();
    assert_eq!(stats.completed, 100, "nothing lost");
    assert_eq!(stats.kv_hold_expiries, 100);
    for r in &sink.records {
        assert!(
            r.kv_hold_expired && r.transfer_start.is_none() && r.transfer_bytes == 0,
            "{r:?}"
        );
        assert!(r.first_token.is_some());
    }
}

#[test]
fn a_lone_request_whose_hold_expired_is_recomputed_and_the_run_ends() {
    // The only request: its decode engine must be woken to recompute it
    // (it once slept forever while the scrape loop kept the run alive).
    let mut cluster = pd_cluster();
    cluster.kv_lease = pdsim_cluster::KvLease {
        duration: pdsim_core::SimDuration(1),
        ..cluster.kv_lease
    };
    let mut sink = MemorySink::default();
    let stats = run(&cluster, &mut trace(1), 3, true, &mut sink).unwrap();
    assert_eq!(stats.completed, 1);
    assert!(sink.records[0].kv_hold_expired);
}

#[test]
fn a_colocated_pool_under_a_pd_router_never_moves_kv_to_the_same_core() {
    // Colocated pods pass both the prefill and the decode filter.
    let colocated = P1D3
        .replace("role: prefill", "role: colocated")
        .replace("role: decode", "role: colocated");
    let cluster = pd_cluster_from(&colocated, "pd/epp-always-pd.yaml", ALWAYS);
    let mut sink = MemorySink::default();
    let stats = run(&cluster, &mut trace(200), 3, true, &mut sink).unwrap();
    assert_eq!(stats.completed, 200);
    for r in &sink.records {
        if let Some(prefill) = r.prefill {
            assert_ne!(prefill, (r.pool, r.pod, r.rank), "{r:?}");
            assert!(r.first_token > r.prefill_done, "{r:?}");
        }
    }
}

#[test]
fn without_a_router_block_the_builtin_epp_serves_every_request_whole() {
    // The specification's own 1P3D example, which has no router block.
    let spec_example = P1D3.split("router:").next().unwrap();
    let cluster = pd_cluster_from(spec_example, "unused.yaml", "");
    assert_eq!(cluster.router, "epp-builtin-default");
    let mut sink = MemorySink::default();
    let stats = run(&cluster, &mut trace(300), 3, true, &mut sink).unwrap();
    assert_eq!(stats.completed, 300);
    // No P/D profile: nothing is disaggregated, nothing moves over the
    // fabric, and the prefill pod (pool 0) serves requests like any other.
    assert!(
        sink.records
            .iter()
            .all(|r| r.prefill.is_none() && r.transfer_bytes == 0)
    );
    let per_pool = |pool: u16| sink.records.iter().filter(|r| r.pool == pool).count();
    assert!(
        per_pool(0) > 0 && per_pool(1) > 0,
        "{} {}",
        per_pool(0),
        per_pool(1)
    );
}

#[test]
fn the_epp_disaggregates_only_what_the_decode_side_lacks() {
    let epp_text = include_str!("../../../deployments/pd/epp-prefix-pd.yaml");
    let deployment = P1D3.replace("pd/epp-always-pd.yaml", "pd/epp-prefix-pd.yaml");
    let cluster = pd_cluster_from(&deployment, "pd/epp-prefix-pd.yaml", epp_text);
    assert_eq!(cluster.router, "epp");
    // The same 2048-token prompt every two seconds. The first is uncached
    // and goes through prefill. It is indexed before any pod is scraped, at
    // the producer's fallback block size raised to its 64-token floor;
    // autoTune then reads the pods' block size, also 64, so the hashes still
    // match and every later request finds the prompt on its decode pod and
    // stays decode-only.
    let line = "{\"timestamp\": T, \"input_length\": 2048, \"output_length\": 8, \"hash_ids\": [1, 2, 3, 4]}";
    let text: String = (0..20)
        .map(|i| line.replace('T', &(i * 2000).to_string()) + "\n")
        .collect();
    let run_once = || {
        let mut source = MooncakeReader::new(
            std::io::Cursor::new(text.clone().into_bytes()),
            "same.jsonl",
        );
        let mut sink = MemorySink::default();
        let stats = run(&cluster, &mut source, 11, true, &mut sink).unwrap();
        (stats, sink)
    };
    let (stats, sink) = run_once();
    assert_eq!(stats.completed, 20);
    let disaggregated: Vec<u32> = sink
        .records
        .iter()
        .filter(|r| r.prefill.is_some())
        .map(|r| r.id.0)
        .collect();
    assert_eq!(
        disaggregated,
        vec![0],
        "only the first needs the prefill pod"
    );
    // The EPP sees pods, not ranks: a decode pod's API servers spread its
    // requests over its eight data-parallel ranks (`crate::dp_lb`), each
    // with its own prefix cache. So a rank computes the prompt the first
    // time a request reaches it (or received it from the prefill pod), and
    // every later request on that rank finds it.
    let mut seen = std::collections::BTreeSet::new();
    for r in &sink.records {
        let first_here = seen.insert((r.pool, r.pod, r.rank));
        assert_eq!(
            r.cached_tokens >= 1984,
            !first_here && r.prefill.is_none(),
            "{r:?}"
        );
    }
    assert!(seen.len() > 1 && seen.len() < 20, "{seen:?}");
    // Same seed, same decisions.
    assert_eq!(run_once().1.records, sink.records);
}

/// The default deployment (eight single-GPU engines) routed by an EPP
/// configuration in `epp.yaml`.
fn colocated_with_router(epp: &str) -> pdsim_cluster::Cluster {
    colocated_with_router_flags(epp, "")
}

/// The same with EPP flags (`epp_flags: [...]`, or "" for none).
fn colocated_with_router_flags(epp: &str, flags: &str) -> pdsim_cluster::Cluster {
    let flags = if flags.is_empty() {
        String::new()
    } else {
        format!("  epp_flags: [{flags}]\n")
    };
    let deployment = format!("{DEPLOYMENT}router:\n  endpoint_picker_config: epp.yaml\n{flags}");
    cluster_from(SCENARIO, &deployment, "epp.yaml", epp)
}

/// `n` requests arriving together: 1000-token prompts with nothing shared,
/// 100 output tokens each.
fn burst(n: usize) -> Vec<RequestSpec> {
    let text: String = (0..n)
        .map(|i| {
            format!(
                "{{\"timestamp\": 0, \"input_length\": 1000, \"output_length\": 100, \"hash_ids\": [{}, {}]}}\n",
                1000 + 2 * i,
                1001 + 2 * i
            )
        })
        .collect();
    MooncakeReader::new(std::io::Cursor::new(text.into_bytes()), "burst.jsonl")
        .map(|r| r.unwrap())
        .collect()
}

/// The most requests whose [engine admission, end] spans overlap.
fn peak_overlap(records: &[pdsim_cluster::RequestRecord]) -> usize {
    let mut edges: Vec<(u64, i32)> = Vec::new();
    for r in records.iter().filter(|r| r.outcome == Outcome::Completed) {
        edges.push((r.enqueued.unwrap().as_ns(), 1));
        edges.push((r.finished.as_ns(), -1));
    }
    edges.sort();
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    peak as usize
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
  defaultRequestTTL: 3s
  saturationDetector: {pluginRef: concurrency-detector}
";

#[test]
fn flow_control_queues_a_saturated_burst_at_the_epp_and_dispatches_it_later() {
    let cluster = colocated_with_router(FLOW_EPP);
    let run_burst = |cluster: &pdsim_cluster::Cluster| {
        let mut sink = MemorySink::default();
        let stats = run(
            cluster,
            &mut burst(600).into_iter().map(Ok),
            5,
            true,
            &mut sink,
        )
        .unwrap();
        (stats, sink)
    };
    let (stats, sink) = run_burst(&cluster);
    assert_eq!(sink.records.len(), 600, "every request ends once");
    let with_reason = |reason: &str| -> Vec<u32> {
        let mut ids: Vec<u32> = sink
            .records
            .iter()
            .filter(|r| r.reason == reason)
            .map(|r| r.id.0)
            .collect();
        ids.sort();
        ids
    };
    // 8 endpoints × maxConcurrency 4: the first 32 requests dispatch at
    // once and saturate the pool; the next 500 fill the global limit; the
    // last 68 are refused on arrival.
    let capacity = with_reason("flow-control-capacity");
    assert_eq!(capacity, (532..600).collect::<Vec<u32>>());
    let ttl = with_reason("flow-control-ttl");
    let completed: Vec<u32> = with_reason("");
    assert!(!ttl.is_empty(), "a 3 s budget cannot drain 500 requests");
    assert_eq!(completed.len() + ttl.len() + capacity.len(), 600);
    assert_eq!(stats.rejected as usize, ttl.len() + capacity.len());
    assert_eq!(stats.completed as usize, completed.len());
    // Dispatched later, from the queue, in arrival order: every request
    // served came before every one whose budget ran out.
    assert!(completed.len() > 32, "{}", completed.len());
    assert!(completed.iter().max() < ttl.iter().min());
    let late = sink
        .records
        .iter()
        .filter(|r| r.outcome == Outcome::Completed && r.id.0 >= 32)
        .map(|r| r.enqueued.unwrap().as_ns())
        .min()
        .unwrap();
    assert!(
        late > 100_000_000,
        "queued requests wait for capacity: {late}"
    );
    // Evictions happen at a sweep tick at or after the 3 s budget.
    for r in sink
        .records
        .iter()
        .filter(|r| r.reason == "flow-control-ttl")
    {
        let waited = r.finished.as_ns() - r.arrival.as_ns();
        assert!((3_000_000_000..4_000_000_000).contains(&waited), "{r:?}");
    }
    // Never more than the detector's capacity in the engines.
    assert!(peak_overlap(&sink.records) <= 32);
    // Deterministic.
    let (_, again) = run_burst(&cluster);
    assert_eq!(sink.records, again.records);

    // Without the gate the EPP admits every request at once.
    let legacy = colocated_with_router(&FLOW_EPP.replace("featureGates: [flowControl]\n", ""));
    let (stats, sink) = run_burst(&legacy);
    assert_eq!(stats.completed, 600);
    assert!(peak_overlap(&sink.records) > 32);
}

#[test]
fn a_queue_the_detector_never_releases_ends_the_run_when_no_ttl_bounds_it() {
    // A ceiling of 0: saturation ≥ 0 always holds the line. With the TTL
    // disabled, nothing can release or evict the queue, and the run still
    // ends, the queued requests aborted by name.
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
    let cluster = colocated_with_router(epp);
    let mut sink = MemorySink::default();
    let stats = run(
        &cluster,
        &mut burst(5).into_iter().map(Ok),
        5,
        true,
        &mut sink,
    )
    .unwrap();
    assert_eq!(stats.aborted, 5);
    assert!(
        sink.records
            .iter()
            .all(|r| r.reason == "flow-control-stalled")
    );
}

#[test]
fn scraped_saturation_holds_requests_until_a_scrape_shows_room() {
    // The utilization detector reads the scraped queues: a burst is let
    // through until the next scrapes see the queues it built, then held
    // until later scrapes see them drain.
    let epp = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: queue-scorer
- type: utilization-detector
  parameters: {queueDepthThreshold: 1}
";
    let cluster = colocated_with_router(epp);
    let line = |i: usize| {
        format!(
            "{{\"timestamp\": {}, \"input_length\": 4000, \"output_length\": 50, \"hash_ids\": [{}]}}\n",
            i * 2,
            5000 + i
        )
    };
    let text: String = (0..400).map(line).collect();
    let source = || MooncakeReader::new(std::io::Cursor::new(text.clone().into_bytes()), "t.jsonl");
    let mut sink = MemorySink::default();
    let stats = run(&cluster, &mut source(), 5, true, &mut sink).unwrap();
    assert_eq!(
        stats.completed, 400,
        "the default 60 s budget drains it all"
    );
    // Some request waited at the EPP: its engine admission came later than
    // the frontend delay alone (which the same request without flow
    // control shows).
    let plain = colocated_with_router(&epp.replace("featureGates: [flowControl]\n", ""));
    let mut base = MemorySink::default();
    run(&plain, &mut source(), 5, true, &mut base).unwrap();
    let delay = |r: &pdsim_cluster::RequestRecord| r.enqueued.unwrap().as_ns() - r.arrival.as_ns();
    let frontend = base.records.iter().map(delay).max().unwrap();
    let held = sink.records.iter().filter(|r| delay(r) > frontend).count();
    assert!(held > 0, "nothing waited at the EPP");
    // Requests leave the queue in arrival order (FCFS): engine admission
    // order, less the frontend delay, never inverts between two requests
    // that both waited.
    let mut waited: Vec<(u32, u64)> = sink
        .records
        .iter()
        .filter(|r| delay(r) > frontend)
        .map(|r| (r.id.0, r.arrival.as_ns() + delay(r)))
        .collect();
    waited.sort();
    assert!(
        waited.windows(2).all(|w| w[0].1 <= w[1].1 + frontend),
        "{waited:?}"
    );
}

#[test]
fn a_held_queue_with_stale_metrics_and_no_ttl_still_ends() {
    // Scrapes every second against a 200 ms staleness threshold: each
    // scrape turns a stale view fresh again. With the line held for ever
    // (ceiling 0) and no TTL, the scrape loop must not keep the run alive.
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
    let cluster = colocated_with_router_flags(epp, "--refresh-metrics-interval=1s");
    let mut sink = MemorySink::default();
    let stats = run(
        &cluster,
        &mut burst(3).into_iter().map(Ok),
        5,
        true,
        &mut sink,
    )
    .unwrap();
    assert_eq!(stats.aborted, 3);
    assert!(stats.end.as_ns() < 10_000_000_000, "{:?}", stats.end);
}

/// The reference precise-prefix config (llm-d-router
/// `deploy/config/epp-precise-prefix-cache-config.yaml`), its block size
/// set to the engines' 16.
const PRECISE: &str = "apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: token-producer
    parameters:
      modelName: hf-repo/model-name
      vllm:
        url: http://localhost:8000
  - type: endpoint-notification-source
  - type: metrics-data-source
  - type: core-metrics-extractor
  - type: single-profile-handler
  - type: decode-filter
  - type: precise-prefix-cache-producer
    parameters:
      tokenProcessorConfig:
        blockSize: 16
      indexerConfig:
        kvBlockIndexConfig:
          enableMetrics: true
  - type: prefix-cache-scorer
    parameters:
      prefixMatchInfoProducerName: precise-prefix-cache-producer
  - type: kv-cache-utilization-scorer
  - type: queue-scorer
  - type: max-score-picker
dataLayer:
  sources:
    - pluginRef: metrics-data-source
      extractors:
        - pluginRef: core-metrics-extractor
    - pluginRef: endpoint-notification-source
      extractors:
        - pluginRef: precise-prefix-cache-producer
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: decode-filter
      - pluginRef: prefix-cache-scorer
        weight: 2.0
      - pluginRef: kv-cache-utilization-scorer
        weight: 1.0
      - pluginRef: queue-scorer
        weight: 1.0
      - pluginRef: max-score-picker
";

/// The default 8-engine deployment routed by `router_text`; the prefix
/// hit rate of a 400-request run of the bundled trace.
fn hit_rate(router_text: &str) -> f64 {
    let cluster = colocated_with_router_flags(router_text, "--pool-name=x");
    let mut sink = MemorySink::default();
    let stats = run(&cluster, &mut trace(400), 5, true, &mut sink).unwrap();
    assert_eq!(stats.completed, 400);
    let hits: u64 = stats.cores.iter().map(|c| c.prefix_hits_tokens).sum();
    let queries: u64 = stats.cores.iter().map(|c| c.prefix_queries_tokens).sum();
    hits as f64 / queries.max(1) as f64
}

#[test]
fn the_precise_producer_routes_to_the_engines_that_hold_the_prefix() {
    let precise = hit_rate(PRECISE);
    let random = hit_rate(
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: random-picker\n",
    );
    let approx = hit_rate("");
    eprintln!("prefix hit rate: precise {precise:.3}, approx {approx:.3}, random {random:.3}");
    assert!(
        precise > random + 0.05,
        "precise {precise:.3} against random {random:.3}"
    );
    assert!(
        precise > approx - 0.05,
        "precise {precise:.3} against approx {approx:.3}"
    );
    // Without the extractor wiring (and no global zmqEndpoint) no
    // subscriber exists: the index stays empty and the scorer adds nothing.
    let unwired = PRECISE.replace(
        "    - pluginRef: endpoint-notification-source\n      extractors:\n        - pluginRef: precise-prefix-cache-producer\n",
        "",
    );
    let unwired = hit_rate(&unwired);
    assert!(
        precise > unwired + 0.02,
        "precise {precise:.3} against unwired {unwired:.3}"
    );
}

/// A decode pool's cost model with a fixed extra delay before the decode
/// engine receives a request and a fixed extra time on every step: ways to
/// make the decode side late that the bundled cost models cannot express.
struct LateDecode {
    inner: Box<dyn pdsim_cost::CostModel>,
    admission: pdsim_core::SimDuration,
    step: pdsim_core::SimDuration,
}

impl pdsim_cost::CostModel for LateDecode {
    fn step(&self, batch: &pdsim_cost::Batch) -> pdsim_cost::StepCost {
        let mut cost = self.inner.step(batch);
        cost.total += self.step;
        cost
    }
    fn admission_delay(&self, prompt_tokens: u32) -> pdsim_core::SimDuration {
        self.inner.admission_delay(prompt_tokens) + self.admission
    }
}

/// Stands in for a pool's cost model while it is being wrapped.
struct Placeholder;

impl pdsim_cost::CostModel for Placeholder {
    fn step(&self, _batch: &pdsim_cost::Batch) -> pdsim_cost::StepCost {
        unreachable!("replaced before the run")
    }
    fn admission_delay(&self, _prompt_tokens: u32) -> pdsim_core::SimDuration {
        unreachable!("replaced before the run")
    }
}

/// The P/D cluster with every decode pool made late by `admission` and
/// `step`, and its decode engines limited to `max_num_seqs`.
fn late_decode_cluster(
    admission: pdsim_core::SimDuration,
    step: pdsim_core::SimDuration,
    max_num_seqs: Option<u32>,
) -> pdsim_cluster::Cluster {
    let mut cluster = pd_cluster();
    for pool in cluster
        .pools
        .iter_mut()
        .filter(|p| p.role == pdsim_spec::deployment::Role::Decode)
    {
        // The pool's own model moves into the wrapper; an empty one holds
        // its place for the moment between.
        let inner = std::mem::replace(&mut pool.cost, Box::new(Placeholder));
        pool.cost = Box::new(LateDecode {
            inner,
            admission,
            step,
        });
        if let Some(seqs) = max_num_seqs {
            pool.engine.max_num_seqs = seqs;
        }
    }
    cluster
}

/// `n` requests with distinct prompts arriving 1 ms apart.
fn distinct_requests(n: usize, output: u32) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"timestamp\": {i}, \"input_length\": 1000, \"output_length\": {output}, \"hash_ids\": [{}, {}]}}\n",
                2 * i,
                2 * i + 1
            )
        })
        .collect()
}

fn source(text: &str) -> Box<dyn Iterator<Item = Result<RequestSpec, TraceError>> + '_> {
    Box::new(MooncakeReader::new(
        std::io::Cursor::new(text.as_bytes()),
        "t.jsonl",
    ))
}

#[test]
fn the_releases_lease_is_thirty_seconds_renewed_by_heartbeats() {
    // The figures of `kv_lease_duration` (30 s) and the integer arithmetic
    // vLLM derives from it: a heartbeat every 30 // 6 s, each extending the
    // lease to 30 * 2 // 3 s past it.
    let lease = pd_cluster().kv_lease;
    assert_eq!(lease.duration, pdsim_core::SimDuration::from_secs_f64(30.0));
    assert!(lease.heartbeats);
    assert_eq!(
        lease.heartbeat_interval,
        pdsim_core::SimDuration::from_secs_f64(5.0)
    );
    assert_eq!(
        lease.extension,
        pdsim_core::SimDuration::from_secs_f64(20.0)
    );
}

#[test]
fn a_hold_the_decode_side_never_received_in_time_is_freed_thirty_seconds_after_prefill() {
    // The decode engine receives each request just after or just before
    // the lease from prefill completion runs out. Before receipt nothing
    // heartbeats, so the first hold is freed at 30 s (not the old fixed
    // 480 s, under which the read would still have found the blocks) and
    // the decode side recomputes; received in time, the heartbeats keep the
    // hold and the read happens.
    let text = distinct_requests(1, 8);
    let ms = |v: f64| pdsim_core::SimDuration::from_secs_f64(v / 1e3);
    for (late_ms, expires) in [(30_001.0, true), (29_999.0, false)] {
        let cluster = late_decode_cluster(ms(late_ms), pdsim_core::SimDuration(0), None);
        let mut sink = MemorySink::default();
        let stats = run(&cluster, &mut source(&text), 3, true, &mut sink).unwrap();
        assert_eq!(stats.completed, 1, "received after {late_ms} ms");
        let r = &sink.records[0];
        assert_eq!(
            r.kv_hold_expired, expires,
            "received after {late_ms} ms: {r:?}"
        );
        assert_eq!(stats.kv_hold_expiries, u64::from(expires));
        assert_eq!(r.transfer_start.is_some(), !expires, "{r:?}");
        assert!(r.first_token.is_some());
    }
}

#[test]
fn heartbeats_keep_a_hold_alive_past_the_lease_while_the_decode_queue_is_long() {
    // One sequence per decode engine and one second a step: a request that
    // reaches its decode rank while another runs there waits far longer
    // than 30 s before its read. Its decode engine holds it all that time,
    // so heartbeats renew the lease and nothing expires; the same run with
    // a fixed 30 s hold does expire, so the renewal is what kept the
    // blocks. The requests come a second apart, so that most reach a rank
    // that is busy (the 24 decode ranks each run one for 100 s).
    let text: String = distinct_requests(60, 100)
        .lines()
        .enumerate()
        .map(|(i, line)| {
            line.replace(
                &format!("\"timestamp\": {i},"),
                &format!("\"timestamp\": {},", i * 1000),
            ) + "\n"
        })
        .collect();
    assert!(text.contains("\"timestamp\": 59000,"));
    let cluster = late_decode_cluster(
        pdsim_core::SimDuration(0),
        pdsim_core::SimDuration::from_secs_f64(1.0),
        Some(1),
    );
    let mut sink = MemorySink::default();
    let stats = run(&cluster, &mut source(&text), 3, true, &mut sink).unwrap();
    assert_eq!(stats.completed, 60);
    assert_eq!(stats.kv_hold_expiries, 0);
    let longest_wait_ns = sink
        .records
        .iter()
        .map(|r| {
            assert!(!r.kv_hold_expired, "{r:?}");
            r.transfer_start.unwrap().since(r.prefill_done.unwrap()).0
        })
        .max()
        .unwrap();
    assert!(
        longest_wait_ns > 30_000_000_000,
        "a read waited only {longest_wait_ns} ns"
    );

    let mut fixed = cluster;
    fixed.kv_lease = pdsim_cluster::KvLease::fixed(fixed.kv_lease.duration);
    let mut sink = MemorySink::default();
    let stats = run(&fixed, &mut source(&text), 3, true, &mut sink).unwrap();
    assert_eq!(stats.completed, 60);
    assert!(stats.kv_hold_expiries > 0);
}

/// A coefficient set with the linear model's terms for a `scope`.
fn linear_set(scope: &str, terms: &[(&str, f64)]) -> String {
    let mut text = "kind: CoefficientSet\nname: fit\ncoefficients:\n".to_string();
    for (name, value) in terms {
        let units = if *name == "linear_step_us" {
            "us_per_step"
        } else {
            "us_per_token"
        };
        text.push_str(&format!(
            "  - {name}:\n      value: {value}\n      units: {units}\n      method: measured\n      fitted: true\n      scope: {scope}\n"
        ));
    }
    text
}

fn linear_cluster(set: &str) -> Result<pdsim_cluster::Cluster, pdsim_cluster::BuildError> {
    let scenario = include_str!("../../../scenarios/real-runs/llama-2-7b-tp1-h100.yaml").replace(
        "  - cost-model-host-overheads\n",
        "  - cost-model-host-overheads\n  - fit\n",
    );
    let files = MemoryFiles::new()
        .with("s.yaml", &scenario)
        .with(
            "d.yaml",
            include_str!("../../../deployments/real-runs/llama-2-7b-tp1.yaml"),
        )
        .with("cat/coefficients/fit.yaml", set);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec!["cat".into()],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    assert!(report.valid, "{:#?}", report.problems);
    build(&report.deployments[0], report.scenario.as_ref().unwrap())
}

#[test]
fn a_set_with_the_linear_terms_selects_the_linear_model_and_a_partial_one_is_refused() {
    let terms = [
        ("linear_step_us", 5000.0),
        ("linear_prefill_token_us", 20.0),
        ("linear_decode_token_us", 30.0),
        ("linear_kv_read_token_us", 0.5),
    ];
    let cluster = linear_cluster(&linear_set("{model: [llama-2-7b]}", &terms)).unwrap();
    assert_eq!(cluster.pools[0].cost_model, "linear");
    // The step is the fitted sum: 5000 + 20·100 + 30·8 + 0.5·4000 µs.
    let batch = pdsim_cost::Batch {
        num_reqs: 9,
        prefill_tokens: 100,
        decode_tokens: 8,
        attn_context_tokens: 4000,
        ..pdsim_cost::Batch::default()
    };
    assert_eq!(
        cluster.pools[0].cost.step(&batch).total.as_ns(),
        (5000.0 + 2000.0 + 240.0 + 2000.0) as u64 * 1000
    );
    // Scoped to another model, the terms do not apply: the roofline prices it.
    let other = linear_cluster(&linear_set("{model: [llama-2-70b]}", &terms)).unwrap();
    assert_eq!(other.pools[0].cost_model, "roofline");
    // Three of the four is neither model: refused, naming the missing term.
    let err = linear_cluster(&linear_set("{}", &terms[..3]))
        .err()
        .expect("refused");
    assert_eq!(err.path, "pools[0]");
    assert!(
        err.message.contains("linear_kv_read_token_us"),
        "{}",
        err.message
    );
}

/// `rows` Mooncake rows as JSON Lines, read into requests.
fn mooncake(rows: &[String]) -> Vec<RequestSpec> {
    let text = rows.join("\n") + "\n";
    MooncakeReader::new(std::io::Cursor::new(text.into_bytes()), "t.jsonl")
        .map(|r| r.unwrap())
        .collect()
}

/// `distinct` prompts of 8,000 tokens (16 blocks of 512 of their own),
/// 500 ms apart, then the same ones again `repeat_ms` after the first: the
/// trace's rows 1..=distinct are first sights, the rest repeats.
fn repeated_prompts(distinct: u64, repeat_ms: u64) -> Vec<String> {
    (0..2)
        .flat_map(|rep| {
            (0..distinct).map(move |i| {
                let hashes: Vec<String> = (0..16).map(|k| (10_000 + i * 100 + k).to_string()).collect();
                format!(
                    "{{\"timestamp\": {}, \"input_length\": 8000, \"output_length\": 4, \"hash_ids\": [{}]}}",
                    rep * repeat_ms + i * 500,
                    hashes.join(", ")
                )
            })
        })
        .collect()
}

#[test]
fn prompts_evicted_from_hbm_load_back_from_the_cpu_tier_before_their_first_token() {
    // Eight Llama-3.1-8B engines with room for about two 8,000-token
    // prompts each, and a host-memory tier: 40 distinct prompts, then the
    // same 40 a minute later. By then HBM has evicted them, so the repeats
    // hit the CPU tier and load their blocks over the host link first.
    let deployment = "kind: Deployment\nname: off\npools:\n  - role: colocated\n    nodes: 1\n    parallel: {tp: 1, pp: 1, dp: 1}\n    engine: {gpu_memory_utilization: 0.15, max_model_len: 16384}\noffload:\n  tiers: [{tier: cpu_dram, bytes: 100000000000}]\n";
    let cluster = cluster_from(SCENARIO, deployment, "unused.yaml", "");
    let rows = repeated_prompts(40, 60_000);
    let mut sink = MemorySink::default();
    let stats = run(
        &cluster,
        &mut mooncake(&rows).into_iter().map(Ok),
        1,
        true,
        &mut sink,
    )
    .expect("runs");
    assert_eq!(stats.completed, 80, "every load ends and its request runs");
    let loaded: Vec<_> = sink
        .records
        .iter()
        .filter(|r| r.offload_tokens > 0)
        .collect();
    assert!(
        loaded.len() >= 30,
        "only {} requests loaded from the tier",
        loaded.len()
    );
    for r in loaded {
        assert!(r.source_line > 40, "a first sight cannot hit: {r:?}");
        let (start, end) = (r.offload_load_start.unwrap(), r.offload_load_end.unwrap());
        assert!(start < end && end <= r.first_token.unwrap(), "{r:?}");
    }
}

#[test]
fn a_transfer_between_tp2_ranks_moves_over_two_gpu_pairs_at_once() {
    // With tensor parallelism 2 on both sides each decode GPU reads its
    // own prefill GPU's share of the blocks, so one request's transfer runs
    // over two GPU pairs' links in parallel: per byte, about half as long
    // as over one pair (TP 1 on both sides). DeepSeek-V3's MLA latent is
    // not split by tensor parallelism, so each GPU of a TP 2 rank holds
    // (and reads) all of it: twice the bytes, in about the same time.
    let at_tp = |tp: u32| {
        let dp = 8 / tp;
        let shape = format!("      tp: {tp}\n      pp: 1\n      dp: {dp}\n      dp_local: {dp}\n");
        let deployment = P1D3.replace(
            "      tp: 1\n      pp: 1\n      dp: 8\n      dp_local: 8\n",
            &shape,
        );
        let cluster = pd_cluster_from(&deployment, "pd/epp-always-pd.yaml", ALWAYS);
        let mut sink = MemorySink::default();
        run(&cluster, &mut trace(1), 3, true, &mut sink).unwrap();
        let r = &sink.records[0];
        (
            r.transfer_bytes,
            r.transfer_end
                .unwrap()
                .since(r.transfer_start.unwrap())
                .as_ns() as f64,
        )
    };
    let (bytes1, one_pair) = at_tp(1);
    let (bytes2, two_pairs) = at_tp(2);
    assert_eq!(bytes2, 2 * bytes1, "each GPU of the rank holds the latent");
    let per_byte = |ns: f64, bytes: u64| ns / bytes as f64;
    assert!(
        per_byte(two_pairs, bytes2) < 0.75 * per_byte(one_pair, bytes1),
        "{two_pairs} ns for {bytes2} bytes over two pairs against {one_pair} ns for {bytes1} over one"
    );
}

/// Counts the records written when each link window reaches the sink.
#[derive(Default)]
struct WindowTimes {
    records: usize,
    windows_at: Vec<usize>,
}

impl pdsim_cluster::RecordSink for WindowTimes {
    fn record(&mut self, _r: &pdsim_cluster::RequestRecord) {
        self.records += 1;
    }
    fn emission(&mut self, _gap_ns: u64, _tokens: u32) {}
    fn link_window(&mut self, _window: pdsim_cluster::LinkWindow) {
        self.windows_at.push(self.records);
    }
}

#[test]
fn link_windows_reach_the_sink_as_they_close_not_at_the_end() {
    // A window's bytes are final once its second is over, and a long run
    // has millions of them: they are handed on as they close, so memory
    // does not grow with the run.
    let cluster = pd_cluster();
    let mut sink = WindowTimes::default();
    run(&cluster, &mut trace(300), 3, true, &mut sink).unwrap();
    assert_eq!(sink.records, 300);
    let first = *sink.windows_at.first().expect("transfers fill windows");
    assert!(first < 300, "the first window came after every record");
}

#[test]
fn lmcaches_copies_lengthen_the_steps_that_make_them_by_their_bytes_over_the_tier() {
    // One 512-token prompt, then the same prompt a minute later on the
    // default deployment with LMCache (256-token chunks). The first prefill
    // stores both chunks after its forward pass; the repeat hits 496
    // tokens in HBM (31 blocks) and LMCache's whole 512, so it loads from
    // the chunk holding the HBM edge (256 tokens) and computes one token.
    let deployment = format!(
        "{DEPLOYMENT}offload:\n  tiers: [{{tier: cpu_dram, bytes: 1000000000}}]\n  connector: LMCacheConnectorV1\n"
    );
    // A host link of 1 GB/s, below the tier's 20 GB/s, bounds the copies
    // through host memory; RDS's direct copies (`direct`) go at the tier's.
    for direct in [false, true] {
        let report = bundle(&deployment);
        let mut cluster = build(&report.deployments[0], report.scenario.as_ref().unwrap()).unwrap();
        let runtime = cluster.offload.as_mut().expect("the tier");
        runtime.host_link_bytes_per_s = 1e9;
        runtime.direct = direct;
        let rows = "{\"timestamp\": 0, \"input_length\": 512, \"output_length\": 2, \"hash_ids\": [1]}\n\
                {\"timestamp\": 60000, \"input_length\": 512, \"output_length\": 2, \"hash_ids\": [1]}\n";
        let mut source = MooncakeReader::new(std::io::Cursor::new(rows.as_bytes()), "two.jsonl");
        let stats = run(&cluster, &mut source, 0, true, &mut MemorySink::default()).unwrap();
        assert_eq!(stats.completed, 2);
        let tier = cluster.offload.as_ref().expect("the tier");
        let pool = &cluster.pools[0];
        let per_token = pool.kv_bytes_per_token_gpu;
        let ns = |tokens: f64, device: f64| {
            let rate = if direct { device } else { device.min(1e9) };
            tier.base_latency.as_ns() as f64 + (tokens * per_token / rate * 1e9).round()
        };
        let expected = ns(512.0, tier.write_bytes_per_s) + ns(256.0, tier.read_bytes_per_s);
        let io: u64 = stats.cores.iter().map(|c| c.lmcache_io_ns).sum();
        assert!(
            (io as f64 - expected).abs() <= 2.0,
            "{io} ns against {expected}"
        );
        let bytes =
            |f: fn(&pdsim_cluster::CoreStats) -> f64| stats.cores.iter().map(f).sum::<f64>();
        let world = pool.world as f64;
        assert_eq!(bytes(|c| c.lmcache_stored_bytes), 512.0 * per_token * world);
        assert_eq!(bytes(|c| c.lmcache_loaded_bytes), 256.0 * per_token * world);
        let stores: u64 = stats.cores.iter().map(|c| c.lmcache_stores).sum();
        let hits: u64 = stats.cores.iter().map(|c| c.external_hits_tokens).sum();
        assert_eq!((stores, hits), (2, 15));
    }
}

/// The API servers in front of a pod's data-parallel ranks score them as
/// the scenario's release does (`crate::dp_lb`): `4 · waiting + running` up
/// to 0.15.1, in-flight requests and KV pressure from 0.29.0.
#[test]
fn data_parallel_balancing_follows_the_release() {
    use pdsim_cluster::dp_lb::DpLbRule;
    for (version, rule) in [
        ("0.15.1", DpLbRule::WaitingTimesFourPlusRunning),
        ("0.29.0", DpLbRule::InflightAndKvPressure),
        ("0.31.0", DpLbRule::InflightAndKvPressure),
    ] {
        let scenario = SCENARIO.replace(
            "engine_version: \"0.31.0\"",
            &format!("engine_version: \"{version}\""),
        );
        let report = bundle_on(&scenario, DEPLOYMENT);
        let cluster = build(&report.deployments[0], report.scenario.as_ref().unwrap())
            .unwrap_or_else(|e| panic!("{version}: {e}"));
        assert_eq!(cluster.dp_lb, rule, "{version}");
    }
}

/// A deployment's text without its router block, whose files the tests
/// that use it do not load: the EPP's built-in configuration routes, which
/// changes no engine.
fn without_router(deployment: &str) -> String {
    deployment.split("\nrouter:").next().unwrap().to_string() + "\n"
}

/// The second seed's RDS configuration: under vllm-rbln, LMCache on an NVMe
/// tier is lmcache-rbln's RDS backend, which keeps at most the rules pack's
/// `rds_max_chunks` (1000) chunks an engine however large the drive, and
/// moves them between device and drive directly (no host link). The same
/// tier under upstream vLLM (LMCache's local disk backend) is refused.
#[test]
fn lmcache_on_nvme_is_lmcache_rblns_rds() {
    let scenario = include_str!("../../../scenarios/rebel100-minimax.yaml");
    let deployment = include_str!("../../../deployments/rebel100-4p4d-rds.yaml");
    let without_router = without_router(deployment);
    let report = bundle_on(scenario, &without_router);
    assert!(report.valid, "{:?}", report.problems);
    let cluster = build(&report.deployments[0], report.scenario.as_ref().unwrap()).expect("runs");
    let prefill = &cluster.pools[0];
    let lm = prefill.engine.lmcache.expect("LMCache on prefill");
    assert_eq!((lm.chunk_tokens, lm.capacity_chunks), (4096, 1000));
    assert!(cluster.offload.as_ref().unwrap().direct);
    // The seed's CPU tier is no RDS: through the host link, its chunks by
    // its bytes.
    let cpu = without_router
        .replace("tier: nvme_gen4", "tier: cpu_dram")
        .replace("bytes: 3840000000000", "bytes: 274877906944");
    let report = bundle_on(scenario, &cpu);
    let cluster = build(&report.deployments[0], report.scenario.as_ref().unwrap()).expect("runs");
    assert!(!cluster.offload.as_ref().unwrap().direct);
    assert_ne!(
        cluster.pools[0].engine.lmcache.unwrap().capacity_chunks,
        1000
    );
    // Upstream vLLM has no RDS backend.
    let upstream = scenario.replace(
        "engine_version: \"vllm-rbln-0.12.0\"",
        "engine_version: \"0.31.0\"",
    );
    assert_ne!(upstream, scenario);
    let report = bundle_on(&upstream, &without_router);
    if let Some(s) = report
        .scenario
        .as_ref()
        .filter(|_| !report.deployments.is_empty())
    {
        let err = build(&report.deployments[0], s).err().expect("refused");
        assert_eq!(err.path, "offload.tiers[0].tier");
    } else {
        panic!(
            "the upstream bundle did not validate: {:?}",
            report.problems
        );
    }
}

/// The repeat-a-minute-later workload of the CPU-tier test above, through
/// a host-memory tier too small for it (2 GB an engine: under two
/// prompts), alone and with an NVMe filesystem tier behind it
/// (`TieringOffloadingSpec`). With the NVMe tier the prompts host memory
/// lost are found on the drive, promoted into host memory and loaded from
/// there: more requests load from the tiers, and those whose chunks came
/// from the drive start loading only after the drive's read.
#[test]
fn prompts_host_memory_lost_are_promoted_from_the_nvme_tier() {
    let scenario = SCENARIO.replace("    - cpu_dram\n", "    - cpu_dram\n    - nvme_gen4\n");
    assert_ne!(scenario, SCENARIO);
    let base = "kind: Deployment\nname: off\npools:\n  - role: colocated\n    nodes: 1\n    parallel: {tp: 1, pp: 1, dp: 1}\n    engine: {gpu_memory_utilization: 0.15, max_model_len: 8192}\noffload:\n";
    let host_only = format!("{base}  tiers: [{{tier: cpu_dram, bytes: 2000000000}}]\n");
    let tiered = format!(
        "{base}  spec: TieringOffloadingSpec\n  tiers: [{{tier: cpu_dram, bytes: 2000000000}}, {{tier: nvme_gen4, bytes: 1000000000000}}]\n"
    );
    let rows = repeated_prompts(40, 60_000);
    let go = |deployment: &str| {
        let cluster = cluster_from(&scenario, deployment, "unused.yaml", "");
        let mut sink = MemorySink::default();
        let stats = run(
            &cluster,
            &mut mooncake(&rows).into_iter().map(Ok),
            1,
            true,
            &mut sink,
        )
        .expect("runs");
        assert_eq!(stats.completed, 80);
        (stats, sink.records)
    };
    let (host_stats, host) = go(&host_only);
    let (tier_stats, tiered) = go(&tiered);
    let loaded = |records: &[pdsim_cluster::RequestRecord]| {
        records.iter().map(|r| r.offload_tokens as u64).sum::<u64>()
    };
    let promoted: u64 = tier_stats
        .cores
        .iter()
        .map(|c| c.tier_promoted_chunks)
        .sum();
    let written: u64 = tier_stats.cores.iter().map(|c| c.tier_written_chunks).sum();
    assert!(host_stats.cores.iter().all(|c| c.tier_written_chunks == 0));
    // Every prompt's 500 chunks reach the drive.
    assert_eq!(
        written,
        40 * 500,
        "each first sight's chunks are written once"
    );
    assert!(promoted >= 20 * 500, "only {promoted} chunks promoted");
    assert!(
        loaded(&tiered) >= loaded(&host) + promoted * 16 / 2,
        "tiered {} vs host-only {} tokens loaded",
        loaded(&tiered),
        loaded(&host)
    );
    // A whole prompt (500 chunks of 2 MiB) read at 7 GB/s takes about
    // 150 ms; a load from host memory alone starts at once.
    let waited = |r: &pdsim_cluster::RequestRecord| {
        r.offload_load_start.unwrap().since(r.arrival).as_ns() as f64 * 1e-9
    };
    let slow = tiered
        .iter()
        .filter(|r| r.offload_tokens >= 7000)
        .filter(|r| waited(r) >= 0.15)
        .count();
    assert!(slow >= 10, "only {slow} loads waited for the drive");
    for r in host.iter().filter(|r| r.offload_tokens > 0) {
        assert!(waited(r) < 0.05, "{r:?}");
    }
}

/// What TieringOffloadingSpec cannot be given is refused by key.
#[test]
fn tiering_refuses_what_vllm_has_no_tier_for() {
    let scenario = SCENARIO.replace(
        "    - cpu_dram\n",
        "    - cpu_dram\n    - nvme_gen4\n    - s3\n",
    );
    for (offload, path, says) in [
        (
            "  tiers: [{tier: cpu_dram, bytes: 1000000000}, {tier: nvme_gen4, bytes: 1000000000}]\n",
            "offload.tiers",
            "TieringOffloadingSpec",
        ),
        (
            "  spec: TieringOffloadingSpec\n  tiers: [{tier: cpu_dram, bytes: 1000000000}, {tier: s3, bytes: 1000000000}]\n",
            "offload.tiers[1].tier",
            "`obj`",
        ),
        (
            "  spec: TieringOffloadingSpec\n  tiers: [{tier: nvme_gen4, bytes: 1000000000}]\n",
            "offload.tiers[0].tier",
            "host memory",
        ),
    ] {
        let report = bundle_on(&scenario, &format!("{DEPLOYMENT}offload:\n{offload}"));
        assert!(report.valid, "{offload}: {:#?}", report.problems);
        let err = build(&report.deployments[0], report.scenario.as_ref().unwrap())
            .err()
            .expect("refused");
        assert_eq!(err.path, path, "{offload}");
        assert!(err.message.contains(says), "{offload}: {}", err.message);
    }
    // 0.29.0's filesystem tier looks keys up differently: refused.
    let ok = "  spec: TieringOffloadingSpec\n  tiers: [{tier: cpu_dram, bytes: 17179869184}, {tier: nvme_gen4, bytes: 1000000000}]\n";
    let older = scenario.replace("engine_version: \"0.31.0\"", "engine_version: \"0.29.0\"");
    assert_ne!(older, scenario);
    let report = bundle_on(&older, &format!("{DEPLOYMENT}offload:\n{ok}"));
    let err = build(&report.deployments[0], report.scenario.as_ref().unwrap())
        .err()
        .expect("refused");
    assert_eq!(err.path, "offload.spec");
    assert!(err.message.contains("probe generations"), "{}", err.message);
    // A primary tier smaller than a max_model_len prompt would never let
    // such a prompt's promotions complete: refused, saying how much would.
    let small = "  spec: TieringOffloadingSpec\n  tiers: [{tier: cpu_dram, bytes: 1000000000}, {tier: nvme_gen4, bytes: 1000000000}]\n";
    let report = bundle_on(&scenario, &format!("{DEPLOYMENT}offload:\n{small}"));
    let err = build(&report.deployments[0], report.scenario.as_ref().unwrap())
        .err()
        .expect("refused");
    assert_eq!(err.path, "offload.tiers[0].bytes");
    // max_model_len 131,072 tokens: 8,192 chunks of 16 tokens × 128 KiB.
    assert!(
        err.message.contains("476 chunks") && err.message.contains("8192"),
        "{}",
        err.message
    );
    assert!(err.message.contains("17179869184 bytes"), "{}", err.message);
    let report = bundle_on(&scenario, &format!("{DEPLOYMENT}offload:\n{ok}"));
    let cluster = build(&report.deployments[0], report.scenario.as_ref().unwrap()).expect("runs");
    // 1 GB an engine in chunks of 16 tokens × 128 KiB.
    assert_eq!(
        cluster.pools[0].engine.offload_secondary,
        vec![1_000_000_000 / (16 * 131_072)]
    );
}

/// The router's prefix scorer sizes each endpoint's index from the
/// engine's HBM blocks, so it cannot know what an offload tier holds: on
/// 120 prompts repeated after HBM has lost them (about five fit an
/// engine's HBM, fifteen went to each), the engines find in LMCache half as
/// much again as the router believed they held, and every routed record
/// says what the router believed.
#[test]
fn the_router_undercounts_what_lmcache_holds() {
    let deployment = "kind: Deployment\nname: off\npools:\n  - role: colocated\n    nodes: 1\n    parallel: {tp: 1, pp: 1, dp: 1}\n    engine: {gpu_memory_utilization: 0.15, max_model_len: 16384}\noffload:\n  connector: LMCacheConnectorV1\n  tiers: [{tier: cpu_dram, bytes: 100000000000}]\n";
    let cluster = cluster_from(SCENARIO, deployment, "unused.yaml", "");
    let rows = repeated_prompts(120, 120_000);
    let mut sink = MemorySink::default();
    run(
        &cluster,
        &mut mooncake(&rows).into_iter().map(Ok),
        1,
        true,
        &mut sink,
    )
    .expect("runs");
    assert_eq!(sink.records.len(), 240);
    assert!(
        sink.records
            .iter()
            .all(|r| r.router_cached_tokens.is_some())
    );
    let repeats: Vec<_> = sink
        .records
        .iter()
        .filter(|r| r.source_line > 120)
        .collect();
    let predicted: u64 = repeats
        .iter()
        .map(|r| r.router_cached_tokens.unwrap() as u64)
        .sum();
    let lmcache: u64 = repeats.iter().map(|r| r.lmcache_tokens as u64).sum();
    let found: u64 = repeats
        .iter()
        .map(|r| (r.cached_tokens + r.lmcache_tokens) as u64)
        .sum();
    assert!(lmcache > 0, "LMCache found nothing");
    assert!(
        2 * found >= 3 * predicted,
        "found {found} tokens against the router's {predicted}"
    );
    // A first sight is new to both.
    for r in sink.records.iter().filter(|r| r.source_line <= 120) {
        assert_eq!(r.lmcache_tokens, 0, "{r:?}");
    }
}

/// vllm-rbln's step phases reach every engine of a Rebel100 layout (and no
/// upstream vLLM one), and a P/D run under them keeps every invariant at
/// every step (`check`) and ends every request.
#[test]
fn rebel100_engines_run_a_prefill_alone_and_every_request_ends() {
    let scenario = include_str!("../../../scenarios/rebel100-minimax.yaml");
    let deployment = include_str!("../../../deployments/rebel100-4p4d.yaml");
    let without_router = without_router(deployment);
    let report = bundle_on(scenario, &without_router);
    assert!(report.valid, "{:?}", report.problems);
    let cluster = build(&report.deployments[0], report.scenario.as_ref().unwrap()).expect("runs");
    assert!(cluster.pools.len() >= 2);
    assert!(cluster.pools.iter().all(|p| p.engine.lone_prefill_steps));
    let mut sink = MemorySink::default();
    let stats = run(&cluster, &mut trace(200), 3, true, &mut sink).expect("runs");
    assert_eq!(stats.completed, 200);
    assert!(sink.records.iter().all(|r| r.outcome == Outcome::Completed));
    // Upstream vLLM mixes prefills and decodes.
    let upstream = bundle(DEPLOYMENT);
    let cluster = build(
        &upstream.deployments[0],
        upstream.scenario.as_ref().unwrap(),
    )
    .expect("the default deployment builds");
    assert!(cluster.pools.iter().all(|p| !p.engine.lone_prefill_steps));
}
