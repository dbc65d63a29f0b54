//! The MCP server span of a request (DESIGN §7) and its metrics.
//!
//! Inside answer forwarding (an answer is no operation of its own) and
//! outside everything that does the operation's work, so the span covers
//! it all and the duration and error type recorded are what the client
//! got. The handshake counter stands here too: it counts operations.

use super::answer::no_caller;
use super::authn::Caller;
use super::origin::Arrived;
use super::screen::Message;
use crate::mcp::CallerInfo;
use crate::metrics::Metrics;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::Response;
use ithaca_kit::propagation;
use opentelemetry::propagation::Extractor;
use serde_json::Value;
use std::sync::Arc;
use std::time::Instant;

/// The layer: the span is opened and handed to the handler with the
/// caller ([`CallerInfo`]); the operation is counted once answered.
pub async fn layer(
    State(metrics): State<Arc<Metrics>>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = request
        .extensions()
        .get::<Arrived>()
        .map_or_else(Instant::now, |a| a.0);
    if request.extensions().get::<Caller>().is_none() {
        return no_caller();
    }
    if request.extensions().get::<Message>().is_none() {
        return next.run(request).await;
    }
    // The caller moves into what the handler reads: no layer inside needs
    // it in any other form.
    let Some(caller) = request.extensions_mut().remove::<Caller>() else {
        return no_caller();
    };
    let Some(message) = request.extensions().get::<Message>() else {
        return next.run(request).await;
    };
    count_handshake(&metrics, &message.message);
    let span = request_span(&message.message, request.headers());
    let method = message.method.clone();
    request.extensions_mut().insert(CallerInfo {
        principal: caller.principal,
        span: span.clone(),
        revoked: caller.revoked,
    });
    let response = next.run(request).await;
    let status = response.status();
    let error_type = if status.is_client_error() || status.is_server_error() {
        status.as_str()
    } else {
        ""
    };
    if !error_type.is_empty() {
        span.record("error.type", error_type);
    }
    metrics.record(&method, error_type, started.elapsed());
    response
}

/// Log and count a handshake with the client's own name and version:
/// `initialize` (the legacy profile) or `server/discover` (2026-07-28).
fn count_handshake(metrics: &Metrics, message: &Value) {
    let params = &message["params"];
    let (era, info) = match message["method"].as_str() {
        Some("initialize") => ("legacy", &params["clientInfo"]),
        Some("server/discover") => (
            "2026-07-28",
            &params["_meta"]["io.modelcontextprotocol/clientInfo"],
        ),
        _ => return,
    };
    let name = info["name"].as_str().unwrap_or("");
    let version = info["version"].as_str().unwrap_or("");
    let requested = params["protocolVersion"].as_str().unwrap_or("");
    tracing::info!(
        era,
        client_name = name,
        client_version = version,
        requested,
        "mcp handshake"
    );
    metrics.handshake(era, name, version);
}

struct MetaExtractor<'a>(&'a serde_json::Map<String, Value>);

impl Extractor for MetaExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// The MCP server span of one request: named `{mcp.method.name} {target}`,
/// a child of `_meta.traceparent` when the request carries one, else of
/// the HTTP `traceparent`.
fn request_span(message: &Value, headers: &HeaderMap) -> tracing::Span {
    let method = message["method"].as_str().unwrap_or("");
    let params = &message["params"];
    let target = params["name"].as_str().or_else(|| params["uri"].as_str());
    let name = match target {
        Some(t) => format!("{method} {t}"),
        None => method.to_owned(),
    };
    let version = params["_meta"]["io.modelcontextprotocol/protocolVersion"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| {
            headers
                .get("mcp-protocol-version")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        })
        .unwrap_or_default();
    let span = tracing::info_span!(
        "mcp.server",
        otel.name = %name,
        otel.kind = "server",
        mcp.method.name = %method,
        mcp.protocol.version = %version,
        jsonrpc.request.id = %message.get("id").map(|v| v.to_string()).unwrap_or_default(),
        gen_ai.tool.name = tracing::field::Empty,
        gen_ai.operation.name = tracing::field::Empty,
        error.type = tracing::field::Empty,
    );
    if method == "tools/call"
        && let Some(tool) = target
    {
        span.record("gen_ai.tool.name", tool);
        span.record("gen_ai.operation.name", "execute_tool");
    }
    match params["_meta"].as_object() {
        Some(meta) if meta.contains_key("traceparent") => {
            propagation::set_parent(&span, &MetaExtractor(meta));
        }
        _ => propagation::set_parent_from_headers(&span, headers),
    }
    span
}
