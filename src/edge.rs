//! Running the MCP edge: over HTTP (`serve edge`, `up`) and over stdio
//! (`ithaca mcp`).

use anyhow::{Context, bail};
use ithaca_edge::auth::{Authenticator, MAX_CACHE_TTL};
use ithaca_edge::front::{Callers, HttpOptions};
use ithaca_edge::listener::Limits;
use ithaca_edge::{Backends, mcp::Gateway};
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_kit::shutdown::CancellationToken;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// Every scope; local callers (stdio, authentication off) hold them all.
pub use ithaca_proto::scopes::ALL as ALL_SCOPES;

/// Edge options shared by `serve edge`, `up` and `mcp`.
#[derive(Debug, Clone, clap::Args)]
pub struct EdgeArgs {
    /// The auth service URL (required unless --auth off).
    #[arg(long, env = "ITHACA_AUTH_URL")]
    pub auth_url: Option<String>,
    /// The session service URL: the session gate and the trace.
    #[arg(long, env = "ITHACA_SESSION_URL")]
    pub session_url: Option<String>,
    /// The broker service URL (market data tools).
    #[arg(long, env = "ITHACA_BROKER_URL")]
    pub broker_url: Option<String>,
    /// The skills service URL (skill catalog and runs).
    #[arg(long, env = "ITHACA_SKILLS_URL")]
    pub skills_url: Option<String>,
    /// The approvals service URL (policy and approvals).
    #[arg(long, env = "ITHACA_APPROVALS_URL")]
    pub approvals_url: Option<String>,
    /// Another backend whose tools are learned from its gRPC reflection
    /// (repeatable).
    #[arg(long = "backend", env = "ITHACA_BACKENDS", value_delimiter = ',')]
    pub backends: Vec<String>,
    /// `on` verifies bearer keys; `off` serves one local principal and only
    /// on loopback.
    #[arg(long, env = "ITHACA_EDGE_AUTH", default_value = "on")]
    pub auth: AuthMode,
    /// Tenant of the local principal when authentication is off.
    #[arg(long, env = "ITHACA_TENANT", default_value = "local")]
    pub local_tenant: String,
    /// Largest request body in bytes.
    #[arg(long, env = "ITHACA_BODY_LIMIT", default_value_t = HttpOptions::DEFAULT_BODY_LIMIT)]
    pub body_limit: usize,
    /// Longest a request may take, in milliseconds (a tool with a longer
    /// deadline of its own, such as subscribe_run, gets that).
    #[arg(long, env = "ITHACA_REQUEST_TIMEOUT_MS", default_value_t = HttpOptions::DEFAULT_REQUEST_TIMEOUT.as_millis() as u64)]
    pub request_timeout_ms: u64,
    /// Deadline of each backend call, in milliseconds.
    #[arg(long, env = "ITHACA_BACKEND_TIMEOUT_MS", default_value_t = ithaca_edge::DEFAULT_BACKEND_TIMEOUT.as_millis() as u64)]
    pub backend_timeout_ms: u64,
    /// How long a verified key is trusted before auth is asked again, in
    /// milliseconds (at most 5000).
    #[arg(long, env = "ITHACA_KEY_CACHE_MS", default_value_t = MAX_CACHE_TTL.as_millis() as u64)]
    pub key_cache_ms: u64,
    /// A browser origin allowed to call the edge cross-origin, such as
    /// `https://console.example` (repeatable; `*` allows any). CORS is off
    /// without one.
    #[arg(
        long = "cors-origin",
        env = "ITHACA_CORS_ORIGINS",
        value_delimiter = ','
    )]
    pub cors_origins: Vec<String>,
    /// Serve tools without a session service: no session gate and no trace.
    /// Only for protocol fixtures (the conformance suite); without a session
    /// service and without this flag, an edge with tools refuses to start.
    #[arg(long, env = "ITHACA_NO_SESSION_GATE")]
    pub no_session_gate: bool,
    /// This replica's URL as the other edge replicas reach it (for example
    /// `http://10.0.0.5:8080`), for several replicas behind a balancer
    /// without affinity: a legacy client's answer to a request made during
    /// a call (elicitation, sampling, roots) that lands on another replica
    /// is forwarded here. Every replica needs the same internal key.
    #[arg(long, env = "ITHACA_ADVERTISE_URL")]
    pub advertise_url: Option<String>,
    #[command(flatten)]
    pub listener: ListenerArgs,
    #[command(flatten)]
    pub limits: LimitArgs,
    #[command(flatten)]
    pub oauth: OAuthArgs,
}

/// External identity providers whose JWT access tokens the edge accepts
/// beside `dmbg_` keys (`ithaca serve edge`, `ithaca up`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OAuthArgs {
    /// An OAuth issuer (Keycloak realm, Entra ID tenant, Auth0 or Okta
    /// domain, exactly as its tokens' `iss` says) whose JWT access tokens
    /// are accepted (repeatable or comma-separated). Its metadata and JWKS
    /// are read over https (plain http only to loopback). A token must have
    /// `aud` = `{public URL}/mcp`, and acts as an agent of the tenant its
    /// tenant claim names.
    #[arg(
        long = "oauth-issuer",
        env = "ITHACA_OAUTH_ISSUERS",
        value_delimiter = ','
    )]
    pub issuers: Vec<String>,
    /// The access-token claim whose value is the Ithaca tenant id; a token
    /// naming a tenant that does not exist is refused.
    #[arg(long, env = "ITHACA_OAUTH_TENANT_CLAIM", default_value = ithaca_edge::oauth::DEFAULT_TENANT_CLAIM)]
    pub oauth_tenant_claim: String,
}

impl OAuthArgs {
    /// The verifier's configuration for an edge at `public_url`, or `None`
    /// when no issuer is trusted.
    fn config(&self, public_url: &str) -> Option<ithaca_edge::oauth::OAuthConfig> {
        (!self.issuers.is_empty()).then(|| ithaca_edge::oauth::OAuthConfig {
            issuers: self.issuers.clone(),
            tenant_claim: self.oauth_tenant_claim.clone(),
            resource: format!("{}/mcp", public_url.trim_end_matches('/')),
        })
    }
}

/// Rate limits, quotas and backend concurrency (`ithaca serve edge`,
/// `ithaca up`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LimitArgs {
    /// Requests one API key may make per window, as N/PERIOD: `120/1m`,
    /// `10/s`, a daily quota `50000/1d` (repeatable or comma-separated;
    /// none by default). Over it the edge answers 429 with Retry-After.
    /// Counted in the auth service, so every edge replica shares one budget.
    #[arg(
        long = "rate-limit-key",
        env = "ITHACA_RATE_LIMIT_KEY",
        value_delimiter = ','
    )]
    pub per_key: Vec<ithaca_edge::limits::Rule>,
    /// Requests all keys of one tenant may make together per window, as
    /// N/PERIOD (repeatable or comma-separated; none by default).
    #[arg(
        long = "rate-limit-tenant",
        env = "ITHACA_RATE_LIMIT_TENANT",
        value_delimiter = ','
    )]
    pub per_tenant: Vec<ithaca_edge::limits::Rule>,
    /// Calls the edge keeps in flight to one backend at most; more are
    /// refused at once with the retryable BACKEND_BUSY, so one slow service
    /// cannot hold every connection of the edge.
    #[arg(long, env = "ITHACA_BACKEND_MAX_IN_FLIGHT", default_value_t = ithaca_edge::backend::DEFAULT_MAX_IN_FLIGHT, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(1..), |n| n as usize))]
    pub backend_max_in_flight: usize,
}

impl LimitArgs {
    fn rate_limits(&self) -> ithaca_edge::limits::RateLimits {
        ithaca_edge::limits::RateLimits {
            per_key: self.per_key.clone(),
            per_tenant: self.per_tenant.clone(),
        }
    }
}

/// The HTTP listener's limits (`ithaca serve edge`, `ithaca up`): what a
/// slow or idle client may hold, and how many connections are served.
#[derive(Debug, Clone, clap::Args)]
pub struct ListenerArgs {
    /// How long a client may take to send a request's headers, in
    /// milliseconds (a new connection: from when it was accepted).
    #[arg(long, env = "ITHACA_HEADER_TIMEOUT_MS", default_value_t = Limits::DEFAULT_HEADER_TIMEOUT.as_millis() as u64)]
    pub header_timeout_ms: u64,
    /// How long a client may take to send a request's whole body after its
    /// headers, in milliseconds (slower is 408).
    #[arg(long, env = "ITHACA_BODY_TIMEOUT_MS", default_value_t = Limits::DEFAULT_BODY_TIMEOUT.as_millis() as u64)]
    pub body_timeout_ms: u64,
    /// How long a connection may stay open with no request in flight, in
    /// milliseconds (an open trace stream is a request in flight).
    #[arg(long, env = "ITHACA_IDLE_TIMEOUT_MS", default_value_t = Limits::DEFAULT_IDLE_TIMEOUT.as_millis() as u64)]
    pub idle_timeout_ms: u64,
    /// Connections served at once; more are answered 503 and closed.
    #[arg(long, env = "ITHACA_MAX_CONNECTIONS", default_value_t = Limits::DEFAULT_MAX_CONNECTIONS, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(1..), |n| n as usize))]
    pub max_connections: usize,
}

impl Default for ListenerArgs {
    fn default() -> Self {
        ListenerArgs::from(Limits::default())
    }
}

impl From<Limits> for ListenerArgs {
    fn from(limits: Limits) -> Self {
        ListenerArgs {
            header_timeout_ms: limits.header_timeout.as_millis() as u64,
            body_timeout_ms: limits.body_timeout.as_millis() as u64,
            idle_timeout_ms: limits.idle_timeout.as_millis() as u64,
            max_connections: limits.max_connections,
        }
    }
}

impl ListenerArgs {
    pub fn limits(&self) -> Limits {
        Limits {
            header_timeout: Duration::from_millis(self.header_timeout_ms),
            body_timeout: Duration::from_millis(self.body_timeout_ms),
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            max_connections: self.max_connections,
        }
    }
}

impl EdgeArgs {
    /// The edge of a local stack: every built-in service, keys verified,
    /// and every other knob at its default.
    pub fn local(urls: impl Fn(crate::services::Service) -> Option<String>, tenant: &str) -> Self {
        use crate::services::Service;
        EdgeArgs {
            auth_url: urls(Service::Auth),
            session_url: urls(Service::Session),
            broker_url: urls(Service::Broker),
            skills_url: urls(Service::Skills),
            approvals_url: urls(Service::Approvals),
            backends: Vec::new(),
            auth: AuthMode::On,
            local_tenant: tenant.to_owned(),
            body_limit: HttpOptions::DEFAULT_BODY_LIMIT,
            request_timeout_ms: HttpOptions::DEFAULT_REQUEST_TIMEOUT.as_millis() as u64,
            backend_timeout_ms: ithaca_edge::DEFAULT_BACKEND_TIMEOUT.as_millis() as u64,
            key_cache_ms: MAX_CACHE_TTL.as_millis() as u64,
            cors_origins: Vec::new(),
            no_session_gate: false,
            advertise_url: None,
            listener: ListenerArgs::default(),
            limits: LimitArgs {
                backend_max_in_flight: ithaca_edge::backend::DEFAULT_MAX_IN_FLIGHT,
                ..LimitArgs::default()
            },
            oauth: OAuthArgs {
                issuers: Vec::new(),
                oauth_tenant_claim: ithaca_edge::oauth::DEFAULT_TENANT_CLAIM.to_owned(),
            },
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AuthMode {
    On,
    Off,
}

/// The principal of a local, unauthenticated caller: every scope, an agent
/// id unique to this process.
pub fn local_principal(tenant: &str) -> Principal {
    let agent = format!("local-{}", uuid::Uuid::new_v4().simple());
    Principal::local_agent(tenant, agent, ALL_SCOPES)
}

async fn core(args: &EdgeArgs, key: &InternalKey) -> anyhow::Result<Arc<ithaca_edge::core::Core>> {
    let backends = Backends {
        auth_url: args.auth_url.clone(),
        session_url: args.session_url.clone(),
        broker_url: args.broker_url.clone(),
        skills_url: args.skills_url.clone(),
        approvals_url: args.approvals_url.clone(),
        reflected: args.backends.clone(),
        timeout: Duration::from_millis(args.backend_timeout_ms),
        max_in_flight: args.limits.backend_max_in_flight,
        ungated: args.no_session_gate,
    };
    let core = ithaca_edge::build_core(&backends, key.clone())
        .await
        .context("building the MCP catalog")?;
    Ok(Arc::new(core))
}

/// Start the HTTP edge on `listener` in a background task.
pub async fn start_http(
    args: &EdgeArgs,
    key: &InternalKey,
    listener: TcpListener,
    public_url: String,
    shutdown: CancellationToken,
) -> anyhow::Result<JoinHandle<anyhow::Result<()>>> {
    let addr = listener.local_addr()?;
    let key_cache = Duration::from_millis(args.key_cache_ms).min(MAX_CACHE_TTL);
    let mut console = None;
    let callers = match args.auth {
        AuthMode::On => {
            let url = args
                .auth_url
                .as_deref()
                .context("--auth-url is required while authentication is on")?;
            let channel = ithaca_kit::client::channel(url)?;
            let mut authenticator = Authenticator::new(channel, key.clone(), key_cache)
                .with_timeout(Duration::from_millis(args.backend_timeout_ms))
                .with_resource(format!("{}/mcp", public_url.trim_end_matches('/')));
            if let Some(config) = args.oauth.config(&public_url) {
                authenticator = authenticator
                    .with_oauth(config)
                    .context("configuring --oauth-issuer")?;
            }
            // The console's sign-in counts failed key checks with the
            // edge's doors: a client throttled at one is at all.
            console = Some(console_for(
                args,
                key,
                url,
                &public_url,
                key_cache,
                &authenticator,
            )?);
            Callers::Keys(Box::new(authenticator))
        }
        AuthMode::Off => {
            if !addr.ip().is_loopback() {
                bail!(
                    "refusing to serve MCP without authentication on {addr}: bind a loopback address or turn --auth on"
                );
            }
            Callers::Local(local_principal(&args.local_tenant))
        }
    };
    let core = core(args, key).await?;
    let options = HttpOptions {
        public_url,
        body_limit: args.body_limit,
        request_timeout: Duration::from_millis(args.request_timeout_ms),
        cors_origins: args.cors_origins.clone(),
        rate_limits: args.limits.rate_limits(),
        advertise_url: args.advertise_url.clone(),
    };
    // The console is mounted beside the edge's routes; the edge's trace
    // stream accepts its sign-ins, and nothing else of the edge knows it.
    let browser = console
        .clone()
        .map(|c| c as Arc<dyn ithaca_edge::front::BrowserAuth>);
    let mut app = ithaca_edge::front::router_with(core, callers, options, browser);
    if let Some(console) = console {
        app = app.merge(ithaca_console::router(console));
    }
    let limits = args.listener.limits();
    Ok(tokio::spawn(async move {
        let server = ithaca_edge::listener::serve(listener, app, limits, shutdown.clone());
        tokio::select! {
            () = server => Ok(()),
            _ = async { shutdown.cancelled().await; tokio::time::sleep(ithaca_kit::server::DRAIN_TIMEOUT).await } => {
                tracing::warn!("edge requests did not finish in time; stopping anyway");
                Ok(())
            }
        }
    }))
}

/// The web console of an edge whose callers use keys. People sign in with
/// human keys, verified like bearer keys (with their own short cache).
fn console_for(
    args: &EdgeArgs,
    key: &InternalKey,
    auth_url: &str,
    public_url: &str,
    key_cache: Duration,
    edge: &Authenticator,
) -> anyhow::Result<Arc<ithaca_console::Console>> {
    let backends = ithaca_console::backends::Backends::from_urls(
        auth_url,
        args.session_url.as_deref(),
        args.approvals_url.as_deref(),
        args.skills_url.as_deref(),
        args.broker_url.as_deref(),
        Duration::from_millis(args.backend_timeout_ms),
    )?;
    let authenticator = Authenticator::new(
        ithaca_kit::client::channel(auth_url)?,
        key.clone(),
        key_cache,
    )
    .with_timeout(Duration::from_millis(args.backend_timeout_ms))
    .sharing_failures_with(edge);
    // Test stacks serve client metadata documents on loopback, over https
    // with a certificate the test made (a DER file), or plain http.
    let allow_private =
        std::env::var("ITHACA_OAUTH_ALLOW_PRIVATE_METADATA").is_ok_and(|v| v == "1" || v == "true");
    let mut test_roots = Vec::new();
    if allow_private
        && let Ok(path) = std::env::var("ITHACA_OAUTH_METADATA_TEST_CA")
        && !path.is_empty()
    {
        let der = std::fs::read(&path).map_err(|e| {
            anyhow::anyhow!("ITHACA_OAUTH_METADATA_TEST_CA: cannot read {path}: {e}")
        })?;
        test_roots.push(der);
    }
    Ok(ithaca_console::Console::new(ithaca_console::Config {
        key: key.clone(),
        authenticator,
        backends,
        public_url: public_url.to_owned(),
        oauth_allow_private_metadata: allow_private,
        oauth_metadata_test_roots: test_roots,
    }))
}

/// Serve MCP on stdin/stdout for `principal` until the client closes stdin.
pub async fn run_stdio(
    args: &EdgeArgs,
    key: &InternalKey,
    principal: Principal,
) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    let core = core(args, key).await?;
    let gateway = Gateway::stdio(core, principal);
    let running = match gateway.serve(rmcp::transport::stdio()).await {
        Ok(r) => r,
        // A client that hangs up before its first request is not an error.
        Err(err) => {
            tracing::info!(error = %err, "stdio client left before any request");
            return Ok(());
        }
    };
    if let Err(err) = running.waiting().await {
        tracing::info!(error = %err, "stdio session ended");
    }
    Ok(())
}

/// The MCP edge's port when none is given (seed 000's `DOOMBERG_MCP_PORT`).
pub const DEFAULT_MCP_PORT: u16 = 8080;

/// The listen address of the HTTP edge on `port`.
pub fn listen_on(port: u16, all_interfaces: bool) -> SocketAddr {
    if all_interfaces {
        SocketAddr::from(([0, 0, 0, 0], port))
    } else {
        SocketAddr::from(([127, 0, 0, 1], port))
    }
}
