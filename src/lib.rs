//! The `ithaca` library: everything the `ithaca` binary runs, so that the
//! tests (and anything else) start stacks exactly as the binary does.
//!
//! - [`up::start_services`] starts the local stack's gRPC services in this
//!   process, each on its own loopback port, real gRPC between them;
//!   [`edge::start_http`] puts the MCP edge (and the console) in front.
//! - [`serve`] runs one service, as a Kubernetes pod does.
//! - [`admin`], [`accounts`], [`approvals`], [`brokers`], [`sessions`] and
//!   [`ingest`] are the administration commands; [`connect`] writes an
//!   agent's MCP configuration; [`mcp`] speaks MCP over stdio.
//!
//! Layout: [`services`] names the services, [`stack`] the data directory and
//! the stack file.

#![forbid(unsafe_code)]

pub mod accounts;
pub mod admin;
pub mod approvals;
pub mod broker_client;
pub mod brokers;
pub mod connect;
pub mod edge;
pub mod ingest;
pub mod mcp;
pub mod serve;
pub mod services;
pub mod sessions;
pub mod stack;
pub mod up;
