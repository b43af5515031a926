//! `pdsim export`: what an llm-d user deploys for a Deployment — the
//! model-service chart's values (`ms-values.yaml`, each pool's `vllm serve`
//! arguments inside), the inferencepool chart's values for the router
//! (`gaie-values.yaml`: the EPP's flags and its EndpointPickerConfig), the
//! deployment's Kubernetes manifests, each pool's `vllm serve` command for
//! use without Helm, and a README with the install commands. `pdsim import`
//! reads such a folder back into a Deployment and its router files.
//! The mapping is `pdsim_spec::llmd`; this module reads and writes files.

use crate::session::WithDefaults;
use crate::session::{Failure, Staging, failure};
use pdsim_spec::deployment::{Deployment, Router};
use pdsim_spec::files::Files;
use pdsim_spec::llmd::{inferencepool, modelservice, vllm_serve};
use pdsim_spec::{Request, validate};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The exit code of a command's result, its failure printed.
pub fn exit(command: &str, result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            crate::session::print_failure(command, &f.message);
            ExitCode::from(f.code)
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct ExportArgs {
    /// The Scenario the deployment is laid out against (its cluster's node
    /// size and model).
    #[arg(long, value_name = "FILE")]
    scenario: PathBuf,
    /// The Deployment to export.
    #[arg(long, value_name = "FILE")]
    deployment: PathBuf,
    /// A user catalog folder (BLIS layout), searched after the built-in catalog. Repeatable.
    #[arg(long, value_name = "DIR")]
    catalog: Vec<PathBuf>,
    /// The checkpoint the model servers load, as the chart's
    /// `modelArtifacts.uri` takes it (`hf://org/name`, `pvc://claim/path`).
    /// Default: the Hugging Face repository the catalog's model entry was
    /// read from.
    #[arg(long, value_name = "URI")]
    model_uri: Option<String>,
    /// The output folder (default: results/export--<deployment>). An
    /// existing folder is replaced only when it is an earlier pdsim result.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// The Scenario the deployment will run on (its node size turns the
    /// chart's replicas into nodes).
    #[arg(long, value_name = "FILE")]
    scenario: PathBuf,
    /// A folder holding `ms-values.yaml` (llm-d's model-service chart) and
    /// `gaie-values.yaml` (the inferencepool chart), and optionally
    /// `manifests/`: what `pdsim export` writes, or the same files of an
    /// llm-d guide.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// A user catalog folder (BLIS layout), searched after the built-in catalog. Repeatable.
    #[arg(long, value_name = "DIR")]
    catalog: Vec<PathBuf>,
    /// The output folder (default: results/import--<deployment>). An
    /// existing folder is replaced only when it is an earlier pdsim result.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// The scenario and deployment, validated; every problem is an error here,
/// as an export of an invalid deployment would deploy something else.
fn validated(
    files: &dyn Files,
    catalog: &[PathBuf],
    scenario: &Path,
    deployment: Option<&Path>,
) -> Result<pdsim_spec::Report, Failure> {
    let report = validate(&Request {
        files,
        catalog_dirs: catalog.to_vec(),
        scenario: Some(scenario.to_path_buf()),
        documents: deployment.map(Path::to_path_buf).into_iter().collect(),
    });
    let errors: Vec<String> = report
        .problems
        .iter()
        .filter(|p| p.severity == pdsim_spec::Severity::Error)
        .map(|p| p.to_string())
        .collect();
    if report.io_error {
        return Err(failure(2, errors.join("\n")));
    }
    if !errors.is_empty() || report.scenario.is_none() {
        return Err(failure(1, errors.join("\n")));
    }
    Ok(report)
}

/// The Hugging Face repository a catalog model entry was read from: the
/// first word of its `_source` when it reads `org/name`.
fn catalog_checkpoint(origin: &pdsim_spec::catalog::Origin) -> Option<String> {
    let text = match pdsim_spec::catalog::builtin_text(
        pdsim_spec::catalog::EntryKind::Model,
        &origin.name,
    ) {
        Some(text) if origin.file.starts_with("builtin:") => text.to_string(),
        _ => std::fs::read_to_string(&origin.file).ok()?,
    };
    let value: serde_yaml::Value = serde_yaml::from_str(&text).ok()?;
    let first = value.get("_source")?.as_str()?.split_whitespace().next()?;
    // A user catalog's `_source` is as untrusted as the flag: the id is
    // written into shell scripts, so it must be a repository id and
    // nothing else.
    hf_repo_id(first).is_ok().then(|| first.to_string())
}

/// The longest `--model-uri` export takes: a Hugging Face id is at most
/// 96 + 1 + 96 characters and a claim name 253; 1,024 leaves room for a
/// deep path without letting a value grow the generated files without end.
const MAX_MODEL_URI: usize = 1024;

/// Why `id` is not a Hugging Face repository id (`ORG/NAME`), as the Hub
/// validates one (`validate_repo_id` in `huggingface_hub`): each part 1 to
/// 96 of `[A-Za-z0-9._-]`, neither starting nor ending with `-` or `.`, and
/// no `--` or `..`. The rule also keeps the id a plain shell word that no
/// program reads as a flag.
fn hf_repo_id(id: &str) -> Result<(), String> {
    let parts: Vec<&str> = id.split('/').collect();
    if parts.len() != 2 {
        return Err(format!(
            "{id:?} is not a Hugging Face repository id ORG/NAME (two parts)"
        ));
    }
    for part in parts {
        let plain = part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
        let edges = |c: char| c == '.' || c == '-';
        if part.is_empty()
            || part.len() > 96
            || !plain
            || part.starts_with(edges)
            || part.ends_with(edges)
            || part.contains("--")
            || part.contains("..")
        {
            return Err(format!(
                "{part:?} is not a part of a Hugging Face repository id: 1 to 96 letters, digits, `.`, `_` and `-`, neither starting nor ending with `.` or `-`, without `--` or `..`"
            ));
        }
    }
    Ok(())
}

/// Why `claim` is not a PersistentVolumeClaim's name (a DNS-1123 subdomain:
/// 1 to 253 lowercase letters, digits, `-` and `.`, starting and ending
/// with a letter or digit), the rule Kubernetes itself applies.
fn pvc_claim(claim: &str) -> Result<(), String> {
    let ok = !claim.is_empty()
        && claim.len() <= 253
        && claim
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && claim.starts_with(|c: char| c.is_ascii_alphanumeric())
        && claim.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{claim:?} is not a PersistentVolumeClaim name: lowercase letters, digits, `-` and `.`, starting and ending with a letter or digit"
        ))
    }
}

/// Why `segment` is not a plain folder or file name in a claim: letters,
/// digits, `.`, `_` and `-`, not `.` or `..` (which would leave the
/// claim) and not starting with `-`.
fn path_segment(segment: &str) -> Result<(), String> {
    let ok = !segment.is_empty()
        && segment != "."
        && segment != ".."
        && !segment.starts_with('-')
        && segment
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{segment:?} is not a plain path segment: letters, digits, `.`, `_` and `-`, not `.` or `..`, not starting with `-`"
        ))
    }
}

/// The checkpoint `vllm serve` is given for `--model-uri uri` (what follows
/// the scheme, as pdsim has always written it), once the URI is one the
/// model-service chart reads (`argsByProtocol` and
/// `mountModelVolumeVolumes` in its `_helpers.tpl`) and made only of
/// characters that mean nothing to a shell, to YAML or to Helm's template
/// rendering (the chart renders an `hf://` id as a template). Each scheme
/// has its own strict form:
/// - `hf://ORG/NAME`, a Hugging Face repository id;
/// - `pvc://CLAIM/PATH`, a claim name and a relative path in it;
/// - `pvc+hf://CLAIM/[CACHE/]ORG/NAME`, a claim, the Hugging Face cache
///   folder in it and a repository id;
/// - `oci://REFERENCE`, an image reference: letters, digits and `._-/:@`.
fn model_of_uri(uri: &str) -> Result<String, String> {
    const EXPECTED: &str = "expected hf://ORG/NAME (a Hugging Face repository id), pvc://CLAIM/PATH, pvc+hf://CLAIM/[CACHE/]ORG/NAME or oci://REFERENCE, as the model-service chart's modelArtifacts.uri takes it";
    let flag = format!("--model-uri {uri:?}");
    if uri.len() > MAX_MODEL_URI {
        return Err(format!(
            "--model-uri: {} bytes, more than the {MAX_MODEL_URI} a checkpoint URI may hold",
            uri.len()
        ));
    }
    let Some((scheme, rest)) = uri.split_once("://") else {
        return Err(format!("{flag}: {EXPECTED}"));
    };
    let checked = match scheme {
        "hf" => hf_repo_id(rest),
        "pvc" => match rest.split_once('/') {
            Some((claim, path)) => {
                pvc_claim(claim).and_then(|()| path.split('/').try_for_each(path_segment))
            }
            None => Err("a pvc:// URI names the claim and the path in it, CLAIM/PATH".into()),
        },
        "pvc+hf" => {
            let parts: Vec<&str> = rest.split('/').collect();
            if parts.len() < 3 {
                Err(
                    "a pvc+hf:// URI names the claim and a repository id, CLAIM/[CACHE/]ORG/NAME"
                        .into(),
                )
            } else {
                let n = parts.len();
                pvc_claim(parts[0])
                    .and_then(|()| parts[1..n - 2].iter().copied().try_for_each(path_segment))
                    .and_then(|()| hf_repo_id(&parts[n - 2..].join("/")))
            }
        }
        "oci" => {
            let ok = rest.starts_with(|c: char| c.is_ascii_alphanumeric())
                && rest
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-/:@".contains(c))
                && !rest
                    .split('/')
                    .any(|s| s.is_empty() || s == "." || s == "..");
            if ok {
                Ok(())
            } else {
                Err("an oci:// reference holds only letters, digits and `._-/:@`, starts with a letter or digit and has no empty, `.` or `..` path segment".into())
            }
        }
        _ => return Err(format!("{flag}: {EXPECTED}")),
    };
    checked.map_err(|why| format!("{flag}: {why}"))?;
    Ok(rest.to_string())
}

/// The longest name export writes into commands: a Kubernetes object
/// name's limit, which validation already holds every document name to.
const MAX_NAME: usize = pdsim_spec::validate::limits::MAX_NAME_CHARS;

/// Why `name` (the deployment's, or the inferencepool release) cannot be
/// written into the exported scripts, YAML comments and `helm install`
/// lines: it must be 1 to 253 letters, digits, `.`, `_`, `-` and `@` (the
/// generated layouts of `pdsim plan` are named `<deployment>@<split>`),
/// starting with a letter or digit, so that it is one plain word to a
/// shell, ends no comment line and is never read as a flag.
fn plain_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{:?} cannot be written into the exported shell commands and Helm values: a name there is 1 to {MAX_NAME} letters, digits, `.`, `_`, `-` and `@`, starting with a letter or digit",
            pdsim_spec::problem::quote(name)
        ))
    }
}

fn read(path: &Path, what: &str) -> Result<String, Failure> {
    read_in(&WithDefaults, path, what)
}

fn read_in(files: &dyn Files, path: &Path, what: &str) -> Result<String, Failure> {
    files
        .read(path)
        .map_err(|e| failure(2, format!("{what} {}: {e}", path.display())))
}

fn file_name(path: &str) -> String {
    Path::new(path)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| inferencepool::CONFIG_FILE.to_string())
}

pub fn export(args: &ExportArgs) -> Result<(), Failure> {
    crate::flags::catalogs(&args.catalog)?;
    // What the flags name, which the files written may not replace; what
    // the deployment names in turn (its router's files) is kept apart as it
    // is read.
    let mut named = vec![args.scenario.clone(), args.deployment.clone()];
    named.extend(args.catalog.iter().cloned());
    if let Some(out) = &args.out {
        crate::output::check_out_for(out, &named)?;
    }
    let exported = export_files(
        &WithDefaults,
        &args.catalog,
        &args.scenario,
        &args.deployment,
        args.model_uri.as_deref(),
    )?;
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("results").join(format!(
            "export--{}",
            crate::flags::safe_part(&exported.name, 60)
        ))
    });
    let staging = Staging::new(&out, "export", &named)?;
    for (name, text) in &exported.files {
        staging.write(name, text)?;
    }
    let out = staging.commit()?;
    println!("exported: {}", out.display());
    Ok(())
}

/// What an export writes: the deployment's name and each file by its
/// relative path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exported {
    pub name: String,
    pub files: std::collections::BTreeMap<String, String>,
}

/// The files `pdsim export` writes for `deployment` on `scenario`, read
/// through `files` (a plan's generated layouts live in memory); an error
/// says why the deployment has no llm-d form.
pub fn export_files(
    files: &dyn Files,
    catalog: &[PathBuf],
    scenario_path: &Path,
    deployment_path: &Path,
    model_uri: Option<&str>,
) -> Result<Exported, Failure> {
    let report = validated(files, catalog, scenario_path, Some(deployment_path))?;
    let scenario = report.scenario.as_ref().expect("validated");
    let bundle = report
        .deployments
        .first()
        .ok_or_else(|| failure(1, format!("{}: no Deployment", deployment_path.display())))?;
    let d: &Deployment = &bundle.deployment;
    // The router's inputs as the EPP would load them: Helm values that
    // carry a configuration or flags the EPP (or pdsim) refuses are not
    // written.
    if let Some(router) = &d.router
        && let Err(problems) =
            pdsim_router::check_router_inputs(files, &bundle.source.file, Some(router))
    {
        let lines: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        return Err(failure(1, lines.join("\n")));
    }
    let refuse = |e: String| {
        failure(
            1,
            format!("{}: cannot export: {e}", deployment_path.display()),
        )
    };
    // The name and the inferencepool release are written into shell
    // scripts, YAML comments and `helm install` lines: each must be one
    // plain word there, refused at its key and line otherwise.
    let unplain = |key: &str, why: String| {
        failure(
            1,
            bundle
                .source
                .error(key, "export-name", format!("cannot export: {why}"))
                .to_string(),
        )
    };
    plain_name(&d.name).map_err(|why| unplain("name", why))?;
    // The checkpoint: the flag, else the catalog entry's source.
    let (model, model_note) = match model_uri {
        Some(uri) => (
            model_of_uri(uri).map_err(|why| failure(2, why))?,
            format!("`{uri}` (--model-uri)"),
        ),
        None => match catalog_checkpoint(&scenario.model.origin) {
            Some(repo) => (
                repo.clone(),
                format!(
                    "`hf://{repo}`, the repository the catalog's `{}` entry was read from",
                    scenario.model.origin.name
                ),
            ),
            None => {
                return Err(failure(
                    2,
                    format!(
                        "the catalog's model `{}` names no Hugging Face repository in its _source; give --model-uri",
                        scenario.model.origin.name
                    ),
                ));
            }
        },
    };
    let version = &scenario.scenario.engine_version;
    let target = modelservice::Target {
        gpus_per_node: scenario.scenario.cluster.gpus_per_node,
        model: model.clone(),
        image: format!("vllm/vllm-openai:v{version}"),
    };
    let mut ms = modelservice::values(d, &target).map_err(refuse)?;
    if let Some(uri) = model_uri {
        ms = ms.replace(&format!("uri: hf://{model}"), &format!("uri: {uri}"));
    }
    let base = deployment_path.parent().unwrap_or(Path::new(""));
    let router = d.router.clone().unwrap_or_default();
    let (config_name, config_text, config_note) = match &router.endpoint_picker_config {
        Some(path) => (
            file_name(path),
            read_in(files, &base.join(path), "router.endpoint_picker_config")?,
            format!("`{path}`, the deployment's own"),
        ),
        None => (
            inferencepool::CONFIG_FILE.to_string(),
            pdsim_router::config::DEFAULT_CONFIG.to_string(),
            "the EPP's built-in configuration, written out (the deployment names none)".into(),
        ),
    };
    // A configuration inside Helm values (`pdsim_router::chart`) is
    // exported as itself, with the values' flags after the deployment's,
    // as the chart renders them.
    let mut values_flags = Vec::new();
    let (config_name, config_text, config_note) = match pdsim_router::chart::embedded_with(
        &config_name,
        &config_text,
        pdsim_router::flags::config_file(router.epp_flags.as_deref().unwrap_or(&[])),
    ) {
        Some(Ok(e)) => {
            values_flags = e.flags.into_iter().map(|(flag, _)| flag).collect();
            let note = format!("{config_note}, from its {}", e.path);
            (e.file, e.text, note)
        }
        // Refused above, by `check_router_inputs`.
        _ => (config_name, config_text, config_note),
    };
    let labels = modelservice::pod_labels(d).map_err(refuse)?;
    let mut flags = router.epp_flags.clone().unwrap_or_default();
    flags.extend(values_flags);
    let release = inferencepool::release(&flags, &d.name);
    if let Some(i) = flags.iter().position(|f| f.starts_with("--pool-name=")) {
        plain_name(&release).map_err(|why| unplain(&format!("router.epp_flags[{i}]"), why))?;
    }
    let gaie = inferencepool::values(
        &inferencepool::RouterValues {
            flags,
            config: (config_name, config_text),
            match_labels: labels,
            target_port: 8000,
        },
        &release,
    )
    .map_err(refuse)?;
    let mut out = Exported {
        name: d.name.clone(),
        files: Default::default(),
    };
    out.files.insert("ms-values.yaml".into(), ms);
    out.files.insert("gaie-values.yaml".into(), gaie);
    let mut manifests = Vec::new();
    for path in router.manifests.iter().flatten() {
        let name = file_name(path);
        out.files.insert(
            format!("manifests/{name}"),
            read_in(files, &base.join(path), "router.manifests")?,
        );
        manifests.push(name);
    }
    let mut commands = String::new();
    for (i, pool) in d.pools.iter().enumerate() {
        let serve = vllm_serve::serve_args(d, i).map_err(refuse)?;
        let script = serve_script(i, &pool.role, &d.name, &model, &pool.parallel, &serve);
        out.files
            .insert(format!("vllm/pool-{i}-{}.sh", pool.role), script);
        commands.push_str(&format!("- `vllm/pool-{i}-{}.sh`\n", pool.role));
    }
    let readme = format!(
        "# `{name}` as llm-d deploys it\n\nWritten by `pdsim export` from `{deployment}` on `{scenario}` (vLLM {version}).\n\n\
         | file | what |\n|---|---|\n\
         | `ms-values.yaml` | Helm values of llm-d's model-service chart: each role's replicas, parallelism and `vllm serve` arguments |\n\
         | `gaie-values.yaml` | Helm values of the inferencepool chart: the EPP's flags, its EndpointPickerConfig and the InferencePool's selector |\n\
         | `manifests/` | the deployment's own Kubernetes manifests ({manifests}) |\n\
         | `vllm/` | each pool's `vllm serve` command, for use without Helm |\n\n\
         Install, as llm-d's guides do (after llm-d's prerequisites and a Gateway):\n\n\
         ```sh\nhelm repo add llm-d-modelservice https://llm-d-incubation.github.io/llm-d-modelservice/\n\
         helm install ms-{name} llm-d-modelservice/llm-d-modelservice -f ms-values.yaml\n\
         helm install {release} oci://registry.k8s.io/gateway-api-inference-extension/charts/inferencepool -f gaie-values.yaml\n```\n\n\
         The inferencepool release is `{release}`: the chart names its InferencePool after the release and starts the EPP with `--pool-name` set to it.\n\n\
         - Checkpoint: {model_note}.\n- EndpointPickerConfig: {config_note}.\n\
         - Pod labels: the pools' own, or `llm-d.ai/inferenceServing: \"true\"` (the chart's default) when they state none; the InferencePool selects by them.\n\
         - `pdsim import --scenario {scenario_word} DIR` reads these files back into a Deployment.\n\n\
         The `vllm serve` commands:\n\n{commands}",
        name = d.name,
        deployment = deployment_path.display(),
        scenario = scenario_path.display(),
        scenario_word = shell_quote(&scenario_path.display().to_string()),
        manifests = if manifests.is_empty() {
            "none".to_string()
        } else {
            manifests.join(", ")
        },
    );
    out.files.insert("README.md".into(), readme);
    Ok(out)
}

/// `text` for one line of a YAML or shell comment: a line break (or any
/// other control character) in a folder's name would end the comment and
/// turn the rest of the name into YAML or commands, so each is written as
/// its escape (`\n`).
fn comment_text(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The `vllm serve` script of `pools[index]` (`role`) of the deployment
/// `deployment` (a name [`plain_name`] accepted), loading `model`. Every
/// word of the command is quoted as the shell reads it, the checkpoint and
/// the environment too, though the checkpoint's URI was checked to be plain
/// and pdsim sets the environment itself: a script is run, so nothing in it
/// may rely on a check made elsewhere.
fn serve_script(
    index: usize,
    role: &str,
    deployment: &str,
    model: &str,
    p: &pdsim_spec::deployment::Parallel,
    serve: &vllm_serve::ServeArgs,
) -> String {
    let mut line: Vec<String> = vec!["vllm".into(), "serve".into(), shell_quote(model)];
    for (flag, value, default) in [
        ("--tensor-parallel-size", p.tp, 1),
        ("--data-parallel-size", p.dp, 1),
        ("--data-parallel-size-local", p.dp_local, 0),
    ] {
        if value != default {
            line.push(flag.into());
            line.push(value.to_string());
        }
    }
    line.extend(serve.args.iter().map(|a| shell_quote(a)));
    let env: String = serve
        .env
        .iter()
        .map(|(k, v)| format!("{} ", shell_quote(&format!("{k}={v}"))))
        .collect();
    format!(
        "#!/bin/sh\n# pools[{index}] ({role}) of the Deployment `{deployment}`, as one `vllm serve` per model server\n# (written by `pdsim export`; llm-d's model-service chart runs the same from ms-values.yaml).\nexec env {env}{}\n",
        line.join(" ")
    )
}

/// A shell word: quoted when it holds anything but plain characters (`@`
/// is plain: it means nothing to `sh` outside `$@`, and `pdsim plan` names
/// its generated layouts with it).
fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

pub fn import(args: &ImportArgs) -> Result<(), Failure> {
    crate::flags::catalogs(&args.catalog)?;
    // An export folder is a pdsim result, which --out may replace; but not
    // while it is what is being imported, nor the scenario or a catalog.
    let mut named = vec![args.dir.clone(), args.scenario.clone()];
    named.extend(args.catalog.iter().cloned());
    if let Some(out) = &args.out {
        crate::output::check_out_for(out, &named)?;
    }
    let report = validated(&WithDefaults, &args.catalog, &args.scenario, None)?;
    let scenario = report.scenario.as_ref().expect("validated");
    let gpus_per_node = scenario.scenario.cluster.gpus_per_node;
    let ms_path = args.dir.join("ms-values.yaml");
    let gaie_path = args.dir.join("gaie-values.yaml");
    let ms = read(&ms_path, "the model-service values")?;
    let (name, pools, offload, pd_transfer) = modelservice::read(&ms, gpus_per_node)
        .map_err(|e| failure(1, format!("{}: {e}", ms_path.display())))?;
    let gaie = read(&gaie_path, "the inferencepool values")?;
    let router = inferencepool::read(&gaie)
        .map_err(|e| failure(1, format!("{}: {e}", gaie_path.display())))?;
    let mut manifests: Vec<(String, String)> = Vec::new();
    let manifest_dir = args.dir.join("manifests");
    if manifest_dir.is_dir() {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&manifest_dir)
            .map_err(|e| failure(2, format!("{}: {e}", manifest_dir.display())))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        names.sort();
        for path in names {
            manifests.push((
                file_name(&path.display().to_string()),
                read(&path, "a manifest")?,
            ));
        }
    }
    let (config_name, config_text) = router.config;
    let deployment = Deployment {
        kind: "Deployment".into(),
        name: name.clone(),
        pools,
        offload,
        pd_transfer,
        router: Some(Router {
            epp_flags: (!router.flags.is_empty()).then_some(router.flags),
            endpoint_picker_config: Some(config_name.clone()),
            manifests: (!manifests.is_empty()).then(|| {
                manifests
                    .iter()
                    .map(|(n, _)| format!("manifests/{n}"))
                    .collect()
            }),
        }),
    };
    let yaml = serde_yaml::to_string(&deployment).map_err(|e| failure(2, e))?;
    let out = args.out.clone().unwrap_or_else(|| {
        PathBuf::from("results").join(format!("import--{}", crate::flags::safe_part(&name, 60)))
    });
    let staging = Staging::new(&out, "import", &named)?;
    staging.write(
        "deployment.yaml",
        format!(
            "# Read by `pdsim import` from {} (llm-d's model-service and inferencepool chart values).\n{yaml}",
            comment_text(&args.dir.display().to_string())
        ),
    )?;
    staging.write(&config_name, &config_text)?;
    for (n, text) in &manifests {
        staging.write(&format!("manifests/{n}"), text)?;
    }
    let out = staging.commit()?;
    // The written deployment, checked as `validate` checks it.
    let check = validated(
        &WithDefaults,
        &args.catalog,
        &args.scenario,
        Some(&out.join("deployment.yaml")),
    );
    match check {
        Ok(_) => println!("imported: {}", out.join("deployment.yaml").display()),
        Err(f) => {
            return Err(failure(
                1,
                format!(
                    "imported {}, but it does not validate:\n{}",
                    out.join("deployment.yaml").display(),
                    f.message
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{comment_text, model_of_uri, plain_name, serve_script, shell_quote};
    use pdsim_spec::deployment::Parallel;
    use pdsim_spec::llmd::vllm_serve::ServeArgs;

    #[test]
    fn each_uri_scheme_takes_its_own_strict_form_and_nothing_a_shell_reads() {
        for (uri, model) in [
            ("hf://deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-V3"),
            (
                "hf://meta-llama/Llama-3.1-8B_v2.0",
                "meta-llama/Llama-3.1-8B_v2.0",
            ),
            ("pvc://models/llama-3.1-8b", "models/llama-3.1-8b"),
            ("pvc://model-cache.v1/a/b_c/d.e", "model-cache.v1/a/b_c/d.e"),
            ("pvc+hf://cache/org/name", "cache/org/name"),
            (
                "pvc+hf://cache/hub/models/org/name",
                "cache/hub/models/org/name",
            ),
            (
                "oci://ghcr.io/org/model:v1@sha256:0a1b",
                "ghcr.io/org/model:v1@sha256:0a1b",
            ),
        ] {
            assert_eq!(model_of_uri(uri).as_deref(), Ok(model), "{uri}");
        }
        for uri in [
            "hf://org/$(id)",
            "hf://org/a;id",
            "hf://org/a\nid",
            "hf://org/a id",
            "hf://org/`id`",
            "hf://org/{{ .Values }}",
            "hf://org",
            "hf://org/name/extra",
            "hf://-rf/name",
            "hf://org/name.",
            "hf://org/a--b",
            "hf://org/a..b",
            "hf://",
            "pvc://models",
            "pvc://Models/x",
            "pvc://-models/x",
            "pvc://models/../etc",
            "pvc://models/a//b",
            "pvc://models/$(id)",
            "pvc+hf://cache/name",
            "pvc+hf://cache/x;y/org/name",
            "oci://",
            "oci://-x",
            "oci://a/../b",
            "oci://a b",
            "oci://a'b",
            "s3://bucket/model",
            "llama",
            "",
        ] {
            let error = model_of_uri(uri).expect_err(uri);
            assert!(error.starts_with("--model-uri "), "{uri}: {error}");
            assert!(!error.contains('\n'), "{uri}: one line: {error}");
        }
        let long = format!("hf://org/{}", "a".repeat(2000));
        let error = model_of_uri(&long).unwrap_err();
        assert!(error.len() < 200, "a long URI is not quoted whole: {error}");
    }

    #[test]
    fn a_name_written_into_commands_is_one_plain_word() {
        for name in ["colocated-tp8", "1p3d-ep8@p1d3-tp1dp8", "a.b_c"] {
            assert_eq!(plain_name(name), Ok(()), "{name}");
        }
        for name in ["", "-x", "a b", "a\nrm -rf /", "x$(id)", "a;b", "a`b`"] {
            assert!(plain_name(name).is_err(), "{name:?}");
        }
        assert!(plain_name(&"a".repeat(254)).is_err());
    }

    #[test]
    fn every_word_of_a_serve_script_is_quoted() {
        let parallel = Parallel {
            tp: 8,
            pp: 1,
            dp: 1,
            dp_local: 0,
            data_parallel_load_balancing: None,
            pcp: 0,
            dcp: 0,
            enable_expert_parallel: false,
        };
        let serve = ServeArgs {
            args: vec!["--compilation-config".into(), "{\"level\": 3}".into()],
            env: vec![("NAME".into(), "a value; id".into())],
        };
        let script = serve_script(0, "colocated", "d", "org/$(id)", &parallel, &serve);
        assert!(
            script.ends_with(
                "exec env 'NAME=a value; id' vllm serve 'org/$(id)' --tensor-parallel-size 8 --compilation-config '{\"level\": 3}'\n"
            ),
            "{script}"
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a@b:c/d=e,f"), "a@b:c/d=e,f");
    }

    #[test]
    fn a_comment_line_holds_no_line_break() {
        assert_eq!(comment_text("exports/a b"), "exports/a b");
        assert_eq!(comment_text("x\nkind: Other\r\t"), "x\\nkind: Other\\r\\t");
    }
}
