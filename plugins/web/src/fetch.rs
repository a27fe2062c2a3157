//! `web_fetch`: GET a URL, follow redirects one request at a time, and turn
//! the answer into text the model can read, marked as untrusted.
//!
//! The result follows nanobot's: a JSON object `{url, finalUrl, status,
//! extractor, truncated, length, untrusted: true, text}` whose `text` starts
//! with [`crate::UNTRUSTED_BANNER`], so the model sees that the content is
//! data, not instructions.

use chitin_sdk::serde_json::{Value, json};

use crate::extract::{self, Mode};
use crate::http::{Client, HttpError, Request};
use crate::url::Url;

/// Redirects followed at most; each is a new request the host checks.
pub const MAX_REDIRECTS: usize = 5;

/// Characters of text returned by default.
pub const DEFAULT_MAX_CHARS: usize = 50_000;

/// Smallest `maxChars` accepted.
pub const MIN_MAX_CHARS: usize = 100;

/// Why a fetch produced no text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// The arguments are wrong (a bad URL, `maxChars` too small).
    Invalid(String),
    /// The host's network policy refused a request.
    Denied(String),
    /// Anything else: an HTTP error status, a broken connection, too large,
    /// an unsupported content type, too many redirects.
    Failed(String),
}

/// The arguments, already checked against the schema by the host.
#[derive(Debug, Clone)]
pub struct FetchArgs<'a> {
    /// What to fetch.
    pub url: &'a str,
    /// Characters of text at most.
    pub max_chars: Option<usize>,
    /// `markdown` (default) or `text`.
    pub extract_mode: Option<&'a str>,
}

/// Runs `web_fetch`.
pub fn fetch(client: &dyn Client, args: &FetchArgs) -> Result<Value, FetchError> {
    let max_chars = args.max_chars.unwrap_or(DEFAULT_MAX_CHARS);
    if max_chars < MIN_MAX_CHARS {
        return Err(FetchError::Invalid(format!("maxChars must be at least {MIN_MAX_CHARS} (got {max_chars})")));
    }
    let mode = match args.extract_mode.unwrap_or("markdown") {
        "markdown" => Mode::Markdown,
        "text" => Mode::Text,
        other => return Err(FetchError::Invalid(format!("extractMode must be \"markdown\" or \"text\", not {other:?}"))),
    };
    let start = Url::parse(args.url).map_err(|e| FetchError::Invalid(format!("URL validation failed: {e}")))?;
    let mut url = start.clone();
    let mut hops = 0;
    let response = loop {
        let request = Request::get(url.to_string())
            .header("accept", "text/html,application/xhtml+xml,application/json;q=0.9,text/plain;q=0.8,*/*;q=0.5")
            .header("user-agent", "chitin-web/0.1 (+web_fetch)");
        let response = client.send(&request).map_err(|e| refusal(&start, &url, hops, &e))?;
        if !matches!(response.status, 301 | 302 | 303 | 307 | 308) {
            break response;
        }
        let Some(location) = response.header("location") else {
            return Err(FetchError::Failed(format!("HTTP {} from {url} without a Location to follow", response.status)));
        };
        if hops == MAX_REDIRECTS {
            return Err(FetchError::Failed(format!("more than {MAX_REDIRECTS} redirects, starting at {start}; the last pointed to {location}")));
        }
        let next = url.join(location).map_err(|e| FetchError::Failed(format!("{url} redirected to an unusable location: {e}")))?;
        url = next;
        hops += 1;
    };
    if response.status >= 400 {
        return Err(FetchError::Failed(format!("HTTP {} {} from {url}", response.status, reason(response.status))));
    }
    let content_type = response.header("content-type").unwrap_or("").to_ascii_lowercase();
    let mime = content_type.split(';').next().unwrap_or("").trim().to_string();
    let body = String::from_utf8_lossy(&response.body);
    let sniffed_html = mime.is_empty() && body.trim_start().get(..15).is_some_and(|h| h.to_ascii_lowercase().starts_with("<!doctype html") || h.to_ascii_lowercase().starts_with("<html"));
    let (extractor, title, text) = if mime == "text/html" || mime == "application/xhtml+xml" || sniffed_html {
        let page = extract::html(&body, mode);
        ("htmd", page.title, page.text)
    } else if mime == "application/json" || mime.ends_with("+json") {
        let pretty = chitin_sdk::serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| chitin_sdk::serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| body.into_owned());
        ("json", None, pretty)
    } else if mime.starts_with("text/") || mime.is_empty() || mime == "application/xml" || mime.ends_with("+xml") {
        ("raw", None, body.into_owned())
    } else {
        return Err(FetchError::Failed(format!(
            "{url} is `{mime}`, which web_fetch cannot read (it reads HTML, text and JSON)"
        )));
    };
    let mut text = match title {
        Some(title) if !text.starts_with(&format!("# {title}")) => format!("# {title}\n\n{text}"),
        _ => text,
    };
    let length = text.chars().count();
    let truncated = length > max_chars;
    if truncated {
        let cut = text.char_indices().nth(max_chars).map_or(text.len(), |(i, _)| i);
        text.truncate(cut);
    }
    Ok(json!({
        "url": start.to_string(),
        "finalUrl": url.to_string(),
        "status": response.status,
        "extractor": extractor,
        "truncated": truncated,
        "length": length,
        "untrusted": true,
        "text": format!("{}\n\n{text}", crate::UNTRUSTED_BANNER),
    }))
}

/// A failed request, named for the model: which hop, and why.
fn refusal(start: &Url, url: &Url, hops: usize, error: &HttpError) -> FetchError {
    let what = if hops == 0 { format!("fetching {url}") } else { format!("following the redirect from {start} to {url}") };
    match error {
        HttpError::Denied => FetchError::Denied(format!("{what}: {error} (host `{}`)", url.host())),
        HttpError::Host(_) => FetchError::Denied(format!("{what}: {error}")),
        HttpError::Dns => FetchError::Failed(format!("{what}: cannot resolve hostname `{}`", url.host())),
        _ => FetchError::Failed(format!("{what}: {error}")),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        410 => "Gone",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;
    use crate::http::Response;

    /// A scripted client: a response (or error) per URL, and the requests seen.
    #[derive(Default)]
    struct Scripted {
        routes: Vec<(String, Result<Response, HttpError>)>,
        seen: RefCell<Vec<String>>,
    }

    impl Scripted {
        fn route(mut self, url: &str, status: u16, headers: &[(&str, &str)], body: &str) -> Self {
            let headers = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            self.routes.push((url.into(), Ok(Response { status, headers, body: body.as_bytes().to_vec() })));
            self
        }
        fn fail(mut self, url: &str, error: HttpError) -> Self {
            self.routes.push((url.into(), Err(error)));
            self
        }
    }

    impl Client for Scripted {
        fn send(&self, request: &Request) -> Result<Response, HttpError> {
            self.seen.borrow_mut().push(request.url.clone());
            self.routes.iter().find(|(u, _)| *u == request.url).map(|(_, r)| r.clone()).unwrap_or(Err(HttpError::Failed("unscripted".into())))
        }
    }

    fn args(url: &str) -> FetchArgs<'_> {
        FetchArgs { url, max_chars: None, extract_mode: None }
    }

    const HTML: &[(&str, &str)] = &[("content-type", "text/html; charset=utf-8")];

    #[test]
    fn html_is_markdown_marked_untrusted() {
        let client = Scripted::default().route("http://a.test/", 200, HTML, "<title>T</title><h2>Hello</h2><p>world</p>");
        let out = fetch(&client, &args("http://a.test")).unwrap();
        assert_eq!(out["untrusted"], true);
        assert_eq!(out["extractor"], "htmd");
        assert_eq!(out["status"], 200);
        let text = out["text"].as_str().unwrap();
        assert!(text.starts_with(crate::UNTRUSTED_BANNER), "{text}");
        assert!(text.contains("# T\n\n## Hello\n\nworld"), "{text}");
    }

    #[test]
    fn redirects_are_followed_one_request_each_and_bounded() {
        let client = Scripted::default()
            .route("http://a.test/old", 301, &[("location", "/new")], "")
            .route("http://a.test/new", 302, &[("Location", "https://b.test/final")], "")
            .route("https://b.test/final", 200, &[("content-type", "text/plain")], "plain body");
        let out = fetch(&client, &args("http://a.test/old")).unwrap();
        assert_eq!(out["finalUrl"], "https://b.test/final");
        assert_eq!(out["extractor"], "raw");
        assert_eq!(*client.seen.borrow(), ["http://a.test/old", "http://a.test/new", "https://b.test/final"]);

        let looping = Scripted::default().route("http://a.test/loop", 307, &[("location", "/loop")], "");
        let FetchError::Failed(e) = fetch(&looping, &args("http://a.test/loop")).unwrap_err() else { panic!() };
        assert!(e.contains("more than 5 redirects"), "{e}");
        assert_eq!(looping.seen.borrow().len(), MAX_REDIRECTS + 1);
    }

    #[test]
    fn a_refused_hop_is_named() {
        let client = Scripted::default().route("http://a.test/", 302, &[("location", "http://169.254.169.254/latest")], "").fail("http://169.254.169.254/latest", HttpError::Denied);
        let FetchError::Denied(e) = fetch(&client, &args("http://a.test/")).unwrap_err() else { panic!() };
        assert!(e.contains("following the redirect from http://a.test/ to http://169.254.169.254/latest"), "{e}");
        assert!(e.contains("network policy"), "{e}");
    }

    #[test]
    fn max_chars_status_and_types() {
        let long = "x".repeat(1000);
        let client = Scripted::default()
            .route("http://a.test/long", 200, &[("content-type", "text/plain")], &long)
            .route("http://a.test/json", 200, &[("content-type", "application/json")], r#"{"a":[1,2]}"#)
            .route("http://a.test/gone", 404, HTML, "<h1>nope</h1>")
            .route("http://a.test/img", 200, &[("content-type", "image/png")], "\u{89}PNG");
        let out = fetch(&client, &FetchArgs { url: "http://a.test/long", max_chars: Some(150), extract_mode: None }).unwrap();
        assert_eq!(out["truncated"], true);
        assert_eq!(out["length"], 1000);
        let text = out["text"].as_str().unwrap();
        assert_eq!(text[crate::UNTRUSTED_BANNER.len()..].matches('x').count(), 150);
        let out = fetch(&client, &args("http://a.test/json")).unwrap();
        assert!(out["text"].as_str().unwrap().contains("\"a\": [\n"), "{out}");
        assert!(matches!(fetch(&client, &args("http://a.test/gone")), Err(FetchError::Failed(e)) if e.contains("HTTP 404 Not Found")));
        assert!(matches!(fetch(&client, &args("http://a.test/img")), Err(FetchError::Failed(e)) if e.contains("image/png")));
        assert!(matches!(fetch(&client, &FetchArgs { url: "http://a.test/long", max_chars: Some(10), extract_mode: None }), Err(FetchError::Invalid(_))));
        assert!(matches!(fetch(&client, &args("ftp://a.test/")), Err(FetchError::Invalid(e)) if e.contains("URL validation failed")));
        assert!(matches!(fetch(&client, &FetchArgs { url: "http://a.test/", max_chars: None, extract_mode: Some("pdf") }), Err(FetchError::Invalid(_))));
        assert!(client.seen.borrow().iter().all(|u| !u.starts_with("ftp")), "a refused URL is never requested");
    }
}
