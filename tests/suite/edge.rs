//! The MCP edge over HTTP, black-box: both protocol eras, keys and scopes,
//! the session gate and trace, the SSE trace stream, limits, and the
//! bad-input table of the edge issue. Auth and session run in-process on
//! real gRPC; requests are raw HTTP so every status and header is checked.

use crate::common;

use common::harness::{StackBuilder, TestStack};
use common::http::{self, Reply};
use ithaca::edge::EdgeArgs;
use ithaca::services::Service;
use ithaca_kit::principal::Principal;
use ithaca_proto::auth::v1 as pb;
use serde_json::{Value, json};
use std::time::Duration;

/// A stack of auth and session behind the edge, with two keys of its
/// tenant: an agent with the agent scopes these tests use and a person who
/// may decide approvals.
struct Stack {
    url: String,
    tenant: String,
    agent: String,
    human: String,
    auth_url: String,
    _stack: TestStack,
}

async fn tenant(auth_url: &str, name: &str) -> String {
    common::auth_client(auth_url, Principal::system(""))
        .create_tenant(pb::CreateTenantRequest { name: name.into() })
        .await
        .expect("tenant")
        .into_inner()
        .tenant_id
}

/// The stack with the edge's options changed by `change`, and its session
/// service at `session_url` instead of in this process when given.
async fn stack_with(
    change: impl FnOnce(&mut EdgeArgs) + Send + 'static,
    session_url: Option<String>,
) -> Stack {
    let mut builder = StackBuilder::new()
        .services(&[Service::Auth, Service::Session])
        .edge(|e| {
            e.key_cache_ms = 1000;
            e.backend_timeout_ms = 2000;
        })
        .edge(change);
    if let Some(url) = session_url {
        builder = builder.elsewhere(Service::Session, url);
    }
    let stack = builder.start().await;
    let all = [
        "data:read",
        "strategy:author",
        "runs:write",
        "runs:cancel",
        "approvals:read",
        "artifacts:read",
    ];
    let agent = stack.key(&all, pb::Actor::Agent).await;
    let human = stack
        .key(&["data:read", "approvals:decide"], pb::Actor::Human)
        .await;
    Stack {
        url: stack.url.clone(),
        tenant: stack.tenant.clone(),
        agent,
        human,
        auth_url: stack.url_of(Service::Auth),
        _stack: stack,
    }
}

async fn stack() -> Stack {
    stack_with(|e| e.body_limit = 64 * 1024, None).await
}

fn meta() -> Value {
    http::modern_meta()
}

/// A well-formed 2026-07-28 request with matching headers.
async fn modern(s: &Stack, token: &str, method: &str, params: Value) -> Reply {
    http::modern(&s.url, token, method, params).await
}

async fn raw(s: &Stack, token: Option<&str>, extra: &[(&str, &str)], body: &str) -> Reply {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if let Some(a) = &auth {
        headers.push(("Authorization", a.as_str()));
    }
    headers.extend_from_slice(extra);
    http::request(&s.url, "POST", "/mcp", &headers, body.as_bytes()).await
}

async fn call(s: &Stack, token: &str, tool: &str, args: Value) -> Value {
    let reply = modern(
        s,
        token,
        "tools/call",
        json!({"name": tool, "arguments": args}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn modern_era_discover_list_gate_call_and_trace() {
    let s = stack().await;
    let discover = modern(&s, &s.agent, "server/discover", json!({})).await;
    assert_eq!(discover.status, 200, "{}", discover.text());
    assert!(
        discover.header("mcp-session-id").is_none(),
        "stateless: no session id"
    );
    let d = discover.json()["result"].clone();
    assert_eq!(d["resultType"], "complete");
    assert_eq!(d["supportedVersions"], json!(["2026-07-28"]));
    assert!(d["capabilities"]["tools"].is_object());
    assert_eq!(
        d["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "ithaca"
    );
    let instructions = d["instructions"].as_str().unwrap_or_default();
    // The four things about filters the schemas cannot show (seed 003).
    for rule in [
        "session_context",
        "stream bounds",
        "get_alert_schema",
        "Activation is gated",
        "get_counterpart_search_defaults",
    ] {
        assert!(
            instructions.contains(rule),
            "{rule} missing: {instructions}"
        );
    }
    assert!(d["ttlMs"].as_u64().is_some() && d["cacheScope"] == "public");

    let list = modern(&s, &s.agent, "tools/list", json!({})).await.json()["result"].clone();
    assert_eq!(list["resultType"], "complete");
    assert_eq!(
        list["cacheScope"], "private",
        "the list depends on the caller"
    );
    let tools = list["tools"].as_array().expect("tools");
    let ctx = tools
        .iter()
        .find(|t| t["name"] == "session_context")
        .expect("session_context listed");
    // `prompt` opens a session; a resume may leave it out, so the service,
    // not the schema, asks for it.
    assert_eq!(ctx["inputSchema"]["properties"]["prompt"]["type"], "string");
    assert!(ctx["inputSchema"].get("required").is_none(), "{ctx}");
    assert_eq!(ctx["inputSchema"]["additionalProperties"], false);
    assert!(
        ctx["description"]
            .as_str()
            .is_some_and(|d| d.starts_with("Open a traced research session"))
    );
    assert_eq!(ctx["annotations"]["readOnlyHint"], false);
    assert!(ctx["outputSchema"]["properties"]["trace_stream"].is_object());

    // The gate.
    let early = call(&s, &s.agent, "session_close", json!({})).await["result"].clone();
    assert_eq!(early["isError"], true);
    assert_eq!(common::tool_error(&early)["error"], "no_active_session");
    assert!(
        common::tool_error(&early)["message"]
            .as_str()
            .is_some_and(|m| m.contains("session_context"))
    );

    let opened = call(
        &s,
        &s.agent,
        "session_context",
        json!({"prompt": "Research NVDA\nthen AMD"}),
    )
    .await["result"]
        .clone();
    assert_eq!(opened["isError"], false, "{opened}");
    assert_eq!(opened["resultType"], "complete");
    let sc = &opened["structuredContent"];
    assert_eq!(sc["title"], "Research NVDA");
    assert_eq!(sc["tenant_id"], s.tenant);
    assert_eq!(sc["status"], "open");
    let sid = sc["session_id"].as_str().expect("id").to_owned();
    assert_eq!(
        sc["trace_stream"],
        format!("{}/api/sessions/{sid}/events/stream", s.url)
    );
    assert!(
        opened["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains(&sid))
    );

    // A resource of the session.
    let read = modern(
        &s,
        &s.agent,
        "resources/read",
        json!({"uri": format!("doomberg://sessions/{sid}")}),
    )
    .await;
    let r = read.json()["result"].clone();
    assert_eq!(r["cacheScope"], "private");
    let text = r["contents"][0]["text"].as_str().expect("text");
    assert!(text.contains(&sid));

    let closed = call(&s, &s.agent, "session_close", json!({})).await["result"].clone();
    assert_eq!(closed["structuredContent"]["status"], "closed", "{closed}");

    // The trace, replayed over SSE from the start. The session is closed,
    // so the stream says so and then ends: reading to the end finishes.
    let path = format!("/api/sessions/{sid}/events/stream");
    let auth = format!("Bearer {}", s.human);
    let reply = http::request(&s.url, "GET", &path, &[("Authorization", &auth)], b"").await;
    let text = reply.text();
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    // session_close's own result lands after the session closed (calls in
    // flight may still record how they ended), and the stream lingers for it.
    assert_eq!(
        kinds,
        vec![
            "session_open",
            "reasoning",
            "tool_call",
            "tool_result",
            "tool_call",
            "session_closed",
            "tool_result"
        ],
        "{text}"
    );
    let ids: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .collect();
    assert_eq!(ids, vec!["1", "2", "3", "4", "5", "6", "7"]);
    assert!(
        text.contains("\"closed_by\":\"agent\""),
        "session_closed says who closed it: {text}"
    );

    // Resume after an id.
    let text = http::read_until(
        &s.url,
        &path,
        &[("Authorization", &auth), ("Last-Event-ID", "4")],
        |t| t.contains("id: 7\n"),
    )
    .await;
    let ids: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .collect();
    assert_eq!(ids, vec!["5", "6", "7"]);
    let text = http::read_until(
        &s.url,
        &format!("{path}?after=6"),
        &[("Authorization", &auth)],
        |t| t.contains("id: 7\n"),
    )
    .await;
    assert_eq!(text.lines().filter(|l| l.starts_with("id: ")).count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_era_initialize_then_calls_without_session_ids() {
    let s = stack().await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "legacy", "version": "1"}}});
    let reply = raw(&s, Some(&s.agent), &[], &init.to_string()).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    assert!(reply.header("mcp-session-id").is_none());
    let r = reply.json()["result"].clone();
    assert_eq!(r["protocolVersion"], "2025-06-18");
    assert_eq!(r["serverInfo"]["name"], "ithaca");
    assert!(
        r["instructions"]
            .as_str()
            .is_some_and(|i| i.contains("session_context"))
    );

    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = raw(
        &s,
        Some(&s.agent),
        &[("MCP-Protocol-Version", "2025-06-18")],
        &note.to_string(),
    )
    .await;
    assert_eq!(reply.status, 202);

    for version in ["2025-06-18", "2025-11-25"] {
        let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let reply = raw(
            &s,
            Some(&s.agent),
            &[("MCP-Protocol-Version", version)],
            &list.to_string(),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
        assert!(
            reply.json()["result"]["tools"]
                .as_array()
                .is_some_and(|t| !t.is_empty())
        );
        assert!(reply.header("mcp-session-id").is_none());
    }
    let open = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "session_context", "arguments": {"prompt": "legacy research"}}});
    let reply = raw(
        &s,
        Some(&s.agent),
        &[("MCP-Protocol-Version", "2025-11-25")],
        &open.to_string(),
    )
    .await;
    let r = reply.json()["result"].clone();
    assert_eq!(r["isError"], false, "{r}");
    assert!(
        r.get("resultType").is_none(),
        "legacy results carry no resultType"
    );

    // SSE when the client only takes event streams is refused by neither era:
    // a client listing both gets JSON.
    let reply = raw(
        &s,
        Some(&s.agent),
        &[("Accept", "*/*"), ("MCP-Protocol-Version", "2025-06-18")],
        &json!({"jsonrpc": "2.0", "id": 4, "method": "tools/list"}).to_string(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_are_401_with_a_challenge() {
    let s = stack().await;
    let valid = s.agent.clone();
    let parts: Vec<&str> = valid.splitn(4, '_').collect();
    let other_env = format!("dmbg_prod_{}_{}", parts[2], parts[3]);
    let revoked = common::key_for(&s.auth_url, &s.tenant, &["data:read"], pb::Actor::Agent).await;
    let revoked_id = revoked.split('_').nth(2).expect("id").to_owned();
    common::auth_client(&s.auth_url, Principal::system(""))
        .revoke_key(pb::RevokeKeyRequest {
            tenant_id: s.tenant.clone(),
            key_id: revoked_id,
        })
        .await
        .expect("revoke");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    for (case, token) in [
        ("no key", None),
        ("garbled", Some("dmbg_test_garbage")),
        ("revoked", Some(revoked.as_str())),
        ("other env", Some(other_env.as_str())),
    ] {
        let reply = raw(&s, token, &[], &body).await;
        assert_eq!(reply.status, 401, "{case}: {}", reply.text());
        let challenge = reply.header("www-authenticate").unwrap_or_default();
        assert!(
            challenge.starts_with("Bearer realm=\"doomberg-mcp\""),
            "{case}: {challenge}"
        );
        assert!(challenge.contains(&format!(
            "resource_metadata=\"{}/.well-known/oauth-protected-resource\"",
            s.url
        )));
    }
    // SkyPortal's `token` scheme is accepted too.
    let auth = format!("token {valid}");
    let reply = http::request(
        &s.url,
        "POST",
        "/mcp",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        body.as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());

    let meta = http::request(
        &s.url,
        "GET",
        "/.well-known/oauth-protected-resource",
        &[],
        b"",
    )
    .await;
    assert_eq!(meta.status, 200);
    assert_eq!(meta.json()["resource"], format!("{}/mcp", s.url));
}

/// RFC 9728 §2 makes these members URLs. A client that validates the
/// document (the official Python SDK does) discards all of it when one is
/// prose, and then neither finds the authorization server nor sends the
/// `resource` parameter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_metadata_url_members_are_urls() {
    let s = stack().await;
    for path in [
        "/.well-known/oauth-protected-resource",
        "/.well-known/oauth-protected-resource/mcp",
    ] {
        let meta = http::request(&s.url, "GET", path, &[], b"").await;
        assert_eq!(meta.status, 200, "{path}");
        let meta = meta.json();
        let is_url = |v: &Value| {
            v.as_str().is_some_and(|u| {
                (u.starts_with("https://") || u.starts_with("http://"))
                    && !u.contains(char::is_whitespace)
            })
        };
        for member in [
            "resource",
            "jwks_uri",
            "resource_documentation",
            "resource_policy_uri",
            "resource_tos_uri",
        ] {
            if let Some(v) = meta.get(member) {
                assert!(is_url(v), "{path}: {member} is not a URL: {v}");
            }
        }
        for server in meta["authorization_servers"]
            .as_array()
            .into_iter()
            .flatten()
        {
            assert!(is_url(server), "{path}: authorization server {server}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_keys_stop_working_within_the_cache_bound() {
    let s = stack().await;
    let token = common::key_for(&s.auth_url, &s.tenant, &["data:read"], pb::Actor::Agent).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string();
    let ok = raw(
        &s,
        Some(&token),
        &[("MCP-Protocol-Version", "2025-06-18")],
        &body,
    )
    .await;
    assert_eq!(ok.status, 200);
    let key_id = token.split('_').nth(2).expect("id").to_owned();
    common::auth_client(&s.auth_url, Principal::system(""))
        .revoke_key(pb::RevokeKeyRequest {
            tenant_id: s.tenant.clone(),
            key_id,
        })
        .await
        .expect("revoke");
    // The cache in this stack keeps a key for 1 s; the edge never keeps one
    // longer than 5 s. Poll until refused, for at most 6 s.
    let mut refused = false;
    for _ in 0..60 {
        if raw(
            &s,
            Some(&token),
            &[("MCP-Protocol-Version", "2025-06-18")],
            &body,
        )
        .await
        .status
            == 401
        {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused, "a revoked key must stop working");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scopes_are_decided_from_the_body() {
    let s = stack().await;
    let no_read = common::key_for(&s.auth_url, &s.tenant, &["runs:write"], pb::Actor::Agent).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "session_context", "arguments": {"prompt": "x"}}});
    let reply = raw(
        &s,
        Some(&no_read),
        &[("MCP-Protocol-Version", "2025-06-18")],
        &call.to_string(),
    )
    .await;
    assert_eq!(reply.status, 403);
    assert_eq!(reply.text().trim(), "missing scope: data:read");
    assert!(
        reply
            .header("www-authenticate")
            .is_some_and(|c| c.contains("insufficient_scope"))
    );
    // Listing tools needs no scope, and shows nothing the key cannot call.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let reply = raw(
        &s,
        Some(&no_read),
        &[("MCP-Protocol-Version", "2025-06-18")],
        &list.to_string(),
    )
    .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["result"]["tools"], json!([]));
    // A batch needs the union of its members' scopes.
    let batch = json!([list, call]).to_string();
    let reply = raw(&s, Some(&no_read), &[], &batch).await;
    assert_eq!(reply.status, 403);
    // Without a revision header a request is 2025-03-26, which has batches:
    // each member is answered, in order, in one array.
    let reply = raw(&s, Some(&s.agent), &[], &batch).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let answers = reply.json();
    let answers = answers
        .as_array()
        .expect("a batch is answered with an array");
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0]["id"], 2);
    assert!(
        answers[0]["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );
    assert_eq!(answers[1]["id"], 1);
    // 2025-03-26 has no structured output: the result is the content's text.
    let text = answers[1]["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or("");
    let opened: Value = serde_json::from_str(text).unwrap_or_default();
    assert!(opened["session_id"].is_string(), "{}", answers[1]);
    // A batch member that is a notification gets no answer; a batch of
    // notifications only is accepted with nothing to say.
    let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let reply = raw(
        &s,
        Some(&s.agent),
        &[("MCP-Protocol-Version", "2025-03-26")],
        &json!([note]).to_string(),
    )
    .await;
    assert_eq!(reply.status, 202, "{}", reply.text());
    // A member refused on its own is answered in its slot; the others run.
    let init = json!({"jsonrpc": "2.0", "id": 9, "method": "initialize", "params": {}});
    let unknown = json!({"jsonrpc": "2.0", "id": 10, "method": "no/such/method"});
    let reply = raw(
        &s,
        Some(&s.agent),
        &[],
        &json!([init, list, unknown]).to_string(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let answers = reply.json();
    assert_eq!(answers[0]["id"], 9);
    assert_eq!(answers[0]["error"]["code"], -32600);
    assert_eq!(answers[1]["id"], 2);
    assert_eq!(answers[2]["id"], 10);
    assert!(answers[2]["error"]["code"].is_i64(), "{}", answers[2]);
    // Revisions from 2025-06-18 on have no batches.
    for version in ["2025-06-18", "2025-11-25"] {
        let reply = raw(
            &s,
            Some(&s.agent),
            &[("MCP-Protocol-Version", version)],
            &batch,
        )
        .await;
        assert_eq!(reply.status, 400, "{version}");
        assert_eq!(reply.json()["error"]["code"], -32600);
        assert!(
            reply.text().contains("no JSON-RPC batches"),
            "{}",
            reply.text()
        );
    }
    // An empty batch is an invalid request (JSON-RPC 2.0).
    let reply = raw(&s, Some(&s.agent), &[], "[]").await;
    assert_eq!(reply.status, 400);
    assert_eq!(reply.json()["error"]["code"], -32600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_bad_input_table() {
    let s = stack().await;
    let m = meta();
    let list = |meta: Value| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta}})
            .to_string()
    };
    let modern_headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/list"),
    ];

    // Header/body mismatch.
    let reply = raw(
        &s,
        Some(&s.agent),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
        ],
        &list(m.clone()),
    )
    .await;
    assert_eq!(
        (reply.status, reply.json()["error"]["code"].clone()),
        (400, json!(-32020)),
        "{}",
        reply.text()
    );
    let call_body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"_meta": m, "name": "session_context", "arguments": {"prompt": "x"}}});
    let reply = raw(
        &s,
        Some(&s.agent),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "other"),
        ],
        &call_body.to_string(),
    )
    .await;
    assert_eq!(
        (reply.status, reply.json()["error"]["code"].clone()),
        (400, json!(-32020))
    );
    // The Base64 sentinel is decoded before comparing.
    let reply = raw(
        &s,
        Some(&s.agent),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "=?base64?c2Vzc2lvbl9jb250ZXh0?="),
        ],
        &call_body.to_string(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());

    // Unsupported version.
    let mut old = meta();
    old["io.modelcontextprotocol/protocolVersion"] = json!("1900-01-01");
    let reply = raw(
        &s,
        Some(&s.agent),
        &[
            ("MCP-Protocol-Version", "1900-01-01"),
            ("Mcp-Method", "tools/list"),
        ],
        &list(old),
    )
    .await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    let err = reply.json()["error"].clone();
    assert_eq!(err["code"], -32022);
    assert_eq!(err["data"]["requested"], "1900-01-01");
    // What discover advertises, no more (the legacy profile is reached
    // through `initialize`, not named here).
    assert_eq!(err["data"]["supported"], json!(["2026-07-28"]), "{err}");

    // Missing _meta keys.
    let reply = raw(
        &s,
        Some(&s.agent),
        &modern_headers,
        &list(json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28"})),
    )
    .await;
    assert_eq!(
        (reply.status, reply.json()["error"]["code"].clone()),
        (400, json!(-32602)),
        "{}",
        reply.text()
    );

    // Unknown and removed methods.
    for method in ["foo/bar", "ping"] {
        let body =
            json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {"_meta": meta()}})
                .to_string();
        let reply = raw(
            &s,
            Some(&s.agent),
            &[
                ("MCP-Protocol-Version", "2026-07-28"),
                ("Mcp-Method", method),
            ],
            &body,
        )
        .await;
        assert_eq!(
            (reply.status, reply.json()["error"]["code"].clone()),
            (404, json!(-32601)),
            "{method}"
        );
    }

    // Unknown tool.
    let reply = modern(
        &s,
        &s.agent,
        "tools/call",
        json!({"name": "no_such_tool", "arguments": {}}),
    )
    .await;
    assert_eq!(reply.json()["error"]["code"], -32602, "{}", reply.text());

    // Wrong types, unknown and missing arguments name the field.
    for (args, field) in [
        (json!({"prompt": 42}), "prompt"),
        (json!({"prompt": "x", "colour": "red"}), "colour"),
        (json!({}), "prompt"),
        (json!({"prompt": "x", "title": ["a"]}), "title"),
    ] {
        let r = call(&s, &s.agent, "session_context", args.clone()).await["result"].clone();
        assert_eq!(r["isError"], true, "{args}");
        assert_eq!(common::tool_error(&r)["error"], "INVALID_ARGUMENT");
        assert!(
            common::tool_error(&r)["message"]
                .as_str()
                .is_some_and(|m| m.starts_with(field)),
            "{r}"
        );
    }

    // Invalid JSON, deep nesting, non-objects.
    let reply = raw(&s, Some(&s.agent), &[], "{\"jsonrpc\": \"2.0\", ").await;
    assert_eq!(
        (reply.status, reply.json()["error"]["code"].clone()),
        (400, json!(-32700))
    );
    let deep = format!("{}{}", "[".repeat(5000), "]".repeat(5000));
    let reply = raw(&s, Some(&s.agent), &[], &deep).await;
    assert_eq!(reply.status, 400);
    let reply = raw(&s, Some(&s.agent), &[], "\"just a string\"").await;
    assert_eq!(
        (reply.status, reply.json()["error"]["code"].clone()),
        (400, json!(-32600))
    );

    // Oversized body.
    let big = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/list\",\"pad\":\"{}\"}}",
        "x".repeat(100 * 1024)
    );
    let reply = raw(&s, Some(&s.agent), &[], &big).await;
    assert_eq!(reply.status, 413);

    // GET in 2026-07-28 (which has no GET stream) and DELETE (no session
    // to end). A legacy GET opens the caller's update stream
    // (tests/suite/subscriptions.rs).
    let auth = format!("Bearer {}", s.agent);
    for (method, version) in [("GET", "2026-07-28"), ("DELETE", "2025-11-25")] {
        let reply = http::request(
            &s.url,
            method,
            "/mcp",
            &[
                ("Authorization", &auth),
                ("Accept", "text/event-stream"),
                ("MCP-Protocol-Version", version),
            ],
            b"",
        )
        .await;
        assert_eq!(reply.status, 405, "{method}");
    }

    // A foreign Host or Origin.
    let reply = raw(
        &s,
        Some(&s.agent),
        &[("Host", "evil.example.com")],
        &list(meta()),
    )
    .await;
    assert_eq!(reply.status, 403);
    let reply = raw(
        &s,
        Some(&s.agent),
        &[("Origin", "http://evil.example.com")],
        &list(meta()),
    )
    .await;
    assert_eq!(reply.status, 403);
    let reply = raw(
        &s,
        Some(&s.agent),
        &[
            ("Host", "localhost:9"),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).to_string(),
    )
    .await;
    assert_eq!(reply.status, 200, "loopback names are accepted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_tenants_sessions_are_not_found_and_nothing_leaks() {
    let s = stack().await;
    let opened = call(
        &s,
        &s.agent,
        "session_context",
        json!({"prompt": "secret research"}),
    )
    .await["result"]
        .clone();
    let sid = opened["structuredContent"]["session_id"]
        .as_str()
        .expect("id")
        .to_owned();

    let other_tenant = tenant(&s.auth_url, "two").await;
    let intruder =
        common::key_for(&s.auth_url, &other_tenant, &["data:read"], pb::Actor::Agent).await;
    let r = call(
        &s,
        &intruder,
        "session_context",
        json!({"prompt": "let me in", "session_id": sid}),
    )
    .await["result"]
        .clone();
    assert_eq!(r["isError"], true);
    assert_eq!(common::tool_error(&r)["error"], "NOT_FOUND");
    assert!(!r.to_string().contains("secret research"));

    let read = modern(
        &s,
        &intruder,
        "resources/read",
        json!({"uri": format!("doomberg://sessions/{sid}")}),
    )
    .await;
    assert_eq!(read.json()["error"]["code"], -32602, "{}", read.text());

    let auth = format!("Bearer {intruder}");
    let stream = http::request(
        &s.url,
        "GET",
        &format!("/api/sessions/{sid}/events/stream"),
        &[("Authorization", &auth)],
        b"",
    )
    .await;
    assert_eq!(stream.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_service_is_a_clear_retryable_error() {
    // A session URL nobody listens on.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", l.local_addr().expect("addr"))
    };
    let s = stack_with(|_| {}, Some(dead)).await;
    let started = std::time::Instant::now();
    let r = call(&s, &s.agent, "session_context", json!({"prompt": "x"})).await["result"].clone();
    assert_eq!(r["isError"], true);
    assert_eq!(
        common::tool_error(&r)["error"],
        "SERVICE_UNAVAILABLE",
        "{r}"
    );
    assert_eq!(common::tool_error(&r)["retryable"], true);
    // Never a hang: the answer comes within the backend deadline (2 s in
    // this stack) plus a margin for a loaded machine. A bound, not a
    // benchmark.
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(2) + Duration::from_secs(3),
        "an unreachable service took {took:?} to answer"
    );
    // Discovery and listing still work.
    assert_eq!(
        modern(&s, &s.agent, "tools/list", json!({})).await.status,
        200
    );
    let ready = http::request(&s.url, "GET", "/readyz", &[], b"").await;
    assert_eq!(ready.status, 503, "{}", ready.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_metrics() {
    let s = stack().await;
    assert_eq!(
        http::request(&s.url, "GET", "/healthz", &[], b"")
            .await
            .status,
        200
    );
    assert_eq!(
        http::request(&s.url, "GET", "/readyz", &[], b"")
            .await
            .status,
        200
    );
    modern(&s, &s.agent, "tools/list", json!({})).await;
    let metrics = http::request(&s.url, "GET", "/metrics", &[], b"")
        .await
        .text();
    assert!(
        metrics.contains(
            "mcp_server_operation_duration_seconds_bucket{mcp_method_name=\"tools/list\""
        ),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_spans_continue_the_callers_trace_into_grpc() {
    use opentelemetry::trace::TraceId;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    ithaca_kit::telemetry::install(provider.clone(), ithaca_kit::telemetry::LogFormat::Text)
        .expect("install");

    let s = stack().await;
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent = "00f067aa0ba902b7";
    let mut params = json!({"name": "session_context", "arguments": {"prompt": "traced"}});
    params["_meta"] = meta();
    params["_meta"]["traceparent"] = json!(format!("00-{trace}-{parent}-01"));
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": params});
    let reply = raw(
        &s,
        Some(&s.agent),
        &[
            ("MCP-Protocol-Version", "2026-07-28"),
            ("Mcp-Method", "tools/call"),
            ("Mcp-Name", "session_context"),
        ],
        &body.to_string(),
    )
    .await;
    let result = reply.json()["result"].clone();
    assert_eq!(result["isError"], false, "{result}");
    let sid = result["structuredContent"]["session_id"]
        .as_str()
        .expect("id")
        .to_owned();

    provider.force_flush().expect("flush");
    let spans = exporter.get_finished_spans().expect("spans");
    let trace_id = TraceId::from_hex(trace).expect("hex");
    let mcp = spans
        .iter()
        .find(|s| s.name == "tools/call session_context" && s.span_context.trace_id() == trace_id)
        .unwrap_or_else(|| {
            panic!(
                "an MCP server span in the caller's trace; got {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        });
    assert_eq!(
        mcp.parent_span_id.to_string(),
        parent,
        "the request's _meta.traceparent is the parent"
    );
    let attr = |key: &str| {
        mcp.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(attr("mcp.method.name").as_deref(), Some("tools/call"));
    assert_eq!(attr("gen_ai.tool.name").as_deref(), Some("session_context"));
    assert_eq!(
        attr("gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(attr("mcp.protocol.version").as_deref(), Some("2026-07-28"));
    assert_eq!(attr("jsonrpc.request.id").as_deref(), Some("99"));
    assert!(
        spans.iter().any(
            |s| s.name == "ithaca.session.v1.SessionService/SessionContext"
                && s.span_context.trace_id() == trace_id
        ),
        "the session service continued the same trace"
    );

    // The trace events of that call carry the caller's trace id.
    let auth = format!("Bearer {}", s.agent);
    let text = http::read_until(
        &s.url,
        &format!("/api/sessions/{sid}/events/stream"),
        &[("Authorization", &auth)],
        |t| t.contains("id: 4\n"),
    )
    .await;
    assert!(
        text.contains(&format!("\"trace_id\":\"{trace}\"")),
        "{text}"
    );
}

/// The trace events of one call, read over gRPC from the session service.
async fn session_events(s: &Stack, sid: &str) -> Vec<ithaca_proto::session::v1::TraceEvent> {
    use ithaca_proto::session::v1 as spb;
    let mut reader = common::session_client(
        &s._stack.url_of(Service::Session),
        common::human(&s.tenant, "reader"),
    );
    reader
        .read_events(spb::ReadEventsRequest {
            session_id: sid.to_owned(),
            after_seq: 0,
            limit: Some(100),
        })
        .await
        .expect("read the session's trace")
        .into_inner()
        .events
}

/// Without an exporter the light id layer gives spans their ids: a tool
/// call's `tool_call` and `tool_result` events carry one 32-hex trace id,
/// the one the edge's span had (the result's provenance) and the session
/// service recorded (the event's own `trace_id`); a caller's
/// `_meta.traceparent` or HTTP `traceparent` still names the trace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_exporter_trace_events_carry_one_trace_id() {
    ithaca_kit::telemetry::install_ids(ithaca_kit::telemetry::LogFormat::Text).expect("install");
    assert!(!ithaca_kit::telemetry::exporting());
    let s = stack().await;

    let opened = call(
        &s,
        &s.agent,
        "session_context",
        json!({"prompt": "light ids"}),
    )
    .await;
    let result = opened["result"].clone();
    assert_eq!(result["isError"], false, "{result}");
    let sid = result["structuredContent"]["session_id"]
        .as_str()
        .expect("id")
        .to_owned();
    let events = session_events(&s, &sid).await;
    let of = |kind: &str| {
        events
            .iter()
            .filter(|e| e.r#type == kind)
            .collect::<Vec<_>>()
    };
    let (calls, results) = (of("tool_call"), of("tool_result"));
    assert!(
        !calls.is_empty() && !results.is_empty(),
        "a tool_call and a tool_result: {events:#?}"
    );
    let trace_id = results[0].trace_id.clone();
    assert_eq!(trace_id.len(), 32, "{trace_id:?}");
    assert!(
        trace_id
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "{trace_id:?}"
    );
    assert_ne!(trace_id, "0".repeat(32));
    for e in calls.iter().chain(&results) {
        assert_eq!(e.trace_id, trace_id, "every event of the call: {e:?}");
    }
    let provenance = ithaca_kit::json::from_struct(results[0].payload.clone().expect("payload"))
        ["provenance"]["trace_id"]
        .clone();
    assert_eq!(
        provenance, trace_id,
        "the edge's span and the session's record name the same trace"
    );

    // A second call is its own trace.
    call(
        &s,
        &s.agent,
        "session_context",
        json!({"session_id": sid, "prompt": "again"}),
    )
    .await;
    let events = session_events(&s, &sid).await;
    let second = events
        .iter()
        .rfind(|e| e.r#type == "tool_result")
        .expect("the second tool_result");
    assert_eq!(second.trace_id.len(), 32);
    assert_ne!(
        second.trace_id, trace_id,
        "each agent call is its own trace"
    );

    // The caller's trace, from `_meta.traceparent` then from the HTTP
    // header, reaches the session's record.
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
    let mut params = json!({"name": "session_context", "arguments": {"prompt": "meta"}});
    params["_meta"] = meta();
    params["_meta"]["traceparent"] = json!(traceparent);
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params});
    let modern_headers = [
        ("MCP-Protocol-Version", "2026-07-28"),
        ("Mcp-Method", "tools/call"),
        ("Mcp-Name", "session_context"),
    ];
    let reply = raw(&s, Some(&s.agent), &modern_headers, &body.to_string()).await;
    let sid = reply.json()["result"]["structuredContent"]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a session: {}", reply.text()))
        .to_owned();
    let events = session_events(&s, &sid).await;
    assert!(!events.is_empty());
    for e in &events {
        assert_eq!(e.trace_id, trace, "_meta.traceparent: {e:?}");
    }

    let other = "0af7651916cd43dd8448eb211c80319c";
    let header = format!("00-{other}-b7ad6b7169203331-01");
    let mut params = json!({"name": "session_context", "arguments": {"prompt": "header"}});
    params["_meta"] = meta();
    let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": params});
    let mut headers = modern_headers.to_vec();
    headers.push(("traceparent", &header));
    let reply = raw(&s, Some(&s.agent), &headers, &body.to_string()).await;
    let sid = reply.json()["result"]["structuredContent"]["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a session: {}", reply.text()))
        .to_owned();
    let events = session_events(&s, &sid).await;
    assert!(!events.is_empty());
    for e in &events {
        assert_eq!(e.trace_id, other, "HTTP traceparent: {e:?}");
    }
}

/// CORS is off by default (see tests/suite/agents.rs); an allowed origin gets its
/// preflight answered before authentication and may read responses, any
/// other origin is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_allows_only_configured_origins() {
    let s = stack_with(
        |e| e.cors_origins = vec!["https://console.example".to_owned()],
        None,
    )
    .await;
    let preflight = |origin: &'static str| {
        let url = s.url.clone();
        async move {
            http::request(
                &url,
                "OPTIONS",
                "/mcp",
                &[
                    ("Origin", origin),
                    ("Access-Control-Request-Method", "POST"),
                    (
                        "Access-Control-Request-Headers",
                        "authorization, content-type",
                    ),
                ],
                b"",
            )
            .await
        }
    };
    let ok = preflight("https://console.example").await;
    assert_eq!(ok.status, 204, "{}", ok.text());
    assert_eq!(
        ok.header("access-control-allow-origin"),
        Some("https://console.example")
    );
    assert!(
        ok.header("access-control-allow-headers")
            .is_some_and(|h| h.contains("authorization") && h.contains("mcp-protocol-version"))
    );
    let refused = preflight("https://evil.example").await;
    assert_eq!(refused.status, 403);
    assert!(refused.header("access-control-allow-origin").is_none());

    // The real request from the allowed origin is served and readable.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let r = raw(
        &s,
        Some(&s.agent),
        &[
            ("Origin", "https://console.example"),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        &body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("access-control-allow-origin"),
        Some("https://console.example")
    );
    // Another origin is refused (DNS-rebinding defence) and gets no grant.
    let r = raw(
        &s,
        Some(&s.agent),
        &[("Origin", "https://evil.example")],
        &body.to_string(),
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(r.header("access-control-allow-origin").is_none());
}
