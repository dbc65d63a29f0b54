//! What a security probe broke at the edge (issue 28, items 4, 5, 13 and
//! 14), each as a test that failed before its fix:
//!
//! - every long-lived stream of a key (a 2026-07-28 listen, a legacy GET
//!   stream and its subscription, the SSE trace stream) ends once the key is
//!   revoked in the real auth service;
//! - one tenant's 17,000- and 100,000-character arguments get a short,
//!   non-retryable invalid-argument error, and another tenant's concurrent
//!   calls all succeed (`ithaca up`);
//! - wrong secrets are throttled per key id and per client address on
//!   `/mcp`, the trace stream and the console's sign-in (429 with
//!   `Retry-After`), while a right key from another address still works;
//! - an `Origin` of another loopback port is refused on `/mcp` and on the
//!   cookie-authenticated trace stream.
//!
//! Waits are bounded by [`PATIENCE`], a bound on something expected within
//! a few seconds, never a measurement.

use crate::common;

use common::harness::{StackBuilder, TestStack};
use common::http::{self, Reply};
use ithaca::services::Service;
use ithaca_kit::principal::Principal;
use ithaca_proto::auth::v1 as pb;
use serde_json::{Value, json};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// How long a test waits for something that should happen within a few
/// seconds (the machine is shared with builds).
const PATIENCE: Duration = Duration::from_secs(30);

const LEGACY: &str = "2025-11-25";

fn authority(url: &str) -> &str {
    url.trim_start_matches("http://")
}

async fn new_tenant(auth_url: &str, name: &str) -> String {
    common::auth_client(auth_url, Principal::system(""))
        .create_tenant(pb::CreateTenantRequest { name: name.into() })
        .await
        .expect("tenant")
        .into_inner()
        .tenant_id
}

/// The key id of a token (`dmbg_<env>_<keyid>_<secret>`).
fn key_id(token: &str) -> String {
    token.split('_').nth(2).expect("a key id").to_owned()
}

async fn revoke(auth_url: &str, tenant: &str, token: &str) {
    common::auth_client(auth_url, Principal::system(""))
        .revoke_key(pb::RevokeKeyRequest {
            tenant_id: tenant.to_owned(),
            key_id: key_id(token),
        })
        .await
        .expect("revoke");
}

/// `tools/call` in the 2026-07-28 era with `token`; the JSON-RPC answer.
async fn call(url: &str, token: &str, tool: &str, arguments: Value) -> Value {
    let reply = http::modern(
        url,
        token,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await;
    assert_eq!(reply.status, 200, "{tool}: {}", reply.text());
    reply.json()
}

/// Open a session for `token`; its id.
async fn open_session(url: &str, token: &str) -> String {
    let r = call(url, token, "session_context", json!({"prompt": "probe"})).await;
    r["result"]["structuredContent"]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session id: {r}"))
        .to_owned()
}

/// One request from the loopback address `source` (127.0.0.2 reaches a
/// listener on 127.0.0.1: all of 127/8 is loopback); the whole reply.
async fn request_from(
    source: &str,
    base: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let socket = TcpSocket::new_v4().expect("socket");
    let from: IpAddr = source.parse().expect("an address");
    socket
        .bind(SocketAddr::new(from, 0))
        .expect("bind the source address");
    let to: SocketAddr = authority(base).parse().expect("a socket address");
    let mut stream = socket.connect(to).await.expect("connect");
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
        authority(base),
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.expect("write head");
    stream.write_all(body).await.expect("write body");
    let mut raw = Vec::new();
    tokio::time::timeout(PATIENCE, stream.read_to_end(&mut raw))
        .await
        .expect("a reply in time")
        .expect("read reply");
    http::parse(&raw)
}

/// A 2026-07-28 `tools/list` from `source` with `token`.
async fn list_from(source: &str, base: &str, token: &str) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                      "params": {"_meta": http::modern_meta()}});
    let auth = format!("Bearer {token}");
    request_from(
        source,
        base,
        "POST",
        "/mcp",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/list"),
        ],
        body.to_string().as_bytes(),
    )
    .await
}

/// An open HTTP response read as it arrives.
struct Open {
    stream: TcpStream,
    text: String,
}

impl Open {
    async fn send(url: &str, head: String) -> Open {
        let mut stream = TcpStream::connect(authority(url)).await.expect("connect");
        stream.write_all(head.as_bytes()).await.expect("write");
        Open {
            stream,
            text: String::new(),
        }
    }

    /// Read until `done` holds for everything read so far (true), or the
    /// peer closes or [`PATIENCE`] passes (false).
    async fn until(&mut self, done: impl Fn(&str) -> bool) -> bool {
        let deadline = Instant::now() + PATIENCE;
        let mut buf = [0u8; 4096];
        while !done(&self.text) {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.stream.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => self.text.push_str(&String::from_utf8_lossy(&buf[..n])),
                _ => return false,
            }
        }
        true
    }

    /// Whether the peer closes within [`PATIENCE`]; what it sent first is
    /// returned with the answer.
    async fn closes(&mut self) -> (bool, String) {
        let deadline = Instant::now() + PATIENCE;
        let mut buf = [0u8; 4096];
        let mut rest = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.stream.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return (true, rest),
                Ok(Ok(n)) => rest.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(_) => return (false, rest),
            }
        }
    }
}

fn updates_in(text: &str) -> usize {
    text.matches("notifications/resources/updated").count()
}

// ---------------------------------------------------------------------------
// Item 4: every long-lived stream ends with its key.

/// An edge with keys (cached 1 s) in front of real auth and session
/// services, started by the harness.
struct Stack {
    url: String,
    auth_url: String,
    tenant: String,
    /// An agent key with every agent scope.
    agent: String,
    _stack: TestStack,
}

async fn stack() -> Stack {
    let stack = StackBuilder::new()
        .services(&[Service::Auth, Service::Session])
        .edge(|e| {
            e.backend_timeout_ms = 5000;
            e.key_cache_ms = 1000;
        })
        .start()
        .await;
    Stack {
        url: stack.url.clone(),
        auth_url: stack.url_of(Service::Auth),
        tenant: stack.tenant.clone(),
        agent: stack.agent_key().await,
        _stack: stack,
    }
}

/// POST one legacy request with `token`; the reply.
async fn legacy(url: &str, token: &str, method: &str, params: Value) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": method, "params": params});
    let auth = format!("Bearer {token}");
    http::request(
        url,
        "POST",
        "/mcp",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", LEGACY),
        ],
        body.to_string().as_bytes(),
    )
    .await
}

/// The legacy subscriptions the edge holds, from `/metrics` (`None`: the
/// gauge is not there).
async fn subscriptions_held(url: &str) -> Option<u64> {
    let metrics = http::request(url, "GET", "/metrics", &[], b"").await.text();
    metrics
        .lines()
        .find_map(|l| l.strip_prefix("ithaca_edge_resource_subscriptions "))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_long_lived_stream_of_a_revoked_key_ends() {
    let s = stack().await;
    let sid = open_session(&s.url, &s.agent).await;
    let uri = format!("doomberg://sessions/{sid}");
    let watcher = common::key_for(&s.auth_url, &s.tenant, &["data:read"], pb::Actor::Agent).await;
    let host = authority(&s.url).to_owned();

    // The SSE trace stream.
    let mut trace = Open::send(
        &s.url,
        format!(
            "GET /api/sessions/{sid}/events/stream HTTP/1.1\r\nHost: {host}\r\n\
             Authorization: Bearer {watcher}\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    // A legacy GET stream, and a subscription whose updates it carries.
    let mut get = Open::send(
        &s.url,
        format!(
            "GET /mcp HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\
             MCP-Protocol-Version: {LEGACY}\r\nAuthorization: Bearer {watcher}\r\n\
             Connection: close\r\n\r\n"
        ),
    )
    .await;
    let subscribed = legacy(&s.url, &watcher, "resources/subscribe", json!({"uri": uri})).await;
    assert_eq!(subscribed.status, 200, "{}", subscribed.text());
    let held = subscriptions_held(&s.url).await;
    // A 2026-07-28 listen on the session.
    let body = json!({"jsonrpc": "2.0", "id": "listen-1", "method": "subscriptions/listen",
    "params": {
        "_meta": http::modern_meta(),
        "notifications": {"resourceSubscriptions": [&uri]},
    }})
    .to_string();
    let mut listen = Open::send(
        &s.url,
        format!(
            "POST /mcp HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {watcher}\r\n\
             Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
             MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: subscriptions/listen\r\n\
             Connection: close\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert!(
        listen
            .until(|t| t.contains("notifications/subscriptions/acknowledged"))
            .await,
        "the listen is acknowledged: {}",
        listen.text
    );
    // The update sent as the listen's watch opens; after it, a change
    // reaches the watch.
    assert!(
        listen.until(|t| updates_in(t) >= 1).await,
        "{}",
        listen.text
    );

    // All of them are live: the agent's next event reaches each.
    let recorded = call(
        &s.url,
        &s.agent,
        "record_reasoning",
        json!({"text": "live"}),
    )
    .await;
    assert_eq!(recorded["result"]["isError"], false, "{recorded}");
    assert!(trace.until(|t| t.contains("live")).await, "{}", trace.text);
    assert!(get.until(|t| updates_in(t) >= 1).await, "{}", get.text);
    assert!(
        listen.until(|t| updates_in(t) >= 2).await,
        "{}",
        listen.text
    );

    revoke(&s.auth_url, &s.tenant, &watcher).await;
    let revoked_at = Instant::now();
    // The agent keeps working in the session meanwhile.
    let agent_url = s.url.clone();
    let agent = s.agent.clone();
    let busy = tokio::spawn(async move {
        loop {
            call(
                &agent_url,
                &agent,
                "record_reasoning",
                json!({"text": "after"}),
            )
            .await;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
    for (name, open) in [
        ("the listen", &mut listen),
        ("the legacy GET stream", &mut get),
        ("the trace stream", &mut trace),
    ] {
        let (closed, rest) = open.closes().await;
        assert!(
            closed,
            "{name} of a revoked key must end within the key cache window plus one check; \
             it was still open {:?} after the revocation, and sent after it: {rest}",
            revoked_at.elapsed()
        );
        eprintln!(
            "{name} ended {:?} after the revocation",
            revoked_at.elapsed()
        );
        if name == "the listen" {
            assert!(
                rest.contains("no longer verifies"),
                "the listen says why: {rest}"
            );
        }
    }
    // The subscription behind the GET stream is gone too, not left
    // watching the session service for its caller.
    assert_eq!(held, Some(1), "/metrics counted the subscription");
    let deadline = Instant::now() + PATIENCE;
    while subscriptions_held(&s.url).await != Some(0) {
        assert!(
            Instant::now() < deadline,
            "the revoked key's subscription is still held: {:?}",
            subscriptions_held(&s.url).await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "the legacy subscription ended {:?} after the revocation",
        revoked_at.elapsed()
    );
    busy.abort();
    // The key opens nothing again.
    let again = legacy(&s.url, &watcher, "resources/subscribe", json!({"uri": uri})).await;
    assert_eq!(again.status, 401, "{}", again.text());
}

// ---------------------------------------------------------------------------
// Item 5: a long argument, and another tenant's calls.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_argument_is_a_short_invalid_argument_and_other_tenants_calls_succeed() {
    let up = common::up(&[]);
    let other_tenant = new_tenant(&up.auth_url, "other").await;
    let other = common::key_for(
        &up.auth_url,
        &other_tenant,
        &["data:read"],
        pb::Actor::Agent,
    )
    .await;
    open_session(&up.url, &up.agent).await;
    open_session(&up.url, &other).await;

    // The other tenant reads prices all along, on the same edge and the
    // same channel to the broker.
    let reader = {
        let url = up.url.clone();
        tokio::spawn(async move {
            let mut failures = Vec::new();
            let mut answered = Vec::new();
            for _ in 0..60 {
                let answer = call(
                    &url,
                    &other,
                    "get_price_history",
                    json!({"symbol": "MSFT", "start": "2013-01-02", "limit": 5}),
                )
                .await;
                if answer["result"]["isError"] != false {
                    failures.push(answer);
                }
                answered.push(Instant::now());
            }
            (failures, answered)
        })
    };
    let started = Instant::now();
    for round in 0..10 {
        let length = if round % 2 == 0 { 17_000 } else { 100_000 };
        let answer = call(
            &up.url,
            &up.agent,
            "get_price_history",
            json!({"symbol": "A".repeat(length)}),
        )
        .await;
        let error = common::tool_error(&answer["result"]);
        assert_eq!(error["error"], "INVALID_ARGUMENT", "{error}");
        assert!(
            error.get("retryable").is_none(),
            "a bad argument is not retryable: {error}"
        );
        let message = error["message"].as_str().expect("a message");
        assert!(message.len() < 300, "a short message: {message}");
        assert!(message.starts_with("symbol: \"AAAA"), "{message}");
        assert!(
            message.contains(&format!("({length} characters)")),
            "the message says how long the input was: {message}"
        );
    }
    let ended = Instant::now();
    let (failures, answered) = reader.await.expect("the reader");
    assert!(
        failures.is_empty(),
        "another tenant's calls failed: {failures:#?}"
    );
    let meanwhile = answered
        .iter()
        .filter(|at| **at > started && **at < ended)
        .count();
    eprintln!("{meanwhile} of the other tenant's 60 calls were answered while the long ones ran");
    assert!(
        meanwhile > 0,
        "the other tenant's calls overlapped the long ones"
    );
}

// ---------------------------------------------------------------------------
// Item 13: failed key checks are throttled at every door.

/// Failures in a row that throttle a key id, and an address (the README's
/// numbers; `ithaca_edge::throttle::{PER_KEY, PER_ADDRESS}`).
const KEY_BURST: usize = 10;
const ADDRESS_BURST: u8 = 30;

/// A token of a key id that does not exist.
fn wrong_token(n: u8) -> String {
    format!(
        "dmbg_test_{}_{}",
        format!("{n:02x}").repeat(16),
        "x".repeat(40)
    )
}

fn retry_after(reply: &Reply) -> u64 {
    reply
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("a 429 needs Retry-After in whole seconds: {reply:?}"))
}

/// `form` posted to the console's sign-in from `source`.
async fn sign_in_from(source: &str, base: &str, key: &str) -> Reply {
    let body = format!("key={key}");
    request_from(
        source,
        base,
        "POST",
        "/console/sign-in",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        body.as_bytes(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_secrets_are_throttled_at_every_door_and_a_right_key_elsewhere_works() {
    let up = common::up(&[]);
    let sid = open_session(&up.url, &up.agent).await;
    let stream = format!("/api/sessions/{sid}/events/stream");
    let burst = KEY_BURST;

    // /mcp: one key id's wrong secrets are 401 until the burst, then 429
    // with Retry-After.
    let token = wrong_token(1);
    for attempt in 0..burst {
        let reply = list_from("127.0.0.1", &up.url, &token).await;
        assert_eq!(reply.status, 401, "attempt {attempt}: {}", reply.text());
    }
    let reply = list_from("127.0.0.1", &up.url, &token).await;
    assert_eq!(reply.status, 429, "{}", reply.text());
    assert!(retry_after(&reply) >= 1);

    // The SSE trace stream, another key id.
    let token = wrong_token(2);
    let auth = format!("Bearer {token}");
    for attempt in 0..burst {
        let reply = request_from(
            "127.0.0.1",
            &up.url,
            "GET",
            &stream,
            &[("Authorization", &auth)],
            b"",
        )
        .await;
        assert_eq!(reply.status, 401, "attempt {attempt}: {}", reply.text());
    }
    let reply = request_from(
        "127.0.0.1",
        &up.url,
        "GET",
        &stream,
        &[("Authorization", &auth)],
        b"",
    )
    .await;
    assert_eq!(reply.status, 429, "{}", reply.text());
    assert!(retry_after(&reply) >= 1);

    // The console's sign-in, another key id.
    let token = wrong_token(3);
    for attempt in 0..burst {
        let reply = sign_in_from("127.0.0.1", &up.url, &token).await;
        assert_eq!(reply.status, 401, "attempt {attempt}: {}", reply.text());
    }
    let reply = sign_in_from("127.0.0.1", &up.url, &token).await;
    assert_eq!(reply.status, 429, "{}", reply.text());
    assert!(retry_after(&reply) >= 1);
    assert!(
        reply.text().contains("Too many failed sign-ins"),
        "{}",
        reply.text()
    );
    // The doors count together: the key id throttled on /mcp is throttled
    // at the console too.
    let reply = sign_in_from("127.0.0.1", &up.url, &wrong_token(1)).await;
    assert_eq!(reply.status, 429, "{}", reply.text());

    // Spraying key ids from 127.0.0.1: each new key id fails once, and
    // soon the address is throttled, whatever key id it names. (Thirty
    // failures so far; a few more make up for what leaked away meanwhile.)
    let address = ADDRESS_BURST;
    let mut throttled = None;
    for n in 4..(4 + address) {
        let reply = list_from("127.0.0.1", &up.url, &wrong_token(n)).await;
        if reply.status == 429 {
            throttled = Some(reply);
            break;
        }
        assert_eq!(reply.status, 401, "key id {n}: {}", reply.text());
    }
    let reply = throttled.expect("the address is throttled");
    assert!(retry_after(&reply) >= 1);
    let metrics = http::request(&up.url, "GET", "/metrics", &[], b"")
        .await
        .text();
    let refused: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ithaca_edge_key_checks_throttled_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("/metrics counts throttled checks: {metrics}"));
    assert!(refused >= 5, "{refused} throttled checks counted");

    // Right keys of other key ids from another address work: an agent on
    // /mcp and a person at the console.
    let fresh = common::key_for(
        &up.auth_url,
        &new_tenant(&up.auth_url, "fresh").await,
        &["data:read"],
        pb::Actor::Agent,
    )
    .await;
    let reply = list_from("127.0.0.2", &up.url, &fresh).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let reply = sign_in_from("127.0.0.2", &up.url, &up.human).await;
    assert_eq!(reply.status, 303, "{}", reply.text());
    assert!(reply.header("set-cookie").is_some(), "{reply:?}");
}

// ---------------------------------------------------------------------------
// Item 14: another loopback port is another origin.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_of_another_loopback_port_is_refused() {
    let up = common::up(&[]);
    let sid = open_session(&up.url, &up.agent).await;
    let own = up.url.clone();
    let port: u16 = authority(&up.url)
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port");
    let other = format!(
        "http://127.0.0.1:{}",
        if port == 65535 { 1 } else { port + 1 }
    );

    // /mcp with a bearer key.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list",
                      "params": {"_meta": http::modern_meta()}})
    .to_string();
    let auth = format!("Bearer {}", up.agent);
    for (origin, expected) in [(&other, 403), (&own, 200)] {
        let reply = http::request(
            &up.url,
            "POST",
            "/mcp",
            &[
                ("Authorization", &auth),
                ("Origin", origin),
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", "tools/list"),
            ],
            body.as_bytes(),
        )
        .await;
        assert_eq!(reply.status, expected, "Origin {origin}: {}", reply.text());
    }

    // The trace stream with a console sign-in's cookie.
    let signed_in = http::request(
        &up.url,
        "POST",
        "/console/sign-in",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        format!("key={}", up.human).as_bytes(),
    )
    .await;
    assert_eq!(signed_in.status, 303, "{}", signed_in.text());
    let cookie = signed_in
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .expect("a cookie")
        .to_owned();
    let path = format!("/api/sessions/{sid}/events/stream");
    let refused = http::request(
        &up.url,
        "GET",
        &path,
        &[("Cookie", &cookie), ("Origin", &other)],
        b"",
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.text());
    let host = authority(&up.url);
    let mut accepted = Open::send(
        &up.url,
        format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nCookie: {cookie}\r\nOrigin: {own}\r\n\
             Connection: close\r\n\r\n"
        ),
    )
    .await;
    assert!(
        accepted.until(|t| t.contains("\r\n\r\n")).await,
        "{}",
        accepted.text
    );
    assert!(
        accepted.text.starts_with("HTTP/1.1 200"),
        "the edge's own origin is accepted: {}",
        accepted.text
    );
}
