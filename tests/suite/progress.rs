//! The streaming mapping where the product needs it, against the real
//! stack (`ithaca up`: every service over gRPC, SQLite) through the edge
//! over HTTP, in both eras:
//!
//! - `run_skill` of a batch skill (a strategy backtest) reports each step
//!   as `notifications/progress` with the caller's token, increasing, with
//!   the total, before the run itself, whose result validates against the
//!   tool's output schema (the `Run` schema it always had); without a token
//!   the same run comes back and no progress is sent;
//! - `promote_strategy` and `activate_broker_filter_version` called with a
//!   human key from a client that can elicit ask the person to confirm:
//!   declining changes nothing and says so (validating against the output
//!   schema), accepting runs the call; a human key whose client declared no
//!   elicitation (2026-07-28) and an agent key keep today's flow;
//! - the broker's ingestion RPCs with progress (GCN, alerts, bars, catalogs)
//!   stream done of total in order up to the total, then their report, and
//!   `ithaca ingest` shows them; the catalog one is also read over gRPC
//!   straight from `ithaca serve broker` (refusals are the stream's status).

use crate::common;

use common::http;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::Up;

fn up() -> Up {
    common::up(&[])
}

/// The protocol revision a call speaks.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Era {
    Modern,
    Legacy,
}

impl Era {
    fn version(self) -> &'static str {
        match self {
            Era::Modern => "2026-07-28",
            Era::Legacy => "2025-11-25",
        }
    }
}

/// A `tools/call` message. In 2026-07-28 `_meta` carries the standard keys,
/// the client's `capabilities` and `meta`; `extra` joins the params
/// (`inputResponses`, `requestState`).
fn tool_call(
    era: Era,
    id: u32,
    tool: &str,
    arguments: Value,
    meta: Value,
    capabilities: Value,
    extra: Value,
) -> Value {
    let mut meta = meta;
    if era == Era::Modern {
        meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
        meta["io.modelcontextprotocol/clientCapabilities"] = capabilities;
        meta["io.modelcontextprotocol/clientInfo"] =
            json!({"name": "progress-test", "version": "1"});
    }
    let mut params = json!({"name": tool, "arguments": arguments, "_meta": meta});
    if let (Value::Object(p), Value::Object(e)) = (&mut params, extra) {
        p.extend(e);
    }
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

/// POST `message` with `token`; every JSON-RPC message of the reply.
async fn post(up: &Up, token: &str, era: Era, message: &Value) -> Vec<Value> {
    let auth = format!("Bearer {token}");
    let method = message["method"].as_str().unwrap_or("").to_owned();
    let name = message["params"]["name"].as_str().unwrap_or("").to_owned();
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", era.version()),
    ];
    if era == Era::Modern {
        headers.push(("Mcp-Method", &method));
        if !name.is_empty() {
            headers.push(("Mcp-Name", &name));
        }
    }
    let reply = http::request(
        &up.url,
        "POST",
        "/mcp",
        &headers,
        message.to_string().as_bytes(),
    )
    .await;
    assert_eq!(reply.status, 200, "{message}: {}", reply.text());
    let text = reply.text();
    let events: Vec<Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect();
    if events.is_empty() {
        vec![reply.json()]
    } else {
        events
    }
}

/// The response among `messages` (not a notification or a request).
fn response(messages: &[Value]) -> Value {
    messages
        .iter()
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
        .cloned()
        .unwrap_or_else(|| panic!("no response among {messages:?}"))
}

/// One 2026-07-28 call with no capabilities: its `CallToolResult`.
async fn call(up: &Up, token: &str, tool: &str, arguments: Value) -> Value {
    let message = tool_call(
        Era::Modern,
        1,
        tool,
        arguments,
        json!({}),
        json!({}),
        json!({}),
    );
    response(&post(up, token, Era::Modern, &message).await)["result"].clone()
}

/// The structured content of a successful result.
fn ok(result: &Value) -> Value {
    assert_eq!(result["isError"], false, "{result}");
    result["structuredContent"].clone()
}

/// Each tool's `tools/list` entry, as `token` sees them.
async fn tools(up: &Up, token: &str) -> BTreeMap<String, Value> {
    let list = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "progress-test", "version": "1"},
    }}});
    let listed = response(&post(up, token, Era::Modern, &list).await);
    listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("tools/list: {listed}"))
        .iter()
        .map(|t| (t["name"].as_str().expect("a name").to_owned(), t.clone()))
        .collect()
}

/// Each tool's output schema validator, from `tools/list` as `token` sees it.
async fn output_schemas(up: &Up, token: &str) -> BTreeMap<String, jsonschema::Validator> {
    tools(up, token)
        .await
        .into_iter()
        .filter_map(|(name, t)| {
            let validator =
                jsonschema::validator_for(t.get("outputSchema")?).expect("an output schema");
            Some((name, validator))
        })
        .collect()
}

/// Assert `result` validates against `tool`'s output schema.
fn valid(schemas: &BTreeMap<String, jsonschema::Validator>, tool: &str, result: &Value) {
    let validator = schemas
        .get(tool)
        .unwrap_or_else(|| panic!("{tool} has no output schema"));
    let structured = &result["structuredContent"];
    let errors: Vec<String> = validator
        .iter_errors(structured)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{tool}: {errors:?} in {structured}");
}

/// Open a research session for `token` (optionally on a subject).
async fn open_session(up: &Up, token: &str, extra: Value) -> String {
    let mut arguments = json!({"prompt": "progress and confirmation tests"});
    if let (Value::Object(a), Value::Object(e)) = (&mut arguments, extra) {
        a.extend(e);
    }
    let opened = ok(&call(up, token, "session_context", arguments).await);
    opened["session_id"]
        .as_str()
        .expect("session id")
        .to_owned()
}

async fn propose(up: &Up, token: &str, universe: &[&str]) -> String {
    let strategy = ok(&call(
        up,
        token,
        "propose_strategy",
        json!({"name": "momentum", "universe": universe, "lookback": 60, "rebalance": 20, "risk": {"max_weight": 1.0}}),
    )
    .await);
    strategy["strategy_id"]
        .as_str()
        .expect("strategy id")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_run_reports_its_steps_then_the_run_in_both_eras() {
    let up = up();
    let schemas = output_schemas(&up, &up.agent).await;
    // run_skill's result is the run, as get_run's is: the same schema.
    let listed = tools(&up, &up.agent).await;
    assert_eq!(
        listed["run_skill"]["outputSchema"], listed["get_run"]["outputSchema"],
        "run_skill's output schema is Run's"
    );
    assert!(listed["run_skill"]["outputSchema"]["properties"]["status"].is_object());
    open_session(&up, &up.agent, json!({})).await;
    let universe = ["AAPL", "MSFT", "IBM"];
    let strategy_id = propose(&up, &up.agent, &universe).await;
    // Each symbol's prices, each symbol's backtest, the results.
    let steps = (2 * universe.len() + 1) as f64;

    for (id, era) in [(1, Era::Modern), (2, Era::Legacy)] {
        let token = format!("run-{id}");
        let message = tool_call(
            era,
            id,
            "run_skill",
            json!({"skill_id": "backtest.momentum", "inputs": {"strategy_id": strategy_id}}),
            json!({"progressToken": token}),
            json!({}),
            json!({}),
        );
        let started = std::time::Instant::now();
        let got = post(&up, &up.agent, era, &message).await;
        println!(
            "{era:?}: run_skill of a 3-symbol backtest answered in {:?}",
            started.elapsed()
        );
        let progress: Vec<&Value> = got
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        let values: Vec<f64> = progress
            .iter()
            .map(|p| p["params"]["progress"].as_f64().expect("a number"))
            .collect();
        let expected: Vec<f64> = (1..=steps as usize).map(|s| s as f64).collect();
        assert_eq!(values, expected, "{era:?}: every step, in order: {got:?}");
        for p in &progress {
            assert_eq!(p["params"]["progressToken"], token.as_str(), "{p}");
            assert_eq!(p["params"]["total"], steps, "{p}");
            assert!(
                p["params"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "{p}"
            );
        }
        // The run comes after its progress, and is the run it always was.
        let last = got.last().expect("messages");
        assert_eq!(last["id"], id, "the response comes last: {got:?}");
        let result = &last["result"];
        let run = ok(result);
        valid(&schemas, "run_skill", result);
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(run["skill_id"], "backtest.momentum");
        assert!(run["outputs"]["sharpe"].is_number(), "{run}");
        assert_eq!(run["artifacts"].as_array().map(Vec::len), Some(3), "{run}");
        assert!(
            run["artifacts"][0]["size"].is_u64(),
            "integers stay integers: {run}"
        );
        // The same run reads back the same.
        let read = ok(&call(&up, &up.agent, "get_run", json!({"run_id": run["run_id"]})).await);
        assert_eq!(read["outputs"], run["outputs"]);
        assert_eq!(read["status"], "succeeded");
    }

    // Without a progress token: no progress, the same kind of run.
    let message = tool_call(
        Era::Modern,
        3,
        "run_skill",
        json!({"skill_id": "backtest.momentum", "inputs": {"strategy_id": strategy_id}}),
        json!({}),
        json!({}),
        json!({}),
    );
    let got = post(&up, &up.agent, Era::Modern, &message).await;
    assert!(
        got.iter().all(|m| m["method"] != "notifications/progress"),
        "no token, no progress: {got:?}"
    );
    let result = response(&got)["result"].clone();
    valid(&schemas, "run_skill", &result);
    assert_eq!(ok(&result)["status"], "succeeded");

    // An interactive skill answers as before, with its single-symbol steps
    // unreported (it has none) and its schema intact.
    let result = call(
        &up,
        &up.agent,
        "run_skill",
        json!({"skill_id": "vol.realized", "inputs": {"symbol": "AAPL", "window": 21}}),
    )
    .await;
    valid(&schemas, "run_skill", &result);
    assert_eq!(ok(&result)["status"], "succeeded");

    // A single-symbol backtest has three steps.
    let message = tool_call(
        Era::Modern,
        4,
        "run_skill",
        json!({"skill_id": "backtest.momentum", "inputs": {"symbol": "AAPL", "lookback": 60, "rebalance": 20}}),
        json!({"progressToken": 44}),
        json!({}),
        json!({}),
    );
    let got = post(&up, &up.agent, Era::Modern, &message).await;
    let values: Vec<(f64, f64)> = got
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .map(|p| {
            assert_eq!(p["params"]["progressToken"], 44);
            (
                p["params"]["progress"].as_f64().expect("progress"),
                p["params"]["total"].as_f64().expect("total"),
            )
        })
        .collect();
    assert_eq!(values, [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)], "{got:?}");
    let result = response(&got)["result"].clone();
    valid(&schemas, "run_skill", &result);

    // Bad input is still a clear error, not a run.
    let result = call(
        &up,
        &up.agent,
        "run_skill",
        json!({"skill_id": "backtest.momentum", "inputs": {"lookback": "long"}}),
    )
    .await;
    assert_eq!(result["isError"], true, "{result}");
    let error = common::tool_error(&result);
    assert_eq!(error["error"], "INVALID_ARGUMENT", "{error}");
}

/// POST a legacy call with `token` and keep its response stream open;
/// answer the `elicitation/create` that appears on it (from another
/// connection) with `answer`; every message the stream carried, and the
/// elicitation asked.
async fn legacy_answered(up: &Up, token: &str, call: &Value, answer: Value) -> (Vec<Value>, Value) {
    let authority = up.url.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect");
    let body = call.to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n\
         Authorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    let mut asked = Value::Null;
    loop {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf))
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
        if asked.is_null()
            && let Some(request) = seen.iter().find(|m| m["method"] == "elicitation/create")
        {
            asked = request.clone();
            // An answer with a `code` is a JSON-RPC error.
            let reply = if answer.get("code").is_some() {
                json!({"jsonrpc": "2.0", "id": request["id"], "error": answer})
            } else {
                json!({"jsonrpc": "2.0", "id": request["id"], "result": answer})
            };
            let auth = format!("Bearer {token}");
            let posted = http::request(
                &up.url,
                "POST",
                "/mcp",
                &[
                    ("Authorization", &auth),
                    ("Content-Type", "application/json"),
                    ("Accept", "application/json, text/event-stream"),
                    ("MCP-Protocol-Version", "2025-11-25"),
                ],
                reply.to_string().as_bytes(),
            )
            .await;
            assert_eq!(posted.status, 202, "{}", posted.text());
        }
        if seen
            .iter()
            .any(|m| m.get("result").is_some() && m["id"] == call["id"])
        {
            return (seen, asked);
        }
    }
    panic!("the stream ended without the call's result: {text}");
}

fn accept() -> Value {
    json!({"action": "accept", "content": {"confirm": true}})
}

fn decline() -> Value {
    json!({"action": "decline"})
}

/// A tool result that says the person did not confirm, with `action`.
fn not_confirmed(result: &Value, tool: &str, action: &str) {
    let body = ok(result);
    assert_eq!(body["status"], "not_confirmed", "{body}");
    assert_eq!(body["tool"], tool, "{body}");
    assert_eq!(body["action"], action, "{body}");
}

/// Call `tool` as `token` in 2026-07-28 from a client that can elicit,
/// answering the confirmation with `answer`: the question's result, and
/// the final result.
async fn modern_confirmed(
    up: &Up,
    token: &str,
    tool: &str,
    arguments: Value,
    answer: Value,
) -> (Value, Value) {
    let elicits = json!({"elicitation": {}});
    let first = tool_call(
        Era::Modern,
        1,
        tool,
        arguments.clone(),
        json!({}),
        elicits.clone(),
        json!({}),
    );
    let asked = response(&post(up, token, Era::Modern, &first).await)["result"].clone();
    assert_eq!(asked["resultType"], "input_required", "{asked}");
    let question = &asked["inputRequests"]["confirm"];
    assert_eq!(question["method"], "elicitation/create", "{asked}");
    assert!(
        question["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains(tool)),
        "the question names the tool: {question}"
    );
    let state = asked["requestState"].as_str().expect("requestState");
    let retry = tool_call(
        Era::Modern,
        2,
        tool,
        arguments,
        json!({}),
        elicits,
        json!({"inputResponses": {"confirm": answer}, "requestState": state}),
    );
    let done = response(&post(up, token, Era::Modern, &retry).await)["result"].clone();
    (asked, done)
}

async fn strategy_status(up: &Up, token: &str, strategy_id: &str) -> String {
    let strategy = ok(&call(
        up,
        token,
        "get_strategy",
        json!({"strategy_id": strategy_id}),
    )
    .await);
    strategy["status"].as_str().expect("status").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_confirms_a_promotion_through_elicitation_in_both_eras() {
    let up = up();
    let status = common::ithaca()
        .args(["policy", "set", "--trading", "on", "--data-dir"])
        .arg(&up.data_dir)
        .status()
        .expect("ithaca policy set");
    assert!(status.success());
    let schemas = output_schemas(&up, &up.human).await;
    open_session(&up, &up.human, json!({})).await;
    let promote = |id: &str| json!({"strategy_id": id, "mode": "paper"});

    // 2026-07-28, declined: nothing changes, and the result says so.
    let strategy = propose(&up, &up.human, &["AAPL"]).await;
    let (_, done) = modern_confirmed(
        &up,
        &up.human,
        "promote_strategy",
        promote(&strategy),
        decline(),
    )
    .await;
    not_confirmed(&done, "promote_strategy", "decline");
    valid(&schemas, "promote_strategy", &done);
    assert_eq!(strategy_status(&up, &up.human, &strategy).await, "draft");
    // Cancelled, or accepted without ticking the box: the same.
    let (_, done) = modern_confirmed(
        &up,
        &up.human,
        "promote_strategy",
        promote(&strategy),
        json!({"action": "cancel"}),
    )
    .await;
    not_confirmed(&done, "promote_strategy", "cancel");
    let unticked = json!({"action": "accept", "content": {"confirm": false}});
    let (_, done) = modern_confirmed(
        &up,
        &up.human,
        "promote_strategy",
        promote(&strategy),
        unticked,
    )
    .await;
    not_confirmed(&done, "promote_strategy", "accept");
    assert_eq!(strategy_status(&up, &up.human, &strategy).await, "draft");

    // The answer confirms that call only: the same state with other
    // arguments is asked again, not run.
    let other = propose(&up, &up.human, &["MSFT"]).await;
    let elicits = json!({"elicitation": {}});
    let first = tool_call(
        Era::Modern,
        1,
        "promote_strategy",
        promote(&strategy),
        json!({}),
        elicits.clone(),
        json!({}),
    );
    let asked = response(&post(&up, &up.human, Era::Modern, &first).await)["result"].clone();
    let state = asked["requestState"].as_str().expect("requestState");
    let swapped = tool_call(
        Era::Modern,
        2,
        "promote_strategy",
        promote(&other),
        json!({}),
        elicits,
        json!({"inputResponses": {"confirm": accept()}, "requestState": state}),
    );
    let again = response(&post(&up, &up.human, Era::Modern, &swapped).await)["result"].clone();
    assert_eq!(again["resultType"], "input_required", "{again}");
    assert_eq!(strategy_status(&up, &up.human, &other).await, "draft");

    // Accepted: it runs, as the person's own call.
    let (_, done) = modern_confirmed(
        &up,
        &up.human,
        "promote_strategy",
        promote(&strategy),
        accept(),
    )
    .await;
    valid(&schemas, "promote_strategy", &done);
    assert_eq!(ok(&done)["status"], "paper", "{done}");
    assert_eq!(strategy_status(&up, &up.human, &strategy).await, "paper");

    // A client that declared no elicitation: today's flow, run at once.
    let plain = propose(&up, &up.human, &["IBM"]).await;
    let done = call(&up, &up.human, "promote_strategy", promote(&plain)).await;
    valid(&schemas, "promote_strategy", &done);
    assert_eq!(ok(&done)["status"], "paper", "{done}");

    // The legacy era: asked on the response stream.
    let legacy = propose(&up, &up.human, &["AAPL", "MSFT"]).await;
    let message = tool_call(
        Era::Legacy,
        7,
        "promote_strategy",
        promote(&legacy),
        json!({}),
        json!({}),
        json!({}),
    );
    let (seen, asked) = legacy_answered(&up, &up.human, &message, decline()).await;
    assert!(
        asked["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("promote_strategy")),
        "{asked}"
    );
    assert_eq!(
        asked["params"]["requestedSchema"]["properties"]["confirm"]["type"], "boolean",
        "{asked}"
    );
    let done = response(&seen)["result"].clone();
    not_confirmed(&done, "promote_strategy", "decline");
    valid(&schemas, "promote_strategy", &done);
    assert_eq!(strategy_status(&up, &up.human, &legacy).await, "draft");
    let message = tool_call(
        Era::Legacy,
        8,
        "promote_strategy",
        promote(&legacy),
        json!({}),
        json!({}),
        json!({}),
    );
    let (seen, _) = legacy_answered(&up, &up.human, &message, accept()).await;
    let done = response(&seen)["result"].clone();
    valid(&schemas, "promote_strategy", &done);
    assert_eq!(ok(&done)["status"], "paper", "{done}");

    // A legacy client that cannot elicit answers the question with an
    // error: the call goes the way it went before, run at once.
    let unasked = propose(&up, &up.human, &["MSFT", "IBM"]).await;
    let message = tool_call(
        Era::Legacy,
        10,
        "promote_strategy",
        promote(&unasked),
        json!({}),
        json!({}),
        json!({}),
    );
    let refusal = json!({"code": -32601, "message": "Method not found"});
    let (seen, asked) = legacy_answered(&up, &up.human, &message, refusal).await;
    assert!(asked.is_object(), "asked first");
    let done = response(&seen)["result"].clone();
    valid(&schemas, "promote_strategy", &done);
    assert_eq!(ok(&done)["status"], "paper", "{done}");

    // An agent, even from a client that can elicit: a pending approval,
    // as before; the person decides it.
    open_session(&up, &up.agent, json!({})).await;
    let agents = propose(&up, &up.agent, &["IBM", "MSFT"]).await;
    let agent_schemas = output_schemas(&up, &up.agent).await;
    let message = tool_call(
        Era::Modern,
        9,
        "promote_strategy",
        promote(&agents),
        json!({}),
        json!({"elicitation": {}}),
        json!({}),
    );
    let got = response(&post(&up, &up.agent, Era::Modern, &message).await)["result"].clone();
    valid(&agent_schemas, "promote_strategy", &got);
    assert_eq!(ok(&got)["status"], "pending_approval", "{got}");
    assert_eq!(strategy_status(&up, &up.agent, &agents).await, "draft");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_confirms_a_filter_activation_through_elicitation_in_both_eras() {
    let up = up();
    up.ingest("ztf", &[common::astro::alerts_dir().join("v4.02")]);
    let human = up.human.clone();
    open_session(&up, &human, json!({})).await;
    let schemas = output_schemas(&up, &human).await;
    let targets = ok(&call(&up, &human, "get_filter_targets", json!({})).await);
    let group = targets["groups"][0]["group_id"].clone();
    let filter = ok(&call(
        &up,
        &human,
        "post_filter",
        json!({"name": "bright", "group_id": group, "stream_id": "ztf-public"}),
    )
    .await);
    let filter_id = filter["filter_id"].as_str().expect("filter_id").to_owned();
    open_session(
        &up,
        &human,
        json!({"subject_kind": "filter", "subject_id": filter_id}),
    )
    .await;
    // Schemas as listed in the filter's session (subject-scoped tools).
    let schemas = {
        let mut all = schemas;
        all.extend(output_schemas(&up, &human).await);
        all
    };
    let pipeline = json!([{"$match": {"candidate.magpsf": {"$lt": 18.5}}}]);
    ok(&call(
        &up,
        &human,
        "run_broker_filter",
        json!({"filter_id": filter_id, "pipeline": pipeline}),
    )
    .await);
    let verdict = ok(&call(
        &up,
        &human,
        "post_broker_filter_version",
        json!({"filter_id": filter_id, "pipeline": pipeline}),
    )
    .await);
    assert_eq!(verdict["passed"], true, "{verdict}");
    let version = verdict["version"].as_i64().expect("version");
    let activate = json!({"filter_id": filter_id, "version": version});
    let active = |filter: &Value| filter["active_version"].clone();
    let before = active(&ok(&call(
        &up,
        &human,
        "get_broker_filter",
        json!({"filter_id": filter_id}),
    )
    .await));

    // 2026-07-28, declined: the version stays inactive.
    let (_, done) = modern_confirmed(
        &up,
        &human,
        "activate_broker_filter_version",
        activate.clone(),
        decline(),
    )
    .await;
    not_confirmed(&done, "activate_broker_filter_version", "decline");
    valid(&schemas, "activate_broker_filter_version", &done);
    let now = ok(&call(
        &up,
        &human,
        "get_broker_filter",
        json!({"filter_id": filter_id}),
    )
    .await);
    assert_eq!(active(&now), before, "{now}");

    // Legacy, declined then accepted.
    let message = tool_call(
        Era::Legacy,
        5,
        "activate_broker_filter_version",
        activate.clone(),
        json!({}),
        json!({}),
        json!({}),
    );
    let (seen, _) = legacy_answered(&up, &human, &message, decline()).await;
    let done = response(&seen)["result"].clone();
    not_confirmed(&done, "activate_broker_filter_version", "decline");
    let now = ok(&call(
        &up,
        &human,
        "get_broker_filter",
        json!({"filter_id": filter_id}),
    )
    .await);
    assert_eq!(active(&now), before, "{now}");
    let message = tool_call(
        Era::Legacy,
        6,
        "activate_broker_filter_version",
        activate.clone(),
        json!({}),
        json!({}),
        json!({}),
    );
    let (seen, _) = legacy_answered(&up, &human, &message, accept()).await;
    let done = response(&seen)["result"].clone();
    valid(&schemas, "activate_broker_filter_version", &done);
    ok(&done);
    let now = ok(&call(
        &up,
        &human,
        "get_broker_filter",
        json!({"filter_id": filter_id}),
    )
    .await);
    assert_eq!(active(&now), json!(version), "{now}");
}

/// The `(done, total)` packet counts `ithaca ingest` printed for `name`,
/// in order (stderr is not a terminal: one line per report).
fn packets(stderr: &str, name: &str) -> Vec<(u64, u64)> {
    let marker = format!(" {name}: ");
    stderr
        .lines()
        .filter_map(|l| l.split_once(&marker))
        .filter_map(|(_, rest)| rest.strip_suffix(" packets"))
        .filter_map(|counts| counts.split_once('/'))
        .map(|(d, t)| (d.parse().expect("done"), t.parse().expect("total")))
        .collect()
}

/// GCN files under `dir`, walked.
fn gcn_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            found.extend(gcn_files(&path));
        } else if path
            .extension()
            .is_some_and(|x| x == "json" || x == "jsonl" || x == "xml")
        {
            found.push(path);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gcn_ingestion_streams_packets_done_of_total() {
    let up = up();
    let circulars = common::gcn::circulars_file();
    let name = circulars
        .file_name()
        .expect("a name")
        .to_string_lossy()
        .into_owned();
    let lines = std::fs::read_to_string(&circulars).expect("circulars");
    let total = lines.lines().filter(|l| !l.trim().is_empty()).count() as u64;
    let notices = gcn_files(&common::gcn::notices_dir());
    let ingest = || {
        let out = common::ithaca()
            .args(["ingest", "gcn"])
            .arg(&circulars)
            .arg(common::gcn::notices_dir())
            .arg("--data-dir")
            .arg(&up.data_dir)
            .output()
            .expect("run ithaca ingest gcn");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "ingest gcn: {stderr}");
        stderr
    };
    let stderr = ingest();
    // Every 100 circulars, then the end, from the broker as it stores them.
    let mut expected: Vec<(u64, u64)> = (1..=total / 100).map(|k| (k * 100, total)).collect();
    if !total.is_multiple_of(100) {
        expected.push((total, total));
    }
    assert_eq!(packets(&stderr, &name), expected, "{stderr}");
    // Each notice is one packet.
    assert!(!notices.is_empty());
    for notice in &notices {
        let file = notice.file_name().expect("name").to_string_lossy();
        assert_eq!(packets(&stderr, &file), [(1, 1)], "{file}: {stderr}");
    }
    // Again: nothing changes, and the file reports all of it done at once.
    let stderr = ingest();
    assert_eq!(packets(&stderr, &name), [(total, total)], "{stderr}");
    println!(
        "{total} circulars and {} notices ingested with progress",
        notices.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_ingestion_streams_packets_done_of_total() {
    let up = up();
    let night = common::astro::alerts_dir().join("v4.02");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&night)
        .expect("the night's alerts")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "avro"))
        .collect();
    files.sort();
    assert!(!files.is_empty());
    let ingest = || {
        let out = common::ithaca()
            .args(["ingest", "ztf"])
            .arg(&night)
            .arg("--data-dir")
            .arg(&up.data_dir)
            .output()
            .expect("run ithaca ingest ztf");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "ingest ztf: {stderr}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
    };
    let (stdout, stderr) = ingest();
    // Each file reports its alerts written, increasing to its total (every
    // 200 alerts and at the end), from the broker as it writes them.
    let mut alerts = 0;
    for file in &files {
        let name = file.file_name().expect("name").to_string_lossy();
        let seen = packets(&stderr, &name);
        let (last, total) = *seen
            .last()
            .unwrap_or_else(|| panic!("{name}: no progress in {stderr}"));
        assert!(total >= 1 && last == total, "{name}: {seen:?}");
        assert!(
            seen.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 == w[1].1),
            "{name}: {seen:?}"
        );
        alerts += total;
    }
    // The totals add up to what the command says it read.
    assert!(
        stdout.contains(&format!("{} files: {alerts} alerts read", files.len())),
        "{stdout}"
    );
    // Again: nothing changes; each file reports all of it done at once.
    let (_, stderr) = ingest();
    for file in &files {
        let name = file.file_name().expect("name").to_string_lossy();
        let seen = packets(&stderr, &name);
        assert_eq!(seen.len(), 1, "{name}: {seen:?}");
        assert_eq!(seen[0].0, seen[0].1, "{name}: {seen:?}");
    }
    println!(
        "{} alert files, {alerts} alerts ingested with progress",
        files.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bars_ingestion_streams_rows_written_of_total() {
    let up = up();
    // Three made-up tickers, 400 days each: 1200 rows, three insert
    // batches of at most 500.
    let mut csv = String::from("Ticker,Date,Open,High,Low,Close,Volume,Adj Close\n");
    // Days 1 to 28 of each month of 2014 and 2015: distinct, valid dates.
    let dates: Vec<String> = (2014..=2015)
        .flat_map(|y| {
            (1..=12).flat_map(move |m| (1..=28).map(move |d| format!("{y}-{m:02}-{d:02}")))
        })
        .take(400)
        .collect();
    for symbol in ["ZZA", "ZZB", "ZZC"] {
        for (day, date) in dates.iter().enumerate() {
            let price = 100.0 + day as f64 / 10.0;
            csv.push_str(&format!(
                "{symbol},{date},{price},{},{},{price},1000,{price}\n",
                price + 1.0,
                price - 1.0
            ));
        }
    }
    let file = up.dir.path().join("bars.csv");
    std::fs::write(&file, &csv).expect("write the bars");
    let ingest = || {
        let out = common::ithaca()
            .args(["ingest", "bars"])
            .arg(&file)
            .arg("--data-dir")
            .arg(&up.data_dir)
            .output()
            .expect("run ithaca ingest bars");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "ingest bars: {stderr}");
        stderr
    };
    let written = |stderr: &str| -> Vec<(u64, u64)> {
        stderr
            .lines()
            .filter_map(|l| l.strip_prefix("ingest: "))
            .filter_map(|l| l.split_once(" rows written"))
            .filter_map(|(counts, _)| counts.split_once('/'))
            .map(|(d, t)| (d.parse().expect("done"), t.parse().expect("total")))
            .collect()
    };
    let stderr = ingest();
    assert_eq!(
        written(&stderr),
        [(500, 1200), (1000, 1200), (1200, 1200)],
        "{stderr}"
    );
    // The rows are there: an agent reads them back.
    open_session(&up, &up.agent, json!({})).await;
    let history = ok(&call(
        &up,
        &up.agent,
        "get_price_history",
        json!({"symbol": "ZZB", "fields": ["adj_close"]}),
    )
    .await);
    assert!(history.to_string().contains("139.9"), "{history}");
    // Again: already there, all of it at once.
    let stderr = ingest();
    assert_eq!(written(&stderr), [(1200, 1200)], "{stderr}");
}

/// Sources stored of total in `ithaca ingest catalog`'s stderr for `name`.
fn sources(stderr: &str, name: &str) -> Vec<(u64, u64)> {
    let marker = format!(" {name}: ");
    stderr
        .lines()
        .filter_map(|l| l.split_once(&marker))
        .filter_map(|(_, rest)| rest.strip_suffix(" sources"))
        .filter_map(|counts| counts.split_once('/'))
        .map(|(d, t)| (d.parse().expect("done"), t.parse().expect("total")))
        .collect()
}

/// What `IngestCatalogWithProgress` streamed for one file: its progress
/// (done, total, message) in order, then its reply, or the status that
/// ended it. Anything after the reply fails the test.
async fn catalog_events(
    broker: &mut ithaca_proto::broker::v1::catalog_service_client::CatalogServiceClient<
        tonic::service::interceptor::InterceptedService<
            tonic::transport::Channel,
            ithaca_kit::client::Outbound,
        >,
    >,
    source: &str,
    data: Vec<u8>,
) -> (
    Vec<(u64, u64, String)>,
    Result<ithaca_proto::broker::v1::CatalogIngestReport, tonic::Status>,
) {
    use ithaca_proto::mcp::v1::call_event::Event;
    // Two chunks, as a client streaming a large file sends them.
    let half = data.len() / 2;
    let chunks = vec![
        ithaca_proto::broker::v1::CatalogFileChunk {
            source: source.to_owned(),
            data: data[..half].to_vec(),
        },
        ithaca_proto::broker::v1::CatalogFileChunk {
            source: String::new(),
            data: data[half..].to_vec(),
        },
    ];
    let mut events = match broker
        .ingest_catalog_with_progress(tokio_stream::iter(chunks))
        .await
    {
        Ok(r) => r.into_inner(),
        Err(status) => return (Vec::new(), Err(status)),
    };
    let mut progress = Vec::new();
    loop {
        match events.message().await {
            Ok(Some(event)) => match event.event {
                Some(Event::Progress(p)) => progress.push((
                    p.progress as u64,
                    p.total.expect("a total") as u64,
                    p.message,
                )),
                Some(Event::Reply(reply)) => {
                    let report = prost::Message::decode(reply.as_slice()).expect("the report");
                    let after = events.message().await.expect("the stream's end");
                    assert!(after.is_none(), "an event after the reply: {after:?}");
                    return (progress, Ok(report));
                }
                other => panic!("an unexpected event: {other:?}"),
            },
            Ok(None) => panic!("the stream ended without a reply after {progress:?}"),
            Err(status) => return (progress, Err(status)),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_ingestion_streams_sources_stored_of_total() {
    use ithaca_kit::client::{self, Outbound};
    use ithaca_kit::principal::{Principal, VerifiedKey};
    use ithaca_proto::broker::v1::catalog_service_client::CatalogServiceClient;
    let dir = tempfile::tempdir().expect("tempdir");
    let (_broker, url) = common::serve("broker", &common::sqlite_path(&dir, "broker"), "unused");
    let client = |who: Principal| {
        CatalogServiceClient::with_interceptor(
            client::channel(&url).expect("url"),
            Outbound::new(common::key(), who),
        )
    };
    let mut admin = client(Principal::system(""));
    let catalogs = common::astro::data().join("catalogs");
    // Every line but the header is one source; the broker writes 200 per
    // batch and reports after each, the last one at the total.
    let expected = |csv: &str| -> Vec<(u64, u64)> {
        let total = csv.lines().filter(|l| !l.trim().is_empty()).count() as u64 - 1;
        let mut steps: Vec<(u64, u64)> = (1..=total / 200).map(|k| (k * 200, total)).collect();
        if !total.is_multiple_of(200) {
            steps.push((total, total));
        }
        steps
    };

    // Over gRPC: progress in order up to the total, then the report, then
    // nothing.
    let name = "hipparcos2_hp_le_6.0.csv";
    let csv = std::fs::read_to_string(catalogs.join(name)).expect("the Hipparcos catalog");
    let steps = expected(&csv);
    let total = steps.last().expect("a source").1;
    let (progress, report) = catalog_events(&mut admin, name, csv.clone().into_bytes()).await;
    let report = report.expect("the report");
    assert_eq!(
        progress
            .iter()
            .map(|(d, t, _)| (*d, *t))
            .collect::<Vec<_>>(),
        steps
    );
    assert_eq!(
        progress.last().map(|(_, _, m)| m.as_str()),
        Some(format!("{total} of {total} sources").as_str())
    );
    assert_eq!(
        (
            report.catalog.as_str(),
            report.source.as_str(),
            i64::from(report.rows),
            report.already_present
        ),
        ("hipparcos2", name, total as i64, false),
        "{report:?}"
    );
    // Again: nothing changes; all of it at once, then the report saying so.
    let (progress, again) = catalog_events(&mut admin, name, csv.into_bytes()).await;
    let again = again.expect("the report");
    assert_eq!(
        progress,
        [(total, total, format!("{total} of {total} sources"))]
    );
    assert!(again.already_present, "{again:?}");
    assert_eq!(again.checksum, report.checksum);

    // A refusal is the stream's status, before any progress: a file that
    // is no catalog (named), and a caller who is no administrator.
    let (progress, refused) = catalog_events(&mut admin, "notes.csv", b"a,b\n1,2\n".to_vec()).await;
    let status = refused.expect_err("not a catalog");
    assert!(progress.is_empty(), "{progress:?}");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("notes.csv"), "{status:?}");
    let mut agent = client(Principal::verified(VerifiedKey {
        tenant_id: "acme".to_owned(),
        key_id: "acme-agent".to_owned(),
        scopes: vec!["data:read".into()],
        human: false,
    }));
    let name = "openngc_galaxies_z_le_0.01.csv";
    let csv = std::fs::read_to_string(catalogs.join(name)).expect("the OpenNGC catalog");
    let (progress, refused) = catalog_events(&mut agent, name, csv.clone().into_bytes()).await;
    let status = refused.expect_err("an agent");
    assert!(progress.is_empty(), "{progress:?}");
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");

    // From the command line: `name: done/total sources` on stderr, as the
    // broker stores them, then the report on stdout.
    let ingest = || {
        let out = common::ithaca()
            .args(["ingest", "catalog"])
            .arg(catalogs.join(name))
            .args(["--broker-url", &url])
            .output()
            .expect("run ithaca ingest catalog");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "ingest catalog: {stderr}");
        (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
    };
    let steps = expected(&csv);
    let total = steps.last().expect("a source").1;
    let (stdout, stderr) = ingest();
    assert_eq!(sources(&stderr, name), steps, "{stderr}");
    assert!(
        stdout.contains(&format!("{name}: {total} openngc sources")),
        "{stdout}"
    );
    let (stdout, stderr) = ingest();
    assert_eq!(sources(&stderr, name), [(total, total)], "{stderr}");
    assert!(stdout.contains("already ingested"), "{stdout}");
    println!("catalogs ingested with progress: hipparcos2 and {total} openngc sources");
}
