//! The three input forms: GCN Circulars (JSON Lines, a JSON array, or one
//! record, as GCN's archive serves them), VOEvent 2.0 notices (XML, read
//! with `roxmltree`, which refuses DTDs and so entity expansion), and GCN's
//! JSON notices (the gcn.nasa.gov unified schema). Every error says where.
//! A notice beyond [`super::limits`] is refused before it is parsed.

use super::limits;
use super::model::{DateObs, EventKind, Name, check_circle};
use serde_json::Value as Json;
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};

/// Longest subject and body accepted, in characters.
pub const MAX_SUBJECT: usize = 1_000;
pub const MAX_BODY: usize = 200_000;

/// What a file held.
#[derive(Clone, Debug)]
pub enum ParsedFile {
    Circulars(Vec<Circular>),
    Notice(Box<Notice>),
    /// A gravitational-wave multi-order sky map (FITS).
    SkyMap(Box<super::skymap::SkyMap>),
}

impl ParsedFile {
    pub fn kind(&self) -> &'static str {
        match self {
            ParsedFile::Circulars(_) => "circulars",
            ParsedFile::Notice(n) => n.format.as_str(),
            ParsedFile::SkyMap(_) => "skymap",
        }
    }
}

/// One GCN Circular.
#[derive(Clone, Debug, PartialEq)]
pub struct Circular {
    pub circular_id: i64,
    pub subject: String,
    pub submitter: String,
    pub created_on_ms: i64,
    pub body: String,
    /// GCN's own event name for it, when the archive has one.
    pub event_id: Option<String>,
    pub bibcode: Option<String>,
    /// SHA-256 of the fields above: the same record twice is the same.
    pub checksum: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoticeFormat {
    VoEvent,
    GcnJson,
}

impl NoticeFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeFormat::VoEvent => "voevent",
            NoticeFormat::GcnJson => "gcn-json",
        }
    }
}

/// One notice, read.
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// The IVORN (VOEvent), or a key of mission, ids and alert time (JSON).
    pub key: String,
    pub format: NoticeFormat,
    pub mission: String,
    pub instrument: Option<String>,
    /// `FERMI_GBM_GND_POS`, `einstein_probe/wxt/alert`, …
    pub notice_type: String,
    pub packet_type: Option<i64>,
    /// The trigger's id as the mission writes it (`798437606`, `sb26042105`).
    pub trigger_id: Option<String>,
    /// Names the event goes by because of this notice (`Fermi 798437606`).
    pub names: Vec<Name>,
    /// The time the notice locates.
    pub time: DateObs,
    /// When the notice was issued.
    pub notice_date: Option<DateObs>,
    /// RA, Dec and error radius in degrees.
    pub position: Option<(f64, f64, f64)>,
    pub skymap_url: Option<String>,
    pub kind: EventKind,
    pub content: String,
}

/// Read a file of any of the three forms.
pub fn parse(bytes: &[u8]) -> Result<ParsedFile, String> {
    if super::skymap::looks_like(bytes) {
        return super::skymap::read(bytes).map(|m| ParsedFile::SkyMap(Box::new(m)));
    }
    let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8 text ({e})"))?;
    let text = text.trim_start_matches('\u{feff}');
    match text.trim_start().as_bytes().first() {
        None => Err("the file is empty".to_owned()),
        Some(b'<') => {
            limits::check_voevent(text)?;
            voevent(text).map(|n| ParsedFile::Notice(Box::new(n)))
        }
        Some(b'{' | b'[') => json_file(text),
        Some(_) => Err(
            "neither XML (a VOEvent notice), JSON (circulars or a GCN JSON notice) nor FITS (a sky map)"
                .to_owned(),
        ),
    }
}

fn json_file(text: &str) -> Result<ParsedFile, String> {
    match serde_json::from_str::<Json>(text) {
        Ok(Json::Array(items)) => circular_list(items.into_iter().map(|v| (None, v))),
        Ok(Json::Object(map)) => {
            if let Some(Json::Array(items)) = map.get("circulars") {
                return circular_list(items.iter().cloned().map(|v| (None, v)));
            }
            let value = Json::Object(map);
            if value.get("circularId").is_some() {
                return circular_list(std::iter::once((None, value)));
            }
            limits::check_json_notice(text)?;
            json_notice(&value, text).map(|n| ParsedFile::Notice(Box::new(n)))
        }
        Ok(_) => Err("JSON of neither circulars nor a notice".to_owned()),
        // More than one value: JSON Lines, one circular per line.
        Err(_) => {
            let mut items = Vec::new();
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let value = serde_json::from_str::<Json>(line)
                    .map_err(|e| format!("line {}: not JSON ({e})", i + 1))?;
                items.push((Some(i + 1), value));
            }
            circular_list(items.into_iter())
        }
    }
}

fn circular_list(items: impl Iterator<Item = (Option<usize>, Json)>) -> Result<ParsedFile, String> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    for (n, (line, value)) in items.enumerate() {
        let at = match line {
            Some(l) => format!("line {l}"),
            None => format!("record {}", n + 1),
        };
        let c = circular(&value).map_err(|e| format!("{at}: {e}"))?;
        if !seen.insert(c.circular_id) {
            return Err(format!(
                "{at}: circularId {} appears twice in the file",
                c.circular_id
            ));
        }
        out.push(c);
    }
    if out.is_empty() {
        return Err("no circulars in the file".to_owned());
    }
    out.sort_by_key(|c| c.circular_id);
    Ok(ParsedFile::Circulars(out))
}

fn circular(v: &Json) -> Result<Circular, String> {
    if !v.is_object() {
        return Err("a circular must be a JSON object".to_owned());
    }
    let circular_id = v
        .get("circularId")
        .and_then(Json::as_i64)
        .filter(|id| *id > 0)
        .ok_or("circularId: required, a positive integer")?;
    let text = |field: &str, max: usize, required: bool| -> Result<Option<String>, String> {
        match v.get(field) {
            None | Some(Json::Null) if !required => Ok(None),
            Some(Json::String(s)) if s.chars().count() <= max => Ok(Some(s.clone())),
            Some(Json::String(_)) => Err(format!("{field}: longer than {max} characters")),
            _ => Err(format!("{field}: required, a string")),
        }
    };
    let subject = text("subject", MAX_SUBJECT, true)?.unwrap_or_default();
    if subject.trim().is_empty() {
        return Err("subject: must not be empty".to_owned());
    }
    let body = text("body", MAX_BODY, true)?.unwrap_or_default();
    let submitter = text("submitter", MAX_SUBJECT, false)?.unwrap_or_default();
    let created_on_ms = match v.get("createdOn") {
        None | Some(Json::Null) => date_header(&body).ok_or(
            "createdOn: required, Unix milliseconds (or a `DATE: yy/mm/dd hh:mm:ss GMT` header line in the body)",
        )?,
        Some(given) => given
            .as_i64()
            .filter(|ms| DateObs::from_ms(*ms).is_some())
            .ok_or("createdOn: Unix milliseconds between 1950 and 2200")?,
    };
    let event_id = text("eventId", 200, false)?.filter(|s| !s.trim().is_empty());
    let bibcode = text("bibcode", 100, false)?.filter(|s| !s.trim().is_empty());
    let checksum = hex::encode(Sha256::digest(
        serde_json::json!([
            circular_id,
            subject,
            submitter,
            created_on_ms,
            body,
            event_id,
            bibcode
        ])
        .to_string(),
    ));
    Ok(Circular {
        circular_id,
        subject,
        submitter,
        created_on_ms,
        body,
        event_id,
        bibcode,
        checksum,
    })
}

/// The time of a circular in its classic plain-text form, whose header
/// (`TITLE:`, `NUMBER:`, `SUBJECT:`, `DATE:`, `FROM:`) precedes the text:
/// the `DATE: yy/mm/dd hh:mm:ss GMT` line among the first lines, read as
/// UTC (two-digit years from 90 are 19yy: GCN began in the 1990s). An ISO
/// 8601 time on that line is read too.
pub fn date_header(body: &str) -> Option<i64> {
    let line = body
        .lines()
        .take(HEADER_LINES)
        .map(str::trim)
        .find_map(|l| l.strip_prefix("DATE:"))?
        .trim();
    if let Ok(t) = DateObs::parse(line) {
        return Some(t.ms());
    }
    let line = line
        .strip_suffix("GMT")
        .or_else(|| line.strip_suffix("UT"))
        .unwrap_or(line)
        .trim();
    let (date, clock) = line.split_once(char::is_whitespace)?;
    let num = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.len() <= 4 && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let mut d = date.split('/');
    let (Some(y), Some(mo), Some(day), None) = (d.next(), d.next(), d.next(), d.next()) else {
        return None;
    };
    let mut c = clock.trim().split(':');
    let (Some(h), Some(mi), Some(s), None) = (c.next(), c.next(), c.next(), c.next()) else {
        return None;
    };
    let y = match (y.len(), num(y)?) {
        (2, yy) if yy >= 90 => 1900 + yy,
        (2, yy) => 2000 + yy,
        (4, yyyy) => yyyy,
        _ => return None,
    };
    let ms = super::model::civil_ms(y, num(mo)?, num(day)?, num(h)?, num(mi)?, num(s)?, 0)?;
    DateObs::from_ms(ms).map(DateObs::ms)
}

/// How many lines from the top a `DATE:` header may be.
const HEADER_LINES: usize = 12;

// ---- VOEvent ------------------------------------------------------------------

fn voevent(text: &str) -> Result<Notice, String> {
    let doc = roxmltree::Document::parse(text).map_err(|e| format!("not well-formed XML: {e}"))?;
    let root = doc.root_element();
    if root.tag_name().name() != "VOEvent" {
        return Err(format!(
            "XML whose root is <{}>, not a VOEvent",
            root.tag_name().name()
        ));
    }
    match root.attribute("role") {
        Some("observation") => {}
        Some(role) => {
            return Err(format!(
                "role {role:?}: only observations are events (test and utility notices are not ingested)"
            ));
        }
        None => return Err("the VOEvent has no role".to_owned()),
    }
    let ivorn = root
        .attribute("ivorn")
        .map(str::trim)
        .filter(|s| s.starts_with("ivo://"))
        .ok_or("the VOEvent has no ivorn")?
        .to_owned();

    let notice_date = text_of(child(root, "Who").and_then(|w| child(w, "Date")))
        .and_then(|d| DateObs::parse(&d).ok());
    let mut params: HashMap<String, String> = HashMap::new();
    if let Some(what) = child(root, "What") {
        for p in what
            .descendants()
            .filter(|n| n.is_element() && n.tag_name().name() == "Param")
        {
            if let (Some(name), Some(value)) = (p.attribute("name"), p.attribute("value")) {
                params
                    .entry(name.to_owned())
                    .or_insert_with(|| value.trim().to_owned());
            }
        }
    }
    let where_when = child(root, "WhereWhen").ok_or("the VOEvent has no WhereWhen")?;
    let iso = text_of(descendant(where_when, "ISOTime")).ok_or("WhereWhen has no ISOTime")?;
    let time = DateObs::parse(&iso).map_err(|e| format!("ISOTime: {e}"))?;
    let position = match descendant(where_when, "Position2D") {
        None => None,
        Some(pos) => {
            let unit = pos.attribute("unit").unwrap_or("deg");
            if unit != "deg" {
                return Err(format!("Position2D: unit {unit:?}, expected deg"));
            }
            let num = |name: &str| -> Result<Option<f64>, String> {
                match text_of(descendant(pos, name)) {
                    None => Ok(None),
                    Some(t) => t
                        .parse::<f64>()
                        .map(Some)
                        .map_err(|_| format!("Position2D {name}: {t:?} is not a number")),
                }
            };
            match (num("C1")?, num("C2")?, num("Error2Radius")?) {
                // A zero error circle is no position (Fermi's first alert
                // carries 0, 0, 0 before any location exists).
                (Some(ra), Some(dec), Some(err)) if err > 0.0 => {
                    check_circle(ra, dec, err).map_err(|e| format!("Position2D: {e}"))?;
                    Some((ra, dec, err))
                }
                _ => None,
            }
        }
    };
    let packet_type = params
        .get("Packet_Type")
        .and_then(|p| p.parse::<i64>().ok());
    let mission = voevent_mission(packet_type, &ivorn);
    let instrument = params
        .get("Instrument")
        .cloned()
        .or_else(|| packet_instrument(packet_type).map(str::to_owned));
    let notice_type = packet_name(packet_type)
        .map(str::to_owned)
        .unwrap_or_else(|| match (&instrument, packet_type) {
            // The packet type is its own field; the name says what it is.
            (Some(i), _) => format!("{}_{}", mission.to_uppercase(), i.to_uppercase()),
            (None, Some(p)) => format!("{}_PACKET_{p}", mission.to_uppercase()),
            (None, None) => mission.to_uppercase(),
        });
    let kind = mission_kind(&mission);
    let mut names = Vec::new();
    let trigger_id = match mission.as_str() {
        "LVK" => params.get("GraceID").cloned(),
        "SVOM" => params.get("Burst_Id").cloned(),
        _ => params.get("TrigID").cloned(),
    }
    .filter(|t| !t.is_empty() && t.len() <= 64);
    if let Some(t) = &trigger_id {
        names.push(if mission == "LVK" {
            Name::new(t.clone())
        } else {
            Name::new(format!("{mission} {t}"))
        });
    }
    // Fermi GBM's burst number (bn260421176) is in its light-curve URL.
    if mission == "Fermi"
        && let Some(url) = params.get("LightCurve_URL")
        && let Some(bn) = bn_number(url)
    {
        names.push(Name::new(bn));
    }
    let skymap_url = params
        .iter()
        .filter(|(k, _)| k.starts_with("skymap_fits"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .min()
        .map(|(_, v)| v);
    Ok(Notice {
        key: ivorn,
        format: NoticeFormat::VoEvent,
        mission,
        instrument,
        notice_type,
        packet_type,
        trigger_id,
        names,
        time,
        notice_date,
        position,
        skymap_url,
        kind,
        content: text.to_owned(),
    })
}

fn child<'a, 'i>(node: roxmltree::Node<'a, 'i>, name: &str) -> Option<roxmltree::Node<'a, 'i>> {
    node.children()
        .find(|n| n.is_element() && n.tag_name().name() == name)
}

fn descendant<'a, 'i>(
    node: roxmltree::Node<'a, 'i>,
    name: &str,
) -> Option<roxmltree::Node<'a, 'i>> {
    node.descendants()
        .find(|n| n.is_element() && n.tag_name().name() == name)
}

fn text_of(node: Option<roxmltree::Node<'_, '_>>) -> Option<String> {
    node.and_then(|n| n.text())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// `bn` and nine digits anywhere in `s`.
fn bn_number(s: &str) -> Option<String> {
    let i = s.find("bn")?;
    let digits: String = s[i + 2..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    (digits.len() == 9).then(|| format!("bn{digits}"))
}

fn voevent_mission(packet_type: Option<i64>, ivorn: &str) -> String {
    let by_packet = match packet_type {
        Some(53..=99) => Some("Swift"),
        Some(110..=139) => Some("Fermi"),
        Some(150..=169) => Some("LVK"),
        Some(170..=179) => Some("IceCube"),
        Some(200..=219) => Some("SVOM"),
        _ => None,
    };
    if let Some(m) = by_packet {
        return m.to_owned();
    }
    let lower = ivorn.to_ascii_lowercase();
    for (needle, mission) in [
        ("/fermi", "Fermi"),
        ("/swift", "Swift"),
        ("org.svom", "SVOM"),
        ("gwnet", "LVK"),
        ("icecube", "IceCube"),
        ("/amon", "IceCube"),
        ("/integral", "INTEGRAL"),
        ("/maxi", "MAXI"),
    ] {
        if lower.contains(needle) {
            return mission.to_owned();
        }
    }
    // The authority of the IVORN, as a last resort.
    lower
        .trim_start_matches("ivo://")
        .split(['/', '#'])
        .next()
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_owned()
}

fn mission_kind(mission: &str) -> EventKind {
    match mission {
        "LVK" => EventKind::Gw,
        "IceCube" => EventKind::Neutrino,
        "Einstein Probe" | "MAXI" => EventKind::XRay,
        _ => EventKind::GammaRay,
    }
}

/// GCN's names of the classic packet types we know.
fn packet_name(packet_type: Option<i64>) -> Option<&'static str> {
    Some(match packet_type? {
        61 => "SWIFT_BAT_GRB_POS_ACK",
        62 => "SWIFT_BAT_GRB_POS_NACK",
        67 => "SWIFT_XRT_POSITION",
        81 => "SWIFT_UVOT_POSITION",
        97 => "SWIFT_BAT_QL_POS",
        110 => "FERMI_GBM_ALERT",
        111 => "FERMI_GBM_FLT_POS",
        112 => "FERMI_GBM_GND_POS",
        115 => "FERMI_GBM_FIN_POS",
        120 => "FERMI_LAT_POS_INI",
        121 => "FERMI_LAT_POS_UPD",
        127 => "FERMI_LAT_GND",
        150 => "LVC_PRELIMINARY",
        151 => "LVC_INITIAL",
        152 => "LVC_UPDATE",
        163 => "LVC_EARLY_WARNING",
        164 => "LVC_RETRACTION",
        173 => "ICECUBE_ASTROTRACK_GOLD",
        174 => "ICECUBE_ASTROTRACK_BRONZE",
        176 => "ICECUBE_CASCADE",
        _ => return None,
    })
}

fn packet_instrument(packet_type: Option<i64>) -> Option<&'static str> {
    Some(match packet_type? {
        61 | 62 | 97 => "BAT",
        67 => "XRT",
        81 => "UVOT",
        110..=119 => "GBM",
        120..=129 => "LAT",
        _ => return None,
    })
}

// ---- GCN JSON notices -------------------------------------------------------

fn json_notice(v: &Json, text: &str) -> Result<Notice, String> {
    let schema = v.get("$schema").and_then(Json::as_str).unwrap_or_default();
    // `…/gcn/notices/einstein_probe/wxt/alert.schema.json` → `einstein_probe/wxt/alert`.
    let path = schema
        .split("/notices/")
        .nth(1)
        .map(|p| p.trim_end_matches(".schema.json").to_owned());
    let superevent = v.get("superevent_id").and_then(Json::as_str);
    let time_text = v
        .get("trigger_time")
        .and_then(Json::as_str)
        .or_else(|| v.pointer("/event/time").and_then(Json::as_str));
    let (Some(time_text), true) = (time_text, path.is_some() || superevent.is_some()) else {
        return Err(
            "JSON that is neither circulars nor a GCN notice (no $schema and trigger_time)"
                .to_owned(),
        );
    };
    let time = DateObs::parse(time_text).map_err(|e| format!("trigger_time: {e}"))?;
    let path = path.unwrap_or_else(|| "igwn/gwalert".to_owned());
    let mission_slug = path.split('/').next().unwrap_or_default();
    let mission = match v.get("mission").and_then(Json::as_str) {
        Some(m) if !m.trim().is_empty() => m.trim().to_owned(),
        _ => mission_display(mission_slug, superevent.is_some()),
    };
    let instrument = v
        .get("instrument")
        .and_then(Json::as_str)
        .map(str::to_owned)
        .or_else(|| path.split('/').nth(1).map(str::to_uppercase));
    let ids: Vec<String> = match v.get("id") {
        Some(Json::Array(a)) => a
            .iter()
            .filter_map(|x| match x {
                Json::String(s) => Some(s.clone()),
                Json::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .collect(),
        Some(Json::String(s)) => vec![s.clone()],
        Some(Json::Number(n)) => vec![n.to_string()],
        _ => Vec::new(),
    };
    let ids: Vec<String> = ids
        .into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty() && s.len() <= 64)
        .collect();
    let prefix = match mission.as_str() {
        "Einstein Probe" => "EP".to_owned(),
        m => m.to_owned(),
    };
    let mut names: Vec<Name> = ids
        .iter()
        .map(|id| Name::new(format!("{prefix} {id}")))
        .collect();
    if let Some(s) = superevent {
        names.push(Name::new(s));
    }
    let position = match (
        v.get("ra").and_then(Json::as_f64),
        v.get("dec").and_then(Json::as_f64),
        v.get("ra_dec_error").and_then(Json::as_f64),
    ) {
        (Some(ra), Some(dec), Some(err)) if err > 0.0 => {
            check_circle(ra, dec, err).map_err(|e| format!("position: {e}"))?;
            Some((ra, dec, err))
        }
        _ => None,
    };
    let notice_date = v
        .get("alert_datetime")
        .and_then(Json::as_str)
        .and_then(|d| DateObs::parse(d).ok());
    let mut key = format!("gcn.nasa.gov/{path}#");
    key.push_str(&match (superevent, ids.is_empty()) {
        (Some(s), _) => s.to_owned(),
        (None, false) => ids.join(","),
        (None, true) => time.to_string(),
    });
    if let Some(d) = notice_date {
        key.push_str(&format!("@{d}"));
    }
    if let Some(t) = v.get("alert_type").and_then(Json::as_str) {
        key.push_str(&format!("/{t}"));
    }
    Ok(Notice {
        key,
        format: NoticeFormat::GcnJson,
        kind: if superevent.is_some() {
            EventKind::Gw
        } else {
            mission_kind(&mission)
        },
        trigger_id: superevent
            .map(str::to_owned)
            .or_else(|| ids.first().cloned()),
        mission,
        instrument,
        notice_type: path,
        packet_type: None,
        names,
        time,
        notice_date,
        position,
        skymap_url: None,
        content: text.to_owned(),
    })
}

fn mission_display(slug: &str, gw: bool) -> String {
    if gw {
        return "LVK".to_owned();
    }
    match slug {
        "einstein_probe" => "Einstein Probe".to_owned(),
        "svom" => "SVOM".to_owned(),
        "swift" => "Swift".to_owned(),
        "fermi" => "Fermi".to_owned(),
        "icecube" => "IceCube".to_owned(),
        "lvk" | "igwn" => "LVK".to_owned(),
        other => other.replace('_', " "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_is_not_gcn() {
        for (bytes, needle) in [
            (&b""[..], "empty"),
            (b"hello", "neither XML"),
            (b"<html></html>", "not a VOEvent"),
            (b"<voe:VOEvent", "well-formed"),
            (b"{\"a\": 1}", "neither circulars nor a GCN notice"),
            (b"{\"circularId\": 1}\n{\"circularId\": 2", "line 2"),
            (b"{\"circularId\": -3, \"subject\": \"x\"}", "circularId"),
            (b"\xff\xfe", "UTF-8"),
        ] {
            let err = parse(bytes).expect_err("refused");
            assert!(err.contains(needle), "{err:?} should mention {needle:?}");
        }
    }

    #[test]
    fn a_circular_without_created_on_takes_its_date_header() {
        let body = "TITLE:   GCN CIRCULAR\nNUMBER:  34391\nSUBJECT: GRB 230812B: Fermi GBM detection\n\
                    DATE:    23/08/12 19:24:41 GMT\nFROM:    Someone\n\nAt 18:58:12 UT ...";
        let record =
            serde_json::json!({"circularId": 34391, "subject": "GRB 230812B", "body": body});
        let ParsedFile::Circulars(c) = parse(record.to_string().as_bytes()).expect("parses") else {
            panic!("circulars");
        };
        let want = super::super::model::civil_ms(2023, 8, 12, 19, 24, 41, 0).expect("valid");
        assert_eq!(c[0].created_on_ms, want);
        assert_eq!(
            date_header("DATE: 97/02/28 23:59:59 GMT"),
            super::super::model::civil_ms(1997, 2, 28, 23, 59, 59, 0)
        );
        assert_eq!(
            date_header("DATE: 2024-06-30T12:00:00Z"),
            super::super::model::civil_ms(2024, 6, 30, 12, 0, 0, 0)
        );
        for bad in [
            "DATE: 23/13/12 19:24:41 GMT",
            "DATE: soon",
            "no header",
            "DATE: 23/08/12",
        ] {
            assert_eq!(date_header(bad), None, "{bad}");
        }
        // Neither createdOn nor a DATE line: refused, naming both.
        let none = serde_json::json!({"circularId": 1, "subject": "x", "body": "text"});
        let err = parse(none.to_string().as_bytes()).expect_err("no time");
        assert!(err.contains("createdOn") && err.contains("DATE:"), "{err}");
        let bad =
            serde_json::json!({"circularId": 1, "subject": "x", "body": body, "createdOn": "x"});
        assert!(parse(bad.to_string().as_bytes()).is_err());
    }

    #[test]
    fn refuses_test_notices_and_bad_positions() {
        let test = r#"<voe:VOEvent xmlns:voe="http://www.ivoa.net/xml/VOEvent/v2.0" role="test" ivorn="ivo://x/y#1"/>"#;
        assert!(parse(test.as_bytes()).expect_err("test").contains("role"));
        let bad = r#"<voe:VOEvent xmlns:voe="http://www.ivoa.net/xml/VOEvent/v2.0" role="observation" ivorn="ivo://x/y#1">
          <WhereWhen><ObsDataLocation><ObservationLocation><AstroCoords>
          <Time><TimeInstant><ISOTime>2026-04-21T04:13:21.17</ISOTime></TimeInstant></Time>
          <Position2D unit="deg"><Value2><C1>400</C1><C2>0</C2></Value2><Error2Radius>1</Error2Radius></Position2D>
          </AstroCoords></ObservationLocation></ObsDataLocation></WhereWhen></voe:VOEvent>"#;
        assert!(parse(bad.as_bytes()).expect_err("ra").contains("ra 400"));
        let dtd = r#"<!DOCTYPE lolz [<!ENTITY lol "lol">]><voe:VOEvent/>"#;
        assert!(parse(dtd.as_bytes()).is_err(), "DTDs are refused");
    }
}
