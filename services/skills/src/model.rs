//! Skills domain types: run ids and statuses, runtime profiles, strategy
//! statuses and the strategy spec, each parsed once where it enters.

use ithaca_kit::error::ServiceError;
use serde::{Deserialize, Serialize};

/// The longest text a symbol input may be (its schema's `maxLength`).
pub const MAX_SYMBOL_LEN: usize = 32;

ithaca_kit::string_id! {
    /// A run (a UUID).
    pub struct RunId;
    check = ithaca_kit::id::canonical_uuid;
    error = "run_id: not an id (expected a UUID)";
}

impl RunId {
    /// A fresh id.
    pub fn new_v4() -> RunId {
        RunId(uuid::Uuid::new_v4().hyphenated().to_string())
    }
}

ithaca_kit::text_enum! {
    /// Where a run is: draft → queued → running → succeeded | failed, or
    /// cancelled while queued or running. A job (one execution attempt)
    /// is `Running` and then takes its run's final status.
    pub enum RunStatus {
        Draft = "draft",
        Queued = "queued",
        Running = "running",
        Succeeded = "succeeded",
        Failed = "failed",
        Cancelled = "cancelled",
    }
}

impl RunStatus {
    /// Whether the run can still change on its own (and be cancelled).
    pub fn is_active(self) -> bool {
        matches!(self, RunStatus::Queued | RunStatus::Running)
    }
}

ithaca_kit::text_enum! {
    /// How a skill runs: within the `run_skill` call, or queued for the
    /// background worker.
    pub enum Profile {
        Interactive = "interactive",
        Batch = "batch",
    }
}

ithaca_kit::text_enum! {
    /// Where a strategy is: proposed, then promoted (by an approved request).
    pub enum StrategyStatus {
        Draft = "draft",
        Paper = "paper",
        Live = "live",
    }
}

/// Cost per position change when a proposal names none, basis points (as
/// `ProposeStrategyRequest.cost_bps` documents).
pub const DEFAULT_COST_BPS: f64 = 5.0;
/// Largest weight of one symbol when a proposal names none.
pub const DEFAULT_MAX_WEIGHT: f64 = 1.0;

/// A checked momentum strategy, as stored (JSON) and backtested. Parsed once
/// when its row is read; the only defaults are [`DEFAULT_COST_BPS`] and
/// [`DEFAULT_MAX_WEIGHT`] (the universe, lookback and rebalance have none:
/// a proposal without them is refused).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StrategySpec {
    /// Upper-case tickers, sorted, without duplicates.
    pub universe: Vec<String>,
    /// Trading days of the momentum signal.
    pub lookback: i32,
    /// Trading days between rebalances.
    pub rebalance: i32,
    #[serde(default)]
    pub risk: RiskLimits,
    #[serde(default = "default_cost_bps")]
    pub cost_bps: f64,
}

/// A strategy's risk limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RiskLimits {
    #[serde(default = "default_max_weight")]
    pub max_weight: f64,
    /// Stop for good once the portfolio falls this far from its peak.
    #[serde(default)]
    pub max_drawdown: Option<f64>,
}

impl Default for RiskLimits {
    fn default() -> Self {
        RiskLimits {
            max_weight: DEFAULT_MAX_WEIGHT,
            max_drawdown: None,
        }
    }
}

fn default_cost_bps() -> f64 {
    DEFAULT_COST_BPS
}

fn default_max_weight() -> f64 {
    DEFAULT_MAX_WEIGHT
}

/// A strategy as an agent proposes it, before checking.
#[derive(Clone, Debug, Default)]
pub struct StrategyProposal {
    pub name: String,
    pub universe: Vec<String>,
    pub lookback: i32,
    pub rebalance: i32,
    pub max_weight: Option<f64>,
    pub max_drawdown: Option<f64>,
    pub cost_bps: Option<f64>,
}

/// The most symbols a strategy's universe may hold (the proto's
/// `max_items` of `ProposeStrategyRequest.universe` says the same).
pub const MAX_UNIVERSE: usize = 20;

impl StrategyProposal {
    /// Check the proposal; its trimmed name and spec. Whether the symbols
    /// exist is the broker's to say, and is checked by the caller.
    pub fn check(self) -> Result<(String, StrategySpec), ServiceError> {
        let name = self.name.trim();
        if name.is_empty() || name.chars().count() > 100 {
            return Err(ServiceError::invalid("name: 1 to 100 characters"));
        }
        if self.universe.is_empty() || self.universe.len() > MAX_UNIVERSE {
            return Err(ServiceError::invalid(format!(
                "universe: 1 to {MAX_UNIVERSE} symbols, got {}",
                self.universe.len()
            )));
        }
        if let Some((i, long)) = self
            .universe
            .iter()
            .enumerate()
            .find(|(_, s)| s.chars().count() > MAX_SYMBOL_LEN)
        {
            return Err(ServiceError::invalid(format!(
                "universe[{i}]: at most {} characters, got {}",
                MAX_SYMBOL_LEN,
                long.chars().count()
            )));
        }
        if !(1..=756).contains(&self.lookback) {
            return Err(ServiceError::invalid(
                "lookback: must be between 1 and 756 trading days",
            ));
        }
        if !(1..=252).contains(&self.rebalance) {
            return Err(ServiceError::invalid(
                "rebalance: must be between 1 and 252 trading days",
            ));
        }
        let max_weight = self.max_weight.unwrap_or(DEFAULT_MAX_WEIGHT);
        if !(max_weight > 0.0 && max_weight <= 1.0) {
            return Err(ServiceError::invalid("risk.max_weight: must be in (0, 1]"));
        }
        let mut universe: Vec<String> = self
            .universe
            .iter()
            .map(|s| s.trim().to_uppercase())
            .collect();
        universe.sort();
        universe.dedup();
        if 1.0 / (universe.len() as f64) > max_weight + 1e-12 {
            return Err(ServiceError::invalid(format!(
                "risk.max_weight: {max_weight} is below the equal weight 1/{} of this universe",
                universe.len()
            )));
        }
        if let Some(dd) = self.max_drawdown.filter(|d| !(*d > 0.0 && *d < 1.0)) {
            return Err(ServiceError::invalid(format!(
                "risk.max_drawdown: {dd} must be in (0, 1)"
            )));
        }
        let cost_bps = self.cost_bps.unwrap_or(DEFAULT_COST_BPS);
        if !(0.0..=500.0).contains(&cost_bps) {
            return Err(ServiceError::invalid("cost_bps: must be between 0 and 500"));
        }
        let spec = StrategySpec {
            universe,
            lookback: self.lookback,
            rebalance: self.rebalance,
            risk: RiskLimits {
                max_weight,
                max_drawdown: self.max_drawdown,
            },
            cost_bps,
        };
        Ok((name.to_owned(), spec))
    }
}

impl StrategySpec {
    /// The stored form.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("a strategy spec is plain data")
    }
}

/// For reading rows (`#[sqlx(try_from = "String")]`): the spec column.
impl TryFrom<String> for StrategySpec {
    type Error = serde_json::Error;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        serde_json::from_str(&text)
    }
}

/// One versioned manifest.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub skill_id: &'static str,
    pub version: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: serde_json::Value,
    pub output_schema: serde_json::Value,
    pub profile: Profile,
    pub asset_class: &'static str,
    pub source_classes: &'static [&'static str],
    pub trigger_compatible: bool,
    pub intents: &'static [&'static str],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proposals_are_normalised_with_one_set_of_defaults() {
        let (name, spec) = StrategyProposal {
            name: "  MSFT/IBM  ".into(),
            universe: vec!["msft".into(), " IBM".into(), "MSFT".into()],
            lookback: 126,
            rebalance: 21,
            ..Default::default()
        }
        .check()
        .expect("valid");
        assert_eq!(name, "MSFT/IBM");
        assert_eq!(spec.universe, vec!["IBM", "MSFT"]);
        assert_eq!((spec.cost_bps, spec.risk.max_weight), (5.0, 1.0));
        // The stored form reads back to the same spec; a stored spec written
        // before a default existed reads with that default.
        let text = spec.to_json().to_string();
        assert_eq!(StrategySpec::try_from(text).expect("reads back"), spec);
        let old = r#"{"universe":["IBM"],"lookback":5,"rebalance":5}"#.to_owned();
        let read = StrategySpec::try_from(old).expect("defaults");
        assert_eq!((read.cost_bps, read.risk.max_weight), (5.0, 1.0));
        assert!(StrategySpec::try_from(r#"{"lookback":5}"#.to_owned()).is_err());
    }
}
