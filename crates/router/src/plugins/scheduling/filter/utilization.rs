//! utilization-filter (`scheduling/filter/utilization/filter.go`).

use super::Filter;
use crate::config::Plugin;
use crate::plugins::Checks;
use crate::plugins::Cycle;
use pdsim_core::Stream;
use serde_yaml::Value;

/// A utilization-filter metric (`scheduling/filter/utilization/filter.go`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum UtilMetric {
    /// The EPP's in-flight request count (InFlightLoad.Requests).
    ActiveRequests,
    /// `vllm:num_requests_running`.
    RunningRequests,
    /// `vllm:num_requests_waiting`.
    WaitingQueue,
    /// `vllm:kv_cache_usage_perc`, a fraction.
    KvCacheUtilization,
}

/// Keep the endpoints whose every capped metric is at most its `maxValue`
/// (a value above it drops the endpoint); when none is left and
/// `fallbackOnEmpty` is set, keep the candidates as given, else leave the
/// set empty (the profile then fails). Model-server metrics are the last
/// scrape's, stale or not (a never-scraped endpoint reads zero, as the EPP
/// reads missing metrics); the active count is the in-flight load
/// producer's request counter.
#[derive(Clone, Debug)]
pub(crate) struct UtilizationFilter {
    conditions: Vec<(UtilMetric, f64)>,
    fallback_on_empty: bool,
}

impl UtilizationFilter {
    /// From parameters the loader has validated (`NewUtilizationFilter`).
    pub fn new(plugin: &Plugin) -> UtilizationFilter {
        let p = &plugin.parameters;
        let conditions = p
            .get("conditions")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .filter_map(|c| {
                let metric = match c.get("metric").and_then(Value::as_str)? {
                    "active-requests" => UtilMetric::ActiveRequests,
                    "running-requests" => UtilMetric::RunningRequests,
                    "waiting-queue" => UtilMetric::WaitingQueue,
                    "kv-cache-utilization" => UtilMetric::KvCacheUtilization,
                    _ => return None,
                };
                Some((metric, c.get("maxValue").and_then(Value::as_f64)?))
            })
            .collect();
        UtilizationFilter {
            conditions,
            fallback_on_empty: p
                .get("fallbackOnEmpty")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    }
}

impl Filter for UtilizationFilter {
    fn filter(&mut self, cycle: &Cycle<'_, '_>, _rng: &mut Stream, candidates: &mut Vec<usize>) {
        let value = |e: usize, metric: UtilMetric| match metric {
            UtilMetric::ActiveRequests => cycle.inflight_requests(e) as f64,
            UtilMetric::RunningRequests => f64::from(cycle.endpoints[e].running),
            UtilMetric::WaitingQueue => f64::from(cycle.endpoints[e].waiting),
            UtilMetric::KvCacheUtilization => cycle.endpoints[e].kv_usage,
        };
        let kept: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|e| {
                self.conditions
                    .iter()
                    .all(|(metric, max)| value(*e, *metric) <= *max)
            })
            .collect();
        if kept.is_empty() && self.fallback_on_empty {
            return;
        }
        *candidates = kept;
    }
}

/// utilization-filter's parameters, decoded strictly (each condition too)
/// and validated as `NewUtilizationFilter` does: at least one condition;
/// each names a known metric and a `maxValue` that is present, not negative
/// and, for the KV-cache fraction, at most 1.
pub(crate) fn check(c: &mut Checks<'_>, p: &serde_yaml::Mapping) {
    let mut bad = |key: &str, message: String| c.bad(key, message);
    if let Some(v) = p.get("fallbackOnEmpty")
        && !(v.is_bool() || v.is_null())
    {
        bad(
            "fallbackOnEmpty",
            "fallbackOnEmpty must be a boolean".into(),
        );
    }
    if let Some(v) = p.get("inFlightLoadProducerName")
        && !(v.is_string() || v.is_null())
    {
        bad(
            "inFlightLoadProducerName",
            "inFlightLoadProducerName must be a string".into(),
        );
    }
    let conditions = match p.get("conditions") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Sequence(list)) => &list[..],
        Some(_) => {
            bad("conditions", "conditions must be a list".into());
            return;
        }
    };
    if conditions.is_empty() {
        bad(
            "conditions",
            "utilization filter requires at least one condition".into(),
        );
    }
    for (i, condition) in conditions.iter().enumerate() {
        let key = format!("conditions[{i}]");
        let Some(map) = condition.as_mapping() else {
            bad(
                &key,
                "a condition is a mapping with metric and maxValue".into(),
            );
            continue;
        };
        let mut strict = true;
        for k in map.keys() {
            let k = k.as_str().unwrap_or("?");
            if !["metric", "maxValue"].contains(&k) {
                bad(
                    &format!("{key}.{k}"),
                    format!(
                        "`{k}` is not a field of a condition (parameters are decoded strictly; it takes metric, maxValue)"
                    ),
                );
                strict = false;
            }
        }
        if !strict {
            continue;
        }
        let metric = match map.get("metric") {
            None | Some(Value::Null) => "",
            Some(Value::String(s)) => s.as_str(),
            Some(_) => {
                bad(&format!("{key}.metric"), "metric must be a string".into());
                continue;
            }
        };
        if !UTILIZATION_METRICS.contains(&metric) {
            bad(
                &format!("{key}.metric"),
                format!(
                    "utilization filter condition metric must be one of {}, got \"{metric}\"",
                    UTILIZATION_METRICS
                        .iter()
                        .map(|m| format!("\"{m}\""))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
            continue;
        }
        let max = match map.get("maxValue") {
            None | Some(Value::Null) => {
                bad(
                    &format!("{key}.maxValue"),
                    format!("utilization filter condition for \"{metric}\" requires maxValue"),
                );
                continue;
            }
            Some(v) => match v.as_f64() {
                Some(v) => v,
                None => {
                    bad(
                        &format!("{key}.maxValue"),
                        "maxValue must be a number".into(),
                    );
                    continue;
                }
            },
        };
        if max < 0.0 {
            bad(
                &format!("{key}.maxValue"),
                format!(
                    "utilization filter condition for \"{metric}\" requires a non-negative maxValue, got {max}"
                ),
            );
        } else if metric == "kv-cache-utilization" && max > 1.0 {
            bad(
                &format!("{key}.maxValue"),
                format!(
                    "utilization filter maxValue for \"kv-cache-utilization\" is a fraction and must be at most 1, got {max}"
                ),
            );
        }
    }
}

/// The metrics a utilization-filter condition may cap
/// (`scheduling/filter/utilization/filter.go`).
pub const UTILIZATION_METRICS: &[&str] = &[
    "active-requests",
    "running-requests",
    "waiting-queue",
    "kv-cache-utilization",
];
