//! The EPP's command-line flags (llm-d-router `pkg/epp/server/options.go`,
//! `cmd/epp/runner/runner.go`; `research/epp.md` §1), checked as the EPP
//! checks them.

use crate::RouterProblem;
use std::collections::BTreeMap;

/// Flags pdsim knows, with whether they matter to a simulation. Serving,
/// TLS, telemetry and logging flags change nothing pdsim models; they are
/// accepted so real flag lists load unchanged.
const KNOWN: &[&str] = &[
    "pool-name",
    "pool-namespace",
    "pool-group",
    "endpoint-selector",
    "endpoint-target-ports",
    "config-file",
    "config-text",
    "refresh-metrics-interval",
    "refresh-prometheus-metrics-interval",
    "metrics-staleness-threshold",
    "grpc-port",
    "grpc-health-port",
    "metrics-port",
    "ha-enable-leader-election",
    "disable-endpoint-subset-filter",
    "secure-serving",
    "tracing",
    "enable-pprof",
    "health-checking",
    "cert-path",
    "enable-cert-reload",
    "metrics-endpoint-auth",
    "drain-timeout",
    "grpc-max-recv-msg-size",
    "grpc-max-send-msg-size",
    "emit-endpoint-scores",
    "enable-grpc-stream-metrics",
    "tls-min-version",
    "tls-cipher-suites",
    "metrics-client-ca-file",
    "metrics-cert-dir",
    "allow-experimental-plugins",
    "model-server-metrics-scheme",
    "model-server-metrics-path",
    "model-server-metrics-https-insecure-skip-verify",
    "model-server-metrics-port",
    "v",
    "zap-devel",
    "zap-encoder",
    "zap-log-level",
    "zap-stacktrace-level",
    "zap-time-encoding",
];

/// Deprecated flags the EPP rejects when set.
const REJECTED: &[&str] = &[
    "total-queued-requests-metric",
    "total-running-requests-metric",
    "kv-cache-usage-percentage-metric",
    "lora-info-metric",
    "cache-info-metric",
];

/// What the flags decide for a simulation.
#[derive(Clone, Debug, PartialEq)]
pub struct EppFlags {
    pub pool_name: Option<String>,
    pub endpoint_selector: Option<BTreeMap<String, String>>,
    /// `--refresh-metrics-interval`, at least 50 ms.
    pub refresh_interval_ns: u64,
    pub allow_experimental: bool,
    pub config_file: Option<String>,
    pub config_text: Option<String>,
}

/// No flags given: the EPP's defaults. Written out rather than derived so
/// the scrape interval can never be zero.
impl Default for EppFlags {
    fn default() -> EppFlags {
        EppFlags {
            pool_name: None,
            endpoint_selector: None,
            refresh_interval_ns: MIN_REFRESH_NS,
            allow_experimental: false,
            config_file: None,
            config_text: None,
        }
    }
}

/// Parses a Go duration such as `50ms`, `1s` or `1m30s` into nanoseconds.
pub fn parse_go_duration(text: &str) -> Option<u64> {
    let mut total = 0f64;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return None,
        };
        total += value * scale;
        rest = &rest[unit_len..];
    }
    (total.is_finite() && total < 1e18).then_some(total as u64)
}

/// The minimum scrape interval (`pkg/epp/datalayer/runtime.go`).
pub const MIN_REFRESH_NS: u64 = 50_000_000;

/// Parses `--name=value` flags, reporting every problem under `file`.
pub fn parse_flags(file: &str, flags: &[String]) -> Result<EppFlags, Vec<RouterProblem>> {
    let mut problems = Vec::new();
    let mut out = EppFlags::default();
    let mut problem = |path: String, code: &'static str, message: String| {
        problems.push(RouterProblem {
            file: file.to_string(),
            path,
            code,
            message,
        });
    };
    for (i, flag) in flags.iter().enumerate() {
        let path = format!("epp_flags[{i}]");
        let Some(body) = flag.strip_prefix("--") else {
            problem(
                path,
                "epp-flag-shape",
                format!("`{flag}` is not of the form --name=value"),
            );
            continue;
        };
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v)),
            None => (body, None),
        };
        if REJECTED.contains(&name) {
            problem(
                path,
                "epp-flag-rejected",
                format!(
                    "--{name} is deprecated and rejected by the EPP; configure metrics in core-metrics-extractor's engineConfigs"
                ),
            );
            continue;
        }
        if !KNOWN.contains(&name) {
            problem(
                path,
                "epp-flag-unknown",
                format!("--{name} is not an EPP flag"),
            );
            continue;
        }
        let value = value.unwrap_or("true");
        match name {
            "pool-name" => out.pool_name = Some(value.to_string()),
            "endpoint-selector" => {
                let mut selector = BTreeMap::new();
                for pair in value.split(',').filter(|p| !p.is_empty()) {
                    match pair.split_once('=') {
                        Some((k, v)) => {
                            selector.insert(k.trim().to_string(), v.trim().to_string());
                        }
                        None => problem(
                            path.clone(),
                            "epp-flag-value",
                            format!("--endpoint-selector `{pair}` is not key=value"),
                        ),
                    }
                }
                out.endpoint_selector = Some(selector);
            }
            "refresh-metrics-interval" => match parse_go_duration(value) {
                Some(ns) => out.refresh_interval_ns = ns.max(MIN_REFRESH_NS),
                None => problem(
                    path,
                    "epp-flag-value",
                    format!("--refresh-metrics-interval `{value}` is not a duration"),
                ),
            },
            "allow-experimental-plugins" => match value {
                "true" => out.allow_experimental = true,
                "false" => out.allow_experimental = false,
                _ => problem(
                    path,
                    "epp-flag-value",
                    format!("--allow-experimental-plugins `{value}` is not true or false"),
                ),
            },
            "config-file" => out.config_file = Some(value.to_string()),
            "config-text" => out.config_text = Some(value.to_string()),
            _ => {}
        }
    }
    if out.pool_name.is_some() && out.endpoint_selector.is_some() {
        problem(
            "epp_flags".into(),
            "epp-flag-conflict",
            "--pool-name and --endpoint-selector are exclusive".into(),
        );
    }
    if out.config_file.is_some() && out.config_text.is_some() {
        problem(
            "epp_flags".into(),
            "epp-flag-conflict",
            "--config-file and --config-text are exclusive".into(),
        );
    }
    if problems.is_empty() {
        Ok(out)
    } else {
        Err(problems)
    }
}

/// Renders a Helm `epp.flags` map to `--name=value` flags, in key order.
pub fn render_helm_flags(map: &serde_yaml::Mapping) -> Vec<String> {
    let mut flags: Vec<String> = map
        .iter()
        .map(|(k, v)| {
            let key = k.as_str().unwrap_or("");
            let value = match v {
                serde_yaml::Value::String(s) => s.clone(),
                serde_yaml::Value::Bool(b) => b.to_string(),
                serde_yaml::Value::Number(n) => n.to_string(),
                _ => String::new(),
            };
            // A key already of the form `name=value` (as some charts write
            // them) keeps its own value.
            if key.contains('=') {
                format!("--{key}")
            } else {
                format!("--{key}={value}")
            }
        })
        .collect();
    flags.sort();
    flags
}

#[cfg(test)]
mod tests {
    use super::{parse_flags, parse_go_duration};

    #[test]
    fn durations_and_the_scrape_floor() {
        assert_eq!(parse_go_duration("50ms"), Some(50_000_000));
        assert_eq!(parse_go_duration("1m30s"), Some(90_000_000_000));
        assert_eq!(parse_go_duration("fast"), None);
        let flags = parse_flags(
            "d.yaml",
            &[
                "--refresh-metrics-interval=10ms".into(),
                "--pool-name=p".into(),
            ],
        )
        .unwrap();
        assert_eq!(
            flags.refresh_interval_ns, 50_000_000,
            "raised to the 50 ms minimum"
        );
    }

    #[test]
    fn rejected_unknown_and_conflicting_flags_are_named() {
        let problems = parse_flags(
            "d.yaml",
            &[
                "--kv-cache-usage-percentage-metric=x".into(),
                "--warp=9".into(),
                "--pool-name=a".into(),
                "--endpoint-selector=app=x".into(),
            ],
        )
        .unwrap_err();
        let codes: Vec<&str> = problems.iter().map(|p| p.code).collect();
        assert_eq!(
            codes,
            vec!["epp-flag-rejected", "epp-flag-unknown", "epp-flag-conflict"]
        );
        assert!(problems[1].message.contains("--warp"));
    }
}
