//! The broker service: market data (daily bars and the dataset snapshots
//! they came from). Astronomy alerts, catalogs, filters, GCN events and
//! provider accounts arrive with their own issues.
//!
//! - [`csv`]: the daily-bar file format, parsed and checked with line numbers.
//! - [`model`]: symbols, dates, fields and bar sanity rules.
//! - [`service`]: ingest (validated, all or nothing), coverage, histories.
//! - [`store`]: the `datasets` and `bars` tables (SQLite and PostgreSQL).
//! - [`grpc`]: the `ithaca.broker.v1.BrokerService` adapter.
//!
//! Bars are reference data shared by every tenant. This crate depends on
//! the kit and the proto crate, never on another service.

#![forbid(unsafe_code)]

pub mod csv;
pub mod grpc;
pub mod model;
pub mod service;
pub mod store;
pub mod vault;

use ithaca_kit::db::{Db, DbError};
use ithaca_kit::principal::{InternalKey, Verifier};
use ithaca_kit::server::ServeOptions;
use ithaca_proto::broker::v1::broker_service_server::BrokerServiceServer;
use tonic::service::Routes;

/// The PostgreSQL schema this service owns.
pub const SCHEMA: &str = "ithaca_broker";

/// Largest gRPC message (an ingest chunk) accepted.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// Open (and migrate) the broker database at `url`.
pub async fn open_db(url: &str, schema: &str) -> Result<Db, DbError> {
    Db::open(url, schema, store::MIGRATIONS).await
}

/// The domain service over `db`; credentials are sealed with a key derived
/// from the internal key.
pub fn service(db: Db, key: &InternalKey) -> service::BrokerService {
    let vault = vault::Vault::new(&key.derive("broker-credentials"));
    service::BrokerService::new(store::Store::new(db), vault)
}

/// The gRPC routes of the broker service, behind the principal verifier.
pub fn serve_options(db: Db, key: InternalKey) -> ServeOptions {
    let grpc = grpc::Grpc {
        service: service(db, &key),
    };
    let server = BrokerServiceServer::new(grpc).max_decoding_message_size(MAX_MESSAGE);
    let server = tonic::service::interceptor::InterceptedService::new(server, Verifier::new(key));
    ServeOptions::new(
        vec![ithaca_proto::service_names::BROKER],
        Routes::new(server),
    )
}
