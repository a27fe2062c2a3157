//! `AgentCore`: the services and settings every turn shares. Built once by
//! the CLI (or a test) and shared behind an `Arc`; a turn's own data lives in
//! its `TurnContext`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::active::ActiveTurns;
use super::context::ContextBuilder;
use super::runner::{AgentHook, AgentRunner};
use crate::bus::MessageBus;
use crate::config::AgentConfig;
use crate::session::SessionStore;
use crate::tools::ToolRegistry;

/// Shared services of the agent.
pub struct AgentCore {
    /// `[agent]` settings.
    pub settings: AgentConfig,
    /// Runs the ReAct loop.
    pub runner: AgentRunner,
    /// The tools.
    pub tools: ToolRegistry,
    /// Where sessions persist.
    pub sessions: Arc<dyn SessionStore>,
    /// Assembles prompts.
    pub context: ContextBuilder,
    /// The agent's workspace.
    pub workspace: PathBuf,
    /// The bus the loop serves.
    pub bus: Arc<MessageBus>,
    /// Observers added to every run (progress display, tests).
    pub hooks: Vec<Arc<dyn AgentHook>>,
    /// For `/status`.
    pub started_at: Instant,
    /// Turns running now, by session.
    pub active: ActiveTurns,
}

impl AgentCore {
    /// The per-request model timeout.
    pub fn llm_timeout(&self) -> Duration {
        Duration::from_secs(self.settings.llm_timeout_secs.max(1))
    }

    /// The `/status` text of `session`.
    pub fn status_text(&self, session: &crate::session::Session) -> String {
        let facts = super::commands::StatusFacts {
            model: &self.settings.model,
            provider: self.runner.provider().name(),
            context_window: self.settings.context_window,
            uptime_secs: self.started_at.elapsed().as_secs(),
            active_tasks: self.active.count(),
        };
        super::commands::status_text(&facts, session)
    }

    /// The input token budget (spec §6).
    pub fn input_budget(&self) -> usize {
        super::runner::governance::input_budget(self.settings.context_window, self.settings.max_tokens)
    }
}
