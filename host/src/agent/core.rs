//! `AgentCore`: the services and settings every turn shares. Built once by
//! the CLI (or a test) and shared behind an `Arc`; a turn's own data lives in
//! its `TurnContext`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;

use super::active::ActiveTurns;
use super::context::{ArchiveContext, ContextBuilder, RuntimeFacts};
use super::runner::AgentRunner;
use crate::bus::MessageBus;
use crate::compact::{AutoCompact, Consolidator};
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
    pub workspace: crate::workspace::Workspace,
    /// The bus the loop serves.
    pub bus: Arc<MessageBus>,
    /// For `/status`.
    pub started_at: Instant,
    /// Turns running now, by session.
    pub active: Arc<ActiveTurns>,
    /// The subagents of this agent (`crate::features::subagents`), when
    /// it has them: `/stop` and shutdown cancel them, a turn waits for
    /// their results, `/status` lists them.
    pub subagents: Option<Arc<dyn super::hooks::Subagents>>,
    /// The slash commands features added (`/goal`, `/dream`, …).
    pub commands: super::commands::CommandRegistry,
    /// Token consolidation (before BUILD, and in the background after SAVE).
    pub consolidator: Consolidator,
    /// Idle compaction, scanned from `AgentLoop::run`.
    pub auto_compact: AutoCompact,
    /// `<data>/media`: the only place image attachments are read from.
    pub media_root: std::path::PathBuf,
    /// The chat a person last wrote from, persisted in the data dir (the
    /// heartbeat's default target survives a restart).
    pub last_chat: Arc<super::last_chat::LastChat>,
    /// One lock per session, shared by the loop, background work and the
    /// gateway's API; pruned when idle.
    pub locks: Arc<super::locks::KeyedLocks>,
    /// Owns the work a turn leaves behind (consolidation, the `/new`
    /// archive): the loop closes and awaits it at shutdown, so none of it
    /// is dropped half-done.
    pub tasks: tokio_util::task::TaskTracker,
    /// Sessions whose `/new` archive is being written now.
    pub archiving: std::sync::Mutex<std::collections::HashSet<String>>,
}

/// Archived history entries of a session shown in its system prompt.
pub const RECENT_HISTORY_ENTRIES: usize = 8;

/// Token bound of those entries.
pub const RECENT_HISTORY_TOKENS: usize = 2_000;

impl AgentCore {
    /// The per-request model timeout.
    pub fn llm_timeout(&self) -> Duration {
        Duration::from_secs(self.settings.llm_timeout_secs.max(1))
    }

    /// The system prompt of a turn in `session_key` on `channel`/`chat_id`,
    /// with this session's recent archived history and `last_summary`.
    pub fn system_prompt(&self, channel: &str, chat_id: &str, session_key: &str, last_summary: Option<String>) -> String {
        let facts = RuntimeFacts {
            model: self.settings.model.clone(),
            channel: channel.to_string(),
            chat_id: chat_id.to_string(),
            now: Utc::now(),
            tool_names: self.tools.refreshed().names().map(str::to_string).collect(),
        };
        let recent_history = self.consolidator.archive().recent(session_key, RECENT_HISTORY_ENTRIES, RECENT_HISTORY_TOKENS);
        self.context.system_prompt(&facts, &ArchiveContext { recent_history, last_summary })
    }

    /// The `/status` text of `session`.
    pub fn status_text(&self, session: &crate::session::Session) -> String {
        let facts = super::commands::StatusFacts {
            model: &self.settings.model,
            provider: self.runner.provider().name(),
            context_window: self.settings.context_window,
            uptime_secs: self.started_at.elapsed().as_secs(),
            active_tasks: self.active.count(),
            // Mid-turn the running turn's slot is newer than the stored copy.
            goal: match self.active.get(&session.key) {
                Some(turn) => turn.goal.get().or_else(|| super::goal::goal_of(session)),
                None => super::goal::goal_of(session),
            },
        };
        let mut text = super::commands::status_text(&facts, session);
        if let Some(note) = self.runner.provider().status_note() {
            text = format!("{text}\n{note}");
        }
        for line in self.commands.handlers().filter_map(|h| h.status_line()) {
            text = format!("{text}\n{line}");
        }
        match self.subagents.as_ref().and_then(|m| m.status_lines(&session.key)) {
            Some(lines) => format!("{text}\n{lines}"),
            None => text,
        }
    }

    /// The input token budget (spec §6).
    pub fn input_budget(&self) -> usize {
        super::runner::governance::input_budget(self.settings.context_window, self.settings.max_tokens)
    }
}
