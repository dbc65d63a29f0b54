//! The built-in extractor (`origin` [`ORIGIN`]), run over every circular at
//! ingest: redshifts, positions (with their error circle when stated),
//! magnitudes with their bands and observation epoch ([`super::epoch`]),
//! counterparts with their positions ([`super::counterpart`]), and the
//! instruments a circular names.
//!
//! It reads the phrasing GCN authors use ("a redshift of z = 0.36", "RA, Dec
//! 343.51530, 28.17470 … with an uncertainty of 1.9 arcseconds", "r = 20.1
//! +/- 0.1", "r > 21.5") and keeps the matched text with every value, so a
//! reader can judge it. Values outside physical ranges are dropped rather
//! than guessed at.

use super::counterpart::{Spanned, counterparts};
use super::epoch;
pub use super::model::Extraction;
use super::model::check_circle;
use super::parse::Circular;
use regex::Regex;
use serde_json::{Value as Json, json};
use std::sync::LazyLock;

/// The origin of the built-in extractions.
pub const ORIGIN: &str = "ithaca-circular-parser";

/// Most magnitudes kept from one circular (photometry tables can be long).
const MAX_MAGNITUDES: usize = 200;

static REDSHIFT_WORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bredshifts?\s+(?:of\s+|at\s+)?(?:about\s+|approximately\s+)?(?:z\s*(?:=|~|≈)\s*)?(\d{1,2}\.\d{1,4})")
        .expect("valid regex")
});
static REDSHIFT_Z: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\bz\s*(?:=|~|≈)\s*(\d{1,2}\.\d{1,4})(?:\s*(?:\+/-|±|\+-)\s*(\d{1,2}\.\d{1,4}))?(\s*(?:AB\s*)?mag)?")
        .expect("valid regex")
});
static POS_PAIR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i:\bR\.?A\.?)\s*(?:\(J2000(?:\.0)?\))?\s*,\s*(?i:Dec)l?\.?\s*(?:\(J2000(?:\.0)?\))?\s*[=:]?\s*(\d{1,3}\.\d+)\s*,\s*([+-]?\d{1,2}\.\d+)")
        .expect("valid regex")
});
static POS_DEG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i:\bR\.?A\.?)\s*(?:\(J2000(?:\.0)?\))?\s*[=:]\s*(\d{1,3}\.\d+)\s*(?:deg(?:rees)?)?\s*[,;]?\s*(?:and\s+)?(?i:Dec)l?\.?\s*(?:\(J2000(?:\.0)?\))?\s*[=:]\s*([+-]?)\s?(\d{1,2}\.\d+)")
        .expect("valid regex")
});
static POS_SEX: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i:\bR\.?A\.?)\s*(?:\(J2000(?:\.0)?\))?\s*[=:]\s*(\d{1,2})[h: ]\s*(\d{1,2})[m: ]\s*(\d{1,2}(?:\.\d+)?)s?\s*(?:\([^)\n]{0,40}\))?\s*[,;]?\s*(?i:Dec)l?\.?\s*(?:\(J2000(?:\.0)?\))?\s*[=:]\s*([+\-−]?)\s*(\d{1,2})[d°: ]\s*(\d{1,2})['m: ]\s*(\d{1,2}(?:\.\d+)?)")
        .expect("valid regex")
});
// MASTER's error box: `(trigger No 712143685,08h 45m 55.92s , +67d 25m 58.8s, R=35.95)`.
static POS_MASTER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(\d{1,2})h\s*(\d{1,2})m\s*(\d{1,2}(?:\.\d+)?)s\s*,\s*([+-])(\d{1,2})d\s*(\d{1,2})m\s*(\d{1,2}(?:\.\d+)?)s\s*,\s*R=(\d+(?:\.\d+)?)\)")
        .expect("valid regex")
});
static ERROR: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)\b(?:uncertainty|error(?:\s+(?:radius|circle))?)\s+(?:of\s+)?(?:about\s+|~\s*)?(\d+(?:\.\d+)?)\s*(arcsec(?:onds?)?|arcmin(?:utes?)?|deg(?:rees?)?\b|"|''|′′|″|'|′)"#)
        .expect("valid regex")
});
static MAGNITUDE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(white|Ks|F\d{3}[WMN]|[ugriz]'|[ugrizyUBVRIJHKcow])(?:\s*\((?:AB|Vega)\))?\s*(=|~|≈|>)\s*(\d{1,2}\.\d{1,3})(?:\s*(?:\+/-|±|\+-)\s*(\d\.\d{1,3}))?(\s*(?:\(?AB\)?\s*)?mag)?")
        .expect("valid regex")
});

/// The instruments the parser knows, with how circulars write them.
const INSTRUMENTS: &[(&str, &str)] = &[
    ("ZTF", r"\bZTF\b|Zwicky Transient Facility"),
    ("Swift/BAT", r"\bBAT\b|Burst Alert Telescope"),
    ("Swift/XRT", r"\bXRT\b"),
    ("Swift/UVOT", r"\bUVOT\b"),
    ("Fermi/GBM", r"\bGBM\b|Gamma-ray Burst Monitor"),
    ("Fermi/LAT", r"\bLAT\b|Large Area Telescope"),
    ("SVOM/ECLAIRs", r"\bECLAIRs\b"),
    ("SVOM/GRM", r"\bGRM\b"),
    ("SVOM/MXT", r"\bMXT\b"),
    ("SVOM/VT", r"\bSVOM[/-]VT\b"),
    ("SVOM", r"\bSVOM\b"),
    ("INTEGRAL", r"\bINTEGRAL\b|\bSPI-ACS\b|\bIBAS\b"),
    ("Konus-Wind", r"\bKonus\b"),
    ("AstroSat", r"\bAstroSat\b|\bCZTI\b"),
    ("GECAM", r"\bGECAM\b"),
    ("AGILE", r"\bAGILE\b"),
    ("Insight-HXMT", r"\bHXMT\b"),
    ("MAXI", r"\bMAXI\b"),
    ("NuSTAR", r"\bNuSTAR\b"),
    ("Chandra", r"\bChandra\b"),
    ("XMM-Newton", r"\bXMM\b"),
    ("Einstein Probe", r"Einstein Probe|\bWXT\b|\bFXT\b"),
    ("IceCube", r"\bIceCube\b"),
    ("KM3NeT", r"\bKM3NeT\b"),
    ("LIGO", r"\bLIGO\b"),
    ("Virgo", r"\bVirgo\b"),
    ("KAGRA", r"\bKAGRA\b"),
    ("HAWC", r"\bHAWC\b"),
    ("LHAASO", r"\bLHAASO\b"),
    ("GOTO", r"\bGOTO\b"),
    ("MASTER", r"\bMASTER\b"),
    ("GRANDMA", r"\bGRANDMA\b"),
    ("ATLAS", r"\bATLAS\b"),
    ("Pan-STARRS", r"Pan-STARRS"),
    ("LCO", r"\bLCOGT?\b|Las Cumbres"),
    ("GIT", r"GROWTH-India|\bGIT\b"),
    ("KAIT", r"\bKAIT\b"),
    ("NOT", r"Nordic Optical Telescope|\bNOT\b"),
    ("GTC", r"\bGTC\b|Gran Telescopio Canarias"),
    ("VLT", r"\bVLT\b|Very Large Telescope"),
    ("Gemini", r"\bGemini\b"),
    ("Keck", r"\bKeck\b"),
    ("LBT", r"\bLBT\b|Large Binocular Telescope"),
    ("HST", r"\bHST\b|Hubble Space Telescope"),
    ("JWST", r"\bJWST\b|James Webb Space Telescope"),
    ("VLA", r"\bJ?VLA\b|Very Large Array"),
    ("ATCA", r"\bATCA\b"),
    ("MeerKAT", r"\bMeerKAT\b"),
    ("AMI-LA", r"\bAMI-LA\b"),
    ("uGMRT", r"\bu?GMRT\b"),
    ("NOEMA", r"\bNOEMA\b"),
    ("ALMA", r"\bALMA\b"),
];

static INSTRUMENT_RES: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    INSTRUMENTS
        .iter()
        .map(|(name, re)| (*name, Regex::new(re).expect("valid regex")))
        .collect()
});

/// Every value the parser reads in `c`, in a stable order (so re-running it
/// gives the same keys).
pub fn extract(c: &Circular) -> Vec<Extraction> {
    let text = format!("{}\n{}", c.subject, c.body);
    let mut out = Vec::new();
    redshifts(&text, c.circular_id, &mut out);
    let spans = positions(&text, c.circular_id, &mut out);
    magnitudes(&text, c.circular_id, &mut out);
    counterparts(&text, c.circular_id, &spans, &mut out);
    instruments(&text, c.circular_id, &mut out);
    out
}

fn snippet(text: &str) -> String {
    let one_line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    one_line.chars().take(200).collect()
}

fn redshifts(text: &str, id: i64, out: &mut Vec<Extraction>) {
    let mut found: Vec<(usize, f64, Option<f64>, String)> = Vec::new();
    for cap in REDSHIFT_WORD.captures_iter(text) {
        if let Ok(z) = cap[1].parse::<f64>() {
            let m = cap.get(0).expect("group 0 exists");
            found.push((m.start(), z, None, m.as_str().to_owned()));
        }
    }
    for cap in REDSHIFT_Z.captures_iter(text) {
        // `z = 19.2 +/- 0.1 mag` is a z-band magnitude, not a redshift.
        if cap.get(3).is_some() {
            continue;
        }
        if let Ok(z) = cap[1].parse::<f64>() {
            let m = cap.get(0).expect("group 0 exists");
            let err = cap.get(2).and_then(|e| e.as_str().parse::<f64>().ok());
            found.push((m.start(), z, err, m.as_str().to_owned()));
        }
    }
    found.sort_by_key(|f| f.0);
    let mut seen: Vec<f64> = Vec::new();
    for (at, z, err, matched) in found {
        if !(z > 0.0 && z < 15.0) || seen.iter().any(|s| (s - z).abs() < 1e-9) {
            continue;
        }
        seen.push(z);
        let before = &text[text.floor_char_boundary(at.saturating_sub(40))..at];
        let mut payload = json!({
            "kind": "redshift",
            "circular_id": id,
            "z": z,
            "text": snippet(&matched),
        });
        if let Some(e) = err {
            payload["z_err"] = json!(e);
        }
        if before.to_ascii_lowercase().contains("photometric") {
            payload["photometric"] = json!(true);
        }
        out.push(Extraction {
            kind: "redshift",
            payload,
            circle: None,
        });
    }
}

fn dms(sign: &str, d: f64, m: f64, s: f64) -> f64 {
    let v = d + m / 60.0 + s / 3600.0;
    if sign == "-" || sign == "−" { -v } else { v }
}

/// Positions with their spans in `text`, for the counterparts.
fn positions(text: &str, id: i64, out: &mut Vec<Extraction>) -> Vec<Spanned> {
    // (start, end, ra, dec, radius stated with the position)
    let mut found: Vec<(usize, usize, f64, f64, Option<f64>)> = Vec::new();
    let f =
        |c: &regex::Captures<'_>, i: usize| c.get(i).and_then(|m| m.as_str().parse::<f64>().ok());
    for cap in POS_PAIR.captures_iter(text) {
        let m = cap.get(0).expect("group 0 exists");
        if let (Some(ra), Some(dec)) = (f(&cap, 1), f(&cap, 2)) {
            found.push((m.start(), m.end(), ra, dec, None));
        }
    }
    for cap in POS_DEG.captures_iter(text) {
        let m = cap.get(0).expect("group 0 exists");
        if let (Some(ra), Some(dec)) = (f(&cap, 1), f(&cap, 3)) {
            let dec = if &cap[2] == "-" { -dec } else { dec };
            found.push((m.start(), m.end(), ra, dec, None));
        }
    }
    for cap in POS_SEX.captures_iter(text) {
        let m = cap.get(0).expect("group 0 exists");
        if let (Some(h), Some(mi), Some(s), Some(d), Some(dm), Some(ds)) = (
            f(&cap, 1),
            f(&cap, 2),
            f(&cap, 3),
            f(&cap, 5),
            f(&cap, 6),
            f(&cap, 7),
        ) {
            if h >= 24.0 || mi >= 60.0 || s >= 60.0 || dm >= 60.0 || ds >= 60.0 {
                continue;
            }
            let ra = 15.0 * (h + mi / 60.0 + s / 3600.0);
            found.push((m.start(), m.end(), ra, dms(&cap[4], d, dm, ds), None));
        }
    }
    for cap in POS_MASTER.captures_iter(text) {
        let m = cap.get(0).expect("group 0 exists");
        if let (Some(h), Some(mi), Some(s), Some(d), Some(dm), Some(ds), Some(r)) = (
            f(&cap, 1),
            f(&cap, 2),
            f(&cap, 3),
            f(&cap, 5),
            f(&cap, 6),
            f(&cap, 7),
            f(&cap, 8),
        ) {
            if h >= 24.0 || mi >= 60.0 || s >= 60.0 || dm >= 60.0 || ds >= 60.0 {
                continue;
            }
            let ra = 15.0 * (h + mi / 60.0 + s / 3600.0);
            found.push((m.start(), m.end(), ra, dms(&cap[4], d, dm, ds), Some(r)));
        }
    }
    found.sort_by_key(|p| p.0);
    // Overlapping matches are one position written two ways.
    let mut kept: Vec<(usize, usize, f64, f64, Option<f64>)> = Vec::new();
    for p in found {
        if kept.last().is_some_and(|k| p.0 < k.1) {
            continue;
        }
        kept.push(p);
    }
    let mut accepted = Vec::new();
    for (i, (start, end, ra, dec, stated)) in kept.iter().copied().enumerate() {
        let next = kept.get(i + 1).map_or(text.len(), |n| n.0);
        let window_end = text.floor_char_boundary(next.min(end + 400));
        let radius = stated.or_else(|| {
            ERROR.captures(&text[end..window_end]).and_then(|cap| {
                let v = cap[1].parse::<f64>().ok()?;
                let unit = cap[2].to_ascii_lowercase();
                Some(
                    if unit.starts_with("arcmin") || unit == "'" || unit == "′" {
                        v / 60.0
                    } else if unit.starts_with("deg") {
                        v
                    } else {
                        v / 3600.0
                    },
                )
            })
        });
        if check_circle(ra, dec, radius.unwrap_or(1.0)).is_err() {
            continue;
        }
        accepted.push((start, end, ra, dec, radius));
        let matched = &text[start..end];
        let mut payload = json!({
            "kind": "position",
            "circular_id": id,
            "ra": ra,
            "dec": dec,
            "text": snippet(matched),
        });
        if let Some(r) = radius {
            payload["error_radius_deg"] = json!(r);
        }
        out.push(Extraction {
            kind: "position",
            payload,
            circle: radius.map(|r| (ra, dec, r)),
        });
    }
    accepted
}

fn magnitudes(text: &str, id: i64, out: &mut Vec<Extraction>) {
    let epochs = epoch::epochs(text);
    let mut count = 0;
    for cap in MAGNITUDE.captures_iter(text) {
        if count >= MAX_MAGNITUDES {
            break;
        }
        let Ok(mag) = cap[3].parse::<f64>() else {
            continue;
        };
        let err = cap.get(4).and_then(|e| e.as_str().parse::<f64>().ok());
        let is_limit = &cap[2] == ">";
        let explicit = err.is_some() || cap.get(5).is_some();
        // A bare `R = 5.2` is rarely a magnitude; a stated error or unit
        // makes a bright one believable.
        let lowest = if explicit && !is_limit { 5.0 } else { 10.0 };
        if !(lowest..=30.0).contains(&mag) {
            continue;
        }
        let whole = cap.get(0).expect("group 0 exists");
        let epoch = epoch::epoch_of(text, &epochs, whole.start(), whole.end())
            .map_or(Json::Null, |e| e.to_json(text));
        let mut payload = json!({
            "kind": "magnitude",
            "circular_id": id,
            "band": cap[1].to_owned(),
            "mag": mag,
            "is_limit": is_limit,
            "epoch": epoch,
            "text": snippet(whole.as_str()),
        });
        if let Some(e) = err {
            payload["mag_err"] = json!(e);
        }
        out.push(Extraction {
            kind: "magnitude",
            payload,
            circle: None,
        });
        count += 1;
    }
}

fn instruments(text: &str, id: i64, out: &mut Vec<Extraction>) {
    for (name, re) in INSTRUMENT_RES.iter() {
        if let Some(m) = re.find(text) {
            out.push(Extraction {
                kind: "instrument",
                payload: json!({
                    "kind": "instrument",
                    "circular_id": id,
                    "name": name,
                    "text": snippet(m.as_str()),
                }),
                circle: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn circular(body: &str) -> Circular {
        Circular {
            circular_id: 1,
            subject: "GRB 230812B: test".into(),
            submitter: String::new(),
            created_on_ms: 0,
            body: body.into(),
            event_id: None,
            bibcode: None,
            checksum: String::new(),
        }
    }

    fn of(kind: &str, body: &str) -> Vec<Json> {
        extract(&circular(body))
            .into_iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.payload)
            .collect()
    }

    #[test]
    fn redshifts() {
        let z = of(
            "redshift",
            "we measure a redshift of z = 0.36 from Ca II; the host has z=0.429 +/- 0.01, and the z-band gives z = 19.5 +/- 0.1 mag.",
        );
        let values: Vec<f64> = z.iter().filter_map(|p| p["z"].as_f64()).collect();
        assert_eq!(values, [0.36, 0.429]);
        assert_eq!(z[1]["z_err"], 0.01);
        let photo = of(
            "redshift",
            "consistent with the photometric redshift of 0.484",
        );
        assert_eq!(photo[0]["photometric"], true);
        assert!(of("redshift", "z = 42.0").is_empty());
    }

    #[test]
    fn positions_with_errors() {
        let p = of(
            "position",
            "an enhanced position: RA, Dec 343.51530, 28.17470 which is equivalent to:\n RA(J2000) = 22h 54m 03.67s\n Dec(J2000) = +28d 10' 28.9\"\nwith an uncertainty of 1.9 arcseconds (radius, 90% containment).",
        );
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(p[0]["ra"], 343.5153);
        let r = p[1]["error_radius_deg"].as_f64().expect("radius");
        assert!((r - 1.9 / 3600.0).abs() < 1e-12, "{r}");
        let sex_ra = p[1]["ra"].as_f64().expect("ra");
        assert!((sex_ra - 343.5153).abs() < 1e-3, "{sex_ra}");
        let gbm = of(
            "position",
            "RA = 250.1, Dec = 46.2 (J2000 degrees, equivalent to J2000 16h 40m, 46d 12'), with a statistical uncertainty of 1.0 degrees.",
        );
        assert_eq!(gbm[0]["error_radius_deg"], 1.0);
        let master = of(
            "position",
            "Fermi GRB230727.40 (trigger No 712143685,08h 45m 55.92s , +67d 25m 58.8s, R=35.95) errorbox",
        );
        assert_eq!(master[0]["error_radius_deg"], 35.95);
        let neg = of("position", "R.A.= 19h 03m 33.11s, DEC.=-40d 53m 48.5s");
        assert!(neg[0]["dec"].as_f64().expect("dec") < -40.0);
        assert!(of("position", "RA = 400.0, Dec = 10.0").is_empty());
    }

    #[test]
    fn magnitudes_and_limits() {
        let m = of(
            "magnitude",
            "r = 20.1 +/- 0.1, r > 21.5 mag, g = 19.27 +/- 0.16 mag, F115W(AB) ~ 25.48 +/- 0.20, R=0.05, z = 0.36",
        );
        let got: Vec<(String, f64, bool)> = m
            .iter()
            .map(|p| {
                (
                    p["band"].as_str().unwrap_or_default().to_owned(),
                    p["mag"].as_f64().unwrap_or_default(),
                    p["is_limit"].as_bool().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("r".into(), 20.1, false),
                ("r".into(), 21.5, true),
                ("g".into(), 19.27, false),
                ("F115W".into(), 25.48, false)
            ]
        );
    }

    #[test]
    fn instruments_once_each() {
        let i = of(
            "instrument",
            "Swift/XRT and Swift-XRT saw it; Fermi GBM, the Zwicky Transient Facility and SVOM/ECLAIRs too.",
        );
        let names: Vec<&str> = i.iter().filter_map(|p| p["name"].as_str()).collect();
        assert_eq!(
            names,
            ["ZTF", "Swift/XRT", "Fermi/GBM", "SVOM/ECLAIRs", "SVOM"]
        );
    }
}
