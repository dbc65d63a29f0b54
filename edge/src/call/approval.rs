//! The generic approval gate of stage 3: an `approval_required` tool's call
//! is filed with the approvals service instead of run. The owning
//! service's check validates the call there and may attach a summary of
//! what it would do, which the approval stores for the person who decides.

use super::failure::{ToolFailure, failed, status_failure};
use super::invoke::Ran;
use super::render;
use crate::catalog::Tool;
use crate::core::{Core, RpcError};
use crate::stream::{self, AskError, CallIo, Streamed};
use crate::transcode;
use ithaca_kit::error::DomainCode;
use ithaca_kit::json;
use ithaca_kit::principal::Principal;
use ithaca_proto::approvals::v1 as apb;
use ithaca_proto::approvals::v1::approvals_service_client::ApprovalsServiceClient;
use ithaca_proto::service_names::APPROVALS;
use prost::Message;
use prost_reflect::DynamicMessage;
use serde_json::{Value, json};
use tonic::Request;

/// How long filing an approval may take: the approvals service asks the
/// owning service to check the call first (and runs a person's own call).
const APPROVAL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

impl Core {
    /// File the call with the approvals service instead of running it: an
    /// agent's call comes back pending; a person's own call has run there,
    /// and its response is rendered like any other. A person whose client
    /// can elicit is asked to confirm first (the approvals service says so
    /// with `input_required`, answered as a streaming tool's is); a call
    /// they did not confirm comes back `not_confirmed`, with nothing run.
    pub(super) async fn through_approval(
        &self,
        tool: &Tool,
        principal: &Principal,
        arguments: Option<&Value>,
        traced: &Value,
        io: &CallIo<'_>,
        mut round: stream::Round,
    ) -> Ran {
        let request = match transcode::to_message(&tool.method.input(), arguments) {
            Ok(request) => request.encode_to_vec(),
            Err(e) => {
                return Ran::Done(Err(failed(DomainCode::InvalidArgument, &e.message, false)));
            }
        };
        let Some(approvals) = self.routes.get(APPROVALS) else {
            return Ran::Done(Err(failed(
                DomainCode::ServiceUnavailable,
                &format!(
                    "{} needs a person's approval, and no approvals service is configured",
                    tool.name
                ),
                true,
            )));
        };
        let target = format!("tool:{}", tool.name);
        let mut client_caps = io.client;
        for _ in 0..stream::MAX_ROUNDS {
            let mut client = ApprovalsServiceClient::new(approvals.channel());
            let mut call = Request::new(apb::RequestApprovalRequest {
                tool: tool.name.clone(),
                service: tool.method.parent_service().full_name().to_owned(),
                method: tool.method.name().to_owned(),
                arguments: Some(json::to_struct(traced.clone())),
                request: request.clone(),
                destructive: tool.options.destructive,
                open_world: tool.options.open_world,
                context: Some(stream::context(client_caps, round.responses, round.state)),
            });
            // The approvals service checks with the owning service first.
            let deadline = tool.deadline().unwrap_or_default().max(APPROVAL_DEADLINE);
            call.set_timeout(deadline);
            self.key.sign(&mut call, principal);
            let mut filed = match approvals
                .typed(APPROVALS, Some(deadline), client.request_approval(call))
                .await
            {
                Ok(filed) => filed,
                Err(status) => return Ran::Done(Err(status_failure(&status))),
            };
            let Some(input) = filed.input_required.take() else {
                return Ran::Done(render_filed(tool, filed));
            };
            if !io.asks_inline {
                // 2026-07-28: the client answers and retries.
                return match stream::next_round(io, &self.sealer, principal, &target, input).await {
                    Err(Streamed::Input(input)) => Ran::Input(input),
                    Err(Streamed::MissingCapability(capability)) => {
                        Ran::Refused(RpcError::missing_capability(capability))
                    }
                    Err(Streamed::Done(Err(status))) => Ran::Done(Err(status_failure(&status))),
                    Ok(_) | Err(Streamed::Done(Ok(_))) => Ran::Done(Err(failed(
                        DomainCode::Internal,
                        "confirming the call failed",
                        false,
                    ))),
                };
            }
            match stream::ask_inline(io.sink, stream::requests_json(&input)).await {
                Ok(responses) => {
                    round = stream::Round {
                        responses,
                        state: input.state,
                    };
                }
                // A legacy HTTP client is assumed to elicit (its
                // capabilities stayed in an `initialize` the edge did not
                // keep); one that answers the question with an error
                // cannot, so the call is filed again as from a client
                // without elicitation: today's flow.
                Err(AskError::Refused { .. } | AskError::Unsupported) => {
                    client_caps.elicitation = false;
                    round = stream::Round::default();
                }
                Err(error) => {
                    return Ran::Done(Err(failed(
                        DomainCode::FailedPrecondition,
                        &error.to_string(),
                        false,
                    )));
                }
            }
        }
        Ran::Done(Err(failed(
            DomainCode::Internal,
            "the approvals service asked for confirmation too many times",
            false,
        )))
    }
}

/// What filing a call with the approvals service answered, as the tool's
/// result.
fn render_filed(tool: &Tool, filed: apb::ApprovalRequested) -> Result<Value, ToolFailure> {
    if !filed.not_confirmed.is_empty() {
        let body = json!({
            "status": "not_confirmed",
            "tool": tool.name,
            "action": filed.not_confirmed,
            "message": "You did not confirm this call, so it did not run and nothing changed. \
                        Call the tool again to be asked again.",
        });
        return Ok(json!({
            "content": [{"type": "text", "text": body.to_string()}],
            "structuredContent": body,
            "isError": false,
        }));
    }
    let approval = filed.approval.unwrap_or_default();
    match approval.status.as_str() {
        "pending" => {
            let body = json!({
                "status": "pending_approval",
                "approval_id": approval.approval_id,
                "tool": tool.name,
                "message": "A person must approve this call before it runs. Poll get_approval \
                            with this approval_id; do not call the tool again.",
            });
            Ok(json!({
                "content": [{"type": "text", "text": body.to_string()}],
                "structuredContent": body,
                "isError": false,
            }))
        }
        "executed" => {
            let response = DynamicMessage::decode(tool.method.output(), filed.response.as_slice())
                .map_err(|e| {
                    failed(
                        DomainCode::Internal,
                        &format!("decoding the response: {e}"),
                        false,
                    )
                })?;
            Ok(render::tool_result(&response))
        }
        _ => {
            let result = approval
                .result
                .map(json::from_struct)
                .unwrap_or(Value::Null);
            Err(ToolFailure::new(
                result["error"]
                    .as_str()
                    .unwrap_or(DomainCode::Internal.as_str()),
                result["message"]
                    .as_str()
                    .unwrap_or("the approved call failed"),
                false,
            ))
        }
    }
}
