//! The charts of run artifacts, drawn with the kit's plotters helpers
//! ([`ithaca_kit::chart`]).

use ithaca_kit::chart::{self, Chart, Line, LineStyle, Panel, Scale, XAxis, YFormat};

/// Realized volatility against window length: a log axis of trading days
/// (5 to 252 days spread evenly enough to read), each window a labelled
/// point.
pub fn term_structure(symbol: &str, points: &[(usize, f64)]) -> String {
    let line = Line::new(
        "",
        points.iter().map(|&(w, v)| (w as f64, v)).collect(),
        LineStyle::Primary,
    )
    .marked(
        points
            .iter()
            .map(|(w, v)| format!("{w}d {:.1}%", v * 100.0))
            .collect(),
    );
    chart::svg(&Chart {
        title: format!("{symbol} realized volatility term structure"),
        x: XAxis::Numbers {
            label: "window (trading days, log scale)".into(),
            scale: Scale::Log,
        },
        panels: vec![Panel {
            y_label: "annualized volatility".into(),
            y_scale: Scale::Linear,
            y_format: YFormat::Percent,
            weight: 2,
            lines: vec![line],
        }],
    })
}

/// An equity curve beside its buy-and-hold benchmark (growth of 1, on a
/// log scale when either spans a factor of ten), over the strategy's
/// drawdown from its running peak.
pub fn equity_curve(title: &str, dates: &[String], equity: &[f64], benchmark: &[f64]) -> String {
    let xs: Vec<Option<f64>> = dates.iter().map(|d| chart::year_fraction(d)).collect();
    let series = |values: &[f64]| -> Vec<(f64, f64)> {
        xs.iter()
            .zip(values)
            .filter_map(|(x, v)| x.map(|x| (x, *v)))
            .collect()
    };
    let mut peak = f64::MIN;
    let drawdown: Vec<f64> = equity
        .iter()
        .map(|&e| {
            peak = peak.max(e);
            if peak > 0.0 { e / peak - 1.0 } else { 0.0 }
        })
        .collect();
    let scale = chart::scale_for(equity.iter().chain(benchmark).copied());
    let growth = Panel {
        y_label: match scale {
            Scale::Log => "growth of 1 (log scale)".into(),
            Scale::Linear => "growth of 1".into(),
        },
        y_scale: scale,
        y_format: YFormat::Number,
        weight: 3,
        lines: vec![
            Line::new("buy and hold", series(benchmark), LineStyle::Benchmark),
            Line::new("strategy", series(equity), LineStyle::Primary),
        ],
    };
    let underwater = Panel {
        y_label: "drawdown".into(),
        y_scale: Scale::Linear,
        y_format: YFormat::Percent,
        weight: 1,
        lines: vec![Line::new("", series(&drawdown), LineStyle::Area)],
    };
    chart::svg(&Chart {
        title: title.to_owned(),
        x: XAxis::Dates,
        panels: vec![growth, underwater],
    })
}

/// Buy and hold from day `from`: flat at 1 before it, then the price
/// relative to that day's.
pub fn buy_and_hold(prices: &[f64], from: usize) -> Vec<f64> {
    let Some(&base) = prices.get(from) else {
        return vec![1.0; prices.len()];
    };
    prices
        .iter()
        .enumerate()
        .map(|(i, p)| if i < from { 1.0 } else { p / base })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn equity_charts_have_a_benchmark_and_a_drawdown_panel() {
        let dates: Vec<String> = (0..400)
            .map(|i| {
                format!(
                    "{}-{:02}-{:02}",
                    2000 + i / 100,
                    1 + (i % 100) / 10,
                    1 + i % 10
                )
            })
            .collect();
        let equity: Vec<f64> = (0..400).map(|i| 1.01f64.powi(i)).collect();
        let bench = super::buy_and_hold(&equity, 10);
        assert_eq!((bench[5], bench[10]), (1.0, 1.0));
        let svg = super::equity_curve("X momentum", &dates, &equity, &bench);
        assert!(svg.contains("buy and hold") && svg.contains("drawdown"));
        assert!(
            svg.contains("log scale"),
            "53× growth is drawn on a log scale"
        );
        assert!(svg.contains("\n2001\n"), "year ticks");
        let ts = super::term_structure("X", &[(5, 0.2), (21, 0.25)]);
        assert!(ts.contains("21d 25.0%"));
    }
}
