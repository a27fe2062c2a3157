//! What a Bot API answer means for the channel: the result, or an
//! [`ApiError`] with the [`Action`] the host should take.
//!
//! Why a module of its own: the difference between "stop" and "retry" is
//! the difference between a clear status and a restart loop. Two pollers on
//! one token (409) or a revoked token (401) never heal by retrying, and a
//! host that retries them hammers the API and floods the log (IronClaw's
//! #390); a 429 must wait exactly `retry_after`; "message is not modified"
//! (an edit with the text it already has, common when streaming) is success
//! in all but name.

use serde_json::Value;

/// A failed Bot API call, classified.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 401: the token is wrong or revoked.
    #[error("Telegram rejected the bot token (401 Unauthorized): check the channel's token")]
    Unauthorized,
    /// 409 from `getUpdates`: another consumer polls with this token.
    #[error("another bot instance is polling with this token (409 Conflict: {description}); stop the other instance")]
    PollerConflict {
        /// Telegram's description.
        description: String,
    },
    /// 409 from `getUpdates` because a webhook is set.
    #[error("a webhook is set for this bot, so getUpdates is refused (409 Conflict); delete the webhook or use webhook mode")]
    WebhookActive,
    /// 429: wait `retry_after` seconds.
    #[error("rate limited by Telegram (429): retry after {retry_after} s")]
    RateLimited {
        /// Seconds to wait, from `parameters.retry_after`.
        retry_after: u64,
    },
    /// 400 "message is not modified": the edit had the current text.
    #[error("the message already has this text")]
    NotModified,
    /// 400 "can't parse entities": the HTML was refused.
    #[error("Telegram could not parse the message's markup: {description}")]
    BadMarkup {
        /// Telegram's description.
        description: String,
    },
    /// Anything else: a 5xx, a network-level proxy error page, another 4xx.
    #[error("Bot API error {status}: {description}")]
    Other {
        /// The `error_code`, or the HTTP status.
        status: u16,
        /// Telegram's description, or why the answer could not be read.
        description: String,
    },
}

/// What the host does about an [`ApiError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Stop the channel (no retry) and show `reason` as its status.
    Stop {
        /// For `chitin status` and the log.
        reason: String,
    },
    /// Wait this many seconds, then send the same request again.
    RetryAfter {
        /// Seconds.
        seconds: u64,
    },
    /// Treat as done.
    Ignore,
    /// Send the same text again as plain text (no `parse_mode`): the
    /// rendering's fallback when Telegram is less lenient than expected.
    ResendPlain,
    /// Retry with the host's backoff (1, 2, 4 s), then give up.
    Retry,
}

impl ApiError {
    /// What the host should do.
    pub fn action(&self) -> Action {
        match self {
            ApiError::Unauthorized | ApiError::PollerConflict { .. } | ApiError::WebhookActive => {
                Action::Stop { reason: self.to_string() }
            }
            ApiError::RateLimited { retry_after } => Action::RetryAfter { seconds: *retry_after },
            ApiError::NotModified => Action::Ignore,
            ApiError::BadMarkup { .. } => Action::ResendPlain,
            ApiError::Other { .. } => Action::Retry,
        }
    }

    /// Whether the channel must stop.
    pub fn is_fatal(&self) -> bool {
        matches!(self.action(), Action::Stop { .. })
    }
}

/// Errors of the adapter's own logic.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TelegramError {
    /// The Bot API said no.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// A successful answer without the expected shape.
    #[error("unexpected Bot API answer: {0}")]
    Malformed(String),
    /// A session key that is not `telegram:<chat>[:topic:<t>]`.
    #[error("not a Telegram session key: {0:?} (expected telegram:<chat> or telegram:<chat>:topic:<thread>)")]
    SessionKey(String),
    /// A webhook secret Telegram would refuse (1–256 of `A-Z a-z 0-9 _ -`).
    #[error("invalid webhook secret token: {0}")]
    WebhookSecret(&'static str),
}

/// The `result` of a Bot API answer with HTTP `status` and `body`, or the
/// classified error. Telegram's `error_code` wins over the HTTP status when
/// both are present (they agree in practice); a body that is not the Bot
/// API's JSON (a proxy's error page) is [`ApiError::Other`].
pub fn api_result(status: u16, body: &[u8]) -> Result<Value, ApiError> {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let Some(answer) = parsed.filter(|v| v.get("ok").is_some_and(Value::is_boolean)) else {
        let description = if (200..300).contains(&status) {
            "the answer is not the Bot API's JSON".to_string()
        } else {
            let text = String::from_utf8_lossy(body);
            let text: String = text.chars().take(200).collect();
            if text.trim().is_empty() { "empty answer".to_string() } else { text }
        };
        return Err(ApiError::Other { status, description });
    };
    if answer["ok"] == Value::Bool(true) && (200..300).contains(&status) {
        return Ok(answer.get("result").cloned().unwrap_or(Value::Null));
    }
    let code = answer.get("error_code").and_then(Value::as_u64).and_then(|c| u16::try_from(c).ok()).unwrap_or(status);
    let description = answer.get("description").and_then(Value::as_str).unwrap_or("no description").to_string();
    let lower = description.to_ascii_lowercase();
    Err(match code {
        401 => ApiError::Unauthorized,
        409 if lower.contains("webhook") => ApiError::WebhookActive,
        409 => ApiError::PollerConflict { description },
        429 => {
            let retry_after = answer
                .pointer("/parameters/retry_after")
                .and_then(Value::as_u64)
                .or_else(|| lower.rsplit("retry after ").next().and_then(|n| n.trim().parse().ok()))
                .unwrap_or(1);
            ApiError::RateLimited { retry_after }
        }
        400 if lower.contains("message is not modified") => ApiError::NotModified,
        400 if lower.contains("can't parse entities") => ApiError::BadMarkup { description },
        _ => ApiError::Other { status: code, description },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn classify(status: u16, body: Value) -> Result<Value, ApiError> {
        api_result(status, body.to_string().as_bytes())
    }

    #[test]
    fn ok_answers_give_their_result() {
        assert_eq!(classify(200, json!({"ok": true, "result": [1]})), Ok(json!([1])));
        assert_eq!(classify(200, json!({"ok": true, "result": true})), Ok(json!(true)));
    }

    #[test]
    fn unauthorized_and_conflicts_stop_the_channel_with_a_reason() {
        let e = classify(401, json!({"ok": false, "error_code": 401, "description": "Unauthorized"})).unwrap_err();
        assert_eq!(e, ApiError::Unauthorized);
        let Action::Stop { reason } = e.action() else { panic!("{e:?} should stop") };
        assert!(reason.contains("token"), "{reason}");

        let poller = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running";
        let e = classify(409, json!({"ok": false, "error_code": 409, "description": poller})).unwrap_err();
        assert!(matches!(e, ApiError::PollerConflict { .. }));
        let Action::Stop { reason } = e.action() else { panic!("409 should stop") };
        assert!(reason.contains("another bot instance"), "{reason}");

        let webhook = "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first";
        let e = classify(409, json!({"ok": false, "error_code": 409, "description": webhook})).unwrap_err();
        assert_eq!(e, ApiError::WebhookActive);
        assert!(e.is_fatal());
    }

    #[test]
    fn too_many_requests_waits_retry_after() {
        let body = json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 17",
            "parameters": {"retry_after": 17}});
        assert_eq!(classify(429, body).unwrap_err().action(), Action::RetryAfter { seconds: 17 });
        // Without parameters, the number in the description.
        let body = json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 5"});
        assert_eq!(classify(429, body).unwrap_err(), ApiError::RateLimited { retry_after: 5 });
    }

    #[test]
    fn not_modified_is_ignored_and_bad_markup_resent_plain() {
        let body = json!({"ok": false, "error_code": 400, "description": "Bad Request: message is not modified: specified new message content and reply markup of the specified message are exactly the same as a current content and reply markup of the message"});
        assert_eq!(classify(400, body).unwrap_err().action(), Action::Ignore);
        let body = json!({"ok": false, "error_code": 400, "description": "Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 3"});
        assert_eq!(classify(400, body).unwrap_err().action(), Action::ResendPlain);
    }

    #[test]
    fn everything_else_is_retried() {
        let e = classify(500, json!({"ok": false, "error_code": 500, "description": "Internal Server Error"})).unwrap_err();
        assert_eq!((e.action(), e.is_fatal()), (Action::Retry, false));
        let e = classify(400, json!({"ok": false, "error_code": 400, "description": "Bad Request: chat not found"})).unwrap_err();
        assert_eq!(e, ApiError::Other { status: 400, description: "Bad Request: chat not found".into() });
        // A proxy's HTML page, an empty body, a 200 that is not the API's JSON.
        let e = api_result(502, b"<html>Bad Gateway</html>").unwrap_err();
        assert_eq!(e, ApiError::Other { status: 502, description: "<html>Bad Gateway</html>".into() });
        assert_eq!(api_result(504, b"").unwrap_err().action(), Action::Retry);
        assert!(matches!(api_result(200, b"[1,2]"), Err(ApiError::Other { status: 200, .. })));
    }
}
