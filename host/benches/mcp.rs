//! MCP benchmark. Prints figures; asserts nothing.
//!
//! Run: `cargo bench --bench mcp`. One trivial tool (hello-tool's `shout`)
//! four ways, in one run, so the differences are the MCP layers' cost:
//! - **in process**: `ToolRegistry::call` (validation + a fresh instance +
//!   the call): the plugin's own time, the baseline;
//! - **server, stdio**: a raw JSON-RPC client writing `tools/call` lines to
//!   `chitin mcp serve` and reading the answer: the overhead of serving
//!   over stdio is this round trip's p50 minus the baseline's (target
//!   ≤ 1 ms);
//! - **server, HTTP**: the same through the gateway's `/mcp` (reqwest, one
//!   POST per call in a session, the answer as SSE);
//! - **client**: the agent's side, `mcp_c_shout` through the registry and
//!   the MCP client (rmcp) to a `chitin mcp serve` child: its p50 minus the
//!   raw stdio round trip's is the client's own cost per call.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chitin::app::{App, AppOptions};
use chitin::config::DataDir;
use chitin::plugins::CallContext;
use serde_json::{Value, json};

const HELLO_WASM: &str = chitin_testing::HELLO_WASM;
const CHITIN_BIN: &str = env!("CARGO_BIN_EXE_chitin");
const CALLS: usize = 400;
const TOKEN: &str = "bench-token";

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("plugins")).unwrap();
    std::fs::copy(HELLO_WASM, home.path().join("plugins/hello.wasm")).unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[agent]\nmodel = \"bench\"\n[gateway]\nlisten = \"127.0.0.1:0\"\nauth_token = \"{TOKEN}\"\n\
             [mcp_servers.c]\ncommand = {CHITIN_BIN:?}\nargs = [\"mcp\", \"serve\", \"--tools\", \"shout\"]\nsandbox = \"none\"\nenv = {{ CHITIN_HOME = {:?} }}\n",
            home.path().to_str().unwrap()
        ),
    )
    .unwrap();
    println!("chitin MCP benchmark (hello-tool `shout`, {CALLS} calls each, sequential)");

    let baseline = rt.block_on(in_process(home.path()));
    report("in process (ToolRegistry::call)", &baseline, None);
    let stdio = stdio_round_trips(home.path());
    report("server over stdio (chitin mcp serve)", &stdio, Some(&baseline));
    let http = rt.block_on(http_round_trips(home.path()));
    report("server over HTTP (gateway /mcp)", &http, Some(&baseline));
    let client = rt.block_on(client_calls(home.path()));
    report("client: mcp_c_shout through the registry, to chitin mcp serve", &client, Some(&stdio));
    println!("  (\"over\" is the difference of p50s to the line it is compared with: the baseline for the server, the raw stdio round trip for the client)");
}

fn report(what: &str, samples: &[Duration], against: Option<&[Duration]>) {
    let (p50, p99) = percentiles(samples);
    let over = against.map(|base| format!("; over {:.3} ms", (p50.as_secs_f64() - percentiles(base).0.as_secs_f64()) * 1e3)).unwrap_or_default();
    println!("  {what}: p50 {:.3} ms, p99 {:.3} ms{over}", p50.as_secs_f64() * 1e3, p99.as_secs_f64() * 1e3);
}

async fn in_process(home: &std::path::Path) -> Vec<Duration> {
    let app = App::open(DataDir::at(home), AppOptions::default()).unwrap();
    let ctx = CallContext::default();
    let args = json!({"text": "hi"});
    for _ in 0..20 {
        app.tools.call("shout", &args, &ctx, None).await.unwrap();
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        app.tools.call("shout", &args, &ctx, None).await.unwrap();
        samples.push(started.elapsed());
    }
    samples
}

fn stdio_round_trips(home: &std::path::Path) -> Vec<Duration> {
    let mut child = Command::new(CHITIN_BIN)
        .args(["mcp", "serve", "--tools", "shout"])
        .env("CHITIN_HOME", home)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    let mut ask = |message: Value, id: Option<u64>| {
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
        let Some(id) = id else { return };
        loop {
            line.clear();
            stdout.read_line(&mut line).unwrap();
            let answer: Value = serde_json::from_str(&line).unwrap();
            if answer["id"] == json!(id) {
                assert!(answer.get("error").is_none(), "{answer}");
                return;
            }
        }
    };
    ask(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}), Some(0));
    ask(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), None);
    let mut samples = Vec::with_capacity(CALLS);
    for id in 1..=(CALLS + 20) as u64 {
        let started = Instant::now();
        ask(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "shout", "arguments": {"text": "hi"}}}), Some(id));
        if id > 20 {
            samples.push(started.elapsed());
        }
    }
    drop(stdin);
    let _ = child.wait();
    samples
}

async fn http_round_trips(home: &std::path::Path) -> Vec<Duration> {
    let mut cmd = Command::new(CHITIN_BIN);
    cmd.arg("gateway").env("CHITIN_HOME", home).env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1").env("OPENAI_API_KEY", "unused");
    // Killed when dropped, at the end of this function.
    let gateway = chitin_testing::binary::Gateway::spawn(cmd);
    let base = gateway.base();
    let url = format!("{base}/mcp");
    let client = reqwest::Client::new();
    let post = |body: Value, session: Option<String>| {
        let mut request = client.post(&url).bearer_auth(TOKEN).header("accept", "application/json, text/event-stream").header("content-type", "application/json").body(body.to_string());
        if let Some(session) = session {
            request = request.header("mcp-session-id", session);
        }
        request.send()
    };
    let opened = post(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}}), None).await.unwrap();
    let session = opened.headers()["mcp-session-id"].to_str().unwrap().to_string();
    opened.text().await.unwrap();
    post(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), Some(session.clone())).await.unwrap().text().await.unwrap();
    let mut samples = Vec::with_capacity(CALLS);
    for id in 1..=(CALLS + 20) as u64 {
        let started = Instant::now();
        let answer = post(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "shout", "arguments": {"text": "hi"}}}), Some(session.clone())).await.unwrap();
        let text = answer.text().await.unwrap();
        assert!(text.contains("\"result\""), "{text}");
        if id > 20 {
            samples.push(started.elapsed());
        }
    }
    drop(gateway);
    samples
}

async fn client_calls(home: &std::path::Path) -> Vec<Duration> {
    let app = App::open(DataDir::at(home), AppOptions::default()).unwrap();
    let clients = app.start_mcp_servers();
    clients.first_attempts(Duration::from_secs(60)).await;
    let tools = app.tools.with_sources(clients.servers().iter().map(|s| s.clone() as std::sync::Arc<dyn chitin::tools::ToolSource>).collect());
    let ctx = CallContext::default();
    let args = json!({"text": "hi"});
    for _ in 0..20 {
        tools.call("mcp_c_shout", &args, &ctx, None).await.unwrap();
    }
    let mut samples = Vec::with_capacity(CALLS);
    for _ in 0..CALLS {
        let started = Instant::now();
        tools.call("mcp_c_shout", &args, &ctx, None).await.unwrap();
        samples.push(started.elapsed());
    }
    samples
}

fn percentiles(samples: &[Duration]) -> (Duration, Duration) {
    let mut sorted = samples.to_vec();
    sorted.sort();
    (sorted[sorted.len() / 2], sorted[(sorted.len() * 99 / 100).min(sorted.len() - 1)])
}
