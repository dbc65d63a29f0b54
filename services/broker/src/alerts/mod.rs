//! The alert archive: brokers, ingest of ZTF alert packets (Avro object
//! containers read with their writer schemas), queries by object, cone and
//! candid over the HEALPix index, light curves and their plots, and the
//! alert schema as dotted paths.
//!
//! - [`avro`]: decoding containers and stored packets.
//! - [`limits`]: the limits, errors and byte cursor the readers share.
//! - [`container`]: the container framing read by hand, with the limits a
//!   file must keep before anything decodes it; [`walk`]: the schema and
//!   datum checks against those limits.
//! - [`schema`]: the flattening of an Avro schema to dotted paths.
//! - [`store`]: the `brokers`, `alert_schemas`, `alert_files` and `alerts` tables.
//! - [`cuts`] and [`cuts_store`]: each alert's compact filter record (the
//!   candidate fields filters cut on most, typed), written with the alert,
//!   and its resumable backfill for archives stored before it existed.
//! - [`lightcurve`] and [`plot`]: light-curve points and their SVG.
//! - [`cutouts`] and [`stretch`]: the three FITS cutouts a packet carries,
//!   decoded and drawn as PNG (IRAF zscale).
//! - [`service`]: the [`AlertService`] itself, its limits and
//!   configuration, and the ingest hook live filters use; its operations
//!   are split by part: [`brokers`] (the registry), [`ingest`],
//!   [`queries`] (alerts by object, cone and candid, and the argument
//!   checks), [`curves`] (light curves and plots) and [`schema_query`]
//!   (the schema as dotted paths). Every refusal names the field at fault.
//! - [`grpc`]: the `ithaca.broker.v1.AlertService` adapter (with time
//!   conversion), and [`render`]: its answers' protobuf shapes, and the
//!   count and alert URI that filters' answers share.

pub mod avro;
pub mod brokers;
pub mod container;
pub mod curves;
pub mod cutouts;
pub mod cuts;
pub mod cuts_store;
pub mod grpc;
pub mod ingest;
pub mod lightcurve;
pub mod limits;
pub mod plot;
pub mod producers;
pub mod queries;
pub mod render;
pub mod schema;
pub mod schema_query;
pub mod service;
pub mod store;
pub mod stretch;
pub mod walk;

#[cfg(test)]
mod hostile_tests;

pub use service::{AlertService, AlertsConfig};
