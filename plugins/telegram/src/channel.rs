//! The channel state machine: what each `channel-plugin` callback does, as
//! plain functions over plain types, so it is tested natively and the wasm
//! glue (`glue.rs`) is only a type mapping plus the `wasi:http` calls of
//! `deliver`, `stream-update` and `set-status`.
//!
//! Why the state holds what it holds: every callback runs in a fresh
//! instance and `poll-request` sees nothing but the committed state, so the
//! state carries the API base, the bot's username (for mention and command
//! detection) and the `getUpdates` offset — the only memory the channel
//! has. It is compact JSON, far below the host's 64 KiB bound (an API base
//! is capped at [`MAX_API_BASE`]).
//!
//! The offset moves only in the state `poll-response` returns; the host
//! commits it after queueing the emits, and the *next* `getUpdates` with
//! `offset = highest + 1` is what tells Telegram to drop them. A crash in
//! between re-polls the same updates, which the host deduplicates by the
//! event id `telegram:<update_id>`.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::api::{self, ALLOWED_UPDATES, DEFAULT_API_BASE, HttpRequest, POLL_TIMEOUT_SECS};
use crate::error::{Action, ApiError, TelegramError, api_result};
use crate::render::{OutgoingText, render_reply};
use crate::update::{Conversation, InboundEvent, parse_get_updates, parse_webhook};

/// Longest `api_base` accepted (keeps the state small).
pub const MAX_API_BASE: usize = 256;

/// Updates per `getUpdates`: the host refuses a step of more than 64
/// actions, and Telegram's default batch is 100, so an unbounded batch
/// could never be committed and the channel would stall on it.
pub const POLL_LIMIT: u32 = 50;

/// The margin over the long poll the host waits before calling it stalled.
pub const POLL_MARGIN_MS: u32 = 10_000;

/// The placeholder of the webhook secret (`setWebhook`'s `secret_token`);
/// the host substitutes it in the body and checks the same value in
/// `X-Telegram-Bot-Api-Secret-Token` on every webhook request.
pub const WEBHOOK_SECRET_PLACEHOLDER: &str = "{{secret:webhook_secret}}";

/// How updates reach the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `getUpdates` long polls (the default; `deleteWebhook` on start).
    #[default]
    Poll,
    /// Telegram POSTs to the host's route (`setWebhook` on start).
    Webhook,
}

/// The user's `[channels.telegram]` config as the host passes it to `start`
/// (secrets left out).
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default)]
pub struct Config {
    /// The Bot API base, `https://api.telegram.org` unless set (a local Bot
    /// API server, or a test's mock).
    pub api_base: Option<String>,
    /// The bot's `@username`; learnt with `getMe` before the first poll when
    /// absent.
    pub bot_username: Option<String>,
    /// `poll` or `webhook`.
    pub mode: Mode,
    /// The public URL of the host's `/telegram` route (webhook mode).
    pub webhook_url: Option<String>,
}

/// The committed state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct State {
    /// The Bot API base.
    #[serde(rename = "b")]
    pub api_base: String,
    /// The bot's username without `@`; `None` until known.
    #[serde(rename = "u", default, skip_serializing_if = "Option::is_none")]
    pub bot_username: Option<String>,
    /// The next `getUpdates` offset; `None` before the first update.
    #[serde(rename = "o", default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
    /// How updates arrive.
    #[serde(rename = "m", default)]
    pub mode: Mode,
}

impl State {
    /// The state of `bytes`; empty is "not started" (defaults).
    pub fn decode(bytes: &[u8]) -> Result<State, Failure> {
        if bytes.is_empty() {
            return Ok(State { api_base: DEFAULT_API_BASE.into(), ..State::default() });
        }
        serde_json::from_slice(bytes).map_err(|e| Failure::Fatal(format!("corrupt channel state ({e}); reset the channel's state")))
    }

    /// The bytes to commit.
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("the state serialises")
    }
}

/// Why a callback failed (`channel-error`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The host backs off and retries.
    Transient(String),
    /// The host stops the channel and shows the reason.
    Fatal(String),
}

impl From<TelegramError> for Failure {
    fn from(error: TelegramError) -> Failure {
        match error {
            TelegramError::Api(api) => api_failure(&api),
            other => Failure::Transient(other.to_string()),
        }
    }
}

/// A failed Bot API call as a channel error (429 is handled by the caller
/// where it can wait instead).
fn api_failure(error: &ApiError) -> Failure {
    match error.action() {
        Action::Stop { reason } => Failure::Fatal(reason),
        _ => Failure::Transient(error.to_string()),
    }
}

/// One thing for the host to do after a committed step.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Queue this message for the agent.
    Emit(InboundEvent),
    /// Run this request, drop the response.
    Http(HttpRequest),
    /// Poll again after this many milliseconds.
    PollAfter(u32),
    /// Answer the webhook request with 200 and an empty JSON object.
    RespondOk,
}

/// A step: the state to commit and the effects.
#[derive(Debug, Clone, PartialEq)]
pub struct StepOut {
    /// The new state (encoded).
    pub state: Vec<u8>,
    /// What to do.
    pub effects: Vec<Effect>,
    /// Lines for the host's log (warnings).
    pub warnings: Vec<String>,
}

/// `start`: reads the config over the committed state (the offset survives
/// a restart; a changed `api_base` or mode takes effect). Poll mode deletes
/// any webhook first (`getUpdates` gets 409 while one is set) and polls at
/// once; webhook mode registers the route with the secret placeholder.
pub fn start(config: &str, state: &[u8]) -> Result<StepOut, Failure> {
    let config: Config = if config.trim().is_empty() {
        Config::default()
    } else {
        serde_json::from_str(config).map_err(|e| Failure::Fatal(format!("invalid [channels.telegram] config: {e}")))?
    };
    let mut state = State::decode(state)?;
    let api_base = config.api_base.as_deref().unwrap_or(DEFAULT_API_BASE).trim_end_matches('/').to_string();
    if !(api_base.starts_with("https://") || api_base.starts_with("http://")) || api_base.len() > MAX_API_BASE {
        return Err(Failure::Fatal(format!("api_base `{api_base}` must be an http(s) URL of at most {MAX_API_BASE} characters")));
    }
    if api_base != state.api_base {
        // Another server has other update ids.
        state.offset = None;
        state.bot_username = None;
    }
    state.api_base = api_base;
    if let Some(username) = config.bot_username.as_deref().map(|u| u.trim_start_matches('@')).filter(|u| !u.is_empty()) {
        state.bot_username = Some(username.to_string());
    }
    state.mode = config.mode;
    let effects = match config.mode {
        Mode::Poll => vec![Effect::Http(api::delete_webhook(&state.api_base, false)), Effect::PollAfter(0)],
        Mode::Webhook => {
            let url = config.webhook_url.ok_or_else(|| Failure::Fatal("webhook mode needs `webhook_url` (the public URL of the /telegram route)".into()))?;
            vec![Effect::Http(set_webhook(&state.api_base, &url))]
        }
    };
    Ok(StepOut { state: state.encode(), effects, warnings: Vec::new() })
}

/// `setWebhook` with the secret as its placeholder (the crate's
/// [`api::set_webhook`] checks a literal secret, which the component never has).
fn set_webhook(api_base: &str, url: &str) -> HttpRequest {
    let body = json!({"url": url, "secret_token": WEBHOOK_SECRET_PLACEHOLDER, "allowed_updates": ALLOWED_UPDATES});
    HttpRequest {
        method: api::HttpMethod::Post,
        url: api::method_url(api_base, "setWebhook"),
        headers: vec![("content-type".into(), "application/json".into())],
        body: Some(body.to_string()),
    }
}

/// `poll-request`: `getMe` while the username is unknown, else the long
/// poll from the state's offset. Returns the request and the host's timeout.
pub fn poll_request(state: &[u8]) -> Result<(HttpRequest, u32), Failure> {
    let state = State::decode(state)?;
    if state.bot_username.is_none() {
        return Ok((api::get_me(&state.api_base), POLL_MARGIN_MS));
    }
    let mut request = api::get_updates(&state.api_base, state.offset, POLL_TIMEOUT_SECS, ALLOWED_UPDATES);
    request.url.push_str(&format!("&limit={POLL_LIMIT}"));
    Ok((request, POLL_TIMEOUT_SECS * 1000 + POLL_MARGIN_MS))
}

/// `poll-response`: the answer to [`poll_request`]'s request. Updates are
/// emitted and the offset moves past them; 401/409 stop the channel, 429
/// waits `retry_after` with the state unchanged, anything else is transient.
pub fn poll_response(status: u16, body: &[u8], state_bytes: &[u8]) -> Result<StepOut, Failure> {
    let mut state = State::decode(state_bytes)?;
    let Some(username) = state.bot_username.clone() else {
        let me = api_result(status, body).map_err(|e| api_failure(&e))?;
        state.bot_username = Some(api::bot_username(&me)?);
        return Ok(StepOut { state: state.encode(), effects: vec![Effect::PollAfter(0)], warnings: Vec::new() });
    };
    let batch = match parse_get_updates(status, body, &username) {
        Ok(batch) => batch,
        Err(TelegramError::Api(error)) => {
            return match error {
                ApiError::RateLimited { retry_after } => {
                    Ok(StepOut { state: state_bytes.to_vec(), effects: vec![Effect::PollAfter(retry_ms(retry_after))], warnings: Vec::new() })
                }
                other => Err(api_failure(&other)),
            };
        }
        Err(other) => return Err(other.into()),
    };
    if batch.next_offset.is_some() {
        state.offset = batch.next_offset;
    }
    let warnings = batch.malformed.iter().map(|id| format!("update {id} could not be parsed; skipped past it")).collect();
    Ok(StepOut { state: state.encode(), effects: batch.events.into_iter().map(Effect::Emit).collect(), warnings })
}

fn retry_ms(seconds: u64) -> u32 {
    u32::try_from(seconds.saturating_mul(1000)).unwrap_or(u32::MAX)
}

/// `on-webhook`: one update, verified by the host; emitted like a polled
/// one and answered 200 (Telegram redelivers on anything else).
pub fn on_webhook(body: &[u8], state: &[u8]) -> Result<StepOut, Failure> {
    let decoded = State::decode(state)?;
    let username = decoded.bot_username.clone().unwrap_or_default();
    let mut effects: Vec<Effect> = parse_webhook(body, &username)?.into_iter().map(Effect::Emit).collect();
    effects.push(Effect::RespondOk);
    Ok(StepOut { state: state.to_vec(), effects, warnings: Vec::new() })
}

/// Where a reply goes: the host hands back the `chat-id` and `thread` the
/// inbound message carried.
pub fn conversation(chat_id: &str, thread: Option<&str>) -> Result<Conversation, Failure> {
    let bad = |what: &str, text: &str| Failure::Fatal(format!("not a Telegram {what}: {text:?}"));
    let chat_id = chat_id.parse().map_err(|_| bad("chat id", chat_id))?;
    let topic = thread.map(|t| t.parse().map_err(|_| bad("topic id", t))).transpose()?;
    Ok(Conversation { chat_id, topic })
}

/// A piece of media of a reply: its `kind` (`photo` is sent as a photo,
/// anything else as a document) and a file id Telegram has or an HTTPS URL
/// it can fetch. Uploading bytes is the host's (see [`api::send_media`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutMedia {
    /// `photo`, `document`, ...
    pub kind: String,
    /// File id or URL.
    pub reference: String,
}

/// The requests of a reply, in order: the `sendMessage` parts (Markdown
/// rendered as Telegram HTML and split to 4096 UTF-16 units; only the first
/// part replies to `reply_to`), then one `sendPhoto`/`sendDocument` per
/// media; all into the topic.
pub fn deliver_requests(
    api_base: &str,
    to: &Conversation,
    markdown: &str,
    reply_to: Option<&str>,
    media: &[OutMedia],
) -> Result<Vec<HttpRequest>, Failure> {
    let reply_to = reply_to.map(|r| r.parse::<i64>().map_err(|_| Failure::Fatal(format!("not a Telegram message id: {r:?}")))).transpose()?;
    let texts = render_reply(markdown).into_iter().enumerate().map(|(i, part)| api::send_message(api_base, to, &part, if i == 0 { reply_to } else { None }));
    let files = media.iter().map(|m| api::send_media(api_base, to, m.kind == "photo", &m.reference, None));
    Ok(texts.chain(files).collect())
}

/// The same part as plain text, for when Telegram refused its markup.
pub fn plain_retry(request: &HttpRequest) -> Option<HttpRequest> {
    let mut body: Value = request.json()?;
    let html = body.get("text")?.as_str()?.to_string();
    body["text"] = json!(crate::split::html_visible_text(&html));
    body.as_object_mut()?.remove("parse_mode");
    Some(HttpRequest { body: Some(body.to_string()), ..request.clone() })
}

/// The outcome of one Bot API call made by the component itself.
pub fn call_result(status: u16, body: &[u8]) -> Result<Value, ApiError> {
    api_result(status, body)
}

/// A failure of `deliver` and friends: these see no state, so a 429 can only
/// be transient (the host's backoff and `rate_per_chat_per_min` apply).
pub fn delivery_failure(error: &ApiError) -> Failure {
    api_failure(error)
}

/// The download of a file from its `getFile` result. The `file_path` is
/// Telegram's (`photos/file_12.jpg`): it only ever goes into the URL, and a
/// path that could leave the file root or carry a query is refused.
pub fn download_request(api_base: &str, get_file_result: &Value) -> Result<HttpRequest, Failure> {
    let path = api::file_path(get_file_result).map_err(|e| Failure::Transient(e.to_string()))?;
    let unsafe_path = path.is_empty()
        || path.len() > 512
        || path.split('/').any(|segment| segment == "..")
        || path.chars().any(|c| c.is_control() || matches!(c, '?' | '#' | '\\' | ' '));
    if unsafe_path {
        return Err(Failure::Transient(format!("refusing the file path Telegram gave: {path:?}")));
    }
    Ok(api::download_file(api_base, &path))
}

/// One message of a streamed reply: its id and a digest of the text it
/// shows. The `stream-update` handle is the list of them, so a call, which
/// sees no state, knows which messages exist and which would not change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The Telegram message id.
    pub id: i64,
    /// [`digest`] of the part it shows.
    pub digest: u64,
}

/// The handle of a streamed reply: `id:digest` entries joined by `;`
/// (digest in hex).
pub fn format_handle(shown: &[Shown]) -> String {
    shown.iter().map(|s| format!("{}:{:016x}", s.id, s.digest)).collect::<Vec<_>>().join(";")
}

/// The entries of a handle the host gave back (`None`: a new reply).
pub fn parse_handle(handle: Option<&str>) -> Result<Vec<Shown>, Failure> {
    let Some(handle) = handle.filter(|h| !h.is_empty()) else { return Ok(Vec::new()) };
    handle
        .split(';')
        .map(|entry| {
            let (id, digest) = entry.split_once(':')?;
            Some(Shown { id: id.parse().ok()?, digest: u64::from_str_radix(digest, 16).ok()? })
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Failure::Fatal(format!("not a stream handle of this adapter: {handle:?}")))
}

/// FNV-1a over the text and its parse mode: equal parts, equal digests
/// (no crate for 10 lines; collisions only cost a skipped edit).
pub fn digest(part: &OutgoingText) -> u64 {
    let mode = part.parse_mode.map_or("", |m| m.as_str());
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in mode.bytes().chain([0]).chain(part.text.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// What one `stream-update` does for a part of the reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamOp {
    /// A new part: `sendMessage`.
    Send(OutgoingText),
    /// A part whose text changed: `editMessageText` of that message.
    Edit(i64, OutgoingText),
    /// Unchanged: no request (Telegram would answer "not modified").
    Keep,
}

/// The requests a `stream-update` makes: the reply so far is rendered and
/// split as a whole reply is ([`render_reply`]); part *i* lives in the
/// *i*th message of the stream. A part that outgrew 4096 units is therefore
/// finished where the split puts it, and the text goes on in a new message
/// (sent the moment it exists); only parts whose text changed are edited.
/// The last call (`done`) is the same computation over the whole reply, so
/// the messages end up exactly as `deliver` would have sent them.
pub fn stream_plan(markdown: &str, shown: &[Shown]) -> Vec<(OutgoingText, StreamOp)> {
    render_reply(markdown)
        .into_iter()
        .enumerate()
        .map(|(i, part)| {
            let op = match shown.get(i) {
                None => StreamOp::Send(part.clone()),
                Some(s) if s.digest == digest(&part) => StreamOp::Keep,
                Some(s) => StreamOp::Edit(s.id, part.clone()),
            };
            (part, op)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(config: Value) -> Vec<u8> {
        start(&config.to_string(), b"").unwrap().state
    }

    #[test]
    fn start_in_poll_mode_deletes_the_webhook_and_polls_now() {
        let step = start(&json!({"api_base": "http://127.0.0.1:9/", "bot_username": "@bot"}).to_string(), b"").unwrap();
        let state = State::decode(&step.state).unwrap();
        assert_eq!(state, State { api_base: "http://127.0.0.1:9".into(), bot_username: Some("bot".into()), offset: None, mode: Mode::Poll });
        assert!(matches!(&step.effects[..], [Effect::Http(r), Effect::PollAfter(0)] if r.url.ends_with("/deleteWebhook")));
    }

    #[test]
    fn the_offset_survives_a_restart_but_not_a_new_server() {
        let mut state = State::decode(&started(json!({"bot_username": "b"}))).unwrap();
        state.offset = Some(42);
        let again = State::decode(&start(r#"{"bot_username":"b"}"#, &state.encode()).unwrap().state).unwrap();
        assert_eq!(again.offset, Some(42));
        let moved = State::decode(&start(r#"{"api_base":"http://127.0.0.1:1"}"#, &state.encode()).unwrap().state).unwrap();
        assert_eq!((moved.offset, moved.bot_username), (None, None));
    }

    #[test]
    fn a_bad_config_or_state_is_fatal() {
        assert!(matches!(start(r#"{"api_base":"ftp://x"}"#, b""), Err(Failure::Fatal(_))));
        assert!(matches!(start(r#"{"mode":"webhook"}"#, b""), Err(Failure::Fatal(m)) if m.contains("webhook_url")));
        assert!(matches!(poll_request(b"not json"), Err(Failure::Fatal(_))));
    }

    #[test]
    fn webhook_mode_sets_the_webhook_with_the_secret_placeholder() {
        let step = start(r#"{"mode":"webhook","webhook_url":"https://me.example/telegram"}"#, b"").unwrap();
        let [Effect::Http(request)] = &step.effects[..] else { panic!("{:?}", step.effects) };
        assert!(request.url.ends_with("/setWebhook"));
        assert_eq!(request.json().unwrap()["secret_token"], WEBHOOK_SECRET_PLACEHOLDER);
    }

    #[test]
    fn get_me_comes_first_when_the_username_is_unknown() {
        let state = started(json!({}));
        let (request, _) = poll_request(&state).unwrap();
        assert!(request.url.ends_with("/getMe"), "{}", request.url);
        let me = json!({"ok": true, "result": {"id": 1, "is_bot": true, "username": "the_bot"}}).to_string();
        let step = poll_response(200, me.as_bytes(), &state).unwrap();
        let (request, timeout_ms) = poll_request(&step.state).unwrap();
        assert!(request.url.contains("/getUpdates?timeout=50&allowed_updates="), "{}", request.url);
        assert!(request.url.ends_with("&limit=50"));
        assert_eq!(timeout_ms, 60_000);
    }

    #[test]
    fn a_429_waits_with_the_state_unchanged_and_401_is_fatal() {
        let state = started(json!({"bot_username": "b"}));
        let body = json!({"ok": false, "error_code": 429, "description": "Too Many Requests", "parameters": {"retry_after": 7}});
        let step = poll_response(429, body.to_string().as_bytes(), &state).unwrap();
        assert_eq!(step.state, state);
        assert_eq!(step.effects, [Effect::PollAfter(7000)]);
        let body = json!({"ok": false, "error_code": 401, "description": "Unauthorized"});
        assert!(matches!(poll_response(401, body.to_string().as_bytes(), &state), Err(Failure::Fatal(_))));
        assert!(matches!(poll_response(502, b"<html>bad gateway</html>", &state), Err(Failure::Transient(_))));
    }

    #[test]
    fn a_refused_markup_is_resent_as_its_visible_text() {
        let to = Conversation { chat_id: 5, topic: Some(3) };
        let requests = deliver_requests("http://x", &to, "**bold** & co", Some("9"), &[]).unwrap();
        let plain = plain_retry(&requests[0]).unwrap().json().unwrap();
        assert_eq!(plain["text"], "bold & co");
        assert!(plain.get("parse_mode").is_none());
        assert_eq!(plain["message_thread_id"], 3);
    }

    #[test]
    fn media_follow_the_text_as_photo_or_document() {
        let to = Conversation { chat_id: 5, topic: None };
        let media = [OutMedia { kind: "photo".into(), reference: "P1".into() }, OutMedia { kind: "document".into(), reference: "D1".into() }];
        let requests = deliver_requests("http://x", &to, "see these", None, &media).unwrap();
        let urls: Vec<&str> = requests.iter().map(|r| r.url.rsplit('/').next().unwrap()).collect();
        assert_eq!(urls, ["sendMessage", "sendPhoto", "sendDocument"]);
        assert_eq!(requests[1].json().unwrap()["photo"], "P1");
        assert_eq!(requests[2].json().unwrap()["document"], "D1");
        assert!(deliver_requests("http://x", &to, "", None, &media).unwrap().len() == 2, "media alone, no empty text");
    }

    #[test]
    fn a_stream_edits_only_what_changed_and_goes_on_in_a_new_message() {
        let first = stream_plan("Hello", &[]);
        assert!(matches!(&first[..], [(_, StreamOp::Send(p))] if p.text == "Hello"));
        let shown = vec![Shown { id: 7, digest: digest(&first[0].0) }];
        let handle = format_handle(&shown);
        assert_eq!(parse_handle(Some(&handle)).unwrap(), shown, "the handle round-trips");
        assert!(matches!(&stream_plan("Hello", &shown)[..], [(_, StreamOp::Keep)]), "unchanged: no edit");
        assert!(matches!(&stream_plan("Hello there", &shown)[..], [(_, StreamOp::Edit(7, p))] if p.text == "Hello there"));
        // Past 4096 units the first message is finished and a second begins.
        let long = format!("{}\n\n{}", "a".repeat(4000), "b".repeat(300));
        let plan = stream_plan(&long, &shown);
        assert_eq!(plan.len(), 2, "{plan:?}");
        assert!(matches!(&plan[0].1, StreamOp::Edit(7, p) if p.text == "a".repeat(4000)));
        assert!(matches!(&plan[1].1, StreamOp::Send(p) if p.text == "b".repeat(300)));
        assert!(matches!(parse_handle(Some("7:zz")), Err(Failure::Fatal(_))));
        assert_eq!(parse_handle(None).unwrap(), vec![]);
    }

    #[test]
    fn a_poison_update_is_passed_over_with_a_warning() {
        let state = State { api_base: "http://x".into(), bot_username: Some("bot".into()), offset: Some(5), mode: Mode::Poll }.encode();
        let body = json!({"ok": true, "result": [
            {"update_id": 5, "message": {"message_id": "not a number", "chat": 7}},
            {"update_id": 6, "message": {"message_id": 1, "date": 0, "chat": {"id": 9, "type": "private"}, "from": {"id": 2, "is_bot": false, "first_name": "A"}, "text": "hi"}}
        ]});
        let step = poll_response(200, body.to_string().as_bytes(), &state).unwrap();
        assert_eq!(State::decode(&step.state).unwrap().offset, Some(7), "past the poison update");
        assert_eq!(step.effects.len(), 1, "the good one is emitted");
        assert_eq!(step.warnings, ["update 5 could not be parsed; skipped past it"]);
    }

    #[test]
    fn a_download_is_built_from_get_file_and_odd_paths_are_refused() {
        let ok = download_request("https://api.telegram.org", &json!({"file_id": "f", "file_path": "photos/file_1.jpg"})).unwrap();
        assert_eq!(ok.url, "https://api.telegram.org/file/bot{{secret:bot_token}}/photos/file_1.jpg");
        for bad in ["../../etc/passwd", "a/../b", "x?y", "x#y", ""] {
            assert!(download_request("https://api.telegram.org", &json!({"file_path": bad})).is_err(), "{bad}");
        }
        assert!(download_request("https://api.telegram.org", &json!({"file_id": "f"})).is_err(), "no file_path: over 20 MB");
    }
}
