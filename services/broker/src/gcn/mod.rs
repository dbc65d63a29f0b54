//! GCN events: triggers announced on NASA's General Coordinates Network,
//! grouped by trigger time (`dateobs`), with the names they go by, the
//! circulars and notices about them, the localisations those carry, values
//! extracted from the circulars, and each tenant's discussion.
//!
//! - [`model`]: the canonical `dateobs`, event kinds, names, localisations.
//! - [`parse`]: circulars (JSON), VOEvent 2.0 notices (XML) and GCN JSON
//!   notices; [`limits`]: the size and attribute counts a notice may have,
//!   checked before it is parsed.
//! - [`skymap`]: gravitational-wave multi-order sky maps (FITS, read by
//!   the bounded [`fits`] reader) and their 90% credible region as a MOC.
//! - [`identify`]: which event a circular is about, and when it happened.
//! - [`circulars`]: an event's circulars a page at a time, one circular by
//!   number, and the word search over circulars.
//! - [`extract`]: the built-in parser (`ithaca-circular-parser`), with
//!   [`epoch`] (when a magnitude was observed) and [`counterpart`] (the
//!   objects a circular reports, with their positions).
//! - [`ingest`]: one file per transaction, written once for both databases.
//! - [`store`]: the tables' SQL for reading, comments and producers' writes.
//! - [`service`]: the domain behind `ithaca.broker.v1.GcnService`, and
//!   [`GcnService::chosen_localisation`] for filter previews.
//! - [`grpc`]: the tonic adapter.
//!
//! Events, circulars, notices, localisations and the built-in extractions
//! are reference data shared by every tenant; comments, and extractions a
//! tenant's own producers add, belong to that tenant.

pub mod circulars;
pub mod counterpart;
pub mod epoch;
pub mod extract;
pub mod fits;
pub mod grpc;
pub mod identify;
pub mod ingest;
pub mod limits;
pub mod model;
pub mod parse;
pub mod service;
pub mod skymap;
pub mod store;

pub use model::{DateObs, Localisation};
pub use service::GcnService;
