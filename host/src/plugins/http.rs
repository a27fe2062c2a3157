//! Outgoing HTTP policy, checked in the host for every request a plugin sends
//! through `wasi:http`.
//!
//! - Deny by default: a request goes out only if its host (and port) matches
//!   a granted [`HostPattern`].
//! - Redirects: `wasi:http` never follows them itself; a guest that follows a
//!   `Location` sends a new request, which passes through this check again, so
//!   every hop is re-checked.
//! - Private networks: the host name is resolved here and every address is
//!   checked; loopback, private, link-local and unspecified addresses are
//!   refused unless the grant names an address itself (`127.0.0.1:8080`,
//!   `localhost`). For plain `http` the request is then pinned to the checked
//!   address, so a second DNS answer cannot differ (DNS rebinding); for
//!   `https` the certificate check binds the connection to the name.
//! - A denial is logged with the config line that would allow it (the
//!   `host:port` when only another port of that host is granted).
//! - Secrets (a channel's token, a search key): where the plugin is given
//!   [`Outbound`], `{{secret:NAME}}` is substituted in the places its
//!   declaration names (a path segment, a named header or query parameter)
//!   for the secret's audience host only, over `https://` (or plain
//!   `http://` to loopback) only, and the platform origin is pointed at a
//!   configured `api_base` (see [`super::secrets`]).
//! - Redaction by construction: a plugin that holds a secret value gets
//!   every response redacted, whichever request it answers (one request
//!   could store the value at the audience, another fetch it back): header
//!   values as bytes, the body as it streams ([`super::redact`]), error
//!   texts. Its requests ask for `Accept-Encoding: identity` (its own
//!   `Accept-Encoding` is removed), and a response that is still encoded
//!   (`Content-Encoding` other than identity, a `Transfer-Encoding` other
//!   than chunked) is refused: compressed bytes cannot be redacted, and the
//!   plugin would decompress the value.
//! - In flight: at most `[limits] max_http_requests` requests of one call at
//!   once (each holds a socket and a host task until its body is done);
//!   past that `handle` fails for the guest with a message naming the key.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::uri::{Authority, Scheme, Uri};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use super::grants::{HostPattern, best_match, is_private};
use super::redact::{RedactingBody, Redactor};
use super::secrets::{Destination, Place, Secrets};
use super::warn_budget::WarnBudget;

/// What the host adds to a plugin's own requests beyond the grant: secrets
/// substituted, and the platform's origin pointed at a configured base (a
/// channel's `api_base`: a test server, a self-hosted Bot API).
#[derive(Debug, Clone, Default)]
pub struct Outbound {
    /// The plugin's secrets.
    pub secrets: Secrets,
    /// (platform origin `https://host`, configured base): a request whose URL
    /// starts with the origin is sent to the base instead, and still counts
    /// as aimed at the platform for secrets.
    pub rewrite: Option<(String, String)>,
}

/// The [`WasiHttpHooks`] of one call.
pub struct HttpPolicy {
    plugin: Arc<str>,
    granted: Arc<[HostPattern]>,
    in_flight: Arc<tokio::sync::Semaphore>,
    max_in_flight: u32,
    outbound: Option<Arc<Outbound>>,
    /// The call's warning lines about refused requests (a guest can make
    /// thousands): the first few, then one summary line.
    warnings: Arc<WarnBudget>,
}

impl HttpPolicy {
    /// A policy admitting exactly `granted`, at most `max_in_flight` at once,
    /// with `outbound`'s secrets and rewrite when given.
    pub fn new(plugin: Arc<str>, granted: Vec<HostPattern>, max_in_flight: u32, outbound: Option<Arc<Outbound>>) -> Self {
        HttpPolicy {
            granted: granted.into(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(max_in_flight as usize)),
            max_in_flight,
            warnings: Arc::new(WarnBudget::per_call(plugin.clone(), "refused requests", super::warn_budget::PER_CALL)),
            plugin,
            outbound,
        }
    }
}

/// A request's secrets, worked out before the grant check and applied
/// after it: the URL it really goes to (secrets filled in, `api_base`
/// applied) and the header values that change.
struct Prepared {
    uri: Option<Uri>,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
}

/// Works out `request`'s secrets: placeholders in the declared places of a
/// request to their audience (judged by the host the plugin addressed) are
/// filled in, over a connection that may carry them (judged by where the
/// request really goes, after `api_base`). Refused, naming the secret, when
/// one has no value (the error names the config key to set) or would go
/// over plain `http://` to a non-loopback host: such a request is never
/// sent. Done before the grant (it needs no name lookup), so the user
/// learns what to configure first.
fn prepare(plugin: &str, outbound: &Outbound, request: &http::Request<WasiBody>) -> Result<Prepared, HttpError> {
    let written = request.uri().to_string();
    let host = request.uri().host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_string();
    let port = request.uri().port_u16().unwrap_or(if request.uri().scheme() == Some(&Scheme::HTTPS) { 443 } else { 80 });
    let target = match outbound.rest_after_origin(&written) {
        Some((base, rest)) => format!("{}{rest}", base.trim_end_matches('/')),
        None => written.clone(),
    };
    let actual: Uri = target.parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let dest = Destination::new(&host, port, actual.scheme_str().unwrap_or_default(), actual.host().unwrap_or_default());
    let refused = |e: super::secrets::SecretRefused| {
        tracing::warn!(plugin, %host, "outgoing HTTP refused: {e}");
        HttpError::InternalError(Some(e.0))
    };
    let filled = outbound.secrets.fill_url(&target, &dest).map_err(refused)?;
    let uri = if *filled != written { Some(filled.parse().map_err(|_| HttpError::HttpRequestUriInvalid)?) } else { None };
    let mut headers = Vec::new();
    for (name, value) in request.headers() {
        let Ok(text) = value.to_str() else { continue };
        if let std::borrow::Cow::Owned(new) = outbound.secrets.fill(text, Place::Header(name.as_str()), &dest).map_err(refused)? {
            let value = http::HeaderValue::from_str(&new).map_err(|_| HttpError::InternalError(Some(format!("a secret's value is not a valid value of header `{name}`"))))?;
            headers.push((name.clone(), value));
        }
    }
    Ok(Prepared { uri, headers })
}

/// Applies [`prepare`]'s work to `request`.
fn apply(prepared: Prepared, rewritten: bool, request: &mut http::Request<WasiBody>) {
    if let Some(uri) = prepared.uri {
        *request.uri_mut() = uri;
    }
    if rewritten {
        // The Host header named the platform: let the client set the base's.
        request.headers_mut().remove(http::header::HOST);
    }
    for (name, value) in prepared.headers {
        request.headers_mut().insert(name, value);
    }
}

/// Asks for a response a redactor can read: the plugin's own
/// `Accept-Encoding` (it could ask for gzip and decompress the value out of
/// bytes redaction never saw) replaced by `identity`.
fn ask_for_identity(request: &mut http::Request<WasiBody>) {
    request.headers_mut().insert(http::header::ACCEPT_ENCODING, http::HeaderValue::from_static("identity"));
}

/// Why a response cannot be redacted: an encoding other than identity
/// (`Content-Encoding`) or a transfer coding other than chunked. The server
/// was asked for identity; one that encodes anyway is refused.
pub(crate) fn encoded_response(headers: &http::HeaderMap) -> Option<String> {
    let codings = |name| headers.get_all(name).iter().flat_map(|v| String::from_utf8_lossy(v.as_bytes()).split(',').map(|c| c.trim().to_ascii_lowercase()).collect::<Vec<_>>()).filter(|c| !c.is_empty()).collect::<Vec<_>>();
    if let Some(coding) = codings(http::header::CONTENT_ENCODING).into_iter().find(|c| c != "identity") {
        return Some(format!("the response has Content-Encoding `{coding}`; a plugin that holds secrets gets identity-encoded responses only (asked with Accept-Encoding: identity), so that secret values can be redacted"));
    }
    if let Some(coding) = codings(http::header::TRANSFER_ENCODING).into_iter().find(|c| c != "chunked") {
        return Some(format!("the response has Transfer-Encoding `{coding}`; a plugin that holds secrets gets uncompressed responses only, so that secret values can be redacted"));
    }
    None
}

/// An error the guest sees, with secret values redacted from its text.
fn redact_error(redactor: &Redactor, error: HttpError) -> HttpError {
    match error {
        HttpError::InternalError(Some(text)) => HttpError::InternalError(Some(redactor.redact(&text).into_owned())),
        other => other,
    }
}

impl Outbound {
    /// The part of `uri` after the platform origin, when the rewrite
    /// applies to it.
    fn rest_after_origin(&self, uri: &str) -> Option<(String, String)> {
        let (origin, base) = self.rewrite.as_ref()?;
        let rest = uri.strip_prefix(origin.as_str())?;
        (rest.is_empty() || rest.starts_with('/') || rest.starts_with('?')).then(|| (base.clone(), rest.to_string()))
    }

    /// True when a request to `uri` goes to the configured base instead.
    fn redirects(&self, uri: &Uri) -> bool {
        self.rest_after_origin(&uri.to_string()).is_some()
    }
}

/// `response` as the guest will see it: headers redacted as bytes, the
/// body redacted as it streams (the connection is driven by its own task
/// meanwhile), the length dropped (redaction changes it). Refused when it
/// is encoded in a way redaction cannot read.
fn redact_response(redactor: &std::sync::Arc<Redactor>, response: http::Response<WasiBody>) -> Result<http::Response<WasiBody>, HttpError> {
    use http_body_util::BodyExt;
    let (mut parts, body) = response.into_parts();
    if let Some(reason) = encoded_response(&parts.headers) {
        return Err(HttpError::InternalError(Some(reason)));
    }
    redactor.redact_headers(&mut parts.headers);
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let body = RedactingBody::new(body, redactor, redact_error).boxed_unsync();
    Ok(http::Response::from_parts(parts, body))
}

type ResponseFuture = Box<
    dyn Future<Output = Result<(http::Response<WasiBody>, Box<dyn Future<Output = Result<(), HttpError>> + Send>), HttpError>>
        + Send,
>;

impl WasiHttpHooks for HttpPolicy {
    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), HttpError>> + Send>,
    ) -> ResponseFuture {
        let plugin = self.plugin.clone();
        let granted = self.granted.clone();
        // Taken now, not in the future below: a guest that fires requests
        // without waiting is refused at the one past the limit.
        let permit = self.in_flight.clone().try_acquire_owned();
        let max_in_flight = self.max_in_flight;
        let outbound = self.outbound.clone();
        let warnings = self.warnings.clone();
        Box::new(async move {
            let Ok(permit) = permit else {
                if warnings.admit() {
                    tracing::warn!(plugin = &*plugin, "outgoing HTTP refused: {max_in_flight} requests already in flight");
                }
                return Err(HttpError::InternalError(Some(format!(
                    "more than {max_in_flight} HTTP requests in flight in one call (config [limits] max_http_requests)"
                ))));
            };
            // Admitted as the plugin wrote it (placeholders, not values, so
            // a denial's log line carries no secret), then filled in. A
            // platform request the rewrite redirects is admitted by name: the
            // base it goes to is the user's own config.
            let prepared = match &outbound {
                Some(outbound) => Some(prepare(&plugin, outbound, &request)?),
                None => None,
            };
            let redirected = outbound.as_ref().is_some_and(|o| o.redirects(request.uri()));
            // A platform request the `api_base` rewrite sends to the
            // user's configured base is admitted as such, whatever the
            // grant: the base is the user's own word (a local Bot API the
            // grant cannot name, since the manifest does not ask for it).
            let pinned = if redirected { None } else { admit(&plugin, &granted, request.uri(), &warnings).await? };
            if let Some(prepared) = prepared {
                apply(prepared, redirected, &mut request);
            }
            // Every request of a plugin that holds a value, placeholder or
            // not: a response can carry a value stored by an earlier one.
            let redactor = outbound.as_ref().and_then(|o| o.secrets.redactor().cloned());
            if redactor.is_some() {
                ask_for_identity(&mut request);
            }
            if let Some(addr) = pinned {
                pin_to(&mut request, addr);
            }
            let sent = wasmtime_wasi_http::default_send_request(request, options).await;
            let (response, io) = match (sent, &redactor) {
                (Ok(sent), _) => sent,
                (Err(e), Some(redactor)) => return Err(redact_error(redactor, e)),
                (Err(e), None) => return Err(e),
            };
            let response = response.map(http_body_util::BodyExt::boxed_unsync);
            let response = match &redactor {
                Some(redactor) => redact_response(redactor, response).inspect_err(|e| tracing::warn!(plugin = &*plugin, "response refused: {e:?}"))?,
                None => response,
            };
            // The connection task holds the permit until the body is done.
            let io = async move {
                let _permit = permit;
                io.await
            };
            Ok((response, Box::new(io) as Box<dyn Future<Output = Result<(), HttpError>> + Send>))
        })
    }
}

/// Decides one request. Returns the address to pin a plain-HTTP request to.
/// A denial is logged within `warnings`. Every hop of a redirect is a new
/// request through here: neither `wasi:http` nor the host-run requests of
/// channels follow a redirect themselves.
pub(crate) async fn admit(plugin: &str, granted: &[HostPattern], uri: &Uri, warnings: &WarnBudget) -> Result<Option<SocketAddr>, HttpError> {
    let deny = |reason: String| {
        if warnings.admit() {
            tracing::warn!(plugin, %uri, "outgoing HTTP denied: {reason}");
        }
        HttpError::HttpRequestDenied
    };
    let Some(authority) = uri.authority() else {
        return Err(deny("the request has no host".into()));
    };
    let tls = uri.scheme() == Some(&Scheme::HTTPS);
    let host = authority.host().trim_start_matches('[').trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let Some(pattern) = best_match(granted, host, port) else {
        // Only another port of this host granted: name the port, not the host.
        let allow = if granted.iter().any(|p| p.matches_host(host)) { format!("{host}:{port}") } else { host.to_string() };
        return Err(deny(format!("`{host}:{port}` is not granted; add \"{allow}\" to `network` under [plugins.{plugin}] to allow it")));
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        // An IP literal needs no lookup; it is private only if granted as such.
        return if is_private(ip) && !pattern.names_address() {
            Err(deny(format!("{ip} is a private address")))
        } else {
            Ok(None)
        };
    }
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|_| HttpError::DnsError { rcode: None, info_code: None })?
        .collect();
    if addrs.is_empty() {
        return Err(HttpError::DestinationNotFound);
    }
    if !pattern.names_address() {
        if let Some(bad) = addrs.iter().find(|a| is_private(a.ip())) {
            return Err(deny(format!(
                "`{host}` resolves to the private address {}; grant the address itself to allow it",
                bad.ip()
            )));
        }
    }
    Ok((!tls).then(|| addrs[0]))
}

/// Points a plain-HTTP request at `addr`; the `Host` header (already set from
/// the original authority) keeps naming the site.
fn pin_to(request: &mut http::Request<WasiBody>, addr: SocketAddr) {
    let mut parts = request.uri().clone().into_parts();
    if let Ok(authority) = Authority::try_from(addr.to_string().as_str()) {
        parts.authority = Some(authority);
        if let Ok(uri) = Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
}
