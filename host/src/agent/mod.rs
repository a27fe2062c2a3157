//! The agent: loop, turns, runner, prompt assembly.
//!
//! Read in the order a message flows: [`agent_loop`] (dispatch, locks,
//! pending injection) → [`turn`] (the state machine) → [`context`] (prompt
//! assembly) → [`runner`] (the ReAct loop and its governance).

pub mod active;
pub mod attachments;
pub mod agent_loop;
pub mod commands;
pub mod context;
pub mod core;
pub mod pending;
pub mod runner;
pub mod skills;
pub mod turn;

pub use agent_loop::{AgentLoop, TurnOutcome};
pub use core::AgentCore;
pub use runner::{AgentRunResult, AgentRunSpec, AgentRunner, StopReason};
pub use turn::{StateTraceEntry, TurnContext, TurnState};
