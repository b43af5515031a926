//! The engine's side of prefill/decode disaggregation, as NixlConnector
//! runs it (`research/vllm-engine.md` §6): the prefill side holds its
//! blocks until read, the decode side allocates for the whole prompt, keeps
//! its own prefix hit and pulls only the rest.

use pdsim_core::{Purpose, RequestId, Stream};
use pdsim_engine::{Engine, EngineConfig, EngineEvent, KvTransfer};

mod common;

use common::request;

fn config(usable_blocks: u32) -> EngineConfig {
    EngineConfig {
        num_blocks: usable_blocks + 1,
        max_num_batched_tokens: 1000,
        unhashed_blocks_to_front: true,
        ..common::config()
    }
}

fn step(engine: &mut Engine) -> Vec<EngineEvent> {
    let mut rng = Stream::new(3, Purpose::Acceptance, 0);
    if engine.schedule().is_some() {
        engine.complete_step(&mut rng);
    }
    engine.check_full().expect("invariants");
    engine.drain_events().collect()
}

#[test]
fn a_decode_side_prefix_hit_shrinks_the_transfer_by_exactly_the_cached_blocks() {
    let mut decode = Engine::new(config(100));
    // An earlier request leaves the first 64 tokens (4 blocks) cached.
    decode.add_request(request(0, &[(7, 64), (1, 10)], 1, KvTransfer::Local));
    while decode.has_work() {
        step(&mut decode);
    }
    // A disaggregated request sharing them: only the other 36 tokens move.
    let (queried, hit) = (decode.prefix_queries_tokens, decode.prefix_hits_tokens);
    assert_eq!(
        (queried, hit),
        (74, 0),
        "the first request found nothing cached"
    );
    decode.add_request(request(1, &[(7, 64), (2, 36)], 5, KvTransfer::Consume));
    let events = step(&mut decode);
    // It holds blocks for its whole prompt: the 4 it hit and 3 for the 36
    // tokens to come, ceil(100 / 16) = 7 of the 100.
    assert_eq!(decode.pool().free(), 100 - 7);
    // Its 100 prompt tokens are queried and 64 hit, as vLLM's prefix-cache
    // stats count a request the connector will fill.
    assert_eq!(
        (decode.prefix_queries_tokens, decode.prefix_hits_tokens),
        (queried + 100, hit + 64)
    );
    assert_eq!(
        events,
        vec![EngineEvent::NeedsKv {
            id: RequestId(1),
            cached_tokens: 64,
            missing_tokens: 36
        }]
    );
    // Without the shared prefix, everything moves.
    decode.add_request(request(2, &[(9, 100)], 5, KvTransfer::Consume));
    let events = step(&mut decode);
    assert_eq!(
        events,
        vec![EngineEvent::NeedsKv {
            id: RequestId(2),
            cached_tokens: 0,
            missing_tokens: 100
        }]
    );
    // Waiting for KV costs no compute: nothing was scheduled.
    assert!(decode.schedule().is_none());
    assert_eq!(decode.num_waiting_for_kv(), 2);
    // Arrival: the request continues from prompt − 1 with one token.
    decode.kv_arrived(RequestId(1));
    decode.schedule().expect("one token");
    assert_eq!(decode.last_schedule(), vec![(RequestId(1), 1)]);
}

#[test]
fn the_prefill_side_holds_its_blocks_until_released_exactly_once() {
    let mut prefill = Engine::new(config(100));
    prefill.add_request(request(0, &[(1, 64)], 1, KvTransfer::Produce));
    let events = step(&mut prefill);
    assert!(
        events.contains(&EngineEvent::Held {
            id: RequestId(0),
            blocks: 4
        }),
        "{events:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, EngineEvent::Finished { .. }))
    );
    assert_eq!(
        prefill.pool().free(),
        96,
        "blocks stay allocated while held"
    );
    assert!(prefill.release(RequestId(0)));
    assert_eq!(prefill.pool().free(), 100);
    assert_eq!(
        prefill.drain_events().collect::<Vec<_>>(),
        vec![EngineEvent::Finished {
            id: RequestId(0),
            output_tokens: 1
        }]
    );
    // A second release (a lease expiring after the read) frees nothing.
    assert!(!prefill.release(RequestId(0)));
    assert_eq!(prefill.pool().free(), 100);
    prefill.check_full().unwrap();
    // The prompt's blocks stay in the prefix cache after release.
    prefill.add_request(request(1, &[(1, 64), (2, 8)], 1, KvTransfer::Local));
    let events = step(&mut prefill);
    assert!(events.contains(&EngineEvent::Admitted {
        id: RequestId(1),
        cached_tokens: 64
    }));
}

#[test]
fn a_full_decode_pool_makes_requests_wait_and_then_completes_them_all() {
    // Ten blocks: each 64-token prompt needs four for its KV, so only two
    // fit at once; decoding then grows each to five.
    let mut decode = Engine::new(config(10));
    for id in 0..5 {
        decode.add_request(request(
            id,
            &[(100 + id as u64, 64)],
            8,
            KvTransfer::Consume,
        ));
    }
    let events = step(&mut decode);
    let waiting_for_kv: Vec<RequestId> = events
        .iter()
        .filter_map(|e| {
            if let EngineEvent::NeedsKv { id, .. } = e {
                Some(*id)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(waiting_for_kv, vec![RequestId(0), RequestId(1)]);
    // vLLM counts requests waiting for remote KV in `len(self.waiting)`;
    // the other three wait for blocks, none dropped.
    assert_eq!(decode.num_waiting_for_kv(), 2);
    assert_eq!(decode.num_waiting(), 5, "none dropped");
    let mut finished = Vec::new();
    let mut pending = waiting_for_kv;
    for _ in 0..200 {
        for id in pending.drain(..) {
            decode.kv_arrived(id);
        }
        for event in step(&mut decode) {
            match event {
                EngineEvent::NeedsKv { id, .. } => pending.push(id),
                EngineEvent::Finished { id, output_tokens } => {
                    assert_eq!(output_tokens, 8);
                    finished.push(id);
                }
                _ => {}
            }
        }
        if finished.len() == 5 {
            break;
        }
    }
    finished.sort();
    assert_eq!(finished, (0..5).map(RequestId).collect::<Vec<_>>());
    assert_eq!(decode.pool().free(), 10);
}

/// A decode engine on `c` that cached a 32-token prefix, then took a
/// 72-token request sharing it whose KV transfer failed: the schedule of
/// the step that recomputes it.
fn schedule_after_a_failed_transfer(c: EngineConfig) -> Vec<(RequestId, u32)> {
    let mut decode = Engine::new(c);
    decode.add_request(request(0, &[(7, 32), (1, 1)], 1, KvTransfer::Local));
    while decode.has_work() {
        step(&mut decode);
    }
    decode.add_request(request(1, &[(7, 32), (2, 40)], 3, KvTransfer::Consume));
    step(&mut decode);
    decode.kv_failed(RequestId(1));
    decode.schedule().unwrap();
    decode.last_schedule()
}

#[test]
fn a_failed_transfer_recomputes_from_the_local_hit() {
    // 72 tokens, 32 of them local: the other 40 are computed here.
    assert_eq!(
        schedule_after_a_failed_transfer(config(100)),
        vec![(RequestId(1), 40)]
    );
}

#[test]
fn offloaded_blocks_hit_when_prefix_units_are_smaller_than_a_block() {
    // 64-token blocks reused in 16-token units (vllm-rbln's layout, scaled
    // down) with a host tier. The tier stores whole blocks under the hash
    // of each block's last unit, and a lookup walks whole blocks by that
    // hash (`OffloadingConnectorScheduler.get_num_new_matched_tokens` reads
    // every `offloaded_block_size / hash_block_size`-th block hash).
    let mut c = config(4);
    c.block_size = 64;
    c.prefix_unit = 16;
    c.offload = Some(common::offload(100));
    let mut engine = Engine::new(c);
    // A's 128-token prefix: two full blocks, stored in the tier as they
    // fill.
    engine.add_request(request(0, &[(7, 128), (1, 1)], 1, KvTransfer::Local));
    while engine.has_work() {
        step(&mut engine);
    }
    // B takes all four blocks, evicting A's from HBM.
    engine.add_request(request(1, &[(8, 250)], 1, KvTransfer::Local));
    while engine.has_work() {
        step(&mut engine);
    }
    assert!(engine.pool().evictions >= 2);
    // C shares A's prefix: both blocks come from the tier.
    engine.add_request(request(2, &[(7, 128), (2, 10)], 1, KvTransfer::Local));
    let events = step(&mut engine);
    assert!(
        events.contains(&EngineEvent::LoadsKv {
            id: RequestId(2),
            cached_tokens: 0,
            tokens: 128
        }),
        "{events:?}"
    );
}

#[test]
fn a_recompute_after_a_failed_transfer_is_capped_as_a_long_prefill() {
    // `long_prefill_token_threshold` caps every request's new tokens in a
    // step (`Scheduler.schedule`), a consuming request resuming from its
    // local hit too: of its 40 tokens to compute, 16 go in this step.
    let mut c = config(100);
    c.long_prefill_token_threshold = 16;
    c.long_prefill_waiver_when_alone = false;
    assert_eq!(
        schedule_after_a_failed_transfer(c),
        vec![(RequestId(1), 16)]
    );
}

/// An engine of 8 HBM blocks with a host tier, in which A's 64-token
/// prefix (four full blocks, cached in HBM and stored in the tier as they
/// filled) was then evicted from HBM by B, which took all eight blocks.
fn engine_with_offloaded_prefix() -> Engine {
    let mut c = config(8);
    c.offload = Some(common::offload(100));
    let mut engine = Engine::new(c);
    engine.add_request(request(0, &[(7, 64), (1, 1)], 1, KvTransfer::Local));
    while engine.has_work() {
        step(&mut engine);
    }
    engine.add_request(request(1, &[(8, 120)], 1, KvTransfer::Local));
    while engine.has_work() {
        step(&mut engine);
    }
    engine
}

#[test]
fn offloaded_blocks_survive_hbm_eviction_and_load_on_a_later_hit() {
    let mut engine = engine_with_offloaded_prefix();
    assert!(engine.pool().evictions >= 4);
    let (queried, hit) = (engine.prefix_queries_tokens, engine.prefix_hits_tokens);
    // C shares A's prefix: no HBM hit, 64 tokens from the tier, loaded
    // without compute, then only the last 10 tokens are computed.
    engine.add_request(request(2, &[(7, 64), (2, 10)], 1, KvTransfer::Local));
    let events = step(&mut engine);
    // Its 74 prompt tokens are queried once, with no HBM hit among them.
    assert_eq!(
        (engine.prefix_queries_tokens, engine.prefix_hits_tokens),
        (queried + 74, hit)
    );
    assert!(
        events.contains(&EngineEvent::LoadsKv {
            id: RequestId(2),
            cached_tokens: 0,
            tokens: 64
        }),
        "{events:?}"
    );
    assert!(engine.schedule().is_none(), "loading costs no compute");
    assert_eq!(engine.external_hits_tokens, 64);
    engine.kv_loaded(RequestId(2));
    engine.schedule().unwrap();
    assert_eq!(engine.last_schedule(), vec![(RequestId(2), 10)]);
    let (stores, _) = engine.offload_counts();
    assert!(stores >= 4 + 7);
}

#[test]
fn an_offload_hit_is_whole_blocks_short_of_the_prompts_last_token() {
    // The tier's hit leaves at least one token to compute
    // (`get_num_new_matched_tokens`): of a prompt that is exactly A's four
    // offloaded 16-token blocks, three load (48 tokens) and the last block
    // is computed; one more token lets all four load.
    for (extra, loaded) in [(0, 48), (1, 64)] {
        let mut engine = engine_with_offloaded_prefix();
        let prompt: &[(u64, u32)] = if extra == 0 {
            &[(7, 64)]
        } else {
            &[(7, 64), (2, extra)]
        };
        engine.add_request(request(2, prompt, 1, KvTransfer::Local));
        let events = step(&mut engine);
        assert!(
            events.contains(&EngineEvent::LoadsKv {
                id: RequestId(2),
                cached_tokens: 0,
                tokens: loaded
            }),
            "{extra}: {events:?}"
        );
    }
}

/// With 16-token units in 64-token blocks, a block is shared only when all
/// four of its units hit in one physical block; one whose units hit in two
/// is filled by copying into a fresh block (`prefix_hit`). A caches two
/// units of a prefix in block X and ends; B hits them, copies them into a
/// block of its own and caches the next two units there; C's first four
/// units then hit in X (two) and in B's block (two): nothing is shared.
#[test]
fn a_block_whose_units_hit_in_two_physical_blocks_is_copied_not_shared() {
    let mut c = config(16);
    c.block_size = 64;
    c.prefix_unit = 16;
    let mut engine = Engine::new(c);
    for (id, prompt) in [
        (0, &[(7u64, 32u32), (1, 1)][..]),
        (1, &[(7, 64), (2, 1)][..]),
    ] {
        engine.add_request(request(id, prompt, 1, KvTransfer::Local));
        while engine.has_work() {
            step(&mut engine);
        }
    }
    let c_prompt = [(7u64, 64u32), (3, 10)];
    let units = pdsim_core::prompt::block_hashes(
        &pdsim_core::Prompt::new(
            c_prompt
                .iter()
                .map(|&(id, tokens)| pdsim_core::Segment { id, tokens })
                .collect(),
        ),
        16,
    );
    let place: Vec<_> = units[..4]
        .iter()
        .map(|h| engine.pool().lookup_unit(*h).expect("cached"))
        .collect();
    assert_eq!(
        place[0].0, place[1].0,
        "A's two units share a block: {place:?}"
    );
    assert_eq!(
        place[2].0, place[3].0,
        "B's two units share a block: {place:?}"
    );
    assert_ne!(place[0].0, place[2].0, "in two blocks: {place:?}");
    // C generates more than one token, so it still holds its blocks after
    // its first step.
    engine.add_request(request(2, &c_prompt, 5, KvTransfer::Local));
    let events = step(&mut engine);
    assert!(
        events.contains(&EngineEvent::Admitted {
            id: RequestId(2),
            cached_tokens: 64
        }),
        "all four units hit: {events:?}"
    );
    // Neither block is shared with C: each is still referenced by nothing.
    assert_eq!(engine.pool().ref_count(place[0].0), 0, "{place:?}");
    assert_eq!(engine.pool().ref_count(place[2].0), 0, "{place:?}");
}

/// A decode engine with 100 usable blocks, a budget of `budget` tokens a
/// step and EAGLE drafting of 4 tokens that pads a lone token with drafts
/// (0.31.0's `pad_spec_decode` condition).
fn padding_decode(budget: u32, max_model_len: u32) -> Engine {
    Engine::new(EngineConfig {
        max_num_batched_tokens: budget,
        max_model_len,
        spec: Some(pdsim_engine::SpecConfig {
            num_spec_tokens: 4,
            acceptance: vec![0.5; 4],
            eagle_style: true,
            lookahead_tokens: 4,
            draft_slots: 0,
        }),
        pad_spec_decode: pdsim_engine::PadSpecDecode::WithRunningOrComputed,
        ..config(100)
    })
}

#[test]
fn arrived_blocks_are_cached_when_the_waiting_loop_reaches_them_admitted_or_not() {
    // `_update_waiting_for_remote_kv` (`vllm/v1/core/sched/scheduler.py`)
    // caches a consuming request's arrived blocks when `schedule` reaches
    // it in the waiting queue, before deciding whether to admit it. Here it
    // cannot be admitted: with drafts padded onto a lone decode token it
    // needs 1 + 4 tokens of a 4-token budget (`pad_drafts`), so it stays
    // waiting, and its four full blocks are cached all the same.
    let mut decode = padding_decode(4, config(100).max_model_len);
    let hashes = pdsim_core::prompt::block_hashes(
        &pdsim_core::Prompt::new(vec![pdsim_core::Segment { id: 7, tokens: 64 }]),
        16,
    );
    assert_eq!(hashes.len(), 4);
    decode.add_request(request(1, &[(7, 64)], 5, KvTransfer::Consume));
    assert!(decode.schedule().is_none(), "parked for its KV");
    assert!(hashes.iter().all(|&h| decode.pool().lookup(h).is_none()));
    decode.kv_arrived(RequestId(1));
    assert!(decode.schedule().is_none(), "not admitted: no budget");
    assert_eq!(decode.num_running(), 0);
    assert!(
        hashes.iter().all(|&h| decode.pool().lookup(h).is_some()),
        "the arrived blocks are cached"
    );
    decode.check_full().expect("invariants");
}

#[test]
fn drafts_are_padded_only_when_the_sampled_token_still_fits_the_model_length() {
    // `pad_spec_decode` (`Scheduler.schedule`): a lone token is padded with
    // `num_spec_tokens` drafts only while `num_computed_tokens + 1 +
    // num_spec_tokens + 1 <= max_model_len`. The consuming request has 63
    // of its 64 prompt tokens computed after its KV arrives, so padding
    // needs 63 + 5 + 1 = 69 tokens of model length. Padded it needs 5
    // tokens of the 4-token budget and waits; unpadded its one token fits.
    let admitted_with = |max_model_len: u32, budget: u32| {
        let mut decode = padding_decode(budget, max_model_len);
        decode.add_request(request(1, &[(7, 64)], 1, KvTransfer::Consume));
        assert!(decode.schedule().is_none(), "parked for its KV");
        decode.kv_arrived(RequestId(1));
        let batch = decode.schedule();
        decode.check_full().expect("invariants");
        batch.is_some()
    };
    let admitted = |max_model_len: u32| admitted_with(max_model_len, 4);
    // A budget of exactly the padded 5 tokens takes it padded.
    assert!(admitted_with(69, 5), "the padded request fits 5 tokens");
    assert!(
        !admitted(69),
        "69 tokens of model length: padded, over budget"
    );
    assert!(
        admitted(68),
        "68: the sampled token would not fit, unpadded"
    );
}

/// The blocks a consuming request parks with: its prompt, and the
/// drafter's lookahead slots unless the release drops them for a load.
/// A 64-token prompt (four blocks) with four lookahead slots needs a
/// fifth block only with the lookahead.
fn parked_blocks(reserve: pdsim_engine::AsyncLoadReserve, eagle_style: bool) -> u32 {
    let mut decode = Engine::new(EngineConfig {
        spec: Some(pdsim_engine::SpecConfig {
            num_spec_tokens: 4,
            acceptance: vec![0.5; 4],
            eagle_style,
            lookahead_tokens: 4,
            draft_slots: 0,
        }),
        async_load_reserve: reserve,
        ..config(100)
    });
    decode.add_request(request(1, &[(7, 64)], 5, KvTransfer::Consume));
    assert!(decode.schedule().is_none(), "parked for its KV");
    decode.check_full().expect("invariants");
    100 - decode.pool().free()
}

#[test]
fn vllm_rbln_parks_an_eagle_load_without_lookahead_slots() {
    use pdsim_engine::AsyncLoadReserve::{EagleLoadWithoutLookahead, InFlightPrefills, None};
    // vllm-rbln 0.12.0: `limit_lookahead_tokens = load_kv_async and
    // self.use_eagle` (`vllm_rbln/v1/core/rbln_scheduler.py`).
    assert_eq!(parked_blocks(EagleLoadWithoutLookahead, true), 4);
    assert_eq!(parked_blocks(EagleLoadWithoutLookahead, false), 5);
    // Without the gate (0.15.1) the lookahead is allocated; 0.29.0 drops it
    // for every drafter.
    assert_eq!(parked_blocks(None, true), 5);
    assert_eq!(parked_blocks(InFlightPrefills, false), 4);
}
