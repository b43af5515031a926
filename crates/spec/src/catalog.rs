//! The catalog: chips, fabrics, storage classes, models, workload shapes and
//! coefficient sets, named by bare stems.
//!
//! A reference resolves in the built-in catalog first (compiled into the
//! binary, see `builtin.rs`), then in each `--catalog DIR` in the order given.
//! User folders use the BLIS catalog layout: `hardware/<chip>.yaml`,
//! `networks/<fabric>.yaml`, `devices/storage.yaml`, `models/<name>.yaml` or
//! `models/<name>/config.json`, `workloads/<shape>.yaml` and
//! `coefficients/<set>.yaml`.

use crate::builtin;
use crate::files::{FileKind, Files};
use crate::load::{Source, load};
use crate::model::{HF_KEYS, HfConfig, Model};
use crate::problem::Problems;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A chip (BLIS chip schema, PascalCase keys) plus pdsim's optional
/// `HostLinkGBps` and `ComputeCapability`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
pub struct Chip {
    pub provenance: String,
    pub t_flops_peak: f64,
    #[serde(rename = "TFlopsFP8", default, skip_serializing_if = "Option::is_none")]
    pub t_flops_fp8: Option<f64>,
    #[serde(
        rename = "TFlopsNVFP4",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub t_flops_nvfp4: Option<f64>,
    #[serde(rename = "BwPeakTBs")]
    pub bw_peak_tbs: f64,
    #[serde(rename = "MemoryGiB")]
    pub memory_gib: f64,
    #[serde(rename = "IntraNodeBwGBps")]
    pub intra_node_bw_gbps: f64,
    #[serde(rename = "SMCount")]
    pub sm_count: i64,
    #[serde(
        rename = "GPUsPerNode",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub gpus_per_node: Option<i64>,
    #[serde(
        rename = "GPUsPerRack",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub gpus_per_rack: Option<i64>,
    #[serde(
        rename = "IntraRackBwGBps",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub intra_rack_bw_gbps: Option<f64>,
    #[serde(
        rename = "HostLinkGBps",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub host_link_gbps: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
}

impl Chip {
    pub fn memory_bytes(&self) -> f64 {
        self.memory_gib * (1u64 << 30) as f64
    }
}

/// An inter-node fabric class.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
pub struct Fabric {
    pub provenance: String,
    #[serde(rename = "InterNodeBwGBps")]
    pub inter_node_bw_gbps: f64,
    #[serde(rename = "RDMA", default, skip_serializing_if = "Option::is_none")]
    pub rdma: Option<bool>,
}

/// A storage class for KV offload.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StorageClass {
    pub read_bandwidth_mb_s: f64,
    pub write_bandwidth_mb_s: f64,
    pub base_latency_us: f64,
}

/// A workload shape (BLIS nested form).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    #[serde(default)]
    pub prefix_tokens: i64,
    pub prompt: LengthDistribution,
    pub output: LengthDistribution,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LengthDistribution {
    pub tokens: f64,
    #[serde(default)]
    pub tokens_stdev: f64,
    #[serde(default)]
    pub tokens_min: i64,
    #[serde(default)]
    pub tokens_max: i64,
}

/// A coefficient set (BLIS registry schema, `research/blis-documents.md` §7).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CoefficientSet {
    pub kind: String,
    pub name: String,
    pub coefficients: Vec<BTreeMap<String, Coefficient>>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Coefficient {
    pub value: f64,
    pub units: String,
    pub method: String,
    pub fitted: bool,
    #[serde(default)]
    pub scope: BTreeMap<String, Vec<serde_yaml::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ci95: Option<Vec<f64>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<CoefficientSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copied_from: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supersedes: Option<serde_yaml::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validated: Option<serde_yaml::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unsupported: Option<serde_yaml::Value>,
}

#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CoefficientSource {
    pub kind: String,
    pub cite: String,
    pub role: String,
}

/// What kind of catalog entry a reference names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    Chip,
    Fabric,
    Storage,
    Model,
    Shape,
    CoefficientSet,
}

/// The text of a built-in catalog entry (the export reads a model entry's
/// `_source` for the checkpoint it describes).
pub fn builtin_text(kind: EntryKind, name: &str) -> Option<&'static str> {
    builtin::find(kind, name).map(|(_, text)| text)
}

impl EntryKind {
    pub fn noun(self) -> &'static str {
        match self {
            EntryKind::Chip => "chip",
            EntryKind::Fabric => "fabric",
            EntryKind::Storage => "storage class",
            EntryKind::Model => "model",
            EntryKind::Shape => "workload shape",
            EntryKind::CoefficientSet => "coefficient set",
        }
    }

    fn folder(self) -> &'static str {
        match self {
            EntryKind::Chip => "hardware",
            EntryKind::Fabric => "networks",
            EntryKind::Storage => "devices",
            EntryKind::Model => "models",
            EntryKind::Shape => "workloads",
            EntryKind::CoefficientSet => "coefficients",
        }
    }
}

/// Where a resolved entry came from, for reports.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Origin {
    pub name: String,
    /// `builtin:hardware/h200.yaml` or a user file path.
    pub file: String,
}

/// A resolved entry and where it came from.
#[derive(Clone, Debug)]
pub struct Entry<T> {
    pub value: T,
    pub origin: Origin,
}

/// Why a name did not resolve.
#[derive(Clone, Debug)]
pub enum ResolveError {
    /// No catalog has it; `known` lists what exists, sorted.
    Unknown { known: Vec<String> },
    /// The file exists but is malformed; the problems say where.
    Invalid(Problems),
}

/// The built-in catalog plus the user's folders.
pub struct Catalog<'f> {
    files: &'f dyn Files,
    user_dirs: Vec<PathBuf>,
}

/// Checks that a reference is a bare stem, not a path.
pub fn is_bare_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains('/')
        && !name.contains('\\')
        && !name.starts_with('.')
        && name.trim() == name
}

impl<'f> Catalog<'f> {
    pub fn new(files: &'f dyn Files, user_dirs: Vec<PathBuf>) -> Catalog<'f> {
        Catalog { files, user_dirs }
    }

    /// Every name of a kind: built-in first, then each user folder.
    pub fn names(&self, kind: EntryKind) -> Vec<String> {
        let mut names: Vec<String> = builtin::names(kind).iter().map(|s| s.to_string()).collect();
        for dir in &self.user_dirs {
            names.extend(self.user_names(dir, kind));
        }
        names.sort();
        names.dedup();
        names
    }

    fn user_names(&self, dir: &Path, kind: EntryKind) -> Vec<String> {
        if kind == EntryKind::Storage {
            let path = dir.join("devices").join("storage.yaml");
            let Ok(text) = self.files.read(&path) else {
                return Vec::new();
            };
            let Ok(map) = crate::load::from_str::<BTreeMap<String, serde_yaml::Value>>(&text)
            else {
                return Vec::new();
            };
            return map
                .into_keys()
                .filter(|k| !k.starts_with("_comment"))
                .collect();
        }
        let folder = dir.join(kind.folder());
        self.files
            .list(&folder)
            .into_iter()
            .filter_map(|entry| {
                if let Some(stem) = entry
                    .strip_suffix(".yaml")
                    .or_else(|| entry.strip_suffix(".yml"))
                {
                    return Some(stem.to_string());
                }
                let is_config_dir = kind == EntryKind::Model
                    && self.files.kind(&folder.join(&entry).join("config.json")) == FileKind::File;
                is_config_dir.then_some(entry)
            })
            .collect()
    }

    /// Finds the text of `name`: built-in, then user folders.
    fn find(&self, kind: EntryKind, name: &str) -> Option<(Source, bool)> {
        if kind == EntryKind::Storage {
            if let Some(text) = builtin::storage_text()
                && builtin::names(kind).contains(&name)
            {
                return Some((
                    Source::new(builtin::label("devices/storage.yaml"), text),
                    false,
                ));
            }
            for dir in &self.user_dirs {
                let path = dir.join("devices").join("storage.yaml");
                if self.user_names(dir, kind).iter().any(|n| n == name) {
                    let text = self.files.read(&path).ok()?;
                    return Some((Source::new(path.display().to_string(), text), false));
                }
            }
            return None;
        }
        if let Some((file, text)) = builtin::find(kind, name) {
            return Some((Source::new(builtin::label(file), text), false));
        }
        for dir in &self.user_dirs {
            let folder = dir.join(kind.folder());
            for ext in ["yaml", "yml"] {
                let path = folder.join(format!("{name}.{ext}"));
                if self.files.kind(&path) == FileKind::File {
                    let text = self.files.read(&path).unwrap_or_default();
                    return Some((Source::new(path.display().to_string(), text), false));
                }
            }
            if kind == EntryKind::Model {
                let path = folder.join(name).join("config.json");
                if self.files.kind(&path) == FileKind::File {
                    let text = self.files.read(&path).unwrap_or_default();
                    return Some((Source::new(path.display().to_string(), text), true));
                }
            }
        }
        None
    }

    fn unknown(&self, kind: EntryKind) -> ResolveError {
        ResolveError::Unknown {
            known: self.names(kind),
        }
    }

    /// Resolves a one-document entry: find, load (comments allowed), check.
    fn resolve_document<T: DeserializeOwned>(
        &self,
        kind: EntryKind,
        name: &str,
        check: fn(&Source, &T) -> Result<(), Problems>,
    ) -> Result<Entry<T>, ResolveError> {
        let (source, _) = self.find(kind, name).ok_or_else(|| self.unknown(kind))?;
        let value: T = load_commented(&source).map_err(ResolveError::Invalid)?;
        check(&source, &value).map_err(ResolveError::Invalid)?;
        Ok(Entry {
            value,
            origin: Origin {
                name: name.into(),
                file: source.file,
            },
        })
    }

    pub fn chip(&self, name: &str) -> Result<Entry<Chip>, ResolveError> {
        self.resolve_document(EntryKind::Chip, name, crate::validate::catalog::check_chip)
    }

    pub fn fabric(&self, name: &str) -> Result<Entry<Fabric>, ResolveError> {
        self.resolve_document(
            EntryKind::Fabric,
            name,
            crate::validate::catalog::check_fabric,
        )
    }

    pub fn storage(&self, name: &str) -> Result<Entry<StorageClass>, ResolveError> {
        let (source, _) = self
            .find(EntryKind::Storage, name)
            .ok_or_else(|| self.unknown(EntryKind::Storage))?;
        let all: BTreeMap<String, serde_yaml::Value> =
            load(&source).map_err(ResolveError::Invalid)?;
        let value = all
            .get(name)
            .cloned()
            .ok_or_else(|| self.unknown(EntryKind::Storage))?;
        let class: StorageClass =
            from_value_commented(&source, name, value).map_err(ResolveError::Invalid)?;
        crate::validate::catalog::check_storage(&source, name, &class)
            .map_err(ResolveError::Invalid)?;
        Ok(Entry {
            value: class,
            origin: Origin {
                name: name.into(),
                file: source.file,
            },
        })
    }

    pub fn model(&self, name: &str) -> Result<Entry<Model>, ResolveError> {
        let (source, is_json) = self
            .find(EntryKind::Model, name)
            .ok_or_else(|| self.unknown(EntryKind::Model))?;
        let config: HfConfig = if is_json {
            serde_json::from_str(&source.text).map_err(|e| {
                let mut problems = Problems::new();
                let mut problem = source.error(
                    "",
                    "model-config-invalid",
                    crate::problem::shorten_quotes(&e.to_string()),
                );
                problem.line = u32::try_from(e.line()).ok().filter(|l| *l > 0);
                problems.push(problem);
                ResolveError::Invalid(problems)
            })?
        } else {
            let raw: BTreeMap<String, serde_yaml::Value> =
                load(&source).map_err(ResolveError::Invalid)?;
            let mut problems = Problems::new();
            for key in raw.keys() {
                let allowed = HF_KEYS.contains(&key.as_str())
                    || key == "_source"
                    || key.starts_with("_comment");
                if !allowed {
                    problems.push(source.error(
                        key,
                        "unknown-key",
                        format!("unknown model key `{}`; pdsim reads these Hugging Face config keys: {}", crate::problem::quote(key), HF_KEYS.join(", ")),
                    ));
                }
            }
            if !problems.is_empty() {
                return Err(ResolveError::Invalid(problems));
            }
            load(&source).map_err(ResolveError::Invalid)?
        };
        let model = Model::from_config(name, &config).map_err(|(key, message)| {
            let mut problems = Problems::new();
            problems.push(source.error(&key, "model-config-invalid", format!("{key} {message}")));
            ResolveError::Invalid(problems)
        })?;
        Ok(Entry {
            value: model,
            origin: Origin {
                name: name.into(),
                file: source.file,
            },
        })
    }

    pub fn shape(&self, name: &str) -> Result<Entry<Shape>, ResolveError> {
        self.resolve_document(
            EntryKind::Shape,
            name,
            crate::validate::catalog::check_shape,
        )
    }

    pub fn coefficient_set(&self, name: &str) -> Result<Entry<CoefficientSet>, ResolveError> {
        self.resolve_document(
            EntryKind::CoefficientSet,
            name,
            crate::validate::catalog::check_coefficient_set,
        )
    }
}

/// Loads a file whose top level may carry `_comment` and `_comment_*` keys
/// (chips, fabrics, shapes): the comments are dropped, everything else is
/// strict.
pub(crate) fn load_commented<T: DeserializeOwned>(source: &Source) -> Result<T, Problems> {
    let raw: serde_yaml::Value = load(source)?;
    from_value_commented(source, "", raw)
}

fn from_value_commented<T: DeserializeOwned>(
    source: &Source,
    prefix: &str,
    value: serde_yaml::Value,
) -> Result<T, Problems> {
    let value = match value {
        serde_yaml::Value::Mapping(map) => serde_yaml::Value::Mapping(
            map.into_iter()
                .filter(|(k, _)| !k.as_str().is_some_and(|k| k.starts_with("_comment")))
                .collect(),
        ),
        other => other,
    };
    serde_path_to_error::deserialize::<_, T>(value).map_err(|error| {
        let inner_path = error.path().to_string();
        let path = match (prefix.is_empty(), inner_path == ".") {
            (true, true) => String::new(),
            (true, false) => inner_path,
            (false, true) => prefix.to_string(),
            (false, false) => format!("{prefix}.{inner_path}"),
        };
        let message = error.into_inner().to_string();
        let code = if message.contains("unknown field") {
            "unknown-key"
        } else if message.contains("missing field") {
            "missing-key"
        } else if message.contains("invalid type") {
            "wrong-type"
        } else {
            "invalid-value"
        };
        let mut problems = Problems::new();
        problems.push(source.error(&path, code, message));
        problems
    })
}
