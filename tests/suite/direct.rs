//! The edge answers a plain 2026-07-28 `tools/call` and `tools/list`, and
//! a legacy `tools/call` of a tool that can send nothing but its answer,
//! itself (`edge/src/front/direct.rs`), without rmcp's per-request
//! service. Its answers must be the ones rmcp's path gives: each request
//! below is sent twice, once as it is (the edge's path) and once with a
//! `progressToken` in `_meta` (which sends it through rmcp; none of these
//! tools reports progress, so the token changes nothing else), and
//! status, content type and body must match. The edge's metric shows
//! which path each call took.

use crate::common;

use common::harness::{StackBuilder, TestStack};
use common::http::{self, Reply};
use ithaca::services::Service;
use ithaca_proto::auth::v1 as pb;
use serde_json::{Value, json};

/// `ithaca_edge_direct_tool_calls_total` from the edge's `/metrics`.
async fn direct_calls(stack: &TestStack) -> u64 {
    let metrics = http::request(&stack.url, "GET", "/metrics", &[], b"").await;
    assert_eq!(metrics.status, 200, "{}", metrics.text());
    metrics
        .text()
        .lines()
        .find_map(|l| l.strip_prefix("ithaca_edge_direct_tool_calls_total "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no direct-call counter in {}", metrics.text()))
}

/// What a client sees of a reply: status, content type, JSON body.
fn seen(reply: &Reply) -> (u16, Option<String>, Value) {
    (
        reply.status,
        reply.header("content-type").map(str::to_owned),
        reply.json(),
    )
}

/// The two answers are the same; a refusal byte for byte, since a denied
/// tool and an unknown one may take different paths and must not be told
/// apart (`denied_tools.rs`).
fn same(direct: &Reply, rmcp: &Reply, what: &str) {
    assert_eq!(
        seen(direct),
        seen(rmcp),
        "{what}: the two paths answer differently"
    );
    if direct.json().get("error").is_some() {
        assert_eq!(
            direct.text(),
            rmcp.text(),
            "{what}: the refusals differ in their bytes"
        );
    }
}

/// The request sent both ways; the two answers as a client sees them.
async fn both_ways(
    stack: &TestStack,
    token: &str,
    method: &str,
    params: &Value,
) -> [(u16, Option<String>, Value); 2] {
    let direct = http::modern(&stack.url, token, method, params.clone()).await;
    let mut through_rmcp = params.clone();
    through_rmcp["_meta"]["progressToken"] = json!("p-1");
    let through_rmcp = http::modern(&stack.url, token, method, through_rmcp).await;
    same(&direct, &through_rmcp, method);
    [seen(&direct), seen(&through_rmcp)]
}

/// A `tools/call` of the `initialize` profile (stateless: no handshake
/// needed), the revision in the header.
async fn legacy(stack: &TestStack, token: &str, version: &str, params: &Value) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params});
    http::request(
        &stack.url,
        "POST",
        "/mcp",
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", version),
        ],
        body.to_string().as_bytes(),
    )
    .await
}

/// `tools/list` both ways: the same list, and not an empty one.
async fn same_list(stack: &TestStack, token: &str, what: &str) -> Value {
    let [direct, rmcp] = both_ways(stack, token, "tools/list", &json!({})).await;
    assert_eq!(direct, rmcp, "{what}: the two paths list differently");
    let (status, _, body) = direct;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "{body}"
    );
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_match_the_sdk_path() {
    let stack = StackBuilder::new()
        .services(&[Service::Auth, Service::Session, Service::Skills])
        .start()
        .await;
    let reader = stack.key(&["data:read"], pb::Actor::Agent).await;
    let agent = &stack.agent;
    // No tool schema annotates a header, which the edge's path relies on
    // (rmcp would check `Mcp-Param-*` headers against such a property).
    let tools = stack.mcp(agent).request("tools/list", json!({})).await;
    assert!(!tools.text().contains("x-mcp-header"), "{}", tools.text());

    // The list each key is offered, outside and inside a session below.
    let agent_list = same_list(&stack, agent, "agent").await;
    let reader_list = same_list(&stack, &reader, "reader").await;
    assert_ne!(agent_list, reader_list, "the keys' lists should differ");

    let before = direct_calls(&stack).await;
    let mut sent = 0;
    let mut compare = async |token: &str, what: &str, params: Value| {
        let [direct, rmcp] = both_ways(&stack, token, "tools/call", &params).await;
        assert_eq!(direct, rmcp, "{what}: the two paths answer differently");
        sent += 1;
        direct
    };
    // Refused by the session gate: no session yet.
    let (status, _, body) = compare(
        agent,
        "no session",
        json!({"name": "search_skills", "arguments": {"query": "momentum"}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["result"]["isError"], true, "{body}");
    assert_eq!(body["result"]["resultType"], "complete", "{body}");
    // An unknown tool, and one the key may not use.
    let (_, _, body) = compare(
        agent,
        "unknown tool",
        json!({"name": "no_such_tool", "arguments": {}}),
    )
    .await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    compare(
        &reader,
        "denied tool",
        json!({"name": "run_skill", "arguments": {}}),
    )
    .await;
    // A pin that is no session id, and one of no session.
    let (_, _, body) = compare(
        agent,
        "malformed pin",
        json!({"name": "search_skills", "arguments": {}, "_meta": {"io.ithaca/session_id": 5}}),
    )
    .await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    compare(
        agent,
        "pin of no session",
        json!({"name": "search_skills", "arguments": {},
               "_meta": {"io.ithaca/session_id": "00000000-0000-0000-0000-000000000000"}}),
    )
    .await;
    // In an open session: a read, and arguments of the wrong type.
    let opened = stack
        .mcp(agent)
        .call("session_context", json!({"prompt": "compare the paths"}))
        .await;
    assert_ne!(opened["isError"], true, "{opened}");
    let (_, _, body) = compare(
        agent,
        "a read",
        json!({"name": "search_skills", "arguments": {"query": "momentum"}}),
    )
    .await;
    assert_ne!(body["result"]["isError"], true, "{body}");
    assert!(body["result"]["structuredContent"].is_object(), "{body}");
    let (_, _, body) = compare(
        agent,
        "bad arguments",
        json!({"name": "search_skills", "arguments": {"query": 5}}),
    )
    .await;
    assert_eq!(body["result"]["isError"], true, "{body}");
    // Each call took the edge's path once (the `session_context` above
    // too); the copies with a progress token did not.
    assert_eq!(direct_calls(&stack).await - before, sent + 1);
    same_list(&stack, agent, "agent in a session").await;

    // The `initialize` profile: a call of a tool that can send nothing but
    // its answer is the edge's too, in 2025-06-18 and in 2025-03-26 (no
    // structured output).
    let before = direct_calls(&stack).await;
    let mut sent = 0;
    let mut compare = async |version: &'static str, what: &str, params: Value| {
        let direct = legacy(&stack, agent, version, &params).await;
        let mut through_rmcp = params.clone();
        through_rmcp["_meta"]["progressToken"] = json!("p-1");
        let through_rmcp = legacy(&stack, agent, version, &through_rmcp).await;
        same(&direct, &through_rmcp, &format!("{what} ({version})"));
        sent += 1;
        direct.json()
    };
    let read = json!({"name": "search_skills", "arguments": {"query": "momentum"}});
    let body = compare("2025-06-18", "a read", read.clone()).await;
    assert!(body["result"]["structuredContent"].is_object(), "{body}");
    assert!(body["result"].get("resultType").is_none(), "{body}");
    let body = compare("2025-03-26", "a read", read).await;
    assert!(body["result"].get("structuredContent").is_none(), "{body}");
    let body = compare(
        "2025-06-18",
        "unknown tool",
        json!({"name": "no_such_tool", "arguments": {}}),
    )
    .await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    compare(
        "2025-06-18",
        "bad arguments",
        json!({"name": "search_skills", "arguments": {"query": 5}}),
    )
    .await;
    compare(
        "2025-06-18",
        "malformed pin",
        json!({"name": "search_skills", "arguments": {}, "_meta": {"io.ithaca/session_id": 5}}),
    )
    .await;
    assert_eq!(direct_calls(&stack).await - before, sent);
    // A streaming tool (it may report progress and ask its client) stays
    // rmcp's.
    let streaming = legacy(
        &stack,
        agent,
        "2025-06-18",
        &json!({"name": "run_skill", "arguments": {}}),
    )
    .await;
    assert_eq!(streaming.status, 200, "{}", streaming.text());
    assert_eq!(direct_calls(&stack).await - before, sent);
    stack.stop().await;
}
