//! The Anthropic Messages API (`api = "anthropic"`): the [`Wire`] that
//! [`HttpProvider`] speaks for it.
//!
//! This module converts our request (OpenAI-shaped [`Message`]s and tool
//! definitions, which the rest of the host uses) to a Messages body; reading
//! answers and streams is `answer.rs`. HTTP, caps, timeouts and retries are
//! shared (`provider/http.rs`, `provider/retry.rs`): a `529 overloaded` is a
//! 5xx and retried, `Retry-After` is honoured.
//!
//! The conversion:
//! - system messages become the top-level `system` blocks;
//! - an assistant message becomes `thinking` blocks (replayed verbatim from
//!   its [`THINKING_BLOCKS`] metadata, signatures included, as the API
//!   requires for a turn that used tools), a `text` block, and one
//!   `tool_use` block per call (arguments parsed back to an object);
//! - tool results become `tool_result` blocks in a user message; messages
//!   of the same role in a row are merged into one (the API alternates);
//! - **prompt caching**: `cache_control` marks the end of the stable
//!   prefix, the last tool definition (the registry keeps them sorted) and
//!   the system prompt, and the last block of the conversation, so the next
//!   request reads everything before its new messages from the cache.

mod answer;

use serde_json::{Map, Value, json};

use super::http::{HttpProvider, ProviderOptions, ProviderSetupError, Wire};
use super::{ChatRequest, ChatResponse, THINKING_BLOCKS};
use crate::session::{Message, Role};

pub use answer::AnthropicStream;

/// The `anthropic-version` header sent with every request.
pub const API_VERSION: &str = "2023-06-01";

/// The Anthropic Messages wire format.
#[derive(Debug, Clone, Default)]
pub struct Anthropic {
    /// Extended thinking: the token budget asked for, if any (must be
    /// below `max_tokens`; the API requires at least 1 024).
    pub thinking_budget: Option<u32>,
}

/// An Anthropic Messages API.
pub type AnthropicProvider = HttpProvider<Anthropic>;

impl HttpProvider<Anthropic> {
    /// A provider for the Messages API at `options.base_url`
    /// (`https://api.anthropic.com/v1`).
    pub fn anthropic(wire: Anthropic, options: ProviderOptions) -> Result<Self, ProviderSetupError> {
        HttpProvider::with_wire(wire, options)
    }
}

impl Wire for Anthropic {
    type Stream = AnthropicStream;
    const NAME: &'static str = "anthropic";
    const PATH: &'static str = "/messages";

    fn encode(&self, request: &ChatRequest, stream: bool) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(&request_body(request, stream, self.thinking_budget))
    }

    fn headers(&self, builder: reqwest::RequestBuilder, api_key: Option<&str>) -> reqwest::RequestBuilder {
        let builder = builder.header("anthropic-version", API_VERSION);
        match api_key {
            Some(key) => builder.header("x-api-key", key),
            None => builder,
        }
    }

    fn decode(&self, body: &str, _model: &str, _endpoint: &str) -> ChatResponse {
        answer::parse_message(body)
    }

    fn stream(&self) -> AnthropicStream {
        AnthropicStream::default()
    }
}

/// Marks a block as the end of a cached prefix.
fn cached(mut block: Value) -> Value {
    if let Some(object) = block.as_object_mut() {
        object.insert("cache_control".into(), json!({"type": "ephemeral"}));
    }
    block
}

/// The Messages request body for `request`.
pub fn request_body(request: &ChatRequest, stream: bool, thinking_budget: Option<u32>) -> Value {
    let system: Vec<&str> = request.messages.iter().filter(|m| m.role == Role::System).map(Message::text).filter(|t| !t.trim().is_empty()).collect();
    let mut body = Map::new();
    body.insert("model".into(), request.model.clone().into());
    body.insert("max_tokens".into(), request.max_tokens.into());
    if !system.is_empty() {
        body.insert("system".into(), json!([cached(json!({"type": "text", "text": system.join("\n\n")}))]));
    }
    body.insert("messages".into(), messages(&request.messages).into());
    let mut tools: Vec<Value> = request.tools.iter().filter_map(tool).collect();
    if let Some(last) = tools.pop() {
        tools.push(cached(last));
    }
    if !tools.is_empty() {
        body.insert("tools".into(), tools.into());
    }
    match thinking_budget {
        // Thinking takes no temperature (the API refuses one).
        Some(budget) if budget < request.max_tokens => {
            body.insert("thinking".into(), json!({"type": "enabled", "budget_tokens": budget}));
        }
        _ => {
            if let Some(t) = request.temperature {
                // Through the decimal text, so 0.7f32 is sent as 0.7.
                body.insert("temperature".into(), t.to_string().parse::<f64>().unwrap_or(f64::from(t)).into());
            }
        }
    }
    if stream {
        body.insert("stream".into(), true.into());
    }
    Value::Object(body)
}

/// An OpenAI function definition (`{"type":"function","function":{…}}`)
/// as an Anthropic tool (`{"name","description","input_schema"}`).
fn tool(definition: &Value) -> Option<Value> {
    let function = definition.get("function").unwrap_or(definition);
    let name = function["name"].as_str()?;
    let mut tool = json!({"name": name, "input_schema": function.get("parameters").cloned().unwrap_or_else(|| json!({"type": "object"}))});
    if let Some(description) = function["description"].as_str() {
        tool["description"] = description.into();
    }
    Some(tool)
}

/// The conversation as alternating user / assistant messages of blocks.
fn messages(history: &[Message]) -> Vec<Value> {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in history {
        let (role, blocks) = match message.role {
            Role::System => continue,
            Role::User => ("user", user_blocks(message)),
            Role::Tool => {
                let id = message.tool_call_id.clone().unwrap_or_default();
                // A result's text may be empty; the block still answers the call.
                let mut result = json!({"type": "tool_result", "tool_use_id": id});
                if !message.text().is_empty() {
                    result["content"] = message.text().into();
                }
                ("user", vec![result])
            }
            Role::Assistant => ("assistant", assistant_blocks(message)),
        };
        if blocks.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    // The API wants the conversation to open with the user.
    if out.first().is_some_and(|(role, _)| *role == "assistant") {
        out.insert(0, ("user", vec![json!({"type": "text", "text": "(conversation continues)"})]));
    }
    let count = out.len();
    out.into_iter()
        .enumerate()
        .map(|(n, (role, mut blocks))| {
            // The end of the conversation so far: the next request, which
            // repeats all of it, reads it from the cache.
            if n + 1 == count
                && let Some(last) = blocks.pop()
            {
                blocks.push(cached(last));
            }
            json!({"role": role, "content": blocks})
        })
        .collect()
}

/// A user message's images (first: the API reads them better before the
/// question) and its text.
fn user_blocks(message: &Message) -> Vec<Value> {
    let mut blocks: Vec<Value> = message
        .images
        .iter()
        .map(|image| json!({"type": "image", "source": {"type": "base64", "media_type": image.media_type, "data": &*image.base64}}))
        .collect();
    blocks.extend(text_block(message.text()));
    blocks
}

/// A text block, or none for empty text (the API rejects empty blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.trim().is_empty()).then(|| json!({"type": "text", "text": text}))
}

fn assistant_blocks(message: &Message) -> Vec<Value> {
    let mut blocks = Vec::new();
    // Thinking only matters (and is only accepted) before tool use.
    if !message.tool_calls.is_empty()
        && let Some(Value::Array(thinking)) = message.meta.get(THINKING_BLOCKS)
    {
        blocks.extend(thinking.iter().filter(|b| matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking"))).cloned());
    }
    blocks.extend(text_block(message.text()));
    for call in &message.tool_calls {
        let input = match serde_json::from_str::<Value>(&call.function.arguments) {
            Ok(Value::Object(input)) => Value::Object(input),
            Ok(Value::Null) | Err(_) if call.function.arguments.trim().is_empty() => json!({}),
            // Not an object: kept for the model to see, in the one shape the
            // API takes (the tool already refused these arguments).
            _ => json!({"_arguments": call.function.arguments}),
        };
        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input}));
    }
    blocks
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::session::ToolCall;

    fn request(messages: Vec<Message>) -> ChatRequest {
        let tools: Arc<[Value]> = Arc::from(vec![
            json!({"type": "function", "function": {"name": "a_tool", "description": "A.", "parameters": {"type": "object", "properties": {}}}}),
            json!({"type": "function", "function": {"name": "b_tool", "parameters": {"type": "object"}}}),
        ]);
        ChatRequest { model: "claude-x".into(), messages, tools, max_tokens: 4096, temperature: Some(0.7) }
    }

    #[test]
    fn the_body_has_the_documented_shape_with_cache_breakpoints() {
        let thinking = json!([{"type": "thinking", "thinking": "let me see", "signature": "sig-1"}]);
        let calls = vec![ToolCall::new("toolu_1", "a_tool", r#"{"x":1}"#), ToolCall::new("toolu_2", "b_tool", "not json")];
        let messages = vec![
            Message::system("You are chitin."),
            Message::user("hi"),
            Message::assistant_calls(Some("Looking.".into()), calls).with_meta(THINKING_BLOCKS, thinking.clone()),
            Message::tool_result("toolu_1", "a_tool", "one"),
            Message::tool_result("toolu_2", "b_tool", ""),
            Message::assistant("Done."),
            Message::user("thanks"),
        ];
        let body = request_body(&request(messages), true, None);
        assert_eq!(body["model"], "claude-x");
        assert_eq!(body["max_tokens"], 4096);
        assert_eq!(body["temperature"], 0.7);
        assert_eq!(body["stream"], true);
        assert_eq!(body["system"], json!([{"type": "text", "text": "You are chitin.", "cache_control": {"type": "ephemeral"}}]));
        assert_eq!(body["tools"][0], json!({"name": "a_tool", "description": "A.", "input_schema": {"type": "object", "properties": {}}}));
        assert_eq!(body["tools"][1]["cache_control"], json!({"type": "ephemeral"}));
        let messages = body["messages"].as_array().unwrap();
        let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user", "assistant", "user"]);
        let assistant = messages[1]["content"].as_array().unwrap();
        assert_eq!(assistant[0], thinking[0], "thinking replayed first, signature intact");
        assert_eq!(assistant[1], json!({"type": "text", "text": "Looking."}));
        assert_eq!(assistant[2], json!({"type": "tool_use", "id": "toolu_1", "name": "a_tool", "input": {"x": 1}}));
        assert_eq!(assistant[3]["input"], json!({"_arguments": "not json"}));
        let results = messages[2]["content"].as_array().unwrap();
        assert_eq!(results[0], json!({"type": "tool_result", "tool_use_id": "toolu_1", "content": "one"}));
        assert_eq!(results[1], json!({"type": "tool_result", "tool_use_id": "toolu_2"}));
        assert_eq!(messages[4]["content"], json!([{"type": "text", "text": "thanks", "cache_control": {"type": "ephemeral"}}]));
        let breakpoints = body.to_string().matches("cache_control").count();
        assert!(breakpoints <= 4, "the API allows 4 breakpoints, got {breakpoints}");
    }

    #[test]
    fn thinking_replaces_temperature_and_an_assistant_first_history_gets_a_user_opening() {
        let body = request_body(&request(vec![Message::assistant("earlier"), Message::user("go on")]), false, Some(2048));
        assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
        assert!(body.get("temperature").is_none() && body.get("stream").is_none());
        assert_eq!(body["messages"][0]["role"], "user");
        assert_eq!(body["messages"][1]["content"][0]["text"], "earlier");
        assert!(body.get("system").is_none());
    }
}
