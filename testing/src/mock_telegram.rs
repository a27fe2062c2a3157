//! [`MockTelegram`]: a scripted Telegram Bot API server on 127.0.0.1, so the
//! Telegram adapter and the channel host can be tested offline.
//!
//! Why a mock of this size: the failures other hosts shipped (see
//! `../shared/spec/CHANNELS.md`) were all in the protocol's corners — a lost
//! `getUpdates` offset replaying messages, two pollers on one token, a
//! webhook left set, `retry_after` ignored, a reply over 4096 characters. The
//! mock implements exactly those corners the way the Bot API documents them,
//! so a test fails for the reason production would.
//!
//! Like [`MockLlm`](super::MockLlm) it runs on its own thread with its own
//! single-threaded tokio runtime (it keeps serving while the test's runtime
//! is busy or paused, and a held long poll ends when the mock is dropped),
//! binds `127.0.0.1:0`, and logs every request.
//!
//! Served: `GET|POST /bot<token>/<method>` with parameters in the query
//! string, a JSON body, a form body or `multipart/form-data`, and
//! `GET /file/bot<token>/<path>` downloads. Behaviour follows the Bot API:
//! - `getUpdates(offset, timeout, limit, allowed_updates)` holds the request
//!   until an update `≥ offset` exists or `timeout` seconds pass; updates
//!   below `offset` are confirmed (dropped for good); a second `getUpdates`
//!   while one is held terminates the held one with 409 Conflict ("terminated
//!   by other getUpdates request", as Telegram answers the older request);
//!   while a webhook is set, `getUpdates` gets 409 too.
//! - `sendMessage` refuses more than 4096 characters with 400 "message is too
//!   long", counted in UTF-16 code units after entity parsing (with
//!   `parse_mode=HTML` the tags are stripped and entities decoded first, and
//!   malformed HTML gets 400 "can't parse entities").
//! - `editMessageText` refuses an unknown message and an unchanged text (400
//!   "message is not modified"), as Telegram does.
//! - a wrong token gets 401 Unauthorized; [`MockTelegram::fail_next`] scripts
//!   any error, 429 with `parameters.retry_after` included.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{Map, Value, json};
use tokio::sync::{oneshot, watch};

/// The token [`MockTelegram::start`] accepts.
pub const MOCK_BOT_TOKEN: &str = "123456789:AAMockTelegramTokenForChitinTests";

/// The bot's username under [`MockTelegram::start`] (without `@`).
pub const MOCK_BOT_USERNAME: &str = "chitin_test_bot";

/// The bot's user id (the number before the colon of the token).
pub const MOCK_BOT_ID: i64 = 123_456_789;

/// Telegram's limit for a message text, in UTF-16 code units after entity
/// parsing.
pub const MAX_TEXT_UTF16: usize = 4096;

/// Telegram's limit for a media caption, counted the same way.
pub const MAX_CAPTION_UTF16: usize = 1024;

/// The `date` of every message the mock creates (fixed, for stable output).
const DATE: i64 = 1_700_000_000;

/// What Telegram says to the older of two concurrent `getUpdates`.
pub const CONFLICT_POLLER: &str = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running";

/// What Telegram says to `getUpdates` while a webhook is set.
pub const CONFLICT_WEBHOOK: &str = "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first";

/// What `editMessageText` with the current text gets.
pub const NOT_MODIFIED: &str = "Bad Request: message is not modified: specified new message content and reply markup of the specified message are exactly the same as a current content and reply markup of the message";

/// Errors of the mock's own client side ([`MockTelegram::deliver_webhook`]).
#[derive(Debug, thiserror::Error)]
pub enum MockTelegramError {
    /// `deliver_webhook` before any `setWebhook`.
    #[error("no webhook is set (call setWebhook first)")]
    NoWebhook,
    /// The POST to the webhook URL failed.
    #[error("webhook delivery to {url} failed: {source}")]
    Delivery {
        /// The webhook URL.
        url: String,
        /// The HTTP error.
        #[source]
        source: reqwest::Error,
    },
}

/// One request the mock received, in arrival order.
#[derive(Debug, Clone)]
pub struct TelegramRequest {
    /// The Bot API method as sent (`getUpdates`), or `file` for a download.
    pub method: String,
    /// `GET` or `POST`.
    pub http_method: String,
    /// Query, JSON, form and multipart text parameters merged (query and
    /// form values are JSON strings, as sent).
    pub params: Map<String, Value>,
    /// Files of a multipart body.
    pub uploads: Vec<Upload>,
    /// Whether the token was right.
    pub authorized: bool,
    /// When it arrived.
    pub at: Instant,
}

/// A file part of a multipart request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    /// The form field (`photo`, `document`).
    pub field: String,
    /// The file name the client gave.
    pub filename: Option<String>,
    /// The content.
    pub bytes: Vec<u8>,
}

/// A text message the bot sent (`sendMessage`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentMessage {
    /// The id the mock gave it.
    pub message_id: i64,
    /// Where it went.
    pub chat_id: i64,
    /// The text as sent (HTML markup included).
    pub text: String,
    /// `HTML`, `MarkdownV2`, … when given.
    pub parse_mode: Option<String>,
    /// The forum topic.
    pub message_thread_id: Option<i64>,
    /// The message it replies to.
    pub reply_to_message_id: Option<i64>,
}

/// An `editMessageText` the mock accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    /// The chat.
    pub chat_id: i64,
    /// The edited message.
    pub message_id: i64,
    /// The new text as sent.
    pub text: String,
    /// The parse mode when given.
    pub parse_mode: Option<String>,
    /// When it was accepted (edit throttling is asserted on these).
    pub at: Instant,
}

/// A `sendChatAction` the mock accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatAction {
    /// The chat.
    pub chat_id: i64,
    /// `typing`, `upload_photo`, …
    pub action: String,
    /// The forum topic.
    pub message_thread_id: Option<i64>,
}

/// A `sendPhoto` or `sendDocument` the mock accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentMedia {
    /// `photo` or `document`.
    pub kind: String,
    /// The id the mock gave the message.
    pub message_id: i64,
    /// The chat.
    pub chat_id: i64,
    /// The file's id: the one sent, or the new one of an upload.
    pub file_id: String,
    /// The uploaded file, when it was uploaded rather than named by id.
    pub upload: Option<Upload>,
    /// The caption.
    pub caption: Option<String>,
}

/// The webhook set by `setWebhook`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Webhook {
    /// Where updates go.
    pub url: String,
    /// The `X-Telegram-Bot-Api-Secret-Token` to send with them.
    pub secret_token: Option<String>,
}

/// An incoming message to script with [`MockTelegram::push`], rendered as
/// the Bot API's `Update` (entities for commands and mentions included, with
/// UTF-16 offsets as Telegram computes them).
#[derive(Debug, Clone, PartialEq)]
pub struct MockUpdate {
    chat_id: i64,
    from_id: i64,
    username: Option<String>,
    text: Option<String>,
    caption: Option<String>,
    topic: Option<i64>,
    reply_to: Option<ReplyTo>,
    photo: Option<String>,
    document: Option<(String, String)>,
    edited: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum ReplyTo {
    Bot(i64),
    User(i64, i64),
}

impl MockUpdate {
    fn new(chat_id: i64, from_id: i64) -> MockUpdate {
        MockUpdate {
            chat_id,
            from_id,
            username: None,
            text: None,
            caption: None,
            topic: None,
            reply_to: None,
            photo: None,
            document: None,
            edited: false,
        }
    }

    /// A text message in `chat_id` (negative: a supergroup) from `from_id`.
    pub fn text(chat_id: i64, from_id: i64, text: impl Into<String>) -> MockUpdate {
        MockUpdate { text: Some(text.into()), ..MockUpdate::new(chat_id, from_id) }
    }

    /// A photo (one size, with this file id).
    pub fn photo(chat_id: i64, from_id: i64, file_id: impl Into<String>) -> MockUpdate {
        MockUpdate { photo: Some(file_id.into()), ..MockUpdate::new(chat_id, from_id) }
    }

    /// A document with this file id and name.
    pub fn document(chat_id: i64, from_id: i64, file_id: impl Into<String>, file_name: impl Into<String>) -> MockUpdate {
        MockUpdate { document: Some((file_id.into(), file_name.into())), ..MockUpdate::new(chat_id, from_id) }
    }

    /// The media's caption.
    pub fn caption(mut self, caption: impl Into<String>) -> MockUpdate {
        self.caption = Some(caption.into());
        self
    }

    /// Sent in forum topic `thread_id` (the chat becomes a forum).
    pub fn topic(mut self, thread_id: i64) -> MockUpdate {
        self.topic = Some(thread_id);
        self
    }

    /// The sender's username.
    pub fn username(mut self, username: impl Into<String>) -> MockUpdate {
        self.username = Some(username.into());
        self
    }

    /// A reply to the bot's message `message_id`.
    pub fn reply_to_bot(mut self, message_id: i64) -> MockUpdate {
        self.reply_to = Some(ReplyTo::Bot(message_id));
        self
    }

    /// A reply to `message_id`, sent by user `from_id`.
    pub fn reply_to_user(mut self, message_id: i64, from_id: i64) -> MockUpdate {
        self.reply_to = Some(ReplyTo::User(message_id, from_id));
        self
    }

    /// An `edited_message` instead of a `message`.
    pub fn edited(mut self) -> MockUpdate {
        self.edited = true;
        self
    }

    fn render(&self, bot: &Value, message_id: i64) -> Value {
        let chat = if self.chat_id < 0 {
            let mut chat = json!({"id": self.chat_id, "type": "supergroup", "title": "Mock group"});
            if self.topic.is_some() {
                chat["is_forum"] = json!(true);
            }
            chat
        } else {
            json!({"id": self.chat_id, "type": "private", "first_name": "Mock"})
        };
        let mut from = json!({"id": self.from_id, "is_bot": false, "first_name": format!("User{}", self.from_id)});
        if let Some(username) = &self.username {
            from["username"] = json!(username);
        }
        let mut message = json!({"message_id": message_id, "date": DATE, "chat": chat, "from": from});
        if let Some(text) = &self.text {
            message["text"] = json!(text);
            let entities = entities(text);
            if !entities.is_empty() {
                message["entities"] = Value::Array(entities);
            }
        }
        if let Some(caption) = &self.caption {
            message["caption"] = json!(caption);
            let entities = entities(caption);
            if !entities.is_empty() {
                message["caption_entities"] = Value::Array(entities);
            }
        }
        if let Some(thread) = self.topic {
            message["message_thread_id"] = json!(thread);
            message["is_topic_message"] = json!(true);
        }
        match &self.reply_to {
            Some(ReplyTo::Bot(id)) => {
                message["reply_to_message"] =
                    json!({"message_id": id, "date": DATE, "chat": message["chat"].clone(), "from": bot, "text": "…"});
            }
            Some(ReplyTo::User(id, user)) => {
                message["reply_to_message"] = json!({"message_id": id, "date": DATE, "chat": message["chat"].clone(),
                    "from": {"id": user, "is_bot": false, "first_name": format!("User{user}")}, "text": "…"});
            }
            None => {}
        }
        if let Some(file_id) = &self.photo {
            message["photo"] = json!([{"file_id": file_id, "file_unique_id": format!("u-{file_id}"),
                "width": 640, "height": 480, "file_size": 1000}]);
        }
        if let Some((file_id, name)) = &self.document {
            message["document"] = json!({"file_id": file_id, "file_unique_id": format!("u-{file_id}"),
                "file_name": name, "mime_type": "application/octet-stream"});
        }
        let kind = if self.edited { "edited_message" } else { "message" };
        json!({ kind: message })
    }
}

/// `bot_command` (at offset 0) and `mention` entities, offsets and lengths
/// in UTF-16 code units, as Telegram sends them.
fn entities(text: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut offset = 0usize;
    let mut first = true;
    for piece in text.split_inclusive(char::is_whitespace) {
        let word = piece.trim_end_matches(char::is_whitespace);
        let name_len = |rest: &str| rest.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(rest.len());
        if first && word.len() > 1 && word.starts_with('/') {
            out.push(json!({"type": "bot_command", "offset": offset, "length": word.encode_utf16().count()}));
        } else if let Some(rest) = word.strip_prefix('@') {
            let len = name_len(rest);
            if len > 0 {
                out.push(json!({"type": "mention", "offset": offset, "length": 1 + rest[..len].encode_utf16().count()}));
            }
        }
        first = false;
        offset += piece.encode_utf16().count();
    }
    out
}

#[derive(Debug, Clone)]
struct Failure {
    status: u16,
    description: String,
    retry_after: Option<u64>,
}

#[derive(Debug, Clone)]
struct MockFile {
    path: String,
    bytes: Vec<u8>,
}

struct State {
    token: String,
    username: String,
    /// Unconfirmed updates, by increasing `update_id`.
    updates: VecDeque<Value>,
    next_update_id: i64,
    next_message_id: i64,
    next_file: u64,
    next_poll: u64,
    /// The `getUpdates` being held, and how to terminate it.
    held: Option<(u64, oneshot::Sender<()>)>,
    webhook: Option<Webhook>,
    /// (public origin, where it is really served): see `route_public_url`.
    tunnel: Option<(String, String)>,
    failures: HashMap<String, VecDeque<Failure>>,
    /// Methods (lowercase) whose calls are logged and never answered.
    hung: std::collections::HashSet<String>,
    log: Vec<TelegramRequest>,
    sent: Vec<SentMessage>,
    /// Current text of every message the bot sent, by (chat, message).
    texts: HashMap<(i64, i64), String>,
    edits: Vec<Edit>,
    actions: Vec<ChatAction>,
    media: Vec<SentMedia>,
    files: HashMap<String, MockFile>,
}

struct Shared {
    state: Mutex<State>,
    /// Bumped after every new update: wakes held polls.
    updates: watch::Sender<u64>,
    /// Whether a `getUpdates` is held.
    polling: watch::Sender<bool>,
    /// How many requests are logged.
    logged: watch::Sender<usize>,
    /// Send each response's head and body in separate writes.
    split: std::sync::atomic::AtomicBool,
}

/// Locks, ignoring poisoning: a failed assertion must not wedge the mock.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    fn set_held(&self, state: &mut State, held: Option<(u64, oneshot::Sender<()>)>) {
        if let Some((_, terminate)) = std::mem::replace(&mut state.held, held) {
            let _ = terminate.send(());
        }
        let polling = state.held.is_some();
        self.polling.send_replace(polling);
    }
}

/// A running mock Bot API; dropping it stops the server.
pub struct MockTelegram {
    server: super::server::MockServer,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for MockTelegram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockTelegram").field("addr", &self.server.addr()).finish()
    }
}

impl MockTelegram {
    /// A mock for [`MOCK_BOT_TOKEN`] and [`MOCK_BOT_USERNAME`].
    ///
    /// # Panics
    /// If no local port can be bound or no thread started (test setup).
    pub fn start() -> MockTelegram {
        MockTelegram::with_token(MOCK_BOT_TOKEN, MOCK_BOT_USERNAME)
    }

    /// A mock that accepts `token` and calls its bot `username`.
    ///
    /// # Panics
    /// As [`MockTelegram::start`].
    pub fn with_token(token: &str, username: &str) -> MockTelegram {
        let state = State {
            token: token.to_string(),
            username: username.to_string(),
            updates: VecDeque::new(),
            next_update_id: 100_000,
            next_message_id: 1,
            next_file: 1,
            next_poll: 1,
            held: None,
            webhook: None,
            tunnel: None,
            failures: HashMap::new(),
            hung: std::collections::HashSet::new(),
            log: Vec::new(),
            sent: Vec::new(),
            texts: HashMap::new(),
            edits: Vec::new(),
            actions: Vec::new(),
            media: Vec::new(),
            files: HashMap::new(),
        };
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            updates: watch::channel(0).0,
            polling: watch::channel(false).0,
            logged: watch::channel(0).0,
            split: std::sync::atomic::AtomicBool::new(false),
        });
        let server_shared = shared.clone();
        let server = super::server::MockServer::start("MockTelegram", move |request| respond(server_shared.clone(), request));
        MockTelegram { server, shared }
    }

    /// From now on, sends every response's head and body in separate writes
    /// (as HTTP/2 servers do, in separate frames): a client that waits for
    /// the body before it drives the connection stalls.
    pub fn split_head_and_body(&self) {
        self.shared.split.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// The Bot API root to give an adapter as `api_base`:
    /// `http://127.0.0.1:PORT` (methods are `{api_base}/bot<token>/<method>`).
    pub fn api_base(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// The token the mock accepts.
    pub fn token(&self) -> String {
        lock(&self.shared.state).token.clone()
    }

    /// The bot's username (without `@`).
    pub fn username(&self) -> String {
        lock(&self.shared.state).username.clone()
    }

    /// Queues an update for `getUpdates` and wakes a held poll. `update` is
    /// a Bot API `Update` object; its `update_id` is assigned when missing
    /// (and must grow when given). Returns the `update_id`.
    pub fn push_update(&self, update: impl Into<Value>) -> i64 {
        let mut update = update.into();
        let id = {
            let mut state = lock(&self.shared.state);
            let id = assign_update_id(&mut state, &mut update);
            state.updates.push_back(update);
            id
        };
        self.shared.updates.send_modify(|version| *version += 1);
        id
    }

    /// Queues a scripted message (see [`MockUpdate`]) for `getUpdates`;
    /// returns its `update_id`.
    pub fn push(&self, update: MockUpdate) -> i64 {
        let rendered = self.render(&update);
        self.push_update(rendered)
    }

    fn render(&self, update: &MockUpdate) -> Value {
        let mut state = lock(&self.shared.state);
        let message_id = state.next_message_id;
        state.next_message_id += 1;
        let bot = bot_user(&state.username);
        update.render(&bot, message_id)
    }

    /// Registers a file that `getFile` and the download path serve; returns
    /// its file id (use it in [`MockUpdate::photo`] or `document`).
    pub fn add_file(&self, path: &str, bytes: impl Into<Vec<u8>>) -> String {
        let mut state = lock(&self.shared.state);
        let id = format!("file-{}", state.next_file);
        state.next_file += 1;
        state.files.insert(id.clone(), MockFile { path: path.to_string(), bytes: bytes.into() });
        id
    }

    /// The next call of `method` fails with `status`. The description is
    /// Telegram's for that status (`Too Many Requests: retry after N` for
    /// 429); `retry_after` goes into `parameters.retry_after`. Failures
    /// queue: two calls script the next two requests.
    pub fn fail_next(&self, method: &str, status: u16, retry_after: Option<u64>) {
        let description = match status {
            429 => format!("Too Many Requests: retry after {}", retry_after.unwrap_or(1)),
            400 => "Bad Request".to_string(),
            401 => "Unauthorized".to_string(),
            403 => "Forbidden: bot was blocked by the user".to_string(),
            404 => "Not Found".to_string(),
            409 => CONFLICT_POLLER.to_string(),
            502 => "Bad Gateway".to_string(),
            _ => "Internal Server Error".to_string(),
        };
        self.fail_next_with(method, status, &description, retry_after);
    }

    /// As [`fail_next`](Self::fail_next) with this exact description.
    pub fn fail_next_with(&self, method: &str, status: u16, description: &str, retry_after: Option<u64>) {
        let failure = Failure { status, description: description.to_string(), retry_after };
        lock(&self.shared.state).failures.entry(method.to_ascii_lowercase()).or_default().push_back(failure);
    }

    /// A fault switch: from now on every call of `method` is logged (see
    /// [`requests_for`](Self::requests_for)) and then never answered: the
    /// connection stays open with no response head, as a stalled server's.
    pub fn hang(&self, method: &str) {
        lock(&self.shared.state).hung.insert(method.to_ascii_lowercase());
    }

    /// Every request, in arrival order.
    pub fn requests(&self) -> Vec<TelegramRequest> {
        lock(&self.shared.state).log.clone()
    }

    /// The requests for `method` (case-insensitive), in order.
    pub fn requests_for(&self, method: &str) -> Vec<TelegramRequest> {
        lock(&self.shared.state).log.iter().filter(|r| r.method.eq_ignore_ascii_case(method)).cloned().collect()
    }

    /// The messages the bot sent, in order.
    pub fn sent_messages(&self) -> Vec<SentMessage> {
        lock(&self.shared.state).sent.clone()
    }

    /// The accepted edits, in order.
    pub fn edits(&self) -> Vec<Edit> {
        lock(&self.shared.state).edits.clone()
    }

    /// The accepted chat actions, in order.
    pub fn chat_actions(&self) -> Vec<ChatAction> {
        lock(&self.shared.state).actions.clone()
    }

    /// The photos and documents the bot sent, in order.
    pub fn sent_media(&self) -> Vec<SentMedia> {
        lock(&self.shared.state).media.clone()
    }

    /// Updates not yet confirmed by an offset past them.
    pub fn pending_updates(&self) -> Vec<Value> {
        lock(&self.shared.state).updates.iter().cloned().collect()
    }

    /// Webhook URLs under `public` (what the bot registered, e.g.
    /// `https://bot.example.test`) are delivered to `actual` instead (the
    /// gateway's real address, known only once it listens), as a reverse
    /// proxy or tunnel in front of the gateway would: a test need not pick
    /// the gateway's port before it starts.
    pub fn route_public_url(&self, public: &str, actual: &str) {
        lock(&self.shared.state).tunnel = Some((public.trim_end_matches('/').to_string(), actual.trim_end_matches('/').to_string()));
    }

    /// The webhook, when one is set.
    pub fn webhook(&self) -> Option<Webhook> {
        lock(&self.shared.state).webhook.clone()
    }

    /// Whether a `getUpdates` is being held right now.
    pub fn is_polling(&self) -> bool {
        *self.shared.polling.borrow()
    }

    /// Waits until a `getUpdates` is being held (no timeout: wrap it in one).
    pub async fn wait_for_poller(&self) {
        let mut polling = self.shared.polling.subscribe();
        let _ = polling.wait_for(|held| *held).await;
    }

    /// Waits until at least `count` requests for `method` have arrived.
    pub async fn wait_for_requests(&self, method: &str, count: usize) {
        let mut logged = self.shared.logged.subscribe();
        loop {
            if self.requests_for(method).len() >= count {
                return;
            }
            if logged.changed().await.is_err() {
                return;
            }
        }
    }

    /// POSTs `update` to the webhook URL with the secret set by
    /// `setWebhook` in `X-Telegram-Bot-Api-Secret-Token`; returns the HTTP
    /// status. The `update_id` is assigned when missing.
    pub async fn deliver_webhook(&self, update: impl Into<Value>) -> Result<u16, MockTelegramError> {
        let secret = self.webhook().ok_or(MockTelegramError::NoWebhook)?.secret_token;
        self.deliver_webhook_with_secret(update, secret.as_deref()).await
    }

    /// As [`deliver_webhook`](Self::deliver_webhook) with this secret header
    /// (`None`: no header), to test that a wrong one is refused.
    pub async fn deliver_webhook_with_secret(&self, update: impl Into<Value>, secret: Option<&str>) -> Result<u16, MockTelegramError> {
        let mut url = self.webhook().ok_or(MockTelegramError::NoWebhook)?.url;
        if let Some((public, actual)) = lock(&self.shared.state).tunnel.clone()
            && let Some(rest) = url.strip_prefix(&public)
        {
            url = format!("{actual}{rest}");
        }
        let mut update = update.into();
        assign_update_id(&mut lock(&self.shared.state), &mut update);
        let mut request = reqwest::Client::new().post(&url).json(&update);
        if let Some(secret) = secret {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
        }
        let response = request.send().await.map_err(|source| MockTelegramError::Delivery { url: url.clone(), source })?;
        Ok(response.status().as_u16())
    }

    /// A scripted message as the `Update` JSON the mock would send (for
    /// [`deliver_webhook`](Self::deliver_webhook)).
    pub fn update_json(&self, update: &MockUpdate) -> Value {
        self.render(update)
    }
}

fn assign_update_id(state: &mut State, update: &mut Value) -> i64 {
    let id = match update.get("update_id").and_then(Value::as_i64) {
        Some(id) => id,
        None => {
            let id = state.next_update_id;
            if let Some(object) = update.as_object_mut() {
                object.insert("update_id".into(), json!(id));
            }
            id
        }
    };
    state.next_update_id = state.next_update_id.max(id + 1);
    id
}

fn bot_user(username: &str) -> Value {
    json!({"id": MOCK_BOT_ID, "is_bot": true, "first_name": "Chitin Test Bot", "username": username})
}

type Body = UnsyncBoxBody<Bytes, Infallible>;

fn response(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Body> {
    let mut response = Response::new(Full::new(body.into()).boxed_unsync());
    *response.status_mut() = status;
    if let Ok(value) = content_type.parse() {
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
    }
    response
}

fn ok(result: Value) -> Response<Body> {
    response(StatusCode::OK, "application/json", json!({"ok": true, "result": result}).to_string())
}

fn ok_described(result: Value, description: &str) -> Response<Body> {
    let body = json!({"ok": true, "result": result, "description": description});
    response(StatusCode::OK, "application/json", body.to_string())
}

fn error(status: u16, description: &str, retry_after: Option<u64>) -> Response<Body> {
    let mut body = json!({"ok": false, "error_code": status, "description": description});
    if let Some(seconds) = retry_after {
        body["parameters"] = json!({"retry_after": seconds});
    }
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response(code, "application/json", body.to_string())
}

fn bad_request(description: &str) -> Response<Body> {
    error(400, &format!("Bad Request: {description}"), None)
}

async fn respond(shared: Arc<Shared>, request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let split = shared.split.load(std::sync::atomic::Ordering::SeqCst);
    let response = respond_whole(shared, request).await?;
    if split {
        return Ok(super::server::split_head_and_body(response).await);
    }
    Ok(response)
}

async fn respond_whole(shared: Arc<Shared>, request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    let http_method = request.method().to_string();
    let content_type = request
        .headers()
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = match request.into_body().collect().await {
        Ok(body) => body.to_bytes(),
        Err(_) => return Ok(bad_request("unreadable request body")),
    };
    if let Some(rest) = path.strip_prefix("/file/bot") {
        return Ok(download(&shared, rest, &http_method));
    }
    let Some((token, method)) = path.strip_prefix("/bot").and_then(|rest| rest.split_once('/')) else {
        return Ok(error(404, "Not Found", None));
    };
    let (params, uploads) = match parse_params(&query, &content_type, &body) {
        Ok(parsed) => parsed,
        Err(message) => return Ok(bad_request(&message)),
    };
    let method = method.trim_end_matches('/').to_string();
    let (authorized, failure, hung) = {
        let mut state = lock(&shared.state);
        let hung = state.hung.contains(&method.to_ascii_lowercase());
        let authorized = token == state.token;
        state.log.push(TelegramRequest {
            method: method.clone(),
            http_method,
            params: params.clone(),
            uploads: uploads.clone(),
            authorized,
            at: Instant::now(),
        });
        let count = state.log.len();
        shared.logged.send_replace(count);
        let failure = if authorized {
            state.failures.get_mut(&method.to_ascii_lowercase()).and_then(VecDeque::pop_front)
        } else {
            None
        };
        (authorized, failure, hung)
    };
    if hung {
        return std::future::pending().await;
    }
    if !authorized {
        return Ok(error(401, "Unauthorized", None));
    }
    if let Some(failure) = failure {
        return Ok(error(failure.status, &failure.description, failure.retry_after));
    }
    let call = Call { params, uploads };
    let reply = match method.to_ascii_lowercase().as_str() {
        "getupdates" => get_updates(&shared, &call).await,
        "getme" => ok(bot_user(&lock(&shared.state).username)),
        "sendmessage" => send_message(&shared, &call),
        "editmessagetext" => edit_message_text(&shared, &call),
        "sendchataction" => send_chat_action(&shared, &call),
        "getfile" => get_file(&shared, &call),
        "sendphoto" => send_media(&shared, &call, "photo"),
        "senddocument" => send_media(&shared, &call, "document"),
        "setwebhook" => set_webhook(&shared, &call),
        "deletewebhook" => delete_webhook(&shared, &call),
        "getwebhookinfo" => get_webhook_info(&shared),
        _ => error(404, "Not Found", None),
    };
    Ok(reply)
}

/// A method call's parameters.
struct Call {
    params: Map<String, Value>,
    uploads: Vec<Upload>,
}

impl Call {
    fn int(&self, name: &str) -> Option<i64> {
        match self.params.get(name)? {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        }
    }

    fn string(&self, name: &str) -> Option<String> {
        match self.params.get(name)? {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }

    fn flag(&self, name: &str) -> bool {
        match self.params.get(name) {
            Some(Value::Bool(b)) => *b,
            Some(Value::String(s)) => s == "true" || s == "1",
            _ => false,
        }
    }

    /// A list sent as a JSON array, or as a JSON-serialized string (query,
    /// form).
    fn list(&self, name: &str) -> Option<Vec<String>> {
        let value = match self.params.get(name)? {
            Value::String(s) => serde_json::from_str(s).ok()?,
            other => other.clone(),
        };
        let items = value.as_array()?;
        Some(items.iter().filter_map(|v| v.as_str().map(str::to_string)).collect())
    }
}

/// Query, then body parameters (JSON object, form or multipart).
fn parse_params(query: &str, content_type: &str, body: &[u8]) -> Result<(Map<String, Value>, Vec<Upload>), String> {
    let mut params = Map::new();
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        params.insert(key.into_owned(), Value::String(value.into_owned()));
    }
    let mut uploads = Vec::new();
    let media_type = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if media_type == "multipart/form-data" {
        let boundary = content_type
            .split(';')
            .filter_map(|p| p.trim().strip_prefix("boundary="))
            .next()
            .map(|b| b.trim_matches('"').to_string())
            .ok_or("multipart body without a boundary")?;
        let (fields, files) = parse_multipart(body, &boundary).ok_or("malformed multipart body")?;
        for (key, value) in fields {
            params.insert(key, Value::String(value));
        }
        uploads = files;
    } else if !body.is_empty() {
        if media_type == "application/x-www-form-urlencoded" {
            for (key, value) in form_urlencoded::parse(body) {
                params.insert(key.into_owned(), Value::String(value.into_owned()));
            }
        } else {
            match serde_json::from_slice::<Value>(body) {
                Ok(Value::Object(object)) => params.extend(object),
                _ => return Err("can't parse JSON object".to_string()),
            }
        }
    }
    Ok((params, uploads))
}

/// Text fields (name, value) and files of a multipart body.
type Multipart = (Vec<(String, String)>, Vec<Upload>);

/// A minimal `multipart/form-data` reader: text fields and files.
fn parse_multipart(body: &[u8], boundary: &str) -> Option<Multipart> {
    let delimiter = format!("--{boundary}").into_bytes();
    let mut fields = Vec::new();
    let mut files = Vec::new();
    let mut rest = body;
    let start = find(rest, &delimiter)?;
    rest = &rest[start + delimiter.len()..];
    loop {
        if rest.starts_with(b"--") {
            return Some((fields, files));
        }
        rest = rest.strip_prefix(b"\r\n")?;
        let end = find(rest, &delimiter)?;
        let part = rest[..end].strip_suffix(b"\r\n")?;
        rest = &rest[end + delimiter.len()..];
        let split = find(part, b"\r\n\r\n")?;
        let headers = String::from_utf8_lossy(&part[..split]).into_owned();
        let content = &part[split + 4..];
        let disposition = headers.lines().find(|l| l.to_ascii_lowercase().starts_with("content-disposition:"))?;
        let attribute = |name: &str| {
            disposition.split(';').map(str::trim).find_map(|a| a.strip_prefix(&format!("{name}="))).map(|v| v.trim_matches('"').to_string())
        };
        let name = attribute("name")?;
        match attribute("filename") {
            Some(filename) => files.push(Upload { field: name, filename: Some(filename), bytes: content.to_vec() }),
            None => fields.push((name, String::from_utf8_lossy(content).into_owned())),
        }
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Marks a held poll over when its request ends for any reason (answered,
/// or the client went away and hyper dropped the future).
struct HeldGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for HeldGuard {
    fn drop(&mut self) {
        let mut state = lock(&self.shared.state);
        if state.held.as_ref().is_some_and(|(id, _)| *id == self.id) {
            state.held = None;
            self.shared.polling.send_replace(false);
        }
    }
}

/// What `getUpdates` returns now: updates from `offset` on, of the allowed
/// kinds, at most `limit`. Confirms (drops) the ones below `offset`.
fn take_batch(state: &mut State, offset: Option<i64>, limit: usize, allowed: Option<&[String]>) -> Vec<Value> {
    if let Some(offset) = offset.filter(|o| *o > 0) {
        state.updates.retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
    }
    let kind_allowed = |update: &Value| match allowed {
        None => true,
        Some([]) => true,
        Some(kinds) => update.as_object().is_some_and(|o| o.keys().any(|k| k != "update_id" && kinds.iter().any(|a| a == k))),
    };
    state.updates.iter().filter(|u| kind_allowed(u)).take(limit).cloned().collect()
}

async fn get_updates(shared: &Arc<Shared>, call: &Call) -> Response<Body> {
    let offset = call.int("offset");
    let timeout = call.int("timeout").unwrap_or(0).max(0) as u64;
    let limit = call.int("limit").unwrap_or(100).clamp(1, 100) as usize;
    let allowed = call.list("allowed_updates");
    let (id, mut terminated, mut woken) = {
        let mut state = lock(&shared.state);
        if state.webhook.is_some() {
            return error(409, CONFLICT_WEBHOOK, None);
        }
        // The newer request wins: the held one is answered 409.
        shared.set_held(&mut state, None);
        let batch = take_batch(&mut state, offset, limit, allowed.as_deref());
        if !batch.is_empty() || timeout == 0 {
            return ok(Value::Array(batch));
        }
        let id = state.next_poll;
        state.next_poll += 1;
        let (terminate, terminated) = oneshot::channel();
        shared.set_held(&mut state, Some((id, terminate)));
        (id, terminated, shared.updates.subscribe())
    };
    let _guard = HeldGuard { shared: shared.clone(), id };
    let deadline = tokio::time::sleep(Duration::from_secs(timeout));
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut terminated => return error(409, CONFLICT_POLLER, None),
            _ = &mut deadline => return ok(json!([])),
            changed = woken.changed() => {
                if changed.is_err() {
                    return ok(json!([]));
                }
                let batch = take_batch(&mut lock(&shared.state), offset, limit, allowed.as_deref());
                if !batch.is_empty() {
                    return ok(Value::Array(batch));
                }
            }
        }
    }
}

/// The text Telegram keeps after parsing `text` in `parse_mode`, or the
/// reason it refuses it. Only HTML is parsed (the adapter's mode); other
/// modes count the raw text.
fn visible_text(text: &str, parse_mode: Option<&str>) -> Result<String, String> {
    if parse_mode.is_some_and(|m| m.eq_ignore_ascii_case("html")) { parse_html(text) } else { Ok(text.to_string()) }
}

/// Telegram's HTML subset: the supported tags, properly nested, and the
/// entities `&lt; &gt; &amp; &quot;` and numeric ones. Returns the text
/// without markup.
pub(crate) fn parse_html(text: &str) -> Result<String, String> {
    const TAGS: &[&str] = &[
        "b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a", "code", "pre",
        "blockquote", "tg-emoji",
    ];
    let mut out = String::with_capacity(text.len());
    let mut stack: Vec<String> = Vec::new();
    let mut at = 0;
    while at < text.len() {
        let rest = &text[at..];
        if rest.starts_with('<') {
            let end = rest.find('>').ok_or_else(|| format!("Unclosed start tag at byte offset {at}"))?;
            let inner = &rest[1..end];
            if let Some(name) = inner.strip_prefix('/') {
                let name = name.trim().to_ascii_lowercase();
                match stack.pop() {
                    Some(open) if open == name => {}
                    _ => return Err(format!("Unexpected end tag at byte offset {at}")),
                }
            } else {
                let name = inner.split_whitespace().next().unwrap_or_default().to_ascii_lowercase();
                if !TAGS.contains(&name.as_str()) {
                    return Err(format!("Unsupported start tag \"{name}\" at byte offset {at}"));
                }
                stack.push(name);
            }
            at += end + 1;
        } else if rest.starts_with('>') {
            return Err(format!("Unexpected '>' at byte offset {at}"));
        } else if rest.starts_with('&') {
            let end = rest.bytes().take(12).position(|b| b == b';').ok_or_else(|| format!("Unsupported HTML entity at byte offset {at}"))?;
            let name = &rest[1..end];
            let decoded = match name {
                "lt" => Some('<'),
                "gt" => Some('>'),
                "amp" => Some('&'),
                "quot" => Some('"'),
                _ => name
                    .strip_prefix("#x")
                    .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                    .or_else(|| name.strip_prefix('#').and_then(|dec| dec.parse().ok()))
                    .and_then(char::from_u32),
            };
            out.push(decoded.ok_or_else(|| format!("Unsupported HTML entity at byte offset {at}"))?);
            at += end + 1;
        } else {
            let c = rest.chars().next().unwrap_or_default();
            out.push(c);
            at += c.len_utf8();
        }
    }
    match stack.last() {
        Some(open) => Err(format!("Can't find end tag corresponding to start tag \"{open}\"")),
        None => Ok(out),
    }
}

fn utf16_len(text: &str) -> usize {
    text.encode_utf16().count()
}

fn message_json(state: &State, chat_id: i64, message_id: i64, thread: Option<i64>) -> Value {
    let chat_type = if chat_id < 0 { "supergroup" } else { "private" };
    let mut message = json!({"message_id": message_id, "date": DATE, "chat": {"id": chat_id, "type": chat_type},
        "from": bot_user(&state.username)});
    if let Some(thread) = thread {
        message["message_thread_id"] = json!(thread);
    }
    message
}

fn send_message(shared: &Shared, call: &Call) -> Response<Body> {
    let Some(chat_id) = call.int("chat_id") else { return bad_request("chat not found") };
    let Some(text) = call.string("text") else { return bad_request("message text is empty") };
    let parse_mode = call.string("parse_mode");
    let visible = match visible_text(&text, parse_mode.as_deref()) {
        Ok(visible) => visible,
        Err(reason) => return bad_request(&format!("can't parse entities: {reason}")),
    };
    if visible.trim().is_empty() {
        return bad_request("message text is empty");
    }
    if utf16_len(&visible) > MAX_TEXT_UTF16 {
        return bad_request("message is too long");
    }
    let thread = call.int("message_thread_id");
    let reply_to = call.int("reply_to_message_id").or_else(|| {
        call.params.get("reply_parameters").and_then(|p| p.get("message_id")).and_then(Value::as_i64)
    });
    let mut state = lock(&shared.state);
    let message_id = state.next_message_id;
    state.next_message_id += 1;
    state.texts.insert((chat_id, message_id), text.clone());
    state.sent.push(SentMessage {
        message_id,
        chat_id,
        text,
        parse_mode,
        message_thread_id: thread,
        reply_to_message_id: reply_to,
    });
    let mut message = message_json(&state, chat_id, message_id, thread);
    message["text"] = json!(visible);
    ok(message)
}

fn edit_message_text(shared: &Shared, call: &Call) -> Response<Body> {
    let (Some(chat_id), Some(message_id)) = (call.int("chat_id"), call.int("message_id")) else {
        return bad_request("message identifier is not specified");
    };
    let Some(text) = call.string("text") else { return bad_request("message text is empty") };
    let parse_mode = call.string("parse_mode");
    let visible = match visible_text(&text, parse_mode.as_deref()) {
        Ok(visible) => visible,
        Err(reason) => return bad_request(&format!("can't parse entities: {reason}")),
    };
    if visible.trim().is_empty() {
        return bad_request("message text is empty");
    }
    if utf16_len(&visible) > MAX_TEXT_UTF16 {
        return bad_request("MESSAGE_TOO_LONG");
    }
    let mut state = lock(&shared.state);
    match state.texts.get(&(chat_id, message_id)) {
        None => return bad_request("message to edit not found"),
        Some(current) if *current == text => return error(400, NOT_MODIFIED, None),
        Some(_) => {}
    }
    state.texts.insert((chat_id, message_id), text.clone());
    state.edits.push(Edit { chat_id, message_id, text, parse_mode, at: Instant::now() });
    let mut message = message_json(&state, chat_id, message_id, None);
    message["text"] = json!(visible);
    message["edit_date"] = json!(DATE + 1);
    ok(message)
}

fn send_chat_action(shared: &Shared, call: &Call) -> Response<Body> {
    const ACTIONS: &[&str] = &[
        "typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice", "upload_document",
        "choose_sticker", "find_location", "record_video_note", "upload_video_note",
    ];
    let Some(chat_id) = call.int("chat_id") else { return bad_request("chat not found") };
    let action = call.string("action").unwrap_or_default();
    if !ACTIONS.contains(&action.as_str()) {
        return bad_request("wrong parameter action in request");
    }
    let message_thread_id = call.int("message_thread_id");
    lock(&shared.state).actions.push(ChatAction { chat_id, action, message_thread_id });
    ok(json!(true))
}

fn get_file(shared: &Shared, call: &Call) -> Response<Body> {
    let file_id = call.string("file_id").unwrap_or_default();
    let state = lock(&shared.state);
    match state.files.get(&file_id) {
        Some(file) => ok(json!({"file_id": file_id, "file_unique_id": format!("u-{file_id}"),
            "file_size": file.bytes.len(), "file_path": file.path})),
        None => bad_request("invalid file_id"),
    }
}

fn download(shared: &Shared, rest: &str, http_method: &str) -> Response<Body> {
    let (token, path) = rest.split_once('/').unwrap_or((rest, ""));
    let mut state = lock(&shared.state);
    let authorized = token == state.token;
    let mut params = Map::new();
    params.insert("path".into(), json!(path));
    state.log.push(TelegramRequest {
        method: "file".into(),
        http_method: http_method.to_string(),
        params,
        uploads: Vec::new(),
        authorized,
        at: Instant::now(),
    });
    let count = state.log.len();
    shared.logged.send_replace(count);
    if !authorized {
        return error(401, "Unauthorized", None);
    }
    match state.files.values().find(|f| f.path == path) {
        Some(file) => response(StatusCode::OK, "application/octet-stream", file.bytes.clone()),
        None => error(404, "Not Found", None),
    }
}

fn send_media(shared: &Shared, call: &Call, kind: &str) -> Response<Body> {
    let Some(chat_id) = call.int("chat_id") else { return bad_request("chat not found") };
    let caption = call.string("caption");
    if caption.as_deref().is_some_and(|c| utf16_len(c) > MAX_CAPTION_UTF16) {
        return bad_request("message caption is too long");
    }
    let mut state = lock(&shared.state);
    let upload = call.uploads.iter().find(|u| u.field == kind).cloned();
    let file_id = match (&upload, call.string(kind)) {
        (Some(upload), _) => {
            let id = format!("file-{}", state.next_file);
            state.next_file += 1;
            let name = upload.filename.clone().unwrap_or_else(|| "upload".into());
            state.files.insert(id.clone(), MockFile { path: format!("{kind}s/{id}-{name}"), bytes: upload.bytes.clone() });
            id
        }
        // An attach://name reference to a part with another field name.
        (None, Some(reference)) if reference.starts_with("attach://") => {
            return bad_request(&format!("wrong {kind} reference: the mock expects the file in field \"{kind}\""));
        }
        (None, Some(file_id)) if state.files.contains_key(&file_id) => file_id,
        (None, Some(_)) => return bad_request("wrong file identifier/HTTP URL specified"),
        (None, None) => return bad_request(&format!("there is no {kind} in the request")),
    };
    let message_id = state.next_message_id;
    state.next_message_id += 1;
    state.media.push(SentMedia {
        kind: kind.to_string(),
        message_id,
        chat_id,
        file_id: file_id.clone(),
        upload,
        caption: caption.clone(),
    });
    let mut message = message_json(&state, chat_id, message_id, call.int("message_thread_id"));
    let size = state.files.get(&file_id).map_or(0, |f| f.bytes.len());
    if kind == "photo" {
        message["photo"] = json!([{"file_id": file_id, "file_unique_id": format!("u-{file_id}"), "width": 640, "height": 480, "file_size": size}]);
    } else {
        message["document"] = json!({"file_id": file_id, "file_unique_id": format!("u-{file_id}"), "file_size": size});
    }
    if let Some(caption) = caption {
        message["caption"] = json!(caption);
    }
    ok(message)
}

fn set_webhook(shared: &Shared, call: &Call) -> Response<Body> {
    let url = call.string("url").unwrap_or_default();
    let secret_token = call.string("secret_token").filter(|s| !s.is_empty());
    if let Some(secret) = &secret_token
        && (secret.len() > 256 || !secret.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
    {
        return bad_request("secret token contains unallowed characters");
    }
    let mut state = lock(&shared.state);
    if url.is_empty() {
        state.webhook = None;
        return ok_described(json!(true), "Webhook was deleted");
    }
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return bad_request("bad webhook: An HTTPS URL must be provided for webhook");
    }
    state.webhook = Some(Webhook { url, secret_token });
    ok_described(json!(true), "Webhook was set")
}

fn delete_webhook(shared: &Shared, call: &Call) -> Response<Body> {
    let mut state = lock(&shared.state);
    if call.flag("drop_pending_updates") {
        state.updates.clear();
    }
    match state.webhook.take() {
        Some(_) => ok_described(json!(true), "Webhook was deleted"),
        None => ok_described(json!(true), "Webhook is already deleted"),
    }
}

fn get_webhook_info(shared: &Shared) -> Response<Body> {
    let state = lock(&shared.state);
    let url = state.webhook.as_ref().map_or(String::new(), |w| w.url.clone());
    ok(json!({"url": url, "has_custom_certificate": false, "pending_update_count": state.updates.len()}))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One Bot API call through reqwest: (HTTP status, JSON body).
    async fn call(mock: &MockTelegram, method: &str, params: Value) -> (u16, Value) {
        call_with_token(mock, &mock.token(), method, params).await
    }

    async fn call_with_token(mock: &MockTelegram, token: &str, method: &str, params: Value) -> (u16, Value) {
        let url = format!("{}/bot{token}/{method}", mock.api_base());
        let response = reqwest::Client::new().post(url).json(&params).send().await.expect("request");
        let status = response.status().as_u16();
        (status, response.json().await.expect("JSON body"))
    }

    fn ids(body: &Value) -> Vec<i64> {
        body["result"].as_array().expect("result array").iter().map(|u| u["update_id"].as_i64().unwrap()).collect()
    }

    #[tokio::test]
    async fn a_long_poll_is_held_until_an_update_arrives() {
        let mock = MockTelegram::start();
        let poll = {
            let url = format!("{}/bot{}/getUpdates?timeout=30", mock.api_base(), mock.token());
            tokio::spawn(async move { reqwest::get(url).await.unwrap().json::<Value>().await.unwrap() })
        };
        mock.wait_for_poller().await;
        assert!(!poll.is_finished(), "answered before any update existed");
        let id = mock.push(MockUpdate::text(42, 7, "hello"));
        let body = poll.await.unwrap();
        assert_eq!(ids(&body), [id]);
        assert_eq!(body["result"][0]["message"]["text"], "hello");
        assert!(!mock.is_polling());
    }

    #[tokio::test]
    async fn an_expired_poll_answers_an_empty_list() {
        let mock = MockTelegram::start();
        let (status, body) = call(&mock, "getUpdates", json!({"timeout": 1})).await;
        assert_eq!((status, body), (200, json!({"ok": true, "result": []})));
        let (_, body) = call(&mock, "getUpdates", json!({"timeout": 0})).await;
        assert_eq!(body["result"], json!([]));
    }

    #[tokio::test]
    async fn an_offset_confirms_the_updates_below_it() {
        let mock = MockTelegram::start();
        let first = mock.push(MockUpdate::text(1, 1, "a"));
        let second = mock.push(MockUpdate::text(1, 1, "b"));
        // Without an offset, nothing is confirmed: the same updates again.
        for _ in 0..2 {
            let (_, body) = call(&mock, "getUpdates", json!({})).await;
            assert_eq!(ids(&body), [first, second]);
        }
        let (_, body) = call(&mock, "getUpdates", json!({"offset": first + 1})).await;
        assert_eq!(ids(&body), [second]);
        assert_eq!(mock.pending_updates().len(), 1);
        // Confirmed for good: an offset of 0 does not bring it back.
        let (_, body) = call(&mock, "getUpdates", json!({"offset": 0, "limit": 5})).await;
        assert_eq!(ids(&body), [second]);
        let (_, body) = call(&mock, "getUpdates", json!({"offset": second + 1})).await;
        assert_eq!(ids(&body), Vec::<i64>::new());
        assert!(mock.pending_updates().is_empty());
    }

    #[tokio::test]
    async fn limit_and_allowed_updates_filter_the_batch() {
        let mock = MockTelegram::start();
        let a = mock.push(MockUpdate::text(1, 1, "a"));
        let b = mock.push(MockUpdate::text(1, 1, "b").edited());
        let c = mock.push(MockUpdate::text(1, 1, "c"));
        let (_, body) = call(&mock, "getUpdates", json!({"limit": 1})).await;
        assert_eq!(ids(&body), [a]);
        // As a query string: a JSON-serialized list, URL-encoded.
        let url = format!("{}/bot{}/getUpdates?allowed_updates=%5B%22message%22%5D", mock.api_base(), mock.token());
        let body: Value = reqwest::get(url).await.unwrap().json().await.unwrap();
        assert_eq!(ids(&body), [a, c]);
        let (_, body) = call(&mock, "getUpdates", json!({"allowed_updates": ["edited_message"]})).await;
        assert_eq!(ids(&body), [b]);
    }

    #[tokio::test]
    async fn a_second_poller_terminates_the_held_one_with_409() {
        let mock = MockTelegram::start();
        let first = {
            let url = format!("{}/bot{}/getUpdates?timeout=30", mock.api_base(), mock.token());
            tokio::spawn(async move {
                let response = reqwest::get(url).await.unwrap();
                (response.status().as_u16(), response.json::<Value>().await.unwrap())
            })
        };
        mock.wait_for_poller().await;
        let second = {
            let url = format!("{}/bot{}/getUpdates?timeout=30", mock.api_base(), mock.token());
            tokio::spawn(async move { reqwest::get(url).await.unwrap().json::<Value>().await.unwrap() })
        };
        let (status, body) = first.await.unwrap();
        assert_eq!(status, 409);
        assert_eq!(body, json!({"ok": false, "error_code": 409, "description": CONFLICT_POLLER}));
        // The newer poll is the one held now, and gets the update.
        mock.wait_for_poller().await;
        let id = mock.push(MockUpdate::text(5, 5, "x"));
        assert_eq!(ids(&second.await.unwrap()), [id]);
    }

    #[tokio::test]
    async fn a_webhook_excludes_get_updates_until_deleted() {
        let mock = MockTelegram::start();
        let (status, body) = call(&mock, "setWebhook", json!({"url": "https://example.test/hook", "secret_token": "s3cr-et_"})).await;
        assert_eq!((status, body["result"].clone()), (200, json!(true)));
        assert_eq!(
            mock.webhook(),
            Some(Webhook { url: "https://example.test/hook".into(), secret_token: Some("s3cr-et_".into()) })
        );
        let (status, body) = call(&mock, "getUpdates", json!({})).await;
        assert_eq!((status, body["description"].as_str().unwrap()), (409, CONFLICT_WEBHOOK));
        let (status, _) = call(&mock, "setWebhook", json!({"url": "https://example.test/hook", "secret_token": "bad token!"})).await;
        assert_eq!(status, 400);
        call(&mock, "deleteWebhook", json!({})).await;
        assert_eq!(mock.webhook(), None);
        let (status, _) = call(&mock, "getUpdates", json!({})).await;
        assert_eq!(status, 200);
    }

    #[tokio::test]
    async fn webhook_delivery_carries_the_secret_header() {
        // A tiny receiver that answers 200 for the right secret, 401 otherwise.
        let seen = Arc::new(Mutex::new(Vec::<Value>::new()));
        let server_seen = seen.clone();
        let receiver = crate::server::MockServer::start("WebhookReceiver", move |request: Request<Incoming>| {
            let seen = server_seen.clone();
            async move {
                let secret = request.headers().get("x-telegram-bot-api-secret-token").cloned();
                let body = request.into_body().collect().await.unwrap().to_bytes();
                if secret.as_ref().is_some_and(|s| s == "right") {
                    lock(&seen).push(serde_json::from_slice(&body).unwrap());
                    Ok::<_, Infallible>(response(StatusCode::OK, "text/plain", "ok"))
                } else {
                    Ok(response(StatusCode::UNAUTHORIZED, "text/plain", "no"))
                }
            }
        });
        let addr = receiver.addr();
        let mock = MockTelegram::start();
        let update = mock.update_json(&MockUpdate::text(3, 4, "via hook"));
        assert!(matches!(mock.deliver_webhook(update.clone()).await, Err(MockTelegramError::NoWebhook)));
        call(&mock, "setWebhook", json!({"url": format!("http://{addr}/tg"), "secret_token": "right"})).await;
        assert_eq!(mock.deliver_webhook(update.clone()).await.unwrap(), 200);
        assert_eq!(mock.deliver_webhook_with_secret(update.clone(), Some("wrong")).await.unwrap(), 401);
        assert_eq!(mock.deliver_webhook_with_secret(update, None).await.unwrap(), 401);
        let seen = lock(&seen).clone();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0]["message"]["text"], "via hook");
        assert!(seen[0]["update_id"].is_i64());
    }

    #[tokio::test]
    async fn fail_next_scripts_a_429_with_retry_after_once() {
        let mock = MockTelegram::start();
        mock.fail_next("sendMessage", 429, Some(7));
        let (status, body) = call(&mock, "sendMessage", json!({"chat_id": 1, "text": "hi"})).await;
        assert_eq!(status, 429);
        assert_eq!(
            body,
            json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 7", "parameters": {"retry_after": 7}})
        );
        assert!(mock.sent_messages().is_empty());
        let (status, body) = call(&mock, "sendMessage", json!({"chat_id": 1, "text": "hi"})).await;
        assert_eq!(status, 200);
        assert_eq!(body["result"]["text"], "hi");
        assert_eq!(mock.sent_messages().len(), 1);
        assert_eq!(mock.requests_for("sendmessage").len(), 2, "failed requests are logged too");
    }

    #[tokio::test]
    async fn over_4096_utf16_units_is_too_long_after_entity_parsing() {
        let mock = MockTelegram::start();
        let too_long = |status: u16, body: &Value| status == 400 && body["description"] == "Bad Request: message is too long";
        let (status, body) = call(&mock, "sendMessage", json!({"chat_id": 1, "text": "a".repeat(4097)})).await;
        assert!(too_long(status, &body), "{body}");
        let (status, _) = call(&mock, "sendMessage", json!({"chat_id": 1, "text": "a".repeat(4096)})).await;
        assert_eq!(status, 200);
        // 2048 emoji are 4096 UTF-16 units; one more is too many.
        let (status, _) = call(&mock, "sendMessage", json!({"chat_id": 1, "text": "😀".repeat(2048)})).await;
        assert_eq!(status, 200);
        let (status, body) = call(&mock, "sendMessage", json!({"chat_id": 1, "text": "😀".repeat(2048) + "a"})).await;
        assert!(too_long(status, &body));
        // Tags do not count, an entity counts as its one character.
        let html = format!("<b>{}</b>&amp;", "a".repeat(4095));
        let (status, _) = call(&mock, "sendMessage", json!({"chat_id": 1, "text": html, "parse_mode": "HTML"})).await;
        assert_eq!(status, 200);
        let (status, body) = call(&mock, "sendMessage", json!({"chat_id": 1, "text": "<b>open", "parse_mode": "HTML"})).await;
        assert_eq!(status, 400);
        assert!(body["description"].as_str().unwrap().starts_with("Bad Request: can't parse entities"), "{body}");
        assert_eq!(mock.sent_messages().len(), 2 + 1);
    }

    #[tokio::test]
    async fn a_wrong_token_is_401_and_logged_as_unauthorized() {
        let mock = MockTelegram::start();
        let (status, body) = call_with_token(&mock, "1:wrong", "getMe", json!({})).await;
        assert_eq!((status, body), (401, json!({"ok": false, "error_code": 401, "description": "Unauthorized"})));
        let (status, body) = call(&mock, "getMe", json!({})).await;
        assert_eq!((status, body["result"]["username"].clone()), (200, json!(MOCK_BOT_USERNAME)));
        let log = mock.requests();
        assert_eq!(log.iter().map(|r| r.authorized).collect::<Vec<_>>(), [false, true]);
    }

    #[tokio::test]
    async fn edits_and_chat_actions_are_checked_and_recorded() {
        let mock = MockTelegram::start();
        let (_, sent) = call(&mock, "sendMessage", json!({"chat_id": -100, "text": "draft", "message_thread_id": 9})).await;
        let id = sent["result"]["message_id"].as_i64().unwrap();
        let (status, _) = call(&mock, "editMessageText", json!({"chat_id": -100, "message_id": id, "text": "final"})).await;
        assert_eq!(status, 200);
        let (status, body) = call(&mock, "editMessageText", json!({"chat_id": -100, "message_id": id, "text": "final"})).await;
        assert_eq!((status, body["description"].as_str().unwrap()), (400, NOT_MODIFIED));
        let (status, _) = call(&mock, "editMessageText", json!({"chat_id": -100, "message_id": 999, "text": "x"})).await;
        assert_eq!(status, 400);
        let edits = mock.edits();
        assert_eq!(edits.len(), 1);
        assert_eq!((edits[0].chat_id, edits[0].message_id, edits[0].text.as_str(), edits[0].parse_mode.as_deref()), (-100, id, "final", None));
        assert_eq!(mock.sent_messages()[0].message_thread_id, Some(9));
        // Form-encoded, as some clients send it.
        let url = format!("{}/bot{}/sendChatAction", mock.api_base(), mock.token());
        let form = "chat_id=-100&action=typing&message_thread_id=9";
        let response = reqwest::Client::new()
            .post(url.clone())
            .header("content-type", "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let (status, _) = call(&mock, "sendChatAction", json!({"chat_id": 1, "action": "dancing"})).await;
        assert_eq!(status, 400);
        assert_eq!(mock.chat_actions(), [ChatAction { chat_id: -100, action: "typing".into(), message_thread_id: Some(9) }]);
    }

    #[tokio::test]
    async fn files_are_served_and_uploads_accepted() {
        let mock = MockTelegram::start();
        let file_id = mock.add_file("photos/cat.jpg", b"JPEGDATA".to_vec());
        let (_, body) = call(&mock, "getFile", json!({"file_id": file_id})).await;
        let path = body["result"]["file_path"].as_str().unwrap().to_string();
        assert_eq!(path, "photos/cat.jpg");
        let url = format!("{}/file/bot{}/{path}", mock.api_base(), mock.token());
        let bytes = reqwest::get(url).await.unwrap().bytes().await.unwrap();
        assert_eq!(&bytes[..], b"JPEGDATA");
        let url = format!("{}/file/botWRONG/{path}", mock.api_base());
        assert_eq!(reqwest::get(url).await.unwrap().status(), 401);
        let (status, _) = call(&mock, "getFile", json!({"file_id": "nope"})).await;
        assert_eq!(status, 400);
        // By file id (JSON) and by upload (multipart).
        let (status, _) = call(&mock, "sendPhoto", json!({"chat_id": 1, "photo": file_id, "caption": "again"})).await;
        assert_eq!(status, 200);
        let body = b"--XX\r\nContent-Disposition: form-data; name=\"chat_id\"\r\n\r\n5\r\n--XX\r\nContent-Disposition: form-data; name=\"document\"; filename=\"a.txt\"\r\nContent-Type: text/plain\r\n\r\nhello\r\n--XX--\r\n";
        let response = reqwest::Client::new()
            .post(format!("{}/bot{}/sendDocument", mock.api_base(), mock.token()))
            .header("content-type", "multipart/form-data; boundary=XX")
            .body(body.to_vec())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let media = mock.sent_media();
        assert_eq!((media[0].kind.as_str(), media[0].file_id.as_str(), media[0].caption.as_deref()), ("photo", file_id.as_str(), Some("again")));
        assert_eq!(media[1].kind, "document");
        assert_eq!(media[1].chat_id, 5);
        assert_eq!(media[1].upload.as_ref().unwrap().bytes, b"hello");
        // The upload can be fetched back.
        let (_, body) = call(&mock, "getFile", json!({"file_id": media[1].file_id})).await;
        assert!(body["result"]["file_path"].as_str().unwrap().ends_with("a.txt"));
    }

    #[test]
    fn scripted_updates_carry_entities_in_utf16_units() {
        let bot = bot_user(MOCK_BOT_USERNAME);
        let update = MockUpdate::text(-5, 2, "/start@chitin_test_bot hi 😀 @chitin_test_bot").topic(3).render(&bot, 1);
        let message = &update["message"];
        assert_eq!(message["message_thread_id"], 3);
        assert_eq!(message["is_topic_message"], true);
        assert_eq!(message["chat"]["is_forum"], true);
        assert_eq!(
            message["entities"],
            json!([{"type": "bot_command", "offset": 0, "length": 22}, {"type": "mention", "offset": 29, "length": 16}])
        );
    }

    #[test]
    fn the_html_check_follows_telegrams_subset() {
        assert_eq!(parse_html("<b>a</b> &lt;&amp;&gt; &#128512;").unwrap(), "a <&> 😀");
        assert_eq!(parse_html("<pre><code class=\"language-rust\">x</code></pre>").unwrap(), "x");
        assert!(parse_html("<b><i>x</b></i>").is_err());
        assert!(parse_html("<div>x</div>").is_err());
        assert!(parse_html("a & b").is_err());
        assert!(parse_html("&漢字漢字漢字").is_err(), "a bare & before multi-byte text is refused, not a panic");
        assert!(parse_html("<b>x").is_err());
    }
}
