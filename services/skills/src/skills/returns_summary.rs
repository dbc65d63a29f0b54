//! `returns.summary`: CAGR, volatility, Sharpe and maximum drawdown over a
//! date range.

use super::{
    Artifact, Context, Inputs, Output, Skill, date_schema, required_symbol, symbol_schema, too_long,
};
use crate::compute;
use crate::model::Manifest;
use crate::model::Profile;
use ithaca_kit::error::ServiceError;
use serde_json::json;

pub struct ReturnsSummary;

#[tonic::async_trait]
impl Skill for ReturnsSummary {
    fn manifest(&self) -> Manifest {
        Manifest {
            skill_id: "returns.summary",
            version: "1.0",
            name: "Returns Summary",
            description: "CAGR, annualized volatility, Sharpe ratio (zero risk-free rate) and maximum drawdown of one symbol over a date range.",
            input_schema: json!({"type": "object", "additionalProperties": false, "required": ["symbol"], "properties": {
                "symbol": symbol_schema(), "start": date_schema("Start"), "end": date_schema("End")}}),
            output_schema: {
                let mut properties = super::series_statistics();
                properties.insert("symbol".to_owned(), json!({"type": "string"}));
                json!({"type": "object", "properties": properties})
            },
            profile: Profile::Interactive,
            asset_class: "equity",
            source_classes: &["computed"],
            trigger_compatible: false,
            intents: &["performance", "risk"],
        }
    }

    async fn run(&self, ctx: &Context<'_>, inputs: &Inputs) -> Result<Output, ServiceError> {
        let symbol = required_symbol(inputs)?;
        let series = ctx
            .prices(&symbol, inputs.text("start"), inputs.text("end"))
            .await?;
        let s = compute::returns_summary(&series.prices)
            .ok_or_else(|| too_long("inputs.start", 3, &symbol, series.prices.len()))?;
        let outputs = json!({"symbol": symbol, "start": series.dates.first(), "end": series.dates.last(),
            "cagr": s.cagr, "volatility": s.volatility, "sharpe": s.sharpe, "max_drawdown": s.max_drawdown,
            "total_return": s.total_return, "days": s.days});
        Ok(Output {
            artifacts: vec![Artifact::json("summary.json", &outputs)],
            outputs,
        })
    }
}
