//! header-label-affinity-scorer (`scheduling/scorer/headerlabelaffinity/
//! plugin.go`): 1 for an endpoint whose label `labelKey` equals the
//! request's `headerName` header, 0 for every other, and 0 everywhere for
//! a request without the header (pdsim's workloads send no headers, so in
//! a run it scores 0 everywhere, as the EPP scores such a request).

use super::Scorer;
use crate::config::Plugin;
use crate::plugins::Checks;
use crate::plugins::Cycle;
use serde_yaml::Value;

#[derive(Clone, Debug)]
pub(crate) struct HeaderLabelAffinityScorer {
    /// `headerName`, lower-cased as the factory stores it (request header
    /// names are lower-case in the EPP).
    header: String,
    label: String,
}

impl HeaderLabelAffinityScorer {
    pub fn new(plugin: &Plugin) -> HeaderLabelAffinityScorer {
        let get = |key: &str| {
            plugin
                .parameters
                .get(key)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        HeaderLabelAffinityScorer {
            header: get("headerName").to_lowercase(),
            label: get("labelKey"),
        }
    }
}

impl Scorer for HeaderLabelAffinityScorer {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        let requested = cycle
            .request
            .headers
            .get(&self.header)
            .map_or("", String::as_str);
        out.extend(candidates.iter().map(|c| {
            let label = cycle.labels[*c].get(&self.label).map(String::as_str);
            if !requested.is_empty() && label.unwrap_or("") == requested {
                1.0
            } else {
                0.0
            }
        }));
    }
}

/// `headerlabelaffinity.Factory`: both parameters required.
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    for key in ["headerName", "labelKey"] {
        if parameters
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            c.bad(
                key,
                format!("header-label-affinity-scorer {key} is required"),
            );
        }
    }
}
