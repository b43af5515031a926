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
//! when the target is absent or a regular file; a FIFO or a character
//! device is written directly, and anything else is refused.

use crate::interrupt;
use crate::session::{Failure, failure};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// The name of the marker file in every results folder pdsim writes.
pub const MARKER: &str = ".pdsim-result";

/// How the marker's first line starts: what makes a folder a pdsim result.
const MARKER_HEAD: &str = "pdsim result:";

/// The most of a marker pdsim reads: a marker lists every file of its
/// folder, and a folder of 10,000 seeds × several deployments lists a few
/// MiB at most.
const MARKER_LIMIT_BYTES: u64 = 64 << 20;

/// How a Perfetto trace of an older pdsim begins (this one's begins with
/// `pdsim_report::perfetto::HEAD`): a stale partial file is removed only
/// when it begins as either does, or is empty (a run killed before its
/// first buffered write reached the file; an empty file holds nothing to
/// lose).
const OLD_PERFETTO_HEAD: &[u8] = b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";

/// The marker's text: what wrote the folder, and every file in it.
fn marker_text(command: &str, files: &BTreeSet<String>) -> String {
    let mut text = format!(
        "{MARKER_HEAD} written by pdsim {} (`pdsim {command}`). pdsim replaces this folder when asked to write here again, but only while it holds nothing except the files listed below.\n",
        env!("CARGO_PKG_VERSION")
    );
    for file in files {
        text.push_str(file);
        text.push('\n');
    }
    text
}

/// The files a pdsim result's marker lists, or `None` when `dir` is not a
/// real folder (a symbolic link is not) holding a valid marker.
pub fn result_files(dir: &Path) -> Option<BTreeSet<String>> {
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
    Some(
        lines
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect(),
    )
}

/// Entries of `dir` (relative paths) that its marker does not list: a
/// user's notes added to a result, a symbolic link, an empty folder.
fn foreign_entries(dir: &Path, listed: &BTreeSet<String>) -> Vec<String> {
    fn walk(root: &Path, rel: &str, listed: &BTreeSet<String>, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(root.join(rel)) else {
            out.push(if rel.is_empty() {
                ".".into()
            } else {
                rel.into()
            });
            return;
        };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            if out.len() >= 5 {
                return;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if path == MARKER {
                continue;
            }
            match entry.file_type() {
                Ok(t) if t.is_dir() => {
                    let prefix = format!("{path}/");
                    // The first listed name from the prefix on tells
                    // whether any listed file lies inside.
                    if listed
                        .range(prefix.clone()..)
                        .next()
                        .is_some_and(|f| f.starts_with(&prefix))
                    {
                        walk(root, &path, listed, out);
                    } else {
                        out.push(prefix);
                    }
                }
                Ok(t) if t.is_file() && listed.contains(&path) => {}
                _ => out.push(path),
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, "", listed, &mut out);
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

/// Whether process `pid` is running; `None` when this system cannot say
/// (no `/proc`), and then nothing is removed.
fn running(pid: u32) -> Option<bool> {
    if !Path::new("/proc/self").exists() {
        return None;
    }
    Some(pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists())
}

/// Removes what killed pdsim runs left in `parent`: a staging folder
/// `.NAME.partial-PID` carrying the marker, or a partial Perfetto trace,
/// whose process is no longer running. An earlier result that a crash left
/// renamed aside (`.NAME.old-PID`) is put back when nothing took its
/// place, else removed. Anything without the marker is left alone.
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
        if running(pid) != Some(false) {
            continue;
        }
        let path = parent.join(&name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() && result_files(&path).is_some() {
            let home = parent.join(base);
            if kind == ".old-" && std::fs::symlink_metadata(&home).is_err() {
                if std::fs::rename(&path, &home).is_ok() {
                    eprintln!(
                        "pdsim {command}: put back {}, the earlier result that a stopped pdsim run (process {pid}) had moved aside to replace",
                        home.display()
                    );
                }
                continue;
            }
            match std::fs::remove_dir_all(&path) {
                Ok(()) => eprintln!(
                    "pdsim {command}: removed {}, left unfinished by a pdsim run (process {pid}) that was stopped",
                    path.display()
                ),
                Err(e) => eprintln!(
                    "pdsim {command}: note: cannot remove {}, left by a stopped pdsim run: {e}",
                    path.display()
                ),
            }
        } else if meta.is_file()
            && kind == ".partial-"
            && (meta.len() == 0
                || starts_with(&path, pdsim_report::perfetto::HEAD.as_bytes())
                || starts_with(&path, OLD_PERFETTO_HEAD))
        {
            match std::fs::remove_file(&path) {
                Ok(()) => eprintln!(
                    "pdsim {command}: removed {}, a Perfetto trace left unfinished by a pdsim run (process {pid}) that was stopped",
                    path.display()
                ),
                Err(e) => eprintln!(
                    "pdsim {command}: note: cannot remove {}, left by a stopped pdsim run: {e}",
                    path.display()
                ),
            }
        }
    }
}

fn starts_with(path: &Path, head: &[u8]) -> bool {
    let mut buf = vec![0u8; head.len()];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut buf))
        .is_ok()
        && buf == head
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

/// A results folder being written under a hidden temporary name beside its
/// final one (`.NAME.partial-PID`), moved into place by [`Staged::commit`].
pub struct Staged {
    pub dir: PathBuf,
    out: PathBuf,
    command: &'static str,
    written: std::sync::Mutex<BTreeSet<String>>,
}

impl Staged {
    /// Checks `out`, clears what killed runs left beside it, and makes the
    /// staging folder with its marker.
    pub fn new(out: &Path, command: &'static str) -> Result<Staged, Failure> {
        check_out(out)?;
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
        // A folder of this name is a killed run's whose process id this
        // one reuses: removed when it is pdsim's, else refused.
        if std::fs::symlink_metadata(&dir).is_ok() {
            if result_files(&dir).is_some() {
                std::fs::remove_dir_all(&dir)
                    .map_err(|e| failure(2, format!("cannot remove {}: {e}", dir.display())))?;
            } else {
                return Err(failure(
                    2,
                    format!(
                        "{} exists and is not pdsim's; pdsim needs that name for its temporary folder",
                        dir.display()
                    ),
                ));
            }
        }
        interrupt::remove_on_interrupt(&dir);
        if let Err(e) = std::fs::create_dir(&dir) {
            interrupt::keep(&dir);
            return Err(failure(2, format!("cannot create {}: {e}", dir.display())));
        }
        let staged = Staged {
            dir,
            out: out.to_path_buf(),
            command,
            written: std::sync::Mutex::new(BTreeSet::new()),
        };
        staged.write_marker()?;
        Ok(staged)
    }

    fn write_marker(&self) -> Result<(), Failure> {
        let files = self.written.lock().map(|w| w.clone()).unwrap_or_default();
        let path = self.dir.join(MARKER);
        std::fs::write(&path, marker_text(self.command, &files))
            .map_err(|e| failure(2, format!("cannot write {}: {e}", path.display())))
    }

    /// The path of a file in the folder, its parents made, recorded for
    /// the marker.
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
        let path = self.dir.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| failure(2, format!("cannot create {}: {e}", parent.display())))?;
        }
        if let Ok(mut w) = self.written.lock() {
            w.insert(name.to_string());
        }
        Ok(path)
    }

    /// Moves the folder into place: when an earlier result is there, it is
    /// renamed aside first and deleted last.
    pub fn commit(&self) -> Result<PathBuf, Failure> {
        self.write_marker()?;
        let existing = check_out(&self.out)?;
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
                    eprintln!(
                        "pdsim {}: replacing the earlier pdsim result at {}",
                        self.command,
                        out.display()
                    );
                    let aside = out.with_file_name(format!(
                        ".{}.old-{}",
                        base_name(out),
                        std::process::id()
                    ));
                    if std::fs::symlink_metadata(&aside).is_ok() {
                        if result_files(&aside).is_some() {
                            let _ = std::fs::remove_dir_all(&aside);
                        } else {
                            return Err(failure(
                                2,
                                format!(
                                    "{} exists and is not pdsim's; pdsim needs that name to move the earlier result aside",
                                    aside.display()
                                ),
                            ));
                        }
                    }
                    std::fs::rename(out, &aside).map_err(|e| {
                        failure(
                            2,
                            format!(
                                "cannot move the earlier result {} aside: {e}",
                                out.display()
                            ),
                        )
                    })?;
                    if let Err(e) = std::fs::rename(&self.dir, out) {
                        let _ = std::fs::rename(&aside, out);
                        return Err(moved(e));
                    }
                    if let Err(e) = std::fs::remove_dir_all(&aside) {
                        eprintln!(
                            "pdsim {}: note: cannot remove the earlier result, moved aside to {}: {e}",
                            self.command,
                            aside.display()
                        );
                    }
                }
            }
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
}

impl OutFile {
    /// Decides how to write `target` for `flag` and opens it. A regular
    /// file the user named is replaced (atomically, by a rename); a folder,
    /// a symbolic link, a socket or a block device is refused.
    pub fn open(
        flag: &str,
        target: &Path,
        command: &str,
    ) -> Result<(OutFile, std::fs::File), Failure> {
        let shown = target.display();
        let refuse = |why: &str| failure(2, format!("{flag} {shown}: {why}"));
        // A FIFO or a device is opened and written where it is, never
        // renamed over.
        let in_place = || -> Result<(OutFile, std::fs::File), Failure> {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(target)
                .map_err(|e| refuse(&format!("cannot open it for writing: {e}")))?;
            Ok((
                OutFile {
                    writing: target.to_path_buf(),
                    target: target.to_path_buf(),
                    direct: true,
                    replaces: false,
                    command: command.to_string(),
                },
                file,
            ))
        };
        let mut replaces = false;
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| refuse("names no file"))?;
        match std::fs::symlink_metadata(target) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(refuse(&e.to_string())),
            Ok(meta) => {
                use std::os::unix::fs::FileTypeExt;
                let t = meta.file_type();
                if t.is_fifo() || t.is_char_device() {
                    // Written in place: renaming a file over a FIFO or a
                    // device would replace it with a regular file.
                    return in_place();
                }
                if t.is_symlink() {
                    // A link to a FIFO or device (such as /dev/stdout) is
                    // written through; any other link is refused, since a
                    // rename would replace the link itself.
                    let followed = std::fs::metadata(target).ok();
                    if let Some(m) = followed
                        && (m.file_type().is_fifo() || m.file_type().is_char_device())
                    {
                        return in_place();
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
                replaces = true;
            }
        }
        let parent = parent_of(target);
        clean_stale(&parent, command);
        let partial = target.with_file_name(format!(".{name}.partial-{}", std::process::id()));
        interrupt::remove_on_interrupt(&partial);
        let file = match std::fs::OpenOptions::new()
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
        Ok((
            OutFile {
                writing: partial,
                target: target.to_path_buf(),
                direct: false,
                replaces,
                command: command.to_string(),
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
        // regular file or nothing is replaced.
        if let Ok(meta) = std::fs::symlink_metadata(&self.target)
            && !meta.is_file()
        {
            self.discard();
            return Err(failure(
                2,
                format!(
                    "{flag} {}: it became something other than a regular file while pdsim ran; not replaced",
                    self.target.display()
                ),
            ));
        }
        if self.replaces || std::fs::symlink_metadata(&self.target).is_ok() {
            eprintln!(
                "pdsim {}: {flag}: replacing the file {}",
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
    use super::{inside, resolve, temporary_name};
    use std::path::Path;

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
