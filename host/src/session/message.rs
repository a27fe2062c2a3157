//! One chat message, in the OpenAI chat-completions shape, plus host-side
//! annotations.
//!
//! The same struct is persisted (one JSON line per message) and sent to the
//! provider. Annotations live in `meta`; keys starting with `_` are internal
//! (`_command` marks a slash command and its reply, never replayed to the
//! model) and [`Message::for_provider`] strips them with the rest of `meta`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions from the host.
    System,
    /// The human (or an injected internal message).
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// A tool call requested by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The model's id for this call; the matching result carries it.
    pub id: String,
    /// Always `"function"`.
    #[serde(rename = "type", default = "function_kind")]
    pub kind: String,
    /// What to call.
    pub function: FunctionCall,
}

fn function_kind() -> String {
    "function".into()
}

/// Metadata of an assistant message: provider blocks to replay unchanged
/// with its tool calls (Anthropic thinking blocks and their signatures);
/// the one annotation [`Message::for_provider`] keeps.
pub const THINKING_BLOCKS: &str = "thinking_blocks";

/// Name and raw arguments of a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// Tool name, as the model wrote it.
    pub name: String,
    /// Arguments as the model wrote them: usually a JSON object in a string.
    #[serde(default)]
    pub arguments: String,
}

impl ToolCall {
    /// A function call.
    pub fn new(id: impl Into<String>, name: impl Into<String>, arguments: impl Into<String>) -> Self {
        ToolCall { id: id.into(), kind: function_kind(), function: FunctionCall { name: name.into(), arguments: arguments.into() } }
    }
}

/// One message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Author.
    pub role: Role,
    /// Text; `None` for an assistant message that only calls tools.
    #[serde(default)]
    pub content: Option<String>,
    /// Tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a tool result: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Host annotations: `timestamp`, `media`, `_command`, ...
    #[serde(flatten)]
    pub meta: Map<String, Value>,
    /// Images shown to the model with this message's text: filled at BUILD
    /// from the media files `meta.media` names (`agent::images`), never
    /// persisted (the session keeps the file reference, not the bytes).
    #[serde(skip)]
    pub images: Vec<ImagePart>,
    /// The message's token estimate, remembered (see `crate::tokens`).
    #[serde(skip)]
    pub(crate) tokens: TokenMemo,
}

/// One image of a user message, ready for any provider's wire format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImagePart {
    /// `image/jpeg`, `image/png`, `image/gif` or `image/webp`, from the
    /// file's magic bytes.
    pub media_type: &'static str,
    /// The file's bytes, base64 (standard alphabet, padded). Shared: the
    /// runner clones its messages per request.
    pub base64: std::sync::Arc<str>,
}

/// A remembered token count, tagged with the size of what was counted so an
/// edited message is counted again. Prompt estimates run twice per turn over
/// the whole unarchived history; with the memo each message is tokenized once.
/// Never part of equality, serialization or `Debug` noise.
#[derive(Default)]
pub struct TokenMemo(std::sync::atomic::AtomicU64);

impl TokenMemo {
    /// The count remembered for content of `size` bytes, if any.
    pub fn get(&self, size: usize) -> Option<usize> {
        let packed = self.0.load(std::sync::atomic::Ordering::Relaxed);
        (packed != 0 && (packed >> 32) as u32 == size as u32).then_some((packed & 0xffff_ffff) as usize - 1)
    }

    /// Remembers `tokens` for content of `size` bytes.
    pub fn set(&self, size: usize, tokens: usize) {
        let packed = ((size as u32 as u64) << 32) | (tokens.min(u32::MAX as usize - 1) as u64 + 1);
        self.0.store(packed, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Clone for TokenMemo {
    fn clone(&self) -> Self {
        TokenMemo(std::sync::atomic::AtomicU64::new(self.0.load(std::sync::atomic::Ordering::Relaxed)))
    }
}

impl PartialEq for TokenMemo {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for TokenMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenMemo")
    }
}

/// Marks a slash command and its reply: persisted, never replayed.
pub const COMMAND_MARKER: &str = "_command";

/// Marks an assistant row the host sent on its own (a heartbeat answer),
/// mirrored into the chat's session: replayed like any reply, and a replay
/// that starts at the user's answer to it starts at it instead.
pub const CHANNEL_DELIVERY: &str = "_channel_delivery";

impl Message {
    fn new(role: Role, content: Option<String>) -> Self {
        Message { role, content, tool_calls: Vec::new(), tool_call_id: None, name: None, meta: Map::new(), images: Vec::new(), tokens: TokenMemo::default() }
    }

    /// A system message.
    pub fn system(text: impl Into<String>) -> Self {
        Message::new(Role::System, Some(text.into()))
    }

    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Message::new(Role::User, Some(text.into()))
    }

    /// An assistant text message.
    pub fn assistant(text: impl Into<String>) -> Self {
        Message::new(Role::Assistant, Some(text.into()))
    }

    /// An assistant message calling tools (with optional text).
    pub fn assistant_calls(text: Option<String>, calls: Vec<ToolCall>) -> Self {
        Message { tool_calls: calls, ..Message::new(Role::Assistant, text) }
    }

    /// A tool result.
    pub fn tool_result(call_id: impl Into<String>, name: impl Into<String>, text: impl Into<String>) -> Self {
        Message { tool_call_id: Some(call_id.into()), name: Some(name.into()), ..Message::new(Role::Tool, Some(text.into())) }
    }

    /// Adds an annotation.
    pub fn with_meta(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.meta.insert(key.to_string(), value.into());
        self
    }

    /// The text, or `""`.
    pub fn text(&self) -> &str {
        self.content.as_deref().unwrap_or_default()
    }

    /// Bytes of everything a token estimate counts: the memo's tag.
    pub fn counted_size(&self) -> usize {
        self.text().len() + self.tool_calls.iter().map(|c| c.function.name.len() + c.function.arguments.len() + 1).sum::<usize>()
    }

    /// The remembered token estimate.
    pub fn token_memo(&self) -> &TokenMemo {
        &self.tokens
    }

    /// True for a slash command or its reply.
    pub fn is_command(&self) -> bool {
        self.meta.contains_key(COMMAND_MARKER)
    }

    /// The message as the provider should see it: annotations removed,
    /// except the blocks a provider must get back ([`THINKING_BLOCKS`]).
    pub fn for_provider(&self) -> Message {
        let mut meta = Map::new();
        if let Some(blocks) = self.meta.get(THINKING_BLOCKS) {
            meta.insert(THINKING_BLOCKS.into(), blocks.clone());
        }
        Message { meta, ..self.clone() }
    }
}
