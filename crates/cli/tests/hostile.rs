//! The hostile-input fuzz suite (issue 10, "Must show"): pdsim never
//! panics, aborts, hangs, exhausts memory, floods the disk or loses a
//! user's file, whatever it is given, and every refusal says why.
//!
//! # What it generates
//!
//! Each case is a folder of inputs and one or more `pdsim` command lines,
//! built by a seeded generator ([`generate`]) from the bundled files read from the
//! repository at test time (`scenarios/*.yaml`, `deployments/*.yaml`, the
//! router files under `deployments/pd/` and `deployments/rebel100/`,
//! `traces/default.jsonl` and a catalog model):
//! - documents (scenario, deployment, EndpointPickerConfig, a user catalog
//!   model) with a value swapped for another type, an extreme number (0, -1,
//!   1e308, 2^64, 10^12, NaN, inf), a 10^5-deep flow collection, a 1 MB
//!   string, an undefined alias, an alias bomb, a deleted or misspelt or
//!   duplicated key, truncation, binary junk, a BOM, UTF-16, CRLF, a huge
//!   line, an unknown engine release, odd `epp_flags`;
//! - traces (Mooncake JSONL, Azure 2023 CSV, TraceV2 CSV with its header in
//!   the scenario) with the same kinds of damage, rows 10^12 ms apart, 10^5
//!   hash ids, multi-megabyte lines;
//! - special files in every input slot (a FIFO fed endless zeros or a valid
//!   file, `/dev/zero`, `/dev/null`, a directory, a dangling symlink, a
//!   symlink to `/dev/zero`, a 6 MiB line, a file that is not UTF-8);
//! - command lines for `run`, `validate`, `compare`, `plan` and `plan merge`
//!   with random, extreme, missing, repeated and misspelt flags;
//! - `--out` and `--perfetto` aimed at a user's folder, a user's file, `.`,
//!   the home folder, a symlink, a FIFO, the folder holding results (the
//!   user's files must be there afterwards);
//! - SIGINT, SIGTERM and SIGKILL during a run; two runs differing only in
//!   the trace; `validate` then `run` on the same documents; large clusters
//!   and extreme `--rate`s.
//!
//! Output paths stay inside each case's folder: nothing here points pdsim
//! at `/`, at a real home folder or at a device as an output, because the
//! unfixed binary deletes or replaces what it is pointed at.
//!
//! # What each case must do
//!
//! Every command runs the debug `pdsim` as a subprocess in the case's own
//! temporary folder, under `prlimit --as=1073741824` (1 GiB of address
//! space; `sh -c 'ulimit -v'` when prlimit is missing), with a wall-time
//! limit (20 s, `PDSIM_FUZZ_WALL_S`), stdin null and stdout/stderr captured
//! within bounds. It passes when: the exit code is 0, 1 or 2 (130/143 after
//! SIGINT/SIGTERM), no signal killed it, stderr never says `panicked`,
//! `RUST_BACKTRACE` or `memory allocation of`; its resident memory stays
//! under 384 MiB (every input is small: more means a read or an allocation
//! is unbounded); on exit 1 or 2 there is a
//! message, and a last line saying "see above" has something above it; no
//! line is longer than 16 KiB (a value quoted whole); at most 64 MiB are
//! written or printed; the user's files are intact; no `.partial` staging
//! is left behind; a flag that cannot apply (`--rate` with a trace) is
//! named when the command succeeds; `validate` and `run` agree; a later,
//! different run never replaces an earlier run's default results folder;
//! and a valid input with a UTF-8 BOM exits 0.
//!
//! # Running and replaying
//!
//! - `cargo test -p pdsim-cli --test hostile` runs the regression fixtures,
//!   then 10,000 generated cases (CI runs this under
//!   `cargo test --workspace --locked`).
//! - A million cases:
//!   `PDSIM_FUZZ_CASES=1000000 cargo test --release -p pdsim-cli --test hostile`.
//! - `PDSIM_FUZZ_SEED=S` sets the base seed (default 20260101);
//!   `PDSIM_FUZZ_CASES=N` the number of generated cases (0: fixtures only);
//!   `PDSIM_FUZZ_CASE=K` replays generated case K alone;
//!   `PDSIM_FUZZ_FIXTURE=NAME` replays one regression fixture alone;
//!   `PDSIM_FUZZ_SKIP_FIXTURES=1` runs the generated cases only (to time them);
//!   `PDSIM_FUZZ_THREADS=T` (default: the cores, 2 to 4);
//!   `PDSIM_FUZZ_MAX_FAILURES=F` stops generating after F failing cases
//!   (default 25: a failing run is failing already; raise it to list all).
//! - A failure prints the seed, the case number, each exact command line,
//!   the inputs and the replay command, and keeps the case's folder under
//!   `target/tmp/hostile/` with a copy of the case in fixture form
//!   (`fixture/`).
//!
//! # Adding a regression fixture
//!
//! Every input that ever failed becomes a folder under
//! `crates/cli/tests/hostile-regressions/`, replayed before the generated
//! cases on every run. Copy the failing case's `fixture/` folder there,
//! give it a name that says what broke, and cut it down by hand to the
//! smallest input that still fails (the format is described in
//! `hostile/case.rs`: `args.txt` with the command lines, an optional
//! `setup.txt` for FIFOs, symlinks, folders, files that must survive and
//! generated large content, and the input files themselves).

#[path = "hostile/case.rs"]
mod case;
#[path = "hostile/exec.rs"]
mod exec;
#[path = "hostile/generate.rs"]
mod generate;

use case::Case;
use exec::{Env, run_case, shell_line};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const DEFAULT_SEED: u64 = 20_260_101;
const DEFAULT_CASES: u64 = 10_000;

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    Some(
        text.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a whole number")),
    )
}

/// One case to run: a fixture or a generated case number.
#[derive(Clone)]
enum Job {
    Fixture(PathBuf),
    Generated(u64),
}

struct Settings {
    seed: u64,
    env: Env,
    work: PathBuf,
    bundle: generate::Bundle,
}

impl Settings {
    fn replay(&self, job: &Job) -> String {
        match job {
            Job::Fixture(dir) => format!(
                "PDSIM_FUZZ_FIXTURE={} cargo test -p pdsim-cli --test hostile",
                dir.file_name().unwrap_or_default().to_string_lossy()
            ),
            Job::Generated(k) => format!(
                "PDSIM_FUZZ_SEED={} PDSIM_FUZZ_CASE={k} cargo test -p pdsim-cli --test hostile",
                self.seed
            ),
        }
    }

    fn case(&self, job: &Job) -> Result<Case, String> {
        match job {
            Job::Fixture(dir) => Case::load(dir),
            Job::Generated(k) => Ok(generate::generate(&self.bundle, self.seed, *k)),
        }
    }
}

fn describe_inputs(case: &Case) -> String {
    let mut out = String::new();
    for (path, bytes) in &case.files {
        let preview: String = String::from_utf8_lossy(&bytes[..bytes.len().min(160)])
            .chars()
            .map(|c| if c == '\n' { '⏎' } else { c })
            .collect();
        out.push_str(&format!(
            "    {path} ({} bytes): {preview}{}\n",
            bytes.len(),
            if bytes.len() > 160 { "…" } else { "" }
        ));
    }
    for s in &case.setup {
        out.push_str(&format!("    setup: {s:?}\n"));
    }
    out
}

/// Runs one job: its kind and, on failure, the report (the folder is kept).
fn run_job(s: &Settings, job: &Job) -> (&'static str, String, Option<String>) {
    let name = match job {
        Job::Fixture(dir) => format!(
            "fixture-{}",
            dir.file_name().unwrap_or_default().to_string_lossy()
        ),
        Job::Generated(k) => format!("case-{k}"),
    };
    let dir = s.work.join(&name);
    let _ = std::fs::remove_dir_all(&dir);
    let case = match s.case(job) {
        Ok(c) => c,
        Err(e) => {
            return (
                "fixture",
                name.clone(),
                Some(format!("{name}: cannot read the fixture: {e}")),
            );
        }
    };
    let (problems, outcomes) = run_case(&s.env, &case, &dir.join("run"));
    if problems.is_empty() {
        let _ = std::fs::remove_dir_all(&dir);
        return (case.kind, case.label, None);
    }
    let _ = case.save(&dir.join("fixture"));
    let pruned = exec::prune_large(&dir.join("run"));
    let mut report = format!("FAILED {}\n  problems:\n", case.label);
    for p in &problems {
        report.push_str(&format!("    - {p}\n"));
    }
    report.push_str(&format!(
        "  folder (kept{}): {}\n  commands (run in that folder):\n",
        if pruned > 0 {
            format!(", {pruned} file(s) over 4 MiB removed")
        } else {
            String::new()
        },
        dir.join("run").display()
    ));
    for o in &outcomes {
        report.push_str(&format!(
            "    $ pdsim {}\n      -> {} in {:.2} s, peak RSS {} MiB\n",
            shell_line(&o.args),
            match (o.code, o.signal) {
                (Some(c), _) => format!("exit {c}"),
                (None, Some(sig)) => format!("signal {sig}"),
                _ => "no status".into(),
            },
            o.elapsed.as_secs_f64(),
            o.peak_rss_bytes >> 20
        ));
        let stderr = o.stderr.text();
        let lines: Vec<&str> = stderr.lines().collect();
        for line in &lines[lines.len().saturating_sub(6)..] {
            let short: String = line.chars().take(300).collect();
            report.push_str(&format!("      stderr| {short}\n"));
        }
        if o.stderr.total == 0 {
            let stdout = o.stdout.text();
            let lines: Vec<&str> = stdout.lines().collect();
            for line in &lines[lines.len().saturating_sub(4)..] {
                let short: String = line.chars().take(300).collect();
                report.push_str(&format!("      stdout| {short}\n"));
            }
        }
    }
    report.push_str(&format!("  inputs:\n{}", describe_inputs(&case)));
    report.push_str(&format!(
        "  replay: {}\n  as a fixture: {}\n",
        s.replay(job),
        dir.join("fixture").display()
    ));
    (case.kind, case.label, Some(report))
}

fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hostile-regressions");
    let mut all: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.join("args.txt").exists())
                .collect()
        })
        .unwrap_or_default();
    all.sort();
    all
}

#[test]
fn hostile_inputs_never_crash_hang_or_lose_files() {
    let seed = env_u64("PDSIM_FUZZ_SEED").unwrap_or(DEFAULT_SEED);
    let count = env_u64("PDSIM_FUZZ_CASES").unwrap_or(DEFAULT_CASES);
    let max_failures = env_u64("PDSIM_FUZZ_MAX_FAILURES").unwrap_or(25) as usize;
    let wall = Duration::from_secs(env_u64("PDSIM_FUZZ_WALL_S").unwrap_or(20));
    let threads = env_u64("PDSIM_FUZZ_THREADS").unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get() as u64)
            .unwrap_or(2)
            .clamp(2, 4)
    }) as usize;
    let env = Env::new(wall);
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile");
    // The folder is the suite's own: earlier runs' kept failures go.
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("the work folder");
    let bundle = generate::Bundle::load(&env.root);

    let mut jobs: Vec<Job> = Vec::new();
    let only_case = env_u64("PDSIM_FUZZ_CASE");
    let only_fixture = std::env::var("PDSIM_FUZZ_FIXTURE").ok();
    if let Some(k) = only_case {
        jobs.push(Job::Generated(k));
    } else if std::env::var_os("PDSIM_FUZZ_SKIP_FIXTURES").is_some() {
        println!("hostile: PDSIM_FUZZ_SKIP_FIXTURES is set: the regression fixtures are skipped");
        jobs.extend((0..count).map(Job::Generated));
    } else {
        for f in fixtures() {
            let name = f.file_name().unwrap_or_default().to_string_lossy();
            if only_fixture.as_deref().is_none_or(|n| n == name) {
                jobs.push(Job::Fixture(f));
            }
        }
        if let Some(name) = &only_fixture {
            assert!(!jobs.is_empty(), "no regression fixture named {name}");
        } else {
            jobs.extend((0..count).map(Job::Generated));
        }
    }
    let fixture_count = jobs.iter().filter(|j| matches!(j, Job::Fixture(_))).count();
    println!(
        "hostile: seed {seed}, {fixture_count} regression fixture(s) then {} generated case(s), {threads} thread(s), {} s wall limit, {} via {}",
        jobs.len() - fixture_count,
        wall.as_secs(),
        env.exe.display(),
        env.prlimit
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "sh -c ulimit -v".into())
    );

    let settings = Arc::new(Settings {
        seed,
        env,
        work: work.clone(),
        bundle,
    });
    let jobs = Arc::new(jobs);
    let next = Arc::new(AtomicUsize::new(0));
    let failing = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let reports = Arc::new(Mutex::new(Vec::<(usize, String)>::new()));
    // Per kind of case: how many ran and their total seconds.
    // Failing cases (hangs especially) are timed apart, under "FAILED".
    let timing = Arc::new(Mutex::new(
        std::collections::BTreeMap::<&str, (u64, f64)>::new(),
    ));
    let slowest = Arc::new(Mutex::new(Vec::<(f64, String)>::new()));
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (settings, jobs, next, failing, done, reports, timing, slowest) = (
                settings.clone(),
                jobs.clone(),
                next.clone(),
                failing.clone(),
                done.clone(),
                reports.clone(),
                timing.clone(),
                slowest.clone(),
            );
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    // Fixtures always run; generation stops once enough
                    // cases have failed.
                    if matches!(job, Job::Generated(_))
                        && failing.load(Ordering::Relaxed) >= max_failures
                    {
                        break;
                    }
                    let began = Instant::now();
                    let (kind, label, report) = run_job(&settings, job);
                    let secs = began.elapsed().as_secs_f64();
                    {
                        let mut t = timing.lock().expect("timing");
                        let slot = t
                            .entry(if report.is_some() { "FAILED" } else { kind })
                            .or_default();
                        slot.0 += 1;
                        slot.1 += secs;
                    }
                    if report.is_none() {
                        let mut top = slowest.lock().expect("slowest");
                        top.push((secs, label));
                        top.sort_by(|a, b| b.0.total_cmp(&a.0));
                        top.truncate(8);
                    }
                    if let Some(report) = report {
                        failing.fetch_add(1, Ordering::Relaxed);
                        eprintln!("{report}");
                        reports.lock().expect("reports").push((i, report));
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a worker thread");
    }
    let elapsed = start.elapsed();
    let done = done.load(Ordering::Relaxed);
    let mut reports = std::mem::take(&mut *reports.lock().expect("reports"));
    reports.sort_by_key(|(i, _)| *i);
    let failed_fixtures = reports.iter().filter(|(i, _)| *i < fixture_count).count();
    println!(
        "hostile: {done} case(s) run in {:.1} s ({:.1} ms each), {} failed ({failed_fixtures} of them regression fixtures); seed {seed}",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1000.0 / done.max(1) as f64,
        reports.len()
    );
    for (kind, (n, secs)) in timing.lock().expect("timing").iter() {
        println!(
            "hostile:   {kind:<20} {n:>7} case(s) {secs:>8.1} s ({:.1} ms each)",
            secs * 1000.0 / (*n).max(1) as f64
        );
    }
    for (secs, label) in slowest.lock().expect("slowest").iter() {
        println!("hostile:   slowest passing {secs:.2} s: {label}");
    }
    if !reports.is_empty() {
        let mut all = String::new();
        for (_, r) in &reports {
            all.push_str(r);
            all.push('\n');
        }
        let summary = work.join("failures.txt");
        let _ = std::fs::write(&summary, &all);
        panic!(
            "{} hostile case(s) failed (seed {seed}; every report is in {}):\n\n{all}",
            reports.len(),
            summary.display()
        );
    }
}
