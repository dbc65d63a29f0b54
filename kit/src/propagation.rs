//! W3C trace context across gRPC.
//!
//! Clients inject the current span's context into request metadata
//! ([`inject`]); servers open one span per request whose parent is the
//! context they extract from the headers ([`server_span`]). Both use the
//! global propagator, which [`crate::telemetry::init`] sets to W3C
//! `traceparent`/`tracestate`.

use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        let (Ok(key), Ok(value)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value),
        ) else {
            return;
        };
        self.0.insert(key, value);
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}

/// Write the current span's trace context into outgoing gRPC metadata.
pub fn inject(metadata: &mut MetadataMap) {
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut MetadataInjector(metadata));
    });
}

/// The trace context carried by incoming HTTP/2 headers.
pub fn extract(headers: &http::HeaderMap) -> opentelemetry::Context {
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)))
}

/// The server span of one gRPC request, a child of the caller's context.
/// Used as tonic's `trace_fn`, so every handler runs inside it.
pub fn server_span(request: &http::Request<()>) -> tracing::Span {
    let path = request.uri().path();
    let (service, method) = path
        .trim_start_matches('/')
        .split_once('/')
        .unwrap_or(("", ""));
    let span = tracing::info_span!(
        "grpc.server",
        otel.name = %path.trim_start_matches('/'),
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = %service,
        rpc.method = %method,
    );
    // A missing or malformed traceparent leaves the span as a new root.
    let _ = span.set_parent(extract(request.headers()));
    span
}

/// The trace id of the current span as 32 hex digits, or empty when there is
/// no valid trace (telemetry not initialised).
pub fn current_trace_id() -> String {
    let cx = tracing::Span::current().context();
    let span_context = cx.span().span_context().clone();
    if span_context.is_valid() {
        span_context.trace_id().to_string()
    } else {
        String::new()
    }
}
