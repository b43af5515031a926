//! Coefficient resolution: the built-in defaults, each with its source, and
//! the scenario's coefficient sets layered over them.
//!
//! Selection follows the BLIS latency kernel (`research/blis-documents.md`
//! §7): an entry applies when every dimension its `scope` names contains the
//! deployment's value (`hardware` and `model` compared case-insensitively,
//! `tp`, `ep` and `nodes_spanned` as integers; a dimension the scope omits
//! does not constrain). Sets are read in scenario order and entries in order,
//! and the last applicable entry wins. The built-in defaults sit below every
//! set, so a scenario that lists no set still prices steps, and a set that
//! scopes an entry to one chip overrides only that chip.
//!
//! Resolution happens once, when a cost model is built. Nothing here runs per
//! step: the cost models copy the values they need into plain fields.

use pdsim_spec::catalog::{Catalog, CoefficientSet};
use pdsim_spec::files::MemoryFiles;
use pdsim_spec::layout::PoolLayout;
use std::collections::BTreeMap;

/// The deployment values a coefficient's scope is matched against.
#[derive(Clone, Debug)]
pub struct Deployment {
    /// The chip's catalog name, lowercased.
    pub hardware: String,
    /// The model's catalog name, lowercased.
    pub model: String,
    pub tp: u64,
    pub ep: u64,
    /// Nodes one engine spans.
    pub nodes_spanned: u64,
}

impl Deployment {
    /// The scope values of one pool. `gpus_per_node` comes from the cluster
    /// when the layout knows it, else from the chip, else 8.
    pub fn of(
        chip_name: &str,
        model_name: &str,
        layout: &PoolLayout,
        chip_gpus_per_node: Option<i64>,
    ) -> Deployment {
        let gpus_per_node = gpus_per_node(layout, chip_gpus_per_node);
        let nodes_spanned = layout.cluster.as_ref().map_or_else(
            || {
                u64::try_from(layout.gpus_per_engine.div_ceil(gpus_per_node as u128))
                    .unwrap_or(u64::MAX)
            },
            |c| u64::try_from(c.nodes_per_engine).unwrap_or(u64::MAX),
        );
        Deployment {
            hardware: chip_name.to_ascii_lowercase(),
            model: model_name.to_ascii_lowercase(),
            tp: layout.tp.max(1),
            ep: u64::try_from(layout.expert_parallel_width)
                .unwrap_or(u64::MAX)
                .max(1),
            nodes_spanned,
        }
    }
}

/// GPUs per node: the cluster's when the layout knows it, else the chip's,
/// else 8 (an HGX baseboard).
pub fn gpus_per_node(layout: &PoolLayout, chip_gpus_per_node: Option<i64>) -> u64 {
    layout
        .cluster
        .as_ref()
        .map(|c| c.gpus_per_node)
        .or(chip_gpus_per_node.and_then(|g| u64::try_from(g).ok()))
        .filter(|g| *g >= 1)
        .unwrap_or(8)
}

/// One resolved coefficient, as reports show it.
#[derive(Clone, Debug, PartialEq)]
pub struct Provenance {
    pub name: String,
    pub value: f64,
    pub units: String,
    /// Where the value came from: a set name and its method, or the built-in
    /// default's citation.
    pub source: String,
}

impl Provenance {
    /// A report row: (name, value in its units, "source [units]").
    pub fn row(&self) -> (String, f64, String) {
        (
            self.name.clone(),
            self.value,
            format!("{} [{}]", self.source, self.units),
        )
    }
}

#[derive(Clone, Debug)]
struct Chosen {
    value: f64,
    units: String,
    source: String,
}

/// The scenario's applicable entries by name, plus a log of every value read.
pub struct Resolver {
    deployment: Deployment,
    chosen: BTreeMap<String, Chosen>,
    read: Vec<Provenance>,
}

/// The name of pdsim's built-in host-overhead set, read as the layer just
/// above the built-in table.
const HOST_SET: &str = "cost-model-host-overheads";

impl Resolver {
    /// Layers the built-in host-overhead set and then `sets`, in order.
    pub fn new(deployment: Deployment, sets: &[CoefficientSet]) -> Result<Resolver, String> {
        let mut resolver = Resolver {
            deployment,
            chosen: BTreeMap::new(),
            read: Vec::new(),
        };
        let files = MemoryFiles::new();
        let catalog = Catalog::new(&files, Vec::new());
        let host = catalog
            .coefficient_set(HOST_SET)
            .map_err(|_| format!("the built-in coefficient set `{HOST_SET}` does not load"))?;
        resolver.layer(&host.value, &format!("built-in set `{HOST_SET}`"));
        for set in sets {
            resolver.layer(set, &format!("set `{}`", set.name));
        }
        Ok(resolver)
    }

    fn layer(&mut self, set: &CoefficientSet, label: &str) {
        for entry in &set.coefficients {
            for (name, coefficient) in entry {
                if !self.applies(&coefficient.scope) {
                    continue;
                }
                self.chosen.insert(
                    name.clone(),
                    Chosen {
                        value: coefficient.value,
                        units: coefficient.units.clone(),
                        source: format!("{label} ({})", coefficient.method),
                    },
                );
            }
        }
    }

    /// Whether every dimension of `scope` contains the deployment's value.
    fn applies(&self, scope: &BTreeMap<String, Vec<serde_yaml::Value>>) -> bool {
        let d = &self.deployment;
        scope.iter().all(|(key, values)| match key.as_str() {
            "hardware" => values.iter().any(|v| text_eq(v, &d.hardware)),
            "model" => values.iter().any(|v| text_eq(v, &d.model)),
            "tp" => values.iter().any(|v| integer(v) == Some(d.tp)),
            "ep" => values.iter().any(|v| integer(v) == Some(d.ep)),
            "nodes_spanned" => values.iter().any(|v| integer(v) == Some(d.nodes_spanned)),
            // The schema knows no other dimension; an entry scoped by one
            // cannot be shown to apply.
            _ => false,
        })
    }

    /// The value of `name` in `units`: the last applicable set entry, else
    /// `default`. Fails when neither exists, when a set states other units,
    /// or when the value lies outside `[lo, hi]`.
    pub fn value(
        &mut self,
        name: &str,
        units: &str,
        default: Option<Builtin>,
        lo: f64,
        hi: f64,
    ) -> Result<f64, String> {
        // A name read here and missing from that list would be refused in
        // a user's set although it is read: the list must name every read.
        debug_assert!(
            pdsim_spec::coefficient_names::read_by_pdsim(name),
            "coefficient `{name}` is read but not listed in pdsim_spec::coefficient_names"
        );
        let (value, source) = match (self.chosen.get(name), default) {
            (Some(chosen), _) => {
                if chosen.units != units {
                    return Err(format!(
                        "coefficient `{name}` from {} is in `{}`, but pdsim reads it in `{units}`",
                        chosen.source, chosen.units
                    ));
                }
                (chosen.value, chosen.source.clone())
            }
            (None, Some(default)) => (default.value, default.source),
            (None, None) => {
                return Err(format!(
                    "coefficient `{name}` ({units}) has no entry applying to hardware `{}`, \
                     model `{}`, tp {}, ep {}, nodes_spanned {} in the scenario's coefficient \
                     sets, and pdsim has no built-in value for it",
                    self.deployment.hardware,
                    self.deployment.model,
                    self.deployment.tp,
                    self.deployment.ep,
                    self.deployment.nodes_spanned
                ));
            }
        };
        if !value.is_finite() || value < lo || value > hi {
            return Err(format!(
                "coefficient `{name}` = {} (from {source}) is outside its valid range \
                 [{lo}, {hi}] {units}",
                pdsim_spec::problem::number(value)
            ));
        }
        self.read.push(Provenance {
            name: name.to_string(),
            value,
            units: units.to_string(),
            source,
        });
        Ok(value)
    }

    /// Every value read so far, in reading order.
    /// Whether an applicable set entry names `name` (the built-in
    /// defaults aside).
    pub fn has_entry(&self, name: &str) -> bool {
        self.chosen.contains_key(name)
    }

    pub fn into_provenance(self) -> Vec<Provenance> {
        self.read
    }
}

fn text_eq(value: &serde_yaml::Value, expected: &str) -> bool {
    match value {
        serde_yaml::Value::String(s) => s.eq_ignore_ascii_case(expected),
        _ => false,
    }
}

fn integer(value: &serde_yaml::Value) -> Option<u64> {
    match value {
        serde_yaml::Value::Number(n) => n.as_u64(),
        serde_yaml::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A built-in value and the citation reports show for it.
#[derive(Clone, Debug)]
pub struct Builtin {
    pub value: f64,
    pub source: String,
}

impl Builtin {
    pub fn new(value: f64, source: &str) -> Builtin {
        Builtin {
            value,
            source: source.to_string(),
        }
    }
}

/// BLIS registry, cost-model-primitives: GEMM envelope fits and MoE
/// imbalance ratios measured on NVIDIA AISimulate sweeps.
pub const SRC_PRIMITIVES_MEASURED: &str = "built-in: BLIS registry cost-model-primitives \
     (inference-sim/blis-registry coefficients/cost-model-primitives.yaml @1dd3dc75), \
     measured on NVIDIA AISimulate sweeps";
/// BLIS registry, cost-model-primitives: figures NVIDIA ships in its own
/// system descriptors.
pub const SRC_PRIMITIVES_VENDOR: &str = "built-in: BLIS registry cost-model-primitives \
     (coefficients/cost-model-primitives.yaml @1dd3dc75), vendor_spec from NVIDIA AISimulate \
     systems/<sku>.yaml";
/// A value the registry has for other parts only.
pub const SRC_GENERIC: &str = "built-in: assumed for a chip the BLIS registry does not cover; \
     the middle of the registry's NVIDIA values";

/// The registry's per-chip GEMM envelope and MoE imbalance.
struct Primitives {
    chip: &'static str,
    eps_max_bf16: f64,
    m_half_bf16: f64,
    /// (eps_max, m_half) at fp8, for chips with FP8 tensor cores.
    fp8: Option<(f64, f64)>,
    moe_routing_imbalance_median: f64,
}

/// The GEMM, memory and MoE constants the registry has per chip, keyed by
/// pdsim catalog chip name. A100 entries are the registry's `a100-sxm` fits
/// (the registry notes A100-80 and A100-SXM are the same silicon).
const PRIMITIVES: &[Primitives] = &[
    Primitives {
        chip: "h100",
        eps_max_bf16: 0.903,
        m_half_bf16: 160.0,
        fp8: Some((0.784, 144.0)),
        moe_routing_imbalance_median: 1.044,
    },
    Primitives {
        chip: "h200",
        eps_max_bf16: 0.89,
        m_half_bf16: 102.0,
        fp8: Some((0.788, 94.0)),
        moe_routing_imbalance_median: 1.056,
    },
    Primitives {
        chip: "b200",
        eps_max_bf16: 0.787,
        m_half_bf16: 152.0,
        fp8: Some((0.717, 164.0)),
        moe_routing_imbalance_median: 0.986,
    },
    Primitives {
        chip: "a100-80g",
        eps_max_bf16: 0.899,
        m_half_bf16: 89.0,
        fp8: None,
        moe_routing_imbalance_median: 1.001,
    },
    Primitives {
        chip: "l40s",
        eps_max_bf16: 0.74,
        m_half_bf16: 103.0,
        fp8: Some((0.586, 135.0)),
        moe_routing_imbalance_median: 1.029,
    },
];

/// Chips whose HBM derate, HBM latency and P2P latency come from NVIDIA's
/// AISimulate descriptors (0.8, 3 µs and 10 µs on every one of them).
const DESCRIBED: &[&str] = &["h100", "h200", "b200", "a100-80g", "l40s"];

/// The built-in default for a scalar coefficient on `chip` (lowercase
/// catalog name), or `None` when pdsim has none.
pub fn builtin(name: &str, chip: &str) -> Option<Builtin> {
    let primitives = PRIMITIVES.iter().find(|p| p.chip == chip);
    let measured = |v: f64| Some(Builtin::new(v, SRC_PRIMITIVES_MEASURED));
    let generic = |v: f64| Some(Builtin::new(v, SRC_GENERIC));
    let described = DESCRIBED.contains(&chip);
    match name {
        "gemm_eps_max_bf16" => {
            primitives.map_or_else(|| generic(0.85), |p| measured(p.eps_max_bf16))
        }
        "gemm_m_half_bf16" => {
            primitives.map_or_else(|| generic(128.0), |p| measured(p.m_half_bf16))
        }
        "gemm_eps_max_fp8" => match primitives.and_then(|p| p.fp8) {
            Some((eps, _)) => measured(eps),
            None => generic(0.75),
        },
        "gemm_m_half_fp8" => match primitives.and_then(|p| p.fp8) {
            Some((_, m_half)) => measured(m_half),
            None => generic(128.0),
        },
        "moe_routing_imbalance_median" => primitives.map_or_else(
            || generic(1.03),
            |p| measured(p.moe_routing_imbalance_median),
        ),
        "hbm_derate" if described => Some(Builtin::new(0.8, SRC_PRIMITIVES_VENDOR)),
        "hbm_derate" => generic(0.8),
        "hbm_constant_latency" if described => Some(Builtin::new(3.0, SRC_PRIMITIVES_VENDOR)),
        "hbm_constant_latency" => generic(3.0),
        "p2p_latency" if described => Some(Builtin::new(10.0, SRC_PRIMITIVES_VENDOR)),
        "p2p_latency" => generic(10.0),
        _ => pdsim_builtin(name),
    }
}

/// pdsim's own constants: not in the BLIS registry, each with its source or
/// marked assumed.
fn pdsim_builtin(name: &str) -> Option<Builtin> {
    let (value, source) = match name {
        "engram_host_read_bw" => (
            63_000.0,
            "built-in: PCI-SIG PCI Express Base Specification 5.0: 32 GT/s on 16 lanes with \
             128b/130b encoding, 63 GB/s each way, the link an HGX GPU reads pinned host \
             memory through (vLLM 0.31.0's Engram lookup reads its host tables over UVA, \
             vllm/models/deepseek_v41/nvidia/engram.py); a GB200's NVLink-C2C is faster, so \
             scope a set to override it there (63 GB/s is 63,000 bytes/us)",
        ),
        "attention_eps_max" => (
            0.75,
            "built-in: literature, FlashAttention-3 (Shah et al. 2024) reaches up to 740 \
             TFLOP/s BF16 on H100, 75% of the dense peak",
        ),
        "host_schedule_per_step" => (
            126.0,
            "built-in: copied, inference-sim trained-physics per-step beta (~126 us), fitted \
             on H100 with vLLM 0.15.1 (research/inference-sim.md §1.7)",
        ),
        "host_schedule_per_request" => (
            4.0,
            "built-in: copied, inference-sim trained-physics per-request beta (~4 us), fitted \
             on H100 with vLLM 0.15.1 (research/inference-sim.md §1.7)",
        ),
        "allreduce_custom_floor_ratio" => (
            0.5,
            "built-in: assumed; vLLM's one-shot custom all-reduce (custom_all_reduce.py) \
             beats NCCL on small messages, taken as half the NCCL floor",
        ),
        "collective_internode_floor" => (
            20.0,
            "built-in: assumed extra latency of a collective that crosses the NIC \
             (RDMA round trip plus proxy), added to the intra-node floor",
        ),
        "collective_internode_efficiency" => (
            0.9,
            "built-in: assumed payload share of the fabric's nominal per-GPU rate; DeepEP's \
             README reports 43-58 GB/s RDMA on 50 GB/s NICs",
        ),
        "all2all_high_throughput_handshake" => (
            20.0,
            "built-in: assumed; DeepEP normal (high-throughput) kernels sync with the CPU to \
             learn receive counts before moving data (DeepEP README)",
        ),
        "all2all_low_latency_bw_efficiency" => (
            0.5,
            "built-in: assumed; DeepEP low-latency kernels send one message per token and \
             expert on few SMs and reach a fraction of the link rate",
        ),
        "host_tokenizer_batch_wait" => (
            2000.0,
            "built-in: vLLM 0.15.1 source, vllm/utils/async_utils.py: \
             AsyncMicrobatchTokenizer(batch_wait_timeout_s=0.002), which \
             CompletionRenderer._create_prompt_from_text (vllm/entrypoints/renderer.py) \
             builds with its defaults: a batch waits 2 ms after its first prompt",
        ),
        "host_tokenizer_batch_max" => (
            32.0,
            "built-in: vLLM 0.15.1 source, vllm/utils/async_utils.py: \
             AsyncMicrobatchTokenizer(max_batch_size=32): a batch of 32 prompts is \
             tokenized without waiting further",
        ),
        "frontend_rust_admission_ratio" => (
            0.5,
            "built-in: assumed; the vllm-rs frontend renders and tokenizes without Python \
             objects per request, taken as half the Python cost per prompt token",
        ),
        _ => return None,
    };
    Some(Builtin::new(value, source))
}

/// Measured collective curves: (chip, operation, ranks, floor µs, peak
/// bytes/µs, transition bytes/µs) at fp16, from the BLIS registry set
/// cost-model-collectives (NVIDIA AISimulate NCCL 2.29.2 sweeps).
const COLLECTIVES: &[(&str, &str, u64, f64, f64, f64)] = &[
    ("h100", "all_gather", 2, 5.14, 258468.9, 191250.0),
    ("h100", "all_gather", 4, 7.07, 211790.1, 164000.0),
    ("h100", "all_gather", 8, 10.14, 191534.4, 145500.0),
    ("h100", "all_reduce", 2, 5.85, 159172.8, 121750.0),
    ("h100", "all_reduce", 4, 9.31, 116725.8, 100750.0),
    ("h100", "all_reduce", 8, 15.59, 127156.7, 91250.0),
    ("h100", "alltoall", 2, 6.47, 279949.8, 224500.0),
    ("h100", "alltoall", 4, 6.48, 192145.9, 160750.0),
    ("h100", "alltoall", 8, 7.44, 180107.3, 143000.0),
    ("h100", "reduce_scatter", 2, 5.14, 249035.6, 185250.0),
    ("h100", "reduce_scatter", 4, 6.99, 206517.4, 169000.0),
    ("h100", "reduce_scatter", 8, 10.24, 191827.3, 176000.0),
    ("h200", "all_gather", 2, 5.08, 257645.3, 197000.0),
    ("h200", "all_gather", 4, 7.13, 211087.3, 171250.0),
    ("h200", "all_gather", 8, 10.3, 192431.0, 148500.0),
    ("h200", "all_reduce", 2, 6.01, 157541.8, 126000.0),
    ("h200", "all_reduce", 4, 9.44, 116147.0, 103500.0),
    ("h200", "all_reduce", 8, 15.98, 131566.0, 92500.0),
    ("h200", "alltoall", 2, 6.35, 297702.6, 226750.0),
    ("h200", "alltoall", 4, 6.64, 212642.4, 167250.0),
    ("h200", "alltoall", 8, 7.39, 177782.4, 143750.0),
    ("h200", "reduce_scatter", 2, 5.16, 247750.7, 193250.0),
    ("h200", "reduce_scatter", 4, 7.11, 207425.4, 176500.0),
    ("h200", "reduce_scatter", 8, 10.24, 192654.7, 177750.0),
];

const SRC_COLLECTIVES: &str = "built-in: BLIS registry cost-model-collectives \
     (inference-sim/blis-registry coefficients/cost-model-collectives.yaml @1dd3dc75), \
     measured on NVIDIA AISimulate NCCL 2.29.2 sweeps";

/// The H100 NVLink rate per direction the measured H100 curves ran on, used
/// to scale them to chips the registry does not cover.
const H100_INTRA_NODE_GBPS: f64 = 450.0;

/// The built-in (floor µs, peak bytes/µs, transition bytes/µs) of an
/// intra-node fp16 collective on `chip` at `ranks` (2, 4 or 8), each with
/// its source. Chips without measured curves get the H100 floors and the
/// H100 rates scaled by their intra-node bandwidth over H100's.
pub fn builtin_collective(chip: &str, op: &str, ranks: u64, intra_node_gbps: f64) -> [Builtin; 3] {
    if let Some(c) = COLLECTIVES
        .iter()
        .find(|c| c.0 == chip && c.1 == op && c.2 == ranks)
    {
        return [
            Builtin::new(c.3, SRC_COLLECTIVES),
            Builtin::new(c.4, SRC_COLLECTIVES),
            Builtin::new(c.5, SRC_COLLECTIVES),
        ];
    }
    let h100 = COLLECTIVES
        .iter()
        .find(|c| c.0 == "h100" && c.1 == op && c.2 == ranks)
        .copied()
        .unwrap_or(("h100", "all_reduce", 8, 15.59, 127156.7, 91250.0));
    let scale = intra_node_gbps / H100_INTRA_NODE_GBPS;
    let source = "built-in: assumed; the registry's H100 curve (cost-model-collectives.yaml \
                  @1dd3dc75) with rates scaled by this chip's IntraNodeBwGBps over H100's 450";
    [
        Builtin::new(h100.3, source),
        Builtin::new(h100.4 * scale, source),
        Builtin::new(h100.5 * scale, source),
    ]
}

#[cfg(test)]
mod name_tests {
    /// The other half of `Resolver::value`'s assertion: each exact name
    /// the validator accepts is written out in this crate's code that reads
    /// it (a `get("…")` or a built-in default's arm), so the list carries no
    /// name nothing reads.
    #[test]
    fn every_exact_name_the_validator_accepts_is_read_here() {
        let sources = [
            include_str!("roofline.rs"),
            include_str!("linear.rs"),
            include_str!("transfer.rs"),
            include_str!("coefficients.rs"),
        ];
        for name in pdsim_spec::coefficient_names::READ {
            let quoted = format!("\"{name}\"");
            assert!(
                sources.iter().any(|s| s.matches(&quoted).count() > 0),
                "`{name}` is listed as read but no code in pdsim-cost names it"
            );
        }
    }
}

#[cfg(test)]
mod number_tests {
    use super::{Builtin, Deployment, Resolver};

    /// A value outside its range is quoted as `number` shows it: plainly
    /// when ordinary, in exponent form when its plain form would run to
    /// hundreds of digits.
    #[test]
    fn a_value_out_of_range_is_quoted_compactly() {
        let deployment = Deployment {
            hardware: "h100".into(),
            model: "llama-3.1-8b".into(),
            tp: 1,
            ep: 1,
            nodes_spanned: 1,
        };
        let mut r = Resolver::new(deployment, &[]).unwrap();
        let mut refuse = |value: f64| {
            r.value(
                "hbm_constant_latency",
                "us",
                Some(Builtin::new(value, "test")),
                0.0,
                10.0,
            )
            .unwrap_err()
        };
        assert!(refuse(12.5).contains("`hbm_constant_latency` = 12.5 (from test)"));
        let huge = refuse(1e300);
        assert!(
            huge.contains("`hbm_constant_latency` = 1e300 (from test)"),
            "{huge}"
        );
    }
}
