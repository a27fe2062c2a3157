//! Reading an index or an artifact: `https://`, `file://`, or plain
//! `http://` to a loopback address (a local mirror, a test server). Every
//! read is bounded in bytes and time, since the server is untrusted.

use std::time::Duration;

use reqwest::Url;

use super::MarketError;

/// Parses `url` and refuses a scheme the marketplace does not use. Plain
/// `http://` is refused unless the host is a loopback address: the
/// signatures protect the content, but a user's index traffic should not be
/// readable or blockable on the way.
pub fn parse(url: &str) -> Result<Url, MarketError> {
    let parsed = Url::parse(url).map_err(|e| MarketError::Url { url: url.into(), message: format!("not a URL: {e}") })?;
    check_scheme(&parsed)?;
    Ok(parsed)
}

fn check_scheme(url: &Url) -> Result<(), MarketError> {
    match url.scheme() {
        "https" | "file" => Ok(()),
        "http" if is_loopback(url) => Ok(()),
        "http" => Err(MarketError::Url { url: url.to_string(), message: "plain http:// is only accepted for a loopback address; use https://".into() }),
        other => Err(MarketError::Url { url: url.to_string(), message: format!("unsupported scheme `{other}` (use https:// or file://)") }),
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(d)) => d == "localhost",
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// `reference` resolved against `base` (an artifact URL relative to its
/// index), with the same scheme rules.
pub fn join(base: &Url, reference: &str) -> Result<Url, MarketError> {
    let url = base.join(reference).map_err(|e| MarketError::Url { url: reference.into(), message: format!("not a URL relative to {base}: {e}") })?;
    // A file:// reference from an https index would read the user's disk.
    if url.scheme() == "file" && base.scheme() != "file" {
        return Err(MarketError::Url { url: url.to_string(), message: format!("a file:// artifact in an index served from {}", base.scheme()) });
    }
    check_scheme(&url)?;
    Ok(url)
}

/// The body at `url`, at most `max` bytes, within `timeout`.
pub async fn get(url: &Url, max: u64, timeout: Duration) -> Result<Vec<u8>, MarketError> {
    let fail = |message: String| MarketError::Fetch { url: url.to_string(), message };
    if url.scheme() == "file" {
        let path = url.to_file_path().map_err(|()| fail("not a local file path".into()))?;
        let meta = std::fs::metadata(&path).map_err(|e| fail(e.to_string()))?;
        if meta.len() > max {
            return Err(fail(format!("{} bytes, more than the {max} allowed", meta.len())));
        }
        return std::fs::read(&path).map_err(|e| fail(e.to_string()));
    }
    let client = reqwest::Client::builder()
        .timeout(timeout)
        // A redirect could leave https or reach a file the scheme check
        // would refuse; an index names its artifacts' final URLs.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| fail(e.to_string()))?;
    let read = async {
        let mut response = client.get(url.clone()).send().await.map_err(|e| fail(describe(&e, timeout)))?;
        if response.status().is_redirection() {
            // Not followed (see the client): a new request would skip the
            // scheme check; the index names final URLs.
            let to = response.headers().get(reqwest::header::LOCATION).and_then(|l| l.to_str().ok()).unwrap_or("nowhere readable");
            let to = crate::text::clip_for_terminal(to, 200, "location");
            return Err(fail(format!("the server answered a redirect ({}) to {to}; redirects are not followed: use the final URL", response.status().as_u16())));
        }
        if !response.status().is_success() {
            return Err(fail(format!("the server answered {}", response.status())));
        }
        if response.content_length().is_some_and(|n| n > max) {
            return Err(fail(format!("{} bytes, more than the {max} allowed", response.content_length().unwrap_or(0))));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| fail(describe(&e, timeout)))? {
            if body.len() as u64 + chunk.len() as u64 > max {
                return Err(fail(format!("more than the {max} bytes allowed")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    };
    // reqwest's timeout covers the whole exchange; this one also covers a
    // server that trickles a body forever.
    tokio::time::timeout(timeout, read).await.map_err(|_| fail(format!("no complete answer within {} s", timeout.as_secs())))?
}

fn describe(e: &reqwest::Error, timeout: Duration) -> String {
    if e.is_timeout() {
        return format!("no complete answer within {} s", timeout.as_secs());
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_file_and_loopback_http_are_accepted() {
        assert!(parse("https://plugins.example/index.json").is_ok());
        assert!(parse("file:///srv/index.json").is_ok());
        assert!(parse("http://127.0.0.1:8080/index.json").is_ok());
        assert!(parse("http://localhost/index.json").is_ok());
        assert!(parse("http://[::1]/index.json").is_ok());
        let e = parse("http://plugins.example/index.json").unwrap_err().to_string();
        assert!(e.contains("only accepted for a loopback address"), "{e}");
        assert!(parse("ftp://x/index.json").unwrap_err().to_string().contains("unsupported scheme `ftp`"));
        assert!(parse("not a url").is_err());
    }

    #[test]
    fn an_artifact_url_cannot_leave_for_the_users_disk() {
        let https = parse("https://plugins.example/sub/index.json").unwrap();
        assert_eq!(join(&https, "artifacts/a.wasm").unwrap().as_str(), "https://plugins.example/sub/artifacts/a.wasm");
        assert!(join(&https, "file:///etc/passwd").unwrap_err().to_string().contains("a file:// artifact in an index served from https"));
        assert!(join(&https, "http://evil.example/a.wasm").is_err());
        let file = parse("file:///srv/index.json").unwrap();
        assert_eq!(join(&file, "artifacts/a.wasm").unwrap().as_str(), "file:///srv/artifacts/a.wasm");
    }

    /// A hostile index server redirects to another host: the fetch fails
    /// with the redirect named, and the other host is never contacted.
    #[tokio::test(flavor = "multi_thread")]
    async fn a_redirect_is_refused_and_never_followed() {
        let other = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let other_addr = other.local_addr().unwrap();
        let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = hits.clone();
        tokio::spawn(async move {
            while let Ok((_socket, _)) = other.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let served = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = served.clone();
        let server = chitin_testing::server::MockServer::start("Redirector", move |_request: hyper::Request<hyper::body::Incoming>| {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                let response = hyper::Response::builder()
                    .status(302)
                    .header("location", format!("http://{other_addr}/index.json"))
                    .body(http_body_util::Full::new(bytes::Bytes::from_static(b"")))
                    .unwrap();
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        let url = parse(&format!("http://{}/index.json", server.addr())).unwrap();
        let e = get(&url, 1 << 20, Duration::from_secs(5)).await.unwrap_err().to_string();
        assert!(e.contains(&format!("a redirect (302) to http://{other_addr}/index.json")) && e.contains("not followed"), "{e}");
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 1, "the first hop was served");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0, "the other host was contacted");
    }
}
