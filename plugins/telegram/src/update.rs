//! Inbound: a `getUpdates` answer (or one webhook update) into
//! [`InboundEvent`]s, and the next offset.
//!
//! Why these rules:
//! - The event id is the `update_id`: the host deduplicates on it, so an
//!   update seen twice (a crash between poll and commit) reaches the agent
//!   once.
//! - The next offset is the highest `update_id` of the batch + 1, counting
//!   updates the adapter does not emit (a callback query, a malformed
//!   update): otherwise one odd update is fetched forever and the poller
//!   stalls.
//! - A forum topic is its own session (`telegram:<chat>:topic:<t>`), but
//!   only when Telegram says it is one (`is_topic_message`): in ordinary
//!   groups `message_thread_id` also marks reply threads, which are not
//!   separate conversations.
//! - Group policy needs three facts the host cannot see without parsing:
//!   the bot was mentioned (`@bot`, from the `mention` entities, offsets in
//!   UTF-16 units), the message replies to the bot, and it is a command for
//!   this bot (`/start`, or `/start@bot`; `/start@otherbot` is not ours).
//!   In a forum every message "replies" to the topic's creation message;
//!   that does not count as a reply to the bot.

use serde::Deserialize;
use serde_json::Value;

use crate::error::{TelegramError, api_result};

/// Where a message lives: a chat, and the forum topic within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Conversation {
    /// The chat id (negative for groups and channels).
    pub chat_id: i64,
    /// The forum topic (`message_thread_id`).
    pub topic: Option<i64>,
}

impl Conversation {
    /// `telegram:<chat>` or `telegram:<chat>:topic:<t>`.
    pub fn session_key(&self) -> String {
        match self.topic {
            Some(topic) => format!("telegram:{}:topic:{topic}", self.chat_id),
            None => format!("telegram:{}", self.chat_id),
        }
    }

    /// The conversation of a session key made by [`session_key`](Self::session_key).
    pub fn from_session_key(key: &str) -> Result<Conversation, TelegramError> {
        let bad = || TelegramError::SessionKey(key.to_string());
        let rest = key.strip_prefix("telegram:").ok_or_else(bad)?;
        let (chat, topic) = match rest.split_once(":topic:") {
            Some((chat, topic)) => (chat, Some(topic.parse().map_err(|_| bad())?)),
            None => (rest, None),
        };
        Ok(Conversation { chat_id: chat.parse().map_err(|_| bad())?, topic })
    }
}

/// The kind of chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatKind {
    /// A one-to-one chat with the bot.
    Private,
    /// A basic group.
    Group,
    /// A supergroup (forums are supergroups).
    Supergroup,
    /// A channel.
    Channel,
}

/// Who sent a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sender {
    /// The user id (or the chat id for a message sent on behalf of a chat).
    pub id: i64,
    /// `@username` without the `@`.
    pub username: Option<String>,
    /// First and last name, or the chat's title.
    pub name: String,
    /// Whether the sender is a bot.
    pub is_bot: bool,
}

/// The kind of an attachment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaKind {
    /// A photo (the largest size Telegram offers).
    Photo,
    /// Any file sent as a document.
    Document,
    /// A voice note.
    Voice,
    /// An audio file.
    Audio,
    /// A video.
    Video,
}

/// An attachment, to fetch with `getFile`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Media {
    /// What it is.
    pub kind: MediaKind,
    /// For `getFile`.
    pub file_id: String,
    /// The file's name, when the sender's client gave one.
    pub file_name: Option<String>,
    /// Its MIME type, when known.
    pub mime_type: Option<String>,
    /// Its size in bytes, when known (the host caps downloads at 20 MB, the
    /// Bot API's own limit).
    pub file_size: Option<u64>,
}

/// A bot command addressed to this bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// The name without `/` and `@bot` (`start`).
    pub name: String,
    /// The rest of the text, trimmed.
    pub args: String,
}

/// One message for the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundEvent {
    /// The `update_id` as text: the host's deduplication key.
    pub event_id: String,
    /// The `update_id`.
    pub update_id: i64,
    /// Chat and topic.
    pub conversation: Conversation,
    /// `telegram:<chat>` or `telegram:<chat>:topic:<t>`.
    pub session_key: String,
    /// The kind of chat.
    pub chat_kind: ChatKind,
    /// Who sent it.
    pub sender: Sender,
    /// The message id (to reply to).
    pub message_id: i64,
    /// The text, or the media caption; empty when there is neither.
    pub text: String,
    /// Attachments.
    pub media: Vec<Media>,
    /// `@bot` appears in the text.
    pub mentions_bot: bool,
    /// The message replies to one of the bot's messages.
    pub reply_to_bot: bool,
    /// A command for this bot.
    pub command: Option<Command>,
    /// The message it replies to, if any.
    pub reply_to_message_id: Option<i64>,
    /// An edit of an earlier message (`edited_message`).
    pub edited: bool,
}

impl InboundEvent {
    /// A one-to-one chat with the bot.
    pub fn is_direct(&self) -> bool {
        self.chat_kind == ChatKind::Private
    }
}

/// What one `getUpdates` answer yields.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Batch {
    /// The messages to emit, in update order.
    pub events: Vec<InboundEvent>,
    /// The offset for the next `getUpdates`; `None` when the batch was
    /// empty (keep the current one).
    pub next_offset: Option<i64>,
    /// Update ids that carried nothing to emit (other update kinds, service
    /// messages, updates that did not parse); confirmed all the same.
    pub skipped: Vec<i64>,
    /// Those of `skipped` that did not parse ("poison" updates): passed
    /// over so one bad update cannot stall the channel, and worth a
    /// warning.
    pub malformed: Vec<i64>,
}

/// Parses a `getUpdates` answer (HTTP `status` and `body`) for the bot
/// `bot_username` (with or without `@`). A failed call is the classified
/// [`ApiError`](crate::error::ApiError).
pub fn parse_get_updates(status: u16, body: &[u8], bot_username: &str) -> Result<Batch, TelegramError> {
    let result = api_result(status, body)?;
    let updates = result.as_array().ok_or_else(|| TelegramError::Malformed("getUpdates result is not a list".into()))?;
    let mut batch = Batch { next_offset: next_offset(None, updates), ..Batch::default() };
    for update in updates {
        match parse_update(update, bot_username) {
            Some(event) => batch.events.push(event),
            None => {
                let id = update.get("update_id").and_then(Value::as_i64);
                batch.skipped.extend(id);
                if serde_json::from_value::<Update>(update.clone()).is_err() {
                    batch.malformed.extend(id);
                }
            }
        }
    }
    Ok(batch)
}

/// The body of a webhook request (its secret header already checked by the
/// host) as an event, or `None` when it carries no message for the agent.
pub fn parse_webhook(body: &[u8], bot_username: &str) -> Result<Option<InboundEvent>, TelegramError> {
    let update: Value = serde_json::from_slice(body).map_err(|e| TelegramError::Malformed(format!("webhook body is not JSON: {e}")))?;
    Ok(parse_update(&update, bot_username))
}

/// The offset after `updates`: the highest `update_id` + 1, or `current`
/// when there are none (never lower than `current`).
pub fn next_offset(current: Option<i64>, updates: &[Value]) -> Option<i64> {
    let highest = updates.iter().filter_map(|u| u.get("update_id").and_then(Value::as_i64)).max();
    match (current, highest) {
        (Some(current), Some(highest)) => Some(current.max(highest + 1)),
        (None, Some(highest)) => Some(highest + 1),
        (current, None) => current,
    }
}

/// One `Update` (from a batch or a webhook request) as an event, or `None`
/// when it carries no message for the agent.
pub fn parse_update(update: &Value, bot_username: &str) -> Option<InboundEvent> {
    let update: Update = serde_json::from_value(update.clone()).ok()?;
    let bot = bot_username.trim_start_matches('@');
    let (message, edited) = match (update.message, update.edited_message, update.channel_post, update.edited_channel_post) {
        (Some(m), ..) => (m, false),
        (None, Some(m), ..) => (m, true),
        (None, None, Some(m), _) => (m, false),
        (None, None, None, Some(m)) => (m, true),
        (None, None, None, None) => return None,
    };
    let (text, entities) = match (message.text, message.caption) {
        (Some(text), _) => (text, message.entities),
        (None, Some(caption)) => (caption, message.caption_entities),
        (None, None) => (String::new(), Vec::new()),
    };
    let media = media(message.photo, message.document, message.voice, message.audio, message.video);
    if text.is_empty() && media.is_empty() {
        // Service messages: joins, pins, topic creation, …
        return None;
    }
    let chat_kind = match message.chat.kind.as_str() {
        "private" => ChatKind::Private,
        "group" => ChatKind::Group,
        "channel" => ChatKind::Channel,
        _ => ChatKind::Supergroup,
    };
    let sender = match (message.from, message.sender_chat) {
        (Some(user), _) => Sender {
            id: user.id,
            name: [user.first_name.as_deref(), user.last_name.as_deref()].into_iter().flatten().collect::<Vec<_>>().join(" "),
            username: user.username,
            is_bot: user.is_bot,
        },
        (None, Some(chat)) => Sender { id: chat.id, username: chat.username, name: chat.title.unwrap_or_default(), is_bot: false },
        (None, None) => Sender { id: message.chat.id, username: None, name: String::new(), is_bot: false },
    };
    let topic = message.message_thread_id.filter(|_| message.is_topic_message);
    let conversation = Conversation { chat_id: message.chat.id, topic };
    let reply = message.reply_to_message.filter(|r| r.forum_topic_created.is_none());
    let reply_to_bot = reply
        .as_ref()
        .and_then(|r| r.from.as_ref())
        .is_some_and(|u| u.is_bot && u.username.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(bot)));
    let mentions_bot = mentions(&text, &entities, bot);
    let command = command(&text, &entities, bot);
    Some(InboundEvent {
        event_id: update.update_id.to_string(),
        update_id: update.update_id,
        session_key: conversation.session_key(),
        conversation,
        chat_kind,
        sender,
        message_id: message.message_id,
        text,
        media,
        mentions_bot,
        reply_to_bot,
        command,
        reply_to_message_id: reply.map(|r| r.message_id),
        edited,
    })
}

fn media(
    photo: Vec<PhotoSize>,
    document: Option<FileRef>,
    voice: Option<FileRef>,
    audio: Option<FileRef>,
    video: Option<FileRef>,
) -> Vec<Media> {
    let mut out = Vec::new();
    // Sizes come smallest first; the largest is the one worth reading.
    if let Some(largest) = photo.into_iter().max_by_key(|p| (p.width * p.height, p.file_size.unwrap_or(0))) {
        out.push(Media { kind: MediaKind::Photo, file_id: largest.file_id, file_name: None, mime_type: Some("image/jpeg".into()), file_size: largest.file_size });
    }
    for (kind, file) in [(MediaKind::Document, document), (MediaKind::Voice, voice), (MediaKind::Audio, audio), (MediaKind::Video, video)] {
        if let Some(file) = file {
            out.push(Media { kind, file_id: file.file_id, file_name: file.file_name, mime_type: file.mime_type, file_size: file.file_size });
        }
    }
    out
}

/// The part of `text` an entity covers (offsets in UTF-16 code units).
pub fn entity_text(text: &str, offset: usize, length: usize) -> Option<String> {
    let units: Vec<u16> = text.encode_utf16().collect();
    let slice = units.get(offset..offset.checked_add(length)?)?;
    String::from_utf16(slice).ok()
}

/// Whether `@bot` is mentioned: by the `mention` entities when Telegram sent
/// any, else by the words of the text.
fn mentions(text: &str, entities: &[Entity], bot: &str) -> bool {
    let is_bot = |word: &str| word.strip_prefix('@').is_some_and(|name| name.eq_ignore_ascii_case(bot));
    if !entities.is_empty() {
        return entities.iter().any(|e| match e.kind.as_str() {
            "mention" => entity_text(text, e.offset, e.length).is_some_and(|w| is_bot(&w)),
            "text_mention" => e.user.as_ref().is_some_and(|u| u.username.as_deref().is_some_and(|n| n.eq_ignore_ascii_case(bot))),
            _ => false,
        });
    }
    text.split(|c: char| c.is_whitespace() || matches!(c, ',' | '.' | '!' | '?' | ':' | ';' | '(' | ')')).any(is_bot)
}

/// The command at the start of the text, when it is for this bot.
fn command(text: &str, entities: &[Entity], bot: &str) -> Option<Command> {
    let word = if entities.is_empty() {
        text.split_whitespace().next().filter(|w| text.starts_with('/') && w.len() > 1)?.to_string()
    } else {
        let e = entities.iter().find(|e| e.kind == "bot_command" && e.offset == 0)?;
        entity_text(text, e.offset, e.length)?
    };
    let word = word.strip_prefix('/')?;
    let (name, target) = match word.split_once('@') {
        Some((name, target)) => (name, Some(target)),
        None => (word, None),
    };
    if name.is_empty() || target.is_some_and(|t| !t.eq_ignore_ascii_case(bot)) {
        return None;
    }
    let args = text.trim_start().strip_prefix('/').and_then(|t| t.get(word.len()..)).unwrap_or_default().trim();
    Some(Command { name: name.to_string(), args: args.to_string() })
}

// The Bot API objects, as much of them as the adapter reads.

#[derive(Deserialize)]
struct Update {
    update_id: i64,
    message: Option<Message>,
    edited_message: Option<Message>,
    channel_post: Option<Message>,
    edited_channel_post: Option<Message>,
}

#[derive(Deserialize)]
struct Message {
    message_id: i64,
    chat: Chat,
    from: Option<User>,
    sender_chat: Option<Chat>,
    text: Option<String>,
    caption: Option<String>,
    #[serde(default)]
    entities: Vec<Entity>,
    #[serde(default)]
    caption_entities: Vec<Entity>,
    message_thread_id: Option<i64>,
    #[serde(default)]
    is_topic_message: bool,
    reply_to_message: Option<Box<Reply>>,
    #[serde(default)]
    photo: Vec<PhotoSize>,
    document: Option<FileRef>,
    voice: Option<FileRef>,
    audio: Option<FileRef>,
    video: Option<FileRef>,
}

#[derive(Deserialize)]
struct Reply {
    message_id: i64,
    from: Option<User>,
    forum_topic_created: Option<Value>,
}

#[derive(Deserialize)]
struct Chat {
    id: i64,
    #[serde(rename = "type")]
    kind: String,
    title: Option<String>,
    username: Option<String>,
}

#[derive(Deserialize)]
struct User {
    id: i64,
    #[serde(default)]
    is_bot: bool,
    first_name: Option<String>,
    last_name: Option<String>,
    username: Option<String>,
}

#[derive(Deserialize)]
struct Entity {
    #[serde(rename = "type")]
    kind: String,
    offset: usize,
    length: usize,
    user: Option<User>,
}

#[derive(Deserialize)]
struct PhotoSize {
    file_id: String,
    #[serde(default)]
    width: u64,
    #[serde(default)]
    height: u64,
    file_size: Option<u64>,
}

#[derive(Deserialize)]
struct FileRef {
    file_id: String,
    file_name: Option<String>,
    mime_type: Option<String>,
    file_size: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BOT: &str = "mybot";

    fn message(update_id: i64, message: Value) -> Value {
        json!({"update_id": update_id, "message": message})
    }

    fn private(text: &str) -> Value {
        json!({"message_id": 5, "date": 0, "chat": {"id": 42, "type": "private"},
            "from": {"id": 7, "is_bot": false, "first_name": "Ada", "last_name": "L", "username": "ada"}, "text": text})
    }

    fn answer(updates: Vec<Value>) -> Vec<u8> {
        json!({"ok": true, "result": updates}).to_string().into_bytes()
    }

    #[test]
    fn a_private_text_becomes_an_event() {
        let batch = parse_get_updates(200, &answer(vec![message(10, private("hello"))]), BOT).unwrap();
        assert_eq!(batch.next_offset, Some(11));
        let event = &batch.events[0];
        assert_eq!(event.event_id, "10");
        assert_eq!(event.session_key, "telegram:42");
        assert_eq!(event.sender, Sender { id: 7, username: Some("ada".into()), name: "Ada L".into(), is_bot: false });
        assert_eq!((event.text.as_str(), event.message_id, event.is_direct()), ("hello", 5, true));
        assert!(!event.mentions_bot && !event.reply_to_bot && event.command.is_none() && !event.edited);
    }

    #[test]
    fn the_offset_passes_updates_that_emit_nothing() {
        let updates = vec![
            message(20, private("a")),
            json!({"update_id": 23, "callback_query": {"id": "x"}}),
            json!({"update_id": 21, "message": "not an object"}),
            message(22, json!({"message_id": 1, "date": 0, "chat": {"id": -1, "type": "group"}, "new_chat_members": []})),
        ];
        let batch = parse_get_updates(200, &answer(updates), BOT).unwrap();
        assert_eq!(batch.events.len(), 1);
        assert_eq!(batch.skipped, [23, 21, 22]);
        assert_eq!(batch.malformed, [21], "only the one that did not parse");
        assert_eq!(batch.next_offset, Some(24));
        let empty = parse_get_updates(200, &answer(vec![]), BOT).unwrap();
        assert_eq!(empty.next_offset, None);
        assert_eq!(next_offset(Some(30), &[]), Some(30));
        assert_eq!(next_offset(Some(30), &[json!({"update_id": 5})]), Some(30), "never goes back");
    }

    #[test]
    fn a_failed_poll_is_a_classified_error() {
        let body = json!({"ok": false, "error_code": 409, "description": "Conflict: terminated by other getUpdates request"});
        let err = parse_get_updates(409, body.to_string().as_bytes(), BOT).unwrap_err();
        assert!(matches!(err, TelegramError::Api(ref e) if e.is_fatal()), "{err}");
        assert!(matches!(parse_get_updates(200, br#"{"ok":true,"result":{}}"#, BOT), Err(TelegramError::Malformed(_))));
    }

    #[test]
    fn forum_topics_are_sessions_of_their_own_reply_threads_are_not() {
        let topic = json!({"message_id": 9, "date": 0, "chat": {"id": -100, "type": "supergroup", "is_forum": true},
            "from": {"id": 1, "first_name": "A"}, "text": "hi", "message_thread_id": 77, "is_topic_message": true,
            "reply_to_message": {"message_id": 77, "date": 0, "chat": {"id": -100, "type": "supergroup"},
                "from": {"id": 99, "is_bot": true, "username": "mybot"}, "forum_topic_created": {"name": "t"}}});
        let event = parse_update(&message(1, topic), BOT).unwrap();
        assert_eq!(event.session_key, "telegram:-100:topic:77");
        assert_eq!(event.conversation, Conversation { chat_id: -100, topic: Some(77) });
        assert!(!event.reply_to_bot, "the topic's creation message is no reply");
        assert_eq!(event.chat_kind, ChatKind::Supergroup);
        let thread = json!({"message_id": 9, "date": 0, "chat": {"id": -100, "type": "supergroup"},
            "from": {"id": 1, "first_name": "A"}, "text": "hi", "message_thread_id": 3});
        assert_eq!(parse_update(&message(2, thread), BOT).unwrap().session_key, "telegram:-100");
    }

    #[test]
    fn session_keys_round_trip() {
        for conversation in [Conversation { chat_id: 42, topic: None }, Conversation { chat_id: -1001, topic: Some(5) }] {
            assert_eq!(Conversation::from_session_key(&conversation.session_key()).unwrap(), conversation);
        }
        for bad in ["slack:1", "telegram:", "telegram:x", "telegram:1:topic:", "telegram:1:topic:y"] {
            assert!(Conversation::from_session_key(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn mentions_replies_and_commands_against_the_bot_username() {
        let group = |text: &str, entities: Value, reply_from: Option<Value>| {
            let mut m = json!({"message_id": 3, "date": 0, "chat": {"id": -5, "type": "group"},
                "from": {"id": 1, "first_name": "A"}, "text": text, "entities": entities});
            if let Some(from) = reply_from {
                m["reply_to_message"] = json!({"message_id": 2, "date": 0, "chat": {"id": -5, "type": "group"}, "from": from});
            }
            parse_update(&message(1, m), BOT).unwrap()
        };
        // Offsets in UTF-16: the emoji takes two units.
        let e = group("😀 hey @MyBot!", json!([{"type": "mention", "offset": 7, "length": 6}]), None);
        assert!(e.mentions_bot);
        let e = group("hey @mybotx", json!([{"type": "mention", "offset": 4, "length": 7}]), None);
        assert!(!e.mentions_bot);
        // Without entities, the words of the text.
        let e = group("ping @mybot, please", json!([]), None);
        assert!(e.mentions_bot);
        let e = group("/start@mybot now", json!([{"type": "bot_command", "offset": 0, "length": 12}]), None);
        assert_eq!(e.command, Some(Command { name: "start".into(), args: "now".into() }));
        let e = group("/start@otherbot", json!([{"type": "bot_command", "offset": 0, "length": 15}]), None);
        assert_eq!(e.command, None);
        let e = group("/help", json!([]), None);
        assert_eq!(e.command, Some(Command { name: "help".into(), args: String::new() }));
        let e = group("a /help", json!([]), None);
        assert_eq!(e.command, None);
        let e = group("yes", json!([]), Some(json!({"id": 99, "is_bot": true, "username": "mybot"})));
        assert!(e.reply_to_bot);
        assert_eq!(e.reply_to_message_id, Some(2));
        let e = group("yes", json!([]), Some(json!({"id": 8, "is_bot": false, "username": "mybot"})));
        assert!(!e.reply_to_bot, "a user who took the name is not the bot");
    }

    #[test]
    fn photos_and_documents_carry_file_ids_and_captions() {
        let m = json!({"message_id": 1, "date": 0, "chat": {"id": 1, "type": "private"}, "from": {"id": 1, "first_name": "A"},
            "caption": "look @mybot", "caption_entities": [{"type": "mention", "offset": 5, "length": 6}],
            "photo": [{"file_id": "small", "width": 90, "height": 60, "file_size": 10},
                      {"file_id": "large", "width": 1280, "height": 960, "file_size": 900}]});
        let e = parse_update(&message(1, m), BOT).unwrap();
        assert_eq!((e.text.as_str(), e.mentions_bot), ("look @mybot", true));
        assert_eq!(e.media.len(), 1);
        assert_eq!((e.media[0].kind, e.media[0].file_id.as_str()), (MediaKind::Photo, "large"));
        let m = json!({"message_id": 1, "date": 0, "chat": {"id": 1, "type": "private"}, "from": {"id": 1, "first_name": "A"},
            "document": {"file_id": "doc1", "file_name": "a.pdf", "mime_type": "application/pdf", "file_size": 3}});
        let e = parse_update(&message(1, m), BOT).unwrap();
        assert_eq!(e.text, "");
        assert_eq!(
            e.media,
            [Media { kind: MediaKind::Document, file_id: "doc1".into(), file_name: Some("a.pdf".into()), mime_type: Some("application/pdf".into()), file_size: Some(3) }]
        );
    }

    #[test]
    fn edits_and_channel_posts() {
        let edited = json!({"update_id": 4, "edited_message": private("fixed")});
        let e = parse_update(&edited, BOT).unwrap();
        assert!(e.edited);
        assert_eq!(e.text, "fixed");
        let post = json!({"update_id": 5, "channel_post": {"message_id": 1, "date": 0,
            "chat": {"id": -200, "type": "channel", "title": "News"}, "sender_chat": {"id": -200, "type": "channel", "title": "News"}, "text": "x"}});
        let e = parse_update(&post, BOT).unwrap();
        assert_eq!((e.chat_kind, e.sender.id, e.sender.name.as_str()), (ChatKind::Channel, -200, "News"));
    }

    #[test]
    fn webhook_bodies_parse_like_polled_updates() {
        let body = message(77, private("via hook")).to_string();
        let event = parse_webhook(body.as_bytes(), BOT).unwrap().unwrap();
        assert_eq!((event.update_id, event.text.as_str()), (77, "via hook"));
        assert_eq!(parse_webhook(br#"{"update_id": 1, "poll": {}}"#, BOT), Ok(None));
        assert!(matches!(parse_webhook(b"not json", BOT), Err(TelegramError::Malformed(_))));
    }

    #[test]
    fn entity_text_counts_utf16_units() {
        assert_eq!(entity_text("😀 @bot", 3, 4).as_deref(), Some("@bot"));
        assert_eq!(entity_text("ab", 1, 5), None);
        // An offset inside a surrogate pair is not text.
        assert_eq!(entity_text("😀", 1, 1), None);
    }
}
