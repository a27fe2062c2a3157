//! The OpenAI-compatible chat-completions API (spec §9): the [`Wire`] that
//! [`HttpProvider`] speaks for `api = "openai"`.
//!
//! This module owns the request body (here) and the reading of answers and
//! streams (`answer.rs`). HTTP, caps, timeouts and retries are shared
//! (`provider/http.rs`, `provider/retry.rs`).
//!
//! "Compatible" servers (vLLM, llama.cpp, Ollama, LM Studio, OpenRouter,
//! proxies) differ in small ways, so parsing is lenient and never panics:
//! - an answer that is not JSON, or has no choices, is an error response
//!   and retryable, like a 5xx: the next attempt usually works;
//! - a tool call without an id gets a generated `call_<n>`; its arguments
//!   stay the raw string the model wrote (the tool registry repairs and
//!   validates them); a call with an empty name is kept (the runner drops it);
//! - a stream may use CRLF, comments, blank lines, events split across reads,
//!   no blank line between events, no `[DONE]` after the finish reason, or
//!   answer with plain JSON although streaming was asked for;
//! - an error object inside a 200 answer or a stream is an error response;
//! - reasoning sent beside the answer (`reasoning_content`, DeepSeek and
//!   Qwen; `reasoning`, OpenRouter) is kept in the response and in history
//!   metadata, and never replayed: those APIs reject it or ignore it in
//!   requests.

mod answer;
pub mod wire;

use serde::Serialize;
use serde_json::{Value, json};

use super::http::{self, HttpProvider, ProviderOptions, ProviderSetupError, Wire};
use super::{ChatRequest, ChatResponse, ProviderError};
use crate::session::{Message, Role, ToolCall};

pub use super::http::{MIN_MAX_RESPONSE_BYTES, response_cap};
pub use answer::StreamAnswer;

/// The OpenAI chat-completions wire format.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenAi;

/// An OpenAI-compatible chat-completions API.
pub type OpenAiProvider = HttpProvider<OpenAi>;

/// Settings of an [`OpenAiProvider`] (the shared provider options).
pub type OpenAiOptions = ProviderOptions;

/// Why an [`OpenAiProvider`] could not be built.
pub type OpenAiError = ProviderSetupError;

impl HttpProvider<OpenAi> {
    /// A provider for the OpenAI-compatible API at `options.base_url`.
    pub fn new(options: OpenAiOptions) -> Result<Self, OpenAiError> {
        HttpProvider::with_wire(OpenAi, options)
    }
}

impl Wire for OpenAi {
    type Stream = StreamAnswer;
    const NAME: &'static str = "openai";
    const PATH: &'static str = "/chat/completions";

    fn encode(&self, request: &ChatRequest, stream: bool) -> serde_json::Result<Vec<u8>> {
        request_body(request, stream)
    }

    fn headers(&self, builder: reqwest::RequestBuilder, api_key: Option<&str>) -> reqwest::RequestBuilder {
        match api_key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    fn decode(&self, body: &str, model: &str, endpoint: &str) -> ChatResponse {
        answer::parse_completion(body, model, endpoint)
    }

    fn stream(&self) -> StreamAnswer {
        StreamAnswer::default()
    }
}

/// The body of a chat completions request.
#[derive(Serialize)]
pub struct RequestBody<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "<[Value]>::is_empty")]
    tools: &'a [Value],
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
    max_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f64>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<Value>,
}

/// A message as the provider sees it: [`Message`] without its metadata
/// (history-only fields), borrowed, so a request serializes without copying
/// the conversation (at turn 1 000 that copy was thousands of messages per
/// request). Field for field what `Message` serializes.
#[derive(Serialize)]
pub struct WireMessage<'a> {
    role: &'a Role,
    content: WireContent<'a>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tool_calls: &'a [ToolCall],
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

/// A message's content: its text, or, with images, a list of parts (the
/// text first, then one `image_url` part with a `data:` URL per image).
#[derive(Serialize)]
#[serde(untagged)]
pub enum WireContent<'a> {
    /// The text alone (no images).
    Text(&'a Option<String>),
    /// The text part, then the image parts.
    Parts(Vec<Value>),
}

impl<'a> WireContent<'a> {
    fn of(m: &'a Message) -> Self {
        if m.images.is_empty() {
            return WireContent::Text(&m.content);
        }
        let text = m.text();
        let mut parts: Vec<Value> = Vec::with_capacity(m.images.len() + 1);
        if !text.is_empty() {
            parts.push(json!({"type": "text", "text": text}));
        }
        for image in &m.images {
            let url = format!("data:{};base64,{}", image.media_type, image.base64);
            parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
        }
        WireContent::Parts(parts)
    }
}

impl<'a> From<&'a Message> for WireMessage<'a> {
    fn from(m: &'a Message) -> Self {
        WireMessage { role: &m.role, content: WireContent::of(m), tool_calls: &m.tool_calls, tool_call_id: m.tool_call_id.as_deref(), name: m.name.as_deref() }
    }
}

/// The JSON body of `request`.
pub fn request_body(request: &ChatRequest, stream: bool) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&RequestBody {
        model: &request.model,
        messages: request.messages.iter().map(WireMessage::from).collect(),
        tools: &request.tools,
        tool_choice: (!request.tools.is_empty()).then_some("auto"),
        max_tokens: request.max_tokens,
        // Through the decimal text, so 0.7f32 is sent as 0.7, not 0.699999988.
        temperature: request.temperature.map(|t| t.to_string().parse().unwrap_or(f64::from(t))),
        stream,
        stream_options: stream.then(|| json!({"include_usage": true})),
    })
}

/// An error object found inside a 200 answer or a stream event.
pub(crate) fn embedded_error(error: &Value, model: &str, endpoint: &str) -> ProviderError {
    let body = json!({ "error": error }).to_string();
    // Some proxies (OpenRouter) put the upstream HTTP status in `code`.
    if let Some(code) = error["code"].as_u64().filter(|c| (400..600).contains(c)) {
        return http::http_error(code as u16, &body, model, endpoint);
    }
    let detail = http::api_message(&body);
    if http::mentions_quota(&body) {
        return ProviderError { status: None, retryable: false, message: http::billing_message(200, &detail) };
    }
    ProviderError { status: None, retryable: true, message: format!("the model provider reported an error: {detail}") }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::answer::*;
    use super::*;
    use crate::provider::retry::Attempt;
    use crate::provider::http::http_error;
    use crate::provider::{FinishReason, Provider as _, RetryPolicy, StreamSink, Usage};

    fn run_stream(body: &str) -> (Attempt, Vec<String>) {
        // Three bytes per read, to exercise reassembly.
        crate::provider::http::decode_stream(StreamAnswer::default(), body, 3)
    }

    #[test]
    fn stream_text_usage_and_finish() {
        let body = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
            ": comment\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3}}\n\n",
            "data: [DONE]\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"after done\"}}]}\n\n",
        );
        let (attempt, seen) = run_stream(body);
        assert_eq!(seen, ["Hel", "lo"]);
        assert!(attempt.streamed);
        let response = attempt.response;
        assert_eq!(response.content.as_deref(), Some("Hello"));
        assert_eq!(response.finish_reason, Some(FinishReason::Stop));
        assert_eq!(response.usage, Usage::new(12, 3));
    }

    #[test]
    fn stream_tool_calls_merge_by_index() {
        let body = concat!(
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[",
            "{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"read_file\",\"arguments\":\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"function\":{\"name\":\"gr\",\"arguments\":\"{\\\"na\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\":\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"name\":\"eet\",\"arguments\":\"me\\\":1}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"a.txt\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":2,\"function\":{\"name\":\"\",\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (attempt, seen) = run_stream(body);
        assert!(seen.is_empty() && !attempt.streamed, "tool calls are not shown to the user");
        let response = attempt.response;
        assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(response.content, None);
        let calls: Vec<(&str, &str)> =
            response.tool_calls.iter().map(|c| (c.function.name.as_str(), c.function.arguments.as_str())).collect();
        assert_eq!(calls, [("read_file", "{\"path\":\"a.txt\"}"), ("greet", "{\"name\":1}"), ("", "{}")]);
        assert_eq!(response.tool_calls[0].id, "call_a");
        assert_eq!(response.tool_calls[1].id, "call_b");
        assert!(response.tool_calls[2].id.starts_with("call_"), "generated id");
    }

    #[test]
    fn stream_tool_calls_without_index_or_with_repeated_names() {
        let body = concat!(
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"x1\",\"function\":{\"name\":\"a\",\"arguments\":\"{\\\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"name\":\"a\",\"arguments\":\"k\\\":1}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"x2\",\"function\":{\"name\":\"b\",\"arguments\":{\"j\":2}}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        );
        let (attempt, _) = run_stream(body);
        let calls: Vec<(&str, &str, &str)> = attempt
            .response
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.function.name.as_str(), c.function.arguments.as_str()))
            .collect();
        assert_eq!(calls, [("x1", "a", "{\"k\":1}"), ("x2", "b", "{\"j\":2}")]);
    }

    #[test]
    fn stream_errors_and_truncation() {
        // An error object mid-stream.
        let (attempt, seen) = run_stream(concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n",
            "data: {\"error\":{\"message\":\"upstream overloaded\",\"code\":502}}\n\n",
        ));
        assert_eq!(seen, ["par"]);
        let error = attempt.response.error.clone().unwrap();
        assert!(error.retryable && error.message.contains("upstream overloaded"), "{error:?}");
        assert_eq!(error.status, Some(502));
        assert_eq!(attempt.response.content.as_deref(), Some("par"), "partial text kept");
        assert!(attempt.streamed);

        // Ends without a finish reason or [DONE].
        let (attempt, _) = run_stream("data: {\"choices\":[{\"delta\":{\"content\":\"cut\"}}]}\n\n");
        assert!(attempt.response.error.unwrap().message.contains("before the answer was complete"));

        // Nothing but garbage.
        let (attempt, _) = run_stream("data: {nope\n\ndata: [DONE]\n\n");
        assert!(attempt.response.error.unwrap().message.contains("without an answer"));

        // A finish reason but no [DONE]: complete.
        let (attempt, _) = run_stream("data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"length\"}]}");
        assert_eq!(attempt.response.finish_reason, Some(FinishReason::Length));
        assert_eq!(attempt.response.content.as_deref(), Some("ok"));

        // A blank answer stays blank (Some("")), not missing.
        let (attempt, _) = run_stream("data: {\"choices\":[{\"delta\":{\"content\":\"\"},\"finish_reason\":\"stop\"}]}\n\n");
        assert_eq!(attempt.response.content.as_deref(), Some(""));
    }

    #[test]
    fn completion_parsing_is_lenient_and_never_panics() {
        let ok = parse_completion(
            r#"{"choices":[{"message":{"content":null,"tool_calls":[{"function":{"name":"ls","arguments":{"a":1}}},{"id":"c9","function":{"name":"","arguments":"{bad"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":5,"completion_tokens":2}}"#,
            "m",
            "e",
        );
        assert!(!ok.is_error());
        assert_eq!(ok.content, None);
        assert!(ok.tool_calls[0].id.starts_with("call_"));
        assert_eq!(ok.tool_calls[0].function.arguments, "{\"a\":1}");
        assert_eq!((ok.tool_calls[1].id.as_str(), ok.tool_calls[1].function.name.as_str()), ("c9", ""));
        assert_eq!(ok.tool_calls[1].function.arguments, "{bad");
        assert_eq!(ok.usage, Usage::new(5, 2));

        let parts = parse_completion(r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}]}"#, "m", "e");
        assert_eq!(parts.content.as_deref(), Some("ab"));
        assert_eq!(parts.finish_reason, Some(FinishReason::Stop), "inferred");

        for bad in ["", "null", "[]", "{}", "{\"choices\":[]}", "{\"choices\":[1]}", "<html>502</html>", "{\"choices\":\"x\"}"] {
            let response = parse_completion(bad, "m", "e");
            let error = response.error.unwrap_or_else(|| panic!("{bad:?} accepted"));
            assert!(error.retryable, "{bad:?}");
            assert!(error.message.contains("unreadable answer"), "{bad:?}: {}", error.message);
        }
        let quota = parse_completion(r#"{"error":{"message":"You exceeded your current quota"}}"#, "m", "e");
        assert!(!quota.error.unwrap().retryable);
    }

    #[test]
    fn http_errors_say_what_to_do() {
        let e = http_error(401, r#"{"error":{"message":"Incorrect API key provided"}}"#, "m", "u");
        assert!(!e.retryable && e.message.contains("check your API key") && e.message.contains("Incorrect API key"));
        let e = http_error(402, "", "m", "u");
        assert!(!e.retryable && e.message.contains("billing") && e.message.contains("Payment Required"), "{}", e.message);
        let e = http_error(429, r#"{"error":{"type":"insufficient_quota","message":"You exceeded your current quota"}}"#, "m", "u");
        assert!(!e.retryable && e.message.contains("check your billing"));
        let e = http_error(429, r#"{"error":{"message":"Rate limit reached"}}"#, "m", "u");
        assert!(e.retryable && e.message.contains("HTTP 429: Rate limit reached"));
        let e = http_error(400, r#"{"error":{"message":"max_tokens is too large"}}"#, "m", "u");
        assert!(!e.retryable && e.message.contains("max_tokens is too large"));
        let e = http_error(404, r#"{"error":{"message":"The model `gpt-9` does not exist"}}"#, "gpt-9", "u");
        assert!(e.message.starts_with("model or endpoint not found: The model `gpt-9` does not exist"), "{}", e.message);
        for status in [408, 409, 500, 502, 503, 529] {
            assert!(http_error(status, "oops", "m", "u").retryable, "{status}");
        }
        let e = http_error(422, &"x".repeat(5000), "m", "u");
        assert!(!e.retryable && e.message.contains("HTTP 422") && e.message.len() < 700);
    }

    #[test]
    fn wire_messages_serialize_as_messages_without_metadata() {
        let messages = [
            Message::user("hi").with_meta("timestamp", "now"),
            Message::assistant_calls(None, vec![ToolCall::new("c1", "read_file", r#"{"path":"a"}"#)]),
            Message::tool_result("c1", "read_file", "text \"quoted\"\n"),
            Message::assistant("done"),
        ];
        for m in &messages {
            assert_eq!(serde_json::to_value(WireMessage::from(m)).unwrap(), serde_json::to_value(m.for_provider()).unwrap());
        }
    }

    #[test]
    fn request_body_shape() {
        let mut request = ChatRequest {
            model: "m".into(),
            messages: vec![Message::user("hi").with_meta("timestamp", "now")],
            tools: Arc::from(Vec::new()),
            max_tokens: 100,
            temperature: Some(0.7),
        };
        let body: Value = serde_json::from_slice(&request_body(&request, false).unwrap()).unwrap();
        assert_eq!(
            body,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100, "temperature": 0.7, "stream": false})
        );
        request.tools = Arc::from(vec![json!({"type": "function", "function": {"name": "f"}})]);
        request.temperature = None;
        let body: Value = serde_json::from_slice(&request_body(&request, true).unwrap()).unwrap();
        assert_eq!(body["tool_choice"], "auto");
        assert_eq!(body["tools"][0]["function"]["name"], "f");
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        assert!(body.get("temperature").is_none());
    }

    #[tokio::test]
    async fn an_answer_over_the_cap_is_a_clear_error_streamed_or_not() {
        use chitin_testing::{MockLlm, MockReply};
        let big = format!("{{\"content\":\"{}\"}}", "x".repeat(200_000));
        for stream in [false, true] {
            let mock = MockLlm::start(vec![MockReply::tool_call("write_file", big.clone()), MockReply::tool_call("write_file", big.clone())]);
            let options = OpenAiOptions { retry: RetryPolicy::none(), ..OpenAiOptions::new(mock.base_url()) };
            let request = ChatRequest { model: "m".into(), messages: vec![Message::user("hi")], tools: Arc::from(Vec::new()), max_tokens: 10, temperature: None };
            let sink: Option<StreamSink> = stream.then(|| Arc::new(|_: &str| {}) as StreamSink);
            let capped = OpenAiProvider::new(options.clone()).unwrap().with_max_response_bytes(100_000);
            let response = capped.chat(&request, sink.clone()).await;
            let error = response.error.unwrap_or_else(|| panic!("stream={stream}: accepted"));
            assert!(!error.retryable, "stream={stream}");
            assert!(error.message.contains("over the limit of 100000 bytes") && error.message.contains("max_tool_args_kb"), "{}", error.message);
            assert!(response.tool_calls.is_empty());
            // The default cap takes it whole.
            let response = OpenAiProvider::new(options).unwrap().chat(&request, sink).await;
            assert!(!response.is_error(), "stream={stream}: {:?}", response.error);
            assert_eq!(response.tool_calls[0].function.arguments, big, "stream={stream}");
        }
        assert_eq!(response_cap(1024 * 1024), MIN_MAX_RESPONSE_BYTES);
        assert_eq!(response_cap(100 * 1024 * 1024), 401 * 1024 * 1024);
    }

    /// A user message with an image: text and `image_url` parts (data URL)
    /// to a model with vision, a note and no bytes to one without.
    #[tokio::test]
    async fn images_are_parts_with_vision_and_a_note_without() {
        use crate::session::ImagePart;
        use chitin_testing::{MockLlm, MockReply};
        let mut user = Message::user("what is this?");
        user.images.push(ImagePart { media_type: "image/png", base64: Arc::from("iVBORw0KGgo=") });
        let request = ChatRequest { model: "m".into(), messages: vec![Message::system("s"), user], tools: Arc::from(Vec::new()), max_tokens: 10, temperature: None };
        let body: Value = serde_json::from_slice(&request_body(&request, false).unwrap()).unwrap();
        assert_eq!(body["messages"][0]["content"], "s");
        assert_eq!(
            body["messages"][1]["content"],
            json!([{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}])
        );
        let anthropic = crate::provider::anthropic::request_body(&request, false, None);
        let blocks = &anthropic["messages"][0]["content"];
        assert_eq!(blocks[0], json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}));
        assert_eq!(blocks[1]["text"], "what is this?");

        let mock = MockLlm::start(vec![MockReply::text("I cannot see it")]);
        let options = OpenAiOptions { retry: RetryPolicy::none(), vision: false, ..OpenAiOptions::new(mock.base_url()) };
        let response = OpenAiProvider::new(options).unwrap().chat(&request, None).await;
        assert!(!response.is_error(), "{:?}", response.error);
        let sent = &mock.requests()[0];
        assert_eq!(sent["messages"][1]["content"], "what is this?\n[1 image(s) attached; this model cannot see images, so they were not sent]");
        assert!(!sent.to_string().contains("iVBORw0KGgo"));
    }

    #[test]
    fn odd_shapes_never_panic_now_that_arguments_are_moved_out() {
        for body in [
            r#"{"choices":[{"message":{"tool_calls":[1, "x", null, {"function": 3}, {"function": {"name": "a", "arguments": 7}}]}}]}"#,
            r#"{"choices":[{"message":{"function_call":{"name":"f"}}}]}"#,
            r#"{"choices":[{"text":"legacy"}]}"#,
        ] {
            let response = parse_completion(body, "m", "e");
            assert!(!response.is_error(), "{body}: {:?}", response.error);
        }
        let (attempt, _) = run_stream(concat!(
            "data: {\"choices\":[1]}\n\n",
            "data: {\"choices\":[{\"delta\":\"x\"}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[1,{\"function\":2},{\"index\":0,\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}],\"function_call\":3}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        ));
        let calls = &attempt.response.tool_calls;
        assert_eq!(calls.iter().map(|c| (c.function.name.as_str(), c.function.arguments.as_str())).collect::<Vec<_>>(), [("f", "{}")]);
    }

    #[test]
    fn base_urls_are_checked_and_trimmed() {
        let provider = OpenAiProvider::new(OpenAiOptions::new("http://localhost:8080/v1/")).unwrap();
        assert_eq!(provider.endpoint(), "http://localhost:8080/v1/chat/completions");
        assert!(matches!(OpenAiProvider::new(OpenAiOptions::new("localhost:8080")), Err(OpenAiError::InvalidBaseUrl(_))));
        assert!(OpenAiProvider::new(OpenAiOptions::new("https://")).is_err());
    }
}
