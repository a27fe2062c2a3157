//! The turn state machine (spec §4): one inbound message, end to end.
//!
//! `RESTORE → COMPACT → COMMAND → BUILD → RUN → SAVE → RESPOND → DONE`;
//! COMMAND may jump to DONE (`shortcut`). Each state is a small async handler
//! in its own file that reads and writes the [`TurnContext`] and returns an
//! event; [`drive`] looks the next state up in [`TRANSITIONS`] and records a
//! [`StateTraceEntry`] per step. The driver, not the handlers, keeps the
//! trace, so no handler can forget it.

mod build;
mod command;
pub(crate) mod commit;
mod compact;
mod respond;
pub(crate) mod restore;
mod run;
mod save;

use std::sync::Arc;
use std::time::Instant;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::core::AgentCore;
use super::pending::PendingQueue;
use super::runner::{AgentRunResult, StopReason};
use crate::bus::{InboundMessage, OutboundMessage};
use crate::compact::PromptOverhead;
use super::sink::TurnSink;
use crate::session::{Message, Session, SessionError};

pub use restore::{INTERRUPTED_ON_RESUME, materialize_checkpoint, resume_checkpoint};

/// A state of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TurnState {
    /// Load or create the session; recover from a crash.
    Restore,
    /// Pick up the result of background compaction.
    Compact,
    /// Handle slash commands.
    Command,
    /// Assemble the prompt; persist the user message.
    Build,
    /// Run the agent.
    Run,
    /// Persist the run's messages.
    Save,
    /// Produce the outbound message.
    Respond,
    /// Finished.
    Done,
}

/// What a handler reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnEvent {
    /// Go on to the next state.
    Ok,
    /// COMMAND handled the message: skip to DONE.
    Shortcut,
    /// COMMAND found no command: go on to BUILD.
    Dispatch,
}

/// The transition table. A pair missing here is a bug, reported as
/// [`TurnError::NoTransition`].
pub const TRANSITIONS: &[(TurnState, TurnEvent, TurnState)] = &[
    (TurnState::Restore, TurnEvent::Ok, TurnState::Compact),
    (TurnState::Compact, TurnEvent::Ok, TurnState::Command),
    (TurnState::Command, TurnEvent::Dispatch, TurnState::Build),
    (TurnState::Command, TurnEvent::Shortcut, TurnState::Done),
    (TurnState::Build, TurnEvent::Ok, TurnState::Run),
    (TurnState::Run, TurnEvent::Ok, TurnState::Save),
    (TurnState::Save, TurnEvent::Ok, TurnState::Respond),
    (TurnState::Respond, TurnEvent::Ok, TurnState::Done),
];

/// One step of a turn, for logs, `/status` and tests.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateTraceEntry {
    /// The state that ran.
    pub state: TurnState,
    /// When it started.
    pub started_at: DateTime<Utc>,
    /// How long it took.
    pub duration_ms: f64,
    /// What it reported; `None` when it failed.
    pub event: Option<TurnEvent>,
    /// Its error, if it failed.
    pub error: Option<String>,
}

/// Why a turn failed.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum TurnError {
    /// The transition table has no entry for this pair.
    #[error("turn {turn}: no transition from {state:?} on {event:?}")]
    NoTransition { turn: String, state: TurnState, event: TurnEvent },
    /// The session could not be read or written.
    #[error(transparent)]
    Session(#[from] SessionError),
    /// A state needed something an earlier state should have set.
    #[error("turn {turn}: state {state:?} ran without {missing}")]
    Missing { turn: String, state: TurnState, missing: &'static str },
    /// The message was tried this many times, each time ending its process
    /// (a *poison* message): it is answered with a failure, not run again.
    #[error("this message was tried {attempts} times and each attempt stopped the host before it finished")]
    Poison { attempts: u32 },
}

/// The working state of one turn. Only the turn's data: shared services are
/// in [`AgentCore`].
pub struct TurnContext {
    /// The message being handled.
    pub inbound: InboundMessage,
    /// `inbound.session_key()`.
    pub session_key: String,
    /// The session, from RESTORE on.
    pub session: Option<Session>,
    /// The current state.
    pub state: TurnState,
    /// One entry per state run.
    pub trace: Vec<StateTraceEntry>,
    /// Replayed history (BUILD).
    pub history: Vec<Message>,
    /// What the runner starts from (BUILD).
    pub initial_messages: Vec<Message>,
    /// The reply text.
    pub final_content: Option<String>,
    /// Tools called.
    pub tools_used: Vec<String>,
    /// How the run ended.
    pub stop_reason: Option<StopReason>,
    /// Why the run failed (a provider error), for callers that report it
    /// apart from the reply (`chitin agent -m` exits non-zero with it).
    pub run_error: Option<String>,
    /// Messages were injected mid-run.
    pub had_injections: bool,
    /// Where messages for this session wait while the turn runs.
    pub pending: Option<Arc<PendingQueue>>,
    /// Summary handed from COMPACT to BUILD.
    pub pending_summary: Option<String>,
    /// Where the turn's output goes as it happens (streamed text, tool
    /// hints, plugin progress).
    pub sink: Arc<dyn TurnSink>,
    /// Internal turn: nothing is persisted (no session file, no
    /// checkpoint, no consolidation).
    pub ephemeral: bool,
    /// What an internal run narrows (`AgentLoop::run_internal`).
    pub scope: RunScope,
    /// An internal run (`AgentLoop::run_internal`): its text is the host's
    /// prompt, never a command.
    pub internal: bool,
    /// Work the loop does once this turn let go of its session (COMMAND).
    pub follow_up: Option<FollowUp>,
    /// The runner's full result (RUN → SAVE).
    pub run_result: Option<AgentRunResult>,
    /// How many of the run's messages the checkpoints already appended to
    /// the session (RUN → SAVE).
    pub checkpointed_messages: usize,
    /// A `message` tool already delivered to this chat during the turn.
    pub sent_to_chat: bool,
    /// The reply (RESPOND), also for COMMAND shortcuts.
    pub outbound: Option<OutboundMessage>,
    /// When the turn started, for the user-perceived latency.
    pub started: Instant,
    /// Prompt tokens besides the session's messages (BUILD), for the
    /// consolidation check after SAVE.
    pub prompt_overhead: Option<PromptOverhead>,
    /// SAVE found the session at its budget: consolidate in the background.
    pub consolidate_after: bool,
    /// The run's token usage (SAVE → RESPOND).
    pub usage: Option<crate::provider::Usage>,
    /// The durable inbox row this turn answers (`crate::durable`).
    pub inbox: Option<crate::durable::InboxRef>,
    /// The turn resumes one a dead process left unfinished: its user
    /// message is in the session already (RESTORE → BUILD, COMMAND skipped).
    pub resume: bool,
    /// Read-only calls that were in flight at the crash, to run again
    /// before the model is asked (RESTORE → RUN).
    pub rerun_calls: Vec<crate::session::ToolCall>,
    /// The final answer the dead process had already checkpointed: RUN
    /// takes it instead of asking the model again (RESTORE → RUN).
    pub resumed_answer: Option<String>,
}

/// What a command asks of the loop after its turn (see `AgentLoop::process`).
pub enum FollowUp {
    /// `/new`: archive the cleared tail (`agent::archives`), owned by the
    /// agent's task tracker.
    Archive,
    /// A registered command's work after the turn; its answer is the
    /// turn's reply ([`CommandReply::AfterTurn`](crate::agent::hooks::CommandReply::AfterTurn)).
    Command(crate::agent::hooks::AfterTurn),
}

/// The tools and iteration limit of an internal run, in place of the
/// agent's (Dream runs with a confined registry, `ToolRegistry::confined`).
#[derive(Clone, Default)]
pub struct RunScope {
    /// The tools the model may call; `None`: the agent's.
    pub tools: Option<crate::tools::ToolRegistry>,
    /// Model requests before the run is cut short; `None`: `[agent]
    /// max_iterations`.
    pub max_iterations: Option<usize>,
}

impl TurnContext {
    /// The tools of this turn: its scope's, else the agent's as they are
    /// now (an MCP server's list may have changed since the last turn).
    pub fn tools(&self, core: &AgentCore) -> crate::tools::ToolRegistry {
        self.scope.tools.as_ref().unwrap_or(&core.tools).refreshed()
    }

    /// How the turn ended, for its reply: the run's reason, or
    /// `Command` when a slash command answered without a run.
    pub fn stop(&self) -> crate::bus::StopReason {
        self.stop_reason.map_or(crate::bus::StopReason::Command, Into::into)
    }

    /// A fresh context for `inbound`.
    pub fn new(inbound: InboundMessage) -> Self {
        // An inbound message that brings its own history is a one-off.
        let ephemeral = inbound.ephemeral_history.is_some();
        let inbox = crate::durable::InboxRef::of(&inbound);
        TurnContext {
            session_key: inbound.session_key(),
            inbound,
            session: None,
            state: TurnState::Restore,
            trace: Vec::new(),
            history: Vec::new(),
            initial_messages: Vec::new(),
            final_content: None,
            tools_used: Vec::new(),
            stop_reason: None,
            run_error: None,
            had_injections: false,
            pending: None,
            pending_summary: None,
            sink: super::sink::silent(),
            ephemeral,
            scope: RunScope::default(),
            follow_up: None,
            internal: false,
            run_result: None,
            checkpointed_messages: 0,
            sent_to_chat: false,
            outbound: None,
            started: Instant::now(),
            prompt_overhead: None,
            consolidate_after: false,
            usage: None,
            inbox,
            resume: false,
            rerun_calls: Vec::new(),
            resumed_answer: None,
        }
    }

    /// The session; an error naming the state if RESTORE has not run.
    pub fn session_mut(&mut self) -> Result<&mut Session, TurnError> {
        let (turn, state) = (self.session_key.clone(), self.state);
        self.session.as_mut().ok_or(TurnError::Missing { turn, state, missing: "a session" })
    }
}

/// Runs the handler of `state`.
async fn handle(core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    match ctx.state {
        TurnState::Restore => restore::run(core, ctx).await,
        TurnState::Compact => compact::run(core, ctx).await,
        TurnState::Command => command::run(core, ctx).await,
        TurnState::Build => build::run(core, ctx).await,
        TurnState::Run => run::run(core, ctx).await,
        TurnState::Save => save::run(core, ctx).await,
        TurnState::Respond => respond::run(core, ctx).await,
        TurnState::Done => Ok(TurnEvent::Ok),
    }
}

/// Drives `ctx` from its state to DONE.
pub async fn drive(core: &AgentCore, ctx: &mut TurnContext) -> Result<(), TurnError> {
    while ctx.state != TurnState::Done {
        let started_at = Utc::now();
        let clock = Instant::now();
        let outcome = handle(core, ctx).await;
        let duration_ms = clock.elapsed().as_secs_f64() * 1e3;
        match outcome {
            Ok(event) => {
                ctx.trace.push(StateTraceEntry { state: ctx.state, started_at, duration_ms, event: Some(event), error: None });
                let next = TRANSITIONS.iter().find(|(s, e, _)| *s == ctx.state && *e == event).map(|(_, _, n)| *n);
                ctx.state = next.ok_or_else(|| TurnError::NoTransition { turn: ctx.session_key.clone(), state: ctx.state, event })?;
            }
            Err(e) => {
                ctx.trace.push(StateTraceEntry { state: ctx.state, started_at, duration_ms, event: None, error: Some(e.to_string()) });
                return Err(e);
            }
        }
    }
    tracing::debug!(session = %ctx.session_key, trace = ?ctx.trace.iter().map(|t| (t.state, t.duration_ms)).collect::<Vec<_>>(), "turn done");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_but_done_has_an_exit() {
        for state in [TurnState::Restore, TurnState::Compact, TurnState::Command, TurnState::Build, TurnState::Run, TurnState::Save, TurnState::Respond] {
            assert!(TRANSITIONS.iter().any(|(s, _, _)| *s == state), "{state:?}");
        }
        assert!(!TRANSITIONS.iter().any(|(s, _, _)| *s == TurnState::Done));
    }
}
