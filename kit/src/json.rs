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

/// A JSON value as the UTF-8 text a `bytes …_json` field carries (trace
/// payloads: the session service stores JSON, so it reads back what was
/// sent, integers as integers, with no `Struct` tree built on the way).
pub fn to_text(json: &serde_json::Value) -> Vec<u8> {
    // A `Value`'s keys are strings, so writing it to memory cannot fail.
    serde_json::to_vec(json).unwrap_or_default()
}

/// The JSON object a request carries as text (`text`, read when not empty)
/// or else as a `Struct` (`{}` when neither is set). An error names `field`
/// and says what is wrong with the text.
pub fn object_from(
    text: &[u8],
    fallback: Option<Struct>,
    field: &str,
) -> Result<serde_json::Value, String> {
    if text.is_empty() {
        return Ok(fallback.map_or_else(|| serde_json::Value::Object(Map::new()), from_struct));
    }
    match serde_json::from_slice::<serde_json::Value>(text) {
        Ok(object @ serde_json::Value::Object(_)) => Ok(object),
        Ok(_) => Err(format!("{field}: must be a JSON object")),
        Err(e) => Err(format!("{field}: not valid JSON ({e})")),
    }
}

/// Like [`object_from`], but the object stays text: checked in full (UTF-8,
/// JSON, an object, nesting no deeper than `serde_json` reads back) without
/// building it, and returned without the whitespace around it. For a writer
/// that stores the object as it came: the checks are what every later
/// reader of the text needs, and the tree a parse would build is thrown
/// away.
pub fn object_text(text: &[u8], fallback: Option<Struct>, field: &str) -> Result<String, String> {
    if text.is_empty() {
        let object = fallback.map_or_else(|| serde_json::Value::Object(Map::new()), from_struct);
        return Ok(object.to_string());
    }
    let text = std::str::from_utf8(text)
        .map_err(|e| format!("{field}: not valid JSON (not UTF-8: {e})"))?;
    serde_json::from_str::<Checked>(text).map_err(|e| format!("{field}: not valid JSON ({e})"))?;
    let text = text.trim_matches([' ', '\t', '\n', '\r']);
    if !text.starts_with('{') {
        return Err(format!("{field}: must be a JSON object"));
    }
    Ok(text.to_owned())
}

/// A JSON value read as a `serde_json::Value` would be (numbers included:
/// one out of a float's range is refused) and thrown away, without the tree.
struct Checked;

impl<'de> serde::Deserialize<'de> for Checked {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(CheckedVisitor)
    }
}

struct CheckedVisitor;

impl<'de> serde::de::Visitor<'de> for CheckedVisitor {
    type Value = Checked;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_str<E>(self, _: &str) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_unit<E>(self) -> Result<Checked, E> {
        Ok(Checked)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
        while seq.next_element::<Checked>()?.is_some() {}
        Ok(Checked)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
        while map.next_entry::<Checked, Checked>()?.is_some() {}
        Ok(Checked)
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

    #[test]
    fn text_is_read_before_the_struct_and_keeps_integers() {
        let v = json!({"call_seq": 3, "x": [1.5, {"n": 9007199254740993_u64}]});
        let read = object_from(&to_text(&v), Some(to_struct(json!({"other": 1}))), "f");
        assert_eq!(read, Ok(v.clone()));
        assert_eq!(
            read.expect("read")["x"][1]["n"],
            json!(9007199254740993_u64)
        );
        assert_eq!(
            object_from(b"", Some(to_struct(json!({"a": 1}))), "f"),
            Ok(json!({"a": 1}))
        );
        assert_eq!(object_from(b"", None, "f"), Ok(json!({})));
    }

    #[test]
    fn bad_text_is_an_error_naming_the_field() {
        let not_json = object_from(b"{\"a\":", None, "payload_json").expect_err("not JSON");
        assert!(
            not_json.starts_with("payload_json: not valid JSON"),
            "{not_json}"
        );
        let not_object = object_from(b"[1]", None, "payload_json").expect_err("not an object");
        assert_eq!(not_object, "payload_json: must be a JSON object");
        let deep = "[".repeat(10_000);
        assert!(object_from(deep.as_bytes(), None, "f").is_err());
    }

    /// The text path refuses what the parsing path refuses, and keeps what
    /// it accepts as it came (but for the whitespace around it).
    #[test]
    fn object_text_checks_as_object_from_does() {
        let cases: [&[u8]; 9] = [
            b"{\"a\":",
            b"[1]",
            b"7",
            b"\"x\"",
            b"{\"a\": 1} {}",
            b"{\"a\": \"\xff\"}",
            b"{\"a\": 1,}",
            b" \n",
            b"{\"n\": 1e400}",
        ];
        for case in cases {
            let parsed = object_from(case, None, "payload_json");
            let text = object_text(case, None, "payload_json");
            assert_eq!(
                parsed.is_ok(),
                text.is_ok(),
                "{:?}: {parsed:?} / {text:?}",
                String::from_utf8_lossy(case)
            );
            if let Err(e) = text {
                assert!(e.starts_with("payload_json: "), "{e}");
            }
        }
        // Nesting: what serde_json would refuse to read back is refused.
        for depth in [127, 128, 129, 10_000] {
            let deep = format!("{{\"a\":{}{}}}", "[".repeat(depth), "]".repeat(depth));
            let parsed = object_from(deep.as_bytes(), None, "f");
            let text = object_text(deep.as_bytes(), None, "f");
            assert_eq!(parsed.is_ok(), text.is_ok(), "depth {depth}");
        }
        let kept = object_text(
            b" \n{\"b\": [1, 2.50], \"a\": 9007199254740993}\t",
            None,
            "f",
        );
        assert_eq!(
            kept.as_deref(),
            Ok("{\"b\": [1, 2.50], \"a\": 9007199254740993}")
        );
        assert_eq!(object_text(b"", None, "f").as_deref(), Ok("{}"));
        assert_eq!(
            object_text(b"", Some(to_struct(json!({"a": 1}))), "f").as_deref(),
            Ok("{\"a\":1}")
        );
    }
}
