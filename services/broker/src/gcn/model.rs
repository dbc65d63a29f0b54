//! The GCN domain's types: the canonical trigger time that keys an event,
//! event kinds, names (aliases) in their one normal form, and localisations.

use std::fmt;
use time::{Date, Month, OffsetDateTime, PrimitiveDateTime, Time};

/// An event's key: its trigger time in UTC, to the millisecond. Rendered as
/// `2026-04-21T04:13:21.170Z`, or `2023-08-12T18:58:12Z` when the
/// milliseconds are zero; that text is the event's id everywhere (tools,
/// URIs, a session's subject).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DateObs {
    ms: i64,
}

/// Earliest and latest trigger times accepted (GCN began in 1991; nothing is
/// dated beyond 2200).
const MIN_MS: i64 = -631_152_000_000; // 1950-01-01
const MAX_MS: i64 = 7_258_118_400_000; // 2200-01-01

impl DateObs {
    /// A time in milliseconds since the Unix epoch, if it is a plausible
    /// trigger time.
    pub fn from_ms(ms: i64) -> Option<DateObs> {
        (MIN_MS..MAX_MS).contains(&ms).then_some(DateObs { ms })
    }

    pub fn ms(self) -> i64 {
        self.ms
    }

    /// Parse an ISO 8601 UTC date and time: `YYYY-MM-DD` then `T` or a
    /// space, `HH:MM[:SS[.fff…]]`, then nothing, `Z`, `UTC` or `+00:00`.
    /// Fractions beyond milliseconds are cut, not rounded, so a time
    /// written with more digits still names the same event.
    pub fn parse(text: &str) -> Result<DateObs, String> {
        let t = text.trim();
        let t = t
            .strip_suffix('Z')
            .or_else(|| t.strip_suffix('z'))
            .or_else(|| t.strip_suffix("+00:00"))
            .or_else(|| t.strip_suffix(" UTC"))
            .or_else(|| t.strip_suffix("UTC"))
            .unwrap_or(t);
        let bad = || format!("{text:?} is not an ISO 8601 UTC time such as 2023-08-12T18:58:12Z");
        if t.len() < 16 || !t.is_char_boundary(10) || !t.is_char_boundary(11) {
            return Err(bad());
        }
        let (date, rest) = (&t[..10], &t[11..]);
        if !matches!(t.as_bytes()[10], b'T' | b't' | b' ') {
            return Err(bad());
        }
        let num = |s: &str| -> Option<i64> {
            (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .then(|| s.parse().ok())
                .flatten()
        };
        let mut d = date.split('-');
        let (Some(y), Some(mo), Some(day), None) = (d.next(), d.next(), d.next(), d.next()) else {
            return Err(bad());
        };
        let (Some(y), Some(mo), Some(day)) = (num(y), num(mo), num(day)) else {
            return Err(bad());
        };
        let (clock, frac) = match rest.split_once('.') {
            Some((c, f)) => (c, Some(f)),
            None => (rest, None),
        };
        let mut c = clock.split(':');
        let (Some(h), Some(mi), s, None) = (c.next(), c.next(), c.next(), c.next()) else {
            return Err(bad());
        };
        let (Some(h), Some(mi)) = (num(h), num(mi)) else {
            return Err(bad());
        };
        let s = match s {
            Some(s) => num(s).ok_or_else(bad)?,
            None if frac.is_none() => 0,
            None => return Err(bad()),
        };
        let ms = match frac {
            None => 0,
            Some(f) => {
                let digits: String = f.chars().take(3).collect();
                if f.is_empty() || !f.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(bad());
                }
                num(&format!("{digits:0<3}")).ok_or_else(bad)?
            }
        };
        let total = civil_ms(y, mo, day, h, mi, s, ms).ok_or_else(bad)?;
        DateObs::from_ms(total).ok_or_else(|| format!("{text:?} is outside 1950 to 2200"))
    }

    /// The calendar date (UTC) at midnight.
    pub fn midnight(self) -> DateObs {
        DateObs {
            ms: self.ms.div_euclid(86_400_000) * 86_400_000,
        }
    }
}

/// Milliseconds since the epoch of a UTC civil time, if it is valid.
pub fn civil_ms(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, ms: i64) -> Option<i64> {
    let year = i32::try_from(y).ok()?;
    let month = Month::try_from(u8::try_from(mo).ok()?).ok()?;
    let date = Date::from_calendar_date(year, month, u8::try_from(d).ok()?).ok()?;
    // A leap second (:60) is read as the next second's start.
    let (s, extra) = if s == 60 { (59, 1_000) } else { (s, 0) };
    let time = Time::from_hms_milli(
        u8::try_from(h).ok()?,
        u8::try_from(mi).ok()?,
        u8::try_from(s).ok()?,
        u16::try_from(ms).ok()?,
    )
    .ok()?;
    let t = PrimitiveDateTime::new(date, time).assume_utc();
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000)
        .ok()
        .map(|v| v + extra)
}

impl fmt::Display for DateObs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = i128::from(self.ms) * 1_000_000;
        let Ok(t) = OffsetDateTime::from_unix_timestamp_nanos(nanos) else {
            return write!(f, "{}ms", self.ms);
        };
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        )?;
        let ms = t.millisecond();
        if ms != 0 {
            write!(f, ".{ms:03}")?;
        }
        f.write_str("Z")
    }
}

/// What kind of transient an event is, from what named it first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// Named as a gamma-ray burst (`GRB 230812B`).
    Grb,
    /// A gamma-ray trigger not (yet) named a GRB (Fermi, Swift, SVOM notices).
    GammaRay,
    /// An X-ray transient (Einstein Probe).
    XRay,
    /// A gravitational-wave candidate (`S230814r`, a GraceDB id).
    Gw,
    /// A neutrino alert (`IceCube-230724A`).
    Neutrino,
    /// An optical transient (`AT 2023sva`, a ZTF object).
    Optical,
    Other,
}

impl EventKind {
    pub const ALL: [EventKind; 7] = [
        EventKind::Grb,
        EventKind::GammaRay,
        EventKind::XRay,
        EventKind::Gw,
        EventKind::Neutrino,
        EventKind::Optical,
        EventKind::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Grb => "GRB",
            EventKind::GammaRay => "gamma-ray",
            EventKind::XRay => "X-ray",
            EventKind::Gw => "GW",
            EventKind::Neutrino => "neutrino",
            EventKind::Optical => "optical",
            EventKind::Other => "other",
        }
    }

    pub fn parse(s: &str) -> EventKind {
        EventKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .unwrap_or(EventKind::Other)
    }

    /// Whether triggers of this kind from different missions are grouped by
    /// time: gamma-ray and X-ray bursts seen by several satellites within
    /// seconds are one event. A gravitational-wave or neutrino candidate is
    /// never merged with a burst by time alone: that association is a
    /// scientific claim left to people.
    pub fn groups_by_time(self) -> bool {
        matches!(self, EventKind::Grb | EventKind::GammaRay | EventKind::XRay)
    }
}

/// A name an event goes by, in its display form; lookups use [`Name::key`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Name(String);

impl Name {
    pub fn new(display: impl Into<String>) -> Name {
        // Collapse runs of whitespace so `GRB  230805B` and `GRB 230805B` match.
        let s: String = display.into();
        Name(s.split_whitespace().collect::<Vec<_>>().join(" "))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The lookup key: lowercase, single spaces.
    pub fn key(&self) -> String {
        self.0.to_lowercase()
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a localisation came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocOrigin {
    Notice,
    Circular,
    /// A gravitational-wave sky map's credible region.
    SkyMap,
}

impl LocOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            LocOrigin::Notice => "notice",
            LocOrigin::Circular => "circular",
            LocOrigin::SkyMap => "skymap",
        }
    }

    pub fn parse(s: &str) -> LocOrigin {
        match s {
            "circular" => LocOrigin::Circular,
            "skymap" => LocOrigin::SkyMap,
            _ => LocOrigin::Notice,
        }
    }
}

/// A position with an error circle, all in degrees (ICRS/J2000), or a sky
/// map's credible region, and where it came from. What a filter preview
/// turns into a sky region.
#[derive(Clone, Debug, PartialEq)]
pub struct Localisation {
    /// The event it belongs to (canonical).
    pub dateobs: String,
    pub ra_deg: f64,
    pub dec_deg: f64,
    /// Radius of the error circle; the smallest is the best. For a sky
    /// map, the radius of a circle of its credible region's area, and the
    /// position is its densest pixel's.
    pub error_radius_deg: f64,
    pub origin: LocOrigin,
    /// A sky map's credible region (IVOA ASCII MOC), its area in square
    /// degrees and its level (0.9); `None` for circles.
    pub moc: Option<String>,
    pub area_deg2: Option<f64>,
    pub credible_level: Option<f64>,
    /// For example `Fermi GBM FERMI_GBM_GND_POS notice` or `GCN Circular 34393`.
    pub description: String,
    /// The notice's IVORN (notices).
    pub ivorn: Option<String>,
    /// The circular's number (circulars).
    pub circular_id: Option<i64>,
    /// When the source was issued (or located), ms since the epoch.
    pub time_ms: i64,
}

/// Whether a position and error radius are on the sky.
pub fn check_circle(ra: f64, dec: f64, radius: f64) -> Result<(), String> {
    if !(ra.is_finite() && (0.0..=360.0).contains(&ra)) {
        return Err(format!("ra {ra} is not within 0 to 360 degrees"));
    }
    if !(dec.is_finite() && (-90.0..=90.0).contains(&dec)) {
        return Err(format!("dec {dec} is not within -90 to 90 degrees"));
    }
    if !(radius.is_finite() && radius > 0.0 && radius <= 180.0) {
        return Err(format!(
            "error radius {radius} is not above 0 and at most 180 degrees"
        ));
    }
    Ok(())
}

/// Angular separation of two positions, degrees.
pub fn separation_deg(ra1: f64, dec1: f64, ra2: f64, dec2: f64) -> f64 {
    crate::sky::separation_arcsec(ra1, dec1, ra2, dec2) / 3600.0
}

/// Which page of an event's circulars to return.
#[derive(Clone, Debug, Default)]
pub struct CircularPage {
    /// Circulars per page (default: the circulars module's `DEFAULT_CIRCULARS`).
    pub limit: Option<i32>,
    /// `after:N`, the `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// One value read from a circular.
#[derive(Clone, Debug, PartialEq)]
pub struct Extraction {
    /// `redshift`, `position`, `magnitude`, `counterpart` or `instrument`.
    pub kind: &'static str,
    /// The value, in the parser's own shape (always with `kind`,
    /// `circular_id` and the matched `text`).
    pub payload: serde_json::Value,
    /// A position with an error circle (degrees), which is also a
    /// localisation of the event.
    pub circle: Option<(f64, f64, f64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dateobs_round_trips_in_one_canonical_form() {
        let d = DateObs::parse("2026-04-21T04:13:21.17").expect("parses");
        assert_eq!(d.to_string(), "2026-04-21T04:13:21.170Z");
        for same in [
            "2026-04-21T04:13:21.170Z",
            "2026-04-21 04:13:21.170000",
            "2026-04-21T04:13:21.1709+00:00",
        ] {
            assert_eq!(DateObs::parse(same), Ok(d), "{same}");
        }
        let whole = DateObs::parse("2023-08-12T18:58:12Z").expect("parses");
        assert_eq!(whole.to_string(), "2023-08-12T18:58:12Z");
        assert_eq!(
            DateObs::parse("2023-08-12T18:58")
                .expect("no seconds")
                .to_string(),
            "2023-08-12T18:58:00Z"
        );
        assert_eq!(whole.midnight().to_string(), "2023-08-12T00:00:00Z");
        for bad in [
            "",
            "2023-08-12",
            "2023-13-01T00:00:00",
            "2023-02-30T00:00:00",
            "2023-08-12T25:00:00",
            "2023-08-12X18:58:12",
            "2023-08-12T18:58:12.",
            "2023-08-12T18:58:12.x",
            "1900-01-01T00:00:00",
            "２０２３-08-12T18:58:12",
            "GRB 230812B",
        ] {
            assert!(DateObs::parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn names_compare_case_and_space_insensitively() {
        assert_eq!(
            Name::new("GRB  230805B").key(),
            Name::new("grb 230805b").key()
        );
        assert_eq!(Name::new(" S230814r ").as_str(), "S230814r");
    }

    #[test]
    fn circles_are_checked() {
        assert!(check_circle(190.0, -17.7, 0.027).is_ok());
        assert!(check_circle(361.0, 0.0, 1.0).is_err());
        assert!(check_circle(10.0, 91.0, 1.0).is_err());
        assert!(check_circle(10.0, 0.0, 0.0).is_err());
        assert!(check_circle(f64::NAN, 0.0, 1.0).is_err());
    }
}
