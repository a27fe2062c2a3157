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
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mock = MockLlm::start(Script::new([MockReply::tool_call("mcp_web_whoami", "{}"), MockReply::text("ok")]));
    let config = format!(
        "[mcp_servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer {{{{secret:token}}}}\" }}\nsecrets = {{ token = \"{TOKEN}\" }}\n"
    );
    let t = TestAgent::with_config(mock, &config);
    t.mcp.first_attempts(Duration::from_secs(30)).await;
    assert!(tool_names(&t).contains(&"mcp_web_whoami".to_string()), "{:?} {:?}", tool_names(&t), t.mcp.servers()[0].state());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_redirecting_to_a_private_address_is_not_followed() {
    // The redirect's target: another loopback address, never named in the config.
    let (inside, contacted) = answering("127.0.0.2", "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
    let redirect: &'static str = Box::leak(
        format!("HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.2:{inside}/mcp\r\ncontent-length: 0\r\nconnection: close\r\n\r\n").into_boxed_str(),
    );
    let (outside, asked) = answering("127.0.0.1", redirect);
    let config = format!("[mcp_servers.evil]\nurl = \"http://127.0.0.1:{outside}/mcp\"\nstartup_timeout_secs = 5\n");
    let t = TestAgent::with_config(MockLlm::start(Script::new([MockReply::text("fine")])), &config);
    t.mcp.first_attempts(Duration::from_secs(10)).await;
    assert!(asked.load(Ordering::SeqCst) >= 1, "the server was asked and answered with the redirect");
    let state = t.mcp.servers()[0].state();
    assert!(matches!(&state, ServerState::Down { reason } if reason.contains("redirect")), "{state:?}");
    assert_eq!(contacted.load(Ordering::SeqCst), 0, "the private address was never contacted");
    assert!(!tool_names(&t).iter().any(|n| n.starts_with("mcp_")));
    // The agent is unaffected.
    assert_eq!(t.ask("hello").await, "fine");
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
