//! The disk-backed implementation of `pdsim_spec::files::Files`. The CLI is
//! the only crate that touches the file system.
//!
//! Every read here is bounded: a path that names something other than a
//! regular file (a FIFO, whose opening blocks until a writer comes; a device
//! such as `/dev/zero`, which never ends; a socket) is refused from its
//! metadata before it is opened, and a regular file is read through a limit
//! one byte past the most that is accepted, so a huge file costs no more
//! memory than the limit.

use pdsim_spec::files::{FileKind, Files, MAX_DOCUMENT_BYTES, ReadError, decode};
use std::collections::BTreeSet;
use std::fs::{File, FileType};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Every file this process has opened as an input and every folder it has
/// listed (a catalog's), as they were named. A command's results folder may
/// not be or hold any of them, since moving the results in would replace
/// what the command read (`crate::output::check_out_for`). They are noted
/// here, at the one door through which inputs are read, so that what a
/// command reads beyond its flags (the EndpointPickerConfig and manifests
/// a deployment names, a user catalog's entries, a scenario's own trace) is
/// kept apart from its results without every command having to know it.
static READ: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

fn note_read(path: &Path) {
    READ.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(path.to_path_buf());
}

/// What this process has read so far ([`READ`]), in path order.
pub fn read_so_far() -> Vec<PathBuf> {
    READ.lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .cloned()
        .collect()
}

/// The largest `plan.json` a merge reads, in bytes. A plan holds a summary
/// per candidate, a few kilobytes each; 64 MiB is thousands of times the
/// plans `--max-runs` allows, and keeps a mistaken path from being read whole.
pub const MAX_PLAN_BYTES: u64 = 64 * 1024 * 1024;

pub struct DiskFiles;

impl Files for DiskFiles {
    fn kind(&self, path: &Path) -> FileKind {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => FileKind::Directory,
            Ok(meta) if meta.is_file() => FileKind::File,
            Ok(meta) => FileKind::Special(type_name(&meta.file_type())),
            Err(_) => FileKind::Missing,
        }
    }

    fn read(&self, path: &Path) -> Result<String, ReadError> {
        decode(read_limited(path, MAX_DOCUMENT_BYTES)?)
    }

    fn list(&self, path: &Path) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(path) else {
            return Vec::new();
        };
        note_read(path);
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

/// What a file type is, in words, for a refusal.
fn type_name(file_type: &FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if file_type.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if file_type.is_char_device() {
            return "a character device";
        }
        if file_type.is_block_device() {
            return "a block device";
        }
        if file_type.is_socket() {
            return "a socket";
        }
    }
    if file_type.is_dir() {
        return "a directory";
    }
    "not a regular file"
}

/// Opens `path` for reading if it is a regular file (following symbolic
/// links). The type is checked before opening, because opening a FIFO for
/// reading blocks until something opens it for writing, and again on the
/// open file, in case the path was replaced in between.
pub fn open_regular(path: &Path) -> Result<File, ReadError> {
    let check = |file_type: FileType| {
        if file_type.is_dir() {
            Err(ReadError::IsDirectory)
        } else if !file_type.is_file() {
            Err(ReadError::NotRegular {
                kind: type_name(&file_type),
            })
        } else {
            Ok(())
        }
    };
    let meta = std::fs::metadata(path).map_err(io_error)?;
    check(meta.file_type())?;
    let file = File::open(path).map_err(io_error)?;
    check(file.metadata().map_err(io_error)?.file_type())?;
    Ok(file)
}

/// [`open_regular`] for a file the command reads as an input (a document,
/// a trace, a plan to merge), noted in [`READ`] once it is open. Files that
/// pdsim opens only to see whether it may replace them (the head of a
/// Perfetto trace) are opened with `open_regular` and are not inputs.
pub fn open_input(path: &Path) -> Result<File, ReadError> {
    let file = open_regular(path)?;
    note_read(path);
    Ok(file)
}

fn io_error(e: std::io::Error) -> ReadError {
    if e.kind() == std::io::ErrorKind::NotFound {
        ReadError::Missing
    } else {
        ReadError::Other(e.to_string())
    }
}

/// The bytes of the regular file `path`, an input, if there are at most
/// `limit_bytes` of them.
pub fn read_limited(path: &Path, limit_bytes: u64) -> Result<Vec<u8>, ReadError> {
    let file = open_input(path)?;
    // Regular files in /proc report a length of 0, so the length only sizes
    // the buffer and refuses early; the limit on the read is what bounds it.
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > limit_bytes {
        return Err(ReadError::TooLarge { limit_bytes });
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(io_error)?;
    if bytes.len() as u64 > limit_bytes {
        return Err(ReadError::TooLarge { limit_bytes });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::{DiskFiles, read_limited};
    use pdsim_spec::files::{FileKind, Files, MAX_DOCUMENT_BYTES, ReadError};
    use std::path::{Path, PathBuf};

    /// `name` in a folder of its own for this test (tests run in parallel),
    /// which [`remove`] takes away again.
    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pdsim-disk-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    fn remove(path: &Path) {
        std::fs::remove_file(path).unwrap();
        std::fs::remove_dir(path.parent().unwrap()).unwrap();
    }

    #[test]
    fn dev_zero_is_refused_without_reading_it() {
        assert_eq!(
            DiskFiles.kind(Path::new("/dev/zero")),
            FileKind::Special("a character device")
        );
        let error = DiskFiles.read(Path::new("/dev/zero")).unwrap_err();
        assert_eq!(
            error,
            ReadError::NotRegular {
                kind: "a character device"
            }
        );
        assert!(error.to_string().contains("not a regular file"), "{error}");
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let path = temp("fifo");
        let _ = std::fs::remove_file(&path);
        let made = std::process::Command::new("mkfifo").arg(&path).status();
        if !made.is_ok_and(|s| s.success()) {
            pdsim_testkit::skipped(
                "disk::tests::a_fifo_is_refused_without_blocking",
                "which reads a FIFO",
                "the `mkfifo` command is not available",
            );
            let _ = std::fs::remove_dir(path.parent().unwrap());
            return;
        }
        // No writer ever opens the FIFO: opening it to read would block.
        let error = DiskFiles.read(&path).unwrap_err();
        assert_eq!(
            error,
            ReadError::NotRegular {
                kind: "a FIFO (named pipe)"
            }
        );
        remove(&path);
    }

    #[test]
    fn a_document_over_the_limit_is_refused_naming_the_limit() {
        let path = temp("big.yaml");
        std::fs::write(&path, vec![b'#'; 9 * 1024 * 1024]).unwrap();
        let error = DiskFiles.read(&path).unwrap_err();
        assert_eq!(
            error,
            ReadError::TooLarge {
                limit_bytes: MAX_DOCUMENT_BYTES
            }
        );
        assert!(error.to_string().contains("8 MiB"), "{error}");
        // A file exactly at a limit is read; one byte more is not.
        std::fs::write(&path, b"12345").unwrap();
        assert_eq!(read_limited(&path, 5).unwrap(), b"12345");
        assert!(read_limited(&path, 4).is_err());
        // /proc files say they are empty but are not: the limit still holds.
        if Path::new("/proc/self/status").exists() {
            assert!(matches!(
                read_limited(Path::new("/proc/self/status"), 10),
                Err(ReadError::TooLarge { limit_bytes: 10 })
            ));
        }
        remove(&path);
    }

    #[test]
    fn documents_lose_a_utf8_bom_and_other_encodings_are_named() {
        let path = temp("bom.yaml");
        std::fs::write(&path, b"\xef\xbb\xbfkind: Scenario\n").unwrap();
        assert_eq!(DiskFiles.read(&path).unwrap(), "kind: Scenario\n");
        std::fs::write(&path, b"\xff\xfek\0i\0").unwrap();
        let error = DiskFiles.read(&path).unwrap_err();
        assert!(error.to_string().starts_with("is UTF-16 text"), "{error}");
        let absent = temp("absent");
        assert_eq!(DiskFiles.read(&absent), Err(ReadError::Missing));
        std::fs::remove_dir(absent.parent().unwrap()).unwrap();
        assert_eq!(
            DiskFiles.read(&std::env::temp_dir()),
            Err(ReadError::IsDirectory)
        );
        remove(&path);
    }
}
