//! The HTTP requests a channel component asks for, run by the host outside
//! any instance: a long poll never holds a sandbox slot or a wasm stack.
//!
//! Per request, in this order:
//! 1. `api_base`: a URL on the platform's origin (`https://<audience>` of
//!    the declared secrets) is pointed at the configured base instead; the
//!    request still counts as aimed at the audience for secrets, because the
//!    user said that is where the platform is served;
//! 2. the plugin's network grant, with the same rules as `wasi:http`
//!    ([`crate::plugins::http`]: private addresses only when the grant names
//!    the address; plain HTTP pinned to the checked address), checked on the
//!    URL the plugin wrote: a request the `api_base` rewrite redirects is
//!    admitted as the platform request it is, and the base (the user's own
//!    config, e.g. a self-hosted Bot API on 127.0.0.1) is dialled as given;
//! 3. `{{secret:NAME}}` substituted by [`Secrets`] in the places declared
//!    (a path segment, a named header, query parameter or body field), and
//!    only over `https://` or plain `http://` to loopback (judged on where
//!    the request really goes): a request that would carry a secret
//!    elsewhere is refused, not sent;
//! 4. for a channel that holds a secret value, every response (headers as
//!    bytes, body, downloads) and any error text redacted, whichever
//!    request it answers, so nothing the component or a log sees carries a
//!    secret value; its requests ask for `Accept-Encoding: identity` and a
//!    response encoded anyway is refused (compressed bytes cannot be
//!    redacted).
//!
//! Redirects are never followed (the one HTTP policy of every host-run
//! request, as for `wasi:http`): a poll's, an `http` action's or an upload's
//! 3xx goes back to the component as the response it is, so a redirect the
//! component wants is a new request that passes the grant, the
//! private-address rule and the secrets' audience again; a media download
//! answered with a redirect is refused with the status and nothing of the
//! other host is fetched. Either way a substituted secret never travels to a
//! host it was not written for.
//!
//! Budgets: the component's `http` actions run at most
//! `max_concurrent_requests` at once ([`Transport::run_action`]; past that
//! an action is dropped with a warning, so a hostile component cannot hold
//! the host's descriptors), every request waits at most [`MAX_TIMEOUT`]
//! whatever the component asks, and the warnings about refused requests are
//! bounded per minute ([`WarnBudget`]).

use std::sync::Arc;
use std::time::Duration;

use crate::plugins::channel::{HttpMethod, HttpRequest, HttpResponse, MAX_BODY_BYTES, Upload};
use crate::plugins::grants::HostPattern;
use crate::plugins::secrets::{Destination, Place, Secrets};
use crate::plugins::warn_budget::{self, WarnBudget};

/// Default wait for a request that names no timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest wait for any request, whatever timeout the component names: a
/// long poll (Telegram's is 50 s) fits with room to spare.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a request did not produce a response.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum TransportError {
    /// The grant does not admit the URL.
    #[error("request to {url} denied by the plugin's network grant")]
    Denied { url: String },
    /// The URL does not parse.
    #[error("bad request URL {url}: {message}")]
    BadUrl { url: String, message: String },
    /// The request would carry a secret where it must not go, or one
    /// without a value; it was not sent.
    #[error("request to {url} refused: {message}")]
    Refused { url: String, message: String },
    /// Connecting, sending or reading failed (text redacted).
    #[error("request to {url} failed: {message}")]
    Failed { url: String, message: String },
    /// `max_concurrent_requests` actions are already running.
    #[error("request to {url} dropped: {limit} requests of this channel already running (config [channels.<name>] max_concurrent_requests)")]
    Busy { url: String, limit: u32 },
}

/// Runs one channel's requests.
pub struct Transport {
    plugin: String,
    client: reqwest::Client,
    granted: Vec<HostPattern>,
    secrets: Secrets,
    /// (platform origin, configured base).
    rewrite: Option<(String, String)>,
    /// Slots of the `http` actions running at once.
    actions: Arc<tokio::sync::Semaphore>,
    max_actions: u32,
    /// Warning lines about refused requests, per minute.
    warnings: WarnBudget,
}

/// The client of every host-run request of channels: redirects are never
/// followed (see the module docs).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("a client without custom TLS builds")
}

impl Transport {
    /// A transport for `plugin` with its grant and secrets; `platform` is
    /// the audience host requests to `api_base` stand for; at most
    /// `max_actions` `http` actions at once.
    pub fn new(plugin: &str, granted: Vec<HostPattern>, secrets: Secrets, platform: Option<&str>, api_base: Option<&str>, max_actions: u32) -> Transport {
        let rewrite = platform.zip(api_base).map(|(p, b)| (format!("https://{p}"), b.to_string()));
        Transport {
            plugin: plugin.to_string(),
            client: client(),
            granted,
            secrets,
            rewrite,
            actions: Arc::new(tokio::sync::Semaphore::new(max_actions.max(1) as usize)),
            max_actions: max_actions.max(1),
            warnings: WarnBudget::per_window(plugin.into(), "refused or dropped requests of this channel", warn_budget::PER_MINUTE, Duration::from_secs(60)),
        }
    }

    /// Whether a warning line about a refused or dropped request may be
    /// written now (see [`WarnBudget`]).
    pub fn may_warn(&self) -> bool {
        self.warnings.admit()
    }

    /// Runs an `http` action of a step: like [`Transport::run`] when one of
    /// the `max_concurrent_requests` slots is free, else dropped at once
    /// ([`TransportError::Busy`]) rather than queued without bound.
    pub async fn run_action(&self, request: &HttpRequest) -> Result<HttpResponse, TransportError> {
        let Ok(_slot) = self.actions.clone().try_acquire_owned() else {
            return Err(TransportError::Busy { url: request.url.clone(), limit: self.max_actions });
        };
        self.run(request).await
    }

    /// The same secrets and rewrite for the component's own `wasi:http`
    /// requests (`deliver` sends through it).
    pub fn outbound(&self) -> crate::plugins::http::Outbound {
        crate::plugins::http::Outbound { secrets: self.secrets.clone(), rewrite: self.rewrite.clone() }
    }

    /// The secrets (for redacting what else comes back).
    pub fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// Runs `request`; a response of any status is `Ok`.
    pub async fn run(&self, request: &HttpRequest) -> Result<HttpResponse, TransportError> {
        let response = self.send(request, None).await?;
        self.read(&request.url, response).await
    }

    /// Runs `upload` with `file` (`size` bytes, opened by the caller) as its
    /// file part, streamed from disk a chunk at a time: the body is the
    /// upload's text fields (secrets substituted as in a body, where the
    /// manifest allows it), then the file. A file that changes size while
    /// it is sent fails the request rather than sending something else.
    pub async fn upload(&self, upload: &Upload, file: tokio::fs::File, file_name: &str, mime: &str, size: u64) -> Result<HttpResponse, TransportError> {
        use tokio::io::AsyncReadExt;
        let url = &upload.request.url;
        let (aud_host, aud_port) = audience(url);
        let (scheme, actual_host) = self.actual_target(url);
        let dest = Destination::new(&aud_host, aud_port, &scheme, &actual_host);
        let mut form = reqwest::multipart::Form::new();
        for (name, value) in &upload.fields {
            let value = self.secrets.fill(value, Place::Field(name), &dest).map_err(|e| TransportError::Refused { url: url.clone(), message: e.0 })?;
            form = form.text(name.clone(), value.into_owned());
        }
        let bytes = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(file.take(size)));
        let part = reqwest::multipart::Part::stream_with_length(bytes, size)
            .file_name(file_name.to_string())
            .mime_str(mime)
            .map_err(|e| TransportError::BadUrl { url: url.clone(), message: format!("media type {mime:?}: {e}") })?;
        let form = form.part(upload.file_field.clone(), part);
        let response = self.send(&upload.request, Some(form)).await?;
        self.read(url, response).await
    }

    /// The status, headers and body (capped) of `response`, redacted.
    async fn read(&self, written: &str, mut response: reqwest::Response) -> Result<HttpResponse, TransportError> {
        let written = written.to_string();
        let failed = |e: reqwest::Error| TransportError::Failed { url: written.clone(), message: self.secrets.redact(&e.without_url().to_string()).into_owned() };
        self.refuse_encoded(&written, response.headers())?;
        let status = response.status().as_u16();
        let mut redacted = response.headers().clone();
        if let Some(redactor) = self.secrets.redactor() {
            redactor.redact_headers(&mut redacted);
        }
        let headers = redacted
            .iter()
            .take(crate::plugins::channel::MAX_HEADERS)
            .map(|(n, v)| (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
            .collect();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(TransportError::Failed { url: written, message: format!("response body over {MAX_BODY_BYTES} bytes") });
            }
            body.extend_from_slice(&chunk);
        }
        let body = self.secrets.redact_bytes(&body).into_owned();
        Ok(HttpResponse { status, headers, body })
    }

    /// Runs a download `request` and streams its body into `dir` as
    /// `<blake3 of the bytes>.<ext>`, never holding more than a chunk in
    /// memory. Past `cap` bytes (the `content-length` is checked first,
    /// then every chunk) it stops reading and removes the partial file, so
    /// nothing oversized is kept. Returns the file's path and size.
    pub async fn download(&self, request: &HttpRequest, cap: u64, dir: &std::path::Path, ext: &str) -> Result<(std::path::PathBuf, u64), DownloadError> {
        use tokio::io::AsyncWriteExt;
        let written = request.url.clone();
        let mut response = self.send(request, None).await.map_err(DownloadError::Transport)?;
        let status = response.status().as_u16();
        if response.status().is_redirection() {
            // Not followed: the other host is neither granted nor checked.
            let to = response.headers().get(reqwest::header::LOCATION).and_then(|l| l.to_str().ok()).and_then(|l| request_target(&written, l));
            let to = to.map_or_else(|| "an unreadable location".into(), |to| self.secrets.redact(&to).into_owned());
            return Err(DownloadError::Redirect { status, to });
        }
        if !(200..300).contains(&status) {
            return Err(DownloadError::Status(status));
        }
        self.refuse_encoded(&written, response.headers()).map_err(DownloadError::Transport)?;
        // Redacted like any response: the file goes to the model.
        let mut redacting = self.secrets.redactor().map(|r| r.stream());
        if response.content_length().is_some_and(|len| len > cap) {
            return Err(DownloadError::TooLarge { cap });
        }
        let io = |what: &'static str, path: &std::path::Path| {
            let path = path.to_path_buf();
            move |source| DownloadError::Io { what, path, source }
        };
        tokio::fs::create_dir_all(dir).await.map_err(io("creating the media directory", dir))?;
        // A unique name while downloading; renamed to its content hash after.
        let partial = dir.join(format!(".partial-{}-{}", std::process::id(), PARTIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)));
        let outcome: Result<(blake3::Hash, u64), DownloadError> = async {
            let mut file = tokio::fs::File::create(&partial).await.map_err(io("creating a media file", &partial))?;
            let mut hasher = blake3::Hasher::new();
            let mut size: u64 = 0;
            while let Some(chunk) = response.chunk().await.map_err(|e| DownloadError::Transport(TransportError::Failed {
                url: written.clone(),
                message: self.secrets.redact(&e.without_url().to_string()).into_owned(),
            }))? {
                let chunk = match &mut redacting {
                    Some(stream) => stream.push(&chunk),
                    None => chunk,
                };
                size += chunk.len() as u64;
                if size > cap {
                    return Err(DownloadError::TooLarge { cap });
                }
                hasher.update(&chunk);
                file.write_all(&chunk).await.map_err(io("writing a media file", &partial))?;
            }
            if let Some(tail) = redacting.as_mut().map(|s| s.finish()) {
                size += tail.len() as u64;
                if size > cap {
                    return Err(DownloadError::TooLarge { cap });
                }
                hasher.update(&tail);
                file.write_all(&tail).await.map_err(io("writing a media file", &partial))?;
            }
            file.sync_all().await.map_err(io("syncing a media file", &partial))?;
            Ok((hasher.finalize(), size))
        }
        .await;
        match outcome {
            Ok((hash, size)) => {
                let path = dir.join(format!("{}.{ext}", &hash.to_hex()[..32]));
                tokio::fs::rename(&partial, &path).await.map_err(io("storing a media file", &path))?;
                Ok((path, size))
            }
            Err(e) => {
                let _ = tokio::fs::remove_file(&partial).await;
                Err(e)
            }
        }
    }

    /// Where a request to `url` (as the plugin wrote it) really goes after
    /// the `api_base` rewrite: (scheme, host).
    fn actual_target(&self, url: &str) -> (String, String) {
        let target = match &self.rewrite {
            Some((origin, base)) if url == origin || url.starts_with(&format!("{origin}/")) => format!("{base}{}", &url[origin.len()..]),
            _ => url.to_string(),
        };
        match reqwest::Url::parse(&target) {
            Ok(parsed) => (parsed.scheme().to_string(), parsed.host_str().unwrap_or_default().to_string()),
            Err(_) => (String::new(), String::new()),
        }
    }

    /// Refuses a response to a channel holding secrets that is encoded in a
    /// way redaction cannot read (see [`crate::plugins::http`]).
    fn refuse_encoded(&self, written: &str, headers: &reqwest::header::HeaderMap) -> Result<(), TransportError> {
        if self.secrets.redactor().is_none() {
            return Ok(());
        }
        match crate::plugins::http::encoded_response(headers) {
            Some(reason) => {
                tracing::warn!(channel = %self.plugin, "response refused: {reason}");
                Err(TransportError::Failed { url: written.to_string(), message: reason })
            }
            None => Ok(()),
        }
    }

    /// Prepares and sends `request` (rewrite, grant, secrets), with `form`
    /// as its body instead of `request.body` when given; the response head,
    /// its body still to read.
    async fn send(&self, request: &HttpRequest, form: Option<reqwest::multipart::Form>) -> Result<reqwest::Response, TransportError> {
        let written = request.url.clone();
        let bad = |message: String| TransportError::BadUrl { url: written.clone(), message };
        let original = reqwest::Url::parse(&written).map_err(|e| bad(e.to_string()))?;
        let (aud_host, aud_port) = audience(&written);
        let target = match &self.rewrite {
            Some((origin, base)) if written == *origin || written.starts_with(&format!("{origin}/")) => format!("{base}{}", &written[origin.len()..]),
            _ => written.clone(),
        };
        let rewritten = target != written;
        let parsed = reqwest::Url::parse(&target).map_err(|e| bad(e.to_string()))?;
        let host = parsed.host_str().ok_or_else(|| bad("no host".into()))?.to_string();
        let authority = |url: &reqwest::Url| {
            let (host, port) = (url.host_str().unwrap_or_default(), url.port_or_known_default().unwrap_or(443));
            if host.contains(':') { format!("[{host}]:{port}") } else { format!("{host}:{port}") }
        };
        // The grant is checked on scheme and authority only: the path may
        // hold placeholders an `http::Uri` would not take.
        let admitted = if rewritten { &original } else { &parsed };
        let uri: http::Uri = format!("{}://{}/", admitted.scheme(), authority(admitted)).parse().map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?;
        let pinned = if rewritten {
            // A platform request sent to the user's configured base is
            // admitted as such, with or without a `[plugins.<name>]` table:
            // the base is the user's own word for where the platform is.
            None
        } else {
            crate::plugins::http::admit(&self.plugin, &self.granted, &uri, &self.warnings).await.map_err(|_| TransportError::Denied { url: written.clone() })?
        };
        let dest = Destination::new(&aud_host, aud_port, parsed.scheme(), &host);
        let refused = |e: crate::plugins::secrets::SecretRefused| {
            tracing::warn!(channel = %self.plugin, "request refused: {e}");
            TransportError::Refused { url: written.clone(), message: e.0 }
        };
        let substituted = self.secrets.fill_url(&target, &dest).map_err(refused)?.into_owned();
        let mut url = reqwest::Url::parse(&substituted).map_err(|_| bad("does not parse once secrets are substituted".into()))?;
        let host_header = parsed.port().map_or_else(|| host.clone(), |p| format!("{host}:{p}"));
        if let Some(addr) = pinned {
            let _ = url.set_ip_host(addr.ip());
        }
        let method = match request.method {
            HttpMethod::Get => reqwest::Method::GET,
            HttpMethod::Post => reqwest::Method::POST,
            HttpMethod::Put => reqwest::Method::PUT,
            HttpMethod::Patch => reqwest::Method::PATCH,
            HttpMethod::Delete => reqwest::Method::DELETE,
        };
        let timeout = if request.timeout_ms == 0 { DEFAULT_TIMEOUT } else { Duration::from_millis(u64::from(request.timeout_ms)).min(MAX_TIMEOUT) };
        let mut builder = self.client.request(method, url).timeout(timeout);
        if pinned.is_some() {
            builder = builder.header(reqwest::header::HOST, host_header);
        }
        let holds_values = self.secrets.redactor().is_some();
        for (name, value) in &request.headers {
            // A multipart body names its own type and boundary.
            if form.is_some() && name.eq_ignore_ascii_case("content-type") {
                continue;
            }
            // Asked for below: a compressed response could not be redacted.
            if holds_values && name.eq_ignore_ascii_case("accept-encoding") {
                continue;
            }
            builder = builder.header(name, self.secrets.fill(value, Place::Header(name), &dest).map_err(refused)?.as_ref());
        }
        if holds_values {
            builder = builder.header(reqwest::header::ACCEPT_ENCODING, "identity");
        }
        if let Some(form) = form {
            builder = builder.multipart(form);
        } else if !request.body.is_empty() {
            let content_type = request.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("content-type")).map(|(_, v)| v.as_str());
            builder = builder.body(self.secrets.fill_body(&request.body, content_type, &dest).map_err(refused)?.into_owned());
        }
        let failed = |e: reqwest::Error| TransportError::Failed { url: written.clone(), message: self.secrets.redact(&e.without_url().to_string()).into_owned() };
        builder.send().await.map_err(failed)
    }
}

/// The host and port a URL as the plugin wrote it is aimed at: whose
/// secrets it may carry.
fn audience(url: &str) -> (String, u16) {
    match reqwest::Url::parse(url) {
        Ok(url) => (url.host_str().unwrap_or_default().to_string(), url.port_or_known_default().unwrap_or(443)),
        Err(_) => (String::new(), 0),
    }
}

/// Where a redirect's `location` (as the server sent it, maybe relative to
/// `url`) points, shown as scheme and authority only: the path of a
/// platform URL may carry a token.
fn request_target(url: &str, location: &str) -> Option<String> {
    let target = reqwest::Url::parse(url).ok()?.join(location).ok()?;
    let host = target.host_str()?;
    Some(match target.port() {
        Some(port) => format!("{}://{host}:{port}", target.scheme()),
        None => format!("{}://{host}", target.scheme()),
    })
}

/// Numbers the partial files of one process.
static PARTIAL: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Why a download did not produce a file.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum DownloadError {
    /// The request itself failed (refused, denied, timed out).
    #[error(transparent)]
    Transport(TransportError),
    /// A non-success status.
    #[error("the server answered {0}")]
    Status(u16),
    /// A 3xx: not followed.
    #[error("the server answered a redirect ({status}) to {to}; media downloads do not follow redirects")]
    Redirect { status: u16, to: String },
    /// The body is over the size cap.
    #[error("larger than {} MB", cap / (1024 * 1024))]
    TooLarge { cap: u64 },
    /// Writing the downloaded file failed.
    #[error("{what} ({path}): {source}")]
    Io { what: &'static str, path: std::path::PathBuf, source: std::io::Error },
}

/// How long a 429 asks to wait: Telegram's `parameters.retry_after` in the
/// JSON body, else the `Retry-After` header in seconds; capped at an hour.
pub fn retry_after(headers: &[(String, String)], body: &[u8]) -> Option<Duration> {
    let from_body = serde_json::from_slice::<serde_json::Value>(body).ok().and_then(|v| v.pointer("/parameters/retry_after").and_then(serde_json::Value::as_u64));
    let from_header = || headers.iter().find(|(n, _)| n.eq_ignore_ascii_case("retry-after")).and_then(|(_, v)| v.trim().parse::<u64>().ok());
    from_body.or_else(from_header).map(|secs| Duration::from_secs(secs.min(3600)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Downloads against a local server that streams 64 KiB chunks with no
    /// `content-length` (so only the running count can stop it).
    #[tokio::test(flavor = "multi_thread")]
    async fn a_download_stops_at_the_cap_and_keeps_no_partial_file() {
        use http_body_util::StreamBody;
        use hyper::body::Frame;
        let server = chitin_testing::server::MockServer::start("Files", |request: hyper::Request<hyper::body::Incoming>| async move {
            let chunks = if request.uri().path() == "/big" { 40 } else { 2 };
            let frames = (0..chunks).map(|_| Ok::<_, std::convert::Infallible>(Frame::data(bytes::Bytes::from(vec![1u8; 64 * 1024]))));
            Ok::<_, std::convert::Infallible>(hyper::Response::new(StreamBody::new(futures::stream::iter(frames))))
        });
        let addr = server.addr();
        let granted = vec![HostPattern::parse(&addr.to_string()).unwrap()];
        let transport = Transport::new("files", granted, Secrets::default(), None, None, 8);
        let dir = tempfile::tempdir().unwrap();
        let get = |path: &str| HttpRequest { method: HttpMethod::Get, url: format!("http://{addr}{path}"), headers: vec![], body: vec![], timeout_ms: 0 };
        let cap = 1024 * 1024;
        let refused = transport.download(&get("/big"), cap, dir.path(), "bin").await.unwrap_err();
        assert!(matches!(refused, DownloadError::TooLarge { .. }), "{refused}");
        assert_eq!(refused.to_string(), "larger than 1 MB");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "no partial file left");
        let (path, size) = transport.download(&get("/small"), cap, dir.path(), "bin").await.unwrap();
        assert_eq!(size, 128 * 1024);
        assert_eq!(std::fs::read(&path).unwrap().len(), 128 * 1024);
        assert_eq!(path.extension().unwrap(), "bin");
        let again = transport.download(&get("/small"), cap, dir.path(), "bin").await.unwrap();
        assert_eq!(again.0, path, "the same bytes, the same name");
        let denied = Transport::new("files", vec![], Secrets::default(), None, None, 8).download(&get("/small"), cap, dir.path(), "bin").await.unwrap_err();
        assert!(matches!(denied, DownloadError::Transport(TransportError::Denied { .. })), "{denied}");
    }

    /// A listener that counts the connections it accepts and holds them,
    /// never answering: the hop a redirect must not reach, or a stalled
    /// platform.
    async fn counting_listener(ip: &str) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                held.push(socket);
            }
        });
        (addr, accepted)
    }

    /// A granted server answers every request with a 302 to a host the
    /// grant does not name (another port) or to a private address (another
    /// loopback address): the first hop is served, the redirect goes back
    /// as a 302 (or, for a download, is refused), and the second host is
    /// never contacted.
    #[tokio::test(flavor = "multi_thread")]
    async fn redirects_are_never_followed_past_the_grant() {
        let (ungranted, ungranted_hits) = counting_listener("127.0.0.1").await;
        let (private, private_hits) = counting_listener("127.0.0.2").await;
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = served.clone();
        let server = chitin_testing::server::MockServer::start("Redirector", move |request: hyper::Request<hyper::body::Incoming>| {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let to = if request.uri().path().ends_with("private") { private } else { ungranted };
            async move {
                let response = hyper::Response::builder()
                    .status(302)
                    .header("location", format!("http://{to}/sentinel"))
                    .body(http_body_util::Full::new(bytes::Bytes::from_static(b"moved")))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let addr = server.addr();
        let granted = vec![HostPattern::parse(&addr.to_string()).unwrap()];
        let transport = Transport::new("redirected", granted, Secrets::default(), None, None, 8);
        let get = |path: &str| HttpRequest { method: HttpMethod::Get, url: format!("http://{addr}{path}"), headers: vec![], body: vec![], timeout_ms: 5_000 };
        for path in ["/poll-ungranted", "/poll-private"] {
            let response = transport.run(&get(path)).await.unwrap();
            assert_eq!(response.status, 302, "{path}: the redirect is the component's to handle");
            assert_eq!(response.body, b"moved");
            assert!(response.headers.iter().any(|(n, v)| n == "location" && v.ends_with("/sentinel")), "{:?}", response.headers);
        }
        let dir = tempfile::tempdir().unwrap();
        let refused = transport.download(&get("/media-private"), 1 << 20, dir.path(), "jpg").await.unwrap_err();
        assert!(matches!(refused, DownloadError::Redirect { status: 302, .. }), "{refused}");
        assert_eq!(refused.to_string(), format!("the server answered a redirect (302) to http://{private}; media downloads do not follow redirects"));
        assert!(matches!(transport.download(&get("/media-ungranted"), 1 << 20, dir.path(), "jpg").await, Err(DownloadError::Redirect { .. })));
        assert_eq!(std::fs::read_dir(dir.path()).map(|d| d.count()).unwrap_or(0), 0, "nothing stored");
        // The attack ran: the granted host served every first hop.
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 4);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(ungranted_hits.load(std::sync::atomic::Ordering::SeqCst), 0, "the ungranted host was contacted");
        assert_eq!(private_hits.load(std::sync::atomic::Ordering::SeqCst), 0, "the private address was contacted");
    }

    /// `http` actions to a server that never answers: at most
    /// `max_concurrent_requests` connect, every other one is dropped at once.
    #[tokio::test(flavor = "multi_thread")]
    async fn http_actions_past_the_channels_budget_are_dropped() {
        let (silent, accepted) = counting_listener("127.0.0.1").await;
        let granted = vec![HostPattern::parse(&silent.to_string()).unwrap()];
        let transport = Arc::new(Transport::new("flood", granted, Secrets::default(), None, None, 3));
        let request = HttpRequest { method: HttpMethod::Get, url: format!("http://{silent}/x"), headers: vec![], body: vec![], timeout_ms: u32::MAX };
        let mut running = Vec::new();
        for _ in 0..50 {
            let (transport, request) = (transport.clone(), request.clone());
            running.push(tokio::spawn(async move { transport.run_action(&request).await }));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut busy = 0;
        for task in running.iter_mut().filter(|t| t.is_finished()) {
            match task.await.unwrap() {
                Err(TransportError::Busy { limit: 3, .. }) => busy += 1,
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(busy, 47);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 3, "connections the server saw");
        let message = TransportError::Busy { url: "u".into(), limit: 3 }.to_string();
        assert!(message.contains("max_concurrent_requests"), "{message}");
        running.iter().for_each(tokio::task::JoinHandle::abort);
    }

    #[test]
    fn retry_after_reads_telegrams_body_then_the_header() {
        let body = br#"{"ok":false,"error_code":429,"description":"Too Many Requests: retry after 7","parameters":{"retry_after":7}}"#;
        assert_eq!(retry_after(&[], body), Some(Duration::from_secs(7)));
        let headers = vec![("Retry-After".to_string(), " 3 ".to_string())];
        assert_eq!(retry_after(&headers, b"busy"), Some(Duration::from_secs(3)));
        assert_eq!(retry_after(&headers, body), Some(Duration::from_secs(7)), "the body's figure wins");
        assert_eq!(retry_after(&[], b"{}"), None);
        assert_eq!(retry_after(&[("retry-after".into(), "999999".into())], b""), Some(Duration::from_secs(3600)));
    }
}
