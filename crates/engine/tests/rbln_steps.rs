//! vllm-rbln's step phases (`lone_prefill_steps`): a step runs decodes or
//! one prefill alone, never both (`RBLNScheduler.schedule`,
//! `vllm_rbln/v1/core/rbln_scheduler.py`, guards (A)-(D) of its
//! "no-mixed-batching invariant"; `is_prefill` in
//! `vllm_rbln/v1/core/utils.py`). Each case is run with the flag off too,
//! where vLLM's scheduler mixes the same requests into one step, so a
//! case that passed without the mechanism could not pass both ways. The
//! same scheduler caches a step's blocks only once its schedule is final
//! (`delay_cache_blocks`).

use pdsim_core::{Purpose, RequestId, Stream};
use pdsim_engine::{Engine, EngineConfig, KvTransfer, NewRequest};

mod common;

fn request(id: u32, segments: &[(u64, u32)], output: u32) -> NewRequest {
    common::request(id, segments, output, KvTransfer::Local)
}

/// vllm-rbln's scheduler (`lone`: its step phases and its delayed block
/// caching) or vLLM's.
fn engine(lone: bool, prefix_caching: bool) -> Engine {
    let config = EngineConfig {
        lone_prefill_steps: lone,
        delay_cache_blocks: lone,
        enable_prefix_caching: prefix_caching,
        ..common::config()
    };
    Engine::new(config)
}

/// Schedules and completes one step; what it scheduled, as (request,
/// tokens).
fn step(engine: &mut Engine, rng: &mut Stream) -> Vec<(u32, u32)> {
    engine.schedule().expect("something to schedule");
    let scheduled = engine
        .last_schedule()
        .into_iter()
        .map(|(id, tokens)| (id.0, tokens))
        .collect();
    engine.complete_step(rng);
    engine
        .check_full()
        .expect("invariants hold after every step");
    engine.drain_events().for_each(drop);
    scheduled
}

fn stream() -> Stream {
    Stream::new(1, Purpose::Acceptance, 0)
}

/// A decoding request A and a 250-token prompt B arriving while it
/// decodes, with a budget of 100 tokens a step.
fn decode_then_long_prompt(lone: bool) -> Vec<Vec<(u32, u32)>> {
    let mut engine = engine(lone, false);
    let mut rng = stream();
    engine.add_request(request(0, &[(1, 30)], 20));
    let mut steps = vec![step(&mut engine, &mut rng), step(&mut engine, &mut rng)];
    engine.add_request(request(1, &[(2, 250)], 20));
    for _ in 0..4 {
        steps.push(step(&mut engine, &mut rng));
    }
    steps
}

#[test]
fn a_prefill_takes_its_steps_alone_and_the_decodes_wait() {
    let lone = decode_then_long_prompt(true);
    assert_eq!(
        lone,
        vec![
            vec![(0, 30)],
            vec![(0, 1)],
            // (D): B is admitted and A's decode leaves the step; B's chunk
            // is the whole budget, not the 99 tokens A's decode left.
            vec![(1, 100)],
            // (A) and (B): B, still prefilling and last in the running
            // queue, runs alone; A waits.
            vec![(1, 100)],
            vec![(1, 50)],
            // B has one token left (its first sampled one): a decode.
            vec![(0, 1), (1, 1)],
        ]
    );
    // vLLM mixes them: A decodes every step and B takes the rest.
    let mixed = decode_then_long_prompt(false);
    assert_eq!(mixed[2], vec![(0, 1), (1, 99)]);
    assert_eq!(mixed[3], vec![(0, 1), (1, 99)]);
}

/// Two prompts waiting together.
fn two_prompts(lone: bool) -> Vec<Vec<(u32, u32)>> {
    let mut engine = engine(lone, false);
    let mut rng = stream();
    engine.add_request(request(0, &[(1, 30)], 5));
    engine.add_request(request(1, &[(2, 40)], 5));
    (0..3).map(|_| step(&mut engine, &mut rng)).collect()
}

#[test]
fn one_prefill_is_admitted_a_step() {
    // "we restrict the prefill batch size to 1 for now": the second prompt
    // waits for a step of its own, then both decode.
    assert_eq!(
        two_prompts(true),
        vec![vec![(0, 30)], vec![(1, 40)], vec![(0, 1), (1, 1)]]
    );
    assert_eq!(two_prompts(false)[0], vec![(0, 30), (1, 40)]);
}

/// A cached 48-token prefix, then three arrivals: D1 and D3 repeat it with
/// one token more (a full hit: one token left, decode-ready at
/// admission), P2 is a new 40-token prompt between them.
fn hits_around_a_prompt(lone: bool) -> Vec<Vec<(u32, u32)>> {
    let mut engine = engine(lone, true);
    let mut rng = stream();
    engine.add_request(request(0, &[(1, 48)], 1));
    step(&mut engine, &mut rng);
    engine.add_request(request(1, &[(1, 48), (2, 1)], 6));
    engine.add_request(request(2, &[(3, 40)], 6));
    engine.add_request(request(3, &[(1, 48), (4, 1)], 6));
    (0..3).map(|_| step(&mut engine, &mut rng)).collect()
}

#[test]
fn a_full_hit_joins_the_decodes_and_a_prefill_after_it_waits() {
    assert_eq!(
        hits_around_a_prompt(true),
        vec![
            // D1 joins as a decode; (C): P2 is a prefill and a decode-ready
            // request was admitted this step, so the waiting loop ends.
            vec![(1, 1)],
            // P2 is admitted and D1's decode leaves the step (D).
            vec![(2, 40)],
            // P2 decodes; D3, tried as a prefill by (C) on its computed
            // tokens before the hit (none admitted yet), is decode-ready
            // once its hit counts and joins.
            vec![(1, 1), (2, 1), (3, 1)],
        ]
    );
    assert_eq!(
        hits_around_a_prompt(false)[0],
        vec![(1, 1), (2, 40), (3, 1)]
    );
}

#[test]
fn requests_end_under_step_phases_as_under_mixed_steps() {
    // Every request completes with its tokens either way; only the order
    // of steps differs.
    for lone in [true, false] {
        let mut engine = engine(lone, true);
        let mut rng = stream();
        for i in 0..12u32 {
            engine.add_request(request(
                i,
                &[(u64::from(i % 3), 64), (100 + u64::from(i), 20 + 13 * i)],
                3 + i % 5,
            ));
        }
        let mut finished = Vec::new();
        for _ in 0..500 {
            if engine.schedule().is_none() {
                break;
            }
            engine.complete_step(&mut rng);
            engine.check_full().expect("invariants hold");
            for event in engine.drain_events() {
                if let pdsim_engine::EngineEvent::Finished { id, .. } = event {
                    finished.push(id);
                }
            }
        }
        finished.sort();
        assert_eq!(finished, (0..12).map(RequestId).collect::<Vec<_>>());
    }
}

#[test]
fn a_prompts_last_token_is_a_decode_and_gives_way_to_a_new_prefill() {
    // `is_prefill` is "two or more tokens left": a 201-token prompt in
    // 100-token chunks has one token left after two steps, so it runs as a
    // decode, and a prompt waiting then takes the step from it (D); it runs
    // its last token once no prefill is waiting.
    let mut engine = engine(true, false);
    let mut rng = stream();
    engine.add_request(request(0, &[(1, 201)], 4));
    let mut steps = vec![step(&mut engine, &mut rng), step(&mut engine, &mut rng)];
    engine.add_request(request(1, &[(2, 150)], 4));
    for _ in 0..3 {
        steps.push(step(&mut engine, &mut rng));
    }
    assert_eq!(
        steps,
        vec![
            vec![(0, 100)],
            vec![(0, 100)],
            vec![(1, 100)],
            vec![(1, 50)],
            vec![(0, 1), (1, 1)],
        ]
    );
}

/// Schedules and completes one step: what it scheduled, and how many
/// blocks its KV events say entered the cache.
fn step_stored(engine: &mut Engine, rng: &mut Stream) -> (Vec<(u32, u32)>, usize) {
    let scheduled = step(engine, rng);
    let batch = engine.kv_events_mut().expect("KV events are on");
    let stored = batch
        .events
        .iter()
        .map(|e| match e {
            pdsim_core::kv_events::KvEvent::Stored { hashes, .. } => hashes.len(),
            pdsim_core::kv_events::KvEvent::Removed { .. } => 0,
        })
        .sum();
    batch.clear();
    (scheduled, stored)
}

#[test]
fn a_decode_a_prefill_takes_the_step_from_caches_nothing() {
    // A's 31-token prompt fills one block; its first decode, at position
    // 31, fills the second. B's 20-token prompt arrives before that decode
    // step: under step phases B takes the step (D), and A's block, which
    // A's allocation covered before B was admitted, enters the cache only
    // in the step that computes it (vllm-rbln caches once the schedule is
    // final). vLLM runs both in one step and caches both blocks then.
    for lone in [true, false] {
        let mut engine = engine(lone, true);
        engine.enable_kv_events();
        let mut rng = stream();
        engine.add_request(request(0, &[(1, 31)], 10));
        let mut steps = vec![step_stored(&mut engine, &mut rng)];
        engine.add_request(request(1, &[(2, 20)], 4));
        steps.push(step_stored(&mut engine, &mut rng));
        steps.push(step_stored(&mut engine, &mut rng));
        if lone {
            assert_eq!(
                steps,
                vec![
                    (vec![(0, 31)], 1),
                    (vec![(1, 20)], 1),
                    (vec![(0, 1), (1, 1)], 1),
                ]
            );
        } else {
            assert_eq!(
                steps,
                vec![
                    (vec![(0, 31)], 1),
                    (vec![(0, 1), (1, 20)], 2),
                    (vec![(0, 1), (1, 1)], 0),
                ]
            );
        }
    }
}
