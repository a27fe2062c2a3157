//! Reading OpenAI-compatible answers: a plain completion
//! ([`parse_completion`]) and a server-sent-event stream ([`StreamAnswer`]),
//! both into one [`ChatResponse`].

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::embedded_error;
use crate::provider::http::{StreamDecoder, clip, stream_end_error, unreadable};
use crate::provider::retry::Attempt;
use crate::provider::sse::SseEvent;
use crate::provider::{ChatResponse, FinishReason, ProviderError, StreamSink, Usage};
use crate::session::ToolCall;

/// A tool call being assembled.
#[derive(Debug, Default, Clone)]
pub(crate) struct PartialCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// Ids for calls the model sent without one. Process-wide, so two generated
/// ids in one conversation never collide.
static GENERATED_IDS: AtomicU64 = AtomicU64::new(1);

/// The final response from the parts of an answer.
pub(crate) fn complete(content: Option<String>, calls: Vec<PartialCall>, finish: Option<&str>, usage: Usage) -> ChatResponse {
    let mut seen: HashSet<String> = calls.iter().filter(|c| !c.id.is_empty()).map(|c| c.id.clone()).collect();
    let tool_calls: Vec<ToolCall> = calls
        .into_iter()
        .map(|call| {
            let id = if call.id.is_empty() {
                loop {
                    let id = format!("call_{}", GENERATED_IDS.fetch_add(1, Ordering::Relaxed));
                    if seen.insert(id.clone()) {
                        break id;
                    }
                }
            } else {
                call.id
            };
            ToolCall::new(id, call.name, call.arguments)
        })
        .collect();
    let finish_reason = match finish {
        Some("stop") => FinishReason::Stop,
        Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
        Some("length") => FinishReason::Length,
        Some(other) => FinishReason::Other(other.to_string()),
        // Some servers omit it; infer it from what came.
        None if tool_calls.is_empty() => FinishReason::Stop,
        None => FinishReason::ToolCalls,
    };
    ChatResponse { content, tool_calls, finish_reason: Some(finish_reason), usage, ..Default::default() }
}

/// `content` as text: a string, or the text parts of a content array.
pub(crate) fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(parts.iter().filter_map(|p| p["text"].as_str().or(p.as_str())).collect()),
        _ => None,
    }
}

/// Arguments as the raw string the model wrote; an object some servers send
/// instead is turned back into its JSON text.
pub(crate) fn arguments_text(arguments: &Value) -> String {
    match arguments {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

pub(crate) fn parse_usage(usage: &Value) -> Option<Usage> {
    if !usage.is_object() {
        return None;
    }
    let count = |keys: [&str; 2]| keys.iter().find_map(|k| usage[*k].as_u64()).unwrap_or(0);
    // OpenAI reports cache hits inside `prompt_tokens` (and in
    // `prompt_tokens_details.cached_tokens`); it has no cache writes.
    let cached = usage["prompt_tokens_details"]["cached_tokens"].as_u64().unwrap_or(0);
    Some(Usage {
        prompt_tokens: count(["prompt_tokens", "input_tokens"]),
        completion_tokens: count(["completion_tokens", "output_tokens"]),
        cache_read_tokens: cached,
        cache_write_tokens: 0,
    })
}

/// Parses a non-streaming answer.
pub(super) fn parse_completion(body: &str, model: &str, endpoint: &str) -> ChatResponse {
    let mut value: Value = match serde_json::from_str(body) {
        Ok(value) => value,
        Err(e) => return ChatResponse::failed(unreadable(&format!("not JSON: {e}"), body)),
    };
    let choice = value["choices"].as_array().and_then(|c| c.first());
    if let Some(error) = value.get("error").filter(|e| !e.is_null())
        && choice.is_none()
    {
        return ChatResponse::failed(embedded_error(error, model, endpoint));
    }
    let Some(choice) = choice else {
        return ChatResponse::failed(unreadable("no choices", body));
    };
    let message = &choice["message"];
    let legacy_text = choice["text"].as_str();
    if !message.is_object() && legacy_text.is_none() {
        return ChatResponse::failed(unreadable("the first choice has no message", body));
    }
    let content = content_text(&message["content"]).or(legacy_text.map(str::to_string));
    let finish = choice["finish_reason"].as_str().map(str::to_string);
    let usage = parse_usage(&value["usage"]).unwrap_or_default();
    // The arguments are moved out of the parsed value, not copied: they are
    // the part of an answer that can be megabytes.
    let mut no_message = Value::Null;
    let message = value.get_mut("choices").and_then(|c| c.get_mut(0)).and_then(|c| c.get_mut("message")).unwrap_or(&mut no_message);
    let mut calls: Vec<PartialCall> = match message.get_mut("tool_calls").and_then(Value::as_array_mut) {
        Some(calls) => calls
            .iter_mut()
            .map(|call| PartialCall {
                id: call["id"].as_str().unwrap_or_default().to_string(),
                name: call["function"]["name"].as_str().unwrap_or_default().to_string(),
                arguments: call.get_mut("function").map(take_arguments).unwrap_or_default(),
            })
            .collect(),
        None => Vec::new(),
    };
    // The pre-tools `function_call` shape, still sent by some servers.
    if calls.is_empty()
        && let Some(call) = message.get_mut("function_call").filter(|f| f.is_object())
    {
        calls.push(PartialCall {
            id: String::new(),
            name: call["name"].as_str().unwrap_or_default().to_string(),
            arguments: take_arguments(call),
        });
    }
    let mut response = complete(content, calls, finish.as_deref(), usage);
    response.reasoning = reasoning_text(message).filter(|r| !r.trim().is_empty());
    response
}

/// The reasoning an OpenAI-compatible server sends beside the answer:
/// `reasoning_content` (DeepSeek, Qwen, vLLM) or `reasoning` (OpenRouter,
/// Ollama), in a message or a stream delta.
pub(crate) fn reasoning_text(object: &Value) -> Option<String> {
    ["reasoning_content", "reasoning"].iter().find_map(|k| object[*k].as_str().map(str::to_string))
}

/// Moves the `arguments` out of a function object (see [`arguments_text`]).
pub(crate) fn take_arguments(function: &mut Value) -> String {
    match function.get_mut("arguments").map(Value::take) {
        Some(Value::String(text)) => text,
        Some(other) => arguments_text(&other),
        None => String::new(),
    }
}

/// A streamed answer as it accumulates, one event at a time.
#[derive(Debug, Default)]
pub struct StreamAnswer {
    text: String,
    /// A content field (even `""`) arrived: a blank answer, not a missing one.
    saw_content: bool,
    calls: BTreeMap<u64, PartialCall>,
    /// The call the last index-less tool delta went to.
    last_call: Option<u64>,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    /// Chunks parsed.
    chunks: usize,
    /// `[DONE]` arrived.
    done: bool,
    error: Option<ProviderError>,
    /// Text reached the sink: no retry from here on.
    streamed: bool,
    /// Reasoning deltas (`reasoning_content`, `reasoning`).
    reasoning: String,
}

impl StreamAnswer {
    /// Takes one event; false when the stream is over (`[DONE]`, an error).
    pub fn event(&mut self, event: &SseEvent, sink: Option<&StreamSink>) -> bool {
        let data = event.data.trim();
        if data.is_empty() {
            return true;
        }
        if data == "[DONE]" {
            self.done = true;
            return false;
        }
        let mut chunk: Value = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) if event.event == "error" => {
                self.error = Some(embedded_error(&Value::String(data.to_string()), "", ""));
                tracing::debug!("stream error event is not JSON: {e}");
                return false;
            }
            Err(e) => {
                // One bad chunk should not lose the answer; the end-of-stream
                // checks still catch a stream that was all garbage.
                tracing::warn!("skipping an unreadable stream chunk ({e}): {}", clip(data));
                return true;
            }
        };
        if let Some(error) = chunk.get("error").filter(|e| !e.is_null()) {
            self.error = Some(embedded_error(error, "", ""));
            return false;
        }
        if event.event == "error" {
            self.error = Some(embedded_error(&chunk, "", ""));
            return false;
        }
        self.chunks += 1;
        if let Some(usage) = parse_usage(&chunk["usage"]) {
            self.usage = Some(usage);
        }
        let Some(choice) = chunk.get_mut("choices").and_then(Value::as_array_mut).and_then(|c| c.first_mut()) else {
            return true;
        };
        let finish_reason = choice["finish_reason"].as_str().map(str::to_string);
        let mut no_delta = Value::Null;
        // `get_mut`, never `IndexMut`, which panics on a non-object.
        let delta = choice.get_mut("delta").unwrap_or(&mut no_delta);
        if let Some(piece) = content_text(&delta["content"]) {
            self.saw_content = true;
            if !piece.is_empty() {
                self.text.push_str(&piece);
                if let Some(sink) = sink {
                    sink(&piece);
                    self.streamed = true;
                }
            }
        }
        if let Some(piece) = reasoning_text(delta) {
            self.reasoning.push_str(&piece);
        }
        if let Some(calls) = delta.get_mut("tool_calls").and_then(Value::as_array_mut) {
            for call in calls {
                let (index, id) = (call["index"].as_u64(), call["id"].as_str().map(str::to_string));
                let mut no_function = Value::Null;
                self.merge_call(index, id.as_deref(), call.get_mut("function").unwrap_or(&mut no_function));
            }
        }
        if let Some(function) = delta.get_mut("function_call").filter(|f| f.is_object()) {
            self.merge_call(Some(0), None, function);
        }
        if let Some(reason) = finish_reason {
            self.finish_reason = Some(reason);
        }
        true
    }

    /// Merges a tool-call delta into the call at `index`. Without an index
    /// (some servers), a new id starts a new call and anything else extends
    /// the last one.
    fn merge_call(&mut self, index: Option<u64>, id: Option<&str>, function: &mut Value) {
        let id = id.filter(|id| !id.is_empty());
        let key = match (index, self.last_call) {
            (Some(index), _) => index,
            (None, None) => 0,
            (None, Some(last)) => {
                let last_id = self.calls.get(&last).map(|c| c.id.as_str()).unwrap_or_default();
                match id {
                    Some(id) if !last_id.is_empty() && last_id != id => self.calls.keys().next_back().map_or(0, |k| k + 1),
                    _ => last,
                }
            }
        };
        self.last_call = Some(key);
        let call = self.calls.entry(key).or_default();
        if let Some(id) = id
            && call.id.is_empty()
        {
            call.id = id.to_string();
        }
        if let Some(name) = function["name"].as_str() {
            // OpenAI sends the name once; some servers repeat it whole in
            // every delta, which must not double it.
            if call.name != name {
                call.name.push_str(name);
            }
        }
        let piece = take_arguments(function);
        if call.arguments.is_empty() {
            call.arguments = piece; // moved: the usual one-piece case copies nothing
        } else {
            call.arguments.push_str(&piece);
        }
    }

    /// The response, given why reading stopped (`None`: the stream ended).
    pub fn finish(self, interruption: Option<ProviderError>) -> Attempt {
        let streamed = self.streamed;
        let complete_answer = self.done || self.finish_reason.is_some();
        let error = self.error.clone().or_else(|| stream_end_error(self.chunks > 0, complete_answer, interruption));
        if let Some(error) = error {
            // The partial text is kept: it is what the user already saw.
            let content = (!self.text.is_empty()).then_some(self.text);
            return Attempt { response: ChatResponse { content, ..ChatResponse::failed(error) }, retry_after: None, streamed };
        }
        let calls: Vec<PartialCall> = self.calls.into_values().collect();
        let content = if !self.text.is_empty() {
            Some(self.text)
        } else {
            // `""` for a blank answer, nothing beside tool calls.
            (self.saw_content && calls.is_empty()).then(String::new)
        };
        let usage = self.usage.unwrap_or_default();
        let mut response = complete(content, calls, self.finish_reason.as_deref(), usage);
        response.reasoning = Some(self.reasoning).filter(|r| !r.trim().is_empty());
        Attempt { response, retry_after: None, streamed }
    }
}


impl StreamDecoder for StreamAnswer {
    fn event(&mut self, event: &SseEvent, sink: Option<&StreamSink>) -> bool {
        StreamAnswer::event(self, event, sink)
    }

    fn refuse(&mut self, error: ProviderError) {
        self.error = Some(error);
    }

    fn finish(self, interruption: Option<ProviderError>) -> Attempt {
        StreamAnswer::finish(self, interruption)
    }
}
