//! The OpenAI-compatible HTTP API: `POST /v1/chat/completions` (plain and
//! `stream: true`) and `GET /v1/models`, bearer auth, OpenAI-shaped errors.
//!
//! A request becomes an [`InboundMessage`] on the bus, like a chat message
//! from any channel, and its answer comes back through the
//! [`OutboundRouter`] (the output seam): the request id is the message's
//! `chat_id`, so the request's route sees exactly its own turn's events. The
//! API never calls the agent directly; a channel and an HTTP client are the
//! same thing to `AgentLoop::run`.
//!
//! Sessions: header `x-chitin-session: NAME`, else the `user` field, names
//! the session `api:NAME`, which keeps its history on the host (only the
//! last message of the request is new; the rest is ignored). Without either,
//! the request is stateless: its `user`/`assistant` messages are the
//! history of an *ephemeral* turn (`InboundMessage::ephemeral_history`,
//! key `api#ephemeral:<request id>`, which no session name can reach) that
//! persists nothing.
//!
//! Requests on one session are served one after the other (the session's
//! request lock in the loop's `KeyedLocks`): the agent would otherwise inject the second into the first's
//! running turn, and the second request would never get its own answer.
//! A client that goes away mid-turn stops the turn (like `/stop`).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::Notify;

use super::router::{ChatRoute, OutboundRouter};
use super::webchat::{self, WebChat};
use super::wire::{self, ApiError, CompletionHead};
use crate::agent::AgentLoop;
use crate::agent::locks::{KeyGuard, LockSpace};
use crate::bus::{InboundMessage, Origin, OutboundKind, OutboundMessage, SessionKey, TokenUsage};
use crate::config::GatewayAuth;

pub use crate::bus::API_CHANNEL;

/// The header that names a session.
pub const SESSION_HEADER: &str = "x-chitin-session";

/// Largest request body accepted (413 above).
pub const MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// How much of an oversized body is read (and dropped) before the 413.
pub const MAX_DRAIN_BYTES: usize = 4 * MAX_BODY_BYTES;

/// The response body type.
pub type Body = UnsyncBoxBody<Bytes, Infallible>;

/// What every request handler shares.
pub struct ApiState {
    pub(super) agent: AgentLoop,
    pub(super) router: Arc<OutboundRouter>,
    pub(super) auth: GatewayAuth,
    pub(super) model: String,
    pub(super) created: i64,
    /// Set at shutdown: new requests get 503.
    pub(super) draining: AtomicBool,
    pub(super) in_flight: Arc<InFlight>,
    /// The web chat's open event streams.
    pub(super) web: Arc<WebChat>,
    /// The channels' webhook routes.
    pub(super) webhooks: Arc<crate::channels::webhook::Routes>,
    /// Without a token: the `Host`/`Origin` guard ([`super::origin`]).
    pub(super) same_origin: Option<super::origin::SameOrigin>,
    /// How long a request body may take to arrive in full.
    pub(super) body_timeout: Duration,
}

impl ApiState {
    pub(super) fn new(
        agent: AgentLoop,
        router: Arc<OutboundRouter>,
        auth: GatewayAuth,
        webhooks: Arc<crate::channels::webhook::Routes>,
        same_origin: Option<super::origin::SameOrigin>,
        body_timeout: Duration,
    ) -> Self {
        let model = agent.core().settings.model.clone();
        ApiState {
            agent,
            router,
            auth,
            model,
            created: chrono::Utc::now().timestamp(),
            draining: AtomicBool::new(false),
            in_flight: Arc::default(),
            web: WebChat::new(),
            webhooks,
            same_origin,
            body_timeout,
        }
    }

    /// Serialises requests on one session, in the request namespace of
    /// the loop's lock map (the turn the request starts takes the session's
    /// turn lock meanwhile: one key for both would deadlock).
    async fn lock_session(&self, key: &str) -> KeyGuard {
        self.agent.core().locks.lock_in(LockSpace::Request, key).await
    }
}

/// The sessions with a request being answered, for a bounded shutdown.
#[derive(Default)]
pub struct InFlight {
    keys: Mutex<HashMap<u64, String>>,
    next: AtomicU64,
    changed: Notify,
}

/// One request in flight; dropping it ends it.
pub struct InFlightGuard {
    owner: Arc<InFlight>,
    id: u64,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.owner.keys.lock().expect("in-flight lock").remove(&self.id);
        self.owner.changed.notify_waiters();
    }
}

impl InFlight {
    pub(super) fn enter(self: &Arc<Self>, key: &str) -> InFlightGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.keys.lock().expect("in-flight lock").insert(id, key.to_string());
        InFlightGuard { owner: self.clone(), id }
    }

    /// The session keys of the requests in flight.
    pub fn sessions(&self) -> Vec<String> {
        self.keys.lock().expect("in-flight lock").values().cloned().collect()
    }

    /// Waits until no request is in flight, at most `limit`; true if none is.
    pub async fn wait_idle(&self, limit: Duration) -> bool {
        let idle = async {
            loop {
                let changed = self.changed.notified();
                if self.keys.lock().expect("in-flight lock").is_empty() {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(limit, idle).await.is_ok()
    }
}

/// Answers one HTTP request.
pub async fn handle(state: Arc<ApiState>, request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    Ok(match route(state, request).await {
        Ok(response) => response,
        Err(e) => error_response(&e),
    })
}

async fn route(state: Arc<ApiState>, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    if state.draining.load(Ordering::Acquire) {
        return Err(ApiError::new(503, "server_error", Some("shutting_down"), "the gateway is shutting down; retry in a moment"));
    }
    let path = request.uri().path().trim_end_matches('/').to_string();
    // Webhooks carry the platform's signature, not the gateway's token, and
    // arrive under the public name: no Host/Origin guard.
    if path.starts_with(crate::channels::webhook::WEBHOOK_PREFIX) && state.webhooks.serves(&path) {
        return super::webhooks::handle(state.webhooks.clone(), request, state.body_timeout).await;
    }
    if let Some(same_origin) = &state.same_origin {
        same_origin.check(request.method(), request.uri(), request.headers()).inspect_err(|e| {
            tracing::warn!(method = %request.method(), path, "gateway: request refused (403): {}", e.message);
        })?;
    }
    if webchat::is_webchat_path(&path) {
        return webchat::handle(state, request).await;
    }
    authorize(&state.auth, request.headers())?;
    let method = request.method().clone();
    match path.as_str() {
        "/v1/chat/completions" if method == Method::POST => chat(state, request).await,
        "/v1/models" if method == Method::GET => Ok(json_response(StatusCode::OK, &wire::model_list(&state.model, state.created))),
        "/v1/chat/completions" | "/v1/models" => {
            let allowed = if path == "/v1/models" { "GET" } else { "POST" };
            let mut response = error_response(&ApiError::new(405, "invalid_request_error", Some("method_not_allowed"), format!("{method} is not allowed on {path}; use {allowed}")));
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allowed));
            Ok(response)
        }
        _ => Err(ApiError::new(404, "invalid_request_error", Some("not_found"), format!("no route {method} {path}; this gateway serves POST /v1/chat/completions and GET /v1/models"))),
    }
}

/// `Authorization: Bearer <token>`, compared in constant time (as BLAKE3
/// digests, whose equality is constant-time, so neither the content nor
/// the length of the token leaks through timing).
pub(super) fn authorize(auth: &GatewayAuth, headers: &HeaderMap) -> Result<(), ApiError> {
    let GatewayAuth::Token(token) = auth else { return Ok(()) };
    let unauthorized = |message: &str| ApiError::new(401, "authentication_error", Some("invalid_api_key"), message);
    let value = headers.get(header::AUTHORIZATION).ok_or_else(|| unauthorized("missing Authorization header: send `Authorization: Bearer <token>` ([gateway] auth_token)"))?;
    let given = value.as_bytes().strip_prefix(b"Bearer ").ok_or_else(|| unauthorized("the Authorization header must be `Bearer <token>`"))?;
    if blake3::hash(given) == blake3::hash(token.as_bytes()) { Ok(()) } else { Err(unauthorized("invalid API token")) }
}

/// Reads the body, at most [`MAX_BODY_BYTES`], within the gateway's body
/// timeout. Past the cap the rest is read and dropped, up to
/// [`MAX_DRAIN_BYTES`] in all, before the 413: a server that answers with
/// unread bytes in the socket makes the kernel reset the connection, and
/// the client loses the answer.
pub(super) async fn read_body(state: &ApiState, request: Request<Incoming>) -> Result<Bytes, ApiError> {
    read_body_within(request.into_body(), MAX_BODY_BYTES, state.body_timeout).await
}

/// [`read_body`] with another cap (a webhook's is smaller); drains up to
/// four times the cap. The whole body must arrive within `deadline`, not
/// each piece: a body trickled a byte a second is cut off (408) as surely
/// as one that stops. The caller answers 408 with `connection: close`
/// ([`error_response`] does), so the rest of the body is never read.
pub(super) async fn read_body_within(body: Incoming, cap: usize, deadline: Duration) -> Result<Bytes, ApiError> {
    match tokio::time::timeout(deadline, read_capped(body, cap)).await {
        Ok(read) => read,
        Err(_) => Err(ApiError::new(
            408,
            "invalid_request_error",
            Some("request_timeout"),
            format!("the request body did not arrive within {} s ([gateway] body_timeout_secs)", deadline.as_secs()),
        )),
    }
}

async fn read_capped(mut body: Incoming, cap: usize) -> Result<Bytes, ApiError> {
    let too_large = || ApiError::new(413, "invalid_request_error", Some("request_too_large"), format!("the request body is over the limit of {cap} bytes"));
    let declared = hyper::body::Body::size_hint(&body).exact();
    let drain = 4 * cap;
    if declared.is_some_and(|len| len > drain as u64) {
        return Err(too_large());
    }
    let mut kept = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| ApiError::new(400, "invalid_request_error", None, format!("the request body could not be read: {e}")))?;
        let Ok(data) = frame.into_data() else { continue };
        seen += data.len();
        if seen > drain {
            break;
        }
        if seen <= cap {
            kept.extend_from_slice(&data);
        }
    }
    if seen > cap { Err(too_large()) } else { Ok(Bytes::from(kept)) }
}

/// What a running request holds until its answer is complete.
struct Turn {
    route: ChatRoute,
    head: CompletionHead,
    stop: StopOnDrop,
    _in_flight: InFlightGuard,
    _session: Option<KeyGuard>,
}

/// Stops the turn if the request is dropped before its answer is complete
/// (the client went away).
struct StopOnDrop {
    agent: AgentLoop,
    key: String,
    armed: bool,
}

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        if self.armed && self.agent.stop(&self.key) {
            tracing::info!(session = %self.key, "client went away: turn stopped");
        }
    }
}

async fn chat(state: Arc<ApiState>, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let header_session = match request.headers().get(SESSION_HEADER) {
        None => None,
        Some(value) => match value.to_str() {
            Ok(name) if !name.trim().is_empty() => Some(name.trim().to_string()),
            _ => return Err(ApiError::invalid(SESSION_HEADER, format!("header `{SESSION_HEADER}` must be a non-empty visible-ASCII name"))),
        },
    };
    let body = read_body(&state, request).await?;
    let parsed = wire::parse_chat_request(&body)?;
    let id = request_id();
    let head = CompletionHead { id: format!("chatcmpl-{id}"), created: chrono::Utc::now().timestamp(), model: state.model.clone() };
    let mut inbound = InboundMessage::from_origin(API_CHANNEL, &id, Origin::Api { user: parsed.user.clone() }, parsed.content);
    let (key, session) = match header_session.or(parsed.user.clone()) {
        Some(name) => {
            let key = format!("{API_CHANNEL}:{name}");
            let lock = state.lock_session(&key).await;
            (key, Some(lock))
        }
        None => {
            let history = serde_json::to_value(&parsed.history).map_err(|e| ApiError::new(500, "server_error", None, format!("history: {e}")))?;
            inbound.ephemeral_history = Some(history);
            (SessionKey::ephemeral(API_CHANNEL, &id).into(), None)
        }
    };
    inbound.session_key_override = Some(key.clone());
    // The route exists before the message is published, so no event is missed.
    let route = state.router.route_chat(API_CHANNEL, &id);
    let turn = Turn {
        route,
        head,
        stop: StopOnDrop { agent: state.agent.clone(), key: key.clone(), armed: true },
        _in_flight: state.in_flight.enter(&key),
        _session: session,
    };
    state.agent.core().bus.publish_inbound(inbound);
    if parsed.stream { Ok(stream(turn, parsed.include_usage)) } else { complete(turn).await }
}

/// Waits for the reply and answers with one `chat.completion`.
async fn complete(mut turn: Turn) -> Result<Response<Body>, ApiError> {
    let mut streamed = String::new();
    while let Some(event) = turn.route.events.recv().await {
        match event.kind {
            OutboundKind::StreamDelta => streamed.push_str(&event.content),
            OutboundKind::Message(ref reply) => {
                turn.stop.armed = false;
                if reply.failed {
                    return Err(ApiError::new(500, "server_error", Some("agent_failed"), event.content));
                }
                let body = wire::completion(&turn.head, &event.content, usage(&event));
                return Ok(json_response(StatusCode::OK, &body));
            }
            // Stopped before a reply: what was streamed so far.
            OutboundKind::TurnEnd => {
                turn.stop.armed = false;
                return Ok(json_response(StatusCode::OK, &wire::completion(&turn.head, &streamed, None)));
            }
            OutboundKind::Progress | OutboundKind::Tool(_) | OutboundKind::StreamEnd => {}
        }
    }
    Err(shutting_down())
}

/// The OpenAI `usage` of a reply that carries its turn's.
fn usage(event: &OutboundMessage) -> Option<Value> {
    let TokenUsage { prompt_tokens, completion_tokens } = event.kind.reply()?.usage?;
    Some(wire::usage(prompt_tokens, completion_tokens))
}

fn shutting_down() -> ApiError {
    ApiError::new(503, "server_error", Some("shutting_down"), "the gateway shut down before the turn finished")
}

/// Server-sent events: a role chunk, a chunk per delta, a final chunk with
/// `finish_reason`, the usage chunk when asked for, and `data: [DONE]`.
fn stream(turn: Turn, include_usage: bool) -> Response<Body> {
    let first = sse(&wire::chunk(&turn.head, json!({"role": "assistant", "content": ""}), None));
    struct State {
        turn: Turn,
        sent_text: bool,
        done: bool,
    }
    let state = State { turn, sent_text: false, done: false };
    let events = futures::stream::unfold(state, move |mut s| async move {
        if s.done {
            return None;
        }
        loop {
            let Some(event) = s.turn.route.events.recv().await else {
                s.done = true;
                let error = shutting_down();
                return Some((Ok(Frame::data(Bytes::from(format!("data: {}\n\n", error.body())))), s));
            };
            let head = &s.turn.head;
            let out = match event.kind {
                OutboundKind::StreamDelta if !event.content.is_empty() => {
                    s.sent_text = true;
                    sse(&wire::chunk(head, json!({"content": event.content}), None))
                }
                OutboundKind::Message(_) if event.kind.is_failure() => {
                    s.done = true;
                    let error = ApiError::new(500, "server_error", Some("agent_failed"), event.content);
                    [format!("data: {}\n\n", error.body()), "data: [DONE]\n\n".to_string()].concat()
                }
                OutboundKind::Message(_) | OutboundKind::TurnEnd => {
                    s.done = true;
                    let mut out = String::new();
                    // A reply that did not go out as deltas (a command's
                    // answer, streaming off in `[agent]`) goes out whole.
                    if !s.sent_text && !event.content.is_empty() {
                        out.push_str(&sse(&wire::chunk(head, json!({"content": event.content}), None)));
                    }
                    out.push_str(&sse(&wire::chunk(head, json!({}), Some("stop"))));
                    if let Some(usage) = usage(&event).filter(|_| include_usage) {
                        out.push_str(&sse(&wire::usage_chunk(head, usage)));
                    }
                    out.push_str("data: [DONE]\n\n");
                    out
                }
                _ => continue,
            };
            if s.done {
                s.turn.stop.armed = false;
            }
            return Some((Ok(Frame::data(Bytes::from(out))), s));
        }
    });
    let first = futures::stream::once(async move { Ok::<_, Infallible>(Frame::data(Bytes::from(first))) });
    let body = StreamBody::new(futures::StreamExt::chain(first, events)).boxed_unsync();
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn sse(value: &Value) -> String {
    format!("data: {value}\n\n")
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// `{"error": …}` with the error's status. A 408 (the body timed out)
/// also closes the connection: the rest of that body is never read.
pub fn error_response(error: &ApiError) -> Response<Body> {
    let mut response = json_response(StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), &error.body());
    if error.status == 408 {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// 24 random hex digits (a counter if the system has no randomness).
fn request_id() -> String {
    static FALLBACK: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        bytes[..8].copy_from_slice(&FALLBACK.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens_must_match_exactly() {
        let auth = GatewayAuth::Token("s3cret".into());
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            authorize(&auth, &headers)
        };
        assert!(with("Bearer s3cret").is_ok());
        assert_eq!(with("Bearer s3cre").unwrap_err().status, 401);
        assert_eq!(with("Bearer s3cret ").unwrap_err().status, 401);
        assert_eq!(with("s3cret").unwrap_err().status, 401);
        assert_eq!(authorize(&auth, &HeaderMap::new()).unwrap_err().status, 401);
        assert!(authorize(&GatewayAuth::Disabled, &HeaderMap::new()).is_ok());
    }

    #[tokio::test]
    async fn in_flight_waits_for_the_last_request() {
        let in_flight = Arc::new(InFlight::default());
        assert!(in_flight.wait_idle(Duration::ZERO).await);
        let guard = in_flight.enter("api:a");
        assert_eq!(in_flight.sessions(), ["api:a"]);
        assert!(!in_flight.wait_idle(Duration::from_millis(1)).await);
        let waiter = { let f = in_flight.clone(); tokio::spawn(async move { f.wait_idle(Duration::from_secs(60)).await }) };
        drop(guard);
        assert!(waiter.await.unwrap());
    }
}
