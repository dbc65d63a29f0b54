//! Market-data domain rules: symbols, dates, fields and bar sanity.

use ithaca_kit::error::{ServiceError, quote};
use time::Date;
use time::macros::format_description;

/// Fields a price history can return.
pub const FIELDS: [&str; 6] = ["open", "high", "low", "close", "volume", "adj_close"];
/// Default and largest number of bars per history request. The default holds
/// any calendar year's trading days (at most 253) in one page, about 35 KB
/// with every field; `limit` asks for more, up to [`MAX_LIMIT`].
pub const DEFAULT_LIMIT: i64 = 260;
pub const MAX_LIMIT: i64 = 5000;

/// Check a ticker: 1-16 characters of A-Z, 0-9, `.` and `-`, upper-cased.
pub fn parse_symbol(raw: &str) -> Result<String, ServiceError> {
    let symbol = raw.trim().to_ascii_uppercase();
    let valid = !symbol.is_empty()
        && symbol.len() <= 16
        && symbol
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    if valid {
        Ok(symbol)
    } else {
        Err(ServiceError::invalid(format!(
            "symbol: {} is not a ticker (1-16 letters, digits, '.' or '-')",
            quote(raw)
        )))
    }
}

/// Check a calendar date in YYYY-MM-DD.
pub fn parse_date(field: &str, raw: &str) -> Result<String, ServiceError> {
    let format = format_description!("[year]-[month]-[day]");
    Date::parse(raw.trim(), format)
        .map(|d| d.format(format).unwrap_or_default())
        .map_err(|_| {
            ServiceError::invalid(format!(
                "{field}: {} is not a date (YYYY-MM-DD)",
                quote(raw)
            ))
        })
}

/// Where a price history's next page starts: strictly before or after a
/// date, given as the inclusive bound of the range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cursor {
    /// Bars up to the day before this date (`before:DATE`).
    Before(String),
    /// Bars from the day after this date (`after:DATE`).
    After(String),
}

/// A `cursor` as a page's `next_cursor` gave it.
pub fn parse_cursor(raw: &str) -> Result<Cursor, ServiceError> {
    let bad = || {
        ServiceError::invalid(format!(
            "cursor: {} is not a next_cursor (before:YYYY-MM-DD or after:YYYY-MM-DD)",
            quote(raw)
        ))
    };
    let (side, date) = raw.trim().split_once(':').ok_or_else(bad)?;
    let format = format_description!("[year]-[month]-[day]");
    let day = Date::parse(date, format).map_err(|_| bad())?;
    let (bound, make): (Option<Date>, fn(String) -> Cursor) = match side {
        "before" => (day.previous_day(), Cursor::Before),
        "after" => (day.next_day(), Cursor::After),
        _ => return Err(bad()),
    };
    let bound = bound.ok_or_else(bad)?;
    Ok(make(bound.format(format).unwrap_or_default()))
}

/// Which bar fields to return; all when none are named.
pub fn parse_fields(raw: &[String]) -> Result<Vec<&'static str>, ServiceError> {
    if raw.is_empty() {
        return Ok(FIELDS.to_vec());
    }
    let mut fields = Vec::new();
    for name in raw {
        let Some(field) = FIELDS.iter().find(|f| **f == name.trim()) else {
            return Err(ServiceError::invalid(format!(
                "fields: unknown field {}; valid fields: {}",
                quote(name),
                FIELDS.join(", ")
            )));
        };
        if !fields.contains(field) {
            fields.push(*field);
        }
    }
    Ok(fields)
}

/// A bar whose prices contradict each other, as a reason.
pub fn bar_problem(
    open: f64,
    high: f64,
    low: f64,
    close: f64,
    volume: i64,
    adj_close: f64,
) -> Option<&'static str> {
    let prices = [open, high, low, close, adj_close];
    if prices.iter().any(|p| !p.is_finite() || *p <= 0.0) {
        return Some("prices must be positive numbers");
    }
    if volume < 0 {
        return Some("volume must not be negative");
    }
    if high < low || high < open.max(close) || low > open.min(close) {
        return Some("high/low do not bound open and close");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_dates_and_fields() {
        assert_eq!(parse_symbol(" aapl ").expect("valid"), "AAPL");
        assert!(parse_symbol("AAPL; DROP TABLE").is_err());
        assert!(parse_symbol("").is_err());
        assert_eq!(
            parse_date("start", "2004-08-19").expect("valid"),
            "2004-08-19"
        );
        assert!(parse_date("start", "2004-02-30").is_err());
        assert!(parse_date("start", "19/08/2004").is_err());
        assert_eq!(parse_fields(&[]).expect("all"), FIELDS.to_vec());
        assert!(parse_fields(&["price".into()]).is_err());
    }

    #[test]
    fn bars_must_be_consistent() {
        assert_eq!(bar_problem(10.0, 11.0, 9.0, 10.5, 100, 1.0), None);
        assert!(bar_problem(10.0, 9.0, 11.0, 10.0, 100, 1.0).is_some());
        assert!(bar_problem(-1.0, 11.0, 9.0, 10.0, 100, 1.0).is_some());
        assert!(bar_problem(10.0, 11.0, 9.0, 10.0, -5, 1.0).is_some());
    }
}
