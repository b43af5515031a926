//! Topology-aware P/D routing end to end: the topology extractor reads the
//! pools' pod labels (`kubernetes.io/hostname`, `topology.kubernetes.io/*`),
//! the disagg handler publishes the decode pick, and the prefill profile's
//! `topology-affinity-filter` keeps the prefill pods that share its rack
//! (llm-d-router `deploy/config/pd-topology-epp-config.yaml`, with the
//! filter's `minAffinity` at `rack`).

mod common;

use common::build;
use pdsim_cluster::{MemorySink, Outcome, run};
use pdsim_workload::{MooncakeReader, RequestSpec};

const SCENARIO: &str = include_str!("../../../scenarios/default.yaml");
const TRACE: &str = include_str!("../../../traces/default.jsonl");

/// Two prefill pools, in racks r1 and r2, and a decode pool in rack r1.
const DEPLOYMENT: &str = "kind: Deployment\nname: topo\npools:\n  - role: prefill\n    nodes: 1\n    parallel: {tp: 1, pp: 1, dp: 1}\n    labels: {topology.kubernetes.io/rack: r1, topology.kubernetes.io/zone: z1}\n  - role: prefill\n    nodes: 1\n    parallel: {tp: 1, pp: 1, dp: 1}\n    labels: {topology.kubernetes.io/rack: r2, topology.kubernetes.io/zone: z1}\n  - role: decode\n    nodes: 1\n    parallel: {tp: 1, pp: 1, dp: 1}\n    labels: {topology.kubernetes.io/rack: r1, topology.kubernetes.io/zone: z1}\npd_transfer:\n  connector: NixlConnector\nrouter:\n  endpoint_picker_config: epp.yaml\n  epp_flags: [\"--allow-experimental-plugins\"]\n";

const EPP: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- type: prefill-filter\n- type: decode-filter\n- type: max-score-picker\n- type: topology-extractor\n- type: topology-affinity-filter\n  parameters: {minAffinity: MIN}\n- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters:\n    deciders: {prefill: always-disagg-pd-decider}\nschedulingProfiles:\n- name: prefill\n  plugins:\n  - pluginRef: prefill-filter\n  - pluginRef: topology-affinity-filter\n  - pluginRef: max-score-picker\n  - pluginRef: queue-scorer\n- name: decode\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: max-score-picker\n  - pluginRef: queue-scorer\n";

/// How many requests each prefill pool prefilled, over 200 requests.
fn prefills(min_affinity: &str) -> [u32; 2] {
    let scenario = SCENARIO.replace("  nodes: 1\n", "  fabric: ib-400g\n  nodes: 3\n");
    assert_ne!(scenario, SCENARIO);
    let epp = EPP.replace("MIN", min_affinity);
    let cluster = build(&scenario, DEPLOYMENT, &[("epp.yaml", &epp)]).expect("builds");
    let specs: Vec<RequestSpec> =
        MooncakeReader::new(std::io::Cursor::new(TRACE.as_bytes()), "default.jsonl")
            .take(200)
            .map(|r| r.unwrap())
            .collect();
    let mut sink = MemorySink::default();
    run(&cluster, &mut specs.into_iter().map(Ok), 1, true, &mut sink).expect("runs");
    let mut by_pool = [0u32; 2];
    for r in &sink.records {
        assert_eq!(r.outcome, Outcome::Completed);
        assert_eq!(r.pool, 2, "decode pods serve every request");
        let (pool, _, _) = r.prefill.expect("always disaggregated");
        by_pool[usize::from(pool)] += 1;
    }
    by_pool
}

#[test]
fn the_prefill_pick_stays_in_the_decode_pods_rack() {
    // `rack`: only the r1 prefill pool qualifies.
    assert_eq!(prefills("rack"), [200, 0]);
    // `zone`: both prefill pools share z1 with the decode pods, and the
    // queue scorer spreads the requests between them.
    let zone = prefills("zone");
    assert!(zone[0] > 0 && zone[1] > 0, "{zone:?}");
    // `host`: no pod has a hostname label, so none qualifies and the
    // filter fails open, as `zone` does.
    assert_eq!(prefills("host"), zone);
}
