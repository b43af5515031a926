//! Links and the transfers that share them (DESIGN decision 7).
//!
//! Every GPU has four directed links: NIC egress and ingress at the
//! fabric's per-GPU bandwidth times the PD-transfer coefficient, and
//! NVLink egress and ingress at the chip's intra-node bandwidth, used when
//! both ends sit on one node. A transfer is one or more flows, each
//! crossing its source's egress and its destination's ingress. Concurrent
//! flows share links max-min fairly (progressive filling), recomputed
//! whenever a flow starts or ends; between those moments every rate is
//! constant, so a flow's completion time is exact.
//!
//! Rack tiers are not modelled: no catalog figure says how a rack's uplinks
//! are oversubscribed, and pdsim does not invent one.

use pdsim_core::SimTime;

/// A directed link.
#[derive(Clone, Debug)]
struct Link {
    bytes_per_s: f64,
    /// Bytes carried so far, for utilisation.
    carried: f64,
}

#[derive(Clone, Debug)]
struct Flow {
    links: [u32; 2],
    remaining: f64,
    rate: f64,
    transfer: u32,
}

/// The network of one run.
#[derive(Clone, Debug, Default)]
pub struct Network {
    links: Vec<Link>,
    flows: Vec<Option<Flow>>,
    free: Vec<u32>,
    active: u32,
    updated: SimTime,
    /// Bytes each link carried in the current window, and finished windows
    /// waiting to be handed out as (window, link, bytes).
    window: u64,
    window_bytes: Vec<f64>,
    /// Links that carried bytes in the current window (possibly repeated),
    /// so closing a window costs the links used, not every GPU's links.
    window_touched: Vec<u32>,
    pub finished_windows: Vec<(u64, u32, f64)>,
    /// Bumped at every change; a completion event carries it, and a stale
    /// one is ignored.
    pub generation: u64,
}

/// Bytes within which a flow counts as done (rounding of rates × time).
const DONE_BYTES: f64 = 1.0;

/// The width of one utilisation window.
pub const WINDOW_NS: u64 = 1_000_000_000;

impl Network {
    /// Adds a link of `bytes_per_s`; returns its index.
    pub fn add_link(&mut self, bytes_per_s: f64) -> u32 {
        self.links.push(Link {
            bytes_per_s: bytes_per_s.max(1.0),
            carried: 0.0,
        });
        self.window_bytes.push(0.0);
        (self.links.len() - 1) as u32
    }

    /// Whether no flow is running.
    pub fn is_idle(&self) -> bool {
        self.active == 0
    }

    /// Moves every flow forward to `now` at its current rate.
    fn advance(&mut self, now: SimTime) {
        // Split the interval at window boundaries so each window's bytes are
        // exact; rates are constant in between. (A window that would end
        // past the last nanosecond never ends.)
        while let Some(end) = (self.window + 1).checked_mul(WINDOW_NS)
            && now.as_ns() >= end
        {
            // A boundary at or before the last update moves nothing
            // (`advance_within` does nothing for no time).
            self.advance_within(SimTime(end));
            self.close_window();
            // With no flow running, every window up to now's stays empty
            // and would be closed with nothing in it: skip them, so an idle
            // stretch costs nothing however long it is.
            if self.active == 0 {
                self.window = self.window.max(now.as_ns() / WINDOW_NS);
            }
        }
        self.advance_within(now);
    }

    fn advance_within(&mut self, now: SimTime) {
        let dt = now.since(self.updated).as_ns() as f64 * 1e-9;
        self.updated = now.max(self.updated);
        if dt <= 0.0 {
            return;
        }
        for flow in self.flows.iter_mut().flatten() {
            let moved = (flow.rate * dt).min(flow.remaining);
            flow.remaining -= moved;
            for link in flow.links {
                self.links[link as usize].carried += moved;
                if self.window_bytes[link as usize] == 0.0 {
                    self.window_touched.push(link);
                }
                self.window_bytes[link as usize] += moved;
            }
        }
    }

    /// Hands out the window's bytes per link, in link order.
    fn close_window(&mut self) {
        self.window_touched.sort_unstable();
        self.window_touched.dedup();
        for &link in &self.window_touched {
            let bytes = &mut self.window_bytes[link as usize];
            if *bytes > 0.0 {
                self.finished_windows.push((self.window, link, *bytes));
                *bytes = 0.0;
            }
        }
        self.window_touched.clear();
        self.window += 1;
    }

    /// Closes the current window at the end of a run.
    pub fn flush(&mut self, now: SimTime) {
        self.advance(now);
        self.close_window();
    }

    /// The capacity of a link in bytes per second.
    pub fn capacity(&self, link: u32) -> f64 {
        self.links[link as usize].bytes_per_s
    }

    /// Max-min fair rates by progressive filling: repeatedly find the link
    /// whose remaining capacity per unfrozen flow is smallest, give its
    /// flows that share, freeze them, and take it from their other links.
    /// Only the links some flow crosses take part, in index order, so the
    /// cost follows the flows rather than the cluster's size and ties still
    /// go to the lower index.
    fn reallocate(&mut self) {
        let mut loaded: Vec<u32> = self.flows.iter().flatten().flat_map(|f| f.links).collect();
        loaded.sort_unstable();
        loaded.dedup();
        let at = |link: u32| {
            loaded
                .binary_search(&link)
                .expect("a flow's link is loaded")
        };
        // Each flow's links as positions in `loaded`.
        let slots: Vec<Option<[usize; 2]>> = self
            .flows
            .iter()
            .map(|f| f.as_ref().map(|f| [at(f.links[0]), at(f.links[1])]))
            .collect();
        let mut left: Vec<f64> = loaded
            .iter()
            .map(|l| self.links[*l as usize].bytes_per_s)
            .collect();
        let mut unfrozen_on: Vec<u32> = vec![0; loaded.len()];
        let mut frozen: Vec<bool> = vec![false; self.flows.len()];
        for flow in slots.iter().flatten() {
            for slot in flow {
                unfrozen_on[*slot] += 1;
            }
        }
        // Until every flow is frozen, when no loaded link has an unfrozen
        // flow left and there is no bottleneck.
        loop {
            // The bottleneck: smallest fair share among loaded links; ties
            // go to the lower index, so the result is deterministic.
            let mut best: Option<(f64, usize)> = None;
            for (i, count) in unfrozen_on.iter().enumerate() {
                if *count > 0 {
                    let share = left[i] / *count as f64;
                    if best.is_none_or(|(b, _)| share < b) {
                        best = Some((share, i));
                    }
                }
            }
            let Some((share, bottleneck)) = best else {
                break;
            };
            for (index, slot) in self.flows.iter_mut().enumerate() {
                let (Some(flow), Some(on)) = (slot, slots[index]) else {
                    continue;
                };
                if frozen[index] || !on.contains(&bottleneck) {
                    continue;
                }
                flow.rate = share;
                frozen[index] = true;
                for link in on {
                    left[link] = (left[link] - share).max(0.0);
                    unfrozen_on[link] -= 1;
                }
            }
        }
    }

    /// Starts a flow of `bytes` over two links for `transfer`.
    pub fn start(&mut self, now: SimTime, links: [u32; 2], bytes: f64, transfer: u32) {
        self.advance(now);
        let flow = Flow {
            links,
            remaining: bytes.max(0.0),
            rate: 0.0,
            transfer,
        };
        match self.free.pop() {
            Some(slot) => self.flows[slot as usize] = Some(flow),
            None => self.flows.push(Some(flow)),
        }
        self.active += 1;
        self.generation += 1;
        self.reallocate();
    }

    /// Finishes every flow that is done at `now`, returning their
    /// transfers (a transfer appears once per finished flow), in flow order.
    pub fn finish_due(&mut self, now: SimTime, done: &mut Vec<u32>) {
        self.advance(now);
        let mut changed = false;
        for (index, slot) in self.flows.iter_mut().enumerate() {
            if slot.as_ref().is_some_and(|f| f.remaining <= DONE_BYTES) {
                let flow = slot.take().expect("checked");
                done.push(flow.transfer);
                self.free.push(index as u32);
                self.active -= 1;
                changed = true;
            }
        }
        if changed {
            self.generation += 1;
            self.reallocate();
        }
    }

    /// When the next flow will be done at current rates.
    pub fn next_completion(&self) -> Option<SimTime> {
        self.flows
            .iter()
            .flatten()
            .filter(|f| f.rate > 0.0)
            .map(|f| {
                let seconds = (f.remaining - DONE_BYTES).max(0.0) / f.rate;
                self.updated + pdsim_core::SimDuration((seconds * 1e9).ceil() as u64)
            })
            .min()
    }

    /// Bytes each link has carried so far.
    pub fn carried(&self) -> Vec<(f64, f64)> {
        self.links
            .iter()
            .map(|l| (l.carried, l.bytes_per_s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Network;
    use pdsim_core::SimTime;

    /// Runs the network to the end, returning (transfer, finish time).
    fn drain(net: &mut Network) -> Vec<(u32, u64)> {
        let mut out = Vec::new();
        let mut done = Vec::new();
        while let Some(t) = net.next_completion() {
            net.finish_due(t, &mut done);
            for d in done.drain(..) {
                out.push((d, t.as_ns()));
            }
        }
        out
    }

    #[test]
    fn every_change_of_the_flows_moves_the_generation_on() {
        // The event loop queues one tick for the next completion and drops
        // a tick whose generation is not the network's: each start and each
        // finish reshapes the rates, so each must move the generation on.
        let mut net = Network::default();
        let (a, b) = (net.add_link(1e9), net.add_link(1e9));
        let mut seen = vec![net.generation];
        net.start(SimTime::ZERO, [a, b], 1e9, 0);
        seen.push(net.generation);
        net.start(SimTime::ZERO, [a, b], 2e9, 1);
        seen.push(net.generation);
        let mut done = Vec::new();
        net.finish_due(net.next_completion().unwrap(), &mut done);
        assert_eq!(done, [0]);
        seen.push(net.generation);
        let distinct: std::collections::BTreeSet<u64> = seen.iter().copied().collect();
        assert_eq!(distinct.len(), seen.len(), "{seen:?}");
    }

    #[test]
    fn one_flow_alone_takes_bytes_over_bandwidth() {
        let mut net = Network::default();
        let a = net.add_link(1e9);
        let b = net.add_link(1e9);
        net.start(SimTime::ZERO, [a, b], 1e9, 0);
        assert_eq!(drain(&mut net), vec![(0, 999_999_999)]);
        // Each of its two links carried the flow's bytes, at its bandwidth.
        let carried = net.carried();
        assert_eq!(carried.len(), 2);
        for (bytes, bandwidth) in carried {
            assert!((bytes - 1e9).abs() < 1e3, "{bytes}");
            assert_eq!(bandwidth, 1e9);
        }
    }

    #[test]
    fn two_equal_flows_on_one_link_each_take_twice_as_long_and_the_first_to_end_frees_its_share() {
        let mut net = Network::default();
        let (src, dst1, dst2) = (net.add_link(1e9), net.add_link(1e9), net.add_link(1e9));
        // Both leave through `src`: each gets half.
        net.start(SimTime::ZERO, [src, dst1], 1e9, 1);
        net.start(SimTime::ZERO, [src, dst2], 1e9, 2);
        let finished = drain(&mut net);
        assert_eq!(finished.len(), 2);
        assert!(
            finished
                .iter()
                .all(|(_, t)| (*t as i64 - 2_000_000_000).abs() <= 2),
            "{finished:?}"
        );
        // A short and a long flow: the short one ends at 2× its solo time,
        // then the long one speeds up to the full link.
        let mut net = Network::default();
        let (src, d1, d2) = (net.add_link(1e9), net.add_link(1e9), net.add_link(1e9));
        net.start(SimTime::ZERO, [src, d1], 0.5e9, 1);
        net.start(SimTime::ZERO, [src, d2], 1.5e9, 2);
        let finished = drain(&mut net);
        assert_eq!(finished[0].0, 1);
        assert!(
            (finished[0].1 as i64 - 1_000_000_000).abs() <= 2,
            "{finished:?}"
        );
        // 1 s at half rate moved 0.5e9 of the long flow; 1e9 remains at full rate.
        assert_eq!(finished[1].0, 2);
        assert!(
            (finished[1].1 as i64 - 2_000_000_000).abs() <= 2,
            "{finished:?}"
        );
    }

    #[test]
    fn max_min_fairness_gives_spare_capacity_to_unconstrained_flows() {
        // Flow A crosses a slow link (0.25 GB/s); B shares A's fast source.
        // A is held to 0.25 by its bottleneck, so B gets the remaining 0.75.
        let mut net = Network::default();
        let (fast, slow, other) = (net.add_link(1e9), net.add_link(0.25e9), net.add_link(1e9));
        net.start(SimTime::ZERO, [fast, slow], 0.25e9, 1);
        net.start(SimTime::ZERO, [fast, other], 0.75e9, 2);
        let finished = drain(&mut net);
        // Within the one byte a flow may finish early by (4 ns at 0.25 GB/s).
        assert!(
            finished
                .iter()
                .all(|(_, t)| (*t as i64 - 1_000_000_000).abs() <= 10),
            "{finished:?}"
        );
    }

    #[test]
    fn an_idle_stretch_of_years_is_skipped_at_once_and_windows_stay_exact() {
        let mut net = Network::default();
        let (a, b) = (net.add_link(1e9), net.add_link(1e9));
        net.start(SimTime::ZERO, [a, b], 0.5e9, 0);
        let end = net.next_completion().unwrap();
        net.finish_due(end, &mut Vec::new());
        // Thirty years later (about 10^9 windows): a second transfer. Were
        // the empty windows closed one by one this would take minutes.
        let later = SimTime(30 * 365 * 86_400 * 1_000_000_000 + 250_000_000);
        net.start(later, [a, b], 1e9, 1);
        let end = net.next_completion().unwrap();
        net.finish_due(end, &mut Vec::new());
        net.flush(end);
        let on_a: Vec<(u64, f64)> = net
            .finished_windows
            .iter()
            .filter(|w| w.1 == a)
            .map(|w| (w.0, w.2))
            .collect();
        let second = later.as_ns() / super::WINDOW_NS;
        assert_eq!(on_a.len(), 3, "{on_a:?}");
        assert_eq!(on_a[0].0, 0);
        assert_eq!((on_a[1].0, on_a[2].0), (second, second + 1));
        assert!((on_a[1].1 - 0.75e9).abs() < 2.0, "{on_a:?}");
        assert!((on_a[2].1 - 0.25e9).abs() < 2.0, "{on_a:?}");
        // Time at the very end of u64 nanoseconds ends no window and
        // does not overflow.
        net.flush(SimTime(u64::MAX));
    }

    #[test]
    fn utilisation_windows_split_bytes_at_second_boundaries() {
        let mut net = Network::default();
        let (a, b) = (net.add_link(1e9), net.add_link(2e9));
        // 2.5 GB at 1 GB/s: full first and second seconds, half the third.
        net.start(SimTime::ZERO, [a, b], 2.5e9, 0);
        let end = net.next_completion().unwrap();
        net.finish_due(end, &mut Vec::new());
        net.flush(end);
        let on_a: Vec<(u64, f64)> = net
            .finished_windows
            .iter()
            .filter(|w| w.1 == a)
            .map(|w| (w.0, w.2))
            .collect();
        assert_eq!(on_a.len(), 3);
        assert!(
            (on_a[0].1 - 1e9).abs() < 2.0 && (on_a[1].1 - 1e9).abs() < 2.0,
            "{on_a:?}"
        );
        assert!((on_a[2].1 - 0.5e9).abs() < 2.0, "{on_a:?}");
        // The same bytes on the 2 GB/s link are half its capacity.
        assert_eq!(net.capacity(b), 2e9);
    }
}
