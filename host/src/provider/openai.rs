//! The OpenAI-compatible chat-completions provider (spec §9).
//!
//! This file owns the wire format: the request body, the answer of a plain
//! request, the server-sent-event stream of a streaming one, and the mapping
//! of HTTP failures to a [`ProviderError`] a user can act on. Retries are
//! [`RetryPolicy`]'s (`retry.rs`); this file only says what is retryable.
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
//! - an error object inside a 200 answer or a stream is an error response.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::{Instant, timeout, timeout_at};

use super::retry::{self, Attempt, RetryPolicy};
use super::{ChatRequest, ChatResponse, FinishReason, Provider, ProviderError, StreamSink, Usage};
use crate::session::{Message, Role, ToolCall};

/// The longest API message quoted in an error, in characters.
const MAX_DETAIL_CHARS: usize = 500;

/// The smallest cap on one answer's bytes (a plain body, or a whole stream).
/// The model is untrusted input: without a cap, one answer can take all the
/// memory there is.
pub const MIN_MAX_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// Bytes of an error answer (non-2xx) read for its message.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The cap on one answer for an agent whose tool calls may carry up to
/// `max_tool_args_bytes` of arguments: room for a few such calls plus text
/// (4 × the arguments cap + 1 MiB), and never below
/// [`MIN_MAX_RESPONSE_BYTES`], so an oversized call still arrives and gets
/// its clear error from the agent instead of failing the request.
pub fn response_cap(max_tool_args_bytes: usize) -> usize {
    max_tool_args_bytes.saturating_mul(4).saturating_add(1024 * 1024).max(MIN_MAX_RESPONSE_BYTES)
}

/// Settings of an [`OpenAiProvider`].
#[derive(Clone)]
pub struct OpenAiOptions {
    /// API root, e.g. `https://api.openai.com/v1`; `/chat/completions` is appended.
    pub base_url: String,
    /// Sent as a bearer token when set (local servers usually need none).
    pub api_key: Option<String>,
    /// Per attempt: the wait for the response headers and, when not
    /// streaming, the whole answer; when streaming, also the longest silence
    /// between two reads, so a long answer that keeps flowing is not cut.
    pub request_timeout: Duration,
    /// Retries of failed attempts.
    pub retry: RetryPolicy,
    /// Stream the answer when the caller passes a sink.
    pub stream: bool,
}

impl Default for OpenAiOptions {
    fn default() -> Self {
        OpenAiOptions {
            base_url: "https://api.openai.com/v1".into(),
            api_key: None,
            request_timeout: Duration::from_secs(300),
            retry: RetryPolicy::default(),
            stream: true,
        }
    }
}

impl OpenAiOptions {
    /// Defaults for the API at `base_url`.
    pub fn new(base_url: impl Into<String>) -> Self {
        OpenAiOptions { base_url: base_url.into(), ..Default::default() }
    }
}

impl std::fmt::Debug for OpenAiOptions {
    // Hand-written so the API key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiOptions")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &self.request_timeout)
            .field("retry", &self.retry)
            .field("stream", &self.stream)
            .finish()
    }
}

/// Why an [`OpenAiProvider`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum OpenAiError {
    /// The base URL is not an `http(s)://` URL.
    #[error("invalid model provider URL {0:?}: expected http://… or https://…")]
    InvalidBaseUrl(String),
    /// The HTTP client could not be set up (TLS backend).
    #[error("could not set up the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// An OpenAI-compatible chat-completions API.
pub struct OpenAiProvider {
    client: reqwest::Client,
    endpoint: String,
    api_key: Option<String>,
    request_timeout: Duration,
    retry: RetryPolicy,
    stream: bool,
    max_response_bytes: usize,
}

impl std::fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiProvider").field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

impl OpenAiProvider {
    /// A provider for `options.base_url`.
    pub fn new(options: OpenAiOptions) -> Result<Self, OpenAiError> {
        let base = options.base_url.trim().trim_end_matches('/');
        let scheme_ok = ["http://", "https://"]
            .iter()
            .any(|s| base.len() > s.len() && base.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s)));
        if !scheme_ok {
            return Err(OpenAiError::InvalidBaseUrl(options.base_url));
        }
        let client = reqwest::Client::builder()
            .user_agent(concat!("chitin/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(OpenAiError::Client)?;
        Ok(OpenAiProvider {
            client,
            endpoint: format!("{base}/chat/completions"),
            api_key: options.api_key.filter(|k| !k.is_empty()),
            request_timeout: options.request_timeout,
            retry: options.retry,
            stream: options.stream,
            max_response_bytes: MIN_MAX_RESPONSE_BYTES,
        })
    }

    /// Caps one answer at `bytes` (a plain body, or all the bytes of a
    /// stream); a bigger answer is a clear, non-retryable error. Default
    /// [`MIN_MAX_RESPONSE_BYTES`]; see [`response_cap`].
    pub fn with_max_response_bytes(mut self, bytes: usize) -> Self {
        self.max_response_bytes = bytes.max(1);
        self
    }

    fn too_large(&self) -> ProviderError {
        ProviderError {
            status: Some(200),
            retryable: false,
            message: format!(
                "the model provider's answer is over the limit of {} bytes (4 × [agent] max_tool_args_kb + 1 MiB, at least {} MiB); nothing of it was used",
                self.max_response_bytes,
                MIN_MAX_RESPONSE_BYTES / (1024 * 1024)
            ),
        }
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// One attempt: send, then read the answer as JSON or as a stream.
    async fn attempt(&self, body: Bytes, model: &str, sink: Option<&StreamSink>) -> Attempt {
        let deadline = Instant::now() + self.request_timeout;
        let mut builder = self.client.post(&self.endpoint).header(CONTENT_TYPE, "application/json").body(body);
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        if sink.is_some() {
            builder = builder.header(ACCEPT, "text/event-stream");
        }
        let response = match timeout_at(deadline, builder.send()).await {
            Err(_) => return Attempt::plain(ChatResponse::failed(self.timed_out())),
            Ok(Err(e)) => return Attempt::plain(ChatResponse::failed(self.transport_error(&e))),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        let retry_after = retry::retry_after(response.headers());
        if !status.is_success() {
            // The body names the problem; if it never arrives, the status
            // alone still makes a useful message. Its start is enough.
            let text = match read_body(response, MAX_ERROR_BODY_BYTES, deadline).await {
                Ok(Body { bytes, .. }) => String::from_utf8_lossy(&bytes).into_owned(),
                Err(_) => String::new(),
            };
            let error = http_error(status.as_u16(), &text, model, &self.endpoint);
            return Attempt { response: ChatResponse::failed(error), retry_after, streamed: false };
        }
        let is_sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains("text/event-stream"));
        if is_sse {
            return self.read_stream(response, sink).await;
        }
        let body = match read_body(response, self.max_response_bytes, deadline).await {
            Err(BodyError::TimedOut) => return Attempt::plain(ChatResponse::failed(self.timed_out())),
            Err(BodyError::Transport(e)) => return Attempt::plain(ChatResponse::failed(self.transport_error(&e))),
            Ok(Body { cut: true, .. }) => return Attempt::plain(ChatResponse::failed(self.too_large())),
            Ok(Body { bytes, .. }) => bytes,
        };
        let text = String::from_utf8_lossy(&body);
        let trimmed = text.trim_start();
        if trimmed.starts_with("data:") || trimmed.starts_with(':') {
            // A stream with the wrong content type: parse it as one.
            let mut parser = SseParser::default();
            let mut stream = StreamAnswer::default();
            let events = parser.push(&body).into_iter().chain(parser.finish());
            for event in events {
                if !stream.event(&event, sink) {
                    break;
                }
            }
            return stream.finish(None);
        }
        let response = parse_completion(&text, model, &self.endpoint);
        // Asked to stream, answered in one piece: the user still sees it.
        let mut streamed = false;
        if let (Some(sink), Some(content)) = (sink, response.content.as_deref())
            && !content.is_empty()
            && !response.is_error()
        {
            sink(content);
            streamed = true;
        }
        Attempt { response, retry_after: None, streamed }
    }

    /// Reads a server-sent-event answer, passing text to `sink` as it comes.
    async fn read_stream(&self, response: reqwest::Response, sink: Option<&StreamSink>) -> Attempt {
        let mut parser = SseParser::default();
        let mut answer = StreamAnswer::default();
        let mut body = response.bytes_stream();
        let mut received = 0usize;
        let interruption = loop {
            let chunk = match timeout(self.request_timeout, body.next()).await {
                Err(_) => {
                    break Some(ProviderError {
                        status: None,
                        retryable: true,
                        message: format!(
                            "the model provider stopped sending for {:?} in the middle of the answer",
                            self.request_timeout
                        ),
                    });
                }
                Ok(None) => {
                    for event in parser.finish() {
                        if !answer.event(&event, sink) {
                            break;
                        }
                    }
                    break None;
                }
                Ok(Some(Err(e))) => {
                    break Some(ProviderError {
                        status: None,
                        retryable: true,
                        message: format!("the connection to the model provider broke during the answer: {}", chain(&e)),
                    });
                }
                Ok(Some(Ok(chunk))) => chunk,
            };
            received = received.saturating_add(chunk.len());
            if received > self.max_response_bytes {
                // Not an interruption to tolerate: the answer is refused.
                answer.error = Some(self.too_large());
                break None;
            }
            let mut more = true;
            for event in parser.push(&chunk) {
                more = answer.event(&event, sink);
                if !more {
                    break;
                }
            }
            if !more {
                break None;
            }
        };
        answer.finish(interruption)
    }

    fn timed_out(&self) -> ProviderError {
        ProviderError {
            status: None,
            retryable: true,
            message: format!("the model provider did not answer within {:?}", self.request_timeout),
        }
    }

    fn transport_error(&self, error: &reqwest::Error) -> ProviderError {
        if error.is_timeout() {
            return self.timed_out();
        }
        let message = if error.is_connect() {
            format!("could not reach the model provider at {}: {}", self.endpoint, chain(error))
        } else {
            format!("the request to the model provider failed: {}", chain(error))
        };
        // A request that could not even be built will not build next time.
        ProviderError { status: None, retryable: !error.is_builder(), message }
    }
}

#[async_trait::async_trait]
impl Provider for OpenAiProvider {
    async fn chat(&self, request: &ChatRequest, stream: Option<StreamSink>) -> ChatResponse {
        let sink = stream.filter(|_| self.stream);
        let body = match request_body(request, sink.is_some()) {
            Ok(body) => Bytes::from(body),
            Err(e) => {
                return ChatResponse::failed(ProviderError {
                    status: None,
                    retryable: false,
                    message: format!("could not encode the request for the model provider: {e}"),
                });
            }
        };
        self.retry.run(|| self.attempt(body.clone(), &request.model, sink.as_ref())).await
    }

    fn name(&self) -> &str {
        "openai"
    }
}

/// The JSON request body.
#[derive(Serialize)]
struct RequestBody<'a> {
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
struct WireMessage<'a> {
    role: &'a Role,
    content: &'a Option<String>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    tool_calls: &'a [ToolCall],
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

impl<'a> From<&'a Message> for WireMessage<'a> {
    fn from(m: &'a Message) -> Self {
        WireMessage { role: &m.role, content: &m.content, tool_calls: &m.tool_calls, tool_call_id: m.tool_call_id.as_deref(), name: m.name.as_deref() }
    }
}

fn request_body(request: &ChatRequest, stream: bool) -> serde_json::Result<Vec<u8>> {
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

/// A body read up to a cap.
struct Body {
    bytes: Vec<u8>,
    /// More than the cap arrived (or was announced); `bytes` holds the start.
    cut: bool,
}

enum BodyError {
    TimedOut,
    Transport(reqwest::Error),
}

/// Reads `response`'s body by chunks, stopping at `cap` bytes, so a huge
/// answer costs at most `cap` of memory (one buffer, sized from the
/// `Content-Length` when it is within the cap).
async fn read_body(mut response: reqwest::Response, cap: usize, deadline: Instant) -> Result<Body, BodyError> {
    let announced = response.content_length().map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
    if announced > cap {
        return Ok(Body { bytes: Vec::new(), cut: true });
    }
    let mut bytes = Vec::with_capacity(announced);
    loop {
        match timeout_at(deadline, response.chunk()).await {
            Err(_) => return Err(BodyError::TimedOut),
            Ok(Err(e)) => return Err(BodyError::Transport(e)),
            Ok(Ok(None)) => return Ok(Body { bytes, cut: false }),
            Ok(Ok(Some(chunk))) => {
                let room = cap - bytes.len();
                if chunk.len() > room {
                    bytes.extend_from_slice(&chunk[..room]);
                    return Ok(Body { bytes, cut: true });
                }
                bytes.extend_from_slice(&chunk);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Errors

/// The `ProviderError` for a non-2xx answer.
fn http_error(status: u16, body: &str, model: &str, endpoint: &str) -> ProviderError {
    let mut detail = api_message(body);
    if detail.is_empty() {
        detail = StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("no details").to_string();
    }
    let (retryable, message) = match status {
        401 | 403 => (false, format!("the model provider refused the API key (HTTP {status}): {detail}; check your API key")),
        402 => (false, billing_message(status, &detail)),
        429 if mentions_quota(body) => (false, billing_message(status, &detail)),
        400 => (false, format!("the model provider rejected the request (HTTP 400): {detail}")),
        404 if endpoint.is_empty() => (false, format!("model or endpoint not found: {detail}")),
        404 => (false, format!("model or endpoint not found: {detail} (model `{model}` at {endpoint})")),
        408 | 409 | 429 | 500..=599 => (true, format!("the model provider returned HTTP {status}: {detail}")),
        _ => (false, format!("the model provider returned HTTP {status}: {detail}")),
    };
    ProviderError { status: Some(status), retryable, message }
}

fn billing_message(status: u16, detail: &str) -> String {
    format!(
        "the model provider refused the request for billing or quota reasons (HTTP {status}): {detail}; \
         check your billing, credits and quota with the provider"
    )
}

/// A quota or billing problem, which waiting does not fix (unlike a rate limit).
fn mentions_quota(body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    ["insufficient_quota", "billing", "quota"].iter().any(|word| body.contains(word))
}

/// The API's own message from an error body, clipped; the raw body if it is
/// not the usual `{"error": {"message": …}}`.
fn api_message(body: &str) -> String {
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        let error = value.get("error").unwrap_or(&value);
        let candidates = [&error["message"], error, &value["message"], &value["detail"]];
        if let Some(text) = candidates.iter().find_map(|v| v.as_str().map(str::trim).filter(|s| !s.is_empty())) {
            return clip(text);
        }
    }
    clip(body.trim())
}

/// An error object found inside a 200 answer or a stream event.
fn embedded_error(error: &Value, model: &str, endpoint: &str) -> ProviderError {
    let body = json!({ "error": error }).to_string();
    // Some proxies (OpenRouter) put the upstream HTTP status in `code`.
    if let Some(code) = error["code"].as_u64().filter(|c| (400..600).contains(c)) {
        return http_error(code as u16, &body, model, endpoint);
    }
    let detail = api_message(&body);
    if mentions_quota(&body) {
        return ProviderError { status: None, retryable: false, message: billing_message(200, &detail) };
    }
    ProviderError { status: None, retryable: true, message: format!("the model provider reported an error: {detail}") }
}

/// An answer that could not be understood: retryable, like a 5xx.
fn unreadable(problem: &str, body: &str) -> ProviderError {
    ProviderError {
        status: Some(200),
        retryable: true,
        message: format!("the model provider sent an unreadable answer ({problem}): {}", clip(body.trim())),
    }
}

fn clip(text: &str) -> String {
    match text.char_indices().nth(MAX_DETAIL_CHARS) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// An error and its sources, without repeats ("error sending request: …:
/// connection refused").
///
/// reqwest's and hyper's wrappers ("error sending request for url (…)",
/// "client error (Connect)") are left out: the caller already names the
/// URL, and what the user can act on is the cause under them ("tcp connect
/// error: Connection refused", "dns error: …").
fn chain(error: &dyn std::error::Error) -> String {
    let wrapper = |part: &str| part.starts_with("error sending request") || part.starts_with("client error (");
    let mut parts: Vec<String> = Vec::new();
    let mut source: Option<&dyn std::error::Error> = Some(error);
    while let Some(cause) = source {
        let part = cause.to_string();
        if !part.is_empty() && !parts.iter().any(|p| p.contains(&part)) {
            parts.push(part);
        }
        source = cause.source();
    }
    let useful: Vec<&str> = parts.iter().map(String::as_str).filter(|p| !wrapper(p)).collect();
    if useful.is_empty() { parts.join(": ") } else { useful.join(": ") }
}

// ---------------------------------------------------------------------------
// Answers

/// A tool call being assembled.
#[derive(Debug, Default, Clone)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Ids for calls the model sent without one. Process-wide, so two generated
/// ids in one conversation never collide.
static GENERATED_IDS: AtomicU64 = AtomicU64::new(1);

/// The final response from the parts of an answer.
fn complete(content: Option<String>, calls: Vec<PartialCall>, finish: Option<&str>, usage: Usage) -> ChatResponse {
    let mut seen: HashSet<String> = calls.iter().filter(|c| !c.id.is_empty()).map(|c| c.id.clone()).collect();
    let tool_calls: Vec<ToolCall> = calls
        .into_iter()
        .map(|call| {
            let id = if call.id.is_empty() {
                loop {
                    let id = format!("call_{}", GENERATED_IDS.fetch_add(1, Ordering::Relaxed));
                    if seen.insert(id.clone()) {
                        break id;
                    }
                }
            } else {
                call.id
            };
            ToolCall::new(id, call.name, call.arguments)
        })
        .collect();
    let finish_reason = match finish {
        Some("stop") => FinishReason::Stop,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some("length") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_string()),
        // Some servers omit it; infer it from what came.
        None if tool_calls.is_empty() => FinishReason::Stop,
        None => FinishReason::ToolCalls,
    };
    ChatResponse { content, tool_calls, finish_reason: Some(finish_reason), usage, error: None }
}

/// `content` as text: a string, or the text parts of a content array.
fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(parts.iter().filter_map(|p| p["text"].as_str().or(p.as_str())).collect()),
        _ => None,
    }
}

/// Arguments as the raw string the model wrote; an object some servers send
/// instead is turned back into its JSON text.
fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn parse_usage(usage: &Value) -> Option<Usage> {
    if !usage.is_object() {
        return None;
    }
    let count = |keys: [&str; 2]| keys.iter().find_map(|k| usage[*k].as_u64()).unwrap_or(0);
    Some(Usage {
        prompt_tokens: count(["prompt_tokens", "input_tokens"]),
        completion_tokens: count(["completion_tokens", "output_tokens"]),
    })
}

/// Parses a non-streaming answer.
fn parse_completion(body: &str, model: &str, endpoint: &str) -> ChatResponse {
    let mut value: Value = match serde_json::from_str(body) {
        Ok(value) => value,
        Err(e) => return ChatResponse::failed(unreadable(&format!("not JSON: {e}"), body)),
    };
    let choice = value["choices"].as_array().and_then(|c| c.first());
    if let Some(error) = value.get("error").filter(|e| !e.is_null())
        && choice.is_none()
    {
        return ChatResponse::failed(embedded_error(error, model, endpoint));
    }
    let Some(choice) = choice else {
        return ChatResponse::failed(unreadable("no choices", body));
    };
    let message = &choice["message"];
    let legacy_text = choice["text"].as_str();
    if !message.is_object() && legacy_text.is_none() {
        return ChatResponse::failed(unreadable("the first choice has no message", body));
    }
    let content = content_text(&message["content"]).or(legacy_text.map(str::to_string));
    let finish = choice["finish_reason"].as_str().map(str::to_string);
    let usage = parse_usage(&value["usage"]).unwrap_or_default();
    // The arguments are moved out of the parsed value, not copied: they are
    // the part of an answer that can be megabytes.
    let mut no_message = Value::Null;
    let message = value.get_mut("choices").and_then(|c| c.get_mut(0)).and_then(|c| c.get_mut("message")).unwrap_or(&mut no_message);
    let mut calls: Vec<PartialCall> = match message.get_mut("tool_calls").and_then(Value::as_array_mut) {
        Some(calls) => calls
            .iter_mut()
            .map(|call| PartialCall {
                id: call["id"].as_str().unwrap_or_default().to_string(),
                name: call["function"]["name"].as_str().unwrap_or_default().to_string(),
                arguments: call.get_mut("function").map(take_arguments).unwrap_or_default(),
            })
            .collect(),
        None => Vec::new(),
    };
    // The pre-tools `function_call` shape, still sent by some servers.
    if calls.is_empty()
        && let Some(call) = message.get_mut("function_call").filter(|f| f.is_object())
    {
        calls.push(PartialCall {
            id: String::new(),
            name: call["name"].as_str().unwrap_or_default().to_string(),
            arguments: take_arguments(call),
        });
    }
    complete(content, calls, finish.as_deref(), usage)
}

/// Moves the `arguments` out of a function object (see [`arguments_text`]).
fn take_arguments(function: &mut Value) -> String {
    match function.get_mut("arguments").map(Value::take) {
        Some(Value::String(text)) => text,
        Some(other) => arguments_text(&other),
        None => String::new(),
    }
}

/// A streamed answer as it accumulates, one event at a time.
#[derive(Debug, Default)]
struct StreamAnswer {
    text: String,
    /// A content field (even `""`) arrived: a blank answer, not a missing one.
    saw_content: bool,
    calls: BTreeMap<u64, PartialCall>,
    /// The call the last index-less tool delta went to.
    last_call: Option<u64>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    /// Chunks parsed.
    chunks: usize,
    /// `[DONE]` arrived.
    done: bool,
    error: Option<ProviderError>,
    /// Text reached the sink: no retry from here on.
    streamed: bool,
}

impl StreamAnswer {
    /// Takes one event; false when the stream is over (`[DONE]`, an error).
    fn event(&mut self, event: &SseEvent, sink: Option<&StreamSink>) -> bool {
        let data = event.data.trim();
        if data.is_empty() {
            return true;
        }
        if data == "[DONE]" {
            self.done = true;
            return false;
        }
        let mut chunk: Value = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) if event.event == "error" => {
                self.error = Some(embedded_error(&Value::String(data.to_string()), "", ""));
                tracing::debug!("stream error event is not JSON: {e}");
                return false;
            }
            Err(e) => {
                // One bad chunk should not lose the answer; the end-of-stream
                // checks still catch a stream that was all garbage.
                tracing::warn!("skipping an unreadable stream chunk ({e}): {}", clip(data));
                return true;
            }
        };
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            self.error = Some(embedded_error(error, "", ""));
            return false;
        }
        if event.event == "error" {
            self.error = Some(embedded_error(&chunk, "", ""));
            return false;
        }
        self.chunks += 1;
        if let Some(usage) = parse_usage(&chunk["usage"]) {
            self.usage = Some(usage);
        }
        let Some(choice) = chunk.get_mut("choices").and_then(Value::as_array_mut).and_then(|c| c.first_mut()) else {
            return true;
        };
        let finish_reason = choice["finish_reason"].as_str().map(str::to_string);
        let mut no_delta = Value::Null;
        // `get_mut`, never `IndexMut`, which panics on a non-object.
        let delta = choice.get_mut("delta").unwrap_or(&mut no_delta);
        if let Some(piece) = content_text(&delta["content"]) {
            self.saw_content = true;
            if !piece.is_empty() {
                self.text.push_str(&piece);
                if let Some(sink) = sink {
                    sink(&piece);
                    self.streamed = true;
                }
            }
        }
        if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for call in calls {
                let (index, id) = (call["index"].as_u64(), call["id"].as_str().map(str::to_string));
                let mut no_function = Value::Null;
                self.merge_call(index, id.as_deref(), call.get_mut("function").unwrap_or(&mut no_function));
            }
        }
        if let Some(function) = delta.get_mut("function_call").filter(|f| f.is_object()) {
            self.merge_call(Some(0), None, function);
        }
        if let Some(reason) = finish_reason {
            self.finish_reason = Some(reason);
        }
        true
    }

    /// Merges a tool-call delta into the call at `index`. Without an index
    /// (some servers), a new id starts a new call and anything else extends
    /// the last one.
    fn merge_call(&mut self, index: Option<u64>, id: Option<&str>, function: &mut Value) {
        let id = id.filter(|id| !id.is_empty());
        let key = match (index, self.last_call) {
            (Some(index), _) => index,
            (None, None) => 0,
            (None, Some(last)) => {
                let last_id = self.calls.get(&last).map(|c| c.id.as_str()).unwrap_or_default();
                match id {
                    Some(id) if !last_id.is_empty() && last_id != id => self.calls.keys().next_back().map_or(0, |k| k + 1),
                    _ => last,
                }
            }
        };
        self.last_call = Some(key);
        let call = self.calls.entry(key).or_default();
        if let Some(id) = id
            && call.id.is_empty()
        {
            call.id = id.to_string();
        }
        if let Some(name) = function["name"].as_str() {
            // OpenAI sends the name once; some servers repeat it whole in
            // every delta, which must not double it.
            if call.name != name {
                call.name.push_str(name);
            }
        }
        let piece = take_arguments(function);
        if call.arguments.is_empty() {
            call.arguments = piece; // moved: the usual one-piece case copies nothing
        } else {
            call.arguments.push_str(&piece);
        }
    }

    /// The response, given why reading stopped (`None`: the stream ended).
    fn finish(self, interruption: Option<ProviderError>) -> Attempt {
        let streamed = self.streamed;
        let complete_answer = self.done || self.finish_reason.is_some();
        let error = self.error.clone().or_else(|| {
            if self.chunks == 0 {
                Some(interruption.clone().unwrap_or_else(|| ProviderError {
                    status: Some(200),
                    retryable: true,
                    message: "the model provider ended the stream without an answer".into(),
                }))
            } else if complete_answer {
                // Everything needed arrived; a late hiccup loses nothing.
                None
            } else {
                Some(interruption.clone().unwrap_or_else(|| ProviderError {
                    status: Some(200),
                    retryable: true,
                    message: "the model provider ended the stream before the answer was complete".into(),
                }))
            }
        });
        if let Some(error) = error {
            // The partial text is kept: it is what the user already saw.
            let content = (!self.text.is_empty()).then_some(self.text);
            return Attempt { response: ChatResponse { content, ..ChatResponse::failed(error) }, retry_after: None, streamed };
        }
        let calls: Vec<PartialCall> = self.calls.into_values().collect();
        let content = if !self.text.is_empty() {
            Some(self.text)
        } else {
            // `""` for a blank answer, nothing beside tool calls.
            (self.saw_content && calls.is_empty()).then(String::new)
        };
        let usage = self.usage.unwrap_or_default();
        Attempt { response: complete(content, calls, self.finish_reason.as_deref(), usage), retry_after: None, streamed }
    }
}

// ---------------------------------------------------------------------------
// Server-sent events

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SseEvent {
    /// The `event:` field; empty for the default `message`.
    event: String,
    /// The `data:` lines, joined with `\n`.
    data: String,
}

/// Splits a byte stream into events (the WHATWG `text/event-stream` rules),
/// with one leniency: a `data:` line after a complete JSON value starts a new
/// event even without the blank line, as some servers forget it.
#[derive(Debug, Default)]
struct SseParser {
    /// Bytes not yet ending in a line break.
    buffer: Vec<u8>,
    event: String,
    data: String,
    has_data: bool,
    /// A byte-order mark is allowed before the first line only.
    started: bool,
}

impl SseParser {
    /// Feeds a chunk; returns the events it completed.
    fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buffer.extend_from_slice(chunk);
        self.drain(false)
    }

    /// Ends the stream: the last line and event, even without a line break.
    fn finish(&mut self) -> Vec<SseEvent> {
        self.drain(true)
    }

    fn drain(&mut self, end: bool) -> Vec<SseEvent> {
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(offset) = self.buffer[start..].iter().position(|&b| b == b'\n' || b == b'\r') {
            let at = start + offset;
            let next = if self.buffer[at] == b'\r' {
                match self.buffer.get(at + 1) {
                    Some(b'\n') => at + 2,
                    Some(_) => at + 1,
                    // A CR at the end of a read may be half of a CRLF.
                    None if !end => break,
                    None => at + 1,
                }
            } else {
                at + 1
            };
            let line = String::from_utf8_lossy(&self.buffer[start..at]).into_owned();
            start = next;
            self.line(&line, &mut events);
        }
        self.buffer.drain(..start);
        if end {
            if !self.buffer.is_empty() {
                let line = String::from_utf8_lossy(&std::mem::take(&mut self.buffer)).into_owned();
                self.line(&line, &mut events);
            }
            self.dispatch(&mut events);
        }
        events
    }

    fn line(&mut self, line: &str, events: &mut Vec<SseEvent>) {
        let line = if self.started { line } else { line.strip_prefix('\u{feff}').unwrap_or(line) };
        self.started = true;
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line.starts_with(':') {
            return; // a comment, often a keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                if self.has_data && is_complete(&self.data) {
                    self.dispatch(events);
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = value.to_string(),
            _ => {} // id, retry, unknown fields
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        if self.has_data {
            events.push(SseEvent { event: std::mem::take(&mut self.event), data: std::mem::take(&mut self.data) });
            self.has_data = false;
        }
        self.event.clear();
    }
}

/// Whether pending event data is already a whole payload.
fn is_complete(data: &str) -> bool {
    data.trim() == "[DONE]" || serde_json::from_str::<serde::de::IgnoredAny>(data).is_ok()
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn events(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        let mut out: Vec<SseEvent> = chunks.iter().flat_map(|c| parser.push(c)).collect();
        out.extend(parser.finish());
        out
    }

    fn data(events: &[SseEvent]) -> Vec<&str> {
        events.iter().map(|e| e.data.as_str()).collect()
    }

    #[test]
    fn sse_basic_events_comments_and_done() {
        let got = events(&[b": keep-alive\n\ndata: {\"a\":1}\n\ndata:{\"b\":2}\n\n\n\ndata: [DONE]\n\n"]);
        assert_eq!(data(&got), ["{\"a\":1}", "{\"b\":2}", "[DONE]"]);
    }

    #[test]
    fn sse_crlf_and_lone_cr() {
        let got = events(&[b"data: 1\r\n\r\ndata: 2\r\rdata: 3\n\n"]);
        assert_eq!(data(&got), ["1", "2", "3"]);
    }

    #[test]
    fn sse_split_anywhere_gives_the_same_events() {
        let stream: &[u8] =
            b"event: message\r\ndata: {\"x\":\"h\xc3\xa9llo\"}\r\n\r\n: ping\r\n\r\ndata: {\"y\":2}\r\n\r\ndata: [DONE]\r\n\r\n";
        let whole = events(&[stream]);
        assert_eq!(data(&whole), ["{\"x\":\"héllo\"}", "{\"y\":2}", "[DONE]"]);
        assert_eq!(whole[0].event, "message");
        assert_eq!(whole[1].event, "", "the event type resets after each event");
        for cut in 1..stream.len() {
            assert_eq!(events(&[&stream[..cut], &stream[cut..]]), whole, "split at {cut}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(events(&bytes), whole, "one byte per read");
    }

    #[test]
    fn sse_multiline_data_missing_blank_lines_and_unterminated_end() {
        // Spec-style multi-line data is joined.
        assert_eq!(data(&events(&[b"data: {\"a\":\ndata: 1}\n\n"])), ["{\"a\":\n1}"]);
        // No blank line between events (some servers).
        assert_eq!(data(&events(&[b"data: {\"a\":1}\ndata: {\"b\":2}\ndata: [DONE]\n"])), ["{\"a\":1}", "{\"b\":2}", "[DONE]"]);
        // The last event without any line break.
        assert_eq!(data(&events(&[b"data: {\"a\":1}\n\ndata: [DONE]"])), ["{\"a\":1}", "[DONE]"]);
        // A byte-order mark, an id field, a field without a colon.
        assert_eq!(data(&events(&[b"\xef\xbb\xbfid: 7\ndata\n\ndata: x\n\n"])), ["", "x"]);
    }

    fn run_stream(body: &str) -> (Attempt, Vec<String>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink: StreamSink = {
            let seen = seen.clone();
            Arc::new(move |piece: &str| seen.lock().unwrap().push(piece.to_string()))
        };
        let mut parser = SseParser::default();
        let mut answer = StreamAnswer::default();
        // Three bytes per read, to exercise reassembly.
        let mut events: Vec<SseEvent> = body.as_bytes().chunks(3).flat_map(|c| parser.push(c)).collect();
        events.extend(parser.finish());
        for event in &events {
            if !answer.event(event, Some(&sink)) {
                break;
            }
        }
        let attempt = answer.finish(None);
        let seen = seen.lock().unwrap().clone();
        (attempt, seen)
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
        assert_eq!(response.usage, Usage { prompt_tokens: 12, completion_tokens: 3 });
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
        assert_eq!(ok.usage, Usage { prompt_tokens: 5, completion_tokens: 2 });

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
        use crate::testing::{MockLlm, MockReply};
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
