//! The auth service: tenants and their API keys.
//!
//! - [`model`]: scopes, actors and the `dmbg_<env>_<keyid>_<secret>` format.
//! - [`service`]: who may do what; minting and verifying tokens.
//! - [`store`]: the `tenants`, `api_keys` and `quota_usage` tables (SQLite
//!   and PostgreSQL); the last holds the edges' shared rate-limit counters.
//! - [`grpc`]: the `ithaca.auth.v1.AuthService` adapter.
//! - [`oauth`], [`oauth_config`], [`oauth_store`], [`oauth_grpc`]: the built-in OAuth 2.1
//!   authorization server's clients, codes, grants and tokens (its HTTP
//!   endpoints are the console's); an access token verifies through
//!   `VerifyKey` as an agent of the consenting person's tenant.
//!
//! Secrets are never stored, logged or returned: only `sha256(salt + secret)`
//! is kept, and the token exists in memory only while it is created or
//! verified. This crate depends on the kit and the proto crate, never on
//! another service.

#![forbid(unsafe_code)]

pub mod grpc;
pub mod model;
pub mod oauth;
pub mod oauth_config;
pub mod oauth_external;
pub mod oauth_grpc;
pub mod oauth_store;
pub mod oauth_token;
pub mod service;
pub mod store;

use ithaca_kit::db::{Db, DbError};
use ithaca_kit::principal::{InternalKey, Verifier};
use ithaca_kit::server::ServeOptions;
use ithaca_proto::auth::v1::auth_service_server::AuthServiceServer;
use ithaca_proto::auth::v1::o_auth_service_server::OAuthServiceServer;
use tonic::service::Routes;

/// The PostgreSQL schema this service owns.
pub const SCHEMA: &str = "ithaca_auth";

/// Open (and migrate) the auth database at `url`.
pub async fn open_db(url: &str, schema: &str) -> Result<Db, DbError> {
    Db::open(url, schema, store::MIGRATIONS).await
}

/// The domain service over `db`.
pub fn service(db: Db) -> service::AuthService {
    service::AuthService::new(store::Store::new(db))
}

/// The gRPC routes of the auth service, behind the principal verifier.
pub fn serve_options(db: Db, key: InternalKey) -> ServeOptions {
    serve_options_with(db, key, oauth::OAuthConfig::default())
}

/// [`serve_options`] with the authorization server's lifetimes.
pub fn serve_options_with(db: Db, key: InternalKey, oauth: oauth::OAuthConfig) -> ServeOptions {
    let service = service(db).with_oauth(oauth);
    let grpc = grpc::Grpc {
        service: service.clone(),
    };
    let server = AuthServiceServer::with_interceptor(grpc, Verifier::new(key.clone()));
    let oauth =
        OAuthServiceServer::with_interceptor(oauth_grpc::OAuthGrpc { service }, Verifier::new(key));
    let mut routes = Routes::new(server);
    routes = routes.add_service(oauth);
    ServeOptions::new(vec![ithaca_proto::service_names::AUTH], routes)
}
