//! Attacks on the host through the real `chitin` binary: a hostile plugin
//! (`tests/guests/hostile`, built by host/build.rs) or a hostile workspace
//! against host code that acts on what a plugin can write. Each test checks
//! the refusal, the message, that nothing outside changed, and that the next
//! call works.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

use chitin_testing::{MockLlm, MockReply};
use serde_json::json;


fn mkfifo(path: &Path) {
    let status = Command::new("mkfifo").arg(path).status().expect("mkfifo runs");
    assert!(status.success());
}

#[test]
fn a_workspace_overlapping_the_data_dir_is_refused_however_it_is_spelled() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let config = "[plugins.hostile]\nworkspace = \"read-write\"\n";
    std::fs::write(home.join("config.toml"), config).unwrap();
    std::os::unix::fs::symlink(&home, tmp.path().join("link")).unwrap();
    let attack = json!({"path": "config.toml", "content": "[plugins.hostile]\nnetwork = [\"*\"]\n"}).to_string();
    let spellings = [
        home.display().to_string(),
        format!("{}/.", home.display()),
        format!("{}/workspace/..", home.display()),
        tmp.path().join("link").display().to_string(),
        tmp.path().display().to_string(),
        home.join("cache").display().to_string(),
    ];
    for ws in &spellings {
        let out = run(chitin(&home, &["tool", "call", "write_path", "--args", &attack, "--plugin", HOSTILE_WASM, "--workspace", ws]));
        assert_eq!(out.status.code(), Some(1), "{ws}: {}", stdout(&out));
        assert!(stderr(&out).contains("overlaps"), "{ws}: {}", stderr(&out));
        assert_eq!(std::fs::read_to_string(home.join("config.toml")).unwrap(), config, "{ws}: the config was rewritten");
    }
    // The same through config.toml's `workspace`.
    std::fs::write(home.join("config.toml"), format!("workspace = \"{}\"\n{config}", home.display())).unwrap();
    let out = run(chitin(&home, &["tool", "call", "write_path", "--args", &attack, "--plugin", HOSTILE_WASM]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("overlaps"), "{}", stderr(&out));

    // A workspace beside the data dir works.
    std::fs::write(home.join("config.toml"), config).unwrap();
    let ws = tmp.path().join("ws");
    let out = run(chitin(&home, &["tool", "call", "write_path", "--args", r#"{"path":"ok.txt","content":"ok"}"#, "--plugin", HOSTILE_WASM, "--workspace", ws.to_str().unwrap()]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(ws.join("ok.txt")).unwrap(), "ok");
}

#[test]
fn a_cache_entry_the_host_did_not_write_is_never_loaded() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("note.txt"), "the real read_file ran\n").unwrap();
    let read = |home: &Path| run(chitin(home, &["tool", "call", "read_file", "--args", r#"{"path":"note.txt"}"#, "--workspace", ws.to_str().unwrap()]));
    let out = read(&home);
    assert!(out.status.success(), "{}", stderr(&out));
    let entries: Vec<_> = std::fs::read_dir(home.join("cache/components")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    let entry = &entries[0];

    // What the attack planted: a valid serialized component for this very
    // engine (made by chitin's own compile child), in place of fs's entry.
    let mut compile = Command::new(CHITIN)
        .arg(chitin::plugins::compile::CHILD_ARG)
        .stdin(std::fs::File::open(HOSTILE_WASM).unwrap())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut artifact = Vec::new();
    std::io::Read::read_to_end(compile.stdout.as_mut().unwrap(), &mut artifact).unwrap();
    assert!(compile.wait().unwrap().success());
    // Planted bare, and with a trailer in the entry format whose keyed hash
    // is made without the host's key.
    let mut forged = artifact.clone();
    forged.extend_from_slice(b"chitinc2");
    forged.extend_from_slice(blake3::hash(&artifact).as_bytes());
    for planted in [artifact, forged] {
        std::fs::write(entry, &planted).unwrap();
        let out = read(&home);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains("the real read_file ran"), "{}", stdout(&out));
        assert!(stderr(&out).is_empty() || !stderr(&out).contains("hostile"), "{}", stderr(&out));
        let rewritten = std::fs::read(entry).unwrap();
        assert_ne!(rewritten, planted, "the host rewrote its own entry");
        assert_eq!(&rewritten[rewritten.len() - 40..rewritten.len() - 32], b"chitinc2");
    }
}

#[test]
fn a_fifo_in_the_workspace_hangs_neither_a_call_nor_the_process() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(home.join("config.toml"), "[plugins.hostile]\nworkspace = \"read\"\n[limits]\ntimeout_ms = 2000\n").unwrap();
    mkfifo(&ws.join("pipe"));
    let ws_arg = ws.to_str().unwrap();

    // The plugin opens it: refused at open-at, at once.
    let started = Instant::now();
    let out = run_within(
        &mut chitin(&home, &["tool", "call", "read_path", "--args", r#"{"path":"pipe"}"#, "--plugin", HOSTILE_WASM, "--workspace", ws_arg]),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(!stderr(&out).contains("stopped after"), "the call must not wait for its deadline: {}", stderr(&out));
    eprintln!("FIFO refusal took {:?}", started.elapsed());
    // The built-in fs plugin too.
    let out = run_within(&mut chitin(&home, &["tool", "call", "read_file", "--args", r#"{"path":"pipe"}"#, "--workspace", ws_arg]), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));

    // The host's own reads: a FIFO as AGENTS.md, memory and archive, through
    // a whole agent turn in which the plugin also tries the FIFO.
    mkfifo(&ws.join("AGENTS.md"));
    std::fs::create_dir_all(ws.join("memory")).unwrap();
    mkfifo(&ws.join("memory/MEMORY.md"));
    mkfifo(&ws.join("memory/history.jsonl"));
    let mock = MockLlm::start(vec![MockReply::tool_call("read_path", r#"{"path":"pipe"}"#), MockReply::text("done despite the pipe")]);
    std::fs::write(
        home.join("config.toml"),
        format!("workspace = \"{ws_arg}\"\n[plugins.hostile]\nworkspace = \"read\"\n[limits]\ntimeout_ms = 2000\n[agent]\nstream = false\n"),
    )
    .unwrap();
    std::fs::create_dir_all(home.join("plugins")).unwrap();
    std::fs::copy(HOSTILE_WASM, home.join("plugins/hostile.wasm")).unwrap();
    let mut cmd = chitin(&home, &["agent", "-m", "read the pipe"]);
    cmd.env("OPENAI_BASE_URL", mock.base_url());
    let out = run_within(&mut cmd, Duration::from_secs(30));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "done despite the pipe");
    let requests = mock.requests();
    let tool_result = requests[1]["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap().to_string();
    assert!(!tool_result.contains("stopped after"), "{tool_result}");
}

#[test]
fn a_compile_bomb_is_stopped_in_the_compile_child_and_the_host_carries_on() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = tmp.path().join("ws");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    // 8 s: the fs component (2.7 MB with its PDF and DOCX parsers) needs
    // about 2 s of CPU to compile; the bomb needs about two minutes.
    std::fs::write(home.join("config.toml"), "[limits]\ncompile_cpu_secs = 8\ntimeout_ms = 1000\n").unwrap();
    let ws_arg = ws.to_str().unwrap();
    let (locals, depth) = chitin_testing::bomb::BOMB_HUGE;
    let bomb = tmp.path().join("bomb.wasm");
    std::fs::write(&bomb, chitin_testing::bomb::compile_bomb(locals, depth)).unwrap();

    let started = Instant::now();
    let out = run_within(&mut chitin(&home, &["tool", "call", "boom", "--plugin", bomb.to_str().unwrap(), "--workspace", ws_arg]), Duration::from_secs(60));
    eprintln!("bomb stopped after {:?}", started.elapsed());
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(stderr(&out).contains("more than 8 s of CPU") && stderr(&out).contains("compile_cpu_secs"), "{}", stderr(&out));
    // Nothing of it was cached; the other plugins work in the same setup.
    let cached = std::fs::read_dir(home.join("cache/components")).map(|d| d.count()).unwrap_or(0);
    let out = run(chitin(&home, &["tool", "call", "list_dir", "--args", "{}", "--plugin", bomb.to_str().unwrap(), "--workspace", ws_arg]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_dir(home.join("cache/components")).unwrap().count(), cached + 1, "only fs was cached");

    // Past the locals cap it is refused before any compiling.
    std::fs::write(&bomb, chitin_testing::bomb::compile_bomb(chitin::plugins::compile::MAX_FUNCTION_LOCALS + 1, 2)).unwrap();
    let out = run_within(&mut chitin(&home, &["tool", "call", "boom", "--plugin", bomb.to_str().unwrap(), "--workspace", ws_arg]), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("plugin bomb is refused: function 1 declares 5001 locals (at most 5000)"), "{}", stderr(&out));
}

/// A home whose config grants the installed hostile guest `workspace`
/// read-write over `ws`, plus `extra` config lines.
fn hostile_home(tmp: &Path, ws: &Path, extra: &str) -> std::path::PathBuf {
    let home = tmp.join("home");
    std::fs::create_dir_all(home.join("plugins")).unwrap();
    std::fs::create_dir_all(ws).unwrap();
    std::fs::copy(HOSTILE_WASM, home.join("plugins/hostile.wasm")).unwrap();
    let config = format!("workspace = \"{}\"\n[plugins.hostile]\nworkspace = \"read-write\"\n{extra}", ws.display());
    std::fs::write(home.join("config.toml"), config).unwrap();
    home
}

#[tokio::test(flavor = "multi_thread")]
async fn symlinks_a_plugin_plants_are_never_followed_by_the_agent() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(outside.join("spill")).unwrap();
    std::fs::write(outside.join("secret.txt"), "OUTSIDE-SECRET").unwrap();
    let home = hostile_home(tmp.path(), &ws, "[agent]\nstream = false\nmax_tool_result_chars = 100\n");
    let session_dir = format!(".chitin/tool-results/{}", chitin::session::encode_key("cli:direct"));
    let mock = MockLlm::start(vec![
        // Turn 1: the plugin plants its links, then a result big enough to be spilled.
        MockReply::tool_call("symlink", json!({"target": "../outside/secret.txt", "link": "AGENTS.md"}).to_string()),
        MockReply::tool_call("symlink", json!({"target": "../outside/secret.txt", "link": "memory/MEMORY.md"}).to_string()),
        MockReply::tool_call("symlink", json!({"target": "../../../outside/spill", "link": session_dir}).to_string()),
        MockReply::tool_call("big_output", json!({"bytes": 5000}).to_string()),
        MockReply::text("planted"),
        // Turn 2: a fresh process builds a system prompt over the planted links.
        MockReply::text("second turn"),
    ]);
    let agent = |message: &str| {
        let mut cmd = chitin(&home, &["agent", "-m", message]);
        cmd.env("OPENAI_BASE_URL", mock.base_url());
        run(cmd)
    };
    let out = agent("plant");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "planted");
    assert!(std::fs::symlink_metadata(ws.join("AGENTS.md")).unwrap().file_type().is_symlink(), "the attack ran");
    let out = agent("again");
    assert!(out.status.success(), "{}", stderr(&out));

    let requests = mock.requests();
    for (i, request) in requests.iter().enumerate() {
        assert!(!request.to_string().contains("OUTSIDE-SECRET"), "request {i} carries the outside file");
    }
    // The oversized result was not written through the planted link; the
    // model got it inline, truncated.
    assert_eq!(std::fs::read_dir(outside.join("spill")).unwrap().count(), 0, "the host wrote outside the workspace");
    let spilled = requests[4]["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap()["content"].as_str().unwrap().to_string();
    assert!(spilled.contains("[truncated: 5000 characters in all]"), "{spilled}");
    assert_eq!(std::fs::read_to_string(outside.join("secret.txt")).unwrap(), "OUTSIDE-SECRET");
}

#[test]
fn onboard_does_not_write_through_a_planted_link() {
    let tmp = tempfile::tempdir().unwrap();
    let home = tmp.path().join("home");
    let ws = home.join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    std::os::unix::fs::symlink("../../outside-agents.md", ws.join("AGENTS.md")).unwrap();
    let out = run(chitin(&home, &["onboard"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!tmp.path().join("outside-agents.md").exists(), "onboard wrote through the link");
    assert!(stderr(&out).contains("AGENTS.md"), "{}", stderr(&out));
    assert!(ws.join("SOUL.md").is_file() && ws.join("skills").is_dir());
}

#[test]
fn an_http_denial_names_the_port_when_another_port_of_the_host_is_granted() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let home = hostile_home(tmp.path(), &ws, "");
    // Nothing listens there: the request must be refused before any connect.
    let url = "http://127.0.0.1:9/x";
    let grant = |network: &str| {
        let config = std::fs::read_to_string(home.join("config.toml")).unwrap();
        let config = config.lines().filter(|l| !l.starts_with("network")).collect::<Vec<_>>().join("\n");
        std::fs::write(home.join("config.toml"), format!("{config}\nnetwork = [{network}]\n")).unwrap();
    };
    grant("\"127.0.0.1:1\"");
    let out = run(chitin(&home, &["tool", "call", "http_get", "--args", &json!({"url": url}).to_string()]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains(r#"add "127.0.0.1:9" to `network` under [plugins.hostile]"#), "{}", stderr(&out));
    grant("\"example.com\"");
    let out = run(chitin(&home, &["tool", "call", "http_get", "--args", &json!({"url": url}).to_string()]));
    assert!(stderr(&out).contains(r#"add "127.0.0.1" to `network` under [plugins.hostile]"#), "{}", stderr(&out));
}

/// Issue 18, point 4: one tool call fires a flood of requests at a host its
/// grant does not name. Every one is refused; the host writes the first few
/// refusals and then one summary line with the count, not a line each.
/// The guest holds its 250 requests for 2 s, within the call's resource
/// bound (`max_resources`), so every refusal is decided while the call
/// lives: a guest that fires without pause until the bound traps it ends
/// the call before the host's tasks have decided more than a few, however
/// fast the machine is.
#[test]
fn a_flood_of_refused_requests_makes_a_bounded_number_of_warning_lines() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), "[plugins.hostile]\nnetwork = []\n").unwrap();
    let args = json!({"mode": "requests", "count": 250, "hold_ms": 2000, "url": "http://127.0.0.1:9/refused"}).to_string();
    let mut cmd = chitin(home.path(), &["tool", "call", "http_flood", "--args", &args, "--plugin", HOSTILE_WASM]);
    cmd.env("RUST_LOG", "chitin=info");
    let out = run_within(&mut cmd, Duration::from_secs(120));
    let err = stderr(&out);
    // Denied by the grant, or refused past `max_http_requests` in flight.
    let lines = err.lines().filter(|l| l.contains("outgoing HTTP denied") || l.contains("outgoing HTTP refused")).count();
    let summary: Vec<&str> = err.lines().filter(|l| l.contains("more refused requests")).collect();
    eprintln!("{lines} refusal lines; summary: {summary:?}");
    assert!((1..=20).contains(&lines), "{lines} refusal lines");
    assert_eq!(summary.len(), 1, "{err}");
    let more: u64 = summary[0].split("… and ").nth(1).and_then(|r| r.split(" more").next()).map(|n| n.replace(' ', "")).and_then(|n| n.parse().ok()).expect("a count");
    // 20 lines and "… and 230 more".
    assert!(more + lines as u64 >= 200, "the attack ran: {} requests refused", more + lines as u64);
    assert!(err.lines().count() < 60, "{} lines in all:\n{err}", err.lines().count());
    assert!(!err.contains('\x1b'), "log lines into a pipe carry no colour codes:\n{err}");
}
