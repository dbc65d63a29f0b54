//! Light curves from alert packets: the candidate, the `prv_candidates`
//! history (detections and upper limits) and the forced photometry of
//! `fp_hists`, each measurement once however many alerts repeated it,
//! sorted by time.
//!
//! Forced photometry is a difference flux at the science zero point; a
//! point of SNR ≥ 3 becomes a magnitude (`magzpsci − 2.5 log10 flux`, error
//! `1.0857 / SNR`), any other a 5-sigma limit (`magzpsci − 2.5 log10(5 σ)`).
//! Rows ZTF marks as failed (null or −99999 flux, non-positive error) are
//! left out.

use serde_json::Value as Json;
use std::collections::BTreeMap;

/// SNR at or above which forced photometry counts as a detection.
pub const FORCED_SNR: f64 = 3.0;
/// Sigma of the limits made from forced photometry.
pub const FORCED_LIMIT_SIGMA: f64 = 5.0;
/// What [`FORCED_SNR`] and [`FORCED_LIMIT_SIGMA`] mean, for answers.
pub const FORCED_NOTE: &str = "forced photometry: SNR >= 3 is a magnitude magzpsci - 2.5 log10(flux) with error 1.0857/SNR; below that a 5-sigma limit magzpsci - 2.5 log10(5 * flux_err); failed rows (flux null or -99999) are left out";

/// What a point is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Detection,
    UpperLimit,
    Forced,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Detection => "detection",
            Kind::UpperLimit => "upper_limit",
            Kind::Forced => "forced",
        }
    }
}

/// One light-curve point.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub jd: f64,
    pub fid: i64,
    pub kind: Kind,
    /// True when `mag` is a limit.
    pub is_limit: bool,
    pub mag: f64,
    pub mag_err: Option<f64>,
    pub flux: Option<f64>,
    pub flux_err: Option<f64>,
    pub magzpsci: Option<f64>,
    pub isdiffpos: Option<String>,
    pub candid: Option<i64>,
    pub programid: Option<i64>,
}

/// The band name of a ZTF filter id.
pub fn band(fid: i64) -> &'static str {
    match fid {
        1 => "g",
        2 => "r",
        3 => "i",
        _ => "?",
    }
}

fn f(v: &Json, name: &str) -> Option<f64> {
    v.get(name)?.as_f64().filter(|x| x.is_finite())
}

fn i(v: &Json, name: &str) -> Option<i64> {
    v.get(name)?.as_i64()
}

fn s(v: &Json, name: &str) -> Option<String> {
    v.get(name)?.as_str().map(str::to_owned)
}

/// Collects points from packets, de-duplicating by kind, band, exposure
/// time and candid: one exposure can hold two detections of an object (two
/// candidates, two candids), and every later alert repeats both.
#[derive(Debug, Default)]
pub struct Builder {
    points: BTreeMap<(Kind, i64, u64, i64), Point>,
    include_forced: bool,
}

impl Builder {
    pub fn new(include_forced: bool) -> Self {
        Builder {
            points: BTreeMap::new(),
            include_forced,
        }
    }

    fn add(&mut self, p: Point) {
        let key = (p.kind, p.fid, p.jd.to_bits(), p.candid.unwrap_or(0));
        self.points.entry(key).or_insert(p);
    }

    /// Add one packet (as JSON: `candidate`, `prv_candidates`, `fp_hists`).
    pub fn add_packet(&mut self, packet: &Json) {
        if let Some(c) = packet.get("candidate") {
            self.add_candidate(c, false);
        }
        if let Some(Json::Array(prv)) = packet.get("prv_candidates") {
            for p in prv {
                self.add_candidate(p, true);
            }
        }
        if self.include_forced
            && let Some(Json::Array(fp)) = packet.get("fp_hists")
        {
            for h in fp {
                self.add_forced(h);
            }
        }
    }

    fn add_candidate(&mut self, c: &Json, history: bool) {
        let (Some(jd), Some(fid)) = (f(c, "jd"), i(c, "fid")) else {
            return;
        };
        let programid = i(c, "programid");
        match f(c, "magpsf") {
            Some(mag) => self.add(Point {
                jd,
                fid,
                kind: Kind::Detection,
                is_limit: false,
                mag,
                mag_err: f(c, "sigmapsf"),
                flux: None,
                flux_err: None,
                magzpsci: None,
                isdiffpos: s(c, "isdiffpos"),
                candid: i(c, "candid"),
                programid,
            }),
            None if history => {
                if let Some(limit) = f(c, "diffmaglim") {
                    self.add(Point {
                        jd,
                        fid,
                        kind: Kind::UpperLimit,
                        is_limit: true,
                        mag: limit,
                        mag_err: None,
                        flux: None,
                        flux_err: None,
                        magzpsci: None,
                        isdiffpos: None,
                        candid: None,
                        programid,
                    });
                }
            }
            None => {}
        }
    }

    fn add_forced(&mut self, h: &Json) {
        let (Some(jd), Some(fid)) = (f(h, "jd"), i(h, "fid")) else {
            return;
        };
        let (Some(flux), Some(err), Some(zp)) = (
            f(h, "forcediffimflux"),
            f(h, "forcediffimfluxunc"),
            f(h, "magzpsci"),
        ) else {
            return;
        };
        if flux <= -99_999.0 || err <= 0.0 {
            return;
        }
        let snr = flux / err;
        let (mag, mag_err, is_limit) = if snr >= FORCED_SNR {
            (zp - 2.5 * flux.log10(), Some(1.085_736 / snr), false)
        } else {
            (zp - 2.5 * (FORCED_LIMIT_SIGMA * err).log10(), None, true)
        };
        self.add(Point {
            jd,
            fid,
            kind: Kind::Forced,
            is_limit,
            mag,
            mag_err,
            flux: Some(flux),
            flux_err: Some(err),
            magzpsci: Some(zp),
            isdiffpos: None,
            candid: None,
            programid: i(h, "programid"),
        });
    }

    /// The points, sorted by time (then band, kind and candid).
    pub fn finish(self) -> Vec<Point> {
        let mut points: Vec<Point> = self.points.into_values().collect();
        points.sort_by(|a, b| {
            a.jd.total_cmp(&b.jd)
                .then(a.fid.cmp(&b.fid))
                .then(a.kind.cmp(&b.kind))
                .then(a.candid.cmp(&b.candid))
        });
        points
    }
}

/// JD of the first detection (alert or history), if any.
pub fn first_detection(points: &[Point]) -> Option<f64> {
    points
        .iter()
        .filter(|p| p.kind == Kind::Detection)
        .map(|p| p.jd)
        .min_by(f64::total_cmp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn dedups_sorts_and_marks_limits() {
        let a = json!({
            "candidate": {"jd": 3.0, "fid": 1, "magpsf": 18.0, "sigmapsf": 0.1, "candid": 30},
            "prv_candidates": [
                {"jd": 1.0, "fid": 2, "magpsf": null, "diffmaglim": 20.5},
                {"jd": 2.0, "fid": 1, "magpsf": 18.5, "sigmapsf": 0.1, "candid": 20}
            ],
            "fp_hists": [
                {"jd": 2.0, "fid": 1, "forcediffimflux": 1000.0, "forcediffimfluxunc": 50.0, "magzpsci": 26.0},
                {"jd": 1.0, "fid": 2, "forcediffimflux": 10.0, "forcediffimfluxunc": 50.0, "magzpsci": 26.0},
                {"jd": 0.5, "fid": 2, "forcediffimflux": -99999.0, "forcediffimfluxunc": 50.0, "magzpsci": 26.0}
            ]
        });
        let b = json!({
            "candidate": {"jd": 4.0, "fid": 2, "magpsf": 17.0, "sigmapsf": 0.05, "candid": 40},
            "prv_candidates": [
                {"jd": 3.0, "fid": 1, "magpsf": 18.0, "sigmapsf": 0.1, "candid": 30},
                {"jd": 2.0, "fid": 1, "magpsf": 18.5, "sigmapsf": 0.1, "candid": 20}
            ]
        });
        let mut builder = Builder::new(true);
        builder.add_packet(&a);
        builder.add_packet(&b);
        let points = builder.finish();
        let kinds: Vec<(f64, &str, bool)> = points
            .iter()
            .map(|p| (p.jd, p.kind.as_str(), p.is_limit))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (1.0, "upper_limit", true),
                (1.0, "forced", true),
                (2.0, "detection", false),
                (2.0, "forced", false),
                (3.0, "detection", false),
                (4.0, "detection", false)
            ]
        );
        assert!((points[3].mag - (26.0 - 7.5)).abs() < 1e-9);
        assert!((points[1].mag - (26.0 - 2.5 * 250f64.log10())).abs() < 1e-9);
        assert_eq!(first_detection(&points), Some(2.0));
    }
}

/// Points in one answer when the caller names no `limit`: about 30 KB of
/// JSON, more than the 30-day history of one alert holds in most bands.
pub const DEFAULT_PAGE: usize = 100;
/// The most points one answer may hold.
pub const MAX_PAGE: usize = 5000;

/// Which points of a light curve one answer holds: the newest `limit`
/// before a position, kept in time order.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Page {
    pub limit: usize,
    /// Where the page ends (exclusive): the points before `jd`, plus the
    /// first `also` of the points at exactly `jd` (one exposure can be a
    /// detection and a forced point, so a time alone does not mark a place).
    pub before: Option<(f64, usize)>,
}

impl Page {
    /// A page from the request's `limit` and `cursor` (a `next_cursor`).
    pub fn parse(limit: Option<i32>, cursor: Option<&str>) -> Result<Page, String> {
        let limit = match limit {
            None => DEFAULT_PAGE,
            Some(n) if n >= 1 && n as usize <= MAX_PAGE => n as usize,
            Some(n) => return Err(format!("limit: 1 to {MAX_PAGE} points, not {n}")),
        };
        let before = match cursor.map(str::trim).filter(|c| !c.is_empty()) {
            None => None,
            Some(c) => Some(parse_cursor(c).ok_or_else(|| {
                format!(
                    "cursor: {:?} is not a cursor; pass next_cursor of an earlier answer",
                    c.chars().take(64).collect::<String>()
                )
            })?),
        };
        Ok(Page { limit, before })
    }

    /// The range of `points` (sorted by time) this page holds, and the
    /// cursor of the next, older page when there is one.
    pub fn range(&self, points: &[Point]) -> (std::ops::Range<usize>, Option<String>) {
        let end = match self.before {
            Some((jd, also)) => {
                let first_at = points.partition_point(|p| p.jd < jd);
                let after = points.partition_point(|p| p.jd <= jd);
                (first_at + also).min(after)
            }
            None => points.len(),
        };
        let start = end.saturating_sub(self.limit);
        let next = (start > 0).then(|| {
            let jd = points[start].jd;
            let first_at = points.partition_point(|p| p.jd < jd);
            // Rust prints the shortest text that reads back as the same
            // f64, so the cursor finds exactly this time again.
            format!("{jd}:{}", start - first_at)
        });
        (start..end, next)
    }
}

fn parse_cursor(cursor: &str) -> Option<(f64, usize)> {
    let (jd, also) = cursor.split_once(':').unwrap_or((cursor, "0"));
    let jd = jd.parse::<f64>().ok().filter(|jd| jd.is_finite())?;
    Some((jd, also.parse::<usize>().ok()?))
}

#[cfg(test)]
mod page_tests {
    use super::*;

    fn at(jd: f64) -> Point {
        Point {
            jd,
            fid: 1,
            kind: Kind::Detection,
            is_limit: false,
            mag: 18.0,
            mag_err: Some(0.1),
            flux: None,
            flux_err: None,
            magzpsci: None,
            isdiffpos: None,
            candid: None,
            programid: None,
        }
    }

    #[test]
    fn pages_walk_back_from_the_newest_point_without_gaps_or_repeats() {
        // Exposures that are both a detection and a forced point share a
        // time; a page may end between them.
        // Each point's `mag` is its place, so a lost or repeated point shows.
        let points: Vec<Point> = [0.1, 0.2, 0.2, 0.2, 0.5, 0.6, 0.6, 0.9]
            .iter()
            .enumerate()
            .map(|(i, d)| Point {
                mag: i as f64,
                ..at(2_460_000.0 + d)
            })
            .collect();
        let mut seen = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let page = Page::parse(Some(3), cursor.as_deref()).expect("a valid page");
            let (range, next) = page.range(&points);
            let mut this: Vec<f64> = points[range].iter().map(|p| p.mag).collect();
            this.extend(seen);
            seen = this;
            match next {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let all: Vec<f64> = points.iter().map(|p| p.mag).collect();
        assert_eq!(seen, all);
    }

    #[test]
    fn bad_limits_and_cursors_are_named() {
        assert_eq!(Page::parse(None, None).map(|p| p.limit), Ok(DEFAULT_PAGE));
        assert!(Page::parse(Some(0), None).is_err_and(|e| e.starts_with("limit:")));
        assert!(Page::parse(Some(5001), None).is_err_and(|e| e.starts_with("limit:")));
        assert!(Page::parse(None, Some("yesterday")).is_err_and(|e| e.starts_with("cursor:")));
        assert!(Page::parse(None, Some("NaN")).is_err_and(|e| e.starts_with("cursor:")));
        assert!(Page::parse(None, Some("2460000.5:x")).is_err_and(|e| e.starts_with("cursor:")));
        assert!(Page::parse(None, Some("2460000.5:1")).is_ok());
    }
}
