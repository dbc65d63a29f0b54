//! Gap-free `seq` under concurrency: 16 appenders × 500 events into one
//! session, through real `ithaca serve session` processes.

mod common;

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
            prompt: "concurrency".into(),
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
                        payload: Some(json::to_struct(json!({"writer": writer, "n": n}))),
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
                limit: 1000,
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
