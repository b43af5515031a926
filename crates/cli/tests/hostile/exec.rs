//! Runs one case: makes its folder, runs each command as a capped
//! subprocess and checks what the issue requires of every outcome.

use super::case::{Case, FifoEnd, Setup, Sig, Step};
use std::io::{ErrorKind, Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The address-space cap of every command.
pub const ADDRESS_SPACE_BYTES: u64 = 1 << 30;
/// The most a case may write into its folder, or print.
pub const OUTPUT_LIMIT_BYTES: u64 = 64 << 20;
/// The most resident memory a command may use. Every input here is small
/// (at most a few MiB, 20 requests, 2,048 nodes), so a command above this
/// read an input whole or allocated by capacity instead of by use; the
/// 1 GiB address-space cap stops it outright.
pub const RSS_LIMIT_BYTES: u64 = 384 << 20;
/// The longest a message line may be: a value quoted whole in an error
/// (a 1 MB key, a file's contents) makes a longer one.
pub const LINE_LIMIT_BYTES: usize = 16 << 10;
/// How much of stdout and stderr is kept for the checks and the report.
const CAPTURE_BYTES: usize = 256 << 10;
/// `O_NONBLOCK` on Linux (the same on x86-64 and arm64): a FIFO's far end
/// opens without waiting for the pdsim end.
const O_NONBLOCK: i32 = 0o4000;

/// Where the commands run and with what limits.
pub struct Env {
    pub exe: PathBuf,
    pub root: PathBuf,
    pub wall_limit: Duration,
    /// `prlimit` when present, else `sh -c 'ulimit -v'`.
    pub prlimit: Option<PathBuf>,
}

impl Env {
    pub fn new(wall_limit: Duration) -> Env {
        let prlimit = ["/usr/bin/prlimit", "/bin/prlimit"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists());
        Env {
            exe: PathBuf::from(env!("CARGO_BIN_EXE_pdsim")),
            root: Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../..")
                .canonicalize()
                .expect("the repository root"),
            wall_limit,
            prlimit,
        }
    }

    fn command(&self, args: &[String]) -> Command {
        let mut cmd = match &self.prlimit {
            Some(prlimit) => {
                let mut c = Command::new(prlimit);
                c.arg(format!("--as={ADDRESS_SPACE_BYTES}"))
                    .arg("--")
                    .arg(&self.exe);
                c
            }
            None => {
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(format!(
                        "ulimit -v {}; exec \"$0\" \"$@\"",
                        ADDRESS_SPACE_BYTES / 1024
                    ))
                    .arg(&self.exe);
                c
            }
        };
        cmd.args(args);
        cmd
    }

    /// The arguments with `@ROOT@` replaced.
    pub fn expand(&self, args: &[String]) -> Vec<String> {
        let root = self.root.to_string_lossy();
        args.iter().map(|a| a.replace("@ROOT@", &root)).collect()
    }
}

/// What one command did.
pub struct Outcome {
    pub args: Vec<String>,
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub elapsed: Duration,
    pub stdout: Captured,
    pub stderr: Captured,
    pub killed_for: Option<String>,
    /// The highest resident-set high-water mark seen while it ran.
    pub peak_rss_bytes: u64,
}

/// `VmHWM` of a live process, from /proc (0 when it is gone).
fn peak_rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The head of a stream plus its tail and total size.
#[derive(Default)]
pub struct Captured {
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
    pub total: u64,
}

impl Captured {
    pub fn text(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if self.total as usize > self.head.len() {
            s.push_str(&format!(
                "\n[… {} bytes in all; the last {}:]\n",
                self.total,
                self.tail.len()
            ));
            s.push_str(&String::from_utf8_lossy(&self.tail));
        }
        s
    }
    fn last_bytes(&self) -> &[u8] {
        if self.total as usize > self.head.len() {
            &self.tail
        } else {
            &self.head
        }
    }
}

fn capture(
    mut stream: impl Read + Send + 'static,
    printed: Arc<std::sync::atomic::AtomicU64>,
) -> std::thread::JoinHandle<Captured> {
    std::thread::spawn(move || {
        let mut c = Captured::default();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    c.total += n as u64;
                    printed.fetch_add(n as u64, Ordering::Relaxed);
                    let room = CAPTURE_BYTES.saturating_sub(c.head.len());
                    c.head.extend_from_slice(&buf[..n.min(room)]);
                    if n > room {
                        c.tail.extend_from_slice(&buf[room..n]);
                        if c.tail.len() > CAPTURE_BYTES {
                            c.tail.drain(..c.tail.len() - CAPTURE_BYTES);
                        }
                    }
                }
            }
        }
        c
    })
}

/// The far end of a FIFO, on a thread until `stop`.
fn fifo_end(path: PathBuf, end: FifoEnd, feed: Vec<u8>, stop: Arc<AtomicBool>) {
    let nap = || std::thread::sleep(Duration::from_millis(2));
    match end {
        FifoEnd::Drain => {
            let Ok(mut f) = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(O_NONBLOCK)
                .open(&path)
            else {
                return;
            };
            let mut buf = vec![0u8; 64 << 10];
            while !stop.load(Ordering::Relaxed) {
                match f.read(&mut buf) {
                    Ok(n) if n > 0 => {}
                    _ => nap(),
                }
            }
        }
        FifoEnd::Zeros | FifoEnd::Feed(_) | FifoEnd::Loop(_) => {
            // `zeros` and `loop` never close; `feed` closes after the file.
            let zeros = !matches!(end, FifoEnd::Feed(_));
            let chunk = match end {
                FifoEnd::Zeros => vec![0u8; 64 << 10],
                _ => feed,
            };
            'open: while !stop.load(Ordering::Relaxed) {
                // Opening for writing without blocking fails until a
                // reader (pdsim) has the FIFO open.
                let Ok(mut f) = std::fs::OpenOptions::new()
                    .write(true)
                    .custom_flags(O_NONBLOCK)
                    .open(&path)
                else {
                    nap();
                    continue;
                };
                let mut at = 0;
                while !stop.load(Ordering::Relaxed) {
                    if at == chunk.len() {
                        if zeros {
                            at = 0;
                        } else {
                            // End of the file: close, and feed it again
                            // if pdsim opens the FIFO once more.
                            drop(f);
                            std::thread::sleep(Duration::from_millis(20));
                            continue 'open;
                        }
                    }
                    match f.write(&chunk[at..]) {
                        Ok(n) => at += n,
                        Err(e) if e.kind() == ErrorKind::WouldBlock => nap(),
                        Err(_) => continue 'open,
                    }
                }
            }
        }
    }
}

/// Sizes of every regular file under `dir` (symlinks not followed).
pub fn tree_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            total += tree_bytes(&entry.path());
        } else if kind.is_file() {
            total += entry.metadata().map(|m| m.len()).unwrap_or(0);
        }
    }
    total
}

/// Names under `dir` that look like a staging folder (`.NAME.partial-PID`
/// or `FILE.partial`).
fn partial_leftovers(dir: &Path, base: &Path, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.contains(".partial") {
            out.push(
                path.strip_prefix(base)
                    .unwrap_or(&path)
                    .display()
                    .to_string(),
            );
        }
        if entry.file_type().map(|k| k.is_dir()).unwrap_or(false) {
            partial_leftovers(&path, base, out);
        }
    }
}

/// A user's file or folder as it was: its type and contents.
#[derive(PartialEq, Debug)]
enum Snapshot {
    Missing,
    File(Vec<u8>),
    Fifo,
    Symlink(PathBuf),
    Dir(Vec<(String, Snapshot)>),
    Other,
}

fn snapshot(path: &Path) -> Snapshot {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Snapshot::Missing;
    };
    let kind = meta.file_type();
    if kind.is_symlink() {
        Snapshot::Symlink(std::fs::read_link(path).unwrap_or_default())
    } else if kind.is_fifo() {
        Snapshot::Fifo
    } else if kind.is_file() {
        Snapshot::File(std::fs::read(path).unwrap_or_default())
    } else if kind.is_dir() {
        let mut names: Vec<String> = std::fs::read_dir(path)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        Snapshot::Dir(
            names
                .into_iter()
                .map(|n| {
                    let s = snapshot(&path.join(&n));
                    (n, s)
                })
                .collect(),
        )
    } else {
        Snapshot::Other
    }
}

fn describe(s: &Snapshot) -> String {
    match s {
        Snapshot::Missing => "gone".into(),
        Snapshot::File(b) => format!("a file of {} bytes", b.len()),
        Snapshot::Fifo => "a FIFO".into(),
        Snapshot::Symlink(t) => format!("a symlink to {}", t.display()),
        Snapshot::Dir(entries) => format!(
            "a folder holding [{}]",
            entries
                .iter()
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Snapshot::Other => "something else".into(),
    }
}

/// Makes the case's folder: inputs, then the special files.
pub fn materialise(case: &Case, dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    for (path, bytes) in &case.files {
        let target = dir.join(path);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(target, bytes)?;
    }
    for s in &case.setup {
        match s {
            Setup::Fifo { path, .. } => {
                let target = dir.join(path);
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                let status = Command::new("mkfifo").arg(&target).status()?;
                if !status.success() {
                    return Err(std::io::Error::other(format!("mkfifo {path} failed")));
                }
            }
            Setup::Dir(path) => std::fs::create_dir_all(dir.join(path))?,
            Setup::Symlink { path, target } => {
                let link = dir.join(path);
                if let Some(parent) = link.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::os::unix::fs::symlink(target, link)?;
            }
            Setup::Repeat { path, count, text } => {
                let target = dir.join(path);
                if let Some(parent) = target.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(target)?;
                let mut block = Vec::new();
                for _ in 0..*count {
                    block.extend_from_slice(text);
                    if block.len() >= 1 << 20 {
                        f.write_all(&block)?;
                        block.clear();
                    }
                }
                f.write_all(&block)?;
            }
            Setup::Keep(_) | Setup::Home(_) => {}
        }
    }
    Ok(())
}

/// Runs one command under the caps.
fn run_step(env: &Env, case: &Case, step: &Step, dir: &Path, written_before: u64) -> Outcome {
    let args = env.expand(&step.args);
    let stop = Arc::new(AtomicBool::new(false));
    let mut ends = Vec::new();
    for s in &case.setup {
        if let Setup::Fifo { path, end } = s {
            let feed = match end {
                FifoEnd::Feed(file) | FifoEnd::Loop(file) => case
                    .files
                    .iter()
                    .find(|(p, _)| p == file)
                    .map(|(_, b)| b.clone())
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            let (path, end, stop) = (dir.join(path), end.clone(), stop.clone());
            ends.push(std::thread::spawn(move || fifo_end(path, end, feed, stop)));
        }
    }
    let home = case
        .setup
        .iter()
        .find_map(|s| match s {
            Setup::Home(p) => Some(dir.join(p)),
            _ => None,
        })
        .unwrap_or_else(|| dir.join("home"));
    let start = Instant::now();
    let mut cmd = env.command(&args);
    cmd.current_dir(dir)
        .env("HOME", &home)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            stop.store(true, Ordering::Relaxed);
            return Outcome {
                args,
                code: None,
                signal: None,
                elapsed: start.elapsed(),
                stdout: Captured::default(),
                stderr: Captured {
                    head: format!("(the harness could not start the command: {e})").into_bytes(),
                    ..Captured::default()
                },
                killed_for: Some(format!("could not start: {e}")),
                peak_rss_bytes: 0,
            };
        }
    };
    let printed = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let out = capture(child.stdout.take().expect("piped"), printed.clone());
    let err = capture(child.stderr.take().expect("piped"), printed.clone());
    let mut killed_for = None;
    let mut signalled = false;
    let mut staging_seen: Option<Instant> = None;
    let mut last_size_check = Instant::now();
    let mut peak_rss_bytes = 0;
    let status = loop {
        peak_rss_bytes = peak_rss_bytes.max(peak_rss(child.id()));
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => {
                killed_for = Some(format!("waiting failed: {e}"));
                let _ = child.kill();
                break child.wait().expect("wait after kill");
            }
        }
        let elapsed = start.elapsed();
        if step.signal.is_some() && staging_seen.is_none() {
            let mut left = Vec::new();
            partial_leftovers(dir, dir, &mut left);
            if !left.is_empty() {
                staging_seen = Some(Instant::now());
            }
        }
        if let Some((sig, ms)) = &step.signal
            && !signalled
            && staging_seen.is_some_and(|t| t.elapsed() >= Duration::from_millis(*ms))
        {
            signalled = true;
            let _ = Command::new("kill")
                .arg(format!("-{}", sig.name()))
                .arg(child.id().to_string())
                .status();
        }
        if elapsed > env.wall_limit {
            killed_for = Some(format!(
                "still running after {} s (killed): a hang",
                env.wall_limit.as_secs()
            ));
            let _ = child.kill();
            break child.wait().expect("wait after kill");
        }
        if printed.load(Ordering::Relaxed) > OUTPUT_LIMIT_BYTES {
            killed_for = Some(format!(
                "printed over {OUTPUT_LIMIT_BYTES} bytes (killed): unbounded output"
            ));
            let _ = child.kill();
            break child.wait().expect("wait after kill");
        }
        if last_size_check.elapsed() > Duration::from_millis(250) {
            last_size_check = Instant::now();
            let written = tree_bytes(dir).saturating_sub(written_before);
            if written > OUTPUT_LIMIT_BYTES {
                killed_for = Some(format!(
                    "wrote {written} bytes into its folder (over {OUTPUT_LIMIT_BYTES}; killed): unbounded output"
                ));
                let _ = child.kill();
                break child.wait().expect("wait after kill");
            }
        }
        // Most commands end within tens of milliseconds: poll fast at first.
        std::thread::sleep(if elapsed < Duration::from_millis(100) {
            Duration::from_millis(1)
        } else {
            Duration::from_millis(10)
        });
    };
    let elapsed = start.elapsed();
    if step.signal.is_some() && !signalled && killed_for.is_none() {
        killed_for = Some(
            "the command ended before its signal was sent: the case does not test what it should (a longer run is needed)"
                .into(),
        );
    }
    stop.store(true, Ordering::Relaxed);
    for e in ends {
        let _ = e.join();
    }
    Outcome {
        args,
        code: status.code(),
        signal: status.signal(),
        elapsed,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        killed_for,
        peak_rss_bytes,
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        2 => "SIGINT",
        6 => "SIGABRT (an abort: allocation failure or panic=abort)",
        7 => "SIGBUS",
        9 => "SIGKILL",
        11 => "SIGSEGV (stack overflow or crash)",
        15 => "SIGTERM",
        _ => "a signal",
    }
}

/// The checks every command's outcome must pass.
fn check_step(step: &Step, o: &Outcome, problems: &mut Vec<String>) {
    if let Some(why) = &o.killed_for {
        problems.push(why.clone());
        return;
    }
    let stderr = o.stderr.text();
    let stdout = o.stdout.text();
    match (o.code, o.signal) {
        (_, Some(9)) if step.signal.as_ref().map(|s| &s.0) == Some(&Sig::Kill) => {}
        (_, Some(sig)) => problems.push(format!(
            "died of signal {sig} ({}) instead of exiting{}",
            signal_name(sig),
            match &step.signal {
                Some((Sig::Int, _)) => " 130 after SIGINT",
                Some((Sig::Term, _)) => " 143 after SIGTERM",
                _ => " 0, 1 or 2",
            }
        )),
        (Some(code), None) => {
            let allowed = matches!(
                (code, &step.signal),
                (0..=2, _) | (130, Some((Sig::Int, _))) | (143, Some((Sig::Term, _)))
            );
            if !allowed {
                problems.push(format!(
                    "exit code {code}{}",
                    if code == 3 {
                        " (an engine invariant reported broken: hostile input must be an input error, 1)"
                    } else {
                        " (only 0, 1 or 2 are allowed here)"
                    }
                ));
            }
            if let Some(want) = step.expect
                && want != code
            {
                problems.push(format!("exit code {code}, but this input must give {want}"));
            }
            for text in &step.says {
                if !stderr.contains(text.as_str()) && !stdout.contains(text.as_str()) {
                    problems.push(format!(
                        "exit code {code}, and neither stdout nor stderr says `{text}`, which this input's message must"
                    ));
                }
            }
            if (1..=2).contains(&code) || code == 130 || code == 143 {
                // `validate` prints its problems on stdout; everything
                // else explains on stderr.
                let (name, text) = if o.stderr.total > 0 {
                    ("stderr", &stderr)
                } else {
                    ("stdout", &stdout)
                };
                let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
                match lines.last() {
                    None => problems.push(format!("exit {code} with nothing on stderr or stdout")),
                    Some(last) if last.contains("see above") && lines.len() < 2 => {
                        problems.push(format!(
                            "exit {code}: the last line of {name} says `see above` with nothing above it: {last}"
                        ))
                    }
                    _ => {}
                }
            }
            if code == 0 {
                for flag in &step.unused {
                    if !stderr.contains(flag.as_str()) && !stdout.contains(flag.as_str()) {
                        problems.push(format!(
                            "{flag} cannot apply here, yet the command succeeded without naming it (a flag silently ignored)"
                        ));
                    }
                }
            }
        }
        (None, None) => problems.push("no exit code and no signal".into()),
    }
    if o.peak_rss_bytes > RSS_LIMIT_BYTES {
        problems.push(format!(
            "used {} MiB of memory (over {} MiB for inputs this small): a read or an allocation is unbounded",
            o.peak_rss_bytes >> 20,
            RSS_LIMIT_BYTES >> 20
        ));
    }
    for needle in ["panicked", "RUST_BACKTRACE", "memory allocation of"] {
        if stderr.contains(needle) {
            problems.push(format!("stderr says `{needle}`"));
        }
    }
    for (name, captured) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
        if captured.total > OUTPUT_LIMIT_BYTES {
            problems.push(format!(
                "printed {} bytes on {name}: unbounded output",
                captured.total
            ));
        }
        let longest = captured
            .head
            .split(|b| *b == b'\n')
            .chain(captured.last_bytes().split(|b| *b == b'\n'))
            .map(<[u8]>::len)
            .max()
            .unwrap_or(0);
        if longest > LINE_LIMIT_BYTES {
            problems.push(format!(
                "a line of {longest} bytes on {name}: a message must quote at most a couple of hundred characters of a value"
            ));
        }
    }
}

/// The results folder a `run` reported (`results: PATH`).
fn reported_results(o: &Outcome) -> Option<String> {
    String::from_utf8_lossy(&o.stdout.head)
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("results: ").map(str::to_string))
}

/// Runs a whole case in `dir`; the problems found (none: it passed).
pub fn run_case(env: &Env, case: &Case, dir: &Path) -> (Vec<String>, Vec<Outcome>) {
    let mut problems = Vec::new();
    if let Err(e) = materialise(case, dir) {
        return (vec![format!("the harness could not set up: {e}")], vec![]);
    }
    let keeps: Vec<(String, Snapshot)> = case
        .setup
        .iter()
        .filter_map(|s| match s {
            Setup::Keep(p) => Some((p.clone(), snapshot(&dir.join(p)))),
            _ => None,
        })
        .collect();
    let before = tree_bytes(dir);
    let mut outcomes: Vec<Outcome> = Vec::new();
    // (step, results folder, its README) of each run that wrote to the default place.
    let mut results: Vec<(usize, String, Snapshot)> = Vec::new();
    for (i, step) in case.steps.iter().enumerate() {
        let o = run_step(env, case, step, dir, before);
        let mut step_problems = Vec::new();
        check_step(step, &o, &mut step_problems);
        if step.agree && i > 0 {
            let v = outcomes[i - 1].code;
            match (v, o.code) {
                (Some(0), Some(1)) => step_problems.push(
                    "`validate` said the documents are valid (exit 0) but `run` refused them as invalid (exit 1)".into(),
                ),
                (Some(1), Some(0)) => step_problems.push(
                    "`validate` said the documents are invalid (exit 1) but `run` ran them".into(),
                ),
                _ => {}
            }
        }
        if let Some((sig @ (Sig::Int | Sig::Term), _)) = &step.signal
            && o.killed_for.is_none()
        {
            let mut left = Vec::new();
            partial_leftovers(dir, dir, &mut left);
            if !left.is_empty() {
                step_problems.push(format!(
                    "after SIG{} the staging folder is left behind: {}",
                    sig.name(),
                    left.join(", ")
                ));
            }
        }
        if o.code == Some(0)
            && step.args.first().map(String::as_str) == Some("run")
            && !step.args.iter().any(|a| a == "--out")
            && let Some(folder) = reported_results(&o)
        {
            let readme = snapshot(&dir.join(&folder).join("README.md"));
            results.push((i, folder, readme));
        }
        for p in step_problems {
            problems.push(format!("command {}: {p}", i + 1));
        }
        outcomes.push(o);
    }
    // Different runs writing to the default place must not collide: a
    // result is replaced only by the identical command.
    for (i, folder, readme) in &results {
        let rerun = case.steps[i + 1..]
            .iter()
            .any(|s| s.args == case.steps[*i].args);
        let now = snapshot(&dir.join(folder).join("README.md"));
        if !rerun && &now != readme {
            problems.push(format!(
                "the results of command {} in {folder} were replaced by a later, different command (default result names collide)",
                i + 1
            ));
        }
    }
    for (path, was) in &keeps {
        let now = snapshot(&dir.join(path));
        if &now != was {
            problems.push(format!(
                "the user's {path} did not survive: it was {}, now {}",
                describe(was),
                describe(&now)
            ));
        }
    }
    // A command the harness killed (a hang, a flood) leaves its staging
    // behind as any SIGKILL does; that is reported as the hang or flood.
    let last_killed = case
        .steps
        .last()
        .is_some_and(|s| matches!(s.signal, Some((Sig::Kill, _))))
        || outcomes.iter().any(|o| o.killed_for.is_some());
    if !last_killed {
        let mut left = Vec::new();
        partial_leftovers(dir, dir, &mut left);
        if !left.is_empty() {
            problems.push(format!(
                "staging left behind after the last command: {}",
                left.join(", ")
            ));
        }
    }
    let written = tree_bytes(dir).saturating_sub(before);
    if written > OUTPUT_LIMIT_BYTES {
        problems.push(format!(
            "the case wrote {written} bytes (over {OUTPUT_LIMIT_BYTES})"
        ));
    }
    (problems, outcomes)
}

/// Removes files over 4 MiB under `dir` (a kept failure's outputs; its
/// inputs are in the fixture copy); returns how many.
pub fn prune_large(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            removed += prune_large(&entry.path());
        } else if kind.is_file()
            && entry.metadata().map(|m| m.len()).unwrap_or(0) > 4 << 20
            && std::fs::remove_file(entry.path()).is_ok()
        {
            removed += 1;
        }
    }
    removed
}

/// A command line as a shell would take it.
pub fn shell_line(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@+%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
