//! The defects a security probe of the running stack found (issue 15, item
//! 7), each as a test that failed before its fix: a revoked key's open trace
//! stream, slow or idle clients (header, body and idle timeouts, the
//! connection cap), a stalled service and the deadline, `/metrics` labels,
//! INTERNALs that were not logged, deep nesting, file modes under the data
//! directory, and provider account configs in plaintext.
//!
//! Everything runs on loopback; waits are bounded by [`PATIENCE`], a bound
//! on something expected within a second or two, never a measurement.

use crate::common;

use common::harness::{StackBuilder, TestStack};
use common::http;
use ithaca::edge::ListenerArgs;
use ithaca::services::Service;
use ithaca_edge::front::HttpOptions;
use ithaca_edge::listener::Limits;
use ithaca_kit::principal::Principal;
use ithaca_proto::auth::v1 as pb;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// How long a test waits for something that should happen within a
/// second or two (the machine is shared with builds).
const PATIENCE: Duration = Duration::from_secs(30);

/// What an edge under test is made of.
struct Setup {
    limits: Limits,
    /// The edge's bound on a whole request.
    request_timeout: Duration,
    key_cache: Duration,
    backend_timeout: Duration,
    /// The session service; one in this process when `None`.
    session_url: Option<String>,
    /// The skills service's URL, when it runs elsewhere.
    skills_url: Option<String>,
    /// Start the skills service in this process.
    skills: bool,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            limits: Limits::default(),
            request_timeout: HttpOptions::DEFAULT_REQUEST_TIMEOUT,
            key_cache: Duration::from_secs(1),
            backend_timeout: Duration::from_secs(2),
            session_url: None,
            skills_url: None,
            skills: false,
        }
    }
}

/// An edge with keys, in front of auth and session (and skills), started
/// by the harness as `ithaca up` starts it.
struct Edge {
    url: String,
    tenant: String,
    /// An agent key with every agent scope.
    agent: String,
    auth_url: String,
    _stack: TestStack,
}

async fn edge(setup: Setup) -> Edge {
    let mut services = vec![Service::Auth, Service::Session];
    if setup.skills {
        services.push(Service::Skills);
    }
    let listener = ListenerArgs::from(setup.limits);
    let mut builder = StackBuilder::new().services(&services).edge(move |e| {
        e.key_cache_ms = setup.key_cache.as_millis() as u64;
        e.backend_timeout_ms = setup.backend_timeout.as_millis() as u64;
        e.request_timeout_ms = setup.request_timeout.as_millis() as u64;
        e.listener = listener;
    });
    if let Some(url) = setup.session_url {
        builder = builder.elsewhere(Service::Session, url);
    }
    if let Some(url) = setup.skills_url {
        builder = builder.elsewhere(Service::Skills, url);
    }
    let stack = builder.start().await;
    Edge {
        url: stack.url.clone(),
        tenant: stack.tenant.clone(),
        agent: stack.agent_key().await,
        auth_url: stack.url_of(Service::Auth),
        _stack: stack,
    }
}

/// An edge with no backends and authentication off, behind `limits`: what
/// an unauthenticated client can reach.
async fn bare_edge(limits: Limits) -> (String, TestStack) {
    let listener = ListenerArgs::from(limits);
    let stack = StackBuilder::new()
        .services(&[])
        .unauthenticated()
        .edge(move |e| {
            e.local_tenant = "t".to_owned();
            e.listener = listener;
        })
        .start()
        .await;
    (stack.url.clone(), stack)
}

fn authority(url: &str) -> &str {
    url.trim_start_matches("http://")
}

/// `tools/call` in the 2026-07-28 era; the whole JSON-RPC answer.
async fn call(url: &str, token: &str, tool: &str, arguments: Value) -> Value {
    let reply = http::modern(
        url,
        token,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

/// Open a session for `token`; its id.
async fn open_session(e: &Edge, token: &str) -> String {
    let r = call(&e.url, token, "session_context", json!({"prompt": "probe"})).await;
    r["result"]["structuredContent"]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session id: {r}"))
        .to_owned()
}

/// Read from `stream` until `done` holds for all text read so far (true),
/// or the peer closes or [`PATIENCE`] passes (false).
async fn read_until(
    stream: &mut TcpStream,
    text: &mut String,
    done: impl Fn(&str) -> bool,
) -> bool {
    let deadline = Instant::now() + PATIENCE;
    let mut buf = [0u8; 4096];
    while !done(text) {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => text.push_str(&String::from_utf8_lossy(&buf[..n])),
            _ => return false,
        }
    }
    true
}

/// Whether the peer closes `stream` within [`PATIENCE`] (reading and
/// keeping whatever it sends first in `text`).
async fn closed_by_peer(stream: &mut TcpStream, text: &mut String) -> bool {
    let deadline = Instant::now() + PATIENCE;
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(n)) => text.push_str(&String::from_utf8_lossy(&buf[..n])),
            Err(_) => return false,
        }
    }
}

fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
    // kill(2) returns once the signal is sent, not once every thread of
    // the process has stopped; on a loaded machine a call sent at once
    // could still be served. Wait for the process to show as stopped.
    if signal == "STOP" {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            if state == Some('T') {
                break;
            }
            assert!(Instant::now() < deadline, "{pid} never stopped: {stat}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

// ---------------------------------------------------------------------------
// A revoked key keeps watching.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_keys_open_trace_stream_ends() {
    let e = edge(Setup {
        key_cache: Duration::from_secs(1),
        // Shorter than the wait below: an open stream is never idle.
        limits: Limits {
            idle_timeout: Duration::from_secs(1),
            ..Limits::default()
        },
        ..Setup::default()
    })
    .await;
    let sid = open_session(&e, &e.agent).await;
    let watcher = common::key_for(&e.auth_url, &e.tenant, &["data:read"], pb::Actor::Agent).await;

    let mut stream = TcpStream::connect(authority(&e.url))
        .await
        .expect("connect");
    let head = format!(
        "GET /api/sessions/{sid}/events/stream HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {watcher}\r\nConnection: close\r\n\r\n",
        authority(&e.url)
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut text = String::new();
    assert!(
        read_until(&mut stream, &mut text, |t| t.contains("event: tool_result")).await,
        "the stream replays the session: {text}"
    );

    // Still open and live after longer than the idle timeout and the key
    // cache: the agent's next call reaches it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let joined = call(
        &e.url,
        &e.agent,
        "session_context",
        json!({"prompt": "again", "session_id": sid}),
    )
    .await;
    assert_eq!(joined["result"]["isError"], false, "{joined}");
    assert!(
        read_until(&mut stream, &mut text, |t| t
            .matches("event: tool_result")
            .count()
            >= 2)
        .await,
        "a live stream delivers new events: {text}"
    );

    let key_id = watcher.split('_').nth(2).expect("key id").to_owned();
    common::auth_client(&e.auth_url, Principal::system(""))
        .revoke_key(pb::RevokeKeyRequest {
            tenant_id: e.tenant.clone(),
            key_id,
        })
        .await
        .expect("revoke");
    let mut rest = String::new();
    assert!(
        closed_by_peer(&mut stream, &mut rest).await,
        "the stream of a revoked key must end (within the key cache window plus one check)"
    );
    // A new stream with that key is refused.
    let again = http::request(
        &e.url,
        "GET",
        &format!("/api/sessions/{sid}/events/stream"),
        &[("Authorization", &format!("Bearer {watcher}"))],
        b"",
    )
    .await;
    assert_eq!(again.status, 401);
}

// ---------------------------------------------------------------------------
// Slow and idle clients.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_headers_and_silent_connections_are_closed_after_the_header_timeout() {
    let (url, _stop) = bare_edge(Limits {
        header_timeout: Duration::from_secs(1),
        ..Limits::default()
    })
    .await;
    // No authentication is needed to hold a connection with partial headers.
    let mut partial = TcpStream::connect(authority(&url)).await.expect("connect");
    partial
        .write_all(b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a")
        .await
        .expect("write");
    let mut silent = TcpStream::connect(authority(&url)).await.expect("connect");
    let (mut a, mut b) = (String::new(), String::new());
    assert!(
        closed_by_peer(&mut partial, &mut a).await,
        "a connection that never finishes its headers must be closed"
    );
    assert!(
        closed_by_peer(&mut silent, &mut b).await,
        "a connection that sends nothing must be closed"
    );
    // A prompt client is served as before.
    let ok = http::request(&url, "GET", "/healthz", &[], b"").await;
    assert_eq!(ok.status, 200);
}

/// The head of the first answer on `stream` (up to the blank line).
async fn answer_head(stream: &mut TcpStream) -> String {
    let mut text = String::new();
    assert!(
        read_until(stream, &mut text, |t| t.contains("\r\n\r\n")).await,
        "no answer: {text}"
    );
    text.split("\r\n\r\n").next().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_before_the_body_says_connection_close_and_a_read_body_keeps_alive() {
    let (url, _stop) = bare_edge(Limits::default()).await;
    // Refused by the origin layer before the body is read, and the body is
    // not even sent: hyper will not wait for it, so the client must be told
    // the connection ends here (the race OAuth clients met after a 401).
    let mut refused = TcpStream::connect(authority(&url)).await.expect("connect");
    refused
        .write_all(
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n\
              Content-Type: application/json\r\nContent-Length: 64\r\n\r\n",
        )
        .await
        .expect("write");
    let head = answer_head(&mut refused).await.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 403"), "{head}");
    assert!(head.contains("\r\nconnection: close"), "{head}");
    let mut rest = String::new();
    assert!(
        closed_by_peer(&mut refused, &mut rest).await,
        "the refused connection must close"
    );

    // A body the edge reads (and refuses as bad JSON) leaves the
    // connection open for the next request.
    let mut kept = TcpStream::connect(authority(&url)).await.expect("connect");
    kept.write_all(
        b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
          Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
          Content-Length: 1\r\n\r\n{",
    )
    .await
    .expect("write");
    let head = answer_head(&mut kept).await.to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 400"), "{head}");
    assert!(!head.contains("connection: close"), "{head}");
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("write again");
    let mut text = String::new();
    assert!(
        read_until(&mut kept, &mut text, |t| t.contains("HTTP/1.1 200")).await,
        "the kept-alive connection serves the next request: {text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trickled_body_is_cut_at_the_body_timeout() {
    let (url, _stop) = bare_edge(Limits {
        body_timeout: Duration::from_secs(1),
        ..Limits::default()
    })
    .await;
    let stream = TcpStream::connect(authority(&url)).await.expect("connect");
    let (mut read, mut write) = stream.into_split();
    let head = "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                Accept: application/json, text/event-stream\r\nContent-Length: 100000\r\n\r\n{";
    write.write_all(head.as_bytes()).await.expect("write");
    // One byte every 200 ms: the body would take over five hours.
    let trickle = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(200)).await;
            if write.write_all(b" ").await.is_err() {
                return;
            }
        }
    });
    let mut answer = Vec::new();
    let done = tokio::time::timeout(PATIENCE, read.read_to_end(&mut answer)).await;
    trickle.abort();
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        done.is_ok(),
        "a trickled body must be cut; got so far: {answer}"
    );
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "the client is told why: {answer}"
    );
    assert!(answer.contains("did not arrive within 1000 ms"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() {
    let (url, _stop) = bare_edge(Limits {
        // Longer than the wait below, so only the idle timeout can close it.
        header_timeout: Duration::from_secs(60),
        idle_timeout: Duration::from_secs(1),
        ..Limits::default()
    })
    .await;
    let mut stream = TcpStream::connect(authority(&url)).await.expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .expect("write");
    let mut text = String::new();
    assert!(
        read_until(&mut stream, &mut text, |t| t.ends_with("ok\n")).await,
        "{text}"
    );
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(
        closed_by_peer(&mut stream, &mut text).await,
        "an idle keep-alive connection must be closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kept_alive_connection_waits_idle_but_not_for_a_slow_next_head() {
    let (url, _stop) = bare_edge(Limits {
        header_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(60),
        ..Limits::default()
    })
    .await;
    let request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    let mut stream = TcpStream::connect(authority(&url)).await.expect("connect");
    stream.write_all(request).await.expect("write");
    let mut text = String::new();
    assert!(
        read_until(&mut stream, &mut text, |t| t.ends_with("ok\n")).await,
        "{text}"
    );
    // Idle for longer than the header timeout: waiting for the next
    // request is idleness, bounded by the idle timeout.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    stream.write_all(request).await.expect("write again");
    let mut second = String::new();
    assert!(
        read_until(&mut stream, &mut second, |t| t.ends_with("ok\n")).await,
        "a kept-alive connection is still served after a pause: {second}"
    );
    // The next request's head, once begun, must finish within the header
    // timeout.
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.")
        .await
        .expect("write partial");
    assert!(
        closed_by_peer(&mut stream, &mut text).await,
        "a partial head on a kept-alive connection must be cut"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_refused_until_one_closes() {
    let (url, _stop) = bare_edge(Limits {
        max_connections: 2,
        header_timeout: Duration::from_secs(60),
        ..Limits::default()
    })
    .await;
    let first = TcpStream::connect(authority(&url)).await.expect("connect");
    let _second = TcpStream::connect(authority(&url)).await.expect("connect");
    let mut third = TcpStream::connect(authority(&url)).await.expect("connect");
    let mut refused = String::new();
    assert!(
        closed_by_peer(&mut third, &mut refused).await,
        "a connection beyond the cap is closed"
    );
    assert!(
        refused.starts_with("HTTP/1.1 503") && refused.contains("retry-after: 1"),
        "and told to retry: {refused}"
    );
    // Once a connection closes, its place is free again.
    drop(first);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut next = TcpStream::connect(authority(&url)).await.expect("connect");
        next.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .expect("write");
        let mut answer = String::new();
        closed_by_peer(&mut next, &mut answer).await;
        if answer.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            answer.starts_with("HTTP/1.1 503"),
            "refused or served, nothing else: {answer}"
        );
        assert!(Instant::now() < deadline, "a freed place is never reused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------
// A stalled service is cut by the deadline.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_session_service_is_a_retryable_timeout_within_the_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mut session, session_url) =
        common::serve("session", &common::sqlite_path(&dir, "session"), "unused");
    let e = edge(Setup {
        session_url: Some(session_url),
        backend_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(25),
        ..Setup::default()
    })
    .await;
    let sid = open_session(&e, &e.agent).await;

    let pid = session.child.id();
    signal(pid, "STOP");
    // The gate's hop (GetCurrentSession) and a direct hop (session_context).
    for (tool, args) in [
        ("session_close", json!({})),
        ("session_context", json!({"prompt": "x", "session_id": sid})),
    ] {
        let started = Instant::now();
        let r = call(&e.url, &e.agent, tool, args).await;
        let took = started.elapsed();
        let error = common::tool_error(&r["result"]);
        assert_eq!(error["error"], "TIMEOUT", "{tool}: {error}");
        assert_eq!(error["retryable"], true, "{tool}: {error}");
        let message = error["message"].as_str().unwrap_or("");
        assert!(
            message.contains("ithaca.session.v1.SessionService") && message.contains("2000 ms"),
            "{tool}: the error names the service and the deadline: {message}"
        );
        // The backend deadline (2 s) answered, not the request timeout (25 s).
        assert!(
            took < Duration::from_secs(2) + Duration::from_secs(10),
            "{tool} took {took:?}"
        );
    }
    // A resource read through the stalled service is a JSON-RPC error that
    // says the same.
    let read = http::modern(
        &e.url,
        &e.agent,
        "resources/read",
        json!({"uri": format!("doomberg://sessions/{sid}")}),
    )
    .await
    .json();
    assert_eq!(read["error"]["data"]["error"], "TIMEOUT", "{read}");
    // Calls that need no session service are unaffected.
    let list = http::modern(&e.url, &e.agent, "tools/list", json!({})).await;
    assert_eq!(list.status, 200);

    signal(pid, "CONT");
    let deadline = Instant::now() + PATIENCE;
    loop {
        let r = call(
            &e.url,
            &e.agent,
            "session_context",
            json!({"prompt": "back", "session_id": sid}),
        )
        .await;
        if r["result"]["isError"] == false {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "calls succeed again after SIGCONT: {r}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(session.terminate().success());
}

/// A TCP listener that accepts connections and never answers: a backend
/// that stalled (stopped, or stuck) with its socket still open.
async fn black_hole() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_backend_times_out_and_other_calls_are_unaffected() {
    let e = edge(Setup {
        skills_url: Some(black_hole().await),
        backend_timeout: Duration::from_secs(2),
        ..Setup::default()
    })
    .await;
    let sid = open_session(&e, &e.agent).await;
    let url = e.url.clone();
    let agent = e.agent.clone();
    let started = Instant::now();
    let stalled =
        tokio::spawn(
            async move { call(&url, &agent, "search_skills", json!({"query": "vol"})).await },
        );
    // While it waits, the edge answers other calls.
    let list = http::modern(&e.url, &e.agent, "tools/list", json!({})).await;
    assert_eq!(list.status, 200);
    let joined = call(
        &e.url,
        &e.agent,
        "session_context",
        json!({"prompt": "meanwhile", "session_id": sid}),
    )
    .await;
    assert_eq!(joined["result"]["isError"], false, "{joined}");

    let r = stalled.await.expect("call task");
    let took = started.elapsed();
    let error = common::tool_error(&r["result"]);
    assert_eq!(error["error"], "TIMEOUT", "{error}");
    assert_eq!(error["retryable"], true, "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("ithaca.skills.v1.SkillsService")),
        "{error}"
    );
    assert!(
        took < Duration::from_secs(2) + Duration::from_secs(10),
        "took {took:?}"
    );
}

// ---------------------------------------------------------------------------
// /metrics labels.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_label_only_known_methods() {
    let (url, _stop) = bare_edge(Limits::default()).await;
    let long = "m".repeat(2048);
    let mut invented = vec![
        "tools/cal\u{0}l".to_owned(),
        "x\"}\nevil{".to_owned(),
        "notifications/\u{0}".to_owned(),
        long.clone(),
    ];
    invented.extend((0..50).map(|i| format!("notifications/made-up-{i}-{long}")));
    for method in &invented {
        // As a notification (accepted, 202) and as a request (refused).
        for body in [
            json!({"jsonrpc": "2.0", "method": method}),
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {}}),
        ] {
            let reply = http::request(
                &url,
                "POST",
                "/mcp",
                &[
                    ("Content-Type", "application/json"),
                    ("Accept", "application/json, text/event-stream"),
                ],
                body.to_string().as_bytes(),
            )
            .await;
            assert!(reply.status < 500, "{method:?}: {}", reply.text());
        }
    }
    http::modern(&url, "unused", "tools/list", json!({})).await;
    let metrics = http::request(&url, "GET", "/metrics", &[], b"").await;
    assert_eq!(metrics.status, 200);
    assert!(!metrics.body.contains(&0), "no NUL byte in /metrics");
    let text = metrics.text();
    let labels: std::collections::BTreeSet<&str> = text
        .split("mcp_method_name=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(labels.contains("tools/list"), "{labels:?}");
    assert!(
        labels.contains("other"),
        "invented methods count as other: {labels:?}"
    );
    for label in &labels {
        assert!(
            label.len() < 64 && !label.contains("made-up") && !label.contains("evil"),
            "a client minted the label {label:?}"
        );
    }
    assert!(
        text.len() < 64 * 1024,
        "/metrics stays small: {} bytes",
        text.len()
    );
}

// ---------------------------------------------------------------------------
// INTERNALs are logged; deep nesting is INVALID_ARGUMENT.

/// Log lines written at WARN and above, captured.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("logs")).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("logs").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;

    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

// One thread, so every task of the edge logs into this test's subscriber.
#[tokio::test(flavor = "current_thread")]
async fn every_internal_error_is_logged_with_its_cause() {
    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(logs.clone())
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let e = edge(Setup {
        skills_url: Some(black_hole().await),
        backend_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(20),
        ..Setup::default()
    })
    .await;
    // A resource read that fails is a JSON-RPC internal error (-32603).
    let read = http::modern(
        &e.url,
        &e.agent,
        "resources/read",
        json!({"uri": "doomberg://skills/catalog"}),
    )
    .await
    .json();
    assert_eq!(read["error"]["code"], -32603, "{read}");
    let logged = logs.text();
    assert!(
        logged.contains("WARN") && logged.contains("did not answer within 500 ms"),
        "the internal error is logged with its cause: {logged}"
    );
}

/// `{"a": {"a": … {"a": 1}}}`, `depth` objects deep.
fn nested(depth: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_nesting_in_skill_inputs_is_an_invalid_argument_naming_the_limit() {
    let e = edge(Setup {
        skills: true,
        ..Setup::default()
    })
    .await;
    let sid = open_session(&e, &e.agent).await;
    let limit = ithaca_edge::transcode::MAX_NESTING;
    let run = |inputs: String| {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"run_skill","arguments":{{"skill_id":"vol.term_structure","inputs":{inputs}}},"_meta":{}}}}}"#,
            http::modern_meta()
        );
        let url = e.url.clone();
        let auth = format!("Bearer {}", e.agent);
        async move {
            http::request(
                &url,
                "POST",
                "/mcp",
                &[
                    ("Authorization", auth.as_str()),
                    ("Content-Type", "application/json"),
                    ("Accept", "application/json, text/event-stream"),
                    ("MCP-Protocol-Version", "2026-07-28"),
                    ("Mcp-Method", "tools/call"),
                    ("Mcp-Name", "run_skill"),
                ],
                body.as_bytes(),
            )
            .await
        }
    };
    // Just inside the limit, the services take it: whatever the skill
    // says about such inputs, it is not an internal failure (a protobuf
    // recursion limit hit in a service would be).
    let inside = run(nested(limit - 1)).await;
    assert_eq!(inside.status, 200, "{}", inside.text());
    let result = inside.json()["result"].clone();
    if result["isError"] == true {
        assert_ne!(common::tool_error(&result)["error"], "INTERNAL", "{result}");
    }
    for depth in [limit + 1, 40] {
        let reply = run(nested(depth)).await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        let error = common::tool_error(&reply.json()["result"]);
        assert_eq!(error["error"], "INVALID_ARGUMENT", "depth {depth}: {error}");
        let message = error["message"].as_str().unwrap_or("");
        assert!(
            message.starts_with("inputs") && message.contains(&format!("{limit} levels")),
            "depth {depth}: names the field and the limit: {message}"
        );
    }
    // The trace has every refused call, its arguments replaced by a note
    // (the event must stay decodable by every service).
    let auth = format!("Bearer {}", e.agent);
    let trace = http::read_until(
        &e.url,
        &format!("/api/sessions/{sid}/events/stream"),
        &[("Authorization", auth.as_str())],
        |t| t.matches("event: tool_result").count() >= 4,
    )
    .await;
    assert_eq!(
        trace
            .matches("the arguments nest more than 32 levels deep")
            .count(),
        2,
        "{trace}"
    );
    // Their results too (the call just inside the limit may add a third,
    // the skill's own refusal of an unknown input).
    assert!(trace.matches("INVALID_ARGUMENT").count() >= 2, "{trace}");
    // Deeper than any JSON this server reads: a parse error naming that.
    let reply = run(nested(1000)).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    let error = &reply.json()["error"];
    assert_eq!(error["code"], -32700, "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("128 levels")),
        "{error}"
    );
}

// ---------------------------------------------------------------------------
// Files under the data directory are private.

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

#[cfg(unix)]
#[tokio::test]
async fn sqlite_files_and_their_directory_are_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("fresh").join("data");
    let path = data.join("session.db");
    let db = ithaca_session::open_db(&path.display().to_string(), "unused")
        .await
        .expect("open");
    assert_eq!(mode(&data), 0o700, "a directory made for the databases");
    assert_eq!(mode(&dir.path().join("fresh")), 0o700, "and its parents");
    for suffix in ["", "-wal", "-shm"] {
        let file = data.join(format!("session.db{suffix}"));
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    db.close().await;

    // A database an older version left readable by everyone is tightened.
    for suffix in ["", "-wal", "-shm"] {
        let file = data.join(format!("session.db{suffix}"));
        if file.exists() {
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        }
    }
    let db = ithaca_session::open_db(&path.display().to_string(), "unused")
        .await
        .expect("reopen");
    for suffix in ["", "-wal", "-shm"] {
        let file = data.join(format!("session.db{suffix}"));
        assert_eq!(mode(&file), 0o600, "{}", file.display());
    }
    db.close().await;
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ithaca_up_keeps_its_data_directory_private_and_applies_the_listener_flags() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("stack");
    let mut cmd = common::ithaca();
    cmd.env_remove("ITHACA_INTERNAL_KEY")
        .args([
            "up",
            "--port-base",
            "0",
            "--header-timeout-ms",
            "500",
            "--data-dir",
        ])
        .arg(&data);
    let mut stack = common::Process::spawn(cmd);
    let lines = stack.wait_for("ithaca: ready", Duration::from_secs(60));
    assert_eq!(mode(&data), 0o700);
    let mut files = 0;
    for entry in std::fs::read_dir(&data).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            // The services' unix sockets: a private folder of sockets only.
            assert_eq!(path.file_name(), Some("sockets".as_ref()));
            assert_eq!(mode(&path), 0o700, "{}", path.display());
            for socket in std::fs::read_dir(&path).expect("read sockets") {
                use std::os::unix::fs::FileTypeExt;
                let socket = socket.expect("entry");
                assert!(socket.file_type().expect("type").is_socket(), "{socket:?}");
            }
            continue;
        }
        assert_eq!(mode(&path), 0o600, "{}", path.display());
        files += 1;
    }
    assert!(files >= 6, "the databases, the key and stack.json: {files}");

    // The edge's listener has the header timeout the flag set.
    let mcp = lines
        .iter()
        .find_map(|l| l.trim().strip_prefix("mcp"))
        .map(|rest| rest.trim().trim_end_matches("/mcp").to_owned())
        .expect("an mcp line");
    let mut partial = TcpStream::connect(authority(&mcp)).await.expect("connect");
    partial
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .await
        .expect("write");
    let mut text = String::new();
    assert!(closed_by_peer(&mut partial, &mut text).await);
    assert!(stack.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_edge_takes_its_limits_from_the_environment() {
    let mut cmd = common::ithaca();
    cmd.env("ITHACA_MAX_CONNECTIONS", "1")
        .env("ITHACA_HEADER_TIMEOUT_MS", "30000")
        .args(["serve", "edge", "--auth", "off", "--listen", "127.0.0.1:0"]);
    let edge = common::Process::spawn(cmd);
    let lines = edge.wait_for("listening on", Duration::from_secs(60));
    let addr = lines
        .last()
        .and_then(|l| l.rsplit(' ').next())
        .expect("an address")
        .to_owned();
    let _held = TcpStream::connect(&addr).await.expect("connect");
    let mut second = TcpStream::connect(&addr).await.expect("connect");
    let mut text = String::new();
    assert!(closed_by_peer(&mut second, &mut text).await);
    assert!(text.starts_with("HTTP/1.1 503"), "{text}");
}

// ---------------------------------------------------------------------------
// Provider account configs are sealed at rest.

async fn account_configs_are_sealed(db: ithaca_kit::db::Db) {
    use ithaca_broker::accounts::service::NewAccount;
    use ithaca_kit::with_pool;
    let svc = ithaca_broker::account_service(db.clone(), &common::key());
    let config = json!({"host": "gw.internal.example", "account_ref": "U1234567"});
    let row = svc
        .add_account(
            &Principal::system(""),
            NewAccount {
                tenant_id: "tenant-a".into(),
                provider: "ibkr".into(),
                label: "main".into(),
                config: config.clone(),
                credential: "sk-secret".into(),
            },
        )
        .await
        .expect("add");
    let raw = |db: ithaca_kit::db::Db| async move {
        let rows: Vec<(String, String)> = with_pool!(db, pool => {
            sqlx::query_as("SELECT account_id, config FROM accounts ORDER BY account_id")
                .fetch_all(pool)
                .await
                .expect("raw rows")
        });
        rows
    };
    for (_, stored) in raw(db.clone()).await {
        assert!(
            !stored.contains("gw.internal") && !stored.contains("U1234567"),
            "config in plaintext: {stored}"
        );
    }
    // Reading accounts works, and opens the config for the service only.
    let accounts = svc
        .accounts(&common::agent("tenant-a", "a"))
        .await
        .expect("accounts");
    assert_eq!(accounts.len(), 1);
    assert_eq!(svc.account_config(&accounts[0]), Some(config.clone()));
    assert!(svc.credential_configured(&row));

    // A row an earlier version wrote in plaintext is sealed at start, once.
    let legacy = json!({"host": "legacy.internal.example"}).to_string();
    with_pool!(db, pool => {
        sqlx::query(
            "INSERT INTO accounts (account_id, tenant_id, provider, label, config, credential, created_at_ms) \
             VALUES ('legacy', 'tenant-a', 'ibkr', 'old', $1, NULL, 1)",
        )
        .bind(&legacy)
        .execute(pool)
        .await
        .expect("legacy row");
    });
    assert_eq!(svc.seal_account_configs().await.expect("seal"), 1);
    assert_eq!(
        svc.seal_account_configs().await.expect("again"),
        0,
        "idempotent"
    );
    for (id, stored) in raw(db.clone()).await {
        assert!(!stored.contains("internal.example"), "{id}: {stored}");
    }
    let legacy_row = svc
        .accounts(&common::agent("tenant-a", "a"))
        .await
        .expect("accounts")
        .into_iter()
        .find(|a| a.account_id == "legacy")
        .expect("legacy account");
    assert_eq!(
        svc.account_config(&legacy_row),
        Some(json!({"host": "legacy.internal.example"}))
    );
}

#[tokio::test]
async fn account_configs_are_sealed_on_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = ithaca_broker::open_db(&common::sqlite_path(&dir, "broker"), "unused")
        .await
        .expect("open");
    account_configs_are_sealed(db).await;
}

#[tokio::test]
async fn account_configs_are_sealed_on_postgres() {
    let Some(url) = common::postgres("account_configs_are_sealed_on_postgres") else {
        return;
    };
    let schema = common::unique_schema("broker");
    let db = ithaca_broker::open_db(&url, &schema).await.expect("open");
    account_configs_are_sealed(db.clone()).await;
    db.close().await;
    common::drop_schema(&url, &schema).await;
}
