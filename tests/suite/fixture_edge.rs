//! The edge fronting a backend it knows only through gRPC reflection (the
//! conformance fixture): schemas derived from its messages, content blocks,
//! resources, templates and prompts. No session service: tools run ungated.

use crate::common;

use base64::Engine;
use common::harness::{StackBuilder, TestStack, serve_fixture};
use common::http::{self, Reply};
use serde_json::{Value, json};
use std::time::Duration;

async fn edge() -> (String, TestStack) {
    let fixture_url = serve_fixture().await;

    // Without a session service the edge refuses tools that would run
    // ungated (seed 002), unless told it fronts a protocol fixture.
    let backends = ithaca_edge::Backends {
        reflected: vec![fixture_url.clone()],
        timeout: Duration::from_secs(5),
        ..Default::default()
    };
    let refused = ithaca_edge::build_core(&backends, common::key()).await;
    assert!(
        matches!(refused, Err(ithaca_edge::BuildError::NoSessionGate(_))),
        "an edge with tools and no session gate must not build"
    );
    let stack = StackBuilder::new()
        .fronting_fixture(fixture_url)
        .unauthenticated()
        .start()
        .await;
    (stack.url.clone(), stack)
}

async fn rpc(url: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let reply: Reply = http::request(
        url,
        "POST",
        "/mcp",
        &[
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_come_from_the_reflected_messages() {
    let (url, _edge) = edge().await;
    let tools = rpc(&url, "tools/list", json!({})).await["tools"].clone();
    let names: Vec<&str> = tools
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for expected in [
        "test_simple_text",
        "test_image_content",
        "test_audio_content",
        "test_embedded_resource",
        "test_multiple_content_types",
        "test_error_handling",
        "fixture_echo",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    let echo = tools
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "fixture_echo")
        .expect("echo")
        .clone();
    assert_eq!(echo["title"], "Echo");
    let input = &echo["inputSchema"];
    // 2025-11-25 reads a schema without `$schema` as 2020-12, so the list
    // leaves it out (older revisions get it named).
    assert!(input.get("$schema").is_none(), "{input}");
    assert_eq!(
        input["required"],
        json!(["text", "big", "colour"]),
        "plain scalars and enums are required"
    );
    let p = &input["properties"];
    assert_eq!(p["text"]["type"], "string");
    assert_eq!(p["text"]["description"], "A required string.");
    assert_eq!(p["count"]["type"], "integer");
    assert!(
        p["count"].get("minimum").is_none() && p["count"].get("maximum").is_none(),
        "an int32's own range is no meaningful bound: {}",
        p["count"]
    );
    assert_eq!(p["big"]["type"], "integer", "int64 is a JSON integer too");
    assert_eq!(p["big"]["format"], "int64");
    assert!(
        p["big"]["$comment"]
            .as_str()
            .is_some_and(|c| c.contains("2^53")),
        "the schema says where 64-bit integers stop being exact: {}",
        p["big"]
    );
    assert_eq!(
        p["tags"],
        json!({"type": "array", "items": {"type": "string"}, "description": "Tags."})
    );
    assert_eq!(
        p["labels"]["additionalProperties"],
        json!({"type": "string"})
    );
    assert_eq!(
        p["colour"]["enum"],
        json!(["COLOUR_UNSPECIFIED", "COLOUR_RED", "COLOUR_GREEN"])
    );
    assert_eq!(p["nested"]["properties"]["flag"]["type"], "boolean");
    assert_eq!(
        echo["outputSchema"]["properties"]["echo"]["properties"]["big"]["type"],
        "integer"
    );

    let args = json!({"text": "hi", "big": "9007199254740993", "colour": "COLOUR_RED", "tags": ["a"], "labels": {"k": "v"}, "nested": {"flag": true}});
    let r = rpc(
        &url,
        "tools/call",
        json!({"name": "fixture_echo", "arguments": args}),
    )
    .await;
    assert_eq!(r["isError"], false, "{r}");
    let echoed = &r["structuredContent"]["echo"];
    assert_eq!(
        echoed["big"],
        json!(9_007_199_254_740_993_i64),
        "64-bit integers come back as exact JSON integers"
    );
    assert_eq!(echoed["colour"], "COLOUR_RED");
    assert_eq!(echoed["labels"]["k"], "v");
    assert_eq!(echoed["nested"]["flag"], true);

    for (bad, field) in [
        (
            json!({"text": "hi", "big": 1, "colour": "COLOUR_BLUE"}),
            "colour",
        ),
        (
            json!({"text": "hi", "big": "1.5x", "colour": "COLOUR_RED"}),
            "big",
        ),
        (
            json!({"text": "hi", "big": 1, "colour": "COLOUR_RED", "count": 3_000_000_000u64}),
            "count",
        ),
        (
            json!({"text": "hi", "big": 1, "colour": "COLOUR_RED", "nested": {"flag": "yes"}}),
            "nested.flag",
        ),
        (
            json!({"text": "hi", "big": 1, "colour": "COLOUR_RED", "tags": [1]}),
            "tags[0]",
        ),
    ] {
        let r = rpc(
            &url,
            "tools/call",
            json!({"name": "fixture_echo", "arguments": bad}),
        )
        .await;
        assert_eq!(r["isError"], true);
        let message = common::tool_error(&r)["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(message.starts_with(field), "{message} names {field}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_blocks_resources_and_prompts() {
    let (url, _edge) = edge().await;
    let r = rpc(
        &url,
        "tools/call",
        json!({"name": "test_multiple_content_types", "arguments": {}}),
    )
    .await;
    let content = r["content"].as_array().expect("content");
    assert_eq!(
        content
            .iter()
            .map(|c| c["type"].as_str().unwrap_or(""))
            .collect::<Vec<_>>(),
        vec!["text", "image", "resource"]
    );
    let png = base64::engine::general_purpose::STANDARD
        .decode(content[1]["data"].as_str().expect("data"))
        .expect("base64");
    assert!(png.starts_with(b"\x89PNG"), "an image is carried as bytes");
    assert_eq!(
        content[2]["resource"]["uri"],
        "test://mixed-content-resource"
    );

    let audio = rpc(
        &url,
        "tools/call",
        json!({"name": "test_audio_content", "arguments": {}}),
    )
    .await;
    assert_eq!(audio["content"][0]["mimeType"], "audio/wav");

    let failed = rpc(
        &url,
        "tools/call",
        json!({"name": "test_error_handling", "arguments": {}}),
    )
    .await;
    assert_eq!(failed["isError"], true);

    let resources = rpc(&url, "resources/list", json!({})).await["resources"].clone();
    assert!(
        resources
            .as_array()
            .expect("list")
            .iter()
            .any(|r| r["uri"] == "test://static-text" && r["mimeType"] == "text/plain")
    );
    let templates =
        rpc(&url, "resources/templates/list", json!({})).await["resourceTemplates"].clone();
    assert_eq!(templates[0]["uriTemplate"], "test://template/{id}/data");
    let binary = rpc(
        &url,
        "resources/read",
        json!({"uri": "test://static-binary"}),
    )
    .await;
    assert_eq!(binary["contents"][0]["mimeType"], "image/png");
    assert!(binary["contents"][0]["blob"].as_str().is_some());
    let templated = rpc(
        &url,
        "resources/read",
        json!({"uri": "test://template/7/data"}),
    )
    .await;
    let body: Value =
        serde_json::from_str(templated["contents"][0]["text"].as_str().expect("text"))
            .expect("json");
    assert_eq!(body["id"], "7");

    let prompts = rpc(&url, "prompts/list", json!({})).await["prompts"].clone();
    let with_args = prompts
        .as_array()
        .expect("prompts")
        .iter()
        .find(|p| p["name"] == "test_prompt_with_arguments")
        .expect("prompt")
        .clone();
    assert_eq!(
        with_args["arguments"][0],
        json!({"name": "arg1", "required": true, "description": "First test argument"})
    );
    let got = rpc(
        &url,
        "prompts/get",
        json!({"name": "test_prompt_with_arguments", "arguments": {"arg1": "x", "arg2": "y"}}),
    )
    .await;
    assert_eq!(
        got["messages"][0]["content"]["text"],
        "Prompt with arguments: arg1='x', arg2='y'"
    );
    let img = rpc(
        &url,
        "prompts/get",
        json!({"name": "test_prompt_with_image"}),
    )
    .await;
    assert_eq!(img["messages"][0]["content"]["type"], "image");
}
