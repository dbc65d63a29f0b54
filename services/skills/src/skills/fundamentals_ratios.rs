//! `fundamentals.ratios`: a company's ratios over time (margins, leverage,
//! return on equity, diluted EPS) from the broker's SEC fundamentals, as
//! known on `as_of`: only what was filed on or before it counts, so the
//! ratios are the ones a researcher could have computed that day.

use super::{Artifact, Context, Inputs, Output, Skill, required_symbol, symbol_schema};
use crate::model::Manifest;
use crate::model::Profile;
use ithaca_kit::chart::{self, Chart, Line, LineStyle, Panel, Scale, XAxis, YFormat};
use ithaca_kit::error::ServiceError;
use ithaca_proto::broker::v1 as bpb;
use serde_json::{Value, json};

const DEFAULT_LIMIT: i32 = 12;

pub struct FundamentalsRatios;

/// The ratios of one period, each the quotient of two line items of that
/// period (`None` when either is missing or the denominator is zero).
struct Ratios {
    period_end: String,
    fiscal: String,
    net_margin: Option<f64>,
    operating_margin: Option<f64>,
    liabilities_to_assets: Option<f64>,
    return_on_equity: Option<f64>,
    eps_diluted: Option<f64>,
    revenue: Option<f64>,
    net_income: Option<f64>,
    /// The filings the period's values came from, and the latest filing date.
    accessions: Vec<String>,
    filed: String,
}

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

fn ratios(period: &bpb::FundamentalPeriod) -> Ratios {
    let get = |name: &str| {
        period
            .items
            .iter()
            .find(|i| i.item == name)
            .map(|i| i.value)
    };
    let mut accessions: Vec<String> = period
        .items
        .iter()
        .filter_map(|i| i.source.as_ref().map(|s| s.accession.clone()))
        .collect();
    accessions.sort();
    accessions.dedup();
    let filed = period
        .items
        .iter()
        .filter_map(|i| i.source.as_ref().map(|s| s.filed.clone()))
        .max()
        .unwrap_or_default();
    let (revenue, net_income) = (get("revenue"), get("net_income"));
    Ratios {
        period_end: period.period_end.clone(),
        fiscal: format!("{} {}", period.fiscal_year, period.fiscal_period),
        net_margin: ratio(net_income, revenue),
        operating_margin: ratio(get("operating_income"), revenue),
        liabilities_to_assets: ratio(get("total_liabilities"), get("total_assets")),
        return_on_equity: ratio(net_income, get("equity")),
        eps_diluted: get("eps_diluted"),
        revenue,
        net_income,
        accessions,
        filed,
    }
}

fn cell(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.6}")).unwrap_or_default()
}

#[tonic::async_trait]
impl Skill for FundamentalsRatios {
    fn manifest(&self) -> Manifest {
        Manifest {
            skill_id: "fundamentals.ratios",
            version: "1.0",
            name: "Fundamental Ratios",
            description: "A company's fundamentals ratios over time from its SEC filings (10-K, 10-Q), point-in-time: net and operating margin, liabilities over assets, return on equity and diluted EPS per fiscal quarter or year, as known on as_of (only filings filed on or before it count), each period with the filings its values came from; TTM values; a chart of margins and EPS (SVG) and a CSV.",
            input_schema: json!({"type": "object", "additionalProperties": false, "required": ["symbol"], "properties": {
                "symbol": symbol_schema(),
                "as_of": {"type": "string", "format": "date", "maxLength": 10, "description": "Only filings filed on or before this date count, YYYY-MM-DD (default: today)."},
                "period": {"type": "string", "maxLength": 7, "default": "quarter", "description": "quarter (three-month periods) or year (fiscal years)."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 40, "default": DEFAULT_LIMIT, "description": "Periods, newest first before charting."}}}),
            output_schema: json!({"type": "object", "properties": {
                "symbol": {"type": "string"}, "cik": {"type": "string"}, "company": {"type": "string"},
                "as_of": {"type": "string"}, "period": {"type": "string"},
                "periods": {"type": "array", "items": {"type": "object", "properties": {
                    "period_end": {"type": "string"}, "fiscal": {"type": "string"},
                    "net_margin": super::maybe_number(&format!("Net income over revenue, {}.", super::FRACTION)),
                    "operating_margin": super::maybe_number(&format!("Operating income over revenue, {}.", super::FRACTION)),
                    "liabilities_to_assets": super::maybe_number(&format!("Total liabilities over total assets, {}.", super::FRACTION)),
                    "return_on_equity": super::maybe_number(&format!("Net income of the period over equity at its end, {} (not annualized).", super::FRACTION)),
                    "eps_diluted": super::maybe_number("Diluted earnings per share, USD per share."),
                    "revenue": super::maybe_number("Revenue, USD."), "net_income": super::maybe_number("Net income, USD."),
                    "filed": {"type": "string"}, "accessions": {"type": "array", "items": {"type": "string"}}}}},
                "ttm": {"type": "object"}, "missing": {"type": "array", "items": {"type": "string"}}}}),
            profile: Profile::Interactive,
            asset_class: "equity",
            source_classes: &["computed", "sec"],
            trigger_compatible: false,
            intents: &["fundamentals", "ratios", "valuation", "margins"],
        }
    }

    async fn run(&self, ctx: &Context<'_>, inputs: &Inputs) -> Result<Output, ServiceError> {
        let symbol = required_symbol(inputs)?;
        let period = inputs.text("period").unwrap_or("quarter");
        if period != "quarter" && period != "year" {
            return Err(ServiceError::invalid(
                "inputs.period: must be quarter or year",
            ));
        }
        let limit = inputs
            .count("limit")
            .and_then(|n| i32::try_from(n).ok())
            .unwrap_or(DEFAULT_LIMIT);
        let f = ctx
            .fundamentals(bpb::GetFundamentalsRequest {
                symbol: symbol.clone(),
                as_of: inputs.text("as_of").map(str::to_owned),
                period: Some(period.to_owned()),
                limit: Some(limit),
            })
            .await?;
        ctx.progress(
            1,
            2,
            format!(
                "read {} periods of {symbol} as of {}",
                f.periods.len(),
                f.as_of
            ),
        );
        // Oldest first, for the CSV and the chart.
        let mut rows = Vec::new();
        for p in f.periods.iter().rev() {
            ctx.check()?;
            rows.push(ratios(p));
        }
        let mut csv = String::from(
            "period_end,fiscal,revenue,net_income,eps_diluted,net_margin,operating_margin,liabilities_to_assets,return_on_equity,filed,accessions\n",
        );
        for r in &rows {
            csv.push_str(&format!(
                "{},{},{},{},{},{},{},{},{},{},{}\n",
                r.period_end,
                r.fiscal,
                cell(r.revenue),
                cell(r.net_income),
                cell(r.eps_diluted),
                cell(r.net_margin),
                cell(r.operating_margin),
                cell(r.liabilities_to_assets),
                cell(r.return_on_equity),
                r.filed,
                r.accessions.join(" ")
            ));
        }
        let svg = chart_of(&symbol, &f.as_of, period, &rows);
        let periods: Vec<Value> = rows
            .iter()
            .map(|r| {
                json!({"period_end": r.period_end, "fiscal": r.fiscal, "net_margin": r.net_margin,
                    "operating_margin": r.operating_margin, "liabilities_to_assets": r.liabilities_to_assets,
                    "return_on_equity": r.return_on_equity, "eps_diluted": r.eps_diluted,
                    "revenue": r.revenue, "net_income": r.net_income, "filed": r.filed, "accessions": r.accessions})
            })
            .collect();
        let ttm: serde_json::Map<String, Value> = f
            .ttm
            .iter()
            .map(|t| {
                (
                    t.item.clone(),
                    json!({"value": t.value, "period_end": t.period_end, "method": t.method}),
                )
            })
            .collect();
        let outputs = json!({"symbol": symbol, "cik": f.cik, "company": f.company, "as_of": f.as_of,
            "period": f.period, "periods": periods, "ttm": ttm, "missing": f.missing});
        ctx.progress(2, 2, "computed the ratios and drew their chart");
        Ok(Output {
            artifacts: vec![
                Artifact::json("ratios.json", &outputs),
                Artifact::csv("ratios.csv", csv),
                Artifact::svg("ratios.svg", svg),
            ],
            outputs,
        })
    }
}

/// Margins over time above diluted EPS, by period end.
fn chart_of(symbol: &str, as_of: &str, period: &str, rows: &[Ratios]) -> String {
    let series = |f: &dyn Fn(&Ratios) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|r| Some((chart::year_fraction(&r.period_end)?, f(r)?)))
            .collect()
    };
    let margins = Panel {
        y_label: "margin".into(),
        y_scale: Scale::Linear,
        y_format: YFormat::Percent,
        weight: 2,
        lines: vec![
            Line::new(
                "operating margin",
                series(&|r| r.operating_margin),
                LineStyle::Benchmark,
            ),
            Line::new("net margin", series(&|r| r.net_margin), LineStyle::Primary),
        ],
    };
    let eps = Panel {
        y_label: "diluted EPS".into(),
        y_scale: Scale::Linear,
        y_format: YFormat::Number,
        weight: 1,
        lines: vec![Line::new(
            "",
            series(&|r| r.eps_diluted),
            LineStyle::Primary,
        )],
    };
    chart::svg(&Chart {
        title: format!("{symbol} ratios by {period}, as known on {as_of}"),
        x: XAxis::Dates,
        panels: vec![margins, eps],
    })
}
