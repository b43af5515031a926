//! Models as the engine and the cost model see them, derived from the
//! Hugging Face `config.json` keys.
//!
//! pdsim reads the same keys whether they come from a real `config.json` in a
//! user catalog (`models/<name>/config.json`, the BLIS catalog layout) or from
//! a built-in `models/<name>.yaml` that restates them with sources. Parameter
//! counts follow the module structure vLLM builds for each architecture
//! (`vllm/model_executor/models/{llama,mixtral,qwen3,qwen3_moe,deepseek_v2,minimax_m2}.py`);
//! KV bytes per token follow vLLM's page sizes (`vllm/v1/kv_cache_interface.py`).

use serde::{Deserialize, Serialize};

/// The subset of a Hugging Face config that pdsim reads. Unknown keys in a
/// real `config.json` are ignored (those files carry dozens of training
/// settings); the built-in YAML files are checked for typos separately.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct HfConfig {
    #[serde(default)]
    pub architectures: Vec<String>,
    #[serde(default)]
    pub model_type: Option<String>,
    pub hidden_size: i64,
    pub num_hidden_layers: i64,
    pub num_attention_heads: i64,
    #[serde(default)]
    pub num_key_value_heads: Option<i64>,
    #[serde(default)]
    pub head_dim: Option<i64>,
    #[serde(default)]
    pub intermediate_size: Option<i64>,
    pub vocab_size: i64,
    #[serde(default)]
    pub max_position_embeddings: Option<i64>,
    #[serde(default)]
    pub tie_word_embeddings: Option<bool>,
    #[serde(default)]
    pub torch_dtype: Option<String>,
    #[serde(default)]
    pub quantization_config: Option<QuantizationConfig>,
    // Mixture of experts, under each family's own key.
    #[serde(default)]
    pub num_local_experts: Option<i64>,
    #[serde(default)]
    pub num_experts: Option<i64>,
    #[serde(default)]
    pub n_routed_experts: Option<i64>,
    #[serde(default)]
    pub num_experts_per_tok: Option<i64>,
    #[serde(default)]
    pub moe_intermediate_size: Option<i64>,
    #[serde(default)]
    pub n_shared_experts: Option<i64>,
    #[serde(default)]
    pub shared_expert_intermediate_size: Option<i64>,
    #[serde(default)]
    pub first_k_dense_replace: Option<i64>,
    #[serde(default)]
    pub decoder_sparse_step: Option<i64>,
    #[serde(default)]
    pub mlp_only_layers: Option<Vec<i64>>,
    // Multi-head latent attention.
    #[serde(default)]
    pub kv_lora_rank: Option<i64>,
    #[serde(default)]
    pub q_lora_rank: Option<i64>,
    #[serde(default)]
    pub qk_rope_head_dim: Option<i64>,
    #[serde(default)]
    pub qk_nope_head_dim: Option<i64>,
    #[serde(default)]
    pub v_head_dim: Option<i64>,
    #[serde(default)]
    pub num_nextn_predict_layers: Option<i64>,
    #[serde(default)]
    pub sliding_window: Option<i64>,
    // Hybrid recurrent models (Nemotron-H: Mamba2 mixers, attention and
    // MLPs, one kind a layer).
    #[serde(default)]
    pub hybrid_override_pattern: Option<String>,
    #[serde(default)]
    pub mamba_num_heads: Option<i64>,
    #[serde(default)]
    pub mamba_head_dim: Option<i64>,
    #[serde(default)]
    pub ssm_state_size: Option<i64>,
    #[serde(default)]
    pub n_groups: Option<i64>,
    #[serde(default)]
    pub conv_kernel: Option<i64>,
    #[serde(default)]
    pub expand: Option<i64>,
    #[serde(default)]
    pub chunk_size: Option<i64>,
    #[serde(default)]
    pub mlp_hidden_act: Option<String>,
    #[serde(default)]
    pub mamba_ssm_cache_dtype: Option<String>,
    // DeepSeek-V4.1: grouped output projection, compressed sparse
    // attention and Engram tables.
    #[serde(default)]
    pub o_lora_rank: Option<i64>,
    #[serde(default)]
    pub o_groups: Option<i64>,
    #[serde(default)]
    pub compress_ratios: Option<Vec<i64>>,
    #[serde(default)]
    pub kv_source_layer_ids: Option<Vec<i64>>,
    #[serde(default)]
    pub index_source_layer_ids: Option<Vec<i64>>,
    #[serde(default)]
    pub index_n_heads: Option<i64>,
    #[serde(default)]
    pub index_head_dim: Option<i64>,
    #[serde(default)]
    pub index_topk: Option<i64>,
    #[serde(default)]
    pub engram_layer_ids: Option<Vec<i64>>,
    #[serde(default)]
    pub engram_num_embeddings: Option<Vec<i64>>,
    #[serde(default)]
    pub engram_max_ngram_size: Option<i64>,
    #[serde(default)]
    pub engram_vocab_size: Option<i64>,
    #[serde(default)]
    pub engram_n_heads: Option<i64>,
    #[serde(default)]
    pub engram_head_dim: Option<i64>,
}

/// The keys a built-in or user `models/<name>.yaml` may carry.
pub const HF_KEYS: &[&str] = &[
    "architectures",
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "tie_word_embeddings",
    "torch_dtype",
    "quantization_config",
    "num_local_experts",
    "num_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "decoder_sparse_step",
    "mlp_only_layers",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "num_nextn_predict_layers",
    "sliding_window",
    "hybrid_override_pattern",
    "mamba_num_heads",
    "mamba_head_dim",
    "ssm_state_size",
    "n_groups",
    "conv_kernel",
    "expand",
    "chunk_size",
    "mlp_hidden_act",
    "mamba_ssm_cache_dtype",
    "o_lora_rank",
    "o_groups",
    "compress_ratios",
    "kv_source_layer_ids",
    "index_source_layer_ids",
    "index_n_heads",
    "index_head_dim",
    "index_topk",
    "engram_layer_ids",
    "engram_num_embeddings",
    "engram_max_ngram_size",
    "engram_vocab_size",
    "engram_n_heads",
    "engram_head_dim",
];

#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
pub struct QuantizationConfig {
    #[serde(default)]
    pub quant_method: Option<String>,
    #[serde(default)]
    pub weight_block_size: Option<Vec<i64>>,
    #[serde(default)]
    pub bits: Option<i64>,
    /// The routed experts' format where it differs (DeepSeek-V4.1: `fp4`).
    #[serde(default)]
    pub expert_dtype: Option<String>,
}

/// How a layer keeps its KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Attention {
    /// Grouped-query (and multi-head) attention: K and V per KV head.
    Gqa { kv_heads: u64, head_dim: u64 },
    /// Multi-head latent attention: one compressed latent per token.
    Mla {
        kv_lora_rank: u64,
        qk_rope_head_dim: u64,
    },
}

/// The recurrent side of a hybrid model whose layers are each a Mamba2
/// mixer, an attention block or an MLP (Nemotron-H's
/// `hybrid_override_pattern`: `M`, `*`, `-`;
/// `vllm/model_executor/models/nemotron_h.py`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Recurrent {
    pub mamba_layers: u64,
    pub attention_layers: u64,
    pub mlp_layers: u64,
    /// Mamba2 heads, their width and the SSM state size (`mamba_num_heads`,
    /// `mamba_head_dim`, `ssm_state_size`).
    pub heads: u64,
    pub head_dim: u64,
    pub state_size: u64,
    /// B and C groups (`n_groups`) and the causal convolution's width.
    pub groups: u64,
    pub conv_kernel: u64,
    /// The SSD chunk (`chunk_size`), which `mamba_cache_mode: all` aligns
    /// its blocks to.
    pub chunk_size: u64,
    /// The SSM state's dtype when `mamba_ssm_cache_dtype` is `auto`:
    /// Nemotron-H takes its config's `mamba_ssm_cache_dtype`, else float32
    /// (`NemotronHForCausalLMConfig`, `vllm/model_executor/models/config.py`);
    /// `None` follows the conv state's dtype.
    pub ssm_dtype_auto: Option<String>,
    /// The MLP is an up and a down projection (`relu2`), not gated.
    pub mlp_ungated: bool,
}

impl Recurrent {
    /// The Mamba2 mixer's inner width (heads × head width).
    pub fn inner(&self) -> u64 {
        self.heads * self.head_dim
    }

    /// B and C groups as one tensor-parallel rank splits them: vLLM pads
    /// `n_groups` up to `tp` when `tp` does not divide it
    /// (`MambaStateShapeCalculator.extra_groups_for_head_shards`).
    pub fn groups_padded(&self, tp: u64) -> u64 {
        let tp = tp.max(1);
        if self.groups.is_multiple_of(tp) {
            self.groups
        } else {
            tp
        }
    }

    /// Bytes of one sequence's state in one Mamba2 layer on one rank of
    /// `tp`: the conv state, (conv_kernel − 1) × (I + 2·groups·state) / tp
    /// values, and the SSM state, heads / tp × head width × state size
    /// (`mamba2_state_shape`, `vllm/model_executor/layers/mamba/mamba_utils.py`;
    /// `MambaSpec.page_size_bytes`, `vllm/v1/kv_cache_interface.py`).
    pub fn state_bytes_per_layer(&self, tp: u64, conv_bits: f64, ssm_bits: f64) -> f64 {
        let tp = tp.max(1) as f64;
        let conv_dim = (self.inner() + 2 * self.groups_padded(tp as u64) * self.state_size) as f64;
        let conv = (self.conv_kernel.saturating_sub(1)) as f64 * conv_dim / tp;
        let ssm = self.heads as f64 / tp * (self.head_dim * self.state_size) as f64;
        conv * conv_bits / 8.0 + ssm * ssm_bits / 8.0
    }
}

/// Bits per element of a recurrent state dtype (`mamba_cache_dtype`,
/// `mamba_ssm_cache_dtype`: `auto`, `float32`, `float16`, `bfloat16` in
/// `vllm/config/cache.py`), `auto` standing for `auto_bits`.
pub fn mamba_dtype_bits(dtype: &str, auto_bits: f64) -> Option<f64> {
    Some(match dtype {
        "auto" => auto_bits,
        "float32" => 32.0,
        "float16" | "bfloat16" => 16.0,
        _ => return None,
    })
}

/// DeepSeek-V4.1's attention and lookups (`vllm/models/deepseek_v41/`):
/// one latent a token shared by every head, a sliding window in every
/// layer, compressed histories kept by a few source layers, an indexer that
/// picks `index_topk` compressed positions, and Engram n-gram tables.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SparseLatent {
    /// The latent's width (`head_dim`, rotary part included).
    pub latent: u64,
    pub sliding_window: u64,
    /// Per layer (without the draft layers), the history's compression: 0
    /// (window only), 1 or 2.
    pub ratios: Vec<u64>,
    /// Layers that keep a compressed latent cache and an indexer key cache
    /// of their own (the others read their source's).
    pub kv_sources: Vec<u64>,
    pub index_sources: Vec<u64>,
    pub index_heads: u64,
    pub index_head_dim: u64,
    pub index_topk: u64,
    /// Draft layers shipped with the checkpoint (DSpark stages).
    pub draft_layers: u64,
    pub engram: Option<Engram>,
}

/// DeepSeek-V4.1's Engram tables (`vllm/models/deepseek_v41/common/engram.py`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Engram {
    pub layers: Vec<u64>,
    /// Rows of each layer's table (`engram_num_embeddings`).
    pub rows: Vec<u64>,
    /// Rows a token reads in each layer: n-gram orders 2..=max times heads.
    pub lookups_per_token: u64,
    /// Values a row (`engram_head_dim`).
    pub head_dim: u64,
    /// Bytes a row: `head_dim` fp8 values and one 8-bit scale a 32.
    pub row_bytes: u64,
}

impl Engram {
    /// Bytes of all tables.
    pub fn table_bytes(&self) -> u64 {
        self.rows.iter().sum::<u64>() * self.row_bytes
    }
}

/// A model with every figure the engine and cost model need.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Model {
    pub name: String,
    pub architecture: String,
    pub layers: u64,
    pub hidden_size: u64,
    pub attention_heads: u64,
    pub attention: Attention,
    /// Query/key head width (GQA) or nope+rope width (MLA).
    pub head_dim: u64,
    /// The dense MLP's width (first dense layers of an MoE model included).
    pub intermediate_size: u64,
    pub vocab_size: u64,
    pub max_position_embeddings: u64,
    pub tie_word_embeddings: bool,
    pub experts: u64,
    pub experts_per_token: u64,
    pub shared_experts: u64,
    pub expert_intermediate_size: u64,
    /// Layers whose MLP is dense in an MoE model.
    pub dense_layers: u64,
    /// Multi-token-prediction layers shipped in the checkpoint (DeepSeek MTP).
    pub mtp_layers: u64,
    /// Bits per weight of the linear layers as the checkpoint ships them.
    pub weight_bits: u32,
    pub weight_dtype: String,
    /// Parameters, counted from the module structure.
    pub params: ParamCounts,
    /// A hybrid model's recurrent layers; `None` when every layer is
    /// attention and MLP.
    pub recurrent: Option<Recurrent>,
    /// DeepSeek-V4.1's sparse latent attention and Engram; `None` otherwise.
    pub sparse: Option<SparseLatent>,
    /// Bits a routed expert's weight takes when the experts ship in another
    /// format than the other linear layers (MXFP4: 4 bits and one 8-bit
    /// scale per 32 values).
    pub expert_weight_bits: Option<f64>,
}

/// Parameter counts by where they live, so weights can be sharded correctly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ParamCounts {
    /// Token embedding plus the output head (vocab-parallel under TP).
    pub embedding: u64,
    /// Attention projections, norms and dense MLPs of all layers (TP-sharded).
    pub dense: u64,
    /// Routed experts of all layers (EP- or TP-sharded).
    pub experts: u64,
    /// Shared experts and routers of all layers (TP-sharded).
    pub moe_shared: u64,
    /// One multi-token-prediction layer set, loaded only with an MTP drafter.
    pub mtp: u64,
}

impl ParamCounts {
    pub fn total(&self) -> u64 {
        self.embedding + self.dense + self.experts + self.moe_shared
    }
    pub fn active_per_token(&self, model: &Model) -> u64 {
        if model.experts == 0 {
            return self.total();
        }
        let per_expert = self.experts / model.experts.max(1);
        self.embedding + self.dense + self.moe_shared + per_expert * model.experts_per_token
    }
}

/// Bits per element of a KV cache dtype name (`--kv-cache-dtype`), with the
/// model's activation dtype standing in for `auto`. Scales of block-scaled
/// formats are included (nvfp4 keeps one 8-bit scale per 16 values).
pub fn cache_dtype_bits(cache_dtype: &str, model: &Model) -> Option<f64> {
    Some(match cache_dtype {
        "auto" => return Some(activation_bits(model)),
        "bfloat16" | "float16" | "bf16" | "fp16" => 16.0,
        "fp8"
        | "fp8_e4m3"
        | "fp8_e5m2"
        | "fp8_inc"
        | "fp8_per_token_head"
        | "int8_per_token_head" => 8.0,
        "fp8_ds_mla" => 8.0,
        "int4_per_token_head" | "turboquant_4bit_nc" => 4.0,
        "nvfp4" | "nvfp4_4over6" => 4.5,
        "turboquant_3bit_nc" => 3.0,
        "turboquant_k3v4_nc" => 3.5,
        "turboquant_k8v4" => 6.0,
        _ => return None,
    })
}

/// The dtype activations run in: fp32 checkpoints aside, vLLM serves in 16 bits.
fn activation_bits(model: &Model) -> f64 {
    if model.weight_dtype == "float32" {
        32.0
    } else {
        16.0
    }
}

impl Model {
    /// Derives a model from its config; `Err` names the key that is wrong.
    pub fn from_config(name: &str, config: &HfConfig) -> Result<Model, (String, String)> {
        let positive = |key: &str, value: i64| -> Result<u64, (String, String)> {
            u64::try_from(value).ok().filter(|v| *v > 0).ok_or_else(|| {
                (
                    key.to_string(),
                    format!("must be at least 1, found {value}"),
                )
            })
        };
        let optional = |key: &str, value: Option<i64>| -> Result<u64, (String, String)> {
            match value {
                None => Ok(0),
                Some(v) => u64::try_from(v)
                    .map_err(|_| (key.to_string(), format!("must not be negative, found {v}"))),
            }
        };
        // Any other dtype would be priced as bfloat16 without a word.
        if let Some(dtype) = config.torch_dtype.as_deref()
            && !matches!(dtype, "float32" | "float16" | "bfloat16")
        {
            return Err((
                "torch_dtype".into(),
                format!(
                    "`{}` is not a checkpoint dtype pdsim knows (float32, float16, bfloat16)",
                    crate::problem::quote(dtype)
                ),
            ));
        }
        let hidden = positive("hidden_size", config.hidden_size)?;
        let layers = positive("num_hidden_layers", config.num_hidden_layers)?;
        let heads = positive("num_attention_heads", config.num_attention_heads)?;
        let vocab = positive("vocab_size", config.vocab_size)?;
        let kv_heads = match config.num_key_value_heads {
            Some(v) => positive("num_key_value_heads", v)?,
            None => heads,
        };
        if heads % kv_heads != 0 {
            return Err((
                "num_key_value_heads".into(),
                format!("{kv_heads} does not divide num_attention_heads {heads}"),
            ));
        }
        let head_dim = match config.head_dim {
            Some(v) => positive("head_dim", v)?,
            None => hidden / heads,
        };
        let intermediate = optional("intermediate_size", config.intermediate_size)?;
        let experts = optional(
            "num_local_experts",
            config
                .num_local_experts
                .or(config.num_experts)
                .or(config.n_routed_experts),
        )?;
        let experts_per_token = optional("num_experts_per_tok", config.num_experts_per_tok)?;
        if experts > 0 && (experts_per_token == 0 || experts_per_token > experts) {
            return Err((
                "num_experts_per_tok".into(),
                format!("must lie in 1..={experts} for a mixture-of-experts model"),
            ));
        }
        let expert_intermediate = match config.moe_intermediate_size {
            Some(v) if experts > 0 => positive("moe_intermediate_size", v)?,
            _ => intermediate,
        };
        let shared_experts = optional("n_shared_experts", config.n_shared_experts)?;
        let dense_layers = if experts == 0 {
            layers
        } else {
            let first =
                optional("first_k_dense_replace", config.first_k_dense_replace)?.min(layers);
            let listed = config
                .mlp_only_layers
                .as_ref()
                .map_or(0, |l| l.len() as u64);
            first + listed
        };
        let attention = match config.kv_lora_rank {
            Some(rank) => Attention::Mla {
                kv_lora_rank: positive("kv_lora_rank", rank)?,
                qk_rope_head_dim: positive(
                    "qk_rope_head_dim",
                    config.qk_rope_head_dim.unwrap_or(0),
                )?,
            },
            None => Attention::Gqa { kv_heads, head_dim },
        };
        let (weight_bits, weight_dtype) = checkpoint_weights(config);
        let recurrent = match &config.hybrid_override_pattern {
            None => None,
            Some(pattern) => {
                let count = |c: char| pattern.chars().filter(|&x| x == c).count() as u64;
                if let Some(other) = pattern.chars().find(|c| !matches!(c, 'M' | '*' | '-')) {
                    return Err((
                        "hybrid_override_pattern".into(),
                        format!(
                            "layer kind `{other}` is not simulated: pdsim models Mamba2 (M), attention (*) and MLP (-) layers{}",
                            if other == 'E' {
                                " (E, a mixture-of-experts layer, is not modelled in a hybrid yet)"
                            } else {
                                ""
                            }
                        ),
                    ));
                }
                if pattern.chars().count() as u64 != layers {
                    return Err((
                        "hybrid_override_pattern".into(),
                        format!(
                            "has {} layers, num_hidden_layers says {layers}",
                            pattern.chars().count()
                        ),
                    ));
                }
                if count('*') == 0 {
                    return Err((
                        "hybrid_override_pattern".into(),
                        "has no attention layer (*); pdsim sizes a hybrid's blocks by its attention pages".into(),
                    ));
                }
                let heads = positive("mamba_num_heads", config.mamba_num_heads.unwrap_or(0))?;
                let head_dim = positive("mamba_head_dim", config.mamba_head_dim.unwrap_or(0))?;
                let state_size = positive("ssm_state_size", config.ssm_state_size.unwrap_or(0))?;
                let groups = positive("n_groups", config.n_groups.unwrap_or(0))?;
                if heads % groups != 0 {
                    return Err((
                        "n_groups".into(),
                        format!("{groups} does not divide mamba_num_heads {heads}"),
                    ));
                }
                let ssm_dtype_auto = match config.architectures.first().map(String::as_str) {
                    Some("NemotronHForCausalLM") => Some(
                        config
                            .mamba_ssm_cache_dtype
                            .clone()
                            .unwrap_or_else(|| "float32".to_string()),
                    ),
                    _ => None,
                };
                if let Some(d) = &ssm_dtype_auto
                    && mamba_dtype_bits(d, 16.0).is_none()
                {
                    return Err((
                        "mamba_ssm_cache_dtype".into(),
                        format!("`{d}` is not one of auto, float32, float16, bfloat16"),
                    ));
                }
                Some(Recurrent {
                    mamba_layers: count('M'),
                    attention_layers: count('*'),
                    mlp_layers: count('-'),
                    heads,
                    head_dim,
                    state_size,
                    groups,
                    conv_kernel: positive("conv_kernel", config.conv_kernel.unwrap_or(4))?,
                    chunk_size: positive("chunk_size", config.chunk_size.unwrap_or(256))?,
                    ssm_dtype_auto,
                    mlp_ungated: config.mlp_hidden_act.as_deref() == Some("relu2"),
                })
            }
        };
        let list = |key: &str, v: &Option<Vec<i64>>| -> Result<Vec<u64>, (String, String)> {
            v.as_deref()
                .unwrap_or(&[])
                .iter()
                .map(|&x| {
                    u64::try_from(x).map_err(|_| {
                        (
                            key.to_string(),
                            format!("must not hold a negative value, found {x}"),
                        )
                    })
                })
                .collect()
        };
        let sparse = match &config.compress_ratios {
            None => None,
            Some(_) => {
                let ratios = list("compress_ratios", &config.compress_ratios)?;
                if (ratios.len() as u64) < layers || ratios.iter().any(|r| *r > 2) {
                    return Err((
                        "compress_ratios".into(),
                        format!(
                            "needs one ratio of 0, 1 or 2 for each of the {layers} layers (the draft layers may follow)"
                        ),
                    ));
                }
                let kv_sources = list("kv_source_layer_ids", &config.kv_source_layer_ids)?;
                let index_sources = list("index_source_layer_ids", &config.index_source_layer_ids)?;
                if kv_sources.is_empty()
                    || kv_sources
                        .iter()
                        .any(|&l| l >= layers || ratios[l as usize] == 0)
                {
                    return Err((
                        "kv_source_layer_ids".into(),
                        "must name layers that compress their history (ratio 1 or 2)".into(),
                    ));
                }
                let engram = match &config.engram_layer_ids {
                    None => None,
                    Some(_) => {
                        let layers_e = list("engram_layer_ids", &config.engram_layer_ids)?;
                        let rows = list("engram_num_embeddings", &config.engram_num_embeddings)?;
                        if rows.len() != layers_e.len() || layers_e.is_empty() {
                            return Err((
                                "engram_num_embeddings".into(),
                                "needs one table size for each Engram layer".into(),
                            ));
                        }
                        let max_ngram = positive(
                            "engram_max_ngram_size",
                            config.engram_max_ngram_size.unwrap_or(0),
                        )?;
                        let heads = positive("engram_n_heads", config.engram_n_heads.unwrap_or(0))?;
                        let dim = positive("engram_head_dim", config.engram_head_dim.unwrap_or(0))?;
                        Some(Engram {
                            layers: layers_e,
                            rows,
                            lookups_per_token: max_ngram.saturating_sub(1).max(1) * heads,
                            head_dim: dim,
                            row_bytes: dim + dim.div_ceil(32),
                        })
                    }
                };
                Some(SparseLatent {
                    latent: head_dim,
                    sliding_window: positive("sliding_window", config.sliding_window.unwrap_or(0))?,
                    draft_layers: ratios.len() as u64 - layers,
                    ratios: ratios[..layers as usize].to_vec(),
                    kv_sources,
                    index_sources,
                    index_heads: positive("index_n_heads", config.index_n_heads.unwrap_or(0))?,
                    index_head_dim: positive("index_head_dim", config.index_head_dim.unwrap_or(0))?,
                    index_topk: positive("index_topk", config.index_topk.unwrap_or(0))?,
                    engram,
                })
            }
        };
        let expert_weight_bits = config
            .quantization_config
            .as_ref()
            .and_then(|q| q.expert_dtype.as_deref())
            .and_then(|d| match d {
                "fp4" | "mxfp4" => Some(4.25),
                "fp8" => Some(8.0),
                _ => None,
            });
        let mut model = Model {
            name: name.to_string(),
            architecture: config.architectures.first().cloned().unwrap_or_default(),
            layers,
            hidden_size: hidden,
            attention_heads: heads,
            attention,
            head_dim: match attention {
                Attention::Mla {
                    qk_rope_head_dim, ..
                } => config.qk_nope_head_dim.unwrap_or(0).max(0) as u64 + qk_rope_head_dim,
                Attention::Gqa { head_dim, .. } => head_dim,
            },
            intermediate_size: intermediate,
            vocab_size: vocab,
            // The engine's default context window; without it every
            // request would be refused as too long, so it is required.
            max_position_embeddings: match config.max_position_embeddings {
                Some(v) => positive("max_position_embeddings", v)?,
                None => {
                    return Err((
                        "max_position_embeddings".into(),
                        "is missing: the model's context window (vLLM's default \
                         max_model_len) is read from it"
                            .into(),
                    ));
                }
            },
            tie_word_embeddings: config.tie_word_embeddings.unwrap_or(false),
            experts,
            experts_per_token,
            shared_experts,
            expert_intermediate_size: expert_intermediate,
            dense_layers,
            mtp_layers: optional("num_nextn_predict_layers", config.num_nextn_predict_layers)?,
            weight_bits,
            weight_dtype,
            params: ParamCounts::default(),
            recurrent,
            sparse,
            expert_weight_bits,
        };
        model.params = count_params(&model, config);
        Ok(model)
    }

    pub fn is_moe(&self) -> bool {
        self.experts > 0
    }

    /// KV bytes one token takes in one attention layer, for a cache dtype.
    pub fn kv_bytes_per_token_layer(&self, cache_dtype: &str) -> Option<f64> {
        let bits = cache_dtype_bits(cache_dtype, self)?;
        Some(match self.attention {
            Attention::Gqa { kv_heads, head_dim } => {
                2.0 * (kv_heads * head_dim) as f64 * bits / 8.0
            }
            // vLLM's fp8_ds_mla page: 512 fp8 latent values, four fp32 scales
            // and the 64 rope values in bf16 — 656 bytes per token.
            Attention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
            } if cache_dtype == "fp8_ds_mla" => {
                (kv_lora_rank + 4 * 4 + qk_rope_head_dim * 2) as f64
            }
            Attention::Mla {
                kv_lora_rank,
                qk_rope_head_dim,
            } => (kv_lora_rank + qk_rope_head_dim) as f64 * bits / 8.0,
        })
    }

    /// KV bytes one token takes across the whole model.
    pub fn kv_bytes_per_token(&self, cache_dtype: &str) -> Option<f64> {
        Some(self.kv_bytes_per_token_layer(cache_dtype)? * self.kv_layers() as f64)
    }

    /// Layers that keep KV per token: every layer, or a hybrid's attention
    /// layers.
    pub fn kv_layers(&self) -> u64 {
        self.recurrent
            .as_ref()
            .map_or(self.layers, |r| r.attention_layers)
    }
}

/// Bits per linear weight and the dtype name the checkpoint ships.
fn checkpoint_weights(config: &HfConfig) -> (u32, String) {
    if let Some(q) = &config.quantization_config {
        match q.quant_method.as_deref() {
            Some("fp8") | Some("fbgemm_fp8") | Some("compressed-tensors") => {
                return (8, "fp8".into());
            }
            Some("mxfp4") => return (4, "mxfp4".into()),
            Some("awq") | Some("gptq") => {
                return (q.bits.unwrap_or(4).clamp(1, 16) as u32, "int4".into());
            }
            _ => {}
        }
    }
    match config.torch_dtype.as_deref() {
        Some("float32") => (32, "float32".into()),
        Some("float16") => (16, "float16".into()),
        _ => (16, "bfloat16".into()),
    }
}

fn count_params(model: &Model, config: &HfConfig) -> ParamCounts {
    let h = model.hidden_size;
    let heads = model.attention_heads;
    let attention = match model.attention {
        Attention::Gqa { kv_heads, head_dim } => {
            h * heads * head_dim * 2 + h * kv_heads * head_dim * 2
        }
        Attention::Mla {
            kv_lora_rank,
            qk_rope_head_dim,
        } => {
            let nope = config.qk_nope_head_dim.unwrap_or(0).max(0) as u64;
            let v = config.v_head_dim.unwrap_or(0).max(0) as u64;
            let q = match config.q_lora_rank {
                Some(r) if r > 0 => {
                    let r = r as u64;
                    h * r + r + r * heads * (nope + qk_rope_head_dim)
                }
                _ => h * heads * (nope + qk_rope_head_dim),
            };
            q + h * (kv_lora_rank + qk_rope_head_dim)
                + kv_lora_rank
                + kv_lora_rank * heads * (nope + v)
                + heads * v * h
        }
    };
    let norms = 2 * h;
    let dense_mlp = 3 * h * model.intermediate_size;
    let moe_layers = model.layers - model.dense_layers;
    let expert = 3 * h * model.expert_intermediate_size;
    let shared = match config.shared_expert_intermediate_size {
        Some(size) if size > 0 => 3 * h * size as u64,
        _ => model.shared_experts * expert,
    };
    let router = h * model.experts;
    let embedding = model.vocab_size * h * if model.tie_word_embeddings { 1 } else { 2 };
    if let Some(r) = &model.recurrent {
        // One block kind a layer, each behind one RMSNorm
        // (`NemotronHMambaDecoderLayer`, `NemotronHAttentionDecoderLayer`,
        // `NemotronHMLPDecoderLayer`). A Mamba2 mixer: in_proj to
        // 2I + 2·G·N + H, a depthwise conv over I + 2·G·N channels with its
        // bias, per-head A, D and dt bias, a gated RMSNorm over I, and
        // out_proj (`mamba_mixer2.py`).
        let inner = r.inner();
        let conv_dim = inner + 2 * r.groups * r.state_size;
        let mamba = h * (2 * inner + 2 * r.groups * r.state_size + r.heads)
            + conv_dim * (r.conv_kernel + 1)
            + 3 * r.heads
            + inner
            + inner * h;
        let mlp = if r.mlp_ungated { 2 } else { 3 } * h * model.intermediate_size;
        let dense = r.mamba_layers * mamba
            + r.attention_layers * attention
            + r.mlp_layers * mlp
            + model.layers * h
            + h;
        return ParamCounts {
            embedding,
            dense,
            experts: 0,
            moe_shared: 0,
            mtp: 0,
        };
    }
    if let (Some(sp), Some(q_rank), Some(o_rank), Some(o_groups)) = (
        &model.sparse,
        config.q_lora_rank,
        config.o_lora_rank,
        config.o_groups,
    ) {
        // DeepSeek-V4.1's attention (`vllm/models/deepseek_v41/attention.py`):
        // wq_a to the query rank, wkv to the latent, wq_b to every head's
        // latent-wide query, wo_a from each group of heads to the output
        // rank, wo_b back to the hidden size; per kv source a compressor to
        // the compressed latent (twice as wide at ratio 2) and the
        // indexer's key projection; per index source the indexer's query
        // projection and head weights; per Engram layer its wkv from the
        // rows a token looks up to the 4 + 1 residual streams (6,144 →
        // 25,600). mHC's small mixing weights are left out.
        let (q_rank, o_rank, o_groups) = (
            q_rank.max(0) as u64,
            o_rank.max(0) as u64,
            o_groups.max(1) as u64,
        );
        let attention = h * q_rank
            + h * sp.latent
            + q_rank * heads * sp.latent
            + heads * sp.latent * o_rank
            + o_groups * o_rank * h;
        let compressors: u64 = sp
            .kv_sources
            .iter()
            .map(|&l| {
                let wide = if sp.ratios[l as usize] == 2 { 2 } else { 1 };
                h * wide * sp.latent + sp.latent * sp.index_head_dim
            })
            .sum();
        let indexers = sp.index_sources.len() as u64
            * (q_rank * sp.index_heads * sp.index_head_dim + h * sp.index_heads);
        let engram = sp.engram.as_ref().map_or(0, |e| {
            e.layers.len() as u64 * e.lookups_per_token * e.head_dim * (5 * h)
        });
        let dense = model.layers * (attention + norms) + compressors + indexers + engram + h;
        let experts = model.layers * model.experts * expert;
        let moe_shared = model.layers * (shared + router);
        return ParamCounts {
            embedding,
            dense,
            experts,
            moe_shared,
            mtp: 0,
        };
    }
    let dense = model.layers * (attention + norms) + model.dense_layers * dense_mlp + h;
    let experts = moe_layers * model.experts * expert;
    let moe_shared = moe_layers * (shared + router);
    let mtp_layer = attention
        + norms
        + if model.is_moe() {
            model.experts * expert + shared + router
        } else {
            dense_mlp
        };
    let mtp = model.mtp_layers * (mtp_layer + 2 * h * h + 2 * h);
    ParamCounts {
        embedding,
        dense,
        experts,
        moe_shared,
        mtp,
    }
}
