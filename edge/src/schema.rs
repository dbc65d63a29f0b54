//! JSON Schema (2020-12) for protobuf messages, following the proto3 JSON
//! mapping with proto field names.
//!
//! Presence decides what is required: a singular scalar or enum field without
//! the proto3 `optional` keyword is required; `optional` fields, message
//! fields, oneof members, repeated fields and maps may be omitted. Objects
//! allow no other properties, so an unknown argument is an error. Field
//! comments become descriptions, and the bounds a field declares
//! (`ithaca.mcp.v1.field`) become `maxItems` and `maxLength`. Recursive messages are cut off after a few
//! levels with an open object, so a schema is always finite.

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{Map, Value, json};

/// How deep nested message schemas are expanded before an open object is used.
const MAX_DEPTH: usize = 8;

/// Which side of a call a schema describes. Outputs are rendered with every
/// field present, so everything is required there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Input,
    Output,
}

/// The schema of a message as a JSON object.
pub fn message_schema(message: &MessageDescriptor, direction: Direction) -> Value {
    let mut schema = object_schema(message, direction, 0);
    if let Value::Object(map) = &mut schema {
        map.insert(
            "$schema".to_owned(),
            json!("https://json-schema.org/draft/2020-12/schema"),
        );
    }
    schema
}

/// The output schema of an approval-required tool: its response, the
/// pending approval an agent's call becomes ([`pending_approval`]), or a
/// person's call they did not confirm ([`not_confirmed`]).
pub fn or_pending_approval(response: Value) -> Value {
    let mut response = response;
    let dialect = response
        .as_object_mut()
        .and_then(|m| m.remove("$schema"))
        .unwrap_or_else(|| json!("https://json-schema.org/draft/2020-12/schema"));
    json!({
        "$schema": dialect,
        "type": "object",
        "anyOf": [response, pending_approval(), not_confirmed()],
    })
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

/// The message a streaming RPC's request may carry for the edge to fill
/// (`stream.proto`): never an argument, so never in a schema.
pub const CALL_CONTEXT_MESSAGE: &str = "ithaca.mcp.v1.CallContext";

/// Whether `field` is the edge's [`CALL_CONTEXT_MESSAGE`] field.
pub fn is_call_context(field: &FieldDescriptor) -> bool {
    matches!(field.kind(), Kind::Message(m) if m.full_name() == CALL_CONTEXT_MESSAGE)
}

/// Whether a field must be present in tool arguments.
pub fn is_required(field: &FieldDescriptor) -> bool {
    !field.is_list()
        && !field.is_map()
        && !field.supports_presence()
        && !matches!(field.kind(), Kind::Message(_))
}

fn object_schema(message: &MessageDescriptor, direction: Direction, depth: usize) -> Value {
    if let Some(wkt) = well_known(message) {
        return wkt;
    }
    if depth >= MAX_DEPTH {
        return json!({"type": "object"});
    }
    let mut properties = Map::new();
    let mut required = Vec::new();
    for field in message.fields().filter(|f| !is_call_context(f)) {
        let mut schema = field_schema(&field, direction, depth);
        if direction == Direction::Input {
            bound(&field, &mut schema);
        }
        if let Some(comment) = ithaca_proto::annotations::field_comment(&field)
            && let Value::Object(map) = &mut schema
        {
            map.insert("description".to_owned(), Value::String(comment));
        }
        let name = field.name().to_owned();
        let must = match direction {
            Direction::Input => is_required(&field),
            Direction::Output => !field.supports_presence() || field.is_list() || field.is_map(),
        };
        if must {
            required.push(Value::String(name.clone()));
        }
        properties.insert(name, schema);
    }
    let mut schema = Map::new();
    schema.insert("type".to_owned(), json!("object"));
    schema.insert("properties".to_owned(), Value::Object(properties));
    if !required.is_empty() {
        schema.insert("required".to_owned(), Value::Array(required));
    }
    schema.insert("additionalProperties".to_owned(), json!(false));
    Value::Object(schema)
}

/// Write the bounds `field` declares (`ithaca.mcp.v1.field`) into its
/// schema: `maxItems` on a list, `maxLength` on a string or on each string
/// of a list. A bound of 0, or one that does not fit the field, says
/// nothing.
fn bound(field: &FieldDescriptor, schema: &mut Value) {
    let Some(bounds) = ithaca_proto::annotations::field_bounds(field) else {
        return;
    };
    if field.is_list() && bounds.max_items > 0 {
        schema["maxItems"] = json!(bounds.max_items);
    }
    let text = if field.is_list() {
        &mut schema["items"]
    } else {
        schema
    };
    if bounds.max_length > 0 && text["type"] == "string" {
        text["maxLength"] = json!(bounds.max_length);
    }
}

fn field_schema(field: &FieldDescriptor, direction: Direction, depth: usize) -> Value {
    if field.is_map() {
        let Kind::Message(entry) = field.kind() else {
            return json!({"type": "object"});
        };
        let value = entry.map_entry_value_field();
        return json!({
            "type": "object",
            "additionalProperties": singular_schema(&value.kind(), direction, depth + 1),
        });
    }
    let item = singular_schema(&field.kind(), direction, depth + 1);
    if field.is_list() {
        return json!({"type": "array", "items": item});
    }
    item
}

fn singular_schema(kind: &Kind, direction: Direction, depth: usize) -> Value {
    match kind {
        Kind::Double | Kind::Float => json!({"type": "number"}),
        // The type's own range is not a meaningful bound for an agent, so
        // 32-bit integers carry none (the transcoder still enforces it);
        // unsigned ones say they cannot be negative.
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => json!({"type": "integer"}),
        Kind::Uint32 | Kind::Fixed32 => json!({"type": "integer", "minimum": 0}),
        // 64-bit integers are JSON integers both ways (the transcoder also
        // reads decimal strings); the schema says when one may pass 2^53,
        // where JavaScript numbers stop being exact.
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => int64_schema(false),
        Kind::Uint64 | Kind::Fixed64 => int64_schema(true),
        Kind::Bool => json!({"type": "boolean"}),
        Kind::String => json!({"type": "string"}),
        Kind::Bytes => json!({"type": "string", "contentEncoding": "base64"}),
        Kind::Enum(e) => {
            let names: Vec<Value> = e
                .values()
                .map(|v| Value::String(v.name().to_owned()))
                .collect();
            json!({"type": "string", "enum": names})
        }
        Kind::Message(m) => object_schema(m, direction, depth),
    }
}

fn int64_schema(unsigned: bool) -> Value {
    let mut schema = json!({
        "type": "integer",
        "format": if unsigned { "uint64" } else { "int64" },
        "$comment": "64-bit: values beyond 2^53 are exact in JSON but not in JavaScript numbers",
    });
    if unsigned {
        schema["minimum"] = json!(0);
    }
    schema
}

/// Schemas of the well-known types, as their JSON mapping writes them.
fn well_known(message: &MessageDescriptor) -> Option<Value> {
    Some(match message.full_name() {
        "google.protobuf.Struct" => json!({"type": "object"}),
        "google.protobuf.Value" => json!({}),
        "google.protobuf.ListValue" => json!({"type": "array"}),
        "google.protobuf.Timestamp" => json!({"type": "string", "format": "date-time"}),
        "google.protobuf.Duration" => {
            json!({"type": "string", "pattern": "^-?[0-9]+(\\.[0-9]+)?s$"})
        }
        "google.protobuf.FieldMask" => json!({"type": "string"}),
        "google.protobuf.Empty" => json!({"type": "object", "additionalProperties": false}),
        "google.protobuf.Any" => {
            json!({"type": "object", "properties": {"@type": {"type": "string"}}})
        }
        "google.protobuf.StringValue" => json!({"type": ["string", "null"]}),
        "google.protobuf.BoolValue" => json!({"type": ["boolean", "null"]}),
        "google.protobuf.BytesValue" => {
            json!({"type": ["string", "null"], "contentEncoding": "base64"})
        }
        "google.protobuf.DoubleValue" | "google.protobuf.FloatValue" => {
            json!({"type": ["number", "null"]})
        }
        "google.protobuf.Int32Value" | "google.protobuf.UInt32Value" => {
            json!({"type": ["integer", "null"]})
        }
        "google.protobuf.Int64Value" | "google.protobuf.UInt64Value" => {
            json!({"type": ["integer", "null"]})
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_field_bounds_reach_the_input_schema() {
        let pool = ithaca_proto::annotations::pool();
        let message = pool
            .get_message_by_name("ithaca.skills.v1.ProposeStrategyRequest")
            .expect("in the pool");
        let input = message_schema(&message, Direction::Input);
        let universe = &input["properties"]["universe"];
        assert_eq!(universe["maxItems"], 20, "{input}");
        assert_eq!(universe["items"]["maxLength"], 32, "{input}");
        assert_eq!(input["properties"]["name"]["maxLength"], 100, "{input}");
        // A field without bounds has none, and outputs carry none.
        assert!(input["properties"]["lookback"].get("maximum").is_none());
        let output = message_schema(&message, Direction::Output);
        assert!(output["properties"]["universe"].get("maxItems").is_none());
    }
}
