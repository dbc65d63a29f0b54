//! The approvals inbox: pending requests with who asked, the tool and its
//! arguments, and the policy that required a person; approve or deny with a
//! reason; each request's page with the decision and the call's outcome.

use super::{Nav, Paged, failed, html, missing_scope, pretty};
use crate::Console;
use crate::backends::signed;
use crate::gate::{Change, CsrfToken, Person};
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use ithaca_proto::approvals::v1 as pb;
use ithaca_proto::approvals::v1::approvals_service_client::ApprovalsServiceClient;
use ithaca_proto::scopes::{APPROVALS_DECIDE, APPROVALS_READ};
use serde::Deserialize;
use std::sync::Arc;
use tonic::transport::Channel;

/// An approval as the pages show it.
pub struct View {
    pub approval_id: String,
    pub tool: String,
    pub arguments: String,
    pub status: String,
    pub requested_by: String,
    pub decided_by: String,
    pub note: String,
    pub result: String,
    pub session_id: String,
    pub created_at: String,
    pub decided_at: String,
    pub expires_at: String,
    /// What the call would do, in the owning service's words (its check's
    /// summary): one sentence, the rest as JSON, and a filter version's
    /// diff from the active one.
    pub what: String,
    pub summary: String,
    pub diff: String,
    /// The filter the call is about, for a link to its page.
    pub filter_id: String,
}

impl From<pb::Approval> for View {
    fn from(a: pb::Approval) -> View {
        let mut summary = a
            .summary
            .map(ithaca_kit::json::from_struct)
            .unwrap_or_default();
        let mut take = |key: &str| match summary.as_object_mut().and_then(|m| m.remove(key)) {
            Some(serde_json::Value::String(s)) => s,
            _ => String::new(),
        };
        let (what, diff) = (take("what"), take("diff_from_active"));
        let filter_id = summary["filter"]["filter_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let summary = match &summary {
            serde_json::Value::Object(m) if !m.is_empty() => {
                serde_json::to_string_pretty(&summary).unwrap_or_default()
            }
            _ => String::new(),
        };
        View {
            what,
            summary,
            diff,
            filter_id,
            arguments: pretty(a.arguments),
            result: pretty(a.result),
            approval_id: a.approval_id,
            tool: a.tool,
            status: a.status,
            requested_by: a.requested_by,
            decided_by: a.decided_by,
            note: a.note,
            session_id: a.session_id,
            created_at: a.created_at,
            decided_at: a.decided_at,
            expires_at: a.expires_at,
        }
    }
}

/// Why a person has to decide: the tool is approval-required, and the
/// tenant's policy as it stands.
fn policy_text(policy: Option<&pb::Policy>) -> String {
    let Some(p) = policy else {
        return String::new();
    };
    let trading = p.trading.as_ref();
    let live = p.live_execution.as_ref().is_some_and(|l| l.enabled);
    let limits = p
        .execution
        .as_ref()
        .map(|e| {
            format!(
                "; limits: notional ≤ {} USD, quantity ≤ {}",
                e.max_notional_usd, e.max_quantity
            )
        })
        .unwrap_or_default();
    format!(
        "paper trading {}, live trading {}{limits}{}",
        if trading.is_some_and(|t| t.enabled) {
            "enabled"
        } else {
            "disabled"
        },
        if live { "enabled" } else { "disabled" },
        trading
            .map(|t| t.detail.as_str())
            .filter(|d| !d.is_empty())
            .map(|d| format!(" ({d})"))
            .unwrap_or_default(),
    )
}

#[derive(Template)]
#[template(path = "approvals.html")]
struct InboxPage {
    nav: Nav,
    status: String,
    approvals: Vec<View>,
    page: usize,
    pages: usize,
    policy: String,
    can_decide: bool,
}

#[derive(Deserialize)]
pub struct InboxQuery {
    status: Option<String>,
    #[serde(default)]
    page: usize,
}

type Client = ApprovalsServiceClient<Channel>;

/// An approvals client for a person who may read approvals.
fn reader(console: &Console, person: &Person) -> Result<Client, Response> {
    if !person.has_scope(APPROVALS_READ) {
        return Err(missing_scope(APPROVALS_READ));
    }
    console.backends.approvals().map_err(failed)
}

/// The tenant's policy as the person may read it; `None` when it cannot be
/// read (the page says so rather than failing).
async fn policy(console: &Console, person: &Person, client: &mut Client) -> Option<pb::Policy> {
    let request = pb::GetPolicyRequest { tenant_id: None };
    let signed = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        request,
    );
    client.get_policy(signed).await.ok().map(|r| r.into_inner())
}

/// `GET /console/approvals?status=pending&page=1`.
pub async fn inbox(
    State(console): State<Arc<Console>>,
    Query(query): Query<InboxQuery>,
    person: Person,
) -> Result<Response, Response> {
    let mut client = reader(&console, &person)?;
    let (key, timeout) = (&console.key, console.backends.timeout);
    let status = query.status.unwrap_or_else(|| "pending".to_owned());
    let list = pb::ListApprovalsRequest {
        tenant_id: None,
        status: (!status.is_empty()).then(|| status.clone()),
    };
    let all = client
        .list_approvals(signed(key, &person.principal, timeout, list))
        .await
        .map_err(|s| failed(s.into()))?
        .into_inner()
        .approvals;
    let policy = policy(&console, &person, &mut client).await;
    let paged = Paged::of(all, query.page);
    Ok(html(
        StatusCode::OK,
        &InboxPage {
            nav: person.nav("approvals"),
            status,
            approvals: paged.items.into_iter().map(View::from).collect(),
            page: paged.page,
            pages: paged.pages,
            policy: policy_text(policy.as_ref()),
            can_decide: person.has_scope(APPROVALS_DECIDE),
        },
    ))
}

#[derive(Template)]
#[template(path = "approval.html")]
struct ApprovalPage {
    nav: Nav,
    a: View,
    policy: String,
    can_decide: bool,
}

/// `GET /console/approvals/{id}`.
pub async fn show(
    State(console): State<Arc<Console>>,
    Path(approval_id): Path<String>,
    person: Person,
) -> Result<Response, Response> {
    let mut client = reader(&console, &person)?;
    let (key, timeout) = (&console.key, console.backends.timeout);
    let get = pb::GetApprovalRequest { approval_id };
    let approval = client
        .get_approval(signed(key, &person.principal, timeout, get))
        .await
        .map_err(|s| failed(s.into()))?
        .into_inner();
    // The trading policy applies to promotions; other approval-required
    // calls wait for a person whatever it says.
    let policy = match approval.tool.as_str() {
        "promote_strategy" => policy_text(policy(&console, &person, &mut client).await.as_ref()),
        _ => String::new(),
    };
    Ok(html(
        StatusCode::OK,
        &ApprovalPage {
            nav: person.nav("approvals"),
            a: approval.into(),
            policy,
            can_decide: person.has_scope(APPROVALS_DECIDE),
        },
    ))
}

#[derive(Deserialize)]
pub struct DecideForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    decision: String,
    #[serde(default)]
    note: String,
}

impl CsrfToken for DecideForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /console/approvals/{id}/decide`: approve or deny with a reason;
/// the approvals service runs an approved call as the requester.
pub async fn decide(
    State(console): State<Arc<Console>>,
    Path(approval_id): Path<String>,
    Change(person, form): Change<DecideForm>,
) -> Response {
    if !person.has_scope(APPROVALS_DECIDE) {
        return missing_scope(APPROVALS_DECIDE);
    }
    let mut client = match console.backends.approvals() {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let note = form.note.trim();
    let request = signed(
        &console.key,
        &person.principal,
        console.backends.timeout,
        pb::DecideApprovalRequest {
            approval_id: approval_id.clone(),
            decision: form.decision,
            note: (!note.is_empty()).then(|| note.to_owned()),
            tenant_id: None,
        },
    );
    match client.decide_approval(request).await {
        Ok(r) => Redirect::to(&format!(
            "/console/approvals/{}",
            r.into_inner().approval_id
        ))
        .into_response(),
        Err(s) => failed(s.into()),
    }
}
