//! `chitin gateway` as a user runs it: the real binary on 127.0.0.1 port 0
//! (it prints the bound address), a scripted mock LLM, and reqwest as the
//! OpenAI client.

mod common;
use common::*;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chitin::session::{JsonlStore, Role, SessionStore as _};
use chitin::testing::{MockLlm, MockReply};
use serde_json::{Value, json};

const TOKEN: &str = "gw-test-token";

/// A running gateway; killed if the test ends without stopping it.
impl Gateway {
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
