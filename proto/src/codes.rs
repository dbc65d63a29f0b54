//! The typed domain codes: the one table of every error code an agent or a
//! person can see, with the gRPC status it travels with, the MCP tool error
//! an agent reads and the HTTP status the console answers.
//!
//! A service attaches a code to its refusal (`ServiceError::with_domain`,
//! carried in the `ithaca-error` metadata entry); the edge turns it into the
//! tool error's `error` field ([`DomainCode::mcp`]), and the console into
//! its page's status ([`DomainCode::http`]). A failure without a domain code
//! reads as the generic code of its gRPC status ([`DomainCode::from_grpc`]).
//! The wire strings ([`DomainCode::as_str`]) are a contract: agents match
//! on them, so a code's string never changes.

use tonic::Code as Grpc;

/// How a code reaches an agent as an MCP tool error (`isError: true`, with
/// `error` set to [`McpError::code`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McpError {
    /// The `error` field of the tool error body.
    pub code: &'static str,
    /// Whether the same call may succeed if the agent retries it later.
    pub retryable: bool,
    /// A rule refused the call: the trace records a `denial`, not an
    /// `error`.
    pub denial: bool,
}

macro_rules! domain_codes {
    ($( $(#[$doc:meta])* $variant:ident = $wire:literal, $grpc:ident, $http:literal, $mcp:expr; )*) => {
        /// Every typed error code, generic and domain.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum DomainCode {
            $( $(#[$doc])* $variant, )*
        }

        /// THE table: each code, its wire string, its gRPC status, its HTTP
        /// status and its MCP tool error.
        pub const TABLE: &[Row] = &[
            $( Row {
                code: DomainCode::$variant,
                wire: $wire,
                grpc: Grpc::$grpc,
                http: $http,
                mcp: $mcp,
            }, )*
        ];
    };
}

/// One row of [`TABLE`].
#[derive(Clone, Copy, Debug)]
pub struct Row {
    pub code: DomainCode,
    /// The string on the wire (`ithaca-error` metadata, traces).
    pub wire: &'static str,
    /// The gRPC status the code travels with.
    pub grpc: Grpc,
    /// The HTTP status the console answers with.
    pub http: u16,
    pub mcp: McpError,
}

/// The tool error of a code: its own wire string.
const fn plain(code: &'static str) -> McpError {
    McpError {
        code,
        retryable: false,
        denial: false,
    }
}

/// A refusal by rule (traced as a `denial`).
const fn denial(code: &'static str) -> McpError {
    McpError {
        code,
        retryable: false,
        denial: true,
    }
}

/// A failure the same call may get past later.
const fn retry(code: &'static str) -> McpError {
    McpError {
        code,
        retryable: true,
        denial: false,
    }
}

domain_codes! {
    // Generic codes: what a status without a domain code reads as.
    InvalidArgument = "INVALID_ARGUMENT", InvalidArgument, 400, plain("INVALID_ARGUMENT");
    NotFound = "NOT_FOUND", NotFound, 404, plain("NOT_FOUND");
    AlreadyExists = "ALREADY_EXISTS", AlreadyExists, 409, plain("ALREADY_EXISTS");
    PermissionDenied = "PERMISSION_DENIED", PermissionDenied, 403, denial("PERMISSION_DENIED");
    AuthRequired = "AUTH_REQUIRED", Unauthenticated, 403, plain("AUTH_REQUIRED");
    FailedPrecondition = "FAILED_PRECONDITION", FailedPrecondition, 409, plain("FAILED_PRECONDITION");
    ServiceUnavailable = "SERVICE_UNAVAILABLE", Unavailable, 503, retry("SERVICE_UNAVAILABLE");
    /// A deadline passed (tonic reports a server-side `grpc-timeout` as
    /// CANCELLED "Timeout expired", so both read as this).
    Timeout = "TIMEOUT", DeadlineExceeded, 503, retry("TIMEOUT");
    /// A limit of the service (a message too large, a quota) was reached:
    /// not a rate limit the same call gets past by waiting.
    ResourceExhausted = "RESOURCE_EXHAUSTED", ResourceExhausted, 500, plain("RESOURCE_EXHAUSTED");
    Internal = "INTERNAL", Internal, 500, plain("INTERNAL");
    /// The MCP client cancelled the call before it finished.
    Cancelled = "CANCELLED", Cancelled, 500, plain("CANCELLED");

    // The edge's own.
    /// The edge's saturation refusal: too many calls in flight to a backend.
    BackendBusy = "BACKEND_BUSY", Unavailable, 503, retry("BACKEND_BUSY");
    /// The client lacks a capability the tool needs (elicitation).
    CapabilityMissing = "CAPABILITY_MISSING", FailedPrecondition, 409, plain("CAPABILITY_MISSING");
    /// A call ran but its result could not be recorded in the trace.
    ResultNotRecorded = "RESULT_NOT_RECORDED", Unavailable, 503, plain("RESULT_NOT_RECORDED");
    TraceUnavailable = "TRACE_UNAVAILABLE", Unavailable, 503, retry("TRACE_UNAVAILABLE");

    // Sessions.
    /// An agent called a tool before `session_context`; agents read it in
    /// lower case.
    NoActiveSession = "NO_ACTIVE_SESSION", FailedPrecondition, 409, plain("no_active_session");
    SubjectRequired = "SUBJECT_REQUIRED", FailedPrecondition, 409, denial("SUBJECT_REQUIRED");
    SubjectMismatch = "SUBJECT_MISMATCH", PermissionDenied, 403, denial("SUBJECT_MISMATCH");
    SubjectNotFound = "SUBJECT_NOT_FOUND", NotFound, 404, plain("SUBJECT_NOT_FOUND");
    SessionNotOpen = "SESSION_NOT_OPEN", FailedPrecondition, 409, plain("SESSION_NOT_OPEN");
    HumanRequired = "HUMAN_REQUIRED", PermissionDenied, 403, denial("HUMAN_REQUIRED");

    // Approvals.
    TradingDisabled = "TRADING_DISABLED", PermissionDenied, 403, denial("TRADING_DISABLED");
    ApprovalRequired = "APPROVAL_REQUIRED", FailedPrecondition, 409, plain("APPROVAL_REQUIRED");
    AlreadyDecided = "ALREADY_DECIDED", FailedPrecondition, 409, plain("ALREADY_DECIDED");
    ApprovalExpired = "APPROVAL_EXPIRED", FailedPrecondition, 409, plain("APPROVAL_EXPIRED");
    NotConfirmed = "NOT_CONFIRMED", FailedPrecondition, 409, plain("NOT_CONFIRMED");
    BrokerConnectionRequired = "BROKER_CONNECTION_REQUIRED", FailedPrecondition, 409, plain("BROKER_CONNECTION_REQUIRED");
    /// An approved call was not run: its requester's key was revoked.
    RequesterRevoked = "REQUESTER_REVOKED", FailedPrecondition, 409, plain("REQUESTER_REVOKED");
    /// An approved call was not run: its requester's session can record
    /// nothing more (closed, archived or gone).
    SessionClosed = "SESSION_CLOSED", FailedPrecondition, 409, plain("SESSION_CLOSED");

    // Skills and runs.
    UnknownSkill = "UNKNOWN_SKILL", NotFound, 404, plain("UNKNOWN_SKILL");
    UnknownStrategy = "UNKNOWN_STRATEGY", NotFound, 404, plain("UNKNOWN_STRATEGY");
    UnknownSymbol = "UNKNOWN_SYMBOL", NotFound, 404, plain("UNKNOWN_SYMBOL");
    NoData = "NO_DATA", NotFound, 404, plain("NO_DATA");
    InsufficientData = "INSUFFICIENT_DATA", FailedPrecondition, 409, plain("INSUFFICIENT_DATA");
    RunTooLarge = "RUN_TOO_LARGE", InvalidArgument, 400, plain("RUN_TOO_LARGE");
    RunCancelled = "RUN_CANCELLED", Unavailable, 503, retry("RUN_CANCELLED");
    RunFinished = "RUN_FINISHED", FailedPrecondition, 409, plain("RUN_FINISHED");

    // Broker: market data, SEC files, catalogs, alerts.
    BadSecFile = "BAD_SEC_FILE", InvalidArgument, 400, plain("BAD_SEC_FILE");
    BadCatalogFile = "BAD_CATALOG_FILE", InvalidArgument, 400, plain("BAD_CATALOG_FILE");
    BadAlertFile = "BAD_ALERT_FILE", InvalidArgument, 400, plain("BAD_ALERT_FILE");
    UnknownBroker = "UNKNOWN_BROKER", NotFound, 404, plain("UNKNOWN_BROKER");
    OperationNotSupported = "OPERATION_NOT_SUPPORTED", InvalidArgument, 400, plain("OPERATION_NOT_SUPPORTED");
    UnknownAlert = "UNKNOWN_ALERT", NotFound, 404, plain("UNKNOWN_ALERT");
    UnknownObject = "UNKNOWN_OBJECT", NotFound, 404, plain("UNKNOWN_OBJECT");
    NoAlertSchema = "NO_ALERT_SCHEMA", FailedPrecondition, 409, plain("NO_ALERT_SCHEMA");

    // Broker filters.
    NotValidated = "NOT_VALIDATED", FailedPrecondition, 409, plain("NOT_VALIDATED");
    NotPreviewed = "NOT_PREVIEWED", FailedPrecondition, 409, plain("NOT_PREVIEWED");
    InvalidPipeline = "INVALID_PIPELINE", InvalidArgument, 400, plain("INVALID_PIPELINE");
    UnknownFilter = "UNKNOWN_FILTER", NotFound, 404, plain("UNKNOWN_FILTER");
    UnknownVersion = "UNKNOWN_VERSION", NotFound, 404, plain("UNKNOWN_VERSION");
    UnknownGroup = "UNKNOWN_GROUP", NotFound, 404, plain("UNKNOWN_GROUP");
    UnknownStream = "UNKNOWN_STREAM", NotFound, 404, plain("UNKNOWN_STREAM");
    StreamNotInGroup = "STREAM_NOT_IN_GROUP", NotFound, 404, plain("STREAM_NOT_IN_GROUP");
    BrokerCannotFilter = "BROKER_CANNOT_FILTER", InvalidArgument, 400, plain("BROKER_CANNOT_FILTER");
    NoLocalisation = "NO_LOCALISATION", FailedPrecondition, 409, plain("NO_LOCALISATION");
    EventsUnavailable = "EVENTS_UNAVAILABLE", FailedPrecondition, 409, plain("EVENTS_UNAVAILABLE");
    FilterActive = "FILTER_ACTIVE", FailedPrecondition, 409, plain("FILTER_ACTIVE");
    ForeignPath = "FOREIGN_PATH", InvalidArgument, 400, plain("FOREIGN_PATH");

    // Broker GCN.
    BadGcnFile = "BAD_GCN_FILE", InvalidArgument, 400, plain("BAD_GCN_FILE");
    UnknownGcnEvent = "UNKNOWN_GCN_EVENT", NotFound, 404, plain("UNKNOWN_GCN_EVENT");
    UnknownGcnCircular = "UNKNOWN_GCN_CIRCULAR", NotFound, 404, plain("UNKNOWN_GCN_CIRCULAR");
    AgentNotAllowed = "AGENT_NOT_ALLOWED", PermissionDenied, 403, plain("AGENT_NOT_ALLOWED");
}

impl DomainCode {
    /// This code's row of [`TABLE`].
    pub const fn row(self) -> &'static Row {
        // The table lists the variants in declaration order.
        &TABLE[self as usize]
    }

    /// The wire string (`"NO_ACTIVE_SESSION"`).
    pub const fn as_str(self) -> &'static str {
        self.row().wire
    }

    /// The code a wire string names, if any.
    pub fn parse(wire: &str) -> Option<DomainCode> {
        TABLE.iter().find(|r| r.wire == wire).map(|r| r.code)
    }

    /// The gRPC status the code travels with.
    pub const fn grpc(self) -> Grpc {
        self.row().grpc
    }

    /// The HTTP status the console answers with.
    pub const fn http(self) -> u16 {
        self.row().http
    }

    /// The MCP tool error an agent reads.
    pub const fn mcp(self) -> McpError {
        self.row().mcp
    }

    /// The generic code a gRPC status without a domain code reads as.
    pub fn from_grpc(code: Grpc) -> DomainCode {
        match code {
            Grpc::InvalidArgument | Grpc::OutOfRange => DomainCode::InvalidArgument,
            Grpc::NotFound => DomainCode::NotFound,
            Grpc::AlreadyExists => DomainCode::AlreadyExists,
            Grpc::PermissionDenied => DomainCode::PermissionDenied,
            Grpc::Unauthenticated => DomainCode::AuthRequired,
            Grpc::FailedPrecondition => DomainCode::FailedPrecondition,
            Grpc::Unavailable => DomainCode::ServiceUnavailable,
            Grpc::DeadlineExceeded | Grpc::Cancelled => DomainCode::Timeout,
            Grpc::ResourceExhausted => DomainCode::ResourceExhausted,
            _ => DomainCode::Internal,
        }
    }
}

impl std::fmt::Display for DomainCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn every_code_round_trips_and_the_table_is_total() {
        let mut wires = HashSet::new();
        for (i, row) in TABLE.iter().enumerate() {
            // Total and in order: row i is variant i.
            assert_eq!(row.code as usize, i, "{row:?}");
            assert_eq!(row.code.row().wire, row.wire);
            assert_eq!(DomainCode::parse(row.wire), Some(row.code), "{row:?}");
            assert_eq!(row.code.to_string(), row.wire);
            assert!(wires.insert(row.wire), "{} twice", row.wire);
            assert!(
                row.wire.chars().all(|c| c.is_ascii_uppercase() || c == '_'),
                "{}",
                row.wire
            );
            assert!((400..600).contains(&row.http), "{row:?}");
            // What an agent reads is the wire string, save one.
            if row.code != DomainCode::NoActiveSession {
                assert_eq!(row.mcp.code, row.wire);
            }
        }
        assert_eq!(DomainCode::parse("NOT_A_CODE"), None);
        assert_eq!(DomainCode::NoActiveSession.mcp().code, "no_active_session");
    }

    #[test]
    fn every_grpc_status_has_a_generic_code_whose_row_agrees() {
        for i in 0..=16 {
            let grpc = Grpc::from_i32(i);
            let code = DomainCode::from_grpc(grpc);
            let row = code.row();
            // A generic code's own status maps back to it.
            assert_eq!(DomainCode::from_grpc(row.grpc), code, "{grpc:?}");
        }
    }
}
