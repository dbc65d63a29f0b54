//! Time as Ithaca stores and shows it: integer milliseconds since the Unix
//! epoch in the database, RFC 3339 on the wire.

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// Milliseconds since the Unix epoch, now.
pub fn now_ms() -> i64 {
    let nanos = OffsetDateTime::now_utc().unix_timestamp_nanos();
    i64::try_from(nanos / 1_000_000).unwrap_or(i64::MAX)
}

/// RFC 3339 text for a millisecond timestamp, with millisecond precision.
pub fn rfc3339(ms: i64) -> String {
    let nanos = i128::from(ms) * 1_000_000;
    match OffsetDateTime::from_unix_timestamp_nanos(nanos) {
        Ok(t) => t.format(&Rfc3339).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// RFC 3339 text for an optional timestamp; empty when absent.
pub fn rfc3339_opt(ms: Option<i64>) -> String {
    ms.map(rfc3339).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_epoch_millis() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_500), "1970-01-01T00:00:01.5Z");
        assert_eq!(rfc3339_opt(None), "");
    }
}
