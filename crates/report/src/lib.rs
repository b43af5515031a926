//! Turning a run into what users read: percentiles from fixed-size
//! histograms, throughput, cache and KV figures, `summary.json` with units
//! in every key, `requests.csv` written row by row as requests end, and the
//! text summary.
//!
//! **Architecture invariant:** the only crate that knows output formats; it
//! writes to any `std::io::Write` it is given and opens no file itself.

pub mod page;
pub mod perfetto;
pub mod plan;
pub mod plot;
mod row;
pub mod series;
pub mod slo;
pub mod table;

use hdrhistogram::Histogram;
use pdsim_cluster::{Outcome, RecordSink, RequestRecord, RunStats};
use serde::Serialize;
pub use slo::{ClassNames, Goodput, Slo, SloPlan};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::Write;

/// Percentiles of one latency, in milliseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// Collects histograms and totals as requests end.
pub struct Aggregator {
    ttft_ns: Dist,
    tpot_ns: Dist,
    itl_ns: Dist,
    /// A run of equal inter-token gaps not yet in `itl_ns`: (gap, count).
    /// Every request decoding in one engine step sees the same gap, so
    /// consecutive emissions mostly repeat a value, and one `record_n` per
    /// run costs less than a histogram update per token. Counts add, so
    /// the histogram is the same either way.
    itl_run: (u64, u64),
    e2e_ns: Dist,
    queue_ns: Dist,
    transfer_ns: Dist,
    /// Σ of each TTFT phase over completed requests, for the shares.
    phase_ns: [u64; 5],
    transfer_bytes: u64,
    kv_hold_expired: u64,
    disaggregated: u64,
    input_tokens: u64,
    output_tokens: u64,
    /// Over requests routed by a prefix scorer: Σ of the router's
    /// predicted cached tokens, of what the engine that computed the prompt
    /// found (HBM, LMCache and offload hits), and of the prompt tokens.
    router_predicted: (u64, u64, u64),
    reasons: BTreeMap<String, u64>,
    first_arrival_ns: u64,
    last_finish_ns: u64,
    any: bool,
    slo: SloPlan,
    goodput: slo::GoodputCounter,
    /// Per load stage, when the source has stages (an inference-perf
    /// configuration); empty otherwise, and then nothing else changes.
    stages: Vec<StageAggregate>,
}

/// One load stage's share of the run: its plan and the latencies of the
/// requests it sent. Histograms are made on the stage's first record, so a
/// configuration with many stages costs memory only for those that ran.
struct StageAggregate {
    plan: pdsim_workload::StagePlan,
    seen: u64,
    completed: u64,
    rejected: u64,
    aborted: u64,
    input_tokens: u64,
    output_tokens: u64,
    first_arrival_ns: u64,
    last_finish_ns: u64,
    histograms: Option<Box<StageHistograms>>,
}

struct StageHistograms {
    ttft_ns: Dist,
    tpot_ns: Dist,
    itl_ns: Dist,
    e2e_ns: Dist,
}

impl StageAggregate {
    fn histograms(&mut self) -> &mut StageHistograms {
        self.histograms.get_or_insert_with(|| {
            Box::new(StageHistograms {
                ttft_ns: histogram(),
                tpot_ns: histogram(),
                itl_ns: histogram(),
                e2e_ns: histogram(),
            })
        })
    }
}

/// The longest latency a histogram tracks exactly: about 2.8 hours in
/// nanoseconds. Longer values are recorded as this value (saturated).
const HISTOGRAM_MAX_NS: u64 = 10_000_000_000_000;

/// One latency's distribution: an HDR histogram for the percentiles, and
/// the exact sum for the mean. The histogram keeps three significant
/// digits, so a mean taken from it (`Histogram::mean`, which averages
/// bucket midpoints) would differ from the mean of the recorded values by
/// up to 0.05 %; a user recomputing a mean from `requests.csv` must get the
/// same figure.
#[derive(Clone)]
struct Dist {
    hist: Histogram<u64>,
    /// Σ of the recorded values, ns. A u128 cannot overflow: 2^64 values of
    /// at most 2^64 ns each.
    sum_ns: u128,
}

impl Dist {
    fn record_n(&mut self, value_ns: u64, count: u64) {
        self.hist.saturating_record_n(value_ns, count);
        self.sum_ns += u128::from(value_ns) * u128::from(count);
    }
}

fn histogram() -> Dist {
    // Three significant digits over a fixed range: fixed memory (a few
    // hundred KiB each), whatever the trace length.
    Dist {
        hist: Histogram::new_with_bounds(1, HISTOGRAM_MAX_NS, 3).expect("valid histogram bounds"),
        sum_ns: 0,
    }
}

impl Default for Aggregator {
    fn default() -> Self {
        Aggregator {
            ttft_ns: histogram(),
            tpot_ns: histogram(),
            itl_ns: histogram(),
            itl_run: (0, 0),
            e2e_ns: histogram(),
            queue_ns: histogram(),
            transfer_ns: histogram(),
            phase_ns: [0; 5],
            transfer_bytes: 0,
            kv_hold_expired: 0,
            disaggregated: 0,
            input_tokens: 0,
            output_tokens: 0,
            router_predicted: (0, 0, 0),
            reasons: BTreeMap::new(),
            first_arrival_ns: u64::MAX,
            last_finish_ns: 0,
            any: false,
            slo: SloPlan::default(),
            goodput: slo::GoodputCounter::default(),
            stages: Vec::new(),
        }
    }
}

/// The latencies a CDF can be drawn of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    Ttft,
    Tpot,
    Itl,
    E2e,
    Queue,
    Transfer,
}

impl Aggregator {
    /// An aggregator that also counts goodput against `slo`.
    pub fn with_slo(slo: SloPlan) -> Aggregator {
        Aggregator {
            slo,
            ..Aggregator::default()
        }
    }

    /// Also breaks the results down by the source's load `stages`
    /// (`summary.json` `stages`, the text summary and the report): each
    /// request counts in the stage whose request numbers hold its
    /// `source_line`. Without stages the summary is what it was.
    pub fn with_stages(mut self, stages: &[pdsim_workload::StagePlan]) -> Aggregator {
        self.stages = stages
            .iter()
            .map(|plan| StageAggregate {
                plan: plan.clone(),
                seen: 0,
                completed: 0,
                rejected: 0,
                aborted: 0,
                input_tokens: 0,
                output_tokens: 0,
                first_arrival_ns: u64::MAX,
                last_finish_ns: 0,
                histograms: None,
            })
            .collect();
        self
    }

    /// The stage holding request number `source_line`, if any.
    fn stage_of(&mut self, source_line: u64) -> Option<&mut StageAggregate> {
        // Stages are in request-number order.
        let i = self
            .stages
            .partition_point(|s| s.plan.first_request <= source_line);
        let stage = self.stages.get_mut(i.checked_sub(1)?)?;
        stage.plan.contains(source_line).then_some(stage)
    }

    fn histogram(&self, metric: Metric) -> Cow<'_, Dist> {
        match metric {
            Metric::Ttft => Cow::Borrowed(&self.ttft_ns),
            Metric::Tpot => Cow::Borrowed(&self.tpot_ns),
            Metric::Itl => self.itl(),
            Metric::E2e => Cow::Borrowed(&self.e2e_ns),
            Metric::Queue => Cow::Borrowed(&self.queue_ns),
            Metric::Transfer => Cow::Borrowed(&self.transfer_ns),
        }
    }

    /// The inter-token gaps with the pending run included. Read once or
    /// twice per run, so a copy when a run is pending is cheap.
    fn itl(&self) -> Cow<'_, Dist> {
        let (gap, count) = self.itl_run;
        if count == 0 {
            return Cow::Borrowed(&self.itl_ns);
        }
        let mut h = self.itl_ns.clone();
        h.record_n(gap, count);
        Cow::Owned(h)
    }

    /// The distribution of a latency as (milliseconds, cumulative share)
    /// points: every percent, then finer steps into the tail, where SLOs
    /// are decided.
    pub fn cdf(&self, metric: Metric) -> Vec<(f64, f64)> {
        let d = self.histogram(metric);
        let h = &d.hist;
        if h.is_empty() {
            return Vec::new();
        }
        let mut quantiles: Vec<f64> = (0..=99).map(|i| i as f64 / 100.0).collect();
        quantiles.extend((1..=9).map(|i| 0.99 + i as f64 / 1000.0));
        quantiles.extend([0.9995, 0.9999, 1.0]);
        // One pass over the histogram for all 112 points, each exactly
        // what `value_at_quantile` gives (the quantiles ascend); 112
        // separate calls were 3 % of a `plan`, which prices a CDF a probe.
        h.value_at_quantiles(quantiles.iter().copied())
            .zip(quantiles.iter())
            .map(|(v, &q)| (v as f64 / 1e6, q))
            .collect()
    }
}

fn record(h: &mut Dist, value: u64) {
    // The histogram's lowest trackable value is 1 ns; the sum keeps the
    // value itself.
    h.hist.saturating_record(value.max(1));
    h.sum_ns += u128::from(value);
}

impl RecordSink for Aggregator {
    fn record(&mut self, r: &RequestRecord) {
        if !self.stages.is_empty()
            && let Some(stage) = self.stage_of(r.source_line)
        {
            stage.seen += 1;
            stage.first_arrival_ns = stage.first_arrival_ns.min(r.arrival.as_ns());
            stage.last_finish_ns = stage.last_finish_ns.max(r.finished.as_ns());
            match r.outcome {
                Outcome::Completed => {
                    stage.completed += 1;
                    stage.input_tokens += r.prompt_tokens as u64;
                    stage.output_tokens += r.output_tokens as u64;
                    let h = stage.histograms();
                    if let Some(first) = r.first_token {
                        record(&mut h.ttft_ns, first.since(r.arrival).as_ns());
                        if let Some(last) = r.last_token
                            && r.output_tokens > 1
                        {
                            record(
                                &mut h.tpot_ns,
                                last.since(first).as_ns() / (r.output_tokens as u64 - 1),
                            );
                        }
                    }
                    record(&mut h.e2e_ns, r.finished.since(r.arrival).as_ns());
                }
                Outcome::Rejected => stage.rejected += 1,
                Outcome::Aborted => stage.aborted += 1,
            }
        }
        self.any = true;
        if let Some(predicted) = r.router_cached_tokens {
            let hbm = if r.prefill.is_some() {
                r.prefill_cached_tokens
            } else {
                r.cached_tokens
            };
            let found = hbm as u64 + r.lmcache_tokens as u64 + r.offload_tokens as u64;
            self.router_predicted.0 += predicted as u64;
            self.router_predicted.1 += found.min(r.prompt_tokens as u64);
            self.router_predicted.2 += r.prompt_tokens as u64;
        }
        self.first_arrival_ns = self.first_arrival_ns.min(r.arrival.as_ns());
        self.last_finish_ns = self.last_finish_ns.max(r.finished.as_ns());
        if let Some(slo) = self.goodput.slo(&self.slo, r.slo_class) {
            let verdict = match r.first_token {
                Some(first) if r.outcome == Outcome::Completed => {
                    let ms = |ns: u64| ns as f64 / 1e6;
                    let tpot = r
                        .last_token
                        .filter(|_| r.output_tokens > 1)
                        .map(|last| ms(last.since(first).as_ns()) / (r.output_tokens - 1) as f64);
                    slo::Verdict::Completed(slo.exceeded(
                        ms(first.since(r.arrival).as_ns()),
                        tpot,
                        ms(r.finished.since(r.arrival).as_ns()),
                    ))
                }
                _ => slo::Verdict::NotCompleted,
            };
            self.goodput.add(r.slo_class, verdict);
        }
        if r.outcome != Outcome::Completed {
            *self
                .reasons
                .entry(format!("{}:{}", r.outcome.as_str(), r.reason))
                .or_default() += 1;
            return;
        }
        self.input_tokens += r.prompt_tokens as u64;
        self.output_tokens += r.output_tokens as u64;
        if let Some(first) = r.first_token {
            record(&mut self.ttft_ns, first.since(r.arrival).as_ns());
            if let Some(last) = r.last_token
                && r.output_tokens > 1
            {
                record(
                    &mut self.tpot_ns,
                    last.since(first).as_ns() / (r.output_tokens as u64 - 1),
                );
            }
        }
        record(&mut self.e2e_ns, r.finished.since(r.arrival).as_ns());
        let first_scheduled = r.prefill_scheduled.or(r.scheduled);
        if let Some(scheduled) = first_scheduled {
            record(&mut self.queue_ns, scheduled.since(r.arrival).as_ns());
        }
        if let (Some(start), Some(end)) = (r.transfer_start, r.transfer_end) {
            record(&mut self.transfer_ns, end.since(start).as_ns());
        }
        self.transfer_bytes += r.transfer_bytes;
        self.kv_hold_expired += u64::from(r.kv_hold_expired);
        self.disaggregated += u64::from(r.prefill.is_some());
        // Where the time to first token went: queueing before the first
        // engine scheduled the request, prefilling, waiting (for the decode
        // engine's admission and KV), transferring, and the first decode step.
        if let (Some(first), Some(scheduled)) = (r.first_token, first_scheduled) {
            let queue = scheduled.since(r.arrival).as_ns();
            let (prefill, wait, transfer, decode) =
                match (r.prefill_done, r.transfer_start, r.transfer_end) {
                    (Some(done), Some(start), Some(end)) => (
                        done.since(scheduled).as_ns(),
                        start.since(done).as_ns(),
                        end.since(start).as_ns(),
                        first.since(end).as_ns(),
                    ),
                    (Some(done), _, _) => (
                        done.since(scheduled).as_ns(),
                        first.since(done).as_ns(),
                        0,
                        0,
                    ),
                    _ => (first.since(scheduled).as_ns(), 0, 0, 0),
                };
            for (slot, value) in self
                .phase_ns
                .iter_mut()
                .zip([queue, prefill, wait, transfer, decode])
            {
                *slot += value;
            }
        }
    }

    fn emission(&mut self, gap_ns: u64, _tokens: u32) {
        let gap = gap_ns.max(1); // as `record` stores it
        let (run_gap, count) = &mut self.itl_run;
        if *run_gap == gap {
            *count += 1;
            return;
        }
        if *count > 0 {
            self.itl_ns.record_n(*run_gap, *count);
        }
        self.itl_run = (gap, 1);
    }

    fn emission_of(&mut self, r: &RequestRecord, gap_ns: u64, tokens: u32) {
        self.emission_in(r.source_line, gap_ns, tokens);
    }

    fn emissions(&mut self, batch: &[pdsim_cluster::Emission]) {
        for e in batch {
            self.emission_in(e.source_line, e.gap_ns, e.tokens);
        }
    }
}

impl Aggregator {
    /// An emission of the request on trace line `source_line`.
    fn emission_in(&mut self, source_line: u64, gap_ns: u64, tokens: u32) {
        self.emission(gap_ns, tokens);
        // Inter-token gaps count in the stage of the request emitting,
        // whatever becomes of it (as the whole run's do).
        if !self.stages.is_empty()
            && let Some(stage) = self.stage_of(source_line)
        {
            record(&mut stage.histograms().itl_ns, gap_ns);
        }
    }
}

fn latency(d: &Dist) -> Latency {
    let h = &d.hist;
    if h.is_empty() {
        return Latency::default();
    }
    let ms = |ns: u64| ns as f64 / 1e6;
    // One pass for the five, each exactly `value_at_quantile`'s.
    let mut p = h.value_at_quantiles([0.5, 0.9, 0.95, 0.99, 0.999]).map(ms);
    let mut next = || p.next().expect("five ascending quantiles give five values");
    Latency {
        count: h.len(),
        mean: d.sum_ns as f64 / h.len() as f64 / 1e6,
        p50: next(),
        p90: next(),
        p95: next(),
        p99: next(),
        p999: next(),
        max: ms(h.max()),
    }
}

/// Everything `summary.json` says. Units are in the key names.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub pdsim_version: String,
    pub run: RunInfo,
    pub requests: Requests,
    pub ttft_ms: Latency,
    pub tpot_ms: Latency,
    pub itl_ms: Latency,
    pub e2e_ms: Latency,
    pub queue_ms: Latency,
    /// KV transfer from prefill to decode (P/D only).
    pub transfer_ms: Latency,
    /// Shares of the summed time to first token, 0–1.
    pub ttft_share: TtftShare,
    pub transfer_bytes: u64,
    /// Requests whose prefill engine freed its blocks before the read.
    pub kv_hold_expired: u64,
    /// Mean utilisation of the links KV transfers used, 0–1, and the
    /// busiest link's.
    pub link_utilization_mean: f64,
    pub link_utilization_max: f64,
    pub duration_s: f64,
    pub throughput: Throughput,
    pub preemptions: u64,
    pub prefix_cache: PrefixCache,
    pub kv_usage: KvUsage,
    pub step_time_s: StepBreakdown,
    /// Per pool: how busy its engines were and what their caches did.
    pub pools: Vec<PoolSummary>,
    /// Requests that met their SLO; absent when no SLO was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput: Option<Goodput>,
    /// What the run cost at the GPU-hour price given; absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<Cost>,
    /// Per load stage (an inference-perf configuration's `load.stages`),
    /// beside the whole-run figures above; absent for sources without
    /// stages.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageSummary>,
    /// Conversations replayed closed-loop; absent when the source has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Sessions>,
    /// Engine cores found spinning (`pdsim_cluster::SPIN_PREEMPTIONS`);
    /// absent when none did.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spinning_engines: Vec<SpinningEngine>,
}

/// An engine core found spinning: it preempted again and again without
/// delivering a token, its requests taking turns being admitted and
/// preempted, as vLLM's scheduler would for ever; the requests it held
/// never finished (`engine-spinning`).
#[derive(Clone, Debug, Serialize)]
pub struct SpinningEngine {
    /// The core's index in the run (`cores` order: pools in order, then
    /// pods, then ranks).
    pub core: u64,
    pub pool: String,
    pub pod: u32,
    pub rank: u16,
    /// When it was first found spinning, in simulated seconds.
    pub since_s: f64,
}

/// How a source's conversations were replayed: every later turn is sent
/// only once the turn before it has ended (a trace's sessions: its think
/// time after the answer; inference-perf's multi-turn chat: at its
/// scheduled time or when the turn before it ends, if later).
#[derive(Clone, Debug, Serialize)]
pub struct Sessions {
    /// Later turns sent.
    pub turns_sent: u64,
    /// Later turns not sent: a turn before them failed or timed out.
    pub turns_not_sent: u64,
    /// Later turns sent late, because the trace lists them after an arrival
    /// later than the time they were due, and the most any was late.
    pub turns_late: u64,
    pub max_late_s: f64,
}

/// One load stage's results. Latencies count completed requests, as the
/// whole run's do; throughput is over the stage's own span, from its first
/// arrival to its last finish (inference-perf's `total_time`, from
/// `summarize_requests` in `reportgen/base.py`).
#[derive(Clone, Debug, Serialize)]
pub struct StageSummary {
    /// 0-based, inference-perf's `stage_id`.
    pub index: u16,
    pub rate_per_s: f64,
    pub duration_s: u64,
    /// Requests the stage sends, `int(rate × duration)`.
    pub requests_sent: u64,
    /// Requests of the stage that ended (completed, rejected or aborted).
    pub count: u64,
    pub completed: u64,
    pub rejected: u64,
    pub aborted: u64,
    /// From the stage's first arrival to its last finish.
    pub span_s: f64,
    pub requests_per_s: f64,
    pub input_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    pub ttft_ms: Latency,
    pub tpot_ms: Latency,
    pub itl_ms: Latency,
    pub e2e_ms: Latency,
}

/// One pool's engines over the run.
#[derive(Clone, Debug, Serialize)]
pub struct PoolSummary {
    pub name: String,
    pub role: String,
    pub engine_cores: u64,
    pub gpus: u64,
    /// Share of the run its engine cores spent stepping, 0–1.
    pub busy_share: f64,
    /// Busy-time-weighted KV usage, 0–1, and the peak.
    pub kv_usage_mean: f64,
    pub kv_usage_peak: f64,
    pub prefix_hit_rate: f64,
    pub preemptions: u64,
    pub steps: u64,
}

/// The run's cost at a GPU-hour price.
#[derive(Clone, Debug, Serialize)]
pub struct Cost {
    pub gpu_hour_usd: f64,
    pub gpu_hours: f64,
    pub total_usd: f64,
    pub usd_per_million_output_tokens: f64,
}

/// A pool as the report names it.
#[derive(Clone, Debug, Serialize)]
pub struct PoolInfo {
    pub name: String,
    pub role: String,
    pub gpus: u64,
    /// What prices the pool's steps: `roofline`, or `linear` (a fit the
    /// scenario's coefficient sets give).
    pub cost_model: String,
}

/// Where the time to first token went, as shares of its sum.
#[derive(Clone, Debug, Default, Serialize)]
pub struct TtftShare {
    pub queueing: f64,
    pub prefilling: f64,
    pub waiting: f64,
    pub transferring: f64,
    pub first_decode: f64,
}

impl TtftShare {
    /// The largest part, named as [`table::PHASES`] names it, and its
    /// share; `None` when no time was counted.
    pub fn largest(&self) -> Option<(&'static str, f64)> {
        let parts = [
            self.queueing,
            self.prefilling,
            self.waiting,
            self.transferring,
            self.first_decode,
        ];
        table::PHASES
            .iter()
            .zip(parts)
            .filter(|(_, share)| *share > 0.0)
            .fold(
                None,
                |best: Option<(&'static str, f64)>, (name, share)| match best {
                    Some(b) if b.1 >= share => Some(b),
                    _ => Some((*name, share)),
                },
            )
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct RunInfo {
    pub scenario: String,
    pub deployment: String,
    pub trace: String,
    pub seed: u64,
    pub router: String,
    pub engines: u64,
    pub gpus: u64,
    pub pools: Vec<PoolInfo>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_hour_usd: Option<f64>,
    /// How long each client waited before giving up; absent when clients
    /// wait for ever.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client_timeout_s: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Requests {
    pub total: u64,
    pub completed: u64,
    pub rejected: u64,
    pub aborted: u64,
    /// `outcome:reason` → count, for everything not completed.
    pub not_completed_by_reason: BTreeMap<String, u64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Completed requests that went through a prefill engine first.
    pub disaggregated: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    pub requests_per_s: f64,
    pub input_tokens_per_s: f64,
    pub output_tokens_per_s: f64,
    pub requests_per_s_per_gpu: f64,
    pub input_tokens_per_s_per_gpu: f64,
    pub output_tokens_per_s_per_gpu: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct PrefixCache {
    pub queries_tokens: u64,
    pub hits_tokens: u64,
    pub hit_rate: f64,
    /// Hits in the offload tier, beyond the HBM prefix cache.
    pub external_hits_tokens: u64,
    pub external_hit_rate: f64,
    pub offload_stores_blocks: u64,
    pub offload_evictions_blocks: u64,
    /// LMCache's chunks stored and evicted, and the KV bytes it loaded
    /// into and stored from the GPUs (absent without LMCache).
    #[serde(skip_serializing_if = "is_zero")]
    pub lmcache_stores_chunks: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub lmcache_evictions_chunks: u64,
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub lmcache_loaded_bytes: f64,
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub lmcache_stored_bytes: f64,
    /// The secondary tiers behind the host-memory tier
    /// (`TieringOffloadingSpec`), summed over tiers: chunks written to
    /// them, writes refused because a tier was full, chunks promoted from
    /// them back into host memory, and the bytes moved (absent without
    /// secondary tiers).
    #[serde(skip_serializing_if = "is_zero")]
    pub secondary_written_chunks: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub secondary_failed_writes: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub secondary_promoted_chunks: u64,
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub secondary_written_bytes: f64,
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub secondary_read_bytes: f64,
    /// What the router's prefix scorer believed: the prompt tokens it
    /// matched on the engine it picked to compute each prompt, and their
    /// share of those requests' prompt tokens (absent without a prefix
    /// scorer). Its index is sized from HBM, so beside an offload tier it
    /// undercounts what the engines find (`hit_rate` + `external_hit_rate`).
    #[serde(skip_serializing_if = "is_zero")]
    pub router_predicted_tokens: u64,
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub router_predicted_hit_rate: f64,
    /// For the same requests, what the engines the router picked found
    /// (HBM, LMCache and offload hits) as a share of their prompt tokens.
    #[serde(skip_serializing_if = "is_zero")]
    pub routed_found_tokens: u64,
    #[serde(skip_serializing_if = "is_zero_f64")]
    pub routed_found_hit_rate: f64,
}

/// Bytes in a GiB, for the text summary.
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn is_zero_f64(n: &f64) -> bool {
    *n == 0.0
}

#[derive(Clone, Debug, Serialize)]
pub struct KvUsage {
    /// Busy-time-weighted mean over engine cores, 0–1.
    pub mean: f64,
    pub peak: f64,
}

/// Engine time summed over cores, by what bounds it.
#[derive(Clone, Debug, Serialize)]
pub struct StepBreakdown {
    /// Engine cores (data-parallel ranks count one each) whose time this
    /// sums.
    pub cores: u64,
    /// Σ over cores of the time a step was running, s.
    pub busy: f64,
    /// Σ over every kernel of every step of its compute time and of its
    /// memory-traffic time, s: a kernel takes the longer of the two, so
    /// these add up to more than `busy`.
    pub compute: f64,
    pub memory: f64,
    pub communication: f64,
    pub host: f64,
    pub padding: f64,
    pub steps: u64,
    pub padded_tokens_share: f64,
}

impl Aggregator {
    /// The summary of a finished run.
    pub fn summary(&self, stats: &RunStats, run: RunInfo) -> Summary {
        let duration_ns = if self.any {
            self.last_finish_ns.saturating_sub(self.first_arrival_ns)
        } else {
            0
        };
        let duration_s = duration_ns as f64 / 1e9;
        let per_s = |x: u64| {
            if duration_s > 0.0 {
                x as f64 / duration_s
            } else {
                0.0
            }
        };
        let cores = &stats.cores;
        let sum = |f: fn(&pdsim_cluster::CoreStats) -> u64| cores.iter().map(f).sum::<u64>();
        let busy_ns = sum(|c| c.busy_ns);
        let queries = sum(|c| c.prefix_queries_tokens);
        let hits = sum(|c| c.prefix_hits_tokens);
        let scheduled = sum(|c| c.tokens_scheduled);
        let padded = sum(|c| c.tokens_padded);
        let kv_weighted: f64 = cores.iter().map(|c| c.kv_usage_ns).sum();
        let gpus = run.gpus.max(1);
        let pools = run
            .pools
            .iter()
            .enumerate()
            .map(|(i, info)| {
                let mine: Vec<&pdsim_cluster::CoreStats> =
                    cores.iter().filter(|c| c.pool as usize == i).collect();
                let busy: u64 = mine.iter().map(|c| c.busy_ns).sum();
                let queries: u64 = mine.iter().map(|c| c.prefix_queries_tokens).sum();
                let hits: u64 = mine.iter().map(|c| c.prefix_hits_tokens).sum();
                let span = duration_ns as f64 * mine.len() as f64;
                PoolSummary {
                    name: info.name.clone(),
                    role: info.role.clone(),
                    engine_cores: mine.len() as u64,
                    gpus: info.gpus,
                    busy_share: if span > 0.0 {
                        (busy as f64 / span).min(1.0)
                    } else {
                        0.0
                    },
                    kv_usage_mean: if busy > 0 {
                        mine.iter().map(|c| c.kv_usage_ns).sum::<f64>() / busy as f64
                    } else {
                        0.0
                    },
                    kv_usage_peak: mine.iter().map(|c| c.kv_usage_peak).fold(0.0, f64::max),
                    prefix_hit_rate: if queries > 0 {
                        hits as f64 / queries as f64
                    } else {
                        0.0
                    },
                    preemptions: mine.iter().map(|c| c.preemptions).sum(),
                    steps: mine.iter().map(|c| c.steps).sum(),
                }
            })
            .collect();
        let goodput = self.goodput.goodput(&self.slo, duration_s);
        let cost = run.gpu_hour_usd.map(|price| {
            let gpu_hours = run.gpus as f64 * duration_s / 3600.0;
            let total_usd = gpu_hours * price;
            Cost {
                gpu_hour_usd: price,
                gpu_hours,
                total_usd,
                usd_per_million_output_tokens: if self.output_tokens > 0 {
                    total_usd / (self.output_tokens as f64 / 1e6)
                } else {
                    0.0
                },
            }
        });
        let stages = self
            .stages
            .iter()
            .map(|st| {
                let span_ns = st.last_finish_ns.saturating_sub(st.first_arrival_ns);
                let span_s = if st.seen > 0 {
                    span_ns as f64 / 1e9
                } else {
                    0.0
                };
                let per_s = |x: u64| if span_s > 0.0 { x as f64 / span_s } else { 0.0 };
                let h = st.histograms.as_deref();
                let lat =
                    |f: fn(&StageHistograms) -> &Dist| h.map(|h| latency(f(h))).unwrap_or_default();
                StageSummary {
                    index: st.plan.index,
                    rate_per_s: st.plan.rate_per_s,
                    duration_s: st.plan.duration_s,
                    requests_sent: st.plan.requests,
                    count: st.seen,
                    completed: st.completed,
                    rejected: st.rejected,
                    aborted: st.aborted,
                    span_s,
                    requests_per_s: per_s(st.completed),
                    input_tokens_per_s: per_s(st.input_tokens),
                    output_tokens_per_s: per_s(st.output_tokens),
                    ttft_ms: lat(|h| &h.ttft_ns),
                    tpot_ms: lat(|h| &h.tpot_ns),
                    itl_ms: lat(|h| &h.itl_ns),
                    e2e_ms: lat(|h| &h.e2e_ns),
                }
            })
            .collect();
        let sessions =
            (stats.session_turns_sent + stats.session_turns_not_sent > 0).then(|| Sessions {
                turns_sent: stats.session_turns_sent,
                turns_not_sent: stats.session_turns_not_sent,
                turns_late: stats.session_turns_late,
                max_late_s: stats.session_turn_max_late_ns as f64 / 1e9,
            });
        let spinning_engines = cores
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let at = c.spun_at?;
                Some(SpinningEngine {
                    core: i as u64,
                    pool: run
                        .pools
                        .get(c.pool as usize)
                        .map_or_else(|| c.pool.to_string(), |p| p.name.clone()),
                    pod: c.pod,
                    rank: c.rank,
                    since_s: at.as_ns() as f64 / 1e9,
                })
            })
            .collect();
        Summary {
            sessions,
            spinning_engines,
            stages,
            pools,
            goodput,
            cost,
            pdsim_version: env!("CARGO_PKG_VERSION").to_string(),
            requests: Requests {
                total: stats.requests,
                completed: stats.completed,
                rejected: stats.rejected,
                aborted: stats.aborted,
                not_completed_by_reason: self.reasons.clone(),
                input_tokens: self.input_tokens,
                output_tokens: self.output_tokens,
                disaggregated: self.disaggregated,
            },
            run,
            ttft_ms: latency(&self.ttft_ns),
            tpot_ms: latency(&self.tpot_ns),
            itl_ms: latency(&self.itl()),
            e2e_ms: latency(&self.e2e_ns),
            queue_ms: latency(&self.queue_ns),
            transfer_ms: latency(&self.transfer_ns),
            ttft_share: {
                let total: u64 = self.phase_ns.iter().sum();
                let share = |i: usize| {
                    if total > 0 {
                        self.phase_ns[i] as f64 / total as f64
                    } else {
                        0.0
                    }
                };
                TtftShare {
                    queueing: share(0),
                    prefilling: share(1),
                    waiting: share(2),
                    transferring: share(3),
                    first_decode: share(4),
                }
            },
            transfer_bytes: self.transfer_bytes,
            kv_hold_expired: self.kv_hold_expired,
            link_utilization_mean: {
                let used: Vec<f64> = stats
                    .links
                    .iter()
                    .map(|(bytes, bw)| bytes / (bw * duration_s.max(1e-9)))
                    .collect();
                if used.is_empty() {
                    0.0
                } else {
                    used.iter().sum::<f64>() / used.len() as f64
                }
            },
            link_utilization_max: stats
                .links
                .iter()
                .map(|(bytes, bw)| bytes / (bw * duration_s.max(1e-9)))
                .fold(0.0, f64::max),
            duration_s,
            throughput: Throughput {
                requests_per_s: per_s(stats.completed),
                input_tokens_per_s: per_s(self.input_tokens),
                output_tokens_per_s: per_s(self.output_tokens),
                requests_per_s_per_gpu: per_s(stats.completed) / gpus as f64,
                input_tokens_per_s_per_gpu: per_s(self.input_tokens) / gpus as f64,
                output_tokens_per_s_per_gpu: per_s(self.output_tokens) / gpus as f64,
            },
            preemptions: sum(|c| c.preemptions),
            prefix_cache: PrefixCache {
                queries_tokens: queries,
                hits_tokens: hits,
                hit_rate: if queries > 0 {
                    hits as f64 / queries as f64
                } else {
                    0.0
                },
                external_hits_tokens: sum(|c| c.external_hits_tokens),
                external_hit_rate: if queries > 0 {
                    sum(|c| c.external_hits_tokens) as f64 / queries as f64
                } else {
                    0.0
                },
                offload_stores_blocks: sum(|c| c.offload_stores),
                offload_evictions_blocks: sum(|c| c.offload_evictions),
                lmcache_stores_chunks: sum(|c| c.lmcache_stores),
                lmcache_evictions_chunks: sum(|c| c.lmcache_evictions),
                lmcache_loaded_bytes: cores.iter().map(|c| c.lmcache_loaded_bytes).sum(),
                lmcache_stored_bytes: cores.iter().map(|c| c.lmcache_stored_bytes).sum(),
                secondary_written_chunks: sum(|c| c.tier_written_chunks),
                secondary_failed_writes: sum(|c| c.tier_failed_writes),
                secondary_promoted_chunks: sum(|c| c.tier_promoted_chunks),
                secondary_written_bytes: cores.iter().map(|c| c.tier_written_bytes).sum(),
                secondary_read_bytes: cores.iter().map(|c| c.tier_read_bytes).sum(),
                router_predicted_tokens: self.router_predicted.0,
                router_predicted_hit_rate: if self.router_predicted.2 > 0 {
                    self.router_predicted.0 as f64 / self.router_predicted.2 as f64
                } else {
                    0.0
                },
                routed_found_tokens: self.router_predicted.1,
                routed_found_hit_rate: if self.router_predicted.2 > 0 {
                    self.router_predicted.1 as f64 / self.router_predicted.2 as f64
                } else {
                    0.0
                },
            },
            kv_usage: KvUsage {
                mean: if busy_ns > 0 {
                    kv_weighted / busy_ns as f64
                } else {
                    0.0
                },
                peak: cores.iter().map(|c| c.kv_usage_peak).fold(0.0, f64::max),
            },
            step_time_s: StepBreakdown {
                cores: cores.len() as u64,
                busy: busy_ns as f64 / 1e9,
                compute: sum(|c| c.compute_ns) as f64 / 1e9,
                memory: sum(|c| c.memory_ns) as f64 / 1e9,
                communication: sum(|c| c.communication_ns) as f64 / 1e9,
                host: sum(|c| c.host_ns) as f64 / 1e9,
                padding: sum(|c| c.padding_ns) as f64 / 1e9,
                steps: sum(|c| c.steps),
                padded_tokens_share: if padded > 0 {
                    1.0 - scheduled as f64 / padded as f64
                } else {
                    0.0
                },
            },
        }
    }
}

/// Writes `requests.csv` row by row as requests end.
pub struct CsvSink<W: Write> {
    /// `None` once a write failed (the error is kept).
    writer: Option<row::RowWriter<W>>,
    error: Option<String>,
}

const CSV_HEADER: &[&str] = &[
    "id",
    "source_line",
    "slo_class",
    "arrival_ms",
    "enqueued_ms",
    "scheduled_ms",
    "first_token_ms",
    "last_token_ms",
    "finished_ms",
    "ttft_ms",
    "e2e_ms",
    "queue_ms",
    "prefill_ms",
    "decode_ms",
    "tpot_ms",
    "prompt_tokens",
    "cached_tokens",
    "output_tokens",
    "preemptions",
    "pool",
    "pod",
    "rank",
    "prefill_pod",
    "prefill_scheduled_ms",
    "prefill_done_ms",
    "prefill_cached_tokens",
    "transfer_start_ms",
    "transfer_end_ms",
    "transfer_ms",
    "transfer_bytes",
    "kv_hold_expired",
    "offload_tokens",
    "offload_load_ms",
    "outcome",
    "reason",
];

impl<W: Write> CsvSink<W> {
    pub fn new(out: W) -> CsvSink<W> {
        match row::RowWriter::new(out, CSV_HEADER) {
            Ok(w) => CsvSink {
                writer: Some(w),
                error: None,
            },
            Err(e) => CsvSink {
                writer: None,
                error: Some(e.to_string()),
            },
        }
    }

    /// Flushes and reports the first write error, if any.
    pub fn finish(self) -> Result<W, String> {
        finish_rows(self.writer, self.error)
    }
}

/// The inner writer of a row sink, flushed, or its first error.
fn finish_rows<W: Write>(
    writer: Option<row::RowWriter<W>>,
    error: Option<String>,
) -> Result<W, String> {
    match (writer, error) {
        (_, Some(e)) => Err(e),
        (Some(w), None) => w.finish().map_err(|e| e.to_string()),
        (None, None) => Err("the CSV writer is gone".into()),
    }
}

impl<W: Write> CsvSink<W> {
    fn write_row(w: &mut row::RowWriter<W>, r: &RequestRecord) -> std::io::Result<()> {
        let since = |a: Option<pdsim_core::SimTime>, b: Option<pdsim_core::SimTime>| match (a, b) {
            (Some(a), Some(b)) => Some(b.since(a).as_ns()),
            _ => None,
        };
        let at = |t: Option<pdsim_core::SimTime>| t.map(|t| t.as_ns());
        w.int(r.id.0.into());
        w.int(r.source_line);
        w.int(r.slo_class.into());
        w.ms(Some(r.arrival.as_ns()));
        w.ms(at(r.enqueued));
        w.ms(at(r.scheduled));
        w.ms(at(r.first_token));
        w.ms(at(r.last_token));
        w.ms(Some(r.finished.as_ns()));
        w.ms(since(Some(r.arrival), r.first_token));
        w.ms(Some(r.finished.since(r.arrival).as_ns()));
        // Queueing until the first engine (prefill's under P/D) scheduled
        // it; prefill until its prompt was done (the first token when
        // served whole); decode from the first token to the last.
        w.ms(since(Some(r.arrival), r.prefill_scheduled.or(r.scheduled)));
        w.ms(since(
            r.prefill_scheduled.or(r.scheduled),
            r.prefill_done.or(r.first_token),
        ));
        w.ms(since(r.first_token, r.last_token));
        w.ms(since(r.first_token, r.last_token)
            .filter(|_| r.output_tokens > 1)
            .map(|d| d / (r.output_tokens as u64 - 1)));
        w.int(r.prompt_tokens.into());
        w.int(r.cached_tokens.into());
        w.int(r.output_tokens.into());
        w.int(r.preemptions.into());
        w.int(r.pool.into());
        w.int(r.pod.into());
        w.int(r.rank.into());
        // The prefill engine `pool/pod/rank`; empty when absent.
        match r.prefill {
            Some((pool, pod, rank)) => w.path(&[pool.into(), pod.into(), rank.into()]),
            None => w.empty(),
        }
        w.ms(at(r.prefill_scheduled));
        w.ms(at(r.prefill_done));
        w.int(r.prefill_cached_tokens.into());
        w.ms(at(r.transfer_start));
        w.ms(at(r.transfer_end));
        w.ms(since(r.transfer_start, r.transfer_end));
        w.int(r.transfer_bytes);
        w.int(r.kv_hold_expired.into());
        w.int(r.offload_tokens.into());
        w.ms(since(r.offload_load_start, r.offload_load_end));
        w.text(r.outcome.as_str());
        w.text(r.reason);
        w.end_row()
    }
}

impl<W: Write> RecordSink for CsvSink<W> {
    fn record(&mut self, r: &RequestRecord) {
        let Some(w) = self.writer.as_mut() else {
            return;
        };
        if let Err(e) = Self::write_row(w, r) {
            self.error = Some(e.to_string());
            self.writer = None;
        }
    }

    fn emission(&mut self, _gap_ns: u64, _tokens: u32) {}
}

/// Sends everything to each of its sinks, in order. An empty fan-out
/// keeps nothing.
pub struct Fanout<'a>(pub Vec<&'a mut dyn RecordSink>);

impl RecordSink for Fanout<'_> {
    fn record(&mut self, r: &RequestRecord) {
        self.0.iter_mut().for_each(|s| s.record(r));
    }
    fn emission(&mut self, gap_ns: u64, tokens: u32) {
        self.0.iter_mut().for_each(|s| s.emission(gap_ns, tokens));
    }
    fn emission_of(&mut self, r: &RequestRecord, gap_ns: u64, tokens: u32) {
        self.0
            .iter_mut()
            .for_each(|s| s.emission_of(r, gap_ns, tokens));
    }
    fn emissions(&mut self, batch: &[pdsim_cluster::Emission]) {
        self.0.iter_mut().for_each(|s| s.emissions(batch));
    }
    fn link_window(&mut self, window: pdsim_cluster::LinkWindow) {
        self.0.iter_mut().for_each(|s| s.link_window(window));
    }
    fn core_sample(&mut self, sample: &pdsim_cluster::CoreSample) {
        self.0.iter_mut().for_each(|s| s.core_sample(sample));
    }
    fn step(&mut self, step: &pdsim_cluster::StepSample) {
        self.0.iter_mut().for_each(|s| s.step(step));
    }
}

/// Writes `links.csv`: each link's utilisation per one-second window, as
/// windows close, for the links KV transfers and offload loads used.
pub struct LinkCsvSink<W: Write> {
    /// `None` once a write failed (the error is kept).
    writer: Option<row::RowWriter<W>>,
    error: Option<String>,
}

impl<W: Write> LinkCsvSink<W> {
    pub fn new(out: W) -> LinkCsvSink<W> {
        let header = ["window_start_s", "gpu", "link", "bytes", "utilization"];
        match row::RowWriter::new(out, &header) {
            Ok(w) => LinkCsvSink {
                writer: Some(w),
                error: None,
            },
            Err(e) => LinkCsvSink {
                writer: None,
                error: Some(e.to_string()),
            },
        }
    }

    pub fn finish(self) -> Result<W, String> {
        finish_rows(self.writer, self.error)
    }
}

impl<W: Write> RecordSink for LinkCsvSink<W> {
    fn record(&mut self, _r: &RequestRecord) {}
    fn emission(&mut self, _gap_ns: u64, _tokens: u32) {}
    fn link_window(&mut self, w: pdsim_cluster::LinkWindow) {
        use row::Cell;
        let Some(writer) = self.writer.as_mut() else {
            return;
        };
        let row = [
            Cell::Int(w.window_start.as_ns() / 1_000_000_000),
            Cell::Int(w.gpu.into()),
            Cell::Text(w.kind),
            Cell::Fixed(w.bytes, 0),
            Cell::Fixed(w.utilization, 6),
        ];
        if let Err(e) = writer.cells(&row) {
            self.error = Some(e.to_string());
            self.writer = None;
        }
    }
}

/// The text summary printed after a run.
pub fn render_text(summary: &Summary) -> String {
    let mut out = String::new();
    let r = &summary.requests;
    // Each row in the unit its largest figure reads best in: ms up to
    // 10 s, then s up to 10 min, then min, then h.
    let line = |name: &str, l: &Latency| {
        let (unit, per_ms) = match l.p999.max(l.mean) {
            x if x < 10_000.0 => ("ms", 1.0),
            x if x < 600_000.0 => ("s", 1e3),
            x if x < 36_000_000.0 => ("min", 6e4),
            _ => ("h", 3.6e6),
        };
        format!(
            "  {name:<5} mean {:>9.2}  p50 {:>9.2}  p90 {:>9.2}  p99 {:>9.2}  p99.9 {:>9.2}  ({unit}, n={})\n",
            l.mean / per_ms,
            l.p50 / per_ms,
            l.p90 / per_ms,
            l.p99 / per_ms,
            l.p999 / per_ms,
            l.count
        )
    };
    out.push_str(&format!(
        "run: deployment {} on scenario {} (trace {}, seed {}, router {}, {} engines, {} GPUs)\n",
        summary.run.deployment,
        summary.run.scenario,
        summary.run.trace,
        summary.run.seed,
        summary.run.router,
        summary.run.engines,
        summary.run.gpus
    ));
    out.push_str(&format!(
        "requests: {} total, {} completed, {} rejected, {} aborted over {:.1} s simulated\n",
        r.total, r.completed, r.rejected, r.aborted, summary.duration_s
    ));
    if r.disaggregated > 0 {
        out.push_str(&format!(
            "  {} of {} completed requests disaggregated ({:.0}%)\n",
            r.disaggregated,
            r.completed,
            100.0 * r.disaggregated as f64 / r.completed.max(1) as f64
        ));
    }
    for (reason, count) in &r.not_completed_by_reason {
        out.push_str(&format!("  {count} {reason}\n"));
    }
    if let Some(s) = &summary.sessions {
        out.push_str(&format!(
            "  conversations: {} later turns sent closed-loop (each only once the turn before \
             it had ended), {} not sent (a turn before them failed or timed out)\n",
            s.turns_sent, s.turns_not_sent
        ));
        if s.turns_late > 0 {
            out.push_str(&format!(
                "  {} later turns were sent late, up to {:.3} s: the trace lists them after an \
                 arrival that comes later than they were due\n",
                s.turns_late, s.max_late_s
            ));
        }
    }
    for e in &summary.spinning_engines {
        out.push_str(&format!(
            "  engine core {} (pool {}, pod {}, rank {}) spins from {:.3} s: it preempted again \
             and again without delivering a token, its requests taking turns being admitted on \
             their cached prefixes and preempted, as vLLM's scheduler does when together they \
             need every KV block it has (seen on 0.29.0 under async scheduling with a KV \
             connector) and would do for ever; its requests never finished ({})\n",
            e.core,
            e.pool,
            e.pod,
            e.rank,
            e.since_s,
            pdsim_cluster::ENGINE_SPINNING
        ));
    }
    if let Some(seconds) = summary.run.client_timeout_s {
        out.push_str(&format!(
            "  clients give up after {seconds} s; latencies are of completed requests only\n"
        ));
    }
    out.push_str("latency:\n");
    out.push_str(&line("TTFT", &summary.ttft_ms));
    out.push_str(&line("TPOT", &summary.tpot_ms));
    out.push_str(&line("ITL", &summary.itl_ms));
    out.push_str(&line("E2E", &summary.e2e_ms));
    out.push_str(&line("queue", &summary.queue_ms));
    for st in &summary.stages {
        out.push_str(&format!(
            "stage {}: {} req/s for {} s: {} sent, {} completed, {} rejected, {} aborted; {:.2} req/s, {:.0} input tok/s, {:.0} output tok/s over {:.1} s\n",
            st.index,
            st.rate_per_s,
            st.duration_s,
            st.requests_sent,
            st.completed,
            st.rejected,
            st.aborted,
            st.requests_per_s,
            st.input_tokens_per_s,
            st.output_tokens_per_s,
            st.span_s
        ));
        out.push_str(&line("TTFT", &st.ttft_ms));
        out.push_str(&line("ITL", &st.itl_ms));
        out.push_str(&line("E2E", &st.e2e_ms));
    }
    if summary.transfer_ms.count > 0 {
        out.push_str(&line("KV tx", &summary.transfer_ms));
        let t = &summary.ttft_share;
        out.push_str(&format!(
            "TTFT spent: {:.0}% queueing, {:.0}% prefilling, {:.0}% waiting for decode, {:.0}% transferring KV, {:.0}% first decode step\n",
            t.queueing * 100.0, t.prefilling * 100.0, t.waiting * 100.0, t.transferring * 100.0, t.first_decode * 100.0
        ));
        out.push_str(&format!(
            "KV transfer: {:.1} GiB moved; links {:.1}% utilised on average, busiest {:.1}%; {} prefill holds expired\n",
            summary.transfer_bytes as f64 / (1u64 << 30) as f64,
            summary.link_utilization_mean * 100.0,
            summary.link_utilization_max * 100.0,
            summary.kv_hold_expired
        ));
    }
    let t = &summary.throughput;
    out.push_str(&format!(
        "throughput: {:.2} req/s, {:.0} input tok/s, {:.0} output tok/s ({:.0} per GPU)\n",
        t.requests_per_s,
        t.input_tokens_per_s,
        t.output_tokens_per_s,
        t.output_tokens_per_s_per_gpu
    ));
    out.push_str(&format!(
        "prefix cache: {:.1}% of prompt tokens hit in HBM, {:.1}% in the offload tier; KV usage mean {:.1}%, peak {:.1}%; {} preemptions\n",
        summary.prefix_cache.hit_rate * 100.0,
        summary.prefix_cache.external_hit_rate * 100.0,
        summary.kv_usage.mean * 100.0,
        summary.kv_usage.peak * 100.0,
        summary.preemptions
    ));
    let pc = &summary.prefix_cache;
    if pc.lmcache_stores_chunks > 0 {
        out.push_str(&format!(
            "LMCache: {} chunks stored, {} evicted; {:.2} GiB loaded into GPUs, {:.2} GiB stored from them\n",
            pc.lmcache_stores_chunks,
            pc.lmcache_evictions_chunks,
            pc.lmcache_loaded_bytes / GIB,
            pc.lmcache_stored_bytes / GIB
        ));
    }
    if pc.router_predicted_tokens + pc.routed_found_tokens > 0 {
        out.push_str(&format!(
            "router's prefix estimate: {:.1}% of prompt tokens cached on the engines it picked; they found {:.1}% (HBM and offload tiers)\n",
            pc.router_predicted_hit_rate * 100.0,
            pc.routed_found_hit_rate * 100.0
        ));
    }
    if pc.secondary_written_chunks + pc.secondary_failed_writes > 0 {
        out.push_str(&format!(
            "secondary offload tiers: {} chunks written ({:.2} GiB), {} refused as full; {} promoted back to host memory ({:.2} GiB read)\n",
            pc.secondary_written_chunks,
            pc.secondary_written_bytes / GIB,
            pc.secondary_failed_writes,
            pc.secondary_promoted_chunks,
            pc.secondary_read_bytes / GIB
        ));
    }
    if let Some(g) = &summary.goodput {
        out.push_str(&format!(
            "goodput: {} of {} requests met their SLO ({:.1}%), {:.2} req/s\n",
            g.requests_met,
            g.requests,
            100.0 * g.met_share,
            g.requests_per_s
        ));
        for (class, c) in &g.by_class {
            out.push_str(&format!(
                "  {class}: {} — {} of {} ({:.1}%)\n",
                c.slo.describe(),
                c.requests_met,
                c.requests,
                100.0 * c.met_share
            ));
        }
        let m = &g.missed;
        let reasons: Vec<String> = [
            (m.ttft, "over the TTFT bound"),
            (m.itl, "over the ITL bound"),
            (m.e2e, "over the E2E bound"),
            (m.not_completed, "not completed"),
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, why)| format!("{n} {why}"))
        .collect();
        if !reasons.is_empty() {
            out.push_str(&format!(
                "  missed: {} (a request may miss for several)\n",
                reasons.join(", ")
            ));
        }
        for class in &g.classes_without_requests {
            out.push_str(&format!(
                "  {class}: no request of the run is in this class (classes come from a TraceV2 trace's `slo_class` column; an SLO given without a class name judges every request)\n"
            ));
        }
    }
    if let Some(c) = &summary.cost {
        out.push_str(&format!(
            "cost: {:.2} GPU-hours at {} USD = {:.2} USD, {:.3} USD per million output tokens\n",
            c.gpu_hours,
            pdsim_spec::problem::number(c.gpu_hour_usd),
            c.total_usd,
            c.usd_per_million_output_tokens
        ));
    }
    let s = &summary.step_time_s;
    let span = s.cores as f64 * summary.duration_s;
    out.push_str(&format!(
        "engine time: {} steps on {} engine cores, busy {:.1} core-s of {:.1} ({:.1}%); summed over every kernel, compute {:.1} s and memory traffic {:.1} s (each kernel takes the longer, so they add up to more than busy), communication {:.1} s, host {:.1} s; padding {:.1} s ({:.1}% of tokens padded)\n",
        s.steps,
        s.cores,
        s.busy,
        span,
        if span > 0.0 { 100.0 * s.busy / span } else { 0.0 },
        s.compute,
        s.memory,
        s.communication,
        s.host,
        s.padding,
        s.padded_tokens_share * 100.0
    ));
    out
}

#[cfg(test)]
mod link_csv_tests {
    use super::LinkCsvSink;
    use pdsim_cluster::{LinkWindow, RecordSink};
    use pdsim_core::SimTime;

    /// `links.csv`: one row per closed window, its start in whole seconds,
    /// bytes rounded to a byte and utilization to six places.
    #[test]
    fn each_link_window_is_one_row() {
        let mut sink = LinkCsvSink::new(Vec::new());
        sink.link_window(LinkWindow {
            window_start: SimTime(3_000_000_000),
            gpu: 5,
            kind: "nic-out",
            bytes: 1_234.6,
            utilization: 0.125,
        });
        let text = String::from_utf8(sink.finish().unwrap()).unwrap();
        assert_eq!(
            text,
            "window_start_s,gpu,link,bytes,utilization\n3,5,nic-out,1235,0.125000\n"
        );
    }
}

#[cfg(test)]
mod stage_tests {
    use super::{Aggregator, CsvSink, PoolInfo, RunInfo};
    use pdsim_cluster::{Outcome, RecordSink, RequestRecord, RunStats};
    use pdsim_core::{RequestId, SimTime};
    use pdsim_workload::StagePlan;

    fn plan(index: u16, first_request: u64, requests: u64) -> StagePlan {
        StagePlan {
            index,
            rate_per_s: 1.0,
            duration_s: requests,
            requests,
            first_request,
        }
    }

    /// A request numbered `line` that arrived at `arrival_ms`, had its first
    /// token 10 ms later and its second 5 ms after that.
    fn done(line: u64, arrival_ms: u64) -> RequestRecord {
        let mut r = RequestRecord::arrived(
            RequestId(line as u32),
            line,
            0,
            SimTime::from_ms(arrival_ms),
            100,
            (0, 0, 0),
        );
        r.first_token = Some(SimTime::from_ms(arrival_ms + 10));
        r.last_token = Some(SimTime::from_ms(arrival_ms + 15));
        r.finished = SimTime::from_ms(arrival_ms + 15);
        r.output_tokens = 2;
        r
    }

    fn info() -> RunInfo {
        RunInfo {
            scenario: "s".into(),
            deployment: "d".into(),
            trace: "t".into(),
            seed: 0,
            router: "r".into(),
            engines: 1,
            gpus: 1,
            pools: Vec::new(),
            gpu_hour_usd: None,
            client_timeout_s: None,
        }
    }

    #[test]
    fn records_and_gaps_count_in_the_stage_of_their_request_number() {
        // Stage 0 holds requests 1–2, stage 1 requests 3–5.
        let mut a = Aggregator::default().with_stages(&[plan(0, 1, 2), plan(1, 3, 3)]);
        for (line, at) in [(1, 0), (2, 1000), (3, 5000), (4, 6000)] {
            let r = done(line, at);
            a.emission_of(&r, 5_000_000, 1);
            a.record(&r);
        }
        let mut rejected =
            RequestRecord::arrived(RequestId(5), 5, 0, SimTime::from_ms(7000), 100, (0, 0, 0));
        rejected.outcome = Outcome::Rejected;
        rejected.reason = "queue-full";
        a.record(&rejected);
        // A request numbered outside every stage counts only in the run.
        a.record(&done(9, 8000));
        let s = a.summary(&RunStats::default(), info());
        // Every request not completed is counted under its outcome and reason.
        assert_eq!(
            s.requests.not_completed_by_reason,
            std::collections::BTreeMap::from([("rejected:queue-full".to_string(), 1)])
        );
        assert_eq!(s.stages.len(), 2);
        let (s0, s1) = (&s.stages[0], &s.stages[1]);
        assert_eq!((s0.count, s0.completed, s0.rejected), (2, 2, 0));
        assert_eq!((s1.count, s1.completed, s1.rejected), (3, 2, 1));
        assert_eq!((s0.ttft_ms.count, s1.ttft_ms.count), (2, 2));
        assert_eq!((s0.itl_ms.count, s1.itl_ms.count), (2, 2));
        assert!((s0.ttft_ms.mean - 10.0).abs() < 0.01);
        assert!((s1.itl_ms.p50 - 5.0).abs() < 0.01);
        // Stage 0 spans 0 to 1.015 s: 2 requests in 1.015 s.
        assert!((s0.span_s - 1.015).abs() < 1e-9);
        assert!((s0.requests_per_s - 2.0 / 1.015).abs() < 1e-9);
        // Stage 1 spans its first arrival (5 s) to its last finish (7 s).
        assert!((s1.span_s - 2.0).abs() < 1e-9, "{}", s1.span_s);
        // The whole run saw all six.
        assert_eq!(s.ttft_ms.count, 5);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"stages\":[{\"index\":0"));
    }

    /// The router's estimate and what the engines found are summed over
    /// the requests a prefix scorer routed, each against the engine that
    /// computed its prompt (the prefill engine under P/D), found tokens
    /// capped at the prompt.
    #[test]
    fn the_routers_estimate_is_compared_on_the_requests_it_routed() {
        let mut a = Aggregator::default();
        // Colocated: HBM 20 + LMCache 30 of 100; the router said 10.
        let mut r = done(1, 0);
        r.router_cached_tokens = Some(10);
        (r.cached_tokens, r.lmcache_tokens) = (20, 30);
        a.record(&r);
        // Under P/D the prefill engine's hit counts, not the decode one's;
        // an offload load counts too, capped at the prompt.
        let mut r = done(2, 0);
        r.router_cached_tokens = Some(90);
        r.prefill = Some((0, 0, 0));
        (r.prefill_cached_tokens, r.cached_tokens, r.offload_tokens) = (60, 100, 80);
        a.record(&r);
        // Without a prediction a request counts in neither.
        let mut r = done(3, 0);
        r.cached_tokens = 100;
        a.record(&r);
        let summary = a.summary(&RunStats::default(), info());
        let pc = &summary.prefix_cache;
        assert_eq!(
            (pc.router_predicted_tokens, pc.routed_found_tokens),
            (100, 150)
        );
        assert!((pc.router_predicted_hit_rate - 0.5).abs() < 1e-12);
        assert!((pc.routed_found_hit_rate - 0.75).abs() < 1e-12);
        assert!(super::render_text(&summary).contains(
            "router's prefix estimate: 50.0% of prompt tokens cached on the engines it picked; they found 75.0%"
        ));
        // A router that believed nothing while the engines found something
        // is still said.
        let mut a = Aggregator::default();
        let mut r = done(1, 0);
        (r.router_cached_tokens, r.cached_tokens) = (Some(0), 40);
        a.record(&r);
        assert!(super::render_text(&a.summary(&RunStats::default(), info())).contains(
            "router's prefix estimate: 0.0% of prompt tokens cached on the engines it picked; they found 40.0%"
        ));
        // Without a prefix scorer: no figures (0, not 0/0) and no line.
        let mut a = Aggregator::default();
        a.record(&done(1, 0));
        let summary = a.summary(&RunStats::default(), info());
        let pc = &summary.prefix_cache;
        assert_eq!(
            (pc.router_predicted_hit_rate, pc.routed_found_hit_rate),
            (0.0, 0.0)
        );
        assert!(!super::render_text(&summary).contains("router's prefix estimate"));
    }

    /// The secondary offload tiers' line is there when a tier took or
    /// refused a chunk, with the counts and bytes summed over cores.
    #[test]
    fn the_secondary_tiers_line_sums_their_chunks_and_bytes() {
        let mut a = Aggregator::default();
        a.record(&done(1, 0));
        let gib = 1024.0 * 1024.0 * 1024.0;
        let core = |written: u64, failed: u64| pdsim_cluster::CoreStats {
            tier_written_chunks: written,
            tier_failed_writes: failed,
            tier_promoted_chunks: 2,
            tier_written_bytes: gib,
            tier_read_bytes: gib / 2.0,
            ..Default::default()
        };
        let stats = RunStats {
            cores: vec![core(3, 0), core(0, 1)],
            ..Default::default()
        };
        let text = super::render_text(&a.summary(&stats, info()));
        assert!(
            text.contains("secondary offload tiers: 3 chunks written (2.00 GiB), 1 refused as full; 4 promoted back to host memory (1.00 GiB read)"),
            "{text}"
        );
        // Only refusals still say so; nothing written or refused, no line.
        let stats = RunStats {
            cores: vec![core(0, 1)],
            ..Default::default()
        };
        assert!(super::render_text(&a.summary(&stats, info())).contains("0 chunks written"));
        let stats = RunStats {
            cores: vec![core(0, 0)],
            ..Default::default()
        };
        assert!(
            !super::render_text(&a.summary(&stats, info())).contains("secondary offload tiers")
        );
    }

    /// A core found spinning is named in the summary, with when, and its
    /// never-finished requests' reason; in summary.json too, and neither
    /// says anything when no core spun.
    #[test]
    fn a_spinning_engine_is_named_in_the_summary() {
        let a = Aggregator::default();
        let spun = pdsim_cluster::CoreStats {
            pool: 0,
            pod: 8,
            spun_at: Some(pdsim_core::SimTime(83_021_886_366)),
            ..Default::default()
        };
        let stats = RunStats {
            cores: vec![pdsim_cluster::CoreStats::default(), spun],
            ..Default::default()
        };
        let summary = a.summary(&stats, info());
        let text = super::render_text(&summary);
        assert!(
            text.contains("engine core 1 (pool 0, pod 8, rank 0) spins from 83.022 s:")
                && text.contains("its requests never finished (engine-spinning)"),
            "{text}"
        );
        let json = serde_json::to_value(&summary).expect("json");
        assert_eq!(
            json["spinning_engines"],
            serde_json::json!([{"core": 1, "pool": "0", "pod": 8, "rank": 0, "since_s": 83.021886366}])
        );
        let quiet = a.summary(&RunStats::default(), info());
        assert!(!super::render_text(&quiet).contains("spins from"));
        assert!(
            serde_json::to_value(&quiet)
                .expect("json")
                .get("spinning_engines")
                .is_none()
        );
    }

    /// A completed request: arrival, first token, last token and finish
    /// in ms, and its output tokens.
    fn completed(line: u64, times_ms: [u64; 4], output: u32) -> RequestRecord {
        let [arrival, first, last, finished] = times_ms;
        let mut r = RequestRecord::arrived(
            RequestId(line as u32),
            line,
            0,
            SimTime::from_ms(arrival),
            100,
            (0, 0, 0),
        );
        r.first_token = Some(SimTime::from_ms(first));
        r.last_token = Some(SimTime::from_ms(last));
        r.finished = SimTime::from_ms(finished);
        r.output_tokens = output;
        r
    }

    #[test]
    fn every_summary_figure_from_a_hand_built_record_set() {
        use super::slo::{ClassNames, Slo, SloPlan};
        // Three requests over 0-4 s, 2 GPUs at 3 USD per GPU-hour, SLO
        // TTFT ≤ 150 ms and E2E ≤ 2500 ms:
        //   A: arrives 0, first token 100, last 1100, finished 1200; 11 tokens
        //      → TTFT 100, TPOT (1100−100)/10 = 100, E2E 1200 (meets).
        //   B: arrives 1000, first 1200, last 1600, finished 1600; 5 tokens
        //      → TTFT 200 (misses the TTFT bound), TPOT 100, E2E 600.
        //   C: arrives 2000, first 2050, last 2050, finished 4000; 1 token
        //      → TTFT 50, no TPOT, E2E 2000 (meets).
        let slo = SloPlan::new(
            Some(Slo::parse("ttft_ms=150,e2e_ms=2500").unwrap()),
            &Default::default(),
            &Default::default(),
            ClassNames::new(&[String::new()]),
        );
        // All three in one load stage. The engine schedules A at 20 ms, B
        // at 1100 ms and C on arrival: queueing 20 + 100 + 0 = 120 ms and
        // prefilling up to the first token 80 + 100 + 50 = 230 ms.
        let mut a = Aggregator::with_slo(slo).with_stages(&[plan(0, 1, 3)]);
        for (mut r, scheduled_ms) in [
            (completed(1, [0, 100, 1100, 1200], 11), 20),
            (completed(2, [1000, 1200, 1600, 1600], 5), 1100),
            (completed(3, [2000, 2050, 2050, 4000], 1), 2000),
        ] {
            r.scheduled = Some(SimTime::from_ms(scheduled_ms));
            // A's ten gaps between tokens and B's four are 100 ms each (C
            // has one token and no gap): ITL is 100 ms over 14 gaps.
            for _ in 1..r.output_tokens {
                a.emission_of(&r, 100_000_000, 1);
            }
            a.record(&r);
        }
        let mut run = info();
        run.gpus = 2;
        run.gpu_hour_usd = Some(3.0);
        // The event loop's own count of what completed.
        let stats = RunStats {
            requests: 3,
            completed: 3,
            ..RunStats::default()
        };
        let s = a.summary(&stats, run);
        let near = |x: f64, y: f64| (x - y).abs() <= 1e-3 * y.abs().max(1.0);
        // TTFT: (100 + 200 + 50)/3; TPOT over the two with a second token.
        assert!(near(s.ttft_ms.mean, 350.0 / 3.0), "{}", s.ttft_ms.mean);
        assert_eq!((s.ttft_ms.count, s.tpot_ms.count), (3, 2));
        assert!(near(s.tpot_ms.mean, 100.0), "{}", s.tpot_ms.mean);
        assert!(near(s.e2e_ms.mean, (1200.0 + 600.0 + 2000.0) / 3.0));
        assert_eq!(s.itl_ms.count, 14);
        assert!(near(s.itl_ms.mean, 100.0), "{}", s.itl_ms.mean);
        // The stage holds the same three: the same TTFT and TPOT.
        let stage = &s.stages[0];
        assert!(
            near(stage.ttft_ms.mean, 350.0 / 3.0),
            "{}",
            stage.ttft_ms.mean
        );
        assert_eq!(stage.tpot_ms.count, 2);
        assert!(near(stage.tpot_ms.mean, 100.0), "{}", stage.tpot_ms.mean);
        // Queueing (20, 100, 0 ms) and where the TTFT went: 120 of 350 ms
        // queueing, 230 prefilling (no P/D: nothing waits or transfers).
        assert!(near(s.queue_ms.mean, 40.0), "{}", s.queue_ms.mean);
        let share = &s.ttft_share;
        assert!(near(share.queueing, 120.0 / 350.0), "{share:?}");
        assert!(near(share.prefilling, 230.0 / 350.0), "{share:?}");
        assert_eq!((share.waiting, share.transferring), (0.0, 0.0));
        let (name, part) = share.largest().expect("time was counted");
        assert_eq!(name, "prefill");
        assert!(near(part, 230.0 / 350.0));
        assert_eq!(super::TtftShare::default().largest(), None);
        // The run spans the first arrival to the last finish: 4 s.
        assert!(near(s.duration_s, 4.0));
        assert!(near(s.throughput.requests_per_s, 0.75));
        assert!(near(s.throughput.output_tokens_per_s, 17.0 / 4.0));
        assert!(near(s.throughput.requests_per_s_per_gpu, 0.375));
        assert!(near(s.throughput.output_tokens_per_s_per_gpu, 17.0 / 8.0));
        // Each prompt is 100 tokens: 300 over 4 s is 75 per second, 37.5
        // per GPU.
        assert!(near(s.throughput.input_tokens_per_s, 75.0));
        assert!(near(s.throughput.input_tokens_per_s_per_gpu, 37.5));
        // Goodput: A and C meet, B misses (its TTFT): 2 of 3, 0.5 per
        // second.
        let g = s.goodput.as_ref().expect("an SLO was given");
        assert_eq!((g.requests, g.requests_met), (3, 2));
        assert_eq!(
            (g.missed.ttft, g.missed.e2e, g.missed.not_completed),
            (1, 0, 0)
        );
        assert!(
            super::render_text(&s)
                .contains("  missed: 1 over the TTFT bound (a request may miss for several)\n"),
            "{}",
            super::render_text(&s)
        );
        assert!(near(g.met_share, 2.0 / 3.0));
        assert!(near(g.requests_per_s, 0.5));
        // Cost: 2 GPUs × 4 s = 8/3600 GPU-hours at 3 USD; per million
        // output tokens, that over 17 tokens.
        let c = s.cost.as_ref().expect("a price was given");
        assert!(near(c.gpu_hours, 8.0 / 3600.0));
        assert!(near(c.total_usd, 24.0 / 3600.0));
        assert!(near(
            c.usd_per_million_output_tokens,
            24.0 / 3600.0 / 17.0 * 1e6
        ));
    }

    #[test]
    fn each_latency_row_reads_in_the_unit_that_suits_it() {
        // A TTFT of 2,005,932 ms is 33.43 min; the 68 ms between its two
        // tokens stay in ms; its E2E, 2,006,100 ms, in min too.
        let mut a = Aggregator::default();
        let r = completed(1, [0, 2_005_932, 2_006_000, 2_006_100], 2);
        a.emission_of(&r, 68_000_000, 1);
        a.record(&r);
        let text = super::render_text(&a.summary(&RunStats::default(), info()));
        let row = |name: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(name))
                .unwrap_or_else(|| panic!("{name} in {text}"))
                .to_string()
        };
        assert!(row("TTFT").contains("mean     33.43"), "{}", row("TTFT"));
        assert!(row("TTFT").ends_with("(min, n=1)"), "{}", row("TTFT"));
        assert!(row("TPOT").contains("mean     68.00"), "{}", row("TPOT"));
        assert!(row("TPOT").ends_with("(ms, n=1)"), "{}", row("TPOT"));
        assert!(row("E2E").ends_with("(min, n=1)"), "{}", row("E2E"));
    }

    #[test]
    fn engine_time_is_given_against_the_cores_and_the_run() {
        // Two engine cores busy 1 s and 2 s of a 4 s run: 3 core-s of 8.
        let mut a = Aggregator::default();
        a.record(&completed(1, [0, 100, 100, 4000], 1));
        let core = |busy_ns: u64| pdsim_cluster::CoreStats {
            busy_ns,
            ..Default::default()
        };
        let stats = RunStats {
            cores: vec![core(1_000_000_000), core(2_000_000_000)],
            ..RunStats::default()
        };
        let s = a.summary(&stats, info());
        assert_eq!(s.step_time_s.cores, 2);
        let text = super::render_text(&s);
        assert!(
            text.contains("on 2 engine cores, busy 3.0 core-s of 8.0 (37.5%)"),
            "{text}"
        );
    }

    #[test]
    fn without_stages_the_summary_has_no_stages_key() {
        let mut a = Aggregator::default();
        a.record(&done(1, 0));
        let s = a.summary(&RunStats::default(), info());
        assert!(s.stages.is_empty());
        let json = serde_json::to_string(&s).unwrap();
        assert!(!json.contains("stages"));
        assert!(!super::render_text(&s).contains("stage "));
    }

    #[test]
    fn pool_and_cache_figures_from_hand_built_engine_counters() {
        use pdsim_cluster::CoreStats;
        // One request over 0–4 s; two engine cores of one pool:
        //   core 0: busy 3 s, 1000 prompt tokens queried, 400 hit in HBM,
        //           100 in the offload tier, 2 preemptions, 30 steps,
        //           KV usage 0.5 for its 3 busy s (Σ = 1.5 s);
        //   core 1: busy 1 s, 200 queried, 200 hit, 0 offload, 1 preemption,
        //           10 steps, KV usage 0.2 for 1 s (Σ = 0.2 s), peak 0.9.
        let mut a = Aggregator::default();
        a.record(&completed(1, [0, 100, 200, 4000], 3));
        let core = |busy_s: u64, q, h, x, p, steps, kv_s: f64, peak| CoreStats {
            busy_ns: busy_s * 1_000_000_000,
            prefix_queries_tokens: q,
            prefix_hits_tokens: h,
            external_hits_tokens: x,
            preemptions: p,
            steps,
            kv_usage_ns: kv_s * 1e9,
            kv_usage_peak: peak,
            ..CoreStats::default()
        };
        let stats = RunStats {
            requests: 1,
            completed: 1,
            cores: vec![
                core(3, 1000, 400, 100, 2, 30, 1.5, 0.5),
                core(1, 200, 200, 0, 1, 10, 0.2, 0.9),
            ],
            ..RunStats::default()
        };
        let mut run = info();
        run.pools = vec![PoolInfo {
            name: "colocated".into(),
            role: "colocated".into(),
            gpus: 2,
            cost_model: "roofline".into(),
        }];
        let s = a.summary(&stats, run);
        let near = |x: f64, y: f64| (x - y).abs() <= 1e-12;
        // HBM hits 600 of 1200 queried; the offload tier 100 of 1200.
        assert_eq!(
            (s.prefix_cache.queries_tokens, s.prefix_cache.hits_tokens),
            (1200, 600)
        );
        assert!(near(s.prefix_cache.hit_rate, 0.5));
        assert_eq!(s.prefix_cache.external_hits_tokens, 100);
        assert!(near(s.prefix_cache.external_hit_rate, 100.0 / 1200.0));
        assert_eq!(s.preemptions, 3);
        let p = &s.pools[0];
        assert_eq!((p.engine_cores, p.steps, p.preemptions), (2, 40, 3));
        // Busy 4 core-seconds of 2 cores × 4 s.
        assert!(near(p.busy_share, 0.5), "{}", p.busy_share);
        // KV usage weighted by busy time: (1.5 + 0.2) / 4 s.
        assert!(near(p.kv_usage_mean, 1.7 / 4.0), "{}", p.kv_usage_mean);
        assert!(near(p.kv_usage_peak, 0.9));
        assert!(near(p.prefix_hit_rate, 0.5));
        // The run's figures, over all its cores: the same weighting.
        assert!(near(s.kv_usage.mean, 1.7 / 4.0), "{}", s.kv_usage.mean);
        assert!(near(s.kv_usage.peak, 0.9));
    }

    #[test]
    fn a_fanout_hands_every_record_and_emission_to_each_sink_in_order() {
        use pdsim_cluster::MemorySink;
        let (mut first, mut second) = (MemorySink::default(), MemorySink::default());
        {
            let mut fanout = super::Fanout(vec![&mut first, &mut second]);
            let r = done(1, 500);
            fanout.record(&r);
            fanout.emission(7, 2);
            fanout.emission_of(&r, 9, 1);
            let e = |gap_ns, tokens| pdsim_cluster::Emission {
                source_line: 1,
                gap_ns,
                tokens,
            };
            fanout.emissions(&[e(4, 1), e(3, 2)]);
        }
        for sink in [&first, &second] {
            assert_eq!(sink.records, vec![done(1, 500)]);
            assert_eq!(sink.emissions, vec![(7, 2), (9, 1), (4, 1), (3, 2)]);
        }
    }

    #[test]
    fn a_step_of_emissions_counts_as_its_emissions_one_by_one() {
        // Requests on lines 1 and 2 in stage 0, line 3 in stage 1, line 9
        // in none: the batch must reach the run's and each stage's ITL as
        // the same emissions handed over singly.
        let gaps = [
            (1, 5_000_000),
            (3, 7_000_000),
            (2, 5_000_000),
            (9, 2_000_000),
            (3, 1),
        ];
        let (mut single, mut batched) = (
            Aggregator::default().with_stages(&[plan(0, 1, 2), plan(1, 3, 1)]),
            Aggregator::default().with_stages(&[plan(0, 1, 2), plan(1, 3, 1)]),
        );
        let mut batch = Vec::new();
        for (line, gap_ns) in gaps {
            single.emission_of(&done(line, 0), gap_ns, 1);
            batch.push(pdsim_cluster::Emission {
                source_line: line,
                gap_ns,
                tokens: 1,
            });
        }
        batched.emissions(&batch);
        let json = |a: &Aggregator| {
            let s = a.summary(&RunStats::default(), info());
            assert_eq!(s.itl_ms.count, 5);
            assert_eq!((s.stages[0].itl_ms.count, s.stages[1].itl_ms.count), (2, 2));
            serde_json::to_string(&s).unwrap()
        };
        assert_eq!(json(&single), json(&batched));
    }

    #[test]
    fn a_stage_with_no_time_span_has_zero_rates_not_infinite_ones() {
        // Its one request is rejected on arrival: finished = arrival.
        let mut a = Aggregator::default().with_stages(&[plan(0, 1, 1)]);
        let mut r = done(1, 500);
        r.outcome = Outcome::Rejected;
        r.first_token = None;
        r.last_token = None;
        r.finished = r.arrival;
        a.record(&r);
        let s = a.summary(&RunStats::default(), info());
        let st = &s.stages[0];
        assert_eq!((st.count, st.rejected, st.span_s), (1, 1, 0.0));
        assert_eq!(st.requests_per_s, 0.0);
        assert_eq!(st.input_tokens_per_s, 0.0);
        assert_eq!(st.output_tokens_per_s, 0.0);
        // No output token: the cost per million of them is 0, not infinite.
        let mut run = info();
        run.gpu_hour_usd = Some(3.0);
        let s = a.summary(&RunStats::default(), run);
        let cost = s.cost.expect("a price was given");
        assert_eq!(cost.usd_per_million_output_tokens, 0.0);
    }

    #[test]
    fn the_csv_row_holds_the_figures_of_its_record() {
        // Arrives 1 s; first token 1.1 s; last 1.5 s after 5 tokens (four
        // gaps: TPOT 100 ms); finished 1.5006 s.
        let mut r = completed(7, [1000, 1100, 1500, 1500], 5);
        r.finished = SimTime(1_500_600_000);
        let mut sink = CsvSink::new(Vec::new());
        sink.record(&r);
        let text = String::from_utf8(sink.finish().unwrap()).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let row: Vec<&str> = lines.next().unwrap().split(',').collect();
        let get = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!(get("arrival_ms"), "1000.000");
        assert_eq!(get("ttft_ms"), "100.000");
        assert_eq!(get("e2e_ms"), "500.600");
        assert_eq!(get("tpot_ms"), "100.000");
        assert_eq!(get("output_tokens"), "5");
        assert_eq!(get("outcome"), "completed");
        // The optional times: present ones in ms, absent ones empty.
        assert_eq!(get("first_token_ms"), "1100.000");
        assert_eq!(get("last_token_ms"), "1500.000");
        assert_eq!(get("prefill_scheduled_ms"), "", "not disaggregated");
        assert_eq!(get("transfer_ms"), "");
        assert_eq!(get("offload_load_ms"), "");
        // With a transfer of 40 ms and an offload load of 12.5 ms, both
        // durations are written.
        r.transfer_start = Some(SimTime::from_ms(1010));
        r.transfer_end = Some(SimTime::from_ms(1050));
        r.offload_load_start = Some(SimTime::from_ms(1000));
        r.offload_load_end = Some(SimTime(1_012_500_000));
        let mut sink = CsvSink::new(Vec::new());
        sink.record(&r);
        let text = String::from_utf8(sink.finish().unwrap()).unwrap();
        let row: Vec<&str> = text.lines().nth(1).unwrap().split(',').collect();
        let get = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
        assert_eq!(get("transfer_ms"), "40.000");
        assert_eq!(get("offload_load_ms"), "12.500");
    }

    /// Every field of a disaggregated, offloaded, preempted request, and
    /// of a refused one, written out by hand: times in ms with microsecond
    /// resolution (truncated, zero-padded), durations between the marks
    /// they name, the prefill engine as `pool/pod/rank`, absent values
    /// empty.
    #[test]
    fn a_csv_row_writes_every_field_as_worked_by_hand() {
        let ns = SimTime;
        let mut r = RequestRecord::arrived(RequestId(7), 12, 3, ns(1_002_003_004), 300, (2, 4, 1));
        r.enqueued = Some(ns(1_010_000_000));
        r.scheduled = Some(ns(1_020_500_000));
        r.first_token = Some(ns(1_100_000_000));
        r.last_token = Some(ns(2_100_000_000));
        r.finished = ns(2_100_250_000);
        r.cached_tokens = 128;
        r.output_tokens = 5;
        r.preemptions = 1;
        r.prefill = Some((0, 3, 2));
        r.prefill_scheduled = Some(ns(1_005_000_000));
        r.prefill_done = Some(ns(1_050_000_000));
        r.prefill_cached_tokens = 64;
        r.transfer_start = Some(ns(1_060_000_000));
        r.transfer_end = Some(ns(1_061_234_567));
        r.transfer_bytes = 4096;
        r.kv_hold_expired = true;
        r.offload_tokens = 32;
        r.offload_load_start = Some(ns(1_070_000_000));
        r.offload_load_end = Some(ns(1_072_500_000));
        r.outcome = Outcome::Completed;
        let mut refused =
            RequestRecord::arrived(RequestId(8), 13, 0, ns(5_000_999), 9000, (0, 1, 0));
        refused.finished = ns(5_000_999);
        refused.outcome = Outcome::Rejected;
        refused.reason = "prompt-exceeds-max-model-len";
        // One token: no gap to divide, so no TPOT.
        let mut one = RequestRecord::arrived(RequestId(9), 14, 0, ns(0), 10, (0, 0, 0));
        one.first_token = Some(ns(20_000_000));
        one.last_token = Some(ns(20_000_000));
        one.finished = ns(20_000_000);
        one.output_tokens = 1;
        one.outcome = Outcome::Completed;
        let mut sink = CsvSink::new(Vec::new());
        for r in [&r, &refused, &one] {
            sink.record(r);
        }
        let text = String::from_utf8(sink.finish().unwrap()).unwrap();
        let rows: Vec<&str> = text.lines().skip(1).collect();
        // id, line, class; arrival 1002.003, enqueued, scheduled, first,
        // last, finished; TTFT 1100 − 1002.003004 = 97.996996 ms; E2E
        // 1098.246996 ms; queue to the prefill's admission 2.996996 ms;
        // prefill 1005 → 1050 ms; decode 1000 ms; TPOT 1000 / 4 = 250 ms;
        // tokens 300/128/5, 1 preemption, pool 2 pod 4 rank 1; prefill on
        // 0/3/2 from 1005 to 1050 with 64 cached; transfer 1060 →
        // 1061.234567 (1.234567 ms) of 4096 bytes; hold expired; 32
        // offloaded tokens loaded in 2.5 ms.
        assert_eq!(
            rows[0],
            "7,12,3,1002.003,1010.000,1020.500,1100.000,2100.000,2100.250,97.996,1098.246,\
             2.996,45.000,1000.000,250.000,300,128,5,1,2,4,1,0/3/2,1005.000,1050.000,64,\
             1060.000,1061.234,1.234,4096,1,32,2.500,completed,"
        );
        assert_eq!(
            rows[1],
            "8,13,0,5.000,,,,,5.000,,0.000,,,,,9000,0,0,0,0,1,0,,,,0,,,,0,0,0,,rejected,\
             prompt-exceeds-max-model-len"
        );
        assert_eq!(
            rows[2],
            "9,14,0,0.000,,,20.000,20.000,20.000,20.000,20.000,,,0.000,,10,0,1,0,0,0,0,,,,0,,,,0,0,0,,\
             completed,"
        );
    }

    /// The text summary says how the conversations went, with the counts
    /// of the run.
    #[test]
    fn the_text_summary_counts_the_turns_sent_not_sent_and_late() {
        let mut a = Aggregator::default();
        a.record(&completed(1, [0, 10, 15, 15], 2));
        let stats = RunStats {
            session_turns_sent: 3,
            session_turns_not_sent: 1,
            session_turns_late: 2,
            session_turn_max_late_ns: 1_500_000_000,
            ..RunStats::default()
        };
        let text = super::render_text(&a.summary(&stats, info()));
        assert!(
            text.contains(
                "  conversations: 3 later turns sent closed-loop (each only once the turn before \
                 it had ended), 1 not sent (a turn before them failed or timed out)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("  2 later turns were sent late, up to 1.500 s:"),
            "{text}"
        );
        // Nothing was transferred: no KV transfer lines.
        assert!(
            !text.contains("KV tx") && !text.contains("KV transfer"),
            "{text}"
        );
    }

    /// Inter-token gaps are stored as runs of equal gaps; every run counts,
    /// not only the last: gaps of 5, 5, 7, 7, 7 and 3 ms are six gaps with
    /// a mean of 34 / 6 ms.
    #[test]
    fn every_run_of_equal_inter_token_gaps_counts() {
        let mut a = Aggregator::default();
        for gap_ms in [5, 5, 7, 7, 7, 3] {
            a.emission(gap_ms * 1_000_000, 1);
        }
        a.record(&completed(1, [0, 10, 44, 44], 7));
        let itl = a.summary(&RunStats::default(), info()).itl_ms;
        assert_eq!(itl.count, 6);
        assert!((itl.mean - 34.0 / 6.0).abs() < 1e-3, "{itl:?}");
    }

    #[test]
    fn sessions_and_kv_usage_are_reported_only_from_what_ran() {
        let mut a = Aggregator::default();
        a.record(&completed(1, [0, 10, 15, 15], 2));
        // No turns, no busy time: no sessions section, and a KV mean of 0
        // rather than 0 / 0.
        let s = a.summary(&RunStats::default(), info());
        assert!(s.sessions.is_none());
        assert_eq!(s.kv_usage.mean, 0.0);
        let stats = RunStats {
            session_turns_sent: 3,
            session_turns_not_sent: 1,
            ..RunStats::default()
        };
        let sessions = a.summary(&stats, info()).sessions.expect("turns ran");
        assert_eq!((sessions.turns_sent, sessions.turns_not_sent), (3, 1));
        let stats = RunStats {
            session_turns_not_sent: 2,
            ..RunStats::default()
        };
        assert!(a.summary(&stats, info()).sessions.is_some());
    }

    #[test]
    fn link_and_padding_figures_and_the_cdf_from_hand_built_counters() {
        // Four requests with TTFTs 100, 200, 300 and 400 ms over 0–10 s.
        let mut a = Aggregator::default();
        for (i, ttft) in [100, 200, 300, 400].into_iter().enumerate() {
            let at = 1000 * i as u64;
            a.record(&completed(
                i as u64 + 1,
                [at, at + ttft, at + ttft, 10_000],
                1,
            ));
        }
        // Two links over the 10 s: 5 GB carried at 1 GB/s (half used) and
        // 1 GB at 10 GB/s (a hundredth); one core scheduled 900 tokens
        // padded to 1000.
        let stats = RunStats {
            requests: 4,
            completed: 4,
            links: vec![(5e9, 1e9), (1e9, 10e9)],
            cores: vec![
                pdsim_cluster::CoreStats {
                    tokens_scheduled: 900,
                    tokens_padded: 1000,
                    busy_ns: 6_000_000_000,
                    compute_ns: 2_500_000_000,
                    memory_ns: 3_000_000_000,
                    communication_ns: 250_000_000,
                    host_ns: 125_000_000,
                    padding_ns: 50_000_000,
                    steps: 7,
                    ..Default::default()
                },
                pdsim_cluster::CoreStats {
                    busy_ns: 1_000_000_000,
                    compute_ns: 500_000_000,
                    steps: 3,
                    ..Default::default()
                },
            ],
            ..RunStats::default()
        };
        let s = a.summary(&stats, info());
        let near = |x: f64, y: f64| (x - y).abs() <= 1e-12;
        // The step-time parts are summed over the cores, in seconds.
        let t = &s.step_time_s;
        assert_eq!(
            (
                t.busy,
                t.compute,
                t.memory,
                t.communication,
                t.host,
                t.padding,
                t.steps
            ),
            (7.0, 3.0, 3.0, 0.25, 0.125, 0.05, 10)
        );
        assert!(near(s.duration_s, 10.0));
        assert!(
            near(s.link_utilization_max, 0.5),
            "{}",
            s.link_utilization_max
        );
        assert!(near(s.link_utilization_mean, (0.5 + 0.01) / 2.0));
        assert!(near(s.step_time_s.padded_tokens_share, 0.1));
        // The CDF runs from the smallest TTFT (quantile 0) to the largest
        // (quantile 1) through the median, to the histogram's 3 digits.
        let cdf = a.cdf(super::Metric::Ttft);
        let at = |q: f64| cdf.iter().find(|(_, p)| (*p - q).abs() < 1e-12).unwrap().0;
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-3 * y;
        assert!(close(at(0.0), 100.0), "{cdf:?}");
        assert!(close(at(0.5), 200.0), "{cdf:?}");
        assert!(close(at(1.0), 400.0), "{cdf:?}");
        assert!(cdf.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 < w[1].1));
    }

    #[test]
    fn expired_prefill_holds_are_counted_once_each() {
        let mut a = Aggregator::default();
        for (line, expired) in [(1, true), (2, false), (3, true)] {
            let mut r = completed(line, [0, 10, 20, 30], 2);
            r.outcome = Outcome::Completed;
            r.kv_hold_expired = expired;
            a.record(&r);
        }
        let s = a.summary(&RunStats::default(), info());
        assert_eq!(s.kv_hold_expired, 2);
    }

    #[test]
    fn an_itl_slo_judges_requests_with_a_second_token_only() {
        use super::slo::{ClassNames, Slo, SloPlan};
        // ITL ≤ 50 ms: A decodes at 100 ms per token (10 gaps over 1 s) and
        // misses; C has one token, no gap, so only its TTFT counts and it
        // meets; B decodes at 40 ms per token and meets.
        let slo = SloPlan::new(
            Some(Slo::parse("ttft_ms=1000,itl_ms=50").unwrap()),
            &Default::default(),
            &Default::default(),
            ClassNames::new(&[String::new()]),
        );
        let mut a = Aggregator::with_slo(slo);
        a.record(&completed(1, [0, 100, 1100, 1100], 11));
        a.record(&completed(2, [0, 100, 260, 260], 5));
        a.record(&completed(3, [0, 100, 100, 100], 1));
        // D, like C, has one token and meets on its TTFT.
        a.record(&completed(4, [0, 200, 200, 200], 1));
        let stats = RunStats {
            requests: 4,
            completed: 4,
            ..RunStats::default()
        };
        let g = a.summary(&stats, info()).goodput.expect("an SLO");
        assert_eq!((g.requests, g.requests_met), (4, 3), "B, C and D meet");
    }
}

#[cfg(test)]
mod quantile_tests {
    use super::{Aggregator, Metric, histogram, latency, record};
    use pdsim_cluster::RecordSink;
    use proptest::prelude::*;

    proptest! {
        /// The summary's percentiles and the CDF's points, each read in
        /// one pass over the histogram, are each `value_at_quantile`'s, in
        /// their places.
        #[test]
        fn one_pass_percentiles_are_value_at_quantile(
            values in proptest::collection::vec(1u64..10_000_000_000, 1..400),
        ) {
            let mut d = histogram();
            let mut agg = Aggregator::default();
            for &v in &values {
                record(&mut d, v);
                agg.emission(v, 1);
            }
            let h = &d.hist;
            let ms = |q: f64| h.value_at_quantile(q) as f64 / 1e6;
            let l = latency(&d);
            prop_assert_eq!(
                [l.p50, l.p90, l.p95, l.p99, l.p999],
                [ms(0.5), ms(0.9), ms(0.95), ms(0.99), ms(0.999)]
            );
            let cdf = agg.cdf(Metric::Itl);
            prop_assert_eq!(cdf.len(), 112);
            let itl = agg.histogram(Metric::Itl);
            for &(v, q) in &cdf {
                prop_assert_eq!(v, itl.hist.value_at_quantile(q) as f64 / 1e6, "q {}", q);
            }
        }
    }
}
