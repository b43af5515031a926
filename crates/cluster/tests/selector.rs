//! The EPP's endpoints are the pods its pool selects: the InferencePool
//! that `--pool-name` names (`spec.selector.matchLabels`), or the labels of
//! `--endpoint-selector` for a standalone EPP. Pods outside it never get a
//! request. With no endpoint the EPP answers 503 (pdsim: rejected,
//! `no-endpoints`); under P/D a pool without decode pods fails every
//! request ("failed to find available decode workers",
//! `disagg_profile_handler.go` `ProcessResults`) and one without prefill
//! pods serves every request whole on a decode pod (the prefill profile
//! finds no endpoint, so no prefill header is set).

mod common;

use common::build;
use pdsim_cluster::{Cluster, MemorySink, Outcome, RequestRecord, RunStats, run};
use pdsim_workload::{MooncakeReader, RequestSpec};

const SCENARIO: &str = include_str!("../../../scenarios/default.yaml");
const DEPLOYMENT: &str = include_str!("../../../deployments/default.yaml");
const H200: &str = include_str!("../../../scenarios/4x8-h200.yaml");
const P1D3: &str = include_str!("../../../deployments/1p3d-ep8.yaml");
const ALWAYS: &str = include_str!("../../../deployments/pd/epp-always-pd.yaml");
const TRACE: &str = include_str!("../../../traces/default.jsonl");

/// The colocated default with a router block carrying these EPP flags.
fn colocated(flags: &[&str], manifests: Option<&str>) -> Result<Cluster, String> {
    let mut deployment = format!(
        "{DEPLOYMENT}router:\n  epp_flags: [{}]\n",
        flags
            .iter()
            .map(|f| format!("\"{f}\""))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut extra = Vec::new();
    if let Some(text) = manifests {
        deployment.push_str("  manifests: [pool.yaml]\n");
        extra.push(("pool.yaml", text));
    }
    build(SCENARIO, &deployment, &extra)
}

/// 1P3D with always-disaggregate and the given flag instead of its
/// `--pool-name`.
fn pd(flag: &str) -> Cluster {
    assert!(P1D3.contains("--pool-name=deepseek-v3"));
    let deployment = P1D3.replace("--pool-name=deepseek-v3", flag);
    build(H200, &deployment, &[("pd/epp-always-pd.yaml", ALWAYS)]).expect("builds")
}

fn replay(cluster: &Cluster, n: usize) -> (RunStats, Vec<RequestRecord>) {
    let specs: Vec<RequestSpec> =
        MooncakeReader::new(std::io::Cursor::new(TRACE.as_bytes()), "default.jsonl")
            .take(n)
            .map(|r| r.unwrap())
            .collect();
    let mut sink = MemorySink::default();
    let stats = run(cluster, &mut specs.into_iter().map(Ok), 3, true, &mut sink).expect("runs");
    (stats, sink.records)
}

const POOL: &str = "apiVersion: inference.networking.k8s.io/v1\nkind: InferencePool\nmetadata:\n  name: mine\nspec:\n  selector:\n    matchLabels:\n      llm-d.ai/role: ROLE\n  targetPorts:\n  - number: 8000\n";

#[test]
fn a_selector_that_matches_no_pod_leaves_no_endpoint_and_every_request_is_refused() {
    for cluster in [
        colocated(
            &[
                "--endpoint-selector=llm-d.ai/role=encode",
                "--endpoint-target-ports=8000",
            ],
            None,
        )
        .unwrap(),
        colocated(&["--pool-name=mine"], Some(&POOL.replace("ROLE", "encode"))).unwrap(),
    ] {
        let (stats, records) = replay(&cluster, 50);
        assert_eq!((stats.rejected, stats.completed), (50, 0));
        assert!(
            records
                .iter()
                .all(|r| r.outcome == Outcome::Rejected && r.reason == "no-endpoints")
        );
        assert!(stats.cores.iter().all(|c| c.steps == 0), "no engine worked");
    }
}

#[test]
fn the_pool_the_flags_name_selects_the_endpoints() {
    // The default's pods carry `llm-d.ai/role: prefill-decode`.
    for cluster in [
        colocated(
            &[
                "--endpoint-selector=llm-d.ai/role=prefill-decode",
                "--endpoint-target-ports=8000",
            ],
            None,
        )
        .unwrap(),
        colocated(
            &["--pool-name=mine"],
            Some(&POOL.replace("ROLE", "prefill-decode")),
        )
        .unwrap(),
        colocated(&[], None).unwrap(),
    ] {
        let (stats, _) = replay(&cluster, 50);
        assert_eq!(stats.completed, 50);
    }
    // A pool name the manifests do not define is refused at startup.
    let Err(e) = colocated(
        &["--pool-name=other"],
        Some(&POOL.replace("ROLE", "prefill-decode")),
    ) else {
        panic!("a pool name the manifests lack was accepted");
    };
    assert!(e.contains("epp-pool-missing") && e.contains("mine"), "{e}");
}

#[test]
fn under_pd_a_pool_of_decode_pods_serves_whole_and_one_of_prefill_pods_fails() {
    let (stats, records) = replay(
        &pd("--endpoint-selector=llm-d.ai/role=decode\n    - --endpoint-target-ports=8000"),
        40,
    );
    assert_eq!(stats.completed, 40);
    assert!(
        records.iter().all(|r| r.prefill.is_none()),
        "nothing disaggregated"
    );
    let prefill_pool_steps: u64 = stats
        .cores
        .iter()
        .filter(|c| c.pool == 0)
        .map(|c| c.steps)
        .sum();
    assert_eq!(
        prefill_pool_steps, 0,
        "the prefill pods outside the pool got nothing"
    );
    let (stats, records) = replay(
        &pd("--endpoint-selector=llm-d.ai/role=prefill\n    - --endpoint-target-ports=8000"),
        40,
    );
    assert_eq!((stats.rejected, stats.completed), (40, 0));
    assert!(records.iter().all(|r| r.reason == "no-endpoints"));
    // Both roles: disaggregated as before.
    let (stats, records) = replay(&pd("--pool-name=deepseek-v3"), 40);
    assert_eq!(stats.completed, 40);
    assert!(records.iter().all(|r| r.prefill.is_some()));
}

/// Colocated pods under a P/D profile handler: `prefill-filter` and
/// `decode-filter` both keep `llm-d.ai/role: prefill-decode` (llm-d-router
/// `filter/bylabel/README.md`), so always-disaggregate splits requests
/// between the default's eight pods and their KV moves over the node's
/// links, unless both profiles land on the same pod, which serves the
/// request whole. Without a `pd_transfer` connector the pods could not move
/// KV, and the run is refused rather than simulated some other way.
#[test]
fn colocated_pods_under_a_pd_handler_split_requests_between_them() {
    let router = "router:\n  endpoint_picker_config: pd/epp-always-pd.yaml\n";
    let with_connector = format!("{DEPLOYMENT}pd_transfer:\n  connector: NixlConnector\n{router}");
    let cluster = build(
        SCENARIO,
        &with_connector,
        &[("pd/epp-always-pd.yaml", ALWAYS)],
    )
    .expect("builds");
    let (stats, records) = replay(&cluster, 60);
    assert_eq!(stats.completed, 60);
    let split: Vec<&RequestRecord> = records.iter().filter(|r| r.prefill.is_some()).collect();
    assert!(!split.is_empty(), "some requests were disaggregated");
    for r in &split {
        let (pool, pod, _) = r.prefill.unwrap();
        assert_eq!(pool, r.pool, "one pool holds both sides");
        assert_ne!(pod, r.pod, "prefill and decode on different pods");
        assert!(
            r.transfer_bytes > 0 && r.transfer_end.is_some(),
            "its KV moved"
        );
    }
    for r in records.iter().filter(|r| r.prefill.is_none()) {
        assert_eq!(r.transfer_bytes, 0, "a request served whole moves no KV");
    }
    let Err(e) = build(
        SCENARIO,
        &format!("{DEPLOYMENT}{router}"),
        &[("pd/epp-always-pd.yaml", ALWAYS)],
    ) else {
        panic!("a colocated split without a connector was accepted");
    };
    assert!(
        e.contains("disagg-profile-handler") && e.contains("pd_transfer"),
        "{e}"
    );
}

/// Colocated DeepSeek-V3 pods of 8 data-parallel ranks, each its own API
/// server (`data_parallel_load_balancing: external`), behind a standalone
/// EPP sending to these ports of it.
fn external_ranks(ports: &str) -> Result<Cluster, String> {
    let deployment = format!(
        "kind: Deployment\nname: ext\npools:\n  - role: colocated\n    nodes: 4\n    parallel: {{tp: 1, pp: 1, dp: 8, dp_local: 8, enable_expert_parallel: true, data_parallel_load_balancing: external}}\nrouter:\n  epp_flags: [\"--endpoint-selector=llm-d.ai/role=prefill-decode\", \"--endpoint-target-ports={ports}\"]\n"
    );
    build(H200, &deployment, &[])
}

/// The EPP makes one endpoint of each target port of a pod, the i-th port
/// reaching its i-th API server (`pkg/epp/datastore/datastore.go`,
/// `<pod>-rank-<i>`): with one port only the first rank gets requests, with
/// eight every rank does, and a port past the pod's API servers (two ports
/// where the pod balances its ranks behind one) is refused, since nothing
/// listens there.
#[test]
fn target_ports_decide_the_endpoints_of_each_pod() {
    let ranks_used = |cluster: &Cluster| {
        let (stats, records) = replay(cluster, 200);
        assert_eq!(stats.completed, 200);
        let mut ranks: Vec<u16> = records.iter().map(|r| r.rank).collect();
        ranks.sort();
        ranks.dedup();
        ranks
    };
    assert_eq!(ranks_used(&external_ranks("8000").unwrap()), vec![0]);
    assert_eq!(
        ranks_used(&external_ranks("8000,8001,8002,8003,8004,8005,8006,8007").unwrap()),
        (0..8).collect::<Vec<u16>>()
    );
    // Repeated ports are one port (`removeDuplicatePorts`).
    assert_eq!(ranks_used(&external_ranks("8000,8000").unwrap()), vec![0]);
    let Err(e) = colocated(
        &[
            "--endpoint-selector=llm-d.ai/role=prefill-decode",
            "--endpoint-target-ports=8000,8001",
        ],
        None,
    ) else {
        panic!("two ports on a pod of one API server were accepted");
    };
    assert!(e.contains("nothing listens"), "{e}");
    // A standalone EPP must be given its ports, as `Options.Validate` says.
    let Err(e) = colocated(&["--endpoint-selector=llm-d.ai/role=prefill-decode"], None) else {
        panic!("an endpoint selector without target ports was accepted");
    };
    assert!(e.contains("--endpoint-target-ports"), "{e}");
}

/// Colocated DeepSeek-V3 pods of 16 data-parallel ranks over two nodes in
/// the given load-balancing mode, behind a standalone EPP sending to these
/// ports of each pod.
fn dp_mode(mode: &str, ports: &str) -> Cluster {
    let deployment = format!(
        "kind: Deployment\nname: dp\npools:\n  - role: colocated\n    nodes: 4\n    parallel: {{tp: 1, pp: 1, dp: 16, dp_local: 8, enable_expert_parallel: true, data_parallel_load_balancing: {mode}}}\nrouter:\n  epp_flags: [\"--endpoint-selector=llm-d.ai/role=prefill-decode\", \"--endpoint-target-ports={ports}\"]\n"
    );
    build(H200, &deployment, &[]).unwrap_or_else(|e| panic!("{mode}: {e}"))
}

/// What the router chooses between in each of vLLM's data-parallel
/// load-balancing modes (`vllm/entrypoints/cli/serve.py`): `internal`
/// puts all of a pod's ranks behind its one port (API servers balance
/// them all), `hybrid` one port per node (each node's API servers balance
/// that node's ranks), `external` one port per rank (the router chooses
/// the rank). With only the first port targeted, the router reaches all
/// 16 ranks of a pod, the first node's 8, or rank 0; with every port, all
/// 16 (the EPP takes at most 8 target ports, so under `external` the first
/// 8 ranks).
#[test]
fn each_load_balancing_mode_exposes_its_ranks_as_vllm_does() {
    let ranks_used = |cluster: &Cluster| {
        let (stats, records) = replay(cluster, 400);
        assert_eq!(stats.completed, 400);
        let mut ranks: Vec<u16> = records.iter().map(|r| r.rank).collect();
        ranks.sort();
        ranks.dedup();
        ranks
    };
    let all: Vec<u16> = (0..16).collect();
    let eight: Vec<u16> = (0..8).collect();
    let eight_ports = (8000..8008)
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(",");
    for (mode, first_port, every_port, every) in [
        ("internal", &all, "8000", &all),
        ("hybrid", &eight, "8000,8001", &all),
        ("external", &vec![0], eight_ports.as_str(), &eight),
    ] {
        assert_eq!(
            &ranks_used(&dp_mode(mode, "8000")),
            first_port,
            "{mode}, first port"
        );
        assert_eq!(
            &ranks_used(&dp_mode(mode, every_port)),
            every,
            "{mode}, every port"
        );
    }
}

/// The EPP reads each pod's metrics through its extractor's mapping for
/// the pod's engine type: a mapping that reads other series than the
/// vLLM ones pdsim's engines export is refused at build, naming it.
#[test]
fn a_metrics_mapping_reading_other_series_than_vllms_is_refused() {
    let epp = |params: &str| {
        format!(
            "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- type: core-metrics-extractor\n  parameters: {params}\n"
        )
    };
    let deployment = format!("{DEPLOYMENT}router:\n  endpoint_picker_config: epp.yaml\n");
    let build_with = |params: &str| build(SCENARIO, &deployment, &[("epp.yaml", &epp(params))]);
    assert!(build_with("{}").is_ok());
    assert!(build_with("{defaultEngine: vllm, engineLabelKey: my/engine}").is_ok());
    let e = build_with("{defaultEngine: sglang}").err().unwrap();
    assert!(e.contains("sglang:num_queue_reqs"), "{e}");
    let e = build_with("{engineConfigs: [{name: vllm, queuedRequestsSpec: 'vllm:num_requests_waiting{engine=0}', runningRequestsSpec: 'vllm:num_requests_running', kvUsageSpec: 'vllm:kv_cache_usage_perc', cacheInfoSpec: 'vllm:cache_config_info'}]}")
        .err()
        .unwrap();
    assert!(e.contains("queuedRequestsSpec"), "{e}");
}
