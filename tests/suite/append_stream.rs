//! `SessionService.AppendEvents`, the stream the edge records its calls'
//! events on: each message is its own caller's append (checked, traced and
//! refused as a unary call would be), many callers share one stream with
//! the trace still gap-free, a stream ends cleanly only after answering
//! what it read, and the edge's client moves to a fresh stream when a
//! session service shuts down, and to unary calls when it has no stream.

use crate::common;

use ithaca_edge::appends::{Appends, Sent};
use ithaca_edge::backend::Backend;
use ithaca_kit::principal::{InternalKey, Principal};
use ithaca_proto::session::v1 as pb;
use ithaca_proto::session::v1::streamed_append::Work;
use serde_json::json;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(10);

async fn open_session(url: &str, principal: &Principal, prompt: &str) -> String {
    common::session_client(url, principal.clone())
        .session_context(pb::SessionContextRequest {
            prompt: Some(prompt.to_owned()),
            ..Default::default()
        })
        .await
        .expect("open a session")
        .into_inner()
        .session_id
}

fn tool_result(session_id: &str, payload: serde_json::Value) -> pb::AppendEventRequest {
    pb::AppendEventRequest {
        session_id: session_id.to_owned(),
        r#type: pb::EventType::ToolResult as i32,
        payload: None,
        payload_json: payload.to_string().into_bytes(),
    }
}

/// The whole trace of a session, as (seq, payload).
async fn trace(
    url: &str,
    principal: &Principal,
    session_id: &str,
) -> Vec<(i64, serde_json::Value)> {
    let mut client = common::session_client(url, principal.clone());
    common::stack::read_trace(&mut client, session_id)
        .await
        .into_iter()
        .map(|e| {
            let payload = ithaca_kit::json::from_struct(e.payload.expect("a payload"));
            (e.seq, payload)
        })
        .collect()
}

async fn append(appends: &Appends, principal: &Principal, request: pb::AppendEventRequest) -> i64 {
    match appends.append(principal, request).await {
        Sent::Done(Ok(seq)) => seq,
        Sent::Done(Err(status)) => panic!("the append failed: {status:?}"),
        Sent::Unary => panic!("this session service has the stream"),
    }
}

/// Two tenants, eight writers each, one stream: every append lands once,
/// in its own caller's session, in each writer's order, with seq gap-free.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_callers_share_one_stream_and_each_trace_stays_gap_free() {
    const WRITERS: usize = 8;
    const EACH: usize = 150;
    let dir = tempfile::tempdir().expect("tempdir");
    let (_process, url) = common::serve("session", &common::sqlite_path(&dir, "session"), "s");
    let tenants: Vec<(Principal, String)> = {
        let mut v = Vec::new();
        for t in ["a", "b"] {
            let principal = common::agent(&format!("tenant-{t}-{}", uuid::Uuid::new_v4()), "w");
            let session = open_session(&url, &principal, "streamed appends").await;
            v.push((principal, session));
        }
        v
    };
    let appends = Arc::new(Appends::new(
        Backend::new(&url, DEADLINE).expect("a url"),
        common::key(),
    ));
    let mut tasks = Vec::new();
    for writer in 0..2 * WRITERS {
        let (principal, session) = tenants[writer % 2].clone();
        let appends = appends.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..EACH {
                let request = tool_result(&session, json!({"writer": writer, "n": n}));
                append(&appends, &principal, request).await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("a writer");
    }
    for (principal, session) in &tenants {
        let events = trace(&url, principal, session).await;
        let seqs: Vec<i64> = events.iter().map(|(seq, _)| *seq).collect();
        let opening = 2; // session_open and the prompt
        let total = (WRITERS * EACH + opening) as i64;
        assert_eq!(seqs, (1..=total).collect::<Vec<_>>(), "gap-free, each once");
        let mut per_writer: HashMap<i64, Vec<i64>> = HashMap::new();
        for (_, payload) in &events {
            if let (Some(w), Some(n)) = (payload["writer"].as_i64(), payload["n"].as_i64()) {
                per_writer.entry(w).or_default().push(n);
            }
        }
        assert_eq!(per_writer.len(), WRITERS, "only this tenant's writers");
        for (writer, ns) in per_writer {
            assert_eq!(ns, (0..EACH as i64).collect::<Vec<_>>(), "writer {writer}");
        }
    }
}

/// The raw stream: each message is checked as its own caller, a refusal
/// answers that message only, and closing the request side ends the
/// stream cleanly after every answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_message_is_its_own_callers_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_process, url) = common::serve("session", &common::sqlite_path(&dir, "session"), "s");
    let alice = common::agent(&format!("tenant-{}", uuid::Uuid::new_v4()), "alice");
    let mallory = common::agent(&format!("tenant-{}", uuid::Uuid::new_v4()), "mallory");
    let session = open_session(&url, &alice, "checked one by one").await;
    let key = common::key();
    let stranger = InternalKey::new(vec![7u8; 32]).expect("a key");
    let message = |id: u64, assertion: String, work: Option<Work>| pb::StreamedAppend {
        id,
        assertion,
        traceparent: String::new(),
        work,
        deadline_ms: 5_000,
    };
    let ok = || Some(Work::Append(tool_result(&session, json!({"ok": true}))));
    let begin = |session_id: Option<&str>| {
        Some(Work::BeginCall(pb::BeginCallRequest {
            session_id: session_id.map(str::to_owned),
            tool: "list_symbols".to_owned(),
            arguments: None,
            arguments_json: br#"{"limit": 3}"#.to_vec(),
            subject_kind: String::new(),
        }))
    };
    let messages = vec![
        message(1, key.mint(&alice, 60), ok()),
        message(2, stranger.mint(&alice, 60), ok()),
        message(3, key.mint(&mallory, 60), ok()),
        message(4, key.mint(&alice, 60), None),
        message(
            5,
            key.mint(&alice, 60),
            Some(Work::Append(pb::AppendEventRequest {
                r#type: pb::EventType::SessionClosed as i32,
                ..tool_result(&session, json!({}))
            })),
        ),
        message(6, "v1.not-an-assertion".to_owned(), ok()),
        message(7, key.mint(&alice, 60), ok()),
        // BeginCall: alice's current session; mallory has none.
        message(8, key.mint(&alice, 60), begin(None)),
        message(9, key.mint(&mallory, 60), begin(None)),
        message(10, key.mint(&mallory, 60), begin(Some(&session))),
    ];
    // The stream's own assertion is the system's; it appends nothing.
    let mut client = common::session_client(&url, Principal::system(""));
    let answers = client
        .append_events(tokio_stream::iter(messages))
        .await
        .expect("the stream opens")
        .into_inner();
    use tokio_stream::StreamExt;
    let answers: Vec<pb::StreamedAppendAnswer> =
        tokio::time::timeout(DEADLINE, answers.collect::<Result<Vec<_>, _>>())
            .await
            .expect("the stream ends once its caller closed its side")
            .expect("it ends cleanly");
    let by_id: HashMap<u64, &pb::StreamedAppendAnswer> =
        answers.iter().map(|a| (a.id, a)).collect();
    assert_eq!(by_id.len(), 10, "one answer a message: {answers:?}");
    let code = |id: u64| tonic::Code::from(by_id[&id].code);
    assert_eq!(code(1), tonic::Code::Ok);
    assert_eq!(code(2), tonic::Code::Unauthenticated, "{:?}", by_id[&2]);
    assert_eq!(
        code(3),
        tonic::Code::NotFound,
        "another tenant's session: {:?}",
        by_id[&3]
    );
    assert_eq!(code(4), tonic::Code::InvalidArgument, "{:?}", by_id[&4]);
    assert!(by_id[&4].message.contains("append"), "{:?}", by_id[&4]);
    assert_eq!(code(5), tonic::Code::InvalidArgument, "{:?}", by_id[&5]);
    assert_eq!(code(6), tonic::Code::Unauthenticated, "{:?}", by_id[&6]);
    assert_eq!(code(7), tonic::Code::Ok);
    // BeginCall: the gate and the tool_call, or the refusal with its
    // domain code, as the unary call answers them.
    assert_eq!(code(8), tonic::Code::Ok, "{:?}", by_id[&8]);
    let admitted = by_id[&8].session.as_ref().expect("the session");
    assert_eq!(admitted.session_id, session);
    assert_eq!(code(9), tonic::Code::FailedPrecondition, "{:?}", by_id[&9]);
    assert_eq!(
        by_id[&9].domain_code, "NO_ACTIVE_SESSION",
        "{:?}",
        by_id[&9]
    );
    assert_ne!(
        code(10),
        tonic::Code::Ok,
        "another tenant's pin: {:?}",
        by_id[&10]
    );
    // Refusals carry no seq; the three appends got the next three.
    for id in [2, 3, 4, 5, 6, 9, 10] {
        assert_eq!(by_id[&id].seq, 0, "{:?}", by_id[&id]);
        assert!(by_id[&id].session.is_none(), "{:?}", by_id[&id]);
    }
    let mut seqs = [by_id[&1].seq, by_id[&7].seq, by_id[&8].seq];
    seqs.sort_unstable();
    assert_eq!(seqs, [3, 4, 5], "after session_open and the prompt");
    let events = trace(&url, &alice, &session).await;
    assert_eq!(events.len(), 5);
    let (_, call) = events
        .iter()
        .find(|(seq, _)| *seq == by_id[&8].seq)
        .expect("the tool_call");
    assert_eq!(call["name"], "list_symbols", "{call}");
    assert_eq!(call["arguments"]["limit"].as_f64(), Some(3.0), "{call}");
}

/// `ithaca serve session` on SQLite in `dir`, restartable on its address.
fn session_node(dir: &tempfile::TempDir) -> common::stack::Node {
    let db = common::sqlite_path(dir, "session");
    let args = [
        "serve",
        "session",
        "--database-url",
        &db,
        "--db-schema",
        "s",
    ];
    common::stack::Node::start("session", args.map(str::to_owned).to_vec())
}

/// A session service shutting down ends its streams (it would otherwise
/// wait for them forever), and the edge's next append opens a fresh one
/// on the service that took its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_shuts_down_ends_the_stream_and_the_next_append_opens_another() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut node = session_node(&dir);
    let alice = common::agent(&format!("tenant-{}", uuid::Uuid::new_v4()), "alice");
    let session = open_session(&node.url(), &alice, "across a restart").await;
    let appends = Appends::new(
        Backend::new(&node.url(), DEADLINE).expect("a url"),
        common::key(),
    );
    assert_eq!(
        append(&appends, &alice, tool_result(&session, json!({"n": 1}))).await,
        3
    );

    // The edge's stream is open; SIGTERM must still end the process.
    let stopping = Instant::now();
    let status = tokio::task::block_in_place(|| node.terminate());
    assert!(status.success(), "a graceful exit: {status:?}");
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "the open stream held the shutdown for {:?}",
        stopping.elapsed()
    );
    node.restart();
    assert_eq!(
        append(&appends, &alice, tool_result(&session, json!({"n": 2}))).await,
        4
    );
    // The gate rides the same stream.
    let begun = match appends
        .begin_call(
            &alice,
            pb::BeginCallRequest {
                tool: "list_symbols".to_owned(),
                arguments_json: b"{}".to_vec(),
                ..Default::default()
            },
        )
        .await
    {
        Sent::Done(begun) => begun.expect("the gate lets alice in"),
        Sent::Unary => panic!("this session service has the stream"),
    };
    assert_eq!(
        (begun.seq, begun.session.session_id.as_str()),
        (5, session.as_str())
    );
    let seqs: Vec<i64> = trace(&node.url(), &alice, &session)
        .await
        .iter()
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
}

/// A server without the stream (here the auth service, standing where a
/// session service of an earlier release would) answers UNIMPLEMENTED,
/// and the client says to use unary calls.
#[tokio::test]
async fn a_service_without_the_stream_gets_unary_calls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let auth = common::start_auth(&common::sqlite_path(&dir, "auth"), "a").await;
    let appends = Appends::new(
        Backend::new(&auth.url, DEADLINE).expect("a url"),
        common::key(),
    );
    let alice = common::agent("tenant-x", "alice");
    let sent = appends
        .append(
            &alice,
            tool_result("00000000-0000-0000-0000-000000000000", json!({})),
        )
        .await;
    assert!(matches!(sent, Sent::Unary), "told to use unary calls");
    auth.stop().await;
}

/// An unreachable session service is UNAVAILABLE naming it, within the
/// deadline, as a unary call's failure is.
#[tokio::test]
async fn an_unreachable_service_is_unavailable_naming_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let url = format!("http://{}", listener.local_addr().expect("an address"));
    drop(listener);
    let appends = Appends::new(
        Backend::new(&url, Duration::from_secs(2)).expect("a url"),
        common::key(),
    );
    let alice = common::agent("tenant-x", "alice");
    let started = Instant::now();
    let sent = appends.append(&alice, tool_result("s", json!({}))).await;
    let Sent::Done(Err(status)) = sent else {
        panic!("an unreachable service cannot append");
    };
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        status
            .message()
            .contains("ithaca.session.v1.SessionService"),
        "{status:?}"
    );
}

/// A graceful shutdown in the middle of a load: the stream ends cleanly
/// after answering what it read, so every append is either acknowledged
/// (and in the trace once) or refused (and not in the trace at all), with
/// nothing in between; the messages the stream never read go to a fresh
/// stream, which finds the service down, then back. The seq stays
/// gap-free across the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_graceful_shutdown_under_load_leaves_no_append_in_doubt() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    const WRITERS: usize = 8;
    const EACH: usize = 400;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut node = session_node(&dir);
    let alice = common::agent(&format!("tenant-{}", uuid::Uuid::new_v4()), "alice");
    let session = open_session(&node.url(), &alice, "a shutdown under load").await;
    let appends = Arc::new(Appends::new(
        Backend::new(&node.url(), DEADLINE).expect("a url"),
        common::key(),
    ));
    let acknowledged = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let (appends, alice, session, acknowledged) = (
            appends.clone(),
            alice.clone(),
            session.clone(),
            acknowledged.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut told = Vec::new();
            for n in 0..EACH {
                let marker = format!("{writer}-{n}");
                let request = tool_result(&session, json!({"marker": marker}));
                let ok = match appends.append(&alice, request).await {
                    Sent::Done(Ok(_)) => {
                        acknowledged.fetch_add(1, Ordering::Relaxed);
                        true
                    }
                    Sent::Done(Err(status)) => {
                        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                        // Not appended: the service was down, or shutting
                        // down and never read it. Not "in doubt".
                        assert!(
                            !status.message().contains("unknown"),
                            "a clean end leaves nothing in doubt: {status:?}"
                        );
                        // Back off a little while the service is down.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                        false
                    }
                    Sent::Unary => panic!("this session service has the stream"),
                };
                told.push((marker, ok));
            }
            told
        }));
    }
    // Shut it down once a few hundred appends went through, then start it
    // again on the same address.
    let waited = Instant::now();
    while acknowledged.load(Ordering::Relaxed) < 300 {
        assert!(waited.elapsed() < Duration::from_secs(30), "no progress");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let status = tokio::task::block_in_place(|| node.terminate());
    assert!(status.success(), "a graceful exit: {status:?}");
    tokio::task::block_in_place(|| node.restart());
    let mut told = Vec::new();
    for task in tasks {
        told.extend(task.await.expect("a writer"));
    }
    let events = trace(&node.url(), &alice, &session).await;
    let seqs: Vec<i64> = events.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as i64).collect::<Vec<_>>(),
        "gap-free"
    );
    let mut recorded: HashMap<String, usize> = HashMap::new();
    for (_, payload) in &events {
        if let Some(marker) = payload["marker"].as_str() {
            *recorded.entry(marker.to_owned()).or_default() += 1;
        }
    }
    let (mut ok, mut refused) = (0, 0);
    for (marker, acked) in &told {
        let times = recorded.get(marker).copied().unwrap_or(0);
        if *acked {
            ok += 1;
            assert_eq!(times, 1, "acknowledged {marker} is in the trace once");
        } else {
            refused += 1;
            assert_eq!(times, 0, "refused {marker} is not in the trace");
        }
    }
    assert!(
        ok > 300 && refused > 0,
        "{ok} acknowledged, {refused} refused"
    );
    assert_eq!(
        recorded.len(),
        ok,
        "nothing recorded that was not acknowledged"
    );
    println!("graceful shutdown under load: {ok} acknowledged, {refused} refused, none in doubt");
}
