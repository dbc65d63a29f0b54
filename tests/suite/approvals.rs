//! The money path against real services (gRPC, SQLite): policy refusals
//! with a denial in the trace, pending approvals, decisions by people only,
//! execution of the approved call as the requester, and every step traced.

use crate::common;

use common::harness::{StackBuilder, TestStack};
use ithaca::services::Service;
use ithaca_kit::client::Outbound;
use ithaca_kit::json;
use ithaca_kit::principal::{Principal, VerifiedKey};
use ithaca_proto::approvals::v1 as pb;
use ithaca_proto::approvals::v1::approvals_service_client::ApprovalsServiceClient;
use ithaca_proto::auth::v1 as apb;
use ithaca_proto::session::v1 as spb;
use ithaca_proto::skills::v1 as kpb;
use ithaca_proto::skills::v1::skills_service_client::SkillsServiceClient;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Approvals = ApprovalsServiceClient<InterceptedService<Channel, Outbound>>;
type Skills = SkillsServiceClient<InterceptedService<Channel, Outbound>>;

fn signed(url: &str, principal: Principal) -> (Channel, Outbound) {
    (
        ithaca_kit::client::channel(url).expect("url"),
        Outbound::new(common::key(), principal),
    )
}

fn approvals(url: &str, p: Principal) -> Approvals {
    let (c, o) = signed(url, p);
    ApprovalsServiceClient::with_interceptor(c, o)
}

fn skills(url: &str, p: Principal) -> Skills {
    let (c, o) = signed(url, p);
    SkillsServiceClient::with_interceptor(c, o)
}

/// The services an approval touches, started by the harness as `ithaca up`
/// starts them (without the edge: these tests speak gRPC), each on its own
/// SQLite file: auth (whose keys the requesters hold), session (the trace),
/// broker (the demo prices), skills (the owning service of
/// `promote_strategy`) and approvals; the stack's tenant.
struct Stack {
    auth_url: String,
    session_url: String,
    skills_url: String,
    approvals_url: String,
    tenant: String,
    _stack: TestStack,
}

impl Stack {
    async fn start() -> Stack {
        let stack = StackBuilder::new().without_edge().start().await;
        Stack {
            auth_url: stack.url_of(Service::Auth),
            session_url: stack.url_of(Service::Session),
            skills_url: stack.url_of(Service::Skills),
            approvals_url: stack.url_of(Service::Approvals),
            tenant: stack.tenant.clone(),
            _stack: stack,
        }
    }

    /// A new key of the tenant in auth, as the principal the edge makes of
    /// it.
    async fn key(&self, actor: apb::Actor, scopes: &[&str]) -> Principal {
        let created = common::auth_client(&self.auth_url, Principal::system(""))
            .create_key(apb::CreateKeyRequest {
                tenant_id: self.tenant.clone(),
                scopes: scopes.iter().map(|s| s.to_string()).collect(),
                actor: actor as i32,
                label: "approvals test".into(),
                env: String::new(),
            })
            .await
            .expect("create key")
            .into_inner();
        let key = created.key.expect("key");
        Principal::verified(VerifiedKey {
            tenant_id: key.tenant_id,
            key_id: key.key_id,
            scopes: key.scopes,
            human: actor == apb::Actor::Human,
        })
    }

    async fn agent(&self) -> Principal {
        self.key(apb::Actor::Agent, &["data:read", "strategy:author"])
            .await
    }

    async fn person(&self) -> Principal {
        self.key(apb::Actor::Human, &["data:read", "approvals:decide"])
            .await
    }

    /// Trading on, as an administrator sets it.
    async fn allow_trading(&self) {
        approvals(&self.approvals_url, Principal::system(&self.tenant))
            .set_policy(pb::SetPolicyRequest {
                tenant_id: self.tenant.clone(),
                trading_enabled: Some(true),
                ..Default::default()
            })
            .await
            .expect("administrator sets the policy");
    }

    /// `who` opens a session; `who` in it.
    async fn open_session(&self, who: &Principal) -> Principal {
        let sid = common::session_client(&self.session_url, who.clone())
            .session_context(spb::SessionContextRequest {
                prompt: Some("promote".into()),
                ..Default::default()
            })
            .await
            .expect("session")
            .into_inner()
            .session_id;
        who.clone().in_session(Some(sid))
    }

    /// A draft strategy proposed by `who` (in a session).
    async fn propose(&self, who: &Principal, name: &str) -> kpb::Strategy {
        skills(&self.skills_url, who.clone())
            .propose_strategy(kpb::ProposeStrategyRequest {
                name: name.into(),
                universe: vec!["MSFT".into()],
                lookback: 126,
                rebalance: 21,
                risk: None,
                cost_bps: None,
            })
            .await
            .expect("propose")
            .into_inner()
    }

    async fn strategy_status(&self, who: &Principal, id: &str) -> String {
        skills(&self.skills_url, who.clone())
            .get_strategy(kpb::GetStrategyRequest {
                strategy_id: id.to_owned(),
            })
            .await
            .expect("strategy")
            .into_inner()
            .status
    }

    /// The `approval` and `denial` steps of a session's trace, as
    /// `type:status-or-error`.
    async fn steps(&self, who: &Principal) -> Vec<String> {
        let events = common::session_client(&self.session_url, who.clone())
            .read_events(spb::ReadEventsRequest {
                session_id: who.session_id().expect("in a session").to_owned(),
                after_seq: 0,
                limit: Some(100),
            })
            .await
            .expect("read")
            .into_inner()
            .events;
        events
            .iter()
            .filter(|e| e.r#type == "denial" || e.r#type == "approval")
            .map(|e| {
                let p = json::from_struct(e.payload.clone().expect("payload"));
                let what = match (p["status"].as_str(), p["error"].as_str()) {
                    (Some(status), Some(error)) => format!("{status}/{error}"),
                    (Some(status), None) => status.to_owned(),
                    (None, error) => error.unwrap_or("").to_owned(),
                };
                format!("{}:{what}", e.r#type)
            })
            .collect()
    }
}

/// What the edge files for a call of promote_strategy (an
/// approval-required tool of the skills service).
fn promote(id: &str) -> pb::RequestApprovalRequest {
    let request = kpb::PromoteStrategyRequest {
        strategy_id: id.to_owned(),
        mode: "paper".into(),
    };
    pb::RequestApprovalRequest {
        tool: "promote_strategy".into(),
        service: ithaca_proto::service_names::SKILLS.into(),
        method: "PromoteStrategy".into(),
        arguments: Some(json::to_struct(
            serde_json::json!({"strategy_id": id, "mode": "paper"}),
        )),
        request: prost::Message::encode_to_vec(&request),
        destructive: true,
        open_world: true,
        context: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promotion_needs_policy_and_a_person() {
    let stack = Stack::start().await;
    let tenant = stack.tenant.as_str();
    let (session_url, skills_url, approvals_url) = (
        stack.session_url.clone(),
        stack.skills_url.clone(),
        stack.approvals_url.clone(),
    );
    let agent = stack.agent().await;
    let mut sessions = common::session_client(&session_url, agent.clone());
    let in_session = stack.open_session(&agent).await;
    let sid = in_session.session_id().expect("sid").to_owned();
    let strategy = skills(&skills_url, in_session.clone())
        .propose_strategy(kpb::ProposeStrategyRequest {
            name: "m".into(),
            universe: vec!["MSFT".into()],
            lookback: 126,
            rebalance: 21,
            risk: None,
            cost_bps: None,
        })
        .await
        .expect("propose")
        .into_inner();
    let mut a = approvals(&approvals_url, in_session.clone());

    // Trading is disabled by default: refused, with a denial in the trace.
    let policy = a
        .get_policy(pb::GetPolicyRequest { tenant_id: None })
        .await
        .expect("policy")
        .into_inner();
    assert_eq!(policy.kind, "policies.current");
    assert!(!policy.trading.expect("trading").enabled);
    assert!(policy.typed_errors.contains(&"TRADING_DISABLED".to_owned()));
    assert!(
        !policy
            .live_execution
            .as_ref()
            .expect("live execution")
            .requires_connected_provider,
        "as seed 000 shows"
    );
    let err = a
        .request_approval(promote(&strategy.strategy_id))
        .await
        .expect_err("disabled");
    assert_eq!(
        ithaca_kit::error::domain_code(&err),
        Some("TRADING_DISABLED")
    );
    assert!(
        err.message().contains("`ithaca policy set --trading on`"),
        "the refusal names the command that changes it: {}",
        err.message()
    );

    // Only administrators change the policy.
    let err = a
        .set_policy(pb::SetPolicyRequest {
            tenant_id: String::new(),
            trading_enabled: Some(true),
            ..Default::default()
        })
        .await
        .expect_err("agents cannot");
    assert_eq!(err.code(), tonic::Code::PermissionDenied);
    let mut admin = approvals(&approvals_url, Principal::system(tenant));
    admin
        .set_policy(pb::SetPolicyRequest {
            tenant_id: tenant.into(),
            trading_enabled: Some(true),
            ..Default::default()
        })
        .await
        .expect("administrator sets the policy");

    // Now it waits for a person, once the owning service's check passes:
    // an unknown strategy is refused by skills itself, and nothing is filed.
    let err = a
        .request_approval(promote(&uuid::Uuid::new_v4().to_string()))
        .await
        .expect_err("no such strategy");
    assert_eq!(err.code(), tonic::Code::NotFound);
    let err = a
        .request_approval(pb::RequestApprovalRequest {
            service: "ithaca.nowhere.v1.Nothing".into(),
            ..promote(&strategy.strategy_id)
        })
        .await
        .expect_err("no such service");
    assert_eq!(err.code(), tonic::Code::Unavailable);
    let filed = a
        .request_approval(promote(&strategy.strategy_id))
        .await
        .expect("pending")
        .into_inner();
    assert!(filed.response.is_empty(), "an agent's call does not run");
    let pending = filed.approval.expect("approval");
    assert_eq!(pending.status, "pending");
    assert_eq!(pending.service, ithaca_proto::service_names::SKILLS);
    // It shows what it would do, in the skills service's terms: the
    // strategy's spec and its latest backtest (none yet).
    let summary = json::from_struct(pending.summary.clone().expect("a summary"));
    assert!(
        summary["what"]
            .as_str()
            .is_some_and(|w| w.contains("promote strategy \"m\" to paper")),
        "{summary}"
    );
    assert_eq!(summary["strategy"]["universe"], serde_json::json!(["MSFT"]));
    assert_eq!(summary["strategy"]["lookback"], 126, "{summary}");
    assert!(summary["latest_backtest"]["none"].is_string(), "{summary}");
    // The same call again while it waits returns that approval; nothing new
    // is filed.
    let again = a
        .request_approval(promote(&strategy.strategy_id))
        .await
        .expect("pending again")
        .into_inner()
        .approval
        .expect("approval");
    assert_eq!(
        again.approval_id, pending.approval_id,
        "one approval per call"
    );
    let listed = a
        .list_approvals(pb::ListApprovalsRequest {
            status: Some("pending".into()),
            ..Default::default()
        })
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.approvals.len(), 1, "{:?}", listed.approvals);
    let still_draft = skills(&skills_url, in_session.clone())
        .get_strategy(kpb::GetStrategyRequest {
            strategy_id: strategy.strategy_id.clone(),
        })
        .await
        .expect("strategy")
        .into_inner();
    assert_eq!(still_draft.status, "draft", "the check changed nothing");
    let id = pending.approval_id.clone();
    let polled = a
        .get_approval(pb::GetApprovalRequest {
            approval_id: id.clone(),
        })
        .await
        .expect("poll")
        .into_inner();
    assert_eq!(polled.status, "pending");

    // An agent cannot decide, even with the scope; a person can.
    let decide = |decision: &str| pb::DecideApprovalRequest {
        approval_id: id.clone(),
        decision: decision.into(),
        note: None,
        tenant_id: None,
    };
    let err = a
        .decide_approval(decide("approve"))
        .await
        .expect_err("agent");
    assert_eq!(ithaca_kit::error::domain_code(&err), Some("HUMAN_REQUIRED"));
    let other_tenant = common::human("tenant-b", "person-b");
    let err = approvals(&approvals_url, other_tenant)
        .decide_approval(decide("approve"))
        .await
        .expect_err("other tenant");
    assert_eq!(err.code(), tonic::Code::NotFound);
    let human = stack.person().await;
    let mut h = approvals(&approvals_url, human);
    let decided = h
        .decide_approval(decide("approve"))
        .await
        .expect("approve")
        .into_inner();
    assert_eq!(decided.status, "executed", "the approved call ran");
    let result = json::from_struct(decided.result.clone().expect("result"));
    assert_eq!(result["status"], "paper", "{result}");
    // Named as every tool result is (proto field names), not camelCase.
    assert_eq!(result["strategy_id"], strategy.strategy_id, "{result}");
    assert!(
        result.get("cost_bps").is_some() && result.get("costBps").is_none(),
        "{result}"
    );
    let err = h.decide_approval(decide("deny")).await.expect_err("twice");
    assert_eq!(
        ithaca_kit::error::domain_code(&err),
        Some("ALREADY_DECIDED")
    );
    let now = skills(&skills_url, in_session.clone())
        .get_strategy(kpb::GetStrategyRequest {
            strategy_id: strategy.strategy_id.clone(),
        })
        .await
        .expect("strategy")
        .into_inner();
    assert_eq!(now.status, "paper");

    // A denied request never runs.
    let second = skills(&skills_url, in_session.clone())
        .propose_strategy(kpb::ProposeStrategyRequest {
            name: "n".into(),
            universe: vec!["IBM".into()],
            lookback: 63,
            rebalance: 21,
            risk: None,
            cost_bps: None,
        })
        .await
        .expect("propose")
        .into_inner();
    let p2 = a
        .request_approval(promote(&second.strategy_id))
        .await
        .expect("pending")
        .into_inner()
        .approval
        .expect("approval");
    let denied = h
        .decide_approval(pb::DecideApprovalRequest {
            approval_id: p2.approval_id,
            decision: "deny".into(),
            note: Some("too risky".into()),
            tenant_id: None,
        })
        .await
        .expect("deny")
        .into_inner();
    assert_eq!(
        (denied.status.as_str(), denied.note.as_str()),
        ("denied", "too risky")
    );
    let still = skills(&skills_url, in_session.clone())
        .get_strategy(kpb::GetStrategyRequest {
            strategy_id: second.strategy_id,
        })
        .await
        .expect("strategy")
        .into_inner();
    assert_eq!(still.status, "draft");

    // A person's own call is their decision: it runs at once, and the
    // response is the owning RPC's.
    let third = skills(&skills_url, in_session.clone())
        .propose_strategy(kpb::ProposeStrategyRequest {
            name: "o".into(),
            universe: vec!["AAPL".into()],
            lookback: 63,
            rebalance: 21,
            risk: None,
            cost_bps: None,
        })
        .await
        .expect("propose")
        .into_inner();
    let own = h
        .request_approval(promote(&third.strategy_id))
        .await
        .expect("a person's own call")
        .into_inner();
    let approval = own.approval.expect("approval");
    assert_eq!(approval.status, "executed");
    let strategy: kpb::Strategy =
        prost::Message::decode(own.response.as_slice()).expect("the RPC's response");
    assert_eq!(
        (strategy.strategy_id.as_str(), strategy.status.as_str()),
        (third.strategy_id.as_str(), "paper")
    );

    // Every step is in the requester's trace, in order.
    let events = sessions
        .read_events(spb::ReadEventsRequest {
            session_id: sid,
            after_seq: 0,
            limit: Some(100),
        })
        .await
        .expect("read")
        .into_inner()
        .events;
    let steps: Vec<String> = events
        .iter()
        .filter(|e| e.r#type == "denial" || e.r#type == "approval")
        .map(|e| {
            let p = json::from_struct(e.payload.clone().expect("payload"));
            format!(
                "{}:{}",
                e.r#type,
                p["status"].as_str().or(p["error"].as_str()).unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        steps,
        vec![
            "denial:TRADING_DISABLED",
            "approval:pending",
            "denial:HUMAN_REQUIRED",
            "approval:approved",
            "approval:executed",
            "approval:pending",
            "approval:denied"
        ]
    );
}

#[tokio::test]
async fn an_expired_request_never_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = ithaca_approvals::open_db(&common::sqlite_path(&dir, "approvals"), "unused")
        .await
        .expect("db");
    let requester = common::agent("tenant-a", "agent-a");
    let now = ithaca_kit::clock::now_ms();
    let expired = ithaca_approvals::store::ApprovalRow {
        approval_id: uuid::Uuid::new_v4().to_string(),
        tenant_id: ithaca_kit::id::TenantId::parse("tenant-a").expect("tenant"),
        tool: "promote_strategy".into(),
        arguments: r#"{"strategy_id":"x","mode":"paper"}"#.into(),
        status: ithaca_approvals::model::ApprovalStatus::Pending,
        requested_by: "agent-a".into(),
        requester: serde_json::to_string(&requester).expect("json"),
        session_id: String::new(),
        decided_by: String::new(),
        note: String::new(),
        result: None,
        created_at_ms: now - 2 * ithaca_approvals::service::APPROVAL_TTL_MS,
        decided_at_ms: None,
        expires_at_ms: now - ithaca_approvals::service::APPROVAL_TTL_MS,
        service: ithaca_proto::service_names::SKILLS.into(),
        method: "PromoteStrategy".into(),
        request: String::new(),
        summary: String::new(),
    };
    ithaca_approvals::store::Store::new(db.clone())
        .insert(&expired)
        .await
        .expect("insert");
    // No skills service: if the call ran, the decision would fail differently.
    let svc = ithaca_approvals::service(db, common::key(), &ithaca_approvals::Config::default())
        .expect("service");
    let human = common::human("tenant-a", "person");
    let err = svc
        .decide(&human, "", &expired.approval_id, "approve", "")
        .await
        .expect_err("expired");
    assert_eq!(err.domain, Some("APPROVAL_EXPIRED"));
    let now = svc
        .get(&human, "", &expired.approval_id)
        .await
        .expect("row");
    assert_eq!(now.status, "expired");
    assert!(now.result.is_none(), "it never ran");
}

/// Issue 28, item 8: an approval decided after its requester's key was
/// revoked, or after the requester's session closed, must not run: the
/// decision is refused with REQUESTER_REVOKED or SESSION_CLOSED, the
/// request ends `failed` with that code, and the strategy stays a draft.
/// (Before the fix both ran, and the closed session's steps were lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approved_call_never_runs_for_a_revoked_requester_or_in_a_closed_session() {
    let stack = Stack::start().await;
    stack.allow_trading().await;
    let mut person = approvals(&stack.approvals_url, stack.person().await);
    let approve = |id: &str| pb::DecideApprovalRequest {
        approval_id: id.to_owned(),
        decision: "approve".into(),
        note: None,
        tenant_id: None,
    };
    // An agent files a promotion; it waits for a person.
    let file = |requester: Principal, name: &'static str| {
        let stack = &stack;
        async move {
            let strategy = stack.propose(&requester, name).await;
            let pending = approvals(&stack.approvals_url, requester.clone())
                .request_approval(promote(&strategy.strategy_id))
                .await
                .expect("filed")
                .into_inner()
                .approval
                .expect("approval");
            assert_eq!(pending.status, "pending");
            (strategy.strategy_id, pending.approval_id)
        }
    };

    // The requester's key is revoked before the person approves.
    let revoked = stack.open_session(&stack.agent().await).await;
    let (strategy, approval) = file(revoked.clone(), "revoked").await;
    common::auth_client(&stack.auth_url, Principal::system(""))
        .revoke_key(apb::RevokeKeyRequest {
            tenant_id: stack.tenant.clone(),
            key_id: revoked.key_id().to_owned(),
        })
        .await
        .expect("revoke");
    let err = person
        .decide_approval(approve(&approval))
        .await
        .expect_err("a revoked requester's call does not run");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert_eq!(
        ithaca_kit::error::domain_code(&err),
        Some("REQUESTER_REVOKED")
    );
    assert!(err.message().contains("revoked"), "{}", err.message());
    assert_eq!(stack.strategy_status(&revoked, &strategy).await, "draft");
    let row = person
        .get_approval(pb::GetApprovalRequest {
            approval_id: approval.clone(),
        })
        .await
        .expect("poll")
        .into_inner();
    assert_eq!(row.status, "failed");
    let result = json::from_struct(row.result.expect("result"));
    assert_eq!(result["error"], "REQUESTER_REVOKED", "{result}");
    // Its session is still open, so the refusal is in the trace.
    assert_eq!(
        stack.steps(&revoked).await,
        vec!["approval:pending", "approval:failed/REQUESTER_REVOKED"]
    );
    let again = person
        .decide_approval(approve(&approval))
        .await
        .expect_err("decided once");
    assert_eq!(
        ithaca_kit::error::domain_code(&again),
        Some("ALREADY_DECIDED")
    );

    // The requester's session closes before the person approves.
    let closed = stack.open_session(&stack.agent().await).await;
    let (strategy, approval) = file(closed.clone(), "closed").await;
    common::session_client(&stack.session_url, closed.clone())
        .close_session(spb::CloseSessionRequest { session_id: None })
        .await
        .expect("close");
    let err = person
        .decide_approval(approve(&approval))
        .await
        .expect_err("what cannot be traced does not run");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition, "{err:?}");
    assert_eq!(ithaca_kit::error::domain_code(&err), Some("SESSION_CLOSED"));
    assert!(err.message().contains("closed"), "{}", err.message());
    assert_eq!(stack.strategy_status(&closed, &strategy).await, "draft");
    let row = person
        .get_approval(pb::GetApprovalRequest {
            approval_id: approval,
        })
        .await
        .expect("poll")
        .into_inner();
    assert_eq!(row.status, "failed");
    let result = json::from_struct(row.result.expect("result"));
    assert_eq!(result["error"], "SESSION_CLOSED", "{result}");
    // Nothing of the decision reached the closed session, and nothing ran.
    assert_eq!(stack.steps(&closed).await, vec!["approval:pending"]);

    // With key and session in order, an approval still runs.
    let fine = stack.open_session(&stack.agent().await).await;
    let (strategy, approval) = file(fine.clone(), "fine").await;
    let decided = person
        .decide_approval(approve(&approval))
        .await
        .expect("approve")
        .into_inner();
    assert_eq!(decided.status, "executed");
    assert_eq!(stack.strategy_status(&fine, &strategy).await, "paper");
}
