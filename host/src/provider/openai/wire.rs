//! The response shapes of the OpenAI chat-completions API as a server
//! writes them: a `chat.completion` and a `chat.completion.chunk`. One
//! definition for the two servers chitin has, the gateway's
//! OpenAI-compatible API (`gateway/wire.rs`) and the test mock
//! (`testing/mock_llm.rs`); the client side reads them back in `answer.rs`.

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
