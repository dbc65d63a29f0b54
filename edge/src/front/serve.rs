//! The innermost service: rmcp's Streamable HTTP service (`mcp.rs` is its
//! handler), bounded by the request's deadline.
//!
//! Why rmcp's HTTP service stays: it owns both eras' wire rules (the
//! per-request version checks of 2026-07-28, the standard headers against
//! the body, JSON or SSE answers, cancellation on disconnect); re-doing
//! them here would fork the protocol from the SDK that keeps up with it.

use super::answer::jsonrpc_error;
use super::screen::Message;
use crate::core::{Core, codes};
use crate::mcp::Gateway;
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
    /// How long a request may take to produce its response head.
    pub request_timeout: Duration,
}

impl Serve {
    /// Serve one screened message through rmcp, within its deadline.
    pub async fn run(self, request: Request) -> Result<Response, Infallible> {
        let (id, timeout) = match request.extensions().get::<Message>() {
            Some(message) => (
                message.message.get("id").cloned().unwrap_or(Value::Null),
                self.timeout(&message.message),
            ),
            None => (Value::Null, self.request_timeout),
        };
        let call = self.mcp.oneshot(request);
        let response = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(response)) => response.map(Body::new),
            Ok(Err(never)) => match never {},
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
