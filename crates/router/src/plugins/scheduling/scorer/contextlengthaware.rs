//! context-length-aware as a scorer
//! (`scheduling/scorer/contextlengthaware/context_length_aware.go`). The
//! same plugin filters too; its filter runs in [`crate::cycle`] with the
//! label and range helpers here.

use super::Scorer;
use crate::config::Plugin;
use crate::plugins::Checks;
use crate::plugins::Cycle;
use serde_yaml::Value;

/// Unlabelled 0.5, an unparsable label 0, else [`context_range_score`].
#[derive(Clone, Debug)]
pub(crate) struct ContextLengthAwareScorer {
    label: String,
}

impl ContextLengthAwareScorer {
    pub fn new(plugin: &Plugin) -> ContextLengthAwareScorer {
        ContextLengthAwareScorer {
            label: context_label(plugin).to_string(),
        }
    }
}

impl Scorer for ContextLengthAwareScorer {
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        let l = cycle.context_length();
        out.extend(
            candidates
                .iter()
                .map(|c| match cycle.labels[*c].get(&self.label) {
                    None => 0.5,
                    Some(text) => {
                        parse_context_range(text).map_or(0.0, |range| context_range_score(l, range))
                    }
                }),
        );
    }
}

/// The label context-length-aware reads, `llm-d.ai/context-length-range`
/// (`DefaultContextLengthLabel`) unless set
/// (`scorer/contextlengthaware/context_length_aware.go`).
pub(crate) fn context_label(plugin: &Plugin) -> &str {
    plugin
        .parameters
        .get("label")
        .and_then(Value::as_str)
        .unwrap_or("llm-d.ai/context-length-range")
}

/// A `min-max` range label (`parseContextRange` in
/// `scorer/contextlengthaware/context_length_aware.go`): exactly one `-`, both
/// sides decimal integers after trimming (Go's `strconv.Atoi`, sign
/// allowed), min not above max; anything else is unparsable.
pub(crate) fn parse_context_range(text: &str) -> Option<(i64, i64)> {
    let (lo, hi) = text.split_once('-')?;
    if hi.contains('-') {
        return None;
    }
    let atoi = |s: &str| {
        let s = s.trim();
        let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        s.parse::<i64>().ok()
    };
    let (lo, hi) = (atoi(lo)?, atoi(hi)?);
    (lo <= hi).then_some((lo, hi))
}

/// How well a range fits a request of `l` tokens (`calculateRangeScore` in
/// `scorer/contextlengthaware/context_length_aware.go`):
/// in range, 0.3 + 0.7·(0.7/(1 + width/10000) + 0.3·headroom/width), a
/// zero-width range 1; out of range, 0.3/(1 + distance/1000), so any
/// in-range endpoint outscores every out-of-range one.
pub(crate) fn context_range_score(l: i64, (lo, hi): (i64, i64)) -> f64 {
    const FALLBACK: f64 = 0.3;
    if lo <= l && l <= hi {
        let width = i128::from(hi) - i128::from(lo);
        if width == 0 {
            return 1.0;
        }
        let width_score = 1.0 / (1.0 + width as f64 / 10_000.0);
        let position = (i128::from(hi) - i128::from(l)) as f64 / width as f64;
        return FALLBACK + (0.7 * width_score + 0.3 * position) * (1.0 - FALLBACK);
    }
    let distance = if l > hi {
        i128::from(l) - i128::from(hi)
    } else {
        i128::from(lo) - i128::from(l)
    };
    FALLBACK / (1.0 + distance as f64 / 1000.0)
}

/// `contextlengthaware.Factory`: the label defaults to
/// `llm-d.ai/context-length-range`; set empty, it is an error.
pub(crate) fn check(c: &mut Checks<'_>, parameters: &serde_yaml::Mapping) {
    use serde_yaml::Value;
    match parameters.get("label") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => c.bad("label", "'label' must be specified"),
        Some(Value::String(_)) => {}
        Some(_) => c.bad("label", "label must be a string"),
    }
    if let Some(v) = parameters.get("enableFiltering")
        && !(v.is_bool() || v.is_null())
    {
        c.bad("enableFiltering", "enableFiltering must be a boolean");
    }
}
