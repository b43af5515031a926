//! SVG plots (plotters' SVG backend, no system fonts: the browser draws the
//! text). Every plot is a `String` of SVG, so reports inline them and need
//! no network or side file. Coordinates are whole pixels, so the same data
//! gives the same bytes on every machine.

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// Colour-blind-safe palette (Okabe–Ito), then four darker tones, in
/// series order.
const PALETTE: [RGBColor; 12] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(240, 228, 66),
    RGBColor(0, 0, 0),
    RGBColor(128, 128, 128),
    RGBColor(136, 34, 85),
    RGBColor(68, 119, 34),
    RGBColor(51, 34, 136),
];

pub fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

const SIZE: (u32, u32) = (760, 400);

/// A line chart: named series of (x, y) points, an optional horizontal line
/// (an SLO), and optionally a logarithmic x axis.
#[derive(Clone, Debug, Default)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// A horizontal reference line and its label.
    pub h_line: Option<(f64, String)>,
    /// A vertical reference line and its label.
    pub v_line: Option<(f64, String)>,
    pub log_x: bool,
    pub log_y: bool,
}

fn bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        return (lo - 0.5, hi + 0.5);
    }
    (lo, hi)
}

fn err(e: impl std::fmt::Display) -> String {
    format!("plot: {e}")
}

/// A legend key: a short line in the series' style.
fn line_key(style: ShapeStyle) -> impl Fn((i32, i32)) -> PathElement<(i32, i32)> {
    move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style)
}

/// The legend box every chart uses.
fn draw_legend<'a, DB: DrawingBackend + 'a>(
    c: &mut ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    position: SeriesLabelPosition,
) -> Result<(), String> {
    c.configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .draw()
        .map_err(err)
}

/// Draws a line chart as SVG.
pub fn line_chart(chart: &LineChart) -> Result<String, String> {
    let fx = |x: f64| {
        if chart.log_x { x.max(1e-3).log10() } else { x }
    };
    let fy = |y: f64| {
        if chart.log_y { y.max(1e-3).log10() } else { y }
    };
    let xs = chart
        .series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(x, _)| fx(*x)))
        .chain(chart.v_line.iter().map(|(x, _)| fx(*x)));
    let (x0, x1) = bounds(xs);
    let ys = chart
        .series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, y)| fy(*y)))
        .chain(chart.h_line.iter().map(|(y, _)| fy(*y)))
        .chain(if chart.log_y { None } else { Some(0.0) });
    let (y0, y1) = bounds(ys);
    let y1 = y1 + (y1 - y0) * 0.05;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut c = ChartBuilder::on(&root)
            .caption(&chart.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(err)?;
        let log_x = chart.log_x;
        let x_fmt = move |v: &f64| {
            if log_x {
                short(10f64.powf(*v))
            } else {
                short(*v)
            }
        };
        let log_y = chart.log_y;
        let y_fmt = move |v: &f64| {
            if log_y {
                short(10f64.powf(*v))
            } else {
                short(*v)
            }
        };
        c.configure_mesh()
            .x_desc(chart.x_label.as_str())
            .y_desc(chart.y_label.as_str())
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(err)?;
        for (i, (name, points)) in chart.series.iter().enumerate() {
            let style = color(i).stroke_width(2);
            c.draw_series(LineSeries::new(
                points.iter().map(|(x, y)| (fx(*x), fy(*y))),
                style,
            ))
            .map_err(err)?
            .label(name.as_str())
            .legend(line_key(style));
        }
        // The reference lines (an SLO), across the whole plot.
        let references = chart
            .h_line
            .iter()
            .map(|(y, label)| ([(x0, fy(*y)), (x1, fy(*y))], label))
            .chain(
                chart
                    .v_line
                    .iter()
                    .map(|(x, label)| ([(fx(*x), y0), (fx(*x), y1)], label)),
            );
        for (ends, label) in references {
            let style = RED.stroke_width(1);
            c.draw_series(LineSeries::new(ends, style))
                .map_err(err)?
                .label(label.as_str())
                .legend(line_key(style));
        }
        if !chart.series.is_empty() {
            draw_legend(&mut c, SeriesLabelPosition::LowerRight)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Stacked vertical bars: one bar per category, one stack segment
/// per named part (e.g. where the time to first token went).
#[derive(Clone, Debug, Default)]
pub struct StackedBars {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    /// (part name, value per category).
    pub parts: Vec<(String, Vec<f64>)>,
}

pub fn stacked_bars(bars: &StackedBars) -> Result<String, String> {
    let n = bars.categories.len().max(1);
    let totals: Vec<f64> = (0..n)
        .map(|i| {
            bars.parts
                .iter()
                .map(|(_, v)| v.get(i).copied().unwrap_or(0.0))
                .sum()
        })
        .collect();
    let top = totals.iter().copied().fold(0.0, f64::max).max(1e-9) * 1.08;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut c = ChartBuilder::on(&root)
            .caption(&bars.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..top)
            .map_err(err)?;
        let names = bars.categories.clone();
        let x_fmt = move |v: &f64| {
            let i = v.round();
            if (v - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        };
        c.configure_mesh()
            .disable_x_mesh()
            .x_labels(n * 2 + 1)
            .x_label_formatter(&x_fmt)
            .y_desc(bars.y_label.as_str())
            .y_label_formatter(&|v| short(*v))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(err)?;
        let mut base = vec![0.0; n];
        for (p, (name, values)) in bars.parts.iter().enumerate() {
            let style = color(p).filled();
            let rects: Vec<Rectangle<(f64, f64)>> = (0..n)
                .map(|i| {
                    let v = values.get(i).copied().unwrap_or(0.0);
                    let r = Rectangle::new(
                        [(i as f64 - 0.3, base[i]), (i as f64 + 0.3, base[i] + v)],
                        style,
                    );
                    base[i] += v;
                    r
                })
                .collect();
            c.draw_series(rects)
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], style));
        }
        draw_legend(&mut c, SeriesLabelPosition::UpperRight)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// Labelled points, with the ones on a front joined by a line.
#[derive(Clone, Debug, Default)]
pub struct Scatter {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// (label, x, y, on the front).
    pub points: Vec<(String, f64, f64, bool)>,
}

pub fn scatter(s: &Scatter) -> Result<String, String> {
    let (x0, x1) = bounds(s.points.iter().map(|p| p.1).chain([0.0]));
    let (y0, y1) = bounds(s.points.iter().map(|p| p.2).chain([0.0]));
    let (x1, y1) = (x1 + (x1 - x0) * 0.15, y1 + (y1 - y0) * 0.1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut c = ChartBuilder::on(&root)
            .caption(&s.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(err)?;
        c.configure_mesh()
            .x_desc(s.x_label.as_str())
            .y_desc(s.y_label.as_str())
            .x_label_formatter(&|v| short(*v))
            .y_label_formatter(&|v| short(*v))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(err)?;
        let mut front: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|p| p.3)
            .map(|p| (p.1, p.2))
            .collect();
        front.sort_by(|a, b| a.0.total_cmp(&b.0));
        if front.len() > 1 {
            let style = color(1).stroke_width(2);
            c.draw_series(LineSeries::new(front, style))
                .map_err(err)?
                .label("Pareto front")
                .legend(line_key(style));
        }
        c.draw_series(s.points.iter().map(|(label, x, y, on)| {
            let fill = if *on { color(1) } else { color(0) };
            EmptyElement::at((*x, *y))
                + Circle::new((0, 0), 5, fill.filled())
                + Text::new(label.clone(), (7, -14), ("sans-serif", 12))
        }))
        .map_err(err)?;
        if s.points.iter().filter(|p| p.3).count() > 1 {
            draw_legend(&mut c, SeriesLabelPosition::LowerRight)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A short axis label: at most three significant digits, k/M suffixes.
pub fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        let m = format!("{:.3}", v / 1e6);
        format!("{}M", m.trim_end_matches('0').trim_end_matches('.'))
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else if (v * 100.0).fract().abs() < 1e-9 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_their_labels_and_are_reproducible() {
        let chart = LineChart {
            title: "TTFT CDF".into(),
            x_label: "ms".into(),
            y_label: "share".into(),
            series: vec![("1p3d".into(), vec![(1.0, 0.0), (10.0, 0.5), (100.0, 1.0)])],
            h_line: Some((0.99, "p99".into())),
            v_line: None,
            log_x: true,
            log_y: false,
        };
        let a = line_chart(&chart).unwrap();
        assert!(a.starts_with("<svg"));
        assert!(a.contains("TTFT CDF") && a.contains("1p3d") && a.contains("p99"));
        assert_eq!(a, line_chart(&chart).unwrap());
        let bars = stacked_bars(&StackedBars {
            title: "phases".into(),
            y_label: "ms".into(),
            categories: vec!["a".into(), "b".into()],
            parts: vec![
                ("queue".into(), vec![1.0, 2.0]),
                ("prefill".into(), vec![3.0, 0.5]),
            ],
        })
        .unwrap();
        assert!(bars.contains("queue") && bars.contains("<rect"));
        let sc = scatter(&Scatter {
            title: "front".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            points: vec![("a".into(), 1.0, 2.0, true), ("b".into(), 2.0, 1.0, false)],
        })
        .unwrap();
        assert!(sc.contains("<circle"), "{sc}");
        assert!(sc.contains(">a<") || sc.contains(">\na\n<"), "{sc}");
    }

    #[test]
    fn empty_and_flat_data_still_draw() {
        let chart = LineChart {
            series: vec![("flat".into(), vec![(0.0, 1.0), (0.0, 1.0)])],
            ..LineChart::default()
        };
        assert!(line_chart(&chart).is_ok());
        assert!(line_chart(&LineChart::default()).is_ok());
    }

    #[test]
    fn short_labels() {
        assert_eq!(short(0.0), "0");
        assert_eq!(short(12345.0), "12k");
        assert_eq!(short(2.5e6), "2.5M");
        assert_eq!(short(0.25), "0.25");
        assert_eq!(short(0.125), "0.125");
        assert_eq!(short(42.0), "42.0");
    }
}
