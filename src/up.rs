//! `ithaca up`: the whole stack in one process, each service on its own
//! loopback port and talking real gRPC.

use crate::admin::AuthClient;
use crate::serve::{self, Spec};
use crate::services::Service;
use crate::stack::{self, StackInfo};
use anyhow::Context;
use ithaca_kit::client::{self, Outbound};
use ithaca_kit::config::{self, CommonArgs};
use ithaca_kit::principal::Principal;
use ithaca_kit::shutdown;
use ithaca_kit::telemetry;
use ithaca_proto::auth::v1 as auth;
use ithaca_proto::auth::v1::auth_service_client::AuthServiceClient;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use tokio::net::TcpListener;

/// The services `ithaca up` runs today. The edge, skills, broker and
/// approvals join this list as their issues land.
const LOCAL_SERVICES: [Service; 2] = [Service::Auth, Service::Session];

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Where the SQLite files, the internal key and stack.json live.
    #[arg(long, env = "ITHACA_DATA_DIR", default_value = stack::DEFAULT_DATA_DIR)]
    pub data_dir: PathBuf,
    /// First loopback port: auth gets it, session the next one, and so on.
    /// 0 picks free ports (they are printed and written to stack.json).
    #[arg(long, env = "ITHACA_PORT_BASE", default_value_t = 50051)]
    pub port_base: u16,
    /// Public base URL of the edge, used in links such as `trace_stream`.
    #[arg(
        long,
        env = "ITHACA_PUBLIC_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub public_url: String,
}

pub async fn run(common: &CommonArgs, args: UpArgs) -> anyhow::Result<()> {
    let _telemetry = telemetry::init("ithaca", common.log_format)?;
    std::fs::create_dir_all(&args.data_dir)
        .with_context(|| format!("creating {}", args.data_dir.display()))?;
    let key = match (&common.internal_key, &common.internal_key_file) {
        (None, None) => config::load_or_create_key_file(&stack::key_file(&args.data_dir))?,
        _ => common.internal_key(&stack::key_file(&args.data_dir))?,
    };
    let doomberg_db = std::env::var("DOOMBERG_DB").ok();
    let shutdown = shutdown::on_signals();

    let mut tasks = Vec::new();
    let mut urls = Vec::new();
    for service in LOCAL_SERVICES {
        let port = match args.port_base {
            0 => 0,
            base => base
                .checked_add(service.port_offset())
                .context("--port-base is too high")?,
        };
        let listen = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let listener = TcpListener::bind(listen).await.with_context(|| {
            format!("binding {listen} for {service} (is another stack running?)")
        })?;
        let url = format!("http://{}", listener.local_addr()?);
        let task = serve::start(Spec {
            service,
            listener,
            database_url: stack::database_url(
                doomberg_db.as_deref(),
                &args.data_dir,
                service.as_str(),
            ),
            schema: format!("ithaca_{service}"),
            key: key.clone(),
            public_url: args.public_url.clone(),
            shutdown: shutdown.clone(),
        })
        .await?;
        tracing::info!(%service, %url, "service started");
        tasks.push(task);
        urls.push((service, url));
    }
    let url_of = |s: Service| {
        urls.iter()
            .find(|(svc, _)| *svc == s)
            .map(|(_, u)| u.clone())
            .unwrap_or_default()
    };
    let auth_url = url_of(Service::Auth);

    let mut auth = AuthServiceClient::with_interceptor(
        client::channel(&auth_url)?,
        Outbound::new(key.clone(), Principal::system("")),
    );
    let tenant_id = bootstrap(&mut auth, &args).await?;
    // An open client connection would hold the server's graceful shutdown.
    drop(auth);
    StackInfo {
        auth_url: Some(auth_url.clone()),
        session_url: Some(url_of(Service::Session)),
        tenant_id: Some(tenant_id),
    }
    .write(&args.data_dir)?;

    for (service, url) in &urls {
        println!("  {service:<8} {url}");
    }
    println!("  edge     (arrives with the MCP edge issue; its port will be 8080)");
    println!("ithaca: ready; press ctrl-c to stop");

    shutdown.cancelled().await;
    let mut failed = None;
    for task in tasks {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => failed = Some(err),
            Err(join) => failed = Some(anyhow::anyhow!("service task: {join}")),
        }
    }
    let _ = std::fs::remove_file(stack::stack_file(&args.data_dir));
    println!("ithaca: stopped");
    match failed {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// On first start, create the tenant and two keys and print them; later
/// starts keep everything and say how to issue new keys.
async fn bootstrap(auth: &mut AuthClient, args: &UpArgs) -> anyhow::Result<String> {
    let tenants = auth
        .list_tenants(auth::ListTenantsRequest {})
        .await
        .context("asking auth for tenants")?
        .into_inner()
        .tenants;
    if let Some(tenant) = tenants.first() {
        println!("ithaca: data kept in {}", args.data_dir.display());
        println!("  tenant   {} ({})", tenant.tenant_id, tenant.name);
        println!("  keys are shown only when created; issue new ones with");
        println!("    ithaca keys create --actor agent --scope data:read --label my-agent");
        println!(
            "  and list or revoke them with `ithaca keys list` / `ithaca keys revoke <key-id>`"
        );
        return Ok(tenant.tenant_id.clone());
    }
    let tenant = auth
        .create_tenant(auth::CreateTenantRequest {
            name: "default".to_owned(),
        })
        .await
        .context("creating the first tenant")?
        .into_inner();
    let all_scopes = [
        "data:read",
        "strategy:author",
        "runs:write",
        "runs:cancel",
        "approvals:read",
        "approvals:decide",
        "artifacts:read",
    ];
    let agent_scopes: Vec<String> = all_scopes
        .iter()
        .filter(|s| **s != "approvals:decide")
        .map(|s| s.to_string())
        .collect();
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
        all_scopes.iter().map(|s| s.to_string()).collect(),
        auth::Actor::Human,
        "local human",
    )
    .await?;
    println!("ithaca: first start; data in {}", args.data_dir.display());
    println!("  tenant     {}", tenant.tenant_id);
    println!("  agent key  {agent}");
    println!("  human key  {human}");
    println!("  these keys are shown once; keep them somewhere safe");
    Ok(tenant.tenant_id)
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
