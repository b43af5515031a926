//! The discrete-event loop.
//!
//! Three kinds of event move a request: its arrival at the router, its
//! admission into an engine core once the frontend has rendered and
//! tokenized the prompt, and the end of an engine step. Events are ordered
//! by (time, sequence), so simultaneous events keep the order in which they
//! were scheduled (DESIGN decision 2). Arrivals are read from the source one
//! ahead, so a trace is streamed rather than loaded.

use crate::build::Cluster;
use crate::records::{Outcome, RecordSink, RequestRecord};
use pdsim_core::{Purpose, RequestId, SimDuration, SimTime, Stream};
use pdsim_cost::StepCost;
use pdsim_engine::{Engine, EngineEvent, NewRequest};
use pdsim_workload::{RequestSpec, TraceError};
use serde::Serialize;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Why a run stopped before its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunError {
    /// The trace has a bad row; the run is not complete.
    Trace(TraceError),
    /// An invariant broke (only checked with `check`).
    Invariant(String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Trace(e) => write!(f, "{e}"),
            RunError::Invariant(m) => write!(f, "invariant violated: {m}"),
        }
    }
}

/// Totals of one engine core.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CoreStats {
    pub pool: u16,
    pub pod: u32,
    pub rank: u16,
    pub steps: u64,
    pub busy_ns: u64,
    pub tokens_scheduled: u64,
    pub tokens_padded: u64,
    pub preemptions: u64,
    pub prefix_queries_tokens: u64,
    pub prefix_hits_tokens: u64,
    /// Σ KV usage × step duration, for a time-weighted mean.
    pub kv_usage_ns: f64,
    pub kv_usage_peak: f64,
    pub compute_ns: u64,
    pub memory_ns: u64,
    pub communication_ns: u64,
    pub host_ns: u64,
    pub padding_ns: u64,
    pub evictions: u64,
}

/// What a run did, beyond the per-request records.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RunStats {
    pub router: &'static str,
    pub requests: u64,
    pub completed: u64,
    pub rejected: u64,
    pub aborted: u64,
    pub first_arrival: SimTime,
    pub end: SimTime,
    pub events: u64,
    pub cores: Vec<CoreStats>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    Arrival,
    Admit { id: RequestId, core: u32 },
    StepDone { group: u32 },
}

struct Core {
    engine: Engine,
    pool: usize,
    rng: Stream,
    /// Requests routed here whose admission delay has not elapsed.
    pending: u32,
    stats: CoreStats,
}

struct Group {
    first: usize,
    len: usize,
    busy: bool,
}

struct InFlight {
    record: RequestRecord,
    prompt: pdsim_core::Prompt,
    priority: i32,
    max_output: u32,
}

/// Requests in flight, indexed by id. Ids are handed out in arrival order,
/// so the live ones form a window: the table keeps only the span from the
/// oldest live id to the newest, and drops ended requests from its front.
/// Memory follows the requests in flight, not the trace.
#[derive(Default)]
struct InFlightTable {
    base: u32,
    slots: std::collections::VecDeque<Option<InFlight>>,
}

impl InFlightTable {
    fn insert(&mut self, id: RequestId, flight: InFlight) {
        if self.slots.is_empty() {
            self.base = id.0;
        }
        debug_assert_eq!(
            id.0,
            self.base + self.slots.len() as u32,
            "ids arrive in order"
        );
        self.slots.push_back(Some(flight));
    }

    fn get_mut(&mut self, id: &RequestId) -> Option<&mut InFlight> {
        let index = id.0.checked_sub(self.base)? as usize;
        self.slots.get_mut(index)?.as_mut()
    }

    fn remove(&mut self, id: &RequestId) -> Option<InFlight> {
        let index = id.0.checked_sub(self.base)? as usize;
        let flight = self.slots.get_mut(index)?.take();
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        flight
    }

    fn ids(&self) -> Vec<RequestId> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, f)| f.is_some())
            .map(|(i, _)| RequestId(self.base + i as u32))
            .collect()
    }
}

struct Sim<'a> {
    cluster: &'a Cluster,
    cores: Vec<Core>,
    groups: Vec<Group>,
    /// Group of each core.
    group_of: Vec<u32>,
    /// First core of each pod, per pool.
    pod_cores: Vec<Vec<(usize, usize)>>,
    queue: BinaryHeap<Reverse<(SimTime, u64, Event)>>,
    seq: u64,
    now: SimTime,
    in_flight: InFlightTable,
    next_arrival: Option<RequestSpec>,
    next_id: u32,
    stats: RunStats,
    check: bool,
    events_buf: Vec<EngineEvent>,
}

/// Runs `source` through `cluster` to the end, handing every request's
/// record to `sink` as it ends.
pub fn run(
    cluster: &Cluster,
    source: &mut dyn Iterator<Item = Result<RequestSpec, TraceError>>,
    seed: u64,
    check: bool,
    sink: &mut dyn RecordSink,
) -> Result<RunStats, RunError> {
    let mut sim = Sim::new(cluster, seed, check);
    sim.pull_arrival(source)?;
    while let Some(Reverse((time, _, event))) = sim.queue.pop() {
        if time < sim.now {
            return Err(RunError::Invariant(format!(
                "time went back from {:?} to {:?}",
                sim.now, time
            )));
        }
        sim.now = time;
        sim.stats.events += 1;
        match event {
            Event::Arrival => {
                sim.arrive();
                sim.pull_arrival(source)?;
            }
            Event::Admit { id, core } => sim.admit(id, core as usize, sink),
            Event::StepDone { group } => sim.step_done(group as usize, sink)?,
        }
    }
    // Anything still in flight could not make progress: abort it, counted.
    let mut stuck: Vec<RequestId> = sim.in_flight.ids();
    stuck.sort();
    for id in stuck {
        sim.finish(id, Outcome::Aborted, "engine-stalled", sink);
    }
    sim.stats.end = sim.now;
    sim.stats.cores = sim
        .cores
        .iter()
        .map(|c| {
            let mut s = c.stats.clone();
            s.preemptions = c.engine.preemptions;
            s.prefix_queries_tokens = c.engine.prefix_queries_tokens;
            s.prefix_hits_tokens = c.engine.prefix_hits_tokens;
            s.evictions = c.engine.pool().evictions;
            s
        })
        .collect();
    Ok(sim.stats)
}

impl<'a> Sim<'a> {
    fn new(cluster: &'a Cluster, seed: u64, check: bool) -> Sim<'a> {
        let mut cores = Vec::new();
        let mut groups = Vec::new();
        let mut group_of = Vec::new();
        let mut pod_cores = Vec::new();
        for (pool_index, pool) in cluster.pools.iter().enumerate() {
            let mut pods = Vec::new();
            for pod in 0..pool.pods {
                let first = cores.len();
                for rank in 0..pool.ranks {
                    let lane = cores.len() as u32;
                    cores.push(Core {
                        engine: Engine::new(pool.engine.clone()),
                        pool: pool_index,
                        rng: Stream::new(seed, Purpose::Acceptance, lane),
                        pending: 0,
                        stats: CoreStats {
                            pool: pool_index as u16,
                            pod,
                            rank,
                            ..CoreStats::default()
                        },
                    });
                }
                let len = pool.ranks as usize;
                if pool.lockstep {
                    group_of.extend(std::iter::repeat_n(groups.len() as u32, len));
                    groups.push(Group {
                        first,
                        len,
                        busy: false,
                    });
                } else {
                    for core in first..first + len {
                        group_of.push(groups.len() as u32);
                        groups.push(Group {
                            first: core,
                            len: 1,
                            busy: false,
                        });
                    }
                }
                pods.push((first, len));
            }
            pod_cores.push(pods);
        }
        Sim {
            cluster,
            cores,
            groups,
            group_of,
            pod_cores,
            queue: BinaryHeap::new(),
            seq: 0,
            now: SimTime::ZERO,
            in_flight: InFlightTable::default(),
            next_arrival: None,
            next_id: 0,
            stats: RunStats {
                router: cluster.router,
                ..RunStats::default()
            },
            check,
            events_buf: Vec::new(),
        }
    }

    fn push(&mut self, time: SimTime, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((time, self.seq, event)));
    }

    fn pull_arrival(
        &mut self,
        source: &mut dyn Iterator<Item = Result<RequestSpec, TraceError>>,
    ) -> Result<(), RunError> {
        match source.next() {
            None => {}
            Some(Err(e)) => return Err(RunError::Trace(e)),
            Some(Ok(spec)) => {
                let at = spec.arrival.max(self.now);
                if self.stats.requests == 0 && self.next_id == 0 {
                    self.stats.first_arrival = spec.arrival;
                }
                self.next_arrival = Some(spec);
                self.push(at, Event::Arrival);
            }
        }
        Ok(())
    }

    /// The built-in least-loaded picker: the pod with the fewest waiting,
    /// running and in-transit requests, then within it the rank vLLM's
    /// internal load balancer would pick (4 × waiting + running, lowest;
    /// `vllm/v1/engine/core_client.py` in the releases before 0.33).
    fn route(&self) -> usize {
        let load = |core: &Core| {
            (core.engine.num_waiting() + core.engine.num_running()) as u64 + core.pending as u64
        };
        let mut best = (0, 0);
        let mut best_load = u64::MAX;
        for (pool, pods) in self.pod_cores.iter().enumerate() {
            for (pod, (first, len)) in pods.iter().enumerate() {
                let total: u64 = self.cores[*first..first + len].iter().map(load).sum();
                if total < best_load {
                    best_load = total;
                    best = (pool, pod);
                }
            }
        }
        let (first, len) = self.pod_cores[best.0][best.1];
        let score = |core: &Core| {
            4 * (core.engine.num_waiting() as u64 + core.pending as u64)
                + core.engine.num_running() as u64
        };
        (first..first + len)
            .min_by_key(|c| (score(&self.cores[*c]), *c))
            .unwrap_or(first)
    }

    fn arrive(&mut self) {
        let Some(spec) = self.next_arrival.take() else {
            return;
        };
        let id = RequestId(self.next_id);
        self.next_id += 1;
        self.stats.requests += 1;
        let core = self.route();
        self.cores[core].pending += 1;
        let prompt_tokens = spec.prompt.tokens().min(u32::MAX as u64) as u32;
        let pool = self.cores[core].pool;
        let delay = self.cluster.pools[pool].cost.admission_delay(prompt_tokens);
        let c = &self.cores[core];
        let record = RequestRecord {
            id,
            source_line: spec.source_line,
            slo_class: spec.slo_class,
            arrival: self.now,
            enqueued: None,
            scheduled: None,
            first_token: None,
            last_token: None,
            finished: self.now,
            prompt_tokens,
            output_tokens: 0,
            cached_tokens: 0,
            preemptions: 0,
            pool: c.stats.pool,
            pod: c.stats.pod,
            rank: c.stats.rank,
            outcome: Outcome::Completed,
            reason: "",
        };
        self.in_flight.insert(
            id,
            InFlight {
                record,
                prompt: spec.prompt,
                priority: spec.priority,
                max_output: spec.output_tokens,
            },
        );
        self.push(
            self.now + delay,
            Event::Admit {
                id,
                core: core as u32,
            },
        );
    }

    fn admit(&mut self, id: RequestId, core: usize, sink: &mut dyn RecordSink) {
        self.cores[core].pending -= 1;
        let Some(flight) = self.in_flight.get_mut(&id) else {
            return;
        };
        flight.record.enqueued = Some(self.now);
        let request = NewRequest {
            id,
            arrival: flight.record.arrival,
            priority: flight.priority,
            prompt: std::mem::take(&mut flight.prompt),
            max_output_tokens: flight.max_output,
            kv: pdsim_engine::KvTransfer::Local,
        };
        self.cores[core].engine.add_request(request);
        self.handle_events(core, sink);
        let group = self.group_of[core] as usize;
        if !self.groups[group].busy {
            self.start_step(group, sink);
        }
    }

    /// Schedules a step on every core of a group and prices it; the group's
    /// step takes as long as its slowest core.
    fn start_step(&mut self, group: usize, sink: &mut dyn RecordSink) {
        let (first, len) = (self.groups[group].first, self.groups[group].len);
        let mut longest = StepCost::default();
        let mut any = false;
        for core in first..first + len {
            let pool = self.cores[core].pool;
            if let Some(batch) = self.cores[core].engine.schedule() {
                let cost = self.cluster.pools[pool].cost.step(&batch);
                let c = &mut self.cores[core];
                c.stats.tokens_scheduled += batch.tokens() as u64;
                c.stats.tokens_padded += batch.padded_tokens as u64;
                c.stats.compute_ns += cost.compute_ns;
                c.stats.memory_ns += cost.memory_ns;
                c.stats.communication_ns += cost.communication_ns;
                c.stats.host_ns += cost.host_ns;
                c.stats.padding_ns += cost.padding_ns;
                if cost.total > longest.total {
                    longest = cost;
                }
                any = true;
            }
            self.handle_events(core, sink);
        }
        self.groups[group].busy = any;
        if any {
            let duration = SimDuration(longest.total.as_ns().max(1));
            for core in first..first + len {
                let c = &mut self.cores[core];
                let usage = c.engine.kv_usage();
                c.stats.kv_usage_ns += usage * duration.as_ns() as f64;
                c.stats.kv_usage_peak = c.stats.kv_usage_peak.max(usage);
                c.stats.busy_ns += duration.as_ns();
                c.stats.steps += 1;
            }
            self.push(
                self.now + duration,
                Event::StepDone {
                    group: group as u32,
                },
            );
        }
    }

    fn step_done(&mut self, group: usize, sink: &mut dyn RecordSink) -> Result<(), RunError> {
        let (first, len) = (self.groups[group].first, self.groups[group].len);
        for core in first..first + len {
            let c = &mut self.cores[core];
            c.engine.complete_step(&mut c.rng);
            self.handle_events(core, sink);
            if self.check {
                self.cores[core]
                    .engine
                    .check()
                    .map_err(|e| RunError::Invariant(format!("core {core}: {e}")))?;
            }
        }
        self.groups[group].busy = false;
        self.start_step(group, sink);
        Ok(())
    }

    fn handle_events(&mut self, core: usize, sink: &mut dyn RecordSink) {
        let mut events = std::mem::take(&mut self.events_buf);
        events.extend(self.cores[core].engine.drain_events());
        for event in events.drain(..) {
            match event {
                EngineEvent::Admitted { id, cached_tokens } => {
                    if let Some(f) = self.in_flight.get_mut(&id) {
                        f.record.scheduled = Some(self.now);
                        f.record.cached_tokens = cached_tokens;
                    }
                }
                EngineEvent::Emitted { id, tokens } => {
                    if let Some(f) = self.in_flight.get_mut(&id) {
                        match f.record.last_token {
                            None => f.record.first_token = Some(self.now),
                            Some(last) => sink.emission(self.now.since(last).as_ns(), tokens),
                        }
                        f.record.last_token = Some(self.now);
                        f.record.output_tokens += tokens;
                    }
                }
                EngineEvent::Preempted { id } => {
                    if let Some(f) = self.in_flight.get_mut(&id) {
                        f.record.preemptions += 1;
                    }
                }
                EngineEvent::Finished { id, .. } => self.finish(id, Outcome::Completed, "", sink),
                EngineEvent::Rejected { id } => {
                    self.finish(id, Outcome::Rejected, "prompt-exceeds-max-model-len", sink)
                }
            }
        }
        self.events_buf = events;
    }

    fn finish(
        &mut self,
        id: RequestId,
        outcome: Outcome,
        reason: &'static str,
        sink: &mut dyn RecordSink,
    ) {
        let Some(mut flight) = self.in_flight.remove(&id) else {
            return;
        };
        flight.record.finished = self.now;
        flight.record.outcome = outcome;
        flight.record.reason = reason;
        match outcome {
            Outcome::Completed => self.stats.completed += 1,
            Outcome::Rejected => self.stats.rejected += 1,
            Outcome::Aborted => self.stats.aborted += 1,
        }
        sink.record(&flight.record);
    }
}
