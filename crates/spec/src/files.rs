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
    File,
    Directory,
    Missing,
}

/// Why a file could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadError {
    Missing,
    IsDirectory,
    NotUtf8,
    Other(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Missing => write!(f, "no such file"),
            ReadError::IsDirectory => write!(f, "is a directory, not a file"),
            ReadError::NotUtf8 => write!(f, "is not UTF-8 text"),
            ReadError::Other(message) => write!(f, "cannot be read: {message}"),
        }
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
            FileKind::File => Ok(self.files[&normalize(path)].clone()),
            FileKind::Directory => Err(ReadError::IsDirectory),
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
