//! The session service: research sessions, their prompt history and their
//! gap-free, replayable trace.
//!
//! - [`model`]: statuses, event kinds, ids, titles and limits.
//! - [`service`]: `session_context` (seed 002), close/archive, the current
//!   session per (tenant, agent), appends, reads and live tails.
//! - [`store`]: the SQL (SQLite and PostgreSQL) and the gap-free `seq`.
//! - `subject`: a session's subject checked against the broker, with the
//!   person's principal, when it is set.
//! - [`tail`]: live notification fan-out, with LISTEN/NOTIFY on PostgreSQL.
//! - [`grpc`]: the `ithaca.session.v1.SessionService` adapter.
//!
//! Every query is filtered by the caller's asserted tenant: another tenant's
//! session is NOT_FOUND. This crate depends on the kit and the proto crate,
//! never on another service: it asks the broker over gRPC.

#![forbid(unsafe_code)]

mod calls;
mod current;
pub mod grpc;
pub mod model;
pub mod record;
pub mod service;
pub mod store;
pub mod stream;
mod subject;
pub mod tail;

pub use service::Config;

use ithaca_kit::db::{Db, DbError};
use ithaca_kit::principal::{InternalKey, Verifier};
use ithaca_kit::server::ServeOptions;
use ithaca_proto::session::v1::session_service_server::SessionServiceServer;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;

/// The PostgreSQL schema this service owns.
pub const SCHEMA: &str = "ithaca_session";

/// Open (and migrate) the session database at `url`.
pub async fn open_db(url: &str, schema: &str) -> Result<Db, DbError> {
    Db::open(url, schema, store::MIGRATIONS).await
}

/// The domain service over `db`. Live tails end when `shutdown` is cancelled.
pub fn service(db: Db, config: Config, shutdown: CancellationToken) -> service::SessionService {
    service::SessionService::new(store::Store::new(db), config, shutdown)
}

/// The gRPC routes of the session service, behind the principal verifier.
/// With `config.broker_url`, subjects are checked against that broker.
pub fn serve_options(
    db: Db,
    config: Config,
    key: InternalKey,
    shutdown: CancellationToken,
) -> Result<ServeOptions, ithaca_kit::client::BadUrl> {
    let broker_url = config.broker_url.clone();
    let mut service = service(db, config, shutdown);
    if let Some(url) = broker_url {
        service = service.with_broker(&url, key.clone())?;
    }
    let grpc = grpc::Grpc {
        service,
        key: key.clone(),
    };
    let server = SessionServiceServer::with_interceptor(grpc, Verifier::new(key));
    Ok(ServeOptions::new(
        vec![ithaca_proto::service_names::SESSION],
        Routes::new(server),
    ))
}
