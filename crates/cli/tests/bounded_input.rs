//! Hostile inputs through the `pdsim` binary: special files, oversized
//! documents and trace lines, deep nesting, foreign encodings and huge
//! values. Each ends promptly with a short message naming the file and the
//! limit, and the exit code of its class; a UTF-8 byte-order mark is no
//! problem anywhere.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A fresh folder for one test's files.
fn dir(test: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("bounded-input")
        .join(test);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Runs pdsim from the repository root, killing it if it has not ended
/// after 60 s (a hang is a failure, not a stuck test run); returns (exit
/// code, stdout, stderr).
fn pdsim(args: &[&str]) -> (i32, String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pdsim"))
        .args(args)
        .current_dir(root())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the pdsim binary runs");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().expect("kill");
            panic!("pdsim {args:?} did not end within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("output");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn text(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).expect("bundled file")
}

fn write(path: &Path, bytes: impl AsRef<[u8]>) -> String {
    std::fs::write(path, bytes).expect("write");
    path.display().to_string()
}

#[test]
fn special_files_are_refused_without_reading_them() {
    let (code, out, err) = pdsim(&[
        "validate",
        "--scenario",
        "scenarios/default.yaml",
        "/dev/zero",
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        out.contains("/dev/zero") || err.contains("/dev/zero"),
        "{out}{err}"
    );
    assert!(
        format!("{out}{err}").contains("is a character device, not a regular file"),
        "{out}{err}"
    );

    let d = dir("fifo");
    let fifo = d.join("trace.jsonl");
    let made = Command::new("mkfifo").arg(&fifo).status();
    if !made.is_ok_and(|s| s.success()) {
        pdsim_testkit::skipped(
            "special_files_are_refused_without_reading_them",
            "its FIFO half",
            "the `mkfifo` command is not available",
        );
        return;
    }
    let fifo = fifo.display().to_string();
    // Nothing ever writes to the FIFO: opening it to read would block.
    let (code, out, err) = pdsim(&[
        "run",
        "--trace",
        &fifo,
        "--out",
        &d.join("out").display().to_string(),
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(err.contains(&fifo) && err.contains("FIFO"), "{err}");
    let (code, out, err) = pdsim(&["validate", "--scenario", "scenarios/default.yaml", &fifo]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        format!("{out}{err}").contains("FIFO (named pipe), not a regular file"),
        "{out}{err}"
    );
    // A scenario naming the FIFO as its trace: validate refuses it too, so
    // validate and run agree.
    let scenario = write(
        &d.join("scenario.yaml"),
        format!(
            "{}workload:\n  trace:\n    data: trace.jsonl\n    header: {{trace_version: 2, time_unit: us, mode: real}}\n",
            text("scenarios/default.yaml")
        ),
    );
    let (code, out, err) = pdsim(&[
        "validate",
        "--scenario",
        &scenario,
        "deployments/default.yaml",
    ]);
    assert_eq!(code, 1, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains("workload.trace.data")
            && all.contains("is a FIFO (named pipe), not a regular file")
            && all.contains("trace-file-missing"),
        "{all}"
    );
    let (code, out, err) = pdsim(&[
        "run",
        "--scenario",
        &scenario,
        "--out",
        &d.join("out").display().to_string(),
    ]);
    assert_ne!(code, 0, "{out}{err}");
    assert!(format!("{out}{err}").contains("FIFO"), "{out}{err}");
}

#[test]
fn an_oversized_document_is_refused_naming_the_limit() {
    let d = dir("big-doc");
    let mut big = text("deployments/default.yaml");
    while big.len() <= 9 << 20 {
        big.push_str(&format!("# {}\n", "padding ".repeat(100)));
    }
    let big = write(&d.join("big.yaml"), big);
    let (code, out, err) = pdsim(&["validate", "--scenario", "scenarios/default.yaml", &big]);
    assert_eq!(code, 2, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains(&big) && all.contains("larger than 8 MiB"),
        "{all}"
    );
    assert!(all.contains("file-too-large"), "{all}");
}

#[test]
fn an_oversized_trace_line_is_refused_with_its_line_number() {
    let d = dir("long-line");
    let mut trace = text("traces/default.jsonl")
        .lines()
        .take(3)
        .collect::<Vec<_>>()
        .join("\n");
    trace.push('\n');
    trace.push_str(&format!(
        "{{\"timestamp\": 99999999, \"pad\": \"{}\"}}\n",
        "x".repeat(2 << 20)
    ));
    let trace = write(&d.join("long.jsonl"), trace);
    let (code, out, err) = pdsim(&[
        "run",
        "--trace",
        &trace,
        "--out",
        &d.join("out").display().to_string(),
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!("{trace}:4: the line is longer than 1 MiB")),
        "{err}"
    );
    assert!(err.len() < 2_000, "{}", err.len());
}

#[test]
fn deep_nesting_is_refused_at_once() {
    let d = dir("deep");
    let deep = write(
        &d.join("deep.yaml"),
        format!("kind: Deployment\npools: {}", "[".repeat(200_000)),
    );
    let start = Instant::now();
    let (code, out, err) = pdsim(&["validate", "--scenario", "scenarios/default.yaml", &deep]);
    let took = start.elapsed();
    assert_eq!(code, 1, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains(&format!("{deep}:2")) && all.contains("too-deep"),
        "{all}"
    );
    eprintln!("a 200 KB document nested 200,000 deep was refused in {took:?}");
}

#[test]
fn a_utf8_bom_is_accepted_in_documents_router_files_and_traces() {
    let d = dir("bom");
    let bom = |name: &str, body: &str| write(&d.join(name), format!("\u{feff}{body}"));
    let scenario = bom("scenario.yaml", &text("scenarios/default.yaml"));
    let deployment = bom("deployment.yaml", &text("deployments/default.yaml"));
    let (code, out, err) = pdsim(&["validate", "--scenario", &scenario, &deployment]);
    assert_eq!(code, 0, "{out}{err}");

    // A deployment with a router file and a scenario for it, all marked.
    std::fs::create_dir_all(d.join("pd")).unwrap();
    bom(
        "pd/epp-prefix-pd.yaml",
        &text("deployments/pd/epp-prefix-pd.yaml"),
    );
    let epp = bom("epp.yaml", &text("deployments/1p3d-ep8-epp.yaml"));
    let h200 = bom("h200.yaml", &text("scenarios/4x8-h200.yaml"));
    let (code, out, err) = pdsim(&["validate", "--scenario", &h200, &epp]);
    assert_eq!(code, 0, "{out}{err}");

    let trace = bom("trace.jsonl", &text("traces/default.jsonl"));
    let out_dir = d.join("out").display().to_string();
    let (code, out, err) = pdsim(&[
        "run",
        "--scenario",
        &scenario,
        "--deployment",
        &deployment,
        "--trace",
        &trace,
        "--out",
        &out_dir,
    ]);
    assert_eq!(code, 0, "{out}{err}");
    // The README's digest of the trace is its SHA-256, hashed as streamed.
    use sha2::Digest;
    let sha: String = sha2::Sha256::digest(std::fs::read(&trace).unwrap())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let readme = std::fs::read_to_string(d.join("out/README.md")).unwrap();
    assert!(readme.contains(&format!("`{trace}`: `{sha}`")), "{readme}");
}

#[test]
fn other_encodings_are_named() {
    let d = dir("utf16");
    let utf16: Vec<u8> = [0xff, 0xfe]
        .into_iter()
        .chain(
            text("deployments/default.yaml")
                .encode_utf16()
                .flat_map(u16::to_le_bytes),
        )
        .collect();
    let doc = write(&d.join("utf16.yaml"), &utf16);
    let (code, out, err) = pdsim(&["validate", "--scenario", "scenarios/default.yaml", &doc]);
    assert_ne!(code, 0, "{out}{err}");
    let all = format!("{out}{err}");
    assert!(
        all.contains("is UTF-16 text (little-endian); pdsim reads UTF-8"),
        "{all}"
    );
    let trace = write(&d.join("utf16.jsonl"), &utf16);
    let (code, out, err) = pdsim(&[
        "run",
        "--trace",
        &trace,
        "--out",
        &d.join("out").display().to_string(),
    ]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains(&format!("{trace}:1: the file is UTF-16 text")),
        "{err}"
    );
    let latin1 = write(&d.join("latin1.yaml"), b"kind: Deployment\n# caf\xe9\n");
    let (_, out, err) = pdsim(&["validate", "--scenario", "scenarios/default.yaml", &latin1]);
    let all = format!("{out}{err}");
    assert!(
        all.contains("is not UTF-8 text (first invalid byte at offset 22, line 2)"),
        "{all}"
    );
}

#[test]
fn a_huge_value_or_key_is_quoted_short() {
    let d = dir("huge-value");
    let huge = "v".repeat(1 << 20);
    let base = text("deployments/default.yaml");
    for (name, doc) in [
        (
            "value.yaml",
            base.replace("nodes: 1", &format!("nodes: {huge}")),
        ),
        (
            "role.yaml",
            base.replace("role: colocated", &format!("role: {huge}")),
        ),
        ("key.yaml", format!("{base}\n? {huge}\n: 1\n")),
    ] {
        let doc = write(&d.join(name), doc);
        let (code, out, err) = pdsim(&["validate", "--scenario", "scenarios/default.yaml", &doc]);
        assert_eq!(
            code,
            1,
            "{}",
            &format!("{out}{err}")[..2_000.min(out.len() + err.len())]
        );
        assert!(
            out.len() + err.len() < 2_000,
            "{name}: {} bytes of output",
            out.len() + err.len()
        );
        assert!(
            format!("{out}{err}").contains("(1048576 bytes)"),
            "{out}{err}"
        );
    }
}

#[test]
fn plan_merge_reads_only_regular_plan_files_and_quotes_short() {
    let d = dir("plan-merge");
    let out = d.join("merged").display().to_string();
    let (code, stdout, stderr) = pdsim(&["plan", "merge", "/dev/zero", "--out", &out]);
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("/dev/zero: is a character device, not a regular file"),
        "{stderr}"
    );
    let bad = write(
        &d.join("plan.json"),
        format!("{{\"question\": \"{}\"}}", "q".repeat(1 << 20)),
    );
    let (code, stdout, stderr) = pdsim(&["plan", "merge", &bad, "--out", &out]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("not a pdsim plan"), "{stderr}");
    assert!(
        stderr.len() < 1_500,
        "{} bytes: {}",
        stderr.len(),
        &stderr[..300]
    );
    assert!(!Path::new(&out).exists());
}
