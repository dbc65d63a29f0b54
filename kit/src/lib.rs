//! The service kit: what every Ithaca process shares.
//!
//! - [`config`]: the flags every service takes, with environment fall-backs.
//! - [`telemetry`]: `tracing` logs (JSON or text) and OpenTelemetry export.
//! - [`propagation`]: W3C trace context across gRPC, client and server side.
//! - [`principal`]: the signed principal assertion that services trust.
//! - [`db`]: a SQLite or PostgreSQL handle with per-service migrations.
//! - [`server`]: a gRPC server with health, reflection and graceful shutdown.
//! - [`shutdown`]: one cancellation signal fed by SIGTERM and ctrl-c.
//! - [`error`]: the error type services return and its gRPC mapping.
//! - [`json`], [`clock`]: small conversions used at every boundary.
//!
//! The kit knows no service's domain: it must not depend on any service crate.

#![forbid(unsafe_code)]

pub mod client;
pub mod clock;
pub mod config;
pub mod db;
pub mod error;
pub mod json;
pub mod principal;
pub mod propagation;
pub mod server;
pub mod shutdown;
pub mod telemetry;
