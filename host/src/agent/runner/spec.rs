//! What a run is given (`AgentRunSpec`) and what it returns
//! (`AgentRunResult`), plus the checkpoint types (spec §5).

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::plugins::CallContext;
use crate::agent::sink::TurnSink;
use crate::provider::{ModelHandle, Usage};
use crate::session::{Message, ToolCall};
use crate::tools::ToolRegistry;

/// Declared in [`crate::agent::hooks`]; named here too, where the runner takes them.
pub use crate::agent::hooks::{GoalDriver, GoalStep, InjectionSource};

/// Everything one run needs. The runner knows no channel and no session
/// store: persistence happens through the checkpoint callback, output
/// through the sink.
#[derive(Clone)]
pub struct AgentRunSpec {
    /// System prompt, history and the current user message.
    pub initial_messages: Vec<Message>,
    /// The tools the model may call.
    pub tools: ToolRegistry,
    /// The model that answers, with its context window and completion
    /// token cap. When a fallback model answers instead
    /// ([`ChatResponse::answered_by`](crate::provider::ChatResponse::answered_by)),
    /// the rest of the run keeps within the smaller of the two windows.
    pub model: ModelHandle,
    /// Model requests with tools before the run is cut short.
    pub max_iterations: usize,
    /// Tool results longer than this are saved to the workspace and replaced
    /// by a reference with a preview.
    pub max_tool_result_chars: usize,
    /// A call whose arguments are longer than this (bytes) is not run: its
    /// result is an error asking for smaller calls, and the assistant
    /// message keeps only a bounded form of the arguments.
    pub max_tool_args_bytes: usize,
    /// Sampling temperature.
    pub temperature: Option<f32>,
    /// Wall-clock limit of one model request.
    pub llm_timeout: Duration,
    /// Where oversized tool results are saved.
    pub workspace: crate::workspace::Workspace,
    /// Identifies the conversation to plugins.
    pub call_context: CallContext,
    /// Receives each checkpoint; the turn persists it.
    pub checkpoint: Option<Arc<dyn Fn(&CheckpointView<'_>) + Send + Sync>>,
    /// Messages that arrived for this session while the run was going.
    pub injections: Option<Arc<dyn InjectionSource>>,
    /// Receives the run's output as it happens: its start, answer text
    /// (when the sink streams), tool starts, plugin progress, tool ends.
    pub sink: Arc<dyn TurnSink>,
    /// A tool that crashed (trapped, timed out, ran out of memory: not a
    /// tool's own error result) ends the run with [`StopReason::ToolError`].
    /// Off for a turn (the model tries something else); on for a subagent,
    /// whose run nobody watches.
    pub fail_on_tool_error: bool,
    /// The session's sustained goal: asked after each answer without tool
    /// calls whether the run goes on (`None`: it never does).
    pub goal: Option<Arc<dyn GoalDriver>>,
}

/// Why a run ended: the bus's [`crate::bus::StopReason`], so a reply
/// carries the runner's reason as it is (a run itself ends only as
/// `Completed`, `MaxIterations`, `Error`, `ToolError` or
/// `EmptyFinalResponse`; the turn adds `Stopped` and `Command`).
pub use crate::bus::StopReason;

/// One tool call as it happened.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolEvent {
    /// Tool name.
    pub name: String,
    /// The model's call id.
    pub call_id: String,
    /// Whether it produced a result (not an error).
    pub ok: bool,
    /// How long it took.
    pub duration: Duration,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct AgentRunResult {
    /// The answer for the user (for a provider error: the error message).
    pub final_content: Option<String>,
    /// The whole conversation: initial messages, then what this run added.
    pub messages: Vec<Message>,
    /// Names of the tools called, in order.
    pub tools_used: Vec<String>,
    /// Tokens over all requests.
    pub usage: Usage,
    /// Why it ended.
    pub stop_reason: StopReason,
    /// The error, for `Error` runs.
    pub error: Option<String>,
    /// Every tool call with its outcome.
    pub tool_events: Vec<ToolEvent>,
    /// Whether messages were injected during the run.
    pub had_injections: bool,
}

/// The runner's progress as it hands it to the checkpoint callback,
/// borrowed: a checkpoint costs no copy of the run's messages.
///
/// The run only ever appends to `messages`: a message handed over once is
/// never changed later, so a persister may write each one once.
#[derive(Debug, Clone, Copy)]
pub struct CheckpointView<'a> {
    /// `awaiting_tools`, `tools_completed` or `final_response`.
    pub phase: CheckpointPhase,
    /// Iteration the checkpoint was taken in.
    pub iteration: usize,
    /// Everything this run added so far (assistant messages, tool results,
    /// injected messages).
    pub messages: &'a [Message],
    /// Calls of the last assistant message that have no result yet.
    pub pending_tool_calls: &'a [ToolCall],
}

/// The checkpoint as persisted in the session's metadata, so a crash or
/// `/stop` loses nothing (RESTORE materialises it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// `awaiting_tools`, `tools_completed` or `final_response`.
    pub phase: CheckpointPhase,
    /// Iteration the checkpoint was taken in.
    pub iteration: usize,
    /// Messages of the run the session does not hold yet. The turn appends
    /// the run's messages to the session as they come, so it writes none
    /// here; records written before that hold the whole run, and RESTORE
    /// appends only what the session's tail lacks.
    #[serde(default)]
    pub messages: Vec<Message>,
    /// Calls of the last assistant message that have no result yet. Only
    /// the id and name are needed (the call itself is in the session), so
    /// the turn writes them without arguments.
    pub pending_tool_calls: Vec<ToolCall>,
}

/// Where in an iteration a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CheckpointPhase {
    /// The assistant asked for tools; they are running.
    AwaitingTools,
    /// All tool results are in.
    ToolsCompleted,
    /// The final answer is in.
    FinalResponse,
}
