//! The edge trusting an external identity provider (`--oauth-issuer`,
//! issue 22 §3): the test plays the provider, with a P-256 key it
//! generates and its metadata and JWKS served on loopback, and mints the
//! tokens. Auth and session run in-process on real gRPC, on SQLite and on
//! PostgreSQL; one test runs `ithaca up` with the flag's environment
//! variable, where the human-only tools exist.

use crate::common;

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use common::harness::{StackBuilder, TestStack};
use common::http::{self, Reply};
use ithaca::services::Service;
use ithaca_kit::principal::Principal;
use ithaca_proto::auth::v1 as pb;
use p256::ecdsa::signature::Signer;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// A loopback identity provider with one P-256 key, `k1`.
struct Idp {
    url: String,
    key: p256::ecdsa::SigningKey,
    jwks_gets: Arc<AtomicUsize>,
}

fn jwk(key: &p256::ecdsa::SigningKey, kid: &str) -> Value {
    let point = key.verifying_key().to_encoded_point(false);
    json!({
        "kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
        "x": URL_SAFE_NO_PAD.encode(point.x().expect("x")),
        "y": URL_SAFE_NO_PAD.encode(point.y().expect("y")),
    })
}

impl Idp {
    async fn start() -> Idp {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let key = p256::ecdsa::SigningKey::random(&mut rand_core::OsRng);
        let jwks_gets = Arc::new(AtomicUsize::new(0));
        let metadata = json!({"issuer": url, "jwks_uri": format!("{url}/keys")});
        let keys = json!({"keys": [jwk(&key, "k1")]});
        let app = Router::new()
            // Only the OpenID path: the RFC 8414 one answers 404, so the
            // fall-back is exercised too.
            .route(
                "/.well-known/openid-configuration",
                get(move || async move { axum::Json(metadata) }),
            )
            .route(
                "/keys",
                get(move |State(gets): State<Arc<AtomicUsize>>| async move {
                    gets.fetch_add(1, Ordering::SeqCst);
                    axum::Json(keys)
                }),
            )
            .with_state(jwks_gets.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        Idp {
            url,
            key,
            jwks_gets,
        }
    }

    /// Claims of a token for `resource` in `tenant`, valid for five minutes.
    fn claims(&self, resource: &str, tenant: &str, sub: &str, scope: &str) -> Value {
        let now = now();
        json!({
            "iss": self.url, "sub": sub, "aud": [resource, "account"], "azp": "test-client",
            "exp": now + 300, "iat": now, "nbf": now - 1, "jti": uuid::Uuid::new_v4().to_string(),
            "scope": scope, "ithaca_tenant": tenant,
        })
    }

    fn sign(&self, kid: &str, claims: &Value) -> String {
        sign(&self.key, "ES256", kid, claims)
    }
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs() as i64
}

fn unsigned(alg: &str, kid: &str, claims: &Value) -> String {
    format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(json!({"alg": alg, "kid": kid, "typ": "at+jwt"}).to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

fn sign(key: &p256::ecdsa::SigningKey, alg: &str, kid: &str, claims: &Value) -> String {
    let input = unsigned(alg, kid, claims);
    let signature: p256::ecdsa::Signature = key.sign(input.as_bytes());
    format!("{input}.{}", URL_SAFE_NO_PAD.encode(signature.to_bytes()))
}

const ALL: &str = "data:read strategy:author runs:write runs:cancel approvals:read \
                   approvals:decide artifacts:read filters:write comments:write";

struct Stack {
    url: String,
    resource: String,
    tenant_a: String,
    tenant_b: String,
    key_a: String,
    stack: TestStack,
}

async fn tenant(auth_url: &str, name: &str) -> String {
    common::auth_client(auth_url, Principal::system(""))
        .create_tenant(pb::CreateTenantRequest { name: name.into() })
        .await
        .expect("tenant")
        .into_inner()
        .tenant_id
}

/// Auth and session on SQLite or on PostgreSQL `(url, schema prefix)`, two
/// tenants, and an edge trusting `idp` (`--oauth-issuer`), started by the
/// harness.
async fn stack(idp: &Idp, db: Option<(&str, &str)>) -> Stack {
    let issuer = idp.url.clone();
    let mut builder = StackBuilder::new()
        .services(&[Service::Auth, Service::Session])
        .edge(move |e| {
            e.backend_timeout_ms = 2000;
            e.key_cache_ms = 1000;
            e.oauth.issuers = vec![issuer];
        });
    if let Some((pg, prefix)) = db {
        builder = builder.postgres(pg, prefix);
    }
    let stack = builder.start().await;
    let auth_url = stack.url_of(Service::Auth);
    let tenant_a = tenant(&auth_url, "a").await;
    let tenant_b = tenant(&auth_url, "b").await;
    let key_a = common::auth_client(&auth_url, Principal::system(""))
        .create_key(pb::CreateKeyRequest {
            tenant_id: tenant_a.clone(),
            scopes: vec!["data:read".into()],
            actor: pb::Actor::Agent as i32,
            label: "beside tokens".into(),
            env: String::new(),
        })
        .await
        .expect("key")
        .into_inner()
        .token;
    Stack {
        url: stack.url.clone(),
        resource: stack.mcp_url(),
        tenant_a,
        tenant_b,
        key_a,
        stack,
    }
}

async fn call(s: &Stack, token: &str, tool: &str, arguments: Value) -> Reply {
    http::modern(
        &s.url,
        token,
        "tools/call",
        json!({"name": tool, "arguments": arguments}),
    )
    .await
}

fn result(reply: &Reply) -> Value {
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["result"].clone()
}

/// Every check of the suite, on one stack.
async fn suite(s: &Stack, idp: &Idp) {
    let a = |sub: &str, scope: &str| idp.claims(&s.resource, &s.tenant_a, sub, scope);
    let token = idp.sign("k1", &a("alice", ALL));

    // A valid token lists and calls tools as an agent of tenant A; no
    // human-only tool is offered to it, whatever its scope says.
    let tools = result(&http::modern(&s.url, &token, "tools/list", json!({})).await);
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(names.contains(&"session_context"), "{names:?}");
    let opened = result(&call(s, &token, "session_context", json!({"prompt": "look"})).await);
    assert_eq!(opened["isError"], false, "{opened}");
    let sid = opened["structuredContent"]["session_id"]
        .as_str()
        .expect("session id")
        .to_owned();
    // The agent is (issuer, subject, client): a fresh token of the same
    // user and client is in the same session; another user is not.
    let again = idp.sign("k1", &a("alice", ALL));
    assert_ne!(again, token);
    let noted = result(&call(s, &again, "record_reasoning", json!({"text": "same agent"})).await);
    assert_eq!(noted["isError"], false, "{noted}");
    let bob = idp.sign("k1", &a("bob", ALL));
    let refused = result(&call(s, &bob, "record_reasoning", json!({"text": "who?"})).await);
    assert_eq!(
        common::tool_error(&refused)["error"],
        "no_active_session",
        "{refused}"
    );
    // Tenant B's token never reads tenant A's session; A's does.
    let uri = json!({"uri": format!("doomberg://sessions/{sid}")});
    let read = http::modern(&s.url, &token, "resources/read", uri.clone()).await;
    assert!(
        result(&read)["contents"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains(&sid))
    );
    let b = idp.sign("k1", &idp.claims(&s.resource, &s.tenant_b, "alice", ALL));
    let read = http::modern(&s.url, &b, "resources/read", uri).await;
    assert_eq!(read.status, 200, "{}", read.text());
    assert!(read.json()["error"].is_object(), "{}", read.text());
    assert!(!read.text().contains("same agent"), "{}", read.text());

    // Refused tokens: 401 with `invalid_token`.
    let now = now();
    let mut wrong_aud = a("alice", ALL);
    wrong_aud["aud"] = json!("https://other.example/mcp");
    let mut expired = a("alice", ALL);
    expired["exp"] = json!(now - 300);
    let mut early = a("alice", ALL);
    early["nbf"] = json!(now + 300);
    let mut unknown_tenant = a("alice", ALL);
    unknown_tenant["ithaca_tenant"] = json!(uuid::Uuid::new_v4().to_string());
    let stranger = p256::ecdsa::SigningKey::random(&mut rand_core::OsRng);
    let hs256 = {
        use hmac::{Hmac, Mac};
        let input = unsigned("HS256", "k1", &a("alice", ALL));
        let public = idp.key.verifying_key().to_encoded_point(false);
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(public.as_bytes()).expect("key");
        mac.update(input.as_bytes());
        format!(
            "{input}.{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        )
    };
    let gets_before = idp.jwks_gets.load(Ordering::SeqCst);
    let cases = [
        ("another audience", idp.sign("k1", &wrong_aud), "resource"),
        ("expired", idp.sign("k1", &expired), "expired"),
        ("not yet valid", idp.sign("k1", &early), "not valid yet"),
        (
            "unknown tenant",
            idp.sign("k1", &unknown_tenant),
            "no such tenant",
        ),
        (
            "unknown key",
            sign(&stranger, "ES256", "k9", &a("alice", ALL)),
            "no key",
        ),
        (
            "alg none",
            format!("{}.", unsigned("none", "k1", &a("alice", ALL))),
            "none",
        ),
        ("HS256 with the public key", hs256, "HS256"),
    ];
    for (case, token, reason) in cases {
        let reply = http::modern(&s.url, &token, "tools/list", json!({})).await;
        assert_eq!(reply.status, 401, "{case}: {}", reply.text());
        let challenge = reply.header("www-authenticate").unwrap_or_default();
        assert!(
            challenge.starts_with("Bearer realm=\"doomberg-mcp\""),
            "{case}: {challenge}"
        );
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{case}: {challenge}"
        );
        assert!(
            challenge.contains("scope=\"data:read\""),
            "{case}: {challenge}"
        );
        assert!(
            challenge.contains(&format!(
                "resource_metadata=\"{}/.well-known/oauth-protected-resource\"",
                s.url
            )),
            "{case}: {challenge}"
        );
        let description = reply.json()["error_description"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(description.contains(reason), "{case}: {description}");
        assert!(
            !reply.text().contains(&token),
            "{case}: the token was echoed"
        );
    }
    // The unknown kid made the edge fetch the keys again, once.
    assert_eq!(idp.jwks_gets.load(Ordering::SeqCst), gets_before + 1);

    // No credential at all: a challenge without an error.
    let reply = http::request(
        &s.url,
        "POST",
        "/mcp",
        &[("Content-Type", "application/json")],
        b"{}",
    )
    .await;
    assert_eq!(reply.status, 401);
    let challenge = reply.header("www-authenticate").unwrap_or_default();
    assert!(!challenge.contains("error="), "{challenge}");

    // A scope missing from the token: 403 naming what the call needs.
    let narrow = idp.sign("k1", &a("carol", "runs:write"));
    let reply = call(s, &narrow, "session_context", json!({"prompt": "x"})).await;
    assert_eq!(reply.status, 403, "{}", reply.text());
    let challenge = reply.header("www-authenticate").unwrap_or_default();
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"data:read\""), "{challenge}");

    // `dmbg_` keys work beside tokens.
    let keyed = http::modern(&s.url, &s.key_a, "tools/list", json!({})).await;
    assert_eq!(keyed.status, 200, "{}", keyed.text());

    // The resource metadata names the issuer, at both paths.
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let meta = http::request(&s.url, "GET", path, &[], b"").await.json();
        // The trusted issuer, beside the built-in authorization server
        // (the edge's own URL) that an edge with keys always serves.
        assert_eq!(
            meta["authorization_servers"],
            json!([s.url, idp.url]),
            "{meta}"
        );
        assert_eq!(meta["resource"], s.resource);
        assert_eq!(meta["bearer_methods_supported"], json!(["header"]));
        assert_eq!(meta["scopes_supported"], json!(ithaca_proto::scopes::ALL));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_tokens_on_sqlite() {
    let idp = Idp::start().await;
    let s = stack(&idp, None).await;
    suite(&s, &idp).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_tokens_on_postgres() {
    let Some(pg) = common::postgres("external_tokens_on_postgres") else {
        return;
    };
    let schema = common::unique_schema("oauth");
    let idp = Idp::start().await;
    let s = stack(&idp, Some((&pg, &schema))).await;
    suite(&s, &idp).await;
    s.stack.stop().await;
}

/// `ithaca up` with `ITHACA_OAUTH_ISSUERS`: the flag is wired, and a token
/// that claims every scope still cannot act as a person.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_trusts_the_issuer_and_a_token_is_never_a_person() {
    let idp = Idp::start().await;
    let up = common::up(&[("ITHACA_OAUTH_ISSUERS", idp.url.as_str())]);
    let resource = format!("{}/mcp", up.url);
    let token = idp.sign("k1", &idp.claims(&resource, &up.tenant, "dana", ALL));
    let listed = |reply: Reply| -> Vec<String> {
        result(&reply)["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect()
    };
    let human = listed(http::modern(&up.url, &up.human, "tools/list", json!({})).await);
    assert!(human.iter().any(|n| n == "decide_approval"), "{human:?}");
    let tools = listed(http::modern(&up.url, &token, "tools/list", json!({})).await);
    assert!(tools.iter().any(|n| n == "session_context"), "{tools:?}");
    // Deciding needs a person: the approvals service refuses the agent a
    // token is, in its session, though the token claims approvals:decide.
    let opened = result(
        &http::modern(
            &up.url,
            &token,
            "tools/call",
            json!({"name": "session_context", "arguments": {"prompt": "decide"}}),
        )
        .await,
    );
    assert_eq!(opened["isError"], false, "{opened}");
    let decided = result(
        &http::modern(
            &up.url,
            &token,
            "tools/call",
            json!({"name": "decide_approval", "arguments": {"approval_id": "00000000-0000-4000-8000-000000000000", "decision": "approve"}}),
        )
        .await,
    );
    let error = common::tool_error(&decided);
    assert_eq!(error["error"], "HUMAN_REQUIRED", "{decided}");
    let meta = http::request(
        &up.url,
        "GET",
        "/.well-known/oauth-protected-resource",
        &[],
        b"",
    )
    .await
    .json();
    // The built-in server (the edge's own origin) and the external issuer.
    assert_eq!(
        meta["authorization_servers"],
        json!([up.url.clone(), idp.url]),
        "{meta}"
    );
}

/// A tool call's result (the test fails on a transport or protocol error).
async fn tool(up: &common::Up, token: &str, name: &str, arguments: Value) -> Value {
    let reply = http::modern(
        &up.url,
        token,
        "tools/call",
        json!({"name": name, "arguments": arguments}),
    )
    .await;
    assert_eq!(reply.status, 200, "{name}: {}", reply.text());
    result(&reply)
}

/// As the agent `token` is: open a session, propose a strategy, backtest
/// it and ask to promote it (which waits for a person); the approval id.
async fn request_promotion(up: &common::Up, token: &str, name: &str) -> String {
    let opened = tool(up, token, "session_context", json!({"prompt": name})).await;
    assert_eq!(opened["isError"], false, "{opened}");
    let strategy = tool(
        up,
        token,
        "propose_strategy",
        json!({"name": name, "universe": ["AAPL", "MSFT"], "lookback": 60, "rebalance": 20}),
    )
    .await;
    let strategy_id = strategy["structuredContent"]["strategy_id"]
        .as_str()
        .unwrap_or_else(|| panic!("strategy: {strategy}"))
        .to_owned();
    let backtest = tool(
        up,
        token,
        "run_skill",
        json!({"skill_id": "backtest.momentum", "inputs": {"strategy_id": strategy_id}}),
    )
    .await;
    assert_eq!(
        backtest["structuredContent"]["status"], "succeeded",
        "{backtest}"
    );
    let promoted = tool(
        up,
        token,
        "promote_strategy",
        json!({"strategy_id": strategy_id, "mode": "paper"}),
    )
    .await;
    promoted["structuredContent"]["approval_id"]
        .as_str()
        .unwrap_or_else(|| panic!("promotion: {promoted}"))
        .to_owned()
}

/// The person approves `approval_id`; its status afterwards, as the person
/// reads it.
async fn approve(up: &common::Up, approval_id: &str) -> (Value, String) {
    let decided = tool(
        up,
        &up.human,
        "decide_approval",
        json!({"approval_id": approval_id, "decision": "approve"}),
    )
    .await;
    let read = tool(
        up,
        &up.human,
        "get_approval",
        json!({"approval_id": approval_id}),
    )
    .await;
    let status = read["structuredContent"]["status"]
        .as_str()
        .unwrap_or_else(|| panic!("approval: {read}"))
        .to_owned();
    (decided, status)
}

/// An approval asked for by an external provider's token runs once a
/// person approves (auth answers for the agent the edge recorded); not
/// once the agent's newest token has expired, nor after the agent was
/// revoked in this deployment (whose edge then refuses its tokens too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_a_token_asked_for_runs_while_its_agent_is_live() {
    let idp = Idp::start().await;
    let up = common::up(&[("ITHACA_OAUTH_ISSUERS", idp.url.as_str())]);
    let resource = format!("{}/mcp", up.url);
    let scope = "data:read strategy:author runs:write approvals:read";
    let mut policy = common::ithaca();
    policy
        .args(["policy", "set", "--trading", "on", "--data-dir"])
        .arg(&up.data_dir);
    assert!(policy.status().expect("ithaca policy set").success());
    let person = tool(
        &up,
        &up.human,
        "session_context",
        json!({"prompt": "decide"}),
    )
    .await;
    assert_eq!(person["isError"], false, "{person}");

    // Live: the approved call runs as the agent.
    let live = idp.sign("k1", &idp.claims(&resource, &up.tenant, "erin", scope));
    let approval = request_promotion(&up, &live, "erin's momentum").await;
    let (decided, status) = approve(&up, &approval).await;
    assert_eq!(status, "executed", "{decided}");

    // Expired: the agent's only token lapsed before the person decided
    // (the edge still accepted it within its clock-skew leeway, so the
    // request was filed; its expiry is what auth recorded).
    let mut claims = idp.claims(&resource, &up.tenant, "frank", scope);
    let exp = now() + 2;
    claims["exp"] = json!(exp);
    let short = idp.sign("k1", &claims);
    let approval = request_promotion(&up, &short, "frank's momentum").await;
    while now() <= exp {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (decided, status) = approve(&up, &approval).await;
    assert_eq!(status, "failed", "{decided}");
    assert!(
        decided.to_string().contains("REQUESTER_REVOKED"),
        "{decided}"
    );

    // Revoked here: RevokeKey names the agent id; its tokens stop working
    // (within the edge's bound) and its approval never runs.
    let revoked = idp.sign("k1", &idp.claims(&resource, &up.tenant, "gina", scope));
    let approval = request_promotion(&up, &revoked, "gina's momentum").await;
    let agent = ithaca_edge::oauth::agent_id(&idp.url, "gina", "test-client");
    let mut auth = common::auth_client(&up.auth_url, Principal::system(""));
    let key = auth
        .revoke_key(pb::RevokeKeyRequest {
            tenant_id: up.tenant.clone(),
            key_id: agent,
        })
        .await
        .expect("revoke the external agent")
        .into_inner();
    assert!(!key.revoked_at.is_empty(), "{key:?}");
    let start = std::time::Instant::now();
    loop {
        let r = http::modern(&up.url, &revoked, "tools/list", json!({})).await;
        if r.status == 401 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(7),
            "a revoked agent's token still answers {}",
            r.status
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let (decided, status) = approve(&up, &approval).await;
    assert_eq!(status, "failed", "{decided}");
    assert!(
        decided.to_string().contains("REQUESTER_REVOKED"),
        "{decided}"
    );
}
