//! Company fundamentals, filings and insider activity from SEC EDGAR
//! (seed 002), point-in-time.
//!
//! - [`model`]: CIKs, accession numbers, source formats, dates and period
//!   keys, the rows parsers produce, Form 4 transaction codes.
//! - [`parse`]: companyfacts and submissions JSON, Financial Statement
//!   Data Sets zips, XBRL 2.1 instances and Form 4 XML.
//! - [`store`]: the `sec_*` tables: one transaction per file, and reads.
//! - [`lineitems`]: the standard line items over us-gaap concepts, the
//!   point-in-time choice, derived quarters and TTM.
//! - [`service`]: ingest with filing resolution, symbols to CIKs, the
//!   filing index and insider activity; [`reads`]: line items and the peer
//!   screen.
//! - [`grpc`]: the `ithaca.broker.v1.FundamentalsService` adapter.
//!
//! Everything here is reference data shared by every tenant.

pub mod grpc;
pub mod lineitems;
pub mod model;
pub mod parse;
pub mod reads;
pub mod service;
pub mod store;

pub use service::FundamentalsService;
