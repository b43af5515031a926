//! `scheduling/util/sessionaffinity/`: what session-affinity-scorer and
//! session-affinity-filter share — the strategy (`header.go`,
//! `session_id.go`), the bindings of session ids to endpoints, and the
//! base64 endpoint tokens.

use crate::config::Plugin;
use crate::cycle::RequestContext;
use crate::plugins::Checks;
use serde_yaml::Value;
use std::collections::BTreeMap;

/// A session-affinity-scorer strategy (`scorer/sessionaffinity`).
#[derive(Clone, Debug)]
pub(crate) enum Strategy {
    /// `encoded_endpoint_header`: the header carries base64 of the
    /// endpoint's id, as the scorer wrote it on an earlier response.
    Encoded { header: String },
    /// `session_id`: an opaque id from the first non-empty source, bound
    /// server-side to the endpoint that served it. Attribute sources read
    /// a request attribute from an upstream producer; none that pdsim runs
    /// publishes one, so they never yield an id (`None` here).
    SessionId {
        sources: Vec<Option<String>>,
        ttl_ns: u64,
        sweep_ns: u64,
    },
}

/// Whose target a session binding records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BindTo {
    Primary,
    Named(Option<usize>),
}

/// One session-affinity-scorer instance.
#[derive(Clone, Debug)]
pub(crate) struct Session {
    pub(crate) strategy: Strategy,
    /// `profileName`: whose target a binding records, resolved to the
    /// profile's index; `Primary` when it names none (empty), `Named(None)`
    /// when it names a profile the configuration lacks (which never runs,
    /// so binds nothing).
    pub(crate) profile: BindTo,
    /// session id → (endpoint, last seen), for `session_id`.
    pub(crate) bindings: BTreeMap<String, (usize, u64)>,
    /// Whether the bound endpoint was among the candidates when the
    /// current request was scored (`boundPodPresence`).
    pub(crate) present: Option<bool>,
}

impl Session {
    /// The scorer's parameters with its defaults (`session_affinity.go`,
    /// `applyDefaults`; `util/sessionaffinity/{header,session_id}.go`):
    /// header `x-session-token`, or sources `[header: x-session-id]`, TTL
    /// 300 s swept every 10 s; header names lower-cased and trimmed
    /// (`NormalizeHeader`), since the EPP stores request headers so.
    pub(crate) fn new(plugin: &Plugin, profiles: &[String]) -> Session {
        let p = &plugin.parameters;
        let normalize = |name: Option<&str>, default: &str| {
            let name = name.unwrap_or("").trim().to_lowercase();
            if name.is_empty() {
                default.to_string()
            } else {
                name
            }
        };
        let strategy = if p.get("strategy").and_then(Value::as_str) == Some("session_id") {
            let block = p.get("sessionIdConfig");
            let mut sources: Vec<Option<String>> = block
                .and_then(|b| b.get("sources"))
                .and_then(Value::as_sequence)
                .into_iter()
                .flatten()
                .map(|source| {
                    source
                        .get("header")
                        .and_then(Value::as_str)
                        .filter(|h| !h.is_empty())
                        .map(|h| normalize(Some(h), "x-session-id"))
                })
                .collect();
            if sources.is_empty() {
                sources.push(Some("x-session-id".into()));
            }
            let seconds = |key: &str, default: f64| {
                let v = block
                    .and_then(|b| b.get(key))
                    .and_then(Value::as_f64)
                    .unwrap_or(0.0);
                let v = if v == 0.0 { default } else { v };
                (v * 1e9).clamp(1.0, 1e18) as u64
            };
            Strategy::SessionId {
                sources,
                ttl_ns: seconds("evictionTtlSeconds", 300.0),
                sweep_ns: seconds("evictionSweepSeconds", 10.0),
            }
        } else {
            Strategy::Encoded {
                header: normalize(
                    p.get("encodedEndpointHeaderConfig")
                        .and_then(|b| b.get("header"))
                        .and_then(Value::as_str),
                    "x-session-token",
                ),
            }
        };
        Session {
            strategy,
            profile: match p.get("profileName").and_then(Value::as_str).unwrap_or("") {
                "" => BindTo::Primary,
                name => BindTo::Named(profiles.iter().position(|n| n == name)),
            },
            bindings: BTreeMap::new(),
            present: None,
        }
    }

    /// The request's session id: the first source giving a non-empty
    /// value, trimmed (`resolveSessionID`).
    pub(crate) fn session_id<'r>(&self, request: &RequestContext<'r>) -> Option<&'r str> {
        let Strategy::SessionId { sources, .. } = &self.strategy else {
            return None;
        };
        sources.iter().flatten().find_map(|header| {
            request
                .headers
                .get(header)
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
        })
    }

    /// Whether a binding last seen at `last` is gone by `now`: the
    /// eviction loop sweeps every `sweep` from the plugin's start and drops
    /// a binding idle for longer than the TTL (`runEviction`, `expired`).
    pub(crate) fn expired(&self, last: u64, now: u64) -> bool {
        let Strategy::SessionId {
            ttl_ns, sweep_ns, ..
        } = &self.strategy
        else {
            return false;
        };
        let first_sweep = (last.saturating_add(*ttl_ns) / sweep_ns)
            .saturating_add(1)
            .saturating_mul(*sweep_ns);
        first_sweep <= now
    }

    /// The endpoint bound to this request's session, if any.
    pub(crate) fn bound(&self, request: &RequestContext<'_>) -> Option<usize> {
        let id = self.session_id(request)?;
        let (endpoint, last) = self.bindings.get(id)?;
        (!self.expired(*last, request.now_ns)).then_some(*endpoint)
    }

    /// The endpoint the session names: the decoded `x-session-token`
    /// (`DecodePodName`; an undecodable token names none), or the bound
    /// endpoint (`Choose`).
    pub(crate) fn target(&self, request: &RequestContext<'_>, ids: &[String]) -> Option<usize> {
        match &self.strategy {
            Strategy::Encoded { header } => {
                let token = request.headers.get(header).filter(|t| !t.is_empty())?;
                let name = base64_decode(token)?;
                ids.iter().position(|id| id.as_bytes() == name.as_slice())
            }
            Strategy::SessionId { .. } => self.bound(request),
        }
    }

    pub(crate) fn note_presence(&mut self, request: &RequestContext<'_>, candidates: &[usize]) {
        if let Some(endpoint) = self.bound(request) {
            self.present = Some(candidates.contains(&endpoint));
        }
    }

    /// PreRequest (`session_affinity.go`): bind the session to the target
    /// of `profileName`, the primary profile's when it names none; a
    /// profile that did not run binds nothing.
    pub(crate) fn pre_request(
        &mut self,
        request: &RequestContext<'_>,
        (primary, target): (usize, usize),
        other: Option<(usize, usize)>,
    ) {
        let target = match self.profile {
            BindTo::Primary => Some(target),
            BindTo::Named(Some(p)) if p == primary => Some(target),
            BindTo::Named(p) => other
                .filter(|(profile, _)| Some(*profile) == p)
                .map(|(_, t)| t),
        };
        if let Some(target) = target {
            self.bind(request, target);
        }
    }

    /// PreRequest under `session_id` (`SessionIDHeader.PreRequest`): a new
    /// session binds to the target; the same target refreshes the binding;
    /// another target rebinds only when the bound endpoint was not a
    /// candidate when the request was scored.
    pub(crate) fn bind(&mut self, request: &RequestContext<'_>, target: usize) {
        let Some(id) = self.session_id(request) else {
            return;
        };
        let now = request.now_ns;
        let live = self
            .bindings
            .get(id)
            .filter(|(_, last)| !self.expired(*last, now))
            .copied();
        match live {
            Some((endpoint, _)) if endpoint != target && self.present != Some(false) => {}
            _ => {
                self.bindings.insert(id.to_string(), (target, now));
            }
        }
    }
}

const BASE64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (Go's `base64.StdEncoding`).
#[cfg(test)]
pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(BASE64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Go's `base64.StdEncoding.DecodeString`: padding required, line breaks
/// ignored, any other stray character an error (`None`).
pub(crate) fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let symbols: Vec<u8> = text
        .bytes()
        .filter(|b| *b != b'\r' && *b != b'\n')
        .collect();
    if !symbols.len().is_multiple_of(4) {
        return None;
    }
    let mut out = Vec::with_capacity(symbols.len() / 4 * 3);
    let quads = symbols.len() / 4;
    for (q, quad) in symbols.chunks(4).enumerate() {
        let pad = quad.iter().rev().take_while(|b| **b == b'=').count();
        if pad > 2 || (pad > 0 && q + 1 != quads) {
            return None;
        }
        let mut n = 0u32;
        for (i, b) in quad.iter().enumerate() {
            let v = if i >= 4 - pad {
                0
            } else {
                BASE64.iter().position(|c| c == b)? as u32
            };
            n = (n << 6) | v;
        }
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// session-affinity-scorer's and session-affinity-filter's parameters (the
/// same `parameters` struct in both), decoded strictly (nested
/// structures too) and validated as their factories do
/// (`scorer/sessionaffinity/session_affinity.go`,
/// `filter/sessionaffinity/session_affinity.go`, `Factory`;
/// `util/sessionaffinity/{header,session_id}.go`): `strategy` is
/// `encoded_endpoint_header` (default) or `session_id`; only the selected
/// strategy's block is defaulted and validated.
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    let mut bad = |key: &str, message: String| c.bad(key, message);
    let strategy = match parameters.get("strategy") {
        None => "encoded_endpoint_header",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => {
            bad("strategy", "strategy must be a string".into());
            return;
        }
    };
    if !["encoded_endpoint_header", "session_id"].contains(&strategy) {
        bad(
            "strategy",
            format!(
                "strategy must be \"encoded_endpoint_header\" or \"session_id\", got \"{strategy}\""
            ),
        );
    }
    if let Some(v) = parameters.get("profileName")
        && !v.is_string()
    {
        bad("profileName", "profileName must be a string".into());
    }
    let strict = |value: &Value, keys: &[&str]| -> Result<(), String> {
        let Some(map) = value.as_mapping() else {
            return Err("must be a mapping".into());
        };
        for key in map.keys() {
            let key = key.as_str().unwrap_or("?");
            if !keys.contains(&key) {
                return Err(format!(
                    "`{key}` is not a field (it takes {})",
                    keys.join(", ")
                ));
            }
        }
        Ok(())
    };
    if let Some(block) = parameters.get("encodedEndpointHeaderConfig") {
        if let Err(e) = strict(block, &["header"]) {
            bad("encodedEndpointHeaderConfig", e);
        } else if block.get("header").is_some_and(|h| !h.is_string()) {
            bad(
                "encodedEndpointHeaderConfig.header",
                "header must be a string".into(),
            );
        }
    }
    let Some(block) = parameters.get("sessionIdConfig") else {
        return;
    };
    if let Err(e) = strict(
        block,
        &["sources", "evictionTtlSeconds", "evictionSweepSeconds"],
    ) {
        bad("sessionIdConfig", e);
        return;
    }
    for (i, source) in block
        .get("sources")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let key = format!("sessionIdConfig.sources[{i}]");
        if let Err(e) = strict(source, &["header", "attribute", "producer"]) {
            bad(&key, e);
            continue;
        }
        let set = |k: &str| {
            source
                .get(k)
                .and_then(Value::as_str)
                .is_some_and(|v| !v.is_empty())
        };
        if strategy == "session_id" && set("header") == set("attribute") {
            bad(
                &key,
                "exactly one of header or attribute must be set".into(),
            );
        }
    }
    if strategy == "session_id" {
        for key in ["evictionTtlSeconds", "evictionSweepSeconds"] {
            // Zero is replaced by the default before validation.
            if let Some(v) = block.get(key)
                && !v.as_f64().is_some_and(|v| v >= 0.0)
            {
                bad(
                    &format!("sessionIdConfig.{key}"),
                    format!("{key} must be > 0"),
                );
            }
        }
    }
}
