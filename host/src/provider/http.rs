//! The HTTP half of every provider: one [`HttpProvider`] sends a request,
//! reads a plain or a streamed answer under the caps and timeouts, maps HTTP
//! failures to a [`ProviderError`] a user can act on, and retries
//! ([`RetryPolicy`]). What differs between APIs (the path, the auth headers,
//! the body, how an answer and a stream event are read) is a [`Wire`]:
//! `openai/` and `anthropic/` each implement one.

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use serde_json::Value;
use tokio::time::{Instant, timeout, timeout_at};

use super::retry::{self, Attempt, RetryPolicy};
use super::sse::{SseEvent, SseParser};
use super::{ChatRequest, ChatResponse, Provider, ProviderError, StreamSink};

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

/// Settings of an [`HttpProvider`].

#[derive(Clone)]
pub struct ProviderOptions {
    /// API root, e.g. `https://api.openai.com/v1`; the API's path
    /// (`/chat/completions`, `/messages`) is appended.
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
    /// The model reads images; when false, each image of a request is
    /// replaced by a text note (`[providers.<name>] vision = false`).
    pub vision: bool,
}

impl Default for ProviderOptions {
    fn default() -> Self {
        ProviderOptions {
            base_url: "https://api.openai.com/v1".into(),
            api_key: None,
            request_timeout: Duration::from_secs(300),
            retry: RetryPolicy::default(),
            stream: true,
            vision: true,
        }
    }
}

impl ProviderOptions {
    /// Defaults for the API at `base_url`.
    pub fn new(base_url: impl Into<String>) -> Self {
        ProviderOptions { base_url: base_url.into(), ..Default::default() }
    }
}

impl std::fmt::Debug for ProviderOptions {
    // Hand-written so the API key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderOptions")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &self.request_timeout)
            .field("retry", &self.retry)
            .field("stream", &self.stream)
            .field("vision", &self.vision)
            .finish()
    }
}

/// One API's wire format: everything [`HttpProvider`] does not know.
pub trait Wire: Send + Sync + 'static {
    /// The stream decoder of one answer.
    type Stream: StreamDecoder;
    /// A short name for status output (`openai`, `anthropic`).
    const NAME: &'static str;
    /// Appended to the base URL (`/chat/completions`).
    const PATH: &'static str;
    /// The request body; `stream` asks for server-sent events.
    fn encode(&self, request: &ChatRequest, stream: bool) -> serde_json::Result<Vec<u8>>;
    /// Adds the key and any API headers (versions) to a request.
    fn headers(&self, builder: reqwest::RequestBuilder, api_key: Option<&str>) -> reqwest::RequestBuilder;
    /// Reads a plain (non-streamed) answer, leniently.
    fn decode(&self, body: &str, model: &str, endpoint: &str) -> ChatResponse;
    /// A decoder for one streamed answer.
    fn stream(&self) -> Self::Stream;
}

/// Turns one answer's server-sent events into a response.
pub trait StreamDecoder: Send {
    /// Takes one event, passing text to `sink`; false when the stream is
    /// over (its end event, an error).
    fn event(&mut self, event: &SseEvent, sink: Option<&StreamSink>) -> bool;
    /// Marks the answer as over the size cap.
    fn refuse(&mut self, error: ProviderError);
    /// The response, given why reading stopped (`None`: the stream ended).
    fn finish(self, interruption: Option<ProviderError>) -> Attempt;
}

/// Why an [`HttpProvider`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ProviderSetupError {
    /// The base URL is not an `http(s)://` URL.
    #[error("invalid model provider URL {0:?}: expected http://… or https://…")]
    InvalidBaseUrl(String),
    /// The HTTP client could not be set up (TLS backend).
    #[error("could not set up the HTTP client: {0}")]
    Client(#[source] reqwest::Error),
}

/// A model API over HTTP, speaking the wire format `W`.
pub struct HttpProvider<W: Wire> {
    wire: W,
    client: reqwest::Client,
    endpoint: String,
    api_key: Option<String>,
    request_timeout: Duration,
    retry: RetryPolicy,
    stream: bool,
    vision: bool,
    max_response_bytes: usize,
}

impl<W: Wire> std::fmt::Debug for HttpProvider<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpProvider").field("api", &W::NAME).field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

impl<W: Wire> HttpProvider<W> {
    /// A provider for `options.base_url` speaking `wire`.
    pub fn with_wire(wire: W, options: ProviderOptions) -> Result<Self, ProviderSetupError> {
        let base = options.base_url.trim().trim_end_matches('/');
        let scheme_ok = ["http://", "https://"]
            .iter()
            .any(|s| base.len() > s.len() && base.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s)));
        if !scheme_ok {
            return Err(ProviderSetupError::InvalidBaseUrl(options.base_url));
        }
        let client = reqwest::Client::builder()
            .user_agent(concat!("chitin/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(ProviderSetupError::Client)?;
        Ok(HttpProvider {
            wire,
            client,
            endpoint: format!("{base}{}", W::PATH),
            api_key: options.api_key.filter(|k| !k.is_empty()),
            request_timeout: options.request_timeout,
            retry: options.retry,
            stream: options.stream,
            vision: options.vision,
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
        let builder = self.client.post(&self.endpoint).header(CONTENT_TYPE, "application/json").body(body);
        let mut builder = self.wire.headers(builder, self.api_key.as_deref());
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
            let mut stream = self.wire.stream();
            let events = parser.push(&body).into_iter().chain(parser.finish());
            for event in events {
                if !stream.event(&event, sink) {
                    break;
                }
            }
            return stream.finish(None);
        }
        let response = self.wire.decode(&text, model, &self.endpoint);
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
        let mut answer = self.wire.stream();
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
                answer.refuse(self.too_large());
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
impl<W: Wire> Provider for HttpProvider<W> {
    async fn chat(&self, request: &ChatRequest, stream: Option<StreamSink>) -> ChatResponse {
        let sink = stream.filter(|_| self.stream);
        let without_images;
        let request = if !self.vision && request.messages.iter().any(|m| !m.images.is_empty()) {
            without_images = images_as_notes(request);
            &without_images
        } else {
            request
        };
        let body = match self.wire.encode(request, sink.is_some()) {
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
        W::NAME
    }
}

/// `request` for a model without vision: each image becomes a line of text,
/// so the model knows something was sent that it cannot see.
fn images_as_notes(request: &ChatRequest) -> ChatRequest {
    let mut request = request.clone();
    for message in request.messages.iter_mut().filter(|m| !m.images.is_empty()) {
        let count = std::mem::take(&mut message.images).len();
        let note = format!("[{count} image(s) attached; this model cannot see images, so they were not sent]");
        let text = message.content.take().unwrap_or_default();
        message.content = Some(if text.is_empty() { note } else { format!("{text}\n{note}") });
    }
    request
}

/// A body read up to a cap.
pub(crate) struct Body {
    pub bytes: Vec<u8>,
    /// More than the cap arrived (or was announced); `bytes` holds the start.
    pub cut: bool,
}

pub(crate) enum BodyError {
    TimedOut,
    Transport(reqwest::Error),
}

/// Reads `response`'s body by chunks, stopping at `cap` bytes, so a huge
/// answer costs at most `cap` of memory (one buffer, sized from the
/// `Content-Length` when it is within the cap).
pub(crate) async fn read_body(mut response: reqwest::Response, cap: usize, deadline: Instant) -> Result<Body, BodyError> {
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

/// Feeds `body` to `decoder` the way [`HttpProvider`] does, `chunk` bytes
/// per read (to exercise reassembly): the attempt and the text the sink saw.
#[cfg(test)]
pub(crate) fn decode_stream<D: StreamDecoder>(mut decoder: D, body: &str, chunk: usize) -> (Attempt, Vec<String>) {
    use std::sync::{Arc, Mutex};
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink: StreamSink = {
        let seen = seen.clone();
        Arc::new(move |piece: &str| seen.lock().unwrap().push(piece.to_string()))
    };
    let mut parser = SseParser::default();
    let mut events: Vec<SseEvent> = body.as_bytes().chunks(chunk).flat_map(|c| parser.push(c)).collect();
    events.extend(parser.finish());
    for event in &events {
        if !decoder.event(event, Some(&sink)) {
            break;
        }
    }
    let attempt = decoder.finish(None);
    let seen = seen.lock().unwrap().clone();
    (attempt, seen)
}

/// Why a stream that stopped (`interruption`: the read error, `None`: it
/// ended) is a failure, or `None` when the answer was complete. Shared by
/// every wire's [`StreamDecoder::finish`], so the wording is the same.
pub(crate) fn stream_end_error(started: bool, complete: bool, interruption: Option<ProviderError>) -> Option<ProviderError> {
    let ended = |message: &str| {
        Some(interruption.clone().unwrap_or_else(|| ProviderError { status: Some(200), retryable: true, message: message.into() }))
    };
    if !started {
        ended("the model provider ended the stream without an answer")
    } else if complete {
        // Everything needed arrived; a late hiccup loses nothing.
        None
    } else {
        ended("the model provider ended the stream before the answer was complete")
    }
}

pub(crate) fn http_error(status: u16, body: &str, model: &str, endpoint: &str) -> ProviderError {
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

pub(crate) fn billing_message(status: u16, detail: &str) -> String {
    format!(
        "the model provider refused the request for billing or quota reasons (HTTP {status}): {detail}; \
         check your billing, credits and quota with the provider"
    )
}

/// A quota or billing problem, which waiting does not fix (unlike a rate limit).
pub(crate) fn mentions_quota(body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    ["insufficient_quota", "billing", "quota"].iter().any(|word| body.contains(word))
}

/// The API's own message from an error body, clipped; the raw body if it is
/// not the usual `{"error": {"message": …}}`.
pub(crate) fn api_message(body: &str) -> String {
    if let Ok(value) = serde_json::from_str::<Value>(body) {
        let error = value.get("error").unwrap_or(&value);
        let candidates = [&error["message"], error, &value["message"], &value["detail"]];
        if let Some(text) = candidates.iter().find_map(|v| v.as_str().map(str::trim).filter(|s| !s.is_empty())) {
            return clip(text);
        }
    }
    clip(body.trim())
}

/// An answer that could not be understood: retryable, like a 5xx.
pub(crate) fn unreadable(problem: &str, body: &str) -> ProviderError {
    ProviderError {
        status: Some(200),
        retryable: true,
        message: format!("the model provider sent an unreadable answer ({problem}): {}", clip(body.trim())),
    }
}

pub(crate) fn clip(text: &str) -> String {
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
pub(crate) fn chain(error: &dyn std::error::Error) -> String {
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

