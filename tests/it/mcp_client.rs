//! The MCP client through whole agents: a server written with the official
//! Python SDK over stdio and streamable HTTP (slow tier: the SDK is
//! installed by `scripts/test slow`), and hostile servers of our own.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chitin::mcp::client::ServerState;
use chitin::plugins::CallContext;
use chitin::tools::ToolSource;
use chitin_testing::agent::TestAgent;
use chitin_testing::{MockLlm, MockReply, Script};

/// The python of the venv holding the MCP Python SDK.
fn python() -> String {
    let python = std::env::var("CHITIN_MCP_PYTHON")
        .expect("CHITIN_MCP_PYTHON is not set: run `scripts/test slow`, which installs the MCP Python SDK and sets it");
    assert!(std::path::Path::new(&python).exists(), "CHITIN_MCP_PYTHON={python} does not exist: run `scripts/test slow`");
    python
}

fn script() -> String {
    format!("{}/../host/tests/mcp/client_server.py", env!("CARGO_MANIFEST_DIR"))
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

fn tool_names(t: &TestAgent) -> Vec<String> {
    t.agent.core().tools.refreshed().names().map(str::to_string).collect()
}

/// Everything the model was sent, as one text.
fn model_saw(mock: &MockLlm) -> String {
    mock.requests().iter().map(|r| r.to_string()).collect::<Vec<_>>().join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: runs a server on the MCP Python SDK"]
async fn a_python_sdk_server_over_stdio_serves_a_whole_turn_changes_its_tools_and_comes_back_after_a_crash() {
    let mock = MockLlm::start(Script::new([MockReply::tool_call("mcp_py_echo", r#"{"text": "hi there"}"#), MockReply::text("done")]));
    let config = format!("[mcp_servers.py]\ncommand = {:?}\nargs = [{:?}, \"stdio\"]\nsandbox = \"none\"\n", python(), script());
    let t = TestAgent::with_config(mock, &config);
    t.mcp.first_attempts(Duration::from_secs(30)).await;
    assert!(matches!(t.mcp.servers()[0].state(), ServerState::Connected { .. }), "{:?}", t.mcp.servers()[0].state());
    let names = tool_names(&t);
    assert!(names.contains(&"mcp_py_echo".to_string()) && names.contains(&"mcp_py_whoami".to_string()), "{names:?}");

    // A whole turn: the model calls the server's tool, the result reaches it.
    assert_eq!(t.ask("say hi").await, "done");
    let last = t.mock.last_request().unwrap().to_string();
    assert!(last.contains("echo: hi there"), "{last}");

    // The list changes: the next snapshot has the new tool.
    let server = t.mcp.servers()[0].clone();
    let before = server.generation();
    let ctx = CallContext::default();
    assert_eq!(server.call("mcp_py_add_tool", &serde_json::json!({}), &ctx, None).await.unwrap(), "added");
    wait_for("the list change", || server.generation() != before && tool_names(&t).contains(&"mcp_py_late".to_string())).await;
    assert_eq!(t.agent.core().tools.refreshed().call("mcp_py_late", &serde_json::json!({}), &ctx, None).await.unwrap(), "late tool answered");

    // A crash: the call fails, the tools leave, the server comes back.
    let err = server.call("mcp_py_crash", &serde_json::json!({}), &ctx, None).await.unwrap_err();
    assert!(!err.to_string().is_empty());
    wait_for("the tools to leave", || !tool_names(&t).contains(&"mcp_py_echo".to_string())).await;
    wait_for("the server to come back", || tool_names(&t).contains(&"mcp_py_echo".to_string())).await;
    let answer = t.agent.core().tools.refreshed().call("mcp_py_echo", &serde_json::json!({"text": "again"}), &ctx, None).await.unwrap();
    assert_eq!(answer, "echo: again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: runs a server on the MCP Python SDK"]
async fn a_bearer_secret_reaches_the_http_server_and_never_the_model_the_session_or_a_result() {
    const TOKEN: &str = "sk-SENTINEL-4711";
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut server = std::process::Command::new(python())
        .args([script(), "http".into(), port.to_string()])
        .env("WHOAMI_LOG", log.path())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(port);
    let mock = MockLlm::start(Script::new([MockReply::tool_call("mcp_web_whoami", "{}"), MockReply::text("ok")]));
    let config = format!(
        "[mcp_servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer {{{{secret:token}}}}\" }}\nsecrets = {{ token = \"{TOKEN}\" }}\n"
    );
    let t = TestAgent::with_config(mock, &config);
    t.mcp.first_attempts(Duration::from_secs(30)).await;
    assert!(tool_names(&t).contains(&"mcp_web_whoami".to_string()), "{:?} {:?}", tool_names(&t), t.mcp.servers()[0].state());
    // The Python SDK speaks the stateless revision: reached by discover.
    assert!(matches!(t.mcp.servers()[0].state(), ServerState::Connected { protocol, .. } if protocol == "2026-07-28"), "{:?}", t.mcp.servers()[0].state());
    assert_eq!(t.ask("who am I?").await, "ok");
    // The attack ran: the server got the token and sent it back.
    let received = std::fs::read_to_string(log.path()).unwrap();
    assert!(received.contains(TOKEN), "the server received: {received}");
    // Contained: the model saw the placeholder only, the session too.
    let seen = model_saw(&t.mock);
    assert!(seen.contains("you sent: Bearer {{secret:token}}"), "{seen}");
    assert!(!seen.contains(TOKEN));
    for entry in std::fs::read_dir(t.home.path().join("sessions")).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        assert!(!text.contains(TOKEN), "a session holds the token");
    }
    let _ = server.kill();
}

/// A listener that counts connections and answers every request with
/// `answer`.
fn answering(ip: &str, answer: &'static str) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            seen.fetch_add(1, Ordering::SeqCst);
            let mut buf = [0u8; 65536];
            let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
            let _ = stream.read(&mut buf);
            let _ = stream.write_all(answer.replace("{port}", &port.to_string()).as_bytes());
        }
    });
    (port, count)
}

/// A server on 127.0.0.1 whose answer (`answer(port)`) points at a
/// listener on 127.0.0.2, never named in the config (`entry(port)` is the
/// server's table): the server was asked, the connection is `Down` with
/// `reason`, the other address was never contacted, and the agent goes on.
async fn pointing_elsewhere_is_refused(answer: impl FnOnce(u16) -> String, entry: impl FnOnce(u16) -> String, reason: &str) {
    let (inside, contacted) = answering("127.0.0.2", "HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n");
    let (outside, asked) = answering("127.0.0.1", Box::leak(answer(inside).into_boxed_str()));
    let t = TestAgent::with_config(MockLlm::start(Script::new([MockReply::text("fine")])), &entry(outside));
    t.mcp.first_attempts(Duration::from_secs(10)).await;
    assert!(asked.load(Ordering::SeqCst) >= 1, "the server was asked and pointed elsewhere");
    let state = t.mcp.servers()[0].state();
    assert!(matches!(&state, ServerState::Down { reason: r } if r.contains(reason)), "{state:?}");
    assert_eq!(contacted.load(Ordering::SeqCst), 0, "the other address was never contacted");
    assert!(!tool_names(&t).iter().any(|n| n.starts_with("mcp_")));
    assert_eq!(t.ask("hello").await, "fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_redirecting_to_a_private_address_is_not_followed() {
    pointing_elsewhere_is_refused(
        |inside| format!("HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.2:{inside}/mcp\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"),
        |outside| format!("[mcp_servers.evil]\nurl = \"http://127.0.0.1:{outside}/mcp\"\nstartup_timeout_secs = 5\n"),
        "redirect",
    )
    .await;
}

/// An HTTP+SSE server whose `endpoint` event names another host: the
/// client refuses it, and the host it named is never contacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_server_naming_an_endpoint_on_another_host_is_refused() {
    pointing_elsewhere_is_refused(
        |inside| format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\r\nevent: endpoint\r\ndata: http://127.0.0.2:{inside}/message?sessionId=1\r\n\r\n"),
        |outside| format!("[mcp_servers.old]\nurl = \"http://127.0.0.1:{outside}/sse\"\ntransport = \"sse\"\nstartup_timeout_secs = 5\n"),
        "another origin",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_cannot_start_is_reported_and_blocks_nothing() {
    let config = "[mcp_servers.gone]\ncommand = \"/nonexistent/mcp-server\"\nsandbox = \"none\"\n\
                  [mcp_servers.broken]\nurll = \"typo\"\n";
    let t = TestAgent::with_config(MockLlm::start(Script::new([MockReply::text("still here")])), config);
    let started = std::time::Instant::now();
    t.mcp.first_attempts(Duration::from_secs(10)).await;
    assert!(started.elapsed() < Duration::from_secs(5), "a failed start ends the first attempt at once");
    assert_eq!(t.mcp.servers().len(), 1, "the entry that does not parse is left out, the other starts");
    let state = t.mcp.servers()[0].state();
    assert!(matches!(&state, ServerState::Down { reason } if reason.contains("/nonexistent/mcp-server")), "{state:?}");
    assert_eq!(t.ask("hello").await, "still here");
}

fn hostile_script() -> String {
    format!("{}/../host/tests/mcp/hostile_server.py", env!("CARGO_MANIFEST_DIR"))
}

/// A server (no SDK, plain python3) that hangs, floods, answers 50 MB,
/// sends a megabyte of escapes as a description, a path as a tool name, and
/// schemas that point at a URL and at a file, or do not compile, or lie:
/// each is contained and the agent and the server's other tools go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_server_s_hang_flood_50_mb_and_lying_schemas_are_contained() {
    let (ref_port, fetched) = answering("127.0.0.1", "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}");
    let config = format!(
        "[mcp_servers.h]\ncommand = \"python3\"\nargs = [{:?}, \"http://127.0.0.1:{ref_port}/schema.json\"]\nsandbox = \"none\"\ntimeout_secs = 3\n",
        hostile_script()
    );
    let mock = MockLlm::start(Script::new([MockReply::tool_call("mcp_h_liar", r#"{"n": "not a number"}"#), MockReply::text("done")]));
    let t = TestAgent::with_config(mock, &config);
    t.mcp.first_attempts(Duration::from_secs(30)).await;
    let names = tool_names(&t);
    for offered in ["mcp_h_ok", "mcp_h_hang", "mcp_h_huge", "mcp_h_flood_lines", "mcp_h_long", "mcp_h_liar"] {
        assert!(names.contains(&offered.to_string()), "{offered} missing from {names:?} ({:?})", t.mcp.servers()[0].state());
    }
    assert!(names.iter().any(|n| n.ends_with("etc_passwd") && !n.contains('/') && !n.contains('.')), "a path for a name is made a name: {names:?}");
    for left_out in ["mcp_h_remote_ref", "mcp_h_file_ref", "mcp_h_broken_schema", "mcp_h_giant_schema"] {
        assert!(!names.contains(&left_out.to_string()), "{left_out} was offered: {names:?}");
    }
    assert_eq!(fetched.load(Ordering::SeqCst), 0, "compiling a schema never fetches its $ref");
    let tools = t.agent.core().tools.refreshed();
    let long = &tools.spec("mcp_h_long").unwrap().description;
    assert!(long.len() <= 4096 && !long.contains('\x1b') && !long.contains('\x07'), "{} bytes: {:?}", long.len(), &long[..64.min(long.len())]);

    // The schema is checked before anything leaves the host: the liar
    // never sees a value its schema refuses, and the model is told.
    assert_eq!(t.ask("use the liar").await, "done");
    let last = t.mock.last_request().unwrap().to_string();
    assert!(last.contains("invalid arguments for `mcp_h_liar`") && !last.contains("UNCHECKED"), "{last}");

    let ctx = CallContext::default();
    let started = std::time::Instant::now();
    let hung = tools.call("mcp_h_hang", &serde_json::json!({}), &ctx, None).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(20), "the call's timeout holds: {:?}", started.elapsed());
    assert!(hung.to_string().contains("timed out") || hung.to_string().contains("time"), "{hung}");
    let flooded = tools.call("mcp_h_flood_lines", &serde_json::json!({}), &ctx, None).await.unwrap();
    assert_eq!(flooded, "after the flood");

    let huge = tools.call("mcp_h_huge", &serde_json::json!({}), &ctx, None).await;
    match &huge {
        Ok(text) => assert!(text.len() <= 1024 * 1024, "a 50 MB answer reached the model whole: {} bytes", text.len()),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
    // The server (or its restart) answers again, and the agent never stopped.
    let mut answered = None;
    for _ in 0..100 {
        if let Ok(text) = t.agent.core().tools.refreshed().call("mcp_h_ok", &serde_json::json!({}), &ctx, None).await {
            answered = Some(text);
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(answered.as_deref(), Some("fine"), "after the 50 MB answer ({huge:?})");
}

/// The reference server, `@modelcontextprotocol/server-everything`, which
/// `scripts/test slow` installs with npm.
fn everything() -> String {
    let path = format!("{}/../host/tests/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js", env!("CARGO_MANIFEST_DIR"));
    assert!(std::path::Path::new(&path).exists(), "{path} is missing: run `scripts/test slow`, which installs it");
    path
}

/// server-everything serving `transport` on a free port, once it listens.
fn everything_on_a_port(transport: &str) -> (std::process::Child, u16) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server = std::process::Command::new("node")
        .args([everything().as_str(), transport])
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(port);
    (server, port)
}

/// Waits (up to 20 s, not an assertion) until something listens on `port`.
fn wait_listening(port: u16) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What every transport of server-everything must show: a whole turn
/// through its `echo`, its other result kinds bounded and made text, and
/// (on stdio) an environment without the host's secrets.
async fn check_everything(t: &TestAgent, server: &str) {
    t.mcp.first_attempts(Duration::from_secs(60)).await;
    // It speaks only the revisions with `initialize`: over HTTP the
    // client's discover falls back to them.
    assert!(matches!(t.mcp.servers()[0].state(), ServerState::Connected { protocol, .. } if protocol.starts_with("2025-")), "{:?}", t.mcp.servers()[0].state());
    let names = tool_names(t);
    let echo = format!("mcp_{server}_echo");
    assert!(names.contains(&echo) && names.contains(&format!("mcp_{server}_get-sum")), "{names:?} {:?}", t.mcp.servers()[0].state());
    assert_eq!(t.ask("echo something").await, "done");
    let last = t.mock.last_request().unwrap().to_string();
    assert!(last.contains("Echo: hello everything"), "{last}");

    let tools = t.agent.core().tools.refreshed();
    let ctx = CallContext::default();
    let sum = tools.call(&format!("mcp_{server}_get-sum"), &serde_json::json!({"a": 2, "b": "40"}), &ctx, None).await.unwrap();
    assert!(sum.contains("42"), "{sum}");
    let image = tools.call(&format!("mcp_{server}_get-tiny-image"), &serde_json::json!({}), &ctx, None).await.unwrap();
    assert!(image.len() < 64 * 1024 && image.contains("image"), "an image is described, not pasted: {image}");
    let structured = tools.call(&format!("mcp_{server}_get-structured-content"), &serde_json::json!({"location": "New York"}), &ctx, None).await.unwrap();
    assert!(structured.contains("temperature"), "{structured}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "slow: runs @modelcontextprotocol/server-everything (npm)"]
async fn server_everything_over_stdio_in_the_os_sandbox_streamable_http_and_sse() {
    // stdio, in the OS sandbox: node reads its modules from a read-only path.
    let modules = format!("{}/../host/tests/mcp", env!("CARGO_MANIFEST_DIR"));
    let modules = std::fs::canonicalize(modules).unwrap();
    let script = || Script::new([MockReply::tool_call("mcp_ev_echo", r#"{"message": "hello everything"}"#), MockReply::text("done")]);
    let config = format!(
        "[mcp_servers.ev]\ncommand = \"node\"\nargs = [{:?}, \"stdio\"]\nread_only_paths = [{:?}]\nstartup_timeout_secs = 60\n",
        everything(),
        modules.to_str().unwrap()
    );
    let t = TestAgent::with_config(MockLlm::start(script()), &config);
    check_everything(&t, "ev").await;
    let env = t.agent.core().tools.refreshed().call("mcp_ev_get-env", &serde_json::json!({}), &CallContext::default(), None).await.unwrap();
    // The host's environment had something to steal (cargo runs tests with
    // CARGO_* set); the server's is the minimum the sandbox passes.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    assert!(env.contains("PATH") && !env.contains("CARGO_") && !env.contains("CHITIN_"), "the server's environment is the host's minimum: {env}");
    drop(t);

    // streamable HTTP on a port of its own.
    let (mut server, port) = everything_on_a_port("streamableHttp");
    let script = Script::new([MockReply::tool_call("mcp_evh_echo", r#"{"message": "hello everything"}"#), MockReply::text("done")]);
    let t = TestAgent::with_config(MockLlm::start(script), &format!("[mcp_servers.evh]\nurl = \"http://127.0.0.1:{port}/mcp\"\n"));
    check_everything(&t, "evh").await;
    let _ = server.kill();
    drop(t);

    // The older HTTP+SSE transport (2024-11-05), which it also serves.
    let (mut server, port) = everything_on_a_port("sse");
    let script = Script::new([MockReply::tool_call("mcp_evs_echo", r#"{"message": "hello everything"}"#), MockReply::text("done")]);
    let t = TestAgent::with_config(MockLlm::start(script), &format!("[mcp_servers.evs]\nurl = \"http://127.0.0.1:{port}/sse\"\ntransport = \"sse\"\n"));
    check_everything(&t, "evs").await;
    let _ = server.kill();
}
