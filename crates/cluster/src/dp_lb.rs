//! vLLM's data-parallel load balancing behind one endpoint: the API servers
//! in front of a pod's (internal mode) or a node's (hybrid mode) ranks, each
//! a `DPLBAsyncMPClient` (`vllm/v1/engine/core_client.py`) choosing the rank
//! that gets a request (`get_core_engine_for_request`). External mode gives
//! every rank its own endpoint, so nothing is balanced here.
//!
//! As vLLM runs it:
//!
//! * The serve command starts one API server per rank the endpoint fronts
//!   (`api_server_count` defaults to `data_parallel_size` with internal
//!   balancing and to `data_parallel_size_local` with hybrid,
//!   `vllm/entrypoints/cli/serve.py`), or one with the Rust frontend; that
//!   count is `client_count`, and API server `i` starts its scans at rank
//!   `engines · i // client_count` (`eng_start_index`).
//! * Each sees the ranks' (waiting, running, KV usage) as the DP coordinator
//!   last published them (`vllm/v1/engine/coordinator.py`, at most every
//!   `min_stats_update_interval_ms` = 100 ms while they change), and adds
//!   `client_count` to the waiting count of each rank it picks until the
//!   next publication.
//! * The score, by release ([`DpLbRule`]): up to 0.15.1 `4 · waiting +
//!   running`; from 0.29.0 (and in 0.30.0, which vllm-rbln 0.12.0 builds on)
//!   `max(client_count · in-flight, waiting + running)`, plus
//!   `waiting · 6 · max(0, KV usage − 0.5)` when requests wait, where
//!   in-flight is the API server's own unfinished requests on the rank, and
//!   the scan's start moves on by one rank after every pick. The first rank
//!   with the lowest score in scan order wins.
//!
//! Two things are modelled, not read from vLLM: which API server a request
//! reaches (the kernel spreads connections over the processes sharing the
//! port; pdsim hands an endpoint's requests to its API servers in turn, the
//! even spread that gives on average), and when the coordinator publishes
//! (pdsim takes the ranks' counts at the first pick at least 100 ms after
//! the last publication, rather than on the coordinator's own timer).

use pdsim_core::SimTime;

/// Publications of the DP coordinator are at least this far apart
/// (`min_stats_update_interval_ms`, `vllm/v1/engine/coordinator.py`).
const PUBLISH_INTERVAL_NS: u64 = 100_000_000;

/// How an API server scores a rank, by release.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DpLbRule {
    /// `waiting · 4 + running` (vLLM 0.10.2 to 0.15.1).
    WaitingTimesFourPlusRunning,
    /// The greater of the scaled in-flight count and `waiting + running`,
    /// plus the KV-pressure penalty on waiting requests, the scan's start
    /// rotating (vLLM 0.29.0, 0.31.0).
    InflightAndKvPressure,
}

/// A rank's load as the coordinator publishes it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RankLoad {
    pub waiting: u64,
    pub running: u64,
    pub kv_usage: f64,
}

#[derive(Clone, Debug)]
struct Client {
    start: usize,
    counts: Vec<RankLoad>,
    inflight: Vec<u32>,
}

/// The API servers of one endpoint with more than one rank.
#[derive(Clone, Debug)]
pub struct Balancer {
    rule: DpLbRule,
    published: Option<SimTime>,
    next_client: usize,
    clients: Vec<Client>,
}

impl Balancer {
    /// The `servers` API servers (at least one) of an endpoint fronting
    /// `ranks` ranks.
    pub fn new(rule: DpLbRule, ranks: usize, servers: usize) -> Balancer {
        let servers = servers.max(1);
        Balancer {
            rule,
            published: None,
            next_client: 0,
            clients: (0..servers)
                .map(|i| Client {
                    start: ranks * i / servers,
                    counts: vec![RankLoad::default(); ranks],
                    inflight: vec![0; ranks],
                })
                .collect(),
        }
    }

    /// Picks the rank (0-based within the endpoint) for a request arriving
    /// `now`, and the API server that picked it; `live` gives a rank's load
    /// when the coordinator publishes.
    pub fn pick(&mut self, now: SimTime, live: impl Fn(usize) -> RankLoad) -> (usize, u16) {
        let ranks = self.clients[0].counts.len();
        let servers = self.clients.len();
        let due = self
            .published
            .is_none_or(|at| now.as_ns().saturating_sub(at.as_ns()) >= PUBLISH_INTERVAL_NS);
        if due {
            let loads: Vec<RankLoad> = (0..ranks).map(live).collect();
            for client in &mut self.clients {
                client.counts.clone_from(&loads);
            }
            self.published = Some(now);
        }
        let index = self.next_client;
        self.next_client = (index + 1) % servers;
        let client_count = servers as u64;
        let client = &mut self.clients[index];
        let mut best = 0;
        let mut min_score = f64::INFINITY;
        for i in 0..ranks {
            let rank = (client.start + i) % ranks;
            let load = client.counts[rank];
            let score = match self.rule {
                DpLbRule::WaitingTimesFourPlusRunning => (load.waiting * 4 + load.running) as f64,
                DpLbRule::InflightAndKvPressure => {
                    let inflight = client_count * client.inflight[rank] as u64;
                    let mut score = inflight.max(load.waiting + load.running) as f64;
                    if load.waiting > 0 {
                        score += load.waiting as f64 * 6.0 * (load.kv_usage - 0.5).max(0.0);
                    }
                    score
                }
            };
            if score < min_score {
                min_score = score;
                best = rank;
            }
        }
        client.counts[best].waiting += client_count;
        client.inflight[best] += 1;
        if self.rule == DpLbRule::InflightAndKvPressure {
            client.start = (client.start + 1) % ranks;
        }
        (best, index as u16)
    }

    /// The request API server `client` sent to `rank` has finished there
    /// (`process_engine_outputs` counts it out of `engine_inflight`).
    pub fn finished(&mut self, client: u16, rank: usize) {
        if let Some(c) = self.clients.get_mut(client as usize)
            && let Some(n) = c.inflight.get_mut(rank)
        {
            *n = n.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Balancer, DpLbRule, RankLoad};
    use pdsim_core::SimTime;

    fn idle(_: usize) -> RankLoad {
        RankLoad::default()
    }

    /// Up to 0.15.1, API server `i` scans from rank `i` and every pick
    /// adds `client_count` to the rank's waiting count until the next
    /// publication: four API servers over four idle ranks spread a burst
    /// one to a rank, and the next round goes the same way.
    #[test]
    fn old_rule_spreads_a_burst_by_local_increments() {
        let mut lb = Balancer::new(DpLbRule::WaitingTimesFourPlusRunning, 4, 4);
        let picks: Vec<(usize, u16)> = (0..8).map(|_| lb.pick(SimTime(0), idle)).collect();
        assert_eq!(
            picks,
            vec![
                (0, 0),
                (1, 1),
                (2, 2),
                (3, 3),
                (1, 0),
                (2, 1),
                (3, 2),
                (0, 3)
            ]
        );
    }

    /// From 0.29.0 the scan's start rotates after each pick and an API
    /// server's own in-flight requests count, scaled by the servers; a
    /// rank whose waiting requests meet a nearly full KV cache is avoided.
    #[test]
    fn new_rule_counts_in_flight_requests_and_kv_pressure() {
        let mut lb = Balancer::new(DpLbRule::InflightAndKvPressure, 2, 2);
        // Rank 0 has one waiting request at 90 % KV usage: 1 + 1·6·0.4 = 3.4;
        // rank 1 runs three: 3.
        let live = |rank: usize| match rank {
            0 => RankLoad {
                waiting: 1,
                running: 0,
                kv_usage: 0.9,
            },
            _ => RankLoad {
                waiting: 0,
                running: 3,
                kv_usage: 0.2,
            },
        };
        assert_eq!(lb.pick(SimTime(0), live), (1, 0));
        // API server 1 sees rank 1 with 2 more waiting (its copy was
        // published before server 0's pick, but each has its own
        // increments): 3 against 3.4, rank 1 again.
        assert_eq!(lb.pick(SimTime(0), live), (1, 1));
        // Server 0 again: rank 1 now has 2 waiting of its own increment
        // and 3 running, 5 + 2·6·0 = 5, and one in flight (2·1 = 2 < 5):
        // rank 0 wins at 3.4.
        assert_eq!(lb.pick(SimTime(0), live), (0, 0));
        // A publication 100 ms later replaces every server's counts.
        lb.finished(0, 1);
        lb.finished(1, 1);
        lb.finished(0, 0);
        assert_eq!(lb.pick(SimTime(100_000_000), idle), (0, 1));
    }

    fn loads(a: (u64, u64, f64), b: (u64, u64, f64)) -> impl Fn(usize) -> RankLoad {
        move |rank| {
            let (waiting, running, kv_usage) = if rank == 0 { a } else { b };
            RankLoad {
                waiting,
                running,
                kv_usage,
            }
        }
    }

    /// Up to 0.15.1 a waiting request weighs four running ones: one
    /// waiting (4) loses to three running (3).
    #[test]
    fn old_rule_weighs_waiting_four_times() {
        let mut lb = Balancer::new(DpLbRule::WaitingTimesFourPlusRunning, 2, 2);
        assert_eq!(lb.pick(SimTime(0), loads((1, 0, 0.0), (0, 3, 0.0))), (1, 0));
    }

    /// The KV-pressure penalty at its exact value: two waiting at 75 %
    /// usage score 2 + 2·6·0.25 = 5, as five running do. A tie goes to the
    /// first rank of the scan, so server 0 (scanning from rank 0) and
    /// server 1 (from rank 1) pick differently; a penalty any larger or
    /// smaller would send both to the same rank.
    #[test]
    fn the_kv_pressure_penalty_ties_exactly() {
        let mut lb = Balancer::new(DpLbRule::InflightAndKvPressure, 2, 2);
        let live = loads((2, 0, 0.75), (0, 5, 0.2));
        assert_eq!(lb.pick(SimTime(0), &live), (0, 0));
        assert_eq!(lb.pick(SimTime(0), &live), (1, 1));
    }

    /// A server's own request in flight on a rank counts `client_count`
    /// times: with one in flight on rank 0 (2 · 1 = 2, as its two running),
    /// rank 0 still beats rank 1's three running after a publication.
    #[test]
    fn in_flight_requests_count_once_per_server() {
        let mut lb = Balancer::new(DpLbRule::InflightAndKvPressure, 2, 2);
        let live = loads((0, 2, 0.0), (0, 3, 0.0));
        assert_eq!(lb.pick(SimTime(0), &live), (0, 0));
        assert_eq!(lb.pick(SimTime(0), &live), (0, 1));
        // Server 0 again, its scan now from rank 1: 3 against max(2, 2).
        assert_eq!(lb.pick(SimTime(100_000_000), &live), (0, 0));
    }

    /// With the Rust frontend one API server fronts every rank
    /// (`api_server_count` 1): it sees all its own picks, so a burst between
    /// publications goes round the ranks, each pick adding one to its rank.
    #[test]
    fn one_api_server_sees_all_its_picks() {
        let mut lb = Balancer::new(DpLbRule::WaitingTimesFourPlusRunning, 3, 1);
        let picks: Vec<(usize, u16)> = (0..6).map(|_| lb.pick(SimTime(0), idle)).collect();
        assert_eq!(picks, vec![(0, 0), (1, 0), (2, 0), (0, 0), (1, 0), (2, 0)]);
    }
}
