//! prefix-based-pd-decider
//! (`scheduling/profilehandler/disagg/prefix_based_pd_decider.go`).

use super::Decider;
use crate::config::Plugin;
use crate::plugins::{Checks, number};
use crate::plugins::{Cycle, param_f64};
use serde_yaml::Mapping;

/// `nonCachedTokens` 0 never disaggregates; a prompt under `promptTokens`
/// or under `nonCachedTokens` stays decode-only; else disaggregate when the
/// part the decode endpoint has not cached is at least `nonCachedTokens`.
/// The cached part is the approx producer's match on the decode target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PrefixBasedPdDecider {
    /// `nonCachedTokens`, default 0.
    non_cached: f64,
    /// `promptTokens`, default 0 (no minimum).
    prompt_min: f64,
}

impl PrefixBasedPdDecider {
    pub fn new(plugin: &Plugin) -> PrefixBasedPdDecider {
        PrefixBasedPdDecider {
            non_cached: param_f64(plugin, "nonCachedTokens").unwrap_or(0.0),
            prompt_min: param_f64(plugin, "promptTokens").unwrap_or(0.0),
        }
    }
}

impl Decider for PrefixBasedPdDecider {
    fn disaggregate(&self, cycle: &Cycle<'_, '_>, decode: usize) -> bool {
        // Without the approx producer's attribute the decider cannot read
        // the prefix cache state and keeps the request decode-only
        // (`unable to read prefix cache state`).
        if cycle.producers_skipped {
            return false;
        }
        let input = cycle.prompt_tokens as f64;
        let cached = cycle.approx.matches[decode] as f64 * cycle.approx.block_size as f64;
        self.non_cached > 0.0
            && !(self.prompt_min > 0.0 && input < self.prompt_min)
            && input >= self.non_cached
            && input - cached >= self.non_cached
    }
}

/// `NewPrefixBasedPDDecider`'s checks (`validate`).
pub(crate) fn check(c: &mut Checks<'_>, parameters: &Mapping) {
    if number(parameters, "nonCachedTokens").is_some_and(|v| v < 0.0) {
        c.bad("nonCachedTokens", "nonCachedTokens must not be negative");
    }
}
