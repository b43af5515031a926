//! The disk-backed implementation of `pdsim_spec::files::Files`. The CLI is
//! the only crate that touches the file system.

use pdsim_spec::files::{FileKind, Files, ReadError};
use std::path::Path;

pub struct DiskFiles;

impl Files for DiskFiles {
    fn kind(&self, path: &Path) -> FileKind {
        match std::fs::metadata(path) {
            Ok(meta) if meta.is_dir() => FileKind::Directory,
            Ok(_) => FileKind::File,
            Err(_) => FileKind::Missing,
        }
    }

    fn read(&self, path: &Path) -> Result<String, ReadError> {
        match self.kind(path) {
            FileKind::Missing => return Err(ReadError::Missing),
            FileKind::Directory => return Err(ReadError::IsDirectory),
            FileKind::File => {}
        }
        let bytes = std::fs::read(path).map_err(|e| ReadError::Other(e.to_string()))?;
        String::from_utf8(bytes).map_err(|_| ReadError::NotUtf8)
    }

    fn list(&self, path: &Path) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(path) else {
            return Vec::new();
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}
