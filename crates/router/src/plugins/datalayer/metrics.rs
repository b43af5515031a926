//! core-metrics-extractor (`datalayer/extractor/metrics/{factories,spec,
//! mapping,mapping_registry}.go`): which Prometheus series the EPP reads
//! each endpoint's waiting queue, running requests, KV-cache usage and
//! cache configuration from, by engine type. pdsim's engines are vLLM and
//! export vLLM's series, which the simulated scrape reads; a configuration
//! that maps pdsim's pods to other series (another engine's, labels that
//! select among series, other cache-info labels) would make the EPP read
//! something pdsim does not export, and is refused, never ignored.

use crate::plugins::Checks;
use regex::Regex;
use serde_yaml::{Mapping, Value};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// `DefaultEngineTypeLabelKey` (`mapping_registry.go`).
const ENGINE_LABEL_KEY: &str = "llm-d.ai/engine-type";
/// `DefaultEngineType`: the registry's name for the default mapping.
const DEFAULT_ENGINE_TYPE: &str = "default";
/// `defaultEngineName`.
const DEFAULT_ENGINE: &str = "vllm";

/// An engine's mapping as configured (`engineConfigParams`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct EngineConfig {
    name: String,
    queue: String,
    running: String,
    kv_usage: String,
    lora: String,
    cache_info: String,
    cache_block_size_label: String,
    cache_num_blocks_label: String,
    cache_block_size: String,
    cache_num_blocks: String,
}

/// `engineConfigParams`' JSON fields, in order.
const ENGINE_FIELDS: [&str; 11] = [
    "name",
    "queuedRequestsSpec",
    "runningRequestsSpec",
    "kvUsageSpec",
    "loraSpec",
    "cacheInfoSpec",
    "cacheBlockSizeLabelName",
    "cacheNumBlocksLabelName",
    "cacheBlockSizeSpec",
    "cacheNumBlocksSpec",
    "customMetrics",
];

impl EngineConfig {
    fn built_in(name: &str) -> Option<EngineConfig> {
        let e = |n: &str, q: &str, r: &str, kv: &str, lora: &str, info: &str| EngineConfig {
            name: n.into(),
            queue: q.into(),
            running: r.into(),
            kv_usage: kv.into(),
            lora: lora.into(),
            cache_info: info.into(),
            ..EngineConfig::default()
        };
        // `defaultEngineConfigs`, `pkg/epp/framework/plugins/datalayer/
        // extractor/metrics/factories.go` in llm-d-router.
        Some(match name {
            "vllm" => e(
                "vllm",
                "vllm:num_requests_waiting",
                "vllm:num_requests_running",
                "vllm:kv_cache_usage_perc",
                "vllm:lora_requests_info",
                "vllm:cache_config_info",
            ),
            "sglang" => EngineConfig {
                cache_block_size_label: "page_size".into(),
                cache_num_blocks_label: "num_pages".into(),
                ..e(
                    "sglang",
                    "sglang:num_queue_reqs",
                    "sglang:num_running_reqs",
                    "sglang:token_usage",
                    "",
                    "sglang:cache_config_info",
                )
            },
            "trtllm-serve" => EngineConfig {
                cache_block_size: "trtllm_kv_cache_tokens_per_block".into(),
                cache_num_blocks: "trtllm_kv_cache_max_blocks".into(),
                ..e(
                    "trtllm-serve",
                    "trtllm_num_requests_waiting",
                    "trtllm_num_requests_running",
                    "trtllm_kv_cache_utilization",
                    "",
                    "",
                )
            },
            "triton-tensorrt-llm" => EngineConfig {
                cache_block_size:
                    "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=tokens_per}".into(),
                cache_num_blocks: "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max}"
                    .into(),
                ..e(
                    "triton-tensorrt-llm",
                    "nv_trt_llm_request_metrics{request_type=waiting}",
                    "nv_trt_llm_request_metrics{request_type=scheduled}",
                    "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}",
                    "",
                    "",
                )
            },
            "triton" => e(
                "triton",
                "nv_inference_pending_request_count",
                "nv_inference_exec_count",
                "",
                "",
                "",
            ),
            _ => return None,
        })
    }

    fn from_value(v: &Value) -> EngineConfig {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        EngineConfig {
            name: s("name"),
            queue: s("queuedRequestsSpec"),
            running: s("runningRequestsSpec"),
            kv_usage: s("kvUsageSpec"),
            lora: s("loraSpec"),
            cache_info: s("cacheInfoSpec"),
            cache_block_size_label: s("cacheBlockSizeLabelName"),
            cache_num_blocks_label: s("cacheNumBlocksLabelName"),
            cache_block_size: s("cacheBlockSizeSpec"),
            cache_num_blocks: s("cacheNumBlocksSpec"),
        }
    }

    /// The specs and the field each is configured by.
    fn specs(&self) -> [(&'static str, &str); 7] {
        [
            ("queuedRequestsSpec", &self.queue),
            ("runningRequestsSpec", &self.running),
            ("kvUsageSpec", &self.kv_usage),
            ("loraSpec", &self.lora),
            ("cacheInfoSpec", &self.cache_info),
            ("cacheBlockSizeSpec", &self.cache_block_size),
            ("cacheNumBlocksSpec", &self.cache_num_blocks),
        ]
    }
}

fn regexes() -> &'static [Regex; 4] {
    static RES: OnceLock<[Regex; 4]> = OnceLock::new();
    RES.get_or_init(|| {
        // `spec.go`: metricSpecRE, labelPairRE, addQuotesRE; and
        // Prometheus' legacy metric-name rule (`model.LegacyValidation`).
        [
            r#"^\s*(\S+?)\s*(?:\{([^}]*)\})?\s*$"#,
            r#"^\s*(\S+?)\s*=\s*"([^"]*)"\s*$"#,
            r#"(\w+)\s*=\s*([^",}\s]+)"#,
            r#"^[a-zA-Z_:][a-zA-Z0-9_:]*$"#,
        ]
        .map(|re| Regex::new(re).expect("a valid pattern"))
    })
}

/// `parseStringToSpec`: a PromQL instant-vector selector, `name` or
/// `name{label=value,…}` (values quoted or not); empty is no spec.
fn parse_spec(spec: &str) -> Result<(), String> {
    if spec.is_empty() {
        return Ok(());
    }
    let [spec_re, pair_re, quote_re, name_re] = regexes();
    let quoted = quote_re.replace_all(spec, r#"$1="$2""#);
    let Some(m) = spec_re
        .captures(&quoted)
        .filter(|m| name_re.is_match(&m[1]))
    else {
        return Err(format!("not a valid metric specification: {spec:?}"));
    };
    if let Some(block) = m
        .get(2)
        .map(|b| b.as_str().trim())
        .filter(|b| !b.is_empty())
    {
        for pair in block.split(',') {
            let ok = pair_re.captures(pair).is_some_and(|lm| {
                let label = &lm[1];
                label.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
            if !ok {
                return Err(format!(
                    "invalid label pair {pair:?} in specification: {spec:?}"
                ));
            }
        }
    }
    Ok(())
}

/// `CoreMetricsExtractorFactory` and `newCoreMetricsExtractorPlugin`'s
/// checks, after the strict decode of `modelServerExtractorParams`.
pub(crate) fn check(c: &mut Checks<'_>, parameters: &Mapping) {
    let configs = match parameters.get("engineConfigs") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Sequence(items)) => items.as_slice(),
        Some(_) => {
            return c.problem(
                "engineConfigs",
                "wrong-type",
                "engineConfigs must be a list",
            );
        }
    };
    for (i, item) in configs.iter().enumerate() {
        let at = format!("engineConfigs[{i}]");
        let Some(map) = item.as_mapping() else {
            return c.problem(&at, "wrong-type", "an engine config must be a mapping");
        };
        for (key, value) in map {
            let key = key.as_str().unwrap_or("?");
            if !ENGINE_FIELDS.contains(&key) {
                return c.bad(
                    &format!("{at}.{key}"),
                    format!("`{key}` is not a field of an engine config (parameters are decoded strictly)"),
                );
            }
            let typed = match key {
                "customMetrics" => value.is_sequence() || value.is_null(),
                _ => value.is_string() || value.is_null(),
            };
            if !typed {
                return c.problem(
                    &format!("{at}.{key}"),
                    "wrong-type",
                    format!("{key} has the wrong type"),
                );
            }
        }
        let config = EngineConfig::from_value(item);
        if config.name.is_empty() {
            return c.bad(&format!("{at}.name"), "engine config name cannot be empty");
        }
        if config.name == DEFAULT_ENGINE_TYPE {
            return c.bad(
                &format!("{at}.name"),
                format!("engine config name cannot be {DEFAULT_ENGINE_TYPE:?} (reserved)"),
            );
        }
        if configs[..i]
            .iter()
            .any(|o| o.get("name").and_then(Value::as_str) == Some(config.name.as_str()))
        {
            return c.bad(
                &format!("{at}.name"),
                format!("failed to register engine mapping for {:?}", config.name),
            );
        }
        for (field, spec) in config.specs() {
            if let Err(e) = parse_spec(spec) {
                c.bad(
                    &format!("{at}.{field}"),
                    format!("failed to create mapping for engine {:?}: {e}", config.name),
                );
            }
        }
        let custom = item.get("customMetrics").and_then(Value::as_sequence);
        for (j, metric) in custom.into_iter().flatten().enumerate() {
            let here = format!("{at}.customMetrics[{j}]");
            let Some(m) = metric.as_mapping() else {
                return c.problem(&here, "wrong-type", "a custom metric must be a mapping");
            };
            if let Some(k) = m
                .keys()
                .filter_map(Value::as_str)
                .find(|k| !matches!(*k, "attributeKey" | "metricSpec"))
            {
                return c.bad(
                    &format!("{here}.{k}"),
                    format!("`{k}` is not a field of a custom metric"),
                );
            }
            let spec = metric
                .get("metricSpec")
                .and_then(Value::as_str)
                .unwrap_or("");
            let key = metric
                .get("attributeKey")
                .and_then(Value::as_str)
                .unwrap_or("");
            if let Err(e) = parse_spec(spec) {
                c.bad(
                    &format!("{here}.metricSpec"),
                    format!("custom metric {key:?}: {e}"),
                );
            }
        }
    }
    let default = default_engine(parameters);
    let known = |name: &str| {
        configs
            .iter()
            .any(|o| o.get("name").and_then(Value::as_str) == Some(name))
            || EngineConfig::built_in(name).is_some()
    };
    if !known(&default) {
        c.bad(
            "defaultEngine",
            format!("defaultEngine {default:?} not found in engineConfigs"),
        );
    }
}

fn default_engine(parameters: &Mapping) -> String {
    match parameters.get("defaultEngine").and_then(Value::as_str) {
        Some("") | None => DEFAULT_ENGINE.to_string(),
        Some(e) => e.to_string(),
    }
}

/// Why the extractor `parameters` configures would read something pdsim's
/// vLLM engines do not export from a pod with these `labels`, if it would:
/// the mapping of the pod's engine type (its `engineLabelKey` label, else
/// the default engine's) must read vLLM's own series, without label
/// selectors, and vLLM's cache-info labels.
pub(crate) fn mismatch(parameters: &Mapping, labels: &BTreeMap<String, String>) -> Option<String> {
    let label_key = match parameters.get("engineLabelKey").and_then(Value::as_str) {
        Some("") | None => ENGINE_LABEL_KEY,
        Some(k) => k,
    };
    let engine = labels
        .get(label_key)
        .cloned()
        .unwrap_or_else(|| default_engine(parameters));
    let configured = parameters
        .get("engineConfigs")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .find(|o| o.get("name").and_then(Value::as_str) == Some(engine.as_str()))
        .map(EngineConfig::from_value);
    let Some(mapping) = configured.or_else(|| EngineConfig::built_in(&engine)) else {
        return Some(format!(
            "its pods' engine type is {engine:?} (label `{label_key}`), for which the extractor has no mapping, so the EPP would read no metrics from them (`no mapping found for engine type`)"
        ));
    };
    let vllm = EngineConfig::built_in(DEFAULT_ENGINE).expect("vLLM's mapping");
    let read = [
        ("queuedRequestsSpec", &mapping.queue, &vllm.queue),
        ("runningRequestsSpec", &mapping.running, &vllm.running),
        ("kvUsageSpec", &mapping.kv_usage, &vllm.kv_usage),
        ("cacheInfoSpec", &mapping.cache_info, &vllm.cache_info),
        (
            "cacheBlockSizeLabelName",
            &mapping.cache_block_size_label,
            &vllm.cache_block_size_label,
        ),
        (
            "cacheNumBlocksLabelName",
            &mapping.cache_num_blocks_label,
            &vllm.cache_num_blocks_label,
        ),
        (
            "cacheBlockSizeSpec",
            &mapping.cache_block_size,
            &vllm.cache_block_size,
        ),
        (
            "cacheNumBlocksSpec",
            &mapping.cache_num_blocks,
            &vllm.cache_num_blocks,
        ),
    ];
    read.into_iter().find(|(_, got, want)| got != want).map(|(field, got, want)| {
        format!(
            "the mapping for its pods' engine type {engine:?} reads `{field}` as {got:?}, where pdsim's vLLM engines export {want:?}; pdsim simulates the EPP reading vLLM's own series"
        )
    })
}

/// A series pdsim's vLLM engines export, as the EPP's scrape reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Series {
    Waiting,
    Running,
    KvUsage,
}

impl Series {
    /// The series a custom metric's `metricSpec` names, if pdsim exports
    /// it: a bare vLLM gauge (a label selector would pick among series
    /// pdsim does not label).
    fn of_spec(spec: &str) -> Option<Series> {
        match spec.trim() {
            "vllm:num_requests_waiting" => Some(Series::Waiting),
            "vllm:num_requests_running" => Some(Series::Running),
            "vllm:kv_cache_usage_perc" => Some(Series::KvUsage),
            _ => None,
        }
    }

    /// The value the extractor stores for an endpoint (`ScalarMetricValue`),
    /// once a scrape has read it; before the first, the attribute is
    /// missing.
    pub fn read(self, view: &crate::cycle::EndpointView) -> Option<f64> {
        view.updated_ns?;
        Some(match self {
            Series::Waiting => f64::from(view.waiting),
            Series::Running => f64::from(view.running),
            Series::KvUsage => view.kv_usage,
        })
    }
}

/// The series behind the endpoint attribute a consumer names
/// (`attrmetrics.ResolveConfiguredKey`): a custom metric of the
/// core-metrics-extractor (no `producer`, or that type), looked up in the
/// engine config the pods' default engine names. `Ok(None)`: nothing
/// produces it, so it is missing on every endpoint; `Err`: the custom
/// metric reads a series pdsim's engines do not export.
pub(crate) fn custom_series(
    plugins: &[crate::config::Plugin],
    attribute: &str,
    producer: Option<&str>,
) -> Result<Option<Series>, String> {
    if producer.is_some_and(|p| p != "core-metrics-extractor") {
        return Ok(None);
    }
    let Some(extractor) = plugins
        .iter()
        .find(|p| p.plugin_type == "core-metrics-extractor")
    else {
        return Ok(None);
    };
    let engine = default_engine(&extractor.parameters);
    let metric = extractor
        .parameters
        .get("engineConfigs")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter(|c| c.get("name").and_then(Value::as_str) == Some(engine.as_str()))
        .filter_map(|c| c.get("customMetrics").and_then(Value::as_sequence))
        .flatten()
        .find(|m| m.get("attributeKey").and_then(Value::as_str) == Some(attribute));
    let Some(metric) = metric else {
        return Ok(None);
    };
    let spec = metric
        .get("metricSpec")
        .and_then(Value::as_str)
        .unwrap_or("");
    Series::of_spec(spec).map(Some).ok_or_else(|| {
        format!(
            "the custom metric {attribute:?} reads {spec:?}, which pdsim's vLLM engines do not export (they export vllm:num_requests_waiting, vllm:num_requests_running and vllm:kv_cache_usage_perc)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::{EngineConfig, Series, mismatch, parse_spec};
    use std::collections::BTreeMap;

    #[test]
    fn the_built_in_engines_name_their_cache_labels_as_the_epp_does() {
        // `defaultEngineConfigs` (`datalayer/extractor/metrics/
        // factories.go`): sglang's cache info carries `page_size`
        // and `num_pages`; vLLM's the default labels; TensorRT-LLM reads
        // block size and count from series of their own.
        let sglang = EngineConfig::built_in("sglang").unwrap();
        assert_eq!(
            (
                sglang.cache_block_size_label.as_str(),
                sglang.cache_num_blocks_label.as_str()
            ),
            ("page_size", "num_pages")
        );
        let vllm = EngineConfig::built_in("vllm").unwrap();
        assert_eq!(
            vllm.cache_block_size_label,
            EngineConfig::default().cache_block_size_label
        );
        assert_eq!(
            [
                vllm.name.as_str(),
                &vllm.queue,
                &vllm.running,
                &vllm.kv_usage,
                &vllm.lora,
                &vllm.cache_info
            ],
            [
                "vllm",
                "vllm:num_requests_waiting",
                "vllm:num_requests_running",
                "vllm:kv_cache_usage_perc",
                "vllm:lora_requests_info",
                "vllm:cache_config_info"
            ]
        );
        let triton = EngineConfig::built_in("triton-tensorrt-llm").unwrap();
        assert_eq!(
            triton.cache_block_size,
            "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=tokens_per}"
        );
        assert_eq!(
            triton.cache_num_blocks,
            "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max}"
        );
        let trt = EngineConfig::built_in("trtllm-serve").unwrap();
        assert_eq!(trt.cache_block_size, "trtllm_kv_cache_tokens_per_block");
        assert_eq!(trt.cache_num_blocks, "trtllm_kv_cache_max_blocks");
        assert!(EngineConfig::built_in("mine").is_none());
    }

    #[test]
    fn specs_parse_as_promql_selectors() {
        for ok in [
            "",
            "vllm:num_requests_waiting",
            " nv_trt_llm_request_metrics{request_type=waiting} ",
            "m{a=\"x\", b=y}",
        ] {
            assert_eq!(parse_spec(ok), Ok(()), "{ok}");
        }
        for bad in ["9metric", "m{a}", "m{1a=x}", "a b", "m{a=\"x\",}"] {
            assert!(parse_spec(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_a_mapping_that_reads_vllms_series_is_simulated() {
        let params = |text: &str| -> serde_yaml::Mapping { serde_yaml::from_str(text).unwrap() };
        let none = BTreeMap::new();
        // The defaults, or vLLM's mapping restated, read vLLM's series.
        assert_eq!(mismatch(&params("{}"), &none), None);
        let restated = params(
            "engineConfigs: [{name: vllm, queuedRequestsSpec: 'vllm:num_requests_waiting', runningRequestsSpec: 'vllm:num_requests_running', kvUsageSpec: 'vllm:kv_cache_usage_perc', cacheInfoSpec: 'vllm:cache_config_info'}]",
        );
        assert_eq!(mismatch(&restated, &none), None);
        // Another default engine, a remapped queue, a label selector.
        assert!(
            mismatch(&params("{defaultEngine: sglang}"), &none)
                .unwrap()
                .contains("sglang:num_queue_reqs")
        );
        let remapped = params(
            "engineConfigs: [{name: vllm, queuedRequestsSpec: 'vllm:num_requests_waiting{model_name=m}', runningRequestsSpec: 'vllm:num_requests_running', kvUsageSpec: 'vllm:kv_cache_usage_perc', cacheInfoSpec: 'vllm:cache_config_info'}]",
        );
        assert!(
            mismatch(&remapped, &none)
                .unwrap()
                .contains("queuedRequestsSpec")
        );
        // The pod's engine-type label picks the mapping; an unknown one
        // has none.
        let tagged = BTreeMap::from([(
            "llm-d.ai/engine-type".to_string(),
            "trtllm-serve".to_string(),
        )]);
        assert!(mismatch(&params("{}"), &tagged).unwrap().contains("trtllm"));
        let odd = BTreeMap::from([("llm-d.ai/engine-type".to_string(), "mine".to_string())]);
        assert!(
            mismatch(&params("{}"), &odd)
                .unwrap()
                .contains("no mapping")
        );
        // A custom label key.
        let keyed = BTreeMap::from([("engine".to_string(), "vllm".to_string())]);
        assert_eq!(
            mismatch(
                &params("{engineLabelKey: engine, defaultEngine: sglang}"),
                &keyed
            ),
            None
        );
    }

    #[test]
    fn a_custom_metric_reads_the_vllm_gauge_it_names() {
        // vLLM's gauges (`vllm/v1/metrics/loggers.py`): the waiting and
        // running request counts and the KV-cache usage, 0-1. Surrounding
        // spaces are trimmed; anything else is not exported by pdsim.
        let view = crate::cycle::EndpointView {
            waiting: 3,
            running: 7,
            kv_usage: 0.25,
            updated_ns: Some(1),
            ..Default::default()
        };
        for (spec, value) in [
            ("vllm:num_requests_waiting", 3.0),
            (" vllm:num_requests_running ", 7.0),
            ("vllm:kv_cache_usage_perc", 0.25),
        ] {
            let series = Series::of_spec(spec).unwrap_or_else(|| panic!("{spec}"));
            assert_eq!(series.read(&view), Some(value), "{spec}");
        }
        assert_eq!(Series::of_spec("vllm:num_preemptions_total"), None);
        // Before the first scrape the attribute is missing.
        let unscraped = crate::cycle::EndpointView::default();
        assert_eq!(Series::Running.read(&unscraped), None);
    }
}
