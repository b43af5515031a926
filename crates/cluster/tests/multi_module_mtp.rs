//! An MTP drafter with more than one module runs in vLLM 0.29.0 to 0.31.0
//! as multi-module MTP (`SpeculativeConfig.use_multi_module_mtp`,
//! `vllm/config/speculative.py`), whose scheduling rules pdsim does not
//! simulate: such a pool is refused by key, naming the rules, on the
//! releases that have them; a one-module drafter, one speculative token, or
//! a release without the rules runs.

mod common;

const SCENARIO: &str = "kind: Scenario
name: mtp
model: deepseek-v3-mtp3
coefficients:
  - cost-model-host-overheads
engine_version: \"0.31.0\"
workload:
  shape: chatbot
cluster:
  hardware: b200
  nodes: 1
  gpus_per_node: 8
  fabric: ib-400g
";

/// The built-in DeepSeek-V3 with `modules` MTP modules, as a user's
/// catalog entry `deepseek-v3-mtp3`.
fn model(modules: u32) -> String {
    let builtin = include_str!("../../spec/catalog/models/deepseek-v3.yaml");
    let line = "num_nextn_predict_layers: 1\n";
    assert!(
        builtin.contains(line),
        "the built-in model states one module"
    );
    builtin.replace(line, &format!("num_nextn_predict_layers: {modules}\n"))
}

fn outcome(version: &str, modules: u32, spec: &str) -> Result<(), String> {
    let scenario = SCENARIO.replace("\"0.31.0\"", &format!("\"{version}\""));
    let deployment = format!(
        "kind: Deployment
name: mtp
pools:
  - role: colocated
    nodes: 1
    parallel: {{tp: 8, pp: 1, dp: 1, enable_expert_parallel: true}}
    engine:
      max_num_batched_tokens: 8192
      max_num_seqs: 64
      max_model_len: 32768
      speculative: {spec}
"
    );
    let model = model(modules);
    common::build_with_catalog(
        &scenario,
        &deployment,
        &[],
        &[("models/deepseek-v3-mtp3.yaml", model.as_str())],
    )
    .map(|_| ())
}

#[test]
fn a_many_module_mtp_drafter_is_refused_where_vllm_runs_it_as_multi_module_mtp() {
    for version in ["0.29.0", "0.31.0", "vllm-rbln-0.12.0"] {
        // vLLM renames every MTP model type to `mtp` before it asks.
        for method in ["mtp", "deepseek_mtp"] {
            let err = outcome(
                version,
                3,
                &format!("{{method: {method}, num_spec_tokens: 2}}"),
            )
            .expect_err("refused");
            assert!(
                err.contains("pools[0].engine.speculative")
                    && err.contains("use_multi_module_mtp")
                    && err.contains("_reserve_prefill_lookahead"),
                "{version} {method}: {err}"
            );
        }
    }
}

#[test]
fn a_one_module_drafter_or_one_token_or_a_release_without_the_rules_runs() {
    // One speculative token: min(modules, tokens) is 1.
    outcome("0.31.0", 3, "{method: mtp, num_spec_tokens: 1}").expect("runs");
    // One module, three tokens: one module drafts them in turn.
    outcome("0.31.0", 1, "{method: mtp, num_spec_tokens: 3}").expect("runs");
    // Not an MTP method.
    outcome("0.31.0", 3, "{method: ngram, num_spec_tokens: 3}").expect("runs");
    // 0.15.1 has no multi-module MTP.
    outcome("0.15.1", 3, "{method: mtp, num_spec_tokens: 3}").expect("runs");
}
