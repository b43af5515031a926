//! A run with idle stretches: the time series written with the stretches
//! compressed (the event loop's default) gives the same per-pool means and
//! the same thinned plot lines as the dense series, a row every second,
//! which the same run gives with the observation loops running through
//! the stretches; and its CSV is the dense CSV without the skipped rows.

use pdsim_cluster::{Observation, build, run, run_observing};
use pdsim_report::series::{PoolMetric, PoolPoint, PoolSeries, SeriesSink};
use pdsim_spec::files::MemoryFiles;
use pdsim_spec::validate::{Request, validate};
use pdsim_workload::MooncakeReader;

const SCENARIO: &str = include_str!("../../../scenarios/default.yaml");
const DEPLOYMENT: &str = include_str!("../../../deployments/default.yaml");
const TRACE: &str = include_str!("../../../traces/default.jsonl");

/// The bundled trace's first 300 rows, their arrivals ten times as dense,
/// in three groups of 100, the second
/// group shifted 90 s later and the third 1000 s later: two long idle
/// stretches (enough seconds that the plot lines are thinned).
fn gappy_trace() -> String {
    TRACE
        .lines()
        .take(300)
        .enumerate()
        .map(|(i, line)| {
            let shift_ms = match i {
                0..100 => 0,
                100..200 => 90_000,
                _ => 1_000_000,
            };
            let mut row: serde_json::Value = serde_json::from_str(line).unwrap();
            // Arrivals ten times as dense as the bundled trace's, so
            // that requests wait in the engines at some sampled seconds.
            let t = row["timestamp"].as_u64().unwrap() / 10;
            row["timestamp"] = (t + shift_ms).into();
            format!("{row}\n")
        })
        .collect()
}

fn series(dense: bool) -> (Vec<PoolSeries>, String) {
    let files = MemoryFiles::new()
        .with("s.yaml", SCENARIO)
        .with("d.yaml", DEPLOYMENT);
    let report = validate(&Request {
        files: &files,
        catalog_dirs: vec![],
        scenario: Some("s.yaml".into()),
        documents: vec!["d.yaml".into()],
    });
    let cluster = build(&report.deployments[0], report.scenario.as_ref().unwrap()).unwrap();
    let text = gappy_trace();
    let mut source = MooncakeReader::new(std::io::Cursor::new(text.into_bytes()), "gaps.jsonl");
    let mut sink = SeriesSink::new(vec!["colocated".into()], Some(Vec::new()));
    let stats = if dense {
        run_observing(
            &cluster,
            &mut source,
            3,
            false,
            &mut sink,
            Observation::EveryTick,
        )
    } else {
        run(&cluster, &mut source, 3, false, &mut sink)
    }
    .unwrap();
    assert_eq!(stats.completed, 300);
    let (pools, csv) = sink.finish().unwrap();
    (pools, String::from_utf8(csv.unwrap()).unwrap())
}

#[test]
fn compressed_idle_stretches_give_the_dense_means_and_plots() {
    let (sparse, sparse_csv) = series(false);
    let (dense, dense_csv) = series(true);
    let (sparse, dense) = (&sparse[0], &dense[0]);
    let (sparse_points, dense_points) = (sparse.points().unwrap(), dense.points().unwrap());
    eprintln!(
        "{} sparse points, {} dense; CSV {} and {} bytes",
        sparse_points.len(),
        dense_points.len(),
        sparse_csv.len(),
        dense_csv.len()
    );
    // The dense series has a point every second; the sparse one skips
    // most of the 1000 idle seconds.
    assert!(
        dense_points
            .windows(2)
            .all(|w| w[1].time_s == w[0].time_s + 1.0)
    );
    assert!(dense_points.len() > 1000);
    assert!(sparse_points.len() * 3 < dense_points.len());
    assert_eq!(sparse.seconds(), dense.seconds());
    // The sparse CSV is the dense CSV without the skipped rows.
    let mut dense_rows = dense_csv.lines();
    for row in sparse_csv.lines() {
        assert!(dense_rows.any(|d| d == row), "{row} is not a dense row");
    }
    // Stretched out, the sparse series is the dense one.
    let expanded: Vec<PoolPoint> = sparse
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
    assert_eq!(&expanded, &dense_points);
    // Per-pool means over time, computed from the dense points directly
    // and from the sparse series with its idle stretches weighted.
    for metric in PoolMetric::ALL {
        let value = |p: &PoolPoint| metric.of(p);
        let plain = dense_points.iter().map(value).sum::<f64>() / dense_points.len() as f64;
        let weighted = sparse.mean(metric);
        assert!(
            (weighted - plain).abs() <= 1e-12 * plain.abs().max(1.0),
            "{metric:?}: {weighted} against {plain}"
        );
        assert!(plain > 0.0, "{metric:?} is zero all along: a weak check");
        // The plot lines (averaged in groups past 400 seconds) agree too.
        let (a, b) = (sparse.line(metric), dense.line(metric));
        assert!(a.len() <= 400 && a.len() > 200, "{metric:?}: {}", a.len());
        assert_eq!(a.len(), b.len(), "{metric:?}");
        for (p, q) in a.iter().zip(&b) {
            assert!(
                (p.0 - q.0).abs() < 1e-9 && (p.1 - q.1).abs() < 1e-9,
                "{metric:?}: {p:?} against {q:?}"
            );
        }
    }
    // A plain mean over the sparse points would overweight the busy
    // seconds.
    let naive =
        sparse_points.iter().map(|p| p.busy_share).sum::<f64>() / sparse_points.len() as f64;
    assert!(naive > 1.5 * sparse.mean(PoolMetric::BusyShare));
}
