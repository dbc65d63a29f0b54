//! Protobuf renderings of the alert archive for [`super::grpc`], and the
//! count and alert URI that filters' and catalogs' answers share. No logic
//! beyond the shape of the answer.

use super::cutouts::{Cutout, CutoutKind};
use super::lightcurve::{self, Point};
use super::service::{AlertAnswer, BrokerView, FoundAlert, IngestReport, LightCurve, SchemaAnswer};
use super::stretch::BLANK_COLOUR;
use crate::astrotime;
use ithaca_kit::json;
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::mcp::v1 as mcp;
use serde_json::Value as Json;

/// A count as the wire carries it (int32, so agents get JSON integers).
pub fn n(v: i64) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

/// The resource listing the brokers.
pub const BROKERS_URI: &str = "doomberg://brokers";

pub fn alert_uri(broker_id: &str, candid: i64) -> String {
    format!("doomberg://brokers/{broker_id}/alerts/{candid}")
}

pub fn light_curve_uri(broker_id: &str, object_id: &str) -> String {
    format!("doomberg://brokers/{broker_id}/objects/{object_id}/lightcurve")
}

pub fn broker(view: BrokerView) -> pb::Broker {
    pb::Broker {
        operations: view.operations(),
        broker_id: view.row.broker_id,
        name: view.row.name,
        survey: view.row.survey,
        credential_configured: view.credential_configured,
        alerts: n(view.stats.alerts),
        objects: n(view.stats.objects),
        first_jd: view.stats.first_jd,
        last_jd: view.stats.last_jd,
        uri: BROKERS_URI.to_owned(),
    }
}

fn num(c: &Json, name: &str) -> Option<f64> {
    c.get(name)?.as_f64().filter(|v| v.is_finite())
}

fn int(c: &Json, name: &str) -> Option<i32> {
    c.get(name)?.as_i64().and_then(|v| i32::try_from(v).ok())
}

fn text(c: &Json, name: &str) -> Option<String> {
    c.get(name)?.as_str().map(str::to_owned)
}

pub fn alert(a: FoundAlert) -> pb::Alert {
    let c = &a.candidate;
    let r = &a.row;
    pb::Alert {
        candid: r.candid.to_string(),
        object_id: r.object_id.clone(),
        jd: r.jd,
        mjd: r.jd - astrotime::MJD_OFFSET,
        time_utc: astrotime::jd_to_iso(r.jd),
        fid: i32::try_from(r.fid).unwrap_or_default(),
        band: lightcurve::band(r.fid).to_owned(),
        ra: r.ra,
        dec: r.dec,
        magpsf: num(c, "magpsf"),
        sigmapsf: num(c, "sigmapsf"),
        diffmaglim: num(c, "diffmaglim"),
        isdiffpos: text(c, "isdiffpos"),
        rb: num(c, "rb"),
        drb: num(c, "drb"),
        nbad: int(c, "nbad"),
        fwhm: num(c, "fwhm"),
        elong: num(c, "elong"),
        sgscore1: num(c, "sgscore1"),
        distpsnr1: num(c, "distpsnr1"),
        ssdistnr: num(c, "ssdistnr"),
        ssnamenr: text(c, "ssnamenr"),
        ndethist: int(c, "ndethist"),
        jdstarthist: num(c, "jdstarthist"),
        programid: int(c, "programid"),
        history: Some(pb::AlertHistory {
            prv_detections: n(r.prv_detections),
            prv_upper_limits: n(r.prv_upper_limits),
            fp_hists: r.fp_hists.map(n),
        }),
        schemavsn: r.schemavsn.clone(),
        separation_arcsec: a.separation_arcsec,
        uri: alert_uri(&r.broker_id, r.candid),
        packet: a.packet.map(json::to_struct),
    }
}

pub fn alerts(a: AlertAnswer) -> pb::BrokerAlerts {
    let alerts: Vec<pb::Alert> = a.alerts.into_iter().map(alert).collect();
    pb::BrokerAlerts {
        broker_id: a.broker_id,
        query: a.query,
        count: n(alerts.len() as i64),
        alerts,
        matched: n(a.matched),
        truncated: a.truncated,
        scanned: a.scanned.map(n),
        suggestion: a.suggestion,
    }
}

fn point(p: &Point, zero_jd: f64) -> pb::PhotometryPoint {
    pb::PhotometryPoint {
        jd: p.jd,
        mjd: p.jd - astrotime::MJD_OFFSET,
        time_utc: astrotime::jd_to_iso(p.jd),
        days_since_first_detection: p.jd - zero_jd,
        band: lightcurve::band(p.fid).to_owned(),
        fid: i32::try_from(p.fid).unwrap_or_default(),
        kind: p.kind.as_str().to_owned(),
        is_limit: p.is_limit,
        mag: p.mag,
        mag_err: p.mag_err,
        flux: p.flux,
        flux_err: p.flux_err,
        magzpsci: p.magzpsci,
        isdiffpos: p.isdiffpos.clone(),
        candid: p.candid.map(|c| c.to_string()),
        programid: p.programid.and_then(|v| i32::try_from(v).ok()),
    }
}

/// What a light curve's points cover, against the survey's own history.
fn history_note(lc: &LightCurve) -> String {
    let mut note = format!(
        "The points are what {} ingested alert(s) held: each alert carries about 30 days of \
         history, so first_detection_utc is the first detection among them. mag is a difference \
         magnitude (PSF fit on the difference image), not the source's total brightness.",
        lc.alerts
    );
    if let (Some(survey), Some(first)) = (lc.survey_first_jd, lc.first_detection_jd)
        && first - survey > 1.0
    {
        note.push_str(&format!(
            " The survey first detected this position on {} ({} detections in all), {:.0} days \
             before the first point here.",
            astrotime::jd_to_iso(survey),
            lc.survey_detections
                .map_or_else(|| "?".to_owned(), |d| d.to_string()),
            first - survey
        ));
    }
    note
}

/// A light curve's answer: counts and bands describe the whole curve; the
/// points are `page`'s.
pub fn light_curve(lc: LightCurve, page: &lightcurve::Page) -> pb::LightCurve {
    let count = |k: lightcurve::Kind| n(lc.points.iter().filter(|p| p.kind == k).count() as i64);
    let (range, next_cursor) = page.range(&lc.points);
    let mut bands: Vec<String> = Vec::new();
    for p in &lc.points {
        let b = lightcurve::band(p.fid).to_owned();
        if !bands.contains(&b) {
            bands.push(b);
        }
    }
    bands.sort();
    let uri = light_curve_uri(&lc.broker_id, &lc.object_id);
    pb::LightCurve {
        detections: count(lightcurve::Kind::Detection),
        upper_limits: count(lightcurve::Kind::UpperLimit),
        forced: count(lightcurve::Kind::Forced),
        count: n(range.len() as i64),
        points: lc.points[range]
            .iter()
            .map(|p| point(p, lc.zero_jd))
            .collect(),
        total: n(lc.points.len() as i64),
        truncated: next_cursor.is_some(),
        next_cursor,
        alerts: n(lc.alerts),
        first_detection_jd: lc.first_detection_jd,
        first_detection_utc: lc.first_detection_jd.map(astrotime::jd_to_iso),
        bands,
        time_scale: astrotime::SCALE.to_owned(),
        svg_uri: format!("{uri}.svg"),
        uri,
        forced_note: lightcurve::FORCED_NOTE.to_owned(),
        survey_first_detection_jd: lc.survey_first_jd,
        survey_first_detection_utc: lc.survey_first_jd.map(astrotime::jd_to_iso),
        survey_detections: lc.survey_detections.and_then(|d| i32::try_from(d).ok()),
        history_note: history_note(&lc),
        broker_id: lc.broker_id,
        object_id: lc.object_id,
    }
}

pub fn schema(s: SchemaAnswer) -> pb::AlertSchema {
    let paths: Vec<pb::SchemaPath> = s
        .paths
        .into_iter()
        .map(|(f, versions)| pb::SchemaPath {
            path: f.path,
            field: f.field,
            r#type: f.avro_type,
            nullable: f.nullable,
            versions,
            doc: f.doc,
        })
        .collect();
    pb::AlertSchema {
        survey: "ZTF".to_owned(),
        source: s.source.to_owned(),
        versions: s.versions,
        count: n(paths.len() as i64),
        paths,
        matched: n(s.matched),
        truncated: s.truncated,
        producer: s.producer,
        producers: s.producers,
    }
}

pub fn ingest_report(report: IngestReport) -> pb::AlertIngestReport {
    pb::AlertIngestReport {
        broker_id: report.broker_id,
        source: report.source,
        checksum: report.checksum,
        alerts: n(report.alerts),
        stored: n(report.stored),
        already_present: report.already_present,
        candids: report.candids.iter().map(i64::to_string).collect(),
        object_ids: report.object_ids,
        schema_version: report.version,
    }
}

pub fn cutout_uri(broker_id: &str, candid: i64, kind: CutoutKind) -> String {
    format!(
        "{}/cutouts/{}.png",
        alert_uri(broker_id, candid),
        kind.as_str()
    )
}

/// A cutout as one image block, with what was drawn beside it (the console
/// shows the limits; a resource read carries only the image).
pub fn cutout(c: Cutout) -> mcp::ToolContent {
    let stretch = c.stretch.map_or(
        Json::Null,
        |s| serde_json::json!({"name": "zscale", "z1": s.z1, "z2": s.z2}),
    );
    let about = serde_json::json!({
        "uri": cutout_uri(&c.broker_id, c.candid, c.kind),
        "candid": c.candid.to_string(),
        "kind": c.kind.as_str(),
        "width": c.width,
        "height": c.height,
        "stretch": stretch,
        "blank_pixels": c.blank_pixels,
        "blank_colour": BLANK_COLOUR,
    });
    mcp::ToolContent {
        content: vec![mcp::Content {
            kind: Some(mcp::content::Kind::Image(mcp::BinaryContent {
                data: c.png,
                mime_type: "image/png".to_owned(),
            })),
        }],
        structured: Some(json::to_struct(about)),
    }
}
