//! `pdsim plan` results: per layout, the highest request rate it sustains
//! within the SLO (found by a bounded search over the trace's time scale),
//! the ranking, the Pareto front of throughput per GPU against latency,
//! and the fewest nodes that carry a target rate.

use crate::page::Document;
use crate::plot::{self, LineChart, Scatter};
use crate::slo::Slo;
use serde::{Deserialize, Serialize};

/// One simulation of a layout at one rate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Probe {
    /// The trace's arrival times were divided by this.
    pub speedup: f64,
    pub rate_req_s: f64,
    /// Share of requests meeting the SLO, 0–1.
    pub met_share: f64,
    pub completed_share: f64,
    pub ttft_ms_p99: f64,
    pub itl_ms_p99: f64,
    /// The 99th percentile over requests of each one's mean inter-token
    /// latency: what the ITL threshold of the SLO is compared with.
    pub tpot_ms_p99: f64,
    pub output_tokens_per_s: f64,
    /// Whether this rate is sustained: enough requests met the SLO.
    pub sustained: bool,
}

/// One candidate layout's search.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayoutResult {
    /// Position in the plan's layout list (the sharding key).
    pub index: usize,
    pub name: String,
    /// The deployment file, or the base file and the node split it was
    /// generated with.
    pub source: String,
    pub nodes: u64,
    pub gpus: u64,
    /// Why it was not simulated (it failed validation), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The highest sustained rate found, if any rate was sustained.
    pub max_rate_req_s: Option<f64>,
    /// The probes in the order they ran.
    pub probes: Vec<Probe>,
}

impl LayoutResult {
    /// The probe at the highest sustained rate.
    pub fn best(&self) -> Option<&Probe> {
        self.probes
            .iter()
            .filter(|p| p.sustained)
            .max_by(|a, b| a.rate_req_s.total_cmp(&b.rate_req_s))
    }

    pub fn rate_per_gpu(&self) -> f64 {
        self.max_rate_req_s.unwrap_or(0.0) / self.gpus.max(1) as f64
    }
}

/// What the search was asked.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanQuestion {
    pub scenario: String,
    pub trace: String,
    pub requests: u64,
    /// The trace's own rate (requests over its arrival span).
    pub trace_rate_req_s: f64,
    /// `trace` (its arrival times scaled) or `poisson` (its requests in
    /// order, Poisson arrivals at each probe's rate).
    pub arrivals: String,
    pub slo: String,
    /// The SLO for every request, drawn as a line on the plots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo_all: Option<Slo>,
    /// Share of requests that must meet the SLO for a rate to count.
    pub attainment: f64,
    pub seed: u64,
    pub max_runs_per_layout: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_rate_req_s: Option<f64>,
}

/// A plan, whole or one shard of it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub pdsim_version: String,
    pub question: PlanQuestion,
    /// All layouts of the plan (names), so a merge knows what is missing.
    pub layout_names: Vec<String>,
    /// `[index, count]` for a shard; absent for a whole plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<[usize; 2]>,
    pub layouts: Vec<LayoutResult>,
}

impl Plan {
    /// Joins shards of one plan into the whole plan; refuses shards of
    /// different questions, overlaps and gaps.
    pub fn merge(parts: Vec<Plan>) -> Result<Plan, String> {
        let Some(first) = parts.first() else {
            return Err("nothing to merge".into());
        };
        let question = first.question.clone();
        let names = first.layout_names.clone();
        let version = first.pdsim_version.clone();
        let mut layouts: Vec<LayoutResult> = Vec::new();
        for (i, part) in parts.into_iter().enumerate() {
            if part.question != question || part.layout_names != names {
                return Err(format!(
                    "part {} answers a different plan (scenario, trace, SLO, seed or layouts differ)",
                    i + 1
                ));
            }
            if part.pdsim_version != version {
                return Err(format!(
                    "part {} was made by pdsim {}, the first by {version}",
                    i + 1,
                    part.pdsim_version
                ));
            }
            layouts.extend(part.layouts);
        }
        layouts.sort_by_key(|l| l.index);
        for (i, name) in names.iter().enumerate() {
            let found = layouts.iter().filter(|l| l.index == i).count();
            if found != 1 {
                return Err(format!(
                    "layout {i} ({name}) appears {found} times in the parts; give every shard exactly once"
                ));
            }
        }
        Ok(Plan {
            pdsim_version: version,
            question,
            layout_names: names,
            shard: None,
            layouts,
        })
    }

    /// Layout indices on the Pareto front: no other layout sustains more
    /// requests per GPU with a TTFT p99 (at its best rate) no higher.
    pub fn pareto(&self) -> Vec<usize> {
        let points: Vec<(usize, f64, f64)> = self
            .layouts
            .iter()
            .filter_map(|l| l.best().map(|b| (l.index, l.rate_per_gpu(), b.ttft_ms_p99)))
            .collect();
        points
            .iter()
            .filter(|(i, x, y)| {
                !points
                    .iter()
                    .any(|(j, x2, y2)| j != i && x2 >= x && y2 <= y && (x2 > x || y2 < y))
            })
            .map(|(i, _, _)| *i)
            .collect()
    }

    /// Layouts best first: by sustained requests per GPU, then by rate;
    /// layouts that failed validation last.
    pub fn ranking(&self) -> Vec<&LayoutResult> {
        let mut order: Vec<&LayoutResult> = self.layouts.iter().collect();
        order.sort_by(|a, b| {
            a.refused
                .is_some()
                .cmp(&b.refused.is_some())
                .then(b.rate_per_gpu().total_cmp(&a.rate_per_gpu()))
                .then(
                    b.max_rate_req_s
                        .unwrap_or(0.0)
                        .total_cmp(&a.max_rate_req_s.unwrap_or(0.0)),
                )
                .then(a.index.cmp(&b.index))
        });
        order
    }

    /// For a target rate: per layout, the replicas and nodes it needs, and
    /// the layout needing the fewest nodes.
    pub fn nodes_for_target(&self) -> Vec<(usize, u64, u64)> {
        let Some(target) = self.question.target_rate_req_s else {
            return Vec::new();
        };
        let mut out: Vec<(usize, u64, u64)> = self
            .layouts
            .iter()
            .filter_map(|l| {
                let rate = l.max_rate_req_s.filter(|r| *r > 0.0)?;
                let replicas = (target / rate).ceil().max(1.0) as u64;
                Some((l.index, replicas, replicas * l.nodes))
            })
            .collect();
        out.sort_by_key(|(i, _, nodes)| (*nodes, *i));
        out
    }
}

fn fmt_opt(v: Option<f64>, d: usize) -> String {
    v.map(|v| format!("{v:.d$}")).unwrap_or_else(|| "–".into())
}

/// The ranking as a Markdown table (also printed).
pub fn ranking_table(plan: &Plan) -> String {
    let front = plan.pareto();
    let mut out = String::from(
        "| rank | layout | nodes | GPUs | max rate (req/s) | per GPU (req/s) | TTFT p99 (ms) | TPOT p99 (ms) | ITL p99 (ms) | met SLO (%) | runs | Pareto |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
    );
    for (rank, l) in plan.ranking().into_iter().enumerate() {
        if l.refused.is_some() {
            out.push_str(&format!(
                "| – | {} | – | – | not valid | | | | | | 0 | |\n",
                l.name
            ));
            continue;
        }
        let best = l.best();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            rank + 1,
            l.name,
            l.nodes,
            l.gpus,
            match l.max_rate_req_s {
                // No probe failed: the search ran out of runs while still
                // rising, so the rate is a lower bound.
                Some(r) if l.probes.iter().all(|p| p.sustained) => format!("≥ {r:.2}"),
                other => fmt_opt(other, 2),
            },
            if l.max_rate_req_s.is_some() {
                format!("{:.4}", l.rate_per_gpu())
            } else {
                "–".into()
            },
            fmt_opt(best.map(|b| b.ttft_ms_p99), 1),
            fmt_opt(best.map(|b| b.tpot_ms_p99), 2),
            fmt_opt(best.map(|b| b.itl_ms_p99), 2),
            fmt_opt(best.map(|b| 100.0 * b.met_share), 1),
            l.probes.len(),
            if front.contains(&l.index) { "yes" } else { "" },
        ));
    }
    out
}

/// The plan's report.
pub fn plan_report(plan: &Plan) -> Document {
    let q = &plan.question;
    let slo = q.slo_all.as_ref();
    let mut doc = Document::new(format!("pdsim plan on {}", q.scenario));
    doc.text(format!(
        "Trace `{}` ({} requests, {:.3} req/s as recorded), {}. A rate is **sustained** when at least {:.0}% of requests meet the SLO ({}). Each layout's search is bounded to {} runs; seed {}. A rate marked ≥ is a lower bound: every probe was sustained.\n\n",
        q.trace,
        q.requests,
        q.trace_rate_req_s,
        if q.arrivals == "poisson" {
            "its requests replayed in order with Poisson arrivals at each probe's rate"
        } else {
            "replayed faster or slower by scaling its arrival times"
        },
        100.0 * q.attainment,
        q.slo,
        q.max_runs_per_layout,
        q.seed
    ));
    doc.text(format!("## Ranking\n\n{}\n", ranking_table(plan)));
    for l in &plan.layouts {
        if let Some(reason) = &l.refused {
            doc.text(format!("- `{}` was not simulated: {reason}\n", l.name));
        }
    }
    let need = plan.nodes_for_target();
    if let Some(target) = q.target_rate_req_s {
        let mut text = format!(
            "## Fewest nodes for {target} req/s\n\nEach layout replicated as often as the target needs (independent replicas behind one router).\n\n| layout | replicas | nodes |\n|---|---:|---:|\n"
        );
        for (i, replicas, nodes) in &need {
            text.push_str(&format!(
                "| {} | {replicas} | {nodes} |\n",
                plan.layouts[*i].name
            ));
        }
        if let Some((i, _, nodes)) = need.first() {
            text.push_str(&format!(
                "\n**{}** carries {target} req/s with the fewest nodes: {nodes}.\n",
                plan.layouts[*i].name
            ));
        } else {
            text.push_str("\nNo layout sustained any rate within the SLO.\n");
        }
        doc.text(text + "\n");
    }
    let front = plan.pareto();
    let rank_of: Vec<(usize, usize)> = plan
        .ranking()
        .iter()
        .enumerate()
        .map(|(r, l)| (l.index, r + 1))
        .collect();
    let rank = |i: usize| rank_of.iter().find(|(j, _)| *j == i).map_or(0, |(_, r)| *r);
    doc.text("## Pareto front\n\nThroughput per GPU at each layout's highest sustained rate against its TTFT p99 there; the front joins layouts no other beats on both. Points are labelled by rank; the front's by name.\n\n");
    doc.plot(
        "pareto",
        plot::scatter(&Scatter {
            title: "Sustained requests per GPU vs TTFT p99".into(),
            x_label: "requests per second per GPU".into(),
            y_label: "TTFT p99 (ms)".into(),
            points: plan
                .layouts
                .iter()
                .filter_map(|l| {
                    l.best().map(|b| {
                        let on = front.contains(&l.index);
                        let label = if on {
                            format!("#{} {}", rank(l.index), l.name)
                        } else {
                            format!("#{}", rank(l.index))
                        };
                        (label, l.rate_per_gpu(), b.ttft_ms_p99, on)
                    })
                })
                .collect(),
        }),
    );
    doc.text("## Latency against request rate\n\nEvery probe of the search, per layout. The SLO's ITL threshold is compared with each request's mean inter-token latency, so its line is drawn on TPOT; `plan.json` also has each probe's ITL p99.\n\n");
    let curve = |f: fn(&Probe) -> f64| -> Vec<(String, Vec<(f64, f64)>)> {
        plan.layouts
            .iter()
            .filter(|l| !l.probes.is_empty())
            .map(|l| {
                let mut pts: Vec<(f64, f64)> =
                    l.probes.iter().map(|p| (p.rate_req_s, f(p))).collect();
                pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                (l.name.clone(), pts)
            })
            .collect()
    };
    doc.plot(
        "ttft_vs_rate",
        plot::line_chart(&LineChart {
            title: "TTFT p99 against request rate".into(),
            x_label: "requests per second".into(),
            y_label: "TTFT p99 (ms, log scale)".into(),
            log_y: true,
            series: curve(|p| p.ttft_ms_p99),
            h_line: slo
                .and_then(|s| s.ttft_ms)
                .map(|v| (v, format!("SLO {v} ms"))),
            ..LineChart::default()
        }),
    );
    doc.plot(
        "tpot_vs_rate",
        plot::line_chart(&LineChart {
            title: "TPOT p99 (each request's mean inter-token latency) against request rate".into(),
            x_label: "requests per second".into(),
            y_label: "TPOT p99 (ms, log scale)".into(),
            log_y: true,
            series: curve(|p| p.tpot_ms_p99),
            h_line: slo
                .and_then(|s| s.itl_ms)
                .map(|v| (v, format!("SLO {v} ms"))),
            ..LineChart::default()
        }),
    );
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(index: usize, gpus: u64, rate: Option<f64>, ttft: f64) -> LayoutResult {
        LayoutResult {
            index,
            name: format!("l{index}"),
            source: String::new(),
            nodes: gpus / 8,
            gpus,
            refused: None,
            max_rate_req_s: rate,
            probes: rate
                .map(|r| Probe {
                    speedup: 1.0,
                    rate_req_s: r,
                    met_share: 1.0,
                    completed_share: 1.0,
                    ttft_ms_p99: ttft,
                    itl_ms_p99: 1.0,
                    tpot_ms_p99: 1.0,
                    output_tokens_per_s: 1.0,
                    sustained: true,
                })
                .into_iter()
                .collect(),
        }
    }

    fn plan(layouts: Vec<LayoutResult>, shard: Option<[usize; 2]>) -> Plan {
        Plan {
            pdsim_version: "0".into(),
            question: PlanQuestion {
                scenario: "s".into(),
                trace: "t".into(),
                requests: 1,
                trace_rate_req_s: 1.0,
                arrivals: "trace".into(),
                slo: "x".into(),
                slo_all: None,
                attainment: 0.9,
                seed: 0,
                max_runs_per_layout: 4,
                target_rate_req_s: Some(10.0),
            },
            layout_names: (0..3).map(|i| format!("l{i}")).collect(),
            shard,
            layouts,
        }
    }

    #[test]
    fn the_front_keeps_only_undominated_layouts() {
        // l0: 1 req/s/GPU at 100 ms; l1: 0.5 at 50 ms; l2: 0.5 at 200 ms
        // (dominated by l0).
        let p = plan(
            vec![
                layout(0, 8, Some(8.0), 100.0),
                layout(1, 16, Some(8.0), 50.0),
                layout(2, 16, Some(8.0), 200.0),
            ],
            None,
        );
        assert_eq!(p.pareto(), vec![0, 1]);
        assert_eq!(p.ranking()[0].index, 0);
        // 10 req/s needs two replicas of any layout: l0 has the fewest nodes.
        assert_eq!(p.nodes_for_target()[0], (0, 2, 2));
    }

    #[test]
    fn merging_needs_every_shard_once() {
        let a = plan(
            vec![layout(0, 8, Some(1.0), 1.0), layout(2, 8, None, 0.0)],
            Some([0, 2]),
        );
        let b = plan(vec![layout(1, 8, Some(2.0), 1.0)], Some([1, 2]));
        let whole = Plan::merge(vec![b.clone(), a.clone()]).unwrap();
        assert_eq!(
            whole.layouts.iter().map(|l| l.index).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(whole.shard, None);
        assert!(
            Plan::merge(vec![a.clone()])
                .unwrap_err()
                .contains("layout 1")
        );
        assert!(Plan::merge(vec![a.clone(), a.clone(), b.clone()]).is_err());
        let mut other = b;
        other.question.seed = 7;
        assert!(
            Plan::merge(vec![a, other])
                .unwrap_err()
                .contains("different plan")
        );
    }
}
