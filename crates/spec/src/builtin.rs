//! The built-in catalog, compiled into the binary so `pdsim` works on a fresh
//! machine with no files. Every figure's source is noted beside it in the
//! files under `crates/spec/catalog/` (see `catalog/SOURCES.md`).

use crate::catalog::EntryKind;

macro_rules! entries {
    ($folder:literal: $($name:literal),* $(,)?) => {
        &[$(($name, concat!($folder, "/", $name, ".yaml"),
             include_str!(concat!("../catalog/", $folder, "/", $name, ".yaml")))),*]
    };
}

type Table = &'static [(&'static str, &'static str, &'static str)];

const CHIPS: Table = entries!("hardware": "a100-80g", "b200", "h100", "h200", "l40s", "rebel100");
const FABRICS: Table = entries!("networks": "100gbe", "ib-400g", "roce-200g");
const MODELS: Table = entries!("models":
    "codellama-34b", "codellama-34b-instruct", "deepseek-v3", "deepseek-v4.1", "llama-2-70b",
    "llama-2-7b",
    "llama-3.1-70b", "llama-3.1-8b", "minimax-m2.7", "mixtral-8x7b", "nemotron-h-8b",
    "qwen3-14b", "qwen3-30b-a3b");
const SHAPES: Table = entries!("workloads": "chatbot", "coding-agent", "summarization");
const COEFFICIENTS: Table =
    entries!("coefficients": "cost-model-host-overheads", "pd-transfer-estimates");
const STORAGE: &str = include_str!("../catalog/devices/storage.yaml");
const STORAGE_CLASSES: &[&str] = &["cpu_dram", "nvme_gen3", "nvme_gen4", "s3", "sata_ssd"];

fn table(kind: EntryKind) -> Table {
    match kind {
        EntryKind::Chip => CHIPS,
        EntryKind::Fabric => FABRICS,
        EntryKind::Model => MODELS,
        EntryKind::Shape => SHAPES,
        EntryKind::CoefficientSet => COEFFICIENTS,
        EntryKind::Storage => &[],
    }
}

/// The built-in names of a kind, sorted.
pub fn names(kind: EntryKind) -> Vec<&'static str> {
    if kind == EntryKind::Storage {
        return STORAGE_CLASSES.to_vec();
    }
    table(kind).iter().map(|(name, _, _)| *name).collect()
}

/// The file name and text of a built-in entry.
pub fn find(kind: EntryKind, name: &str) -> Option<(&'static str, &'static str)> {
    table(kind)
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, file, text)| (*file, *text))
}

pub fn storage_text() -> Option<&'static str> {
    Some(STORAGE)
}

/// How problems name a built-in file.
pub fn label(file: &str) -> String {
    format!("builtin:{file}")
}
