//! Small SVG line charts for run artifacts (equity curves, volatility term
//! structures). Written by hand: a chart is a polyline, two axes and labels.

use std::fmt::Write;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 360.0;
const MARGIN: f64 = 48.0;

/// A line chart of `points` (x labels beside y values) titled `title`.
pub fn line_chart(title: &str, y_label: &str, points: &[(String, f64)]) -> String {
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = write!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = write!(
        svg,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="14">{}</text>"#,
        WIDTH / 2.0,
        escape(title)
    );
    if points.is_empty() {
        svg.push_str("</svg>\n");
        return svg;
    }
    let (min, max) = points
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), (_, y)| {
            (lo.min(*y), hi.max(*y))
        });
    let span = if max > min { max - min } else { 1.0 };
    let n = points.len().max(2) - 1;
    let x = |i: usize| MARGIN + (WIDTH - 2.0 * MARGIN) * i as f64 / n as f64;
    let y = |v: f64| HEIGHT - MARGIN - (HEIGHT - 2.0 * MARGIN) * (v - min) / span;
    let _ = write!(
        svg,
        r#"<line x1="{MARGIN}" y1="{b}" x2="{r}" y2="{b}" stroke="black"/><line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{b}" stroke="black"/>"#,
        b = HEIGHT - MARGIN,
        r = WIDTH - MARGIN
    );
    let path: Vec<String> = points
        .iter()
        .enumerate()
        .map(|(i, (_, v))| format!("{:.1},{:.1}", x(i), y(*v)))
        .collect();
    let _ = write!(
        svg,
        r##"<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{}"/>"##,
        path.join(" ")
    );
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="end">{max:.4}</text>"#,
        MARGIN - 4.0,
        MARGIN + 4.0
    );
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="end">{min:.4}</text>"#,
        MARGIN - 4.0,
        HEIGHT - MARGIN
    );
    let _ = write!(
        svg,
        r#"<text x="{MARGIN}" y="{}">{}</text>"#,
        HEIGHT - MARGIN + 16.0,
        escape(&points[0].0)
    );
    let _ = write!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
        WIDTH - MARGIN,
        HEIGHT - MARGIN + 16.0,
        escape(&points[points.len() - 1].0)
    );
    let _ = write!(
        svg,
        r#"<text x="12" y="{}" transform="rotate(-90 12 {})" text-anchor="middle">{}</text>"#,
        HEIGHT / 2.0,
        HEIGHT / 2.0,
        escape(y_label)
    );
    svg.push_str("</svg>\n");
    svg
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    #[test]
    fn draws_a_polyline_with_every_point() {
        let points: Vec<(String, f64)> = (0..5).map(|i| (format!("d{i}"), f64::from(i))).collect();
        let svg = super::line_chart("Equity <curve>", "equity", &points);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("Equity &lt;curve&gt;"));
        let polyline = svg
            .split("points=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .expect("polyline");
        assert_eq!(polyline.split(' ').count(), 5);
    }
}
