//! A legacy client's answer to a request made during a call, POSTed to an
//! edge replica other than the one holding the call (as a round-robin
//! balancer does): the replicas advertise their URLs, the ask id names the
//! owner sealed under the shared internal key, and the other replica
//! forwards the answer there. The owner still takes it only from the
//! caller it asked, and a made-up id is forwarded nowhere.

use crate::common;

use common::harness::{StackBuilder, TestStack, serve_fixture};
use common::http;
use ithaca::services::Service;
use ithaca_proto::auth::v1 as pb;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Two edge replicas in front of the conformance fixture, verifying keys
/// with one auth service and sharing the internal key, each advertising
/// its URL; the keys of two callers of one tenant. All started by the
/// harness: auth alone, then each replica in front of it.
async fn replicas() -> (String, String, String, String, TestStack, [TestStack; 2]) {
    let auth = StackBuilder::new()
        .services(&[Service::Auth])
        .without_edge()
        .start()
        .await;
    let caller = auth.key(&["data:read"], pb::Actor::Agent).await;
    let other = auth.key(&["data:read"], pb::Actor::Agent).await;
    let fixture = serve_fixture().await;
    let replica = || {
        let fixture = fixture.clone();
        StackBuilder::new()
            .fronting_fixture(fixture)
            .elsewhere(Service::Auth, auth.url_of(Service::Auth))
            .edge(|e| e.key_cache_ms = 1000)
            .advertise()
            .start()
    };
    let a = replica().await;
    let b = replica().await;
    (a.url.clone(), b.url.clone(), caller, other, auth, [a, b])
}

async fn post(url: &str, token: &str, message: &Value) -> http::Reply {
    let auth = format!("Bearer {token}");
    http::request(
        url,
        "POST",
        "/mcp",
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("MCP-Protocol-Version", "2025-11-25"),
        ],
        message.to_string().as_bytes(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_posted_to_the_other_replica_reaches_the_call() {
    let (a, b, caller, other, _auth, _dir) = replicas().await;
    let authority = a.trim_start_matches("http://").to_owned();
    let mut stream = tokio::net::TcpStream::connect(&authority)
        .await
        .expect("connect");
    let call = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": "test_elicitation", "arguments": {"message": "Who are you?"},
    }})
    .to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n\
         Authorization: Bearer {caller}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2025-11-25\r\n\
         Content-Length: {}\r\n\r\n{call}",
        call.len()
    );
    stream.write_all(head.as_bytes()).await.expect("write");
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    let mut answered = false;
    loop {
        let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("stream stalled; got so far: {text}"))
            .expect("read");
        assert!(n > 0, "the stream ended without the call's result: {text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
        let seen: Vec<Value> = text
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect();
        if !answered
            && let Some(request) = seen.iter().find(|m| m["method"] == "elicitation/create")
        {
            let id = request["id"].as_str().expect("a string id").to_owned();
            assert!(
                !id.contains("127.0.0.1"),
                "the id does not show the replica's URL: {id}"
            );
            let answer = |id: &str| {
                json!({"jsonrpc": "2.0", "id": id, "result": {
                    "action": "accept", "content": {"username": "ada", "email": "ada@example.org"},
                }})
            };
            // A made-up id is forwarded nowhere: B has nothing to say.
            let forged = post(
                &b,
                &caller,
                &answer("ithaca-AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"),
            )
            .await;
            assert_ne!(forged.status, 202, "{}", forged.text());
            // Another caller's answer is forwarded, and refused at A.
            let stolen = post(&b, &other, &answer(&id)).await;
            assert_ne!(stolen.status, 202, "{}", stolen.text());
            // The caller's own answer, at B, reaches the call at A.
            let posted = post(&b, &caller, &answer(&id)).await;
            assert_eq!(posted.status, 202, "{}", posted.text());
            answered = true;
        }
        if let Some(result) = seen
            .iter()
            .find(|m| m["id"] == 1 && m.get("result").is_some())
        {
            assert!(answered, "the call finished without asking: {text}");
            let said = result["result"]["content"][0]["text"]
                .as_str()
                .expect("text");
            assert!(said.starts_with("User response: action=accept"), "{said}");
            assert!(said.contains("ada@example.org"), "{said}");
            return;
        }
    }
}
