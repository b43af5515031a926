//! `flowcontrol/saturationdetector/`: how saturated the pool is, as the
//! flow controller's dispatch cycle and the admitter read it.

pub(crate) mod concurrency;
pub(crate) mod utilization;

use crate::cycle::{EndpointView, Router};

/// `concurrency-detector`'s `concurrencyMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConcurrencyMode {
    Requests,
    Tokens,
    Hybrid,
}

/// The saturation detector the flow controller consults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Detector {
    /// `utilization-detector` (`saturationdetector/utilization/detector.go`,
    /// `Saturation`): the mean over endpoints of max(waiting / queue
    /// threshold, KV usage / KV threshold); an endpoint whose metrics are
    /// missing or older than the staleness threshold counts 1.0; no
    /// endpoints → 1.0. `headroom` only shapes its filter role.
    Utilization {
        queue_depth: f64,
        kv_util: f64,
        staleness_ns: u64,
    },
    /// `concurrency-detector` (`saturationdetector/concurrency/detector.go`):
    /// the EPP's in-flight counters against a per-endpoint capacity.
    Concurrency {
        max_concurrency: u64,
        max_tokens: u64,
        mode: ConcurrencyMode,
    },
}

impl Detector {
    /// `Saturation(endpoints)` for one stage's endpoints.
    pub(crate) fn saturation(
        &self,
        set: &[usize],
        views: &[EndpointView],
        router: &Router,
        now_ns: u64,
    ) -> f64 {
        if set.is_empty() {
            return 1.0;
        }
        match *self {
            Detector::Utilization {
                queue_depth,
                kv_util,
                staleness_ns,
            } => utilization::saturation(set, views, queue_depth, kv_util, staleness_ns, now_ns),
            Detector::Concurrency {
                max_concurrency,
                max_tokens,
                mode,
            } => concurrency::saturation(
                set,
                |e| router.inflight(e),
                max_concurrency,
                max_tokens,
                mode,
            ),
        }
    }

    /// Whether the detector reads the scraped metrics (else the EPP's own
    /// in-flight counters).
    pub fn reads_metrics(&self) -> bool {
        matches!(self, Detector::Utilization { .. })
    }

    /// Whether a view counts as fresh for this detector at `now_ns`.
    pub fn fresh(&self, view: &EndpointView, now_ns: u64) -> bool {
        match *self {
            Detector::Utilization { staleness_ns, .. } => view
                .updated_ns
                .is_some_and(|at| now_ns.saturating_sub(at) <= staleness_ns),
            Detector::Concurrency { .. } => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{ConcurrencyMode, Detector};
    use crate::cycle::EndpointView;

    #[test]
    fn only_the_utilization_detector_reads_metrics_and_ages_them() {
        let util = Detector::Utilization {
            queue_depth: 5.0,
            kv_util: 0.8,
            staleness_ns: 100,
        };
        let conc = Detector::Concurrency {
            max_concurrency: 1,
            max_tokens: 1,
            mode: ConcurrencyMode::Requests,
        };
        assert!(util.reads_metrics() && !conc.reads_metrics());
        let view = EndpointView {
            updated_ns: Some(50),
            ..Default::default()
        };
        // Fresh up to the threshold (`<=`), stale after; never scraped is
        // stale; the concurrency detector reads no view.
        assert!(util.fresh(&view, 150) && !util.fresh(&view, 151));
        assert!(!util.fresh(&EndpointView::default(), 0));
        assert!(conc.fresh(&EndpointView::default(), u64::MAX));
    }
}
