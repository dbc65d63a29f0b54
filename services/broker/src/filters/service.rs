//! The filter domain: where a filter may go (groups, streams, brokers),
//! filters and reading them back, the diff of two versions, and the checks
//! every RPC shares (tenant, scope, subject). Versions, validation and
//! activation are in [`super::versions`]; the preview in [`super::run`].

pub(super) use super::access::{require_subject, require_write_scope, tenant_of, unknown_filter};
use super::live::LiveFilters;
use super::model::{self, Autosave, FilterId, GroupId, StreamId, codes};
use super::regions::EventRegions;
use super::store::{FilterRow, FilterStore, GroupRow, MatchRow, StreamRow, VersionRow};
use crate::alerts::AlertService;
use crate::alerts::schema::FlatField;
use crate::alerts::service::ARCHIVE_BROKER;
use crate::alerts::store::BrokerRow;
use ithaca_kit::clock;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::principal::{Actor, Principal};
use std::sync::Arc;

/// The name of the group a tenant gets on first use.
pub const DEFAULT_GROUP: &str = "default";
/// Default and largest number of matches `get_broker_filter` lists.
pub const DEFAULT_MATCHES: i64 = 20;
pub const MAX_MATCHES: i64 = 200;

/// Groups, streams, filters, versions, previews and the live path.
#[derive(Clone)]
pub struct FilterService {
    pub(super) store: FilterStore,
    /// The alert archive: brokers, the alert schema, stored alerts.
    pub(super) alerts: AlertService,
    /// The active versions, run on every newly ingested alert.
    pub(super) live: LiveFilters,
    /// Where a GCN event's region comes from (`dateobs`); `None` in a
    /// broker built without GCN events.
    pub(super) regions: Option<Arc<dyn EventRegions>>,
}

impl std::fmt::Debug for FilterService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FilterService")
            .field("events", &self.regions.is_some())
            .finish_non_exhaustive()
    }
}

/// A group with the streams it may use.
#[derive(Clone, Debug)]
pub struct GroupView {
    pub row: GroupRow,
    pub streams: Vec<String>,
}

/// What `get_filter_targets` answers.
#[derive(Clone, Debug)]
pub struct Targets {
    pub groups: Vec<GroupView>,
    pub streams: Vec<StreamRow>,
    /// Brokers that can run filters: only id, name and survey are read.
    pub brokers: Vec<BrokerRow>,
}

/// A new filter.
#[derive(Clone, Debug, Default)]
pub struct NewFilter {
    pub name: String,
    pub group_id: String,
    pub stream_id: String,
    pub broker_id: Option<String>,
    pub autosave: Option<bool>,
    pub autosave_keep: Option<i32>,
}

/// A filter as `get_broker_filter` answers it.
#[derive(Clone, Debug)]
pub struct FilterView {
    pub row: FilterRow,
    pub versions: Vec<VersionRow>,
    pub matches: Vec<MatchRow>,
    pub matches_saved: i64,
}

/// A unified diff of two versions.
#[derive(Clone, Debug)]
pub struct VersionDiff {
    pub filter_id: String,
    pub from: i64,
    pub to: i64,
    pub diff: String,
}

impl FilterService {
    /// The service over `store`, reading alerts and the schema from `alerts`.
    /// Its live path is not yet attached to ingest: see [`crate::filters::attach`].
    pub fn new(store: FilterStore, alerts: AlertService) -> Self {
        let live = LiveFilters::new(store.clone(), alerts.clone());
        FilterService {
            store,
            alerts,
            live,
            regions: None,
        }
    }

    /// The same service, taking GCN regions from `regions`.
    pub fn with_regions(mut self, regions: Arc<dyn EventRegions>) -> Self {
        self.regions = Some(regions);
        self
    }

    pub fn live(&self) -> &LiveFilters {
        &self.live
    }

    pub fn store(&self) -> &FilterStore {
        &self.store
    }

    // ---- targets ---------------------------------------------------------------

    /// `get_filter_targets`.
    pub async fn targets(&self, caller: &Principal) -> Result<Targets, ServiceError> {
        let tenant = tenant_of(caller)?;
        let groups = self.groups(tenant).await?;
        let streams = self.store.streams().await?;
        let brokers = self.filter_brokers(&streams).await?;
        Ok(Targets {
            groups,
            streams,
            brokers,
        })
    }

    /// The tenant's groups with their streams; a tenant with none gets the
    /// default group (every stream) first.
    async fn groups(&self, tenant: &str) -> Result<Vec<GroupView>, ServiceError> {
        let mut rows = self.store.groups(tenant).await?;
        if rows.is_empty() {
            let streams: Vec<String> = self
                .store
                .streams()
                .await?
                .into_iter()
                .map(|s| s.stream_id)
                .collect();
            let row = GroupRow {
                group_id: uuid::Uuid::new_v4().to_string(),
                tenant_id: tenant.to_owned(),
                name: DEFAULT_GROUP.to_owned(),
                created_at_ms: clock::now_ms(),
            };
            // A concurrent first use may have created it: either way the
            // tenant now has its default group.
            self.store.insert_group(&row, &streams).await?;
            rows = self.store.groups(tenant).await?;
        }
        let links = self.store.group_streams(tenant).await?;
        Ok(rows
            .into_iter()
            .map(|row| GroupView {
                streams: links
                    .iter()
                    .filter(|(g, _)| *g == row.group_id)
                    .map(|(_, s)| s.clone())
                    .collect(),
                row,
            })
            .collect())
    }

    /// Brokers that answer `alerts` for the survey of some stream.
    async fn filter_brokers(&self, streams: &[StreamRow]) -> Result<Vec<BrokerRow>, ServiceError> {
        Ok(self
            .alerts
            .store()
            .brokers()
            .await?
            .into_iter()
            .filter(|b| can_filter(b, streams))
            .collect())
    }

    /// `AddFilterGroup`: administrators only.
    pub async fn add_group(
        &self,
        caller: &Principal,
        tenant_id: &str,
        name: &str,
        stream_ids: &[String],
    ) -> Result<GroupView, ServiceError> {
        if caller.actor() != Actor::System {
            return Err(ServiceError::denied("only administrators create groups"));
        }
        let tenant = tenant_id.trim();
        if tenant.is_empty() {
            return Err(ServiceError::invalid("tenant_id: required"));
        }
        let name = model::parse_name("name", name, 64)?;
        let known = self.store.streams().await?;
        let mut streams = Vec::new();
        for raw in stream_ids {
            let id = StreamId::parse(raw).map_err(|_| {
                ServiceError::invalid(format!(
                    "stream_ids: {raw:?} is not a stream id (ztf-public, ztf-partnership)"
                ))
            })?;
            if !known.iter().any(|s| s.stream_id == id.as_str()) {
                return Err(unknown_stream("stream_ids", &id, &known));
            }
            if !streams.contains(&id.to_string()) {
                streams.push(id.into_string());
            }
        }
        if streams.is_empty() {
            return Err(ServiceError::invalid(
                "stream_ids: at least one stream (ztf-public, ztf-partnership)",
            ));
        }
        let row = GroupRow {
            group_id: uuid::Uuid::new_v4().to_string(),
            tenant_id: tenant.to_owned(),
            name: name.clone(),
            created_at_ms: clock::now_ms(),
        };
        if !self.store.insert_group(&row, &streams).await? {
            return Err(ServiceError::new(
                Code::AlreadyExists,
                format!("name: the tenant has a group {name:?} already"),
            ));
        }
        Ok(GroupView { row, streams })
    }

    // ---- filters ---------------------------------------------------------------

    /// `post_filter`.
    pub async fn post_filter(
        &self,
        caller: &Principal,
        new: NewFilter,
    ) -> Result<FilterView, ServiceError> {
        let tenant = tenant_of(caller)?;
        require_write_scope(caller)?;
        let name = model::parse_name("name", &new.name, 100)?;
        let autosave = Autosave::parse(new.autosave, new.autosave_keep)?;
        let (group, stream) = self
            .group_and_stream(tenant, &new.group_id, &new.stream_id)
            .await?;
        let broker = self
            .filter_broker(new.broker_id.as_deref(), &stream)
            .await?;
        let row = FilterRow {
            filter_id: uuid::Uuid::new_v4().to_string(),
            tenant_id: tenant.to_owned(),
            group_id: group.row.group_id,
            stream_id: stream.stream_id,
            broker_id: broker.broker_id,
            name,
            autosave: autosave.enabled,
            autosave_keep: autosave.keep,
            last_version: 0,
            active_version: None,
            activated_at_ms: None,
            created_by: caller.key_id().to_owned(),
            created_at_ms: clock::now_ms(),
        };
        self.store.insert_filter(&row).await?;
        tracing::info!(filter_id = %row.filter_id, stream_id = %row.stream_id, "filter created");
        Ok(FilterView {
            row,
            versions: Vec::new(),
            matches: Vec::new(),
            matches_saved: 0,
        })
    }

    /// The tenant's group `group_id` and its stream `stream_id`.
    pub(super) async fn group_and_stream(
        &self,
        tenant: &str,
        group_id: &str,
        stream_id: &str,
    ) -> Result<(GroupView, StreamRow), ServiceError> {
        let group_id = GroupId::parse(group_id)?;
        let stream_id = StreamId::parse(stream_id)?;
        let groups = self.groups(tenant).await?;
        let Some(group) = groups
            .into_iter()
            .find(|g| g.row.group_id == group_id.as_str())
        else {
            return Err(ServiceError::not_found(format!(
                "group_id: no group {group_id}; get_filter_targets lists yours"
            ))
            .with_domain(codes::UNKNOWN_GROUP));
        };
        let streams = self.store.streams().await?;
        let Some(stream) = streams
            .iter()
            .find(|s| s.stream_id == stream_id.as_str())
            .cloned()
        else {
            return Err(unknown_stream("stream_id", &stream_id, &streams));
        };
        if !group.streams.contains(&stream.stream_id) {
            return Err(ServiceError::denied(format!(
                "stream_id: group {:?} may not use stream {stream_id}; it may use: {}",
                group.row.name,
                group.streams.join(", ")
            ))
            .with_domain(codes::STREAM_NOT_IN_GROUP));
        }
        Ok((group, stream))
    }

    /// The broker a filter on `stream` runs on: `broker_id`, default the
    /// archive, and one that can filter the stream's survey.
    pub(super) async fn filter_broker(
        &self,
        broker_id: Option<&str>,
        stream: &StreamRow,
    ) -> Result<BrokerRow, ServiceError> {
        let id = broker_id
            .map(str::trim)
            .filter(|b| !b.is_empty())
            .unwrap_or(ARCHIVE_BROKER);
        let Some(broker) = self.alerts.store().broker(id).await? else {
            return Err(ServiceError::not_found(format!(
                "broker_id: no broker {id:?}; get_filter_targets lists the brokers that run filters"
            ))
            .with_domain(DomainCode::UnknownBroker));
        };
        if !can_filter(&broker, std::slice::from_ref(stream)) {
            return Err(ServiceError::invalid(format!(
                "broker_id: broker {id:?} cannot run filters on stream {} (survey {})",
                stream.stream_id, stream.survey
            ))
            .with_domain(codes::BROKER_CANNOT_FILTER));
        }
        Ok(broker)
    }

    /// The tenant's filter `filter_id`; NOT_FOUND for another tenant's too.
    pub(super) async fn filter_of(
        &self,
        tenant: &str,
        filter_id: &FilterId,
    ) -> Result<FilterRow, ServiceError> {
        self.store
            .filter(tenant, filter_id)
            .await?
            .ok_or_else(|| unknown_filter(filter_id))
    }

    /// `get_broker_filter` (and the filter resource).
    pub async fn filter(
        &self,
        caller: &Principal,
        filter_id: &str,
        matches_limit: Option<i32>,
    ) -> Result<FilterView, ServiceError> {
        let tenant = tenant_of(caller)?;
        let limit = match matches_limit {
            None => DEFAULT_MATCHES,
            Some(n) if !(0..=MAX_MATCHES).contains(&i64::from(n)) => {
                return Err(ServiceError::invalid(format!(
                    "matches_limit: 0 to {MAX_MATCHES} (got {n})"
                )));
            }
            Some(n) => i64::from(n),
        };
        let id = FilterId::parse(filter_id)?;
        let row = self.filter_of(tenant, &id).await?;
        let versions = self.store.versions(&row.filter_id).await?;
        let matches = if limit == 0 {
            Vec::new()
        } else {
            self.store.latest_matches(&row.filter_id, limit).await?
        };
        let matches_saved = self.store.match_count(&row.filter_id).await?;
        Ok(FilterView {
            row,
            versions,
            matches,
            matches_saved,
        })
    }

    /// `list_broker_filters` (and the console's list): one page of the
    /// tenant's filters, newest first; with `search`, those whose name
    /// contains it, whatever the case.
    pub async fn list(
        &self,
        caller: &Principal,
        search: Option<&str>,
        limit: Option<i32>,
        offset: Option<i32>,
    ) -> Result<(Vec<FilterRow>, i64), ServiceError> {
        let tenant = tenant_of(caller)?;
        let limit = match limit {
            None => 25,
            Some(n) if (1..=100).contains(&n) => i64::from(n),
            Some(n) => return Err(ServiceError::invalid(format!("limit: 1 to 100 (got {n})"))),
        };
        let offset = match offset {
            None => 0,
            Some(n) if n >= 0 => i64::from(n),
            Some(n) => {
                return Err(ServiceError::invalid(format!(
                    "offset: 0 or more (got {n})"
                )));
            }
        };
        let search = match search.map(str::trim) {
            None | Some("") => None,
            Some(s) if s.chars().count() > 100 || s.chars().any(char::is_control) => {
                return Err(ServiceError::invalid(
                    "search: at most 100 characters, no control characters",
                ));
            }
            Some(s) => Some(s.to_lowercase()),
        };
        Ok(self
            .store
            .filters_of(tenant, search.as_deref(), limit, offset)
            .await?)
    }

    /// `diff_broker_filter_versions`.
    pub async fn diff(
        &self,
        caller: &Principal,
        filter_id: &str,
        from: i32,
        to: i32,
    ) -> Result<VersionDiff, ServiceError> {
        let tenant = tenant_of(caller)?;
        let id = FilterId::parse(filter_id)?;
        let from = model::parse_version("from_version", from)?;
        let to = model::parse_version("to_version", to)?;
        let row = self.filter_of(tenant, &id).await?;
        let a = self.version_of(&row, from, "from_version").await?;
        let b = self.version_of(&row, to, "to_version").await?;
        let text = |v: &VersionRow| -> Result<String, ServiceError> {
            let json: serde_json::Value =
                serde_json::from_str(&v.pipeline).map_err(|e| ServiceError::internal(&e))?;
            let mut pretty = model::pretty_text(&json);
            pretty.push('\n');
            Ok(pretty)
        };
        let (left, right) = (text(&a)?, text(&b)?);
        let diff = if left == right {
            String::new()
        } else {
            similar::TextDiff::from_lines(&left, &right)
                .unified_diff()
                .context_radius(3)
                .header(&format!("v{from}"), &format!("v{to}"))
                .to_string()
        };
        Ok(VersionDiff {
            filter_id: row.filter_id,
            from,
            to,
            diff,
        })
    }

    /// Version `version` of `filter`; NOT_FOUND naming `field` otherwise.
    pub(super) async fn version_of(
        &self,
        filter: &FilterRow,
        version: i64,
        field: &str,
    ) -> Result<VersionRow, ServiceError> {
        self.store
            .version(&filter.filter_id, version)
            .await?
            .ok_or_else(|| {
                let known = if filter.last_version == 0 {
                    "it has no versions yet".to_owned()
                } else {
                    format!("it has versions 1 to {}", filter.last_version)
                };
                ServiceError::not_found(format!(
                    "{field}: filter {} has no version {version}; {known}",
                    filter.filter_id
                ))
                .with_domain(codes::UNKNOWN_VERSION)
            })
    }

    /// The survey's own schema (the union of its versions' paths, without
    /// what other producers add): what pipelines are checked against.
    pub(super) async fn schema(&self) -> Result<Vec<FlatField>, ServiceError> {
        self.alerts.survey_schema().await
    }
}

/// Whether `broker` can run filters on one of `streams`: it answers
/// `alerts` and carries the stream's survey.
fn can_filter(broker: &BrokerRow, streams: &[StreamRow]) -> bool {
    broker
        .operations
        .split_whitespace()
        .any(|op| op == "alerts")
        && streams
            .iter()
            .any(|s| s.survey.eq_ignore_ascii_case(&broker.survey))
}

fn unknown_stream(field: &str, id: &StreamId, known: &[StreamRow]) -> ServiceError {
    let names: Vec<&str> = known.iter().map(|s| s.stream_id.as_str()).collect();
    ServiceError::not_found(format!(
        "{field}: no stream {id}; streams: {}",
        names.join(", ")
    ))
    .with_domain(codes::UNKNOWN_STREAM)
}
