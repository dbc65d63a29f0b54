//! The innermost service: rmcp's Streamable HTTP service (`mcp.rs` is its
//! handler), bounded by the request's deadline; a 2026-07-28 `tools/call`
//! that nothing but its answer can follow is answered by the edge itself
//! (`direct.rs`), within the same deadline.
//!
//! Why rmcp's HTTP service stays: it owns both eras' wire rules (the
//! per-request version checks of 2026-07-28, the standard headers against
//! the body, JSON or SSE answers, cancellation on disconnect); re-doing
//! them here would fork the protocol from the SDK that keeps up with it.

use super::answer::jsonrpc_error;
use super::direct;
use super::screen::Message;
use crate::core::{Core, codes};
use crate::mcp::Gateway;
use crate::metrics::Metrics;
use axum::body::Body;
use axum::extract::Request;
use axum::http::StatusCode;
use axum::response::Response;
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use serde_json::Value;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tower::ServiceExt;

/// rmcp's service over the edge's handler, stateless (no protocol session).
pub type McpService = StreamableHttpService<Gateway, NeverSessionManager>;

/// What the innermost service needs.
#[derive(Clone)]
pub struct Serve {
    pub core: Arc<Core>,
    pub mcp: McpService,
    /// The handler rmcp serves, whose lists the edge's own path reads.
    pub gateway: Gateway,
    /// Counts the calls answered without rmcp.
    pub metrics: Arc<Metrics>,
    /// How long a request may take to produce its response head.
    pub request_timeout: Duration,
}

impl Serve {
    /// Serve one screened message, within its deadline: the edge's own
    /// `tools/call` where [`direct::plan`] allows it, else through rmcp.
    pub async fn run(self, request: Request) -> Result<Response, Infallible> {
        let (id, timeout, plan) = match request.extensions().get::<Message>() {
            Some(message) => (
                message.message.get("id").cloned().unwrap_or(Value::Null),
                self.timeout(&message.message),
                direct::plan(&self.core.catalog, &message.message, request.headers()),
            ),
            None => (Value::Null, self.request_timeout, None),
        };
        let answered = match plan {
            Some(plan) => {
                if matches!(plan, direct::Plan::Call { .. }) {
                    self.metrics.direct_call();
                }
                let call = direct::serve(self.core.clone(), &self.gateway, plan, request);
                tokio::time::timeout(timeout, call).await
            }
            None => {
                // Boxed, so that the direct path's future is not as large
                // as rmcp's (see `call::invoke::run`).
                let call = Box::pin(self.mcp.oneshot(request));
                tokio::time::timeout(timeout, call)
                    .await
                    .map(|served| match served {
                        Ok(response) => response.map(Body::new),
                        Err(never) => match never {},
                    })
            }
        };
        let response = match answered {
            Ok(response) => response,
            Err(_) => {
                tracing::warn!(
                    timeout_ms = timeout.as_millis() as u64,
                    "request timed out before its answer was ready"
                );
                jsonrpc_error(
                    StatusCode::GATEWAY_TIMEOUT,
                    id,
                    codes::INTERNAL_ERROR,
                    "the request timed out",
                )
            }
        };
        Ok(response)
    }

    /// How long a request may take: the HTTP default, or longer for a tool
    /// whose own deadline is longer (a long poll), plus a margin so the
    /// tool's own timeout answers first.
    fn timeout(&self, message: &Value) -> Duration {
        let tool_deadline = (message["method"] == "tools/call")
            .then(|| message["params"]["name"].as_str())
            .flatten()
            .and_then(|name| self.core.catalog.tool(name))
            .and_then(crate::catalog::Tool::deadline);
        match tool_deadline {
            Some(d) => self.request_timeout.max(d + Duration::from_secs(5)),
            None => self.request_timeout,
        }
    }
}
