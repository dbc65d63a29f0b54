//! The output schemas an approval-required tool adds to its own: what an
//! agent's call becomes while a person decides, and what a person's call
//! they did not confirm answers.

use serde_json::{Value, json};

/// The output schema of an approval-required tool: its response, the
/// pending approval an agent's call becomes ([`pending_approval`]), or a
/// person's call they did not confirm ([`not_confirmed`]).
/// The response's `$defs` move to the root, where its `$ref`s point.
pub fn or_pending_approval(response: Value) -> Value {
    let mut response = response;
    let defs = response.as_object_mut().and_then(|m| m.remove("$defs"));
    let mut schema = json!({
        "type": "object",
        "anyOf": [response, pending_approval(), not_confirmed()],
    });
    if let Some(defs) = defs {
        schema["$defs"] = defs;
    }
    schema
}

/// What an agent gets when its call of an approval-required tool waits for a
/// person.
pub fn pending_approval() -> Value {
    json!({
        "type": "object",
        "description": "The call waits for a person's approval; poll get_approval with approval_id.",
        "properties": {
            "status": {"type": "string", "const": "pending_approval"},
            "approval_id": {"type": "string", "description": "Poll it with get_approval."},
            "tool": {"type": "string", "description": "The tool whose call waits."},
            "message": {"type": "string"},
        },
        "required": ["status", "approval_id", "tool", "message"],
        "additionalProperties": false,
    })
}

/// What a person gets when they decline (or cancel) the confirmation the
/// approvals service asked of them through elicitation: nothing ran.
pub fn not_confirmed() -> Value {
    json!({
        "type": "object",
        "description": "The person did not confirm the call; nothing changed.",
        "properties": {
            "status": {"type": "string", "const": "not_confirmed"},
            "tool": {"type": "string", "description": "The tool whose call was not confirmed."},
            "action": {"type": "string", "description": "The person's answer: decline or cancel (or accept without confirming)."},
            "message": {"type": "string"},
        },
        "required": ["status", "tool", "action", "message"],
        "additionalProperties": false,
    })
}
