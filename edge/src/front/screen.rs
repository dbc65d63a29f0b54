//! The screen: a POST body read once, parsed once and checked before any
//! service is asked: JSON, the JSON-RPC envelope, the protocol version
//! header, the method of the request's era and the params it needs. What
//! passes is left in the request's extensions as a [`Message`] (or a
//! [`Batch`]) with the scopes it needs and its metrics label, so no layer
//! inside parses it again.
//!
//! Inside the limits (a caller over its limit has its body left unread)
//! and outside the scope check, which needs to know what the message is.
//! [`screen`] is pure, so the `request_front` fuzz target drives it with
//! arbitrary bodies and headers.

// Refusals are finished HTTP responses; boxing them would only add noise.
#![allow(clippy::result_large_err)]

use super::answer::{jsonrpc_error, jsonrpc_error_with, plain};
use crate::catalog::Catalog;
use crate::core::{Core, codes};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{Value, json};
use std::sync::Arc;

/// One JSON-RPC message that passed the screen.
#[derive(Clone, Debug)]
pub struct Message {
    /// The message, parsed once.
    pub message: Value,
    /// The scopes it needs.
    pub scopes: Vec<String>,
    /// Its `method` label in the metrics (a known method or `other`).
    pub method: String,
}

/// A JSON-RPC batch: served member by member where the request's revision
/// allows batches (2025-03-26 and older), refused elsewhere; in both cases
/// after the caller is found to hold the union of its members' scopes
/// (seed 000).
#[derive(Clone, Debug)]
pub struct Batch {
    pub scopes: Vec<String>,
    pub members: Vec<Value>,
}

/// What the screen decided about one POST body.
pub enum Screened {
    /// A finished refusal: not JSON, not one well-formed JSON-RPC message,
    /// an unsupported protocol version, a method unknown in its era, or
    /// params without what the method needs.
    Refused(Response),
    Batch(Batch),
    Message(Message),
}

/// What the layer needs: the catalog (the scopes of a tool or resource)
/// and the body limit.
pub struct Screen {
    pub core: Arc<Core>,
    pub body_limit: usize,
}

/// The layer: the body is read within its limit and screened; what passes
/// goes on with its [`Message`] or [`Batch`] in the extensions.
pub async fn layer(State(screen): State<Arc<Screen>>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, screen.body_limit).await {
        Ok(b) => b,
        Err(error) => return body_refused(&error, screen.body_limit),
    };
    match self::screen(&screen.core.catalog, &parts.headers, &bytes) {
        Screened::Refused(refused) => return refused,
        Screened::Batch(batch) => {
            parts.extensions.insert(batch);
        }
        Screened::Message(message) => {
            parts.extensions.insert(message);
        }
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The checks that need nothing but the request and the catalog, in the
/// order the edge applies them.
pub fn screen(catalog: &Catalog, headers: &HeaderMap, body: &[u8]) -> Screened {
    // serde_json refuses nesting deeper than 128 levels, so deeply nested
    // input is a parse error, not a deep recursion.
    match serde_json::from_slice(body) {
        Ok(message) => screen_value(catalog, headers, message),
        Err(error) => {
            let text = if error.to_string().starts_with("recursion limit exceeded") {
                format!(
                    "Parse error: the body nests deeper than 128 levels, more than this server \
                     reads (tool arguments may nest at most {} levels)",
                    crate::transcode::MAX_NESTING
                )
            } else {
                "Parse error: the body is not valid JSON".to_owned()
            };
            Screened::Refused(jsonrpc_error(
                StatusCode::BAD_REQUEST,
                Value::Null,
                codes::PARSE_ERROR,
                &text,
            ))
        }
    }
}

/// [`screen`] of a message already parsed: a batch's member is screened
/// as it stands, not printed and parsed again.
pub fn screen_value(catalog: &Catalog, headers: &HeaderMap, message: Value) -> Screened {
    if let Value::Array(members) = message {
        let mut scopes: Vec<String> = Vec::new();
        for member in &members {
            for scope in required_scopes(catalog, member) {
                if !scopes.contains(&scope) {
                    scopes.push(scope);
                }
            }
        }
        return Screened::Batch(Batch { scopes, members });
    }
    if let Err(refused) = check_envelope(&message) {
        return Screened::Refused(refused);
    }
    if let Err(refused) = check_request(&message, headers) {
        return Screened::Refused(refused);
    }
    Screened::Message(Message {
        scopes: required_scopes(catalog, &message),
        method: metric_method(&message),
        message,
    })
}

/// The requests a 2026-07-28 client may send (its schema's `ClientRequest`).
const MODERN_METHODS: &[&str] = &[
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "subscriptions/listen",
];

/// The requests of the `initialize` profile (2024-11-05 to 2025-11-25).
const LEGACY_METHODS: &[&str] = &[
    "initialize",
    "ping",
    "server/discover",
    "tools/list",
    "tools/call",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "resources/subscribe",
    "resources/unsubscribe",
    "prompts/list",
    "prompts/get",
    "completion/complete",
    "logging/setLevel",
];

/// Notifications a client may send (the label set of their metrics).
const KNOWN_NOTIFICATIONS: &[&str] = &[
    "notifications/initialized",
    "notifications/cancelled",
    "notifications/progress",
    "notifications/roots/list_changed",
];

/// The scopes one JSON-RPC message needs (seed 000's table plus each
/// resource's own scope).
fn required_scopes(catalog: &Catalog, message: &Value) -> Vec<String> {
    let params = &message["params"];
    let scopes: Vec<&str> = match message["method"].as_str().unwrap_or("") {
        // Only the scope every call needs. A tool's own scope is checked
        // where the tool is looked up (`call/lookup.rs`), so a tool the
        // caller may not use is refused exactly as one that does not
        // exist; a 403 naming its scope would say that it does.
        "tools/call" => vec![crate::catalog::BASE_SCOPE],
        // Subscribing is checked as reading is.
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            match params["uri"].as_str().and_then(|u| catalog.resource(u)) {
                Some((resource, _)) => resource.scopes(),
                None => vec![crate::catalog::BASE_SCOPE],
            }
        }
        "resources/list" | "resources/templates/list" => vec![crate::catalog::BASE_SCOPE],
        _ => Vec::new(),
    };
    scopes.into_iter().map(str::to_owned).collect()
}

/// Why a request body could not be read: too slow (the listener's body
/// timeout, 408, and the connection is closed), too large (413), or broken
/// off (400).
fn body_refused(error: &axum::Error, limit: usize) -> Response {
    if crate::listener::is_body_timeout(error) {
        let mut response = plain(StatusCode::REQUEST_TIMEOUT, error.to_string());
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if e.is::<http_body_util::LengthLimitError>() {
            return plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("request body larger than {limit} bytes"),
            );
        }
        cause = e.source();
    }
    plain(
        StatusCode::BAD_REQUEST,
        format!("the request body could not be read: {error}"),
    )
}

/// Per-request protocol checks made before rmcp sees the request: the
/// `MCP-Protocol-Version` header names a served revision (in both eras), the
/// method exists in the request's era, and its params have what it needs.
fn check_request(message: &Value, headers: &HeaderMap) -> Result<(), Response> {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    if let Some(header) = headers.get("mcp-protocol-version") {
        let version = header.to_str().unwrap_or("");
        if !crate::mcp::VERSIONS.iter().any(|v| v.as_str() == version) {
            // A 2026-07-28 request is told the revisions `server/discover`
            // advertises (the suite checks the one list is within the
            // other); a legacy request every revision served.
            let supported: Vec<String> = if is_modern(message) {
                crate::mcp::modern_versions()
            } else {
                crate::mcp::VERSIONS.iter().map(|v| v.to_string()).collect()
            };
            return Err(jsonrpc_error_with(
                StatusCode::BAD_REQUEST,
                id,
                codes::UNSUPPORTED_PROTOCOL_VERSION,
                &format!(
                    "Unsupported protocol version in MCP-Protocol-Version: {version:?}; this server speaks {}",
                    supported.join(", ")
                ),
                Some(json!({"supported": supported, "requested": version})),
            ));
        }
    }
    let Some(method) = message["method"].as_str() else {
        return Ok(());
    };
    if method.starts_with("notifications/") || message.get("id").is_none() {
        return Ok(());
    }
    if method == "initialize"
        && message["params"]["protocolVersion"].as_str() >= Some(crate::mcp::NO_INITIALIZE_FROM)
    {
        // 2026-07-28 has no handshake: its clients call server/discover.
        return Err(jsonrpc_error_with(
            StatusCode::OK,
            id,
            codes::METHOD_NOT_FOUND,
            "Method not found: initialize is not a request of protocol 2026-07-28 and later; \
             send server/discover and put the version in each request's _meta",
            Some(json!({"method": method})),
        ));
    }
    let modern = is_modern(message);
    let known = if modern {
        MODERN_METHODS
    } else {
        LEGACY_METHODS
    };
    if !known.contains(&method) {
        let era = if modern {
            "protocol 2026-07-28"
        } else {
            "the initialize profile"
        };
        let mut text = format!("Method not found: {method:?} is not a request of {era}");
        if modern && LEGACY_METHODS.contains(&method) {
            text.push_str(" (it was removed in 2026-07-28)");
        }
        text.push_str(&format!("; the requests are: {}", known.join(", ")));
        // The 2026-07-28 transport answers an unknown method with 404.
        let status = if modern {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::OK
        };
        return Err(jsonrpc_error_with(
            status,
            id,
            codes::METHOD_NOT_FOUND,
            &text,
            Some(json!({"method": method})),
        ));
    }
    if let Err(what) = check_params(method, &message["params"]) {
        return Err(jsonrpc_error(
            StatusCode::OK,
            id,
            codes::INVALID_PARAMS,
            &format!("Invalid params: {what}"),
        ));
    }
    Ok(())
}

/// The `method` label of a request's metrics: a known method, or `other`
/// (a client must not mint label values), `response` for a reply.
fn metric_method(message: &Value) -> String {
    let Some(method) = message["method"].as_str() else {
        return "response".to_owned();
    };
    let known = MODERN_METHODS.contains(&method)
        || LEGACY_METHODS.contains(&method)
        || KNOWN_NOTIFICATIONS.contains(&method);
    if known { method } else { "other" }.to_owned()
}

/// Whether a request declares the 2026-07-28 era in its own `_meta`.
pub fn is_modern(message: &Value) -> bool {
    message["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"].is_string()
}

/// The JSON-RPC envelope's shape: `id` a string or a number, `method` a
/// string, `params` an object. A wrong type is an invalid request (400),
/// decided here because rmcp would answer it with a bare 415.
fn check_envelope(message: &Value) -> Result<(), Response> {
    let refuse = |what: &str| {
        Err(jsonrpc_error(
            StatusCode::BAD_REQUEST,
            Value::Null,
            codes::INVALID_REQUEST,
            &format!("Invalid Request: {what}"),
        ))
    };
    if !message.is_object() || message.get("jsonrpc") != Some(&json!("2.0")) {
        return refuse("expected one JSON-RPC 2.0 message object");
    }
    match message.get("id") {
        None | Some(Value::String(_) | Value::Number(_)) => {}
        Some(_) => return refuse("`id` must be a string or a number"),
    }
    match message.get("method") {
        Some(Value::String(_)) => {}
        Some(_) => return refuse("`method` must be a string"),
        // A response to a server request: needs an id and a result or error.
        None if message.get("id").is_some()
            && (message.get("result").is_some() || message.get("error").is_some()) => {}
        None => return refuse("`method` is missing"),
    }
    match message.get("params") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => refuse("`params` must be an object"),
    }
}

/// What a request needs in `params`, checked before dispatch so a missing
/// or mistyped field is named (`-32602`) instead of looking like an unknown
/// method.
fn check_params(method: &str, params: &Value) -> Result<(), String> {
    let string = |field: &str| -> Result<(), String> {
        match params.get(field) {
            Some(Value::String(_)) => Ok(()),
            Some(_) => Err(format!("params.{field} must be a string")),
            None => Err(format!("{method} needs params.{field} (a string)")),
        }
    };
    match method {
        "tools/call" => {
            string("name")?;
            match params.get("arguments") {
                None | Some(Value::Null | Value::Object(_)) => Ok(()),
                Some(_) => Err("params.arguments must be an object".to_owned()),
            }
        }
        "prompts/get" => string("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => string("uri"),
        _ => Ok(()),
    }
}
