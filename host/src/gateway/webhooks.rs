//! The gateway's side of channel webhooks: read the body within
//! [`MAX_WEBHOOK_BODY`] (413 past it) and the gateway's body timeout (408
//! past it: the body is unauthenticated until it is whole, so a sender may
//! not hold a connection by trickling it), then hand headers and body to
//! [`Routes::handle`], which verifies them before any channel sees a byte
//! (see [`crate::channels::webhook`]).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};

use super::http::{Body, error_response, read_body_within};
use super::wire::ApiError;
use crate::channels::webhook::{Answer, MAX_WEBHOOK_BODY, Routes};
use crate::plugins::channel::HttpMethod;

/// Answers one request on a webhook route.
pub async fn handle(routes: Arc<Routes>, request: Request<Incoming>, body_timeout: Duration) -> Result<Response<Body>, ApiError> {
    let method = match *request.method() {
        Method::GET => HttpMethod::Get,
        Method::POST => HttpMethod::Post,
        Method::PUT => HttpMethod::Put,
        Method::PATCH => HttpMethod::Patch,
        Method::DELETE => HttpMethod::Delete,
        ref other => return Err(ApiError::new(405, "invalid_request_error", Some("method_not_allowed"), format!("{other} is not allowed on a webhook route"))),
    };
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    // Header values that are not text cannot be signed text either; they
    // are passed on lossily and fail any recipe that reads them.
    let headers: Vec<(String, String)> = request
        .headers()
        .iter()
        .take(crate::plugins::channel::MAX_HEADERS)
        .map(|(n, v)| (n.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    let body = match read_body_within(request.into_body(), MAX_WEBHOOK_BODY, body_timeout).await {
        Ok(body) => body,
        Err(e) => {
            match e.status {
                413 => tracing::warn!(path, "webhook request refused (413): body over {MAX_WEBHOOK_BODY} bytes"),
                408 => tracing::warn!(path, "webhook request refused (408): body not whole within {} s", body_timeout.as_secs()),
                _ => {}
            }
            return Ok(error_response(&e));
        }
    };
    Ok(match routes.handle(method, &path, &query, headers, body.to_vec()).await {
        Answer::NotFound => error_response(&ApiError::new(404, "invalid_request_error", Some("not_found"), format!("no webhook route {path}"))),
        Answer::Response(answer) => {
            let mut response = Response::new(Full::new(Bytes::from(answer.body)).boxed_unsync());
            *response.status_mut() = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::OK);
            for (name, value) in answer.headers {
                // A component's header that is not a valid header is dropped.
                if let (Ok(name), Ok(value)) = (hyper::header::HeaderName::from_bytes(name.as_bytes()), hyper::header::HeaderValue::from_str(&value)) {
                    response.headers_mut().append(name, value);
                }
            }
            response
        }
    })
}
