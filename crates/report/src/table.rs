//! Side-by-side figures of several runs: the rows `pdsim compare` prints,
//! with a band over seeds and the change against the first deployment.
//! The same rows render as a terminal table (comfy-table), Markdown and
//! HTML, so the three never disagree.

use crate::Summary;
use crate::series::PoolSeries;
use comfy_table::{ContentArrangement, Table, presets::UTF8_FULL_CONDENSED};
use serde::Serialize;

/// One deployment's runs, one per seed (seed order), and what the plots
/// need from the first seed's run.
#[derive(Clone, Debug, Serialize)]
pub struct ComparedRun {
    /// The deployment's name and the file it came from.
    pub deployment: String,
    pub file: String,
    pub summaries: Vec<Summary>,
    #[serde(skip)]
    pub ttft_cdf_ms: Vec<(f64, f64)>,
    #[serde(skip)]
    pub itl_cdf_ms: Vec<(f64, f64)>,
    #[serde(skip)]
    pub e2e_cdf_ms: Vec<(f64, f64)>,
    #[serde(skip)]
    pub series: Vec<PoolSeries>,
}

/// Mean over seeds and the range.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Band {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

impl Band {
    fn of(values: &[f64]) -> Option<Band> {
        if values.is_empty() {
            return None;
        }
        Some(Band {
            mean: values.iter().sum::<f64>() / values.len() as f64,
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        })
    }
}

/// Which direction is better for a figure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Better {
    Lower,
    Higher,
    Neither,
}

/// One figure across deployments.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub figure: String,
    pub unit: String,
    pub better: Better,
    /// Per deployment, in the order given.
    pub values: Vec<Option<Band>>,
    /// Decimals to print.
    #[serde(skip)]
    pub decimals: usize,
}

type Getter = fn(&Summary) -> Option<f64>;

/// The figures compared, in print order.
fn figures() -> Vec<(&'static str, &'static str, Better, usize, Getter)> {
    use Better::*;
    vec![
        ("GPUs", "", Neither, 0, |s| Some(s.run.gpus as f64)),
        ("completed", "req", Higher, 0, |s| {
            Some(s.requests.completed as f64)
        }),
        ("not completed", "req", Lower, 0, |s| {
            Some((s.requests.rejected + s.requests.aborted) as f64)
        }),
        ("disaggregated", "%", Neither, 1, |s| {
            Some(100.0 * s.requests.disaggregated as f64 / s.requests.completed.max(1) as f64)
        }),
        ("throughput", "req/s", Higher, 2, |s| {
            Some(s.throughput.requests_per_s)
        }),
        ("output tokens", "tok/s", Higher, 0, |s| {
            Some(s.throughput.output_tokens_per_s)
        }),
        ("output tokens per GPU", "tok/s", Higher, 1, |s| {
            Some(s.throughput.output_tokens_per_s_per_gpu)
        }),
        ("goodput (met SLO)", "%", Higher, 1, |s| {
            s.goodput.as_ref().map(|g| 100.0 * g.met_share)
        }),
        ("goodput", "req/s", Higher, 2, |s| {
            s.goodput.as_ref().map(|g| g.requests_per_s)
        }),
        ("goodput per GPU", "req/s", Higher, 3, |s| {
            s.goodput
                .as_ref()
                .map(|g| g.requests_per_s / s.run.gpus.max(1) as f64)
        }),
        ("TTFT mean", "ms", Lower, 1, |s| Some(s.ttft_ms.mean)),
        ("TTFT p50", "ms", Lower, 1, |s| Some(s.ttft_ms.p50)),
        ("TTFT p99", "ms", Lower, 1, |s| Some(s.ttft_ms.p99)),
        ("TPOT mean", "ms", Lower, 2, |s| Some(s.tpot_ms.mean)),
        ("TPOT p99", "ms", Lower, 2, |s| Some(s.tpot_ms.p99)),
        ("ITL p99", "ms", Lower, 2, |s| Some(s.itl_ms.p99)),
        ("E2E mean", "ms", Lower, 0, |s| Some(s.e2e_ms.mean)),
        ("E2E p99", "ms", Lower, 0, |s| Some(s.e2e_ms.p99)),
        ("queueing mean", "ms", Lower, 1, |s| Some(s.queue_ms.mean)),
        ("KV transfer mean", "ms", Lower, 2, |s| {
            (s.transfer_ms.count > 0).then_some(s.transfer_ms.mean)
        }),
        ("prefix cache hit", "%", Higher, 1, |s| {
            Some(100.0 * s.prefix_cache.hit_rate)
        }),
        ("KV usage mean", "%", Neither, 1, |s| {
            Some(100.0 * s.kv_usage.mean)
        }),
        ("KV usage peak", "%", Neither, 1, |s| {
            Some(100.0 * s.kv_usage.peak)
        }),
        ("preemptions", "", Lower, 0, |s| Some(s.preemptions as f64)),
        ("cost per 1M output tokens", "USD", Lower, 3, |s| {
            s.cost.as_ref().map(|c| c.usd_per_million_output_tokens)
        }),
    ]
}

/// The rows of a comparison; figures no run has are left out.
pub fn rows(runs: &[ComparedRun]) -> Vec<Row> {
    figures()
        .into_iter()
        .filter_map(|(figure, unit, better, decimals, get)| {
            let values: Vec<Option<Band>> = runs
                .iter()
                .map(|r| {
                    let v: Vec<f64> = r.summaries.iter().filter_map(get).collect();
                    Band::of(&v)
                })
                .collect();
            values.iter().any(Option::is_some).then(|| Row {
                figure: figure.to_string(),
                unit: unit.to_string(),
                better,
                values,
                decimals,
            })
        })
        .collect()
}

/// The rows as tables show them: durations in the unit that suits each
/// row. (`rows` keeps milliseconds, for `summary.json`.)
fn shown_rows(runs: &[ComparedRun]) -> Vec<Row> {
    let mut rows = rows(runs);
    for row in rows.iter_mut().filter(|r| r.unit == "ms") {
        row.in_duration_unit();
    }
    rows
}

impl Row {
    /// A row of durations in milliseconds put in the unit that suits its
    /// largest mean, as [`duration_ms`] prints one duration: seconds from
    /// a second, minutes from a minute, hours from an hour, with three
    /// significant digits at most (an E2E of 2,005,932 ms reads 33.4 min).
    fn in_duration_unit(&mut self) {
        let largest = self
            .values
            .iter()
            .flatten()
            .map(|b| b.mean.abs())
            .fold(0.0, f64::max);
        let (unit, size, decimals) = duration_column(largest, self.decimals);
        self.decimals = decimals;
        self.unit = unit.to_string();
        for band in self.values.iter_mut().flatten() {
            band.mean /= size;
            band.min /= size;
            band.max /= size;
        }
    }
}

/// The unit of a column (or row) of durations whose largest value is
/// `largest_ms` milliseconds, as [`duration_ms`] prints one duration:
/// its name, its size in milliseconds and the decimals that give three
/// significant digits; under a second, milliseconds with `ms_decimals`.
pub fn duration_column(largest_ms: f64, ms_decimals: usize) -> (&'static str, f64, usize) {
    let (unit, size) = if largest_ms.is_nan() || largest_ms < 1e3 {
        return ("ms", 1.0, ms_decimals);
    } else if largest_ms < 60e3 {
        ("s", 1e3)
    } else if largest_ms < 3600e3 {
        ("min", 60e3)
    } else {
        ("h", 3600e3)
    };
    let shown = largest_ms / size;
    let decimals = if shown < 10.0 {
        2
    } else if shown < 100.0 {
        1
    } else {
        0
    };
    (unit, size, decimals)
}

/// The change from `base` to `value`, as a signed percentage.
fn delta(base: f64, value: f64) -> Option<f64> {
    (base.abs() > 1e-12).then(|| 100.0 * (value - base) / base)
}

/// `257.3`, `257.3 (250.1–262.0)` over seeds, and ` −27%` against the first.
pub fn cell(row: &Row, i: usize, with_delta: bool) -> String {
    let Some(Some(band)) = row.values.get(i) else {
        return "–".into();
    };
    let d = row.decimals;
    let mut text = format!("{:.d$}", band.mean);
    if band.max - band.min > 0.0 {
        text.push_str(&format!(" ({:.d$}–{:.d$})", band.min, band.max));
    }
    if with_delta
        && i > 0
        && let Some(Some(base)) = row.values.first()
        && !format!("{:.d$}", base.mean.abs())
            .trim_matches(|c| c == '0' || c == '.')
            .is_empty()
        && let Some(change) = delta(base.mean, band.mean)
    {
        if change.abs() < 0.5 {
            text.push_str(" ±0%");
        } else if change > 900.0 {
            text.push_str(&format!(" ×{:.0}", band.mean / base.mean));
        } else if change < -90.0 && band.mean.abs() > 0.0 {
            text.push_str(&format!(" ÷{:.0}", base.mean / band.mean));
        } else {
            let sign = if change > 0.0 { "+" } else { "−" };
            text.push_str(&format!(" {sign}{:.0}%", change.abs()));
        }
    }
    text
}

fn label(row: &Row) -> String {
    if row.unit.is_empty() {
        row.figure.clone()
    } else {
        format!("{} ({})", row.figure, row.unit)
    }
}

/// The comparison as a terminal table.
pub fn text_table(runs: &[ComparedRun]) -> String {
    let mut table = Table::new();
    table
        .load_style(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Disabled);
    let mut header = vec!["figure".to_string()];
    header.extend(runs.iter().map(|r| r.deployment.clone()));
    table.set_header(header);
    for row in shown_rows(runs) {
        let mut cells = vec![label(&row)];
        cells.extend((0..runs.len()).map(|i| cell(&row, i, true)));
        table.add_row(cells);
    }
    format!("{table}\n")
}

/// The comparison as a Markdown table.
pub fn markdown_table(runs: &[ComparedRun]) -> String {
    let mut out = String::from("| figure |");
    for r in runs {
        out.push_str(&format!(" {} |", r.deployment));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(runs.len()));
    out.push('\n');
    for row in shown_rows(runs) {
        out.push_str(&format!("| {} |", label(&row)));
        for i in 0..runs.len() {
            out.push_str(&format!(" {} |", cell(&row, i, true)));
        }
        out.push('\n');
    }
    out
}

/// Per-pool utilisation of every run (first seed), as Markdown.
pub fn pools_markdown(runs: &[ComparedRun]) -> String {
    let mut out = String::from(
        "| deployment | pool | role | GPUs | busy (%) | KV usage mean (%) | KV peak (%) | prefix hit (%) | preemptions |\n|---|---|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for r in runs {
        let Some(s) = r.summaries.first() else {
            continue;
        };
        for p in &s.pools {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |\n",
                r.deployment,
                p.name,
                p.role,
                p.gpus,
                100.0 * p.busy_share,
                100.0 * p.kv_usage_mean,
                100.0 * p.kv_usage_peak,
                100.0 * p.prefix_hit_rate,
                p.preemptions
            ));
        }
    }
    out
}

/// A duration given in milliseconds, in the unit that suits it: `8.5 ms`,
/// `420 ms`, `2.0 s`, `33.4 min`, `2.5 h`.
pub fn duration_ms(ms: f64) -> String {
    if !ms.is_finite() {
        return "–".into();
    }
    let s = ms / 1000.0;
    if ms < 10.0 {
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else if s < 60.0 {
        format!("{s:.1} s")
    } else if s < 3600.0 {
        format!("{:.1} min", s / 60.0)
    } else {
        format!("{:.1} h", s / 3600.0)
    }
}

/// Mean milliseconds per completed request in each phase: queueing,
/// prefill, waiting for the decode side, KV transfer, first decode step
/// (these add up to the mean TTFT), then the rest of the decode.
pub fn phases_ms(s: &Summary) -> [f64; 6] {
    let t = &s.ttft_share;
    let ttft = s.ttft_ms.mean;
    [
        t.queueing * ttft,
        t.prefilling * ttft,
        t.waiting * ttft,
        t.transferring * ttft,
        t.first_decode * ttft,
        (s.e2e_ms.mean - ttft).max(0.0),
    ]
}

pub const PHASES: [&str; 6] = [
    "queueing",
    "prefill",
    "waiting for decode",
    "KV transfer",
    "first decode step",
    "decode",
];

/// Why the runs differ, in sentences: the winner on goodput (with an SLO)
/// or on throughput per GPU, and for each run the phase that dominates its
/// time to first token and its busiest pool.
pub fn verdict(runs: &[ComparedRun]) -> String {
    let mean = |r: &ComparedRun, f: &dyn Fn(&Summary) -> f64| {
        let n = r.summaries.len().max(1) as f64;
        r.summaries.iter().map(f).sum::<f64>() / n
    };
    let with_slo = runs
        .iter()
        .any(|r| r.summaries.iter().any(|s| s.goodput.is_some()));
    let key = |r: &ComparedRun| {
        if with_slo {
            mean(r, &|s| {
                s.goodput
                    .as_ref()
                    .map_or(0.0, |g| g.requests_per_s / s.run.gpus.max(1) as f64)
            })
        } else {
            mean(r, &|s| s.throughput.output_tokens_per_s_per_gpu)
        }
    };
    let mut order: Vec<usize> = (0..runs.len()).collect();
    order.sort_by(|a, b| key(&runs[*b]).total_cmp(&key(&runs[*a])).then(a.cmp(b)));
    let mut out = String::new();
    if let Some(&best) = order.first() {
        let what = if with_slo {
            "goodput per GPU (requests per second meeting the SLO, divided by GPUs)"
        } else {
            "output tokens per second per GPU"
        };
        let ttft_p90 = |r: &ComparedRun| duration_ms(mean(r, &|s| s.ttft_ms.p90));
        let top = key(&runs[best]);
        out.push_str(&format!(
            "**{}** wins on {what}: {top:.3}, at TTFT p90 {}",
            runs[best].deployment,
            ttft_p90(&runs[best])
        ));
        for &other in order.iter().skip(1) {
            let theirs = key(&runs[other]);
            // The winner's figure as a multiple of each other's, in words.
            let times = if theirs > 0.0 {
                format!("{:.2}× as much as", top / theirs)
            } else {
                "where nothing is carried by".to_string()
            };
            out.push_str(&format!(
                "; {theirs:.3} for {} at TTFT p90 {} ({} carries {times} {})",
                runs[other].deployment,
                ttft_p90(&runs[other]),
                runs[best].deployment,
                runs[other].deployment
            ));
        }
        out.push_str(".\n\n");
    }
    for r in runs {
        let Some(s) = r.summaries.first() else {
            continue;
        };
        let phases = phases_ms(s);
        let (top, top_ms) = phases[..5]
            .iter()
            .enumerate()
            .fold(
                (0, f64::MIN),
                |acc, (i, v)| if *v > acc.1 { (i, *v) } else { acc },
            );
        let busiest = s
            .pools
            .iter()
            .max_by(|a, b| a.busy_share.total_cmp(&b.busy_share));
        out.push_str(&format!(
            "- **{}**: TTFT mean {:.1} ms, of which {} {:.1} ms ({:.0}%)",
            r.deployment,
            s.ttft_ms.mean,
            PHASES[top],
            top_ms,
            100.0 * top_ms / s.ttft_ms.mean.max(1e-9)
        ));
        if let Some(p) = busiest {
            out.push_str(&format!(
                "; busiest pool `{}` ({}) stepping {:.0}% of the time, KV usage mean {:.0}%",
                p.name,
                p.role,
                100.0 * p.busy_share,
                100.0 * p.kv_usage_mean
            ));
        }
        out.push_str(&format!(
            "; {} of {} requests completed.",
            s.requests.completed, s.requests.total
        ));
        if let Some(p) = busiest
            && p.busy_share >= 0.9
            && s.queue_ms.mean > 0.5 * s.ttft_ms.mean
        {
            out.push_str(&format!(
                " The `{}` pool is the bottleneck: its engines step {:.0}% of the time and requests spend {:.0}% of their time to first token queueing for it.",
                p.name,
                100.0 * p.busy_share,
                100.0 * s.queue_ms.mean / s.ttft_ms.mean.max(1e-9)
            ));
        }
        out.push('\n');
    }
    // Disaggregation's promise: decode steps without prefill chunks in them.
    let tpot = |pd: bool| {
        runs.iter()
            .filter_map(|r| r.summaries.first().map(|s| (r, s)))
            .filter(|(_, s)| (s.requests.disaggregated > 0) == pd && s.tpot_ms.count > 0)
            .min_by(|a, b| a.1.tpot_ms.mean.total_cmp(&b.1.tpot_ms.mean))
            .map(|(r, s)| (r.deployment.as_str(), s.tpot_ms.mean, s.tpot_ms.p99))
    };
    if let (Some((pd, pd_mean, pd_p99)), Some((co, co_mean, co_p99))) = (tpot(true), tpot(false)) {
        out.push_str(&format!(
            "\nDecode without prefill interference: {pd} (disaggregated) has TPOT mean {pd_mean:.1} ms, p99 {pd_p99:.1} ms; {co} (colocated, prefill chunks share its steps) {co_mean:.1} ms, p99 {co_p99:.1} ms.\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::duration_ms;

    #[test]
    fn durations_read_in_the_unit_that_suits_them() {
        let cases = [
            (8.46, "8.5 ms"),
            (9.99, "10.0 ms"),
            (10.0, "10 ms"),
            (420.4, "420 ms"),
            (999.4, "999 ms"),
            (2_000.0, "2.0 s"),
            (59_940.0, "59.9 s"),
            (2_005_932.0, "33.4 min"),
            (9_000_000.0, "2.5 h"),
            (f64::NAN, "–"),
        ];
        for (ms, want) in cases {
            assert_eq!(duration_ms(ms), want, "{ms}");
        }
    }

    #[test]
    fn a_row_of_durations_takes_the_unit_of_its_largest_value() {
        use super::{Band, Better, Row};
        let row = |means: &[f64]| Row {
            figure: "E2E mean".into(),
            unit: "ms".into(),
            better: Better::Lower,
            values: means
                .iter()
                .map(|m| {
                    Some(Band {
                        mean: *m,
                        min: *m,
                        max: *m,
                    })
                })
                .chain([None])
                .collect(),
            decimals: 0,
        };
        let shown = |means: &[f64]| {
            let mut r = row(means);
            r.in_duration_unit();
            let cells: Vec<String> = (0..r.values.len())
                .map(|i| super::cell(&r, i, false))
                .collect();
            (r.unit, cells)
        };
        assert_eq!(shown(&[420.0, 96.9]).0, "ms");
        assert_eq!(
            shown(&[7216.0, 3587.0]),
            ("s".into(), vec!["7.22".into(), "3.59".into(), "–".into()])
        );
        assert_eq!(shown(&[2_005_932.0, 12.0]).1[0], "33.4");
        assert_eq!(shown(&[2_005_932.0, 12.0]).0, "min");
        assert_eq!(
            shown(&[9_000_000.0]),
            ("h".into(), vec!["2.50".into(), "–".into()])
        );
    }
}
