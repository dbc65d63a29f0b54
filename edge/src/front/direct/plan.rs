//! Which requests the edge answers itself: [`plan`] reads the screen's
//! parse and the headers, and says yes only where rmcp would accept the
//! request exactly as it is and nothing but its answer can follow.

use crate::catalog::Catalog;
use crate::mcp::{LOG_LEVEL_META, NO_INITIALIZE_FROM, VERSIONS};
use crate::stream::ClientCaps;
use axum::http::{HeaderMap, header};
use rmcp::model::{ClientCapabilities, ProtocolVersion};
use rmcp::transport::common::http_header::{
    BASE64_HEADER_PREFIX, HEADER_MCP_METHOD, HEADER_MCP_NAME, HEADER_MCP_PROTOCOL_VERSION,
};
use serde::Deserialize;
use serde_json::Value;

const VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";
const CAPABILITIES_META: &str = "io.modelcontextprotocol/clientCapabilities";

/// What the edge answers itself, with what it needs besides the message.
#[derive(Debug)]
pub enum Plan {
    /// A `tools/call`.
    Call { era: Era, client: ClientCaps },
    /// A 2026-07-28 `tools/list` in this revision (one rmcp knows),
    /// answered with the list printed once per kind of caller.
    ListTools { version: ProtocolVersion },
}

/// The revision class a direct call answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28: `resultType`, the HTTP statuses of its errors.
    Modern,
    /// The `initialize` profile, by the `MCP-Protocol-Version` header:
    /// no `resultType`, errors with 200, `structuredContent` from
    /// 2025-06-18 on.
    Legacy { structured: bool },
}

/// Whether the edge answers this message itself: a `tools/call` (either
/// era) or a 2026-07-28 `tools/list` whose envelope, `_meta` and headers
/// are exactly what rmcp would accept, and that nothing but its answer can
/// follow. `None` sends it to rmcp.
pub fn plan(catalog: &Catalog, message: &Value, headers: &HeaderMap) -> Option<Plan> {
    let message = message.as_object()?;
    // Every other method is rmcp's: decided first, so they pay nothing more.
    let method = message.get("method")?.as_str()?;
    if method != "tools/call" && method != "tools/list" {
        return None;
    }
    let known = ["jsonrpc", "id", "method", "params"];
    if !message.keys().all(|k| known.contains(&k.as_str())) {
        return None;
    }
    // rmcp's request id is an i64 or a string.
    match message.get("id")? {
        Value::String(_) => {}
        Value::Number(n) if n.is_i64() => {}
        _ => return None,
    }
    let params = message.get("params")?.as_object()?;
    let meta = match params.get("_meta") {
        None => None,
        Some(meta) => Some(meta.as_object()?),
    };
    // Progress and log messages would travel before the answer.
    if meta.is_some_and(|m| m.contains_key("progressToken") || m.contains_key(LOG_LEVEL_META)) {
        return None;
    }
    if !accepts_json_and_sse(headers) || !content_is_json(headers) {
        return None;
    }
    // A retry's `inputResponses` and `requestState`, a cursor, and any
    // field of a later extension are rmcp's to read.
    let only = |fields: &[&str]| params.keys().all(|k| fields.contains(&k.as_str()));
    let call = || -> Option<&str> {
        if !only(&["name", "arguments", "_meta"]) {
            return None;
        }
        match params.get("arguments") {
            None | Some(Value::Null | Value::Object(_)) => {}
            Some(_) => return None,
        }
        params.get("name")?.as_str()
    };
    let header_version = sole(headers, HEADER_MCP_PROTOCOL_VERSION)?;
    let Some(version) = meta.and_then(|m| m.get(VERSION_META)) else {
        // The `initialize` profile: a call of a tool that can neither
        // report progress or logs nor ask its client (a streaming tool may,
        // and so may one filed for approval), so its answer is all that
        // travels. Nothing of 2026-07-28 in `_meta`; the header names the
        // revision.
        if method != "tools/call"
            || meta.is_some_and(|m| m.keys().any(|k| k.starts_with("io.modelcontextprotocol/")))
        {
            return None;
        }
        let version = VERSIONS
            .iter()
            .find(|v| v.as_str() == header_version && header_version < NO_INITIALIZE_FROM)?;
        let name = call()?;
        if catalog
            .tool(name)
            .is_some_and(|t| t.streaming || t.options.approval_required)
        {
            return None;
        }
        return Some(Plan::Call {
            era: Era::Legacy {
                structured: version.as_str() >= ProtocolVersion::V_2025_06_18.as_str(),
            },
            client: ClientCaps::assumed(),
        });
    };
    let version = version.as_str()?;
    let version = VERSIONS
        .iter()
        .find(|v| v.as_str() == version && version >= NO_INITIALIZE_FROM)?;
    let capabilities = meta?.get(CAPABILITIES_META)?;
    // What rmcp requires of `_meta` (its `missing_required_keys`).
    ClientCapabilities::deserialize(capabilities).ok()?;
    // The headers 2026-07-28 requires, each once and equal to the body.
    if header_version != version.as_str() || sole(headers, HEADER_MCP_METHOD)? != method {
        return None;
    }
    match method {
        "tools/call" => {
            let name = call()?;
            // (No tool schema of ours annotates `x-mcp-header`, so no
            // `Mcp-Param-*` header is checked by rmcp either.)
            let sent_name = sole(headers, HEADER_MCP_NAME)?;
            if sent_name.starts_with(BASE64_HEADER_PREFIX) || sent_name != name {
                return None;
            }
            Some(Plan::Call {
                era: Era::Modern,
                client: ClientCaps::from_json(capabilities),
            })
        }
        "tools/list" if only(&["_meta"]) => Some(Plan::ListTools {
            version: version.clone(),
        }),
        _ => None,
    }
}

/// The one value of header `name`, as text.
fn sole<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    value.to_str().ok()
}

/// `Accept` lists both types plainly (a weight or a quoted part is
/// rmcp's to weigh).
fn accepts_json_and_sse(headers: &HeaderMap) -> bool {
    let (mut json, mut sse) = (false, false);
    for value in headers.get_all(header::ACCEPT) {
        let Ok(value) = value.to_str() else {
            return false;
        };
        if value.contains([';', '"']) {
            return false;
        }
        for essence in value.split(',').map(str::trim) {
            json |= essence.eq_ignore_ascii_case("application/json");
            sse |= essence.eq_ignore_ascii_case("text/event-stream");
        }
    }
    json && sse
}

fn content_is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.split(';')
                .next()
                .is_some_and(|e| e.trim().eq_ignore_ascii_case("application/json"))
        })
}
