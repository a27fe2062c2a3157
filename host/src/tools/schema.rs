//! Compiling a tool's JSON Schema into a validator, as cheaply as the
//! schema allows.
//!
//! jsonschema checks every schema against its draft's meta-schema first.
//! For draft 2020-12 (the default when a schema names none) that is seven
//! meta-schema documents: about 1.4 ms and 0.5 MiB in a one-shot
//! `chitin agent -m`, a tenth of its time, for one tool call. Draft 7's
//! meta-schema is one document (0.5 ms). Tool schemas are almost always
//! plain draft-7 JSON Schema (what OpenAI function parameters and most MCP
//! servers write), and on the keywords the two drafts share they agree. So:
//! - a schema that names its draft (`$schema`) gets that draft;
//! - one that uses a keyword only 2019-09/2020-12 know (`prefixItems`,
//!   `unevaluatedProperties`, `dependentRequired`, `$dynamicRef`, …) gets
//!   2020-12, as before;
//! - any other is compiled as draft 7, with `format` an annotation as it is
//!   in 2020-12 (draft 7 would assert it), so no value valid before is
//!   refused now.

use serde_json::Value;

/// Keywords a draft-7 validator would ignore: a schema using one is
/// compiled as 2020-12 so they keep their meaning.
const LATER_KEYWORDS: &[&str] = &[
    "prefixItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "dependentRequired",
    "dependentSchemas",
    "minContains",
    "maxContains",
    "$dynamicRef",
    "$dynamicAnchor",
    "$recursiveRef",
    "$recursiveAnchor",
    "$anchor",
    "$vocabulary",
];

/// A validator for `schema`, or the reason it does not compile.
pub fn compile(schema: &Value) -> Result<jsonschema::Validator, String> {
    if schema.get("$schema").is_some() || uses_later_keywords(schema) {
        return jsonschema::validator_for(schema).map_err(|e| e.to_string());
    }
    jsonschema::options()
        .with_draft(jsonschema::Draft::Draft7)
        .should_validate_formats(false)
        .build(schema)
        .map_err(|e| e.to_string())
}

/// True when a key anywhere in `schema` is one of [`LATER_KEYWORDS`]
/// (property names included: a false positive only costs the 2020-12
/// compile, never a wrong answer).
fn uses_later_keywords(schema: &Value) -> bool {
    match schema {
        Value::Object(map) => map.iter().any(|(key, value)| LATER_KEYWORDS.contains(&key.as_str()) || uses_later_keywords(value)),
        Value::Array(items) => items.iter().any(uses_later_keywords),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// The same verdicts as the 2020-12 compile on the usual tool schema.
    #[test]
    fn a_plain_schema_gets_the_same_verdicts_as_2020_12() {
        let schema = json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "minLength": 1, "format": "uri-reference"},
                "mode": {"enum": ["a", "b"]},
                "count": {"type": "integer", "exclusiveMinimum": 0},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                "when": {"type": "string", "format": "date-time"},
                "nested": {"$ref": "#/$defs/n"}
            },
            "$defs": {"n": {"type": "object", "required": ["x"]}},
            "required": ["path"],
            "additionalProperties": false
        });
        let fast = compile(&schema).unwrap();
        let full = jsonschema::validator_for(&schema).unwrap();
        for instance in [
            json!({"path": "a"}),
            json!({}),
            json!({"path": ""}),
            json!({"path": "a", "mode": "c"}),
            json!({"path": "a", "count": 0}),
            json!({"path": "a", "count": 1}),
            json!({"path": "a", "tags": ["x", "x"]}),
            json!({"path": "a", "when": "not a date"}),
            json!({"path": "a", "nested": {}}),
            json!({"path": "a", "nested": {"x": 1}}),
            json!({"path": "a", "other": 1}),
        ] {
            assert_eq!(fast.is_valid(&instance), full.is_valid(&instance), "{instance}");
        }
    }

    #[test]
    fn later_keywords_and_declared_drafts_keep_their_meaning() {
        let tuple = json!({"type": "object", "properties": {"p": {"type": "array", "prefixItems": [{"type": "integer"}]}}});
        let validator = compile(&tuple).unwrap();
        assert!(!validator.is_valid(&json!({"p": ["x"]})), "prefixItems is enforced");
        let dependent = json!({"type": "object", "dependentRequired": {"a": ["b"]}});
        assert!(!compile(&dependent).unwrap().is_valid(&json!({"a": 1})));
        // A schema naming draft 7 gets draft 7, formats asserted as that draft does.
        let declared = json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "properties": {"n": {"type": "integer"}}});
        assert!(!compile(&declared).unwrap().is_valid(&json!({"n": "x"})));
    }

    #[test]
    fn a_broken_schema_says_why() {
        let err = compile(&json!({"type": "object", "properties": {"n": {"type": "nonsense"}}})).unwrap_err();
        assert!(err.contains("nonsense"), "{err}");
    }
}
