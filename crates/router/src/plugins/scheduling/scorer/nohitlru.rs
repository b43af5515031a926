//! no-hit-lru-scorer (`scheduling/scorer/nohitlru/no_hit_lru.go`).

use super::Scorer;
use crate::config::Plugin;
use crate::plugins::{Cycle, PrefixSource, param_f64};
use std::collections::VecDeque;

/// Its LRU of endpoints, least recently used first, and whether the
/// current request was cold when it last scored it (its per-request plugin
/// state, `coldRequestState`).
#[derive(Clone, Debug)]
pub(crate) struct NoHitLruScorer {
    pub(crate) lru: VecDeque<usize>,
    /// `lruSize` of at least 1, else 1024 (`NewNoHitLRU`).
    pub(crate) size: usize,
    pub(crate) cold: Option<bool>,
    source: PrefixSource,
}

impl NoHitLruScorer {
    pub fn new(plugin: &Plugin, source: PrefixSource) -> NoHitLruScorer {
        NoHitLruScorer {
            lru: VecDeque::new(),
            size: param_f64(plugin, "lruSize")
                .filter(|v| *v >= 1.0)
                .unwrap_or(1024.0) as usize,
            cold: None,
            source,
        }
    }

    /// Whether no candidate holds any of the prompt's prefix
    /// (`isColdRequest` looks only at the endpoints it is asked to score).
    fn is_cold(&self, cycle: &Cycle<'_, '_>, candidates: &[usize]) -> bool {
        let info = cycle.match_info(self.source);
        candidates.iter().all(|c| info.matches[*c] == 0)
    }

    /// A new request: no Score has run for it yet.
    pub fn begin_request(&mut self) {
        self.cold = None;
    }

    /// PreRequest: a request its last Score found cold touches the primary
    /// target, then the `prefill` profile's.
    pub fn pre_request(&mut self, targets: &[usize]) {
        if self.cold != Some(true) {
            return;
        }
        for &target in targets {
            self.lru.retain(|e| *e != target);
            self.lru.push_back(target);
            while self.lru.len() > self.size {
                self.lru.pop_front();
            }
        }
    }
}

impl Scorer for NoHitLruScorer {
    /// Warm (some candidate has the prefix): 0.5 everywhere. Cold:
    /// never-used endpoints first in input order, then the least recently
    /// used (`scoreColdRequestByLRU`).
    fn score(&self, cycle: &Cycle<'_, '_>, candidates: &[usize], out: &mut Vec<f64>) {
        let n = candidates.len();
        if !self.is_cold(cycle, candidates) {
            out.resize(n, 0.5);
        } else if n == 1 {
            out.push(1.0);
        } else {
            let used: Vec<usize> = self
                .lru
                .iter()
                .copied()
                .filter(|e| candidates.contains(e))
                .collect();
            let never = candidates.iter().filter(|c| !used.contains(c)).count();
            let mut never_index = 0;
            for c in candidates {
                let rank = match used.iter().position(|u| u == c) {
                    Some(position) => never + position,
                    None => {
                        never_index += 1;
                        never_index - 1
                    }
                };
                out.push((1.0 - rank as f64 / (n - 1) as f64).max(0.0));
            }
        }
    }

    /// `Score` writes whether the request is cold over these candidates; a
    /// later profile's call overwrites it.
    fn scored(&mut self, cycle: &Cycle<'_, '_>, candidates: &[usize]) {
        self.cold = Some(self.is_cold(cycle, candidates));
    }
}
