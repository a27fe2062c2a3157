//! The agent's features: each one builds on the engine ([`crate::agent`])
//! and plugs into it through a trait the engine declares
//! ([`crate::agent::hooks`]); the engine never names them.
//!
//! - [`goals`]: the `/goal` command (the goal record a turn carries is the
//!   engine's, `agent::goal`);
//! - [`subagents`]: background runs spawned by the `spawn` tool
//!   ([`hooks::Subagents`](crate::agent::hooks::Subagents));
//! - [`services`]: the privileged plugin interfaces (`message`, `spawn`,
//!   `cron`, `goals`), the [`HostServices`](crate::plugins::HostServices)
//!   the plugin runtime declares;
//! - [`heartbeat`]: the periodic `HEARTBEAT.md` run;
//! - [`cron`]: scheduled jobs;
//! - [`dream`]: memory consolidation and its `/dream*` commands
//!   ([`hooks::CommandHandler`](crate::agent::hooks::CommandHandler)).
//!
//! [`crate::app`] wires them into an agent.

pub mod cron;
pub mod dream;
pub mod goals;
pub mod heartbeat;
pub mod services;
pub mod subagents;
