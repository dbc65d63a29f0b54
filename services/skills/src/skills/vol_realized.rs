//! `vol.realized`: annualised close-to-close volatility over a trailing
//! window.

use super::{
    Artifact, Context, Inputs, Output, Skill, date_schema, required_symbol, symbol_schema, too_long,
};
use crate::compute;
use crate::model::Manifest;
use crate::model::Profile;
use ithaca_kit::error::ServiceError;
use serde_json::json;

/// Trading days of returns when the caller names no window.
const DEFAULT_WINDOW: usize = 21;

pub struct VolRealized;

#[tonic::async_trait]
impl Skill for VolRealized {
    fn manifest(&self) -> Manifest {
        Manifest {
            skill_id: "vol.realized",
            version: "1.0",
            name: "Realized Volatility",
            description: "Annualized realized (close-to-close log-return) volatility of one symbol over a trailing window of trading days, from adjusted closes.",
            input_schema: json!({"type": "object", "additionalProperties": false, "required": ["symbol"], "properties": {
                "symbol": symbol_schema(),
                "window": {"type": "integer", "minimum": 2, "maximum": 2520, "default": DEFAULT_WINDOW, "description": "Trading days of returns."},
                "end": date_schema("End")}}),
            output_schema: json!({"type": "object", "properties": {
                "symbol": {"type": "string"}, "window": super::count("Trading days of returns."),
                "volatility": super::number(&format!("Annualized realized volatility of daily log returns over the window (×√252), {}.", super::FRACTION)),
                "as_of": {"type": "string"}, "observations": super::count("Daily returns used.")}}),
            profile: Profile::Interactive,
            asset_class: "vol",
            source_classes: &["computed"],
            trigger_compatible: false,
            intents: &["risk", "volatility"],
        }
    }

    async fn run(&self, ctx: &Context<'_>, inputs: &Inputs) -> Result<Output, ServiceError> {
        let symbol = required_symbol(inputs)?;
        let window = inputs.count("window").unwrap_or(DEFAULT_WINDOW);
        let series = ctx.prices(&symbol, None, inputs.text("end")).await?;
        let vol = compute::realized_vol(&series.prices, window)
            .ok_or_else(|| too_long("inputs.window", window, &symbol, series.prices.len()))?;
        let outputs = json!({"symbol": symbol, "window": window, "volatility": vol,
            "as_of": series.dates.last(), "observations": window});
        Ok(Output {
            artifacts: vec![Artifact::json("result.json", &outputs)],
            outputs,
        })
    }
}
