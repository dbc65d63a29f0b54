//! The streaming mapping end to end: the edge fronting the conformance
//! fixture's streaming RPCs (learned through reflection) over HTTP, in both
//! eras. Progress and log messages on the request's SSE stream (with the
//! caller's token, at the level asked for); 2026-07-28's `input_required`
//! with a sealed `requestState` that a changed byte breaks; the -32021 of an
//! undeclared capability; and a legacy elicitation round trip, where the
//! edge asks the client on the response stream and resumes the backend with
//! the answer POSTed back.

use crate::common;

use common::harness::{StackBuilder, TestStack, serve_fixture};
use common::http::{self, Reply};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn edge() -> (String, TestStack) {
    edge_with(0).await
}

/// The edge, started by the harness with authentication off, fronting the
/// fixture (learned through reflection, ungated), with at most
/// `max_in_flight` calls in flight to it (0: the default).
async fn edge_with(max_in_flight: usize) -> (String, TestStack) {
    let stack = StackBuilder::new()
        .fronting_fixture(serve_fixture().await)
        .unauthenticated()
        .edge(move |e| {
            if max_in_flight > 0 {
                e.limits.backend_max_in_flight = max_in_flight;
            }
        })
        .start()
        .await;
    (stack.url.clone(), stack)
}

/// The `_meta` of a 2026-07-28 request, with `extra` keys.
fn modern_meta(extra: Value) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "streaming-test", "version": "1"},
    });
    if let (Value::Object(meta), Value::Object(extra)) = (&mut meta, extra) {
        meta.extend(extra);
    }
    meta
}

/// POST one message; `version` is the MCP-Protocol-Version header.
async fn post(url: &str, version: &str, message: &Value) -> Reply {
    let mut headers = vec![
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", version),
    ];
    let method = message["method"].as_str().unwrap_or("").to_owned();
    let name = message["params"]["name"].as_str().unwrap_or("").to_owned();
    if version == "2026-07-28" {
        headers.push(("Mcp-Method", &method));
        if !name.is_empty() {
            headers.push(("Mcp-Name", &name));
        }
    }
    http::request(
        url,
        "POST",
        "/mcp",
        &headers,
        message.to_string().as_bytes(),
    )
    .await
}

/// The JSON-RPC messages of a reply: its SSE `data:` lines, or its JSON body.
fn messages(reply: &Reply) -> Vec<Value> {
    let text = reply.text();
    let from_events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    if from_events.is_empty() {
        vec![reply.json()]
    } else {
        from_events
    }
}

fn by_method<'a>(messages: &'a [Value], method: &str) -> Vec<&'a Value> {
    messages.iter().filter(|m| m["method"] == method).collect()
}

fn final_result(messages: &[Value]) -> Value {
    messages
        .iter()
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
        .cloned()
        .unwrap_or_else(|| panic!("no response among {messages:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_and_logs_reach_the_caller_at_its_level_in_both_eras() {
    let (url, _edge) = edge().await;

    // 2026-07-28: the request's token and level.
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "test_tool_with_progress", "arguments": {},
        "_meta": modern_meta(json!({"progressToken": "p-1"})),
    }});
    let reply = post(&url, "2026-07-28", &call).await;
    let got = messages(&reply);
    let progress = by_method(&got, "notifications/progress");
    let values: Vec<f64> = progress
        .iter()
        .map(|p| p["params"]["progress"].as_f64().expect("progress"))
        .collect();
    assert_eq!(values, [0.0, 50.0, 100.0], "{got:?}");
    assert!(
        progress
            .iter()
            .all(|p| p["params"]["progressToken"] == "p-1" && p["params"]["total"] == 100.0)
    );
    assert_eq!(final_result(&got)["result"]["isError"], false);

    // No logLevel in _meta: no log messages at all.
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "test_logging_tool", "arguments": {}, "_meta": modern_meta(json!({})),
    }});
    let got = messages(&post(&url, "2026-07-28", &call).await);
    assert!(
        by_method(&got, "notifications/message").is_empty(),
        "{got:?}"
    );
    assert_eq!(final_result(&got)["result"]["isError"], false);
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
        "name": "test_logging_tool", "arguments": {},
        "_meta": modern_meta(json!({"io.modelcontextprotocol/logLevel": "info"})),
    }});
    let got = messages(&post(&url, "2026-07-28", &call).await);
    let logs = by_method(&got, "notifications/message");
    assert_eq!(logs.len(), 3, "{got:?}");
    assert_eq!(logs[0]["params"]["level"], "info");
    assert_eq!(logs[0]["params"]["data"], "Tool execution started");
    let call = json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
        "name": "test_logging_tool", "arguments": {},
        "_meta": modern_meta(json!({"io.modelcontextprotocol/logLevel": "loud"})),
    }});
    let got = messages(&post(&url, "2026-07-28", &call).await);
    assert_eq!(final_result(&got)["error"]["code"], -32602, "{got:?}");

    // Legacy: the token from _meta, the level from logging/setLevel.
    let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {
        "name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": 7},
    }});
    let got = messages(&post(&url, "2025-11-25", &call).await);
    let progress = by_method(&got, "notifications/progress");
    assert_eq!(progress.len(), 3, "{got:?}");
    assert_eq!(progress[2]["params"]["progressToken"], 7);
    let set = |level: &str| json!({"jsonrpc": "2.0", "id": 6, "method": "logging/setLevel", "params": {"level": level}});
    let reply = post(&url, "2025-11-25", &set("warning")).await;
    assert!(reply.json().get("result").is_some(), "{}", reply.text());
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "test_tool_with_logging", "arguments": {},
    }});
    let got = messages(&post(&url, "2025-11-25", &call).await);
    assert!(
        by_method(&got, "notifications/message").is_empty(),
        "info messages are below warning: {got:?}"
    );
    post(&url, "2025-11-25", &set("debug")).await;
    let got = messages(&post(&url, "2025-11-25", &call).await);
    assert_eq!(by_method(&got, "notifications/message").len(), 3, "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_required_rounds_carry_sealed_state_and_check_capabilities() {
    let (url, _edge) = edge().await;
    let call = |id: u32, extra: Value| {
        let mut params = json!({
            "name": "test_input_required_result_multi_round", "arguments": {},
            "_meta": modern_meta(json!({"io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}})),
        });
        if let (Value::Object(p), Value::Object(e)) = (&mut params, extra) {
            p.extend(e);
        }
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
    };
    let first = final_result(&messages(
        &post(&url, "2026-07-28", &call(1, json!({}))).await,
    ));
    let first = &first["result"];
    assert_eq!(first["resultType"], "input_required", "{first}");
    assert_eq!(
        first["inputRequests"]["step1"]["method"],
        "elicitation/create"
    );
    let state = first["requestState"].as_str().expect("a requestState");
    assert!(
        !state.contains("round-1"),
        "the service's state is sealed, not readable: {state}"
    );

    // A changed state is refused before the service sees it.
    let mut tampered = state.to_owned();
    tampered.insert(
        5,
        if state.as_bytes()[5] == b'A' {
            'B'
        } else {
            'A'
        },
    );
    tampered.remove(6);
    let answer = json!({"step1": {"action": "accept", "content": {"name": "Ada"}}});
    let reply = post(
        &url,
        "2026-07-28",
        &call(
            2,
            json!({"inputResponses": answer, "requestState": tampered}),
        ),
    )
    .await;
    let refused = final_result(&messages(&reply));
    assert_eq!(refused["error"]["code"], -32602, "{refused}");

    // The real state goes on to the second round, then the result.
    let reply = post(
        &url,
        "2026-07-28",
        &call(3, json!({"inputResponses": answer, "requestState": state})),
    )
    .await;
    let second = final_result(&messages(&reply))["result"].clone();
    assert_eq!(second["resultType"], "input_required", "{second}");
    assert!(second["inputRequests"]["step2"].is_object(), "{second}");
    let state = second["requestState"].as_str().expect("state");
    let answer = json!({"step2": {"action": "accept", "content": {"color": "green"}}});
    let reply = post(
        &url,
        "2026-07-28",
        &call(4, json!({"inputResponses": answer, "requestState": state})),
    )
    .await;
    let done = final_result(&messages(&reply))["result"].clone();
    assert_eq!(done["resultType"], "complete", "{done}");
    assert_eq!(done["content"][0]["text"], "Ada's favorite color is green");

    // An answer that is not a result object is refused.
    let reply = post(
        &url,
        "2026-07-28",
        &call(5, json!({"inputResponses": {"step1": 12345}})),
    )
    .await;
    assert_eq!(final_result(&messages(&reply))["error"]["code"], -32602);

    // A tool that needs sampling, from a client that did not declare it.
    let missing = json!({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {
        "name": "test_missing_capability", "arguments": {}, "_meta": modern_meta(json!({})),
    }});
    let reply = post(&url, "2026-07-28", &missing).await;
    assert_eq!(reply.status, 400, "{}", reply.text());
    let error = &reply.json()["error"];
    assert_eq!(error["code"], -32021, "{error}");
    assert!(error["data"]["requiredCapabilities"]["sampling"].is_object());
}

/// POST a legacy (2025-11-25) call on a connection of its own, to read its
/// response stream as it comes; the server closes the connection after it.
async fn post_legacy_raw(url: &str, call: &Value) -> tokio::net::TcpStream {
    let authority = url.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect");
    let body = call.to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    stream
}

/// POST a legacy call and keep the response stream open; answer the
/// request that appears on it from another connection with `answer`, and
/// return everything the stream carried.
async fn legacy_call_answered(url: &str, call: &Value, answer: Value) -> Vec<Value> {
    let mut stream = post_legacy_raw(url, call).await;
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    let mut answered = false;
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("stream stalled; got so far: {text}"))
            .expect("read");
        if n == 0 {
            break;
        }
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
        let seen: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect();
        if !answered
            && let Some(request) = seen.iter().find(|m| m["method"] == "elicitation/create")
        {
            let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result": answer});
            let posted = http::request(
                url,
                "POST",
                "/mcp",
                &[
                    ("Content-Type", "application/json"),
                    ("Accept", "application/json, text/event-stream"),
                    ("MCP-Protocol-Version", "2025-11-25"),
                ],
                reply.to_string().as_bytes(),
            )
            .await;
            assert_eq!(posted.status, 202, "{}", posted.text());
            answered = true;
        }
        if seen
            .iter()
            .any(|m| m.get("result").is_some() && m["id"] == call["id"])
        {
            return seen;
        }
    }
    panic!("the stream ended without the call's result: {text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_client_is_asked_on_the_response_stream_and_the_call_resumes() {
    let (url, _edge) = edge().await;
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {
        "name": "test_elicitation", "arguments": {"message": "Who are you?"},
    }});
    let seen = legacy_call_answered(
        &url,
        &call,
        json!({"action": "accept", "content": {"username": "ada", "email": "ada@example.org"}}),
    )
    .await;
    let request = seen
        .iter()
        .find(|m| m["method"] == "elicitation/create")
        .expect("the request");
    assert_eq!(request["params"]["message"], "Who are you?");
    assert!(
        request["id"].as_str().is_some_and(|id| id.len() > 20),
        "an unguessable id: {request}"
    );
    let result = final_result(&seen);
    let text = result["result"]["content"][0]["text"]
        .as_str()
        .expect("text");
    assert!(text.starts_with("User response: action=accept"), "{text}");
    assert!(text.contains("ada@example.org"), "{text}");

    // An answer nobody waits for is not taken.
    let stray = json!({"jsonrpc": "2.0", "id": "ithaca-nobody", "result": {}});
    let reply = post(&url, "2025-11-25", &stray).await;
    assert_ne!(reply.status, 202, "{}", reply.text());
}

/// A streaming call holds its place among the backend's calls in flight
/// for as long as its stream is open, as a unary call does: with one place,
/// a second call while the first still streams progress is refused
/// (`BACKEND_BUSY`, retryable), and the place is free again once the
/// stream ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_call_holds_its_backend_place_until_its_stream_ends() {
    let (url, _edge) = edge_with(1).await;
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "test_tool_with_progress", "arguments": {}, "_meta": {"progressToken": 1},
    }});
    let mut stream = post_legacy_raw(&url, &call).await;
    // Read until the first progress notice: the stream is open.
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    while !text.contains("notifications/progress") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("no progress came; got so far: {text}"))
            .expect("read");
        assert!(n > 0, "the stream ended before any progress: {text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let other = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "test_simple_text", "arguments": {},
    }});
    let refused = final_result(&messages(&post(&url, "2025-11-25", &other).await));
    let error = common::tool_error(&refused["result"]);
    assert_eq!(error["error"], "BACKEND_BUSY", "{refused}");
    assert_eq!(error["retryable"], true, "{refused}");

    // The first call still ends with its result...
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut text))
        .await
        .expect("the stream never ended")
        .expect("read");
    assert!(text.contains("Progress test completed"), "{text}");
    // ...and then its place is free.
    let answered = final_result(&messages(&post(&url, "2025-11-25", &other).await));
    assert_eq!(answered["result"]["isError"], false, "{answered}");
}
