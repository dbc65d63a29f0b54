//! The computations behind the built-in skills, as pure functions of price
//! series. Prices are split- and dividend-adjusted closes, oldest first.

/// Trading days per year, for annualising.
pub const TRADING_DAYS: f64 = 252.0;

/// Daily log returns of a price series.
pub fn log_returns(prices: &[f64]) -> Vec<f64> {
    prices.windows(2).map(|w| (w[1] / w[0]).ln()).collect()
}

/// Sample standard deviation (n − 1); `None` with fewer than two values.
pub fn stdev(values: &[f64]) -> Option<f64> {
    if values.len() < 2 {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some(var.sqrt())
}

/// Annualised close-to-close volatility of the last `window` log returns.
/// `None` when the series has fewer than `window + 1` prices.
pub fn realized_vol(prices: &[f64], window: usize) -> Option<f64> {
    if window < 2 || prices.len() < window + 1 {
        return None;
    }
    let returns = log_returns(&prices[prices.len() - window - 1..]);
    stdev(&returns).map(|s| s * TRADING_DAYS.sqrt())
}

/// CAGR, annualised volatility, Sharpe (zero risk-free rate) and maximum
/// drawdown of a price series.
#[derive(Clone, Debug, PartialEq)]
pub struct ReturnsSummary {
    pub cagr: f64,
    pub volatility: f64,
    pub sharpe: f64,
    pub max_drawdown: f64,
    pub total_return: f64,
    pub days: usize,
}

pub fn returns_summary(prices: &[f64]) -> Option<ReturnsSummary> {
    if prices.len() < 3 {
        return None;
    }
    let first = prices[0];
    let last = prices[prices.len() - 1];
    let returns = log_returns(prices);
    let years = returns.len() as f64 / TRADING_DAYS;
    let cagr = (last / first).powf(1.0 / years) - 1.0;
    let daily_sd = stdev(&returns)?;
    let volatility = daily_sd * TRADING_DAYS.sqrt();
    let mean = returns.iter().sum::<f64>() / returns.len() as f64;
    let sharpe = if daily_sd > 0.0 {
        mean / daily_sd * TRADING_DAYS.sqrt()
    } else {
        0.0
    };
    Some(ReturnsSummary {
        cagr,
        volatility,
        sharpe,
        max_drawdown: max_drawdown(prices),
        total_return: last / first - 1.0,
        days: prices.len(),
    })
}

/// The largest peak-to-trough fall, as a positive fraction.
pub fn max_drawdown(values: &[f64]) -> f64 {
    let mut peak = f64::MIN;
    let mut worst: f64 = 0.0;
    for &v in values {
        peak = peak.max(v);
        if peak > 0.0 {
            worst = worst.max(1.0 - v / peak);
        }
    }
    worst
}

/// Pearson correlation of two equally long series.
pub fn correlation(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 3 {
        return None;
    }
    let n = a.len() as f64;
    let (ma, mb) = (a.iter().sum::<f64>() / n, b.iter().sum::<f64>() / n);
    let cov: f64 = a.iter().zip(b).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = a.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = b.iter().map(|y| (y - mb).powi(2)).sum();
    (va > 0.0 && vb > 0.0).then(|| cov / (va * vb).sqrt())
}

/// A long/flat momentum backtest.
#[derive(Clone, Debug, PartialEq)]
pub struct Backtest {
    /// Equity, starting at 1.0, one value per price.
    pub equity: Vec<f64>,
    /// Position held over each day (1 long, 0 flat), one per return.
    pub positions: Vec<u8>,
    pub trades: usize,
    pub total_return: f64,
    pub cagr: f64,
    pub volatility: f64,
    pub sharpe: f64,
    pub max_drawdown: f64,
}

/// Every `holding` days, go long for the next `holding` days when the
/// trailing `lookback`-day return is positive, else stay flat. Each change
/// of position costs `cost_bps` basis points of equity.
pub fn momentum_backtest(
    prices: &[f64],
    lookback: usize,
    holding: usize,
    cost_bps: f64,
) -> Option<Backtest> {
    momentum_backtest_gated(prices, lookback, holding, cost_bps, |_| true)
}

/// The days on which [`momentum_backtest`] rebalances: every `holding`
/// days from day `lookback`, deciding on that day's close.
pub fn rebalance_days(len: usize, lookback: usize, holding: usize) -> Vec<usize> {
    if lookback == 0 || holding == 0 || len < lookback + 2 {
        return Vec::new();
    }
    (lookback..len - 1).step_by(holding).collect()
}

/// Whether the momentum signal is long on day `t` (trailing `lookback`-day
/// return above zero).
pub fn momentum_long(prices: &[f64], t: usize, lookback: usize) -> bool {
    t >= lookback && prices[t] / prices[t - lookback] - 1.0 > 0.0
}

/// [`momentum_backtest`] where a long signal on rebalance day `t` is taken
/// only when `allow(t)` (a filter such as fundamentals known on that day);
/// otherwise the position is flat until the next rebalance.
pub fn momentum_backtest_gated(
    prices: &[f64],
    lookback: usize,
    holding: usize,
    cost_bps: f64,
    allow: impl Fn(usize) -> bool,
) -> Option<Backtest> {
    if lookback == 0 || holding == 0 || prices.len() < lookback + 2 {
        return None;
    }
    let cost = cost_bps / 10_000.0;
    let mut equity = vec![1.0; lookback + 1];
    let mut positions = vec![0u8; lookback];
    let mut position = 0u8;
    let mut trades = 0;
    let mut value = 1.0;
    for t in lookback..prices.len() - 1 {
        if (t - lookback).is_multiple_of(holding) {
            let signal = u8::from(momentum_long(prices, t, lookback) && allow(t));
            if signal != position {
                value *= 1.0 - cost;
                trades += 1;
                position = signal;
            }
        }
        if position == 1 {
            value *= prices[t + 1] / prices[t];
        }
        positions.push(position);
        equity.push(value);
    }
    let daily: Vec<f64> = equity.windows(2).map(|w| w[1] / w[0] - 1.0).collect();
    let years = daily.len() as f64 / TRADING_DAYS;
    let sd = stdev(&daily).unwrap_or(0.0);
    let mean = daily.iter().sum::<f64>() / daily.len().max(1) as f64;
    Some(Backtest {
        trades,
        total_return: value - 1.0,
        cagr: value.powf(1.0 / years.max(f64::EPSILON)) - 1.0,
        volatility: sd * TRADING_DAYS.sqrt(),
        sharpe: if sd > 0.0 {
            mean / sd * TRADING_DAYS.sqrt()
        } else {
            0.0
        },
        max_drawdown: max_drawdown(&equity),
        equity,
        positions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volatility_of_a_known_series() {
        // Alternating ±1% moves: log returns ±0.00995, sd ≈ 0.0102 (sample).
        let mut prices = vec![100.0];
        for i in 0..40 {
            let last = *prices.last().expect("non-empty");
            prices.push(if i % 2 == 0 { last * 1.01 } else { last / 1.01 });
        }
        let vol = realized_vol(&prices, 20).expect("enough data");
        let r = (1.01f64).ln();
        let expected = (r * r * 20.0 / 19.0).sqrt() * 252f64.sqrt();
        assert!((vol - expected).abs() < 1e-12, "{vol} vs {expected}");
        assert!(realized_vol(&prices, 40).is_some());
        assert!(
            realized_vol(&prices, 41).is_none(),
            "a window longer than the data"
        );
    }

    #[test]
    fn drawdown_and_correlation() {
        assert!((max_drawdown(&[1.0, 2.0, 1.0, 3.0, 1.5]) - 0.5).abs() < 1e-12);
        let a = [1.0, 2.0, 3.0, 4.0];
        assert!((correlation(&a, &[2.0, 4.0, 6.0, 8.0]).expect("defined") - 1.0).abs() < 1e-12);
        assert!((correlation(&a, &[8.0, 6.0, 4.0, 2.0]).expect("defined") + 1.0).abs() < 1e-12);
    }

    #[test]
    fn momentum_is_long_in_uptrends_and_pays_costs() {
        let up: Vec<f64> = (0..100).map(|i| 100.0 * 1.01f64.powi(i)).collect();
        let bt = momentum_backtest(&up, 10, 5, 10.0).expect("runs");
        assert_eq!(bt.trades, 1, "enters once and stays long");
        let expected = (1.0 - 0.001) * up[99] / up[10];
        assert!((bt.equity.last().copied().unwrap_or(0.0) - expected).abs() < 1e-9);
        assert_eq!(bt.equity.len(), up.len());
        let down: Vec<f64> = (0..100).map(|i| 100.0 * 0.99f64.powi(i)).collect();
        let flat = momentum_backtest(&down, 10, 5, 10.0).expect("runs");
        assert_eq!(
            (flat.trades, flat.total_return),
            (0, 0.0),
            "stays flat in a downtrend"
        );
    }
}
