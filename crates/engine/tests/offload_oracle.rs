//! vLLM's own CPU offloading manager against pdsim's offload tier.
//!
//! `offload-golden/<release>.json` holds seeded random runs of
//! `vllm/v1/kv_offload/cpu/manager.py` with its LRU and ARC policies, as
//! shipped in that release, driven the way pdsim's scheduler drives its tier
//! (`tools/vllm-oracle/offload_manager.py` wrote them from the release's
//! wheel; see its header to regenerate). Each call is replayed through
//! [`OffloadManager`] and every answer must match: a lookup's hit, a
//! store's success, the chunks it stored and the ones it evicted in vLLM's
//! order, the chunks held after each call, and ARC's list sizes and target.

use pdsim_core::kv_events::{KvEvent, KvEventBatch};
use pdsim_engine::offload::{EvictionPolicy, OffloadConfig, OffloadManager, Release, RequestState};
use serde_json::Value;
use std::collections::BTreeMap;

fn numbers(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_u64().expect("a key"))
        .collect()
}

/// The keys a batch's events removed and stored, in order.
fn removed_and_stored(log: &KvEventBatch) -> (Vec<u64>, Vec<u64>) {
    let (mut removed, mut stored) = (Vec::new(), Vec::new());
    for event in &log.events {
        match event {
            KvEvent::Removed { hashes, .. } => removed.extend(log.hashes_of(hashes)),
            KvEvent::Stored { hashes, .. } => stored.extend(log.hashes_of(hashes)),
        }
    }
    (removed, stored)
}

fn replay(release: &str, text: &str) -> usize {
    let cases: Vec<Value> = serde_json::from_str(text).expect("golden JSON");
    let mut calls = 0;
    for case in &cases {
        let what = format!(
            "{release} {} seed {}",
            case["policy"].as_str().unwrap(),
            case["seed"]
        );
        let release = match case["recency"].as_str().unwrap() {
            "touch" => Release::V0_29_0,
            _ => Release::V0_31_0,
        };
        let policy = match case["policy"].as_str().unwrap() {
            "arc" => EvictionPolicy::Arc,
            _ => EvictionPolicy::Lru,
        };
        let mut tier = OffloadManager::new(OffloadConfig {
            chunks: case["capacity"].as_u64().unwrap(),
            policy,
            release,
        });
        let mut reqs: BTreeMap<u64, (Vec<u64>, RequestState)> = BTreeMap::new();
        for (i, op) in case["ops"].as_array().unwrap().iter().enumerate() {
            calls += 1;
            let at = format!("{what}, call {i} ({op})");
            let id = op["req"].as_u64().unwrap();
            match op["op"].as_str().unwrap() {
                "new" => {
                    reqs.insert(id, (numbers(&op["keys"]), RequestState::default()));
                    continue;
                }
                "lookup" => {
                    let (keys, _) = &reqs[&id];
                    let hit = keys.iter().take_while(|&&k| tier.contains(k)).count();
                    assert_eq!(hit as u64, op["hit"].as_u64().unwrap(), "{at}");
                    tier.on_lookup(keys.iter().copied());
                }
                "load" => {
                    let (keys, req) = reqs.get_mut(&id).unwrap();
                    let first = op["first"].as_u64().unwrap() as usize;
                    let count = op["count"].as_u64().unwrap() as usize;
                    tier.prepare_load(first as u32, &keys[first..first + count], req);
                }
                "loaded" => tier.complete_load(&mut reqs.get_mut(&id).unwrap().1),
                "store" => {
                    let (keys, req) = reqs.get_mut(&id).unwrap();
                    let first = op["first"].as_u64().unwrap() as usize;
                    let count = op["count"].as_u64().unwrap() as usize;
                    let offer: Vec<(u32, u64)> = (first..first + count)
                        .map(|c| (c as u32, keys[c]))
                        .collect();
                    let mut log = KvEventBatch::default();
                    let ok = tier.store(&offer, req, keys.iter().copied(), Some(&mut log));
                    assert_eq!(ok, op["ok"].as_bool().unwrap(), "{at}");
                    if ok {
                        let (removed, stored) = removed_and_stored(&log);
                        assert_eq!(removed, numbers(&op["evicted"]), "{at}: evicted");
                        assert_eq!(stored, numbers(&op["stored"]), "{at}: stored");
                    }
                }
                "finish" => {
                    let (_, mut req) = reqs.remove(&id).unwrap();
                    tier.on_request_finished(&mut req);
                }
                other => panic!("{at}: unknown call {other}"),
            }
            let mut held = tier.order();
            held.sort_unstable();
            assert_eq!(held, numbers(&op["held"]), "{at}: held");
            if let Some(arc) = op.get("arc") {
                let (t1, t2, b1, b2, target) = tier.arc_state();
                let expected = arc.as_array().unwrap();
                assert_eq!(
                    [t1, t2, b1, b2].map(|n| n as u64),
                    [0, 1, 2, 3].map(|i| expected[i].as_u64().unwrap()),
                    "{at}: ARC's T1, T2, B1, B2"
                );
                assert_eq!(target, expected[4].as_f64().unwrap(), "{at}: ARC's target");
            }
        }
    }
    calls
}

#[test]
fn the_tier_answers_as_vllm_0_31_0s_manager_does() {
    let calls = replay("0.31.0", include_str!("offload-golden/0.31.0.json"));
    assert!(calls > 1000, "{calls} calls");
}

#[test]
fn the_tier_answers_as_vllm_0_29_0s_manager_does() {
    let calls = replay("0.29.0", include_str!("offload-golden/0.29.0.json"));
    assert!(calls > 1000, "{calls} calls");
}
