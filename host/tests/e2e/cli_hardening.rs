//! The `chitin` binary against hostile input: plugin- and model-controlled
//! text with terminal escapes, a closed stdout, files that are not plugins,
//! plugins that collide with built-ins or each other, large arguments.

use crate::common::*;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use chitin_testing::{MockLlm, MockReply};
use serde_json::{Value, json};


/// Every control sequence a terminal would obey that the attack suite used:
/// window title (OSC 0), clipboard write (OSC 52), cursor up (CSI), carriage
/// return, an 8-bit CSI (C1), a right-to-left override.
const HOSTILE_TEXT: &str = "ok\x1b]0;owned\x07\x1b]52;c;cGF3bmVk\x07\r\x1b[2A\u{9b}31m\u{202e}txt";
/// The same, as `chitin::text::for_terminal` shows it.
const HOSTILE_SHOWN: &str = "ok\\x1b]0;owned\\x07\\x1b]52;c;cGF3bmVk\\x07\\x0d\\x1b[2A\\x9b31m\\u{202e}txt";

/// No byte a terminal acts on: ESC, BEL, CR, a C1 CSI (raw or UTF-8 encoded),
/// U+202E (UTF-8 `e2 80 ae`).
fn assert_terminal_safe(bytes: &[u8], what: &str) {
    let text = String::from_utf8_lossy(bytes);
    for bad in [0x1b_u8, 0x07, 0x0d, 0x9b] {
        assert!(!bytes.contains(&bad), "{what} holds byte {bad:#04x}: {text:?}");
    }
    assert!(!text.contains('\u{202e}') && !text.contains('\u{9b}'), "{what}: {text:?}");
}

fn write_file(dir: &Path, name: &str, bytes: impl AsRef<[u8]>) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `chitin plugin pack` of `component` with the manifest TOML `toml`.
fn pack(home: &Path, name: &str, toml: &str, component: &str) -> PathBuf {
    let manifest = write_file(home, &format!("{name}.toml"), toml);
    let out_path = home.join(format!("{name}.packed.wasm"));
    let out = run(chitin(home, &["plugin", "pack", "--manifest", manifest.to_str().unwrap(), component, "-o", out_path.to_str().unwrap()]));
    assert!(out.status.success(), "pack {name}: {}", stderr(&out));
    out_path
}

/// A manifest TOML with one tool per name in `tools`.
fn manifest_toml(name: &str, version: &str, tools: &[&str]) -> String {
    let mut toml = format!("name = \"{name}\"\nversion = \"{version}\"\n");
    for tool in tools {
        toml.push_str(&format!("[[tools]]\nname = \"{tool}\"\nparameters = {{ type = \"object\" }}\n"));
    }
    toml
}

fn plugin_files(home: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(home.join("plugins")) else { return Vec::new() };
    let mut names: Vec<String> = entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

// ---------------------------------------------------------------- escapes

#[test]
fn a_tool_error_with_terminal_escapes_is_shown_escaped() {
    let home = tempfile::tempdir().unwrap();
    // `read_path` fails naming its path: the error text is the plugin's.
    let args = json!({ "path": HOSTILE_TEXT }).to_string();
    let out = run(chitin(home.path(), &["tool", "call", "read_path", "--plugin", HOSTILE_WASM, "--args", &args]));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_terminal_safe(&out.stderr, "stderr");
    assert!(stderr(&out).contains(HOSTILE_SHOWN), "{}", stderr(&out));

    // A panic message is the plugin's text too.
    let args = json!({ "message": HOSTILE_TEXT }).to_string();
    let out = run(chitin(home.path(), &["tool", "call", "panic", "--plugin", HOSTILE_WASM, "--args", &args]));
    assert_eq!(out.status.code(), Some(1));
    assert_terminal_safe(&out.stderr, "stderr");
    assert!(stderr(&out).contains("panicked") && stderr(&out).contains("\\x1b]0;owned\\x07"), "{}", stderr(&out));
}

/// The hostile guest's `fail {text, repeat}` returns a `failed` error of
/// `text` repeated; `progress_flood {text, count}` sends `text` as progress.
#[test]
fn a_failed_error_and_progress_lines_with_terminal_escapes_are_shown_escaped() {
    let home = tempfile::tempdir().unwrap();
    let args = json!({ "text": HOSTILE_TEXT, "repeat": 3 }).to_string();
    let out = run(chitin(home.path(), &["tool", "call", "fail", "--plugin", HOSTILE_WASM, "--args", &args]));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert_terminal_safe(&out.stderr, "stderr");
    let text = stderr(&out);
    assert!(text.contains(HOSTILE_SHOWN), "{text}");
    assert!(!text.contains("error: error:"), "one prefix: {text}");

    let args = json!({ "text": HOSTILE_TEXT, "count": 3 }).to_string();
    let out = run(chitin(home.path(), &["tool", "call", "progress_flood", "--plugin", HOSTILE_WASM, "--args", &args]));
    assert_terminal_safe(&out.stderr, "stderr");
    assert!(stderr(&out).contains(&format!("… {HOSTILE_SHOWN}")), "{}", stderr(&out));
}

#[test]
fn a_tool_result_goes_raw_to_a_pipe_and_progress_to_stderr() {
    let home = tempfile::tempdir().unwrap();
    let args = json!({ "text": HOSTILE_TEXT }).to_string();
    let out = run(chitin(home.path(), &["tool", "call", "echo", "--plugin", HOSTILE_WASM, "--args", &args]));
    assert!(out.status.success(), "{}", stderr(&out));
    // stdout is a pipe: the exact bytes the tool returned, plus a newline.
    assert_eq!(out.stdout, format!("{HOSTILE_TEXT}\n").as_bytes());
    assert_eq!(stderr(&out), "… echoing\n");
}

#[test]
fn manifest_text_is_shown_escaped_by_inspect_list_tool_list_and_status() {
    let home = tempfile::tempdir().unwrap();
    // TOML basic strings take \u escapes; pack does not police descriptions.
    let toml = "name = \"sly\"\nversion = \"1.0\\u001b[2A\"\ndescription = \"nice\\u001b]0;owned\\u0007\\u009b\\u202e\"\n[[tools]]\nname = \"sly_tool\"\ndescription = \"does\\r\\u001b]52;c;eA==\\u0007 things\"\nparameters = { type = \"object\", properties = { \"a\\u001bb\" = { type = \"string\" } } }\n";
    let packed = pack(home.path(), "sly", toml, HELLO_WASM);
    let packed = packed.to_str().unwrap();
    let out = run(chitin(home.path(), &["plugin", "inspect", packed]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_terminal_safe(&out.stdout, "inspect");
    assert!(stdout(&out).contains("nice\\x1b]0;owned\\x07\\x9b\\u{202e}") && stdout(&out).contains("a\\x1bb (string)"), "{}", stdout(&out));

    // JSON: still the same value, but no raw C1 or bidi character.
    let out = run(chitin(home.path(), &["plugin", "inspect", packed, "--json"]));
    assert_terminal_safe(&out.stdout, "inspect --json");
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["manifest"]["description"], "nice\x1b]0;owned\x07\u{9b}\u{202e}");

    let out = run(chitin(home.path(), &["plugin", "install", packed]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_terminal_safe(&out.stdout, "install");
    for args in [&["plugin", "list"][..], &["plugin", "list", "--json"], &["tool", "list"], &["status"]] {
        let out = run(chitin(home.path(), args));
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_terminal_safe(&out.stdout, &format!("{args:?} stdout"));
        assert_terminal_safe(&out.stderr, &format!("{args:?} stderr"));
        assert!(stdout(&out).contains("sly"), "{args:?}: {}", stdout(&out));
    }
    let out = run(chitin(home.path(), &["tool", "list"]));
    assert!(stdout(&out).contains("does\\x0d\\x1b]52;c;eA==\\x07 things"), "{}", stdout(&out));
}

#[test]
fn a_load_warning_quoting_a_hostile_manifest_is_escaped() {
    let home = tempfile::tempdir().unwrap();
    // A component whose manifest names itself with escapes: the validation
    // error quotes the name, and the load warning shows that error.
    let manifest = json!({ "manifest_version": 1, "name": "\x1b]0;owned\x07", "version": "1", "tools": [] }).to_string();
    let mut component = wasm_encoder::Component::new();
    component.section(&wasm_encoder::CustomSection { name: "chitin:manifest".into(), data: manifest.as_bytes().into() });
    std::fs::create_dir_all(home.path().join("plugins")).unwrap();
    write_file(&home.path().join("plugins"), "sly.wasm", component.finish());
    let out = run(chitin(home.path(), &["tool", "list"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_terminal_safe(&out.stderr, "stderr");
    let text = stderr(&out);
    assert!(text.contains("warning: skipped installed plugin") && text.contains("sly.wasm") && text.contains("\\x1b]0;owned\\x07"), "{text}");
    assert_eq!(text.matches("sly.wasm").count(), 1, "warned once: {text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_replies_and_tool_hints_are_shown_escaped() {
    // Raw control characters in the arguments string (not JSON escapes):
    // the hint prints what the model sent, before any repair.
    let hostile_args = format!("{{\"path\":\"{HOSTILE_TEXT}\"}}");
    let mock = MockLlm::start(vec![MockReply::tool_call("list_dir", hostile_args), MockReply::text(format!("done {HOSTILE_TEXT}"))]);
    let home = tempfile::tempdir().unwrap();
    // stderr is a pipe here: hints are shown only when asked for.
    let out = run(chitin(home.path(), &["agent", "-m", "list", "--progress"]).env("OPENAI_BASE_URL", mock.base_url()));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_terminal_safe(&out.stdout, "reply");
    assert_terminal_safe(&out.stderr, "hints");
    assert_eq!(stdout(&out).trim_end(), format!("done {HOSTILE_SHOWN}"));
    // The hint shows the model's arguments (escaped), on one line.
    let hint = stderr(&out).lines().find(|l| l.contains("↳ list_dir(")).map(str::to_string);
    let hint = hint.unwrap_or_else(|| panic!("no tool hint: {}", stderr(&out)));
    assert!(hint.contains("\\x1b]0;owned\\x07"), "{hint}");
}

/// Plugin progress through the agent: the hostile guest's `progress_flood`
/// sends 500 texts of 5 KB with terminal controls; `chitin agent
/// --progress` shows one of them, cut to a line and escaped, and the note
/// of how many were dropped, on stderr; stdout has only the reply.
/// Without `--progress` (stderr not a terminal) neither hints nor progress.
#[tokio::test(flavor = "multi_thread")]
async fn agent_shows_plugin_progress_on_stderr_escaped_and_budgeted() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), "[plugins.hostile]\nworkspace = \"read\"\n").unwrap();
    let out = run(chitin(home.path(), &["plugin", "install", HOSTILE_WASM]));
    assert!(out.status.success(), "{}", stderr(&out));
    let flood = json!({"text": format!("{HOSTILE_TEXT}{}", "x".repeat(5000)), "count": 500}).to_string();
    let script = || vec![MockReply::tool_call("progress_flood", flood.clone()), MockReply::text("flooded")];

    let mock = MockLlm::start(script());
    let out = run(chitin(home.path(), &["agent", "-m", "flood", "--progress"]).env("OPENAI_BASE_URL", mock.base_url()));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim_end(), "flooded");
    assert_terminal_safe(&out.stderr, "progress");
    let text = stderr(&out);
    let progress: Vec<&str> = text.lines().filter(|l| l.contains("… progress_flood: ")).collect();
    assert_eq!(progress.len(), 2, "one text and the dropped note: {text}");
    assert!(progress[0].contains(&format!("progress_flood: {HOSTILE_SHOWN}xxx")), "{}", progress[0]);
    assert!(progress[0].len() < 1300, "cut to a line: {} bytes", progress[0].len());
    assert!(progress[1].ends_with("[progress cut: 499 updates dropped]"), "{}", progress[1]);
    assert!(text.contains("↳ progress_flood("), "the tool start: {text}");

    let mock = MockLlm::start(script());
    let out = run(chitin(home.path(), &["agent", "-m", "flood"]).env("OPENAI_BASE_URL", mock.base_url()));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim_end(), "flooded");
    assert!(!stderr(&out).contains("progress_flood"), "quiet without --progress: {}", stderr(&out));
}

// ---------------------------------------------------------------- broken pipe

/// Spawns `cmd` with stdout piped, reads one line, closes the pipe, and
/// returns the exit status and stderr.
fn read_one_line_then_close(mut cmd: Command) -> (std::process::ExitStatus, String) {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut reader = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert!(!line.is_empty(), "one line of output");
    drop(reader);
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    (child.wait().unwrap(), err)
}

#[test]
fn output_into_a_pipe_closed_early_ends_quietly_with_exit_0() {
    let home = tempfile::tempdir().unwrap();
    // More output than a pipe buffers (64 KiB), so the write after the
    // reader is gone really fails with EPIPE.
    let description: Vec<String> = (0..400).map(|i| format!("line {i} {}", "x".repeat(400))).collect();
    let toml = format!("name = \"wordy\"\nversion = \"1\"\ndescription = \"\"\"\n{}\"\"\"\n[[tools]]\nname = \"wordy\"\nparameters = {{ type = \"object\" }}\n", description.join("\n"));
    let wordy = pack(home.path(), "wordy", &toml, HELLO_WASM);
    let (status, err) = read_one_line_then_close(chitin(home.path(), &["plugin", "inspect", wordy.to_str().unwrap()]));
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked") && err.is_empty(), "{err}");

    let args = json!({ "bytes": 1_000_000 }).to_string();
    let (status, err) = read_one_line_then_close(chitin(home.path(), &["tool", "call", "big_output", "--plugin", HOSTILE_WASM, "--args", &args]));
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn every_listing_into_an_already_closed_pipe_exits_0_without_a_panic() {
    let home = tempfile::tempdir().unwrap();
    let listings: &[&[&str]] = &[&["plugin", "inspect", "fs"], &["plugin", "inspect", "fs", "--json"], &["plugin", "list"], &["plugin", "list", "--json"], &["tool", "list"], &["status"], &["tool", "call", "list_dir"]];
    for args in listings {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader); // every write to stdout fails with EPIPE
        let out = chitin(home.path(), args).stdout(writer).stderr(Stdio::piped()).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains("panicked"), "{args:?}: {}", stderr(&out));
    }
}

// ---------------------------------------------------------------- not a plugin

/// Runs `plugin inspect`, `plugin install` and `tool call --plugin` on
/// `file`: each fails with one line naming the file and saying `expected`.
fn assert_one_clear_line(home: &Path, file: &Path, expected: &str) {
    let file_arg = file.to_str().unwrap();
    for args in [vec!["plugin", "inspect", file_arg], vec!["plugin", "install", file_arg], vec!["tool", "call", "greet", "--plugin", file_arg]] {
        let out = run(chitin(home, &args));
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        let text = stderr(&out);
        assert_eq!(text.lines().count(), 1, "{args:?}: one line: {text}");
        assert!(text.starts_with("error: ") && text.contains(file_arg) && text.contains(expected), "{args:?}: {text}");
        assert_eq!(text.matches(expected).count(), 1, "{args:?}: said once: {text}");
        assert!(!text.contains("0x0,") && !text.contains("expected=["), "{args:?}: no byte arrays: {text}");
    }
    assert!(plugin_files(home).is_empty(), "nothing installed");
}

#[test]
fn a_file_that_is_not_a_plugin_is_one_clear_line() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path();
    let text = write_file(dir, "notes.wasm", "# chitin notes\n");
    assert_one_clear_line(dir, &text, "not a WebAssembly component: not a valid WebAssembly binary (it starts with bytes 23 20 63 68; expected \\0asm)");
    let random: Vec<u8> = (0..256u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8 | 0x80).collect();
    let random = write_file(dir, "random.wasm", random);
    assert_one_clear_line(dir, &random, "not a valid WebAssembly binary (it starts with bytes");
    let core = write_file(dir, "core.wasm", b"\0asm\x01\0\0\0");
    assert_one_clear_line(dir, &core, "a core WebAssembly module, not a component");
    let hello = std::fs::read(HELLO_WASM).unwrap();
    let truncated = write_file(dir, "truncated.wasm", &hello[..hello.len() / 2]);
    assert_one_clear_line(dir, &truncated, "truncated or corrupt");
    let empty = write_file(dir, "empty.wasm", b"");
    assert_one_clear_line(dir, &empty, "the file is empty");
    let bare = write_file(dir, "bare.wasm", wasm_encoder::Component::new().finish());
    assert_one_clear_line(dir, &bare, "embed a manifest with `chitin plugin pack`");
    let missing = dir.join("missing.wasm");
    assert_one_clear_line(dir, &missing, "No such file");
}

#[test]
fn a_bad_manifest_field_is_said_once() {
    let home = tempfile::tempdir().unwrap();
    let bad = write_file(home.path(), "bad.toml", "name = \"Bad Name\"\nversion = \"1\"\n[[tools]]\nname = \"t\"\nparameters = { type = \"object\" }\n");
    let out = run(chitin(home.path(), &["plugin", "pack", "--manifest", bad.to_str().unwrap(), HELLO_WASM, "-o", "/dev/null"]));
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert_eq!(text.matches("invalid plugin manifest").count(), 1, "{text}");
    assert!(text.contains("bad.toml") && text.contains("`Bad Name` must start with a letter"), "{text}");
}

// ---------------------------------------------------------------- --args

#[test]
fn tool_call_args_from_a_file_or_stdin() {
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let ws_arg = ws.to_str().unwrap();
    // A megabyte of content, too much for a comfortable argv.
    let content = "0123456789abcdef\n".repeat(64 * 1024);
    let args_file = write_file(home.path(), "args.json", json!({ "path": "big.txt", "content": content }).to_string());
    let at = format!("@{}", args_file.display());
    let out = run(chitin(home.path(), &["tool", "call", "write_file", "--args", &at, "--workspace", ws_arg]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(ws.join("big.txt")).unwrap(), content);

    let mut child = chitin(home.path(), &["tool", "call", "write_file", "--args", "-", "--workspace", ws_arg])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(json!({ "path": "stdin.txt", "content": "from stdin" }).to_string().as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(ws.join("stdin.txt")).unwrap(), "from stdin");

    let missing = home.path().join("no-such-args.json");
    let out = run(chitin(home.path(), &["tool", "call", "write_file", "--args", &format!("@{}", missing.display())]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no-such-args.json") && stderr(&out).contains("No such file"), "{}", stderr(&out));

    let broken = write_file(home.path(), "broken.json", "{\"path\": ");
    let out = run(chitin(home.path(), &["tool", "call", "write_file", "--args", &format!("@{}", broken.display())]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("broken.json") && stderr(&out).contains("not hold valid JSON"), "{}", stderr(&out));

    let out = run(chitin(home.path(), &["tool", "call", "write_file", "--args", "{nope"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--args is not valid JSON"), "{}", stderr(&out));
}

// ---------------------------------------------------------------- install

#[test]
fn install_refuses_a_builtin_name_and_colliding_tools_writing_nothing() {
    let home = tempfile::tempdir().unwrap();
    let named_fs = pack(home.path(), "fs", &manifest_toml("fs", "1.0.0", &["greet"]), HELLO_WASM);
    let out = run(chitin(home.path(), &["plugin", "install", named_fs.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("`fs` is the name of a built-in plugin"), "{}", stderr(&out));
    assert!(plugin_files(home.path()).is_empty(), "{:?}", plugin_files(home.path()));

    let shadow = pack(home.path(), "shadow", &manifest_toml("shadow", "1.0.0", &["read_file", "greet"]), HELLO_WASM);
    let out = run(chitin(home.path(), &["plugin", "install", shadow.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("tool `read_file` is already a tool of the built-in plugin `fs`"), "{}", stderr(&out));
    assert!(plugin_files(home.path()).is_empty());

    // Against another installed plugin.
    let out = run(chitin(home.path(), &["plugin", "install", HELLO_WASM]));
    assert!(out.status.success(), "{}", stderr(&out));
    let greeter = pack(home.path(), "greeter", &manifest_toml("greeter", "1.0.0", &["greet"]), HELLO_WASM);
    let out = run(chitin(home.path(), &["plugin", "install", greeter.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert!(text.contains("tool `greet` is already a tool of the installed plugin `hello`"), "{text}");
    assert_eq!(plugin_files(home.path()), ["hello.wasm"]);
}

#[test]
fn reinstalling_a_plugin_replaces_it_atomically() {
    let home = tempfile::tempdir().unwrap();
    let out = run(chitin(home.path(), &["plugin", "install", HELLO_WASM]));
    assert!(out.status.success(), "{}", stderr(&out));
    // The same plugin name and tools, a new version: an update.
    let hello2 = pack(home.path(), "hello2", &manifest_toml("hello", "2.0.0", &["greet", "shout"]), HELLO_WASM);
    let out = run(chitin(home.path(), &["plugin", "install", hello2.to_str().unwrap()]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(plugin_files(home.path()), ["hello.wasm"], "replaced in place, no temporary file left");
    assert_eq!(std::fs::read(home.path().join("plugins/hello.wasm")).unwrap(), std::fs::read(&hello2).unwrap());
    let out = run(chitin(home.path(), &["plugin", "list"]));
    assert!(stdout(&out).contains("hello        2.0.0"), "{}", stdout(&out));
}

#[test]
fn install_refuses_a_component_that_does_not_link() {
    let home = tempfile::tempdir().unwrap();
    // A component with a valid manifest and nothing else: no `tool` export.
    // It is refused at load, before compiling: the world is read from the
    // component's exports.
    let empty = write_file(home.path(), "empty-component.wasm", wasm_encoder::Component::new().finish());
    let hollow = pack(home.path(), "hollow", &manifest_toml("hollow", "1.0.0", &["nothing"]), empty.to_str().unwrap());
    let out = run(chitin(home.path(), &["plugin", "install", hollow.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert!(text.contains("hollow") && text.contains("exports none of `chitin:plugin/tool@0.1.0`"), "{text}");
    assert!(plugin_files(home.path()).is_empty());
}

// ---------------------------------------------------------------- load

#[test]
fn bad_installed_files_are_skipped_and_every_command_still_works() {
    let home = tempfile::tempdir().unwrap();
    let plugins = home.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    // Planted by hand, past `install`'s checks.
    let named_fs = pack(home.path(), "fs", &manifest_toml("fs", "6.6.6", &["greet"]), HELLO_WASM);
    std::fs::copy(&named_fs, plugins.join("fs.wasm")).unwrap();
    std::fs::copy(HELLO_WASM, plugins.join("hello.wasm")).unwrap();
    std::fs::copy(HELLO_WASM, plugins.join("hello-copy.wasm")).unwrap();
    write_file(&plugins, "junk.wasm", "not a component");
    std::fs::create_dir(plugins.join("dir.wasm")).unwrap(); // cannot be read as a file
    let ws = home.path().join("ws");

    let out = run(chitin(home.path(), &["tool", "call", "write_file", "--args", r#"{"path":"a.txt","content":"ok"}"#, "--workspace", ws.to_str().unwrap()]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "ok", "fs is the built-in, not the planted one");
    let text = stderr(&out);
    for needle in ["fs.wasm is named `fs`, the name of a built-in plugin", "two plugins are named `hello`", "junk.wasm: not a WebAssembly component", "dir.wasm"] {
        assert_eq!(text.matches(needle).count(), 1, "warned once about {needle}: {text}");
    }

    let out = run(chitin(home.path(), &["tool", "call", "greet", "--args", r#"{"name":"Ada"}"#]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("Ada"));

    let out = run(chitin(home.path(), &["tool", "list"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("read_file        fs") && stdout(&out).contains("greet            hello"), "{}", stdout(&out));

    for args in [&["plugin", "list"][..], &["status"]] {
        let out = run(chitin(home.path(), args));
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let text = stdout(&out);
        assert!(text.contains("skipped installed plugin") && text.contains("fs.wasm is named `fs`") && text.contains("junk.wasm") && text.contains("dir.wasm"), "{args:?}: {text}");
        assert!(!text.contains("6.6.6"), "{args:?}: the planted fs is not loaded: {text}");
        assert!(!stderr(&out).contains("warning"), "{args:?}: shown once, in the listing: {}", stderr(&out));
    }
    let out = run(chitin(home.path(), &["plugin", "list", "--json"]));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|p| p["manifest"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["agent", "fs", "hello", "telegram"]);

    // Named on the command line, the same clash is an error.
    let out = run(chitin(home.path(), &["tool", "call", "greet", "--args", "{}", "--plugin", named_fs.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("the name of a built-in plugin"), "{}", stderr(&out));
}
