//! The one error type services return, and its single mapping to gRPC.
//!
//! A [`ServiceError`] has a coarse [`Code`] (which becomes the gRPC status
//! code, and later the MCP/HTTP mapping), a message for the caller, and
//! optionally a typed domain code such as `NO_ACTIVE_SESSION` that travels in
//! the `ithaca-error` metadata entry so the edge can report it to agents.
//! Internal causes are logged once here and never sent to the caller.

use tonic::Status;
use tonic::metadata::MetadataValue;

/// The metadata entry that carries a typed domain error code.
pub const DOMAIN_CODE_KEY: &str = "ithaca-error";

/// Coarse error classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Code {
    InvalidArgument,
    NotFound,
    AlreadyExists,
    FailedPrecondition,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
    Internal,
}

/// An error to return to a caller.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ServiceError {
    pub code: Code,
    pub message: String,
    /// A typed domain code (`NO_ACTIVE_SESSION`, `SESSION_CLOSED`, …).
    pub domain: Option<&'static str>,
}

impl ServiceError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ServiceError {
            code,
            message: message.into(),
            domain: None,
        }
    }

    /// A bad argument; the message should start with the field's name.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    pub fn denied(message: impl Into<String>) -> Self {
        Self::new(Code::PermissionDenied, message)
    }

    pub fn precondition(message: impl Into<String>) -> Self {
        Self::new(Code::FailedPrecondition, message)
    }

    /// Attach a typed domain code.
    pub fn with_domain(mut self, domain: &'static str) -> Self {
        self.domain = Some(domain);
        self
    }

    /// An internal failure: the cause is logged, the caller gets a generic
    /// message.
    pub fn internal(cause: &dyn std::error::Error) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(Code::Internal, "internal error")
    }
}

impl From<sqlx::Error> for ServiceError {
    fn from(err: sqlx::Error) -> Self {
        if database_unavailable(&err) {
            tracing::error!(error = %err, "database unavailable");
            return Self::new(Code::Unavailable, "database unavailable, retry later");
        }
        Self::internal(&err)
    }
}

/// Whether `err` says the database, not the request, failed, so the same
/// request may succeed in a moment: the pool or the connection is gone, or
/// PostgreSQL ended the connection or refuses new ones while it shuts down,
/// restarts or is out of connections (SQLSTATE class 08, class 57P such as
/// 57P01 "terminating connection due to administrator command", and 53300).
/// Without the SQLSTATE cases a restart of PostgreSQL reached callers as a
/// non-retryable INTERNAL.
pub fn database_unavailable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("57P") || c == "53300"),
        _ => false,
    }
}

impl From<ServiceError> for Status {
    fn from(err: ServiceError) -> Status {
        let code = match err.code {
            Code::InvalidArgument => tonic::Code::InvalidArgument,
            Code::NotFound => tonic::Code::NotFound,
            Code::AlreadyExists => tonic::Code::AlreadyExists,
            Code::FailedPrecondition => tonic::Code::FailedPrecondition,
            Code::PermissionDenied => tonic::Code::PermissionDenied,
            Code::Unauthenticated => tonic::Code::Unauthenticated,
            Code::Unavailable => tonic::Code::Unavailable,
            Code::Internal => tonic::Code::Internal,
        };
        let mut status = Status::new(code, err.message);
        if let Some(domain) = err.domain {
            status
                .metadata_mut()
                .insert(DOMAIN_CODE_KEY, MetadataValue::from_static(domain));
        }
        status
    }
}

impl ServiceError {
    /// Pass on another service's error: its code, its message, and its
    /// domain code when it is one of `known` (domain codes are static).
    pub fn from_status(status: &Status, known: &[&'static str]) -> ServiceError {
        let code = match status.code() {
            tonic::Code::InvalidArgument | tonic::Code::OutOfRange => Code::InvalidArgument,
            tonic::Code::NotFound => Code::NotFound,
            tonic::Code::AlreadyExists => Code::AlreadyExists,
            tonic::Code::FailedPrecondition => Code::FailedPrecondition,
            tonic::Code::PermissionDenied => Code::PermissionDenied,
            tonic::Code::Unauthenticated => Code::Unauthenticated,
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => Code::Unavailable,
            _ => Code::Internal,
        };
        let domain = domain_code(status).and_then(|d| known.iter().copied().find(|k| *k == d));
        ServiceError {
            code,
            message: status.message().to_owned(),
            domain,
        }
    }
}

/// The typed domain code of a status, if the service set one.
pub fn domain_code(status: &Status) -> Option<&str> {
    status
        .metadata()
        .get(DOMAIN_CODE_KEY)
        .and_then(|v| v.to_str().ok())
}
