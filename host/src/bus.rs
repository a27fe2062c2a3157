//! The message bus between channels and the agent (spec §2).
//!
//! Channels publish [`InboundMessage`]s and consume [`OutboundMessage`]s; the
//! agent loop does the opposite. Neither side knows the other: a channel never
//! calls the model, the loop never knows a platform.

use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::{Mutex, mpsc};

use crate::durable::{Accepted, Inbox, InboxRef};

/// The channel name reserved for internal messages (subagent results,
/// continuations, re-published leftovers keep their own channel).
pub const SYSTEM_CHANNEL: &str = "system";

/// Inbound metadata key (internal: clients cannot set it, see
/// [`InboundMessage::from_client`]) holding a JSON array of session
/// messages. A message carrying it runs as an *ephemeral* turn: the session
/// starts from exactly that history and nothing is persisted. The gateway's
/// API uses it when a client sends its own history.
pub const EPHEMERAL_HISTORY: &str = "_ephemeral_history";

/// Outbound metadata key set (to `true`) on the apology of a failed turn,
/// so a front end can tell a failure from a reply (the API answers 500).
pub const TURN_FAILED: &str = "_failed";

/// Outbound metadata key of a turn's reply: how its run ended
/// (`completed`, `max_iterations`, `error`, `tool_error`,
/// `empty_final_response`; `stopped` for `/stop`, `command` for a slash
/// command; nanobot's `_stop_reason`). Internal runs (Dream) decide on it.
pub const STOP_REASON: &str = "_stop_reason";

/// Outbound metadata key of a reply: the turn's token usage,
/// `{"prompt_tokens", "completion_tokens"}`, when the provider reported it.
pub const USAGE: &str = "usage";

/// Outbound metadata keys of a tool's `Progress` event (see
/// `agent::responder`): the tool's name, the model's call id, and the
/// phase: `"started"` (the content is `name(arguments preview)`),
/// `"progress"` (the content is the plugin's `host.progress` text) or
/// `"finished"` (no content; [`PROGRESS_OK`] says how it ended). A
/// `Progress` event without them is the turn's own "running" hint.
pub const PROGRESS_TOOL: &str = "tool";
/// See [`PROGRESS_TOOL`].
pub const PROGRESS_CALL_ID: &str = "call_id";
/// See [`PROGRESS_TOOL`].
pub const PROGRESS_PHASE: &str = "phase";
/// See [`PROGRESS_TOOL`]: `true` when the finished call produced a result.
pub const PROGRESS_OK: &str = "ok";

/// The metadata key of a message's thread or topic within its chat.
pub const THREAD: &str = "thread";

/// A message arriving from a channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InboundMessage {
    /// Channel name (`telegram`, `cli`, `system`).
    pub channel: String,
    /// Who sent it, as the platform names them.
    pub sender_id: String,
    /// The chat it belongs to.
    pub chat_id: String,
    /// The text.
    pub content: String,
    /// When it was sent.
    pub timestamp: DateTime<Utc>,
    /// Attached files, already downloaded by the channel.
    #[serde(default)]
    pub media: Vec<PathBuf>,
    /// Platform extras. Keys starting with `_` are internal: see
    /// [`InboundMessage::from_client`].
    #[serde(default)]
    pub metadata: Map<String, Value>,
    /// Routes the message to another session than `{channel}:{chat_id}`.
    #[serde(default)]
    pub session_key_override: Option<String>,
}

impl InboundMessage {
    /// A message with no media or metadata.
    pub fn new(channel: impl Into<String>, sender_id: impl Into<String>, chat_id: impl Into<String>, content: impl Into<String>) -> Self {
        InboundMessage {
            channel: channel.into(),
            sender_id: sender_id.into(),
            chat_id: chat_id.into(),
            content: content.into(),
            timestamp: Utc::now(),
            media: Vec::new(),
            metadata: Map::new(),
            session_key_override: None,
        }
    }

    /// Sanitises a message built from client input: internal (`_`) metadata
    /// keys are removed so a client cannot set host-only flags.
    pub fn from_client(mut self) -> Self {
        self.metadata.retain(|k, _| !k.starts_with('_'));
        self
    }

    /// Where a reply goes, as `(channel, chat_id)`: the message's own chat,
    /// or for a `system` message the chat its `chat_id` names
    /// (`"<channel>:<chat>"`, `cli` when there is no channel part).
    pub fn reply_route(&self) -> (String, String) {
        if self.channel != SYSTEM_CHANNEL {
            return (self.channel.clone(), self.chat_id.clone());
        }
        match self.chat_id.split_once(':') {
            Some((channel, chat)) => (channel.to_string(), chat.to_string()),
            None => ("cli".to_string(), self.chat_id.clone()),
        }
    }

    /// `session_key_override`, else `{channel}:{chat_id}`.
    pub fn session_key(&self) -> String {
        self.session_key_override.clone().unwrap_or_else(|| format!("{}:{}", self.channel, self.chat_id))
    }
}

/// What an outbound event carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum OutboundKind {
    /// A reply to show. `streamed` means its text already went out as
    /// deltas, so a channel must not send it again.
    Message { streamed: bool },
    /// A progress or tool hint ("running read_file").
    Progress,
    /// A piece of streamed reply text.
    StreamDelta,
    /// The streamed reply is complete.
    StreamEnd,
    /// The turn finished (with or without a reply).
    TurnEnd,
}

/// A message or event for a channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutboundMessage {
    /// Target channel.
    pub channel: String,
    /// Target chat.
    pub chat_id: String,
    /// Text (a reply, a progress line or a delta).
    pub content: String,
    /// The platform message this answers, when known.
    #[serde(default)]
    pub reply_to: Option<String>,
    /// Files to send.
    #[serde(default)]
    pub media: Vec<PathBuf>,
    /// Extras, e.g. `latency_ms` on a reply.
    #[serde(default)]
    pub metadata: Map<String, Value>,
    /// What this is.
    pub kind: OutboundKind,
    /// Called by the channel that delivered this reply (see
    /// [`DeliveryAck`]); not part of the message's data.
    #[serde(skip)]
    pub ack: DeliveryAck,
    /// On a streamed reply's deltas and on the reply itself: the link to
    /// its inbox row's stream (see [`StreamLink`]); not data either.
    #[serde(skip)]
    pub stream: StreamLink,
}

/// Ties a streamed reply to its inbox row, so that a crash never turns one
/// reply into two platform messages: the channel records the platform
/// message the stream created ([`StreamLink::started`]), and a resumed
/// turn's deltas or a reply re-sent after a restart carry that message
/// ([`StreamLink::existing`]), which the channel then edits instead of
/// sending a new one. Empty where there is no row. Compares equal to any
/// other (it is not data).
#[derive(Clone, Default)]
pub struct StreamLink(Option<Arc<StreamLinkInner>>);

struct StreamLinkInner {
    existing: Option<String>,
    record: Box<dyn Fn(&str) + Send + Sync>,
}

impl StreamLink {
    /// A link whose stream already created `existing` (from an earlier
    /// process), recording a new one with `record`.
    pub fn new(existing: Option<String>, record: impl Fn(&str) + Send + Sync + 'static) -> Self {
        StreamLink(Some(Arc::new(StreamLinkInner { existing, record: Box::new(record) })))
    }

    /// The platform message an earlier attempt's stream created.
    pub fn existing(&self) -> Option<&str> {
        self.0.as_ref()?.existing.as_deref()
    }

    /// The stream created platform message `handle`.
    pub fn started(&self, handle: &str) {
        if let Some(inner) = &self.0 {
            (inner.record)(handle);
        }
    }
}

impl std::fmt::Debug for StreamLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(inner) => write!(f, "StreamLink(existing: {:?})", inner.existing),
            None => f.write_str("StreamLink(none)"),
        }
    }
}

impl PartialEq for StreamLink {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// What a front end calls once a reply reached its platform, so the
/// durable outbox ([`crate::durable`]) marks it delivered and does not send
/// it again after a restart. Empty for events and for replies that need no
/// mark. Compares equal to any other (it is not data).
#[derive(Clone, Default)]
pub struct DeliveryAck(Option<Arc<dyn Fn() + Send + Sync>>);

impl DeliveryAck {
    /// An ack that runs `mark` once delivered.
    pub fn new(mark: impl Fn() + Send + Sync + 'static) -> Self {
        DeliveryAck(Some(Arc::new(mark)))
    }

    /// The reply reached its platform (or was refused for good: sending it
    /// again would not help).
    pub fn delivered(&self) {
        if let Some(mark) = &self.0 {
            mark();
        }
    }

    /// Whether anyone waits for the mark.
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }
}

impl std::fmt::Debug for DeliveryAck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "DeliveryAck(set)" } else { "DeliveryAck(none)" })
    }
}

impl PartialEq for DeliveryAck {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl OutboundMessage {
    /// A reply to `chat_id` on `channel`.
    pub fn reply(channel: impl Into<String>, chat_id: impl Into<String>, content: impl Into<String>) -> Self {
        OutboundMessage {
            channel: channel.into(),
            chat_id: chat_id.into(),
            content: content.into(),
            reply_to: None,
            media: Vec::new(),
            metadata: Map::new(),
            kind: OutboundKind::Message { streamed: false },
            ack: DeliveryAck::default(),
            stream: StreamLink::default(),
        }
    }

    /// An event of `kind` for the chat of `to` (and its thread).
    pub fn event(to: &InboundMessage, kind: OutboundKind, content: impl Into<String>) -> Self {
        OutboundMessage { kind, ..OutboundMessage::answer(to, content) }
    }

    /// A reply to `to`: its chat, and its thread or topic (`metadata.thread`,
    /// set by channels with topics), so the answer lands where the question was.
    pub fn answer(to: &InboundMessage, content: impl Into<String>) -> Self {
        let mut reply = OutboundMessage::reply(&to.channel, &to.chat_id, content);
        if let Some(thread) = to.metadata.get(THREAD) {
            reply.metadata.insert(THREAD.into(), thread.clone());
        }
        reply
    }
}

/// Two unbounded queues: inbound (channels → loop) and outbound (loop →
/// channels). Unbounded because a re-published leftover must never block or
/// be dropped; producers are humans and the loop itself.
///
/// With an [`Inbox`] ([`MessageBus::durable`]) every inbound message is
/// recorded there before it is queued: the one place every source (channel,
/// web chat, API, cron, subagent) goes through.
pub struct MessageBus {
    inbox: Option<Arc<Inbox>>,
    inbound_tx: mpsc::UnboundedSender<InboundMessage>,
    inbound_rx: Mutex<mpsc::UnboundedReceiver<InboundMessage>>,
    outbound_tx: mpsc::UnboundedSender<OutboundMessage>,
    outbound_rx: Mutex<mpsc::UnboundedReceiver<OutboundMessage>>,
}

impl Default for MessageBus {
    fn default() -> Self {
        Self::new()
    }
}

impl MessageBus {
    /// Empty queues.
    pub fn new() -> Self {
        let (inbound_tx, inbound_rx) = mpsc::unbounded_channel();
        let (outbound_tx, outbound_rx) = mpsc::unbounded_channel();
        MessageBus { inbox: None, inbound_tx, inbound_rx: Mutex::new(inbound_rx), outbound_tx, outbound_rx: Mutex::new(outbound_rx) }
    }

    /// Queues whose inbound side records every message in `inbox` first.
    pub fn durable(inbox: Arc<Inbox>) -> Self {
        MessageBus { inbox: Some(inbox), ..MessageBus::new() }
    }

    /// The durable inbox, if this bus has one.
    pub fn inbox(&self) -> Option<&Arc<Inbox>> {
        self.inbox.as_ref()
    }

    /// Queues a message for the agent. On a durable bus a new message is
    /// first accepted into the inbox (its id stamped into its metadata); a
    /// message that already has an id (a leftover re-published, a row
    /// resumed on start) is queued as is, and a re-sent channel event whose
    /// id is known is dropped: its row is answered or resumed already.
    ///
    /// Returns false when the message was such a re-sent event (not queued).
    pub fn publish_inbound(&self, mut message: InboundMessage) -> bool {
        if let Some(inbox) = &self.inbox
            && InboxRef::of(&message).is_none()
        {
            let dedup = dedup_key(&message);
            match inbox.accept(&mut message, dedup) {
                Ok(Accepted::New(_)) => {}
                Ok(Accepted::Duplicate(row)) => {
                    tracing::info!(channel = %message.channel, chat = %message.chat_id, inbox = row.id, "message already accepted; not queued again");
                    return false;
                }
                // Better answered without the guarantee than not at all.
                Err(e) => tracing::error!(channel = %message.channel, chat = %message.chat_id, "message queued without a durable record: {e}"),
            }
            crate::crash_point!("accepted", &message.content);
        }
        // The receiver lives as long as the bus, so sending cannot fail.
        let _ = self.inbound_tx.send(message);
        true
    }

    /// Queues a message or event for the channels.
    pub fn publish_outbound(&self, message: OutboundMessage) {
        let _ = self.outbound_tx.send(message);
    }

    /// The next inbound message.
    pub async fn consume_inbound(&self) -> Option<InboundMessage> {
        self.inbound_rx.lock().await.recv().await
    }

    /// The next outbound message or event.
    pub async fn consume_outbound(&self) -> Option<OutboundMessage> {
        self.outbound_rx.lock().await.recv().await
    }

    /// An inbound message if one is queued, without waiting.
    pub fn try_consume_inbound(&self) -> Option<InboundMessage> {
        self.inbound_rx.try_lock().ok()?.try_recv().ok()
    }

    /// An outbound message if one is queued, without waiting.
    pub fn try_consume_outbound(&self) -> Option<OutboundMessage> {
        self.outbound_rx.try_lock().ok()?.try_recv().ok()
    }
}

/// The key that names a message across re-sends: a channel event's id
/// (`ch:<channel>:<event id>`, SCALE_OUT §8). Other sources have none: each
/// publish is a new message.
pub fn dedup_key(message: &InboundMessage) -> Option<String> {
    let event = message.metadata.get("event_id")?;
    let event = event.as_str().map(str::to_string).unwrap_or_else(|| event.to_string());
    Some(format!("ch:{}:{event}", message.channel))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_keys_and_client_sanitising() {
        let mut m = InboundMessage::new("telegram", "u1", "42", "hi");
        assert_eq!(m.session_key(), "telegram:42");
        m.session_key_override = Some("shared".into());
        assert_eq!(m.session_key(), "shared");
        m.metadata.insert("_command".into(), Value::Bool(true));
        m.metadata.insert("message_id".into(), Value::from(7));
        let system = InboundMessage::new(SYSTEM_CHANNEL, "subagent", "telegram:42", "done");
        assert_eq!(system.reply_route(), ("telegram".to_string(), "42".to_string()));
        assert_eq!(InboundMessage::new(SYSTEM_CHANNEL, "x", "direct", "").reply_route(), ("cli".to_string(), "direct".to_string()));
        let clean = m.from_client();
        assert!(!clean.metadata.contains_key("_command"), "internal keys are not accepted from clients");
        assert!(clean.metadata.contains_key("message_id"));
    }

    /// The durable bus records every new message before queueing it, keeps
    /// a republished one's id, and drops a channel's re-sent event; a client
    /// cannot pick its own id (the `_` key is stripped from client input).
    #[tokio::test]
    async fn a_durable_bus_accepts_once_and_drops_resent_events() {
        let dir = tempfile::tempdir().unwrap();
        let bus = MessageBus::durable(Inbox::open(dir.path(), crate::durable::FsyncPolicy::Batch).unwrap());
        let mut event = InboundMessage::new("telegram", "u", "42", "hi");
        event.metadata.insert("event_id".into(), Value::from("upd-7"));
        bus.publish_inbound(event.clone());
        bus.publish_inbound(event);
        let first = bus.consume_inbound().await.unwrap();
        let row = InboxRef::of(&first).expect("stamped with its row");
        assert!(bus.try_consume_inbound().is_none(), "the re-sent event is not queued again");
        bus.publish_inbound(first.clone());
        assert_eq!(InboxRef::of(&bus.consume_inbound().await.unwrap()), Some(row), "a republished leftover keeps its row");
        let mut forged = InboundMessage::new("web", "web", "s", "x");
        forged.metadata.insert(crate::durable::INBOX_ID.into(), Value::from(row.id));
        bus.publish_inbound(forged.from_client());
        let taken = bus.consume_inbound().await.unwrap();
        assert_ne!(InboxRef::of(&taken), Some(row), "a client cannot claim another message's row");
        assert_eq!(bus.inbox().unwrap().open_rows().len(), 2);
    }

    #[tokio::test]
    async fn queues_deliver_in_order() {
        let bus = MessageBus::new();
        bus.publish_inbound(InboundMessage::new("cli", "u", "1", "a"));
        bus.publish_inbound(InboundMessage::new("cli", "u", "1", "b"));
        assert_eq!(bus.consume_inbound().await.unwrap().content, "a");
        assert_eq!(bus.consume_inbound().await.unwrap().content, "b");
        bus.publish_outbound(OutboundMessage::reply("cli", "1", "r"));
        assert_eq!(bus.try_consume_outbound().unwrap().content, "r");
        assert!(bus.try_consume_outbound().is_none());
    }
}
