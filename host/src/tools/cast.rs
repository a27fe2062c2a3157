//! Casting model-produced arguments toward their schema.
//!
//! Models often send `"5"` for an integer or `"true"` for a boolean. Where the
//! schema says what a value should be and the conversion is lossless, we
//! convert; everything else is left for the validator to report.

use serde_json::{Map, Value};

/// Converts `value` in place toward `schema`.
pub(super) fn cast(value: &mut Value, schema: &Value) {
    match (value, schema_type(schema)) {
        (Value::Object(map), Some("object")) => cast_object(map, schema),
        (Value::Array(items), Some("array")) => {
            if let Some(item_schema) = schema.get("items") {
                items.iter_mut().for_each(|v| cast(v, item_schema));
            }
        }
        (v @ Value::String(_), Some(kind)) => {
            let Value::String(text) = &*v else { unreachable!() };
            if let Some(converted) = from_string(text, kind) {
                *v = converted;
            }
        }
        (v @ (Value::Number(_) | Value::Bool(_)), Some("string")) => *v = Value::String(v.to_string()),
        (v @ Value::Number(_), Some("integer")) => {
            // 3.0 -> 3; 3.5 stays and fails validation.
            if let Some(f) = v.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15) {
                *v = Value::from(f as i64);
            }
        }
        _ => {}
    }
}

fn cast_object(map: &mut Map<String, Value>, schema: &Value) {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else { return };
    // `"offset": null` is how many models say "not given": drop a null
    // optional property unless the schema itself allows null.
    let required: Vec<&str> = schema.get("required").and_then(Value::as_array).map(|r| r.iter().filter_map(Value::as_str).collect()).unwrap_or_default();
    map.retain(|key, value| {
        !value.is_null() || required.contains(&key.as_str()) || properties.get(key).is_some_and(allows_null)
    });
    for (key, value) in map.iter_mut() {
        if let Some(prop) = properties.get(key) {
            cast(value, prop);
        }
    }
}

fn allows_null(schema: &Value) -> bool {
    match schema.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
        _ => true,
    }
}

/// The schema's single `type`, ignoring `"null"` in a type list
/// (`["string", "null"]` is how optional values are often written).
fn schema_type(schema: &Value) -> Option<&str> {
    match schema.get("type")? {
        Value::String(t) => Some(t),
        Value::Array(types) => {
            let mut concrete = types.iter().filter_map(Value::as_str).filter(|t| *t != "null");
            let first = concrete.next()?;
            concrete.next().is_none().then_some(first)
        }
        _ => None,
    }
}

fn from_string(text: &str, kind: &str) -> Option<Value> {
    let trimmed = text.trim();
    match kind {
        "integer" => trimmed.parse::<i64>().ok().map(Value::from),
        "number" => trimmed.parse::<f64>().ok().filter(|f| f.is_finite()).and_then(|f| {
            if f.fract() == 0.0 && !trimmed.contains(['.', 'e', 'E']) { Some(Value::from(f as i64)) } else { serde_json::Number::from_f64(f).map(Value::Number) }
        }),
        "boolean" => match trimmed.to_ascii_lowercase().as_str() {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
        // A JSON text where structure was expected: the model quoted it.
        "array" | "object" => serde_json::from_str::<Value>(trimmed)
            .ok()
            .filter(|v| v.is_array() == (kind == "array") && v.is_object() == (kind == "object")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn casts_by_schema() {
        let schema = json!({"type": "object", "properties": {
            "n": {"type": "integer"}, "f": {"type": "number"}, "b": {"type": "boolean"},
            "s": {"type": "string"}, "o": {"type": ["integer", "null"]},
            "list": {"type": "array", "items": {"type": "integer"}},
            "nested": {"type": "object", "properties": {"x": {"type": "boolean"}}},
            "q": {"type": "array"}
        }});
        let mut args = json!({"n": "42", "f": "2.5", "b": "TRUE", "s": 7, "o": "3", "list": ["1", 2, "x"],
            "nested": {"x": "false"}, "q": "[1,2]", "extra": "5"});
        cast(&mut args, &schema);
        assert_eq!(args, json!({"n": 42, "f": 2.5, "b": true, "s": "7", "o": 3, "list": [1, 2, "x"],
            "nested": {"x": false}, "q": [1, 2], "extra": "5"}));
    }

    #[test]
    fn null_optional_properties_are_dropped() {
        let schema = json!({"type": "object", "required": ["path"], "properties": {
            "path": {"type": "string"}, "offset": {"type": "integer"}, "note": {"type": ["string", "null"]}}});
        let mut args = json!({"path": null, "offset": null, "note": null});
        cast(&mut args, &schema);
        assert_eq!(args, json!({"path": null, "note": null}), "a required null stays, for the validator to report");
    }

    #[test]
    fn leaves_what_it_cannot_convert() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}, "b": {"type": "boolean"}}});
        let mut args = json!({"n": "forty", "b": "yes"});
        cast(&mut args, &schema);
        assert_eq!(args, json!({"n": "forty", "b": "yes"}));
        let mut float = json!({"n": 3.0});
        cast(&mut float, &schema);
        assert_eq!(float, json!({"n": 3}));
    }
}
