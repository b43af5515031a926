//! The roofline cost model: one engine step priced from the model's shapes,
//! the chip's datasheet figures and cited coefficients.
//!
//! # Why a roofline, and which one
//!
//! A step of a vLLM engine is a sequence of kernels. Each kernel is bound
//! either by the tensor cores or by HBM, so its time is the larger of its
//! FLOPs over the achievable FLOP rate and its bytes over the achievable
//! bandwidth, plus a fixed per-kernel latency that no size hides. The step
//! is the sum of its kernels, its collectives (serial with compute unless the
//! step is split for dual-batch overlap) and the host work that is not
//! hidden behind the GPU. This is the BLIS latency kernel's `NoOverlap`
//! estimate, which BLIS uses for vLLM because piecewise CUDA graphs leave
//! little overlap (`research/blis-documents.md` §8), with its coefficient
//! families: the GEMM efficiency envelope, the HBM derate and constant
//! latency, measured collective curves and the host overheads (§7).
//!
//! The peer roofline in inference-sim prices whole phases with one MFU per
//! phase and lands near 50% median E2E error and 279% TTFT error on its own
//! training experiments (`research/inference-sim.md` §2.1); the
//! changes here target where that error comes from: efficiency that depends
//! on the GEMM's row count (so small decode batches are slow per token and
//! large prefills are not), experts priced by the tokens each one actually
//! receives and the experts a step actually touches, attention priced from
//! the batch's real context and causal pairs, CUDA-graph padding, and
//! per-backend collectives.
//!
//! # Per step, per rank
//!
//! Everything is per rank of one data-parallel replica, on the slowest
//! pipeline stage (the one with ⌈layers/pp⌉ layers and the output head):
//!
//! * **Dense GEMMs** (attention projections, dense MLPs, shared experts and
//!   routers, TP-sharded): `2 · padded_tokens · params` FLOPs at
//!   `peak · eff(M)`, `eff(M) = eps_max · M / (M + m_half)` with `M` the
//!   padded token count, against the weights read once plus the activations
//!   in and out. fp8 weights run at the chip's FP8 rate with the fp8
//!   envelope when the chip has one; every other width runs at the BF16 rate
//!   with its bytes at the weight width (weight-only quantization).
//! * **Routed experts**: tokens into the expert-parallel group
//!   (`T · ep/tp` with EP, `T` without), `k` pairs per token shared over the
//!   ranks; the experts a step touches on this rank are
//!   `local · (1 − (1 − k/E)^tokens)` (uniform routing), each read once;
//!   `M` is the tokens per touched expert; the compute term is multiplied by
//!   `moe_routing_imbalance_median`.
//! * **Attention**: `4 · heads_per_rank · d · attn_pairs` FLOPs per layer at
//!   `peak · attention_eps_max`, against the KV bytes of `attn_context_tokens`
//!   read plus the new tokens written (per-rank KV as in
//!   `pdsim_spec::resolve`: GQA heads divided by tp floored at one, MLA
//!   replicated, both divided by dcp·pcp). `d` is the mean of the score and
//!   value widths. For MLA, decode tokens use the absorbed form vLLM's MLA
//!   decode kernels run (scores over `kv_lora_rank + qk_rope_head_dim`,
//!   values over `kv_lora_rank`: `d = 544` for DeepSeek-V3) and prefill
//!   tokens the unabsorbed form vLLM runs for prefill (`d = (192 + 128)/2`)
//!   after up-projecting the context's latents (`kv_b_proj`). The batch
//!   carries sums, not requests, so pairs are priced at the prefill width
//!   and each context token adds the decode path's extra width (exact for
//!   decodes, whose pairs equal their context), and the up-projected
//!   context is estimated from the pairs in excess of the context
//!   (estimate; see `stage`).
//! * **Output head**: the logits of `num_reqs + spec_tokens` rows
//!   (`vllm/v1/worker/gpu_model_runner.py`, `logits_indices`), vocab-parallel,
//!   16-bit.
//! * **Kernel floors**: `hbm_constant_latency` (AISimulate's "fixed floor on
//!   any memory access") once per kernel, added to the kernel's roofline
//!   time, with 9 kernels in a dense decoder layer, 16 in an MoE layer and 3
//!   in the head, counted from the forward passes in
//!   `vllm/model_executor/models/llama.py` and `deepseek_v2.py` (estimate).
//! * **Collectives**: 2 TP all-reduces of `T · hidden · 2` bytes per layer
//!   (attention and MLP out; `vllm/model_executor/layers/linear.py`,
//!   `RowParallelLinear`), the MoE one becoming a reduce-scatter plus an
//!   all-gather under sequence-parallel MoE; the EP dispatch and combine per
//!   MoE layer per `all2all_backend` (see [`All2AllFamily`]).
//! * **Pipeline parallelism**: vLLM V1 keeps `pp` microbatches in flight
//!   (the engine core's batch queue, `max_concurrent_batches = pp`,
//!   `vllm/v1/engine/core.py`), so a request gets one token per trip
//!   through all stages. A step here is that trip for the step's batch split
//!   into `pp` microbatches: `pp · stage(batch / pp) + (pp − 1) · send`, with
//!   `send` one microbatch's activations between stages at `p2p_latency`
//!   plus bytes over the link. This gives the right inter-token latency, and
//!   the right throughput whether stages are memory-bound (every microbatch
//!   re-reads the stage's weights) or compute-bound. It understates one
//!   case: a batch of a single request cannot be split (its chunks run one
//!   after another), so a lone compute-bound prefill at low load takes up to
//!   `pp` times longer in vLLM than here. Splitting by `min(pp, num_reqs)`
//!   would fix that and break monotonicity (one more request would make a
//!   step faster), so the split is always `pp`.
//! * **Dual-batch overlap** (`vllm/v1/worker/gpu_ubatch_wrapper.py`): the
//!   step runs as two microbatches whose communication overlaps the other's
//!   compute, a two-stage pipeline over the layers:
//!   `2 · max(compute_half, comm_half) + min(compute_half, comm_half)/layers`
//!   instead of `2 · (compute_half + comm_half)`. Each half re-reads the
//!   weights, so DBO can be slower than no DBO for a memory-bound step, as it
//!   is in vLLM (which is why it has token thresholds).
//! * **Host**: CUDA-graph launch cost by mode (a full graph replays once; a
//!   piecewise step also launches attention eagerly per layer; an eager step
//!   launches every layer), and the engine core's scheduling work
//!   (`host_schedule_per_step + host_schedule_per_request · num_reqs`),
//!   hidden behind the GPU under async scheduling and serial without it.
//!   Taking requests in (`host_api_request`), output processing
//!   (`host_output_token`) and request completion (`host_completion`) run
//!   in the API server process, which vLLM V1 keeps apart from the engine
//!   core (`vllm/v1/engine/async_llm.py`, `output_handler`), so they are
//!   not charged on the step; [`CostModel::api_server`] hands them to the
//!   event loop, which runs them on the API server's one thread
//!   ([`crate::ApiServerCosts`]).
//! * **Speculative drafting**: with an EAGLE-style or MTP drafter the step
//!   also runs the draft layer once over the step's tokens and
//!   `num_spec_tokens − 1` more times over one token per request
//!   (`vllm/v1/spec_decode/eagle.py`, `propose`), each pass one decoder
//!   layer of the target's shape plus the output head (estimate; a
//!   `draft_model` drafter is priced the same way, which understates it).
//!
//! Everything that does not depend on the batch is computed in
//! [`Roofline::new`]; [`CostModel::step`] is straight-line float arithmetic
//! (one `exp` per stage pass, for the touched experts) with no allocation
//! and no lookup: about 60 ns per step in a release build.

use crate::coefficients::{self, Deployment, Provenance, Resolver};
use crate::collective::{Curve, Op, width_bucket};
use crate::{Batch, CostModel, GraphMode, StepCost, ns};
use pdsim_core::SimDuration;
use pdsim_spec::catalog::{Chip, CoefficientSet, Fabric};
use pdsim_spec::layout::PoolLayout;
use pdsim_spec::model::{Attention, Model};
use pdsim_spec::resolve::{EngineConfig, PoolResolution};
use pdsim_spec::validate::scenario::ResolvedScenario;

/// Bytes per activation element: vLLM serves in 16 bits.
const ACTIVATION_BYTES: f64 = 2.0;
/// Kernels of one dense decoder layer: norm, QKV, rotary + cache write,
/// attention, output projection, norm, gate-up, activation, down.
const KERNELS_DENSE_LAYER: f64 = 9.0;
/// Kernels of one MoE decoder layer: the attention block's five, then norm,
/// router, top-k, align/permute, two grouped GEMMs, activation, finalize, and
/// the shared expert's three GEMMs and activation (`deepseek_v2.py`).
const KERNELS_MOE_LAYER: f64 = 16.0;
/// Final norm, output head and sampler.
const KERNELS_HEAD: f64 = 3.0;
/// Kernels of a hybrid's layers (Nemotron-H,
/// `vllm/model_executor/models/nemotron_h.py`), counted like the dense
/// layer's nine (estimate): an attention layer is the norm, the QKV
/// projection, rotary embedding, attention and the output projection; an
/// MLP layer the norm, up projection, `relu2` and down projection; a Mamba2
/// layer the norm, `in_proj`, the causal convolution, the state update,
/// the gated RMSNorm and `out_proj` (`MambaMixer2.forward`,
/// `vllm/model_executor/layers/mamba/mamba_mixer2.py`), and a step with
/// prefill tokens runs the chunked scan's five kernels instead of the one
/// update (`_chunk_cumsum_fwd`, `_bmm_chunk_fwd`, `_chunk_state_fwd`,
/// `_state_passing_fwd`, `_chunk_scan_fwd` in
/// `vllm/model_executor/layers/mamba/ops/ssd_combined.py`).
const KERNELS_ATTENTION_BLOCK: f64 = 5.0;
const KERNELS_MLP_BLOCK: f64 = 4.0;
const KERNELS_MAMBA_BLOCK: f64 = 6.0;
const KERNELS_MAMBA_PREFILL_EXTRA: f64 = 4.0;
/// Bytes of an SSD chunk state element: the chunked scan keeps its
/// per-chunk states in float32 (`_chunk_state_fwd` allocates them with
/// `dtype=torch.float32`, `ops/ssd_chunk_state.py`).
const SSD_STATE_BYTES: f64 = 4.0;
/// vLLM's custom all-reduce handles inputs up to 8 MiB and falls back to
/// NCCL above (`vllm/distributed/device_communicators/custom_all_reduce.py`,
/// `max_size = 8192 * 1024`).
const CUSTOM_ALLREDUCE_MAX_BYTES: f64 = 8.0 * 1024.0 * 1024.0;
/// DeepEP's FP8 dispatch sends one byte per element plus one fp32 scale per
/// 128 channels (DeepEP README, low-latency and normal kernels).
const FP8_DISPATCH_BYTES: f64 = 1.0 + 4.0 / 128.0;

/// How an `all2all_backend` moves tokens between expert-parallel ranks. The
/// names group by volume and by how the kernels synchronize.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum All2AllFamily {
    /// `allgather_reducescatter` (vLLM's default): every rank all-gathers
    /// every replica's tokens before the experts and reduce-scatters after,
    /// so each token reaches every rank
    /// (`vllm/distributed/device_communicators/all2all.py`,
    /// `AgRsAll2AllManager`). Priced on the registry's all-gather and
    /// reduce-scatter curves.
    AllGatherReduceScatter,
    /// `naive`: broadcasts to gather, an all-reduce to combine
    /// (`NaiveAll2AllManager`, "uses all-reduce under the hood").
    Naive,
    /// `deepep_high_throughput`, `deepep_v2`, `mori_high_throughput`: each
    /// token goes once to each rank holding one of its experts, after a
    /// CPU-synchronized layout handshake (`all2all_high_throughput_handshake`).
    HighThroughput,
    /// `pplx`, `flashinfer_all2allv`, `flashinfer_nvlink_one_sided`,
    /// `flashinfer_nvlink_two_sided`: routed tokens, once per destination
    /// rank, GPU-initiated, no host handshake.
    Routed,
    /// `deepep_low_latency`, `mori_low_latency`, `nixl_ep`: one message per
    /// token and expert (no per-rank dedup), GPU-initiated and graph-safe, at
    /// a fraction of the link rate (`all2all_low_latency_bw_efficiency`).
    LowLatency,
}

impl All2AllFamily {
    pub fn of(backend: &str) -> Option<All2AllFamily> {
        Some(match backend {
            "allgather_reducescatter" => All2AllFamily::AllGatherReduceScatter,
            "naive" => All2AllFamily::Naive,
            "deepep_high_throughput" | "deepep_v2" | "mori_high_throughput" => {
                All2AllFamily::HighThroughput
            }
            "pplx"
            | "flashinfer_all2allv"
            | "flashinfer_nvlink_one_sided"
            | "flashinfer_nvlink_two_sided" => All2AllFamily::Routed,
            "deepep_low_latency" | "mori_low_latency" | "nixl_ep" => All2AllFamily::LowLatency,
            _ => return None,
        })
    }
}

/// One GEMM group of a layer, per rank.
#[derive(Clone, Copy, Debug, Default)]
struct Gemm {
    flops_per_token: f64,
    weight_bytes: f64,
    activation_bytes_per_token: f64,
}

/// The routed experts of one MoE layer, per rank.
#[derive(Clone, Copy, Debug)]
struct Experts {
    /// Tokens into the expert-parallel group per token of this rank.
    tokens_in_per_token: f64,
    /// Expert pairs this rank computes per token into the group.
    pairs_per_token_in: f64,
    /// Physical experts on this rank.
    local: f64,
    /// ln(1 − k/E): the log-probability that a token misses a given expert.
    /// −∞ when every token visits every expert.
    ln_miss: f64,
    flops_per_pair: f64,
    bytes_per_expert: f64,
    activation_bytes_per_pair: f64,
    imbalance: f64,
}

impl Experts {
    /// What `t` tokens of this rank bring to one MoE layer on it: the
    /// tokens that reach the expert-parallel group's rank (every rank's
    /// share with expert parallelism), the (token, expert) pairs it
    /// computes, and the expected number of its experts they touch,
    /// routing uniformly (each of `local` experts is missed by a token
    /// with probability 1 − k/E).
    fn load(&self, t: f64) -> (f64, f64, f64) {
        let tokens_in = t * self.tokens_in_per_token;
        let pairs = tokens_in * self.pairs_per_token_in;
        let touched = self.local * (1.0 - (tokens_in * self.ln_miss).exp());
        (tokens_in, pairs, touched)
    }
}

/// The expert-parallel dispatch and combine of one MoE layer.
/// A hybrid's layers on the slowest stage (Nemotron-H: Mamba2 mixers,
/// attention blocks and MLPs, each its own layer), per rank. The model and
/// its figures: `research/nemotron-h-in-vllm-0.31.0.md` section 6.
#[derive(Clone, Copy, Debug)]
struct Hybrid {
    mamba_layers_stage: f64,
    attention_layers_stage: f64,
    mlp_layers_stage: f64,
    /// `in_proj` (hidden → 2·I + 2·G·N + H) and `out_proj` (I → hidden),
    /// TP-sharded.
    in_proj: Gemm,
    out_proj: Gemm,
    /// The chunked scan's FLOPs per prefill token per layer,
    /// `2·Q·G·N + 2·Q·H·P + 4·H·P·N` over tp (the C·Bᵀ products within a
    /// chunk, their application to x, and the chunk states' build and use).
    scan_flops_per_token: f64,
    /// The chunk states the scan writes and reads back, per prefill token
    /// per layer: `3 · (H/tp) · P · N · 4 / Q` bytes (each chunk's state is
    /// written, passed on and read by the chunk scan, in float32).
    scan_bytes_per_token: f64,
    /// The decode update's FLOPs per request per layer: `6 · (H/tp)·P·N`
    /// for the state's decay, input and output, plus the convolution's
    /// `2 · K · conv_dim / tp`.
    update_flops_per_request: f64,
    /// One sequence's state in one layer on this rank, read and written by
    /// every step that schedules the request (the update works in place,
    /// `selective_state_update`, `ops/mamba_ssm.py`; a prefill chunk reads
    /// the initial state and writes the final one).
    state_bytes: f64,
}

/// DeepSeek-V4.1's attention on the slowest stage, per rank: sparse
/// attention over a window and the indexer's picks, the indexer itself,
/// and the Engram lookups (`vllm/models/deepseek_v41/`; the figures:
/// `research/deepseek-v4.1-in-vllm-0.31.0.md` sections 4 and 6). The
/// projections, compressors, indexer projections and Engram `wkv` are
/// dense GEMMs among the model's parameters; the MoE is the ordinary one.
#[derive(Clone, Debug)]
struct SparseAttention {
    /// Layers of the stage attending to the window only (ratio 0), and
    /// those attending to the window and compressed rows at ratio 1 and 2.
    window_only_layers: f64,
    ratio1_layers: f64,
    ratio2_layers: f64,
    window: f64,
    /// Compressed rows the indexer picks for each query (`index_topk`).
    topk: f64,
    /// FLOPs per attended row per query token per layer: scores and values
    /// over the latent, `4 · heads/tp · latent`.
    flops_per_row: f64,
    window_record_bytes: f64,
    compressed_row_bytes: f64,
    /// The stage's index-source layers, each by its ratio.
    index_ratios: Vec<f64>,
    /// FLOPs per key per query token (`2 · index_heads/tp · index_head_dim`)
    /// and bytes per key (the FP8 key and its scale).
    index_flops_per_key: f64,
    index_key_bytes: f64,
    /// Engram: bytes a rank reads per token in each Engram layer (its head
    /// shard's rows), the stage's Engram layers (their 0-based layer
    /// numbers), and whether the tables are in host memory.
    engram_bytes_per_token: f64,
    engram_layers: Vec<f64>,
    engram_host: bool,
    /// The host link's read rate, bytes/ns (`engram_host_read_bw`).
    host_link_bytes_per_ns: f64,
    /// The model's own sequence parallelism: tokens sharded over TP around
    /// attention (an all-gather before, a reduce-scatter after), the MoE's
    /// output not all-reduced.
    sequence_parallel: bool,
}

#[derive(Clone, Copy, Debug)]
struct ExpertComm {
    dispatch: Curve,
    combine: Curve,
    dispatch_bytes_per_token: f64,
    combine_bytes_per_token: f64,
}

/// The tensor-parallel collectives of one layer.
#[derive(Clone, Copy, Debug)]
struct TensorComm {
    all_reduce: Curve,
    /// vLLM's custom all-reduce, for messages it handles.
    custom: Option<Curve>,
    /// Reduce-scatter and all-gather replacing the MoE all-reduce under
    /// sequence-parallel MoE.
    sequence_parallel: Option<(Curve, Curve)>,
    bytes_per_token: f64,
}

/// A step's work per microbatch, as floats.
#[derive(Clone, Copy, Debug)]
struct Work {
    padded: f64,
    tokens: f64,
    context: f64,
    pairs: f64,
    logits_rows: f64,
    prefill_tokens: f64,
    /// Requests in the decode phase (a hybrid's Mamba2 layers update their
    /// states one token at a time for these).
    decode_reqs: f64,
}

impl Work {
    /// A batch's work: `padded` and `tokens` as the step counts them; the
    /// sampler scores one row per request and one per draft token, never
    /// more rows than tokens.
    fn of_batch(batch: &Batch, padded: f64, tokens: f64) -> Work {
        Work {
            padded,
            tokens,
            context: batch.attn_context_tokens as f64,
            pairs: batch.attn_pairs as f64,
            logits_rows: ((batch.num_reqs + batch.spec_tokens) as f64).min(tokens),
            prefill_tokens: batch.prefill_tokens as f64,
            decode_reqs: batch.decode_reqs as f64,
        }
    }

    fn scaled(self, f: f64) -> Work {
        Work {
            padded: self.padded * f,
            tokens: self.tokens * f,
            context: self.context * f,
            pairs: self.pairs * f,
            logits_rows: self.logits_rows * f,
            prefill_tokens: self.prefill_tokens * f,
            decode_reqs: self.decode_reqs * f,
        }
    }
}

/// Where a stage's time went: `device_ns` is the sum over kernels of the
/// larger of compute and memory, plus kernel floors.
#[derive(Clone, Copy, Debug, Default)]
struct Parts {
    compute_ns: f64,
    memory_ns: f64,
    device_ns: f64,
    comm_ns: f64,
}

impl Parts {
    #[inline]
    fn kernel(&mut self, compute_ns: f64, memory_ns: f64) {
        self.compute_ns += compute_ns;
        self.memory_ns += memory_ns;
        self.device_ns += compute_ns.max(memory_ns);
    }

    fn scaled(self, f: f64) -> Parts {
        Parts {
            compute_ns: self.compute_ns * f,
            memory_ns: self.memory_ns * f,
            device_ns: self.device_ns * f,
            comm_ns: self.comm_ns * f,
        }
    }

    fn add(self, o: Parts) -> Parts {
        Parts {
            compute_ns: self.compute_ns + o.compute_ns,
            memory_ns: self.memory_ns + o.memory_ns,
            device_ns: self.device_ns + o.device_ns,
            comm_ns: self.comm_ns + o.comm_ns,
        }
    }
}

/// The roofline cost model of one pool. See the module documentation for
/// the formulas and their sources.
#[derive(Clone, Debug)]
pub struct Roofline {
    // Rates, per nanosecond.
    /// Weight-dtype peak × eps_max, FLOP/ns.
    gemm_flops_per_ns: f64,
    gemm_m_half_tokens: f64,
    /// BF16 peak × eps_max for the output head, FLOP/ns.
    head_flops_per_ns: f64,
    head_m_half_tokens: f64,
    /// BF16 peak × attention_eps_max, FLOP/ns.
    attention_flops_per_ns: f64,
    /// HBM peak × derate, bytes/ns.
    hbm_bytes_per_ns: f64,
    kernel_floor_ns: f64,

    // The slowest pipeline stage.
    dense_layers_stage: f64,
    moe_layers_stage: f64,
    pp: f64,
    /// Tensor-parallel width.
    tp: f64,

    // Per layer, per rank.
    attention_projections: Gemm,
    dense_mlp: Gemm,
    shared_experts: Gemm,
    /// Attention FLOPs per causal pair per layer on the prefill path.
    attention_flops_per_pair: f64,
    /// Extra FLOPs per context token per layer where the decode path is
    /// wider than the prefill path (MLA's absorbed form); 0 for GQA.
    attention_decode_extra_flops_per_token: f64,
    /// MLA prefill's up-projection of latents, FLOPs per context token per
    /// layer; 0 for GQA.
    up_projection_flops_per_token: f64,
    /// The prefill chunk a long prompt is cut into, tokens: how the
    /// up-projected context is estimated from the batch's sums.
    chunk_tokens: f64,
    kv_bytes_per_token: f64,
    experts: Option<Experts>,
    head: Gemm,
    head_bytes_per_row: f64,

    tensor_comm: Option<TensorComm>,
    expert_comm: Option<ExpertComm>,
    /// A hybrid's own layer mix; `None` for decoder layers of attention
    /// and MLP.
    hybrid: Option<Hybrid>,
    /// DeepSeek-V4.1's attention and lookups; `None` for other models.
    sparse: Option<SparseAttention>,
    pipeline_send: Option<Curve>,
    pipeline_bytes_per_token: f64,

    // Host, nanoseconds.
    launch_full_ns: f64,
    launch_piecewise_ns: f64,
    launch_eager_ns: f64,
    schedule_step_ns: f64,
    schedule_request_ns: f64,
    async_scheduling: bool,
    admission_per_token_ns: f64,
    api_server: crate::ApiServerCosts,
    /// `None` with the Rust frontend, which has no Python tokenizer batcher.
    tokenizer_batching: Option<crate::TokenizerBatching>,

    /// Draft passes per step beyond the first (num_spec_tokens − 1), or
    /// `None` without a GPU drafter.
    draft_extra_passes: Option<f64>,

    provenance: Vec<Provenance>,
}

impl Roofline {
    /// Builds the cost model of one pool. `chip_name` is the chip's catalog
    /// name (coefficient scopes and collective names key on it);
    /// `coefficient_sets` are the scenario's sets in scenario order. Fails
    /// with a message naming the coefficient when a needed one has no value
    /// or an invalid one.
    pub fn new(
        model: &Model,
        chip: &Chip,
        chip_name: &str,
        fabric: Option<&Fabric>,
        layout: &PoolLayout,
        engine: &EngineConfig,
        coefficient_sets: &[CoefficientSet],
    ) -> Result<Roofline, String> {
        check_chip(chip, chip_name)?;
        let deployment = Deployment::of(chip_name, &model.name, layout, chip.gpus_per_node);
        let gpus_per_node = coefficients::gpus_per_node(layout, chip.gpus_per_node);
        let (tp, pp, ep) = (deployment.tp, layout.pp.max(1), deployment.ep);
        let chip_key = deployment.hardware.clone();
        let mut r = Resolver::new(deployment, coefficient_sets)?;
        let mut get = |name: &str, units: &str, lo: f64, hi: f64| {
            r.value(name, units, coefficients::builtin(name, &chip_key), lo, hi)
        };

        // Rates.
        const TFLOPS: f64 = 1e12 / 1e9; // TFLOP/s → FLOP/ns
        let fp8 = engine.weight_bits == 8 && chip.t_flops_fp8.is_some();
        let (dtype, peak_tflops) = match chip.t_flops_fp8 {
            Some(fp8_tflops) if fp8 => ("fp8", fp8_tflops),
            _ => ("bf16", chip.t_flops_peak),
        };
        let eps = get(&format!("gemm_eps_max_{dtype}"), "dimensionless", 1e-3, 1.0)?;
        let m_half = get(&format!("gemm_m_half_{dtype}"), "tokens", 0.0, 1e6)?;
        let (bf16_eps, bf16_m_half) = if dtype == "bf16" {
            (eps, m_half)
        } else {
            (
                get("gemm_eps_max_bf16", "dimensionless", 1e-3, 1.0)?,
                get("gemm_m_half_bf16", "tokens", 0.0, 1e6)?,
            )
        };
        let attention_eps = get("attention_eps_max", "dimensionless", 1e-3, 1.0)?;
        let derate = get("hbm_derate", "dimensionless", 1e-3, 1.0)?;
        let floor_us = get("hbm_constant_latency", "us_per_transfer", 0.0, 1e6)?;

        // Host.
        let replay_us = get("host_replay_graph_per_step", "us_per_step", 0.0, 1e7)?;
        let eager_layer_us = get("host_launch_eager_per_layer", "us_per_layer", 0.0, 1e7)?;
        let kernel_launch_us = get("host_launch_per_kernel", "us_per_kernel", 0.0, 1e7)?;
        let schedule_step_us = get("host_schedule_per_step", "us_per_step", 0.0, 1e7)?;
        let schedule_request_us = get("host_schedule_per_request", "us_per_request", 0.0, 1e7)?;
        let admission_us = get("host_admission_per_token", "us_per_token", 0.0, 1e7)?;
        let rust_ratio = get("frontend_rust_admission_ratio", "dimensionless", 0.0, 1.0)?;
        let api_request_us = get("host_api_request", "us_per_request", 0.0, 1e9)?;
        let output_us = get("host_output_token", "us_per_token", 0.0, 1e7)?;
        let completion_us = get("host_completion", "us_per_request", 0.0, 1e9)?;
        let batch_wait_us = get("host_tokenizer_batch_wait", "us_per_batch", 0.0, 1e9)?;
        let batch_max = get("host_tokenizer_batch_max", "requests", 1.0, 1e6)?;

        // Geometry.
        let h = model.hidden_size as f64;
        let layers = model.layers.max(1) as f64;
        let stage_layers = model.layers.max(1).div_ceil(pp) as f64;
        let dense_layers_total = if model.is_moe() {
            model.dense_layers.min(model.layers) as f64
        } else {
            layers
        };
        let moe_layers_total = layers - dense_layers_total;
        let dense_layers_stage = stage_layers * dense_layers_total / layers;
        let moe_layers_stage = stage_layers * moe_layers_total / layers;
        let weight_bytes = engine.weight_bits as f64 / 8.0;
        let tp_f = tp as f64;
        let p = &model.params;
        let dense_mlp_params = 3.0 * h * model.intermediate_size as f64;
        let attention_params =
            ((p.dense as f64 - dense_layers_total * dense_mlp_params - h) / layers).max(0.0);
        let shared_params = if moe_layers_total > 0.0 {
            p.moe_shared as f64 / moe_layers_total
        } else {
            0.0
        };
        // Every GEMM group reads its input and writes its output once; an
        // MLP with P = 3·h·I parameters has inner widths 3I = P/h, and the
        // same P/h stands for an attention block's inner widths (estimate).
        let gemm = |params_rank: f64| Gemm {
            flops_per_token: 2.0 * params_rank,
            weight_bytes: params_rank * weight_bytes,
            activation_bytes_per_token: ACTIVATION_BYTES * (2.0 * h + params_rank / h),
        };
        // A hybrid's attention layer is its Q, K, V and output projections
        // alone and its MLP is up and down (`relu2`, not gated), each its
        // own layer (`NemotronHAttention`, `NemotronHMLP` in
        // `vllm/model_executor/models/nemotron_h.py`).
        let (attention_params, dense_mlp_params) = match (&model.recurrent, model.attention) {
            (Some(r), Attention::Gqa { kv_heads, head_dim }) => {
                let q = (model.attention_heads * head_dim) as f64;
                let kv = (kv_heads * head_dim) as f64;
                let mlp = if r.mlp_ungated { 2.0 } else { 3.0 };
                (
                    h * q + 2.0 * h * kv + q * h,
                    mlp * h * model.intermediate_size as f64,
                )
            }
            _ => (attention_params, dense_mlp_params),
        };
        let attention_projections = gemm(attention_params / tp_f);
        let dense_mlp = gemm(dense_mlp_params / tp_f);
        let shared_experts = gemm(shared_params / tp_f);

        // Attention.
        let heads_rank = (model.attention_heads as f64 / tp_f).max(1.0);
        // GQA runs the same kernel for both paths. MLA decode runs the
        // absorbed form, scores over the latent plus rope and values over the
        // latent; MLA prefill runs ordinary attention over up-projected keys
        // (nope + rope) and values (v = nope in DeepSeek V2/V3)
        // (`vllm/v1/attention/backends/mla/common.py`, `_forward_decode`
        // and `_forward_prefill`), after up-projecting the context's latents
        // to keys and values with `kv_b_proj`, a GEMM of
        // `2 · kv_lora_rank · heads · (nope + v)` FLOPs per context token.
        let (decode_width, prefill_width, up_projection) = match model.attention {
            Attention::Gqa { head_dim, .. } => (head_dim as f64, head_dim as f64, 0.0),
            Attention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
            } => {
                let qk = model.head_dim as f64;
                let v = (model.head_dim.saturating_sub(qk_rope_head_dim)) as f64;
                let nope = v;
                (
                    (2 * kv_lora_rank + qk_rope_head_dim) as f64 / 2.0,
                    (qk + v) / 2.0,
                    2.0 * kv_lora_rank as f64 * heads_rank * (nope + v),
                )
            }
        };
        let context_split = (layout.dcp.max(1) * layout.pcp.max(1)) as f64;
        let per_pair = 4.0 * heads_rank / layout.pcp.max(1) as f64;
        let chunk_tokens = match engine.long_prefill_token_threshold {
            0 => engine.max_num_batched_tokens,
            cap => cap.min(engine.max_num_batched_tokens),
        }
        .max(1) as f64;
        let kv_layer = model
            .kv_bytes_per_token_layer(&engine.cache_dtype)
            .ok_or_else(|| {
                format!(
                    "cache dtype `{}` has no known width, so KV bytes cannot be priced",
                    engine.cache_dtype
                )
            })?;
        let kv_bytes_per_token = match model.attention {
            Attention::Gqa { kv_heads, .. } => {
                kv_layer * (kv_heads as f64 / tp_f).max(1.0) / kv_heads.max(1) as f64
            }
            Attention::Mla { .. } => kv_layer,
        } / context_split;

        // Routed experts.
        let experts = if model.is_moe() && moe_layers_total > 0.0 {
            let e = model.experts as f64;
            let k = model.experts_per_token as f64;
            let expert_params = 3.0 * h * model.expert_intermediate_size as f64;
            let imbalance = get("moe_routing_imbalance_median", "dimensionless", 0.1, 100.0)?;
            let (local, params_rank, tokens_in_per_token, pairs_per_token_in) = if ep > 1 {
                let ep_f = ep as f64;
                (
                    (e + engine.num_redundant_experts as f64) / ep_f,
                    expert_params,
                    ep_f / tp_f,
                    k / ep_f,
                )
            } else {
                (e, expert_params / tp_f, 1.0, k)
            };
            Some(Experts {
                tokens_in_per_token,
                pairs_per_token_in,
                local,
                ln_miss: if k < e {
                    (1.0 - k / e).ln()
                } else {
                    f64::NEG_INFINITY
                },
                flops_per_pair: 2.0 * params_rank,
                bytes_per_expert: params_rank * weight_bytes,
                activation_bytes_per_pair: ACTIVATION_BYTES * (2.0 * h + params_rank / h),
                imbalance,
            })
        } else {
            None
        };

        let hybrid = match (&model.recurrent, &engine.hybrid) {
            (Some(r), Some(state)) => {
                let total = (r.mamba_layers + r.attention_layers + r.mlp_layers).max(1) as f64;
                let per_stage = stage_layers / total;
                let i = r.inner() as f64;
                let (heads, p_dim, n) = (r.heads as f64, r.head_dim as f64, r.state_size as f64);
                let g = r.groups_padded(tp) as f64;
                let q = r.chunk_size.max(1) as f64;
                let conv_dim = i + 2.0 * g * n;
                Some(Hybrid {
                    mamba_layers_stage: r.mamba_layers as f64 * per_stage,
                    attention_layers_stage: r.attention_layers as f64 * per_stage,
                    mlp_layers_stage: r.mlp_layers as f64 * per_stage,
                    in_proj: gemm(h * (2.0 * i + 2.0 * g * n + heads) / tp_f),
                    out_proj: gemm(i * h / tp_f),
                    scan_flops_per_token: (2.0 * q * g * n
                        + 2.0 * q * heads * p_dim
                        + 4.0 * heads * p_dim * n)
                        / tp_f,
                    scan_bytes_per_token: 3.0 * heads / tp_f * p_dim * n * SSD_STATE_BYTES / q,
                    update_flops_per_request: 6.0 * heads / tp_f * p_dim * n
                        + 2.0 * r.conv_kernel as f64 * conv_dim / tp_f,
                    state_bytes: state.state_bytes_per_layer,
                })
            }
            _ => None,
        };

        let sparse = match (&model.sparse, &engine.sparse) {
            (Some(sp), Some(cache)) => {
                let share = stage_layers / layers;
                let count = |r: u64| sp.ratios.iter().filter(|&&x| x == r).count() as f64 * share;
                let engram = sp.engram.as_ref();
                let host_bw = r.value(
                    "engram_host_read_bw",
                    "bytes_per_us",
                    coefficients::builtin("engram_host_read_bw", &chip_key),
                    1.0,
                    1e8,
                )?;
                Some(SparseAttention {
                    window_only_layers: count(0),
                    ratio1_layers: count(1),
                    ratio2_layers: count(2),
                    window: sp.sliding_window as f64,
                    topk: sp.index_topk as f64,
                    flops_per_row: 4.0 * heads_rank * sp.latent as f64,
                    window_record_bytes: cache.window_record_bytes as f64,
                    compressed_row_bytes: cache.compressed_state_bytes as f64,
                    index_ratios: sp
                        .index_sources
                        .iter()
                        .filter(|&&l| l < stage_layers as u64)
                        .map(|&l| sp.ratios[l as usize].max(1) as f64)
                        .collect(),
                    index_flops_per_key: 2.0
                        * (sp.index_heads as f64 / tp_f).max(1.0)
                        * sp.index_head_dim as f64,
                    index_key_bytes: (sp.index_head_dim + 4) as f64,
                    engram_bytes_per_token: engram
                        .map_or(0.0, |e| (cache.engram_rows_per_rank * e.row_bytes) as f64),
                    engram_layers: engram.map_or_else(Vec::new, |e| {
                        e.layers
                            .iter()
                            .filter(|&&l| l < stage_layers as u64)
                            .map(|&l| l as f64)
                            .collect()
                    }),
                    engram_host: cache.engram_residency.starts_with("host"),
                    host_link_bytes_per_ns: host_bw / 1e3,
                    sequence_parallel: cache.sequence_parallel,
                })
            }
            _ => None,
        };

        // Output head: vocab-parallel, kept in 16 bits (as in resolve.rs).
        let head_params = model.vocab_size as f64 * h / tp_f;
        let head = Gemm {
            flops_per_token: 2.0 * head_params,
            weight_bytes: head_params * ACTIVATION_BYTES,
            activation_bytes_per_token: 0.0,
        };
        let head_bytes_per_row = model.vocab_size as f64 / tp_f * 4.0 + h * ACTIVATION_BYTES;

        // Collectives.
        let intra_gbps = chip.intra_node_bw_gbps;
        let fabric_gbps = fabric.map(|f| f.inter_node_bw_gbps).filter(|g| *g > 0.0);
        let mut curve = |op: Op, ranks: u64| -> Result<Curve, String> {
            collective_curve(
                &mut r,
                &chip_key,
                intra_gbps,
                fabric_gbps,
                gpus_per_node,
                op,
                ranks,
            )
        };
        let tensor_comm = if tp > 1 && engine.allreduce_backend != "none" {
            let all_reduce = curve(Op::AllReduce, tp)?;
            let model_sp = engine.sparse.as_ref().is_some_and(|s| s.sequence_parallel);
            let sequence_parallel =
                if (engine.sequence_parallel_moe || model_sp) && experts.is_some() {
                    Some((curve(Op::ReduceScatter, tp)?, curve(Op::AllGather, tp)?))
                } else {
                    None
                };
            let custom = if engine.allreduce_backend == "custom" && tp <= gpus_per_node {
                let ratio = r.value(
                    "allreduce_custom_floor_ratio",
                    "dimensionless",
                    coefficients::builtin("allreduce_custom_floor_ratio", &chip_key),
                    0.0,
                    1.0,
                )?;
                Some(Curve {
                    floor_ns: all_reduce.floor_ns * ratio,
                    ..all_reduce
                })
            } else {
                None
            };
            Some(TensorComm {
                all_reduce,
                custom,
                sequence_parallel,
                bytes_per_token: h * ACTIVATION_BYTES,
            })
        } else {
            None
        };
        let expert_comm = match (&experts, ep > 1) {
            (Some(_), true) => Some(expert_comm(
                &mut r,
                &chip_key,
                intra_gbps,
                fabric_gbps,
                gpus_per_node,
                model,
                engine,
                tp,
                ep,
            )?),
            _ => None,
        };
        let pipeline_send = if pp > 1 {
            let latency_us = r.value(
                "p2p_latency",
                "us_per_hop",
                coefficients::builtin("p2p_latency", &chip_key),
                0.0,
                1e6,
            )?;
            let crosses_nodes = tp * pp > gpus_per_node;
            let gbps = match (crosses_nodes, fabric_gbps) {
                (true, Some(g)) => g,
                _ => intra_gbps,
            };
            Some(Curve::linear(latency_us * 1e3, gbps))
        } else {
            None
        };

        // A drafter that runs decoder layers on the GPU: the rules pack's
        // EAGLE-style methods (EAGLE heads, MTP layers, dflash, dspark) or a
        // separate draft model (`vllm/config/speculative.py`; ngram runs on
        // the CPU, medusa and mlp_speculator heads are small MLPs on the
        // target's hidden states).
        let draft_extra_passes = engine
            .spec_method
            .as_deref()
            .filter(|m| {
                (engine.spec_eagle_style || *m == "draft_model") && engine.num_spec_tokens > 0
            })
            .map(|_| (engine.num_spec_tokens - 1) as f64);

        let admission_per_token_us = if engine.frontend == "rust" {
            admission_us * rust_ratio
        } else {
            admission_us
        };

        Ok(Roofline {
            gemm_flops_per_ns: peak_tflops * TFLOPS * eps,
            gemm_m_half_tokens: m_half,
            head_flops_per_ns: chip.t_flops_peak * TFLOPS * bf16_eps,
            head_m_half_tokens: bf16_m_half,
            attention_flops_per_ns: chip.t_flops_peak * TFLOPS * attention_eps,
            hbm_bytes_per_ns: chip.bw_peak_tbs * 1e3 * derate,
            kernel_floor_ns: floor_us * 1e3,
            dense_layers_stage,
            moe_layers_stage,
            pp: pp as f64,
            tp: tp_f,
            attention_projections,
            dense_mlp,
            shared_experts,
            attention_flops_per_pair: per_pair * prefill_width,
            attention_decode_extra_flops_per_token: per_pair
                * (decode_width - prefill_width).max(0.0),
            up_projection_flops_per_token: up_projection / context_split,
            chunk_tokens,
            kv_bytes_per_token,
            experts,
            head,
            head_bytes_per_row,
            tensor_comm,
            expert_comm,
            hybrid,
            sparse,
            pipeline_send,
            pipeline_bytes_per_token: h * ACTIVATION_BYTES,
            launch_full_ns: replay_us * 1e3,
            launch_piecewise_ns: (replay_us + stage_layers * kernel_launch_us) * 1e3,
            launch_eager_ns: stage_layers * eager_layer_us * 1e3,
            schedule_step_ns: schedule_step_us * 1e3,
            schedule_request_ns: schedule_request_us * 1e3,
            async_scheduling: engine.async_scheduling,
            admission_per_token_ns: admission_per_token_us * 1e3,
            api_server: crate::ApiServerCosts::new(
                engine,
                api_request_us,
                output_us,
                completion_us,
                rust_ratio,
            ),
            tokenizer_batching: crate::tokenizer_batching(engine, batch_wait_us, batch_max),
            draft_extra_passes,
            provenance: r.into_provenance(),
        })
    }

    /// Builds the cost model of one resolved pool of a resolved scenario.
    pub fn for_pool(
        scenario: &ResolvedScenario,
        pool: &PoolResolution,
    ) -> Result<Roofline, String> {
        let sets: Vec<CoefficientSet> = scenario
            .coefficients
            .iter()
            .map(|e| e.value.clone())
            .collect();
        Roofline::new(
            &scenario.model.value,
            &scenario.chip.value,
            &scenario.chip.origin.name,
            scenario.fabric.as_ref().map(|f| &f.value),
            &pool.layout,
            &pool.engine,
            &sets,
        )
    }

    /// Every coefficient the model read: (name, value in its units, source).
    pub fn provenance(&self) -> Vec<(String, f64, String)> {
        self.provenance.iter().map(Provenance::row).collect()
    }

    /// [`Experts::load`] of `t` tokens, for tests that pin it (`None` for
    /// a dense model).
    #[cfg(test)]
    pub(crate) fn expert_load(&self, t: f64) -> Option<(f64, f64, f64)> {
        self.experts.as_ref().map(|x| x.load(t))
    }

    /// The expert-parallel dispatch and combine bytes per token, for tests
    /// that pin the formula (`None` without expert parallelism).
    #[cfg(test)]
    pub(crate) fn expert_bytes_per_token(&self) -> Option<(f64, f64)> {
        self.expert_comm
            .as_ref()
            .map(|ec| (ec.dispatch_bytes_per_token, ec.combine_bytes_per_token))
    }

    /// One pipeline stage's communication over a pass of `tokens` tokens,
    /// the expert-parallel dispatch plus combine time of one MoE layer at
    /// that size, and the stage's MoE layers: for tests that pin how the
    /// layers multiply the per-layer exchange.
    #[cfg(test)]
    pub(crate) fn pass_communication_ns(&self, tokens: f64) -> (f64, f64, f64) {
        let w = Work {
            padded: tokens,
            tokens,
            context: tokens,
            pairs: tokens,
            logits_rows: 0.0,
            prefill_tokens: 0.0,
            decode_reqs: 0.0,
        };
        let parts = self.stage(w, self.dense_layers_stage, self.moe_layers_stage, false);
        let per_layer = self.expert_comm.as_ref().map_or(0.0, |ec| {
            ec.dispatch.time_ns(tokens * ec.dispatch_bytes_per_token)
                + ec.combine.time_ns(tokens * ec.combine_bytes_per_token)
        });
        (parts.comm_ns, per_layer, self.moe_layers_stage)
    }

    /// Every coefficient the model read: (name, value, units, source).
    pub fn provenance_rows(&self) -> Vec<(String, f64, String, String)> {
        self.provenance
            .iter()
            .map(|p| (p.name.clone(), p.value, p.units.clone(), p.source.clone()))
            .collect()
    }

    /// A GEMM group at `m` rows: `flops · (m + m_half) / (m · peak · eps)`
    /// is `flops / (peak · eff(m))` with the envelope
    /// `eff(m) = eps · m / (m + m_half)` (BLIS cost-model-primitives).
    #[inline]
    fn gemm_ns(flops: f64, m: f64, flops_per_ns: f64, m_half: f64) -> f64 {
        // Every caller's FLOPs are a per-row count times `m`, so a group
        // with no rows has no FLOPs either.
        if flops <= 0.0 {
            return 0.0;
        }
        flops * (m + m_half) / (m * flops_per_ns)
    }

    #[inline]
    fn gemm_kernel(&self, parts: &mut Parts, g: &Gemm, layers: f64, m: f64) {
        if layers <= 0.0 || g.flops_per_token <= 0.0 {
            return;
        }
        let c = Self::gemm_ns(
            layers * g.flops_per_token * m,
            m,
            self.gemm_flops_per_ns,
            self.gemm_m_half_tokens,
        );
        let bytes = layers * (g.weight_bytes + g.activation_bytes_per_token * m);
        parts.kernel(c, bytes / self.hbm_bytes_per_ns);
    }

    /// One pipeline stage's pass over `w` with `dense` dense layers, `moe`
    /// MoE layers and, when `head`, the output head.
    fn stage(&self, w: Work, dense: f64, moe: f64, head: bool) -> Parts {
        if let Some(hy) = &self.hybrid {
            return self.hybrid_stage(w, hy, head);
        }
        let mut p = Parts::default();
        let t = w.padded;
        let layers = dense + moe;
        self.gemm_kernel(&mut p, &self.attention_projections, layers, t);
        self.gemm_kernel(&mut p, &self.dense_mlp, dense, t);
        self.gemm_kernel(&mut p, &self.shared_experts, moe, t);

        // Attention: causal pairs drive FLOPs, context drives KV reads.
        // A decode request's pairs equal its context, so pricing every pair
        // at the prefill width and every context token at the decode
        // path's extra width is exact for decodes, within (c + q)/pairs of
        // exact for a prefill, and never decreases as a batch grows.
        let attention_flops = self.attention_flops_per_pair * w.pairs
            + self.attention_decode_extra_flops_per_token * w.context;
        // MLA prefill up-projects its requests' context: at most the
        // batch's context, and about the chunk plus its cached tokens, which
        // the excess of pairs over context (Σ (q − 1)(c + q/2)) divided by
        // the engine's chunk size recovers for a full chunk (estimate).
        let up_tokens = w
            .context
            .min(w.prefill_tokens + (w.pairs - w.context).max(0.0) / self.chunk_tokens);
        let up_ns = Self::gemm_ns(
            layers * self.up_projection_flops_per_token * up_tokens,
            up_tokens,
            self.gemm_flops_per_ns,
            self.gemm_m_half_tokens,
        );
        match &self.sparse {
            Some(sa) => self.sparse_attention(&mut p, sa, w),
            None => p.kernel(
                layers * attention_flops / self.attention_flops_per_ns + up_ns,
                layers * self.kv_bytes_per_token * (w.context + w.tokens) / self.hbm_bytes_per_ns,
            ),
        }

        if let Some(x) = &self.experts
            && moe > 0.0
        {
            let (tokens_in, pairs, touched) = x.load(t);
            if tokens_in > 0.0 {
                // flops / (peak · eff(pairs / touched)), times the imbalance.
                let c = moe * x.flops_per_pair * (pairs + self.gemm_m_half_tokens * touched)
                    / self.gemm_flops_per_ns
                    * x.imbalance;
                let bytes =
                    moe * (touched * x.bytes_per_expert + pairs * x.activation_bytes_per_pair);
                p.kernel(c, bytes / self.hbm_bytes_per_ns);
            }
        }

        let mut kernels = dense * KERNELS_DENSE_LAYER + moe * KERNELS_MOE_LAYER;
        if head {
            kernels += self.head_kernel(&mut p, w);
        }
        p.device_ns += kernels * self.kernel_floor_ns;
        if let Some(sa) = &self.sparse {
            p.device_ns += Self::engram_stall_ns(sa, w, p.device_ns, layers);
        }

        // DeepSeek-V4.1's own sequence parallelism shards the tokens over
        // the TP group outside attention: an all-gather before attention
        // and a reduce-scatter after it replace the attention's all-reduce,
        // the MoE's output is not all-reduced, and each rank dispatches its
        // own share of the tokens (`nvidia/model.py`, `sp_all_gather`,
        // `sp_reduce_scatter`; research/deepseek-v4.1-in-vllm-0.31.0.md §5).
        let model_sp = self.sparse.as_ref().is_some_and(|sa| sa.sequence_parallel);
        if let Some(tc) = &self.tensor_comm {
            let bytes = t * tc.bytes_per_token;
            let all_reduce = match tc.custom {
                Some(custom) if bytes <= CUSTOM_ALLREDUCE_MAX_BYTES => custom.time_ns(bytes),
                _ => tc.all_reduce.time_ns(bytes),
            };
            p.comm_ns += match tc.sequence_parallel {
                Some((rs, ag)) if model_sp => layers * (rs.time_ns(bytes) + ag.time_ns(bytes)),
                Some((rs, ag)) => {
                    (2.0 * dense + moe) * all_reduce + moe * (rs.time_ns(bytes) + ag.time_ns(bytes))
                }
                None => 2.0 * layers * all_reduce,
            };
        }
        if let Some(ec) = &self.expert_comm {
            let shard = if model_sp { self.tp } else { 1.0 };
            p.comm_ns += moe
                * (ec.dispatch.time_ns(t / shard * ec.dispatch_bytes_per_token)
                    + ec.combine.time_ns(t / shard * ec.combine_bytes_per_token));
        }
        p
    }

    /// DeepSeek-V4.1's attention layers on `w` (see [`SparseAttention`]).
    /// The batch carries sums, so each request is taken at the batch's mean
    /// context (exact for a batch of equal contexts; an estimate otherwise).
    ///
    /// * Sparse attention: each query attends to the window (up to
    ///   `window` rows, MXFP8 records on Blackwell) and, in a compressing
    ///   layer, up to `index_topk` compressed rows of its context / ratio.
    ///   A decoding request reads its rows; a prefilling one gathers its
    ///   whole compressed region once a step (the FlashMLA prefill path,
    ///   `flashmla.py`); every new token's window record is written.
    /// * The indexer, on its source layers: every query scores every key
    ///   of its context / ratio (FP8 MQA logits), each request's keys read
    ///   once a step; skipped when the compressed context fits in
    ///   `index_topk` (all of it is selected then, `attention.py`).
    /// * Engram: each token's rows of the rank's head shard, from HBM when
    ///   the tables are in GPU memory; from host memory over the host link
    ///   otherwise, on a side stream started before layer 0 that layer `l`
    ///   waits for (`nvidia/engram.py`): the step stalls by what a lookup
    ///   still lacks when its layer starts.
    fn sparse_attention(&self, p: &mut Parts, sa: &SparseAttention, w: Work) {
        let requests = w.logits_rows.max(1.0);
        let context = w.context / requests;
        let window_rows = context.min(sa.window);
        let picked = |ratio: f64| (context / ratio).min(sa.topk);
        let rows_per_query = sa.window_only_layers * window_rows
            + sa.ratio1_layers * (window_rows + picked(1.0))
            + sa.ratio2_layers * (window_rows + picked(2.0));
        let layers = sa.window_only_layers + sa.ratio1_layers + sa.ratio2_layers;
        let prefill_reqs = (requests - w.decode_reqs).max(0.0);
        let compressed_rows =
            |ratio: f64| w.decode_reqs * picked(ratio) + prefill_reqs * context / ratio;
        let bytes = layers * (requests * window_rows + w.tokens) * sa.window_record_bytes
            + (sa.ratio1_layers * compressed_rows(1.0) + sa.ratio2_layers * compressed_rows(2.0))
                * sa.compressed_row_bytes;
        p.kernel(
            sa.flops_per_row * rows_per_query * w.tokens / self.attention_flops_per_ns,
            bytes / self.hbm_bytes_per_ns,
        );
        for &ratio in &sa.index_ratios {
            if context / ratio <= sa.topk {
                continue;
            }
            p.kernel(
                sa.index_flops_per_key * w.pairs / ratio / self.attention_flops_per_ns,
                requests * context / ratio * sa.index_key_bytes / self.hbm_bytes_per_ns,
            );
        }
        if !sa.engram_host {
            p.kernel(
                0.0,
                sa.engram_layers.len() as f64 * w.tokens * sa.engram_bytes_per_token
                    / self.hbm_bytes_per_ns,
            );
        }
    }

    /// The stall of host-resident Engram lookups in a stage whose kernels
    /// take `device_ns` over `layers` layers: the lookups are read one
    /// after another over the host link from the step's start, and layer
    /// `l` waits for its own (see [`Roofline::sparse_attention`]).
    fn engram_stall_ns(sa: &SparseAttention, w: Work, device_ns: f64, layers: f64) -> f64 {
        if !sa.engram_host {
            return 0.0;
        }
        let layer_ns = device_ns / layers.max(1.0);
        let read_ns = w.tokens * sa.engram_bytes_per_token / sa.host_link_bytes_per_ns;
        let mut done = 0.0;
        let mut stall: f64 = 0.0;
        for &l in &sa.engram_layers {
            done += read_ns;
            stall = stall.max(done - l * layer_ns);
        }
        stall
    }

    /// The output head over `w`'s logits rows (its GEMM, the larger of its
    /// compute and its weight read); returns its kernels.
    fn head_kernel(&self, p: &mut Parts, w: Work) -> f64 {
        let rows = w.logits_rows;
        let c = Self::gemm_ns(
            self.head.flops_per_token * rows,
            rows,
            self.head_flops_per_ns,
            self.head_m_half_tokens,
        );
        let bytes = self.head.weight_bytes + rows * self.head_bytes_per_row;
        p.kernel(c, bytes / self.hbm_bytes_per_ns);
        KERNELS_HEAD
    }

    /// One pipeline stage's pass over a hybrid's layers: the attention
    /// layers' projections and attention (KV read in those layers only),
    /// the MLP layers, and the Mamba2 mixers' projections, chunked scan
    /// (prefill tokens) or state update (one a request), with every
    /// scheduled request's state read and written once a layer. Each layer
    /// ends in one row-parallel projection, so one TP all-reduce a layer.
    /// The align mode's copy of a state into a new block when a request
    /// crosses a block boundary (two pages a Mamba layer, once per 1,040
    /// tokens for Nemotron-H-8B) is not priced: next to the state read and
    /// written every step it is under a thousandth of the state traffic.
    fn hybrid_stage(&self, w: Work, hy: &Hybrid, head: bool) -> Parts {
        let mut p = Parts::default();
        let t = w.padded;
        self.gemm_kernel(
            &mut p,
            &self.attention_projections,
            hy.attention_layers_stage,
            t,
        );
        self.gemm_kernel(&mut p, &self.dense_mlp, hy.mlp_layers_stage, t);
        self.gemm_kernel(&mut p, &hy.in_proj, hy.mamba_layers_stage, t);
        self.gemm_kernel(&mut p, &hy.out_proj, hy.mamba_layers_stage, t);
        let attention_flops = self.attention_flops_per_pair * w.pairs;
        p.kernel(
            hy.attention_layers_stage * attention_flops / self.attention_flops_per_ns,
            hy.attention_layers_stage * self.kv_bytes_per_token * (w.context + w.tokens)
                / self.hbm_bytes_per_ns,
        );
        // A hybrid runs no drafter, so the sampler's rows are its requests.
        let requests = w.logits_rows;
        let scan_flops = hy.scan_flops_per_token * w.prefill_tokens
            + hy.update_flops_per_request * w.decode_reqs;
        let scan_bytes =
            hy.scan_bytes_per_token * w.prefill_tokens + 2.0 * hy.state_bytes * requests;
        p.kernel(
            hy.mamba_layers_stage * scan_flops / self.attention_flops_per_ns,
            hy.mamba_layers_stage * scan_bytes / self.hbm_bytes_per_ns,
        );
        let mamba_kernels = KERNELS_MAMBA_BLOCK
            + if w.prefill_tokens > 0.0 {
                KERNELS_MAMBA_PREFILL_EXTRA
            } else {
                0.0
            };
        let mut kernels = hy.attention_layers_stage * KERNELS_ATTENTION_BLOCK
            + hy.mlp_layers_stage * KERNELS_MLP_BLOCK
            + hy.mamba_layers_stage * mamba_kernels;
        if head {
            kernels += self.head_kernel(&mut p, w);
        }
        p.device_ns += kernels * self.kernel_floor_ns;
        if let Some(tc) = &self.tensor_comm {
            let bytes = t * tc.bytes_per_token;
            let all_reduce = match tc.custom {
                Some(custom) if bytes <= CUSTOM_ALLREDUCE_MAX_BYTES => custom.time_ns(bytes),
                _ => tc.all_reduce.time_ns(bytes),
            };
            let layers = hy.attention_layers_stage + hy.mlp_layers_stage + hy.mamba_layers_stage;
            p.comm_ns += layers * all_reduce;
        }
        p
    }

    /// The drafter's passes: the draft layer (one decoder layer of the
    /// target's shape) over the step's tokens, then over one token per
    /// request for each further draft token, each with the output head.
    fn draft(&self, full: Work, requests: f64, extra_passes: f64) -> Parts {
        let (dense, moe) = if self.experts.is_some() {
            (0.0, 1.0)
        } else {
            (1.0, 0.0)
        };
        let first = Work {
            logits_rows: requests,
            ..full
        };
        let next = Work {
            padded: requests,
            tokens: requests,
            context: full.context,
            pairs: full.context,
            logits_rows: requests,
            prefill_tokens: 0.0,
            decode_reqs: requests,
        };
        self.stage(first, dense, moe, true)
            .add(self.stage(next, dense, moe, true).scaled(extra_passes))
    }

    fn launch_ns(&self, graph: GraphMode) -> f64 {
        match graph {
            GraphMode::Full => self.launch_full_ns,
            GraphMode::Piecewise => self.launch_piecewise_ns,
            GraphMode::Eager => self.launch_eager_ns,
        }
    }
}

impl CostModel for Roofline {
    fn step(&self, batch: &Batch) -> StepCost {
        let tokens = batch.tokens() as f64;
        let padded = (batch.padded_tokens as f64).max(tokens);
        if padded <= 0.0 {
            return StepCost::default();
        }
        let requests = batch.num_reqs as f64;
        let full = Work::of_batch(batch, padded, tokens);
        let micro = full.scaled(1.0 / self.pp);
        let (dense, moe) = (self.dense_layers_stage, self.moe_layers_stage);
        let launch = self.launch_ns(batch.graph);

        // One stage pass over one microbatch, then the trip through all
        // stages.
        let (parts, stage_ns, launches) = if batch.dbo {
            let half = self.stage(micro.scaled(0.5), dense, moe, true);
            let long = half.device_ns.max(half.comm_ns);
            let short = half.device_ns.min(half.comm_ns);
            let overlapped = 2.0 * long + short / (dense + moe).max(1.0);
            (half.scaled(2.0), overlapped, 2.0 * launch)
        } else {
            let p = self.stage(micro, dense, moe, true);
            (p, p.device_ns + p.comm_ns, launch)
        };
        let mut parts = parts.scaled(self.pp);
        let mut gpu_ns = self.pp * (stage_ns + launches);
        if let Some(send) = &self.pipeline_send {
            let sends =
                (self.pp - 1.0) * send.time_ns(micro.padded * self.pipeline_bytes_per_token);
            parts.comm_ns += sends;
            gpu_ns += sends;
        }
        if let Some(extra) = self.draft_extra_passes
            && requests > 0.0
        {
            let d = self.draft(full, requests, extra);
            gpu_ns += d.device_ns + d.comm_ns;
            parts = parts.add(d);
        }

        let schedule_ns = self.schedule_step_ns + self.schedule_request_ns * requests;
        let exposed_ns = if self.async_scheduling {
            (schedule_ns - gpu_ns).max(0.0)
        } else {
            schedule_ns
        };
        let total = gpu_ns + exposed_ns;
        StepCost {
            total: SimDuration::from_ns(ns(total)),
            compute_ns: ns(parts.compute_ns),
            memory_ns: ns(parts.memory_ns),
            communication_ns: ns(parts.comm_ns),
            host_ns: ns(self.pp * launches + schedule_ns),
            padding_ns: ns(parts.compute_ns * (padded - tokens) / padded),
        }
    }

    /// `host_admission_per_token · prompt_tokens` in the Python frontend;
    /// the Rust frontend (vllm-rs) scales it by
    /// `frontend_rust_admission_ratio` (assumed).
    fn admission_delay(&self, prompt_tokens: u32) -> SimDuration {
        SimDuration::from_ns(ns(self.admission_per_token_ns * prompt_tokens as f64))
    }

    fn tokenizer_batching(&self) -> Option<crate::TokenizerBatching> {
        self.tokenizer_batching
    }

    fn api_server(&self) -> crate::ApiServerCosts {
        self.api_server
    }
}

fn check_chip(chip: &Chip, chip_name: &str) -> Result<(), String> {
    let figures = [
        ("TFlopsPeak", chip.t_flops_peak),
        ("BwPeakTBs", chip.bw_peak_tbs),
        ("IntraNodeBwGBps", chip.intra_node_bw_gbps),
    ];
    for (key, value) in figures {
        if !(value.is_finite() && value > 0.0) {
            return Err(format!(
                "chip `{chip_name}` has {key} {value}; the roofline needs a positive figure"
            ));
        }
    }
    Ok(())
}

/// The curve of `op` over `ranks` ranks. Inside one node: the registry's
/// measured curve for the chip at the nearest measured width (names
/// `collective_{floor,peak_rate,transition_rate}_<op>_fp16_<n>rank_<chip>`,
/// overridable by the scenario's sets). Across nodes: the intra-node floor
/// plus `collective_internode_floor`, and the fabric's per-GPU rate times
/// `collective_internode_efficiency` over the op's wire factor. With no
/// fabric known, the group is priced as one NVLink domain.
fn collective_curve(
    r: &mut Resolver,
    chip_key: &str,
    intra_gbps: f64,
    fabric_gbps: Option<f64>,
    gpus_per_node: u64,
    op: Op,
    ranks: u64,
) -> Result<Curve, String> {
    let bucket = width_bucket(ranks);
    let suffix = format!(
        "{}_fp16_{bucket}rank_{}",
        op.name(),
        chip_key.replace('-', "_")
    );
    let [floor, peak, transition] =
        coefficients::builtin_collective(chip_key, op.name(), bucket, intra_gbps);
    let floor_us = r.value(
        &format!("collective_floor_{suffix}"),
        "us_per_transfer",
        Some(floor),
        0.0,
        1e7,
    )?;
    let peak = r.value(
        &format!("collective_peak_rate_{suffix}"),
        "bytes_per_us",
        Some(peak),
        1e-3,
        1e12,
    )?;
    let transition = r.value(
        &format!("collective_transition_rate_{suffix}"),
        "bytes_per_us",
        Some(transition),
        1e-3,
        1e12,
    )?;
    let intra = Curve {
        floor_ns: floor_us * 1e3,
        transition_bytes_per_ns: transition / 1e3,
        peak_bytes_per_ns: peak / 1e3,
    };
    let Some(fabric_gbps) = fabric_gbps.filter(|_| ranks > gpus_per_node) else {
        return Ok(intra);
    };
    let extra_us = r.value(
        "collective_internode_floor",
        "us_per_transfer",
        coefficients::builtin("collective_internode_floor", chip_key),
        0.0,
        1e7,
    )?;
    let efficiency = r.value(
        "collective_internode_efficiency",
        "dimensionless",
        coefficients::builtin("collective_internode_efficiency", chip_key),
        1e-3,
        1.0,
    )?;
    let wire = op.wire_factor(ranks as f64, gpus_per_node as f64);
    Ok(Curve::linear(
        intra.floor_ns + extra_us * 1e3,
        fabric_gbps * efficiency / wire,
    ))
}

/// The dispatch and combine of one MoE layer under the pool's
/// `all2all_backend` (see [`All2AllFamily`]).
///
/// Volumes per token of this rank: the all-gather families move the
/// hidden state of every replica's tokens to every rank, `hidden · 2 · ep/tp`
/// bytes of gathered output; routed families send the hidden state to the
/// `ep · (1 − (1 − 1/ep)^k)` distinct ranks its `k` experts live on (uniform
/// routing), and low-latency ones once per expert, `k` times. Routed
/// dispatch is FP8 with scales when the weights are 8-bit (DeepEP's FP8
/// dispatch, BF16 combine); the all-gather families move BF16.
#[allow(clippy::too_many_arguments)]
fn expert_comm(
    r: &mut Resolver,
    chip_key: &str,
    intra_gbps: f64,
    fabric_gbps: Option<f64>,
    gpus_per_node: u64,
    model: &Model,
    engine: &EngineConfig,
    tp: u64,
    ep: u64,
) -> Result<ExpertComm, String> {
    let family = All2AllFamily::of(&engine.all2all_backend).ok_or_else(|| {
        format!(
            "all2all_backend `{}` has no pricing in pdsim's roofline",
            engine.all2all_backend
        )
    })?;
    let mut curve =
        |op: Op| collective_curve(r, chip_key, intra_gbps, fabric_gbps, gpus_per_node, op, ep);
    let h = model.hidden_size as f64;
    let ep_f = ep as f64;
    let k = model.experts_per_token as f64;
    // Under sequence-parallel MoE each TP rank dispatches its 1/tp share.
    let share = if engine.sequence_parallel_moe {
        1.0 / tp as f64
    } else {
        1.0
    };
    let routed_dispatch_bytes = if engine.weight_bits == 8 {
        FP8_DISPATCH_BYTES
    } else {
        ACTIVATION_BYTES
    };
    let ranks_per_token = ep_f * (1.0 - (1.0 - 1.0 / ep_f).powf(k));
    let gathered = h * ACTIVATION_BYTES * ep_f / tp as f64;
    Ok(match family {
        All2AllFamily::AllGatherReduceScatter => ExpertComm {
            dispatch: curve(Op::AllGather)?,
            combine: curve(Op::ReduceScatter)?,
            dispatch_bytes_per_token: gathered,
            combine_bytes_per_token: gathered,
        },
        All2AllFamily::Naive => ExpertComm {
            dispatch: curve(Op::AllGather)?,
            combine: curve(Op::AllReduce)?,
            dispatch_bytes_per_token: gathered,
            combine_bytes_per_token: gathered,
        },
        All2AllFamily::HighThroughput | All2AllFamily::Routed => {
            let mut c = curve(Op::AllToAll)?;
            if family == All2AllFamily::HighThroughput {
                let handshake_us = r.value(
                    "all2all_high_throughput_handshake",
                    "us_per_transfer",
                    coefficients::builtin("all2all_high_throughput_handshake", chip_key),
                    0.0,
                    1e7,
                )?;
                c.floor_ns += handshake_us * 1e3;
            }
            ExpertComm {
                dispatch: c,
                combine: c,
                dispatch_bytes_per_token: share * h * routed_dispatch_bytes * ranks_per_token,
                combine_bytes_per_token: share * h * ACTIVATION_BYTES * ranks_per_token,
            }
        }
        All2AllFamily::LowLatency => {
            let mut c = curve(Op::AllToAll)?;
            let efficiency = r.value(
                "all2all_low_latency_bw_efficiency",
                "dimensionless",
                coefficients::builtin("all2all_low_latency_bw_efficiency", chip_key),
                1e-3,
                1.0,
            )?;
            c.transition_bytes_per_ns *= efficiency;
            c.peak_bytes_per_ns *= efficiency;
            ExpertComm {
                dispatch: c,
                combine: c,
                dispatch_bytes_per_token: share * h * routed_dispatch_bytes * k,
                combine_bytes_per_token: share * h * ACTIVATION_BYTES * k,
            }
        }
    })
}

#[cfg(test)]
mod parts_tests {
    use super::Parts;

    #[test]
    fn adding_parts_adds_each_of_them() {
        let p = Parts {
            compute_ns: 1.0,
            memory_ns: 2.0,
            device_ns: 3.0,
            comm_ns: 4.0,
        }
        .add(Parts {
            compute_ns: 10.0,
            memory_ns: 20.0,
            device_ns: 30.0,
            comm_ns: 40.0,
        });
        assert_eq!(
            (p.compute_ns, p.memory_ns, p.device_ns, p.comm_ns),
            (11.0, 22.0, 33.0, 44.0)
        );
    }

    #[test]
    fn scaling_parts_scales_each_of_them() {
        let p = Parts {
            compute_ns: 1.0,
            memory_ns: 2.0,
            device_ns: 3.0,
            comm_ns: 4.0,
        }
        .scaled(2.5);
        assert_eq!(
            (p.compute_ns, p.memory_ns, p.device_ns, p.comm_ns),
            (2.5, 5.0, 7.5, 10.0)
        );
    }
}

/// The pieces of one stage's formula, each against the mechanism it prices;
/// the behavioural tests in `crate::tests` see only whole steps.
#[cfg(test)]
mod stage_tests {
    use super::{ACTIVATION_BYTES, CUSTOM_ALLREDUCE_MAX_BYTES, Parts, Work};
    use crate::CostModel;
    use crate::tests::{batch, deepseek_ep, setup};
    use crate::{Batch, GraphMode};

    fn prefill_after_cache(chunk: f64, cached: f64) -> Work {
        let context = chunk + cached;
        Work {
            padded: chunk,
            tokens: chunk,
            context,
            // Σ over the chunk's tokens of the keys each attends to.
            pairs: chunk * cached + chunk * (chunk + 1.0) / 2.0,
            logits_rows: 1.0,
            prefill_tokens: chunk,
            decode_reqs: 0.0,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
    }

    /// `setup`'s roofline with one coefficient set to `value`, at every
    /// scope.
    fn with_coefficient(
        setup: &crate::tests::Setup,
        name: &str,
        value: f64,
        units: &str,
    ) -> super::Roofline {
        setup
            .roofline(&[crate::tests::set(
                "test",
                &crate::tests::entry(name, value, units, "{}"),
            )])
            .unwrap()
    }

    fn nemotron_tp2(engine: &str) -> super::Roofline {
        crate::tests::setup("nemotron-h-8b", "h100", "{tp: 2, pp: 1, dp: 1}", engine, 1)
            .roofline(&[])
            .unwrap()
    }

    #[test]
    fn a_hybrids_layers_are_priced_from_its_own_shapes() {
        // Nemotron-H-8B at TP 2 (research/nemotron-h-in-vllm-0.31.0.md §1,
        // §6): 24 Mamba2, 4 attention and 24 MLP layers; attention Q, K, V
        // and O of 41,943,040 parameters, an up/down MLP of 2 × 4,096 ×
        // 21,504, `in_proj` 4,096 × 18,560 and `out_proj` 8,192 × 4,096,
        // each halved by TP; FLOPs are twice the parameters.
        let model = nemotron_tp2("{}");
        let hy = model.hybrid.expect("a hybrid");
        assert_eq!(
            (
                hy.mamba_layers_stage,
                hy.attention_layers_stage,
                hy.mlp_layers_stage
            ),
            (24.0, 4.0, 24.0)
        );
        assert_eq!(model.attention_projections.flops_per_token, 41_943_040.0);
        assert_eq!(model.dense_mlp.flops_per_token, 176_160_768.0);
        assert_eq!(hy.in_proj.flops_per_token, 76_021_760.0);
        assert_eq!(hy.out_proj.flops_per_token, 33_554_432.0);
        // The scan: (2·128·8·128 + 2·128·128·64 + 4·128·64·128) / 2 FLOPs
        // and 3 · 64 · 64 · 128 · 4 / 128 bytes of chunk states a prefill
        // token; the update 6 · 64 · 64 · 128 + 2 · 4 · 10,240 / 2 FLOPs a
        // decode; the state (float32 SSM by default) 30,720 + 2,097,152
        // bytes.
        assert_eq!(hy.scan_flops_per_token, 3_276_800.0);
        assert_eq!(hy.scan_bytes_per_token, 49_152.0);
        assert_eq!(hy.update_flops_per_request, 3_186_688.0);
        assert_eq!(hy.state_bytes, 2_127_872.0);
        assert_eq!(
            nemotron_tp2("{mamba_ssm_cache_dtype: bfloat16}")
                .hybrid
                .unwrap()
                .state_bytes,
            1_079_296.0
        );
        // Two pipeline stages take half the layers each.
        let pp2 = crate::tests::setup("nemotron-h-8b", "h100", "{tp: 1, pp: 2, dp: 1}", "{}", 1)
            .roofline(&[])
            .unwrap()
            .hybrid
            .unwrap();
        assert_eq!(
            (
                pp2.mamba_layers_stage,
                pp2.attention_layers_stage,
                pp2.mlp_layers_stage
            ),
            (12.0, 2.0, 12.0)
        );
    }

    #[test]
    fn a_hybrid_stage_is_its_layers_kernels_with_one_all_reduce_a_layer() {
        let model = nemotron_tp2("{}");
        let hy = model.hybrid.unwrap();
        let hbm = model.hbm_bytes_per_ns;
        let attn = model.attention_flops_per_ns;
        // Each kernel term, recomputed: the GEMM groups, attention over the
        // four attention layers, and the Mamba2 scan and state traffic.
        let expect = |w: Work| {
            let mut p = Parts::default();
            let t = w.padded;
            for (g, layers) in [
                (model.attention_projections, 4.0),
                (model.dense_mlp, 24.0),
                (hy.in_proj, 24.0),
                (hy.out_proj, 24.0),
            ] {
                p.kernel(
                    super::Roofline::gemm_ns(
                        layers * g.flops_per_token * t,
                        t,
                        model.gemm_flops_per_ns,
                        model.gemm_m_half_tokens,
                    ),
                    layers * (g.weight_bytes + g.activation_bytes_per_token * t) / hbm,
                );
            }
            p.kernel(
                4.0 * model.attention_flops_per_pair * w.pairs / attn,
                4.0 * model.kv_bytes_per_token * (w.context + w.tokens) / hbm,
            );
            p.kernel(
                24.0 * (hy.scan_flops_per_token * w.prefill_tokens
                    + hy.update_flops_per_request * w.decode_reqs)
                    / attn,
                24.0 * (hy.scan_bytes_per_token * w.prefill_tokens
                    + 2.0 * hy.state_bytes * w.logits_rows)
                    / hbm,
            );
            p
        };
        let decode = Work {
            padded: 16.0,
            tokens: 16.0,
            context: 16_000.0,
            pairs: 16_000.0,
            logits_rows: 16.0,
            prefill_tokens: 0.0,
            decode_reqs: 16.0,
        };
        let prefill = prefill_after_cache(1_000.0, 0.0);
        let floor = model.kernel_floor_ns;
        // Kernels: 4 × 5 + 24 × 4 + 24 × 6, and the scan's four more a
        // Mamba2 layer when the step has prefill tokens.
        for (w, kernels) in [(decode, 260.0), (prefill, 356.0)] {
            let got = model.stage(w, 52.0, 0.0, false);
            let want = expect(w);
            assert!(close(got.compute_ns, want.compute_ns), "{got:?} {want:?}");
            assert!(close(got.memory_ns, want.memory_ns), "{got:?} {want:?}");
            assert!(
                close(got.device_ns, want.device_ns + kernels * floor),
                "{got:?} {want:?}"
            );
            let tc = model.tensor_comm.unwrap();
            let bytes = w.padded * tc.bytes_per_token;
            let all_reduce = match tc.custom {
                Some(c) if bytes <= CUSTOM_ALLREDUCE_MAX_BYTES => c.time_ns(bytes),
                _ => tc.all_reduce.time_ns(bytes),
            };
            assert!(close(got.comm_ns, 52.0 * all_reduce), "{got:?}");
            // The head adds its GEMM and three kernels.
            let with_head = model.stage(w, 52.0, 0.0, true);
            let mut head = Parts::default();
            assert_eq!(model.head_kernel(&mut head, w), 3.0);
            assert!(close(
                with_head.device_ns,
                got.device_ns + head.device_ns + 3.0 * floor
            ));
        }
        // A large prefill's all-reduce goes past the custom all-reduce's
        // limit, onto NCCL's curve.
        let big = prefill_after_cache(8_192.0, 0.0);
        let tc = model.tensor_comm.unwrap();
        assert!(big.padded * tc.bytes_per_token > CUSTOM_ALLREDUCE_MAX_BYTES);
        let got = model.stage(big, 52.0, 0.0, false);
        assert!(close(
            got.comm_ns,
            52.0 * tc.all_reduce.time_ns(big.padded * tc.bytes_per_token)
        ));
    }

    fn deepseek_v41(engine: &str) -> super::Roofline {
        crate::tests::setup(
            "deepseek-v4.1",
            "b200",
            "{tp: 8, pp: 1, dp: 1, enable_expert_parallel: true}",
            engine,
            1,
        )
        .roofline(&[])
        .unwrap()
    }

    fn decode_at(requests: f64, context: f64) -> Work {
        Work {
            padded: requests,
            tokens: requests,
            context: requests * context,
            pairs: requests * context,
            logits_rows: requests,
            prefill_tokens: 0.0,
            decode_reqs: requests,
        }
    }

    #[test]
    fn deepseek_v41s_attention_is_laid_out_from_its_config() {
        // research/deepseek-v4.1-in-vllm-0.31.0.md §1, §2, §4, §6 on B200 at
        // TP 8: 2 window-only layers, 20 at ratio 1, 18 at ratio 2; 8
        // heads a rank over the 512 latent; MXFP8 window records of 528
        // bytes and nvfp4 compressed rows of 288; the indexer's sources at
        // ratios 2, 2, 2, 1, 1, 1, 1, 1 with 4 of its 32 heads a rank over
        // 128 dims and 132-byte FP8 keys; Engram's 24 rows a token in 8
        // shards (3 a rank) of 264 bytes, on layers 1 and 14.
        let model =
            deepseek_v41("{moe_backend: deep_gemm_mega_moe, engram_config: {cpu_offload: false}}");
        let sa = model.sparse.clone().expect("DeepSeek-V4.1");
        assert_eq!(
            (sa.window_only_layers, sa.ratio1_layers, sa.ratio2_layers),
            (2.0, 20.0, 18.0)
        );
        assert_eq!((sa.window, sa.topk), (128.0, 512.0));
        assert_eq!(sa.flops_per_row, 4.0 * 8.0 * 512.0);
        assert_eq!(
            (sa.window_record_bytes, sa.compressed_row_bytes),
            (528.0, 288.0)
        );
        assert_eq!(
            sa.index_ratios,
            vec![2.0, 2.0, 2.0, 1.0, 1.0, 1.0, 1.0, 1.0]
        );
        assert_eq!(
            (sa.index_flops_per_key, sa.index_key_bytes),
            (1024.0, 132.0)
        );
        assert_eq!(sa.engram_bytes_per_token, 3.0 * 264.0);
        assert_eq!(sa.engram_layers, vec![1.0, 14.0]);
        assert!(!sa.engram_host);
        assert!(sa.sequence_parallel);
        assert_eq!(sa.host_link_bytes_per_ns, 63.0);
        // Host tables and no mega-MoE backend.
        let other = deepseek_v41("{engram_config: {cpu_offload: true}}");
        let sa = other.sparse.as_ref().unwrap();
        assert!(sa.engram_host);
        assert!(!sa.sequence_parallel);
    }

    #[test]
    fn a_decode_reads_the_window_and_the_picks_while_the_indexer_reads_the_context() {
        let model =
            deepseek_v41("{moe_backend: deep_gemm_mega_moe, engram_config: {cpu_offload: false}}");
        let sa = model.sparse.clone().unwrap();
        let (hbm, attn) = (model.hbm_bytes_per_ns, model.attention_flops_per_ns);
        let parts = |w: Work| {
            let mut p = Parts::default();
            model.sparse_attention(&mut p, &sa, w);
            p
        };
        // 16 requests at 64k and at 128k of context: the sparse attention
        // reads 128 window rows and 512 picked rows a layer either way;
        // only the indexer's keys (every context / ratio) grow, by
        // 16 · 64k · Σ 1/ratio · 132 bytes, and its scores with them.
        let (a, b) = (
            parts(decode_at(16.0, 65_536.0)),
            parts(decode_at(16.0, 131_072.0)),
        );
        let inverse: f64 = sa.index_ratios.iter().map(|r| 1.0 / r).sum();
        assert!(close(
            b.memory_ns - a.memory_ns,
            16.0 * 65_536.0 * inverse * 132.0 / hbm
        ));
        assert!(close(
            b.compute_ns - a.compute_ns,
            1024.0 * 16.0 * 65_536.0 * inverse / attn
        ));
        // The attention itself at 64k: 16 queries over 40 layers' window
        // rows and 38 layers' picks; 16 window records written a layer.
        let w = decode_at(16.0, 65_536.0);
        let attention_flops = 16_384.0 * 16.0 * (40.0 * 128.0 + 38.0 * 512.0);
        let attention_bytes = 40.0 * (16.0 * 128.0 + 16.0) * 528.0 + 38.0 * 16.0 * 512.0 * 288.0;
        let index_flops = 1024.0 * w.pairs * inverse;
        let index_bytes = 16.0 * 65_536.0 * inverse * 132.0;
        let engram_bytes = 2.0 * 16.0 * 792.0;
        assert!(
            close(a.compute_ns, (attention_flops + index_flops) / attn),
            "{a:?}"
        );
        assert!(close(
            a.memory_ns,
            (attention_bytes + index_bytes + engram_bytes) / hbm
        ));
        // A short context skips the indexer (everything is picked): at 512
        // tokens no ratio leaves more than 512 positions.
        let short = parts(decode_at(4.0, 512.0));
        let rows = 40.0 * 128.0 + 20.0 * 512.0 + 18.0 * 256.0;
        assert!(close(short.compute_ns, 16_384.0 * 4.0 * rows / attn));
        // A prefilling request gathers its whole compressed region.
        let prefill = Work {
            decode_reqs: 0.0,
            ..decode_at(1.0, 4_096.0)
        };
        let p = parts(prefill);
        let gathered = 20.0 * 4_096.0 + 18.0 * 2_048.0;
        let window = 40.0 * (128.0 + 1.0) * 528.0;
        let keys = 4_096.0 * inverse * 132.0;
        assert!(close(
            p.memory_ns,
            (window + gathered * 288.0 + keys + 2.0 * 792.0) / hbm
        ));
    }

    #[test]
    fn host_engram_lookups_stall_only_past_the_layers_before_them() {
        let mut sa = deepseek_v41("{engram_config: {cpu_offload: true}}")
            .sparse
            .unwrap();
        sa.host_link_bytes_per_ns = 1.0;
        let w = decode_at(1000.0, 1000.0);
        // 1,000 tokens × 792 bytes = 792,000 ns a lookup. Layer 1 waits for
        // the first (one layer of slack), layer 14 for both (14 layers).
        let stall = |layer_ns: f64| super::Roofline::engram_stall_ns(&sa, w, layer_ns * 40.0, 40.0);
        assert!(close(stall(0.0), 1_584_000.0));
        assert!(close(stall(50_000.0), 1_584_000.0 - 14.0 * 50_000.0));
        assert!(close(stall(100_000.0), 792_000.0 - 100_000.0));
        assert!(close(stall(120_000.0), 792_000.0 - 120_000.0));
        assert_eq!(stall(1e9), 0.0);
        sa.engram_host = false;
        assert_eq!(super::Roofline::engram_stall_ns(&sa, w, 0.0, 40.0), 0.0);
    }

    #[test]
    fn the_output_head_scores_its_rows_over_the_vocabulary() {
        // Llama-3.1-8B at TP 1: 128,256 × 4,096 weights, 2 FLOPs each a
        // row, read once in 16 bits; each row writes its fp32 logits and
        // reads its hidden state.
        let model = crate::tests::llama8b_tp1().roofline(&[]).unwrap();
        let params = 128_256.0 * 4_096.0;
        let rows = 24.0;
        let w = Work {
            logits_rows: rows,
            ..prefill_after_cache(100.0, 0.0)
        };
        let mut p = Parts::default();
        model.head_kernel(&mut p, w);
        let compute = super::Roofline::gemm_ns(
            2.0 * params * rows,
            rows,
            model.head_flops_per_ns,
            model.head_m_half_tokens,
        );
        let bytes = params * 2.0 + rows * (128_256.0 * 4.0 + 4_096.0 * 2.0);
        assert!(close(p.compute_ns, compute), "{p:?}");
        assert!(close(p.memory_ns, bytes / model.hbm_bytes_per_ns), "{p:?}");
    }

    #[test]
    fn a_stage_waits_for_host_engram_lookups_its_layers_do_not_hide() {
        // The same stage with a link fast enough to hide every lookup, and
        // with one slow enough to stall: the difference is the stall the
        // lookups leave after the layers before them.
        let mut fast = deepseek_v41("{engram_config: {cpu_offload: true}}");
        fast.sparse.as_mut().unwrap().host_link_bytes_per_ns = 1e12;
        let mut slow = fast.clone();
        slow.sparse.as_mut().unwrap().host_link_bytes_per_ns = 1e-3;
        let w = prefill_after_cache(4_096.0, 0.0);
        let layers = fast.dense_layers_stage + fast.moe_layers_stage;
        let hidden = fast.stage(w, fast.dense_layers_stage, fast.moe_layers_stage, false);
        let stalled = slow.stage(w, slow.dense_layers_stage, slow.moe_layers_stage, false);
        let stall = super::Roofline::engram_stall_ns(
            slow.sparse.as_ref().unwrap(),
            w,
            hidden.device_ns,
            layers,
        );
        assert!(stall > 0.0);
        assert!(close(stalled.device_ns, hidden.device_ns + stall));
        assert_eq!(stalled.memory_ns, hidden.memory_ns);
    }

    #[test]
    fn deepseeks_own_sequence_parallelism_gathers_and_scatters_around_attention() {
        // With the mega-MoE backend (TP 8, EP 8): an all-gather and a
        // reduce-scatter a layer, no all-reduce, and each rank dispatching
        // an eighth of the tokens.
        let sp = deepseek_v41("{moe_backend: deep_gemm_mega_moe}");
        let w = prefill_after_cache(4_096.0, 0.0);
        let tc = sp.tensor_comm.unwrap();
        let (rs, ag) = tc.sequence_parallel.expect("rs and ag curves");
        let bytes = w.padded * tc.bytes_per_token;
        let ec = sp.expert_comm.unwrap();
        let t = w.padded / 8.0;
        let want = 40.0 * (rs.time_ns(bytes) + ag.time_ns(bytes))
            + 40.0
                * (ec.dispatch.time_ns(t * ec.dispatch_bytes_per_token)
                    + ec.combine.time_ns(t * ec.combine_bytes_per_token));
        let got = sp.stage(w, sp.dense_layers_stage, sp.moe_layers_stage, false);
        assert!(close(got.comm_ns, want), "{} vs {want}", got.comm_ns);
        // Without it: two all-reduces a layer and every token dispatched.
        let plain = deepseek_v41("{}");
        assert!(plain.sparse.as_ref().is_some_and(|s| !s.sequence_parallel));
        let got = plain.stage(w, plain.dense_layers_stage, plain.moe_layers_stage, false);
        let tc = plain.tensor_comm.unwrap();
        let ec = plain.expert_comm.unwrap();
        let all_reduce = tc.all_reduce.time_ns(bytes);
        let want = 80.0 * all_reduce
            + 40.0
                * (ec.dispatch.time_ns(w.padded * ec.dispatch_bytes_per_token)
                    + ec.combine.time_ns(w.padded * ec.combine_bytes_per_token));
        assert!(close(got.comm_ns, want), "{} vs {want}", got.comm_ns);
    }

    #[test]
    fn scaling_work_scales_every_figure() {
        let w = Work {
            padded: 8.0,
            tokens: 6.0,
            context: 100.0,
            pairs: 300.0,
            logits_rows: 4.0,
            prefill_tokens: 2.0,
            decode_reqs: 3.0,
        };
        let h = w.scaled(0.5);
        assert_eq!(
            [
                h.padded,
                h.tokens,
                h.context,
                h.pairs,
                h.logits_rows,
                h.prefill_tokens,
                h.decode_reqs
            ],
            [4.0, 3.0, 50.0, 150.0, 2.0, 1.0, 1.5]
        );
    }

    #[test]
    fn the_output_head_pays_three_kernel_floors_on_top_of_its_gemm() {
        // A stage of no layers with the head: the head's GEMM (the larger
        // of its compute and its weight read) plus `KERNELS_HEAD` = 3
        // launches (final norm, output head, sampler) at the kernel floor.
        let model = crate::tests::llama8b_tp1().roofline(&[]).unwrap();
        let floor = model.kernel_floor_ns;
        assert!(floor > 0.0);
        let w = prefill_after_cache(16.0, 0.0);
        let head = model.stage(w, 0.0, 0.0, true);
        assert!(head.memory_ns > 0.0);
        assert!(
            close(
                head.device_ns,
                head.compute_ns.max(head.memory_ns) + 3.0 * floor
            ),
            "{head:?}, floor {floor} ns"
        );
        let none = model.stage(w, 0.0, 0.0, false);
        assert_eq!(none.device_ns, 0.0);
    }

    #[test]
    fn under_sequence_parallel_moe_a_moe_layer_trades_an_all_reduce_for_scatter_and_gather() {
        // vLLM's sequence-parallel MoE (`use_sequence_parallel_moe`): the
        // attention output is all-reduced in every layer; a dense MLP's
        // output is all-reduced too, while a MoE layer reduce-scatters its
        // tokens to the ranks and all-gathers them after the experts.
        let mut model = setup(
            "mixtral-8x7b",
            "h100",
            "{tp: 2, pp: 1, dp: 2, enable_expert_parallel: true}",
            "{all2all_backend: deepep_high_throughput}",
            1,
        )
        .roofline(&[])
        .unwrap();
        model.expert_comm = None;
        let tc = model.tensor_comm.expect("tp 2 all-reduces");
        let (rs, ag) = tc.sequence_parallel.expect("sequence-parallel MoE is on");
        let w = prefill_after_cache(512.0, 0.0);
        let bytes = w.padded * tc.bytes_per_token;
        let all_reduce = match tc.custom {
            Some(custom) if bytes <= CUSTOM_ALLREDUCE_MAX_BYTES => custom.time_ns(bytes),
            _ => tc.all_reduce.time_ns(bytes),
        };
        let dense_layer = model.stage(w, 1.0, 0.0, false).comm_ns;
        let moe_layer = model.stage(w, 0.0, 1.0, false).comm_ns;
        assert!(
            close(dense_layer, 2.0 * all_reduce),
            "{dense_layer} vs 2 × {all_reduce}"
        );
        assert!(
            close(
                moe_layer,
                all_reduce + rs.time_ns(bytes) + ag.time_ns(bytes)
            ),
            "{moe_layer}"
        );
    }

    #[test]
    fn the_mla_up_projection_is_priced_per_layer_and_per_token_up_projected() {
        // Without the up projection's FLOPs the stage's compute loses
        // exactly that GEMM, whose FLOPs are layers × per-token FLOPs ×
        // the tokens up-projected: twice the layers, twice the time.
        let model = deepseek_ep(8, "deepep_high_throughput")
            .roofline(&[])
            .unwrap();
        assert!(
            model.up_projection_flops_per_token > 0.0,
            "DeepSeek-V3 is MLA"
        );
        let mut without = model.clone();
        without.up_projection_flops_per_token = 0.0;
        let up_in = |w: Work, layers: f64| {
            model.stage(w, layers, 0.0, false).compute_ns
                - without.stage(w, layers, 0.0, false).compute_ns
        };
        let w = prefill_after_cache(2048.0, 6144.0);
        let up = |layers: f64| up_in(w, layers);
        assert!(up(1.0) > 0.0);
        assert!(
            close(up(2.0), 2.0 * up(1.0)),
            "{} vs 2 × {}",
            up(2.0),
            up(1.0)
        );
        assert!(
            close(up(4.0), 4.0 * up(1.0)),
            "{} vs 4 × {}",
            up(4.0),
            up(1.0)
        );
        // The tokens up-projected: the chunk plus the excess of pairs over
        // context divided by the engine's chunk size, here fewer than the
        // 8,192 of context. (A GEMM of m tokens at f FLOPs each takes
        // f · (m + m½) / rate, so m comes back from the time.)
        let tokens = up(1.0) * model.gemm_flops_per_ns / model.up_projection_flops_per_token
            - model.gemm_m_half_tokens;
        let expected = 2048.0 + (w.pairs - w.context) / model.chunk_tokens;
        assert!(expected < w.context);
        assert!(close(tokens, expected), "{tokens} vs {expected}");
        // A chunk after a longer cached context up-projects more of it.
        let longer = prefill_after_cache(2048.0, 14336.0);
        assert!(
            up_in(longer, 1.0) > up(1.0),
            "{} vs {}",
            up_in(longer, 1.0),
            up(1.0)
        );
    }

    #[test]
    fn mla_decode_attention_reads_each_context_token_at_the_absorbed_width() {
        // MLA's absorbed decode path costs extra FLOPs per context token per
        // layer: removing them removes exactly layers × extra × context of
        // attention work, proportional to the context.
        let model = deepseek_ep(8, "deepep_low_latency").roofline(&[]).unwrap();
        assert!(model.attention_decode_extra_flops_per_token > 0.0);
        let mut without = model.clone();
        without.attention_decode_extra_flops_per_token = 0.0;
        let decode = |context: f64| Work {
            padded: 1.0,
            tokens: 1.0,
            context,
            pairs: context,
            logits_rows: 1.0,
            prefill_tokens: 0.0,
            decode_reqs: 1.0,
        };
        let extra = |context: f64| {
            model.stage(decode(context), 2.0, 0.0, false).compute_ns
                - without.stage(decode(context), 2.0, 0.0, false).compute_ns
        };
        let expected = 2.0 * model.attention_decode_extra_flops_per_token * 4096.0
            / model.attention_flops_per_ns;
        assert!(
            close(extra(4096.0), expected),
            "{} vs {expected}",
            extra(4096.0)
        );
        assert!(close(extra(8192.0), 2.0 * expected));
    }

    #[test]
    fn the_drafters_head_scores_one_row_per_request_whatever_the_target_scores() {
        // The drafter's first pass samples one token per request, so its
        // output head has one row per request; the target's rows (its
        // drafts verified) do not enter it.
        let model = setup(
            "mixtral-8x7b",
            "h100",
            "{tp: 2, pp: 1, dp: 2, enable_expert_parallel: true}",
            "{all2all_backend: deepep_high_throughput, speculative: {method: eagle, num_spec_tokens: 2}}",
            1,
        )
        .roofline(&[])
        .unwrap();
        let full = |logits_rows: f64| Work {
            logits_rows,
            ..prefill_after_cache(12.0, 4000.0)
        };
        let draft = |rows: f64| model.draft(full(rows), 4.0, 1.0);
        let (few, many) = (draft(4.0), draft(12.0));
        assert_eq!(
            (few.compute_ns, few.memory_ns, few.device_ns, few.comm_ns),
            (
                many.compute_ns,
                many.memory_ns,
                many.device_ns,
                many.comm_ns
            )
        );
    }

    #[test]
    fn the_routed_experts_are_never_faster_than_the_gemm_peak() {
        // Their GEMMs run at peak × pairs / (pairs + m_half × touched), an
        // efficiency below 1: never faster than the FLOPs at peak.
        let model = deepseek_ep(8, "deepep_high_throughput")
            .roofline(&[])
            .unwrap();
        let x = model.experts.expect("MoE");
        let mut no_experts = model.clone();
        no_experts.experts = None;
        for tokens in [1.0, 64.0, 4096.0] {
            let w = prefill_after_cache(tokens, 0.0);
            let (_, pairs, touched) = x.load(tokens);
            let experts = model.stage(w, 0.0, 1.0, false).compute_ns
                - no_experts.stage(w, 0.0, 1.0, false).compute_ns;
            let at_peak = x.flops_per_pair * pairs / model.gemm_flops_per_ns * x.imbalance;
            let expected = x.flops_per_pair * (pairs + model.gemm_m_half_tokens * touched)
                / model.gemm_flops_per_ns
                * x.imbalance;
            assert!(experts > at_peak, "{tokens}: {experts} vs {at_peak}");
            assert!(
                close(experts, expected),
                "{tokens}: {experts} vs {expected}"
            );
        }
    }

    #[test]
    fn vllms_custom_all_reduce_takes_inputs_up_to_8_mib() {
        // `custom_all_reduce.py`: `max_size = 8192 * 1024`.
        assert_eq!(CUSTOM_ALLREDUCE_MAX_BYTES, 8_388_608.0);
        // DeepEP's FP8 dispatch: a byte per element and a 4-byte scale per
        // 128 of them.
        assert_eq!(super::FP8_DISPATCH_BYTES, 1.03125);
    }

    #[test]
    fn an_all_to_all_across_nodes_divides_the_fabric_rate_by_its_wire_factor() {
        // The part of an all-to-all that leaves the node: (n − 8) / n of
        // the ranks, 0.5 at EP 16 and 0.75 at EP 32, so EP 16 runs 1.5 ×
        // as fast per byte at the peak.
        let peak = |dp: u32| {
            deepseek_ep(dp, "pplx")
                .roofline(&[])
                .unwrap()
                .expert_comm
                .expect("expert parallel")
                .dispatch
                .peak_bytes_per_ns
        };
        assert!(close(peak(16), 1.5 * peak(32)), "{} {}", peak(16), peak(32));
    }

    #[test]
    fn an_async_scheduler_exposes_only_what_outlasts_the_gpu() {
        // Under async scheduling `schedule()` overlaps the GPU step; only
        // the part beyond it shows: at 1 s per request, 4 requests take
        // the 4 s of scheduling (plus the per-step time), not 4 s more
        // than the GPU's few milliseconds, and not the GPU's alone.
        let base = crate::tests::llama8b_tp1();
        let total = |per_request_us: f64| {
            let m = with_coefficient(
                &base,
                "host_schedule_per_request",
                per_request_us,
                "us_per_request",
            );
            assert!(m.async_scheduling);
            (
                m.step(&crate::tests::decode(4, 1000)).total.as_ns(),
                m.schedule_step_ns,
            )
        };
        let (busy, step_ns) = total(1e6);
        assert!(
            close(busy as f64, 4e9 + step_ns),
            "{busy} vs {}",
            4e9 + step_ns
        );
        let (idle, _) = total(0.0);
        assert!(idle < 100_000_000, "{idle}");
    }

    #[test]
    fn the_sampler_scores_a_row_per_request_and_per_draft_token() {
        // Four decodes with three drafts each (12 draft tokens) beside a
        // 512-token prefill chunk: 5 requests + 12 drafts = 17 rows, far
        // fewer than the 528 tokens; a decode-only batch of 2 requests
        // whose drafts were cut to fewer tokens than rows keeps the tokens.
        let mut b = crate::tests::batch(4, 1000, 512, 0, crate::GraphMode::Piecewise);
        b.spec_tokens = 12;
        assert_eq!(Work::of_batch(&b, 528.0, 528.0).logits_rows, 17.0);
        let mut d = crate::tests::decode(2, 100);
        d.spec_tokens = 4;
        assert_eq!(Work::of_batch(&d, 3.0, 3.0).logits_rows, 3.0);
    }

    #[test]
    fn a_synchronous_scheduler_adds_its_time_per_step_and_per_request() {
        // Without async scheduling the GPU waits for `schedule()`: 1 µs per
        // request on top of the step's own time, for each of 4 requests.
        let base = crate::tests::llama8b_tp1();
        let with = |per_request_us: f64| {
            let mut m = with_coefficient(
                &base,
                "host_schedule_per_request",
                per_request_us,
                "us_per_request",
            );
            m.async_scheduling = false;
            m.step(&crate::tests::decode(4, 1000)).total.as_ns()
        };
        assert_eq!(with(1.0) - with(0.0), 4_000);
    }

    #[test]
    fn an_internode_collective_runs_at_the_fabric_rate_times_its_efficiency() {
        // EP 16 spans two nodes of 8: the all-to-all's peak rate is the
        // fabric's per-GPU rate × `collective_internode_efficiency` over
        // the wire factor, so halving the efficiency halves the rate; and
        // the crossing adds `collective_internode_floor`, in µs, to the
        // intra-node floor: 10 µs more is 10,000 ns more.
        let setup = deepseek_ep(16, "pplx");
        let dispatch = |name: &str, value: f64, units: &str| {
            with_coefficient(&setup, name, value, units)
                .expert_comm
                .expect("expert parallel")
                .dispatch
        };
        let peak = |e: f64| {
            dispatch("collective_internode_efficiency", e, "dimensionless").peak_bytes_per_ns
        };
        let floor =
            |us: f64| dispatch("collective_internode_floor", us, "us_per_transfer").floor_ns;
        assert!(
            close(peak(0.5), 0.5 * peak(1.0)),
            "{} {}",
            peak(0.5),
            peak(1.0)
        );
        assert!(
            close(floor(10.0) - floor(0.0), 10_000.0),
            "{} {}",
            floor(10.0),
            floor(0.0)
        );
        // EP 8 fills one node of 8 exactly: nothing crosses the fabric, so
        // the internode floor is not paid.
        let one_node = deepseek_ep(8, "pplx");
        let floor_one_node = |us: f64| {
            with_coefficient(
                &one_node,
                "collective_internode_floor",
                us,
                "us_per_transfer",
            )
            .expert_comm
            .expect("expert parallel")
            .dispatch
            .floor_ns
        };
        assert_eq!(floor_one_node(10.0), floor_one_node(0.0));
    }

    #[test]
    fn low_latency_all_to_all_runs_the_routed_curve_at_a_fraction_of_its_rate() {
        // DeepEP's low-latency kernels move the same all-to-all as the
        // routed backends, with the same floor, at
        // `all2all_low_latency_bw_efficiency` of both the transition and
        // the peak rate.
        let ll = deepseek_ep(8, "deepep_low_latency").roofline(&[]).unwrap();
        let routed = deepseek_ep(8, "pplx").roofline(&[]).unwrap();
        let (ll, routed) = (
            ll.expert_comm.expect("expert parallel").dispatch,
            routed.expert_comm.expect("expert parallel").dispatch,
        );
        let efficiency = ll.peak_bytes_per_ns / routed.peak_bytes_per_ns;
        assert!(efficiency > 0.0 && efficiency < 1.0, "{ll:?} vs {routed:?}");
        assert!(close(
            ll.transition_bytes_per_ns,
            routed.transition_bytes_per_ns * efficiency
        ));
        assert!(close(ll.floor_ns, routed.floor_ns), "{ll:?} vs {routed:?}");
    }

    #[test]
    fn expert_parallel_combine_returns_each_routed_expert_output_in_bf16() {
        // DeepEP's combine sends back, for every token, the output of each
        // of its k routed experts: hidden × 2 bytes × k, with no FP8 (the
        // dispatch may quantise, the combine does not).
        // DeepSeek-V3's FP8 weights make the dispatch FP8, with one 4-byte
        // scale per 128 values.
        assert_deepseek_sends_each_token(8, "deepep_low_latency", 8.0);
    }

    /// DeepSeek-V3 (hidden 7168) at EP `ep` on `backend` sends each token
    /// `copies` times: its hidden state in FP8 to dispatch, in BF16 back.
    fn assert_deepseek_sends_each_token(ep: u32, backend: &str, copies: f64) {
        let model = deepseek_ep(ep, backend).roofline(&[]).unwrap();
        let ec = model.expert_comm.expect("expert parallel");
        let h = 7168.0;
        assert!(
            close(ec.combine_bytes_per_token, h * ACTIVATION_BYTES * copies),
            "{ec:?}"
        );
        assert!(
            close(
                ec.dispatch_bytes_per_token,
                h * super::FP8_DISPATCH_BYTES * copies
            ),
            "{ec:?}"
        );
    }

    #[test]
    fn a_routed_all_to_all_sends_each_token_once_per_rank_its_experts_are_on() {
        // The high-throughput and routed kernels send a token once to each
        // rank that holds one of its k experts: with experts spread evenly
        // over EP 16 ranks, ep · (1 − (1 − 1/ep)^k) ranks in expectation,
        // 16 × (1 − (15/16)^8) ≈ 6.06 for DeepSeek-V3's k = 8.
        let ranks = 16.0 * (1.0 - (15.0_f64 / 16.0).powi(8));
        assert_deepseek_sends_each_token(16, "pplx", ranks);
    }

    #[test]
    fn dual_batch_overlap_hides_all_but_one_layer_of_the_shorter_side() {
        // `gpu_ubatch_wrapper.py`: each microbatch's compute overlaps the
        // other's all-to-all layer by layer, so a stage costs both
        // microbatches' longer side in full plus one layer's worth of the
        // shorter side, `2 · long + short / layers`, with each microbatch's
        // kernels launched apart. DeepSeek-V3 has 3 dense and 58 MoE layers,
        // 61 in its one stage here (pp 1, no drafts, no pipeline sends).
        let model = deepseek_ep(16, "deepep_high_throughput")
            .roofline(&[])
            .unwrap();
        assert_eq!(model.dense_layers_stage + model.moe_layers_stage, 61.0);
        let b = Batch {
            dbo: true,
            ..batch(256, 2048, 0, 0, GraphMode::Piecewise)
        };
        let tokens = b.tokens() as f64;
        let half = model.stage(
            Work::of_batch(&b, tokens, tokens).scaled(0.5),
            3.0,
            58.0,
            true,
        );
        let (long, short) = (
            half.device_ns.max(half.comm_ns),
            half.device_ns.min(half.comm_ns),
        );
        assert!(short > 0.0 && long > short, "{half:?}");
        let gpu = 2.0 * long + short / 61.0 + 2.0 * model.launch_ns(b.graph);
        let got = model.step(&b);
        // The host's scheduling is hidden behind a step this long.
        assert!(got.host_ns as f64 <= gpu, "{got:?}");
        assert!(
            (got.total.as_ns() as f64 - gpu).abs() <= 1.0,
            "{} ns against 2 · {long} + {short} / 61 + launches = {gpu}",
            got.total.as_ns()
        );
    }
}
