//! Time series: every engine core's state once per simulated second
//! (`timeseries.csv`, written as samples arrive) and the per-pool
//! aggregates the plots draw, kept in memory of a bounded size: the points
//! themselves up to [`KEPT_POINTS`], and every second summed in at most
//! 2 × [`LINE_POINTS`] buckets, so that a run of any simulated length
//! holds a few megabytes of series.
//!
//! Idle stretches are written once. While the cluster is idle (no step or
//! transfer running, no request anywhere or none that can move) the event
//! loop sends the stretch's first sample and skips the rest until activity
//! resumes (see `RecordSink::core_sample`), so the output grows with the
//! work done, not with simulated idle time. Rows more than one second apart
//! therefore mark an idle stretch: every second between them had the
//! earlier row's requests waiting and running (none, unless some are
//! stuck) and KV usage, no prefix query and no busy time.
//! [`PoolSeries::stretches`] gives the seconds back with that meaning, and
//! [`PoolSeries::mean`] weights them as the dense series would.

use pdsim_cluster::{CoreSample, RecordSink, RequestRecord, SAMPLE_NS};
use serde::Serialize;
use std::io::Write;

/// One pool at one sample time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct PoolPoint {
    pub time_s: f64,
    /// Requests waiting and running, summed over the pool's cores.
    pub waiting: u64,
    pub running: u64,
    /// Mean KV usage over the pool's cores, 0–1.
    pub kv_usage: f64,
    /// Prefix-cache hits over queries since the previous sample, 0–1.
    pub prefix_hit_rate: f64,
    /// Mean share of the last second the cores spent stepping, 0–1.
    pub busy_share: f64,
}

/// Most points a plotted pool line has. A series spanning more seconds is
/// drawn from its buckets: the seconds averaged in groups of equal,
/// power-of-two width (see [`PoolSeries::line`]).
pub const LINE_POINTS: usize = 400;

/// Most sampled points a series keeps as they are. Past that it keeps only
/// its buckets and the last point, so that its memory stays flat however
/// long the simulated run (a point a second would otherwise hold 48 bytes
/// per pool per simulated second: a week-long trace, a quarter of a GiB).
pub const KEPT_POINTS: usize = 1 << 16;

/// A figure of a pool point the report draws or averages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMetric {
    Waiting,
    Running,
    KvUsage,
    PrefixHitRate,
    BusyShare,
}

impl PoolMetric {
    pub const ALL: [PoolMetric; 5] = [
        PoolMetric::Waiting,
        PoolMetric::Running,
        PoolMetric::KvUsage,
        PoolMetric::PrefixHitRate,
        PoolMetric::BusyShare,
    ];

    /// The figure's value at `p`.
    pub fn of(self, p: &PoolPoint) -> f64 {
        match self {
            PoolMetric::Waiting => p.waiting as f64,
            PoolMetric::Running => p.running as f64,
            PoolMetric::KvUsage => p.kv_usage,
            PoolMetric::PrefixHitRate => p.prefix_hit_rate,
            PoolMetric::BusyShare => p.busy_share,
        }
    }

    fn values(p: &PoolPoint) -> [f64; 5] {
        PoolMetric::ALL.map(|m| m.of(p))
    }
}

/// One pool's series: a point per sampled second, in time order. Points
/// more than a second apart bound an idle stretch (see the module
/// documentation). Every point is also folded, second by second, into
/// buckets of bounded number, from which long series are drawn and means
/// taken; the points themselves are kept up to [`KEPT_POINTS`].
#[derive(Clone, Debug, PartialEq)]
pub struct PoolSeries {
    pub name: String,
    /// The points before the last, while there are at most
    /// [`KEPT_POINTS`]; emptied for good past that (`complete` false).
    kept: Vec<PoolPoint>,
    complete: bool,
    /// The last point, which the sink still updates; not yet folded.
    last: Option<PoolPoint>,
    /// When the first point was sampled.
    first_s: f64,
    /// Every point before the last, with the idle seconds after it.
    buckets: Buckets,
}

/// A run of seconds a pool series stands for: `seconds` consecutive
/// seconds from `point.time_s`, each with `point`'s values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stretch {
    pub point: PoolPoint,
    pub seconds: u64,
}

/// `seconds` seconds summed: their times and each [`PoolMetric`]'s values.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Bucket {
    seconds: u64,
    sum_t: f64,
    sums: [f64; 5],
}

impl Bucket {
    fn merged(self, other: Bucket) -> Bucket {
        Bucket {
            seconds: self.seconds + other.seconds,
            sum_t: self.sum_t + other.sum_t,
            sums: std::array::from_fn(|m| self.sums[m] + other.sums[m]),
        }
    }

    fn point(&self, metric: PoolMetric) -> (f64, f64) {
        let n = self.seconds as f64;
        (self.sum_t / n, self.sums[metric as usize] / n)
    }
}

/// Seconds folded into consecutive buckets of `width_s` seconds each (the
/// last one filling): the width starts at one second and doubles, pairs of
/// buckets merging, whenever 2 × [`LINE_POINTS`] are full, so that a series
/// of any length holds at most that many. The order of the additions is
/// fixed by the seconds alone, so the same series always gives the same
/// sums.
#[derive(Clone, Debug, Default, PartialEq)]
struct Buckets {
    width_s: u64,
    full: Vec<Bucket>,
    filling: Bucket,
}

impl Buckets {
    /// `seconds` consecutive seconds from `time_s`, each with `values`.
    fn add(&mut self, time_s: f64, values: [f64; 5], seconds: u64) {
        self.width_s = self.width_s.max(1);
        let (mut t, mut left) = (time_s, seconds);
        while left > 0 {
            let take = left.min(self.width_s - self.filling.seconds);
            let b = &mut self.filling;
            b.seconds += take;
            // Σ of t, t+1, …, t+take−1; for one second, exactly t.
            b.sum_t += take as f64 * t + (take * (take - 1) / 2) as f64;
            for (sum, v) in b.sums.iter_mut().zip(values) {
                *sum += take as f64 * v;
            }
            t += take as f64;
            left -= take;
            if self.filling.seconds == self.width_s {
                self.full.push(std::mem::take(&mut self.filling));
                if self.full.len() == 2 * LINE_POINTS {
                    self.full = pairs(&self.full);
                    self.width_s *= 2;
                }
            }
        }
    }

    /// The buckets in time order, the filling one included if it holds
    /// any second.
    fn all(&self) -> impl Iterator<Item = Bucket> + '_ {
        let filling = (self.filling.seconds > 0).then_some(self.filling);
        self.full.iter().copied().chain(filling)
    }
}

/// Consecutive buckets merged in pairs (an odd last one alone).
fn pairs(buckets: &[Bucket]) -> Vec<Bucket> {
    buckets
        .chunks(2)
        .map(|c| c.iter().copied().reduce(Bucket::merged).unwrap_or_default())
        .collect()
}

/// The stretches a point stands for when the next one is sampled at
/// `next_s` (none: it is the last): its own second, then the idle seconds
/// before the next with its waiting, running and KV usage and no prefix
/// query or busy time — what the skipped samples would have said.
fn stretches_of(p: &PoolPoint, next_s: Option<f64>) -> [Option<Stretch>; 2] {
    let gap_s = next_s.map_or(0, |next| (next - p.time_s).round().max(1.0) as u64 - 1);
    let idle = (gap_s > 0).then_some(Stretch {
        point: PoolPoint {
            time_s: p.time_s + 1.0,
            prefix_hit_rate: 0.0,
            busy_share: 0.0,
            ..*p
        },
        seconds: gap_s,
    });
    [
        Some(Stretch {
            point: *p,
            seconds: 1,
        }),
        idle,
    ]
}

impl Default for PoolSeries {
    fn default() -> PoolSeries {
        PoolSeries::new(String::new())
    }
}

impl PoolSeries {
    /// An empty series named `name`.
    pub fn new(name: String) -> PoolSeries {
        PoolSeries {
            name,
            kept: Vec::new(),
            complete: true,
            last: None,
            first_s: 0.0,
            buckets: Buckets::default(),
        }
    }

    /// A series of `points`, in time order.
    pub fn from_points(name: String, points: impl IntoIterator<Item = PoolPoint>) -> PoolSeries {
        let mut series = PoolSeries::new(name);
        for p in points {
            series.push(p);
        }
        series
    }

    /// Adds a point sampled after the last one.
    pub fn push(&mut self, point: PoolPoint) {
        match self.last.take() {
            None => self.first_s = point.time_s,
            Some(last) => {
                for s in stretches_of(&last, Some(point.time_s))
                    .into_iter()
                    .flatten()
                {
                    self.buckets
                        .add(s.point.time_s, PoolMetric::values(&s.point), s.seconds);
                }
                if self.complete && self.kept.len() < KEPT_POINTS {
                    self.kept.push(last);
                } else if self.complete {
                    self.complete = false;
                    self.kept = Vec::new();
                }
            }
        }
        self.last = Some(point);
    }

    /// No point was sampled.
    pub fn is_empty(&self) -> bool {
        self.last.is_none()
    }

    /// The last point sampled, which a sink may still complete.
    pub fn last_mut(&mut self) -> Option<&mut PoolPoint> {
        self.last.as_mut()
    }

    pub fn last(&self) -> Option<&PoolPoint> {
        self.last.as_ref()
    }

    /// Every point sampled, while the series keeps them all (at most
    /// [`KEPT_POINTS`]); `None` for a longer one.
    pub fn points(&self) -> Option<Vec<PoolPoint>> {
        self.complete
            .then(|| self.kept.iter().chain(&self.last).copied().collect())
    }

    /// Seconds from the first point to the last, both included.
    pub fn seconds(&self) -> u64 {
        self.last
            .map_or(0, |l| (l.time_s - self.first_s).round().max(0.0) as u64 + 1)
    }

    /// Every second from the first point to the last, as stretches (see
    /// [`stretches_of`]), while the series keeps every point; `None` for a
    /// longer one.
    pub fn stretches(&self) -> Option<Vec<Stretch>> {
        let points = self.points()?;
        let next_times = points.iter().skip(1).map(|p| Some(p.time_s)).chain([None]);
        Some(
            points
                .iter()
                .zip(next_times)
                .flat_map(|(p, next)| stretches_of(p, next).into_iter().flatten())
                .collect(),
        )
    }

    /// The buckets with the last point folded in.
    fn closed_buckets(&self) -> Buckets {
        let mut buckets = self.buckets.clone();
        if let Some(last) = &self.last {
            buckets.add(last.time_s, PoolMetric::values(last), 1);
        }
        buckets
    }

    /// The mean of `metric` over every second from the first point to the
    /// last, idle stretches weighted by their length: what the mean over
    /// the dense series (a point every second) gives. 0 without points.
    pub fn mean(&self, metric: PoolMetric) -> f64 {
        let total = self
            .closed_buckets()
            .all()
            .reduce(Bucket::merged)
            .unwrap_or_default();
        if total.seconds == 0 {
            0.0
        } else {
            total.sums[metric as usize] / total.seconds as f64
        }
    }

    /// The line a plot draws of `metric`: at most [`LINE_POINTS`] points.
    /// A series of at most that many seconds gives every sampled second
    /// and draws each idle stretch flat at its idle value (its first and
    /// last second); a longer one gives its buckets' means, seconds and
    /// values, idle seconds counted one by one as in the dense series (a
    /// point every second), so the line is the same whether or not idle
    /// seconds were sampled.
    pub fn line(&self, metric: PoolMetric) -> Vec<(f64, f64)> {
        let mut line = Vec::new();
        if self.seconds() <= LINE_POINTS as u64
            && let Some(stretches) = self.stretches()
        {
            for s in stretches {
                let (t, y) = (s.point.time_s, metric.of(&s.point));
                line.push((t, y));
                if s.seconds > 1 {
                    line.push((t + (s.seconds - 1) as f64, y));
                }
            }
            return line;
        }
        let mut buckets: Vec<Bucket> = self.closed_buckets().all().collect();
        while buckets.len() > LINE_POINTS {
            buckets = pairs(&buckets);
        }
        buckets.iter().map(|b| b.point(metric)).collect()
    }
}

/// A sample time in seconds: exact for every whole second, however late
/// (`ns as f64 / 1e9` would round past 2^53 ns, about 104 days).
fn seconds(time_ns: u64) -> f64 {
    (time_ns / SAMPLE_NS) as f64 + (time_ns % SAMPLE_NS) as f64 / 1e9
}

/// Collects [`CoreSample`]s; optionally writes them as CSV rows.
pub struct SeriesSink<W: Write> {
    writer: Option<crate::row::RowWriter<W>>,
    error: Option<String>,
    pools: Vec<PoolSeries>,
    /// (queries, hits, busy, busy carried over) at the previous sample,
    /// per core in order.
    previous: Vec<(u64, u64, u64, u64)>,
    cursor: usize,
    round_time_ns: Option<u64>,
    /// Per pool in the current round: cores, Σ kv, Σ Δqueries, Σ Δhits, Σ busy share.
    round: Vec<(u64, f64, u64, u64, f64)>,
}

const HEADER: &[&str] = &[
    "time_s",
    "pool",
    "pod",
    "rank",
    "waiting",
    "running",
    "kv_usage",
    "prefix_hit_rate",
    "busy_share",
];

impl<W: Write> SeriesSink<W> {
    /// `pool_names` in pool order; `out` receives `timeseries.csv`.
    pub fn new(pool_names: Vec<String>, out: Option<W>) -> SeriesSink<W> {
        let mut error = None;
        let writer = out.and_then(|out| match crate::row::RowWriter::new(out, HEADER) {
            Ok(w) => Some(w),
            Err(e) => {
                error = Some(e.to_string());
                None
            }
        });
        SeriesSink {
            writer,
            error,
            round: vec![(0, 0.0, 0, 0, 0.0); pool_names.len()],
            pools: pool_names.into_iter().map(PoolSeries::new).collect(),
            previous: Vec::new(),
            cursor: 0,
            round_time_ns: None,
        }
    }

    fn close_round(&mut self) {
        let Some(time_ns) = self.round_time_ns else {
            return;
        };
        for (pool, acc) in self.pools.iter_mut().zip(self.round.iter_mut()) {
            let (cores, kv, queries, hits, busy) = *acc;
            if cores > 0 {
                let point = pool.last_mut().filter(|p| p.time_s == seconds(time_ns));
                if let Some(point) = point {
                    point.kv_usage = kv / cores as f64;
                    point.prefix_hit_rate = if queries > 0 {
                        hits as f64 / queries as f64
                    } else {
                        0.0
                    };
                    point.busy_share = busy / cores as f64;
                }
            }
            *acc = (0, 0.0, 0, 0, 0.0);
        }
    }

    /// The per-pool series, and the CSV writer's output (flushed).
    pub fn finish(mut self) -> Result<(Vec<PoolSeries>, Option<W>), String> {
        self.close_round();
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let out = match self.writer.take() {
            Some(w) => Some(w.finish().map_err(|e| e.to_string())?),
            None => None,
        };
        Ok((self.pools, out))
    }
}

impl<W: Write> RecordSink for SeriesSink<W> {
    fn record(&mut self, _r: &RequestRecord) {}
    fn emission(&mut self, _gap_ns: u64, _tokens: u32) {}
    fn core_sample(&mut self, s: &CoreSample) {
        let time_ns = s.time.as_ns();
        if self.round_time_ns != Some(time_ns) {
            self.close_round();
            self.round_time_ns = Some(time_ns);
            self.cursor = 0;
        }
        let i = self.cursor;
        self.cursor += 1;
        if self.previous.len() <= i {
            self.previous.resize(i + 1, (0, 0, 0, 0));
        }
        let (q0, h0, b0, carried) = self.previous[i];
        let queries = s.prefix_queries_tokens.saturating_sub(q0);
        let hits = s.prefix_hits_tokens.saturating_sub(h0);
        // A step's whole duration is booked when it starts, so a step
        // longer than the window spills: the excess is carried into the
        // next windows rather than lost. (What is carried never exceeds
        // what the core's last step has still to run, so it is zero at
        // the first sample of an idle stretch and nothing is owed to the
        // seconds skipped after it.)
        let owed = s.busy_ns.saturating_sub(b0) + carried;
        let used = owed.min(SAMPLE_NS);
        self.previous[i] = (
            s.prefix_queries_tokens,
            s.prefix_hits_tokens,
            s.busy_ns,
            owed - used,
        );
        let busy = used as f64 / SAMPLE_NS as f64;
        let hit_rate = if queries > 0 {
            hits as f64 / queries as f64
        } else {
            0.0
        };
        let pool = s.pool as usize;
        if let (Some(series), Some(acc)) = (self.pools.get_mut(pool), self.round.get_mut(pool)) {
            let time_s = seconds(time_ns);
            if series.last().is_none_or(|p| p.time_s != time_s) {
                series.push(PoolPoint {
                    time_s,
                    ..PoolPoint::default()
                });
            }
            if let Some(point) = series.last_mut() {
                point.waiting += u64::from(s.waiting);
                point.running += u64::from(s.running);
            }
            acc.0 += 1;
            acc.1 += s.kv_usage;
            acc.2 += queries;
            acc.3 += hits;
            acc.4 += busy;
        }
        if self.error.is_some() {
            return;
        }
        if let Some(w) = self.writer.as_mut() {
            use crate::row::Cell::{Fixed, Int};
            let row = [
                Int(time_ns / SAMPLE_NS),
                Int(s.pool.into()),
                Int(s.pod.into()),
                Int(s.rank.into()),
                Int(s.waiting.into()),
                Int(s.running.into()),
                Fixed(s.kv_usage, 4),
                Fixed(hit_rate, 4),
                Fixed(busy, 4),
            ];
            if let Err(e) = w.cells(&row) {
                self.error = Some(e.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pdsim_core::SimTime;

    fn sample(t_s: u64, pool: u16, pod: u32, waiting: u32, kv: f64, q: u64, h: u64) -> CoreSample {
        CoreSample {
            time: SimTime(t_s * SAMPLE_NS),
            pool,
            pod,
            rank: 0,
            waiting,
            running: 1,
            kv_usage: kv,
            prefix_queries_tokens: q,
            prefix_hits_tokens: h,
            busy_ns: t_s * SAMPLE_NS / 2,
        }
    }

    #[test]
    fn pools_aggregate_their_cores_and_hit_rates_are_per_window() {
        let mut sink = SeriesSink::new(vec!["p".into(), "d".into()], Some(Vec::new()));
        sink.core_sample(&sample(1, 0, 0, 2, 0.2, 100, 50));
        sink.core_sample(&sample(1, 1, 0, 1, 0.4, 0, 0));
        sink.core_sample(&sample(1, 1, 1, 3, 0.6, 0, 0));
        sink.core_sample(&sample(2, 0, 0, 0, 0.2, 200, 50));
        sink.core_sample(&sample(2, 1, 0, 0, 0.0, 0, 0));
        sink.core_sample(&sample(2, 1, 1, 0, 0.0, 0, 0));
        let (pools, csv) = sink.finish().unwrap();
        let points = |i: usize| pools[i].points().unwrap();
        assert_eq!(points(1)[0].waiting, 4);
        assert!((points(1)[0].kv_usage - 0.5).abs() < 1e-12);
        assert_eq!(points(0)[0].prefix_hit_rate, 0.5);
        // The second window's 100 queries had no hit.
        assert_eq!(points(0)[1].prefix_hit_rate, 0.0);
        assert_eq!(points(0)[1].busy_share, 0.5);
        let text = String::from_utf8(csv.unwrap()).unwrap();
        assert_eq!(text.lines().count(), 7);
        assert!(text.starts_with("time_s,pool,pod,rank,waiting"));
    }

    #[test]
    fn an_idle_stretch_counts_as_the_seconds_the_dense_series_has() {
        // A core busy for seconds 1-2, idle from 3 (KV 0.25 held by the
        // prefix cache), busy again at 9. The dense series samples every
        // second; the sparse one skips seconds 4-8 as the event loop does.
        let at = |t_s: u64, waiting: u32, kv: f64, busy_s: u64, q: u64| CoreSample {
            time: SimTime(t_s * SAMPLE_NS),
            pool: 0,
            pod: 0,
            rank: 0,
            waiting,
            running: u32::from(waiting > 0),
            kv_usage: kv,
            prefix_queries_tokens: q,
            prefix_hits_tokens: q / 2,
            busy_ns: busy_s * SAMPLE_NS / 2,
        };
        let mut dense_samples = vec![at(1, 3, 0.5, 1, 100), at(2, 1, 0.75, 2, 200)];
        dense_samples.extend((3..=8).map(|t| at(t, 0, 0.25, 3, 300)));
        dense_samples.extend([at(9, 2, 0.5, 4, 400), at(10, 0, 0.25, 5, 400)]);
        let sparse_samples: Vec<CoreSample> = dense_samples
            .iter()
            .filter(|s| !(4..=8).contains(&(s.time.as_ns() / SAMPLE_NS)))
            .copied()
            .collect();
        let collect = |samples: &[CoreSample]| {
            let mut sink = SeriesSink::new(vec!["p".into()], Some(Vec::new()));
            for s in samples {
                sink.core_sample(s);
            }
            let (pools, csv) = sink.finish().unwrap();
            (pools, String::from_utf8(csv.unwrap()).unwrap())
        };
        let (dense, dense_csv) = collect(&dense_samples);
        let (sparse, sparse_csv) = collect(&sparse_samples);
        let (dense_points, sparse_points) =
            (dense[0].points().unwrap(), sparse[0].points().unwrap());
        assert_eq!(dense_points.len(), 10);
        assert_eq!(sparse_points.len(), 5);
        // The sparse CSV is the dense one without the skipped rows.
        let kept: Vec<&str> = dense_csv
            .lines()
            .filter(|l| {
                !["4,", "5,", "6,", "7,", "8,"]
                    .iter()
                    .any(|t| l.starts_with(t))
            })
            .collect();
        assert_eq!(sparse_csv.lines().collect::<Vec<_>>(), kept);
        // The stretches give the dense series back, second by second.
        let expanded: Vec<PoolPoint> = sparse[0]
            .stretches()
            .unwrap()
            .into_iter()
            .flat_map(|s| {
                (0..s.seconds).map(move |i| PoolPoint {
                    time_s: s.point.time_s + i as f64,
                    ..s.point
                })
            })
            .collect();
        assert_eq!(expanded, dense_points);
        // Time means weight the idle seconds: a plain mean over the sparse
        // points would not.
        for metric in PoolMetric::ALL {
            let plain = dense_points.iter().map(|p| metric.of(p)).sum::<f64>() / 10.0;
            assert!((sparse[0].mean(metric) - plain).abs() < 1e-12);
            assert!((dense[0].mean(metric) - plain).abs() < 1e-12);
        }
        let naive = sparse_points.iter().map(|p| p.busy_share).sum::<f64>() / 5.0;
        assert!((naive - sparse[0].mean(PoolMetric::BusyShare)).abs() > 0.05);
    }

    fn busy_point(time_s: f64, busy_share: f64) -> PoolPoint {
        PoolPoint {
            time_s,
            busy_share,
            ..Default::default()
        }
    }

    fn close(a: &[(f64, f64)], b: &[(f64, f64)]) {
        assert_eq!(a.len(), b.len());
        for (p, q) in a.iter().zip(b) {
            assert!(
                (p.0 - q.0).abs() < 1e-9 && (p.1 - q.1).abs() < 1e-12,
                "{p:?} {q:?}"
            );
        }
    }

    #[test]
    fn a_pool_line_is_the_dense_series_averaged_idle_seconds_included() {
        // Dense: seconds 0-999 with busy share 0.5 for the first 100 and
        // the last 100, idle (0) between; sparse: the idle stretch written
        // once, at second 100.
        let busy = |t: u64| if !(100..900).contains(&t) { 0.5 } else { 0.0 };
        let dense =
            PoolSeries::from_points("p".into(), (0..1000).map(|t| busy_point(t as f64, busy(t))));
        let sparse = PoolSeries::from_points(
            "p".into(),
            dense
                .points()
                .unwrap()
                .into_iter()
                .filter(|p| !(101.0..900.0).contains(&p.time_s)),
        );
        assert_eq!(sparse.points().unwrap().len(), 201);
        assert_eq!(sparse.seconds(), 1000);
        // 1000 seconds: buckets of one second until 800, then of two, and
        // the line's 500 buckets merge in pairs: 250 points of 4 seconds.
        let expected: Vec<(f64, f64)> = (0..250)
            .map(|g| {
                let seconds = 4 * g..4 * g + 4;
                let y = seconds.clone().map(busy).sum::<f64>() / 4.0;
                (4.0 * g as f64 + 1.5, y)
            })
            .collect();
        close(&dense.line(PoolMetric::BusyShare), &expected);
        close(&sparse.line(PoolMetric::BusyShare), &expected);
        assert!((sparse.mean(PoolMetric::BusyShare) - 0.1).abs() < 1e-12);
        // Short: every point, the idle stretch flat from its first second
        // to its last.
        let short = PoolSeries::from_points(
            "p".into(),
            [
                busy_point(3.0, 0.5),
                busy_point(4.0, 0.0),
                busy_point(60.0, 0.25),
            ],
        );
        assert_eq!(
            short.line(PoolMetric::BusyShare),
            vec![
                (3.0, 0.5),
                (4.0, 0.0),
                (5.0, 0.0),
                (59.0, 0.0),
                (60.0, 0.25)
            ]
        );
    }

    /// However long the run, a series holds a bounded number of buckets
    /// and points: past [`KEPT_POINTS`] it drops its points, and an idle
    /// stretch of any length costs a few hundred bucket additions.
    #[test]
    fn a_long_series_keeps_flat_memory_and_its_means() {
        let n = 3 * KEPT_POINTS as u64 + 17;
        let value = |t: u64| (t % 7) as f64 / 7.0;
        let mut series = PoolSeries::new("p".into());
        for t in 0..n {
            series.push(busy_point(t as f64, value(t)));
        }
        assert!(series.points().is_none() && series.kept.capacity() == 0);
        assert!(series.buckets.full.len() < 2 * LINE_POINTS);
        let exact = (0..n).map(value).sum::<f64>() / n as f64;
        assert!((series.mean(PoolMetric::BusyShare) - exact).abs() < 1e-12);
        let line = series.line(PoolMetric::BusyShare);
        assert!(line.len() <= LINE_POINTS && line.len() > LINE_POINTS / 2);
        // Each point is its group's mean; groups are equal and in order.
        let width = n.div_ceil(line.len() as u64).next_power_of_two();
        for (i, (x, y)) in line.iter().enumerate() {
            let group = (i as u64 * width)..((i as u64 + 1) * width).min(n);
            let len = (group.end - group.start) as f64;
            let mean = group.clone().map(value).sum::<f64>() / len;
            assert!((y - mean).abs() < 1e-9, "point {i}: {y} against {mean}");
            assert!((x - (group.start + group.end - 1) as f64 / 2.0).abs() < 1e-6);
        }
        // Two points two years apart: the idle seconds between count, at
        // the first point's value (no busy time), in bounded memory.
        let mut idle = PoolSeries::new("p".into());
        idle.push(PoolPoint {
            kv_usage: 0.5,
            ..busy_point(0.0, 1.0)
        });
        idle.push(busy_point(63_072_000.0, 1.0));
        assert_eq!(idle.seconds(), 63_072_001);
        assert!(idle.buckets.full.len() < 2 * LINE_POINTS);
        assert!((idle.mean(PoolMetric::KvUsage) - 0.5).abs() < 1e-6);
        assert!(idle.mean(PoolMetric::BusyShare) < 1e-6);
        assert!(idle.line(PoolMetric::KvUsage).len() <= LINE_POINTS);
    }

    #[test]
    fn late_seconds_stay_whole() {
        // Past 2^53 ns (about 104 days), `ns as f64 / 1e9` is not a whole
        // number of seconds any more.
        let t = 300 * 86_400 + 1;
        assert_eq!(seconds(t * SAMPLE_NS), t as f64);
        assert_eq!(seconds(1_500_000_000), 1.5);
    }

    #[test]
    fn a_step_longer_than_a_window_spills_into_the_next() {
        let mut sink: SeriesSink<Vec<u8>> = SeriesSink::new(vec!["p".into()], None);
        let mut s = sample(1, 0, 0, 0, 0.0, 0, 0);
        // 2.5 s of stepping booked by the first window.
        s.busy_ns = 2_500_000_000;
        sink.core_sample(&s);
        s.time = SimTime(2 * SAMPLE_NS);
        sink.core_sample(&s);
        s.time = SimTime(3 * SAMPLE_NS);
        sink.core_sample(&s);
        let (pools, _) = sink.finish().unwrap();
        let busy: Vec<f64> = pools[0]
            .points()
            .unwrap()
            .iter()
            .map(|p| p.busy_share)
            .collect();
        assert_eq!(busy, [1.0, 1.0, 0.5]);
    }
}
