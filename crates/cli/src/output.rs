//! Where results go, and what pdsim may remove or replace there.
//!
//! Users' files are sacred: pdsim replaces an existing folder only when it
//! carries the marker pdsim writes into every results folder
//! ([`MARKER`]) and holds nothing but the files that marker lists. Any other
//! existing folder or file, `.`, `..`, `/`, the home folder or a folder that
//! holds the working folder is refused. A replacement renames the old result
//! aside, moves the new one in and only then deletes the old one, so a crash
//! at any point leaves one of the two complete. Files such as `--perfetto`
//! are written under a hidden temporary name and renamed into place only
//! when the target is absent or a trace pdsim wrote; a FIFO or a character
//! device is written directly, and anything else is refused.
//!
//! A run holds an exclusive lock on a file in every temporary folder it
//! works in ([`LOCK`]) and on its partial trace, for as long as they exist.
//! What a stopped run left is removed by the next run beside it only when
//! that lock can be taken: a process id says nothing about a run in another
//! container, or on another machine sharing the file system, while a lock
//! is held wherever its holder runs.

use crate::interrupt;
use crate::session::{Failure, failure};
use pdsim_report::perfetto::{HEAD as PERFETTO_HEAD, OLD_HEAD as OLD_PERFETTO_HEAD};
use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::ops::ControlFlow;
use std::path::{Component, Path, PathBuf};

/// The name of the marker file in every results folder pdsim writes.
pub const MARKER: &str = ".pdsim-result";

/// How the marker's first line starts: what makes a folder a pdsim result.
const MARKER_HEAD: &str = "pdsim result:";

/// The most of a marker pdsim reads: a marker lists every file of its
/// folder, and a folder of 10,000 seeds × several deployments lists a few
/// MiB at most.
const MARKER_LIMIT_BYTES: u64 = 64 << 20;

/// The lock file in every temporary folder pdsim works in: the run writing
/// the folder (or moving an earlier result aside) holds an exclusive lock on
/// it until the folder is moved into place or removed. A run beside it
/// removes the folder only when it can take that lock itself, which it can
/// only once the holder has ended, wherever the holder runs. The file is
/// pdsim's own, like the marker: a results folder holding it (a run stopped
/// just after moving its results into place) is still pdsim's alone.
pub const LOCK: &str = ".pdsim-lock";

/// What a marker records of a file pdsim wrote, to tell it from the same
/// file edited since: its length and the SHA-256 of its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digest {
    bytes: u64,
    sha256: String,
}

impl Digest {
    /// The digest of the regular file `path` as it is now; `None` when it
    /// cannot be read. A FIFO or a device put in its place is not opened.
    fn of(path: &Path) -> Option<Digest> {
        use sha2::Digest as _;
        let mut file = crate::disk::open_regular(path).ok()?;
        let mut hasher = sha2::Sha256::new();
        let mut buf = vec![0u8; 1 << 16];
        let mut bytes = 0u64;
        loop {
            match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    hasher.update(&buf[..n]);
                    bytes += n as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
        let sha256 = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Some(Digest { bytes, sha256 })
    }

    /// Whether the regular file `path` still holds what this digest
    /// records. The length is compared first, so a file whose length
    /// changed is told apart without reading it.
    fn matches(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(path).is_ok_and(|m| m.len() == self.bytes)
            && Digest::of(path).is_some_and(|d| d == *self)
    }
}

/// What a marker lists: every file pdsim wrote in its folder, by relative
/// path, with its [`Digest`] when the marker records one. A pdsim result
/// records each file's digest when it is completed; a folder still being
/// written (or left by a stopped run) lists names alone, and so do the
/// markers of pdsims from before digests were recorded.
pub type Listed = BTreeMap<String, Option<Digest>>;

/// Splits a marker line into a file's name and its digest: `NAME`, or
/// `NAME<TAB>LENGTH<TAB>SHA256` (64 lowercase hex digits). A line of any
/// other shape is a name alone, as older markers' lines all are; pdsim
/// writes no name with a control character in it ([`Staged::path`]), so
/// the two never meet.
fn marker_line(line: &str) -> (String, Option<Digest>) {
    let mut fields = line.rsplitn(3, '\t');
    if let (Some(sha256), Some(bytes), Some(name)) = (fields.next(), fields.next(), fields.next())
        && !name.is_empty()
        && sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        && let Ok(bytes) = bytes.parse()
    {
        let sha256 = sha256.to_string();
        return (name.to_string(), Some(Digest { bytes, sha256 }));
    }
    (line.to_string(), None)
}

/// The marker's text: what wrote the folder, and every file in it with its
/// digest when it is known.
fn marker_text(command: &str, files: &Listed) -> String {
    let mut text = format!(
        "{MARKER_HEAD} written by pdsim {} (`pdsim {command}`). pdsim replaces this folder when asked to write here again, but only while it holds nothing except the files listed below, each as pdsim wrote it (its length and SHA-256 follow its name).\n",
        env!("CARGO_PKG_VERSION")
    );
    for (file, digest) in files {
        text.push_str(file);
        if let Some(d) = digest {
            text.push_str(&format!("\t{}\t{}", d.bytes, d.sha256));
        }
        text.push('\n');
    }
    text
}

/// The files a pdsim result's marker lists, or `None` when `dir` is not a
/// real folder (a symbolic link is not) holding a valid marker.
pub fn result_files(dir: &Path) -> Option<Listed> {
    let meta = std::fs::symlink_metadata(dir).ok()?;
    if !meta.is_dir() {
        return None;
    }
    let marker = dir.join(MARKER);
    if !std::fs::symlink_metadata(&marker).ok()?.is_file() {
        return None;
    }
    let mut text = String::new();
    std::fs::File::open(&marker)
        .ok()?
        .take(MARKER_LIMIT_BYTES)
        .read_to_string(&mut text)
        .ok()?;
    let mut lines = text.lines();
    if !lines.next()?.starts_with(MARKER_HEAD) {
        return None;
    }
    Some(lines.filter(|l| !l.is_empty()).map(marker_line).collect())
}

/// What a walk of a folder carrying the marker finds ([`walk_written`]).
enum Found {
    /// A regular file the marker lists, by its relative path, that still
    /// holds what the marker records of it (or of which it records no
    /// digest): pdsim's.
    Written(String),
    /// Anything else, as refusals and notes name it: a file the marker does
    /// not list, a listed file whose length or SHA-256 is no longer what
    /// the marker records (someone edited it, so it is theirs now; named
    /// with `(changed since pdsim wrote it)`), a symbolic link (even under a
    /// listed name), a folder holding nothing the marker lists or that
    /// cannot be read (with a trailing `/`, and not walked), `.` for the
    /// folder itself unread.
    Other(String),
    /// A folder holding listed files, once everything in it was found.
    Walked(String),
}

/// Walks `dir`, a folder carrying the marker, in name order, and tells
/// `visit` what each entry is ([`Found`]) until it breaks. The marker and
/// the lock file are pdsim's own and are not listed: they are skipped when
/// they are regular files. A folder is entered only when the marker lists
/// something inside it, so a user's folder is named whole. Only entries
/// found in `dir` are matched against the list, so a marker listing `..`
/// or an absolute path names nothing. Both what a refusal names
/// ([`foreign_entries`]) and what a removal spares ([`remove_written`]) come
/// from this one walk, so the two never disagree on what pdsim wrote.
fn walk_written(dir: &Path, listed: &Listed, visit: &mut dyn FnMut(Found) -> ControlFlow<()>) {
    fn walk(
        root: &Path,
        rel: &str,
        listed: &Listed,
        visit: &mut dyn FnMut(Found) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
            return visit(Found::Other(if rel.is_empty() {
                ".".into()
            } else {
                format!("{rel}/")
            }));
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let file_type = entry.file_type();
            if (path == MARKER || path == LOCK) && file_type.as_ref().is_ok_and(|t| t.is_file()) {
                continue;
            }
            match file_type {
                Ok(t) if t.is_dir() => {
                    let prefix = format!("{path}/");
                    // The first listed name from the prefix on tells
                    // whether any listed file lies inside.
                    if listed
                        .range(prefix.clone()..)
                        .next()
                        .is_some_and(|(f, _)| f.starts_with(&prefix))
                    {
                        walk(root, &path, listed, visit)?;
                        visit(Found::Walked(path))?;
                    } else {
                        visit(Found::Other(prefix))?;
                    }
                }
                Ok(t) if t.is_file() && listed.contains_key(&path) => match &listed[&path] {
                    Some(digest) if !digest.matches(&root.join(&path)) => visit(Found::Other(
                        format!("{path} (changed since pdsim wrote it)"),
                    ))?,
                    _ => visit(Found::Written(path))?,
                },
                _ => visit(Found::Other(path))?,
            }
        }
        ControlFlow::Continue(())
    }
    let _ = walk(dir, "", listed, visit);
}

/// The first five entries of `dir` (relative paths) that its marker does
/// not list, as [`walk_written`] names them: a user's notes added to a
/// result, a symbolic link, an empty folder.
fn foreign_entries(dir: &Path, listed: &Listed) -> Vec<String> {
    let mut out = Vec::new();
    walk_written(dir, listed, &mut |found| {
        if let Found::Other(name) = found {
            out.push(name);
            if out.len() >= 5 {
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    out
}

/// The absolute path `path` names, with the symbolic links of its existing
/// folders resolved; the part that does not exist yet is taken as written
/// (it has no links to resolve).
fn resolve(path: &Path) -> std::io::Result<PathBuf> {
    let mut out = std::env::current_dir()?.canonicalize()?;
    let components: Vec<Component> = path.components().collect();
    for (i, c) in components.iter().enumerate() {
        match c {
            Component::RootDir | Component::Prefix(_) => out = PathBuf::from(c.as_os_str()),
            Component::CurDir => {}
            // `out` has no links here (resolved, or not existing), so its
            // parent is the folder `..` names.
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                out.push(name);
                // A folder on the way is resolved; the target itself is
                // looked at without following it.
                if i + 1 < components.len()
                    && let Ok(real) = out.canonicalize()
                {
                    out = real;
                }
            }
        }
    }
    Ok(out)
}

/// What `--out` names today.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Existing {
    /// Nothing: the results are moved there.
    Absent,
    /// An earlier pdsim result, holding only its own files: it is replaced.
    Result,
}

/// Whether pdsim may write a results folder at `out`; refusals are exit 2
/// and name the folder and why.
pub fn check_out(out: &Path) -> Result<Existing, Failure> {
    let shown = out.display();
    let refuse = |why: &str| {
        failure(
            2,
            format!(
                "--out {shown}: {why}; pdsim never deletes or replaces what it did not write, so choose a new folder name (or remove it yourself)"
            ),
        )
    };
    if out.as_os_str().is_empty() {
        return Err(failure(2, "--out: the folder name is empty"));
    }
    match out.components().next_back() {
        Some(Component::Normal(_)) => {}
        _ => {
            return Err(refuse(
                "names the working folder, a parent folder or the root, which pdsim would have to replace whole",
            ));
        }
    }
    let abs = resolve(out).map_err(|e| failure(2, format!("--out {shown}: {e}")))?;
    if abs.parent().is_none() {
        return Err(refuse("is the root folder"));
    }
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        let home = Path::new(&home);
        let home = home.canonicalize().unwrap_or_else(|_| home.to_path_buf());
        if home.starts_with(&abs) {
            return Err(refuse("is the home folder or holds it"));
        }
    }
    if let Ok(cwd) = std::env::current_dir()
        && cwd.canonicalize().unwrap_or(cwd).starts_with(&abs)
    {
        return Err(refuse("is the working folder or holds it"));
    }
    let meta = match std::fs::symlink_metadata(out) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Absent),
        Err(e) => return Err(failure(2, format!("--out {shown}: {e}"))),
    };
    if meta.file_type().is_symlink() {
        return Err(refuse(
            "is a symbolic link, and pdsim does not follow it to replace what it points to",
        ));
    }
    if !meta.is_dir() {
        return Err(refuse("already exists and is not a folder"));
    }
    let Some(listed) = result_files(out) else {
        return Err(refuse(&format!(
            "already exists and is not a pdsim result (it has no {MARKER} marker)"
        )));
    };
    let foreign = foreign_entries(out, &listed);
    if !foreign.is_empty() {
        return Err(refuse(&format!(
            "is an earlier pdsim result, but it now also holds what pdsim did not write ({})",
            foreign.join(", ")
        )));
    }
    Ok(Existing::Result)
}

/// The process id in a hidden temporary name `.NAME.partial-PID` or
/// `.NAME.old-PID`, with NAME and which kind it is.
fn temporary_name(name: &str) -> Option<(&str, &'static str, u32)> {
    let rest = name.strip_prefix('.')?;
    for kind in [".partial-", ".old-"] {
        if let Some((base, pid)) = rest.rsplit_once(kind)
            && !base.is_empty()
            && !pid.is_empty()
            && pid.bytes().all(|b| b.is_ascii_digit())
            && let Ok(pid) = pid.parse()
        {
            return Some((base, kind, pid));
        }
    }
    None
}

/// Whether process `pid` is running here; `None` when this system cannot
/// say (no `/proc`). It only decides whether a kept folder is worth a note:
/// a process of another container or machine is not in this `/proc`, so
/// its absence never shows that a run has ended.
fn running(pid: u32) -> Option<bool> {
    if !Path::new("/proc/self").exists() {
        return None;
    }
    Some(pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists())
}

/// Who is working on a temporary folder or partial trace of pdsim's, as
/// its lock tells.
enum Owner {
    /// The run that wrote it has ended: its lock was free and is now held
    /// by this process (for as long as this value lives), so no other run
    /// clears the same folder at the same time.
    Gone(File),
    /// A run holds the lock: it is still writing, wherever it runs.
    Working,
    /// There is no lock to tell by; why.
    Unknown(String),
}

/// Takes the lock of `lock` (a folder's lock file, or a partial trace)
/// if it is free.
fn try_owner(lock: &Path) -> Owner {
    // Opened for writing (nothing is written) because a network file system
    // emulates these locks with record locks, which need it; read-only when
    // the file is another user's, which a local lock still works on.
    let file = match OpenOptions::new().write(true).open(lock) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => match File::open(lock) {
            Ok(f) => f,
            Err(e) => {
                return Owner::Unknown(format!("cannot open {}: {e}", lock.display()));
            }
        },
        Err(e) => return Owner::Unknown(format!("cannot open {}: {e}", lock.display())),
    };
    match file.try_lock() {
        Ok(()) => Owner::Gone(file),
        Err(TryLockError::WouldBlock) => Owner::Working,
        Err(TryLockError::Error(e)) => {
            Owner::Unknown(format!("cannot lock {}: {e}", lock.display()))
        }
    }
}

/// Who is working on temporary folder `dir`, by its lock file.
fn folder_owner(dir: &Path) -> Owner {
    let lock = dir.join(LOCK);
    match std::fs::symlink_metadata(&lock) {
        Ok(meta) if meta.is_file() => try_owner(&lock),
        Ok(_) => Owner::Unknown(format!("its {LOCK} is not a regular file")),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Owner::Unknown(format!(
            "it has no {LOCK} lock file, so the pdsim that wrote it (an older one, or one that could not lock on this file system) cannot be told finished"
        )),
        Err(e) => Owner::Unknown(format!("{}: {e}", lock.display())),
    }
}

/// Takes the lock of folder `dir` for this process: makes its lock file
/// (or opens the one a stopped run left) and locks it, for as long as the
/// returned file lives. A folder whose lock another run holds is refused.
/// Where the file system cannot lock, the lock file is removed and `None`
/// returned, with a note: a lock file nobody holds would tell the runs
/// beside this one that the folder's run has ended, while a folder without
/// one is kept by them.
fn lock_folder(dir: &Path, command: &str) -> Result<Option<File>, Failure> {
    let lock = dir.join(LOCK);
    let file = match OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(&lock)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!(
                "pdsim {command}: note: cannot make the lock file {}: {e}; were this run stopped, the runs beside it would keep {} rather than remove it",
                lock.display(),
                dir.display()
            );
            return Ok(None);
        }
    };
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(TryLockError::WouldBlock) => Err(failure(
            2,
            format!(
                "{} is locked by another pdsim run, which is still writing it (perhaps in another container or on another machine); wait for it to end, or choose another --out",
                dir.display()
            ),
        )),
        Err(TryLockError::Error(e)) => {
            drop(file);
            std::fs::remove_file(&lock).map_err(|r| {
                failure(
                    2,
                    format!(
                        "cannot lock {} ({e}) nor remove it ({r}); remove it yourself",
                        lock.display()
                    ),
                )
            })?;
            eprintln!(
                "pdsim {command}: note: cannot lock {} on this file system ({e}); were this run stopped, the runs beside it would keep {} rather than remove it",
                lock.display(),
                dir.display()
            );
            Ok(None)
        }
    }
}

/// Removes what pdsim wrote in `dir`, a folder carrying its marker: the
/// regular files the marker lists (never through a symbolic link), the
/// folders they leave empty, the marker and the lock file, then `dir`
/// itself when nothing else is left. Returns what it kept, as
/// [`walk_written`] names it: anything the marker does not list (a user's
/// note, a link, an empty folder), a listed file changed since pdsim wrote
/// it, and a listed file it could not remove.
fn remove_written(dir: &Path, listed: &Listed) -> Vec<String> {
    let mut kept = Vec::new();
    // The marker and the lock go last (the walk skips them), so a removal
    // cut short leaves the folder still marked as pdsim's.
    walk_written(dir, listed, &mut |found| {
        match found {
            Found::Written(path) => {
                if std::fs::remove_file(dir.join(&path)).is_err() {
                    kept.push(path);
                }
            }
            // Empty now unless something kept is inside.
            Found::Walked(path) => {
                let _ = std::fs::remove_dir(dir.join(&path));
            }
            Found::Other(name) => kept.push(name),
        }
        ControlFlow::Continue(())
    });
    // The marker and the lock file go in every case: what is left is not
    // pdsim's, and a folder without the marker is never looked at again.
    for name in [MARKER, LOCK] {
        let path = dir.join(name);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file()) {
            let _ = std::fs::remove_file(&path);
        }
    }
    if kept.is_empty()
        && let Err(e) = std::fs::remove_dir(dir)
    {
        kept.push(format!(". ({e})"));
    }
    kept
}

/// Makes way for this process's temporary name `path`, which a stopped
/// run with the same process id left (or a run with that id in another
/// container or on another machine is using): what pdsim wrote there is
/// removed once the lock shows that run has ended; anything else refuses.
fn reclaim(path: &Path, why_needed: &str) -> Result<(), Failure> {
    let refuse = |why: &str| {
        failure(
            2,
            format!(
                "{} exists and {why}; pdsim needs that name {why_needed}, so remove it yourself once no pdsim run is writing it",
                path.display()
            ),
        )
    };
    let Some(listed) = result_files(path) else {
        return Err(refuse("is not pdsim's"));
    };
    match folder_owner(path) {
        Owner::Working => Err(refuse(
            "is being written by another pdsim run with this process id (in another container or on another machine)",
        )),
        Owner::Unknown(why) => Err(refuse(&format!("may still be in use: {why}"))),
        Owner::Gone(_lock) => {
            let kept = remove_written(path, &listed);
            if kept.is_empty() {
                Ok(())
            } else {
                Err(refuse(&format!(
                    "holds what pdsim did not write ({})",
                    kept.join(", ")
                )))
            }
        }
    }
}

/// A temporary folder of pdsim's name without its marker: a run stopped
/// (killed, so it could not clean up) after making the folder and before
/// writing the marker, which it does at once. Such a folder is removed only
/// while it holds nothing at all, or nothing but an empty lock file no run
/// holds: then it holds nothing of anyone's, and `remove_dir` (which
/// removes only an empty folder) cannot take anything written into it
/// meanwhile. An empty folder, with no lock to tell by, is removed only
/// when its process is known to have ended. Anything else is kept, as a
/// folder pdsim cannot tell its own.
fn clean_unmarked(path: &Path, pid: u32, command: &str) {
    let Ok(entries) = std::fs::read_dir(path) else {
        return;
    };
    let names: Vec<std::ffi::OsString> = entries.flatten().map(|e| e.file_name()).collect();
    let lock = path.join(LOCK);
    let removed = match names.as_slice() {
        [] => running(pid) == Some(false) && std::fs::remove_dir(path).is_ok(),
        [only] if only.as_os_str() == LOCK => {
            let empty_file =
                std::fs::symlink_metadata(&lock).is_ok_and(|m| m.is_file() && m.len() == 0);
            if !empty_file {
                return;
            }
            match folder_owner(path) {
                Owner::Gone(held) => {
                    let gone = std::fs::remove_file(&lock).is_ok();
                    drop(held);
                    gone && std::fs::remove_dir(path).is_ok()
                }
                Owner::Working | Owner::Unknown(_) => false,
            }
        }
        _ => false,
    };
    if removed {
        eprintln!(
            "pdsim {command}: removed {}, an empty temporary folder left by a pdsim run (process {pid}) that was stopped before it wrote anything",
            path.display()
        );
    }
}

/// Removes what stopped pdsim runs left in `parent`, each only once its
/// lock shows that the run has ended: a staging folder `.NAME.partial-PID`
/// carrying the marker, or a partial Perfetto trace. An earlier result
/// that a stopped replacement left renamed aside (`.NAME.old-PID`) is put
/// back when nothing took its place, removed when a pdsim result did, and
/// else kept. Only what a marker lists is removed: a folder that also holds
/// anything else is kept, with that, and said so. A staging folder without
/// the marker is removed only while it holds nothing ([`clean_unmarked`]);
/// anything else without it is left alone, and so is anything whose run
/// cannot be told finished (a note says why, unless its process is running here).
pub fn clean_stale(parent: &Path, command: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    // Put results back before removing partial folders, so an interrupted
    // replacement ends with its earlier result in place.
    names.sort_by_key(|n| !n.contains(".old-"));
    for name in names {
        let Some((base, kind, pid)) = temporary_name(&name) else {
            continue;
        };
        // This process's own temporary names are never stale.
        if pid == std::process::id() {
            continue;
        }
        let path = parent.join(&name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let kept = |why: &str| {
            // A run may look beside its results and beside its trace, one
            // folder twice: each kept entry is noted once.
            static NOTED: std::sync::Mutex<BTreeSet<PathBuf>> =
                std::sync::Mutex::new(BTreeSet::new());
            let first = NOTED
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(path.canonicalize().unwrap_or_else(|_| path.clone()));
            if first && running(pid) != Some(true) {
                let what = if kind == ".old-" {
                    format!(
                        "an earlier result that a pdsim run (process {pid}) moved aside to replace it, and that run may still be going"
                    )
                } else {
                    format!("left by a pdsim run (process {pid}) that may still be writing it")
                };
                eprintln!(
                    "pdsim {command}: note: kept {}, {what}: {why}; once no pdsim run writes there, remove it yourself{}",
                    path.display(),
                    if kind == ".old-" {
                        format!(" (or rename it back to {base} if that is missing)")
                    } else {
                        String::new()
                    }
                );
            }
        };
        if meta.is_dir() {
            let Some(listed) = result_files(&path) else {
                if kind == ".partial-" {
                    clean_unmarked(&path, pid, command);
                }
                continue;
            };
            let _lock = match folder_owner(&path) {
                Owner::Gone(lock) => lock,
                Owner::Working => continue,
                Owner::Unknown(why) => {
                    kept(&why);
                    continue;
                }
            };
            if kind == ".old-" {
                clean_aside(parent, &path, base, pid, &listed, command);
                continue;
            }
            let left = remove_written(&path, &listed);
            if left.is_empty() {
                eprintln!(
                    "pdsim {command}: removed {}, left unfinished by a pdsim run (process {pid}) that was stopped",
                    path.display()
                );
            } else {
                eprintln!(
                    "pdsim {command}: note: removed the files a stopped pdsim run (process {pid}) had written in {}, but kept the folder: it also holds what pdsim did not write ({})",
                    path.display(),
                    left.join(", ")
                );
            }
        } else if meta.is_file() && kind == ".partial-" {
            let head = head_of(&path);
            // A trace of this pdsim's locks its file while it is written;
            // an older pdsim's, or a file emptier than the head that this
            // pdsim writes just after taking the lock, cannot be told
            // finished; anything else is not a trace of pdsim's at all.
            if !head.starts_with(PERFETTO_HEAD.as_bytes()) {
                if head.is_empty() || head.starts_with(OLD_PERFETTO_HEAD.as_bytes()) {
                    match try_owner(&path) {
                        Owner::Working => {}
                        _ => kept(
                            "it is an unfinished Perfetto trace written by a pdsim that does not lock it (an older one), or empty",
                        ),
                    }
                }
                continue;
            }
            match try_owner(&path) {
                Owner::Working => {}
                Owner::Unknown(why) => kept(&why),
                Owner::Gone(_lock) => match std::fs::remove_file(&path) {
                    Ok(()) => eprintln!(
                        "pdsim {command}: removed {}, a Perfetto trace left unfinished by a pdsim run (process {pid}) that was stopped",
                        path.display()
                    ),
                    Err(e) => eprintln!(
                        "pdsim {command}: note: cannot remove {}, left by a stopped pdsim run: {e}",
                        path.display()
                    ),
                },
            }
        }
    }
}

/// Clears `.NAME.old-PID` (`path`), an earlier result that a stopped run
/// (process `pid`, whose lock this process now holds) had moved aside to
/// replace it with a new one at `NAME`.
fn clean_aside(parent: &Path, path: &Path, base: &str, pid: u32, listed: &Listed, command: &str) {
    let home = parent.join(base);
    match std::fs::symlink_metadata(&home) {
        // Stopped between its two renames: the earlier result goes back.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if std::fs::rename(path, &home).is_ok() {
                // The lock file the stopped run added to move it aside.
                let _ = std::fs::remove_file(home.join(LOCK));
                eprintln!(
                    "pdsim {command}: put back {}, the earlier result that a stopped pdsim run (process {pid}) had moved aside to replace",
                    home.display()
                );
            }
        }
        Err(_) => {}
        // The new result is in place: the earlier one is done with.
        Ok(_) if result_files(&home).is_some() => {
            let left = remove_written(path, listed);
            if left.is_empty() {
                eprintln!(
                    "pdsim {command}: removed {}, the earlier result of {} that a stopped pdsim run (process {pid}) had moved aside when it replaced it",
                    path.display(),
                    home.display()
                );
            } else {
                eprintln!(
                    "pdsim {command}: note: removed the files of the earlier result that a stopped pdsim run (process {pid}) had moved aside to {}, but kept the folder: it also holds what pdsim did not write ({})",
                    path.display(),
                    left.join(", ")
                );
            }
        }
        // Something that is not a pdsim result took the name: the earlier
        // result is the only one left, and its place is taken.
        Ok(_) => eprintln!(
            "pdsim {command}: note: kept {}, an earlier pdsim result that a stopped pdsim run (process {pid}) had moved aside to replace it; {} is now something pdsim did not write, so rename the earlier result back or remove it yourself",
            path.display(),
            home.display()
        ),
    }
}

/// The first bytes of a file, as many as a trace's head has (fewer when
/// the file is shorter or cannot be read).
fn head_of(path: &Path) -> Vec<u8> {
    let limit = PERFETTO_HEAD.len().max(OLD_PERFETTO_HEAD.len()) as u64;
    let mut head = Vec::new();
    if let Ok(file) = crate::disk::open_regular(path) {
        let _ = file.take(limit).read_to_end(&mut head);
    }
    head
}

/// The folder `out` sits in (`.` for a bare name).
fn parent_of(out: &Path) -> PathBuf {
    match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn base_name(out: &Path) -> String {
    out.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "results".into())
}

/// Refuses an `--out` that is one of the command's inputs or holds one:
/// moving the results in would replace what the command read (`plan merge
/// s0 s1 --out s0` would replace the shard s0 with the merged plan).
/// Inputs that do not exist (built-in documents) hold nothing to lose.
pub fn check_out_apart(out: &Path, inputs: &[PathBuf]) -> Result<(), Failure> {
    let Ok(out_abs) = resolve(out) else {
        return Ok(());
    };
    for input in inputs {
        let Ok(abs) = input.canonicalize() else {
            continue;
        };
        if abs.starts_with(&out_abs) {
            let what = if abs == out_abs { "is" } else { "holds" };
            return Err(failure(
                2,
                format!(
                    "--out {}: {what} {}, which this command reads; the results would replace it, so choose another folder",
                    out.display(),
                    input.display()
                ),
            ));
        }
    }
    Ok(())
}

/// Refuses an `--out` that pdsim may not write ([`check_out`]), or that is
/// or holds one of `inputs` (the files and folders the command's flags name)
/// or anything the command has read from the disk so far
/// ([`crate::disk::read_so_far`]: a deployment's EndpointPickerConfig and
/// manifests, a catalog's entries, a scenario's trace) ([`check_out_apart`]).
/// A command calls it before it reads anything, and [`Staged`] again before
/// it makes its folder and before it moves the results into place, when
/// everything the command read is known.
pub fn check_out_for(out: &Path, inputs: &[PathBuf]) -> Result<Existing, Failure> {
    let existing = check_out(out)?;
    // Nothing is inside a folder that does not exist yet.
    if existing == Existing::Result {
        let mut all = inputs.to_vec();
        all.extend(crate::disk::read_so_far());
        check_out_apart(out, &all)?;
    }
    Ok(existing)
}

/// A results folder being written under a hidden temporary name beside its
/// final one (`.NAME.partial-PID`), moved into place by [`Staged::commit`].
pub struct Staged {
    pub dir: PathBuf,
    out: PathBuf,
    command: &'static str,
    /// The files and folders the command's flags name, which the results
    /// may not replace ([`check_out_for`]).
    inputs: Vec<PathBuf>,
    /// Every file handed out so far, each also appended to the marker as it
    /// is handed out, so that a stopped run's folder lists what it wrote.
    written: std::sync::Mutex<BTreeSet<String>>,
    /// The lock on the folder's lock file, held while this value lives
    /// (`None` where the file system cannot lock).
    _lock: Option<File>,
}

impl Staged {
    /// Checks `out` (apart from `inputs`, the files and folders the
    /// command's flags name, and from what it has read), clears what
    /// stopped runs left beside it, and makes the staging folder with its
    /// lock file and marker.
    pub fn new(out: &Path, command: &'static str, inputs: &[PathBuf]) -> Result<Staged, Failure> {
        check_out_for(out, inputs)?;
        // `x/`, `x/.` and `x` name one folder; the renames need the last.
        let out: PathBuf = out.components().collect();
        let out = out.as_path();
        let parent = parent_of(out);
        std::fs::create_dir_all(&parent)
            .map_err(|e| failure(2, format!("cannot create {}: {e}", parent.display())))?;
        clean_stale(&parent, command);
        let dir = out.with_file_name(format!(
            ".{}.partial-{}",
            base_name(out),
            std::process::id()
        ));
        if std::fs::symlink_metadata(&dir).is_ok() {
            reclaim(&dir, "for its temporary folder")?;
        }
        interrupt::remove_on_interrupt(&dir);
        if let Err(e) = std::fs::create_dir(&dir) {
            interrupt::keep(&dir);
            return Err(failure(2, format!("cannot create {}: {e}", dir.display())));
        }
        // The lock is taken before the marker is written: a folder carrying
        // the marker and a lock file that can be locked is one whose run
        // has ended.
        let lock = match lock_folder(&dir, command) {
            Ok(lock) => lock,
            Err(f) => {
                let _ = std::fs::remove_dir_all(&dir);
                interrupt::keep(&dir);
                return Err(f);
            }
        };
        let staged = Staged {
            dir,
            out: out.to_path_buf(),
            command,
            inputs: inputs.to_vec(),
            written: std::sync::Mutex::new(BTreeSet::new()),
            _lock: lock,
        };
        if let Err(f) = staged.write_marker(false) {
            staged.discard();
            return Err(f);
        }
        Ok(staged)
    }

    /// Writes the marker listing every file handed out so far; with
    /// `digests`, once every file is complete, with the length and SHA-256
    /// of each, by which a file edited afterwards is told from pdsim's.
    fn write_marker(&self, digests: bool) -> Result<(), Failure> {
        let files = self.written.lock().map(|w| w.clone()).unwrap_or_default();
        let mut listed = Listed::new();
        for name in files {
            let digest = if digests {
                let file = self.dir.join(&name);
                Some(Digest::of(&file).ok_or_else(|| {
                    failure(
                        2,
                        format!("cannot read {} back to record its digest", file.display()),
                    )
                })?)
            } else {
                None
            };
            listed.insert(name, digest);
        }
        let path = self.dir.join(MARKER);
        std::fs::write(&path, marker_text(self.command, &listed))
            .map_err(|e| failure(2, format!("cannot write {}: {e}", path.display())))
    }

    /// The failure of a run whose staging folder was removed under it.
    fn lost(&self) -> Failure {
        failure(
            2,
            format!(
                "{}, the folder the results were being written in, was removed while pdsim ran (by another program); no results were written",
                self.dir.display()
            ),
        )
    }

    /// The path of a file in the folder, its parents made, listed in the
    /// marker before the file exists.
    pub fn path(&self, name: &str) -> Result<PathBuf, Failure> {
        // Names may come from inputs (an imported EndpointPickerConfig's);
        // whatever checked them, nothing is written outside the folder.
        if !inside(name) {
            return Err(failure(
                2,
                format!(
                    "{:?} is not a path inside the results folder; pdsim writes nothing outside it",
                    pdsim_spec::problem::quote(name)
                ),
            ));
        }
        // The marker lists one file a line, its digest after tabs: a name
        // with a line break or a tab in it could not be listed as itself.
        if name.chars().any(char::is_control) {
            return Err(failure(
                2,
                format!(
                    "{:?} has a control character (a tab or a line break) in it, which the {MARKER} marker cannot list; pdsim writes no file of that name",
                    pdsim_spec::problem::quote(name)
                ),
            ));
        }
        // Making the parents of a file would make a new, empty staging
        // folder in place of one that was removed.
        if !std::fs::symlink_metadata(&self.dir).is_ok_and(|m| m.is_dir()) {
            return Err(self.lost());
        }
        let path = self.dir.join(name);
        {
            let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            if written.insert(name.to_string()) {
                let marker = self.dir.join(MARKER);
                OpenOptions::new()
                    .append(true)
                    .open(&marker)
                    .and_then(|mut f| f.write_all(format!("{name}\n").as_bytes()))
                    .map_err(|e| failure(2, format!("cannot write {}: {e}", marker.display())))?;
            }
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| failure(2, format!("cannot create {}: {e}", parent.display())))?;
        }
        Ok(path)
    }

    /// Fails unless the folder is still there with every file pdsim wrote
    /// in it: another program removing any of them would otherwise leave a
    /// result that looks complete and is not.
    fn verify(&self) -> Result<(), Failure> {
        if !std::fs::symlink_metadata(&self.dir).is_ok_and(|m| m.is_dir()) {
            return Err(self.lost());
        }
        let written = self.written.lock().map(|w| w.clone()).unwrap_or_default();
        let missing: Vec<&String> = written
            .iter()
            .filter(|name| {
                !std::fs::symlink_metadata(self.dir.join(name)).is_ok_and(|m| m.is_file())
            })
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        let shown: Vec<&str> = missing.iter().take(5).map(|n| n.as_str()).collect();
        Err(failure(
            2,
            format!(
                "{}: files pdsim wrote there were removed while it ran (by another program): {}{}; no results were written",
                self.dir.display(),
                shown.join(", "),
                if missing.len() > shown.len() {
                    ", …"
                } else {
                    ""
                }
            ),
        ))
    }

    /// Moves the folder into place: when an earlier result is there, it is
    /// locked and renamed aside first, and deleted last.
    pub fn commit(&self) -> Result<PathBuf, Failure> {
        self.verify()?;
        self.write_marker(true)?;
        // Checked again: the command may have read more since the folder
        // was made, and the earlier result may have changed.
        let existing = check_out_for(&self.out, &self.inputs)?;
        let out = &self.out;
        let moved = |e: std::io::Error| {
            failure(
                2,
                format!("cannot move the results into {}: {e}", out.display()),
            )
        };
        // The interrupt handler waits while the folders are swapped, so an
        // interrupt never catches the swap half done.
        interrupt::holding(|| {
            match existing {
                Existing::Absent => std::fs::rename(&self.dir, out).map_err(moved)?,
                Existing::Result => {
                    let aside = out.with_file_name(format!(
                        ".{}.old-{}",
                        base_name(out),
                        std::process::id()
                    ));
                    if std::fs::symlink_metadata(&aside).is_ok() {
                        reclaim(&aside, "to move the earlier result aside")?;
                    }
                    // The earlier result is locked before it is moved
                    // aside, so a run beside this one leaves it be until
                    // this one has deleted it; another run replacing it
                    // right now holds that lock, and this one stops.
                    let _earlier = lock_folder(out, self.command)?;
                    eprintln!(
                        "pdsim {}: replacing the earlier pdsim result at {}",
                        self.command,
                        out.display()
                    );
                    let unlock_earlier = || {
                        let _ = std::fs::remove_file(out.join(LOCK));
                    };
                    if let Err(e) = std::fs::rename(out, &aside) {
                        unlock_earlier();
                        return Err(failure(
                            2,
                            format!(
                                "cannot move the earlier result {} aside: {e}",
                                out.display()
                            ),
                        ));
                    }
                    if let Err(e) = std::fs::rename(&self.dir, out) {
                        if std::fs::rename(&aside, out).is_ok() {
                            unlock_earlier();
                        }
                        return Err(moved(e));
                    }
                    // Only what the earlier result's marker lists, as
                    // pdsim wrote it, is deleted: a file a user put there
                    // or edited since the check above (milliseconds, but
                    // a user's all the same) is kept, in the aside folder.
                    let kept = match result_files(&aside) {
                        Some(listed) => remove_written(&aside, &listed),
                        None => vec![format!("{MARKER} (gone)")],
                    };
                    if !kept.is_empty() {
                        eprintln!(
                            "pdsim {}: note: kept the earlier result's folder, moved aside to {}: it holds what pdsim did not write or cannot remove ({}); remove it yourself once you have what you need from it",
                            self.command,
                            aside.display(),
                            kept.join(", ")
                        );
                    }
                }
            }
            // The lock file came along with the folder; the lock itself is
            // let go when this value is dropped.
            let _ = std::fs::remove_file(out.join(LOCK));
            Ok(())
        })?;
        interrupt::keep(&self.dir);
        Ok(out.clone())
    }

    /// Removes the folder (a run that failed or was not committed).
    pub fn discard(&self) {
        if std::fs::symlink_metadata(&self.dir).is_ok() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
        interrupt::keep(&self.dir);
    }
}

/// What a file named on the command line (`--perfetto FILE`) must stay
/// apart from: the command's results folder, and the files it reads.
pub struct Apart<'a> {
    pub out: &'a Path,
    pub inputs: &'a [PathBuf],
}

/// Whether an existing regular file may be replaced by a trace: it is one
/// pdsim wrote (it begins as pdsim's traces do), or it is empty (as
/// `mktemp` makes a file to write into; an empty file holds nothing to
/// lose). Only the first bytes are read.
fn replaceable_trace(path: &Path) -> bool {
    let empty = std::fs::symlink_metadata(path).is_ok_and(|m| m.len() == 0);
    let head = head_of(path);
    empty
        || head.starts_with(PERFETTO_HEAD.as_bytes())
        || head.starts_with(OLD_PERFETTO_HEAD.as_bytes())
}

/// Whether `a` and `b` are one file: the same canonical path, or the same
/// file reached through another hard link.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(x), Ok(y)) = (a.canonicalize(), b.canonicalize())
        && x == y
    {
        return true;
    }
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Where a file given on the command line (`--perfetto FILE`) is written.
pub struct OutFile {
    /// The file the writer writes: a hidden partial beside the target, or
    /// the target itself when it is a FIFO or a character device.
    pub writing: PathBuf,
    target: PathBuf,
    direct: bool,
    /// A regular file was there when the run started.
    replaces: bool,
    command: String,
    /// The lock on the partial file, held while this value lives, by which
    /// a run beside this one tells that the partial is still being written.
    _lock: Option<File>,
}

impl OutFile {
    /// Refuses a `target` for `flag` that pdsim may not write: the results
    /// folder or a path inside it, one of the command's inputs, a file in
    /// an earlier pdsim result, an existing file that is not a trace pdsim
    /// wrote, a folder, a symbolic link other than one to a FIFO or a
    /// character device, a socket or a block device. Refusals are exit 2
    /// and name the file and why.
    pub fn check(flag: &str, target: &Path, apart: &Apart) -> Result<(), Failure> {
        let shown = target.display();
        let refuse = |why: &str| failure(2, format!("{flag} {shown}: {why}"));
        if target.file_name().is_none() {
            return Err(refuse("names no file"));
        }
        if let (Ok(t), Ok(o)) = (resolve(target), resolve(apart.out))
            && t.starts_with(&o)
        {
            return Err(refuse(&format!(
                "is the results folder (--out {}) or lies inside it, where pdsim writes only its own results; write the trace outside that folder",
                apart.out.display()
            )));
        }
        let meta = match std::fs::symlink_metadata(target) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(refuse(&e.to_string())),
            Ok(meta) => meta,
        };
        if let Some(input) = apart.inputs.iter().find(|i| same_file(target, i)) {
            return Err(refuse(&format!(
                "is {}, which this run reads; pdsim never writes over its own input",
                input.display()
            )));
        }
        use std::os::unix::fs::FileTypeExt;
        let t = meta.file_type();
        if t.is_fifo() || t.is_char_device() {
            return Ok(());
        }
        if t.is_symlink() {
            // A link to a FIFO or device (such as /dev/stdout) is written
            // through; any other link is refused, since a rename would
            // replace the link itself.
            if let Ok(m) = std::fs::metadata(target)
                && (m.file_type().is_fifo() || m.file_type().is_char_device())
            {
                return Ok(());
            }
            return Err(refuse(
                "is a symbolic link; pdsim does not replace a link or write through it to a file",
            ));
        }
        if t.is_dir() {
            return Err(refuse("is a folder, not a file"));
        }
        if !t.is_file() {
            return Err(refuse(
                "is neither a regular file, a FIFO nor a character device",
            ));
        }
        // A file in an earlier result is part of that result, which pdsim
        // replaces only whole, through --out.
        if let Ok(abs) = resolve(target) {
            let mut folder = abs.parent();
            while let Some(dir) = folder {
                if result_files(dir).is_some() {
                    return Err(refuse(&format!(
                        "lies inside the pdsim result {}, which pdsim changes only by replacing it whole (--out); write the trace elsewhere",
                        dir.display()
                    )));
                }
                folder = dir.parent();
            }
        }
        if !replaceable_trace(target) {
            return Err(refuse(
                "already exists and is not a Perfetto trace pdsim wrote; pdsim never replaces a file it did not write, so choose a new file name (or remove it yourself)",
            ));
        }
        Ok(())
    }

    /// Checks `target` ([`OutFile::check`]) and opens it for writing. A
    /// trace pdsim wrote is replaced (atomically, by a rename, when the run
    /// ends); a FIFO or a character device is written where it is.
    pub fn open(
        flag: &str,
        target: &Path,
        command: &str,
        apart: &Apart,
    ) -> Result<(OutFile, File), Failure> {
        Self::check(flag, target, apart)?;
        let shown = target.display();
        let refuse = |why: &str| failure(2, format!("{flag} {shown}: {why}"));
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| refuse("names no file"))?;
        let replaces = match std::fs::metadata(target) {
            // A FIFO or a device is opened and written where it is, never
            // renamed over: that would replace it with a regular file.
            Ok(m) if !m.is_file() => {
                let file = OpenOptions::new()
                    .write(true)
                    .open(target)
                    .map_err(|e| refuse(&format!("cannot open it for writing: {e}")))?;
                return Ok((
                    OutFile {
                        writing: target.to_path_buf(),
                        target: target.to_path_buf(),
                        direct: true,
                        replaces: false,
                        command: command.to_string(),
                        _lock: None,
                    },
                    file,
                ));
            }
            Ok(_) => true,
            Err(_) => false,
        };
        let parent = parent_of(target);
        clean_stale(&parent, command);
        let partial = target.with_file_name(format!(".{name}.partial-{}", std::process::id()));
        interrupt::remove_on_interrupt(&partial);
        let file = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&partial)
        {
            Ok(f) => f,
            Err(e) => {
                interrupt::keep(&partial);
                return Err(failure(
                    2,
                    format!("{flag} {shown}: cannot create {}: {e}", partial.display()),
                ));
            }
        };
        // The trace is locked before its first byte: one that begins as
        // pdsim's traces do and is not locked is one whose run has ended.
        // Where the file system cannot lock, its runs beside this one keep
        // the partial if this run is stopped (they cannot tell it ended).
        let lock = file.try_clone().ok().filter(|f| f.try_lock().is_ok());
        if lock.is_none() {
            eprintln!(
                "pdsim {command}: note: cannot lock {}; were this run stopped, the runs beside it would keep it rather than remove it",
                partial.display()
            );
        }
        Ok((
            OutFile {
                writing: partial,
                target: target.to_path_buf(),
                direct: false,
                replaces,
                command: command.to_string(),
                _lock: lock,
            },
            file,
        ))
    }

    /// Moves the finished file into place (nothing to do when written
    /// directly).
    pub fn commit(&self, flag: &str) -> Result<(), Failure> {
        if self.direct {
            return Ok(());
        }
        // The target may have become something else meanwhile: only a
        // trace pdsim wrote, an empty file or nothing is replaced.
        if let Ok(meta) = std::fs::symlink_metadata(&self.target)
            && !(meta.is_file() && replaceable_trace(&self.target))
        {
            self.discard();
            return Err(failure(
                2,
                format!(
                    "{flag} {}: it became something other than a Perfetto trace pdsim wrote while pdsim ran; not replaced, and the new trace was discarded",
                    self.target.display()
                ),
            ));
        }
        if self.replaces || std::fs::symlink_metadata(&self.target).is_ok() {
            eprintln!(
                "pdsim {}: {flag}: replacing the file {}, a Perfetto trace pdsim wrote",
                self.command,
                self.target.display()
            );
        }
        let result = interrupt::holding(|| std::fs::rename(&self.writing, &self.target));
        interrupt::keep(&self.writing);
        result.map_err(|e| {
            let _ = std::fs::remove_file(&self.writing);
            failure(
                2,
                format!("cannot move the trace to {}: {e}", self.target.display()),
            )
        })
    }

    /// Removes the partial file (a failed run).
    pub fn discard(&self) {
        if !self.direct {
            let _ = std::fs::remove_file(&self.writing);
            interrupt::keep(&self.writing);
        }
    }
}

/// Whether `name` is a relative path that stays in the folder it is joined
/// to: only plain components, no root, `.` or `..` (`Path::join` with an
/// absolute path replaces the folder; `..` climbs out of it).
fn inside(name: &str) -> bool {
    !name.is_empty()
        && Path::new(name)
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
}

#[cfg(test)]
mod tests {
    use super::{
        Apart, Existing, LOCK, Listed, MARKER, OutFile, Staged, check_out, check_out_apart,
        clean_stale, foreign_entries, inside, lock_folder, marker_line, remove_written, resolve,
        result_files, temporary_name,
    };
    use std::path::{Path, PathBuf};

    /// A marker's list of `files` with no digests, as older markers and
    /// unfinished folders list them.
    fn names(files: &[&str]) -> Listed {
        files.iter().map(|f| (f.to_string(), None)).collect()
    }

    /// A process id no process has (Linux's ids stop at 2^22), so only a
    /// lock, never `/proc`, can tell whether its run is going.
    const GONE: u32 = 4_000_000_000;

    /// A scratch folder of one test, removed when the test ends.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir =
                std::env::temp_dir().join(format!("pdsim-output-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            Scratch(dir.canonicalize().unwrap())
        }

        fn write(&self, rel: &str, text: &str) -> PathBuf {
            let path = self.0.join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, text).unwrap();
            path
        }

        /// A folder as a pdsim run leaves it: the marker listing `files`,
        /// each file, and a lock file unless `locked` is `None`.
        fn pdsim_folder(&self, rel: &str, files: &[&str], lock: bool) -> PathBuf {
            let mut marker = "pdsim result: written by pdsim\n".to_string();
            for f in files {
                marker.push_str(f);
                marker.push('\n');
                self.write(&format!("{rel}/{f}"), "pdsim's\n");
            }
            self.write(&format!("{rel}/{MARKER}"), &marker);
            if lock {
                self.write(&format!("{rel}/{LOCK}"), "");
            }
            self.0.join(rel)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn lock_held(path: &Path) -> std::fs::File {
        let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
        file.lock().unwrap();
        file
    }

    #[test]
    fn a_folder_whose_lock_is_held_is_kept_whatever_its_process_id_says() {
        // A run in another container or on another machine is not in this
        // /proc; its lock is what shows it is still writing.
        let dir = Scratch::new("held");
        let live = dir.pdsim_folder(&format!(".r.partial-{GONE}"), &["a.csv"], true);
        let held = lock_held(&live.join(LOCK));
        clean_stale(&dir.0, "test");
        assert!(live.join("a.csv").is_file(), "a live run's folder is kept");
        // Once its run has ended (the lock is let go) it is removed.
        drop(held);
        clean_stale(&dir.0, "test");
        assert!(!live.exists());
    }

    #[test]
    fn a_staging_folder_stopped_before_its_marker_goes_only_while_it_holds_nothing() {
        // Killed after the folder (and its lock) and before the marker.
        let dir = Scratch::new("unmarked");
        let locked = dir.0.join(format!(".r.partial-{GONE}"));
        std::fs::create_dir(&locked).unwrap();
        std::fs::write(locked.join(LOCK), "").unwrap();
        let bare = dir.0.join(format!(".s.partial-{GONE}"));
        std::fs::create_dir(&bare).unwrap();
        // The same names holding anything else are not pdsim's to remove.
        let notes = dir.0.join(format!(".t.partial-{GONE}"));
        std::fs::create_dir(&notes).unwrap();
        std::fs::write(notes.join(LOCK), "").unwrap();
        std::fs::write(notes.join("notes.txt"), "mine\n").unwrap();
        let full_lock = dir.0.join(format!(".u.partial-{GONE}"));
        std::fs::create_dir(&full_lock).unwrap();
        std::fs::write(full_lock.join(LOCK), "not empty").unwrap();
        // A lock another run holds: that run is still making its folder.
        let held = dir.0.join(format!(".v.partial-{GONE}"));
        std::fs::create_dir(&held).unwrap();
        let holder = lock_folder(&held, "test").unwrap().unwrap();
        clean_stale(&dir.0, "test");
        assert!(!locked.exists() && !bare.exists());
        assert_eq!(
            std::fs::read_to_string(notes.join("notes.txt")).unwrap(),
            "mine\n"
        );
        assert!(notes.join(LOCK).is_file() && full_lock.join(LOCK).is_file());
        assert!(held.join(LOCK).is_file());
        drop(holder);
    }

    #[test]
    fn a_folder_without_a_lock_file_is_kept() {
        // An older pdsim's folder cannot be told finished, wherever it ran.
        let dir = Scratch::new("unlocked");
        let old = dir.pdsim_folder(&format!(".r.partial-{GONE}"), &["a.csv"], false);
        let aside = dir.pdsim_folder(&format!(".e.old-{GONE}"), &["a.csv"], false);
        clean_stale(&dir.0, "test");
        assert!(old.join("a.csv").is_file() && old.join(MARKER).is_file());
        assert!(aside.join("a.csv").is_file() && !dir.0.join("e").exists());
    }

    #[test]
    fn only_what_the_marker_lists_is_removed_from_a_stale_folder() {
        let dir = Scratch::new("listed");
        dir.write("outside.txt", "mine\n");
        let stale = dir.pdsim_folder(
            &format!(".r.partial-{GONE}"),
            &["summary.json", "plots/a.svg", "runs/x/seed0/requests.csv"],
            true,
        );
        // A marker may list what pdsim never wrote there: it names nothing
        // outside the folder.
        let marker = stale.join(MARKER);
        let text = std::fs::read_to_string(&marker).unwrap();
        std::fs::write(&marker, text + "../outside.txt\nnotes.txt/\n").unwrap();
        dir.write(&format!(".r.partial-{GONE}/notes.txt"), "my notes\n");
        dir.write(&format!(".r.partial-{GONE}/runs/mine.txt"), "mine too\n");
        std::fs::create_dir(stale.join("empty")).unwrap();
        std::os::unix::fs::symlink(dir.0.join("outside.txt"), stale.join("link")).unwrap();
        clean_stale(&dir.0, "test");
        assert_eq!(
            std::fs::read_to_string(dir.0.join("outside.txt")).unwrap(),
            "mine\n"
        );
        let mut left: Vec<String> = walk(&stale);
        left.sort();
        assert_eq!(
            left,
            ["empty/", "link", "notes.txt", "runs/", "runs/mine.txt"],
            "the user's entries stay, pdsim's files, marker and lock go"
        );
        // Without the marker the folder is the user's: never looked at again.
        assert!(result_files(&stale).is_none());
    }

    /// Every entry under `dir`, relative, folders with a trailing `/`.
    fn walk(dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.file_type().unwrap().is_dir() {
                out.push(format!("{name}/"));
                out.extend(walk(&e.path()).into_iter().map(|n| format!("{name}/{n}")));
            } else {
                out.push(name);
            }
        }
        out
    }

    #[test]
    fn an_earlier_result_moved_aside_goes_back_or_goes_only_when_a_result_took_its_place() {
        let dir = Scratch::new("aside");
        // Nothing took its place: it goes back, without the lock file.
        dir.pdsim_folder(&format!(".back.old-{GONE}"), &["summary.json"], true);
        // A pdsim result took its place: it is removed.
        let done = dir.pdsim_folder(&format!(".done.old-{GONE}"), &["summary.json"], true);
        dir.pdsim_folder("done", &["summary.json"], false);
        // A user's folder took its place: it is the only copy left, kept.
        let theirs = dir.pdsim_folder(&format!(".theirs.old-{GONE}"), &["summary.json"], true);
        dir.write("theirs/thesis.tex", "mine\n");
        clean_stale(&dir.0, "test");
        assert!(dir.0.join("back/summary.json").is_file());
        assert!(!dir.0.join("back").join(LOCK).exists());
        assert!(!done.exists() && dir.0.join("done/summary.json").is_file());
        assert!(theirs.join("summary.json").is_file());
        assert!(dir.0.join("theirs/thesis.tex").is_file());
    }

    #[test]
    fn a_stale_trace_goes_only_when_it_is_this_pdsims_and_unlocked() {
        let dir = Scratch::new("traces");
        let head = pdsim_report::perfetto::HEAD;
        let old_head = pdsim_report::perfetto::OLD_HEAD;
        let gone = dir.write(&format!(".gone.json.partial-{GONE}"), head);
        let live = dir.write(&format!(".live.json.partial-{GONE}"), head);
        let old = dir.write(&format!(".old.json.partial-{GONE}"), old_head);
        let empty = dir.write(&format!(".empty.json.partial-{GONE}"), "");
        let users = dir.write(&format!(".users.json.partial-{GONE}"), "{\"mine\": 1}\n");
        let held = lock_held(&live);
        clean_stale(&dir.0, "test");
        assert!(!gone.exists(), "an unlocked trace of this pdsim's goes");
        for kept in [&live, &old, &empty, &users] {
            assert!(kept.exists(), "{} is kept", kept.display());
        }
        drop(held);
    }

    /// A folder pdsim wrote, with everything a user or another program
    /// may have added to it: what is not pdsim's, in the order both walks
    /// find it, is what they must agree on.
    fn crowded(dir: &Scratch) -> (PathBuf, Listed) {
        let files = [
            "a.csv",
            "plots/a.svg",
            "plots/b.svg",
            "runs/x/seed0/requests.csv",
            "runs/x/seed0/summary.json",
            "z.json",
        ];
        let result = dir.pdsim_folder("r", &files, true);
        // Not listed: files, a folder with nothing pdsim wrote (named
        // whole), an empty folder, a link, and a listed name that is now a
        // link or a folder.
        dir.write("r/notes.txt", "mine\n");
        dir.write("r/runs/mine.txt", "mine too\n");
        dir.write("r/runs/x/seed0/extra.csv", "mine\n");
        dir.write("r/theirs/deep/file.txt", "mine\n");
        std::fs::create_dir(result.join("empty")).unwrap();
        std::os::unix::fs::symlink(result.join("a.csv"), result.join("link")).unwrap();
        std::fs::remove_file(result.join("plots/b.svg")).unwrap();
        std::os::unix::fs::symlink(result.join("a.csv"), result.join("plots/b.svg")).unwrap();
        std::fs::remove_file(result.join("z.json")).unwrap();
        dir.write("r/z.json/inside.txt", "mine\n");
        (result, names(&files))
    }

    #[test]
    fn the_walks_name_what_pdsim_did_not_write_in_one_order() {
        let dir = Scratch::new("walks");
        let (result, listed) = crowded(&dir);
        let not_pdsims = [
            "empty/",
            "link",
            "notes.txt",
            "plots/b.svg",
            "runs/mine.txt",
            "runs/x/seed0/extra.csv",
            "theirs/",
            "z.json/",
        ];
        // A refusal names the first five.
        assert_eq!(foreign_entries(&result, &listed), not_pdsims[..5]);
        // A removal keeps them all, and removes the rest: the listed
        // regular files, the folders they leave empty, the marker and the
        // lock file, never the folder that still holds something.
        assert_eq!(remove_written(&result, &listed), not_pdsims);
        let mut left = walk(&result);
        left.sort();
        assert_eq!(
            left,
            [
                "empty/",
                "link",
                "notes.txt",
                "plots/",
                "plots/b.svg",
                "runs/",
                "runs/mine.txt",
                "runs/x/",
                "runs/x/seed0/",
                "runs/x/seed0/extra.csv",
                "theirs/",
                "theirs/deep/",
                "theirs/deep/file.txt",
                "z.json/",
                "z.json/inside.txt",
            ]
        );
        // With nothing but its own files, the folder goes whole.
        let clean = dir.pdsim_folder("clean", &["a.csv", "plots/a.svg"], true);
        let listed = names(&["a.csv", "plots/a.svg"]);
        assert!(foreign_entries(&clean, &listed).is_empty());
        assert!(remove_written(&clean, &listed).is_empty());
        assert!(!clean.exists());
    }

    #[test]
    fn the_lock_file_is_pdsims_own_in_a_result_but_a_folder_of_its_name_is_not() {
        let dir = Scratch::new("foreign");
        let result = dir.pdsim_folder("r", &["a.csv"], true);
        let listed = names(&["a.csv"]);
        assert!(foreign_entries(&result, &listed).is_empty());
        std::fs::remove_file(result.join(LOCK)).unwrap();
        dir.write(&format!("r/{LOCK}/mine.txt"), "mine\n");
        assert_eq!(foreign_entries(&result, &listed), [format!("{LOCK}/")]);
    }

    #[test]
    fn the_marker_lists_each_file_before_it_is_written_and_a_commit_checks_them() {
        let dir = Scratch::new("commit");
        let out = dir.0.join("r");
        let staged = Staged::new(&out, "run", &[]).unwrap();
        assert!(staged.dir.join(LOCK).is_file());
        let path = staged.path("plots/a.svg").unwrap();
        let listed = result_files(&staged.dir).unwrap();
        assert!(listed.contains_key("plots/a.svg") && !path.exists());
        std::fs::write(&path, "svg").unwrap();
        std::fs::write(staged.path("summary.json").unwrap(), "{}").unwrap();
        // Another program removes a file: the commit fails, naming it.
        std::fs::remove_file(&path).unwrap();
        let failed = staged.commit().expect_err("the commit fails");
        assert_eq!(failed.code, 2);
        assert!(failed.message.contains("plots/a.svg"), "{}", failed.message);
        assert!(!out.exists());
        // It removes the whole folder: no file is made in a new one, and
        // the commit fails.
        std::fs::remove_dir_all(&staged.dir).unwrap();
        let failed = staged.path("report.md").expect_err("no new folder");
        assert!(failed.message.contains("was removed"), "{}", failed.message);
        assert!(!staged.dir.exists());
        let failed = staged.commit().expect_err("the commit fails");
        assert!(failed.message.contains("was removed"), "{}", failed.message);
        assert!(!out.exists());
        // A complete folder moves into place without its lock file, and
        // replaces an earlier result.
        for _ in 0..2 {
            let staged = Staged::new(&out, "run", &[]).unwrap();
            std::fs::write(staged.path("summary.json").unwrap(), "{}").unwrap();
            assert_eq!(staged.commit().unwrap(), out);
            assert!(out.join("summary.json").is_file() && !out.join(LOCK).exists());
        }
        assert_eq!(walk(&dir.0).len(), 3, "{:?}", walk(&dir.0));
    }

    #[test]
    fn a_listed_file_edited_since_pdsim_wrote_it_is_the_users() {
        let dir = Scratch::new("edited");
        let out = dir.0.join("r");
        let staged = Staged::new(&out, "run", &[]).unwrap();
        std::fs::write(staged.path("summary.json").unwrap(), "{\"a\": 1}\n").unwrap();
        std::fs::write(staged.path("plots/a.svg").unwrap(), "<svg/>").unwrap();
        staged.commit().unwrap();
        // The committed marker records each file's length and SHA-256.
        let marker = std::fs::read_to_string(out.join(MARKER)).unwrap();
        // (`printf '{"a": 1}\n' | sha256sum`)
        assert!(
            marker.lines().any(|l| l
                == "summary.json\t9\te8c628edc9968ef0c668f54e0ba2636b35503357eb1aca0ddc828aeace432f67"),
            "{marker}"
        );
        let listed = result_files(&out).unwrap();
        assert!(listed.values().all(Option::is_some), "{listed:?}");
        assert_eq!(check_out(&out).unwrap(), Existing::Result);
        // The same length, other bytes; then another length: either way
        // the file is the user's, the refusal names it, and a removal
        // keeps it (and the folder).
        for edit in ["{\"a\": 2}\n", "{\"a\": 1, \"mine\": true}\n"] {
            std::fs::write(out.join("summary.json"), edit).unwrap();
            let failed = check_out(&out).unwrap_err();
            assert!(
                failed.code == 2
                    && failed
                        .message
                        .contains("summary.json (changed since pdsim wrote it)"),
                "{}",
                failed.message
            );
            assert_eq!(
                foreign_entries(&out, &listed),
                ["summary.json (changed since pdsim wrote it)"]
            );
        }
        // Put back as pdsim wrote it, it is pdsim's again.
        std::fs::write(out.join("summary.json"), "{\"a\": 1}\n").unwrap();
        assert_eq!(check_out(&out).unwrap(), Existing::Result);
        std::fs::write(out.join("summary.json"), "mine\n").unwrap();
        assert_eq!(
            remove_written(&out, &listed),
            ["summary.json (changed since pdsim wrote it)"]
        );
        assert_eq!(
            std::fs::read_to_string(out.join("summary.json")).unwrap(),
            "mine\n"
        );
        assert!(!out.join("plots").exists() && !out.join(MARKER).exists());
    }

    #[test]
    fn a_marker_without_digests_is_read_as_before() {
        // An older pdsim's result, or a folder still being written, lists
        // names alone: a listed file is pdsim's whatever it holds.
        let dir = Scratch::new("undigested");
        let out = dir.pdsim_folder("r", &["summary.json"], false);
        std::fs::write(out.join("summary.json"), "edited\n").unwrap();
        assert_eq!(check_out(&out).unwrap(), Existing::Result);
        let sha = "a".repeat(64);
        assert_eq!(
            marker_line(&format!("a b.csv\t12\t{sha}")),
            (
                "a b.csv".to_string(),
                Some(super::Digest {
                    bytes: 12,
                    sha256: sha.clone()
                })
            )
        );
        // Any other shape is a name alone.
        for line in [
            "summary.json".to_string(),
            format!("x\tten\t{sha}"),
            format!("x\t12\t{}", "A".repeat(64)),
            format!("\t12\t{sha}"),
            "x\t12".to_string(),
        ] {
            assert_eq!(marker_line(&line), (line.clone(), None), "{line:?}");
        }
    }

    #[test]
    fn a_name_the_marker_could_not_list_is_not_written() {
        let dir = Scratch::new("control");
        let staged = Staged::new(&dir.0.join("r"), "run", &[]).unwrap();
        for name in ["a\tb.yaml", "a\nb.yaml", "manifests/x\r.yaml"] {
            let failed = staged.path(name).unwrap_err();
            assert!(
                failed.message.contains("control character"),
                "{}",
                failed.message
            );
        }
        staged.discard();
    }

    #[test]
    fn an_earlier_result_whose_lock_is_held_is_not_replaced() {
        // Another run is replacing it right now.
        let dir = Scratch::new("busy");
        let out = dir.pdsim_folder("r", &["summary.json"], true);
        let held = lock_held(&out.join(LOCK));
        let staged = Staged::new(&out, "run", &[]).unwrap();
        std::fs::write(staged.path("summary.json").unwrap(), "new").unwrap();
        let failed = staged.commit().expect_err("refused");
        assert!(failed.message.contains("locked"), "{}", failed.message);
        assert_eq!(
            std::fs::read_to_string(out.join("summary.json")).unwrap(),
            "pdsim's\n"
        );
        drop(held);
        staged.discard();
    }

    #[test]
    fn a_replaced_result_leaves_nothing_behind() {
        // The earlier result's files go, its aside folder with them; the
        // new result stands in its place.
        let dir = Scratch::new("replaced");
        let out = dir.pdsim_folder("r", &["summary.json", "plots/a.svg"], true);
        let staged = Staged::new(&out, "run", &[]).unwrap();
        std::fs::write(staged.path("summary.json").unwrap(), "new").unwrap();
        staged.commit().unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("summary.json")).unwrap(),
            "new"
        );
        assert!(!out.join("plots").exists());
        let mut names: Vec<String> = std::fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["r"], "no aside or partial folder is left");
    }

    #[test]
    fn only_names_inside_the_folder_are_written() {
        for name in ["plan.json", "plots/a.svg", "deploy/manifests/x.yaml"] {
            assert!(inside(name), "{name}");
        }
        for name in ["", "/etc/x", "../x", "a/../../x", "./x", "a/.."] {
            assert!(!inside(name), "{name}");
        }
    }

    #[test]
    fn an_out_that_is_or_holds_an_input_is_refused() {
        let dir = Scratch::new("apart");
        let shard = dir.pdsim_folder("s0", &["plan.json"], false);
        let plan = shard.join("plan.json");
        let failed = check_out_apart(&shard, std::slice::from_ref(&shard)).unwrap_err();
        assert!(failed.message.contains("is "), "{}", failed.message);
        let failed = check_out_apart(&shard, std::slice::from_ref(&plan)).unwrap_err();
        assert!(failed.message.contains("holds"), "{}", failed.message);
        assert!(check_out_apart(&dir.0.join("merged"), &[shard, plan]).is_ok());
        assert!(check_out_apart(&dir.0.join("m"), &["builtin:x".into()]).is_ok());
    }

    #[test]
    fn a_trace_replaces_only_a_trace_pdsim_wrote_and_never_an_input_or_a_result() {
        let dir = Scratch::new("perfetto");
        let out = dir.0.join("out");
        let input = dir.write("trace.jsonl", "{}\n");
        let inputs = [input.clone()];
        let apart = Apart {
            out: &out,
            inputs: &inputs,
        };
        let check = |path: &Path| OutFile::check("--perfetto", path, &apart);
        assert!(check(&dir.0.join("new.json")).is_ok());
        let ours = dir.write("ours.json", pdsim_report::perfetto::HEAD);
        let older = dir.write("older.json", pdsim_report::perfetto::OLD_HEAD);
        let empty = dir.write("empty.json", "");
        for path in [&ours, &older, &empty] {
            assert!(check(path).is_ok(), "{}", path.display());
        }
        let users = dir.write("users.json", "{\"traceEvents\": []}\n");
        let failed = check(&users).unwrap_err();
        assert!(
            failed.code == 2
                && failed.message.contains("--perfetto")
                && failed.message.contains("users.json"),
            "{}",
            failed.message
        );
        // An input, even one that looks like a trace of pdsim's, and
        // through another hard link.
        std::fs::write(&input, pdsim_report::perfetto::HEAD).unwrap();
        std::fs::hard_link(&input, dir.0.join("link.json")).unwrap();
        for path in [input.clone(), dir.0.join("link.json")] {
            let failed = check(&path).unwrap_err();
            assert!(failed.message.contains("reads"), "{}", failed.message);
        }
        // The results folder, anything inside it, and a file in a result.
        for path in [out.clone(), out.join("t.json")] {
            let failed = check(&path).unwrap_err();
            assert!(failed.message.contains("--out"), "{}", failed.message);
        }
        let result = dir.pdsim_folder("earlier", &["runs/perfetto.json"], false);
        std::fs::write(
            result.join("runs/perfetto.json"),
            pdsim_report::perfetto::HEAD,
        )
        .unwrap();
        let failed = check(&result.join("runs/perfetto.json")).unwrap_err();
        assert!(
            failed.message.contains("inside the pdsim result"),
            "{}",
            failed.message
        );
    }

    #[test]
    fn temporary_names_give_their_process() {
        assert_eq!(
            temporary_name(".a.b.partial-123"),
            Some(("a.b", ".partial-", 123))
        );
        assert_eq!(temporary_name(".x.old-9"), Some(("x", ".old-", 9)));
        assert_eq!(temporary_name("x.partial-9"), None);
        assert_eq!(temporary_name(".x.partial-"), None);
        assert_eq!(temporary_name(".x.partial-9a"), None);
        assert_eq!(temporary_name("..partial-9"), None);
    }

    #[test]
    fn resolving_handles_dots_and_missing_folders() {
        let cwd = std::env::current_dir().unwrap().canonicalize().unwrap();
        assert_eq!(resolve(Path::new(".")).unwrap(), cwd);
        assert_eq!(resolve(Path::new("..")).unwrap(), cwd.parent().unwrap());
        assert_eq!(
            resolve(Path::new("no-such-dir/../x")).unwrap(),
            cwd.join("x")
        );
        assert_eq!(resolve(Path::new("/")).unwrap(), Path::new("/"));
    }
}
