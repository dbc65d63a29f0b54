//! A filter's end of life and what warns before it starts: taking a filter
//! off the live stream (`deactivate_broker_filter`), deleting one that is
//! not running (`delete_broker_filter`), what a watch of its resource
//! compares, and the warning a version gets when its pipeline's latest
//! preview matched nothing.
//!
//! Deactivation needs no approval (it only stops matching, which lowers
//! risk); versions and matches stay, and any version may be activated
//! again with activation's checks. Deletion removes the filter, its
//! versions and its saved matches in one transaction, and is refused for
//! an active filter (`FILTER_ACTIVE`), so nothing running disappears and
//! nothing is lost without being asked for by name.

use super::lifecycle_store::Deletion;
use super::model::{FilterId, Finding, codes};
use super::service::{FilterService, require_subject, require_write_scope, tenant_of};
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;

/// What deactivation did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deactivation {
    pub filter_id: String,
    /// The version that was active; `None`: none was, nothing changed.
    pub previous: Option<i64>,
}

/// What deletion removed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deleted {
    pub filter_id: String,
    pub name: String,
    pub versions: u64,
    pub matches: u64,
}

/// What a watch of a filter compares: any difference is a change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    pub last_version: i64,
    pub active_version: Option<i64>,
    pub matches_saved: i64,
    /// `(matched_at_ms, candid)` of the newest saved match.
    pub newest_match: Option<(i64, i64)>,
}

impl FilterService {
    /// `deactivate_broker_filter`.
    pub async fn deactivate(
        &self,
        caller: &Principal,
        filter_id: &str,
    ) -> Result<Deactivation, ServiceError> {
        let tenant = tenant_of(caller)?;
        require_write_scope(caller)?;
        let id = FilterId::parse(filter_id)?;
        require_subject(caller, &id, "deactivate_broker_filter")?;
        let Some(previous) = self.store.deactivate(tenant, id.as_str()).await? else {
            return Err(super::service::unknown_filter(&id));
        };
        self.live.invalidate();
        tracing::info!(filter_id = %id, previous = ?previous, "filter deactivated");
        Ok(Deactivation {
            filter_id: id.into_string(),
            previous,
        })
    }

    /// `delete_broker_filter`: only a filter with no active version.
    pub async fn delete(
        &self,
        caller: &Principal,
        filter_id: &str,
    ) -> Result<Deleted, ServiceError> {
        let tenant = tenant_of(caller)?;
        require_write_scope(caller)?;
        let id = FilterId::parse(filter_id)?;
        require_subject(caller, &id, "delete_broker_filter")?;
        let row = self.filter_of(tenant, &id).await?;
        match self.store.delete_filter(tenant, id.as_str()).await? {
            Deletion::NotFound => Err(super::service::unknown_filter(&id)),
            Deletion::Active(version) => Err(ServiceError::precondition(format!(
                "filter_id: filter {id} is running (version {version} is active); \
                 deactivate_broker_filter first, then delete it"
            ))
            .with_domain(codes::FILTER_ACTIVE)),
            Deletion::Deleted { versions, matches } => {
                self.live.invalidate();
                tracing::info!(filter_id = %id, versions, matches, "filter deleted");
                Ok(Deleted {
                    filter_id: id.into_string(),
                    name: row.name,
                    versions,
                    matches,
                })
            }
        }
    }

    /// Where a filter stands, for its watch.
    pub async fn mark(&self, caller: &Principal, filter_id: &str) -> Result<Mark, ServiceError> {
        let tenant = tenant_of(caller)?;
        let id = FilterId::parse(filter_id)?;
        let row = self.filter_of(tenant, &id).await?;
        let newest = self
            .store
            .latest_matches(&row.filter_id, 1)
            .await?
            .first()
            .map(|m| (m.matched_at_ms, m.candid));
        Ok(Mark {
            last_version: row.last_version,
            active_version: row.active_version,
            matches_saved: self.store.match_count(&row.filter_id).await?,
            newest_match: newest,
        })
    }

    /// A warning when the tenant's latest preview of `pipeline_hash` on
    /// `stream_id` matched nothing: with its per-stage counts, so the cut
    /// that emptied it can be told apart from an empty window.
    pub(super) async fn zero_match_warning(
        &self,
        tenant: &str,
        pipeline_hash: &str,
        stream_id: &str,
    ) -> Result<Option<Finding>, ServiceError> {
        let Some(p) = self
            .store
            .latest_preview(tenant, pipeline_hash, stream_id)
            .await?
        else {
            return Ok(None);
        };
        if p.matched != Some(0) {
            return Ok(None);
        }
        let evaluated = p.evaluated.unwrap_or(0);
        let stages: Vec<(i64, i64)> = p
            .stages
            .as_deref()
            .and_then(|s| serde_json::from_str(s).ok())
            .unwrap_or_default();
        let why = if evaluated == 0 {
            "no alert was in its stream, window and region at all (nothing to match)".to_owned()
        } else {
            let counts: Vec<String> = stages
                .iter()
                .map(|(stage, kept)| format!("pipeline[{stage}] $match kept {kept}"))
                .collect();
            format!(
                "of {evaluated} alerts evaluated, none passed ({})",
                if counts.is_empty() {
                    "no $match stage".to_owned()
                } else {
                    counts.join(", ")
                }
            )
        };
        Ok(Some(Finding {
            location: "pipeline".to_owned(),
            message: format!(
                "ZERO_MATCHES: the latest preview of this pipeline on stream {stream_id} ({}) matched nothing: {why}; \
                 a filter that matched nothing in the archive may never match live",
                ithaca_kit::clock::rfc3339(p.at_ms)
            ),
            suggestion: None,
        }))
    }
}
