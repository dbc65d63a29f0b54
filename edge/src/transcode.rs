//! JSON tool arguments ⇄ dynamic protobuf messages (proto3 JSON mapping).
//!
//! Arguments are checked against the message descriptor first, so an agent
//! gets an error that names the field (`title: expected a string, got a
//! number`) instead of a parser's complaint. Nesting is bounded, so deeply
//! nested input is refused rather than recursed into.

use prost_reflect::{
    DeserializeOptions, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, SerializeOptions,
};
use serde_json::Value;
use std::borrow::Cow;

/// Deeper argument objects are refused.
///
/// Why 32: arguments travel inside `google.protobuf.Struct`s, where each
/// JSON object level costs three protobuf message levels (`Struct`, its map
/// entry, `Value`), and prost refuses to decode more than 100. The deepest
/// carrier is the session's `tool_call` event, `{"name", "arguments": …}`:
/// arguments nested 32 levels reach level 99 there. Checking here, before
/// anything is sent, turns what would be a service's decode failure into
/// an error that names the field and the limit.
pub const MAX_NESTING: usize = 32;

/// A problem with the arguments, naming where it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ArgError {
    pub message: String,
}

fn err(path: &str, what: impl std::fmt::Display) -> ArgError {
    let message = if path.is_empty() {
        what.to_string()
    } else {
        format!("{path}: {what}")
    };
    ArgError { message }
}

/// Check `args` against `message` and build the request message.
pub fn to_message(
    message: &MessageDescriptor,
    args: Option<&Value>,
) -> Result<DynamicMessage, ArgError> {
    let none = Value::Object(Default::default());
    let args = match args {
        None | Some(Value::Null) => &none,
        Some(v) => v,
    };
    check_message(message, args, "", 0)?;
    let options = DeserializeOptions::new().deny_unknown_fields(true);
    // Read from the borrowed tree: the trace records the same arguments,
    // so nothing is copied for either.
    DynamicMessage::deserialize_with_options(message.clone(), args, &options)
        .map_err(|e| err("", format!("invalid arguments: {e}")))
}

/// The arguments as a trace may record them: as they are (borrowed), or,
/// when they nest deeper than [`MAX_NESTING`] (the call will be refused
/// with an error naming the limit), a note saying so in their place, so
/// the `tool_call` event itself stays decodable by every service.
pub fn traceable(arguments: Option<&Value>) -> Cow<'_, Value> {
    match arguments {
        Some(arguments) if check_depth(arguments, "", 0).is_ok() => Cow::Borrowed(arguments),
        Some(_) => Cow::Owned(serde_json::json!({
            "not_recorded": format!("the arguments nest more than {MAX_NESTING} levels deep"),
        })),
        None => Cow::Owned(Value::Object(Default::default())),
    }
}

/// Render a response message as JSON with proto field names and every field
/// present (so it matches the output schema). Integers are JSON integers,
/// 64-bit ones included (proto3's JSON mapping would write those as
/// strings), and whole numbers inside free-form `Struct` values, which
/// protobuf keeps as doubles, come back as integers too: `63`, not `63.0`.
pub fn to_json(message: &DynamicMessage) -> Value {
    let options = SerializeOptions::new()
        .use_proto_field_name(true)
        .skip_default_fields(false)
        .stringify_64_bit_integers(false);
    let mut value = message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .unwrap_or(Value::Null);
    integral_floats_as_integers(&mut value);
    value
}

/// The largest integer a double (and so a JavaScript number) holds exactly.
pub const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// Rewrite every whole-valued float as a JSON integer. A number's value does
/// not change, so this can only make integer schemas match.
fn integral_floats_as_integers(value: &mut Value) {
    match value {
        Value::Number(n) if !n.is_i64() && !n.is_u64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() <= MAX_SAFE_INTEGER
            {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_floats_as_integers),
        Value::Object(map) => map.values_mut().for_each(integral_floats_as_integers),
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn check_message(
    message: &MessageDescriptor,
    value: &Value,
    path: &str,
    depth: usize,
) -> Result<(), ArgError> {
    if depth > MAX_NESTING {
        return Err(err(
            path,
            format!("nested more than {MAX_NESTING} levels deep"),
        ));
    }
    if is_open_well_known(message) {
        return check_depth(value, path, depth);
    }
    let Value::Object(map) = value else {
        return Err(err(
            path,
            format!("expected an object, got {}", type_name(value)),
        ));
    };
    let mut oneofs_seen: Vec<(String, String)> = Vec::new();
    for (key, v) in map {
        // The edge's own call context is filled by the edge, never by the
        // caller, so it reads as unknown.
        let field = message
            .get_field_by_name(key)
            .or_else(|| message.get_field_by_json_name(key))
            .filter(|f| !crate::schema::is_call_context(f));
        let Some(field) = field else {
            let names: Vec<_> = message
                .fields()
                .filter(|f| !crate::schema::is_call_context(f))
                .map(|f| f.name().to_owned())
                .collect();
            let expected = if names.is_empty() {
                "this takes no arguments".to_owned()
            } else {
                format!("expected one of: {}", names.join(", "))
            };
            return Err(err(
                &join(path, key),
                format!("unknown argument; {expected}"),
            ));
        };
        if v.is_null() {
            continue;
        }
        if let Some(oneof) = field.containing_oneof().filter(|o| !o.is_synthetic()) {
            if let Some((_, other)) = oneofs_seen.iter().find(|(o, _)| o == oneof.name()) {
                return Err(err(
                    &join(path, key),
                    format!(
                        "cannot be combined with {other} (only one of {} may be set)",
                        oneof.name()
                    ),
                ));
            }
            oneofs_seen.push((oneof.name().to_owned(), field.name().to_owned()));
        }
        check_field(&field, v, &join(path, field.name()), depth)?;
    }
    for field in message.fields() {
        if crate::schema::is_required(&field) {
            let present = map
                .get(field.name())
                .or_else(|| map.get(field.json_name()))
                .is_some_and(|v| !v.is_null());
            if !present {
                return Err(err(
                    &join(path, field.name()),
                    "required argument is missing",
                ));
            }
        }
    }
    Ok(())
}

fn check_field(
    field: &FieldDescriptor,
    value: &Value,
    path: &str,
    depth: usize,
) -> Result<(), ArgError> {
    if field.is_map() {
        let Value::Object(map) = value else {
            return Err(err(
                path,
                format!("expected an object, got {}", type_name(value)),
            ));
        };
        let Kind::Message(entry) = field.kind() else {
            return Ok(());
        };
        let value_field = entry.map_entry_value_field();
        for (k, v) in map {
            check_kind(&value_field.kind(), v, &format!("{path}[{k:?}]"), depth + 1)?;
        }
        return Ok(());
    }
    if field.is_list() {
        let Value::Array(items) = value else {
            return Err(err(
                path,
                format!("expected an array, got {}", type_name(value)),
            ));
        };
        for (i, item) in items.iter().enumerate() {
            let path = format!("{path}[{i}]");
            check_kind(&field.kind(), item, &path, depth + 1)?;
            check_allowed(field, item, &path)?;
        }
        return Ok(());
    }
    check_kind(&field.kind(), value, path, depth + 1)?;
    check_allowed(field, value, path)
}

/// A string field that declares its values (`ithaca.mcp.v1.field`) takes
/// one of them, and the error lists them.
fn check_allowed(field: &FieldDescriptor, value: &Value, path: &str) -> Result<(), ArgError> {
    let (Some(allowed), Value::String(s)) = (crate::schema::allowed_values(field), value) else {
        return Ok(());
    };
    if allowed.iter().any(|a| a == s) {
        return Ok(());
    }
    Err(err(
        path,
        format!("{s:?} is not one of: {}", allowed.join(", ")),
    ))
}

fn check_kind(kind: &Kind, value: &Value, path: &str, depth: usize) -> Result<(), ArgError> {
    let fits = match kind {
        Kind::Message(m) => return check_message(m, value, path, depth),
        Kind::Double | Kind::Float => value.is_number(),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            return check_integer(value, path, i64::from(i32::MIN), i64::from(i32::MAX), false);
        }
        Kind::Uint32 | Kind::Fixed32 => {
            return check_integer(value, path, 0, i64::from(u32::MAX), false);
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => {
            return check_integer(value, path, i64::MIN, i64::MAX, true);
        }
        Kind::Uint64 | Kind::Fixed64 => return check_integer(value, path, 0, i64::MAX, true),
        Kind::Bool => value.is_boolean(),
        Kind::String | Kind::Bytes => value.is_string(),
        Kind::Enum(e) => {
            let Value::String(s) = value else {
                return Err(err(
                    path,
                    format!("expected a string, got {}", type_name(value)),
                ));
            };
            if e.get_value_by_name(s).is_none() {
                let names: Vec<_> = e.values().map(|v| v.name().to_owned()).collect();
                return Err(err(
                    path,
                    format!("{s:?} is not one of: {}", names.join(", ")),
                ));
            }
            true
        }
    };
    if fits {
        return Ok(());
    }
    let wanted = match kind {
        Kind::Double | Kind::Float => "a number",
        Kind::Bool => "a boolean",
        _ => "a string",
    };
    Err(err(
        path,
        format!("expected {wanted}, got {}", type_name(value)),
    ))
}

fn check_integer(
    value: &Value,
    path: &str,
    min: i64,
    max: i64,
    strings_ok: bool,
) -> Result<(), ArgError> {
    let n = match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                .map(|f| f as i64)
        }),
        Value::String(s) if strings_ok => s.parse::<i64>().ok(),
        _ => None,
    };
    match n {
        Some(n) if n >= min && n <= max => Ok(()),
        Some(_) => Err(err(path, format!("must be between {min} and {max}"))),
        None => Err(err(
            path,
            format!("expected an integer, got {}", type_name(value)),
        )),
    }
}

/// Struct, Value and friends take any JSON, but not unboundedly nested JSON.
fn check_depth(value: &Value, path: &str, depth: usize) -> Result<(), ArgError> {
    if depth > MAX_NESTING {
        return Err(err(
            path,
            format!("nested more than {MAX_NESTING} levels deep"),
        ));
    }
    match value {
        Value::Array(items) => items
            .iter()
            .try_for_each(|v| check_depth(v, path, depth + 1)),
        Value::Object(map) => map
            .values()
            .try_for_each(|v| check_depth(v, path, depth + 1)),
        _ => Ok(()),
    }
}

fn is_open_well_known(message: &MessageDescriptor) -> bool {
    message.full_name().starts_with("google.protobuf.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn input(name: &str) -> MessageDescriptor {
        ithaca_proto::annotations::pool()
            .get_message_by_name(name)
            .expect("in the pool")
    }

    #[test]
    fn a_declared_value_passes_and_any_other_is_refused_naming_the_values() {
        let promote = input("ithaca.skills.v1.PromoteStrategyRequest");
        let ok = to_message(
            &promote,
            Some(&json!({"strategy_id": "s-1", "mode": "paper"})),
        );
        assert!(ok.is_ok(), "{ok:?}");
        let refused = to_message(
            &promote,
            Some(&json!({"strategy_id": "s-1", "mode": "sandbox"})),
        )
        .expect_err("not a mode");
        assert_eq!(
            refused.message,
            r#"mode: "sandbox" is not one of: paper, live"#
        );
        // Each string of a repeated field, too.
        let screen = input("ithaca.broker.v1.ScreenPeersRequest");
        let refused = to_message(
            &screen,
            Some(&json!({"symbols": ["AAPL"], "metrics": ["pe", "beta"]})),
        )
        .expect_err("not a metric");
        assert!(
            refused
                .message
                .starts_with(r#"metrics[1]: "beta" is not one of: pe, ps"#),
            "{refused}"
        );
    }
}
