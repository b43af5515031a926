//! LMCache through `LMCacheConnectorV1` (`pdsim_engine::lmcache`): chunks
//! stored as a prefill reaches them, looked up in whole chunks from the
//! first, loaded within the admitting step, evicted least recently used.

use pdsim_core::{Purpose, Stream};
use pdsim_engine::lmcache::LmCacheConfig;
use pdsim_engine::{Engine, EngineConfig, KvTransfer};

mod common;

use common::request;

/// 16-token blocks, 32-token LMCache chunks, a 1,000-token budget.
fn config(usable_blocks: u32, chunks: u64) -> EngineConfig {
    EngineConfig {
        num_blocks: usable_blocks + 1,
        max_num_batched_tokens: 1000,
        unhashed_blocks_to_front: true,
        lmcache: Some(LmCacheConfig {
            chunk_tokens: 32,
            capacity_chunks: chunks,
        }),
        ..common::config()
    }
}

/// Runs a step; returns LMCache's (loaded, stored) tokens for it.
fn step(engine: &mut Engine) -> (u32, u32) {
    let mut rng = Stream::new(3, Purpose::Acceptance, 0);
    let io = if engine.schedule().is_some() {
        let io = engine.connector_io();
        engine.complete_step(&mut rng);
        io
    } else {
        (0, 0)
    };
    engine.check_full().expect("invariants");
    engine.drain_events().for_each(drop);
    io
}

fn drain(engine: &mut Engine) -> Vec<(u32, u32)> {
    let mut io = Vec::new();
    while engine.has_work() {
        io.push(step(engine));
    }
    io
}

/// An engine of 8 HBM blocks in which A's 100-token prompt was stored in
/// LMCache (three whole 32-token chunks) and then evicted from HBM by B.
fn engine_with_chunks_in_lmcache(chunks: u64) -> Engine {
    let mut engine = Engine::new(config(8, chunks));
    engine.add_request(request(0, &[(7, 100)], 1, KvTransfer::Local));
    let io = drain(&mut engine);
    // The prefill stores its whole chunks (96 tokens), after the forward
    // pass of the step that computed them; the partial fourth is dropped.
    assert_eq!(io[0], (0, 96), "{io:?}");
    assert_eq!(engine.lmcache_counts(), (3, 0));
    engine.add_request(request(1, &[(8, 120)], 1, KvTransfer::Local));
    drain(&mut engine);
    assert!(engine.pool().evictions >= 6, "A's blocks left HBM");
    engine
}

#[test]
fn a_later_prompt_loads_lmcaches_whole_chunks_within_the_step() {
    let mut engine = engine_with_chunks_in_lmcache(100);
    let (queried, hit) = (engine.prefix_queries_tokens, engine.prefix_hits_tokens);
    // C shares A's first 100 tokens: LMCache has 96 of them; they load in
    // the step that admits C (no waiting for the load), which computes the
    // other 14.
    engine.add_request(request(2, &[(7, 100), (2, 10)], 1, KvTransfer::Local));
    engine.schedule().expect("C runs at once");
    assert_eq!(engine.last_schedule(), vec![(pdsim_core::RequestId(2), 14)]);
    assert_eq!(
        engine.connector_io().0,
        96,
        "the retrieval the step waits for"
    );
    assert_eq!(engine.external_hits_tokens, 96);
    assert_eq!(
        (engine.prefix_queries_tokens, engine.prefix_hits_tokens),
        (queried + 110, hit),
        "no HBM hit"
    );
}

#[test]
fn a_hit_covering_the_whole_prompt_recomputes_its_last_token() {
    let mut engine = engine_with_chunks_in_lmcache(100);
    // A 96-token prompt, all of it in LMCache: 95 load, one is computed.
    engine.add_request(request(2, &[(7, 96)], 1, KvTransfer::Local));
    engine.schedule().unwrap();
    assert_eq!(engine.last_schedule(), vec![(pdsim_core::RequestId(2), 1)]);
    assert_eq!(engine.connector_io().0, 96);
    assert_eq!(engine.external_hits_tokens, 95);
}

#[test]
fn a_local_hit_as_long_as_lmcaches_loads_nothing() {
    // A stays in HBM (plenty of blocks): D repeats its first 100 tokens.
    // vLLM's own hit is 96 tokens (six blocks), LMCache's too, so nothing
    // loads and nothing counts as an external hit.
    let mut engine = Engine::new(config(100, 100));
    engine.add_request(request(0, &[(7, 100)], 1, KvTransfer::Local));
    drain(&mut engine);
    engine.add_request(request(1, &[(7, 100), (3, 5)], 1, KvTransfer::Local));
    engine.schedule().unwrap();
    assert_eq!(engine.connector_io().0, 0, "the local hit covers LMCache's");
    assert_eq!(engine.external_hits_tokens, 0);
}

#[test]
fn a_full_lmcache_evicts_its_least_recently_used_chunks() {
    // Room for two chunks: storing A's three whole chunks evicts its first,
    // and B's three evict the rest, so a later prompt sharing A finds no
    // run from the first chunk and loads nothing.
    let mut engine = engine_with_chunks_in_lmcache_of(2);
    assert_eq!(engine.lmcache_counts(), (6, 4));
    engine.add_request(request(2, &[(7, 100), (2, 10)], 1, KvTransfer::Local));
    engine.schedule().unwrap();
    assert_eq!(engine.connector_io().0, 0);
    assert_eq!(engine.external_hits_tokens, 0);
}

fn engine_with_chunks_in_lmcache_of(chunks: u64) -> Engine {
    let mut engine = Engine::new(config(8, chunks));
    engine.add_request(request(0, &[(7, 100)], 1, KvTransfer::Local));
    drain(&mut engine);
    engine.add_request(request(1, &[(8, 120)], 1, KvTransfer::Local));
    drain(&mut engine);
    engine
}

#[test]
fn decode_steps_store_nothing_and_a_chunked_prefill_stores_as_it_goes() {
    // A 100-token budget splits a 150-token prompt: the first step stores
    // three chunks (96 tokens), the second the fourth (128); decode steps
    // past later chunk boundaries store nothing.
    let mut engine = Engine::new(EngineConfig {
        max_num_batched_tokens: 100,
        ..config(100, 100)
    });
    engine.add_request(request(0, &[(9, 150)], 60, KvTransfer::Local));
    let io = drain(&mut engine);
    let stored: Vec<u32> = io.iter().map(|(_, s)| *s).collect();
    assert_eq!(&stored[..2], &[96, 32], "{io:?}");
    assert!(stored[2..].iter().all(|s| *s == 0), "{io:?}");
    assert_eq!(engine.lmcache_counts(), (4, 0));
}
