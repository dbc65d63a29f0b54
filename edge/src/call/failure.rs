//! How a tool fails: what the agent is told, and what the trace records.

use crate::core::error_code;
use ithaca_kit::error::{DomainCode, domain};
use serde_json::{Value, json};
use tonic::{Code, Status};

/// A tool that failed: what the agent is told, and what the trace records.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolFailure {
    /// A typed code (`no_active_session`, `NOT_FOUND`, a domain code).
    pub code: String,
    pub message: String,
    /// Whether the same call may succeed if tried again later.
    pub retryable: bool,
    /// The service that refused the call recorded it in the trace itself.
    pub traced: bool,
}

impl ToolFailure {
    pub fn new(code: &str, message: &str, retryable: bool) -> Self {
        ToolFailure {
            code: code.to_owned(),
            message: message.to_owned(),
            retryable,
            traced: false,
        }
    }

    /// The `{"error": CODE, "message": …}` body agents read.
    pub fn body(&self) -> Value {
        let mut body = json!({"error": self.code, "message": self.message});
        if self.retryable {
            body["retryable"] = json!(true);
        }
        body
    }

    /// The `CallToolResult` JSON: the body as text content and no
    /// `structuredContent`, because a tool's output schema describes its
    /// success and clients (the Node SDK 1.x among them) validate structured
    /// content even on errors.
    pub fn to_result(&self) -> Value {
        json!({
            "content": [{"type": "text", "text": self.body().to_string()}],
            "isError": true,
        })
    }
}

/// The failure a backend's status stands for.
pub fn status_failure(status: &Status) -> ToolFailure {
    // The session service's refusal reads as the gate's, whichever said it.
    if domain(status) == Some(DomainCode::NoActiveSession) {
        return no_session();
    }
    // Retryable by its status (unavailable, a timeout), or by its domain
    // code (the edge's BACKEND_BUSY, say), as the table says.
    let retryable = DomainCode::from_grpc(status.code()).mcp().retryable
        || domain(status).is_some_and(|d| d.mcp().retryable);
    let code = error_code(status);
    if code == DomainCode::Internal.as_str() {
        tracing::warn!(code = ?status.code(), error = %status.message(), "backend failed");
    }
    // A service of another team (found through reflection) may not cap its
    // messages as ours do; an agent gets a bounded one either way.
    let message = match status.code() {
        Code::Internal | Code::Unknown => "the service failed; see the server logs".to_owned(),
        _ => ithaca_kit::error::cap_message(status.message().to_owned()),
    };
    ToolFailure {
        traced: ithaca_kit::error::already_traced(status),
        ..ToolFailure::new(&code, &message, retryable)
    }
}

/// The refusal of a call made outside any open session.
pub fn no_session() -> ToolFailure {
    ToolFailure::new(
        DomainCode::NoActiveSession.mcp().code,
        crate::core::NO_SESSION_MESSAGE,
        false,
    )
}

/// A failure of the edge's own, typed by its domain code.
pub fn failed(code: DomainCode, message: &str, retryable: bool) -> ToolFailure {
    ToolFailure::new(code.as_str(), message, retryable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_exhausted_is_not_a_retryable_rate_limit_unless_the_edge_is_busy() {
        let limit = status_failure(&Status::resource_exhausted("message too large"));
        assert_eq!(limit.code, "RESOURCE_EXHAUSTED");
        assert!(!limit.retryable, "{limit:?}");
        let mut busy = Status::resource_exhausted("busy");
        busy.metadata_mut().insert(
            ithaca_kit::error::DOMAIN_CODE_KEY,
            tonic::metadata::MetadataValue::from_static(crate::backend::BACKEND_BUSY),
        );
        let busy = status_failure(&busy);
        assert_eq!(busy.code, crate::backend::BACKEND_BUSY);
        assert!(busy.retryable, "{busy:?}");
    }

    #[test]
    fn a_backends_long_message_reaches_the_agent_capped() {
        let long = "x".repeat(100_000);
        let failure = status_failure(&Status::invalid_argument(long));
        assert!(failure.message.len() <= ithaca_kit::error::MAX_MESSAGE_BYTES);
        assert!(
            failure.message.ends_with("100000 bytes in all)"),
            "{}",
            failure.message
        );
    }
}
