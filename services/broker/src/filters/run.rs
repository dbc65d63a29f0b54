//! `run_broker_filter`: a pipeline previewed over the archive, bounded by a
//! stream, optionally by a GCN event's localisation and a time window; a
//! count, or the alerts themselves when `sort_by` is given. A preview that
//! ran is recorded against the caller's session (the evidence activation
//! asks for).

use super::access::tenant_of;
use super::model::{self, FilterId, Finding, SortOrder, codes};
use super::preview::{self, PreviewQuery};
pub use super::regions::{EventRegion, EventRegions};
use super::service::FilterService;
use super::store::{PreviewRecord, StreamRow};
use crate::alerts::service::time_window;
use ithaca_kit::clock;
use ithaca_kit::error::ServiceError;
use ithaca_kit::principal::Principal;
use serde_json::Value as Json;

/// Default and largest number of alerts a sorted preview returns.
pub const DEFAULT_LIMIT: usize = 20;
pub const MAX_LIMIT: usize = 200;

/// A `run_broker_filter` request.
#[derive(Clone, Debug, Default)]
pub struct RunArgs {
    pub pipeline: Json,
    pub filter_id: Option<String>,
    pub group_id: Option<String>,
    pub stream_id: Option<String>,
    pub broker_id: Option<String>,
    pub dateobs: Option<String>,
    /// Which localisation of the event (`trigger`, `smallest`,
    /// `skymap`, `skymap:<key>`, `notice:<ivorn>`, `circular:<number>`).
    pub localisation: Option<String>,
    pub jd_start: Option<f64>,
    pub jd_end: Option<f64>,
    pub sort_by: Option<String>,
    pub sort_order: Option<String>,
    pub limit: Option<i32>,
}

/// A `run_broker_filter` answer.
#[derive(Clone, Debug)]
pub struct RunAnswer {
    pub evaluated: u64,
    pub matched: u64,
    pub alerts: Vec<Json>,
    pub warnings: Vec<Finding>,
    pub pipeline_hash: String,
    pub recorded: bool,
    pub broker_id: String,
    pub stream_id: String,
    pub region: Option<String>,
    /// With a region: the alerts of the stream and window on the whole sky.
    pub window_alerts: Option<u64>,
    /// The canonical pipeline that ran.
    pub pipeline: Json,
    /// `(stage index, alerts kept)` of each `$match` stage.
    pub kept: Vec<(usize, u64)>,
}

impl FilterService {
    /// `run_broker_filter`.
    pub async fn run(&self, caller: &Principal, args: RunArgs) -> Result<RunAnswer, ServiceError> {
        let tenant = tenant_of(caller)?;
        super::versions::check_shape(&args.pipeline)?;
        let order = SortOrder::parse_arg(args.sort_order.as_deref())?;
        let limit = match args.limit {
            None => DEFAULT_LIMIT,
            Some(n) if n < 1 || n as usize > MAX_LIMIT => {
                return Err(ServiceError::invalid(format!(
                    "limit: 1 to {MAX_LIMIT} (got {n})"
                )));
            }
            Some(n) => n as usize,
        };
        let sort_by = match args.sort_by.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(s) if s.len() > 200 => {
                return Err(ServiceError::invalid("sort_by: at most 200 characters"));
            }
            Some(s) => Some(s.to_owned()),
        };
        let window = time_window(args.jd_start, args.jd_end)?;
        let (stream, broker_id) = self.run_target(tenant, &args).await?;
        let region = match args.dateobs.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(dateobs) => Some(
                self.event_region(caller, dateobs, args.localisation.as_deref())
                    .await?,
            ),
        };
        if region.is_none()
            && args
                .localisation
                .as_deref()
                .is_some_and(|l| !l.trim().is_empty())
        {
            return Err(ServiceError::invalid(
                "localisation: chooses among a GCN event's localisations; give dateobs with it",
            ));
        }

        let compiled = self.compile_for(&stream.stream_id, &args.pipeline).await?;
        let checked = compiled.map_err(|problems| {
            let listed: Vec<String> = problems.iter().map(ToString::to_string).collect();
            ServiceError::invalid(format!(
                "pipeline: {} problem{}: {}; get_alert_schema lists the paths",
                problems.len(),
                if problems.len() == 1 { "" } else { "s" },
                listed.join("; ")
            ))
            .with_domain(codes::INVALID_PIPELINE)
        })?;
        let canonical = checked.pipeline.canonical();
        let hash = model::pipeline_hash(&canonical);
        let query = PreviewQuery {
            broker_id: broker_id.clone(),
            jd_start: window.map(|w| w.0).filter(|j| *j > f64::MIN),
            jd_end: window.map(|w| w.1).filter(|j| *j < f64::MAX),
            region: region.as_ref().map(|r| r.region.clone()),
            programids: stream.programids(),
            sort_by,
            ascending: order == SortOrder::Ascending,
            limit,
            withheld: stream.withheld(),
        };
        let result = preview::preview(self.alerts.store(), &checked.pipeline, &query).await?;
        // The same stream and window on the whole sky: how many alerts
        // there were to match at all.
        let window_alerts = match &query.region {
            None => None,
            Some(_) => {
                let everywhere = PreviewQuery {
                    region: None,
                    sort_by: None,
                    ..query.clone()
                };
                Some(
                    preview::preview(self.alerts.store(), &checked.pipeline, &everywhere)
                        .await?
                        .evaluated,
                )
            }
        };

        let recorded = match caller.session_id() {
            Some(session) => {
                let as_i64 = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
                let stages: Vec<(usize, i64)> =
                    result.kept.iter().map(|(i, n)| (*i, as_i64(*n))).collect();
                self.store
                    .record_preview(&PreviewRecord {
                        tenant_id: tenant.to_owned(),
                        session_id: session.to_owned(),
                        pipeline_hash: hash.clone(),
                        stream_id: stream.stream_id.clone(),
                        at_ms: clock::now_ms(),
                        evaluated: Some(as_i64(result.evaluated)),
                        matched: Some(as_i64(result.matched)),
                        stages: Some(
                            serde_json::to_string(&stages)
                                .map_err(|e| ServiceError::internal(&e))?,
                        ),
                    })
                    .await?;
                true
            }
            None => false,
        };
        Ok(RunAnswer {
            evaluated: result.evaluated,
            matched: result.matched,
            alerts: result.alerts,
            warnings: checked.warnings.iter().map(Finding::from).collect(),
            pipeline_hash: hash,
            recorded,
            broker_id,
            stream_id: stream.stream_id,
            region: region.map(|r| r.label),
            window_alerts,
            pipeline: canonical,
            kept: result.kept,
        })
    }

    /// The stream and broker a preview runs on: a filter's, or a group's
    /// stream on the named (default archive) broker.
    async fn run_target(
        &self,
        tenant: &str,
        args: &RunArgs,
    ) -> Result<(StreamRow, String), ServiceError> {
        let given = |v: &Option<String>| v.as_deref().is_some_and(|s| !s.trim().is_empty());
        match (
            given(&args.filter_id),
            given(&args.group_id),
            given(&args.stream_id),
        ) {
            (true, false, false) => {
                let id = FilterId::parse(args.filter_id.as_deref().unwrap_or_default())?;
                let filter = self.filter_of(tenant, &id).await?;
                let stream = self
                    .store
                    .streams()
                    .await?
                    .into_iter()
                    .find(|s| s.stream_id == filter.stream_id)
                    .ok_or_else(|| {
                        ServiceError::new(
                            ithaca_kit::error::Code::Internal,
                            "internal error: a filter names an unknown stream",
                        )
                    })?;
                let broker = match args.broker_id.as_deref().map(str::trim) {
                    None | Some("") => filter.broker_id,
                    Some(other) => self.filter_broker(Some(other), &stream).await?.broker_id,
                };
                Ok((stream, broker))
            }
            (false, true, true) => {
                let (_, stream) = self
                    .group_and_stream(
                        tenant,
                        args.group_id.as_deref().unwrap_or_default(),
                        args.stream_id.as_deref().unwrap_or_default(),
                    )
                    .await?;
                let broker = self
                    .filter_broker(args.broker_id.as_deref(), &stream)
                    .await?;
                Ok((stream, broker.broker_id))
            }
            (true, _, _) => Err(ServiceError::invalid(
                "filter_id: give filter_id alone, or group_id and stream_id instead of it",
            )),
            (false, true, false) => Err(ServiceError::invalid(
                "stream_id: required with group_id (get_filter_targets lists the group's streams)",
            )),
            (false, false, true) => Err(ServiceError::invalid(
                "group_id: required with stream_id (get_filter_targets lists your groups)",
            )),
            (false, false, false) => Err(ServiceError::invalid(
                "filter_id: name a filter, or a group_id and stream_id: the stream bounds what the preview sees",
            )),
        }
    }

    async fn event_region(
        &self,
        caller: &Principal,
        dateobs: &str,
        choice: Option<&str>,
    ) -> Result<EventRegion, ServiceError> {
        if dateobs.chars().count() > 100 || dateobs.chars().any(char::is_control) {
            return Err(ServiceError::invalid(
                "dateobs: an event's dateobs (for example 2017-08-17T12:41:04) or alias, at most 100 characters",
            ));
        }
        let Some(regions) = &self.regions else {
            return Err(ServiceError::precondition(
                "dateobs: this broker has no GCN events to take a region from",
            )
            .with_domain(codes::EVENTS_UNAVAILABLE));
        };
        regions.region(caller, dateobs, choice).await
    }
}
