//! A Deployment's pools as Helm values of llm-d's model-service chart
//! (`llm-d-modelservice`, the chart llm-d's guides install with
//! `-f ms-values.yaml`), and back.
//!
//! The chart has one `decode` and one `prefill` section. Each holds
//! `replicas` identical model servers, a `parallelism` block (`tensor`,
//! `data`, `dataLocal`, `workers`) from which it renders
//! `--tensor-parallel-size`, `--data-parallel-size` and
//! `--data-parallel-size-local` and requests `dataLocal × tensor` GPUs per
//! pod (`_helpers.tpl`: `vllmServeModelCommand`, `numGpuPerWorker`), and
//! containers whose `args` follow `vllm serve <model>`. A replica spans
//! `workers` pods (a LeaderWorkerSet, `multinode: true`) when its
//! data-parallel ranks span nodes. The pods carry `modelArtifacts.labels`
//! and `llm-d.ai/role: prefill|decode`. A colocated pool is the `decode`
//! section with `prefill.create: false`, as in llm-d's
//! inference-scheduling guide.

use super::vllm_serve::{self, ServeArgs};
use crate::deployment::{Deployment, Pool, ROLE_LABEL};
use serde_yaml::{Mapping, Value};
use std::collections::BTreeMap;

/// What the chart needs beyond the Deployment: the cluster's node size,
/// the model and the image of the engine release.
#[derive(Clone, Debug)]
pub struct Target {
    pub gpus_per_node: i64,
    /// The checkpoint (`hf://` URI's path) and the served model name.
    pub model: String,
    pub image: String,
}

fn map(entries: Vec<(&str, Value)>) -> Value {
    let mut m = Mapping::new();
    for (k, v) in entries {
        m.insert(Value::from(k), v);
    }
    Value::Mapping(m)
}

/// The pool of each chart section: `(section, pool index)`.
fn sections(d: &Deployment) -> Result<Vec<(&'static str, usize)>, String> {
    let mut out: Vec<(&'static str, usize)> = Vec::new();
    for (i, pool) in d.pools.iter().enumerate() {
        let section = match pool.role.as_str() {
            "colocated" | "decode" => "decode",
            "prefill" => "prefill",
            other => return Err(format!("pools[{i}].role: unknown role `{other}`")),
        };
        if let Some((_, j)) = out.iter().find(|(s, _)| *s == section) {
            return Err(format!(
                "pools[{i}]: the model-service chart has one `{section}` section, and pools[{j}] already fills it (install one release per pool instead)"
            ));
        }
        out.push((section, i));
    }
    if d.pools.iter().any(|p| p.role == "colocated") && d.pools.len() > 1 {
        return Err("a colocated pool beside other pools has no model-service form".into());
    }
    Ok(out)
}

/// The label llm-d's guides select model servers by, and the chart's own
/// default: the pods get it when the pools state no labels of their own,
/// so the InferencePool has a selector.
pub const SERVING_LABEL: (&str, &str) = ("llm-d.ai/inferenceServing", "true");

/// The pods' labels: the pools' own, which must agree, as the chart puts
/// one `modelArtifacts.labels` on every pod (`llm-d.ai/role` is the
/// chart's to set); [`SERVING_LABEL`] when they state none.
pub fn pod_labels(d: &Deployment) -> Result<BTreeMap<String, String>, String> {
    let mut labels = labels(d)?;
    if labels.is_empty() {
        labels.insert(SERVING_LABEL.0.into(), SERVING_LABEL.1.into());
    }
    Ok(labels)
}

fn labels(d: &Deployment) -> Result<BTreeMap<String, String>, String> {
    let strip = |p: &Pool| {
        let mut l = p.labels.clone();
        l.remove(ROLE_LABEL);
        l
    };
    let first = strip(&d.pools[0]);
    for (i, pool) in d.pools.iter().enumerate().skip(1) {
        if strip(pool) != first {
            return Err(format!(
                "pools[{i}].labels differ from pools[0].labels: the model-service chart labels every pod with the one modelArtifacts.labels"
            ));
        }
    }
    Ok(first)
}

/// The chart's values for `d` on `target`, with a comment header.
pub fn values(d: &Deployment, target: &Target) -> Result<String, String> {
    let sections = sections(d)?;
    let labels = pod_labels(d)?;
    let mut multinode = false;
    let mut roles: Vec<(&str, Value)> = Vec::new();
    for (section, i) in &sections {
        let pool = &d.pools[*i];
        let at = |key: &str| format!("pools[{i}].{key}");
        let p = &pool.parallel;
        if p.pcp > 1 {
            return Err(format!(
                "{}: {} — the model-service chart requests dataLocal × tensor GPUs per pod and has no prefill-context width, so a pod would get too few GPUs",
                at("parallel.pcp"),
                p.pcp
            ));
        }
        if p.tp > target.gpus_per_node {
            return Err(format!(
                "{}: {} exceeds a node's {} GPUs; the chart's pods hold whole tensor-parallel groups",
                at("parallel.tp"),
                p.tp,
                target.gpus_per_node
            ));
        }
        let local = if p.dp_local > 0 { p.dp_local } else { p.dp };
        if p.tp * local > target.gpus_per_node {
            return Err(format!(
                "{}: {} data-parallel ranks of {} GPUs do not fit one node of {}; state dp_local, the ranks a node holds",
                at("parallel"),
                local,
                p.tp,
                target.gpus_per_node
            ));
        }
        let workers = p.dp / local.max(1);
        multinode |= workers > 1;
        let gpus_per_replica = p.tp * p.dp;
        let pool_gpus = pool.nodes * target.gpus_per_node;
        let replicas = pool_gpus / gpus_per_replica.max(1);
        let ServeArgs { args, env } = vllm_serve::serve_args(d, *i)?;
        let mut parallelism = vec![("tensor", Value::from(p.tp)), ("data", Value::from(p.dp))];
        if p.dp_local > 0 {
            parallelism.push(("dataLocal", Value::from(p.dp_local)));
        }
        parallelism.push(("workers", Value::from(workers)));
        let mut container = vec![
            ("name", Value::from("vllm")),
            ("image", Value::from(target.image.as_str())),
            ("modelCommand", Value::from("vllmServe")),
            (
                "args",
                Value::Sequence(args.into_iter().map(Value::from).collect()),
            ),
        ];
        if !env.is_empty() {
            container.push((
                "env",
                Value::Sequence(
                    env.into_iter()
                        .map(|(k, v)| map(vec![("name", k.into()), ("value", v.into())]))
                        .collect(),
                ),
            ));
        }
        container.push(("mountModelVolume", Value::from(true)));
        roles.push((
            section,
            map(vec![
                ("create", Value::from(true)),
                ("replicas", Value::from(replicas)),
                ("parallelism", map(parallelism)),
                ("containers", Value::Sequence(vec![map(container)])),
            ]),
        ));
    }
    if !sections.iter().any(|(s, _)| *s == "prefill") {
        roles.push((
            "prefill",
            map(vec![("create", false.into()), ("replicas", 0.into())]),
        ));
    }
    let pd = sections.iter().any(|(s, _)| *s == "prefill");
    let mut label_map = Mapping::new();
    for (k, v) in &labels {
        label_map.insert(k.as_str().into(), v.as_str().into());
    }
    let mut entries = vec![
        ("fullnameOverride", Value::from(d.name.as_str())),
        ("multinode", Value::from(multinode)),
        (
            "modelArtifacts",
            map(vec![
                ("uri", format!("hf://{}", target.model).into()),
                ("name", target.model.as_str().into()),
                ("labels", Value::Mapping(label_map)),
            ]),
        ),
        (
            "routing",
            map(vec![
                ("servicePort", 8000.into()),
                (
                    "proxy",
                    if pd {
                        // The routing sidecar on decode pods runs the P/D
                        // protocol (`connector_nixlv2.go` in llm-d's
                        // inference scheduler).
                        map(vec![
                            ("enabled", true.into()),
                            (
                                "image",
                                "ghcr.io/llm-d/llm-d-routing-sidecar:v0.4.0-rc.1".into(),
                            ),
                            ("connector", "nixlv2".into()),
                        ])
                    } else {
                        map(vec![("enabled", false.into())])
                    },
                ),
            ]),
        ),
    ];
    entries.extend(roles);
    let yaml = serde_yaml::to_string(&map(entries)).map_err(|e| e.to_string())?;
    Ok(format!(
        "# Helm values for llm-d's model-service chart (llm-d-modelservice), written by\n# `pdsim export` from the Deployment `{}`: `helm install ms-{} llm-d-modelservice/llm-d-modelservice -f ms-values.yaml`.\n# The chart renders the parallel widths into `vllm serve` and requests dataLocal x tensor GPUs per pod.\n{yaml}",
        d.name, d.name
    ))
}

/// What the chart's values give back: the deployment's name, its pools,
/// and its offload and P/D blocks.
pub type Read = (
    String,
    Vec<Pool>,
    Option<crate::deployment::Offload>,
    Option<crate::deployment::PdTransfer>,
);

/// The Deployment's pools (and its offload and P/D blocks) read back from
/// the chart's values on a cluster of `gpus_per_node` GPUs a node.
pub fn read(text: &str, gpus_per_node: i64) -> Result<Read, String> {
    let v: Value = serde_yaml::from_str(text).map_err(|e| e.to_string())?;
    let name = v
        .get("fullnameOverride")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or("imported")
        .to_string();
    let mut labels: BTreeMap<String, String> = BTreeMap::new();
    if let Some(Value::Mapping(m)) = v.get("modelArtifacts").and_then(|a| a.get("labels")) {
        for (k, val) in m {
            let (Some(k), Some(val)) = (k.as_str(), scalar(val)) else {
                return Err("modelArtifacts.labels: every label is a string".into());
            };
            labels.insert(k.to_string(), val);
        }
    }
    let created = |section: &str| -> bool {
        v.get(section).is_some_and(|s| {
            s.get("create").and_then(Value::as_bool).unwrap_or(true)
                && s.get("replicas").and_then(Value::as_i64).unwrap_or(1) > 0
        })
    };
    let pd = created("prefill");
    let mut pools = Vec::new();
    let mut reads = Vec::new();
    for section in ["prefill", "decode"] {
        if !created(section) {
            continue;
        }
        let s = &v[section];
        let at = |k: &str| format!("{section}.{k}");
        let replicas = s.get("replicas").and_then(Value::as_i64).unwrap_or(1);
        let par = s.get("parallelism");
        let get = |k: &str| par.and_then(|p| p.get(k)).and_then(Value::as_i64);
        let tp = get("tensor").unwrap_or(1);
        let workers = get("workers");
        let data_local = get("dataLocal");
        // The chart's own defaults (`dataParallelism`,
        // `dataLocalParallelism` in `_helpers.tpl`).
        let dp = get("data")
            .or_else(|| data_local.zip(workers).map(|(l, w)| l.saturating_mul(w)))
            .or(data_local)
            .unwrap_or(1);
        let dp_local = data_local.unwrap_or(0);
        let container = s
            .get("containers")
            .and_then(Value::as_sequence)
            .and_then(|c| {
                c.iter()
                    .find(|c| c.get("name").and_then(Value::as_str).unwrap_or("vllm") == "vllm")
            })
            .ok_or_else(|| format!("{}: no `vllm` container", at("containers")))?;
        let command = container
            .get("modelCommand")
            .and_then(Value::as_str)
            .unwrap_or("custom");
        if command != "vllmServe" && command != "imageDefault" {
            return Err(format!(
                "{}: `{command}` — only vllmServe and imageDefault (the chart builds `vllm serve`) are read",
                at("containers[vllm].modelCommand")
            ));
        }
        let args: Vec<String> = container
            .get("args")
            .and_then(Value::as_sequence)
            .map(|a| a.iter().filter_map(scalar).collect())
            .unwrap_or_default();
        let env: Vec<(String, String)> = container
            .get("env")
            .and_then(Value::as_sequence)
            .map(|list| {
                list.iter()
                    .filter_map(|e| {
                        Some((
                            e.get("name")?.as_str()?.to_string(),
                            e.get("value").and_then(scalar)?,
                        ))
                    })
                    .collect()
            })
            .unwrap_or_default();
        let read = vllm_serve::read_args(&args, &env)
            .map_err(|e| format!("{}: {e}", at("containers[vllm].args")))?;
        let gpus = replicas
            .checked_mul(tp)
            .and_then(|g| g.checked_mul(dp))
            .and_then(|g| g.checked_mul(read.pp.unwrap_or(1).max(1)))
            .filter(|g| *g > 0)
            .ok_or_else(|| {
                format!(
                    "{section}: {replicas} replicas of tensor {tp} × data {dp} is not a positive number of GPUs pdsim can lay out"
                )
            })?;
        if gpus_per_node < 1 || gpus % gpus_per_node != 0 {
            return Err(format!(
                "{section}: {replicas} replicas of {} GPUs do not fill whole nodes of {gpus_per_node} GPUs",
                tp * dp
            ));
        }
        let role = match (section, pd) {
            ("prefill", _) => "prefill",
            (_, true) => "decode",
            _ => "colocated",
        };
        let mut pool = vllm_serve::pool(role, gpus / gpus_per_node, tp, dp, dp_local, &read);
        pool.labels = labels.clone();
        pools.push(pool);
        reads.push(read);
    }
    if pools.is_empty() {
        return Err("neither decode nor prefill creates any replica".into());
    }
    let (offload, pd_transfer) = vllm_serve::shared_blocks(&reads)?;
    Ok((name, pools, offload, pd_transfer))
}

fn scalar(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in the shape of llm-d's pd-disaggregation guide
    /// (`guides/pd-disaggregation/ms-pd/values.yaml`): the chart's
    /// parallelism, `vllm serve` flags as list entries, flags that change
    /// nothing simulated.
    const GUIDE: &str = r#"
multinode: false
modelArtifacts:
  uri: "hf://openai/gpt-oss-120b"
  name: "openai/gpt-oss-120b"
  labels:
    llm-d.ai/inferenceServing: "true"
routing:
  servicePort: 8000
decode:
  create: true
  replicas: 1
  parallelism:
    tensor: 4
  containers:
    - name: "vllm"
      modelCommand: vllmServe
      args:
        - "--block-size"
        - "128"
        - "--kv-transfer-config"
        - '{"kv_connector":"NixlConnector", "kv_role":"kv_both"}'
        - "--disable-uvicorn-access-log"
        - "--max-model-len"
        - "4096"
prefill:
  create: true
  replicas: 2
  parallelism:
    tensor: 1
  containers:
    - name: "vllm"
      modelCommand: vllmServe
      args:
        - "--block-size"
        - "128"
        - "--kv-transfer-config"
        - '{"kv_connector":"NixlConnector", "kv_role":"kv_both"}'
        - "--gpu-memory-utilization"
        - "0.95"
"#;

    #[test]
    fn a_guide_shaped_values_file_reads_into_pools() {
        // On 4-GPU nodes: 1 decode replica of TP 4 is one node, 2 prefill
        // replicas of TP 1 half a node: refused, not rounded.
        let err = read(GUIDE, 4).unwrap_err();
        assert!(err.contains("do not fill whole nodes"), "{err}");
        let (name, pools, offload, pd) = read(GUIDE, 2).unwrap();
        assert_eq!(name, "imported");
        assert_eq!(pools.len(), 2);
        assert_eq!((pools[0].role.as_str(), pools[0].nodes), ("prefill", 1));
        assert_eq!((pools[1].role.as_str(), pools[1].nodes), ("decode", 2));
        assert_eq!(pools[1].parallel.tp, 4);
        assert_eq!(pools[0].engine.gpu_memory_utilization, Some(0.95));
        assert_eq!(pools[1].engine.block_size, Some(128));
        assert_eq!(
            pools[1].engine.max_model_len,
            Some(crate::quantity::MaxModelLen::Tokens(4096))
        );
        assert_eq!(offload, None);
        assert_eq!(
            pd.and_then(|p| p.connector).as_deref(),
            Some("NixlConnector")
        );
        assert_eq!(
            pools[0].labels.get(SERVING_LABEL.0).map(String::as_str),
            Some("true")
        );
    }

    fn pool(role: &str, nodes: i64, tp: i64, dp: i64, dp_local: i64) -> Pool {
        Pool {
            role: role.into(),
            nodes,
            parallel: crate::deployment::Parallel {
                tp,
                pp: 1,
                dp,
                dp_local,
                data_parallel_load_balancing: None,
                pcp: 0,
                dcp: 0,
                enable_expert_parallel: false,
            },
            engine: Default::default(),
            labels: Default::default(),
        }
    }

    fn deployment(pools: Vec<Pool>) -> Deployment {
        Deployment {
            kind: "Deployment".into(),
            name: "d".into(),
            pools,
            offload: None,
            pd_transfer: None,
            router: None,
        }
    }

    fn target() -> Target {
        Target {
            gpus_per_node: 8,
            model: "org/model".into(),
            image: "vllm/vllm-openai:v0.31.0".into(),
        }
    }

    fn yaml(text: &str) -> Value {
        serde_yaml::from_str(text).unwrap()
    }

    #[test]
    fn replicas_workers_and_roles_follow_the_chart() {
        // Colocated, 3 nodes of TP 2 × DP 2 (dp_local 2): 12 replicas of 2
        // GPUs... of 4 GPUs each, two a node; the decode section, prefill off,
        // no sidecar.
        let d = deployment(vec![pool("colocated", 3, 2, 2, 2)]);
        let v = yaml(&values(&d, &target()).unwrap());
        assert_eq!(v["decode"]["replicas"].as_i64(), Some(6));
        assert_eq!(v["decode"]["parallelism"]["workers"].as_i64(), Some(1));
        assert_eq!(v["decode"]["parallelism"]["dataLocal"].as_i64(), Some(2));
        assert_eq!(v["prefill"]["create"].as_bool(), Some(false));
        assert_eq!(v["routing"]["proxy"]["enabled"].as_bool(), Some(false));
        assert_eq!(v["multinode"].as_bool(), Some(false));
        assert_eq!(v["fullnameOverride"].as_str(), Some("d"));
        // P/D, decode DP 16 over two nodes (dp_local 8): a LeaderWorkerSet of
        // two workers a replica; the sidecar on.
        let d = deployment(vec![
            pool("prefill", 1, 8, 1, 0),
            pool("decode", 4, 1, 16, 8),
        ]);
        let v = yaml(&values(&d, &target()).unwrap());
        assert_eq!(v["multinode"].as_bool(), Some(true));
        assert_eq!(v["decode"]["parallelism"]["workers"].as_i64(), Some(2));
        assert_eq!(v["decode"]["replicas"].as_i64(), Some(2));
        assert_eq!(v["prefill"]["replicas"].as_i64(), Some(1));
        assert!(v["prefill"]["parallelism"].get("dataLocal").is_none());
        assert_eq!(v["routing"]["proxy"]["enabled"].as_bool(), Some(true));
        // And back: the same pools.
        let (name, pools, _, _) = read(&values(&d, &target()).unwrap(), 8).unwrap();
        assert_eq!(name, "d");
        let shape: Vec<(String, i64, i64, i64, i64)> = pools
            .iter()
            .map(|p| {
                (
                    p.role.clone(),
                    p.nodes,
                    p.parallel.tp,
                    p.parallel.dp,
                    p.parallel.dp_local,
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("prefill".to_string(), 1, 8, 1, 0),
                ("decode".to_string(), 4, 1, 16, 8)
            ]
        );
    }

    #[test]
    fn layouts_a_pod_cannot_hold_are_refused() {
        let mut pcp = pool("colocated", 1, 2, 1, 0);
        pcp.parallel.pcp = 2;
        assert!(
            values(&deployment(vec![pcp]), &target())
                .unwrap_err()
                .contains("prefill-context")
        );
        let wide = pool("colocated", 2, 16, 1, 0);
        assert!(
            values(&deployment(vec![wide]), &target())
                .unwrap_err()
                .contains("exceeds a node's 8 GPUs")
        );
        // DP 16 of TP 1 without dp_local: one pod would need 16 GPUs.
        let unstated = pool("colocated", 2, 1, 16, 0);
        assert!(
            values(&deployment(vec![unstated]), &target())
                .unwrap_err()
                .contains("state dp_local")
        );
        // Exactly a node: allowed.
        assert!(values(&deployment(vec![pool("colocated", 1, 8, 1, 0)]), &target()).is_ok());
        assert!(values(&deployment(vec![pool("colocated", 1, 1, 8, 0)]), &target()).is_ok());
        let two = deployment(vec![
            pool("colocated", 1, 8, 1, 0),
            pool("prefill", 1, 8, 1, 0),
        ]);
        assert!(
            values(&two, &target())
                .unwrap_err()
                .contains("colocated pool beside")
        );
    }

    #[test]
    fn the_edges_of_values_and_reading() {
        // A prefill-context width of 1 is off, so a pod holds its ranks.
        let mut one = pool("colocated", 1, 8, 1, 0);
        one.parallel.pcp = 1;
        assert!(values(&deployment(vec![one]), &target()).is_ok());
        // No environment, no `env` key; the Rust frontend sets one.
        let mut d = deployment(vec![pool("colocated", 1, 8, 1, 0)]);
        let v = yaml(&values(&d, &target()).unwrap());
        assert!(v["decode"]["containers"][0].get("env").is_none());
        d.pools[0].engine.frontend = Some("rust".into());
        let v = yaml(&values(&d, &target()).unwrap());
        assert_eq!(
            v["decode"]["containers"][0]["env"][0]["value"].as_str(),
            Some("1")
        );
        // A section with `create: false`, or with no replicas, is absent.
        let off = GUIDE.replacen("prefill:\n  create: true", "prefill:\n  create: false", 1);
        assert_eq!(read(&off, 2).unwrap().1[0].role, "colocated");
        let none = GUIDE.replacen("replicas: 2", "replicas: 0", 1);
        assert_eq!(read(&none, 2).unwrap().1.len(), 1);
        // One-GPU nodes; arguments written as YAML numbers.
        assert_eq!(read(GUIDE, 1).unwrap().1[0].nodes, 2);
        let numbers = GUIDE.replace("- \"128\"", "- 128");
        assert_eq!(read(&numbers, 2).unwrap().1[0].engine.block_size, Some(128));
    }

    #[test]
    fn what_the_reader_cannot_take_is_named() {
        let custom = GUIDE.replacen("modelCommand: vllmServe", "modelCommand: custom", 1);
        assert!(read(&custom, 2).unwrap_err().contains("`custom`"));
        let image = GUIDE.replacen("modelCommand: vllmServe", "modelCommand: imageDefault", 1);
        assert!(read(&image, 2).is_ok());
        let zero = GUIDE.replacen("tensor: 4", "tensor: 0", 1);
        assert!(
            read(&zero, 2)
                .unwrap_err()
                .contains("not a positive number of GPUs")
        );
        let named = format!("fullnameOverride: ''\n{GUIDE}");
        assert_eq!(read(&named, 2).unwrap().0, "imported");
        let named = format!("fullnameOverride: mine\n{GUIDE}");
        assert_eq!(read(&named, 2).unwrap().0, "mine");
    }

    #[test]
    fn absurd_replicas_or_widths_are_refused_not_overflowed() {
        let huge = GUIDE.replace("replicas: 1\n", "replicas: 9223372036854775807\n");
        assert!(
            read(&huge, 2)
                .unwrap_err()
                .contains("not a positive number of GPUs")
        );
        let negative = GUIDE.replace("tensor: 4", "tensor: -4");
        assert!(
            read(&negative, 2)
                .unwrap_err()
                .contains("not a positive number of GPUs")
        );
    }

    #[test]
    fn two_pools_of_one_role_or_differing_labels_are_refused() {
        let pool = |role: &str| Pool {
            role: role.into(),
            nodes: 1,
            parallel: crate::deployment::Parallel {
                tp: 8,
                pp: 1,
                dp: 1,
                dp_local: 0,
                data_parallel_load_balancing: None,
                pcp: 0,
                dcp: 0,
                enable_expert_parallel: false,
            },
            engine: Default::default(),
            labels: Default::default(),
        };
        let target = Target {
            gpus_per_node: 8,
            model: "org/model".into(),
            image: "vllm/vllm-openai:v0.31.0".into(),
        };
        let mut d = Deployment {
            kind: "Deployment".into(),
            name: "d".into(),
            pools: vec![pool("prefill"), pool("decode"), pool("decode")],
            offload: None,
            pd_transfer: None,
            router: None,
        };
        assert!(
            values(&d, &target)
                .unwrap_err()
                .contains("one `decode` section")
        );
        d.pools.pop();
        d.pools[1].labels.insert("tier".into(), "fast".into());
        assert!(values(&d, &target).unwrap_err().contains("labels differ"));
        d.pools[1].labels.clear();
        let text = values(&d, &target).unwrap();
        // One pod a replica of TP 8 on 8-GPU nodes: one replica a node.
        let (_, pools, _, _) = read(&text, 8).unwrap();
        assert_eq!(
            pools
                .iter()
                .map(|p| (p.role.as_str(), p.nodes))
                .collect::<Vec<_>>(),
            [("prefill", 1), ("decode", 1)]
        );
    }
}
