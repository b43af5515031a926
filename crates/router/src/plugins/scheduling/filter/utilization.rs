//! utilization-filter (`scheduling/filter/utilization/filter.go`).

use super::Filter;
use crate::config::Plugin;
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
