//! LLM providers behind one trait.
//!
//! A provider never fails with `Err` or panics on an API problem: it returns
//! a [`ChatResponse`] whose `finish_reason` is [`FinishReason::Error`] and
//! whose `error` says what happened (status, retryable or not, message). The
//! runner decides what the user sees. Retries with backoff happen inside the
//! provider (spec §9), never after streamed text reached the user.

pub mod anthropic;
pub mod config;
mod fallback;
mod http;
pub mod openai;
mod retry;
pub mod sse;

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::session::{Message, ToolCall};

pub use http::{HttpProvider, ProviderOptions, ProviderSetupError, StreamDecoder, Wire};
pub use anthropic::{Anthropic, AnthropicProvider};
pub use fallback::{FallbackEntry, FallbackProvider};
pub use openai::{OpenAiOptions, OpenAiProvider};
pub use retry::{Attempt, RetryPolicy};

/// One chat-completions request.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// Model name.
    pub model: String,
    /// The conversation, system prompt first.
    pub messages: Vec<Message>,
    /// Function definitions; empty means a request without tools.
    pub tools: Arc<[Value]>,
    /// Completion token cap.
    pub max_tokens: u32,
    /// Sampling temperature, when set.
    pub temperature: Option<f32>,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A complete answer.
    Stop,
    /// The model wants tools run.
    ToolCalls,
    /// The completion hit `max_tokens`.
    Length,
    /// The request failed; see `ChatResponse::error`.
    Error,
    /// Anything else the API reported (`content_filter`, ...).
    Other(String),
}

/// Token counts reported by the API.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cached ones included (Anthropic reports them apart;
    /// they are added in here so every provider counts the same way).
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Prompt tokens read from the provider's prompt cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Prompt tokens written to the provider's prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Prompt and completion tokens.
    pub fn new(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Usage { prompt_tokens, completion_tokens, ..Default::default() }
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
    }
}

/// What went wrong with a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProviderError {
    /// HTTP status, when there was a response.
    pub status: Option<u16>,
    /// Whether a retry could help (it was already retried if so).
    pub retryable: bool,
    /// A message for the user: what happened and what to do.
    pub message: String,
}

/// The model's answer.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatResponse {
    /// Answer text.
    pub content: Option<String>,
    /// Requested tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub finish_reason: Option<FinishReason>,
    /// Token use.
    pub usage: Usage,
    /// Set when `finish_reason` is `Error`.
    pub error: Option<ProviderError>,
    /// The model's reasoning, when the API returns it as text beside the
    /// answer (`reasoning_content`, Anthropic's thinking text). Shown as
    /// progress and kept in history metadata ([`REASONING`]), never sent
    /// back as content.
    pub reasoning: Option<String>,
    /// Provider-specific blocks that must be replayed unchanged with this
    /// answer's tool calls (Anthropic `thinking` / `redacted_thinking`
    /// blocks with their signatures). Kept in history metadata
    /// ([`THINKING_BLOCKS`]); only the provider that produced them reads them.
    pub replay: Vec<Value>,
    /// Set when a fallback model answered instead of the configured one
    /// (`provider::fallback`): its limits, which the runner's governance
    /// keeps to for the rest of the run.
    pub answered_by: Option<ModelHandle>,
}

/// History metadata of an assistant message: the reasoning text the model
/// gave with it (see [`ChatResponse::reasoning`]).
pub const REASONING: &str = "reasoning";

/// History metadata of an assistant message: the thinking blocks to replay
/// with its tool calls (see [`ChatResponse::replay`]).
pub use crate::session::THINKING_BLOCKS;

impl ChatResponse {
    /// An error response.
    pub fn failed(error: ProviderError) -> Self {
        ChatResponse { finish_reason: Some(FinishReason::Error), error: Some(error), ..Default::default() }
    }

    /// True when the request failed.
    pub fn is_error(&self) -> bool {
        self.finish_reason == Some(FinishReason::Error)
    }
}

/// Receives streamed text as it arrives. The runner makes one from the
/// turn's `TurnSink` when that sink streams (`agent::runner`); nothing else
/// in the agent passes one.
pub type StreamSink = Arc<dyn Fn(&str) + Send + Sync>;

/// A chat-completions API.
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    /// Sends `request`; streams text deltas to `stream` when given.
    async fn chat(&self, request: &ChatRequest, stream: Option<StreamSink>) -> ChatResponse;

    /// A short name for status output (`openai`, `anthropic`).
    fn name(&self) -> &str;

    /// A line for `/status` beyond the name (fallback models and the last
    /// switch), if any.
    fn status_note(&self) -> Option<String> {
        None
    }
}

/// A model and where it runs, with its limits: what a request needs to know
/// about the model it goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelHandle {
    /// Key of `[providers]`.
    pub provider: String,
    /// Model name sent to the provider.
    pub model: String,
    /// The model's context window, in tokens.
    pub context_window: usize,
    /// Completion token cap per request.
    pub max_output_tokens: u32,
}

impl ModelHandle {
    /// `provider/model`, for logs and status.
    pub fn label(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }
}
