//! The seams between the engine and the features: **the engine declares the
//! trait, a feature implements it.** The engine (`crate::agent`) calls these
//! traits and never names a feature; the features (`crate::features`:
//! goals, subagents, services, heartbeat, cron, Dream) implement them and
//! are handed in when the agent is built (`crate::app::AgentBuilder`).
//!
//! - [`GoalDriver`]: whether a run goes on for the session's goal (the
//!   runner asks it after each final answer);
//! - [`InjectionSource`]: messages that arrived mid-run (the runner drains
//!   it between iterations);
//! - [`Subagents`]: the background runs of a session, as `/stop`, `/status`,
//!   the turn's keep-alive and shutdown see them;
//! - [`CommandHandler`]: a slash command a feature adds (`/goal`, `/dream`,
//!   `/dream-log`, `/dream-restore`), registered in the agent's
//!   [`CommandRegistry`](super::commands::CommandRegistry).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::agent_loop::AgentLoop;
use super::core::AgentCore;
use super::sink::TurnSink;
use super::turn::TurnError;
use crate::bus::StopReason;
use crate::session::{Message, Session};

/// What the runner does after an answer without tool calls, while a goal
/// may be active (spec §5: `goal_active_predicate` /
/// `goal_continue_message`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GoalStep {
    /// No active goal: the answer is final.
    Finish,
    /// The goal is still active: the answer is an interim one; this user
    /// message is appended and the run goes on.
    Continue(String),
    /// The goal is active but its budget ran out: the answer is final, with
    /// this note appended.
    Stop(String),
}

/// Decides whether a run continues for its session's goal.
pub trait GoalDriver: Send + Sync {
    /// Called after each answer without tool calls.
    fn after_answer(&self) -> GoalStep;
    /// `max_iterations` ran out: a note for the reply when a goal was still
    /// active (the driver stops it).
    fn at_limit(&self, max_iterations: usize) -> Option<String>;
}

/// Supplies messages that arrived mid-run.
pub trait InjectionSource: Send + Sync {
    /// Takes up to `max` waiting messages.
    fn drain(&self, max: usize) -> Vec<Message>;

    /// Called when the run would end: waits (bounded) while more messages
    /// are expected (subagents of the session still run); true when some
    /// arrived, so the run goes on with them.
    fn wait_for_more(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = bool> + Send + '_>> {
        Box::pin(async { false })
    }
}

/// The subagents of the agent, as the engine sees them.
pub trait Subagents: Send + Sync {
    /// Whether subagents of `session_key` run now (the turn waits for their
    /// results instead of ending).
    fn has_running(&self, session_key: &str) -> bool;
    /// Cancels the subagents of `session_key` (`/stop`); how many.
    fn cancel_session(&self, session_key: &str) -> usize;
    /// Cancels every subagent (shutdown); how many.
    fn cancel_all(&self) -> usize;
    /// `/status` lines for the subagents of `session_key`, if any run.
    fn status_lines(&self, session_key: &str) -> Option<String>;
}

/// A slash command a feature adds to the engine's built-ins (`/new`,
/// `/stop`, `/status`, `/help`). The turn's COMMAND state calls it under
/// the session's lock; it answers at once ([`CommandReply::Reply`]), lets
/// the message go on to the model ([`CommandReply::Dispatch`]), or leaves
/// work for after the turn ([`CommandReply::AfterTurn`]).
pub trait CommandHandler: Send + Sync {
    /// The command word, lower case, without the `/`.
    fn name(&self) -> &'static str;
    /// Its line in `/help`.
    fn help(&self) -> &'static str;
    /// Handles one use of the command.
    fn handle(&self, call: CommandCall<'_>) -> Result<CommandReply, TurnError>;
    /// A line the feature adds to `/status`, if any.
    fn status_line(&self) -> Option<String> {
        None
    }
}

/// What a [`CommandHandler`] gets: the agent's shared services and the
/// turn's message and session.
pub struct CommandCall<'a> {
    /// The agent's shared services.
    pub core: &'a AgentCore,
    /// The text after the command word, trimmed.
    pub args: &'a str,
    /// The turn's session (saved by the handler when it changes it and the
    /// message goes on; saved by the turn when it answers).
    pub session: &'a mut Session,
    /// An ephemeral turn: nothing may be saved.
    pub ephemeral: bool,
}

/// What a command did.
pub enum CommandReply {
    /// The answer, stored with the command marker (never replayed to the
    /// model).
    Reply(String),
    /// The command changed the session; the message goes on to the model.
    Dispatch,
    /// Work to run after the turn has let go of the session's lock and its
    /// concurrency slot (it may run turns of its own); its answer is the
    /// turn's reply. The command is not stored in the conversation.
    AfterTurn(AfterTurn),
}

/// The work of [`CommandReply::AfterTurn`]: it gets the loop and the turn's
/// sink. Boxed, so the loop's own future never contains the type of work
/// that runs turns through the loop.
pub type AfterTurn = Box<dyn FnOnce(AgentLoop, Arc<dyn TurnSink>) -> Pin<Box<dyn Future<Output = CommandAnswer> + Send>> + Send>;

/// The answer of an [`AfterTurn`].
#[derive(Debug, Clone, PartialEq)]
pub struct CommandAnswer {
    /// The reply text.
    pub text: String,
    /// How the work ended (a command that ran no model: `Command`).
    pub stop: StopReason,
}

