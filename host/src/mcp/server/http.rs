//! The streamable HTTP side of the MCP server: rmcp's
//! `StreamableHttpService` behind whatever front hands it requests (the
//! gateway's `/mcp`, after the gateway token).
//!
//! The front reads a POST's body itself, within its cap and deadline, so a
//! client that trickles or floods a body is cut off before rmcp sees it.
//! Sessions are what this endpoint allocates per client; they are capped
//! ([`MAX_SESSIONS`]) and closed after [`SESSION_IDLE`] without a request.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

use super::ToolServer;

/// Sessions open at once; an `initialize` past it gets 503.
pub const MAX_SESSIONS: usize = 64;

/// A session with no request for this long is closed.
pub const SESSION_IDLE: Duration = Duration::from_secs(10 * 60);

/// The header naming a client's session.
const SESSION_HEADER: &str = "mcp-session-id";

/// The MCP endpoint: one per gateway.
pub struct McpEndpoint {
    service: StreamableHttpService<ToolServer, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
}

impl McpEndpoint {
    /// Serves `server`'s tools; `shutdown` ends every session (the gateway
    /// cancels it when it stops).
    pub fn new(server: ToolServer, max_body: usize, shutdown: CancellationToken) -> McpEndpoint {
        let mut sessions = LocalSessionManager::default();
        sessions.session_config.keep_alive = Some(SESSION_IDLE);
        let sessions = Arc::new(sessions);
        let mut config = StreamableHttpServerConfig::default();
        // The gateway's token guards this endpoint (and its origin checks
        // apply before it), whatever name the client reached it by.
        config.allowed_hosts = Vec::new();
        config.cancellation_token = shutdown;
        config.max_request_body_bytes = max_body;
        let service = StreamableHttpService::new(move || Ok(server.clone()), sessions.clone(), config);
        McpEndpoint { service, sessions }
    }

    /// Answers one request whose body the front has read in full.
    pub async fn handle(&self, request: Request<Bytes>) -> Response<BoxBody<Bytes, Infallible>> {
        let opens_session = request.method() == hyper::Method::POST && !request.headers().contains_key(SESSION_HEADER);
        if opens_session && self.sessions.sessions.read().await.len() >= MAX_SESSIONS {
            tracing::warn!("MCP: a new session refused: {MAX_SESSIONS} are open");
            return too_many_sessions();
        }
        let request = request.map(Full::new);
        self.service.handle(request).await
    }
}

fn too_many_sessions() -> Response<BoxBody<Bytes, Infallible>> {
    let body = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": -32000, "message": format!("too many MCP sessions open ({MAX_SESSIONS}); close one (DELETE) or retry when an idle one has expired")}
    });
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response.headers_mut().insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/json"));
    response.headers_mut().insert(hyper::header::RETRY_AFTER, hyper::header::HeaderValue::from_static("30"));
    response
}
