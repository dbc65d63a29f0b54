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
            return Err(ServiceError::invalid(format!(
                "inputs.{key}: unknown input; expected one of: {}",
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
    let bad = |what: String| Err(ServiceError::invalid(format!("{path}: {what}")));
    match spec["type"].as_str().unwrap_or("") {
        "string" if !value.is_string() => {
            return bad(format!("expected a string, got {value}"));
        }
        "integer" => {
            let Some(n) = value.as_i64() else {
                return bad(format!("expected an integer, got {value}"));
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
                return bad(format!("expected a number, got {value}"));
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
                return bad(format!("expected an array, got {value}"));
            };
            if items.is_empty() {
                return bad("must not be empty".to_owned());
            }
            for (i, item) in items.iter().enumerate() {
                check(&format!("{path}[{i}]"), &spec["items"], item)?;
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn defaults_and_field_errors() {
        let schema = json!({"type": "object", "required": ["symbol"], "properties": {
            "symbol": {"type": "string"}, "window": {"type": "integer", "minimum": 2, "default": 21},
            "windows": {"type": "array", "items": {"type": "integer", "minimum": 2}}}});
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
