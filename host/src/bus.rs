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

/// The bus channel of the gateway's API requests (`gateway::api`).
pub const API_CHANNEL: &str = "api";

/// The key under which an inbound message's ephemeral history is stored
/// (see [`InboundMessage::ephemeral_history`]); today's name, so inbox
/// lines written before it was typed still load.
pub const EPHEMERAL_HISTORY: &str = "_ephemeral_history";

/// The metadata key of a message's thread or topic within its chat.
pub const THREAD: &str = "thread";

/// Where an inbound cron message names its job (today's key).
pub const CRON_JOB: &str = "_cron_job";
/// Where a subagent's announcement names its event and task (today's keys,
/// shared with the session rows that record the announcement).
pub const INJECTED_EVENT: &str = "injected_event";
/// The value of [`INJECTED_EVENT`] for a subagent's announcement.
pub const SUBAGENT_RESULT: &str = "subagent_result";
/// See [`INJECTED_EVENT`].
pub const TASK_ID: &str = "subagent_task_id";

/// The subagent task id of a `system` announcement, if it is one.
pub fn subagent_task_id(message: &InboundMessage) -> Option<&str> {
    match &message.origin {
        Origin::Subagent { task_id, .. } if message.channel == SYSTEM_CHANNEL => Some(task_id),
        _ => None,
    }
}

/// Inbound metadata keys the host alone sets: typed fields in memory, these
/// keys only in files. Any of them arriving in a message's metadata from
/// elsewhere is dropped when the message is read.
const RESERVED_KEYS: [&str; 6] = [crate::durable::INBOX_ID, EPHEMERAL_HISTORY, CRON_JOB, INJECTED_EVENT, TASK_ID, "origin"];

/// A chat on a channel, and the thread or topic within it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChatRef {
    /// The channel's name.
    pub channel: String,
    /// The chat's id on that channel.
    pub chat_id: String,
    /// The thread or topic within the chat, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<String>,
}

impl ChatRef {
    /// `chat_id` on `channel`, no thread.
    pub fn new(channel: impl Into<String>, chat_id: impl Into<String>) -> Self {
        ChatRef { channel: channel.into(), chat_id: chat_id.into(), thread: None }
    }

    /// The session a chat has by default.
    pub fn session_key(&self) -> SessionKey {
        SessionKey::of_chat(&self.channel, &self.chat_id)
    }
}

/// A session's identity. Opaque to the host: built from a chat (or named
/// by an API client, a cron job, an internal run) and compared whole; the
/// chat a turn answers comes with its message ([`InboundMessage::reply_route`]),
/// never from splitting this.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionKey(String);

impl SessionKey {
    /// A key as stored or configured.
    pub fn new(key: impl Into<String>) -> Self {
        SessionKey(key.into())
    }

    /// The default key of `chat_id` on `channel`: `{channel}:{chat_id}`.
    pub fn of_chat(channel: &str, chat_id: &str) -> Self {
        SessionKey(format!("{channel}:{chat_id}"))
    }

    /// The key of a stateless API request: a form no named session
    /// (`api:<name>`) and no channel (names are letters, digits, `_`, `-`)
    /// can produce, so a client naming its session `ephemeral:<id>` never
    /// reaches another request's turn.
    pub fn ephemeral(channel: &str, request_id: &str) -> Self {
        SessionKey(format!("{channel}#ephemeral:{request_id}"))
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The chat a key was made from, for the places that only have a key:
    /// a key a person typed (`chitin agent --session telegram:42`) and a
    /// record written before its chat was kept beside it (a goal resumed
    /// after an upgrade, an old inbox line). `cli` when it has no channel
    /// part. Never used to route a message that came with its chat.
    pub fn chat_hint(&self) -> ChatRef {
        match self.0.split_once(':') {
            Some((channel, chat)) => ChatRef::new(channel, chat),
            None => ChatRef::new("cli", self.0.as_str()),
        }
    }
}

impl std::ops::Deref for SessionKey {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for SessionKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for SessionKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SessionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for SessionKey {
    fn from(key: String) -> Self {
        SessionKey(key)
    }
}

impl From<&str> for SessionKey {
    fn from(key: &str) -> Self {
        SessionKey(key.to_string())
    }
}

impl From<SessionKey> for String {
    fn from(key: SessionKey) -> Self {
        key.0
    }
}

impl PartialEq<str> for SessionKey {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for SessionKey {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

/// Who a message is from. Set by the host where the message is made; the
/// privileges of a host origin (no `last_chat`, a subagent's routing and
/// dedup) follow from this, never from a sender name or a metadata key a
/// client could choose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Origin {
    /// A person on a chat, as the platform names them.
    User {
        /// The sender as the platform names them.
        sender: String,
    },
    /// A scheduled job.
    Cron {
        /// The job's id.
        job: String,
    },
    /// A background subagent's result, answered in the chat it was spawned
    /// from.
    Subagent {
        /// The subagent's task id.
        task_id: String,
        /// The chat it was spawned from.
        reply_to: ChatRef,
    },
    /// An active goal resumed after a restart.
    GoalResume,
    /// An internal run (Dream, the heartbeat).
    Internal,
    /// An HTTP API request (the client's `user` field, if any).
    Api {
        /// The client's `user` field.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        user: Option<String>,
    },
}

impl Origin {
    /// A person writing in a chat (the chat can then be written to
    /// unasked: `last_chat`).
    pub fn is_person(&self) -> bool {
        matches!(self, Origin::User { .. })
    }

    /// The sender name logs and the files show (today's `sender_id`).
    pub fn sender(&self) -> &str {
        match self {
            Origin::User { sender } => sender,
            Origin::Cron { .. } => "cron",
            Origin::Subagent { .. } => "subagent",
            Origin::GoalResume => "goal",
            Origin::Internal => "internal",
            Origin::Api { user } => user.as_deref().unwrap_or("api"),
        }
    }
}

/// A message arriving from a channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "wire::Inbound", into = "wire::Inbound")]
pub struct InboundMessage {
    /// Channel name (`telegram`, `cli`, `system`).
    pub channel: String,
    /// The chat it belongs to.
    pub chat_id: String,
    /// Who it is from.
    pub origin: Origin,
    /// The text.
    pub content: String,
    /// When it was sent.
    pub timestamp: DateTime<Utc>,
    /// Attached files, already downloaded by the channel.
    pub media: Vec<PathBuf>,
    /// Platform extras (`event_id`, `message_id`, `thread`, …) only.
    pub metadata: Map<String, Value>,
    /// Routes the message to another session than `{channel}:{chat_id}`.
    pub session_key_override: Option<String>,
    /// Its row in the durable inbox, once accepted.
    pub inbox: Option<InboxRef>,
    /// Session messages an *ephemeral* turn starts from: the session is
    /// exactly that history and nothing is persisted (the API, when a
    /// client sends its own history).
    pub ephemeral_history: Option<Value>,
}

impl InboundMessage {
    /// A message from person `sender_id`, with no media or metadata.
    pub fn new(channel: impl Into<String>, sender_id: impl Into<String>, chat_id: impl Into<String>, content: impl Into<String>) -> Self {
        InboundMessage::from_origin(channel, chat_id, Origin::User { sender: sender_id.into() }, content)
    }

    /// A message from `origin`, with no media or metadata.
    pub fn from_origin(channel: impl Into<String>, chat_id: impl Into<String>, origin: Origin, content: impl Into<String>) -> Self {
        InboundMessage {
            channel: channel.into(),
            chat_id: chat_id.into(),
            origin,
            content: content.into(),
            timestamp: Utc::now(),
            media: Vec::new(),
            metadata: Map::new(),
            session_key_override: None,
            inbox: None,
            ephemeral_history: None,
        }
    }

    /// The sender name (see [`Origin::sender`]).
    pub fn sender_id(&self) -> &str {
        self.origin.sender()
    }

    /// Sanitises a message built from client input: internal (`_`) metadata
    /// keys are removed, as are the host's own marks, so a client cannot
    /// set host-only flags.
    pub fn from_client(mut self) -> Self {
        self.metadata.retain(|k, _| !k.starts_with('_') && !RESERVED_KEYS.contains(&k.as_str()));
        self.inbox = None;
        self.ephemeral_history = None;
        self
    }

    /// Where a reply goes: the message's own chat, or for a subagent's
    /// result the chat it was spawned from.
    pub fn reply_route(&self) -> (String, String) {
        match &self.origin {
            Origin::Subagent { reply_to, .. } => (reply_to.channel.clone(), reply_to.chat_id.clone()),
            _ => (self.channel.clone(), self.chat_id.clone()),
        }
    }

    /// `session_key_override`, else `{channel}:{chat_id}`.
    pub fn session_key(&self) -> String {
        self.session_key_override.clone().unwrap_or_else(|| SessionKey::of_chat(&self.channel, &self.chat_id).into())
    }
}

/// The file form of an [`InboundMessage`] (the inbox log): today's
/// layout, the typed fields written under today's key names in
/// `metadata`, plus `origin`. A line written before the fields were typed
/// (no `origin`) is read by the conventions of then.
mod wire {
    use super::*;

    #[derive(Serialize, Deserialize)]
    pub(super) struct Inbound {
        channel: String,
        sender_id: String,
        chat_id: String,
        content: String,
        timestamp: DateTime<Utc>,
        #[serde(default)]
        media: Vec<PathBuf>,
        #[serde(default)]
        metadata: Map<String, Value>,
        #[serde(default)]
        session_key_override: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        origin: Option<Origin>,
    }

    impl From<InboundMessage> for Inbound {
        fn from(m: InboundMessage) -> Self {
            // Only the typed fields write these keys: one that came in as
            // a platform extra is not carried into the file.
            let mut metadata = m.metadata;
            metadata.retain(|k, _| !RESERVED_KEYS.contains(&k.as_str()));
            if let Some(inbox) = m.inbox {
                metadata.insert(crate::durable::INBOX_ID.into(), Value::from(inbox.id));
            }
            if let Some(history) = m.ephemeral_history {
                metadata.insert(EPHEMERAL_HISTORY.into(), history);
            }
            match &m.origin {
                Origin::Cron { job } => {
                    metadata.insert(CRON_JOB.into(), Value::from(job.as_str()));
                }
                Origin::Subagent { task_id, .. } => {
                    metadata.insert(INJECTED_EVENT.into(), Value::from(SUBAGENT_RESULT));
                    metadata.insert(TASK_ID.into(), Value::from(task_id.as_str()));
                }
                _ => {}
            }
            Inbound {
                sender_id: m.origin.sender().to_string(),
                channel: m.channel,
                chat_id: m.chat_id,
                content: m.content,
                timestamp: m.timestamp,
                media: m.media,
                metadata,
                session_key_override: m.session_key_override,
                origin: Some(m.origin),
            }
        }
    }

    impl From<Inbound> for InboundMessage {
        fn from(w: Inbound) -> Self {
            let mut metadata = w.metadata;
            let text = |v: Option<Value>| v.and_then(|v| v.as_str().map(str::to_string));
            let inbox = metadata.remove(crate::durable::INBOX_ID).and_then(|v| v.as_u64()).map(|id| InboxRef { id });
            let ephemeral_history = metadata.remove(EPHEMERAL_HISTORY);
            let job = text(metadata.remove(CRON_JOB));
            let event = text(metadata.remove(INJECTED_EVENT));
            let task = text(metadata.remove(TASK_ID));
            metadata.remove("origin");
            let origin = w.origin.unwrap_or_else(|| legacy_origin(&w.channel, &w.sender_id, &w.chat_id, job, event, task));
            InboundMessage {
                channel: w.channel,
                chat_id: w.chat_id,
                origin,
                content: w.content,
                timestamp: w.timestamp,
                media: w.media,
                metadata,
                session_key_override: w.session_key_override,
                inbox,
                ephemeral_history,
            }
        }
    }

    /// An outbox reply as written: a reply recorded before [`Reply`] was
    /// typed kept its details in `metadata` (`_stop_reason`, `usage`,
    /// `_failed`, `_via_message_tool`, `_goal_continuation`, `latency_ms`);
    /// they are moved into the kind on reading.
    #[derive(Deserialize)]
    pub(super) struct Outbound {
        channel: String,
        chat_id: String,
        content: String,
        #[serde(default)]
        reply_to: Option<String>,
        #[serde(default)]
        media: Vec<PathBuf>,
        #[serde(default)]
        metadata: Map<String, Value>,
        kind: OutboundKind,
    }

    impl From<Outbound> for OutboundMessage {
        fn from(w: Outbound) -> Self {
            let (mut metadata, mut kind) = (w.metadata, w.kind);
            if let OutboundKind::Message(reply) = &mut kind {
                let flag = |v: Option<Value>| v.and_then(|v| v.as_bool()).unwrap_or(false);
                if let Some(stop) = metadata.remove("_stop_reason").and_then(|v| serde_json::from_value(v).ok()) {
                    reply.stop.get_or_insert(stop);
                }
                if let Some(usage) = metadata.remove("usage").and_then(|v| serde_json::from_value(v).ok()) {
                    reply.usage.get_or_insert(usage);
                }
                if let Some(ms) = metadata.remove("latency_ms").and_then(|v| v.as_u64()) {
                    reply.latency_ms.get_or_insert(ms);
                }
                reply.failed |= flag(metadata.remove("_failed"));
                reply.via_tool |= flag(metadata.remove("_via_message_tool"));
                reply.interim |= flag(metadata.remove("_goal_continuation"));
            }
            OutboundMessage { channel: w.channel, chat_id: w.chat_id, content: w.content, reply_to: w.reply_to, media: w.media, metadata, kind, ack: DeliveryAck::default(), stream: StreamLink::default() }
        }
    }

    /// Who a line written before `origin` existed is from, by the
    /// conventions of then: the marks only the host set (`_cron_job`; a
    /// `system` message with a subagent's result) or a host sender name.
    fn legacy_origin(channel: &str, sender: &str, chat_id: &str, job: Option<String>, event: Option<String>, task: Option<String>) -> Origin {
        match (sender, job, event.as_deref(), task) {
            (_, _, Some(SUBAGENT_RESULT), Some(task_id)) if channel == SYSTEM_CHANNEL => {
                Origin::Subagent { task_id, reply_to: SessionKey::new(chat_id).chat_hint() }
            }
            ("cron", Some(job), _, _) => Origin::Cron { job },
            ("goal", ..) => Origin::GoalResume,
            ("internal", ..) => Origin::Internal,
            _ if channel == "api" => Origin::Api { user: (sender != "api").then(|| sender.to_string()) },
            _ => Origin::User { sender: sender.to_string() },
        }
    }
}

/// How a turn's run ended, as its reply reports it (nanobot's
/// `_stop_reason`). Internal runs (Dream, the heartbeat) decide on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered.
    Completed,
    /// `max_iterations` was reached.
    MaxIterations,
    /// The provider failed (or the turn did).
    Error,
    /// A tool failed in a way that ended the run.
    ToolError,
    /// The model gave no answer even after the recovery requests.
    EmptyFinalResponse,
    /// `/stop` (or a shutdown) stopped it.
    Stopped,
    /// A slash command answered; no run.
    Command,
}

impl StopReason {
    /// The word a front end or a log shows (`completed`, `max_iterations`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Completed => "completed",
            StopReason::MaxIterations => "max_iterations",
            StopReason::Error => "error",
            StopReason::ToolError => "tool_error",
            StopReason::EmptyFinalResponse => "empty_final_response",
            StopReason::Stopped => "stopped",
            StopReason::Command => "command",
        }
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A turn's token usage, when the provider reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Tokens of the request.
    pub prompt_tokens: u64,
    /// Tokens of the answer.
    pub completion_tokens: u64,
}

/// What a [`OutboundKind::Message`] is, beyond its text: typed, so no
/// front end parses it back out of `metadata`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// Its text already went out as deltas, so a channel must not send it
    /// again.
    pub streamed: bool,
    /// How the run ended (a turn's reply; none on notices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<StopReason>,
    /// The turn's token usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
    /// The apology of a failed turn, so a front end can tell a failure
    /// from a reply (the API answers 500).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// Sent by the `message` tool (the CLI prints these before the reply).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub via_tool: bool,
    /// An interim answer of a sustained goal: the turn goes on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interim: bool,
    /// User-perceived latency of the turn, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
}

/// The phase of a tool call a [`ToolProgress`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolPhase {
    /// The call started; the content is `name(arguments preview)`.
    Started,
    /// The plugin's `host.progress` text is the content.
    Progress,
    /// The call ended (no content); `ok` says how.
    Finished,
}

impl ToolPhase {
    /// `started`, `progress`, `finished`.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolPhase::Started => "started",
            ToolPhase::Progress => "progress",
            ToolPhase::Finished => "finished",
        }
    }
}

/// A tool call's progress (see `agent::responder`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolProgress {
    /// The tool's name.
    pub tool: String,
    /// The model's call id (clipped).
    pub call_id: String,
    /// Where the call stands.
    pub phase: ToolPhase,
    /// At [`ToolPhase::Finished`]: whether the call produced a result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<bool>,
}

/// What an outbound event carries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum OutboundKind {
    /// A reply, a notice or an interim answer to show.
    Message(Reply),
    /// The turn's own "running" hint.
    Progress,
    /// A tool call started, reported progress, or finished.
    Tool(ToolProgress),
    /// A piece of streamed reply text.
    StreamDelta,
    /// The streamed reply is complete.
    StreamEnd,
    /// The turn finished (with or without a reply).
    TurnEnd,
}

impl OutboundKind {
    /// A plain message (a notice, or a reply with nothing more to say).
    pub fn message(streamed: bool) -> Self {
        OutboundKind::Message(Reply { streamed, ..Reply::default() })
    }

    /// The reply details when this is a message.
    pub fn reply(&self) -> Option<&Reply> {
        match self {
            OutboundKind::Message(reply) => Some(reply),
            _ => None,
        }
    }

    /// The apology of a failed turn.
    pub fn is_failure(&self) -> bool {
        self.reply().is_some_and(|r| r.failed)
    }
}

/// A message or event for a channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "wire::Outbound")]
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
    /// Platform extras only (e.g. the thread); what the host itself says
    /// about the event is typed in `kind`.
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
            kind: OutboundKind::message(false),
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
        // A subagent's result is answered in the chat its typed origin
        // names; the chat id is not parsed.
        let from = |channel: &str, chat: &str| Origin::Subagent { task_id: "t1".into(), reply_to: ChatRef::new(channel, chat) };
        let system = InboundMessage::from_origin(SYSTEM_CHANNEL, "telegram:42", from("telegram", "42"), "done");
        assert_eq!(system.reply_route(), ("telegram".to_string(), "42".to_string()));
        assert_eq!(InboundMessage::from_origin(SYSTEM_CHANNEL, "direct", from("cli", "direct"), "").reply_route(), ("cli".to_string(), "direct".to_string()));
        // A person's message shaped like one stays in its own chat.
        let spoof = InboundMessage::new(SYSTEM_CHANNEL, "subagent", "telegram:42", "done");
        assert_eq!(spoof.reply_route(), (SYSTEM_CHANNEL.to_string(), "telegram:42".to_string()));
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

    /// An inbox log and a session file as the untyped bus wrote them
    /// (lines written by hand from what that code serialised): every mark
    /// comes back typed, platform extras stay in `metadata`, and an old
    /// outbox reply keeps its stop reason, usage and flags.
    #[test]
    fn inbox_lines_and_session_files_of_the_untyped_format_still_load() {
        let dir = tempfile::tempdir().unwrap();
        let inbox_dir = dir.path().join("inbox");
        std::fs::create_dir_all(&inbox_dir).unwrap();
        let ts = "2026-12-01T10:00:00Z";
        let lines = [
            format!(r#"{{"t":"a","id":1,"at":"{ts}","dedup":"ch:telegram:upd-9","msg":{{"channel":"telegram","sender_id":"7","chat_id":"42","content":"hello","timestamp":"{ts}","media":[],"metadata":{{"event_id":"upd-9","thread":"3","_inbox_id":1}},"session_key_override":null}}}}"#),
            format!(r#"{{"t":"a","id":2,"at":"{ts}","msg":{{"channel":"system","sender_id":"subagent","chat_id":"telegram:42","content":"[Subagent 'p' completed successfully]","timestamp":"{ts}","media":[],"metadata":{{"injected_event":"subagent_result","subagent_task_id":"ab12cd34","_inbox_id":2}},"session_key_override":"telegram:42"}}}}"#),
            format!(r#"{{"t":"a","id":3,"at":"{ts}","msg":{{"channel":"telegram","sender_id":"cron","chat_id":"42","content":"[Scheduled task]","timestamp":"{ts}","media":[],"metadata":{{"_cron_job":"j1","_inbox_id":3}},"session_key_override":"telegram:42"}}}}"#),
            format!(r#"{{"t":"a","id":4,"at":"{ts}","msg":{{"channel":"api","sender_id":"api","chat_id":"abc","content":"q","timestamp":"{ts}","media":[],"metadata":{{"_ephemeral_history":[{{"role":"user","content":"earlier"}}],"_inbox_id":4}},"session_key_override":"api:ephemeral:abc"}}}}"#),
            format!(r#"{{"t":"a","id":5,"at":"{ts}","msg":{{"channel":"telegram","sender_id":"goal","chat_id":"42","content":"resume","timestamp":"{ts}","media":[],"metadata":{{"_inbox_id":5}},"session_key_override":"telegram:42"}}}}"#),
            r#"{"t":"r","id":1}"#.to_string(),
            r#"{"t":"d","id":1,"reply":{"channel":"telegram","chat_id":"42","content":"hi back","reply_to":null,"media":[],"metadata":{"thread":"3","_stop_reason":"completed","latency_ms":5,"usage":{"prompt_tokens":10,"completion_tokens":2}},"kind":{"kind":"message","streamed":true}},"delivered":false}"#.to_string(),
        ];
        std::fs::write(inbox_dir.join("inbox.log"), lines.join("\n") + "\n").unwrap();
        let inbox = Inbox::open(&inbox_dir, crate::durable::FsyncPolicy::Batch).unwrap();
        let rows = inbox.open_rows();
        let msg = |id: u64| rows.iter().find(|r| r.id == id).map(|r| r.msg.clone()).unwrap_or_else(|| panic!("row {id}: {rows:?}"));
        assert_eq!(rows.len(), 4, "{rows:?}");
        let subagent = msg(2);
        assert_eq!(subagent.origin, Origin::Subagent { task_id: "ab12cd34".into(), reply_to: ChatRef::new("telegram", "42") });
        assert_eq!(subagent.reply_route(), ("telegram".to_string(), "42".to_string()));
        assert_eq!((subagent.inbox, subagent.metadata.len()), (Some(InboxRef { id: 2 }), 0), "marks leave the metadata");
        assert_eq!(msg(3).origin, Origin::Cron { job: "j1".into() });
        let api = msg(4);
        assert_eq!(api.origin, Origin::Api { user: None });
        assert_eq!(api.ephemeral_history, Some(serde_json::json!([{"role": "user", "content": "earlier"}])));
        assert_eq!(msg(5).origin, Origin::GoalResume);
        let (id, reply) = inbox.undelivered().pop().expect("the undelivered reply");
        assert_eq!(id, 1);
        let expected = Reply { streamed: true, stop: Some(StopReason::Completed), usage: Some(TokenUsage { prompt_tokens: 10, completion_tokens: 2 }), latency_ms: Some(5), ..Reply::default() };
        assert_eq!(reply.kind, OutboundKind::Message(expected));
        assert_eq!(reply.metadata.keys().collect::<Vec<_>>(), ["thread"], "only the platform extra stays");
        drop(inbox);
        // Written back (compaction rewrote the log on open) and read again:
        // the same typed rows.
        let again = Inbox::open(&inbox_dir, crate::durable::FsyncPolicy::Batch).unwrap();
        assert_eq!(again.open_rows(), rows);

        // A session file with every mark of today's rows.
        let sessions = dir.path().join("sessions");
        std::fs::create_dir_all(&sessions).unwrap();
        let store = crate::session::JsonlStore::new(&sessions);
        let path = store.path_of("telegram:42");
        let file = [
            r#"{"_type":"metadata","key":"telegram:42","created_at":"2026-12-01T10:00:00Z","updated_at":"2026-12-01T10:00:00Z","metadata":{},"last_consolidated":0}"#,
            r#"{"role":"user","content":"/new","_command":true,"timestamp":"2026-12-01T10:00:00Z","_inbox_id":1}"#,
            r#"{"role":"assistant","content":"Heartbeat says hi","_channel_delivery":true}"#,
            r#"{"role":"user","content":"[Goal continuation] go on","_goal_continuation":true}"#,
            r#"{"role":"user","content":"[Subagent 'p' completed successfully]","injected_event":"subagent_result","subagent_task_id":"ab12cd34","media":["/w/a.png"]}"#,
        ];
        std::fs::write(&path, file.join("\n") + "\n").unwrap();
        let session = crate::session::SessionStore::load(&store, "telegram:42").unwrap();
        assert_eq!(session.messages.len(), 4, "{:?}", session.messages);
        assert!(crate::session::holds_subagent_result(&session, "ab12cd34"), "the task id mark is read back");
        assert_eq!(session.messages[0].meta.get(crate::durable::INBOX_ID), Some(&Value::from(1)));
        assert_eq!(session.messages[1].meta.get(crate::session::CHANNEL_DELIVERY), Some(&Value::Bool(true)));
        assert_eq!(session.messages[2].meta.get(crate::agent::goal::GOAL_CONTINUATION), Some(&Value::Bool(true)));
        assert_eq!(session.messages[3].meta.get("media"), Some(&serde_json::json!(["/w/a.png"])));
    }

    /// A client that writes the host's marks into its own message (as a
    /// channel's metadata, or a message object it builds) gets a plain
    /// message of its own chat: the marks are dropped on the way in and
    /// never written to the inbox as marks.
    #[test]
    fn reserved_marks_from_a_client_are_not_host_marks() {
        let mut spoof = InboundMessage::new("web", "mallory", "room1", "hi");
        for (key, value) in [("_inbox_id", Value::from(1)), ("_cron_job", "j1".into()), ("injected_event", "subagent_result".into()), ("subagent_task_id", "ab12cd34".into()), ("origin", serde_json::json!({"kind": "internal"})), ("_ephemeral_history", serde_json::json!([]))] {
            spoof.metadata.insert(key.into(), value);
        }
        // Even without `from_client`, the file form does not carry them as marks.
        let line = serde_json::to_value(&spoof).unwrap();
        let back: InboundMessage = serde_json::from_value(line.clone()).unwrap();
        assert_eq!(back.origin, Origin::User { sender: "mallory".into() }, "{line}");
        assert_eq!((back.inbox, back.ephemeral_history.is_some()), (None, false), "{line}");
        assert!(back.metadata.is_empty(), "{line}");
        let clean = spoof.from_client();
        assert!(clean.metadata.is_empty());
        assert_eq!(clean.reply_route(), ("web".to_string(), "room1".to_string()));
        assert_eq!(clean.session_key(), "web:room1");
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
