//! Logging and tracing for a process.
//!
//! Logs go to stderr through `tracing-subscriber`, as JSON lines or human
//! text. Spans always get W3C trace and span ids (so trace ids exist to
//! store on trace events and propagate across gRPC), at INFO whatever
//! `RUST_LOG` says. Who gives them depends on whether spans are exported:
//!
//! - with `OTEL_EXPORTER_OTLP_ENDPOINT` set (or a provider passed to
//!   [`install`]), the OpenTelemetry layer, which records each span and
//!   exports it over OTLP/gRPC;
//! - otherwise the light [`crate::trace_ids`] layer, which gives spans their
//!   ids and keeps nothing else: the OpenTelemetry layer's bookkeeping is
//!   the largest part of the edge's own CPU per call, wasted when nothing is
//!   exported.
//!
//! [`crate::propagation`] reads and writes ids through whichever is
//! installed ([`exporting`] says which).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::atomic::{AtomicBool, Ordering};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// How log lines look.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Keeps the tracer provider (if spans are exported) alive; flushes
/// pending spans when dropped.
pub struct Guard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(provider) = &self.provider
            && let Err(err) = provider.shutdown()
        {
            eprintln!("ithaca: flushing spans failed: {err}");
        }
    }
}

/// Set once the installed subscriber has the OpenTelemetry layer.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether the installed subscriber has the OpenTelemetry layer (spans are
/// exported) rather than the light [`crate::trace_ids`] layer, or none.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Telemetry could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("otlp exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("a global subscriber is already installed")]
    AlreadyInstalled,
}

/// Install the global subscriber and propagator for `service_name`.
///
/// The filter comes from `RUST_LOG` (default `info`).
pub fn init(service_name: &str, format: LogFormat) -> Result<Guard, TelemetryError> {
    init_with(service_name, format, "info")
}

/// [`init`] with another default filter when `RUST_LOG` is unset: a stdio
/// server, whose stderr an agent's host shows to people, logs only
/// warnings by default.
pub fn init_with(
    service_name: &str,
    format: LogFormat,
    default_filter: &'static str,
) -> Result<Guard, TelemetryError> {
    if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_none() {
        install_with(None, format, default_filter)?;
        return Ok(Guard { provider: None });
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .build()?;
    let provider = SdkTracerProvider::builder()
        .with_resource(
            Resource::builder()
                .with_service_name(service_name.to_owned())
                .build(),
        )
        .with_batch_exporter(exporter)
        .build();
    install_with(Some(provider.clone()), format, default_filter)?;
    Ok(Guard {
        provider: Some(provider),
    })
}

/// Install the global subscriber with a given provider (tests pass one with
/// an in-memory exporter): spans get their ids from OpenTelemetry and go to
/// the provider's exporter.
pub fn install(provider: SdkTracerProvider, format: LogFormat) -> Result<(), TelemetryError> {
    install_with(Some(provider), format, "info")
}

/// Install the global subscriber without OpenTelemetry, as [`init`] does
/// when nothing is exported: spans get their ids from the light
/// [`crate::trace_ids`] layer.
pub fn install_ids(format: LogFormat) -> Result<(), TelemetryError> {
    install_with(None, format, "info")
}

fn install_with(
    provider: Option<SdkTracerProvider>,
    format: LogFormat,
    default_filter: &'static str,
) -> Result<(), TelemetryError> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    // Said before the subscriber is installed, so no span of it is read
    // through the wrong layer.
    let was_exporting = EXPORTING.swap(provider.is_some(), Ordering::Relaxed);
    // Spans always get ids at INFO, whatever RUST_LOG says: trace ids on
    // trace events and propagation must not depend on the log level.
    // RUST_LOG filters only what is printed.
    let ids = match provider {
        Some(provider) => {
            opentelemetry::global::set_tracer_provider(provider.clone());
            tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("ithaca"))
                .with_filter(LevelFilter::INFO)
                .boxed()
        }
        None => crate::trace_ids::IdLayer
            .with_filter(LevelFilter::INFO)
            .boxed(),
    };
    let filter =
        || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    // Colour codes only where a person reads a terminal, never in files,
    // pipes or an agent host's log panel.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let registry = tracing_subscriber::registry().with(ids);
    let result = match format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr)
                    .with_filter(filter()),
            )
            .try_init(),
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(ansi)
                    .with_filter(filter()),
            )
            .try_init(),
    };
    result.map_err(|_| {
        // The subscriber already installed keeps the layer it had.
        EXPORTING.store(was_exporting, Ordering::Relaxed);
        TelemetryError::AlreadyInstalled
    })
}
