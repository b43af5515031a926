//! Time series: every engine core's state once per simulated second
//! (`timeseries.csv`, written as samples arrive) and the per-pool
//! aggregates the plots draw, kept in memory (a few numbers per pool per
//! second).
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

/// One pool's series: a point per sampled second, in time order. Points
/// more than a second apart bound an idle stretch (see the module
/// documentation).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PoolSeries {
    pub name: String,
    pub points: Vec<PoolPoint>,
}

/// A run of seconds a pool series stands for: `seconds` consecutive
/// seconds from `point.time_s`, each with `point`'s values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stretch {
    pub point: PoolPoint,
    pub seconds: u64,
}

impl PoolSeries {
    /// Every second from the first point to the last, as stretches: each
    /// point is one second; the seconds between a point and a later one
    /// more than a second after it are one idle stretch, with the earlier
    /// point's waiting, running and KV usage and no prefix query or busy
    /// time — what the skipped samples would have said.
    pub fn stretches(&self) -> impl Iterator<Item = Stretch> + '_ {
        let next_times = self
            .points
            .iter()
            .skip(1)
            .map(|p| Some(p.time_s))
            .chain([None]);
        self.points.iter().zip(next_times).flat_map(|(p, next)| {
            let gap_s = next.map_or(0, |next| (next - p.time_s).round().max(1.0) as u64 - 1);
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
            .into_iter()
            .flatten()
        })
    }

    /// The mean of `value` over every second from the first point to the
    /// last, idle stretches weighted by their length: what the mean over
    /// the dense series (a point every second) gives. 0 without points.
    pub fn mean(&self, value: fn(&PoolPoint) -> f64) -> f64 {
        let (mut sum, mut seconds) = (0.0, 0u64);
        for stretch in self.stretches() {
            sum += value(&stretch.point) * stretch.seconds as f64;
            seconds += stretch.seconds;
        }
        if seconds == 0 {
            0.0
        } else {
            sum / seconds as f64
        }
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
            pools: pool_names
                .into_iter()
                .map(|name| PoolSeries {
                    name,
                    points: Vec::new(),
                })
                .collect(),
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
                let point = pool
                    .points
                    .last_mut()
                    .filter(|p| p.time_s == seconds(time_ns));
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
            if series.points.last().is_none_or(|p| p.time_s != time_s) {
                series.points.push(PoolPoint {
                    time_s,
                    ..PoolPoint::default()
                });
            }
            if let Some(point) = series.points.last_mut() {
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
        assert_eq!(pools[1].points[0].waiting, 4);
        assert!((pools[1].points[0].kv_usage - 0.5).abs() < 1e-12);
        assert_eq!(pools[0].points[0].prefix_hit_rate, 0.5);
        // The second window's 100 queries had no hit.
        assert_eq!(pools[0].points[1].prefix_hit_rate, 0.0);
        assert_eq!(pools[0].points[1].busy_share, 0.5);
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
        assert_eq!(dense[0].points.len(), 10);
        assert_eq!(sparse[0].points.len(), 5);
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
            .flat_map(|s| {
                (0..s.seconds).map(move |i| PoolPoint {
                    time_s: s.point.time_s + i as f64,
                    ..s.point
                })
            })
            .collect();
        assert_eq!(expanded, dense[0].points);
        // Time means weight the idle seconds: a plain mean over the sparse
        // points would not.
        let values: [fn(&PoolPoint) -> f64; 5] = [
            |p| p.kv_usage,
            |p| p.busy_share,
            |p| p.waiting as f64,
            |p| p.running as f64,
            |p| p.prefix_hit_rate,
        ];
        for value in values {
            let plain = dense[0].points.iter().map(value).sum::<f64>() / 10.0;
            assert!((sparse[0].mean(value) - plain).abs() < 1e-12);
            assert!((dense[0].mean(value) - plain).abs() < 1e-12);
        }
        let naive = sparse[0].points.iter().map(|p| p.busy_share).sum::<f64>() / 5.0;
        assert!((naive - sparse[0].mean(|p| p.busy_share)).abs() > 0.05);
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
        let busy: Vec<f64> = pools[0].points.iter().map(|p| p.busy_share).collect();
        assert_eq!(busy, [1.0, 1.0, 0.5]);
    }
}
