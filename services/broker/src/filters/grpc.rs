//! The tonic adapter of `ithaca.broker.v1.FilterService`: protobuf in,
//! domain call, protobuf out. No logic here beyond the shape of answers.

use super::defaults;
use super::model::Finding;
pub use super::model::filter_uri;
use super::run::RunArgs;
use super::service::{FilterService, FilterView, GroupView, NewFilter};
use super::store::{MatchRow, StreamRow, VersionRow};
use super::versions::VerdictView;
use crate::alerts::render::{alert_uri, n};
use ithaca_kit::error::ServiceError;
use ithaca_kit::json::{from_list, to_list};
use ithaca_kit::{clock, json, principal};
use ithaca_proto::broker::v1 as pb;
use ithaca_proto::broker::v1::filter_service_server::FilterService as Rpc;
use ithaca_proto::mcp::v1 as mcp;
use prost_types::ListValue;
use serde_json::Value as Json;
use tonic::{Request, Response, Status};

/// The gRPC face of [`FilterService`].
#[derive(Clone, Debug)]
pub struct Grpc {
    pub service: FilterService,
}

/// How often a filter's watch reads the store again.
const WATCH_POLL: std::time::Duration = std::time::Duration::from_millis(500);

fn required_pipeline(p: Option<ListValue>) -> Result<Json, Status> {
    p.map(from_list).ok_or_else(|| {
        ServiceError::invalid(
            "pipeline: required, a JSON array of stages (get_counterpart_search_defaults gives one to start from)",
        )
        .into()
    })
}

/// Integers beyond 2^53 (candids) become strings: a JSON number, and a
/// protobuf `Value`, would round them.
fn exact_ids(value: Json) -> Json {
    const EXACT: u64 = 1 << 53;
    match value {
        Json::Number(num) => match num.as_i64() {
            Some(i) if i.unsigned_abs() > EXACT => Json::String(i.to_string()),
            _ => match num.as_u64() {
                Some(u) if u > EXACT => Json::String(u.to_string()),
                _ => Json::Number(num),
            },
        },
        Json::Array(items) => Json::Array(items.into_iter().map(exact_ids).collect()),
        Json::Object(map) => {
            Json::Object(map.into_iter().map(|(k, v)| (k, exact_ids(v))).collect())
        }
        other => other,
    }
}

fn problem(f: Finding) -> pb::PipelineProblem {
    pb::PipelineProblem {
        location: f.location,
        message: f.message,
        suggestion: f.suggestion,
    }
}

fn findings(text: &str) -> Vec<pb::PipelineProblem> {
    serde_json::from_str::<Vec<Finding>>(text)
        .unwrap_or_default()
        .into_iter()
        .map(problem)
        .collect()
}

fn stream(s: StreamRow) -> pb::FilterStream {
    pb::FilterStream {
        programids: s.programids(),
        withheld_paths: s.withheld(),
        stream_id: s.stream_id,
        name: s.name,
        survey: s.survey,
        description: s.description,
    }
}

fn group(g: GroupView) -> pb::FilterGroup {
    pb::FilterGroup {
        group_id: g.row.group_id,
        name: g.row.name,
        stream_ids: g.streams,
        created_at: clock::rfc3339(g.row.created_at_ms),
    }
}

fn version(v: VersionRow) -> pb::FilterVersion {
    let pipeline = serde_json::from_str(&v.pipeline).unwrap_or(Json::Array(Vec::new()));
    pb::FilterVersion {
        version: n(v.version),
        pipeline: Some(to_list(pipeline)),
        pipeline_hash: v.pipeline_hash,
        created_at: clock::rfc3339(v.created_at_ms),
        passed: v.passed,
        problems: findings(&v.problems),
        warnings: findings(&v.warnings),
        validated_at: clock::rfc3339(v.validated_at_ms),
    }
}

fn matched(m: MatchRow) -> pb::FilterMatch {
    let fields = serde_json::from_str::<Json>(&m.fields)
        .ok()
        .filter(Json::is_object)
        .unwrap_or_else(|| Json::Object(serde_json::Map::new()));
    pb::FilterMatch {
        fields: Some(json::to_struct(exact_ids(fields))),
        uri: alert_uri(&m.broker_id, m.candid),
        candid: m.candid.to_string(),
        object_id: m.object_id,
        jd: m.jd,
        version: n(m.version),
        matched_at: clock::rfc3339(m.matched_at_ms),
    }
}

fn filter(view: FilterView) -> pb::Filter {
    let r = view.row;
    pb::Filter {
        uri: filter_uri(&r.filter_id),
        filter_id: r.filter_id,
        name: r.name,
        group_id: r.group_id,
        stream_id: r.stream_id,
        broker_id: r.broker_id,
        active_version: r.active_version.map(n),
        autosave: Some(pb::AutosaveSettings {
            enabled: r.autosave,
            keep: n(r.autosave_keep),
        }),
        versions: view.versions.into_iter().map(version).collect(),
        latest_matches: view.matches.into_iter().map(matched).collect(),
        matches_saved: n(view.matches_saved),
        created_at: clock::rfc3339(r.created_at_ms),
    }
}

fn verdict(v: VerdictView) -> pb::FilterVersionVerdict {
    pb::FilterVersionVerdict {
        uri: filter_uri(&v.filter_id),
        filter_id: v.filter_id,
        version: n(v.version),
        passed: v.passed,
        problems: v.problems.into_iter().map(problem).collect(),
        warnings: v.warnings.into_iter().map(problem).collect(),
        pipeline_hash: v.pipeline_hash,
    }
}

#[tonic::async_trait]
impl Rpc for Grpc {
    async fn get_filter_targets(
        &self,
        request: Request<pb::GetFilterTargetsRequest>,
    ) -> Result<Response<pb::FilterTargets>, Status> {
        let caller = principal::of(&request)?;
        let t = self.service.targets(&caller).await?;
        Ok(Response::new(pb::FilterTargets {
            groups: t.groups.into_iter().map(group).collect(),
            streams: t.streams.into_iter().map(stream).collect(),
            brokers: t
                .brokers
                .into_iter()
                .map(|b| pb::FilterBroker {
                    broker_id: b.broker_id,
                    name: b.name,
                    survey: b.survey,
                })
                .collect(),
        }))
    }

    async fn get_counterpart_search_defaults(
        &self,
        request: Request<pb::GetCounterpartSearchDefaultsRequest>,
    ) -> Result<Response<pb::CounterpartSearchDefaults>, Status> {
        let _caller = principal::of(&request)?;
        let d = defaults::defaults(request.into_inner().trigger_jd)?;
        Ok(Response::new(pb::CounterpartSearchDefaults {
            pipeline: Some(to_list(d.pipeline)),
            window_start_days: defaults::WINDOW_START_DAYS,
            window_end_days: defaults::WINDOW_END_DAYS,
            jd_start: d.jd_start,
            jd_end: d.jd_end,
            sort_by: defaults::SORT_BY.to_owned(),
            sort_order: defaults::SORT_ORDER.to_owned(),
            notes: defaults::NOTES.iter().map(|s| (*s).to_owned()).collect(),
        }))
    }

    async fn post_filter(
        &self,
        request: Request<pb::PostFilterRequest>,
    ) -> Result<Response<pb::Filter>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let view = self
            .service
            .post_filter(
                &caller,
                NewFilter {
                    name: r.name,
                    group_id: r.group_id,
                    stream_id: r.stream_id,
                    broker_id: r.broker_id,
                    autosave: r.autosave,
                    autosave_keep: r.autosave_keep,
                },
            )
            .await?;
        Ok(Response::new(filter(view)))
    }

    async fn run_broker_filter(
        &self,
        request: Request<pb::RunBrokerFilterRequest>,
    ) -> Result<Response<pb::FilterPreview>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let args = RunArgs {
            pipeline: required_pipeline(r.pipeline)?,
            filter_id: r.filter_id,
            group_id: r.group_id,
            stream_id: r.stream_id,
            broker_id: r.broker_id,
            dateobs: r.dateobs,
            localisation: r.localisation,
            jd_start: r.jd_start,
            jd_end: r.jd_end,
            sort_by: r.sort_by,
            sort_order: r.sort_order,
            limit: r.limit,
        };
        let a = self.service.run(&caller, args).await?;
        Ok(Response::new(pb::FilterPreview {
            evaluated: i32::try_from(a.evaluated).unwrap_or(i32::MAX),
            matched: i32::try_from(a.matched).unwrap_or(i32::MAX),
            alerts: a
                .alerts
                .into_iter()
                .map(|doc| json::to_struct(exact_ids(doc)))
                .collect(),
            warnings: a.warnings.into_iter().map(problem).collect(),
            pipeline_hash: a.pipeline_hash,
            recorded: a.recorded,
            broker_id: a.broker_id,
            stream_id: a.stream_id,
            region: a.region,
            window_alerts: a
                .window_alerts
                .map(|n| i32::try_from(n).unwrap_or(i32::MAX)),
            pipeline: Some(to_list(a.pipeline)),
            stages: a
                .kept
                .into_iter()
                .map(|(stage, kept)| pb::StageCount {
                    stage: i32::try_from(stage).unwrap_or(i32::MAX),
                    kept: i32::try_from(kept).unwrap_or(i32::MAX),
                })
                .collect(),
        }))
    }

    async fn post_broker_filter_version(
        &self,
        request: Request<pb::PostBrokerFilterVersionRequest>,
    ) -> Result<Response<pb::FilterVersionVerdict>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let pipeline = required_pipeline(r.pipeline)?;
        let v = self
            .service
            .post_version(&caller, &r.filter_id, &pipeline)
            .await?;
        Ok(Response::new(verdict(v)))
    }

    async fn validate_broker_filter_version(
        &self,
        request: Request<pb::ValidateBrokerFilterVersionRequest>,
    ) -> Result<Response<pb::FilterVersionVerdict>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let v = self
            .service
            .validate(&caller, &r.filter_id, r.version)
            .await?;
        Ok(Response::new(verdict(v)))
    }

    async fn activate_broker_filter_version(
        &self,
        request: Request<pb::ActivateBrokerFilterVersionRequest>,
    ) -> Result<Response<pb::FilterActivation>, Status> {
        let caller = principal::of(&request)?;
        let check = ithaca_kit::approval::is_check(&request);
        let r = request.into_inner();
        let a = self
            .service
            .activate(&caller, &r.filter_id, r.version, check)
            .await?;
        let mut response = Response::new(pb::FilterActivation {
            uri: filter_uri(&a.filter_id),
            filter_id: a.filter_id,
            active_version: n(a.version),
            previous_version: a.previous.map(n),
            warnings: a.warnings.into_iter().map(problem).collect(),
        });
        if let Some(summary) = &a.summary {
            ithaca_kit::approval::attach_summary(&mut response, summary);
        }
        Ok(response)
    }

    async fn get_broker_filter(
        &self,
        request: Request<pb::GetBrokerFilterRequest>,
    ) -> Result<Response<pb::Filter>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let view = self
            .service
            .filter(&caller, &r.filter_id, r.matches_limit)
            .await?;
        Ok(Response::new(filter(view)))
    }

    async fn deactivate_broker_filter(
        &self,
        request: Request<pb::DeactivateBrokerFilterRequest>,
    ) -> Result<Response<pb::FilterDeactivation>, Status> {
        let caller = principal::of(&request)?;
        let d = self
            .service
            .deactivate(&caller, &request.get_ref().filter_id)
            .await?;
        Ok(Response::new(pb::FilterDeactivation {
            uri: filter_uri(&d.filter_id),
            filter_id: d.filter_id,
            previous_version: d.previous.map(n),
        }))
    }

    async fn delete_broker_filter(
        &self,
        request: Request<pb::DeleteBrokerFilterRequest>,
    ) -> Result<Response<pb::FilterDeletion>, Status> {
        let caller = principal::of(&request)?;
        let d = self
            .service
            .delete(&caller, &request.get_ref().filter_id)
            .await?;
        Ok(Response::new(pb::FilterDeletion {
            filter_id: d.filter_id,
            name: d.name,
            versions_deleted: i32::try_from(d.versions).unwrap_or(i32::MAX),
            matches_deleted: i32::try_from(d.matches).unwrap_or(i32::MAX),
        }))
    }

    type WatchBrokerFilterStream = std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<mcp::ResourceChanged, Status>> + Send + 'static>,
    >;

    async fn watch_broker_filter(
        &self,
        request: Request<pb::GetBrokerFilterRequest>,
    ) -> Result<Response<Self::WatchBrokerFilterStream>, Status> {
        let caller = principal::of(&request)?;
        let filter_id = request.into_inner().filter_id;
        // Refused before the stream opens, as a read would be.
        let first = self.service.mark(&caller, &filter_id).await?;
        let state = Some((self.service.clone(), caller, filter_id, first));
        // Matches are saved by whichever replica ingested the alerts, so the
        // store is read again every WATCH_POLL; a filter deleted meanwhile
        // gets its last event and the stream ends.
        let changes = futures::stream::unfold(state, |state| async move {
            let (service, caller, filter_id, mark) = state?;
            loop {
                tokio::time::sleep(WATCH_POLL).await;
                match service.mark(&caller, &filter_id).await {
                    Ok(now) if now != mark => {
                        let next = Some((service, caller, filter_id, now));
                        return Some((Ok(mcp::ResourceChanged {}), next));
                    }
                    Ok(_) => {}
                    Err(e) if e.code == ithaca_kit::error::Code::NotFound => {
                        return Some((Ok(mcp::ResourceChanged {}), None));
                    }
                    Err(e) => return Some((Err(Status::from(e)), None)),
                }
            }
        });
        Ok(Response::new(Box::pin(changes)))
    }

    async fn diff_broker_filter_versions(
        &self,
        request: Request<pb::DiffBrokerFilterVersionsRequest>,
    ) -> Result<Response<pb::FilterVersionDiff>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let d = self
            .service
            .diff(&caller, &r.filter_id, r.from_version, r.to_version)
            .await?;
        Ok(Response::new(pb::FilterVersionDiff {
            identical: d.diff.is_empty(),
            filter_id: d.filter_id,
            from_version: n(d.from),
            to_version: n(d.to),
            diff: d.diff,
        }))
    }

    async fn list_broker_filters(
        &self,
        request: Request<pb::ListBrokerFiltersRequest>,
    ) -> Result<Response<pb::BrokerFilters>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let (rows, total) = self
            .service
            .list(&caller, r.search.as_deref(), r.limit, r.offset)
            .await?;
        let offset = i64::from(r.offset.unwrap_or(0));
        let end = offset + rows.len() as i64;
        let filters = rows
            .into_iter()
            .map(|row| {
                filter(FilterView {
                    row,
                    versions: Vec::new(),
                    matches: Vec::new(),
                    matches_saved: 0,
                })
            })
            .collect();
        Ok(Response::new(pb::BrokerFilters {
            filters,
            total: n(total),
            next_offset: (end < total).then(|| n(end)),
        }))
    }

    async fn list_object_filter_matches(
        &self,
        request: Request<pb::ListObjectFilterMatchesRequest>,
    ) -> Result<Response<pb::ObjectFilterMatches>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let found = self
            .service
            .object_matches(&caller, &r.broker_id, &r.object_id, r.limit)
            .await?;
        let matches: Vec<pb::ObjectFilterMatch> = found
            .matches
            .into_iter()
            .map(|m| pb::ObjectFilterMatch {
                filter_id: m.matched.filter_id.clone(),
                filter_name: m.filter_name,
                active_version: m.active_version.map(n),
                r#match: Some(matched(m.matched)),
            })
            .collect();
        Ok(Response::new(pb::ObjectFilterMatches {
            broker_id: found.broker_id,
            object_id: found.object_id,
            count: n(matches.len() as i64),
            matches,
            truncated: found.truncated,
        }))
    }

    async fn add_filter_group(
        &self,
        request: Request<pb::AddFilterGroupRequest>,
    ) -> Result<Response<pb::FilterGroup>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let g = self
            .service
            .add_group(&caller, &r.tenant_id, &r.name, &r.stream_ids)
            .await?;
        Ok(Response::new(group(g)))
    }
}
