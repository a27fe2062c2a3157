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
//!   [`Outbound`], `{{secret:NAME}}` in the URL or a header is substituted
//!   for the secret's audience host only, the platform origin is pointed at
//!   a configured `api_base`, and the response (headers and, bounded, body)
//!   is redacted before the guest sees a byte (see [`super::secrets`]).
//! - In flight: at most `[limits] max_http_requests` requests of one call at
//!   once (each holds a socket and a host task until its body is done);
//!   past that `handle` fails for the guest with a message naming the key.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::uri::{Authority, Scheme, Uri};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use super::grants::{HostPattern, best_match, is_private};
use super::manifest::channel::Injection;
use super::secrets::Secrets;
use super::warn_budget::WarnBudget;

/// Largest response body read whole to redact secrets from it; a larger one
/// to a request that carried a secret is refused.
pub const MAX_REDACTED_BODY: usize = 4 << 20;

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

/// Substitutes secrets into `request` (URL and headers, judged by the host
/// the plugin addressed). Returns whether a secret went in, in which case the
/// response must be redacted.
fn substitute_secrets(outbound: &Outbound, request: &mut http::Request<WasiBody>) -> Result<bool, HttpError> {
    let uri = request.uri().to_string();
    let host = request.uri().host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_string();
    let port = request.uri().port_u16().unwrap_or(if request.uri().scheme() == Some(&Scheme::HTTPS) { 443 } else { 80 });
    let mut substituted = false;
    let target = outbound.secrets.substitute(&uri, Injection::Url, &host, port).into_owned();
    substituted |= target != uri;
    for value in request.headers_mut().values_mut() {
        let Ok(text) = value.to_str() else { continue };
        let new = outbound.secrets.substitute(text, Injection::Header, &host, port);
        if new != text {
            *value = http::HeaderValue::from_str(&new).map_err(|_| HttpError::InternalError(Some("a secret value is not a valid header value".into())))?;
            substituted = true;
        }
    }
    if target != uri {
        *request.uri_mut() = target.parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    }
    Ok(substituted)
}

/// Refuses a request that carries, where its secret would be filled in,
/// the placeholder of a declared secret without a value: the error names
/// the config key to set, and the request is never sent with a bare
/// placeholder where the key belongs. Checked before the grant (it needs no
/// name lookup), so the user learns what to configure first.
fn refuse_missing_secret(plugin: &str, outbound: &Outbound, request: &http::Request<WasiBody>) -> Result<(), HttpError> {
    let uri = request.uri().to_string();
    let host = request.uri().host().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
    let port = request.uri().port_u16().unwrap_or(if request.uri().scheme() == Some(&Scheme::HTTPS) { 443 } else { 80 });
    let missing = std::iter::once((uri.as_str(), Injection::Url))
        .chain(request.headers().values().filter_map(|v| v.to_str().ok()).map(|v| (v, Injection::Header)))
        .find_map(|(text, place)| outbound.secrets.unavailable_in(text, place, host, port));
    match missing {
        Some(reason) => {
            tracing::warn!(plugin, %host, "outgoing HTTP refused: {reason}");
            Err(HttpError::InternalError(Some(reason.to_string())))
        }
        None => Ok(()),
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

/// Points a request on the platform origin at the configured base. Called
/// after the grant admitted the platform request: the base is the user's
/// own config, dialled as given.
fn rewrite_origin(outbound: &Outbound, request: &mut http::Request<WasiBody>) -> Result<(), HttpError> {
    let Some((base, rest)) = outbound.rest_after_origin(&request.uri().to_string()) else { return Ok(()) };
    *request.uri_mut() = format!("{}{rest}", base.trim_end_matches('/')).parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    // The Host header named the platform: let the client set the base's.
    request.headers_mut().remove(http::header::HOST);
    Ok(())
}

/// The response with every secret value written back as its placeholder:
/// headers, and the body read whole (at most [`MAX_REDACTED_BODY`]).
async fn redact_response(secrets: &Secrets, response: http::Response<WasiBody>) -> Result<http::Response<WasiBody>, HttpError> {
    use http_body_util::BodyExt;
    let (mut parts, body) = response.into_parts();
    for value in parts.headers.values_mut() {
        if let Ok(text) = value.to_str()
            && let std::borrow::Cow::Owned(redacted) = secrets.redact(text)
            && let Ok(new) = http::HeaderValue::from_str(&redacted)
        {
            *value = new;
        }
    }
    let bytes = http_body_util::Limited::new(body, MAX_REDACTED_BODY)
        .collect()
        .await
        .map_err(|_| HttpError::HttpResponseBodySize(Some(MAX_REDACTED_BODY as u64)))?
        .to_bytes();
    let bytes = secrets.redact_bytes(&bytes).into_owned();
    parts.headers.remove(http::header::CONTENT_LENGTH);
    let body = http_body_util::Full::new(bytes::Bytes::from(bytes)).map_err(|never| match never {}).boxed_unsync();
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
            if let Some(outbound) = &outbound {
                refuse_missing_secret(&plugin, outbound, &request)?;
            }
            let redirected = outbound.as_ref().is_some_and(|o| o.redirects(request.uri()));
            // A platform request the `api_base` rewrite sends to the
            // user's configured base is admitted as such, whatever the
            // grant: the base is the user's own word (a local Bot API the
            // grant cannot name, since the manifest does not ask for it).
            let pinned = if redirected { None } else { admit(&plugin, &granted, request.uri(), &warnings).await? };
            let redact = match &outbound {
                Some(outbound) => substitute_secrets(outbound, &mut request)?,
                None => false,
            };
            if let Some(outbound) = &outbound {
                rewrite_origin(outbound, &mut request)?;
            }
            if let Some(addr) = pinned {
                pin_to(&mut request, addr);
            }
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            let response = response.map(http_body_util::BodyExt::boxed_unsync);
            let response = match &outbound {
                Some(outbound) if redact => redact_response(&outbound.secrets, response).await?,
                _ => response,
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
