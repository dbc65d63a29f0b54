//! Checking run inputs against a manifest's input schema (the small subset
//! of JSON Schema the built-in manifests use), filling in defaults. Errors
//! name the field, so an agent can correct itself.

use ithaca_kit::error::ServiceError;
use serde_json::{Map, Value};

/// Validate `inputs` against `schema`; returns the inputs with defaults.
pub fn inputs(schema: &Value, inputs: Value) -> Result<Map<String, Value>, ServiceError> {
    let mut map = match inputs {
        Value::Null => Map::new(),
        Value::Object(m) => m,
        _ => return Err(ServiceError::invalid("inputs: must be an object")),
    };
    let properties = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for key in map.keys() {
        if !properties.contains_key(key) {
            let names: Vec<&str> = properties.keys().map(String::as_str).collect();
            // A name is quoted up to 64 characters: it may be megabytes.
            let shown: String = key.chars().take(64).collect();
            let cut = if shown.len() < key.len() { "…" } else { "" };
            return Err(ServiceError::invalid(format!(
                "inputs.{shown}{cut}: unknown input; expected one of: {}",
                names.join(", ")
            )));
        }
    }
    for name in schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if map.get(name).is_none_or(Value::is_null) {
            return Err(ServiceError::invalid(format!(
                "inputs.{name}: required input is missing"
            )));
        }
    }
    for (name, spec) in &properties {
        match map.get(name) {
            None | Some(Value::Null) => {
                if let Some(default) = spec.get("default") {
                    map.insert(name.clone(), default.clone());
                }
            }
            Some(value) => check(&format!("inputs.{name}"), spec, value)?,
        }
    }
    Ok(map)
}

fn check(path: &str, spec: &Value, value: &Value) -> Result<(), ServiceError> {
    // Errors name what was given by its kind, never by its text: a value
    // may be megabytes long, and the message travels in a gRPC trailer.
    let bad = |what: String| Err(ServiceError::invalid(format!("{path}: {what}")));
    match spec["type"].as_str().unwrap_or("") {
        "string" => {
            let Some(text) = value.as_str() else {
                return bad(format!("expected a string, got {}", kind(value)));
            };
            if let Some(max) = spec["maxLength"].as_u64() {
                let chars = text.chars().count() as u64;
                if chars > max {
                    return bad(format!("at most {max} characters, got {chars}"));
                }
            }
        }
        "integer" => {
            let Some(n) = value.as_i64() else {
                return bad(format!("expected an integer, got {}", kind(value)));
            };
            if let Some(min) = spec["minimum"].as_i64().filter(|m| n < *m) {
                return bad(format!("must be at least {min}"));
            }
            if let Some(max) = spec["maximum"].as_i64().filter(|m| n > *m) {
                return bad(format!("must be at most {max}"));
            }
        }
        "number" => {
            let Some(n) = value.as_f64() else {
                return bad(format!("expected a number, got {}", kind(value)));
            };
            if let Some(min) = spec["minimum"].as_f64().filter(|m| n < *m) {
                return bad(format!("must be at least {min}"));
            }
            if let Some(max) = spec["maximum"].as_f64().filter(|m| n > *m) {
                return bad(format!("must be at most {max}"));
            }
        }
        "array" => {
            let Some(items) = value.as_array() else {
                return bad(format!("expected an array, got {}", kind(value)));
            };
            if items.is_empty() {
                return bad("must not be empty".to_owned());
            }
            // Checked before the items, so an oversized list costs nothing.
            if let Some(max) = spec["maxItems"].as_u64()
                && items.len() as u64 > max
            {
                return bad(format!("at most {max} items, got {}", items.len()));
            }
            for (i, item) in items.iter().enumerate() {
                check(&format!("{path}[{i}]"), &spec["items"], item)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// What kind of JSON value `value` is, for an error message; a short
/// scalar is quoted as it is.
fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) if s.len() <= 32 => format!("{s:?}"),
        Value::String(s) => format!("a string of {} characters", s.chars().count()),
        Value::Array(items) => format!("an array of {} items", items.len()),
        Value::Object(_) => "an object".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn defaults_and_field_errors() {
        let schema = json!({"type": "object", "required": ["symbol"], "properties": {
            "symbol": {"type": "string", "maxLength": 8}, "window": {"type": "integer", "minimum": 2, "default": 21},
            "windows": {"type": "array", "maxItems": 3, "items": {"type": "integer", "minimum": 2}}}});
        let ok = super::inputs(&schema, json!({"symbol": "AAPL"})).expect("valid");
        assert_eq!(ok["window"], 21);
        for (bad, field) in [
            (json!({}), "inputs.symbol"),
            (json!({"symbol": 1}), "inputs.symbol"),
            (json!({"symbol": "A", "window": 1}), "inputs.window"),
            (json!({"symbol": "A", "window": "x"}), "inputs.window"),
            (
                json!({"symbol": "A", "windows": [5, 1]}),
                "inputs.windows[1]",
            ),
            (json!({"symbol": "A", "colour": 1}), "inputs.colour"),
            (
                json!({"symbol": "A", "windows": [5, 5, 5, 5]}),
                "inputs.windows: at most 3 items, got 4",
            ),
            (
                json!({"symbol": "ABCDEFGHI"}),
                "inputs.symbol: at most 8 characters, got 9",
            ),
            (
                json!({"symbol": vec!["A"; 1000]}),
                "inputs.symbol: expected a string, got an array of 1000 items",
            ),
        ] {
            let err = super::inputs(&schema, bad).expect_err("invalid");
            assert!(
                err.message.starts_with(field),
                "{} names {field}",
                err.message
            );
        }
    }
}
