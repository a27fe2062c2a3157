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

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::{Request, Response, StatusCode};
use serde_json::{Value, json};

use super::http::{ApiState, Body, InFlightGuard, json_response, read_body};
use super::router::ChatRoute;
use super::wire::{self, ApiError, CompletionHead};
use crate::agent::AgentLoop;
use crate::agent::locks::KeyGuard;
use crate::bus::{InboundMessage, Origin, OutboundKind, OutboundMessage, SessionKey, TokenUsage};

pub use crate::bus::API_CHANNEL;

/// The header that names a session.
pub const SESSION_HEADER: &str = "x-chitin-session";

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

pub(super) async fn chat(state: Arc<ApiState>, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
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

/// 24 random hex digits (a counter if the system has no randomness).
fn request_id() -> String {
    static FALLBACK: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        bytes[..8].copy_from_slice(&FALLBACK.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
