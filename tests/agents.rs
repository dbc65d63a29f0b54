//! What real agents see, through `ithaca up` as a client reaches it: every
//! result of every tool validates against the tool's output schema (errors
//! included, checked with a JSON Schema validator), integers are integers,
//! older protocol revisions connect and get answers shaped for them, every
//! URI handed out can be read back, and the protocol answers a probe.

mod common;

use common::http::{self, Reply};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

struct Up {
    url: String,
    agent: String,
    human: String,
    _process: common::Process,
    _dir: tempfile::TempDir,
}

/// `ithaca up` on free ports in a fresh data directory.
fn up(env: &[(&str, &str)]) -> Up {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cmd = common::ithaca();
    cmd.args(["up", "--port-base", "0", "--data-dir"])
        .arg(dir.path().join("stack"))
        .env_remove("DOOMBERG_MCP_PORT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let process = common::Process::spawn(cmd);
    let lines = process.wait_for("ithaca: ready", Duration::from_secs(90));
    let after = |label: &str| -> String {
        lines
            .iter()
            .find_map(|l| l.trim().strip_prefix(label).map(|v| v.trim().to_owned()))
            .unwrap_or_else(|| panic!("no {label:?} line in {lines:#?}"))
    };
    let mcp = after("mcp ");
    Up {
        url: mcp.trim_end_matches("/mcp").to_owned(),
        agent: after("agent key"),
        human: after("human key"),
        _process: process,
        _dir: dir,
    }
}

fn meta() -> Value {
    http::modern_meta()
}

/// A 2026-07-28 request; the whole JSON-RPC reply.
async fn modern(up: &Up, token: &str, method: &str, params: Value) -> Reply {
    http::modern(&up.url, token, method, params).await
}

/// A request of the `initialize` profile, with `version` in the header (or
/// none, as clients of 2025-03-26 and older send).
async fn legacy(up: &Up, version: Option<&str>, method: &str, params: Value) -> Reply {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let auth = format!("Bearer {}", up.agent);
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
    ];
    if let Some(v) = version {
        headers.push(("MCP-Protocol-Version", v));
    }
    http::request(
        &up.url,
        "POST",
        "/mcp",
        &headers,
        body.to_string().as_bytes(),
    )
    .await
}

async fn raw(up: &Up, headers: &[(&str, &str)], body: &str) -> Reply {
    let auth = format!("Bearer {}", up.agent);
    let mut all = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    all.extend_from_slice(headers);
    http::request(&up.url, "POST", "/mcp", &all, body.as_bytes()).await
}

/// Checks every tool result against the tool's output schema and records
/// which tools were exercised.
struct SchemaPass {
    validators: BTreeMap<String, jsonschema::Validator>,
    tools: BTreeMap<String, Value>,
    called: BTreeSet<String>,
    results: usize,
}

impl SchemaPass {
    fn new(tools: &[Value]) -> Self {
        let mut validators = BTreeMap::new();
        let mut by_name = BTreeMap::new();
        for tool in tools {
            let name = tool["name"].as_str().expect("tool name").to_owned();
            if let Some(schema) = tool.get("outputSchema") {
                let validator = jsonschema::validator_for(schema)
                    .unwrap_or_else(|e| panic!("{name}: the output schema is no JSON Schema: {e}"));
                validators.insert(name.clone(), validator);
            }
            jsonschema::validator_for(&tool["inputSchema"])
                .unwrap_or_else(|e| panic!("{name}: the input schema is no JSON Schema: {e}"));
            by_name.insert(name, tool.clone());
        }
        SchemaPass {
            validators,
            tools: by_name,
            called: BTreeSet::new(),
            results: 0,
        }
    }

    /// Call `tool` and check its result; returns the result.
    async fn call(&mut self, up: &Up, token: &str, tool: &str, args: Value) -> Value {
        let reply = modern(
            up,
            token,
            "tools/call",
            json!({"name": tool, "arguments": args}),
        )
        .await;
        assert_eq!(reply.status, 200, "{tool}: {}", reply.text());
        let result = reply.json()["result"].clone();
        assert!(result.is_object(), "{tool}: no result: {}", reply.text());
        self.check(tool, &result);
        result
    }

    fn check(&mut self, tool: &str, result: &Value) {
        self.called.insert(tool.to_owned());
        self.results += 1;
        if result["isError"] == true {
            // The error body travels as text; no structured content that
            // the output schema would refuse.
            let error = common::tool_error(result);
            assert!(
                error["error"].is_string() && error["message"].is_string(),
                "{tool}: {error}"
            );
            return;
        }
        let Some(validator) = self.validators.get(tool) else {
            return;
        };
        let structured = result.get("structuredContent").unwrap_or_else(|| {
            panic!("{tool}: has an output schema but no structuredContent: {result}")
        });
        let problems: Vec<String> = validator
            .iter_errors(structured)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            problems.is_empty(),
            "{tool}: structuredContent does not match the output schema:\n{}\n{structured:#}",
            problems.join("\n")
        );
    }

    /// The JSON of a successful call.
    async fn ok(&mut self, up: &Up, token: &str, tool: &str, args: Value) -> Value {
        let result = self.call(up, token, tool, args).await;
        assert_eq!(result["isError"], false, "{tool}: {result}");
        result["structuredContent"].clone()
    }

    /// The error body of a failed call.
    async fn err(&mut self, up: &Up, token: &str, tool: &str, args: Value) -> Value {
        let result = self.call(up, token, tool, args).await;
        common::tool_error(&result)
    }
}

async fn tools_of(up: &Up, token: &str) -> Vec<Value> {
    let reply = modern(up, token, "tools/list", json!({})).await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["result"]["tools"]
        .as_array()
        .expect("tools")
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_tool_result_validates_against_its_output_schema() {
    // A backend deadline shorter than subscribe_run's wait below: the tool's
    // own deadline must cover its long poll.
    let up = up(&[("ITHACA_BACKEND_TIMEOUT_MS", "3000")]);
    let mut tools = tools_of(&up, &up.agent).await;
    let agent_tools: BTreeSet<String> = tools
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect();
    for t in tools_of(&up, &up.human).await {
        if !tools.iter().any(|a| a["name"] == t["name"]) {
            tools.push(t);
        }
    }
    let mut pass = SchemaPass::new(&tools);

    // Schemas an agent can rely on: every argument is described, integer
    // bounds mean something, annotations say what a tool does.
    for tool in &tools {
        let name = tool["name"].as_str().unwrap_or_default();
        for (arg, schema) in tool["inputSchema"]["properties"]
            .as_object()
            .into_iter()
            .flatten()
        {
            assert!(
                schema["description"]
                    .as_str()
                    .is_some_and(|d| !d.is_empty()),
                "{name}.{arg} has no description"
            );
            assert_ne!(
                schema["minimum"],
                json!(i32::MIN),
                "{name}.{arg}: int32 bound leaked"
            );
        }
        let text = tool.to_string();
        assert!(
            !text.contains(".0,") && !text.contains(".0}"),
            "{name}: a float where an integer belongs: {text}"
        );
    }
    let promote = &pass.tools["promote_strategy"];
    assert_eq!(promote["annotations"]["openWorldHint"], true);
    assert_eq!(promote["annotations"]["destructiveHint"], true);

    // Before session_context every gated tool refuses, with an error that
    // validates (the Node SDK 1.x checks structured content even then).
    let names: Vec<String> = pass.tools.keys().cloned().collect();
    for name in &names {
        if name == "session_context" {
            continue;
        }
        let token = if agent_tools.contains(name) {
            up.agent.clone()
        } else {
            up.human.clone()
        };
        let result = pass.call(&up, &token, name, json!({})).await;
        assert_eq!(
            result["isError"], true,
            "{name} ran without a session: {result}"
        );
    }
    let error = pass.err(&up, &up.agent, "list_symbols", json!({})).await;
    assert_eq!(error["error"], "no_active_session");

    let opened = pass
        .ok(
            &up,
            &up.agent,
            "session_context",
            json!({"prompt": "schema pass"}),
        )
        .await;
    assert!(
        opened["trace_resource"]
            .as_str()
            .is_some_and(|r| r.starts_with("doomberg://sessions/"))
    );

    // Data: integers are JSON integers, consistently.
    let symbols = pass.ok(&up, &up.agent, "list_symbols", json!({})).await;
    let first = &symbols["symbols"][0];
    assert!(first["bars"].is_i64(), "bars is an integer: {first}");
    let datasets = pass.ok(&up, &up.agent, "list_datasets", json!({})).await;
    assert!(datasets["datasets"][0]["row_count"].is_i64(), "{datasets}");
    let prices = pass
        .ok(
            &up,
            &up.agent,
            "get_price_history",
            json!({"symbol": "MSFT", "start": "2013-01-02", "fields": ["adj_close", "volume"]}),
        )
        .await;
    assert!(prices.to_string().contains("volume"), "{prices}");
    pass.err(
        &up,
        &up.agent,
        "get_price_history",
        json!({"symbol": "NOPE"}),
    )
    .await;
    let error = pass
        .err(&up, &up.agent, "list_symbols", json!({"x": 1}))
        .await;
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("takes no arguments")),
        "an unknown argument of a tool without arguments says so: {error}"
    );

    // Skills: search, describe, a run, its artifact, its URI read back.
    pass.ok(
        &up,
        &up.agent,
        "search_skills",
        json!({"query": "volatility"}),
    )
    .await;
    let described = pass
        .ok(
            &up,
            &up.agent,
            "describe_skill",
            json!({"skill_id": "vol.realized"}),
        )
        .await;
    let text = described.to_string();
    assert!(
        !text.contains(".0,") && !text.contains(".0}"),
        "whole numbers are integers: {text}"
    );
    let run = pass
        .ok(
            &up,
            &up.agent,
            "run_skill",
            json!({"skill_id": "vol.realized", "inputs": {"symbol": "AAPL", "window": 21}}),
        )
        .await;
    let run_id = run["run_id"].as_str().expect("run id").to_owned();
    pass.ok(&up, &up.agent, "get_run", json!({"run_id": run_id}))
        .await;
    // The long poll outlives the 3 s backend deadline.
    let waited = pass
        .ok(
            &up,
            &up.agent,
            "subscribe_run",
            json!({"run_id": run_id, "status": run["status"], "wait_ms": 4000}),
        )
        .await;
    assert_eq!(waited["run_id"], run_id.as_str());
    pass.err(&up, &up.agent, "cancel_run", json!({"run_id": run_id}))
        .await;
    let artifact_id = run["artifacts"][0]["artifact_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the run has an artifact: {run}"))
        .to_owned();
    let artifact = pass
        .call(
            &up,
            &up.agent,
            "get_artifact",
            json!({"artifact_id": artifact_id}),
        )
        .await;
    assert_eq!(artifact["isError"], false, "{artifact}");
    let uri = artifact["content"][0]["resource"]["uri"]
        .as_str()
        .expect("embedded uri");
    let read = modern(&up, &up.agent, "resources/read", json!({"uri": uri})).await;
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(
        read.json()["result"]["contents"][0]["uri"],
        uri,
        "{}",
        read.text()
    );
    let wrong_run = uri.replace(&run_id, "00000000-0000-4000-8000-000000000000");
    let read = modern(&up, &up.agent, "resources/read", json!({"uri": wrong_run})).await;
    assert!(
        read.json()["error"].is_object(),
        "an artifact under another run is not found: {}",
        read.text()
    );

    // Strategies and the money path.
    let strategy = pass
        .ok(
            &up,
            &up.agent,
            "propose_strategy",
            json!({"name": "m", "universe": ["MSFT"], "lookback": 126, "rebalance": 21}),
        )
        .await;
    pass.ok(
        &up,
        &up.agent,
        "get_strategy",
        json!({"strategy_id": strategy["strategy_id"]}),
    )
    .await;
    let refused = pass
        .err(
            &up,
            &up.agent,
            "promote_strategy",
            json!({"strategy_id": strategy["strategy_id"], "mode": "paper"}),
        )
        .await;
    assert_eq!(refused["error"], "TRADING_DISABLED", "{refused}");
    pass.ok(&up, &up.agent, "list_approvals", json!({})).await;
    pass.err(
        &up,
        &up.agent,
        "get_approval",
        json!({"approval_id": "not-an-id"}),
    )
    .await;
    // Skills: every skill with every optional input omitted answers
    // (the batch skill queues), none leaves a run stuck.
    for skill in [
        "vol.realized",
        "returns.summary",
        "corr.peers",
        "vol.term_structure",
    ] {
        let result = pass
            .call(
                &up,
                &up.agent,
                "run_skill",
                json!({"skill_id": skill, "inputs": {"symbol": "AAPL"}}),
            )
            .await;
        if result["isError"] == true {
            let error = common::tool_error(&result);
            assert_ne!(
                error["error"], "INTERNAL",
                "{skill} failed inside the service: {error}"
            );
        }
    }

    // Astronomy: the archive is empty in a fresh stack, so these exercise
    // the empty answers and the refusals; tests/astro_edge.rs has the data.
    pass.ok(&up, &up.agent, "list_brokers", json!({})).await;
    pass.err(
        &up,
        &up.agent,
        "get_broker_alerts",
        json!({"broker_id": "ztf-archive", "objectId": "ZTF00nothere"}),
    )
    .await;
    pass.call(
        &up,
        &up.agent,
        "get_broker_alerts",
        json!({"broker_id": "ztf-archive", "ra": 197.45, "dec": -23.38, "radius_arcsec": 5}),
    )
    .await;
    pass.err(
        &up,
        &up.agent,
        "get_broker_alerts",
        json!({"broker_id": "ztf-archive", "ra": 197.45, "dec": -23.38, "radius_arcsec": -1}),
    )
    .await;
    pass.err(
        &up,
        &up.agent,
        "get_broker_alert_photometry",
        json!({"broker_id": "ztf-archive", "objectId": "ZTF00nothere"}),
    )
    .await;
    pass.call(
        &up,
        &up.agent,
        "crossmatch_broker_catalogs",
        json!({"broker_id": "ztf-archive", "ra": 197.45, "dec": -23.38, "radius_arcsec": 60}),
    )
    .await;
    pass.ok(
        &up,
        &up.agent,
        "convert_time",
        json!({"value": "2017-08-17T12:41:04Z"}),
    )
    .await;
    pass.err(
        &up,
        &up.agent,
        "convert_time",
        json!({"value": "yesterday-ish"}),
    )
    .await;
    pass.call(
        &up,
        &up.agent,
        "get_alert_schema",
        json!({"search": "magpsf"}),
    )
    .await;

    // GCN events: the Fermi/SVOM burst loaded with `ithaca ingest gcn`
    // into this stack, its URI read back. (post_gcn_event_comment is
    // subject-scoped, so the edge does not list it in these sessions.)
    let stack_dir = up._dir.path().join("stack");
    let ingest = common::ithaca()
        .args(["ingest", "gcn"])
        .arg(common::gcn::fermi_svom_dir())
        .arg("--data-dir")
        .arg(&stack_dir)
        .output()
        .expect("run ithaca ingest gcn");
    assert!(
        ingest.status.success(),
        "{}",
        String::from_utf8_lossy(&ingest.stderr)
    );
    let events = pass
        .ok(
            &up,
            &up.agent,
            "get_gcn_events",
            json!({"partialdateobs": "svom sb2604", "limit": 5}),
        )
        .await;
    assert_eq!(events["total"], 1, "{events}");
    assert!(events["events"][0]["notices"].is_i64(), "{events}");
    let dateobs = events["events"][0]["dateobs"]
        .as_str()
        .expect("dateobs")
        .to_owned();
    let uri = events["events"][0]["uri"].as_str().expect("uri").to_owned();
    pass.ok(&up, &up.agent, "get_gcn_events", json!({})).await;
    pass.err(&up, &up.agent, "get_gcn_events", json!({"limit": 0}))
        .await;
    let event = pass
        .ok(
            &up,
            &up.agent,
            "get_gcn_event",
            json!({"dateobs": "Fermi 798437606", "include_bodies": false}),
        )
        .await;
    assert_eq!(event["dateobs"], dateobs.as_str());
    assert_eq!(event["localisations"][0]["best"], true, "{event}");
    let read = modern(&up, &up.agent, "resources/read", json!({"uri": uri})).await;
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(
        read.json()["result"]["contents"][0]["uri"],
        uri.as_str(),
        "{}",
        read.text()
    );
    pass.err(
        &up,
        &up.agent,
        "get_gcn_event",
        json!({"dateobs": "GRB 990101A"}),
    )
    .await;
    pass.ok(
        &up,
        &up.agent,
        "get_gcn_event_extractions",
        json!({"dateobs": dateobs, "origin": "ithaca-circular-parser"}),
    )
    .await;
    pass.err(
        &up,
        &up.agent,
        "get_gcn_event_extractions",
        json!({"dateobs": ""}),
    )
    .await;
    pass.ok(
        &up,
        &up.agent,
        "get_gcn_event_comments",
        json!({"dateobs": dateobs}),
    )
    .await;
    pass.err(
        &up,
        &up.agent,
        "get_gcn_event_comments",
        json!({"dateobs": dateobs, "limit": 5000}),
    )
    .await;

    // Broker filters. The subject-scoped writes (versions, validation,
    // activation) are offered only in a session opened on a filter, which
    // no session here is: they are not listed (tests/filters.rs has them).
    for scoped in [
        "post_broker_filter_version",
        "validate_broker_filter_version",
        "activate_broker_filter_version",
    ] {
        assert!(
            !pass.tools.contains_key(scoped),
            "{scoped} is listed without a subject"
        );
    }
    let targets = pass
        .ok(&up, &up.agent, "get_filter_targets", json!({}))
        .await;
    let group = targets["groups"][0]["group_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a default group: {targets}"))
        .to_owned();
    assert!(
        !targets.to_string().contains("altdata"),
        "no broker connection details: {targets}"
    );
    let defaults = pass
        .ok(
            &up,
            &up.agent,
            "get_counterpart_search_defaults",
            json!({"trigger_jd": 2460229.5}),
        )
        .await;
    assert_eq!(defaults["sort_order"], "Ascending");
    pass.err(
        &up,
        &up.agent,
        "get_counterpart_search_defaults",
        json!({"trigger_jd": 1}),
    )
    .await;
    let filter = pass
        .ok(
            &up,
            &up.agent,
            "post_filter",
            json!({"name": "schema pass", "group_id": group, "stream_id": "ztf-public"}),
        )
        .await;
    pass.err(
        &up,
        &up.agent,
        "post_filter",
        json!({"name": "", "group_id": group, "stream_id": "ztf-public"}),
    )
    .await;
    let filter_id = filter["filter_id"].as_str().expect("filter id").to_owned();
    let filter_uri = filter["uri"].as_str().expect("filter uri");
    let read = modern(&up, &up.agent, "resources/read", json!({"uri": filter_uri})).await;
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(
        read.json()["result"]["contents"][0]["uri"],
        filter_uri,
        "{}",
        read.text()
    );
    let preview = pass
        .ok(
            &up,
            &up.agent,
            "run_broker_filter",
            json!({
                "pipeline": defaults["pipeline"],
                "filter_id": filter_id,
                "jd_start": defaults["jd_start"],
                "jd_end": defaults["jd_end"],
                "sort_by": defaults["sort_by"],
                "sort_order": defaults["sort_order"],
            }),
        )
        .await;
    assert!(preview["evaluated"].is_i64(), "{preview}");
    // The burst ingested above, as a region: its best localisation.
    let in_region = pass
        .ok(
            &up,
            &up.agent,
            "run_broker_filter",
            json!({"pipeline": defaults["pipeline"], "filter_id": filter_id, "dateobs": "Fermi 798437606"}),
        )
        .await;
    assert!(in_region["region"].is_string(), "{in_region}");
    let misspelt = pass
        .err(
            &up,
            &up.agent,
            "run_broker_filter",
            json!({"pipeline": [{"$match": {"candidate.magpfs": {"$lt": 18}}}], "filter_id": filter_id}),
        )
        .await;
    assert!(
        misspelt["message"]
            .as_str()
            .is_some_and(|m| m.contains("candidate.magpfs")),
        "{misspelt}"
    );
    pass.ok(
        &up,
        &up.agent,
        "get_broker_filter",
        json!({"filter_id": filter_id}),
    )
    .await;
    pass.err(
        &up,
        &up.agent,
        "get_broker_filter",
        json!({"filter_id": "00000000-0000-4000-8000-000000000000"}),
    )
    .await;
    pass.err(
        &up,
        &up.agent,
        "diff_broker_filter_versions",
        json!({"filter_id": filter_id, "from_version": 1, "to_version": 2}),
    )
    .await;

    // People's tools, called by a person.
    let human_session = pass
        .ok(
            &up,
            &up.human,
            "session_context",
            json!({"prompt": "decide"}),
        )
        .await;
    assert!(human_session["session_id"].is_string());
    pass.err(
        &up,
        &up.human,
        "decide_approval",
        json!({"approval_id": "00000000-0000-4000-8000-000000000000", "decision": "approve"}),
    )
    .await;
    pass.ok(&up, &up.human, "session_close", json!({})).await;
    pass.ok(&up, &up.agent, "session_close", json!({})).await;

    let missed: Vec<&String> = pass
        .tools
        .keys()
        .filter(|t| !pass.called.contains(*t))
        .collect();
    assert!(
        missed.is_empty(),
        "the schema pass must cover every tool; add calls for {missed:?}"
    );
    eprintln!(
        "schema pass: {} results of {} tools validated",
        pass.results,
        pass.tools.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_revisions_connect_and_get_answers_shaped_for_them() {
    let up = up(&[]);
    for version in ["2024-11-05", "2025-03-26"] {
        let init = legacy(
            &up,
            None,
            "initialize",
            json!({
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "old-client", "version": "1"}}),
        )
        .await;
        assert_eq!(init.status, 200, "{}", init.text());
        assert_eq!(
            init.json()["result"]["protocolVersion"],
            version,
            "{}",
            init.text()
        );
        // Clients of these revisions send no MCP-Protocol-Version header.
        let list = legacy(&up, None, "tools/list", json!({})).await;
        let tools = list.json()["result"]["tools"]
            .as_array()
            .expect("tools")
            .clone();
        assert!(!tools.is_empty());
        for tool in &tools {
            assert!(
                tool.get("outputSchema").is_none(),
                "{version} has no outputSchema: {tool}"
            );
        }
        let opened = legacy(
            &up,
            None,
            "tools/call",
            json!({"name": "session_context", "arguments": {"prompt": version}}),
        )
        .await;
        let result = &opened.json()["result"];
        assert_eq!(result["isError"], false, "{result}");
        assert!(
            result.get("structuredContent").is_none(),
            "{version} has no structuredContent: {result}"
        );
        let text: Value =
            serde_json::from_str(result["content"][0]["text"].as_str().expect("text"))
                .expect("json text");
        assert!(text["session_id"].is_string());
        legacy(
            &up,
            None,
            "tools/call",
            json!({"name": "session_close", "arguments": {}}),
        )
        .await;
    }
    // 2025-06-18 and later keep structured output.
    let list = legacy(&up, Some("2025-06-18"), "tools/list", json!({})).await;
    let tools = list.json()["result"]["tools"]
        .as_array()
        .expect("tools")
        .clone();
    assert!(tools.iter().any(|t| t.get("outputSchema").is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_protocol_answers_a_probe() {
    let up = up(&[]);
    let accept = ("Accept", "application/json, text/event-stream");
    // Envelopes of the wrong type are invalid requests, not 415s.
    for (body, what) in [
        (
            r#"{"jsonrpc":"2.0","id":{"a":1},"method":"tools/list"}"#,
            "`id`",
        ),
        (r#"{"jsonrpc":"2.0","id":1,"method":7}"#, "`method`"),
        (
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":[1]}"#,
            "`params`",
        ),
    ] {
        let r = raw(&up, &[accept], body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text());
        let error = &r.json()["error"];
        assert_eq!(error["code"], -32600, "{body}: {}", r.text());
        assert!(
            error["message"].as_str().is_some_and(|m| m.contains(what)),
            "{}",
            r.text()
        );
    }
    // tools/call without a name, or with arguments that are no object.
    for (params, field) in [
        (json!({"arguments": {}}), "params.name"),
        (
            json!({"name": "list_symbols", "arguments": [1]}),
            "params.arguments",
        ),
    ] {
        let r = modern(&up, &up.agent, "tools/call", params).await;
        let error = &r.json()["error"];
        assert_eq!(error["code"], -32602, "{}", r.text());
        assert!(
            error["message"].as_str().is_some_and(|m| m.contains(field)),
            "{}",
            r.text()
        );
    }
    // An unknown protocol version header is refused in both eras.
    let auth = format!("Bearer {}", up.agent);
    let body =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"_meta": meta()}});
    let r = http::request(
        &up.url,
        "POST",
        "/mcp",
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            accept,
            ("MCP-Protocol-Version", "1999-01-01"),
            ("Mcp-Method", "tools/list"),
        ],
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"]["code"], -32022, "{}", r.text());
    let r = legacy(&up, Some("1999-01-01"), "tools/list", json!({})).await;
    assert_eq!(r.status, 400, "{}", r.text());
    // ping: removed in 2026-07-28 (and the answer says so), kept in the
    // initialize profile.
    let r = modern(&up, &up.agent, "ping", json!({})).await;
    assert_eq!(r.status, 404, "{}", r.text());
    let error = &r.json()["error"];
    assert_eq!(error["code"], -32601);
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("removed in 2026-07-28")),
        "{}",
        r.text()
    );
    let r = legacy(&up, Some("2025-06-18"), "ping", json!({})).await;
    assert_eq!(r.json()["result"], json!({}), "{}", r.text());
    let r = legacy(&up, Some("2025-06-18"), "tools/nonsense", json!({})).await;
    let message = r.json()["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        message.contains("tools/nonsense") && message.contains("tools/list"),
        "{message}"
    );
    // A client that accepts only JSON is served.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}});
    let r = raw(
        &up,
        &[
            ("Accept", "application/json"),
            ("MCP-Protocol-Version", "2025-06-18"),
        ],
        &body.to_string(),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    // OAuth metadata names no authorization server; a 401 says what to do.
    let r = http::request(
        &up.url,
        "GET",
        "/.well-known/oauth-protected-resource",
        &[],
        b"",
    )
    .await;
    let metadata = r.json();
    assert!(
        metadata.get("authorization_servers").is_none(),
        "{metadata}"
    );
    assert_eq!(
        metadata["scopes_supported"],
        json!(ithaca_proto::scopes::ALL)
    );
    let r = http::request(
        &up.url,
        "POST",
        "/mcp",
        &[("Content-Type", "application/json"), accept],
        body.to_string().as_bytes(),
    )
    .await;
    assert_eq!(r.status, 401);
    assert!(r.text().contains("ithaca keys create"), "{}", r.text());
    // CORS is off unless configured: a preflight is refused.
    let r = http::request(
        &up.url,
        "OPTIONS",
        "/mcp",
        &[
            ("Origin", "https://elsewhere.example"),
            ("Access-Control-Request-Method", "POST"),
        ],
        b"",
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text());

    // initialize with 2026-07-28 is refused: that revision has no handshake.
    let r = legacy(
        &up,
        None,
        "initialize",
        json!({"protocolVersion": "2026-07-28", "capabilities": {},
        "clientInfo": {"name": "confused", "version": "1"}}),
    )
    .await;
    assert_eq!(r.json()["error"]["code"], -32601, "{}", r.text());
    // Handshakes are counted by client; clients cannot mint label values.
    let r = legacy(
        &up,
        None,
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "probe-client", "version": "9.9"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let note = json!({"jsonrpc": "2.0", "method": "notifications/zzz-made-up"});
    raw(
        &up,
        &[accept, ("MCP-Protocol-Version", "2025-11-25")],
        &note.to_string(),
    )
    .await;
    let metrics = http::request(&up.url, "GET", "/metrics", &[], b"")
        .await
        .text();
    assert!(
        metrics.contains("mcp_client_handshakes_total{era=\"legacy\",client_name=\"probe-client\",client_version=\"9.9\"} 1"),
        "{metrics}"
    );
    assert!(!metrics.contains("zzz-made-up"), "{metrics}");
}
