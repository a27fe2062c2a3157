//! The OpenAI chat-completions wire format as the gateway speaks it: the
//! request it accepts (validated by hand, so a 400 names the field, which
//! serde's messages do not do reliably for untagged content), and the
//! `chat.completion`, `chat.completion.chunk`, model list and error bodies
//! it writes (the completion and chunk shapes are the provider's own,
//! `provider::openai::wire`, shared with the test mock). No I/O here:
//! `api.rs` owns the HTTP side.

use serde_json::{Value, json};

use crate::session::Message;
use crate::tools::json_kind;

/// A request error in OpenAI's shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status.
    pub status: u16,
    /// Human-readable message.
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `server_error`, …
    pub kind: &'static str,
    /// The request field at fault.
    pub param: Option<String>,
    /// A short machine code.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// 400 about `param`.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError { status: 400, message: message.into(), kind: "invalid_request_error", param: Some(param.into()), code: None }
    }

    /// An error without a field.
    pub fn new(status: u16, kind: &'static str, code: Option<&'static str>, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into(), kind, param: None, code }
    }

    /// `{"error": {"message", "type", "param", "code"}}`.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

/// What the gateway uses of a `POST /v1/chat/completions` body. Other
/// fields (`model`, `temperature`, `tools`, …) are accepted and ignored:
/// the agent's own configuration decides.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    /// The text of the last message, which must be the user's.
    pub content: String,
    /// The `user` and `assistant` messages before it, as session history
    /// (system, developer and tool messages are dropped: the agent has its
    /// own system prompt and its own tools).
    pub history: Vec<Message>,
    /// `stream: true`.
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
    /// The `user` field.
    pub user: Option<String>,
}

/// Parses and validates a request body.
pub fn parse_chat_request(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ApiError::new(400, "invalid_request_error", Some("invalid_json"), format!("the request body is not valid JSON: {e}")))?;
    let object = value.as_object().ok_or_else(|| ApiError::new(400, "invalid_request_error", Some("invalid_json"), "the request body must be a JSON object"))?;
    let messages = match object.get("messages") {
        None | Some(Value::Null) => return Err(ApiError::invalid("messages", "missing required field `messages`")),
        Some(Value::Array(messages)) => messages,
        Some(other) => return Err(ApiError::invalid("messages", format!("`messages` must be an array, not {}", json_kind(other)))),
    };
    let stream = optional_bool(object.get("stream"), "stream")?;
    let include_usage = match object.get("stream_options") {
        None | Some(Value::Null) => false,
        Some(Value::Object(options)) => optional_bool(options.get("include_usage"), "stream_options.include_usage")?,
        Some(other) => return Err(ApiError::invalid("stream_options", format!("`stream_options` must be an object, not {}", json_kind(other)))),
    };
    let user = match object.get("user") {
        None | Some(Value::Null) => None,
        Some(Value::String(user)) => Some(user.clone()).filter(|u| !u.is_empty()),
        Some(other) => return Err(ApiError::invalid("user", format!("`user` must be a string, not {}", json_kind(other)))),
    };
    let mut turns = Vec::with_capacity(messages.len());
    for (i, message) in messages.iter().enumerate() {
        let field = format!("messages[{i}]");
        let message = message.as_object().ok_or_else(|| ApiError::invalid(&field, format!("`{field}` must be an object, not {}", json_kind(message))))?;
        let role = match message.get("role") {
            Some(Value::String(role)) => role.as_str(),
            None => return Err(ApiError::invalid(format!("{field}.role"), format!("missing required field `{field}.role`"))),
            Some(other) => return Err(ApiError::invalid(format!("{field}.role"), format!("`{field}.role` must be a string, not {}", json_kind(other)))),
        };
        let text = content_text(message.get("content"), &format!("{field}.content"))?;
        turns.push((role.to_string(), text));
    }
    let Some((role, content)) = turns.pop() else {
        return Err(ApiError::invalid("messages", "`messages` must not be empty"));
    };
    if role != "user" {
        return Err(ApiError::invalid(format!("messages[{}].role", turns.len()), format!("the last message must have role \"user\", not \"{role}\"")));
    }
    let history = turns
        .into_iter()
        .filter_map(|(role, text)| match role.as_str() {
            "user" => Some(Message::user(text)),
            "assistant" if !text.is_empty() => Some(Message::assistant(text)),
            _ => None,
        })
        .collect();
    Ok(ChatRequest { content, history, stream, include_usage, user })
}

fn optional_bool(value: Option<&Value>, field: &str) -> Result<bool, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(other) => Err(ApiError::invalid(field, format!("`{field}` must be a boolean, not {}", json_kind(other)))),
    }
}

/// A message's text: a string, or the `text` parts of an array (other
/// parts, such as images, are not supported yet and are skipped).
fn content_text(content: Option<&Value>, field: &str) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for (i, part) in parts.iter().enumerate() {
                if part.get("type").and_then(Value::as_str) == Some("text") {
                    match part.get("text") {
                        Some(Value::String(t)) => text.push_str(t),
                        _ => return Err(ApiError::invalid(format!("{field}[{i}].text"), format!("`{field}[{i}].text` must be a string"))),
                    }
                }
            }
            Ok(text)
        }
        Some(other) => Err(ApiError::invalid(field, format!("`{field}` must be a string or an array of content parts, not {}", json_kind(other)))),
    }
}

/// What every response of one completion shares.
#[derive(Debug, Clone)]
pub struct CompletionHead {
    /// `chatcmpl-…`.
    pub id: String,
    /// Unix seconds.
    pub created: i64,
    /// The configured model (the request's `model` is not echoed: the
    /// agent's model answers whatever the client asked for).
    pub model: String,
}

/// `usage` from a reply's `{prompt_tokens, completion_tokens}` metadata.
pub fn usage(meta: Option<&Value>) -> Option<Value> {
    let meta = meta?;
    let prompt = meta.get("prompt_tokens")?.as_u64()?;
    let completion = meta.get("completion_tokens")?.as_u64()?;
    Some(crate::provider::openai::wire::usage(prompt, completion))
}

/// A whole `chat.completion` answer (the shape is `provider::openai::wire`'s).
pub fn completion(head: &CompletionHead, content: &str, usage: Option<Value>) -> Value {
    crate::provider::openai::wire::completion(&head.id, head.created, &head.model, json!({"role": "assistant", "content": content}), "stop", usage)
}

/// One `chat.completion.chunk` (the shape is `provider::openai::wire`'s).
pub fn chunk(head: &CompletionHead, delta: Value, finish_reason: Option<&str>) -> Value {
    crate::provider::openai::wire::chunk(&head.id, head.created, &head.model, delta, finish_reason)
}

/// The last chunk when `stream_options.include_usage` is set: no choices.
pub fn usage_chunk(head: &CompletionHead, usage: Value) -> Value {
    json!({"id": head.id, "object": "chat.completion.chunk", "created": head.created, "model": head.model, "choices": [], "usage": usage})
}

/// `GET /v1/models`.
pub fn model_list(model: &str, created: i64) -> Value {
    json!({"object": "list", "data": [{"id": model, "object": "model", "created": created, "owned_by": "chitin"}]})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Role;

    #[test]
    fn requests_are_validated_field_by_field() {
        let err = |body: &str| parse_chat_request(body.as_bytes()).unwrap_err();
        assert_eq!(err("{nope").code, Some("invalid_json"));
        assert_eq!(err("{}").param.as_deref(), Some("messages"));
        assert!(err(r#"{"messages": "hi"}"#).message.contains("must be an array, not a string"));
        assert_eq!(err(r#"{"messages": [{"content": "x"}]}"#).param.as_deref(), Some("messages[0].role"));
        assert_eq!(err(r#"{"messages": [{"role": "user", "content": 5}]}"#).param.as_deref(), Some("messages[0].content"));
        assert_eq!(err(r#"{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}"#).param.as_deref(), Some("stream"));
        assert_eq!(err(r#"{"messages": [{"role": "assistant", "content": "x"}]}"#).param.as_deref(), Some("messages[0].role"));
        assert_eq!(err(r#"{"messages": []}"#).param.as_deref(), Some("messages"));
        assert_eq!(err(r#"{"messages": [{"role": "user", "content": "x"}], "user": 1}"#).param.as_deref(), Some("user"));
    }

    #[test]
    fn history_keeps_user_and_assistant_text() {
        let body = r#"{"model": "ignored", "stream": true, "stream_options": {"include_usage": true}, "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "my name "}, {"type": "image_url", "image_url": {}}, {"type": "text", "text": "is Ada"}]},
            {"role": "assistant", "content": "Hello Ada"},
            {"role": "user", "content": "what is my name?"}]}"#;
        let request = parse_chat_request(body.as_bytes()).unwrap();
        assert_eq!(request.content, "what is my name?");
        assert!(request.stream && request.include_usage);
        let shape: Vec<(Role, String)> = request.history.iter().map(|m| (m.role, m.text().to_string())).collect();
        assert_eq!(shape, [(Role::User, "my name is Ada".to_string()), (Role::Assistant, "Hello Ada".to_string())]);
    }

    #[test]
    fn responses_have_the_openai_shape() {
        let head = CompletionHead { id: "chatcmpl-1".into(), created: 7, model: "m".into() };
        let usage = usage(Some(&json!({"prompt_tokens": 3, "completion_tokens": 2})));
        let body = completion(&head, "hi", usage.clone());
        assert_eq!(body["choices"][0]["message"], json!({"role": "assistant", "content": "hi"}));
        assert_eq!(body["usage"]["total_tokens"], 5);
        assert_eq!(chunk(&head, json!({"content": "h"}), None)["object"], "chat.completion.chunk");
        assert_eq!(ApiError::invalid("messages", "x").body()["error"]["param"], "messages");
    }
}
