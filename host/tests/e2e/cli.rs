//! The `chitin` binary as a user runs it: fresh data dir, no config, the
//! built-in `fs` plugin, the SDK example, a scripted mock LLM, and a
//! `kill -9` in the middle of a turn.

use crate::common::*;

use std::process::Stdio;
use std::time::{Duration, Instant};

use chitin::session::{JsonlStore, Role, SessionStore as _};
use chitin_testing::{MockLlm, MockReply};
use serde_json::{Value, json};


#[test]
fn tool_call_runs_the_builtin_fs_plugin_without_any_setup() {
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let ws_arg = ws.to_str().unwrap();
    let out = run(chitin(home.path(), &["tool", "call", "write_file", "--args", r#"{"path":"a/b.txt","content":"one\ntwo\n"}"#, "--workspace", ws_arg]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(ws.join("a/b.txt")).unwrap(), "one\ntwo\n");
    let out = run(chitin(home.path(), &["tool", "call", "read_file", "--args", r#"{"path":"a/b.txt"}"#, "--workspace", ws_arg]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("two"), "{}", stdout(&out));

    let out = run(chitin(home.path(), &["tool", "call", "read_fil", "--args", "{}", "--workspace", ws_arg]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("Did you mean `read_file`?"), "{}", stderr(&out));
    let out = run(chitin(home.path(), &["tool", "call", "read_file", "--args", r#"{"path":"../../etc/passwd"}"#, "--workspace", ws_arg]));
    assert_eq!(out.status.code(), Some(1));
    assert!(!stdout(&out).contains("root:"));
}

#[test]
fn a_read_only_grant_from_config_is_enforced() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), "[plugins.fs]\nworkspace = \"read\"\n").unwrap();
    let ws = home.path().join("ws");
    let out = run(chitin(home.path(), &["tool", "call", "write_file", "--args", r#"{"path":"x.txt","content":"x"}"#, "--workspace", ws.to_str().unwrap()]));
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(!ws.join("x.txt").exists());
    let out = run(chitin(home.path(), &["plugin", "inspect", "fs"]));
    assert!(stdout(&out).contains("asks read-write, granted read"), "{}", stdout(&out));
}

#[test]
fn plugin_inspect_list_pack_and_install() {
    let home = tempfile::tempdir().unwrap();
    let out = run(chitin(home.path(), &["plugin", "inspect", HELLO_WASM]));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("hello 0.1.0") && text.contains("greet [read-only, concurrency-safe]") && text.contains("name (string, required)"), "{text}");

    let out = run(chitin(home.path(), &["plugin", "inspect", HELLO_WASM, "--json"]));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["manifest"]["name"], "hello");
    assert_eq!(json["granted"]["workspace"], "none");

    let toml = home.path().join("plugin.toml");
    std::fs::write(&toml, "name = \"greeter\"\nversion = \"2.0.0\"\ndescription = \"packed\"\n[capabilities]\nnetwork = [\"api.example.com\"]\n[[tools]]\nname = \"greet\"\ndescription = \"Greets\"\nread_only = true\nparameters = { type = \"object\", properties = { name = { type = \"string\" } }, required = [\"name\"] }\n").unwrap();
    let packed = home.path().join("greeter.wasm");
    let out = run(chitin(home.path(), &["plugin", "pack", "--manifest", toml.to_str().unwrap(), HELLO_WASM, "-o", packed.to_str().unwrap()]));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(chitin(home.path(), &["plugin", "install", packed.to_str().unwrap()]));
    assert!(out.status.success(), "{}", stderr(&out));

    let out = run(chitin(home.path(), &["plugin", "list", "--json"]));
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = list.as_array().unwrap().iter().map(|p| p["manifest"]["name"].as_str().unwrap()).collect();
    // The built-ins (`agent`, `fs`, the `telegram` channel) and the installed one.
    assert_eq!(names, ["agent", "fs", "greeter", "telegram"]);
    assert_eq!(list[0]["granted"]["host"], json!(["messaging", "schedule", "goals", "agents"]), "the message, cron, goal and spawn tools' interfaces, granted by default");
    let greeter = &list[2];
    assert_eq!(greeter["granted"]["network"], json!([]), "asked, not granted");
    assert!(greeter["notes"][0].as_str().unwrap().contains("api.example.com"));

    let out = run(chitin(home.path(), &["tool", "call", "greet", "--args", r#"{"name":"Ada"}"#]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("Ada"));

    let bad = home.path().join("bad.toml");
    std::fs::write(&bad, "name = \"Bad Name\"\nversion = \"1\"\n[[tools]]\nname = \"t\"\nparameters = { type = \"object\" }\n").unwrap();
    let out = run(chitin(home.path(), &["plugin", "pack", "--manifest", bad.to_str().unwrap(), HELLO_WASM, "-o", "/dev/null"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("name") && stderr(&out).contains("Bad Name"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn agent_talks_to_the_endpoint_named_in_the_environment() {
    let mock = MockLlm::start(vec![MockReply::tool_call("list_dir", "{}"), MockReply::text("Your workspace is empty.")]);
    let home = tempfile::tempdir().unwrap();
    let out = run(chitin(home.path(), &["agent", "-m", "what is in my workspace?"]).env("OPENAI_BASE_URL", mock.base_url()).env("CHITIN_MODEL", "test-model"));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Your workspace is empty.");
    let request = &mock.requests()[0];
    assert_eq!(request["model"], "test-model");
    assert!(stderr(&out).contains("list_dir") || stderr(&out).is_empty(), "tool hints go to stderr only");
}

#[test]
fn a_bad_config_is_a_clear_error() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), "[agent]\nmax_iterations = \"many\"\n").unwrap();
    let out = run(chitin(home.path(), &["status"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("max_iterations"), "{}", stderr(&out));
    std::fs::write(home.path().join("config.toml"), "[providers.openai]\nbase_url = \"http://127.0.0.1:1/v1\"\napi_key = \"${CHITIN_TEST_NO_SUCH_VAR}\"\n").unwrap();
    let out = run(chitin(home.path(), &["agent", "-m", "hi"]));
    // A provider that is not set up exits 2 (issue 13).
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("providers.openai.api_key") && stderr(&out).contains("CHITIN_TEST_NO_SUCH_VAR"), "{}", stderr(&out));
}

#[test]
fn onboard_writes_a_config_that_status_reads() {
    let home = tempfile::tempdir().unwrap();
    let out = run(chitin(home.path(), &["onboard"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(home.path().join("workspace/AGENTS.md").exists());
    let out = run(chitin(home.path(), &["status"]).env("OPENAI_API_KEY", "sk-test"));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("gpt-4o-mini") && text.contains("api key: set") && text.contains("fs") && text.contains("workspace=read-write"), "{text}");
}

/// Runs `chitin ARGS` against `mock` and kills it with SIGKILL once the
/// mock has seen `requests` requests (the last one may hang).
fn kill_9_at_request(home: &std::path::Path, mock: &MockLlm, args: &[&str], requests: usize) {
    let mut child = chitin(home, args).env("OPENAI_BASE_URL", mock.base_url()).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while mock.request_count() < requests {
        assert!(Instant::now() < deadline, "the run reached request {requests}");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_during_a_turn_loses_nothing() {
    let mock = MockLlm::start(vec![
        MockReply::tool_call("write_file", json!({"path": "made.txt", "content": "made"}).to_string()),
        MockReply::Hang,
        MockReply::text("Welcome back."),
    ]);
    let home = tempfile::tempdir().unwrap();
    kill_9_at_request(home.path(), &mock, &["agent", "-m", "make a file", "-s", "cli:crash"], 2);
    assert!(home.path().join("workspace/made.txt").exists());

    let out = run(chitin(home.path(), &["agent", "-m", "are you there?", "-s", "cli:crash"]).env("OPENAI_BASE_URL", mock.base_url()));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Welcome back.");
    let session = JsonlStore::new(home.path().join("sessions")).load("cli:crash").unwrap();
    let shape: Vec<(Role, String)> = session.messages.iter().map(|m| (m.role, m.text().chars().take(30).collect())).collect();
    assert_eq!(shape[0], (Role::User, "make a file".into()));
    assert_eq!(session.messages[1].tool_calls[0].function.name, "write_file");
    assert_eq!(shape[2].0, Role::Tool);
    assert!(shape[2].1.starts_with("wrote"), "{shape:?}");
    assert_eq!(shape[3].0, Role::Assistant, "the interrupted turn is closed: {shape:?}");
    assert!(session.messages[3].text().contains("interrupted"), "{}", session.messages[3].text());
    assert_eq!(shape[4], (Role::User, "are you there?".into()));
    assert_eq!(shape[5], (Role::Assistant, "Welcome back.".into()));
    // The model saw the recovered tool result.
    let last = &mock.requests()[2];
    assert!(last["messages"].as_array().unwrap().iter().any(|m| m["role"] == "tool" && m["content"].as_str().unwrap().starts_with("wrote")));
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_mid_goal_then_restart_resumes_the_goal_and_finishes_it() {
    // The model sets the goal itself (create_goal), so only the runner's
    // checkpoints can have put it on disk.
    let mock = MockLlm::start(vec![
        MockReply::tool_call("create_goal", json!({"objective": "write both parts"}).to_string()),
        MockReply::text("Part one is written."),
        MockReply::Hang,
        MockReply::tool_call("write_file", json!({"path": "part2.txt", "content": "two"}).to_string()),
        MockReply::tool_call("update_goal", json!({"action": "complete", "recap": "both parts written"}).to_string()),
        MockReply::text("Both parts are written."),
    ]);
    let home = tempfile::tempdir().unwrap();
    // The third request is the first continuation: the goal is mid-way.
    kill_9_at_request(home.path(), &mock, &["agent", "-m", "write both parts, take your time", "-s", "cli:goal"], 3);

    // On disk: the goal still active, the interim answer and the
    // continuation boundary saved.
    let session = JsonlStore::new(home.path().join("sessions")).load("cli:goal").unwrap();
    assert_eq!(session.metadata["goal_state"]["status"], "active", "{:?}", session.metadata.get("goal_state"));
    let texts: Vec<&str> = session.messages.iter().map(|m| m.text()).collect();
    assert_eq!(texts[0], "write both parts, take your time");
    assert_eq!(session.messages[1].tool_calls[0].function.name, "create_goal");
    assert!(texts[2].starts_with("Goal active: write both parts"), "{texts:?}");
    assert_eq!(texts[3], "Part one is written.");
    assert!(texts[4].starts_with("[Goal continuation]"), "{texts:?}");

    // The restarted process sees the active goal and works it to the end.
    let out = run(chitin(home.path(), &["agent", "-m", "are you still on it?", "-s", "cli:goal"]).env("OPENAI_BASE_URL", mock.base_url()));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Both parts are written.");
    assert_eq!(std::fs::read_to_string(home.path().join("workspace/part2.txt")).unwrap(), "two");
    let resumed = &mock.requests()[3];
    let system = resumed["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("# Active goal") && system.contains("write both parts"), "the goal is in the restarted prompt");
    let session = JsonlStore::new(home.path().join("sessions")).load("cli:goal").unwrap();
    assert_eq!(session.metadata["goal_state"]["status"], "complete");
    assert_eq!(session.metadata["goal_state"]["recap"], "both parts written");
    assert!(session.messages.iter().any(|m| m.text().contains("interrupted")), "the killed pass is closed");
    assert!(!session.metadata.contains_key("pending_user_turn"));
}

#[test]
fn a_channel_plugin_is_inspected_installed_and_listed_with_its_world() {
    let home = tempfile::tempdir().unwrap();
    let out = run(chitin(home.path(), &["plugin", "inspect", ECHO_CHANNEL_WASM]));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("world: channel-plugin@0.2.0"), "{text}");
    assert!(text.contains("receive:  poll, webhook") && text.contains("secret:   token: to api.example.test, in path"), "{text}");
    assert!(!text.contains("tools:"), "{text}");
    let out = run(chitin(home.path(), &["plugin", "inspect", HELLO_WASM]));
    assert!(stdout(&out).contains("world: tool-plugin@0.1.0"), "{}", stdout(&out));

    // Install compiles and links it as a channel component.
    let out = run(chitin(home.path(), &["plugin", "install", ECHO_CHANNEL_WASM]));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(chitin(home.path(), &["plugin", "list"]));
    assert!(stdout(&out).contains("echo-channel"), "{}", stdout(&out));
    // It offers no tools, and the fs tools are still there.
    let out = run(chitin(home.path(), &["tool", "list"]));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("read_file"), "{}", stdout(&out));
    // Each tool's flags are listed: what the scheduler may run together.
    let list = stdout(&out);
    let line = |tool: &str| list.lines().find(|l| l.starts_with(&format!("{tool} "))).unwrap_or_default().to_string();
    assert!(line("read_file").contains(" read-only,concurrency-safe "), "{list}");
    assert!(line("write_file").contains(" - "), "{list}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_message_tool_prints_in_the_cli_and_replaces_the_reply() {
    let mock = MockLlm::start(vec![
        MockReply::tool_call("message", r#"{"content":"Here you go: \u001b[31mred"}"#),
        MockReply::text("Sent it above."),
    ]);
    let home = tempfile::tempdir().unwrap();
    let out = run(chitin(home.path(), &["agent", "-m", "send it"]).env("OPENAI_BASE_URL", mock.base_url()));
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), "Here you go: \\x1b[31mred", "the send is printed, escaped, and the final reply is not repeated");
    let result = mock.requests()[1]["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap()["content"].clone();
    assert_eq!(result, "Message sent to cli:direct");

    // Another channel cannot be reached from the CLI: the model is told so.
    let mock = MockLlm::start(vec![
        MockReply::tool_call("message", r#"{"content":"hi","channel":"telegram","chat_id":"1"}"#),
        MockReply::text("No gateway."),
    ]);
    std::fs::write(home.path().join("config.toml"), "[plugins.agent]\nhost = [\"messaging\"]\nchats = [\"*\"]\n").unwrap();
    let out = run(chitin(home.path(), &["agent", "-m", "tell telegram"]).env("OPENAI_BASE_URL", mock.base_url()));
    assert_eq!(stdout(&out).trim(), "No gateway.");
    let result = mock.requests()[1]["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap()["content"].to_string();
    assert!(result.contains("`telegram` is not running here") && result.contains("chitin gateway"), "{result}");
}

/// Interactive `chitin agent`: a background subagent's result that comes
/// after its turn ended is handled as a turn of its own and printed then,
/// before the user types anything else.
#[tokio::test(flavor = "multi_thread")]
async fn the_interactive_cli_prints_a_subagent_result_that_arrives_after_the_turn() {
    use std::io::Write as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    // The subagent keeps working until the main turn has answered, and two
    // steps more, so its result comes after that turn.
    let answered = Arc::new(AtomicUsize::new(0));
    let mock = MockLlm::with_handler({
        let answered = answered.clone();
        move |request, _| {
            let system = request["messages"][0]["content"].as_str().unwrap_or_default();
            let text = request.to_string();
            if system.starts_with("# Subagent") {
                let after = answered.load(Ordering::SeqCst);
                if after == 0 || after < 3 {
                    if after > 0 {
                        answered.fetch_add(1, Ordering::SeqCst);
                    }
                    return MockReply::tool_call("list_dir", r#"{"path":"."}"#);
                }
                return MockReply::text("SUB-RESULT: 42 files");
            }
            if text.contains("SUB-RESULT") {
                return MockReply::text("Your background count finished: 42 files.");
            }
            if request["messages"].as_array().unwrap().last().unwrap()["role"] == "tool" {
                answered.store(1, Ordering::SeqCst);
                return MockReply::text("Started it in the background.");
            }
            MockReply::tool_call("spawn", r#"{"task":"count the files","label":"count"}"#)
        }
    });
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), "[agent.subagents]\nkeep_alive_secs = 0\n").unwrap();
    let mut child = chitin(home.path(), &["agent", "-s", "cli:late"])
        .env("OPENAI_BASE_URL", mock.base_url())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"count my files\n").unwrap();
    stdin.flush().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let late_turn = |m: &MockLlm| {
        m.requests().iter().any(|r| r.to_string().contains("SUB-RESULT") && !r["messages"][0]["content"].as_str().unwrap_or_default().starts_with("# Subagent"))
    };
    while !late_turn(&mock) {
        assert!(Instant::now() < deadline, "no turn for the subagent's result; requests: {}", mock.request_count());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Printed without another line typed; then the user leaves.
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(stdin);
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    let out = wait.recv_timeout(Duration::from_secs(30)).expect("chitin agent exits at end of input").unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let first = text.find("chitin › Started it in the background.").unwrap_or_else(|| panic!("{text}"));
    let late = text.find("chitin › Your background count finished: 42 files.").unwrap_or_else(|| panic!("{text}"));
    assert!(first < late, "{text}");
    // The result was stored in the session once, with the turn it started.
    let session = JsonlStore::new(home.path().join("sessions")).load("cli:late").unwrap();
    let results = session.messages.iter().filter(|m| m.text().contains("SUB-RESULT")).count();
    assert_eq!(results, 1, "{:?}", session.messages);
}

/// A mock where the main turn spawns a background subagent and then says
/// so; the subagent lists the workspace `steps` times, then answers
/// `SUB-RESULT`; a request that carries the result gets the final answer.
fn spawning_mock(steps: usize) -> MockLlm {
    MockLlm::with_handler(move |request, _| {
        let messages = request["messages"].as_array().unwrap();
        let system = messages[0]["content"].as_str().unwrap_or_default();
        let text = request.to_string();
        if system.starts_with("# Subagent") {
            let done = messages.iter().filter(|m| m["role"] == "tool").count();
            return if done < steps { MockReply::tool_call("list_dir", r#"{"path":"."}"#) } else { MockReply::text("SUB-RESULT: 42 files") };
        }
        if text.contains("SUB-RESULT") {
            return MockReply::text("Your background count finished: 42 files.");
        }
        if messages.last().unwrap()["role"] == "tool" {
            return MockReply::text("Started it in the background.");
        }
        MockReply::tool_call("spawn", r#"{"task":"count the files","label":"count"}"#)
    })
}

/// `chitin agent -m`: a subagent spawned without `wait` is waited for (up
/// to `[agent.subagents] keep_alive_secs`), its result printed and stored
/// once; one still running past that is stopped with a note, and the
/// command still succeeds with the reply it has.
#[tokio::test(flavor = "multi_thread")]
async fn a_one_shot_waits_for_its_background_subagents_within_the_keep_alive() {
    let mock = spawning_mock(2);
    let home = tempfile::tempdir().unwrap();
    let out = run(chitin(home.path(), &["agent", "-s", "cli:bg", "-m", "count my files"]).env("OPENAI_BASE_URL", mock.base_url()));
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("Your background count finished: 42 files."), "{text}");
    let session = JsonlStore::new(home.path().join("sessions")).load("cli:bg").unwrap();
    assert_eq!(session.messages.iter().filter(|m| m.text().contains("SUB-RESULT")).count(), 1, "{:?}", session.messages);

    // A subagent that outlives the bound (every model step takes 300 ms; it
    // needs 100): stopped, said so, exit 0 with the turn's reply.
    let slow = spawning_mock(100).with_latency(Duration::from_millis(300));
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), "[agent.subagents]\nkeep_alive_secs = 1\n").unwrap();
    let started = Instant::now();
    let out = run(chitin(home.path(), &["agent", "-s", "cli:slow", "-m", "count my files"]).env("OPENAI_BASE_URL", slow.base_url()));
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("Started it in the background."), "{}", stdout(&out));
    assert!(!stdout(&out).contains("42 files"), "{}", stdout(&out));
    assert!(stderr(&out).contains("1 subagent(s) still running") && stderr(&out).contains("keep_alive_secs"), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(20), "bounded: {:?}", started.elapsed());
}
