//! pdsim against inference-lab 1.0.0 on the same Mooncake trace, in one run
//! (issue 14, item 4).
//!
//! Both replay the same requests (read by pdsim's own Mooncake reader, so
//! the prompts, their block hashes at 16 tokens and the output lengths are
//! the same) on sixteen single-GPU Llama-3.1-8B engines on H100 with
//! `max_num_batched_tokens` 8192, `max_num_seqs` 256 and blocks of 16.
//! pdsim runs as users run it, `pdsim run` with every output file written;
//! inference-lab runs its engine core only (`Engine::submit` and `step`
//! until the queue drains, no metrics), as the issue measured it. The two
//! alternate (pdsim, inference-lab, pdsim, ...) after one warm-up pair, and
//! each run is measured from outside: its wall time, and its CPU time and
//! peak resident memory as the operating system accounts them for that one
//! process (`getrusage(RUSAGE_CHILDREN)` in a process that ran only it).
//! The ratios are taken pair by pair, so a machine whose speed drifts
//! during the run still gives a meaningful one.
//!
//! Usage (from the repository root, after `cargo build --release`):
//!
//! ```text
//! cargo run --release --locked --manifest-path benches/peer/Cargo.toml -- \
//!   --pdsim target/release/pdsim \
//!   --trace ../shared/traces/mooncake_conversation_trace.jsonl [--runs 3]
//! ```

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::Instant;

/// inference-lab's side of the case: its built-in Llama-3.1-8B and H100,
/// sixteen replicas of one GPU each, vLLM's limits as pdsim's deployment
/// sets them. Its default router spreads requests over the replicas.
const INFERENCE_LAB_CONFIG: &str = r#"
model = "llama-3.1-8b-instruct"

[scheduler]
max_num_batched_tokens = 8192
max_num_seqs = 256
policy = "fcfs"
enable_chunked_prefill = true
block_size = 16

[hardware.h100]
tp = 1
replicas = 16
"#;

const BLOCK_TOKENS: u32 = 16;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("measure") => measure(&args[1..]),
        Some("inference-lab") => inference_lab(&args[1..]),
        _ => compare(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pdsim-peer-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The value after `--name`, if given.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// One measured run of a command.
#[derive(Clone, Copy, Debug)]
struct Figures {
    wall_s: f64,
    cpu_s: f64,
    peak_mib: f64,
}

/// `measure -- CMD ARGS...`: runs the command with its output thrown away
/// and prints its wall seconds, CPU seconds and peak resident MiB. This
/// process runs nothing else, so its children's usage is the command's.
fn measure(args: &[String]) -> Result<(), String> {
    let command = match args.first().map(String::as_str) {
        Some("--") => &args[1..],
        _ => args,
    };
    let (program, rest) = command.split_first().ok_or("measure: no command")?;
    let start = Instant::now();
    let status = Command::new(program)
        .args(rest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("{program}: {e}"))?;
    let wall_s = start.elapsed().as_secs_f64();
    if !status.success() {
        return Err(format!("{program} failed: {status}"));
    }
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .map_err(|e| format!("getrusage: {e}"))?;
    let seconds = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
    let cpu_s = seconds(usage.user_time()) + seconds(usage.system_time());
    // Linux reports ru_maxrss in KiB.
    let peak_mib = usage.max_rss() as f64 / 1024.0;
    println!("{wall_s} {cpu_s} {peak_mib}");
    Ok(())
}

/// `inference-lab --trace FILE`: replays the trace through inference-lab's
/// engine core.
fn inference_lab(args: &[String]) -> Result<(), String> {
    use inference_lab::config::ModelConfig;
    use inference_lab::request::Request;
    use inference_lab::simulation::{Engine, Topology};

    let trace = flag(args, "--trace").ok_or("inference-lab: --trace FILE")?;
    let config = ModelConfig::from_toml(INFERENCE_LAB_CONFIG).map_err(|e| e.to_string())?;
    let deployment = config.deployment(Some("h100")).map_err(|e| e.to_string())?;
    let topology = Topology::aggregated(
        deployment.cluster(),
        deployment.model.clone(),
        deployment.scheduler.clone(),
    )?
    .with_routers(&deployment.router, deployment.decode_router());
    let mut engine = Engine::new(topology);
    let requests = read_trace(Path::new(trace))?;
    let submitted = requests.len();
    for (i, spec) in requests.into_iter().enumerate() {
        let prompt_tokens = spec.prompt.tokens().min(u64::from(u32::MAX)) as u32;
        let mut request = Request::new(
            i.to_string(),
            0,
            spec.arrival.as_ns() as f64 * 1e-9,
            prompt_tokens,
            spec.output_tokens.max(1),
        );
        request.prompt_block_hashes = pdsim_core::prompt::block_hashes(&spec.prompt, BLOCK_TOKENS);
        engine.submit(request);
    }
    let mut completed = 0usize;
    while engine.next_event_time().is_some() {
        completed += engine.step()?.completions.len();
    }
    eprintln!(
        "inference-lab: {completed} of {submitted} requests completed by {:.1} s simulated",
        engine.current_time()
    );
    if completed != submitted {
        return Err(format!(
            "only {completed} of {submitted} requests completed"
        ));
    }
    Ok(())
}

/// Every request of a Mooncake trace, read by pdsim's reader.
fn read_trace(path: &Path) -> Result<Vec<pdsim_workload::RequestSpec>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let reader = pdsim_workload::MooncakeReader::new(
        std::io::BufReader::new(file),
        path.display().to_string(),
    );
    reader
        .map(|r| r.map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()
}

/// Runs `command` through `measure` in a child of this program.
fn measured(this: &Path, command: &[String]) -> Result<Figures, String> {
    let out = Command::new(this)
        .arg("measure")
        .arg("--")
        .args(command)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("{}: {e}", this.display()))?;
    if !out.status.success() {
        return Err(format!("measuring {command:?} failed"));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let numbers: Vec<f64> = text
        .split_whitespace()
        .map(|w| w.parse::<f64>().map_err(|e| format!("{w:?}: {e}")))
        .collect::<Result<_, _>>()?;
    match numbers[..] {
        [wall_s, cpu_s, peak_mib] => Ok(Figures {
            wall_s,
            cpu_s,
            peak_mib,
        }),
        _ => Err(format!("measure printed {text:?}")),
    }
}

fn median(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    (v[0], v[v.len() / 2], v[v.len() - 1])
}

/// The bench's output folder must not exist yet: one that does belongs to
/// someone else and is never touched.
fn refuse_existing(out: &Path) -> Result<(), String> {
    if out.exists() {
        return Err(format!(
            "{} already exists; it is not this run's, so it is left alone",
            out.display()
        ));
    }
    Ok(())
}

/// Removes `out` only when it holds pdsim's results marker (`.pdsim-result`,
/// which `pdsim run` writes into a results folder of its own); anything
/// else is left where it is.
fn remove_pdsim_results(out: &Path) -> Result<(), String> {
    if out.join(".pdsim-result").is_file() {
        std::fs::remove_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    Ok(())
}

fn compare(args: &[String]) -> Result<(), String> {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pdsim = flag(args, "--pdsim").ok_or("--pdsim BIN (the pdsim binary to run)")?;
    let trace = flag(args, "--trace").ok_or("--trace FILE (a Mooncake JSONL trace)")?;
    let runs: usize = flag(args, "--runs")
        .unwrap_or("3")
        .parse()
        .map_err(|e| format!("--runs: {e}"))?;
    if runs == 0 {
        return Err("--runs must be at least 1".into());
    }
    let this = std::env::current_exe().map_err(|e| e.to_string())?;
    // pdsim's output folder: one of this run's own, inside the system's
    // temporary folder, replaced run after run (pdsim replaces only its own
    // earlier results) and removed at the end. A folder already there is
    // someone else's: refused, never touched.
    let out: PathBuf =
        std::env::temp_dir().join(format!("pdsim-peer-bench-{}", std::process::id()));
    refuse_existing(&out)?;
    let pdsim_command: Vec<String> = vec![
        pdsim.to_string(),
        "run".into(),
        "--scenario".into(),
        here.join("scenario.yaml").display().to_string(),
        "--deployment".into(),
        here.join("deployment.yaml").display().to_string(),
        "--trace".into(),
        trace.to_string(),
        "--out".into(),
        out.display().to_string(),
    ];
    let peer_command: Vec<String> = vec![
        this.display().to_string(),
        "inference-lab".into(),
        "--trace".into(),
        trace.to_string(),
    ];
    let mut pairs: Vec<(Figures, Figures)> = Vec::new();
    for round in 0..=runs {
        let a = measured(&this, &pdsim_command)?;
        let b = measured(&this, &peer_command)?;
        // Round 0 warms the file cache and is not counted.
        if round > 0 {
            eprintln!(
                "pair {round}: pdsim {:.2} s CPU, inference-lab {:.2} s CPU",
                a.cpu_s, b.cpu_s
            );
            pairs.push((a, b));
        }
    }
    remove_pdsim_results(&out)?;
    println!(
        "pdsim ({pdsim} run) against inference-lab 1.0.0 (engine core), {runs} pairs after a warm-up pair"
    );
    println!("trace: {trace}");
    println!("| figure | pdsim min / median / max | inference-lab min / median / max |");
    println!("|---|---|---|");
    type Pick = fn(&Figures) -> f64;
    let rows: [(&str, Pick); 3] = [
        ("wall s", |f| f.wall_s),
        ("CPU s", |f| f.cpu_s),
        ("peak MiB", |f| f.peak_mib),
    ];
    for (name, pick) in rows {
        let a = median(pairs.iter().map(|p| pick(&p.0)).collect());
        let b = median(pairs.iter().map(|p| pick(&p.1)).collect());
        println!(
            "| {name} | {:.2} / {:.2} / {:.2} | {:.2} / {:.2} / {:.2} |",
            a.0, a.1, a.2, b.0, b.1, b.2
        );
    }
    let (lo, mid, hi) = median(pairs.iter().map(|p| p.1.cpu_s / p.0.cpu_s).collect());
    println!(
        "pdsim is {mid:.2}x as fast as inference-lab in CPU time (pair by pair: {lo:.2}-{hi:.2})"
    );
    let (lo, mid, hi) = median(pairs.iter().map(|p| p.1.wall_s / p.0.wall_s).collect());
    println!("and {mid:.2}x in wall time ({lo:.2}-{hi:.2})");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{refuse_existing, remove_pdsim_results};

    #[test]
    fn a_folder_the_bench_did_not_make_is_refused_and_left_alone() {
        let dir = std::env::temp_dir().join(format!("pdsim-peer-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let user_file = dir.join("notes.txt");
        std::fs::write(&user_file, "mine").unwrap();
        // Already there: refused before any run.
        assert!(refuse_existing(&dir).unwrap_err().contains("left alone"));
        // Without pdsim's marker nothing is removed.
        remove_pdsim_results(&dir).unwrap();
        assert_eq!(std::fs::read_to_string(&user_file).unwrap(), "mine");
        // With it (pdsim's own results folder), the folder goes.
        std::fs::write(dir.join(".pdsim-result"), "").unwrap();
        remove_pdsim_results(&dir).unwrap();
        assert!(!dir.exists());
        assert!(refuse_existing(&dir).is_ok());
    }
}
