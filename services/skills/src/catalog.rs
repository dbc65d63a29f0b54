//! The built-in skill manifests and search over them.

use serde_json::{Value, json};

/// One versioned manifest.
#[derive(Clone, Debug)]
pub struct Manifest {
    pub skill_id: &'static str,
    pub version: &'static str,
    pub name: &'static str,
    pub description: &'static str,
    pub input_schema: Value,
    pub output_schema: Value,
    pub profile: &'static str,
    pub asset_class: &'static str,
    pub source_classes: &'static [&'static str],
    pub trigger_compatible: bool,
    pub intents: &'static [&'static str],
}

fn symbol() -> Value {
    json!({"type": "string", "description": "Ticker, for example AAPL (see list_symbols)."})
}

fn date(what: &str) -> Value {
    json!({"type": "string", "format": "date", "description": format!("{what}, YYYY-MM-DD (default: the {} bar).", if what == "Start" { "first" } else { "last" })})
}

/// Every built-in skill, latest version last within an id.
pub fn builtin() -> Vec<Manifest> {
    vec![
        Manifest {
            skill_id: "vol.realized",
            version: "1.0",
            name: "Realized Volatility",
            description: "Annualized realized (close-to-close log-return) volatility of one symbol over a trailing window of trading days, from adjusted closes.",
            input_schema: json!({"type": "object", "additionalProperties": false, "required": ["symbol"], "properties": {
                "symbol": symbol(),
                "window": {"type": "integer", "minimum": 2, "maximum": 2520, "default": 21, "description": "Trading days of returns."},
                "end": date("End")}}),
            output_schema: json!({"type": "object", "properties": {
                "symbol": {"type": "string"}, "window": {"type": "integer"}, "volatility": {"type": "number"},
                "as_of": {"type": "string"}, "observations": {"type": "integer"}}}),
            profile: "interactive",
            asset_class: "vol",
            source_classes: &["computed"],
            trigger_compatible: false,
            intents: &["risk", "volatility"],
        },
        Manifest {
            skill_id: "vol.term_structure",
            version: "1.0",
            name: "Vol Term Structure",
            description: "Realized volatility of one symbol over several trailing windows (term structure), with an SVG plot.",
            input_schema: json!({"type": "object", "additionalProperties": false, "required": ["symbol"], "properties": {
                "symbol": symbol(),
                "windows": {"type": "array", "items": {"type": "integer", "minimum": 2, "maximum": 2520}, "default": [5, 21, 63, 126, 252], "description": "Windows in trading days."},
                "end": date("End")}}),
            output_schema: json!({"type": "object", "properties": {
                "symbol": {"type": "string"}, "as_of": {"type": "string"},
                "points": {"type": "array", "items": {"type": "object", "properties": {"window": {"type": "integer"}, "volatility": {"type": "number"}}}}}}),
            profile: "interactive",
            asset_class: "vol",
            source_classes: &["computed"],
            trigger_compatible: false,
            intents: &["risk", "volatility"],
        },
        Manifest {
            skill_id: "returns.summary",
            version: "1.0",
            name: "Returns Summary",
            description: "CAGR, annualized volatility, Sharpe ratio (zero risk-free rate) and maximum drawdown of one symbol over a date range.",
            input_schema: json!({"type": "object", "additionalProperties": false, "required": ["symbol"], "properties": {
                "symbol": symbol(), "start": date("Start"), "end": date("End")}}),
            output_schema: json!({"type": "object", "properties": {
                "symbol": {"type": "string"}, "cagr": {"type": "number"}, "volatility": {"type": "number"},
                "sharpe": {"type": "number"}, "max_drawdown": {"type": "number"}, "total_return": {"type": "number"}}}),
            profile: "interactive",
            asset_class: "equity",
            source_classes: &["computed"],
            trigger_compatible: false,
            intents: &["performance", "risk"],
        },
        Manifest {
            skill_id: "corr.peers",
            version: "1.0",
            name: "Peer Correlations",
            description: "Correlations of daily log returns between one symbol and its peers over their common dates, nearest peers first.",
            input_schema: json!({"type": "object", "additionalProperties": false, "required": ["symbol"], "properties": {
                "symbol": symbol(),
                "peers": {"type": "array", "items": {"type": "string"}, "description": "Peer tickers (default: every other symbol)."},
                "start": date("Start"), "end": date("End")}}),
            output_schema: json!({"type": "object", "properties": {
                "symbol": {"type": "string"},
                "peers": {"type": "array", "items": {"type": "object", "properties": {"symbol": {"type": "string"}, "correlation": {"type": "number"}, "observations": {"type": "integer"}}}}}}),
            profile: "interactive",
            asset_class: "equity",
            source_classes: &["computed"],
            trigger_compatible: false,
            intents: &["peers", "correlation", "risk"],
        },
        Manifest {
            skill_id: "backtest.momentum",
            version: "1.0",
            name: "Momentum Backtest",
            description: "Long/flat time-series momentum on one symbol: every `holding` days go long if the trailing `lookback`-day return is positive, else flat; transaction costs per change. Equity curve (CSV and SVG) and statistics.",
            input_schema: json!({"type": "object", "additionalProperties": false, "properties": {
                "symbol": {"type": "string", "description": "Ticker to backtest (or give strategy_id)."},
                "strategy_id": {"type": "string", "description": "A proposed strategy to backtest instead: its universe (equal weights), lookback, rebalance, costs and risk limits."},
                "lookback": {"type": "integer", "minimum": 1, "maximum": 756, "default": 126, "description": "Trailing days for the momentum signal."},
                "holding": {"type": "integer", "minimum": 1, "maximum": 252, "default": 21, "description": "Days between rebalances."},
                "cost_bps": {"type": "number", "minimum": 0, "maximum": 500, "default": 5, "description": "Cost per position change, basis points."},
                "start": date("Start"), "end": date("End")}}),
            output_schema: json!({"type": "object", "properties": {
                "symbol": {"type": "string"}, "total_return": {"type": "number"}, "cagr": {"type": "number"},
                "volatility": {"type": "number"}, "sharpe": {"type": "number"}, "max_drawdown": {"type": "number"},
                "trades": {"type": "integer"}, "buy_and_hold_return": {"type": "number"}}}),
            profile: "batch",
            asset_class: "equity",
            source_classes: &["computed"],
            trigger_compatible: true,
            intents: &["backtest", "momentum", "strategy"],
        },
    ]
}

/// The manifest of `skill_id` at `version`, or its latest version.
pub fn find(skill_id: &str, version: Option<&str>) -> Option<Manifest> {
    builtin()
        .into_iter()
        .rfind(|m| m.skill_id == skill_id && version.is_none_or(|v| v == m.version))
}

/// Skills matching the filters, best first, by a simple term score: a word
/// in the id or name counts three, in an intent two, in the description one.
pub fn search(
    query: Option<&str>,
    asset_class: Option<&str>,
    intent: Option<&str>,
) -> Vec<Manifest> {
    let words: Vec<String> = query
        .unwrap_or("")
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let mut scored: Vec<(usize, Manifest)> = builtin()
        .into_iter()
        .filter(|m| asset_class.is_none_or(|a| m.asset_class.eq_ignore_ascii_case(a)))
        .filter(|m| intent.is_none_or(|i| m.intents.iter().any(|x| x.eq_ignore_ascii_case(i))))
        .filter_map(|m| {
            if words.is_empty() {
                return Some((0, m));
            }
            let head = format!("{} {}", m.skill_id, m.name).to_lowercase();
            let desc = m.description.to_lowercase();
            let score: usize = words
                .iter()
                .map(|w| {
                    3 * usize::from(head.contains(w.as_str()))
                        + 2 * usize::from(m.intents.iter().any(|i| i.contains(w.as_str())))
                        + usize::from(desc.contains(w.as_str()))
                })
                .sum();
            (score > 0).then_some((score, m))
        })
        .collect();
    scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.skill_id.cmp(b.1.skill_id)));
    scored.into_iter().map(|(_, m)| m).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_ranks_and_filters() {
        let hits = search(Some("volatility"), None, None);
        assert_eq!(hits[0].skill_id, "vol.realized");
        assert!(hits.iter().any(|m| m.skill_id == "vol.term_structure"));
        let vol: Vec<_> = search(None, Some("vol"), Some("risk"))
            .into_iter()
            .map(|m| m.skill_id)
            .collect();
        assert_eq!(vol, vec!["vol.realized", "vol.term_structure"]);
        assert!(search(Some("astrology"), None, None).is_empty());
        assert!(find("vol.realized", Some("1.0")).is_some());
        assert!(find("vol.realized", Some("9.9")).is_none());
    }
}
