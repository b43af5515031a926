//! The decode capacity of the second seed's deployment (seeds/001: MiniMax-M2.7
//! on Rebel100, decode DP4 with expert parallelism, EAGLE-3, max_num_seqs 8,
//! 4096-token blocks, fp8 KV), derived term by term the way vllm-rbln sizes
//! its KV cache, from constants whose sources are named beside them:
//!
//! - vllm-rbln (RBLN-SW/vllm-rbln v0.11.0, commit 95c7a25a):
//!   `vllm_rbln/v1/worker/rbln_worker.py` `determine_available_memory`,
//!   `vllm_rbln/v1/worker/utils.py` `estimate_available_memory` and
//!   `estimate_model_kernel_size`, `vllm_rbln/rbln_envs.py` defaults; their
//!   values are the `memory.rbln_estimate` keys of `rules/vllm-rbln.yaml`.
//! - the model's shape: `catalog/models/minimax-m2.7.yaml` (SOURCES.md).
//! - the device: `catalog/hardware/rebel100.yaml`, 144 GiB (SOURCES.md).
//! - vLLM's block count: `vllm/v1/core/kv_cache_utils.py`, memory // page
//!   size // layers, the EAGLE head's layer among them.
//!
//! The seed states 282,624 tokens (69 blocks) per decode engine; this
//! derivation reaches 528,384 (129 blocks). The seed says its figure is the
//! block count after vllm-rbln's dynamic KV resize at startup, which replaces
//! this estimate with one from the compiled graphs' own memory profile, and
//! that the estimate logged before the resize is larger. What the resize
//! subtracts (60 blocks, 30,240 MiB here) is measured on the device:
//! vllm-rbln 0.12.0's `DynamicKvSizer.compute_num_blocks`
//! (`vllm_rbln/v1/worker/dynamic_kv_sizer.py`, read from its wheel on PyPI)
//! sizes the cache from the compiled programs' KV placements and a device
//! memory snapshot after warm-up, which no source gives offline. So it is not
//! modelled; the tests hold the estimate to being an upper bound, and
//! validation warns of it for every vllm-rbln pool
//! (`kv-capacity-is-rbln-pre-resize-estimate`). (The 0.12.0 worker's
//! pre-compile estimate also counts its runtimes differently from v0.11.0's
//! and has a per-chiplet budget path; not read into this yet.)

use pdsim_spec::files::MemoryFiles;
use pdsim_spec::resolve::PoolResolution;
use pdsim_spec::validate::{Request, validate};

const SCENARIO: &str = include_str!("../../../scenarios/rebel100-minimax.yaml");
const DEPLOYMENT: &str = include_str!("../../../deployments/rebel100-4p4d.yaml");

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The figure seeds/001 states for a decode engine at max_num_seqs 8.
const SEED_DECODE_TOKENS: u64 = 282_624;

/// Resolves the deployment text against the seed's scenario and returns its
/// pools' resolutions.
fn resolve(deployment: &str) -> Vec<PoolResolution> {
    let files = MemoryFiles::new()
        .with("s.yaml", SCENARIO)
        .with("d.yaml", deployment)
        .with(
            "rebel100/epp-config.yaml",
            include_str!("../../../deployments/rebel100/epp-config.yaml"),
        );
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    assert_eq!(report.resolutions.len(), 1, "{:?}", report.problems);
    report.resolutions[0].pools.clone()
}

fn align_up(x: u64, unit: u64) -> u64 {
    x.div_ceil(unit) * unit
}

#[test]
fn the_seed_decode_engine_follows_vllm_rbln_term_by_term() {
    let pools = resolve(DEPLOYMENT);
    let decode = &pools[1];
    assert_eq!(decode.layout.dp, 4);
    assert_eq!(decode.engine.max_num_seqs, 8);
    let m = &decode.memory;
    let r = m
        .rbln
        .as_ref()
        .expect("the vllm-rbln pack sizes KV its own way");

    // Usable DRAM: int((REBEL_DRAM_NBYTES 144 GiB - REBEL_SYS_DRAM_NBYTES
    // 4 GiB) * gpu_memory_utilization 0.9, the pack's default).
    assert_eq!(m.device_bytes, 144 * GIB);
    assert_eq!(r.system_reserved_bytes, 4 * GIB);
    let usable = (140.0 * GIB as f64 * 0.9) as u64;
    assert_eq!(m.requested_bytes, usable);
    assert_eq!(usable, 135_291_469_824);

    // Target kernel (estimate_model_kernel_size). One layer on one of the
    // four EP ranks, 1 byte per fp8 weight: q/o 3072 × 48 × 128 each, k/v
    // 3072 × 8 × 128 each, two norms of 3072, the router 3072 × 256, and 64
    // of the 256 experts of 3 × 3072 × 1536. The final norm (3072) rides on
    // the layers; embedding and LM head (bf16, 200,064 × 3072 each) are the
    // two lm_heads_bytes the estimate subtracts.
    let h = 3072u64;
    let attention = h * 48 * 128 * 2 + h * 8 * 128 * 2;
    let layer = attention + 2 * h + h * 256 + 64 * 3 * h * 1536;
    assert_eq!(layer, 950_802_432);
    let lm_bytes = 200_064 * h * 2; // align(vocab, 64) = vocab here
    let layers_bytes = 62 * layer + h;
    let per_layer = align_up(layers_bytes.div_ceil(62), 2 * MIB);
    assert_eq!(per_layer, 454 * 2 * MIB);
    let lm_nbytes = align_up(lm_bytes, 2 * MIB);
    assert_eq!(lm_nbytes, 587 * 2 * MIB);
    let target_kernel = per_layer * 62 + lm_nbytes;
    assert_eq!(m.weights_bytes, target_kernel);
    assert_eq!(target_kernel, 57_470 * MIB);

    // Draft kernel: the EAGLE-3 head's one layer and fusion projection in
    // bf16 (pdsim's estimate of a head whose config.json is not in the
    // catalog: 4h² attention, 3 × h × 1536 MLP, 3h² fc), aligned, plus its
    // own LM head; the embedding it shares with the target is subtracted.
    let draft_layer = (4 * h * h + 3 * h * 1536 + 3 * h * h) * 2;
    let draft_kernel = align_up(draft_layer, 2 * MIB) + lm_nbytes;
    assert_eq!(m.draft_weights_bytes, draft_kernel);
    assert_eq!(draft_kernel, 1_328 * MIB);

    // Runtime buffers: one decode bucket (VLLM_RBLN_DECODE_BATCH_BUCKET_LIMIT
    // 1, so [max_num_seqs]); DP 4 > 1 turns on the padded MoE decode twin
    // (VLLM_RBLN_SPECIALIZE_MOE_DECODE); the drafter adds 1 + buckets.
    // 1 + (1 + 1) × 1 + (1 + 1) = 5 runtimes × 4 chiplets × 256 MiB.
    assert_eq!(r.decode_batch_buckets, vec![8]);
    assert!(r.specialized_moe_decode);
    assert_eq!(r.num_runtimes, 5);
    assert_eq!(m.cudagraph_bytes, 5 * 4 * 256 * MIB);
    assert_eq!(m.activation_peak_bytes, 0);
    assert_eq!(m.non_torch_bytes, 0);

    // KV: what is left; 8 KV heads over 4 chiplets split evenly.
    let kv = usable - target_kernel - draft_kernel - 5 * 4 * 256 * MIB;
    assert_eq!(r.kv_replicas, 1);
    assert_eq!(r.kv_heads_per_chiplet_uneven, 0);
    assert_eq!(m.kv_bytes, kv as i64);
    assert_eq!(kv, 65_106 * MIB);

    // Blocks: 62 target layers and the EAGLE head's one, 2 × 8 × 128 bytes
    // per token each in fp8, 4096 tokens per block = 504 MiB a block.
    let block = 63 * 2 * 8 * 128 * 4096;
    assert_eq!(block, 504 * MIB);
    assert_eq!(decode.kv.kv_bytes_per_token_rank, (63 * 2 * 8 * 128) as f64);
    assert_eq!(decode.kv.num_gpu_blocks, kv / block);
    assert_eq!(decode.kv.num_gpu_blocks, 129);
    assert_eq!(decode.kv.tokens_per_rank, 528_384);
    assert_eq!(decode.kv.tokens_per_engine, 4 * 528_384);

    // The seed's figure is the runtime's answer after the dynamic resize,
    // which it says is below the estimate taken before it.
    assert!(decode.kv.tokens_per_rank > SEED_DECODE_TOKENS);
    assert_eq!(SEED_DECODE_TOKENS % 4096, 0);
}

/// With the default single decode bucket, max_num_seqs does not enter the
/// estimate: the bucket is max_num_seqs wide, but there is still one runtime
/// per role. The seed's "each additional decode graph reserves memory" holds
/// only when the bucket limit is raised.
#[test]
fn max_num_seqs_alone_does_not_change_the_estimate() {
    let one = DEPLOYMENT.replace("      max_num_seqs: 8\n", "      max_num_seqs: 1\n");
    assert_ne!(one, DEPLOYMENT);
    let at_one = resolve(&one);
    let at_eight = resolve(DEPLOYMENT);
    let (a, b) = (&at_one[1], &at_eight[1]);
    assert_eq!(a.engine.max_num_seqs, 1);
    assert_eq!(
        a.memory.rbln.as_ref().unwrap().decode_batch_buckets,
        vec![1]
    );
    assert_eq!(a.memory.cudagraph_bytes, b.memory.cudagraph_bytes);
    assert_eq!(a.kv.num_gpu_blocks, b.kv.num_gpu_blocks);
}

/// The prefill pool (PP4, gpu_memory_utilization 0.8, no data parallelism)
/// takes the same formula: a quarter of the 62 layers rounded up (16) and
/// the LM head on the last stage, 1 + 1 + (1 + 1) runtimes without the MoE
/// twin, 17 layers of KV per block with the EAGLE head's.
#[test]
fn the_seed_prefill_rank_follows_the_same_formula() {
    let pools = resolve(DEPLOYMENT);
    let prefill = &pools[0];
    let m = &prefill.memory;
    let r = m.rbln.as_ref().unwrap();
    assert_eq!(prefill.layout.pp, 4);
    assert_eq!(m.requested_bytes, (140.0 * GIB as f64 * 0.8) as u64);
    assert!(!r.specialized_moe_decode);
    // max_num_seqs 4 // pp 4 = a decode bucket of 1.
    assert_eq!(r.decode_batch_buckets, vec![1]);
    assert_eq!(r.num_runtimes, 4);
    assert_eq!(m.cudagraph_bytes, 4 * 4 * 256 * MIB);
    let kv = m.requested_bytes - m.weights_bytes - m.draft_weights_bytes - m.cudagraph_bytes;
    assert_eq!(m.kv_bytes, kv as i64);
    let block = 17 * 2 * 8 * 128 * 4096;
    assert_eq!(prefill.kv.num_gpu_blocks, kv / block);
}
