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

/// A `ToolSource` whose list the test changes, as an MCP server's
/// `tools/list_changed` would.
struct Changing {
    generation: std::sync::atomic::AtomicU64,
    tools: std::sync::Mutex<Vec<chitin::plugins::ToolSpec>>,
    calls: std::sync::Mutex<Vec<(String, serde_json::Value)>>,
}

impl Changing {
    fn new(names: &[&str]) -> Arc<Changing> {
        let source = Arc::new(Changing { generation: 0.into(), tools: Default::default(), calls: Default::default() });
        source.set(names);
        source
    }

    fn set(&self, names: &[&str]) {
        *self.tools.lock().unwrap() = names
            .iter()
            .map(|n| chitin::plugins::ToolSpec {
                name: n.to_string(),
                description: format!("{n} from outside"),
                parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}),
                read_only: true,
                concurrency_safe: true,
            })
            .collect();
        self.generation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl chitin::tools::ToolSource for Changing {
    fn label(&self) -> &str {
        "mcp:test"
    }
    fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn tools(&self) -> Vec<chitin::plugins::ToolSpec> {
        self.tools.lock().unwrap().clone()
    }
    fn call<'a>(
        &'a self,
        tool: &'a str,
        args: &'a serde_json::Value,
        _ctx: &'a CallContext,
        _progress: Option<chitin::plugins::ProgressSink>,
    ) -> chitin::tools::ToolFuture<'a> {
        Box::pin(async move {
            self.calls.lock().unwrap().push((tool.to_string(), args.clone()));
            Ok(format!("{tool} answered {}", args["q"]))
        })
    }
}

#[tokio::test]
async fn a_source_s_tools_join_validated_and_follow_its_changes() {
    let (plugins, _dir) = registry();
    // `read_file` is a plugin's: the source cannot shadow it.
    let source = Changing::new(&["mcp_test_search", "read_file"]);
    let tools = plugins.with_sources(vec![source.clone()]);
    assert!(tools.spec("mcp_test_search").is_some());
    assert_eq!(tools.owner_of("read_file").as_deref(), Some("plugin fs"), "a plugin's name is never taken over");
    assert!(tools.conflicts().iter().any(|c| c.to_string().contains("mcp:test (left out)")), "the clash is reported");
    assert!(tools.fetches_network("mcp_test_search"), "a source's results count as fetched");

    // Calls are validated against the source's schema before they reach it.
    let err = tools.call("mcp_test_search", &json!({"q": 3, "x": 1}), &CallContext::default(), None).await;
    assert!(err.is_ok(), "3 is cast to \"3\": {err:?}");
    let err = tools.call("mcp_test_search", &json!({}), &CallContext::default(), None).await.unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments { .. }), "{err}");
    assert_eq!(source.calls.lock().unwrap().len(), 1, "the invalid call never reached the source");

    // Unchanged: the same snapshot. Changed: a new one, built once.
    assert!(Arc::ptr_eq(&tools.refreshed().shared_definitions(), &tools.shared_definitions()));
    source.set(&["mcp_test_search", "mcp_test_fetch"]);
    let newer = tools.refreshed();
    assert!(newer.spec("mcp_test_fetch").is_some() && tools.spec("mcp_test_fetch").is_none(), "the old snapshot stays as it was");
    assert!(Arc::ptr_eq(&tools.refreshed().shared_definitions(), &newer.shared_definitions()), "built once per change");

    // A scope (a subagent's) follows changes through its filter.
    let scope = tools.scoped(Arc::new(|name: &str| name != "mcp_test_fetch"));
    source.set(&["mcp_test_search", "mcp_test_fetch", "mcp_test_more"]);
    let scoped_now = scope.refreshed();
    let names: Vec<&str> = scoped_now.names().collect();
    assert!(names.contains(&"mcp_test_more") && !names.contains(&"mcp_test_fetch") && names.contains(&"read_file"), "{names:?}");
    source.set(&[]);
    assert!(tools.refreshed().spec("mcp_test_search").is_none(), "a server's tools leave with it");
}
