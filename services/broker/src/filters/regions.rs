//! The seam between filters and the GCN events of the same broker: where
//! an event's localisation comes from, as a preview region.

use super::preview::Region;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;

/// Where a GCN event's localisation comes from: the seam between filters
/// and the GCN events of the same broker.
#[tonic::async_trait]
pub trait EventRegions: Send + Sync {
    /// The region of the event `dateobs` (or an alias), and a line saying
    /// what it is. `UNKNOWN_GCN_EVENT` when there is no such event,
    /// `NO_LOCALISATION` when it has no position.
    /// `choice` picks the localisation (`trigger` when `None`).
    async fn region(
        &self,
        caller: &Principal,
        dateobs: &str,
        choice: Option<&str>,
    ) -> Result<EventRegion, ServiceError>;
}

/// A GCN event's localisation as a preview region.
#[derive(Clone, Debug)]
pub struct EventRegion {
    pub region: Region,
    /// For example `GRB 170817A 2017-08-17T12:41:06: 17.45° around (186.62, -48.84)`.
    pub label: String,
}
