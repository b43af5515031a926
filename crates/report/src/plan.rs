//! `pdsim plan` results: per layout, the highest request rate it sustains
//! within the SLO (found by a bounded search over the trace's time scale),
//! the ranking, the Pareto front of throughput per GPU against latency,
//! and the fewest nodes that carry a target rate.

use crate::page::Document;
use crate::plot::{self, LineChart, Scatter};
use crate::slo::Slo;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

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
    /// Shares of the requests, 0–1, that completed over the SLO's TTFT,
    /// ITL and E2E bounds (a request may count in several).
    #[serde(default)]
    pub over_ttft_share: f64,
    #[serde(default)]
    pub over_itl_share: f64,
    #[serde(default)]
    pub over_e2e_share: f64,
    /// Where the time to first token went at this rate: the largest part,
    /// named as [`crate::table::PHASES`] names it, and its share, 0–1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_mostly: Option<(String, f64)>,
}

impl Probe {
    /// The SLO's part that most requests missed by, and the share that
    /// missed by it: a bound, or not completing at all.
    pub fn binding(&self) -> (&'static str, f64) {
        [
            ("TTFT", self.over_ttft_share),
            ("ITL", self.over_itl_share),
            ("E2E", self.over_e2e_share),
            ("completion", 1.0 - self.completed_share),
        ]
        .into_iter()
        .fold(("TTFT", f64::MIN), |best, next| {
            if next.1 > best.1 { next } else { best }
        })
    }
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
    /// What an llm-d user deploys for the layout (`pdsim export`'s files,
    /// by relative path), for a layout that sustained a rate; the plan
    /// writes the best-ranked one's to `deploy/`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub deploy: BTreeMap<String, String>,
    /// Why a layout that sustained a rate has no llm-d form, if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy_refused: Option<String>,
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
    /// The distinct arrival times among the requests, and the most
    /// requests arriving at one of them: scaling arrival times keeps such
    /// bursts at every rate.
    #[serde(default)]
    pub arrival_instants: u64,
    #[serde(default)]
    pub max_arrivals_at_one_instant: u64,
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
    /// The best-ranked layout that sustained a rate and has an llm-d form
    /// (`deploy`), and the better-ranked sustained layouts without one.
    pub fn deployable(&self) -> (Option<&LayoutResult>, Vec<&LayoutResult>) {
        let mut skipped = Vec::new();
        for l in self.ranking() {
            if l.refused.is_some() || l.max_rate_req_s.is_none() {
                continue;
            }
            if !l.deploy.is_empty() {
                return (Some(l), skipped);
            }
            skipped.push(l);
        }
        (None, skipped)
    }

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
    // Each latency column in the unit that suits its largest value.
    let column = |f: fn(&Probe) -> f64, ms_decimals: usize| {
        let largest = plan
            .layouts
            .iter()
            .filter_map(|l| l.best())
            .map(f)
            .fold(0.0, f64::max);
        crate::table::duration_column(largest, ms_decimals)
    };
    let ttft = column(|b| b.ttft_ms_p99, 1);
    let tpot = column(|b| b.tpot_ms_p99, 2);
    let itl = column(|b| b.itl_ms_p99, 2);
    let mut out = format!(
        "| rank | layout | nodes | GPUs | max rate (req/s) | per GPU (req/s) | TTFT p99 ({}) | TPOT p99 ({}) | ITL p99 ({}) | met SLO (%) | runs | Pareto |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
        ttft.0, tpot.0, itl.0
    );
    // Layouts that sustained nothing are not ranked: `unsustained` says
    // why for each.
    let ranked = plan
        .ranking()
        .into_iter()
        .filter(|l| l.refused.is_some() || l.max_rate_req_s.is_some());
    for (rank, l) in ranked.enumerate() {
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
            fmt_opt(best.map(|b| b.ttft_ms_p99 / ttft.1), ttft.2),
            fmt_opt(best.map(|b| b.tpot_ms_p99 / tpot.1), tpot.2),
            fmt_opt(best.map(|b| b.itl_ms_p99 / itl.1), itl.2),
            fmt_opt(best.map(|b| 100.0 * b.met_share), 1),
            l.probes.len(),
            if front.contains(&l.index) { "yes" } else { "" },
        ));
    }
    out
}

/// Which layout to deploy and where its files are, in words: the
/// best-ranked layout with an llm-d form, whose files the plan writes to
/// `deploy/`, and any better-ranked one without such a form, with why.
/// Empty when no layout sustained a rate.
pub fn what_to_deploy(plan: &Plan) -> String {
    let (chosen, skipped) = plan.deployable();
    let mut out = String::new();
    if let Some(l) = chosen {
        out.push_str(&format!(
            "**{}** ({} nodes, {} GPUs) sustains {:.2} req/s, {:.4} per GPU. `deploy/` holds what deploys it on llm-d: `ms-values.yaml` for llm-d's model-service chart and `gaie-values.yaml` for the inferencepool chart (the router), each pool's `vllm serve` command under `deploy/vllm/`, and the `helm install` commands in `deploy/README.md`.\n",
            l.name,
            l.nodes,
            l.gpus,
            l.max_rate_req_s.unwrap_or(0.0),
            l.rate_per_gpu()
        ));
    }
    for l in skipped {
        out.push_str(&format!(
            "\n`{}` ranks higher but has no llm-d chart form: {}\n",
            l.name,
            l.deploy_refused.as_deref().unwrap_or("not exported")
        ));
    }
    if chosen.is_none() && !out.is_empty() {
        out.push_str("\nNo layout that sustained a rate has an llm-d chart form, so `deploy/` is not written.\n");
    }
    out
}

/// For each simulated layout that sustained no rate, why, in words: its
/// lowest rate probed and the attainment there, the part of the SLO that
/// binds and where the TTFT went, what the trace's shape does, and what to
/// try next. Empty when every simulated layout sustained some rate.
pub fn unsustained(plan: &Plan) -> String {
    let q = &plan.question;
    let mut out = String::new();
    // Whether some layout's TTFT at its lowest rate went mostly to
    // queueing: then the trace's bursts, which scaling keeps, are to blame.
    let mut bursts_queue = false;
    for l in plan
        .layouts
        .iter()
        .filter(|l| l.refused.is_none() && l.max_rate_req_s.is_none())
    {
        let Some(low) = l
            .probes
            .iter()
            .min_by(|a, b| a.rate_req_s.total_cmp(&b.rate_req_s))
        else {
            out.push_str(&format!("- **{}** was not probed.\n", l.name));
            continue;
        };
        let (part, share) = low.binding();
        let bound = match part {
            "completion" => format!("{:.1} % of requests did not complete", 100.0 * share),
            "TTFT" => format!(
                "{:.1} % completed over its TTFT bound (TTFT p99 {})",
                100.0 * share,
                crate::table::duration_ms(low.ttft_ms_p99)
            ),
            "ITL" => format!(
                "{:.1} % completed over its ITL bound (TPOT p99 {})",
                100.0 * share,
                crate::table::duration_ms(low.tpot_ms_p99)
            ),
            _ => format!("{:.1} % completed over its E2E bound", 100.0 * share),
        };
        let queued = low
            .ttft_mostly
            .as_ref()
            .is_some_and(|(name, _)| name == crate::table::PHASES[0]);
        bursts_queue |= queued;
        let phase = match &low.ttft_mostly {
            Some((name, s)) if part == "TTFT" && !queued => format!(
                "; most of the TTFT went to {name} ({:.0} %), not to queueing, so the bound is tighter than this layout's TTFT without load",
                100.0 * s
            ),
            Some((name, s)) => format!("; most of the TTFT went to {name} ({:.0} %)", 100.0 * s),
            None => String::new(),
        };
        out.push_str(&format!(
            "- **{}** sustains no rate: at the lowest rate probed, {:.3} req/s ({:.3}× the trace's), {:.1} % of requests met the SLO ({:.0} % needed). The {part} bound binds: {bound}{phase}.\n",
            l.name,
            low.rate_req_s,
            low.speedup,
            100.0 * low.met_share,
            100.0 * q.attainment,
        ));
    }
    if out.is_empty() {
        return out;
    }
    let mut next = Vec::new();
    if q.arrivals == "trace" {
        if bursts_queue && q.max_arrivals_at_one_instant > 1 {
            out.push_str(&format!(
                "\nThe trace sends up to {} requests at one instant ({} requests at {} distinct times). Scaling its arrival times keeps those bursts at every rate, so even a slow replay queues them behind each other.\n",
                q.max_arrivals_at_one_instant, q.requests, q.arrival_instants
            ));
        }
        next.push(
            "`--arrivals poisson` (the trace's requests in order, at seeded Poisson arrivals)"
                .to_string(),
        );
    }
    next.push(format!("a looser SLO than {}", q.slo));
    next.push("more GPUs for the layout (`--vary-nodes`, `--vary-parallel`)".to_string());
    out.push_str(&format!("\nTo find a rate, try {}.\n", next.join(", or ")));
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
    let unsustained = unsustained(plan);
    if !unsustained.is_empty() {
        doc.text(format!(
            "## Layouts that sustain no rate\n\n{unsustained}\n"
        ));
    }
    for l in &plan.layouts {
        if let Some(reason) = &l.refused {
            doc.text(format!("- `{}` was not simulated: {reason}\n", l.name));
        }
    }
    let deploy = what_to_deploy(plan);
    if !deploy.is_empty() {
        doc.text(format!("## What to deploy\n\n{deploy}\n"));
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
            y_label: "TTFT p99".into(),
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
        "attainment_vs_rate",
        plot::line_chart(&LineChart {
            title: "Requests meeting the SLO against request rate".into(),
            x_label: "requests per second".into(),
            y_label: "requests meeting the SLO".into(),
            y_unit: plot::Unit::Share,
            series: curve(|p| p.met_share),
            h_line: Some((
                q.attainment,
                format!("{:.0} % needed", 100.0 * q.attainment),
            )),
            ..LineChart::default()
        }),
    );
    doc.plot(
        "ttft_vs_rate",
        plot::line_chart(&LineChart {
            title: "TTFT p99 against request rate".into(),
            x_label: "requests per second".into(),
            y_label: "TTFT p99".into(),
            y_unit: plot::Unit::Ms,
            log_y: true,
            series: curve(|p| p.ttft_ms_p99),
            h_line: slo
                .and_then(|s| s.ttft_ms)
                .map(|v| (v, format!("SLO {}", crate::table::duration_ms(v)))),
            ..LineChart::default()
        }),
    );
    doc.plot(
        "tpot_vs_rate",
        plot::line_chart(&LineChart {
            title: "TPOT p99 (each request's mean inter-token latency) against request rate".into(),
            x_label: "requests per second".into(),
            y_label: "TPOT p99".into(),
            y_unit: plot::Unit::Ms,
            log_y: true,
            series: curve(|p| p.tpot_ms_p99),
            h_line: slo
                .and_then(|s| s.itl_ms)
                .map(|v| (v, format!("SLO {}", crate::table::duration_ms(v)))),
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
                    over_ttft_share: 0.0,
                    over_itl_share: 0.0,
                    over_e2e_share: 0.0,
                    ttft_mostly: None,
                })
                .into_iter()
                .collect(),
            deploy: Default::default(),
            deploy_refused: None,
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
                arrival_instants: 224,
                max_arrivals_at_one_instant: 19,
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
    fn the_best_ranked_layout_with_an_llm_d_form_is_the_one_to_deploy() {
        let mut best = layout(0, 8, Some(10.0), 100.0);
        best.deploy_refused = Some("pools[0].parallel.pp: 4 — too few GPUs".into());
        let mut second = layout(1, 8, Some(8.0), 100.0);
        second.deploy.insert("ms-values.yaml".into(), "x".into());
        let none = layout(2, 8, None, 100.0);
        let p = plan(vec![none, second, best], None);
        let (chosen, skipped) = p.deployable();
        assert_eq!(chosen.map(|l| l.index), Some(1));
        assert_eq!(skipped.iter().map(|l| l.index).collect::<Vec<_>>(), [0]);
        let text = what_to_deploy(&p);
        assert!(
            text.starts_with("**l1** (1 nodes, 8 GPUs) sustains 8.00 req/s"),
            "{text}"
        );
        assert!(
            text.contains("`l0` ranks higher but has no llm-d chart form: pools[0].parallel.pp"),
            "{text}"
        );
        // Nothing sustained: nothing to deploy, nothing said.
        assert_eq!(
            what_to_deploy(&plan(vec![layout(0, 8, None, 1.0)], None)),
            ""
        );
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

    #[test]
    fn a_layout_that_sustains_nothing_is_not_ranked_and_says_why() {
        // l1's probes at 4, 2 and 1 req/s all failed; at 1 req/s (1/8 of
        // the trace's rate) 42 % met the SLO: 50 % were over the TTFT
        // bound, 10 % over ITL, 5 % did not complete, and 71 % of the TTFT
        // was spent prefilling.
        let mut stuck = layout(1, 8, None, 0.0);
        stuck.probes = [4.0, 2.0, 1.0]
            .into_iter()
            .map(|rate| Probe {
                speedup: rate / 8.0,
                rate_req_s: rate,
                met_share: 0.42,
                completed_share: 0.95,
                ttft_ms_p99: 3_324.0,
                itl_ms_p99: 40.0,
                tpot_ms_p99: 38.0,
                output_tokens_per_s: 1.0,
                sustained: false,
                over_ttft_share: 0.5,
                over_itl_share: 0.1,
                over_e2e_share: 0.0,
                ttft_mostly: Some(("queueing".into(), 0.71)),
            })
            .collect();
        let mut p = plan(vec![layout(0, 8, Some(8.0), 100.0), stuck], None);
        p.question.slo = "TTFT ≤ 100 ms".into();
        let table = ranking_table(&p);
        assert!(table.contains("| 1 | l0 |"), "{table}");
        assert!(!table.contains("l1"), "{table}");
        let why = unsustained(&p);
        assert!(
            why.contains("- **l1** sustains no rate: at the lowest rate probed, 1.000 req/s (0.125× the trace's), 42.0 % of requests met the SLO (90 % needed). The TTFT bound binds: 50.0 % completed over its TTFT bound (TTFT p99 3.3 s); most of the TTFT went to queueing (71 %)."),
            "{why}"
        );
        assert!(
            why.contains("up to 19 requests at one instant (1 requests at 224 distinct times)"),
            "{why}"
        );
        assert!(why.contains("`--arrivals poisson`"), "{why}");
        assert!(why.contains("a looser SLO than TTFT ≤ 100 ms"), "{why}");
        // Prefilling, not queueing: the bound is below the unloaded TTFT,
        // and the trace's bursts are not the cause.
        for probe in &mut p.layouts[1].probes {
            probe.ttft_mostly = Some(("prefill".into(), 0.71));
        }
        let why = unsustained(&p);
        assert!(why.contains("most of the TTFT went to prefill (71 %), not to queueing, so the bound is tighter than this layout's TTFT without load."), "{why}");
        assert!(!why.contains("instant"), "{why}");
        // Under Poisson arrivals there are no bursts to speak of.
        p.question.arrivals = "poisson".into();
        let why = unsustained(&p);
        assert!(
            !why.contains("--arrivals poisson") && !why.contains("instant"),
            "{why}"
        );
        // Every layout sustained something: nothing to say.
        p.layouts.pop();
        assert_eq!(unsustained(&p), "");
        // The report has the section and the attainment plot.
        let p = plan(
            vec![layout(0, 8, Some(8.0), 100.0), layout(1, 8, None, 0.0)],
            None,
        );
        let doc = plan_report(&p);
        assert!(doc.markdown().contains("## Layouts that sustain no rate"));
        assert!(
            doc.plots()
                .iter()
                .any(|(name, _)| *name == "attainment_vs_rate")
        );
    }

    #[test]
    fn the_binding_part_is_the_one_most_requests_missed_by() {
        let mut probe = layout(0, 8, Some(1.0), 1.0).probes.remove(0);
        (
            probe.over_ttft_share,
            probe.over_itl_share,
            probe.over_e2e_share,
        ) = (0.1, 0.3, 0.2);
        probe.completed_share = 0.9;
        assert_eq!(probe.binding(), ("ITL", 0.3));
        probe.completed_share = 0.6;
        assert_eq!(probe.binding().0, "completion");
        probe.completed_share = 1.0;
        probe.over_e2e_share = 0.5;
        assert_eq!(probe.binding(), ("E2E", 0.5));
    }
}
