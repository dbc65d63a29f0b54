//! What is served beside `/mcp` for operators and OAuth clients: health,
//! readiness, metrics and the protected resource's metadata. None of it
//! names a caller or touches a tenant's data, so none of it is behind the
//! `/mcp` layers.

use super::answer::plain;
use super::authn::{Authn, Callers};
use crate::core::Core;
use crate::limits::Limiter;
use crate::metrics::Metrics;
use crate::subscribe::Subscriptions;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// What the operators' routes read.
pub struct Ops {
    pub core: Arc<Core>,
    pub metrics: Arc<Metrics>,
    pub limiter: Arc<Limiter>,
    pub subscriptions: Arc<Subscriptions>,
    pub authn: Arc<Authn>,
    /// The public base URL, without a trailing slash.
    pub public_url: String,
}

/// The routes.
pub fn routes(ops: Arc<Ops>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/.well-known/oauth-protected-resource",
            get(resource_metadata),
        )
        .route(
            "/.well-known/oauth-protected-resource/mcp",
            get(resource_metadata),
        )
        .with_state(ops)
}

async fn readyz(State(ops): State<Arc<Ops>>) -> Response {
    let mut failing = Vec::new();
    for backend in ops.core.backends() {
        let mut health = tonic_health::pb::health_client::HealthClient::new(backend.channel());
        let check = health.check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        });
        let serving = matches!(
            tokio::time::timeout(Duration::from_secs(2), check).await,
            Ok(Ok(r)) if r.get_ref().status == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
        );
        if !serving {
            failing.push(backend.url.clone());
        }
    }
    if failing.is_empty() {
        plain(StatusCode::OK, "ready")
    } else {
        plain(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}", failing.join(", ")),
        )
    }
}

async fn metrics(State(ops): State<Arc<Ops>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        ops.metrics.render() + &ops.limiter.render(&ops.core.backends()) + &doors(&ops),
    )
        .into_response()
}

/// The metrics of the doors: legacy subscriptions held, and key checks
/// the throttle refused (`throttle.rs`).
fn doors(ops: &Ops) -> String {
    let mut out = format!(
        "# HELP ithaca_edge_resource_subscriptions Legacy resource subscriptions held on this replica.\n\
         # TYPE ithaca_edge_resource_subscriptions gauge\n\
         ithaca_edge_resource_subscriptions {}\n",
        ops.subscriptions.live()
    );
    if let Callers::Keys(auth) = ops.authn.callers() {
        out.push_str(&format!(
            "# HELP ithaca_edge_key_checks_throttled_total Key checks refused for too many failures of their key id or address.\n\
             # TYPE ithaca_edge_key_checks_throttled_total counter\n\
             ithaca_edge_key_checks_throttled_total {}\n",
            auth.throttled()
        ));
    }
    out
}

async fn resource_metadata(State(ops): State<Arc<Ops>>) -> Response {
    let base = &ops.public_url;
    let mut body = json!({
        "resource": format!("{base}/mcp"),
        "bearer_methods_supported": ["header"],
        "scopes_supported": ithaca_proto::scopes::ALL,
        "resource_name": "Ithaca",
    });
    // A URL (RFC 9728 §2): clients that validate the document (the
    // official Python SDK) discard all of it when this is prose. The
    // console, where there is one, is where a person connects an app.
    if ops.authn.browser().is_some() {
        body["resource_documentation"] = json!(format!("{base}/console"));
    }
    let servers = ops.authn.authorization_servers();
    if !servers.is_empty() {
        body["authorization_servers"] = json!(servers);
    }
    axum::Json(body).into_response()
}
