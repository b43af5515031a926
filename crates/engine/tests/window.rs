//! What DeepSeek-V4.1's window groups change in the engine's reports: the
//! tokens a request reuses (its `Admitted` event, which becomes the record's
//! cached tokens) and vLLM's prefix-cache counter. The block decisions are
//! checked against vLLM's scheduler in `oracle.rs` (`sparse-*` cases).

use pdsim_core::{Purpose, Stream};
use pdsim_engine::window::WindowConfig;
use pdsim_engine::{Engine, EngineConfig, EngineEvent, KvTransfer};

mod common;

use common::request;

fn engine(cached: bool) -> Engine {
    Engine::new(EngineConfig {
        max_num_batched_tokens: 1000,
        unhashed_blocks_to_front: true,
        window: Some(WindowConfig {
            groups: 2,
            window: 16,
            block_size: 4,
            ring: true,
            admission_cap: WindowConfig::admission_cap(16, 4, 1000, 4096),
            replay: if cached { 0 } else { 16 },
            cached,
            hit_alignment: 16,
        }),
        ..common::config()
    })
}

/// Runs every request to its end; the cached tokens each was admitted with.
fn admitted(engine: &mut Engine) -> Vec<(u32, u32)> {
    let mut rng = Stream::new(3, Purpose::Acceptance, 0);
    let mut out = Vec::new();
    while engine.has_work() {
        if engine.schedule().is_some() {
            engine.complete_step(&mut rng);
        }
        engine.check_full().expect("invariants");
        for e in engine.drain_events() {
            if let EngineEvent::Admitted { id, cached_tokens } = e {
                out.push((id.0, cached_tokens));
            }
        }
    }
    out
}

#[test]
fn a_replayed_hit_reports_the_tokens_reused_and_counts_the_whole_hit() {
    // The same 100-token prompt twice: the second hits 96 tokens (six
    // 16-token blocks, the last token recomputed) and, under bounded
    // replay, recomputes the last 16 of them.
    let mut e = engine(false);
    e.add_request(request(1, &[(7, 100)], 2, KvTransfer::Local));
    assert_eq!(admitted(&mut e), vec![(1, 0)]);
    e.add_request(request(2, &[(7, 100)], 2, KvTransfer::Local));
    assert_eq!(admitted(&mut e), vec![(2, 80)]);
    assert_eq!(e.prefix_hits_tokens, 96);
    // A hit of one block, no longer than the window, is dropped.
    e.add_request(request(3, &[(9, 20)], 2, KvTransfer::Local));
    e.add_request(request(4, &[(9, 20)], 2, KvTransfer::Local));
    assert_eq!(admitted(&mut e), vec![(3, 0), (4, 0)]);
    assert_eq!(e.prefix_hits_tokens, 96);
}

#[test]
fn a_cached_window_reports_its_whole_hit() {
    // Without bounded replay the resend resumes at the tail kept before
    // its replay boundary (99 floored to 96) and recomputes nothing.
    let mut e = engine(true);
    e.add_request(request(1, &[(7, 100)], 2, KvTransfer::Local));
    assert_eq!(admitted(&mut e), vec![(1, 0)]);
    e.add_request(request(2, &[(7, 100)], 2, KvTransfer::Local));
    assert_eq!(admitted(&mut e), vec![(2, 96)]);
    assert_eq!(e.prefix_hits_tokens, 96);
}
