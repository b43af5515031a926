//! lora-affinity-scorer (`scheduling/scorer/loraaffinity/lora_affinity.go`).

use super::Scorer;
use crate::plugins::Cycle;

/// The Go scorer gives 1 where the request's adapter is active, 0.8 where
/// the server has room for one more (`len(ActiveModels) +
/// len(WaitingModels) < MaxActiveModels`), 0.6 where it is queued to load,
/// else 0. pdsim's engines serve no LoRA adapters, so they export no
/// `vllm:lora_requests_info` (vLLM creates that gauge only with a LoRA
/// config): every endpoint has no active or waiting adapter and a
/// `MaxActiveModels` of 0, and every candidate scores 0, adding nothing to
/// the profile's weighted sum.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LoraAffinityScorer;

impl Scorer for LoraAffinityScorer {
    fn score(&self, _cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        out.resize(candidates.len(), 0.0);
    }
}
