//! context-length-aware as a filter (`Filter` in
//! `scheduling/scorer/contextlengthaware/context_length_aware.go`).

use super::Filter;
use crate::config::Plugin;
use crate::plugins::Cycle;
use crate::plugins::scheduling::scorer::contextlengthaware::{context_label, parse_context_range};
use pdsim_core::Stream;
use serde_yaml::Value;

/// Only with `enableFiltering` (default false): keep unlabelled endpoints
/// and those whose range holds the request's length; drop unparsable
/// labels.
#[derive(Clone, Debug)]
pub(crate) struct ContextLengthAwareFilter {
    label: String,
    enabled: bool,
}

impl ContextLengthAwareFilter {
    pub fn new(plugin: &Plugin) -> ContextLengthAwareFilter {
        ContextLengthAwareFilter {
            label: context_label(plugin).to_string(),
            enabled: plugin
                .parameters
                .get("enableFiltering")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }
    }
}

impl Filter for ContextLengthAwareFilter {
    fn filter(&mut self, cycle: &Cycle<'_, '_>, _rng: &mut Stream, candidates: &mut Vec<usize>) {
        if !self.enabled {
            return;
        }
        let l = cycle.context_length();
        candidates.retain(|e| match cycle.labels[*e].get(&self.label) {
            None => true,
            Some(text) => parse_context_range(text).is_some_and(|(lo, hi)| lo <= l && l <= hi),
        });
    }
}
