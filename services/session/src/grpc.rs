//! The tonic adapter: protobuf in, domain call, protobuf out. No logic here.

use crate::calls;
use crate::service::SessionService;
use crate::store::{EventRow, SessionRow};
use ithaca_kit::principal::InternalKey;
use ithaca_kit::{clock, json, principal};
use ithaca_proto::session::v1 as pb;
use ithaca_proto::session::v1::session_service_server::SessionService as Rpc;
use std::pin::Pin;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status};

/// The gRPC face of [`SessionService`].
#[derive(Clone, Debug)]
pub struct Grpc {
    pub service: SessionService,
    /// Verifies the assertion each message of `AppendEvents` carries.
    pub key: InternalKey,
}

impl Grpc {
    fn descriptor(&self, row: SessionRow) -> pb::SessionDescriptor {
        pb::SessionDescriptor {
            trace_stream: self.service.trace_stream(&row.session_id),
            trace_resource: crate::service::SessionService::trace_resource(&row.session_id),
            session_id: row.session_id.into(),
            tenant_id: row.tenant_id.into(),
            title: row.title,
            created_at: clock::rfc3339(row.created_at_ms),
            status: row.status.as_str().to_owned(),
            subject_kind: row.subject_kind,
            subject_id: row.subject_id,
            previous_session_id: None,
            notice: None,
        }
    }
}

fn event(row: EventRow) -> pb::TraceEvent {
    let payload = serde_json::from_str(&row.payload).unwrap_or(serde_json::Value::Null);
    pb::TraceEvent {
        session_id: row.session_id.into(),
        seq: row.seq,
        r#type: row.event_type,
        payload: Some(json::to_struct(payload)),
        created_at: clock::rfc3339(row.created_at_ms),
        trace_id: row.trace_id,
    }
}

type EventStream = Pin<Box<dyn Stream<Item = Result<pb::TraceEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Rpc for Grpc {
    async fn session_context(
        &self,
        request: Request<pb::SessionContextRequest>,
    ) -> Result<Response<pb::SessionDescriptor>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let (row, previous) = self
            .service
            .open_noting_takeover(
                &caller,
                &crate::service::OpenRequest {
                    prompt: req.prompt.as_deref().unwrap_or_default(),
                    title: req.title.as_deref(),
                    session_id: req.session_id.as_deref(),
                    subject_kind: req.subject_kind.as_deref(),
                    subject_id: req.subject_id.as_deref(),
                },
            )
            .await?;
        let mut descriptor = self.descriptor(row);
        if let Some(previous) = previous {
            descriptor.notice = Some(format!(
                "This key was working in session {previous}, which is still open. Calls made with \
                 this key now go to {}: if another conversation still uses {previous}, its calls \
                 land here unless it pins its requests to its session with _meta \
                 \"io.ithaca/session_id\".",
                descriptor.session_id
            ));
            descriptor.previous_session_id = Some(previous.into());
        }
        Ok(Response::new(descriptor))
    }

    async fn begin_call(
        &self,
        request: Request<pb::BeginCallRequest>,
    ) -> Result<Response<pb::CallBegun>, Status> {
        let caller = principal::of(&request)?;
        let (session, seq, notice) =
            calls::begin(&self.service, &caller, request.into_inner()).await?;
        let mut descriptor = self.descriptor(session);
        descriptor.notice = notice;
        Ok(Response::new(pb::CallBegun {
            session: Some(descriptor),
            seq,
        }))
    }

    async fn record_reasoning(
        &self,
        request: Request<pb::RecordReasoningRequest>,
    ) -> Result<Response<pb::TraceEvent>, Status> {
        let caller = principal::of(&request)?;
        let row = self
            .service
            .record_reasoning(&caller, &request.get_ref().text)
            .await?;
        Ok(Response::new(event(row)))
    }

    async fn close_session(
        &self,
        request: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::SessionDescriptor>, Status> {
        let caller = principal::of(&request)?;
        let row = self
            .service
            .close(&caller, request.get_ref().session_id.as_deref())
            .await?;
        Ok(Response::new(self.descriptor(row)))
    }

    async fn get_current_session(
        &self,
        request: Request<pb::GetCurrentSessionRequest>,
    ) -> Result<Response<pb::SessionDescriptor>, Status> {
        let caller = principal::of(&request)?;
        let row = self.service.current(&caller).await?;
        Ok(Response::new(self.descriptor(row)))
    }

    async fn get_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<pb::SessionDescriptor>, Status> {
        let caller = principal::of(&request)?;
        let row = self
            .service
            .get(&caller, &request.get_ref().session_id)
            .await?;
        Ok(Response::new(self.descriptor(row)))
    }

    async fn get_session_record(
        &self,
        request: Request<pb::GetSessionRecordRequest>,
    ) -> Result<Response<pb::SessionRecord>, Status> {
        let caller = principal::of(&request)?;
        let (row, record) = self
            .service
            .record(&caller, &request.get_ref().session_id)
            .await?;
        let list = |v: serde_json::Value| match json::to_value(v).kind {
            Some(prost_types::value::Kind::ListValue(l)) => Some(l),
            _ => None,
        };
        Ok(Response::new(pb::SessionRecord {
            session_id: row.session_id.into(),
            tool_calls: record
                .calls
                .into_iter()
                .map(|c| pb::RecordedCall {
                    seq: c.seq,
                    name: c.name,
                    arguments: Some(json::to_struct(c.arguments)),
                    ok: c.ok,
                    summary: c.summary,
                })
                .collect(),
            proposal: record.proposal.map(|p| pb::Proposal {
                pipeline: list(p.pipeline),
                call_seq: p.call_seq,
                preview_seq: p.preview_seq,
                filter_id: p.filter_id,
            }),
            proposal_withheld: record.proposal_withheld,
        }))
    }

    async fn list_sessions(
        &self,
        request: Request<pb::ListSessionsRequest>,
    ) -> Result<Response<pb::ListSessionsResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let filter = crate::service::ListFilter {
            status: req.status.as_deref(),
            agent_id: req.agent_id.as_deref(),
            subject_kind: req.subject_kind.as_deref(),
            subject_id: req.subject_id.as_deref(),
            limit: req.limit,
            page_token: &req.page_token,
        };
        let (rows, next_page_token) = self.service.list(&caller, &filter).await?;
        let sessions = rows
            .into_iter()
            .map(|row| pb::SessionSummary {
                agent_id: row.agent_id.clone(),
                last_seq: row.last_seq,
                prompt_count: row.prompt_count,
                updated_at: clock::rfc3339(row.updated_at_ms),
                session: Some(self.descriptor(row)),
            })
            .collect();
        Ok(Response::new(pb::ListSessionsResponse {
            sessions,
            next_page_token,
        }))
    }

    async fn archive_session(
        &self,
        request: Request<pb::ArchiveSessionRequest>,
    ) -> Result<Response<pb::SessionDescriptor>, Status> {
        let caller = principal::of(&request)?;
        let row = self
            .service
            .archive(&caller, &request.get_ref().session_id)
            .await?;
        Ok(Response::new(self.descriptor(row)))
    }

    async fn list_prompts(
        &self,
        request: Request<pb::ListPromptsRequest>,
    ) -> Result<Response<pb::ListPromptsResponse>, Status> {
        let caller = principal::of(&request)?;
        let rows = self
            .service
            .prompts(&caller, &request.get_ref().session_id)
            .await?;
        Ok(Response::new(pb::ListPromptsResponse {
            prompts: rows
                .into_iter()
                .map(|p| pb::Prompt {
                    position: p.position,
                    text: p.text,
                    created_at: clock::rfc3339(p.created_at_ms),
                })
                .collect(),
        }))
    }

    async fn append_event(
        &self,
        request: Request<pb::AppendEventRequest>,
    ) -> Result<Response<pb::TraceEvent>, Status> {
        let caller = principal::of(&request)?;
        let row = calls::append(&self.service, &caller, request.into_inner()).await?;
        Ok(Response::new(event(row)))
    }

    type AppendEventsStream = crate::stream::Answers;

    async fn append_events(
        &self,
        request: Request<tonic::Streaming<pb::StreamedAppend>>,
    ) -> Result<Response<Self::AppendEventsStream>, Status> {
        // The stream's own assertion admits it; each message is appended
        // for the principal of its own.
        principal::of(&request)?;
        Ok(Response::new(crate::stream::serve(
            self.service.clone(),
            self.key.clone(),
            request.into_inner(),
        )))
    }

    async fn read_events(
        &self,
        request: Request<pb::ReadEventsRequest>,
    ) -> Result<Response<pb::ReadEventsResponse>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let (rows, last_seq) = self
            .service
            .read(
                &caller,
                &req.session_id,
                req.after_seq,
                req.limit.unwrap_or(0),
            )
            .await?;
        Ok(Response::new(pb::ReadEventsResponse {
            events: rows.into_iter().map(event).collect(),
            last_seq,
        }))
    }

    type TailEventsStream = EventStream;

    type WatchSessionStream =
        Pin<Box<dyn Stream<Item = Result<ithaca_proto::mcp::v1::ResourceChanged, Status>> + Send>>;

    async fn watch_session(
        &self,
        request: Request<pb::GetSessionRequest>,
    ) -> Result<Response<Self::WatchSessionStream>, Status> {
        let caller = principal::of(&request)?;
        let session_id = &request.get_ref().session_id;
        // Refused before the stream opens, as a read would be; then every
        // event appended after the session's last one so far.
        let row = self.service.get(&caller, session_id).await?;
        let rx = self.service.tail(&caller, session_id, row.last_seq).await?;
        let stream = ReceiverStream::new(rx).map(|item| {
            item.map(|_| ithaca_proto::mcp::v1::ResourceChanged {})
                .map_err(Status::from)
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn tail_events(
        &self,
        request: Request<pb::TailEventsRequest>,
    ) -> Result<Response<Self::TailEventsStream>, Status> {
        let caller = principal::of(&request)?;
        let req = request.get_ref();
        let rx = self
            .service
            .tail(&caller, &req.session_id, req.after_seq)
            .await?;
        let stream = ReceiverStream::new(rx).map(|item| item.map(event).map_err(Status::from));
        Ok(Response::new(Box::pin(stream)))
    }
}
