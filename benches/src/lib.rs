//! Inputs shared by pdsim's benchmarks: the bundled documents, in memory, so
//! a bench measures pdsim and not the disk.

use pdsim_spec::files::MemoryFiles;

/// The bundled 4×8 H200 scenario with its three layouts.
pub fn h200_bundle() -> MemoryFiles {
    MemoryFiles::new()
        .with("s.yaml", include_str!("../../scenarios/4x8-h200.yaml"))
        .with("1p3d.yaml", include_str!("../../deployments/1p3d-ep8.yaml"))
        .with("2p2d.yaml", include_str!("../../deployments/2p2d-ep8.yaml"))
        .with(
            "colocated.yaml",
            include_str!("../../deployments/colocated-tp8.yaml"),
        )
        .with("pd/epp-always-pd.yaml", ALWAYS_PD)
}

/// The router configuration the bundled P/D layouts name.
const ALWAYS_PD: &str = include_str!("../../deployments/pd/epp-always-pd.yaml");

/// Four HGX H200 nodes running Llama-3.1-8B as 32 colocated single-GPU
/// engines: the end-to-end speed case of issue 3 ("100,000 requests on 32
/// engines").
pub fn e2e_bundle() -> MemoryFiles {
    MemoryFiles::new()
        .with(
            "s.yaml",
            "kind: Scenario\nname: bench-4x8-h200-llama-8b\nmodel: llama-3.1-8b\ncoefficients: [cost-model-host-overheads]\n\
             engine_version: \"0.31.0\"\nworkload:\n  shape: chatbot\ncluster:\n  hardware: h200\n  fabric: ib-400g\n  nodes: 4\n  gpus_per_node: 8\n",
        )
        .with(
            "d.yaml",
            "kind: Deployment\nname: bench-32x-tp1\npools:\n  - role: colocated\n    nodes: 4\n    parallel: {tp: 1, pp: 1, dp: 1}\n",
        )
}

/// The colocated case routed by llm-d's precise prefix-cache path: the
/// engines publish KV events that feed the EPP's block index
/// (`epp-precise-prefix-cache-config.yaml` at the engines' block size).
pub fn e2e_precise_bundle() -> MemoryFiles {
    with_router(
        r#"apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
  parameters: {modelName: m, vllm: {url: "http://localhost:8000"}}
- type: endpoint-notification-source
- type: single-profile-handler
- type: precise-prefix-cache-producer
  parameters: {tokenProcessorConfig: {blockSize: 16}}
- type: prefix-cache-scorer
  parameters: {prefixMatchInfoProducerName: precise-prefix-cache-producer}
- type: kv-cache-utilization-scorer
- type: queue-scorer
- type: max-score-picker
dataLayer:
  sources:
  - pluginRef: endpoint-notification-source
    extractors:
    - pluginRef: precise-prefix-cache-producer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
"#,
    )
}

/// The colocated case behind the EPP's flow controller (queue, concurrency
/// detector, TTL sweep).
pub fn e2e_flow_bundle() -> MemoryFiles {
    with_router(
        r#"apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: concurrency-detector
  parameters: {maxConcurrency: 64}
flowControl:
  defaultRequestTTL: 60s
  saturationDetector: {pluginRef: concurrency-detector}
"#,
    )
}

fn with_router(epp: &str) -> MemoryFiles {
    let base = e2e_bundle();
    base.with(
        "d.yaml",
        "kind: Deployment\nname: bench-32x-tp1\npools:\n  - role: colocated\n    nodes: 4\n    parallel: {tp: 1, pp: 1, dp: 1}\nrouter:\n  endpoint_picker_config: epp.yaml\n",
    )
    .with("epp.yaml", epp)
}

/// The bundled 1P3D layout (`deployments/1p3d-ep8.yaml`, DeepSeek-V3 on four
/// H200 nodes, its router disaggregating every request) with the catalog's
/// chatbot shape: the P/D speed case.
pub fn pd_bundle() -> MemoryFiles {
    MemoryFiles::new()
        .with(
            "s.yaml",
            &include_str!("../../scenarios/4x8-h200.yaml")
                .replace("shape: summarization", "shape: chatbot"),
        )
        .with("d.yaml", include_str!("../../deployments/1p3d-ep8.yaml"))
        .with("pd/epp-always-pd.yaml", ALWAYS_PD)
}

/// The 1P3D layout routed by the Endpoint Picker with prefix-cache-aware P/D
/// routing (`deployments/1p3d-ep8-epp.yaml`): the router-on speed case.
pub fn pd_epp_bundle() -> MemoryFiles {
    pd_bundle()
        .with(
            "d.yaml",
            include_str!("../../deployments/1p3d-ep8-epp.yaml"),
        )
        .with(
            "pd/epp-prefix-pd.yaml",
            include_str!("../../deployments/pd/epp-prefix-pd.yaml"),
        )
}
