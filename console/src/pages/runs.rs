//! Runs: status, transitions, jobs and artifacts. Artifacts are served from
//! their own route: SVG as `image/svg+xml` under a Content Security Policy
//! that forbids scripts and any load (and the page shows it through `<img>`,
//! where browsers never run a script anyway); CSV as a download.

use super::{Nav, Reader, failed, html, missing_scope, pretty};
use crate::Console;
use crate::backends::signed;
use crate::gate::Person;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use ithaca_proto::mcp::v1 as mcp;
use ithaca_proto::scopes::ARTIFACTS_READ;
use ithaca_proto::skills::v1 as pb;
use serde::Deserialize;
use std::sync::Arc;

/// One state change of a run.
pub struct Transition {
    pub from: String,
    pub to: String,
    pub at: String,
    pub error: String,
}

#[derive(Template)]
#[template(path = "run.html")]
struct RunPage {
    nav: Nav,
    run: pb::Run,
    inputs: String,
    outputs: String,
    transitions: Vec<Transition>,
    can_read_artifacts: bool,
}

#[derive(Deserialize)]
pub struct FindQuery {
    #[serde(default)]
    run_id: String,
}

#[derive(Template)]
#[template(path = "runs.html")]
struct FindPage {
    nav: Nav,
}

/// `GET /console/runs?run_id=`: open a run by id (runs are otherwise
/// reached from a session's trace).
pub async fn find(Query(query): Query<FindQuery>, person: Person) -> Response {
    let id = query.run_id.trim();
    if !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return Redirect::to(&format!("/console/runs/{id}")).into_response();
    }
    html(
        StatusCode::OK,
        &FindPage {
            nav: person.nav("runs"),
        },
    )
}

/// `GET /console/runs/{id}`.
pub async fn show(
    State(console): State<Arc<Console>>,
    Path(run_id): Path<String>,
    Reader(person): Reader,
) -> Response {
    let mut client = match console.backends.skills() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::GetRunRequest { run_id },
    );
    let mut run = match client.read_run(request).await {
        Ok(r) => r.into_inner(),
        Err(s) => return failed(s.into()),
    };
    let transitions = std::mem::take(&mut run.trace)
        .into_iter()
        .map(ithaca_kit::json::from_struct)
        .filter(|e| e["type"] == "run_transition")
        .map(|e| {
            let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
            Transition {
                from: text(&e["payload"]["from"]),
                to: text(&e["payload"]["to"]),
                at: text(&e["created_at"]),
                error: text(&e["payload"]["error"]),
            }
        })
        .collect();
    html(
        StatusCode::OK,
        &RunPage {
            nav: person.nav("runs"),
            inputs: pretty(run.inputs.take()),
            outputs: pretty(run.outputs.take()),
            run,
            transitions,
            can_read_artifacts: person.has_scope(ARTIFACTS_READ),
        },
    )
}

/// `GET /console/runs/{id}/artifacts/{artifact}`: the artifact's bytes.
pub async fn artifact(
    State(console): State<Arc<Console>>,
    Path((run_id, artifact_id)): Path<(String, String)>,
    person: Person,
) -> Response {
    if !person.has_scope(ARTIFACTS_READ) {
        return missing_scope(ARTIFACTS_READ);
    }
    let mut client = match console.backends.skills() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::ReadArtifactRequest {
            run_id,
            artifact_id,
        },
    );
    let content = match client.read_artifact(request).await {
        Ok(r) => r.into_inner(),
        Err(s) => return failed(s.into()),
    };
    let name = content
        .structured
        .clone()
        .map(ithaca_kit::json::from_struct)
        .and_then(|v| v["name"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "artifact".to_owned());
    let Some((mime, body)) = content.content.into_iter().find_map(|c| match c.kind {
        Some(mcp::content::Kind::Resource(r)) => {
            let body = match r.body {
                Some(mcp::embedded_resource::Body::Text(t)) => t.into_bytes(),
                Some(mcp::embedded_resource::Body::Blob(b)) => b,
                None => Vec::new(),
            };
            Some((r.mime_type, body))
        }
        _ => None,
    }) else {
        return super::error(StatusCode::NOT_FOUND, "Not found.");
    };
    serve_artifact(&mime, &name, body)
}

/// The response for an artifact's bytes: only the three kinds runs make,
/// each with headers that keep it inert.
fn serve_artifact(mime: &str, name: &str, body: Vec<u8>) -> Response {
    let mut response = body.into_response();
    let h = response.headers_mut();
    let safe_name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .collect();
    let (content_type, disposition) = match mime {
        "image/svg+xml" => ("image/svg+xml", "inline"),
        "text/csv" => ("text/csv; charset=utf-8", "attachment"),
        "application/json" => ("application/json", "inline"),
        _ => ("application/octet-stream", "attachment"),
    };
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&format!("{disposition}; filename=\"{safe_name}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    // Opened directly, an SVG could otherwise run script in our origin.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; sandbox"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::serve_artifact;

    #[test]
    fn artifacts_are_served_inert() {
        let svg = serve_artifact("image/svg+xml", "plot.svg", b"<svg/>".to_vec());
        let h = svg.headers();
        assert_eq!(h["content-type"], "image/svg+xml");
        assert!(
            h["content-security-policy"]
                .to_str()
                .unwrap_or("")
                .contains("sandbox")
        );
        let csv = serve_artifact("text/csv", "a\"b.csv", b"a,b".to_vec());
        assert_eq!(
            csv.headers()["content-disposition"],
            "attachment; filename=\"ab.csv\""
        );
        let other = serve_artifact("text/html", "x.html", b"<script>".to_vec());
        assert_eq!(other.headers()["content-type"], "application/octet-stream");
    }
}
