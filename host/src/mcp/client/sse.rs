//! The HTTP+SSE transport of MCP 2024-11-05, for servers that predate
//! streamable HTTP (`transport = "sse"`): the client GETs the URL for an
//! event stream, whose first `endpoint` event names where to POST each
//! message; the server's messages arrive as `message` events on the stream.
//!
//! Every request goes through [`PolicyHttp`], so the rules of streamable
//! HTTP hold here too (the URL's host only, no redirects, secrets filled by
//! the host and redacted from what comes back, each event bounded). One
//! more: the endpoint must be on the URL's own origin. A server that names
//! another host (a private address, a metadata service) gets an error, and
//! the host it named is never contacted.

use std::sync::Arc;

use futures::StreamExt;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::RoleClient;
use rmcp::transport::Transport;
use rmcp::transport::common::http_header::EVENT_STREAM_MIME_TYPE;
use tokio::sync::mpsc;

use super::http::{HttpFailure, PolicyHttp, content_type};

/// Server messages read ahead of the client; the stream waits beyond it.
const READ_AHEAD: usize = 64;

/// A connected HTTP+SSE transport.
pub struct SseTransport {
    http: PolicyHttp,
    /// Where messages are POSTed (from the `endpoint` event).
    endpoint: Arc<str>,
    /// `Authorization` for an OAuth server (`chitin mcp login`).
    auth: Option<HeaderValue>,
    incoming: mpsc::Receiver<ServerJsonRpcMessage>,
    reader: tokio::task::JoinHandle<()>,
}

impl SseTransport {
    /// Opens the event stream at `url` and waits for its `endpoint` event.
    pub async fn connect(http: PolicyHttp, url: &str, access_token: Option<String>) -> Result<SseTransport, String> {
        let auth = access_token.and_then(|token| HeaderValue::from_str(&format!("Bearer {token}")).ok());
        let mut headers = vec![(http::header::ACCEPT, HeaderValue::from_static(EVENT_STREAM_MIME_TYPE))];
        headers.extend(auth.clone().map(|value| (http::header::AUTHORIZATION, value)));
        let response = http.send(reqwest::Method::GET, url, headers, None).await.map_err(|e| e.to_string())?;
        if let Some(error) = http.status_error(&response) {
            return Err(error.to_string());
        }
        if !content_type(&response).starts_with(EVENT_STREAM_MIME_TYPE) {
            return Err(format!("the server answered `{}`, not an event stream: is this an SSE endpoint?", content_type(&response)));
        }
        let mut events = http.events(response);
        let named = loop {
            match events.next().await {
                Some(Ok(event)) if event.event.as_deref() == Some("endpoint") => break event.data.unwrap_or_default(),
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(format!("the event stream failed before naming its endpoint: {e}")),
                None => return Err("the event stream ended before naming its endpoint".to_string()),
            }
        };
        let endpoint = same_origin(url, named.trim())?;
        let (tx, incoming) = mpsc::channel(READ_AHEAD);
        let reader = tokio::spawn(async move {
            while let Some(event) = events.next().await {
                let Ok(event) = event else { return };
                if !matches!(event.event.as_deref(), None | Some("message")) {
                    continue;
                }
                let Some(data) = event.data else { continue };
                match serde_json::from_str::<ServerJsonRpcMessage>(&data) {
                    Ok(message) => {
                        if tx.send(message).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => tracing::debug!("MCP (sse): an event that is not a JSON-RPC message was skipped: {e}"),
                }
            }
        });
        Ok(SseTransport { http, endpoint: endpoint.into(), auth, incoming, reader })
    }
}

/// `endpoint` resolved against `url`, refused unless it is on the same
/// origin (scheme, host and port).
fn same_origin(url: &str, endpoint: &str) -> Result<String, String> {
    let base = reqwest::Url::parse(url).map_err(|e| format!("`url` does not parse: {e}"))?;
    let joined = base.join(endpoint).map_err(|e| format!("the server named an endpoint that does not parse ({e})"))?;
    if joined.origin() != base.origin() {
        return Err(format!(
            "the server named an endpoint on another origin ({}); only {} is reached",
            joined.origin().ascii_serialization(),
            base.origin().ascii_serialization()
        ));
    }
    Ok(joined.to_string())
}

impl Transport<RoleClient> for SseTransport {
    type Error = HttpFailure;

    fn send(&mut self, item: ClientJsonRpcMessage) -> impl Future<Output = Result<(), HttpFailure>> + Send + 'static {
        let (http, endpoint, auth) = (self.http.clone(), self.endpoint.clone(), self.auth.clone());
        async move {
            let body = serde_json::to_vec(&item).map_err(|e| HttpFailure(e.to_string()))?;
            let headers: Vec<(HeaderName, HeaderValue)> = auth.map(|value| (http::header::AUTHORIZATION, value)).into_iter().collect();
            let response = http.send(reqwest::Method::POST, &endpoint, headers, Some(body)).await.map_err(|e| HttpFailure(e.to_string()))?;
            match http.status_error(&response) {
                Some(error) => Err(HttpFailure(error.to_string())),
                None => Ok(()),
            }
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), HttpFailure> {
        self.reader.abort();
        Ok(())
    }
}

impl Drop for SseTransport {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_endpoint_must_be_on_the_url_s_origin() {
        let url = "http://127.0.0.1:3001/sse";
        assert_eq!(same_origin(url, "/message?sessionId=1").unwrap(), "http://127.0.0.1:3001/message?sessionId=1");
        assert_eq!(same_origin(url, "http://127.0.0.1:3001/m").unwrap(), "http://127.0.0.1:3001/m");
        for other in ["http://127.0.0.2:3001/m", "http://127.0.0.1:3002/m", "https://127.0.0.1:3001/m", "//169.254.169.254/latest", "file:///etc/passwd"] {
            assert!(same_origin(url, other).unwrap_err().contains("another origin"), "{other}");
        }
    }
}
