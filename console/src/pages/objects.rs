//! One astronomical object's page, `/console/objects/{objectId}`: its light
//! curve (the broker's SVG), its alerts, the three cutouts of one alert as
//! PNG, the survey's own crossmatch fields, the reference-catalog matches,
//! and the matches the person's tenant's filters saved. Each part is one
//! broker call made with the person's principal; a part whose call fails
//! says so and the rest of the page still shows.
//!
//! The images are served beside the page, through the same calls an agent's
//! resource reads make: `/console/objects/{objectId}/lightcurve.svg` and
//! `/console/alerts/{candid}/cutouts/{kind}.png`, both with `?broker=`
//! (default the deployment's archive).

use super::{Nav, Reader, error, failed, html};
use crate::Console;
use crate::backends::signed;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::mcp::v1 as mcp;
use serde::Deserialize;
use std::sync::Arc;

/// The broker an object page reads when the URL names none.
pub const DEFAULT_BROKER: &str = "ztf-archive";
/// Most alerts the page lists (the alert tool's largest page).
const ALERTS_SHOWN: i32 = 500;

#[derive(Deserialize, Default)]
pub struct ObjectQuery {
    /// The broker; empty: [`DEFAULT_BROKER`].
    #[serde(default)]
    broker: String,
    /// The alert whose cutouts are shown; empty: the newest.
    #[serde(default)]
    candid: String,
}

impl ObjectQuery {
    fn broker(&self) -> String {
        match self.broker.trim() {
            "" => DEFAULT_BROKER.to_owned(),
            b => b.to_owned(),
        }
    }
}

/// An alert as a table row.
pub struct AlertRow {
    pub candid: String,
    pub time_utc: String,
    pub jd: String,
    pub band: String,
    /// `17.92 ± 0.05`, or empty.
    pub mag: String,
    pub diffmaglim: String,
    pub isdiffpos: String,
    pub rb: String,
    pub drb: String,
    pub programid: String,
    pub selected: bool,
}

/// A reference-catalog match as a table row.
pub struct CatalogRow {
    pub catalog: String,
    pub id: String,
    pub separation: String,
    pub mag: String,
    pub kind: String,
    pub redshift: String,
    pub names: String,
}

/// A filter's saved match as a table row.
pub struct MatchRow {
    pub filter_id: String,
    pub filter_name: String,
    pub version: i32,
    pub active: bool,
    pub candid: String,
    pub jd: String,
    pub matched_at: String,
}

/// One cutout as the page shows it.
pub struct CutoutView {
    pub kind: &'static str,
    pub title: &'static str,
    pub src: String,
}

#[derive(Template)]
#[template(path = "object.html")]
struct ObjectPage {
    nav: Nav,
    object_id: String,
    broker_id: String,
    /// `?broker=…` for links, empty for the default broker.
    broker_param: String,
    /// The newest alert's position.
    position: String,
    alerts: Vec<AlertRow>,
    alerts_matched: i32,
    selected: String,
    cutouts: Vec<CutoutView>,
    lightcurve_src: String,
    /// Counts and notes of the light curve, or why it is missing.
    curve: Option<pb::LightCurve>,
    curve_error: String,
    survey: Vec<(String, String)>,
    catalogs: Vec<CatalogRow>,
    crossmatch: Option<pb::Crossmatch>,
    crossmatch_error: String,
    matches: Vec<MatchRow>,
    matches_truncated: bool,
    matches_error: String,
}

/// `GET /console/objects/{objectId}?broker=&candid=`.
pub async fn show(
    State(console): State<Arc<Console>>,
    Path(object_id): Path<String>,
    Query(query): Query<ObjectQuery>,
    Reader(person): Reader,
) -> Response {
    let backends = &console.backends;
    let (mut alerts, mut catalogs, mut filters) =
        match (backends.alerts(), backends.catalogs(), backends.filters()) {
            (Ok(a), Ok(c), Ok(f)) => (a, c, f),
            (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => return failed(e),
        };
    let broker_id = query.broker();
    let sign = |m| signed(&console.key, &person.principal, backends.timeout, m);
    let found = match alerts
        .get_broker_alerts(sign(pb::GetBrokerAlertsRequest {
            broker_id: broker_id.clone(),
            object_id: Some(object_id.clone()),
            limit: Some(ALERTS_SHOWN),
            ..Default::default()
        }))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(status) => return failed(status.into()),
    };
    let object_id = found
        .alerts
        .first()
        .map_or(object_id, |a| a.object_id.clone());
    let curve = alerts
        .get_broker_alert_photometry(signed(
            &console.key,
            &person.principal,
            backends.timeout,
            pb::GetBrokerAlertPhotometryRequest {
                broker_id: broker_id.clone(),
                object_id: object_id.clone(),
                include_forced: Some(true),
                limit: Some(1),
                cursor: None,
            },
        ))
        .await;
    let crossmatch = catalogs
        .crossmatch_broker_catalogs(signed(
            &console.key,
            &person.principal,
            backends.timeout,
            pb::CrossmatchRequest {
                broker_id: broker_id.clone(),
                object_id: Some(object_id.clone()),
                limit: Some(20),
                ..Default::default()
            },
        ))
        .await;
    let matches = filters
        .list_object_filter_matches(signed(
            &console.key,
            &person.principal,
            backends.timeout,
            pb::ListObjectFilterMatchesRequest {
                broker_id: broker_id.clone(),
                object_id: object_id.clone(),
                limit: Some(50),
            },
        ))
        .await;

    // Newest first; the alert whose cutouts show is the one asked for, else
    // the newest.
    let mut listed = found.alerts;
    listed.sort_by(|a, b| b.jd.total_cmp(&a.jd));
    let wanted = query.candid.trim();
    let selected = listed
        .iter()
        .find(|a| a.candid == wanted)
        .or(listed.first())
        .map(|a| a.candid.clone())
        .unwrap_or_default();
    let position = listed
        .first()
        .map(|a| format!("RA {:.5}°, Dec {:+.5}°", a.ra, a.dec))
        .unwrap_or_default();
    let broker_param = if broker_id == DEFAULT_BROKER {
        String::new()
    } else {
        format!("?broker={}", encode(&broker_id))
    };
    let cutouts = [
        ("science", "Science"),
        ("template", "Template"),
        ("difference", "Difference"),
    ]
    .into_iter()
    .map(|(kind, title)| CutoutView {
        kind,
        title,
        src: format!(
            "/console/alerts/{}/cutouts/{kind}.png{broker_param}",
            encode(&selected)
        ),
    })
    .collect();
    let (curve, curve_error) = part(curve);
    let (crossmatch, crossmatch_error) = part(crossmatch);
    let (matches, matches_error) = part(matches);
    let survey = crossmatch
        .as_ref()
        .and_then(|c| c.survey_crossmatch.clone())
        .map(|s| {
            s.fields
                .into_iter()
                .map(|(k, v)| (k, value_text(v)))
                .collect()
        })
        .unwrap_or_default();
    let catalogs = crossmatch
        .as_ref()
        .map(|c| c.matches.iter().map(catalog_row).collect())
        .unwrap_or_default();
    let matches_truncated = matches.as_ref().is_some_and(|m| m.truncated);
    let matches = matches
        .map(|m| m.matches.into_iter().filter_map(match_row).collect())
        .unwrap_or_default();
    html(
        StatusCode::OK,
        &ObjectPage {
            nav: person.nav("objects"),
            lightcurve_src: format!(
                "/console/objects/{}/lightcurve.svg{broker_param}",
                encode(&object_id)
            ),
            alerts: listed
                .iter()
                .map(|a| alert_row(a, a.candid == selected))
                .collect(),
            alerts_matched: found.matched,
            object_id,
            broker_id,
            broker_param,
            position,
            selected,
            cutouts,
            curve,
            curve_error,
            survey,
            catalogs,
            crossmatch,
            crossmatch_error,
            matches,
            matches_truncated,
            matches_error,
        },
    )
}

/// `GET /console/objects/{objectId}/lightcurve.svg?broker=`.
pub async fn light_curve(
    State(console): State<Arc<Console>>,
    Path(object_id): Path<String>,
    Query(query): Query<ObjectQuery>,
    Reader(person): Reader,
) -> Response {
    let mut client = match console.backends.alerts() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::GetLightCurvePlotRequest {
            broker_id: query.broker(),
            object_id,
        },
    );
    match client.get_light_curve_plot(request).await {
        Ok(r) => image(r.into_inner(), "image/svg+xml"),
        Err(status) => failed(status.into()),
    }
}

/// `GET /console/alerts/{candid}/cutouts/{kind}.png?broker=`.
pub async fn cutout(
    State(console): State<Arc<Console>>,
    Path((candid, file)): Path<(String, String)>,
    Query(query): Query<ObjectQuery>,
    Reader(person): Reader,
) -> Response {
    let Some(kind) = file.strip_suffix(".png") else {
        return error(StatusCode::NOT_FOUND, "Not found.");
    };
    let mut client = match console.backends.alerts() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::GetAlertCutoutRequest {
            broker_id: query.broker(),
            candid,
            kind: kind.to_owned(),
        },
    );
    match client.get_alert_cutout(request).await {
        Ok(r) => image(r.into_inner(), "image/png"),
        Err(status) => failed(status.into()),
    }
}

/// The first block of `content` of type `mime` (an image block, or an
/// embedded resource's text or bytes), served inert: a picture opened on
/// its own must not run script in the console's origin.
fn image(content: mcp::ToolContent, mime: &'static str) -> Response {
    let body = content.content.into_iter().find_map(|c| match c.kind {
        Some(mcp::content::Kind::Image(b)) if b.mime_type == mime => Some(b.data),
        Some(mcp::content::Kind::Resource(r)) if r.mime_type == mime => match r.body {
            Some(mcp::embedded_resource::Body::Text(t)) => Some(t.into_bytes()),
            Some(mcp::embedded_resource::Body::Blob(b)) => Some(b),
            None => None,
        },
        _ => None,
    });
    let Some(body) = body else {
        return error(StatusCode::NOT_FOUND, "Not found.");
    };
    let mut response = body.into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(mime));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; sandbox"),
    );
    response
}

/// A part of the page: its answer, or the words saying why it is missing.
fn part<T>(result: Result<tonic::Response<T>, tonic::Status>) -> (Option<T>, String) {
    match result {
        Ok(r) => (Some(r.into_inner()), String::new()),
        Err(status) if status.code() == tonic::Code::Internal => {
            tracing::warn!(error = %status.message(), "console: an object page part failed");
            (None, "Something went wrong; it was logged.".to_owned())
        }
        Err(status) => (None, status.message().to_owned()),
    }
}

fn alert_row(a: &pb::Alert, selected: bool) -> AlertRow {
    let f =
        |v: Option<f64>, digits: usize| v.map(|x| format!("{:.*}", digits, x)).unwrap_or_default();
    AlertRow {
        candid: a.candid.clone(),
        time_utc: a.time_utc.clone(),
        jd: format!("{:.5}", a.jd),
        band: a.band.clone(),
        mag: match (a.magpsf, a.sigmapsf) {
            (Some(m), Some(s)) => format!("{m:.2} ± {s:.2}"),
            (Some(m), None) => format!("{m:.2}"),
            _ => String::new(),
        },
        diffmaglim: f(a.diffmaglim, 2),
        isdiffpos: a.isdiffpos.clone().unwrap_or_default(),
        rb: f(a.rb, 2),
        drb: f(a.drb, 3),
        programid: a.programid.map(|p| p.to_string()).unwrap_or_default(),
        selected,
    }
}

fn catalog_row(m: &pb::CatalogMatch) -> CatalogRow {
    CatalogRow {
        catalog: m.catalog.clone(),
        id: m.id.clone(),
        separation: format!("{:.1}″", m.separation_arcsec),
        mag: match (m.mag, &m.mag_band) {
            (Some(v), Some(b)) => format!("{v:.2} {b}"),
            (Some(v), None) => format!("{v:.2}"),
            _ => String::new(),
        },
        kind: [m.r#type.clone(), m.morphology.clone()]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(" "),
        redshift: m.redshift.map(|z| format!("{z:.4}")).unwrap_or_default(),
        names: m.names.clone().unwrap_or_default(),
    }
}

fn match_row(m: pb::ObjectFilterMatch) -> Option<MatchRow> {
    let saved = m.r#match?;
    Some(MatchRow {
        active: m.active_version == Some(saved.version),
        filter_id: m.filter_id,
        filter_name: m.filter_name,
        version: saved.version,
        candid: saved.candid,
        jd: format!("{:.5}", saved.jd),
        matched_at: saved.matched_at,
    })
}

/// A protobuf value as the page prints it.
fn value_text(v: prost_types::Value) -> String {
    use prost_types::value::Kind;
    match v.kind {
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 => format!("{n:.0}"),
        Some(Kind::NumberValue(n)) => format!("{n:.4}"),
        Some(Kind::StringValue(s)) => s,
        Some(Kind::BoolValue(b)) => b.to_string(),
        _ => String::new(),
    }
}

/// `text` for a URL's path segment or query value: unreserved characters
/// kept, everything else percent-encoded.
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_keep_ids_and_encode_the_rest() {
        assert_eq!(encode("ZTF18abudxnw"), "ZTF18abudxnw");
        assert_eq!(encode("a/b?c"), "a%2Fb%3Fc");
    }

    #[test]
    fn images_are_served_inert_and_only_of_their_type() {
        let content = |kind| mcp::ToolContent {
            content: vec![mcp::Content { kind: Some(kind) }],
            structured: None,
        };
        let png = image(
            content(mcp::content::Kind::Image(mcp::BinaryContent {
                data: b"\x89PNG".to_vec(),
                mime_type: "image/png".to_owned(),
            })),
            "image/png",
        );
        assert_eq!(png.headers()["content-type"], "image/png");
        assert!(
            png.headers()["content-security-policy"]
                .to_str()
                .unwrap_or("")
                .contains("sandbox")
        );
        let wrong = image(
            content(mcp::content::Kind::Text(mcp::TextContent {
                text: "<script>".to_owned(),
            })),
            "image/png",
        );
        assert_eq!(wrong.status(), StatusCode::NOT_FOUND);
    }
}
