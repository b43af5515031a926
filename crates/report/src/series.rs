//! Time series: every engine core's state once per simulated second
//! (`timeseries.csv`, written as samples arrive) and the per-pool
//! aggregates the plots draw, kept in memory (a few numbers per pool per
//! second).

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

/// One pool's series.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct PoolSeries {
    pub name: String,
    pub points: Vec<PoolPoint>,
}

/// Collects [`CoreSample`]s; optionally writes them as CSV rows.
pub struct SeriesSink<W: Write> {
    writer: Option<csv::Writer<W>>,
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
        let writer = out.map(|out| {
            let mut w = csv::Writer::from_writer(out);
            error = w.write_record(HEADER).err().map(|e| e.to_string());
            w
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
                    .filter(|p| p.time_s == time_ns as f64 / 1e9);
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
            Some(mut w) => {
                w.flush().map_err(|e| e.to_string())?;
                Some(w.into_inner().map_err(|e| e.to_string())?)
            }
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
        // next windows rather than lost.
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
            let time_s = time_ns as f64 / 1e9;
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
            let row = [
                format!("{}", time_ns / SAMPLE_NS),
                s.pool.to_string(),
                s.pod.to_string(),
                s.rank.to_string(),
                s.waiting.to_string(),
                s.running.to_string(),
                format!("{:.4}", s.kv_usage),
                format!("{hit_rate:.4}"),
                format!("{busy:.4}"),
            ];
            if let Err(e) = w.write_record(&row) {
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
