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
    "v",
    "zap-devel",
    "zap-encoder",
    "zap-log-level",
    "zap-stacktrace-level",
    "zap-time-encoding",
];

/// Flags the EPP had and `ebab687` no longer defines, so its flag parser
/// fails on them ("unknown flag"): removed in llm-d-router `936f064`
/// (#1940, "remove deprecated model-server-metrics CLI flags").
const REMOVED: &[&str] = &[
    "model-server-metrics-scheme",
    "model-server-metrics-path",
    "model-server-metrics-https-insecure-skip-verify",
    "model-server-metrics-port",
];

/// Integer flags (`fs.IntVar`, and the logging options' `fs.IntVarP` for
/// `v`), and which of them name a port the EPP listens on (`net.Listen`
/// refuses a port outside 0–65535, so the EPP does not start).
const INTEGER: &[(&str, bool)] = &[
    ("grpc-port", true),
    ("grpc-health-port", true),
    ("metrics-port", true),
    ("v", false),
];

/// Duration flags (`fs.DurationVar`).
const DURATION: &[&str] = &[
    "refresh-metrics-interval",
    "refresh-prometheus-metrics-interval",
    "metrics-staleness-threshold",
    "drain-timeout",
];

/// pflag's `intValue.Set`: `strconv.ParseInt(s, 0, 64)` — an optional
/// sign, then decimal, or `0x`, `0o`, `0b` or a leading `0` (octal), with
/// `_` between digits (or after a base prefix) as Go's integer literals
/// allow (`underscoreOK` in Go's `strconv/atoi.go`).
fn parse_go_int(text: &str) -> Option<i64> {
    let (negative, body) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let lower = body.to_ascii_lowercase();
    let prefix = ["0x", "0o", "0b"]
        .into_iter()
        .find(|p| lower.starts_with(p));
    if lower.contains('_') && !underscores_ok(&lower, prefix.is_some()) {
        return None;
    }
    let clean: String = lower.chars().filter(|c| *c != '_').collect();
    let (radix, digits) = match prefix {
        Some("0x") => (16, &clean[2..]),
        Some("0o") => (8, &clean[2..]),
        Some(_) => (2, &clean[2..]),
        None if clean.len() > 1 && clean.starts_with('0') => (8, &clean[1..]),
        None => (10, &clean[..]),
    };
    // `from_str_radix` would take a second sign.
    if digits.is_empty() || digits.starts_with(['+', '-']) {
        return None;
    }
    let magnitude = u64::from_str_radix(digits, radix).ok()?;
    if negative {
        if magnitude > 1u64 << 63 {
            return None;
        }
        Some((magnitude as i64).wrapping_neg())
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// Go's `underscoreOK` over an unsigned, lower-cased literal: each `_`
/// follows a digit or the base prefix and is followed by a digit.
fn underscores_ok(literal: &str, prefixed: bool) -> bool {
    // The last character class: '^' start, '0' digit or prefix, '_', '!'.
    let mut saw = '^';
    let bytes = literal.as_bytes();
    let mut i = 0;
    let hex = prefixed && bytes[1] == b'x';
    if prefixed {
        i = 2;
        saw = '0';
    }
    while i < bytes.len() {
        let c = bytes[i];
        i += 1;
        if c.is_ascii_digit() || (hex && (b'a'..=b'f').contains(&c)) {
            saw = '0';
        } else if c == b'_' {
            if saw != '0' {
                return false;
            }
            saw = '_';
        } else {
            if saw == '_' {
                return false;
            }
            saw = '!';
        }
    }
    saw != '_'
}

/// pflag's `boolValue.Set`: Go's `strconv.ParseBool`, case as written.
pub(crate) fn parse_go_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

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
    /// `--endpoint-target-ports` with repeats removed, order kept
    /// (`removeDuplicatePorts` in `options.go`): the ports of each pod a
    /// standalone EPP makes endpoints of.
    pub endpoint_target_ports: Vec<u32>,
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
            endpoint_target_ports: Vec::new(),
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
    "zap-devel",
];

/// The path the EPP reads its configuration from: the value of the last
/// `--config-file` among `flags` (the flag is `ConfigFile` in
/// `pkg/epp/server/options.go`; pflag keeps a string flag's last value and
/// takes it after `=` or, without one, from the next element, as
/// [`parse_flags`] does). Read on its own before the flags are parsed, as it
/// picks a ConfigMap's configuration.
pub fn config_file(flags: &[String]) -> Option<&str> {
    let mut found = None;
    let mut items = flags.iter();
    while let Some(flag) = items.next() {
        if let Some(value) = flag.strip_prefix("--config-file=") {
            found = Some(value);
        } else if flag == "--config-file" {
            found = items.next().map(String::as_str);
        }
    }
    found
}

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
        if REMOVED.contains(&name) {
            problem(
                path,
                "epp-flag-unknown",
                format!(
                    "--{name} is not an EPP flag: llm-d-router removed it in 936f064 (#1940); the metrics endpoint is set in the metrics-data-source plugin's parameters"
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
        // Every value by its Go type first, as pflag sets it.
        if BOOLEAN.contains(&name) && parse_go_bool(value).is_none() {
            problem(
                path,
                "epp-flag-value",
                format!(
                    "--{name} `{value}` is not a boolean (strconv.ParseBool takes 1, t, T, TRUE, true, True, 0, f, F, FALSE, false or False)"
                ),
            );
            continue;
        }
        if let Some((_, port)) = INTEGER.iter().find(|(n, _)| *n == name) {
            match parse_go_int(value) {
                None => {
                    problem(
                        path,
                        "epp-flag-value",
                        format!("--{name} `{value}` is not an integer (strconv.ParseInt)"),
                    );
                    continue;
                }
                Some(n) if *port && !(0..=65535).contains(&n) => {
                    problem(
                        path,
                        "epp-flag-value",
                        format!(
                            "--{name} {n} is not a port: the EPP cannot listen on it (0 to 65535)"
                        ),
                    );
                    continue;
                }
                Some(_) => {}
            }
        }
        if DURATION.contains(&name) && parse_go_duration(value).is_none() {
            problem(
                path,
                "epp-flag-value",
                format!(
                    "--{name} `{value}` is not a duration (time.ParseDuration, e.g. 50ms or 1m30s)"
                ),
            );
            continue;
        }
        match name {
            "pool-name" if value.is_empty() => problem(
                path,
                "epp-flag-value",
                "--pool-name is empty: the EPP needs the name of its InferencePool (or --endpoint-selector instead)".into(),
            ),
            "pool-name" => out.pool_name = Some(value.to_string()),
            "endpoint-target-ports" => {
                // `fs.IntSliceVar`: comma-separated integers.
                let ports: Vec<Option<i64>> = value.split(',').map(|p| parse_go_int(p.trim())).collect();
                if ports.iter().any(|p| p.is_none_or(|n| !(0..=65535).contains(&n))) || ports.len() > 8 {
                    problem(
                        path,
                        "epp-flag-value",
                        format!("--endpoint-target-ports `{value}`: 1 to 8 comma-separated ports, each 0 to 65535 (options.go, Validate)"),
                    );
                } else {
                    out.endpoint_target_ports.clear();
                    for port in ports.into_iter().flatten() {
                        let port = port as u32;
                        if !out.endpoint_target_ports.contains(&port) {
                            out.endpoint_target_ports.push(port);
                        }
                    }
                }
            }
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
            // are clamped to it (`options.go`, `Validate`), as the EPP
            // does with a warning.
            "refresh-metrics-interval" => {
                let ns = parse_go_duration(value).unwrap_or(0);
                out.refresh_interval_ns = u64::try_from(ns).unwrap_or(0).max(MIN_REFRESH_NS)
            }
            "allow-experimental-plugins" => {
                out.allow_experimental = parse_go_bool(value).unwrap_or(false)
            }
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
    // `Options.Validate`: a standalone EPP (`--endpoint-selector`) must be
    // told which ports of each pod to send to.
    if out.endpoint_selector.is_some()
        && out.pool_name.is_none()
        && out.endpoint_target_ports.is_empty()
    {
        problem(
            "epp_flags".into(),
            "epp-flag-missing",
            "--endpoint-selector needs --endpoint-target-ports (1 to 8 ports of each pod; options.go, Validate)".into(),
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
    use super::{config_file, parse_flags, parse_go_duration};

    #[test]
    fn the_config_file_is_the_last_given_in_either_form() {
        let flags = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(config_file(&flags(&["--v=2"])), None);
        assert_eq!(
            config_file(&flags(&["--config-file=/c/a.yaml", "--v=2"])),
            Some("/c/a.yaml")
        );
        assert_eq!(
            config_file(&flags(&[
                "--config-file=/c/a.yaml",
                "--config-file",
                "/c/b.yaml"
            ])),
            Some("/c/b.yaml")
        );
        assert_eq!(config_file(&flags(&["--config-file"])), None);
    }

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

    #[test]
    fn go_integers_as_strconv_reads_them() {
        use super::parse_go_int;
        for (text, want) in [
            ("9002", Some(9002)),
            ("-3", Some(-3)),
            ("+7", Some(7)),
            ("0x1F", Some(31)),
            ("0o17", Some(15)),
            ("017", Some(15)),
            ("0b101", Some(5)),
            ("1_000", Some(1000)),
            ("0x_ff", Some(255)),
            ("0", Some(0)),
            ("abc", None),
            ("", None),
            ("1__0", None),
            ("_1", None),
            ("1_", None),
            ("08", None),
            ("0x", None),
            ("--1", None),
            ("+-1", None),
            ("9223372036854775808", None),
            ("-9223372036854775808", Some(i64::MIN)),
        ] {
            assert_eq!(parse_go_int(text), want, "{text:?}");
        }
    }

    #[test]
    fn flag_values_are_checked_by_their_go_types() {
        let one = |flag: &str| parse_flags("d.yaml", &[flag.to_string()]);
        for bad in [
            "--v=abc",
            "--tracing=maybe",
            "--tracing=yes",
            "--grpc-port=70000",
            "--metrics-port=-1",
            "--grpc-health-port=0x10000",
            "--drain-timeout=5",
            "--metrics-staleness-threshold=soon",
            "--pool-name=",
            "--endpoint-target-ports=8000,70000",
            "--endpoint-target-ports=1,2,3,4,5,6,7,8,9",
        ] {
            let problems = one(bad).expect_err(bad);
            assert_eq!(problems.len(), 1, "{bad}: {problems:?}");
            assert_eq!(problems[0].code, "epp-flag-value", "{bad}: {problems:?}");
        }
        for good in [
            "--v=4",
            "--v=-1",
            "--tracing=False",
            "--tracing",
            "--grpc-port=65535",
            "--metrics-port=0",
            "--drain-timeout=1m30s",
            "--endpoint-target-ports=8000,8001",
            // Clamped to the 50 ms floor with a warning, not refused.
            "--refresh-metrics-interval=-1s",
        ] {
            one(good).unwrap_or_else(|p| panic!("{good}: {p:?}"));
        }
        let p = one("--grpc-port=70000").unwrap_err();
        assert!(p[0].message.contains("is not a port"), "{p:?}");
        // Flags ebab687 no longer defines fail as unknown, with when.
        let p = one("--model-server-metrics-port=8000").unwrap_err();
        assert_eq!(p[0].code, "epp-flag-unknown");
        assert!(p[0].message.contains("936f064"), "{p:?}");
    }
}
