//! The one error type services return, and its single mapping to gRPC.
//!
//! A [`ServiceError`] has a coarse [`Code`] (which becomes the gRPC status
//! code, and later the MCP/HTTP mapping), a message for the caller, and
//! optionally a typed domain code such as `NO_ACTIVE_SESSION` that travels in
//! the `ithaca-error` metadata entry so the edge can report it to agents.
//! Internal causes are logged once here and never sent to the caller.
//!
//! A message is capped at [`MAX_MESSAGE_BYTES`] on its way into a
//! [`Status`], and input it echoes is best quoted with [`quote`]: gRPC sends
//! the message in the `grpc-message` trailer, and an HTTP/2 peer refuses a
//! header list over 16 KiB (h2's default) by breaking the connection, which
//! every caller of the service shares. Before the cap, one agent's
//! 17,000-character argument, echoed back, failed other tenants' calls.

pub use ithaca_proto::DomainCode;
use tonic::Status;
use tonic::metadata::MetadataValue;

/// The metadata entry that carries a typed domain error code.
pub const DOMAIN_CODE_KEY: &str = "ithaca-error";

/// The metadata entry a service sets on a refusal it recorded in the
/// caller's session trace itself, so that whoever passes it on records no
/// second event ([`ServiceError::traced`]).
pub const TRACED_KEY: &str = "ithaca-traced";

/// The longest message a [`Status`] built here carries, in bytes. The
/// trailer percent-encodes bytes outside printable ASCII, so this is at
/// most 6 KiB on the wire, well inside HTTP/2's 16 KiB header list.
pub const MAX_MESSAGE_BYTES: usize = 2048;

/// The most characters of a caller's input that [`quote`] shows.
pub const QUOTE_CHARS: usize = 64;

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
    /// The wire string of a typed domain code (`NO_ACTIVE_SESSION`,
    /// `SESSION_CLOSED`, …), always one of [`DomainCode`]'s.
    pub domain: Option<&'static str>,
    /// The service already recorded this refusal in the caller's trace.
    pub traced: bool,
}

impl ServiceError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        ServiceError {
            code,
            message: message.into(),
            domain: None,
            traced: false,
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

    /// Attach a typed domain code (its wire string travels in
    /// [`DOMAIN_CODE_KEY`]).
    pub fn with_domain(mut self, domain: DomainCode) -> Self {
        self.domain = Some(domain.as_str());
        self
    }

    /// Say that this refusal is already in the caller's session trace.
    pub fn traced(mut self) -> Self {
        self.traced = true;
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
        let mut status = Status::new(code, cap_message(err.message));
        if let Some(domain) = err.domain {
            status
                .metadata_mut()
                .insert(DOMAIN_CODE_KEY, MetadataValue::from_static(domain));
        }
        if err.traced {
            status
                .metadata_mut()
                .insert(TRACED_KEY, MetadataValue::from_static("1"));
        }
        status
    }
}

impl ServiceError {
    /// Pass on another service's error: its code, its message, and its
    /// domain code when it is one of `known` (domain codes are static).
    pub fn from_status(status: &Status, known: &[DomainCode]) -> ServiceError {
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
        let domain = domain(status)
            .filter(|d| known.contains(d))
            .map(DomainCode::as_str);
        ServiceError {
            code,
            message: status.message().to_owned(),
            domain,
            traced: already_traced(status),
        }
    }
}

/// `message` cut to at most [`MAX_MESSAGE_BYTES`] (on a character
/// boundary), saying how long it was; a shorter one unchanged.
pub fn cap_message(message: String) -> String {
    if message.len() <= MAX_MESSAGE_BYTES {
        return message;
    }
    let note = format!(" … (message cut: {} bytes in all)", message.len());
    let mut end = MAX_MESSAGE_BYTES - note.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let mut capped = message[..end].to_owned();
    capped.push_str(&note);
    capped
}

/// A caller's input as an error message quotes it: in double quotes with
/// escapes (as `{:?}` shows a string), and when it is longer than
/// [`QUOTE_CHARS`] characters only that many, followed by how many it had:
/// `"AAAA…"… (17000 characters)`. An error that echoes input stays short
/// whatever the input, and still shows what was sent.
pub fn quote(input: &str) -> Quoted<'_> {
    Quoted(input)
}

/// What [`quote`] returns; shown with `{}`.
#[derive(Clone, Copy, Debug)]
pub struct Quoted<'a>(&'a str);

impl std::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.char_indices().nth(QUOTE_CHARS) {
            None => write!(f, "{:?}", self.0),
            Some((end, _)) => write!(
                f,
                "{:?}… ({} characters)",
                &self.0[..end],
                self.0.chars().count()
            ),
        }
    }
}

/// Whether the service that answered `status` recorded the refusal in the
/// caller's trace itself ([`TRACED_KEY`]).
pub fn already_traced(status: &Status) -> bool {
    status.metadata().get(TRACED_KEY).is_some()
}

/// The typed domain code of a status, if the service set a known one.
pub fn domain(status: &Status) -> Option<DomainCode> {
    domain_code(status).and_then(DomainCode::parse)
}

/// The domain code string of a status, if the service set one.
pub fn domain_code(status: &Status) -> Option<&str> {
    status
        .metadata()
        .get(DOMAIN_CODE_KEY)
        .and_then(|v| v.to_str().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traced_refusal_says_so_and_keeps_saying_so_when_passed_on() {
        let status: Status = ServiceError::precondition("no")
            .with_domain(DomainCode::NoData)
            .traced()
            .into();
        assert!(already_traced(&status));
        let passed = ServiceError::from_status(&status, &[DomainCode::NoData]);
        assert!(passed.traced);
        assert_eq!(passed.domain, Some("NO_DATA"));
        assert_eq!(domain(&status), Some(DomainCode::NoData));
        assert_eq!(ServiceError::from_status(&status, &[]).domain, None);
        let plain: Status = ServiceError::precondition("no").into();
        assert!(!already_traced(&plain));
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary_and_say_their_length() {
        let short = "symbol: not a ticker".to_owned();
        assert_eq!(cap_message(short.clone()), short);
        // Multi-byte characters straddle every possible cut.
        let long = "é".repeat(5000);
        let capped = cap_message(long.clone());
        assert!(capped.len() <= MAX_MESSAGE_BYTES, "{}", capped.len());
        assert!(
            capped.ends_with("(message cut: 10000 bytes in all)"),
            "{capped}"
        );
        let status = Status::from(ServiceError::invalid(long));
        assert!(status.message().len() <= MAX_MESSAGE_BYTES);
    }

    #[test]
    fn quotes_show_a_prefix_and_the_inputs_length() {
        assert_eq!(quote("AAPL").to_string(), "\"AAPL\"");
        let long = "A".repeat(17_000);
        let quoted = quote(&long).to_string();
        assert_eq!(
            quoted,
            format!("{:?}… (17000 characters)", "A".repeat(QUOTE_CHARS))
        );
        let wide = "日".repeat(100);
        assert!(quote(&wide).to_string().ends_with("… (100 characters)"));
    }
}
