//! `backtest.momentum`: long/flat time-series momentum on one symbol, or on
//! each symbol of a proposed strategy's universe (equal weights, stopped at
//! the strategy's drawdown limit). A batch skill.

use super::{Artifact, Context, Inputs, Output, Skill, date_schema, too_long};
use crate::catalog::Manifest;
use crate::model::Profile;
use crate::{compute, plot};
use ithaca_kit::error::ServiceError;
use serde_json::json;
use std::collections::BTreeMap;

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
            description: "Long/flat time-series momentum on one symbol: every `holding` days go long if the trailing `lookback`-day return is positive, else flat; transaction costs per change. Equity curve (CSV and SVG, with buy and hold and the drawdown) and statistics.",
            input_schema: json!({"type": "object", "additionalProperties": false, "properties": {
                "symbol": {"type": "string", "maxLength": super::MAX_SYMBOL_LEN, "description": "Ticker to backtest (or give strategy_id)."},
                "strategy_id": {"type": "string", "maxLength": 64, "description": "A proposed strategy to backtest instead: its universe (equal weights), lookback, rebalance, costs and risk limits."},
                "lookback": {"type": "integer", "minimum": 1, "maximum": 756, "default": DEFAULT_LOOKBACK, "description": "Trailing days for the momentum signal."},
                "holding": {"type": "integer", "minimum": 1, "maximum": 252, "default": DEFAULT_HOLDING, "description": "Days between rebalances."},
                "cost_bps": {"type": "number", "minimum": 0, "maximum": 500, "default": DEFAULT_COST_BPS, "description": "Cost per position change, basis points."},
                "start": date_schema("Start"), "end": date_schema("End")}}),
            output_schema: json!({"type": "object", "properties": {
                "symbol": {"type": "string"}, "total_return": {"type": "number"}, "cagr": {"type": "number"},
                "volatility": {"type": "number"}, "sharpe": {"type": "number"}, "max_drawdown": {"type": "number"},
                "trades": {"type": "integer"}, "buy_and_hold_return": {"type": "number"}}}),
            profile: Profile::Batch,
            asset_class: "equity",
            source_classes: &["computed"],
            trigger_compatible: true,
            intents: &["backtest", "momentum", "strategy"],
        }
    }

    async fn run(&self, ctx: &Context<'_>, inputs: &Inputs) -> Result<Output, ServiceError> {
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
        let holding = inputs.count("holding").unwrap_or(DEFAULT_HOLDING);
        // An absent cost is free, as before a default existed; the manifest's
        // default fills it in for every run that goes through validation.
        let cost = inputs.number("cost_bps").unwrap_or(0.0);
        let bt = compute::momentum_backtest(prices, lookback, holding, cost)
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
        let outputs = json!({"symbol": symbol, "lookback": lookback, "holding": holding, "cost_bps": cost,
            "start": dates.first(), "end": dates.last(), "total_return": bt.total_return, "cagr": bt.cagr,
            "volatility": bt.volatility, "sharpe": bt.sharpe, "max_drawdown": bt.max_drawdown, "trades": bt.trades,
            "buy_and_hold_return": buy_hold});
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
    for (symbol, s) in spec.universe.iter().zip(&series) {
        ctx.check()?;
        let prices: Vec<f64> = dates.iter().filter_map(|d| s.get(d).copied()).collect();
        let bt = compute::momentum_backtest(&prices, lookback, holding, spec.cost_bps)
            .ok_or_else(|| too_long("lookback", lookback + 1, symbol, prices.len()))?;
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
    let outputs = json!({"strategy_id": strategy.strategy_id, "name": strategy.name, "universe": spec.universe,
        "start": dates.first(), "end": dates.last(),
        "total_return": equity.last().map(|e| e - 1.0), "cagr": summary.as_ref().map(|s| s.cagr),
        "volatility": summary.as_ref().map(|s| s.volatility), "sharpe": summary.as_ref().map(|s| s.sharpe),
        "max_drawdown": compute::max_drawdown(&equity),
        "stopped_on": stopped_on.map(|i| dates[i].clone())});
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
