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
    let parts: Vec<&str> = first.split('/').collect();
    (parts.len() == 2 && parts.iter().all(|p| !p.is_empty())).then(|| first.to_string())
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
    if let Some(out) = &args.out {
        crate::output::check_out(out)?;
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
    let staging = Staging::new(&out, "export")?;
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
    let refuse = |e: String| {
        failure(
            1,
            format!("{}: cannot export: {e}", deployment_path.display()),
        )
    };
    // The checkpoint: the flag, else the catalog entry's source.
    let (model, model_note) = match model_uri {
        Some(uri)
            if !["hf://", "pvc://", "pvc+hf://", "oci://"]
                .iter()
                .any(|scheme| uri.starts_with(scheme) && uri.len() > scheme.len()) =>
        {
            return Err(failure(
                2,
                format!(
                    "--model-uri {uri:?}: expected hf://org/name, pvc://claim/path, pvc+hf://… or oci://…, as the model-service chart's modelArtifacts.uri takes it"
                ),
            ));
        }
        Some(uri) => {
            let path = uri.split_once("://").map_or(uri, |(_, p)| p);
            (path.to_string(), format!("`{uri}` (--model-uri)"))
        }
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
    let labels = modelservice::pod_labels(d).map_err(refuse)?;
    let flags = router.epp_flags.clone().unwrap_or_default();
    let release = inferencepool::release(&flags, &d.name);
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
        let p = &pool.parallel;
        let mut line: Vec<String> = vec!["vllm".into(), "serve".into(), model.clone()];
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
        let env: String = serve.env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
        let script = format!(
            "#!/bin/sh\n# pools[{i}] ({}) of the Deployment `{}`, as one `vllm serve` per model server\n# (written by `pdsim export`; llm-d's model-service chart runs the same from ms-values.yaml).\nexec env {env}{}\n",
            pool.role,
            d.name,
            line.join(" ")
        );
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
         - `pdsim import --scenario {scenario} DIR` reads these files back into a Deployment.\n\n\
         The `vllm serve` commands:\n\n{commands}",
        name = d.name,
        deployment = deployment_path.display(),
        scenario = scenario_path.display(),
        manifests = if manifests.is_empty() {
            "none".to_string()
        } else {
            manifests.join(", ")
        },
    );
    out.files.insert("README.md".into(), readme);
    Ok(out)
}

/// A shell word: quoted when it holds anything but plain characters.
fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,".contains(c))
    {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

pub fn import(args: &ImportArgs) -> Result<(), Failure> {
    crate::flags::catalogs(&args.catalog)?;
    if let Some(out) = &args.out {
        crate::output::check_out(out)?;
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
    let staging = Staging::new(&out, "import")?;
    staging.write(
        "deployment.yaml",
        format!(
            "# Read by `pdsim import` from {} (llm-d's model-service and inferencepool chart values).\n{yaml}",
            args.dir.display()
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
