//! Conversions between `google.protobuf.Struct` and `serde_json`, for fields
//! that carry free-form JSON (trace event payloads).

use prost_types::value::Kind;
use prost_types::{ListValue, Struct, Value};
use serde_json::{Map, Number};

/// A JSON object as a protobuf `Struct`. Non-object JSON is wrapped as
/// `{"value": …}` so nothing is lost.
pub fn to_struct(json: serde_json::Value) -> Struct {
    match json {
        serde_json::Value::Object(map) => Struct {
            fields: map.into_iter().map(|(k, v)| (k, to_value(v))).collect(),
        },
        other => Struct {
            fields: [("value".to_owned(), to_value(other))]
                .into_iter()
                .collect(),
        },
    }
}

/// A protobuf `Struct` as a JSON object.
pub fn from_struct(s: Struct) -> serde_json::Value {
    serde_json::Value::Object(
        s.fields
            .into_iter()
            .map(|(k, v)| (k, from_value(v)))
            .collect::<Map<_, _>>(),
    )
}

/// A protobuf `ListValue` as a JSON array.
pub fn from_list(list: ListValue) -> serde_json::Value {
    serde_json::Value::Array(list.values.into_iter().map(from_value).collect())
}

/// A JSON array as a protobuf `ListValue` (anything else as an empty list).
pub fn to_list(json: serde_json::Value) -> ListValue {
    match json {
        serde_json::Value::Array(items) => ListValue {
            values: items.into_iter().map(to_value).collect(),
        },
        _ => ListValue::default(),
    }
}

/// A JSON value as a `google.protobuf.Value`.
pub fn to_value(json: serde_json::Value) -> Value {
    let kind = match json {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Kind::StringValue(s),
        serde_json::Value::Array(items) => Kind::ListValue(ListValue {
            values: items.into_iter().map(to_value).collect(),
        }),
        serde_json::Value::Object(_) => Kind::StructValue(to_struct(json)),
    };
    Value { kind: Some(kind) }
}

/// A `google.protobuf.Value` as JSON (whole numbers as integers).
pub fn from_value(v: Value) -> serde_json::Value {
    match v.kind {
        None | Some(Kind::NullValue(_)) => serde_json::Value::Null,
        Some(Kind::BoolValue(b)) => serde_json::Value::Bool(b),
        Some(Kind::NumberValue(n)) => number(n),
        Some(Kind::StringValue(s)) => serde_json::Value::String(s),
        Some(Kind::ListValue(l)) => {
            serde_json::Value::Array(l.values.into_iter().map(from_value).collect())
        }
        Some(Kind::StructValue(s)) => from_struct(s),
    }
}

/// Whole numbers come back as JSON integers, so `3` does not become `3.0`.
fn number(n: f64) -> serde_json::Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        serde_json::Value::Number(Number::from(n as i64))
    } else {
        Number::from_f64(n).map_or(serde_json::Value::Null, serde_json::Value::Number)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trips_lists() {
        let v = json!([{"$match": {"a": {"$gt": 1}}}, 2.5, "x"]);
        assert_eq!(from_list(to_list(v.clone())), v);
        assert_eq!(to_list(json!({"a": 1})).values.len(), 0);
    }

    #[test]
    fn round_trips_nested_json() {
        let v = json!({"a": 1, "b": [true, null, "x", 2.5], "c": {"d": "e"}});
        assert_eq!(from_struct(to_struct(v.clone())), v);
    }

    #[test]
    fn wraps_non_objects() {
        assert_eq!(from_struct(to_struct(json!(7))), json!({"value": 7}));
    }
}
