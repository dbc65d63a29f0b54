//! W3C trace context across gRPC.
//!
//! Clients inject the current span's context into request metadata
//! ([`inject`]); servers open one span per request whose parent is the
//! context they extract from the headers ([`server_span`], [`set_parent`]).
//!
//! Spans get their ids from one of two layers (see [`crate::telemetry`]).
//! When spans are exported, the OpenTelemetry layer: these functions go
//! through it and the global propagator, which [`crate::telemetry::init`]
//! sets to W3C `traceparent`/`tracestate`, so exported spans form one trace
//! across hops. Otherwise the light [`crate::trace_ids`] layer: they read
//! and write `traceparent` themselves (no `tracestate`).

use crate::trace_ids::{self, SpanIds};
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TraceContextExt;
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C header naming a span's parent.
const TRACEPARENT: &str = "traceparent";

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
    if crate::telemetry::exporting() {
        let cx = tracing::Span::current().context();
        opentelemetry::global::get_text_map_propagator(|p| {
            p.inject_context(&cx, &mut MetadataInjector(metadata));
        });
    } else if let Some(ids) = trace_ids::current()
        && let Ok(value) = MetadataValue::try_from(ids.traceparent())
    {
        metadata.insert(TRACEPARENT, value);
    }
}

/// The current span's W3C `traceparent`, for a message that carries its
/// own trace context (one append on a stream shared by many calls); empty
/// when there is no valid trace.
pub fn current_traceparent() -> String {
    if crate::telemetry::exporting() {
        let cx = tracing::Span::current().context();
        let mut carrier = Traceparent(String::new());
        opentelemetry::global::get_text_map_propagator(|p| p.inject_context(&cx, &mut carrier));
        return carrier.0;
    }
    trace_ids::current().map_or_else(String::new, |ids| ids.traceparent())
}

/// Where the propagator writes the `traceparent` value alone (it may also
/// offer `tracestate`, which a message does not carry).
struct Traceparent(String);

impl Injector for Traceparent {
    fn set(&mut self, key: &str, value: String) {
        if key == TRACEPARENT {
            self.0 = value;
        }
    }
}

/// A `traceparent` value a message carried, read in place.
struct CarriedTraceparent<'a>(&'a str);

impl Extractor for CarriedTraceparent<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == TRACEPARENT && !self.0.is_empty()).then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT]
    }
}

/// The server span of one unit of gRPC work that arrived as a message of
/// a stream rather than as a request of its own: named and attributed as
/// [`server_span`] names a request of `service`/`method`, a child of the
/// `traceparent` the message carried, so the trace reads as a call's.
pub fn message_span(service: &str, method: &str, traceparent: &str) -> tracing::Span {
    let span = rpc_server_span(format_args!("{service}/{method}"), service, method);
    set_parent(&span, &CarriedTraceparent(traceparent));
    span
}

/// Make `span` the child of the remote span whose context `carrier` holds
/// (W3C `traceparent`); a missing or malformed one makes `span` the root of
/// a new trace. Call it right after opening the span.
pub fn set_parent(span: &tracing::Span, carrier: &dyn Extractor) {
    if crate::telemetry::exporting() {
        let cx = opentelemetry::global::get_text_map_propagator(|p| p.extract(carrier));
        let _ = span.set_parent(cx);
        return;
    }
    match carrier
        .get(TRACEPARENT)
        .and_then(SpanIds::parse_traceparent)
    {
        Some(parent) => trace_ids::set_parent(span, parent),
        None => trace_ids::set_root(span),
    }
}

/// [`set_parent`] from incoming HTTP/2 headers.
pub fn set_parent_from_headers(span: &tracing::Span, headers: &http::HeaderMap) {
    set_parent(span, &HeaderExtractor(headers));
}

/// The server span of one gRPC request, a child of the caller's context.
/// Used as tonic's `trace_fn`, so every handler runs inside it.
pub fn server_span(request: &http::Request<()>) -> tracing::Span {
    let path = request.uri().path().trim_start_matches('/');
    let (service, method) = path.split_once('/').unwrap_or(("", ""));
    let span = rpc_server_span(path, service, method);
    // A missing or malformed traceparent leaves the span as a new root.
    set_parent_from_headers(&span, request.headers());
    span
}

/// A `grpc.server` span named `name` (`service/method`) with the
/// OpenTelemetry RPC attributes; its parent is set by the caller.
fn rpc_server_span(name: impl std::fmt::Display, service: &str, method: &str) -> tracing::Span {
    tracing::info_span!(
        "grpc.server",
        otel.name = %name,
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.service = %service,
        rpc.method = %method,
    )
}

/// The trace id of the current span as 32 hex digits, or empty when there is
/// no valid trace (telemetry not initialised).
pub fn current_trace_id() -> String {
    if !crate::telemetry::exporting() {
        return trace_ids::current().map_or_else(String::new, |ids| ids.trace_hex());
    }
    let cx = tracing::Span::current().context();
    let span_context = cx.span().span_context().clone();
    if span_context.is_valid() {
        span_context.trace_id().to_string()
    } else {
        String::new()
    }
}
