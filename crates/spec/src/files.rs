//! The one door through which document code sees the file system.
//!
//! `spec` never calls `std::fs`: the CLI hands it an implementation of
//! [`Files`] backed by the disk, and tests hand it [`MemoryFiles`]. That keeps
//! validation a pure function of its inputs, and lets tests describe a whole
//! directory tree in a few lines.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// What is at a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file.
    File,
    Directory,
    /// Something else: a FIFO, a device, a socket, which pdsim never reads
    /// (opening a FIFO blocks until a writer comes; `/dev/zero` never ends),
    /// described in words ("a FIFO (named pipe)").
    Special(&'static str),
    Missing,
}

/// The largest document pdsim reads, in bytes: Scenarios, Deployments,
/// catalog entries, router configurations and manifests.
///
/// The largest real inputs (a Hugging Face `config.json`, a Helm values
/// file) are tens of kilobytes; 8 MiB leaves two orders of magnitude of room
/// while keeping a mistaken path (a trace, a disk image, `/dev/zero`) from
/// being read into memory whole.
pub const MAX_DOCUMENT_BYTES: u64 = 8 * 1024 * 1024;

/// Why a file could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadError {
    Missing,
    IsDirectory,
    /// Not a regular file: `kind` says what it is ("a FIFO (named pipe)",
    /// "a character device", ...). Reading one could block forever or never
    /// end, so pdsim does not try.
    NotRegular {
        kind: &'static str,
    },
    /// Longer than `limit_bytes`.
    TooLarge {
        limit_bytes: u64,
    },
    /// Not UTF-8 text: what it is instead.
    NotUtf8(Encoding),
    Other(String),
}

/// What a file that is not UTF-8 text looks like instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Starts with a UTF-16 byte-order mark (or looks like UTF-16 without one).
    Utf16 { big_endian: bool },
    /// Starts with a UTF-32 byte-order mark.
    Utf32 { big_endian: bool },
    /// The first byte that is not part of a UTF-8 character, 0-based, and
    /// its 1-based line.
    Invalid { offset: u64, line: u64 },
}

impl std::fmt::Display for Encoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let endian = |big: bool| if big { "big-endian" } else { "little-endian" };
        match self {
            Encoding::Utf16 { big_endian } => write!(
                f,
                "is UTF-16 text ({}); pdsim reads UTF-8 (convert it, e.g. with `iconv -f UTF-16 -t UTF-8`)",
                endian(*big_endian)
            ),
            Encoding::Utf32 { big_endian } => write!(
                f,
                "is UTF-32 text ({}); pdsim reads UTF-8 (convert it, e.g. with `iconv -f UTF-32 -t UTF-8`)",
                endian(*big_endian)
            ),
            Encoding::Invalid { offset, line } => write!(
                f,
                "is not UTF-8 text (first invalid byte at offset {offset}, line {line})"
            ),
        }
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Missing => write!(f, "no such file"),
            ReadError::IsDirectory => write!(f, "is a directory, not a file"),
            ReadError::NotRegular { kind } => {
                write!(
                    f,
                    "is {kind}, not a regular file; pdsim reads only regular files"
                )
            }
            ReadError::TooLarge { limit_bytes } => write!(
                f,
                "is larger than {} MiB ({limit_bytes} bytes), the most pdsim reads of one document",
                limit_bytes / (1024 * 1024)
            ),
            ReadError::NotUtf8(encoding) => write!(f, "{encoding}"),
            ReadError::Other(message) => write!(f, "cannot be read: {message}"),
        }
    }
}

impl ReadError {
    /// The stable problem code for this error.
    pub fn code(&self) -> &'static str {
        match self {
            ReadError::Missing => "file-missing",
            ReadError::IsDirectory => "file-is-directory",
            ReadError::NotRegular { .. } => "file-not-regular",
            ReadError::TooLarge { .. } => "file-too-large",
            ReadError::NotUtf8(_) => "file-not-utf8",
            ReadError::Other(_) => "file-unreadable",
        }
    }
}

/// The text of a file's bytes: UTF-8, with a leading byte-order mark
/// dropped (editors on Windows write one, and it says nothing but "UTF-8").
/// Text in another encoding is refused by what it is, so the user learns to
/// convert it rather than that "something" is wrong with it.
pub fn decode(mut bytes: Vec<u8>) -> Result<String, ReadError> {
    if let Some(encoding) = foreign_encoding(&bytes) {
        return Err(ReadError::NotUtf8(encoding));
    }
    if bytes.starts_with(UTF8_BOM) {
        bytes.drain(..UTF8_BOM.len());
    }
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        let line = 1 + bytes[..offset].iter().filter(|&&b| b == b'\n').count() as u64;
        ReadError::NotUtf8(Encoding::Invalid {
            offset: offset as u64,
            line,
        })
    })
}

/// The UTF-8 byte-order mark.
pub const UTF8_BOM: &[u8] = b"\xef\xbb\xbf";

/// The encoding `head` (the first bytes of a file) is written in when it is
/// recognisably UTF-16 or UTF-32 rather than UTF-8: a byte-order mark, or,
/// without one, ASCII characters interleaved with zero bytes (which UTF-8
/// text never starts with).
pub fn foreign_encoding(head: &[u8]) -> Option<Encoding> {
    // UTF-32 LE's mark starts with UTF-16 LE's, so it is tested first.
    if head.starts_with(b"\xff\xfe\0\0") {
        return Some(Encoding::Utf32 { big_endian: false });
    }
    if head.starts_with(b"\0\0\xfe\xff") {
        return Some(Encoding::Utf32 { big_endian: true });
    }
    if head.starts_with(b"\xff\xfe") {
        return Some(Encoding::Utf16 { big_endian: false });
    }
    if head.starts_with(b"\xfe\xff") {
        return Some(Encoding::Utf16 { big_endian: true });
    }
    match head {
        [a, 0, b, 0, ..] if a.is_ascii() && *a != 0 && b.is_ascii() && *b != 0 => {
            Some(Encoding::Utf16 { big_endian: false })
        }
        [0, a, 0, b, ..] if a.is_ascii() && *a != 0 && b.is_ascii() && *b != 0 => {
            Some(Encoding::Utf16 { big_endian: true })
        }
        _ => None,
    }
}

/// Read-only access to files and directories.
pub trait Files {
    fn kind(&self, path: &Path) -> FileKind;
    fn read(&self, path: &Path) -> Result<String, ReadError>;
    /// Names of the entries of a directory, sorted; empty when it is missing.
    fn list(&self, path: &Path) -> Vec<String>;
}

/// An in-memory tree for tests: paths are normalised, directories implied.
#[derive(Clone, Debug, Default)]
pub struct MemoryFiles {
    files: BTreeMap<PathBuf, String>,
}

impl MemoryFiles {
    pub fn new() -> MemoryFiles {
        MemoryFiles::default()
    }

    pub fn with(mut self, path: &str, text: &str) -> MemoryFiles {
        self.insert(path, text);
        self
    }

    pub fn insert(&mut self, path: &str, text: &str) {
        self.files
            .insert(normalize(Path::new(path)), text.to_string());
    }
}

/// Removes `.` and resolves `..` lexically, which is all tests need.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

impl Files for MemoryFiles {
    fn kind(&self, path: &Path) -> FileKind {
        let path = normalize(path);
        if self.files.contains_key(&path) {
            FileKind::File
        } else if self
            .files
            .keys()
            .any(|p| p.starts_with(&path) && p != &path)
        {
            FileKind::Directory
        } else {
            FileKind::Missing
        }
    }

    fn read(&self, path: &Path) -> Result<String, ReadError> {
        match self.kind(path) {
            FileKind::File => {
                let text = &self.files[&normalize(path)];
                Ok(text.strip_prefix('\u{feff}').unwrap_or(text).to_string())
            }
            FileKind::Directory => Err(ReadError::IsDirectory),
            FileKind::Special(kind) => Err(ReadError::NotRegular { kind }),
            FileKind::Missing => Err(ReadError::Missing),
        }
    }

    fn list(&self, path: &Path) -> Vec<String> {
        let path = normalize(path);
        let mut names: Vec<String> = self
            .files
            .keys()
            .filter_map(|p| p.strip_prefix(&path).ok())
            .filter_map(|rest| rest.components().next())
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        names.dedup();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::{Encoding, ReadError, decode};

    #[test]
    fn decoding_drops_a_utf8_bom_and_names_other_encodings() {
        assert_eq!(
            decode(b"\xef\xbb\xbfkind: Scenario\n".to_vec()).unwrap(),
            "kind: Scenario\n"
        );
        assert_eq!(decode(b"plain".to_vec()).unwrap(), "plain");
        let utf16 = decode(b"\xff\xfek\0i\0".to_vec()).unwrap_err();
        assert_eq!(
            utf16,
            ReadError::NotUtf8(Encoding::Utf16 { big_endian: false })
        );
        assert!(utf16.to_string().starts_with("is UTF-16 text"), "{utf16}");
        assert!(utf16.to_string().contains("pdsim reads UTF-8"), "{utf16}");
        assert_eq!(
            decode(b"\xfe\xff\0k".to_vec()).unwrap_err(),
            ReadError::NotUtf8(Encoding::Utf16 { big_endian: true })
        );
        assert_eq!(
            decode(b"k\0i\0n\0d\0".to_vec()).unwrap_err(),
            ReadError::NotUtf8(Encoding::Utf16 { big_endian: false })
        );
        assert_eq!(
            decode(b"\xff\xfe\0\0k\0\0\0".to_vec()).unwrap_err(),
            ReadError::NotUtf8(Encoding::Utf32 { big_endian: false })
        );
        assert_eq!(
            decode(b"\0\0\xfe\xff".to_vec()).unwrap_err(),
            ReadError::NotUtf8(Encoding::Utf32 { big_endian: true })
        );
        let bad = decode(b"a: 1\nb: \xe9t\xe9\n".to_vec()).unwrap_err();
        assert_eq!(
            bad,
            ReadError::NotUtf8(Encoding::Invalid { offset: 8, line: 2 })
        );
        assert_eq!(
            bad.to_string(),
            "is not UTF-8 text (first invalid byte at offset 8, line 2)"
        );
        assert_eq!(bad.code(), "file-not-utf8");
    }
}
