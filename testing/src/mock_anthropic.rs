//! The Anthropic side of [`super::MockLlm`]: a request to `POST
//! /v1/messages` gets the same scripted [`super::MockReply`] rendered as the
//! Messages API renders it (content blocks, `stop_reason`, named stream
//! events, thinking blocks with a signature, `{"type":"error",…}` bodies),
//! and the mock keeps **prompt-cache accounting** for both APIs:
//!
//! - Anthropic: each `cache_control` breakpoint caches the prefix up to it
//!   (tools, then system, then messages). A request reads the longest
//!   prefix cached by an earlier request (`cache_read_input_tokens`) and
//!   writes the rest up to its last breakpoint (`cache_creation_input_tokens`);
//! - OpenAI: automatic prefix caching per message, reported as
//!   `prompt_tokens_details.cached_tokens`.
//!
//! Tokens are a quarter of the bytes of each block's JSON, as elsewhere in
//! the mock. Good enough to tell a request that reuses its prefix from one
//! that changes it (a tool list in a new order, a system prompt with a
//! timestamp): what the prompt-cache benchmark measures.

use std::collections::HashSet;

use bytes::Bytes;
use serde_json::{Value, json};

/// Cache totals over every request the mock answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Prompt tokens of all requests.
    pub prompt_tokens: u64,
    /// Of those, read from the cache.
    pub read_tokens: u64,
    /// Of those, written to the cache.
    pub written_tokens: u64,
}

impl CacheStats {
    /// Read tokens over prompt tokens (0 with no requests).
    pub fn hit_ratio(&self) -> f64 {
        if self.prompt_tokens == 0 { 0.0 } else { self.read_tokens as f64 / self.prompt_tokens as f64 }
    }
}

/// What one request did to the cache.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CacheUse {
    pub prompt: u64,
    pub read: u64,
    pub written: u64,
}

/// Prefixes cached so far, by hash.
#[derive(Debug, Default)]
pub(crate) struct PromptCache {
    prefixes: HashSet<blake3::Hash>,
    pub totals: CacheStats,
}

impl PromptCache {
    /// Accounts for one request: `blocks` in prompt order, each with
    /// whether it ends a cached prefix.
    pub fn account(&mut self, blocks: &[(String, bool)]) -> CacheUse {
        let mut hasher = blake3::Hasher::new();
        let mut tokens = 0u64;
        // (prefix hash, tokens up to here, ends a cached prefix)
        let mut prefixes = Vec::with_capacity(blocks.len());
        for (text, breakpoint) in blocks {
            hasher.update(text.as_bytes());
            hasher.update(b"\x00");
            tokens += (text.len() as u64 / 4).max(1);
            prefixes.push((hasher.finalize(), tokens, *breakpoint));
        }
        // Like the API, a breakpoint finds an earlier request's prefix that
        // ends before it (the API looks back 20 blocks; the mock, all).
        let last = prefixes.iter().rposition(|p| p.2);
        let upto = last.map_or(0, |i| i + 1);
        let read = prefixes[..upto].iter().filter(|p| self.prefixes.contains(&p.0)).map(|p| p.1).max().unwrap_or(0);
        let written = last.map_or(0, |i| prefixes[i].1.saturating_sub(read));
        for (hash, _, breakpoint) in prefixes {
            if breakpoint {
                self.prefixes.insert(hash);
            }
        }
        self.totals.prompt_tokens += tokens;
        self.totals.read_tokens += read;
        self.totals.written_tokens += written;
        CacheUse { prompt: tokens, read, written }
    }
}

/// The blocks of an Anthropic request in cache order, `cache_control`
/// stripped (it is not part of the cached content), each marked when it
/// carried one.
pub(crate) fn anthropic_blocks(request: &Value) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    let mut push = |block: &Value| {
        let mut block = block.clone();
        let marked = block.as_object_mut().and_then(|o| o.remove("cache_control")).is_some();
        out.push((block.to_string(), marked));
    };
    for tool in request["tools"].as_array().into_iter().flatten() {
        push(tool);
    }
    match &request["system"] {
        Value::String(text) => push(&json!({"type": "text", "text": text})),
        Value::Array(blocks) => blocks.iter().for_each(&mut push),
        _ => {}
    }
    for message in request["messages"].as_array().into_iter().flatten() {
        match &message["content"] {
            Value::Array(blocks) => {
                for block in blocks {
                    let mut block = block.clone();
                    block["_role"] = message["role"].clone();
                    push(&block);
                }
            }
            other => push(&json!({"_role": message["role"], "text": other})),
        }
    }
    out
}

/// The blocks of an OpenAI request: tools, then each message; every
/// message ends a cacheable prefix (OpenAI caches automatically).
pub(crate) fn openai_blocks(request: &Value) -> Vec<(String, bool)> {
    let tools = request["tools"].as_array().map(|t| Value::Array(t.clone()).to_string());
    tools
        .into_iter()
        .map(|t| (t, true))
        .chain(request["messages"].as_array().into_iter().flatten().map(|m| (m.to_string(), true)))
        .collect()
}

/// The parts of an answer to render.
pub(crate) struct Rendered<'a> {
    pub id: &'a str,
    pub model: &'a str,
    pub thinking: Option<&'a str>,
    pub content: Option<&'a str>,
    /// (id, name, arguments)
    pub calls: &'a [(String, String, String)],
    /// The OpenAI finish reason (`stop`, `tool_calls`, `length`).
    pub finish: &'a str,
    pub output_tokens: u64,
    pub cache: CacheUse,
}

/// A deterministic stand-in for the signature Anthropic puts on thinking.
pub(crate) fn signature(thinking: &str) -> String {
    format!("mock-sig-{}", &blake3::hash(thinking.as_bytes()).to_hex()[..16])
}

fn stop_reason(finish: &str) -> &'static str {
    match finish {
        "tool_calls" => "tool_use",
        "length" => "max_tokens",
        _ => "end_turn",
    }
}

fn usage(r: &Rendered<'_>) -> Value {
    json!({
        "input_tokens": r.cache.prompt - r.cache.read - r.cache.written,
        "cache_read_input_tokens": r.cache.read,
        "cache_creation_input_tokens": r.cache.written,
        "output_tokens": r.output_tokens,
    })
}

fn input(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| json!({}))
}

/// A whole Messages answer.
pub(crate) fn message(r: &Rendered<'_>) -> Value {
    let mut content = Vec::new();
    if let Some(thinking) = r.thinking {
        content.push(json!({"type": "thinking", "thinking": thinking, "signature": signature(thinking)}));
    }
    if let Some(text) = r.content.filter(|t| !t.is_empty() || r.calls.is_empty()) {
        content.push(json!({"type": "text", "text": text}));
    }
    for (id, name, arguments) in r.calls {
        content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input(arguments)}));
    }
    json!({
        "id": r.id, "type": "message", "role": "assistant", "model": r.model,
        "content": content, "stop_reason": stop_reason(r.finish), "stop_sequence": null,
        "usage": usage(r),
    })
}

fn event(name: &str, data: Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// The answer as the Messages API streams it: `message_start`, one block
/// at a time (start, deltas, stop), `message_delta` with the stop reason
/// and output tokens, `message_stop`. Text comes in `pieces` deltas.
pub(crate) fn stream_events(r: &Rendered<'_>, pieces: usize, split: impl Fn(&str, usize) -> Vec<&str>) -> Vec<Bytes> {
    let mut start_usage = usage(r);
    start_usage["output_tokens"] = 1.into();
    let mut events = vec![event(
        "message_start",
        json!({"type": "message_start", "message": {"id": r.id, "type": "message", "role": "assistant", "model": r.model, "content": [],
            "stop_reason": null, "usage": start_usage}}),
    )];
    let mut index = 0;
    let mut block = |events: &mut Vec<Bytes>, start: Value, deltas: Vec<Value>| {
        events.push(event("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": start})));
        for delta in deltas {
            events.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": delta})));
        }
        events.push(event("content_block_stop", json!({"type": "content_block_stop", "index": index})));
        index += 1;
    };
    if let Some(thinking) = r.thinking {
        let mut deltas: Vec<Value> = split(thinking, 2).into_iter().map(|p| json!({"type": "thinking_delta", "thinking": p})).collect();
        deltas.push(json!({"type": "signature_delta", "signature": signature(thinking)}));
        block(&mut events, json!({"type": "thinking", "thinking": "", "signature": ""}), deltas);
    }
    events.push(event("ping", json!({"type": "ping"})));
    if let Some(text) = r.content.filter(|t| !t.is_empty() || r.calls.is_empty()) {
        let deltas = split(text, pieces).into_iter().map(|p| json!({"type": "text_delta", "text": p})).collect();
        block(&mut events, json!({"type": "text", "text": ""}), deltas);
    }
    for (id, name, arguments) in r.calls {
        let deltas = split(arguments, 2).into_iter().map(|p| json!({"type": "input_json_delta", "partial_json": p})).collect();
        block(&mut events, json!({"type": "tool_use", "id": id, "name": name, "input": {}}), deltas);
    }
    events.push(event(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": stop_reason(r.finish), "stop_sequence": null}, "usage": {"output_tokens": r.output_tokens}}),
    ));
    events.push(event("message_stop", json!({"type": "message_stop"})));
    events
}

/// An Anthropic error body (`{"type":"error","error":{"type":…,"message":…}}`).
pub fn error_body(status: u16, message: &str) -> String {
    let kind = match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_prefix_is_read_and_only_the_new_tail_written() {
        let mut cache = PromptCache::default();
        let first = vec![("tools".repeat(100), true), ("system".repeat(100), true), ("hello".repeat(20), true)];
        let one = cache.account(&first);
        assert_eq!((one.read, one.written), (0, one.prompt));
        let mut second = first.clone();
        second[2].1 = false;
        second.push(("answer".repeat(20), false));
        second.push(("more".repeat(20), true));
        let two = cache.account(&second);
        assert_eq!(two.read, one.prompt, "everything the first request cached");
        assert_eq!(two.written, two.prompt - one.prompt);
        // A changed system prompt reads only the tools.
        let mut third = first.clone();
        third[1].0 = "other".repeat(100);
        let three = cache.account(&third);
        assert_eq!(three.read, 125);
        assert!(cache.totals.hit_ratio() > 0.0 && cache.totals.hit_ratio() < 1.0);
    }
}
