//! The two writes both faces of the service make, the unary calls
//! (`grpc.rs`) and the messages of the `AppendEvents` stream (`stream.rs`):
//! a `BeginCall` and an `AppendEvent`, protobuf in, domain call, the rows
//! out.

use crate::service::SessionService;
use crate::store::{EventRow, SessionRow};
use ithaca_kit::error::ServiceError;
use ithaca_kit::json;
use ithaca_kit::principal::Principal;
use ithaca_proto::session::v1 as pb;

/// One `BeginCall`, for `caller`: the session, the `tool_call`'s seq, and
/// the notice for the caller.
pub(crate) async fn begin(
    service: &SessionService,
    caller: &Principal,
    req: pb::BeginCallRequest,
) -> Result<(SessionRow, i64, Option<String>), ServiceError> {
    let arguments = json::object_text(&req.arguments_json, req.arguments, "arguments_json")
        .map_err(ServiceError::invalid)?;
    let (session, event) = service
        .begin_call(
            caller,
            req.session_id.as_deref(),
            &req.tool,
            arguments,
            &req.subject_kind,
        )
        .await?;
    let notice = crate::service::joined_notice(caller, req.session_id.as_deref(), &session);
    Ok((session, event.seq, notice))
}

/// One `AppendEvent`, for `caller`.
pub(crate) async fn append(
    service: &SessionService,
    caller: &Principal,
    req: pb::AppendEventRequest,
) -> Result<EventRow, ServiceError> {
    let event_type = pb::EventType::try_from(req.r#type)
        .map_err(|_| ServiceError::invalid(format!("type: unknown event type {}", req.r#type)))?;
    let payload = json::object_text(&req.payload_json, req.payload, "payload_json")
        .map_err(ServiceError::invalid)?;
    service
        .append_text(caller, &req.session_id, event_type, payload)
        .await
}
