//! The built-in OAuth 2.1 authorization server against `ithaca up`, driven
//! over HTTP as a hosted agent platform and a person's browser would:
//! registration, sign-in with a human key, consent with the CSRF token, the
//! code, the token, MCP calls as an agent, and the attacks of issue 22.

use crate::common;

use common::Up;
use common::http::{self, Reply};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const VERIFIER: &str = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk";
const CHALLENGE: &str = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM";
const REDIRECT: &str = "http://127.0.0.1:4711/callback";

/// `application/x-www-form-urlencoded` of `pairs`.
fn form(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// The decoded value of `name` in the query of `url`.
fn param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        (k == name).then(|| decode(v))
    })
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or("00");
                out.push(u8::from_str_radix(hex, 16).unwrap_or(b'?'));
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn post_form(up: &Up, path: &str, cookie: Option<&str>, body: &str) -> Reply {
    let mut headers = vec![("Content-Type", "application/x-www-form-urlencoded")];
    if let Some(c) = cookie {
        headers.push(("Cookie", c));
    }
    http::request(&up.url, "POST", path, &headers, body.as_bytes()).await
}

async fn get(up: &Up, path: &str, cookie: Option<&str>) -> Reply {
    let headers: Vec<(&str, &str)> = cookie.map(|c| vec![("Cookie", c)]).unwrap_or_default();
    http::request(&up.url, "GET", path, &headers, b"").await
}

async fn register(up: &Up, metadata: Value) -> Reply {
    http::request(
        &up.url,
        "POST",
        "/register",
        &[("Content-Type", "application/json")],
        metadata.to_string().as_bytes(),
    )
    .await
}

async fn register_client(up: &Up, name: &str) -> String {
    let r = register(
        up,
        json!({"client_name": name, "redirect_uris": [REDIRECT]}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    r.json()["client_id"]
        .as_str()
        .expect("client_id")
        .to_owned()
}

/// Sign in with the human key (coming back to `next`); the cookie.
async fn sign_in(up: &Up, next: &str) -> (String, Reply) {
    let r = post_form(
        up,
        "/console/sign-in",
        None,
        &form(&[("key", &up.human), ("next", next)]),
    )
    .await;
    assert!(
        r.status == 303 || r.status == 302,
        "{} {}",
        r.status,
        r.text()
    );
    let cookie = r
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .expect("a sign-in cookie")
        .to_owned();
    (cookie, r)
}

fn authorize_path(client_id: &str, extra: &[(&str, &str)], resource: &str) -> String {
    let mut pairs = vec![
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", REDIRECT),
        ("state", "st-42"),
        ("scope", "data:read runs:write"),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
        ("resource", resource),
    ];
    for (k, v) in extra {
        pairs.retain(|(key, _)| key != k);
        if !v.is_empty() {
            pairs.push((k, v));
        }
    }
    format!("/authorize?{}", form(&pairs))
}

fn csrf_of(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a csrf field") + 19;
    page[at..].split('"').next().expect("value").to_owned()
}

/// The consent form's fields for `client_id`, as the page would post them.
fn consent_form(client_id: &str, csrf: &str, tenant: &str, resource: &str) -> String {
    form(&[
        ("csrf", csrf),
        ("tenant", tenant),
        ("response_type", "code"),
        ("client_id", client_id),
        ("redirect_uri", REDIRECT),
        ("state", "st-42"),
        ("code_challenge", CHALLENGE),
        ("code_challenge_method", "S256"),
        ("resource", resource),
        ("scope", "data:read runs:write"),
        ("allow", "data:read"),
        ("allow", "runs:write"),
        ("decision", "allow"),
    ])
}

/// Consent for `client_id` as the signed-in person; the code.
async fn consent(up: &Up, cookie: &str, client_id: &str) -> String {
    let resource = format!("{}/mcp", up.url);
    let page = get(up, &authorize_path(client_id, &[], &resource), Some(cookie)).await;
    assert_eq!(page.status, 200, "{}", page.text());
    let csrf = csrf_of(&page.text());
    let r = post_form(
        up,
        "/authorize",
        Some(cookie),
        &consent_form(client_id, &csrf, &up.tenant, &resource),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.text());
    let location = r.header("location").expect("a redirect").to_owned();
    assert!(location.starts_with(REDIRECT), "{location}");
    assert_eq!(param(&location, "state").as_deref(), Some("st-42"));
    assert_eq!(param(&location, "iss").as_deref(), Some(up.url.as_str()));
    param(&location, "code").expect("a code")
}

async fn exchange(up: &Up, client_id: &str, code: &str, verifier: &str, redirect: &str) -> Reply {
    let resource = format!("{}/mcp", up.url);
    post_form(
        up,
        "/token",
        None,
        &form(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("client_id", client_id),
            ("redirect_uri", redirect),
            ("code_verifier", verifier),
            ("resource", &resource),
        ]),
    )
    .await
}

async fn tokens(up: &Up, client_id: &str, code: &str) -> Value {
    let r = exchange(up, client_id, code, VERIFIER, REDIRECT).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("cache-control"), Some("no-store"));
    r.json()
}

fn refused_grant(r: &Reply, why: &str) {
    assert_eq!(r.status, 400, "{why}: {}", r.text());
    assert_eq!(r.json()["error"], "invalid_grant", "{why}: {}", r.text());
}

/// `tools/list` with `token`: its HTTP status.
async fn list_status(up: &Up, token: &str) -> u16 {
    http::modern(&up.url, token, "tools/list", json!({}))
        .await
        .status
}

/// Wait (up to the edge's 5 s cache bound and a margin) until `token` is
/// refused with 401.
async fn refused_within_cache_bound(up: &Up, token: &str) {
    let start = Instant::now();
    loop {
        let status = list_status(up, token).await;
        if status == 401 {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(7),
            "still {status} after the cache bound"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn refresh(up: &Up, client: &str, token: &str) -> Reply {
    post_form(
        up,
        "/token",
        None,
        &form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", token),
            ("client_id", client),
        ]),
    )
    .await
}

#[tokio::test]
async fn a_hosted_agent_connects_through_consent_and_every_attack_is_refused() {
    let up = common::up(&[]);
    let resource = format!("{}/mcp", up.url);

    // Discovery: resource metadata names this origin; its metadata answers
    // at both paths.
    let prm = get(&up, "/.well-known/oauth-protected-resource/mcp", None)
        .await
        .json();
    assert_eq!(prm["authorization_servers"], json!([up.url.clone()]));
    // A URL, as RFC 9728 has it (prose made the Python SDK discard the
    // whole document).
    assert_eq!(
        prm["resource_documentation"],
        json!(format!("{}/console", up.url))
    );
    for path in [
        "/.well-known/oauth-authorization-server",
        "/.well-known/openid-configuration",
    ] {
        let m = get(&up, path, None).await.json();
        assert_eq!(m["issuer"], json!(up.url.clone()), "{path}");
        assert_eq!(m["code_challenge_methods_supported"], json!(["S256"]));
        assert_eq!(m["client_id_metadata_document_supported"], json!(true));
        assert_eq!(m["token_endpoint"], json!(format!("{}/token", up.url)));
        assert!(
            m["token_endpoint_auth_methods_supported"]
                .as_array()
                .expect("methods")
                .contains(&json!("none"))
        );
        assert!(
            !m["scopes_supported"]
                .as_array()
                .expect("scopes")
                .contains(&json!("approvals:decide"))
        );
    }
    let unauth = http::modern(&up.url, "", "tools/list", json!({})).await;
    assert_eq!(unauth.status, 401);
    assert!(
        unauth.text().contains("authorization server"),
        "{}",
        unauth.text()
    );

    // Registration: open redirects and script URIs are refused.
    for bad in [
        "http://evil.example/cb",
        "javascript:alert(1)",
        "https://a.example/cb#x",
    ] {
        let r = register(&up, json!({"redirect_uris": [bad]})).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
        assert_eq!(r.json()["error"], "invalid_redirect_uri", "{bad}");
    }
    let client = register_client(&up, "Agent <script>alert(1)</script>").await;
    let other = register_client(&up, "another app").await;

    // Not signed in: sent to the console's sign-in, and back.
    let path = authorize_path(&client, &[], &resource);
    let r = get(&up, &path, None).await;
    assert!(r.status == 303 || r.status == 302, "{}", r.text());
    let to = r.header("location").expect("location").to_owned();
    assert!(to.starts_with("/console/sign-in?next="), "{to}");
    let next = param(&to, "next").expect("next");
    assert_eq!(next, path);
    let (cookie, r) = sign_in(&up, &next).await;
    assert_eq!(r.header("location"), Some(path.as_str()));

    // The consent page: the client's name as text, not framable.
    let page = get(&up, &path, Some(&cookie)).await;
    assert_eq!(page.status, 200, "{}", page.text());
    assert_eq!(page.header("x-frame-options"), Some("DENY"));
    assert!(
        page.header("content-security-policy")
            .is_some_and(|c| c.contains("frame-ancestors 'none'"))
    );
    let text = page.text();
    assert!(!text.contains("<script>alert(1)"), "the name is escaped");
    assert!(text.contains("127.0.0.1"), "the redirect host is named");
    assert!(text.contains(&up.tenant), "the tenant is named");
    let csrf = csrf_of(&text);

    // Consent without the CSRF token, or for another tenant, is refused.
    let r = post_form(
        &up,
        "/authorize",
        Some(&cookie),
        &consent_form(&client, "", &up.tenant, &resource),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text());
    let other_tenant = uuid::Uuid::new_v4().to_string();
    let r = post_form(
        &up,
        "/authorize",
        Some(&cookie),
        &consent_form(&client, &csrf, &other_tenant, &resource),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text());

    // PKCE missing or plain, and a wrong resource, go back as errors.
    for (extra, error) in [
        (vec![("code_challenge", "")], "invalid_request"),
        (vec![("code_challenge_method", "plain")], "invalid_request"),
        (
            vec![("response_type", "token")],
            "unsupported_response_type",
        ),
    ] {
        let r = get(
            &up,
            &authorize_path(&client, &extra, &resource),
            Some(&cookie),
        )
        .await;
        let location = r.header("location").unwrap_or_default().to_owned();
        assert_eq!(
            param(&location, "error").as_deref(),
            Some(error),
            "{extra:?}: {location}"
        );
        assert_eq!(param(&location, "state").as_deref(), Some("st-42"));
    }
    let r = get(
        &up,
        &authorize_path(&client, &[], "https://elsewhere.example/mcp"),
        Some(&cookie),
    )
    .await;
    let location = r.header("location").unwrap_or_default().to_owned();
    assert_eq!(
        param(&location, "error").as_deref(),
        Some("invalid_target"),
        "{location}"
    );
    // A redirect URI the client did not register is a page, never a redirect.
    let r = get(
        &up,
        &authorize_path(
            &client,
            &[("redirect_uri", "https://evil.example/cb")],
            &resource,
        ),
        Some(&cookie),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.header("location").is_none());
    // A metadata document on a private address is never fetched.
    let r = get(
        &up,
        &authorize_path("https://127.0.0.1:9/client.json", &[], &resource),
        Some(&cookie),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("private"), "{}", r.text());

    // The code: bound to its client, redirect URI and verifier.
    let code = consent(&up, &cookie, &client).await;
    refused_grant(
        &exchange(&up, &other, &code, VERIFIER, REDIRECT).await,
        "another client",
    );
    refused_grant(
        &exchange(
            &up,
            &client,
            &code,
            VERIFIER,
            "http://127.0.0.1:4712/callback",
        )
        .await,
        "redirect mismatch",
    );
    refused_grant(
        &exchange(&up, &client, &code, "", REDIRECT).await,
        "no verifier",
    );
    let wrong = "x".repeat(43);
    refused_grant(
        &exchange(&up, &client, &code, &wrong, REDIRECT).await,
        "wrong verifier",
    );
    let t = tokens(&up, &client, &code).await;
    let access = t["access_token"].as_str().expect("access token").to_owned();
    assert_eq!(t["token_type"], "Bearer");
    assert_eq!(t["scope"], "data:read runs:write");

    // As an agent: tools listed, a tool called; a person's action refused.
    let listed = http::modern(&up.url, &access, "tools/list", json!({})).await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert!(listed.text().contains("session_context"));
    let opened = http::modern(
        &up.url,
        &access,
        "tools/call",
        json!({"name": "session_context", "arguments": {"prompt": "connected through oauth"}}),
    )
    .await;
    assert_eq!(opened.status, 200, "{}", opened.text());
    let result = &opened.json()["result"];
    assert_ne!(result["isError"], json!(true), "{result}");
    assert!(
        result["structuredContent"]["session_id"].is_string(),
        "{result}"
    );
    let decided = http::modern(
        &up.url,
        &access,
        "tools/call",
        json!({"name": "decide_approval", "arguments": {"approval_id": "0190a0a0-0000-7000-8000-000000000000", "decision": "approve"}}),
    )
    .await;
    // Refused at the door (the scope is never an app's) or by the service.
    let refused = decided.status == 403
        || decided.json().get("error").is_some()
        || decided.json()["result"]["isError"] == json!(true);
    assert!(
        refused,
        "decide_approval must be refused to a token: {}",
        decided.text()
    );

    // A token of this tenant never reads another tenant's session.
    let foreign_session = session_of_another_tenant(&up).await;
    let joined = http::modern(
        &up.url,
        &access,
        "tools/call",
        json!({"name": "session_context", "arguments": {"session_id": foreign_session, "prompt": "peek"}}),
    )
    .await;
    let body = joined.json();
    let refused = body.get("error").is_some() || body["result"]["isError"] == json!(true);
    assert!(
        refused,
        "another tenant's session must stay out of reach: {body}"
    );
    assert!(!joined.text().contains("tenant b's secret plan"), "{body}");

    // Code reuse: refused, and the grant's tokens revoked.
    refused_grant(
        &exchange(&up, &client, &code, VERIFIER, REDIRECT).await,
        "reuse",
    );
    refused_within_cache_bound(&up, &access).await;

    // Refresh rotates; a replayed refresh token revokes the grant.
    let code = consent(&up, &cookie, &client).await;
    let first = tokens(&up, &client, &code).await;
    let rt = first["refresh_token"].as_str().expect("rt").to_owned();
    let r = refresh(&up, &client, &rt).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let second = r.json();
    let access = second["access_token"].as_str().expect("at").to_owned();
    assert_eq!(list_status(&up, &access).await, 200);
    let r = refresh(&up, &client, &rt).await;
    refused_grant(&r, "refresh replay");
    refused_within_cache_bound(&up, &access).await;

    // Connected apps: listed, and revoking stops the token.
    let code = consent(&up, &cookie, &client).await;
    let t = tokens(&up, &client, &code).await;
    let access = t["access_token"].as_str().expect("at").to_owned();
    assert_eq!(list_status(&up, &access).await, 200);
    let apps = get(&up, "/console/apps", Some(&cookie)).await;
    assert_eq!(apps.status, 200, "{}", apps.text());
    let text = apps.text();
    assert!(!text.contains("<script>alert(1)"));
    assert!(!text.contains(&access), "no token on a page");
    let at = text.find("data-grant=\"").expect("a grant row") + 12;
    // The newest grant is listed first.
    let grant = text[at..].split('"').next().expect("grant id").to_owned();
    let csrf = csrf_of(&text);
    let r = post_form(
        &up,
        &format!("/console/apps/{grant}/revoke"),
        Some(&cookie),
        &form(&[("csrf", "")]),
    )
    .await;
    assert_eq!(r.status, 403, "revoking needs the CSRF token");
    let r = post_form(
        &up,
        &format!("/console/apps/{grant}/revoke"),
        Some(&cookie),
        &form(&[("csrf", &csrf)]),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.text());
    refused_within_cache_bound(&up, &access).await;

    // RFC 7009 revocation of a refresh token ends its grant.
    let code = consent(&up, &cookie, &client).await;
    let t = tokens(&up, &client, &code).await;
    let r = post_form(
        &up,
        "/revoke",
        None,
        &form(&[
            ("token", t["refresh_token"].as_str().expect("rt")),
            ("client_id", &client),
        ]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    refused_within_cache_bound(&up, t["access_token"].as_str().expect("at")).await;
}

/// Serve `body` once per connection on loopback, as a client metadata
/// document host would; the base URL.
async fn serve_document(body: impl Fn(&str) -> String + Send + Sync + 'static) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let base2 = base.clone();
    let body = std::sync::Arc::new(body);
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let body = body.clone();
            let base = base2.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let text = body(&format!("{base}{path}"));
                let reply = format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
                    text.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    base
}

#[tokio::test]
async fn metadata_document_clients_connect_and_tokens_expire() {
    let up = common::up(&[
        ("ITHACA_OAUTH_ALLOW_PRIVATE_METADATA", "1"),
        ("ITHACA_OAUTH_ACCESS_TTL_SECS", "2"),
    ]);
    let resource = format!("{}/mcp", up.url);
    let host = serve_document(|url| {
        if url.ends_with("/big.json") {
            return format!(
                r#"{{"client_id":"{url}","redirect_uris":["{REDIRECT}"],"client_name":"{}"}}"#,
                "x".repeat(6000)
            );
        }
        json!({"client_id": url, "client_name": "Document App", "redirect_uris": [REDIRECT]})
            .to_string()
    })
    .await;
    let (cookie, _) = sign_in(&up, "").await;

    // An oversized document is refused.
    let big = format!("{host}/big.json");
    let r = get(&up, &authorize_path(&big, &[], &resource), Some(&cookie)).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("larger than"), "{}", r.text());

    // A good one names the client, and its flow ends in a token.
    let client = format!("{host}/client.json");
    let page = get(&up, &authorize_path(&client, &[], &resource), Some(&cookie)).await;
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(page.text().contains("Document App"));
    let code = consent(&up, &cookie, &client).await;
    let t = tokens(&up, &client, &code).await;
    assert_eq!(t["expires_in"], json!(2));
    let access = t["access_token"].as_str().expect("at").to_owned();
    assert_eq!(list_status(&up, &access).await, 200);

    // The access token expires (2 s here); past its life and the edge's
    // cache bound it is refused.
    tokio::time::sleep(Duration::from_millis(2100)).await;
    refused_within_cache_bound(&up, &access).await;

    // A token issued for another resource is refused by this edge. Only a
    // consent at another deployment's edge names another resource, so the
    // test plays that edge: it asks the auth service for the code itself.
    let other = register_client(&up, "elsewhere").await;
    let code = code_for_another_resource(&up, &other).await;
    let r = post_form(
        &up,
        "/token",
        None,
        &form(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("client_id", &other),
            ("redirect_uri", REDIRECT),
            ("code_verifier", VERIFIER),
        ]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let foreign = r.json()["access_token"].as_str().expect("at").to_owned();
    let r = http::modern(&up.url, &foreign, "tools/list", json!({})).await;
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.json()["error"], "invalid_token");
}

/// A session opened by an agent of a second tenant; its id.
async fn session_of_another_tenant(up: &Up) -> String {
    use ithaca_kit::principal::Principal;
    use ithaca_proto::auth::v1 as pb;
    let mut auth = common::auth_client(&up.auth_url, Principal::system(""));
    let tenant = auth
        .create_tenant(pb::CreateTenantRequest {
            name: "tenant b".to_owned(),
        })
        .await
        .expect("tenant b")
        .into_inner();
    let key = auth
        .create_key(pb::CreateKeyRequest {
            tenant_id: tenant.tenant_id,
            scopes: vec!["data:read".to_owned()],
            actor: pb::Actor::Agent as i32,
            label: "b".to_owned(),
            env: String::new(),
        })
        .await
        .expect("tenant b's key")
        .into_inner()
        .token;
    let r = http::modern(
        &up.url,
        &key,
        "tools/call",
        json!({"name": "session_context", "arguments": {"prompt": "tenant b's secret plan"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["result"]["structuredContent"]["session_id"]
        .as_str()
        .expect("a session id")
        .to_owned()
}

/// A code for `https://elsewhere.example/mcp`, issued over gRPC with the
/// stack's internal key for its human key.
async fn code_for_another_resource(up: &Up, client_id: &str) -> String {
    use ithaca_kit::client::Outbound;
    use ithaca_kit::principal::{InternalKey, Principal, VerifiedKey};
    use ithaca_proto::auth::v1 as pb;
    use ithaca_proto::auth::v1::o_auth_service_client::OAuthServiceClient;
    let key: InternalKey = common::key();
    let key_id = up.human.split('_').nth(2).expect("key id").to_owned();
    let person = Principal::verified(VerifiedKey {
        tenant_id: up.tenant.clone(),
        key_id,
        scopes: vec!["data:read".to_owned()],
        human: true,
    });
    let channel = ithaca_kit::client::channel(&up.auth_url).expect("channel");
    let mut client = OAuthServiceClient::with_interceptor(channel, Outbound::new(key, person));
    client
        .issue_code(pb::IssueCodeRequest {
            client_id: client_id.to_owned(),
            redirect_uri: REDIRECT.to_owned(),
            code_challenge: CHALLENGE.to_owned(),
            resource: "https://elsewhere.example/mcp".to_owned(),
            scopes: vec!["data:read".to_owned()],
        })
        .await
        .expect("issue a code")
        .into_inner()
        .code
}

/// `refresh_token` grant with a `scope` parameter (RFC 6749 section 6).
async fn refresh_scoped(up: &Up, client: &str, token: &str, scope: &str) -> Reply {
    post_form(
        up,
        "/token",
        None,
        &form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", token),
            ("client_id", client),
            ("scope", scope),
        ]),
    )
    .await
}

/// `session_context` (which needs `data:read`) with `token`: its status.
async fn open_status(up: &Up, token: &str) -> u16 {
    http::modern(
        &up.url,
        token,
        "tools/call",
        json!({"name": "session_context", "arguments": {"prompt": "scoped"}}),
    )
    .await
    .status
}

#[tokio::test]
async fn a_refresh_may_narrow_the_scope_and_never_widen_it() {
    let up = common::up(&[]);
    let client = register_client(&up, "narrowing app").await;
    let (cookie, _) = sign_in(&up, "").await;
    let code = consent(&up, &cookie, &client).await;
    let t = tokens(&up, &client, &code).await;
    assert_eq!(t["scope"], "data:read runs:write");
    let full = t["access_token"].as_str().expect("at").to_owned();
    assert_eq!(open_status(&up, &full).await, 200);

    // A wider scope than the grant's is refused, and changes nothing: the
    // refresh token still works afterwards.
    let rt = t["refresh_token"].as_str().expect("rt").to_owned();
    for wider in ["data:read runs:write keys:admin", "approvals:decide"] {
        let r = refresh_scoped(&up, &client, &rt, wider).await;
        assert_eq!(r.status, 400, "{wider}: {}", r.text());
        assert_eq!(r.json()["error"], "invalid_scope", "{wider}: {}", r.text());
    }

    // A subset: the access token carries just that scope.
    let r = refresh_scoped(&up, &client, &rt, "runs:write").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let narrow = r.json();
    assert_eq!(narrow["scope"], "runs:write");
    let narrow_at = narrow["access_token"].as_str().expect("at").to_owned();
    let r = http::modern(
        &up.url,
        &narrow_at,
        "tools/call",
        json!({"name": "session_context", "arguments": {"prompt": "scoped"}}),
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert!(
        r.header("www-authenticate")
            .is_some_and(|c| c.contains("insufficient_scope") && c.contains("data:read")),
        "{:?}",
        r.header("www-authenticate")
    );

    // The new refresh token keeps the grant's whole scope (RFC 6749
    // section 6): refreshing it without `scope` gives it all back.
    let rt = narrow["refresh_token"].as_str().expect("rt").to_owned();
    let r = refresh(&up, &client, &rt).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let again = r.json();
    assert_eq!(again["scope"], "data:read runs:write");
    let again_at = again["access_token"].as_str().expect("at").to_owned();
    assert_eq!(open_status(&up, &again_at).await, 200);
}

/// A self-signed certificate for `127.0.0.1` and its PKCS#8 key, made here:
/// a P-256 key from ring, and the few DER fields of an X.509 v3
/// certificate written out (no certificate generator is in the tree).
fn loopback_certificate() -> (Vec<u8>, Vec<u8>) {
    use ring::rand::SystemRandom;
    use ring::signature::{ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, KeyPair};
    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let n = content.len();
        if n < 0x80 {
            out.push(n as u8);
        } else if n < 0x100 {
            out.extend([0x81, n as u8]);
        } else {
            out.extend([0x82, (n >> 8) as u8, n as u8]);
        }
        out.extend_from_slice(content);
        out
    }
    let seq = |parts: &[Vec<u8>]| tlv(0x30, &parts.concat());
    let oid = |bytes: &[u8]| tlv(0x06, bytes);
    const EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
    const PRIME256V1: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
    const ECDSA_SHA256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02];
    const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
    const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
    const EXT_KEY_USAGE: &[u8] = &[0x55, 0x1d, 0x25];
    const SERVER_AUTH: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];

    let rng = SystemRandom::new();
    let pkcs8 =
        EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).expect("a P-256 key");
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
        .expect("the key reads back");
    let mut point = vec![0u8];
    point.extend_from_slice(pair.public_key().as_ref());
    let algorithm = seq(&[oid(ECDSA_SHA256)]);
    let name = seq(&[tlv(
        0x31,
        &seq(&[oid(COMMON_NAME), tlv(0x0c, b"ithaca test document host")]),
    )]);
    let spki = seq(&[
        seq(&[oid(EC_PUBLIC_KEY), oid(PRIME256V1)]),
        tlv(0x03, &point),
    ]);
    let mut serial = uuid::Uuid::new_v4().as_bytes().to_vec();
    serial[0] &= 0x7f;
    let extensions = tlv(
        0xa3,
        &seq(&[
            seq(&[
                oid(SUBJECT_ALT_NAME),
                tlv(0x04, &seq(&[tlv(0x87, &[127, 0, 0, 1])])),
            ]),
            seq(&[oid(EXT_KEY_USAGE), tlv(0x04, &seq(&[oid(SERVER_AUTH)]))]),
        ]),
    );
    let tbs = seq(&[
        tlv(0xa0, &tlv(0x02, &[2])),
        tlv(0x02, &serial),
        algorithm.clone(),
        name.clone(),
        seq(&[tlv(0x17, b"200101000000Z"), tlv(0x17, b"491231235959Z")]),
        name,
        spki,
        extensions,
    ]);
    let signature = pair.sign(&rng, &tbs).expect("signed");
    let mut bits = vec![0u8];
    bits.extend_from_slice(signature.as_ref());
    let cert = seq(&[tbs, algorithm, tlv(0x03, &bits)]);
    (cert, pkcs8.as_ref().to_vec())
}

/// Serve `body` over https on loopback with `cert` (TLS 1.3 or 1.2, one
/// request per connection, closed with close_notify); the base URL.
async fn serve_document_tls(
    cert: &[u8],
    key: &[u8],
    body: impl Fn(&str) -> String + Send + Sync + 'static,
) -> String {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(
        vec![CertificateDer::from(cert.to_vec())],
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.to_vec())),
    )
    .expect("the test certificate is usable");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("https://{}", listener.local_addr().expect("addr"));
    let base2 = base.clone();
    let body = std::sync::Arc::new(body);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, body, base) = (acceptor.clone(), body.clone(), base2.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(stream).await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let n = tls.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let text = body(&format!("{base}{path}"));
                let reply = format!(
                    "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
                    text.len()
                );
                let _ = tls.write_all(reply.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    base
}

#[tokio::test]
async fn metadata_documents_are_fetched_over_https_and_never_from_private_addresses() {
    let (cert, key) = loopback_certificate();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = dir.path().join("document-host.der");
    std::fs::write(&ca, &cert).expect("write the certificate");
    let ca = ca.to_str().expect("utf-8 path").to_owned();
    let document = |url: &str| {
        json!({"client_id": url, "client_name": "Document App over TLS", "redirect_uris": [REDIRECT]})
            .to_string()
    };
    let host = serve_document_tls(&cert, &key, document).await;
    let client = format!("{host}/client.json");

    // A test stack (loopback allowed, the test's certificate trusted): the
    // document is read over TLS and its flow ends in a working token.
    let up = common::up(&[
        ("ITHACA_OAUTH_ALLOW_PRIVATE_METADATA", "1"),
        ("ITHACA_OAUTH_METADATA_TEST_CA", &ca),
    ]);
    let resource = format!("{}/mcp", up.url);
    let (cookie, _) = sign_in(&up, "").await;
    let page = get(&up, &authorize_path(&client, &[], &resource), Some(&cookie)).await;
    assert_eq!(page.status, 200, "{}", page.text());
    assert!(
        page.text().contains("Document App over TLS"),
        "{}",
        page.text()
    );
    let code = consent(&up, &cookie, &client).await;
    let t = tokens(&up, &client, &code).await;
    let access = t["access_token"].as_str().expect("at").to_owned();
    assert_eq!(open_status(&up, &access).await, 200);

    // A host whose certificate no root vouches for is refused, even here.
    let (other_cert, other_key) = loopback_certificate();
    let untrusted = serve_document_tls(&other_cert, &other_key, document).await;
    let r = get(
        &up,
        &authorize_path(&format!("{untrusted}/client.json"), &[], &resource),
        Some(&cookie),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("tls"), "{}", r.text());
    drop(up);

    // A normal stack, even told of the certificate, never fetches from a
    // loopback address: the same document is refused before any connection.
    let up = common::up(&[("ITHACA_OAUTH_METADATA_TEST_CA", &ca)]);
    let resource = format!("{}/mcp", up.url);
    let (cookie, _) = sign_in(&up, "").await;
    let r = get(&up, &authorize_path(&client, &[], &resource), Some(&cookie)).await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(r.text().contains("private"), "{}", r.text());
}

/// Every secret of the built-in flow, and where it must never be: the
/// stack's log at debug (trace for Ithaca's own crates), the session's
/// trace and the console's pages (Connected apps, sessions, the session),
/// and, stored only as hashes, the stack's databases.
#[tokio::test]
async fn no_secret_reaches_a_log_a_trace_a_page_or_the_database() {
    let logs = tempfile::tempdir().expect("tempdir");
    let log_path = logs.path().join("stack.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let mut up = common::up_logging_to(
        &[(
            "RUST_LOG",
            "debug,ithaca=trace,ithaca_edge=trace,ithaca_console=trace,ithaca_auth=trace,\
             ithaca_kit=trace,ithaca_session=trace,ithaca_approvals=trace",
        )],
        std::process::Stdio::from(log),
    );
    let mut secrets: Vec<(&str, String)> = vec![("PKCE verifier", VERIFIER.to_owned())];

    // Register: a public client gets no secret to leak.
    let r = register(
        &up,
        json!({"client_name": "Leak check", "redirect_uris": [REDIRECT]}),
    )
    .await;
    assert_eq!(r.status, 201, "{}", r.text());
    assert!(r.json().get("client_secret").is_none(), "{}", r.text());
    let client = r.json()["client_id"]
        .as_str()
        .expect("client_id")
        .to_owned();

    // Authorize with consent, exchange, refresh, call, revoke.
    let (cookie, _) = sign_in(&up, "").await;
    secrets.push(("human key", up.human.clone()));
    secrets.push((
        "sign-in cookie",
        cookie.split_once('=').expect("name=value").1.to_owned(),
    ));
    let code = consent(&up, &cookie, &client).await;
    secrets.push(("authorization code", code.clone()));
    let t = tokens(&up, &client, &code).await;
    let first_access = t["access_token"].as_str().expect("at").to_owned();
    let first_refresh = t["refresh_token"].as_str().expect("rt").to_owned();
    assert_eq!(open_status(&up, &first_access).await, 200);
    let r = refresh(&up, &client, &first_refresh).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let access = r.json()["access_token"].as_str().expect("at").to_owned();
    let rotated = r.json()["refresh_token"].as_str().expect("rt").to_owned();
    let opened = http::modern(
        &up.url,
        &access,
        "tools/call",
        json!({"name": "session_context", "arguments": {"prompt": "leak check"}}),
    )
    .await;
    assert_eq!(opened.status, 200, "{}", opened.text());
    let session_id = opened.json()["result"]["structuredContent"]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", opened.text()))
        .to_owned();
    let r = post_form(
        &up,
        "/revoke",
        None,
        &form(&[("token", &rotated), ("client_id", &client)]),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    refused_within_cache_bound(&up, &access).await;
    for (what, value) in [
        ("access token", first_access),
        ("refresh token", first_refresh),
        ("refreshed access token", access),
        ("rotated refresh token", rotated),
    ] {
        secrets.push((what, value));
    }

    // The pages a person reads.
    let mut pages = Vec::new();
    for path in [
        "/console/apps".to_owned(),
        "/console/sessions".to_owned(),
        format!("/console/sessions/{session_id}"),
    ] {
        let page = get(&up, &path, Some(&cookie)).await;
        assert_eq!(page.status, 200, "{path}: {}", page.text());
        pages.push((path, page.text()));
    }
    let session_page = &pages[2].1;
    assert!(
        session_page.contains("leak check"),
        "the session page shows its prompt: {session_page}"
    );

    // The stack stops so every log line is written.
    let _ = up.process.terminate();
    let log = std::fs::read_to_string(&log_path).expect("read the log");
    assert!(
        log.contains("DEBUG") && log.contains("oauth grant created"),
        "the log was captured at debug: {} bytes",
        log.len()
    );
    let mut stored = Vec::new();
    let mut stack = vec![up.data_dir.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read the data directory") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                stored.push((
                    path.display().to_string(),
                    std::fs::read(&path).unwrap_or_default(),
                ));
            }
        }
    }
    assert!(
        stored.iter().any(|(p, _)| p.contains("auth")),
        "the auth database is among {:?}",
        stored.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    let contains =
        |hay: &[u8], needle: &str| hay.windows(needle.len()).any(|w| w == needle.as_bytes());
    // The session's trace is among them (it streams to the page, so it is
    // read where it is kept).
    assert!(
        stored
            .iter()
            .any(|(p, bytes)| p.contains("session") && contains(bytes, "leak check")),
        "the session's trace is among the files scanned"
    );
    for (what, secret) in &secrets {
        assert!(secret.len() >= 16, "{what} is a real secret");
        assert!(!log.contains(secret.as_str()), "the {what} is in the log");
        for (path, text) in &pages {
            assert!(!text.contains(secret.as_str()), "the {what} is on {path}");
        }
        // The human key is stored as a salted hash, codes and tokens as
        // SHA-256: none of them in any file of the stack.
        for (path, bytes) in &stored {
            assert!(!contains(bytes, secret), "the {what} is stored in {path}");
        }
    }
}
