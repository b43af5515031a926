//! Service-level objectives and goodput.
//!
//! A request meets its SLO when it completed and its time to first token,
//! its mean inter-token latency (TPOT) and its end-to-end latency are each
//! within the class's threshold; an unset threshold does not constrain.
//! This is the definition of vLLM's benchmark `--goodput` (`ttft`, `tpot`,
//! `e2el`, in `vllm/benchmarks/serve.py`) and of DistServe's SLO
//! attainment: the ITL threshold is compared with the request's mean
//! inter-token latency, not with its worst gap.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Thresholds of one SLO class, in milliseconds; `None` does not constrain.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e_ms: Option<f64>,
}

impl Slo {
    pub fn is_empty(&self) -> bool {
        self.ttft_ms.is_none() && self.itl_ms.is_none() && self.e2e_ms.is_none()
    }

    /// Parses `ttft_ms=500,itl_ms=50,e2e_ms=20000` (any subset, any order).
    pub fn parse(text: &str) -> Result<Slo, String> {
        let mut slo = Slo::default();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Some((key, value)) = part.split_once('=') else {
                return Err(format!(
                    "`{part}` is not key=value (keys: ttft_ms, itl_ms or its alias tpot_ms, e2e_ms)"
                ));
            };
            let number: f64 = value
                .trim()
                .parse()
                .map_err(|_| format!("`{key}`: `{value}` is not a number of milliseconds"))?;
            if !number.is_finite() || number <= 0.0 {
                return Err(format!(
                    "`{key}`: {value} must be a positive, finite number of milliseconds"
                ));
            }
            let slot = match key.trim() {
                "ttft_ms" => &mut slo.ttft_ms,
                "itl_ms" | "tpot_ms" => &mut slo.itl_ms,
                "e2e_ms" => &mut slo.e2e_ms,
                other => {
                    return Err(format!(
                        "unknown SLO key `{other}` (keys: ttft_ms, itl_ms or its alias tpot_ms, e2e_ms)"
                    ));
                }
            };
            if slot.replace(number).is_some() {
                return Err(format!("`{key}` is given twice"));
            }
        }
        if slo.is_empty() {
            return Err("an SLO needs at least one of ttft_ms, itl_ms, e2e_ms".into());
        }
        Ok(slo)
    }

    /// Whether a completed request with these latencies meets the SLO.
    pub fn met(&self, ttft_ms: f64, tpot_ms: Option<f64>, e2e_ms: f64) -> bool {
        self.exceeded(ttft_ms, tpot_ms, e2e_ms) == [false; 3]
    }

    /// Which of its thresholds (TTFT, ITL, E2E) a completed request with
    /// these latencies exceeds; an unset threshold is never exceeded.
    pub fn exceeded(&self, ttft_ms: f64, tpot_ms: Option<f64>, e2e_ms: f64) -> [bool; 3] {
        [
            self.ttft_ms.is_some_and(|t| ttft_ms > t),
            self.itl_ms
                .is_some_and(|t| tpot_ms.is_some_and(|tpot| tpot > t)),
            self.e2e_ms.is_some_and(|t| e2e_ms > t),
        ]
    }

    /// `TTFT ≤ 500 ms, ITL ≤ 50 ms`. Each bound as messages show numbers
    /// ([`pdsim_spec::problem::number`]): a bound of `1e-300` reads
    /// `1e-300`, not three hundred zeros.
    pub fn describe(&self) -> String {
        use pdsim_spec::problem::number;
        let mut parts = Vec::new();
        if let Some(t) = self.ttft_ms {
            parts.push(format!("TTFT ≤ {} ms", number(t)));
        }
        if let Some(t) = self.itl_ms {
            parts.push(format!("ITL ≤ {} ms", number(t)));
        }
        if let Some(t) = self.e2e_ms {
            parts.push(format!("E2E ≤ {} ms", number(t)));
        }
        parts.join(", ")
    }
}

/// The names of a request source's SLO classes, by class index (0 is the
/// unnamed default class). A streamed trace learns names as it reads rows,
/// so the reader's side updates this list while the run goes on and the
/// aggregator reads it when a request ends (always after its row was read).
#[derive(Clone, Debug, Default)]
pub struct ClassNames(Arc<Mutex<Vec<String>>>);

impl ClassNames {
    pub fn new(names: &[String]) -> ClassNames {
        ClassNames(Arc::new(Mutex::new(names.to_vec())))
    }

    /// Replaces the list when the source knows more names than it holds.
    pub fn update(&self, names: &[String]) {
        if let Ok(mut held) = self.0.lock()
            && held.len() < names.len()
        {
            *held = names.to_vec();
        }
    }

    /// The names known now.
    pub fn snapshot(&self) -> Vec<String> {
        self.0.lock().map(|n| n.clone()).unwrap_or_default()
    }

    fn get(&self, class: u16) -> Option<String> {
        self.0.lock().ok()?.get(class as usize).cloned()
    }
}

/// Which SLO applies to which requests.
#[derive(Clone, Debug, Default)]
pub struct SloPlan {
    /// For every request whose class has no SLO of its own.
    pub all: Option<Slo>,
    /// By class name: given on the command line by name, else from the
    /// trace header's `goodput_slo_targets`.
    pub named: BTreeMap<String, Slo>,
    pub names: ClassNames,
}

impl SloPlan {
    /// `named` (from the command line) wins over `header` for a class.
    pub fn new(
        all: Option<Slo>,
        named: &BTreeMap<String, Slo>,
        header: &BTreeMap<String, Slo>,
        names: ClassNames,
    ) -> SloPlan {
        let mut merged = header.clone();
        merged.extend(named.iter().map(|(k, v)| (k.clone(), *v)));
        SloPlan {
            all,
            named: merged,
            names,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_none() && self.named.is_empty()
    }

    /// The SLO of a class, and the class's display name (`default` for the
    /// unnamed class).
    pub fn resolve(&self, class: u16) -> (Option<Slo>, String) {
        let name = self.names.get(class).unwrap_or_default();
        let slo = self.named.get(&name).copied().or(self.all);
        let display = if name.is_empty() {
            "default".to_string()
        } else {
            name
        };
        (slo, display)
    }
}

/// Goodput of one class, or of the whole run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClassGoodput {
    /// The SLO, as thresholds.
    pub slo: Slo,
    pub requests: u64,
    pub requests_met: u64,
    /// `requests_met / requests`, 0–1.
    pub met_share: f64,
}

/// Goodput against the SLOs: requests that met their class's SLO.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Goodput {
    /// Requests under some SLO (every request of a class that has one).
    pub requests: u64,
    pub requests_met: u64,
    /// `requests_met / requests`, 0–1.
    pub met_share: f64,
    /// Requests that met their SLO per second of the run.
    pub requests_per_s: f64,
    pub by_class: BTreeMap<String, ClassGoodput>,
    /// Why requests under an SLO missed it, each reason counted on its own
    /// (a request may miss for several); absent when every one met it.
    #[serde(skip_serializing_if = "Missed::is_none")]
    pub missed: Missed,
    /// Classes given an SLO (on the command line or in the trace's header)
    /// that no request of the run belonged to, by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub classes_without_requests: Vec<String>,
}

/// Requests under an SLO that missed it, by reason: not completed, or
/// completed over each threshold.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Missed {
    pub not_completed: u64,
    pub ttft: u64,
    pub itl: u64,
    pub e2e: u64,
}

impl Missed {
    pub fn is_none(&self) -> bool {
        *self == Missed::default()
    }
}

/// How one request fared against its SLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    NotCompleted,
    /// Completed; which thresholds (TTFT, ITL, E2E) it exceeded.
    Completed([bool; 3]),
}

impl Verdict {
    fn met(self) -> bool {
        self == Verdict::Completed([false; 3])
    }
}

/// Counts per class as requests end.
#[derive(Clone, Debug, Default)]
pub(crate) struct GoodputCounter {
    /// Per class index, once its first request ended.
    classes: Vec<Option<ClassCount>>,
    missed: Missed,
}

/// A class's resolved SLO and display name, requests and requests met.
type ClassCount = (Option<Slo>, String, u64, u64);

impl GoodputCounter {
    /// The SLO a request of `class` is judged against, resolved once per
    /// class.
    pub(crate) fn slo(&mut self, plan: &SloPlan, class: u16) -> Option<Slo> {
        if plan.is_empty() {
            return None;
        }
        let i = class as usize;
        if self.classes.len() <= i {
            self.classes.resize(i + 1, None);
        }
        let entry = self.classes[i].get_or_insert_with(|| {
            let (slo, name) = plan.resolve(class);
            (slo, name, 0, 0)
        });
        entry.0
    }

    pub(crate) fn add(&mut self, class: u16, verdict: Verdict) {
        if let Some(Some(entry)) = self.classes.get_mut(class as usize) {
            entry.2 += 1;
            entry.3 += u64::from(verdict.met());
            match verdict {
                Verdict::NotCompleted => self.missed.not_completed += 1,
                Verdict::Completed([ttft, itl, e2e]) => {
                    self.missed.ttft += u64::from(ttft);
                    self.missed.itl += u64::from(itl);
                    self.missed.e2e += u64::from(e2e);
                }
            }
        }
    }

    pub(crate) fn goodput(&self, plan: &SloPlan, duration_s: f64) -> Option<Goodput> {
        if plan.is_empty() {
            return None;
        }
        let share = |met: u64, n: u64| if n > 0 { met as f64 / n as f64 } else { 0.0 };
        let mut out = Goodput::default();
        for (slo, name, n, met) in self.classes.iter().flatten() {
            let Some(slo) = slo else { continue };
            out.requests += n;
            out.requests_met += met;
            let entry = out.by_class.entry(name.clone()).or_insert(ClassGoodput {
                slo: *slo,
                ..ClassGoodput::default()
            });
            entry.requests += n;
            entry.requests_met += met;
            entry.met_share = share(entry.requests_met, entry.requests);
        }
        out.missed = self.missed;
        out.classes_without_requests = plan
            .named
            .keys()
            .filter(|name| !out.by_class.contains_key(*name))
            .cloned()
            .collect();
        out.met_share = share(out.requests_met, out.requests);
        out.requests_per_s = if duration_s > 0.0 {
            out.requests_met as f64 / duration_s
        } else {
            0.0
        };
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_any_subset_and_refuses_bad_values() {
        let slo = Slo::parse("ttft_ms=500, itl_ms=50").unwrap();
        assert_eq!(slo.ttft_ms, Some(500.0));
        assert_eq!(slo.itl_ms, Some(50.0));
        assert_eq!(slo.e2e_ms, None);
        for bad in [
            "",
            "ttft=5",
            "ttft_ms=-1",
            "ttft_ms=NaN",
            "ttft_ms",
            "ttft_ms=1,ttft_ms=2",
        ] {
            assert!(Slo::parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn a_request_meets_only_when_every_set_threshold_holds() {
        let slo = Slo::parse("ttft_ms=100,itl_ms=10").unwrap();
        assert!(slo.met(100.0, Some(10.0), 1e9));
        assert!(!slo.met(100.1, Some(1.0), 1.0));
        assert!(!slo.met(1.0, Some(10.5), 1.0));
        // A one-token answer has no inter-token latency to miss.
        assert!(slo.met(1.0, None, 1.0));
    }

    #[test]
    fn an_slo_describes_its_set_thresholds_in_order() {
        let slo = Slo::parse("e2e_ms=9000,ttft_ms=500,itl_ms=50").unwrap();
        assert_eq!(slo.describe(), "TTFT ≤ 500 ms, ITL ≤ 50 ms, E2E ≤ 9000 ms");
        assert_eq!(Slo::parse("itl_ms=5").unwrap().describe(), "ITL ≤ 5 ms");
        // A bound far from ordinary is shown in exponent form, not as
        // three hundred digits.
        assert_eq!(
            Slo::parse("ttft_ms=1e-300").unwrap().describe(),
            "TTFT ≤ 1e-300 ms"
        );
    }

    #[test]
    fn class_names_grow_and_are_read_whole() {
        let names = ClassNames::new(&[String::new(), "chat".to_string()]);
        assert_eq!(names.snapshot(), vec![String::new(), "chat".to_string()]);
        names.update(&[String::new(), "chat".into(), "batch".into()]);
        assert_eq!(names.snapshot().len(), 3);
        assert_eq!(names.get(2).as_deref(), Some("batch"));
        // A shorter list (an older view of the source) changes nothing.
        names.update(&[String::new()]);
        assert_eq!(names.snapshot().len(), 3);
    }

    #[test]
    fn goodput_without_an_slo_is_absent_and_empty_counts_are_zero_not_nan() {
        let names = ClassNames::new(&[String::new(), "chat".to_string()]);
        // No SLO at all: nothing is judged, and there is no goodput.
        let none = SloPlan::new(None, &BTreeMap::new(), &BTreeMap::new(), names.clone());
        let mut counter = GoodputCounter::default();
        assert_eq!(counter.slo(&none, 0), None);
        assert_eq!(counter.goodput(&none, 10.0), None);
        // An SLO for `chat` only, while every request is of the default
        // class: no request is under an SLO, so the shares are 0 (not 0/0),
        // and a run of no duration has 0 requests met per second.
        let chat = Slo::parse("ttft_ms=100").unwrap();
        let plan = SloPlan::new(
            None,
            &BTreeMap::from([("chat".to_string(), chat)]),
            &BTreeMap::new(),
            names,
        );
        let mut counter = GoodputCounter::default();
        assert_eq!(counter.slo(&plan, 0), None);
        counter.add(0, Verdict::Completed([false; 3]));
        let g = counter.goodput(&plan, 0.0).expect("an SLO was given");
        assert_eq!((g.requests, g.requests_met), (0, 0));
        assert_eq!((g.met_share, g.requests_per_s), (0.0, 0.0));
        // The summary says `chat` matched nothing instead of "0 of 0".
        assert_eq!(g.classes_without_requests, ["chat"]);
        // A chat request met: the class's entry carries its SLO.
        assert_eq!(counter.slo(&plan, 1), Some(chat));
        counter.add(1, Verdict::Completed([false; 3]));
        let g = counter.goodput(&plan, 2.0).unwrap();
        assert_eq!(g.by_class["chat"].slo, chat);
        assert_eq!((g.requests, g.requests_met, g.requests_per_s), (1, 1, 0.5));
        assert!(g.classes_without_requests.is_empty());
    }

    #[test]
    fn each_threshold_is_exceeded_on_its_own() {
        let slo = Slo::parse("ttft_ms=100,itl_ms=10").unwrap();
        assert_eq!(slo.exceeded(100.0, Some(10.0), 1e9), [false; 3]);
        assert_eq!(slo.exceeded(100.1, Some(10.0), 0.0), [true, false, false]);
        assert_eq!(slo.exceeded(0.0, Some(10.1), 0.0), [false, true, false]);
        // One output token has no TPOT: the ITL bound cannot be exceeded.
        assert_eq!(slo.exceeded(0.0, None, 0.0), [false; 3]);
        let e2e = Slo::parse("e2e_ms=5").unwrap();
        assert_eq!(e2e.exceeded(1e9, Some(1e9), 5.5), [false, false, true]);
    }

    #[test]
    fn the_e2e_threshold_is_met_at_or_below_it_only() {
        let slo = Slo::parse("e2e_ms=2000").unwrap();
        assert!(slo.met(1e9, Some(1e9), 2000.0), "at the threshold");
        assert!(slo.met(1e9, Some(1e9), 1999.9));
        assert!(!slo.met(0.0, Some(0.0), 2000.1), "above it");
    }

    #[test]
    fn the_most_specific_slo_wins() {
        let names = ClassNames::new(&[String::new(), "chat".to_string()]);
        let all = Slo::parse("ttft_ms=1000").ok();
        let named = BTreeMap::from([("chat".to_string(), Slo::parse("ttft_ms=100").unwrap())]);
        let header = BTreeMap::from([
            ("chat".to_string(), Slo::parse("ttft_ms=200").unwrap()),
            ("batch".to_string(), Slo::parse("e2e_ms=60000").unwrap()),
        ]);
        let plan = SloPlan::new(all, &named, &header, names.clone());
        // A class the source learns later is resolved by its name.
        names.update(&[String::new(), "chat".to_string(), "batch".to_string()]);
        assert_eq!(plan.resolve(0).0.unwrap().ttft_ms, Some(1000.0));
        assert_eq!(plan.resolve(0).1, "default");
        assert_eq!(plan.resolve(1).0.unwrap().ttft_ms, Some(100.0));
        assert_eq!(plan.resolve(2).0.unwrap().e2e_ms, Some(60000.0));
        let mut counter = GoodputCounter::default();
        // The second chat request completed over its TTFT bound; a fourth,
        // of the default class, never completed.
        for (class, verdict) in [
            (1, Verdict::Completed([false; 3])),
            (1, Verdict::Completed([true, false, false])),
            (0, Verdict::Completed([false; 3])),
            (0, Verdict::NotCompleted),
        ] {
            assert!(counter.slo(&plan, class).is_some());
            counter.add(class, verdict);
        }
        let g = counter.goodput(&plan, 2.0).unwrap();
        assert_eq!((g.requests, g.requests_met), (4, 2));
        assert_eq!(g.requests_per_s, 1.0);
        assert_eq!(g.by_class["chat"].met_share, 0.5);
        assert_eq!(
            g.missed,
            Missed {
                not_completed: 1,
                ttft: 1,
                itl: 0,
                e2e: 0
            }
        );
        assert!(!g.by_class.contains_key("batch"));
        assert_eq!(g.classes_without_requests, ["batch"]);
    }
}
