//! `GET /api/sessions/{id}/events/stream`: a session's trace as SSE, with
//! `id:` = seq, replayed after `Last-Event-ID` (or `?after=N`), then live.
//!
//! Its own door beside `/mcp`: it applies the same origin and key checks,
//! and also accepts a person signed in to the console ([`BrowserAuth`]),
//! which `/mcp` never does, so a cookie cannot make an MCP call.
//!
//! [`BrowserAuth`]: super::BrowserAuth

use super::answer::plain;
use super::authn::{Authn, client_of, still_allowed};
use super::origin::Origins;
use crate::core::Core;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use ithaca_proto::session::v1 as spb;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// What the trace stream needs.
pub struct TraceStream {
    pub origins: Arc<Origins>,
    pub authn: Arc<Authn>,
    pub core: Arc<Core>,
    /// How long the session service may take to start the stream.
    pub request_timeout: Duration,
}

/// The handler.
pub async fn serve(
    State(trace): State<Arc<TraceStream>>,
    Path(session_id): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    extensions: http::Extensions,
    headers: HeaderMap,
) -> Response {
    if let Err(refused) = trace.origins.check(&headers) {
        return refused;
    }
    let from_browser = match trace.authn.browser() {
        Some(browser) if !headers.contains_key(header::AUTHORIZATION) => {
            browser.principal(&headers).await
        }
        _ => None,
    };
    let signed_in = from_browser.is_some();
    let principal = match from_browser {
        Some(p) => p,
        None => match trace
            .authn
            .authenticate(&headers, client_of(&extensions))
            .await
        {
            Ok(p) => p,
            Err(refused) => return refused,
        },
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| query.get("after").cloned());
    let after_seq = match after.as_deref().map(str::trim) {
        None | Some("") => 0,
        Some(text) => match text.parse::<i64>() {
            Ok(n) if n >= 0 => n,
            _ => {
                return plain(
                    StatusCode::BAD_REQUEST,
                    "after / Last-Event-ID: expected a non-negative integer",
                );
            }
        },
    };
    let Some(mut client) = trace.core.session_client() else {
        return plain(StatusCode::NOT_FOUND, "this edge has no session service");
    };
    let mut request = tonic::Request::new(spb::TailEventsRequest {
        session_id,
        after_seq,
    });
    trace.core.sign(&mut request, &principal);
    // A stalled session service must not hold the request open: the stream
    // starts within the request timeout or not at all.
    request.set_timeout(trace.request_timeout);
    let stream = match client.tail_events(request).await {
        Ok(r) => r.into_inner(),
        Err(status)
            if matches!(
                status.code(),
                tonic::Code::NotFound | tonic::Code::InvalidArgument
            ) =>
        {
            return plain(StatusCode::NOT_FOUND, "no such session");
        }
        Err(status) => {
            tracing::warn!(error = %status.message(), "trace stream unavailable");
            return plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "the session service is unavailable, retry later",
            );
        }
    };
    let events = stream
        .take_while(|item| std::future::ready(item.is_ok()))
        .filter_map(|item| async move {
            let event = item.ok()?;
            let payload = event
                .payload
                .map(ithaca_kit::json::from_struct)
                .unwrap_or(Value::Null);
            let data = json!({
                "session_id": event.session_id,
                "seq": event.seq,
                "type": event.r#type,
                "payload": payload,
                "created_at": event.created_at,
                "trace_id": event.trace_id,
            });
            Some(Ok::<_, std::convert::Infallible>(
                Event::default()
                    .id(event.seq.to_string())
                    .event(sse_event_name(&event.r#type))
                    .data(data.to_string()),
            ))
        });
    // The caller is checked again while the stream is open, as often as a
    // verified key may be cached, so a revoked key (or a signed-out
    // cookie's key) ends the stream within the cache window plus one check
    // instead of never. A check that cannot be made (auth unreachable)
    // ends it too: the client reconnects from its last `seq` once the key
    // verifies again.
    let revoked = still_allowed(trace.authn.clone(), signed_in, headers);
    Sse::new(events.take_until(revoked))
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The SSE `event:` name of a trace event of `kind`: its type, except
/// `error` (a failed call), sent as `call_error`. A browser's `EventSource`
/// takes an event named `error` for its own connection-error event, so a
/// failed call made every open console page say "reconnecting…" for good.
/// The JSON `type` in `data` stays `error`.
pub(crate) fn sse_event_name(kind: &str) -> &str {
    if kind == "error" { "call_error" } else { kind }
}

#[cfg(test)]
mod tests {
    use super::sse_event_name;

    #[test]
    fn a_failed_calls_event_is_not_named_error() {
        assert_eq!(sse_event_name("error"), "call_error");
        for kind in ["tool_call", "tool_result", "denial", "session_closed"] {
            assert_eq!(sse_event_name(kind), kind);
        }
    }
}
