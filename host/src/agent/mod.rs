//! The agent's engine: loop, turns, runner, prompt assembly.
//!
//! The engine knows no feature: goals' commands, subagents, the plugin
//! services, the heartbeat, cron and Dream live in [`crate::features`] and
//! reach the engine only through the traits of [`hooks`] (the engine
//! declares the trait, a feature implements it). `crate::features` imports
//! this module; this module never imports it (`module_graph` checks).
//!
//! Read in the order a message flows: [`agent_loop`] (dispatch, locks,
//! pending injection) → [`turn`] (the state machine) → [`context`] (prompt
//! assembly) → [`runner`] (the ReAct loop and its governance).
//!
//! A turn's output leaves by one seam, [`sink::TurnSink`]: the caller of
//! `AgentLoop::process` passes one, the runner reports the run's start,
//! streamed text, tool starts, plugin progress and tool ends to it, and the
//! caller gets the reply back as the [`TurnOutcome`]. A bus message gets a
//! [`responder::BusResponder`] (events back to its chat, for the gateway's
//! router); `chitin agent` passes its stderr display.

pub mod active;
pub mod attachments;
pub mod agent_loop;
pub mod archives;
pub mod commands;
pub mod context;
pub mod goal;
pub mod hooks;
pub mod images;
pub mod last_chat;
pub mod locks;
pub mod recovery;
pub mod core;
pub mod pending;
pub mod responder;
pub mod runner;
pub mod sink;
pub mod skills;
pub mod turn;

pub use agent_loop::{AgentLoop, TurnOutcome};
pub use core::AgentCore;
pub use responder::BusResponder;
pub use runner::{AgentRunResult, AgentRunSpec, AgentRunner, StopReason};
pub use sink::TurnSink;
pub use turn::{RunScope, StateTraceEntry, TurnContext, TurnState};
pub use agent_loop::{InternalReply, InternalRun};
