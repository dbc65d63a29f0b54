//! The tonic adapter: protobuf in, domain call, protobuf out. No logic here.

use crate::catalog::Manifest;
use crate::model::{RunStatus, StrategyProposal};
use crate::service::{RunView, SkillsService};
use crate::skills::Step;
use crate::stop::{self, Reason, Stop};
use crate::store::StrategyRow;
use ithaca_kit::{clock, json, principal};
use ithaca_proto::mcp::v1 as mcp;
use ithaca_proto::skills::v1 as pb;
use ithaca_proto::skills::v1::skills_service_server::SkillsService as Rpc;
use serde_json::Value;
use tonic::{Request, Response, Status};

/// How often a run watch reads the run's status again.
const WATCH_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// What run_skill streams: its progress, then the run (`stream.proto`).
type Events =
    std::pin::Pin<Box<dyn futures::Stream<Item = Result<mcp::CallEvent, Status>> + Send + 'static>>;

/// A step of a run as MCP progress.
fn progress_event(step: Step) -> mcp::CallEvent {
    mcp::CallEvent {
        event: Some(mcp::call_event::Event::Progress(mcp::Progress {
            progress: step.done as f64,
            total: Some(step.total as f64),
            message: step.message,
        })),
    }
}

/// The gRPC face of [`SkillsService`].
#[derive(Clone, Debug)]
pub struct Grpc {
    pub service: SkillsService,
}

fn summary(m: &Manifest) -> pb::SkillSummary {
    pb::SkillSummary {
        skill_id: m.skill_id.into(),
        version: m.version.into(),
        name: m.name.into(),
        description: m.description.into(),
        runtime_profile: m.profile.as_str().into(),
        asset_class: m.asset_class.into(),
        source_classes: m.source_classes.iter().map(|s| s.to_string()).collect(),
        trigger_compatible: m.trigger_compatible,
        intents: m.intents.iter().map(|s| s.to_string()).collect(),
    }
}

fn manifest(m: Manifest) -> pb::SkillManifest {
    pb::SkillManifest {
        skill_id: m.skill_id.into(),
        version: m.version.into(),
        name: m.name.into(),
        description: m.description.into(),
        input_schema: Some(json::to_struct(m.input_schema)),
        output_schema: Some(json::to_struct(m.output_schema)),
        runtime: Some(pb::Runtime {
            profile: m.profile.as_str().into(),
        }),
        asset_class: m.asset_class.into(),
        source_classes: m.source_classes.iter().map(|s| s.to_string()).collect(),
        trigger_compatible: m.trigger_compatible,
        intents: m.intents.iter().map(|s| s.to_string()).collect(),
    }
}

fn parse_json(text: &str) -> Option<prost_types::Struct> {
    serde_json::from_str::<Value>(text)
        .ok()
        .map(json::to_struct)
}

fn run(view: RunView) -> pb::Run {
    let r = view.run;
    pb::Run {
        inputs: parse_json(&r.inputs),
        outputs: r.outputs.as_deref().and_then(parse_json),
        run_id: r.run_id.into(),
        skill_id: r.skill_id,
        version: r.version,
        status: r.status.as_str().to_owned(),
        error: r.error,
        artifacts: view
            .artifacts
            .into_iter()
            .map(|a| pb::Artifact {
                size: a.body.len() as i64,
                artifact_id: a.artifact_id,
                name: a.name,
                mime_type: a.mime_type,
            })
            .collect(),
        session_id: r.session_id,
        created_at: clock::rfc3339(r.created_at_ms),
        updated_at: clock::rfc3339(r.updated_at_ms),
        jobs: view
            .jobs
            .into_iter()
            .map(|j| pb::Job {
                job_id: j.job_id,
                attempt: j.attempt as i32,
                status: j.status.as_str().to_owned(),
                started_at: clock::rfc3339(j.started_at_ms),
                finished_at: clock::rfc3339_opt(j.finished_at_ms),
                error: j.error,
            })
            .collect(),
        trace: Vec::new(),
    }
}

fn strategy(row: StrategyRow) -> pb::Strategy {
    let spec = row.spec;
    pb::Strategy {
        strategy_id: row.strategy_id,
        name: row.name,
        universe: spec.universe,
        lookback: spec.lookback,
        rebalance: spec.rebalance,
        risk: Some(pb::RiskLimits {
            max_weight: Some(spec.risk.max_weight),
            max_drawdown: spec.risk.max_drawdown,
        }),
        cost_bps: spec.cost_bps,
        status: row.status.as_str().to_owned(),
        session_id: row.session_id,
        created_at: clock::rfc3339(row.created_at_ms),
    }
}

#[tonic::async_trait]
impl Rpc for Grpc {
    async fn propose_strategy(
        &self,
        request: Request<pb::ProposeStrategyRequest>,
    ) -> Result<Response<pb::Strategy>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let risk = r.risk.unwrap_or_default();
        let proposal = StrategyProposal {
            name: r.name,
            universe: r.universe,
            lookback: r.lookback,
            rebalance: r.rebalance,
            max_weight: risk.max_weight,
            max_drawdown: risk.max_drawdown,
            cost_bps: r.cost_bps,
        };
        Ok(Response::new(strategy(
            self.service.propose(&caller, proposal).await?,
        )))
    }

    async fn promote_strategy(
        &self,
        request: Request<pb::PromoteStrategyRequest>,
    ) -> Result<Response<pb::Strategy>, Status> {
        let caller = principal::of(&request)?;
        let check = ithaca_kit::approval::is_check(&request);
        let r = request.get_ref();
        let row = self
            .service
            .promote_strategy(&caller, &r.strategy_id, &r.mode, check)
            .await?;
        let summary = match check {
            true => Some(self.service.promotion_summary(&row, &r.mode).await?),
            false => None,
        };
        let mut response = Response::new(strategy(row));
        if let Some(summary) = &summary {
            ithaca_kit::approval::attach_summary(&mut response, summary);
        }
        Ok(response)
    }

    async fn get_strategy(
        &self,
        request: Request<pb::GetStrategyRequest>,
    ) -> Result<Response<pb::Strategy>, Status> {
        let caller = principal::of(&request)?;
        Ok(Response::new(strategy(
            self.service
                .strategy(&caller, &request.get_ref().strategy_id)
                .await?,
        )))
    }

    async fn search_skills(
        &self,
        request: Request<pb::SearchSkillsRequest>,
    ) -> Result<Response<pb::SearchSkillsResponse>, Status> {
        principal::of(&request)?;
        let r = request.get_ref();
        let (hits, count, truncated) = self.service.search(
            r.query.as_deref(),
            r.asset_class.as_deref(),
            r.intent.as_deref(),
            r.limit,
        )?;
        let (note, asset_classes, intents) = match self.service.search_note(
            r.query.as_deref(),
            r.asset_class.as_deref(),
            r.intent.as_deref(),
            count,
        ) {
            Some((note, classes, intents)) => (Some(note), classes, intents),
            None => (None, Vec::new(), Vec::new()),
        };
        Ok(Response::new(pb::SearchSkillsResponse {
            skills: hits.iter().map(summary).collect(),
            count: count as i32,
            truncated,
            note,
            asset_classes,
            intents,
        }))
    }

    async fn describe_skill(
        &self,
        request: Request<pb::DescribeSkillRequest>,
    ) -> Result<Response<pb::SkillManifest>, Status> {
        principal::of(&request)?;
        let r = request.get_ref();
        Ok(Response::new(manifest(
            self.service.describe(&r.skill_id, r.version.as_deref())?,
        )))
    }

    async fn get_catalog(
        &self,
        request: Request<pb::GetCatalogRequest>,
    ) -> Result<Response<pb::SearchSkillsResponse>, Status> {
        principal::of(&request)?;
        let (hits, count, _) = self.service.search(None, None, None, Some(50))?;
        let (asset_classes, intents) = self.service.vocabulary();
        Ok(Response::new(pb::SearchSkillsResponse {
            skills: hits.iter().map(summary).collect(),
            count: count as i32,
            truncated: false,
            note: None,
            asset_classes,
            intents,
        }))
    }

    async fn get_skill(
        &self,
        request: Request<pb::GetSkillRequest>,
    ) -> Result<Response<pb::SkillManifest>, Status> {
        principal::of(&request)?;
        let r = request.get_ref();
        Ok(Response::new(manifest(
            self.service.describe(&r.skill_id, Some(&r.version))?,
        )))
    }

    async fn run_skill(
        &self,
        request: Request<pb::RunSkillRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let caller = principal::of(&request)?;
        // Tonic drops this future when the caller goes away; the run stops
        // then, or at the caller's deadline.
        let stop = Stop::until(stop::deadline(request.metadata()));
        let r = request.into_inner();
        let inputs = r.inputs.map_or(Value::Null, json::from_struct);
        let view = self
            .service
            .run_until(&caller, &r.skill_id, r.version.as_deref(), inputs, stop)
            .await?;
        Ok(Response::new(run(view)))
    }

    type RunSkillStreamStream = Events;

    async fn run_skill_stream(
        &self,
        request: Request<pb::RunSkillRequest>,
    ) -> Result<Response<Events>, Status> {
        let caller = principal::of(&request)?;
        // An interactive run stops when the caller goes away (tonic drops
        // the stream, which closes `events`) or at its deadline: tonic
        // bounds only the wait for a stream's headers, so the deadline is
        // ours to keep.
        let stop = Stop::until(stop::deadline(request.metadata()));
        let r = request.into_inner();
        let inputs = r.inputs.map_or(Value::Null, json::from_struct);
        let service = self.service.clone();
        let (events, received) = tokio::sync::mpsc::channel(16);
        tokio::spawn(async move {
            let (progress, mut steps) = tokio::sync::mpsc::channel::<Step>(64);
            let running = service.run_following(
                &caller,
                &r.skill_id,
                r.version.as_deref(),
                inputs,
                progress,
                &stop,
            );
            tokio::pin!(running);
            let outcome = loop {
                tokio::select! {
                    biased;
                    () = events.closed(), if stop.reason().is_none() => stop.stop(Reason::CallerLeft),
                    Some(step) = steps.recv() => {
                        // A gone caller's progress is dropped; a batch run
                        // still finishes, an interactive one is stopping.
                        let _ = events.send(Ok(progress_event(step))).await;
                    }
                    outcome = &mut running => break outcome,
                }
            };
            while let Ok(step) = steps.try_recv() {
                let _ = events.send(Ok(progress_event(step))).await;
            }
            let last = match outcome {
                Ok(view) => Ok(mcp::CallEvent {
                    event: Some(mcp::call_event::Event::Reply(
                        prost::Message::encode_to_vec(&run(view)),
                    )),
                }),
                Err(err) => Err(Status::from(err)),
            };
            let _ = events.send(last).await;
        });
        let stream = futures::stream::unfold(received, |mut received| async move {
            received.recv().await.map(|event| (event, received))
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn get_run(
        &self,
        request: Request<pb::GetRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let caller = principal::of(&request)?;
        Ok(Response::new(run(self
            .service
            .get_run(&caller, &request.get_ref().run_id)
            .await?)))
    }

    async fn cancel_run(
        &self,
        request: Request<pb::CancelRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let caller = principal::of(&request)?;
        Ok(Response::new(run(self
            .service
            .cancel(&caller, &request.get_ref().run_id)
            .await?)))
    }

    async fn subscribe_run(
        &self,
        request: Request<pb::SubscribeRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        let caller = principal::of(&request)?;
        let r = request.get_ref();
        let view = self
            .service
            .subscribe(&caller, &r.run_id, r.status.as_deref(), r.wait_ms)
            .await?;
        Ok(Response::new(run(view)))
    }

    type WatchRunStream = std::pin::Pin<
        Box<dyn futures::Stream<Item = Result<mcp::ResourceChanged, Status>> + Send + 'static>,
    >;

    async fn watch_run(
        &self,
        request: Request<pb::GetRunRequest>,
    ) -> Result<Response<Self::WatchRunStream>, Status> {
        let caller = principal::of(&request)?;
        let run_id = request.into_inner().run_id;
        // Refused before the stream opens, as a read would be.
        let first = self.service.get_run(&caller, &run_id).await?;
        let state = Some((self.service.clone(), caller, run_id, first.run.status));
        // The store is the only source of a run's status (the worker that
        // changes it may be another replica's), so it is read again every
        // WATCH_POLL; the stream ends once the run can change no more.
        let changes = futures::stream::unfold(state, |state| async move {
            let (service, caller, run_id, status) = state?;
            loop {
                if matches!(
                    status,
                    RunStatus::Succeeded | RunStatus::Failed | RunStatus::Cancelled
                ) {
                    return None;
                }
                tokio::time::sleep(WATCH_POLL).await;
                match service.get_run(&caller, &run_id).await {
                    Ok(view) if view.run.status != status => {
                        let next = Some((service, caller, run_id, view.run.status));
                        return Some((Ok(mcp::ResourceChanged {}), next));
                    }
                    Ok(_) => {}
                    Err(error) => return Some((Err(Status::from(error)), None)),
                }
            }
        });
        Ok(Response::new(Box::pin(changes)))
    }

    async fn read_run(
        &self,
        request: Request<pb::GetRunRequest>,
    ) -> Result<Response<pb::Run>, Status> {
        // The resource form of get_run, with the run's trace events.
        let caller = principal::of(&request)?;
        let view = self
            .service
            .get_run(&caller, &request.get_ref().run_id)
            .await?;
        let trace = self.service.run_trace(&caller, &view.run).await;
        let mut run = run(view);
        run.trace = trace.into_iter().map(json::to_struct).collect();
        Ok(Response::new(run))
    }

    async fn get_artifact(
        &self,
        request: Request<pb::GetArtifactRequest>,
    ) -> Result<Response<mcp::ToolContent>, Status> {
        let caller = principal::of(&request)?;
        let a = self
            .service
            .artifact(&caller, &request.get_ref().artifact_id)
            .await?;
        Ok(Response::new(artifact_content(&a)))
    }

    async fn read_artifact(
        &self,
        request: Request<pb::ReadArtifactRequest>,
    ) -> Result<Response<mcp::ToolContent>, Status> {
        let caller = principal::of(&request)?;
        let r = request.get_ref();
        let a = self.service.artifact(&caller, &r.artifact_id).await?;
        if a.run_id.as_str() != r.run_id.trim() {
            // The URI names a run the artifact is not of: as if it were absent.
            return Err(ithaca_kit::error::ServiceError::not_found(format!(
                "artifact_id: run {} has no artifact {}",
                r.run_id, r.artifact_id
            ))
            .into());
        }
        Ok(Response::new(artifact_content(&a)))
    }
}

/// An artifact as MCP content: the body embedded under its readable URI,
/// plus what it is as structured content.
fn artifact_content(a: &crate::store::ArtifactRow) -> mcp::ToolContent {
    let resource = mcp::Content {
        kind: Some(mcp::content::Kind::Resource(mcp::EmbeddedResource {
            uri: format!("doomberg://runs/{}/artifacts/{}", a.run_id, a.artifact_id),
            mime_type: a.mime_type.clone(),
            body: Some(mcp::embedded_resource::Body::Text(a.body.clone())),
        })),
    };
    let structured = serde_json::json!({
        "artifact_id": a.artifact_id, "run_id": a.run_id.as_str(), "name": a.name,
        "mime_type": a.mime_type, "size": a.body.len(),
    });
    mcp::ToolContent {
        content: vec![resource],
        structured: Some(json::to_struct(structured)),
    }
}
