//! Reference catalogs and the crossmatch: Hipparcos-2 bright stars (with
//! proper motion applied to the epoch asked) and OpenNGC galaxies, stored
//! with the same HEALPix index as alerts.
//!
//! - [`parse`]: the two file formats.
//! - [`store`]: the `catalog_sources` and `catalog_files` tables.
//! - [`service`]: ingest and `crossmatch_broker_catalogs`.
//! - [`grpc`]: the `ithaca.broker.v1.CatalogService` adapter.

pub mod grpc;
pub mod parse;
pub mod service;
pub mod store;

pub use service::CatalogService;
