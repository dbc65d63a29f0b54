//! The edge's request front: a POST body and its headers through
//! `ithaca_edge::front::screen`, every check the edge makes before a service
//! is called (JSON, the JSON-RPC envelope, the protocol version header, the
//! method of the era, the params it needs, the scopes it needs), then the
//! arguments of a known tool through transcoding, as the edge does next.
//!
//! Input: header lines (`name: value`, separated by `\n`), a NUL byte, then
//! the body. Without a NUL byte the whole input is the body.

#![no_main]

use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use ithaca_edge::catalog::Catalog;
use ithaca_edge::front::Screened;
use ithaca_edge::front::screen::{Batch, Message};
use libfuzzer_sys::fuzz_target;
use std::sync::LazyLock;

static CATALOG: LazyLock<Catalog> = LazyLock::new(|| {
    Catalog::from_pool(ithaca_proto::annotations::pool()).expect("the embedded catalog builds")
});

fn headers(head: &[u8]) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for line in head.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let value = line[colon + 1..].trim_ascii();
        if let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(&line[..colon]),
            HeaderValue::from_bytes(value),
        ) {
            headers.append(name, value);
        }
    }
    headers
}

fuzz_target!(|data: &[u8]| {
    let (head, body) = match data.iter().position(|b| *b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (&[][..], data),
    };
    match ithaca_edge::front::screen(&CATALOG, &headers(head), body) {
        Screened::Refused(response) => {
            let status = response.status();
            assert!(
                status.is_client_error() || status == StatusCode::OK,
                "a refusal is the client's fault: {status}"
            );
        }
        Screened::Batch(Batch { scopes, members }) => {
            assert!(scopes.iter().all(|s| ithaca_proto::scopes::ALL.contains(&s.as_str())));
            // Whether the batch is served, and each member's own refusal,
            // are decided without panicking on any input.
            let _ = ithaca_edge::front::batch::check(&headers(head), &members);
            for member in &members {
                let _ = ithaca_edge::front::batch::member_refusal(member);
            }
        }
        Screened::Message(Message {
            message,
            scopes,
            method,
        }) => {
            assert_eq!(message["jsonrpc"], "2.0");
            assert!(scopes.iter().all(|s| ithaca_proto::scopes::ALL.contains(&s.as_str())));
            // A client never mints a metrics label.
            assert!(
                method == "other"
                    || method == "response"
                    || message["method"].as_str() == Some(method.as_str()),
                "{method:?}"
            );
            assert!(method.len() <= 40, "{method:?}");
            if message["method"] == "tools/call"
                && let Some(tool) = message["params"]["name"]
                    .as_str()
                    .and_then(|name| CATALOG.tool(name))
            {
                let arguments = message["params"].get("arguments");
                let _ = ithaca_edge::transcode::to_message(&tool.method.input(), arguments);
            }
        }
    }
});
