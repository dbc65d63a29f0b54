//! `ithaca serve <service>`: one service in its own process (a pod).

use crate::services::Service;
use anyhow::{Context, bail};
use ithaca_kit::config::CommonArgs;
use ithaca_kit::principal::InternalKey;
use ithaca_kit::shutdown::{self, CancellationToken};
use ithaca_kit::telemetry;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// The service to run: edge, auth, session, skills, broker or approvals.
    pub service: Service,
    /// Address to listen on (default: all interfaces, the service's port).
    #[arg(long, env = "ITHACA_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Also listen on this unix socket, for callers on the same host: they
    /// pass `unix:<path>` as the service's URL (`--session-url
    /// unix:/run/ithaca/session.sock`) and skip the TCP stack. A file left
    /// there by a stopped server is replaced; the file is removed on exit.
    #[arg(long, env = "ITHACA_UNIX_SOCKET")]
    pub unix_socket: Option<PathBuf>,
    /// A PostgreSQL URL or a SQLite file path.
    #[arg(long, env = "ITHACA_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Seed 000's name for the database URL, used when --database-url is not.
    #[arg(long = "doomberg-db", env = "DOOMBERG_DB", hide_env_values = true)]
    pub doomberg_db: Option<String>,
    /// The PostgreSQL schema (default: ithaca_<service>).
    #[arg(long, env = "ITHACA_DB_SCHEMA")]
    pub db_schema: Option<String>,
    /// Public base URL of the edge, used in links such as `trace_stream`.
    #[arg(
        long,
        env = "ITHACA_PUBLIC_URL",
        default_value = ithaca_edge::front::HttpOptions::DEFAULT_PUBLIC_URL
    )]
    pub public_url: String,
    /// The edge's port when --listen is not given (seed 000's variable).
    #[arg(long, env = "DOOMBERG_MCP_PORT")]
    pub mcp_port: Option<u16>,
    /// Options of the broker (ignored by the other services).
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Options of the edge (ignored by the other services).
    #[command(flatten)]
    pub edge: crate::edge::EdgeArgs,
}

/// Options of the broker, shared by `serve`, `up` and `mcp`: the library
/// reads no environment, so the binary hands it its configuration.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct BrokerArgs {
    /// The ZTF alert schema files `get_alert_schema` answers from before
    /// any alert is ingested: a folder of `v<version>/` folders of `.avsc`
    /// files, or one such folder [default: ../shared/data/ztf/schema when
    /// it exists].
    #[arg(long, env = "ITHACA_ZTF_SCHEMA_DIR")]
    pub ztf_schema_dir: Option<PathBuf>,
}

impl BrokerArgs {
    /// The folder checked when no other is given: the shared data beside a
    /// checkout.
    const DEFAULT_SCHEMA_DIR: &str = "../shared/data/ztf/schema";

    /// The broker's alerts configuration: the folder given, else the
    /// default one when it exists, else none.
    pub fn alerts_config(&self) -> ithaca_broker::alerts::AlertsConfig {
        let schema_dir = self.ztf_schema_dir.clone().or_else(|| {
            let default = PathBuf::from(Self::DEFAULT_SCHEMA_DIR);
            default.is_dir().then_some(default)
        });
        ithaca_broker::alerts::AlertsConfig { schema_dir }
    }
}

/// Everything needed to start one service on a bound listener.
pub struct Spec {
    pub service: Service,
    /// Its TCP port, and a unix socket beside it where there is one.
    pub listener: ithaca_kit::server::Listener,
    pub database_url: String,
    pub schema: String,
    pub key: InternalKey,
    pub public_url: String,
    /// Services this one calls (skills calls broker and session; session
    /// calls broker to check subjects; approvals calls auth, session and
    /// the owning services).
    pub auth_url: Option<String>,
    pub broker_url: Option<String>,
    pub session_url: Option<String>,
    pub skills_url: Option<String>,
    /// The broker's alert schema files (ignored by the other services).
    pub alerts: ithaca_broker::alerts::AlertsConfig,
    pub shutdown: CancellationToken,
}

/// A duration in whole seconds from the environment (0 turns the feature
/// off), or `default`.
fn env_secs(name: &str, default: std::time::Duration) -> anyhow::Result<std::time::Duration> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .map(std::time::Duration::from_secs)
            .with_context(|| format!("{name}: expected whole seconds, got {text:?}")),
    }
}

/// The authorization server's lifetimes; tests shorten them through
/// `ITHACA_OAUTH_CODE_TTL_SECS` and `ITHACA_OAUTH_ACCESS_TTL_SECS`.
fn oauth_config() -> anyhow::Result<ithaca_auth::oauth::OAuthConfig> {
    let defaults = ithaca_auth::oauth::OAuthConfig::default();
    let ms = |d: std::time::Duration| d.as_millis() as i64;
    let secs = |ms: i64| std::time::Duration::from_millis(ms as u64);
    Ok(ithaca_auth::oauth::OAuthConfig {
        code_ttl_ms: ms(env_secs(
            "ITHACA_OAUTH_CODE_TTL_SECS",
            secs(defaults.code_ttl_ms),
        )?)
        .max(1000),
        access_ttl_ms: ms(env_secs(
            "ITHACA_OAUTH_ACCESS_TTL_SECS",
            secs(defaults.access_ttl_ms),
        )?)
        .max(1000),
        ..defaults
    })
}

/// Open the service's database, then serve it in a background task.
pub async fn start(spec: Spec) -> anyhow::Result<JoinHandle<anyhow::Result<()>>> {
    let Spec {
        service,
        listener,
        database_url,
        schema,
        key,
        public_url,
        auth_url,
        broker_url,
        session_url,
        skills_url,
        alerts,
        shutdown,
    } = spec;
    // The database whose migrations the server's health follows.
    let schema_db;
    let mut options = match service {
        Service::Auth => {
            let db = ithaca_auth::open_db(&database_url, &schema)
                .await
                .with_context(|| format!("opening the {service} database"))?;
            schema_db = Some(db.clone());
            ithaca_auth::serve_options_with(db, key, oauth_config()?)
        }
        Service::Session => {
            let db = ithaca_session::open_db(&database_url, &schema)
                .await
                .with_context(|| format!("opening the {service} database"))?;
            schema_db = Some(db.clone());
            let config = ithaca_session::Config {
                public_url,
                broker_url,
                idle_timeout: env_secs(
                    "ITHACA_SESSION_IDLE_TIMEOUT_SECS",
                    ithaca_session::service::DEFAULT_IDLE_TIMEOUT,
                )?,
                archive_after: env_secs(
                    "ITHACA_SESSION_ARCHIVE_AFTER_SECS",
                    ithaca_session::service::DEFAULT_ARCHIVE_AFTER,
                )?,
                ..Default::default()
            };
            ithaca_session::serve_options(db, config, key, shutdown.clone())?
        }
        Service::Broker => {
            let db = ithaca_broker::open_db(&database_url, &schema)
                .await
                .with_context(|| format!("opening the {service} database"))?;
            schema_db = Some(db.clone());
            // Account configs written before they were sealed are sealed
            // now, before anything is served.
            ithaca_broker::account_service(db.clone(), &key)
                .seal_account_configs()
                .await
                .context("sealing provider account configs")?;
            ithaca_broker::serve_options_with(db, key, alerts)
        }
        Service::Skills => {
            let db = ithaca_skills::open_db(&database_url, &schema)
                .await
                .with_context(|| format!("opening the {service} database"))?;
            schema_db = Some(db.clone());
            let config = ithaca_skills::Config {
                broker_url,
                session_url,
            };
            ithaca_skills::serve_options(db, key, &config, shutdown.clone())?
        }
        Service::Approvals => {
            let db = ithaca_approvals::open_db(&database_url, &schema)
                .await
                .with_context(|| format!("opening the {service} database"))?;
            schema_db = Some(db.clone());
            let config = ithaca_approvals::Config {
                auth_url,
                skills_url,
                session_url,
                broker_url,
            };
            ithaca_approvals::serve_options(db, key, &config)?
        }
        Service::Edge => bail!("the edge has no database; start it with `ithaca serve edge`"),
    };
    options.schema = schema_db;
    Ok(tokio::spawn(async move {
        ithaca_kit::server::serve(listener, options, shutdown)
            .await
            .with_context(|| format!("{service} server"))
    }))
}

pub async fn run(common: &CommonArgs, args: ServeArgs) -> anyhow::Result<()> {
    let _telemetry = telemetry::init(&format!("ithaca-{}", args.service), common.log_format)?;
    let key = common.internal_key(&crate::stack::key_file(Path::new(
        crate::stack::DEFAULT_DATA_DIR,
    )))?;
    if args.service == Service::Edge {
        return run_edge(key, args).await;
    }
    let database_url = args.database_url.or(args.doomberg_db).with_context(
        || "no database: pass --database-url or set ITHACA_DATABASE_URL or DOOMBERG_DB",
    )?;
    let listen = args
        .listen
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], args.service.default_port())));
    let tcp = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = tcp.local_addr()?;
    let mut listener = ithaca_kit::server::Listener::from(tcp);
    let mut unix_url = None;
    if let Some(path) = &args.unix_socket {
        let socket = ithaca_kit::server::UnixSocket::bind(path)
            .await
            .context("binding --unix-socket")?;
        unix_url = Some(socket.url());
        listener = listener.with_unix(socket);
    }
    let shutdown = shutdown::on_signals();
    let task = start(Spec {
        service: args.service,
        listener,
        database_url,
        schema: args
            .db_schema
            .unwrap_or_else(|| format!("ithaca_{}", args.service)),
        key,
        public_url: args.public_url,
        auth_url: args.edge.auth_url.clone(),
        broker_url: args.edge.broker_url.clone(),
        session_url: args.edge.session_url.clone(),
        skills_url: args.edge.skills_url.clone(),
        alerts: args.broker.alerts_config(),
        shutdown: shutdown.clone(),
    })
    .await?;
    tracing::info!(service = %args.service, %addr, "serving");
    // A machine-readable line for scripts and tests that bind port 0.
    println!("ithaca: {} listening on {addr}", args.service);
    if let Some(url) = unix_url {
        println!("ithaca: {} listening on {url}", args.service);
    }
    // The server task ends after the service's background tasks finished.
    task.await.context("server task")?
}

/// `ithaca migrate <service>`: the database of one service.
#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// The service whose schema to migrate: auth, session, skills, broker or
    /// approvals.
    pub service: Service,
    /// A PostgreSQL URL or a SQLite file path.
    #[arg(long, env = "ITHACA_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Seed 000's name for the database URL, used when --database-url is not.
    #[arg(long = "doomberg-db", env = "DOOMBERG_DB", hide_env_values = true)]
    pub doomberg_db: Option<String>,
    /// The PostgreSQL schema (default: ithaca_<service>).
    #[arg(long, env = "ITHACA_DB_SCHEMA")]
    pub db_schema: Option<String>,
}

/// Apply a service's migrations and exit: the init container of a rolling
/// upgrade (deploy/README.md). Replicas migrating together take turns
/// (sqlx holds an advisory lock on PostgreSQL), and a schema already
/// current is left as it is.
pub async fn migrate(common: &CommonArgs, args: MigrateArgs) -> anyhow::Result<()> {
    let _telemetry = telemetry::init(
        &format!("ithaca-migrate-{}", args.service),
        common.log_format,
    )?;
    let url = args.database_url.or(args.doomberg_db).with_context(
        || "no database: pass --database-url or set ITHACA_DATABASE_URL or DOOMBERG_DB",
    )?;
    let schema = args
        .db_schema
        .unwrap_or_else(|| format!("ithaca_{}", args.service));
    let service = args.service;
    let opened = match service {
        Service::Auth => ithaca_auth::open_db(&url, &schema).await,
        Service::Session => ithaca_session::open_db(&url, &schema).await,
        Service::Skills => ithaca_skills::open_db(&url, &schema).await,
        Service::Broker => ithaca_broker::open_db(&url, &schema).await,
        Service::Approvals => ithaca_approvals::open_db(&url, &schema).await,
        Service::Edge => bail!("the edge has no database to migrate"),
    };
    let db = opened.with_context(|| format!("migrating the {service} database"))?;
    let state = db
        .schema_state()
        .await
        .context("reading the applied migrations")?;
    db.close().await;
    if state != ithaca_kit::db::SchemaState::Current {
        bail!("the {service} schema is not this version's after migrating: {state:?}");
    }
    println!("ithaca: {service} schema is current");
    Ok(())
}

async fn run_edge(key: InternalKey, args: ServeArgs) -> anyhow::Result<()> {
    let listen = args.listen.unwrap_or_else(|| {
        crate::edge::listen_on(args.mcp_port.unwrap_or(crate::edge::DEFAULT_MCP_PORT), true)
    });
    let listener = TcpListener::bind(listen)
        .await
        .with_context(|| format!("binding {listen}"))?;
    let addr = listener.local_addr()?;
    let shutdown = shutdown::on_signals();
    let task =
        crate::edge::start_http(&args.edge, &key, listener, args.public_url, shutdown).await?;
    tracing::info!(service = "edge", %addr, "serving");
    println!("ithaca: edge listening on {addr}");
    task.await.context("edge task")?
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, clap::Parser)]
    struct Cli {
        #[command(flatten)]
        broker: BrokerArgs,
    }

    /// The folder given on the command line is the one the broker library
    /// is handed, whatever the environment or working directory hold.
    #[test]
    fn the_schema_folder_option_reaches_the_alerts_config() {
        let cli = Cli::try_parse_from(["ithaca", "--ztf-schema-dir", "/srv/ztf/schema"])
            .expect("the option parses");
        assert_eq!(
            cli.broker.alerts_config().schema_dir,
            Some(PathBuf::from("/srv/ztf/schema"))
        );
    }
}
