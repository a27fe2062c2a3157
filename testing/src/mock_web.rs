//! [`MockWeb`]: a scripted web server for the `web` plugin's tests, on
//! 127.0.0.1 (so a test grants it by address): pages by path (any status,
//! headers, body: redirects too), and the search APIs of Brave
//! (`/res/v1/web/search`), Tavily (`POST /search`) and SearXNG
//! (`GET /search?format=json`), which check the API key and record what
//! they were sent, so a test can see the real key arrived while the
//! component only ever wrote a placeholder.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use serde_json::json;

/// One request the mock received.
#[derive(Debug, Clone)]
pub struct WebRequest {
    /// `GET`, `POST`.
    pub method: String,
    /// Path and query.
    pub path: String,
    /// Header names (lower case) and values.
    pub headers: HashMap<String, String>,
    /// The body, as text.
    pub body: String,
}

/// A scripted page.
#[derive(Debug, Clone)]
struct Page {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

#[derive(Default)]
struct State {
    pages: HashMap<String, Page>,
    key: Option<String>,
    echo_key: bool,
    log: Vec<WebRequest>,
}

/// The scripted server; stopped when dropped.
pub struct MockWeb {
    server: super::server::MockServer,
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for MockWeb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockWeb").field("addr", &self.server.addr()).finish()
    }
}

impl MockWeb {
    /// A server with no pages; the search APIs accept `key`.
    ///
    /// # Panics
    /// If no local port can be bound (test setup).
    pub fn start(key: &str) -> MockWeb {
        let state = Arc::new(Mutex::new(State { key: Some(key.to_string()), ..State::default() }));
        let shared = state.clone();
        let server = super::server::MockServer::start("MockWeb", move |request| respond(shared.clone(), request));
        MockWeb { server, state }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Serves `body` at `path` with `status` and `headers`.
    pub fn page(&self, path: &str, status: u16, headers: &[(&str, &str)], body: &str) {
        let headers = headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.lock().pages.insert(path.to_string(), Page { status, headers, body: body.to_string() });
    }

    /// Serves an HTML page at `path`.
    pub fn html(&self, path: &str, body: &str) {
        self.page(path, 200, &[("content-type", "text/html; charset=utf-8")], body);
    }

    /// Answers `path` with a 302 to `location`.
    pub fn redirect(&self, path: &str, location: &str) {
        self.page(path, 302, &[("location", location)], "");
    }

    /// Makes the search APIs put the key they received into their answers
    /// (a snippet and a header), as a hostile or buggy server might.
    pub fn echo_key(&self) {
        self.lock().echo_key = true;
    }

    /// Every request so far, in order.
    pub fn requests(&self) -> Vec<WebRequest> {
        self.lock().log.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

type Body = Full<Bytes>;

fn reply(status: u16, headers: &[(String, String)], body: String) -> Response<Body> {
    let mut response = Response::builder().status(status);
    for (k, v) in headers {
        response = response.header(k, v);
    }
    response.body(Full::new(Bytes::from(body))).unwrap_or_else(|_| Response::new(Full::new(Bytes::from_static(b"bad mock page"))))
}

fn json_reply(status: u16, value: serde_json::Value, extra: Option<(String, String)>) -> Response<Body> {
    let mut headers = vec![("content-type".to_string(), "application/json".to_string())];
    headers.extend(extra);
    reply(status, &headers, value.to_string())
}

async fn respond(state: Arc<Mutex<State>>, request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let method = request.method().to_string();
    let path = request.uri().path_and_query().map(|p| p.to_string()).unwrap_or_default();
    let headers: HashMap<String, String> =
        request.headers().iter().map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned())).collect();
    let body = request.into_body().collect().await.map(|b| String::from_utf8_lossy(&b.to_bytes()).into_owned()).unwrap_or_default();
    let mut state = state.lock().unwrap_or_else(|e| e.into_inner());
    state.log.push(WebRequest { method: method.clone(), path: path.clone(), headers: headers.clone(), body: body.clone() });
    let (route, query) = path.split_once('?').unwrap_or((&path, ""));
    if let Some(page) = state.pages.get(&path).or_else(|| state.pages.get(route)) {
        return Ok(reply(page.status, &page.headers, page.body.clone()));
    }
    let expected = state.key.clone().unwrap_or_default();
    let q = query.split('&').find_map(|kv| kv.strip_prefix("q=")).unwrap_or_default().to_string();
    let (given, results_of): (Option<String>, fn(&str, &str) -> serde_json::Value) = match (method.as_str(), route) {
        ("GET", "/res/v1/web/search") => (headers.get("x-subscription-token").cloned(), |q, snippet| {
            json!({"web": {"results": [
                {"title": format!("Brave result for {q}"), "url": "https://example.com/brave", "description": snippet},
                {"title": "Second", "url": "https://example.com/2", "description": "more"}
            ]}})
        }),
        ("POST", "/search") => (headers.get("authorization").and_then(|a| a.strip_prefix("Bearer ")).map(str::to_string), |q, snippet| {
            json!({"results": [{"title": format!("Tavily result for {q}"), "url": "https://example.com/tavily", "content": snippet}]})
        }),
        ("GET", "/search") if query.contains("format=json") => (Some(expected.clone()), |q, snippet| {
            json!({"results": [{"title": format!("SearXNG result for {q}"), "url": "https://example.com/searx", "content": snippet}]})
        }),
        _ => return Ok(reply(404, &[], "not found".into())),
    };
    let echoed = given.clone().unwrap_or_default();
    let extra = state.echo_key.then(|| ("x-echo".to_string(), echoed.clone()));
    if given.as_deref() != Some(expected.as_str()) {
        return Ok(json_reply(401, json!({"error": format!("invalid key {echoed}")}), extra));
    }
    let query = if route == "/search" && method == "POST" {
        serde_json::from_str::<serde_json::Value>(&body).ok().and_then(|v| v["query"].as_str().map(str::to_string)).unwrap_or_default()
    } else {
        q.replace("%20", " ")
    };
    let snippet = if state.echo_key { format!("you sent {echoed}") } else { "a snippet".to_string() };
    Ok(json_reply(200, results_of(&query, &snippet), extra))
}
