//! The answers the front gives itself: plain-text refusals and JSON-RPC
//! errors, shared by the layers.

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::Value;

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

/// A JSON-RPC error answer with `data`, printed with its fields in the
/// order rmcp prints them (`jsonrpc`, `id`, `error`; `code`, `message`,
/// `data`): an error the edge answers itself is byte for byte the one the
/// SDK would send, so which of the two answered a refusal shows nowhere
/// (a denied tool and an unknown one may take different paths).
pub fn jsonrpc_error_with(
    status: StatusCode,
    id: Value,
    code: i32,
    message: &str,
    data: Option<Value>,
) -> Response {
    #[derive(Serialize)]
    struct Error<'a> {
        code: i32,
        message: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
    }
    #[derive(Serialize)]
    struct Reply<'a> {
        jsonrpc: &'static str,
        id: Value,
        error: Error<'a>,
    }
    let reply = Reply {
        jsonrpc: "2.0",
        id,
        error: Error {
            code,
            message,
            data,
        },
    };
    (status, axum::Json(reply)).into_response()
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
