//! What an agent must read before it can work (issue 26 §1): the tool list
//! of an agent holding every scope stays within a bound on the wire, its schemas
//! keep their shared definitions within each tool, the values a field
//! allows are an `enum` rather than prose, and a value outside one is
//! refused naming the field and the values.

use crate::common;

use common::harness::StackBuilder;
use common::http;
use common::{Up, up};
use serde_json::{Value, json};

/// The most bytes of the tool list a host puts before the model: each
/// tool's name, description and input schema (issue 26's goal, 30 KiB).
/// Output schemas, titles and annotations are for the client, which
/// validates results and asks people to confirm with them; the model APIs
/// agent hosts call take a tool as a name, a description and an input
/// schema.
const MAX_MODEL_BYTES: usize = 30 * 1024;

/// The most bytes of the whole `tools/list` answer on the wire. A ratchet
/// at the size reached, lowered as the list shrinks, so that it cannot grow
/// unnoticed: 105.5 KB for 41 tools, then 101.5 KB once the tools' prose
/// was cut. The output schemas are two thirds of it (README,
/// "Performance").
const MAX_TOOL_LIST_BYTES: usize = 102_500;

/// What the model reads of `tools`, compact JSON.
fn model_view(tools: &[Value]) -> String {
    Value::Array(
        tools
            .iter()
            .map(|t| json!({"name": t["name"], "description": t["description"], "inputSchema": t["inputSchema"]}))
            .collect(),
    )
    .to_string()
}

async fn tool_list(up: &Up, token: &str) -> (usize, Vec<Value>) {
    let reply = http::modern(&up.url, token, "tools/list", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let tools = reply.json()["result"]["tools"]
        .as_array()
        .expect("tools")
        .clone();
    (reply.body.len(), tools)
}

fn tool<'a>(tools: &'a [Value], name: &str) -> &'a Value {
    tools
        .iter()
        .find(|t| t["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not listed"))
}

/// Every `$ref` in `schema`, with its path.
fn refs(path: &str, schema: &Value, out: &mut Vec<(String, String)>) {
    match schema {
        Value::Object(map) => {
            for (key, inner) in map {
                if key == "$ref"
                    && let Some(r) = inner.as_str()
                {
                    out.push((path.to_owned(), r.to_owned()));
                }
                refs(&format!("{path}/{key}"), inner, out);
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                refs(&format!("{path}/{i}"), inner, out);
            }
        }
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_list_an_agent_reads_stays_small_and_keeps_its_meaning() {
    let up = up(&[]);
    let (bytes, tools) = tool_list(&up, &up.agent).await;
    eprintln!(
        "tools/list for the agent: {} tools, {bytes} bytes",
        tools.len()
    );
    let model = model_view(&tools).len();
    eprintln!("of which the model reads {model} bytes");
    assert!(
        model <= MAX_MODEL_BYTES,
        "the model reads {model} bytes of the tool list, over {MAX_MODEL_BYTES}"
    );
    assert!(
        bytes <= MAX_TOOL_LIST_BYTES,
        "tools/list is {bytes} bytes for {} tools, over {MAX_TOOL_LIST_BYTES}",
        tools.len()
    );
    // Small because it is compact, not because tools went missing: the
    // agent sees the write tools its scopes allow, with output schemas.
    for name in [
        "session_context",
        "run_broker_filter",
        "get_price_history",
        "promote_strategy",
        "get_approval",
        "run_skill",
    ] {
        let t = tool(&tools, name);
        assert!(t["outputSchema"].is_object(), "{name} has no outputSchema");
    }

    for t in &tools {
        let name = t["name"].as_str().unwrap_or_default();
        for key in ["inputSchema", "outputSchema"] {
            let Some(schema) = t.get(key) else { continue };
            assert_eq!(schema["type"], "object", "{name}.{key}: {schema}");
            // 2020-12 is the default dialect of 2025-11-25 and later.
            assert!(schema.get("$schema").is_none(), "{name}.{key}");
            // Shared definitions stay within the tool's own schema, since
            // clients validate each tool on its own.
            let mut found = Vec::new();
            refs("", schema, &mut found);
            for (at, r) in found {
                let key_name = r
                    .strip_prefix("#/$defs/")
                    .unwrap_or_else(|| panic!("{name}.{key}{at}: $ref {r:?} points outside $defs"));
                assert!(
                    schema["$defs"].get(key_name).is_some(),
                    "{name}.{key}{at}: $ref {r:?} does not resolve in the tool's own schema"
                );
            }
            jsonschema::validator_for(schema)
                .unwrap_or_else(|e| panic!("{name}.{key} is no JSON Schema: {e}"));
        }
    }

    // Allowed values are in the schema, not only in prose.
    let input = |tool_name: &str, field: &str| {
        tool(&tools, tool_name)["inputSchema"]["properties"][field].clone()
    };
    assert_eq!(
        input("run_broker_filter", "sort_order")["enum"],
        json!(["Ascending", "Descending"])
    );
    assert_eq!(
        input("promote_strategy", "mode")["enum"],
        json!(["paper", "live"])
    );
    assert_eq!(
        input("session_context", "subject_kind")["enum"],
        json!(["filter", "gcn_event"])
    );
    assert_eq!(
        input("subscribe_run", "status")["enum"],
        json!([
            "draft",
            "queued",
            "running",
            "succeeded",
            "failed",
            "cancelled"
        ])
    );
    assert_eq!(
        input("convert_time", "from")["enum"],
        json!(["iso", "jd", "mjd"])
    );
    let approval = &tool(&tools, "get_approval")["outputSchema"];
    let status = if approval["properties"]["status"].is_object() {
        approval["properties"]["status"].clone()
    } else {
        approval["$defs"]["Approval"]["properties"]["status"].clone()
    };
    assert_eq!(
        status["enum"],
        json!([
            "pending", "approved", "denied", "expired", "executed", "failed"
        ]),
        "{approval}"
    );

    // Clients of revisions without a default dialect are told it.
    let reply = http::request(
        &up.url,
        "POST",
        "/mcp",
        &[
            ("Authorization", format!("Bearer {}", up.agent).as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    let legacy = reply.json()["result"]["tools"].clone();
    let first = &legacy[0];
    assert_eq!(
        first["inputSchema"]["$schema"], "https://json-schema.org/draft/2020-12/schema",
        "{first}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_value_outside_a_fields_allowed_values_is_refused_naming_them() {
    let stack = StackBuilder::new().start().await;
    let mcp = stack.mcp(&stack.agent);
    let call = |tool: &'static str, args: Value| mcp.call(tool, args);
    let opened = call("session_context", json!({"prompt": "enums"})).await;
    assert_eq!(opened["isError"], false, "{opened}");
    let refused = call(
        "convert_time",
        json!({"value": "2017-08-17T12:41:04", "from": "week"}),
    )
    .await;
    let error = common::tool_error(&refused);
    let message = error["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(r#"from: "week" is not one of: iso, jd, mjd"#),
        "{error}"
    );
    let converted = call(
        "convert_time",
        json!({"value": "2017-08-17T12:41:04", "from": "iso"}),
    )
    .await;
    assert_eq!(converted["isError"], false, "{converted}");
}
