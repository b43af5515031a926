//! The negative suite of `pdsim-spec`: at least one case for every check of
//! the Deployment specification ("Checks" in `seeds/000`), for every load
//! error a Deployment can hit, for the Scenario checks a bundle depends on,
//! and for every rule of the engine-release rules packs.
//!
//! # Design
//!
//! Data-driven, in the manner of rust-analyzer's fixture tests: a case is
//! text in, problems out.
//!
//! * **Baselines.** `BASE_SCENARIO` (4 nodes × 8 H200, DeepSeek-V3, vLLM
//!   0.31.0) and `BASE_DEPLOYMENT` (the specification's own `1p3d-ep8`) make a
//!   bundle that validates with no problem at all (`base_bundle_is_clean`).
//!   Each case changes as little as it can from a known-good baseline: an
//!   [`edit`] of the base scenario and a small deployment built by
//!   [`deployment`] / [`colocated`] or an edit of the base deployment. Where a
//!   case needs another model or release, a positive control in the same
//!   table shows that baseline clean too, so the expected problem is the one
//!   the case introduced.
//! * **Expectations.** A case lists `err(code, path)` / `warn(code, path)`:
//!   [`check`] asserts each is present with exactly that severity, code and
//!   key path (a path ending in `*` is a prefix, for paths serde reports), that
//!   a problem whose path is written in its document (or that is a load error)
//!   carries a line, and that the bundle's validity agrees: an expected error
//!   makes it invalid, a case expecting only warnings must stay valid. On a
//!   failure it prints every problem found. `lacks(code)` asserts a problem is
//!   absent (a release that accepts what another refuses). A case that expects
//!   nothing asserts the bundle is clean.
//! * **One test per case, and the table as data.** The `cases!` macro turns
//!   each row into its own `#[test]` (so `cargo test dcp_` runs a family) and
//!   keeps the rows as a table, so `every_rule_has_a_case` can require a
//!   negative case for each code in `rules::RULE_CODES`, and
//!   `every_field_check_has_a_case` one for each code the field and cluster
//!   checks emit. Adding a check or a rule without a case fails the suite.
//!
//! Rules run only when the field layer passed, so each rule case is an
//! otherwise valid bundle: its pools sum to the cluster's nodes, its ranks fit
//! and its weights fit in memory.

use pdsim_spec::Severity;
use pdsim_spec::files::MemoryFiles;
use pdsim_spec::layout::PLACEMENT_SEARCH_STEPS;
use pdsim_spec::rules::RULE_CODES;
use pdsim_spec::validate::limits::{
    MAX_BATCHED_TOKENS, MAX_BLOCK_SIZE, MAX_NODES, MAX_NUM_SEQS, MAX_OFFLOAD_BYTES,
    MAX_PARALLEL_WIDTH, MAX_TOKENS,
};
use pdsim_spec::validate::{Report, Request, validate};
use std::collections::BTreeSet;

// ---------------------------------------------------------------------------
// Baselines
// ---------------------------------------------------------------------------

/// Four HGX H200 nodes serving DeepSeek-V3 (256 experts, MLA) on vLLM 0.31.0.
const BASE_SCENARIO: &str = "\
kind: Scenario
name: base
model: deepseek-v3
coefficients:
  - cost-model-host-overheads
engine_version: \"0.31.0\"
workload:
  shape: chatbot
cluster:
  hardware: h200
  fabric: ib-400g
  nodes: 4
  gpus_per_node: 8
  storage:
    - cpu_dram
    - nvme_gen4
";

/// The specification's example deployment, `deployments/1p3d-ep8.yaml`.
const BASE_DEPLOYMENT: &str = "\
kind: Deployment
name: 1p3d-ep8
pools:
  - role: prefill
    nodes: 1
    parallel:
      tp: 1
      pp: 1
      dp: 8
      dp_local: 8
      enable_expert_parallel: true
    engine:
      all2all_backend: deepep_high_throughput
      max_num_batched_tokens: 16384
  - role: decode
    nodes: 3
    parallel:
      tp: 1
      pp: 1
      dp: 8
      dp_local: 8
      enable_expert_parallel: true
    engine:
      all2all_backend: deepep_low_latency
      max_num_seqs: 512
offload:
  tiers:
    - tier: cpu_dram
      bytes: 549755813888
pd_transfer:
  connector: NixlConnector
";

/// An EndpointPickerConfig the router cases can name (`epp.yaml`), also
/// placed under `router/` so that `router` is a directory.
const EPP_CONFIG: &str = "\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
";

/// One tensor-parallel-8 engine per node: DeepSeek-V3's weights fit at tp 8.
const TP8: &str = "tp: 8, pp: 1, dp: 1";
/// One data-parallel-8 engine per node with expert parallelism (width 8).
const EP8: &str = "tp: 1, pp: 1, dp: 8, dp_local: 8, enable_expert_parallel: true";
/// Data-parallel 8 with expert parallelism, dp_local left to the launch.
const DP8_EP: &str = "tp: 1, pp: 1, dp: 8, enable_expert_parallel: true";
/// The P/D transfer block a prefill pool needs.
const PD_TRANSFER: &str = "pd_transfer:\n  connector: NixlConnector\n";

// ---------------------------------------------------------------------------
// Building cases
// ---------------------------------------------------------------------------

/// One row of a table: a bundle and what validating it must report.
struct Case {
    name: &'static str,
    scenario: Option<String>,
    deployment: String,
    expect: Vec<Expect>,
}

#[derive(Clone, Copy, Debug)]
enum Expect {
    /// A problem of this severity, code and key path is reported.
    Has(Severity, &'static str, &'static str),
    /// No problem of this code is reported.
    Lacks(&'static str),
}

fn err(code: &'static str, path: &'static str) -> Expect {
    Expect::Has(Severity::Error, code, path)
}

fn warn(code: &'static str, path: &'static str) -> Expect {
    Expect::Has(Severity::Warning, code, path)
}

fn lacks(code: &'static str) -> Expect {
    Expect::Lacks(code)
}

/// Replaces `from` by `to` in `text`, insisting `from` occurs exactly once so
/// that an edit can never silently do nothing.
fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "`{from}` must occur exactly once in:\n{text}"
    );
    text.replacen(from, to, 1)
}

/// The base scenario.
fn base() -> Option<String> {
    Some(BASE_SCENARIO.to_string())
}

/// No scenario at all: the deployment is validated on its own.
fn no_scenario() -> Option<String> {
    None
}

/// The base scenario with each `(from, to)` replacement applied.
fn edit(changes: &[(&str, &str)]) -> Option<String> {
    Some(
        changes
            .iter()
            .fold(BASE_SCENARIO.to_string(), |text, (from, to)| {
                replace_once(&text, from, to)
            }),
    )
}

/// The base scenario serving another model.
fn model(name: &str) -> Option<String> {
    edit(&[("model: deepseek-v3", &format!("model: {name}"))])
}

/// The base scenario on another engine release.
fn release(version: &str) -> Option<String> {
    edit(&[(
        "engine_version: \"0.31.0\"",
        &format!("engine_version: \"{version}\""),
    )])
}

/// The base deployment with each `(from, to)` replacement applied.
fn base_edit(changes: &[(&str, &str)]) -> String {
    changes
        .iter()
        .fold(BASE_DEPLOYMENT.to_string(), |text, (from, to)| {
            replace_once(&text, from, to)
        })
}

/// A deployment of `(role, nodes, parallel, engine)` pools, the parallel and
/// engine blocks written as flow-mapping bodies, followed by `tail` (more
/// top-level keys). An empty engine omits the block.
fn deployment(pools: &[(&str, i64, &str, &str)], tail: &str) -> String {
    let mut doc = String::from("kind: Deployment\nname: case\npools:\n");
    for (role, nodes, parallel, engine) in pools {
        doc += &format!("  - role: {role}\n    nodes: {nodes}\n    parallel: {{{parallel}}}\n");
        if !engine.is_empty() {
            doc += &format!("    engine: {{{engine}}}\n");
        }
    }
    doc + tail
}

/// One colocated pool over the base cluster's four nodes.
fn colocated(parallel: &str, engine: &str) -> String {
    deployment(&[("colocated", 4, parallel, engine)], "")
}

/// An `offload` block of `(tier, bytes)` tiers followed by `extra` offload
/// keys (each a line indented by two spaces).
fn offload(tiers: &[(&str, i64)], extra: &str) -> String {
    let mut tail = String::from("offload:\n  tiers:\n");
    for (tier, bytes) in tiers {
        tail += &format!("    - {{tier: '{tier}', bytes: {bytes}}}\n");
    }
    tail + extra
}

/// One GiB, a tier size every storage class holds.
const GIB: i64 = 1 << 30;

/// The colocated tensor-parallel-8 pool with pod labels, as a flow body.
fn with_labels(labels: &str) -> String {
    colocated(TP8, "") + &format!("    labels: {{{labels}}}\n")
}

/// One colocated pool over four nodes, then `tail`.
fn colocated_with(parallel: &str, engine: &str, tail: &str) -> String {
    deployment(&[("colocated", 4, parallel, engine)], tail)
}

/// Declares a table of cases: `name: scenario, deployment => [expectations];`.
/// Generates `cases()` returning the table and one `#[test]` per row; the
/// doc comment of a row says why the case is built the way it is.
macro_rules! cases {
    ($(
        $(#[$meta:meta])*
        $name:ident: $scenario:expr, $deployment:expr => [$($expect:expr),* $(,)?];
    )*) => {
        /// Every case of this table, for the coverage tests.
        pub(crate) fn cases() -> Vec<Case> {
            vec![$(Case {
                name: stringify!($name),
                scenario: $scenario,
                deployment: $deployment.to_string(),
                expect: vec![$($expect),*],
            }),*]
        }

        $(
            $(#[$meta])*
            #[test]
            fn $name() {
                run(stringify!($name), cases());
            }
        )*
    };
}

// ---------------------------------------------------------------------------
// Running and asserting
// ---------------------------------------------------------------------------

/// Validates a bundle held in memory: `s.yaml` (when given), `d.yaml`, and the
/// router fixtures `epp.yaml` and `router/epp.yaml`.
fn validate_bundle(scenario: Option<&str>, deployment: &str) -> Report {
    let mut files = MemoryFiles::new()
        .with("d.yaml", deployment)
        .with("epp.yaml", EPP_CONFIG)
        .with("router/epp.yaml", EPP_CONFIG);
    if let Some(text) = scenario {
        files.insert("s.yaml", text);
    }
    validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: scenario.map(|_| "s.yaml".into()),
        documents: vec!["d.yaml".into()],
    })
}

fn listing(report: &Report) -> String {
    if report.problems.is_empty() {
        return "  (no problems)".to_string();
    }
    report
        .problems
        .iter()
        .map(|p| format!("  {p}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Codes of problems that stop a document from loading; these always carry
/// the parser's line.
const LOAD_CODES: &[&str] = &["invalid-value", "unknown-key", "wrong-type", "missing-key"];

/// `expected` is the exact path, or a prefix when it ends in `*`.
fn path_matches(actual: &str, expected: &str) -> bool {
    match expected.strip_suffix('*') {
        Some(prefix) => actual.starts_with(prefix),
        None => actual == expected,
    }
}

/// Whether the key path (`pools[0].labels.llm-d.ai/role`) names a value
/// actually written in `doc`, as opposed to an omitted key. Mapping keys may
/// contain dots, so every key that prefixes the rest of the path is tried.
fn is_written(doc: &str, path: &str) -> bool {
    fn walk(node: &serde_yaml::Value, rest: &str) -> Option<()> {
        if rest.is_empty() {
            return Some(());
        }
        if let Some(after) = rest.strip_prefix('[') {
            let (index, tail) = after.split_once(']')?;
            let item = node.as_sequence()?.get(index.parse::<usize>().ok()?)?;
            return walk(item, tail);
        }
        let rest = rest.strip_prefix('.').unwrap_or(rest);
        node.as_mapping()?
            .iter()
            .filter_map(|(key, value)| Some((key.as_str()?, value)))
            .filter(|(key, _)| {
                rest.strip_prefix(key)
                    .is_some_and(|tail| tail.is_empty() || tail.starts_with(['.', '[']))
            })
            .find_map(|(key, value)| walk(value, &rest[key.len()..]))
    }
    if path.is_empty() {
        return false;
    }
    serde_yaml::from_str::<serde_yaml::Value>(doc)
        .ok()
        .is_some_and(|root| walk(&root, path).is_some())
}

/// Validates the bundle and asserts every expected `(severity, code, path)`
/// is reported, located, and that validity agrees with the expectations.
/// Returns the report for further assertions.
fn check(scenario: Option<&str>, deployment: &str, expect: &[(Severity, &str, &str)]) -> Report {
    let report = validate_bundle(scenario, deployment);
    let all = listing(&report);
    assert!(
        !report.io_error,
        "no file of the bundle may be unreadable; problems:\n{all}"
    );
    for &(severity, code, path) in expect {
        let found = report
            .problems
            .iter()
            .find(|p| p.severity == severity && p.code == code && path_matches(&p.path, path));
        let Some(problem) = found else {
            panic!("expected {severity:?} [{code}] at `{path}`; found:\n{all}");
        };
        let doc = if problem.file == "s.yaml" {
            scenario.unwrap_or_default()
        } else {
            deployment
        };
        if LOAD_CODES.contains(&code) || is_written(doc, &problem.path) {
            let line = problem.line.unwrap_or_else(|| {
                panic!(
                    "`{}` is written, so [{code}] needs a line:\n{all}",
                    problem.path
                )
            });
            let lines = doc.lines().count();
            assert!(
                (1..=lines).contains(&(line as usize)),
                "[{code}] at line {line}, but {} has {lines} lines:\n{all}",
                problem.file
            );
        }
    }
    let errors_expected = expect
        .iter()
        .any(|(severity, _, _)| *severity == Severity::Error);
    assert_eq!(
        report.valid,
        !errors_expected,
        "the bundle must be {} for these expectations; problems:\n{all}",
        if errors_expected { "invalid" } else { "valid" }
    );
    report
}

/// Asserts the bundle is valid with no problem at all, not even a warning,
/// and that its deployment came out ready for the simulator.
fn assert_clean(scenario: Option<&str>, deployment: &str) {
    let report = validate_bundle(scenario, deployment);
    assert!(
        report.valid && !report.io_error && report.problems.is_empty(),
        "expected a clean bundle; found:\n{}",
        listing(&report)
    );
    assert_eq!(
        report.deployments.len(),
        1,
        "the deployment should pass every check"
    );
}

/// Runs the case called `name` from `cases`.
fn run(name: &str, cases: Vec<Case>) {
    let case = cases
        .into_iter()
        .find(|c| c.name == name)
        .expect("every generated test has a row");
    let scenario = case.scenario.as_deref();
    let has: Vec<(Severity, &str, &str)> = case
        .expect
        .iter()
        .filter_map(|e| match *e {
            Expect::Has(severity, code, path) => Some((severity, code, path)),
            Expect::Lacks(_) => None,
        })
        .collect();
    let absent: Vec<&str> = case
        .expect
        .iter()
        .filter_map(|e| match *e {
            Expect::Lacks(code) => Some(code),
            Expect::Has(..) => None,
        })
        .collect();
    if case.expect.is_empty() {
        assert_clean(scenario, &case.deployment);
        return;
    }
    let report = check(scenario, &case.deployment, &has);
    for code in absent {
        assert!(
            report.problems.iter().all(|p| p.code != code),
            "[{code}] must not be reported; found:\n{}",
            listing(&report)
        );
    }
}

// ---------------------------------------------------------------------------
// Baseline and coverage tests
// ---------------------------------------------------------------------------

/// The bundled `deployments/1p3d-ep8.yaml` is the specification's example
/// with a `router` block added (without one the specification routes with
/// the EPP's built-in configuration, which disaggregates nothing): every
/// other line, comments aside, is the example's. With `PDSIM_SHARED` set,
/// the baseline here is checked against the specification text itself.
#[test]
fn the_bundled_1p3d_is_the_specification_example_plus_a_router_block() {
    let bundled = include_str!("../../../deployments/1p3d-ep8.yaml");
    let without_router: String = bundled
        .split("\nrouter:")
        .next()
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(without_router, BASE_DEPLOYMENT);
    assert!(bundled.contains("\nrouter:\n  endpoint_picker_config: pd/epp-always-pd.yaml\n"));
    let Some(shared) = pdsim_testkit::shared(
        "the_bundled_1p3d_is_the_specification_example_plus_a_router_block",
        "the specification's example, seeds/000_430e696147164a50.txt",
    ) else {
        return;
    };
    let spec = std::fs::read_to_string(shared.join("seeds/000_430e696147164a50.txt"))
        .expect("the specification is readable");
    let start = spec
        .find("kind: Deployment\nname: 1p3d-ep8\n")
        .expect("the example");
    assert!(
        spec[start..].starts_with(BASE_DEPLOYMENT),
        "BASE_DEPLOYMENT differs from the specification's example"
    );
}

#[test]
fn base_bundle_is_clean() {
    assert_clean(base().as_deref(), BASE_DEPLOYMENT);
}

/// The colocated tensor-parallel-8 layout most field cases start from.
#[test]
fn colocated_baseline_is_clean() {
    assert_clean(base().as_deref(), &colocated(TP8, ""));
}

/// The codes among `cases`' `Has` expectations.
fn covered(cases: &[Case]) -> BTreeSet<&'static str> {
    cases
        .iter()
        .flat_map(|c| &c.expect)
        .filter_map(|e| match *e {
            Expect::Has(_, code, _) => Some(code),
            Expect::Lacks(_) => None,
        })
        .collect()
}

#[test]
fn every_rule_has_a_case() {
    let covered = covered(&rule_checks::cases());
    let missing: Vec<&str> = RULE_CODES
        .iter()
        .copied()
        .filter(|code| !covered.contains(code))
        .collect();
    assert!(
        missing.is_empty(),
        "rules without a negative case in `rule_checks`: {missing:?}"
    );
    // And no rule case expects a code that is not a rule.
    let strays: Vec<&str> = covered
        .iter()
        .copied()
        .filter(|code| !RULE_CODES.contains(code))
        .collect();
    assert!(
        strays.is_empty(),
        "`rule_checks` expects codes that are not rules: {strays:?}"
    );
}

/// String literals in a source file shaped like problem codes (`a-b`). The
/// split on `"` is enough for these files, which escape no quotes.
fn kebab_literals(source: &str) -> BTreeSet<&str> {
    source
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.contains('-')
                && s.split('-').all(|part| {
                    !part.is_empty()
                        && part
                            .chars()
                            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
                })
        })
        .collect()
}

/// Every code the field checks (`validate/deployment.rs`) and the cluster
/// checks (`validate/cluster.rs`) can emit has a case here, read from their
/// source so that a new check without a case fails.
#[test]
fn every_field_check_has_a_case() {
    // Router flag names the checks look for; not problem codes. The
    // placement search's step bound cannot be reached within the size
    // limits, so its warning has no case that validation could produce.
    const NOT_CODES: &[&str] = &["config-file", "config-text", "dp-local-fit-unverified"];
    let mut emitted = kebab_literals(include_str!("../src/validate/deployment.rs"));
    emitted.extend(kebab_literals(include_str!("../src/validate/cluster.rs")));
    emitted.extend(kebab_literals(include_str!("../src/validate/limits.rs")));
    let mut all = field_checks::cases();
    all.extend(cluster_checks::cases());
    let covered = covered(&all);
    let missing: Vec<&str> = emitted
        .into_iter()
        .filter(|code| !NOT_CODES.contains(code) && !covered.contains(code))
        .collect();
    assert!(
        missing.is_empty(),
        "field or cluster checks without a case: {missing:?}"
    );
}

/// The message of an unknown reference lists what the catalog does have.
#[test]
fn unknown_reference_lists_the_known_names() {
    let scenario = edit(&[("hardware: h200", "hardware: h900")]);
    let report = check(
        scenario.as_deref(),
        BASE_DEPLOYMENT,
        &[(Severity::Error, "unknown-reference", "cluster.hardware")],
    );
    let problem = report
        .problems
        .iter()
        .find(|p| p.code == "unknown-reference")
        .unwrap();
    assert_eq!(problem.file, "s.yaml");
    assert!(
        problem.message.contains("h900") && problem.message.contains("h200"),
        "{problem}"
    );
}

/// A located problem points at the line its key is written on.
#[test]
fn a_field_problem_points_at_its_key() {
    let doc = colocated("tp: 8, pp: 1, dp: 1, dcp: 3", "");
    let report = check(
        base().as_deref(),
        &doc,
        &[(Severity::Error, "dcp-partition", "pools[0].parallel.dcp")],
    );
    let problem = report
        .problems
        .iter()
        .find(|p| p.code == "dcp-partition")
        .unwrap();
    assert_eq!(problem.file, "d.yaml");
    assert_eq!(
        problem.line,
        Some(6),
        "the flow mapping `parallel: {{..}}` is on line 6:\n{doc}"
    );
}

/// A value beyond its limit is refused at its key's line, naming the value
/// and the limit.
#[test]
fn a_value_beyond_its_limit_names_the_key_the_line_and_the_limit() {
    let doc = deployment(&[("colocated", 1_000_000_000_000, TP8, "")], "");
    let report = check(
        base().as_deref(),
        &doc,
        &[(Severity::Error, "beyond-limit", "pools[0].nodes")],
    );
    let problem = report
        .problems
        .iter()
        .find(|p| p.code == "beyond-limit")
        .unwrap();
    assert_eq!(problem.file, "d.yaml");
    assert_eq!(problem.line, Some(5), "`nodes:` is on line 5:\n{doc}");
    assert_eq!(
        problem.message,
        format!("1000000000000 is beyond any real deployment (at most {MAX_NODES})")
    );
    let scenario = edit(&[("  nodes: 4\n", "  nodes: 1000000000000\n")]);
    let report = check(
        scenario.as_deref(),
        BASE_DEPLOYMENT,
        &[(Severity::Error, "beyond-limit", "cluster.nodes")],
    );
    let problem = report
        .problems
        .iter()
        .find(|p| p.code == "beyond-limit")
        .unwrap();
    assert_eq!((problem.file.as_str(), problem.line), ("s.yaml", Some(12)));
    // A huge float is quoted short, not as three hundred digits.
    let scenario = edit(&[(
        "  shape: chatbot\n",
        &trace("t.csv").replace(
            "mode: real}",
            "mode: real, goodput_slo_targets: {chat: {e2e_ms: 1e300}}}",
        ),
    )]);
    let report = validate_bundle(scenario.as_deref(), BASE_DEPLOYMENT);
    let problem = report
        .problems
        .iter()
        .find(|p| p.code == "beyond-limit")
        .expect("the SLO target is refused");
    assert!(problem.message.starts_with("1e300 is beyond"), "{problem}");
}

// ---------------------------------------------------------------------------
// Field checks: the deployment on its own
// ---------------------------------------------------------------------------

mod field_checks {
    use super::*;

    cases! {
        deployment_kind:
            base(), replace_once(&colocated(TP8, ""), "kind: Deployment", "kind: Deploy")
            => [err("deployment-kind", "kind")];
        /// Blank counts as empty.
        deployment_name_empty:
            base(), replace_once(&colocated(TP8, ""), "name: case", "name: \"  \"")
            => [err("deployment-name-empty", "name")];
        /// A name longer than a Kubernetes object's; 253 characters pass.
        deployment_name_long:
            base(), replace_once(&colocated(TP8, ""), "name: case", &format!("name: {}", "n".repeat(254)))
            => [err("beyond-limit", "name")];
        deployment_name_at_the_limit:
            base(), replace_once(&colocated(TP8, ""), "name: case", &format!("name: {}", "n".repeat(253)))
            => [lacks("beyond-limit")];
        scenario_name_long:
            edit(&[("name: base", &format!("name: {}", "s".repeat(254)))]), colocated(TP8, "")
            => [err("beyond-limit", "name")];
        pools_empty:
            base(), "kind: Deployment\nname: case\npools: []\n"
            => [err("pools-empty", "pools")];
        pool_role_unknown:
            base(), deployment(&[("mixed", 4, TP8, "")], "")
            => [err("pool-role-unknown", "pools[0].role")];
        pool_nodes_below_one:
            base(), deployment(&[("colocated", 0, TP8, "")], "")
            => [err("pool-nodes-below-one", "pools[0].nodes")];

        tp_below_one:
            base(), colocated("tp: 0, pp: 1, dp: 1", "")
            => [err("parallel-width-below-one", "pools[0].parallel.tp")];
        pp_below_one:
            base(), colocated("tp: 8, pp: 0, dp: 1", "")
            => [err("parallel-width-below-one", "pools[0].parallel.pp")];
        dp_below_one:
            base(), colocated("tp: 8, pp: 1, dp: -1", "")
            => [err("parallel-width-below-one", "pools[0].parallel.dp")];
        pcp_negative:
            base(), colocated("tp: 8, pp: 1, dp: 1, pcp: -1", "")
            => [err("parallel-negative", "pools[0].parallel.pcp")];
        dcp_negative:
            base(), colocated("tp: 8, pp: 1, dp: 1, dcp: -1", "")
            => [err("parallel-negative", "pools[0].parallel.dcp")];
        dp_local_negative:
            base(), colocated("tp: 8, pp: 1, dp: 1, dp_local: -1", "")
            => [err("parallel-negative", "pools[0].parallel.dp_local")];
        dp_local_exceeds_dp:
            base(), colocated("tp: 4, pp: 1, dp: 2, dp_local: 4", "")
            => [err("dp-local-exceeds-dp", "pools[0].parallel.dp_local")];

        /// pcp off: decode-context parallelism reuses the TP ranks, so dcp
        /// must divide tp.
        dcp_must_divide_tp:
            base(), colocated("tp: 8, pp: 1, dp: 1, dcp: 3", "")
            => [err("dcp-partition", "pools[0].parallel.dcp")];
        /// pcp 2: dcp must be 1, pcp (2) or tp × pcp (8). dcp 4 divides tp 4
        /// and would pass with pcp off; with pcp on it is refused.
        dcp_with_pcp_must_be_pcp_or_the_group:
            base(), colocated("tp: 4, pp: 1, dp: 1, pcp: 2, dcp: 4", "")
            => [err("dcp-partition", "pools[0].parallel.dcp")];
        /// The forms dcp may take beside pcp 2 with tp 4: pcp and tp × pcp.
        dcp_equal_to_pcp_or_the_group_partitions:
            base(), deployment(
                &[("prefill", 2, "tp: 4, pp: 1, dp: 1, pcp: 2, dcp: 2, \
                    enable_expert_parallel: true", ""),
                  ("decode", 2, "tp: 4, pp: 1, dp: 1, pcp: 2, dcp: 8, \
                    enable_expert_parallel: true", "")],
                PD_TRANSFER)
            => [lacks("dcp-partition")];

        prefill_without_decode:
            base(), deployment(&[("prefill", 4, TP8, "")], PD_TRANSFER)
            => [err("pool-roles-unpaired", "pools[0].role")];
        decode_without_prefill:
            base(), deployment(&[("decode", 4, TP8, "")], "")
            => [err("pool-roles-unpaired", "pools[0].role")];
        /// Prefill and decode are paired, so only the colocated pool beside
        /// them is wrong; it is reported at the later of the two roles.
        colocated_beside_prefill_and_decode:
            base(), deployment(
                &[("prefill", 1, EP8, ""), ("decode", 2, EP8, ""), ("colocated", 1, TP8, "")],
                PD_TRANSFER)
            => [err("pool-roles-mixed", "pools[2].role")];
        /// The key is absent, so the problem has no line of its own.
        prefill_without_pd_transfer:
            base(), base_edit(&[("pd_transfer:\n  connector: NixlConnector\n", "")])
            => [err("pd-transfer-missing", "pd_transfer")];

        block_size_negative:
            base(), colocated(TP8, "block_size: -16")
            => [err("engine-count-negative", "pools[0].engine.block_size")];
        max_num_batched_tokens_negative:
            base(), colocated(TP8, "max_num_batched_tokens: -1")
            => [err("engine-count-negative", "pools[0].engine.max_num_batched_tokens")];
        max_num_seqs_negative:
            base(), colocated(TP8, "max_num_seqs: -1")
            => [err("engine-count-negative", "pools[0].engine.max_num_seqs")];
        block_size_zero:
            base(), colocated(TP8, "block_size: 0")
            => [err("engine-count-zero", "pools[0].engine.block_size")];
        max_num_batched_tokens_zero:
            base(), colocated(TP8, "max_num_batched_tokens: 0")
            => [err("engine-count-zero", "pools[0].engine.max_num_batched_tokens")];
        max_num_seqs_zero:
            base(), colocated(TP8, "max_num_seqs: 0")
            => [err("engine-count-zero", "pools[0].engine.max_num_seqs")];
        cp_kv_cache_interleave_size_negative:
            base(), colocated(TP8, "cp_kv_cache_interleave_size: -1")
            => [err("engine-count-negative", "pools[0].engine.cp_kv_cache_interleave_size")];
        long_prefill_token_threshold_negative:
            base(), colocated(TP8, "long_prefill_token_threshold: -1")
            => [err("engine-count-negative", "pools[0].engine.long_prefill_token_threshold")];
        eplb_window_size_negative:
            base(), colocated(TP8, "eplb: {window_size: -1}")
            => [err("engine-count-negative", "pools[0].engine.eplb.window_size")];
        /// Past these bounds derived quantities stop meaning anything.
        block_size_beyond_limit:
            base(), colocated(TP8, &format!("block_size: {}", MAX_BLOCK_SIZE + 1))
            => [err("beyond-limit", "pools[0].engine.block_size")];
        cudagraph_capture_size_entry_beyond_limit:
            base(),
            colocated(TP8, &format!("cudagraph_capture_sizes: [8, {}]", MAX_BATCHED_TOKENS + 1))
            => [err("beyond-limit", "pools[0].engine.cudagraph_capture_sizes[1]")];
        /// Values beyond any real deployment are refused by key before
        /// anything is laid out or allocated for them: a pool of 10^12
        /// nodes, a tensor-parallel width no cluster holds, a million and
        /// more sequences, a context of 2^32 tokens, an exbibyte tier.
        pool_nodes_beyond_limit:
            base(), deployment(&[("colocated", 1_000_000_000_000, TP8, "")], "")
            => [err("beyond-limit", "pools[0].nodes")];
        tp_beyond_limit:
            base(), colocated(&format!("tp: {}, pp: 1, dp: 1", MAX_PARALLEL_WIDTH + 1), "")
            => [err("beyond-limit", "pools[0].parallel.tp")];
        dp_local_beyond_limit:
            base(), colocated("tp: 8, pp: 1, dp: 1, dp_local: 9223372036854775807", "")
            => [err("beyond-limit", "pools[0].parallel.dp_local")];
        max_num_seqs_beyond_limit:
            base(), colocated(TP8, &format!("max_num_seqs: {}", MAX_NUM_SEQS + 1))
            => [err("beyond-limit", "pools[0].engine.max_num_seqs")];
        max_model_len_beyond_limit:
            base(), colocated(TP8, &format!("max_model_len: {}", MAX_TOKENS * 2))
            => [err("beyond-limit", "pools[0].engine.max_model_len")];
        /// A suffixed length is checked as the count it comes to.
        max_model_len_suffixed_beyond_limit:
            base(), colocated(TP8, "max_model_len: 4T")
            => [err("beyond-limit", "pools[0].engine.max_model_len")];
        dbo_threshold_beyond_limit:
            base(), colocated(TP8, "dbo: {dbo_decode_token_threshold: 99999999999}")
            => [err("beyond-limit", "pools[0].engine.dbo.dbo_decode_token_threshold")];
        offload_tier_bytes_beyond_limit:
            base(), colocated_with(TP8, "", &offload(&[("cpu_dram", MAX_OFFLOAD_BYTES + 1)], ""))
            => [err("beyond-limit", "offload.tiers[0].bytes")];
        /// The limits sit above real hardware: large settings real
        /// deployments use (4,096 sequences, 64K batched tokens) stay
        /// within them.
        real_maxima_stay_within_the_limits:
            base(), colocated(TP8, "max_num_seqs: 4096, max_num_batched_tokens: 65536")
            => [lacks("beyond-limit")];
        /// -1 means auto and loads; below it the field check names it.
        max_model_len_below_auto:
            base(), colocated(TP8, "max_model_len: -2")
            => [err("max-model-len-below-auto", "pools[0].engine.max_model_len")];

        gpu_memory_utilization_above_one:
            base(), colocated(TP8, "gpu_memory_utilization: 1.5")
            => [err("gpu-memory-utilization-range", "pools[0].engine.gpu_memory_utilization")];
        gpu_memory_utilization_negative:
            base(), colocated(TP8, "gpu_memory_utilization: -0.1")
            => [err("gpu-memory-utilization-range", "pools[0].engine.gpu_memory_utilization")];
        gpu_memory_utilization_nan:
            base(), colocated(TP8, "gpu_memory_utilization: .nan")
            => [err("gpu-memory-utilization-range", "pools[0].engine.gpu_memory_utilization")];

        gpu_memory_utilization_infinite:
            base(), colocated(TP8, "gpu_memory_utilization: .inf")
            => [err("gpu-memory-utilization-range", "pools[0].engine.gpu_memory_utilization")];
        /// Zero means the engine's default.
        gpu_memory_utilization_zero:
            base(), colocated(TP8, "gpu_memory_utilization: 0")
            => [];

        max_cudagraph_capture_size_zero:
            base(), colocated(TP8, "max_cudagraph_capture_size: 0")
            => [err("cudagraph-capture-size-below-one",
                    "pools[0].engine.max_cudagraph_capture_size")];
        /// The problem names the offending entry of the list.
        cudagraph_capture_size_entry_zero:
            base(), colocated(TP8, "cudagraph_capture_sizes: [8, 0, 16]")
            => [err("cudagraph-capture-size-below-one",
                    "pools[0].engine.cudagraph_capture_sizes[1]")];
        cudagraph_capture_sizes_empty:
            base(), colocated(TP8, "cudagraph_capture_sizes: []")
            => [err("cudagraph-capture-sizes-empty", "pools[0].engine.cudagraph_capture_sizes")];

        allreduce_contradiction:
            base(), colocated(TP8, "disable_custom_all_reduce: true, allreduce_backend: custom")
            => [err("allreduce-contradiction", "pools[0].engine.allreduce_backend")];
        /// A warning only: the backend wins, and the bundle stays valid.
        allreduce_nccl_with_custom_enabled:
            base(), colocated(TP8, "disable_custom_all_reduce: false, allreduce_backend: nccl")
            => [warn("allreduce-nccl-with-custom-enabled", "pools[0].engine.allreduce_backend")];

        dbo_decode_threshold_negative:
            base(), colocated(TP8, "dbo: {enable_dbo: true, dbo_decode_token_threshold: -1}")
            => [err("dbo-threshold-negative", "pools[0].engine.dbo.dbo_decode_token_threshold")];
        /// Negative is refused whether or not DBO is enabled.
        dbo_prefill_threshold_negative:
            base(), colocated(TP8, "dbo: {dbo_prefill_token_threshold: -1}")
            => [err("dbo-threshold-negative", "pools[0].engine.dbo.dbo_prefill_token_threshold")];
        eplb_redundant_negative:
            base(), colocated(TP8, "eplb: {enable_eplb: true, num_redundant_experts: -1}")
            => [err("eplb-redundant-negative", "pools[0].engine.eplb.num_redundant_experts")];
        /// Only an enabled eplb's num_redundant_experts is checked.
        eplb_redundant_negative_while_disabled:
            base(), colocated(TP8, "eplb: {enable_eplb: false, num_redundant_experts: -1}")
            => [lacks("eplb-redundant-negative")];

        speculative_method_empty:
            base(), colocated(TP8, "speculative: {method: '', num_spec_tokens: 1}")
            => [err("speculative-method-empty", "pools[0].engine.speculative.method")];
        speculative_tokens_below_one:
            base(), colocated(TP8, "speculative: {method: eagle, num_spec_tokens: 0}")
            => [err("speculative-tokens-below-one", "pools[0].engine.speculative.num_spec_tokens")];

        offload_tiers_empty:
            base(), colocated_with(TP8, "", "offload: {tiers: []}\n")
            => [err("offload-tiers-empty", "offload.tiers")];
        offload_tier_unnamed:
            base(), colocated_with(TP8, "", &offload(&[("", GIB)], ""))
            => [err("offload-tier-unnamed", "offload.tiers[0].tier")];
        /// The second naming is the one reported.
        offload_tier_duplicate:
            base(),
            colocated_with(TP8, "", &offload(
                &[("cpu_dram", GIB), ("nvme_gen4", GIB), ("cpu_dram", GIB)], ""))
            => [err("offload-tier-duplicate", "offload.tiers[2].tier")];
        offload_tier_bytes_below_one:
            base(), colocated_with(TP8, "", &offload(&[("cpu_dram", 0)], ""))
            => [err("offload-tier-bytes-below-one", "offload.tiers[0].bytes")];
        offload_prefetch_negative:
            base(),
            colocated_with(TP8, "", &offload(&[("cpu_dram", GIB)], "  prefetch_depth: -1\n"))
            => [err("offload-prefetch-negative", "offload.prefetch_depth")];

        /// qwen3-30b-a3b's weights fit on one H200, so EP at width 1 is only
        /// a warning on an otherwise valid bundle.
        expert_parallel_width_one:
            model("qwen3-30b-a3b"),
            colocated("tp: 1, pp: 1, dp: 1, enable_expert_parallel: true", "")
            => [warn("expert-parallel-width-one", "pools[0].parallel.enable_expert_parallel")];
        /// The same bundle without expert parallelism is clean.
        qwen3_moe_baseline:
            model("qwen3-30b-a3b"), colocated("tp: 1, pp: 1, dp: 1", "")
            => [];

        /// The role label of a colocated pool is `prefill-decode`; the label
        /// key holds dots, and the path keeps it whole.
        pool_label_role_mismatch:
            base(), with_labels("app: vllm, llm-d.ai/role: decode")
            => [err("pool-label-role-mismatch", "pools[0].labels.llm-d.ai/role")];
        pool_label_matching_role:
            base(), with_labels("app: vllm, llm-d.ai/role: prefill-decode")
            => [];

        hybrid_load_balancing_needs_dp:
            base(), colocated("tp: 8, pp: 1, dp: 1, data_parallel_load_balancing: hybrid", "")
            => [err("load-balancing-needs-dp", "pools[0].parallel.data_parallel_load_balancing")];
        external_load_balancing_needs_dp:
            base(), colocated("tp: 8, pp: 1, dp: 1, data_parallel_load_balancing: external", "")
            => [err("load-balancing-needs-dp", "pools[0].parallel.data_parallel_load_balancing")];

        engram_thp_with_shared_memory:
            base(), colocated(TP8, "engram_config: {use_thp: true, dp_shared_memory: true}")
            => [err("engram-thp-with-shared-memory", "pools[0].engine.engram_config.use_thp")];

        router_config_path_blank:
            base(), colocated_with(TP8, "", "router:\n  endpoint_picker_config: ' '\n")
            => [err("router-path-blank", "router.endpoint_picker_config")];
        router_manifest_path_blank:
            base(), colocated_with(TP8, "", "router:\n  manifests: [epp.yaml, '']\n")
            => [err("router-path-blank", "router.manifests[1]")];
        router_config_file_missing:
            base(), colocated_with(TP8, "", "router:\n  endpoint_picker_config: missing.yaml\n")
            => [err("router-file-missing", "router.endpoint_picker_config")];
        /// `router/` holds a file, so `router` is a directory, not a file.
        router_manifest_is_a_directory:
            base(), colocated_with(TP8, "", "router:\n  manifests: [router]\n")
            => [err("router-file-missing", "router.manifests[0]")];
        /// A Helm `epp.flags` map renders to `--name=value` flags, so naming
        /// the configuration there too is caught the same way.
        router_helm_flag_map_names_the_config_twice:
            base(),
            colocated_with(TP8, "", "router:\n  endpoint_picker_config: epp.yaml\n  epp_flags:\n    pool-name: vllm\n    config-file: other.yaml\n")
            => [err("router-config-twice", "router.epp_flags[0]")];
        router_helm_flag_map_is_accepted:
            base(),
            colocated_with(TP8, "", "router:\n  endpoint_picker_config: epp.yaml\n  epp_flags:\n    pool-name: vllm\n    v: 2\n")
            => [];
        router_flag_without_dashes:
            base(), colocated_with(TP8, "", "router:\n  epp_flags: [pool-name=vllm]\n")
            => [err("router-flag-shape", "router.epp_flags[0]")];
        router_flag_name_with_a_space:
            base(),
            colocated_with(TP8, "", "router:\n  epp_flags: ['--pool-name=vllm', '--pool name=vllm']\n")
            => [err("router-flag-shape", "router.epp_flags[1]")];
        router_config_twice:
            base(), colocated_with(TP8, "", concat!(
                "router:\n",
                "  endpoint_picker_config: epp.yaml\n",
                "  epp_flags: ['--v=1', '--config-file=epp.yaml']\n",
            ))
            => [err("router-config-twice", "router.epp_flags[1]")];
        /// Every router input present and well formed.
        router_inputs_well_formed:
            base(), colocated_with(TP8, "", concat!(
                "router:\n",
                "  endpoint_picker_config: epp.yaml\n",
                "  manifests: [router/epp.yaml]\n",
                "  epp_flags: ['--pool-name=vllm', '--v=1']\n",
            ))
            => [];
    }
}

// ---------------------------------------------------------------------------
// Checks against the scenario's cluster
// ---------------------------------------------------------------------------

/// A prime about 2^40: an engine of this many ranks has no divisor to split
/// across nodes by, which keeps the placement search from deciding early.
const PRIME_WORLD: i64 = 1_099_511_627_791;

/// Twice as many nodes as the placement search has steps, so the
/// candidate node counts k = 2, 3, ... outnumber the steps.
const UNDECIDABLE_NODES: i64 = 2 * PLACEMENT_SEARCH_STEPS as i64;

/// The base cluster with `UNDECIDABLE_NODES` nodes of (world + 1) / 2 GPUs, so
/// a replica of `PRIME_WORLD` ranks must span k ≥ 2 nodes.
fn undecidable_cluster() -> Option<String> {
    edit(&[
        ("nodes: 4", &format!("nodes: {UNDECIDABLE_NODES}")),
        (
            "gpus_per_node: 8",
            &format!("gpus_per_node: {}", (PRIME_WORLD + 1) / 2),
        ),
    ])
}

/// One engine of `PRIME_WORLD` ranks over the whole undecidable cluster;
/// dp_local 1 divides any node and starts at device 0.
fn undecidable_engine() -> String {
    let parallel = format!("tp: {PRIME_WORLD}, pp: 1, dp: 1, dp_local: 1");
    deployment(&[("colocated", UNDECIDABLE_NODES, &parallel, "")], "")
}

mod cluster_checks {
    use super::*;

    cases! {
        /// A deployment lays out the whole cluster: 3 of 4 nodes is refused.
        pool_nodes_sum:
            base(), deployment(&[("colocated", 3, TP8, "")], "")
            => [err("pool-nodes-sum", "pools")];
        dp_local_divides_gpus_per_node:
            base(), colocated("tp: 1, pp: 1, dp: 3, dp_local: 3", "")
            => [err("dp-local-divides-gpus-per-node", "pools[0].parallel.dp_local")];
        /// tp × dp = 64 ranks on a pool of 32 GPUs.
        ranks_exceed_pool:
            base(), colocated("tp: 8, pp: 1, dp: 8", "")
            => [err("ranks-exceed-pool", "pools[0].parallel")];
        /// pp × tp × pcp counts ranks too: 8 × 8 = 64.
        pipeline_and_context_ranks_exceed_pool:
            base(), colocated("tp: 8, pp: 2, dp: 1, pcp: 4", "")
            => [err("ranks-exceed-pool", "pools[0].parallel")];
        /// The specification's example: 2 nodes × 8 GPUs, tp 4, dp 4; local
        /// replica 3 would start at device 12 of an 8-GPU node.
        dp_local_placement_starts_off_node:
            edit(&[("nodes: 4", "nodes: 2")]),
            deployment(&[("colocated", 2, "tp: 4, pp: 1, dp: 4, dp_local: 4", "")], "")
            => [err("dp-local-placement", "pools[0].parallel.dp_local")];
        /// A replica of 7 ranks beside a second local replica leaves one GPU
        /// per node for it, so it needs 7 nodes; the pool has 2.
        dp_local_placement_no_share_fits:
            edit(&[("nodes: 4", "nodes: 2")]),
            deployment(&[("colocated", 2, "tp: 7, pp: 1, dp: 2, dp_local: 2", "")], "")
            => [err("dp-local-placement", "pools[0].parallel.dp_local")];
        /// A replica of a prime number of ranks must span k ≥ 2 nodes with k
        /// dividing it; over two million nodes the search over k would run
        /// out of steps first. Such a cluster is beyond any real one, so it
        /// is refused by its sizes before the search runs (within the
        /// limits the search always decides: `layout.rs`,
        /// `the_placement_search_decides_within_the_limits`).
        undecidable_placement_is_beyond_the_limits:
            undecidable_cluster(), undecidable_engine()
            => [err("beyond-limit", "cluster.nodes"),
                err("beyond-limit", "cluster.gpus_per_node"),
                err("beyond-limit", "pools[0].nodes"),
                err("beyond-limit", "pools[0].parallel.tp"),
                lacks("dp-local-fit-unverified")];
        /// s3 is a catalog storage class, but not one this cluster lists.
        offload_tier_not_in_cluster:
            base(), colocated_with(TP8, "", &offload(&[("cpu_dram", GIB), ("s3", GIB)], ""))
            => [err("offload-tier-not-in-cluster", "offload.tiers[1].tier")];
        /// Without its scenario the deployment is reported, as a warning on
        /// the document as a whole, and stays valid.
        scenario_missing:
            no_scenario(), BASE_DEPLOYMENT
            => [warn("scenario-missing", "")];
    }
}

// ---------------------------------------------------------------------------
// Load errors: the document does not deserialize
// ---------------------------------------------------------------------------

mod load_errors {
    use super::*;

    cases! {
        /// Zero is neither a window nor auto.
        max_model_len_zero:
            base(), colocated(TP8, "max_model_len: 0")
            => [err("invalid-value", "pools[0].engine.max_model_len")];
        /// Binary suffixes refuse a fraction (vLLM suggests `1.5k`).
        max_model_len_fraction_with_binary_suffix:
            base(), colocated(TP8, "max_model_len: 1.5K")
            => [err("invalid-value", "pools[0].engine.max_model_len")];
        max_model_len_not_a_number:
            base(), colocated(TP8, "max_model_len: abc")
            => [err("invalid-value", "pools[0].engine.max_model_len")];
        max_model_len_too_large:
            base(), colocated(TP8, "max_model_len: 99999999999999999999T")
            => [err("invalid-value", "pools[0].engine.max_model_len")];
        /// A decimal suffix may take a fraction, but this one comes to zero.
        max_model_len_comes_to_zero:
            base(), colocated(TP8, "max_model_len: 0.0001k")
            => [err("invalid-value", "pools[0].engine.max_model_len")];
        max_model_len_plain_fraction:
            base(), colocated(TP8, "max_model_len: 4096.5")
            => [err("invalid-value", "pools[0].engine.max_model_len")];
        /// The forms that do load: a binary suffix and a decimal fraction.
        max_model_len_suffixes_load:
            base(), deployment(
                &[("prefill", 2, TP8, "max_model_len: 32K"), ("decode", 2, TP8, "max_model_len: 25.6k")],
                PD_TRANSFER)
            => [];
        /// Every document type denies unknown keys; the path is serde's, so
        /// only its prefix is pinned.
        unknown_engine_key:
            base(), colocated(TP8, "max_model_length: 4096")
            => [err("unknown-key", "pools[0].engine*")];
        wrong_type:
            base(), colocated("tp: \"eight\", pp: 1, dp: 1", "")
            => [err("wrong-type", "pools[0].parallel.tp")];
        missing_parallel:
            base(), "kind: Deployment\nname: case\npools:\n  - role: colocated\n    nodes: 4\n"
            => [err("missing-key", "pools[0]")];
    }
}

// ---------------------------------------------------------------------------
// Scenario checks a bundle depends on
// ---------------------------------------------------------------------------

/// A workload `trace` entry (under `workload:`) reading `data`.
fn trace(data: &str) -> String {
    format!(
        "  trace:\n    data: {data}\n    header: {{trace_version: 2, time_unit: us, mode: real}}\n"
    )
}

mod scenario_checks {
    use super::*;

    cases! {
        unknown_hardware:
            edit(&[("hardware: h200", "hardware: h900")]), BASE_DEPLOYMENT
            => [err("unknown-reference", "cluster.hardware")];
        model_reference_is_a_path:
            edit(&[("model: deepseek-v3", "model: ../x")]), BASE_DEPLOYMENT
            => [err("reference-not-bare", "model")];
        /// Four nodes need a fabric between them.
        fabric_missing:
            edit(&[("  fabric: ib-400g\n", "")]), BASE_DEPLOYMENT
            => [err("cluster-fabric-missing", "cluster.fabric")];
        rack_not_a_multiple_of_the_node:
            edit(&[("  gpus_per_node: 8\n", "  gpus_per_node: 8\n  gpus_per_rack: 12\n")]),
            BASE_DEPLOYMENT
            => [err("cluster-rack-multiple", "cluster.gpus_per_rack")];
        workload_shape_and_trace:
            edit(&[("  shape: chatbot\n", &format!("  shape: chatbot\n{}", trace("trace.csv")))]),
            BASE_DEPLOYMENT
            => [err("workload-binding", "workload")];
        /// A client timeout must be a positive, finite number of seconds
        /// no client would exceed.
        client_timeout_negative:
            edit(&[("  shape: chatbot\n", "  shape: chatbot\n  client_timeout_s: -5\n")]),
            BASE_DEPLOYMENT
            => [err("client-timeout-range", "workload.client_timeout_s")];
        client_timeout_zero:
            edit(&[("  shape: chatbot\n", "  shape: chatbot\n  client_timeout_s: 0\n")]),
            BASE_DEPLOYMENT
            => [err("client-timeout-range", "workload.client_timeout_s")];
        client_timeout_nan:
            edit(&[("  shape: chatbot\n", "  shape: chatbot\n  client_timeout_s: .nan\n")]),
            BASE_DEPLOYMENT
            => [err("client-timeout-range", "workload.client_timeout_s")];
        client_timeout_absurd:
            edit(&[("  shape: chatbot\n", "  shape: chatbot\n  client_timeout_s: 1e12\n")]),
            BASE_DEPLOYMENT
            => [err("client-timeout-range", "workload.client_timeout_s")];
        client_timeout_of_inference_perf_is_valid:
            edit(&[("  shape: chatbot\n", "  shape: chatbot\n  client_timeout_s: 300\n")]),
            BASE_DEPLOYMENT
            => [];
        trace_file_missing:
            edit(&[("  shape: chatbot\n", &trace("traces/missing.csv"))]),
            BASE_DEPLOYMENT
            => [err("trace-file-missing", "workload.trace.data")];
        /// A unit the BLIS schema allows but pdsim's reader refuses (the
        /// timestamp columns are microseconds): `validate` says what
        /// `run` would.
        trace_time_unit_not_read:
            edit(&[("  shape: chatbot\n", &trace("traces/missing.csv").replace("time_unit: us", "time_unit: ms"))]),
            BASE_DEPLOYMENT
            => [err("trace-file-missing", "workload.trace.data"), err("trace-time-unit", "workload.trace.header.time_unit")];
        /// A cluster of 10^12 nodes, or of a million GPUs per node, is
        /// refused before any layout is derived from it.
        cluster_nodes_beyond_limit:
            edit(&[("  nodes: 4\n", "  nodes: 1000000000000\n")]), BASE_DEPLOYMENT
            => [err("beyond-limit", "cluster.nodes")];
        cluster_gpus_per_node_beyond_limit:
            edit(&[("  gpus_per_node: 8\n", "  gpus_per_node: 1048576\n")]), BASE_DEPLOYMENT
            => [err("beyond-limit", "cluster.gpus_per_node")];
        /// Each factor is within its limit, the product is not.
        cluster_gpus_beyond_limit:
            edit(&[("  nodes: 4\n", &format!("  nodes: {MAX_NODES}\n")),
                   ("  gpus_per_node: 8\n", "  gpus_per_node: 1024\n")]),
            BASE_DEPLOYMENT
            => [err("beyond-limit", "cluster.nodes")];
        /// 65,536 nodes of 8 GPUs (524,288) is twice any cluster built:
        /// refused on the total although each factor is within its limit.
        cluster_of_half_a_million_gpus_beyond_limit:
            edit(&[("  nodes: 4\n", "  nodes: 65536\n")]), BASE_DEPLOYMENT
            => [err("beyond-limit", "cluster.nodes")];
        /// 2,048 nodes of 8 GPUs is a real cluster: no limit applies (the
        /// deployment, laid out for 4 nodes, is refused for that alone).
        cluster_of_2048_nodes_is_within_the_limits:
            edit(&[("  nodes: 4\n", "  nodes: 2048\n")]), BASE_DEPLOYMENT
            => [err("pool-nodes-sum", "pools"), lacks("beyond-limit")];
        slo_target_beyond_limit:
            edit(&[("  shape: chatbot\n", &trace("traces/missing.csv").replace(
                "mode: real}", "mode: real, goodput_slo_targets: {chat: {ttft_ms: 1e300}}}"))]),
            BASE_DEPLOYMENT
            => [err("trace-file-missing", "workload.trace.data"),
                err("beyond-limit", "workload.trace.header.goodput_slo_targets.chat.ttft_ms")];
        /// No rules pack: nothing resolves the engine's settings, so `run`
        /// could not build the deployment; `validate` says so as an error
        /// on the scenario's engine_version.
        engine_version_unknown:
            release("9.9.9"), BASE_DEPLOYMENT
            => [err("engine-version-known", "engine_version")];
    }
}

// ---------------------------------------------------------------------------
// Rules packs
// ---------------------------------------------------------------------------

/// MiniMax-M2.7 on Rebel100 NPUs served by vllm-rbln.
fn rbln() -> Option<String> {
    edit(&[
        ("model: deepseek-v3", "model: minimax-m2.7"),
        (
            "engine_version: \"0.31.0\"",
            "engine_version: \"vllm-rbln-0.12.0\"",
        ),
        ("hardware: h200", "hardware: rebel100"),
        ("fabric: ib-400g", "fabric: roce-200g"),
    ])
}

/// One colocated pool with an offload tier and the given offload extras.
fn with_offload(extra: &str) -> String {
    colocated_with(TP8, "", &offload(&[("cpu_dram", GIB)], extra))
}

/// DBO on, both thresholds stated, the decode one below two microbatches.
const DBO_DECODE_1: &str =
    "dbo: {enable_dbo: true, dbo_decode_token_threshold: 1, dbo_prefill_token_threshold: 512}";

/// Tensor-parallel 2 inside data-parallel 4, with expert parallelism.
const TP2_DP4_EP: &str = "tp: 2, pp: 1, dp: 4, enable_expert_parallel: true";

/// Eight GPUs per engine with decode-context parallelism over all of them.
const DCP8: &str = "tp: 8, pp: 1, dp: 1, dcp: 8";

/// The base deployment with EPLB on in the prefill pool (EP width 8).
fn with_eplb(redundant: i64) -> String {
    let batched = "      max_num_batched_tokens: 16384\n";
    let eplb = format!("      eplb: {{enable_eplb: true, num_redundant_experts: {redundant}}}\n");
    base_edit(&[(batched, &format!("{batched}{eplb}"))])
}

mod rule_checks {
    use super::*;

    cases! {
        // Names a release knows. Hard sets are errors, soft sets warnings.
        all2all_backend_unknown:
            base(), colocated(TP8, "all2all_backend: carrier_pigeon")
            => [err("all2all-backend-known", "pools[0].engine.all2all_backend")];
        allreduce_backend_unknown:
            base(), colocated(TP8, "allreduce_backend: ring")
            => [err("allreduce-backend-known", "pools[0].engine.allreduce_backend")];
        cudagraph_mode_unknown:
            base(), colocated(TP8, "cudagraph_mode: ALWAYS")
            => [err("enum-values-known", "pools[0].engine.cudagraph_mode")];
        scheduling_policy_unknown:
            base(), colocated(TP8, "scheduling_policy: lifo")
            => [err("enum-values-known", "pools[0].engine.scheduling_policy")];
        frontend_unknown:
            base(), colocated(TP8, "frontend: go")
            => [err("enum-values-known", "pools[0].engine.frontend")];
        load_balancing_mode_unknown:
            base(), colocated(&format!("{DP8_EP}, data_parallel_load_balancing: round_robin"), "")
            => [err("enum-values-known", "pools[0].parallel.data_parallel_load_balancing")];
        speculative_method_unknown:
            base(), colocated(TP8, "speculative: {method: lookahead, num_spec_tokens: 2}")
            => [err("speculative-method-known", "pools[0].engine.speculative.method")];
        dcp_comm_backend_unknown:
            base(), colocated(DCP8, "dcp_comm_backend: ring")
            => [err("dcp-comm-backend-known", "pools[0].engine.dcp_comm_backend")];
        offload_spec_unknown:
            base(), with_offload("  spec: MagicOffloadingSpec\n")
            => [err("offload-spec-known", "offload.spec")];
        quantization_unknown:
            base(), colocated(TP8, "quantization: int3")
            => [warn("quantization-known", "pools[0].engine.quantization")];
        pd_connector_unknown:
            base(), base_edit(&[("connector: NixlConnector", "connector: PigeonConnector")])
            => [warn("connector-known", "pd_transfer.connector")];
        offload_connector_unknown:
            base(), with_offload("  connector: RsyncConnector\n")
            => [warn("connector-known", "offload.connector")];
        eviction_policy_unknown:
            base(), with_offload("  eviction_policy: fifo\n")
            => [warn("eviction-policy-known", "offload.eviction_policy")];
        /// vLLM 0.31.0 refuses a name outside `MoEBackend`
        /// (`vllm/config/kernel.py`; argparse `choices` in
        /// `vllm/engine/arg_utils.py`), so pdsim refuses it too.
        moe_backend_unknown:
            base(), colocated(TP8, "moe_backend: warp_speed")
            => [err("moe-backend-known", "pools[0].engine.moe_backend")];
        /// 0.29.0's `MoEBackend` is as closed (and has no `rdna3`).
        moe_backend_unknown_on_0_29:
            release("0.29.0"), colocated(TP8, "moe_backend: rdna3")
            => [err("moe-backend-known", "pools[0].engine.moe_backend")];
        /// vLLM lower-cases the name and turns `-` into `_` before it
        /// checks it, so `Deep-GEMM` is `deep_gemm`.
        moe_backend_spelled_as_vllm_reads_it:
            base(), colocated(TP8, "moe_backend: Deep-GEMM")
            => [lacks("moe-backend-known")];
        /// The same reading finds a mega-MoE backend however it is spelled.
        mega_moe_spelled_with_hyphens_without_expert_parallel:
            base(), colocated(TP8, "moe_backend: DEEP-GEMM-MEGA-MOE")
            => [lacks("moe-backend-known"),
                err("mega-moe-needs-expert-parallel", "pools[0].engine.moe_backend")];
        /// vllm-rbln 0.12.0 builds on vLLM 0.30.0 (its wheel requires
        /// `vllm==0.30.0+cpu`), whose `MoEBackend` is as closed as 0.31.0's:
        /// an unknown name is refused, a known one passes.
        moe_backend_unknown_on_rbln:
            rbln(), colocated("tp: 1, pp: 4, dp: 1", "cache_dtype: fp8, moe_backend: warp_speed")
            => [err("moe-backend-known", "pools[0].engine.moe_backend"),
                lacks("key-unsupported-by-release")];
        moe_backend_known_on_rbln:
            rbln(), colocated("tp: 1, pp: 4, dp: 1",
                "cache_dtype: fp8, moe_backend: triton, allreduce_backend: nccl")
            => [lacks("moe-backend-known"), lacks("key-unsupported-by-release")];
        /// A mega-MoE backend exists only under expert parallelism.
        mega_moe_without_expert_parallel:
            base(), colocated(TP8, "moe_backend: deep_gemm_mega_moe")
            => [err("mega-moe-needs-expert-parallel", "pools[0].engine.moe_backend")];
        /// Every soft and hard name above, spelled as the release spells it.
        known_names_are_clean:
            base(), colocated_with(DCP8,
                "all2all_backend: naive, allreduce_backend: custom, cudagraph_mode: PIECEWISE, \
                 scheduling_policy: priority, frontend: rust, quantization: fp8, \
                 moe_backend: triton, dcp_comm_backend: a2a, \
                 speculative: {method: deepseek_mtp, num_spec_tokens: 1}",
                &offload(&[("cpu_dram", GIB)], concat!(
                    "  spec: CPUOffloadingSpec\n",
                    "  connector: OffloadingConnector\n",
                    "  eviction_policy: arc\n",
                )))
            => [];

        /// DeepSeek-V3 is MLA, so blocks hold 64 tokens; an interleave of 48
        /// does not tile one, and no connector is there to repack KV.
        cp_kv_cache_interleave_does_not_tile_the_block:
            base(), colocated(DCP8, "cp_kv_cache_interleave_size: 48")
            => [err("cp-kv-cache-interleave-fits-block",
                    "pools[0].engine.cp_kv_cache_interleave_size")];
        cp_kv_cache_interleave_larger_than_the_block:
            base(), colocated(DCP8, "cp_kv_cache_interleave_size: 128")
            => [err("cp-kv-cache-interleave-fits-block",
                    "pools[0].engine.cp_kv_cache_interleave_size")];
        cp_kv_cache_interleave_tiles_the_block:
            base(), colocated(DCP8, "cp_kv_cache_interleave_size: 16")
            => [];
        /// With a KV connector the interleave need not tile a block.
        cp_kv_cache_interleave_with_a_connector:
            base(), colocated_with(DCP8, "cp_kv_cache_interleave_size: 48",
                &offload(&[("cpu_dram", GIB)], "  connector: OffloadingConnector\n"))
            => [lacks("cp-kv-cache-interleave-fits-block")];

        /// 8 × 2 × 2 = 32 ranks fill the cluster; 0.29.0 refuses pcp with dp.
        pcp_with_dp_on_0_29:
            release("0.29.0"), colocated("tp: 8, pp: 1, dp: 2, pcp: 2", "")
            => [err("pcp-excludes-data-parallelism", "pools[0].parallel.pcp")];
        pcp_with_dp_on_0_31:
            base(), colocated("tp: 8, pp: 1, dp: 2, pcp: 2", "")
            => [lacks("pcp-excludes-data-parallelism")];
        /// vllm-rbln refuses pp > 1 beside dp > 1; EP over the 256 experts
        /// keeps MiniMax-M2.7's weights within a Rebel100.
        pp_with_dp_on_rbln:
            rbln(),
            colocated("tp: 1, pp: 2, dp: 2, enable_expert_parallel: true", "cache_dtype: fp8")
            => [err("pp-excludes-data-parallelism", "pools[0].parallel.pp")];
        /// vllm-rbln, like 0.29.0, also refuses pcp beside dp.
        pcp_with_dp_on_rbln:
            rbln(),
            colocated("tp: 1, pp: 1, dp: 2, pcp: 2, enable_expert_parallel: true",
                      "cache_dtype: fp8")
            => [err("pcp-excludes-data-parallelism", "pools[0].parallel.pcp")];
        /// Prefill's layout from `deployments/rebel100-4p4d.yaml`: PP4, DP1.
        /// Its only problem: vllm-rbln's KV capacity is known only as the
        /// estimate made before the device resizes it (dynamic KV).
        rbln_baseline:
            rbln(), colocated("tp: 1, pp: 4, dp: 1", "cache_dtype: fp8")
            => [warn("kv-capacity-is-rbln-pre-resize-estimate", "pools[0].engine")];
        /// Upstream vLLM's capacity comes from its own profile formula.
        kv_capacity_of_upstream_vllm_is_not_flagged:
            base(), colocated(TP8, "")
            => [lacks("kv-capacity-is-rbln-pre-resize-estimate")];
        pp_with_dp_on_0_31:
            model("minimax-m2.7"),
            colocated("tp: 1, pp: 2, dp: 2, enable_expert_parallel: true", "")
            => [lacks("pp-excludes-data-parallelism")];

        /// EP width 8 must divide 256 experts + 3 redundant under EPLB.
        expert_divisibility_under_eplb:
            base(), with_eplb(3)
            => [err("expert-divisibility-under-eplb",
                    "pools[0].engine.eplb.num_redundant_experts")];
        expert_divisibility_under_eplb_holds:
            base(), with_eplb(8)
            => [];
        /// Mixtral's 8 experts over EP width tp × dp = 3 split 3/3/2.
        expert_imbalance_uneven:
            model("mixtral-8x7b"),
            colocated("tp: 1, pp: 1, dp: 3, enable_expert_parallel: true", "")
            => [warn("expert-imbalance-without-eplb", "pools[0].parallel.enable_expert_parallel")];
        /// EP width tp × pcp × dp = 2 × 2 × 4 = 16 exceeds Mixtral's 8 experts.
        expert_imbalance_more_ranks_than_experts:
            model("mixtral-8x7b"),
            colocated("tp: 2, pp: 1, dp: 4, pcp: 2, enable_expert_parallel: true", "")
            => [err("expert-imbalance-without-eplb", "pools[0].parallel.enable_expert_parallel")];
        mixtral_even_split_is_clean:
            model("mixtral-8x7b"),
            colocated("tp: 1, pp: 1, dp: 4, enable_expert_parallel: true", "")
            => [];

        /// The custom kernel runs at tp 2, 4, 6, 8 or 16; at tp 3 the
        /// all-reduce falls back to NCCL. Llama-3.1-8B fits at any tp.
        custom_allreduce_unreachable_at_tp3:
            model("llama-3.1-8b"), colocated("tp: 3, pp: 1, dp: 1", "")
            => [warn("custom-allreduce-reachable", "pools[0].parallel.tp")];
        llama_baseline:
            model("llama-3.1-8b"), colocated("tp: 2, pp: 1, dp: 1", "")
            => [];
        /// No catalog model has recurrent layers, so any mamba key is moot.
        mamba_cache_mode_without_recurrent_layers:
            base(), colocated(TP8, "mamba_cache_mode: align")
            => [warn("mamba-cache-mode-matches-model", "pools[0].engine")];
        cascade_attention_opted_in:
            base(), colocated(TP8, "disable_cascade_attn: false")
            => [warn("cascade-attention-is-opt-in", "pools[0].engine.disable_cascade_attn")];
        dbo_threshold_left_to_the_default:
            base(), colocated(TP8, "dbo: {enable_dbo: true, dbo_prefill_token_threshold: 512}")
            => [warn("dbo-thresholds-stated-when-enabled", "pools[0].engine.dbo")];
        /// With DBO on, 0.31.0 refuses a threshold below the two microbatches.
        dbo_threshold_below_microbatches_on_0_31:
            base(), colocated(TP8, DBO_DECODE_1)
            => [err("dbo-threshold-below-microbatches",
                    "pools[0].engine.dbo.dbo_decode_token_threshold")];
        dbo_threshold_zero_on_0_31:
            base(),
            colocated(TP8, "dbo: {enable_dbo: true, dbo_decode_token_threshold: 32, \
                            dbo_prefill_token_threshold: 0}")
            => [err("dbo-threshold-below-microbatches",
                    "pools[0].engine.dbo.dbo_prefill_token_threshold")];
        /// 0.29.0 accepts any threshold that is not negative.
        dbo_threshold_below_microbatches_on_0_29:
            release("0.29.0"), colocated(TP8, DBO_DECODE_1)
            => [lacks("dbo-threshold-below-microbatches")];
        /// tp 2 × dp 4 with EP and a DeepEP backend: the MoE input is split
        /// across the TP ranks.
        sequence_parallel_moe_implied:
            base(), colocated(TP2_DP4_EP, "all2all_backend: deepep_high_throughput")
            => [warn("sequence-parallel-moe-implied", "pools[0].engine.all2all_backend")];
        /// pplx handles duplicate tokens; no sequence parallelism.
        sequence_parallel_moe_not_with_pplx:
            base(), colocated(TP2_DP4_EP, "all2all_backend: pplx")
            => [];

        long_prefill_above_max_model_len:
            base(), colocated(TP8, "long_prefill_token_threshold: 8192, max_model_len: 4096")
            => [err("long-prefill-above-max-model-len",
                    "pools[0].engine.long_prefill_token_threshold")];
        /// Omitted, max_model_len is the model's whole window (163,840 for
        /// DeepSeek-V3), and the engine compares the threshold with that.
        long_prefill_above_the_models_window:
            base(), colocated(TP8, "long_prefill_token_threshold: 200000")
            => [err("long-prefill-above-max-model-len",
                    "pools[0].engine.long_prefill_token_threshold")];
        /// Sequence-parallel MoE needs expert parallelism: tp 2 × dp 4
        /// without it keeps the all-reduce.
        sequence_parallel_moe_needs_expert_parallel:
            model("qwen3-30b-a3b"),
            colocated("tp: 2, pp: 1, dp: 4", "all2all_backend: deepep_high_throughput")
            => [lacks("sequence-parallel-moe-implied")];
        /// An unknown cache dtype is named once, not also as missing memory.
        unknown_cache_dtype_is_not_a_memory_problem:
            base(), colocated(TP8, "cache_dtype: fp3")
            => [err("enum-values-known", "pools[0].engine.cache_dtype"),
                lacks("weights-exceed-memory")];
        swa_bounded_replay_on_0_29:
            release("0.29.0"), colocated(TP8, "swa_bounded_replay: true")
            => [err("swa-bounded-replay-unsupported", "pools[0].engine.swa_bounded_replay")];
        /// 0.31.0 has the flag, but only DeepSeek-V4.1 reads it.
        swa_bounded_replay_on_0_31:
            base(), colocated(TP8, "swa_bounded_replay: false")
            => [warn("swa-bounded-replay-ignored", "pools[0].engine.swa_bounded_replay")];
        engram_config_on_0_29:
            release("0.29.0"), colocated(TP8, "engram_config: {cpu_offload: true}")
            => [err("engram-config-unsupported", "pools[0].engine.engram_config")];
        engram_config_on_0_31_without_engram:
            base(), colocated(TP8, "engram_config: {cpu_offload: true}")
            => [err("engram-config-without-engram", "pools[0].engine.engram_config")];

        /// vLLM 0.15.1 has no --moe-backend, --dcp-comm-backend or
        /// --dcp-q-replicate flag.
        moe_backend_on_0_15:
            release("0.15.1"), colocated(TP8, "moe_backend: triton")
            => [err("key-unsupported-by-release", "pools[0].engine.moe_backend")];
        /// `allreduce_backend` is the deployment's statement of
        /// disable_custom_all_reduce, which 0.15.1 has (as 0.29.0 and
        /// 0.31.0, none of which has an --allreduce-backend flag), so it is
        /// taken, not refused; a name outside custom/nccl is an error.
        allreduce_backend_on_0_15:
            release("0.15.1"), colocated(TP8, "allreduce_backend: nccl")
            => [lacks("key-unsupported-by-release")];
        allreduce_backend_unknown_on_0_15:
            release("0.15.1"), colocated(TP8, "allreduce_backend: symm_mem")
            => [err("allreduce-backend-known", "pools[0].engine.allreduce_backend")];
        dcp_keys_on_0_15:
            release("0.15.1"), colocated(DCP8, "dcp_comm_backend: a2a, dcp_q_replicate: true")
            => [err("key-unsupported-by-release", "pools[0].engine.dcp_comm_backend"),
                err("key-unsupported-by-release", "pools[0].engine.dcp_q_replicate")];
        /// The same keys are flags of 0.31.0.
        moe_backend_on_0_31:
            base(), colocated(TP8, "moe_backend: triton, allreduce_backend: nccl")
            => [];
        /// No 0.15.1 attention backend supports prefill context parallelism;
        /// its refusal replaces 0.29.0's pcp-with-dp rule.
        pcp_on_0_15:
            release("0.15.1"), colocated("tp: 8, pp: 1, dp: 2, pcp: 2", "")
            => [err("key-unsupported-by-release", "pools[0].parallel.pcp"),
                lacks("pcp-excludes-data-parallelism")];
        /// 0.15.1 has no Rust frontend.
        rust_frontend_on_0_15:
            release("0.15.1"), colocated(TP8, "frontend: rust")
            => [err("enum-values-known", "pools[0].engine.frontend")];
        /// 0.15.1 checks the threshold against max_model_len only with
        /// concurrent partial prefills, which it refuses; it accepts it.
        long_prefill_above_max_model_len_on_0_15:
            release("0.15.1"),
            colocated(TP8, "long_prefill_token_threshold: 8192, max_model_len: 4096")
            => [];
        /// Cascade attention is on by default in 0.15.1: stating it is no
        /// opt-in.
        cascade_attention_stated_on_0_15:
            release("0.15.1"), colocated(TP8, "disable_cascade_attn: false")
            => [];

        /// External load balancing is for MoE models; Llama-3.1-8B is dense.
        external_load_balancing_on_a_dense_model:
            model("llama-3.1-8b"),
            colocated("tp: 1, pp: 1, dp: 8, data_parallel_load_balancing: external", "")
            => [err("load-balancing-external-needs-experts",
                    "pools[0].parallel.data_parallel_load_balancing")];
        external_load_balancing_on_an_moe_model:
            base(), colocated(&format!("{DP8_EP}, data_parallel_load_balancing: external"), "")
            => [];
        hybrid_load_balancing_without_dp_local:
            base(), colocated(&format!("{DP8_EP}, data_parallel_load_balancing: hybrid"), "")
            => [err("load-balancing-hybrid-needs-dp-local",
                    "pools[0].parallel.data_parallel_load_balancing")];
        /// dp_local = dp: every rank on one node, so hybrid runs as internal.
        hybrid_load_balancing_on_one_node:
            base(), colocated(&format!("{EP8}, data_parallel_load_balancing: hybrid"), "")
            => [warn("load-balancing-hybrid-resolved",
                     "pools[0].parallel.data_parallel_load_balancing")];
        /// dp 16 over two nodes of 8: one API server per node.
        hybrid_load_balancing_across_nodes:
            base(),
            colocated("tp: 1, pp: 1, dp: 16, dp_local: 8, enable_expert_parallel: true, \
                       data_parallel_load_balancing: hybrid", "")
            => [];

        /// 16384 exceeds max_num_batched_tokens and is dropped, so the
        /// largest size kept is 8, not the stated 256.
        cudagraph_capture_pair_mismatch:
            base(),
            colocated(TP8, "max_num_batched_tokens: 8192, max_cudagraph_capture_size: 256, \
                            cudagraph_capture_sizes: [1, 2, 4, 8, 16384]")
            => [err("cudagraph-capture-pair-mismatch",
                    "pools[0].engine.max_cudagraph_capture_size")];
        cudagraph_capture_pair_agrees_after_dropping:
            base(),
            colocated(TP8, "max_num_batched_tokens: 8192, max_cudagraph_capture_size: 8, \
                            cudagraph_capture_sizes: [1, 2, 4, 8, 16384]")
            => [];
        batched_tokens_below_max_num_seqs:
            base(), colocated(TP8, "max_num_batched_tokens: 128, max_num_seqs: 256")
            => [err("batched-tokens-below-max-num-seqs", "pools[0].engine.max_num_batched_tokens")];
        /// Llama-3.1-8B's window is 131072 tokens.
        max_model_len_exceeds_model:
            model("llama-3.1-8b"), colocated("tp: 1, pp: 1, dp: 1", "max_model_len: 200000")
            => [err("max-model-len-exceeds-model", "pools[0].engine.max_model_len")];

        /// Without EP every rank of tp 1 × dp 8 loads all of DeepSeek-V3's
        /// ~671 GB of fp8 weights; an H200 has 141 GiB.
        weights_exceed_memory:
            base(), colocated("tp: 1, pp: 1, dp: 8", "")
            => [err("weights-exceed-memory", "pools[0].parallel")];
        /// 16% of an H200 leaves a few GiB beside Llama-3.1-8B's 16 GB of
        /// weights: room for tens of thousands of tokens, not the model's
        /// whole 131072-token window, which an omitted max_model_len asks for.
        kv_capacity_below_the_model_window:
            model("llama-3.1-8b"), colocated("tp: 1, pp: 1, dp: 1", "gpu_memory_utilization: 0.16")
            => [err("kv-capacity-below-max-model-len", "pools[0].engine")];
        kv_capacity_below_a_stated_max_model_len:
            model("llama-3.1-8b"),
            colocated("tp: 1, pp: 1, dp: 1", "gpu_memory_utilization: 0.16, max_model_len: 100000")
            => [err("kv-capacity-below-max-model-len", "pools[0].engine.max_model_len")];
        /// `auto` fits the window to what is left instead.
        kv_capacity_with_auto_max_model_len:
            model("llama-3.1-8b"),
            colocated("tp: 1, pp: 1, dp: 1", "gpu_memory_utilization: 0.16, max_model_len: auto")
            => [];
    }
}

/// A CoefficientSet given as a file is checked on its own, as the registry
/// validator does: units, methods and ci95 must hold.
#[test]
fn a_coefficient_set_file_is_checked() {
    let set = "kind: CoefficientSet\nname: mine\ncoefficients:\n  - gemm_eps_max_bf16:\n      value: 0.9\n      units: furlongs\n      method: measured\n      fitted: true\n      ci95: [0.1, 0.2]\n      scope: {hardware: [h200]}\n";
    let files = MemoryFiles::new().with("c.yaml", set);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: None,
        documents: vec!["c.yaml".into()],
    });
    let codes: Vec<(&str, &str)> = report
        .problems
        .iter()
        .map(|p| (p.code.as_str(), p.path.as_str()))
        .collect();
    assert!(
        codes.contains(&(
            "coefficient-units",
            "coefficients[0].gemm_eps_max_bf16.units"
        )),
        "{codes:?}"
    );
    assert!(
        codes.contains(&("coefficient-ci95", "coefficients[0].gemm_eps_max_bf16.ci95")),
        "{codes:?}"
    );
    assert!(!report.valid);
}

/// An entry pdsim reads by no name is refused at its line, a typo with the
/// name it is likely to mean, a name of the registry's attention set
/// plainly; read names, collective curves and drafter acceptances pass.
#[test]
fn a_coefficient_pdsim_never_reads_is_refused_by_name() {
    let entry = |name: &str, units: &str| {
        format!(
            "  - {name}:\n      value: 0.5\n      units: {units}\n      method: measured\n      fitted: true\n      scope: {{}}\n"
        )
    };
    let set = format!(
        "kind: CoefficientSet\nname: mine\ncoefficients:\n{}{}{}{}{}",
        entry("hbm_derate", "dimensionless"),
        entry("hbm_derat", "dimensionless"),
        entry("attention_decode_rate", "bytes_per_us"),
        entry(
            "collective_floor_all_gather_fp16_4rank_h200",
            "us_per_transfer"
        ),
        entry("spec_acceptance_eagle3_pos2", "dimensionless"),
    );
    let files = MemoryFiles::new().with("c.yaml", &set);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: None,
        documents: vec!["c.yaml".into()],
    });
    let unread: Vec<(&str, Option<u32>, &str)> = report
        .problems
        .iter()
        .filter(|p| p.code == "coefficient-unread")
        .map(|p| (p.path.as_str(), p.line, p.message.as_str()))
        .collect();
    assert_eq!(unread.len(), 2, "{unread:?}");
    assert_eq!(unread[0].0, "coefficients[1].hbm_derat");
    assert_eq!(unread[0].1, Some(10), "{unread:?}");
    assert!(
        unread[0].2.contains("did you mean `hbm_derate`?"),
        "{unread:?}"
    );
    assert_eq!(unread[1].0, "coefficients[2].attention_decode_rate");
    assert!(!unread[1].2.contains("did you mean"), "{unread:?}");
    assert!(!report.valid);
}

/// A coefficient set given as a file loads as the catalog loads it: its
/// top-level `_comment` keys are dropped, as in the built-in sets.
#[test]
fn a_coefficient_set_file_may_carry_comments_as_in_the_catalog() {
    let set = "_comment: measured on our cluster\nkind: CoefficientSet\nname: mine\ncoefficients:\n  - host_admission_per_token:\n      value: 0.35\n      units: us_per_token\n      method: assumed\n      fitted: false\n      rationale: r\n";
    let files = MemoryFiles::new().with("c.yaml", set);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: None,
        documents: vec!["c.yaml".into()],
    });
    assert!(
        !report.problems.iter().any(|p| p.code == "unknown-key"),
        "{:?}",
        report.problems
    );
}

/// Catalog entries in a user's folder are held to the same limits: a chip
/// with a petabyte of memory and a workload shape of trillion-token prompts
/// are refused in their own files, at their keys.
#[test]
fn catalog_entries_beyond_the_limits_are_refused_in_their_files() {
    let chip = "Provenance: derived\nTFlopsPeak: 989.5\nBwPeakTBs: 4.8\nMemoryGiB: 1.0e9\nIntraNodeBwGBps: 450\nSMCount: 132\n";
    let shape = "prefix_tokens: 0\nprompt:\n  tokens: 1.0e12\n  tokens_min: 1\noutput:\n  tokens: 256\n  tokens_max: 99999999999\n";
    let scenario = edit(&[
        ("hardware: h200", "hardware: huge"),
        ("shape: chatbot", "shape: endless"),
    ])
    .unwrap();
    let files = MemoryFiles::new()
        .with("s.yaml", &scenario)
        .with("d.yaml", BASE_DEPLOYMENT)
        .with("cat/hardware/huge.yaml", chip)
        .with("cat/workloads/endless.yaml", shape);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec!["cat".into()],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    let all = listing(&report);
    let found = |file: &str, path: &str, line: u32| {
        report.problems.iter().any(|p| {
            p.code == "beyond-limit"
                && p.file.ends_with(file)
                && p.path == path
                && p.line == Some(line)
        })
    };
    assert!(found("huge.yaml", "MemoryGiB", 4), "{all}");
    assert!(found("endless.yaml", "prompt.tokens", 3), "{all}");
    assert!(found("endless.yaml", "output.tokens_max", 7), "{all}");
    assert!(!report.valid, "{all}");
}

/// A chip, fabric or storage class whose rate lies outside the span of
/// real devices (a typo, a value in another unit) is refused at its key,
/// in its own file: a millionth of a TB/s of memory bandwidth would make
/// each decode step take hours and the run simulate for years.
#[test]
fn catalog_rates_outside_real_devices_are_refused_at_their_keys() {
    let chip = "Provenance: derived\nTFlopsPeak: 989.5\nBwPeakTBs: 0.000001\nMemoryGiB: 141\nIntraNodeBwGBps: 1.0e-12\nSMCount: 132\nHostLinkGBps: 1.0e9\n";
    let fabric = "Provenance: derived\nInterNodeBwGBps: 1.0e-12\n";
    let scenario = edit(&[
        ("hardware: h200", "hardware: slow"),
        ("fabric: ib-400g", "fabric: slow"),
    ])
    .unwrap();
    let files = MemoryFiles::new()
        .with("s.yaml", &scenario)
        .with("d.yaml", BASE_DEPLOYMENT)
        .with("cat/hardware/slow.yaml", chip)
        .with("cat/networks/slow.yaml", fabric);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec!["cat".into()],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    let all = listing(&report);
    let found = |file: &str, path: &str, line: u32| {
        report.problems.iter().any(|p| {
            p.code == "catalog-value-range"
                && p.file.ends_with(file)
                && p.path == path
                && p.line == Some(line)
                && p.message.contains("span of real devices")
        })
    };
    assert!(found("slow.yaml", "BwPeakTBs", 3), "{all}");
    assert!(found("slow.yaml", "IntraNodeBwGBps", 5), "{all}");
    assert!(found("slow.yaml", "HostLinkGBps", 7), "{all}");
    assert!(found("slow.yaml", "InterNodeBwGBps", 2), "{all}");
    assert!(!report.valid, "{all}");
}

/// A model whose context window is missing (every request would be
/// refused as too long) or whose checkpoint dtype is unknown (it would be
/// priced as bfloat16) is refused in its own file, at the key.
#[test]
fn a_model_without_a_window_or_with_an_unknown_dtype_is_refused_at_the_key() {
    let llama = include_str!("../catalog/models/llama-3.1-8b.yaml");
    let windowless = replace_once(llama, "max_position_embeddings: 131072\n", "");
    let int8 = replace_once(llama, "torch_dtype: bfloat16", "torch_dtype: int8");
    for (model, text, key) in [
        ("windowless", &windowless, "max_position_embeddings"),
        ("int8", &int8, "torch_dtype"),
    ] {
        let scenario = edit(&[("model: deepseek-v3", &format!("model: {model}"))]).unwrap();
        let files = MemoryFiles::new()
            .with("s.yaml", &scenario)
            .with("d.yaml", &colocated("tp: 1, pp: 1, dp: 1", ""))
            .with(&format!("cat/models/{model}.yaml"), text);
        let report = validate(&Request {
            files: &files,
            catalog_dirs: vec!["cat".into()],
            scenario: Some("s.yaml".into()),
            documents: vec!["d.yaml".into()],
        });
        let all = listing(&report);
        assert!(
            report
                .problems
                .iter()
                .any(|p| p.code == "model-config-invalid"
                    && p.file.ends_with(&format!("{model}.yaml"))
                    && p.path == key),
            "{all}"
        );
        assert!(!report.valid, "{all}");
    }
}

/// What the resolution derives is held to the limits too: a model of a
/// trillion-token window, and a chip whose memory holds more KV blocks than
/// a block pool can number, are refused at the pool they would size.
#[test]
fn derived_sizes_beyond_the_limits_are_refused_at_the_pool() {
    let llama = include_str!("../catalog/models/llama-3.1-8b.yaml");
    let endless = replace_once(
        llama,
        "max_position_embeddings: 131072",
        "max_position_embeddings: 1000000000000",
    );
    // One KV head of one dimension over one layer: two bytes per token.
    let tiny = replace_once(
        &replace_once(
            &replace_once(llama, "num_key_value_heads: 8", "num_key_value_heads: 1"),
            "num_hidden_layers: 32",
            "num_hidden_layers: 1",
        ),
        "num_attention_heads: 32",
        "num_attention_heads: 4096",
    );
    let chip = replace_once(
        include_str!("../catalog/hardware/h200.yaml"),
        "MemoryGiB: 141.0",
        "MemoryGiB: 60000.0",
    );
    let scenario = |model: &str, hardware: &str| {
        edit(&[
            ("model: deepseek-v3", &format!("model: {model}")),
            ("hardware: h200", &format!("hardware: {hardware}")),
        ])
        .unwrap()
    };
    let deployment = colocated("tp: 1, pp: 1, dp: 1", "block_size: 1");
    for (scenario, expect) in [
        (scenario("endless", "h200"), "max_position_embeddings"),
        (scenario("tiny", "roomy"), "blocks of 1 tokens"),
    ] {
        let files = MemoryFiles::new()
            .with("s.yaml", &scenario)
            .with("d.yaml", &deployment)
            .with("cat/models/endless.yaml", &endless)
            .with("cat/models/tiny.yaml", &tiny)
            .with("cat/hardware/roomy.yaml", &chip);
        let report = validate(&Request {
            files: &files,
            catalog_dirs: vec!["cat".into()],
            scenario: Some("s.yaml".into()),
            documents: vec!["d.yaml".into()],
        });
        let all = listing(&report);
        let problem = report
            .problems
            .iter()
            .find(|p| p.code == "beyond-limit")
            .unwrap_or_else(|| panic!("expected [beyond-limit]; found:\n{all}"));
        assert_eq!(
            (problem.file.as_str(), problem.path.as_str(), problem.line),
            ("d.yaml", "pools[0]", Some(4)),
            "{all}"
        );
        assert!(problem.message.contains(expect), "{all}");
        assert!(!report.valid && report.deployments.is_empty(), "{all}");
    }
}

/// A BLIS scenario names the registry's sets; one no catalog holds is
/// refused with what pdsim does instead: the two whose values are pdsim's
/// built-in defaults say so, the ones it has no term for say that.
#[test]
fn a_blis_registry_set_no_catalog_holds_says_what_pdsim_does_instead() {
    let scenario = include_str!("../../../scenarios/default.yaml").replace(
        "  - pd-transfer-estimates\n",
        "  - pd-transfer-estimates\n  - cost-model-primitives\n  - cost-model-attention\n  - my-own-set\n",
    );
    let files = MemoryFiles::new().with("s.yaml", &scenario);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: Some("s.yaml".into()),
        documents: vec![],
    });
    let messages: Vec<(&str, &str)> = report
        .problems
        .iter()
        .filter(|p| p.code == "unknown-reference")
        .map(|p| (p.path.as_str(), p.message.as_str()))
        .collect();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert!(
        messages[0]
            .1
            .contains("pdsim's built-in defaults are its GEMM envelope"),
        "{messages:?}"
    );
    assert!(
        messages[1]
            .1
            .contains("a BLIS registry set pdsim has no term for"),
        "{messages:?}"
    );
    assert!(!messages[2].1.contains("BLIS"), "{messages:?}");
    assert!(!report.valid);
}
