//! The built-in models: derived figures checked against published ones, and,
//! when `PDSIM_SHARED` points at the shared reference data, against the real
//! Hugging Face `config.json` files read through a user catalog.

use pdsim_spec::catalog::Catalog;
use pdsim_spec::files::{Files, MemoryFiles};
use pdsim_spec::model::{Attention, Model};

fn builtin(name: &str) -> Model {
    let files = MemoryFiles::new();
    let catalog = Catalog::new(&files, vec![]);
    match catalog.model(name) {
        Ok(entry) => entry.value,
        Err(e) => panic!("built-in model {name} does not load: {e:?}"),
    }
}

/// Asserts `value` is within `tolerance` (a fraction) of `expected`.
fn near(what: &str, value: f64, expected: f64, tolerance: f64) {
    let error = (value - expected).abs() / expected;
    assert!(
        error <= tolerance,
        "{what}: {value:.4e} is {:.2}% from {expected:.4e}",
        error * 100.0
    );
}

#[test]
fn minimax_m27_fp8_kv_is_124_kib_per_token() {
    // The second seed: "The per-token KV cache size of approximately 124 KiB".
    let model = builtin("minimax-m2.7");
    assert_eq!(model.kv_bytes_per_token("fp8"), Some(126_976.0));
    assert_eq!(
        model.kv_bytes_per_token("fp8").map(|b| b / 1024.0),
        Some(124.0)
    );
    // bf16 doubles it; `auto` means the activation dtype, bf16.
    assert_eq!(model.kv_bytes_per_token("auto"), Some(253_952.0));
}

#[test]
fn deepseek_v3_mla_latent_is_576_values() {
    let model = builtin("deepseek-v3");
    assert_eq!(
        model.attention,
        Attention::Mla {
            kv_lora_rank: 512,
            qk_rope_head_dim: 64
        }
    );
    // 576 values × 2 bytes × 61 layers.
    assert_eq!(model.kv_bytes_per_token("auto"), Some(576.0 * 2.0 * 61.0));
    // vLLM's fp8_ds_mla page is 656 bytes per token per layer.
    assert_eq!(model.kv_bytes_per_token_layer("fp8_ds_mla"), Some(656.0));
}

#[test]
fn parameter_counts_match_published_sizes() {
    // Published totals (model cards): within 1.5%, since norms and biases
    // are counted approximately.
    let cases = [
        ("llama-3.1-8b", 8.03e9),
        ("llama-3.1-70b", 70.6e9),
        ("llama-2-7b", 6.74e9),
        ("llama-2-70b", 69.0e9),
        ("codellama-34b", 33.7e9),
        ("codellama-34b-instruct", 33.7e9),
        ("mixtral-8x7b", 46.7e9),
        ("qwen3-14b", 14.8e9),
        ("qwen3-30b-a3b", 30.5e9),
        ("deepseek-v3", 671e9),
        ("minimax-m2.7", 229e9),
    ];
    for (name, published) in cases {
        let model = builtin(name);
        near(name, model.params.total() as f64, published, 0.015);
    }
    // Active parameters per token of the MoE models.
    near(
        "qwen3-30b-a3b active",
        builtin("qwen3-30b-a3b")
            .params
            .active_per_token(&builtin("qwen3-30b-a3b")) as f64,
        3.3e9,
        0.05,
    );
    let deepseek = builtin("deepseek-v3");
    near(
        "deepseek-v3 active",
        deepseek.params.active_per_token(&deepseek) as f64,
        37e9,
        0.05,
    );
    // DeepSeek-V3's checkpoint adds one MTP layer, about 14B parameters.
    near("deepseek-v3 mtp", deepseek.params.mtp as f64, 11.7e9, 0.25);
}

#[test]
fn gqa_kv_bytes_follow_heads_and_dtype() {
    let llama = builtin("llama-3.1-8b");
    // 2 × 8 KV heads × 128 × 2 bytes × 32 layers = 128 KiB.
    assert_eq!(llama.kv_bytes_per_token("auto"), Some(131_072.0));
    assert_eq!(llama.kv_bytes_per_token("fp8_e4m3"), Some(65_536.0));
    assert_eq!(llama.kv_bytes_per_token("no-such-dtype"), None);
}

/// A `Files` over the real disk, for the shared reference data only.
struct Disk;

impl Files for Disk {
    fn kind(&self, path: &std::path::Path) -> pdsim_spec::files::FileKind {
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => pdsim_spec::files::FileKind::Directory,
            Ok(_) => pdsim_spec::files::FileKind::File,
            Err(_) => pdsim_spec::files::FileKind::Missing,
        }
    }
    fn read(&self, path: &std::path::Path) -> Result<String, pdsim_spec::files::ReadError> {
        std::fs::read_to_string(path)
            .map_err(|e| pdsim_spec::files::ReadError::Other(e.to_string()))
    }
    fn list(&self, path: &std::path::Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(path)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }
}

/// The models of the inference-sim real runs against inference-sim's own
/// copies of their `config.json` (`blis-data/model_configs/`), loaded as a
/// user catalog: every derived figure, the weight dtype included, agrees.
#[test]
fn real_run_models_agree_with_inference_sims_config_json() {
    let Some(shared) = pdsim_testkit::shared(
        "real_run_models_agree_with_inference_sims_config_json",
        "inference-sim's model config.json files",
    ) else {
        return;
    };
    let configs = shared.join("reference/inference-sim/blis-data/model_configs");
    assert!(configs.is_dir(), "{} has no {configs:?}", shared.display());
    let pairs = [
        ("llama-2-7b", "llama-2-7b-hf"),
        ("codellama-34b-instruct", "codellama-34b-instruct-hf"),
        ("codellama-34b", "codellama-34b-instruct-hf"),
    ];
    let mut files = MemoryFiles::new();
    for (_, reference) in pairs {
        let path = configs.join(reference).join("config.json");
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        files.insert(&format!("cat/models/{reference}/config.json"), &text);
    }
    let catalog = Catalog::new(&files, vec!["cat".into()]);
    for (ours, reference) in pairs {
        let real = match catalog.model(reference) {
            Ok(entry) => entry.value,
            Err(e) => panic!("reference config {reference} does not load: {e:?}"),
        };
        let mine = builtin(ours);
        assert_eq!(mine.layers, real.layers, "{ours} layers");
        assert_eq!(mine.hidden_size, real.hidden_size, "{ours} hidden");
        assert_eq!(mine.attention, real.attention, "{ours} attention");
        assert_eq!(
            mine.intermediate_size, real.intermediate_size,
            "{ours} intermediate"
        );
        assert_eq!(mine.vocab_size, real.vocab_size, "{ours} vocab");
        assert_eq!(
            mine.max_position_embeddings, real.max_position_embeddings,
            "{ours} window"
        );
        assert_eq!(mine.weight_bits, real.weight_bits, "{ours} dtype");
        assert_eq!(mine.params, real.params, "{ours} parameter counts");
    }
}

#[test]
fn builtin_models_agree_with_the_real_config_json() {
    let Some(shared) = pdsim_testkit::shared(
        "builtin_models_agree_with_the_real_config_json",
        "the BLIS catalog's model config.json files",
    ) else {
        return;
    };
    let catalog_dir = shared.join("reference/blis/catalog");
    assert!(
        catalog_dir.is_dir(),
        "{} has no reference/blis/catalog",
        shared.display()
    );
    let catalog = Catalog::new(&Disk, vec![catalog_dir]);
    let pairs = [
        ("llama-3.1-8b", "llama-3.1-8b-instruct"),
        ("llama-3.1-70b", "llama-3.1-70b-instruct"),
        ("qwen3-14b", "qwen3-14b"),
        ("qwen3-30b-a3b", "qwen3-30b-a3b"),
        ("mixtral-8x7b", "mixtral-8x7b-v0.1"),
    ];
    for (ours, reference) in pairs {
        let real = match catalog.model(reference) {
            Ok(entry) => entry.value,
            Err(e) => panic!("reference config {reference} does not load: {e:?}"),
        };
        let mine = builtin(ours);
        assert_eq!(mine.layers, real.layers, "{ours} layers");
        assert_eq!(mine.hidden_size, real.hidden_size, "{ours} hidden");
        assert_eq!(mine.attention, real.attention, "{ours} attention");
        assert_eq!(mine.experts, real.experts, "{ours} experts");
        assert_eq!(
            mine.experts_per_token, real.experts_per_token,
            "{ours} experts per token"
        );
        assert_eq!(mine.params, real.params, "{ours} parameter counts");
        assert_eq!(
            mine.kv_bytes_per_token("auto"),
            real.kv_bytes_per_token("auto"),
            "{ours} KV"
        );
    }
}
