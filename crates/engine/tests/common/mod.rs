//! What the hand-built engine tests share: a small engine configuration and
//! a request built from `(segment id, tokens)` pairs.

use pdsim_core::{Prompt, RequestId, Segment, SimTime};
use pdsim_engine::{CudaGraphMode, Dbo, EngineConfig, Graphs, KvTransfer, NewRequest, Policy};

/// 16-token blocks, 1000 usable blocks, a 100-token budget, eight
/// sequences, prefix caching on, no CUDA graphs, DBO or speculation; tests
/// override what they exercise with `EngineConfig { .., ..config() }`.
/// An offload tier of `chunks` blocks as vLLM 0.31.0 runs it, with LRU.
#[allow(dead_code)]
pub fn offload(chunks: u64) -> pdsim_engine::offload::OffloadConfig {
    pdsim_engine::offload::OffloadConfig {
        chunks,
        policy: pdsim_engine::offload::EvictionPolicy::Lru,
        release: pdsim_engine::offload::Release::V0_31_0,
    }
}

pub fn config() -> EngineConfig {
    EngineConfig {
        block_size: 16,
        prefix_unit: 16,
        num_blocks: 1001,
        max_num_batched_tokens: 100,
        max_num_seqs: 8,
        long_prefill_token_threshold: 0,
        long_prefill_waiver_when_alone: true,
        policy: Policy::Fcfs,
        enable_prefix_caching: true,
        max_model_len: 4096,
        reserve_full_prompt: true,
        unhashed_blocks_to_front: false,
        lone_prefill_steps: false,
        delay_cache_blocks: false,
        graphs: Graphs {
            mode: CudaGraphMode::None,
            sizes: vec![],
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
    }
}

/// Request `id`, arriving at `id` ns with priority 0, whose prompt is the
/// given `(segment id, tokens)` pairs.
pub fn request(id: u32, segments: &[(u64, u32)], output: u32, kv: KvTransfer) -> NewRequest {
    NewRequest {
        id: RequestId(id),
        arrival: SimTime(id as u64),
        priority: 0,
        prompt: Prompt::new(
            segments
                .iter()
                .map(|(id, tokens)| Segment {
                    id: *id,
                    tokens: *tokens,
                })
                .collect(),
        ),
        max_output_tokens: output,
        kv,
        output_id: None,
    }
}
