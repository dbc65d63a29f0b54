//! Trace appends per second: `ithaca serve session` on SQLite or on a fresh
//! PostgreSQL schema, many concurrent appends into one session (the
//! contended case of the gap-free `seq`), then a read-back that checks the
//! sequence has no gap and no duplicate. The appends go as the edge sends
//! them, messages on the `AppendEvents` stream through the edge's own
//! client (`ithaca_edge::appends`), or with `--append-unary` as one
//! `AppendEvent` call each.

use crate::procs::{Proc, RssSampler};
use anyhow::{Context, bail};
use ithaca_edge::appends::{Appends, Sent};
use ithaca_edge::backend::Backend;
use ithaca_kit::client::{self, Outbound};
use ithaca_kit::principal::{InternalKey, Principal, VerifiedKey};
use ithaca_proto::session::v1 as spb;
use ithaca_proto::session::v1::session_service_client::SessionServiceClient;
use serde::Serialize;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

#[derive(Clone, Debug, Default, Serialize)]
pub struct AppendOutcome {
    pub database: String,
    /// `stream` or `unary`.
    pub path: String,
    pub writers: usize,
    pub appends: u64,
    pub errors: u64,
    pub seconds: f64,
    pub per_second: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// Every seq from 1 to the last one, once.
    pub gap_free: bool,
    pub rss_rest_kib: u64,
    pub rss_load_kib: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_run: Option<String>,
}

pub struct Setup<'a> {
    pub ithaca: &'a Path,
    pub key_hex: &'a str,
    pub database_url: String,
    pub schema: String,
    pub label: &'a str,
    pub writers: usize,
    /// One unary call an append, instead of the stream.
    pub unary: bool,
    pub appends: u64,
    pub duration: Duration,
    /// Seconds to wait for a quiet machine first (0: do not wait).
    pub idle_wait: f64,
}

pub async fn run(setup: Setup<'_>) -> anyhow::Result<AppendOutcome> {
    let mut cmd = Command::new(setup.ithaca);
    cmd.args([
        "serve",
        "session",
        "--listen",
        "127.0.0.1:0",
        "--database-url",
    ])
    .arg(&setup.database_url)
    .args(["--db-schema", &setup.schema])
    .env("ITHACA_INTERNAL_KEY", setup.key_hex)
    .env("RUST_LOG", "warn")
    .env_remove("DOOMBERG_DB")
    .env_remove("ITHACA_DATABASE_URL");
    let mut proc = Proc::spawn(&format!("session ({})", setup.label), cmd)?;
    let addr = proc.listening("ithaca: session listening on")?;
    let key = InternalKey::new(setup.key_hex.as_bytes().to_vec())
        .map_err(|_| anyhow::anyhow!("internal key too short"))?;
    let principal = Principal::verified(VerifiedKey {
        tenant_id: "bench".to_owned(),
        key_id: "bench-agent".to_owned(),
        scopes: vec!["data:read".to_owned()],
        human: false,
    });
    let url = format!("http://{addr}");
    let stream = Arc::new(Appends::new(
        Backend::new(&url, Duration::from_secs(10))?,
        key.clone(),
    ));
    let channel = client::channel(&url)?;
    let mut session =
        SessionServiceClient::with_interceptor(channel, Outbound::new(key, principal.clone()));
    let opened = session
        .session_context(spb::SessionContextRequest {
            prompt: Some("ithaca-bench trace appends".to_owned()),
            ..Default::default()
        })
        .await
        .context("opening the session")?
        .into_inner();
    let session_id = opened.session_id;
    let before = last_seq(&mut session, &session_id).await?;

    if setup.idle_wait > 0.0 {
        crate::procs::wait_for_quiet(0.25, Duration::from_secs_f64(setup.idle_wait)).await;
    }
    let rss_rest_kib = proc.rss_kib().unwrap_or(0);
    let sampler = RssSampler::start(vec![proc.pid()]);
    let issued = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + setup.duration;
    let mut tasks = Vec::new();
    for writer in 0..setup.writers {
        let mut client = session.clone();
        let stream = stream.clone();
        let principal = principal.clone();
        let unary = setup.unary;
        let issued = issued.clone();
        let session_id = session_id.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::new();
            let mut errors = 0u64;
            let mut first_error = None;
            loop {
                let n = issued.fetch_add(1, Ordering::Relaxed);
                if n >= setup.appends || Instant::now() >= deadline {
                    break;
                }
                let payload = serde_json::json!({
                    "name": "bench_ping",
                    "arguments": {"note": "bench"},
                    "writer": writer,
                });
                let sent = Instant::now();
                let appended = if unary {
                    let request = spb::AppendEventRequest {
                        session_id: session_id.clone(),
                        r#type: spb::EventType::ToolCall as i32,
                        // A Struct, as edges of earlier releases sent it.
                        payload: Some(ithaca_kit::json::to_struct(payload)),
                        payload_json: Vec::new(),
                    };
                    client.append_event(request).await.map(|_| ())
                } else {
                    // JSON text, as the edge sends it on the stream.
                    let request = spb::AppendEventRequest {
                        session_id: session_id.clone(),
                        r#type: spb::EventType::ToolCall as i32,
                        payload: None,
                        payload_json: payload.to_string().into_bytes(),
                    };
                    match stream.append(&principal, request).await {
                        Sent::Done(done) => done.map(|_| ()),
                        Sent::Unary => Err(tonic::Status::unimplemented(
                            "the session service has no AppendEvents stream",
                        )),
                    }
                };
                match appended {
                    Ok(()) => latencies.push(sent.elapsed().as_micros() as u32),
                    Err(status) => {
                        errors += 1;
                        first_error.get_or_insert_with(|| status.message().to_owned());
                    }
                }
            }
            (latencies, errors, first_error)
        }));
    }
    let mut latencies = Vec::new();
    let mut errors = 0;
    for task in tasks {
        let (l, e, first) = task.await?;
        latencies.extend(l);
        errors += e;
        if let Some(why) = first {
            eprintln!("ithaca-bench: append failed ({}): {why}", setup.label);
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let rss_load_kib = sampler.finish().await.first().copied().unwrap_or(0);
    latencies.sort_unstable();
    let pct = |q: f64| -> f64 {
        if latencies.is_empty() {
            return 0.0;
        }
        let rank = ((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len());
        f64::from(latencies[rank - 1]) / 1000.0
    };
    let appended = latencies.len() as u64;
    let gap_free = check_gap_free(&mut session, &session_id, before + appended).await?;
    drop(session);
    proc.stop()?;
    Ok(AppendOutcome {
        database: setup.label.to_owned(),
        path: if setup.unary { "unary" } else { "stream" }.to_owned(),
        writers: setup.writers,
        appends: appended,
        errors,
        seconds,
        per_second: appended as f64 / seconds,
        p50_ms: pct(0.5),
        p99_ms: pct(0.99),
        gap_free,
        rss_rest_kib,
        rss_load_kib,
        not_run: None,
    })
}

type Client = SessionServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Outbound>,
>;

async fn last_seq(session: &mut Client, session_id: &str) -> anyhow::Result<u64> {
    let reply = session
        .read_events(spb::ReadEventsRequest {
            session_id: session_id.to_owned(),
            after_seq: 0,
            limit: Some(1),
        })
        .await?
        .into_inner();
    Ok(u64::try_from(reply.last_seq).unwrap_or(0))
}

/// Read the whole trace back: seqs must be exactly 1..=expected.
async fn check_gap_free(
    session: &mut Client,
    session_id: &str,
    expected: u64,
) -> anyhow::Result<bool> {
    let mut after = 0i64;
    let mut next = 1i64;
    loop {
        let reply = session
            .read_events(spb::ReadEventsRequest {
                session_id: session_id.to_owned(),
                after_seq: after,
                limit: Some(1000),
            })
            .await?
            .into_inner();
        if reply.events.is_empty() {
            break;
        }
        for event in &reply.events {
            if event.seq != next {
                eprintln!("ithaca-bench: seq {} where {next} was expected", event.seq);
                return Ok(false);
            }
            next += 1;
        }
        after = next - 1;
    }
    let last = u64::try_from(next - 1).unwrap_or(0);
    if last != expected {
        eprintln!("ithaca-bench: the trace ends at seq {last}, expected {expected}");
        return Ok(false);
    }
    Ok(true)
}

/// Drop the benchmark's PostgreSQL schema.
pub async fn drop_schema(url: &str, schema: &str) -> anyhow::Result<()> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(url).await?;
    sqlx::query(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
        .execute(&mut conn)
        .await?;
    Ok(())
}

/// Whether PostgreSQL answers at `url`.
pub async fn postgres_answers(url: &str) -> anyhow::Result<()> {
    use sqlx::Connection;
    let connect = sqlx::PgConnection::connect(url);
    match tokio::time::timeout(Duration::from_secs(5), connect).await {
        Ok(Ok(conn)) => {
            let _ = conn.close().await;
            Ok(())
        }
        Ok(Err(e)) => bail!("{e}"),
        Err(_) => bail!("no answer within 5 s"),
    }
}
