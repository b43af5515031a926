//! Aborts: a client that gives up ends its request in the engine as vLLM's
//! `Scheduler.finish_requests(..., FINISHED_ABORTED)` does (0.31.0,
//! `vllm/v1/core/sched/scheduler.py`): out of running or waiting, blocks
//! freed tail first with their hashes kept, the other requests untouched.
//! The property test aborts random requests at random moments and checks
//! every invariant after every step.

use pdsim_core::{Prompt, Purpose, RequestId, Segment, SimTime, Stream};
use pdsim_engine::{Abort, Engine, EngineConfig, EngineEvent, KvTransfer, NewRequest, Policy};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

mod common;

use common::request;

fn rng() -> Stream {
    Stream::new(3, Purpose::Acceptance, 0)
}

fn step(engine: &mut Engine, rng: &mut Stream) -> Vec<EngineEvent> {
    if engine.schedule().is_some() {
        engine.complete_step(rng);
    }
    engine.check_full().expect("invariants");
    engine.drain_events().collect()
}

/// Output tokens each request finished with, running the engine dry.
fn run_dry(engine: &mut Engine, rng: &mut Stream) -> BTreeMap<RequestId, u32> {
    let mut done = BTreeMap::new();
    let mut steps = 0;
    while engine.has_work() {
        for event in step(engine, rng) {
            if let EngineEvent::Finished { id, output_tokens } = event {
                done.insert(id, output_tokens);
            }
        }
        steps += 1;
        assert!(steps < 10_000, "no progress");
    }
    done
}

#[test]
fn aborting_a_decoding_request_frees_its_blocks_tail_first_and_keeps_them_cached() {
    let mut engine = Engine::new(EngineConfig {
        max_num_batched_tokens: 1000,
        ..common::config()
    });
    let mut rng = rng();
    // Request 1 has a 64-token prompt (4 full blocks) and decodes for long.
    engine.add_request(request(0, &[(1, 40)], 30, KvTransfer::Local));
    engine.add_request(request(1, &[(7, 64)], 500, KvTransfer::Local));
    engine.add_request(request(2, &[(3, 20)], 30, KvTransfer::Local));
    for _ in 0..5 {
        step(&mut engine, &mut rng);
    }
    assert_eq!(engine.num_running(), 3);
    let free_before = engine.pool().free();
    let queue_before = engine.pool().free_order();
    // 64 prompt + 4 generated tokens, one block ahead: 5 blocks.
    assert_eq!(engine.abort(RequestId(1)), Abort::Freed);
    engine.check_full().expect("invariants after the abort");
    let freed = engine.pool().free() - free_before;
    assert_eq!(freed, 5, "its five blocks are free");
    assert_eq!(engine.running_ids(), vec![RequestId(0), RequestId(2)]);
    // `KVCacheManager.free` returns a request's blocks tail first: the five
    // at the free queue's tail are its blocks, in reverse allocation order.
    let queue_after = engine.pool().free_order();
    let tail: Vec<u32> = queue_after
        .iter()
        .copied()
        .filter(|b| !queue_before.contains(b))
        .collect();
    assert_eq!(tail.len(), 5);
    assert_eq!(&queue_after[queue_after.len() - 5..], tail.as_slice());
    assert!(
        tail.windows(2).all(|w| w[0] > w[1]),
        "freed tail first: {tail:?}"
    );
    // The others finish exactly as they would have.
    let done = run_dry(&mut engine, &mut rng);
    assert_eq!(
        done,
        BTreeMap::from([(RequestId(0), 30), (RequestId(2), 30)])
    );
    assert_eq!(engine.pool().free(), engine.pool().usable());
    // Its prompt stayed in the prefix cache: a new request with the same
    // prompt finds all four full blocks but the last token's.
    engine.add_request(request(9, &[(7, 64), (8, 10)], 1, KvTransfer::Local));
    let events = step(&mut engine, &mut rng);
    assert!(events.contains(&EngineEvent::Admitted {
        id: RequestId(9),
        cached_tokens: 64
    }));
    // Once ended, the request is unknown.
    assert_eq!(engine.abort(RequestId(1)), Abort::Unknown);
}

#[test]
fn the_same_run_without_the_abort_finishes_the_others_identically() {
    // The reference for the test above: the abort changes nothing for the
    // requests it spares (same outputs; they never waited for blocks).
    let mut engine = Engine::new(EngineConfig {
        max_num_batched_tokens: 1000,
        ..common::config()
    });
    let mut rng = rng();
    engine.add_request(request(0, &[(1, 40)], 30, KvTransfer::Local));
    engine.add_request(request(1, &[(7, 64)], 500, KvTransfer::Local));
    engine.add_request(request(2, &[(3, 20)], 30, KvTransfer::Local));
    let done = run_dry(&mut engine, &mut rng);
    assert_eq!(done[&RequestId(0)], 30);
    assert_eq!(done[&RequestId(2)], 30);
    assert_eq!(done[&RequestId(1)], 500);
}

#[test]
fn an_abort_during_a_step_drops_the_request_from_that_step() {
    let mut engine = Engine::new(common::config());
    let mut rng = rng();
    engine.add_request(request(0, &[(1, 20)], 10, KvTransfer::Local));
    engine.add_request(request(1, &[(2, 20)], 10, KvTransfer::Local));
    step(&mut engine, &mut rng);
    engine.schedule().expect("a decode step");
    // The abort arrives while the step runs: vLLM applies it before
    // `update_from_output`, so the step's token for it is never counted.
    assert_eq!(engine.abort(RequestId(1)), Abort::Freed);
    engine.complete_step(&mut rng);
    engine.check_full().expect("invariants");
    let events: Vec<EngineEvent> = engine.drain_events().collect();
    assert_eq!(
        events,
        vec![EngineEvent::Emitted {
            id: RequestId(0),
            tokens: 1
        }]
    );
}

#[test]
fn aborting_a_waiting_request_takes_it_out_of_the_queue() {
    for policy in [Policy::Fcfs, Policy::Priority] {
        let mut engine = Engine::new(EngineConfig {
            max_num_seqs: 1,
            policy,
            ..common::config()
        });
        let mut rng = rng();
        for id in 0..3 {
            engine.add_request(request(id, &[(id as u64 + 1, 20)], 5, KvTransfer::Local));
        }
        step(&mut engine, &mut rng);
        assert_eq!(engine.num_waiting(), 2);
        let free = engine.pool().free();
        assert_eq!(engine.abort(RequestId(1)), Abort::Freed);
        assert_eq!(engine.num_waiting(), 1, "{policy:?}");
        assert_eq!(
            engine.pool().free(),
            free,
            "a waiting request holds no blocks"
        );
        let done = run_dry(&mut engine, &mut rng);
        assert_eq!(
            done,
            BTreeMap::from([(RequestId(0), 5), (RequestId(2), 5)]),
            "{policy:?}"
        );
    }
}

#[test]
fn a_decode_side_aborted_while_its_kv_is_in_flight_frees_when_the_read_ends() {
    let mut engine = Engine::new(EngineConfig {
        max_num_batched_tokens: 1000,
        ..common::config()
    });
    let mut rng = rng();
    engine.add_request(request(0, &[(5, 100)], 5, KvTransfer::Consume));
    step(&mut engine, &mut rng);
    assert_eq!(engine.num_waiting_for_kv(), 1);
    let free = engine.pool().free();
    // `finish_requests` delays the free of a WAITING_FOR_REMOTE_KVS
    // request whose read has not finished: the read still writes them.
    assert_eq!(engine.abort(RequestId(0)), Abort::FreedAfterTransfer);
    assert_eq!(engine.num_waiting_for_kv(), 0);
    assert_eq!(engine.num_waiting(), 0);
    assert!(!engine.has_work());
    assert_eq!(engine.pool().free(), free, "blocks kept during the read");
    assert_eq!(
        engine.abort(RequestId(0)),
        Abort::Finished,
        "already aborted"
    );
    engine.check_full().expect("invariants");
    // `_update_from_kv_xfer_finished` frees a finished request's blocks.
    engine.kv_arrived(RequestId(0));
    engine.check_full().expect("invariants");
    assert_eq!(engine.pool().free(), engine.pool().usable());
    assert!(!engine.holds(RequestId(0)));
    assert!(engine.drain_events().next().is_none(), "no output for it");
}

#[test]
fn a_prefill_side_holding_its_blocks_is_finished_and_stays_held() {
    let mut engine = Engine::new(common::config());
    let mut rng = rng();
    engine.add_request(request(0, &[(5, 40)], 1, KvTransfer::Produce));
    let events = step(&mut engine, &mut rng);
    assert!(matches!(events.last(), Some(EngineEvent::Held { .. })));
    let free = engine.pool().free();
    // FINISHED_LENGTH_CAPPED already: `finish_requests` skips it.
    assert_eq!(engine.abort(RequestId(0)), Abort::Finished);
    assert_eq!(engine.pool().free(), free);
    // Finished, but its blocks are held: not empty until they are released.
    assert!(!engine.is_empty());
    assert!(engine.release(RequestId(0)));
    assert_eq!(engine.pool().free(), engine.pool().usable());
    assert!(engine.is_empty());
}

#[test]
fn a_prefill_side_aborted_mid_prompt_frees_at_once() {
    let mut engine = Engine::new(EngineConfig {
        max_num_batched_tokens: 16,
        ..common::config()
    });
    let mut rng = rng();
    engine.add_request(request(0, &[(5, 100)], 1, KvTransfer::Produce));
    step(&mut engine, &mut rng);
    // NixlConnector's `request_finished` frees an aborted producer's blocks
    // at once (status not FINISHED_LENGTH_CAPPED or FINISHED_STOPPED).
    assert_eq!(engine.abort(RequestId(0)), Abort::Freed);
    assert_eq!(engine.pool().free(), engine.pool().usable());
    assert!(!engine.has_work());
}

/// A random small workload with random roles and random aborts.
#[derive(Clone, Debug)]
struct Case {
    usable_blocks: u32,
    budget: u32,
    max_num_seqs: u32,
    priority: bool,
    offload: bool,
    /// (arrival step, prefix id, prefix tokens, unique tokens, output,
    /// role: 0 local, 1 produce, 2 consume, transfer delay in steps)
    requests: Vec<(u32, u64, u32, u32, u32, u8, u32)>,
    /// Per request: the step of its abort (none beyond the horizon), and
    /// whether it lands inside the step (between schedule and complete).
    aborts: Vec<(u32, bool)>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        8u32..64,
        prop_oneof![Just(7u32), Just(32), Just(256)],
        1u32..8,
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(
            (
                0u32..30,
                0u64..3,
                0u32..64,
                1u32..64,
                1u32..40,
                0u8..3,
                0u32..12,
            ),
            1..30,
        ),
        prop::collection::vec((0u32..80, any::<bool>()), 30),
    )
        .prop_map(
            |(usable_blocks, budget, max_num_seqs, priority, offload, requests, aborts)| Case {
                usable_blocks,
                budget,
                max_num_seqs,
                priority,
                offload,
                requests,
                aborts,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn random_aborts_never_break_the_engine(case in case()) {
        let capacity = case.usable_blocks * 16;
        let mut engine = Engine::new(EngineConfig {
            num_blocks: case.usable_blocks + 1,
            max_num_batched_tokens: case.budget,
            max_num_seqs: case.max_num_seqs,
            policy: if case.priority { Policy::Priority } else { Policy::Fcfs },
            max_model_len: capacity.saturating_sub(16).max(2),
            offload: case
                .offload
                .then(|| common::offload(case.usable_blocks as u64 / 2)),
            lmcache: None,
            ..common::config()
        });
        let mut rng = rng();
        let mut pending: Vec<(u32, NewRequest)> = case.requests.iter().enumerate().map(|(i, r)| {
            let mut segments = Vec::new();
            if r.2 > 0 { segments.push(Segment { id: 1000 + r.1, tokens: r.2 }); }
            segments.push(Segment { id: 5000 + i as u64, tokens: r.3 });
            (r.0, NewRequest {
                id: RequestId(i as u32),
                arrival: SimTime(r.0 as u64 * 1000 + i as u64),
                priority: (i % 3) as i32,
                prompt: Prompt::new(segments),
                max_output_tokens: r.4,
                kv: match r.5 {
                    1 => KvTransfer::Produce,
                    2 => KvTransfer::Consume,
                    _ => KvTransfer::Local,
                },
                output_id: None,
            })
        }).collect();
        pending.sort_by_key(|(step, r)| (*step, r.id));
        let n = pending.len();
        let mut ended = BTreeSet::new();
        let mut aborted = BTreeSet::new();
        let mut transfers: Vec<(u64, RequestId, bool)> = Vec::new();
        let mut loads: Vec<(u64, RequestId)> = Vec::new();
        let mut next = 0;
        let mut step = 0u64;
        // Aborts end what they hit and the rest runs as without them, so
        // the same bound as the engine's own property test holds.
        let total: u64 = case.requests.iter().map(|r| (r.2 + r.3 + r.4) as u64).sum();
        let limit = 200 + 50 * total;
        let abort_due = |step: u64, inside: bool| -> Vec<RequestId> {
            (0..n)
                .filter(|i| case.aborts[*i].0 as u64 == step && case.aborts[*i].1 == inside)
                .map(|i| RequestId(i as u32))
                .collect()
        };
        let abort = |engine: &mut Engine, id: RequestId, ended: &BTreeSet<RequestId>,
                         aborted: &mut BTreeSet<RequestId>| -> Result<(), TestCaseError> {
            let outcome = engine.abort(id);
            match outcome {
                Abort::Freed | Abort::FreedAfterTransfer => {
                    prop_assert!(!ended.contains(&id), "{id:?} aborted after it ended");
                    prop_assert!(aborted.insert(id), "{id:?} aborted twice");
                }
                Abort::Finished | Abort::Unknown => {}
            }
            engine.check_full().map_err(|e| TestCaseError::fail(format!("after aborting {id:?}: {e}")))?;
            Ok(())
        };
        while ended.len() + aborted.len() < n || engine.has_work() || !transfers.is_empty() || !loads.is_empty() {
            prop_assert!(step < limit, "no progress after {step} steps");
            while next < n && pending[next].0 as u64 <= step {
                engine.add_request(pending[next].1.clone());
                next += 1;
            }
            for id in abort_due(step, false) {
                abort(&mut engine, id, &ended, &mut aborted)?;
            }
            if engine.schedule().is_some() {
                for id in abort_due(step, true) {
                    abort(&mut engine, id, &ended, &mut aborted)?;
                }
                engine.complete_step(&mut rng);
            }
            if let Err(e) = engine.check_full() {
                prop_assert!(false, "invariant broken at step {step}: {e}");
            }
            for event in engine.drain_events() {
                match event {
                    EngineEvent::Finished { id, .. } | EngineEvent::Rejected { id } => {
                        prop_assert!(ended.insert(id), "{id:?} ended twice");
                        // A producer aborted while holding still ends by
                        // its release; any other aborted request is silent.
                        prop_assert!(!aborted.contains(&id), "{id:?} finished after its abort");
                    }
                    EngineEvent::Emitted { id, .. } => {
                        prop_assert!(!aborted.contains(&id), "{id:?} emitted after its abort");
                    }
                    EngineEvent::Held { id, .. } | EngineEvent::NeedsKv { id, .. } => {
                        let delay = case.requests[id.0 as usize].6 as u64;
                        transfers.push((step + delay, id, matches!(event, EngineEvent::Held { .. })));
                    }
                    EngineEvent::LoadsKv { id, .. } => loads.push((step + 2, id)),
                    _ => {}
                }
            }
            loads.sort();
            while loads.first().is_some_and(|l| l.0 <= step) {
                let (_, id) = loads.remove(0);
                engine.kv_loaded(id);
            }
            transfers.sort();
            while transfers.first().is_some_and(|t| t.0 <= step) {
                let (_, id, held) = transfers.remove(0);
                if held {
                    prop_assert!(engine.release(id), "{id:?} was not held");
                } else if case.requests[id.0 as usize].6 % 5 == 0 {
                    engine.kv_failed(id);
                } else {
                    engine.kv_arrived(id);
                }
            }
            engine.check_full().map_err(|e| TestCaseError::fail(format!("step {step}: {e}")))?;
            step += 1;
        }
        prop_assert!(!engine.has_work());
        prop_assert_eq!(engine.pool().free(), engine.pool().usable(), "every block returned");
        for id in 0..n as u32 {
            prop_assert!(!engine.holds(RequestId(id)), "request {id} still held");
        }
    }
}
