//! Stage 2, the gate: `BeginCall`, one session RPC that is the session
//! gate (the caller's current session, or the one the request pins), the
//! subject check, and the durable `tool_call`. Every tool but
//! `session_context` runs inside an open session, with that session's
//! subject; a subject-scoped write tool outside a session on its kind of
//! object is refused (and traced as a denial there).

use super::failure::{ToolFailure, no_session, status_failure};
use super::lookup::{Offered, subject_fits, unknown_tool};
use crate::appends::Sent;
use crate::backend::Backend;
use crate::catalog::Tool;
use crate::core::{Answer, Core, RpcError, SESSION_PIN_META};
use ithaca_kit::error::{DomainCode, domain};
use ithaca_kit::json;
use ithaca_kit::principal::{Actor, Principal, Subject};
use ithaca_proto::service_names::SESSION;
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use serde_json::Value;
use tonic::{Code, Request, Status};

/// What the session gate found: the caller's open session and its subject.
#[derive(Clone, Debug, PartialEq)]
pub struct Gate {
    pub session_id: String,
    pub subject: Option<Subject>,
    /// What the session service says of the session to the caller (it was
    /// joined, not opened, by this key), to pass on with the answer.
    pub notice: Option<String>,
}

/// A call the gate let through.
pub struct Admitted {
    /// The caller inside its session, with the session's subject.
    pub principal: Principal,
    /// The seq of the durable `tool_call`, when one was recorded.
    pub call_seq: Option<i64>,
    /// The session service's notice, passed on with the answer.
    pub notice: Option<String>,
}

impl Core {
    /// Let the call through the gate, its `tool_call` durable; or the
    /// call's whole answer, when the gate refused it.
    pub(super) async fn admit(
        &self,
        offered: Offered<'_>,
        caller: &Principal,
        pin: Option<&str>,
        arguments: &Value,
    ) -> Result<Admitted, Result<Answer, RpcError>> {
        let tool = offered.tool();
        let mut admitted = Admitted {
            principal: caller.clone(),
            call_seq: None,
            notice: None,
        };
        if !tool.options.session_exempt
            && let Some(session) = &self.session
        {
            match self.begin(session, caller, pin, tool, arguments).await {
                Ok((gate, seq)) => {
                    admitted.principal = gate.apply(caller);
                    admitted.call_seq = Some(seq);
                    admitted.notice = gate.notice;
                }
                // A person may close an agent's session without one of
                // their own; the call is then recorded in no session.
                Err(status)
                    if domain(&status) == Some(DomainCode::NoActiveSession)
                        && tool.options.human_session_exempt
                        && caller.actor() == Actor::Human
                        && pin.is_none() => {}
                // Refused, but not hidden: the tool error says how to get
                // in (open a session; for a subject-scoped tool, a person
                // opens one on the object and the agent joins it).
                Err(status) => {
                    return Err(Ok(Answer::Complete(status_failure(&status).to_result())));
                }
            }
        }
        // Without a session service (a protocol fixture) nothing is scoped.
        if self.session.is_none() && !subject_fits(&admitted.principal, tool) {
            return Err(Err(unknown_tool(&tool.name)));
        }
        // A result an earlier call could not record is reported now.
        if let Some(session_id) = admitted.principal.session_id() {
            self.report_orphans(session_id).await;
        }
        Ok(admitted)
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
        let request = spb::BeginCallRequest {
            session_id: pin.map(str::to_owned),
            tool: tool.name.clone(),
            arguments: None,
            // Every server of the stream reads the JSON text.
            arguments_json: serde_json::to_vec(arguments)
                .map_err(|e| Status::internal(format!("a call's arguments as JSON: {e}")))?,
            subject_kind: tool.options.subject_kind.clone(),
        };
        let streamed = match &self.appends {
            Some(appends) => appends.begin_call(caller, request).await,
            None => Sent::Unary,
        };
        if let Sent::Done(begun) = streamed {
            let begun = begun?;
            let s = begun.session;
            let gate = Gate::new(s.session_id, s.subject_kind, s.subject_id, s.notice);
            return Ok((gate, begun.seq));
        }
        // A session service without the stream: a Struct, which every
        // release reads, and only the fields the gate keeps decoded
        // (`core::Begun`).
        let request = Request::new(spb::BeginCallRequest {
            session_id: pin.map(str::to_owned),
            tool: tool.name.clone(),
            arguments: Some(json::to_struct(arguments.clone())),
            arguments_json: Vec::new(),
            subject_kind: tool.options.subject_kind.clone(),
        });
        // Boxed, as every path a call rarely takes: inline, its gRPC future
        // (about 6 KB) would size every future that awaits this one, and
        // each of those is moved whole when it starts (`call::invoke::run`).
        let begun = Box::pin(self.begin_call(session, caller, request)).await?;
        let s = begun.session.unwrap_or_default();
        let gate = Gate::new(s.session_id, s.subject_kind, s.subject_id, s.notice);
        Ok((gate, begun.seq))
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
}

impl Gate {
    fn from_descriptor(s: spb::SessionDescriptor) -> Self {
        Gate::new(s.session_id, s.subject_kind, s.subject_id, s.notice)
    }

    /// The gate of a session from the fields it keeps (of a whole
    /// `SessionDescriptor`, or of `BeginCall`'s slim answer).
    fn new(
        session_id: String,
        subject_kind: Option<String>,
        subject_id: Option<String>,
        notice: Option<String>,
    ) -> Self {
        let subject = match (subject_kind, subject_id) {
            (Some(kind), Some(id)) => Some(Subject::new(kind, id)),
            _ => None,
        };
        Gate {
            session_id,
            subject,
            notice,
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
