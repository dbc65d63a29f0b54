//! The skills service against real broker and session services (gRPC,
//! SQLite): each built-in skill checked against an independent computation
//! from the demo CSV, artifacts, the run trace, tenant isolation and the
//! bad-input table.

use crate::common;

use common::harness::{StackBuilder, TestStack};
use ithaca::ingest::IngestCommand;
use ithaca::serve::BrokerArgs;
use ithaca::services::Service;
use ithaca_kit::client::Outbound;
use ithaca_kit::json;
use ithaca_kit::principal::Principal;
use ithaca_proto::session::v1 as spb;
use ithaca_proto::skills::v1 as pb;
use ithaca_proto::skills::v1::skills_service_client::SkillsServiceClient;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

type Client = SkillsServiceClient<InterceptedService<Channel, Outbound>>;

/// The demo bars the stack loads, read here independently of the broker.
const DEMO: &[u8] = include_bytes!("../../data/demo/stocks_daily_ohlcv_2000-2013.csv.gz");

struct Stack {
    skills_url: String,
    session_url: String,
    broker_url: String,
    _stack: TestStack,
}

/// Where each service keeps its tables: SQLite files, or schemas of one
/// PostgreSQL database.
#[derive(Clone)]
enum Store {
    Sqlite,
    Postgres(String, String),
}

async fn stack() -> Stack {
    stack_on(Store::Sqlite).await
}

async fn stack_on(store: Store) -> Stack {
    stack_with_sec(store, &apple_companyfacts()).await
}

/// Apple's companyfacts JSON as EDGAR publishes it (the SEC fundamentals
/// every stack holds, for the fundamentals skills).
fn apple_companyfacts() -> Vec<u8> {
    std::fs::read(
        common::astro::data()
            .join("fundamentals")
            .join("companyfacts/CIK0000320193.json"),
    )
    .expect("Apple's companyfacts")
}

/// A stack of broker, session and skills, started by the harness, whose
/// broker holds the demo bars (loaded as `ithaca up` loads them), the ZTF
/// alerts, Apple's and Microsoft's filing indexes and the SEC companyfacts
/// document `companyfacts`, each sent by `ithaca ingest`.
async fn stack_with_sec(store: Store, companyfacts: &[u8]) -> Stack {
    let mut builder = StackBuilder::new()
        .services(&[Service::Broker, Service::Session, Service::Skills])
        .without_edge()
        .broker(BrokerArgs {
            ztf_schema_dir: Some(common::astro::schema_dir()),
        });
    if let Store::Postgres(url, prefix) = &store {
        builder = builder.postgres(url, prefix);
    }
    let stack = builder.start().await;
    // The real ZTF alerts, for the astronomy skill.
    stack.ingest_ztf(&[common::astro::alerts_dir()]).await;
    // Tickers map to CIKs from the filing indexes (companyfacts names
    // none), so the indexes go first.
    let submissions = common::astro::data().join("fundamentals/submissions");
    stack
        .ingest(IngestCommand::Sec {
            paths: ["CIK0000320193-2013-2023.json", "CIK0000789019-recent.json"]
                .map(|index| submissions.join(index))
                .to_vec(),
            target: stack.ingest_target(),
        })
        .await;
    let facts = stack.dir().join("CIK0000320193.json");
    std::fs::write(&facts, companyfacts).expect("write companyfacts");
    stack
        .ingest(IngestCommand::Sec {
            paths: vec![facts],
            target: stack.ingest_target(),
        })
        .await;
    Stack {
        skills_url: stack.url_of(Service::Skills),
        session_url: stack.url_of(Service::Session),
        broker_url: stack.url_of(Service::Broker),
        _stack: stack,
    }
}

fn client(url: &str, principal: Principal) -> Client {
    SkillsServiceClient::with_interceptor(
        ithaca_kit::client::channel(url).expect("url"),
        Outbound::new(common::key(), principal),
    )
}

/// Adjusted closes by symbol, read straight from the CSV.
fn closes() -> BTreeMap<String, Vec<(String, f64)>> {
    let mut gz = flate2::read::GzDecoder::new(DEMO);
    let mut text = String::new();
    std::io::Read::read_to_string(&mut gz, &mut text).expect("gunzip");
    let mut by_symbol: BTreeMap<String, Vec<(String, f64)>> = BTreeMap::new();
    for line in text.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        by_symbol
            .entry(f[0].to_owned())
            .or_default()
            .push((f[1].to_owned(), f[7].parse().expect("number")));
    }
    by_symbol
}

/// Run a skill and, for batch skills, wait (subscribe_run) until the run
/// has finished.
async fn run(c: &mut Client, skill: &str, inputs: Value) -> Result<pb::Run, tonic::Status> {
    let mut run = c
        .run_skill(pb::RunSkillRequest {
            skill_id: skill.into(),
            version: None,
            inputs: Some(json::to_struct(inputs)),
        })
        .await?
        .into_inner();
    for _ in 0..10 {
        if !matches!(run.status.as_str(), "queued" | "running") {
            break;
        }
        run = c
            .subscribe_run(pb::SubscribeRunRequest {
                run_id: run.run_id.clone(),
                status: Some(run.status.clone()),
                wait_ms: Some(10_000),
            })
            .await?
            .into_inner();
    }
    Ok(run)
}

fn outputs(run: &pb::Run) -> Value {
    json::from_struct(run.outputs.clone().expect("outputs"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_match_independent_computations() {
    computations(stack().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skills_match_independent_computations_postgres() {
    let Some(pg) = common::postgres("skills_match_independent_computations_postgres") else {
        return;
    };
    let prefix = common::unique_schema("skills");
    computations(stack_on(Store::Postgres(pg.clone(), prefix.clone())).await).await;
    for service in ["broker", "session", "skills"] {
        common::drop_schema(&pg, &format!("{prefix}_{service}")).await;
    }
}

async fn computations(s: Stack) {
    let mut c = client(&s.skills_url, common::agent("tenant-a", "agent-a"));
    let data = closes();

    // vol.realized: variance as E[x²] − E[x]², scaled to the sample variance.
    let aapl: Vec<f64> = data["AAPL"].iter().map(|(_, p)| *p).collect();
    let tail = &aapl[aapl.len() - 22..];
    let r: Vec<f64> = (1..tail.len())
        .map(|i| (tail[i] / tail[i - 1]).ln())
        .collect();
    let n = r.len() as f64;
    let mean_sq = r.iter().map(|x| x * x).sum::<f64>() / n;
    let mean = r.iter().sum::<f64>() / n;
    let expected = ((mean_sq - mean * mean) * n / (n - 1.0) * 252.0).sqrt();
    let v = run(
        &mut c,
        "vol.realized",
        json!({"symbol": "AAPL", "window": 21}),
    )
    .await
    .expect("run");
    assert_eq!(v.status, "succeeded");
    let got = outputs(&v)["volatility"].as_f64().expect("volatility");
    assert!((got - expected).abs() < 1e-9, "{got} vs {expected}");

    // returns.summary: CAGR and maximum drawdown of IBM, 2005-2010.
    let ibm: Vec<f64> = data["IBM"]
        .iter()
        .filter(|(d, _)| d.as_str() >= "2005-01-01" && d.as_str() <= "2010-12-31")
        .map(|(_, p)| *p)
        .collect();
    let cagr = (ibm[ibm.len() - 1] / ibm[0]).powf(252.0 / (ibm.len() - 1) as f64) - 1.0;
    let mut worst: f64 = 0.0;
    for i in 0..ibm.len() {
        let peak = ibm[..=i].iter().cloned().fold(f64::MIN, f64::max);
        worst = worst.max((peak - ibm[i]) / peak);
    }
    let summary = run(
        &mut c,
        "returns.summary",
        json!({"symbol": "IBM", "start": "2005-01-01", "end": "2010-12-31"}),
    )
    .await
    .expect("run");
    let o = outputs(&summary);
    assert!((o["cagr"].as_f64().expect("cagr") - cagr).abs() < 1e-9);
    assert!((o["max_drawdown"].as_f64().expect("mdd") - worst).abs() < 1e-9);

    // corr.peers: Pearson of aligned log returns, MSFT against IBM.
    let ibm_all: BTreeMap<&str, f64> = data["IBM"].iter().map(|(d, p)| (d.as_str(), *p)).collect();
    let pairs: Vec<(f64, f64)> = data["MSFT"]
        .iter()
        .filter_map(|(d, p)| ibm_all.get(d.as_str()).map(|q| (*p, *q)))
        .collect();
    let ra: Vec<f64> = pairs.windows(2).map(|w| (w[1].0 / w[0].0).ln()).collect();
    let rb: Vec<f64> = pairs.windows(2).map(|w| (w[1].1 / w[0].1).ln()).collect();
    let (n, sa, sb) = (
        ra.len() as f64,
        ra.iter().sum::<f64>(),
        rb.iter().sum::<f64>(),
    );
    let sab: f64 = ra.iter().zip(&rb).map(|(a, b)| a * b).sum();
    let saa: f64 = ra.iter().map(|a| a * a).sum();
    let sbb: f64 = rb.iter().map(|b| b * b).sum();
    let expected = (n * sab - sa * sb) / ((n * saa - sa * sa).sqrt() * (n * sbb - sb * sb).sqrt());
    let peers = run(
        &mut c,
        "corr.peers",
        json!({"symbol": "MSFT", "peers": ["IBM", "AAPL"]}),
    )
    .await
    .expect("run");
    let p = outputs(&peers);
    let ibm_row = p["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .find(|r| r["symbol"] == "IBM")
        .expect("IBM")
        .clone();
    assert!((ibm_row["correlation"].as_f64().expect("c") - expected).abs() < 1e-9);

    // backtest.momentum: an independent period-by-period simulation.
    let msft: Vec<f64> = data["MSFT"].iter().map(|(_, p)| *p).collect();
    let (lookback, holding, cost) = (126usize, 21usize, 5.0 / 10_000.0);
    let (mut value, mut long, mut start) = (1.0f64, false, lookback);
    while start < msft.len() - 1 {
        let want = msft[start] > msft[start - lookback];
        if want != long {
            value *= 1.0 - cost;
            long = want;
        }
        let end = (start + holding).min(msft.len() - 1);
        if long {
            value *= msft[end] / msft[start];
        }
        start = end;
    }
    let bt = run(
        &mut c,
        "backtest.momentum",
        json!({"symbol": "MSFT", "lookback": 126, "rebalance": 21, "cost_bps": 5}),
    )
    .await
    .expect("run");
    let o = outputs(&bt);
    assert!(
        (o["total_return"].as_f64().expect("tr") - (value - 1.0)).abs() < 1e-9,
        "{o} vs {}",
        value - 1.0
    );
    assert_eq!(bt.jobs.len(), 1, "one execution attempt");
    assert_eq!(
        (bt.jobs[0].attempt, bt.jobs[0].status.as_str()),
        (1, "succeeded")
    );
    let mut names: Vec<&str> = bt.artifacts.iter().map(|a| a.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        vec!["equity_curve.csv", "equity_curve.svg", "stats.json"]
    );

    // The SVG artifact.
    let svg_id = bt
        .artifacts
        .iter()
        .find(|a| a.mime_type == "image/svg+xml")
        .expect("svg")
        .artifact_id
        .clone();
    let artifact = c
        .get_artifact(pb::GetArtifactRequest {
            artifact_id: svg_id.clone(),
        })
        .await
        .expect("artifact")
        .into_inner();
    let Some(ithaca_proto::mcp::v1::content::Kind::Resource(res)) = &artifact.content[0].kind
    else {
        panic!("an embedded resource")
    };
    assert_eq!(res.mime_type, "image/svg+xml");
    let Some(ithaca_proto::mcp::v1::embedded_resource::Body::Text(svg)) = &res.body else {
        panic!("text body")
    };
    assert!(svg.starts_with("<svg") && svg.contains("<polyline"));

    // Another tenant sees neither the run nor its artifacts.
    let mut other = client(&s.skills_url, common::agent("tenant-b", "agent-b"));
    let err = other
        .get_artifact(pb::GetArtifactRequest {
            artifact_id: svg_id,
        })
        .await
        .expect_err("hidden");
    assert_eq!(err.code(), tonic::Code::NotFound);
    let err = other
        .get_run(pb::GetRunRequest {
            run_id: bt.run_id.clone(),
        })
        .await
        .expect_err("hidden");
    assert_eq!(err.code(), tonic::Code::NotFound);
}

/// A skills client for agent-a of tenant-a inside a session opened with
/// `prompt`, and that session's id.
async fn in_new_session(s: &Stack, prompt: &str) -> (Client, String) {
    let agent = common::agent("tenant-a", "agent-a");
    let mut sessions = common::session_client(&s.session_url, agent.clone());
    let sid = sessions
        .session_context(spb::SessionContextRequest {
            prompt: Some(prompt.into()),
            ..Default::default()
        })
        .await
        .expect("session")
        .into_inner()
        .session_id;
    (
        client(&s.skills_url, agent.in_session(Some(sid.clone()))),
        sid,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discovery_runs_in_sessions_and_bad_input() {
    let s = stack().await;
    // A session for the run trace.
    let (mut c, sid) = in_new_session(&s, "skills").await;

    let found = c
        .search_skills(pb::SearchSkillsRequest {
            query: Some("volatility".into()),
            asset_class: Some("vol".into()),
            intent: Some("risk".into()),
            limit: Some(1),
        })
        .await
        .expect("search")
        .into_inner();
    assert_eq!(found.skills[0].skill_id, "vol.realized");
    assert_eq!((found.count, found.truncated), (2, true));
    let m = c
        .describe_skill(pb::DescribeSkillRequest {
            skill_id: "vol.realized".into(),
            version: None,
        })
        .await
        .expect("describe")
        .into_inner();
    assert_eq!(m.version, "1.0");
    assert_eq!(
        json::from_struct(m.input_schema.expect("schema"))["required"],
        json!(["symbol"])
    );

    let r = run(&mut c, "vol.term_structure", json!({"symbol": "GOOG"}))
        .await
        .expect("run");
    assert_eq!(r.session_id, sid);
    let events = common::session_client(&s.session_url, common::agent("tenant-a", "agent-a"))
        .read_events(spb::ReadEventsRequest {
            session_id: sid.clone(),
            after_seq: 0,
            limit: Some(100),
        })
        .await
        .expect("read")
        .into_inner()
        .events;
    let transitions: Vec<(String, String)> = events
        .iter()
        .filter(|e| e.r#type == "run_transition")
        .map(|e| {
            let p = json::from_struct(e.payload.clone().expect("payload"));
            (
                p["from"].as_str().unwrap_or("").to_owned(),
                p["to"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    // The run resource carries the run's own trace events.
    let resource = c
        .read_run(pb::GetRunRequest {
            run_id: r.run_id.clone(),
        })
        .await
        .expect("run resource")
        .into_inner();
    assert_eq!(
        resource.trace.len(),
        3,
        "draft→queued, queued→running, running→succeeded"
    );
    let want = [
        ("draft", "queued"),
        ("queued", "running"),
        ("running", "succeeded"),
    ];
    assert_eq!(
        transitions,
        want.map(|(a, b)| (a.to_owned(), b.to_owned())).to_vec()
    );

    for (skill, inputs, code, starts) in [
        (
            "vol.nonexistent",
            json!({"symbol": "AAPL"}),
            tonic::Code::NotFound,
            "skill_id",
        ),
        (
            "vol.realized",
            json!({"symbol": "AAPL", "window": "x"}),
            tonic::Code::InvalidArgument,
            "inputs.window",
        ),
        (
            "vol.realized",
            json!({"window": 21}),
            tonic::Code::InvalidArgument,
            "inputs.symbol",
        ),
        (
            "vol.realized",
            json!({"symbol": "FB", "window": 500}),
            tonic::Code::InvalidArgument,
            "inputs.window",
        ),
        (
            "vol.realized",
            json!({"symbol": "NVDA"}),
            tonic::Code::NotFound,
            "symbol",
        ),
        (
            "returns.summary",
            json!({"symbol": "AAPL", "start": "1990-01-01", "end": "1990-12-31"}),
            tonic::Code::FailedPrecondition,
            "no bars",
        ),
    ] {
        let err = run(&mut c, skill, inputs.clone())
            .await
            .expect_err("bad input");
        assert_eq!(err.code(), code, "{skill} {inputs}: {}", err.message());
        assert!(
            err.message().starts_with(starts),
            "{} starts with {starts}",
            err.message()
        );
    }
    let err = c
        .describe_skill(pb::DescribeSkillRequest {
            skill_id: "vol.realized".into(),
            version: Some("9.9".into()),
        })
        .await
        .expect_err("unknown version");
    assert!(err.message().starts_with("version"), "{}", err.message());
}

/// Every skill in the catalog, run through gRPC with only its required
/// inputs (and `symbol` where it takes one): each succeeds with artifacts.
/// A skill with no required input is also run with none at all, and must
/// refuse cleanly (INVALID_ARGUMENT, or a run failed on an input), never
/// answer INTERNAL or leave its run behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_skill_runs_with_every_optional_input_omitted() {
    let s = stack().await;
    let mut c = client(&s.skills_url, common::agent("tenant-a", "agent-a"));
    let catalog = c
        .get_catalog(pb::GetCatalogRequest {})
        .await
        .expect("catalog")
        .into_inner();
    assert!(catalog.skills.len() >= 5, "{:?}", catalog.skills);
    for skill in &catalog.skills {
        let id = skill.skill_id.as_str();
        let manifest = c
            .describe_skill(pb::DescribeSkillRequest {
                skill_id: id.into(),
                version: Some(skill.version.clone()),
            })
            .await
            .expect("describe")
            .into_inner();
        let schema = json::from_struct(manifest.input_schema.expect("input schema"));
        let required: Vec<&str> = schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mut inputs = serde_json::Map::new();
        for name in &required {
            let value = match *name {
                "symbol" => json!("AAPL"),
                "objectId" => json!("ZTF17aaacxxf"),
                other => panic!("{id}: give this test a value for the required input {other}"),
            };
            inputs.insert((*name).to_owned(), value);
        }
        if schema["properties"].get("symbol").is_some() {
            inputs.insert("symbol".into(), json!("AAPL"));
        }
        let inputs = Value::Object(inputs);
        let r = run(&mut c, id, inputs.clone())
            .await
            .unwrap_or_else(|e| panic!("{id} {inputs}: {e:?}"));
        assert_eq!(r.status, "succeeded", "{id} {inputs}: {}", r.error);
        assert!(!r.artifacts.is_empty(), "{id}: artifacts");
        assert!(r.outputs.is_some(), "{id}: outputs");

        if required.is_empty() {
            match run(&mut c, id, json!({})).await {
                Ok(r) => assert!(
                    r.status == "failed" && r.error.starts_with("inputs."),
                    "{id} {{}}: {} {}",
                    r.status,
                    r.error
                ),
                Err(e) => assert_eq!(e.code(), tonic::Code::InvalidArgument, "{id} {{}}: {e:?}"),
            }
        }
    }
    // The case: peers omitted means every other symbol.
    let peers = run(&mut c, "corr.peers", json!({"symbol": "AAPL"}))
        .await
        .expect("corr.peers without peers");
    let names: Vec<String> = outputs(&peers)["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .filter_map(|p| p["symbol"].as_str().map(str::to_owned))
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, vec!["FB", "GOOG", "IBM", "MSFT"], "{names:?}");
}

/// The charts as a person sees them: the SVG artifacts of a term
/// structure, a long single-symbol backtest (AAPL grows by orders of
/// magnitude) and a strategy backtest, written to
/// `$CARGO_TARGET_TMPDIR/charts/` and rendered to PNG with `rsvg-convert`
/// when it is installed (`apt-get install librsvg2-bin`), so they can be
/// looked at.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn charts_render_to_png() {
    let s = stack().await;
    let mut c = client(&s.skills_url, common::agent("tenant-a", "agent-a"));
    let strategy = c
        .propose_strategy(pb::ProposeStrategyRequest {
            name: "Tech momentum".into(),
            universe: vec!["AAPL".into(), "MSFT".into(), "IBM".into()],
            lookback: 126,
            rebalance: 21,
            risk: Some(pb::RiskLimits {
                max_weight: Some(0.5),
                max_drawdown: Some(0.3),
            }),
            cost_bps: None,
        })
        .await
        .expect("propose")
        .into_inner();
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("charts");
    std::fs::create_dir_all(&dir).expect("chart dir");
    for (file, skill, inputs) in [
        (
            "term_structure",
            "vol.term_structure",
            json!({"symbol": "AAPL"}),
        ),
        (
            "backtest_aapl",
            "backtest.momentum",
            json!({"symbol": "AAPL"}),
        ),
        (
            "backtest_strategy",
            "backtest.momentum",
            json!({"strategy_id": strategy.strategy_id}),
        ),
    ] {
        let r = run(&mut c, skill, inputs).await.expect("run");
        assert_eq!(r.status, "succeeded", "{file}: {}", r.error);
        let id = r
            .artifacts
            .iter()
            .find(|a| a.mime_type == "image/svg+xml")
            .expect("an svg")
            .artifact_id
            .clone();
        let artifact = c
            .get_artifact(pb::GetArtifactRequest { artifact_id: id })
            .await
            .expect("artifact")
            .into_inner();
        let Some(ithaca_proto::mcp::v1::content::Kind::Resource(res)) = &artifact.content[0].kind
        else {
            panic!("an embedded resource")
        };
        let Some(ithaca_proto::mcp::v1::embedded_resource::Body::Text(svg)) = &res.body else {
            panic!("text body")
        };
        assert!(svg.matches("<text").count() > 10, "{file}: tick labels");
        let svg_path = dir.join(format!("{file}.svg"));
        std::fs::write(&svg_path, svg).expect("write svg");
        let png_path = dir.join(format!("{file}.png"));
        match std::process::Command::new("rsvg-convert")
            .arg(&svg_path)
            .arg("-o")
            .arg(&png_path)
            .status()
        {
            Ok(status) => {
                assert!(status.success(), "{file}: rsvg-convert failed");
                let png = std::fs::read(&png_path).expect("png");
                assert!(png.starts_with(b"\x89PNG"), "{file}: a PNG");
                eprintln!("chart: {}", png_path.display());
            }
            Err(_) => eprintln!(
                "NOT RENDERED: {file}: rsvg-convert is not installed; the SVG is {}",
                svg_path.display()
            ),
        }
    }
}

/// A strategy's backtest says why it starts where it does (its universe's
/// latest first bar: FB's IPO) and why it stopped (its drawdown limit), and
/// sets its return beside buy and hold; every number's unit is in the
/// skill's output schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_backtest_explains_its_start_and_its_stop() {
    let s = stack().await;
    let mut c = client(&s.skills_url, common::agent("tenant-a", "agent-a"));
    let strategy = c
        .propose_strategy(pb::ProposeStrategyRequest {
            name: "with FB".into(),
            universe: vec!["AAPL".into(), "FB".into()],
            lookback: 21,
            rebalance: 5,
            risk: Some(pb::RiskLimits {
                max_weight: None,
                max_drawdown: Some(0.02),
            }),
            cost_bps: None,
        })
        .await
        .expect("propose")
        .into_inner();
    let r = run(
        &mut c,
        "backtest.momentum",
        json!({"strategy_id": strategy.strategy_id}),
    )
    .await
    .expect("run");
    assert_eq!(r.status, "succeeded", "{}", r.error);
    let o = outputs(&r);
    assert_eq!(o["start"], "2012-05-18", "FB's first bar: {o}");
    let why = o["start_reason"].as_str().expect("start_reason");
    assert!(why.contains("FB") && why.contains("2012-05-18"), "{why}");
    let stopped = o["stopped_on"].as_str().expect("a 2% limit stops it");
    let reason = o["stopped_reason"].as_str().expect("stopped_reason");
    assert!(
        reason.contains(stopped) && reason.contains("0.02"),
        "{reason}"
    );
    let (total, hold, excess) = (
        o["total_return"].as_f64().expect("total"),
        o["buy_and_hold_return"].as_f64().expect("buy and hold"),
        o["excess_return"].as_f64().expect("excess"),
    );
    assert!((total - hold - excess).abs() < 1e-12, "{o}");
    assert_eq!(o["rebalance"], 5, "the strategy's own word: {o}");
}

/// An independent long/flat momentum simulation, period by period.
fn simulate(prices: &[f64], lookback: usize, holding: usize, cost: f64) -> Vec<f64> {
    let mut equity = vec![1.0; lookback + 1];
    let (mut value, mut long, mut start) = (1.0f64, false, lookback);
    while start < prices.len() - 1 {
        let want = prices[start] > prices[start - lookback];
        if want != long {
            value *= 1.0 - cost;
            long = want;
        }
        let end = (start + holding).min(prices.len() - 1);
        for t in start..end {
            let step = if long { prices[t + 1] / prices[t] } else { 1.0 };
            value *= step;
            equity.push(value);
        }
        start = end;
    }
    equity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategies_are_proposed_traced_and_backtested() {
    let s = stack().await;
    let (mut c, sid) = in_new_session(&s, "strategy").await;
    let proposal = |universe: &[&str], max_weight: f64| pb::ProposeStrategyRequest {
        name: "MSFT/IBM momentum".into(),
        universe: universe.iter().map(|u| u.to_string()).collect(),
        lookback: 126,
        rebalance: 21,
        risk: Some(pb::RiskLimits {
            max_weight: Some(max_weight),
            max_drawdown: None,
        }),
        cost_bps: Some(5.0),
    };
    let strategy = c
        .propose_strategy(proposal(&["msft", "IBM"], 0.5))
        .await
        .expect("propose")
        .into_inner();
    assert_eq!(
        (strategy.status.as_str(), strategy.universe.clone()),
        ("draft", vec!["IBM".to_owned(), "MSFT".to_owned()])
    );

    let events = common::session_client(&s.session_url, common::agent("tenant-a", "agent-a"))
        .read_events(spb::ReadEventsRequest {
            session_id: sid.clone(),
            after_seq: 0,
            limit: Some(100),
        })
        .await
        .expect("read")
        .into_inner()
        .events;
    let proposed = events
        .iter()
        .find(|e| e.r#type == "strategy_proposed")
        .expect("strategy_proposed traced");
    assert_eq!(
        json::from_struct(proposed.payload.clone().expect("payload"))["strategy_id"],
        strategy.strategy_id
    );

    // The backtest equals the average of two independent simulations over
    // the common dates.
    let data = closes();
    let ibm: BTreeMap<&str, f64> = data["IBM"].iter().map(|(d, p)| (d.as_str(), *p)).collect();
    let (m, i): (Vec<f64>, Vec<f64>) = data["MSFT"]
        .iter()
        .filter_map(|(d, p)| ibm.get(d.as_str()).map(|q| (*p, *q)))
        .unzip();
    let (em, ei) = (simulate(&m, 126, 21, 0.0005), simulate(&i, 126, 21, 0.0005));
    let expected = (em[em.len() - 1] + ei[ei.len() - 1]) / 2.0 - 1.0;
    let bt = run(
        &mut c,
        "backtest.momentum",
        json!({"strategy_id": strategy.strategy_id}),
    )
    .await
    .expect("backtest");
    let got = outputs(&bt)["total_return"].as_f64().expect("total_return");
    assert!((got - expected).abs() < 1e-9, "{got} vs {expected}");
    assert!(bt.artifacts.iter().any(|a| a.mime_type == "image/svg+xml"));

    // Bad input.
    let err = c
        .propose_strategy(proposal(&["MSFT", "NVDA"], 0.5))
        .await
        .expect_err("unknown symbol");
    assert!(
        err.message().starts_with("universe") && err.message().contains("NVDA"),
        "{}",
        err.message()
    );
    let err = c
        .propose_strategy(proposal(&["MSFT", "IBM", "AAPL"], 0.2))
        .await
        .expect_err("weight");
    assert!(
        err.message().starts_with("risk.max_weight"),
        "{}",
        err.message()
    );
    let failed = run(
        &mut c,
        "backtest.momentum",
        json!({"strategy_id": uuid::Uuid::new_v4().to_string()}),
    )
    .await
    .expect("queued");
    assert_eq!(
        failed.status, "failed",
        "a batch run with a missing strategy fails"
    );
    assert!(
        failed.error.starts_with("strategy_id: no strategy"),
        "{}",
        failed.error
    );

    // A finished run cannot be cancelled.
    let err = c
        .cancel_run(pb::CancelRunRequest {
            run_id: failed.run_id.clone(),
        })
        .await
        .expect_err("finished");
    assert_eq!(err.code(), tonic::Code::FailedPrecondition);
    assert_eq!(ithaca_kit::error::domain_code(&err), Some("RUN_FINISHED"));
    let mut other = client(&s.skills_url, common::agent("tenant-b", "agent-b"));
    let err = other
        .get_strategy(pb::GetStrategyRequest {
            strategy_id: strategy.strategy_id.clone(),
        })
        .await
        .expect_err("hidden");
    assert_eq!(err.code(), tonic::Code::NotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_left_running_by_a_stopped_worker_are_failed_not_stuck() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = ithaca_skills::open_db(&common::sqlite_path(&dir, "skills"), "unused")
        .await
        .expect("db");
    let now = ithaca_kit::clock::now_ms();
    let stuck = ithaca_skills::store::RunRow {
        run_id: ithaca_skills::model::RunId::new_v4(),
        tenant_id: ithaca_kit::id::TenantId::parse("tenant-a").expect("tenant"),
        session_id: String::new(),
        skill_id: "backtest.momentum".into(),
        version: "1.0".into(),
        inputs: "{}".into(),
        status: ithaca_skills::model::RunStatus::Running,
        outputs: None,
        error: String::new(),
        created_at_ms: now - 3_600_000,
        updated_at_ms: now - 3_600_000,
        requester: String::new(),
    };
    ithaca_skills::store::Store::new(db.clone())
        .insert_run(&stuck)
        .await
        .expect("insert");
    // A restarted service's worker notices it.
    let svc = ithaca_skills::service(db, common::key(), &ithaca_skills::Config::default())
        .expect("service");
    let shutdown = ithaca_kit::shutdown::CancellationToken::new();
    svc.spawn_worker(shutdown.clone(), &tokio_util::task::TaskTracker::new());
    let owner = common::agent("tenant-a", "agent-a");
    let mut status = String::new();
    for _ in 0..50 {
        let view = svc.get_run(&owner, &stuck.run_id).await.expect("run");
        status = view.run.status.to_string();
        if status == "failed" {
            assert!(
                view.run.error.starts_with("interrupted"),
                "{}",
                view.run.error
            );
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    shutdown.cancel();
    assert_eq!(status, "failed");
}

/// `lightcurve.features` against an independent reading of the same light
/// curve: the broker's photometry of ZTF17aaacxxf (22 previous detections
/// plus the alert, per ztf/SOURCES.md), its brightest detection taken by
/// hand; an unknown object is a clear refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lightcurve_features_match_the_photometry() {
    let s = stack().await;
    let mut c = client(&s.skills_url, common::agent("tenant-a", "agent-a"));
    let found = c
        .search_skills(pb::SearchSkillsRequest {
            query: Some("light curve".into()),
            ..Default::default()
        })
        .await
        .expect("search")
        .into_inner();
    assert_eq!(
        found.skills.first().map(|m| m.skill_id.as_str()),
        Some("lightcurve.features"),
        "{:?}",
        found.skills
    );
    let r = run(
        &mut c,
        "lightcurve.features",
        json!({"objectId": "ZTF17aaacxxf"}),
    )
    .await
    .expect("run");
    assert_eq!(r.status, "succeeded", "{}", r.error);
    let out = outputs(&r);

    let mut broker =
        ithaca_proto::broker::v1::alert_service_client::AlertServiceClient::with_interceptor(
            ithaca_kit::client::channel(&s.broker_url).expect("url"),
            Outbound::new(common::key(), common::agent("tenant-a", "agent-a")),
        );
    let curve = broker
        .get_broker_alert_photometry(ithaca_proto::broker::v1::GetBrokerAlertPhotometryRequest {
            broker_id: "ztf-archive".into(),
            object_id: "ZTF17aaacxxf".into(),
            include_forced: Some(false),
            limit: Some(5000),
            cursor: None,
        })
        .await
        .expect("photometry")
        .into_inner();
    let detections: Vec<_> = curve
        .points
        .iter()
        .filter(|p| p.kind == "detection" && !p.is_limit)
        .collect();
    assert_eq!(detections.len(), 23, "22 previous detections and the alert");
    assert_eq!(out["detections"], detections.len());
    let brightest = detections
        .iter()
        .min_by(|a, b| a.mag.total_cmp(&b.mag))
        .expect("a detection");
    assert_eq!(out["peak"]["mag"], brightest.mag);
    assert_eq!(out["peak"]["band"], brightest.band.as_str());
    assert!(r.artifacts.iter().any(|a| a.name == "detections.csv"));

    let refused = run(
        &mut c,
        "lightcurve.features",
        json!({"objectId": "ZTF99zzzzzzz"}),
    )
    .await
    .map(|r| (r.status, r.error));
    match refused {
        Ok((status, error)) => assert!(
            status == "failed" && error.contains("objectId"),
            "{status} {error}"
        ),
        Err(e) => assert!(e.message().contains("objectId"), "{e:?}"),
    }
}

// ---------------------------------------------------------------------------
// Work stops with its caller (issue 28, item 6).

/// Peers for a corr.peers run at its bound: the demo's other symbols over
/// and over, each a full price history read from the broker.
fn many_peers(n: usize) -> Vec<&'static str> {
    ["MSFT", "IBM", "GOOG", "FB"]
        .into_iter()
        .cycle()
        .take(n)
        .collect()
}

/// Every list input of every skill says its bound in the schema agents
/// read (`maxItems`), every text input its length (`maxLength`); a list
/// above its bound is refused with INVALID_ARGUMENT naming the input and
/// the bound, in a short message, before any run is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_inputs_are_bounded_before_any_work_starts() {
    let s = stack().await;
    let mut c = client(&s.skills_url, common::agent("tenant-a", "agent-a"));
    let catalog = c
        .search_skills(pb::SearchSkillsRequest {
            limit: Some(50),
            ..Default::default()
        })
        .await
        .expect("catalog")
        .into_inner();
    for skill in &catalog.skills {
        let manifest = c
            .describe_skill(pb::DescribeSkillRequest {
                skill_id: skill.skill_id.clone(),
                version: None,
            })
            .await
            .expect("describe")
            .into_inner();
        let schema = json::from_struct(manifest.input_schema.expect("schema"));
        let properties = schema["properties"].as_object().expect("properties");
        for (name, spec) in properties {
            match spec["type"].as_str() {
                Some("array") => assert!(
                    spec["maxItems"].as_u64().is_some(),
                    "{} inputs.{name} has no maxItems",
                    skill.skill_id
                ),
                Some("string") => assert!(
                    spec["maxLength"].as_u64().is_some(),
                    "{} inputs.{name} has no maxLength",
                    skill.skill_id
                ),
                _ => {}
            }
        }
        if skill.skill_id == "corr.peers" {
            assert_eq!(properties["peers"]["maxItems"], 200, "{schema}");
        }
        if skill.skill_id == "vol.term_structure" {
            assert_eq!(properties["windows"]["maxItems"], 32, "{schema}");
        }
    }

    // The probe's 400 KB body: 50,000 peers.
    for (skill, inputs, starts) in [
        (
            "corr.peers",
            json!({"symbol": "AAPL", "peers": many_peers(50_000)}),
            "inputs.peers: at most 200 items, got 50000",
        ),
        (
            "corr.peers",
            json!({"symbol": "AAPL", "peers": many_peers(201)}),
            "inputs.peers: at most 200 items, got 201",
        ),
        (
            "vol.term_structure",
            json!({"symbol": "AAPL", "windows": vec![21; 33]}),
            "inputs.windows: at most 32 items, got 33",
        ),
        (
            "vol.realized",
            json!({"symbol": "A".repeat(17_000)}),
            "inputs.symbol: at most 32 characters, got 17000",
        ),
        (
            "corr.peers",
            json!({"symbol": "AAPL", "peers": ["MSFT", "M".repeat(100_000)]}),
            "inputs.peers[1]: at most 32 characters, got 100000",
        ),
    ] {
        let err = run(&mut c, skill, inputs).await.expect_err("refused");
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
        assert!(
            err.message().starts_with(starts),
            "{} starts with {starts}",
            err.message()
        );
        assert!(err.message().len() < 200, "a short message: {err:?}");
    }
    // Names and symbols sent back in errors are cut short.
    let err = run(&mut c, &"x".repeat(100_000), json!({}))
        .await
        .expect_err("unknown");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    assert!(err.message().len() < 300, "a short message: {err:?}");
    let err = c
        .propose_strategy(pb::ProposeStrategyRequest {
            name: "long".into(),
            universe: vec!["MSFT".into(), "M".repeat(100_000)],
            lookback: 60,
            rebalance: 20,
            ..Default::default()
        })
        .await
        .expect_err("refused");
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(
        err.message()
            .starts_with("universe[1]: at most 32 characters, got 100000"),
        "{err:?}"
    );
    // Refused before any work: no run was recorded.
    let file = s._stack.dir().join("skills.db");
    let db = ithaca_skills::open_db(&file.display().to_string(), "unused")
        .await
        .expect("db");
    let ithaca_kit::db::Pool::Sqlite(pool) = db.pool() else {
        panic!("a SQLite database");
    };
    let (runs,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM runs")
        .fetch_one(pool)
        .await
        .expect("count");
    assert_eq!(runs, 0, "a refused run is never recorded");
}

/// CPU time (user + system) of process `pid` so far, from /proc.
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("read /proc stat");
    // The command name (field 2) is in parentheses and may hold spaces;
    // utime and stime are fields 14 and 15, in clock ticks.
    let after_name = &stat[stat.rfind(')').expect("a command name") + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_secs_f64(ticks as f64 / clock_ticks() as f64)
}

/// Clock ticks per second (`getconf CLK_TCK`).
fn clock_ticks() -> u64 {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .expect("run getconf");
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("CLK_TCK")
}

/// The cores process `pid` used over the next `window`.
async fn cores(pid: u32, window: Duration) -> f64 {
    let before = cpu_time(pid);
    tokio::time::sleep(window).await;
    (cpu_time(pid) - before).as_secs_f64() / window.as_secs_f64()
}

/// The stack's runs of `skill` (id, status, error), oldest first, read
/// from the skills service's own SQLite file: a caller that left never
/// learnt its run's id.
async fn runs_of(up: &common::Up, skill: &str) -> Vec<(String, String, String)> {
    let path = up.data_dir.join("skills.db");
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}?mode=ro", path.display()))
        .await
        .expect("open the skills database");
    let runs = sqlx::query_as(
        "SELECT run_id, status, error FROM runs WHERE skill_id = $1 ORDER BY created_at_ms",
    )
    .bind(skill)
    .fetch_all(&pool)
    .await
    .expect("runs");
    pool.close().await;
    runs
}

/// Wait until the `n`th run of `skill` (0-based) has `status` (or any
/// status other than `queued` and `running` for `"finished"`); the run.
async fn until_run(
    up: &common::Up,
    skill: &str,
    n: usize,
    status: &str,
) -> (String, String, String) {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let runs = runs_of(up, skill).await;
        if let Some(run) = runs.get(n) {
            let finished = !matches!(run.1.as_str(), "queued" | "running");
            if run.1 == status || (status == "finished" && finished) {
                return run.clone();
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "run {n} of {skill} never became {status}: {runs:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Against `ithaca up` (every service in one process, the shipped demo
/// data): an interactive corr.peers run at its bound computes for many
/// seconds; when its caller goes away (the run_skill stream is dropped) or
/// its deadline passes (RunSkill with a short grpc-timeout), the process's
/// CPU use, read from /proc, falls to idle within a second and the run is
/// `cancelled` with the reason (the old code kept computing at the same
/// rate, its run `running`). A batch run whose caller left before it
/// even started still succeeds. Over MCP, the bound is in describe_skill's
/// schema and 50,000 peers are refused with INVALID_ARGUMENT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_run_stops_when_its_caller_goes_away() {
    let up = common::up(&[]);
    let pid = up.process.child.id();
    let caller = common::agent(&up.tenant, "agent-cpu");
    let peers = json!({"symbol": "AAPL", "peers": many_peers(200)});
    let request = |inputs: &Value| pb::RunSkillRequest {
        skill_id: "corr.peers".into(),
        version: None,
        inputs: Some(json::to_struct(inputs.clone())),
    };

    // The caller goes away: its stream is dropped mid-run.
    let mut c = client(&up.skills_url, caller.clone());
    let call = tokio::spawn({
        let request = request(&peers);
        async move {
            let mut events = c.run_skill_stream(request).await?.into_inner();
            while events.message().await?.is_some() {}
            Ok::<_, tonic::Status>(())
        }
    });
    until_run(&up, "corr.peers", 0, "running").await;
    let busy = cores(pid, Duration::from_secs(1)).await;
    assert!(busy > 0.1, "the run computes: {busy:.2} cores");
    call.abort();
    let _ = call.await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = cores(pid, Duration::from_secs(1)).await;
    let (_, status, error) = runs_of(&up, "corr.peers").await.remove(0);
    eprintln!(
        "stream dropped: {busy:.2} cores before, {after:.2} a second after; run {status}: {error}"
    );
    assert!(
        after < 0.1 && after < busy / 4.0,
        "a second after the caller left: {after:.2} cores (before: {busy:.2})"
    );
    assert_eq!(status, "cancelled", "{error}");
    assert!(error.contains("the caller went away"), "{error}");

    // The deadline passes: a unary RunSkill with a 1.5 s grpc-timeout.
    let mut c = client(&up.skills_url, caller.clone());
    let mut unary = tonic::Request::new(request(&peers));
    unary.set_timeout(Duration::from_millis(1500));
    let started = std::time::Instant::now();
    let call = tokio::spawn(async move { c.run_skill(unary).await.map(|_| ()) });
    until_run(&up, "corr.peers", 1, "running").await;
    let busy = cores(pid, Duration::from_millis(800)).await;
    let err = call.await.expect("joined").expect_err("past its deadline");
    assert!(
        matches!(
            err.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{err:?}"
    );
    let passed = Duration::from_millis(1500).saturating_sub(started.elapsed());
    tokio::time::sleep(passed + Duration::from_secs(1)).await;
    let after = cores(pid, Duration::from_secs(1)).await;
    let (_, status, error) = runs_of(&up, "corr.peers").await.remove(1);
    eprintln!(
        "deadline passed: {busy:.2} cores before, {after:.2} a second after; run {status}: {error}"
    );
    assert!(busy > 0.1, "the run computes: {busy:.2} cores");
    assert!(
        after < 0.1 && after < busy / 4.0,
        "a second after the deadline: {after:.2} cores (before: {busy:.2})"
    );
    assert_eq!(status, "cancelled", "{error}");
    assert!(error.contains("deadline passed"), "{error}");

    // A batch run goes on by design, even when its caller leaves before it
    // starts.
    let mut c = client(&up.skills_url, caller.clone());
    let events = c
        .run_skill_stream(pb::RunSkillRequest {
            skill_id: "backtest.momentum".into(),
            version: None,
            inputs: Some(json::to_struct(json!({"symbol": "AAPL"}))),
        })
        .await
        .expect("stream opens");
    drop(events);
    drop(c);
    let (_, status, error) = until_run(&up, "backtest.momentum", 0, "finished").await;
    assert_eq!(status, "succeeded", "{error}");

    // Over MCP: the bound is in the schema describe_skill gives, and the
    // probe's 50,000 peers are refused at once, naming the input and bound.
    common::stack::open_session(&up.url, &up.agent, "bounds", None).await;
    let described = common::stack::call(
        &up.url,
        &up.agent,
        "describe_skill",
        json!({"skill_id": "corr.peers"}),
    )
    .await;
    let common::stack::Outcome::Ok(manifest) = described.outcome else {
        panic!("describe_skill: {:?}", described.outcome);
    };
    assert_eq!(
        manifest["input_schema"]["properties"]["peers"]["maxItems"], 200,
        "{manifest}"
    );
    let refused = common::stack::call(
        &up.url,
        &up.agent,
        "run_skill",
        json!({"skill_id": "corr.peers", "inputs": {"symbol": "AAPL", "peers": many_peers(50_000)}}),
    )
    .await;
    let common::stack::Outcome::ToolError(error) = refused.outcome else {
        panic!("run_skill: {:?}", refused.outcome);
    };
    assert_eq!(error["error"], "INVALID_ARGUMENT", "{error}");
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("inputs.peers: at most 200 items, got 50000")),
        "{error}"
    );
    assert_eq!(runs_of(&up, "corr.peers").await.len(), 2, "no run recorded");

    // Over MCP, the agent gives up: its stateless tools/call's connection
    // closes mid-run. The edge drops the backend call, so the run stops.
    let call = tokio::spawn({
        let (url, agent) = (up.url.clone(), up.agent.clone());
        async move {
            common::stack::call(
                &url,
                &agent,
                "run_skill",
                json!({"skill_id": "corr.peers", "inputs": peers}),
            )
            .await
        }
    });
    until_run(&up, "corr.peers", 2, "running").await;
    let busy = cores(pid, Duration::from_secs(1)).await;
    call.abort();
    let _ = call.await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = cores(pid, Duration::from_secs(1)).await;
    let (_, status, error) = runs_of(&up, "corr.peers").await.remove(2);
    eprintln!(
        "MCP caller left: {busy:.2} cores before, {after:.2} a second after; run {status}: {error}"
    );
    assert!(busy > 0.1, "the run computes: {busy:.2} cores");
    assert!(
        after < 0.1 && after < busy / 4.0,
        "a second after the MCP caller left: {after:.2} cores (before: {busy:.2})"
    );
    assert_eq!(status, "cancelled", "{error}");
}

/// A value of Apple's companyfacts: concept, unit, accession and period.
fn apple_fact(doc: &Value, concept: &str, unit: &str, accn: &str, start: &str, end: &str) -> f64 {
    doc["facts"]["us-gaap"][concept]["units"][unit]
        .as_array()
        .expect("values")
        .iter()
        .find(|v| v["accn"] == accn && v["start"] == start && v["end"] == end)
        .and_then(|v| v["val"].as_f64())
        .unwrap_or_else(|| panic!("{concept} {accn} {start}..{end} in companyfacts"))
}

/// A client of the broker's fundamentals service, as `principal`.
fn fundamentals_client(
    url: &str,
    principal: Principal,
) -> ithaca_proto::broker::v1::fundamentals_service_client::FundamentalsServiceClient<
    InterceptedService<Channel, Outbound>,
> {
    ithaca_proto::broker::v1::fundamentals_service_client::FundamentalsServiceClient::with_interceptor(
        ithaca_kit::client::channel(url).expect("url"),
        Outbound::new(common::key(), principal),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fundamentals_skills_read_the_filings_point_in_time() {
    fundamentals_skills(stack().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fundamentals_skills_read_the_filings_point_in_time_postgres() {
    let Some(pg) = common::postgres("fundamentals_skills_read_the_filings_point_in_time_postgres")
    else {
        return;
    };
    let prefix = common::unique_schema("skfund");
    fundamentals_skills(stack_on(Store::Postgres(pg.clone(), prefix.clone())).await).await;
    for service in ["broker", "session", "skills"] {
        common::drop_schema(&pg, &format!("{prefix}_{service}")).await;
    }
}

/// `fundamentals.ratios` and `peers.screen`: found by search_skills,
/// Apple's FY2019 Q1 ratios from the line items of its 10-Q (checked
/// against companyfacts read here), hidden by an `as_of` before the 10-Q
/// was filed, a chart artifact; the screen exactly the broker's.
async fn fundamentals_skills(s: Stack) {
    let agent = common::agent("tenant-a", "agent-a");
    let mut c = client(&s.skills_url, agent.clone());
    let found = c
        .search_skills(pb::SearchSkillsRequest {
            query: Some("fundamentals".into()),
            ..Default::default()
        })
        .await
        .expect("search")
        .into_inner();
    let ids: Vec<&str> = found.skills.iter().map(|k| k.skill_id.as_str()).collect();
    assert!(
        ids.contains(&"fundamentals.ratios") && ids.contains(&"peers.screen"),
        "{ids:?}"
    );

    // Apple's 10-Q for the quarter ended 2018-12-29, filed 2019-01-30.
    let facts: Value = serde_json::from_slice(&apple_companyfacts()).expect("json");
    let (accn, start, end) = ("0000320193-19-000010", "2018-09-30", "2018-12-29");
    let revenue = apple_fact(
        &facts,
        "RevenueFromContractWithCustomerExcludingAssessedTax",
        "USD",
        accn,
        start,
        end,
    );
    let net_income = apple_fact(&facts, "NetIncomeLoss", "USD", accn, start, end);
    let operating = apple_fact(&facts, "OperatingIncomeLoss", "USD", accn, start, end);
    assert_eq!((revenue, net_income), (84_310_000_000.0, 19_965_000_000.0));
    let r = run(
        &mut c,
        "fundamentals.ratios",
        json!({"symbol": "aapl", "as_of": "2019-02-01", "limit": 4}),
    )
    .await
    .expect("ratios");
    assert_eq!(r.status, "succeeded", "{}", r.error);
    let out = outputs(&r);
    assert_eq!(out["cik"], "0000320193", "{out}");
    let periods = out["periods"].as_array().expect("periods");
    assert_eq!(periods.len(), 4, "{out}");
    let q1 = periods.last().expect("newest last");
    assert_eq!(q1["period_end"], end, "{q1}");
    assert_eq!(
        q1["net_margin"].as_f64(),
        Some(net_income / revenue),
        "{q1}"
    );
    assert_eq!(
        q1["operating_margin"].as_f64(),
        Some(operating / revenue),
        "{q1}"
    );
    assert_eq!(q1["eps_diluted"].as_f64(), Some(4.18), "{q1}");
    assert!(
        q1["accessions"]
            .as_array()
            .expect("accessions")
            .contains(&json!(accn)),
        "{q1}"
    );
    assert!(q1["filed"].as_str().expect("filed") <= "2019-02-01", "{q1}");
    let mut names: Vec<&str> = r.artifacts.iter().map(|a| a.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["ratios.csv", "ratios.json", "ratios.svg"]);
    let svg = r
        .artifacts
        .iter()
        .find(|a| a.name == "ratios.svg")
        .expect("chart");
    assert!(
        svg.mime_type == "image/svg+xml" && svg.size > 1000,
        "{svg:?}"
    );
    // Before the 10-Q was filed, its quarter is not known.
    let before = run(
        &mut c,
        "fundamentals.ratios",
        json!({"symbol": "AAPL", "as_of": "2019-01-29", "limit": 4}),
    )
    .await
    .expect("ratios before");
    let before = outputs(&before);
    let ends: Vec<&str> = before["periods"]
        .as_array()
        .expect("periods")
        .iter()
        .filter_map(|p| p["period_end"].as_str())
        .collect();
    assert!(
        !ends.contains(&end) && ends.contains(&"2018-09-29"),
        "{ends:?}"
    );
    // Before any filing: a clear error naming the date.
    let none = run(
        &mut c,
        "fundamentals.ratios",
        json!({"symbol": "AAPL", "as_of": "1990-01-01"}),
    )
    .await;
    match none {
        Ok(r) => assert!(
            r.status == "failed" && r.error.contains("1990-01-01"),
            "{} {}",
            r.status,
            r.error
        ),
        Err(e) => assert!(e.message().contains("1990-01-01"), "{e:?}"),
    }

    // The screen is the broker's, row for row.
    let symbols = ["AAPL", "MSFT", "IBM", "GOOG"];
    let screen = run(
        &mut c,
        "peers.screen",
        json!({"symbol": "AAPL", "peers": ["MSFT", "IBM", "GOOG"], "date": "2010-06-30"}),
    )
    .await
    .expect("screen");
    assert_eq!(screen.status, "succeeded", "{}", screen.error);
    let out = outputs(&screen);
    let direct = fundamentals_client(&s.broker_url, agent)
        .screen_peers(ithaca_proto::broker::v1::ScreenPeersRequest {
            symbols: symbols.iter().map(|s| (*s).to_owned()).collect(),
            date: "2010-06-30".into(),
            metrics: vec![],
            rank_by: None,
        })
        .await
        .expect("broker screen")
        .into_inner();
    let rows = out["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), direct.rows.len(), "{out}");
    for (row, want) in rows.iter().zip(&direct.rows) {
        assert_eq!(row["symbol"], want.symbol.as_str(), "{out}");
        assert_eq!(row["rank"], want.rank, "{out}");
        for m in &want.metrics {
            let got = &row["metrics"][&m.metric];
            assert_eq!(
                got["value"].as_f64(),
                m.value,
                "{} {}: {got}",
                want.symbol,
                m.metric
            );
            assert_eq!(got["missing"].as_str(), m.missing.as_deref(), "{got}");
        }
    }
    // AAPL has TTM EPS from companyfacts, so a P/E; the others say why not.
    let aapl = rows
        .iter()
        .find(|r| r["symbol"] == "AAPL")
        .expect("AAPL row");
    assert!(
        aapl["metrics"]["pe"]["value"]
            .as_f64()
            .is_some_and(|pe| pe > 0.0),
        "{aapl}"
    );
    let msft = rows
        .iter()
        .find(|r| r["symbol"] == "MSFT")
        .expect("MSFT row");
    assert!(msft["metrics"]["pe"]["missing"].is_string(), "{msft}");
}

/// Apple's companyfacts as it stood on `date`: every value filed after it
/// dropped, as if those filings had not happened yet.
fn companyfacts_filed_by(date: &str) -> Vec<u8> {
    let mut doc: Value = serde_json::from_slice(&apple_companyfacts()).expect("json");
    for taxonomy in doc["facts"].as_object_mut().expect("facts").values_mut() {
        for concept in taxonomy.as_object_mut().expect("taxonomy").values_mut() {
            for values in concept["units"]
                .as_object_mut()
                .expect("units")
                .values_mut()
            {
                values
                    .as_array_mut()
                    .expect("values")
                    .retain(|v| v["filed"].as_str().is_some_and(|f| f <= date));
            }
        }
    }
    serde_json::to_vec(&doc).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn momentum_eps_filter_cannot_see_the_future() {
    eps_filter(Store::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn momentum_eps_filter_cannot_see_the_future_postgres() {
    let Some(pg) = common::postgres("momentum_eps_filter_cannot_see_the_future_postgres") else {
        return;
    };
    let prefix = common::unique_schema("skeps");
    eps_filter(Store::Postgres(pg.clone(), prefix.clone())).await;
    for p in [format!("{prefix}a"), format!("{prefix}b")] {
        for service in ["broker", "session", "skills"] {
            common::drop_schema(&pg, &format!("{p}_{service}")).await;
        }
    }
}

/// `backtest.momentum` with `fundamental_filter: ttm_eps_growth` on AAPL,
/// 2008–2013, on two brokers: one with all of Apple's companyfacts, one
/// with only what was filed by 2011-06-30. Every rebalance up to that day
/// is the same on both (what was filed later does not change it); later
/// ones differ (the filter does read the filings); the filter keeps the
/// backtest flat before Apple's first filing in the data, and it changes
/// the backtest against the unfiltered one.
async fn eps_filter(store: Store) {
    let cutoff = "2011-06-30";
    let (full, past) = match &store {
        Store::Sqlite => (Store::Sqlite, Store::Sqlite),
        Store::Postgres(url, prefix) => (
            Store::Postgres(url.clone(), format!("{prefix}a")),
            Store::Postgres(url.clone(), format!("{prefix}b")),
        ),
    };
    let inputs = json!({"symbol": "AAPL", "start": "2008-01-01", "end": "2013-12-31",
        "lookback": 126, "rebalance": 21, "fundamental_filter": "ttm_eps_growth"});
    let agent = common::agent("tenant-a", "agent-a");
    let full = stack_with_sec(full, &apple_companyfacts()).await;
    let mut c = client(&full.skills_url, agent.clone());
    let with_all = run(&mut c, "backtest.momentum", inputs.clone())
        .await
        .expect("run");
    assert_eq!(with_all.status, "succeeded", "{}", with_all.error);
    let plain = run(
        &mut c,
        "backtest.momentum",
        json!({"symbol": "AAPL", "start": "2008-01-01", "end": "2013-12-31", "lookback": 126, "rebalance": 21}),
    )
    .await
    .expect("plain");
    let bad = run(
        &mut c,
        "backtest.momentum",
        json!({"symbol": "AAPL", "fundamental_filter": "pe_below_10"}),
    )
    .await;
    match bad {
        Ok(r) => assert!(
            r.status == "failed" && r.error.starts_with("inputs.fundamental_filter"),
            "{}",
            r.error
        ),
        Err(e) => assert!(
            e.message().starts_with("inputs.fundamental_filter"),
            "{e:?}"
        ),
    }
    drop(full);
    let past = stack_with_sec(past, &companyfacts_filed_by(cutoff)).await;
    let mut c = client(&past.skills_url, agent);
    let with_past = run(&mut c, "backtest.momentum", inputs).await.expect("run");
    assert_eq!(with_past.status, "succeeded", "{}", with_past.error);

    let (a, b, plain) = (outputs(&with_all), outputs(&with_past), outputs(&plain));
    let (ra, rb) = (
        a["rebalances"].as_array().expect("rebalances"),
        b["rebalances"].as_array().expect("rebalances"),
    );
    assert_eq!(ra.len(), rb.len());
    let mut before = 0;
    let mut differ_after = 0;
    for (x, y) in ra.iter().zip(rb) {
        let date = x["date"].as_str().expect("date");
        assert_eq!(x["date"], y["date"]);
        // What a rebalance read was known on its day.
        if let Some(end) = x["ttm_period_end"].as_str() {
            assert!(end < date, "{x}");
        }
        if date <= cutoff {
            assert_eq!(x, y, "the rebalance of {date} saw a filing made after it");
            before += 1;
        } else if x != y {
            differ_after += 1;
        }
    }
    assert!(before >= 30, "{before} rebalances before {cutoff}");
    assert!(
        differ_after > 0,
        "no later filing changed a later rebalance: {ra:?}"
    );
    // Before Apple's first filing in companyfacts nothing is known: flat.
    let first = &ra[0];
    assert_eq!(first["held"], false, "{first}");
    let held = ra.iter().filter(|r| r["held"] == true).count();
    assert!(held > 0, "{ra:?}");
    assert!(a["filtered_out"].as_u64().expect("filtered_out") > 0, "{a}");
    assert_ne!(a["total_return"], plain["total_return"], "{a} {plain}");
    println!(
        "eps filter: {} rebalances, {held} held, {} long signals filtered out; total return {} (unfiltered {}); {before} rebalances by {cutoff} identical, {differ_after} later ones changed by later filings",
        ra.len(),
        a["filtered_out"],
        a["total_return"],
        plain["total_return"]
    );
}
