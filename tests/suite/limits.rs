//! Rate limits and quotas per key and per tenant, and the concurrency gate
//! of each backend (issue 15, item 3), through real edges over HTTP.
//!
//! - A burst over a key's limit is answered 429 with `Retry-After` and
//!   counted in `/metrics`; another key, another tenant are unaffected.
//! - A tenant's limit holds across its keys.
//! - Two edges draw on one budget: through one auth service (SQLite), and
//!   through two auth replicas on one PostgreSQL schema.
//! - `ithaca serve edge` takes its limits from the environment.
//! - A backend with its maximum of calls in flight refuses the next at once
//!   with the retryable `BACKEND_BUSY`, and other backends still answer.
//!
//! Windows are 31 days long and aligned to the Unix epoch, so a test does
//! not see one end (it would have to run across the one instant in 31 days
//! when it does). Waits are bounded by [`PATIENCE`], never measured.

use crate::common;

use common::harness::{StackBuilder, TestStack};
use common::http;
use ithaca::services::Service;
use ithaca_edge::limits::{RateLimits, Rule};
use ithaca_kit::principal::Principal;
use ithaca_proto::auth::v1 as pb;
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

/// How long a test waits for something expected within a second or two.
const PATIENCE: Duration = Duration::from_secs(30);

fn rule(text: &str) -> Rule {
    text.parse().expect("a valid rule")
}

/// An edge in this process, started by the harness in front of services
/// that run elsewhere.
struct Edge {
    url: String,
    /// `None` for an edge that runs as its own process.
    _stack: Option<TestStack>,
}

/// What an edge under test is given.
struct EdgeSetup<'a> {
    auth_url: &'a str,
    session_url: &'a str,
    skills_url: Option<String>,
    limits: RateLimits,
    max_in_flight: usize,
}

async fn start_edge(setup: EdgeSetup<'_>) -> Edge {
    let RateLimits {
        per_key,
        per_tenant,
    } = setup.limits;
    let max_in_flight = match setup.max_in_flight {
        0 => ithaca_edge::backend::DEFAULT_MAX_IN_FLIGHT,
        n => n,
    };
    let mut builder = StackBuilder::new()
        .services(&[])
        .elsewhere(Service::Auth, setup.auth_url)
        .elsewhere(Service::Session, setup.session_url)
        .edge(move |e| {
            e.backend_timeout_ms = 3000;
            e.key_cache_ms = 1000;
            e.limits.per_key = per_key;
            e.limits.per_tenant = per_tenant;
            e.limits.backend_max_in_flight = max_in_flight;
        });
    if let Some(url) = setup.skills_url {
        builder = builder.elsewhere(Service::Skills, url);
    }
    let stack = builder.start().await;
    Edge {
        url: stack.url.clone(),
        _stack: Some(stack),
    }
}

async fn tenant(auth_url: &str) -> String {
    common::auth_client(auth_url, Principal::system(""))
        .create_tenant(pb::CreateTenantRequest { name: "t".into() })
        .await
        .expect("tenant")
        .into_inner()
        .tenant_id
}

/// A new agent key of `tenant` with every agent scope.
async fn agent_key(auth_url: &str, tenant: &str) -> String {
    let scopes: Vec<String> = ithaca_proto::scopes::ALL
        .into_iter()
        .filter(|s| *s != "approvals:decide")
        .map(str::to_owned)
        .collect();
    common::auth_client(auth_url, Principal::system(""))
        .create_key(pb::CreateKeyRequest {
            tenant_id: tenant.to_owned(),
            scopes,
            actor: pb::Actor::Agent as i32,
            label: "test".into(),
            env: String::new(),
        })
        .await
        .expect("create key")
        .into_inner()
        .token
}

/// One `tools/list`; its reply.
async fn list(edge: &Edge, token: &str) -> http::Reply {
    http::modern(&edge.url, token, "tools/list", json!({})).await
}

/// Send `n` requests with `token` to `edge`: how many were admitted (200)
/// and how many refused (429, each checked for its `Retry-After`).
async fn burst(edge: &Edge, token: &str, n: usize) -> (usize, usize) {
    let (mut ok, mut limited) = (0, 0);
    for _ in 0..n {
        let reply = list(edge, token).await;
        match reply.status {
            200 => ok += 1,
            429 => {
                check_refusal(&reply);
                limited += 1;
            }
            other => panic!("unexpected status {other}: {}", reply.text()),
        }
    }
    (ok, limited)
}

/// A 429 says when to retry, in whole seconds within the window, and why.
fn check_refusal(reply: &http::Reply) {
    let retry_after: u64 = reply
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("429 without a numeric Retry-After: {:?}", reply.headers));
    assert!(
        (1..=31 * 24 * 3600).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    assert!(
        reply.text().contains("rate limit exceeded"),
        "{}",
        reply.text()
    );
}

/// The value of the `/metrics` sample that starts with `series`.
async fn sample(edge: &Edge, series: &str) -> f64 {
    let reply = http::request(&edge.url, "GET", "/metrics", &[], b"").await;
    assert_eq!(reply.status, 200);
    let text = reply.text();
    text.lines()
        .find_map(|l| l.strip_prefix(series))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

/// Auth and session on SQLite in this process.
/// Auth and session on SQLite, without an edge: the tests start theirs.
struct Services {
    auth_url: String,
    session_url: String,
    _stack: TestStack,
}

async fn services() -> Services {
    let stack = StackBuilder::new()
        .services(&[Service::Auth, Service::Session])
        .without_edge()
        .start()
        .await;
    Services {
        auth_url: stack.url_of(Service::Auth),
        session_url: stack.url_of(Service::Session),
        _stack: stack,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_a_keys_limit_is_429_with_retry_after_and_counted() {
    let s = services().await;
    let edge = start_edge(EdgeSetup {
        auth_url: &s.auth_url,
        session_url: &s.session_url,
        skills_url: None,
        limits: RateLimits {
            per_key: vec![rule("5/31d")],
            per_tenant: vec![],
        },
        max_in_flight: 0,
    })
    .await;
    let t = tenant(&s.auth_url).await;
    let greedy = agent_key(&s.auth_url, &t).await;
    let (ok, limited) = burst(&edge, &greedy, 8).await;
    assert_eq!((ok, limited), (5, 3), "five admitted, then refused");

    // Another key of the same tenant has a budget of its own.
    let other = agent_key(&s.auth_url, &t).await;
    assert_eq!(list(&edge, &other).await.status, 200);
    // And the spent key stays refused.
    assert_eq!(list(&edge, &greedy).await.status, 429);

    assert_eq!(
        sample(&edge, "ithaca_edge_rate_limited_total{scope=\"key\"}").await,
        4.0
    );
    assert_eq!(
        sample(&edge, "ithaca_edge_rate_limited_total{scope=\"tenant\"}").await,
        0.0
    );
    assert_eq!(
        sample(&edge, "ithaca_edge_rate_limit_store_errors_total").await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_limit_holds_across_its_keys_and_spares_other_tenants() {
    let s = services().await;
    let edge = start_edge(EdgeSetup {
        auth_url: &s.auth_url,
        session_url: &s.session_url,
        skills_url: None,
        limits: RateLimits {
            per_key: vec![rule("100/31d")],
            per_tenant: vec![rule("6/31d")],
        },
        max_in_flight: 0,
    })
    .await;
    let busy = tenant(&s.auth_url).await;
    let a = agent_key(&s.auth_url, &busy).await;
    let b = agent_key(&s.auth_url, &busy).await;
    let (ok_a, _) = burst(&edge, &a, 4).await;
    let (ok_b, limited_b) = burst(&edge, &b, 4).await;
    assert_eq!(ok_a, 4);
    assert_eq!((ok_b, limited_b), (2, 2), "the tenant's six are shared");

    let quiet = tenant(&s.auth_url).await;
    let c = agent_key(&s.auth_url, &quiet).await;
    assert_eq!(burst(&edge, &c, 3).await, (3, 0), "another tenant");
    assert_eq!(
        sample(&edge, "ithaca_edge_rate_limited_total{scope=\"tenant\"}").await,
        2.0
    );
}

/// Requests alternate between two edges with one key: together they admit
/// one budget, not one each. Each edge may strand at most `batch - 1`
/// leased units when the budget runs out, so the total is between
/// `limit - 2 (batch - 1)` and `limit`.
async fn two_edges_share_one_budget(a: &Edge, b: &Edge, token: &str, limit: u64) {
    let batch = rule(&format!("{limit}/31d")).batch() as usize;
    let limit = limit as usize;
    let mut ok = [0usize; 2];
    let mut limited = [0usize; 2];
    for i in 0..(limit * 3 / 2) {
        let (edge, n) = if i % 2 == 0 { (a, 0) } else { (b, 1) };
        let reply = list(edge, token).await;
        match reply.status {
            200 => ok[n] += 1,
            429 => {
                check_refusal(&reply);
                limited[n] += 1;
            }
            other => panic!("unexpected status {other}: {}", reply.text()),
        }
    }
    let admitted = ok[0] + ok[1];
    eprintln!(
        "limit {limit} (batch {batch}): admitted {ok:?}, refused {limited:?} by edges A and B"
    );
    assert!(
        admitted <= limit,
        "two edges admitted {admitted}, over the one budget of {limit}"
    );
    assert!(
        admitted >= limit - 2 * (batch - 1),
        "two edges admitted only {admitted} of {limit}"
    );
    assert!(
        limited[0] > 0 && limited[1] > 0,
        "both edges refuse once the shared budget is spent: {limited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_edges_on_one_auth_service_enforce_one_budget() {
    let s = services().await;
    let limits = RateLimits {
        per_key: vec![rule("40/31d")],
        per_tenant: vec![],
    };
    let setup = || EdgeSetup {
        auth_url: &s.auth_url,
        session_url: &s.session_url,
        skills_url: None,
        limits: limits.clone(),
        max_in_flight: 0,
    };
    let a = start_edge(setup()).await;
    let b = start_edge(setup()).await;
    let t = tenant(&s.auth_url).await;
    let key = agent_key(&s.auth_url, &t).await;
    two_edges_share_one_budget(&a, &b, &key, 40).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_edges_on_two_auth_replicas_of_one_postgres_enforce_one_budget() {
    let Some(url) = common::postgres("two_edges_on_two_auth_replicas_of_one_postgres") else {
        return;
    };
    let schema = common::unique_schema("limits");
    let auth_a = common::start_auth(&url, &schema).await;
    let auth_b = common::start_auth(&url, &schema).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let session = common::start_session(&common::sqlite_path(&dir, "session"), "unused").await;
    let limits = RateLimits {
        per_key: vec![rule("60/31d")],
        per_tenant: vec![],
    };
    let a = start_edge(EdgeSetup {
        auth_url: &auth_a.url,
        session_url: &session.url,
        skills_url: None,
        limits: limits.clone(),
        max_in_flight: 0,
    })
    .await;
    let b = start_edge(EdgeSetup {
        auth_url: &auth_b.url,
        session_url: &session.url,
        skills_url: None,
        limits,
        max_in_flight: 0,
    })
    .await;
    let t = tenant(&auth_a.url).await;
    let key = agent_key(&auth_a.url, &t).await;
    two_edges_share_one_budget(&a, &b, &key, 60).await;
    common::drop_schema(&url, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_edge_takes_its_rate_limits_from_the_environment() {
    let mut cmd = common::ithaca();
    cmd.env("ITHACA_RATE_LIMIT_TENANT", "3/31d").args([
        "serve",
        "edge",
        "--auth",
        "off",
        "--listen",
        "127.0.0.1:0",
    ]);
    let process = common::Process::spawn(cmd);
    let lines = process.wait_for("listening on", Duration::from_secs(60));
    let addr = lines
        .last()
        .and_then(|l| l.rsplit(' ').next())
        .expect("an address")
        .to_owned();
    let edge = Edge {
        url: format!("http://{addr}"),
        _stack: None,
    };
    assert_eq!(burst(&edge, "unused", 5).await, (3, 2));
    assert_eq!(
        sample(&edge, "ithaca_edge_rate_limited_total{scope=\"tenant\"}").await,
        2.0
    );

    // A rule that does not parse stops the edge before it serves, naming
    // the rule and the expected form.
    let output = common::ithaca()
        .env("ITHACA_RATE_LIMIT_KEY", "10/week")
        .args(["serve", "edge", "--auth", "off", "--listen", "127.0.0.1:0"])
        .output()
        .expect("run ithaca");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("10/week") && stderr.contains("N/PERIOD"),
        "{stderr}"
    );
}

/// A TCP listener that accepts connections and never answers: a backend
/// that stalled with its socket open.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saturated_backend_refuses_at_once_and_others_still_answer() {
    let s = services().await;
    let stalled_url = black_hole().await;
    let edge = start_edge(EdgeSetup {
        auth_url: &s.auth_url,
        session_url: &s.session_url,
        skills_url: Some(stalled_url.clone()),
        limits: RateLimits::default(),
        max_in_flight: 1,
    })
    .await;
    let t = tenant(&s.auth_url).await;
    let agent = agent_key(&s.auth_url, &t).await;
    let opened = call(&edge.url, &agent, "session_context", json!({"prompt": "p"})).await;
    let sid = opened["result"]["structuredContent"]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session: {opened}"))
        .to_owned();

    // The first call holds the stalled backend's one place...
    let url = edge.url.clone();
    let token = agent.clone();
    let first =
        tokio::spawn(
            async move { call(&url, &token, "search_skills", json!({"query": "vol"})).await },
        );
    let in_flight = format!("ithaca_edge_backend_in_flight{{backend=\"{stalled_url}\"}}");
    let deadline = Instant::now() + PATIENCE;
    while sample(&edge, &in_flight).await < 1.0 {
        assert!(Instant::now() < deadline, "the first call never went out");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // ...so the next is refused at once, retryably, naming the backend.
    let second = call(&edge.url, &agent, "search_skills", json!({"query": "x"})).await;
    let error = common::tool_error(&second["result"]);
    assert_eq!(error["error"], "BACKEND_BUSY", "{error}");
    assert_eq!(error["retryable"], true, "{error}");
    assert!(
        error["message"].as_str().is_some_and(
            |m| m.contains("ithaca.skills.v1.SkillsService") && m.contains(&stalled_url)
        ),
        "{error}"
    );
    // The session service is another backend, with places of its own.
    let joined = call(
        &edge.url,
        &agent,
        "session_context",
        json!({"prompt": "meanwhile", "session_id": sid}),
    )
    .await;
    assert_eq!(joined["result"]["isError"], false, "{joined}");
    assert_eq!(
        sample(
            &edge,
            &format!("ithaca_edge_backend_refused_total{{backend=\"{stalled_url}\"}}")
        )
        .await,
        1.0
    );

    // The first call ends at its deadline and gives its place back.
    let first = first.await.expect("first call");
    assert_eq!(common::tool_error(&first["result"])["error"], "TIMEOUT");
    assert_eq!(sample(&edge, &in_flight).await, 0.0);
}
