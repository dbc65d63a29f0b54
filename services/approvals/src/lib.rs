//! The approvals service: each tenant's policy (`doomberg://policies/current`)
//! and approval requests for actions that move money.
//!
//! - [`model`]: approval statuses, decisions and promotion modes.
//! - [`service`]: policy, promotions (refused or pending), decisions by
//!   people only, execution of approved calls with the requester's
//!   principal, and the trace of every step.
//! - `requester`: whether an approved call may still run as its requester
//!   (their key active in auth, their session open).
//! - [`store`]: the `policies` and `approvals` tables (SQLite and PostgreSQL).
//! - [`grpc`]: the `ithaca.approvals.v1.ApprovalsService` adapter.
//!
//! It asks auth (the requester's key), the session service (trace) and the
//! owning services (the calls) over gRPC; it depends on no other service
//! crate.

#![forbid(unsafe_code)]

pub mod grpc;
pub mod model;
mod requester;
pub mod service;
pub mod store;

pub use service::Config;

use ithaca_kit::db::{Db, DbError};
use ithaca_kit::principal::{InternalKey, Verifier};
use ithaca_kit::server::ServeOptions;
use ithaca_proto::approvals::v1::approvals_service_server::ApprovalsServiceServer;
use tonic::service::Routes;

/// The PostgreSQL schema this service owns.
pub const SCHEMA: &str = "ithaca_approvals";

/// Open (and migrate) the approvals database at `url`.
pub async fn open_db(url: &str, schema: &str) -> Result<Db, DbError> {
    Db::open(url, schema, store::MIGRATIONS).await
}

/// The domain service over `db`.
pub fn service(
    db: Db,
    key: InternalKey,
    config: &Config,
) -> Result<service::ApprovalsService, ithaca_kit::client::BadUrl> {
    service::ApprovalsService::new(store::Store::new(db), key, config)
}

/// The gRPC routes of the approvals service, behind the principal verifier.
pub fn serve_options(
    db: Db,
    key: InternalKey,
    config: &Config,
) -> Result<ServeOptions, ithaca_kit::client::BadUrl> {
    let grpc = grpc::Grpc {
        service: service(db, key.clone(), config)?,
    };
    let server = ApprovalsServiceServer::with_interceptor(grpc, Verifier::new(key));
    Ok(ServeOptions::new(
        vec![ithaca_proto::service_names::APPROVALS],
        Routes::new(server),
    ))
}
