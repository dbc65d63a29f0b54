//! `vol.term_structure`: realized volatility over several windows, with a
//! chart.

use super::{
    Artifact, Context, Inputs, MAX_WINDOWS, Output, Skill, date_schema, required_symbol,
    symbol_schema, too_long,
};
use crate::model::Manifest;
use crate::model::Profile;
use crate::{compute, plot};
use ithaca_kit::error::ServiceError;
use serde_json::json;

/// Windows in trading days when the caller names none: a week, a month, a
/// quarter, half a year and a year.
const DEFAULT_WINDOWS: [usize; 5] = [5, 21, 63, 126, 252];

pub struct VolTermStructure;

#[tonic::async_trait]
impl Skill for VolTermStructure {
    fn manifest(&self) -> Manifest {
        Manifest {
            skill_id: "vol.term_structure",
            version: "1.0",
            name: "Vol Term Structure",
            description: "Realized volatility of one symbol over several trailing windows (term structure), with an SVG plot.",
            input_schema: json!({"type": "object", "additionalProperties": false, "required": ["symbol"], "properties": {
                "symbol": symbol_schema(),
                "windows": {"type": "array", "maxItems": MAX_WINDOWS, "items": {"type": "integer", "minimum": 2, "maximum": 2520}, "default": DEFAULT_WINDOWS, "description": format!("Windows in trading days, at most {MAX_WINDOWS}.")},
                "end": date_schema("End")}}),
            output_schema: json!({"type": "object", "properties": {
                "symbol": {"type": "string"}, "as_of": {"type": "string"},
                "points": {"type": "array", "items": {"type": "object", "properties": {
                    "window": super::count("Trading days of returns."),
                    "volatility": super::number(&format!("Annualized realized volatility over that window (×√252), {}.", super::FRACTION))}}}}}),
            profile: Profile::Interactive,
            asset_class: "vol",
            source_classes: &["computed"],
            trigger_compatible: false,
            intents: &["risk", "volatility"],
        }
    }

    async fn run(&self, ctx: &Context<'_>, inputs: &Inputs) -> Result<Output, ServiceError> {
        let symbol = required_symbol(inputs)?;
        let windows = inputs
            .counts("windows")
            .unwrap_or_else(|| DEFAULT_WINDOWS.to_vec());
        let series = ctx.prices(&symbol, None, inputs.text("end")).await?;
        let mut points = Vec::new();
        for (i, w) in windows.iter().enumerate() {
            ctx.check()?;
            let vol = compute::realized_vol(&series.prices, *w).ok_or_else(|| {
                too_long(
                    &format!("inputs.windows[{i}]"),
                    *w,
                    &symbol,
                    series.prices.len(),
                )
            })?;
            points.push((*w, vol));
        }
        let svg = plot::term_structure(&symbol, &points);
        let points: Vec<_> = points
            .iter()
            .map(|(w, v)| json!({"window": w, "volatility": v}))
            .collect();
        let outputs = json!({"symbol": symbol, "as_of": series.dates.last(), "points": points});
        Ok(Output {
            artifacts: vec![
                Artifact::json("term_structure.json", &outputs),
                Artifact::svg("term_structure.svg", svg),
            ],
            outputs,
        })
    }
}
