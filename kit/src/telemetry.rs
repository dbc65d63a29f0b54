//! Logging and tracing for a process.
//!
//! Logs go to stderr through `tracing-subscriber`, as JSON lines or human
//! text. Spans always get OpenTelemetry ids (so trace ids exist to store on
//! trace events and propagate across gRPC); they are exported over OTLP/gRPC
//! only when `OTEL_EXPORTER_OTLP_ENDPOINT` is set.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
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

/// Keeps the tracer provider alive; flushes pending spans when dropped.
pub struct Guard {
    provider: SdkTracerProvider,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Err(err) = self.provider.shutdown() {
            eprintln!("ithaca: flushing spans failed: {err}");
        }
    }
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
    let mut builder = SdkTracerProvider::builder().with_resource(
        Resource::builder()
            .with_service_name(service_name.to_owned())
            .build(),
    );
    if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .build()?;
        builder = builder.with_batch_exporter(exporter);
    }
    let provider = builder.build();
    install_with(provider.clone(), format, default_filter)?;
    Ok(Guard { provider })
}

/// Install the global subscriber with a given provider (tests pass one with
/// an in-memory exporter).
pub fn install(provider: SdkTracerProvider, format: LogFormat) -> Result<(), TelemetryError> {
    install_with(provider, format, "info")
}

fn install_with(
    provider: SdkTracerProvider,
    format: LogFormat,
    default_filter: &'static str,
) -> Result<(), TelemetryError> {
    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    opentelemetry::global::set_tracer_provider(provider.clone());
    // Spans always reach OpenTelemetry at INFO, whatever RUST_LOG says: trace
    // ids on trace events and propagation must not depend on the log level.
    // RUST_LOG filters only what is printed.
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("ithaca"))
        .with_filter(LevelFilter::INFO);
    let filter =
        || EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    // Colour codes only where a person reads a terminal, never in files,
    // pipes or an agent host's log panel.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let registry = tracing_subscriber::registry().with(otel);
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
    result.map_err(|_| TelemetryError::AlreadyInstalled)
}
