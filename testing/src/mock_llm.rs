//! [`MockLlm`]: a scripted OpenAI-compatible chat-completions server on
//! 127.0.0.1, for tests and benchmarks that must run offline.
//!
//! The server runs on its own thread with its own single-threaded tokio
//! runtime, so it works under any test runtime (or none), keeps serving while
//! the test's runtime is busy or paused, and stops when the `MockLlm` is
//! dropped (hung replies included). HTTP/1.1 with keep-alive, as real APIs,
//! so a client's connection reuse is exercised.
//!
//! Each request to `POST /v1/chat/completions` (or `/chat/completions`) is
//! recorded, then answered with the next [`MockReply`] of the [`Script`] (or
//! by a handler). A request with `"stream": true` gets the same reply as
//! server-sent events, the way OpenAI streams it.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use chitin::provider::openai::wire::ServedRequest;
use futures::StreamExt as _;

/// The reply used once the script is exhausted, unless another is set.
pub const SCRIPT_EXHAUSTED: &str = "(script exhausted)";

/// The `created` timestamp of every mock answer (fixed, for stable output).
const CREATED: i64 = 1_700_000_000;

/// One scripted answer.
#[derive(Debug, Clone, PartialEq)]
pub enum MockReply {
    /// A text answer, finish reason `stop`.
    Text(String),
    /// Tool calls as (name, raw JSON arguments), finish reason `tool_calls`;
    /// ids are `call_1`, `call_2`, … numbered across the mock's lifetime, so
    /// they stay unique within a conversation.
    ToolCalls(Vec<(String, String)>),
    /// Text and tool calls together, finish reason `tool_calls`.
    TextAndToolCalls(String, Vec<(String, String)>),
    /// A text cut at the token limit: finish reason `length`.
    Length(String),
    /// An empty answer: content `""`, finish reason `stop`.
    Blank,
    /// An HTTP error: `status` with `body` (sent as JSON) and an optional
    /// `Retry-After` header.
    Status {
        /// HTTP status.
        status: u16,
        /// Response body, sent as is.
        body: String,
        /// `Retry-After` header value (`"0"`, `"2"`, an HTTP date).
        retry_after: Option<String>,
    },
    /// Never answers; the client has to give up (time out).
    Hang,
    /// This raw body with status 200 and a JSON content type.
    Malformed(String),
    /// This exact JSON body with status 200, even for a streaming request.
    Raw(Value),
    /// This raw body with status 200 and the `text/event-stream` type.
    RawSse(String),
    /// Sends the text (as deltas when streaming, as the start of a JSON body
    /// otherwise) in the API the request came in, then breaks the
    /// connection before the answer ends.
    Truncated(String),
    /// The reply, with the model's reasoning before it: OpenAI-compatible
    /// `reasoning_content`, or an Anthropic `thinking` block with a
    /// signature (`mock-sig-…`).
    Thinking(String, Box<MockReply>),
}

impl MockReply {
    /// A text answer.
    pub fn text(text: impl Into<String>) -> Self {
        MockReply::Text(text.into())
    }

    /// One tool call.
    pub fn tool_call(name: impl Into<String>, arguments: impl Into<String>) -> Self {
        MockReply::ToolCalls(vec![(name.into(), arguments.into())])
    }

    /// An HTTP error with a raw body and no `Retry-After`.
    pub fn status(status: u16, body: impl Into<String>) -> Self {
        MockReply::Status { status, body: body.into(), retry_after: None }
    }

    /// `reply` with `thinking` before it (see [`MockReply::Thinking`]).
    pub fn thinking(thinking: impl Into<String>, reply: MockReply) -> Self {
        MockReply::Thinking(thinking.into(), Box::new(reply))
    }

    /// An HTTP error with an Anthropic-shaped body:
    /// `{"type":"error","error":{"type":"overloaded_error",…}}` for 529.
    pub fn anthropic_error(status: u16, message: &str) -> Self {
        MockReply::status(status, super::mock_anthropic::error_body(status, message))
    }

    /// An HTTP error with an OpenAI-shaped body:
    /// `{"error": {"message": …, "type": …, "code": null}}`.
    pub fn api_error(status: u16, message: &str) -> Self {
        let kind = match status {
            401 | 403 => "authentication_error",
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        };
        MockReply::status(status, json!({"error": {"message": message, "type": kind, "code": null}}).to_string())
    }
}

/// A queue of replies, one per request, then a default reply forever.
#[derive(Debug, Clone, PartialEq)]
pub struct Script {
    replies: VecDeque<MockReply>,
    default: MockReply,
}

impl Default for Script {
    fn default() -> Self {
        Script { replies: VecDeque::new(), default: MockReply::text(SCRIPT_EXHAUSTED) }
    }
}

impl Script {
    /// `replies` in order, then `Text("(script exhausted)")`.
    pub fn new(replies: impl IntoIterator<Item = MockReply>) -> Self {
        Script { replies: replies.into_iter().collect(), ..Default::default() }
    }

    /// Appends a reply.
    pub fn then(mut self, reply: MockReply) -> Self {
        self.replies.push_back(reply);
        self
    }

    /// The reply once the queue is empty.
    pub fn or_else(mut self, default: MockReply) -> Self {
        self.default = default;
        self
    }

    fn next(&mut self) -> MockReply {
        self.replies.pop_front().unwrap_or_else(|| self.default.clone())
    }
}

impl From<Vec<MockReply>> for Script {
    fn from(replies: Vec<MockReply>) -> Self {
        Script::new(replies)
    }
}

impl<const N: usize> From<[MockReply; N]> for Script {
    fn from(replies: [MockReply; N]) -> Self {
        Script::new(replies)
    }
}

impl From<MockReply> for Script {
    fn from(reply: MockReply) -> Self {
        Script::new([reply])
    }
}

/// Computes a reply from the raw request body and its index.
type Handler = Box<dyn Fn(&[u8], usize) -> MockReply + Send + Sync>;

enum Source {
    Script(Script),
    Handler(Handler),
}

/// State shared by the server thread and the test.
struct Shared {
    /// Request bodies received, in order, as raw bytes (parsed only when a
    /// test asks: under load, keeping thousands of parsed bodies made the
    /// mock, not the host, the bottleneck); also guards the script, so the
    /// n-th request recorded is the one that gets the n-th reply.
    log: Mutex<(Vec<Bytes>, Option<Script>)>,
    handler: Option<Handler>,
    latency: Mutex<Duration>,
    /// Pause between the events of a streamed answer.
    chunk_delay: Mutex<Duration>,
    /// Content deltas per streamed answer (3 unless set).
    stream_pieces: Mutex<usize>,
    next_call_id: AtomicU64,
    /// Prompt-cache accounting (`mock_anthropic`): always for Anthropic
    /// requests, for OpenAI ones when `openai_cache` is on.
    cache: Mutex<super::mock_anthropic::PromptCache>,
    openai_cache: std::sync::atomic::AtomicBool,
    /// The auth and version headers of each request, in order.
    headers: Mutex<Vec<Vec<(String, String)>>>,
}

/// Locks, ignoring poisoning: a panicking handler must not wedge the mock.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running mock server; dropping it stops the server.
pub struct MockLlm {
    server: super::server::MockServer,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for MockLlm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockLlm").field("addr", &self.server.addr()).field("requests", &self.request_count()).finish()
    }
}

impl MockLlm {
    /// Serves `script` on 127.0.0.1 at a free port.
    ///
    /// # Panics
    /// If no local port can be bound or no thread started (test setup).
    pub fn start(script: impl Into<Script>) -> MockLlm {
        MockLlm::spawn(Source::Script(script.into()))
    }

    /// Serves replies computed by `handler` from the request body and its
    /// index (0 for the first request).
    ///
    /// # Panics
    /// As [`MockLlm::start`].
    pub fn with_handler(handler: impl Fn(&Value, usize) -> MockReply + Send + Sync + 'static) -> MockLlm {
        MockLlm::spawn(Source::Handler(Box::new(move |body, index| handler(&parse_body(body), index))))
    }

    /// Serves replies computed by `handler` from the raw request body and
    /// its index. For load tests: a handler that needs one field can read
    /// it without building a `Value` of the whole body, which at thousands
    /// of requests a second costs the mock more than the host spends.
    ///
    /// # Panics
    /// As [`MockLlm::start`].
    pub fn with_body_handler(handler: impl Fn(&[u8], usize) -> MockReply + Send + Sync + 'static) -> MockLlm {
        MockLlm::spawn(Source::Handler(Box::new(handler)))
    }

    /// Waits `latency` before every reply (set 0 to remove).
    pub fn with_latency(self, latency: Duration) -> MockLlm {
        self.set_latency(latency);
        self
    }

    /// Changes the wait before every reply.
    pub fn set_latency(&self, latency: Duration) {
        *lock(&self.shared.latency) = latency;
    }

    /// Pauses `delay` between the events of every streamed answer, so a
    /// test can watch a reply arrive piece by piece (the web chat's
    /// browser test sees partial text this way).
    pub fn with_chunk_delay(self, delay: Duration) -> MockLlm {
        *lock(&self.shared.chunk_delay) = delay;
        self
    }

    /// Streams every answer's content in `pieces` deltas (3 by default), so
    /// a test can make a reply arrive in many small pieces over time.
    pub fn with_stream_pieces(self, pieces: usize) -> MockLlm {
        *lock(&self.shared.stream_pieces) = pieces.max(1);
        self
    }

    /// Reports OpenAI automatic prompt caching too
    /// (`prompt_tokens_details.cached_tokens`); off by default because it
    /// parses every body, which load tests cannot afford.
    pub fn with_openai_cache(self) -> MockLlm {
        self.shared.openai_cache.store(true, Ordering::Relaxed);
        self
    }

    /// Prompt-cache totals over the requests so far (see `mock_anthropic`).
    pub fn cache_stats(&self) -> super::mock_anthropic::CacheStats {
        lock(&self.shared.cache).totals
    }

    /// The `authorization`, `x-api-key` and `anthropic-version` headers of
    /// each request, in order (name lowercased).
    pub fn request_headers(&self) -> Vec<Vec<(String, String)>> {
        lock(&self.shared.headers).clone()
    }

    /// The API root to give a client: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.server.addr())
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Every chat request body received, in order (a body that was not JSON
    /// is recorded as a JSON string).
    pub fn requests(&self) -> Vec<Value> {
        let bodies = lock(&self.shared.log).0.clone();
        bodies.iter().map(|body| parse_body(body)).collect()
    }

    /// How many chat requests arrived.
    pub fn request_count(&self) -> usize {
        lock(&self.shared.log).0.len()
    }

    /// The size in bytes of every chat request body received, in order,
    /// without parsing them (for tests that bound what the host sends).
    pub fn request_sizes(&self) -> Vec<usize> {
        lock(&self.shared.log).0.iter().map(Bytes::len).collect()
    }

    /// The last chat request body.
    pub fn last_request(&self) -> Option<Value> {
        let body = lock(&self.shared.log).0.last().cloned();
        body.map(|body| parse_body(&body))
    }

    fn spawn(source: Source) -> MockLlm {
        let (script, handler) = match source {
            Source::Script(script) => (Some(script), None),
            Source::Handler(handler) => (None, Some(handler)),
        };
        let shared = Arc::new(Shared {
            log: Mutex::new((Vec::new(), script)),
            handler,
            latency: Mutex::new(Duration::ZERO),
            chunk_delay: Mutex::new(Duration::ZERO),
            stream_pieces: Mutex::new(3),
            next_call_id: AtomicU64::new(1),
            cache: Mutex::new(Default::default()),
            openai_cache: std::sync::atomic::AtomicBool::new(false),
            headers: Mutex::new(Vec::new()),
        });
        let server_shared = shared.clone();
        let server = super::server::MockServer::start("MockLlm", move |request| respond(server_shared.clone(), request));
        MockLlm { server, shared }
    }
}

type Body = UnsyncBoxBody<Bytes, std::io::Error>;

fn full(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

async fn respond(shared: Arc<Shared>, request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().trim_end_matches('/').to_string();
    let anthropic = path == "/v1/messages" || path == "/messages";
    if request.method() != Method::POST || !(path == "/v1/chat/completions" || path == "/chat/completions" || anthropic) {
        let message = format!("the mock serves POST /v1/chat/completions and /v1/messages, not {} {path}", request.method());
        let body = json!({"error": {"message": message, "type": "invalid_request_error"}}).to_string();
        return Ok(full(StatusCode::NOT_FOUND, "application/json", body));
    }
    let kept: Vec<(String, String)> = ["authorization", "x-api-key", "anthropic-version"]
        .iter()
        .filter_map(|name| request.headers().get(*name).and_then(|v| v.to_str().ok()).map(|v| (name.to_string(), v.to_string())))
        .collect();
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Ok(full(StatusCode::BAD_REQUEST, "text/plain", "unreadable request body")),
    };
    let head = request_head(&body);
    let (index, scripted) = {
        let mut log = lock(&shared.log);
        log.0.push(body.clone());
        lock(&shared.headers).push(kept);
        (log.0.len() - 1, log.1.as_mut().map(Script::next))
    };
    let reply = match (scripted, &shared.handler) {
        (Some(reply), _) => reply,
        (None, Some(handler)) => handler(&body, index),
        (None, None) => MockReply::text(SCRIPT_EXHAUSTED),
    };
    let latency = *lock(&shared.latency);
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    Ok(reply_response(&shared, reply, &head, &body, index, anthropic).await)
}

/// The request fields the reply depends on: the OpenAI request as servers
/// read it (`provider::openai::wire`), with the messages skipped, so the
/// whole body never becomes a `Value`. An Anthropic request has the same
/// `model` and `stream`.
type RequestHead = ServedRequest<serde::de::IgnoredAny>;

/// The head of `body`; defaults when the body is not such a JSON object.
fn request_head(body: &[u8]) -> RequestHead {
    serde_json::from_slice(body).unwrap_or_default()
}

/// The model the request named, or `mock`.
fn model_of(request: &RequestHead) -> &str {
    request.model.as_deref().unwrap_or("mock")
}

/// A request body as JSON; one that is not JSON becomes a JSON string.
fn parse_body(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

/// The parts of a normal answer.
struct Answer {
    content: Option<String>,
    /// (id, name, arguments)
    calls: Vec<(String, String, String)>,
    finish: &'static str,
}

async fn reply_response(shared: &Shared, reply: MockReply, request: &RequestHead, body: &Bytes, index: usize, anthropic: bool) -> Response<Body> {
    let request_len = body.len();
    let stream = request.stream;
    let (mut thinking, mut reply) = (None, reply);
    while let MockReply::Thinking(text, inner) = reply {
        thinking = Some(text);
        reply = *inner;
    }
    let ids = |calls: Vec<(String, String)>| -> Vec<(String, String, String)> {
        calls
            .into_iter()
            .map(|(name, args)| (format!("call_{}", shared.next_call_id.fetch_add(1, Ordering::Relaxed)), name, args))
            .collect()
    };
    let answer = match reply {
        MockReply::Text(text) => Answer { content: Some(text), calls: Vec::new(), finish: "stop" },
        MockReply::ToolCalls(calls) => Answer { content: None, calls: ids(calls), finish: "tool_calls" },
        MockReply::TextAndToolCalls(text, calls) => Answer { content: Some(text), calls: ids(calls), finish: "tool_calls" },
        MockReply::Length(text) => Answer { content: Some(text), calls: Vec::new(), finish: "length" },
        MockReply::Blank => Answer { content: Some(String::new()), calls: Vec::new(), finish: "stop" },
        MockReply::Status { status, body, retry_after } => {
            let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            let mut response = full(code, "application/json", body);
            if let Some(value) = retry_after.and_then(|v| v.parse().ok()) {
                response.headers_mut().insert(hyper::header::RETRY_AFTER, value);
            }
            return response;
        }
        MockReply::Hang => std::future::pending().await,
        MockReply::Malformed(body) => return full(StatusCode::OK, "application/json", body),
        MockReply::Raw(body) => return full(StatusCode::OK, "application/json", body.to_string()),
        MockReply::RawSse(body) => return full(StatusCode::OK, "text/event-stream", body),
        MockReply::Truncated(text) => return truncated(&text, request, index, stream, anthropic),
        // Unwrapped above.
        MockReply::Thinking(..) => Answer { content: None, calls: Vec::new(), finish: "stop" },
    };
    if anthropic {
        return anthropic_response(shared, &answer, thinking.as_deref(), request, body, index).await;
    }
    let model = model_of(request);
    let id = format!("chatcmpl-mock-{index}");
    let mut usage = usage(request_len, &answer);
    if shared.openai_cache.load(Ordering::Relaxed) {
        let blocks = super::mock_anthropic::openai_blocks(&parse_body(body));
        let cache = lock(&shared.cache).account(&blocks);
        usage["prompt_tokens_details"] = json!({"cached_tokens": cache.read.min(usage["prompt_tokens"].as_u64().unwrap_or(0))});
    }
    if stream {
        let include_usage = request.include_usage();
        let pieces = *lock(&shared.stream_pieces);
        let events = sse_events(&answer, thinking.as_deref(), &id, model, include_usage.then_some(usage), pieces);
        return paced(shared, events);
    }
    let mut message = json!({"role": "assistant", "content": answer.content});
    if let Some(thinking) = &thinking {
        message["reasoning_content"] = thinking.as_str().into();
    }
    if !answer.calls.is_empty() {
        message["tool_calls"] = answer
            .calls
            .iter()
            .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
            .collect();
    }
    let body = chitin::provider::openai::wire::completion(&id, CREATED, model, message, answer.finish, Some(usage));
    full(StatusCode::OK, "application/json", body.to_string())
}

/// A streamed answer, `chunk_delay` between its events.
fn paced(shared: &Shared, events: Vec<Bytes>) -> Response<Body> {
    let delay = *lock(&shared.chunk_delay);
    let frames = futures::stream::iter(events.into_iter().enumerate()).then(move |(n, e)| async move {
        if n > 0 && !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Ok(Frame::data(e))
    });
    sse_response(StreamBody::new(frames).boxed_unsync())
}

/// The answer as the Anthropic Messages API gives it (`mock_anthropic`),
/// with prompt-cache accounting.
async fn anthropic_response(shared: &Shared, answer: &Answer, thinking: Option<&str>, request: &RequestHead, body: &Bytes, index: usize) -> Response<Body> {
    let blocks = super::mock_anthropic::anthropic_blocks(&parse_body(body));
    let cache = lock(&shared.cache).account(&blocks);
    let output = answer.content.as_deref().map_or(0, str::len)
        + thinking.map_or(0, str::len)
        + answer.calls.iter().map(|(_, name, args)| name.len() + args.len()).sum::<usize>();
    let id = format!("msg_mock_{index}");
    let rendered = super::mock_anthropic::Rendered {
        id: &id,
        model: model_of(request),
        thinking,
        content: answer.content.as_deref(),
        calls: &answer.calls,
        finish: answer.finish,
        output_tokens: (output as u64 / 4).max(1),
        cache,
    };
    if request.stream {
        let pieces = *lock(&shared.stream_pieces);
        return paced(shared, super::mock_anthropic::stream_events(&rendered, pieces, split));
    }
    full(StatusCode::OK, "application/json", super::mock_anthropic::message(&rendered).to_string())
}

/// Plausible token counts: a quarter of the bytes, as a rough tokenizer.
fn usage(request_len: usize, answer: &Answer) -> Value {
    let prompt = request_len / 4;
    let output = answer.content.as_deref().map_or(0, str::len)
        + answer.calls.iter().map(|(_, name, args)| name.len() + args.len()).sum::<usize>();
    let completion = (output / 4).max(1);
    chitin::provider::openai::wire::usage(prompt as u64, completion as u64)
}

fn sse_response(body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("text/event-stream"));
    headers.insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-cache"));
    response
}

fn event(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

fn chunk(id: &str, model: &str, delta: Value, finish: Option<&str>) -> Value {
    chitin::provider::openai::wire::chunk(id, CREATED, model, delta, finish)
}

/// `text` in `parts` pieces of about equal length (on char boundaries).
fn split(text: &str, parts: usize) -> Vec<&str> {
    let chars = text.chars().count();
    if chars == 0 {
        return Vec::new();
    }
    let size = chars.div_ceil(parts.max(1));
    let mut pieces = Vec::new();
    let mut start = 0;
    for (n, (at, _)) in text.char_indices().enumerate() {
        if n > 0 && n % size == 0 {
            pieces.push(&text[start..at]);
            start = at;
        }
    }
    pieces.push(&text[start..]);
    pieces
}

/// The answer as OpenAI streams it: a role chunk, content in a few deltas,
/// each tool call as a header delta then argument deltas, the finish reason,
/// the usage chunk when asked for, and `[DONE]`.
fn sse_events(answer: &Answer, thinking: Option<&str>, id: &str, model: &str, usage: Option<Value>, pieces: usize) -> Vec<Bytes> {
    let mut events = Vec::new();
    let first = if answer.content.is_some() {
        json!({"role": "assistant", "content": ""})
    } else {
        json!({"role": "assistant", "content": null})
    };
    events.push(event(&chunk(id, model, first, None)));
    for piece in split(thinking.unwrap_or_default(), 2) {
        events.push(event(&chunk(id, model, json!({"reasoning_content": piece}), None)));
    }
    for piece in split(answer.content.as_deref().unwrap_or_default(), pieces) {
        events.push(event(&chunk(id, model, json!({"content": piece}), None)));
    }
    for (index, (call_id, name, args)) in answer.calls.iter().enumerate() {
        let head = json!({"tool_calls": [{"index": index, "id": call_id, "type": "function",
            "function": {"name": name, "arguments": ""}}]});
        events.push(event(&chunk(id, model, head, None)));
        for piece in split(args, 2) {
            let delta = json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]});
            events.push(event(&chunk(id, model, delta, None)));
        }
    }
    events.push(event(&chunk(id, model, json!({}), Some(answer.finish))));
    if let Some(usage) = usage {
        let last = json!({"id": id, "object": "chat.completion.chunk", "created": CREATED, "model": model,
            "choices": [], "usage": usage});
        events.push(event(&last));
    }
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

/// Sends the start of an answer, in the API the request came in, then
/// fails the body, which makes hyper drop the connection mid-response.
fn truncated(text: &str, request: &RequestHead, index: usize, stream: bool, anthropic: bool) -> Response<Body> {
    let model = model_of(request);
    let start: Vec<Bytes> = if anthropic {
        let id = format!("msg_mock_{index}");
        let rendered = super::mock_anthropic::Rendered {
            id: &id,
            model,
            thinking: None,
            content: Some(text),
            calls: &[],
            finish: "stop",
            output_tokens: (text.len() as u64 / 4).max(1),
            cache: Default::default(),
        };
        if stream {
            // Everything up to the text block's last delta: the block, the
            // message and the stream never end.
            let mut events = super::mock_anthropic::stream_events(&rendered, 3, split);
            let stop = events.iter().position(|e| e.starts_with(b"event: content_block_stop")).unwrap_or(events.len());
            events.truncate(stop);
            events
        } else {
            cut_in_half(super::mock_anthropic::message(&rendered).to_string())
        }
    } else {
        let id = format!("chatcmpl-mock-{index}");
        if stream {
            let mut events = vec![event(&chunk(&id, model, json!({"role": "assistant", "content": ""}), None))];
            events.extend(split(text, 3).into_iter().map(|piece| event(&chunk(&id, model, json!({"content": piece}), None))));
            events
        } else {
            cut_in_half(json!({"id": id, "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}]}).to_string())
        }
    };
    let frames = futures::stream::iter(start.into_iter().map(|b| Ok(Frame::data(b))));
    // The pause lets hyper flush what was sent before the error ends the
    // connection; without it the client could see nothing at all.
    let failure = futures::stream::once(async {
        tokio::time::sleep(Duration::from_millis(30)).await;
        Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "MockLlm: truncated reply"))
    });
    let body = StreamBody::new(futures::StreamExt::chain(frames, failure)).boxed_unsync();
    if stream { sse_response(body) } else { full_stream(body) }
}

/// The first half of a JSON body: cut inside the JSON, so it cannot parse.
fn cut_in_half(body: String) -> Vec<Bytes> {
    let mut cut = body.len() / 2;
    while !body.is_char_boundary(cut) {
        cut -= 1;
    }
    vec![Bytes::from(body[..cut].to_string())]
}

fn full_stream(body: Body) -> Response<Body> {
    let mut response = Response::new(body);
    response.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_every_char() {
        assert_eq!(split("", 3), Vec::<&str>::new());
        assert_eq!(split("ab", 3), ["a", "b"]);
        assert_eq!(split("héllo wörld", 3), ["héll", "o wö", "rld"]);
        assert_eq!(split("héllo wörld", 3).concat(), "héllo wörld");
    }

    #[test]
    fn scripts_run_out_into_the_default() {
        let mut script = Script::from([MockReply::Blank]).then(MockReply::text("b")).or_else(MockReply::Hang);
        assert_eq!(script.next(), MockReply::Blank);
        assert_eq!(script.next(), MockReply::text("b"));
        assert_eq!(script.next(), MockReply::Hang);
        assert_eq!(Script::default().next(), MockReply::text(SCRIPT_EXHAUSTED));
    }
}
