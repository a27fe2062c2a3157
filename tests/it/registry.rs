//! `ToolRegistry.prepare_call` over real plugins: lookup with near-miss
//! suggestions, argument repair, schema validation, and the call itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use chitin::plugins::{CallContext, PluginCatalog, PluginRuntime, RuntimeConfig};
use chitin::tools::{ToolError, ToolRegistry};
use chitin_testing::{HELLO_WASM, shared_cache_dir};
use serde_json::json;

fn registry() -> (ToolRegistry, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Arc::new(
        PluginRuntime::new(RuntimeConfig {
            workspace: dir.path().to_path_buf(),
            cache_dir: Some(shared_cache_dir()),
            limits: Default::default(),
        })
        .unwrap(),
    );
    let catalog = PluginCatalog::load(&runtime, &BTreeMap::new(), None, &[HELLO_WASM.into()]).unwrap();
    (ToolRegistry::new(runtime, &catalog).unwrap(), dir)
}

#[test]
fn unknown_tools_get_a_near_miss_suggestion() {
    let (tools, _dir) = registry();
    let err = tools.prepare_call("greeet", &json!({"name": "x"})).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ToolError::NotFound { .. }));
    assert!(text.contains("Did you mean `greet`?"), "{text}");
    assert!(text.contains("read_file") && text.contains("shout"), "lists available tools: {text}");
    let text = tools.prepare_call("deploy_to_prod", &json!({})).unwrap_err().to_string();
    assert!(!text.contains("Did you mean"), "{text}");
    // Close to both `greet` and `grep`: a guess would be a coin flip.
    let text = tools.prepare_call("gret", &json!({})).unwrap_err().to_string();
    assert!(!text.contains("Did you mean"), "{text}");
}

#[test]
fn arguments_are_repaired_before_validation() {
    let (tools, _dir) = registry();
    let call = tools.prepare_call("greet", &json!("{\"name\": \"Ada\", \"times\": \"3\"}")).unwrap();
    assert_eq!(call.args, json!({"name": "Ada", "times": 3}));
    let call = tools.prepare_call("greet", &json!({"arguments": {"name": "Ada"}})).unwrap();
    assert_eq!(call.args, json!({"name": "Ada"}));
    let call = tools.prepare_call("read_file", &json!({"path": "a.txt", "offset": "2", "limit": 10.0})).unwrap();
    assert_eq!(call.args, json!({"path": "a.txt", "offset": 2, "limit": 10}));
}

#[test]
fn schema_violations_are_reported_together() {
    let (tools, _dir) = registry();
    let err = tools.prepare_call("greet", &json!({"times": "many"})).unwrap_err();
    let text = err.to_string();
    assert!(matches!(&err, ToolError::InvalidArguments { problems, .. } if problems.len() == 2), "{text}");
    assert!(text.contains("\"name\" is a required property"), "{text}");
    assert!(text.contains("/times"), "{text}");
    let text = tools.prepare_call("greet", &json!("{not json")).unwrap_err().to_string();
    assert!(text.contains("not valid JSON"), "{text}");
    let text = tools.prepare_call("greet", &json!([1, 2])).unwrap_err().to_string();
    assert!(text.contains("must be a JSON object"), "{text}");
}

#[test]
fn definitions_are_sorted_and_stable() {
    let (tools, _dir) = registry();
    let names: Vec<&str> = tools.definitions().iter().map(|d| d["function"]["name"].as_str().unwrap()).collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert!(names.contains(&"greet") && names.contains(&"grep"));
    assert_eq!(tools.definitions(), registry().0.definitions());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_runs_through_the_sandbox() {
    let (tools, _dir) = registry();
    let ctx = CallContext::default();
    let out = tools.call("greet", &json!({"name": "Ada", "times": "2"}), &ctx, None).await.unwrap();
    assert!(out.contains("Ada"), "{out}");
    let out = tools.call("shout", &json!({"text": "quiet"}), &ctx, None).await.unwrap();
    assert!(out.contains("QUIET"), "{out}");
}

#[test]
fn a_plugin_cannot_shadow_a_builtin_tool() {
    // A marketplace plugin that calls its tool `read_file` loads, but the
    // built-in `read_file` keeps the name and the clash is reported.
    let dir = tempfile::tempdir().unwrap();
    let hello = std::fs::read(HELLO_WASM).unwrap();
    let mut manifest = chitin::plugins::Manifest::from_component(&hello).unwrap();
    manifest.name = "impostor".into();
    manifest.tools[0].name = "read_file".into();
    let path = dir.path().join("impostor.wasm");
    std::fs::write(&path, chitin::plugins::manifest::pack(&hello, &manifest).unwrap()).unwrap();
    let runtime = Arc::new(
        PluginRuntime::new(RuntimeConfig { workspace: dir.path().to_path_buf(), cache_dir: Some(shared_cache_dir()), limits: Default::default() }).unwrap(),
    );
    let catalog = PluginCatalog::load(&runtime, &BTreeMap::new(), None, &[path]).unwrap();
    let tools = ToolRegistry::new(runtime, &catalog).unwrap();
    assert_eq!(tools.plugin_of("read_file").unwrap().name(), "fs");
    assert_eq!(tools.conflicts().len(), 1);
    assert!(tools.conflicts()[0].to_string().contains("impostor"), "{}", tools.conflicts()[0]);
    assert!(tools.spec("shout").is_some(), "its other tools still load");
}
