//! The engine's cost per step: `schedule()` plus `complete_step()` on one
//! engine core holding 256 decoding requests (and the same with a chunked
//! prefill riding along), the hot loop of every simulation.

use criterion::{Criterion, criterion_group, criterion_main};
use pdsim_core::{Prompt, Purpose, RequestId, Segment, SimTime, Stream};
use pdsim_engine::{CudaGraphMode, Dbo, Engine, EngineConfig, Graphs, NewRequest, Policy};

fn engine() -> Engine {
    Engine::new(EngineConfig {
        block_size: 16,
        prefix_unit: 16,
        num_blocks: 60_000,
        max_num_batched_tokens: 8192,
        max_num_seqs: 1024,
        long_prefill_token_threshold: 0,
        long_prefill_waiver_when_alone: true,
        policy: Policy::Fcfs,
        enable_prefix_caching: true,
        max_model_len: 131_072,
        reserve_full_prompt: true,
        unhashed_blocks_to_front: true,
        lone_prefill_steps: false,
        delay_cache_blocks: false,
        graphs: Graphs {
            mode: CudaGraphMode::FullAndPiecewise,
            sizes: pdsim_spec::resolve::generated_capture_sizes(512)
                .into_iter()
                .map(|s| s as u32)
                .collect(),
        },
        dbo: Dbo {
            enabled: false,
            decode_threshold: 32,
            prefill_threshold: 512,
        },
        spec: None,
        offload: None,
        offload_secondary: Vec::new(),
        lmcache: None,
        async_scheduling: false,
        enable_chunked_prefill: true,
        defer_block_free: false,
        drop_stale_output: false,
        pad_spec_decode: pdsim_engine::PadSpecDecode::Never,
        victim_blocks_must_be_freeable: true,
        kv_holding_first: true,
        async_load_reserve: pdsim_engine::AsyncLoadReserve::None,
        mamba: None,
        window: None,
    })
}

fn bench_steps(c: &mut Criterion) {
    let mut rng = Stream::new(1, Purpose::Acceptance, 0);
    let mut decoding = engine();
    for i in 0..256u32 {
        decoding.add_request(NewRequest {
            id: RequestId(i),
            arrival: SimTime(i as u64),
            priority: 0,
            prompt: Prompt::new(vec![
                Segment {
                    id: 7,
                    tokens: 1024,
                },
                Segment {
                    id: 1000 + i as u64,
                    tokens: 200,
                },
            ]),
            max_output_tokens: u32::MAX / 2,
            kv: pdsim_engine::KvTransfer::Local,
            output_id: None,
        });
    }
    // Prefill everything first.
    while decoding.schedule().is_some_and(|b| b.prefill_tokens > 0) {
        decoding.complete_step(&mut rng);
    }
    decoding.complete_step(&mut rng);
    let _ = decoding.drain_events().count();
    c.bench_function("engine_step_256_decodes", |b| {
        b.iter(|| {
            let batch = decoding.schedule();
            decoding.complete_step(&mut rng);
            let _ = decoding.drain_events().count();
            std::hint::black_box(batch)
        })
    });
}

criterion_group!(benches, bench_steps);
criterion_main!(benches);
