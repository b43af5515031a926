//! What a deployment's drafter becomes in the engine. Each method reserves
//! the lookahead slots and adds the input slots vLLM gives it. An MTP
//! drafter with more than one module runs in vLLM 0.29.0 to 0.31.0 as
//! multi-module MTP (`SpeculativeConfig.use_multi_module_mtp`,
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

/// One colocated pool of DeepSeek-V3 engines drafting with `spec` (a
/// `speculative` block). vllm-rbln reuses prefixes a budget at a time,
/// which must divide its 64-token block, so the budget is 64.
fn deployment(spec: &str) -> String {
    format!(
        "kind: Deployment
name: mtp
pools:
  - role: colocated
    nodes: 1
    parallel: {{tp: 8, pp: 1, dp: 1, enable_expert_parallel: true}}
    engine:
      max_num_batched_tokens: 64
      max_num_seqs: 64
      max_model_len: 32768
      speculative: {spec}
"
    )
}

fn outcome(version: &str, modules: u32, spec: &str) -> Result<(), String> {
    let scenario = SCENARIO.replace("\"0.31.0\"", &format!("\"{version}\""));
    let deployment = deployment(spec);
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

/// What each drafting method reserves and adds, as the engine gets it:
/// EAGLE-family methods drop a hit's last block; lookahead slots are
/// `VllmConfig.num_lookahead_tokens` (vllm/config/vllm.py); input slots are
/// `SpeculativeConfig.max_num_new_slots_for_drafting`
/// (vllm/config/speculative.py), paid from the input budget only on the
/// releases whose scheduler keeps one (0.29.0 to 0.31.0, not 0.15.1 or
/// vllm-rbln's own scheduler).
#[test]
fn each_drafter_reserves_its_lookahead_and_input_slots() {
    let k = 3;
    for (version, method, eagle, lookahead, slots) in [
        ("0.31.0", "ngram", false, 0, 0),
        ("0.31.0", "eagle", true, k, 0),
        ("0.31.0", "mtp", true, k, 0),
        ("0.31.0", "dflash", true, k + 1, k),
        ("0.31.0", "dspark", true, k, k - 1),
        ("0.31.0", "draft_model", false, k, 1),
        ("0.29.0", "dflash", true, k + 1, k),
        ("0.29.0", "draft_model", false, k, 1),
        ("vllm-rbln-0.12.0", "dflash", true, k + 1, 0),
        ("0.15.1", "draft_model", false, k, 0),
    ] {
        let scenario = SCENARIO
            .replace("\"0.31.0\"", &format!("\"{version}\""))
            .replace("deepseek-v3-mtp3", "deepseek-v3");
        let deployment = deployment(&format!("{{method: {method}, num_spec_tokens: {k}}}"));
        let cluster = common::build(&scenario, &deployment, &[])
            .unwrap_or_else(|e| panic!("{version} {method}: {e}"));
        let spec = cluster.pools[0].engine.spec.as_ref().expect("drafts");
        assert_eq!(
            (spec.eagle_style, spec.lookahead_tokens, spec.draft_slots),
            (eagle, lookahead, slots),
            "{version} {method}"
        );
    }
}
