//! endpoint-attribute-filter (`scheduling/filter/endpointattribute/
//! filter.go`): keeps the endpoints whose scalar attribute passes a
//! threshold. The attributes pdsim can give are the custom metrics the
//! core-metrics-extractor reads from the vLLM series its engines export
//! (`plugins::datalayer::metrics`).

use super::Filter;
use crate::config::Plugin;
use crate::plugins::datalayer::metrics::{Series, custom_series};
use crate::plugins::{Checks, Cycle, strict_block};
use pdsim_core::Stream;
use serde_yaml::Value;

/// The threshold's operators (`operatorLessThan`, …).
pub(crate) const OPERATORS: [&str; 6] = [
    "LessThan",
    "LessThanOrEqual",
    "GreaterThan",
    "GreaterThanOrEqual",
    "Equal",
    "NotEqual",
];

#[derive(Clone, Debug)]
pub(crate) struct EndpointAttributeFilter {
    /// `None`: nothing produces the attribute; it is missing everywhere.
    series: Option<Series>,
    pass_on_missing: bool,
    fallback_on_empty: bool,
    operator: &'static str,
    value: f64,
}

impl EndpointAttributeFilter {
    /// Built from parameters the loader has checked (a series pdsim cannot
    /// give is refused there).
    pub fn new(plugin: &Plugin, plugins: &[Plugin]) -> EndpointAttributeFilter {
        let p = &plugin.parameters;
        let attribute = p.get("attribute").and_then(Value::as_str).unwrap_or("");
        let producer = p.get("producer").and_then(Value::as_str);
        let threshold = p.get("algorithm").and_then(|a| a.get("threshold"));
        let op = threshold
            .and_then(|t| t.get("operator"))
            .and_then(Value::as_str)
            .unwrap_or("");
        EndpointAttributeFilter {
            series: custom_series(plugins, attribute, producer).ok().flatten(),
            pass_on_missing: p.get("onMissing").and_then(Value::as_str) != Some("Fail"),
            fallback_on_empty: p
                .get("fallbackOnEmpty")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            operator: OPERATORS
                .iter()
                .copied()
                .find(|o| *o == op)
                .unwrap_or("LessThan"),
            value: threshold
                .and_then(|t| t.get("value"))
                .and_then(Value::as_f64)
                .unwrap_or(0.0),
        }
    }

    fn matches(&self, v: f64) -> bool {
        let t = self.value;
        match self.operator {
            "LessThan" => v < t,
            "LessThanOrEqual" => v <= t,
            "GreaterThan" => v > t,
            "GreaterThanOrEqual" => v >= t,
            "Equal" => v == t,
            _ => v != t,
        }
    }
}

impl Filter for EndpointAttributeFilter {
    fn filter(&mut self, cycle: &Cycle<'_, '_>, _rng: &mut Stream, candidates: &mut Vec<usize>) {
        // Only a filter that falls back on an empty result needs the
        // candidates it started from.
        let before = self.fallback_on_empty.then(|| candidates.clone());
        candidates.retain(
            |e| match self.series.and_then(|s| s.read(&cycle.endpoints[*e])) {
                Some(v) => self.matches(v),
                None => self.pass_on_missing,
            },
        );
        if let Some(before) = before.filter(|_| candidates.is_empty()) {
            *candidates = before;
        }
    }
}

/// `NewEndpointAttributeFilter`'s checks.
pub(crate) fn check(c: &mut Checks<'_>, p: &serde_yaml::Mapping) {
    let attribute = p.get("attribute").and_then(Value::as_str).unwrap_or("");
    if attribute.is_empty() {
        return c.bad(
            "attribute",
            "endpoint attribute filter requires a non-empty attribute",
        );
    }
    match p.get("onMissing").and_then(Value::as_str).unwrap_or("") {
        "" | "Pass" | "Fail" => {}
        other => {
            return c.bad(
                "onMissing",
                format!("endpoint attribute filter onMissing must be \"Pass\" or \"Fail\", got {other:?}"),
            );
        }
    }
    let algorithm = p.get("algorithm");
    // Decoded strictly, nested structures too.
    if let Some(a) = algorithm.filter(|a| !a.is_null()) {
        if !strict_block(c, "algorithm", a, &["type", "threshold"]) {
            return;
        }
        if let Some(t) = a.get("threshold").filter(|t| !t.is_null())
            && !strict_block(c, "algorithm.threshold", t, &["operator", "value"])
        {
            return;
        }
    }
    if let Some(v) = algorithm
        .and_then(|a| a.get("threshold"))
        .and_then(|t| t.get("value"))
        .filter(|v| !v.is_null() && v.as_f64().is_none())
    {
        return c.problem(
            "algorithm.threshold.value",
            "wrong-type",
            format!(
                "threshold.value must be a number, not {}",
                crate::manifests::yaml_type(v)
            ),
        );
    }
    let kind = algorithm
        .and_then(|a| a.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if kind != "threshold" {
        return c.bad(
            "algorithm.type",
            format!("endpoint attribute filter algorithm.type must be \"threshold\", got {kind:?}"),
        );
    }
    let Some(threshold) = algorithm
        .and_then(|a| a.get("threshold"))
        .filter(|t| !t.is_null())
    else {
        return c.bad(
            "algorithm.threshold",
            "endpoint attribute filter requires algorithm.threshold when algorithm.type is \"threshold\"",
        );
    };
    let op = threshold
        .get("operator")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !OPERATORS.contains(&op) {
        return c.bad(
            "algorithm.threshold.operator",
            format!(
                "endpoint attribute filter threshold.operator must be one of {}, got {op:?}",
                OPERATORS.map(|o| format!("{o:?}")).join(", ")
            ),
        );
    }
    check_key(c, "attribute", attribute, p.get("producer"));
}

/// `ResolveConfiguredKey`: an attribute with `/` needs an explicit
/// producer (the old combined spelling).
pub(crate) fn check_key(c: &mut Checks<'_>, key: &str, attribute: &str, producer: Option<&Value>) {
    if producer.is_none_or(Value::is_null)
        && let Some(idx) = attribute.rfind('/')
    {
        c.bad(
            key,
            format!(
                "attribute {attribute:?} contains \"/\" but no producer is set; split it into attribute: {:?} and producer: {:?}",
                &attribute[..idx],
                &attribute[idx + 1..]
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::{EndpointAttributeFilter, OPERATORS};

    #[test]
    fn each_operator_compares_the_attribute_with_the_threshold_as_filter_go_does() {
        // `passes` in `endpointattribute/filter.go`: value OP threshold,
        // here with threshold 5 and values 4, 5 and 6.
        let expected = [
            ("LessThan", [true, false, false]),
            ("LessThanOrEqual", [true, true, false]),
            ("GreaterThan", [false, false, true]),
            ("GreaterThanOrEqual", [false, true, true]),
            ("Equal", [false, true, false]),
            ("NotEqual", [true, false, true]),
        ];
        assert_eq!(expected.map(|(op, _)| op), OPERATORS);
        for (operator, passes) in expected {
            let filter = EndpointAttributeFilter {
                series: None,
                pass_on_missing: true,
                fallback_on_empty: false,
                operator,
                value: 5.0,
            };
            assert_eq!(
                [4.0, 5.0, 6.0].map(|v| filter.matches(v)),
                passes,
                "{operator}"
            );
        }
    }
}
