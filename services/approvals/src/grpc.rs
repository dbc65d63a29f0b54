//! The tonic adapter: protobuf in, domain call, protobuf out. No logic here.

use crate::service::{ApprovalsService, CallRequest, Filed, PolicyChange, Refused, TYPED_ERRORS};
use crate::store::{ApprovalRow, PolicyRow};
use ithaca_kit::{clock, json, principal};
use ithaca_proto::approvals::v1 as pb;
use ithaca_proto::approvals::v1::approvals_service_server::ApprovalsService as Rpc;
use serde_json::Value;
use tonic::{Request, Response, Status};

/// The gRPC face of [`ApprovalsService`].
#[derive(Clone, Debug)]
pub struct Grpc {
    pub service: ApprovalsService,
}

fn policy(p: PolicyRow) -> pb::Policy {
    pb::Policy {
        kind: "policies.current".into(),
        tenant_id: p.tenant_id.into(),
        trading: Some(pb::Trading {
            enabled: p.trading_enabled,
            detail: if p.trading_enabled {
                "paper trading allowed with a person's approval"
            } else {
                "data and backtest only"
            }
            .into(),
        }),
        paper_trading_default: false,
        live_execution: Some(pb::LiveExecution {
            enabled: p.trading_enabled && p.live_enabled,
            // As seed 000 shows: a live promotion changes the strategy's status;
            // no provider account is asked for.
            requires_connected_provider: false,
        }),
        execution: Some(pb::ExecutionLimits {
            max_notional_usd: p.max_notional_usd,
            max_quantity: p.max_quantity,
            max_freshness_ms: 60_000,
        }),
        typed_errors: TYPED_ERRORS.iter().map(|c| c.as_str().to_owned()).collect(),
    }
}

fn parse(text: &str) -> Option<prost_types::Struct> {
    serde_json::from_str::<Value>(text)
        .ok()
        .map(json::to_struct)
}

fn approval(a: ApprovalRow) -> pb::Approval {
    pb::Approval {
        arguments: parse(&a.arguments),
        result: a.result.as_deref().and_then(parse),
        approval_id: a.approval_id,
        tool: a.tool,
        status: a.status.as_str().to_owned(),
        requested_by: a.requested_by,
        decided_by: a.decided_by,
        note: a.note,
        session_id: a.session_id,
        created_at: clock::rfc3339(a.created_at_ms),
        decided_at: clock::rfc3339_opt(a.decided_at_ms),
        expires_at: clock::rfc3339(a.expires_at_ms),
        service: a.service,
        method: a.method,
        summary: (!a.summary.is_empty()).then(|| parse(&a.summary)).flatten(),
    }
}

#[tonic::async_trait]
impl Rpc for Grpc {
    async fn get_policy(
        &self,
        request: Request<pb::GetPolicyRequest>,
    ) -> Result<Response<pb::Policy>, Status> {
        let caller = principal::of(&request)?;
        Ok(Response::new(policy(
            self.service
                .policy(
                    &caller,
                    request.get_ref().tenant_id.as_deref().unwrap_or(""),
                )
                .await?,
        )))
    }

    async fn set_policy(
        &self,
        request: Request<pb::SetPolicyRequest>,
    ) -> Result<Response<pb::Policy>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let change = PolicyChange {
            trading_enabled: r.trading_enabled,
            live_enabled: r.live_enabled,
            max_notional_usd: r.max_notional_usd,
            max_quantity: r.max_quantity,
        };
        Ok(Response::new(policy(
            self.service
                .set_policy(&caller, &r.tenant_id, change)
                .await?,
        )))
    }

    async fn request_approval(
        &self,
        request: Request<pb::RequestApprovalRequest>,
    ) -> Result<Response<pb::ApprovalRequested>, Status> {
        let caller = principal::of(&request)?;
        let r = request.into_inner();
        let call = CallRequest {
            tool: r.tool,
            service: r.service,
            method: r.method,
            arguments: r.arguments.map_or(Value::Null, json::from_struct),
            request: r.request,
            destructive: r.destructive,
            open_world: r.open_world,
            context: r.context,
        };
        match self.service.request(&caller, call).await {
            Ok(Filed::Filed(row, response)) => Ok(Response::new(pb::ApprovalRequested {
                approval: Some(approval(*row)),
                response: response.unwrap_or_default(),
                ..Default::default()
            })),
            Ok(Filed::Confirm(input)) => Ok(Response::new(pb::ApprovalRequested {
                input_required: Some(input),
                ..Default::default()
            })),
            Ok(Filed::NotConfirmed(action)) => Ok(Response::new(pb::ApprovalRequested {
                not_confirmed: action,
                ..Default::default()
            })),
            Err(Refused::Here(err)) => Err(err.into()),
            Err(Refused::Owner(status)) => Err(status),
        }
    }

    async fn list_approvals(
        &self,
        request: Request<pb::ListApprovalsRequest>,
    ) -> Result<Response<pb::ListApprovalsResponse>, Status> {
        let caller = principal::of(&request)?;
        let r = request.get_ref();
        let rows = self
            .service
            .list(
                &caller,
                r.tenant_id.as_deref().unwrap_or(""),
                r.status.as_deref(),
            )
            .await?;
        Ok(Response::new(pb::ListApprovalsResponse {
            approvals: rows.into_iter().map(approval).collect(),
        }))
    }

    async fn get_approval(
        &self,
        request: Request<pb::GetApprovalRequest>,
    ) -> Result<Response<pb::Approval>, Status> {
        let caller = principal::of(&request)?;
        Ok(Response::new(approval(
            self.service
                .get(&caller, "", &request.get_ref().approval_id)
                .await?,
        )))
    }

    async fn decide_approval(
        &self,
        request: Request<pb::DecideApprovalRequest>,
    ) -> Result<Response<pb::Approval>, Status> {
        let caller = principal::of(&request)?;
        let r = request.get_ref();
        let a = self
            .service
            .decide(
                &caller,
                r.tenant_id.as_deref().unwrap_or(""),
                &r.approval_id,
                &r.decision,
                r.note.as_deref().unwrap_or(""),
            )
            .await?;
        Ok(Response::new(approval(a)))
    }
}
