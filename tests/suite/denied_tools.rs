//! A tool the caller may not use and a tool that does not exist get the
//! same answer, byte for byte but for the name the caller sent, in both
//! eras: nothing in a refusal tells an agent that a tool it was not given
//! exists (issue 23).

use crate::common;

use common::harness::StackBuilder;
use common::http::{self, Reply};
use ithaca::services::Service;
use ithaca_proto::auth::v1 as pb;
use serde_json::json;

/// `run_skill` needs `runs:write`, which the key below lacks.
const DENIED: &str = "run_skill";
/// A name no service offers.
const UNKNOWN: &str = "run_skil_nowhere";

/// What a refusal shows a client: status, content type, and the body with
/// the tool's name written as `DENIED`.
fn seen(reply: &Reply, name: &str) -> (u16, Option<String>, String) {
    (
        reply.status,
        reply.header("content-type").map(str::to_owned),
        reply.text().replace(name, DENIED),
    )
}

async fn legacy(url: &str, token: &str, tool: &str) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": tool, "arguments": {}}});
    let auth = format!("Bearer {token}");
    http::request(
        url,
        "POST",
        "/mcp",
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        body.to_string().as_bytes(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_tool_and_an_unknown_tool_get_the_same_answer_in_both_eras() {
    let stack = StackBuilder::new()
        .services(&[Service::Auth, Service::Session, Service::Skills])
        .start()
        .await;
    let reader = stack.key(&["data:read"], pb::Actor::Agent).await;
    // The tool is there, for a key that may run skills.
    let tools = stack
        .mcp(&stack.agent)
        .request("tools/list", json!({}))
        .await
        .json();
    let listed = tools["result"]["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t["name"] == DENIED));
    assert!(listed, "{DENIED} is not offered at all: {tools}");

    let modern = |tool: &'static str| {
        let mcp = stack.mcp(&reader);
        async move {
            mcp.request("tools/call", json!({"name": tool, "arguments": {}}))
                .await
        }
    };
    let denied = modern(DENIED).await;
    let unknown = modern(UNKNOWN).await;
    assert_eq!(denied.status, 200, "{}", denied.text());
    assert!(denied.text().contains("unknown tool"), "{}", denied.text());
    assert_eq!(seen(&denied, DENIED), seen(&unknown, UNKNOWN));

    let denied = legacy(&stack.url, &reader, DENIED).await;
    let unknown = legacy(&stack.url, &reader, UNKNOWN).await;
    assert!(denied.text().contains("unknown tool"), "{}", denied.text());
    assert_eq!(seen(&denied, DENIED), seen(&unknown, UNKNOWN));
    stack.stop().await;
}
