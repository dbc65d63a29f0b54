//! Which event a circular is about, and when that event happened.
//!
//! GCN Circulars are prose, so this reads the conventions GCN's authors
//! follow, checked against the 500 real circulars in `../shared/data/gcn`:
//!
//! - GCN's own `eventId` (`GRB 230812B`, `LIGO/Virgo/KAGRA S230914ak`), when
//!   the archive has one, comes first; then the subject's names: GRB names
//!   (`GRB 230812B`, `GRB230812B`, `GRB 20230818A`, `GRB 230728.12`, and
//!   Fermi's nine-digit `GRB 230827256`, read as `GRB 230827.256`),
//!   gravitational-wave superevents (`S230814r`), `IceCube-230724A`,
//!   `EP240315a`, `AT 2023sva`, ZTF objects, and trigger numbers (`Fermi
//!   trigger No 712143685`, `Trigger 716527670/230916144`, `Swift Triggers
//!   1186280 and 1186291`, `IBAS trigger 10375`).
//! - In the body only a GRB name bound to its trigger counts: `located GRB
//!   230728A (trigger=1181187)`, `GRB 230812B (trigger 713559497.049606 /
//!   230812790)`, MASTER's `the Swift GRB230728.12 (trigger No 1181187,`.
//!   That is how MASTER's report on "Fermi trigger No 712143685" and Swift's
//!   on GRB 230728A meet the same event.
//! - A trigger number names the event only in a GRB's circulars: GBM's
//!   "Trigger 713134237 / 230807868 is not associated with S230807f" is about
//!   the GW candidate and must not make that trigger one of its names. A
//!   list of triggers (a retraction) is looked up, never taken as names.
//! - A circular naming nothing (UVOT's "GRB 230812: …", a radio follow-up of
//!   an SPT transient) joins the event that every circular it cites belongs
//!   to, when they agree.
//!
//! An event's trigger time comes from, in order: a Fermi trigger number
//! (mission elapsed time, exact), a trigger sentence in a circular about it
//! ("At 18:58:12 UT on 12 Aug 2023, the Fermi GBM triggered", "at 2023-08-14
//! 06:19:20.458 UTC") on the date its name encodes, the name's date and
//! fraction of day, and last the circular's submission time.

use super::model::{DateObs, EventKind, Name, civil_ms};
use super::parse::Circular;
use regex::Regex;
use std::sync::LazyLock;

/// A name a circular mentions, and what it may do.
#[derive(Clone, Debug, PartialEq)]
pub struct Mention {
    pub name: Name,
    /// The kind of event this name creates; `None` for trigger numbers,
    /// which only find events.
    pub creates: Option<EventKind>,
    /// Whether the event it resolves to takes this name as an alias.
    pub alias: bool,
}

/// Everything a circular says about which event it is about.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CircularNames {
    /// In lookup order: `eventId`, subject, body.
    pub mentions: Vec<Mention>,
    /// Circulars it cites (`GCN 34391`, `GCN Circ. 34391`, `GCN #34301`).
    pub citations: Vec<i64>,
}

impl CircularNames {
    /// The name that creates the event when none is found, and its kind.
    pub fn primary(&self) -> Option<&Mention> {
        self.mentions.iter().find(|m| m.creates.is_some())
    }

    /// Names to look events up by, in order.
    pub fn lookups(&self) -> impl Iterator<Item = &Mention> {
        self.mentions.iter()
    }

    /// Names the resolved event takes.
    pub fn aliases(&self) -> impl Iterator<Item = &Name> {
        self.mentions.iter().filter(|m| m.alias).map(|m| &m.name)
    }
}

static GRB: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bGRB\s*(?:(20\d{6})|(\d{6}))(?:\.(\d{1,3})\b|([A-Z])\b|(\d{3})\b|\b)")
        .expect("valid regex")
});
static SUPEREVENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(S\d{6}[a-z]{1,3})\b").expect("valid regex"));
static ICECUBE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bIceCube-(\d{6}[A-Z])\b").expect("valid regex"));
static EP: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bEP(\d{6}[a-z])\b").expect("valid regex"));
static AT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\bAT\s?(20\d{2}[a-z]{2,3})\b").expect("valid regex"));
static ZTF: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(ZTF\d{2}[a-z]{7})\b").expect("valid regex"));
static SUBJECT_TRIGGER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\b(Fermi|Swift|IBAS|INTEGRAL|GBM|BAT)\b[^:\n]{0,40}?\b[Tt]riggers?\s*(?:No\.?|number|#)?\s*(\d{4,10})((?:\s*(?:,|and|&)\s*\d{4,10})*)(?:\s*/\s*(\d{9}))?",
    )
    .expect("valid regex")
});
static BODY_TRIGGER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\b(?:(Swift|Fermi)[- /]?(?:BAT\s+|GBM\s+)?)?GRB\s*(\d{9}|\d{6}(?:\.\d{1,3}|[A-Z])?)\s*\(\s*trigger\s*(?:No\.?|=|number|#)?\s*(\d{6,10})(?:\.\d+)?(?:\s*/\s*(\d{9}))?",
    )
    .expect("valid regex")
});
static CITATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bGCN\s*(?:Circ(?:ular)?s?\.?\s*)?(?:No\.?\s*|#\s*)?(\d{4,6})\b")
        .expect("valid regex")
});

/// The names and citations of a circular.
pub fn circular_names(c: &Circular) -> CircularNames {
    let mut head: Vec<Mention> = Vec::new();
    if let Some(event_id) = &c.event_id {
        let before = head.len();
        subject_names(event_id, &mut head);
        // A long-form GW name keeps its form too (`LIGO/Virgo/KAGRA S230914ak`).
        if let Some(first) = head.get(before).cloned()
            && first.creates == Some(EventKind::Gw)
            && event_id.trim() != first.name.as_str()
        {
            head.insert(
                before,
                Mention {
                    name: Name::new(event_id.clone()),
                    creates: Some(EventKind::Gw),
                    alias: true,
                },
            );
        }
        if head.len() == before {
            // A name GCN uses that none of the patterns know: keep it whole.
            head.push(Mention {
                name: Name::new(event_id.clone()),
                creates: Some(EventKind::Other),
                alias: true,
            });
        }
    }
    subject_names(&c.subject, &mut head);

    // Body: GRB names bound to a trigger number, counted only when the name
    // is already one of the head's, or the head has none.
    let head_grbs: Vec<String> = head
        .iter()
        .filter(|m| m.creates == Some(EventKind::Grb))
        .map(|m| m.name.key())
        .collect();
    let head_creates = head.iter().any(|m| m.creates.is_some());
    let mut body = Vec::new();
    for cap in BODY_TRIGGER.captures_iter(&c.body) {
        let Some(grb) = grb_name(&format!("GRB {}", &cap[2])) else {
            continue;
        };
        if head_creates && !head_grbs.contains(&grb.key()) {
            continue;
        }
        let whole = cap.get(0).map_or(0, |m| m.start());
        let number = &cap[3];
        let bn = cap.get(4).map(|m| m.as_str());
        let mission = match (cap.get(1).map(|m| m.as_str()), bn) {
            (_, Some(_)) => "Fermi",
            (Some(m), None) => m,
            (None, None) => mission_before(&c.body, whole, number),
        };
        // MASTER sometimes writes GBM's burst number as the trigger
        // (`GRB230812.79 (trigger No 230812790`): nine digits that read as
        // the burst's own date are that, not a mission elapsed time.
        let burst_number = number.len() == 9
            && name_time(&grb)
                .is_some_and(|(day, _)| name_date(number).is_some_and(|(d, _)| d == day));
        body.push(Mention {
            name: grb,
            creates: Some(EventKind::Grb),
            alias: true,
        });
        if burst_number {
            body.push(Mention {
                name: Name::new(format!("bn{number}")),
                creates: None,
                alias: true,
            });
        } else {
            body.push(trigger(mission, number));
        }
        if let Some(bn) = bn {
            body.push(Mention {
                name: Name::new(format!("bn{bn}")),
                creates: None,
                alias: true,
            });
        }
    }
    let mut mentions = head;
    mentions.extend(body);
    dedupe(&mut mentions);

    // Trigger numbers are names only of GRBs (or of whatever a
    // trigger-only circular finds).
    let primary_kind = mentions.iter().find_map(|m| m.creates);
    if matches!(primary_kind, Some(k) if k != EventKind::Grb) {
        mentions.retain(|m| m.creates.is_some());
    }

    let mut citations: Vec<i64> = CITATION
        .captures_iter(&c.body)
        .filter_map(|cap| cap[1].parse::<i64>().ok())
        .filter(|id| *id != c.circular_id)
        .collect();
    citations.sort_unstable();
    citations.dedup();
    CircularNames {
        mentions,
        citations,
    }
}

fn dedupe(mentions: &mut Vec<Mention>) {
    let mut seen: Vec<String> = Vec::new();
    mentions.retain(|m| {
        let key = m.name.key();
        if seen.contains(&key) {
            false
        } else {
            seen.push(key);
            true
        }
    });
}

fn kind_rank(kind: Option<EventKind>) -> u8 {
    match kind {
        Some(EventKind::Grb) => 0,
        Some(EventKind::Gw) => 1,
        Some(EventKind::Neutrino) => 2,
        Some(EventKind::XRay) => 3,
        _ => 4,
    }
}

/// The mission a bare `(trigger=N)` belongs to: the nearest mission word
/// before it, else the number's form (Fermi's are mission elapsed seconds,
/// nine digits; Swift's are seven).
fn mission_before(body: &str, at: usize, number: &str) -> &'static str {
    let mut start = at.saturating_sub(200);
    while !body.is_char_boundary(start) {
        start -= 1;
    }
    let window = &body[start..at];
    let fermi = ["Fermi", "GBM"]
        .iter()
        .filter_map(|w| window.rfind(w))
        .max();
    let swift = ["Swift", "BAT"]
        .iter()
        .filter_map(|w| window.rfind(w))
        .max();
    match (fermi, swift) {
        (Some(f), Some(s)) if f > s => "Fermi",
        (Some(_), None) => "Fermi",
        (_, Some(_)) => "Swift",
        (None, None) if number.len() >= 9 => "Fermi",
        (None, None) => "Swift",
    }
}

fn trigger(mission: &str, number: &str) -> Mention {
    Mention {
        name: Name::new(format!("{mission} {number}")),
        creates: None,
        alias: true,
    }
}

/// A name pattern, the kind it creates, and how its capture is written.
type NamePattern = (&'static LazyLock<Regex>, EventKind, fn(&str) -> String);

/// The names in a subject line (or an `eventId`), in order.
fn subject_names(text: &str, out: &mut Vec<Mention>) {
    let mut found: Vec<(usize, Mention)> = Vec::new();
    let (mut letters, mut fractions) = (0, 0);
    for cap in GRB.captures_iter(text) {
        let Some(name) = grb_captures(&cap) else {
            continue;
        };
        // One lettered and one fractional name are two names of one burst
        // (`GRB 230814A … / GRB 230814788`); more are other bursts.
        let lettered = cap.get(4).is_some();
        let alias = if lettered {
            letters += 1;
            letters == 1
        } else {
            fractions += 1;
            fractions == 1
        };
        let at = cap.get(0).map_or(0, |m| m.start());
        found.push((
            at,
            Mention {
                name,
                creates: Some(EventKind::Grb),
                alias,
            },
        ));
    }
    let simple: [NamePattern; 5] = [
        (&SUPEREVENT, EventKind::Gw, |s| s.to_owned()),
        (&ICECUBE, EventKind::Neutrino, |s| format!("IceCube-{s}")),
        (&EP, EventKind::XRay, |s| format!("EP{s}")),
        (&AT, EventKind::Optical, |s| format!("AT {s}")),
        (&ZTF, EventKind::Optical, |s| s.to_owned()),
    ];
    for (re, kind, display) in simple {
        let mut first = true;
        for cap in LazyLock::force(re).captures_iter(text) {
            let text = &cap[1];
            if matches!(kind, EventKind::Gw | EventKind::Neutrino | EventKind::XRay)
                && name_date(text.trim_start_matches(|c: char| c.is_ascii_alphabetic())).is_none()
            {
                continue;
            }
            let at = cap.get(0).map_or(0, |m| m.start());
            found.push((
                at,
                Mention {
                    name: Name::new(display(text)),
                    creates: Some(kind),
                    alias: first || kind == EventKind::Optical,
                },
            ));
            first = false;
        }
    }
    // Creating names by kind (a GRB name first: `AT 2023qxj: … afterglow of
    // Fermi GRB 230827256` is about the burst), each in the order written;
    // then trigger numbers.
    found.sort_by_key(|(at, m)| (kind_rank(m.creates), *at));
    out.extend(found.into_iter().map(|(_, m)| m));
    for cap in SUBJECT_TRIGGER.captures_iter(text) {
        let mission = match &cap[1] {
            "GBM" => "Fermi",
            "BAT" => "Swift",
            "IBAS" => "INTEGRAL",
            m => m,
        };
        let listed = cap.get(3).is_some_and(|m| !m.as_str().trim().is_empty());
        let mut numbers = vec![cap[2].to_owned()];
        let mut bn = cap.get(4).map(|m| m.as_str().to_owned());
        // GBM writes `MET/bn`, sometimes `bn/MET`: the burst number is the
        // one that reads as a date.
        if let Some(b) = &bn
            && name_date(&numbers[0]).is_some()
            && name_date(b).is_none()
        {
            let met = b.clone();
            bn = Some(std::mem::replace(&mut numbers[0], met));
        }
        if let Some(rest) = cap.get(3) {
            numbers.extend(
                rest.as_str()
                    .split(|c: char| !c.is_ascii_digit())
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
            );
        }
        for n in numbers {
            // Nine digits that read as a date and are below any GBM mission
            // elapsed time (GBM's first trigger was at ~2.37e8 s) are a
            // burst number, whatever the subject calls them.
            let mut m = if mission == "Fermi"
                && n.len() == 9
                && name_date(&n).is_some()
                && n.parse::<i64>().is_ok_and(|v| v < 237_000_000)
            {
                Mention {
                    name: Name::new(format!("bn{n}")),
                    creates: None,
                    alias: true,
                }
            } else {
                trigger(mission, &n)
            };
            m.alias = !listed;
            out.push(m);
        }
        if let Some(b) = bn {
            out.push(Mention {
                name: Name::new(format!("bn{b}")),
                creates: None,
                alias: !listed,
            });
        }
    }
}

/// A GRB name in its normal form: `GRB 230812B`, `GRB 230728.12`; `None`
/// for a date-only name (`GRB 230812`), which names no one burst.
pub fn grb_name(text: &str) -> Option<Name> {
    GRB.captures(text).and_then(|c| grb_captures(&c))
}

fn grb_captures(cap: &regex::Captures<'_>) -> Option<Name> {
    let date = match (cap.get(1), cap.get(2)) {
        (Some(long), _) => &long.as_str()[2..],
        (None, Some(short)) => short.as_str(),
        (None, None) => return None,
    };
    name_date(date)?;
    if let Some(frac) = cap.get(3).or_else(|| cap.get(5)) {
        return Some(Name::new(format!("GRB {date}.{}", frac.as_str())));
    }
    cap.get(4)
        .map(|letter| Name::new(format!("GRB {date}{}", letter.as_str())))
}

/// The UTC date (and fraction of day) a name encodes: `230812` of
/// `GRB 230812B`, `S230814r`, `IceCube-230724A`, `bn230812790`.
pub fn name_date(digits: &str) -> Option<(DateObs, Option<f64>)> {
    let d = digits.trim();
    if d.len() < 6 || !d.is_char_boundary(6) || !d[..6].bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |r: std::ops::Range<usize>| d[r].parse::<i64>().ok();
    let (yy, mm, dd) = (n(0..2)?, n(2..4)?, n(4..6)?);
    // Two-digit years: GCN's names start in 1991.
    let year = if yy >= 90 { 1900 + yy } else { 2000 + yy };
    let midnight = DateObs::from_ms(civil_ms(year, mm, dd, 0, 0, 0, 0)?)?;
    Some((midnight, None))
}

/// The date and fraction of day of a normalized name, if it encodes them,
/// with the fraction's precision (one unit of its last digit, in days).
pub fn name_time(name: &Name) -> Option<(DateObs, Option<(f64, f64)>)> {
    let s = name.as_str();
    let digits = s
        .strip_prefix("GRB ")
        .or_else(|| s.strip_prefix("IceCube-"))
        .or_else(|| s.strip_prefix("EP"))
        .or_else(|| s.strip_prefix("bn"))
        .or_else(|| s.strip_prefix('S'))
        .or_else(|| s.rsplit(' ').next().and_then(|t| t.strip_prefix('S')))?;
    let (date, _) = name_date(digits)?;
    let digits_of_fraction = if let Some(bn) = s.strip_prefix("bn") {
        bn.get(6..9)
    } else {
        digits.split_once('.').map(|(_, f)| f)
    };
    let fraction = digits_of_fraction.and_then(|f| {
        let value = format!("0.{f}").parse::<f64>().ok()?;
        let unit = 10f64.powi(-i32::try_from(f.len()).ok()?);
        Some((value, unit))
    });
    Some((date, fraction))
}

/// UTC of a Fermi mission elapsed time (seconds since 2001-01-01 UTC,
/// counting the leap seconds inserted since).
pub fn fermi_met(met_ms: i64) -> Option<DateObs> {
    // Fermi launched in 2008 (MET ~2.4e8 s); nothing before 2005 is a trigger.
    if !(150_000_000_000..=2_000_000_000_000).contains(&met_ms) {
        return None;
    }
    let epoch = civil_ms(2001, 1, 1, 0, 0, 0, 0)?;
    let leaps = [
        civil_ms(2006, 1, 1, 0, 0, 0, 0)?,
        civil_ms(2009, 1, 1, 0, 0, 0, 0)?,
        civil_ms(2012, 7, 1, 0, 0, 0, 0)?,
        civil_ms(2015, 7, 1, 0, 0, 0, 0)?,
        civil_ms(2017, 1, 1, 0, 0, 0, 0)?,
    ];
    let mut utc = epoch + met_ms;
    for leap in leaps {
        if utc - 1_000 >= leap {
            utc -= 1_000;
        }
    }
    DateObs::from_ms(utc)
}

static ISO_TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(\d{4})-(\d{2})-(\d{2})(?:[T ]|\s+at\s+)(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?")
        .expect("valid regex")
});
static AT_ON_DATE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\b[Aa]t\s+(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*(?:UTC?)?\s+on\s+(\d{1,2})\s+([A-Za-z]{3})[a-z]*\.?,?\s+(\d{4})",
    )
    .expect("valid regex")
});
static AT_TIME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[Aa]t\s+(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?\s*UTC?\b").expect("valid regex")
});
static TRIGGER_WORDS: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)trigger|detected|identified|\bT0\b|located|discovered").expect("valid regex")
});

fn month(name: &str) -> Option<i64> {
    let m = name.to_ascii_lowercase();
    let months = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    months
        .iter()
        .position(|x| *x == m)
        .and_then(|i| i64::try_from(i + 1).ok())
}

fn millis(frac: Option<regex::Match<'_>>) -> i64 {
    frac.map_or(0, |f| {
        let digits: String = f.as_str().chars().take(3).collect();
        format!("{digits:0<3}").parse().unwrap_or(0)
    })
}

/// The trigger time a circular's body states, on `date` when the name
/// encodes one (else within `window` of milliseconds before `before_ms`):
/// the first time in a sentence about a trigger or a detection.
pub fn body_time(
    body: &str,
    date: Option<DateObs>,
    near: Option<(i64, i64)>,
    window: (i64, i64),
) -> Option<DateObs> {
    let mut found: Vec<(usize, DateObs)> = Vec::new();
    let n = |m: Option<regex::Match<'_>>| m.and_then(|m| m.as_str().parse::<i64>().ok());
    for cap in ISO_TIME.captures_iter(body) {
        if let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(s)) = (
            n(cap.get(1)),
            n(cap.get(2)),
            n(cap.get(3)),
            n(cap.get(4)),
            n(cap.get(5)),
            n(cap.get(6)),
        ) && let Some(ms) = civil_ms(y, mo, d, h, mi, s, millis(cap.get(7)))
            && let Some(t) = DateObs::from_ms(ms)
        {
            found.push((cap.get(0).map_or(0, |m| m.start()), t));
        }
    }
    let mut dated_spans = Vec::new();
    for cap in AT_ON_DATE.captures_iter(body) {
        let span = cap.get(0).map_or(0..0, |m| m.range());
        dated_spans.push(span.clone());
        if let (Some(h), Some(mi), Some(s), Some(d), Some(mo), Some(y)) = (
            n(cap.get(1)),
            n(cap.get(2)),
            n(cap.get(3)),
            n(cap.get(5)),
            month(&cap[6]),
            n(cap.get(7)),
        ) && let Some(ms) = civil_ms(y, mo, d, h, mi, s, millis(cap.get(4)))
            && let Some(t) = DateObs::from_ms(ms)
        {
            found.push((span.start, t));
        }
    }
    if let Some(day) = date {
        for cap in AT_TIME.captures_iter(body) {
            let start = cap.get(0).map_or(0, |m| m.start());
            if dated_spans.iter().any(|s| s.contains(&start)) {
                continue;
            }
            if let (Some(h), Some(mi), Some(s)) = (n(cap.get(1)), n(cap.get(2)), n(cap.get(3)))
                && h < 24
                && mi < 60
                && s < 61
                && let Some(t) = DateObs::from_ms(
                    day.ms() + ((h * 60 + mi) * 60 + s) * 1000 + millis(cap.get(4)),
                )
            {
                found.push((start, t));
            }
        }
    }
    found.sort_by_key(|(at, _)| *at);
    found.into_iter().find_map(|(at, t)| {
        let mut from = at.saturating_sub(200);
        while !body.is_char_boundary(from) {
            from -= 1;
        }
        let mut to = (at + 120).min(body.len());
        while !body.is_char_boundary(to) {
            to += 1;
        }
        if !TRIGGER_WORDS.is_match(&body[from..to]) {
            return None;
        }
        let fits = match date {
            Some(day) => t.midnight() == day,
            None => (window.0..=window.1).contains(&t.ms()),
        };
        // A name with a fraction of day (`GRB 230812.79`) says roughly when:
        // a time far from it is an observation, not the trigger.
        let agrees = near.is_none_or(|(center, tolerance)| (t.ms() - center).abs() <= tolerance);
        (fits && agrees).then_some(t)
    })
}

/// How long before a circular the trigger of an undated name (`AT 2023sva`)
/// may be.
const UNDATED_WINDOW_MS: i64 = 30 * 86_400_000;

/// The trigger time of a new event, and where it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    pub dateobs: DateObs,
    pub from: String,
    /// True for a time known to the second (a mission elapsed time, a
    /// stated trigger time); false for a date, a fraction of day or a
    /// submission time. Only exact times group events by time.
    pub exact: bool,
}

/// The trigger time of an event created for `primary`, from the circulars
/// (in number order) that name it, with their names.
pub fn estimate(primary: &Mention, cluster: &[(&Circular, &CircularNames)]) -> Estimate {
    let kind = primary.creates.unwrap_or(EventKind::Other);
    let dated = name_time(&primary.name);
    if kind == EventKind::Grb {
        for (c, names) in cluster {
            for m in names.mentions.iter().filter(|m| m.alias) {
                if let Some(met) = m.name.as_str().strip_prefix("Fermi ")
                    && let Ok(seconds) = met.parse::<i64>()
                    && let Some(t) = fermi_met(seconds * 1000)
                    && dated.is_none_or(|(day, _)| t.midnight() == day)
                {
                    return Estimate {
                        dateobs: t,
                        from: format!(
                            "Fermi trigger {met} (mission elapsed time) in GCN Circular {}",
                            c.circular_id
                        ),
                        exact: true,
                    };
                }
            }
        }
    }
    let near = dated.and_then(|(day, fraction)| {
        fraction.map(|(f, unit)| {
            (
                day.ms() + (f * 86_400_000.0).round() as i64,
                (unit * 86_400_000.0).round() as i64,
            )
        })
    });
    for (c, _) in cluster {
        let window = (c.created_on_ms - UNDATED_WINDOW_MS, c.created_on_ms);
        if let Some(t) = body_time(&c.body, dated.map(|(d, _)| d), near, window) {
            return Estimate {
                dateobs: t,
                from: format!("trigger time stated in GCN Circular {}", c.circular_id),
                exact: true,
            };
        }
    }
    if let Some((day, fraction)) = dated {
        let offset = fraction.map_or(0, |(f, _)| (f * 86_400_000.0).round() as i64);
        if let Some(t) = DateObs::from_ms(day.ms() + offset) {
            return Estimate {
                dateobs: t,
                from: if fraction.is_some() {
                    format!("the date and fraction of day of the name {}", primary.name)
                } else {
                    format!(
                        "the date of the name {} (time of day unknown)",
                        primary.name
                    )
                },
                exact: false,
            };
        }
    }
    let first = cluster.first().map(|(c, _)| *c);
    let ms = first.map_or(0, |c| c.created_on_ms);
    Estimate {
        dateobs: DateObs::from_ms(ms)
            .unwrap_or(DateObs::from_ms(0).expect("the epoch is in range")),
        from: format!(
            "the submission time of GCN Circular {} (no trigger time stated)",
            first.map_or(0, |c| c.circular_id)
        ),
        exact: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn circular(id: i64, subject: &str, body: &str, event_id: Option<&str>) -> Circular {
        Circular {
            circular_id: id,
            subject: subject.into(),
            submitter: String::new(),
            created_on_ms: civil_ms(2023, 8, 20, 0, 0, 0, 0).expect("valid"),
            body: body.into(),
            event_id: event_id.map(str::to_owned),
            bibcode: None,
            checksum: String::new(),
        }
    }

    fn names(c: &Circular) -> Vec<(String, bool)> {
        circular_names(c)
            .mentions
            .into_iter()
            .map(|m| (m.name.to_string(), m.alias))
            .collect()
    }

    #[test]
    fn grb_names_take_one_form() {
        for (text, want) in [
            ("GRB 230812B: x", Some("GRB 230812B")),
            ("GRB230812B optical", Some("GRB 230812B")),
            ("GRB 20230818A: GIT", Some("GRB 230818A")),
            ("Swift GRB230728.12: MASTER", Some("GRB 230728.12")),
            ("Fermi GRB 230827256", Some("GRB 230827.256")),
            ("GRB 230812: UVOT", None),
            ("GRB 231332A", None),
        ] {
            assert_eq!(
                grb_name(text).map(|n| n.to_string()),
                want.map(str::to_owned),
                "{text}"
            );
        }
    }

    #[test]
    fn subjects_and_bodies_give_names() {
        let c = circular(
            34424,
            "GRB 230814A: BALROG localization (Fermi Trigger 713732101 / GRB 230814788)",
            "",
            Some("GRB 230814A"),
        );
        assert_eq!(
            names(&c),
            [
                ("GRB 230814A".into(), true),
                ("GRB 230814.788".into(), true),
                ("Fermi 713732101".into(), true)
            ]
        );
        let gw = circular(
            34372,
            "The Fermi GBM Trigger 713134237 / 230807868 is not associated with LIGO/Virgo/KAGRA S230807f. LIGO/Virgo/KAGRA S230807f",
            "",
            Some("LIGO/Virgo/KAGRA S230807f"),
        );
        assert_eq!(
            names(&gw),
            [
                ("LIGO/Virgo/KAGRA S230807f".into(), true),
                ("S230807f".into(), true)
            ],
            "a trigger is no name of a GW candidate"
        );
        let retraction = circular(
            34502,
            "Swift Triggers 1186280 and 1186291 are not GRBs",
            "",
            None,
        );
        assert_eq!(
            names(&retraction),
            [
                ("Swift 1186280".into(), false),
                ("Swift 1186291".into(), false)
            ]
        );
        let master = circular(
            34277,
            "Fermi  trigger No 712143685: Global MASTER-Net observations report",
            "inspect of the Fermi GRB230727.40 (trigger No 712143685,08h 45m 55.92s",
            None,
        );
        assert_eq!(
            names(&master),
            [
                ("Fermi 712143685".into(), true),
                ("GRB 230727.40".into(), true)
            ]
        );
        assert_eq!(
            circular_names(&master)
                .primary()
                .map(|m| m.name.to_string()),
            Some("GRB 230727.40".into())
        );
        let gbm = circular(
            34387,
            "GRB 230812B: Fermi GBM detection",
            "At 18:58:12 UT on 12 Aug 2023, the Fermi Gamma-ray Burst Monitor (GBM) triggered and located GRB 230812B (trigger 713559497.049606 / 230812790). See GCN Circ. 34386 and GCN #34390.",
            Some("GRB 230812B"),
        );
        let n = circular_names(&gbm);
        assert_eq!(
            names(&gbm),
            [
                ("GRB 230812B".into(), true),
                ("Fermi 713559497".into(), true),
                ("bn230812790".into(), true)
            ]
        );
        assert_eq!(n.citations, [34386, 34390]);
        let reversed = circular(
            1,
            "Fermi Gamma-ray Burst Monitor trigger 230925241/717313591 is not a GRB",
            "",
            None,
        );
        assert_eq!(
            names(&reversed),
            [
                ("Fermi 717313591".into(), true),
                ("bn230925241".into(), true)
            ]
        );
    }

    #[test]
    fn times_come_from_met_bodies_and_names() {
        // GRB 230812B: Fermi trigger 713559497.049606 at 18:58:12 UT.
        assert_eq!(
            fermi_met(713_559_497_049).map(|t| t.to_string()),
            Some("2023-08-12T18:58:12.049Z".into())
        );
        assert_eq!(
            fermi_met(798_437_606_000).map(|t| t.to_string()),
            Some("2026-04-21T04:13:21Z".into())
        );
        let day = name_date("230812").map(|(d, _)| d);
        let t = body_time(
            "At 18:58:12 UT on 12 Aug 2023, the Fermi GBM triggered",
            day,
            None,
            (0, 0),
        );
        assert_eq!(
            t.map(|t| t.to_string()),
            Some("2023-08-12T18:58:12Z".into())
        );
        let lvk = "We identified the compact binary merger candidate S230814r during \
                   real-time processing ... at 2023-08-14 06:19:20.458 UTC (GPS";
        let day = name_date("230814").map(|(d, _)| d);
        assert_eq!(
            body_time(lvk, day, None, (0, 0)).map(|t| t.to_string()),
            Some("2023-08-14T06:19:20.458Z".into())
        );
        let swift = "At 02:50:03 UT, the Swift Burst Alert Telescope (BAT) triggered and located GRB 230728A";
        let day = name_date("230728").map(|(d, _)| d);
        assert_eq!(
            body_time(swift, day, None, (0, 0)).map(|t| t.to_string()),
            Some("2023-07-28T02:50:03Z".into())
        );
        // An observation on another day is not the trigger.
        let obs = "The observations started at 2023-08-19 15:32:24.081 UT, 0.67 days after the Fermi GBM trigger.";
        let day = name_date("230818").map(|(d, _)| d);
        assert_eq!(body_time(obs, day, None, (0, 0)), None);
        // MASTER's inspection time is far from the fraction its name gives.
        let master = "inspect of the Fermi GRB230812.79 (trigger No 230812790) errorbox 10000 sec after trigger time at 2023-08-12 21:56:45 UT";
        let day = name_date("230812").map(|(d, _)| d);
        let center = day.map(|d| d.ms() + 68_256_000).expect("dated");
        assert_eq!(
            body_time(master, day, Some((center, 864_000)), (0, 0)),
            None
        );
        let frac = name_time(&Name::new("GRB 230728.12")).expect("dated");
        assert_eq!(frac.1, Some((0.12, 0.01)));
        let bn = name_time(&Name::new("bn230825046")).expect("dated");
        assert_eq!(bn.1.map(|f| f.0), Some(0.046));
        assert!(name_time(&Name::new("LIGO/Virgo/KAGRA S230914ak")).is_some());
    }
}
