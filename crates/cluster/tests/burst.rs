//! The burst-prefix-cache-producer end to end (llm-d-router
//! `deploy/config/epp-burst-prefix-cache-config.yaml`): requests arriving
//! within one window wait for it to seal, then the samples of one prompt
//! go to one replica, so the prompt is prefilled once.

mod common;

use common::build;
use pdsim_cluster::{MemorySink, Outcome, RequestRecord, run};
use pdsim_core::{Prompt, Segment, SimTime};
use pdsim_workload::RequestSpec;
use std::collections::BTreeSet;

const SCENARIO: &str = include_str!("../../../scenarios/default.yaml");
const DEPLOYMENT: &str = "kind: Deployment\nname: burst\npools:\n  - role: colocated\n    nodes: 1\n    parallel: {tp: 1, pp: 1, dp: 1}\nrouter:\n  endpoint_picker_config: epp.yaml\n  epp_flags: [\"--allow-experimental-plugins\"]\n";

/// The sample configuration's pipeline, with `PARAMS` for the producer.
const EPP: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: single-profile-handler\n- type: decode-filter\n- type: burst-prefix-cache-producer\n  parameters: PARAMS\n- type: prefix-cache-scorer\n  parameters:\n    prefixMatchInfoProducerName: burst-prefix-cache-producer\n- type: load-aware-scorer\n- type: max-score-picker\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: prefix-cache-scorer\n    weight: 2.0\n  - pluginRef: load-aware-scorer\n    weight: 1.0\n  - pluginRef: max-score-picker\n";

/// The same without the producer and its scorer: the load scorer alone.
const PLAIN: &str = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: single-profile-handler\n- type: decode-filter\n- type: load-aware-scorer\n- type: max-score-picker\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: load-aware-scorer\n  - pluginRef: max-score-picker\n";

/// `groups` prompts of 2,000 tokens, `samples` requests each, all sent at
/// `at_ms` (an RL rollout step's samples), every client giving up after
/// `deadline_ms` when set.
fn rollout(groups: u64, samples: u64, at_ms: u64, deadline_ms: Option<u64>) -> Vec<RequestSpec> {
    let mut specs = Vec::new();
    for g in 0..groups {
        for s in 0..samples {
            specs.push(RequestSpec {
                arrival: SimTime::from_ms(at_ms),
                prompt: Prompt::new(vec![Segment {
                    id: 7_000 + g,
                    tokens: 2_000,
                }]),
                output_tokens: 16,
                priority: 0,
                slo_class: 0,
                source_line: g * samples + s + 1,
                deadline: deadline_ms.map(|d| SimTime::from_ms(at_ms + d)),
                session: None,
                output_id: None,
            });
        }
    }
    specs
}

fn replay(epp: &str, specs: Vec<RequestSpec>) -> Vec<RequestRecord> {
    let cluster = build(SCENARIO, DEPLOYMENT, &[("epp.yaml", epp)]).expect("builds");
    let mut sink = MemorySink::default();
    run(&cluster, &mut specs.into_iter().map(Ok), 1, true, &mut sink).expect("runs");
    let mut records = sink.records;
    records.sort_by_key(|r| r.source_line);
    records
}

fn with(params: &str) -> String {
    EPP.replace("PARAMS", params)
}

/// The pods that served each group of `samples` consecutive requests.
fn pods_per_group(records: &[RequestRecord], samples: usize) -> Vec<BTreeSet<u32>> {
    records
        .chunks(samples)
        .map(|group| group.iter().map(|r| r.pod).collect())
        .collect()
}

#[test]
fn a_burst_of_samples_waits_for_the_window_then_shares_one_replica() {
    let records = replay(&with("{windowDurationMs: 100}"), rollout(4, 8, 0, None));
    assert_eq!(records.len(), 32);
    // Every request waited the whole window: none reached an engine
    // before it sealed at 100 ms.
    for r in &records {
        assert_eq!(r.outcome, Outcome::Completed);
        assert!(r.enqueued.unwrap() >= SimTime::from_ms(100), "{r:?}");
    }
    // Each group's 8 samples went to one pod (all samples to one replica
    // with maxPerReplica -1), and the four groups to four pods.
    let pods = pods_per_group(&records, 8);
    assert!(pods.iter().all(|p| p.len() == 1), "{pods:?}");
    let distinct: BTreeSet<u32> = pods.iter().flatten().copied().collect();
    assert_eq!(distinct.len(), 4, "{pods:?}");
    // So each prompt was prefilled about once: 7 of every 8 samples find
    // its blocks cached (2,000 tokens hold 125 full blocks of 16).
    let cached = records.iter().filter(|r| r.cached_tokens >= 1_984).count();
    assert!(cached >= 28, "{cached} of 32 hit the shared prefix");
}

#[test]
fn without_the_producer_the_load_scorer_scatters_the_burst() {
    // No scrape has seen the burst when it arrives, so every replica
    // scores the same and the picker's random ties spread each prompt's
    // samples: the co-location above is the producer's.
    let records = replay(PLAIN, rollout(4, 8, 0, None));
    let pods = pods_per_group(&records, 8);
    assert!(pods.iter().any(|p| p.len() > 1), "{pods:?}");
    assert!(
        records
            .iter()
            .all(|r| r.enqueued.unwrap() < SimTime::from_ms(100))
    );
}

#[test]
fn max_per_replica_spreads_a_group_and_a_full_batch_routes_at_once() {
    // k = 2: the 8 samples of one prompt fill four replicas, 2 each.
    let records = replay(&with("{maxPerReplica: 2}"), rollout(1, 8, 0, None));
    let mut per_pod = std::collections::BTreeMap::new();
    for r in &records {
        *per_pod.entry(r.pod).or_insert(0) += 1;
    }
    assert_eq!(per_pod.values().copied().collect::<Vec<_>>(), [2, 2, 2, 2]);
    // maxBatchSize 3: the window holds the first 3; `Produce` fails for
    // the other 5, which are scheduled at once without the producers.
    let records = replay(&with("{maxBatchSize: 3}"), rollout(1, 8, 0, None));
    let held = records
        .iter()
        .filter(|r| r.enqueued.unwrap() >= SimTime::from_ms(100))
        .count();
    assert_eq!(held, 3);
    let held_pods: BTreeSet<u32> = records[..3].iter().map(|r| r.pod).collect();
    assert_eq!(held_pods.len(), 1, "the held samples share one replica");
}

#[test]
fn a_client_leaving_during_the_window_is_aborted_and_the_rest_proceed() {
    // A 50 ms client timeout inside a 100 ms window: every client of the
    // burst gives up before the seal, and none reaches an engine.
    let records = replay(&with("{windowDurationMs: 100}"), rollout(2, 4, 0, Some(50)));
    assert!(
        records
            .iter()
            .all(|r| r.outcome == Outcome::Aborted && r.enqueued.is_none())
    );
    // A later burst with patient clients is served.
    let mut specs = rollout(2, 4, 0, Some(50));
    specs.extend(rollout(2, 4, 1_000, None).into_iter().map(|mut s| {
        s.source_line += 8;
        s
    }));
    let records = replay(&with("{windowDurationMs: 100}"), specs);
    assert!(records[8..].iter().all(|r| r.outcome == Outcome::Completed));
    assert!(
        records[8..]
            .iter()
            .all(|r| r.enqueued.unwrap() >= SimTime::from_ms(1_100))
    );
}
