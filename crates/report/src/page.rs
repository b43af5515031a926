//! Reports: a document is Markdown text and plots in order. It renders as
//! `report.md` (plots linked as `plots/<name>.svg`) and as a
//! self-contained `report.html` (the same text, plots inlined as SVG, no
//! script, no network).

use crate::plot::{self, LineChart, StackedBars};
use crate::series::{PoolMetric, PoolSeries};
use crate::table::{self, ComparedRun};
use crate::{Metric, Summary};

/// One piece of a report.
#[derive(Clone, Debug)]
pub enum Block {
    Markdown(String),
    /// A plot: file stem and SVG.
    Plot {
        name: String,
        svg: String,
    },
}

/// A report, ready to render.
#[derive(Clone, Debug, Default)]
pub struct Document {
    pub title: String,
    pub blocks: Vec<Block>,
}

impl Document {
    pub fn new(title: impl Into<String>) -> Document {
        Document {
            title: title.into(),
            blocks: Vec::new(),
        }
    }

    pub fn text(&mut self, markdown: impl Into<String>) {
        self.blocks.push(Block::Markdown(markdown.into()));
    }

    /// Adds a plot, or says in the text why it could not be drawn.
    pub fn plot(&mut self, name: &str, svg: Result<String, String>) {
        match svg {
            Ok(svg) => self.blocks.push(Block::Plot {
                name: name.to_string(),
                svg,
            }),
            // A plot with nothing to draw is a sentence, not empty axes.
            Err(e) => match e.strip_prefix(plot::NO_DATA) {
                Some(why) => self.text(format!("_{why}_\n")),
                None => self.text(format!("_(plot `{name}` could not be drawn: {e})_\n")),
            },
        }
    }

    /// The plots as (file stem, SVG), for `plots/`.
    pub fn plots(&self) -> Vec<(&str, &str)> {
        self.blocks
            .iter()
            .filter_map(|b| match b {
                Block::Plot { name, svg } => Some((name.as_str(), svg.as_str())),
                Block::Markdown(_) => None,
            })
            .collect()
    }

    pub fn markdown(&self) -> String {
        let mut out = format!("# {}\n\n", self.title);
        for block in &self.blocks {
            match block {
                Block::Markdown(text) => {
                    out.push_str(text);
                    if !text.ends_with("\n\n") {
                        out.push('\n');
                    }
                }
                Block::Plot { name, .. } => {
                    out.push_str(&format!("![{name}](plots/{name}.svg)\n\n"));
                }
            }
        }
        out
    }

    pub fn html(&self) -> String {
        let mut body = format!("<h1>{}</h1>\n", escape(&self.title));
        for block in &self.blocks {
            match block {
                Block::Markdown(text) => body.push_str(&markdown_to_html(text)),
                Block::Plot { name, svg } => {
                    body.push_str(&format!(
                        "<figure id=\"{}\">{}</figure>\n",
                        escape(name),
                        svg
                    ));
                }
            }
        }
        format!(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style></head>\n<body>\n{body}</body></html>\n",
            escape(&self.title)
        )
    }
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}table{border-collapse:collapse;margin:1em 0;font-size:14px}td,th{border:1px solid #ccc;padding:3px 8px}td{text-align:right}td:first-child{text-align:left}th{background:#f3f3f3}figure{margin:1em 0}code{background:#f3f3f3;padding:0 3px}h2{border-bottom:1px solid #ddd;padding-bottom:4px}pre{white-space:pre-wrap;font-size:13px}";

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `**bold**`, `` `code` `` and `_italic_` inside a line (already escaped).
fn inline(text: &str) -> String {
    let mut out = String::new();
    let mut bold = false;
    let mut code = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '`' => {
                out.push_str(if code { "</code>" } else { "<code>" });
                code = !code;
            }
            '*' if !code && chars.peek() == Some(&'*') => {
                chars.next();
                out.push_str(if bold { "</strong>" } else { "<strong>" });
                bold = !bold;
            }
            _ => out.push(c),
        }
    }
    if code {
        out.push_str("</code>");
    }
    if bold {
        out.push_str("</strong>");
    }
    out
}

/// The Markdown this crate writes (headings, tables, lists, paragraphs,
/// fenced code) as HTML. Not a general Markdown parser.
pub fn markdown_to_html(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_end();
        if t.is_empty() {
            continue;
        }
        if t.starts_with("```") {
            out.push_str("<pre>");
            for l in lines.by_ref() {
                if l.starts_with("```") {
                    break;
                }
                out.push_str(&escape(l));
                out.push('\n');
            }
            out.push_str("</pre>\n");
        } else if let Some(h) = t.strip_prefix("### ") {
            out.push_str(&format!("<h3>{}</h3>\n", inline(&escape(h))));
        } else if let Some(h) = t.strip_prefix("## ") {
            out.push_str(&format!("<h2>{}</h2>\n", inline(&escape(h))));
        } else if let Some(h) = t.strip_prefix("# ") {
            out.push_str(&format!("<h1>{}</h1>\n", inline(&escape(h))));
        } else if t.starts_with('|') {
            out.push_str("<table>\n");
            let mut first = true;
            let mut row = Some(t.to_string());
            while let Some(r) = row {
                let cells: Vec<&str> = r.trim().trim_matches('|').split('|').collect();
                let separator = cells
                    .iter()
                    .all(|c| c.trim().chars().all(|ch| matches!(ch, '-' | ':')));
                if !separator {
                    let tag = if first { "th" } else { "td" };
                    out.push_str("<tr>");
                    for c in cells {
                        out.push_str(&format!("<{tag}>{}</{tag}>", inline(&escape(c.trim()))));
                    }
                    out.push_str("</tr>\n");
                    first = false;
                }
                row = lines
                    .peek()
                    .filter(|l| l.trim_start().starts_with('|'))
                    .map(|l| l.to_string());
                if row.is_some() {
                    lines.next();
                }
            }
            out.push_str("</table>\n");
        } else if t.starts_with("- ") {
            out.push_str("<ul>\n");
            let mut item = Some(t.to_string());
            while let Some(i) = item {
                out.push_str(&format!("<li>{}</li>\n", inline(&escape(&i[2..]))));
                item = lines
                    .peek()
                    .filter(|l| l.starts_with("- "))
                    .map(|l| l.to_string());
                if item.is_some() {
                    lines.next();
                }
            }
            out.push_str("</ul>\n");
        } else {
            let mut para = inline(&escape(t));
            while let Some(next) = lines.peek().filter(|l| {
                let l = l.trim();
                !l.is_empty() && !l.starts_with('|') && !l.starts_with('#') && !l.starts_with("- ")
            }) {
                para.push(' ');
                para.push_str(&inline(&escape(next.trim())));
                lines.next();
            }
            out.push_str(&format!("<p>{para}</p>\n"));
        }
    }
    out
}

/// CDF plot of one latency for several runs.
pub fn cdf_plot(
    title: &str,
    series: Vec<(String, Vec<(f64, f64)>)>,
    slo_ms: Option<f64>,
) -> Result<String, String> {
    plot::line_chart(&LineChart {
        title: title.to_string(),
        x_label: "latency".into(),
        y_label: "requests at or below it".into(),
        x_unit: plot::Unit::Ms,
        y_unit: plot::Unit::Share,
        series,
        h_line: None,
        v_line: slo_ms.map(|v| (v, format!("SLO {}", table::duration_ms(v)))),
        log_x: true,
        log_y: false,
    })
}

/// A per-pool series plot (one line per run and pool).
pub fn pool_plot(
    title: &str,
    y_label: &str,
    y_unit: plot::Unit,
    runs: &[(&str, &[PoolSeries])],
    metric: PoolMetric,
) -> Result<String, String> {
    let mut series = Vec::new();
    for (run, pools) in runs {
        for pool in pools.iter() {
            let name = if runs.len() > 1 {
                format!("{run}/{}", pool.name)
            } else {
                pool.name.clone()
            };
            series.push((name, pool.line(metric)));
        }
    }
    plot::line_chart(&LineChart {
        title: title.to_string(),
        x_label: "simulated time".into(),
        x_unit: plot::Unit::S,
        y_label: y_label.to_string(),
        y_unit,
        series,
        ..LineChart::default()
    })
}

/// Phase breakdown bars: where a mean request's time went, per run.
pub fn phase_plot(names: Vec<String>, summaries: &[&Summary]) -> Result<String, String> {
    let phases: Vec<[f64; 6]> = summaries.iter().map(|s| table::phases_ms(s)).collect();
    plot::stacked_bars(&StackedBars {
        title: "Where a mean request's time goes".into(),
        y_label: "time per request".into(),
        categories: names,
        parts: table::PHASES
            .iter()
            .enumerate()
            .map(|(i, p)| (p.to_string(), phases.iter().map(|ph| ph[i]).collect()))
            .collect(),
    })
}

/// The report of one run.
pub fn run_report(
    summary: &Summary,
    text: &str,
    cdfs: &[(Metric, Vec<(f64, f64)>)],
    series: &[PoolSeries],
) -> Document {
    let mut doc = Document::new(format!(
        "pdsim run: {} on {}",
        summary.run.deployment, summary.run.scenario
    ));
    doc.text(format!("```\n{text}```\n\n"));
    doc.text(format!(
        "## Pools\n\n{}\n",
        table::pools_markdown(&[ComparedRun {
            deployment: summary.run.deployment.clone(),
            file: String::new(),
            summaries: vec![summary.clone()],
            ttft_cdf_ms: Vec::new(),
            itl_cdf_ms: Vec::new(),
            e2e_cdf_ms: Vec::new(),
            series: Vec::new(),
        }])
    ));
    if !summary.stages.is_empty() {
        doc.text(format!("## Load stages\n\n{}\n", stages_markdown(summary)));
    }
    doc.text("## Latency distributions\n\n");
    let slo = summary
        .goodput
        .as_ref()
        .and_then(|g| g.by_class.values().next())
        .map(|c| c.slo);
    for (metric, cdf) in cdfs {
        let (name, title, line) = match metric {
            Metric::Ttft => (
                "ttft_cdf",
                "Time to first token",
                slo.and_then(|s| s.ttft_ms),
            ),
            Metric::Itl => ("itl_cdf", "Inter-token latency", slo.and_then(|s| s.itl_ms)),
            Metric::E2e => ("e2e_cdf", "End-to-end latency", slo.and_then(|s| s.e2e_ms)),
            _ => continue,
        };
        doc.plot(
            name,
            cdf_plot(
                title,
                vec![(summary.run.deployment.clone(), cdf.clone())],
                line,
            ),
        );
    }
    doc.text("## Where the time goes\n\n");
    doc.plot(
        "phases",
        phase_plot(vec![summary.run.deployment.clone()], &[summary]),
    );
    pool_section(&mut doc, &[(summary.run.deployment.as_str(), series)]);
    doc
}

/// The per-stage table of a run whose source has load stages: counts,
/// throughput, and TTFT, ITL and E2E mean and percentiles in milliseconds.
pub fn stages_markdown(summary: &Summary) -> String {
    let mut t = String::from(
        "| stage | rate (req/s) | duration (s) | sent | completed | rejected | aborted | req/s | output tok/s |",
    );
    let metrics = ["TTFT", "ITL", "E2E"];
    for m in metrics {
        for q in ["mean", "p50", "p90", "p99"] {
            t.push_str(&format!(" {m} {q} (ms) |"));
        }
    }
    t.push_str("\n|---|");
    t.push_str(&"---:|".repeat(8 + 12));
    t.push('\n');
    for st in &summary.stages {
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.2} | {:.0} |",
            st.index,
            st.rate_per_s,
            st.duration_s,
            st.requests_sent,
            st.completed,
            st.rejected,
            st.aborted,
            st.requests_per_s,
            st.output_tokens_per_s
        ));
        for l in [&st.ttft_ms, &st.itl_ms, &st.e2e_ms] {
            for v in [l.mean, l.p50, l.p90, l.p99] {
                t.push_str(&format!(" {v:.2} |"));
            }
        }
        t.push('\n');
    }
    t
}

/// Per-pool time-series plots.
pub fn pool_section(doc: &mut Document, runs: &[(&str, &[PoolSeries])]) {
    if runs.iter().all(|(_, s)| s.iter().all(|p| p.is_empty())) {
        return;
    }
    doc.text("## Pools over time\n\nOne sample per simulated second, averaged in groups on long runs; an idle stretch counts as its seconds at its idle value. `timeseries.csv` has every engine core at every second the cluster works, and once at the start of each idle stretch.\n\n");
    doc.plot(
        "kv_usage",
        pool_plot(
            "KV cache usage per pool (mean over engines)",
            "KV blocks in use",
            plot::Unit::Share,
            runs,
            PoolMetric::KvUsage,
        ),
    );
    doc.plot(
        "queue_depth",
        pool_plot(
            "Requests waiting per pool",
            "requests",
            plot::Unit::Count,
            runs,
            PoolMetric::Waiting,
        ),
    );
    doc.plot(
        "busy",
        pool_plot(
            "Engine busy share per pool",
            "time stepping",
            plot::Unit::Share,
            runs,
            PoolMetric::BusyShare,
        ),
    );
}

/// The report of a comparison.
pub fn compare_report(
    runs: &[ComparedRun],
    scenario: &str,
    trace: &str,
    seeds: u64,
    slo: Option<&crate::Slo>,
) -> Document {
    let mut doc = Document::new(format!("pdsim compare on {scenario}"));
    doc.text(format!(
        "Trace `{trace}`, {seeds} seed(s){}. The same requests go through every deployment. Cells give the mean over seeds, the range over seeds in brackets when it is not a single value, and the change against the first deployment (`{}`).\n\n",
        slo.map(|s| format!(", SLO {}", s.describe())).unwrap_or_default(),
        runs.first().map(|r| r.deployment.as_str()).unwrap_or("")
    ));
    doc.text(format!("## Verdict\n\n{}\n", table::verdict(runs)));
    doc.text(format!(
        "## Side by side\n\n{}\n",
        table::markdown_table(runs)
    ));
    doc.text(format!(
        "## Per-pool utilisation (first seed)\n\n{}\n",
        table::pools_markdown(runs)
    ));
    doc.text("## Where the time goes\n\nMean time per completed request in each phase: the first five add up to the mean time to first token, `decode` is the rest of the request.\n\n");
    let phases: Vec<[f64; 6]> = runs
        .iter()
        .filter_map(|r| r.summaries.first())
        .map(table::phases_ms)
        .collect();
    // One unit for the table, the one that suits its largest phase.
    let (unit, size, decimals) =
        table::duration_column(phases.iter().flatten().copied().fold(0.0, f64::max), 1);
    let mut phase_table = String::from("| deployment |");
    for p in table::PHASES {
        phase_table.push_str(&format!(" {p} ({unit}) |"));
    }
    phase_table.push_str("\n|---|");
    phase_table.push_str(&"---:|".repeat(table::PHASES.len()));
    phase_table.push('\n');
    for r in runs {
        if let Some(s) = r.summaries.first() {
            phase_table.push_str(&format!("| {} |", r.deployment));
            for v in table::phases_ms(s) {
                phase_table.push_str(&format!(" {:.decimals$} |", v / size));
            }
            phase_table.push('\n');
        }
    }
    doc.text(format!("{phase_table}\n"));
    let firsts: Vec<&Summary> = runs.iter().filter_map(|r| r.summaries.first()).collect();
    doc.plot(
        "phases",
        phase_plot(runs.iter().map(|r| r.deployment.clone()).collect(), &firsts),
    );
    doc.text("## Latency distributions (first seed)\n\n");
    let pick = |f: fn(&ComparedRun) -> &Vec<(f64, f64)>| {
        runs.iter()
            .map(|r| (r.deployment.clone(), f(r).clone()))
            .collect::<Vec<_>>()
    };
    doc.plot(
        "ttft_cdf",
        cdf_plot(
            "Time to first token",
            pick(|r| &r.ttft_cdf_ms),
            slo.and_then(|s| s.ttft_ms),
        ),
    );
    doc.plot(
        "itl_cdf",
        cdf_plot(
            "Inter-token latency",
            pick(|r| &r.itl_cdf_ms),
            slo.and_then(|s| s.itl_ms),
        ),
    );
    doc.plot(
        "e2e_cdf",
        cdf_plot(
            "End-to-end latency",
            pick(|r| &r.e2e_cdf_ms),
            slo.and_then(|s| s.e2e_ms),
        ),
    );
    let series: Vec<(&str, &[PoolSeries])> = runs
        .iter()
        .map(|r| (r.deployment.as_str(), r.series.as_slice()))
        .collect();
    pool_section(&mut doc, &series);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_tables_lists_and_code_become_html() {
        let html = markdown_to_html(
            "## Side\n\n| a | b |\n|---|---:|\n| x<y | **1** |\n\n- one `k`\n- two\n\nplain\ntext\n",
        );
        assert!(html.contains("<h2>Side</h2>"));
        assert!(html.contains("<tr><th>a</th><th>b</th></tr>"));
        assert!(html.contains("<td>x&lt;y</td><td><strong>1</strong></td>"));
        assert!(html.contains("<li>one <code>k</code></li>"));
        assert!(html.contains("<p>plain text</p>"));
        assert!(!html.contains("---"));
    }

    #[test]
    fn documents_inline_plots_in_html_and_link_them_in_markdown() {
        let mut doc = Document::new("t");
        doc.text("hello\n");
        doc.plot("p", Ok("<svg>x</svg>".into()));
        doc.plot("q", Err("axis overflow".into()));
        // A plot with nothing to draw is a sentence, neither empty axes
        // nor an error.
        doc.plot(
            "r",
            plot::line_chart(&LineChart {
                title: "Inter-token latency".into(),
                series: vec![("run".into(), Vec::new())],
                ..LineChart::default()
            }),
        );
        assert!(doc.markdown().contains("![p](plots/p.svg)"));
        assert!(doc.markdown().contains("could not be drawn: axis overflow"));
        assert!(
            doc.markdown()
                .contains("_Inter-token latency: nothing to plot, this run has no value for it._"),
            "{}",
            doc.markdown()
        );
        let html = doc.html();
        assert!(html.contains("<figure id=\"p\"><svg>x</svg></figure>"));
        assert!(
            !html.contains("http"),
            "a self-contained page links nothing"
        );
        assert_eq!(doc.plots(), vec![("p", "<svg>x</svg>")]);
    }
}
