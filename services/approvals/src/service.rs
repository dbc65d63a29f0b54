//! Policy and approvals: the generic approval gate (DESIGN §5). The edge
//! files every call of a tool marked `approval_required` here instead of
//! running it. The policy is applied (open-world destructive tools are
//! refused while trading is disabled), the owning service checks the call
//! without acting on it, and then an agent's call waits for a person while a
//! person's own call runs at once. Only people (human keys) or
//! administrators decide; an approved call runs against its owning service
//! with the requester's principal. Every step lands in the requester's
//! research session. Nothing here knows any particular tool: the call is a
//! service, a method and an encoded request.

use crate::model::{ApprovalStatus, Decision};
use crate::store::{ApprovalRow, Change, PolicyRow, Store};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ithaca_kit::approval::EncodedCall;
use ithaca_kit::clock;
use ithaca_kit::error::DomainCode;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::id::TenantId;
use ithaca_kit::json;
use ithaca_kit::principal::{Actor, InternalKey, Principal};
use ithaca_proto::mcp::v1 as mcp;
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use serde_json::{Value, json};
use std::time::Duration;
use tonic::transport::Channel;

/// How long a request may wait for a decision.
pub const APPROVAL_TTL_MS: i64 = 24 * 60 * 60 * 1000;

/// An approved call was not run: its requester's key was revoked.
pub const REQUESTER_REVOKED: DomainCode = DomainCode::RequesterRevoked;

/// An approved call was not run: its requester's session can record
/// nothing more (closed, archived or gone), and a call whose steps cannot
/// be traced never runs.
pub const SESSION_CLOSED: DomainCode = DomainCode::SessionClosed;

/// The typed errors tools may return, as the policy lists them.
pub const TYPED_ERRORS: [DomainCode; 14] = [
    DomainCode::AuthRequired,
    DomainCode::NoActiveSession,
    DomainCode::TradingDisabled,
    DomainCode::ApprovalRequired,
    DomainCode::HumanRequired,
    DomainCode::AlreadyDecided,
    DomainCode::ApprovalExpired,
    DomainCode::BrokerConnectionRequired,
    DomainCode::UnknownStrategy,
    DomainCode::SubjectMismatch,
    DomainCode::NotValidated,
    DomainCode::NotPreviewed,
    REQUESTER_REVOKED,
    SESSION_CLOSED,
];

/// How long a call to an owning service (its check, or the approved call)
/// may take.
pub const OWNER_TIMEOUT: Duration = Duration::from_secs(15);

/// Where the approvals service finds the services it calls.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Auth, asked whether a requester's key is still active before an
    /// approved call runs as them.
    pub auth_url: Option<String>,
    pub skills_url: Option<String>,
    pub session_url: Option<String>,
    pub broker_url: Option<String>,
}

/// Policy and approvals.
#[derive(Clone, Debug)]
pub struct ApprovalsService {
    store: Store,
    key: InternalKey,
    /// The owning services, by the package prefix of their gRPC names.
    owners: Vec<(&'static str, Channel)>,
    pub(crate) session: Option<Channel>,
    pub(crate) auth: Option<Channel>,
}

/// A call of an approval-required tool, as the edge files it.
#[derive(Clone, Debug, Default)]
pub struct CallRequest {
    /// The tool's MCP name.
    pub tool: String,
    /// The owning gRPC service (fully qualified) and method.
    pub service: String,
    pub method: String,
    /// The arguments as sent, for people to read.
    pub arguments: Value,
    /// The encoded request message.
    pub request: Vec<u8>,
    /// The tool's annotations, which the policy reads.
    pub destructive: bool,
    pub open_world: bool,
    /// The caller's client and its answers, from the edge: a person whose
    /// client can elicit confirms their own call first.
    pub context: Option<mcp::CallContext>,
}

/// Why an approved call may not run as its requester now.
pub(crate) enum Blocked {
    /// Never, with this domain code and reason: the request fails.
    Refused(DomainCode, String),
    /// Auth or the session service could not be asked: nothing changed,
    /// the person may decide again in a moment.
    Unavailable(ServiceError),
}

/// Why a call was not filed.
#[derive(Debug)]
pub enum Refused {
    /// This service refused it (policy, bad input, no such service).
    Here(ServiceError),
    /// The owning service's check refused it: its status, passed on as is.
    Owner(tonic::Status),
}

impl From<ServiceError> for Refused {
    fn from(err: ServiceError) -> Self {
        Refused::Here(err)
    }
}

impl From<sqlx::Error> for Refused {
    fn from(err: sqlx::Error) -> Self {
        Refused::Here(err.into())
    }
}

/// What filing a call came to.
#[derive(Debug)]
pub enum Filed {
    /// Filed: pending for an agent; for a person, run, with the encoded
    /// response when it succeeded.
    Filed(Box<ApprovalRow>, Option<Vec<u8>>),
    /// A person must confirm their call first: ask this, then file again
    /// with the answer.
    Confirm(mcp::InputRequired),
    /// The person did not confirm: nothing was filed or run. Their answer's
    /// action (`decline`, `cancel`, or `accept` without confirming).
    NotConfirmed(String),
}

/// The key of the confirmation question in `InputRequired.requests` and of
/// its answer in `CallContext.responses`.
const CONFIRM: &str = "confirm";

/// The field of the confirmation form a person ticks.
const CONFIRM_FIELD: &str = "confirm";

/// The state a confirmation question carries: a digest of the exact call,
/// so an answer confirms this call and no other (a retry with other
/// arguments is asked again).
fn confirmation_state(call: &CallRequest) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let mut digest = Sha256::new();
    for part in [
        call.tool.as_bytes(),
        call.service.as_bytes(),
        call.method.as_bytes(),
        &call.request,
    ] {
        digest.update((part.len() as u64).to_be_bytes());
        digest.update(part);
    }
    digest.finalize().to_vec()
}

/// The question a person answers before their own call runs.
fn confirmation_question(call: &CallRequest, tool: &str, state: Vec<u8>) -> mcp::InputRequired {
    let form = serde_json::json!({
        "type": "object",
        "properties": {
            CONFIRM_FIELD: {
                "type": "boolean",
                "title": "Confirm",
                "description": format!("Run {tool} now"),
            },
        },
        "required": [CONFIRM_FIELD],
    });
    let question = mcp::InputRequest {
        kind: Some(mcp::input_request::Kind::Elicitation(mcp::Elicitation {
            message: format!(
                "Confirm {tool} with {}? It runs at once, as your own call.",
                call.arguments
            ),
            requested_schema: Some(json::to_struct(form)),
        })),
    };
    mcp::InputRequired {
        requests: [(CONFIRM.to_owned(), question)].into_iter().collect(),
        state,
    }
}

/// A person's answer to the confirmation: `Ok` when they confirmed, else
/// the action to report.
fn confirmed(answer: &Value) -> Result<(), String> {
    let action = answer["action"].as_str().unwrap_or("");
    if action == "accept" && answer["content"][CONFIRM_FIELD] == Value::Bool(true) {
        return Ok(());
    }
    Err(if action.is_empty() {
        "decline".to_owned()
    } else {
        action.chars().take(32).collect()
    })
}

/// A policy change.
#[derive(Clone, Debug, Default)]
pub struct PolicyChange {
    pub trading_enabled: Option<bool>,
    pub live_enabled: Option<bool>,
    pub max_notional_usd: Option<f64>,
    pub max_quantity: Option<f64>,
}

impl ApprovalsService {
    pub fn new(
        store: Store,
        key: InternalKey,
        config: &Config,
    ) -> Result<Self, ithaca_kit::client::BadUrl> {
        let channel =
            |url: &Option<String>| url.as_deref().map(ithaca_kit::client::channel).transpose();
        let mut owners = Vec::new();
        for (prefix, url) in [
            ("ithaca.skills.", &config.skills_url),
            ("ithaca.broker.", &config.broker_url),
        ] {
            if let Some(channel) = channel(url)? {
                owners.push((prefix, channel));
            }
        }
        Ok(ApprovalsService {
            store,
            key,
            owners,
            session: channel(&config.session_url)?,
            auth: channel(&config.auth_url)?,
        })
    }

    pub async fn policy(
        &self,
        caller: &Principal,
        tenant_id: &str,
    ) -> Result<PolicyRow, ServiceError> {
        let tenant = target_tenant(caller, tenant_id)?;
        Ok(self.store.policy(&tenant).await?)
    }

    /// Administrators only.
    pub async fn set_policy(
        &self,
        caller: &Principal,
        tenant_id: &str,
        change: PolicyChange,
    ) -> Result<PolicyRow, ServiceError> {
        if caller.actor() != Actor::System {
            return Err(ServiceError::denied(
                "only administrators change the policy (ithaca policy set)",
            ));
        }
        let tenant = target_tenant(caller, tenant_id)?;
        let mut policy = self.store.policy(&tenant).await?;
        if let Some(v) = change.trading_enabled {
            policy.trading_enabled = v;
        }
        if let Some(v) = change.live_enabled {
            policy.live_enabled = v;
        }
        for (field, value) in [
            ("max_notional_usd", change.max_notional_usd),
            ("max_quantity", change.max_quantity),
        ] {
            if value.is_some_and(|v| !(v.is_finite() && v > 0.0)) {
                return Err(ServiceError::invalid(format!(
                    "{field}: must be a positive number"
                )));
            }
        }
        policy.max_notional_usd = change.max_notional_usd.unwrap_or(policy.max_notional_usd);
        policy.max_quantity = change.max_quantity.unwrap_or(policy.max_quantity);
        policy.updated_at_ms = clock::now_ms();
        self.store.put_policy(&policy).await?;
        tracing::info!(tenant_id = %tenant, trading = policy.trading_enabled, live = policy.live_enabled, "policy changed");
        Ok(policy)
    }

    /// The channel of the service that owns `service`.
    fn owner(&self, service: &str) -> Result<Channel, ServiceError> {
        self.owners
            .iter()
            .find(|(prefix, _)| service.starts_with(prefix))
            .map(|(_, channel)| channel.clone())
            .ok_or_else(|| {
                ServiceError::new(
                    Code::Unavailable,
                    format!("service: no backend for {service} is configured here"),
                )
            })
    }

    /// Apply the policy, have the owning service check the call, then file
    /// it: pending for an agent; run at once for a person (their call is
    /// their decision), with the encoded response. A person whose client
    /// can elicit (`call.context`) confirms first: without their answer
    /// this asks ([`Filed::Confirm`]); unless they confirm, nothing is
    /// filed ([`Filed::NotConfirmed`]). The policy and the owner's check
    /// come before the question, and again with the answer.
    pub async fn request(&self, caller: &Principal, call: CallRequest) -> Result<Filed, Refused> {
        let tenant = TenantId::of(caller)?;
        let tool = call.tool.trim();
        if tool.is_empty() || tool.len() > 128 {
            return Err(ServiceError::invalid("tool: 1 to 128 characters").into());
        }
        let owner = self.owner(&call.service)?;
        let policy = self.store.policy(&tenant).await?;
        let live = call.arguments["mode"].as_str() == Some("live");
        let refusal = if call.destructive && call.open_world && !policy.trading_enabled {
            Some(
                "trading is disabled by the tenant's policy (data and backtest only); an administrator can turn it on with `ithaca policy set --trading on`",
            )
        } else if live && !(policy.trading_enabled && policy.live_enabled) {
            Some(
                "live trading is disabled by the tenant's policy; an administrator can turn it on with `ithaca policy set --trading on --live on`",
            )
        } else {
            None
        };
        if let Some(message) = refusal {
            self.trace(
                caller,
                spb::EventType::Denial,
                json!({"tool": tool, "arguments": call.arguments, "error": DomainCode::TradingDisabled.as_str()}),
            )
            .await;
            return Err(ServiceError::precondition(format!("{tool}: {message}"))
                .with_domain(DomainCode::TradingDisabled)
                .traced()
                .into());
        }
        let check = EncodedCall {
            service: &call.service,
            method: &call.method,
            body: &call.request,
            check: true,
        };
        let checked = ithaca_kit::approval::call_encoded(
            owner.clone(),
            check,
            caller,
            &self.key,
            OWNER_TIMEOUT,
        )
        .await
        .map_err(Refused::Owner)?;
        // What the call would do, in the owner's terms, for the person who
        // decides (absent when the owner says nothing).
        let summary = checked.summary.map(|s| s.to_string()).unwrap_or_default();

        let context = call.context.clone().unwrap_or_default();
        let elicits = context.client.as_ref().is_some_and(|c| c.elicitation);
        if caller.actor() == Actor::Human && elicits {
            let state = confirmation_state(&call);
            let answer = context
                .responses
                .get(CONFIRM)
                .filter(|_| context.state == state)
                .cloned()
                .map(json::from_struct);
            let Some(answer) = answer else {
                return Ok(Filed::Confirm(confirmation_question(&call, tool, state)));
            };
            if let Err(action) = confirmed(&answer) {
                self.trace(
                    caller,
                    spb::EventType::Denial,
                    json!({"tool": tool, "arguments": call.arguments, "error": DomainCode::NotConfirmed.as_str(), "action": action}),
                )
                .await;
                return Ok(Filed::NotConfirmed(action));
            }
        }

        let now = clock::now_ms();
        let approval = ApprovalRow {
            approval_id: uuid::Uuid::new_v4().hyphenated().to_string(),
            tenant_id: tenant,
            tool: tool.to_owned(),
            arguments: call.arguments.to_string(),
            status: ApprovalStatus::Pending,
            requested_by: caller.agent().to_owned(),
            requester: serde_json::to_string(caller).map_err(|e| ServiceError::internal(&e))?,
            session_id: caller.session_id().unwrap_or_default().to_owned(),
            decided_by: String::new(),
            note: String::new(),
            result: None,
            created_at_ms: now,
            decided_at_ms: None,
            expires_at_ms: now + APPROVAL_TTL_MS,
            service: call.service.clone(),
            method: call.method.clone(),
            request: STANDARD.encode(&call.request),
            summary,
        };
        if caller.actor() == Actor::Agent
            && let Some(pending) = self.store.pending_like(&approval, now).await?
        {
            // The same call again while it waits (an agent retrying after
            // "pending"): the approval it already has, not a second one.
            return Ok(Filed::Filed(Box::new(pending), None));
        }
        self.store.insert(&approval).await?;
        self.trace(caller, spb::EventType::Approval, json!({"approval_id": approval.approval_id, "tool": approval.tool, "arguments": call.arguments, "status": ApprovalStatus::Pending.as_str()})).await;
        if caller.actor() == Actor::Agent {
            return Ok(Filed::Filed(Box::new(approval), None));
        }
        // A person's (or an administrator's) own call: approved by them.
        let decided_by = decider(caller);
        let change = Change {
            decided_by: Some(&decided_by),
            note: Some("the requester's own call"),
            result: None,
        };
        self.store
            .transition(
                &approval.approval_id,
                ApprovalStatus::Pending,
                ApprovalStatus::Approved,
                &change,
                now,
            )
            .await?;
        let response = self.execute(caller, &approval).await?;
        let row = self.get(caller, "", &approval.approval_id).await?;
        Ok(Filed::Filed(Box::new(row), response))
    }

    pub async fn list(
        &self,
        caller: &Principal,
        tenant_id: &str,
        status: Option<&str>,
    ) -> Result<Vec<ApprovalRow>, ServiceError> {
        let tenant = target_tenant(caller, tenant_id)?;
        let status = match status.filter(|s| !s.is_empty()) {
            None => None,
            Some(text) => match ApprovalStatus::parse(text) {
                Some(status) => Some(status),
                // No request is ever in a status that does not exist.
                None => return Ok(Vec::new()),
            },
        };
        Ok(self.store.list(&tenant, status).await?)
    }

    pub async fn get(
        &self,
        caller: &Principal,
        tenant_id: &str,
        approval_id: &str,
    ) -> Result<ApprovalRow, ServiceError> {
        let tenant = target_tenant(caller, tenant_id)?;
        let id = uuid::Uuid::parse_str(approval_id.trim())
            .map_err(|_| ServiceError::invalid("approval_id: not an id (expected a UUID)"))?
            .hyphenated()
            .to_string();
        self.store
            .get(&tenant, &id)
            .await?
            .ok_or_else(|| ServiceError::not_found(format!("approval_id: no approval {id}")))
    }

    /// A person (or an administrator) decides; agents are refused.
    pub async fn decide(
        &self,
        caller: &Principal,
        tenant_id: &str,
        approval_id: &str,
        decision: &str,
        note: &str,
    ) -> Result<ApprovalRow, ServiceError> {
        if caller.actor() == Actor::Agent {
            self.trace(caller, spb::EventType::Denial, json!({"tool": "decide_approval", "approval_id": approval_id, "error": DomainCode::HumanRequired.as_str()})).await;
            return Err(ServiceError::denied(
                "only a person may decide an approval: use a human key",
            )
            .with_domain(DomainCode::HumanRequired));
        }
        let decision = Decision::parse(decision)
            .ok_or_else(|| ServiceError::invalid("decision: must be approve or deny"))?;
        let approval = self.get(caller, tenant_id, approval_id).await?;
        let requester: Principal =
            serde_json::from_str(&approval.requester).map_err(|e| ServiceError::internal(&e))?;
        let now = clock::now_ms();
        let decided_by = decider(caller);
        if approval.status == ApprovalStatus::Pending && now > approval.expires_at_ms {
            self.store
                .transition(
                    &approval.approval_id,
                    ApprovalStatus::Pending,
                    ApprovalStatus::Expired,
                    &Change::default(),
                    now,
                )
                .await?;
            self.trace(
                &requester,
                spb::EventType::Approval,
                json!({"approval_id": approval.approval_id, "status": ApprovalStatus::Expired.as_str()}),
            )
            .await;
            return Err(ServiceError::precondition(
                "approval_id: the request expired before it was decided",
            )
            .with_domain(DomainCode::ApprovalExpired));
        }
        let to = decision.status();
        let already = || {
            ServiceError::precondition(format!("approval_id: already {}", approval.status))
                .with_domain(DomainCode::AlreadyDecided)
        };
        // An approved call runs as its requester: only while their key is
        // active and their session can still record its steps.
        if to == ApprovalStatus::Approved
            && let Err(blocked) = self.may_run_as(&requester).await
        {
            let (code, message) = match blocked {
                Blocked::Unavailable(err) => return Err(err),
                Blocked::Refused(code, message) => (code, message),
            };
            let decision = Change {
                decided_by: Some(&decided_by),
                note: Some(note),
                result: None,
            };
            if !self
                .not_run(&approval, ApprovalStatus::Pending, decision, code, &message)
                .await?
            {
                return Err(already());
            }
            self.trace(&requester, spb::EventType::Approval, json!({"approval_id": approval.approval_id, "tool": approval.tool, "status": ApprovalStatus::Failed.as_str(), "error": code.as_str(), "decided_by": decided_by})).await;
            return Err(not_run_error(code, &message, false));
        }
        let change = Change {
            decided_by: Some(&decided_by),
            note: Some(note),
            result: None,
        };
        if !self
            .store
            .transition(
                &approval.approval_id,
                ApprovalStatus::Pending,
                to,
                &change,
                now,
            )
            .await?
        {
            return Err(already());
        }
        let decided = json!({"approval_id": approval.approval_id, "status": to.as_str(), "decided_by": decided_by, "note": note});
        if to != ApprovalStatus::Approved {
            self.trace(&requester, spb::EventType::Approval, decided)
                .await;
            return self.get(caller, tenant_id, &approval.approval_id).await;
        }
        // Never run what cannot be traced: the approval must be in the
        // requester's trace before the call runs (the session may have
        // closed since the check above).
        if let Err(status) = self
            .record(&requester, spb::EventType::Approval, decided)
            .await
        {
            tracing::warn!(approval_id = %approval.approval_id, error = %status.message(), "the approval could not be traced");
            let closed = matches!(
                status.code(),
                tonic::Code::FailedPrecondition | tonic::Code::NotFound
            );
            let (code, message) = if closed {
                (
                    SESSION_CLOSED,
                    "the requester's session accepts no more events",
                )
            } else {
                (
                    DomainCode::TraceUnavailable,
                    "the requester's session could not record the approval",
                )
            };
            self.not_run(
                &approval,
                ApprovalStatus::Approved,
                Change::default(),
                code,
                message,
            )
            .await?;
            return Err(not_run_error(code, message, !closed));
        }
        self.execute(&requester, &approval).await?;
        self.get(caller, tenant_id, &approval.approval_id).await
    }

    /// Record that an approved call was not run: `from` → `failed`, with
    /// `code` and `message` as its result (and the decision in `change`).
    /// False when the request was no longer `from` (decided meanwhile).
    async fn not_run(
        &self,
        approval: &ApprovalRow,
        from: ApprovalStatus,
        change: Change<'_>,
        code: DomainCode,
        message: &str,
    ) -> Result<bool, ServiceError> {
        let result = json!({"error": code.as_str(), "message": message}).to_string();
        let change = Change {
            result: Some(&result),
            ..change
        };
        let moved = self
            .store
            .transition(
                &approval.approval_id,
                from,
                ApprovalStatus::Failed,
                &change,
                clock::now_ms(),
            )
            .await?;
        if moved {
            tracing::info!(approval_id = %approval.approval_id, error = code.as_str(), "approved call not run");
        }
        Ok(moved)
    }

    /// Run an approved call against its owning service as the requester,
    /// record how it went, and return the encoded response when it ran.
    async fn execute(
        &self,
        requester: &Principal,
        approval: &ApprovalRow,
    ) -> Result<Option<Vec<u8>>, ServiceError> {
        let outcome = match (
            self.owner(&approval.service),
            STANDARD.decode(&approval.request),
        ) {
            _ if approval.service.is_empty() => Err(
                json!({"error": DomainCode::FailedPrecondition.as_str(), "message": "filed before approvals were generic; ask again"}),
            ),
            (Err(err), _) => Err(
                json!({"error": DomainCode::ServiceUnavailable.as_str(), "message": err.message}),
            ),
            (_, Err(_)) => Err(
                json!({"error": DomainCode::Internal.as_str(), "message": "the stored request is damaged"}),
            ),
            (Ok(owner), Ok(body)) => ithaca_kit::approval::call_encoded(
                owner,
                EncodedCall {
                    service: &approval.service,
                    method: &approval.method,
                    body: &body,
                    check: false,
                },
                requester,
                &self.key,
                OWNER_TIMEOUT,
            )
            .await
            .map(|answer| answer.body)
            .map_err(|status| {
                let code = ithaca_kit::error::domain_code(&status)
                    .map_or_else(|| format!("{:?}", status.code()), str::to_owned);
                json!({"error": code, "message": status.message()})
            }),
        };
        let now = clock::now_ms();
        let (to, result, response) = match outcome {
            Ok(bytes) => (
                ApprovalStatus::Executed,
                response_json(&approval.service, &approval.method, &bytes),
                Some(bytes),
            ),
            Err(error) => (ApprovalStatus::Failed, error, None),
        };
        let result_text = result.to_string();
        let change = Change {
            decided_by: None,
            note: None,
            result: Some(&result_text),
        };
        self.store
            .transition(
                &approval.approval_id,
                ApprovalStatus::Approved,
                to,
                &change,
                now,
            )
            .await?;
        self.trace(
            requester,
            spb::EventType::Approval,
            json!({"approval_id": approval.approval_id, "tool": approval.tool, "status": to.as_str(), "result": result}),
        )
        .await;
        Ok(response)
    }

    pub(crate) fn sign<T>(&self, request: &mut tonic::Request<T>, principal: &Principal) {
        self.key.sign(request, principal);
    }

    /// Append to `who`'s session, when there is one; failures are logged.
    async fn trace(&self, who: &Principal, kind: spb::EventType, payload: Value) {
        if self.session.is_none() || who.session_id().is_none() {
            return;
        }
        if let Err(status) = self.record(who, kind, payload).await {
            tracing::warn!(error = %status.message(), event = ?kind, "recording a trace event failed");
        }
    }

    /// Append to `who`'s session, or say why it could not be: a step that
    /// must be in the trace before anything else happens.
    async fn record(
        &self,
        who: &Principal,
        kind: spb::EventType,
        payload: Value,
    ) -> Result<(), tonic::Status> {
        let (Some(channel), Some(session_id)) = (&self.session, who.session_id()) else {
            return Err(tonic::Status::failed_precondition(
                "session: no session to record in",
            ));
        };
        let mut request = tonic::Request::new(spb::AppendEventRequest {
            session_id: session_id.to_owned(),
            r#type: kind as i32,
            payload: Some(json::to_struct(payload)),
            payload_json: Vec::new(),
        });
        request.set_timeout(OWNER_TIMEOUT);
        self.sign(&mut request, who);
        SessionServiceClient::new(channel.clone())
            .append_event(request)
            .await
            .map(|_| ())
    }
}

/// The refusal of a decision whose call did not run: a precondition that
/// will not change (`retry` false), or a trace that could not be written.
fn not_run_error(code: DomainCode, message: &str, retry: bool) -> ServiceError {
    let text = format!("approval_id: {message}; the call did not run");
    let err = if retry {
        ServiceError::new(Code::Unavailable, text)
    } else {
        ServiceError::precondition(text)
    };
    err.with_domain(code)
}

/// Administrators name the tenant; everyone else acts in their own.
fn target_tenant(caller: &Principal, requested: &str) -> Result<TenantId, ServiceError> {
    if caller.actor() == Actor::System {
        let tenant = if requested.is_empty() {
            caller.tenant_id()
        } else {
            requested
        };
        return TenantId::parse(tenant);
    }
    if !requested.is_empty() && requested != caller.tenant_id() {
        return Err(ServiceError::not_found("tenant_id: no such tenant"));
    }
    TenantId::of(caller)
}

/// Who decided, as the request records it.
fn decider(caller: &Principal) -> String {
    match caller.actor() {
        Actor::System => "administrator".to_owned(),
        _ => caller.key_id().to_owned(),
    }
}

/// The JSON of an encoded response, when the method is in the contract's
/// descriptors (every built-in service's is); otherwise its size only.
fn response_json(service: &str, method: &str, bytes: &[u8]) -> Value {
    let output = ithaca_proto::annotations::pool()
        .get_service_by_name(service)
        .and_then(|s| s.methods().find(|m| m.name() == method))
        .map(|m| m.output());
    let decoded = output.and_then(|o| prost_reflect::DynamicMessage::decode(o, bytes).ok());
    // As the edge renders every tool result: proto field names (snake_case,
    // not the JSON mapping's camelCase), defaults present, 64-bit integers
    // as numbers.
    let options = prost_reflect::SerializeOptions::new()
        .use_proto_field_name(true)
        .skip_default_fields(false)
        .stringify_64_bit_integers(false);
    match decoded.map(|m| m.serialize_with_options(serde_json::value::Serializer, &options)) {
        Some(Ok(Value::Object(map))) => Value::Object(map),
        _ => json!({"bytes": bytes.len()}),
    }
}
