//! The one way a test starts a stack in this process: [`StackBuilder`].
//!
//! It runs the production wiring of the `ithaca` library —
//! [`ithaca::up::start_services`] and [`ithaca::edge::start_http`], the
//! calls `ithaca up` makes — on port 0, on SQLite files in a temporary
//! folder or in fresh PostgreSQL schemas, and hands back a [`TestStack`]
//! with typed helpers: keys, an MCP caller, ingest. What a test changes is
//! said through the same options an operator sets (`EdgeArgs`, the services
//! to run, a service that runs elsewhere), so a test exercises what ships.
//!
//! Stacks of separate `ithaca serve` processes are [`super::stack`]'s (the
//! replica and fault tests); a single `ithaca up` process is [`super::up`].

use super::http::{self, Reply};
use ithaca::edge::{AuthMode, EdgeArgs};
use ithaca::ingest::{IngestCommand, Target};
use ithaca::serve::BrokerArgs;
use ithaca::services::Service;
use ithaca::up::{self, LOCAL_SERVICES, StackOptions};
use ithaca_kit::config::CommonArgs;
use ithaca_kit::shutdown::CancellationToken;
use ithaca_proto::auth::v1 as pb;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

type EdgeChange = Box<dyn FnOnce(&mut EdgeArgs) + Send>;

/// What stack to start. [`StackBuilder::new`] is `ithaca up`'s: every
/// service, SQLite, the edge with keys and the console.
pub struct StackBuilder {
    services: Vec<Service>,
    elsewhere: Vec<(Service, String)>,
    postgres: Option<(String, String)>,
    edge: Option<Vec<EdgeChange>>,
    advertise: bool,
    broker: BrokerArgs,
}

impl Default for StackBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl StackBuilder {
    /// Every local service on SQLite, and the edge in front of them.
    pub fn new() -> Self {
        StackBuilder {
            services: LOCAL_SERVICES.to_vec(),
            elsewhere: Vec::new(),
            postgres: None,
            edge: Some(Vec::new()),
            advertise: false,
            broker: BrokerArgs::default(),
        }
    }

    /// Run only these services here (the others are absent unless
    /// [`elsewhere`](Self::elsewhere) names them).
    pub fn services(mut self, services: &[Service]) -> Self {
        self.services = services.to_vec();
        self
    }

    /// `service` runs at `url` (a stalled fake, another stack's): the
    /// services here and the edge call it there.
    pub fn elsewhere(mut self, service: Service, url: impl Into<String>) -> Self {
        self.services.retain(|s| *s != service);
        self.elsewhere.push((service, url.into()));
        self
    }

    /// Store in the schemas `{schema_prefix}_<service>` of the PostgreSQL
    /// server at `url` (make the prefix with [`super::unique_schema`]);
    /// [`TestStack::stop`] drops them.
    pub fn postgres(mut self, url: &str, schema_prefix: &str) -> Self {
        self.postgres = Some((url.to_owned(), schema_prefix.to_owned()));
        self
    }

    /// Change the edge's options, as its flags would (repeatable).
    pub fn edge(mut self, change: impl FnOnce(&mut EdgeArgs) + Send + 'static) -> Self {
        self.edge
            .get_or_insert_with(Vec::new)
            .push(Box::new(change));
        self
    }

    /// The edge advertises its own URL to other replicas
    /// (`--advertise-url`), as each replica behind a balancer does.
    pub fn advertise(mut self) -> Self {
        self.advertise = true;
        self
    }

    /// No services of its own: the edge fronts the conformance fixture at
    /// `fixture_url` alone (its tools learned through reflection, run
    /// without a session gate, as only a protocol fixture may).
    pub fn fronting_fixture(self, fixture_url: String) -> Self {
        self.services(&[]).edge(move |e| {
            e.backends = vec![fixture_url];
            e.backend_timeout_ms = 5000;
            e.no_session_gate = true;
        })
    }

    /// No edge: the services alone.
    pub fn without_edge(mut self) -> Self {
        self.edge = None;
        self
    }

    /// An edge that verifies no keys: one local agent with every scope, of
    /// the stack's tenant or, without auth, of tenant `local` (`--tenant`
    /// changes it), on loopback only (`--auth off`).
    pub fn unauthenticated(self) -> Self {
        self.edge(|e| e.auth = AuthMode::Off)
    }

    /// The broker's options (`--ztf-schema-dir`).
    pub fn broker(mut self, broker: BrokerArgs) -> Self {
        self.broker = broker;
        self
    }

    /// Start it: the services in dependency order, the tenant and its two
    /// keys, the demo market data (with a broker), then the edge. Panics
    /// with the cause when anything fails to start.
    pub async fn start(self) -> TestStack {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = super::key();
        let shutdown = CancellationToken::new();
        // The edge's address is the public URL session descriptors and
        // OAuth metadata name, so it is bound first, as `ithaca up` does.
        let edge_listener = match self.edge {
            Some(_) => Some(TcpListener::bind("127.0.0.1:0").await.expect("bind edge")),
            None => None,
        };
        let url = edge_listener
            .as_ref()
            .map(|l| format!("http://{}", l.local_addr().expect("edge address")))
            .unwrap_or_default();
        let (database, schema_prefix) = match &self.postgres {
            Some((url, prefix)) => (Some(url.as_str()), prefix.as_str()),
            None => (None, "unused"),
        };
        let options = StackOptions {
            services: &self.services,
            elsewhere: &self.elsewhere,
            schema_prefix,
            ..StackOptions::local(dir.path(), 0, database, &url, &self.broker)
        };
        let mut started = up::start_services(&options, &key, &shutdown)
            .await
            .expect("the stack's services start");
        let mut tasks = std::mem::take(&mut started.tasks);
        let (agent, human) = started.new_keys.clone().unwrap_or_default();
        if let (Some(changes), Some(listener)) = (self.edge, edge_listener) {
            let mut args = EdgeArgs::local(|s| started.url(s), &started.tenant_id);
            if started.tenant_id.is_empty() {
                // `--tenant`'s default, for an edge without auth.
                args.local_tenant = "local".to_owned();
            }
            for change in changes {
                change(&mut args);
            }
            if self.advertise {
                args.advertise_url = Some(url.clone());
            }
            let task =
                ithaca::edge::start_http(&args, &key, listener, url.clone(), shutdown.clone())
                    .await
                    .expect("the edge starts");
            tasks.push(task);
        }
        TestStack {
            url,
            tenant: started.tenant_id.clone(),
            agent,
            human,
            urls: started.tcp_urls,
            postgres: self.postgres,
            services: self.services,
            shutdown,
            tasks,
            dir,
        }
    }
}

/// The conformance fixture (`tests/fixture`) on a loopback port until the
/// test's runtime ends; its URL.
pub async fn serve_fixture() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(ithaca_fixture::serve(listener, std::future::pending()));
    url
}

/// A running stack. Dropping it stops its services; [`stop`](Self::stop)
/// also waits for them and drops its PostgreSQL schemas.
pub struct TestStack {
    /// The edge's base URL (`http://127.0.0.1:port`; empty without an edge).
    pub url: String,
    /// The tenant the stack made on its first start.
    pub tenant: String,
    /// That tenant's agent key: every scope but `approvals:decide`.
    pub agent: String,
    /// That tenant's human key: every scope.
    pub human: String,
    urls: Vec<(Service, String)>,
    postgres: Option<(String, String)>,
    services: Vec<Service>,
    shutdown: CancellationToken,
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
    dir: tempfile::TempDir,
}

impl TestStack {
    /// Where `service` listens (started here or elsewhere).
    pub fn url_of(&self, service: Service) -> String {
        self.urls
            .iter()
            .find(|(s, _)| *s == service)
            .map(|(_, u)| u.clone())
            .unwrap_or_else(|| panic!("this stack has no {service} service"))
    }

    /// The MCP endpoint.
    pub fn mcp_url(&self) -> String {
        format!("{}/mcp", self.url)
    }

    /// The stack's data folder (SQLite files, anything a test writes).
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// A new key of the stack's tenant.
    pub async fn key(&self, scopes: &[&str], actor: pb::Actor) -> String {
        super::key_for(&self.url_of(Service::Auth), &self.tenant, scopes, actor).await
    }

    /// A new agent key of the stack's tenant with every agent scope.
    pub async fn agent_key(&self) -> String {
        let scopes: Vec<&str> = ithaca_proto::scopes::ALL
            .into_iter()
            .filter(|s| *s != "approvals:decide")
            .collect();
        self.key(&scopes, pb::Actor::Agent).await
    }

    /// An MCP caller of the edge with `token`, speaking 2026-07-28.
    pub fn mcp<'a>(&'a self, token: &'a str) -> Mcp<'a> {
        Mcp {
            base: &self.url,
            token,
        }
    }

    /// The global options an administration command of this stack runs
    /// with: the stack's internal key.
    pub fn common_args(&self) -> CommonArgs {
        CommonArgs {
            log_format: ithaca_kit::telemetry::LogFormat::Text,
            internal_key: Some(super::KEY_HEX.to_owned()),
            internal_key_file: None,
        }
    }

    /// `ithaca ingest <what>` against this stack's broker; panics with the
    /// command's error.
    pub async fn ingest(&self, command: IngestCommand) {
        ithaca::ingest::run(&self.common_args(), command)
            .await
            .expect("ingest");
    }

    /// `ithaca brokers add`: an alert broker answering `operations`, with
    /// its connection details and a credential (read from a file, as an
    /// operator passes it).
    pub async fn add_broker(
        &self,
        id: &str,
        name: &str,
        operations: &[&str],
        altdata: Value,
        credential: &str,
    ) {
        let credential_file = self.dir.path().join(format!("{id}.credential"));
        std::fs::write(&credential_file, credential).expect("write the credential file");
        let command = ithaca::brokers::BrokersCommand::Add {
            id: id.to_owned(),
            name: name.to_owned(),
            operations: operations.iter().map(|o| o.to_string()).collect(),
            survey: "ZTF".to_owned(),
            altdata_json: altdata.to_string(),
            credential_file: Some(credential_file.clone()),
            credential_stdin: false,
            target: self.ingest_target(),
        };
        let added = ithaca::brokers::run(&self.common_args(), command).await;
        std::fs::remove_file(&credential_file).expect("remove the credential file");
        added.expect("brokers add");
    }

    /// Where `ithaca ingest` sends: this stack's broker.
    pub fn ingest_target(&self) -> Target {
        Target {
            broker_url: Some(self.url_of(Service::Broker)),
            data_dir: self.dir.path().to_owned(),
        }
    }

    /// Ingest ZTF alert files or folders into the archive broker.
    pub async fn ingest_ztf(&self, paths: &[PathBuf]) {
        self.ingest(IngestCommand::Ztf {
            paths: paths.to_vec(),
            broker: ithaca_broker::alerts::service::ARCHIVE_BROKER.to_owned(),
            target: self.ingest_target(),
        })
        .await;
    }

    /// Ingest a reference catalog CSV.
    pub async fn ingest_catalog(&self, file: PathBuf) {
        self.ingest(IngestCommand::Catalog {
            file,
            target: self.ingest_target(),
        })
        .await;
    }

    /// Stop every service and the edge, wait for them (bounded), and drop
    /// the PostgreSQL schemas.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        for task in std::mem::take(&mut self.tasks) {
            let _ = tokio::time::timeout(Duration::from_secs(15), task).await;
        }
        if let Some((url, prefix)) = self.postgres.take() {
            for service in &self.services {
                super::drop_schema(&url, &format!("{prefix}_{service}")).await;
            }
        }
    }
}

impl Drop for TestStack {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A 2026-07-28 MCP client of one edge with one bearer token.
pub struct Mcp<'a> {
    base: &'a str,
    token: &'a str,
}

impl Mcp<'_> {
    /// Any request; its raw reply.
    pub async fn request(&self, method: &str, params: Value) -> Reply {
        http::modern(self.base, self.token, method, params).await
    }

    /// `tools/call`: the JSON-RPC `result` (a tool error is a result with
    /// `isError`); panics on a protocol error.
    pub async fn call(&self, name: &str, arguments: Value) -> Value {
        let reply = self
            .request(
                "tools/call",
                serde_json::json!({"name": name, "arguments": arguments}),
            )
            .await;
        assert_eq!(reply.status, 200, "{name}: {}", reply.text());
        let body = reply.json();
        assert!(
            body.get("error").is_none(),
            "{name}: protocol error {}",
            body["error"]
        );
        body["result"].clone()
    }
}
