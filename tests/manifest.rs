//! Manifest validation (negative cases name the field), reading without
//! instantiation, and `pack` for components built without the SDK.

use chitin::plugins::manifest::{self, Manifest};
use chitin::plugins::{GrantConfig, Limits};
use chitin_tests::{HELLO_WASM, HOSTILE_WASM, OnePlugin, guest_bytes};
use serde_json::{Value, json};

fn valid() -> Value {
    json!({
        "manifest_version": 1,
        "name": "weather",
        "version": "1.0.0",
        "description": "Forecasts",
        "tools": [{
            "name": "forecast",
            "description": "Get a forecast",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "read_only": true,
            "concurrency_safe": true
        }],
        "capabilities": {"workspace": "none", "network": ["api.weather.example"]}
    })
}

/// Applies `edit` to a valid manifest and returns the validation error text.
fn rejected(edit: impl FnOnce(&mut Value)) -> (String, String) {
    let mut value = valid();
    edit(&mut value);
    let err = Manifest::from_json(value.to_string().as_bytes()).expect_err("must be rejected");
    (err.field.clone(), err.to_string())
}

#[test]
fn a_valid_manifest_parses() {
    let m = Manifest::from_json(valid().to_string().as_bytes()).unwrap();
    assert_eq!(m.name, "weather");
    assert!(m.tools[0].read_only && m.tools[0].concurrency_safe);
}

#[test]
fn invalid_manifests_name_the_field() {
    let cases: Vec<(&str, Box<dyn FnOnce(&mut Value)>)> = vec![
        ("name", Box::new(|v| v["name"] = json!("Bad Name"))),
        ("name", Box::new(|v| v["name"] = json!(""))),
        ("name", Box::new(|v| v["name"] = json!("x".repeat(65)))),
        ("version", Box::new(|v| v["version"] = json!(" "))),
        ("manifest_version", Box::new(|v| v["manifest_version"] = json!(2))),
        ("tools", Box::new(|v| v["tools"] = json!([]))),
        ("tools[0].name", Box::new(|v| v["tools"][0]["name"] = json!("9lives"))),
        ("tools[0].name", Box::new(|v| v["tools"][0]["name"] = json!("has space"))),
        ("tools[1].name", Box::new(|v| {
            let dup = v["tools"][0].clone();
            v["tools"].as_array_mut().unwrap().push(dup);
        })),
        ("tools[0].parameters", Box::new(|v| v["tools"][0]["parameters"] = json!({"type": "string"}))),
        ("tools[0].parameters", Box::new(|v| v["tools"][0]["parameters"] = json!({"type": "object", "properties": {"a": {"type": "nonsense"}}}))),
        ("tools[0].parameters", Box::new(|v| v["tools"][0]["parameters"] = json!({"type": "object", "properties": {"a": {"minLength": "five"}}}))),
        ("capabilities.network[0]", Box::new(|v| v["capabilities"]["network"] = json!(["https://x.com/path"]))),
        ("capabilities.host[0]", Box::new(|v| v["capabilities"]["host"] = json!(["process"]))),
    ];
    for (field, edit) in cases {
        let (got, message) = rejected(edit);
        assert_eq!(got, field, "{message}");
        assert!(message.contains(field), "{message}");
    }
}

#[test]
fn unknown_and_malformed_fields_are_errors() {
    let (_, message) = rejected(|v| v["capabilities"]["workspace"] = json!("everything"));
    assert!(message.contains("everything"), "{message}");
    let (_, message) = rejected(|v| v["tools"][0]["readonly"] = json!(true));
    assert!(message.contains("readonly"), "{message}");
    let err = Manifest::from_json(b"{not json").unwrap_err();
    assert_eq!(err.field, "section");
}

#[test]
fn the_sdk_writes_a_manifest_that_is_read_without_instantiating() {
    let bytes = guest_bytes(HELLO_WASM);
    let m = Manifest::from_component(&bytes).unwrap();
    assert_eq!(m.name, "hello");
    let greet = m.tool("greet").expect("greet tool");
    assert!(greet.read_only && greet.concurrency_safe);
    assert_eq!(greet.parameters["type"], "object");
    assert!(greet.parameters["required"].as_array().unwrap().contains(&json!("name")));
}

#[test]
fn components_without_a_manifest_or_not_components_are_refused() {
    let err = Manifest::from_component(b"\0asm\x01\0\0\0").unwrap_err();
    assert!(err.to_string().contains("chitin plugin pack"), "{err}");
    let err = Manifest::from_component(b"not wasm at all").unwrap_err();
    assert!(err.to_string().contains("not a valid WebAssembly binary"), "{err}");
    let m = Manifest::from_json(valid().to_string().as_bytes()).unwrap();
    let err = manifest::pack(b"\0asm\x01\0\0\0", &m).unwrap_err();
    assert!(err.to_string().contains("not a WebAssembly component"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn pack_replaces_the_manifest_and_the_component_still_runs() {
    let bytes = guest_bytes(HOSTILE_WASM);
    let mut m = Manifest::from_component(&bytes).unwrap();
    m.name = "repacked".into();
    m.description = "packed by the test".into();
    m.tools.retain(|t| t.name == "echo");
    let packed = manifest::pack(&bytes, &m).unwrap();
    assert_eq!(Manifest::from_component(&packed).unwrap(), m, "the top-level section wins over the nested one");
    // Packing twice replaces, not appends.
    m.version = "9.9.9".into();
    let twice = manifest::pack(&packed, &m).unwrap();
    assert_eq!(Manifest::from_component(&twice).unwrap().version, "9.9.9");
    assert!(twice.len() < packed.len() + 64, "one section, not two");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("repacked.wasm");
    std::fs::write(&path, &twice).unwrap();
    let host = OnePlugin::new(path.to_str().unwrap(), GrantConfig::default(), Limits::default());
    assert_eq!(host.plugin.manifest.name, "repacked");
    assert_eq!(host.call("echo", json!({"text": "packed"})).await.unwrap(), "packed");
}
