//! What qualifies for the edge's own `tools/call` path, and what goes to
//! rmcp: each condition of [`plan`] refused on its own.

use super::{Era, Plan, plan};
use crate::catalog::Catalog;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Value, json};
use std::sync::LazyLock;

static CATALOG: LazyLock<Catalog> = LazyLock::new(|| {
    Catalog::from_pool(ithaca_proto::annotations::pool()).expect("the catalog builds")
});

/// One change to a request, named for the failure message.
type Change<T> = (&'static str, fn(&mut T));

fn message() -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "search_skills",
            "arguments": {"query": "momentum"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                "io.ithaca/session_id": "s-1"
            }
        }
    })
}

fn headers() -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", "2026-07-28"),
        ("mcp-method", "tools/call"),
        ("mcp-name", "search_skills"),
    ] {
        h.insert(
            HeaderName::from_static(k),
            HeaderValue::from_str(v).expect("a header value"),
        );
    }
    h
}

#[test]
fn a_plain_modern_call_qualifies_with_its_declared_capabilities() {
    let Some(Plan::Call {
        era: Era::Modern,
        client,
    }) = plan(&CATALOG, &message(), &headers())
    else {
        panic!("a plain call does not qualify");
    };
    assert!(client.elicitation);
    assert!(!client.sampling);
    // A string id, null arguments and no arguments qualify too.
    let mut m = message();
    m["id"] = json!("abc");
    m["params"]["arguments"] = Value::Null;
    assert!(plan(&CATALOG, &m, &headers()).is_some());
    m["params"]
        .as_object_mut()
        .expect("an object")
        .remove("arguments");
    assert!(plan(&CATALOG, &m, &headers()).is_some());
}

#[test]
fn a_plain_modern_tool_list_qualifies() {
    let list = |m: &mut Value, h: &mut HeaderMap| {
        m["method"] = json!("tools/list");
        m["params"]
            .as_object_mut()
            .expect("an object")
            .retain(|k, _| k == "_meta");
        h.insert("mcp-method", HeaderValue::from_static("tools/list"));
        h.remove("mcp-name");
    };
    let (mut m, mut h) = (message(), headers());
    list(&mut m, &mut h);
    assert!(matches!(
        plan(&CATALOG, &m, &h),
        Some(Plan::ListTools { .. })
    ));
    // A cursor, a progress token or a mismatched Mcp-Method is rmcp's.
    let mut with_cursor = m.clone();
    with_cursor["params"]["cursor"] = json!("c");
    assert!(plan(&CATALOG, &with_cursor, &h).is_none());
    let mut with_token = m.clone();
    with_token["params"]["_meta"]["progressToken"] = json!(1);
    assert!(plan(&CATALOG, &with_token, &h).is_none());
    assert!(plan(&CATALOG, &m, &headers()).is_none());
}

#[test]
fn anything_rmcp_must_judge_goes_to_rmcp() {
    let changed_message: Vec<Change<Value>> = vec![
        ("another method", |m| m["method"] = json!("resources/read")),
        ("a float id", |m| m["id"] = json!(1.5)),
        ("no id", |m| {
            m.as_object_mut().expect("an object").remove("id");
        }),
        ("an extra envelope field", |m| m["extra"] = json!(1)),
        ("a retry's state", |m| {
            m["params"]["requestState"] = json!("x")
        }),
        ("arguments not an object", |m| {
            m["params"]["arguments"] = json!([1])
        }),
        ("a progress token", |m| {
            m["params"]["_meta"]["progressToken"] = json!(1)
        }),
        ("a log level", |m| {
            m["params"]["_meta"]["io.modelcontextprotocol/logLevel"] = json!("info")
        }),
        ("a legacy version", |m| {
            m["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2025-06-18")
        }),
        ("an unknown version", |m| {
            m["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01")
        }),
        ("no capabilities", |m| {
            m["params"]["_meta"]
                .as_object_mut()
                .expect("an object")
                .remove("io.modelcontextprotocol/clientCapabilities");
        }),
        ("capabilities of the wrong type", |m| {
            m["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = json!(5)
        }),
        ("no _meta", |m| {
            m["params"]
                .as_object_mut()
                .expect("an object")
                .remove("_meta");
        }),
    ];
    for (what, change) in changed_message {
        let mut m = message();
        change(&mut m);
        assert!(plan(&CATALOG, &m, &headers()).is_none(), "{what} qualified");
    }
    let changed_headers: Vec<Change<HeaderMap>> = vec![
        ("no Mcp-Name", |h| {
            h.remove("mcp-name");
        }),
        ("another Mcp-Name", |h| {
            h.insert("mcp-name", HeaderValue::from_static("run_skill"));
        }),
        ("a Base64 Mcp-Name", |h| {
            h.insert(
                "mcp-name",
                HeaderValue::from_static("=?base64?c2VhcmNoX3NraWxscw==?="),
            );
        }),
        ("two Mcp-Method values", |h| {
            h.append("mcp-method", HeaderValue::from_static("tools/call"));
        }),
        ("another Mcp-Method", |h| {
            h.insert("mcp-method", HeaderValue::from_static("tools/list"));
        }),
        ("a version header unlike _meta", |h| {
            h.insert(
                "mcp-protocol-version",
                HeaderValue::from_static("2025-11-25"),
            );
        }),
        ("no version header", |h| {
            h.remove("mcp-protocol-version");
        }),
        ("an Accept without SSE", |h| {
            h.insert("accept", HeaderValue::from_static("application/json"));
        }),
        ("a weighted Accept", |h| {
            h.insert(
                "accept",
                HeaderValue::from_static("application/json, text/event-stream;q=0"),
            );
        }),
        ("a text body", |h| {
            h.insert("content-type", HeaderValue::from_static("text/plain"));
        }),
    ];
    for (what, change) in changed_headers {
        let mut h = headers();
        change(&mut h);
        assert!(plan(&CATALOG, &message(), &h).is_none(), "{what} qualified");
    }
}

/// A legacy call: the header names the revision, `_meta` has nothing of
/// 2026-07-28.
fn legacy(tool: &str, version: &'static str) -> (Value, HeaderMap) {
    let message = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": tool, "arguments": {}, "_meta": {"io.ithaca/session_id": "s-1"}}});
    let mut h = headers();
    h.remove("mcp-method");
    h.remove("mcp-name");
    h.insert("mcp-protocol-version", HeaderValue::from_static(version));
    (message, h)
}

#[test]
fn a_legacy_call_qualifies_when_its_tool_can_send_nothing_but_its_answer() {
    let (m, h) = legacy("search_skills", "2025-06-18");
    assert!(matches!(
        plan(&CATALOG, &m, &h),
        Some(Plan::Call {
            era: Era::Legacy { structured: true },
            ..
        })
    ));
    let (m, h) = legacy("search_skills", "2025-03-26");
    assert!(matches!(
        plan(&CATALOG, &m, &h),
        Some(Plan::Call {
            era: Era::Legacy { structured: false },
            ..
        })
    ));
    // An unknown tool is refused before anything could be sent.
    let (m, h) = legacy("no_such_tool", "2025-06-18");
    assert!(plan(&CATALOG, &m, &h).is_some());
    // A streaming tool may report progress and logs and ask; a tool filed
    // for approval may ask its client to confirm.
    let streaming = CATALOG
        .tools
        .iter()
        .find(|t| t.streaming)
        .expect("a streaming tool");
    let approved = CATALOG
        .tools
        .iter()
        .find(|t| t.options.approval_required && !t.streaming)
        .expect("a tool that needs approval");
    for tool in [streaming, approved] {
        let (m, h) = legacy(&tool.name, "2025-06-18");
        assert!(plan(&CATALOG, &m, &h).is_none(), "{} qualified", tool.name);
    }
    // No version header (rmcp assumes 2025-03-26), a 2026-07-28 key in
    // `_meta`, a progress token, and a legacy `tools/list` are rmcp's.
    let (m, mut h) = legacy("search_skills", "2025-06-18");
    h.remove("mcp-protocol-version");
    assert!(plan(&CATALOG, &m, &h).is_none());
    let (mut m, h) = legacy("search_skills", "2025-06-18");
    m["params"]["_meta"]["io.modelcontextprotocol/clientInfo"] = json!({"name": "x"});
    assert!(plan(&CATALOG, &m, &h).is_none());
    let (mut m, h) = legacy("search_skills", "2025-06-18");
    m["params"]["_meta"]["progressToken"] = json!("p");
    assert!(plan(&CATALOG, &m, &h).is_none());
    let (mut m, h) = legacy("search_skills", "2025-06-18");
    m["method"] = json!("tools/list");
    m["params"] = json!({});
    assert!(plan(&CATALOG, &m, &h).is_none());
}

/// The body of a direct answer, as JSON.
async fn body_of(response: axum::response::Response) -> Value {
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a body");
    serde_json::from_slice(&bytes).expect("JSON")
}

#[tokio::test]
async fn a_legacy_result_keeps_the_shape_of_its_revision() {
    use super::complete;
    let legacy = Era::Legacy { structured: true };
    // An object is kept, and no `resultType` is added.
    let body = body_of(complete(
        legacy,
        json!(1),
        json!({"content": [], "structuredContent": {"n": 1}}),
    ))
    .await;
    assert_eq!(body["result"]["structuredContent"], json!({"n": 1}));
    assert!(body["result"].get("resultType").is_none(), "{body}");
    // A value that is no object moves into the content, as rmcp has it for
    // those revisions, once.
    let body = body_of(complete(
        legacy,
        json!(2),
        json!({"content": [], "structuredContent": [1, 2]}),
    ))
    .await;
    assert!(body["result"].get("structuredContent").is_none(), "{body}");
    assert_eq!(body["result"]["content"][0]["text"], "[1,2]", "{body}");
    let body = body_of(complete(
        legacy,
        json!(3),
        json!({"content": [{"type": "text", "text": "[1,2]"}], "structuredContent": [1, 2]}),
    ))
    .await;
    assert_eq!(body["result"]["content"].as_array().map(Vec::len), Some(1));
    // A result without content does not panic the edge.
    let body = body_of(complete(legacy, json!(4), json!({"structuredContent": 5}))).await;
    assert_eq!(body["id"], 4, "{body}");
    // Before 2025-06-18 structured output is dropped; 2026-07-28 keeps it
    // and says the result is complete.
    let body = body_of(complete(
        Era::Legacy { structured: false },
        json!(5),
        json!({"content": [], "structuredContent": {"n": 1}}),
    ))
    .await;
    assert!(body["result"].get("structuredContent").is_none(), "{body}");
    let body = body_of(complete(
        Era::Modern,
        json!(6),
        json!({"content": [], "structuredContent": {"n": 1}}),
    ))
    .await;
    assert_eq!(body["result"]["resultType"], "complete", "{body}");
}
