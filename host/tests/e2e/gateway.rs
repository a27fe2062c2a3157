//! `chitin gateway` as a user runs it: the real binary on 127.0.0.1 port 0
//! (it prints the bound address), a scripted mock LLM, and reqwest as the
//! OpenAI client.

use crate::common::*;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chitin::session::{JsonlStore, Role, SessionStore as _};
use chitin_testing::{MockLlm, MockReply};
use serde_json::{Value, json};

const TOKEN: &str = "gw-test-token";

/// A running gateway; killed if the test ends without stopping it.
/// This module's way to start a gateway (a trait: `Gateway` comes from
/// chitin-testing and every module of the binary adds its own).
trait Start {
    fn start(home: &Path, mock: &MockLlm, config: &str) -> Gateway;
}

impl Start for Gateway {
    /// Starts `chitin gateway` in `home` over `mock`, with `config` appended
    /// to a config that listens on port 0.
    fn start(home: &Path, mock: &MockLlm, config: &str) -> Gateway {
        std::fs::write(home.join("config.toml"), format!("[agent]\nmodel = \"test-model\"\n[gateway]\nlisten = \"127.0.0.1:0\"\n{config}")).unwrap();
        let mut cmd = chitin(home, &["gateway"]);
        cmd.env("OPENAI_BASE_URL", mock.base_url()).env("CHITIN_GATEWAY_TOKEN", TOKEN);
        Gateway::spawn(cmd)
    }
}

fn client() -> reqwest::Client {
    reqwest::Client::new()
}

async fn post(gw: &Gateway, session: Option<&str>, body: Value) -> (u16, Value) {
    let mut request = client().post(gw.url("/v1/chat/completions")).bearer_auth(TOKEN).json(&body);
    if let Some(session) = session {
        request = request.header("x-chitin-session", session);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

fn user(text: &str) -> Value {
    json!({"model": "whatever", "messages": [{"role": "user", "content": text}]})
}

/// The error shape every OpenAI client parses.
fn assert_error_shape(body: &Value) {
    let error = &body["error"];
    assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()), "{body}");
    assert!(error["type"].is_string(), "{body}");
    assert!(error.as_object().unwrap().contains_key("param") && error.as_object().unwrap().contains_key("code"), "{body}");
}

/// Texts of a recorded model request's messages with `role`.
fn texts(request: &Value, role: &str) -> Vec<String> {
    request["messages"].as_array().unwrap().iter().filter(|m| m["role"] == role).filter_map(|m| m["content"].as_str().map(str::to_string)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_non_streamed_completion_has_the_openai_shape() {
    let mock = MockLlm::start(vec![MockReply::text("Hello there, friend.")]);
    let home = tempfile::tempdir().unwrap();
    let gw = Gateway::start(home.path(), &mock, "");
    let (status, body) = post(&gw, Some("one"), user("hi")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"), "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert!(body["created"].as_i64().unwrap() > 1_700_000_000);
    assert_eq!(body["model"], "test-model", "the configured model answers");
    assert_eq!(body["choices"][0]["message"], json!({"role": "assistant", "content": "Hello there, friend."}));
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(texts(&mock.requests()[0], "user").last().unwrap(), "hi");

    let models: Value = client().get(gw.url("/v1/models")).bearer_auth(TOKEN).send().await.unwrap().json().await.unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], "test-model");

    let missing = client().get(gw.url("/v1/nothing")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(missing.status().as_u16(), 404);
    assert_error_shape(&missing.json().await.unwrap());
    let wrong_method = client().get(gw.url("/v1/chat/completions")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(wrong_method.status().as_u16(), 405);
    assert_eq!(wrong_method.headers()["allow"], "POST");
    assert_error_shape(&wrong_method.json().await.unwrap());
    let huge = json!({"messages": [{"role": "user", "content": "x".repeat(5 * 1024 * 1024)}]});
    let (status, body) = post(&gw, None, huge).await;
    assert_eq!(status, 413, "{body}");
    assert_error_shape(&body);
    assert_eq!(mock.request_count(), 1, "only the good request reached the model");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_completion_arrives_as_chunks_then_done() {
    let text = "The quick brown fox jumps over the lazy dog, twice.";
    let mock = MockLlm::start(vec![MockReply::text(text)]);
    let home = tempfile::tempdir().unwrap();
    let gw = Gateway::start(home.path(), &mock, "");
    let response = client()
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(TOKEN)
        .json(&json!({"stream": true, "stream_options": {"include_usage": true}, "messages": [{"role": "user", "content": "tell me"}], "user": "streamer"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut body = String::new();
    let mut stream = response.bytes_stream();
    while let Some(piece) = futures::StreamExt::next(&mut stream).await {
        body.push_str(std::str::from_utf8(&piece.unwrap()).unwrap());
    }
    let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).map(|e| e.strip_prefix("data: ").expect("every event is a data line")).collect();
    assert_eq!(*events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c["id"] == chunks[0]["id"]), "{body}");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let deltas: Vec<&str> = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).filter(|d| !d.is_empty()).collect();
    assert!(deltas.len() >= 2, "the reply came as several deltas, as the model streamed it: {deltas:?}");
    assert_eq!(deltas.concat(), text);
    let finish: Vec<&Value> = chunks.iter().map(|c| &c["choices"][0]["finish_reason"]).filter(|f| !f.is_null()).collect();
    assert_eq!(finish, [&json!("stop")], "exactly one chunk finishes");
    assert_eq!(mock.requests()[0]["stream"], true, "the model was asked to stream");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_with_a_tool_call_writes_the_workspace() {
    let mock = MockLlm::start(vec![
        MockReply::tool_call("write_file", json!({"path": "notes/api.txt", "content": "written through the API"}).to_string()),
        MockReply::text("Saved it."),
    ]);
    let home = tempfile::tempdir().unwrap();
    let mut gw = Gateway::start(home.path(), &mock, "");
    let (status, body) = post(&gw, Some("tools"), user("save a note")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Saved it.");
    assert_eq!(std::fs::read_to_string(home.path().join("workspace/notes/api.txt")).unwrap(), "written through the API");
    let tool_results = texts(&mock.requests()[1], "tool");
    assert!(tool_results[0].starts_with("wrote"), "{tool_results:?}");
    assert!(gw.sigterm().success(), "{}", gw.stderr());
}

#[tokio::test(flavor = "multi_thread")]
async fn two_sessions_in_parallel_keep_separate_histories() {
    // Echoes the last user message, slowly, so the sessions overlap.
    let mock = MockLlm::with_handler(|body, _| {
        let last = body["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "user").unwrap()["content"].as_str().unwrap().to_string();
        MockReply::text(format!("echo {last}"))
    })
    .with_latency(Duration::from_millis(100));
    let home = tempfile::tempdir().unwrap();
    let gw = Arc::new(Gateway::start(home.path(), &mock, ""));
    let conversation = |session: &'static str| {
        let gw = gw.clone();
        tokio::spawn(async move {
            let mut answers = Vec::new();
            for n in 1..=2 {
                let (status, body) = post(&gw, Some(session), user(&format!("{session}{n}"))).await;
                assert_eq!(status, 200, "{body}");
                answers.push(body["choices"][0]["message"]["content"].as_str().unwrap().to_string());
            }
            answers
        })
    };
    let (a, b) = (conversation("A"), conversation("B"));
    assert_eq!(a.await.unwrap(), ["echo A1", "echo A2"]);
    assert_eq!(b.await.unwrap(), ["echo B1", "echo B2"]);
    let requests = mock.requests();
    let second_of = |s: &str| requests.iter().find(|r| texts(r, "user").last().unwrap().ends_with(&format!("{s}2"))).unwrap().clone();
    let (a2, b2) = (texts(&second_of("A"), "user"), texts(&second_of("B"), "user"));
    assert!(a2.iter().any(|t| t.ends_with("A1")) && !a2.iter().any(|t| t.ends_with("B1")), "{a2:?}");
    assert!(b2.iter().any(|t| t.ends_with("B1")) && !b2.iter().any(|t| t.ends_with("A1")), "{b2:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_with_its_own_history_runs_statelessly() {
    let mock = MockLlm::start(vec![MockReply::text("Your name is Ada.")]);
    let home = tempfile::tempdir().unwrap();
    let mut gw = Gateway::start(home.path(), &mock, "");
    let body = json!({"messages": [
        {"role": "system", "content": "client system prompt"},
        {"role": "user", "content": "my name is Ada"},
        {"role": "assistant", "content": "Hello Ada"},
        {"role": "user", "content": "what is my name?"}]});
    let (status, answer) = post(&gw, None, body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], "Your name is Ada.");
    let request = &mock.requests()[0];
    let users = texts(request, "user");
    assert_eq!(users.len(), 2, "{users:?}");
    assert_eq!(users[0], "my name is Ada");
    assert!(users[1].contains("what is my name?"), "{users:?}");
    assert_eq!(texts(request, "assistant"), ["Hello Ada"]);
    assert!(!request.to_string().contains("client system prompt"), "the agent's own system prompt applies");
    assert!(gw.sigterm().success(), "{}", gw.stderr());
    let stored = std::fs::read_dir(home.path().join("sessions")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(stored, 0, "a stateless request persists no session");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_400_in_the_openai_shape() {
    let mock = MockLlm::start(Vec::<MockReply>::new());
    let home = tempfile::tempdir().unwrap();
    let gw = Gateway::start(home.path(), &mock, "");
    let raw = client().post(gw.url("/v1/chat/completions")).bearer_auth(TOKEN).header("content-type", "application/json").body("{\"messages\": [").send().await.unwrap();
    assert_eq!(raw.status().as_u16(), 400);
    let body: Value = raw.json().await.unwrap();
    assert_error_shape(&body);
    assert_eq!(body["error"]["code"], "invalid_json");
    for (request, param) in [
        (json!({"model": "m"}), "messages"),
        (json!({"messages": "hi"}), "messages"),
        (json!({"messages": [{"role": "user", "content": 5}]}), "messages[0].content"),
        (json!({"messages": [{"role": "user", "content": "x"}], "stream": "yes"}), "stream"),
    ] {
        let (status, body) = post(&gw, None, request.clone()).await;
        assert_eq!(status, 400, "{request}: {body}");
        assert_error_shape(&body);
        assert_eq!(body["error"]["param"], param, "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    assert_eq!(mock.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_or_wrong_token_gets_401() {
    let mock = MockLlm::start(vec![MockReply::text("never")]);
    let home = tempfile::tempdir().unwrap();
    let gw = Gateway::start(home.path(), &mock, "");
    let none = client().post(gw.url("/v1/chat/completions")).json(&user("hi")).send().await.unwrap();
    assert_eq!(none.status().as_u16(), 401);
    let body: Value = none.json().await.unwrap();
    assert_error_shape(&body);
    assert_eq!(body["error"]["type"], "authentication_error");
    let wrong = client().post(gw.url("/v1/chat/completions")).bearer_auth("gw-test-tokem").json(&user("hi")).send().await.unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    assert_error_shape(&wrong.json().await.unwrap());
    let models = client().get(gw.url("/v1/models")).send().await.unwrap();
    assert_eq!(models.status().as_u16(), 401);
    assert_eq!(mock.request_count(), 0, "nothing reached the model");
}

#[test]
fn without_a_token_the_gateway_refuses_to_start_unless_loopback_and_off() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), "[gateway]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let out = run_within(chitin(home.path(), &["gateway"]).env_remove("CHITIN_GATEWAY_TOKEN").env("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("CHITIN_GATEWAY_TOKEN") && stderr(&out).contains("auth_token = \"\""), "{}", stderr(&out));
    let status = run(chitin(home.path(), &["status"]).env_remove("CHITIN_GATEWAY_TOKEN"));
    assert!(stdout(&status).contains("gateway:    http://127.0.0.1:0 (auth token: MISSING"), "{}", stdout(&status));
    let status = run(chitin(home.path(), &["status"]).env("CHITIN_GATEWAY_TOKEN", "t"));
    assert!(stdout(&status).contains("(auth token: set)"), "{}", stdout(&status));

    std::fs::write(home.path().join("config.toml"), "[gateway]\nlisten = \"0.0.0.0:0\"\nauth_token = \"\"\n").unwrap();
    let out = run_within(chitin(home.path(), &["gateway"]).env("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"), Duration::from_secs(60));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("loopback"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn auth_off_on_loopback_serves_without_a_token() {
    let mock = MockLlm::start(vec![MockReply::text("open")]);
    let home = tempfile::tempdir().unwrap();
    let gw = Gateway::start(home.path(), &mock, "auth_token = \"\"\n");
    let response = client().post(gw.url("/v1/chat/completions")).json(&user("hi")).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(gw.stderr().contains("NO authentication"), "{}", gw.stderr());
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_finishes_the_running_turn_refuses_new_ones_and_exits_0() {
    let mock = MockLlm::start(vec![MockReply::text("Finished anyway.")]).with_latency(Duration::from_millis(1500));
    let home = tempfile::tempdir().unwrap();
    let mut gw = Gateway::start(home.path(), &mock, "");
    let running = {
        let url = gw.url("/v1/chat/completions");
        tokio::spawn(async move {
            let response = client().post(url).bearer_auth(TOKEN).header("x-chitin-session", "last").json(&user("one more thing")).send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap())
        })
    };
    while mock.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // SAFETY: kill(2) on our own child's pid.
    gw.signal_term();
    // Intake stops: a new request gets 503 (polled until the signal lands).
    let refused = loop {
        let response = client().get(gw.url("/v1/models")).bearer_auth(TOKEN).send().await.unwrap();
        if response.status().as_u16() == 503 {
            break response.json::<Value>().await.unwrap();
        }
        assert!(!running.is_finished(), "the drain began before the running turn finished");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_error_shape(&refused);
    assert_eq!(refused["error"]["code"], "shutting_down");
    let (status, body) = running.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Finished anyway.");
    let exit = gw.wait_exit();
    assert!(exit.success(), "{exit:?}: {}", gw.stderr());
    assert!(gw.stderr().contains("sessions flushed in"), "{}", gw.stderr());
    let session = JsonlStore::new(home.path().join("sessions")).load("api:last").unwrap();
    let shape: Vec<(Role, String)> = session.messages.iter().map(|m| (m.role, m.text().to_string())).collect();
    assert_eq!(shape, [(Role::User, "one more thing".to_string()), (Role::Assistant, "Finished anyway.".to_string())]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_that_goes_away_stops_its_turn() {
    let mock = MockLlm::start(vec![MockReply::Hang, MockReply::text("Back again.")]);
    let home = tempfile::tempdir().unwrap();
    let gw = Gateway::start(home.path(), &mock, "");
    let body = json!({"stream": true, "messages": [{"role": "user", "content": "take forever"}]});
    let response = client().post(gw.url("/v1/chat/completions")).bearer_auth(TOKEN).header("x-chitin-session", "gone").json(&body).send().await.unwrap();
    let mut stream = response.bytes_stream();
    let first = futures::StreamExt::next(&mut stream).await.unwrap().unwrap();
    assert!(std::str::from_utf8(&first).unwrap().contains("\"role\":\"assistant\""));
    while mock.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    drop(stream); // the client disconnects while the model hangs
    // If the turn were not stopped, this would wait on the session behind
    // the hung one (the guard below turns that into a failure, not a hang).
    let next = tokio::time::timeout(Duration::from_secs(60), post(&gw, Some("gone"), user("are you there?"))).await;
    let (status, answer) = next.expect("the hung turn was stopped when its client went away");
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], "Back again.");
    let history = texts(&mock.requests()[1], "user");
    assert!(history[0].contains("take forever"), "the stopped turn's message is kept: {history:?}");
}

/// A tool's progress goes to the bus as `Progress` events; OpenAI's stream
/// has no such thing, so the API leaves them out: the stream is the reply's
/// chunks and `[DONE]`, and nothing of the plugin's progress text.
#[tokio::test(flavor = "multi_thread")]
async fn tool_progress_stays_out_of_the_api_stream() {
    let mock = MockLlm::start(vec![MockReply::tool_call("echo", json!({"text": "hi"}).to_string()), MockReply::text("echoed it")]);
    let home = tempfile::tempdir().unwrap();
    let install = run(chitin(home.path(), &["plugin", "install", HOSTILE_WASM]));
    assert!(install.status.success(), "{}", stderr(&install));
    let mut gw = Gateway::start(home.path(), &mock, "");
    let response = client()
        .post(gw.url("/v1/chat/completions"))
        .bearer_auth(TOKEN)
        .json(&json!({"stream": true, "messages": [{"role": "user", "content": "echo hi"}], "user": "progress"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body = response.text().await.unwrap();
    assert!(!body.contains("echoing") && !body.contains("running") && !body.contains("call_id"), "{body}");
    let events: Vec<&str> = body.split("\n\n").filter(|e| !e.is_empty()).map(|e| e.strip_prefix("data: ").expect("data lines only")).collect();
    assert_eq!(*events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"), "{body}");
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "echoed it");
    assert_eq!(texts(&mock.requests()[1], "tool"), ["hi"], "the tool ran");
    assert!(gw.sigterm().success(), "{}", gw.stderr());
}

/// The gateway's address as a socket address.
fn socket_addr(gw: &Gateway) -> std::net::SocketAddr {
    gw.base().strip_prefix("http://").unwrap().parse().unwrap()
}

/// `chitin gateway` under `ulimit -n {nofile}` (the shell execs it, so the
/// limit is the gateway's own), with the same environment as [`Gateway::start`].
fn start_with_nofile(home: &Path, mock: &MockLlm, config: &str, nofile: u32) -> Gateway {
    std::fs::write(home.join("config.toml"), format!("[agent]\nmodel = \"test-model\"\n[gateway]\nlisten = \"127.0.0.1:0\"\n{config}")).unwrap();
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c").arg(format!("ulimit -n {nofile} && exec \"$0\" gateway")).arg(CHITIN);
    cmd.env("CHITIN_HOME", home).env_remove("OPENAI_API_KEY").env_remove("CHITIN_MODEL");
    cmd.env("OPENAI_BASE_URL", mock.base_url()).env("CHITIN_GATEWAY_TOKEN", TOKEN);
    Gateway::spawn(cmd)
}

/// How a hostile connection ended.
#[derive(Debug)]
struct Ended {
    /// From connect to the server's close.
    after: Duration,
    /// What the server wrote before closing.
    answer: String,
    /// The bytes the client managed to send.
    sent: usize,
}

/// Connects from `from` (any 127.0.0.0/8 address: the per-address cap
/// counts it apart from the test's own 127.0.0.1), writes `head`, then one
/// byte of `trickle` per second until the server closes the connection (or
/// `give_up` passes). Never finishes the request on its own.
async fn trickle(from: std::net::IpAddr, to: std::net::SocketAddr, head: Vec<u8>, slow: Vec<u8>, give_up: Duration) -> Ended {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::new(from, 0)).unwrap();
    let started = std::time::Instant::now();
    let stream = socket.connect(to).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let mut sent = 0;
    if write.write_all(&head).await.is_ok() {
        sent += head.len();
    }
    let reader = tokio::spawn(async move {
        let mut answer = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
        answer
    });
    let mut next = slow.into_iter();
    let mut reader = std::pin::pin!(reader);
    loop {
        tokio::select! {
            answer = &mut reader => {
                return Ended { after: started.elapsed(), answer: String::from_utf8_lossy(&answer.unwrap()).into_owned(), sent };
            }
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                assert!(started.elapsed() < give_up, "the server held a stalled connection for {give_up:?}");
                if let Some(byte) = next.next() && write.write_all(&[byte]).await.is_ok() {
                    sent += 1;
                }
            }
        }
    }
}

/// Issue 18 (5): slowloris on heads, under `ulimit -n 128`. 150 connections
/// from one address each send part of a request head and then a byte a
/// second: the server takes 32 (its per-address cap) and closes the other
/// 118 at once with a 503, so descriptors never run out; the 32 are held
/// (the server really read them) until the header timeout closes them.
/// Meanwhile an authorized client on another address gets its answers,
/// a model turn included. A keep-alive connection left idle is closed by
/// the same timer.
#[tokio::test(flavor = "multi_thread")]
async fn slowloris_heads_are_capped_per_address_and_closed_by_the_header_timeout() {
    const HEADER_TIMEOUT: u64 = 4;
    let mock = MockLlm::start(vec![MockReply::text("served beside the stalls")]);
    let home = tempfile::tempdir().unwrap();
    let gw = start_with_nofile(home.path(), &mock, &format!("header_timeout_secs = {HEADER_TIMEOUT}\n"), 128);
    let to = socket_addr(&gw);
    let attacker: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let head = format!("GET /v1/models HTTP/1.1\r\nHost: {to}\r\nAuthorization: Bearer {TOKEN}\r\nX-Slow: ").into_bytes();
    let attack_started = std::time::Instant::now();
    let attack: Vec<_> = (0..150).map(|_| tokio::spawn(trickle(attacker, to, head.clone(), vec![b'a'; 60], Duration::from_secs(30)))).collect();
    // While the stalled connections are open: a real client is served.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let models = client().get(gw.url("/v1/models")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(models.status().as_u16(), 200);
    let (status, body) = post(&gw, Some("beside"), user("hello under attack")).await;
    assert_eq!((status, body["choices"][0]["message"]["content"].as_str()), (200, Some("served beside the stalls")), "{body}");
    let served_after = attack_started.elapsed();
    let mut held = Vec::new();
    let mut refused = 0;
    for ended in attack {
        let ended = ended.await.unwrap();
        if ended.answer.starts_with("HTTP/1.1 503") {
            assert!(ended.answer.contains("max_connections_per_address"), "{ended:?}");
            assert!(ended.after < Duration::from_secs(2), "refused at once: {ended:?}");
            refused += 1;
        } else {
            held.push(ended);
        }
    }
    assert_eq!((held.len(), refused), (32, 118), "32 held, the rest refused: {held:?}");
    for ended in &held {
        assert!(ended.answer.is_empty(), "no answer to a head that never ended: {ended:?}");
        assert!(ended.sent > head.len(), "the connection was open and read while it trickled: {ended:?}");
        let limit = Duration::from_secs(HEADER_TIMEOUT);
        assert!(ended.after >= limit - Duration::from_millis(500) && ended.after <= limit + Duration::from_secs(3), "closed by the header timeout: {ended:?}");
    }
    // Each stall's clock starts at or after `attack_started`.
    let first_close = held.iter().map(|e| e.after).min().unwrap();
    let last_close = held.iter().map(|e| e.after).max().unwrap();
    eprintln!("slowloris heads: {} held, closed after {first_close:?}..{last_close:?}; {refused} refused at once; client served after {served_after:?}", held.len());
    assert!(served_after < first_close, "the client was served ({served_after:?}) while every stall was still open (first closed after {first_close:?})");

    // Keep-alive: one request answered, then silence; the server closes.
    let idle = trickle("127.0.0.3".parse().unwrap(), to, format!("GET /v1/models HTTP/1.1\r\nHost: {to}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n").into_bytes(), Vec::new(), Duration::from_secs(30)).await;
    assert!(idle.answer.starts_with("HTTP/1.1 200"), "{idle:?}");
    assert!(idle.after >= Duration::from_secs(HEADER_TIMEOUT) - Duration::from_millis(500) && idle.after <= Duration::from_secs(HEADER_TIMEOUT + 3), "{idle:?}");

    let err = gw.stderr();
    assert!(err.contains("at most 64 connections (not 256): the open-file limit is 128"), "{err}");
    assert!(!err.contains("accept failed") && !err.contains("Too many open files"), "descriptors never ran out: {err}");
    assert!(err.matches("over a cap since the last report").count() <= 2, "refusals are summarised, not logged one by one: {err}");
}

/// Issue 18 (5): slowloris on bodies. First the same request sent at once
/// runs a turn (the model sees its sentinel); then five POSTs whose bodies
/// arrive a byte a second are answered 408 and closed within the body
/// timeout, and the model never sees their sentinel. An authorized client
/// is served meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn slowloris_bodies_are_cut_off_by_the_body_timeout() {
    const BODY_TIMEOUT: u64 = 3;
    let mock = MockLlm::with_handler(|_, _| MockReply::text("ok"));
    let home = tempfile::tempdir().unwrap();
    let gw = start_with_nofile(home.path(), &mock, &format!("body_timeout_secs = {BODY_TIMEOUT}\n"), 128);
    let to = socket_addr(&gw);
    let (status, body) = post(&gw, None, user("FAST-BODY-SENTINEL")).await;
    assert_eq!(status, 200, "{body}");
    assert!(mock.requests()[0].to_string().contains("FAST-BODY-SENTINEL"), "sent at once, the request runs a turn");

    let slow = user("SLOW-BODY-SENTINEL").to_string().into_bytes();
    let head = format!("POST /v1/chat/completions HTTP/1.1\r\nHost: {to}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n", slow.len());
    let stalls: Vec<_> = (0..5).map(|_| tokio::spawn(trickle("127.0.0.2".parse().unwrap(), to, head.clone().into_bytes(), slow.clone(), Duration::from_secs(30)))).collect();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let models = client().get(gw.url("/v1/models")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(models.status().as_u16(), 200, "served beside the stalled bodies");
    for stall in stalls {
        let ended = stall.await.unwrap();
        eprintln!("slowloris body: 408 after {:?}, {} body bytes in", ended.after, ended.sent - head.len());
        assert!(ended.answer.starts_with("HTTP/1.1 408"), "{ended:?}");
        assert!(ended.answer.to_ascii_lowercase().contains("connection: close") && ended.answer.contains("body_timeout_secs"), "{ended:?}");
        assert!(ended.sent > head.len() && ended.sent < head.len() + slow.len(), "part of the body went in, not all: {ended:?}");
        assert!(ended.after >= Duration::from_secs(BODY_TIMEOUT) && ended.after <= Duration::from_secs(BODY_TIMEOUT + 3), "{ended:?}");
    }
    assert_eq!(mock.request_count(), 1, "no trickled body reached the model");
    assert!(!mock.requests().iter().any(|r| r.to_string().contains("SLOW-BODY-SENTINEL")));
}

/// Issue 18 (6): without a token, a web page the user visits may send
/// "simple" cross-site requests (a `text/plain` POST needs no preflight)
/// and, by DNS rebinding, read the gateway under its own name. First the
/// same requests without a foreign `Origin` run turns (the model sees the
/// sentinels) and the history is readable; then with `Origin:
/// https://evil.example` (or `Sec-Fetch-Site: cross-site`) they are refused
/// (403) and nothing reaches the model, and every route refuses a `Host`
/// that does not name the gateway. `allowed_hosts` names one more.
#[tokio::test(flavor = "multi_thread")]
async fn auth_less_mode_refuses_cross_site_writes_and_foreign_hosts() {
    let mock = MockLlm::with_handler(|_, _| MockReply::text("ok"));
    let home = tempfile::tempdir().unwrap();
    let gw = Gateway::start(home.path(), &mock, "auth_token = \"\"\nallowed_hosts = [\"chitin.test\"]\n");
    let port = socket_addr(&gw).port();
    let seen = |sentinel: &str| mock.requests().iter().any(|r| r.to_string().contains(sentinel));
    let plain = |path: &str, body: Value, origin: Option<&str>| {
        let mut request = client().post(gw.url(path)).header("content-type", "text/plain").body(body.to_string());
        if let Some(origin) = origin {
            request = request.header("origin", origin);
        }
        request.send()
    };
    // The API: a text/plain POST runs a turn...
    let response = plain("/v1/chat/completions", user("CSRF-API-1"), None).await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(seen("CSRF-API-1"), "without a foreign Origin the request runs a turn");
    // ...but not from another origin.
    let count = mock.request_count();
    for origin in ["https://evil.example", "null", &format!("http://evil.example:{port}")] {
        let refused = plain("/v1/chat/completions", user("CSRF-API-2"), Some(origin)).await.unwrap();
        assert_eq!(refused.status().as_u16(), 403, "{origin}");
        let body: Value = refused.json().await.unwrap();
        assert_error_shape(&body);
        assert_eq!(body["error"]["code"], "forbidden_origin");
    }
    let marked = client().post(gw.url("/v1/chat/completions")).header("sec-fetch-site", "cross-site").body(user("CSRF-API-2").to_string()).send().await.unwrap();
    assert_eq!(marked.status().as_u16(), 403);
    assert_eq!(mock.request_count(), count, "nothing reached the model");

    // The web chat: the same.
    let send = |text: &str| json!({"session": "csrf", "text": text});
    assert_eq!(plain("/chat/send", send("CSRF-WEB-1"), None).await.unwrap().status().as_u16(), 202);
    gw.wait_for("the web turn", || seen("CSRF-WEB-1"));
    let refused = plain("/chat/send", send("CSRF-WEB-2"), Some("https://evil.example")).await.unwrap();
    assert_eq!(refused.status().as_u16(), 403);
    assert!(refused.text().await.unwrap().contains("evil.example"), "the refusal names the origin");
    assert_eq!(plain("/chat/stop", json!({"session": "csrf"}), Some("https://evil.example")).await.unwrap().status().as_u16(), 403);
    // The page's own origin is served; its turn comes after the refused one
    // would have, so once it is seen the refused one never ran.
    assert_eq!(plain("/chat/send", send("CSRF-WEB-3"), Some(&format!("http://127.0.0.1:{port}"))).await.unwrap().status().as_u16(), 202);
    gw.wait_for("the same-origin web turn", || seen("CSRF-WEB-3"));
    assert!(!seen("CSRF-WEB-2"), "the cross-site message never reached the model");

    // DNS rebinding: the history reads under the gateway's own names...
    let history = |host: &str| client().get(gw.url("/chat/history?session=csrf")).header("host", host).send();
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}"), format!("chitin.test:{port}")] {
        let response = history(&host).await.unwrap();
        assert_eq!(response.status().as_u16(), 200, "{host}");
        assert!(response.text().await.unwrap().contains("CSRF-WEB-1"), "{host}");
    }
    // ...and under no other, on any route.
    let response = history(&format!("evil.example:{port}")).await.unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let text = response.text().await.unwrap();
    assert!(!text.contains("CSRF-WEB-1") && text.contains("DNS rebinding"), "{text}");
    for path in ["/", "/chat/app.js", "/chat/sessions", "/v1/models"] {
        let response = client().get(gw.url(path)).header("host", format!("evil.example:{port}")).send().await.unwrap();
        assert_eq!(response.status().as_u16(), 403, "{path}");
    }
    let err = gw.stderr();
    assert!(err.contains("request refused (403)"), "{err}");
}
