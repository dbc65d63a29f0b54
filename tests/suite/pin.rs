//! The `_meta` session pin (`io.ithaca/session_id`) through `ithaca up`
//! (issue 28, item 9): with several open sessions, every session-scoped
//! tool called with a pin to a session that is not the key's current one
//! acts on the pinned session, and the current session hears nothing.
//! `session_close` used to close the key's current session instead.
//!
//! One table names every tool an agent is offered in the pinned sessions
//! (the test fails when a tool is listed that the table lacks), with real
//! arguments, and what each must leave in the pinned trace beyond its own
//! `tool_call`.

use crate::common;

use common::Up;
use common::http;
use ithaca_kit::principal::Principal;
use ithaca_proto::session::v1 as spb;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// Which of the pinned sessions a row's call is pinned to.
#[derive(Clone, Copy, Debug)]
enum Pinned {
    /// An agent's own session that is not its current one.
    Plain,
    /// A session a person opened on a filter (its write tools are offered
    /// there only).
    Filter,
    /// A session a person opened on a GCN event.
    Gcn,
}

/// What a call must leave in the pinned session's trace besides its
/// `tool_call`: an event of this type whose payload contains this text.
type Effect = Option<(&'static str, &'static str)>;

struct Row {
    tool: &'static str,
    arguments: Value,
    pinned: Pinned,
    effect: Effect,
}

fn row(tool: &'static str, arguments: Value, pinned: Pinned, effect: Effect) -> Row {
    Row {
        tool,
        arguments,
        pinned,
        effect,
    }
}

async fn call(up: &Up, token: &str, tool: &str, arguments: Value, pin: Option<&str>) -> Value {
    let mut params = json!({"name": tool, "arguments": arguments});
    if let Some(pin) = pin {
        params["_meta"] = json!({"io.ithaca/session_id": pin});
    }
    let reply = http::modern(&up.url, token, "tools/call", params).await;
    assert_eq!(reply.status, 200, "{tool}: {}", reply.text());
    let result = reply.json()["result"].clone();
    assert!(result.is_object(), "{tool}: {}", reply.text());
    result
}

async fn ok(up: &Up, token: &str, tool: &str, arguments: Value) -> Value {
    let result = call(up, token, tool, arguments, None).await;
    assert_eq!(result["isError"], false, "{tool}: {result}");
    result["structuredContent"].clone()
}

async fn tools_pinned(up: &Up, token: &str, pin: &str) -> BTreeSet<String> {
    let reply = http::modern(
        &up.url,
        token,
        "tools/list",
        json!({"_meta": {"io.ithaca/session_id": pin}}),
    )
    .await;
    assert_eq!(reply.status, 200, "{}", reply.text());
    reply.json()["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// A session's trace and status, read over gRPC from the stack's session
/// service.
struct Traces {
    client: common::SessionClient,
}

impl Traces {
    fn of(up: &Up) -> Traces {
        let text = std::fs::read_to_string(up.data_dir.join("stack.json")).expect("stack.json");
        let info: Value = serde_json::from_str(&text).expect("json");
        let url = info["session_url"].as_str().expect("session url");
        let tenant = info["tenant_id"].as_str().expect("tenant id");
        Traces {
            client: common::session_client(url, Principal::system(tenant)),
        }
    }

    async fn events(&self, session: &str) -> Vec<spb::TraceEvent> {
        self.client
            .clone()
            .read_events(spb::ReadEventsRequest {
                session_id: session.to_owned(),
                after_seq: 0,
                limit: Some(1000),
            })
            .await
            .expect("read")
            .into_inner()
            .events
    }

    async fn status(&self, session: &str) -> String {
        self.client
            .clone()
            .get_session(spb::GetSessionRequest {
                session_id: session.to_owned(),
            })
            .await
            .expect("session")
            .into_inner()
            .status
    }
}

fn payload(event: &spb::TraceEvent) -> Value {
    ithaca_kit::json::from_struct(event.payload.clone().unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_session_scoped_tool_acts_on_the_pinned_session() {
    let up = common::up(&[]);
    up.ingest("gcn", &[common::gcn::fermi_svom_dir()]);
    let traces = Traces::of(&up);
    let (agent, human) = (up.agent.clone(), up.human.clone());

    // A person's filter, and sessions they open on it and on a GCN event.
    ok(&up, &human, "session_context", json!({"prompt": "set up"})).await;
    let targets = ok(&up, &human, "get_filter_targets", json!({})).await;
    let group = targets["groups"][0]["group_id"].clone();
    let filter = ok(
        &up,
        &human,
        "post_filter",
        json!({"name": "pinned", "group_id": group, "stream_id": "ztf-public"}),
    )
    .await;
    let filter_id = filter["filter_id"].as_str().expect("filter_id").to_owned();
    ok(&up, &agent, "session_context", json!({"prompt": "look"})).await;
    let listed = ok(&up, &agent, "get_gcn_events", json!({"limit": 1})).await;
    let dateobs = listed["events"][0]["dateobs"]
        .as_str()
        .unwrap_or_else(|| panic!("an event: {listed}"))
        .to_owned();
    let on_filter = ok(
        &up,
        &human,
        "session_context",
        json!({"prompt": "on the filter", "subject_kind": "filter", "subject_id": filter_id}),
    )
    .await;
    let on_event = ok(
        &up,
        &human,
        "session_context",
        json!({"prompt": "on the event", "subject_kind": "gcn_event", "subject_id": dateobs}),
    )
    .await;

    // The agent's own session P, then its current session A.
    let plain = ok(
        &up,
        &agent,
        "session_context",
        json!({"prompt": "pinned conversation"}),
    )
    .await;
    let current = ok(
        &up,
        &agent,
        "session_context",
        json!({"prompt": "current conversation"}),
    )
    .await;
    let id = |v: &Value| v["session_id"].as_str().expect("session_id").to_owned();
    let (plain, on_filter, on_event, current) =
        (id(&plain), id(&on_filter), id(&on_event), id(&current));
    // Objects the table's calls refer to, made in the current session.
    let run = ok(
        &up,
        &agent,
        "run_skill",
        json!({"skill_id": "vol.realized", "inputs": {"symbol": "AAPL", "window": 21}}),
    )
    .await;
    let run_id = run["run_id"].as_str().expect("run id").to_owned();
    let artifact_id = run["artifacts"][0]["artifact_id"].clone();
    let strategy = ok(
        &up,
        &agent,
        "propose_strategy",
        json!({"name": "m", "universe": ["MSFT"], "lookback": 126, "rebalance": 21}),
    )
    .await;
    let strategy_id = strategy["strategy_id"].clone();

    let pipeline = json!([{"$match": {"candidate.magpsf": {"$lt": 18.5}}}]);
    use Pinned::{Filter, Gcn, Plain};
    let table = vec![
        // session: the tools that act on "the" session.
        row(
            "record_reasoning",
            json!({"text": "pinned reasoning"}),
            Plain,
            Some(("reasoning", "pinned reasoning")),
        ),
        // broker: market data
        row("list_symbols", json!({}), Plain, None),
        row("list_datasets", json!({}), Plain, None),
        row(
            "get_price_history",
            json!({"symbol": "MSFT", "start": "2013-01-02"}),
            Plain,
            None,
        ),
        // broker: fundamentals (nothing ingested here: an unknown company
        // still leaves its call in the pinned trace)
        row("get_fundamentals", json!({"symbol": "MSFT"}), Plain, None),
        row("get_filings", json!({"symbol": "MSFT"}), Plain, None),
        row(
            "get_insider_activity",
            json!({"symbol": "MSFT"}),
            Plain,
            None,
        ),
        row(
            "screen_peers",
            json!({"symbols": ["MSFT", "IBM"], "date": "2013-06-28"}),
            Plain,
            None,
        ),
        // broker: astronomy
        row("list_brokers", json!({}), Plain, None),
        row(
            "get_broker_alerts",
            json!({"broker_id": "ztf-archive", "ra": 197.45, "dec": -23.38, "radius_arcsec": 5}),
            Plain,
            None,
        ),
        row(
            "get_broker_alert_photometry",
            json!({"broker_id": "ztf-archive", "objectId": "ZTF00nothere"}),
            Plain,
            None,
        ),
        row(
            "crossmatch_broker_catalogs",
            json!({"broker_id": "ztf-archive", "ra": 197.45, "dec": -23.38, "radius_arcsec": 60}),
            Plain,
            None,
        ),
        row(
            "convert_time",
            json!({"value": "2017-08-17T12:41:04Z"}),
            Plain,
            None,
        ),
        row("get_alert_schema", json!({"search": "magpsf"}), Plain, None),
        // broker: filters
        row("get_filter_targets", json!({}), Plain, None),
        row("get_counterpart_search_defaults", json!({}), Plain, None),
        row(
            "post_filter",
            json!({"name": "made while pinned", "group_id": group, "stream_id": "ztf-public"}),
            Plain,
            None,
        ),
        row(
            "run_broker_filter",
            json!({"filter_id": filter_id, "pipeline": pipeline}),
            Filter,
            None,
        ),
        row(
            "post_broker_filter_version",
            json!({"filter_id": filter_id, "pipeline": pipeline}),
            Filter,
            None,
        ),
        row(
            "validate_broker_filter_version",
            json!({"filter_id": filter_id, "version": 1}),
            Filter,
            None,
        ),
        row(
            "activate_broker_filter_version",
            json!({"filter_id": filter_id, "version": 1}),
            Filter,
            None,
        ),
        row(
            "get_broker_filter",
            json!({"filter_id": filter_id}),
            Filter,
            None,
        ),
        row(
            "diff_broker_filter_versions",
            json!({"filter_id": filter_id, "from_version": 1, "to_version": 1}),
            Filter,
            None,
        ),
        row(
            "list_broker_filters",
            json!({"search": "pinned"}),
            Plain,
            None,
        ),
        row(
            "deactivate_broker_filter",
            json!({"filter_id": filter_id}),
            Filter,
            None,
        ),
        // Last of the filter's rows: nothing after it reads the filter.
        row(
            "delete_broker_filter",
            json!({"filter_id": filter_id}),
            Filter,
            None,
        ),
        // broker: GCN
        row("get_gcn_events", json!({"limit": 2}), Plain, None),
        row(
            "get_gcn_event",
            json!({"dateobs": dateobs, "include_bodies": false}),
            Plain,
            None,
        ),
        row(
            "get_gcn_event_extractions",
            json!({"dateobs": dateobs}),
            Plain,
            None,
        ),
        row(
            "get_gcn_event_comments",
            json!({"dateobs": dateobs}),
            Plain,
            None,
        ),
        row(
            "get_gcn_circular",
            json!({"circular_id": 34397}),
            Plain,
            None,
        ),
        row(
            "search_gcn_circulars",
            json!({"query": "afterglow"}),
            Plain,
            None,
        ),
        row(
            "post_gcn_event_comment",
            json!({"dateobs": dateobs, "text": "pinned comment"}),
            Gcn,
            None,
        ),
        // skills
        row("search_skills", json!({"query": "volatility"}), Plain, None),
        row(
            "describe_skill",
            json!({"skill_id": "vol.realized"}),
            Plain,
            None,
        ),
        row(
            "run_skill",
            json!({"skill_id": "vol.realized", "inputs": {"symbol": "MSFT", "window": 21}}),
            Plain,
            Some(("run_transition", "succeeded")),
        ),
        row("get_run", json!({"run_id": run_id}), Plain, None),
        row(
            "subscribe_run",
            json!({"run_id": run_id, "status": "queued", "wait_ms": 100}),
            Plain,
            None,
        ),
        row("cancel_run", json!({"run_id": run_id}), Plain, None),
        row(
            "get_artifact",
            json!({"artifact_id": artifact_id}),
            Plain,
            None,
        ),
        row(
            "propose_strategy",
            json!({"name": "pinned", "universe": ["IBM"], "lookback": 63, "rebalance": 21}),
            Plain,
            Some(("strategy_proposed", "pinned")),
        ),
        row(
            "get_strategy",
            json!({"strategy_id": strategy_id}),
            Plain,
            None,
        ),
        row(
            "promote_strategy",
            json!({"strategy_id": strategy_id, "mode": "paper"}),
            Plain,
            Some(("denial", "TRADING_DISABLED")),
        ),
        // approvals
        row("list_approvals", json!({}), Plain, None),
        row(
            "get_approval",
            json!({"approval_id": "00000000-0000-4000-8000-000000000000"}),
            Plain,
            None,
        ),
        // Last: it closes the pinned session.
        row(
            "session_close",
            json!({}),
            Plain,
            Some(("session_closed", "closed")),
        ),
    ];

    // The table covers every tool offered in the pinned sessions.
    let mut offered = BTreeSet::new();
    for pin in [&plain, &on_filter, &on_event] {
        offered.extend(tools_pinned(&up, &agent, pin).await);
    }
    offered.remove("session_context");
    let covered: BTreeSet<String> = table.iter().map(|r| r.tool.to_owned()).collect();
    assert_eq!(
        offered, covered,
        "every session-scoped tool needs a row (left: offered, right: in the table)"
    );

    let current_before = traces.events(&current).await.len();
    for row in &table {
        let pin = match row.pinned {
            Plain => &plain,
            Filter => &on_filter,
            Gcn => &on_event,
        };
        let before = traces.events(pin).await.len();
        let result = call(&up, &agent, row.tool, row.arguments.clone(), Some(pin)).await;
        if let Some(code) = result["isError"]
            .as_bool()
            .filter(|e| *e)
            .map(|_| common::tool_error(&result)["error"].clone())
        {
            assert_ne!(code, "no_active_session", "{}: {result}", row.tool);
        }
        // Work a call started may land a moment later (a run's
        // transitions): wait for the effect, bounded.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let new = loop {
            let all = traces.events(pin).await;
            let new: Vec<spb::TraceEvent> = all.into_iter().skip(before).collect();
            let effect_seen = row.effect.is_none_or(|(kind, text)| {
                new.iter()
                    .any(|e| e.r#type == kind && payload(e).to_string().contains(text))
            });
            if effect_seen || std::time::Instant::now() > deadline {
                break new;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        };
        assert!(
            new.iter()
                .any(|e| e.r#type == "tool_call" && payload(e)["name"] == row.tool),
            "{}: its tool_call is not in the pinned session {pin}: {result}",
            row.tool
        );
        if let Some((kind, text)) = row.effect {
            assert!(
                new.iter()
                    .any(|e| e.r#type == kind && payload(e).to_string().contains(text)),
                "{}: no {kind} event with {text:?} in the pinned session {pin}: {:?}\n{result}",
                row.tool,
                new.iter().map(|e| &e.r#type).collect::<Vec<_>>()
            );
        }
        let current_now = traces.events(&current).await;
        assert_eq!(
            current_now.len(),
            current_before,
            "{}: the current session heard a pinned call: {:?}",
            row.tool,
            current_now
                .iter()
                .skip(current_before)
                .map(|e| (&e.r#type, payload(e)))
                .collect::<Vec<_>>()
        );
    }
    assert_eq!(
        traces.status(&plain).await,
        "closed",
        "the pinned one closed"
    );
    assert_eq!(
        traces.status(&current).await,
        "open",
        "the current one stays open"
    );
}

/// A session a person opened is joined only by an explicit
/// `session_context` with its id (issue 26 §5). Once a key has joined it,
/// a call that names no session follows the key there, and its answer says
/// so (a second text block and `_meta` `io.ithaca/session`), since another
/// conversation on the same key may not know. A pinned call, and a call in
/// a session the key opened itself, carry no such note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_follows_the_key_into_a_joined_session_says_so() {
    let up = common::up(&[]);
    let (agent, human) = (up.agent.clone(), up.human.clone());
    const NOTICE: &str = "io.ithaca/session";

    // The agent's own session: nothing to say.
    ok(
        &up,
        &agent,
        "session_context",
        json!({"prompt": "my own work"}),
    )
    .await;
    let own = call(&up, &agent, "list_symbols", json!({}), None).await;
    assert_eq!(own["isError"], false, "{own}");
    assert!(own["_meta"][NOTICE].is_null(), "{own}");
    assert_eq!(own["content"].as_array().map(Vec::len), Some(1), "{own}");

    // A person opens a session; the agent's key is not moved into it.
    let theirs = ok(
        &up,
        &human,
        "session_context",
        json!({"prompt": "a person's question"}),
    )
    .await;
    let theirs = theirs["session_id"]
        .as_str()
        .expect("session_id")
        .to_owned();
    let still_own = call(&up, &agent, "list_symbols", json!({}), None).await;
    assert!(still_own["_meta"][NOTICE].is_null(), "{still_own}");

    // The agent joins it explicitly; its next unpinned call is recorded
    // there, and says so.
    ok(
        &up,
        &agent,
        "session_context",
        json!({"session_id": theirs}),
    )
    .await;
    let followed = call(&up, &agent, "list_symbols", json!({}), None).await;
    assert_eq!(followed["isError"], false, "{followed}");
    assert_eq!(
        followed["_meta"][NOTICE]["session_id"],
        theirs.as_str(),
        "{followed}"
    );
    let note = followed["content"][1]["text"].as_str().unwrap_or("");
    assert!(
        note.contains(&theirs)
            && note.contains("session_context")
            && note.contains("io.ithaca/session_id"),
        "{note}"
    );
    // The first block and the structured result are still the tool's own.
    let first: Value = serde_json::from_str(followed["content"][0]["text"].as_str().unwrap_or(""))
        .expect("the first block is the result's JSON");
    assert_eq!(first, followed["structuredContent"]);

    // Pinned to it, the same call carries no note.
    let pinned = call(&up, &agent, "list_symbols", json!({}), Some(&theirs)).await;
    assert!(pinned["_meta"][NOTICE].is_null(), "{pinned}");
    assert_eq!(
        pinned["content"].as_array().map(Vec::len),
        Some(1),
        "{pinned}"
    );
}
