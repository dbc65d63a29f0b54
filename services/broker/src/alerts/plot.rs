//! The light-curve plot: SVG drawn with `plotters` (SVG backend only; text
//! is left to the viewer's fonts). Magnitudes grow downwards (brighter is
//! higher), one colour per band, detections with 1-sigma error bars, limits
//! as downward triangles (the source was fainter), forced photometry as open
//! circles, and time in days since the first detection, whose date is in
//! the axis label. The magnitude axis is labelled a difference magnitude:
//! ZTF's `magpsf` measures what changed against the reference image, not
//! the source's total brightness.

use super::lightcurve::{Kind, Point, band};
use crate::astrotime;
use plotters::prelude::*;

const WIDTH: u32 = 900;
const HEIGHT: u32 = 520;

/// A band's colour: g green, r red, i amber, anything else grey.
fn colour(fid: i64) -> RGBColor {
    match fid {
        1 => RGBColor(0x1b, 0x9e, 0x3e),
        2 => RGBColor(0xd6, 0x27, 0x28),
        3 => RGBColor(0xe6, 0x9f, 0x00),
        _ => RGBColor(0x70, 0x70, 0x70),
    }
}

/// Draw `points` of `object_id`, days counted from `zero_jd`.
pub fn light_curve_svg(
    object_id: &str,
    points: &[Point],
    zero_jd: f64,
    zero_is_detection: bool,
) -> String {
    let mut svg = String::new();
    if let Err(err) = draw(&mut svg, object_id, points, zero_jd, zero_is_detection) {
        // Drawing into a String cannot fail for want of space; a failure is
        // a bug in the layout, so say so in the picture rather than panic.
        tracing::error!(error = %err, "light-curve plot failed");
        svg = format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}"><text x="20" y="40">light curve of {} could not be drawn</text></svg>"#,
            escape(object_id)
        );
    }
    svg
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn draw(
    svg: &mut String,
    object_id: &str,
    points: &[Point],
    zero_jd: f64,
    zero_is_detection: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(svg, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let days: Vec<f64> = points.iter().map(|p| p.jd - zero_jd).collect();
    let (mut x0, mut x1) = days
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), d| {
            (a.min(*d), b.max(*d))
        });
    let (mut bright, mut faint) =
        points
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
                let err = p.mag_err.unwrap_or(0.0);
                (a.min(p.mag - err), b.max(p.mag + err))
            });
    if !x0.is_finite() {
        (x0, x1, bright, faint) = (-1.0, 1.0, 18.0, 21.0);
    }
    let xpad = ((x1 - x0) * 0.05).max(0.5);
    let ypad = ((faint - bright) * 0.08).max(0.2);
    let zero_label = astrotime::jd_to_iso(zero_jd);
    let zero_label = zero_label
        .get(..16)
        .unwrap_or(&zero_label)
        .replace('T', " ");
    let x_desc = if zero_is_detection {
        format!("days since first detection ({zero_label} UTC, JD {zero_jd:.5})")
    } else {
        format!("days since first point, no detection ({zero_label} UTC, JD {zero_jd:.5})")
    };
    // Plot −mag so that brighter is higher; labels show the magnitude.
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{object_id} light curve"), ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(56)
        // Room above the brightest point keeps the legend off the data.
        .build_cartesian_2d(
            (x0 - xpad)..(x1 + xpad),
            (-(faint + ypad))..(-(bright - 0.5 * (faint - bright) - 0.3)),
        )?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc("difference magnitude (AB)")
        .y_label_formatter(&|v| format!("{:.1}", -v))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(RGBColor(0xee, 0xee, 0xee))
        .draw()?;
    let mut bands: Vec<i64> = points.iter().map(|p| p.fid).collect();
    bands.sort_unstable();
    bands.dedup();
    for fid in bands {
        let c = colour(fid);
        let of_band = || points.iter().zip(&days).filter(move |(p, _)| p.fid == fid);
        chart.draw_series(of_band().filter(|(p, _)| !p.is_limit).filter_map(|(p, d)| {
            p.mag_err.map(|e| {
                ErrorBar::new_vertical(*d, -(p.mag + e), -p.mag, -(p.mag - e), c.stroke_width(1), 6)
            })
        }))?;
        chart
            .draw_series(
                of_band()
                    .filter(|(p, _)| !p.is_limit && p.kind != Kind::Forced)
                    .map(|(p, d)| Circle::new((*d, -p.mag), 4, c.filled())),
            )?
            .label(format!("{} detection", band(fid)))
            .legend(move |(x, y)| Circle::new((x, y), 4, c.filled()));
        if of_band().any(|(p, _)| !p.is_limit && p.kind == Kind::Forced) {
            chart
                .draw_series(
                    of_band()
                        .filter(|(p, _)| !p.is_limit && p.kind == Kind::Forced)
                        .map(|(p, d)| Circle::new((*d, -p.mag), 4, c.stroke_width(1))),
                )?
                .label(format!("{} forced photometry", band(fid)))
                .legend(move |(x, y)| Circle::new((x, y), 4, c.stroke_width(1)));
        }
        chart
            .draw_series(of_band().filter(|(p, _)| p.is_limit).map(|(p, d)| {
                // A downward triangle: the source was fainter than this.
                EmptyElement::at((*d, -p.mag))
                    + Polygon::new(vec![(-5, -4), (5, -4), (0, 5)], c.mix(0.55).filled())
            }))?
            .label(format!("{} upper limit", band(fid)))
            .legend(move |(x, y)| {
                EmptyElement::at((x, y))
                    + Polygon::new(vec![(-5, -4), (5, -4), (0, 5)], c.mix(0.55).filled())
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .position(SeriesLabelPosition::UpperRight)
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_an_svg_with_bands_limits_and_the_date() {
        let point = |jd: f64, fid: i64, kind: Kind, mag: f64| Point {
            jd,
            fid,
            kind,
            is_limit: kind == Kind::UpperLimit,
            mag,
            mag_err: (kind != Kind::UpperLimit).then_some(0.1),
            flux: None,
            flux_err: None,
            magzpsci: None,
            isdiffpos: None,
            candid: None,
            programid: None,
        };
        let points = vec![
            point(2_460_200.5, 2, Kind::UpperLimit, 20.5),
            point(2_460_229.93, 1, Kind::Detection, 17.9),
            point(2_460_231.9, 2, Kind::Detection, 17.5),
        ];
        let svg = light_curve_svg("ZTF<x>", &points, 2_460_229.93, true);
        assert!(
            svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"),
            "{svg}"
        );
        assert!(
            svg.contains("days since first detection (2023-10-12 10:19 UTC"),
            "{svg}"
        );
        assert!(svg.contains("ZTF&lt;x&gt; light curve"));
        assert!(
            svg.contains("#1B9E3E") || svg.contains("#1b9e3e"),
            "g is green"
        );
        assert!(svg.contains("polygon"), "limits are triangles");
        // What is plotted is what changed against the reference image, and
        // the axis says so.
        assert!(svg.contains("difference magnitude (AB)"), "{svg}");
    }
}
