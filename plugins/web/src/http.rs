//! One HTTP request and its answer, and the client that sends it.
//!
//! The tools are written against [`Client`], so their logic (redirects,
//! extraction, provider parsing) is tested natively with a scripted client;
//! in the component, [`WasiClient`] sends through `wasi:http`, where the
//! host checks every request against the user's grant and fills in secrets.
//! `wasi:http` never follows redirects: [`crate::fetch`] does, one new
//! request per hop, so the host re-checks each.

use std::fmt;

/// Largest response body read; a larger one is an error, not a truncation
/// (a page cut mid-way may drop what was asked for without saying so).
pub const MAX_BODY_BYTES: usize = 5 << 20;

/// An HTTP method the tools use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// POST.
    Post,
}

/// A request as the tools build it. Headers may carry `{{secret:NAME}}`,
/// which only the host replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// GET or POST.
    pub method: Method,
    /// Absolute `http(s)` URL.
    pub url: String,
    /// Header names and values.
    pub headers: Vec<(String, String)>,
    /// Body of a POST.
    pub body: Option<String>,
}

impl Request {
    /// A GET of `url`.
    pub fn get(url: impl Into<String>) -> Request {
        Request { method: Method::Get, url: url.into(), headers: Vec::new(), body: None }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: impl Into<String>) -> Request {
        self.headers.push((name.to_string(), value.into()));
        self
    }
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, String)>,
    /// The whole body.
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The host's network policy refused it (not granted, or a private
    /// address the grant does not name).
    Denied,
    /// The host refused it with its own message (a secret that is not
    /// configured, too many requests in flight).
    Host(String),
    /// The name does not resolve.
    Dns,
    /// The server could not be reached or broke off.
    Failed(String),
    /// The body is over [`MAX_BODY_BYTES`].
    TooLarge,
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HttpError::Denied => f.write_str(
                "refused by the host's network policy: this host is not granted to the web plugin, or it is a private or loopback address the grant does not name (the user can allow it with `network` under [plugins.web])",
            ),
            HttpError::Host(message) => write!(f, "refused by the host: {message}"),
            HttpError::Dns => f.write_str("cannot resolve the host name"),
            HttpError::Failed(message) => f.write_str(message),
            HttpError::TooLarge => write!(f, "the response is larger than {} MiB", MAX_BODY_BYTES >> 20),
        }
    }
}

/// Sends requests.
pub trait Client {
    /// Sends `request` and reads the whole answer, of any status.
    fn send(&self, request: &Request) -> Result<Response, HttpError>;
}

/// The component's client: blocking calls over `wasi:http`.
#[cfg(target_arch = "wasm32")]
pub struct WasiClient;

#[cfg(target_arch = "wasm32")]
impl Client for WasiClient {
    fn send(&self, request: &Request) -> Result<Response, HttpError> {
        use wasip2::http::outgoing_handler;
        use wasip2::http::types::{ErrorCode, Fields, OutgoingBody, OutgoingRequest, RequestOptions, Scheme};

        let (scheme, rest) = if let Some(rest) = request.url.strip_prefix("https://") {
            (Scheme::Https, rest)
        } else if let Some(rest) = request.url.strip_prefix("http://") {
            (Scheme::Http, rest)
        } else {
            return Err(HttpError::Failed(format!("not an http(s) URL: {}", request.url)));
        };
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let path = if path.is_empty() { "/".to_string() } else if path.starts_with('?') { format!("/{path}") } else { path.to_string() };
        let headers: Vec<(String, Vec<u8>)> = request.headers.iter().map(|(k, v)| (k.clone(), v.as_bytes().to_vec())).collect();
        let fields = Fields::from_list(&headers).map_err(|e| HttpError::Failed(format!("bad header: {e:?}")))?;
        let outgoing = OutgoingRequest::new(fields);
        let method = match request.method {
            Method::Get => wasip2::http::types::Method::Get,
            Method::Post => wasip2::http::types::Method::Post,
        };
        let set = outgoing.set_method(&method).is_ok()
            && outgoing.set_scheme(Some(&scheme)).is_ok()
            && outgoing.set_authority(Some(authority)).is_ok()
            && outgoing.set_path_with_query(Some(&path)).is_ok();
        if !set {
            return Err(HttpError::Failed(format!("not a valid request URL: {}", request.url)));
        }
        let options = RequestOptions::new();
        let second = 1_000_000_000u64;
        let _ = options.set_connect_timeout(Some(10 * second));
        let _ = options.set_first_byte_timeout(Some(20 * second));
        let _ = options.set_between_bytes_timeout(Some(20 * second));
        let body = outgoing.body().map_err(|_| HttpError::Failed("no request body".into()))?;
        let future = outgoing_handler::handle(outgoing, Some(options)).map_err(|e| classify(&e))?;
        // The refusal (not granted) closes the body stream; the response
        // future's error is the one that says why, so it is checked first.
        let written: Result<(), HttpError> = (|| {
            let stream = body.write().map_err(|_| HttpError::Failed("no body stream".into()))?;
            for chunk in request.body.as_deref().unwrap_or("").as_bytes().chunks(4096) {
                stream.blocking_write_and_flush(chunk).map_err(|e| HttpError::Failed(format!("writing the body: {e:?}")))?;
            }
            Ok(())
        })();
        let finished = OutgoingBody::finish(body, None).map_err(|e| classify(&e));
        future.subscribe().block();
        let response = match future.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(e))) => return Err(classify(&e)),
            _ => return Err(HttpError::Failed("no response".into())),
        };
        written?;
        finished?;
        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), String::from_utf8_lossy(&v).into_owned()))
            .collect();
        let incoming = response.consume().map_err(|_| HttpError::Failed("no response body".into()))?;
        let mut bytes = Vec::new();
        {
            let stream = incoming.stream().map_err(|_| HttpError::Failed("no response stream".into()))?;
            loop {
                match stream.blocking_read(64 * 1024) {
                    Ok(chunk) => bytes.extend(chunk),
                    Err(wasip2::io::streams::StreamError::Closed) => break,
                    Err(wasip2::io::streams::StreamError::LastOperationFailed(e)) => {
                        return Err(HttpError::Failed(format!("reading the response: {}", e.to_debug_string())));
                    }
                }
                if bytes.len() > MAX_BODY_BYTES {
                    return Err(HttpError::TooLarge);
                }
            }
        }
        return Ok(Response { status, headers, body: bytes });

        fn classify(e: &ErrorCode) -> HttpError {
            match e {
                ErrorCode::HttpRequestDenied => HttpError::Denied,
                ErrorCode::InternalError(Some(message)) => HttpError::Host(message.clone()),
                ErrorCode::DnsError(_) | ErrorCode::DestinationNotFound => HttpError::Dns,
                ErrorCode::ConnectionRefused => HttpError::Failed("the connection was refused".into()),
                ErrorCode::ConnectionTimeout | ErrorCode::ConnectionReadTimeout => HttpError::Failed("the server did not answer in time".into()),
                ErrorCode::HttpResponseTimeout => HttpError::Failed("the server did not answer in time".into()),
                ErrorCode::HttpResponseBodySize(_) => HttpError::TooLarge,
                ErrorCode::TlsCertificateError | ErrorCode::TlsProtocolError | ErrorCode::TlsAlertReceived(_) => {
                    HttpError::Failed("the TLS handshake failed".into())
                }
                other => HttpError::Failed(format!("the request failed: {other:?}")),
            }
        }
    }
}
