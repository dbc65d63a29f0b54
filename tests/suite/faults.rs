//! Faults under load (issue 15, item 2), on the replicated stack of
//! `tests/suite/replicas.rs`: SIGKILL a session replica, then a backend service,
//! then an edge, while agents keep calling; restart PostgreSQL under load;
//! a backend that sleeps past the deadline.
//!
//! What must hold: every request is answered (a result, or a retryable tool
//! error naming the unavailable service; the edge's 503 with `Retry-After`
//! when the auth service cannot verify the key; the balancer's 502 for a
//! call in flight on the edge that was killed), nothing hangs; calls succeed again
//! after a restart; and every session's trace, read back afterwards, holds
//! each event a caller was told was recorded, once, with `seq` gap-free.
//!
//! The load is bounded in calls and time. Times are printed as figures,
//! never asserted.

use crate::common;

use common::stack::{self, Answer, Outcome, Stack, TraceStream};
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Agents calling at once.
const AGENTS: usize = 8;
/// Calls per agent, at most (the load also stops when the faults are done).
const MAX_CALLS: usize = 2_000;
/// Pause between one agent's calls.
const PACE: Duration = Duration::from_millis(20);
/// How long a component stays down.
const DOWN: Duration = Duration::from_secs(2);
/// A bound on waiting for calls to succeed again after a restart; reaching
/// it fails the test (recovery is expected within a second or two).
const RECOVERY_BOUND: Duration = Duration::from_secs(60);

/// One call of the load.
struct Attempt {
    /// The `record_reasoning` text, unique per call.
    marker: Option<String>,
    /// The fault phase running when the call started.
    phase: usize,
    started: Instant,
    answer: Answer,
}

/// The agents' calls and the phase they are in.
struct Load {
    stop: Arc<AtomicBool>,
    phase: Arc<AtomicUsize>,
    tasks: Vec<tokio::task::JoinHandle<(String, Vec<Attempt>)>>,
}

/// Start `AGENTS` agents, each in its own session, calling through `base`:
/// mostly `record_reasoning` (session service), every fourth call
/// `list_symbols` (broker).
async fn start_load(base: &str, tokens: &[String]) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let phase = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for (i, token) in tokens.iter().enumerate() {
        let sid = stack::open_session(base, token, &format!("load {i}"), None).await;
        let (base, token, stop, phase) =
            (base.to_owned(), token.clone(), stop.clone(), phase.clone());
        tasks.push(tokio::spawn(async move {
            let mut log = Vec::new();
            for n in 0..MAX_CALLS {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let at = phase.load(Ordering::Relaxed);
                let started = Instant::now();
                let (tool, args, marker) = if n % 4 == 3 {
                    ("list_symbols", json!({}), None)
                } else {
                    let text = format!("agent {i} call {n}");
                    ("record_reasoning", json!({"text": text}), Some(text))
                };
                let answer = stack::call(&base, &token, tool, args).await;
                log.push(Attempt {
                    marker,
                    phase: at,
                    started,
                    answer,
                });
                tokio::time::sleep(PACE).await;
            }
            (sid, log)
        }));
    }
    Load { stop, phase, tasks }
}

impl Load {
    async fn finish(self) -> Vec<(String, Vec<Attempt>)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut out = Vec::new();
        for t in self.tasks {
            out.push(t.await.expect("agent task"));
        }
        out
    }
}

/// Call `tool` on `base` until it succeeds (answered by `edge`, when
/// given); the time that took. Successful `record_reasoning` calls are
/// added to `told`.
async fn until_ok(
    base: &str,
    token: &str,
    tool: &str,
    edge: Option<&str>,
    told: &mut Vec<String>,
) -> Duration {
    let started = Instant::now();
    for n in 0.. {
        let text = format!("probe {tool} {n} {}", uuid::Uuid::new_v4().simple());
        let args = if tool == "record_reasoning" {
            json!({"text": text})
        } else {
            json!({})
        };
        let a = stack::call(base, token, tool, args).await;
        if a.outcome.is_ok() && tool == "record_reasoning" {
            told.push(text);
        }
        if a.outcome.is_ok() && (edge.is_none() || a.edge.as_deref() == edge) {
            let took = started.elapsed();
            if n > 0 {
                println!("  ({tool} on {base}: ok after {n} failed or elsewhere-served tries)");
            }
            return took;
        }
        assert!(
            started.elapsed() < RECOVERY_BOUND,
            "{tool} on {base} still fails: {:?}",
            a.outcome
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unreachable!("the loop returns or fails")
}

/// The checks every fault test makes once the load stopped: answers,
/// errors, and each session's trace. Prints the figures.
async fn verify(
    name: &str,
    stack: &Stack,
    logs: &[(String, Vec<Attempt>)],
    probe: (&str, &[String]),
    edge_down: Option<(Instant, Instant)>,
) {
    let all: Vec<&Attempt> = logs.iter().flat_map(|(_, l)| l).collect();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut messages: BTreeMap<String, String> = BTreeMap::new();
    for a in &all {
        let label = a.answer.outcome.label();
        *counts.entry(label.clone()).or_default() += 1;
        let message = match &a.answer.outcome {
            Outcome::Ok(_) => continue,
            Outcome::ToolError(e) => e["message"].as_str().unwrap_or("").to_owned(),
            Outcome::Http(_, body) | Outcome::NoAnswer(body) => body.trim().to_owned(),
        };
        messages.entry(label).or_insert(message);
    }
    let (median, p99, max) = stack::latency(&all.iter().map(|a| &a.answer).collect::<Vec<_>>());
    println!(
        "{name}: {} calls by {} agents; outcomes {counts:?}; latency median {median:.1?}, \
         p99 {p99:.1?}, max {max:.1?} (deadline {:?} per hop)",
        all.len(),
        logs.len(),
        stack::BACKEND_TIMEOUT
    );
    for (label, message) in &messages {
        println!("{name}:   {label}: {message}");
    }
    for a in &all {
        match &a.answer.outcome {
            Outcome::Ok(_) => {}
            Outcome::ToolError(e) => {
                assert_eq!(
                    e["retryable"], true,
                    "{name}: a failure under a fault is retryable: {e}"
                );
                let message = e["message"].as_str().unwrap_or("");
                if ["SERVICE_UNAVAILABLE", "TIMEOUT"].contains(&e["error"].as_str().unwrap_or("")) {
                    assert!(
                        message.contains("ithaca.") && message.contains(".v1."),
                        "{name}: the error names the unavailable service: {e}"
                    );
                }
            }
            // The edge's own 503 when it cannot verify the key (auth or its
            // database is down): retryable, with Retry-After.
            Outcome::Http(503, body) if a.answer.retry_after.is_some() => {
                assert!(
                    body.contains("ithaca.auth.v1.AuthService"),
                    "{name}: {body}"
                );
            }
            // The balancer's answer for a call in flight on the edge that
            // was killed, or sent to it (on a kept-alive connection) while
            // it was down, before the balancer's health check took it out.
            // Any call that overlapped no such moment must be answered by
            // an edge.
            Outcome::Http(status, body) => {
                let overlaps = edge_down.is_some_and(|(killed, back)| {
                    a.started <= back && killed <= a.started + a.answer.took
                });
                assert!(
                    overlaps && [502, 503].contains(status),
                    "{name}: HTTP {status} in phase {} (not while an edge was down): {body}",
                    a.phase
                );
            }
            Outcome::NoAnswer(why) => panic!("{name}: a request got no answer: {why}"),
        }
    }

    // Every session's trace, read back.
    let mut reader = stack.reader(0);
    let mut sessions: Vec<(String, Vec<String>)> = logs
        .iter()
        .map(|(sid, log)| {
            let told = log
                .iter()
                .filter(|a| a.answer.outcome.is_ok())
                .filter_map(|a| a.marker.clone())
                .collect();
            (sid.clone(), told)
        })
        .collect();
    sessions.push((probe.0.to_owned(), probe.1.to_vec()));
    let (mut events, mut told_total, mut missing, mut twice) = (0, 0, 0, 0);
    for (sid, told) in &sessions {
        let trace = stack::read_trace(&mut reader, sid).await;
        let check = stack::check_trace(&trace, told);
        assert!(check.holds(), "{name}: session {sid}: {check:?}");
        events += check.events;
        told_total += told.len();
        missing += check.missing.len();
        twice += check.twice.len();
    }
    println!(
        "{name}: {} traces read back, {events} events: {told_total} calls told recorded, \
         missing {missing}, twice {twice}, seq gap-free in every session",
        sessions.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killing_a_session_replica_a_backend_and_an_edge_under_load_postgres() {
    let name = "faults";
    let Some((pg, haproxy)) =
        stack::requirements("killing_a_session_replica_a_backend_and_an_edge_under_load_postgres")
    else {
        return;
    };
    let mut stack = Stack::start(&pg, &haproxy, AGENTS + 1, None).await;
    let lb = stack.lb.url.clone();
    let probe = stack.keys.agents[AGENTS].clone();
    let probe_sid = stack::open_session(&lb, &probe, "probe", None).await;
    let mut probe_told = Vec::new();
    let load = start_load(&lb, &stack.keys.agents[..AGENTS]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 1. A session replica (behind edge A).
    load.phase.store(1, Ordering::Relaxed);
    stack.sessions[0].kill();
    tokio::time::sleep(DOWN).await;
    stack.sessions[0].restart();
    let edge_a = stack.edges[0].url();
    let back = until_ok(&edge_a, &probe, "record_reasoning", None, &mut probe_told).await;
    println!(
        "{name}: session replica A SIGKILLed for {DOWN:?}; after its restart, calls through it \
         succeeded again in {back:.1?}"
    );

    // 2. A backend service (the broker).
    load.phase.store(2, Ordering::Relaxed);
    stack.broker.kill();
    tokio::time::sleep(DOWN).await;
    stack.broker.restart();
    let mut back = Duration::ZERO;
    for edge in &stack.edges {
        back = back.max(until_ok(&edge.url(), &probe, "list_symbols", None, &mut probe_told).await);
    }
    println!(
        "{name}: broker SIGKILLed for {DOWN:?}; after its restart, calls to it succeeded again \
         through both edges in {back:.1?}"
    );

    // 3. An edge (B): the balancer sends calls to A meanwhile.
    load.phase.store(3, Ordering::Relaxed);
    let killed = Instant::now();
    stack.edges[1].kill();
    tokio::time::sleep(DOWN).await;
    stack.edges[1].restart();
    let edge_b = stack.edges[1].url();
    let direct = until_ok(&edge_b, &probe, "record_reasoning", None, &mut probe_told).await;
    let edge_back = Instant::now();
    let balanced = until_ok(
        &lb,
        &probe,
        "record_reasoning",
        Some("edge_b"),
        &mut probe_told,
    )
    .await;
    println!(
        "{name}: edge B SIGKILLed for {DOWN:?}; after its restart it answered in {direct:.1?}, \
         and the balancer sent it calls again {balanced:.1?} later"
    );
    load.phase.store(4, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(1)).await;

    let logs = load.finish().await;
    verify(
        name,
        &stack,
        &logs,
        (probe_sid.as_str(), probe_told.as_slice()),
        Some((killed, edge_back)),
    )
    .await;
    stack.stop().await;
}

/// The cluster serving `url` (`pg_lsclusters`: version and name), when it
/// runs on this machine.
fn local_cluster(url: &str) -> Option<(String, String)> {
    let port = url
        .rsplit('@')
        .next()
        .and_then(|hostport| hostport.split('/').next())
        .and_then(|hostport| hostport.rsplit_once(':'))
        .map_or("5432".to_owned(), |(_, p)| p.to_owned());
    let out = std::process::Command::new("pg_lsclusters")
        .arg("--no-header")
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cols| cols.len() > 3 && cols[2] == port && cols[3] == "online")
        .map(|cols| (cols[0].to_owned(), cols[1].to_owned()))
}

/// Restarting PostgreSQL disturbs every other test using the server, so
/// this runs only when `ITHACA_TEST_POSTGRES_RESTART=1` says it may (as
/// `.ci/run` does, in a step of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn restarting_postgres_under_load_postgres_restart() {
    let name = "postgres restart";
    let test = "restarting_postgres_under_load_postgres_restart";
    if std::env::var("ITHACA_TEST_POSTGRES_RESTART").as_deref() != Ok("1") {
        eprintln!(
            "NOT RUN: {test} restarts the PostgreSQL server; set ITHACA_TEST_POSTGRES_RESTART=1 \
             (and ITHACA_TEST_POSTGRES_URL) when nothing else uses it"
        );
        return;
    }
    let Some((pg, haproxy)) = stack::requirements(test) else {
        return;
    };
    let (version, cluster) = local_cluster(&pg)
        .unwrap_or_else(|| panic!("{test}: no online local cluster (pg_lsclusters) serves {pg}"));
    let stack = Stack::start(&pg, &haproxy, AGENTS + 1, None).await;
    let lb = stack.lb.url.clone();
    let probe = stack.keys.agents[AGENTS].clone();
    let probe_sid = stack::open_session(&lb, &probe, "probe", None).await;
    let mut probe_told = Vec::new();
    // A person watches the probe's session on edge A across the restart.
    let watched_on = stack.edges[0].url();
    let mut watch = TraceStream::open(&watched_on, &stack.keys.human, &probe_sid).await;
    let load = start_load(&lb, &stack.keys.agents[..AGENTS]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    load.phase.store(1, Ordering::Relaxed);
    let started = Instant::now();
    let status = std::process::Command::new("pg_ctlcluster")
        .args([version.as_str(), cluster.as_str(), "restart"])
        .status()
        .expect("run pg_ctlcluster");
    let restart = started.elapsed();
    assert!(
        status.success(),
        "pg_ctlcluster {version} {cluster} restart"
    );
    let mut back = Duration::ZERO;
    for edge in &stack.edges {
        back = back.max(
            until_ok(
                &edge.url(),
                &probe,
                "record_reasoning",
                None,
                &mut probe_told,
            )
            .await,
        );
        back = back.max(until_ok(&edge.url(), &probe, "list_symbols", None, &mut probe_told).await);
    }
    println!(
        "{name}: pg_ctlcluster {version} {cluster} restart took {restart:.1?}; afterwards calls \
         through both edges (session and broker) succeeded again in {back:.1?}, with no service \
         restarted"
    );
    load.phase.store(2, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let logs = load.finish().await;
    verify(
        name,
        &stack,
        &logs,
        (probe_sid.as_str(), probe_told.as_slice()),
        None,
    )
    .await;

    // The watcher's stream shows the probe's whole trace, in order and
    // once. It may have ended during the outage (the edge re-checks the
    // watcher's key, which cannot verify while the database is down); a
    // client then reconnects from its last seq, as SSE clients do. It
    // must never stall open without delivering.
    let last = stack::read_trace(&mut stack.reader(0), &probe_sid)
        .await
        .last()
        .expect("the probe's trace")
        .seq;
    let mut seen = Vec::new();
    let mut reconnects = 0;
    let reached = |s: &[serde_json::Value]| s.last().and_then(|e| e["seq"].as_i64()) >= Some(last);
    while !watch
        .read_until(&mut seen, Duration::from_secs(30), reached)
        .await
    {
        reconnects += 1;
        assert!(
            reconnects <= 3,
            "{name}: the watcher's stream stalled or kept ending; it reached {:?} of {last}",
            seen.last().map(|e| &e["seq"])
        );
        let from = seen.last().and_then(|e| e["seq"].as_i64()).unwrap_or(0);
        watch = TraceStream::open_after(&watched_on, &stack.keys.human, &probe_sid, from).await;
    }
    let seqs: Vec<i64> = seen.iter().filter_map(|e| e["seq"].as_i64()).collect();
    assert_eq!(
        seqs,
        (1..=last).collect::<Vec<_>>(),
        "{name}: the watcher saw the trace in order, each event once"
    );
    println!(
        "{name}: a person's trace stream on edge A showed all {last} events of the probe's \
         session in order across the restart, after {reconnects} reconnect(s) from its last seq"
    );
    stack.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_backend_times_out_and_the_edges_other_calls_are_unaffected_postgres() {
    let name = "slow backend";
    let Some((pg, haproxy)) = stack::requirements(
        "a_slow_backend_times_out_and_the_edges_other_calls_are_unaffected_postgres",
    ) else {
        return;
    };
    // The fixture backend, with its `fixture_sleep` tool.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let fixture = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(ithaca_fixture::serve(listener, std::future::pending()));
    let stack = Stack::start(&pg, &haproxy, AGENTS + 1, Some(&fixture)).await;
    let lb = stack.lb.url.clone();
    let slow = stack.keys.agents[AGENTS].clone();
    let slow_sid = stack::open_session(&lb, &slow, "slow", None).await;
    let load = start_load(&lb, &stack.keys.agents[..AGENTS]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Four calls that sleep well past the 2 s deadline, two on each edge,
    // while the load runs; then one short sleep on the same backend.
    load.phase.store(1, Ordering::Relaxed);
    let sleep_ms = 3 * stack::BACKEND_TIMEOUT.as_millis() as u64;
    let mut sleepers = Vec::new();
    for _ in 0..4 {
        let (lb, slow) = (lb.clone(), slow.clone());
        sleepers.push(tokio::spawn(async move {
            stack::call(&lb, &slow, "fixture_sleep", json!({"ms": sleep_ms})).await
        }));
    }
    let mut took = Vec::new();
    for s in sleepers {
        let a = s.await.expect("sleeper");
        let Outcome::ToolError(e) = &a.outcome else {
            panic!("a call past the deadline is a tool error: {:?}", a.outcome);
        };
        assert_eq!(e["error"], "TIMEOUT", "{e}");
        assert_eq!(e["retryable"], true, "{e}");
        let message = e["message"].as_str().unwrap_or("");
        assert!(
            message.contains("ithaca.fixture.v1.ConformanceFixture"),
            "the timeout names the service: {message}"
        );
        took.push(a.took);
    }
    load.phase.store(2, Ordering::Relaxed);
    let quick = stack::call(&lb, &slow, "fixture_sleep", json!({"ms": 10})).await;
    assert!(quick.outcome.is_ok(), "{:?}", quick.outcome);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let logs = load.finish().await;

    // The other calls during the slow ones: all answered with results.
    let during: Vec<&Attempt> = logs
        .iter()
        .flat_map(|(_, l)| l)
        .filter(|a| a.phase == 1)
        .collect();
    assert!(
        !during.is_empty(),
        "the load ran while the backend was slow"
    );
    for a in &during {
        assert!(
            a.answer.outcome.is_ok(),
            "a call beside the slow ones: {:?}",
            a.answer.outcome
        );
    }
    let (median, p99, max) = stack::latency(&during.iter().map(|a| &a.answer).collect::<Vec<_>>());
    println!(
        "{name}: 4 calls sleeping {sleep_ms} ms got TIMEOUT (retryable) after {:.1?}; the {} other \
         calls meanwhile all succeeded: median {median:.1?}, p99 {p99:.1?}, max {max:.1?}",
        took.iter().max().copied().unwrap_or_default(),
        during.len()
    );
    // The slow calls are traced as calls with a TIMEOUT result.
    let trace = stack::read_trace(&mut stack.reader(1), &slow_sid).await;
    let timeouts = trace
        .iter()
        .filter(|e| e.r#type == "tool_result")
        .map(|e| ithaca_kit::json::from_struct(e.payload.clone().unwrap_or_default()))
        .filter(|p| p["name"] == "fixture_sleep" && p["error"] == "TIMEOUT")
        .count();
    assert_eq!(timeouts, 4, "each slow call's TIMEOUT is in the trace");
    verify(name, &stack, &logs, (slow_sid.as_str(), &[]), None).await;
    stack.stop().await;
}
