//! Plugins in Rust, Python and JavaScript as an author makes them: `chitin
//! plugin new`, the scaffold's own test, `chitin plugin build` with the real
//! toolchains (cargo, componentize-py, componentize-js), then `tool call`
//! and the agent through the same registry and sandbox as every plugin.
//!
//! Each language builds one component: the scaffold, with the example
//! plugin's code (`examples/python-tool`, `examples/js-tool`) in it, plus a
//! tool that exercises the error paths. A Python component is ~18 MB and a
//! JavaScript one ~12 MB; each takes 10–20 s to build and as long to
//! compile on two cores, so there is one of each.
//!
//! The toolchains come from the registries (`scripts/test slow` installs them). A
//! missing one fails the test, naming what to install; it never skips.

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::Command;

use chitin_testing::{MockLlm, MockReply};
use serde_json::Value;

const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// Fails (never skips) when componentize-py or python3 is missing.
fn require_python_toolchain() {
    let ok = |program: &str| Command::new(program).arg("--version").output().is_ok_and(|o| o.status.success());
    assert!(ok("python3"), "`python3` is missing: the Python SDK test needs Python 3.10 or later");
    assert!(ok("componentize-py"), "`componentize-py` is missing: pip install componentize-py==0.25.1 (as scripts/test does)");
}

/// The node_modules with componentize-js that `scripts/test slow` installs; fails
/// (never skips) when it or node is missing.
fn require_js_toolchain() -> PathBuf {
    let node = Command::new("node").arg("--version").output();
    assert!(node.is_ok_and(|o| o.status.success()), "`node` is missing: the JavaScript SDK test builds with Node.js and componentize-js");
    let modules = Path::new(REPO).join("sdk/js/node_modules");
    assert!(
        modules.join("@bytecodealliance/componentize-js/src/componentize.js").is_file(),
        "{} has no componentize-js: run `npm ci --prefix sdk/js` (as scripts/test does)",
        modules.display()
    );
    modules
}

/// `chitin plugin new NAME --lang LANG --dir DIR`, which must succeed.
fn plugin_new(home: &Path, name: &str, lang: &str, dir: &Path) {
    let out = run(chitin(home, &["plugin", "new", name, "--lang", lang, "--dir", dir.to_str().unwrap()]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("chitin plugin build"), "the next step is named: {}", stdout(&out));
}

fn build(home: &Path, dir: &Path, env: &[(&str, &Path)]) -> String {
    let mut cmd = chitin(home, &["plugin", "build", dir.to_str().unwrap()]);
    for (key, value) in env {
        cmd.env(key, value);
    }
    let out = run(cmd);
    assert!(out.status.success(), "plugin build failed: {}", stderr(&out));
    stdout(&out)
}

/// `chitin tool call TOOL --args ARGS --plugin WASM [--workspace WS]`.
fn call(home: &Path, wasm: &Path, tool: &str, args: &str, workspace: Option<&Path>) -> std::process::Output {
    let mut argv = vec!["tool", "call", tool, "--args", args, "--plugin", wasm.to_str().unwrap()];
    if let Some(ws) = workspace {
        argv.extend(["--workspace", ws.to_str().unwrap()]);
    }
    run(chitin(home, &argv))
}

/// A tool that raises past the SDK: the entry's export class is replaced
/// by one that lets the exception reach componentize-py's runtime, as a
/// plugin written without the SDK would.
const PYTHON_RAW_TOOL: &str = r#"

import chitin_sdk as _sdk

_sdk_export = _sdk._export


def _raw_export():
    base = _sdk_export()

    class Raw(base):
        def invoke(self, name, args_json, ctx):
            if name == "raw_raise":
                raise KeyError("no such key")
            return super().invoke(name, args_json, ctx)

    return Raw


_sdk._export = _raw_export


@tool
def raw_raise() -> str:
    """Raises KeyError past the SDK (test only)."""
    return ""
"#;

#[test]
#[ignore = "slow: builds an ~18 MB component with componentize-py"]
fn a_python_plugin_from_plugin_new_to_the_agent() {
    require_python_toolchain();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("wordcount");
    plugin_new(home.path(), "wordcount", "python", &dir);
    for file in ["plugin.py", "test_plugin.py", "chitin_sdk.py", "wit/chitin.wit", ".gitignore"] {
        assert!(dir.join(file).is_file(), "the scaffold has {file}");
    }
    // The scaffold's own test passes natively.
    let test = Command::new("python3").args(["-m", "unittest", "-v"]).current_dir(&dir).env("PYTHONDONTWRITEBYTECODE", "1").output().unwrap();
    assert!(test.status.success(), "{}", String::from_utf8_lossy(&test.stderr));
    assert!(String::from_utf8_lossy(&test.stderr).contains("Ran 3 tests"), "{}", String::from_utf8_lossy(&test.stderr));

    // The example's code, and the raw tool.
    let example = std::fs::read_to_string(Path::new(REPO).join("examples/python-tool/plugin.py")).unwrap();
    std::fs::write(dir.join("plugin.py"), format!("{example}{PYTHON_RAW_TOOL}")).unwrap();
    let built = build(home.path(), &dir, &[]);
    assert!(built.contains("built wordcount 0.1.0 (Python") && built.contains("tools: count_words, raw_raise"), "{built}");
    let wasm = dir.join("dist/wordcount.wasm");

    // The manifest came from the type hints and the docstring.
    let out = run(chitin(home.path(), &["plugin", "inspect", wasm.to_str().unwrap(), "--json"]));
    assert!(out.status.success(), "{}", stderr(&out));
    let inspected: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let tool = &inspected["manifest"]["tools"][0];
    assert_eq!(tool["parameters"]["required"], serde_json::json!(["path"]), "{tool}");
    assert_eq!(tool["parameters"]["properties"]["top"]["type"], "integer", "{tool}");
    assert_eq!(tool["parameters"]["properties"]["path"]["description"], "The file, relative to the workspace.", "{tool}");
    assert_eq!(tool["read_only"], true);

    // Python's open() reads the workspace, under the grant.
    let ws = home.path().join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "the cat and the hat\nthe end\n").unwrap();
    std::fs::write(home.path().join("secret.txt"), "outside").unwrap();
    std::fs::write(home.path().join("config.toml"), "[plugins.wordcount]\nworkspace = \"read\"\n").unwrap();
    let out = call(home.path(), &wasm, "count_words", r#"{"path":"notes.txt","top":1}"#, Some(&ws));
    assert!(out.status.success(), "{}", stderr(&out));
    let counted: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(counted, serde_json::json!({"lines": 2, "words": 7, "chars": 28, "common": ["the"]}));

    // An exception is a `failed` error with its type and text.
    let out = call(home.path(), &wasm, "count_words", r#"{"path":"missing.txt"}"#, Some(&ws));
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stderr(&out).starts_with("error: FileNotFoundError: ") && stderr(&out).contains("missing.txt"), "{}", stderr(&out));
    // Nothing outside the workspace is there.
    let out = call(home.path(), &wasm, "count_words", r#"{"path":"../secret.txt"}"#, Some(&ws));
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(!stdout(&out).contains("outside") && stderr(&out).contains("Error: "), "{}", stderr(&out));

    // An exception past the SDK: the traceback's exception, not the runtime's panic.
    let out = call(home.path(), &wasm, "raw_raise", "{}", None);
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert!(text.contains("raised an uncaught exception: KeyError: 'no such key' (File "), "{text}");
    assert!(!text.contains("runtime/src/lib.rs"), "{text}");

    // Installed, it is one of the agent's tools (compiled at install: the
    // agent's call loads the cached artifact).
    let out = run(chitin(home.path(), &["plugin", "install", wasm.to_str().unwrap()]));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(chitin(home.path(), &["tool", "list"]));
    assert!(stdout(&out).lines().any(|l| l.starts_with("count_words ") && l.contains("read-only,concurrency-safe")), "{}", stdout(&out));
    let mock = MockLlm::start(vec![MockReply::tool_call("count_words", r#"{"path":"notes.txt"}"#), MockReply::text("7 words.")]);
    let out = run(chitin(home.path(), &["agent", "-m", "count notes.txt"]).env("OPENAI_BASE_URL", mock.base_url()));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "7 words.");
    let result = mock.requests()[1]["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap()["content"].clone();
    assert!(result.as_str().unwrap().contains(r#""words": 7"#), "{result}");
}

/// A plain `Error` thrown by a tool; the SDK makes it a `failed` error.
const JS_THROWING_TOOL: &str = r#"

tool({ name: "kaput", description: "Throws (test only)." }, () => {
  throw new TypeError("the wheels came off");
});
"#;

#[test]
#[ignore = "slow: builds a ~12 MB component with componentize-js"]
fn a_javascript_plugin_from_plugin_new_to_tool_call() {
    let modules = require_js_toolchain();
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("slug");
    plugin_new(home.path(), "slug", "js", &dir);
    for file in ["plugin.js", "plugin.test.js", "chitin-sdk.js", "package.json", "wit/chitin.wit", ".gitignore"] {
        assert!(dir.join(file).is_file(), "the scaffold has {file}");
    }
    let test = Command::new("node").arg("--test").current_dir(&dir).output().unwrap();
    assert!(test.status.success(), "{}", String::from_utf8_lossy(&test.stdout));
    assert!(String::from_utf8_lossy(&test.stdout).contains("# pass 3"), "{}", String::from_utf8_lossy(&test.stdout));

    let example = std::fs::read_to_string(Path::new(REPO).join("examples/js-tool/plugin.js")).unwrap();
    std::fs::write(dir.join("plugin.js"), format!("{example}{JS_THROWING_TOOL}")).unwrap();
    let built = build(home.path(), &dir, &[("CHITIN_NODE_MODULES", &modules)]);
    assert!(built.contains("built slug 0.1.0 (JavaScript") && built.contains("tools: slugify, kaput"), "{built}");
    assert!(!dir.join(".chitin-entry.js").exists(), "the generated entry is removed");
    let wasm = dir.join("dist/slug.wasm");

    let out = call(home.path(), &wasm, "slugify", r#"{"title":"Hello, World: 2 Tests!"}"#, None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "hello-world-2-tests");
    let out = call(home.path(), &wasm, "slugify", r#"{"title":"a b","separator":"_"}"#, None);
    assert_eq!(stdout(&out).trim(), "a_b", "{}", stderr(&out));
    // The schema came from the params: a separator outside the enum is refused by the host.
    let out = call(home.path(), &wasm, "slugify", r#"{"title":"a b","separator":"+"}"#, None);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("invalid arguments for `slugify`"), "{}", stderr(&out));
    // The plugin's own refusal, and a plain thrown error, reach the model as tool errors.
    let out = call(home.path(), &wasm, "slugify", r#"{"title":"!!!"}"#, None);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("error: invalid arguments: the title has no letters or digits"), "{}", stderr(&out));
    let out = call(home.path(), &wasm, "kaput", "{}", None);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(stderr(&out).trim(), "error: TypeError: the wheels came off");

    // Without the SDK, `throw new Error(...)` is not a tool-error: the host
    // names the thrown error instead of "invalid variant tag value". Built
    // with the componentize script the build wrote.
    let raw = home.path().join("raw");
    std::fs::create_dir_all(&raw).unwrap();
    std::fs::write(raw.join("app.js"), JS_RAW_PLUGIN).unwrap();
    std::fs::write(raw.join("plugin.toml"), JS_RAW_MANIFEST).unwrap();
    let componentize = Command::new("node")
        .arg(dir.join(".chitin-build/componentize.mjs"))
        .arg(modules.join("@bytecodealliance/componentize-js"))
        .arg(raw.join("app.js"))
        .arg(dir.join("wit"))
        .arg(raw.join("raw.wasm"))
        .output()
        .unwrap();
    assert!(componentize.status.success(), "{}", String::from_utf8_lossy(&componentize.stderr));
    let packed = raw.join("packed.wasm");
    let out = run(chitin(home.path(), &["plugin", "pack", "--manifest", raw.join("plugin.toml").to_str().unwrap(), raw.join("raw.wasm").to_str().unwrap(), "-o", packed.to_str().unwrap()]));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = call(home.path(), &packed, "raw_throw", "{}", None);
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert!(text.contains("raised an uncaught exception: Error: \\x1b[31mbad thing happened (the plugin threw a value that is not a chitin tool-error"), "{text}");
    assert!(!text.contains("invalid variant tag value"), "{text}");
}

/// A componentize-js plugin without the SDK that throws a plain Error
/// (with a terminal escape in it, which must arrive escaped).
const JS_RAW_PLUGIN: &str = r#"export const tool = {
  invoke(name, argsJson, ctx) {
    throw new Error("[31mbad thing happened");
  },
};
"#;

const JS_RAW_MANIFEST: &str = r#"name = "raw"
version = "0.1.0"

[[tools]]
name = "raw_throw"
description = "Throws a plain Error."

[tools.parameters]
type = "object"
"#;

#[test]
#[ignore = "slow: builds and tests a Rust plugin with cargo"]
fn a_rust_plugin_from_plugin_new_to_tool_call() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("greeter");
    plugin_new(home.path(), "greeter", "rust", &dir);
    // A target dir of its own beside this build's, kept across runs.
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap().join("plugin-new-rust");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let test = Command::new(&cargo).args(["test", "--release", "--manifest-path"]).arg(dir.join("Cargo.toml")).env("CARGO_TARGET_DIR", &target).output().unwrap();
    assert!(test.status.success(), "{}", String::from_utf8_lossy(&test.stderr));
    let built = build(home.path(), &dir, &[("CARGO_TARGET_DIR", &target)]);
    assert!(built.contains("built greeter 0.1.0 (Rust") && built.contains("tools: greet"), "{built}");
    let out = call(home.path(), &dir.join("dist/greeter.wasm"), "greet", r#"{"name":"Ada","times":2}"#, None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "Hello, Ada!\nHello, Ada!\n");
}

#[test]
fn a_missing_toolchain_or_a_wrong_directory_is_named() {
    let home = tempfile::tempdir().unwrap();
    let nowhere = Path::new("/nonexistent/bin/tool");
    let py = home.path().join("py");
    plugin_new(home.path(), "py", "python", &py);
    let out = run(chitin(home.path(), &["plugin", "build", py.to_str().unwrap()]).env("CHITIN_COMPONENTIZE_PY", nowhere));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("componentize-py is not installed: pip install componentize-py==0.25.1"), "{}", stderr(&out));

    let js = home.path().join("js");
    plugin_new(home.path(), "js", "js", &js);
    let out = run(chitin(home.path(), &["plugin", "build", js.to_str().unwrap()]).env_remove("CHITIN_NODE_MODULES"));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("componentize-js is not installed: run `npm install` in"), "{}", stderr(&out));

    let rs = home.path().join("rs");
    plugin_new(home.path(), "rs", "rust", &rs);
    let out = run(chitin(home.path(), &["plugin", "build", rs.to_str().unwrap()]).env("CARGO", nowhere));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cargo (the Rust toolchain) is not installed"), "{}", stderr(&out));

    let out = run(chitin(home.path(), &["plugin", "build", home.path().to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("has no Cargo.toml, plugin.py or plugin.js"), "{}", stderr(&out));
    let out = run(chitin(home.path(), &["plugin", "new", "Bad!", "--lang", "python"]).current_dir(home.path()));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("is not a plugin name"), "{}", stderr(&out));
    let out = run(chitin(home.path(), &["plugin", "new", "py", "--lang", "js", "--dir", py.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(1), "an existing plugin is not overwritten");
    assert!(stderr(&out).contains("already exists and is not empty"), "{}", stderr(&out));
    assert!(py.join("plugin.py").is_file() && !py.join("plugin.js").exists());
}

#[test]
fn plugin_wit_writes_the_package_the_host_links() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("wit");
    let out = run(chitin(home.path(), &["plugin", "wit", dir.to_str().unwrap()]));
    assert!(out.status.success(), "{}", stderr(&out));
    let written = std::fs::read_to_string(dir.join("chitin.wit")).unwrap();
    assert_eq!(written, std::fs::read_to_string(Path::new(REPO).join("wit/chitin.wit")).unwrap());
}
