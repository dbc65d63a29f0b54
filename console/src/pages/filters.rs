//! Broker filters: the tenant's list, and one filter's page with its
//! versions and verdicts, the diff between any two, the active version, its
//! latest matches, and the sessions people opened on it with what their
//! agents called and proposed (the record of an answer).

use super::sessions::{OnSubject, RecordedCall, on_subject};
use super::{Nav, Reader, failed, html};
use crate::Console;
use crate::backends::signed;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use ithaca_proto::broker::v1 as pb;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Deserialize, Default)]
pub struct ListQuery {
    #[serde(default)]
    offset: Option<u32>,
    /// Text the names contain, whatever the case.
    #[serde(default)]
    q: Option<String>,
}

#[derive(Template)]
#[template(path = "filters.html")]
struct ListPage {
    nav: Nav,
    filters: Vec<pb::Filter>,
    total: i32,
    offset: u32,
    /// The next page's offset, when there is one.
    next: Option<i32>,
    /// The previous page's offset, when this is not the first.
    previous: Option<u32>,
    /// The search, as typed.
    q: String,
    /// `&q=…` for the pager's links, empty without a search.
    q_param: String,
}

/// `GET /console/filters?offset=`.
pub async fn list(
    State(console): State<Arc<Console>>,
    Query(query): Query<ListQuery>,
    Reader(person): Reader,
) -> Response {
    let mut client = match console.backends.filters() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let offset = query.offset.unwrap_or(0).min(i32::MAX as u32);
    let q = query.q.unwrap_or_default().trim().to_owned();
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::ListBrokerFiltersRequest {
            limit: Some(crate::PAGE_SIZE as i32),
            offset: Some(offset as i32),
            search: (!q.is_empty()).then(|| q.clone()),
        },
    );
    let reply = match client.list_broker_filters(request).await {
        Ok(r) => r.into_inner(),
        Err(status) => return failed(status.into()),
    };
    html(
        StatusCode::OK,
        &ListPage {
            nav: person.nav("filters"),
            filters: reply.filters,
            total: reply.total,
            offset,
            next: reply.next_offset,
            previous: (offset > 0).then(|| offset.saturating_sub(crate::PAGE_SIZE as u32)),
            q_param: if q.is_empty() {
                String::new()
            } else {
                format!("&q={}", super::sessions::encode(&q))
            },
            q,
        },
    )
}

/// One version as the page shows it.
pub struct Version {
    pub version: i32,
    pub created_at: String,
    pub hash: String,
    pub passed: bool,
    pub validated: bool,
    pub active: bool,
    pub problems: Vec<pb::PipelineProblem>,
    pub warnings: Vec<pb::PipelineProblem>,
    /// The pipeline, pretty JSON.
    pub pipeline: String,
}

/// One line of a unified diff, classed for colour.
pub struct DiffLine {
    /// `add`, `del`, `hunk`, `file` or `same`.
    pub class: &'static str,
    pub text: String,
}

/// The diff shown, between `from` and `to`.
pub struct Diff {
    pub from: i32,
    pub to: i32,
    pub identical: bool,
    pub lines: Vec<DiffLine>,
}

#[derive(Deserialize, Default)]
pub struct ShowQuery {
    #[serde(default)]
    from: Option<i32>,
    #[serde(default)]
    to: Option<i32>,
}

#[derive(Template)]
#[template(path = "filter.html")]
struct FilterPage {
    nav: Nav,
    filter: pb::Filter,
    versions: Vec<Version>,
    diff: Option<Diff>,
    /// Why the diff asked for could not be shown.
    diff_error: String,
    sessions: Vec<OnSubject>,
    /// Why the sessions could not be listed (the page shows the rest).
    sessions_error: String,
    subject_noun: &'static str,
    subject_kind: &'static str,
    subject_id: String,
}

/// `GET /console/filters/{id}?from=&to=`: without `from`/`to`, the diff
/// shown is the last version against the one before it.
pub async fn show(
    State(console): State<Arc<Console>>,
    Path(filter_id): Path<String>,
    Query(query): Query<ShowQuery>,
    Reader(person): Reader,
) -> Response {
    let mut client = match console.backends.filters() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let (key, timeout) = (&console.key, console.backends.timeout);
    let get = pb::GetBrokerFilterRequest {
        filter_id: filter_id.clone(),
        matches_limit: Some(crate::PAGE_SIZE as i32),
    };
    let mut filter = match client
        .get_broker_filter(signed(key, &person.principal, timeout, get))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(status) => return failed(status.into()),
    };
    let versions: Vec<Version> = std::mem::take(&mut filter.versions)
        .into_iter()
        .map(|v| Version {
            active: filter.active_version == Some(v.version),
            version: v.version,
            created_at: v.created_at,
            hash: v.pipeline_hash,
            passed: v.passed,
            validated: !v.validated_at.is_empty(),
            problems: v.problems,
            warnings: v.warnings,
            pipeline: serde_json::to_string_pretty(&ithaca_kit::json::from_list(
                v.pipeline.unwrap_or_default(),
            ))
            .unwrap_or_default(),
        })
        .collect();
    let last = versions.last().map(|v| v.version);
    let pair = match (query.from, query.to, last) {
        (Some(from), Some(to), _) => Some((from, to)),
        (None, None, Some(last)) if last > 1 => Some((last - 1, last)),
        _ => None,
    };
    let (mut diff, mut diff_error) = (None, String::new());
    if let Some((from, to)) = pair {
        let request = pb::DiffBrokerFilterVersionsRequest {
            filter_id: filter.filter_id.clone(),
            from_version: from,
            to_version: to,
        };
        match client
            .diff_broker_filter_versions(signed(key, &person.principal, timeout, request))
            .await
        {
            Ok(r) => {
                let d = r.into_inner();
                diff = Some(Diff {
                    from: d.from_version,
                    to: d.to_version,
                    identical: d.identical,
                    lines: diff_lines(&d.diff),
                });
            }
            Err(status) if status.code() == tonic::Code::InvalidArgument => {
                diff_error = status.message().to_owned();
            }
            Err(status) => return failed(status.into()),
        }
    }
    let (mut sessions, sessions_error) =
        match on_subject(&console, &person, "filter", &filter.filter_id).await {
            Ok(s) => (s, String::new()),
            Err(err) => (Vec::new(), err.to_string()),
        };
    // On a filter's page, what a session proposed is the version its agent
    // posted, not whatever it previewed last (a diagnostic preview after
    // posting is not a proposal).
    for s in &mut sessions {
        if let Some(posted) = posted_pipeline(&s.calls) {
            s.proposal = posted;
            s.proposal_filter = filter.filter_id.clone();
            s.withheld.clear();
        }
    }
    html(
        StatusCode::OK,
        &FilterPage {
            nav: person.nav("filters"),
            subject_noun: "filter",
            subject_kind: "filter",
            subject_id: filter.filter_id.clone(),
            filter,
            versions,
            diff,
            diff_error,
            sessions,
            sessions_error,
        },
    )
}

/// The pipeline of the last successful `post_broker_filter_version` among
/// `calls`, pretty JSON.
fn posted_pipeline(calls: &[RecordedCall]) -> Option<String> {
    let posted = calls
        .iter()
        .rev()
        .find(|c| c.ok && c.name == "post_broker_filter_version")?;
    let arguments: serde_json::Value = serde_json::from_str(&posted.arguments).ok()?;
    let pipeline = arguments.get("pipeline").filter(|p| p.is_array())?;
    serde_json::to_string_pretty(pipeline).ok()
}

/// A unified diff's lines, each classed by its first character.
fn diff_lines(diff: &str) -> Vec<DiffLine> {
    diff.lines()
        .map(|line| {
            let class = if line.starts_with("+++") || line.starts_with("---") {
                "file"
            } else if line.starts_with("@@") {
                "hunk"
            } else if line.starts_with('+') {
                "add"
            } else if line.starts_with('-') {
                "del"
            } else {
                "same"
            };
            DiffLine {
                class,
                text: line.to_owned(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::RecordedCall;

    fn call(seq: i64, name: &str, ok: bool, pipeline: serde_json::Value) -> RecordedCall {
        RecordedCall {
            seq,
            name: name.to_owned(),
            arguments: serde_json::json!({"filter_id": "f", "pipeline": pipeline}).to_string(),
            ok,
            summary: String::new(),
        }
    }

    #[test]
    fn the_proposal_is_the_posted_version_not_a_later_preview() {
        let posted = serde_json::json!([{"$match": {"candidate.magpsf": {"$lt": 18}}}]);
        let calls = [
            call(1, "run_broker_filter", true, posted.clone()),
            call(2, "post_broker_filter_version", true, posted.clone()),
            call(
                3,
                "post_broker_filter_version",
                false,
                serde_json::json!([]),
            ),
            call(
                4,
                "run_broker_filter",
                true,
                serde_json::json!([{"$match": {}}]),
            ),
        ];
        let shown = super::posted_pipeline(&calls).expect("a posted version");
        let shown: serde_json::Value = serde_json::from_str(&shown).expect("json");
        assert_eq!(shown, posted);
        assert_eq!(super::posted_pipeline(&calls[..1]), None);
    }

    #[test]
    fn diff_lines_are_classed() {
        let lines = super::diff_lines("--- v1\n+++ v2\n@@ -1 +1 @@\n-a\n+b\n c");
        let classes: Vec<&str> = lines.iter().map(|l| l.class).collect();
        assert_eq!(classes, ["file", "file", "hunk", "del", "add", "same"]);
    }
}
