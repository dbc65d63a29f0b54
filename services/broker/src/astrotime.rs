//! Time as astronomers write it: ISO 8601, Julian date and MJD, all UTC.
//!
//! ZTF's `jd` is a UTC Julian date (days since -4712-01-01T12:00 UTC, with
//! no leap-second correction), so conversions here are plain arithmetic on
//! the Unix time scale and every answer states the scale.

use ithaca_kit::error::ServiceError;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// JD of the Unix epoch, 1970-01-01T00:00:00 UTC.
pub const UNIX_EPOCH_JD: f64 = 2_440_587.5;
/// JD minus MJD.
pub const MJD_OFFSET: f64 = 2_400_000.5;
/// JD of J2000.0.
pub const J2000_JD: f64 = 2_451_545.0;

/// The scale every time here is on.
pub const SCALE: &str = "UTC";

/// What a time was read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeFormat {
    Iso,
    Jd,
    Mjd,
}

impl TimeFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            TimeFormat::Iso => "iso",
            TimeFormat::Jd => "jd",
            TimeFormat::Mjd => "mjd",
        }
    }
}

/// A converted time.
#[derive(Clone, Debug, PartialEq)]
pub struct Converted {
    pub from: TimeFormat,
    pub jd: f64,
}

impl Converted {
    pub fn mjd(&self) -> f64 {
        self.jd - MJD_OFFSET
    }
    pub fn iso(&self) -> String {
        jd_to_iso(self.jd)
    }
    pub fn julian_year(&self) -> f64 {
        julian_year(self.jd)
    }
}

/// The Julian year of a JD (2000.0 at J2000.0).
pub fn julian_year(jd: f64) -> f64 {
    2000.0 + (jd - J2000_JD) / 365.25
}

/// ISO 8601 (UTC, millisecond precision) of a JD; empty when out of range.
pub fn jd_to_iso(jd: f64) -> String {
    let ms = ((jd - UNIX_EPOCH_JD) * 86_400_000.0).round();
    if !ms.is_finite() {
        return String::new();
    }
    let nanos = (ms as i128) * 1_000_000;
    match OffsetDateTime::from_unix_timestamp_nanos(nanos) {
        Ok(t) => t.format(&Rfc3339).unwrap_or_default(),
        Err(_) => String::new(),
    }
}

/// JD of a point in time.
pub fn datetime_to_jd(t: OffsetDateTime) -> f64 {
    UNIX_EPOCH_JD + (t.unix_timestamp_nanos() as f64) / 86_400e9
}

/// JD now.
pub fn now_jd() -> f64 {
    datetime_to_jd(OffsetDateTime::now_utc())
}

/// Read `value` as `from` (`iso`, `jd`, `mjd`) or, without it, guess: text
/// with `-` after the first character or `:` is ISO, a number above
/// 2,400,000 a JD, any other number an MJD. Errors name the field.
pub fn convert(value: &str, from: Option<&str>) -> Result<Converted, ServiceError> {
    let value = value.trim();
    if value.is_empty() {
        return Err(ServiceError::invalid(
            "value: required (ISO 8601, JD or MJD)",
        ));
    }
    let format = match from.map(|f| f.trim().to_ascii_lowercase()) {
        Some(f) if f == "iso" => TimeFormat::Iso,
        Some(f) if f == "jd" => TimeFormat::Jd,
        Some(f) if f == "mjd" => TimeFormat::Mjd,
        Some(f) if f.is_empty() => guess(value),
        Some(other) => {
            return Err(ServiceError::invalid(format!(
                "from: {other:?} is not one of iso, jd, mjd"
            )));
        }
        None => guess(value),
    };
    let jd = match format {
        TimeFormat::Iso => datetime_to_jd(parse_iso(value)?),
        TimeFormat::Jd => number(value)?,
        TimeFormat::Mjd => number(value)? + MJD_OFFSET,
    };
    // Years 1 to 9999: what ISO 8601 can write without extensions.
    if !(1_721_425.5..=5_373_484.5).contains(&jd) {
        return Err(ServiceError::invalid(format!(
            "value: {value} as {} is outside the years 1 to 9999",
            format.as_str()
        )));
    }
    Ok(Converted { from: format, jd })
}

fn guess(value: &str) -> TimeFormat {
    if value.contains(':') || value.chars().skip(1).any(|c| c == '-') || value.contains('T') {
        return TimeFormat::Iso;
    }
    match value.parse::<f64>() {
        Ok(n) if n > 2_400_000.0 => TimeFormat::Jd,
        Ok(_) => TimeFormat::Mjd,
        Err(_) => TimeFormat::Iso,
    }
}

fn number(value: &str) -> Result<f64, ServiceError> {
    value
        .parse::<f64>()
        .ok()
        .filter(|n| n.is_finite())
        .ok_or_else(|| ServiceError::invalid(format!("value: {value:?} is not a number")))
}

/// ISO 8601 with an offset or `Z`; a date alone is midnight UTC; a
/// date-time without an offset is taken as UTC.
fn parse_iso(value: &str) -> Result<OffsetDateTime, ServiceError> {
    if let Ok(t) = OffsetDateTime::parse(value, &Rfc3339) {
        return Ok(t);
    }
    let with_zone = if value.len() == 10 {
        format!("{value}T00:00:00Z")
    } else {
        let v = value.replacen(' ', "T", 1);
        let time_part = v.get(10..).unwrap_or("");
        let has_zone = v.ends_with('Z') || time_part.contains('+') || time_part.contains('-');
        if has_zone { v } else { format!("{v}Z") }
    };
    let with_seconds = if with_zone.len() == 17 && with_zone.ends_with('Z') {
        // YYYY-MM-DDTHH:MMZ
        format!("{}:00Z", &with_zone[..16])
    } else {
        with_zone
    };
    OffsetDateTime::parse(&with_seconds, &Rfc3339).map_err(|_| {
        ServiceError::invalid(format!(
            "value: {value:?} is not ISO 8601 (for example 2017-08-17T12:41:04Z or 2017-08-17)"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_every_way_on_utc() {
        // GW170817: 2017-08-17T12:41:04.4Z = JD 2457983.0285...
        let t = convert("2017-08-17T12:41:04.4Z", None).expect("iso");
        assert_eq!(t.from, TimeFormat::Iso);
        assert!((t.jd - 2_457_983.028_523_1).abs() < 1e-6, "{}", t.jd);
        assert!((t.mjd() - 57_982.528_523_1).abs() < 1e-6);
        assert_eq!(t.iso(), "2017-08-17T12:41:04.4Z");
        let back = convert("2457983.0285231", None).expect("jd");
        assert_eq!(back.from, TimeFormat::Jd);
        assert!(back.iso().starts_with("2017-08-17T12:41:04"));
        let mjd = convert("57982.5285231", None).expect("mjd");
        assert_eq!(mjd.from, TimeFormat::Mjd);
        assert!((mjd.jd - back.jd).abs() < 1e-9);
        assert_eq!(convert("2023-10-12", None).expect("date").jd, 2_460_229.5);
        assert_eq!(
            convert("2023-10-12 10:24", None).expect("minutes").iso(),
            "2023-10-12T10:24:00Z"
        );
        assert!((julian_year(J2000_JD) - 2000.0).abs() < 1e-12);
        let err = convert("60000", Some("jd")).expect_err("JD 60000 is year -4548");
        assert!(err.message.starts_with("value:"), "{}", err.message);
        assert!(convert("yesterday", None).is_err());
        assert!(convert("1", Some("fortnight")).is_err());
    }
}
