//! The web chat: one page served by the gateway itself, talking to the
//! agent over the bus like any other channel.
//!
//! **Everything comes from the binary.** `index.html`, `app.js` and
//! `style.css` are embedded with `include_str!`: no build step, no CDN, no
//! file to deploy next to the binary. The page is served with a strict
//! Content-Security-Policy (`'self'` only, no inline script), so even a
//! rendering bug could not run a script that a reply smuggled in; the first
//! defence is still `app.js` escaping every text before its small Markdown
//! subset adds the tags it produces itself.
//!
//! **Auth.** The page and its two assets are public (they hold no data);
//! every `/chat/…` API call needs the gateway's bearer token, the same one
//! as the OpenAI API. The page asks for it once and keeps it in
//! `localStorage`; a 401 makes it ask again.
//!
//! **Transport: server-sent events read with `fetch`, plus plain POSTs.**
//! - `GET /chat/events?session=ID`: an SSE stream of the session's events
//!   (`ready`, `delta`, `progress`, `message`, `stream_end`, `turn_end`);
//!   a tool's `progress` also carries `tool`, `call_id` and `phase`
//!   (`started`, `progress`, `finished` with `ok`), and the page shows one
//!   hint per call: `↳ name(args)`, then the plugin's latest text;
//! - `POST /chat/send {session, text}`, `POST /chat/stop {session}`;
//! - `GET /chat/sessions`, `GET /chat/history?session=ID`.
//!
//! Why not a WebSocket: traffic is one-way (the user's messages are rare
//! POSTs, the reply stream is server → browser), SSE is a plain hyper
//! response body like the API's own streaming, and it needs no upgrade
//! handling or a second protocol stack. Why `fetch` rather than
//! `EventSource`: `EventSource` cannot send an `Authorization` header, so
//! the token would go in the URL, where logs and history keep it. The page
//! reconnects itself when the stream drops and then reloads the session's
//! history, so a reply that finished while it was away is shown whole.
//!
//! **Bus.** A message becomes an [`InboundMessage`] on channel
//! [`WEB_CHANNEL`] with the session id as `chat_id`, so its session key is
//! `web:<id>`. The answers come back through the router's channel route
//! for `web` (one for all web chats); [`WebChat::run`] fans each event out
//! to the streams open on its chat id (several tabs may watch one session).
//! Events for a chat nobody watches are dropped: the reply is in the
//! session, and the page loads it when it connects.
//!
//! **Shutdown.** A web turn counts as a request in flight (from the POST
//! until its chat's `TurnEnd`), so the gateway's drain gives it the same
//! grace as an API request and then stops it with its checkpoint kept,
//! instead of waiting for a turn that may never end.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::http::{self, ApiState, Body, InFlightGuard};
use crate::agent::commands;
use super::wire::ApiError;
use crate::bus::{InboundMessage, OutboundKind, OutboundMessage};
use crate::session::Role;

/// The bus channel of the web chat.
pub const WEB_CHANNEL: &str = "web";

/// How often an idle event stream gets a comment line, so proxies and the
/// browser keep it open and a dead peer is noticed.
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// How many of a session's last messages the history call returns.
pub const HISTORY_LIMIT: usize = 200;

/// Longest session id accepted (ids are made by the page: 16 random bytes
/// in hex; anything of `[A-Za-z0-9_-]` up to this length is allowed).
pub const MAX_SESSION_ID: usize = 64;

const INDEX_HTML: &str = include_str!("webchat/index.html");
const APP_JS: &str = include_str!("webchat/app.js");
const STYLE_CSS: &str = include_str!("webchat/style.css");

/// Only our own files; no inline script or style, no plugins, no framing.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The open event streams, by chat id.
#[derive(Default)]
pub struct WebChat {
    streams: Mutex<HashMap<String, Vec<mpsc::UnboundedSender<Bytes>>>>,
    /// The turns sent and not yet ended, by chat id. A message sent while
    /// its chat's turn runs is folded into that turn (one `TurnEnd` for
    /// both), so a `TurnEnd` ends every guard of its chat.
    turns: Mutex<HashMap<String, Vec<InFlightGuard>>>,
}

impl WebChat {
    /// No streams yet.
    pub fn new() -> Arc<Self> {
        Arc::new(WebChat::default())
    }

    /// Fans the router's `web` events out to the open streams until the
    /// router goes away (the gateway aborts it at shutdown).
    pub async fn run(self: Arc<Self>, mut outbound: mpsc::UnboundedReceiver<OutboundMessage>) {
        while let Some(event) = outbound.recv().await {
            self.publish(&event);
        }
    }

    /// Sends `event` to every stream open on its chat; false when none is.
    pub fn publish(&self, event: &OutboundMessage) -> bool {
        if event.kind == OutboundKind::TurnEnd {
            self.turns.lock().expect("webchat lock").remove(&event.chat_id);
        }
        let frame = Bytes::from(format!("data: {}\n\n", event_json(event)));
        let mut streams = self.streams.lock().expect("webchat lock");
        let Some(open) = streams.get_mut(&event.chat_id) else { return false };
        open.retain(|tx| tx.send(frame.clone()).is_ok());
        let delivered = !open.is_empty();
        if !delivered {
            streams.remove(&event.chat_id);
        }
        delivered
    }

    fn track(&self, chat_id: &str, guard: InFlightGuard) {
        self.turns.lock().expect("webchat lock").entry(chat_id.to_string()).or_default().push(guard);
    }

    /// Drops the guard [`WebChat::track`] pushed last for `chat_id` (its
    /// message turned out to be a retry, with no turn of its own).
    fn untrack_last(&self, chat_id: &str) {
        let mut turns = self.turns.lock().expect("webchat lock");
        if let Some(guards) = turns.get_mut(chat_id) {
            guards.pop();
            if guards.is_empty() {
                turns.remove(chat_id);
            }
        }
    }

    fn subscribe(&self, chat_id: &str) -> mpsc::UnboundedReceiver<Bytes> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut streams = self.streams.lock().expect("webchat lock");
        let open = streams.entry(chat_id.to_string()).or_default();
        open.retain(|tx| !tx.is_closed());
        open.push(tx);
        rx
    }

    /// How many streams are open on `chat_id` (for tests).
    pub fn open_streams(&self, chat_id: &str) -> usize {
        self.streams.lock().expect("webchat lock").get(chat_id).map_or(0, |open| open.iter().filter(|tx| !tx.is_closed()).count())
    }
}

/// What the page receives for one bus event.
fn event_json(event: &OutboundMessage) -> Value {
    match &event.kind {
        OutboundKind::StreamDelta => json!({"kind": "delta", "text": event.content}),
        // A tool's progress names its call, so the page keeps one hint per
        // call and updates it; the turn's own "running" hint has no call.
        OutboundKind::Progress => json!({"kind": "progress", "text": event.content}),
        OutboundKind::Tool(tool) => {
            let mut out = json!({"kind": "progress", "text": event.content, "tool": tool.tool, "call_id": tool.call_id, "phase": tool.phase.as_str()});
            if let Some(ok) = tool.ok {
                out["ok"] = Value::Bool(ok);
            }
            out
        }
        OutboundKind::StreamEnd => json!({"kind": "stream_end"}),
        OutboundKind::TurnEnd => json!({"kind": "turn_end"}),
        OutboundKind::Message(reply) => {
            json!({"kind": "message", "text": event.content, "streamed": reply.streamed, "failed": reply.failed})
        }
    }
}

/// Whether `path` (without a trailing slash) belongs to the web chat.
pub fn is_webchat_path(path: &str) -> bool {
    path.is_empty() || path == "/chat" || path.starts_with("/chat/")
}

/// Answers a web chat request (the caller checked [`is_webchat_path`]).
pub async fn handle(state: Arc<ApiState>, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let path = request.uri().path().trim_end_matches('/').to_string();
    let method = request.method().clone();
    match (&method, path.as_str()) {
        (&Method::GET, "" | "/chat") => return Ok(asset("text/html; charset=utf-8", INDEX_HTML)),
        (&Method::GET, "/chat/app.js") => return Ok(asset("text/javascript; charset=utf-8", APP_JS)),
        (&Method::GET, "/chat/style.css") => return Ok(asset("text/css; charset=utf-8", STYLE_CSS)),
        _ => {}
    }
    http::authorize(&state.auth, request.headers())?;
    let query = request.uri().query().unwrap_or_default().to_string();
    match (&method, path.as_str()) {
        (&Method::GET, "/chat/events") => Ok(events(&state, &session_param(&query)?)),
        (&Method::GET, "/chat/history") => history(&state, &session_param(&query)?),
        (&Method::GET, "/chat/sessions") => sessions(&state),
        (&Method::POST, "/chat/send") => {
            let body: SendBody = json_body(&state, request).await?;
            let id = session_id(&body.session)?;
            if body.text.trim().is_empty() {
                return Err(ApiError::invalid("text", "`text` must not be empty"));
            }
            let mut inbound = InboundMessage::new(WEB_CHANNEL, WEB_CHANNEL, id, body.text).from_client();
            // The page's message id makes a retried send (the connection
            // broke before the answer came) the same message: the inbox
            // recognises it and it is answered once.
            if let Some(message_id) = &body.id {
                let message_id = valid_id("id", message_id)?;
                inbound.metadata.insert("event_id".into(), Value::from(format!("{id}:{message_id}")));
            }
            // `/stop` and `/status` are answered without a turn (no `TurnEnd`).
            let tracked = !commands::is_priority(&inbound.content);
            if tracked {
                state.web.track(id, state.in_flight.enter(&inbound.session_key()));
            }
            let queued = state.agent.core().bus.publish_inbound(inbound);
            if !queued && tracked {
                // A retry of a message accepted before: no turn of its own.
                state.web.untrack_last(id);
            }
            Ok(json(StatusCode::ACCEPTED, &json!({"queued": queued})))
        }
        (&Method::POST, "/chat/stop") => {
            let body: StopBody = json_body(&state, request).await?;
            let key = format!("{WEB_CHANNEL}:{}", session_id(&body.session)?);
            let stopped = state.agent.stop(&key);
            Ok(json(StatusCode::OK, &json!({"stopped": stopped})))
        }
        _ => Err(ApiError::new(404, "invalid_request_error", Some("not_found"), format!("no route {method} {path} in the web chat"))),
    }
}

#[derive(Deserialize)]
struct SendBody {
    session: String,
    text: String,
    /// The page's id of this message (optional): a retry with the same id
    /// is recognised as the same message.
    #[serde(default)]
    id: Option<String>,
}

#[derive(Deserialize)]
struct StopBody {
    session: String,
}

async fn json_body<T: serde::de::DeserializeOwned>(state: &ApiState, request: Request<Incoming>) -> Result<T, ApiError> {
    let body = http::read_body(state, request).await?;
    serde_json::from_slice(&body).map_err(|e| ApiError::new(400, "invalid_request_error", Some("invalid_json"), format!("the request body is not what the web chat sends: {e}")))
}

/// A session id as the page makes them; anything else is refused, so an id
/// can never reach into another channel's sessions or a file name.
fn session_id(id: &str) -> Result<&str, ApiError> {
    valid_id("session", id)
}

/// An id the page makes (a session's, a message's): 1 to
/// [`MAX_SESSION_ID`] of `[A-Za-z0-9_-]`; `field` names it in the error.
fn valid_id<'a>(field: &str, id: &'a str) -> Result<&'a str, ApiError> {
    let valid = !id.is_empty() && id.len() <= MAX_SESSION_ID && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if valid { Ok(id) } else { Err(ApiError::invalid(field, format!("a {field} id is 1 to {MAX_SESSION_ID} of [A-Za-z0-9_-]"))) }
}

fn session_param(query: &str) -> Result<String, ApiError> {
    let value = query.split('&').find_map(|pair| pair.strip_prefix("session=")).unwrap_or_default();
    session_id(value).map(str::to_string)
}

/// The session's event stream: `ready` first (the page loads the history
/// only once it is subscribed, so nothing falls between the two), then the
/// bus events, with a keep-alive comment when idle.
fn events(state: &ApiState, id: &str) -> Response<Body> {
    let rx = state.web.subscribe(id);
    let ready = Bytes::from(format!("data: {}\n\n", json!({"kind": "ready", "session": id})));
    let frames = futures::stream::unfold((rx, Some(ready)), |(mut rx, first)| async move {
        if let Some(first) = first {
            return Some((Ok::<_, Infallible>(Frame::data(first)), (rx, None)));
        }
        match tokio::time::timeout(KEEPALIVE, rx.recv()).await {
            Ok(Some(frame)) => Some((Ok(Frame::data(frame)), (rx, None))),
            Ok(None) => None,
            Err(_) => Some((Ok(Frame::data(Bytes::from_static(b": keep-alive\n\n"))), (rx, None))),
        }
    });
    let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The user and assistant texts of the session's last messages (tool calls
/// and results, and commands such as `/stop`, are not shown).
fn history(state: &ApiState, id: &str) -> Result<Response<Body>, ApiError> {
    let key = format!("{WEB_CHANNEL}:{id}");
    let session = state.agent.core().sessions.snapshot(&key).map_err(|e| ApiError::new(500, "server_error", None, format!("cannot read session {key}: {e}")))?;
    let shown: Vec<Value> = session
        .messages
        .iter()
        .filter(|m| matches!(m.role, Role::User | Role::Assistant) && !m.text().is_empty() && !m.is_command())
        .map(|m| json!({"role": if m.role == Role::User { "user" } else { "assistant" }, "text": m.text()}))
        .collect();
    let start = shown.len().saturating_sub(HISTORY_LIMIT);
    // Whether a turn is still running, so a page that reconnects knows to
    // keep its Stop button and wait for the rest of the reply.
    let running = state.agent.core().active.get(&key).is_some();
    Ok(json(StatusCode::OK, &json!({"session": id, "messages": shown[start..], "running": running})))
}

/// The stored `web:` sessions, newest first, titled by their first message.
fn sessions(state: &ApiState) -> Result<Response<Body>, ApiError> {
    let store = &state.agent.core().sessions;
    let keys = store.list().map_err(|e| ApiError::new(500, "server_error", None, format!("cannot list sessions: {e}")))?;
    let prefix = format!("{WEB_CHANNEL}:");
    let mut listed: Vec<(chrono::DateTime<chrono::Utc>, Value)> = keys
        .iter()
        .filter_map(|key| {
            let id = key.strip_prefix(&prefix)?;
            session_id(id).ok()?;
            let session = store.snapshot(key).ok()?;
            let first = session.messages.iter().find(|m| m.role == Role::User && !m.is_command()).map(|m| m.text()).unwrap_or_default();
            let title: String = first.chars().take(60).collect();
            Some((session.updated_at, json!({"id": id, "title": title, "updated_at": session.updated_at.to_rfc3339(), "messages": session.messages.len()})))
        })
        .collect();
    listed.sort_by(|a, b| b.0.cmp(&a.0));
    Ok(json(StatusCode::OK, &json!({"sessions": listed.into_iter().map(|(_, v)| v).collect::<Vec<_>>()})))
}

fn asset(content_type: &'static str, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed_unsync());
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn json(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::InboundMessage;

    #[test]
    fn session_ids_are_a_safe_alphabet() {
        assert!(session_id("a1B2-c_3").is_ok());
        for bad in ["", "../x", "a:b", "a b", "é", &"x".repeat(MAX_SESSION_ID + 1)] {
            assert_eq!(session_id(bad).unwrap_err().status, 400, "{bad:?}");
        }
        assert_eq!(session_param("x=1&session=abc").unwrap(), "abc");
        assert!(session_param("x=1").is_err());
    }

    #[test]
    fn events_go_to_the_streams_of_their_chat_only() {
        let web = WebChat::new();
        let mut a = web.subscribe("a");
        let mut a2 = web.subscribe("a");
        let mut b = web.subscribe("b");
        let to_a = InboundMessage::new(WEB_CHANNEL, "web", "a", "hi");
        assert!(web.publish(&OutboundMessage::event(&to_a, OutboundKind::StreamDelta, "<b>x")));
        let frame = String::from_utf8(a.try_recv().unwrap().to_vec()).unwrap();
        assert_eq!(frame, "data: {\"kind\":\"delta\",\"text\":\"<b>x\"}\n\n");
        assert_eq!(a2.try_recv().unwrap(), frame.as_bytes(), "every tab on the chat gets it");
        assert!(b.try_recv().is_err());
        drop(a);
        drop(a2);
        assert!(!web.publish(&OutboundMessage::event(&to_a, OutboundKind::TurnEnd, "")), "closed streams are pruned");
        assert_eq!(web.open_streams("a"), 0);
        assert_eq!(web.open_streams("b"), 1);
    }
}
