//! The console's pages, one module per area, and what they share: the
//! navigation bar, rendering, error pages and paging.
//!
//! A handler names who may see it by its arguments: [`Reader`] (signed in,
//! `data:read`), [`Person`] (signed in) or [`Change`] (a form from a
//! signed-in person, last). Extractors run in argument order, and the
//! person comes after the path and query, so a malformed URL is refused
//! before the sign-in is checked, as when handlers asked the gate
//! themselves.
//!
//! [`Person`]: crate::gate::Person
//! [`Change`]: crate::gate::Change

pub mod approvals;
pub mod apps;
pub mod filters;
pub mod gcn;
pub mod keys;
pub mod objects;
pub mod runs;
pub mod sessions;

pub use crate::view::{Nav, error, html};

use crate::Console;
use crate::backends::CallError;
use crate::gate::Person;
use axum::extract::{FromRef, FromRequestParts};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::Response;
use ithaca_proto::scopes::DATA_READ;
use std::sync::Arc;

/// `404` for anything the console does not serve.
pub async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "Not found.")
}

/// The page for a failed backend call. Another tenant's object is NOT_FOUND
/// at the service, and so it is here: indistinguishable from a missing one.
pub fn failed(err: CallError) -> Response {
    let status = match err {
        CallError::Missing(_) => {
            return error(StatusCode::NOT_FOUND, &err.to_string());
        }
        CallError::Status(status) => status,
    };
    // The table's code of the status, and its HTTP status; the message
    // says no more than the status does.
    use ithaca_kit::error::DomainCode;
    let http = DomainCode::from_grpc(status.code()).http();
    match StatusCode::from_u16(http).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR) {
        StatusCode::NOT_FOUND => error(StatusCode::NOT_FOUND, "Not found."),
        StatusCode::SERVICE_UNAVAILABLE => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "A service is unavailable; retry in a moment.",
        ),
        StatusCode::INTERNAL_SERVER_ERROR => {
            tracing::warn!(code = ?status.code(), error = %status.message(), "console: backend call failed");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Something went wrong; it was logged.",
            )
        }
        http => error(http, status.message()),
    }
}

/// What most pages need first: a signed-in person whose key may read data.
/// Refused as [`Person`] is, then with the page for the missing scope.
pub struct Reader(pub Person);

impl<S> FromRequestParts<S> for Reader
where
    Arc<Console>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Reader, Response> {
        let person = Person::from_request_parts(parts, state).await?;
        if !person.has_scope(DATA_READ) {
            return Err(missing_scope(DATA_READ));
        }
        Ok(Reader(person))
    }
}

/// The page for a missing scope.
pub fn missing_scope(scope: &str) -> Response {
    error(
        StatusCode::FORBIDDEN,
        &format!("Your key lacks the scope {scope}, which this page needs."),
    )
}

/// Pretty JSON of a protobuf `Struct`, for `<pre>` blocks.
pub fn pretty(value: Option<prost_types::Struct>) -> String {
    match value {
        Some(s) => {
            serde_json::to_string_pretty(&ithaca_kit::json::from_struct(s)).unwrap_or_default()
        }
        None => String::new(),
    }
}

/// One page of a list that a service returns whole.
pub struct Paged<T> {
    pub items: Vec<T>,
    pub page: usize,
    pub pages: usize,
}

impl<T> Paged<T> {
    /// Page `page` (from 1) of `all`, [`crate::PAGE_SIZE`] rows each.
    pub fn of(all: Vec<T>, page: usize) -> Paged<T> {
        let pages = all.len().div_ceil(crate::PAGE_SIZE).max(1);
        let page = page.clamp(1, pages);
        let items = all
            .into_iter()
            .skip((page - 1) * crate::PAGE_SIZE)
            .take(crate::PAGE_SIZE)
            .collect();
        Paged { items, page, pages }
    }
}
