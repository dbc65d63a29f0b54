//! Serving gRPC: a service's routes plus the standard health service and
//! server reflection, on a listener the caller bound (so tests can bind port
//! 0), until the shutdown token is cancelled. A handler that panics answers
//! INTERNAL ([`crate::panic`]) and the server goes on serving.

use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::service::Routes;
use tonic::transport::Server;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;

/// How long in-flight calls may take to finish after shutdown begins.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// What one gRPC server runs.
pub struct ServeOptions {
    /// Fully qualified names of the services in `routes`, reported by the
    /// health service as SERVING while the server runs.
    pub service_names: Vec<&'static str>,
    /// The services themselves (already wrapped in the principal verifier).
    pub routes: Routes,
    /// The service's background tasks (a worker, a listener). They stop on
    /// the same shutdown signal; `serve` returns only after they finished
    /// (within the drain bound), so no task is cut off mid-write.
    pub background: TaskTracker,
    /// The service's database, when its health should follow the schema:
    /// SERVING only while the applied migrations are exactly this binary's
    /// (checked every [`SCHEMA_CHECK_INTERVAL`]). A rolling upgrade's new
    /// version migrates, and the old version's replicas then report
    /// NOT_SERVING, so their readiness probes take them out of rotation:
    /// two versions do not serve on one schema.
    pub schema: Option<crate::db::Db>,
}

/// How often a server with [`ServeOptions::schema`] compares the database's
/// migrations with its own.
pub const SCHEMA_CHECK_INTERVAL: Duration = Duration::from_secs(5);

impl ServeOptions {
    /// A service with no background tasks.
    pub fn new(service_names: Vec<&'static str>, routes: Routes) -> Self {
        ServeOptions {
            service_names,
            routes,
            background: TaskTracker::new(),
            schema: None,
        }
    }
}

/// The server failed.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("grpc transport: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
}

/// Serve until `shutdown` is cancelled, then let in-flight calls finish for
/// at most [`DRAIN_TIMEOUT`].
pub async fn serve(
    listener: TcpListener,
    options: ServeOptions,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let (reporter, health) = tonic_health::server::health_reporter();
    for name in &options.service_names {
        reporter
            .set_service_status(*name, ServingStatus::Serving)
            .await;
    }
    // Reflection lists exactly what this server answers: its own services,
    // health and reflection, not every service in the shared descriptor set.
    let mut reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(ithaca_proto::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .with_service_name("grpc.health.v1.Health")
        .with_service_name("grpc.reflection.v1.ServerReflection");
    for name in &options.service_names {
        reflection = reflection.with_service_name(*name);
    }
    let reflection = reflection.build_v1()?;
    let routes = options.routes.add_service(health).add_service(reflection);

    if let Some(db) = options.schema.clone() {
        let reporter = reporter.clone();
        let names = options.service_names.clone();
        tokio::spawn(watch_schema(db, reporter, names, shutdown.clone()));
    }
    let stopping = shutdown.clone();
    let names = options.service_names.clone();
    let signal = async move {
        stopping.cancelled().await;
        // Tell load balancers and probes first, then stop accepting.
        for name in names {
            reporter
                .set_service_status(name, ServingStatus::NotServing)
                .await;
        }
    };
    // TCP_NODELAY: a response's trailers are a separate small write; with
    // Nagle on they wait for the peer's delayed ACK (40 ms on Linux).
    let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
    let server = Server::builder()
        .trace_fn(crate::propagation::server_span)
        // Around every route, so a panic anywhere below it (the principal
        // verifier, a handler) becomes a gRPC status, not a reset stream.
        .layer(crate::panic::CatchPanicLayer)
        .add_routes(routes)
        .serve_with_incoming_shutdown(incoming, signal);
    tokio::pin!(server);
    let background = options.background;
    background.close();
    let drained = async {
        let result = (&mut server).await;
        // The server stopped on the shutdown signal, which the background
        // tasks heard too: wait until they finished.
        background.wait().await;
        result
    };
    tokio::select! {
        result = drained => Ok(result?),
        _ = async { shutdown.cancelled().await; tokio::time::sleep(DRAIN_TIMEOUT).await } => {
            tracing::warn!(timeout_s = DRAIN_TIMEOUT.as_secs(), tasks = background.len(), "in-flight calls or background tasks did not finish in time; stopping anyway");
            Ok(())
        }
    }
}

/// Keep the health of `names` in step with the schema (see
/// [`ServeOptions::schema`]) until `shutdown`. A check that fails (the
/// database unreachable) changes nothing: the calls themselves report that.
async fn watch_schema(
    db: crate::db::Db,
    reporter: tonic_health::server::HealthReporter,
    names: Vec<&'static str>,
    shutdown: CancellationToken,
) {
    use crate::db::SchemaState;
    let mut serving = true;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(SCHEMA_CHECK_INTERVAL) => {}
        }
        let state = match db.schema_state().await {
            Ok(state) => state,
            Err(error) => {
                tracing::debug!(%error, "checking the schema version failed");
                continue;
            }
        };
        let current = state == SchemaState::Current;
        if current == serving || shutdown.is_cancelled() {
            continue;
        }
        if current {
            tracing::info!("the schema matches this version again; serving");
        } else {
            tracing::warn!(
                ?state,
                "the database schema is not this version's; reporting NOT_SERVING until it is"
            );
        }
        let status = if current {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in &names {
            reporter.set_service_status(*name, status).await;
        }
        serving = current;
    }
}
