//! JSON Schema (2020-12) for protobuf messages, following the proto3 JSON
//! mapping with proto field names.
//!
//! Presence decides what is required: a singular scalar or enum field without
//! the proto3 `optional` keyword is required; `optional` fields, message
//! fields, oneof members, repeated fields and maps may be omitted. Input
//! objects allow no other properties, so an unknown argument is an error. Field
//! comments become descriptions, and what a field declares
//! (`ithaca.mcp.v1.field`) becomes `maxItems`, `maxLength` and `enum`.
//!
//! Every tool's schemas travel in one `tools/list` that an agent reads
//! before it can work, so they are kept small without losing meaning: a
//! message used more than once in a schema (or recursively) is written once
//! under the schema's own `$defs` and referred to with `$ref` (never across
//! schemas: clients validate each tool's schemas on their own), and an
//! output field's description is left out when it only restates the
//! field's name. The dialect is 2020-12, the default of the revisions since
//! 2025-11-25; [`with_dialect`] names it for older clients.

mod approval;

pub use approval::{not_confirmed, or_pending_approval, pending_approval};

use prost_reflect::{FieldDescriptor, Kind, MessageDescriptor};
use serde_json::{Map, Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};

/// The dialect of every schema here.
pub const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// Which side of a call a schema describes. Outputs are rendered with every
/// field present, so everything is required there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    Input,
    Output,
}

/// The schema of a message as a JSON object, with the messages it uses more
/// than once under its own `$defs`.
pub fn message_schema(message: &MessageDescriptor, direction: Direction) -> Value {
    let mut builder = Builder {
        direction,
        root: message.full_name().to_owned(),
        uses: HashMap::new(),
        keys: HashMap::new(),
        defs: BTreeMap::new(),
    };
    let mut visited = HashSet::from([message.full_name().to_owned()]);
    builder.count(message, &mut visited);
    let body = builder.object(message);
    // A message that contains itself is defined like any other, and the
    // schema refers to it, so that every `$ref` points into `$defs` (and
    // still does inside [`or_pending_approval`]'s wrapper).
    let mut schema = match builder.keys.get(message.full_name()) {
        Some(key) => json!({"type": "object", "$ref": format!("#/$defs/{key}")}),
        None => body,
    };
    if !builder.defs.is_empty()
        && let Value::Object(map) = &mut schema
    {
        map.insert(
            "$defs".to_owned(),
            Value::Object(builder.defs.into_iter().collect()),
        );
    }
    schema
}

/// `schema` with its dialect named (`$schema`), for clients of revisions
/// before 2025-11-25, which had no default dialect.
pub fn with_dialect(schema: &Value) -> Value {
    let mut schema = schema.clone();
    if let Value::Object(map) = &mut schema {
        map.insert("$schema".to_owned(), json!(DIALECT));
    }
    schema
}

/// Builds one schema: which messages it uses how often, and the `$defs` of
/// those it refers to.
struct Builder {
    direction: Direction,
    /// The full name of the message the schema is of, which is always
    /// defined when a field uses it.
    root: String,
    /// How many fields (across the distinct messages reached) have each
    /// message as their type.
    uses: HashMap<String, usize>,
    /// The `$defs` key of each message written there.
    keys: HashMap<String, String>,
    defs: BTreeMap<String, Value>,
}

impl Builder {
    /// Count the fields of each message type reachable from `message`,
    /// visiting each message once (so recursion ends, and a recursive
    /// message counts at least twice).
    fn count(&mut self, message: &MessageDescriptor, visited: &mut HashSet<String>) {
        for field in message.fields().filter(|f| !is_call_context(f)) {
            let Some(inner) = field_message(&field) else {
                continue;
            };
            if well_known(&inner).is_some() {
                continue;
            }
            *self.uses.entry(inner.full_name().to_owned()).or_default() += 1;
            if visited.insert(inner.full_name().to_owned()) {
                self.count(&inner, visited);
            }
        }
    }

    /// The schema at a field of type `message`: inline when it is used
    /// once, else a `$ref` to its one definition.
    fn reference(&mut self, message: &MessageDescriptor) -> Value {
        if let Some(wkt) = well_known(message) {
            return wkt;
        }
        let name = message.full_name();
        if name != self.root && self.uses.get(name).copied().unwrap_or(0) < 2 {
            return self.object(message);
        }
        if let Some(key) = self.keys.get(name) {
            return json!({"$ref": format!("#/$defs/{key}")});
        }
        // The short name, unless another message of the schema has it.
        let key = if self.keys.values().any(|k| k == message.name()) {
            name.to_owned()
        } else {
            message.name().to_owned()
        };
        self.keys.insert(name.to_owned(), key.clone());
        // Registered before rendering, so a recursive use refers to it.
        let body = self.object(message);
        self.defs.insert(key.clone(), body);
        json!({"$ref": format!("#/$defs/{key}")})
    }

    fn object(&mut self, message: &MessageDescriptor) -> Value {
        if let Some(wkt) = well_known(message) {
            return wkt;
        }
        let direction = self.direction;
        let mut properties = Map::new();
        let mut required = Vec::new();
        for field in message.fields().filter(|f| !is_call_context(f)) {
            let mut schema = self.field(&field);
            declared(&field, direction, &mut schema);
            let values = allowed_values(&field).unwrap_or_default();
            let comment = ithaca_proto::annotations::field_comment(&field)
                .filter(|c| direction == Direction::Input || !restates(field.name(), &values, c));
            if let (Some(comment), Value::Object(map)) = (comment, &mut schema) {
                map.insert("description".to_owned(), Value::String(comment));
            }
            let name = field.name().to_owned();
            let must = match direction {
                Direction::Input => is_required(&field),
                Direction::Output => {
                    !field.supports_presence() || field.is_list() || field.is_map()
                }
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
        // An unknown argument is an error, so inputs say so; that a result
        // holds no other fields tells an agent nothing.
        if direction == Direction::Input {
            schema.insert("additionalProperties".to_owned(), json!(false));
        }
        Value::Object(schema)
    }

    fn field(&mut self, field: &FieldDescriptor) -> Value {
        if field.is_map() {
            let Kind::Message(entry) = field.kind() else {
                return json!({"type": "object"});
            };
            let value = entry.map_entry_value_field();
            return json!({
                "type": "object",
                "additionalProperties": self.singular(&value.kind()),
            });
        }
        let item = self.singular(&field.kind());
        if field.is_list() {
            return json!({"type": "array", "items": item});
        }
        item
    }

    fn singular(&mut self, kind: &Kind) -> Value {
        match kind {
            Kind::Message(m) => self.reference(m),
            Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => int64_schema(false, self.direction),
            Kind::Uint64 | Kind::Fixed64 => int64_schema(true, self.direction),
            other => scalar_schema(other),
        }
    }
}

/// The message type of a field (a map's value type for a map), if any.
fn field_message(field: &FieldDescriptor) -> Option<MessageDescriptor> {
    let kind = if field.is_map() {
        match field.kind() {
            Kind::Message(entry) => entry.map_entry_value_field().kind(),
            other => other,
        }
    } else {
        field.kind()
    };
    match kind {
        Kind::Message(m) => Some(m),
        _ => None,
    }
}

/// Whether a description says no more than its field's name and allowed
/// values: every word of it, less articles and the like, is a word of the
/// name or one of the values (`The run id.` for `run_id`; `open, closed or
/// archived` beside that `enum`). An agent reads those anyway.
fn restates(name: &str, values: &[String], description: &str) -> bool {
    const FILLER: &[&str] = &[
        "the", "a", "an", "its", "of", "this", "s", "it", "or", "and",
    ];
    let words: Vec<String> = name
        .split('_')
        .map(str::to_ascii_lowercase)
        .chain(values.iter().map(|v| v.to_ascii_lowercase()))
        .collect();
    description
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .filter(|w| !FILLER.contains(&w.as_str()))
        .all(|w| {
            words.iter().any(|n| {
                *n == w
                    || n.strip_suffix('s') == Some(w.as_str())
                    || w.strip_suffix('s') == Some(n.as_str())
            })
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

/// Write what `field` declares (`ithaca.mcp.v1.field`) into its schema:
/// its allowed values as an `enum` (both ways), and on inputs `maxItems` on
/// a list and `maxLength` on a string or on each string of a list. A bound
/// of 0, or one that does not fit the field, says nothing.
fn declared(field: &FieldDescriptor, direction: Direction, schema: &mut Value) {
    let Some(bounds) = ithaca_proto::annotations::field_bounds(field) else {
        return;
    };
    if direction == Direction::Input && field.is_list() && bounds.max_items > 0 {
        schema["maxItems"] = json!(bounds.max_items);
    }
    let text = if field.is_list() {
        &mut schema["items"]
    } else {
        schema
    };
    if text["type"] != "string" {
        return;
    }
    if direction == Direction::Input && bounds.max_length > 0 {
        text["maxLength"] = json!(bounds.max_length);
    }
    if !bounds.values.is_empty() {
        text["enum"] = json!(bounds.values);
    }
}

/// The values a string field may take, when it declares them
/// (`ithaca.mcp.v1.field`); the transcoder refuses any other.
pub fn allowed_values(field: &FieldDescriptor) -> Option<Vec<String>> {
    if !matches!(field.kind(), Kind::String) {
        return None;
    }
    let values = ithaca_proto::annotations::field_bounds(field)?.values;
    (!values.is_empty()).then_some(values)
}

fn scalar_schema(kind: &Kind) -> Value {
    match kind {
        Kind::Double | Kind::Float => json!({"type": "number"}),
        // The type's own range is not a meaningful bound for an agent, so
        // 32-bit integers carry none (the transcoder still enforces it);
        // unsigned ones say they cannot be negative.
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => json!({"type": "integer"}),
        Kind::Uint32 | Kind::Fixed32 => json!({"type": "integer", "minimum": 0}),
        Kind::Bool => json!({"type": "boolean"}),
        Kind::Bytes => json!({"type": "string", "contentEncoding": "base64"}),
        Kind::Enum(e) => {
            let names: Vec<Value> = e
                .values()
                .map(|v| Value::String(v.name().to_owned()))
                .collect();
            json!({"type": "string", "enum": names})
        }
        // Strings, and 64-bit integers and messages, which the builder
        // handles before it gets here.
        _ => json!({"type": "string"}),
    }
}

/// 64-bit integers are JSON integers both ways (the transcoder also reads
/// decimal strings). An input's schema says when one may pass 2^53, where
/// JavaScript numbers stop being exact; an output's only names the format,
/// since what an agent sends is what it must get right.
fn int64_schema(unsigned: bool, direction: Direction) -> Value {
    let mut schema = json!({
        "type": "integer",
        "format": if unsigned { "uint64" } else { "int64" },
    });
    if direction == Direction::Input {
        schema["$comment"] =
            json!("64-bit: values beyond 2^53 are exact in JSON but not in JavaScript numbers");
    }
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
mod tests;
