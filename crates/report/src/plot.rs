//! SVG plots (plotters' SVG backend, no system fonts: the browser draws the
//! text). Every plot is a `String` of SVG, so reports inline them and need
//! no network or side file. Coordinates are whole pixels, so the same data
//! gives the same bytes on every machine.
//!
//! Axes are laid out here rather than by plotters' defaults, so a person
//! reads them at a glance: ticks at round values (1, 2, 5 times a power of
//! ten; on a duration axis also 30 s, 1 min, 1 h), every label of an axis
//! with the same number of decimals, durations in the unit that suits them
//! (as the tables print them, [`crate::table::duration_ms`]), shares in
//! percent (as the tables print them), whole numbers on a count axis, and
//! the legend beside the plot, never over the data.

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::prelude::*;
use std::ops::Range;

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

/// The plotting area's size in pixels; a legend adds its width to the right.
const PLOT_SIZE: (u32, u32) = (720, 400);

/// Where an error message says there was nothing to draw (no point in any
/// series): the report prints the rest of the message as a sentence in
/// place of an empty plot.
pub const NO_DATA: &str = "no data: ";

/// What an axis's numbers are, so the plot shows them in a unit that suits
/// them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unit {
    /// Plain numbers (requests per second), shown as they are.
    #[default]
    Number,
    /// Things counted (requests waiting): ticks only at whole numbers.
    Count,
    /// A share from 0 to 1, shown in percent.
    Share,
    /// Durations given in milliseconds.
    Ms,
    /// Durations given in seconds.
    S,
}

/// A line chart: named series of (x, y) points, an optional horizontal line
/// (an SLO), and optionally a logarithmic x or y axis. Labels name the
/// quantity; the axis adds its unit (and "log scale").
#[derive(Clone, Debug, Default)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub x_unit: Unit,
    pub y_unit: Unit,
    pub series: Vec<(String, Vec<(f64, f64)>)>,
    /// A horizontal reference line and its label.
    pub h_line: Option<(f64, String)>,
    /// A vertical reference line and its label.
    pub v_line: Option<(f64, String)>,
    pub log_x: bool,
    pub log_y: bool,
}

/// A display unit of durations: its name and how many milliseconds it is.
const DURATION_UNITS: [(&str, f64); 4] = [("ms", 1.0), ("s", 1e3), ("min", 60e3), ("h", 3600e3)];

/// The unit of a linear duration axis reaching `max_ms`: the table's unit
/// until ten of the next unit, so a 200-second run reads 0 to 200 s
/// rather than 0 to 3.4 min.
fn axis_duration_unit(max_ms: f64) -> (&'static str, f64) {
    if max_ms < 1e3 {
        DURATION_UNITS[0]
    } else if max_ms < 600e3 {
        DURATION_UNITS[1]
    } else if max_ms < 36000e3 {
        DURATION_UNITS[2]
    } else {
        DURATION_UNITS[3]
    }
}

/// Round durations in milliseconds, for the ticks of a logarithmic
/// duration axis: 1-2-5 below a minute, then the clock's own steps.
const ROUND_DURATIONS_MS: [f64; 34] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1e3,
    2e3, 5e3, 10e3, 20e3, 30e3, 60e3, 120e3, 300e3, 600e3, 1200e3, 1800e3, 3600e3, 7200e3, 18000e3,
    36000e3, 86400e3, 172800e3, 432000e3,
];

/// How many ticks an axis aims at.
const TICKS: f64 = 6.0;

/// One axis laid out: the plot's coordinate range (the log10 of the shown
/// value on a log axis), its ticks in the same coordinates, their labels,
/// and the unit the title gets.
#[derive(Clone, Debug, PartialEq)]
struct Axis {
    /// Multiplies a data value into the shown value (before any log).
    scale: f64,
    log: bool,
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    minor: Vec<f64>,
    labels: Vec<String>,
    /// The unit the axis title names, when one unit serves every tick.
    unit: Option<&'static str>,
}

impl Axis {
    /// Lays out an axis over data values `values`; `zero` keeps 0 in a
    /// linear axis's range; `headroom` widens the top by that share of the
    /// range, so a line along the highest value is not hidden by the frame.
    fn new(values: &[f64], unit: Unit, log: bool, zero: bool, headroom: f64) -> Axis {
        let finite = values
            .iter()
            .copied()
            .filter(|v| v.is_finite() && (!log || *v > 0.0));
        let (lo, hi) = finite.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
        let (lo, hi) = if lo.is_finite() {
            (lo, hi)
        } else if log {
            (1.0, 10.0)
        } else {
            (0.0, 1.0)
        };
        let to_ms = match unit {
            Unit::S => 1e3,
            _ => 1.0,
        };
        if log {
            return Axis::logarithmic(lo, hi, unit, to_ms);
        }
        let (name, scale) = match unit {
            Unit::Share => (Some("%"), 100.0),
            Unit::Ms | Unit::S => {
                let (name, ms) = axis_duration_unit(hi.abs().max(lo.abs()) * to_ms);
                (Some(name), to_ms / ms)
            }
            Unit::Number | Unit::Count => (None, 1.0),
        };
        let (mut lo, mut hi) = (lo * scale, hi * scale);
        if zero {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        if hi - lo < 1e-12 {
            let pad = if unit == Unit::Count {
                1.0
            } else {
                (hi.abs() * 0.1).max(0.5)
            };
            (lo, hi) = (lo - pad, hi + pad);
            if zero && lo < 0.0 && hi > 0.0 && values.iter().all(|v| *v >= 0.0) {
                lo = 0.0;
            }
        }
        let mut step = round_step((hi - lo) / TICKS);
        if unit == Unit::Count {
            step = step.max(1.0);
        }
        // With room above (a value axis): bounds rounded out to the step,
        // so the ticks span the data, then the room. Without (time along
        // x): the data's own bounds, no empty stretch after the run.
        let (lo, hi) = if headroom > 0.0 {
            let lo = (lo / step + 1e-9).floor() * step;
            let hi = (hi / step - 1e-9).ceil() * step;
            (lo, hi + (hi - lo) * headroom)
        } else {
            (lo, hi)
        };
        let first = (lo / step).ceil() as i64;
        let last = (hi / step + 1e-9).floor() as i64;
        let ticks: Vec<f64> = (first..=last).map(|i| i as f64 * step).collect();
        let minor_step = step / if mantissa(step) == 2.0 { 4.0 } else { 5.0 };
        let minor: Vec<f64> = if unit == Unit::Count && minor_step < 1.0 {
            Vec::new()
        } else {
            let first = (lo / minor_step).ceil() as i64;
            let last = (hi / minor_step + 1e-9).floor() as i64;
            (first..=last).map(|i| i as f64 * minor_step).collect()
        };
        let largest = ticks.iter().fold(0.0f64, |m, t| m.max(t.abs()));
        let labels = ticks
            .iter()
            .map(|t| linear_label(*t, step, largest))
            .collect();
        Axis {
            scale,
            log: false,
            lo,
            hi,
            ticks,
            minor,
            labels,
            unit: name,
        }
    }

    /// A logarithmic axis from `lo` to `hi` (data values, positive): ticks
    /// at round values, on a duration axis each labelled in its own unit.
    fn logarithmic(lo: f64, hi: f64, unit: Unit, to_ms: f64) -> Axis {
        let duration = matches!(unit, Unit::Ms | Unit::S);
        let scale = match unit {
            Unit::Share => 100.0,
            Unit::Ms | Unit::S => to_ms,
            Unit::Number | Unit::Count => 1.0,
        };
        let (mut a, mut b) = ((lo * scale).log10(), (hi * scale).log10());
        if b - a < 0.3 {
            // Less than a factor of two: widen to one, around the data.
            let mid = (a + b) / 2.0;
            (a, b) = (mid - 0.15, mid + 0.15);
        }
        // A little room either side, so the extreme points are off the frame.
        let pad = (b - a) * 0.02;
        let (a, b) = (a - pad, b + pad);
        let candidates: Vec<f64> = if duration {
            ROUND_DURATIONS_MS.to_vec()
        } else {
            (-6..=12)
                .flat_map(|d| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(d)))
                .collect()
        };
        let inside: Vec<f64> = candidates
            .into_iter()
            .filter(|v| (a..=b).contains(&v.log10()))
            .collect();
        // Thin to about `TICKS` ticks: the decades (and whole seconds,
        // minutes, hours) first, then the rest in order.
        let ticks_shown = if inside.len() as f64 > TICKS * 1.5 {
            let major: Vec<f64> = inside
                .iter()
                .copied()
                .filter(|v| {
                    if duration && *v >= 60e3 {
                        [60e3, 600e3, 3600e3, 36000e3, 86400e3].contains(v)
                    } else {
                        mantissa(*v) == 1.0
                    }
                })
                .collect();
            if major.len() as f64 > TICKS * 1.5 {
                let every = (major.len() as f64 / TICKS).ceil() as usize;
                major.into_iter().step_by(every).collect()
            } else {
                major
            }
        } else {
            inside.clone()
        };
        let minor: Vec<f64> = (a.floor() as i32..=b.ceil() as i32)
            .flat_map(|d| (1..10).map(move |m| (f64::from(m) * 10f64.powi(d)).log10()))
            .filter(|v| (a..=b).contains(v))
            .collect();
        let labels = ticks_shown
            .iter()
            .map(|v| {
                if duration {
                    duration_label(*v)
                } else {
                    trim(*v)
                }
            })
            .collect();
        Axis {
            scale,
            log: true,
            lo: a,
            hi: b,
            ticks: ticks_shown.iter().map(|v| v.log10()).collect(),
            minor: if (b - a) <= 4.0 { minor } else { Vec::new() },
            labels,
            unit: match unit {
                Unit::Share => Some("%"),
                _ => None,
            },
        }
    }

    /// A data value in plot coordinates.
    fn at(&self, v: f64) -> f64 {
        let shown = v * self.scale;
        if self.log {
            shown.max(1e-12).log10()
        } else {
            shown
        }
    }

    /// The plotters range with these ticks.
    fn range(&self) -> Ticked {
        Ticked {
            lo: self.lo,
            hi: self.hi,
            ticks: self.ticks.clone(),
            minor: self.minor.clone(),
        }
    }

    /// The label of the tick at `v` (plot coordinates).
    fn label(&self, v: f64) -> String {
        self.ticks
            .iter()
            .position(|t| (t - v).abs() < 1e-9 * (1.0 + t.abs()))
            .map(|i| self.labels[i].clone())
            .unwrap_or_default()
    }

    /// The axis title: the quantity, then its unit and scale.
    fn title(&self, name: &str) -> String {
        let mut parts: Vec<&str> = Vec::new();
        if let Some(u) = self.unit {
            parts.push(u);
        }
        if self.log {
            parts.push("log scale");
        }
        if parts.is_empty() || name.is_empty() {
            name.to_string()
        } else {
            format!("{name} ({})", parts.join(", "))
        }
    }
}

/// A plotters coordinate of `f64` from `lo` to `hi` whose mesh lines are
/// exactly `ticks` (labelled) and `minor` (light), where plotters' own
/// choice would put ticks at round values of the plot coordinate (on a log
/// axis, 10^1.2 = 15.8).
#[derive(Clone, Debug)]
struct Ticked {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    minor: Vec<f64>,
}

impl Ranged for Ticked {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    /// The linear map plotters' `RangedCoordf64` makes.
    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        if self.hi == self.lo {
            return (limit.1 - limit.0) / 2;
        }
        let logic_length = (v - self.lo) / (self.hi - self.lo);
        let actual_length = limit.1 - limit.0;
        if actual_length == 0 {
            return limit.1;
        }
        if logic_length.is_infinite() {
            return if logic_length.is_sign_positive() {
                limit.1
            } else {
                limit.0
            };
        }
        limit.0 + (actual_length as f64 * logic_length + 1e-3).floor() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            self.minor.clone()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Ticked {
    /// Never used: every chart gives its own label formatter.
    fn format(value: &f64) -> String {
        format!("{value}")
    }
}

/// The leading digit of a round value (1, 2 or 5 times a power of ten).
fn mantissa(v: f64) -> f64 {
    let p = 10f64.powf(v.abs().log10().floor());
    (v.abs() / p * 1e6).round() / 1e6
}

/// The round step (1, 2 or 5 times a power of ten) at or above `raw`.
fn round_step(raw: f64) -> f64 {
    if raw.is_nan() || raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    let m = raw / p;
    let m = if m <= 1.0 + 1e-9 {
        1.0
    } else if m <= 2.0 + 1e-9 {
        2.0
    } else if m <= 5.0 + 1e-9 {
        5.0
    } else {
        10.0
    };
    m * p
}

/// A linear tick's label: as many decimals as the step needs (every label
/// of the axis the same), thousands as `k` and millions as `M` once the
/// largest tick reaches ten thousand.
fn linear_label(v: f64, step: f64, largest: f64) -> String {
    let (v, step, suffix) = if largest >= 1e7 {
        (v / 1e6, step / 1e6, "M")
    } else if largest >= 1e4 {
        (v / 1e3, step / 1e3, "k")
    } else {
        (v, step, "")
    };
    let decimals = if step >= 1.0 - 1e-9 {
        0
    } else {
        (-step.log10()).ceil().max(0.0) as usize
    };
    let v = if v.abs() < step * 1e-6 { 0.0 } else { v };
    format!("{v:.decimals$}{suffix}")
}

/// A round value without trailing zeros: `0.05`, `2`, `500`, `10k`, `2M`.
fn trim(v: f64) -> String {
    let (v, suffix) = if v >= 1e6 {
        (v / 1e6, "M")
    } else if v >= 1e4 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = format!("{v:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s}{suffix}")
}

/// A round duration in milliseconds in the unit that suits it: `50 ms`,
/// `2 s`, `30 s`, `5 min`, `2 h`, `2 d`.
fn duration_label(ms: f64) -> String {
    // The tables' unit (`table::duration_column`), and days past a day.
    let (name, size) = if ms >= 86400e3 {
        ("d", 86400e3)
    } else {
        let (name, size, _) = crate::table::duration_column(ms, 0);
        (name, size)
    };
    format!("{} {name}", trim(ms / size))
}

fn err(e: impl std::fmt::Display) -> String {
    format!("plot: {e}")
}

/// A legend entry's key: a short line or a filled square in the series'
/// style.
#[derive(Clone, Copy)]
enum Key {
    Line(ShapeStyle),
    Square(ShapeStyle),
}

/// Pixels per legend line and the most lines a legend shows.
const LEGEND_LINE: i32 = 18;
const LEGEND_MAX: usize = 18;

/// The width a legend of `entries` takes beside the plot: its longest
/// label at about 7 pixels a character, within bounds.
fn legend_width(entries: &[(String, Key)]) -> u32 {
    if entries.is_empty() {
        return 0;
    }
    let chars = entries
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    (40 + 7 * chars as u32).clamp(100, 320)
}

/// Draws the legend in its own area to the right of the plot, one entry
/// per line from the top of the plotting area down; past `LEGEND_MAX`
/// entries, a last line says how many are not shown.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[(String, Key)],
) -> Result<(), String> {
    let font = ("sans-serif", 12).into_font();
    let shown = if entries.len() > LEGEND_MAX {
        LEGEND_MAX - 1
    } else {
        entries.len()
    };
    for (i, (label, key)) in entries.iter().take(shown).enumerate() {
        let y = 44 + LEGEND_LINE * i as i32;
        match key {
            Key::Line(style) => area
                .draw(&PathElement::new(vec![(6, y), (26, y)], *style))
                .map_err(err)?,
            Key::Square(style) => area
                .draw(&Rectangle::new([(10, y - 6), (22, y + 6)], *style))
                .map_err(err)?,
        }
        area.draw(&Text::new(label.clone(), (32, y - 7), font.clone()))
            .map_err(err)?;
    }
    if shown < entries.len() {
        let y = 44 + LEGEND_LINE * shown as i32;
        area.draw(&Text::new(
            format!("… and {} more", entries.len() - shown),
            (32, y - 7),
            font.clone(),
        ))
        .map_err(err)?;
    }
    Ok(())
}

/// The drawing areas of a chart: the plot's, and the legend's beside it.
type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn areas<'a>(svg: &'a mut String, entries: &[(String, Key)]) -> (Area<'a>, Area<'a>) {
    let size = (PLOT_SIZE.0 + legend_width(entries), PLOT_SIZE.1);
    let root = SVGBackend::with_string(svg, size).into_drawing_area();
    root.split_horizontally(PLOT_SIZE.0)
}

/// Draws a line chart as SVG; an error starting with [`NO_DATA`] when no
/// series has a point.
pub fn line_chart(chart: &LineChart) -> Result<String, String> {
    if chart.series.iter().all(|(_, p)| p.is_empty()) {
        return Err(format!(
            "{NO_DATA}{}: nothing to plot, this run has no value for it.",
            chart.title
        ));
    }
    let xs: Vec<f64> = chart
        .series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(x, _)| *x))
        .chain(chart.v_line.iter().map(|(x, _)| *x))
        .collect();
    let ys: Vec<f64> = chart
        .series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|(_, y)| *y))
        .chain(chart.h_line.iter().map(|(y, _)| *y))
        .collect();
    let x = Axis::new(&xs, chart.x_unit, chart.log_x, false, 0.0);
    let y = Axis::new(&ys, chart.y_unit, chart.log_y, true, 0.05);
    let reference = RED.stroke_width(1);
    let mut entries: Vec<(String, Key)> = chart
        .series
        .iter()
        .enumerate()
        .map(|(i, (name, _))| (name.clone(), Key::Line(color(i).stroke_width(2))))
        .collect();
    for (_, label) in chart.h_line.iter().chain(chart.v_line.iter()) {
        entries.push((label.clone(), Key::Line(reference)));
    }
    let mut svg = String::new();
    {
        let (plot, legend) = areas(&mut svg, &entries);
        plot.fill(&WHITE).map_err(err)?;
        legend.fill(&WHITE).map_err(err)?;
        let mut c = ChartBuilder::on(&plot)
            .caption(&chart.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(x.range(), y.range())
            .map_err(err)?;
        c.configure_mesh()
            .x_desc(x.title(&chart.x_label))
            .y_desc(y.title(&chart.y_label))
            .x_label_formatter(&|v| x.label(*v))
            .y_label_formatter(&|v| y.label(*v))
            .label_style(("sans-serif", 12))
            .axis_desc_style(("sans-serif", 13))
            .light_line_style(RGBColor(240, 240, 240))
            .draw()
            .map_err(err)?;
        for (i, (_, points)) in chart.series.iter().enumerate() {
            c.draw_series(LineSeries::new(
                points.iter().map(|(px, py)| (x.at(*px), y.at(*py))),
                color(i).stroke_width(2),
            ))
            .map_err(err)?;
        }
        // The reference lines (an SLO), across the whole plot.
        if let Some((v, _)) = &chart.h_line {
            c.draw_series(LineSeries::new(
                [(x.lo, y.at(*v)), (x.hi, y.at(*v))],
                reference,
            ))
            .map_err(err)?;
        }
        if let Some((v, _)) = &chart.v_line {
            c.draw_series(LineSeries::new(
                [(x.at(*v), y.lo), (x.at(*v), y.hi)],
                reference,
            ))
            .map_err(err)?;
        }
        draw_legend(&legend, &entries)?;
        plot.present().map_err(err)?;
    }
    Ok(svg)
}

/// Stacked vertical bars of durations in milliseconds: one bar per
/// category, one stack segment per named part (where a request's time
/// went), each bar's total written above it so a short bar beside tall
/// ones still reads.
#[derive(Clone, Debug, Default)]
pub struct StackedBars {
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    /// (part name, value per category).
    pub parts: Vec<(String, Vec<f64>)>,
}

pub fn stacked_bars(bars: &StackedBars) -> Result<String, String> {
    let n = bars.categories.len();
    if n == 0 {
        return Err(format!("{NO_DATA}{}: nothing to plot.", bars.title));
    }
    let totals: Vec<f64> = (0..n)
        .map(|i| {
            bars.parts
                .iter()
                .map(|(_, v)| v.get(i).copied().unwrap_or(0.0))
                .sum()
        })
        .collect();
    let y = Axis::new(&totals, Unit::Ms, false, true, 0.1);
    // The legend lists the parts top down, as they are stacked.
    let entries: Vec<(String, Key)> = bars
        .parts
        .iter()
        .enumerate()
        .rev()
        .map(|(p, (name, _))| (name.clone(), Key::Square(color(p).filled())))
        .collect();
    let mut svg = String::new();
    {
        let (plot, legend) = areas(&mut svg, &entries);
        plot.fill(&WHITE).map_err(err)?;
        legend.fill(&WHITE).map_err(err)?;
        let x_range = Ticked {
            lo: -0.5,
            hi: n as f64 - 0.5,
            ticks: (0..n).map(|i| i as f64).collect(),
            minor: Vec::new(),
        };
        let mut c = ChartBuilder::on(&plot)
            .caption(&bars.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(x_range, y.range())
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
            .x_label_formatter(&x_fmt)
            .y_desc(y.title(&bars.y_label))
            .y_label_formatter(&|v| y.label(*v))
            .label_style(("sans-serif", 12))
            .axis_desc_style(("sans-serif", 13))
            .light_line_style(RGBColor(240, 240, 240))
            .draw()
            .map_err(err)?;
        let mut base = vec![0.0; n];
        for (p, (_, values)) in bars.parts.iter().enumerate() {
            let style = color(p).filled();
            let rects: Vec<Rectangle<(f64, f64)>> = (0..n)
                .map(|i| {
                    let v = values.get(i).copied().unwrap_or(0.0);
                    let r = Rectangle::new(
                        [
                            (i as f64 - 0.3, y.at(base[i])),
                            (i as f64 + 0.3, y.at(base[i] + v)),
                        ],
                        style,
                    );
                    base[i] += v;
                    r
                })
                .collect();
            c.draw_series(rects).map_err(err)?;
        }
        let above = TextStyle::from(("sans-serif", 12).into_font()).pos(
            plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Bottom,
            ),
        );
        c.draw_series(totals.iter().enumerate().map(|(i, t)| {
            EmptyElement::at((i as f64, y.at(*t)))
                + Text::new(crate::table::duration_ms(*t), (0, -4), above.clone())
        }))
        .map_err(err)?;
        draw_legend(&legend, &entries)?;
        plot.present().map_err(err)?;
    }
    Ok(svg)
}

/// Labelled points, with the ones on a front joined by a line; y values
/// are durations in milliseconds.
#[derive(Clone, Debug, Default)]
pub struct Scatter {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// (label, x, y in ms, on the front).
    pub points: Vec<(String, f64, f64, bool)>,
}

pub fn scatter(s: &Scatter) -> Result<String, String> {
    if s.points.is_empty() {
        return Err(format!(
            "{NO_DATA}{}: nothing to plot, no layout sustained a rate within the SLO.",
            s.title
        ));
    }
    let xs: Vec<f64> = s.points.iter().map(|p| p.1).collect();
    let ys: Vec<f64> = s.points.iter().map(|p| p.2).collect();
    let x = Axis::new(&xs, Unit::Number, false, true, 0.15);
    let y = Axis::new(&ys, Unit::Ms, false, true, 0.1);
    let on_front = s.points.iter().filter(|p| p.3).count();
    let mut entries = vec![
        (
            "on the Pareto front".to_string(),
            Key::Square(color(1).filled()),
        ),
        ("behind it".to_string(), Key::Square(color(0).filled())),
    ];
    if on_front > 1 {
        entries.push(("the front".to_string(), Key::Line(color(1).stroke_width(2))));
    }
    let mut svg = String::new();
    {
        let (plot, legend) = areas(&mut svg, &entries);
        plot.fill(&WHITE).map_err(err)?;
        legend.fill(&WHITE).map_err(err)?;
        let mut c = ChartBuilder::on(&plot)
            .caption(&s.title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(42)
            .y_label_area_size(64)
            .build_cartesian_2d(x.range(), y.range())
            .map_err(err)?;
        c.configure_mesh()
            .x_desc(x.title(&s.x_label))
            .y_desc(y.title(&s.y_label))
            .x_label_formatter(&|v| x.label(*v))
            .y_label_formatter(&|v| y.label(*v))
            .label_style(("sans-serif", 12))
            .axis_desc_style(("sans-serif", 13))
            .light_line_style(RGBColor(240, 240, 240))
            .draw()
            .map_err(err)?;
        let mut front: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|p| p.3)
            .map(|p| (x.at(p.1), y.at(p.2)))
            .collect();
        front.sort_by(|a, b| a.0.total_cmp(&b.0));
        if front.len() > 1 {
            c.draw_series(LineSeries::new(front, color(1).stroke_width(2)))
                .map_err(err)?;
        }
        c.draw_series(s.points.iter().map(|(label, px, py, on)| {
            let fill = if *on { color(1) } else { color(0) };
            EmptyElement::at((x.at(*px), y.at(*py)))
                + Circle::new((0, 0), 5, fill.filled())
                + Text::new(label.clone(), (7, -14), ("sans-serif", 12))
        }))
        .map_err(err)?;
        draw_legend(&legend, &entries)?;
        plot.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_svg_with_their_labels_and_are_reproducible() {
        let chart = LineChart {
            title: "TTFT CDF".into(),
            x_label: "latency".into(),
            y_label: "requests".into(),
            x_unit: Unit::Ms,
            y_unit: Unit::Share,
            series: vec![("1p3d".into(), vec![(1.0, 0.0), (10.0, 0.5), (100.0, 1.0)])],
            h_line: Some((0.99, "p99".into())),
            v_line: None,
            log_x: true,
            log_y: false,
        };
        let a = line_chart(&chart).unwrap();
        assert!(a.starts_with("<svg"));
        assert!(a.contains("TTFT CDF") && a.contains("1p3d") && a.contains("p99"));
        assert!(
            a.contains("requests (%)") && a.contains("latency (log scale)"),
            "{a}"
        );
        assert!(a.contains("\n10 ms\n") && a.contains("\n100\n"), "{a}");
        assert_eq!(a, line_chart(&chart).unwrap());
        let bars = stacked_bars(&StackedBars {
            title: "phases".into(),
            y_label: "time".into(),
            categories: vec!["a".into(), "b".into()],
            parts: vec![
                ("queue".into(), vec![1.0, 2.0]),
                ("prefill".into(), vec![3.0, 0.5]),
            ],
        })
        .unwrap();
        assert!(bars.contains("queue") && bars.contains("<rect"));
        // Each bar's total above it, in the unit that suits it.
        assert!(
            bars.contains("\n4.0 ms\n") && bars.contains("\n2.5 ms\n"),
            "{bars}"
        );
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
    fn flat_data_still_draws_and_no_data_is_said_not_drawn() {
        let chart = LineChart {
            series: vec![("flat".into(), vec![(0.0, 1.0), (0.0, 1.0)])],
            ..LineChart::default()
        };
        assert!(line_chart(&chart).is_ok());
        let none = line_chart(&LineChart {
            title: "Inter-token latency".into(),
            series: vec![("run".into(), Vec::new())],
            ..LineChart::default()
        })
        .unwrap_err();
        assert!(
            none.starts_with(NO_DATA) && none.contains("Inter-token latency"),
            "{none}"
        );
        assert!(
            scatter(&Scatter::default())
                .unwrap_err()
                .starts_with(NO_DATA)
        );
        assert!(
            stacked_bars(&StackedBars::default())
                .unwrap_err()
                .starts_with(NO_DATA)
        );
    }

    fn labels(values: &[f64], unit: Unit, log: bool, zero: bool, headroom: f64) -> Vec<String> {
        Axis::new(values, unit, log, zero, headroom).labels
    }

    #[test]
    fn linear_ticks_are_round_with_one_number_of_decimals() {
        // A share in percent, room above 100 % so a line along it shows.
        assert_eq!(
            labels(&[0.0, 1.0], Unit::Share, false, true, 0.05),
            ["0", "20", "40", "60", "80", "100"]
        );
        let share = Axis::new(&[0.0, 1.0], Unit::Share, false, true, 0.05);
        assert!(share.hi > 100.0 && share.title("requests") == "requests (%)");
        // A small share keeps its decimals, the same on every tick.
        assert_eq!(
            labels(&[0.0, 0.0075], Unit::Share, false, true, 0.05),
            ["0.0", "0.2", "0.4", "0.6", "0.8"]
        );
        assert_eq!(
            labels(&[0.0, 2.5], Unit::Number, false, true, 0.0),
            ["0.0", "0.5", "1.0", "1.5", "2.0", "2.5"]
        );
        assert_eq!(
            labels(&[0.0, 60_000.0], Unit::Number, false, true, 0.0),
            ["0k", "10k", "20k", "30k", "40k", "50k", "60k"]
        );
        // Whole numbers only on a count axis, however small its values.
        assert_eq!(
            labels(&[0.0, 1.0], Unit::Count, false, true, 0.05),
            ["0", "1"]
        );
        assert_eq!(
            labels(&[0.0, 0.0], Unit::Count, false, true, 0.0),
            ["0", "1"]
        );
    }

    #[test]
    fn durations_take_the_unit_that_suits_them() {
        // Linear: one unit for the axis, named in its title.
        let run = Axis::new(&[0.0, 3545.0], Unit::S, false, false, 0.0);
        assert_eq!(run.unit, Some("min"));
        assert_eq!(run.labels, ["0", "10", "20", "30", "40", "50"]);
        assert_eq!(run.title("simulated time"), "simulated time (min)");
        let ms = Axis::new(&[0.0, 8000.0], Unit::Ms, false, true, 0.0);
        assert_eq!(ms.unit, Some("s"));
        assert_eq!(ms.labels, ["0", "2", "4", "6", "8"]);
        assert_eq!(
            Axis::new(&[0.0, 420.0], Unit::Ms, false, true, 0.0).unit,
            Some("ms")
        );
        assert_eq!(
            Axis::new(&[0.0, 203.0], Unit::S, false, true, 0.0).unit,
            Some("s")
        );
        assert_eq!(
            Axis::new(&[0.0, 40_000.0], Unit::S, false, true, 0.0).unit,
            Some("h")
        );
        // Logarithmic: each tick in its own unit, at round durations.
        assert_eq!(
            labels(&[40.0, 1600.0], Unit::Ms, true, false, 0.0),
            ["50 ms", "100 ms", "200 ms", "500 ms", "1 s"]
        );
        assert_eq!(
            labels(&[400.0, 5.0e6], Unit::Ms, true, false, 0.0),
            ["1 s", "10 s", "1 min", "10 min", "1 h"]
        );
        assert_eq!(
            Axis::new(&[40.0, 1600.0], Unit::Ms, true, false, 0.0).title("latency"),
            "latency (log scale)"
        );
    }

    #[test]
    fn log_ticks_of_plain_numbers_are_one_two_five() {
        assert_eq!(
            labels(&[6.0, 400.0], Unit::Number, true, false, 0.0),
            ["10", "20", "50", "100", "200"]
        );
        assert_eq!(
            labels(&[1.0, 1e7], Unit::Number, true, false, 0.0),
            ["1", "10", "100", "1000", "10k", "100k", "1M", "10M"]
        );
    }

    #[test]
    fn round_steps_and_labels() {
        assert_eq!(round_step(0.14), 0.2);
        assert_eq!(round_step(17.5), 20.0);
        assert_eq!(round_step(3.0), 5.0);
        assert_eq!(round_step(7.0), 10.0);
        assert_eq!(round_step(1.0), 1.0);
        assert_eq!(duration_label(30e3), "30 s");
        assert_eq!(duration_label(120e3), "2 min");
        assert_eq!(duration_label(172800e3), "2 d");
        assert_eq!(duration_label(0.5), "0.5 ms");
        assert_eq!(trim(2.0e6), "2M");
    }
}
