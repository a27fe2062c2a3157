//! The OpenAI chat-completions wire format as the gateway speaks it: the
//! request it accepts (`provider::openai::wire::ServedRequest`, with a walk
//! over the JSON when it does not parse, so a 400 names the field), and the
//! `chat.completion`, `chat.completion.chunk`, model list and error bodies
//! it writes (the completion and chunk shapes are the provider's own,
//! `provider::openai::wire`, shared with the test mock). No I/O here:
//! `api.rs` owns the HTTP side.

use serde_json::{Value, json};

use crate::provider::openai::wire::{ServedContent, ServedMessage, ServedRequest};
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

/// Parses and validates a request body. The shape is the shared
/// [`ServedRequest`]; when it does not parse, [`diagnose`] walks the JSON to
/// name the field at fault, which serde's messages do not do reliably for
/// untagged content.
pub fn parse_chat_request(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let request: ServedRequest<Option<Vec<ServedMessage>>> = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(e) => return Err(diagnose(body).unwrap_or_else(|| ApiError::new(400, "invalid_request_error", None, format!("the request body is not a valid chat completion request: {e}")))),
    };
    let include_usage = request.include_usage();
    let Some(messages) = request.messages else {
        return Err(ApiError::invalid("messages", "missing required field `messages`"));
    };
    let mut turns = Vec::with_capacity(messages.len());
    for (i, message) in messages.into_iter().enumerate() {
        let text = content_text(message.content, &format!("messages[{i}].content"))?;
        turns.push((message.role, text));
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
    Ok(ChatRequest { content, history, stream: request.stream, include_usage, user: request.user.filter(|u| !u.is_empty()) })
}

/// The error of a body that does not parse as a [`ServedRequest`], naming
/// the field; `None` when the walk finds nothing wrong.
fn diagnose(body: &[u8]) -> Option<ApiError> {
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => return Some(ApiError::new(400, "invalid_request_error", Some("invalid_json"), format!("the request body is not valid JSON: {e}"))),
    };
    let Some(object) = value.as_object() else {
        return Some(ApiError::new(400, "invalid_request_error", Some("invalid_json"), "the request body must be a JSON object"));
    };
    let check = || -> Result<(), ApiError> {
        match object.get("messages") {
            None | Some(Value::Null) => {}
            Some(Value::Array(messages)) => {
                for (i, message) in messages.iter().enumerate() {
                    let field = format!("messages[{i}]");
                    let message = message.as_object().ok_or_else(|| ApiError::invalid(&field, format!("`{field}` must be an object, not {}", json_kind(message))))?;
                    match message.get("role") {
                        Some(Value::String(_)) => {}
                        None => return Err(ApiError::invalid(format!("{field}.role"), format!("missing required field `{field}.role`"))),
                        Some(other) => return Err(ApiError::invalid(format!("{field}.role"), format!("`{field}.role` must be a string, not {}", json_kind(other)))),
                    }
                    content_shape(message.get("content"), &format!("{field}.content"))?;
                }
            }
            Some(other) => return Err(ApiError::invalid("messages", format!("`messages` must be an array, not {}", json_kind(other)))),
        }
        optional_bool(object.get("stream"), "stream")?;
        match object.get("stream_options") {
            None | Some(Value::Null) => {}
            Some(Value::Object(options)) => optional_bool(options.get("include_usage"), "stream_options.include_usage")?,
            Some(other) => return Err(ApiError::invalid("stream_options", format!("`stream_options` must be an object, not {}", json_kind(other)))),
        }
        match object.get("user") {
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(other) => return Err(ApiError::invalid("user", format!("`user` must be a string, not {}", json_kind(other)))),
        }
        match object.get("model") {
            None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
            Some(other) => Err(ApiError::invalid("model", format!("`model` must be a string, not {}", json_kind(other)))),
        }
    };
    check().err()
}

fn optional_bool(value: Option<&Value>, field: &str) -> Result<(), ApiError> {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(_)) => Ok(()),
        Some(other) => Err(ApiError::invalid(field, format!("`{field}` must be a boolean, not {}", json_kind(other)))),
    }
}

/// Names what is wrong with a `content` that did not parse.
fn content_shape(content: Option<&Value>, field: &str) -> Result<(), ApiError> {
    match content {
        None | Some(Value::Null) | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(parts)) => {
            for (i, part) in parts.iter().enumerate() {
                let Some(part) = part.as_object() else {
                    return Err(ApiError::invalid(format!("{field}[{i}]"), format!("`{field}[{i}]` must be an object, not {}", json_kind(part))));
                };
                if !matches!(part.get("type"), None | Some(Value::String(_))) {
                    return Err(ApiError::invalid(format!("{field}[{i}].type"), format!("`{field}[{i}].type` must be a string")));
                }
                if !matches!(part.get("text"), None | Some(Value::Null) | Some(Value::String(_))) {
                    return Err(ApiError::invalid(format!("{field}[{i}].text"), format!("`{field}[{i}].text` must be a string")));
                }
            }
            Ok(())
        }
        Some(other) => Err(ApiError::invalid(field, format!("`{field}` must be a string or an array of content parts, not {}", json_kind(other)))),
    }
}

/// A message's text: a string, or the `text` parts of an array (other
/// parts, such as images, are not supported yet and are skipped).
fn content_text(content: Option<ServedContent>, field: &str) -> Result<String, ApiError> {
    match content {
        None => Ok(String::new()),
        Some(ServedContent::Text(text)) => Ok(text),
        Some(ServedContent::Parts(parts)) => {
            let mut text = String::new();
            for (i, part) in parts.into_iter().enumerate() {
                if part.kind == "text" {
                    match part.text {
                        Some(t) => text.push_str(&t),
                        None => return Err(ApiError::invalid(format!("{field}[{i}].text"), format!("`{field}[{i}].text` must be a string"))),
                    }
                }
            }
            Ok(text)
        }
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

/// The OpenAI `usage` object of a reply's token counts.
pub fn usage(prompt_tokens: u64, completion_tokens: u64) -> Value {
    crate::provider::openai::wire::usage(prompt_tokens, completion_tokens)
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
        assert_eq!(err(r#"{"messages": [{"role": "user", "content": "x"}], "model": 1}"#).param.as_deref(), Some("model"));
        assert_eq!(err(r#"{"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]}"#).param.as_deref(), Some("messages[0].content[0].text"));
        assert_eq!(err(r#"{"messages": [{"role": "user", "content": [{"type": "text"}]}]}"#).param.as_deref(), Some("messages[0].content[0].text"));
        assert_eq!(err(r#"{"messages": [{"role": "user", "content": ["x"]}]}"#).param.as_deref(), Some("messages[0].content[0]"));
        assert!(err(r#"{"messages": null}"#).message.contains("missing required field"));
        assert_eq!(err("[1]").code, Some("invalid_json"));
    }

    #[test]
    fn nulls_read_as_absent() {
        let body = r#"{"messages": [{"role": "user", "content": "hi"}], "stream": null, "stream_options": null, "user": null, "model": null}"#;
        let request = parse_chat_request(body.as_bytes()).unwrap();
        assert!(!request.stream && !request.include_usage && request.user.is_none());
        let body = r#"{"messages": [{"role": "user", "content": "hi"}], "stream": true, "stream_options": {"include_usage": null}, "user": ""}"#;
        let request = parse_chat_request(body.as_bytes()).unwrap();
        assert!(request.stream && !request.include_usage && request.user.is_none());
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
        let usage = Some(usage(3, 2));
        let body = completion(&head, "hi", usage.clone());
        assert_eq!(body["choices"][0]["message"], json!({"role": "assistant", "content": "hi"}));
        assert_eq!(body["usage"]["total_tokens"], 5);
        assert_eq!(chunk(&head, json!({"content": "h"}), None)["object"], "chat.completion.chunk");
        assert_eq!(ApiError::invalid("messages", "x").body()["error"]["param"], "messages");
    }
}
