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
//! - In flight: at most `[limits] max_http_requests` requests of one call at
//!   once (each holds a socket and a host task until its body is done);
//!   past that `handle` fails for the guest with a message naming the key.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::uri::{Authority, Scheme, Uri};
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody, WasiHttpHooks};

use super::grants::{HostPattern, is_private};

/// The [`WasiHttpHooks`] of one call.
pub struct HttpPolicy {
    plugin: Arc<str>,
    granted: Arc<[HostPattern]>,
    in_flight: Arc<tokio::sync::Semaphore>,
    max_in_flight: u32,
}

impl HttpPolicy {
    /// A policy admitting exactly `granted`, at most `max_in_flight` at once.
    pub fn new(plugin: Arc<str>, granted: Vec<HostPattern>, max_in_flight: u32) -> Self {
        HttpPolicy {
            plugin,
            granted: granted.into(),
            in_flight: Arc::new(tokio::sync::Semaphore::new(max_in_flight as usize)),
            max_in_flight,
        }
    }
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
        Box::new(async move {
            let Ok(permit) = permit else {
                tracing::warn!(plugin = &*plugin, "outgoing HTTP refused: {max_in_flight} requests already in flight");
                return Err(HttpError::InternalError(Some(format!(
                    "more than {max_in_flight} HTTP requests in flight in one call (config [limits] max_http_requests)"
                ))));
            };
            let pinned = admit(&plugin, &granted, request.uri()).await?;
            if let Some(addr) = pinned {
                pin_to(&mut request, addr);
            }
            let (response, io) = wasmtime_wasi_http::default_send_request(request, options).await?;
            // The connection task holds the permit until the body is done.
            let io = async move {
                let _permit = permit;
                io.await
            };
            Ok((
                response.map(http_body_util::BodyExt::boxed_unsync),
                Box::new(io) as Box<dyn Future<Output = Result<(), HttpError>> + Send>,
            ))
        })
    }
}

/// Decides one request. Returns the address to pin a plain-HTTP request to.
pub(crate) async fn admit(plugin: &str, granted: &[HostPattern], uri: &Uri) -> Result<Option<SocketAddr>, HttpError> {
    let deny = |reason: String| {
        tracing::warn!(plugin, %uri, "outgoing HTTP denied: {reason}");
        HttpError::HttpRequestDenied
    };
    let Some(authority) = uri.authority() else {
        return Err(deny("the request has no host".into()));
    };
    let tls = uri.scheme() == Some(&Scheme::HTTPS);
    let host = authority.host().trim_start_matches('[').trim_end_matches(']');
    let port = authority.port_u16().unwrap_or(if tls { 443 } else { 80 });
    let Some(pattern) = granted.iter().find(|p| p.matches(host, port)) else {
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
