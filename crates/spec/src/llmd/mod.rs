//! A Deployment as llm-d users deploy it, and back (`pdsim export` and
//! `pdsim import`): the vLLM serve arguments of each pool
//! ([`vllm_serve`]), the Helm values of llm-d's model-service chart
//! ([`modelservice`]) and of the inference extension's inferencepool chart
//! for the router ([`inferencepool`]), in the shapes llm-d's guides use
//! (`guides/*/ms-*/values.yaml`, `guides/*/gaie-*/values.yaml`). Pure: the
//! CLI reads and writes the files.

pub mod inferencepool;
pub mod modelservice;
pub mod vllm_serve;
