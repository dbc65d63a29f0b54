//! Charts for artifacts, drawn as SVG by `plotters`: real ticks and
//! gridlines on both axes, marked points, a log scale where values span
//! orders of magnitude, a legend, and optional stacked panels that share
//! the x axis (an equity curve above its drawdown).
//!
//! Only plotters' SVG backend is used: text becomes `<text>` elements that
//! the viewer renders, so drawing needs no font files and no system
//! libraries. Text widths are estimated, which is why the layout leaves
//! generous label areas.
//!
//! The module knows nothing of markets or stars: a chart is panels of
//! lines over an x axis of numbers or dates.

use plotters::coord::ranged1d::{AsRangedCoord, Ranged, ValueFormatter};
use plotters::prelude::*;
use std::ops::Range;

/// Width of every chart, pixels.
pub const WIDTH: u32 = 800;

/// A chart: a title over one or more panels that share the x axis.
#[derive(Clone, Debug)]
pub struct Chart {
    pub title: String,
    pub x: XAxis,
    /// Top to bottom; the x axis is labelled under the last one.
    pub panels: Vec<Panel>,
}

/// What the x values are and how to label them.
#[derive(Clone, Debug)]
pub enum XAxis {
    /// Plain numbers, on a linear or log scale.
    Numbers { label: String, scale: Scale },
    /// Calendar dates, as fractional years (see [`year_fraction`]); ticks
    /// read `2004` or `2004-07`.
    Dates,
}

/// How values map to positions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// Logarithmic; every value must be positive.
    Log,
}

/// How tick values on the y axis read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum YFormat {
    /// `1.25`
    Number,
    /// `0.25` reads `25%`.
    Percent,
}

/// One panel: lines over the shared x axis.
#[derive(Clone, Debug)]
pub struct Panel {
    pub y_label: String,
    pub y_scale: Scale,
    pub y_format: YFormat,
    /// Share of the chart's height, relative to the other panels.
    pub weight: u32,
    pub lines: Vec<Line>,
}

/// One series.
#[derive(Clone, Debug)]
pub struct Line {
    /// Shown in the legend (when the panel has more than one line, or the
    /// line is filled).
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub style: LineStyle,
    /// A circle at every point, with this label beside it when present.
    pub marks: Option<Vec<String>>,
}

/// How a line is drawn; each has its own colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineStyle {
    /// The subject of the chart: blue, thick.
    Primary,
    /// A benchmark to compare with: grey.
    Benchmark,
    /// Filled down to zero: red (drawdowns).
    Area,
}

impl Line {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>, style: LineStyle) -> Line {
        Line {
            name: name.into(),
            points,
            style,
            marks: None,
        }
    }

    /// Mark every point, labelled.
    pub fn marked(mut self, labels: Vec<String>) -> Line {
        self.marks = Some(labels);
        self
    }
}

/// A log scale when every value is positive and they span at least a
/// factor of ten, else linear.
pub fn scale_for(values: impl IntoIterator<Item = f64>) -> Scale {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > 0.0 && hi / lo >= 10.0 {
        Scale::Log
    } else {
        Scale::Linear
    }
}

/// A `YYYY-MM-DD` date as a fractional year (the middle of its day), the x
/// value of [`XAxis::Dates`]. `None` for anything else.
pub fn year_fraction(date: &str) -> Option<f64> {
    let format = time::macros::format_description!("[year]-[month]-[day]");
    let day = time::Date::parse(date, format).ok()?;
    let days_in_year = if time::util::is_leap_year(day.year()) {
        366.0
    } else {
        365.0
    };
    Some(f64::from(day.year()) + (f64::from(day.ordinal()) - 0.5) / days_in_year)
}

/// The chart as an SVG document. A chart that cannot be drawn (no points)
/// is an SVG with its title and a note, never an error.
pub fn svg(chart: &Chart) -> String {
    let mut out = String::new();
    if let Err(err) = draw(chart, &mut out) {
        tracing::warn!(error = %err, title = %chart.title, "drawing a chart failed");
        out = placeholder(&chart.title);
    }
    out
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

const PANEL_HEIGHT: u32 = 300;
const TITLE_FONT: u32 = 20;
const LABEL_FONT: u32 = 14;
const BLUE: RGBColor = RGBColor(31, 119, 180);
const GREY: RGBColor = RGBColor(127, 127, 127);
const RED: RGBColor = RGBColor(214, 39, 40);

fn draw(chart: &Chart, out: &mut String) -> DrawResult<()> {
    let x_values = chart
        .panels
        .iter()
        .flat_map(|p| p.lines.iter())
        .flat_map(|l| l.points.iter().map(|(x, _)| *x));
    let Some(x_range) = padded_range(x_values, 0.0) else {
        return Err("the chart has no points".into());
    };
    // Room on the right for the labels of marked points.
    let x_range = match chart.x {
        XAxis::Numbers {
            scale: Scale::Log, ..
        } => x_range.start / 1.25..x_range.end * 1.6,
        _ => {
            let span = (x_range.end - x_range.start).max(f64::EPSILON);
            x_range.start - span * 0.01..x_range.end + span * 0.06
        }
    };
    let weights: u32 = chart.panels.iter().map(|p| p.weight.max(1)).sum();
    let height = PANEL_HEIGHT * weights.div_ceil(2).max(1) + 60;
    let root = SVGBackend::with_string(out, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(&chart.title, ("sans-serif", TITLE_FONT))?;
    let (_, total) = root.dim_in_pixel();
    let mut rest = root;
    let last = chart.panels.len().saturating_sub(1);
    for (i, panel) in chart.panels.iter().enumerate() {
        let area = if i == last {
            rest.clone()
        } else {
            let px = total * panel.weight.max(1) / weights;
            let (upper, lower) = rest.split_vertically(px);
            rest = lower;
            upper
        };
        draw_panel(&area, chart, panel, x_range.clone(), i == last)?;
    }
    rest.present()?;
    Ok(())
}

/// Pick the coordinate types of a panel's axes and draw it.
fn draw_panel(
    area: &Area<'_>,
    chart: &Chart,
    panel: &Panel,
    x: Range<f64>,
    x_labels: bool,
) -> DrawResult<()> {
    let values = panel
        .lines
        .iter()
        .flat_map(|l| l.points.iter().map(|(_, y)| *y));
    let floor = if panel.lines.iter().any(|l| l.style == LineStyle::Area) {
        Some(0.0)
    } else {
        None
    };
    let log_y = panel.y_scale == Scale::Log;
    let y = padded_range(values.chain(floor), if log_y { 1.0 } else { 0.08 })
        .ok_or("a panel has no points")?;
    let log_x = matches!(
        chart.x,
        XAxis::Numbers {
            scale: Scale::Log,
            ..
        }
    );
    let ctx = PanelContext {
        chart,
        panel,
        x_labels,
    };
    // plotters labels only the powers of ten of a log axis; ticks at 1, 2
    // and 5 of every decade read better over the one or two decades that
    // equity curves and windows span.
    let log = |r: Range<f64>| {
        let ticks = log_ticks(&r);
        r.log_scale().with_key_points(ticks)
    };
    match (log_x, log_y) {
        (false, false) => ctx.draw(area, x, y),
        (false, true) => ctx.draw(area, x, log(y)),
        (true, false) => ctx.draw(area, log(x), y),
        (true, true) => ctx.draw(area, log(x), log(y)),
    }
}

struct PanelContext<'a> {
    chart: &'a Chart,
    panel: &'a Panel,
    /// Only the bottom panel labels the x axis.
    x_labels: bool,
}

impl PanelContext<'_> {
    fn draw<X, Y>(&self, area: &Area<'_>, x: X, y: Y) -> DrawResult<()>
    where
        X: AsRangedCoord<Value = f64>,
        Y: AsRangedCoord<Value = f64>,
        X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
        Y::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
    {
        let mut chart = ChartBuilder::on(area)
            .margin(12)
            .x_label_area_size(if self.x_labels { 44 } else { 8 })
            .y_label_area_size(72)
            .build_cartesian_2d(x, y)?;
        let x_label = match &self.chart.x {
            XAxis::Numbers { label, .. } => label.as_str(),
            XAxis::Dates => "",
        };
        let dates = matches!(self.chart.x, XAxis::Dates);
        let y_format = self.panel.y_format;
        let x_fmt = move |v: &f64| {
            if dates {
                date_tick(*v)
            } else {
                number_tick(*v)
            }
        };
        let y_fmt = move |v: &f64| match y_format {
            YFormat::Number => number_tick(*v),
            YFormat::Percent => percent_tick(*v),
        };
        let mut mesh = chart.configure_mesh();
        // A short panel (weight 1) gets fewer labels than a tall one.
        let y_labels = (self.panel.weight as usize * 3).clamp(4, 10);
        mesh.x_labels(8)
            .y_labels(y_labels)
            .x_label_formatter(&x_fmt)
            .y_label_formatter(&y_fmt)
            .y_desc(self.panel.y_label.as_str())
            .label_style(("sans-serif", LABEL_FONT))
            .axis_desc_style(("sans-serif", LABEL_FONT))
            .max_light_lines(4)
            .light_line_style(RGBColor(238, 238, 238))
            .bold_line_style(RGBColor(200, 200, 200));
        if self.x_labels {
            mesh.x_desc(x_label);
        } else {
            mesh.x_label_formatter(&|_| String::new());
        }
        mesh.draw()?;

        let mut legend = false;
        for line in &self.panel.lines {
            let color = match line.style {
                LineStyle::Primary => BLUE,
                LineStyle::Benchmark => GREY,
                LineStyle::Area => RED,
            };
            let width = if line.style == LineStyle::Primary {
                2
            } else {
                1
            };
            let points = line.points.iter().copied();
            let drawn = if line.style == LineStyle::Area {
                let baseline = 0.0;
                chart.draw_series(
                    AreaSeries::new(points, baseline, color.mix(0.25)).border_style(color),
                )?
            } else {
                chart.draw_series(LineSeries::new(points, color.stroke_width(width)))?
            };
            if !line.name.is_empty() {
                legend = true;
                drawn.label(line.name.as_str()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(width))
                });
            }
            if let Some(labels) = &line.marks {
                chart.draw_series(line.points.iter().zip(labels).map(|(&(x, y), label)| {
                    EmptyElement::at((x, y))
                        + Circle::new((0, 0), 4, color.filled())
                        + Text::new(label.clone(), (6, -18), ("sans-serif", LABEL_FONT))
                }))?;
            }
        }
        if legend && self.panel.lines.len() > 1 {
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(200, 200, 200))
                .label_font(("sans-serif", LABEL_FONT))
                .draw()?;
        }
        Ok(())
    }
}

/// Ticks for a log axis over `range`: 1, 2 and 5 times each power of ten
/// in it, or every whole multiple when that gives fewer than three.
fn log_ticks(range: &Range<f64>) -> Vec<f64> {
    let within = |v: &f64| range.start <= *v && *v <= range.end;
    let decades = range.start.log10().floor() as i32..=range.end.log10().ceil() as i32;
    let ticks = |multiples: &[f64]| -> Vec<f64> {
        decades
            .clone()
            .flat_map(|k| multiples.iter().map(move |m| m * 10f64.powi(k)))
            .filter(within)
            .collect()
    };
    let coarse = ticks(&[1.0, 2.0, 5.0]);
    if coarse.len() >= 3 {
        coarse
    } else {
        ticks(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    }
}

/// The smallest and largest value, widened by `pad` of the span (or, on a
/// log scale where `pad` is 1.0, by 10% of each end).
fn padded_range(values: impl Iterator<Item = f64>, pad: f64) -> Option<Range<f64>> {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return None;
    }
    if pad >= 1.0 {
        return Some(lo / 1.1..hi * 1.1);
    }
    let span = if hi > lo { hi - lo } else { lo.abs().max(1.0) };
    Some(lo - span * pad..hi + span * pad)
}

/// A tick value without needless digits: `0.25`, `1.5`, `20`.
fn number_tick(v: f64) -> String {
    let text = format!("{v:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" {
        "0".to_owned()
    } else {
        text.to_owned()
    }
}

fn percent_tick(v: f64) -> String {
    format!("{}%", number_tick((v * 1000.0).round() / 10.0))
}

/// A fractional year as a tick: the year alone at its start, else the year
/// and month.
fn date_tick(v: f64) -> String {
    let year = v.floor();
    let month = ((v - year) * 12.0).floor() as i32 + 1;
    if (v - year).abs() < 1e-6 {
        format!("{year:.0}")
    } else {
        format!("{year:.0}-{month:02}")
    }
}

fn placeholder(title: &str) -> String {
    let title = title
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="120"><rect width="100%" height="100%" fill="white"/><text x="20" y="40" font-family="sans-serif" font-size="18">{title}</text><text x="20" y="80" font-family="sans-serif" font-size="14">no data to draw</text></svg>"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_log_scales_for_orders_of_magnitude() {
        assert_eq!(scale_for([1.0, 2.0, 9.0]), Scale::Linear);
        assert_eq!(scale_for([1.0, 30.0]), Scale::Log);
        assert_eq!(scale_for([-1.0, 30.0]), Scale::Linear);
    }

    #[test]
    fn log_axes_tick_at_one_two_and_five() {
        assert_eq!(log_ticks(&(0.6..30.0)), vec![1.0, 2.0, 5.0, 10.0, 20.0]);
        assert_eq!(
            log_ticks(&(4.0..300.0)),
            vec![5.0, 10.0, 20.0, 50.0, 100.0, 200.0]
        );
        assert_eq!(log_ticks(&(1.5..4.5)), vec![2.0, 3.0, 4.0]);
    }

    #[test]
    fn dates_become_fractional_years() {
        let d = year_fraction("2004-01-01").expect("date");
        assert!((2004.0..2004.01).contains(&d));
        assert!(year_fraction("2004-13-01").is_none());
        assert_eq!(date_tick(2004.0), "2004");
        assert_eq!(date_tick(2004.5), "2004-07");
        assert_eq!(percent_tick(0.255), "25.5%");
        assert_eq!(number_tick(20.0), "20");
    }

    #[test]
    fn draws_ticks_points_and_a_legend() {
        let chart = Chart {
            title: "Test <chart>".into(),
            x: XAxis::Numbers {
                label: "window".into(),
                scale: Scale::Log,
            },
            panels: vec![Panel {
                y_label: "volatility".into(),
                y_scale: Scale::Linear,
                y_format: YFormat::Percent,
                weight: 2,
                lines: vec![
                    Line::new(
                        "a",
                        vec![(5.0, 0.2), (21.0, 0.25), (252.0, 0.3)],
                        LineStyle::Primary,
                    )
                    .marked(vec!["5d".into(), "21d".into(), "252d".into()]),
                    Line::new("b", vec![(5.0, 0.1), (252.0, 0.1)], LineStyle::Benchmark),
                ],
            }],
        };
        let svg = svg(&chart);
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.contains("<polyline"));
        assert!(svg.contains("Test &lt;chart&gt;"));
        assert!(svg.contains("<circle"), "marked points");
        // plotters writes each text on a line of its own.
        assert!(svg.contains("\n21d\n"), "point labels");
        assert!(svg.contains("\n100\n"), "log ticks");
        assert!(svg.contains("%\n"), "percent ticks");
        let empty = Chart {
            panels: vec![],
            ..chart
        };
        assert!(super::svg(&empty).contains("no data"));
    }
}
