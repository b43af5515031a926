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

/// Parses a Go duration (`time.ParseDuration`, Go's `time/format.go`):
/// an optional sign, then one or more decimal numbers each with a unit
/// (`ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`), such as `50ms` or
/// `1m30s`; the bare `0` needs no unit. Nanoseconds, in integer arithmetic;
/// `None` for what Go refuses, overflow included.
pub fn parse_go_duration(text: &str) -> Option<i64> {
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let int_part = &rest[..int_len];
        rest = &rest[int_len..];
        let mut frac_part = "";
        if let Some(after) = rest.strip_prefix('.') {
            let len = after
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(after.len());
            frac_part = &after[..len];
            rest = &after[len..];
        }
        if int_part.is_empty() && frac_part.is_empty() {
            return None;
        }
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit: u64 = match &rest[..unit_len] {
            "ns" => 1,
            "us" | "\u{b5}s" | "\u{3bc}s" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        let whole: u64 = if int_part.is_empty() {
            0
        } else {
            int_part.parse().ok()?
        };
        let mut value = whole.checked_mul(unit)?;
        // The fraction, digit by digit, as Go scales it.
        let mut scale = unit;
        for digit in frac_part.bytes() {
            scale /= 10;
            if scale == 0 {
                break;
            }
            value = value.checked_add(u64::from(digit - b'0') * scale)?;
        }
        total = total.checked_add(value)?;
    }
    if negative {
        if total > 1u64 << 63 {
            return None;
        }
        Some((total as i64).wrapping_neg())
    } else {
        i64::try_from(total).ok()
    }
}

/// The minimum scrape interval (`pkg/epp/datalayer/runtime.go`).
pub const MIN_REFRESH_NS: u64 = 50_000_000;

/// Boolean flags (`fs.BoolVar` in `options.go`, and controller-runtime's
/// `zap-devel`): pflag lets them stand alone, meaning true.
const BOOLEAN: &[&str] = &[
    "ha-enable-leader-election",
    "disable-endpoint-subset-filter",
    "emit-endpoint-scores",
    "tracing",
    "health-checking",
    "enable-pprof",
    "enable-cert-reload",
    "enable-grpc-stream-metrics",
    "secure-serving",
    "metrics-endpoint-auth",
    "allow-experimental-plugins",
    "model-server-metrics-https-insecure-skip-verify",
    "zap-devel",
];

/// Parses `--name=value` flags, reporting every problem under `file`. As
/// pflag parses a long flag (`spf13/pflag` `parseLongArg`): a boolean flag
/// alone means true; any other flag without `=value` takes the next list
/// element as its value, and is an error ("flag needs an argument") when
/// it is the last.
pub fn parse_flags(file: &str, flags: &[String]) -> Result<EppFlags, Vec<RouterProblem>> {
    let mut problems = Vec::new();
    let mut out = EppFlags::default();
    let mut problem = |path: String, code: &'static str, message: String| {
        problems.push(RouterProblem {
            file: file.to_string(),
            path,
            // Flags are items of the deployment's `router.epp_flags`;
            // `check_router_inputs` gives them the deployment's lines.
            line: None,
            code,
            message,
        });
    };
    let mut next = 0;
    while next < flags.len() {
        let i = next;
        let flag = &flags[i];
        next += 1;
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
        let value = match value {
            Some(v) => v,
            None if BOOLEAN.contains(&name) => "true",
            None => match flags.get(next) {
                Some(v) => {
                    next += 1;
                    v.as_str()
                }
                None => {
                    problem(
                        path,
                        "epp-flag-value",
                        format!(
                            "--{name} needs a value (--{name}=value); only boolean flags may stand alone"
                        ),
                    );
                    continue;
                }
            },
        };
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
            // Values below the minimum, zero and negative ones included,
            // are clamped to it (`options.go`, `Validate`).
            "refresh-metrics-interval" => match parse_go_duration(value) {
                Some(ns) => {
                    out.refresh_interval_ns = u64::try_from(ns).unwrap_or(0).max(MIN_REFRESH_NS)
                }
                None => problem(
                    path,
                    "epp-flag-value",
                    format!("--refresh-metrics-interval `{value}` is not a duration"),
                ),
            },
            // pflag reads booleans with Go's `strconv.ParseBool`.
            "allow-experimental-plugins" => match value {
                "1" | "t" | "T" | "TRUE" | "true" | "True" => out.allow_experimental = true,
                "0" | "f" | "F" | "FALSE" | "false" | "False" => out.allow_experimental = false,
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
        // Go's special case: a bare zero needs no unit; other numbers do.
        assert_eq!(parse_go_duration("0"), Some(0));
        assert_eq!(parse_go_duration("-0"), Some(0));
        assert_eq!(parse_go_duration("5"), None);
        assert_eq!(parse_go_duration(""), None);
        assert_eq!(parse_go_duration("."), None);
        assert_eq!(parse_go_duration("1.5s"), Some(1_500_000_000));
        assert_eq!(parse_go_duration(".5ms"), Some(500_000));
        assert_eq!(parse_go_duration("-2us"), Some(-2_000));
        assert_eq!(parse_go_duration("3\u{b5}s"), Some(3_000));
        assert_eq!(parse_go_duration("1h1ns"), Some(3_600_000_000_001));
        assert_eq!(parse_go_duration("9999999999h"), None, "overflow");
        assert_eq!(parse_go_duration("2s"), Some(2_000_000_000));
        assert_eq!(parse_go_duration("1.5ms"), Some(1_500_000));
        assert_eq!(parse_go_duration("2"), None);
        assert_eq!(parse_go_duration("s"), None);
        // Zero and negative intervals are clamped to the minimum.
        for text in ["0", "-1s"] {
            let flags =
                parse_flags("d.yaml", &[format!("--refresh-metrics-interval={text}")]).unwrap();
            assert_eq!(flags.refresh_interval_ns, 50_000_000, "{text}");
        }
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
    fn only_boolean_flags_may_stand_alone() {
        let flags = parse_flags("d.yaml", &["--allow-experimental-plugins".into()]).unwrap();
        assert!(flags.allow_experimental);
        for alone in ["--pool-name", "--refresh-metrics-interval", "--grpc-port"] {
            let problems = parse_flags("d.yaml", &[alone.into()]).unwrap_err();
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert_eq!(problems[0].code, "epp-flag-value");
            assert!(problems[0].message.contains(alone), "{problems:?}");
        }
        // As pflag does, a value-taking flag without `=` takes the next
        // element as its value.
        let flags = parse_flags(
            "d.yaml",
            &["--pool-name".into(), "p".into(), "--tracing".into()],
        )
        .unwrap();
        assert_eq!(flags.pool_name.as_deref(), Some("p"));
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
