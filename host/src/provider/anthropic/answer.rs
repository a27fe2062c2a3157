//! Reading Anthropic Messages answers: a plain message ([`parse_message`])
//! and a stream of named events ([`AnthropicStream`]), both into one
//! [`ChatResponse`].
//!
//! - `stop_reason`: `end_turn` / `stop_sequence` → stop, `max_tokens` →
//!   length (the runner continues the answer), `tool_use` → tools, others
//!   (`refusal`, `pause_turn`) kept by name;
//! - usage: `input_tokens` counts only what was not cached, so the prompt
//!   total adds `cache_read_input_tokens` and `cache_creation_input_tokens`;
//! - `thinking` and `redacted_thinking` blocks are kept whole in
//!   [`ChatResponse::replay`] (the API checks their signatures when they come
//!   back with tool results) and their text in [`ChatResponse::reasoning`];
//! - an `error` body or event is an error response: retryable when the API
//!   says it is overloaded or failed (`overloaded_error`, `api_error`,
//!   `rate_limit_error`), not when the request or key is wrong.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::provider::http::{StreamDecoder, clip, http_error, stream_end_error, unreadable};
use crate::provider::retry::Attempt;
use crate::provider::sse::SseEvent;
use crate::provider::{ChatResponse, FinishReason, ProviderError, StreamSink, Usage};
use crate::session::ToolCall;

/// The HTTP status an Anthropic error type stands for, so an error inside a
/// 200 answer or a stream is judged like the same error as a status.
fn status_of(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// An `{"type":"error","error":{…}}` object as a [`ProviderError`].
fn api_error(value: &Value) -> ProviderError {
    let error = value.get("error").unwrap_or(value);
    let status = status_of(error["type"].as_str().unwrap_or_default());
    let mut error = http_error(status, &json!({"error": error}).to_string(), "", "");
    // It came inside an answer, not as the HTTP status.
    error.status = None;
    error
}

fn stop_reason(reason: Option<&str>, has_calls: bool) -> FinishReason {
    match reason {
        Some("end_turn" | "stop_sequence") => FinishReason::Stop,
        Some("max_tokens") => FinishReason::Length,
        Some("tool_use") => FinishReason::ToolCalls,
        Some(other) => FinishReason::Other(other.to_string()),
        None if has_calls => FinishReason::ToolCalls,
        None => FinishReason::Stop,
    }
}

/// Usage from a `usage` object; `base` holds what an earlier event said
/// (the stream sends input counts at the start, output counts at the end).
fn usage(value: &Value, base: Usage) -> Usage {
    if !value.is_object() {
        return base;
    }
    let count = |key: &str| value[key].as_u64();
    let read = count("cache_read_input_tokens").unwrap_or(base.cache_read_tokens);
    let write = count("cache_creation_input_tokens").unwrap_or(base.cache_write_tokens);
    let prompt = match count("input_tokens") {
        Some(uncached) => uncached + read + write,
        None => base.prompt_tokens,
    };
    Usage { prompt_tokens: prompt, completion_tokens: count("output_tokens").unwrap_or(base.completion_tokens), cache_read_tokens: read, cache_write_tokens: write }
}

/// One content block being assembled.
#[derive(Debug, Clone)]
enum Block {
    Text(String),
    ToolUse { id: String, name: String, input: String },
    /// `thinking` / `redacted_thinking`, kept whole; deltas extend it.
    Thinking(Value),
}

/// The response from an answer's blocks.
fn assemble(blocks: Vec<Block>, reason: Option<&str>, usage: Usage) -> ChatResponse {
    let mut text = String::new();
    let mut saw_text = false;
    let mut calls = Vec::new();
    let mut replay = Vec::new();
    let mut reasoning = String::new();
    for block in blocks {
        match block {
            Block::Text(piece) => {
                saw_text = true;
                text.push_str(&piece);
            }
            Block::ToolUse { id, name, input } => {
                let arguments = if input.trim().is_empty() { "{}".to_string() } else { input };
                calls.push(ToolCall::new(id, name, arguments));
            }
            Block::Thinking(block) => {
                if let Some(thought) = block["thinking"].as_str() {
                    reasoning.push_str(thought);
                }
                replay.push(block);
            }
        }
    }
    let finish = stop_reason(reason, !calls.is_empty());
    let content = if !text.is_empty() { Some(text) } else { (saw_text && calls.is_empty()).then(String::new) };
    ChatResponse {
        content,
        tool_calls: calls,
        finish_reason: Some(finish),
        usage,
        reasoning: Some(reasoning).filter(|r| !r.trim().is_empty()),
        replay,
        ..Default::default()
    }
}

/// A content block from its JSON.
fn block(value: &Value) -> Option<Block> {
    match value["type"].as_str()? {
        "text" => Some(Block::Text(value["text"].as_str().unwrap_or_default().to_string())),
        "tool_use" => Some(Block::ToolUse {
            id: value["id"].as_str().unwrap_or_default().to_string(),
            name: value["name"].as_str().unwrap_or_default().to_string(),
            // A streamed block starts with `{}` and gets its input as JSON
            // pieces; a whole block has its input here.
            input: match &value["input"] {
                Value::Object(o) if o.is_empty() => String::new(),
                Value::Null => String::new(),
                other => other.to_string(),
            },
        }),
        "thinking" | "redacted_thinking" => Some(Block::Thinking(value.clone())),
        _ => None, // server tool results and future block types: not ours to run
    }
}

/// Parses a non-streaming answer.
pub(super) fn parse_message(body: &str) -> ChatResponse {
    let value: Value = match serde_json::from_str(body) {
        Ok(value) => value,
        Err(e) => return ChatResponse::failed(unreadable(&format!("not JSON: {e}"), body)),
    };
    if value["type"] == "error" || value.get("error").is_some_and(|e| e.is_object()) {
        return ChatResponse::failed(api_error(&value));
    }
    let Some(content) = value["content"].as_array() else {
        return ChatResponse::failed(unreadable("no content", body));
    };
    let blocks = content.iter().filter_map(block).collect();
    assemble(blocks, value["stop_reason"].as_str(), usage(&value["usage"], Usage::default()))
}

/// A streamed answer as it accumulates, one event at a time.
#[derive(Debug, Default)]
pub struct AnthropicStream {
    blocks: BTreeMap<u64, Block>,
    stop_reason: Option<String>,
    usage: Usage,
    /// `message_start` arrived.
    started: bool,
    /// `message_stop` arrived.
    stopped: bool,
    error: Option<ProviderError>,
    /// Text reached the sink: no retry from here on.
    streamed: bool,
}

impl StreamDecoder for AnthropicStream {
    fn event(&mut self, event: &SseEvent, sink: Option<&StreamSink>) -> bool {
        let data = event.data.trim();
        if data.is_empty() {
            return true;
        }
        let value: Value = match serde_json::from_str(data) {
            Ok(value) => value,
            Err(e) => {
                if event.event == "error" {
                    self.error = Some(ProviderError { status: None, retryable: true, message: format!("the model provider reported an error: {}", clip(data)) });
                    return false;
                }
                tracing::warn!("skipping an unreadable stream event ({e}): {}", clip(data));
                return true;
            }
        };
        // The event name is repeated in `type`; either will do.
        let kind = value["type"].as_str().unwrap_or(event.event.as_str()).to_string();
        match kind.as_str() {
            "message_start" => {
                self.started = true;
                self.usage = usage(&value["message"]["usage"], self.usage);
            }
            "content_block_start" => {
                let index = value["index"].as_u64().unwrap_or(self.blocks.len() as u64);
                if let Some(block) = block(&value["content_block"]) {
                    if let (Block::Text(text), Some(sink)) = (&block, sink)
                        && !text.is_empty()
                    {
                        sink(text);
                        self.streamed = true;
                    }
                    self.blocks.insert(index, block);
                }
            }
            "content_block_delta" => {
                let index = value["index"].as_u64().unwrap_or(0);
                let delta = &value["delta"];
                match (self.blocks.get_mut(&index), delta["type"].as_str()) {
                    (Some(Block::Text(text)), Some("text_delta")) => {
                        let piece = delta["text"].as_str().unwrap_or_default();
                        text.push_str(piece);
                        if let Some(sink) = sink
                            && !piece.is_empty()
                        {
                            sink(piece);
                            self.streamed = true;
                        }
                    }
                    (Some(Block::ToolUse { input, .. }), Some("input_json_delta")) => {
                        input.push_str(delta["partial_json"].as_str().unwrap_or_default());
                    }
                    (Some(Block::Thinking(block)), Some(kind @ ("thinking_delta" | "signature_delta"))) => {
                        let field = if kind == "thinking_delta" { "thinking" } else { "signature" };
                        let so_far = block[field].as_str().unwrap_or_default().to_string();
                        block[field] = format!("{so_far}{}", delta[field].as_str().unwrap_or_default()).into();
                    }
                    _ => {} // a delta for a block we do not keep
                }
            }
            "message_delta" => {
                if let Some(reason) = value["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(reason.to_string());
                }
                self.usage = usage(&value["usage"], self.usage);
            }
            "message_stop" => {
                self.stopped = true;
                return false;
            }
            "error" => {
                self.error = Some(api_error(&value));
                return false;
            }
            _ => {} // ping, content_block_stop, future events
        }
        true
    }

    fn refuse(&mut self, error: ProviderError) {
        self.error = Some(error);
    }

    fn finish(self, interruption: Option<ProviderError>) -> Attempt {
        let streamed = self.streamed;
        let complete = self.stopped || self.stop_reason.is_some();
        let error = self.error.or_else(|| stream_end_error(self.started || !self.blocks.is_empty(), complete, interruption));
        let blocks: Vec<Block> = self.blocks.into_values().collect();
        if let Some(error) = error {
            // The partial text is kept: it is what the user already saw.
            let text: String = blocks.iter().filter_map(|b| if let Block::Text(t) = b { Some(t.as_str()) } else { None }).collect();
            let content = (!text.is_empty()).then_some(text);
            return Attempt { response: ChatResponse { content, ..ChatResponse::failed(error) }, retry_after: None, streamed };
        }
        Attempt { response: assemble(blocks, self.stop_reason.as_deref(), self.usage), retry_after: None, streamed }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_stream(body: &str) -> (Attempt, Vec<String>) {
        crate::provider::http::decode_stream(AnthropicStream::default(), body, 5)
    }

    fn sse(events: &[(&str, Value)]) -> String {
        events.iter().map(|(name, data)| format!("event: {name}\ndata: {data}\n\n")).collect()
    }

    #[test]
    fn a_plain_message_with_thinking_text_and_tool_use() {
        let body = json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
            "content": [
                {"type": "thinking", "thinking": "I should look.", "signature": "sig-abc"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "list_dir", "input": {"path": "."}}
            ],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 7, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}
        });
        let response = parse_message(&body.to_string());
        assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(response.content.as_deref(), Some("Let me check."));
        assert_eq!(response.tool_calls[0].id, "toolu_1");
        assert_eq!(response.tool_calls[0].function.arguments, r#"{"path":"."}"#);
        assert_eq!(response.usage, Usage { prompt_tokens: 130, completion_tokens: 7, cache_read_tokens: 100, cache_write_tokens: 20 });
        assert_eq!(response.reasoning.as_deref(), Some("I should look."));
        assert_eq!(response.replay, vec![json!({"type": "thinking", "thinking": "I should look.", "signature": "sig-abc"})]);
    }

    #[test]
    fn stop_reasons_map_and_errors_are_judged_by_type() {
        let message = |reason: &str| json!({"type": "message", "content": [{"type": "text", "text": "x"}], "stop_reason": reason}).to_string();
        assert_eq!(parse_message(&message("end_turn")).finish_reason, Some(FinishReason::Stop));
        assert_eq!(parse_message(&message("max_tokens")).finish_reason, Some(FinishReason::Length));
        assert_eq!(parse_message(&message("refusal")).finish_reason, Some(FinishReason::Other("refusal".into())));
        let overloaded = parse_message(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
        assert!(overloaded.is_error() && overloaded.error.as_ref().unwrap().retryable, "{overloaded:?}");
        let bad = parse_message(r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}"#);
        let error = bad.error.unwrap();
        assert!(!error.retryable && error.message.contains("roles must alternate"), "{error:?}");
        assert!(parse_message("<html>").error.unwrap().retryable);
    }

    #[test]
    fn a_stream_assembles_text_tools_thinking_and_usage() {
        let body = sse(&[
            ("message_start", json!({"type": "message_start", "message": {"id": "msg_1", "content": [], "usage": {"input_tokens": 5, "cache_read_input_tokens": 50, "cache_creation_input_tokens": 0, "output_tokens": 1}}})),
            ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm, "}})),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "files."}})),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig-xyz"}})),
            ("content_block_stop", json!({"type": "content_block_stop", "index": 0})),
            ("ping", json!({"type": "ping"})),
            ("content_block_start", json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}})),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hel"}})),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "lo"}})),
            ("content_block_start", json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": {}}})),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": "}})),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "\"a.txt\"}"}})),
            ("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}})),
            ("message_stop", json!({"type": "message_stop"})),
        ]);
        let (attempt, seen) = run_stream(&body);
        let response = attempt.response;
        assert!(!response.is_error(), "{response:?}");
        assert_eq!(seen, ["Hel", "lo"]);
        assert_eq!(response.content.as_deref(), Some("Hello"));
        assert_eq!(response.tool_calls[0].function.arguments, r#"{"path": "a.txt"}"#);
        assert_eq!(response.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(response.usage, Usage { prompt_tokens: 55, completion_tokens: 30, cache_read_tokens: 50, cache_write_tokens: 0 });
        assert_eq!(response.replay, vec![json!({"type": "thinking", "thinking": "Hmm, files.", "signature": "sig-xyz"})]);
        assert_eq!(response.reasoning.as_deref(), Some("Hmm, files."));
    }

    #[test]
    fn stream_errors_and_truncation() {
        let overloaded = sse(&[
            ("message_start", json!({"type": "message_start", "message": {"usage": {"input_tokens": 1}}})),
            ("error", json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})),
        ]);
        let (attempt, _) = run_stream(&overloaded);
        let error = attempt.response.error.unwrap();
        assert!(error.retryable && error.message.contains("Overloaded"), "{error:?}");

        let cut = sse(&[
            ("message_start", json!({"type": "message_start", "message": {"usage": {"input_tokens": 1}}})),
            ("content_block_start", json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})),
            ("content_block_delta", json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "partial"}})),
        ]);
        let (attempt, _) = run_stream(&cut);
        assert!(attempt.streamed && attempt.response.is_error());
        assert_eq!(attempt.response.content.as_deref(), Some("partial"));
        let (attempt, _) = run_stream("");
        assert!(attempt.response.error.unwrap().message.contains("without an answer"));
    }
}
