//! The skills service: a versioned catalog of analyses with progressive
//! discovery, and runs with artifacts computed from the broker's market data.
//!
//! - [`skills`]: the built-in skills, one module each: a [`skills::Skill`]
//!   is its manifest and its computation, which yields outputs and named
//!   artifacts. A new skill is a new module there and one line in
//!   [`skills::BUILTIN`].
//! - [`catalog`]: manifests and ranked search over them.
//! - [`validate`]: run inputs checked against a manifest's input schema.
//! - [`compute`]: volatility, returns, correlations, momentum backtests.
//! - [`plot`]: the artifacts' charts (term structures, equity curves).
//! - [`model`]: run ids and statuses, profiles, strategy specs.
//! - [`service`]: runs (draft → queued → running → succeeded | failed),
//!   artifacts, the background worker and the `run_transition` trace; a
//!   computation that fails, even by panicking, fails its run.
//! - [`stop`]: the signal that stops an interactive run once its caller
//!   went away or its deadline passed.
//! - [`strategies`]: proposing, reading and promoting strategies.
//! - [`remote`]: what it asks of the broker and session services.
//! - [`store`]: the `runs`, `artifacts`, `jobs` and `strategies` tables
//!   (SQLite and PostgreSQL).
//! - [`grpc`]: the `ithaca.skills.v1.SkillsService` adapter.
//!
//! Market data and the session trace are asked of the broker and session
//! services over gRPC, on behalf of the caller; this crate depends on no
//! other service crate.

#![forbid(unsafe_code)]

pub mod catalog;
pub mod compute;
pub mod grpc;
pub mod model;
pub mod plot;
pub mod remote;
pub mod service;
pub mod skills;
pub mod sources;
pub mod stop;
pub mod store;
pub mod strategies;
pub mod validate;

#[cfg(test)]
mod tests;

pub use service::Config;

use ithaca_kit::db::{Db, DbError};
use ithaca_kit::principal::{InternalKey, Verifier};
use ithaca_kit::server::ServeOptions;
use ithaca_proto::skills::v1::skills_service_server::SkillsServiceServer;
use tonic::service::Routes;

/// The PostgreSQL schema this service owns.
pub const SCHEMA: &str = "ithaca_skills";

/// Open (and migrate) the skills database at `url`.
pub async fn open_db(url: &str, schema: &str) -> Result<Db, DbError> {
    Db::open(url, schema, store::MIGRATIONS).await
}

/// The domain service over `db`.
pub fn service(
    db: Db,
    key: InternalKey,
    config: &Config,
) -> Result<service::SkillsService, ithaca_kit::client::BadUrl> {
    service::SkillsService::new(store::Store::new(db), key, config)
}

/// The gRPC routes of the skills service, behind the principal verifier,
/// and its background worker for batch runs (stopped by `shutdown`).
/// Must be called within a Tokio runtime.
pub fn serve_options(
    db: Db,
    key: InternalKey,
    config: &Config,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<ServeOptions, ithaca_kit::client::BadUrl> {
    let service = service(db, key.clone(), config)?;
    let grpc = grpc::Grpc {
        service: service.clone(),
    };
    let server = SkillsServiceServer::with_interceptor(grpc, Verifier::new(key));
    let options = ServeOptions::new(
        vec![ithaca_proto::service_names::SKILLS],
        Routes::new(server),
    );
    service.spawn_worker(shutdown, &options.background);
    Ok(options)
}
