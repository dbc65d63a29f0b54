//! Broker filters (seed 003): groups and the alert streams they may use,
//! filters on a group and a stream, numbered versions with stored
//! validation verdicts, the preview, activation, and the live path that
//! runs every active version on every newly ingested alert.
//!
//! - [`pipeline`]: a documented subset of MongoDB's aggregation language
//!   (`$match`, `$project`, `$addFields`), compiled against the alert
//!   schema and the filter's stream, evaluated in Rust.
//! - [`preview`]: a pipeline over stored alerts, in a time window, a sky
//!   region (a MOC) and programmes: a count, or the top alerts by a field;
//!   [`compact`]: reading the alerts' compact filter records instead of
//!   their candidates, with the pipeline's first cuts applied in SQL.
//! - [`model`]: ids, sort order, auto-save settings, domain codes, a
//!   filter's URI, the canonical text and hash of a pipeline.
//! - [`document`]: the alert document a filter sees (no cutouts, withheld
//!   paths removed); [`access`]: tenant, write scope and subject guards.
//! - [`store`]: the `filter_*` tables and `filters`.
//! - [`service`]: targets, filters, reading and diffing; [`versions`]:
//!   posting, validating and activating versions; [`run`]: the preview
//!   tool; [`regions`]: the seam to GCN regions ([`regions::EventRegions`]).
//! - [`live`]: the active set and the ingest hook that saves matches.
//! - [`lifecycle`] (and [`lifecycle_store`]): deactivation, deletion, what
//!   a filter's watch compares, and the zero-match warning.
//! - [`events`]: GCN events ([`crate::gcn::GcnService`]) as preview regions.
//! - [`objects`]: one object's saved matches across the tenant's filters
//!   (the console's object page).
//! - [`defaults`]: the counterpart-search defaults.
//! - [`grpc`]: the `ithaca.broker.v1.FilterService` adapter.

pub mod access;
pub mod compact;
pub mod defaults;
pub mod document;
pub mod events;
pub mod grpc;
pub mod lifecycle;
pub mod lifecycle_store;
pub mod live;
pub mod model;
pub mod objects;
pub mod pipeline;
pub mod preview;
pub mod regions;
pub mod run;
pub mod service;
pub mod store;
pub mod versions;

pub use service::FilterService;

use crate::alerts::AlertService;
use ithaca_kit::db::Db;
use std::sync::Arc;

/// The filter service over `db`, its live path attached to `alerts`'s
/// ingest so every newly stored alert passes through the active versions.
pub fn attach(db: Db, alerts: &AlertService) -> FilterService {
    let service = FilterService::new(store::FilterStore::new(db), alerts.clone());
    if alerts
        .set_ingest_hook(Arc::new(service.live().clone()))
        .is_err()
    {
        tracing::warn!(
            "the alert service already runs filters; this filter service's live path is not attached"
        );
    }
    service
}
