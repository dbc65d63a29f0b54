//! How a running call talks to its client: the log levels and
//! capabilities it honours, what it tells, and how it asks.

use futures::future::BoxFuture;
use ithaca_proto::mcp::v1 as mcp;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

/// MCP log levels, lowest first (RFC 5424 severities).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum LogLevel {
    Debug,
    Info,
    Notice,
    Warning,
    Error,
    Critical,
    Alert,
    Emergency,
}

impl LogLevel {
    const ALL: [LogLevel; 8] = [
        LogLevel::Debug,
        LogLevel::Info,
        LogLevel::Notice,
        LogLevel::Warning,
        LogLevel::Error,
        LogLevel::Critical,
        LogLevel::Alert,
        LogLevel::Emergency,
    ];

    /// The MCP name (`debug` … `emergency`).
    pub fn as_str(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Notice => "notice",
            LogLevel::Warning => "warning",
            LogLevel::Error => "error",
            LogLevel::Critical => "critical",
            LogLevel::Alert => "alert",
            LogLevel::Emergency => "emergency",
        }
    }

    /// A level by its MCP name.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == name)
    }

    /// The level of a `LogMessage`; unspecified (or unknown) reads as info.
    pub(super) fn from_proto(level: i32) -> Self {
        match mcp::LogLevel::try_from(level) {
            Ok(mcp::LogLevel::Debug) => LogLevel::Debug,
            Ok(mcp::LogLevel::Notice) => LogLevel::Notice,
            Ok(mcp::LogLevel::Warning) => LogLevel::Warning,
            Ok(mcp::LogLevel::Error) => LogLevel::Error,
            Ok(mcp::LogLevel::Critical) => LogLevel::Critical,
            Ok(mcp::LogLevel::Alert) => LogLevel::Alert,
            Ok(mcp::LogLevel::Emergency) => LogLevel::Emergency,
            _ => LogLevel::Info,
        }
    }
}

/// The capabilities through which a call may ask the client for input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCaps {
    pub elicitation: bool,
    pub sampling: bool,
    pub roots: bool,
}

impl ClientCaps {
    /// Read from an MCP `ClientCapabilities` object.
    pub fn from_json(capabilities: &Value) -> Self {
        let has = |key: &str| capabilities.get(key).is_some_and(|v| !v.is_null());
        ClientCaps {
            elicitation: has("elicitation"),
            sampling: has("sampling"),
            roots: has("roots"),
        }
    }

    /// All three: what the edge assumes of a legacy client over stateless
    /// HTTP, whose capabilities were declared only in its `initialize`.
    pub fn assumed() -> Self {
        ClientCaps {
            elicitation: true,
            sampling: true,
            roots: true,
        }
    }

    pub(super) fn to_proto(self) -> mcp::ClientCapabilities {
        mcp::ClientCapabilities {
            elicitation: self.elicitation,
            sampling: self.sampling,
            roots: self.roots,
        }
    }

    pub(super) fn allows(self, method: &str) -> bool {
        match method {
            ELICIT => self.elicitation,
            SAMPLE => self.sampling,
            ROOTS => self.roots,
            _ => false,
        }
    }
}

pub(super) const ELICIT: &str = "elicitation/create";
pub(super) const SAMPLE: &str = "sampling/createMessage";
pub(super) const ROOTS: &str = "roots/list";

/// The capability a server-to-client request needs (`elicitation` for
/// `elicitation/create`, ...).
pub fn capability_of(method: &str) -> &'static str {
    match method {
        ELICIT => "elicitation",
        SAMPLE => "sampling",
        _ => "roots",
    }
}

/// Something a call tells the client while it runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Notice {
    Progress {
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    },
    Log {
        level: LogLevel,
        logger: Option<String>,
        data: Value,
    },
}

/// Why asking the client for input failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AskError {
    /// This transport cannot carry a request to the client.
    #[error("this connection cannot carry requests to the client")]
    Unsupported,
    /// The client answered with a JSON-RPC error.
    #[error("the client answered {method} with an error: {message}")]
    Refused { method: String, message: String },
    /// No answer came (the client went away, or took too long).
    #[error("the client did not answer {method}: {why}")]
    NoAnswer { method: String, why: String },
}

/// Where a call's notices go, and how it asks its client for input in the
/// legacy era. The protocol layer implements it per request (it knows the
/// progress token, the log level and the response stream).
pub trait CallSink: Send + Sync {
    /// Forward a notice (the sink drops what the client did not ask for).
    fn notify(&self, notice: Notice) -> BoxFuture<'_, ()>;
    /// Send one request (`elicitation/create`, `sampling/createMessage`,
    /// `roots/list`) to the client and wait for its result.
    fn ask(&self, method: String, params: Value) -> BoxFuture<'_, Result<Value, AskError>>;
}

/// A sink that drops notices and cannot ask: for callers with no stream.
pub struct Silent;

impl CallSink for Silent {
    fn notify(&self, _notice: Notice) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
    fn ask(&self, _method: String, _params: Value) -> BoxFuture<'_, Result<Value, AskError>> {
        Box::pin(async { Err(AskError::Unsupported) })
    }
}

/// What a 2026-07-28 retry brings back: the client's answers and the
/// sealed state of the previous round.
#[derive(Clone, Debug, Default)]
pub struct Retry {
    pub input_responses: Option<Map<String, Value>>,
    pub request_state: Option<String>,
}

/// How a call talks to its client while it runs.
pub struct CallIo<'a> {
    pub sink: &'a dyn CallSink,
    /// What the client declared (or, for a legacy HTTP client, is assumed
    /// to answer).
    pub client: ClientCaps,
    /// True when the client answers input requests on the response stream
    /// (the legacy era); false when a call that needs input answers
    /// `input_required` and the client retries (2026-07-28).
    pub asks_inline: bool,
    /// The answers and state of a 2026-07-28 retry.
    pub retry: Retry,
    /// Cancelled when the client gives up on the call: a
    /// `notifications/cancelled` for it, or (stateless HTTP) its connection
    /// closing before the answer. The call's backend hop is then dropped,
    /// which cancels the gRPC call, so the service stops its work too.
    pub cancelled: CancellationToken,
}

impl CallIo<'static> {
    /// No stream, no input: for calls made outside a client's request.
    pub fn silent() -> Self {
        CallIo {
            sink: &Silent,
            client: ClientCaps::default(),
            asks_inline: false,
            retry: Retry::default(),
            cancelled: CancellationToken::new(),
        }
    }
}
