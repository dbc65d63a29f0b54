//! Resource subscriptions end to end (`watch.proto`): the edge in front of
//! the real session and skills services (gRPC, SQLite). A subscriber hears
//! `notifications/resources/updated` when a session's trace gets an event
//! and when a run changes status, in the legacy era (on its GET stream over
//! HTTP, on the session over stdio) and in 2026-07-28 (on its
//! `subscriptions/listen` stream, with the listen's id in every `_meta`);
//! unsubscribing stops them, and another tenant cannot subscribe.
//!
//! Also here: a legacy stdio client answering an elicitation in the middle
//! of a call (`ithaca mcp` in front of the conformance fixture).

use crate::common;

use common::harness::{StackBuilder, TestStack};
use common::http::{self, Reply};
use ithaca::services::Service;
use ithaca_kit::principal::Principal;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// How long a test waits for a notification it expects before failing.
const EXPECT_WITHIN: Duration = Duration::from_secs(20);
/// How long a test listens for a notification that must not come: longer
/// than several polls of a run watch (250 ms) and a trace tail.
const QUIET_FOR: Duration = Duration::from_secs(3);

const LEGACY: &str = "2025-11-25";

struct World {
    /// An edge acting for tenant one, and one for tenant two, in front of
    /// the same services.
    one: String,
    two: String,
    /// The skills service, whose worker the test starts when it wants
    /// queued runs to move.
    skills: ithaca_skills::service::SkillsService,
    _edges: [TestStack; 2],
    session: TestStack,
}

impl World {
    /// The services on SQLite.
    async fn start() -> World {
        World::start_on(None).await
    }

    /// The services on SQLite, or on PostgreSQL `(url, schema prefix)`.
    async fn start_on(pg: Option<(&str, &str)>) -> World {
        let mut session = StackBuilder::new()
            .services(&[Service::Session])
            .without_edge();
        if let Some((url, prefix)) = pg {
            session = session.postgres(url, prefix);
        }
        let session = session.start().await;
        let (skills_url, skills_schema) = match pg {
            Some((url, prefix)) => (url.to_owned(), format!("{prefix}_skills")),
            None => (
                session.dir().join("skills.db").display().to_string(),
                "unused".to_owned(),
            ),
        };
        let db = ithaca_skills::open_db(&skills_url, &skills_schema)
            .await
            .expect("skills db");
        let config = ithaca_skills::Config {
            broker_url: None,
            session_url: Some(session.url_of(Service::Session)),
        };
        let skills = ithaca_skills::service(db, common::key(), &config).expect("skills");
        // Served as `serve_options` serves it, but with the worker held
        // back: queued runs stay queued until the test starts it.
        let server =
            ithaca_proto::skills::v1::skills_service_server::SkillsServiceServer::with_interceptor(
                ithaca_skills::grpc::Grpc {
                    service: skills.clone(),
                },
                ithaca_kit::principal::Verifier::new(common::key()),
            );
        let options = ithaca_kit::server::ServeOptions::new(
            vec![ithaca_proto::service_names::SKILLS],
            tonic::service::Routes::new(server),
        );
        let skills_url = common::serve_grpc(options).await;
        // One edge per tenant, each serving its tenant's local agent.
        let edge = |tenant: &'static str| {
            StackBuilder::new()
                .services(&[])
                .elsewhere(Service::Session, session.url_of(Service::Session))
                .elsewhere(Service::Skills, skills_url.clone())
                .unauthenticated()
                .edge(move |e| {
                    e.local_tenant = tenant.to_owned();
                    e.backend_timeout_ms = 5000;
                })
                .start()
        };
        let one = edge("one").await;
        let two = edge("two").await;
        World {
            one: one.url.clone(),
            two: two.url.clone(),
            skills,
            _edges: [one, two],
            session,
        }
    }

    fn start_worker(&self) {
        let tasks = tokio_util::task::TaskTracker::new();
        self.skills
            .spawn_worker(ithaca_kit::shutdown::CancellationToken::new(), &tasks);
    }
}

/// POST one legacy request; its JSON-RPC reply (JSON or the response of an
/// SSE body).
async fn legacy(url: &str, id: i64, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let reply = http::request(
        url,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", LEGACY),
        ],
        body.to_string().as_bytes(),
    )
    .await;
    response_of(&reply, id)
}

fn response_of(reply: &Reply, id: i64) -> Value {
    let text = reply.text();
    let from_events = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m["id"] == id);
    from_events.unwrap_or_else(|| reply.json())
}

/// A tool call's structured result; panics on an error.
async fn call(url: &str, tool: &str, arguments: Value) -> Value {
    let reply = legacy(
        url,
        7,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    let result = &reply["result"];
    assert_eq!(result["isError"], false, "{tool}: {reply}");
    result["structuredContent"].clone()
}

/// The JSON-RPC messages of one open SSE response, as they arrive.
struct Events {
    messages: mpsc::UnboundedReceiver<Value>,
    task: tokio::task::JoinHandle<()>,
    /// Messages read while waiting for another, kept for later.
    backlog: Vec<Value>,
}

impl Events {
    /// Send `head` (a whole HTTP request) and follow its SSE body.
    async fn open(url: &str, head: String) -> Events {
        let authority = url.trim_start_matches("http://").to_owned();
        let mut stream = tokio::net::TcpStream::connect(&authority)
            .await
            .expect("connect");
        stream.write_all(head.as_bytes()).await.expect("write");
        let (tx, messages) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut pending = String::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                pending.push_str(&String::from_utf8_lossy(&buf[..n]));
                while let Some(end) = pending.find('\n') {
                    let line: String = pending.drain(..=end).collect();
                    if let Some(data) = line.trim().strip_prefix("data:")
                        && let Ok(message) = serde_json::from_str::<Value>(data.trim())
                        && tx.send(message).is_err()
                    {
                        return;
                    }
                }
            }
        });
        Events {
            messages,
            task,
            backlog: Vec::new(),
        }
    }

    /// A legacy caller's GET stream.
    async fn get(url: &str) -> Events {
        let authority = url.trim_start_matches("http://");
        let head = format!(
            "GET /mcp HTTP/1.1\r\nHost: {authority}\r\nAccept: text/event-stream\r\n\
             MCP-Protocol-Version: {LEGACY}\r\n\r\n"
        );
        Events::open(url, head).await
    }

    /// The first message `wanted` accepts (others are kept for later).
    async fn next(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.backlog.iter().position(&wanted) {
            return self.backlog.remove(i);
        }
        let deadline = tokio::time::Instant::now() + EXPECT_WITHIN;
        loop {
            match tokio::time::timeout_at(deadline, self.messages.recv()).await {
                Ok(Some(m)) if wanted(&m) => return m,
                Ok(Some(m)) => self.backlog.push(m),
                Ok(None) => panic!("the stream ended before {what}; got {:?}", self.backlog),
                Err(_) => panic!("no {what} within {EXPECT_WITHIN:?}; got {:?}", self.backlog),
            }
        }
    }

    /// Every message kept or arriving within [`QUIET_FOR`].
    async fn drain(&mut self) -> Vec<Value> {
        let mut seen = std::mem::take(&mut self.backlog);
        let deadline = tokio::time::Instant::now() + QUIET_FOR;
        while let Ok(Some(m)) = tokio::time::timeout_at(deadline, self.messages.recv()).await {
            seen.push(m);
        }
        seen
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn updated(uri: &str) -> impl Fn(&Value) -> bool + '_ {
    move |m| m["method"] == "notifications/resources/updated" && m["params"]["uri"] == uri
}

/// Open a session on edge `url`; its resource URI.
async fn open_session(url: &str) -> String {
    let session = call(url, "session_context", json!({"prompt": "subscriptions"})).await;
    let id = session["session_id"].as_str().expect("session_id");
    format!("doomberg://sessions/{id}")
}

/// Queue a batch run in the session `session_uri` of `tenant`'s agent (it
/// stays queued until the worker starts); its URI. Through the skills
/// service's unary `RunSkill`, which queues a batch run and returns: the
/// `run_skill` tool runs a batch skill within the call (reporting progress)
/// and would answer with the run already finished.
async fn queue_run(world: &World, tenant: &str, session_uri: &str) -> String {
    let session_id = session_uri
        .strip_prefix("doomberg://sessions/")
        .expect("a session URI");
    // The session is the edge's local agent's; the run is queued as it.
    let owner = common::session_client(
        &world.session.url_of(Service::Session),
        Principal::system(tenant),
    )
    .list_sessions(ithaca_proto::session::v1::ListSessionsRequest::default())
    .await
    .expect("list sessions")
    .into_inner()
    .sessions
    .into_iter()
    .find(|s| {
        s.session
            .as_ref()
            .is_some_and(|d| d.session_id == session_id)
    })
    .expect("the session is listed")
    .agent_id;
    let agent = Principal::local_agent(tenant, owner, ["data:read", "runs:write", "runs:cancel"])
        .in_session(Some(session_id.to_owned()));
    let run = world
        .skills
        .run(
            &agent,
            "backtest.momentum",
            None,
            json!({"strategy_id": uuid::Uuid::new_v4().to_string()}),
        )
        .await
        .unwrap_or_else(|e| panic!("queue a run: {}", e.message));
    assert_eq!(run.run.status, ithaca_skills::model::RunStatus::Queued);
    format!("doomberg://runs/{}", run.run.run_id.as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_subscribers_hear_of_trace_and_run_changes_until_they_unsubscribe() {
    legacy_subscribers(World::start().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_subscribers_hear_of_trace_and_run_changes_until_they_unsubscribe_postgres() {
    let Some(pg) = common::postgres(
        "legacy_subscribers_hear_of_trace_and_run_changes_until_they_unsubscribe_postgres",
    ) else {
        return;
    };
    let prefix = common::unique_schema("subscriptions");
    legacy_subscribers(World::start_on(Some((&pg, &prefix))).await).await;
    for service in ["session", "skills"] {
        common::drop_schema(&pg, &format!("{prefix}_{service}")).await;
    }
}

async fn legacy_subscribers(world: World) {
    let one = world.one.as_str();

    // The capability is advertised: the session and skills services watch.
    let init = legacy(
        one,
        1,
        "initialize",
        json!({"protocolVersion": LEGACY, "capabilities": {},
               "clientInfo": {"name": "subscriptions-test", "version": "1"}}),
    )
    .await;
    assert_eq!(
        init["result"]["capabilities"]["resources"]["subscribe"], true,
        "{init}"
    );

    let session = open_session(one).await;
    let watched_run = queue_run(&world, "one", &session).await;
    let dropped_run = queue_run(&world, "one", &session).await;
    let mut stream = Events::get(one).await;
    for uri in [&session, &watched_run, &dropped_run] {
        let reply = legacy(one, 2, "resources/subscribe", json!({"uri": uri})).await;
        assert_eq!(reply["result"], json!({}), "subscribe {uri}: {reply}");
    }
    let reply = legacy(one, 3, "resources/unsubscribe", json!({"uri": dropped_run})).await;
    assert_eq!(reply["result"], json!({}), "{reply}");

    // A trace event.
    call(one, "record_reasoning", json!({"text": "a first thought"})).await;
    stream.next("the trace's update", updated(&session)).await;

    // Both runs move (queued, running, failed: their strategy does not
    // exist); only the subscribed one is heard of.
    world.start_worker();
    stream.next("the run's update", updated(&watched_run)).await;
    let later = stream.drain().await;
    assert!(
        !later.iter().any(updated(&dropped_run)),
        "an unsubscribed run was heard of: {later:?}"
    );
    for m in &later {
        assert_eq!(m["method"], "notifications/resources/updated", "{m}");
    }

    // Unsubscribed from the session: its events are no longer heard of.
    let reply = legacy(one, 4, "resources/unsubscribe", json!({"uri": session})).await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    call(one, "record_reasoning", json!({"text": "a second thought"})).await;
    let later = stream.drain().await;
    assert!(
        !later.iter().any(updated(&session)),
        "an unsubscribed session was heard of: {later:?}"
    );

    // Every URI notified about reads back.
    for uri in [&session, &watched_run] {
        let read = legacy(one, 5, "resources/read", json!({"uri": uri})).await;
        assert!(read["result"]["contents"][0]["text"].is_string(), "{read}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenant_cannot_subscribe_and_hears_nothing() {
    let world = World::start().await;
    let session = open_session(&world.one).await;
    let run = queue_run(&world, "one", &session).await;
    let mut theirs = Events::get(&world.two).await;
    let not_found = |reply: &Value, uri: &str| {
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
        assert_eq!(reply["error"]["data"]["uri"], uri, "{reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("resource not found")),
            "{reply}"
        );
    };
    for uri in [&session, &run] {
        // The same answer a read gets, and as for a URI that names nothing.
        let read = legacy(&world.two, 1, "resources/read", json!({"uri": uri})).await;
        not_found(&read, uri);
        let reply = legacy(&world.two, 2, "resources/subscribe", json!({"uri": uri})).await;
        not_found(&reply, uri);
        let reply = legacy(&world.two, 3, "resources/unsubscribe", json!({"uri": uri})).await;
        not_found(&reply, uri);
    }
    let nothing = "doomberg://runs/00000000-0000-0000-0000-000000000000";
    let reply = legacy(
        &world.two,
        4,
        "resources/subscribe",
        json!({"uri": nothing}),
    )
    .await;
    not_found(&reply, nothing);
    // A resource whose service reports no changes is refused, by name.
    let reply = legacy(
        &world.one,
        5,
        "resources/subscribe",
        json!({"uri": format!("{session}/record")}),
    )
    .await;
    assert!(
        reply["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("cannot be subscribed to")),
        "{reply}"
    );

    // Tenant one's own subscription does not reach tenant two's stream.
    let mut ours = Events::get(&world.one).await;
    let reply = legacy(
        &world.one,
        6,
        "resources/subscribe",
        json!({"uri": session}),
    )
    .await;
    assert_eq!(reply["result"], json!({}), "{reply}");
    call(&world.one, "record_reasoning", json!({"text": "private"})).await;
    ours.next("tenant one's update", updated(&session)).await;
    let heard = theirs.drain().await;
    assert!(heard.is_empty(), "tenant two heard: {heard:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_carries_updates_under_its_subscription_id() {
    let world = World::start().await;
    let one = world.one.as_str();
    let session = open_session(one).await;
    let run = queue_run(&world, "one", &session).await;
    let their_session = open_session(&world.two).await;
    let theirs = queue_run(&world, "two", &their_session).await;
    let unknown = "doomberg://nothing/here";

    let body = json!({"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
    "params": {
        "_meta": http::modern_meta(),
        "notifications": {"resourceSubscriptions": [&session, &run, &theirs, unknown],
                          "toolsListChanged": true},
    }})
    .to_string();
    let authority = one.trim_start_matches("http://");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut listen = Events::open(one, head).await;
    let ack = listen
        .next("the acknowledgement", |m| {
            m["method"] == "notifications/subscriptions/acknowledged"
        })
        .await;
    let meta_id =
        |m: &Value| m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone();
    assert_eq!(meta_id(&ack), "listen-1", "{ack}");
    let honoured = &ack["params"]["notifications"];
    // Only resource updates are offered, for URIs of subscribable
    // resources; tenant two's run is acknowledged (the acknowledgement
    // must not tell whether it exists) but never updated.
    assert!(honoured.get("toolsListChanged").is_none(), "{ack}");
    assert_eq!(
        honoured["resourceSubscriptions"],
        json!([&session, &run, &theirs]),
        "{ack}"
    );

    // Each watched URI is announced once as its watch opens: rmcp sends
    // the acknowledgement first, and a change between the two would
    // otherwise go unheard. After these, every change is a watch's.
    for uri in [&session, &run] {
        let opened = listen
            .next("the update as a watch opens", updated(uri))
            .await;
        assert_eq!(meta_id(&opened), "listen-1", "{opened}");
    }

    call(
        one,
        "record_reasoning",
        json!({"text": "heard on the listen stream"}),
    )
    .await;
    let update = listen.next("the trace's update", updated(&session)).await;
    assert_eq!(meta_id(&update), "listen-1", "{update}");

    world.start_worker();
    let update = listen.next("the run's update", updated(&run)).await;
    assert_eq!(meta_id(&update), "listen-1", "{update}");
    let later = listen.drain().await;
    assert!(
        !later.iter().any(updated(&theirs)),
        "another tenant's run was heard of: {later:?}"
    );
    for m in &later {
        assert_eq!(meta_id(m), "listen-1", "{m}");
    }

    // Closing the stream ends the subscription: nothing is delivered
    // anywhere, and the edge keeps answering.
    drop(listen);
    call(one, "record_reasoning", json!({"text": "after the listen"})).await;

    // resources/subscribe is not a request of 2026-07-28.
    let reply = http::modern(one, "", "resources/subscribe", json!({"uri": session})).await;
    assert_eq!(reply.json()["error"]["code"], -32601, "{}", reply.text());
}

/// `ithaca mcp` (stdio) as a legacy client drives it: one JSON-RPC
/// message a line each way.
struct StdioAgent {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: std::sync::mpsc::Receiver<Value>,
    /// Messages read while waiting for another, kept for later.
    backlog: Vec<Value>,
}

impl StdioAgent {
    fn launch(args: &[&str], data_dir: &std::path::Path) -> StdioAgent {
        let mut cmd = common::ithaca();
        cmd.env_remove("ITHACA_INTERNAL_KEY")
            .arg("mcp")
            .args(args)
            .arg("--data-dir")
            .arg(data_dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn ithaca mcp");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let message = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}"));
                if tx.send(message).is_err() {
                    return;
                }
            }
        });
        StdioAgent {
            child,
            stdin,
            lines,
            backlog: Vec::new(),
        }
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").expect("write a line");
        self.stdin.flush().expect("flush");
    }

    /// The first message `wanted` accepts (others are kept for later).
    fn next(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.backlog.iter().position(&wanted) {
            return self.backlog.remove(i);
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(m) if wanted(&m) => return m,
                Ok(m) => self.backlog.push(m),
                Err(_) => panic!("no {what} within 60 s; got {:?}", self.backlog),
            }
        }
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.next(&format!("the reply to {method}"), |m| {
            m["id"] == id && m.get("method").is_none()
        })
    }

    fn initialize(&mut self, capabilities: Value) {
        let init = self.request(
            0,
            "initialize",
            json!({"protocolVersion": LEGACY, "capabilities": capabilities,
                   "clientInfo": {"name": "subscriptions-test", "version": "1"}}),
        );
        assert_eq!(init["result"]["protocolVersion"], LEGACY, "{init}");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// Every message kept or arriving within [`QUIET_FOR`].
    fn drain(&mut self) -> Vec<Value> {
        let deadline = std::time::Instant::now() + QUIET_FOR;
        let mut seen = std::mem::take(&mut self.backlog);
        while let Ok(m) = self
            .lines
            .recv_timeout(deadline.saturating_duration_since(std::time::Instant::now()))
        {
            seen.push(m);
        }
        seen
    }
}

impl Drop for StdioAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tool_result(reply: &Value) -> &Value {
    assert!(reply.get("error").is_none(), "{reply}");
    assert_eq!(reply["result"]["isError"], false, "{reply}");
    &reply["result"]
}

#[test]
fn a_stdio_session_hears_of_its_subscriptions_until_it_unsubscribes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut agent = StdioAgent::launch(&[], &dir.path().join("stack"));
    agent.initialize(json!({}));
    let opened = agent.request(
        1,
        "tools/call",
        json!({"name": "session_context", "arguments": {"prompt": "stdio subscriptions"}}),
    );
    let id = tool_result(&opened)["structuredContent"]["session_id"]
        .as_str()
        .expect("session_id")
        .to_owned();
    let session = format!("doomberg://sessions/{id}");
    let reply = agent.request(2, "resources/subscribe", json!({"uri": session}));
    assert_eq!(reply["result"], json!({}), "{reply}");
    let reply = agent.request(
        3,
        "tools/call",
        json!({"name": "record_reasoning", "arguments": {"text": "over stdio"}}),
    );
    tool_result(&reply);
    agent.next("the trace's update", |m| {
        m["method"] == "notifications/resources/updated" && m["params"]["uri"] == session
    });
    let reply = agent.request(4, "resources/unsubscribe", json!({"uri": session}));
    assert_eq!(reply["result"], json!({}), "{reply}");
    // Whatever the first call's events still had on the way has arrived.
    agent.drain();
    let reply = agent.request(
        5,
        "tools/call",
        json!({"name": "record_reasoning", "arguments": {"text": "unheard"}}),
    );
    tool_result(&reply);
    let later = agent.drain();
    assert!(
        !later
            .iter()
            .any(|m| m["method"] == "notifications/resources/updated"),
        "heard after unsubscribing: {later:?}"
    );
    // Another tenant's session (none exists here) is not found.
    let reply = agent.request(
        6,
        "resources/subscribe",
        json!({"uri": "doomberg://sessions/00000000-0000-0000-0000-000000000000"}),
    );
    assert_eq!(reply["error"]["code"], -32602, "{reply}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_stdio_client_answers_an_elicitation_and_the_call_resumes() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let fixture = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(ithaca_fixture::serve(listener, std::future::pending()));
    let dir = tempfile::tempdir().expect("tempdir");
    let data_dir = dir.path().join("stdio");
    tokio::task::spawn_blocking(move || {
        let mut agent =
            StdioAgent::launch(&["--backend", &fixture, "--no-session-gate"], &data_dir);
        agent.initialize(json!({"elicitation": {}}));
        agent.send(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
                "name": "test_elicitation", "arguments": {"message": "Who are you?"},
            }}),
        );
        let asked = agent.next("the elicitation request", |m| {
            m["method"] == "elicitation/create"
        });
        assert_eq!(asked["params"]["message"], "Who are you?", "{asked}");
        assert!(
            asked.get("id").is_some(),
            "a request, not a notification: {asked}"
        );
        agent.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {
            "action": "accept", "content": {"username": "ada", "email": "ada@example.org"},
        }}));
        let reply = agent.next("the call's result", |m| {
            m["id"] == 1 && m.get("method").is_none()
        });
        let text = tool_result(&reply)["content"][0]["text"]
            .as_str()
            .expect("text")
            .to_owned();
        assert!(text.starts_with("User response: action=accept"), "{text}");
        assert!(text.contains("ada@example.org"), "{text}");

        // A declined form reaches the service as declined.
        agent.send(
            json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "test_elicitation", "arguments": {"message": "Again?"},
            }}),
        );
        let asked = agent.next("the second request", |m| {
            m["method"] == "elicitation/create"
        });
        agent.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": {"action": "decline"}}));
        let reply = agent.next("the second result", |m| {
            m["id"] == 2 && m.get("method").is_none()
        });
        let text = tool_result(&reply)["content"][0]["text"]
            .as_str()
            .expect("text")
            .to_owned();
        assert!(text.contains("action=decline"), "{text}");
    })
    .await
    .expect("the stdio client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_listen_stream_is_kept_alive() {
    let world = World::start().await;
    let session = open_session(&world.one).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
        "params": {"_meta": http::modern_meta(),
                   "notifications": {"resourceSubscriptions": [&session]}}})
    .to_string();
    let authority = world.one.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect");
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    // Nothing changes, so only the acknowledgement and then the comments
    // the edge sends every 15 s come.
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    while !text.contains(": keep-alive") {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("a quiet listen stream went silent: {text}"))
            .expect("read");
        assert!(n > 0, "the listen stream ended: {text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(
        text.contains("notifications/subscriptions/acknowledged"),
        "{text}"
    );
}
