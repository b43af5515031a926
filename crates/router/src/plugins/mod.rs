//! The plugins the simulated EPP runs, laid out as llm-d-router lays out
//! `pkg/epp/framework/plugins/` (at `ebab687`): one module per plugin, under
//! the folder of its kind. Each plugin is a type implementing its kind's
//! trait, built once at load from its decoded parameters (the EPP's
//! defaults applied there, citing the Go file), so the scheduling cycle
//! runs instances and looks nothing up by name or by parameter key per
//! request.
//!
//! Modules so far: the scheduling plugins (`scheduling/`: scorers, filters,
//! pickers, profile handlers and their deciders), the data producers
//! (`requestcontrol/dataproducer/`) and the topology extractor
//! (`datalayer/`). The admission and saturation plugins
//! and the flow-control policies are still in [`crate::flowcontrol`], and
//! the loader's checks in [`crate::config`].

pub(crate) mod datalayer;
pub mod flowcontrol;
pub(crate) mod requestcontrol;
pub(crate) mod scheduling;

use crate::config::Plugin;
use crate::cycle::{EndpointView, RequestContext};
use crate::plugins::requestcontrol::dataproducer::inflightload::InFlightLoad;
use serde_yaml::Value;
use std::collections::BTreeMap;

/// What a plugin may read of the configuration and the cluster when it is
/// built: the configured plugins (one may consume what another produces),
/// the endpoints' labels, and the scheduling profiles' names in order (a
/// plugin naming a profile resolves it to its index once, here).
pub(crate) struct Build<'a> {
    pub plugins: &'a [Plugin],
    pub labels: &'a [BTreeMap<String, String>],
    pub profiles: &'a [String],
}

/// A `PrefixCacheMatchInfo` as a consumer reads it: matched blocks per
/// endpoint, the request's total blocks, and the block size in tokens.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MatchInfo<'a> {
    pub matches: &'a [u32],
    pub total: u32,
    pub block_size: u32,
}

impl MatchInfo<'_> {
    /// Tokens of a prompt of `prompt_tokens` an endpoint's index lacks: the
    /// unmatched blocks plus the tail past the last full block
    /// (`inflightload`, R).
    pub fn uncached_tokens(&self, endpoint: usize, prompt_tokens: u64) -> u64 {
        let indexed = self.total as u64 * self.block_size as u64;
        let tail = prompt_tokens.saturating_sub(indexed);
        (self.total - self.matches[endpoint].min(self.total)) as u64 * self.block_size as u64 + tail
    }
}

/// Which producer's `PrefixCacheMatchInfo` a consumer reads, fixed at load:
/// the precise or the burst producer's when its
/// `prefixMatchInfoProducerName` names it (or it is the legacy precise
/// scorer), else the approx producer's under the default key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PrefixSource {
    Approx,
    Precise,
    Burst,
}

/// What a plugin reads of the scheduling cycle in progress: the request,
/// the endpoints' last scraped metrics and their labels, and what the data
/// producers produced for this request.
pub(crate) struct Cycle<'a, 'r> {
    pub endpoints: &'a [EndpointView],
    pub labels: &'a [BTreeMap<String, String>],
    pub request: &'a RequestContext<'r>,
    /// Endpoint ids as the EPP names endpoints (`namespace/name`).
    pub ids: &'a [String],
    pub prompt_tokens: u64,
    pub approx: MatchInfo<'a>,
    /// Present when the configuration runs a precise producer.
    pub precise: Option<MatchInfo<'a>>,
    /// Present when the configuration runs a burst producer.
    pub burst: Option<MatchInfo<'a>>,
    /// The inflight-load-producer's (requests, tokens) per endpoint, when a
    /// plugin consumes them.
    pub inflight: Option<&'a InFlightLoad>,
    /// Whose match info the inflight-load-producer reads for the uncached
    /// part of a prompt.
    pub load_source: PrefixSource,
    /// The endpoint an earlier profile of this request picked, as the
    /// disagg handler publishes it (`PeerEndpointAttributeKey`) for the
    /// profile running now: the decode pick for the prefill profile, or
    /// the prefill pick for the decode profile in prefill-first order.
    pub peer: Option<usize>,
    /// The director skipped the producers for this request (the burst
    /// producer's batch was full): their attributes are missing, which
    /// some readers treat otherwise than an empty match.
    pub producers_skipped: bool,
}

impl Cycle<'_, '_> {
    pub fn match_info(&self, source: PrefixSource) -> MatchInfo<'_> {
        match (source, self.precise, self.burst) {
            (PrefixSource::Precise, Some(precise), _) => precise,
            (PrefixSource::Burst, _, Some(burst)) => burst,
            _ => self.approx,
        }
    }

    /// The `UncachedRequestTokens` the inflight-load-producer's `Produce`
    /// gives this request on an endpoint: the prompt tokens its index
    /// lacks, by the match info the producer reads; none when the
    /// producers were skipped (the attribute is missing, and token-load
    /// adds nothing, `tokenload/token_load.go`).
    pub fn uncached_tokens(&self, endpoint: usize) -> u64 {
        if self.producers_skipped {
            return 0;
        }
        self.match_info(self.load_source)
            .uncached_tokens(endpoint, self.prompt_tokens)
    }

    /// The request's context length for context-length-aware: the token
    /// count of the tokenized prompt (`getContextLength` in
    /// `scorer/contextlengthaware/context_length_aware.go`), which the
    /// loader only lets a real tokenizer (`vllm` or UDS) produce, so it is
    /// the prompt's tokens.
    pub fn context_length(&self) -> i64 {
        i64::try_from(self.prompt_tokens).unwrap_or(i64::MAX)
    }

    /// In-flight requests of an endpoint (0 without the producer).
    pub fn inflight_requests(&self, endpoint: usize) -> u64 {
        self.inflight.map_or(0, |l| l.requests[endpoint])
    }

    /// In-flight tokens of an endpoint (0 without the producer).
    pub fn inflight_tokens(&self, endpoint: usize) -> u64 {
        self.inflight.map_or(0, |l| l.tokens[endpoint])
    }
}

/// What a plugin module's load-time checks (`check`, the plugin factory's
/// own) report to: each problem by its key path under the plugin's
/// `parameters`, a problem code and the message; the loader locates it
/// (file, line, key path) and names the plugin's type.
pub(crate) struct Checks<'a> {
    report: &'a mut dyn FnMut(&str, &'static str, String),
}

impl<'a> Checks<'a> {
    pub fn new(report: &'a mut dyn FnMut(&str, &'static str, String)) -> Checks<'a> {
        Checks { report }
    }

    pub fn problem(&mut self, key: &str, code: &'static str, message: impl Into<String>) {
        (self.report)(key, code, message.into());
    }

    /// A value the plugin's factory refuses.
    pub fn bad(&mut self, key: &str, message: impl Into<String>) {
        self.problem(key, "epp-plugin-parameter", message);
    }

    /// A value the factory takes that pdsim does not simulate.
    pub fn not_simulated(&mut self, key: &str, message: impl Into<String>) {
        self.problem(key, "epp-not-simulated", message);
    }
}

/// A parameter as a number, whatever its JSON number type (the loader
/// checks the Go type apart).
pub(crate) fn number(parameters: &serde_yaml::Mapping, key: &str) -> Option<f64> {
    parameters.get(key).and_then(Value::as_f64)
}

/// A numeric parameter as the loader has checked it (its Go field's type),
/// read once at build.
pub(crate) fn param_f64(p: &Plugin, key: &str) -> Option<f64> {
    p.parameters.get(key).and_then(Value::as_f64)
}

/// A nested block decoded strictly: a mapping whose keys are all in `keys`.
pub(crate) fn strict_block(c: &mut Checks<'_>, key: &str, value: &Value, keys: &[&str]) -> bool {
    let Some(map) = value.as_mapping() else {
        c.bad(key, format!("`{key}` must be a mapping"));
        return false;
    };
    let mut ok = true;
    for k in map.keys() {
        let k = k.as_str().unwrap_or("?");
        if !keys.contains(&k) {
            c.bad(
                &format!("{key}.{k}"),
                format!(
                    "`{k}` is not a field of `{key}` (parameters are decoded strictly; it takes {})",
                    keys.join(", ")
                ),
            );
            ok = false;
        }
    }
    ok
}
