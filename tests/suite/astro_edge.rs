//! The astronomy tools through the MCP edge, on SQLite and PostgreSQL, with
//! the real alerts and catalogs loaded: schemas listed, the story
//! session_context → list_brokers → get_broker_alerts →
//! get_broker_alert_photometry → crossmatch_broker_catalogs (plus
//! convert_time and get_alert_schema) in both protocol eras, every URI the
//! answers hand out read back with resources/read, the bad-input table as
//! tool errors, no broker credential in any response, and the light curve
//! checked against fastavro's reading of the same files.

use crate::common;

use common::astro;
use common::harness::{StackBuilder, TestStack};
use common::http::{self, Reply};
use ithaca::serve::BrokerArgs;
use ithaca::services::Service;
use ithaca_proto::auth::v1 as apb;
use serde_json::{Value, json};

/// The Kafka password and host of the configured broker: no response may
/// carry either.
const SECRET: &str = "s3cret-kafka-password";
const ALTDATA_HOST: &str = "kafka.fink.example";

struct Stack {
    url: String,
    agent: String,
    _stack: TestStack,
}

#[derive(Clone)]
enum Store {
    Sqlite,
    Postgres(String, String),
}

/// Auth, session and the broker behind the edge, started by the harness,
/// with the real alerts and catalogs ingested by `ithaca ingest` and a
/// broker configured by `ithaca brokers add` with a credential.
async fn stack(store: Store) -> Stack {
    let mut builder = StackBuilder::new()
        .services(&[Service::Auth, Service::Session, Service::Broker])
        .broker(BrokerArgs {
            ztf_schema_dir: Some(astro::schema_dir()),
        })
        .edge(|e| {
            e.backend_timeout_ms = 20_000;
            e.key_cache_ms = 1000;
        });
    if let Store::Postgres(url, prefix) = &store {
        builder = builder.postgres(url, prefix);
    }
    let stack = builder.start().await;
    stack.ingest_ztf(&[astro::alerts_dir()]).await;
    for name in ["hipparcos2_hp_le_6.0.csv", "openngc_galaxies_z_le_0.01.csv"] {
        stack
            .ingest_catalog(astro::data().join("catalogs").join(name))
            .await;
    }
    stack
        .add_broker(
            "fink",
            "Fink (alerts only)",
            &["alerts"],
            json!({"bootstrap": ALTDATA_HOST, "username": "ithaca"}),
            SECRET,
        )
        .await;
    let agent = stack.key(&["data:read"], apb::Actor::Agent).await;
    Stack {
        url: stack.url.clone(),
        agent,
        _stack: stack,
    }
}

/// One MCP exchange in either era; every reply is checked for credentials.
struct Client<'a> {
    s: &'a Stack,
    /// `None`: 2026-07-28 with `_meta` and headers; `Some(v)`: the legacy
    /// profile at version `v` (after `initialize`).
    legacy: Option<&'static str>,
}

impl Client<'_> {
    async fn rpc(&self, method: &str, mut params: Value) -> Value {
        let auth = format!("Bearer {}", self.s.agent);
        let mut headers = vec![
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        let name = params
            .get("name")
            .or_else(|| params.get("uri"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        match self.legacy {
            Some(v) => headers.push(("MCP-Protocol-Version", v)),
            None => {
                params["_meta"] = json!({
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": {},
                    "io.modelcontextprotocol/clientInfo": {"name": "astro-test", "version": "1"},
                });
                headers.push(("MCP-Protocol-Version", "2026-07-28"));
                headers.push(("Mcp-Method", method));
                if let Some(n) = &name {
                    headers.push(("Mcp-Name", n.as_str()));
                }
            }
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let reply: Reply = http::request(
            &self.s.url,
            "POST",
            "/mcp",
            &headers,
            body.to_string().as_bytes(),
        )
        .await;
        let text = reply.text();
        assert_eq!(reply.status, 200, "{method}: {text}");
        assert!(
            !text.contains(SECRET) && !text.contains(ALTDATA_HOST),
            "{method} leaked a broker credential: {text}"
        );
        let v = reply.json();
        assert!(v.get("error").is_none(), "{method}: {v}");
        v["result"].clone()
    }

    async fn call(&self, tool: &str, args: Value) -> Value {
        self.rpc("tools/call", json!({"name": tool, "arguments": args}))
            .await
    }

    /// A successful tool call's structured content.
    async fn ok(&self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args).await;
        assert_eq!(r["isError"], false, "{tool}: {r}");
        r["structuredContent"].clone()
    }

    /// A refused tool call's structured error.
    async fn refused(&self, tool: &str, args: Value) -> Value {
        let r = self.call(tool, args).await;
        assert_eq!(r["isError"], true, "{tool} should be refused: {r}");
        common::tool_error(&r)
    }

    async fn read(&self, uri: &str) -> Value {
        let r = self.rpc("resources/read", json!({"uri": uri})).await;
        let contents = r["contents"].as_array().expect("contents");
        assert_eq!(contents.len(), 1, "{uri}: {r}");
        assert_eq!(contents[0]["uri"], uri);
        contents[0].clone()
    }
}

async fn story(s: &Stack, legacy: Option<&'static str>) {
    let c = Client { s, legacy };
    if let Some(v) = legacy {
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": v, "capabilities": {}, "clientInfo": {"name": "legacy", "version": "1"}}});
        let auth = format!("Bearer {}", s.agent);
        let reply = http::request(
            &s.url,
            "POST",
            "/mcp",
            &[
                ("Authorization", auth.as_str()),
                ("Content-Type", "application/json"),
                ("Accept", "application/json, text/event-stream"),
            ],
            init.to_string().as_bytes(),
        )
        .await;
        assert_eq!(reply.status, 200, "{}", reply.text());
    }

    // Every tool is listed with its schemas.
    let tools = c.rpc("tools/list", json!({})).await["tools"]
        .as_array()
        .expect("tools")
        .clone();
    for name in [
        "list_brokers",
        "get_broker_alerts",
        "get_broker_alert_photometry",
        "crossmatch_broker_catalogs",
        "convert_time",
        "get_alert_schema",
    ] {
        let t = tools
            .iter()
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed"));
        assert!(t["inputSchema"]["properties"].is_object(), "{name}: {t}");
        assert!(t["outputSchema"].is_object(), "{name}: {t}");
        assert_eq!(t["annotations"]["readOnlyHint"], true, "{name}");
    }
    let alerts_tool = tools
        .iter()
        .find(|t| t["name"] == "get_broker_alerts")
        .expect("listed");
    for arg in [
        "broker_id",
        "objectId",
        "ra",
        "dec",
        "radius_arcsec",
        "jd_start",
        "jd_end",
        "candid",
        "full",
    ] {
        assert!(
            alerts_tool["inputSchema"]["properties"][arg].is_object(),
            "get_broker_alerts takes {arg}"
        );
    }
    assert_eq!(alerts_tool["inputSchema"]["required"], json!(["broker_id"]));
    let templates = c.rpc("resources/templates/list", json!({})).await;
    let templates = templates.to_string();
    for t in [
        "doomberg://brokers/{broker_id}/alerts/{candid}",
        "doomberg://brokers/{broker_id}/objects/{objectId}/lightcurve",
        "doomberg://brokers/{broker_id}/objects/{objectId}/lightcurve.svg",
        "doomberg://brokers/{broker_id}/alerts/{candid}/cutouts/{kind}.png",
    ] {
        assert!(templates.contains(t), "{t} in {templates}");
    }

    let opened = c
        .ok(
            "session_context",
            json!({"prompt": "What did ZTF see of ZTF17aadcuwj?"}),
        )
        .await;
    assert_eq!(opened["status"], "open");

    let brokers = c.ok("list_brokers", json!({})).await;
    let list = brokers["brokers"].as_array().expect("brokers");
    let archive = list
        .iter()
        .find(|b| b["broker_id"] == "ztf-archive")
        .expect("archive");
    assert_eq!(
        archive["operations"],
        json!(["alerts", "photometry", "crossmatch"])
    );
    assert_eq!(archive["alerts"], 40);
    let fink = list
        .iter()
        .find(|b| b["broker_id"] == "fink")
        .expect("fink");
    assert_eq!(fink["credential_configured"], true);
    assert_eq!(fink["operations"], json!(["alerts"]));
    let read = c
        .read(brokers["brokers"][0]["uri"].as_str().expect("uri"))
        .await;
    assert!(
        read["text"]
            .as_str()
            .is_some_and(|t| t.contains("ztf-archive"))
    );

    // Alerts of an object, trimmed; the alert resource has the whole packet.
    let found = c
        .ok(
            "get_broker_alerts",
            json!({"broker_id": "ztf-archive", "objectId": "ZTF17aadcuwj"}),
        )
        .await;
    assert_eq!(found["count"], 1);
    let alert = &found["alerts"][0];
    assert_eq!(
        alert["candid"], "2475433850315015009",
        "candids are strings: they exceed 2^53"
    );
    assert_eq!(alert["band"], "g");
    assert_eq!(alert["history"]["prv_detections"], 37);
    assert!(alert.get("packet").is_none(), "trimmed");
    let packet = c.read(alert["uri"].as_str().expect("alert uri")).await;
    let packet: Value = serde_json::from_str(packet["text"].as_str().expect("json")).expect("json");
    assert_eq!(
        packet["packet"]["prv_candidates"].as_array().map(Vec::len),
        Some(65)
    );
    // A cone around it, bounded in time, then unbounded with advice.
    let (ra, dec, jd) = (
        alert["ra"].clone(),
        alert["dec"].clone(),
        alert["jd"].as_f64().expect("jd"),
    );
    let cone = c
        .ok("get_broker_alerts", json!({"broker_id": "ztf-archive", "ra": ra, "dec": dec, "radius_arcsec": 5, "jd_start": jd - 30.0, "jd_end": jd + 1.0}))
        .await;
    assert_eq!(cone["count"], 1);
    assert!(cone.get("suggestion").is_none(), "{cone}");
    let open_cone = c
        .ok(
            "get_broker_alerts",
            json!({"broker_id": "ztf-archive", "ra": ra, "dec": dec, "radius_arcsec": 5}),
        )
        .await;
    assert_eq!(open_cone["scanned"], 1);
    assert!(
        open_cone["suggestion"]
            .as_str()
            .is_some_and(|s| s.contains("jd_start"))
    );

    // The light curve, its JSON resource and its plot.
    let lc = c
        .ok(
            "get_broker_alert_photometry",
            json!({"broker_id": "ztf-archive", "objectId": "ZTF17aadcuwj"}),
        )
        .await;
    assert_eq!(lc["time_scale"], "UTC");
    assert_eq!(lc["detections"], 38);
    // The packets' 30 days are not the object's history, and says so.
    assert!(
        lc["survey_first_detection_utc"]
            .as_str()
            .is_some_and(|t| t.starts_with("2017")),
        "{lc}"
    );
    assert_eq!(lc["survey_detections"], 894);
    let note = lc["history_note"].as_str().expect("history_note");
    assert!(
        note.contains("30 days") && note.contains("2017") && note.contains("difference magnitude"),
        "{note}"
    );
    assert!(
        lc["points"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["is_limit"] == true))
    );
    // A default page of the newest 100 points; older pages by cursor, in
    // time order, none lost or repeated.
    let total = lc["total"].as_i64().expect("total");
    assert_eq!(
        lc["count"].as_i64(),
        Some(total.min(100)),
        "{}",
        lc["count"]
    );
    let whole = c
        .ok(
            "get_broker_alert_photometry",
            json!({"broker_id": "ztf-archive", "objectId": "ZTF17aadcuwj", "limit": 5000}),
        )
        .await;
    assert_eq!(whole["truncated"], false);
    assert_eq!(whole["count"].as_i64(), Some(total));
    let jds = |page: &Value| -> Vec<f64> {
        page["points"]
            .as_array()
            .map(|p| p.iter().filter_map(|p| p["jd"].as_f64()).collect())
            .unwrap_or_default()
    };
    let mut paged: Vec<f64> = Vec::new();
    let mut args = json!({"broker_id": "ztf-archive", "objectId": "ZTF17aadcuwj", "limit": 10});
    loop {
        let page = c.ok("get_broker_alert_photometry", args.clone()).await;
        assert_eq!(page["total"].as_i64(), Some(total));
        let mut older = jds(&page);
        assert!(older.len() <= 10);
        older.extend(paged);
        paged = older;
        match page["next_cursor"].as_str() {
            Some(cursor) => {
                assert_eq!(page["truncated"], true);
                args["cursor"] = json!(cursor);
            }
            None => break,
        }
    }
    assert!(total > 10, "the test pages: {total} points");
    assert_eq!(paged, jds(&whole));
    let json_res = c.read(lc["uri"].as_str().expect("uri")).await;
    assert_eq!(json_res["mimeType"], "application/json");
    let svg = c.read(lc["svg_uri"].as_str().expect("svg uri")).await;
    assert_eq!(svg["mimeType"], "image/svg+xml");
    let svg_text = svg["text"].as_str().expect("svg text");
    assert!(svg_text.starts_with("<svg") && svg_text.contains("days since first detection"));
    if let Some(path) = std::env::var_os("ITHACA_WRITE_LIGHTCURVE_SVG") {
        std::fs::write(path, svg_text).expect("write svg");
    }

    // Is it on a known star or galaxy? Then GW170817's host.
    let x = c.ok("crossmatch_broker_catalogs", json!({"broker_id": "ztf-archive", "candid": "2475433850315015009", "radius_arcsec": 30})).await;
    assert_eq!(x["epoch_jd"].as_f64(), Some(jd));
    let host = c
        .ok("crossmatch_broker_catalogs", json!({"broker_id": "ztf-archive", "ra": 197.450354, "dec": -23.381483, "radius_arcsec": 60}))
        .await;
    assert_eq!(host["matches"][0]["id"], "NGC4993");
    let t = c
        .ok("convert_time", json!({"value": "2017-08-17T12:41:04Z"}))
        .await;
    assert_eq!(
        (t["interpreted_as"].as_str(), t["scale"].as_str()),
        (Some("iso"), Some("UTC"))
    );
    let schema = c
        .ok("get_alert_schema", json!({"search": "forcediffimflux"}))
        .await;
    assert_eq!(schema["source"], "ingested");
    assert!(
        schema["paths"].as_array().is_some_and(|p| p
            .iter()
            .any(|p| p["path"] == "fp_hists?[].forcediffimflux?")),
        "{schema}"
    );

    // Bad input: tool errors that name the field.
    let cases = [
        (
            "get_broker_alerts",
            json!({"broker_id": "nope", "objectId": "ZTF17aadcuwj"}),
            "broker_id:",
        ),
        (
            "get_broker_alert_photometry",
            json!({"broker_id": "fink", "objectId": "ZTF17aadcuwj"}),
            "broker_id:",
        ),
        (
            "get_broker_alerts",
            json!({"broker_id": "ztf-archive", "ra": 1, "dec": 1, "radius_arcsec": -1}),
            "radius_arcsec:",
        ),
        (
            "get_broker_alerts",
            json!({"broker_id": "ztf-archive", "ra": 1, "dec": 1, "radius_arcsec": 36000}),
            "radius_arcsec:",
        ),
        (
            "get_broker_alerts",
            json!({"broker_id": "ztf-archive", "candid": "12ab"}),
            "candid:",
        ),
        (
            "get_broker_alert_photometry",
            json!({"broker_id": "ztf-archive", "objectId": "ZTF99zzzzzzz"}),
            "objectId:",
        ),
        (
            "get_broker_alert_photometry",
            json!({"broker_id": "ztf-archive", "objectId": "ZTF17aadcuwj", "limit": 0}),
            "limit:",
        ),
        (
            "get_broker_alert_photometry",
            json!({"broker_id": "ztf-archive", "objectId": "ZTF17aadcuwj", "cursor": "soon"}),
            "cursor:",
        ),
        (
            "crossmatch_broker_catalogs",
            json!({"broker_id": "ztf-archive", "ra": 1, "dec": 1, "radius_arcsec": 0}),
            "radius_arcsec:",
        ),
        ("convert_time", json!({"value": "tomorrow"}), "value:"),
    ];
    for (tool, args, field) in cases {
        let err = c.refused(tool, args.clone()).await;
        let message = err["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(field), "{tool} {args}: {err}");
        assert!(
            err["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{err}"
        );
    }
    let err = c
        .refused(
            "get_broker_alerts",
            json!({"broker_id": "ztf-archive", "candid": 2475433850315015009u64, "x": 1}),
        )
        .await;
    assert!(
        err["message"]
            .as_str()
            .is_some_and(|m| m.contains("candid") || m.contains('x')),
        "{err}"
    );
}

/// The broker's light curve (through the edge) against fastavro's reading
/// of the same files by tests/astro/lightcurve_check.py.
async fn cross_check(s: &Stack) {
    let python = match std::env::var("ITHACA_FASTAVRO_PYTHON") {
        Ok(p) if !p.is_empty() => p,
        _ => {
            assert!(
                std::env::var_os("ITHACA_TEST_REQUIRE_FASTAVRO").is_none(),
                "ITHACA_TEST_REQUIRE_FASTAVRO is set but ITHACA_FASTAVRO_PYTHON is not"
            );
            eprintln!(
                "NOT RUN: the fastavro cross-check needs ITHACA_FASTAVRO_PYTHON (tests/astro/run.sh sets it)"
            );
            return;
        }
    };
    let c = Client { s, legacy: None };
    c.ok(
        "session_context",
        json!({"prompt": "cross-check light curves"}),
    )
    .await;
    for object in [
        "ZTF17aadcuwj",
        "ZTF19aainpua",
        "ZTF18abudxnw",
        "ZTF17aaacxxf",
    ] {
        let out = std::process::Command::new(&python)
            .arg("tests/astro/lightcurve_check.py")
            .arg(object)
            .arg(astro::alerts_dir())
            .output()
            .expect("run lightcurve_check.py");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want: Value = serde_json::from_slice(&out.stdout).expect("json");
        let got = c
            .ok(
                "get_broker_alert_photometry",
                json!({"broker_id": "ztf-archive", "objectId": object}),
            )
            .await;
        let (want, got) = (
            want["points"].as_array().expect("points"),
            got["points"].as_array().expect("points"),
        );
        assert_eq!(got.len(), want.len(), "{object}: point count");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g["kind"], w["kind"], "{object}: {g} vs {w}");
            assert_eq!(g["fid"], w["fid"], "{object}");
            assert_eq!(g["is_limit"], w["is_limit"], "{object}");
            assert_eq!(
                g.get("candid").unwrap_or(&Value::Null),
                &w["candid"],
                "{object}"
            );
            let close = |a: &Value, b: &Value, tol: f64| match (a.as_f64(), b.as_f64()) {
                (Some(x), Some(y)) => (x - y).abs() <= tol,
                (None, None) => true,
                _ => false,
            };
            assert!(close(&g["jd"], &w["jd"], 1e-9), "{object}: jd {g} vs {w}");
            assert!(
                close(&g["mag"], &w["mag"], 1e-6),
                "{object}: mag {g} vs {w}"
            );
            assert!(
                close(
                    g.get("mag_err").unwrap_or(&Value::Null),
                    &w["mag_err"],
                    1e-6
                ),
                "{object}: err {g} vs {w}"
            );
        }
    }
}

async fn run(store: Store) {
    let s = stack(store).await;
    story(&s, None).await;
    story(&s, Some("2025-06-18")).await;
    story(&s, Some("2025-11-25")).await;
    cross_check(&s).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn astronomy_story_through_the_edge_and_lightcurve_matches_fastavro() {
    run(Store::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn astronomy_story_through_the_edge_and_lightcurve_matches_fastavro_postgres() {
    let Some(pg) = common::postgres(
        "astronomy_story_through_the_edge_and_lightcurve_matches_fastavro_postgres",
    ) else {
        return;
    };
    let prefix = common::unique_schema("astro_edge");
    run(Store::Postgres(pg.clone(), prefix.clone())).await;
    for service in ["auth", "session", "broker"] {
        common::drop_schema(&pg, &format!("{prefix}_{service}")).await;
    }
}
