//! What pdsim's tests share: the shared reference data (`../shared`, third
//! party, never committed) found through `PDSIM_SHARED`, and a skip a person
//! sees.
//!
//! A test that compares pdsim with that data calls [`shared`] first:
//!
//! * `PDSIM_SHARED` names a folder: the test runs on it.
//! * It names something that is not a folder: the test fails, since a typo
//!   must not pass for a skip.
//! * It is unset under CI (`CI=true`, as `.ci/run` runs): the test fails,
//!   since CI must compare.
//! * It is unset elsewhere: the test returns early and says so on the
//!   terminal, not through `eprintln!`, whose output the test harness keeps
//!   to itself for a test that passes; each skip is one line naming the
//!   test and what it would have compared.
//!
//! There is no fallback folder: the data is where the variable says, or
//! the test says it was skipped.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The shared data folder for the test `test`, which would compare with
/// `what` in it; `None` (after a visible skip line) when `PDSIM_SHARED` is
/// unset outside CI. Panics when it is set to something that is not a
/// folder, or unset under `CI=true`.
pub fn shared(test: &str, what: &str) -> Option<PathBuf> {
    match std::env::var_os("PDSIM_SHARED") {
        Some(value) => {
            let dir = PathBuf::from(&value);
            assert!(
                dir.is_dir(),
                "PDSIM_SHARED={} is not a folder ({test} needs {what} in it)",
                dir.display()
            );
            Some(dir)
        }
        None if std::env::var("CI").is_ok_and(|v| v == "true") => panic!(
            "CI=true but PDSIM_SHARED is not set: {test} would skip its comparison with {what}"
        ),
        None => {
            // Written to the process's stderr directly: the harness
            // captures only the print macros, so this line reaches the
            // terminal even when the test passes.
            let _ = writeln!(
                std::io::stderr(),
                "skipped (PDSIM_SHARED is not set): {test}, which compares with {what}"
            );
            None
        }
    }
}

/// Runs the `pdsim` binary `bin` (an integration test's
/// `env!("CARGO_BIN_EXE_pdsim")`) in `dir` with `args`; returns its exit
/// code (-1 when a signal ended it), standard output and standard error.
pub fn run_pdsim(bin: &str, dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = std::process::Command::new(bin)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("the pdsim binary runs");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Says on the terminal that `test` skipped `what` because of `why`, the
/// way [`shared`] does: one line the harness does not capture.
pub fn skipped(test: &str, what: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "skipped ({why}): {test}, {what}");
}

/// The entries of `dir` in the shared data, in name order, so that a test
/// over a folder's files goes through them the same way on every machine.
/// Panics, naming the folder, when it cannot be read.
pub fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            e.unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .path()
        })
        .collect();
    paths.sort();
    paths
}
