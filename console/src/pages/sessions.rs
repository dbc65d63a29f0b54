//! Sessions: the list (filters, pages), starting one for an agent to join,
//! one session's prompts and live trace, and closing it.

use super::{Nav, Reader, failed, html, missing_scope};
use crate::Console;
use crate::backends::signed;
use crate::gate::{Change, CsrfForm, CsrfToken, Person};
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use ithaca_proto::scopes::DATA_READ;
use ithaca_proto::session::v1 as pb;
use serde::Deserialize;
use std::sync::Arc;

/// One row of the list.
pub struct Row {
    pub session_id: String,
    pub title: String,
    pub status: String,
    pub agent_id: String,
    pub created_at: String,
    pub updated_at: String,
    pub events: i64,
    pub prompts: i64,
}

#[derive(Template)]
#[template(path = "sessions.html")]
struct ListPage {
    nav: Nav,
    rows: Vec<Row>,
    status: String,
    agent: String,
    /// The query string of the next page, empty on the last.
    next: String,
    first_page: bool,
    mcp_url: String,
}

#[derive(Deserialize, Default)]
pub struct ListQuery {
    #[serde(default)]
    status: String,
    #[serde(default)]
    agent: String,
    #[serde(default)]
    page: String,
}

/// `GET /console/sessions?status=&agent=&page=`.
pub async fn list(
    State(console): State<Arc<Console>>,
    Query(query): Query<ListQuery>,
    Reader(person): Reader,
) -> Response {
    let backends = &console.backends;
    let mut client = match backends.session() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let some = |s: &str| (!s.trim().is_empty()).then(|| s.trim().to_owned());
    let request = signed(
        &console.key,
        &person.principal,
        backends.timeout,
        pb::ListSessionsRequest {
            status: some(&query.status),
            agent_id: some(&query.agent),
            limit: crate::PAGE_SIZE as i32,
            page_token: query.page.clone(),
            ..Default::default()
        },
    );
    let reply = match client.list_sessions(request).await {
        Ok(r) => r.into_inner(),
        Err(status) => return failed(status.into()),
    };
    let rows = reply
        .sessions
        .into_iter()
        .filter_map(|s| {
            let d = s.session?;
            Some(Row {
                session_id: d.session_id,
                title: d.title,
                status: d.status,
                agent_id: s.agent_id,
                created_at: d.created_at,
                updated_at: s.updated_at,
                events: s.last_seq,
                prompts: s.prompt_count,
            })
        })
        .collect();
    let next = if reply.next_page_token.is_empty() {
        String::new()
    } else {
        query_string(&[
            ("status", &query.status),
            ("agent", &query.agent),
            ("page", &reply.next_page_token),
        ])
    };
    html(
        StatusCode::OK,
        &ListPage {
            nav: person.nav("sessions"),
            rows,
            status: query.status,
            agent: query.agent,
            next,
            first_page: query.page.is_empty(),
            mcp_url: format!("{}/mcp", console.public_url()),
        },
    )
}

fn query_string(pairs: &[(&str, &str)]) -> String {
    let encoded: Vec<String> = pairs
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, v)| format!("{k}={}", encode(v)))
        .collect();
    encoded.join("&")
}

/// Percent-encode a query value (unreserved characters stay).
pub(crate) fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[derive(Deserialize)]
pub struct StartForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    subject_kind: String,
    #[serde(default)]
    subject_id: String,
}

impl CsrfToken for StartForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /console/sessions`: open a session with the person's prompt, for an
/// agent to join.
pub async fn start(
    State(console): State<Arc<Console>>,
    Change(person, form): Change<StartForm>,
) -> Response {
    if !person.has_scope(DATA_READ) {
        return missing_scope(DATA_READ);
    }
    if form.prompt.trim().is_empty() {
        return super::error(
            StatusCode::BAD_REQUEST,
            "A session needs a prompt: the question the agent works on.",
        );
    }
    let mut client = match console.backends.session() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let title = form.title.trim();
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::SessionContextRequest {
            prompt: Some(form.prompt),
            title: (!title.is_empty()).then(|| title.to_owned()),
            session_id: None,
            subject_kind: non_empty(&form.subject_kind),
            subject_id: non_empty(&form.subject_id),
        },
    );
    match client.session_context(request).await {
        Ok(r) => Redirect::to(&format!("/console/sessions/{}", r.into_inner().session_id))
            .into_response(),
        // The subject the person named does not exist for them: say which
        // (it names only what they typed, so it tells nothing of another
        // tenant).
        Err(status)
            if ithaca_kit::error::domain(&status)
                == Some(ithaca_kit::error::DomainCode::SubjectNotFound) =>
        {
            super::error(StatusCode::NOT_FOUND, status.message())
        }
        Err(status) => failed(status.into()),
    }
}

fn non_empty(text: &str) -> Option<String> {
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

#[derive(Template)]
#[template(path = "session.html")]
struct SessionPage {
    nav: Nav,
    session: pb::SessionDescriptor,
    prompts: Vec<pb::Prompt>,
    stream_url: String,
    /// The `tools/call` an agent sends to join, while the session is open.
    join_snippet: String,
}

/// `GET /console/sessions/{id}`.
pub async fn show(
    State(console): State<Arc<Console>>,
    Path(session_id): Path<String>,
    Reader(person): Reader,
) -> Response {
    let mut client = match console.backends.session() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let (key, timeout) = (&console.key, console.backends.timeout);
    let get = pb::GetSessionRequest {
        session_id: session_id.clone(),
    };
    let session = match client
        .get_session(signed(key, &person.principal, timeout, get))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(status) => return failed(status.into()),
    };
    let list = pb::ListPromptsRequest {
        session_id: session.session_id.clone(),
    };
    let prompts = match client
        .list_prompts(signed(key, &person.principal, timeout, list))
        .await
    {
        Ok(r) => r.into_inner().prompts,
        Err(status) => return failed(status.into()),
    };
    let join_snippet = if session.status == "open" {
        join_snippet(&session.session_id, &session.title)
    } else {
        String::new()
    };
    html(
        StatusCode::OK,
        &SessionPage {
            nav: person.nav("sessions"),
            stream_url: format!("/api/sessions/{}/events/stream", session.session_id),
            session,
            prompts,
            join_snippet,
        },
    )
}

/// What an agent calls to join a session a person started: the tool and
/// its arguments, as agents' hosts and the MCP Inspector take them.
fn join_snippet(session_id: &str, title: &str) -> String {
    let arguments = serde_json::json!({
        "session_id": session_id,
        "prompt": format!("Join the session a person started: {title}"),
    });
    format!("session_context {arguments}")
}

/// `POST /console/sessions/{id}/close`: calls already running finish; new
/// ones are refused.
pub async fn close(
    State(console): State<Arc<Console>>,
    Path(session_id): Path<String>,
    Change(person, _): Change<CsrfForm>,
) -> Response {
    if !person.has_scope(DATA_READ) {
        return missing_scope(DATA_READ);
    }
    let mut client = match console.backends.session() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::CloseSessionRequest {
            session_id: Some(session_id),
        },
    );
    match client.close_session(request).await {
        Ok(r) => Redirect::to(&format!("/console/sessions/{}", r.into_inner().session_id))
            .into_response(),
        Err(status) => failed(status.into()),
    }
}

/// A session a person opened on an object, with its record: the tool calls
/// its trace holds and the pipeline the agent arrived at.
pub struct OnSubject {
    pub session_id: String,
    pub title: String,
    pub status: String,
    pub created_at: String,
    pub calls: Vec<RecordedCall>,
    /// The proposed pipeline, pretty JSON, when the agent previewed one.
    pub proposal: String,
    /// The version the proposal was for, when it named the filter.
    pub proposal_filter: String,
    /// Why no pipeline is offered, when one was seen but never previewed.
    pub withheld: String,
}

/// One tool call of a session's record.
pub struct RecordedCall {
    pub seq: i64,
    pub name: String,
    /// The arguments, compact JSON.
    pub arguments: String,
    pub ok: bool,
    pub summary: String,
}

/// At most `chars` characters of `text`, with an ellipsis when cut.
fn brief(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// How many sessions on one object a page shows with their records.
pub const ON_SUBJECT_LIMIT: i32 = 10;

/// The newest sessions opened on `kind`/`id`, each with its record, for the
/// filter and event pages.
pub async fn on_subject(
    console: &Console,
    person: &Person,
    kind: &str,
    id: &str,
) -> Result<Vec<OnSubject>, crate::backends::CallError> {
    let mut client = console.backends.session()?;
    let (key, timeout) = (&console.key, console.backends.timeout);
    let list = pb::ListSessionsRequest {
        subject_kind: Some(kind.to_owned()),
        subject_id: Some(id.to_owned()),
        limit: ON_SUBJECT_LIMIT,
        ..Default::default()
    };
    let sessions = client
        .list_sessions(signed(key, &person.principal, timeout, list))
        .await?
        .into_inner()
        .sessions;
    let mut out = Vec::with_capacity(sessions.len());
    for summary in sessions {
        let Some(d) = summary.session else { continue };
        let get = pb::GetSessionRecordRequest {
            session_id: d.session_id.clone(),
        };
        let record = client
            .get_session_record(signed(key, &person.principal, timeout, get))
            .await?
            .into_inner();
        let (proposal, proposal_filter) = match record.proposal {
            Some(p) => (
                serde_json::to_string_pretty(&ithaca_kit::json::from_list(
                    p.pipeline.unwrap_or_default(),
                ))
                .unwrap_or_default(),
                p.filter_id.unwrap_or_default(),
            ),
            None => (String::new(), String::new()),
        };
        out.push(OnSubject {
            session_id: d.session_id,
            title: d.title,
            status: d.status,
            created_at: d.created_at,
            calls: record
                .tool_calls
                .into_iter()
                .map(|c| RecordedCall {
                    seq: c.seq,
                    name: c.name,
                    arguments: c
                        .arguments
                        .map(|a| ithaca_kit::json::from_struct(a).to_string())
                        .unwrap_or_default(),
                    ok: c.ok,
                    summary: brief(&c.summary, 140),
                })
                .collect(),
            proposal,
            proposal_filter,
            withheld: record.proposal_withheld.unwrap_or_default(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn join_snippets_name_the_session() {
        let snippet = super::join_snippet("abc", "Say \"hi\"");
        assert!(snippet.starts_with("session_context {"), "{snippet}");
        let args: serde_json::Value =
            serde_json::from_str(snippet.trim_start_matches("session_context ")).expect("json");
        assert_eq!(args["session_id"], "abc");
    }

    #[test]
    fn briefs_cut_on_characters() {
        assert_eq!(super::brief("héllo", 2), "hé…");
        assert_eq!(super::brief("abc", 3), "abc");
    }

    #[test]
    fn encodes_query_values() {
        assert_eq!(super::encode("a b&c=d"), "a%20b%26c%3Dd");
        assert_eq!(
            super::query_string(&[("status", "open"), ("agent", "")]),
            "status=open"
        );
    }
}
