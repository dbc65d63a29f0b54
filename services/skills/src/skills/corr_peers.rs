//! `corr.peers`: correlations of daily log returns between one symbol and
//! its peers, nearest first.

use super::{
    Artifact, Context, Inputs, MAX_SYMBOLS, Output, Skill, date_schema, required_symbol,
    symbol_schema, symbols_schema,
};
use crate::compute;
use crate::model::Manifest;
use crate::model::Profile;
use ithaca_kit::error::ServiceError;
use serde_json::json;
use std::collections::BTreeMap;

pub struct CorrPeers;

/// One peer's correlation with the symbol.
struct Row {
    symbol: String,
    correlation: f64,
    observations: usize,
}

#[tonic::async_trait]
impl Skill for CorrPeers {
    fn manifest(&self) -> Manifest {
        Manifest {
            skill_id: "corr.peers",
            version: "1.0",
            name: "Peer Correlations",
            description: "Correlations of daily log returns between one symbol and its peers (default: every other symbol with market data) over their common dates, nearest peers first.",
            input_schema: json!({"type": "object", "additionalProperties": false, "required": ["symbol"], "properties": {
                "symbol": symbol_schema(),
                "peers": symbols_schema("Peer tickers (default: every other symbol)."),
                "start": date_schema("Start"), "end": date_schema("End")}}),
            output_schema: json!({"type": "object", "properties": {
                "symbol": {"type": "string"},
                "peers": {"type": "array", "items": {"type": "object", "properties": {"symbol": {"type": "string"},
                    "correlation": super::number("Pearson correlation of daily log returns on the common dates, from -1 to 1."),
                    "observations": super::count("Common daily returns used.")}}}}}),
            profile: Profile::Interactive,
            asset_class: "equity",
            source_classes: &["computed"],
            trigger_compatible: false,
            intents: &["peers", "correlation", "risk"],
        }
    }

    async fn run(&self, ctx: &Context<'_>, inputs: &Inputs) -> Result<Output, ServiceError> {
        let symbol = required_symbol(inputs)?;
        let (start, end) = (inputs.text("start"), inputs.text("end"));
        // `peers` is optional: without it, every other symbol is a peer.
        let peers: Vec<String> = match inputs.texts("peers") {
            Some(peers) => peers.into_iter().map(str::to_uppercase).collect(),
            None => ctx
                .symbols()
                .await?
                .into_iter()
                .filter(|s| *s != symbol)
                .collect(),
        };
        // A named list is bounded by the schema; the broker's own list is
        // bounded here, by the same number.
        if peers.len() > MAX_SYMBOLS {
            return Err(ServiceError::invalid(format!(
                "inputs.peers: the broker has {} other symbols, more than the {MAX_SYMBOLS} a run may correlate; name the peers",
                peers.len()
            )));
        }
        let base = ctx.prices(&symbol, start, end).await?;
        let base: BTreeMap<String, f64> = base.dates.into_iter().zip(base.prices).collect();
        let mut rows = Vec::new();
        for peer in peers {
            // The caller may be gone: stop between peers (prices() checks
            // too, before each read).
            ctx.check()?;
            let series = ctx.prices(&peer, start, end).await?;
            // Align on common dates, then take log returns of both.
            let (a, b): (Vec<f64>, Vec<f64>) = series
                .dates
                .iter()
                .zip(&series.prices)
                .filter_map(|(d, p)| base.get(d).map(|x| (*x, *p)))
                .unzip();
            let (ra, rb) = (compute::log_returns(&a), compute::log_returns(&b));
            if let Some(correlation) = compute::correlation(&ra, &rb) {
                rows.push(Row {
                    symbol: peer,
                    correlation,
                    observations: ra.len(),
                });
            }
        }
        rows.sort_by(|x, y| y.correlation.total_cmp(&x.correlation));
        let mut csv = String::from("symbol,correlation,observations\n");
        for r in &rows {
            csv.push_str(&format!(
                "{},{:.6},{}\n",
                r.symbol, r.correlation, r.observations
            ));
        }
        let rows: Vec<_> = rows
            .iter()
            .map(|r| json!({"symbol": r.symbol, "correlation": r.correlation, "observations": r.observations}))
            .collect();
        let outputs = json!({"symbol": symbol, "peers": rows});
        Ok(Output {
            artifacts: vec![
                Artifact::json("peers.json", &outputs),
                Artifact::csv("peers.csv", csv),
            ],
            outputs,
        })
    }
}
