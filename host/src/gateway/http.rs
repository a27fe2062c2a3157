//! The gateway's HTTP front: the route table, the drain (503 once shutdown
//! begins), the body caps and deadline, the requests in flight, bearer auth
//! and the state every handler shares. The routes are leaves that use this
//! module and never each other: [`super::api`] (the OpenAI-compatible API),
//! [`super::webchat`] and [`super::webhooks`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::Value;
use tokio::sync::Notify;

use super::api;
use super::router::OutboundRouter;
use super::webchat::{self, WebChat};
use super::wire::{self, ApiError};
use crate::agent::AgentLoop;
use crate::agent::locks::{KeyGuard, LockSpace};
use crate::config::GatewayAuth;

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
    /// `/mcp`: the plugins' tools for MCP clients (only with a token).
    pub(super) mcp: Option<crate::mcp::server::http::McpEndpoint>,
}

impl ApiState {
    pub(super) fn new(
        agent: AgentLoop,
        router: Arc<OutboundRouter>,
        auth: GatewayAuth,
        webhooks: Arc<crate::channels::webhook::Routes>,
        same_origin: Option<super::origin::SameOrigin>,
        body_timeout: Duration,
        mcp: Option<crate::mcp::server::http::McpEndpoint>,
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
            mcp,
        }
    }

    /// Serialises requests on one session, in the request namespace of
    /// the loop's lock map (the turn the request starts takes the session's
    /// turn lock meanwhile: one key for both would deadlock).
    pub(super) async fn lock_session(&self, key: &str) -> KeyGuard {
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
        "/v1/chat/completions" if method == Method::POST => api::chat(state, request).await,
        "/v1/models" if method == Method::GET => Ok(json_response(StatusCode::OK, &wire::model_list(&state.model, state.created))),
        MCP_PATH => mcp(&state, request).await,
        "/v1/chat/completions" | "/v1/models" => {
            let allowed = if path == "/v1/models" { "GET" } else { "POST" };
            let mut response = error_response(&ApiError::new(405, "invalid_request_error", Some("method_not_allowed"), format!("{method} is not allowed on {path}; use {allowed}")));
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static(allowed));
            Ok(response)
        }
        _ => Err(ApiError::new(404, "invalid_request_error", Some("not_found"), format!("no route {method} {path}; this gateway serves POST /v1/chat/completions and GET /v1/models"))),
    }
}

/// Where MCP clients reach the plugins' tools.
pub const MCP_PATH: &str = "/mcp";

/// `/mcp`, after the token: the body read within the gateway's cap and
/// deadline, then the MCP endpoint. Without a token there is no endpoint:
/// a tool call is the agent's reach, and it is never left open.
async fn mcp(state: &ApiState, request: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    let Some(endpoint) = &state.mcp else {
        return Err(ApiError::new(404, "invalid_request_error", Some("not_found"), "MCP is served at /mcp only when [gateway] auth_token is set (and mcp_tools is not [])"));
    };
    let (parts, body) = request.into_parts();
    let body = read_body_within(body, MAX_BODY_BYTES, state.body_timeout).await?;
    let response = endpoint.handle(Request::from_parts(parts, body)).await;
    Ok(response.map(BodyExt::boxed_unsync))
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

pub(super) fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
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
