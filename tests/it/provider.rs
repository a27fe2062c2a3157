//! `OpenAiProvider` against `MockLlm`, offline: answers (plain and
//! streamed), tool calls, finish reasons, and the retry rules of spec §9.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chitin::provider::{Anthropic, AnthropicProvider, ChatRequest, ChatResponse, FinishReason, OpenAiOptions, OpenAiProvider, Provider, RetryPolicy, StreamSink};
use chitin::session::Message;
use chitin_testing::{MockLlm, MockReply, Script};
use serde_json::json;

fn provider(mock: &MockLlm) -> OpenAiProvider {
    provider_with(mock, |_| {})
}

fn provider_with(mock: &MockLlm, change: impl FnOnce(&mut OpenAiOptions)) -> OpenAiProvider {
    let mut options = OpenAiOptions {
        base_url: mock.base_url(),
        api_key: Some("sk-test".into()),
        request_timeout: Duration::from_secs(10),
        retry: RetryPolicy::fast(),
        stream: true,
        vision: true,
    };
    change(&mut options);
    OpenAiProvider::new(options).expect("provider")
}

fn request() -> ChatRequest {
    ChatRequest {
        model: "mock-model".into(),
        messages: vec![Message::system("be brief"), Message::user("hi").with_meta("timestamp", "2025-01-01")],
        tools: Arc::from(Vec::new()),
        max_tokens: 256,
        temperature: None,
    }
}

fn with_tools() -> ChatRequest {
    let tool = json!({"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}});
    ChatRequest { tools: Arc::from(vec![tool]), ..request() }
}

/// A sink that records every delta.
fn recorder() -> (StreamSink, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink_seen = seen.clone();
    (Arc::new(move |piece: &str| sink_seen.lock().unwrap().push(piece.to_string())), seen)
}

fn error_message(response: &ChatResponse) -> String {
    assert!(response.is_error(), "expected an error, got {response:?}");
    response.error.as_ref().expect("error set").message.clone()
}

#[tokio::test]
async fn plain_text_answer() {
    let mock = MockLlm::start(MockReply::text("Hello there, how can I help?"));
    let response = provider(&mock).chat(&request(), None).await;
    assert_eq!(response.content.as_deref(), Some("Hello there, how can I help?"));
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert!(response.tool_calls.is_empty() && response.error.is_none());
    assert!(response.usage.prompt_tokens > 0 && response.usage.completion_tokens > 0, "{:?}", response.usage);

    let sent = mock.requests();
    assert_eq!(sent.len(), 1);
    let body = &sent[0];
    assert_eq!(body["model"], "mock-model");
    assert_eq!(body["stream"], false);
    assert_eq!(body["max_tokens"], 256);
    assert_eq!(body["messages"][1], json!({"role": "user", "content": "hi"}), "annotations stripped");
    assert!(body.get("tools").is_none() && body.get("tool_choice").is_none() && body.get("stream_options").is_none());
}

#[tokio::test]
async fn streamed_text_reaches_the_sink_in_order() {
    let mock = MockLlm::start(MockReply::text("The quick brown fox jumps over the lazy dog."));
    let (sink, seen) = recorder();
    let response = provider(&mock).chat(&request(), Some(sink)).await;
    assert_eq!(response.content.as_deref(), Some("The quick brown fox jumps over the lazy dog."));
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    assert!(response.usage.prompt_tokens > 0, "usage from the final chunk");
    let seen = seen.lock().unwrap().clone();
    assert!(seen.len() > 1, "several deltas: {seen:?}");
    assert_eq!(seen.concat(), "The quick brown fox jumps over the lazy dog.");
    let body = &mock.requests()[0];
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
}

#[tokio::test]
async fn streaming_off_or_without_sink_is_a_plain_request() {
    let mock = MockLlm::start(Script::default().or_else(MockReply::text("ok")));
    let (sink, seen) = recorder();
    let response = provider_with(&mock, |o| o.stream = false).chat(&request(), Some(sink)).await;
    assert_eq!(response.content.as_deref(), Some("ok"));
    assert!(seen.lock().unwrap().is_empty());
    provider(&mock).chat(&request(), None).await;
    assert!(mock.requests().iter().all(|r| r["stream"] == false));
}

#[tokio::test]
async fn tool_calls_are_parsed_plain_and_streamed() {
    let calls = vec![
        ("read_file".to_string(), r#"{"path": "notes.md"}"#.to_string()),
        ("greet".to_string(), "{not json".to_string()),
    ];
    let mock = MockLlm::start([
        MockReply::ToolCalls(calls.clone()),
        MockReply::TextAndToolCalls("Let me look.".into(), calls.clone()),
    ]);
    let provider = provider(&mock);

    let plain = provider.chat(&with_tools(), None).await;
    let (sink, seen) = recorder();
    let streamed = provider.chat(&with_tools(), Some(sink)).await;

    for response in [&plain, &streamed] {
        assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
        let got: Vec<(String, String)> =
            response.tool_calls.iter().map(|c| (c.function.name.clone(), c.function.arguments.clone())).collect();
        assert_eq!(got, calls, "names and raw arguments");
        assert!(response.tool_calls.iter().all(|c| c.kind == "function"));
    }
    assert_eq!(plain.content, None);
    let ids: Vec<&str> = plain.tool_calls.iter().chain(&streamed.tool_calls).map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["call_1", "call_2", "call_3", "call_4"]);
    assert_eq!(streamed.content.as_deref(), Some("Let me look."));
    assert_eq!(seen.lock().unwrap().concat(), "Let me look.");

    let body = &mock.requests()[0];
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(body["tools"][0]["function"]["name"], "read_file");
}

#[tokio::test]
async fn length_and_blank_answers() {
    let mock = MockLlm::start([MockReply::Length("partial".into()), MockReply::Blank, MockReply::Length("part".into()), MockReply::Blank]);
    let provider = provider(&mock);
    for stream in [false, true] {
        let sink = stream.then(|| recorder().0);
        let length = provider.chat(&request(), sink.clone()).await;
        assert_eq!(length.finish_reason, Some(FinishReason::Length), "stream: {stream}");
        assert!(length.content.is_some_and(|c| c.starts_with("part")));
        let blank = provider.chat(&request(), sink).await;
        assert_eq!(blank.finish_reason, Some(FinishReason::Stop));
        assert_eq!(blank.content.as_deref(), Some(""), "stream: {stream}");
        assert!(!blank.is_error());
    }
}

#[tokio::test]
async fn rate_limit_is_retried_honouring_retry_after() {
    let mock = MockLlm::start([
        MockReply::Status {
            status: 429,
            body: r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#.into(),
            retry_after: Some("1".into()),
        },
        MockReply::text("after the wait"),
    ]);
    let started = Instant::now();
    let response = provider(&mock).chat(&request(), None).await;
    assert_eq!(response.content.as_deref(), Some("after the wait"));
    assert_eq!(mock.request_count(), 2);
    // RetryPolicy::fast() would wait 1 ms; Retry-After said 1 s.
    assert!(started.elapsed() >= Duration::from_millis(950), "waited {:?}", started.elapsed());

    let mock = MockLlm::start([
        MockReply::Status { status: 429, body: "slow down".into(), retry_after: Some("0".into()) },
        MockReply::text("ok"),
    ]);
    let (sink, _) = recorder();
    let response = provider(&mock).chat(&request(), Some(sink)).await;
    assert_eq!(response.content.as_deref(), Some("ok"));
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test]
async fn server_errors_are_retried_then_succeed() {
    let mock = MockLlm::start([MockReply::api_error(500, "boom"), MockReply::api_error(503, "busy"), MockReply::text("fine")]);
    let response = provider(&mock).chat(&request(), None).await;
    assert_eq!(response.content.as_deref(), Some("fine"));
    assert_eq!(mock.request_count(), 3);
    let bodies = mock.requests();
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "every attempt sends the same request");
}

#[tokio::test]
async fn persistent_server_errors_give_up_after_four_attempts() {
    let mock = MockLlm::start(Script::default().or_else(MockReply::api_error(500, "internal meltdown")));
    let response = provider(&mock).chat(&request(), None).await;
    let message = error_message(&response);
    assert!(message.starts_with("the model provider is unavailable after 4 attempts"), "{message}");
    assert!(message.contains("HTTP 500") && message.contains("internal meltdown"), "{message}");
    let error = response.error.unwrap();
    assert_eq!(error.status, Some(500));
    assert!(error.retryable);
    assert_eq!(mock.request_count(), 4);
}

#[tokio::test]
async fn payment_required_is_not_retried() {
    let mock = MockLlm::start(Script::default().or_else(MockReply::api_error(402, "Insufficient credits")));
    let response = provider(&mock).chat(&request(), None).await;
    let message = error_message(&response);
    assert!(message.contains("check your billing") && message.contains("Insufficient credits"), "{message}");
    assert_eq!(response.error.as_ref().unwrap().status, Some(402));
    assert!(!response.error.unwrap().retryable);
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn quota_429_is_not_retried() {
    let body = json!({"error": {"message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota", "code": "insufficient_quota"}});
    let mock = MockLlm::start(Script::default().or_else(MockReply::Status {
        status: 429,
        body: body.to_string(),
        retry_after: Some("0".into()),
    }));
    let response = provider(&mock).chat(&request(), None).await;
    let message = error_message(&response);
    assert!(message.contains("check your billing") && message.contains("exceeded your current quota"), "{message}");
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test]
async fn client_errors_are_explained_and_not_retried() {
    let mock = MockLlm::start([
        MockReply::api_error(401, "Incorrect API key provided: sk-test."),
        MockReply::api_error(400, "max_tokens is too large: 999999"),
        MockReply::api_error(404, "The model `mock-model` does not exist"),
    ]);
    let provider = provider(&mock);
    let auth = error_message(&provider.chat(&request(), None).await);
    assert!(auth.contains("check your API key"), "{auth}");
    let bad = error_message(&provider.chat(&request(), None).await);
    assert!(bad.contains("max_tokens is too large: 999999"), "{bad}");
    let missing = error_message(&provider.chat(&request(), None).await);
    assert!(missing.starts_with("model or endpoint not found: The model `mock-model` does not exist"), "{missing}");
    assert_eq!(mock.request_count(), 3);
}

#[tokio::test]
async fn hung_requests_time_out_per_attempt_then_give_up() {
    let mock = MockLlm::start(Script::default().or_else(MockReply::Hang));
    let provider = provider_with(&mock, |o| o.request_timeout = Duration::from_millis(200));
    let started = Instant::now();
    let (sink, _) = recorder();
    let response = provider.chat(&request(), Some(sink)).await;
    let elapsed = started.elapsed();
    let message = error_message(&response);
    assert!(message.contains("after 4 attempts") && message.contains("did not answer within 200ms"), "{message}");
    assert_eq!(mock.request_count(), 4);
    assert!(elapsed >= Duration::from_millis(800) && elapsed < Duration::from_secs(5), "took {elapsed:?}");
}

#[tokio::test]
async fn malformed_answers_are_errors_and_retried() {
    let mock = MockLlm::start([
        MockReply::Malformed("<html>502 Bad Gateway</html>".into()),
        MockReply::Raw(json!({"id": "x", "object": "chat.completion"})),
        MockReply::Malformed("{\"choices\": [{\"message\": ".into()),
        MockReply::Malformed(String::new()),
    ]);
    let response = provider(&mock).chat(&request(), None).await;
    let message = error_message(&response);
    assert!(message.contains("after 4 attempts") && message.contains("unreadable answer"), "{message}");
    assert_eq!(mock.request_count(), 4);

    // Then a good answer after one bad one.
    let mock = MockLlm::start([MockReply::Raw(json!({"choices": []})), MockReply::text("recovered")]);
    let response = provider(&mock).chat(&request(), None).await;
    assert_eq!(response.content.as_deref(), Some("recovered"));
}

#[tokio::test]
async fn a_stream_broken_after_text_is_not_retried() {
    let mock = MockLlm::start([MockReply::Truncated("Half an answer".into()), MockReply::text("second try")]);
    let (sink, seen) = recorder();
    let response = provider(&mock).chat(&request(), Some(sink)).await;
    let message = error_message(&response);
    assert!(!message.contains("attempts"), "{message}");
    assert_eq!(seen.lock().unwrap().concat(), "Half an answer");
    assert_eq!(response.content.as_deref(), Some("Half an answer"), "the partial text is reported");
    assert_eq!(mock.request_count(), 1, "no second attempt after text reached the user");
}

#[tokio::test]
async fn a_broken_plain_answer_is_retried() {
    let mock = MockLlm::start([MockReply::Truncated("Half an answer".into()), MockReply::text("second try")]);
    let response = provider(&mock).chat(&request(), None).await;
    assert_eq!(response.content.as_deref(), Some("second try"));
    assert_eq!(mock.request_count(), 2);
}

/// The same mock, spoken to as the Anthropic Messages API.
fn anthropic(mock: &MockLlm, stream: bool) -> AnthropicProvider {
    let options = OpenAiOptions {
        base_url: mock.base_url(),
        api_key: Some("sk-ant-test".into()),
        request_timeout: Duration::from_secs(10),
        retry: RetryPolicy::fast(),
        stream,
        vision: true,
    };
    AnthropicProvider::anthropic(Anthropic::default(), options).expect("provider")
}

#[tokio::test]
async fn a_broken_anthropic_answer_is_rendered_in_its_own_shape() {
    // Streamed: the partial text reached the user through Anthropic's
    // `text_delta` events, so the turn is not retried.
    let mock = MockLlm::start([MockReply::Truncated("Half an answer".into()), MockReply::text("second try")]);
    let (sink, seen) = recorder();
    let response = anthropic(&mock, true).chat(&request(), Some(sink)).await;
    let message = error_message(&response);
    assert!(!message.contains("attempts"), "{message}");
    assert_eq!(seen.lock().unwrap().concat(), "Half an answer", "the deltas were Anthropic events the client read");
    assert_eq!(response.content.as_deref(), Some("Half an answer"));
    assert_eq!(mock.request_count(), 1);
    assert!(mock.requests()[0]["system"].is_array(), "the request was an Anthropic one");

    // Plain: half a Messages body does not parse, and is retried.
    let mock = MockLlm::start([MockReply::Truncated("Half an answer".into()), MockReply::text("second try")]);
    let response = anthropic(&mock, false).chat(&request(), None).await;
    assert_eq!(response.content.as_deref(), Some("second try"));
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test]
async fn raw_sse_quirks_are_tolerated() {
    let sse = concat!(
        ": OPENROUTER PROCESSING\r\n\r\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\r\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"name\":\"ls\",\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\r\n",
    );
    let mock = MockLlm::start([MockReply::RawSse(sse.into())]);
    let (sink, seen) = recorder();
    let response = provider(&mock).chat(&request(), Some(sink)).await;
    assert!(!response.is_error(), "{response:?}");
    assert_eq!(seen.lock().unwrap().concat(), "Hi");
    assert_eq!(response.tool_calls.len(), 1);
    assert!(response.tool_calls[0].id.starts_with("call_"), "generated id");
    assert_eq!(response.tool_calls[0].function.name, "ls");
}

#[tokio::test]
async fn a_json_answer_to_a_streaming_request_still_reaches_the_sink() {
    let body = json!({"choices": [{"message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}]});
    let mock = MockLlm::start(MockReply::Raw(body));
    let (sink, seen) = recorder();
    let response = provider(&mock).chat(&request(), Some(sink)).await;
    assert_eq!(response.content.as_deref(), Some("whole"));
    assert_eq!(*seen.lock().unwrap(), ["whole"]);
}

#[tokio::test]
async fn unreachable_server_is_a_connection_error() {
    let url = {
        let mock = MockLlm::start(MockReply::Blank);
        mock.base_url()
    }; // dropped: the port is closed
    let provider = OpenAiProvider::new(OpenAiOptions {
        base_url: url,
        api_key: None,
        request_timeout: Duration::from_secs(5),
        retry: RetryPolicy::fast(),
        stream: false,
        vision: true,
    })
    .unwrap();
    let message = error_message(&provider.chat(&request(), None).await);
    assert!(message.contains("after 4 attempts") && message.contains("could not reach the model provider"), "{message}");
}

#[tokio::test]
async fn handler_and_latency() {
    let mock = MockLlm::with_handler(|request, index| {
        let last = request["messages"].as_array().and_then(|m| m.last()).and_then(|m| m["content"].as_str()).unwrap_or("");
        MockReply::text(format!("#{index}: {last}"))
    })
    .with_latency(Duration::from_millis(50));
    let provider = provider(&mock);
    let started = Instant::now();
    let first = provider.chat(&request(), None).await;
    let second = provider.chat(&request(), None).await;
    assert_eq!(first.content.as_deref(), Some("#0: hi"));
    assert_eq!(second.content.as_deref(), Some("#1: hi"));
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(mock.request_count(), 2);
}
