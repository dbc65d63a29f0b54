//! How every console page is drawn: the navigation bar, a rendered
//! template, and the plain error page. A leaf: the gate and the pages both
//! use it, and it uses neither.

use askama::Template;
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};

/// The navigation bar of a signed-in page.
#[derive(Clone, Debug)]
pub struct Nav {
    pub key_id: String,
    pub tenant_id: String,
    /// The sign-out form's CSRF token.
    pub csrf: String,
    /// Which area is shown: `sessions`, `approvals`, `runs`, `filters`,
    /// `gcn`, `keys` or `apps` (`objects`, which has no list, lights none).
    pub active: &'static str,
}

/// A rendered template with `status`.
pub fn html(status: StatusCode, page: &impl Template) -> Response {
    match page.render() {
        Ok(body) => (status, Html(body)).into_response(),
        Err(err) => {
            tracing::error!(error = %err, "console: rendering a page failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "rendering failed").into_response()
        }
    }
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    status: u16,
    message: &'a str,
}

/// A plain error page.
pub fn error(status: StatusCode, message: &str) -> Response {
    html(
        status,
        &ErrorPage {
            status: status.as_u16(),
            message,
        },
    )
}
