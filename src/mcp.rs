//! `ithaca mcp`: MCP for an agent that launches Ithaca itself. Over stdio by
//! default (no authentication: the local machine is the trust boundary), or
//! the HTTP stack when `DOOMBERG_MCP_TRANSPORT=http`.

use crate::edge::{self, EdgeArgs};
use crate::services::Service;
use crate::stack;
use crate::up::{self, UpArgs};
use ithaca_kit::config::CommonArgs;
use ithaca_kit::shutdown;
use ithaca_kit::telemetry;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    Stdio,
    Http,
}

#[derive(Debug, clap::Args)]
pub struct McpArgs {
    /// stdio (default) or http.
    #[arg(
        long,
        env = "DOOMBERG_MCP_TRANSPORT",
        default_value = "stdio",
        ignore_case = true
    )]
    pub transport: Transport,
    /// Data directory of the in-process services (SQLite, internal key).
    #[arg(long, env = "ITHACA_DATA_DIR", default_value = stack::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// A PostgreSQL URL or a SQLite path prefix for the in-process
    /// services (see `ithaca up --database`).
    #[arg(long = "database", env = "DOOMBERG_DB", hide_env_values = true)]
    pub database: Option<String>,
    /// With `--transport http`: the MCP edge's port (default 8080, seed
    /// 000's `DOOMBERG_MCP_PORT`), as `ithaca up --mcp-port`.
    #[arg(long, env = "DOOMBERG_MCP_PORT")]
    pub mcp_port: Option<u16>,
    /// With `--transport http`: the first port of the services, as `ithaca
    /// up --port-base` (0: any free ports).
    #[arg(long, env = "ITHACA_PORT_BASE", default_value_t = up::DEFAULT_PORT_BASE)]
    pub port_base: u16,
    #[command(flatten)]
    pub broker: crate::serve::BrokerArgs,
    #[command(flatten)]
    pub edge: EdgeArgs,
}

pub async fn run(common: &CommonArgs, args: McpArgs) -> anyhow::Result<()> {
    if args.transport == Transport::Http {
        let up_args = UpArgs {
            data_dir: args.data_dir,
            port_base: args.port_base,
            mcp_port: args.mcp_port,
            public_url: None,
            database: args.database,
            backend_timeout_ms: args.edge.backend_timeout_ms,
            listener: args.edge.listener,
            limits: args.edge.limits,
            oauth: args.edge.oauth,
            broker: args.broker,
        };
        return up::run(common, up_args).await;
    }
    // stdout carries the protocol; logs go to stderr.
    let _telemetry = telemetry::init_with("ithaca-mcp", common.log_format, "warn")?;
    let key = up::internal_key(common, &args.data_dir)?;
    if args.edge.auth_url.is_some()
        || args.edge.session_url.is_some()
        || !args.edge.backends.is_empty()
    {
        // A thin stdio edge in front of configured services.
        let principal = edge::local_principal(&args.edge.local_tenant);
        return edge::run_stdio(&args.edge, &key, principal).await;
    }
    let shutdown = shutdown::on_signals();
    // No HTTP edge serves this process, so sessions link no SSE stream;
    // their descriptors point to the trace resource instead.
    let options = up::StackOptions::local(
        &args.data_dir,
        0,
        args.database.as_deref(),
        "",
        &args.broker,
    );
    let stack = up::start_services(&options, &key, &shutdown).await?;
    let edge_args = EdgeArgs {
        auth_url: stack.url(Service::Auth),
        session_url: stack.url(Service::Session),
        broker_url: stack.url(Service::Broker),
        skills_url: stack.url(Service::Skills),
        approvals_url: stack.url(Service::Approvals),
        ..args.edge
    };
    let principal = edge::local_principal(&stack.tenant_id);
    tracing::info!(tenant_id = %stack.tenant_id, agent_id = %principal.agent(), "serving MCP over stdio");
    let result = edge::run_stdio(&edge_args, &key, principal).await;
    shutdown.cancel();
    if let Some(err) = up::join_all(stack.tasks).await {
        tracing::warn!(error = %err, "a service stopped with an error");
    }
    result
}
