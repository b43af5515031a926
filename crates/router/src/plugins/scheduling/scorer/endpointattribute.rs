//! endpoint-attribute-scorer (`scheduling/scorer/endpointattribute/
//! endpointattribute.go`): scores a scalar endpoint attribute linearly,
//! over a fixed range or the candidates' own (adaptive) range; an endpoint
//! without the attribute scores 0. pdsim's attributes are the custom
//! metrics the core-metrics-extractor reads from the vLLM series its
//! engines export (`plugins::datalayer::metrics`).

use super::Scorer;
use crate::config::Plugin;
use crate::plugins::datalayer::metrics::{Series, custom_series};
use crate::plugins::{Checks, Cycle, strict_block};
use serde_yaml::Value;

#[derive(Clone, Debug)]
pub(crate) struct EndpointAttributeScorer {
    series: Option<Series>,
    lower_is_better: bool,
    /// `normalization.fixedRange` (min, max); `None`: adaptive.
    fixed: Option<(f64, f64)>,
}

impl EndpointAttributeScorer {
    pub fn new(plugin: &Plugin, plugins: &[Plugin]) -> EndpointAttributeScorer {
        let p = &plugin.parameters;
        let attribute = p.get("attributeKey").and_then(Value::as_str).unwrap_or("");
        let producer = p.get("producer").and_then(Value::as_str);
        let algorithm = p.get("algorithm");
        let fixed = algorithm
            .and_then(|a| a.get("normalization"))
            .and_then(|n| n.get("fixedRange"))
            .filter(|f| !f.is_null())
            .map(|f| {
                let n = |k: &str| f.get(k).and_then(Value::as_f64).unwrap_or(0.0);
                (n("min"), n("max"))
            });
        EndpointAttributeScorer {
            series: custom_series(plugins, attribute, producer).ok().flatten(),
            lower_is_better: algorithm
                .and_then(|a| a.get("type"))
                .and_then(Value::as_str)
                == Some("linear_lower_is_better"),
            fixed,
        }
    }
}

impl Scorer for EndpointAttributeScorer {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        let values: Vec<Option<f64>> = candidates
            .iter()
            .map(|e| self.series.and_then(|s| s.read(&cycle.endpoints[*e])))
            .collect();
        let flip = |x: f64| if self.lower_is_better { 1.0 - x } else { x };
        match self.fixed {
            Some((min, max)) => out.extend(values.iter().map(|v| match v {
                Some(v) => flip(((v - min) / (max - min)).clamp(0.0, 1.0)),
                None => 0.0,
            })),
            None => {
                let present = values.iter().flatten();
                let lo = present.clone().fold(f64::INFINITY, |a, b| a.min(*b));
                let hi = present.fold(f64::NEG_INFINITY, |a, b| a.max(*b));
                out.extend(values.iter().map(|v| match v {
                    None => 0.0,
                    Some(_) if hi == lo => 1.0,
                    Some(v) => flip((v - lo) / (hi - lo)),
                }));
            }
        }
    }
}

/// `NewEndpointAttributeScorer`'s checks.
pub(crate) fn check(c: &mut Checks<'_>, p: &serde_yaml::Mapping) {
    let attribute = p.get("attributeKey").and_then(Value::as_str).unwrap_or("");
    if attribute.is_empty() {
        return c.bad(
            "attributeKey",
            "endpoint attribute scorer requires a non-empty attributeKey",
        );
    }
    let algorithm = p.get("algorithm");
    // Decoded strictly, nested structures too.
    if let Some(a) = algorithm.filter(|a| !a.is_null()) {
        if !strict_block(c, "algorithm", a, &["type", "normalization"]) {
            return;
        }
        if let Some(n) = a.get("normalization").filter(|n| !n.is_null()) {
            if !strict_block(
                c,
                "algorithm.normalization",
                n,
                &["fixedRange", "adaptiveRange"],
            ) {
                return;
            }
            for (key, fields) in [
                ("fixedRange", &["min", "max"][..]),
                ("adaptiveRange", &[][..]),
            ] {
                if let Some(v) = n.get(key).filter(|v| !v.is_null())
                    && !strict_block(c, &format!("algorithm.normalization.{key}"), v, fields)
                {
                    return;
                }
            }
            if let Some(f) = n.get("fixedRange")
                && ["min", "max"].iter().any(|k| {
                    f.get(k)
                        .is_some_and(|v| !v.is_null() && v.as_f64().is_none())
                })
            {
                return c.problem(
                    "algorithm.normalization.fixedRange",
                    "wrong-type",
                    "fixedRange min and max must be numbers",
                );
            }
        }
    }
    let kind = algorithm
        .and_then(|a| a.get("type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if !matches!(kind, "linear_lower_is_better" | "linear_higher_is_better") {
        return c.bad(
            "algorithm.type",
            format!("endpoint attribute scorer algorithm.type must be \"linear_lower_is_better\" or \"linear_higher_is_better\", got {kind:?}"),
        );
    }
    let normalization = algorithm.and_then(|a| a.get("normalization"));
    let set = |k: &str| {
        normalization
            .and_then(|n| n.get(k))
            .is_some_and(|v| !v.is_null())
    };
    if set("fixedRange") && set("adaptiveRange") {
        return c.bad(
            "algorithm.normalization",
            "endpoint attribute scorer allows at most one normalization strategy, got both fixedRange and adaptiveRange",
        );
    }
    if let Some(fixed) = normalization
        .and_then(|n| n.get("fixedRange"))
        .filter(|f| !f.is_null())
    {
        let n = |k: &str| fixed.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let (min, max) = (n("min"), n("max"));
        if min >= max {
            return c.bad(
                "algorithm.normalization.fixedRange",
                format!("endpoint attribute scorer normalization.fixedRange requires min < max, got min {min}, max {max}"),
            );
        }
    }
    crate::plugins::scheduling::filter::endpointattribute::check_key(
        c,
        "attributeKey",
        attribute,
        p.get("producer"),
    );
}
