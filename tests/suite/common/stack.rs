//! A replicated stack of real `ithaca serve` processes on PostgreSQL, behind
//! HAProxy (issue 15): two edges, two session replicas, one each of auth,
//! broker, skills and approvals, every service in a fresh schema of its own
//! (dropped by [`Stack::stop`]). The balancer runs `deploy/local/haproxy.cfg`,
//! the file an operator runs, so the test exercises what is shipped.
//!
//! Edge A talks to session replica A and edge B to session replica B, so
//! calls balanced over the edges are spread over both session replicas;
//! both replicas write the same schema.
//!
//! Also here: a raw MCP call that reports what came back (or that nothing
//! did) instead of panicking, an SSE reader, and the trace read-back checks
//! the fault tests share.

use super::{Process, http};
use ithaca_kit::principal::Principal;
use ithaca_proto::auth::v1 as apb;
use ithaca_proto::session::v1 as spb;
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The edges' deadline for each call to a service.
pub const BACKEND_TIMEOUT: Duration = Duration::from_secs(2);
/// The edges' bound on a whole request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// A request with no answer after this long has hung: well past every
/// deadline above, so reaching it is a failure, never a slow machine.
pub const HANG: Duration = Duration::from_secs(45);

/// The HAProxy binary: `ITHACA_HAPROXY`, `haproxy` on the `PATH`, or
/// Debian's `/usr/sbin/haproxy` (not on a normal user's `PATH`).
pub fn haproxy() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ITHACA_HAPROXY") {
        return Some(PathBuf::from(path));
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
        .map(|dir: PathBuf| dir.join("haproxy"))
        .find(|p| p.is_file())
}

/// PostgreSQL and HAProxy for `test`, or `None` after printing NOT RUN.
/// With `ITHACA_TEST_REQUIRE_POSTGRES` set (as `.ci/run` does) a missing
/// HAProxy fails the test: CI installs it.
pub fn requirements(test: &str) -> Option<(String, PathBuf)> {
    let pg = super::postgres(test)?;
    match haproxy() {
        Some(h) => Some((pg, h)),
        None => {
            assert!(
                std::env::var_os("ITHACA_TEST_REQUIRE_POSTGRES").is_none(),
                "{test}: HAProxy is missing (apt-get install haproxy, or set ITHACA_HAPROXY); \
                 ITHACA_TEST_REQUIRE_POSTGRES is set, so this fails instead of skipping"
            );
            eprintln!("NOT RUN: {test} needs HAProxy (apt-get install haproxy)");
            None
        }
    }
}

/// One `ithaca serve` process that can be killed and started again on the
/// same address.
pub struct Node {
    pub name: &'static str,
    args: Vec<String>,
    /// `127.0.0.1:port`, kept across restarts.
    pub addr: String,
    process: Option<Process>,
}

impl Node {
    /// `ithaca <args> --listen 127.0.0.1:0`; waits for its listening line.
    pub fn start(name: &'static str, args: Vec<String>) -> Node {
        let mut node = Node {
            name,
            args,
            addr: "127.0.0.1:0".to_owned(),
            process: None,
        };
        node.spawn();
        node
    }

    fn spawn(&mut self) {
        // A restart binds the address it had. In the full suite another
        // test's socket can hold that port for a moment (a port-0 bind, or
        // a client's connect to the dead port that the kernel gave the
        // same number as its source port): the process then exits at once
        // ("Address already in use"), and is started again shortly after.
        let mut attempts_left = if self.addr.ends_with(":0") { 1 } else { 25 };
        let (process, lines) = loop {
            let mut cmd = super::ithaca();
            cmd.args(&self.args).args(["--listen", &self.addr]);
            let mut process = Process::spawn(cmd);
            // The wait blocks a thread; inside a multi-threaded runtime, let
            // the other tasks (the load) go on meanwhile.
            let wait = || process.try_wait_for("listening on", Duration::from_secs(60));
            let waited = match tokio::runtime::Handle::try_current() {
                Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                    tokio::task::block_in_place(wait)
                }
                _ => wait(),
            };
            attempts_left -= 1;
            let exited = waited.is_err() && has_exited(&mut process);
            match waited {
                Ok(lines) => break (process, lines),
                Err(seen) if attempts_left == 0 || !exited => panic!(
                    "{} did not print \"listening on\" on {}; saw {seen:#?}",
                    self.name, self.addr
                ),
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        };
        self.addr = lines
            .last()
            .and_then(|l| l.rsplit(' ').next())
            .expect("listening line has an address")
            .to_owned();
        self.process = Some(process);
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// SIGKILL: no shutdown, no drain, nothing flushed.
    pub fn kill(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.child.kill().expect("SIGKILL");
            p.child.wait().expect("reap");
        }
    }

    /// SIGTERM: a graceful shutdown; its exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut p = self.process.take().expect("running");
        p.terminate()
    }

    /// Start it again on its address; returns once it listens.
    pub fn restart(&mut self) {
        assert!(self.process.is_none(), "{} is still running", self.name);
        self.spawn();
    }

    pub fn pid(&self) -> u32 {
        self.process.as_ref().expect("running").child.id()
    }
}

/// Whether `process` ended, given a second to be reaped (its stdout
/// closes a moment before its exit can be seen).
fn has_exited(process: &mut Process) -> bool {
    for _ in 0..20 {
        if matches!(process.child.try_wait(), Ok(Some(_))) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// HAProxy running `deploy/local/haproxy.cfg` in the foreground.
pub struct Balancer {
    pub url: String,
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The shipped configuration with its addresses filled in.
pub fn haproxy_config(listen: &str, edge_a: &str, edge_b: &str) -> String {
    include_str!("../../../deploy/local/haproxy.cfg")
        .replace("@LISTEN@", listen)
        .replace("@EDGE_A@", edge_a)
        .replace("@EDGE_B@", edge_b)
}

impl Balancer {
    async fn start(binary: &Path, edge_a: &str, edge_b: &str) -> Balancer {
        // HAProxy binds its own port; take a free one and hand it over.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let listen = format!("127.0.0.1:{port}");
        let dir = tempfile::tempdir().expect("tempdir");
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(&cfg, haproxy_config(&listen, edge_a, edge_b)).expect("write cfg");
        let child = Command::new(binary)
            .arg("-db")
            .arg("-f")
            .arg(&cfg)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start haproxy");
        let balancer = Balancer {
            url: format!("http://{listen}"),
            child,
            _dir: dir,
        };
        // Ready when both edges answered through it.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut seen = HashSet::new();
        while seen.len() < 2 {
            assert!(Instant::now() < deadline, "haproxy did not come up");
            if let Ok(reply) = get(&balancer.url, "/healthz").await
                && reply.status == 200
                && let Some(edge) = reply.header("x-ithaca-edge")
            {
                seen.insert(edge.to_owned());
                continue;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        balancer
    }
}

/// Keys of the stack's tenant.
pub struct Keys {
    pub tenant: String,
    pub agents: Vec<String>,
    pub human: String,
}

/// The whole replicated stack.
pub struct Stack {
    pub pg: String,
    schemas: Vec<String>,
    pub auth: Node,
    pub sessions: Vec<Node>,
    pub broker: Node,
    pub skills: Node,
    pub approvals: Node,
    pub edges: Vec<Node>,
    pub lb: Balancer,
    pub keys: Keys,
}

/// `serve <service>` on PostgreSQL schema `schema`, plus `extra` flags.
fn serve_args(service: &str, pg: &str, schema: &str, extra: &[String]) -> Vec<String> {
    let mut args: Vec<String> = [
        "serve",
        service,
        "--database-url",
        pg,
        "--db-schema",
        schema,
    ]
    .map(str::to_owned)
    .to_vec();
    args.extend_from_slice(extra);
    args
}

fn flags(pairs: &[(&str, String)]) -> Vec<String> {
    pairs
        .iter()
        .flat_map(|(k, v)| [format!("--{k}"), v.clone()])
        .collect()
}

impl Stack {
    /// Start everything, with `agents` agent keys and one human key.
    /// `backend` is an extra gRPC backend both edges learn by reflection.
    pub async fn start(pg: &str, haproxy: &Path, agents: usize, backend: Option<&str>) -> Stack {
        let run = super::unique_schema("rep");
        let schema = |svc: &str| format!("{run}_{svc}");
        let auth = Node::start("auth", serve_args("auth", pg, &schema("auth"), &[]));
        let broker = Node::start("broker", serve_args("broker", pg, &schema("broker"), &[]));
        // Sessions check a subject against the broker.
        let sessions: Vec<Node> = ["session-a", "session-b"]
            .into_iter()
            .map(|name| {
                let extra = flags(&[("broker-url", broker.url())]);
                Node::start(name, serve_args("session", pg, &schema("session"), &extra))
            })
            .collect();
        let skills = Node::start(
            "skills",
            serve_args(
                "skills",
                pg,
                &schema("skills"),
                &flags(&[
                    ("broker-url", broker.url()),
                    ("session-url", sessions[0].url()),
                ]),
            ),
        );
        let approvals = Node::start(
            "approvals",
            serve_args(
                "approvals",
                pg,
                &schema("approvals"),
                &flags(&[
                    ("auth-url", auth.url()),
                    ("broker-url", broker.url()),
                    ("session-url", sessions[0].url()),
                    ("skills-url", skills.url()),
                ]),
            ),
        );
        // The edges' public URL is the balancer's; its port is known only
        // once HAProxy runs, and loopback hosts are accepted anyway.
        let edges: Vec<Node> = [("edge-a", &sessions[0]), ("edge-b", &sessions[1])]
            .into_iter()
            .map(|(name, session)| {
                let mut extra = flags(&[
                    ("auth-url", auth.url()),
                    ("session-url", session.url()),
                    ("broker-url", broker.url()),
                    ("skills-url", skills.url()),
                    ("approvals-url", approvals.url()),
                    (
                        "backend-timeout-ms",
                        BACKEND_TIMEOUT.as_millis().to_string(),
                    ),
                    (
                        "request-timeout-ms",
                        REQUEST_TIMEOUT.as_millis().to_string(),
                    ),
                    ("key-cache-ms", "1000".to_owned()),
                ]);
                if let Some(url) = backend {
                    extra.extend(flags(&[("backend", url.to_owned())]));
                }
                let mut args = vec!["serve".to_owned(), "edge".to_owned()];
                args.extend(extra);
                Node::start(name, args)
            })
            .collect();
        let lb = Balancer::start(haproxy, &edges[0].addr, &edges[1].addr).await;
        let keys = keys(&auth.url(), agents).await;
        Stack {
            pg: pg.to_owned(),
            schemas: ["auth", "session", "broker", "skills", "approvals"]
                .map(schema)
                .to_vec(),
            auth,
            sessions,
            broker,
            skills,
            approvals,
            edges,
            lb,
            keys,
        }
    }

    /// Stop every process, then drop the schemas.
    pub async fn stop(self) {
        let Stack {
            pg,
            schemas,
            auth,
            sessions,
            broker,
            skills,
            approvals,
            edges,
            lb,
            ..
        } = self;
        drop(lb);
        drop((edges, approvals, skills, broker, sessions, auth));
        for schema in schemas {
            super::drop_schema(&pg, &schema).await;
        }
    }

    /// A session client (any replica) for reading traces back.
    pub fn reader(&self, session: usize) -> super::SessionClient {
        super::session_client(
            &self.sessions[session].url(),
            super::human(&self.keys.tenant, "auditor"),
        )
    }
}

async fn keys(auth_url: &str, agents: usize) -> Keys {
    let mut auth = super::auth_client(auth_url, Principal::system(""));
    let tenant = auth
        .create_tenant(apb::CreateTenantRequest {
            name: "replicas".into(),
        })
        .await
        .expect("tenant")
        .into_inner()
        .tenant_id;
    let scopes: Vec<String> = ithaca_proto::scopes::ALL
        .into_iter()
        .filter(|s| *s != "approvals:decide")
        .map(str::to_owned)
        .collect();
    let mut tokens = Vec::new();
    for _ in 0..agents {
        tokens.push(create_key(&mut auth, &tenant, &scopes, apb::Actor::Agent).await);
    }
    let human = create_key(&mut auth, &tenant, &scopes, apb::Actor::Human).await;
    Keys {
        tenant,
        agents: tokens,
        human,
    }
}

async fn create_key(
    auth: &mut super::AuthClient,
    tenant: &str,
    scopes: &[String],
    actor: apb::Actor,
) -> String {
    auth.create_key(apb::CreateKeyRequest {
        tenant_id: tenant.to_owned(),
        scopes: scopes.to_vec(),
        actor: actor as i32,
        label: "replicas".into(),
        env: String::new(),
    })
    .await
    .expect("create key")
    .into_inner()
    .token
}

// ---------------------------------------------------------------------------
// Calls that report instead of panicking.

/// What one MCP call got back.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// A tool result (`structuredContent`).
    Ok(Value),
    /// A tool error: `{"error", "message", "retryable"?}`.
    ToolError(Value),
    /// An HTTP status other than 200 (the balancer's 502/503, say).
    Http(u16, String),
    /// No answer: the connection failed, or nothing came within [`HANG`].
    NoAnswer(String),
}

impl Outcome {
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Ok(_))
    }

    /// A short label for counting: `ok`, the tool error's code, `HTTP 502`.
    pub fn label(&self) -> String {
        match self {
            Outcome::Ok(_) => "ok".to_owned(),
            Outcome::ToolError(e) => e["error"].as_str().unwrap_or("?").to_owned(),
            Outcome::Http(s, _) => format!("HTTP {s}"),
            Outcome::NoAnswer(_) => "no answer".to_owned(),
        }
    }
}

/// One call as the caller saw it.
#[derive(Clone, Debug)]
pub struct Answer {
    pub outcome: Outcome,
    /// The edge that answered (the balancer's `X-Ithaca-Edge`).
    pub edge: Option<String>,
    /// The `Retry-After` of an HTTP error.
    pub retry_after: Option<String>,
    pub took: Duration,
}

async fn exchange(base: &str, head: String, body: &[u8]) -> Result<http::Reply, String> {
    let authority = base.trim_start_matches("http://").to_owned();
    let io = async {
        let mut stream = TcpStream::connect(&authority)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|e| format!("write: {e}"))?;
        stream
            .write_all(body)
            .await
            .map_err(|e| format!("write: {e}"))?;
        let mut raw = Vec::new();
        stream
            .read_to_end(&mut raw)
            .await
            .map_err(|e| format!("read: {e}"))?;
        if !raw.windows(4).any(|w| w == b"\r\n\r\n") {
            return Err(format!(
                "connection closed without a response ({} bytes)",
                raw.len()
            ));
        }
        Ok(http::parse(&raw))
    };
    match tokio::time::timeout(HANG, io).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {HANG:?}")),
    }
}

/// `GET path` on `base`.
pub async fn get(base: &str, path: &str) -> Result<http::Reply, String> {
    let authority = base.trim_start_matches("http://");
    let head = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
    exchange(base, head, b"").await
}

/// `tools/call` of `tool` (2026-07-28 era) on `base` with `token`.
pub async fn call(base: &str, token: &str, tool: &str, arguments: Value) -> Answer {
    let started = Instant::now();
    let meta = http::modern_meta();
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": meta},
    })
    .to_string();
    let authority = base.trim_start_matches("http://");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\
         Content-Length: {}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\nMcp-Name: {tool}\r\n\r\n",
        body.len()
    );
    let reply = exchange(base, head, body.as_bytes()).await;
    let took = started.elapsed();
    let mut retry_after = None;
    let (outcome, edge) = match reply {
        Err(why) => (Outcome::NoAnswer(why), None),
        Ok(reply) => {
            let edge = reply.header("x-ithaca-edge").map(str::to_owned);
            retry_after = reply.header("retry-after").map(str::to_owned);
            let outcome = if reply.status != 200 {
                Outcome::Http(reply.status, reply.text())
            } else {
                match serde_json::from_slice::<Value>(&reply.body) {
                    Err(e) => Outcome::Http(200, format!("not JSON ({e}): {}", reply.text())),
                    Ok(v) if v["result"]["isError"] == false => {
                        Outcome::Ok(v["result"]["structuredContent"].clone())
                    }
                    Ok(v) if v["result"]["isError"] == true => {
                        Outcome::ToolError(super::tool_error(&v["result"]))
                    }
                    Ok(v) => Outcome::Http(200, format!("JSON-RPC error: {v}")),
                }
            };
            (outcome, edge)
        }
    };
    Answer {
        outcome,
        edge,
        retry_after,
        took,
    }
}

/// `session_context` through `base`; the session id. Panics unless it
/// succeeds: only called where nothing is broken.
pub async fn open_session(base: &str, token: &str, prompt: &str, join: Option<&str>) -> String {
    let mut args = json!({"prompt": prompt});
    if let Some(sid) = join {
        args["session_id"] = json!(sid);
    }
    let answer = call(base, token, "session_context", args).await;
    match answer.outcome {
        Outcome::Ok(v) => v["session_id"].as_str().expect("session_id").to_owned(),
        other => panic!("session_context failed: {other:?}"),
    }
}

// ---------------------------------------------------------------------------
// The trace as an SSE stream.

/// A person's open trace stream: `GET /api/sessions/{id}/events/stream`.
pub struct TraceStream {
    stream: TcpStream,
    /// Raw bytes not yet decoded (the body is chunked).
    raw: Vec<u8>,
    /// Decoded SSE text not yet split into events.
    text: String,
    chunked: bool,
}

impl TraceStream {
    pub async fn open(base: &str, token: &str, session_id: &str) -> TraceStream {
        Self::open_after(base, token, session_id, 0).await
    }

    /// Reconnect as an SSE client does: from the event after `last_seq`
    /// (`Last-Event-ID`).
    pub async fn open_after(
        base: &str,
        token: &str,
        session_id: &str,
        last_seq: i64,
    ) -> TraceStream {
        let authority = base.trim_start_matches("http://");
        let mut stream = TcpStream::connect(authority).await.expect("connect");
        let head = format!(
            "GET /api/sessions/{session_id}/events/stream HTTP/1.1\r\nHost: {authority}\r\n\
             Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\
             Last-Event-ID: {last_seq}\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.expect("write");
        let mut raw = Vec::new();
        let mut buf = [0u8; 4096];
        let end = loop {
            if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break end;
            }
            let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf))
                .await
                .expect("stream head within 30 s")
                .expect("read");
            assert!(n > 0, "stream closed before its head");
            raw.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&raw[..end]).to_lowercase();
        assert!(head.starts_with("http/1.1 200"), "trace stream: {head}");
        TraceStream {
            stream,
            raw: raw[end + 4..].to_vec(),
            text: String::new(),
            chunked: head.contains("transfer-encoding: chunked"),
        }
    }

    /// Move whole chunks from `raw` to `text`.
    fn decode(&mut self) {
        if !self.chunked {
            self.text.push_str(&String::from_utf8_lossy(&self.raw));
            self.raw.clear();
            return;
        }
        loop {
            let Some(line_end) = self.raw.windows(2).position(|w| w == b"\r\n") else {
                return;
            };
            let size_text = String::from_utf8_lossy(&self.raw[..line_end]).into_owned();
            let size = usize::from_str_radix(size_text.trim(), 16).expect("chunk size");
            let start = line_end + 2;
            if self.raw.len() < start + size + 2 {
                return;
            }
            self.text
                .push_str(&String::from_utf8_lossy(&self.raw[start..start + size]));
            self.raw.drain(..start + size + 2);
        }
    }

    /// Whole events read so far (`data:` JSON), removed from the buffer.
    fn events(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        while let Some(end) = self.text.find("\n\n") {
            let block: String = self.text.drain(..end + 2).collect();
            for line in block.lines() {
                if let Some(data) = line.strip_prefix("data:") {
                    out.push(serde_json::from_str(data.trim()).expect("event data is JSON"));
                }
            }
        }
        out
    }

    /// Read events until `done` holds for all read so far, or `limit`.
    pub async fn read_until(
        &mut self,
        seen: &mut Vec<Value>,
        limit: Duration,
        done: impl Fn(&[Value]) -> bool,
    ) -> bool {
        let deadline = Instant::now() + limit;
        let mut buf = [0u8; 16384];
        while !done(seen) {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.stream.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => {
                    self.raw.extend_from_slice(&buf[..n]);
                    self.decode();
                    seen.extend(self.events());
                }
                _ => return false,
            }
        }
        true
    }
}

// ---------------------------------------------------------------------------
// Reading a trace back and checking it.

/// Every event of `session_id`, read page by page.
pub async fn read_trace(
    client: &mut super::SessionClient,
    session_id: &str,
) -> Vec<spb::TraceEvent> {
    let mut events = Vec::new();
    let mut after = 0;
    loop {
        let page = client
            .read_events(spb::ReadEventsRequest {
                session_id: session_id.to_owned(),
                after_seq: after,
                limit: Some(1000),
            })
            .await
            .expect("read the trace")
            .into_inner();
        let Some(last) = page.events.last() else {
            return events;
        };
        after = last.seq;
        events.extend(page.events);
    }
}

/// What a session's trace says about the `record_reasoning` calls made in
/// it, each with a unique text (its marker).
#[derive(Debug, Default)]
pub struct TraceCheck {
    pub events: usize,
    /// Seqs are exactly 1..=events.
    pub gap_free: bool,
    /// Markers a caller was told were recorded but that are missing.
    pub missing: Vec<String>,
    /// Markers recorded more than once (as a reasoning event or a call).
    pub twice: Vec<String>,
    /// Recorded calls whose `tool_result` is missing or repeated.
    pub results_wrong: Vec<String>,
}

impl TraceCheck {
    pub fn holds(&self) -> bool {
        self.gap_free
            && self.missing.is_empty()
            && self.twice.is_empty()
            && self.results_wrong.is_empty()
    }
}

/// Check `events` against the markers callers were `told` were recorded.
pub fn check_trace(events: &[spb::TraceEvent], told: &[String]) -> TraceCheck {
    let seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    let expected: Vec<i64> = (1..=events.len() as i64).collect();
    let mut reasoning: HashMap<String, usize> = HashMap::new();
    let mut calls: HashMap<String, Vec<i64>> = HashMap::new();
    let mut results: BTreeMap<i64, usize> = BTreeMap::new();
    for e in events {
        let payload = e
            .payload
            .clone()
            .map(ithaca_kit::json::from_struct)
            .unwrap_or(Value::Null);
        match e.r#type.as_str() {
            "reasoning" => {
                if let Some(text) = payload["text"].as_str() {
                    *reasoning.entry(text.to_owned()).or_default() += 1;
                }
            }
            "tool_call" if payload["name"] == "record_reasoning" => {
                if let Some(text) = payload["arguments"]["text"].as_str() {
                    calls.entry(text.to_owned()).or_default().push(e.seq);
                }
            }
            "tool_result" => {
                if let Some(seq) = payload["call_seq"].as_i64() {
                    *results.entry(seq).or_default() += 1;
                }
            }
            _ => {}
        }
    }
    let mut check = TraceCheck {
        events: events.len(),
        gap_free: seqs == expected,
        ..TraceCheck::default()
    };
    for marker in told {
        let r = reasoning.get(marker).copied().unwrap_or(0);
        let c = calls.get(marker).map_or(0, Vec::len);
        if r == 0 || c == 0 {
            check.missing.push(marker.clone());
        }
        if let Some(&[seq]) = calls.get(marker).map(Vec::as_slice)
            && results.get(&seq).copied() != Some(1)
        {
            check.results_wrong.push(marker.clone());
        }
    }
    for (marker, n) in &reasoning {
        if *n > 1 {
            check.twice.push(marker.clone());
        }
    }
    for (marker, seqs) in &calls {
        if seqs.len() > 1 {
            check.twice.push(marker.clone());
        }
    }
    for (seq, n) in &results {
        if *n > 1 {
            check
                .results_wrong
                .push(format!("tool_result of seq {seq} ×{n}"));
        }
    }
    check
}

/// Latency figures of a set of answers: (median, p99, max).
pub fn latency(answers: &[&Answer]) -> (Duration, Duration, Duration) {
    let mut took: Vec<Duration> = answers.iter().map(|a| a.took).collect();
    took.sort();
    if took.is_empty() {
        return Default::default();
    }
    let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99), took[took.len() - 1])
}
