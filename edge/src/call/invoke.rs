//! Stage 3, invoke: the call itself, a unary gRPC hop or a streaming RPC's
//! input rounds, or, for an `approval_required` tool, filing it with the
//! approvals service (`approval.rs`).
//!
//! A client that gives up on the call (cancels it, or leaves) drops the
//! backend hop, which cancels the gRPC call, so the service stops its work
//! too; the trace still records the call's end, as CANCELLED.

use super::failure::{ToolFailure, failed, status_failure};
use super::render;
use crate::catalog::Tool;
use crate::core::{Answer, Core, RpcError};
use crate::stream::{self, CallIo, Rounds, Streamed, Terminal};
use crate::transcode;
use ithaca_kit::error::DomainCode;
use ithaca_kit::principal::Principal;
use serde_json::{Value, json};

/// What running a call came to.
pub enum Ran {
    Done(Result<Value, ToolFailure>),
    /// A 2026-07-28 client must answer these requests and call again.
    Input(Value),
    /// The call needs a client capability the request did not declare.
    Refused(RpcError),
}

/// What the trace records of a run, and what the caller hears when that is
/// not the plain outcome: a call waiting for input is recorded as such, a
/// refused one as its error.
pub struct Outcome {
    pub recorded: Result<Value, ToolFailure>,
    pub reply: Option<Result<Answer, RpcError>>,
}

impl Ran {
    pub fn outcome(self) -> Outcome {
        match self {
            Ran::Done(recorded) => Outcome {
                recorded,
                reply: None,
            },
            Ran::Input(input) => Outcome {
                recorded: Ok(json!({"content": [{
                    "type": "text",
                    "text": "input_required: waiting for the client's answers",
                }]})),
                reply: Some(Ok(Answer::InputRequired(input))),
            },
            Ran::Refused(error) => Outcome {
                recorded: Err(failed(DomainCode::CapabilityMissing, &error.message, false)),
                reply: Some(Err(error)),
            },
        }
    }
}

impl Core {
    /// A retry's sealed state, checked before anything runs. (A call filed
    /// for approval may be asked to confirm, so its retries carry state
    /// too.)
    pub(super) fn open_round(
        &self,
        tool: &Tool,
        caller: &Principal,
        io: &CallIo<'_>,
    ) -> Result<stream::Round, RpcError> {
        if !tool.streaming && !tool.options.approval_required {
            return Ok(stream::Round::default());
        }
        stream::open_retry(
            &self.sealer,
            caller,
            &format!("tool:{}", tool.name),
            &io.retry,
        )
        .map_err(|e| RpcError::invalid_params(e, Some(json!({"tool": tool.name}))))
    }

    /// Run the call, through a person's approval when the tool needs one,
    /// until it ends or its client gives up on it.
    ///
    /// The paths few calls take (the approval, a streaming tool's rounds,
    /// a session service without the append stream, orphans to report)
    /// are boxed where they are awaited. A future is as large as the
    /// largest future it may await, and each is copied whole when it is
    /// created and moved into its caller's, so before they were boxed a
    /// unary call's futures were 6–10 KB at every level of this pipeline
    /// and `memmove` was 7 % of the edge's CPU at peak (`perf record
    /// --call-graph dwarf`, docs/perf/edge-rebuild.md, stop 50).
    pub(super) async fn run(
        &self,
        tool: &Tool,
        principal: &Principal,
        arguments: Option<&Value>,
        traced: &Value,
        io: &CallIo<'_>,
        round: stream::Round,
    ) -> Ran {
        let run = async {
            if tool.options.approval_required {
                Box::pin(self.through_approval(tool, principal, arguments, traced, io, round)).await
            } else {
                self.invoke(tool, principal, arguments, io, round).await
            }
        };
        tokio::select! {
            ran = run => ran,
            () = io.cancelled.cancelled() => Ran::Done(Err(failed(
                DomainCode::Cancelled,
                "the client cancelled the call before it finished",
                false,
            ))),
        }
    }

    /// Transcode, call the backend (once, or a streaming RPC for as many
    /// rounds as it takes), render the result.
    async fn invoke(
        &self,
        tool: &Tool,
        principal: &Principal,
        arguments: Option<&Value>,
        io: &CallIo<'_>,
        round: stream::Round,
    ) -> Ran {
        let request = match transcode::to_message(&tool.method.input(), arguments) {
            Ok(request) => request,
            Err(e) => {
                return Ran::Done(Err(failed(DomainCode::InvalidArgument, &e.message, false)));
            }
        };
        let backend = match self.backend(&tool.method) {
            Ok(backend) => backend,
            Err(status) => return Ran::Done(Err(status_failure(&status))),
        };
        if !tool.streaming {
            let response = backend
                .unary_within(&tool.method, request, principal, &self.key, tool.deadline())
                .await;
            return Ran::Done(
                response
                    .map(|r| render::tool_result(&r))
                    .map_err(|s| status_failure(&s)),
            );
        }
        let target = format!("tool:{}", tool.name);
        let rounds = Rounds {
            backend,
            method: &tool.method,
            target: &target,
            principal,
            key: &self.key,
            sealer: &self.sealer,
            deadline: tool.deadline(),
            io,
        };
        match Box::pin(rounds.run(request, round)).await {
            Streamed::Done(Ok(Terminal::Result(content))) => {
                Ran::Done(Ok(render::content(content)))
            }
            Streamed::Done(Ok(Terminal::Reply(bytes))) => Ran::Done(render::reply(tool, &bytes)),
            Streamed::Done(Ok(_)) => Ran::Done(Err(failed(
                DomainCode::Internal,
                "the service answered a tool call with a prompt",
                false,
            ))),
            Streamed::Done(Err(status)) => Ran::Done(Err(status_failure(&status))),
            Streamed::Input(input) => Ran::Input(input),
            Streamed::MissingCapability(capability) => {
                Ran::Refused(RpcError::missing_capability(capability))
            }
        }
    }
}
