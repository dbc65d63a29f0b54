//! Stage 5, render: the answer the caller hears, from what ran and where
//! it was recorded; and the `CallToolResult` of a backend's response.

use super::failure::{ToolFailure, failed};
use super::record::Recorded;
use crate::catalog::{self, Tool};
use crate::core::{Answer, RpcError, SESSION_NOTICE_META};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ithaca_kit::error::DomainCode;
use ithaca_kit::json;
use ithaca_proto::mcp::v1 as mcp;
use ithaca_proto::mcp::v1::content::Kind as ContentKind;
use prost_reflect::{DynamicMessage, ReflectMessage};
use serde_json::{Value, json};

/// The answer of a call: its reply when that is not the plain outcome (a
/// round of input, a missing capability), else its outcome as a result,
/// with the session's notice when the session service gave one; a call
/// whose result was lost is answered that it was.
pub fn answer(
    outcome: Result<Value, ToolFailure>,
    reply: Option<Result<Answer, RpcError>>,
    recorded: Recorded,
    notice: Option<String>,
) -> Result<Answer, RpcError> {
    let session_id = match recorded {
        Recorded::Lost => {
            return Ok(Answer::Complete(
                failed(
                    DomainCode::TraceUnavailable,
                    "the call's result could not be recorded in the session's trace; the trace \
                     will say so, and the call may be retried",
                    true,
                )
                .to_result(),
            ));
        }
        Recorded::Nowhere => None,
        Recorded::In(session_id) => Some(session_id),
    };
    let answered = reply.unwrap_or_else(|| {
        Ok(Answer::Complete(match outcome {
            Ok(result) => result,
            Err(failure) => failure.to_result(),
        }))
    });
    match (answered, session_id, notice) {
        (Ok(Answer::Complete(result)), Some(session_id), Some(notice)) => Ok(Answer::Complete(
            with_session_notice(result, &session_id, &notice),
        )),
        (answered, _, _) => answered,
    }
}

/// A result with the session service's notice: in `_meta` for programs, and
/// as a second text block for the model reading the answer (the first block
/// and `structuredContent` stay the tool's own, so the output schema still
/// holds).
fn with_session_notice(mut result: Value, session_id: &str, notice: &str) -> Value {
    if let Some(content) = result["content"].as_array_mut() {
        content.push(json!({"type": "text", "text": notice}));
    }
    if !result["_meta"].is_object() {
        result["_meta"] = json!({});
    }
    result["_meta"][SESSION_NOTICE_META] = json!({"session_id": session_id, "notice": notice});
    result
}

/// A successful tool response as `CallToolResult` JSON.
pub fn tool_result(response: &DynamicMessage) -> Value {
    if response.descriptor().full_name() == catalog::CONTENT_MESSAGE
        && let Ok(content) = response.transcode_to::<mcp::ToolContent>()
    {
        return self::content(content);
    }
    let structured = crate::transcode::to_json(response);
    json!({
        "content": [{"type": "text", "text": structured.to_string()}],
        "structuredContent": structured,
        "isError": false,
    })
}

/// A streaming tool's `reply`, decoded as the message its `result` option
/// names, rendered as a unary response of that type would be.
pub fn reply(tool: &Tool, bytes: &[u8]) -> Result<Value, ToolFailure> {
    let pool = tool.method.parent_pool();
    let reply = pool
        .get_message_by_name(&tool.options.result)
        .ok_or_else(|| {
            failed(
                DomainCode::Internal,
                "the service answered with a reply, and the tool names no result type",
                false,
            )
        })
        .and_then(|kind| {
            DynamicMessage::decode(kind, bytes).map_err(|e| {
                failed(
                    DomainCode::Internal,
                    &format!("decoding the reply: {e}"),
                    false,
                )
            })
        })?;
    Ok(tool_result(&reply))
}

/// Content blocks (and structured JSON) as `CallToolResult` JSON.
pub fn content(content: mcp::ToolContent) -> Value {
    let blocks: Vec<Value> = content.content.into_iter().map(content_block).collect();
    let mut result = json!({"content": blocks, "isError": false});
    if let Some(structured) = content.structured {
        result["structuredContent"] = json::from_struct(structured);
    }
    result
}

/// One MCP content block.
pub fn content_block(content: mcp::Content) -> Value {
    match content.kind {
        Some(ContentKind::Text(t)) => json!({"type": "text", "text": t.text}),
        Some(ContentKind::Image(b)) => {
            json!({"type": "image", "data": STANDARD.encode(&b.data), "mimeType": b.mime_type})
        }
        Some(ContentKind::Audio(b)) => {
            json!({"type": "audio", "data": STANDARD.encode(&b.data), "mimeType": b.mime_type})
        }
        Some(ContentKind::Resource(r)) => json!({"type": "resource", "resource": embedded(&r)}),
        None => json!({"type": "text", "text": ""}),
    }
}

/// An embedded resource's JSON.
pub fn embedded(r: &mcp::EmbeddedResource) -> Value {
    let mut v = json!({"uri": r.uri});
    if !r.mime_type.is_empty() {
        v["mimeType"] = json!(r.mime_type);
    }
    match &r.body {
        Some(mcp::embedded_resource::Body::Blob(b)) => v["blob"] = json!(STANDARD.encode(b)),
        Some(mcp::embedded_resource::Body::Text(t)) => v["text"] = json!(t),
        None => v["text"] = json!(""),
    }
    v
}
