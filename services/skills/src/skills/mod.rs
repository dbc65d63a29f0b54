//! The built-in skills, one module each.
//!
//! A skill is its [`Manifest`] (what agents discover and what its inputs
//! are checked against) and its computation ([`Skill::run`]), which turns
//! checked inputs into outputs and named [`Artifact`]s. Everything a
//! computation needs from outside (prices, the symbol list, a strategy) it
//! asks of its [`Context`], on behalf of the caller.
//!
//! Adding a skill: write a module here with a unit struct implementing
//! [`Skill`], and list it in [`BUILTIN`]. The catalog, `run_skill`, batch
//! runs and the checks of `tests/suite/skills.rs` that drive every skill pick it
//! up from there; nothing else changes.

mod backtest_momentum;
mod corr_peers;
mod fundamentals_ratios;
mod lightcurve_features;
mod peers_screen;
mod returns_summary;
mod vol_realized;
mod vol_term_structure;

use crate::model::Manifest;
use crate::sources::Sources;
use crate::stop::Stop;
use crate::store::StrategyRow;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::principal::Principal;
use serde_json::{Map, Value, json};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Every built-in skill; within one id, the latest version last.
pub static BUILTIN: &[&dyn Skill] = &[
    &vol_realized::VolRealized,
    &vol_term_structure::VolTermStructure,
    &returns_summary::ReturnsSummary,
    &corr_peers::CorrPeers,
    &backtest_momentum::BacktestMomentum,
    &lightcurve_features::LightCurveFeatures,
    &fundamentals_ratios::FundamentalsRatios,
    &peers_screen::PeersScreen,
];

/// One analysis agents can run.
#[tonic::async_trait]
pub trait Skill: Send + Sync + 'static {
    /// The manifest agents discover; the run's inputs are checked against
    /// its input schema (and its defaults filled in) before [`Skill::run`].
    fn manifest(&self) -> Manifest;

    /// Compute a run. An error fails the run and is shown to the caller,
    /// so it names the input at fault.
    async fn run(&self, ctx: &Context<'_>, inputs: &Inputs) -> Result<Output, ServiceError>;
}

/// What a computation produced.
#[derive(Clone, Debug)]
pub struct Output {
    /// The run's outputs (shaped by the manifest's output schema).
    pub outputs: Value,
    /// Files kept with the run, in the order they are listed.
    pub artifacts: Vec<Artifact>,
}

/// One file a run produced.
#[derive(Clone, Debug, PartialEq)]
pub struct Artifact {
    /// The file name agents see (`equity_curve.svg`).
    pub name: String,
    pub mime_type: &'static str,
    pub body: String,
}

impl Artifact {
    pub fn json(name: &str, value: &Value) -> Artifact {
        Artifact {
            name: name.to_owned(),
            mime_type: "application/json",
            body: value.to_string(),
        }
    }

    pub fn csv(name: &str, body: String) -> Artifact {
        Artifact {
            name: name.to_owned(),
            mime_type: "text/csv",
            body,
        }
    }

    pub fn svg(name: &str, body: String) -> Artifact {
        Artifact {
            name: name.to_owned(),
            mime_type: "image/svg+xml",
            body,
        }
    }
}

/// A run's inputs, checked against the manifest with its defaults filled
/// in. The accessors return `None` for an absent input; a skill must not
/// assume an optional input is there.
#[derive(Clone, Debug, Default)]
pub struct Inputs(Map<String, Value>);

impl Inputs {
    pub fn new(map: Map<String, Value>) -> Inputs {
        Inputs(map)
    }

    pub fn text(&self, name: &str) -> Option<&str> {
        self.0.get(name).and_then(Value::as_str)
    }

    /// A non-negative integer input.
    pub fn count(&self, name: &str) -> Option<usize> {
        self.0
            .get(name)
            .and_then(Value::as_u64)
            .and_then(|n| usize::try_from(n).ok())
    }

    pub fn number(&self, name: &str) -> Option<f64> {
        self.0.get(name).and_then(Value::as_f64)
    }

    /// An array input of texts.
    pub fn texts(&self, name: &str) -> Option<Vec<&str>> {
        let items = self.0.get(name)?.as_array()?;
        Some(items.iter().filter_map(Value::as_str).collect())
    }

    /// An array input of non-negative integers.
    pub fn counts(&self, name: &str) -> Option<Vec<usize>> {
        let items = self.0.get(name)?.as_array()?;
        Some(
            items
                .iter()
                .filter_map(Value::as_u64)
                .filter_map(|n| usize::try_from(n).ok())
                .collect(),
        )
    }

    /// The `symbol` input, upper-cased.
    pub fn symbol(&self) -> Option<String> {
        self.text("symbol").map(str::to_uppercase)
    }
}

/// The most symbols a list input of a skill may name (`peers`): each is a
/// price series read from the broker, so the list bounds a run's work. It
/// is the input schema's `maxItems`; a longer list is refused before the
/// run starts. 200 demo peers take about 15 s in a debug build (25 s of
/// CPU for 500, past run_skill's 35 s deadline), far less in a release
/// one; a larger correlation is a batch job's.
pub const MAX_SYMBOLS: usize = 200;

/// The most windows `vol.term_structure` takes (its schema's `maxItems`).
pub const MAX_WINDOWS: usize = 32;

pub use crate::model::MAX_SYMBOL_LEN;

/// The most prices one run may read from the broker, whatever its inputs:
/// [`MAX_SYMBOLS`] series of 40 years of daily bars. A run that would read
/// more fails with INVALID_ARGUMENT instead of going on.
pub const MAX_PRICES_PER_RUN: usize = 2_000_000;

/// What a computation may ask for, on behalf of the caller.
pub struct Context<'a> {
    /// Where its data comes from (the service, or a fake in a test).
    pub(crate) sources: &'a dyn Sources,
    pub(crate) caller: &'a Principal,
    /// Where its progress goes, when someone follows the run.
    pub(crate) progress: Option<&'a Progress>,
    /// Fires when nobody waits for the run any more (interactive runs).
    pub(crate) stop: &'a Stop,
    /// Prices read so far, against [`MAX_PRICES_PER_RUN`].
    pub(crate) prices_read: AtomicUsize,
}

/// One step of a run's progress: `done` of `total` steps are finished.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub done: u64,
    pub total: u64,
    pub message: String,
}

/// Where a followed run's steps go (run_skill forwards them to the MCP
/// client as progress). A step that finds the follower behind is dropped:
/// progress is a hint, never a reason to slow the run.
pub type Progress = tokio::sync::mpsc::Sender<Step>;

/// A price series: dates (YYYY-MM-DD) beside adjusted closes, oldest first.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub dates: Vec<String>,
    pub prices: Vec<f64>,
}

impl Context<'_> {
    /// An error when the run must stop because its caller went away or its
    /// deadline passed. Computations call it in every loop over inputs,
    /// symbols, bars or windows, so a stopped run ends within milliseconds
    /// even between two awaits.
    pub fn check(&self) -> Result<(), ServiceError> {
        match self.stop.reason() {
            None => Ok(()),
            Some(reason) => Err(cancelled(reason)),
        }
    }

    /// Report that `done` of `total` steps are finished, with what was
    /// just done, to whoever follows the run (nobody may).
    pub fn progress(&self, done: u64, total: u64, message: impl Into<String>) {
        if let Some(progress) = self.progress {
            let _ = progress.try_send(Step {
                done,
                total,
                message: message.into(),
            });
        }
    }

    /// Adjusted closes of `symbol` between `start` and `end` (inclusive;
    /// default: all), through the broker.
    pub async fn prices(
        &self,
        symbol: &str,
        start: Option<&str>,
        end: Option<&str>,
    ) -> Result<Series, ServiceError> {
        self.check()?;
        let (dates, prices) = self.sources.prices(self.caller, symbol, start, end).await?;
        let read = self.prices_read.fetch_add(prices.len(), Ordering::Relaxed) + prices.len();
        if read > MAX_PRICES_PER_RUN {
            return Err(ServiceError::invalid(format!(
                "inputs: the run would read more than {MAX_PRICES_PER_RUN} prices; name fewer symbols or a shorter range"
            ))
            .with_domain(DomainCode::RunTooLarge));
        }
        Ok(Series { dates, prices })
    }

    /// Every symbol the broker has data for.
    pub async fn symbols(&self) -> Result<Vec<String>, ServiceError> {
        self.sources.symbols(self.caller).await
    }

    /// An object's light curve from a broker's alert archive.
    pub async fn light_curve(
        &self,
        broker_id: &str,
        object_id: &str,
    ) -> Result<ithaca_proto::broker::v1::LightCurve, ServiceError> {
        self.sources
            .light_curve(self.caller, broker_id, object_id)
            .await
    }

    /// A company's line items and TTM values as known on `as_of`
    /// (point-in-time), through the broker's fundamentals service.
    pub async fn fundamentals(
        &self,
        request: ithaca_proto::broker::v1::GetFundamentalsRequest,
    ) -> Result<ithaca_proto::broker::v1::Fundamentals, ServiceError> {
        self.check()?;
        self.sources.fundamentals(self.caller, request).await
    }

    /// The broker's peer screen: symbols ranked by metrics at a date.
    pub async fn screen_peers(
        &self,
        request: ithaca_proto::broker::v1::ScreenPeersRequest,
    ) -> Result<ithaca_proto::broker::v1::PeerScreen, ServiceError> {
        self.check()?;
        self.sources.screen_peers(self.caller, request).await
    }

    /// One of the caller's strategies.
    pub async fn strategy(&self, strategy_id: &str) -> Result<StrategyRow, ServiceError> {
        self.sources.strategy(self.caller, strategy_id).await
    }
}

/// The skill that implements `skill_id` at `version` (the latest when
/// `version` is `None`).
pub fn find(
    skills: &[&'static dyn Skill],
    skill_id: &str,
    version: Option<&str>,
) -> Option<&'static dyn Skill> {
    skills.iter().copied().rfind(|s| {
        let m = s.manifest();
        m.skill_id == skill_id && version.is_none_or(|v| v == m.version)
    })
}

/// The error of a run stopped for `reason`: nobody hears it but the run
/// record (the caller is gone or its deadline passed).
pub(crate) fn cancelled(reason: crate::stop::Reason) -> ServiceError {
    ServiceError::new(Code::Unavailable, reason.message()).with_domain(RUN_CANCELLED)
}

/// The domain code of a run stopped because nobody waits for it.
pub(crate) const RUN_CANCELLED: DomainCode = DomainCode::RunCancelled;

/// The schema of a `symbol` input.
fn symbol_schema() -> Value {
    json!({"type": "string", "maxLength": MAX_SYMBOL_LEN, "description": "Ticker, for example AAPL (see list_symbols)."})
}

/// The schema of a list of symbols, at most [`MAX_SYMBOLS`] of them.
fn symbols_schema(description: &str) -> Value {
    json!({"type": "array", "maxItems": MAX_SYMBOLS,
        "items": {"type": "string", "maxLength": MAX_SYMBOL_LEN},
        "description": format!("{description} At most {MAX_SYMBOLS}.")})
}

/// The schema of a `start` or `end` date input.
fn date_schema(what: &str) -> Value {
    let default = if what == "Start" { "first" } else { "last" };
    json!({"type": "string", "format": "date", "maxLength": 10, "description": format!("{what}, YYYY-MM-DD (default: the {default} bar).")})
}

/// The error of a range too short for a computation.
fn too_long(field: &str, needed: usize, symbol: &str, have: usize) -> ServiceError {
    ServiceError::invalid(format!(
        "{field}: needs {} prices but {} has {have} in the range",
        needed + 1,
        symbol.to_uppercase()
    ))
    .with_domain(DomainCode::InsufficientData)
}

/// The `symbol` input of a skill whose schema requires it.
fn required_symbol(inputs: &Inputs) -> Result<String, ServiceError> {
    inputs
        .symbol()
        .ok_or_else(|| ServiceError::invalid("inputs.symbol: required input is missing"))
}

/// A number in an output schema, with what it measures and in which unit.
fn number(what: &str) -> Value {
    json!({"type": "number", "description": what})
}

/// A number that may be absent (`null`), with what it measures and its unit.
fn maybe_number(what: &str) -> Value {
    json!({"type": ["number", "null"], "description": what})
}

/// A count in an output schema, with what it counts.
fn count(what: &str) -> Value {
    json!({"type": "integer", "description": what})
}

/// Fractions are what the skills compute with: `0.12` is 12 %.
const FRACTION: &str = "a fraction: 0.12 is 12%";

/// The statistics of a price or equity series, as returns.summary and the
/// backtest report them.
fn series_statistics() -> Map<String, Value> {
    let fields = [
        (
            "total_return",
            format!("Return over the whole period, {FRACTION}."),
        ),
        (
            "cagr",
            format!("Compound annual growth rate, {FRACTION} a year."),
        ),
        (
            "volatility",
            format!("Annualized volatility of daily log returns (×√252), {FRACTION}."),
        ),
        (
            "sharpe",
            "Annualized Sharpe ratio of daily log returns, risk-free rate 0 (a ratio, no unit)."
                .to_owned(),
        ),
        (
            "max_drawdown",
            format!("Largest fall from a peak to a later trough, {FRACTION} of the peak."),
        ),
    ];
    fields
        .into_iter()
        .map(|(name, what)| (name.to_owned(), number(&what)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every number a skill answers says what it measures and its unit
    /// (`total_return: 23.63` read as a percentage when it is a fraction).
    #[test]
    fn every_numeric_output_field_says_its_unit() {
        fn walk(skill: &str, path: &str, schema: &Value, bare: &mut Vec<String>) {
            let Some(map) = schema.as_object() else {
                return;
            };
            let numeric = |t: &Value| t == "number" || t == "integer";
            let typed = map.get("type").is_some_and(|t| match t {
                Value::Array(ts) => ts.iter().any(numeric),
                t => numeric(t),
            });
            let described = map
                .get("description")
                .and_then(Value::as_str)
                .is_some_and(|d| !d.trim().is_empty());
            if typed && !described {
                bare.push(format!("{skill}: {path}"));
            }
            if let Some(props) = map.get("properties").and_then(Value::as_object) {
                for (name, inner) in props {
                    walk(skill, &format!("{path}.{name}"), inner, bare);
                }
            }
            if let Some(items) = map.get("items") {
                walk(skill, &format!("{path}[]"), items, bare);
            }
        }
        let mut bare = Vec::new();
        for skill in BUILTIN {
            let m = skill.manifest();
            walk(m.skill_id, "outputs", &m.output_schema, &mut bare);
        }
        assert!(bare.is_empty(), "numbers without a unit: {bare:#?}");
    }
}

#[cfg(test)]
mod fake_sources {
    //! A skill run against a fake [`Sources`]: no broker, no store.

    use super::*;
    use crate::stop::Stop;
    use ithaca_proto::broker::v1 as bpb;
    use std::sync::Mutex;

    /// Three closes of one symbol; remembers what it was asked.
    #[derive(Default)]
    struct Fake {
        asked: Mutex<Vec<String>>,
    }

    fn none<T>() -> Result<T, ServiceError> {
        Err(ServiceError::not_found("the fake has none"))
    }

    #[tonic::async_trait]
    impl Sources for Fake {
        async fn prices(
            &self,
            _caller: &Principal,
            symbol: &str,
            _start: Option<&str>,
            _end: Option<&str>,
        ) -> Result<(Vec<String>, Vec<f64>), ServiceError> {
            self.asked
                .lock()
                .expect("not poisoned")
                .push(symbol.to_owned());
            let dates = ["2020-01-02", "2020-01-03", "2020-01-06"];
            Ok((
                dates.iter().map(|d| (*d).to_owned()).collect(),
                vec![100.0, 110.0, 121.0],
            ))
        }
        async fn symbols(&self, _: &Principal) -> Result<Vec<String>, ServiceError> {
            none()
        }
        async fn light_curve(
            &self,
            _: &Principal,
            _: &str,
            _: &str,
        ) -> Result<bpb::LightCurve, ServiceError> {
            none()
        }
        async fn fundamentals(
            &self,
            _: &Principal,
            _: bpb::GetFundamentalsRequest,
        ) -> Result<bpb::Fundamentals, ServiceError> {
            none()
        }
        async fn screen_peers(
            &self,
            _: &Principal,
            _: bpb::ScreenPeersRequest,
        ) -> Result<bpb::PeerScreen, ServiceError> {
            none()
        }
        async fn strategy(&self, _: &Principal, _: &str) -> Result<StrategyRow, ServiceError> {
            none()
        }
    }

    #[tokio::test]
    async fn a_skill_runs_against_a_fake_source() {
        let fake = Fake::default();
        let caller = Principal::system("t1");
        let stop = Stop::never();
        let ctx = Context {
            sources: &fake,
            caller: &caller,
            progress: None,
            stop: &stop,
            prices_read: AtomicUsize::new(0),
        };
        let mut inputs = Map::new();
        inputs.insert("symbol".to_owned(), json!("FAKE"));
        let out = returns_summary::ReturnsSummary
            .run(&ctx, &Inputs::new(inputs))
            .await
            .expect("runs");
        assert_eq!(*fake.asked.lock().expect("not poisoned"), ["FAKE"]);
        assert_eq!(out.outputs["symbol"], "FAKE");
        assert_eq!(out.outputs["start"], "2020-01-02");
        assert_eq!(out.outputs["end"], "2020-01-06");
        assert_eq!(out.outputs["days"], 3);
        let total = out.outputs["total_return"].as_f64().expect("a number");
        assert!((total - 0.21).abs() < 1e-9, "{total}");
        assert_eq!(ctx.prices_read.load(Ordering::Relaxed), 3);
    }
}
