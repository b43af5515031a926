//! pdsim never loses a user's files: `--out` replaces only an earlier pdsim
//! result, `--perfetto` never turns a FIFO into a regular file, interrupts
//! leave nothing unfinished behind, stale staging folders of killed runs are
//! cleared (and only those), and absurd command-line numbers are refused.
//!
//! Every case runs the debug binary in its own folder under the system's
//! temporary directory, on a few trace rows, so the whole file takes
//! seconds.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// A scratch folder of one test, removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pdsim-safety-{name}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir.canonicalize().unwrap())
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Runs pdsim in this folder: (exit code, stdout, stderr).
    fn pdsim(&self, args: &[&str]) -> (i32, String, String) {
        self.pdsim_env(args, &[])
    }

    fn pdsim_env(&self, args: &[&str], env: &[(&str, &Path)]) -> (i32, String, String) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pdsim"));
        command.args(args).current_dir(&self.0);
        for (k, v) in env {
            command.env(k, v);
        }
        let output = command.output().expect("the pdsim binary runs");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// A Mooncake trace of the bundled trace's first `n` rows.
    fn trace(&self, rel: &str, n: usize) -> PathBuf {
        let text = std::fs::read_to_string(root().join("traces/default.jsonl")).unwrap();
        let head: Vec<&str> = text.lines().take(n).collect();
        self.write(rel, &(head.join("\n") + "\n"))
    }

    /// The default scenario with the `coding-agent` workload shape.
    fn shape_scenario(&self) -> PathBuf {
        let text = std::fs::read_to_string(root().join("scenarios/default.yaml")).unwrap();
        let text = text.replace("\ncluster:", "\nworkload:\n  shape: coding-agent\ncluster:");
        assert!(text.contains("shape: coding-agent"));
        self.write("shape.yaml", &text)
    }

    /// Every file under `rel` with its contents, for before/after checks.
    fn snapshot(&self, rel: &str) -> Vec<(String, Vec<u8>)> {
        fn walk(dir: &Path, base: &Path, out: &mut Vec<(String, Vec<u8>)>) {
            let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                let path = e.path();
                let name = path.strip_prefix(base).unwrap().display().to_string();
                if e.file_type().unwrap().is_dir() {
                    out.push((name + "/", Vec::new()));
                    walk(&path, base, out);
                } else {
                    out.push((name, std::fs::read(&path).unwrap()));
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.path(rel), &self.path(rel), &mut out);
        out
    }

    /// The hidden temporary entries in `rel`.
    fn partials(&self, rel: &str) -> Vec<String> {
        std::fs::read_dir(self.path(rel))
            .map(|entries| {
                entries
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.contains(".partial-") || n.contains(".old-"))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// How every Perfetto trace pdsim writes begins.
const PERFETTO_HEAD: &str = "{\"otherData\":{\"writer\":\"pdsim\"},";

const SCENARIO: &str = "scenarios/default.yaml";
const DEPLOYMENT: &str = "deployments/default.yaml";

fn scenario() -> String {
    s(&root().join(SCENARIO))
}

fn deployment() -> String {
    s(&root().join(DEPLOYMENT))
}

/// A user's thesis folder: the files a wrong `--out` must never touch.
fn thesis(dir: &Scratch) -> Vec<(String, Vec<u8>)> {
    dir.write("thesis/chapter1.tex", "\\chapter{Introduction}\n");
    dir.write("thesis/figures/plot.csv", "x,y\n1,2\n");
    dir.snapshot("thesis")
}

#[test]
fn a_users_folder_survives_out_for_every_command() {
    let dir = Scratch::new("foreign");
    let before = thesis(&dir);
    let trace = s(&dir.trace("t.jsonl", 8));
    // A shard result to merge, made first.
    let (code, _, stderr) = dir.pdsim(&[
        "plan",
        "--scenario",
        &scenario(),
        "--trace",
        &trace,
        "--slo",
        "ttft_ms=500",
        "--max-runs",
        "1",
        "--shard",
        "0/1",
        "--out",
        "shard",
        &deployment(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let commands: Vec<Vec<String>> = vec![
        vec!["run".into(), "--trace".into(), trace.clone()],
        vec![
            "compare".into(),
            "--scenario".into(),
            scenario(),
            "--trace".into(),
            trace.clone(),
            deployment(),
        ],
        vec![
            "plan".into(),
            "--scenario".into(),
            scenario(),
            "--trace".into(),
            trace.clone(),
            "--slo".into(),
            "ttft_ms=500".into(),
            "--max-runs".into(),
            "1".into(),
            deployment(),
        ],
        vec!["plan".into(), "merge".into(), "shard".into()],
    ];
    for command in &commands {
        for out in ["thesis", "thesis/", "./thesis", "thesis/figures/plot.csv"] {
            let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
            args.extend(["--out", out]);
            let (code, stdout, stderr) = dir.pdsim(&args);
            assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
            assert!(
                stderr.contains(&format!("--out {out}")) && stderr.contains("not"),
                "{args:?}: the refusal names the folder: {stderr}"
            );
            assert_eq!(dir.snapshot("thesis"), before, "{args:?} touched thesis/");
        }
    }
    assert!(dir.partials("").is_empty(), "{:?}", dir.partials(""));
}

#[test]
fn the_working_folder_its_parents_the_root_and_home_are_refused() {
    let dir = Scratch::new("cwd");
    let trace = s(&dir.trace("t.jsonl", 5));
    dir.write("keep.txt", "mine\n");
    let work = dir.path("work");
    std::fs::create_dir_all(work.join("deeper")).unwrap();
    let before = dir.snapshot("");
    let parent = s(&dir.0);
    for out in [".", "./", "..", "/", "work/..", parent.as_str()] {
        let (code, _, stderr) = dir.pdsim(&["run", "--trace", &trace, "--out", out]);
        assert_eq!(code, 2, "--out {out}: {stderr}");
        assert!(stderr.contains(&format!("--out {out}")), "{stderr}");
    }
    // The home folder, even when it is named through a link-free path.
    let home = dir.path("work");
    let (code, _, stderr) = dir.pdsim_env(
        &["run", "--trace", &trace, "--out", "work"],
        &[("HOME", &home)],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("home"), "{stderr}");
    // An ancestor of the working folder, run from inside it.
    let mut command = Command::new(env!("CARGO_BIN_EXE_pdsim"));
    let status = command
        .args(["run", "--trace", &trace, "--out", "../../work"])
        .current_dir(work.join("deeper"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(2));
    assert_eq!(dir.snapshot(""), before, "nothing was touched");
}

#[test]
fn an_earlier_result_is_replaced_with_a_note_and_only_when_it_is_pdsims_alone() {
    let dir = Scratch::new("replace");
    let trace = s(&dir.trace("t.jsonl", 5));
    let (code, _, stderr) = dir.pdsim(&["run", "--trace", &trace, "--out", "r"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("replacing"), "{stderr}");
    let marker = std::fs::read_to_string(dir.path("r/.pdsim-result")).unwrap();
    assert!(marker.starts_with("pdsim result:") && marker.contains("pdsim run"));
    assert!(
        marker.lines().any(|l| l.starts_with("summary.json\t")),
        "{marker}"
    );
    let (code, _, stderr) = dir.pdsim(&["run", "--trace", &trace, "--out", "r"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("replacing the earlier pdsim result at r"),
        "{stderr}"
    );
    assert!(dir.path("r/summary.json").is_file());
    assert!(dir.partials("").is_empty(), "{:?}", dir.partials(""));
    // A note the user added to the result makes it theirs too.
    dir.write("r/my-notes.txt", "keep me\n");
    let (code, _, stderr) = dir.pdsim(&["run", "--trace", &trace, "--out", "r"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("my-notes.txt"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.path("r/my-notes.txt")).unwrap(),
        "keep me\n"
    );
    // A symbolic link to a result is not followed.
    std::fs::remove_file(dir.path("r/my-notes.txt")).unwrap();
    std::os::unix::fs::symlink(dir.path("r"), dir.path("link")).unwrap();
    let (code, _, stderr) = dir.pdsim(&["run", "--trace", &trace, "--out", "link"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("symbolic link"), "{stderr}");
    assert!(dir.path("r/summary.json").is_file(), "the target is intact");
    // A marker that is not pdsim's does not make a folder replaceable.
    dir.write("fake/.pdsim-result", "my own file\n");
    let (code, _, _) = dir.pdsim(&["run", "--trace", &trace, "--out", "fake"]);
    assert_eq!(code, 2);
    assert!(dir.path("fake/.pdsim-result").is_file());
}

#[test]
fn a_file_of_a_result_edited_since_pdsim_wrote_it_is_the_users() {
    let dir = Scratch::new("edited");
    let trace = s(&dir.trace("t.jsonl", 5));
    let (code, _, stderr) = dir.pdsim(&["run", "--trace", &trace, "--out", "r"]);
    assert_eq!(code, 0, "{stderr}");
    // The user corrects a figure in the report: the result now holds their
    // work, and is refused whole, naming the file.
    let report = std::fs::read_to_string(dir.path("r/report.md")).unwrap();
    let edited = report.replacen('#', "# (checked by me)", 1);
    std::fs::write(dir.path("r/report.md"), &edited).unwrap();
    let before = dir.snapshot("r");
    let (code, stdout, stderr) = dir.pdsim(&["run", "--trace", &trace, "--out", "r"]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("--out r: ") && stderr.contains("report.md (changed since pdsim wrote it)"),
        "{stderr}"
    );
    assert_eq!(dir.snapshot("r"), before, "the edited result was touched");
    // Put back as pdsim wrote it, the result is pdsim's again.
    std::fs::write(dir.path("r/report.md"), &report).unwrap();
    let (code, _, stderr) = dir.pdsim(&["run", "--trace", &trace, "--out", "r"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("replacing the earlier pdsim result at r"),
        "{stderr}"
    );
    // A marker from before digests were recorded lists names alone: such a
    // result is replaced as before, edited or not.
    let marker = std::fs::read_to_string(dir.path("r/.pdsim-result")).unwrap();
    let names_only: String = marker
        .lines()
        .map(|l| l.split('\t').next().unwrap().to_string() + "\n")
        .collect();
    assert_ne!(names_only, marker);
    std::fs::write(dir.path("r/.pdsim-result"), names_only).unwrap();
    std::fs::write(dir.path("r/report.md"), "edited\n").unwrap();
    let (code, _, stderr) = dir.pdsim(&["run", "--trace", &trace, "--out", "r"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("replacing the earlier pdsim result at r"),
        "{stderr}"
    );
    assert!(dir.partials("").is_empty(), "{:?}", dir.partials(""));
}

#[test]
fn default_names_tell_runs_apart_and_a_rerun_replaces_its_own() {
    let dir = Scratch::new("names");
    // Two traces with the same file name in different folders.
    let a = s(&dir.trace("a/t.jsonl", 5));
    let b = s(&dir.trace("b/t.jsonl", 6));
    let results = |dir: &Scratch| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir.path("results"))
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let (code, out_a, stderr) = dir.pdsim(&["run", "--trace", &a]);
    assert_eq!(code, 0, "{stderr}");
    let (code, out_b, stderr) = dir.pdsim(&["run", "--trace", &b]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stderr.contains("replacing"), "{stderr}");
    let names = results(&dir);
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(
        names.iter().all(|n| n.contains("--t--seed0--")),
        "{names:?}"
    );
    let line = |out: &str| out.lines().last().unwrap().to_string();
    assert_ne!(line(&out_a), line(&out_b));
    // Another seed, another SLO: other folders.
    let (code, _, _) = dir.pdsim(&["run", "--trace", &a, "--seed", "1"]);
    assert_eq!(code, 0);
    let (code, _, _) = dir.pdsim(&["run", "--trace", &a, "--slo", "ttft_ms=100"]);
    assert_eq!(code, 0);
    assert_eq!(results(&dir).len(), 4, "{:?}", results(&dir));
    // The same command again, from a path spelled differently, replaces
    // its own folder.
    let (code, again, stderr) = dir.pdsim(&["run", "--trace", "a/./t.jsonl"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(line(&again), line(&out_a));
    assert!(
        stderr.contains("replacing the earlier pdsim result"),
        "{stderr}"
    );
    assert_eq!(results(&dir).len(), 4);
    // Shapes: the rate and the count are in the name.
    let shape = s(&dir.shape_scenario());
    for rate in ["20", "40"] {
        let (code, _, stderr) = dir.pdsim(&[
            "run",
            "--scenario",
            &shape,
            "--rate",
            rate,
            "--requests",
            "3",
        ]);
        assert_eq!(code, 0, "{stderr}");
    }
    let names = results(&dir);
    assert!(
        names.iter().any(|n| n.contains("coding-agent-r20-n3"))
            && names.iter().any(|n| n.contains("coding-agent-r40-n3")),
        "{names:?}"
    );
    // Compare: two traces, two folders.
    for trace in [&a, &b] {
        let (code, _, stderr) = dir.pdsim(&[
            "compare",
            "--scenario",
            &scenario(),
            "--trace",
            trace,
            &deployment(),
        ]);
        assert_eq!(code, 0, "{stderr}");
        assert!(!stderr.contains("replacing"), "{stderr}");
    }
    assert_eq!(
        results(&dir)
            .iter()
            .filter(|n| n.starts_with("compare--"))
            .count(),
        2
    );
}

#[test]
fn perfetto_never_replaces_a_fifo_a_folder_or_a_users_partial_file() {
    use std::os::unix::fs::FileTypeExt;
    let dir = Scratch::new("perfetto");
    let trace = s(&dir.trace("t.jsonl", 5));
    let fifo = dir.path("trace.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status();
    match made {
        Ok(status) if status.success() => {
            let reader = {
                let fifo = fifo.clone();
                std::thread::spawn(move || std::fs::read(&fifo).unwrap())
            };
            let (code, _, stderr) = dir.pdsim(&[
                "run",
                "--trace",
                &trace,
                "--out",
                "r1",
                "--perfetto",
                "trace.fifo",
            ]);
            assert_eq!(code, 0, "{stderr}");
            let bytes = reader.join().unwrap();
            assert!(
                bytes.starts_with(PERFETTO_HEAD.as_bytes()),
                "the reader got the trace"
            );
            let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
            assert!(kind.is_fifo(), "the FIFO is still a FIFO");
        }
        _ => println!("skipped the FIFO case: mkfifo is not available"),
    }
    // A character device is written in place.
    let (code, _, stderr) = dir.pdsim(&[
        "run",
        "--trace",
        &trace,
        "--out",
        "r2",
        "--perfetto",
        "/dev/null",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
    // A folder is refused, and nothing is written.
    dir.write("folder/inside.txt", "x\n");
    let (code, _, stderr) = dir.pdsim(&[
        "run",
        "--trace",
        &trace,
        "--out",
        "r3",
        "--perfetto",
        "folder",
    ]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--perfetto folder"), "{stderr}");
    assert!(dir.path("folder/inside.txt").is_file() && !dir.path("r3").exists());
    // A trace pdsim wrote is replaced whole; a user's file of the old
    // partial name is untouched.
    dir.write("p.json.partial", "user's\n");
    for (out, replaced) in [("r4", false), ("r5", true)] {
        let (code, _, stderr) = dir.pdsim(&[
            "run",
            "--trace",
            &trace,
            "--out",
            out,
            "--perfetto",
            "p.json",
        ]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(
            stderr.contains("replacing the file p.json"),
            replaced,
            "{stderr}"
        );
    }
    let text = std::fs::read_to_string(dir.path("p.json")).unwrap();
    assert!(text.starts_with(PERFETTO_HEAD));
    assert_eq!(
        std::fs::read_to_string(dir.path("p.json.partial")).unwrap(),
        "user's\n"
    );
    assert!(dir.partials("").is_empty(), "{:?}", dir.partials(""));
}

#[test]
fn perfetto_never_replaces_a_users_file_an_input_or_a_result() {
    let dir = Scratch::new("perfetto-files");
    let trace = s(&dir.trace("t.jsonl", 5));
    let scenario = dir.write(
        "sc.yaml",
        &std::fs::read_to_string(root().join(SCENARIO)).unwrap(),
    );
    let (code, _, stderr) = dir.pdsim(&["run", "--trace", &trace, "--out", "earlier"]);
    assert_eq!(code, 0, "{stderr}");
    dir.write("notes.json", "{\"mine\": true}\n");
    let before = dir.snapshot("");
    // Each refused before anything is simulated or written, naming the
    // file: a user's file, the run's trace and scenario, a file in an
    // earlier result, and the results folder itself or a file in it.
    let sc = s(&scenario);
    let cases: [(&str, &str, &str); 6] = [
        ("notes.json", "r", "not a Perfetto trace pdsim wrote"),
        ("t.jsonl", "r", "which this run reads"),
        ("sc.yaml", "r", "which this run reads"),
        ("earlier/summary.json", "r", "inside the pdsim result"),
        ("x", "x", "is the results folder (--out x)"),
        ("x/trace.json", "x", "is the results folder (--out x)"),
    ];
    for (file, out, why) in cases {
        let (code, stdout, stderr) = dir.pdsim(&[
            "run",
            "--scenario",
            &sc,
            "--trace",
            &trace,
            "--out",
            out,
            "--perfetto",
            file,
        ]);
        assert_eq!(code, 2, "--perfetto {file}: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!("--perfetto {file}: ")) && stderr.contains(why),
            "--perfetto {file}: {stderr}"
        );
        assert!(!stdout.contains("results:"), "{stdout}");
        assert_eq!(dir.snapshot(""), before, "--perfetto {file} touched a file");
    }
}

#[test]
fn merge_and_import_never_write_over_what_they_read() {
    let dir = Scratch::new("inputs");
    let trace = s(&dir.trace("t.jsonl", 8));
    let (code, _, stderr) = dir.pdsim(&[
        "plan",
        "--scenario",
        &scenario(),
        "--trace",
        &trace,
        "--slo",
        "ttft_ms=500",
        "--max-runs",
        "1",
        "--shard",
        "0/1",
        "--out",
        "shard",
        &deployment(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = dir.pdsim(&[
        "export",
        "--scenario",
        &scenario(),
        "--deployment",
        &deployment(),
        "--out",
        "exported",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let before = dir.snapshot("");
    let sc = scenario();
    let cases: [&[&str]; 4] = [
        &["plan", "merge", "shard", "--out", "shard"],
        &["plan", "merge", "shard/plan.json", "--out", "./shard/"],
        &["import", "--scenario", &sc, "exported", "--out", "exported"],
        &[
            "import",
            "--scenario",
            &sc,
            "./exported/",
            "--out",
            "exported",
        ],
    ];
    for args in cases {
        let (code, stdout, stderr) = dir.pdsim(args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(
            stderr.contains("--out") && stderr.contains("which this command reads"),
            "{args:?}: {stderr}"
        );
        assert_eq!(dir.snapshot(""), before, "{args:?} replaced its input");
    }
    // Elsewhere they write as ever.
    let (code, _, stderr) = dir.pdsim(&["plan", "merge", "shard", "--out", "merged"]);
    assert_eq!(code, 0, "{stderr}");
}

/// A measured run folder as `calibrate` reads it: one short inference-perf
/// run of Llama-2-7B on one H100, its "measurements" made up (only the
/// folder's shape matters here).
fn measured_run(dir: &Scratch, rel: &str) -> PathBuf {
    dir.write(
        &format!("{rel}/exp-config.yaml"),
        "model: meta-llama/Llama-2-7b-hf\ntensor_parallelism: 1\napp: inference-perf\n",
    );
    dir.write(
        &format!("{rel}/results/config.yaml"),
        "api: {type: completion, streaming: true}\ndata:\n  type: shared_prefix\n  shared_prefix: {num_groups: 1, num_prompts_per_group: 2, system_prompt_len: 20, question_len: 20, output_len: 8}\nload:\n  type: constant\n  stages: [{rate: 1.0, duration: 2}]\nserver: {type: vllm, model_name: meta-llama/Llama-2-7b-hf, base_url: 'http://localhost:8000', ignore_eos: true}\n",
    );
    dir.write(
        &format!("{rel}/results/summary_lifecycle_metrics.json"),
        r#"{"load_summary": {"count": 2}, "successes": {"count": 2, "latency": {"time_to_first_token": {"mean": 0.02, "p90": 0.03}, "request_latency": {"mean": 0.2, "p90": 0.3}}}, "failures": {"count": 0}}"#,
    );
    dir.path(rel)
}

#[test]
fn no_command_writes_over_what_it_reads() {
    // A pdsim result holding documents another command reads: an imported
    // deployment with its EndpointPickerConfig. Every command given it (or
    // given the result as a catalog folder) with `--out` naming the result
    // would replace what it reads; each is refused before anything is
    // written, naming the input and the folder.
    let dir = Scratch::new("reads");
    let trace = s(&dir.trace("t.jsonl", 8));
    let sc = scenario();
    let (code, _, stderr) = dir.pdsim(&[
        "export",
        "--scenario",
        &sc,
        "--deployment",
        &deployment(),
        "--out",
        "ex",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = dir.pdsim(&["import", "--scenario", &sc, "ex", "--out", "im"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = dir.pdsim(&[
        "plan",
        "--scenario",
        &sc,
        "--trace",
        &trace,
        "--slo",
        "ttft_ms=500",
        "--max-runs",
        "1",
        "--shard",
        "0/1",
        "--out",
        "shard",
        &deployment(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    // A deployment outside the result whose router configuration is the
    // one inside it: read through the deployment, named by no flag.
    let imported = std::fs::read_to_string(dir.path("im/deployment.yaml")).unwrap();
    assert!(
        imported.contains("endpoint_picker_config: epp-config.yaml"),
        "{imported}"
    );
    dir.write(
        "outside.yaml",
        &imported.replace(
            "endpoint_picker_config: epp-config.yaml",
            "endpoint_picker_config: im/epp-config.yaml",
        ),
    );
    let run_dir = s(&measured_run(&dir, "measured"));
    let before = dir.snapshot("");
    let deployment_in = "im/deployment.yaml";
    let plan = |deployment: &'static str, more: &[&'static str]| -> Vec<String> {
        let mut args: Vec<String> = [
            "plan",
            "--scenario",
            &sc,
            "--trace",
            &trace,
            "--slo",
            "ttft_ms=500",
            "--max-runs",
            "1",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        args.extend(more.iter().map(|a| a.to_string()));
        args.push(deployment.into());
        args
    };
    let owned = |args: &[&str]| -> Vec<String> { args.iter().map(|a| a.to_string()).collect() };
    // (the command without --out, the --out, the input its refusal names)
    let cases: Vec<(Vec<String>, &str, &str)> = vec![
        (
            owned(&[
                "run",
                "--scenario",
                &sc,
                "--deployment",
                deployment_in,
                "--trace",
                &trace,
            ]),
            "im",
            deployment_in,
        ),
        (
            owned(&[
                "run",
                "--scenario",
                &sc,
                "--deployment",
                "outside.yaml",
                "--trace",
                &trace,
            ]),
            "im",
            "im/epp-config.yaml",
        ),
        (
            owned(&["run", "--trace", &trace, "--catalog", "im"]),
            "im",
            "is im",
        ),
        (
            owned(&[
                "run",
                "--scenario",
                &sc,
                "--deployment",
                deployment_in,
                "--trace",
                &trace,
            ]),
            "./im/",
            deployment_in,
        ),
        (
            owned(&[
                "compare",
                "--scenario",
                &sc,
                "--trace",
                &trace,
                deployment_in,
            ]),
            "im",
            deployment_in,
        ),
        (
            owned(&[
                "compare",
                "--scenario",
                &sc,
                "--trace",
                &trace,
                "outside.yaml",
            ]),
            "im",
            "im/epp-config.yaml",
        ),
        (plan(deployment_in, &[]), "im", deployment_in),
        (
            plan("outside.yaml", &["--shard", "0/1"]),
            "im",
            "im/epp-config.yaml",
        ),
        (owned(&["plan", "merge", "shard"]), "shard", "shard"),
        (
            owned(&["export", "--scenario", &sc, "--deployment", deployment_in]),
            "im",
            deployment_in,
        ),
        (
            owned(&["export", "--scenario", &sc, "--deployment", "outside.yaml"]),
            "im",
            "im/epp-config.yaml",
        ),
        (
            owned(&["import", "--scenario", &sc, "ex", "--catalog", "im"]),
            "im",
            "is im",
        ),
        (
            owned(&[
                "calibrate",
                "--catalog",
                "im",
                "--fit",
                "hbm_derate",
                "--iterations",
                "1",
                &run_dir,
            ]),
            "im",
            "is im",
        ),
        (
            owned(&[
                "calibrate",
                "--scenario",
                &sc,
                "--deployment",
                deployment_in,
                "--iterations",
                "1",
                &run_dir,
            ]),
            "im",
            deployment_in,
        ),
    ];
    for (command, out, input) in &cases {
        let mut args: Vec<&str> = command.iter().map(String::as_str).collect();
        args.extend(["--out", out]);
        let (code, stdout, stderr) = dir.pdsim(&args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!("--out {out}: "))
                && stderr.contains(input)
                && stderr.contains("which this command reads"),
            "{args:?}: the refusal names the folder and the input: {stderr}"
        );
        assert!(!stdout.contains("results:"), "{args:?}: {stdout}");
        assert_eq!(dir.snapshot(""), before, "{args:?} replaced what it read");
    }
    assert!(dir.partials("").is_empty(), "{:?}", dir.partials(""));
    // Given another folder, the same commands write as ever.
    let (code, _, stderr) = dir.pdsim(&[
        "run",
        "--scenario",
        &sc,
        "--deployment",
        "outside.yaml",
        "--trace",
        &trace,
        "--out",
        "elsewhere",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let (code, _, stderr) = dir.pdsim(&[
        "export",
        "--scenario",
        &sc,
        "--deployment",
        deployment_in,
        "--out",
        "ex",
    ]);
    assert_eq!(code, 0, "{stderr}");
}

/// Starts a long run and waits for its staging folder; `None` if it never
/// appears.
fn start_long_run(dir: &Scratch, out: &str) -> (std::process::Child, String) {
    let shape = s(&dir.shape_scenario());
    let child = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args([
            "run",
            "--scenario",
            &shape,
            "--rate",
            "50",
            "--requests",
            "5000000",
            "--out",
            out,
            "--perfetto",
            "long.json",
        ])
        .current_dir(&dir.0)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let staging = format!(".{out}.partial-{}", child.id());
    let start = Instant::now();
    // The Perfetto partial is opened just after the staging folder, so wait
    // for both: on a loaded machine a signal sent between the two would
    // find no partial to check.
    let partial = format!(".long.json.partial-{}", child.id());
    while !dir.path(&staging).join(".pdsim-result").exists() || !dir.path(&partial).exists() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the staging folder {staging} or the partial trace {partial} never appeared"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, staging)
}

/// Whether this test process was started with signal `n` ignored (the
/// pdsim it starts inherits that, and keeps it ignored).
fn ignored_here(n: u32) -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("SigIgn:"))
                .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        })
        .is_some_and(|mask| mask & (1 << (n - 1)) != 0)
}

#[test]
fn sigterm_and_sigint_remove_the_unfinished_results() {
    for (signal, number, code) in [("TERM", 15, 143), ("INT", 2, 130)] {
        let dir = Scratch::new("signal");
        let (mut child, staging) = start_long_run(&dir, "long");
        if ignored_here(number) {
            // A background job of a script ignores SIGINT; pdsim keeps it
            // so, as the shell convention asks.
            println!(
                "SIG{signal} is ignored by this test's parent: checking pdsim keeps ignoring it"
            );
            let sent = Command::new("kill")
                .args(["-s", signal, &child.id().to_string()])
                .status()
                .unwrap();
            assert!(sent.success());
            std::thread::sleep(Duration::from_millis(300));
            assert!(child.try_wait().unwrap().is_none(), "pdsim kept running");
            child.kill().unwrap();
            child.wait().unwrap();
            continue;
        }
        let partial = format!(".long.json.partial-{}", child.id());
        assert!(dir.path(&partial).exists(), "the trace is being written");
        let sent = Command::new("kill")
            .args(["-s", signal, &child.id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "SIG{signal}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "one line on stderr: {stderr}");
        assert!(
            stderr.contains(&format!("interrupted by SIG{signal}")),
            "{stderr}"
        );
        assert!(!dir.path(&staging).exists(), "the staging folder is gone");
        assert!(!dir.path(&partial).exists(), "the partial trace is gone");
        assert!(!dir.path("long").exists() && !dir.path("long.json").exists());
        assert!(dir.partials("").is_empty(), "{:?}", dir.partials(""));
    }
}

/// Whether stderr holds a note saying `what`.
fn noted(stderr: &str, what: &str) -> bool {
    stderr
        .lines()
        .any(|l| l.starts_with("pdsim run: note: ") && l.contains(what))
}

/// The id of a process that has exited.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    pid
}

#[test]
fn a_killed_runs_staging_is_cleared_by_the_next_run_but_only_with_the_marker() {
    if !Path::new("/proc/self").exists() {
        println!("skipped: no /proc to tell running processes");
        return;
    }
    let dir = Scratch::new("stale");
    let trace = s(&dir.trace("t.jsonl", 5));
    // A real run killed outright leaves its staging folder...
    let (mut child, staging) = start_long_run(&dir, "killed");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(dir.path(&staging).exists());
    // ... beside hand-made ones: a stale one with the marker and its lock
    // file, a stale one without the marker (a user's), one of a running
    // process (this test), and an earlier result a killed replacement had
    // moved aside.
    let dead = dead_pid();
    let marked = format!(".r.partial-{dead}");
    dir.write(
        &format!("{marked}/.pdsim-result"),
        "pdsim result: written by pdsim\nsummary.json\n",
    );
    dir.write(&format!("{marked}/.pdsim-lock"), "");
    dir.write(&format!("{marked}/summary.json"), "{}\n");
    let unmarked = format!(".mine.partial-{dead}");
    dir.write(&format!("{unmarked}/precious.txt"), "mine\n");
    let alive = format!(".other.partial-{}", std::process::id());
    dir.write(
        &format!("{alive}/.pdsim-result"),
        "pdsim result: written by pdsim\n",
    );
    let aside = format!(".earlier.old-{dead}");
    dir.write(
        &format!("{aside}/.pdsim-result"),
        "pdsim result: written by pdsim\nsummary.json\n",
    );
    dir.write(&format!("{aside}/.pdsim-lock"), "");
    dir.write(&format!("{aside}/summary.json"), "{\"earlier\": true}\n");
    // A run's folder whose process is not in this /proc but whose lock is
    // held: a run in another container or on another machine.
    let elsewhere = format!(".shard.partial-{dead}");
    dir.write(
        &format!("{elsewhere}/.pdsim-result"),
        "pdsim result: written by pdsim\nrequests.csv\n",
    );
    dir.write(&format!("{elsewhere}/requests.csv"), "id\n");
    let lock = dir.write(&format!("{elsewhere}/.pdsim-lock"), "");
    let held = std::fs::OpenOptions::new().write(true).open(&lock).unwrap();
    held.lock().unwrap();
    // A folder of an older pdsim, which locks nothing: whether its run is
    // going cannot be told.
    let legacy = format!(".legacy.partial-{dead}");
    dir.write(
        &format!("{legacy}/.pdsim-result"),
        "pdsim result: written by pdsim\n",
    );
    dir.write(&format!("{legacy}/requests.csv"), "id\n");
    // A stopped run's folder to which a user added a file, and an earlier
    // result moved aside whose name a user's folder took since.
    let mixed = format!(".mixed.partial-{dead}");
    dir.write(
        &format!("{mixed}/.pdsim-result"),
        "pdsim result: written by pdsim\nsummary.json\n",
    );
    dir.write(&format!("{mixed}/.pdsim-lock"), "");
    dir.write(&format!("{mixed}/summary.json"), "{}\n");
    dir.write(&format!("{mixed}/notes.txt"), "mine\n");
    let theirs = format!(".theirs.old-{dead}");
    dir.write(
        &format!("{theirs}/.pdsim-result"),
        "pdsim result: written by pdsim\nsummary.json\n",
    );
    dir.write(&format!("{theirs}/.pdsim-lock"), "");
    dir.write(&format!("{theirs}/summary.json"), "{}\n");
    dir.write("theirs/thesis.tex", "mine\n");
    let (code, _, stderr) = dir.pdsim(&["run", "--trace", &trace, "--out", "r"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        dir.path(&format!("{elsewhere}/requests.csv")).is_file(),
        "a folder whose lock is held is kept: {stderr}"
    );
    assert!(!stderr.contains(&elsewhere), "and silently: {stderr}");
    drop(held);
    assert!(
        dir.path(&format!("{legacy}/requests.csv")).is_file()
            && noted(&stderr, &format!("kept ./{legacy}, left by a pdsim run")),
        "a folder without a lock file is kept, and said so: {stderr}"
    );
    assert!(
        !dir.path(&format!("{mixed}/summary.json")).exists()
            && dir.path(&format!("{mixed}/notes.txt")).is_file()
            && stderr.contains(&format!("{mixed}, but kept the folder")),
        "only pdsim's files go from a folder a user added to: {stderr}"
    );
    assert!(
        dir.path(&format!("{theirs}/summary.json")).is_file()
            && dir.path("theirs/thesis.tex").is_file()
            && noted(
                &stderr,
                &format!("kept ./{theirs}, an earlier pdsim result")
            ),
        "an earlier result whose place a user's folder took is kept: {stderr}"
    );
    assert!(
        !dir.path(&staging).exists(),
        "the killed run's folder is gone: {stderr}"
    );
    assert!(!dir.path(&marked).exists(), "{stderr}");
    assert!(
        stderr.contains(&staging) && stderr.contains(&marked),
        "said so: {stderr}"
    );
    assert!(
        !dir.path(&format!(".long.json.partial-{}", child.id()))
            .exists(),
        "the killed run's partial trace is gone: {stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path(&format!("{unmarked}/precious.txt"))).unwrap(),
        "mine\n",
        "a folder without the marker is left alone"
    );
    assert!(
        dir.path(&alive).exists(),
        "a running process's folder is left alone"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path("earlier/summary.json")).unwrap(),
        "{\"earlier\": true}\n",
        "the result moved aside is put back: {stderr}"
    );
    assert!(dir.path("r/summary.json").is_file());
}

/// The `unshare` arguments that start a command in a PID namespace of its
/// own, as a container does (as root, or through a user namespace);
/// `None` where this system allows neither.
fn pid_namespace() -> Option<Vec<&'static str>> {
    for args in [
        vec!["-p", "-f", "--mount-proc"],
        vec!["-r", "-p", "-f", "--mount-proc"],
    ] {
        let works = Command::new("unshare")
            .args(&args)
            .arg("true")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if works {
            return Some(args);
        }
    }
    None
}

#[test]
fn a_run_in_another_container_leaves_a_running_runs_folder_alone() {
    // Two shards of one study written to one shared folder from two
    // containers (or two machines): neither sees the other's process.
    let Some(unshare) = pid_namespace() else {
        println!("skipped: cannot start a process in a PID namespace of its own here");
        return;
    };
    let dir = Scratch::new("namespace");
    let trace = s(&dir.trace("t.jsonl", 5));
    let (mut child, staging) = start_long_run(&dir, "shard-0");
    let partial = format!(".long.json.partial-{}", child.id());
    let output = Command::new("unshare")
        .args(&unshare)
        .arg(env!("CARGO_BIN_EXE_pdsim"))
        .args(["run", "--trace", &trace, "--out", "shard-1"])
        .current_dir(&dir.0)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    let marker = std::fs::read_to_string(dir.path(&staging).join(".pdsim-result"));
    let running = child.try_wait().unwrap().is_none();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(running, "the long run was still going");
    let marker = marker.unwrap_or_else(|e| panic!("{staging} is gone ({e}): {stderr}"));
    for file in marker.lines().skip(1) {
        assert!(dir.path(&staging).join(file).is_file(), "{file}: {stderr}");
    }
    assert!(
        marker.lines().any(|l| l == "requests.csv"),
        "the marker lists the files as they are written: {marker}"
    );
    assert!(dir.path(&partial).is_file(), "{stderr}");
    assert!(dir.path("shard-1/summary.json").is_file());
}

#[test]
fn absurd_numbers_and_flags_that_cannot_apply_are_usage_errors() {
    let dir = Scratch::new("counts");
    let trace = s(&dir.trace("t.jsonl", 8));
    let shape = s(&dir.shape_scenario());
    let (sc, dp) = (scenario(), deployment());
    let run = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = vec!["run".into(), "--out".into(), "out".into()];
        v.extend(extra.iter().map(|x| x.to_string()));
        v
    };
    let shaped = |rate: &str, requests: &str| {
        let (rate, requests) = (format!("--rate={rate}"), format!("--requests={requests}"));
        run(&["--scenario", &shape, &rate, &requests])
    };
    let compare = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "compare",
            "--out",
            "out",
            "--scenario",
            &sc,
            "--trace",
            &trace,
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        v.extend(extra.iter().map(|x| x.to_string()));
        v.push(dp.clone());
        v
    };
    let plan = |extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "plan",
            "--out",
            "out",
            "--scenario",
            &sc,
            "--trace",
            &trace,
            "--slo",
            "ttft_ms=500",
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        v.extend(extra.iter().map(|x| x.to_string()));
        v.push(dp.clone());
        v
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (shaped("1e-300", "3"), "--rate"),
        (shaped("NaN", "3"), "--rate"),
        (shaped("inf", "3"), "--rate"),
        (shaped("-1", "3"), "--rate"),
        (shaped("0", "3"), "--rate"),
        (shaped("1e8", "3"), "--rate"),
        (shaped("1e-5", "100000"), "--rate"),
        (shaped("10", "0"), "--requests"),
        (shaped("10", "100000001"), "--requests"),
        (run(&["--scenario", &shape, "--rate", "10"]), "--requests"),
        (run(&["--trace", &trace, "--rate", "10"]), "--rate"),
        (run(&["--trace", &trace, "--requests", "10"]), "--requests"),
        (run(&["--rate", "10", "--requests", "5"]), "--rate"),
        (
            run(&["--trace", &trace, "--gpu-hour-usd=-1"]),
            "--gpu-hour-usd",
        ),
        (
            run(&["--trace", &trace, "--gpu-hour-usd", "1e300"]),
            "--gpu-hour-usd",
        ),
        (run(&["--trace", &trace, "--slo", "ttft_ms=1e300"]), "--slo"),
        (run(&["--trace", &trace, "--slo", "ttft_ms=NaN"]), "--slo"),
        (
            run(&["--trace", &trace, "--catalog", "no-such-catalog"]),
            "--catalog",
        ),
        (compare(&["--catalog", "t.jsonl"]), "--catalog"),
        (plan(&["--catalog", "no-such-catalog"]), "--catalog"),
        (compare(&["--seeds", "0"]), "--seeds"),
        (compare(&["--seeds", "100000000000"]), "--seeds"),
        (compare(&["--seeds", "1e11"]), "--seeds"),
        (compare(&["--jobs", "0"]), "--jobs"),
        (compare(&["--rate", "5"]), "--rate"),
        (plan(&["--max-runs", "0"]), "--max-runs"),
        (plan(&["--max-runs", "5000"]), "--max-runs"),
        (plan(&["--shard", "2/2"]), "--shard"),
        (plan(&["--shard", "0/0"]), "--shard"),
        (plan(&["--shard", "0/1000000"]), "--shard"),
        (plan(&["--shard", "x"]), "--shard"),
        (plan(&["--max-requests", "1"]), "--max-requests"),
        (plan(&["--max-requests", "1000000000"]), "--max-requests"),
        (plan(&["--target-rate", "NaN"]), "--target-rate"),
        (plan(&["--target-rate", "1e-300"]), "--target-rate"),
        (plan(&["--attainment", "0"]), "--attainment"),
        (plan(&["--attainment", "NaN"]), "--attainment"),
        (plan(&["--jobs", "0"]), "--jobs"),
        (plan(&["--gpu-hour-usd", "2"]), "--gpu-hour-usd"),
    ];
    for (args, flag) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = dir.pdsim(&args);
        assert_eq!(code, 2, "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(flag), "{args:?}: names {flag}: {stderr}");
        assert!(!dir.path("out").exists(), "{args:?} wrote results");
    }
    // A plan on a workload shape asks for a trace, not for flags it lacks.
    let (code, _, stderr) = dir.pdsim(&["plan", "--scenario", &shape, "--slo", "ttft_ms=500", &dp]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--trace") && !stderr.contains("--rate"),
        "{stderr}"
    );
    // A trace given over the scenario's own workload is said, not silent.
    let (code, _, stderr) = dir.pdsim(&[
        "run",
        "--scenario",
        &shape,
        "--trace",
        &trace,
        "--out",
        "over",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("replaces the scenario's workload shape `coding-agent`"),
        "{stderr}"
    );
    // Too many jobs is clamped, with a note, and the comparison runs.
    let (code, _, stderr) = dir.pdsim(&[
        "compare",
        "--scenario",
        &sc,
        "--trace",
        &trace,
        "--jobs",
        "100000000000",
        "--out",
        "many-jobs",
        &dp,
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("--jobs 100000000000") && stderr.contains("cores"),
        "{stderr}"
    );
    // An SLO class no request has is warned about.
    let (code, _, stderr) = dir.pdsim(&[
        "run",
        "--trace",
        &trace,
        "--slo",
        "batch:ttft_ms=100",
        "--out",
        "classes",
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("warning: --slo batch"), "{stderr}");
}
