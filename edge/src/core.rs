//! What the edge does for a request once the protocol layer has parsed it:
//! tool calls (gate, trace, transcoding, the backend hop, error mapping),
//! resource reads and prompts. Nothing here knows about HTTP or stdio.

use crate::backend::Backend;
use crate::catalog::{self, Catalog, Resource, Tool};
use crate::stream::{self, AskError, CallIo, Rounds, StateSealer, Streamed, Terminal};
use crate::transcode;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ithaca_kit::error::{DomainCode, domain, domain_code};
use ithaca_kit::json;
use ithaca_kit::principal::{Actor, InternalKey, Principal, Subject};
use ithaca_proto::approvals::v1 as apb;
use ithaca_proto::approvals::v1::approvals_service_client::ApprovalsServiceClient;
use ithaca_proto::mcp::v1 as mcp;
use ithaca_proto::mcp::v1::content::Kind as ContentKind;
use ithaca_proto::service_names::{APPROVALS, SESSION};
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use prost::Message;
use prost_reflect::{DynamicMessage, MethodDescriptor, ReflectMessage};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::Instant;
use tonic::{Code, Request, Status};

/// The request `_meta` key that pins a call to one session (by id) instead
/// of the key's current session: for a platform running two conversations
/// on one key.
pub const SESSION_PIN_META: &str = "io.ithaca/session_id";

/// The message agents get when they skip `session_context`.
pub use ithaca_proto::NO_ACTIVE_SESSION_MESSAGE as NO_SESSION_MESSAGE;

/// How long filing an approval may take: the approvals service asks the
/// owning service to check the call first (and runs a person's own call).
const APPROVAL_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// How many lost results the edge remembers to report.
const MAX_ORPHANS: usize = 1024;

/// The deadline of one watch stream (`watch.proto`). A subscription
/// outlives it: the edge opens the watch again when it ends.
pub const WATCH_SPAN: std::time::Duration = std::time::Duration::from_secs(3600);

/// A call whose `tool_result` could not be recorded.
#[derive(Clone, Debug)]
struct Orphan {
    principal: Principal,
    session_id: String,
    call_seq: i64,
    tool: String,
}

/// The `CallToolResult` of an outcome.
fn finish(outcome: Result<Value, ToolFailure>) -> Value {
    match outcome {
        Ok(result) => result,
        Err(failure) => failure.to_result(),
    }
}

/// The `_meta` key of a result recorded in a session its caller joined
/// but did not open: `{"session_id", "notice"}`.
pub const SESSION_NOTICE_META: &str = "io.ithaca/session";

/// A result with the session service's notice: in `_meta` for programs, and
/// as a second text block for the model reading the answer (the first block
/// and `structuredContent` stay the tool's own, so the output schema still
/// holds).
fn with_session_notice(mut result: Value, session_id: &str, notice: &str) -> Value {
    if let Some(content) = result["content"].as_array_mut() {
        content.push(json!({"type": "text", "text": notice}));
    }
    if !result["_meta"].is_object() {
        result["_meta"] = json!({});
    }
    result["_meta"][SESSION_NOTICE_META] = json!({"session_id": session_id, "notice": notice});
    result
}

/// A line saying how a call went, for the trace (and the record of an
/// answer): the error's code and message, or the start of the result text.
fn summary(outcome: &Result<Value, ToolFailure>) -> String {
    const MAX: usize = 200;
    let text = match outcome {
        Err(failure) => format!("{}: {}", failure.code, failure.message),
        Ok(result) => result["content"][0]["text"]
            .as_str()
            .map_or_else(|| "ok".to_owned(), str::to_owned),
    };
    if text.chars().count() <= MAX {
        text
    } else {
        let cut: String = text.chars().take(MAX).collect();
        format!("{cut}…")
    }
}

/// Every JSON-RPC error code the edge answers with, by name: the ones the
/// HTTP front gives itself and the ones a call's handling gives.
pub mod codes {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const METHOD_NOT_FOUND: i32 = -32601;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
    /// 2026-07-28's MissingRequiredClientCapability.
    pub const MISSING_CAPABILITY: i32 = -32021;
    /// 2026-07-28's UnsupportedProtocolVersion.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i32 = -32022;
}

/// A JSON-RPC level failure (not a tool result).
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i32,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub const INVALID_PARAMS: i32 = codes::INVALID_PARAMS;
    pub const INTERNAL: i32 = codes::INTERNAL_ERROR;
    pub const MISSING_CAPABILITY: i32 = codes::MISSING_CAPABILITY;

    /// A call needs a client capability the request did not declare.
    pub fn missing_capability(capability: &str) -> Self {
        RpcError {
            code: Self::MISSING_CAPABILITY,
            message: format!(
                "this call needs the client's {capability} capability, which the request did not declare"
            ),
            data: Some(json!({"requiredCapabilities": {capability: {}}})),
        }
    }

    pub fn invalid_params(message: impl Into<String>, data: Option<Value>) -> Self {
        RpcError {
            code: Self::INVALID_PARAMS,
            message: message.into(),
            data,
        }
    }
}

/// How a tool call or a prompt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The result (`CallToolResult` or `GetPromptResult` JSON).
    Complete(Value),
    /// A 2026-07-28 client must answer these requests and call again: the
    /// `InputRequiredResult` JSON.
    InputRequired(Value),
}

/// What step 5 of a tool call came to.
enum Ran {
    Done(Result<Value, ToolFailure>),
    Input(Value),
    Refused(RpcError),
}

/// The edge's view of the backends.
pub struct Core {
    pub catalog: Catalog,
    /// Backend of each gRPC service, by fully qualified service name.
    routes: HashMap<String, Backend>,
    key: InternalKey,
    /// The session service, when there is one: it gates tools and keeps
    /// their trace. Without it (a bare fixture backend) tools run ungated.
    session: Option<Backend>,
    /// Calls whose result could not be recorded, to report when it can.
    orphans: std::sync::Mutex<Vec<Orphan>>,
    /// Seals the state a 2026-07-28 client carries between input rounds.
    sealer: StateSealer,
}

impl Core {
    pub fn new(catalog: Catalog, routes: HashMap<String, Backend>, key: InternalKey) -> Self {
        let session = routes.get(ithaca_proto::service_names::SESSION).cloned();
        let sealer = StateSealer::new(&key);
        Core {
            catalog,
            routes,
            key,
            session,
            orphans: std::sync::Mutex::new(Vec::new()),
            sealer,
        }
    }

    /// Every backend, deduplicated by URL, for readiness checks.
    pub fn backends(&self) -> Vec<Backend> {
        let mut seen = Vec::<Backend>::new();
        for b in self.routes.values() {
            if !seen.iter().any(|s| s.url == b.url) {
                seen.push(b.clone());
            }
        }
        seen
    }

    /// Whether `caller` may use `tool` at all: its scopes and, for
    /// human-only tools, its actor. The session subject is checked after the
    /// gate, once the caller's session is known ([`Core::offered`]).
    fn permitted(&self, caller: &Principal, tool: &Tool) -> bool {
        let scoped =
            caller.actor() == Actor::System || tool.scopes().iter().all(|s| caller.has_scope(s));
        let human_ok = !tool.options.human_only || caller.actor() != Actor::Agent;
        scoped && human_ok
    }

    /// Whether `caller` (with its session's subject, if any) is offered
    /// `tool`: permitted, and a subject-scoped write tool only inside a
    /// session opened on an object of its kind (DESIGN §5). The owning
    /// service checks the object itself.
    pub fn offered(&self, caller: &Principal, tool: &Tool) -> bool {
        self.permitted(caller, tool) && subject_fits(caller, tool)
    }

    /// The tools `caller` is offered; `caller` should carry its session's
    /// subject ([`Core::with_current_session`]).
    pub fn tools_for<'a>(&'a self, caller: &'a Principal) -> impl Iterator<Item = &'a Tool> + 'a {
        self.catalog
            .tools
            .iter()
            .filter(move |t| self.offered(caller, t))
    }

    /// Whether any tool `caller` is permitted is scoped to a subject, so that
    /// listing depends on its current session.
    pub fn lists_depend_on_session(&self, caller: &Principal) -> bool {
        self.catalog
            .tools
            .iter()
            .any(|t| !t.options.subject_kind.is_empty() && self.permitted(caller, t))
    }

    /// `caller` in its current session (or the one `pin` names), with that
    /// session's subject, when the tool list depends on it; otherwise (or
    /// with no open session) `caller` unchanged.
    pub async fn with_current_session(&self, caller: &Principal, pin: Option<&str>) -> Principal {
        if caller.session_id().is_some() || !self.lists_depend_on_session(caller) {
            return caller.clone();
        }
        let Some(session) = &self.session else {
            return caller.clone();
        };
        match self.gate(session, caller, pin).await {
            Ok(gate) => gate.apply(caller),
            Err(_) => caller.clone(),
        }
    }

    /// The session gate and the `tool_call` append in one call of the
    /// session service: the session (with its subject) and the call's seq.
    async fn begin(
        &self,
        session: &Backend,
        caller: &Principal,
        pin: Option<&str>,
        tool: &Tool,
        arguments: &Value,
    ) -> Result<(Gate, i64), Status> {
        let mut client = SessionServiceClient::new(session.channel());
        let mut request = Request::new(spb::BeginCallRequest {
            session_id: pin.map(str::to_owned),
            tool: tool.name.clone(),
            arguments: Some(json::to_struct(arguments.clone())),
            subject_kind: tool.options.subject_kind.clone(),
        });
        request.set_timeout(session.timeout());
        self.key.sign(&mut request, caller);
        let begun = session
            .typed(SESSION, None, client.begin_call(request))
            .await?;
        let descriptor = begun.session.unwrap_or_default();
        Ok((Gate::from_descriptor(descriptor), begun.seq))
    }

    /// The session a call runs in: the one `pin` names (a request's `_meta`
    /// [`SESSION_PIN_META`], which must be an open session of the caller's
    /// tenant), or the caller's current one.
    async fn gate(
        &self,
        session: &Backend,
        caller: &Principal,
        pin: Option<&str>,
    ) -> Result<Gate, ToolFailure> {
        let Some(pin) = pin else {
            return self.current_session(session, caller).await;
        };
        let mut client = SessionServiceClient::new(session.channel());
        let mut request = Request::new(spb::GetSessionRequest {
            session_id: pin.to_owned(),
        });
        request.set_timeout(session.timeout());
        self.key.sign(&mut request, caller);
        match session
            .typed(SESSION, None, client.get_session(request))
            .await
        {
            Ok(reply) => {
                if reply.status != "open" {
                    return Err(ToolFailure::new(
                        "no_active_session",
                        &format!(
                            "{SESSION_PIN_META}: session {pin} is {}; open or resume a session with session_context",
                            reply.status
                        ),
                        false,
                    ));
                }
                Ok(Gate::from_descriptor(reply))
            }
            Err(status) if matches!(status.code(), Code::NotFound | Code::InvalidArgument) => {
                Err(ToolFailure::new(
                    "no_active_session",
                    &format!("{SESSION_PIN_META}: no open session {pin} in this tenant"),
                    false,
                ))
            }
            Err(status) => Err(status_failure(&status)),
        }
    }

    fn backend(&self, method: &MethodDescriptor) -> Result<&Backend, Status> {
        let service = method.parent_service();
        self.routes.get(service.full_name()).ok_or_else(|| {
            Status::unavailable(format!("no backend serves {}", service.full_name()))
        })
    }

    /// Run one tool call: its `CallToolResult` JSON, or the input a
    /// 2026-07-28 client must give first. `io` is how the call reaches its
    /// client while it runs (progress, logs, input requests).
    pub async fn call_tool(
        &self,
        caller: &Principal,
        pin: Option<&str>,
        name: &str,
        arguments: Option<Value>,
        io: &CallIo<'_>,
    ) -> Result<Answer, RpcError> {
        // 1. The tool exists and the caller's key may use it. A tool it may
        //    not use looks exactly like a missing one.
        let unknown = || {
            RpcError::invalid_params(format!("unknown tool: {name}"), Some(json!({"tool": name})))
        };
        let Some(tool) = self
            .catalog
            .tool(name)
            .filter(|t| self.permitted(caller, t))
        else {
            return Err(unknown());
        };
        // A retry's sealed state is checked before anything runs.
        // (A call filed for approval may be asked to confirm, so its
        // retries carry state too.)
        let round = if tool.streaming || tool.options.approval_required {
            stream::open_retry(&self.sealer, caller, &format!("tool:{name}"), &io.retry)
                .map_err(|e| RpcError::invalid_params(e, Some(json!({"tool": name}))))?
        } else {
            stream::Round::default()
        };
        let started = Instant::now();
        let mut principal = caller.clone();
        let arguments_seen = transcode::traceable(arguments.clone().unwrap_or(json!({})));

        // 2. The session gate and the durable `tool_call`, in one round
        //    trip: every tool but session_context runs inside the caller's
        //    open session (or the one the request pins), with that session's
        //    subject; a subject-scoped write tool outside a session on its
        //    kind of object is refused (and traced as a denial there).
        let mut call_seq = None;
        let mut notice = None;
        if !tool.options.session_exempt
            && let Some(session) = &self.session
        {
            match self
                .begin(session, caller, pin, tool, &arguments_seen)
                .await
            {
                Ok((gate, seq)) => {
                    principal = gate.apply(&principal);
                    call_seq = Some(seq);
                    notice = gate.notice;
                }
                // Not offered here, but not hidden either: the tool error
                // says how to get to it (a person opens a session on the
                // object, the agent joins it).
                Err(status) if domain(&status) == Some(DomainCode::SubjectRequired) => {
                    return Ok(Answer::Complete(status_failure(&status).to_result()));
                }
                // A person may close an agent's session without one of
                // their own; the call is then recorded in no session.
                Err(status)
                    if domain(&status) == Some(DomainCode::NoActiveSession)
                        && tool.options.human_session_exempt
                        && caller.actor() == Actor::Human
                        && pin.is_none() => {}
                Err(status) => return Ok(Answer::Complete(status_failure(&status).to_result())),
            }
        }
        // Without a session service (a protocol fixture) nothing is scoped.
        if self.session.is_none() && !subject_fits(&principal, tool) {
            return Err(unknown());
        }
        // A result an earlier call could not record is reported now.
        if let Some(session_id) = principal.session_id().map(str::to_owned) {
            self.report_orphans(&session_id).await;
        }

        // 5. Run it: through a person's approval when the tool needs one.
        //    A client that gives up on the call (cancels it, or leaves)
        //    drops the backend hop, which cancels the gRPC call, so the
        //    service stops its work too; the trace still records the call's
        //    end, as CANCELLED.
        let run = async {
            if tool.options.approval_required {
                self.through_approval(tool, &principal, arguments, &arguments_seen, io, round)
                    .await
            } else {
                self.invoke(tool, &principal, arguments, io, round).await
            }
        };
        let ran = tokio::select! {
            ran = run => ran,
            () = io.cancelled.cancelled() => Ran::Done(Err(ToolFailure::new(
                DomainCode::Cancelled.as_str(),
                "the client cancelled the call before it finished",
                false,
            ))),
        };
        // What the trace records, and what the caller hears when that is
        // not the plain outcome: a call waiting for input is recorded as
        // such, a refused one as its error.
        let (outcome, reply) = match ran {
            Ran::Done(outcome) => (outcome, None),
            Ran::Input(input) => (
                Ok(
                    json!({"content": [{"type": "text", "text": "input_required: waiting for the client's answers"}]}),
                ),
                Some(Ok(Answer::InputRequired(input))),
            ),
            Ran::Refused(error) => (
                Err(ToolFailure::new(
                    DomainCode::CapabilityMissing.as_str(),
                    &error.message,
                    false,
                )),
                Some(Err(error)),
            ),
        };
        let answer = move |outcome: Result<Value, ToolFailure>| {
            reply.unwrap_or_else(|| Ok(Answer::Complete(finish(outcome))))
        };

        // 6. session_context opened (or joined) a session: record the call
        //    in it now.
        let session_id = match (principal.session_id(), &outcome) {
            (Some(id), _) => Some(id.to_owned()),
            (None, Ok(result)) if tool.options.session_exempt => {
                result["structuredContent"]["session_id"]
                    .as_str()
                    .map(str::to_owned)
            }
            _ => None,
        };
        let (Some(session_id), Some(_)) = (session_id, &self.session) else {
            return answer(outcome);
        };
        principal = principal.in_session(Some(session_id.clone()));
        if tool.options.session_exempt {
            let payload = json!({"name": name, "arguments": arguments_seen});
            if let Ok(event) = self
                .append(&principal, &session_id, spb::EventType::ToolCall, payload)
                .await
            {
                call_seq = Some(event.seq);
            }
        }

        // 7. The result is durable before the caller hears it; a failure is
        //    also an `error` event (a `denial` when a rule refused it).
        let payload = json!({
            "name": name,
            "call_seq": call_seq,
            "outcome": if outcome.is_ok() { "ok" } else { "error" },
            "summary": summary(&outcome),
            "duration_ms": started.elapsed().as_millis() as u64,
            "provenance": {
                "service": tool.method.parent_service().full_name(),
                "method": tool.method.name(),
                "trace_id": ithaca_kit::propagation::current_trace_id(),
            },
            "error": outcome.as_ref().err().map_or(Value::Null, |f| json!(f.code)),
        });
        if let Err(status) = self
            .append(&principal, &session_id, spb::EventType::ToolResult, payload)
            .await
        {
            tracing::warn!(error = %status.message(), tool = name, "recording tool_result failed");
            if let Some(seq) = call_seq {
                self.remember_orphan(&principal, &session_id, seq, name);
            }
            return Ok(Answer::Complete(
                ToolFailure::new(
                    DomainCode::TraceUnavailable.as_str(),
                    "the call's result could not be recorded in the session's trace; the trace \
                     will say so, and the call may be retried",
                    true,
                )
                .to_result(),
            ));
        }
        // A refusal its service already recorded (the approvals service's
        // policy denial) gets no second event, only the `tool_result`.
        if let Err(failure) = &outcome
            && !failure.traced
        {
            let kind = if DomainCode::parse(&failure.code).is_some_and(|c| c.mcp().denial) {
                spb::EventType::Denial
            } else {
                spb::EventType::Error
            };
            let payload = json!({
                "tool": name,
                "call_seq": call_seq,
                "error": failure.code,
                "message": failure.message,
                "retryable": failure.retryable,
            });
            if let Err(status) = self.append(&principal, &session_id, kind, payload).await {
                tracing::warn!(error = %status.message(), tool = name, "recording a failure failed");
            }
        }
        match (answer(outcome), notice) {
            (Ok(Answer::Complete(result)), Some(notice)) => Ok(Answer::Complete(
                with_session_notice(result, &session_id, &notice),
            )),
            (answered, _) => answered,
        }
    }

    /// Remember a call whose result could not be recorded, to report it in
    /// its session's trace at the next chance (bounded; oldest dropped).
    fn remember_orphan(&self, principal: &Principal, session_id: &str, call_seq: i64, tool: &str) {
        let mut orphans = self.orphans.lock().unwrap_or_else(|e| e.into_inner());
        if orphans.len() >= MAX_ORPHANS {
            orphans.remove(0);
        }
        orphans.push(Orphan {
            principal: principal.clone(),
            session_id: session_id.to_owned(),
            call_seq,
            tool: tool.to_owned(),
        });
    }

    /// Record an `error` event for each remembered call of `session_id`
    /// whose result was lost; keep those that still cannot be recorded.
    async fn report_orphans(&self, session_id: &str) {
        let mine: Vec<Orphan> = {
            let mut orphans = self.orphans.lock().unwrap_or_else(|e| e.into_inner());
            if orphans.is_empty() {
                return;
            }
            let (mine, rest) = orphans.drain(..).partition(|o| o.session_id == session_id);
            *orphans = rest;
            mine
        };
        for orphan in mine {
            let payload = json!({
                "tool": orphan.tool,
                "call_seq": orphan.call_seq,
                "error": DomainCode::ResultNotRecorded.as_str(),
                "message": "this call ran, but its result could not be recorded when it finished",
            });
            if self
                .append(
                    &orphan.principal,
                    session_id,
                    spb::EventType::Error,
                    payload,
                )
                .await
                .is_err()
            {
                let mut orphans = self.orphans.lock().unwrap_or_else(|e| e.into_inner());
                orphans.push(orphan);
            }
        }
    }

    /// Transcode, call the backend (once, or a streaming RPC for as many
    /// rounds as it takes), render the result.
    async fn invoke(
        &self,
        tool: &Tool,
        principal: &Principal,
        arguments: Option<Value>,
        io: &CallIo<'_>,
        round: stream::Round,
    ) -> Ran {
        let request = match transcode::to_message(&tool.method.input(), arguments) {
            Ok(request) => request,
            Err(e) => {
                return Ran::Done(Err(ToolFailure::new(
                    DomainCode::InvalidArgument.as_str(),
                    &e.message,
                    false,
                )));
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
                    .map(|r| render_tool_result(&r))
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
        match rounds.run(request, round).await {
            Streamed::Done(Ok(Terminal::Result(content))) => Ran::Done(Ok(render_content(content))),
            Streamed::Done(Ok(Terminal::Reply(bytes))) => Ran::Done(render_reply(tool, &bytes)),
            Streamed::Done(Ok(_)) => Ran::Done(Err(ToolFailure::new(
                DomainCode::Internal.as_str(),
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

    /// File the call with the approvals service instead of running it: an
    /// agent's call comes back pending; a person's own call has run there,
    /// and its response is rendered like any other. A person whose client
    /// can elicit is asked to confirm first (the approvals service says so
    /// with `input_required`, answered as a streaming tool's is); a call
    /// they did not confirm comes back `not_confirmed`, with nothing run.
    async fn through_approval(
        &self,
        tool: &Tool,
        principal: &Principal,
        arguments: Option<Value>,
        arguments_seen: &Value,
        io: &CallIo<'_>,
        mut round: stream::Round,
    ) -> Ran {
        let request = match transcode::to_message(&tool.method.input(), arguments) {
            Ok(request) => request.encode_to_vec(),
            Err(e) => {
                return Ran::Done(Err(ToolFailure::new(
                    DomainCode::InvalidArgument.as_str(),
                    &e.message,
                    false,
                )));
            }
        };
        let Some(approvals) = self.routes.get(APPROVALS) else {
            return Ran::Done(Err(ToolFailure::new(
                DomainCode::ServiceUnavailable.as_str(),
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
                arguments: Some(json::to_struct(arguments_seen.clone())),
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
                return Ran::Done(Self::render_filed(tool, filed));
            };
            if !io.asks_inline {
                // 2026-07-28: the client answers and retries.
                return match stream::next_round(io, &self.sealer, principal, &target, input).await {
                    Err(Streamed::Input(input)) => Ran::Input(input),
                    Err(Streamed::MissingCapability(capability)) => {
                        Ran::Refused(RpcError::missing_capability(capability))
                    }
                    Err(Streamed::Done(Err(status))) => Ran::Done(Err(status_failure(&status))),
                    Ok(_) | Err(Streamed::Done(Ok(_))) => Ran::Done(Err(ToolFailure::new(
                        DomainCode::Internal.as_str(),
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
                    return Ran::Done(Err(ToolFailure::new(
                        DomainCode::FailedPrecondition.as_str(),
                        &error.to_string(),
                        false,
                    )));
                }
            }
        }
        Ran::Done(Err(ToolFailure::new(
            DomainCode::Internal.as_str(),
            "the approvals service asked for confirmation too many times",
            false,
        )))
    }

    /// What filing a call with the approvals service answered, as the
    /// tool's result.
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
                let response =
                    DynamicMessage::decode(tool.method.output(), filed.response.as_slice())
                        .map_err(|e| {
                            ToolFailure::new(
                                DomainCode::Internal.as_str(),
                                &format!("decoding the response: {e}"),
                                false,
                            )
                        })?;
                Ok(render_tool_result(&response))
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

    async fn current_session(
        &self,
        session: &Backend,
        caller: &Principal,
    ) -> Result<Gate, ToolFailure> {
        let mut client = SessionServiceClient::new(session.channel());
        let mut request = Request::new(spb::GetCurrentSessionRequest {});
        request.set_timeout(session.timeout());
        self.key.sign(&mut request, caller);
        match session
            .typed(SESSION, None, client.get_current_session(request))
            .await
        {
            Ok(reply) => Ok(Gate::from_descriptor(reply)),
            Err(status) if domain(&status) == Some(DomainCode::NoActiveSession) => {
                Err(no_session())
            }
            Err(status) => Err(status_failure(&status)),
        }
    }

    /// Append one event to a session's trace on behalf of `principal`.
    pub async fn append(
        &self,
        principal: &Principal,
        session_id: &str,
        kind: spb::EventType,
        payload: Value,
    ) -> Result<spb::TraceEvent, Status> {
        let Some(session) = &self.session else {
            return Err(Status::unavailable("no session service"));
        };
        let mut client = SessionServiceClient::new(session.channel());
        let mut request = Request::new(spb::AppendEventRequest {
            session_id: session_id.to_owned(),
            r#type: kind as i32,
            payload: Some(json::to_struct(payload)),
        });
        request.set_timeout(session.timeout());
        self.key.sign(&mut request, principal);
        session
            .typed(SESSION, None, client.append_event(request))
            .await
    }

    /// A client of the session service (the SSE stream uses it); sign each
    /// request with [`Core::sign`].
    pub fn session_client(&self) -> Option<SessionServiceClient<tonic::transport::Channel>> {
        self.session
            .as_ref()
            .map(|s| SessionServiceClient::new(s.channel()))
    }

    /// Sign a request for `principal`.
    pub fn sign<T>(&self, request: &mut Request<T>, principal: &Principal) {
        self.key.sign(request, principal);
    }

    /// Read a resource: the `ReadResourceResult` JSON.
    pub async fn read_resource(&self, caller: &Principal, uri: &str) -> Result<Value, RpcError> {
        let not_found = || {
            RpcError::invalid_params(
                format!("resource not found: {uri}"),
                Some(json!({"uri": uri})),
            )
        };
        let Some((resource, vars)) = self.catalog.resource(uri) else {
            return Err(not_found());
        };
        if !resource.scopes().iter().all(|s| caller.has_scope(s)) && caller.actor() != Actor::System
        {
            return Err(not_found());
        }
        let args: serde_json::Map<String, Value> = vars
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        let request = transcode::to_message(&resource.method.input(), Some(Value::Object(args)))
            .map_err(|e| RpcError::invalid_params(e.message, Some(json!({"uri": uri}))))?;
        let backend = self.backend(&resource.method).map_err(|s| internal(&s))?;
        match backend
            .unary(&resource.method, request, caller, &self.key)
            .await
        {
            Ok(response) => Ok(render_resource(resource, uri, &response)),
            Err(status) if matches!(status.code(), Code::NotFound | Code::InvalidArgument) => {
                Err(not_found())
            }
            Err(status) => Err(internal(&status)),
        }
    }

    /// A 32-byte key for `purpose`, derived from the internal key every
    /// replica shares (as the request-state sealer's is).
    pub fn derive_key(&self, purpose: &str) -> [u8; 32] {
        self.key.derive(purpose)
    }

    /// Open the watch of the resource at `uri` for `caller` (`watch.proto`):
    /// the stream of its changes. Refused as a read is: a URI that names
    /// nothing, that needs a scope the caller lacks, or that the service
    /// will not show the caller (another tenant's) is "resource not found";
    /// a resource whose service reports no changes cannot be subscribed to.
    pub async fn watch_resource(
        &self,
        caller: &Principal,
        uri: &str,
    ) -> Result<tonic::Streaming<DynamicMessage>, RpcError> {
        let not_found = || {
            RpcError::invalid_params(
                format!("resource not found: {uri}"),
                Some(json!({"uri": uri})),
            )
        };
        let Some((resource, vars)) = self.catalog.resource(uri) else {
            return Err(not_found());
        };
        if !resource.scopes().iter().all(|s| caller.has_scope(s)) && caller.actor() != Actor::System
        {
            return Err(not_found());
        }
        let Some(watch) = &resource.watch else {
            return Err(RpcError::invalid_params(
                format!(
                    "resource {uri} cannot be subscribed to: its service does not report changes \
                     (subscribable: {})",
                    self.catalog
                        .resources
                        .iter()
                        .filter(|r| r.subscribable())
                        .map(|r| r.uri_template.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                Some(json!({"uri": uri})),
            ));
        };
        let args: serde_json::Map<String, Value> = vars
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect();
        let request = transcode::to_message(&watch.input(), Some(Value::Object(args)))
            .map_err(|e| RpcError::invalid_params(e.message, Some(json!({"uri": uri}))))?;
        let backend = self.backend(watch).map_err(|s| internal(&s))?;
        match backend
            .watch(watch, request, caller, &self.key, Some(WATCH_SPAN))
            .await
        {
            Ok(stream) => Ok(stream),
            Err(status)
                if matches!(
                    status.code(),
                    Code::NotFound | Code::InvalidArgument | Code::PermissionDenied
                ) =>
            {
                Err(not_found())
            }
            Err(status) => Err(internal(&status)),
        }
    }

    /// Get a prompt: the `GetPromptResult` JSON, or (a streaming prompt)
    /// the input a 2026-07-28 client must give first.
    pub async fn get_prompt(
        &self,
        caller: &Principal,
        name: &str,
        arguments: Option<Value>,
        io: &CallIo<'_>,
    ) -> Result<Answer, RpcError> {
        let Some(prompt) = self.catalog.prompt(name) else {
            return Err(RpcError::invalid_params(
                format!("unknown prompt: {name}"),
                Some(json!({"prompt": name})),
            ));
        };
        let request = transcode::to_message(&prompt.method.input(), arguments)
            .map_err(|e| RpcError::invalid_params(e.message, None))?;
        let backend = self.backend(&prompt.method).map_err(|s| internal(&s))?;
        let reply: mcp::PromptReply = if prompt.streaming {
            let target = format!("prompt:{name}");
            let round = stream::open_retry(&self.sealer, caller, &target, &io.retry)
                .map_err(|e| RpcError::invalid_params(e, Some(json!({"prompt": name}))))?;
            let rounds = Rounds {
                backend,
                method: &prompt.method,
                target: &target,
                principal: caller,
                key: &self.key,
                sealer: &self.sealer,
                deadline: None,
                io,
            };
            match rounds.run(request, round).await {
                Streamed::Done(Ok(Terminal::Prompt(reply))) => reply,
                Streamed::Done(Ok(_)) => {
                    return Err(RpcError {
                        code: RpcError::INTERNAL,
                        message: "the service answered a prompt with a tool result".to_owned(),
                        data: None,
                    });
                }
                Streamed::Done(Err(status)) => return Err(internal(&status)),
                Streamed::Input(input) => return Ok(Answer::InputRequired(input)),
                Streamed::MissingCapability(capability) => {
                    return Err(RpcError::missing_capability(capability));
                }
            }
        } else {
            let response = backend
                .unary(&prompt.method, request, caller, &self.key)
                .await
                .map_err(|s| internal(&s))?;
            response.transcode_to().map_err(|e| RpcError {
                code: RpcError::INTERNAL,
                message: format!("prompt reply: {e}"),
                data: None,
            })?
        };
        let messages: Vec<Value> = reply
            .messages
            .into_iter()
            .map(|m| json!({"role": m.role, "content": m.content.map(content_block).unwrap_or(json!({"type": "text", "text": ""}))}))
            .collect();
        let mut result = json!({"messages": messages});
        if !reply.description.is_empty() {
            result["description"] = json!(reply.description);
        }
        Ok(Answer::Complete(result))
    }
}

/// What the session gate found: the caller's open session and its subject.
#[derive(Clone, Debug, PartialEq)]
pub struct Gate {
    pub session_id: String,
    pub subject: Option<Subject>,
    /// What the session service says of the session to the caller (it was
    /// joined, not opened, by this key), to pass on with the answer.
    pub notice: Option<String>,
}

impl Gate {
    fn from_descriptor(session: spb::SessionDescriptor) -> Self {
        let subject = match (session.subject_kind, session.subject_id) {
            (Some(kind), Some(id)) => Some(Subject::new(kind, id)),
            _ => None,
        };
        Gate {
            session_id: session.session_id,
            subject,
            notice: session.notice,
        }
    }

    /// `caller` acting inside this session.
    pub fn apply(&self, caller: &Principal) -> Principal {
        caller
            .clone()
            .in_session(Some(self.session_id.clone()))
            .on_subject(self.subject.clone())
    }
}

/// Whether `caller`'s session subject fits `tool`: tools not scoped to a
/// subject always do; a scoped one needs a session on its kind of object.
fn subject_fits(caller: &Principal, tool: &Tool) -> bool {
    let kind = &tool.options.subject_kind;
    kind.is_empty()
        || caller.actor() == Actor::System
        || caller.subject().is_some_and(|s| &s.kind == kind)
}

fn internal(status: &Status) -> RpcError {
    tracing::warn!(code = ?status.code(), error = %status.message(), "backend call failed");
    RpcError {
        code: RpcError::INTERNAL,
        message: status.message().to_owned(),
        data: Some(json!({"error": error_code(status)})),
    }
}

/// A tool that failed: what the agent is told, and what the trace records.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolFailure {
    /// A typed code (`no_active_session`, `NOT_FOUND`, a domain code).
    pub code: String,
    pub message: String,
    /// Whether the same call may succeed if tried again later.
    pub retryable: bool,
    /// The service that refused the call recorded it in the trace itself.
    pub traced: bool,
}

impl ToolFailure {
    pub fn new(code: &str, message: &str, retryable: bool) -> Self {
        ToolFailure {
            code: code.to_owned(),
            message: message.to_owned(),
            retryable,
            traced: false,
        }
    }

    /// The `{"error": CODE, "message": …}` body agents read.
    pub fn body(&self) -> Value {
        let mut body = json!({"error": self.code, "message": self.message});
        if self.retryable {
            body["retryable"] = json!(true);
        }
        body
    }

    /// The `CallToolResult` JSON: the body as text content and no
    /// `structuredContent`, because a tool's output schema describes its
    /// success and clients (the Node SDK 1.x among them) validate structured
    /// content even on errors.
    pub fn to_result(&self) -> Value {
        json!({
            "content": [{"type": "text", "text": self.body().to_string()}],
            "isError": true,
        })
    }
}

/// The typed code of a failed backend call.
pub fn error_code(status: &Status) -> String {
    if let Some(domain) = domain_code(status) {
        return domain.to_owned();
    }
    // The table's generic code of the status (DomainCode::from_grpc).
    DomainCode::from_grpc(status.code()).mcp().code.to_owned()
}

fn status_failure(status: &Status) -> ToolFailure {
    // The session service's refusal reads as the gate's, whichever said it.
    if domain(status) == Some(DomainCode::NoActiveSession) {
        return no_session();
    }
    // Retryable by its status (unavailable, a timeout), or by its domain
    // code (the edge's BACKEND_BUSY, say), as the table says.
    let retryable = DomainCode::from_grpc(status.code()).mcp().retryable
        || domain(status).is_some_and(|d| d.mcp().retryable);
    let code = error_code(status);
    if code == DomainCode::Internal.as_str() {
        tracing::warn!(code = ?status.code(), error = %status.message(), "backend failed");
    }
    // A service of another team (found through reflection) may not cap its
    // messages as ours do; an agent gets a bounded one either way.
    let message = match status.code() {
        Code::Internal | Code::Unknown => "the service failed; see the server logs".to_owned(),
        _ => ithaca_kit::error::cap_message(status.message().to_owned()),
    };
    ToolFailure {
        traced: ithaca_kit::error::already_traced(status),
        ..ToolFailure::new(&code, &message, retryable)
    }
}

fn no_session() -> ToolFailure {
    ToolFailure::new(
        DomainCode::NoActiveSession.mcp().code,
        NO_SESSION_MESSAGE,
        false,
    )
}

/// A successful tool response as `CallToolResult` JSON.
fn render_tool_result(response: &DynamicMessage) -> Value {
    if response.descriptor().full_name() == catalog::CONTENT_MESSAGE
        && let Ok(content) = response.transcode_to::<mcp::ToolContent>()
    {
        return render_content(content);
    }
    let structured = transcode::to_json(response);
    json!({
        "content": [{"type": "text", "text": structured.to_string()}],
        "structuredContent": structured,
        "isError": false,
    })
}

/// A streaming tool's `reply`, decoded as the message its `result` option
/// names, rendered as a unary response of that type would be.
fn render_reply(tool: &Tool, bytes: &[u8]) -> Result<Value, ToolFailure> {
    let pool = tool.method.parent_pool();
    let reply = pool
        .get_message_by_name(&tool.options.result)
        .ok_or_else(|| {
            ToolFailure::new(
                DomainCode::Internal.as_str(),
                "the service answered with a reply, and the tool names no result type",
                false,
            )
        })
        .and_then(|kind| {
            DynamicMessage::decode(kind, bytes).map_err(|e| {
                ToolFailure::new(
                    DomainCode::Internal.as_str(),
                    &format!("decoding the reply: {e}"),
                    false,
                )
            })
        })?;
    Ok(render_tool_result(&reply))
}

/// Content blocks (and structured JSON) as `CallToolResult` JSON.
fn render_content(content: mcp::ToolContent) -> Value {
    let blocks: Vec<Value> = content.content.into_iter().map(content_block).collect();
    let mut result = json!({"content": blocks, "isError": false});
    if let Some(structured) = content.structured {
        result["structuredContent"] = json::from_struct(structured);
    }
    result
}

/// One MCP content block.
fn content_block(content: mcp::Content) -> Value {
    match content.kind {
        Some(ContentKind::Text(t)) => json!({"type": "text", "text": t.text}),
        Some(ContentKind::Image(b)) => {
            json!({"type": "image", "data": STANDARD.encode(&b.data), "mimeType": b.mime_type})
        }
        Some(ContentKind::Audio(b)) => {
            json!({"type": "audio", "data": STANDARD.encode(&b.data), "mimeType": b.mime_type})
        }
        Some(ContentKind::Resource(r)) => json!({"type": "resource", "resource": embedded(&r)}),
        None => json!({"type": "text", "text": ""}),
    }
}

fn embedded(r: &mcp::EmbeddedResource) -> Value {
    let mut v = json!({"uri": r.uri});
    if !r.mime_type.is_empty() {
        v["mimeType"] = json!(r.mime_type);
    }
    match &r.body {
        Some(mcp::embedded_resource::Body::Blob(b)) => v["blob"] = json!(STANDARD.encode(b)),
        Some(mcp::embedded_resource::Body::Text(t)) => v["text"] = json!(t),
        None => v["text"] = json!(""),
    }
    v
}

/// A resource response as `ReadResourceResult` JSON.
fn render_resource(resource: &Resource, uri: &str, response: &DynamicMessage) -> Value {
    if response.descriptor().full_name() == catalog::CONTENT_MESSAGE
        && let Ok(content) = response.transcode_to::<mcp::ToolContent>()
    {
        let contents: Vec<Value> = content
            .content
            .into_iter()
            .map(|c| match c.kind {
                Some(ContentKind::Resource(r)) => embedded(&r),
                Some(ContentKind::Image(b) | ContentKind::Audio(b)) => {
                    json!({"uri": uri, "mimeType": b.mime_type, "blob": STANDARD.encode(&b.data)})
                }
                Some(ContentKind::Text(t)) => {
                    json!({"uri": uri, "mimeType": resource.mime_type, "text": t.text})
                }
                None => json!({"uri": uri, "mimeType": resource.mime_type, "text": ""}),
            })
            .collect();
        return json!({"contents": contents});
    }
    let body = transcode::to_json(response);
    json!({"contents": [{"uri": uri, "mimeType": resource.mime_type, "text": body.to_string()}]})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_exhausted_is_not_a_retryable_rate_limit_unless_the_edge_is_busy() {
        let limit = status_failure(&Status::resource_exhausted("message too large"));
        assert_eq!(limit.code, "RESOURCE_EXHAUSTED");
        assert!(!limit.retryable, "{limit:?}");
        let mut busy = Status::resource_exhausted("busy");
        busy.metadata_mut().insert(
            ithaca_kit::error::DOMAIN_CODE_KEY,
            tonic::metadata::MetadataValue::from_static(crate::backend::BACKEND_BUSY),
        );
        let busy = status_failure(&busy);
        assert_eq!(busy.code, crate::backend::BACKEND_BUSY);
        assert!(busy.retryable, "{busy:?}");
    }

    #[test]
    fn a_backends_long_message_reaches_the_agent_capped() {
        let long = "x".repeat(100_000);
        let failure = status_failure(&Status::invalid_argument(long));
        assert!(failure.message.len() <= ithaca_kit::error::MAX_MESSAGE_BYTES);
        assert!(
            failure.message.ends_with("100000 bytes in all)"),
            "{}",
            failure.message
        );
    }
}
