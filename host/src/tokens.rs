//! Token estimates for context governance.
//!
//! Estimates are deliberately cheap: they run on every model request. The
//! rule of thumb is bytes/4 plus a small per-message overhead (role, framing).

use serde_json::Value;

use crate::session::Message;

/// Framing tokens per message (role, separators), as chat APIs count them.
pub const PER_MESSAGE_OVERHEAD: usize = 4;

/// Tokens of a text.
pub fn estimate_text(text: &str) -> usize {
    text.len().div_ceil(4)
}

/// Tokens of one message, tool calls included.
pub fn estimate_message(message: &Message) -> usize {
    let calls: usize = message
        .tool_calls
        .iter()
        .map(|c| estimate_text(&c.function.name) + estimate_text(&c.function.arguments) + PER_MESSAGE_OVERHEAD)
        .sum();
    PER_MESSAGE_OVERHEAD + estimate_text(message.text()) + calls
}

/// Tokens of a conversation plus the tool definitions sent with it.
pub fn estimate_request(messages: &[Message], tools: &[Value]) -> usize {
    messages.iter().map(estimate_message).sum::<usize>() + estimate_tools(tools)
}

/// Tokens of tool definitions.
pub fn estimate_tools(tools: &[Value]) -> usize {
    tools.iter().map(|t| estimate_text(&t.to_string())).sum()
}
