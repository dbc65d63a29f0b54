//! JSON-RPC batches over Streamable HTTP.
//!
//! MCP 2025-03-26 lets a POST body be a JSON array of messages, and a
//! server must accept one; 2025-06-18 removed batches. So a batch is served
//! when the request speaks 2025-03-26 or older (an HTTP request without
//! `MCP-Protocol-Version` is 2025-03-26 by the spec's rule) and refused with
//! `-32600` when it names a later revision. Either way the caller must first
//! hold the union of the members' scopes (the scope layer, just outside).
//!
//! Each member goes through the layers inside this one as a message sent
//! alone, one after another, so a session's trace records them in the
//! batch's order. Besides the layer, this module holds the parts of that
//! which need no edge (and which the `request_front` fuzz target drives):
//! whether a batch may be served, a member's own refusal, and folding each
//! member's HTTP answer into the batch's one JSON array.

// Refusals are finished HTTP responses; boxing them would only add noise.
#![allow(clippy::result_large_err)]

use super::screen::{Batch, Screen, Screened, screen_value};
use crate::core::codes;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::sync::Arc;

/// The layer: a single message passes; a batch that may be served has its
/// members served in order through the layers inside, each with its own
/// screened [`super::screen::Message`], and their answers folded into one.
pub async fn layer(State(screen): State<Arc<Screen>>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let Some(batch) = parts.extensions.remove::<Batch>() else {
        return next.run(Request::from_parts(parts, body)).await;
    };
    if let Err(refused) = check(&parts.headers, &batch.members) {
        return refused;
    }
    let mut answers = Vec::with_capacity(batch.members.len());
    for member in batch.members {
        let id = member.get("id").cloned().unwrap_or(Value::Null);
        let response = match member_refusal(&member) {
            Some(refused) => refused,
            None => {
                // rmcp reads the member's own bytes; the edge's layers read
                // the member as screened here.
                let body = Body::from(member.to_string());
                match screen_value(&screen.core.catalog, &parts.headers, member) {
                    Screened::Refused(refused) => refused,
                    Screened::Batch(_) => nested(),
                    Screened::Message(message) => {
                        let mut member_parts = parts.clone();
                        member_parts.extensions.insert(message);
                        next.clone()
                            .run(Request::from_parts(member_parts, body))
                            .await
                    }
                }
            }
        };
        answers.extend(self::answers(response, id).await);
    }
    combine(answers)
}

/// The most messages one batch may hold. Each member is a full request,
/// so a larger batch would let one HTTP request do the work of many past
/// the per-request rate limit.
pub const MAX_MEMBERS: usize = 32;

/// The first revision without batches (revisions compare as strings).
pub const NO_BATCHES_FROM: &str = "2025-06-18";

/// The largest answer of one member that is folded into the batch's
/// array; a member answering more is replaced by an error naming the limit.
const MAX_MEMBER_ANSWER: usize = 16 * 1024 * 1024;

/// Whether this batch may be served: the request's revision allows batches,
/// and the batch is neither empty nor larger than [`MAX_MEMBERS`].
pub fn check(headers: &HeaderMap, members: &[Value]) -> Result<(), Response> {
    let version = headers
        .get("mcp-protocol-version")
        .map(|v| v.to_str().unwrap_or(""));
    if let Some(version) = version
        && version >= NO_BATCHES_FROM
    {
        return Err(refusal(&format!(
            "Invalid Request: MCP {version} has no JSON-RPC batches (they were removed in \
             {NO_BATCHES_FROM}); send one message per request"
        )));
    }
    if members.is_empty() {
        return Err(refusal("Invalid Request: the batch is empty"));
    }
    if members.len() > MAX_MEMBERS {
        return Err(refusal(&format!(
            "Invalid Request: a batch holds at most {MAX_MEMBERS} messages, this one {}",
            members.len()
        )));
    }
    Ok(())
}

/// A member refused for being in a batch at all: `initialize` must be sent
/// alone (2025-03-26, "Lifecycle"), and a batch may not nest.
pub fn member_refusal(member: &Value) -> Option<Response> {
    if member.is_array() {
        return Some(nested());
    }
    if member.get("method").and_then(Value::as_str) == Some("initialize") {
        let id = member.get("id").cloned().unwrap_or(Value::Null);
        return Some(error(
            id,
            codes::INVALID_REQUEST,
            "Invalid Request: initialize must not be part of a batch; send it alone first",
        ));
    }
    None
}

/// The answer to a batch inside a batch.
pub fn nested() -> Response {
    error(
        Value::Null,
        codes::INVALID_REQUEST,
        "Invalid Request: a batch member must be one message, not another batch",
    )
}

/// The JSON-RPC messages one member's HTTP answer carries for the client:
/// the JSON body, or every response in an event stream (a call that
/// streamed progress ends with its result). A notification's `202` carries
/// none. An answer that is not JSON-RPC (a plain-text refusal) becomes an
/// error for the member's `id`, with the HTTP status's reason.
pub async fn answers(response: Response, id: Value) -> Vec<Value> {
    let status = response.status();
    if status == StatusCode::ACCEPTED {
        return Vec::new();
    }
    let events = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let bytes = match axum::body::to_bytes(response.into_body(), MAX_MEMBER_ANSWER).await {
        Ok(bytes) => bytes,
        Err(e) => {
            return vec![error_value(
                id,
                codes::INTERNAL_ERROR,
                &format!("this member's answer could not be read in a batch: {e}"),
            )];
        }
    };
    if events {
        return String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str::<Value>(data.trim()).ok())
            .filter(|message| message.get("method").is_none() && message.get("id").is_some())
            .collect();
    }
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(message) if message.get("jsonrpc").is_some() => vec![message],
        _ => {
            let text = String::from_utf8_lossy(&bytes);
            let reason = status.canonical_reason().unwrap_or("refused");
            vec![error_value(
                id,
                codes::INVALID_REQUEST,
                &format!("{} {reason}: {}", status.as_u16(), text.trim()),
            )]
        }
    }
}

/// The batch's answer: its members' answers as one array, or `202` when
/// none of them answers (only notifications and responses).
pub fn combine(answers: Vec<Value>) -> Response {
    if answers.is_empty() {
        return StatusCode::ACCEPTED.into_response();
    }
    (StatusCode::OK, axum::Json(Value::Array(answers))).into_response()
}

fn refusal(message: &str) -> Response {
    let body = error_value(Value::Null, codes::INVALID_REQUEST, message);
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

fn error(id: Value, code: i32, message: &str) -> Response {
    let body = error_value(id, code, message);
    Response::builder()
        .status(StatusCode::BAD_REQUEST)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_string()))
        .unwrap_or_else(|_| StatusCode::BAD_REQUEST.into_response())
}

fn error_value(id: Value, code: i32, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(version: Option<&'static str>) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Some(v) = version {
            h.insert("mcp-protocol-version", HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn batches_are_served_only_where_the_revision_allows_them() {
        let one = [json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})];
        assert!(check(&headers(None), &one).is_ok());
        assert!(check(&headers(Some("2025-03-26")), &one).is_ok());
        assert!(check(&headers(Some("2024-11-05")), &one).is_ok());
        for later in ["2025-06-18", "2025-11-25", "2026-07-28"] {
            let refused = check(&headers(Some(later)), &one).expect_err(later);
            assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        }
        assert!(check(&headers(None), &[]).is_err());
        let many = vec![one[0].clone(); MAX_MEMBERS + 1];
        assert!(check(&headers(None), &many).is_err());
        assert!(check(&headers(None), &many[..MAX_MEMBERS]).is_ok());
    }

    #[test]
    fn initialize_and_nested_batches_are_refused_as_members() {
        let init = json!({"jsonrpc": "2.0", "id": 7, "method": "initialize", "params": {}});
        assert!(member_refusal(&init).is_some());
        assert!(member_refusal(&json!([])).is_some());
        let list = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/list"});
        assert!(member_refusal(&list).is_none());
    }

    #[tokio::test]
    async fn answers_fold_json_events_and_plain_refusals() {
        let json_answer = (
            StatusCode::OK,
            axum::Json(json!({"jsonrpc": "2.0", "id": 1, "result": {}})),
        )
            .into_response();
        assert_eq!(answers(json_answer, json!(1)).await.len(), 1);

        let stream = Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .body(Body::from(
                "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n\
                 event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":2,\"result\":{\"ok\":true}}\n\n",
            ))
            .expect("a valid response");
        let folded = answers(stream, json!(2)).await;
        assert_eq!(
            folded,
            vec![json!({"jsonrpc": "2.0", "id": 2, "result": {"ok": true}})]
        );

        let plain = (StatusCode::FORBIDDEN, "missing scope: data:read").into_response();
        let folded = answers(plain, json!(3)).await;
        assert_eq!(folded[0]["id"], 3);
        assert_eq!(folded[0]["error"]["code"], codes::INVALID_REQUEST);
        assert!(
            folded[0]["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("403"))
        );

        let accepted = StatusCode::ACCEPTED.into_response();
        assert!(answers(accepted, Value::Null).await.is_empty());
        assert_eq!(combine(Vec::new()).status(), StatusCode::ACCEPTED);
    }
}
