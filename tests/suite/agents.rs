//! What real agents see, through `ithaca up` as a client reaches it: every
//! result of every tool validates against the tool's output schema (errors
//! included, checked with a JSON Schema validator), integers are integers,
//! older protocol revisions connect and get answers shaped for them, every
//! URI handed out can be read back, and the protocol answers a probe.

use crate::common;

use common::http::{self, Reply};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

use common::{Up, up};

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

    /// Also check tools listed later (those offered only in a session on a
    /// subject), which must then be exercised too.
    fn learn(&mut self, tools: &[Value]) {
        for tool in tools {
            let name = tool["name"].as_str().expect("tool name").to_owned();
            if self.tools.contains_key(&name) {
                continue;
            }
            if let Some(schema) = tool.get("outputSchema") {
                let validator = jsonschema::validator_for(schema)
                    .unwrap_or_else(|e| panic!("{name}: the output schema is no JSON Schema: {e}"));
                self.validators.insert(name.clone(), validator);
            }
            self.tools.insert(name, tool.clone());
        }
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
        let mut camel = Vec::new();
        camel_case_keys("", structured, &mut camel);
        assert!(
            camel.is_empty(),
            "{tool}: keys in camelCase beside snake_case elsewhere: {camel:?}"
        );
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

/// Keys an agent reads that are not snake_case (`activeVersion` beside
/// `active_version`), with their paths. Data keeps its producer's names:
/// what lies under an alert's or a schema's own fields is not ours.
fn camel_case_keys(path: &str, value: &Value, out: &mut Vec<String>) {
    const DATA: &[&str] = &[
        "candidate",
        "prv_candidates",
        "fp_hists",
        "alert",
        "document",
        "fields",
        "input_schema",
        "output_schema",
    ];
    match value {
        Value::Object(map) => {
            for (key, inner) in map {
                let here = format!("{path}/{key}");
                let camel = key
                    .as_bytes()
                    .windows(2)
                    .any(|w| w[0].is_ascii_lowercase() && w[1].is_ascii_uppercase());
                if camel && key != "objectId" {
                    out.push(here.clone());
                }
                if !DATA.contains(&key.as_str()) {
                    camel_case_keys(&here, inner, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, inner) in items.iter().enumerate() {
                camel_case_keys(&format!("{path}/{i}"), inner, out);
            }
        }
        _ => {}
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
    // Without dates: the newest page, and a cursor to the older bars.
    let newest = pass
        .ok(
            &up,
            &up.agent,
            "get_price_history",
            json!({"symbol": "MSFT", "fields": ["close"], "limit": 5}),
        )
        .await;
    assert_eq!(newest["bars"][4]["date"], "2013-03-01", "{newest}");
    assert_eq!(newest["truncated"], true, "{newest}");
    // Without `limit`: the documented default, a calendar year of trading
    // days, not the whole history (it was 1,000 bars, 134 KB).
    let default_page = pass
        .ok(
            &up,
            &up.agent,
            "get_price_history",
            json!({"symbol": "MSFT"}),
        )
        .await;
    assert_eq!(default_page["count"], 260, "the default page size");
    assert_eq!(default_page["bars"].as_array().map(Vec::len), Some(260));
    assert_eq!(default_page["truncated"], true);
    assert_eq!(default_page["bars"][259]["date"], "2013-03-01");
    let bytes = default_page.to_string().len();
    assert!(bytes < 40_000, "the default page is {bytes} bytes");
    let cursor = newest["next_cursor"].as_str().expect("next_cursor");
    let older = pass
        .ok(
            &up,
            &up.agent,
            "get_price_history",
            json!({"symbol": "MSFT", "fields": ["close"], "limit": 5, "cursor": cursor}),
        )
        .await;
    assert!(
        older["bars"][4]["date"].as_str() < newest["bars"][0]["date"].as_str(),
        "the page before: {older}"
    );
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
    // Seed 000's own example finds the volatility skills (`market` is both
    // market-data classes) and says nothing more.
    let seed = pass
        .ok(
            &up,
            &up.agent,
            "search_skills",
            json!({"query": "volatility", "asset_class": "market", "intent": "risk"}),
        )
        .await;
    assert_eq!(seed["skills"][0]["skill_id"], "vol.realized", "{seed}");
    assert!(seed.get("note").is_none(), "{seed}");
    // Nothing matched, or an unknown filter value: the answer says why and
    // what the catalog holds, instead of a bare zero.
    let empty = pass
        .ok(
            &up,
            &up.agent,
            "search_skills",
            json!({"query": "horoscope"}),
        )
        .await;
    assert_eq!(empty["count"], 0, "{empty}");
    assert!(
        empty["note"]
            .as_str()
            .is_some_and(|n| n.contains("horoscope")),
        "{empty}"
    );
    for list in ["asset_classes", "intents"] {
        assert!(
            empty[list].as_array().is_some_and(|l| !l.is_empty()),
            "{list}: {empty}"
        );
    }
    let unknown = pass
        .ok(
            &up,
            &up.agent,
            "search_skills",
            json!({"asset_class": "crypto"}),
        )
        .await;
    assert!(
        unknown["note"]
            .as_str()
            .is_some_and(|n| n.contains("asset_class \"crypto\"") && n.contains("equity")),
        "{unknown}"
    );
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
    // One refusal, one denial in the trace (the approvals service records
    // it; the edge used to add a second).
    let trace = common::ithaca()
        .args(["sessions", "show"])
        .arg(opened["session_id"].as_str().expect("session id"))
        .arg("--data-dir")
        .arg(up.dir.path().join("stack"))
        .output()
        .expect("ithaca sessions show");
    let trace = String::from_utf8_lossy(&trace.stdout);
    let denials = trace
        .lines()
        .filter(|l| l.contains(" denial ") && l.contains("TRADING_DISABLED"))
        .count();
    assert_eq!(denials, 1, "{trace}");
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
    // the empty answers and the refusals; tests/suite/astro_edge.rs has the data.
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

    // SEC fundamentals: Apple's filing index, its 10-Q instance of
    // 2018-12-29 (the folder's linkbases are left out by name) and a
    // Form 4, loaded with `ithaca ingest sec`; both resources read back.
    let sec = common::astro::data().join("fundamentals");
    up.ingest(
        "sec",
        &[
            sec.join("submissions/CIK0000320193-2013-2023.json"),
            sec.join("xbrl/aapl-10q-2018q4"),
            sec.join("form4"),
        ],
    );
    let facts = pass
        .ok(
            &up,
            &up.agent,
            "get_fundamentals",
            json!({"symbol": "AAPL", "as_of": "2019-02-01", "limit": 2}),
        )
        .await;
    assert_eq!(facts["periods"][0]["period_end"], "2018-12-29", "{facts}");
    assert_eq!(facts["periods"][0]["fiscal_year"], 2019, "{facts}");
    pass.err(
        &up,
        &up.agent,
        "get_fundamentals",
        json!({"symbol": "ZZZZ"}),
    )
    .await;
    let filings = pass
        .ok(
            &up,
            &up.agent,
            "get_filings",
            json!({"symbol": "AAPL", "form": "4", "from": "2020-10-01", "to": "2020-10-31"}),
        )
        .await;
    let filing_uri = filings["filings"][0]["uri"]
        .as_str()
        .expect("uri")
        .to_owned();
    pass.err(
        &up,
        &up.agent,
        "get_filings",
        json!({"symbol": "AAPL", "limit": 0}),
    )
    .await;
    let insiders = pass
        .ok(
            &up,
            &up.agent,
            "get_insider_activity",
            json!({"symbol": "AAPL", "from": "2020-10-01", "to": "2020-10-31"}),
        )
        .await;
    assert_eq!(
        insiders["transactions"][0]["shares"], 243431.0,
        "{insiders}"
    );
    pass.err(
        &up,
        &up.agent,
        "get_insider_activity",
        json!({"symbol": "AAPL", "from": "2021-01-01", "to": "2020-01-01"}),
    )
    .await;
    let peers = pass
        .ok(
            &up,
            &up.agent,
            "screen_peers",
            json!({"symbols": ["AAPL", "MSFT"], "date": "2019-02-01", "metrics": ["pe", "momentum"]}),
        )
        .await;
    assert_eq!(peers["rows"].as_array().map(Vec::len), Some(2), "{peers}");
    pass.err(
        &up,
        &up.agent,
        "screen_peers",
        json!({"symbols": [], "date": "2019-02-01"}),
    )
    .await;
    for uri in ["doomberg://fundamentals/AAPL", filing_uri.as_str()] {
        let read = modern(&up, &up.agent, "resources/read", json!({"uri": uri})).await;
        assert_eq!(read.status, 200, "{}", read.text());
        assert_eq!(
            read.json()["result"]["contents"][0]["uri"],
            uri,
            "{}",
            read.text()
        );
    }

    // GCN events: the Fermi/SVOM burst loaded with `ithaca ingest gcn`
    // into this stack, its URI read back. (post_gcn_event_comment is
    // subject-scoped, so the edge does not list it in these sessions.)
    let stack_dir = up.dir.path().join("stack");
    up.ingest("gcn", &[common::gcn::fermi_svom_dir()]);
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
    // Circulars: an event's next page by its cursor, one by number, words.
    up.ingest("gcn", &[common::gcn::circulars_file()]);
    let page = pass
        .ok(
            &up,
            &up.agent,
            "get_gcn_event",
            json!({"dateobs": "GRB 230812B", "limit": 2}),
        )
        .await;
    let cursor = page["next_cursor"].clone();
    assert!(cursor.is_string(), "{page}");
    let args = json!({"dateobs": "GRB 230812B", "cursor": cursor});
    pass.ok(&up, &up.agent, "get_gcn_event", args).await;
    let args = json!({"circular_id": 34397});
    pass.ok(&up, &up.agent, "get_gcn_circular", args).await;
    pass.err(
        &up,
        &up.agent,
        "get_gcn_circular",
        json!({"circular_id": 1}),
    )
    .await;
    let args = json!({"query": "ZTF23aaxeacr", "limit": 1});
    let hits = pass.ok(&up, &up.agent, "search_gcn_circulars", args).await;
    assert!(hits["next_cursor"].is_string(), "{hits}");
    pass.err(&up, &up.agent, "search_gcn_circulars", json!({"query": ""}))
        .await;

    // The write tool of a GCN event is offered only where its subject is:
    // a person opens a session on the event, the agent joins it.
    let comment_tool = "post_gcn_event_comment";
    assert!(
        !tools_of(&up, &up.agent)
            .await
            .iter()
            .any(|t| t["name"] == comment_tool),
        "no subject, no write tool"
    );
    let outside = modern(
        &up,
        &up.agent,
        "tools/call",
        json!({"name": comment_tool, "arguments": {"dateobs": dateobs, "text": "x"}}),
    )
    .await;
    // Not listed, but a call is told how to get there, not "unknown tool".
    let told = outside.json()["result"].clone();
    assert_eq!(told["isError"], true, "{}", outside.text());
    let told = common::tool_error(&told);
    assert_eq!(told["error"], "SUBJECT_REQUIRED", "{told}");
    let message = told["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("/console/gcn/") && message.contains("session_context"),
        "{message}"
    );
    let err = pass
        .err(
            &up,
            &up.agent,
            "session_context",
            json!({"prompt": "mine", "subject_kind": "gcn_event", "subject_id": dateobs}),
        )
        .await;
    assert_eq!(
        err["error"], "HUMAN_REQUIRED",
        "agents cannot set a subject"
    );
    let on_event = pass
        .ok(
            &up,
            &up.human,
            "session_context",
            json!({"prompt": "Reply on the SVOM burst", "subject_kind": "gcn_event", "subject_id": dateobs}),
        )
        .await;
    assert_eq!(on_event["subject_id"], dateobs.as_str());
    let scoped_session = on_event["session_id"].as_str().expect("id").to_owned();
    pass.ok(
        &up,
        &up.agent,
        "session_context",
        json!({"prompt": "joining", "session_id": scoped_session}),
    )
    .await;
    let scoped_tools = tools_of(&up, &up.agent).await;
    assert!(
        scoped_tools.iter().any(|t| t["name"] == comment_tool),
        "offered in the session"
    );
    pass.learn(&scoped_tools);
    let posted = pass
        .ok(
            &up,
            &up.agent,
            comment_tool,
            json!({"dateobs": dateobs, "text": "Swift/XRT follow-up planned."}),
        )
        .await;
    assert!(posted.is_object(), "{posted}");
    // A circular's text cannot steer it to another event: refused by the
    // broker itself, and traced as a denial.
    let more = common::ithaca()
        .args(["ingest", "gcn"])
        .arg(common::gcn::notices_dir())
        .arg("--data-dir")
        .arg(&stack_dir)
        .output()
        .expect("run ithaca ingest gcn");
    assert!(
        more.status.success(),
        "{}",
        String::from_utf8_lossy(&more.stderr)
    );
    let all = pass
        .ok(&up, &up.agent, "get_gcn_events", json!({"limit": 50}))
        .await;
    let other = all["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["dateobs"].as_str())
        .find(|d| *d != dateobs)
        .expect("another event")
        .to_owned();
    let steered = pass
        .err(
            &up,
            &up.agent,
            comment_tool,
            json!({"dateobs": other, "text": "injected"}),
        )
        .await;
    assert_eq!(steered["error"], "SUBJECT_MISMATCH", "{steered}");
    pass.err(
        &up,
        &up.agent,
        comment_tool,
        json!({"dateobs": dateobs, "text": ""}),
    )
    .await;
    let shown = common::ithaca()
        .args(["sessions", "show", &scoped_session, "--data-dir"])
        .arg(&stack_dir)
        .output()
        .expect("ithaca sessions show");
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown
            .lines()
            .any(|l| l.contains(" denial ") && l.contains("SUBJECT_MISMATCH")),
        "{shown}"
    );
    let comments = pass
        .ok(
            &up,
            &up.agent,
            "get_gcn_event_comments",
            json!({"dateobs": dateobs}),
        )
        .await;
    assert!(
        comments
            .to_string()
            .contains("Swift/XRT follow-up planned."),
        "{comments}"
    );
    assert!(!comments.to_string().contains("injected"));
    // Back in a session of its own, the tool is gone again.
    pass.ok(
        &up,
        &up.agent,
        "session_context",
        json!({"prompt": "elsewhere"}),
    )
    .await;
    assert!(
        !tools_of(&up, &up.agent)
            .await
            .iter()
            .any(|t| t["name"] == comment_tool)
    );
    pass.err(
        &up,
        &up.agent,
        "get_gcn_event_comments",
        json!({"dateobs": dateobs, "limit": 5000}),
    )
    .await;

    // Broker filters. The subject-scoped writes (versions, validation,
    // activation) are offered only in a session opened on a filter, which
    // no session here is: they are not listed (tests/suite/filters.rs has them).
    for scoped in [
        "post_broker_filter_version",
        "validate_broker_filter_version",
        "activate_broker_filter_version",
        "deactivate_broker_filter",
        "delete_broker_filter",
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
    // Found by name, whatever the case.
    let found = pass
        .ok(
            &up,
            &up.agent,
            "list_broker_filters",
            json!({"search": "SCHEMA PASS"}),
        )
        .await;
    assert_eq!(found["filters"][0]["filter_id"], filter_id, "{found}");
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
    let narrated = pass
        .ok(
            &up,
            &up.agent,
            "record_reasoning",
            json!({"text": "Checking the data first."}),
        )
        .await;
    assert_eq!(narrated["type"], "reasoning");
    let empty = pass
        .err(&up, &up.agent, "record_reasoning", json!({"text": "  "}))
        .await;
    assert_eq!(empty["error"], "INVALID_ARGUMENT");
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
    // OAuth metadata names the built-in authorization server (this origin);
    // a 401 says what to do.
    let r = http::request(
        &up.url,
        "GET",
        "/.well-known/oauth-protected-resource",
        &[],
        b"",
    )
    .await;
    let metadata = r.json();
    assert_eq!(
        metadata["authorization_servers"],
        json!([up.url.clone()]),
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

/// The session lifecycle an agent and a person meet (seeds 000 and 002):
/// a second `session_context` on one key says it took over, a request can
/// pin its session with `_meta`, agents narrate reasoning, the record of an
/// answer lists the calls, failures are `error` events, and a person closes
/// any session without opening one; `ithaca sessions` shows it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_lifecycle_through_the_edge() {
    let up = up(&[]);
    let call = |token: String, tool: &'static str, args: Value| {
        let url = up.url.clone();
        async move {
            let reply = http::modern(
                &url,
                &token,
                "tools/call",
                json!({"name": tool, "arguments": args}),
            )
            .await;
            assert_eq!(reply.status, 200, "{tool}: {}", reply.text());
            reply.json()["result"].clone()
        }
    };
    let first = call(
        up.agent.clone(),
        "session_context",
        json!({"prompt": "first conversation"}),
    )
    .await;
    let s1 = first["structuredContent"]["session_id"]
        .as_str()
        .expect("s1")
        .to_owned();
    assert!(
        first["structuredContent"].get("notice").is_none(),
        "{first}"
    );
    let second = call(
        up.agent.clone(),
        "session_context",
        json!({"prompt": "second conversation"}),
    )
    .await;
    let s2 = second["structuredContent"]["session_id"]
        .as_str()
        .expect("s2")
        .to_owned();
    assert_ne!(s1, s2);
    assert_eq!(
        second["structuredContent"]["previous_session_id"],
        json!(s1),
        "{second}"
    );
    assert!(
        second["structuredContent"]["notice"]
            .as_str()
            .is_some_and(|n| n.contains("io.ithaca/session_id")),
        "{second}"
    );

    // The first conversation pins its calls to its own session.
    let pinned = |session: &str, tool: &'static str, args: Value| {
        let url = up.url.clone();
        let token = up.agent.clone();
        let session = session.to_owned();
        async move {
            let params = json!({"name": tool, "arguments": args, "_meta": {"io.ithaca/session_id": session}});
            http::modern(&url, &token, "tools/call", params)
                .await
                .json()["result"]
                .clone()
        }
    };
    let narrated = pinned(
        &s1,
        "record_reasoning",
        json!({"text": "Comparing momentum first."}),
    )
    .await;
    assert_eq!(narrated["isError"], false, "{narrated}");
    assert_eq!(narrated["structuredContent"]["type"], "reasoning");
    assert_eq!(narrated["structuredContent"]["session_id"], json!(s1));
    let unpinned = call(
        up.agent.clone(),
        "get_strategy",
        json!({"strategy_id": "00000000-0000-4000-8000-000000000000"}),
    )
    .await;
    assert_eq!(unpinned["isError"], true);
    // A pin to a session that does not exist is refused, not redirected.
    let bogus = pinned(
        "00000000-0000-4000-8000-000000000000",
        "list_brokers",
        json!({}),
    )
    .await;
    assert_eq!(
        common::tool_error(&bogus)["error"],
        "no_active_session",
        "{bogus}"
    );

    // The record of each session holds only its own calls, in order.
    let record = |session: String| {
        let url = up.url.clone();
        let token = up.human.clone();
        async move {
            let uri = format!("doomberg://sessions/{session}/record");
            let reply = http::modern(&url, &token, "resources/read", json!({"uri": uri})).await;
            let text = reply.json()["result"]["contents"][0]["text"]
                .as_str()
                .map(str::to_owned);
            serde_json::from_str::<Value>(&text.unwrap_or_else(|| panic!("{}", reply.text())))
                .expect("json")
        }
    };
    let r1 = record(s1.clone()).await;
    let names1: Vec<&str> = r1["tool_calls"]
        .as_array()
        .expect("calls")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert_eq!(names1, vec!["session_context", "record_reasoning"], "{r1}");
    let r2 = record(s2.clone()).await;
    let calls2 = r2["tool_calls"].as_array().expect("calls");
    let failed = calls2
        .iter()
        .find(|c| c["name"] == "get_strategy")
        .expect("get_strategy recorded");
    assert_eq!(failed["ok"], false);
    assert!(
        failed["summary"]
            .as_str()
            .is_some_and(|s| s.starts_with("UNKNOWN_STRATEGY")),
        "{failed}"
    );

    // A person closes the first session without a session of their own.
    let closed = call(up.human.clone(), "session_close", json!({"session_id": s1})).await;
    assert_eq!(closed["structuredContent"]["status"], "closed", "{closed}");
    let after = pinned(&s1, "list_brokers", json!({})).await;
    assert_eq!(
        common::tool_error(&after)["error"],
        "no_active_session",
        "{after}"
    );

    // The operator's view: the failure is an `error` event after its result.
    let data_dir = up.dir.path().join("stack");
    let out = common::ithaca()
        .args(["sessions", "show", &s2, "--data-dir"])
        .arg(&data_dir)
        .output()
        .expect("ithaca sessions show");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{shown}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kinds: Vec<&str> = shown
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let result_at = kinds
        .iter()
        .position(|k| *k == "tool_result")
        .expect("a result");
    assert!(kinds[result_at..].contains(&"error"), "{shown}");
    let out = common::ithaca()
        .args(["sessions", "list", "--status", "closed", "--data-dir"])
        .arg(&data_dir)
        .output()
        .expect("ithaca sessions list");
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(listed.contains(&s1) && !listed.contains(&s2), "{listed}");
    let out = common::ithaca()
        .args(["sessions", "archive", &s1, "--data-dir"])
        .arg(&data_dir)
        .output()
        .expect("ithaca sessions archive");
    assert!(String::from_utf8_lossy(&out.stdout).contains("archived"));
    // Archived: the trace left the hot table and is still readable.
    let r1_again = record(s1).await;
    assert_eq!(r1_again["tool_calls"], r1["tool_calls"]);
}

/// The filter story of seed 003 through the edge, in both protocol eras:
/// a person opens a session on a filter, the agent joins it, goes defaults
/// → preview → version → validate → activate, the activation waits for a
/// person, the person approves, and the active version matches alerts
/// ingested afterwards. The record of the answer shows the calls and the
/// previewed proposal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filter_story_through_the_edge() {
    let up = up(&[]);
    let stack_dir = up.dir.path().join("stack");
    let ingest = |folder: &str| {
        let out = common::ithaca()
            .args(["ingest", "ztf"])
            .arg(common::astro::alerts_dir().join(folder))
            .arg("--data-dir")
            .arg(&stack_dir)
            .output()
            .expect("ithaca ingest ztf");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ingest("v4.02");
    // Calls in the 2026-07-28 era, or in the initialize era (2025-06-18).
    let call = |token: String, era: &'static str, tool: &'static str, args: Value| {
        let url = up.url.clone();
        async move {
            let reply = if era == "modern" {
                http::modern(
                    &url,
                    &token,
                    "tools/call",
                    json!({"name": tool, "arguments": args}),
                )
                .await
            } else {
                let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                  "params": {"name": tool, "arguments": args}});
                let auth = format!("Bearer {token}");
                http::request(
                    &url,
                    "POST",
                    "/mcp",
                    &[
                        ("Authorization", auth.as_str()),
                        ("Content-Type", "application/json"),
                        ("Accept", "application/json, text/event-stream"),
                        ("MCP-Protocol-Version", "2025-06-18"),
                    ],
                    body.to_string().as_bytes(),
                )
                .await
            };
            assert_eq!(reply.status, 200, "{tool}: {}", reply.text());
            let result = reply.json()["result"].clone();
            assert!(result.is_object(), "{tool}: {}", reply.text());
            result
        }
    };
    let ok = |r: &Value| -> Value {
        assert_eq!(r["isError"], false, "{r}");
        r["structuredContent"].clone()
    };
    let mut activated: Vec<String> = Vec::new();
    let mut activated_last: Option<String> = None;
    for era in ["modern", "legacy"] {
        // A person creates the filter and opens a session on it.
        let person = up.human.clone();
        let agent = up.agent.clone();
        ok(&call(
            person.clone(),
            era,
            "session_context",
            json!({"prompt": "set up"}),
        )
        .await);
        let targets = ok(&call(person.clone(), era, "get_filter_targets", json!({})).await);
        let group = targets["groups"][0]["group_id"]
            .as_str()
            .expect("group")
            .to_owned();
        let filter = ok(&call(person.clone(), era, "post_filter",
            json!({"name": format!("bright ({era})"), "group_id": group, "stream_id": "ztf-public"})).await);
        let filter_id = filter["filter_id"].as_str().expect("filter_id").to_owned();
        let opened = ok(&call(
            person.clone(),
            era,
            "session_context",
            json!({
            "prompt": "Catch bright transients on the public stream",
            "subject_kind": "filter", "subject_id": filter_id}),
        )
        .await);
        let sid = opened["session_id"].as_str().expect("sid").to_owned();

        // The agent joins and works the filter.
        ok(&call(
            agent.clone(),
            era,
            "session_context",
            json!({"prompt": "joining", "session_id": sid}),
        )
        .await);
        // Seed 003's four rules stand in the descriptions of the tools they
        // govern, for a client that never reads the instructions.
        let described: BTreeMap<String, String> = tools_of(&up, &agent)
            .await
            .iter()
            .map(|t| {
                let name = t["name"].as_str().unwrap_or_default().to_owned();
                (
                    name,
                    t["description"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        for (tool, rule) in [
            ("run_broker_filter", "passes nothing"),
            ("run_broker_filter", "get_alert_schema"),
            ("run_broker_filter", "get_counterpart_search_defaults"),
            ("post_broker_filter_version", "get_alert_schema"),
            ("post_broker_filter_version", "passes nothing"),
            ("activate_broker_filter_version", "passing verdict"),
            (
                "activate_broker_filter_version",
                "preview of this exact pipeline",
            ),
            ("activate_broker_filter_version", "approval"),
            ("get_counterpart_search_defaults", "Ascending"),
        ] {
            let text = described.get(tool).map(String::as_str).unwrap_or_default();
            assert!(text.contains(rule), "{tool} does not say {rule:?}: {text}");
        }
        let defaults = ok(&call(
            agent.clone(),
            era,
            "get_counterpart_search_defaults",
            json!({}),
        )
        .await);
        assert!(defaults.to_string().contains("Ascending"), "{defaults}");
        let pipeline = json!([{"$match": {"candidate.magpsf": {"$lt": 18.5}}}]);
        let preview = ok(&call(
            agent.clone(),
            era,
            "run_broker_filter",
            json!({"filter_id": filter_id, "pipeline": pipeline}),
        )
        .await);
        assert!(preview["evaluated"].as_i64().unwrap_or(0) > 0, "{preview}");
        let verdict = ok(&call(
            agent.clone(),
            era,
            "post_broker_filter_version",
            json!({"filter_id": filter_id, "pipeline": pipeline}),
        )
        .await);
        assert_eq!(verdict["passed"], true, "{verdict}");
        let version = verdict["version"].as_i64().expect("version");
        ok(&call(
            agent.clone(),
            era,
            "validate_broker_filter_version",
            json!({"filter_id": filter_id, "version": version}),
        )
        .await);
        // Activation by an agent waits for a person.
        let pending = ok(&call(
            agent.clone(),
            era,
            "activate_broker_filter_version",
            json!({"filter_id": filter_id, "version": version}),
        )
        .await);
        assert_eq!(pending["status"], "pending_approval", "{pending}");
        let approval_id = pending["approval_id"]
            .as_str()
            .expect("approval_id")
            .to_owned();
        let still = ok(&call(
            agent.clone(),
            era,
            "get_broker_filter",
            json!({"filter_id": filter_id}),
        )
        .await);
        assert!(
            still.get("active_version").is_none_or(Value::is_null),
            "not yet active: {still}"
        );

        // The person sees what they approve, in the filter's terms.
        let asked = ok(&call(
            person.clone(),
            era,
            "get_approval",
            json!({"approval_id": approval_id}),
        )
        .await);
        let summary = &asked["summary"];
        assert_eq!(summary["filter"]["filter_id"], filter_id, "{asked}");
        assert_eq!(summary["version"], version, "{asked}");
        assert_eq!(summary["verdict"]["passed"], true, "{asked}");
        assert!(
            summary["pipeline"]
                .as_str()
                .is_some_and(|p| p.contains("candidate.magpsf")),
            "the pipeline it would run: {asked}"
        );
        assert!(
            summary["what"]
                .as_str()
                .is_some_and(|w| w.contains("every new alert")),
            "{asked}"
        );

        // The person approves; the call runs as the agent, in its session.
        let decided = ok(&call(
            person.clone(),
            era,
            "decide_approval",
            json!({"approval_id": approval_id, "decision": "approve", "note": "looks right"}),
        )
        .await);
        assert_eq!(decided["status"], "executed", "{decided}");
        // The executed call's result is named as every tool result is.
        let mut camel = Vec::new();
        camel_case_keys("", &decided, &mut camel);
        assert!(camel.is_empty(), "camelCase in {decided}: {camel:?}");
        let active = ok(&call(
            agent.clone(),
            era,
            "get_broker_filter",
            json!({"filter_id": filter_id}),
        )
        .await);
        assert_eq!(active["active_version"], version, "{active}");
        activated.push(filter_id.clone());
        activated_last = Some(filter_id.clone());

        // The record of the answer: the calls, and the previewed proposal.
        let uri = format!("doomberg://sessions/{sid}/record");
        let reply = http::modern(&up.url, &person, "resources/read", json!({"uri": uri})).await;
        let record: Value = serde_json::from_str(
            reply.json()["result"]["contents"][0]["text"]
                .as_str()
                .expect("record"),
        )
        .expect("json");
        let names: Vec<&str> = record["tool_calls"]
            .as_array()
            .expect("calls")
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        for expected in [
            "run_broker_filter",
            "post_broker_filter_version",
            "activate_broker_filter_version",
        ] {
            assert!(names.contains(&expected), "{expected} in {names:?}");
        }
        assert_eq!(record["proposal"]["pipeline"], pipeline, "{record}");
        assert_eq!(
            record["proposal"]["filter_id"],
            filter_id.as_str(),
            "{record}"
        );
        // Writing to another filter from this session is refused.
        let other = ok(&call(
            person.clone(),
            era,
            "post_filter",
            json!({"name": format!("other ({era})"), "group_id": group, "stream_id": "ztf-public"}),
        )
        .await);
        let refused = call(
            agent.clone(),
            era,
            "post_broker_filter_version",
            json!({"filter_id": other["filter_id"], "pipeline": pipeline}),
        )
        .await;
        assert_eq!(
            common::tool_error(&refused)["error"],
            "SUBJECT_MISMATCH",
            "{refused}"
        );
        ok(&call(agent.clone(), era, "session_close", json!({})).await);
    }

    // Alerts ingested after activation pass through the active versions:
    // matches appear, and only of the newly ingested night.
    ingest("v4.01");
    let later: std::collections::BTreeSet<String> = common::astro::listed()
        .into_iter()
        .filter(|l| l.file.starts_with("v4.01/"))
        .map(|l| l.candid.to_string())
        .collect();
    ok(&call(
        up.human.clone(),
        "modern",
        "session_context",
        json!({"prompt": "check matches"}),
    )
    .await);
    for filter_id in activated {
        let read = ok(&call(
            up.human.clone(),
            "modern",
            "get_broker_filter",
            json!({"filter_id": filter_id, "matches_limit": 200}),
        )
        .await);
        let matched: Vec<&str> = read["latest_matches"]
            .as_array()
            .expect("matches")
            .iter()
            .filter_map(|m| m["candid"].as_str())
            .collect();
        assert!(
            !matched.is_empty(),
            "the active version matched nothing new: {read}"
        );
        for candid in matched {
            assert!(
                later.contains(candid),
                "{candid} was in the archive before activation"
            );
        }
    }

    // In a session on the filter: deactivate it, then delete it; each
    // answer validates against the output schema the agent is offered.
    let filter_id = activated_last.expect("a filter was activated");
    let opened = ok(&call(
        up.human.clone(),
        "modern",
        "session_context",
        json!({"prompt": "retire it", "subject_kind": "filter", "subject_id": filter_id}),
    )
    .await);
    ok(&call(
        up.agent.clone(),
        "modern",
        "session_context",
        json!({"prompt": "joining", "session_id": opened["session_id"]}),
    )
    .await);
    // Its resource can be subscribed to (a watch hears of new matches);
    // a filter that is not there cannot.
    let subscribe = |uri: String| {
        let url = up.url.clone();
        let auth = format!("Bearer {}", up.agent);
        async move {
            let body = json!({"jsonrpc": "2.0", "id": 9, "method": "resources/subscribe",
                              "params": {"uri": uri}});
            let reply = http::request(
                &url,
                "POST",
                "/mcp",
                &[
                    ("Authorization", auth.as_str()),
                    ("Content-Type", "application/json"),
                    ("Accept", "application/json, text/event-stream"),
                    ("MCP-Protocol-Version", "2025-06-18"),
                ],
                body.to_string().as_bytes(),
            )
            .await;
            assert_eq!(reply.status, 200, "{}", reply.text());
            reply.json()
        }
    };
    let heard = subscribe(format!("doomberg://filters/{filter_id}")).await;
    assert_eq!(heard["result"], json!({}), "{heard}");
    let unknown =
        subscribe("doomberg://filters/00000000-0000-4000-8000-000000000000".to_owned()).await;
    assert!(unknown["error"].is_object(), "{unknown}");
    let offered = tools_of(&up, &up.agent).await;
    for (tool, args) in [
        ("delete_broker_filter", json!({"filter_id": filter_id})),
        ("deactivate_broker_filter", json!({"filter_id": filter_id})),
        ("delete_broker_filter", json!({"filter_id": filter_id})),
    ] {
        let schema = offered
            .iter()
            .find(|t| t["name"] == tool)
            .and_then(|t| t.get("outputSchema"))
            .unwrap_or_else(|| panic!("{tool} offered with an output schema"));
        let validator = jsonschema::validator_for(schema).expect("a JSON Schema");
        let result = call(up.agent.clone(), "modern", tool, args).await;
        if result["isError"] == true {
            // Deleting a running filter is refused, and says what to do.
            assert_eq!(
                common::tool_error(&result)["error"],
                "FILTER_ACTIVE",
                "{result}"
            );
            continue;
        }
        let structured = &result["structuredContent"];
        assert!(
            validator.is_valid(structured),
            "{tool}: {structured} does not validate"
        );
    }
}
