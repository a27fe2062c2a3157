//! The OpenAI chat-completions API as a server speaks it: the request it
//! reads ([`ServedRequest`]) and the `chat.completion` and
//! `chat.completion.chunk` it writes. One definition for the two servers
//! chitin has, the gateway's
//! OpenAI-compatible API (`gateway/wire.rs`) and the test mock
//! (chitin-testing's `mock_llm.rs`); the client side reads them back in `answer.rs`.

use serde::Deserialize;
use serde_json::{Value, json};

/// A whole answer: `message` is the assistant message object
/// (`{"role": "assistant", "content": …, "tool_calls": …}`).
pub fn completion(id: &str, created: i64, model: &str, message: Value, finish_reason: &str, usage: Option<Value>) -> Value {
    let mut body = json!({
        "id": id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": null}],
    });
    if let Some(usage) = usage {
        body["usage"] = usage;
    }
    body
}

/// One streamed piece: `delta` holds the new content, tool-call pieces or
/// the role; the last chunk carries the finish reason.
pub fn chunk(id: &str, created: i64, model: &str, delta: Value, finish_reason: Option<&str>) -> Value {
    json!({
        "id": id, "object": "chat.completion.chunk", "created": created, "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": null}],
    })
}

/// The `usage` object.
pub fn usage(prompt_tokens: u64, completion_tokens: u64) -> Value {
    json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens})
}

/// A `POST /chat/completions` body as a server reads it: the one definition
/// of the request for both servers (the gateway reads the messages, the mock
/// only the head, so `M` lets it skip them with [`serde::de::IgnoredAny`]
/// instead of building the whole conversation). Fields a server does not
/// use (`temperature`, `tools`, …) are accepted and ignored.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ServedRequest<M = Vec<ServedMessage>> {
    /// The model the client asked for.
    pub model: Option<String>,
    /// The conversation.
    pub messages: M,
    /// `stream: true` (`null` reads as false, as OpenAI's API takes it).
    #[serde(deserialize_with = "null_as_false")]
    pub stream: bool,
    /// `stream_options`.
    pub stream_options: Option<StreamOptions>,
    /// The `user` field.
    pub user: Option<String>,
}

impl<M> ServedRequest<M> {
    /// `stream_options.include_usage`.
    pub fn include_usage(&self) -> bool {
        self.stream_options.as_ref().is_some_and(|o| o.include_usage)
    }
}

/// `stream_options`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamOptions {
    /// Send a last chunk with the usage.
    #[serde(deserialize_with = "null_as_false")]
    pub include_usage: bool,
}

/// One message of a [`ServedRequest`].
#[derive(Debug, Deserialize)]
pub struct ServedMessage {
    /// `system`, `developer`, `user`, `assistant`, `tool`.
    pub role: String,
    /// A string, an array of parts, or absent (an assistant message with
    /// only tool calls).
    #[serde(default)]
    pub content: Option<ServedContent>,
}

/// A message's `content`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ServedContent {
    /// Plain text.
    Text(String),
    /// Content parts (`text`, `image_url`, …).
    Parts(Vec<ServedPart>),
}

/// One content part; only `text` parts carry text.
#[derive(Debug, Deserialize)]
pub struct ServedPart {
    /// `text`, `image_url`, …
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The text of a `text` part.
    #[serde(default)]
    pub text: Option<String>,
}

fn null_as_false<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    Ok(Option::<bool>::deserialize(deserializer)?.unwrap_or(false))
}
