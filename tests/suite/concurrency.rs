//! Gap-free `seq` under concurrency: 16 appenders × 500 events into one
//! session, through real `ithaca serve session` processes.

use crate::common;

use ithaca_kit::json;
use ithaca_proto::session::v1 as pb;
use serde_json::json;
use std::collections::HashMap;

const WRITERS: usize = 16;
const EVENTS_PER_WRITER: usize = 500;

/// Open a session through the first URL, let 16 writers append through the
/// URLs in turn, then check the stored trace.
async fn hammer(urls: &[String]) {
    let tenant = format!("tenant-{}", uuid::Uuid::new_v4().simple());
    let principal = common::agent(&tenant, "writer");
    let mut first = common::session_client(&urls[0], principal.clone());
    let session = first
        .session_context(pb::SessionContextRequest {
            prompt: Some("concurrency".into()),
            ..Default::default()
        })
        .await
        .expect("open session")
        .into_inner();
    let opening_events = 2; // session_open + reasoning

    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let mut client = common::session_client(&urls[writer % urls.len()], principal.clone());
        let session_id = session.session_id.clone();
        tasks.push(tokio::spawn(async move {
            for n in 0..EVENTS_PER_WRITER {
                client
                    .append_event(pb::AppendEventRequest {
                        session_id: session_id.clone(),
                        r#type: pb::EventType::ToolCall as i32,
                        // An older client's encoding, still read.
                        payload: Some(json::to_struct(json!({"writer": writer, "n": n}))),
                        payload_json: Vec::new(),
                    })
                    .await
                    .expect("append succeeds");
            }
        }));
    }
    for task in tasks {
        task.await.expect("writer task");
    }

    // Read everything back and check the sequence.
    let mut seqs = Vec::new();
    let mut per_writer: HashMap<i64, Vec<i64>> = HashMap::new();
    let mut after = 0;
    loop {
        let page = first
            .read_events(pb::ReadEventsRequest {
                session_id: session.session_id.clone(),
                after_seq: after,
                limit: Some(1000),
            })
            .await
            .expect("read")
            .into_inner();
        if page.events.is_empty() {
            break;
        }
        for e in page.events {
            after = e.seq;
            seqs.push(e.seq);
            let payload = json::from_struct(e.payload.expect("payload"));
            if let (Some(w), Some(n)) = (payload["writer"].as_i64(), payload["n"].as_i64()) {
                per_writer.entry(w).or_default().push(n);
            }
        }
    }
    let total = (WRITERS * EVENTS_PER_WRITER + opening_events) as i64;
    let expected: Vec<i64> = (1..=total).collect();
    assert_eq!(seqs.len(), expected.len(), "every append stored once");
    assert_eq!(
        seqs, expected,
        "seq is exactly 1..={total}, no gap, no duplicate"
    );
    assert_eq!(per_writer.len(), WRITERS);
    for (writer, ns) in per_writer {
        let want: Vec<i64> = (0..EVENTS_PER_WRITER as i64).collect();
        assert_eq!(ns, want, "writer {writer}'s events are in its own order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_writers_one_process_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_process, url) = common::serve("session", &common::sqlite_path(&dir, "session"), "unused");
    hammer(&[url]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_writers_two_processes_postgres() {
    let Some(pg) = common::postgres("sixteen_writers_two_processes_postgres") else {
        return;
    };
    let schema = common::unique_schema("conc");
    let (_a, url_a) = common::serve("session", &pg, &schema);
    let (_b, url_b) = common::serve("session", &pg, &schema);
    hammer(&[url_a, url_b]).await;
    common::drop_schema(&pg, &schema).await;
}

// ---------------------------------------------------------------------------
// A session process killed mid-batch (issue 13): appends that were
// acknowledged survive, once each, and `seq` stays gap-free.

/// Appends each writer makes that must be acknowledged.
const CRASH_APPENDS: usize = 150;

/// 16 writers append through `nodes` (writer w through node w % len); once
/// 1,000 appends were acknowledged, node 0 is SIGKILLed and started again.
/// A writer whose append failed goes on with its next one (never resending
/// the same payload, so a repeat would show). Afterwards the trace holds
/// every acknowledged append exactly once, no payload twice, seq gap-free.
async fn crash_mid_batch(name: &str, nodes: &mut [common::stack::Node]) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    let tenant = format!("tenant-{}", uuid::Uuid::new_v4().simple());
    let principal = common::agent(&tenant, "writer");
    let urls: Vec<String> = nodes.iter().map(|n| n.url()).collect();
    let mut first = common::session_client(&urls[0], principal.clone());
    let session = first
        .session_context(pb::SessionContextRequest {
            prompt: Some("crash".into()),
            ..Default::default()
        })
        .await
        .expect("open session")
        .into_inner();
    let acked = Arc::new(AtomicUsize::new(0));
    let bound = Instant::now() + Duration::from_secs(120);
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let mut client = common::session_client(&urls[writer % urls.len()], principal.clone());
        let (sid, acked) = (session.session_id.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            let (mut told, mut failed) = (Vec::new(), 0usize);
            let mut n = 0i64;
            while told.len() < CRASH_APPENDS {
                assert!(Instant::now() < bound, "writer {writer} made no progress");
                let request = pb::AppendEventRequest {
                    session_id: sid.clone(),
                    r#type: pb::EventType::ToolCall as i32,
                    payload: None,
                    payload_json: json::to_text(&json!({"writer": writer, "n": n})),
                };
                match client.append_event(request).await {
                    Ok(_) => {
                        told.push(n);
                        acked.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => {
                        failed += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                n += 1;
            }
            (writer as i64, told, failed)
        }));
    }
    while acked.load(Ordering::Relaxed) < 1_000 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let at = acked.load(Ordering::Relaxed);
    nodes[0].kill();
    let down = Instant::now();
    nodes[0].restart();
    let restart = down.elapsed();

    let mut told: HashMap<i64, Vec<i64>> = HashMap::new();
    let mut failed = 0;
    for task in tasks {
        let (writer, ns, f) = task.await.expect("writer task");
        told.insert(writer, ns);
        failed += f;
    }
    let mut stored: HashMap<i64, Vec<i64>> = HashMap::new();
    let mut seqs = Vec::new();
    let mut after = 0;
    let mut reader = common::session_client(&urls[urls.len() - 1], principal);
    loop {
        let page = reader
            .read_events(pb::ReadEventsRequest {
                session_id: session.session_id.clone(),
                after_seq: after,
                limit: Some(1000),
            })
            .await
            .expect("read")
            .into_inner();
        let Some(last) = page.events.last() else {
            break;
        };
        after = last.seq;
        for e in page.events {
            seqs.push(e.seq);
            let payload = json::from_struct(e.payload.expect("payload"));
            if let (Some(w), Some(n)) = (payload["writer"].as_i64(), payload["n"].as_i64()) {
                stored.entry(w).or_default().push(n);
            }
        }
    }
    assert_eq!(
        seqs,
        (1..=seqs.len() as i64).collect::<Vec<_>>(),
        "{name}: seq gap-free after the crash"
    );
    let (mut kept, mut extra) = (0, 0);
    for (writer, ns) in &told {
        let have = stored.get(writer).cloned().unwrap_or_default();
        // Each writer's payloads in its own order, none twice.
        assert!(
            have.windows(2).all(|w| w[0] < w[1]),
            "{name}: writer {writer}'s appends in order, none twice: {have:?}"
        );
        for n in ns {
            assert!(
                have.binary_search(n).is_ok(),
                "{name}: writer {writer}'s acknowledged append {n} is missing"
            );
        }
        kept += ns.len();
        extra += have.len() - ns.len();
    }
    println!(
        "{name}: SIGKILL after {at} acknowledged appends, restarted in {restart:.1?}; {failed} \
         appends failed meanwhile ({extra} of them committed anyway, unacknowledged); all {kept} \
         acknowledged appends stored once, seq 1..={} gap-free",
        seqs.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_process_killed_mid_batch_loses_nothing_acknowledged_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = common::sqlite_path(&dir, "session");
    let args = ["serve", "session", "--database-url", &path]
        .map(str::to_owned)
        .to_vec();
    let mut nodes = [common::stack::Node::start("session", args)];
    crash_mid_batch("crash (SQLite, one process)", &mut nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_session_process_killed_mid_batch_loses_nothing_acknowledged_postgres() {
    let Some(pg) =
        common::postgres("a_session_process_killed_mid_batch_loses_nothing_acknowledged_postgres")
    else {
        return;
    };
    let schema = common::unique_schema("crash");
    let args = [
        "serve",
        "session",
        "--database-url",
        &pg,
        "--db-schema",
        &schema,
    ]
    .map(str::to_owned)
    .to_vec();
    let mut nodes = [
        common::stack::Node::start("session-a", args.clone()),
        common::stack::Node::start("session-b", args),
    ];
    crash_mid_batch("crash (PostgreSQL, two processes)", &mut nodes).await;
    drop(nodes);
    common::drop_schema(&pg, &schema).await;
}

// ---------------------------------------------------------------------------
// Payloads as JSON text (what every service of this project sends): read
// before the Struct, integers kept, and bad text refused naming its field.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_text_payloads_are_recorded_and_bad_text_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_process, url) = common::serve("session", &common::sqlite_path(&dir, "session"), "unused");
    let tenant = format!("tenant-{}", uuid::Uuid::new_v4().simple());
    let mut client = common::session_client(&url, common::agent(&tenant, "texts"));
    let sid = client
        .session_context(pb::SessionContextRequest {
            prompt: Some("payloads as text".into()),
            ..Default::default()
        })
        .await
        .expect("open session")
        .into_inner()
        .session_id;

    // BeginCall: the text wins over a Struct sent beside it.
    let begun = client
        .begin_call(pb::BeginCallRequest {
            tool: "bench_ping".into(),
            arguments: Some(json::to_struct(json!({"note": "the struct"}))),
            arguments_json: json::to_text(&json!({"note": "the text", "n": 3})),
            ..Default::default()
        })
        .await
        .expect("begin call")
        .into_inner();
    let appended = client
        .append_event(pb::AppendEventRequest {
            session_id: sid.clone(),
            r#type: pb::EventType::ToolResult as i32,
            payload: None,
            payload_json: json::to_text(&json!({"call_seq": begun.seq, "outcome": "ok"})),
        })
        .await
        .expect("append")
        .into_inner();
    assert_eq!(appended.seq, begun.seq + 1);
    let events = client
        .read_events(pb::ReadEventsRequest {
            session_id: sid.clone(),
            after_seq: begun.seq - 1,
            limit: Some(10),
        })
        .await
        .expect("read")
        .into_inner()
        .events;
    let payloads: Vec<_> = events
        .into_iter()
        .map(|e| json::from_struct(e.payload.expect("payload")))
        .collect();
    assert_eq!(
        payloads,
        vec![
            json!({"name": "bench_ping", "arguments": {"note": "the text", "n": 3}}),
            json!({"call_seq": begun.seq, "outcome": "ok"}),
        ]
    );

    // Bad text: InvalidArgument naming the field, and nothing recorded.
    for (text, why) in [
        (&b"{\"call_seq\": "[..], "not valid JSON"),
        (&b"[1, 2]"[..], "must be a JSON object"),
    ] {
        let refused = client
            .append_event(pb::AppendEventRequest {
                session_id: sid.clone(),
                r#type: pb::EventType::ToolResult as i32,
                payload: None,
                payload_json: text.to_vec(),
            })
            .await
            .expect_err("bad payload_json");
        invalid_naming(&refused, &format!("payload_json: {why}"));
        let refused = client
            .begin_call(pb::BeginCallRequest {
                tool: "bench_ping".into(),
                arguments_json: text.to_vec(),
                ..Default::default()
            })
            .await
            .expect_err("bad arguments_json");
        invalid_naming(&refused, &format!("arguments_json: {why}"));
    }
    let last = client
        .read_events(pb::ReadEventsRequest {
            session_id: sid,
            after_seq: appended.seq,
            limit: Some(10),
        })
        .await
        .expect("read")
        .into_inner();
    assert!(
        last.events.is_empty(),
        "nothing recorded: {:?}",
        last.events
    );
}

/// `status` is INVALID_ARGUMENT and its message starts with `start`.
fn invalid_naming(status: &tonic::Status, start: &str) {
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(status.message().starts_with(start), "{}", status.message());
}
