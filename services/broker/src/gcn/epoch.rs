//! When an observation was made, as circulars write it, so a magnitude can
//! be placed on a light curve.
//!
//! The forms read are those GCN authors use: an ISO date and time
//! (`2023-08-13 03:34:56`), a month name with a time (`August 14, 2023,
//! 23:23:33 UT`), a fractional day (`2023 Aug 5.91 UT`), a time then a date
//! (`14:46:44 UT on 2023-08-13`), `MJD 60183.27` / `MJD=60183.27`, `JD
//! 2460170.14`, and times after the trigger (`T0+2.3 h`, `10.4 hr after the
//! trigger`, `3193 seconds after the burst`). A date without a year or a
//! bare clock time is not read: the year or day would be a guess.
//!
//! A magnitude takes the nearest epoch on its own line; failing that, the
//! one epoch its paragraph states, if it states exactly one. Otherwise it
//! has none: nothing is invented.

use super::model::civil_ms;
use regex::Regex;
use serde_json::{Value as Json, json};
use std::sync::LazyLock;

/// An observation time read in a circular.
#[derive(Clone, Debug, PartialEq)]
pub struct Epoch {
    /// Byte span in the text.
    pub start: usize,
    pub end: usize,
    /// The absolute time, Unix milliseconds (UTC).
    pub utc_ms: Option<i64>,
    /// Seconds after the trigger (T0).
    pub after_trigger_s: Option<f64>,
}

impl Epoch {
    /// The payload form: `{text, utc?, after_trigger_s?}`.
    pub fn to_json(&self, text: &str) -> Json {
        let matched: String = text[self.start..self.end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let mut out = json!({ "text": matched });
        if let Some(ms) = self.utc_ms {
            out["utc"] = json!(ithaca_kit::clock::rfc3339(ms));
        }
        if let Some(s) = self.after_trigger_s {
            out["after_trigger_s"] = json!(s);
        }
        out
    }
}

const MONTHS: &str = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec";

static ISO: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b((?:19|20)\d\d)-(\d\d)-(\d\d)(?:T|\s+)(\d\d):(\d\d)(?::(\d\d)(?:\.(\d+))?)?(?:\s*UTC?\b)?")
        .expect("valid regex")
});
static CLOCK_THEN_DATE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(\d\d):(\d\d)(?::(\d\d)(?:\.(\d+))?)?\s*UTC?\s+(?:on\s+)?((?:19|20)\d\d)-(\d\d)-(\d\d)\b")
        .expect("valid regex")
});
static MONTH_DATE_TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"\b({MONTHS})[a-z]*\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+((?:19|20)\d\d),?\s+(?:at\s+)?(\d{{1,2}}):(\d\d)(?::(\d\d)(?:\.(\d+))?)?\s*UTC?\b"
    ))
    .expect("valid regex")
});
static FRACTIONAL_DAY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"\b((?:19|20)\d\d)[\s-]+({MONTHS})[a-z]*\.?\s+(\d{{1,2}}\.\d+)\s*(?:UTC?\b)?"
    ))
    .expect("valid regex")
});
static MJD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bMJD\s*[=:]?\s*(\d{5}(?:\.\d+)?)\b").expect("valid regex"));
static JD: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bJD\s*[=:]?\s*(24\d{5}(?:\.\d+)?)\b").expect("valid regex"));
static T0_PLUS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bT_?0\s*\+\s*(\d+(?:\.\d+)?)\s*(ks|s|sec|seconds?|mins?|minutes?|h|hr|hrs|hours?|d|days?)\b")
        .expect("valid regex")
});
static AFTER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(\d+(?:\.\d+)?)\s*(ks|s|sec|seconds?|mins?|minutes?|h|hr|hrs|hours?|d|days?)\s+after\s+(?:the\s+)?(?:[\w/-]+\s+){0,2}(?:trigger|burst|detection)\b")
        .expect("valid regex")
});

fn month_number(name: &str) -> i64 {
    MONTHS
        .split('|')
        .position(|m| m.eq_ignore_ascii_case(&name[..3.min(name.len())]))
        .map_or(0, |i| i as i64 + 1)
}

fn num(c: &regex::Captures<'_>, i: usize) -> Option<i64> {
    c.get(i).and_then(|m| m.as_str().parse().ok())
}

fn millis(c: &regex::Captures<'_>, i: usize) -> i64 {
    c.get(i).map_or(0, |m| {
        let digits: String = m.as_str().chars().take(3).collect();
        format!("{digits:0<3}").parse().unwrap_or(0)
    })
}

fn seconds(value: f64, unit: &str) -> f64 {
    match unit.to_ascii_lowercase().as_str() {
        "ks" => value * 1_000.0,
        u if u.starts_with('m') => value * 60.0,
        u if u.starts_with('h') => value * 3_600.0,
        u if u.starts_with('d') => value * 86_400.0,
        _ => value,
    }
}

/// Milliseconds of a Modified Julian Date, if in GCN's era.
fn mjd_ms(mjd: f64) -> Option<i64> {
    // 1950 to 2200.
    (33_282.0..124_591.0)
        .contains(&mjd)
        .then(|| ((mjd - 40_587.0) * 86_400_000.0).round() as i64)
}

/// Every epoch in `text`, in order, overlapping matches dropped; an
/// absolute time and a time after the trigger written side by side
/// (`2023 Aug 5.91 UT (10.4 hr after the trigger)`) are one epoch.
pub fn epochs(text: &str) -> Vec<Epoch> {
    let mut found: Vec<Epoch> = Vec::new();
    let mut push = |m: regex::Match<'_>, utc_ms: Option<i64>, after: Option<f64>| {
        if utc_ms.is_some() || after.is_some() {
            found.push(Epoch {
                start: m.start(),
                end: m.end(),
                utc_ms,
                after_trigger_s: after,
            });
        }
    };
    for c in CLOCK_THEN_DATE.captures_iter(text) {
        let ms = match (num(&c, 5), num(&c, 6), num(&c, 7), num(&c, 1), num(&c, 2)) {
            (Some(y), Some(mo), Some(d), Some(h), Some(mi)) => {
                civil_ms(y, mo, d, h, mi, num(&c, 3).unwrap_or(0), millis(&c, 4))
            }
            _ => None,
        };
        push(c.get(0).expect("group 0"), ms, None);
    }
    for c in ISO.captures_iter(text) {
        let ms = match (num(&c, 1), num(&c, 2), num(&c, 3), num(&c, 4), num(&c, 5)) {
            (Some(y), Some(mo), Some(d), Some(h), Some(mi)) => {
                civil_ms(y, mo, d, h, mi, num(&c, 6).unwrap_or(0), millis(&c, 7))
            }
            _ => None,
        };
        push(c.get(0).expect("group 0"), ms, None);
    }
    for c in MONTH_DATE_TIME.captures_iter(text) {
        let ms = match (num(&c, 3), num(&c, 2), num(&c, 4), num(&c, 5)) {
            (Some(y), Some(d), Some(h), Some(mi)) => civil_ms(
                y,
                month_number(&c[1]),
                d,
                h,
                mi,
                num(&c, 6).unwrap_or(0),
                millis(&c, 7),
            ),
            _ => None,
        };
        push(c.get(0).expect("group 0"), ms, None);
    }
    for c in FRACTIONAL_DAY.captures_iter(text) {
        let day: f64 = c[3].parse().unwrap_or(0.0);
        let ms = num(&c, 1).and_then(|y| {
            let midnight = civil_ms(y, month_number(&c[2]), day.trunc() as i64, 0, 0, 0, 0)?;
            Some(midnight + (day.fract() * 86_400_000.0).round() as i64)
        });
        push(c.get(0).expect("group 0"), ms, None);
    }
    for c in MJD.captures_iter(text) {
        let ms = c[1].parse::<f64>().ok().and_then(mjd_ms);
        push(c.get(0).expect("group 0"), ms, None);
    }
    for c in JD.captures_iter(text) {
        let ms = c[1]
            .parse::<f64>()
            .ok()
            .and_then(|jd| mjd_ms(jd - 2_400_000.5));
        push(c.get(0).expect("group 0"), ms, None);
    }
    for re in [&*T0_PLUS, &*AFTER] {
        for c in re.captures_iter(text) {
            let after = c[1].parse::<f64>().ok().map(|v| seconds(v, &c[2]));
            push(c.get(0).expect("group 0"), None, after);
        }
    }
    found.sort_by_key(|e| (e.start, std::cmp::Reverse(e.end)));
    let mut out: Vec<Epoch> = Vec::new();
    for e in found {
        if let Some(last) = out.last_mut() {
            if e.start < last.end {
                continue;
            }
            // Side by side, one absolute and one relative: the same moment.
            let gap = &text[last.end..e.start];
            let complementary = (last.utc_ms.is_some() && e.after_trigger_s.is_some()
                || last.after_trigger_s.is_some() && e.utc_ms.is_some())
                && last.utc_ms.xor(e.utc_ms).is_some();
            if complementary && gap.len() <= 4 && !gap.contains('\n') {
                last.end = e.end;
                last.utc_ms = last.utc_ms.or(e.utc_ms);
                last.after_trigger_s = last.after_trigger_s.or(e.after_trigger_s);
                continue;
            }
        }
        out.push(e);
    }
    out
}

/// The epoch of a value at `[start, end)` of `text`: the nearest on its
/// line, else its paragraph's only one.
pub fn epoch_of<'a>(
    text: &str,
    epochs: &'a [Epoch],
    start: usize,
    end: usize,
) -> Option<&'a Epoch> {
    let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[end..].find('\n').map_or(text.len(), |i| end + i);
    let distance = |e: &Epoch| {
        if e.end <= start {
            start - e.end
        } else {
            e.start.saturating_sub(end)
        }
    };
    let on_line = epochs
        .iter()
        .filter(|e| e.start >= line_start && e.end <= line_end)
        .min_by_key(|e| distance(e));
    if on_line.is_some() {
        return on_line;
    }
    let para_start = text[..start].rfind("\n\n").map_or(0, |i| i + 2);
    let para_end = text[end..].find("\n\n").map_or(text.len(), |i| end + i);
    let mut in_para = epochs
        .iter()
        .filter(|e| e.start >= para_start && e.end <= para_end);
    match (in_para.next(), in_para.next()) {
        (Some(only), None) => Some(only),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ithaca_kit::clock::rfc3339;

    fn utc(text: &str) -> Vec<String> {
        epochs(text)
            .iter()
            .map(|e| e.utc_ms.map(rfc3339).unwrap_or_default())
            .collect()
    }

    #[test]
    fn absolute_forms() {
        assert_eq!(utc("at 2023-08-13 03:34:56 UT"), ["2023-08-13T03:34:56Z"]);
        assert_eq!(utc("2023-07-23T12:21:20.29"), ["2023-07-23T12:21:20.29Z"]);
        assert_eq!(
            utc("(midtime: August 14, 2023, 23:23:33 UT)"),
            ["2023-08-14T23:23:33Z"]
        );
        assert_eq!(
            utc("from 14:46:44 UT on 2023-08-13,"),
            ["2023-08-13T14:46:44Z"]
        );
        assert_eq!(utc("(MJD=60183.25)"), ["2023-08-27T06:00:00Z"]);
        assert_eq!(utc("JD 2460170.5 |"), ["2023-08-14T00:00:00Z"]);
        assert_eq!(utc("epoch 2023 Aug 5.5 UT"), ["2023-08-05T12:00:00Z"]);
        // No year, no day: not read.
        assert!(epochs("starting on Aug. 05, 20:30 UT, and at 04:23 UT").is_empty());
        assert!(epochs("MJD 10000").is_empty());
    }

    #[test]
    fn relative_forms_and_pairs() {
        let e = epochs("T0+2.3 h and 3193 seconds after the burst and 90 s after the BAT trigger");
        let after: Vec<f64> = e.iter().filter_map(|e| e.after_trigger_s).collect();
        assert_eq!(after, [8280.0, 3193.0, 90.0]);
        let pair = epochs("At a mean epoch 2023 Aug 5.91 UT (10.4 hr after the trigger), r = 23.5");
        assert_eq!(pair.len(), 1, "{pair:?}");
        assert!(pair[0].utc_ms.is_some());
        assert!((pair[0].after_trigger_s.unwrap_or_default() - 37_440.0).abs() < 1e-6);
    }

    #[test]
    fn a_value_takes_its_lines_nearest_or_its_paragraphs_only_epoch() {
        let text = "r = 17.11 (MJD=60183.26872). A day prior (MJD=60182.26553) at r > 20.18.\n\nStarted at 2023-08-13 03:34:56.\nwe find g = 20.1\n\nMore: r = 19.0 at T0+1 d and i = 19.5 at T0+2 d\n\nno time here: z = 21.0";
        let all = epochs(text);
        let at = |needle: &str| {
            let s = text.find(needle).expect("needle");
            epoch_of(text, &all, s, s + needle.len()).map(|e| e.to_json(text)["text"].clone())
        };
        assert_eq!(at("r = 17.11"), Some(json!("MJD=60183.26872")));
        assert_eq!(at("r > 20.18"), Some(json!("MJD=60182.26553")));
        assert_eq!(at("g = 20.1"), Some(json!("2023-08-13 03:34:56")));
        assert_eq!(at("i = 19.5"), Some(json!("T0+2 d")));
        assert_eq!(at("z = 21.0"), None);
    }
}
