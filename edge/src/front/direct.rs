//! The requests the edge answers itself: the parse the screen left is the
//! only one, a call's answer is printed once, from the call's JSON, into
//! the response's bytes, and a tool list is printed once per kind of
//! caller and copied.
//!
//! Why: rmcp serves each stateless request by building a whole service
//! for it (a peer with its channels, a spawned serve loop, a handler
//! task), parses the body a second time into its typed model, prints the
//! typed message back into a `Value` to check the standard headers, and
//! prints the typed answer (for `tools/list`, a clone of the whole typed
//! list first). For the two requests an agent sends most, none of that is
//! needed when nothing can travel before the answer:
//! - in 2026-07-28 a call asks its client nothing mid-call (input comes by
//!   retry), so a `tools/call` or `tools/list` without a `progressToken`
//!   and a `logLevel` in its `_meta` is answered by its result alone;
//! - in the `initialize` profile, a call of a tool that is neither
//!   streaming nor filed for approval: only those report progress or logs
//!   or ask their client on the response stream.
//!
//! Only what is certain qualifies ([`plan`]); anything else, including
//! every malformed request, goes to rmcp, whose answer stays the
//! reference. `direct::answers_match_the_sdk_path` (tests/suite) sends the
//! same requests both ways and compares status, type and body (a
//! refusal's bytes too: a denied tool and an unknown one may take
//! different paths, and must read the same).
//!
//! Kept from rmcp's path: the call runs in its own task and is cancelled,
//! not dropped, when the client goes away before the answer (so its trace
//! still gets its `tool_result`); the JSON-RPC error codes map to the same
//! HTTP statuses in each era.

use super::answer::{jsonrpc_error_with, no_caller};
use super::screen::Message;
use crate::core::{Answer, Core};
use crate::mcp::{CallerInfo, Gateway, pin_of};
use crate::stream::{CallIo, ClientCaps, Retry, Silent};
use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::response::Response;
use rmcp::model::{ErrorCode, ErrorData, InputRequiredResult};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

mod plan;

pub use plan::{Era, Plan, plan};

/// Serve what [`plan`] accepted. The message is taken from the
/// request's extensions (moved, not copied).
pub async fn serve(core: Arc<Core>, gateway: &Gateway, plan: Plan, request: Request) -> Response {
    let (mut parts, _body) = request.into_parts();
    let Some(caller) = parts.extensions.remove::<CallerInfo>() else {
        return no_caller();
    };
    let Some(Message {
        message: Value::Object(mut message),
        ..
    }) = parts.extensions.remove::<Message>()
    else {
        return internal(
            Era::Modern,
            Value::Null,
            "the request's message was not kept",
        );
    };
    let id = message.remove("id").unwrap_or(Value::Null);
    let Some(Value::Object(params)) = message.remove("params") else {
        return internal(Era::Modern, id, "the request has no params");
    };
    let pin = match pin_of(
        params
            .get("_meta")
            .and_then(|m| m.get(crate::core::SESSION_PIN_META)),
    ) {
        Ok(pin) => pin,
        Err(error) => {
            let era = match &plan {
                Plan::Call { era, .. } => *era,
                Plan::ListTools { .. } => Era::Modern,
            };
            return error_reply(era, id, error);
        }
    };
    match plan {
        Plan::Call { era, client } => call(core, caller, id, params, pin, era, client).await,
        Plan::ListTools { version } => {
            // Boxed, so that a call's future is not as large as the list's
            // (see `call::invoke::run`).
            let listed = Box::pin(
                gateway
                    .tools_printed(&caller.principal, pin.as_deref(), &version)
                    .instrument(caller.span.clone()),
            )
            .await;
            match listed {
                Ok(printed) => reply_printed(&id, &printed),
                Err(error) => error_reply(Era::Modern, id, error),
            }
        }
    }
}

/// A `tools/call`, run in its own task, its answer printed once.
async fn call(
    core: Arc<Core>,
    caller: CallerInfo,
    id: Value,
    mut params: serde_json::Map<String, Value>,
    pin: Option<String>,
    era: Era,
    client: ClientCaps,
) -> Response {
    let name = match params.remove("name") {
        Some(Value::String(name)) => name,
        _ => return internal(era, id, "the call has no name"),
    };
    let arguments = match params.remove("arguments") {
        None | Some(Value::Null) => None,
        some => some,
    };
    let cancelled = CancellationToken::new();
    // Dropped with this future when the client goes away or the deadline
    // passes: the call is told, and records how it ended.
    let gone = cancelled.clone().drop_guard();
    let span = caller.span.clone();
    // Boxed before it is spawned: the call's future is about 10 KB, and a
    // task moves its future (and the stage that later holds the output)
    // whole several times: into the task, on the first poll, at the end.
    // In a box each move is a pointer; unboxed, those copies were most of
    // the edge's memcpy per call (callgrind, docs/perf/edge-rebuild.md, stop 45).
    let call = tokio::spawn(Box::pin(
        async move {
            let io = CallIo {
                sink: &Silent,
                client,
                // As rmcp's path has it; a tool direct in the legacy era
                // never asks (`plan`).
                asks_inline: era != Era::Modern,
                retry: Retry::default(),
                cancelled,
            };
            core.call_tool(&caller.principal, pin.as_deref(), &name, arguments, &io)
                .await
        }
        .instrument(span),
    ));
    let answer = call.await;
    gone.disarm();
    match answer {
        Ok(Ok(Answer::Complete(result))) => complete(era, id, result),
        Ok(Ok(Answer::InputRequired(input))) if era == Era::Modern => {
            match serde_json::from_value::<InputRequiredResult>(input) {
                Ok(typed) => match serde_json::to_value(typed) {
                    Ok(result) => reply(era, &id, &result),
                    Err(e) => internal(era, id, &format!("building input_required: {e}")),
                },
                Err(e) => internal(era, id, &format!("building input_required: {e}")),
            }
        }
        // As rmcp refuses it for a revision before 2026-07-28.
        Ok(Ok(Answer::InputRequired(_))) => error_reply(
            era,
            id,
            ErrorData::invalid_request(
                "InputRequiredResult requires negotiated protocol version 2026-07-28 or newer",
                None,
            ),
        ),
        Ok(Err(e)) => error_reply(
            era,
            id,
            ErrorData::new(ErrorCode(e.code), e.message, e.data),
        ),
        Err(e) => internal(era, id, &format!("the call ended abnormally: {e}")),
    }
}

/// A complete tool result as its revision prints it: the call's JSON with
/// `resultType` in 2026-07-28; before it, without (and without
/// `structuredContent` before 2025-06-18, and a structured value that is
/// no object moved into the content, as rmcp does for those revisions).
fn complete(era: Era, id: Value, result: Value) -> Response {
    let Value::Object(mut fields) = result else {
        return internal(era, id, "building tool result: the answer is not an object");
    };
    match era {
        Era::Modern => {
            fields.insert("resultType".to_owned(), Value::from("complete"));
        }
        Era::Legacy { structured } => {
            let structured_content = fields.remove("structuredContent");
            match structured_content {
                Some(value) if structured && value.is_object() => {
                    fields.insert("structuredContent".to_owned(), value);
                }
                Some(value) if structured => {
                    let first_holds_it = fields
                        .get("content")
                        .and_then(|c| c.get(0))
                        .and_then(|block| block.get("text"))
                        .and_then(Value::as_str)
                        .and_then(|t| serde_json::from_str::<Value>(t).ok())
                        .is_some_and(|v| v == value);
                    if !first_holds_it
                        && let Some(Value::Array(content)) = fields.get_mut("content")
                    {
                        content.insert(0, json!({"type": "text", "text": value.to_string()}));
                    }
                }
                _ => {}
            }
        }
    }
    reply(era, &id, &Value::Object(fields))
}

/// The JSON-RPC response, printed straight into the body.
fn reply(era: Era, id: &Value, result: &Value) -> Response {
    #[derive(serde::Serialize)]
    struct Reply<'a> {
        jsonrpc: &'static str,
        id: &'a Value,
        result: &'a Value,
    }
    let body = match serde_json::to_vec(&Reply {
        jsonrpc: "2.0",
        id,
        result,
    }) {
        Ok(body) => body,
        Err(e) => return internal(era, id.clone(), &format!("printing the answer: {e}")),
    };
    json_response(body)
}

/// The JSON-RPC response around a result printed before.
fn reply_printed(id: &Value, result: &[u8]) -> Response {
    let mut body = Vec::with_capacity(result.len() + 48);
    body.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    if let Err(e) = serde_json::to_writer(&mut body, id) {
        return internal(
            Era::Modern,
            id.clone(),
            &format!("printing the answer: {e}"),
        );
    }
    body.extend_from_slice(br#","result":"#);
    body.extend_from_slice(result);
    body.push(b'}');
    json_response(body)
}

fn json_response(body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON-RPC error as rmcp sends it: on the 2026-07-28 path with the
/// HTTP status of its code (its `jsonrpc_http_status`; `_meta` is well
/// formed here) and `RESOURCE_NOT_FOUND` as `INVALID_PARAMS`; in the
/// legacy era with 200.
fn error_reply(era: Era, id: Value, mut error: ErrorData) -> Response {
    let status = match era {
        Era::Legacy { .. } => StatusCode::OK,
        Era::Modern => {
            if error.code == ErrorCode::RESOURCE_NOT_FOUND {
                error.code = ErrorCode::INVALID_PARAMS;
            }
            match error.code {
                ErrorCode::UNSUPPORTED_PROTOCOL_VERSION
                | ErrorCode::MISSING_REQUIRED_CLIENT_CAPABILITY
                | ErrorCode::HEADER_MISMATCH => StatusCode::BAD_REQUEST,
                ErrorCode::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
                _ => StatusCode::OK,
            }
        }
    };
    jsonrpc_error_with(status, id, error.code.0, &error.message, error.data)
}

fn internal(era: Era, id: Value, what: &str) -> Response {
    tracing::error!(what, "a direct request failed");
    error_reply(era, id, ErrorData::internal_error(what.to_owned(), None))
}

#[cfg(test)]
mod tests;
