//! The engine pinned to vLLM V1's behaviour on hand-built cases: each test
//! states the vLLM rule it checks (`vllm/v1/core/sched/scheduler.py`,
//! `vllm/v1/core/kv_cache_manager.py`).

use pdsim_core::{Purpose, RequestId, Stream};
use pdsim_engine::{
    CudaGraphMode, Dbo, Engine, EngineEvent, Graphs, KvTransfer, NewRequest, Policy, SpecConfig,
};

mod common;

use common::config;

fn request(id: u32, segments: &[(u64, u32)], output: u32) -> NewRequest {
    common::request(id, segments, output, KvTransfer::Local)
}

fn stream() -> Stream {
    Stream::new(1, Purpose::Acceptance, 0)
}

/// Runs steps until nothing is left, returning the events.
fn run_to_end(engine: &mut Engine, limit: usize) -> Vec<EngineEvent> {
    let mut rng = stream();
    let mut events = Vec::new();
    for _ in 0..limit {
        if engine.schedule().is_none() {
            break;
        }
        engine.complete_step(&mut rng);
        engine
            .check_full()
            .expect("invariants hold after every step");
        events.extend(engine.drain_events());
    }
    events
}

#[test]
fn decodes_are_served_first_and_a_chunked_prefill_takes_the_rest_of_the_budget() {
    let mut engine = Engine::new(config());
    let mut rng = stream();
    for id in 0..3 {
        engine.add_request(request(id, &[(id as u64, 20)], 10));
    }
    // Step 1: three 20-token prompts fit the 100-token budget.
    let batch = engine.schedule().unwrap();
    assert_eq!((batch.prefill_tokens, batch.decode_tokens), (60, 0));
    engine.complete_step(&mut rng);
    // A long prompt arrives; the three decode first (1 token each), the
    // prompt gets the remaining 97 tokens as a chunk.
    engine.add_request(request(9, &[(9, 500)], 10));
    let batch = engine.schedule().unwrap();
    assert_eq!(
        engine.last_schedule(),
        vec![
            (RequestId(0), 1),
            (RequestId(1), 1),
            (RequestId(2), 1),
            (RequestId(9), 97)
        ]
    );
    assert_eq!(
        (batch.decode_tokens, batch.prefill_tokens, batch.decode_reqs),
        (3, 97, 3)
    );
    engine.complete_step(&mut rng);
    // Partial chunk: no token for the long prompt yet.
    let emitted: Vec<EngineEvent> = engine.drain_events().collect();
    assert!(!emitted.iter().any(|e| matches!(
        e,
        EngineEvent::Emitted {
            id: RequestId(9),
            ..
        }
    )));
    assert_eq!(engine.computed_tokens(RequestId(9)), Some(97));
}

#[test]
fn the_long_prefill_cap_applies_except_to_a_lone_request_where_the_release_waives_it() {
    let mut c = config();
    c.long_prefill_token_threshold = 64;
    // vLLM 0.31.0: a request alone in the scheduler is not capped.
    let mut waived = Engine::new(c.clone());
    waived.add_request(request(0, &[(1, 500)], 4));
    waived.schedule().unwrap();
    assert_eq!(waived.last_schedule(), vec![(RequestId(0), 100)]);
    // vLLM 0.29.0: capped even alone.
    c.long_prefill_waiver_when_alone = false;
    let mut capped = Engine::new(c.clone());
    capped.add_request(request(0, &[(1, 500)], 4));
    capped.schedule().unwrap();
    assert_eq!(capped.last_schedule(), vec![(RequestId(0), 64)]);
    // With company, both releases cap every prefill.
    c.long_prefill_waiver_when_alone = true;
    let mut two = Engine::new(c);
    two.add_request(request(0, &[(1, 500)], 4));
    two.add_request(request(1, &[(2, 500)], 4));
    two.schedule().unwrap();
    assert_eq!(
        two.last_schedule(),
        vec![(RequestId(0), 64), (RequestId(1), 36)]
    );
}

#[test]
fn max_num_seqs_bounds_admission() {
    let mut c = config();
    c.max_num_seqs = 2;
    let mut engine = Engine::new(c);
    for id in 0..4 {
        engine.add_request(request(id, &[(id as u64, 10)], 4));
    }
    engine.schedule().unwrap();
    assert_eq!(engine.running_ids(), vec![RequestId(0), RequestId(1)]);
    assert_eq!(engine.num_waiting(), 2);
}

/// A pool so small that growing decodes must preempt.
fn tight(policy: Policy) -> Engine {
    let mut c = config();
    c.policy = policy;
    c.num_blocks = 1 + 6; // six usable blocks of 16 tokens
    c.enable_prefix_caching = false;
    Engine::new(c)
}

#[test]
fn fcfs_preempts_the_last_admitted_and_admits_nothing_in_that_step() {
    let mut engine = tight(Policy::Fcfs);
    let mut rng = stream();
    // Three requests of 32 tokens take all six blocks once they decode past
    // a block boundary.
    for id in 0..3 {
        engine.add_request(request(id, &[(id as u64, 32)], 40));
    }
    engine.schedule().unwrap();
    engine.complete_step(&mut rng);
    engine.drain_events().count();
    engine.add_request(request(7, &[(7, 4)], 4));
    // Request 0 needs a seventh block for its 33rd token: the victim is the
    // last admitted, request 2.
    engine.schedule().unwrap();
    let events: Vec<EngineEvent> = engine.drain_events().collect();
    assert_eq!(events, vec![EngineEvent::Preempted { id: RequestId(2) }]);
    assert_eq!(engine.running_ids(), vec![RequestId(0), RequestId(1)]);
    // Nothing was admitted in the step that preempted, not even the tiny one.
    assert!(engine.last_schedule().iter().all(|(id, _)| id.0 < 2));
    assert_eq!(engine.num_waiting(), 2);
    engine.check_full().unwrap();
}

#[test]
fn priority_preempts_the_lowest_priority_latest_arrival() {
    let mut engine = tight(Policy::Priority);
    let mut rng = stream();
    let priorities = [5, 1, 5];
    for (id, p) in priorities.iter().enumerate() {
        let mut r = request(id as u32, &[(id as u64, 32)], 40);
        r.priority = *p;
        engine.add_request(r);
    }
    engine.schedule().unwrap();
    // Admission order follows priority: 1 first, then 0 and 2 by arrival.
    assert_eq!(
        engine.running_ids(),
        vec![RequestId(1), RequestId(0), RequestId(2)]
    );
    engine.complete_step(&mut rng);
    engine.drain_events().count();
    engine.schedule().unwrap();
    let events: Vec<EngineEvent> = engine.drain_events().collect();
    // Largest (priority, arrival): request 2 (priority 5, arrived last).
    assert_eq!(events, vec![EngineEvent::Preempted { id: RequestId(2) }]);
    engine.check_full().unwrap();
}

#[test]
fn a_full_prefix_hit_still_recomputes_the_last_token_and_cached_blocks_evict_lru() {
    let mut c = config();
    c.max_num_batched_tokens = 1000;
    let mut engine = Engine::new(c);
    // 64 tokens = 4 full blocks. Once cached, an identical prompt may hit at
    // most 63 tokens, block-aligned: 3 blocks (48 tokens).
    engine.add_request(request(0, &[(42, 64)], 1));
    run_to_end(&mut engine, 10);
    engine.add_request(request(1, &[(42, 64)], 1));
    engine.schedule().unwrap();
    let events: Vec<EngineEvent> = engine.drain_events().collect();
    assert_eq!(
        events,
        vec![EngineEvent::Admitted {
            id: RequestId(1),
            cached_tokens: 48
        }]
    );
    assert_eq!(engine.last_schedule(), vec![(RequestId(1), 16)]);
    // A longer prompt with the same first 64 tokens hits all 4 blocks.
    engine.complete_step(&mut stream());
    engine.drain_events().count();
    engine.add_request(request(2, &[(42, 64), (43, 10)], 1));
    engine.schedule().unwrap();
    let events: Vec<EngineEvent> = engine.drain_events().collect();
    assert_eq!(
        events,
        vec![EngineEvent::Admitted {
            id: RequestId(2),
            cached_tokens: 64
        }]
    );
    assert!(engine.pool().check().is_ok());
}

#[test]
fn evicting_reuses_the_least_recently_released_blocks_first() {
    let mut c = config();
    c.num_blocks = 1 + 8;
    c.max_num_batched_tokens = 1000;
    let mut engine = Engine::new(c);
    // A (4 blocks) finishes first, then B (4 blocks): A's blocks were
    // released earlier, so a new 4-block prompt evicts A's and B stays hot.
    engine.add_request(request(0, &[(1, 64)], 1));
    run_to_end(&mut engine, 10);
    engine.add_request(request(1, &[(2, 64)], 1));
    run_to_end(&mut engine, 10);
    engine.add_request(request(2, &[(3, 64)], 1));
    run_to_end(&mut engine, 10);
    engine.add_request(request(3, &[(2, 64), (9, 1)], 1));
    engine.schedule().unwrap();
    let events: Vec<EngineEvent> = engine.drain_events().collect();
    assert_eq!(
        events,
        vec![EngineEvent::Admitted {
            id: RequestId(3),
            cached_tokens: 64
        }],
        "B survived"
    );
    engine.complete_step(&mut stream());
    engine.drain_events().count();
    engine.add_request(request(4, &[(1, 64), (9, 1)], 1));
    engine.schedule().unwrap();
    let events: Vec<EngineEvent> = engine.drain_events().collect();
    assert_eq!(
        events[0],
        EngineEvent::Admitted {
            id: RequestId(4),
            cached_tokens: 0
        },
        "A was evicted"
    );
}

#[test]
fn prefix_caching_off_never_hits() {
    let mut c = config();
    c.enable_prefix_caching = false;
    let mut engine = Engine::new(c);
    engine.add_request(request(0, &[(42, 64)], 1));
    run_to_end(&mut engine, 10);
    engine.add_request(request(1, &[(42, 64)], 1));
    engine.schedule().unwrap();
    let events: Vec<EngineEvent> = engine.drain_events().collect();
    assert_eq!(
        events,
        vec![EngineEvent::Admitted {
            id: RequestId(1),
            cached_tokens: 0
        }]
    );
}

#[test]
fn draft_tokens_take_budget_and_accepted_plus_one_tokens_are_emitted() {
    let mut c = config();
    c.max_num_batched_tokens = 10;
    c.spec = Some(SpecConfig {
        num_spec_tokens: 3,
        acceptance: vec![1.0, 1.0, 1.0],
        eagle_style: true,
        lookahead_tokens: 3,
        draft_slots: 0,
    });
    let mut engine = Engine::new(c);
    let mut rng = stream();
    engine.add_request(request(0, &[(1, 8)], 100));
    engine.add_request(request(1, &[(2, 8)], 100));
    // First step: the two prompts (8 + 2 of the second, budget 10); no drafts.
    engine.schedule().unwrap();
    assert_eq!(
        engine.last_schedule(),
        vec![(RequestId(0), 8), (RequestId(1), 2)]
    );
    engine.complete_step(&mut rng);
    // Request 0 decodes with 3 drafts: 4 tokens of budget; request 1
    // finishes its prompt with 6.
    let batch = engine.schedule().unwrap();
    assert_eq!(
        engine.last_schedule(),
        vec![(RequestId(0), 4), (RequestId(1), 6)]
    );
    assert_eq!((batch.decode_tokens, batch.spec_tokens), (4, 3));
    engine.drain_events().count();
    engine.complete_step(&mut rng);
    let events: Vec<EngineEvent> = engine.drain_events().collect();
    // Every draft accepted: 3 + 1 tokens for request 0, one for request 1.
    assert!(events.contains(&EngineEvent::Emitted {
        id: RequestId(0),
        tokens: 4
    }));
    assert!(events.contains(&EngineEvent::Emitted {
        id: RequestId(1),
        tokens: 1
    }));
    // Both decode now: 4 + 4 of the 10-token budget... and the budget binds
    // a third.
    engine.schedule().unwrap();
    assert_eq!(
        engine.last_schedule(),
        vec![(RequestId(0), 4), (RequestId(1), 4)]
    );
}

#[test]
fn rejected_drafts_roll_back() {
    let mut c = config();
    c.spec = Some(SpecConfig {
        num_spec_tokens: 2,
        acceptance: vec![0.0, 0.0],
        eagle_style: false,
        lookahead_tokens: 0,
        draft_slots: 0,
    });
    let mut engine = Engine::new(c);
    let mut rng = stream();
    engine.add_request(request(0, &[(1, 8)], 50));
    engine.schedule().unwrap();
    engine.complete_step(&mut rng);
    assert_eq!(engine.computed_tokens(RequestId(0)), Some(8));
    engine.schedule().unwrap();
    assert_eq!(engine.last_schedule(), vec![(RequestId(0), 3)]);
    engine.complete_step(&mut rng);
    // Nothing accepted: one token emitted, the two drafts rolled back.
    assert_eq!(engine.computed_tokens(RequestId(0)), Some(9));
}

#[test]
fn a_prompt_at_max_model_len_is_rejected_and_output_is_capped() {
    let mut c = config();
    c.max_model_len = 100;
    let mut engine = Engine::new(c);
    engine.add_request(request(0, &[(1, 100)], 5));
    assert_eq!(
        engine.drain_events().collect::<Vec<_>>(),
        vec![EngineEvent::Rejected { id: RequestId(0) }]
    );
    engine.add_request(request(1, &[(1, 90)], 50));
    let events = run_to_end(&mut engine, 100);
    assert!(events.contains(&EngineEvent::Finished {
        id: RequestId(1),
        output_tokens: 10
    }));
}

#[test]
fn graphs_pad_batches_and_dbo_marks_splits() {
    let mut c = config();
    c.graphs = Graphs {
        mode: CudaGraphMode::FullAndPiecewise,
        sizes: pdsim_spec::resolve::generated_capture_sizes(512)
            .into_iter()
            .map(|s| s as u32)
            .collect(),
    };
    c.dbo = Dbo {
        enabled: true,
        decode_threshold: 2,
        prefill_threshold: 512,
    };
    let mut engine = Engine::new(c);
    let mut rng = stream();
    for id in 0..3 {
        engine.add_request(request(id, &[(id as u64, 5)], 10));
    }
    let batch = engine.schedule().unwrap();
    assert_eq!(
        (batch.graph, batch.padded_tokens, batch.dbo),
        (pdsim_cost::GraphMode::Piecewise, 16, false)
    );
    engine.complete_step(&mut rng);
    let batch = engine.schedule().unwrap();
    // Three uniform decodes: a full graph padded from 3 to 4, split by DBO.
    assert_eq!(
        (batch.graph, batch.padded_tokens, batch.dbo),
        (pdsim_cost::GraphMode::Full, 4, true)
    );
}

#[test]
fn sub_block_prefix_reuse_hits_in_units_smaller_than_a_block() {
    // vllm-rbln: 4096-token blocks reused in 512-token units; here 64-token
    // blocks and 16-token units, the same ratio of one block to four units.
    let mut c = config();
    c.block_size = 64;
    c.prefix_unit = 16;
    c.max_num_batched_tokens = 1000;
    let mut engine = Engine::new(c.clone());
    engine.add_request(request(0, &[(1, 40), (2, 60)], 1));
    run_to_end(&mut engine, 10);
    // 40 shared tokens: two whole 16-token units hit, although not one whole
    // 64-token block does.
    engine.add_request(request(1, &[(1, 40), (3, 60)], 1));
    engine.schedule().unwrap();
    let events: Vec<EngineEvent> = engine.drain_events().collect();
    assert_eq!(
        events,
        vec![EngineEvent::Admitted {
            id: RequestId(1),
            cached_tokens: 32
        }]
    );
    assert_eq!(engine.last_schedule(), vec![(RequestId(1), 68)]);
    engine.complete_step(&mut stream());
    engine.check_full().unwrap();
    // With whole-block reuse the same prompts share nothing.
    c.prefix_unit = 64;
    let mut whole = Engine::new(c);
    whole.add_request(request(0, &[(1, 40), (2, 60)], 1));
    run_to_end(&mut whole, 10);
    whole.add_request(request(1, &[(1, 40), (3, 60)], 1));
    whole.schedule().unwrap();
    let events: Vec<EngineEvent> = whole.drain_events().collect();
    assert_eq!(
        events,
        vec![EngineEvent::Admitted {
            id: RequestId(1),
            cached_tokens: 0
        }]
    );
}

#[test]
fn whole_blocks_hit_under_sub_block_reuse_are_shared_not_copied() {
    let mut c = config();
    c.block_size = 64;
    c.prefix_unit = 16;
    c.max_num_batched_tokens = 1000;
    c.num_blocks = 1 + 4;
    let mut engine = Engine::new(c);
    let mut rng = stream();
    // A long-running request holds two full blocks of the shared prefix.
    engine.add_request(request(0, &[(1, 130)], 1000));
    engine.schedule().unwrap();
    engine.complete_step(&mut rng);
    engine.drain_events().count();
    let free_before = engine.pool().free();
    engine.add_request(request(1, &[(1, 130), (5, 10)], 5));
    engine.schedule().unwrap();
    let events: Vec<EngineEvent> = engine.drain_events().collect();
    assert_eq!(
        events,
        vec![EngineEvent::Admitted {
            id: RequestId(1),
            cached_tokens: 128
        }]
    );
    // 140 tokens need three blocks: two shared, one new.
    assert_eq!(free_before - engine.pool().free(), 1);
    engine.check_full().unwrap();
    // The two shared blocks are request 0's two blocks, each held once
    // more: when request 0 goes, only its own third block is freed.
    engine.complete_step(&mut rng);
    engine.drain_events().count();
    let free_before = engine.pool().free();
    engine.abort(RequestId(0));
    assert_eq!(engine.pool().free() - free_before, 1);
    engine.check_full().unwrap();
}

/// vLLM caches full blocks when they are scheduled
/// (`KVCacheManager.allocate_slots` ends with `cache_blocks(request,
/// min(num_computed_tokens + num_new_tokens, request.num_tokens))`), so
/// three requests sharing a 64-token prefix and admitted in one step get
/// 84, 20 and 20 tokens: the second and third hit the first's four blocks.
/// The `BlockStored` events of that step name each of those four blocks
/// once, parent-linked, and every hash they name is in the pool's cache, so
/// a precise prefix index built from the events sees what the pool has.
#[test]
fn requests_admitted_later_in_a_step_hit_the_blocks_scheduled_before_them() {
    let mut engine = Engine::new(pdsim_engine::EngineConfig {
        max_num_batched_tokens: 2048,
        ..config()
    });
    engine.enable_kv_events();
    for id in 0..3 {
        engine.add_request(request(id, &[(7, 64), (100 + id as u64, 20)], 4));
    }
    engine.schedule().expect("a step");
    assert_eq!(
        engine.last_schedule(),
        vec![(RequestId(0), 84), (RequestId(1), 20), (RequestId(2), 20)]
    );
    let log = engine.kv_events_mut().expect("events on").clone();
    let mut stored = Vec::new();
    for event in &log.events {
        if let pdsim_core::kv_events::KvEvent::Stored { hashes, .. } = event {
            stored.extend_from_slice(log.hashes_of(hashes));
        }
    }
    // Request 0's five full blocks (80 of its 84 tokens); the others
    // schedule 20 tokens past a 64-token hit: their fifth block (80 tokens)
    // is full too and differs per request.
    assert_eq!(stored.len(), 7, "{stored:?}");
    let mut unique = stored.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), stored.len(), "a block stored twice");
    for hash in &stored {
        assert!(
            engine.pool().lookup(*hash).is_some(),
            "event names an uncached block"
        );
    }
    let mut rng = stream();
    engine.complete_step(&mut rng);
    engine.check_full().expect("invariants hold");
}

/// The full-prompt admission gate counts the prompt alone, not the EAGLE
/// lookahead: `KVCacheManager.allocate_slots(full_sequence_must_fit=True)`
/// (`vllm/v1/core/kv_cache_manager.py`) checks `min(request.num_tokens,
/// max_model_len)` tokens, and adds `num_lookahead_tokens` only to the slots
/// of the chunk being scheduled. A 64-token prompt in four free blocks, with
/// a 32-token budget and three lookahead slots, is admitted: the prompt
/// needs four blocks, the chunk plus lookahead (35 tokens) three.
#[test]
fn the_full_prompt_check_leaves_out_the_lookahead_slots() {
    let mut c = config();
    c.num_blocks = 1 + 4;
    c.max_num_batched_tokens = 32;
    c.enable_prefix_caching = false;
    c.reserve_full_prompt = true;
    c.spec = Some(SpecConfig {
        num_spec_tokens: 3,
        acceptance: vec![1.0, 1.0, 1.0],
        eagle_style: true,
        lookahead_tokens: 3,
        draft_slots: 0,
    });
    let mut engine = Engine::new(c);
    engine.add_request(request(0, &[(1, 64)], 2));
    assert!(
        engine.schedule().is_some(),
        "the prompt fits without lookahead"
    );
    assert_eq!(engine.last_schedule(), vec![(RequestId(0), 32)]);
    assert_eq!(engine.pool().free(), 1);
}

#[test]
fn preempting_a_request_already_scheduled_this_step_refunds_its_tokens() {
    // vLLM's `Scheduler.schedule` (running loop): when the victim of a
    // preemption was scheduled earlier in the same loop, it is removed from
    // the step and `token_budget += num_scheduled_tokens[victim]`, so the
    // requests after it may use those tokens.
    let mut c = config();
    c.policy = Policy::Priority;
    c.num_blocks = 1 + 20;
    c.enable_prefix_caching = false;
    c.reserve_full_prompt = false;
    let mut engine = Engine::new(c);
    let mut rng = stream();
    let step = |engine: &mut Engine, rng: &mut Stream| {
        engine.schedule().unwrap();
        engine.complete_step(rng);
        engine.drain_events().collect::<Vec<_>>()
    };
    // A (priority 5, the least urgent) prefills 200 tokens in two 100-token
    // steps and holds 13 blocks.
    let mut a = request(0, &[(1, 200)], 50);
    a.priority = 5;
    engine.add_request(a);
    step(&mut engine, &mut rng);
    step(&mut engine, &mut rng);
    // B (32 tokens, 2 blocks) and C (300 tokens, chunked) arrive, both
    // priority 1. Step 3: A decodes 1, B prefills 32, C its first 67 in 5
    // blocks; all 20 blocks are taken.
    let mut b = request(1, &[(2, 32)], 50);
    b.priority = 1;
    let mut cc = request(2, &[(3, 300)], 50);
    cc.priority = 1;
    engine.add_request(b);
    engine.add_request(cc);
    step(&mut engine, &mut rng);
    assert_eq!(
        engine.running_ids(),
        vec![RequestId(0), RequestId(1), RequestId(2)]
    );
    // Step 4: A decodes (budget 100 → 99); B's 33rd token needs a block and
    // none is free, so the least urgent, A, is preempted although it was
    // already scheduled: its 1 token goes back to the budget (→ 100), B
    // takes 1 (→ 99), and C's chunk is the 99 left, not 98.
    engine.schedule().unwrap();
    let events: Vec<EngineEvent> = engine.drain_events().collect();
    assert_eq!(events, vec![EngineEvent::Preempted { id: RequestId(0) }]);
    assert_eq!(
        engine.last_schedule(),
        vec![(RequestId(1), 1), (RequestId(2), 99)]
    );
    engine.check_full().unwrap();
}

/// `BlockStored` for a prefill that spans steps names, in each step, the
/// blocks that step filled, with the tokens of exactly those blocks
/// (`BlockPool.cache_full_blocks`: `blocks[num_cached_blocks:num_full_blocks]`
/// and their token ids) and the last block before them as parent. A prompt
/// of 24 tokens of segment 1 and 200 of segment 2 with a 100-token budget:
/// step 1 computes tokens 0–99 and fills blocks 0–5 (tokens 0–95): segment
/// 1's 24 tokens and segment 2's first 72; step 2 computes 100–199 and
/// fills blocks 6–11 (tokens 96–191): segment 2's tokens 72–167.
#[test]
fn stored_events_name_the_tokens_of_the_blocks_each_step_filled() {
    use pdsim_core::kv_events::{KvEvent, Piece};
    let mut engine = Engine::new(config());
    engine.enable_kv_events();
    engine.add_request(request(0, &[(1, 24), (2, 200)], 4));
    let mut rng = stream();
    let mut steps = Vec::new();
    for _ in 0..2 {
        engine.schedule().expect("a step");
        engine.complete_step(&mut rng);
        steps.push(std::mem::take(engine.kv_events_mut().expect("events on")));
    }
    let stored = |log: &pdsim_core::kv_events::KvEventBatch| {
        let [
            KvEvent::Stored {
                parent,
                hashes,
                pieces,
                ..
            },
        ] = &log.events[..]
        else {
            panic!("one stored event: {:?}", log.events);
        };
        (
            *parent,
            log.hashes_of(hashes).to_vec(),
            log.pieces_of(pieces).to_vec(),
        )
    };
    let (parent, first, pieces) = stored(&steps[0]);
    assert_eq!(parent, None);
    assert_eq!(first.len(), 6);
    assert_eq!(
        pieces,
        vec![
            Piece {
                id: 1,
                start: 0,
                len: 24
            },
            Piece {
                id: 2,
                start: 0,
                len: 72
            }
        ]
    );
    let (parent, second, pieces) = stored(&steps[1]);
    assert_eq!(parent, Some(first[5]), "chained to the last block before");
    assert_eq!(second.len(), 6);
    assert_eq!(
        pieces,
        vec![Piece {
            id: 2,
            start: 72,
            len: 96
        }]
    );
}

/// Blocks filled by decoding name the output's tokens by their offset in
/// the output: a 20-token prompt decoding 30 tokens fills block 1 with the
/// prompt's last 4 tokens and the output's first 12 (offsets 0–11), and
/// block 2 with the output's next 16 (offsets 12–27).
#[test]
fn stored_events_name_output_tokens_by_their_offset_in_the_output() {
    use pdsim_core::kv_events::KvEvent;
    let mut engine = Engine::new(config());
    engine.enable_kv_events();
    engine.add_request(request(0, &[(1, 20)], 30));
    let mut rng = stream();
    let mut pieces = Vec::new();
    while engine.has_work() {
        engine.schedule().expect("a step");
        engine.complete_step(&mut rng);
        let log = std::mem::take(engine.kv_events_mut().expect("events on"));
        for event in &log.events {
            if let KvEvent::Stored { pieces: p, .. } = event {
                pieces.extend(log.pieces_of(p).iter().copied());
            }
        }
    }
    let prompt: Vec<(u32, u32)> = pieces
        .iter()
        .filter(|p| p.id == 1)
        .map(|p| (p.start, p.len))
        .collect();
    assert_eq!(prompt, [(0, 16), (16, 4)]);
    let output: Vec<(u32, u32)> = pieces
        .iter()
        .filter(|p| p.id != 1)
        .map(|p| (p.start, p.len))
        .collect();
    assert_eq!(output, [(0, 12), (12, 16)], "{pieces:?}");
}

/// With `enable_chunked_prefill: false` a prompt that does not fit the
/// budget left is not cut: the waiting loop stops
/// (`if not self.scheduler_config.enable_chunked_prefill and
/// num_new_tokens > token_budget: break`, `Scheduler.schedule`). Two
/// 60-token prompts and a 100-token budget: the second waits a step; a
/// prompt exactly as long as the budget left is taken whole.
#[test]
fn without_chunked_prefill_a_prompt_waits_until_it_fits_whole() {
    let mut engine = Engine::new(pdsim_engine::EngineConfig {
        enable_chunked_prefill: false,
        ..config()
    });
    engine.add_request(request(0, &[(1, 60)], 4));
    engine.add_request(request(1, &[(2, 60)], 4));
    engine.schedule().expect("a step");
    assert_eq!(engine.last_schedule(), vec![(RequestId(0), 60)]);
    let mut rng = stream();
    engine.complete_step(&mut rng);
    // Now one decode token and the second prompt: 61 of 100.
    engine.schedule().expect("a step");
    assert_eq!(
        engine.last_schedule(),
        vec![(RequestId(0), 1), (RequestId(1), 60)]
    );
    let mut engine = Engine::new(pdsim_engine::EngineConfig {
        enable_chunked_prefill: false,
        ..config()
    });
    engine.add_request(request(0, &[(1, 60)], 4));
    engine.add_request(request(1, &[(2, 40)], 4));
    engine.schedule().expect("a step");
    assert_eq!(
        engine.last_schedule(),
        vec![(RequestId(0), 60), (RequestId(1), 40)],
        "40 tokens fit the 40 left"
    );
}

/// The batch handed to the cost model sums, over the scheduled requests,
/// the context each one's attention reads (tokens already computed plus its
/// new ones) and its causal query-key pairs, q·c + q·(q + 1)/2 for q new
/// tokens after c computed. Three 20-token prompts, then (their first
/// tokens sampled) one decode token each after 20 computed and a 97-token
/// chunk of a new prompt:
/// - step 1: context 3 · 20 = 60; pairs 3 · (20 · 21 / 2) = 630.
/// - step 2: context 3 · 21 + 97 = 160; pairs 3 · (20 + 1) + 97 · 98 / 2 =
///   63 + 4753 = 4816.
#[test]
fn the_batch_sums_attention_context_and_causal_pairs() {
    let mut engine = Engine::new(config());
    let mut rng = stream();
    for id in 0..3 {
        engine.add_request(request(id, &[(id as u64, 20)], 10));
    }
    let batch = engine.schedule().unwrap();
    assert_eq!((batch.attn_context_tokens, batch.attn_pairs), (60, 630));
    assert_eq!(
        (batch.num_reqs, batch.prefill_reqs, batch.decode_reqs),
        (3, 3, 0)
    );
    engine.complete_step(&mut rng);
    engine.add_request(request(9, &[(9, 500)], 10));
    let batch = engine.schedule().unwrap();
    assert_eq!((batch.prefill_tokens, batch.decode_tokens), (97, 3));
    assert_eq!((batch.attn_context_tokens, batch.attn_pairs), (160, 4816));
}

/// `vllm:kv_cache_usage_perc` is 1 − free / usable blocks: 40 prompt
/// tokens and their first output hold 3 of the 1000 usable 16-token
/// blocks, 0.3 %; with prefix caching, freed blocks stay cached but count
/// as free, so usage returns to 0 when the request ends.
#[test]
fn kv_usage_is_the_share_of_usable_blocks_held() {
    let mut engine = Engine::new(config());
    assert_eq!(engine.kv_usage(), 0.0);
    // Empty (what lets the EPP's scrape loop over it sleep) until it gets
    // a request, whether or not the request holds blocks yet.
    assert!(engine.is_empty());
    engine.add_request(request(0, &[(1, 40)], 2));
    assert!(!engine.is_empty());
    engine.schedule().expect("a step");
    assert!(!engine.is_empty());
    assert!(
        (engine.kv_usage() - 3.0 / 1000.0).abs() < 1e-12,
        "{}",
        engine.kv_usage()
    );
    engine.complete_step(&mut stream());
    run_to_end(&mut engine, 10);
    assert!(!engine.has_requests());
    assert_eq!(engine.kv_usage(), 0.0);
    assert!(engine.is_empty());
}

/// A decode that fills its last block caches it in the step that computes
/// that block's last token, as `allocate_slots` caches
/// `num_computed_tokens + num_new_tokens` even when it needs no new block
/// (`KVCacheManager.allocate_slots`, `vllm/v1/core/kv_cache_manager.py`):
/// a 31-token prompt fills block 0 in its prefill; the first decode step
/// computes token 31 (the 32nd), filling block 1, and stores it then.
#[test]
fn a_decode_that_fills_a_block_stores_it_in_that_step() {
    use pdsim_core::kv_events::KvEvent;
    let mut engine = Engine::new(config());
    engine.enable_kv_events();
    engine.add_request(request(0, &[(1, 31)], 4));
    let mut rng = stream();
    let mut stored = Vec::new();
    for _ in 0..3 {
        engine.schedule().expect("a step");
        engine.complete_step(&mut rng);
        let log = std::mem::take(engine.kv_events_mut().expect("events on"));
        let blocks: usize = log
            .events
            .iter()
            .map(|e| match e {
                KvEvent::Stored { hashes, .. } => log.hashes_of(hashes).len(),
                _ => 0,
            })
            .sum();
        stored.push(blocks);
    }
    assert_eq!(stored, vec![1, 1, 0], "blocks stored per step");
}

#[test]
fn a_request_that_preempts_itself_ends_the_running_loop_under_priority() {
    // Priority scheduling, six usable blocks. A (priority 0) and B
    // (priority 5, the lowest) are admitted first, C (priority 1) a step
    // later, so the running list is A, B, C and every block is held. In
    // the third step A and C have room for their next token, B needs a
    // third block: B is its own victim, and vLLM then breaks out of the
    // running loop (`if new_blocks is None: break`, `Scheduler.schedule`),
    // so C, after it, is not scheduled this step.
    let mut c = config();
    c.policy = pdsim_engine::Policy::Priority;
    c.num_blocks = 1 + 6;
    let mut engine = Engine::new(c);
    let mut rng = stream();
    let with_priority = |id: u32, tokens: u32, priority: i32| {
        let mut r = request(id, &[(u64::from(id) + 10, tokens)], 50);
        r.priority = priority;
        r
    };
    engine.add_request(with_priority(0, 20, 0));
    engine.add_request(with_priority(1, 31, 5));
    engine.schedule().unwrap();
    engine.complete_step(&mut rng);
    engine.add_request(with_priority(2, 20, 1));
    engine.schedule().unwrap();
    assert_eq!(
        engine.last_schedule(),
        vec![(RequestId(0), 1), (RequestId(1), 1), (RequestId(2), 20)]
    );
    assert_eq!(engine.pool().free(), 0);
    engine.complete_step(&mut rng);
    engine.drain_events().count();
    engine.schedule().unwrap();
    assert_eq!(engine.last_schedule(), vec![(RequestId(0), 1)]);
    engine.check_full().unwrap();
}
