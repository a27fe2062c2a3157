//! Browser-borne attacks on a gateway without a token (`auth_token = ""`,
//! loopback only). Without a token, the only thing between a web page the
//! user visits and the agent is the browser's same-origin policy, which
//! does not stop two things:
//! - **cross-site requests**: a page may POST `text/plain` (a "simple"
//!   request, no preflight) to `http://127.0.0.1:8790/chat/send`; the
//!   browser sends it and only hides the answer. So every state-changing
//!   request (any method but GET, HEAD, OPTIONS) whose `Origin` is not the
//!   gateway's own is refused (403), and so is one that a browser marks
//!   `Sec-Fetch-Site: cross-site` without an `Origin`;
//! - **DNS rebinding**: a page on `evil.example` re-points its own name at
//!   127.0.0.1 and then reads the gateway as same-origin, but its requests
//!   carry `Host: evil.example:8790`. So every request, GETs included, must
//!   name the gateway in `Host`: the listen address, `localhost:PORT`, or a
//!   `[gateway] allowed_hosts` entry.
//!
//! With a token neither applies: the token travels in an `Authorization`
//! header, which a foreign page cannot make the browser send, and the
//! gateway may sit behind a proxy under any name. Webhook routes are exempt
//! too: they are authenticated by the platform's signature, and arrive
//! through a tunnel under the public name.

use std::net::SocketAddr;

use hyper::header::{self, HeaderMap};
use hyper::{Method, Uri};

use super::wire::ApiError;

/// Which `Host` (and so which `Origin`) names this gateway.
#[derive(Debug, Clone)]
pub struct SameOrigin {
    /// `host:port` values accepted as they are (lowercase).
    exact: Vec<String>,
    /// `allowed_hosts` entries without a port: any port.
    names: Vec<String>,
}

impl SameOrigin {
    /// The names of a gateway bound at `addr`, plus `allowed` entries
    /// (already lowercased by the config check).
    pub fn new(addr: SocketAddr, allowed: &[String]) -> Self {
        let port = addr.port();
        let ip = match addr {
            SocketAddr::V4(v4) => v4.ip().to_string(),
            SocketAddr::V6(v6) => format!("[{}]", v6.ip()),
        };
        let mut exact = vec![format!("{ip}:{port}"), format!("localhost:{port}")];
        if port == 80 {
            // A browser leaves the default port out.
            exact.push(ip);
            exact.push("localhost".into());
        }
        let mut names = Vec::new();
        for entry in allowed {
            if has_port(entry) { exact.push(entry.clone()) } else { names.push(entry.clone()) }
        }
        SameOrigin { exact, names }
    }

    /// Whether `host` (a `Host` value or a URI authority) names us.
    fn allows(&self, host: &str) -> bool {
        let host = host.to_ascii_lowercase();
        if self.exact.contains(&host) {
            return true;
        }
        let name = if has_port(&host) { host.rsplit_once(':').map_or(host.as_str(), |(name, _)| name) } else { host.as_str() };
        self.names.iter().any(|n| *n == name)
    }

    /// Refuses a request that a foreign page may have sent: a `Host` that
    /// does not name us (any method), or a state-changing method from
    /// another origin.
    pub fn check(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), ApiError> {
        let forbidden = |message: String| ApiError::new(403, "invalid_request_error", Some("forbidden_origin"), message);
        let host = headers.get(header::HOST).map(|v| v.to_str().unwrap_or("\u{fffd}"));
        // An absolute-form request target names the host too.
        for named in [host, uri.authority().map(|a| a.as_str())].into_iter().flatten() {
            if !self.allows(named) {
                return Err(forbidden(format!(
                    "Host `{}` is not this gateway's address; without an auth token the gateway serves only its own address and localhost (DNS rebinding guard). Add the name to [gateway] allowed_hosts if you use one",
                    named.escape_debug()
                )));
            }
        }
        if host.is_none() && uri.authority().is_none() {
            return Err(forbidden("a request without a Host header is refused when the gateway runs without an auth token".into()));
        }
        if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
            return Ok(());
        }
        match headers.get(header::ORIGIN) {
            Some(origin) => {
                let own = origin.to_str().ok().and_then(|o| o.strip_prefix("http://")).is_some_and(|h| self.allows(h));
                if own {
                    Ok(())
                } else {
                    Err(forbidden(format!(
                        "{method} from origin `{}` refused: without an auth token the gateway accepts state-changing requests only from its own pages",
                        String::from_utf8_lossy(origin.as_bytes()).escape_debug()
                    )))
                }
            }
            None if headers.get("sec-fetch-site").is_some_and(|site| site.as_bytes() == b"cross-site") => {
                Err(forbidden(format!("{method} from another site refused (Sec-Fetch-Site: cross-site) without an auth token")))
            }
            // Not a browser (curl, an OpenAI client): nothing ambient to abuse.
            None => Ok(()),
        }
    }
}

/// Whether `host` ends in `:port` (an IPv6 literal is bracketed).
fn has_port(host: &str) -> bool {
    host.rsplit_once(':').is_some_and(|(name, port)| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) && (!name.contains(':') || name.ends_with(']')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    fn check(same: &SameOrigin, method: Method, pairs: &[(&str, &str)]) -> Result<(), u16> {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.insert(hyper::header::HeaderName::from_bytes(name.as_bytes()).unwrap(), HeaderValue::from_str(value).unwrap());
        }
        same.check(&method, &Uri::from_static("/chat/send"), &headers).map_err(|e| e.status)
    }

    #[test]
    fn host_and_origin_must_name_the_gateway() {
        let same = SameOrigin::new("127.0.0.1:8790".parse().unwrap(), &["chitin.lan".into(), "box:9000".into()]);
        for host in ["127.0.0.1:8790", "localhost:8790", "LOCALHOST:8790", "chitin.lan:8790", "chitin.lan", "box:9000"] {
            assert_eq!(check(&same, Method::GET, &[("host", host)]), Ok(()), "{host}");
        }
        for host in ["evil.example:8790", "127.0.0.1:8791", "box:9001", "box", "127.0.0.1", "localhost.evil.example:8790"] {
            assert_eq!(check(&same, Method::GET, &[("host", host)]), Err(403), "{host}");
        }
        assert_eq!(check(&same, Method::GET, &[]), Err(403), "no Host");
        let host = ("host", "127.0.0.1:8790");
        assert_eq!(check(&same, Method::POST, &[host]), Ok(()), "no Origin: not a browser");
        assert_eq!(check(&same, Method::POST, &[host, ("origin", "http://127.0.0.1:8790")]), Ok(()));
        assert_eq!(check(&same, Method::POST, &[host, ("origin", "http://localhost:8790")]), Ok(()));
        for origin in ["https://evil.example", "null", "http://127.0.0.1:8791", "https://127.0.0.1:8790", "http://evil.example:8790"] {
            assert_eq!(check(&same, Method::POST, &[host, ("origin", origin)]), Err(403), "{origin}");
            assert_eq!(check(&same, Method::DELETE, &[host, ("origin", origin)]), Err(403), "{origin}");
            assert_eq!(check(&same, Method::GET, &[host, ("origin", origin)]), Ok(()), "a GET changes nothing: {origin}");
        }
        assert_eq!(check(&same, Method::POST, &[host, ("sec-fetch-site", "cross-site")]), Err(403));
        assert_eq!(check(&same, Method::POST, &[host, ("sec-fetch-site", "same-origin")]), Ok(()));
        let v6 = SameOrigin::new("[::1]:80".parse().unwrap(), &[]);
        assert_eq!(check(&v6, Method::GET, &[("host", "[::1]")]), Ok(()));
        assert_eq!(check(&v6, Method::GET, &[("host", "localhost")]), Ok(()));
        assert_eq!(check(&v6, Method::GET, &[("host", "[::2]")]), Err(403));
    }
}
