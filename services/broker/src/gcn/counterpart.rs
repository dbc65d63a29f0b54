//! Counterparts and candidates a circular reports: the object's name (a
//! survey or TNS designation: `ZTF23aaxeacr`, `AT 2023pel`, `SN 2023pel`,
//! `EP240315a`, `Swift J1727.8-1613`) and the position the circular gives
//! for it, with its uncertainty when stated.
//!
//! Names on one line are one object (`AT 2023qxj (ZTF23abaanxz)`, a table
//! row with its TNS name and survey alias). Its position is the one on a
//! line naming it (a table row: `| AT 2023tou | 22:18:20.254 | -17:46:08.13
//! |`, or decimal columns under an `ra`/`dec` header), else the first
//! labelled position (`RA = …, Dec = …`) within a few lines after one of its
//! mentions (the first that has one) with no other object named in between. Without either, the
//! position is null: nothing is guessed.

use super::model::Extraction;
use regex::Regex;
use serde_json::{Value as Json, json};
use std::sync::LazyLock;

/// How far after a name a labelled position may follow (bytes).
const POSITION_REACH: usize = 300;
/// Most counterparts kept from one circular (candidate tables can be long).
const MAX_COUNTERPARTS: usize = 50;

/// A labelled position the extractor found: byte span, RA, Dec (degrees)
/// and the error radius stated with it (degrees).
pub type Spanned = (usize, usize, f64, f64, Option<f64>);

/// An object a circular names: its names (first as written first) and the
/// byte span of every mention.
type Object = (Vec<String>, Vec<(usize, usize)>);

static NAME: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b(ZTF\d{2}[a-z]{7}|AT\s?20\d{2}[a-z]{2,4}|SN\s?20\d{2}[a-z]{1,4}|EP\d{6}[a-z]|Swift\s+J\d{4}(?:\.\d)?[+-]\d{2,4}(?:\.\d)?)\b")
        .expect("valid regex")
});
static ROW_SEXAGESIMAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(\d{1,2}):(\d\d):(\d\d(?:\.\d+)?)\s*[|,;]?\s*([+\-−]?)(\d{1,2}):(\d\d):(\d\d(?:\.\d+)?)",
    )
    .expect("valid regex")
});
static ROW_DECIMAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\|\s*(\d{1,3}\.\d+)\s*\|\s*([+-]?\d{1,2}\.\d+)\s*\|").expect("valid regex")
});
static RA_DEC_HEADER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?i)\|\s*ra\s*\|\s*dec\s*\|").expect("valid regex"));

/// A name in one normal form (`AT2023pel` and `AT 2023pel` are one name).
fn key(name: &str) -> String {
    name.split_whitespace()
        .collect::<String>()
        .to_ascii_lowercase()
}

fn line_of(text: &str, at: usize) -> (usize, usize) {
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    (start, end)
}

/// A position in a table row of `line`, if it has one.
fn row_position(text: &str, line: (usize, usize)) -> Option<(f64, f64)> {
    let row = &text[line.0..line.1];
    if let Some(c) = ROW_SEXAGESIMAL.captures(row) {
        let f = |i: usize| c[i].parse::<f64>().ok();
        let (h, m, s, d, dm, ds) = (f(1)?, f(2)?, f(3)?, f(5)?, f(6)?, f(7)?);
        if h < 24.0 && m < 60.0 && s < 60.0 && d <= 90.0 && dm < 60.0 && ds < 60.0 {
            let dec = d + dm / 60.0 + ds / 3600.0;
            let dec = if matches!(&c[4], "-" | "−") {
                -dec
            } else {
                dec
            };
            return Some((15.0 * (h + m / 60.0 + s / 3600.0), dec));
        }
    }
    // Decimal columns only under a header that names them.
    let before = &text[text.floor_char_boundary(line.0.saturating_sub(600))..line.0];
    if RA_DEC_HEADER.is_match(before)
        && let Some(c) = ROW_DECIMAL.captures(row)
    {
        let (ra, dec) = (c[1].parse::<f64>().ok()?, c[2].parse::<f64>().ok()?);
        if (0.0..360.0).contains(&ra) && (-90.0..=90.0).contains(&dec) {
            return Some((ra, dec));
        }
    }
    None
}

/// One extraction per object the circular names.
pub fn counterparts(text: &str, id: i64, positions: &[Spanned], out: &mut Vec<Extraction>) {
    // Objects in order of first mention: their names and every mention's span.
    let mut objects: Vec<Object> = Vec::new();
    let mut line_owner: Option<((usize, usize), usize)> = None;
    for m in NAME.find_iter(text) {
        let name: String = m.as_str().split_whitespace().collect::<Vec<_>>().join(" ");
        let line = line_of(text, m.start());
        let known = objects
            .iter()
            .position(|(names, _)| names.iter().any(|n| key(n) == key(&name)));
        let same_line = line_owner.filter(|(l, _)| *l == line).map(|(_, i)| i);
        let index = match (known, same_line) {
            (Some(i), _) => i,
            (None, Some(i)) => i,
            (None, None) => {
                if objects.len() >= MAX_COUNTERPARTS {
                    break;
                }
                objects.push((Vec::new(), Vec::new()));
                objects.len() - 1
            }
        };
        let (names, spans) = &mut objects[index];
        if !names.iter().any(|n| key(n) == key(&name)) {
            names.push(name);
        }
        spans.push((m.start(), m.end()));
        line_owner = Some((line, index));
    }
    let all_mentions: Vec<usize> = NAME.find_iter(text).map(|m| m.start()).collect();
    for (names, spans) in objects {
        let mut found: Option<(f64, f64, Option<f64>)> = None;
        for (start, _) in &spans {
            if let Some((ra, dec)) = row_position(text, line_of(text, *start)) {
                found = Some((ra, dec, None));
                break;
            }
        }
        for (_, mention_end) in &spans {
            if found.is_some() {
                break;
            }
            let reach = mention_end + POSITION_REACH;
            found = positions
                .iter()
                .find(|p| p.0 >= *mention_end && p.0 <= reach)
                .filter(|p| {
                    // No other object named between the name and the position.
                    !all_mentions
                        .iter()
                        .any(|&m| m > *mention_end && m < p.0 && !spans.iter().any(|s| s.0 == m))
                })
                .map(|p| (p.2, p.3, p.4));
        }
        let (first_start, first_end) = spans[0];
        let (ctx_start, _) = line_of(text, first_start);
        let context_end = text.floor_char_boundary((first_end + 120).min(text.len()));
        let snippet: String = text[ctx_start.max(first_start.saturating_sub(80))..context_end]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        let snippet: String = snippet.chars().take(200).collect();
        let (ra, dec, err) = match found {
            Some((ra, dec, err)) => (json!(ra), json!(dec), err.map_or(Json::Null, |e| json!(e))),
            None => (Json::Null, Json::Null, Json::Null),
        };
        let mut payload = json!({
            "kind": "counterpart",
            "circular_id": id,
            "name": names[0],
            "ra": ra,
            "dec": dec,
            "error_radius_deg": err,
            "text": snippet,
        });
        if names.len() > 1 {
            payload["other_names"] = json!(names[1..]);
        }
        out.push(Extraction {
            kind: "counterpart",
            payload,
            circle: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str, positions: &[Spanned]) -> Vec<Json> {
        let mut out = Vec::new();
        counterparts(text, 1, positions, &mut out);
        out.into_iter().map(|e| e.payload).collect()
    }

    #[test]
    fn names_on_a_line_are_one_object_with_the_position_that_follows() {
        let text = "AT 2023qxj (ZTF23abaanxz) was discovered at the position (J2000) of:\n\n   RA = 19:58:33.55\nlater AT2023qxj faded";
        let at = text.find("RA =").expect("ra");
        let got = run(text, &[(at, at + 20, 299.64, 54.46, Some(0.001))]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0]["name"], "AT 2023qxj");
        assert_eq!(got[0]["other_names"], json!(["ZTF23abaanxz"]));
        assert_eq!(
            (got[0]["ra"].clone(), got[0]["error_radius_deg"].clone()),
            (json!(299.64), json!(0.001))
        );
    }

    #[test]
    fn table_rows_give_each_object_its_position() {
        let text = "| TNS Name | RA | dec |\n| AT 2023tou | 22:18:20.254 | -17:46:08.13 |\n| AT 2023too | 01:00:00.0 | +10:30:00 |\n\n| iau name | alias | ra | dec |\n| AT2023rkw | ZTF23abawyxp | 349.8224 | 37.7884 |";
        let got = run(text, &[]);
        assert_eq!(got.len(), 3, "{got:?}");
        let dec = got[0]["dec"].as_f64().expect("dec");
        assert!((dec + 17.7689).abs() < 1e-3, "{dec}");
        assert_eq!(got[1]["ra"], 15.0);
        assert_eq!(
            (got[2]["ra"].clone(), got[2]["dec"].clone()),
            (json!(349.8224), json!(37.7884))
        );
        assert_eq!(got[2]["other_names"], json!(["ZTF23abawyxp"]));
    }

    #[test]
    fn no_position_is_null_not_guessed() {
        let text = "We observed SN 2023pel. Separately, RA = 10.0, Dec = 20.0 is another source\nbelonging to ZTF23aaaaaaa.";
        let at = text.find("RA =").expect("ra");
        let got = run(text, &[(at, at + 20, 10.0, 20.0, None)]);
        assert_eq!(got[0]["name"], "SN 2023pel");
        // The position follows, but is it SN 2023pel's? Nothing else was
        // named in between, so it is taken; the next object gets none.
        assert_eq!(got[0]["ra"], 10.0);
        assert_eq!(got[1]["ra"], Json::Null);
    }
}
