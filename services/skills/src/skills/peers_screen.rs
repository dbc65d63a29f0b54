//! `peers.screen`: a symbol and its peers ranked by valuation, growth,
//! margins and momentum at a date, from the broker's peer screen (prices
//! on or before the date, fundamentals filed on or before it).

use super::{
    Artifact, Context, Inputs, MAX_SYMBOL_LEN, Output, Skill, required_symbol, symbol_schema,
};
use crate::model::Manifest;
use crate::model::Profile;
use ithaca_kit::error::ServiceError;
use ithaca_proto::broker::v1 as bpb;
use serde_json::{Value, json};

/// The most symbols one screen compares (the broker's own limit).
pub const MAX_PEERS: usize = 49;

/// The metrics the broker's screen computes.
const METRICS: &[&str] = &[
    "pe",
    "ps",
    "revenue_growth",
    "net_margin",
    "operating_margin",
    "momentum",
];

pub struct PeersScreen;

#[tonic::async_trait]
impl Skill for PeersScreen {
    fn manifest(&self) -> Manifest {
        Manifest {
            skill_id: "peers.screen",
            version: "1.0",
            name: "Peer Screen",
            description: "Screen peers: rank a symbol and its peers (default: every other symbol with market data) at a date by P/E and P/S (the close on or before the date over TTM fundamentals filed on or before it), TTM revenue growth, net and operating margin and 12-month momentum. A symbol without the data for a metric says why instead of dropping out. Table as JSON and CSV.",
            input_schema: json!({"type": "object", "additionalProperties": false, "required": ["symbol"], "properties": {
                "symbol": symbol_schema(),
                "peers": {"type": "array", "maxItems": MAX_PEERS, "items": {"type": "string", "maxLength": MAX_SYMBOL_LEN},
                    "description": format!("Peer tickers (default: every other symbol with market data). At most {MAX_PEERS}.")},
                "date": {"type": "string", "format": "date", "maxLength": 10, "description": "The screen's date, YYYY-MM-DD (default: today): prices on or before it, filings filed on or before it."},
                "metrics": {"type": "array", "maxItems": METRICS.len(), "items": {"type": "string", "maxLength": 20},
                    "description": format!("Metrics to compute (default all): {}.", METRICS.join(", "))},
                "rank_by": {"type": "string", "maxLength": 20, "description": "The metric to rank by (default the first); ascending for pe and ps, descending for the others."}}}),
            output_schema: json!({"type": "object", "properties": {
                "symbol": {"type": "string"}, "date": {"type": "string"}, "rank_by": {"type": "string"},
                "metrics": {"type": "array", "items": {"type": "string"}},
                "rows": {"type": "array", "items": {"type": "object", "properties": {
                    "symbol": {"type": "string"}, "rank": super::count("Place by rank_by, 1 first."),
                    "metrics": {"type": "object"}}}}}}),
            profile: Profile::Interactive,
            asset_class: "equity",
            source_classes: &["computed", "sec"],
            trigger_compatible: false,
            intents: &["peers", "screen", "valuation", "fundamentals"],
        }
    }

    async fn run(&self, ctx: &Context<'_>, inputs: &Inputs) -> Result<Output, ServiceError> {
        let symbol = required_symbol(inputs)?;
        let mut symbols = vec![symbol.clone()];
        match inputs.texts("peers") {
            Some(peers) => symbols.extend(peers.into_iter().map(str::to_uppercase)),
            None => symbols.extend(ctx.symbols().await?),
        }
        let mut seen = std::collections::BTreeSet::new();
        symbols.retain(|s| seen.insert(s.clone()));
        if symbols.len() > MAX_PEERS + 1 {
            return Err(ServiceError::invalid(format!(
                "inputs.peers: the broker has {} other symbols, more than the {MAX_PEERS} a screen compares; name the peers",
                symbols.len() - 1
            )));
        }
        let date = match inputs.text("date") {
            Some(d) => d.to_owned(),
            None => today(),
        };
        let screen = ctx
            .screen_peers(bpb::ScreenPeersRequest {
                symbols,
                date,
                metrics: inputs
                    .texts("metrics")
                    .unwrap_or_default()
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                rank_by: inputs.text("rank_by").map(str::to_owned),
            })
            .await?;
        let mut csv = String::from("symbol,rank");
        for m in &screen.metrics {
            csv.push_str(&format!(",{m},{m}_missing"));
        }
        csv.push('\n');
        let mut rows = Vec::new();
        for row in &screen.rows {
            ctx.check()?;
            csv.push_str(&format!("{},{}", row.symbol, row.rank));
            let mut metrics = serde_json::Map::new();
            for m in &row.metrics {
                csv.push_str(&format!(
                    ",{},{}",
                    m.value.map(|v| format!("{v:.6}")).unwrap_or_default(),
                    m.missing.as_deref().unwrap_or("").replace(',', ";")
                ));
                metrics.insert(
                    m.metric.clone(),
                    json!({"value": m.value, "missing": m.missing, "detail": m.detail}),
                );
            }
            csv.push('\n');
            rows.push(
                json!({"symbol": row.symbol, "rank": row.rank, "metrics": Value::Object(metrics)}),
            );
        }
        let outputs = json!({"symbol": symbol, "date": screen.date, "rank_by": screen.rank_by,
            "metrics": screen.metrics, "rows": rows});
        Ok(Output {
            artifacts: vec![
                Artifact::json("screen.json", &outputs),
                Artifact::csv("screen.csv", csv),
            ],
            outputs,
        })
    }
}

/// Today, YYYY-MM-DD (UTC).
fn today() -> String {
    let d = time::OffsetDateTime::now_utc().date();
    format!("{:04}-{:02}-{:02}", d.year(), u8::from(d.month()), d.day())
}
