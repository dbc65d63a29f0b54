//! The market domain: daily bars and the dataset snapshots they came from.
//!
//! - [`csv`]: the daily-bar file format, parsed and checked with line numbers.
//! - [`model`]: symbols, dates, fields and bar sanity rules.
//! - [`service`]: ingest (validated, all or nothing), coverage, histories.
//! - [`store`]: the `datasets` and `bars` tables.
//!
//! Bars are reference data shared by every tenant; only administrators
//! ingest them.

pub mod csv;
pub mod model;
pub mod service;
pub mod store;

pub use service::MarketService;
pub use store::MarketStore;
