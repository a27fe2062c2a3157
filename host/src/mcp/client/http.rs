//! A remote MCP server's HTTP, through the host's policy: rmcp's
//! streamable-HTTP transport asks, this answers (it implements rmcp's
//! `StreamableHttpClient` over the host's reqwest).
//!
//! The rules are those of a plugin's `wasi:http` ([`crate::plugins::http`]),
//! with the server's URL as the whole grant:
//! - only the URL's own `host:port` is admitted; a private or loopback
//!   address only when the URL names one (`http://127.0.0.1:8080/mcp`,
//!   `localhost`), and a name that resolves to one is refused; plain HTTP
//!   is pinned to the checked address (no DNS rebinding);
//! - redirects are never followed: a 3xx is an error naming it, so nothing
//!   of another host is ever contacted;
//! - `{{secret:NAME}}` in a configured header is filled in by the host, for
//!   this server's host only, over https:// (or plain http:// to loopback);
//!   every response and error text is redacted of the values, so a server
//!   that reflects the token gives the model and the logs only the
//!   placeholder;
//! - bodies are bounded: a JSON answer by [`MAX_JSON_BYTES`], each SSE event
//!   by [`MAX_EVENT_BYTES`].

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{BoxStream, StreamExt};
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, ServerJsonRpcMessage};
use rmcp::transport::common::http_header::{EVENT_STREAM_MIME_TYPE, HEADER_SESSION_ID, JSON_MIME_TYPE};
use rmcp::transport::streamable_http_client::{
    AuthRequiredError, SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::{Sse, SseStream};

use crate::plugins::grants::HostPattern;
use crate::plugins::manifest::channel::{Injection, SecretSpec};
use crate::plugins::secrets::{Destination, Place, Secrets};
use crate::plugins::warn_budget::WarnBudget;

/// The largest JSON answer read.
pub const MAX_JSON_BYTES: usize = 16 * 1024 * 1024;

/// The most of an error answer read (a refused `server/discover`).
const MAX_ERROR_BYTES: usize = 64 * 1024;

/// The largest single SSE event read (the same bound as a stdio line).
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Why a request to the server failed; the text is redacted.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HttpFailure(pub String);

pub(super) type Failure = StreamableHttpError<HttpFailure>;

/// One server's HTTP client. Cheap to clone.
#[derive(Clone)]
pub struct PolicyHttp {
    inner: Arc<Inner>,
}

struct Inner {
    client: reqwest::Client,
    /// `mcp:NAME`, for logs.
    label: Arc<str>,
    /// The server URL's `host:port`, the only host admitted.
    granted: Vec<HostPattern>,
    /// The configured headers, placeholders unfilled.
    headers: Vec<(HeaderName, String)>,
    secrets: Secrets,
    warnings: WarnBudget,
}

impl PolicyHttp {
    /// A client for the server at `url`: `headers` sent with every request,
    /// `{{secret:NAME}}` in them filled from `secrets` (see
    /// [`server_secrets`]), and every answer redacted of them.
    pub fn new(label: &str, url: &str, headers: &[(String, String)], secrets: Secrets) -> Result<PolicyHttp, String> {
        let pattern = HostPattern::parse(&authority_of(url)?)?;
        let header_names: Vec<HeaderName> = headers
            .iter()
            .map(|(name, _)| HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("header `{name}` is not a valid name")))
            .collect::<Result<_, _>>()?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(std::time::Duration::from_secs(15))
            .build()
            .map_err(|e| format!("the HTTP client does not build: {e}"))?;
        Ok(PolicyHttp {
            inner: Arc::new(Inner {
                client,
                warnings: WarnBudget::per_call(label.into(), "refused requests", crate::plugins::warn_budget::PER_CALL),
                label: label.into(),
                granted: vec![pattern],
                headers: header_names.into_iter().zip(headers.iter().map(|(_, v)| v.clone())).collect(),
                secrets,
            }),
        })
    }

    /// `text` with every secret value written as its placeholder.
    fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        self.inner.secrets.redact(text)
    }

    fn fail(&self, message: impl AsRef<str>) -> Failure {
        StreamableHttpError::Client(HttpFailure(self.redact(message.as_ref()).into_owned()))
    }

    /// Sends one request through the policy; a redirect is an error.
    pub(super) async fn send(
        &self,
        method: reqwest::Method,
        url: &str,
        extra: Vec<(HeaderName, HeaderValue)>,
        body: Option<Vec<u8>>,
    ) -> Result<reqwest::Response, Failure> {
        let inner = &self.inner;
        let uri: http::Uri = url.parse().map_err(|e| self.fail(format!("bad URL {url}: {e}")))?;
        let pinned = crate::plugins::http::admit(&inner.label, &inner.granted, &uri, &inner.warnings)
            .await
            .map_err(|e| self.fail(format!("request to {url} refused by the host's HTTP policy ({e}): only the server's own URL is reached")))?;
        let host = uri.host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_string();
        let scheme = uri.scheme_str().unwrap_or("http").to_string();
        let port = uri.port_u16().unwrap_or(if scheme == "https" { 443 } else { 80 });
        let mut target = reqwest::Url::parse(url).map_err(|e| self.fail(format!("bad URL {url}: {e}")))?;
        if let Some(addr) = pinned {
            // Plain HTTP goes to the address just checked; `Host` keeps the name.
            let _ = target.set_ip_host(addr.ip());
        }
        let mut request = inner.client.request(method, target);
        if pinned.is_some() {
            request = request.header(reqwest::header::HOST, uri.authority().map(|a| a.as_str()).unwrap_or_default());
        }
        let dest = Destination::new(&host, port, &scheme, &host);
        for (name, raw) in &inner.headers {
            let filled = inner.secrets.fill(raw, Place::Header(name.as_str()), &dest).map_err(|e| self.fail(format!("request to {url} not sent: {e}")))?;
            let value = HeaderValue::from_str(&filled).map_err(|_| self.fail(format!("header `{name}` is not a valid value once filled in")))?;
            request = request.header(name, value);
        }
        for (name, value) in extra {
            request = request.header(name, value);
        }
        // Encoded bytes could not be redacted, and are not asked for.
        request = request.header(reqwest::header::ACCEPT_ENCODING, "identity");
        if let Some(body) = body {
            request = request.header(reqwest::header::CONTENT_TYPE, JSON_MIME_TYPE).body(body);
        }
        let response = request.send().await.map_err(|e| self.fail(format!("request to {url} failed: {}", e.without_url())))?;
        let status = response.status();
        if status.is_redirection() {
            let location = response.headers().get(reqwest::header::LOCATION).and_then(|l| l.to_str().ok()).unwrap_or("(none)").to_string();
            if inner.warnings.admit() {
                tracing::warn!(server = %inner.label, %status, location = %self.redact(&location), "MCP server answered with a redirect; not followed");
            }
            return Err(self.fail(format!("the server answered {status} (a redirect to {location}); redirects are not followed")));
        }
        Ok(response)
    }

    /// A bounded JSON body.
    async fn read_json(&self, response: reqwest::Response) -> Result<ServerJsonRpcMessage, Failure> {
        let bytes = read_bounded(response, MAX_JSON_BYTES).await.map_err(|e| self.fail(e))?;
        let text = String::from_utf8_lossy(&bytes);
        let text = self.redact(&text);
        serde_json::from_str(&text).map_err(StreamableHttpError::Deserialize)
    }

    /// An SSE body as events, each bounded, redacted.
    pub(super) fn events(&self, response: reqwest::Response) -> BoxStream<'static, Result<Sse, SseError>> {
        let this = self.clone();
        let body = response.bytes_stream().map(|chunk| chunk.map_err(|e| std::io::Error::other(e.without_url().to_string())));
        let bytes = bounded_events(body, MAX_EVENT_BYTES);
        SseStream::from_bytes_stream(bytes)
            .map(move |event| {
                event.map(|mut sse| {
                    if let Some(data) = sse.data.take() {
                        sse.data = Some(this.redact(&data).into_owned());
                    }
                    sse
                })
            })
            .boxed()
    }

    pub(super) fn status_error(&self, response: &reqwest::Response) -> Option<Failure> {
        let status = response.status();
        if status == reqwest::StatusCode::UNAUTHORIZED {
            let header = response.headers().get(reqwest::header::WWW_AUTHENTICATE).and_then(|h| h.to_str().ok()).unwrap_or("Bearer");
            return Some(StreamableHttpError::AuthRequired(AuthRequiredError::new(header.to_string())));
        }
        if !status.is_success() {
            return Some(self.fail(format!("the server answered {status}")));
        }
        None
    }
}

/// The `host:port` of `url`, as a grant pattern writes it (an IPv6
/// address in brackets).
fn authority_of(url: &str) -> Result<String, String> {
    let uri: http::Uri = url.parse().map_err(|e| format!("`url` does not parse: {e}"))?;
    let host = uri.host().ok_or("`url` has no host")?;
    let port = uri.port_u16().unwrap_or(if uri.scheme_str() == Some("https") { 443 } else { 80 });
    Ok(format!("{host}:{port}"))
}

/// A server's secrets (name → value): each may be filled into the headers
/// named `header_names` of requests to the server's own host (when it has
/// a `url`), and every form of every value is redacted from whatever the
/// server sends back: answers, tool results, errors, log lines.
pub fn server_secrets<'a>(url: Option<&str>, header_names: impl Iterator<Item = &'a String>, values: &[(String, String)]) -> Result<Secrets, String> {
    let audience = url.map(authority_of).transpose()?;
    let inject: Vec<Injection> = match &audience {
        Some(_) => header_names
            .map(|name| HeaderName::from_bytes(name.as_bytes()).map(|h| Injection::Header(h.as_str().to_string())).map_err(|_| format!("header `{name}` is not a valid name")))
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let declared: Vec<SecretSpec> =
        values.iter().map(|(name, _)| SecretSpec { name: name.clone(), audience: audience.clone(), inject: inject.clone() }).collect();
    let by_name: HashMap<&str, &str> = values.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
    Secrets::new(&declared, |name| by_name.get(name).copied()).map_err(|e| e.to_string())
}

pub(super) fn content_type(response: &reqwest::Response) -> String {
    response.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default().to_ascii_lowercase()
}

fn session_of(response: &reqwest::Response) -> Option<String> {
    response.headers().get(HEADER_SESSION_ID).and_then(|v| v.to_str().ok()).map(str::to_string)
}

/// Reads at most `cap` bytes of a body; more is an error, not a cut.
async fn read_bounded(response: reqwest::Response, cap: usize) -> Result<Vec<u8>, String> {
    if response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(format!("the server's answer is over {cap} bytes"));
    }
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| format!("reading the answer failed: {}", e.without_url()))?;
        if body.len() + chunk.len() > cap {
            return Err(format!("the server's answer is over {cap} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The body's bytes, failing once one event (the bytes since the last blank
/// line) grows past `cap`: a server that never ends an event cannot grow
/// the host's buffer without bound. Lines may end in `\n`, `\r\n` or `\r`
/// (as SSE allows), and a blank line split across two chunks still ends
/// the event.
fn bounded_events(
    stream: impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
    cap: usize,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    let mut size = EventSize::default();
    stream.map(move |chunk| {
        let chunk = chunk?;
        if size.feed(&chunk) > cap {
            return Err(std::io::Error::other(format!("an event from the server is over {cap} bytes")));
        }
        Ok(chunk)
    })
}

/// The size of the SSE event being received, across chunks.
#[derive(Default)]
struct EventSize {
    /// Bytes of the current event.
    event: usize,
    /// Bytes of the current line (0: at the start of a line).
    line: usize,
    /// The last byte was a `\r`: a `\n` right after it ends no other line.
    after_cr: bool,
}

impl EventSize {
    /// Takes in `bytes`; returns the largest event size reached.
    fn feed(&mut self, bytes: &[u8]) -> usize {
        let mut largest = self.event;
        for &byte in bytes {
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                continue;
            }
            match byte {
                b'\n' | b'\r' => {
                    if self.line == 0 {
                        self.event = 0;
                    } else {
                        self.line = 0;
                        self.event += 1;
                    }
                    self.after_cr = byte == b'\r';
                }
                _ => {
                    self.line += 1;
                    self.event += 1;
                    largest = largest.max(self.event);
                }
            }
        }
        largest
    }
}

fn extra_headers(session_id: Option<&str>, custom: HashMap<HeaderName, HeaderValue>) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers: Vec<(HeaderName, HeaderValue)> = custom.into_iter().collect();
    if let Some(id) = session_id.and_then(|s| HeaderValue::from_str(s).ok()) {
        // HEADER_SESSION_ID, lowercased as `from_static` wants it.
        headers.push((HeaderName::from_static("mcp-session-id"), id));
    }
    headers
}

impl StreamableHttpClient for PolicyHttp {
    type Error = HttpFailure;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Failure> {
        let mut headers = extra_headers(session_id.as_deref(), custom_headers);
        headers.push((http::header::ACCEPT, HeaderValue::from_static("application/json, text/event-stream")));
        if let Some(token) = auth_header.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok()) {
            headers.push((http::header::AUTHORIZATION, token));
        }
        let discover = match &message {
            ClientJsonRpcMessage::Request(request) if matches!(request.request, ClientRequest::DiscoverRequest(_)) => Some(request.id.clone()),
            _ => None,
        };
        let body = serde_json::to_vec(&message).map_err(StreamableHttpError::Deserialize)?;
        let response = self.send(reqwest::Method::POST, &uri, headers, Some(body)).await?;
        let status = response.status();
        if status == reqwest::StatusCode::ACCEPTED || status == reqwest::StatusCode::NO_CONTENT {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        // A server of a revision with sessions refuses `server/discover`
        // with a 4xx (no session): answered as a JSON-RPC error, so the
        // client falls back to `initialize` (as rmcp's own clients do).
        if let Some(id) = discover
            && session_id.is_none()
            && status.is_client_error()
            && !matches!(status, reqwest::StatusCode::UNAUTHORIZED | reqwest::StatusCode::FORBIDDEN)
        {
            let body = read_bounded(response, MAX_ERROR_BYTES).await.unwrap_or_default();
            let body = String::from_utf8_lossy(&body);
            let error = match serde_json::from_str::<ServerJsonRpcMessage>(&self.redact(&body)) {
                Ok(ServerJsonRpcMessage::Error(error)) => error.error,
                _ => rmcp::ErrorData::invalid_request(format!("server/discover refused with HTTP {status}"), None),
            };
            return Ok(StreamableHttpPostResponse::Json(ServerJsonRpcMessage::error(error, Some(id)), None));
        }
        if status == reqwest::StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        if let Some(error) = self.status_error(&response) {
            return Err(error);
        }
        let session = session_of(&response);
        let kind = content_type(&response);
        if kind.starts_with(EVENT_STREAM_MIME_TYPE) {
            Ok(StreamableHttpPostResponse::Sse(self.events(response), session))
        } else if kind.starts_with(JSON_MIME_TYPE) {
            Ok(StreamableHttpPostResponse::Json(self.read_json(response).await?, session))
        } else {
            Err(StreamableHttpError::UnexpectedContentType(Some(self.redact(&kind).into_owned())))
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        _auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Failure> {
        let headers = extra_headers(Some(&session_id), custom_headers);
        let response = self.send(reqwest::Method::DELETE, &uri, headers, None).await?;
        if response.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED || response.status().is_success() {
            return Ok(());
        }
        Err(self.fail(format!("ending the session: the server answered {}", response.status())))
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, Failure> {
        let mut headers = extra_headers(session_id.as_deref(), custom_headers);
        headers.push((http::header::ACCEPT, HeaderValue::from_static(EVENT_STREAM_MIME_TYPE)));
        if let Some(id) = last_event_id.and_then(|id| HeaderValue::from_str(&id).ok()) {
            headers.push((HeaderName::from_static("last-event-id"), id));
        }
        if let Some(token) = auth_header.and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok()) {
            headers.push((http::header::AUTHORIZATION, token));
        }
        let response = self.send(reqwest::Method::GET, &uri, headers, None).await?;
        if response.status() == reqwest::StatusCode::METHOD_NOT_ALLOWED {
            return Err(StreamableHttpError::ServerDoesNotSupportSse);
        }
        if let Some(error) = self.status_error(&response) {
            return Err(error);
        }
        if !content_type(&response).starts_with(EVENT_STREAM_MIME_TYPE) {
            return Err(StreamableHttpError::UnexpectedContentType(Some(content_type(&response))));
        }
        Ok(self.events(response))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn run(chunks: &[&str], cap: usize) -> Result<usize, String> {
        let stream = futures::stream::iter(chunks.iter().map(|c| Ok(Bytes::copy_from_slice(c.as_bytes()))).collect::<Vec<_>>());
        let mut events = std::pin::pin!(bounded_events(stream, cap));
        let mut chunks = 0;
        while let Some(chunk) = events.next().await {
            chunk.map_err(|e| e.to_string())?;
            chunks += 1;
        }
        Ok(chunks)
    }

    #[tokio::test]
    async fn an_event_that_never_ends_is_cut_whatever_its_line_endings() {
        // A hostile server sends data lines and never the blank line: with
        // `\r\n` endings an earlier version counted every line as an end.
        let lines = vec!["data: xxxxxxxxxx\r\n"; 20];
        let err = run(&lines, 100).await.unwrap_err();
        assert!(err.contains("over 100 bytes"), "{err}");
        let lines = vec!["data: xxxxxxxxxx\n"; 20];
        assert!(run(&lines, 100).await.is_err());
        let lines = vec!["data: xxxxxxxxxx\r"; 20];
        assert!(run(&lines, 100).await.is_err());
    }

    #[tokio::test]
    async fn many_small_events_pass_even_when_a_blank_line_is_split_across_chunks() {
        // Each event is ~20 bytes; 50 of them are 1000 bytes in all.
        let mut chunks = Vec::new();
        for _ in 0..50 {
            chunks.push("data: xxxxxxxxxx\r\n\r");
            chunks.push("\n");
        }
        assert_eq!(run(&chunks, 100).await.unwrap(), 100);
        let crlf = vec!["data: xxxxxxxxxx\r\n\r\n"; 50];
        assert_eq!(run(&crlf, 100).await.unwrap(), 50);
    }
}
