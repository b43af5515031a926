//! Checks of a Deployment on its own ("Checks › On its own" in the
//! specification, `seeds/000`), plus the key-level rules the key tables state
//! (labels, router inputs, load-balancing modes, Engram's THP exclusion).

use crate::deployment::{Deployment, Engine, Pool, ROLE_LABEL, Role};
use crate::files::{FileKind, Files};
use crate::layout::expert_parallel_width;
use crate::load::Source;
use crate::problem::Problems;
use crate::validate::limits::{self, check_int, check_opt};
use std::collections::BTreeSet;
use std::path::Path;

/// Runs every field check of `deployment` and returns what it found.
pub fn check(source: &Source, deployment: &Deployment, files: &dyn Files) -> Problems {
    let mut problems = Problems::new();
    if deployment.kind != "Deployment" {
        problems.push(source.error(
            "kind",
            "deployment-kind",
            format!("kind must be `Deployment`, found `{}`", deployment.kind),
        ));
    }
    if deployment.name.trim().is_empty() {
        problems.push(source.error("name", "deployment-name-empty", "name must not be empty"));
    }
    super::limits::check_name(source, &mut problems, "name", &deployment.name);
    if deployment.pools.is_empty() {
        problems.push(source.error(
            "pools",
            "pools-empty",
            "a deployment needs at least one pool",
        ));
    }
    for (index, pool) in deployment.pools.iter().enumerate() {
        check_pool(source, index, pool, &mut problems);
    }
    check_roles(source, deployment, &mut problems);
    if let Some(offload) = &deployment.offload {
        check_offload(source, offload, &mut problems);
    }
    if let Some(router) = &deployment.router {
        check_router(source, router, files, &mut problems);
    }
    problems
}

fn check_pool(source: &Source, index: usize, pool: &Pool, problems: &mut Problems) {
    let at = |key: &str| format!("pools[{index}].{key}");
    let role = Role::parse(&pool.role);
    if role.is_none() {
        problems.push(source.error(
            &at("role"),
            "pool-role-unknown",
            format!(
                "role must be colocated, prefill or decode, found `{}`",
                pool.role
            ),
        ));
    }
    if pool.nodes < 1 {
        problems.push(source.error(
            &at("nodes"),
            "pool-nodes-below-one",
            format!("nodes must be at least 1, found {}", pool.nodes),
        ));
    }
    check_int(
        source,
        problems,
        &at("nodes"),
        pool.nodes,
        limits::MAX_NODES,
    );
    let p = &pool.parallel;
    for (key, value) in [
        ("tp", p.tp),
        ("pp", p.pp),
        ("dp", p.dp),
        ("dp_local", p.dp_local),
        ("pcp", p.pcp),
        ("dcp", p.dcp),
    ] {
        check_int(
            source,
            problems,
            &at(&format!("parallel.{key}")),
            value,
            limits::MAX_PARALLEL_WIDTH,
        );
    }
    for (key, value) in [("tp", p.tp), ("pp", p.pp), ("dp", p.dp)] {
        if value < 1 {
            problems.push(source.error(
                &at(&format!("parallel.{key}")),
                "parallel-width-below-one",
                format!("{key} must be at least 1, found {value}"),
            ));
        }
    }
    for (key, value) in [("pcp", p.pcp), ("dcp", p.dcp), ("dp_local", p.dp_local)] {
        if value < 0 {
            problems.push(source.error(
                &at(&format!("parallel.{key}")),
                "parallel-negative",
                format!("{key} must not be negative, found {value}"),
            ));
        }
    }
    if p.dp_local > p.dp && p.dp >= 1 {
        problems.push(source.error(
            &at("parallel.dp_local"),
            "dp-local-exceeds-dp",
            format!("dp_local {} exceeds dp {}", p.dp_local, p.dp),
        ));
    }
    if p.dcp > 1 && p.tp >= 1 && p.pcp >= 0 {
        if p.pcp <= 1 {
            if p.tp % p.dcp != 0 {
                problems.push(source.error(
                    &at("parallel.dcp"),
                    "dcp-partition",
                    format!(
                        "dcp {} must divide tp {}: decode-context parallelism reuses the tensor-parallel ranks",
                        p.dcp, p.tp
                    ),
                ));
            }
        } else {
            let group = p.tp.saturating_mul(p.pcp);
            if p.dcp != p.pcp && p.dcp != group {
                problems.push(source.error(
                    &at("parallel.dcp"),
                    "dcp-partition",
                    format!(
                        "with pcp {} > 1, dcp must be 1, pcp ({}) or tp × pcp ({}), found {}",
                        p.pcp, p.pcp, group, p.dcp
                    ),
                ));
            }
        }
    }
    if let Some(mode) = &p.data_parallel_load_balancing
        && (mode == "hybrid" || mode == "external")
        && p.dp <= 1
    {
        problems.push(source.error(
            &at("parallel.data_parallel_load_balancing"),
            "load-balancing-needs-dp",
            format!("`{mode}` load balancing needs dp > 1, found dp {}", p.dp),
        ));
    }
    if p.enable_expert_parallel
        && p.tp >= 1
        && p.dp >= 1
        && p.pcp >= 0
        && expert_parallel_width(p.tp, p.pcp, p.dp, true) == 1
    {
        problems.push(source.warning(
                &at("parallel.enable_expert_parallel"),
                "expert-parallel-width-one",
                "expert parallelism is enabled but the derived width tp × pcp × dp is 1, so every rank holds every expert",
            ));
    }
    if let (Some(role), Some(label)) = (role, pool.labels.get(ROLE_LABEL))
        && label != role.llm_d_label()
    {
        problems.push(source.error(
            &at(&format!("labels.{ROLE_LABEL}")),
            "pool-label-role-mismatch",
            format!(
                "{ROLE_LABEL} is derived from role `{}` as `{}`; the label says `{label}`",
                role.as_str(),
                role.llm_d_label()
            ),
        ));
    }
    check_engine(source, index, &pool.engine, problems);
}

fn check_engine(source: &Source, index: usize, engine: &Engine, problems: &mut Problems) {
    let at = |key: &str| format!("pools[{index}].engine.{key}");
    let counts = [
        ("block_size", engine.block_size),
        ("max_num_batched_tokens", engine.max_num_batched_tokens),
        ("max_num_seqs", engine.max_num_seqs),
        (
            "cp_kv_cache_interleave_size",
            engine.cp_kv_cache_interleave_size,
        ),
        (
            "long_prefill_token_threshold",
            engine.long_prefill_token_threshold,
        ),
    ];
    for (key, value) in counts {
        if let Some(value) = value.filter(|v| *v < 0) {
            problems.push(source.error(
                &at(key),
                "engine-count-negative",
                format!("{key} must not be negative, found {value}"),
            ));
        }
    }
    // A block of no tokens, a step budget of none or a cap of no
    // sequences schedules nothing: the engine could not serve a request.
    // (The specification gives 0 a meaning only for the keys that say so:
    // `long_prefill_token_threshold`, `gpu_memory_utilization`,
    // `cp_kv_cache_interleave_size`.)
    for (key, value) in [
        ("block_size", engine.block_size),
        ("max_num_batched_tokens", engine.max_num_batched_tokens),
        ("max_num_seqs", engine.max_num_seqs),
    ] {
        if value == Some(0) {
            problems.push(source.error(
                &at(key),
                "engine-count-zero",
                format!("{key} must be at least 1, found 0: the engine could schedule nothing"),
            ));
        }
    }
    // Values no engine could run with. Beyond these bounds the derived
    // quantities (capture-size lists, block tables, token counters) stop
    // being meaningful, so they are refused rather than computed.
    let bounded = [
        ("block_size", engine.block_size, limits::MAX_BLOCK_SIZE),
        (
            "max_num_batched_tokens",
            engine.max_num_batched_tokens,
            limits::MAX_BATCHED_TOKENS,
        ),
        ("max_num_seqs", engine.max_num_seqs, limits::MAX_NUM_SEQS),
        (
            "long_prefill_token_threshold",
            engine.long_prefill_token_threshold,
            limits::MAX_TOKENS,
        ),
        (
            "cp_kv_cache_interleave_size",
            engine.cp_kv_cache_interleave_size,
            limits::MAX_TOKENS,
        ),
        (
            "max_model_len",
            match engine.max_model_len {
                Some(crate::quantity::MaxModelLen::Tokens(n)) => Some(n),
                _ => None,
            },
            limits::MAX_TOKENS,
        ),
        (
            "max_cudagraph_capture_size",
            engine.max_cudagraph_capture_size,
            limits::MAX_CAPTURE_SIZE,
        ),
        (
            "speculative.num_spec_tokens",
            engine.speculative.as_ref().map(|s| s.num_spec_tokens),
            limits::MAX_SPEC_TOKENS,
        ),
        (
            "dbo.dbo_decode_token_threshold",
            engine
                .dbo
                .as_ref()
                .and_then(|d| d.dbo_decode_token_threshold),
            limits::MAX_TOKENS,
        ),
        (
            "dbo.dbo_prefill_token_threshold",
            engine
                .dbo
                .as_ref()
                .and_then(|d| d.dbo_prefill_token_threshold),
            limits::MAX_TOKENS,
        ),
        (
            "eplb.num_redundant_experts",
            engine.eplb.as_ref().and_then(|e| e.num_redundant_experts),
            limits::MAX_EXPERTS,
        ),
        (
            "eplb.window_size",
            engine.eplb.as_ref().and_then(|e| e.window_size),
            limits::MAX_STEPS,
        ),
        (
            "eplb.step_interval",
            engine.eplb.as_ref().and_then(|e| e.step_interval),
            limits::MAX_STEPS,
        ),
    ];
    for (key, value, limit) in bounded {
        check_opt(source, problems, &at(key), value, limit);
    }
    if let Some(sizes) = &engine.cudagraph_capture_sizes {
        if sizes.len() > limits::MAX_CAPTURE_LIST {
            problems.push(source.error(
                &at("cudagraph_capture_sizes"),
                limits::CODE,
                format!(
                    "{} capture sizes is beyond what any engine captures (at most {})",
                    sizes.len(),
                    limits::MAX_CAPTURE_LIST
                ),
            ));
        }
        for (j, size) in sizes.iter().enumerate() {
            check_int(
                source,
                problems,
                &at(&format!("cudagraph_capture_sizes[{j}]")),
                *size,
                limits::MAX_BATCHED_TOKENS,
            );
        }
    }
    if let Some(crate::quantity::MaxModelLen::Tokens(n)) = engine.max_model_len
        && n < -1
    {
        problems.push(source.error(
            &at("max_model_len"),
            "max-model-len-below-auto",
            format!("max_model_len must be a positive count or auto (-1), found {n}"),
        ));
    }
    if let Some(value) = engine.gpu_memory_utilization
        && (!value.is_finite() || !(0.0..=1.0).contains(&value))
    {
        problems.push(source.error(
            &at("gpu_memory_utilization"),
            "gpu-memory-utilization-range",
            format!(
                "gpu_memory_utilization must be a finite fraction in [0, 1], found {}",
                crate::problem::number(value)
            ),
        ));
    }
    if let Some(size) = engine.max_cudagraph_capture_size.filter(|s| *s < 1) {
        problems.push(source.error(
            &at("max_cudagraph_capture_size"),
            "cudagraph-capture-size-below-one",
            format!("max_cudagraph_capture_size must be at least 1, found {size}"),
        ));
    }
    if let Some(sizes) = &engine.cudagraph_capture_sizes {
        if sizes.is_empty() {
            problems.push(source.error(
                &at("cudagraph_capture_sizes"),
                "cudagraph-capture-sizes-empty",
                "cudagraph_capture_sizes, when stated, must list at least one size",
            ));
        }
        for (j, size) in sizes.iter().enumerate().filter(|(_, s)| **s < 1) {
            problems.push(source.error(
                &at(&format!("cudagraph_capture_sizes[{j}]")),
                "cudagraph-capture-size-below-one",
                format!("a capture size must be at least 1, found {size}"),
            ));
        }
    }
    if engine.disable_custom_all_reduce == Some(true)
        && engine.allreduce_backend.as_deref() == Some("custom")
    {
        problems.push(source.error(
            &at("allreduce_backend"),
            "allreduce-contradiction",
            "allreduce_backend is `custom` while disable_custom_all_reduce is true",
        ));
    }
    if engine.disable_custom_all_reduce == Some(false)
        && engine.allreduce_backend.as_deref() == Some("nccl")
    {
        problems.push(source.warning(
            &at("allreduce_backend"),
            "allreduce-nccl-with-custom-enabled",
            "allreduce_backend is `nccl` while disable_custom_all_reduce is explicitly false; the backend wins and the custom kernel is not used",
        ));
    }
    if let Some(dbo) = &engine.dbo {
        for (key, value) in [
            ("dbo_decode_token_threshold", dbo.dbo_decode_token_threshold),
            (
                "dbo_prefill_token_threshold",
                dbo.dbo_prefill_token_threshold,
            ),
        ] {
            if let Some(value) = value.filter(|v| *v < 0) {
                problems.push(source.error(
                    &at(&format!("dbo.{key}")),
                    "dbo-threshold-negative",
                    format!("{key} must not be negative, found {value}"),
                ));
            }
        }
    }
    if let Some(eplb) = &engine.eplb {
        if eplb.enable_eplb == Some(true)
            && let Some(value) = eplb.num_redundant_experts.filter(|v| *v < 0)
        {
            problems.push(source.error(
                &at("eplb.num_redundant_experts"),
                "eplb-redundant-negative",
                format!("num_redundant_experts must not be negative, found {value}"),
            ));
        }
        for (key, value) in [
            ("window_size", eplb.window_size),
            ("step_interval", eplb.step_interval),
        ] {
            if let Some(value) = value.filter(|v| *v < 0) {
                problems.push(source.error(
                    &at(&format!("eplb.{key}")),
                    "engine-count-negative",
                    format!("{key} must not be negative, found {value}"),
                ));
            }
        }
    }
    if let Some(spec) = &engine.speculative {
        if spec.method.trim().is_empty() {
            problems.push(source.error(
                &at("speculative.method"),
                "speculative-method-empty",
                "speculative.method must name a draft method",
            ));
        }
        if spec.num_spec_tokens < 1 {
            problems.push(source.error(
                &at("speculative.num_spec_tokens"),
                "speculative-tokens-below-one",
                format!(
                    "num_spec_tokens must be at least 1, found {}",
                    spec.num_spec_tokens
                ),
            ));
        }
    }
    if let Some(engram) = &engine.engram_config
        && engram.use_thp == Some(true)
        && engram.dp_shared_memory == Some(true)
    {
        problems.push(source.error(
            &at("engram_config.use_thp"),
            "engram-thp-with-shared-memory",
            "use_thp backs a per-rank host table and is refused together with dp_shared_memory",
        ));
    }
}

/// Prefill and decode come together or not at all, and never beside colocated.
fn check_roles(source: &Source, deployment: &Deployment, problems: &mut Problems) {
    let find = |role: Role| {
        deployment
            .pools
            .iter()
            .position(|p| Role::parse(&p.role) == Some(role))
    };
    let (colocated, prefill, decode) = (
        find(Role::Colocated),
        find(Role::Prefill),
        find(Role::Decode),
    );
    if let (Some(i), None) = (prefill, decode) {
        problems.push(source.error(
            &format!("pools[{i}].role"),
            "pool-roles-unpaired",
            "a prefill pool needs a decode pool",
        ));
    }
    if let (None, Some(i)) = (prefill, decode) {
        problems.push(source.error(
            &format!("pools[{i}].role"),
            "pool-roles-unpaired",
            "a decode pool needs a prefill pool",
        ));
    }
    if let (Some(c), Some(other)) = (colocated, prefill.or(decode)) {
        problems.push(source.error(
            &format!("pools[{}].role", c.max(other)),
            "pool-roles-mixed",
            "a colocated pool cannot appear beside prefill or decode pools",
        ));
    }
    if let (Some(i), None) = (prefill, &deployment.pd_transfer) {
        problems.push(source.error(
            "pd_transfer",
            "pd-transfer-missing",
            format!("pools[{i}] is a prefill pool, so pd_transfer must say how KV moves to decode"),
        ));
    }
}

fn check_offload(source: &Source, offload: &crate::deployment::Offload, problems: &mut Problems) {
    if offload.tiers.is_empty() {
        problems.push(source.error(
            "offload.tiers",
            "offload-tiers-empty",
            "offload needs at least one tier",
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, tier) in offload.tiers.iter().enumerate() {
        if tier.tier.trim().is_empty() {
            problems.push(source.error(
                &format!("offload.tiers[{i}].tier"),
                "offload-tier-unnamed",
                "a tier must name its storage class",
            ));
        } else if !seen.insert(tier.tier.as_str()) {
            problems.push(source.error(
                &format!("offload.tiers[{i}].tier"),
                "offload-tier-duplicate",
                format!("tier `{}` is named twice", tier.tier),
            ));
        }
        check_int(
            source,
            problems,
            &format!("offload.tiers[{i}].bytes"),
            tier.bytes,
            limits::MAX_OFFLOAD_BYTES,
        );
        if tier.bytes < 1 {
            problems.push(source.error(
                &format!("offload.tiers[{i}].bytes"),
                "offload-tier-bytes-below-one",
                format!("a tier's bytes must be at least 1, found {}", tier.bytes),
            ));
        }
    }
    check_opt(
        source,
        problems,
        "offload.prefetch_depth",
        offload.prefetch_depth,
        limits::MAX_PREFETCH_DEPTH,
    );
    if let Some(depth) = offload.prefetch_depth.filter(|d| *d < 0) {
        problems.push(source.error(
            "offload.prefetch_depth",
            "offload-prefetch-negative",
            format!("prefetch_depth must not be negative, found {depth}"),
        ));
    }
}

/// The router block is checked for shape and existence only (and whether
/// its configuration is a ConfigMap, which a `--config-file` may pick
/// from); the router crate loads the files.
fn check_router(
    source: &Source,
    router: &crate::deployment::Router,
    files: &dyn Files,
    problems: &mut Problems,
) {
    let base = Path::new(&source.file).parent().unwrap_or(Path::new(""));
    let check_file = |path_key: &str, value: &str, problems: &mut Problems| {
        if value.trim().is_empty() {
            problems.push(source.error(
                path_key,
                "router-path-blank",
                "the path must not be blank",
            ));
            return;
        }
        let path = base.join(value);
        match files.kind(&path) {
            FileKind::File => {}
            FileKind::Directory => problems.push(source.error(
                path_key,
                "router-file-missing",
                format!("`{}` is a directory, not a file", path.display()),
            )),
            FileKind::Special(kind) => problems.push(source.error(
                path_key,
                "router-file-missing",
                format!("`{}` is {kind}, not a regular file", path.display()),
            )),
            FileKind::Missing => problems.push(source.error(
                path_key,
                "router-file-missing",
                format!(
                    "`{}` does not exist (paths are relative to the deployment file)",
                    path.display()
                ),
            )),
        }
    };
    if let Some(config) = &router.endpoint_picker_config {
        check_file("router.endpoint_picker_config", config, problems);
    }
    for (i, manifest) in router.manifests.iter().flatten().enumerate() {
        check_file(&format!("router.manifests[{i}]"), manifest, problems);
    }
    let config_is_config_map = router
        .endpoint_picker_config
        .as_ref()
        .is_some_and(|config| {
            files
                .read(&base.join(config))
                .ok()
                .and_then(|text| {
                    let text = crate::load::check_yaml(&text).ok()?.to_string();
                    let value: serde_yaml::Value = serde_yaml::from_str(&text).ok()?;
                    Some(value.get("kind")?.as_str()? == "ConfigMap")
                })
                .unwrap_or(false)
        });
    for (i, flag) in router.epp_flags.iter().flatten().enumerate() {
        let key = format!("router.epp_flags[{i}]");
        let Some(body) = flag.strip_prefix("--") else {
            problems.push(source.error(
                &key,
                "router-flag-shape",
                format!("`{flag}` is not of the form --name=value"),
            ));
            continue;
        };
        let name = body.split('=').next().unwrap_or("");
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            problems.push(source.error(
                &key,
                "router-flag-shape",
                format!("`{flag}` is not of the form --name=value"),
            ));
            continue;
        }
        // A ConfigMap holds the files the EPP's --config-file picks from
        // (`pdsim_router::chart`); any other configuration is the one file.
        let names_config = match name {
            "config-text" => true,
            "config-file" => !config_is_config_map,
            _ => false,
        };
        if names_config && router.endpoint_picker_config.is_some() {
            problems.push(source.error(
                &key,
                "router-config-twice",
                format!("`--{name}` names the EndpointPickerConfig while endpoint_picker_config names it too; keep one"),
            ));
        }
    }
}
