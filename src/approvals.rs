//! `ithaca policy …` and `ithaca approvals …`: an administrator's view of
//! the approvals service, over gRPC with a system principal.

use crate::stack::{self, StackInfo};
use anyhow::{Context, bail};
use ithaca_kit::client::{self, Outbound};
use ithaca_kit::config::CommonArgs;
use ithaca_kit::principal::Principal;
use ithaca_proto::approvals::v1 as pb;
use ithaca_proto::approvals::v1::approvals_service_client::ApprovalsServiceClient;
use std::path::PathBuf;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Client = ApprovalsServiceClient<InterceptedService<Channel, Outbound>>;

/// Where the approvals service is and which tenant to act in.
#[derive(Debug, clap::Args)]
pub struct Target {
    /// The approvals service URL (default: the local stack's).
    #[arg(long, env = "ITHACA_APPROVALS_URL")]
    approvals_url: Option<String>,
    /// The tenant (default: the local stack's).
    #[arg(long, env = "ITHACA_TENANT")]
    tenant: Option<String>,
    /// The local stack's data directory (for stack.json and internal.key).
    #[arg(long, env = "ITHACA_DATA_DIR", default_value = stack::DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
}

impl Target {
    fn connect(&self, common: &CommonArgs) -> anyhow::Result<(Client, String)> {
        let info = StackInfo::read(&self.data_dir);
        let url = self
            .approvals_url
            .clone()
            .or(info.approvals_url)
            .unwrap_or_else(|| crate::services::Service::Approvals.local_url());
        let tenant = self
            .tenant
            .clone()
            .or(info.tenant_id)
            .context("no tenant: pass --tenant (or run against the local stack)")?;
        let key = common.internal_key(&stack::key_file(&self.data_dir))?;
        let client = ApprovalsServiceClient::with_interceptor(
            client::channel(&url)?,
            Outbound::new(key, Principal::system(tenant.clone())),
        );
        Ok((client, tenant))
    }
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Print the tenant's policy (as doomberg://policies/current shows it).
    Show {
        #[command(flatten)]
        target: Target,
    },
    /// Change the tenant's policy.
    Set {
        #[command(flatten)]
        target: Target,
        /// Allow promotions to paper trading (each still needs a person's approval).
        #[arg(long)]
        trading: Option<OnOff>,
        /// Allow promotions to live trading.
        #[arg(long)]
        live: Option<OnOff>,
        #[arg(long)]
        max_notional_usd: Option<f64>,
        #[arg(long)]
        max_quantity: Option<f64>,
    },
}

#[derive(Debug, clap::Subcommand)]
pub enum ApprovalsCommand {
    /// List approval requests, newest first.
    List {
        #[command(flatten)]
        target: Target,
        /// Only this status (pending, approved, denied, expired, executed, failed).
        #[arg(long)]
        status: Option<String>,
    },
    /// Approve or deny a pending request.
    Decide {
        #[command(flatten)]
        target: Target,
        approval_id: String,
        /// approve or deny.
        decision: String,
        /// Why.
        #[arg(long)]
        note: Option<String>,
    },
}

fn status_error(status: tonic::Status) -> anyhow::Error {
    match status.code() {
        tonic::Code::Unavailable => anyhow::anyhow!(
            "the approvals service is unreachable ({}); is `ithaca up` running?",
            status.message()
        ),
        code => anyhow::anyhow!("{}: {}", code.description(), status.message()),
    }
}

fn print_policy(p: &pb::Policy) {
    let trading = p.trading.as_ref().is_some_and(|t| t.enabled);
    let live = p.live_execution.as_ref().is_some_and(|l| l.enabled);
    println!("tenant   {}", p.tenant_id);
    println!(
        "trading  {}",
        if trading {
            "on (paper, with approval)"
        } else {
            "off (data and backtest only)"
        }
    );
    println!("live     {}", if live { "on" } else { "off" });
    if let Some(e) = &p.execution {
        println!(
            "limits   max notional ${} / max quantity {}",
            e.max_notional_usd, e.max_quantity
        );
    }
}

pub async fn policy(common: &CommonArgs, cmd: PolicyCommand) -> anyhow::Result<()> {
    match cmd {
        PolicyCommand::Show { target } => {
            let (mut c, tenant_id) = target.connect(common)?;
            let p = c
                .get_policy(pb::GetPolicyRequest {
                    tenant_id: Some(tenant_id),
                })
                .await
                .map_err(status_error)?
                .into_inner();
            print_policy(&p);
        }
        PolicyCommand::Set {
            target,
            trading,
            live,
            max_notional_usd,
            max_quantity,
        } => {
            if trading.is_none()
                && live.is_none()
                && max_notional_usd.is_none()
                && max_quantity.is_none()
            {
                bail!(
                    "nothing to change: pass --trading, --live, --max-notional-usd or --max-quantity"
                );
            }
            let (mut c, tenant_id) = target.connect(common)?;
            let on = |v: Option<OnOff>| v.map(|v| matches!(v, OnOff::On));
            let p = c
                .set_policy(pb::SetPolicyRequest {
                    tenant_id,
                    trading_enabled: on(trading),
                    live_enabled: on(live),
                    max_notional_usd,
                    max_quantity,
                })
                .await
                .map_err(status_error)?
                .into_inner();
            print_policy(&p);
        }
    }
    Ok(())
}

pub async fn approvals(common: &CommonArgs, cmd: ApprovalsCommand) -> anyhow::Result<()> {
    match cmd {
        ApprovalsCommand::List { target, status } => {
            let (mut c, tenant_id) = target.connect(common)?;
            let list = c
                .list_approvals(pb::ListApprovalsRequest {
                    tenant_id: Some(tenant_id),
                    status,
                })
                .await
                .map_err(status_error)?
                .into_inner()
                .approvals;
            for a in &list {
                let args = a
                    .arguments
                    .clone()
                    .map(ithaca_kit::json::from_struct)
                    .unwrap_or_default();
                println!(
                    "{}  {:<8}  {}  {}  requested by {} at {}",
                    a.approval_id, a.status, a.tool, args, a.requested_by, a.created_at
                );
            }
            if list.is_empty() {
                println!("no approvals");
            }
        }
        ApprovalsCommand::Decide {
            target,
            approval_id,
            decision,
            note,
        } => {
            let (mut c, tenant_id) = target.connect(common)?;
            let a = c
                .decide_approval(pb::DecideApprovalRequest {
                    approval_id,
                    decision,
                    note,
                    tenant_id: Some(tenant_id),
                })
                .await
                .map_err(status_error)?
                .into_inner();
            println!("{}  {}", a.approval_id, a.status);
            if let Some(result) = a.result {
                println!("result  {}", ithaca_kit::json::from_struct(result));
            }
        }
    }
    Ok(())
}
