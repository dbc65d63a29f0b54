//! The answers the front gives itself: plain-text refusals and JSON-RPC
//! errors, shared by the layers.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// A plain-text answer (a refusal the client reads as it is).
pub fn plain(status: StatusCode, text: impl Into<String>) -> Response {
    let mut text = text.into();
    text.push('\n');
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

/// A JSON-RPC error answer.
pub fn jsonrpc_error(status: StatusCode, id: Value, code: i32, message: &str) -> Response {
    jsonrpc_error_with(status, id, code, message, None)
}

/// A JSON-RPC error answer with `data`.
pub fn jsonrpc_error_with(
    status: StatusCode,
    id: Value,
    code: i32,
    message: &str,
    data: Option<Value>,
) -> Response {
    let mut error = json!({"code": code, "message": message});
    if let Some(data) = data {
        error["data"] = data;
    }
    let body = json!({"jsonrpc": "2.0", "id": id, "error": error});
    (status, axum::Json(body)).into_response()
}

/// The answer of a layer that found no [`super::authn::Caller`]: the stack was
/// assembled with a layer outside authentication that needs one.
pub fn no_caller() -> Response {
    tracing::error!("a request reached a layer that needs its caller before authentication");
    plain(
        StatusCode::INTERNAL_SERVER_ERROR,
        "the request reached a layer without its caller",
    )
}
