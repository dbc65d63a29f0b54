//! Trace propagation: a client span and the service's server span share one
//! trace id, the server span is the client span's child, and the trace
//! events the service records carry that trace id.
//!
//! With an exporter the OpenTelemetry layer gives spans their ids; without
//! one the light `trace_ids` layer does (the `light_` tests), and the same
//! propagation must hold.

use crate::common;

use ithaca_kit::propagation;
use ithaca_kit::telemetry::{self, LogFormat};
use ithaca_kit::trace_ids::{self, SpanIds};
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

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// A gRPC request as tonic hands it to `server_span`, with `traceparent`.
fn grpc_request(traceparent: Option<&str>) -> axum::http::Request<()> {
    let mut request =
        axum::http::Request::builder().uri("/ithaca.session.v1.SessionService/SessionContext");
    if let Some(value) = traceparent {
        request = request.header("traceparent", value);
    }
    request.body(()).expect("request")
}

fn ids(span: &tracing::Span) -> SpanIds {
    trace_ids::of(span).expect("the span has W3C ids")
}

#[test]
fn light_spans_inherit_their_parents_trace() {
    telemetry::install_ids(LogFormat::Text).expect("install telemetry");
    assert!(!telemetry::exporting());
    assert!(
        telemetry::install(SdkTracerProvider::builder().build(), LogFormat::Text).is_err(),
        "one subscriber per process"
    );
    assert!(
        !telemetry::exporting(),
        "a refused install leaves the installed layer in charge"
    );

    let root = tracing::info_span!("root");
    let (child, trace_id) = root.in_scope(|| {
        let child = tracing::info_span!("child");
        let grandchild = child.in_scope(|| tracing::info_span!("grandchild"));
        assert_eq!(ids(&grandchild).trace_id, ids(&root).trace_id);
        (child, propagation::current_trace_id())
    });
    let explicit = tracing::info_span!(parent: &root, "explicit");
    let other = tracing::info_span!("other");

    let root_ids = ids(&root);
    assert_ne!(root_ids.trace_id, 0);
    assert_eq!(trace_id, root_ids.trace_hex(), "current_trace_id");
    assert_eq!(trace_id.len(), 32);
    assert_eq!(ids(&child).trace_id, root_ids.trace_id);
    assert_ne!(
        ids(&child).span_id,
        root_ids.span_id,
        "each span its own id"
    );
    assert_eq!(ids(&explicit).trace_id, root_ids.trace_id);
    assert_ne!(
        ids(&other).trace_id,
        root_ids.trace_id,
        "a root starts a trace"
    );
    assert_eq!(propagation::current_trace_id(), "", "no span, no trace id");
}

#[test]
fn light_server_span_adopts_a_valid_traceparent_only() {
    telemetry::install_ids(LogFormat::Text).expect("install telemetry");

    let valid = format!("00-{TRACE}-{PARENT}-01");
    let span = propagation::server_span(&grpc_request(Some(&valid)));
    assert_eq!(ids(&span).trace_hex(), TRACE, "the caller's trace");
    assert_ne!(
        format!("{:016x}", ids(&span).span_id),
        PARENT,
        "its own span id"
    );
    let child = span.in_scope(|| tracing::info_span!("handler"));
    assert_eq!(ids(&child).trace_hex(), TRACE);
    assert_eq!(
        span.in_scope(propagation::current_trace_id),
        TRACE,
        "what the service stores on its trace events"
    );

    // Inside a local span, a request without (or with a malformed)
    // traceparent is still a new root, as with OpenTelemetry.
    let local = tracing::info_span!("local");
    let local_trace = ids(&local).trace_id;
    local.in_scope(|| {
        for bad in [
            None,
            Some("garbage"),
            Some("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"),
        ] {
            let span = propagation::server_span(&grpc_request(bad));
            let got = ids(&span);
            assert_ne!(got.trace_hex(), TRACE, "{bad:?}");
            assert_ne!(got.trace_id, local_trace, "{bad:?} is a new root");
            assert_ne!(got.trace_id, 0);
        }
    });
}

#[test]
fn light_inject_writes_a_traceparent_that_round_trips() {
    telemetry::install_ids(LogFormat::Text).expect("install telemetry");

    let mut untraced = tonic::metadata::MetadataMap::new();
    propagation::inject(&mut untraced);
    assert!(untraced.get("traceparent").is_none(), "no span, no header");

    let client = tracing::info_span!("client call");
    let mut metadata = tonic::metadata::MetadataMap::new();
    client.in_scope(|| propagation::inject(&mut metadata));
    let header = metadata
        .get("traceparent")
        .expect("a traceparent")
        .to_str()
        .expect("ascii")
        .to_owned();
    let client_ids = ids(&client);
    assert_eq!(header, client_ids.traceparent());
    let parts: Vec<&str> = header.split('-').collect();
    assert_eq!(parts.len(), 4, "{header}");
    assert_eq!(parts[0], "00");
    assert_eq!(parts[1], client_ids.trace_hex());
    assert_eq!(parts[2], format!("{:016x}", client_ids.span_id));
    assert_eq!(parts[3], "01", "sampled");

    let server = propagation::server_span(&grpc_request(Some(&header)));
    assert_eq!(ids(&server).trace_id, client_ids.trace_id, "one trace");
    assert_ne!(ids(&server).span_id, client_ids.span_id);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn light_one_trace_id_on_both_sides_of_a_grpc_call() {
    telemetry::install_ids(LogFormat::Text).expect("install telemetry");

    let dir = tempfile::tempdir().expect("tempdir");
    let svc = common::start_session(&common::sqlite_path(&dir, "session"), "unused").await;
    let mut client = common::session_client(&svc.url, common::agent("t", "a"));

    let span = tracing::info_span!("client call");
    let client_trace = ids(&span).trace_hex();
    let session = client
        .session_context(pb::SessionContextRequest {
            prompt: Some("trace me".into()),
            ..Default::default()
        })
        .instrument(span)
        .await
        .expect("call")
        .into_inner();

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
            event.trace_id, client_trace,
            "events carry the caller's trace id"
        );
    }
    svc.stop().await;
}
