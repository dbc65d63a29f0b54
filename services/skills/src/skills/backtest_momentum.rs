//! `backtest.momentum`: long/flat time-series momentum on one symbol, or on
//! each symbol of a proposed strategy's universe (equal weights, stopped at
//! the strategy's drawdown limit). A batch skill.
//!
//! With `fundamental_filter: "ttm_eps_growth"` a long signal is taken only
//! when the symbol's TTM diluted EPS grew, point-in-time: on each rebalance
//! day the broker is asked for the TTM EPS as known on that day (filings
//! filed on or before it) and as known a year before it, and the position
//! is long only when the first is above the second. A filing dated after a
//! rebalance day cannot change that rebalance.

use super::{Artifact, Context, Inputs, Output, Skill, date_schema, too_long};
use crate::model::Manifest;
use crate::model::Profile;
use crate::{compute, plot};
use ithaca_kit::error::Code;
use ithaca_kit::error::ServiceError;
use ithaca_proto::broker::v1 as bpb;
use serde_json::Value;
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet, HashMap};

const DEFAULT_LOOKBACK: usize = 126;
const DEFAULT_HOLDING: usize = 21;
const DEFAULT_COST_BPS: f64 = 5.0;

pub struct BacktestMomentum;

#[tonic::async_trait]
impl Skill for BacktestMomentum {
    fn manifest(&self) -> Manifest {
        Manifest {
            skill_id: "backtest.momentum",
            version: "1.0",
            name: "Momentum Backtest",
            description: "Long/flat time-series momentum on one symbol: every `rebalance` days go long if the trailing `lookback`-day return is positive, else flat; transaction costs per change. Equity curve (CSV and SVG, with buy and hold and the drawdown) and statistics.",
            input_schema: json!({"type": "object", "additionalProperties": false, "properties": {
                "symbol": {"type": "string", "maxLength": super::MAX_SYMBOL_LEN, "description": "Ticker to backtest (or give strategy_id)."},
                "strategy_id": {"type": "string", "maxLength": 64, "description": "A proposed strategy to backtest instead: its universe (equal weights), lookback, rebalance, costs and risk limits."},
                "lookback": {"type": "integer", "minimum": 1, "maximum": 756, "default": DEFAULT_LOOKBACK, "description": "Trailing days for the momentum signal."},
                "rebalance": {"type": "integer", "minimum": 1, "maximum": 252, "default": DEFAULT_HOLDING, "description": "Trading days between rebalances (as a strategy's rebalance)."},
                "cost_bps": {"type": "number", "minimum": 0, "maximum": 500, "default": DEFAULT_COST_BPS, "description": "Cost per position change, basis points."},
                "fundamental_filter": {"type": "string", "maxLength": 20, "description": "ttm_eps_growth: hold a symbol only while its TTM diluted EPS known on the rebalance day (filings filed on or before it) is above the TTM EPS known a year before; point-in-time, so no rebalance sees a later filing. Omit for no filter."},
                "start": date_schema("Start"), "end": date_schema("End")}}),
            output_schema: {
                let mut properties = super::series_statistics();
                properties.extend([
                    ("symbol".to_owned(), json!({"type": "string"})),
                    ("fundamental_filter".to_owned(), json!({"type": "string"})),
                    ("filtered_out".to_owned(), super::count("Rebalance days the fundamental filter kept the position flat although the momentum signal was long.")),
                    ("rebalances".to_owned(), json!({"type": "array", "description": "With a fundamental filter: each rebalance day, its momentum signal, the TTM EPS known then and a year before, and whether the symbol was held.", "items": {"type": "object"}})),
                    ("trades".to_owned(), super::count("Position changes (each entry or exit pays cost_bps).")),
                    ("buy_and_hold_return".to_owned(), super::number(&format!("Return of holding the symbol (or the universe, equal weights) over the same days, {}.", super::FRACTION))),
                    ("lookback".to_owned(), super::count("Trading days of the momentum signal.")),
                    ("rebalance".to_owned(), super::count("Trading days between rebalances.")),
                    ("cost_bps".to_owned(), super::number("Cost per position change, basis points (1 bp = 0.01%).")),
                    ("excess_return".to_owned(), super::number(&format!("A strategy's total_return less buy_and_hold_return, {}.", super::FRACTION))),
                    ("start_reason".to_owned(), json!({"type": "string", "description": "Why a strategy's backtest starts on `start` (its universe's first common day)."})),
                    ("stopped_on".to_owned(), json!({"type": ["string", "null"], "description": "The day the strategy's risk.max_drawdown closed its positions, if it did."})),
                    ("stopped_reason".to_owned(), json!({"type": ["string", "null"], "description": "Why it stopped on stopped_on."})),
                ]);
                json!({"type": "object", "properties": properties})
            },
            profile: Profile::Batch,
            asset_class: "equity",
            source_classes: &["computed"],
            trigger_compatible: true,
            intents: &["backtest", "momentum", "strategy"],
        }
    }

    async fn run(&self, ctx: &Context<'_>, inputs: &Inputs) -> Result<Output, ServiceError> {
        let filter = inputs.text("fundamental_filter");
        if let Some(f) = filter
            && f != EPS_GROWTH
        {
            return Err(ServiceError::invalid(format!(
                "inputs.fundamental_filter: the only filter is {EPS_GROWTH}"
            )));
        }
        if let Some(strategy_id) = inputs.text("strategy_id") {
            return backtest_strategy(ctx, inputs, strategy_id).await;
        }
        let Some(symbol) = inputs.symbol().filter(|s| !s.is_empty()) else {
            return Err(ServiceError::invalid(
                "inputs.symbol: give a symbol or a strategy_id",
            ));
        };
        let series = ctx
            .prices(&symbol, inputs.text("start"), inputs.text("end"))
            .await?;
        ctx.progress(
            1,
            3,
            format!("read {} prices of {symbol}", series.prices.len()),
        );
        let (dates, prices) = (&series.dates, &series.prices);
        let lookback = inputs.count("lookback").unwrap_or(DEFAULT_LOOKBACK);
        let holding = inputs.count("rebalance").unwrap_or(DEFAULT_HOLDING);
        // An absent cost is free, as before a default existed; the manifest's
        // default fills it in for every run that goes through validation.
        let cost = inputs.number("cost_bps").unwrap_or(0.0);
        let gate = match filter {
            Some(_) => Some(eps_gate(ctx, &symbol, dates, prices, lookback, holding).await?),
            None => None,
        };
        let bt = compute::momentum_backtest_gated(prices, lookback, holding, cost, |t| {
            gate.as_ref().is_none_or(|g| g.allowed.contains(&t))
        })
        .ok_or_else(|| too_long("inputs.lookback", lookback + 1, &symbol, prices.len()))?;
        ctx.progress(
            2,
            3,
            format!("backtested {symbol} over {} days", prices.len()),
        );
        let benchmark = plot::buy_and_hold(prices, lookback);
        let buy_hold = benchmark.last().map_or(0.0, |b| b - 1.0);
        let mut csv = String::from("date,equity,position\n");
        for (i, (d, e)) in dates.iter().zip(&bt.equity).enumerate() {
            let pos = if i == 0 {
                0
            } else {
                bt.positions.get(i - 1).copied().unwrap_or(0)
            };
            csv.push_str(&format!("{d},{e:.6},{pos}\n"));
        }
        let svg = plot::equity_curve(
            &format!("{symbol} momentum {lookback}/{holding} equity curve"),
            dates,
            &bt.equity,
            &benchmark,
        );
        let outputs = json!({"symbol": symbol, "lookback": lookback, "rebalance": holding, "cost_bps": cost,
            "start": dates.first(), "end": dates.last(), "total_return": bt.total_return, "cagr": bt.cagr,
            "volatility": bt.volatility, "sharpe": bt.sharpe, "max_drawdown": bt.max_drawdown, "trades": bt.trades,
            "buy_and_hold_return": buy_hold});
        let mut outputs = outputs;
        if let Some(g) = gate {
            outputs["fundamental_filter"] = json!(EPS_GROWTH);
            outputs["filtered_out"] = json!(g.filtered_out);
            outputs["rebalances"] = Value::Array(g.log);
        }
        ctx.progress(3, 3, "wrote the statistics, the equity curve and its chart");
        Ok(Output {
            artifacts: vec![
                Artifact::json("stats.json", &outputs),
                Artifact::csv("equity_curve.csv", csv),
                Artifact::svg("equity_curve.svg", svg),
            ],
            outputs,
        })
    }
}

/// Backtest a proposed strategy: momentum on each symbol of its universe
/// over their common dates, equal initial weights, stopped for good when
/// the portfolio's drawdown passes the strategy's limit. The benchmark is
/// the universe bought and held in equal weights from the same day.
async fn backtest_strategy(
    ctx: &Context<'_>,
    inputs: &Inputs,
    strategy_id: &str,
) -> Result<Output, ServiceError> {
    let strategy = ctx.strategy(strategy_id).await?;
    let spec = &strategy.spec;
    let lookback = usize::try_from(spec.lookback).unwrap_or(1);
    let holding = usize::try_from(spec.rebalance).unwrap_or(1);
    // Steps: each symbol's prices, each symbol's backtest, the results.
    let steps = 2 * spec.universe.len() as u64 + 1;
    let mut done = 0;
    let mut series: Vec<BTreeMap<String, f64>> = Vec::new();
    for symbol in &spec.universe {
        ctx.check()?;
        let s = ctx
            .prices(symbol, inputs.text("start"), inputs.text("end"))
            .await?;
        done += 1;
        ctx.progress(
            done,
            steps,
            format!("read {} prices of {symbol}", s.prices.len()),
        );
        series.push(s.dates.into_iter().zip(s.prices).collect());
    }
    let Some(first) = series.first() else {
        return Err(ServiceError::invalid(
            "strategy_id: the strategy has an empty universe",
        ));
    };
    let dates: Vec<String> = first
        .keys()
        .filter(|d| series.iter().all(|s| s.contains_key(*d)))
        .cloned()
        .collect();
    let mut curves = Vec::new();
    let mut holds = Vec::new();
    let mut filtered_out = 0;
    for (symbol, s) in spec.universe.iter().zip(&series) {
        ctx.check()?;
        let prices: Vec<f64> = dates.iter().filter_map(|d| s.get(d).copied()).collect();
        let gate = match inputs.text("fundamental_filter") {
            Some(_) => Some(eps_gate(ctx, symbol, &dates, &prices, lookback, holding).await?),
            None => None,
        };
        let bt = compute::momentum_backtest_gated(&prices, lookback, holding, spec.cost_bps, |t| {
            gate.as_ref().is_none_or(|g| g.allowed.contains(&t))
        })
        .ok_or_else(|| too_long("lookback", lookback + 1, symbol, prices.len()))?;
        if let Some(g) = gate {
            filtered_out += g.filtered_out;
        }
        curves.push(bt.equity);
        holds.push(plot::buy_and_hold(&prices, lookback));
        done += 1;
        ctx.progress(
            done,
            steps,
            format!("backtested {symbol} over {} days", prices.len()),
        );
    }
    let average = |curves: &[Vec<f64>]| -> Vec<f64> {
        let n = curves.len() as f64;
        (0..dates.len())
            .map(|i| curves.iter().map(|c| c[i]).sum::<f64>() / n)
            .collect()
    };
    let mut equity = average(&curves);
    let benchmark = average(&holds);
    let stopped_on = spec
        .risk
        .max_drawdown
        .and_then(|limit| stop_at_drawdown(&mut equity, limit));
    let summary = compute::returns_summary(&equity);
    let mut csv = String::from("date,equity\n");
    for (d, e) in dates.iter().zip(&equity) {
        csv.push_str(&format!("{d},{e:.6}\n"));
    }
    let svg = plot::equity_curve(
        &format!("{} equity curve", strategy.name),
        &dates,
        &equity,
        &benchmark,
    );
    // Why the backtest starts where it does: the universe's common days
    // begin at the latest first bar among its symbols.
    let latest_listed = spec
        .universe
        .iter()
        .zip(&series)
        .filter_map(|(symbol, s)| s.keys().next().map(|d| (d.clone(), symbol.clone())))
        .max();
    let start_reason = match (dates.first(), latest_listed) {
        (Some(start), Some((first_bar, symbol)))
            if spec.universe.len() > 1 && &first_bar == start =>
        {
            format!(
                "the first day every symbol of the universe has a bar: {symbol}'s first bar is {first_bar}; \
             the signal needs {lookback} days more, so positions start later"
            )
        }
        (Some(start), _) => format!(
            "{start} is the first common bar in the range asked (`start`, or the data's first bar); \
             the signal needs {lookback} days, so positions start later"
        ),
        (None, _) => String::new(),
    };
    let total_return = equity.last().map(|e| e - 1.0);
    let buy_and_hold_return = benchmark.last().map(|b| b - 1.0);
    let outputs = json!({"strategy_id": strategy.strategy_id, "name": strategy.name, "universe": spec.universe,
    "start": dates.first(), "end": dates.last(), "start_reason": start_reason,
    "total_return": total_return, "cagr": summary.as_ref().map(|s| s.cagr),
    "volatility": summary.as_ref().map(|s| s.volatility), "sharpe": summary.as_ref().map(|s| s.sharpe),
    "max_drawdown": compute::max_drawdown(&equity),
    "buy_and_hold_return": buy_and_hold_return,
    "excess_return": total_return.zip(buy_and_hold_return).map(|(t, b)| t - b),
    "lookback": lookback, "rebalance": holding, "cost_bps": spec.cost_bps,
    "stopped_on": stopped_on.map(|i| dates[i].clone()),
    "stopped_reason": stopped_on.zip(spec.risk.max_drawdown).map(|(i, limit)| format!(
        "on {} the equity fell more than {limit} (the strategy's risk.max_drawdown, {}) below its peak; \
         the positions were closed and it stayed flat to the end",
        dates[i], super::FRACTION
    ))});
    let mut outputs = outputs;
    if inputs.text("fundamental_filter").is_some() {
        outputs["fundamental_filter"] = json!(EPS_GROWTH);
        outputs["filtered_out"] = json!(filtered_out);
    }
    ctx.progress(
        steps,
        steps,
        "wrote the statistics, the equity curve and its chart",
    );
    Ok(Output {
        artifacts: vec![
            Artifact::json("stats.json", &outputs),
            Artifact::csv("equity_curve.csv", csv),
            Artifact::svg("equity_curve.svg", svg),
        ],
        outputs,
    })
}

/// Hold the equity flat from the first day its drawdown passes `limit`;
/// that day's index, if it came.
fn stop_at_drawdown(equity: &mut [f64], limit: f64) -> Option<usize> {
    let mut peak = f64::MIN;
    let mut stopped_on = None;
    for i in 0..equity.len() {
        if let Some(j) = stopped_on {
            equity[i] = equity[j];
            continue;
        }
        peak = peak.max(equity[i]);
        if 1.0 - equity[i] / peak > limit {
            stopped_on = Some(i);
        }
    }
    stopped_on
}

/// The one fundamental filter: TTM diluted EPS grew.
const EPS_GROWTH: &str = "ttm_eps_growth";

/// The rebalance days on which the filter lets a long signal through, how
/// many long signals it stopped, and a record of each rebalance.
struct Gate {
    allowed: BTreeSet<usize>,
    filtered_out: usize,
    log: Vec<Value>,
}

/// Decide the TTM EPS filter on every rebalance day of a backtest of
/// `symbol`, asking the broker only for what was filed on or before the
/// day. Days with a flat momentum signal need no fundamentals.
async fn eps_gate(
    ctx: &Context<'_>,
    symbol: &str,
    dates: &[String],
    prices: &[f64],
    lookback: usize,
    holding: usize,
) -> Result<Gate, ServiceError> {
    // A symbol with no fundamentals at all is an input error, not a
    // backtest that is flat throughout.
    ctx.fundamentals(ttm_request(symbol, None))
        .await
        .map_err(|e| {
            ServiceError::new(e.code, format!("inputs.fundamental_filter: {}", e.message))
        })?;
    let mut cache: HashMap<String, Option<(f64, String)>> = HashMap::new();
    let mut gate = Gate {
        allowed: BTreeSet::new(),
        filtered_out: 0,
        log: Vec::new(),
    };
    for t in compute::rebalance_days(prices.len(), lookback, holding) {
        ctx.check()?;
        let date = &dates[t];
        if !compute::momentum_long(prices, t, lookback) {
            gate.log
                .push(json!({"date": date, "momentum": "flat", "held": false}));
            continue;
        }
        let before = year_before(date)?;
        let now = ttm_eps(ctx, symbol, date, &mut cache).await?;
        let then = ttm_eps(ctx, symbol, &before, &mut cache).await?;
        let grew = matches!((&now, &then), (Some((a, _)), Some((b, _))) if a > b);
        if grew {
            gate.allowed.insert(t);
        } else {
            gate.filtered_out += 1;
        }
        gate.log.push(json!({"date": date, "momentum": "long",
            "ttm_eps": now.as_ref().map(|n| n.0), "ttm_period_end": now.as_ref().map(|n| n.1.clone()),
            "ttm_eps_year_before": then.as_ref().map(|n| n.0), "year_before": before,
            "held": grew}));
    }
    Ok(gate)
}

fn ttm_request(symbol: &str, as_of: Option<&str>) -> bpb::GetFundamentalsRequest {
    bpb::GetFundamentalsRequest {
        symbol: symbol.to_owned(),
        as_of: as_of.map(str::to_owned),
        period: Some("quarter".to_owned()),
        limit: Some(1),
    }
}

/// The TTM diluted EPS of `symbol` and the day its twelve months end, as
/// known on `as_of`; `None` when nothing was filed by then.
async fn ttm_eps(
    ctx: &Context<'_>,
    symbol: &str,
    as_of: &str,
    cache: &mut HashMap<String, Option<(f64, String)>>,
) -> Result<Option<(f64, String)>, ServiceError> {
    if let Some(known) = cache.get(as_of) {
        return Ok(known.clone());
    }
    let known = match ctx.fundamentals(ttm_request(symbol, Some(as_of))).await {
        Ok(f) => f
            .ttm
            .iter()
            .find(|v| v.item == "eps_diluted")
            .map(|v| (v.value, v.period_end.clone())),
        // Before the company's first filing nothing is known.
        Err(e) if e.code == Code::NotFound => None,
        Err(e) => return Err(e),
    };
    cache.insert(as_of.to_owned(), known.clone());
    Ok(known)
}

/// The same day a year earlier (28 February for 29 February).
fn year_before(date: &str) -> Result<String, ServiceError> {
    let bad = || {
        ServiceError::invalid(format!(
            "a bar's date is not YYYY-MM-DD ({} characters)",
            date.len()
        ))
    };
    let year: i32 = date.get(..4).and_then(|y| y.parse().ok()).ok_or_else(bad)?;
    let rest = date.get(4..).ok_or_else(bad)?;
    let rest = if rest == "-02-29" { "-02-28" } else { rest };
    Ok(format!("{:04}{rest}", year - 1))
}
