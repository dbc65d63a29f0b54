//! Answer forwarding: a legacy client's answer to a request a running call
//! made on its response stream (an elicitation, a sampling) is delivered
//! to that call, here or on the replica that holds it (`relay.rs`).
//!
//! Inside the scope check (an answer is a message like any other) and
//! outside the span: an answer is no MCP operation of its own, and rmcp
//! refuses responses on a stateless server, so it never goes further in.

use super::answer::{no_caller, plain};
use super::authn::Caller;
use super::origin::Arrived;
use super::screen::Message;
use crate::metrics::Metrics;
use crate::relay::Asks;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long forwarding an answer to the replica holding its call may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// What the layer needs.
pub struct Forward {
    /// The answers this replica's calls wait for, and where others' are.
    pub asks: Arc<Asks>,
    pub metrics: Arc<Metrics>,
    /// Carries a legacy answer to the replica holding its call.
    pub client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
}

impl Forward {
    pub fn new(asks: Arc<Asks>, metrics: Arc<Metrics>) -> Self {
        Forward {
            asks,
            metrics,
            client: hyper_util::client::legacy::Client::builder(
                hyper_util::rt::TokioExecutor::new(),
            )
            .build_http(),
        }
    }
}

/// The layer: an answer a call here or elsewhere waits for is taken;
/// anything else passes.
pub async fn layer(State(forward): State<Arc<Forward>>, request: Request, next: Next) -> Response {
    let Some(message) = request.extensions().get::<Message>() else {
        return next.run(request).await;
    };
    if message.message.get("method").is_some() {
        return next.run(request).await;
    }
    let Some(caller) = request.extensions().get::<Caller>() else {
        return no_caller();
    };
    let started = request
        .extensions()
        .get::<Arrived>()
        .map_or_else(Instant::now, |a| a.0);
    let method = message.method.clone();
    if forward
        .asks
        .answer(&caller.principal, message.message.clone())
    {
        forward.metrics.record(&method, "", started.elapsed());
        return StatusCode::ACCEPTED.into_response();
    }
    // One another replica asked for: it takes the answer there (and checks
    // the caller itself). A forwarded answer goes no further.
    let owner = message.message["id"]
        .as_str()
        .filter(|_| {
            !request
                .headers()
                .contains_key(crate::relay::FORWARDED_HEADER)
        })
        .and_then(|id| forward.asks.elsewhere(id));
    let Some(owner) = owner else {
        return next.run(request).await;
    };
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let response = forward_answer(&forward, &owner, &parts.headers, body).await;
    forward
        .metrics
        .record(&method, response.status().as_str(), started.elapsed());
    response
}

/// Forward a legacy client's answer, as it sent it (its credentials
/// included, so the owner authenticates it), to the replica at `owner`
/// that holds the call; the owner's status is the answer's.
async fn forward_answer(
    forward: &Forward,
    owner: &str,
    headers: &HeaderMap,
    body: bytes::Bytes,
) -> Response {
    let mut request = http::Request::new(http_body_util::Full::new(body));
    *request.method_mut() = Method::POST;
    let Ok(uri) = format!("{owner}/mcp").parse::<http::Uri>() else {
        return plain(
            StatusCode::BAD_GATEWAY,
            "the replica holding this call has a bad URL",
        );
    };
    *request.uri_mut() = uri;
    for name in [
        header::AUTHORIZATION,
        header::CONTENT_TYPE,
        header::ACCEPT,
        header::HOST,
        header::ORIGIN,
    ]
    .into_iter()
    .chain(["mcp-protocol-version".parse().ok()].into_iter().flatten())
    {
        if let Some(value) = headers.get(&name) {
            request.headers_mut().insert(name, value.clone());
        }
    }
    request.headers_mut().insert(
        crate::relay::FORWARDED_HEADER,
        HeaderValue::from_static("1"),
    );
    match tokio::time::timeout(FORWARD_TIMEOUT, forward.client.request(request)).await {
        Ok(Ok(response)) => {
            let (parts, body) = response.into_parts();
            Response::from_parts(parts, Body::new(body))
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, owner, "forwarding an answer failed");
            plain(
                StatusCode::BAD_GATEWAY,
                "the edge replica holding this call is unreachable; the call fails when its \
                 wait for an answer ends",
            )
        }
        Err(_) => plain(
            StatusCode::GATEWAY_TIMEOUT,
            "the edge replica holding this call did not take the answer in time",
        ),
    }
}
