//! `#[tool]`: the manifest fragment and the dispatcher.

use chitin_sdk::prelude::*;
use chitin_sdk::serde_json::{self, Value, json};

#[derive(Deserialize, ToolArgs)]
struct GreetArgs {
    /// Who to greet.
    name: String,
    /// How many times.
    #[serde(default)]
    times: Option<u32>,
}

/// Say hello to someone.
///
/// Politely.
#[tool(read_only, concurrency_safe)]
fn greet(args: GreetArgs, ctx: &Context) -> Result<String, ToolError> {
    ctx.progress("greeting");
    ctx.log(LogLevel::Info, "greeting");
    Ok(format!(
        "Hello, {}! x{} ({})",
        args.name,
        args.times.unwrap_or(1),
        ctx.call_id
    ))
}

/// Context first, another name, a JSON result.
#[tool(name = "whoami", read_only = true)]
fn who_am_i(ctx: &Context, args: NoArgs) -> Result<Value, ToolError> {
    let NoArgs {} = args;
    Ok(json!({"session": ctx.session_key, "channel": ctx.channel}))
}

#[derive(Deserialize, ToolArgs)]
struct NoArgs {}

/// No parameters at all; fails with an io error.
#[tool]
fn broken() -> Result<&'static str, std::io::Error> {
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        "nope",
    ))
}

fn manifest(fragment: &str) -> Value {
    serde_json::from_str(fragment).unwrap_or_else(|e| panic!("{e}: {fragment}"))
}

#[test]
fn manifest_fragment() {
    assert_eq!(__chitin_tool_greet::NAME, "greet");
    assert_eq!(
        manifest(__chitin_tool_greet::MANIFEST),
        json!({
            "name": "greet",
            "description": "Say hello to someone.\n\nPolitely.",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Who to greet."},
                    "times": {"type": "integer", "description": "How many times.", "minimum": 0, "maximum": 4294967295u32},
                },
                "required": ["name"],
            },
            "read_only": true,
            "concurrency_safe": true,
        })
    );
    let who = manifest(__chitin_tool_who_am_i::MANIFEST);
    assert_eq!(who["name"], "whoami");
    assert_eq!(who["read_only"], true);
    assert_eq!(who["concurrency_safe"], false);
    let broken = manifest(__chitin_tool_broken::MANIFEST);
    assert_eq!(
        broken["parameters"],
        json!({"type": "object", "properties": {}})
    );
    assert_eq!(
        broken["description"],
        "No parameters at all; fails with an io error."
    );
}

#[test]
fn dispatcher() {
    let ctx = Context::new("cli:1", "cli", "1", "call-7");
    assert_eq!(
        __chitin_tool_greet::call(r#"{"name":"Ada","times":3}"#, &ctx).unwrap(),
        "Hello, Ada! x3 (call-7)"
    );
    match __chitin_tool_greet::call(r#"{"times":3}"#, &ctx) {
        Err(ToolError::InvalidArgs(m)) => assert!(m.contains("missing field `name`"), "{m}"),
        other => panic!("{other:?}"),
    }
    match __chitin_tool_greet::call(r#"{"name":1}"#, &ctx) {
        Err(ToolError::InvalidArgs(m)) => assert!(m.contains("invalid type"), "{m}"),
        other => panic!("{other:?}"),
    }
    let who: Value =
        serde_json::from_str(&__chitin_tool_who_am_i::call("{}", &ctx).unwrap()).unwrap();
    assert_eq!(who, json!({"session": "cli:1", "channel": "cli"}));
    assert_eq!(
        __chitin_tool_broken::call("{}", &ctx),
        Err(ToolError::Denied("nope".into()))
    );
}

mod plugin {
    use super::*;

    #[tool]
    fn first() -> Result<String, ToolError> {
        Ok("1".into())
    }

    // A plugin! in a submodule, naming tools by path.
    plugin! {
        name: "test-plugin_2",
        workspace: "read-write",
        network: ["api.example.com", "127.0.0.1:8080"],
        secrets: [api_key: { audience: "api.example.com", inject: [{ header: "X-Api-Key" }, "path", { query: "key" }] }],
        tools: [super::greet, first, super::who_am_i],
    }

    #[test]
    fn manifest() {
        let m: Value = serde_json::from_str(__CHITIN_MANIFEST).unwrap();
        assert_eq!(m["manifest_version"], 1);
        assert_eq!(m["name"], "test-plugin_2");
        assert_eq!(m["version"], env!("CARGO_PKG_VERSION"));
        // No `description:`: the package's.
        assert_eq!(m["description"], env!("CARGO_PKG_DESCRIPTION"));
        let names: Vec<&str> = m["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["greet", "first", "whoami"]);
        assert_eq!(
            m["capabilities"],
            json!({"workspace": "read-write", "network": ["api.example.com", "127.0.0.1:8080"], "host": []})
        );
        assert_eq!(
            m["secrets"],
            json!([{"name": "api_key", "audience": "api.example.com", "inject": [{"header": "X-Api-Key"}, "path", {"query": "key"}]}])
        );
    }

    #[test]
    fn invoke() {
        let ctx = Context::default();
        assert_eq!(__chitin_invoke("first", "{}", &ctx).unwrap(), "1");
        assert!(__chitin_invoke("whoami", "{}", &ctx).is_ok());
        match __chitin_invoke("second", "{}", &ctx) {
            Err(ToolError::UnknownTool(m)) => {
                assert_eq!(
                    m,
                    "this plugin has no tool `second`; its tools are: greet, first, whoami"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn tool_error_conversions() {
    use std::io::{Error, ErrorKind};
    assert_eq!(ToolError::from("x"), ToolError::Failed("x".into()));
    assert_eq!(ToolError::from(String::from("x")), ToolError::failed("x"));
    assert_eq!(
        ToolError::from(Error::new(ErrorKind::PermissionDenied, "no")),
        ToolError::denied("no")
    );
    assert_eq!(
        ToolError::from(Error::from_raw_os_error(2)),
        ToolError::failed("No such file or directory")
    );
    assert_eq!(
        ToolError::invalid_args("bad").to_string(),
        "invalid arguments: bad"
    );
    assert_eq!(ToolError::unknown_tool("t").to_string(), "unknown tool: t");
    assert_eq!(ToolError::denied("d").to_string(), "denied: d");
    assert_eq!(ToolError::failed("f").to_string(), "f");
    assert_eq!(ToolError::failed("f").message(), "f");
    let json_err = serde_json::from_str::<Value>("{").unwrap_err();
    assert!(matches!(ToolError::from(json_err), ToolError::Failed(_)));
}
