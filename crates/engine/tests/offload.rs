//! The scheduler's calls into its offload tier (`crate::offload`), as vLLM's
//! OffloadingConnector makes them (`offloading/scheduler.py`): a waiting
//! request's lookup touches its chunks in 0.29.0, a load pins the chunks it
//! reads until the load is over, and a request's end applies what it
//! observed in 0.31.0. The tier's own decisions are checked against vLLM's
//! manager in `offload_oracle.rs`; these check that the engine calls it.

use pdsim_core::kv_events::{KvEvent, Medium};
use pdsim_core::{Purpose, RequestId, Stream};
use pdsim_engine::offload::{EvictionPolicy, OffloadConfig, Release};
use pdsim_engine::{Engine, EngineConfig, EngineEvent, KvTransfer};

mod common;

use common::request;

fn engine(usable_blocks: u32, chunks: u64, release: Release) -> Engine {
    let mut engine = Engine::new(EngineConfig {
        num_blocks: usable_blocks + 1,
        max_num_batched_tokens: 1000,
        unhashed_blocks_to_front: true,
        offload: Some(OffloadConfig {
            chunks,
            policy: EvictionPolicy::Lru,
            release,
        }),
        ..common::config()
    });
    engine.enable_kv_events();
    engine
}

/// One step; the hashes the tier stored in it, in order.
fn step(engine: &mut Engine) -> (Vec<EngineEvent>, Vec<u64>) {
    let mut rng = Stream::new(3, Purpose::Acceptance, 0);
    if engine.schedule().is_some() {
        engine.complete_step(&mut rng);
    }
    engine.check_full().expect("invariants");
    let events = engine.drain_events().collect();
    let log = engine.kv_events_mut().expect("events on");
    let mut stored = Vec::new();
    for event in &log.events {
        if let KvEvent::Stored {
            medium: Medium::Cpu,
            hashes,
            ..
        } = event
        {
            stored.extend(log.hashes_of(hashes));
        }
    }
    log.clear();
    (events, stored)
}

/// Runs every request to its end; the hashes the tier stored.
fn drain(engine: &mut Engine) -> Vec<u64> {
    let mut stored = Vec::new();
    while engine.has_work() {
        stored.extend(step(engine).1);
    }
    stored
}

fn order(engine: &Engine) -> Vec<u64> {
    engine.offload_tier().expect("a tier").order()
}

/// 0.31.0: when A ends, its chunks are ranked last first, so its first
/// chunk is the most recently used (`on_request_finished`).
#[test]
fn a_requests_end_ranks_its_chunks_first_chunk_last() {
    let mut engine = engine(100, 100, Release::V0_31_0);
    engine.add_request(request(0, &[(7, 64), (1, 1)], 1, KvTransfer::Local));
    let stored = drain(&mut engine);
    assert_eq!(stored.len(), 4);
    let mut reversed = stored.clone();
    reversed.reverse();
    assert_eq!(order(&engine), reversed);
}

/// 0.29.0: a waiting request's lookup touches all its chunks, last first
/// (`_touch` in `get_num_new_matched_tokens`), even when HBM holds them.
#[test]
fn a_lookup_touches_the_requests_chunks_in_0_29_0() {
    let mut engine = engine(100, 100, Release::V0_29_0);
    engine.add_request(request(0, &[(7, 64), (1, 1)], 1, KvTransfer::Local));
    let a = drain(&mut engine);
    engine.add_request(request(1, &[(8, 16), (1, 1)], 1, KvTransfer::Local));
    let b = drain(&mut engine);
    assert_eq!((a.len(), b.len()), (4, 1));
    let mut expected = a.clone();
    expected.extend(&b);
    assert_eq!(order(&engine), expected, "stored in order, no touch since");
    // C shares A's prefix (found in HBM): admitting it looks it up.
    engine.add_request(request(2, &[(7, 64), (2, 10)], 1, KvTransfer::Local));
    step(&mut engine);
    let mut expected = b.clone();
    expected.extend(a.iter().rev());
    assert_eq!(order(&engine), expected);
}

/// A load pins the chunks it reads: a store that needs room while C's load
/// is in flight evicts other chunks, and C's stay (`prepare_load` raises
/// their `ref_cnt` until `complete_load`).
#[test]
fn chunks_being_loaded_are_not_evicted() {
    // A's four blocks, then B's seven, fill the tier's eleven chunks; B
    // also pushes A out of HBM's eight blocks.
    let mut engine = engine(8, 11, Release::V0_31_0);
    engine.add_request(request(0, &[(7, 64), (1, 1)], 1, KvTransfer::Local));
    let a = drain(&mut engine);
    engine.add_request(request(1, &[(8, 120)], 1, KvTransfer::Local));
    let b = drain(&mut engine);
    assert_eq!((a.len(), b.len()), (4, 7));
    // A's chunks are the least recently used (B ended after A).
    assert_eq!(
        &order(&engine)[..4],
        &a.iter().rev().copied().collect::<Vec<_>>()
    );
    engine.add_request(request(2, &[(7, 64), (2, 10)], 1, KvTransfer::Local));
    let (events, _) = step(&mut engine);
    assert!(
        events.contains(&EngineEvent::LoadsKv {
            id: RequestId(2),
            cached_tokens: 0,
            tokens: 64
        }),
        "{events:?}"
    );
    // D stores two new chunks while the load runs: B's oldest go.
    engine.add_request(request(3, &[(9, 32), (1, 1)], 1, KvTransfer::Local));
    let (_, stored) = step(&mut engine);
    assert_eq!(stored.len(), 2);
    let tier = engine.offload_tier().unwrap();
    assert!(a.iter().all(|&h| tier.contains(h)), "A's chunks stayed");
    assert_eq!(tier.evictions, 2);
    engine.kv_loaded(RequestId(2));
    drain(&mut engine);
}

/// The same with 64-token blocks reused in 16-token units (vllm-rbln's
/// layout, scaled down) and a local hit of one block: the load reads the
/// tier's chunks after it (blocks 1 to 3 of A's prefix) and pins those,
/// while A's first chunk, in HBM and not being read, may go.
#[test]
fn chunks_being_loaded_after_a_local_hit_are_not_evicted() {
    let mut engine = Engine::new(EngineConfig {
        num_blocks: 9,
        block_size: 64,
        prefix_unit: 16,
        max_num_batched_tokens: 1000,
        unhashed_blocks_to_front: true,
        offload: Some(OffloadConfig {
            chunks: 10,
            policy: EvictionPolicy::Lru,
            release: Release::V0_31_0,
        }),
        ..common::config()
    });
    engine.enable_kv_events();
    // A: four full blocks and one more; the three never-used blocks and
    // A's last four are what B, seven blocks, takes from the free queue,
    // so HBM keeps A's first block only.
    engine.add_request(request(0, &[(7, 256), (1, 1)], 1, KvTransfer::Local));
    let a = drain(&mut engine);
    engine.add_request(request(1, &[(8, 384), (3, 10)], 1, KvTransfer::Local));
    let b = drain(&mut engine);
    assert_eq!((a.len(), b.len()), (4, 6));
    engine.add_request(request(2, &[(7, 256), (2, 10)], 1, KvTransfer::Local));
    let (events, _) = step(&mut engine);
    assert!(
        events.contains(&EngineEvent::LoadsKv {
            id: RequestId(2),
            cached_tokens: 64,
            tokens: 192
        }),
        "{events:?}"
    );
    // D stores two chunks into the full tier: the least recently used are
    // A's, last first (A ended before B), but A's second to fourth are
    // being read, so its first and then B's oldest go.
    engine.add_request(request(3, &[(9, 128), (1, 1)], 1, KvTransfer::Local));
    let (_, stored) = step(&mut engine);
    assert_eq!(stored.len(), 2);
    let tier = engine.offload_tier().unwrap();
    assert!(
        a[1..].iter().all(|&h| tier.contains(h)),
        "A's loaded chunks stayed"
    );
    assert!(!tier.contains(a[0]), "A's first chunk was not being read");
    assert_eq!(tier.evictions, 2);
    engine.kv_loaded(RequestId(2));
    drain(&mut engine);
}
