//! GCN events as preview regions: the localisation the caller chose (by
//! default the trigger's, the earliest issued) becomes the MOC of that
//! circle, or for a gravitational-wave sky map its stored 90% credible
//! region, which the preview reads through the `hpx` index.

use super::model::codes;
use super::preview::Region;
use super::run::{EventRegion, EventRegions};
use crate::gcn::GcnService;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;

#[tonic::async_trait]
impl EventRegions for GcnService {
    async fn region(
        &self,
        _caller: &Principal,
        dateobs: &str,
        choice: Option<&str>,
    ) -> Result<EventRegion, ServiceError> {
        // GCN events are reference data shared by every tenant.
        let Some(loc) = self.chosen_localisation(dateobs, choice).await? else {
            return Err(ServiceError::precondition(format!(
                "dateobs: event {dateobs:?} has no localisation (no notice or circular gave a position with an error), \
                 so there is no region to search"
            ))
            .with_domain(codes::NO_LOCALISATION));
        };
        let chosen = choice
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .unwrap_or("trigger");
        if let Some(moc) = &loc.moc {
            // Stored by ingest from the map's pixels; read back with the
            // same checks as a caller's MOC.
            let region = Region::from_ascii(moc)?;
            return Ok(EventRegion {
                region,
                label: format!(
                    "{}: the {}% credible region of a sky map, {:.1} deg² ({}, localisation {chosen})",
                    loc.dateobs,
                    loc.credible_level.unwrap_or(0.9) * 100.0,
                    loc.area_deg2.unwrap_or_default(),
                    loc.description,
                ),
            });
        }
        let region = Region::Cone {
            ra_deg: loc.ra_deg,
            dec_deg: loc.dec_deg,
            radius_deg: loc.error_radius_deg,
        };
        // The MOC is built and checked here, so a bad circle is named now.
        region.to_moc()?;
        Ok(EventRegion {
            region,
            label: format!(
                "{}: {}° around RA {}, Dec {} ({}, localisation {chosen})",
                loc.dateobs, loc.error_radius_deg, loc.ra_deg, loc.dec_deg, loc.description,
            ),
        })
    }
}
