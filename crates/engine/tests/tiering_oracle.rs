//! vLLM 0.31.0's own tiering manager against pdsim's secondary offload
//! tiers.
//!
//! `offload-golden/tiering-0.31.0.json` holds seeded random runs of
//! `vllm/v1/kv_offload/tiering/manager.py` (`TieringOffloadingManager` over
//! the CPU primary tier, LRU and ARC) and `tiering/async_lookup.py`, as
//! shipped, behind a filesystem tier whose jobs end and whose lookups are
//! answered when the script says (`tools/vllm-oracle/tiering_manager.py`
//! wrote them; see its header to regenerate). Each call is replayed through
//! [`Tiering`] and the primary [`OffloadManager`], and every answer must
//! match: each lookup's result (`HIT`, `HIT_PENDING`, `RETRY`, `MISS`), a
//! store's success and the chunks it stored, the jobs and lookup batches
//! submitted (their numbers and sizes, in order), and after every call the
//! chunks the primary holds, those still being written, and the tier's
//! files.

use pdsim_core::RequestId;
use pdsim_engine::offload::{
    EvictionPolicy, Lookup, OffloadConfig, OffloadManager, Release, RequestState,
};
use pdsim_engine::tiering::{TierIo, TierLookup, Tiering};
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn numbers(value: &Value) -> Vec<u64> {
    value
        .as_array()
        .expect("a list")
        .iter()
        .map(|v| v.as_u64().expect("a key"))
        .collect()
}

#[test]
fn pdsim_answers_as_vllm_tiering_manager_does() {
    let text = include_str!("offload-golden/tiering-0.31.0.json");
    let cases: Vec<Value> = serde_json::from_str(text).expect("golden JSON");
    let (mut calls, mut promotions, mut pending) = (0, 0, 0);
    for case in &cases {
        let what = format!("{} seed {}", case["policy"].as_str().unwrap(), case["seed"]);
        let policy = match case["policy"].as_str().unwrap() {
            "arc" => EvictionPolicy::Arc,
            _ => EvictionPolicy::Lru,
        };
        let mut primary = OffloadManager::new(OffloadConfig {
            chunks: case["capacity"].as_u64().unwrap(),
            policy,
            release: Release::V0_31_0,
        });
        let mut tiering = Tiering::new(&[case["tier_capacity"].as_u64().unwrap()]);
        let mut reqs: BTreeMap<u64, (Vec<u64>, RequestState)> = BTreeMap::new();
        let mut next_answer = 0u64;
        let mut io = Vec::new();
        for (i, op) in case["ops"].as_array().unwrap().iter().enumerate() {
            let at = format!("{what} call {i}: {op}");
            let req_id = op["req"].as_u64().unwrap_or(0);
            match op["op"].as_str().unwrap() {
                "new" => {
                    reqs.insert(req_id, (numbers(&op["keys"]), RequestState::default()));
                }
                "lookup" => {
                    let (keys, state) = reqs.get_mut(&req_id).expect("live request");
                    let first = op["first"].as_u64().unwrap() as usize;
                    let mut results = Vec::new();
                    for (j, &key) in keys.iter().enumerate().skip(first) {
                        let r = tiering.lookup(
                            &mut primary,
                            key,
                            j as u32,
                            RequestId(req_id as u32),
                            state,
                            None,
                        );
                        results.push(match r {
                            TierLookup::Hit => "HIT",
                            TierLookup::Pending => {
                                pending += 1;
                                "HIT_PENDING"
                            }
                            TierLookup::Retry => "RETRY",
                            TierLookup::Miss => "MISS",
                        });
                        if r == TierLookup::Miss {
                            break;
                        }
                    }
                    assert_eq!(json!(results), op["results"], "{at}");
                }
                "store" => {
                    let (keys, state) = reqs.get_mut(&req_id).expect("live request");
                    let first = op["first"].as_u64().unwrap() as usize;
                    let count = op["count"].as_u64().unwrap() as usize;
                    let offer: Vec<(u32, u64)> = (first..first + count)
                        .map(|c| (c as u32, keys[c]))
                        .collect();
                    tiering.poll(&mut primary, None);
                    let stored = primary
                        .store_keys(&offer, state, keys.iter().copied(), None)
                        .map(<[u64]>::to_vec);
                    assert_eq!(stored.is_some(), op["ok"].as_bool().unwrap(), "{at}");
                    if let Some(stored) = stored {
                        assert_eq!(stored, numbers(&op["stored"]), "{at}");
                        primary.cascade_inserted(&mut tiering);
                    }
                }
                "load" => {
                    let (keys, state) = reqs.get_mut(&req_id).expect("live request");
                    let first = op["first"].as_u64().unwrap() as usize;
                    let count = op["count"].as_u64().unwrap() as usize;
                    primary.prepare_load(first as u32, &keys[first..first + count], state);
                }
                "loaded" => {
                    let (_, state) = reqs.get_mut(&req_id).expect("live request");
                    primary.complete_load(state);
                }
                "finish" => {
                    let (_, mut state) = reqs.remove(&req_id).expect("live request");
                    primary.on_request_finished(&mut state);
                    tiering.request_finished(RequestId(req_id as u32));
                }
                "schedule_end" => tiering.schedule_end(&mut primary, None),
                "job_done" => tiering.io_done(op["job"].as_u64().unwrap()),
                "answer" => {
                    tiering.lookup_done(0, next_answer);
                    next_answer += 1;
                }
                other => panic!("unknown call {other}"),
            }
            io.clear();
            tiering.take_io(&mut io);
            let io: Vec<Value> = io
                .iter()
                .map(|item| match *item {
                    TierIo::Write { job, chunks, .. } => json!(["write", job, chunks]),
                    TierIo::Read { job, chunks, .. } => {
                        promotions += 1;
                        json!(["read", job, chunks])
                    }
                    TierIo::Lookup { keys, .. } => json!(["lookup", keys]),
                })
                .collect();
            assert_eq!(json!(io), op["io"], "{at}");
            let mut held = primary.order();
            held.sort_unstable();
            assert_eq!(held, numbers(&op["held"]), "{at}");
            let writing: Vec<u64> = held
                .iter()
                .copied()
                .filter(|&k| primary.lookup(k) == Lookup::Pending)
                .collect();
            assert_eq!(writing, numbers(&op["pending"]), "{at}");
            assert_eq!(tiering.tiers[0].keys(), numbers(&op["files"]), "{at}");
            calls += 1;
        }
    }
    // The runs exercise what the tier is for, not only misses.
    assert!(calls > 5000, "{calls} calls");
    assert!(promotions > 20, "{promotions} promotion reads");
    assert!(pending > 50, "{pending} HIT_PENDING answers");
}
