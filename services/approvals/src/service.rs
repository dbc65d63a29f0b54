//! Policy and approvals: the money path. A promotion is refused while the
//! policy disables trading; otherwise it waits for a person. Only people
//! (human keys) or administrators decide; an approved call then runs against
//! its owning service with the requester's principal. Every step lands in
//! the requester's research session.

use crate::model::{ApprovalStatus, Decision, Mode};
use crate::store::{ApprovalRow, Change, PolicyRow, Store};
use ithaca_kit::clock;
use ithaca_kit::error::{Code, ServiceError};
use ithaca_kit::id::TenantId;
use ithaca_kit::json;
use ithaca_kit::principal::{Actor, InternalKey, Principal};
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use ithaca_proto::skills::v1 as kpb;
use ithaca_proto::skills::v1::skills_service_client::SkillsServiceClient;
use serde_json::{Value, json};
use tonic::transport::Channel;

/// How long a request may wait for a decision.
pub const APPROVAL_TTL_MS: i64 = 24 * 60 * 60 * 1000;

/// The typed errors tools may return, as the policy lists them.
pub const TYPED_ERRORS: [&str; 9] = [
    "AUTH_REQUIRED",
    "NO_ACTIVE_SESSION",
    "TRADING_DISABLED",
    "APPROVAL_REQUIRED",
    "HUMAN_REQUIRED",
    "ALREADY_DECIDED",
    "APPROVAL_EXPIRED",
    "BROKER_CONNECTION_REQUIRED",
    "UNKNOWN_STRATEGY",
];

/// Where the approvals service finds the services it calls.
#[derive(Clone, Debug, Default)]
pub struct Config {
    pub skills_url: Option<String>,
    pub session_url: Option<String>,
}

/// Policy and approvals.
#[derive(Clone, Debug)]
pub struct ApprovalsService {
    store: Store,
    key: InternalKey,
    skills: Option<Channel>,
    session: Option<Channel>,
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
        Ok(ApprovalsService {
            store,
            key,
            skills: channel(&config.skills_url)?,
            session: channel(&config.session_url)?,
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

    /// Refuse, or file a pending approval.
    pub async fn promote(
        &self,
        caller: &Principal,
        strategy_id: &str,
        mode: &str,
    ) -> Result<ApprovalRow, ServiceError> {
        let tenant = TenantId::of(caller)?;
        let mode = Mode::parse(mode)
            .ok_or_else(|| ServiceError::invalid("mode: must be paper or live"))?;
        // The strategy must exist (in the caller's tenant).
        let mut request = tonic::Request::new(kpb::GetStrategyRequest {
            strategy_id: strategy_id.to_owned(),
        });
        self.sign(&mut request, caller);
        let skills = self.skills.clone().ok_or_else(|| {
            ServiceError::new(Code::Unavailable, "no skills service is configured")
        })?;
        SkillsServiceClient::new(skills.clone())
            .get_strategy(request)
            .await
            .map_err(|s| from_status(&s))?;

        let policy = self.store.policy(&tenant).await?;
        let allowed = match mode {
            Mode::Paper => policy.trading_enabled,
            Mode::Live => policy.trading_enabled && policy.live_enabled,
        };
        let arguments = json!({"strategy_id": strategy_id, "mode": mode.as_str()});
        if !allowed {
            self.trace(caller, spb::EventType::Denial, json!({"tool": "promote_strategy", "arguments": arguments, "error": "TRADING_DISABLED"})).await;
            return Err(ServiceError::precondition(format!(
                "{mode} trading is disabled by the tenant's policy (data and backtest only); an administrator can change it"
            ))
            .with_domain("TRADING_DISABLED"));
        }
        let now = clock::now_ms();
        let approval = ApprovalRow {
            approval_id: uuid::Uuid::new_v4().hyphenated().to_string(),
            tenant_id: tenant,
            tool: "promote_strategy".to_owned(),
            arguments: arguments.to_string(),
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
        };
        self.store.insert(&approval).await?;
        self.trace(caller, spb::EventType::Approval, json!({"approval_id": approval.approval_id, "tool": approval.tool, "arguments": arguments, "status": ApprovalStatus::Pending.as_str()})).await;
        Ok(approval)
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
            self.trace(caller, spb::EventType::Denial, json!({"tool": "decide_approval", "approval_id": approval_id, "error": "HUMAN_REQUIRED"})).await;
            return Err(ServiceError::denied(
                "only a person may decide an approval: use a human key",
            )
            .with_domain("HUMAN_REQUIRED"));
        }
        let decision = Decision::parse(decision)
            .ok_or_else(|| ServiceError::invalid("decision: must be approve or deny"))?;
        let approval = self.get(caller, tenant_id, approval_id).await?;
        let requester: Principal =
            serde_json::from_str(&approval.requester).map_err(|e| ServiceError::internal(&e))?;
        let now = clock::now_ms();
        let decided_by = match caller.actor() {
            Actor::System => "administrator".to_owned(),
            _ => caller.key_id().to_owned(),
        };
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
            .with_domain("APPROVAL_EXPIRED"));
        }
        let to = decision.status();
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
            return Err(ServiceError::precondition(format!(
                "approval_id: already {}",
                approval.status
            ))
            .with_domain("ALREADY_DECIDED"));
        }
        self.trace(&requester, spb::EventType::Approval, json!({"approval_id": approval.approval_id, "status": to.as_str(), "decided_by": decided_by, "note": note})).await;
        if to == ApprovalStatus::Approved {
            self.execute(&requester, &approval).await?;
        }
        self.get(caller, tenant_id, &approval.approval_id).await
    }

    /// Run an approved call against its owning service as the requester.
    async fn execute(
        &self,
        requester: &Principal,
        approval: &ApprovalRow,
    ) -> Result<(), ServiceError> {
        let arguments: Value = serde_json::from_str(&approval.arguments).unwrap_or(Value::Null);
        let outcome = match approval.tool.as_str() {
            "promote_strategy" => {
                let skills = self.skills.clone().ok_or_else(|| {
                    ServiceError::new(Code::Unavailable, "no skills service is configured")
                })?;
                let mut request = tonic::Request::new(kpb::SetStrategyStatusRequest {
                    strategy_id: arguments["strategy_id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    status: arguments["mode"].as_str().unwrap_or_default().to_owned(),
                });
                self.sign(&mut request, requester);
                SkillsServiceClient::new(skills)
                    .set_strategy_status(request)
                    .await
                    .map(|r| {
                        let s = r.into_inner();
                        json!({"strategy_id": s.strategy_id, "status": s.status})
                    })
                    .map_err(|s| s.message().to_owned())
            }
            other => Err(format!("no executor for {other}")),
        };
        let now = clock::now_ms();
        let (to, result) = match outcome {
            Ok(result) => (ApprovalStatus::Executed, result),
            Err(error) => (ApprovalStatus::Failed, json!({"error": error})),
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
            json!({"approval_id": approval.approval_id, "status": to.as_str(), "result": result}),
        )
        .await;
        Ok(())
    }

    fn sign<T>(&self, request: &mut tonic::Request<T>, principal: &Principal) {
        self.key.sign(request, principal);
    }

    /// Append to `who`'s session, when there is one; failures are logged.
    async fn trace(&self, who: &Principal, kind: spb::EventType, payload: Value) {
        let (Some(channel), Some(session_id)) = (&self.session, who.session_id()) else {
            return;
        };
        let mut request = tonic::Request::new(spb::AppendEventRequest {
            session_id: session_id.to_owned(),
            r#type: kind as i32,
            payload: Some(json::to_struct(payload)),
        });
        self.sign(&mut request, who);
        if let Err(status) = SessionServiceClient::new(channel.clone())
            .append_event(request)
            .await
        {
            tracing::warn!(error = %status.message(), event = ?kind, "recording a trace event failed");
        }
    }
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

fn from_status(status: &tonic::Status) -> ServiceError {
    ServiceError::from_status(status, &["UNKNOWN_STRATEGY"])
}
