//! Trace propagation: a client span and the service's server span share one
//! trace id, the server span is the client span's child, and the trace
//! events the service records carry that trace id.

use crate::common;

use ithaca_kit::telemetry::{self, LogFormat};
use ithaca_proto::session::v1 as pb;
use opentelemetry::trace::{SpanKind, TraceContextExt};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tracing::Instrument;
use tracing_opentelemetry_ext::current_context;

mod tracing_opentelemetry_ext {
    /// The OpenTelemetry context of the current tracing span.
    pub fn current_context() -> opentelemetry::Context {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        tracing::Span::current().context()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_id_on_both_sides_of_a_grpc_call() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    telemetry::install(provider.clone(), LogFormat::Text).expect("install telemetry");

    let dir = tempfile::tempdir().expect("tempdir");
    let svc = common::start_session(&common::sqlite_path(&dir, "session"), "unused").await;
    let mut client = common::session_client(&svc.url, common::agent("t", "a"));

    let span = tracing::info_span!("client call", otel.kind = "client");
    let (client_trace, session) = async {
        let trace_id = current_context().span().span_context().trace_id();
        let session = client
            .session_context(pb::SessionContextRequest {
                prompt: Some("trace me".into()),
                ..Default::default()
            })
            .await
            .expect("call")
            .into_inner();
        (trace_id, session)
    }
    .instrument(span)
    .await;

    let events = client
        .read_events(pb::ReadEventsRequest {
            session_id: session.session_id,
            after_seq: 0,
            limit: Some(10),
        })
        .await
        .expect("read")
        .into_inner()
        .events;
    assert!(!events.is_empty());
    for event in &events {
        assert_eq!(
            event.trace_id,
            client_trace.to_string(),
            "events carry the caller's trace id"
        );
    }

    provider.force_flush().expect("flush");
    let spans = exporter.get_finished_spans().expect("spans");
    let client_span = spans
        .iter()
        .find(|s| s.name == "client call")
        .expect("client span exported");
    let server_span = spans
        .iter()
        .find(|s| s.name == "ithaca.session.v1.SessionService/SessionContext")
        .expect("server span exported");
    assert_eq!(server_span.span_kind, SpanKind::Server);
    assert_eq!(client_span.span_context.trace_id(), client_trace);
    assert_eq!(
        server_span.span_context.trace_id(),
        client_trace,
        "one trace id on both sides"
    );
    assert_eq!(
        server_span.parent_span_id,
        client_span.span_context.span_id()
    );
    svc.stop().await;
}
