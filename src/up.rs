//! `ithaca up`: the whole stack in one process, each service on its own
//! loopback port and talking real gRPC, the MCP edge in front.

use crate::admin::AuthClient;
use crate::edge::{self, EdgeArgs};
use crate::serve::{self, Spec};
use crate::services::Service;
use crate::stack::{self, StackInfo};
use anyhow::Context;
use ithaca_kit::client::{self, Outbound};
use ithaca_kit::config::{self, CommonArgs};
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_kit::shutdown::{self, CancellationToken};
use ithaca_kit::telemetry;
use ithaca_proto::auth::v1 as auth;
use ithaca_proto::auth::v1::auth_service_client::AuthServiceClient;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// The gRPC services of a local stack; each starts after the services it
/// calls ([`Service::dependencies`]).
pub const LOCAL_SERVICES: [Service; 5] = [
    Service::Auth,
    Service::Session,
    Service::Broker,
    Service::Skills,
    Service::Approvals,
];

/// Where and how a local stack's services run.
pub struct StackOptions<'a> {
    pub data_dir: &'a Path,
    /// First port; 0 picks free ports.
    pub port_base: u16,
    /// `DOOMBERG_DB`: a PostgreSQL URL shared by every service, or a SQLite
    /// path prefix; `None` keeps SQLite files under the data directory.
    pub database: Option<&'a str>,
    /// Base of `trace_stream` links; empty where no HTTP edge runs.
    pub public_url: &'a str,
    /// The broker's options.
    pub broker: &'a crate::serve::BrokerArgs,
    /// The services to run here ([`LOCAL_SERVICES`] for `ithaca up`).
    pub services: &'a [Service],
    /// Services that run elsewhere, by URL: the ones here call them there.
    pub elsewhere: &'a [(Service, String)],
    /// Each service's PostgreSQL schema is `{schema_prefix}_{service}`
    /// (`ithaca` for `ithaca up`); SQLite files ignore it.
    pub schema_prefix: &'a str,
}

impl<'a> StackOptions<'a> {
    /// `ithaca up`'s stack: every local service, `ithaca_*` schemas.
    pub fn local(
        data_dir: &'a Path,
        port_base: u16,
        database: Option<&'a str>,
        public_url: &'a str,
        broker: &'a crate::serve::BrokerArgs,
    ) -> Self {
        StackOptions {
            data_dir,
            port_base,
            database,
            public_url,
            broker,
            services: &LOCAL_SERVICES,
            elsewhere: &[],
            schema_prefix: "ithaca",
        }
    }
}

/// The first port of the local stack's gRPC services.
pub const DEFAULT_PORT_BASE: u16 = 50051;

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Where the SQLite files, the internal key and stack.json live.
    #[arg(long, env = "ITHACA_DATA_DIR", default_value = stack::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// First loopback port of the gRPC services: auth gets it, session the
    /// next one, and so on. 0 picks free ports for everything, the MCP edge
    /// included (they are printed and written to stack.json).
    #[arg(long, env = "ITHACA_PORT_BASE", default_value_t = DEFAULT_PORT_BASE)]
    pub port_base: u16,
    /// The MCP edge's port. It wins over --port-base 0, which otherwise
    /// picks a free port for the edge too. [default: 8080]
    #[arg(long, env = "DOOMBERG_MCP_PORT")]
    pub mcp_port: Option<u16>,
    /// Public base URL of the edge, for links such as `trace_stream`
    /// (default: the edge's loopback address).
    #[arg(long, env = "ITHACA_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// A PostgreSQL URL (a schema per service) or a SQLite path `x.db`
    /// (becomes `x.auth.db`, `x.session.db`, …) instead of the data directory.
    #[arg(long = "database", env = "DOOMBERG_DB", hide_env_values = true)]
    pub database: Option<String>,
    /// Deadline of each call the edge makes to a service, in milliseconds
    /// (a tool with a longer deadline of its own, such as subscribe_run,
    /// gets that).
    #[arg(long, env = "ITHACA_BACKEND_TIMEOUT_MS", default_value_t = ithaca_edge::DEFAULT_BACKEND_TIMEOUT.as_millis() as u64)]
    pub backend_timeout_ms: u64,
    #[command(flatten)]
    pub listener: edge::ListenerArgs,
    #[command(flatten)]
    pub limits: edge::LimitArgs,
    #[command(flatten)]
    pub oauth: edge::OAuthArgs,
    #[command(flatten)]
    pub broker: crate::serve::BrokerArgs,
}

/// A running local stack.
pub struct Stack {
    pub tasks: Vec<JoinHandle<anyhow::Result<()>>>,
    /// Every service's URL as callers on this host reach it: the unix
    /// socket of a service started here (where its path fits), else its
    /// port; a service elsewhere by the URL it was given.
    pub urls: Vec<(Service, String)>,
    /// Every service's TCP URL (`http://127.0.0.1:port`): printed, written
    /// to stack.json, for tools that speak only TCP.
    pub tcp_urls: Vec<(Service, String)>,
    /// The first tenant (empty when the stack has no auth service).
    pub tenant_id: String,
    /// The two keys, on first start only.
    pub new_keys: Option<(String, String)>,
}

impl Stack {
    /// How a caller on this host reaches `service` (see [`Stack::urls`]).
    pub fn url(&self, service: Service) -> Option<String> {
        url_of(&self.urls, service)
    }

    /// `service`'s TCP URL.
    pub fn tcp_url(&self, service: Service) -> Option<String> {
        url_of(&self.tcp_urls, service)
    }
}

/// Where a local service's unix socket goes: `<data dir>/sockets/<service>.sock`,
/// or none (and the service is reached on its port alone) when that path is
/// too long for a socket address (108 bytes on Linux, with its final NUL)
/// or the folder cannot be made.
fn socket_path(data_dir: &Path, service: Service) -> Option<PathBuf> {
    let dir = match std::fs::canonicalize(data_dir) {
        Ok(dir) => dir.join("sockets"),
        Err(error) => {
            tracing::warn!(dir = %data_dir.display(), %error, "no unix sockets; the stack talks over TCP");
            return None;
        }
    };
    let path = dir.join(format!("{service}.sock"));
    if path.as_os_str().len() >= 108 {
        tracing::info!(path = %path.display(), "the data directory's path is too long for a unix socket; the stack talks over TCP");
        return None;
    }
    if let Err(error) = ithaca_kit::db::create_private_dir(&dir) {
        tracing::warn!(dir = %dir.display(), %error, "no unix sockets; the stack talks over TCP");
        return None;
    }
    Some(path)
}

/// Open the data directory and its internal key.
pub fn internal_key(common: &CommonArgs, data_dir: &Path) -> anyhow::Result<InternalKey> {
    // Private (0700): it holds the databases and the internal key.
    ithaca_kit::db::create_private_dir(data_dir)
        .with_context(|| format!("creating {}", data_dir.display()))?;
    Ok(match (&common.internal_key, &common.internal_key_file) {
        (None, None) => config::load_or_create_key_file(&stack::key_file(data_dir))?,
        _ => common.internal_key(&stack::key_file(data_dir))?,
    })
}

/// Start the stack's services on loopback, each after the services it
/// calls, make sure a tenant exists (when auth is part of the stack) and
/// load the demo market data (when the broker runs here).
///
/// A service a running one calls but that is neither started here nor
/// named in [`StackOptions::elsewhere`] is simply absent: the caller works
/// without it, as a deployment without that service does.
pub async fn start_services(
    options: &StackOptions<'_>,
    key: &InternalKey,
    shutdown: &CancellationToken,
) -> anyhow::Result<Stack> {
    let mut tasks = Vec::new();
    let mut urls: Vec<(Service, String)> = options.elsewhere.to_vec();
    let mut tcp_urls = urls.clone();
    let mut pending: Vec<Service> = options
        .services
        .iter()
        .copied()
        .filter(|s| *s != Service::Edge && url_of(&urls, *s).is_none())
        .collect();
    let mut started: Vec<Service> = Vec::new();
    while !pending.is_empty() {
        let ready = pending
            .iter()
            .position(|s| s.dependencies().iter().all(|d| !pending.contains(d)))
            .context("the local services' dependencies form a cycle")?;
        let service = pending.remove(ready);
        let port = match options.port_base {
            0 => 0,
            base => base
                .checked_add(service.port_offset())
                .context("--port-base is too high")?,
        };
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let tcp = TcpListener::bind(listen).await.with_context(|| {
            format!("binding {listen} for {service} (is another stack running?)")
        })?;
        let tcp_url = format!("http://{}", tcp.local_addr()?);
        let mut listener = ithaca_kit::server::Listener::from(tcp);
        // Beside the port, a unix socket: the stack's own calls between
        // services (and the edge's) take it, sparing each message the
        // loopback TCP stack. Where it cannot be had (another stack on this
        // data directory serves on it, as when `ithaca mcp` runs beside
        // `ithaca up`), the port does.
        let mut url = tcp_url.clone();
        if let Some(path) = socket_path(options.data_dir, service) {
            match ithaca_kit::server::UnixSocket::bind(&path).await {
                Ok(socket) => {
                    url = socket.url();
                    listener = listener.with_unix(socket);
                }
                Err(error) => {
                    tracing::warn!(%service, %error, "no unix socket for this service; the stack reaches it over TCP");
                }
            }
        }
        let task = serve::start(Spec {
            service,
            listener,
            database_url: stack::database_url(options.database, options.data_dir, service.as_str()),
            schema: format!("{}_{service}", options.schema_prefix),
            key: key.clone(),
            public_url: options.public_url.to_owned(),
            auth_url: url_of(&urls, Service::Auth),
            broker_url: url_of(&urls, Service::Broker),
            session_url: url_of(&urls, Service::Session),
            skills_url: url_of(&urls, Service::Skills),
            alerts: options.broker.alerts_config(),
            shutdown: shutdown.clone(),
        })
        .await?;
        tracing::info!(%service, url = %tcp_url, local = %url, "service started");
        tasks.push(task);
        urls.push((service, url));
        tcp_urls.push((service, tcp_url));
        started.push(service);
    }
    let (tenant_id, new_keys) = match url_of(&urls, Service::Auth) {
        Some(auth_url) => {
            let mut auth = AuthServiceClient::with_interceptor(
                client::channel(&auth_url)?,
                Outbound::new(key.clone(), Principal::system("")),
            );
            let bootstrapped = bootstrap(&mut auth).await?;
            // An open client connection would hold the server's graceful
            // shutdown.
            drop(auth);
            bootstrapped
        }
        None => (String::new(), None),
    };
    if started.contains(&Service::Broker)
        && let Some(url) = url_of(&urls, Service::Broker)
    {
        load_demo_data(&url, key).await?;
    }
    Ok(Stack {
        tasks,
        urls,
        tcp_urls,
        tenant_id,
        new_keys,
    })
}

pub async fn run(common: &CommonArgs, args: UpArgs) -> anyhow::Result<()> {
    let _telemetry = telemetry::init("ithaca", common.log_format)?;
    let key = internal_key(common, &args.data_dir)?;
    let shutdown = shutdown::on_signals();

    // The edge's listener comes first: its address is the public URL that
    // session descriptors link to.
    let mcp_listen = match (args.port_base, args.mcp_port) {
        (_, Some(port)) => SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
        (0, None) => SocketAddr::from((Ipv4Addr::LOCALHOST, 0)),
        (_, None) => edge::listen_on(edge::DEFAULT_MCP_PORT, false),
    };
    let mcp_listener = TcpListener::bind(mcp_listen).await.with_context(|| {
        format!("binding {mcp_listen} for the MCP edge (is another stack running?)")
    })?;
    let edge_url = format!("http://{}", mcp_listener.local_addr()?);
    let public_url = args.public_url.clone().unwrap_or_else(|| edge_url.clone());

    let options = StackOptions::local(
        &args.data_dir,
        args.port_base,
        args.database.as_deref(),
        &public_url,
        &args.broker,
    );
    let mut stack = start_services(&options, &key, &shutdown).await?;
    let edge_args = EdgeArgs {
        backend_timeout_ms: args.backend_timeout_ms,
        listener: args.listener.clone(),
        limits: args.limits.clone(),
        oauth: args.oauth.clone(),
        ..EdgeArgs::local(|s| stack.url(s), &stack.tenant_id)
    };
    let edge_task = edge::start_http(
        &edge_args,
        &key,
        mcp_listener,
        public_url.clone(),
        shutdown.clone(),
    )
    .await?;
    stack.tasks.push(edge_task);

    let mcp_url = format!("{public_url}/mcp");
    StackInfo {
        auth_url: stack.tcp_url(Service::Auth),
        session_url: stack.tcp_url(Service::Session),
        broker_url: stack.tcp_url(Service::Broker),
        approvals_url: stack.tcp_url(Service::Approvals),
        tenant_id: Some(stack.tenant_id.clone()),
        mcp_url: Some(mcp_url.clone()),
    }
    .write(&args.data_dir)?;

    match &stack.new_keys {
        Some((agent, human)) => {
            println!("ithaca: first start; data in {}", args.data_dir.display());
            println!("  tenant     {}", stack.tenant_id);
            println!("  agent key  {agent}");
            println!("  human key  {human}");
            println!("  these keys are shown once; keep them somewhere safe");
        }
        None => {
            println!("ithaca: data kept in {}", args.data_dir.display());
            println!("  tenant   {}", stack.tenant_id);
            println!("  keys are shown only when created; issue new ones with");
            println!("    ithaca keys create --actor agent --scope data:read --label my-agent");
            println!(
                "  and list or revoke them with `ithaca keys list` / `ithaca keys revoke <key-id>`"
            );
        }
    }
    for (service, tcp) in &stack.tcp_urls {
        match stack.url(*service) {
            Some(local) if local != *tcp => println!("  {service:<8} {tcp}  {local}"),
            _ => println!("  {service:<8} {tcp}"),
        }
    }
    println!("  mcp      {mcp_url}");
    let token = stack
        .new_keys
        .as_ref()
        .map_or("<AGENT_KEY>", |(agent, _)| agent.as_str());
    println!("  client config:");
    println!(
        "    {{\"mcpServers\": {{\"{}\": {{\"type\": \"http\", \"url\": \"{mcp_url}\", \"headers\": {{\"Authorization\": \"Bearer {token}\"}}}}}}}}",
        crate::stack::DEFAULT_NAME
    );
    println!("  or let `ithaca connect <agent>` write it into the agent's own file");
    println!("ithaca: ready; press ctrl-c to stop");

    shutdown.cancelled().await;
    let failed = join_all(stack.tasks).await;
    let _ = std::fs::remove_file(stack::stack_file(&args.data_dir));
    println!("ithaca: stopped");
    match failed {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// Wait for every task; the last failure, if any.
pub async fn join_all(tasks: Vec<JoinHandle<anyhow::Result<()>>>) -> Option<anyhow::Error> {
    let mut failed = None;
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => failed = Some(err),
            Err(join) => failed = Some(anyhow::anyhow!("service task: {join}")),
        }
    }
    failed
}

/// On first start, create the tenant and two keys; later starts keep
/// everything. Returns the tenant and, the first time, (agent, human) keys.
async fn bootstrap(auth: &mut AuthClient) -> anyhow::Result<(String, Option<(String, String)>)> {
    let tenants = auth
        .list_tenants(auth::ListTenantsRequest {})
        .await
        .context("asking auth for tenants")?
        .into_inner()
        .tenants;
    if let Some(tenant) = tenants.first() {
        return Ok((tenant.tenant_id.clone(), None));
    }
    let tenant = auth
        .create_tenant(auth::CreateTenantRequest {
            name: "default".to_owned(),
        })
        .await
        .context("creating the first tenant")?
        .into_inner();
    let agent_scopes: Vec<String> = edge::ALL_SCOPES
        .iter()
        .filter(|s| **s != "approvals:decide")
        .map(|s| s.to_string())
        .collect();
    let human_scopes: Vec<String> = edge::ALL_SCOPES.iter().map(|s| s.to_string()).collect();
    let agent = create_key(
        auth,
        &tenant.tenant_id,
        agent_scopes,
        auth::Actor::Agent,
        "local agent",
    )
    .await?;
    let human = create_key(
        auth,
        &tenant.tenant_id,
        human_scopes,
        auth::Actor::Human,
        "local human",
    )
    .await?;
    Ok((tenant.tenant_id, Some((agent, human))))
}

async fn create_key(
    auth: &mut AuthClient,
    tenant_id: &str,
    scopes: Vec<String>,
    actor: auth::Actor,
    label: &str,
) -> anyhow::Result<String> {
    let created = auth
        .create_key(auth::CreateKeyRequest {
            tenant_id: tenant_id.to_owned(),
            scopes,
            actor: actor as i32,
            label: label.to_owned(),
            env: String::new(),
        })
        .await
        .with_context(|| format!("creating the {label} key"))?
        .into_inner();
    Ok(created.token)
}

/// Ingest the shipped demo dataset when the broker has no data yet.
async fn load_demo_data(broker_url: &str, key: &InternalKey) -> anyhow::Result<()> {
    let mut broker = crate::ingest::broker_client(broker_url, key.clone())?;
    let datasets = broker
        .list_datasets(ithaca_proto::broker::v1::ListDatasetsRequest {})
        .await
        .context("asking the broker for datasets")?
        .into_inner()
        .datasets;
    if !datasets.is_empty() {
        return Ok(());
    }
    let file = crate::ingest::parse_bars(crate::ingest::DEMO_NAME, crate::ingest::DEMO_DATASET)?;
    let dataset = crate::ingest::upload_bars(&mut broker, file, |_, _| {}, |_, _| {}).await?;
    tracing::info!(dataset_id = %dataset.dataset_id, rows = dataset.row_count, "demo market data loaded");
    Ok(())
}

fn url_of(urls: &[(Service, String)], service: Service) -> Option<String> {
    urls.iter()
        .find(|(s, _)| *s == service)
        .map(|(_, u)| u.clone())
}
