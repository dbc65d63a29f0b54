//! The live tail: a subscriber that joins mid-stream at seq N receives N+1…
//! in order, with no gap and no duplicate, while appends continue — within
//! one process on SQLite, and across two processes on PostgreSQL (the
//! appends land on one replica, the tail is served by the other).

use crate::common;

use ithaca_kit::json;
use ithaca_proto::session::v1 as pb;
use serde_json::json;
use std::time::Duration;
use tokio_stream::StreamExt;

const APPENDS: i64 = 400;

async fn tail_mid_stream(append_url: &str, tail_url: &str) {
    let tenant = format!("tenant-{}", uuid::Uuid::new_v4().simple());
    let principal = common::agent(&tenant, "tailer");
    let mut writer = common::session_client(append_url, principal.clone());
    let session = writer
        .session_context(pb::SessionContextRequest {
            prompt: Some("tail".into()),
            ..Default::default()
        })
        .await
        .expect("open")
        .into_inner();
    let sid = session.session_id.clone();

    // Appends run in the background for the whole test.
    let appender = {
        let mut writer = writer.clone();
        let sid = sid.clone();
        tokio::spawn(async move {
            for n in 0..APPENDS {
                writer
                    .append_event(pb::AppendEventRequest {
                        session_id: sid.clone(),
                        r#type: pb::EventType::ToolCall as i32,
                        payload: Some(json::to_struct(json!({"n": n}))),
                        payload_json: Vec::new(),
                    })
                    .await
                    .expect("append");
                if n % 50 == 0 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        })
    };

    // Join once a good part of the trace exists.
    let mut reader = common::session_client(tail_url, principal);
    let join_at = loop {
        let last = reader
            .read_events(pb::ReadEventsRequest {
                session_id: sid.clone(),
                after_seq: 0,
                limit: Some(1),
            })
            .await
            .expect("read")
            .into_inner()
            .last_seq;
        if last >= 100 {
            break last;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert!(
        join_at < APPENDS + 2,
        "joined while appends were still running"
    );

    let mut stream = reader
        .tail_events(pb::TailEventsRequest {
            session_id: sid.clone(),
            after_seq: join_at,
        })
        .await
        .expect("tail")
        .into_inner();
    let final_seq = APPENDS + 2;
    let mut received = Vec::new();
    while received.last() != Some(&final_seq) {
        let next = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("the tail keeps delivering")
            .expect("stream stays open")
            .expect("event");
        received.push(next.seq);
    }
    appender.await.expect("appender");
    let expected: Vec<i64> = (join_at + 1..=final_seq).collect();
    assert_eq!(received, expected, "N+1.. in order, no gap, no duplicate");

    // Nothing more arrives after the last append.
    let extra = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
    assert!(extra.is_err(), "no duplicate after the end: {extra:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tail_joins_mid_stream_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = common::start_session(&common::sqlite_path(&dir, "session"), "unused").await;
    tail_mid_stream(&svc.url, &svc.url).await;
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tail_joins_mid_stream_across_replicas_postgres() {
    let Some(pg) = common::postgres("tail_joins_mid_stream_across_replicas_postgres") else {
        return;
    };
    let schema = common::unique_schema("tail");
    let (_a, url_a) = common::serve("session", &pg, &schema);
    let (_b, url_b) = common::serve("session", &pg, &schema);
    tail_mid_stream(&url_a, &url_b).await;
    common::drop_schema(&pg, &schema).await;
}

#[tokio::test]
async fn tail_of_a_missing_session_is_not_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = common::start_session(&common::sqlite_path(&dir, "session"), "unused").await;
    let mut client = common::session_client(&svc.url, common::agent("t", "a"));
    let err = client
        .tail_events(pb::TailEventsRequest {
            session_id: uuid::Uuid::new_v4().to_string(),
            after_seq: 0,
        })
        .await
        .expect_err("missing");
    assert_eq!(err.code(), tonic::Code::NotFound);
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_live_tails_so_the_server_can_drain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let svc = common::start_session(&common::sqlite_path(&dir, "session"), "unused").await;
    let mut client = common::session_client(&svc.url, common::agent("t", "a"));
    let s = client
        .session_context(pb::SessionContextRequest {
            prompt: Some("x".into()),
            ..Default::default()
        })
        .await
        .expect("open")
        .into_inner();
    let mut stream = client
        .tail_events(pb::TailEventsRequest {
            session_id: s.session_id,
            after_seq: 0,
        })
        .await
        .expect("tail")
        .into_inner();
    assert_eq!(stream.next().await.expect("first").expect("ok").seq, 1);
    assert_eq!(stream.next().await.expect("second").expect("ok").seq, 2);
    svc.shutdown.cancel();
    let end = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(item) = stream.next().await {
            if item.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the tail ended on shutdown");
    tokio::time::timeout(Duration::from_secs(5), svc.task)
        .await
        .expect("server drained promptly")
        .expect("server task");
}
