//! The Bot API requests the adapter asks the host to run.
//!
//! Why requests are values: the component owns no transport (see
//! `CHANNELS.md`). It describes a request — method, URL, headers, body —
//! and the host performs it outside any instance, long polls included. The
//! token never enters the sandbox: every URL carries [`TOKEN_PLACEHOLDER`],
//! which the host substitutes only for the audience host the manifest
//! declares (`api.telegram.org`, or the configured `api_base`).
//!
//! Bodies are JSON (`application/json`), which the Bot API accepts for every
//! method; `getUpdates` is a GET with a query string, so a proxy log shows
//! the offset. Replies use `reply_parameters` with
//! `allow_sending_without_reply`, so a reply to a message deleted meanwhile
//! is still delivered instead of failing with 400.

use serde_json::{Value, json};

use crate::error::TelegramError;
use crate::render::OutgoingText;
use crate::update::Conversation;

/// Where the host puts the bot token.
pub const TOKEN_PLACEHOLDER: &str = "{{secret:bot_token}}";

/// The public Bot API.
pub const DEFAULT_API_BASE: &str = "https://api.telegram.org";

/// The update kinds the adapter asks for.
pub const ALLOWED_UPDATES: &[&str] = &["message", "edited_message", "channel_post", "edited_channel_post"];

/// Seconds a `getUpdates` long poll waits (the host's HTTP timeout must be
/// longer).
pub const POLL_TIMEOUT_SECS: u32 = 50;

/// An HTTP method.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpMethod {
    /// GET.
    Get,
    /// POST.
    Post,
}

/// A request for the host to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// GET or POST.
    pub method: HttpMethod,
    /// The URL, with [`TOKEN_PLACEHOLDER`] where the token goes.
    pub url: String,
    /// Headers (name, value).
    pub headers: Vec<(String, String)>,
    /// The body (JSON), if any.
    pub body: Option<String>,
}

impl HttpRequest {
    fn post(api_base: &str, method: &str, body: Value) -> HttpRequest {
        HttpRequest {
            method: HttpMethod::Post,
            url: method_url(api_base, method),
            headers: vec![("content-type".into(), "application/json".into())],
            body: Some(body.to_string()),
        }
    }

    /// The body as JSON (for tests and logs).
    pub fn json(&self) -> Option<Value> {
        self.body.as_deref().and_then(|b| serde_json::from_str(b).ok())
    }
}

/// `{api_base}/bot{{secret:bot_token}}/{method}`.
pub fn method_url(api_base: &str, method: &str) -> String {
    format!("{}/bot{TOKEN_PLACEHOLDER}/{method}", api_base.trim_end_matches('/'))
}

/// The long poll: `GET {api_base}/bot{{secret:bot_token}}/getUpdates?offset=…&timeout=…&allowed_updates=…`
/// (no `offset` before the first update was seen).
pub fn get_updates(api_base: &str, offset: Option<i64>, timeout_secs: u32, allowed_updates: &[&str]) -> HttpRequest {
    let mut query = Vec::new();
    if let Some(offset) = offset {
        query.push(format!("offset={offset}"));
    }
    query.push(format!("timeout={timeout_secs}"));
    if !allowed_updates.is_empty() {
        query.push(format!("allowed_updates={}", encode_component(&json!(allowed_updates).to_string())));
    }
    HttpRequest {
        method: HttpMethod::Get,
        url: format!("{}?{}", method_url(api_base, "getUpdates"), query.join("&")),
        headers: Vec::new(),
        body: None,
    }
}

/// The body of `sendMessage` for one part, into the chat (and topic) of
/// `to`, replying to `reply_to` when given.
pub fn send_message_body(to: &Conversation, part: &OutgoingText, reply_to: Option<i64>) -> Value {
    let mut body = json!({"chat_id": to.chat_id, "text": part.text});
    if let Some(mode) = part.parse_mode {
        body["parse_mode"] = json!(mode.as_str());
    }
    if let Some(topic) = to.topic {
        body["message_thread_id"] = json!(topic);
    }
    if let Some(message_id) = reply_to {
        body["reply_parameters"] = json!({"message_id": message_id, "allow_sending_without_reply": true});
    }
    body
}

/// `sendMessage` for one part.
pub fn send_message(api_base: &str, to: &Conversation, part: &OutgoingText, reply_to: Option<i64>) -> HttpRequest {
    HttpRequest::post(api_base, "sendMessage", send_message_body(to, part, reply_to))
}

/// The body of `editMessageText` (streaming: the reply so far).
pub fn edit_message_text_body(chat_id: i64, message_id: i64, part: &OutgoingText) -> Value {
    let mut body = json!({"chat_id": chat_id, "message_id": message_id, "text": part.text});
    if let Some(mode) = part.parse_mode {
        body["parse_mode"] = json!(mode.as_str());
    }
    body
}

/// `editMessageText`.
pub fn edit_message_text(api_base: &str, chat_id: i64, message_id: i64, part: &OutgoingText) -> HttpRequest {
    HttpRequest::post(api_base, "editMessageText", edit_message_text_body(chat_id, message_id, part))
}

/// A chat action; Telegram shows it for at most 5 s, so the host refreshes
/// it about every 4 s until the reply lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatAction {
    /// "typing…"
    Typing,
    /// "sending photo…"
    UploadPhoto,
    /// "sending file…"
    UploadDocument,
}

impl ChatAction {
    /// The `action` value.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatAction::Typing => "typing",
            ChatAction::UploadPhoto => "upload_photo",
            ChatAction::UploadDocument => "upload_document",
        }
    }
}

/// The body of `sendChatAction`.
pub fn send_chat_action_body(to: &Conversation, action: ChatAction) -> Value {
    let mut body = json!({"chat_id": to.chat_id, "action": action.as_str()});
    if let Some(topic) = to.topic {
        body["message_thread_id"] = json!(topic);
    }
    body
}

/// `sendChatAction`.
pub fn send_chat_action(api_base: &str, to: &Conversation, action: ChatAction) -> HttpRequest {
    HttpRequest::post(api_base, "sendChatAction", send_chat_action_body(to, action))
}

/// `sendPhoto` or `sendDocument` of a file Telegram already has (by file
/// id) or can fetch (an HTTPS URL). Uploading bytes is the host's: it
/// builds the multipart body from the media store.
pub fn send_media(api_base: &str, to: &Conversation, photo: bool, file: &str, caption: Option<&OutgoingText>) -> HttpRequest {
    let (method, field) = if photo { ("sendPhoto", "photo") } else { ("sendDocument", "document") };
    let mut body = json!({"chat_id": to.chat_id, field: file});
    if let Some(topic) = to.topic {
        body["message_thread_id"] = json!(topic);
    }
    if let Some(caption) = caption {
        body["caption"] = json!(caption.text);
        if let Some(mode) = caption.parse_mode {
            body["parse_mode"] = json!(mode.as_str());
        }
    }
    HttpRequest::post(api_base, method, body)
}

/// Largest photo `sendPhoto` takes; a bigger picture goes as a document.
pub const MAX_PHOTO_BYTES: u64 = 10 * 1024 * 1024;

/// The upload of a workspace file, for the host to run with the bytes
/// streamed in (`upload-request`): the method URL, the text parameters in
/// order, and the name of the file's part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadPlan {
    /// `sendPhoto` or `sendDocument`, with the token placeholder.
    pub url: String,
    /// `chat_id`, then `message_thread_id` in a topic.
    pub fields: Vec<(String, String)>,
    /// `photo` or `document`.
    pub file_field: &'static str,
    /// Milliseconds the host may take for it: 30 s, plus 1 s per 256 KiB
    /// (a slow uplink), at most 10 minutes.
    pub timeout_ms: u32,
}

/// How to upload a file of type `mime` and `size` bytes: as a photo when
/// Telegram shows it inline (JPEG, PNG or WebP up to [`MAX_PHOTO_BYTES`]),
/// else as a document, which keeps the file as it is.
pub fn upload(api_base: &str, to: &Conversation, mime: &str, size: u64) -> UploadPlan {
    let photo = matches!(mime, "image/jpeg" | "image/png" | "image/webp") && size <= MAX_PHOTO_BYTES;
    let (method, file_field) = if photo { ("sendPhoto", "photo") } else { ("sendDocument", "document") };
    let mut fields = vec![("chat_id".to_string(), to.chat_id.to_string())];
    if let Some(topic) = to.topic {
        fields.push(("message_thread_id".into(), topic.to_string()));
    }
    let timeout_ms = (30_000 + size / (256 * 1024) * 1000).min(600_000) as u32;
    UploadPlan { url: method_url(api_base, method), fields, file_field, timeout_ms }
}

/// `getFile`: its result's `file_path` is read by [`file_path`].
pub fn get_file(api_base: &str, file_id: &str) -> HttpRequest {
    HttpRequest::post(api_base, "getFile", json!({"file_id": file_id}))
}

/// The `file_path` of a `getFile` result.
pub fn file_path(result: &Value) -> Result<String, TelegramError> {
    result
        .get("file_path")
        .and_then(Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| TelegramError::Malformed("getFile result without file_path (the file may be over 20 MB)".into()))
}

/// The download of a file: `GET {api_base}/file/bot{{secret:bot_token}}/{file_path}`.
pub fn download_file(api_base: &str, file_path: &str) -> HttpRequest {
    HttpRequest {
        method: HttpMethod::Get,
        url: format!("{}/file/bot{TOKEN_PLACEHOLDER}/{}", api_base.trim_end_matches('/'), file_path.trim_start_matches('/')),
        headers: Vec::new(),
        body: None,
    }
}

/// The `message_id` of a `sendMessage` result (the stream handle, and the
/// vendor id the host records).
pub fn message_id(result: &Value) -> Result<i64, TelegramError> {
    result.get("message_id").and_then(Value::as_i64).ok_or_else(|| TelegramError::Malformed("no message_id in the sent message".into()))
}

/// `setWebhook` to `url`, with the secret Telegram will send in
/// `X-Telegram-Bot-Api-Secret-Token` (checked by the host before the
/// adapter sees a byte). The secret must be 1–256 characters of
/// `A-Z a-z 0-9 _ -`, or Telegram refuses it.
pub fn set_webhook(api_base: &str, url: &str, secret_token: &str, allowed_updates: &[&str]) -> Result<HttpRequest, TelegramError> {
    if secret_token.is_empty() || secret_token.len() > 256 {
        return Err(TelegramError::WebhookSecret("it must be 1 to 256 characters long"));
    }
    if !secret_token.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        return Err(TelegramError::WebhookSecret("only A-Z, a-z, 0-9, _ and - are allowed"));
    }
    let body = json!({"url": url, "secret_token": secret_token, "allowed_updates": allowed_updates});
    Ok(HttpRequest::post(api_base, "setWebhook", body))
}

/// `deleteWebhook`: sent before polling, since `getUpdates` is refused (409)
/// while a webhook is set. Pending updates are kept unless `drop_pending`.
pub fn delete_webhook(api_base: &str, drop_pending: bool) -> HttpRequest {
    HttpRequest::post(api_base, "deleteWebhook", json!({"drop_pending_updates": drop_pending}))
}

/// `getMe`: the bot's username, for mention and command detection.
pub fn get_me(api_base: &str) -> HttpRequest {
    HttpRequest::post(api_base, "getMe", json!({}))
}

/// The `username` of a `getMe` result.
pub fn bot_username(result: &Value) -> Result<String, TelegramError> {
    result.get("username").and_then(Value::as_str).map(str::to_string).ok_or_else(|| TelegramError::Malformed("getMe result without username".into()))
}

/// Percent-encodes a query component (everything but RFC 3986 unreserved).
fn encode_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn pictures_go_as_photos_and_everything_else_as_documents() {
        let topic = Conversation { chat_id: -100, topic: Some(7) };
        let png = super::upload(DEFAULT_API_BASE, &topic, "image/png", 1000);
        assert_eq!(png.url, "https://api.telegram.org/bot{{secret:bot_token}}/sendPhoto");
        assert_eq!(png.file_field, "photo");
        assert_eq!(png.fields, [("chat_id".to_string(), "-100".to_string()), ("message_thread_id".into(), "7".into())]);
        assert_eq!(png.timeout_ms, 30_000);
        let big = super::upload(DEFAULT_API_BASE, &topic, "image/jpeg", MAX_PHOTO_BYTES + 1);
        assert_eq!((big.file_field, big.url.ends_with("/sendDocument")), ("document", true), "too big to be a photo");
        let pdf = super::upload(DEFAULT_API_BASE, &Conversation { chat_id: 5, topic: None }, "application/pdf", 50 << 20);
        assert_eq!((pdf.file_field, pdf.fields.len(), pdf.timeout_ms), ("document", 1, 230_000));
        assert_eq!(super::upload(DEFAULT_API_BASE, &topic, "image/gif", 10).file_field, "document");
    }

    use super::*;
    use crate::render::ParseMode;

    const BASE: &str = "https://api.telegram.org";

    #[test]
    fn the_long_poll_url_carries_the_placeholder_not_a_token() {
        let request = get_updates(BASE, Some(101), 50, &["message", "edited_message"]);
        assert_eq!(request.method, HttpMethod::Get);
        assert_eq!(
            request.url,
            "https://api.telegram.org/bot{{secret:bot_token}}/getUpdates?offset=101&timeout=50&allowed_updates=%5B%22message%22%2C%22edited_message%22%5D"
        );
        assert_eq!(request.body, None);
        let first = get_updates("http://127.0.0.1:9/", None, 0, &[]);
        assert_eq!(first.url, "http://127.0.0.1:9/bot{{secret:bot_token}}/getUpdates?timeout=0");
    }

    #[test]
    fn send_message_bodies() {
        let html = OutgoingText { text: "<b>hi</b>".into(), parse_mode: Some(ParseMode::Html) };
        let topic = Conversation { chat_id: -100, topic: Some(7) };
        assert_eq!(
            send_message_body(&topic, &html, Some(55)),
            json!({"chat_id": -100, "text": "<b>hi</b>", "parse_mode": "HTML", "message_thread_id": 7,
                "reply_parameters": {"message_id": 55, "allow_sending_without_reply": true}})
        );
        let plain = OutgoingText { text: "hi".into(), parse_mode: None };
        let request = send_message(BASE, &Conversation { chat_id: 42, topic: None }, &plain, None);
        assert_eq!(request.url, "https://api.telegram.org/bot{{secret:bot_token}}/sendMessage");
        assert_eq!(request.method, HttpMethod::Post);
        assert_eq!(request.headers, [("content-type".to_string(), "application/json".to_string())]);
        assert_eq!(request.json(), Some(json!({"chat_id": 42, "text": "hi"})));
    }

    #[test]
    fn edit_and_chat_action_bodies() {
        let html = OutgoingText { text: "so far".into(), parse_mode: None };
        assert_eq!(edit_message_text_body(1, 2, &html), json!({"chat_id": 1, "message_id": 2, "text": "so far"}));
        let topic = Conversation { chat_id: -3, topic: Some(4) };
        assert_eq!(send_chat_action_body(&topic, ChatAction::Typing), json!({"chat_id": -3, "action": "typing", "message_thread_id": 4}));
        assert_eq!(send_chat_action(BASE, &topic, ChatAction::UploadDocument).json().unwrap()["action"], "upload_document");
    }

    #[test]
    fn files_and_media() {
        assert_eq!(get_file(BASE, "abc").json(), Some(json!({"file_id": "abc"})));
        assert_eq!(file_path(&json!({"file_id": "abc", "file_path": "photos/1.jpg"})).unwrap(), "photos/1.jpg");
        assert!(file_path(&json!({"file_id": "abc"})).is_err());
        assert_eq!(download_file(BASE, "photos/1.jpg").url, "https://api.telegram.org/file/bot{{secret:bot_token}}/photos/1.jpg");
        let caption = OutgoingText { text: "<i>c</i>".into(), parse_mode: Some(ParseMode::Html) };
        let request = send_media(BASE, &Conversation { chat_id: 9, topic: None }, true, "file-1", Some(&caption));
        assert!(request.url.ends_with("/sendPhoto"));
        assert_eq!(request.json(), Some(json!({"chat_id": 9, "photo": "file-1", "caption": "<i>c</i>", "parse_mode": "HTML"})));
        assert!(send_media(BASE, &Conversation { chat_id: 9, topic: None }, false, "f", None).url.ends_with("/sendDocument"));
    }

    #[test]
    fn webhook_requests() {
        let request = set_webhook(BASE, "https://me.example/tg", "s3cret_-X", &["message"]).unwrap();
        assert!(request.url.ends_with("/setWebhook"));
        assert_eq!(request.json(), Some(json!({"url": "https://me.example/tg", "secret_token": "s3cret_-X", "allowed_updates": ["message"]})));
        assert!(matches!(set_webhook(BASE, "https://x", "", &[]), Err(TelegramError::WebhookSecret(_))));
        assert!(matches!(set_webhook(BASE, "https://x", "has space", &[]), Err(TelegramError::WebhookSecret(_))));
        assert!(set_webhook(BASE, "https://x", &"a".repeat(257), &[]).is_err());
        assert_eq!(delete_webhook(BASE, false).json(), Some(json!({"drop_pending_updates": false})));
    }

    #[test]
    fn results() {
        assert_eq!(message_id(&json!({"message_id": 12})).unwrap(), 12);
        assert!(message_id(&json!(true)).is_err());
        assert_eq!(bot_username(&json!({"id": 1, "is_bot": true, "username": "b"})).unwrap(), "b");
        assert!(get_me(BASE).url.ends_with("/getMe"));
    }
}
