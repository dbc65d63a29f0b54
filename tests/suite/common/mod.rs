//! Helpers shared by the integration tests: databases (a temporary SQLite
//! file or a fresh PostgreSQL schema), in-process services on port 0,
//! `ithaca` child processes, and signed gRPC clients.

#![allow(dead_code)]

pub mod astro;
pub mod gcn;
pub mod harness;
pub mod http;
pub mod skymap;
pub mod stack;

use ithaca_kit::client::{self, Outbound};
use ithaca_kit::db::Db;
use ithaca_kit::principal::{InternalKey, Principal, VerifiedKey};
use ithaca_kit::shutdown::CancellationToken;
use ithaca_proto::auth::v1::auth_service_client::AuthServiceClient;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

pub type AuthClient = AuthServiceClient<InterceptedService<Channel, Outbound>>;
pub type SessionClient = SessionServiceClient<InterceptedService<Channel, Outbound>>;

/// The internal key every test process shares (hex, 64 characters).
pub const KEY_HEX: &str = "7f3a9c2e51b84d06a1e3f5c7092b4d6e8f0a1c3e5b7d9f1a2c4e6b8d0f2a4c6e";

pub fn key() -> InternalKey {
    InternalKey::new(KEY_HEX.as_bytes().to_vec()).expect("test key is long enough")
}

/// The PostgreSQL URL for this test, or `None` after saying loudly that the
/// test did not run. With `ITHACA_TEST_REQUIRE_POSTGRES` set (as `.ci/run`
/// does) a missing URL fails the test instead.
pub fn postgres(test: &str) -> Option<String> {
    match std::env::var("ITHACA_TEST_POSTGRES_URL") {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            assert!(
                std::env::var_os("ITHACA_TEST_REQUIRE_POSTGRES").is_none(),
                "ITHACA_TEST_REQUIRE_POSTGRES is set but ITHACA_TEST_POSTGRES_URL is not"
            );
            eprintln!(
                "NOT RUN: {test} needs PostgreSQL; set ITHACA_TEST_POSTGRES_URL \
                 (for example postgres://postgres@127.0.0.1:5432/test)"
            );
            None
        }
    }
}

/// A schema name no other test uses.
pub fn unique_schema(prefix: &str) -> String {
    format!(
        "t_{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Drop a test schema and everything in it.
pub async fn drop_schema(url: &str, schema: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .expect("connect to drop schema");
    sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .execute(&mut conn)
        .await
        .expect("drop schema");
}

/// A temporary SQLite file path inside `dir`.
pub fn sqlite_path(dir: &tempfile::TempDir, name: &str) -> String {
    dir.path().join(format!("{name}.db")).display().to_string()
}

/// A service running in this process on a loopback port.
pub struct InProcess {
    pub url: String,
    pub db: Db,
    pub shutdown: CancellationToken,
    pub task: tokio::task::JoinHandle<()>,
}

impl InProcess {
    pub async fn stop(self) {
        self.shutdown.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(15), self.task).await;
    }
}

async fn run_in_process(
    db: Db,
    options: ithaca_kit::server::ServeOptions,
    shutdown: CancellationToken,
) -> InProcess {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
    let url = format!("http://{}", listener.local_addr().expect("bound address"));
    let token = shutdown.clone();
    let task = tokio::spawn(async move {
        ithaca_kit::server::serve(listener, options, token)
            .await
            .expect("server runs");
    });
    InProcess {
        url,
        db,
        shutdown,
        task,
    }
}

/// Serve a service's gRPC `options` on a loopback port until the test's
/// runtime ends; its URL.
pub async fn serve_grpc(options: ithaca_kit::server::ServeOptions) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind port 0");
    let url = format!("http://{}", listener.local_addr().expect("bound address"));
    tokio::spawn(ithaca_kit::server::serve(
        listener,
        options,
        CancellationToken::new(),
    ));
    url
}

pub async fn start_auth(db_url: &str, schema: &str) -> InProcess {
    let db = ithaca_auth::open_db(db_url, schema)
        .await
        .expect("open auth db");
    let options = ithaca_auth::serve_options(db.clone(), key());
    run_in_process(db, options, CancellationToken::new()).await
}

pub async fn start_session(db_url: &str, schema: &str) -> InProcess {
    start_session_with(db_url, schema, ithaca_session::Config::default()).await
}

pub async fn start_session_with(
    db_url: &str,
    schema: &str,
    config: ithaca_session::Config,
) -> InProcess {
    let db = ithaca_session::open_db(db_url, schema)
        .await
        .expect("open session db");
    let shutdown = CancellationToken::new();
    let options = ithaca_session::serve_options(db.clone(), config, key(), shutdown.clone())
        .expect("session options");
    run_in_process(db, options, shutdown).await
}

pub fn auth_client(url: &str, principal: Principal) -> AuthClient {
    AuthServiceClient::with_interceptor(
        client::channel(url).expect("valid url"),
        Outbound::new(key(), principal),
    )
}

pub fn session_client(url: &str, principal: Principal) -> SessionClient {
    SessionServiceClient::with_interceptor(
        client::channel(url).expect("valid url"),
        Outbound::new(key(), principal),
    )
}

/// An agent principal of `tenant` with agent id `agent`.
pub fn agent(tenant: &str, agent: &str) -> Principal {
    Principal::verified(VerifiedKey {
        tenant_id: tenant.to_owned(),
        key_id: agent.to_owned(),
        scopes: vec!["data:read".to_owned()],
        human: false,
    })
}

/// A person of `tenant` with key id `person` (a human key, `data:read`).
pub fn human(tenant: &str, person: &str) -> Principal {
    Principal::verified(VerifiedKey {
        tenant_id: tenant.to_owned(),
        key_id: person.to_owned(),
        scopes: vec!["data:read".to_owned()],
        human: true,
    })
}

/// A new key of `tenant`, minted by the auth service at `auth_url` as the
/// system: the bearer token an MCP client sends.
pub async fn key_for(
    auth_url: &str,
    tenant: &str,
    scopes: &[&str],
    actor: ithaca_proto::auth::v1::Actor,
) -> String {
    auth_client(auth_url, Principal::system(""))
        .create_key(ithaca_proto::auth::v1::CreateKeyRequest {
            tenant_id: tenant.to_owned(),
            scopes: scopes.iter().map(|s| s.to_string()).collect(),
            actor: actor as i32,
            label: "test".into(),
            env: String::new(),
        })
        .await
        .expect("create key")
        .into_inner()
        .token
}

/// For each behaviour `b` (an `async fn b(db: Db)`), a module `b` with two
/// tests: `b::sqlite`, on a fresh SQLite file, and `b::postgres`, on a fresh
/// schema (named after `$prefix`) of the server at `ITHACA_TEST_POSTGRES_URL`,
/// printed as NOT RUN when that is unset and dropped afterwards. `$open`
/// opens a service's database (`ithaca_auth::open_db`, …) and runs its
/// migrations, so every behaviour starts from an empty store.
macro_rules! on_both_databases {
    ($open:path, $prefix:literal => $($behaviour:ident),+ $(,)?) => {$(
        mod $behaviour {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let dir = tempfile::tempdir().expect("tempdir");
                let db = $open(&crate::common::sqlite_path(&dir, $prefix), "unused")
                    .await
                    .expect("open");
                super::$behaviour(db).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                let Some(url) = crate::common::postgres(module_path!()) else {
                    return;
                };
                let schema = crate::common::unique_schema($prefix);
                let db = $open(&url, &schema).await.expect("open");
                super::$behaviour(db.clone()).await;
                db.close().await;
                crate::common::drop_schema(&url, &schema).await;
            }
        }
    )+};
}
pub(crate) use on_both_databases;

/// The `ithaca` binary Cargo built for these tests.
pub fn ithaca() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ithaca"));
    cmd.env("ITHACA_INTERNAL_KEY", KEY_HEX)
        .env_remove("DOOMBERG_DB")
        .env_remove("ITHACA_DATABASE_URL")
        .env("RUST_LOG", "warn");
    cmd
}

/// A child process killed when dropped, with its stdout lines on a channel.
pub struct Process {
    pub child: Child,
    pub lines: mpsc::Receiver<String>,
}

impl Process {
    pub fn spawn(cmd: Command) -> Process {
        Process::spawn_logging_to(cmd, Stdio::inherit())
    }

    /// [`Process::spawn`], its log (stderr) going to `stderr`.
    pub fn spawn_logging_to(mut cmd: Command, stderr: Stdio) -> Process {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("spawn ithaca");
        let stdout = child.stdout.take().expect("stdout is piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Process { child, lines }
    }

    /// Read lines until one contains `needle`; returns every line read.
    pub fn wait_for(&self, needle: &str, timeout: Duration) -> Vec<String> {
        match self.try_wait_for(needle, timeout) {
            Ok(seen) => seen,
            Err(seen) => panic!("no line containing {needle:?} within {timeout:?}; saw {seen:#?}"),
        }
    }

    /// [`Process::wait_for`], or the lines read before the process ended
    /// or the time ran out.
    pub fn try_wait_for(
        &self,
        needle: &str,
        timeout: Duration,
    ) -> Result<Vec<String>, Vec<String>> {
        let deadline = std::time::Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let done = line.contains(needle);
                    seen.push(line);
                    if done {
                        return Ok(seen);
                    }
                }
                Err(_) => return Err(seen),
            }
        }
    }

    /// Send SIGTERM (graceful shutdown) and wait for the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for child") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "process did not stop after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `ithaca up` on free ports in a fresh data directory, with the addresses
/// and keys it printed.
pub struct Up {
    /// The MCP base URL (without `/mcp`).
    pub url: String,
    pub agent: String,
    pub human: String,
    pub auth_url: String,
    pub skills_url: String,
    /// The tenant the printed keys belong to.
    pub tenant: String,
    /// `<dir>/stack`, the data directory `ithaca up` was given.
    pub data_dir: std::path::PathBuf,
    pub process: Process,
    pub dir: tempfile::TempDir,
}

impl Up {
    /// `ithaca ingest <what> <paths>` into this stack's data directory,
    /// which must succeed.
    pub fn ingest(&self, what: &str, paths: &[std::path::PathBuf]) {
        let out = ithaca()
            .args(["ingest", what])
            .args(paths)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .output()
            .expect("run ithaca ingest");
        assert!(
            out.status.success(),
            "ingest {what}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Start `ithaca up` with `env` set, and wait until it is ready.
pub fn up(env: &[(&str, &str)]) -> Up {
    up_logging_to(env, Stdio::inherit())
}

/// [`up`], the stack's log (stderr) going to `stderr` (a test reads it).
pub fn up_logging_to(env: &[(&str, &str)], stderr: Stdio) -> Up {
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("stack");
    let mut cmd = ithaca();
    cmd.args(["up", "--port-base", "0", "--data-dir"])
        .arg(&data_dir)
        .env_remove("DOOMBERG_MCP_PORT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let process = Process::spawn_logging_to(cmd, stderr);
    let lines = process.wait_for("ithaca: ready", Duration::from_secs(90));
    let after = |label: &str| -> String {
        lines
            .iter()
            .find_map(|l| l.trim().strip_prefix(label).map(|v| v.trim().to_owned()))
            .unwrap_or_else(|| panic!("no {label:?} line in {lines:#?}"))
    };
    Up {
        url: after("mcp ").trim_end_matches("/mcp").to_owned(),
        agent: after("agent key"),
        human: after("human key"),
        auth_url: first_word(&after("auth ")),
        skills_url: first_word(&after("skills ")),
        tenant: after("tenant "),
        data_dir,
        process,
        dir,
    }
}

/// A service's TCP URL from its line of `ithaca up`, which also names its
/// unix socket after it.
fn first_word(urls: &str) -> String {
    urls.split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// `ithaca serve <service>` on a free loopback port; returns the process and
/// its URL.
pub fn serve(service: &str, database_url: &str, schema: &str) -> (Process, String) {
    let mut cmd = ithaca();
    cmd.args([
        "serve",
        service,
        "--listen",
        "127.0.0.1:0",
        "--database-url",
        database_url,
        "--db-schema",
        schema,
    ]);
    let process = Process::spawn(cmd);
    let lines = process.wait_for("listening on", Duration::from_secs(60));
    let addr = lines
        .last()
        .and_then(|l| l.rsplit(' ').next())
        .expect("listening line has an address")
        .to_owned();
    (process, format!("http://{addr}"))
}

/// The `{"error", "message", "retryable"?}` body of a tool error result.
/// Errors travel as text content only: a tool's output schema describes its
/// success, so an error must carry no `structuredContent` that breaks it.
pub fn tool_error(result: &serde_json::Value) -> serde_json::Value {
    assert_eq!(result["isError"], true, "not a tool error: {result}");
    assert!(
        result.get("structuredContent").is_none(),
        "a tool error must not carry structuredContent: {result}"
    );
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("a tool error needs a text block: {result}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("error text is not JSON ({e}): {text}"))
}
