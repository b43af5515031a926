//! The EPP's flow-control layer (feature gate `flowControl`), following
//! llm-d-router at `ebab687`: `pkg/epp/flowcontrol/` (controller, processor,
//! registry) and the policy plugins under
//! `pkg/epp/framework/plugins/flowcontrol/`. `research/epp.md` §6.
//!
//! With the gate on, every request goes through
//! `FlowControlAdmissionController.Admit` (`requestcontrol/admission.go`):
//! it is enqueued in the flow registry and waits until the processor's
//! dispatch cycle releases it to the scheduler, its queue-wait budget (TTL)
//! runs out, or the band's capacity refuses it on arrival.
//!
//! pdsim's requests carry no `x-gateway-inference-fairness-id` and no
//! `x-gateway-inference-objective` header, so every request has the
//! default fairness id (`default-flow`) and priority 0: there is exactly
//! one flow, in the priority-0 band. A fairness policy chooses *between
//! flows* of a band; with one flow every registered policy (global-strict,
//! round-robin, program-aware) picks that flow's queue whenever it is not
//! empty, so they reduce to the one queue. The code below still runs the
//! policy's own choice over the band's flows ([`Fairness::pick`]).
//! In-flight eviction (`enableEviction`) revokes only requests of priority
//! below 0 (the runner's fixed sheddable filter), so it never acts on
//! pdsim's.
//!
//! What is modelled and when (`controller/internal/processor.go`, `Run`):
//! the processor runs a dispatch cycle right after each enqueue and on a
//! 1 ms ticker; a cycle dispatches at most one item. A cycle computes the
//! pool's saturation with the configured detector, asks the usage-limit
//! policy for the band ceiling, and holds the head of the line while
//! saturation ≥ ceiling. The detector reads the scraped metrics (which
//! change only at scrapes) or the EPP's own in-flight counters, so the
//! event loop re-runs a cycle only at the ticks after one of those inputs
//! changed, or after a dispatch: a tick where nothing changed would find
//! the same answer. The one exception is the soft-reflective usage-limit
//! policy's alternation, which advances on every cycle: the controller
//! counts the cycles the event loop skipped ([`FlowController::account`])
//! and names the tick at which the alternation opens. Expiry runs on the cleanup sweep, every 1 s
//! (`defaultExpiryCleanupInterval`), which evicts an item once
//! `now ≥ enqueue + TTL` (`isExpired`).

use crate::cycle::{EndpointView, Router};
pub use crate::plugins::flowcontrol::fairness::Fairness;
pub use crate::plugins::flowcontrol::ordering::Ordering;
pub use crate::plugins::flowcontrol::saturationdetector::{ConcurrencyMode, Detector};
use crate::plugins::flowcontrol::usagelimits::SoftTick;
pub use crate::plugins::flowcontrol::usagelimits::UsageLimit;
use crate::plugins::flowcontrol::usagelimits::softreflectiveceiling::alternating;
use crate::role;
use std::collections::{BTreeMap, VecDeque};

/// The processor's dispatch ticker (`processor.go`, `Run`:
/// `NewTicker(time.Millisecond)`).
pub const DISPATCH_TICK_NS: u64 = 1_000_000;
/// The cleanup sweep that evicts expired items
/// (`controller/config.go`, `defaultExpiryCleanupInterval`).
pub const SWEEP_NS: u64 = 1_000_000_000;
/// `defaultRequestTTL` and `defaultNoEndpointRequestTTL` (60 s,
/// `controller/config.go`).
pub const DEFAULT_TTL_NS: u64 = 60_000_000_000;
/// Per-band defaults (`registry/config.go`): 1 GB and 5000 requests; a
/// configured 0 means "use the default".
pub const DEFAULT_BAND_MAX_BYTES: u64 = 1_000_000_000;
pub const DEFAULT_BAND_MAX_REQUESTS: u64 = 5000;
/// The flow controller counts a request's HTTP body bytes
/// (`flowControlRequest.ByteSize` = `RequestSize`). pdsim's requests are
/// tokens, not bodies; the EPP's own conversion between the two is 4 bytes
/// per token (`requestcontrol/dataproducer/tokenizer/estimate.go`,
/// `bytesPerToken`), used here to size a request for the byte limits.
pub const BYTES_PER_TOKEN: u64 = 4;

/// The limits and policies of one priority band (`registry/config.go`,
/// `PriorityBandConfig`, defaults applied).
#[derive(Clone, Debug, PartialEq)]
pub struct Band {
    pub priority: i64,
    pub max_bytes: u64,
    pub max_requests: u64,
    pub fairness: Fairness,
    pub ordering: Ordering,
}

/// The flow-control configuration as the loader resolves it
/// (`config/loader/flowcontrol.go`, `buildFlowControlConfig`).
#[derive(Clone, Debug, PartialEq)]
pub struct FlowControl {
    /// `defaultRequestTTL`; 0 disables expiry while the pool has endpoints.
    pub ttl_ns: u64,
    /// `noEndpointRequestTTL`. pdsim's candidate pool always holds every
    /// pod, so the empty-pool regime never occurs and this is never used.
    pub no_endpoint_ttl_ns: u64,
    /// Global limits; 0: none.
    pub max_bytes: u64,
    pub max_requests: u64,
    /// The band pdsim's requests (priority 0) fall into: `priorityBands`'
    /// priority-0 entry, else a copy of `defaultPriorityBand`, else the
    /// system default (`registry.NewConfig` always provisions band 0).
    pub band: Band,
    /// Priorities of every provisioned band, highest first
    /// (`AllOrderedPriorityLevels`): the configured bands, band 0, and the
    /// priorities of the pool's InferenceObjectives (`syncPriorityBands`
    /// in `controller/inferenceobjective_reconciler.go`; all of them are
    /// protected from the registry's GC). Only band 0 ever holds requests.
    pub priorities: Vec<i64>,
    /// The usage-limit policy, which gives each band its ceiling.
    pub usage_limit: UsageLimit,
    pub detector: Detector,
}

/// One queued request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    /// The caller's handle for the request.
    pub token: u32,
    pub enqueued_ns: u64,
    pub bytes: u64,
    /// Arrival order, breaking enqueue-time ties.
    seq: u64,
}

impl Item {
    /// The ordering policy's key: smaller is served first (its `Less`).
    /// `ttl_ns` is the request TTL (every item has the configured one).
    fn key(&self, ordering: Ordering, ttl_ns: u64) -> (u64, u64, u64) {
        ordering.key(self.enqueued_ns, self.seq, ttl_ns)
    }
}

/// One flow's queue. Every ordering key above grows with arrival order for
/// requests sharing one TTL, so the queue's head (`Peek` of the EPP's heap,
/// `queue/priorityqueue.go`) is its front.
#[derive(Clone, Debug, Default)]
struct FlowQueue {
    items: VecDeque<Item>,
}

/// Why the flow controller refused a request on arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// `QueueOutcomeRejectedCapacity`: a global or band limit would be
    /// exceeded (`processor.go`, `hasCapacity`).
    Capacity,
}

/// The flow controller's state: the priority-0 band's single flow.
#[derive(Clone, Debug)]
pub struct FlowController {
    settings: FlowControl,
    flows: Vec<FlowQueue>,
    last_flow: Option<usize>,
    bytes: u64,
    len: u64,
    seq: u64,
    prefill: Vec<usize>,
    decode: Vec<usize>,
    all: Vec<usize>,
    /// The ceilings buffer a cycle reuses (`ceilingsBuffer`).
    ceilings: Vec<f64>,
    /// The soft-reflective policy's tick, kept only where it can gate band
    /// 0: with a provisioned band above it.
    soft: Option<SoftTick>,
}

/// What started a dispatch cycle (`processor.go`, `Run`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CycleKind {
    /// The processor ran one right after an enqueue.
    Enqueue,
    /// A tick of the 1 ms dispatch ticker (the caller runs it at one of
    /// the ticker's instants).
    Tick,
}

impl FlowController {
    /// A controller over endpoints with these labels.
    pub fn new(settings: &FlowControl, labels: &[BTreeMap<String, String>]) -> FlowController {
        let (mut prefill, mut decode) = (Vec::new(), Vec::new());
        // Where each endpoint counts for the stage saturations
        // (`flowcontrol/controller/internal/processor.go`,
        // `partitionEndpoints`); encode-only and unknown roles get no
        // traffic and count nowhere.
        for (e, l) in labels.iter().enumerate() {
            if role::prefill(l) {
                prefill.push(e);
            }
            if role::decode_stage(l) {
                decode.push(e);
            }
        }
        FlowController {
            settings: settings.clone(),
            flows: vec![FlowQueue::default()],
            last_flow: None,
            bytes: 0,
            len: 0,
            seq: 0,
            prefill,
            decode,
            all: (0..labels.len()).collect(),
            ceilings: Vec::new(),
            soft: (settings.usage_limit == UsageLimit::SoftReflective
                && settings.priorities.first().is_some_and(|p| *p > 0))
            .then_some(SoftTick {
                tick: 0,
                through_ns: 0,
                phase_ns: 0,
            }),
        }
    }

    /// The dispatch ticker's phase, which the soft-reflective tick counts
    /// instants by.
    pub fn set_dispatch_phase(&mut self, phase_ns: u64) {
        if let Some(soft) = &mut self.soft {
            soft.phase_ns = phase_ns;
        }
    }

    /// Counts the dispatch cycles the ticker ran before `now_ns` and the
    /// caller did not, each at the saturation it saw: the caller calls
    /// this before the detector's inputs (the views, the EPP's in-flight
    /// counters) change. In between, the utilization detector's answer
    /// changes only where a view turns stale, at a known instant.
    pub fn account(&mut self, views: &[EndpointView], router: &Router, now_ns: u64) {
        let Some(through) = self.soft.as_ref().map(|s| s.through_ns) else {
            return;
        };
        let mut from = through;
        while from < now_ns {
            let until = self
                .stale_instants(views)
                .filter(|t| *t > from && *t < now_ns)
                .min()
                .unwrap_or(now_ns);
            let saturation = self.saturation(views, router, from);
            if let Some(soft) = self.soft.as_mut()
                && alternating(saturation)
            {
                soft.tick += soft.instants(from, until);
            }
            from = until;
        }
        if let Some(soft) = self.soft.as_mut() {
            soft.through_ns = soft.through_ns.max(now_ns);
        }
    }

    /// The instants at which a view turns stale to the utilization
    /// detector (none for the concurrency detector).
    fn stale_instants<'v>(&self, views: &'v [EndpointView]) -> impl Iterator<Item = u64> + 'v {
        let staleness = match self.settings.detector {
            Detector::Utilization { staleness_ns, .. } => Some(staleness_ns),
            Detector::Concurrency { .. } => None,
        };
        views.iter().filter_map(move |v| stale_at(v, staleness?))
    }

    pub fn settings(&self) -> &FlowControl {
        &self.settings
    }

    /// Requests waiting.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The body size the byte limits count for a prompt of `tokens`.
    pub fn request_bytes(tokens: u64) -> u64 {
        tokens.saturating_mul(BYTES_PER_TOKEN)
    }

    /// `Processor.enqueue`: the capacity check (global limits, when set,
    /// then the band's), then the request joins its flow's queue.
    pub fn enqueue(&mut self, token: u32, now_ns: u64, bytes: u64) -> Result<(), Refusal> {
        let s = &self.settings;
        let over = |limit: u64, used: u64, add: u64| limit > 0 && used.saturating_add(add) > limit;
        if over(s.max_bytes, self.bytes, bytes)
            || over(s.max_requests, self.len, 1)
            || over(s.band.max_bytes, self.bytes, bytes)
            || over(s.band.max_requests, self.len, 1)
        {
            return Err(Refusal::Capacity);
        }
        self.seq += 1;
        self.flows[0].items.push_back(Item {
            token,
            enqueued_ns: now_ns,
            bytes,
            seq: self.seq,
        });
        self.bytes += bytes;
        self.len += 1;
        Ok(())
    }

    /// The pool's saturation as a dispatch cycle computes it: the maximum
    /// of the prefill and decode stage saturations over the stages that
    /// have endpoints, else the detector over the whole pool.
    pub fn saturation(&self, views: &[EndpointView], router: &Router, now_ns: u64) -> f64 {
        let d = &self.settings.detector;
        let mut saturation: f64 = -1.0;
        for set in [&self.prefill, &self.decode] {
            if !set.is_empty() {
                saturation = saturation.max(d.saturation(set, views, router, now_ns));
            }
        }
        if saturation < 0.0 {
            saturation = d.saturation(&self.all, views, router, now_ns);
        }
        saturation
    }

    /// One `dispatchCycle`: bands from the highest priority down, each
    /// gated by its ceiling, the walk stopping at the first gated band
    /// (`dispatchCycle`: "Stop the dispatch cycle entirely"); the band's fairness policy
    /// picks a flow and the ordering policy its head. Returns the request
    /// released to the scheduler, if any.
    pub fn dispatch(
        &mut self,
        views: &[EndpointView],
        router: &Router,
        now_ns: u64,
    ) -> Option<u32> {
        self.dispatch_cycle(views, router, now_ns, CycleKind::Tick)
            .0
    }

    /// [`FlowController::dispatch`] for a cycle of `kind`; also returns,
    /// when the soft-reflective policy's alternation held band 0, the
    /// ticker instant at which it next opens if the saturation stays.
    pub fn dispatch_cycle(
        &mut self,
        views: &[EndpointView],
        router: &Router,
        now_ns: u64,
        kind: CycleKind,
    ) -> (Option<u32>, Option<u64>) {
        // The policy runs on every cycle, queued requests or not.
        self.account(views, router, now_ns);
        let saturation = self.saturation(views, router, now_ns);
        let open = match self.soft.as_mut() {
            Some(soft) => {
                let open = soft.call(saturation);
                if kind == CycleKind::Tick {
                    soft.through_ns = now_ns.saturating_add(1);
                }
                open
            }
            None => false,
        };
        if self.len == 0 {
            return (None, None);
        }
        // Bands above band 0 hold nothing, so the walk dispatches from
        // band 0 unless a band at or above it is gated first; bands below
        // it are never reached with band 0 non-empty.
        let mut ceilings = std::mem::take(&mut self.ceilings);
        let s = &self.settings;
        s.usage_limit
            .ceilings(saturation, &s.priorities, open, &mut ceilings);
        let gated = s
            .priorities
            .iter()
            .zip(&ceilings)
            .take_while(|(p, _)| **p >= 0)
            .any(|(_, c)| saturation >= *c);
        self.ceilings = ceilings;
        if gated {
            // Head-of-line blocking. Below full saturation only the
            // alternation gates, and it opens on a known tick.
            let retry = self
                .soft
                .as_ref()
                .filter(|_| alternating(saturation))
                .map(|soft| soft.next_open_ns(saturation));
            return (None, retry);
        }
        let s = &self.settings.band;
        let (flows, ttl_ns) = (&self.flows, self.settings.ttl_ns);
        let head = |i: usize| {
            flows[i]
                .items
                .front()
                .map(|item| item.key(s.ordering, ttl_ns))
        };
        let Some(flow) = s.fairness.pick(flows.len(), head, self.last_flow) else {
            return (None, None);
        };
        self.last_flow = Some(flow);
        let Some(item) = self.flows[flow].items.pop_front() else {
            return (None, None);
        };
        self.bytes -= item.bytes;
        self.len -= 1;
        (Some(item.token), None)
    }

    /// The cleanup sweep at `now_ns`: every item whose budget ran out
    /// (`now ≥ enqueue + TTL`; a zero TTL never expires) is evicted;
    /// returns their tokens in queue order.
    pub fn expire(&mut self, now_ns: u64, out: &mut Vec<u32>) {
        let ttl_ns = self.settings.ttl_ns;
        for flow in &mut self.flows {
            while let Some(head) = flow.items.front() {
                if ttl_ns == 0 || now_ns < head.enqueued_ns.saturating_add(ttl_ns) {
                    break;
                }
                self.bytes -= head.bytes;
                self.len -= 1;
                out.push(head.token);
                flow.items.pop_front();
            }
        }
    }

    /// The client of a queued request disconnected: the controller evicts
    /// it (`QueueOutcomeEvictedContextCancelled`, which the EPP answers with
    /// a 503, "client disconnected": `pkg/epp/flowcontrol/`'s processor
    /// checks each item's context in its sweep, and the item is finalized
    /// as soon as its context is cancelled). Returns whether `token` was
    /// queued.
    pub fn cancel(&mut self, token: u32) -> bool {
        for flow in &mut self.flows {
            if let Some(index) = flow.items.iter().position(|i| i.token == token) {
                if let Some(item) = flow.items.remove(index) {
                    self.bytes -= item.bytes;
                    self.len -= 1;
                }
                return true;
            }
        }
        false
    }

    /// When the oldest waiting item's budget runs out, if it can.
    pub fn next_expiry_ns(&self) -> Option<u64> {
        let ttl_ns = self.settings.ttl_ns;
        if ttl_ns == 0 {
            return None;
        }
        self.flows
            .iter()
            .filter_map(|f| f.items.front())
            .map(|i| i.enqueued_ns.saturating_add(ttl_ns))
            .min()
    }

    /// The next instant after `now_ns` at which a fresh view turns stale
    /// and so lowers the saturation: a stale endpoint counts 1.0, less than
    /// an overloaded one's fresh ratio; any other going stale only raises
    /// it. `None` when no such instant is ahead.
    pub fn next_stale_ns(&self, views: &[EndpointView], now_ns: u64) -> Option<u64> {
        let Detector::Utilization {
            queue_depth,
            kv_util,
            staleness_ns,
        } = self.settings.detector
        else {
            return None;
        };
        views
            .iter()
            .filter(|v| (v.waiting as f64 / queue_depth).max(v.kv_usage / kv_util) > 1.0)
            .filter_map(|v| stale_at(v, staleness_ns))
            .filter(|t| *t > now_ns)
            .min()
    }

    pub fn detector(&self) -> &Detector {
        &self.settings.detector
    }
}

/// The first instant at which `view` is stale to a detector that trusts a
/// scrape for `staleness_ns`; `None` for a view never scraped.
fn stale_at(view: &EndpointView, staleness_ns: u64) -> Option<u64> {
    Some(
        view.updated_ns?
            .saturating_add(staleness_ns)
            .saturating_add(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RouterInputs;
    use crate::config::load_config;

    fn settings(detector: Detector) -> FlowControl {
        FlowControl {
            ttl_ns: DEFAULT_TTL_NS,
            no_endpoint_ttl_ns: DEFAULT_TTL_NS,
            max_bytes: 0,
            max_requests: 0,
            band: Band {
                priority: 0,
                max_bytes: DEFAULT_BAND_MAX_BYTES,
                max_requests: DEFAULT_BAND_MAX_REQUESTS,
                fairness: Fairness::GlobalStrict,
                ordering: Ordering::Fcfs,
            },
            priorities: vec![0],
            usage_limit: UsageLimit::Static { threshold: 1.0 },
            detector,
        }
    }

    const UTIL: Detector = Detector::Utilization {
        queue_depth: 5.0,
        kv_util: 0.8,
        staleness_ns: 200_000_000,
    };

    fn router(n: usize) -> Router {
        let text = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- type: concurrency-detector\n  parameters: {maxConcurrency: 2}\n";
        let inputs = RouterInputs {
            flags: Default::default(),
            config: load_config("t", text, false).unwrap(),
            config_origin: "t".into(),
            manifests: Default::default(),
        };
        Router::new(&inputs, vec![BTreeMap::new(); n], 1)
    }

    fn view(waiting: u32, kv: f64, at: u64) -> EndpointView {
        EndpointView {
            waiting,
            kv_usage: kv,
            updated_ns: Some(at),
            ..Default::default()
        }
    }

    #[test]
    fn utilization_is_the_mean_of_the_worst_ratio_and_stale_counts_one() {
        let fc = FlowController::new(&settings(UTIL), &[BTreeMap::new(), BTreeMap::new()]);
        let r = router(2);
        // 10/5 = 2.0 and max(0, 0.4/0.8) = 0.5: mean 1.25.
        let views = [view(10, 0.0, 0), view(0, 0.4, 0)];
        assert!((fc.saturation(&views, &r, 0) - 1.25).abs() < 1e-12);
        // 200 ms old is still fresh; a nanosecond more is stale (`>`).
        assert!((fc.saturation(&views, &r, 200_000_000) - 1.25).abs() < 1e-12);
        // Both stale: 1.0 each, so a stale overloaded pod lowers the mean.
        assert_eq!(fc.saturation(&views, &r, 200_000_001), 1.0);
        // Never scraped: 1.0.
        let unscraped = [EndpointView::default(), EndpointView::default()];
        assert_eq!(fc.saturation(&unscraped, &r, 0), 1.0);
        // Only the overloaded pod going stale lowers the mean.
        assert_eq!(fc.next_stale_ns(&views, 5), Some(200_000_001));
        let calm = [view(1, 0.0, 0), view(0, 0.4, 7)];
        assert_eq!(fc.next_stale_ns(&calm, 5), None);
        // A pod at exactly 1.0 (5 waiting of 5) counts 1.0 stale or fresh:
        // its going stale changes nothing, so it names no instant.
        let full = [view(5, 0.0, 0), view(0, 0.8, 3)];
        assert_eq!(fc.next_stale_ns(&full, 5), None);
        // A pod overloaded by its KV cache alone (0.96 / 0.8 = 1.2) does.
        let kv_full = [view(0, 0.96, 9), view(0, 0.0, 3)];
        assert_eq!(fc.next_stale_ns(&kv_full, 5), Some(200_000_010));
    }

    #[test]
    fn stages_are_saturated_separately_and_the_worse_one_counts() {
        let role = |r: &str| BTreeMap::from([("llm-d.ai/role".to_string(), r.to_string())]);
        let labels = [role("prefill"), role("decode"), role("encode")];
        let fc = FlowController::new(&settings(UTIL), &labels);
        let r = router(3);
        // Prefill stage 0.2, decode stage 0.6; the encode pod (overloaded)
        // counts nowhere.
        let views = [view(1, 0.0, 0), view(3, 0.0, 0), view(50, 1.0, 0)];
        assert!((fc.saturation(&views, &r, 0) - 0.6).abs() < 1e-12);
    }

    #[test]
    fn the_queue_holds_while_saturated_and_releases_in_arrival_order() {
        let mut fc = FlowController::new(&settings(UTIL), &[BTreeMap::new()]);
        let r = router(1);
        for token in [7, 3, 9] {
            fc.enqueue(token, 100, 10).unwrap();
        }
        assert_eq!(fc.len(), 3);
        // Waiting 5 of a threshold of 5: saturation 1.0 ≥ ceiling 1.0.
        let full = [view(5, 0.0, 0)];
        assert_eq!(fc.dispatch(&full, &r, 0), None);
        assert_eq!(fc.len(), 3);
        let room = [view(4, 0.0, 0)];
        assert_eq!(fc.dispatch(&room, &r, 0), Some(7));
        assert_eq!(fc.dispatch(&room, &r, 0), Some(3));
        assert_eq!(fc.dispatch(&room, &r, 0), Some(9));
        assert_eq!(fc.dispatch(&room, &r, 0), None);
        assert!(fc.is_empty());
    }

    #[test]
    fn a_cancelled_request_leaves_the_queue_and_frees_its_bytes() {
        let mut s = settings(UTIL);
        s.band.max_bytes = 30;
        let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
        let r = router(1);
        for token in [7, 3, 9] {
            fc.enqueue(token, 100, 10).unwrap();
        }
        assert_eq!(fc.enqueue(4, 100, 10), Err(Refusal::Capacity));
        assert!(fc.cancel(3));
        assert!(!fc.cancel(3), "cancelled once");
        assert_eq!(fc.len(), 2);
        assert!(fc.enqueue(4, 100, 10).is_ok(), "its bytes are free again");
        let room = [view(0, 0.0, 0)];
        assert_eq!(fc.dispatch(&room, &r, 0), Some(7));
        assert_eq!(fc.dispatch(&room, &r, 0), Some(9));
        assert_eq!(fc.dispatch(&room, &r, 0), Some(4));
        assert!(fc.is_empty());
    }

    #[test]
    fn a_lower_ceiling_holds_earlier() {
        let mut s = settings(UTIL);
        s.usage_limit = UsageLimit::Static { threshold: 0.5 };
        let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
        let r = router(1);
        fc.enqueue(1, 0, 1).unwrap();
        assert_eq!(fc.dispatch(&[view(3, 0.0, 0)], &r, 0), None, "0.6 ≥ 0.5");
        assert_eq!(fc.dispatch(&[view(2, 0.0, 0)], &r, 0), Some(1), "0.4 < 0.5");
    }

    #[test]
    fn priority_holdback_gates_band_zero_at_its_rank_among_the_provisioned_bands() {
        use crate::plugins::flowcontrol::usagelimits::{Domain, PriorityHoldback};
        // Saturation is waiting / 5 on the one endpoint.
        let dispatches = |priorities: &[i64], domain: Domain, waiting: u32| {
            let mut s = settings(UTIL);
            s.priorities = priorities.to_vec();
            s.usage_limit = UsageLimit::PriorityHoldback(PriorityHoldback {
                min_ceiling: 0.4,
                max_ceiling: 0.9,
                domain,
            });
            let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
            fc.enqueue(1, 0, 1).unwrap();
            fc.dispatch(&[view(waiting, 0.0, 0)], &router(1), 0)
                .is_some()
        };
        // Rank over [100, 0, -10]: band 0's ceiling is 0.9 − 0.5/2 = 0.65.
        assert!(dispatches(&[100, 0, -10], Domain::Rank, 3), "0.6 < 0.65");
        assert!(!dispatches(&[100, 0, -10], Domain::Rank, 4), "0.8 ≥ 0.65");
        // Band 0 highest of [0, -10]: 0.9.
        assert!(dispatches(&[0, -10], Domain::Rank, 4), "0.8 < 0.9");
        // Lowest of [100, 0]: minCeiling.
        assert!(!dispatches(&[100, 0], Domain::Rank, 2), "0.4 ≥ 0.4");
        assert!(dispatches(&[100, 0], Domain::Rank, 1), "0.2 < 0.4");
        // Alone: maxCeiling.
        assert!(dispatches(&[0], Domain::Rank, 4), "0.8 < 0.9");
        assert!(!dispatches(&[0], Domain::Rank, 5), "1.0 ≥ 0.9");
        // Value over [100, 0, -10]: 0.4 + (10/110) · 0.5 ≈ 0.445.
        assert!(dispatches(&[100, 0, -10], Domain::Value, 2), "0.4 < 0.445");
        assert!(!dispatches(&[100, 0, -10], Domain::Value, 3), "0.6 ≥ 0.445");
    }

    #[test]
    fn soft_reflective_ceiling_holds_band_zero_only_at_full_saturation_when_it_is_highest() {
        let dispatches = |waiting: u32| {
            let mut s = settings(UTIL);
            s.priorities = vec![0, -1, -2];
            s.usage_limit = UsageLimit::SoftReflective;
            let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
            fc.enqueue(1, 0, 1).unwrap();
            fc.dispatch(&[view(waiting, 0.0, 0)], &router(1), 0)
                .is_some()
        };
        // The lower bands' ceilings (1 − s/2, 1 − s) are passed at 0.8, but
        // they sit below band 0, whose ceiling is 1.0.
        assert!(dispatches(4));
        assert!(!dispatches(5), "1.0 ≥ 1.0");
    }

    #[test]
    fn soft_reflective_ceiling_alternates_band_zero_below_a_higher_band() {
        // Bands [10, 0]: band 0 is rank 1 of 2, its reflective ceiling
        // 1 − s. One endpoint, saturation waiting / 5: 4 waiting is 0.8,
        // past the ceiling (0.2) and below 1, so band 0 alternates with
        // period round(0.8 / 0.2) = 4, open on ticks 4, 8, …
        let mut s = settings(UTIL);
        s.priorities = vec![10, 0];
        s.usage_limit = UsageLimit::SoftReflective;
        let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
        fc.set_dispatch_phase(0);
        let r = router(1);
        for token in [1, 2, 3] {
            fc.enqueue(token, 0, 1).unwrap();
        }
        let ms = |n: u64| n * 1_000_000;
        let busy = [view(4, 0.0, 0)];
        // Tick 1 at 0 ms: closed; the alternation opens on the third
        // instant after it.
        let mut cycle =
            |views: &[EndpointView], at: u64, kind| fc.dispatch_cycle(views, &r, at, kind);
        assert_eq!(cycle(&busy, 0, CycleKind::Tick), (None, Some(ms(3))));
        // The ticks at 1 and 2 ms ran without the caller; at 3 ms the
        // fourth opens.
        assert_eq!(cycle(&busy, ms(3), CycleKind::Tick), (Some(1), None));
        assert_eq!(cycle(&busy, ms(4), CycleKind::Tick), (None, Some(ms(7))));
        // An enqueue's cycle counts too: the tick at 5 ms (skipped) and the
        // enqueue's own make 7, so the instant at 6 ms is the eighth.
        assert_eq!(
            cycle(&busy, 5_500_000, CycleKind::Enqueue),
            (None, Some(ms(6)))
        );
        assert_eq!(cycle(&busy, ms(6), CycleKind::Tick), (Some(2), None));
        // Below the regime (2 waiting: 0.4 < 1 − 0.4) band 0 is open on
        // every cycle; at full saturation closed with no tick to wait for.
        assert_eq!(
            cycle(&[view(2, 0.0, 0)], ms(7), CycleKind::Tick),
            (Some(3), None)
        );
        fc.enqueue(4, ms(7), 1).unwrap();
        let mut cycle =
            |views: &[EndpointView], at: u64, kind| fc.dispatch_cycle(views, &r, at, kind);
        assert_eq!(
            cycle(&[view(5, 0.0, 0)], ms(8), CycleKind::Tick),
            (None, None)
        );
        // The view turns stale after 200 ms, so saturation is 1.0 from
        // then: of the instants 9 ms … 300 ms only 9 … 200 ms (192 of
        // them) count at 0.8. Tick 8 + 192 = 200 at 300 ms, where the
        // cycle (stale: 1.0) adds none.
        assert_eq!(cycle(&busy, ms(300), CycleKind::Tick), (None, None));
        assert_eq!(fc.soft.as_ref().unwrap().tick, 200);
    }

    #[test]
    fn the_soft_tick_counts_the_instants_of_the_tickers_own_phase() {
        // The same alternation as above with the ticker at phase 0.4 ms:
        // instants at 0.4, 1.4, … ms, so the open tick lands 0.4 ms later.
        let mut s = settings(UTIL);
        s.priorities = vec![10, 0];
        s.usage_limit = UsageLimit::SoftReflective;
        let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
        fc.set_dispatch_phase(400_000);
        fc.enqueue(1, 0, 1).unwrap();
        let busy = [view(4, 0.0, 0)];
        assert_eq!(
            fc.dispatch_cycle(&busy, &router(1), 400_000, CycleKind::Tick),
            (None, Some(3_400_000))
        );
    }

    #[test]
    fn a_pool_without_prefill_or_decode_pods_is_saturated_as_a_whole() {
        let role = |r: &str| BTreeMap::from([("llm-d.ai/role".to_string(), r.to_string())]);
        let r = router(2);
        // An idle decode pod and an overloaded encode pod: the decode
        // stage's 0.0 counts (the encode pod is no stage's).
        let fc = FlowController::new(&settings(UTIL), &[role("decode"), role("encode")]);
        let views = [view(0, 0.0, 0), view(50, 1.0, 0)];
        assert_eq!(fc.saturation(&views, &r, 0), 0.0);
        // With no prefill or decode pod at all, the whole pool: the mean
        // of max(5/5, 1.0/0.8) = 1.25 and 50/5 = 10.
        let fc = FlowController::new(&settings(UTIL), &[role("encode"), role("encode")]);
        let views = [view(5, 1.0, 0), view(50, 0.0, 0)];
        assert!((fc.saturation(&views, &r, 0) - (1.25 + 10.0) / 2.0).abs() < 1e-12);
    }

    #[test]
    fn dispatched_and_expired_requests_give_their_bytes_back() {
        let mut s = settings(UTIL);
        s.band.max_bytes = 20;
        s.ttl_ns = 1_000;
        let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
        let r = router(1);
        assert!(fc.is_empty());
        fc.enqueue(1, 0, 10).unwrap();
        fc.enqueue(2, 500, 10).unwrap();
        assert!(!fc.is_empty());
        assert_eq!(fc.enqueue(3, 500, 10), Err(Refusal::Capacity));
        // A dispatch frees its 10 bytes: another fits, and no more.
        assert_eq!(fc.dispatch(&[view(0, 0.0, 0)], &r, 600), Some(1));
        fc.enqueue(3, 600, 10).unwrap();
        assert_eq!(fc.enqueue(4, 600, 10), Err(Refusal::Capacity));
        // Expiry frees the expired request's bytes too.
        let mut out = Vec::new();
        fc.expire(1_500, &mut out);
        assert_eq!(out, [2]);
        fc.enqueue(4, 1_500, 10).unwrap();
        assert_eq!(fc.enqueue(5, 1_500, 10), Err(Refusal::Capacity));
        // Exactly full: 20 of 20 bytes, so not one byte more.
        assert_eq!(fc.enqueue(5, 1_500, 1), Err(Refusal::Capacity));
    }

    #[test]
    fn ttl_expiry_takes_items_whose_budget_ran_out() {
        let mut s = settings(UTIL);
        s.ttl_ns = 1_000;
        let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
        fc.enqueue(1, 0, 1).unwrap();
        fc.enqueue(2, 500, 1).unwrap();
        assert_eq!(fc.next_expiry_ns(), Some(1_000));
        let mut out = Vec::new();
        fc.expire(999, &mut out);
        assert!(out.is_empty());
        fc.expire(1_000, &mut out);
        assert_eq!(out, vec![1], "now ≥ enqueue + TTL expires");
        assert_eq!(fc.next_expiry_ns(), Some(1_500));
        fc.expire(10_000, &mut out);
        assert_eq!(out, vec![1, 2]);
        assert!(fc.is_empty());
        // A zero TTL never expires.
        s.ttl_ns = 0;
        let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
        fc.enqueue(1, 0, 1).unwrap();
        fc.expire(u64::MAX, &mut out);
        assert_eq!(fc.len(), 1);
        assert_eq!(fc.next_expiry_ns(), None);
    }

    #[test]
    fn capacity_limits_refuse_on_arrival() {
        let mut s = settings(UTIL);
        s.band.max_requests = 2;
        let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
        assert!(fc.enqueue(1, 0, 10).is_ok());
        assert!(fc.enqueue(2, 0, 10).is_ok());
        assert_eq!(fc.enqueue(3, 0, 10), Err(Refusal::Capacity));
        // Bytes: the band's limit, then a tighter global one.
        let mut s = settings(UTIL);
        s.band.max_bytes = 25;
        let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
        assert!(fc.enqueue(1, 0, 10).is_ok());
        assert!(fc.enqueue(2, 0, 15).is_ok(), "exactly at the limit");
        assert_eq!(fc.enqueue(3, 0, 1), Err(Refusal::Capacity));
        s.max_bytes = 12;
        let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
        assert!(fc.enqueue(1, 0, 10).is_ok());
        assert_eq!(fc.enqueue(2, 0, 3), Err(Refusal::Capacity));
        // Dispatch frees room.
        let r = router(1);
        assert_eq!(fc.dispatch(&[view(0, 0.0, 0)], &r, 0), Some(1));
        assert!(fc.enqueue(2, 0, 3).is_ok());
        assert_eq!(FlowController::request_bytes(1000), 4000);
    }

    #[test]
    fn the_concurrency_detector_reads_the_epp_in_flight_counters() {
        let s = settings(Detector::Concurrency {
            max_concurrency: 2,
            max_tokens: 1_000_000,
            mode: ConcurrencyMode::Requests,
        });
        let mut fc = FlowController::new(&s, &[BTreeMap::new()]);
        let mut r = router(1);
        let views = [EndpointView::default()];
        let prompt = pdsim_core::Prompt::new(vec![pdsim_core::Segment { id: 1, tokens: 64 }]);
        for token in 0..3 {
            fc.enqueue(token, 0, 1).unwrap();
        }
        let mut tickets = Vec::new();
        while let Some(_token) = fc.dispatch(&views, &r, 0) {
            tickets.push(r.pick(&prompt, &views).unwrap().ticket);
        }
        assert_eq!(tickets.len(), 2, "two in flight saturate a capacity of 2");
        assert_eq!(fc.saturation(&views, &r, 0), 1.0);
        r.end_of_stream(&mut tickets[0]);
        assert_eq!(fc.dispatch(&views, &r, 0), Some(2));
    }

    #[test]
    fn edf_and_slo_deadline_serve_fcfs_order_without_deadlines() {
        for ordering in [Ordering::Edf, Ordering::SloDeadline, Ordering::Fcfs] {
            let a = Item {
                token: 1,
                enqueued_ns: 5,
                bytes: 0,
                seq: 1,
            };
            let b = Item {
                token: 2,
                enqueued_ns: 9,
                seq: 2,
                ..a
            };
            assert!(
                a.key(ordering, DEFAULT_TTL_NS) < b.key(ordering, DEFAULT_TTL_NS),
                "{ordering:?}"
            );
        }
    }
}
