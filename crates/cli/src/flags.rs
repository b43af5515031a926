//! Limits of the command-line numbers, and the default names of results
//! folders.
//!
//! Every count and rate a user types is checked here before anything is
//! allocated or simulated, so an absurd value is a usage error (exit 2)
//! naming the flag and the limit rather than an abort, a hang or a broken
//! invariant later.

use crate::session::{DEFAULT_TRACE, DefaultWorkload, Failure, Prepared, SloArgs, failure};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Most seeds per deployment in `compare`: each seed is a whole simulation
/// whose summary is held until the report is written.
pub const MAX_SEEDS: u64 = 10_000;
/// Most requests drawn from a workload shape or kept by `--max-requests`.
pub const MAX_REQUESTS: u64 = 100_000_000;
/// The highest request rate, in requests per second: far above any real
/// cluster's, low enough that arrival gaps stay whole nanoseconds apart.
pub const MAX_RATE_PER_S: f64 = 1e7;
/// The lowest request rate: one request in about 11.6 days.
pub const MIN_RATE_PER_S: f64 = 1e-6;
/// The longest mean span of a synthetic workload (requests / rate), in
/// seconds: about 31.7 years, an eighteenth of what u64 nanoseconds hold,
/// so the random arrival times cannot overflow.
pub const MAX_SPAN_S: f64 = 1e9;
/// Most simulations per layout in `plan`'s search.
pub const MAX_RUNS: u32 = 1_000;
/// Most shards of a plan.
pub const MAX_SHARDS: usize = 100_000;
/// The highest price of a GPU-hour, in USD.
pub const MAX_GPU_HOUR_USD: f64 = 1e6;
/// The highest SLO threshold, in milliseconds (about 11.6 days).
pub const MAX_SLO_MS: f64 = 1e9;

/// The value parser of a whole-number flag (a count, a seed). Its
/// argument is declared with `allow_negative_numbers`, so that `--requests
/// -3` reaches a parser instead of clap's "unexpected argument '-3'" (clap
/// reads a word starting with `-` as the next flag): a negative number is
/// refused here by saying so, where the integer parser would say "invalid
/// digit found in string". The float flags (`--rate`, `--target-rate`,
/// `--attainment`, `--gpu-hour-usd`, `--client-timeout-s`) take negative
/// numbers the same way and refuse them in their own checks.
pub fn whole<T>(text: &str) -> Result<T, String>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    if let Some(digits) = text.strip_prefix('-')
        && !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit() || b == b'.')
    {
        return Err(
            "must be a whole number, 0 or more; a negative number means nothing here".into(),
        );
    }
    text.parse::<T>().map_err(|e| e.to_string())
}

/// Checks a request rate given as `flag`.
pub fn rate(flag: &str, rate_per_s: f64) -> Result<(), Failure> {
    if !rate_per_s.is_finite() || rate_per_s <= 0.0 {
        return Err(failure(
            2,
            format!(
                "{flag} {}: must be a positive, finite number of requests per second",
                shown(rate_per_s)
            ),
        ));
    }
    if !(MIN_RATE_PER_S..=MAX_RATE_PER_S).contains(&rate_per_s) {
        return Err(failure(
            2,
            format!(
                "{flag} {}: must lie between {MIN_RATE_PER_S:e} and {MAX_RATE_PER_S:e} requests per second",
                shown(rate_per_s)
            ),
        ));
    }
    Ok(())
}

/// Checks `--requests`, and with `--rate` that the workload's mean span
/// fits simulated time.
pub fn synthetic(rate_per_s: Option<f64>, requests: Option<u64>) -> Result<(), Failure> {
    if let Some(r) = rate_per_s {
        rate("--rate", r)?;
    }
    if let Some(n) = requests {
        if n == 0 {
            return Err(failure(2, "--requests 0: must be at least 1"));
        }
        if n > MAX_REQUESTS {
            return Err(failure(
                2,
                format!("--requests {n}: at most {MAX_REQUESTS} requests"),
            ));
        }
    }
    if let (Some(r), Some(n)) = (rate_per_s, requests) {
        let span_s = n as f64 / r;
        if span_s > MAX_SPAN_S {
            return Err(failure(
                2,
                format!(
                    "--rate {} with --requests {n}: the requests would span about {span_s:.3e} s of simulated time, more than the {MAX_SPAN_S:e} s (about 31 years) pdsim simulates; raise the rate or draw fewer requests",
                    shown(r)
                ),
            ));
        }
    }
    Ok(())
}

/// Checks `--seeds`.
pub fn seeds(n: u64) -> Result<(), Failure> {
    if n == 0 {
        return Err(failure(2, "--seeds 0: must be at least 1"));
    }
    if n > MAX_SEEDS {
        return Err(failure(
            2,
            format!("--seeds {n}: at most {MAX_SEEDS} seeds per deployment"),
        ));
    }
    Ok(())
}

/// The worker threads for `--jobs`: the cores when not given; more than
/// the cores is clamped to them, with a note naming the flag.
pub fn jobs(command: &str, jobs: Option<usize>) -> Result<usize, Failure> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    match jobs {
        None => Ok(cores),
        Some(0) => Err(failure(2, "--jobs 0: must be at least 1")),
        Some(n) if n > cores => {
            eprintln!(
                "pdsim {command}: note: --jobs {n} is more than the {cores} cores here; running {cores} at a time (results do not depend on it)"
            );
            Ok(cores)
        }
        Some(n) => Ok(n),
    }
}

/// Checks `--max-runs`.
pub fn max_runs(n: u32) -> Result<(), Failure> {
    if n == 0 || n > MAX_RUNS {
        return Err(failure(
            2,
            format!("--max-runs {n}: must lie between 1 and {MAX_RUNS}"),
        ));
    }
    Ok(())
}

/// Checks `--max-requests` (a rate needs two requests).
pub fn max_requests(n: usize) -> Result<(), Failure> {
    if n < 2 || n as u64 > MAX_REQUESTS {
        return Err(failure(
            2,
            format!(
                "--max-requests {n}: must lie between 2 (a rate needs two requests) and {MAX_REQUESTS}"
            ),
        ));
    }
    Ok(())
}

/// Parses `--shard I/N`.
pub fn shard(text: &str) -> Result<[usize; 2], Failure> {
    if text.trim() == "auto" {
        return shard_from_env(&|name| std::env::var(name).ok());
    }
    let bad = || {
        failure(
            2,
            format!("--shard {text}: expected I/N with 0 ≤ I < N ≤ {MAX_SHARDS} (I counts from 0)"),
        )
    };
    let (i, n) = text.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i >= n || n > MAX_SHARDS {
        return Err(bad());
    }
    Ok([i, n])
}

/// The shard `--shard auto` takes from the batch system running it, read
/// through `var` (the process environment):
///
/// - a Kubernetes Indexed Job: the index from `JOB_COMPLETION_INDEX`
///   (which the Job controller sets on each pod), the count from
///   `PDSIM_SHARD_COUNT` (the Job's `completions`, which Kubernetes does not
///   pass to the pod; `deploy/kubernetes/plan-indexed-job.yaml` sets both
///   from one value);
/// - a Slurm job array: the index from `SLURM_ARRAY_TASK_ID` less
///   `SLURM_ARRAY_TASK_MIN` (an array may start anywhere), the count from
///   `SLURM_ARRAY_TASK_COUNT`; an array with a step other than 1 is refused,
///   as its task numbers would leave shards out.
///
/// Both at once, or neither, is an error naming the variables.
pub fn shard_from_env(var: &dyn Fn(&str) -> Option<String>) -> Result<[usize; 2], Failure> {
    let number = |name: &str| -> Result<Option<usize>, Failure> {
        match var(name) {
            None => Ok(None),
            Some(v) => v.trim().parse().map(Some).map_err(|_| {
                failure(
                    2,
                    format!("--shard auto: {name}={v:?} is not a whole number"),
                )
            }),
        }
    };
    let kubernetes = number("JOB_COMPLETION_INDEX")?;
    let slurm = number("SLURM_ARRAY_TASK_ID")?;
    let (i, n, from) = match (kubernetes, slurm) {
        (Some(_), Some(_)) => {
            return Err(failure(
                2,
                "--shard auto: both JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) and SLURM_ARRAY_TASK_ID (a Slurm array) are set; give --shard I/N",
            ));
        }
        (Some(i), None) => {
            let n = number("PDSIM_SHARD_COUNT")?.ok_or_else(|| {
                failure(
                    2,
                    "--shard auto: JOB_COMPLETION_INDEX is set but PDSIM_SHARD_COUNT is not; set it to the Indexed Job's completions (deploy/kubernetes/plan-indexed-job.yaml does)",
                )
            })?;
            (i, n, "JOB_COMPLETION_INDEX / PDSIM_SHARD_COUNT")
        }
        (None, Some(id)) => {
            if let Some(step) = number("SLURM_ARRAY_TASK_STEP")?
                && step != 1
            {
                return Err(failure(
                    2,
                    format!(
                        "--shard auto: the Slurm array steps by {step} (SLURM_ARRAY_TASK_STEP); submit it as --array=0-(N-1) so every shard runs"
                    ),
                ));
            }
            let min = number("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let n = number("SLURM_ARRAY_TASK_COUNT")?.ok_or_else(|| {
                failure(
                    2,
                    "--shard auto: SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not",
                )
            })?;
            let i = id.checked_sub(min).ok_or_else(|| {
                failure(
                    2,
                    format!(
                        "--shard auto: SLURM_ARRAY_TASK_ID {id} is below SLURM_ARRAY_TASK_MIN {min}"
                    ),
                )
            })?;
            (
                i,
                n,
                "SLURM_ARRAY_TASK_ID − SLURM_ARRAY_TASK_MIN / SLURM_ARRAY_TASK_COUNT",
            )
        }
        (None, None) => {
            return Err(failure(
                2,
                "--shard auto: neither a Kubernetes Indexed Job (JOB_COMPLETION_INDEX, PDSIM_SHARD_COUNT) nor a Slurm array (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT) is in the environment; give --shard I/N",
            ));
        }
    };
    if n == 0 || i >= n || n > MAX_SHARDS {
        return Err(failure(
            2,
            format!("--shard auto: shard {i} of {n} (from {from}) is not 0 ≤ I < N ≤ {MAX_SHARDS}"),
        ));
    }
    Ok([i, n])
}

/// Checks `--gpu-hour-usd`.
pub fn gpu_hour_usd(price: f64) -> Result<(), Failure> {
    if !price.is_finite() || price <= 0.0 || price > MAX_GPU_HOUR_USD {
        return Err(failure(
            2,
            format!(
                "--gpu-hour-usd {}: must be a positive number of USD, at most {MAX_GPU_HOUR_USD:e}",
                shown(price)
            ),
        ));
    }
    Ok(())
}

/// Checks one SLO threshold of `--slo text` (the report crate checked that
/// it is positive and finite).
pub fn slo_ms(text: &str, key: &str, value_ms: Option<f64>) -> Result<(), Failure> {
    if let Some(v) = value_ms
        && v > MAX_SLO_MS
    {
        return Err(failure(
            2,
            format!(
                "--slo {text}: {key} {} is more than {MAX_SLO_MS:e} ms (about 11.6 days)",
                shown(v)
            ),
        ));
    }
    Ok(())
}

/// A part of a folder name: letters, digits, `-`, `_` and `.` kept, others
/// made `_`, at most `max` characters, never hidden (no leading `.`).
pub fn safe_part(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .take(max)
        .collect();
    if out.starts_with('.') {
        out.replace_range(0..1, "_");
    }
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// Eight hex digits of SHA-256 over `parts`: what tells two runs' default
/// folders apart when their readable parts agree.
pub fn short_hash(parts: &[String]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update(part.as_bytes());
        hasher.update([0u8]);
    }
    hasher.finalize()[..4]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A file as it enters a default name's hash: its real path when it
/// exists (so `./a` and `a` agree), else as written (`builtin:` names).
pub fn identity(path: &Path) -> String {
    path.canonicalize()
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string()
}

/// The readable name of a trace in a folder name: its file stem.
pub fn trace_stem(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    // `builtin:traces/default.jsonl` has the stem `default`.
    safe_part(&stem, 40)
}

/// `--rate` and `--requests` draw requests from a workload shape: given
/// when the requests come from a trace, they would be silently ignored, so
/// they are refused, naming the flag and where the requests come from.
pub fn workload_flags(
    p: &Prepared,
    trace: Option<&Path>,
    rate: Option<f64>,
    requests: Option<u64>,
) -> Result<(), Failure> {
    let (flag, it) = match (rate.is_some(), requests.is_some()) {
        (true, true) => ("--rate and --requests", "they apply"),
        (true, false) => ("--rate", "it applies"),
        (false, true) => ("--requests", "it applies"),
        (false, false) => return Ok(()),
    };
    let (why, fix) = match (trace, &p.workload) {
        (Some(t), _) => (
            format!(
                "the requests come from --trace {}, whose rows carry their own arrival times and count",
                t.display()
            ),
            "remove the flag or --trace",
        ),
        (None, DefaultWorkload::Trace(t)) => (
            format!(
                "the scenario's workload is the trace {}, whose rows carry their own arrival times and count",
                t.display()
            ),
            "remove the flag",
        ),
        (None, DefaultWorkload::Shape(..)) => return Ok(()),
        (None, DefaultWorkload::Bundled) => (
            "the scenario has no workload, so the bundled trace is replayed with its own arrival times and count".to_string(),
            "remove the flag",
        ),
    };
    Err(failure(
        2,
        format!(
            "{flag} cannot apply: {why}; {it} only when the scenario's workload is a catalog shape ({fix})"
        ),
    ))
}

/// A number as a flag's message shows it: plainly when ordinary, in
/// exponent form when tiny or huge (so 1e-300 is not 300 zeros).
pub fn shown(x: f64) -> String {
    if x == 0.0 || !x.is_finite() || (1e-4..1e9).contains(&x.abs()) {
        x.to_string()
    } else {
        format!("{x:e}")
    }
}

/// Where the requests come from, as a folder-name part and as it enters
/// the name's hash.
pub fn trace_parts(
    p: &Prepared,
    trace: Option<&Path>,
    rate: Option<f64>,
    requests: Option<u64>,
) -> (String, String) {
    if let Some(t) = trace {
        return (trace_stem(t), format!("trace {}", identity(t)));
    }
    match &p.workload {
        DefaultWorkload::Trace(t) => (trace_stem(t), format!("trace {}", identity(t))),
        DefaultWorkload::Shape(name, _) => {
            let rate = rate.map(|r| r.to_string()).unwrap_or_default();
            let requests = requests.map(|n| n.to_string()).unwrap_or_default();
            (
                format!("{}-r{rate}-n{requests}", safe_part(name, 40)),
                format!("shape {name} rate {rate} requests {requests}"),
            )
        }
        DefaultWorkload::Bundled => (
            trace_stem(Path::new(DEFAULT_TRACE)),
            format!("trace {DEFAULT_TRACE}"),
        ),
    }
}

/// What the SLO flags and catalogs add to a default name's hash.
pub fn slo_and_catalog_parts(slo: &SloArgs, catalogs: &[PathBuf]) -> Vec<String> {
    let mut parts: Vec<String> = slo.slo.iter().map(|s| format!("slo {s}")).collect();
    if let Some(price) = slo.gpu_hour_usd {
        parts.push(format!("gpu-hour-usd {price}"));
    }
    if let Some(seconds) = slo.client_timeout_s {
        parts.push(format!("client-timeout-s {seconds}"));
    }
    parts.extend(catalogs.iter().map(|c| format!("catalog {}", identity(c))));
    parts
}

/// Warns about `--slo CLASS:…` naming a class no request of the workload
/// has: its SLO applied to nothing.
pub fn warn_unknown_classes(command: &str, slo: &SloArgs, names: &[String]) {
    let Ok((_, named)) = slo.parse() else {
        return;
    };
    for class in named.keys() {
        if !names.iter().any(|n| n == class) {
            let known: Vec<&str> = names
                .iter()
                .filter(|n| !n.is_empty())
                .map(String::as_str)
                .collect();
            let known = if known.is_empty() {
                "the requests have no SLO classes".to_string()
            } else {
                format!("its classes are {}", known.join(", "))
            };
            eprintln!(
                "pdsim {command}: warning: --slo {class}:…: no request is in class `{class}`, so this SLO applied to nothing ({known})"
            );
        }
    }
}

/// Each `--catalog DIR` must be a folder: a missing one would otherwise be
/// searched silently and find nothing.
pub fn catalogs(dirs: &[PathBuf]) -> Result<(), Failure> {
    for dir in dirs {
        match std::fs::metadata(dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(failure(
                    2,
                    format!("--catalog {}: not a folder", dir.display()),
                ));
            }
            Err(e) => return Err(failure(2, format!("--catalog {}: {e}", dir.display()))),
        }
    }
    Ok(())
}

/// Says when `--trace` takes the place of the scenario's own workload, so
/// the scenario's trace or shape is not dropped silently.
pub fn note_trace_override(command: &str, p: &Prepared, trace: Option<&Path>) {
    let Some(t) = trace else {
        return;
    };
    let replaced = match &p.workload {
        DefaultWorkload::Trace(own) => format!("the scenario's workload trace {}", own.display()),
        DefaultWorkload::Shape(name, _) => format!("the scenario's workload shape `{name}`"),
        DefaultWorkload::Bundled => return,
    };
    eprintln!(
        "pdsim {command}: note: --trace {} replaces {replaced}",
        t.display()
    );
}

#[cfg(test)]
mod tests {
    #[test]
    fn shard_auto_reads_kubernetes_and_slurm() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let shard = |pairs: &'static [(&'static str, &'static str)]| {
            super::shard_from_env(&env(pairs)).map_err(|f| f.message)
        };
        assert_eq!(
            shard(&[("JOB_COMPLETION_INDEX", "2"), ("PDSIM_SHARD_COUNT", "4")]),
            Ok([2, 4])
        );
        assert_eq!(
            shard(&[
                ("SLURM_ARRAY_TASK_ID", "3"),
                ("SLURM_ARRAY_TASK_COUNT", "4")
            ]),
            Ok([3, 4])
        );
        // An array numbered from 1: its first task is shard 0.
        assert_eq!(
            shard(&[
                ("SLURM_ARRAY_TASK_ID", "1"),
                ("SLURM_ARRAY_TASK_MIN", "1"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
                ("SLURM_ARRAY_TASK_STEP", "1"),
            ]),
            Ok([0, 4])
        );
        for (pairs, says) in [
            (&[][..], "neither"),
            (
                &[("JOB_COMPLETION_INDEX", "0")][..],
                "PDSIM_SHARD_COUNT is not",
            ),
            (
                &[("JOB_COMPLETION_INDEX", "0"), ("SLURM_ARRAY_TASK_ID", "0")][..],
                "both",
            ),
            (
                &[("JOB_COMPLETION_INDEX", "4"), ("PDSIM_SHARD_COUNT", "4")][..],
                "shard 4 of 4",
            ),
            (
                &[("JOB_COMPLETION_INDEX", "x"), ("PDSIM_SHARD_COUNT", "4")][..],
                "is not a whole number",
            ),
            (
                &[
                    ("SLURM_ARRAY_TASK_ID", "2"),
                    ("SLURM_ARRAY_TASK_COUNT", "2"),
                    ("SLURM_ARRAY_TASK_STEP", "2"),
                ][..],
                "steps by 2",
            ),
            (
                &[
                    ("SLURM_ARRAY_TASK_ID", "0"),
                    ("SLURM_ARRAY_TASK_MIN", "1"),
                    ("SLURM_ARRAY_TASK_COUNT", "2"),
                ][..],
                "below SLURM_ARRAY_TASK_MIN",
            ),
        ] {
            let owned: Vec<(&'static str, &'static str)> = pairs.to_vec();
            let got = super::shard_from_env(&move |name: &str| {
                owned
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            });
            let message = got.map_err(|f| f.message).unwrap_err();
            assert!(message.contains(says), "{pairs:?}: {message}");
        }
    }

    use super::*;

    #[test]
    fn names_are_safe_and_hashes_stable() {
        assert_eq!(safe_part("a/b c", 10), "a_b_c");
        assert_eq!(safe_part("..x", 10), "_.x");
        assert_eq!(safe_part("", 10), "_");
        assert_eq!(safe_part("abcdef", 3), "abc");
        let h = short_hash(&["a".into(), "b".into()]);
        assert_eq!(h.len(), 8);
        assert_eq!(h, short_hash(&["a".into(), "b".into()]));
        assert_ne!(h, short_hash(&["ab".into()]), "parts are separated");
    }

    /// A negative whole number is refused by saying it is negative; any
    /// other text keeps the integer parser's own message.
    #[test]
    fn whole_number_flags_refuse_negative_numbers_by_name() {
        assert_eq!(whole::<u64>("3"), Ok(3));
        assert_eq!(whole::<usize>("0"), Ok(0));
        for text in ["-1", "-3", "-0", "-1.5", "-18446744073709551616"] {
            let e = whole::<u64>(text).unwrap_err();
            assert!(e.contains("0 or more"), "{text}: {e}");
        }
        assert_eq!(
            whole::<u32>("x").unwrap_err(),
            "invalid digit found in string"
        );
        assert_eq!(
            whole::<u32>("5000000000").unwrap_err(),
            "number too large to fit in target type"
        );
    }

    #[test]
    fn counts_have_limits() {
        assert!(seeds(0).is_err() && seeds(MAX_SEEDS + 1).is_err() && seeds(3).is_ok());
        assert!(rate("--rate", 1e-300).is_err());
        assert!(rate("--rate", f64::NAN).is_err());
        assert!(rate("--rate", f64::INFINITY).is_err());
        assert!(rate("--rate", 5.0).is_ok());
        assert!(synthetic(Some(1e-5), Some(1_000_000)).is_err(), "1e11 s");
        assert!(synthetic(Some(10.0), Some(1_000)).is_ok());
        assert!(synthetic(None, Some(0)).is_err());
        assert_eq!(shard("1/3").unwrap(), [1, 3]);
        assert!(shard("3/3").is_err() && shard("0/0").is_err() && shard("x").is_err());
        assert!(shard("0/100000000000").is_err());
        assert!(max_runs(0).is_err() && max_runs(10).is_ok());
        assert!(max_requests(1).is_err() && max_requests(2).is_ok());
        assert!(jobs("t", Some(0)).is_err());
        assert!(jobs("t", Some(usize::MAX)).unwrap() >= 1);
    }
}
