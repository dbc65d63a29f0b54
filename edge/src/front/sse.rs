//! The legacy streams: what a GET of `/mcp` is, and the rewriting of a
//! call's event stream on its way out.
//!
//! [`streams`] stands inside the limits (a GET stream is a request like
//! any other) and outside the screen, since a GET has no body to screen: a
//! legacy client's GET is its subscriptions' stream, and any other method
//! but POST goes straight to rmcp, which answers it 405.
//!
//! [`rewrite`] stands just inside the span, on the way out: a legacy call's
//! marker notifications become requests to its client, and a
//! `subscriptions/listen` stream gets its keep-alive comments.

use super::answer::no_caller;
use super::authn::Caller;
use super::screen::{Message, is_modern};
use super::serve::McpService;
use crate::subscribe::Subscriptions;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// What the [`streams`] layer needs.
pub struct Streams {
    /// Legacy resource subscriptions, whose updates go out on the caller's
    /// GET streams.
    pub subscriptions: Arc<Subscriptions>,
    /// rmcp's service, which answers the methods `/mcp` does not serve.
    pub mcp: McpService,
}

/// How often an idle stream gets an SSE comment.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The layer for what is not a POST, and for what a request accepts.
pub async fn streams(
    State(streams): State<Arc<Streams>>,
    mut request: Request,
    next: Next,
) -> Response {
    // Responses are JSON unless a call streams, so a client that accepts
    // only JSON (or anything) is served; rmcp wants both MCP types listed.
    let accept = request
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let accepts_events = accept.contains("text/event-stream");
    let wants_json = accept.is_empty()
        || accept.contains("*/*")
        || accept.contains("application/*")
        || accept.contains("application/json");
    if wants_json && !accepts_events {
        request.headers_mut().insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
    }
    if request.method() == Method::POST {
        return next.run(request).await;
    }
    let modern_header = request
        .headers()
        .get("mcp-protocol-version")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v >= crate::mcp::NO_INITIALIZE_FROM);
    if request.method() == Method::GET && accepts_events && !modern_header {
        let Some(caller) = request.extensions().get::<Caller>() else {
            return no_caller();
        };
        return legacy_stream(&streams.subscriptions, caller);
    }
    // rmcp answers GET (2026-07-28 has none) and DELETE (there is no
    // session to end) with 405.
    let (parts, _) = request.into_parts();
    let response = streams
        .mcp
        .clone()
        .oneshot(Request::from_parts(parts, Body::empty()))
        .await;
    response
        .map(|r| r.map(Body::new))
        .unwrap_or_else(|never| match never {})
}

/// `GET /mcp` of a legacy client: the stream the initialize profile sends
/// what belongs to no request on, here the `notifications/resources/updated`
/// of the caller's subscriptions. The stateless edge has no protocol
/// session to key it by, so it is keyed by the authenticated caller
/// (tenant, key, agent): every GET stream a caller holds on this replica
/// gets the updates of every subscription it made here. Like the trace
/// stream, it ends when the caller's key stops verifying.
fn legacy_stream(subscriptions: &Subscriptions, caller: &Caller) -> Response {
    let updates =
        tokio_stream::wrappers::ReceiverStream::new(subscriptions.open_stream(&caller.principal))
            .map(|message| {
                Ok::<_, std::convert::Infallible>(Event::default().data(message.to_string()))
            });
    Sse::new(updates.take_until(caller.revoked.wait()))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response()
}

/// The layer that rewrites event streams on their way out.
pub async fn rewrite(request: Request, next: Next) -> Response {
    let (may_ask, listens) = match request.extensions().get::<Message>() {
        Some(message) => {
            let method = message.message["method"].as_str();
            (
                matches!(method, Some("tools/call" | "prompts/get"))
                    && !is_modern(&message.message),
                method == Some("subscriptions/listen"),
            )
        }
        None => (false, false),
    };
    let response = next.run(request).await;
    let streams = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    match (streams, may_ask, listens) {
        (true, true, _) => relay_asks(response),
        (true, _, true) => keep_listening(response),
        _ => response,
    }
}

/// A `subscriptions/listen` stream with an SSE comment every
/// [`KEEP_ALIVE`] while nothing else is sent: a balancer or proxy does not
/// cut a quiet stream as idle, and a client that went away is noticed at
/// the next write, which ends the listen and its watches.
fn keep_listening(response: Response) -> Response {
    let (parts, body) = response.into_parts();
    let start = tokio::time::Instant::now() + KEEP_ALIVE;
    let state = (
        body.into_data_stream(),
        tokio::time::interval_at(start, KEEP_ALIVE),
        // Whether the last chunk ended an event, so a comment never lands
        // inside one.
        true,
    );
    let events = futures::stream::unfold(state, |(mut body, mut tick, between)| async move {
        tokio::select! {
            chunk = body.next() => {
                let chunk = chunk?;
                let between = chunk.as_ref().map_or(between, |c| c.ends_with(b"\n\n"));
                Some((chunk, (body, tick, between)))
            }
            _ = tick.tick(), if between => {
                Some((Ok(bytes::Bytes::from_static(b": keep-alive\n\n")), (body, tick, between)))
            }
        }
    });
    Response::from_parts(parts, Body::from_stream(events))
}

/// A legacy call's response stream with its marker notifications
/// rewritten into requests to the client (`relay::rewrite_event`).
fn relay_asks(response: Response) -> Response {
    let (parts, body) = response.into_parts();
    let mut pending: Vec<u8> = Vec::new();
    let events = body.into_data_stream().map(move |chunk| {
        let chunk = chunk?;
        pending.extend_from_slice(&chunk);
        let mut out = Vec::new();
        while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            out.extend_from_slice(&crate::relay::rewrite_event(&event));
        }
        Ok::<_, axum::Error>(bytes::Bytes::from(out))
    });
    Response::from_parts(parts, Body::from_stream(events))
}
