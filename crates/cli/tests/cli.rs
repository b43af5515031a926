//! The `pdsim` binary as users and scripts call it: exit codes, output
//! formats and the bundled examples. One integration-test binary, as
//! ripgrep and NeXosim keep theirs.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Runs pdsim from the repository root; returns (exit code, stdout, stderr).
fn pdsim(args: &[&str]) -> (i32, String, String) {
    pdsim_testkit::run_pdsim(env!("CARGO_BIN_EXE_pdsim"), &root(), args)
}

/// Writes a temporary file under the target directory and returns its path.
fn temp_file(name: &str, text: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-tests");
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join(name);
    std::fs::write(&path, text).expect("temp file");
    path
}

const H200: &str = "scenarios/4x8-h200.yaml";

#[test]
fn the_readme_command_validates_the_bundled_layouts() {
    let (code, stdout, stderr) = pdsim(&[
        "validate",
        "--resolve",
        "--scenario",
        H200,
        "deployments/1p3d-ep8.yaml",
        "deployments/2p2d-ep8.yaml",
        "deployments/colocated-tp8.yaml",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    insta::assert_snapshot!("resolve_4x8_h200", stdout);
    // The snapshot only says the figures did not change; these check each
    // pool's memory and KV lines against each other and against the model.
    // DeepSeek-V3 caches one MLA latent per token per layer, replicated on
    // every rank: 61 layers × (kv_lora_rank 512 + qk_rope_head_dim 64) ×
    // 2 bytes = 70,272 B/token/rank.
    let pools = cross_check_memory_lines(&stdout, 70_272);
    assert_eq!(pools, 5, "1p3d has 2 pools, 2p2d 2, colocated 1");
}

/// The README's `pdsim plan` example prints what the README shows: the
/// command is read from the README's `sh` block that starts with
/// `pdsim plan`, run (with `--out` under the target directory, so nothing
/// lands in `results/`), and its table and verdict compared with the block
/// after it. Engine or router changes that move the example's figures fail
/// here until the README is updated with them.
#[test]
fn the_readme_plan_example_prints_what_the_readme_shows() {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("README.md");
    let start = readme
        .find("```sh\npdsim plan ")
        .expect("the README has a `pdsim plan` example");
    let block = |from: usize| -> (String, usize) {
        let open = from + readme[from..].find('\n').expect("a fence line") + 1;
        let close = open + readme[open..].find("```").expect("a closing fence");
        (readme[open..close].to_string(), close + 3)
    };
    let (command, after) = block(start);
    let (expected, _) = block(after + readme[after..].find("```").expect("the output block"));
    let words: Vec<String> = command
        .replace("\\\n", " ")
        .split_whitespace()
        .skip(1)
        .map(str::to_string)
        .collect();
    assert_eq!(words[0], "plan", "{command}");
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-tests/readme-plan");
    let _ = std::fs::remove_dir_all(&out);
    let mut args: Vec<&str> = words.iter().map(String::as_str).collect();
    let out_text = out.to_string_lossy().into_owned();
    args.extend(["--out", &out_text]);
    let (code, stdout, stderr) = pdsim(&args);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let printed = stdout
        .split("\nresults: ")
        .next()
        .expect("the plan's text")
        .trim_end();
    assert_eq!(
        printed,
        expected.trim_end(),
        "the README's plan example is out of date; replace its output block with what the command prints"
    );
}

/// For every pool in `validate --resolve` text: the usable memory is 0.9
/// of the device (vLLM's default `gpu_memory_utilization`), the parts add
/// up to it, blocks × block size is the tokens per rank, the engine holds a
/// whole number of ranks' tokens, and the KV share holds those blocks at
/// `bytes_per_token` (to the 0.1 GiB shown, plus one block for vLLM's floor
/// division). Returns the number of pools checked.
fn cross_check_memory_lines(text: &str, bytes_per_token: u64) -> usize {
    let gib = |s: &str| -> f64 { s.trim().trim_end_matches(" GiB").parse().unwrap() };
    let int = |s: &str| -> u64 { s.trim().replace(',', "").parse().unwrap() };
    let lines: Vec<&str> = text.lines().collect();
    let mut pools = 0;
    for (i, line) in lines.iter().enumerate() {
        let Some(memory) = line.trim().strip_prefix("memory per rank: ") else {
            continue;
        };
        let (device, rest) = memory.split_once(" device, ").unwrap();
        let (usable, parts) = rest.split_once(" usable = ").unwrap();
        let (device, usable) = (gib(device), gib(usable));
        assert!((usable - 0.9 * device).abs() <= 0.05 + 1e-9, "{line}");
        let parts: Vec<(&str, f64)> = parts
            .split(" + ")
            .map(|p| {
                let (name, value) = p.trim_end_matches(" GiB").rsplit_once(' ').unwrap();
                (name, gib(value))
            })
            .collect();
        let names: Vec<&str> = parts.iter().map(|(n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "weights",
                "draft",
                "activations",
                "graphs",
                "non-torch",
                "KV"
            ],
            "{line}"
        );
        let sum: f64 = parts.iter().map(|(_, v)| v).sum();
        // Six parts each rounded to 0.1 GiB, and the usable figure too.
        assert!((sum - usable).abs() <= 0.35, "{line}: parts sum to {sum}");
        let kv_gib = parts.last().unwrap().1;
        let kv = lines[i + 1].trim().strip_prefix("KV capacity: ").unwrap();
        let (per_token, rest) = kv.split_once(" B/token/rank; ").unwrap();
        assert_eq!(int(per_token), bytes_per_token, "{kv}");
        let (blocks, rest) = rest.split_once(" blocks × ").unwrap();
        let (block, rest) = rest.split_once(" = ").unwrap();
        let (rank_tokens, rest) = rest.split_once(" tokens per rank, ").unwrap();
        let (engine_tokens, _) = rest.split_once(" per engine").unwrap();
        let (blocks, block, rank_tokens, engine_tokens) = (
            int(blocks),
            int(block),
            int(rank_tokens),
            int(engine_tokens),
        );
        assert_eq!(blocks * block, rank_tokens, "{kv}");
        assert_eq!(engine_tokens % rank_tokens, 0, "{kv}");
        let held_gib = (blocks * block * bytes_per_token) as f64 / (1u64 << 30) as f64;
        let block_gib = (block * bytes_per_token) as f64 / (1u64 << 30) as f64;
        assert!(
            held_gib <= kv_gib + 0.05 && kv_gib - 0.05 <= held_gib + block_gib,
            "{kv}: {blocks} blocks hold {held_gib} GiB of the {kv_gib} GiB KV share"
        );
        pools += 1;
    }
    pools
}

#[test]
fn the_rebel100_example_resolves_with_lmcache_on_its_prefill_pool() {
    let (code, stdout, stderr) = pdsim(&[
        "validate",
        "--resolve",
        "--scenario",
        "scenarios/rebel100-minimax.yaml",
        "deployments/rebel100-4p4d.yaml",
    ]);
    // The layout resolves and runs: LMCache on the prefill pool only, its
    // chunk size the rules pack's (the deployment has no key for it).
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        stdout
            .matches("offload.lmcache.chunk_size 4096 (default)")
            .count(),
        1,
        "{stdout}"
    );
    // A change detector for the rendering: the decode engine's capacity in
    // it is derived term by term, from vllm-rbln's formula and sourced
    // constants, in `crates/spec/tests/rbln_capacity.rs`.
    insta::assert_snapshot!("resolve_rebel100", stdout);
}

#[test]
fn a_scenario_among_the_files_is_used_as_the_scenario() {
    let (code, stdout, _) = pdsim(&["validate", H200, "deployments/colocated-tp8.yaml"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(!stdout.contains("scenario-missing"), "{stdout}");
}

#[test]
fn json_output_has_the_documented_shape() {
    let (code, stdout, _) = pdsim(&[
        "validate",
        "--format",
        "json",
        "--resolve",
        "--scenario",
        H200,
        "deployments/1p3d-ep8.yaml",
    ]);
    assert_eq!(code, 0);
    let value: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(value["valid"], serde_json::Value::Bool(true));
    assert!(value["problems"].as_array().is_some_and(|p| p.is_empty()));
    let pools = &value["resolution"]["deployments"][0]["pools"];
    assert_eq!(pools[1]["layout"]["cluster"]["engines"], 3);
    assert_eq!(pools[0]["layout"]["expert_parallel_width"], 8);
    assert!(
        pools[0]["kv"]["tokens_per_rank"]
            .as_u64()
            .is_some_and(|t| t > 0)
    );
}

#[test]
fn json_problems_carry_file_line_path_and_code() {
    let bad = temp_file("bad-dp-local.yaml", &std::fs::read_to_string(root().join("deployments/1p3d-ep8.yaml")).unwrap().replace("dp_local: 8\n      enable_expert_parallel: true\n    engine:\n      all2all_backend: deepep_low_latency", "dp_local: 9\n      enable_expert_parallel: true\n    engine:\n      all2all_backend: deepep_low_latency"));
    let bad = bad.to_string_lossy().into_owned();
    let (code, stdout, _) = pdsim(&["validate", "--format", "json", "--scenario", H200, &bad]);
    assert_eq!(code, 1, "{stdout}");
    let value: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(value["valid"], serde_json::Value::Bool(false));
    let problem = &value["problems"][0];
    assert_eq!(problem["severity"], "error");
    assert_eq!(problem["code"], "dp-local-exceeds-dp");
    assert_eq!(problem["path"], "pools[1].parallel.dp_local");
    let line = std::fs::read_to_string(&bad)
        .unwrap()
        .lines()
        .position(|l| l.contains("dp_local: 9"))
        .unwrap()
        + 1;
    assert_eq!(problem["line"], line);
    assert_eq!(problem["file"], bad.as_str());
    assert_eq!(value["resolution"], serde_json::Value::Null);
}

#[test]
fn malformed_yaml_is_located_and_exits_one() {
    let path = temp_file(
        "broken.yaml",
        "kind: Deployment\nname: x\npools:\n  - role: colocated\n    nodes: [1\n",
    );
    let (code, stdout, _) = pdsim(&["validate", &path.to_string_lossy()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("broken.yaml:"), "{stdout}");
    assert!(
        stdout.contains("[yaml-syntax]") || stdout.contains("error"),
        "{stdout}"
    );
}

#[test]
fn wrong_types_unknown_keys_and_nan_are_located() {
    let cases = [
        ("tp: 8", "tp: eight", "pools[0].parallel.tp", "wrong-type"),
        (
            "max_num_seqs: 256",
            "max_num_seqs: 256\n      max_num_sequences: 3",
            "pools[0].engine",
            "unknown-key",
        ),
        (
            "max_num_seqs: 256",
            "max_num_seqs: 256\n      gpu_memory_utilization: .nan",
            "pools[0].engine.gpu_memory_utilization",
            "gpu-memory-utilization-range",
        ),
        (
            "max_num_seqs: 256",
            "max_num_seqs: 99999999999999999999999",
            "pools[0].engine.max_num_seqs",
            "wrong-type",
        ),
    ];
    let base = std::fs::read_to_string(root().join("deployments/colocated-tp8.yaml")).unwrap();
    for (i, (from, to, path, code_expected)) in cases.iter().enumerate() {
        let file = temp_file(&format!("case-{i}.yaml"), &base.replace(from, to));
        let (code, stdout, _) = pdsim(&[
            "validate",
            "--format",
            "json",
            "--scenario",
            H200,
            &file.to_string_lossy(),
        ]);
        assert_eq!(code, 1, "{stdout}");
        let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let problems = value["problems"].as_array().unwrap();
        assert!(
            problems.iter().any(|p| p["code"] == *code_expected
                && p["path"].as_str().is_some_and(|p| p.starts_with(path))
                && p["line"].as_u64().is_some()),
            "case {i}: expected {code_expected} at {path}: {stdout}"
        );
    }
}

#[test]
fn missing_files_and_directories_exit_two() {
    let (code, stdout, _) = pdsim(&["validate", "no/such/file.yaml"]);
    assert_eq!(code, 2);
    assert!(
        stdout
            .contains("no/such/file.yaml: error: `no/such/file.yaml` no such file [file-missing]"),
        "{stdout}"
    );
    let (code, stdout, _) = pdsim(&["validate", "deployments"]);
    assert_eq!(code, 2);
    assert!(stdout.contains("[file-is-directory]"), "{stdout}");
    let (code, _, _) = pdsim(&[
        "validate",
        "--scenario",
        "no-scenario.yaml",
        "deployments/1p3d-ep8.yaml",
    ]);
    assert_eq!(code, 2);
}

#[test]
fn usage_errors_exit_two_and_help_exits_zero() {
    let (code, _, stderr) = pdsim(&["validate"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("Usage"), "{stderr}");
    let (code, _, _) = pdsim(&["validate", "--format", "xml", "x.yaml"]);
    assert_eq!(code, 2);
    let (code, stdout, _) = pdsim(&["--help"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("Exit codes"), "{stdout}");
}

/// A user catalog folder `name` holding one small Llama-shaped model,
/// `tiny`, and a copy of the 4×8 H200 scenario that serves it.
fn tiny_catalog(name: &str) -> (PathBuf, PathBuf) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    std::fs::create_dir_all(dir.join("models/tiny")).unwrap();
    std::fs::write(
        dir.join("models/tiny/config.json"),
        r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "num_hidden_layers": 16,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 8192,
            "vocab_size": 128256, "max_position_embeddings": 131072, "torch_dtype": "bfloat16",
            "rope_theta": 500000.0}"#,
    )
    .unwrap();
    let scenario = std::fs::read_to_string(root().join(H200))
        .unwrap()
        .replace("model: deepseek-v3", "model: tiny");
    let scenario_path = temp_file(&format!("{name}-scenario.yaml"), &scenario);
    (dir, scenario_path)
}

#[test]
fn a_user_catalog_adds_models_and_unknown_names_list_what_exists() {
    let (dir, scenario_path) = tiny_catalog("user-catalog");
    let (code, stdout, _) = pdsim(&[
        "validate",
        "--catalog",
        &dir.to_string_lossy(),
        "--scenario",
        &scenario_path.to_string_lossy(),
        "deployments/colocated-tp8.yaml",
    ]);
    assert_eq!(code, 0, "{stdout}");
    // Without the folder the name is unknown, and the message lists the models.
    let (code, stdout, _) = pdsim(&[
        "validate",
        "--scenario",
        &scenario_path.to_string_lossy(),
        "deployments/colocated-tp8.yaml",
    ]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("[unknown-reference]") && stdout.contains("llama-3.1-8b"),
        "{stdout}"
    );
}

/// The `- `PATH`: `SHA-256`` line a results README gives `path`, spelled
/// `shown`.
fn readme_line(shown: &str, path: &Path) -> String {
    use sha2::Digest;
    let sha: String = sha2::Sha256::digest(std::fs::read(path).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("- `{shown}`: `{sha}`")
}

#[test]
fn a_results_readme_lists_every_file_the_command_read_with_its_digest() {
    // A plan's deployment names its EndpointPickerConfig: it changes the
    // results as much as the deployment does, so a replay needs it (the
    // plan's README listed only the files its flags named).
    let plan = out_dir("readme-plan");
    let (code, stdout, stderr) = pdsim(&[
        "plan",
        "--scenario",
        H200,
        "deployments/1p3d-ep8-epp.yaml",
        "--trace",
        "traces/default.jsonl",
        "--max-requests",
        "40",
        "--max-runs",
        "1",
        "--slo",
        "ttft_ms=2000",
        "--out",
        &plan.to_string_lossy(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let readme = std::fs::read_to_string(plan.join("README.md")).unwrap();
    for file in [
        H200,
        "deployments/1p3d-ep8-epp.yaml",
        "traces/default.jsonl",
        "deployments/pd/epp-prefix-pd.yaml",
    ] {
        let line = readme_line(file, &root().join(file));
        assert!(readme.contains(&line), "{line} missing from\n{readme}");
    }
    // A user catalog's entry the run read is listed too; the folder itself
    // is not (its files are what was read).
    let (catalog, scenario_path) = tiny_catalog("readme-catalog");
    let config = catalog.join("models/tiny/config.json");
    let run = out_dir("readme-run");
    let (code, stdout, stderr) = pdsim(&[
        "run",
        "--catalog",
        &catalog.to_string_lossy(),
        "--scenario",
        &scenario_path.to_string_lossy(),
        "--deployment",
        "deployments/colocated-tp8.yaml",
        "--requests",
        "20",
        "--rate",
        "5",
        "--out",
        &run.to_string_lossy(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let readme = std::fs::read_to_string(run.join("README.md")).unwrap();
    let line = readme_line(&config.to_string_lossy(), &config);
    assert!(readme.contains(&line), "{line} missing from\n{readme}");
    assert!(
        !readme.contains(&format!("- `{}`:", catalog.display())),
        "{readme}"
    );
}

#[test]
fn the_blis_example_deployment_validates_against_its_example_scenario() {
    let Some(shared) = pdsim_testkit::shared(
        "the_blis_example_deployment_validates_against_its_example_scenario",
        "BLIS's schema examples",
    ) else {
        return;
    };
    // BLIS's disaggregated example names BLIS registry sets pdsim does not
    // ship; the rest of the bundle must check out, and the unknown sets must
    // be named with the list of what exists.
    let examples = shared.join("reference/blis/schemas-examples");
    let (code, stdout, _) = pdsim(&[
        "validate",
        "--format",
        "json",
        "--scenario",
        &examples
            .join("scenario-disaggregated.yaml")
            .to_string_lossy(),
        &examples
            .join("deployment-disaggregated.yaml")
            .to_string_lossy(),
    ]);
    assert_eq!(code, 1, "{stdout}");
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    for problem in value["problems"].as_array().unwrap() {
        assert_eq!(problem["code"], "unknown-reference", "{problem}");
        assert!(
            problem["path"]
                .as_str()
                .unwrap()
                .starts_with("coefficients["),
            "{problem}"
        );
    }
}

fn out_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("runs")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[test]
fn run_with_no_arguments_is_deterministic_to_the_byte() {
    let (a, b) = (out_dir("default-a"), out_dir("default-b"));
    let (code, stdout, stderr) = pdsim(&["run", "--out", &a.to_string_lossy()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("2000 completed"), "{stdout}");
    let trace_a = Path::new(env!("CARGO_TARGET_TMPDIR")).join("default-a.perfetto.json");
    let trace_b = Path::new(env!("CARGO_TARGET_TMPDIR")).join("default-b.perfetto.json");
    let (code, _, _) = pdsim(&[
        "run",
        "--check",
        "--perfetto",
        &trace_b.to_string_lossy(),
        "--out",
        &b.to_string_lossy(),
    ]);
    assert_eq!(code, 0);
    let (code, _, _) = pdsim(&[
        "run",
        "--perfetto",
        &trace_a.to_string_lossy(),
        "--out",
        &out_dir("default-c").to_string_lossy(),
    ]);
    assert_eq!(code, 0);
    assert!(
        std::fs::read(&trace_a).unwrap() == std::fs::read(&trace_b).unwrap(),
        "the Perfetto trace differs between two runs with the same seed"
    );
    let perfetto: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace_a).unwrap()).unwrap();
    assert!(perfetto["traceEvents"].as_array().unwrap().len() > 1000);
    for file in [
        "summary.json",
        "requests.csv",
        "timeseries.csv",
        "links.csv",
        "report.md",
        "report.html",
        "plots/ttft_cdf.svg",
    ] {
        let (x, y) = (
            std::fs::read(a.join(file)).unwrap(),
            std::fs::read(b.join(file)).unwrap(),
        );
        assert!(x == y, "{file} differs between two runs with the same seed");
    }
    // The README records the command (which differs here) and the inputs'
    // digests.
    let readme = std::fs::read_to_string(a.join("README.md")).unwrap();
    assert!(readme.contains("Seed(s): 0") && readme.contains("builtin:traces/default.jsonl"));
    let csv = std::fs::read_to_string(a.join("requests.csv")).unwrap();
    assert_eq!(
        csv.lines().count(),
        2001,
        "one row per request plus the header"
    );
    assert!(csv.lines().next().unwrap().ends_with(",outcome,reason"));
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(a.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["requests"]["completed"], 2000);
    assert!(
        summary["ttft_ms"]["p99"].as_f64().unwrap() > summary["ttft_ms"]["p50"].as_f64().unwrap()
    );
    // A different seed changes nothing here but must still run.
    let (code, _, _) = pdsim(&[
        "run",
        "--seed",
        "5",
        "--out",
        &out_dir("seed5").to_string_lossy(),
    ]);
    assert_eq!(code, 0);
}

#[test]
fn a_client_timeout_aborts_what_is_not_done_and_the_results_say_so() {
    let dir = out_dir("client-timeout");
    let (code, stdout, stderr) = pdsim(&[
        "run",
        "--check",
        "--client-timeout-s",
        "1.5",
        "--out",
        &dir.to_string_lossy(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("aborted:client-timeout"), "{stdout}");
    assert!(stdout.contains("clients give up after 1.5 s"), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap();
    let requests = &summary["requests"];
    let aborted = requests["aborted"].as_u64().unwrap();
    assert!(aborted > 0, "{requests}");
    assert_eq!(
        requests["not_completed_by_reason"]["aborted:client-timeout"],
        aborted
    );
    assert_eq!(
        requests["completed"].as_u64().unwrap() + aborted,
        2000,
        "{requests}"
    );
    assert_eq!(summary["run"]["client_timeout_s"], 1.5);
    // Latencies describe the completed requests, all within the timeout
    // (to the histograms' three significant digits).
    assert!(
        summary["e2e_ms"]["max"].as_f64().unwrap() <= 1502.0,
        "{}",
        summary["e2e_ms"]
    );
    let csv = std::fs::read_to_string(dir.join("requests.csv")).unwrap();
    let rows = csv
        .lines()
        .filter(|l| l.ends_with(",aborted,client-timeout"))
        .count();
    assert_eq!(rows as u64, aborted);
    // Bad values are refused before anything runs.
    for bad in ["0", "-3", "NaN", "inf", "1e12"] {
        let (code, _, stderr) = pdsim(&[
            "run",
            &format!("--client-timeout-s={bad}"),
            "--out",
            &out_dir("client-timeout-bad").to_string_lossy(),
        ]);
        assert_eq!(code, 2, "{bad}: {stderr}");
        assert!(stderr.contains("--client-timeout-s"), "{stderr}");
        assert!(!out_dir("client-timeout-bad").exists());
    }
}

#[test]
fn the_rebel100_layout_runs_lmcache_beside_its_hbm_only_variant() {
    // The second seed's deployment with LMCache's host tier on its prefill
    // pods, and the same layout without it, on the same requests: LMCache
    // finds prefixes HBM no longer holds, loads and stores whole chunks,
    // and the run says so; the HBM-only run has no LMCache at all.
    let mut summaries = Vec::new();
    for deployment in ["rebel100-4p4d", "rebel100-4p4d-hbm"] {
        let out = out_dir(&format!("lmcache-{deployment}"));
        let (code, stdout, stderr) = pdsim(&[
            "run",
            "--scenario",
            "scenarios/rebel100-minimax.yaml",
            "--deployment",
            &format!("deployments/{deployment}.yaml"),
            "--rate",
            "0.5",
            "--requests",
            "200",
            "--out",
            &out.to_string_lossy(),
        ]);
        assert_eq!(code, 0, "{stdout}{stderr}");
        assert_eq!(
            stdout.contains("LMCache: "),
            deployment == "rebel100-4p4d",
            "{stdout}"
        );
        let summary: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap())
                .unwrap();
        summaries.push(summary);
    }
    let (with, without) = (&summaries[0]["prefix_cache"], &summaries[1]["prefix_cache"]);
    assert!(with["external_hits_tokens"].as_u64().unwrap() > 0, "{with}");
    assert!(
        with["lmcache_stores_chunks"].as_u64().unwrap() > 0,
        "{with}"
    );
    assert!(
        with["lmcache_loaded_bytes"].as_f64().unwrap() > 0.0,
        "{with}"
    );
    assert!(
        with["lmcache_stored_bytes"].as_f64().unwrap() > 0.0,
        "{with}"
    );
    assert_eq!(
        without["external_hits_tokens"].as_u64(),
        Some(0),
        "{without}"
    );
    assert!(without.get("lmcache_stores_chunks").is_none(), "{without}");
    // The same HBM hits: LMCache adds to them rather than replacing them.
    assert_eq!(with["queries_tokens"], without["queries_tokens"]);
    assert_ne!(
        summaries[0]["ttft_ms"]["mean"],
        summaries[1]["ttft_ms"]["mean"]
    );
}

#[test]
fn run_refuses_what_it_cannot_simulate_yet_and_writes_nothing() {
    // The Rebel100 example with fetches issued ahead of admission, which
    // pdsim does not simulate yet: refused by key, nothing written.
    let out = out_dir("epp");
    let dir = out_dir("rds-deployment");
    std::fs::create_dir_all(dir.join("rebel100")).unwrap();
    std::fs::copy(
        root().join("deployments/rebel100/epp-config.yaml"),
        dir.join("rebel100/epp-config.yaml"),
    )
    .unwrap();
    let text = std::fs::read_to_string(root().join("deployments/rebel100-4p4d.yaml")).unwrap();
    assert!(text.contains("  connector: LMCacheConnectorV1\n"));
    let deployment = dir.join("rebel100-4p4d-prefetch.yaml");
    std::fs::write(
        &deployment,
        text.replace(
            "  connector: LMCacheConnectorV1\n",
            "  connector: LMCacheConnectorV1\n  prefetch_depth: 2\n",
        ),
    )
    .unwrap();
    let (code, _, stderr) = pdsim(&[
        "run",
        "--scenario",
        &root()
            .join("scenarios/rebel100-minimax.yaml")
            .to_string_lossy(),
        "--deployment",
        &deployment.to_string_lossy(),
        "--rate",
        "1",
        "--requests",
        "10",
        "--out",
        &out.to_string_lossy(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("offload.prefetch_depth"), "{stderr}");
    assert!(!out.exists());
}

#[test]
fn a_bad_trace_row_fails_the_run_without_results() {
    let trace = temp_file(
        "bad-trace.jsonl",
        "{\"timestamp\": 0, \"input_length\": 100, \"output_length\": 5, \"hash_ids\": [1]}\n{\"timestamp\": 1, \"input_length\": \"x\"}\n",
    );
    let out = out_dir("bad-trace");
    let perfetto = out.with_file_name("bad-trace-perfetto.json");
    let (code, _, stderr) = pdsim(&[
        "run",
        "--trace",
        &trace.to_string_lossy(),
        "--perfetto",
        &perfetto.to_string_lossy(),
        "--out",
        &out.to_string_lossy(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("bad-trace.jsonl:2"), "{stderr}");
    assert!(!out.exists(), "no result that looks complete");
    assert!(!perfetto.exists(), "no trace that looks complete");
    let parent = out.parent().unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(parent)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains("bad-trace"))
        .collect();
    assert!(leftovers.is_empty(), "no partial folder left behind");
    let (code, _, _) = pdsim(&[
        "run",
        "--trace",
        "no/such/trace.jsonl",
        "--out",
        &out.to_string_lossy(),
    ]);
    assert_eq!(code, 2);
}

#[test]
fn a_burstgpt_trace_runs_and_its_sessions_are_named_as_unused() {
    // The release header with sessions (BurstGPT_3): read by name, a failed
    // row's 0 response tokens replayed as 1, the sessions noted.
    let trace = temp_file(
        "burst.csv",
        "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
         0.5,s1,1.2,ChatGPT,472,18,490,Conversation log\n\
         1.0,s1,2.5,ChatGPT,1087,23,1110,Conversation log\n\
         3.25,,0.0,GPT-4,417,0,417,API log\n",
    );
    let out = out_dir("burst");
    let (code, stdout, stderr) = pdsim(&[
        "run",
        "--trace",
        &trace.to_string_lossy(),
        "--out",
        &out.to_string_lossy(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("3 total, 3 completed") || stderr.contains("3 total, 3 completed"),
        "{stdout}{stderr}"
    );
    let both = format!("{stdout}{stderr}");
    assert!(both.contains("Session ID"), "{both}");
    let csv = std::fs::read_to_string(out.join("requests.csv")).unwrap();
    assert_eq!(csv.lines().count(), 4, "{csv}");
    // A header without the token columns is refused, naming the column.
    let bad = temp_file(
        "burst-bad.csv",
        "Timestamp,Model,Request tokens\n0,ChatGPT,5\n",
    );
    let (code, _, stderr) = pdsim(&[
        "run",
        "--trace",
        &bad.to_string_lossy(),
        "--out",
        &out_dir("burst-bad").to_string_lossy(),
    ]);
    assert_ne!(code, 0);
    assert!(stderr.contains("burst-bad.csv"), "{stderr}");
}

/// A scenario that states its trace's SHA-256 or number of rows is held to
/// them when its trace is replayed: a changed or truncated file is
/// refused, and nothing is written.
#[test]
fn a_scenario_trace_that_is_not_the_one_it_states_is_refused() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("declared-trace");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let head = "request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,\
                prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,\
                audio_tokens,video_tokens,reason_ratio,model,deadline_us,server_input_tokens,\
                arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,\
                status,error_message,finish_reason\n";
    let row = |id: u32, at: u64| {
        format!("{id},c,,,,0,,0,true,100,20,100,0,0,0,0,,0,0,{at},{at},0,0,0,ok,,\n")
    };
    let csv = [head.to_string(), row(0, 0), row(1, 1_000)].concat();
    std::fs::write(dir.join("trace.csv"), &csv).unwrap();
    let sha = {
        use sha2::{Digest, Sha256};
        Sha256::digest(csv.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let zeros = "0".repeat(64);
    for (declared, ok, expected) in [
        (format!("sha256: {sha}, rows: 2"), true, ""),
        (format!("sha256: {zeros}"), false, "workload.trace.sha256"),
        (
            "rows: 3".to_string(),
            false,
            "trace.csv has 2 rows, not the 3",
        ),
    ] {
        let scenario = std::fs::read_to_string(root().join("scenarios/default.yaml")).unwrap()
            + &format!(
                "workload:\n  trace: {{data: trace.csv, {declared}, header: {{trace_version: 3, time_unit: microseconds, mode: real}}}}\n"
            );
        std::fs::write(dir.join("s.yaml"), scenario).unwrap();
        let out = dir.join("out");
        let _ = std::fs::remove_dir_all(&out);
        let (code, stdout, stderr) = pdsim(&[
            "run",
            "--scenario",
            &dir.join("s.yaml").to_string_lossy(),
            "--out",
            &out.to_string_lossy(),
        ]);
        if ok {
            assert_eq!(code, 0, "{declared}: {stdout}{stderr}");
        } else {
            assert_eq!(code, 1, "{declared}: {stdout}{stderr}");
            assert!(stderr.contains(expected), "{declared}: {stderr}");
            assert!(!out.exists(), "{declared}: nothing written");
        }
    }
}

#[test]
fn a_tracev2_conversation_replays_closed_loop_from_the_command_line() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("sessions-case");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let head = "request_id,client_id,tenant_id,slo_class,session_id,round_index,prefix_group,\
                prefix_length,streaming,input_tokens,output_tokens,text_tokens,image_tokens,\
                audio_tokens,video_tokens,reason_ratio,model,deadline_us,server_input_tokens,\
                arrival_time_us,send_time_us,first_chunk_time_us,last_chunk_time_us,num_chunks,\
                status,error_message,finish_reason,think_time_us\n";
    let row = |id: u32, session: &str, round: u32, input: u32, at: u64, think: u64| {
        format!(
            "{id},c,,,{session},{round},,0,true,{input},40,{input},0,0,0,0,,0,0,{at},{at},0,0,0,ok,,,{think}\n"
        )
    };
    let csv = [
        head.to_string(),
        row(0, "a", 0, 600, 0, 0),
        row(1, "b", 0, 300, 100_000, 0),
        row(2, "a", 1, 50, 50_000_000, 1_500_000),
        row(3, "b", 1, 20, 60_000_000, 500_000),
    ]
    .concat();
    std::fs::write(dir.join("trace.csv"), csv).unwrap();
    let scenario = std::fs::read_to_string(root().join("scenarios/default.yaml")).unwrap()
        + "workload:\n  trace:\n    data: trace.csv\n    header: {trace_version: 3, time_unit: microseconds, mode: real, session_context_growth: accumulate}\n";
    std::fs::write(dir.join("s.yaml"), scenario).unwrap();
    let out = dir.join("out");
    let (code, stdout, stderr) = pdsim(&[
        "run",
        "--scenario",
        &dir.join("s.yaml").to_string_lossy(),
        "--out",
        &out.to_string_lossy(),
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let both = format!("{stdout}{stderr}");
    assert!(
        both.contains("conversations: 2 later turns sent closed-loop"),
        "{both}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["sessions"]["turns_sent"], 2, "{summary}");
    assert_eq!(summary["requests"]["completed"], 4, "{summary}");
    // The later turns were sent seconds after their answers, not at the
    // 50 s and 60 s the trace logged, and carry their history.
    let requests = std::fs::read_to_string(out.join("requests.csv")).unwrap();
    let mut lines = requests.lines();
    let names: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| {
        names
            .iter()
            .position(|c| *c == n)
            .unwrap_or_else(|| panic!("{n}"))
    };
    let rows: Vec<Vec<String>> = lines
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    assert_eq!(rows.len(), 4, "{requests}");
    let arrival = col("arrival_ms");
    let prompt = col("prompt_tokens");
    for r in &rows {
        let at: f64 = r[arrival].parse().unwrap();
        assert!(
            at < 10_000.0,
            "every turn is sent within seconds: {requests}"
        );
    }
    let prompts: std::collections::BTreeSet<u64> =
        rows.iter().map(|r| r[prompt].parse().unwrap()).collect();
    let expected: std::collections::BTreeSet<u64> = [600, 300, 600 + 40 + 50, 300 + 40 + 20].into();
    assert_eq!(prompts, expected, "{requests}");
}

#[test]
fn validate_loads_the_router_files_and_names_what_it_refuses() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("router-case");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("epp.yaml"),
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- type: warp-drive-scorer\n- type: max-score-picker\n  parameters: {maxNumOfEndpoints: 1, speed: 9}\n",
    )
    .unwrap();
    let deployment = std::fs::read_to_string(root().join("deployments/colocated-tp8.yaml"))
        .unwrap()
        + "router:\n  endpoint_picker_config: epp.yaml\n  epp_flags: [--pool-name=p, --kv-cache-usage-percentage-metric=x]\n";
    std::fs::write(dir.join("d.yaml"), deployment).unwrap();
    let (code, stdout, _) = pdsim(&[
        "validate",
        "--format",
        "json",
        "--scenario",
        H200,
        &dir.join("d.yaml").to_string_lossy(),
    ]);
    assert_eq!(code, 1, "{stdout}");
    let value: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let found: Vec<(String, String)> = value["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["code"].as_str().unwrap().to_string(),
                p["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for expected in [
        ("epp-plugin-unknown", "plugins[1].type"),
        ("epp-plugin-parameter", "plugins[2].parameters.speed"),
        ("epp-flag-rejected", "router.epp_flags[1]"),
    ] {
        assert!(
            found
                .iter()
                .any(|(c, p)| c == expected.0 && p == expected.1),
            "{expected:?} not in {found:?}"
        );
    }
}

/// A trace without a request (an empty file, or a header alone) is
/// refused by `validate --trace` and by `run`, which writes no results
/// folder of zeros.
#[test]
fn a_trace_without_a_request_is_refused() {
    for (name, text) in [
        ("empty.jsonl", ""),
        (
            "header.csv",
            "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n",
        ),
    ] {
        let trace = temp_file(name, text);
        let trace = trace.to_str().unwrap();
        let (code, stdout, _) = pdsim(&["validate", "--trace", trace]);
        assert_ne!(code, 0, "{name}: {stdout}");
        assert!(stdout.contains("holds no request"), "{name}: {stdout}");
        let out = out_dir(&format!("no-request-{name}"));
        let (code, _, stderr) = pdsim(&["run", "--trace", trace, "--out", out.to_str().unwrap()]);
        assert_eq!(code, 1, "{name}: {stderr}");
        assert!(stderr.contains("holds no request"), "{name}: {stderr}");
        assert!(!out.exists(), "{name}: no results folder");
    }
}

#[test]
fn validate_reads_a_trace_to_its_end_without_simulating_it() {
    // The bundled trace: 2,000 Mooncake rows.
    let (code, stdout, _) = pdsim(&["validate", "--trace", "traces/default.jsonl"]);
    assert_eq!(code, 0, "{stdout}");
    assert!(
        stdout.contains("valid trace traces/default.jsonl: 2000 requests (Mooncake)"),
        "{stdout}"
    );
    // Three rows, worked by hand: prompts of 10, 20 and 30 tokens, outputs
    // of 1, 2 and 9; arrivals at 0, 1.5 and 3 s.
    let rows = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 1, \"hash_ids\": [1]}\n{\"timestamp\": 1500, \"input_length\": 20, \"output_length\": 2, \"hash_ids\": [2]}\n{\"timestamp\": 3000, \"input_length\": 30, \"output_length\": 9, \"hash_ids\": [3]}\n";
    let good = temp_file("three.jsonl", rows);
    let good = good.to_str().unwrap();
    let (code, stdout, _) = pdsim(&["validate", "--trace", good, "--format", "json"]);
    assert_eq!(code, 0, "{stdout}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let s = &v["trace"]["summary"];
    assert_eq!(s["requests"], 3);
    assert_eq!(
        (
            s["prompt_tokens_total"].as_u64(),
            s["prompt_tokens_max"].as_u64()
        ),
        (Some(60), Some(30))
    );
    assert_eq!(
        (
            s["output_tokens_total"].as_u64(),
            s["output_tokens_max"].as_u64()
        ),
        (Some(12), Some(9))
    );
    assert_eq!(
        (s["first_arrival_s"].as_f64(), s["last_arrival_s"].as_f64()),
        (Some(0.0), Some(3.0))
    );
    // A broken row names its line and exits 1; a missing file exits 2.
    let bad = temp_file(
        "broken.jsonl",
        &format!("{rows}{{\"timestamp\": 4000, \"input_length\": \"x\"}}\n"),
    );
    let (code, stdout, _) = pdsim(&["validate", "--trace", bad.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("broken.jsonl:4:") && stdout.contains("invalid trace"),
        "{stdout}"
    );
    let (code, stdout, _) = pdsim(&["validate", "--trace", "no/such/trace.jsonl"]);
    assert_eq!(code, 2, "{stdout}");
    assert!(stdout.contains("no such file"), "{stdout}");
    // With documents, both are checked and both must pass.
    let (code, stdout, _) = pdsim(&[
        "validate",
        H200,
        "deployments/colocated-tp8.yaml",
        "--trace",
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("valid: 2 file(s)"), "{stdout}");
}

/// The bundled hybrid model resolves (its states, blocks and cache mode in
/// the resolution) and runs: the bundled chat trace's shared system prompts
/// and conversations are reused where a state was kept.
#[test]
fn a_hybrid_model_resolves_and_runs() {
    let (code, stdout, _) = pdsim(&[
        "validate",
        "--resolve",
        "--scenario",
        "scenarios/h100-nemotron-h.yaml",
        "deployments/h100-nemotron-h.yaml",
    ]);
    assert_eq!(code, 0, "{stdout}");
    for needle in [
        "mamba_ssm_cache_dtype bfloat16",
        "mamba_cache_mode align",
        "block_size 16 -> 528",
    ] {
        assert!(stdout.contains(needle), "{needle}: {stdout}");
    }
    assert!(!stdout.contains("[run-refused]"), "{stdout}");
    let out = std::env::temp_dir().join(format!("pdsim-hybrid-{}", std::process::id()));
    let (code, stdout, stderr) = pdsim(&[
        "run",
        "--scenario",
        "scenarios/h100-nemotron-h.yaml",
        "--deployment",
        "deployments/h100-nemotron-h.yaml",
        "--trace",
        "traces/default.jsonl",
        "--out",
        &out.to_string_lossy(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("2000 completed"), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    let hit = summary["prefix_cache"]["hit_rate"]
        .as_f64()
        .expect("hit rate");
    assert!(hit > 0.2 && hit < 0.6, "{hit}");
    std::fs::remove_dir_all(&out).unwrap();
}

/// DeepSeek-V4.1 resolves (its cache, Engram residency and sequence
/// parallelism in the resolution) and runs: a resent prefix is reused less
/// its last window, which bounded replay recomputes.
#[test]
fn deepseek_v41_resolves_and_runs() {
    let (code, stdout, _) = pdsim(&[
        "validate",
        "--resolve",
        "--scenario",
        "scenarios/b200-deepseek-v4.1.yaml",
        "deployments/b200-deepseek-v4.1.yaml",
    ]);
    assert_eq!(code, 0, "{stdout}");
    for needle in [
        "block_size 16 -> 128",
        "swa_bounded_replay true",
        "prefix_replay_tokens 128",
        "sequence_parallel (DeepSeek-V4.1) true",
        "in gpu: 25344754050 bytes of GPU memory a rank",
        "1,056 B/token/rank",
    ] {
        assert!(stdout.contains(needle), "{needle}: {stdout}");
    }
    assert!(!stdout.contains("[run-refused]"), "{stdout}");
    let out = std::env::temp_dir().join(format!("pdsim-deepseek-{}", std::process::id()));
    let (code, stdout, stderr) = pdsim(&[
        "run",
        "--scenario",
        "scenarios/b200-deepseek-v4.1.yaml",
        "--deployment",
        "deployments/b200-deepseek-v4.1.yaml",
        "--trace",
        "traces/default.jsonl",
        "--out",
        &out.to_string_lossy(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("2000 completed"), "{stdout}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("summary.json")).unwrap()).unwrap();
    // vLLM's counter counts whole hits; what the engines skipped (the
    // routed-found rate, from each request's cached tokens) is less by the
    // replayed windows.
    let hits = summary["prefix_cache"]["hit_rate"].as_f64().unwrap();
    let skipped = summary["prefix_cache"]["routed_found_hit_rate"]
        .as_f64()
        .unwrap();
    assert!(hits > skipped && skipped > 0.3, "{hits} {skipped}");
    std::fs::remove_dir_all(&out).unwrap();
}
