//! The service kit: what every Ithaca process shares.
//!
//! - [`config`]: the flags every service takes, with environment fall-backs.
//! - [`telemetry`]: `tracing` logs (JSON or text) and OpenTelemetry export;
//!   the OpenTelemetry layer is installed only when exporting.
//! - [`trace_ids`]: the light layer that gives spans W3C ids otherwise.
//! - [`propagation`]: W3C trace context across gRPC, client and server side,
//!   through whichever of the two layers is installed.
//! - [`principal`]: the signed principal assertion that services trust.
//! - [`db`]: a SQLite or PostgreSQL handle with per-service migrations.
//! - [`server`]: a gRPC server with health, reflection and graceful shutdown.
//! - [`panic`]: the layer that turns a handler's panic into INTERNAL.
//! - [`shutdown`]: one cancellation signal fed by SIGTERM and ctrl-c.
//! - [`error`]: the error type services return and its gRPC mapping.
//! - [`id`]: the shared typed ids (tenant, session) and the macros that
//!   declare typed ids and text enums in services.
//! - [`chart`]: SVG charts (plotters) for artifacts: ticks, gridlines, log
//!   scales, marked points, stacked panels.
//! - [`json`], [`clock`]: small conversions used at every boundary.
//!
//! The kit knows no service's domain: it must not depend on any service crate.

#![forbid(unsafe_code)]

pub mod approval;
pub mod chart;
pub mod client;
pub mod clock;
pub mod config;
pub mod db;
pub mod error;
pub mod id;
pub mod json;
pub mod panic;
pub mod principal;
pub mod propagation;
pub mod quiet_unix;
pub mod server;
pub mod shutdown;
pub mod telemetry;
pub mod trace_ids;
pub mod write_gate;
