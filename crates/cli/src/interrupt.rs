//! SIGINT and SIGTERM: remove what the run has not finished (its staging
//! folder, a partial Perfetto trace) and exit 130 or 143 with one line on
//! stderr.
//!
//! The signals are received by signal-hook's iterator on one background
//! thread, started at the command's edge in `main`; no simulation ever runs
//! a thread of its own for this. Every unfinished path is registered here
//! while it exists, and the folder swap of a commit holds the same lock, so
//! an interrupt never lands between the two renames of a replacement.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The unfinished paths of this process, removed on an interrupt.
static UNFINISHED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Starts the thread that waits for SIGINT and SIGTERM, for `command`.
pub fn install(command: &'static str) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    // A signal the parent set to be ignored (a script's background job
    // ignores SIGINT) stays ignored, as the shell convention asks.
    let ignored = ignored_at_start();
    let wanted: Vec<i32> = [SIGINT, SIGTERM]
        .into_iter()
        .filter(|s| !ignored.contains(s))
        .collect();
    if wanted.is_empty() {
        return;
    }
    let mut signals = match signal_hook::iterator::Signals::new(&wanted) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "pdsim {command}: note: cannot catch interrupts ({e}); an interrupted run may leave a hidden .partial folder, which the next run removes"
            );
            return;
        }
    };
    let spawned = std::thread::Builder::new()
        .name("pdsim-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let (code, name) = if signal == SIGINT {
                    (130, "SIGINT")
                } else {
                    (143, "SIGTERM")
                };
                stop(command, code, name);
            }
        });
    if let Err(e) = spawned {
        eprintln!("pdsim {command}: note: cannot catch interrupts ({e})");
    }
}

/// The signals this process was started with set to be ignored, read from
/// `/proc/self/status` (`SigIgn`, a hexadecimal mask whose bit n-1 is
/// signal n); none where there is no `/proc`.
fn ignored_at_start() -> Vec<i32> {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else {
        return Vec::new();
    };
    let Some(mask) = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
    else {
        return Vec::new();
    };
    (1..=64).filter(|n| mask & (1u64 << (n - 1)) != 0).collect()
}

/// Removes a path, retrying a few times: a worker thread may be creating a
/// file in a folder while it is removed.
fn remove(path: &Path) -> bool {
    for _ in 0..5 {
        let gone = match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path).is_ok(),
            Ok(_) => std::fs::remove_file(path).is_ok(),
            Err(_) => return true,
        };
        if gone {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

/// Removes every unfinished path and exits.
fn stop(command: &str, code: i32, name: &str) -> ! {
    // A poisoned lock still holds the paths.
    let unfinished = UNFINISHED.lock().unwrap_or_else(|e| e.into_inner());
    let mut removed: Vec<String> = Vec::new();
    let mut left: Vec<String> = Vec::new();
    for path in unfinished.iter() {
        if std::fs::symlink_metadata(path).is_err() {
            continue;
        }
        if remove(path) {
            removed.push(path.display().to_string());
        } else {
            left.push(path.display().to_string());
        }
    }
    // A progress bar may be drawn on a terminal: clear its line first.
    use std::io::IsTerminal;
    let clear = if std::io::stderr().is_terminal() {
        "\r\x1b[2K"
    } else {
        ""
    };
    let mut what = if removed.is_empty() {
        "no results were written".to_string()
    } else {
        format!("removed the unfinished {}", removed.join(", "))
    };
    if !left.is_empty() {
        what.push_str(&format!(
            "; could not remove {} (the next run beside it will)",
            left.join(", ")
        ));
    }
    eprintln!("{clear}pdsim {command}: interrupted by {name}; {what}");
    std::process::exit(code)
}

/// Registers a path to remove on an interrupt.
pub fn remove_on_interrupt(path: &Path) {
    let mut unfinished = UNFINISHED.lock().unwrap_or_else(|e| e.into_inner());
    unfinished.push(path.to_path_buf());
}

/// Forgets a path (it was moved into place or removed).
pub fn keep(path: &Path) {
    let mut unfinished = UNFINISHED.lock().unwrap_or_else(|e| e.into_inner());
    unfinished.retain(|p| p != path);
}

/// Runs `f` with the interrupt handler held off.
pub fn holding<T>(f: impl FnOnce() -> T) -> T {
    let _held = UNFINISHED.lock().unwrap_or_else(|e| e.into_inner());
    f()
}
