//! The replicated stack on one machine (issue 15, item 1): two edges behind
//! HAProxy, two session replicas, one each of auth, broker, skills and
//! approvals, every process a real `ithaca serve`, all on PostgreSQL.
//!
//! - An agent's calls alternate between the edges.
//! - A person's trace stream, held open on edge A, shows the events appended
//!   through edge B, in order.
//! - `seq` stays gap-free with 16 agents writing one session at once, their
//!   calls balanced over both edges and so over both session replicas.

use crate::common;

use common::stack::{self, Outcome, Stack, TraceStream};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::time::{Duration, Instant};

const AGENTS: usize = 16;
const CALLS_PER_AGENT: usize = 25;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicated_stack_behind_haproxy_postgres() {
    let Some((pg, haproxy)) = stack::requirements("replicated_stack_behind_haproxy_postgres")
    else {
        return;
    };
    let stack = Stack::start(&pg, &haproxy, AGENTS, None).await;
    let lb = stack.lb.url.clone();
    let keys = &stack.keys;

    // One agent's calls alternate between the edges.
    let sid = stack::open_session(&lb, &keys.agents[0], "replicas", None).await;
    let mut served = Vec::new();
    for n in 0..6 {
        let a = stack::call(
            &lb,
            &keys.agents[0],
            "record_reasoning",
            json!({"text": format!("alternation {n}")}),
        )
        .await;
        assert!(a.outcome.is_ok(), "{:?}", a.outcome);
        served.push(a.edge.expect("the balancer names the edge"));
    }
    println!("replicas: one agent's calls were served by {served:?}");
    assert!(
        served.windows(2).all(|w| w[0] != w[1]),
        "consecutive calls alternate between the edges: {served:?}"
    );

    // A person's trace stream, held open on edge A from seq 0.
    let mut watch = TraceStream::open(&stack.edges[0].url(), &keys.human, &sid).await;

    // 16 agents join the session and write into it at once, through the
    // balancer (so through both edges and both session replicas).
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (i, token) in keys.agents.iter().enumerate() {
        let lb = lb.clone();
        let token = token.clone();
        let sid = sid.clone();
        tasks.push(tokio::spawn(async move {
            if i > 0 {
                stack::open_session(&lb, &token, "join", Some(&sid)).await;
            }
            let mut answers = Vec::new();
            for n in 0..CALLS_PER_AGENT {
                let text = format!("agent {i} call {n}");
                let a = stack::call(&lb, &token, "record_reasoning", json!({"text": text})).await;
                answers.push((text, a));
            }
            answers
        }));
    }
    let mut by_edge: HashMap<String, usize> = HashMap::new();
    let mut told = Vec::new();
    let mut through_b = Vec::new();
    for task in tasks {
        for (text, a) in task.await.expect("agent task") {
            let Outcome::Ok(event) = &a.outcome else {
                panic!("{text}: {:?}", a.outcome);
            };
            let edge = a.edge.clone().unwrap_or_default();
            *by_edge.entry(edge.clone()).or_default() += 1;
            if edge == "edge_b" {
                through_b.push((event["seq"].as_i64().expect("seq"), text.clone()));
            }
            told.push(text);
        }
    }
    let elapsed = started.elapsed();
    println!(
        "replicas: {} calls by {AGENTS} agents in {elapsed:.2?} ({:.0}/s), by edge {by_edge:?}",
        told.len(),
        told.len() as f64 / elapsed.as_secs_f64()
    );
    assert_eq!(by_edge.len(), 2, "both edges served: {by_edge:?}");
    assert!(!through_b.is_empty());

    // The stored trace, read from replica B: gap-free, everything once.
    let events = stack::read_trace(&mut stack.reader(1), &sid).await;
    let check = stack::check_trace(&events, &told);
    println!(
        "replicas: trace of {} events; gap-free {}, missing {}, twice {}",
        check.events,
        check.gap_free,
        check.missing.len(),
        check.twice.len()
    );
    assert!(check.holds(), "{check:?}");
    // Each agent's calls are in its own order.
    let mut per_agent: HashMap<String, Vec<usize>> = HashMap::new();
    for e in &events {
        let payload = e
            .payload
            .clone()
            .map(ithaca_kit::json::from_struct)
            .unwrap_or(Value::Null);
        if e.r#type == "reasoning"
            && let Some((agent, n)) = payload["text"]
                .as_str()
                .and_then(|t| t.strip_prefix("agent "))
                .and_then(|t| t.split_once(" call "))
        {
            per_agent
                .entry(agent.to_owned())
                .or_default()
                .push(n.parse().expect("call number"));
        }
    }
    assert_eq!(per_agent.len(), AGENTS);
    for (agent, ns) in per_agent {
        assert_eq!(
            ns,
            (0..CALLS_PER_AGENT).collect::<Vec<_>>(),
            "agent {agent}'s calls are in its order"
        );
    }

    // The stream on edge A delivered every event, those appended through
    // edge B included, in seq order.
    let last = events.last().expect("events").seq;
    let mut seen = Vec::new();
    let complete = watch
        .read_until(&mut seen, Duration::from_secs(60), |s| {
            s.last().and_then(|e| e["seq"].as_i64()) >= Some(last)
        })
        .await;
    let seqs: Vec<i64> = seen.iter().filter_map(|e| e["seq"].as_i64()).collect();
    assert!(
        complete,
        "the stream on edge A reached seq {last}; it got {} events",
        seqs.len()
    );
    assert_eq!(
        seqs,
        (1..=last).collect::<Vec<_>>(),
        "the stream is the trace, in order"
    );
    let streamed: HashMap<i64, &Value> = seen
        .iter()
        .filter_map(|e| e["seq"].as_i64().map(|s| (s, e)))
        .collect();
    for (seq, text) in &through_b {
        assert_eq!(
            streamed[seq]["payload"]["text"], *text,
            "the event appended through edge B at seq {seq}"
        );
    }
    println!(
        "replicas: the stream on edge A showed all {last} events in order, {} appended through edge B",
        through_b.len()
    );
    stack.stop().await;
}
