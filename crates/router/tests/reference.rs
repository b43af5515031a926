//! Every real router file in `$PDSIM_SHARED/reference/epp/` (configs from
//! llm-d-router, the inference scheduler, the Gateway API Inference
//! Extension and the llm-d guides' Helm values, plus manifests) either loads
//! or is refused with a message that names the plugin, key or apiVersion at
//! fault. The table below is the expected outcome per file; the folder's
//! README lists the known refusals, and this test keeps them honest.

use pdsim_router::{RouterProblem, load_config, load_manifests, parse_flags};
use serde_yaml::Value;

/// What one file should do: load, or be refused with a message containing
/// this text. Files whose configs pdsim loads but cannot run yet are
/// refused with `epp-not-simulated` problems naming the plugin.
const EXPECTED: &[(&str, &str)] = &[
    (
        "gateway-api-inference-extension@v0.5.1__config__charts__inferencepool__templates__epp-config.yaml",
        "low-queue-filter",
    ),
    (
        "gateway-api-inference-extension@v1.5.0__config__charts__inferencepool__values.yaml",
        "load",
    ),
    (
        "gateway-api-inference-extension__conformance__resources__base.yaml",
        "load",
    ),
    (
        "llm-d-inference-scheduler@v0.2.0__deploy__config__epp-prefix-cache-tracking-config.yaml",
        "kv-cache-scorer",
    ),
    // A kustomize/envsubst template: its `number: ${TARGET_PORTS}` is a
    // string until substituted, which the API (and pdsim) refuses as a
    // port rather than reading the pool as having none.
    (
        "llm-d-inference-scheduler__deploy__components__inference-gateway__inference-pools.yaml",
        "${TARGET_PORTS}",
    ),
    (
        "llm-d-inference-scheduler__test__sidecar__config__nixl__inferencepool.yaml",
        "load",
    ),
    (
        "llm-d-inference-scheduler__test__testdata__inferencepool-e2e.yaml",
        "load",
    ),
    (
        "llm-d-router__config__manifests__inferenceobjective.yaml",
        "load",
    ),
    ("llm-d-router__deploy__config__epp-config.yaml", "load"),
    (
        "llm-d-router__deploy__config__epp-estimate-prefix-cache-config.yaml",
        "load",
    ),
    (
        "llm-d-router__deploy__config__epp-mm-embeddings-cache-config.yaml",
        "mm-embeddings-cache-producer",
    ),
    (
        "llm-d-router__deploy__config__epp-precise-prefix-cache-config.yaml",
        "load",
    ),
    ("llm-d-router__deploy__config__pd-epp-config.yaml", "load"),
    (
        "llm-d-router__deploy__config__probabilistic-admitter-epp-config.yaml",
        "load",
    ),
    (
        "llm-d-router__deploy__config__sim-e-p-d-epp-config.yaml",
        "encode-filter",
    ),
    (
        "llm-d-router__deploy__config__sim-e-pd-epp-config.yaml",
        "encode-filter",
    ),
    ("llm-d-router__deploy__config__sim-epp-config.yaml", "load"),
    (
        "llm-d-router__deploy__config__sim-epp-gpu-config.yaml",
        "dcgm-data-source",
    ),
    (
        "llm-d-router__deploy__config__sim-epp-kvcache-config.yaml",
        "load",
    ),
    (
        "llm-d-router__deploy__config__sim-epp-tokenizer-vllm-http-config.yaml",
        "load",
    ),
    (
        "llm-d-router__deploy__config__sim-pd-epp-config.yaml",
        "load",
    ),
    (
        "llm-d-router__deploy__config__sim-program-aware-config.yaml",
        "load",
    ),
    (
        "llm-d-router__test__integration__epp__testdata__datalayer-config.yaml",
        "mock-metrics-source",
    ),
    (
        "llm-d-router__test__integration__epp__testdata__default-config.yaml",
        "load",
    ),
    (
        "llm-d-router__test__integration__epp__testdata__request-attribute-reporter-config.yaml",
        "mock-metrics-source",
    ),
    (
        "llm-d-router__test__testdata__configloader_1_test.yaml",
        "test-profile-handler",
    ),
    (
        "llm-d-router__test__testdata__inferencepool-with-model-hermetic.yaml",
        "targetModels",
    ),
    (
        "llm-d__guides__flow-control__router__flow-control.values.yaml",
        "llm-d.ai/v1",
    ),
    (
        "llm-d__guides__optimized-baseline__router__optimized-baseline.values.yaml",
        "maxTokensInFlightPenalty",
    ),
    (
        "llm-d__guides__pd-disaggregation__router__pd-disaggregation.values.yaml",
        "llm-d.ai/v1",
    ),
    (
        "llm-d__guides__precise-prefix-cache-routing__router__precise-prefix-cache-routing.values.yaml",
        "load",
    ),
];

/// Loads one file the way its kind asks, collecting every problem.
fn load(name: &str, text: &str) -> Vec<RouterProblem> {
    let mut problems = Vec::new();
    if name.ends_with("values.yaml") {
        // Helm values: inline configs under epp.pluginsCustomConfig and a
        // flags map under epp.flags.
        let value: Value = serde_yaml::from_str(text).expect("values parse");
        for section in [
            value.get("router").and_then(|r| r.get("epp")),
            value.get("inferenceExtension"),
        ]
        .into_iter()
        .flatten()
        {
            if let Some(configs) = section
                .get("pluginsCustomConfig")
                .and_then(Value::as_mapping)
            {
                for (file, config) in configs {
                    let label = format!("{name}:{}", file.as_str().unwrap_or("?"));
                    if let Err(p) = load_config(&label, config.as_str().unwrap_or(""), false) {
                        problems.extend(p);
                    }
                }
            }
            if let Some(flags) = section.get("flags").and_then(Value::as_mapping) {
                let flags = pdsim_router::flags::render_helm_flags(flags);
                if let Err(p) = parse_flags(name, &flags) {
                    problems.extend(p);
                }
            }
        }
        return problems;
    }
    if text.contains("kind: EndpointPickerConfig") && !text.contains("kind: ConfigMap") {
        return load_config(name, text, false).err().unwrap_or_default();
    }
    if text.contains("kind: ConfigMap") && text.contains("EndpointPickerConfig") {
        // A Helm template: drop the templated lines, then read the configs
        // the ConfigMap carries.
        let plain: String = text
            .lines()
            .filter(|l| !l.contains("{{"))
            .map(|l| format!("{l}\n"))
            .collect();
        for document in serde_yaml::Deserializer::from_str(&plain) {
            let value = <Value as serde::Deserialize>::deserialize(document)
                .expect("template without placeholders parses");
            for (file, config) in value
                .get("data")
                .and_then(Value::as_mapping)
                .into_iter()
                .flatten()
            {
                let label = format!("{name}:{}", file.as_str().unwrap_or("?"));
                if let Err(p) = load_config(&label, config.as_str().unwrap_or(""), false) {
                    problems.extend(p);
                }
            }
        }
        return problems;
    }
    load_manifests(name, text).err().unwrap_or_default()
}

#[test]
fn every_reference_file_loads_or_is_refused_by_name() {
    let Some(shared) = pdsim_testkit::shared(
        "every_reference_file_loads_or_is_refused_by_name",
        "the real router files in reference/epp",
    ) else {
        return;
    };
    let dir = shared.join("reference/epp");
    let files: Vec<String> = pdsim_testkit::entries(&dir)
        .iter()
        .filter_map(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    assert_eq!(
        files.len(),
        EXPECTED.len(),
        "a reference file was added or removed; extend EXPECTED"
    );
    let mut report = String::new();
    for name in &files {
        let expected = EXPECTED
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, e)| *e)
            .unwrap_or_else(|| panic!("{name} missing from EXPECTED"));
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let problems = load(name, &text);
        let rendered: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        report.push_str(&format!(
            "{name}: {}\n",
            if rendered.is_empty() {
                "loads".into()
            } else {
                rendered.join(" | ")
            }
        ));
        if expected == "load" {
            assert!(
                problems.is_empty(),
                "{name} should load:\n{}",
                rendered.join("\n")
            );
        } else {
            assert!(
                !problems.is_empty(),
                "{name} should be refused naming `{expected}`"
            );
            assert!(
                rendered.iter().any(|m| m.contains(expected)),
                "{name}: no problem names `{expected}`:\n{}",
                rendered.join("\n")
            );
            // Every problem names a key path or quotes what it refuses.
            for p in &problems {
                assert!(!p.path.is_empty() || p.message.contains('`'), "{p}");
            }
        }
    }
    eprintln!("{report}");
}
