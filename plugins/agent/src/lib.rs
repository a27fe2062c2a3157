//! chitin-plugin-agent: tools that act through the agent itself, over the
//! privileged host interfaces of `chitin:plugin@0.2.0` (`privileged.wit`).
//!
//! - `message`: `messaging.send`. The host decides everything that matters
//!   (which conversation the call belongs to, which chats are allowed,
//!   whether a file may be attached); this component only maps arguments
//!   to the request and the answer to text for the model.
//! - `spawn`: `agents.spawn`. The host runs the subagent (its prompt, its
//!   tools, the concurrency limit) and announces a background result.
//! - `subagents`: `agents.status`, the running subagents of the conversation.
//! - `cron`: `schedule.add-job` / `list-jobs` / `remove-job` ([`cron`]).
//! - `create_goal`, `update_goal`: `goals.create` / `goals.update` on the
//!   current session's sustained goal ([`goal`]).
//!
//! The mapping is plain code ([`message`]) tested natively; the component
//! glue is only in the wasm build.

pub mod cron;
pub mod goal;
pub mod message;
pub mod spawn;

#[cfg(target_arch = "wasm32")]
mod glue;
