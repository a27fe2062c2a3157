//! Subagents (the `spawn` tool over the privileged `agents` interface).
//!
//! A subagent is one [`AgentRunner`] run on its own: a short system prompt
//! of its own (what it is, the workspace, its tools; nothing of the session
//! that spawned it), the task as the user message, the tools
//! `[agent.subagents]` allows (by default the main agent's minus `spawn` and
//! `message`), the main agent's iteration limit, and nothing persisted: no
//! session, no checkpoints. Its final answer is what counts.
//!
//! - `wait = true`: the spawning tool call waits and gets the answer.
//! - `wait = false`: it runs in the background; when it ends, its answer is
//!   announced back to the *origin* session as a `system` inbound message
//!   from [`crate::bus::Origin::Subagent`] (its task id, and the origin
//!   chat as the typed route of the reply), the origin session as the
//!   override; its session row keeps the marks `injected_event =
//!   "subagent_result"` and `subagent_task_id`. If the origin session's turn still runs, the
//!   message goes to its pending queue and is injected (that turn waits for
//!   it, see `agent::pending`); otherwise it goes on the bus and starts a
//!   SYSTEM turn whose reply goes to the origin chat. The session stores
//!   each task id once (`already_delivered`), so a result is never handled
//!   twice.
//!
//! At most `max_concurrent` run at once (over all sessions); `/stop` in the
//! origin session cancels its subagents; `/status` lists them.
//!
//! The task, the label and the answer are model text: the label is clipped
//! to one safe line, the task and the answer are capped before they reach a
//! prompt.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::Utc;
use tokio_util::sync::CancellationToken;

use crate::agent::active::ActiveTurns;
use crate::agent::runner::{AgentRunSpec, AgentRunner, StopReason};
use crate::bus::{InboundMessage, MessageBus, SYSTEM_CHANNEL};
use crate::config::AgentConfig;
use crate::plugins::CallContext;
use crate::plugins::services::{SpawnFuture, SpawnRequest, SubagentInfo, SubagentState};
use crate::session::Message;
use crate::tools::ToolRegistry;
use crate::workspace::Workspace;

/// The session-row marks of an announcement (the task id is the dedup
/// key); on the bus the announcement is typed ([`crate::bus::Origin::Subagent`]).
pub use crate::bus::{INJECTED_EVENT, SUBAGENT_RESULT, TASK_ID};
/// Session-key prefix of a subagent's own tool calls.
pub const SESSION_PREFIX: &str = "subagent:";

/// The answer of a run that ended without one.
pub const NO_ANSWER: &str = "Task completed but no final response was generated.";

/// Longest task accepted, in bytes.
pub const MAX_TASK_BYTES: usize = 32 * 1024;
/// Longest label kept, in bytes.
pub const MAX_LABEL_BYTES: usize = 60;

/// The tools a subagent never gets by default.
const NOT_FOR_SUBAGENTS: [&str; 3] = ["spawn", "subagents", "message"];

/// The conversation a subagent reports to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The conversation's session key.
    pub session_key: String,
    /// The channel of its chat.
    pub channel: String,
    /// The chat's id on that channel.
    pub chat_id: String,
}

struct Running {
    label: String,
    origin: Origin,
    started: Instant,
    cancel: CancellationToken,
}

/// Runs and tracks subagents. Shared behind an `Arc`.
pub struct SubagentManager {
    settings: AgentConfig,
    runner: AgentRunner,
    tools: ToolRegistry,
    workspace: Workspace,
    bus: Arc<MessageBus>,
    active: Arc<ActiveTurns>,
    running: Mutex<HashMap<String, Running>>,
    next: AtomicU64,
    /// The agent's task tracker: a subagent's run is one of its tasks, so
    /// shutdown cancels and then awaits it instead of dropping it mid-run.
    tasks: tokio_util::task::TaskTracker,
}

impl SubagentManager {
    /// A manager running subagents with `runner` over the part of
    /// `main_tools` that `settings.subagents` allows.
    pub fn new(settings: AgentConfig, runner: AgentRunner, main_tools: &ToolRegistry, workspace: Workspace, bus: Arc<MessageBus>, active: Arc<ActiveTurns>) -> Self {
        let scope = &settings.subagents;
        if let Some(listed) = &scope.tools {
            for name in listed.iter().filter(|n| main_tools.spec(n).is_none()) {
                tracing::warn!(tool = %name, "[agent.subagents] tools names a tool no plugin provides");
            }
        }
        let allow_spawn = scope.allow_spawn;
        let listed = scope.tools.clone();
        // Scoped, not a snapshot: an MCP server that connects or changes
        // its list later reaches subagents too (filtered the same way).
        let tools = main_tools.scoped(Arc::new(move |name: &str| {
            // `subagents` lists what `spawn` started: both or neither.
            let spawning = matches!(name, "spawn" | "subagents");
            if spawning && !allow_spawn {
                return false;
            }
            match &listed {
                Some(list) => list.iter().any(|n| n == name),
                None => !NOT_FOR_SUBAGENTS.contains(&name) || (spawning && allow_spawn),
            }
        }));
        SubagentManager { settings, runner, tools, workspace, bus, active, running: Mutex::new(HashMap::new()), next: AtomicU64::new(1), tasks: tokio_util::task::TaskTracker::new() }
    }

    /// Runs the subagents as tasks of `tasks` (the agent's tracker).
    pub fn with_tasks(mut self, tasks: tokio_util::task::TaskTracker) -> Self {
        self.tasks = tasks;
        self
    }

    /// Cancels every running subagent (shutdown); returns how many.
    pub fn cancel_all(&self) -> usize {
        let running = self.running.lock().expect("subagents lock");
        running.values().for_each(|r| r.cancel.cancel());
        running.len()
    }

    /// The tools a subagent gets.
    pub fn tools(&self) -> &ToolRegistry {
        &self.tools
    }

    /// Starts a subagent for a tool call in conversation `call`.
    pub fn spawn(self: &Arc<Self>, call: &CallContext, request: SpawnRequest) -> SpawnFuture {
        let started = self.start(call, request);
        Box::pin(async move {
            let Started { info, done, cancel, wait } = started?;
            if !wait {
                return Ok(info);
            }
            // The tool call waits; if it goes away (the turn is stopped),
            // the subagent goes with it.
            let guard = cancel.drop_guard();
            let info = done.await.map_err(|_| "the subagent's task ended without a result".to_string())?;
            guard.disarm();
            Ok(info)
        })
    }

    fn start(self: &Arc<Self>, call: &CallContext, request: SpawnRequest) -> Result<Started, String> {
        let task = request.task.trim().to_string();
        if task.is_empty() {
            return Err("the task is empty: say what the subagent should do".into());
        }
        if task.len() > MAX_TASK_BYTES {
            return Err(format!("the task is {} bytes; the limit is {MAX_TASK_BYTES}: describe it shorter and point to files in the workspace", task.len()));
        }
        let origin = self.origin_of(call)?;
        let label = label_for(request.label.as_deref(), &task);
        let limit = self.settings.subagents.max_concurrent.max(1);
        let cancel = CancellationToken::new();
        let id = {
            let mut running = self.running.lock().expect("subagents lock");
            if running.len() >= limit {
                return Err(format!(
                    "Cannot spawn subagent: concurrency limit reached ({}/{limit} running). Wait for a running subagent to finish (its result will be announced), or do the task yourself.",
                    running.len()
                ));
            }
            let id = loop {
                let id = self.new_id();
                if !running.contains_key(&id) {
                    break id;
                }
            };
            running.insert(id.clone(), Running { label: label.clone(), origin: origin.clone(), started: Instant::now(), cancel: cancel.clone() });
            id
        };
        tracing::info!(session = %origin.session_key, subagent = %id, label = %label, wait = request.wait, "subagent started");
        let spec = self.spec(&id, &origin, &task);
        let (tx, done) = tokio::sync::oneshot::channel();
        let this = self.clone();
        let (run_cancel, wait) = (cancel.clone(), request.wait);
        let (run_id, run_label, run_task) = (id.clone(), label.clone(), task);
        self.tasks.spawn(async move {
            // However the task ends (even by a panic in the run), the
            // subagent leaves the table and frees its slot.
            let forget = Forget(this.clone(), run_id.clone());
            let started = Instant::now();
            let outcome = tokio::select! {
                result = this.runner.run(&spec) => Some(result),
                _ = run_cancel.cancelled() => None,
            };
            let (state, answer) = match outcome {
                None => (SubagentState::Cancelled, None),
                Some(result) => {
                    let text = result.final_content.filter(|t| !t.trim().is_empty()).unwrap_or_else(|| NO_ANSWER.to_string());
                    let text = crate::text::clip(&text, this.settings.max_tool_result_chars.max(1000), "subagent answer").into_owned();
                    let failed = matches!(result.stop_reason, StopReason::Error | StopReason::ToolError);
                    let state = if failed { SubagentState::Failed } else { SubagentState::Completed };
                    (state, Some(text))
                }
            };
            tracing::info!(subagent = %run_id, ?state, ms = started.elapsed().as_millis() as u64, "subagent ended");
            if !wait && let Some(answer) = &answer {
                this.announce(&run_id, &run_label, &run_task, state, answer);
            }
            // Out of the table before a waiting caller hears of the end, so
            // its next spawn finds the slot free.
            drop(forget);
            let info = SubagentInfo { id: run_id, label: run_label, state, elapsed_ms: started.elapsed().as_millis() as u64, result: answer };
            let _ = tx.send(info);
        });
        let info = SubagentInfo { id, label, state: SubagentState::Running, elapsed_ms: 0, result: None };
        Ok(Started { info, done, cancel, wait: request.wait })
    }

    /// The conversation a call reports to: its own, or for a call made by a
    /// subagent (only with `allow_spawn`), that subagent's origin.
    fn origin_of(&self, call: &CallContext) -> Result<Origin, String> {
        let Some(parent) = call.session_key.strip_prefix(SESSION_PREFIX) else {
            return Ok(Origin { session_key: call.session_key.clone(), channel: call.channel.clone(), chat_id: call.chat_id.clone() });
        };
        if !self.settings.subagents.allow_spawn {
            return Err("a subagent may not spawn subagents (the user allows it with `allow_spawn = true` under [agent.subagents])".into());
        }
        let running = self.running.lock().expect("subagents lock");
        running.get(parent).map(|r| r.origin.clone()).ok_or_else(|| "the spawning subagent is no longer running".to_string())
    }

    fn new_id(&self) -> String {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let seed = format!("{n}:{}:{}", std::process::id(), Utc::now().timestamp_nanos_opt().unwrap_or_default());
        blake3::hash(seed.as_bytes()).to_hex()[..8].to_string()
    }

    /// The run of subagent `id`: its own prompt, its tools, nothing saved.
    fn spec(&self, id: &str, origin: &Origin, task: &str) -> AgentRunSpec {
        let s = &self.settings;
        let tools = self.tools.refreshed();
        let names: Vec<&str> = tools.names().collect();
        AgentRunSpec {
            initial_messages: vec![Message::system(system_prompt(&self.workspace, &names)), Message::user(task)],
            tools: tools.clone(),
            model: s.model_handle(),
            max_iterations: s.max_iterations,
            max_tool_result_chars: s.max_tool_result_chars,
            max_tool_args_bytes: s.max_tool_args_bytes(),
            temperature: s.temperature,
            llm_timeout: std::time::Duration::from_secs(s.llm_timeout_secs.max(1)),
            workspace: self.workspace.clone(),
            // Its own key: a `message` it may be given goes to the origin
            // chat without touching the origin turn's RESPOND rule.
            call_context: CallContext { session_key: format!("{SESSION_PREFIX}{id}"), channel: origin.channel.clone(), chat_id: origin.chat_id.clone(), call_id: String::new() },
            checkpoint: None,
            injections: None,
            sink: crate::agent::sink::silent(),
            fail_on_tool_error: true,
            // A subagent has no session, so no goal.
            goal: None,
        }
    }

    /// Hands the answer to the origin session: into its running turn, else
    /// onto the bus (a new turn).
    fn announce(&self, id: &str, label: &str, task: &str, state: SubagentState, answer: &str) {
        let origin = {
            let running = self.running.lock().expect("subagents lock");
            match running.get(id) {
                Some(r) => r.origin.clone(),
                None => return,
            }
        };
        let mut message = announcement(&origin, id, label, task, state, answer);
        if let Some(turn) = self.active.get(&origin.session_key) {
            match turn.pending.try_push(message) {
                Ok(()) => return,
                // Full, or the turn just ended: the bus starts a turn.
                Err(back) => message = back,
            }
        }
        self.bus.publish_inbound(message);
    }

    /// Forgets `id` and wakes its origin's turn if it waits for it.
    fn finish(&self, id: &str) {
        let removed = self.running.lock().expect("subagents lock").remove(id);
        if let Some(r) = removed
            && let Some(turn) = self.active.get(&r.origin.session_key)
        {
            turn.pending.wake();
        }
    }

    /// True while a subagent of `session_key` runs.
    pub fn has_running(&self, session_key: &str) -> bool {
        self.running.lock().expect("subagents lock").values().any(|r| r.origin.session_key == session_key)
    }

    /// The running subagents of `session_key`, oldest first.
    pub fn running_in(&self, session_key: &str) -> Vec<SubagentInfo> {
        let running = self.running.lock().expect("subagents lock");
        let mut list: Vec<(&String, &Running)> = running.iter().filter(|(_, r)| r.origin.session_key == session_key).collect();
        list.sort_by_key(|(_, r)| r.started);
        list.into_iter()
            .map(|(id, r)| SubagentInfo { id: id.clone(), label: r.label.clone(), state: SubagentState::Running, elapsed_ms: r.started.elapsed().as_millis() as u64, result: None })
            .collect()
    }

    /// Cancels the subagents of `session_key`; returns how many.
    pub fn cancel_session(&self, session_key: &str) -> usize {
        let running = self.running.lock().expect("subagents lock");
        let mut n = 0;
        for r in running.values().filter(|r| r.origin.session_key == session_key) {
            r.cancel.cancel();
            n += 1;
        }
        if n > 0 {
            tracing::info!(session = %session_key, count = n, "subagents cancelled");
        }
        n
    }

    /// The `/status` lines of `session_key`'s subagents; `None` when none runs.
    pub fn status_lines(&self, session_key: &str) -> Option<String> {
        let list = self.running_in(session_key);
        if list.is_empty() {
            return None;
        }
        let mut text = format!("Subagents running: {}", list.len());
        for s in list {
            text.push_str(&format!("\n- [{}] (id: {}) running for {} s", s.label, s.id, s.elapsed_ms / 1000));
        }
        Some(text)
    }
}

/// Calls [`SubagentManager::finish`] when dropped.
struct Forget(Arc<SubagentManager>, String);

impl Drop for Forget {
    fn drop(&mut self) {
        self.0.finish(&self.1);
    }
}

struct Started {
    info: SubagentInfo,
    done: tokio::sync::oneshot::Receiver<SubagentInfo>,
    cancel: CancellationToken,
    wait: bool,
}

/// The label: the model's, else the task's start; one line, clipped, safe
/// to show in a chat or a terminal.
pub fn label_for(label: Option<&str>, task: &str) -> String {
    let raw = label.map(str::trim).filter(|l| !l.is_empty()).unwrap_or(task);
    let line: String = raw.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut label = String::new();
    for c in line.chars().filter(|c| !c.is_control()) {
        if label.len() + c.len_utf8() > MAX_LABEL_BYTES {
            label.push('…');
            break;
        }
        label.push(c);
    }
    if label.is_empty() { "subagent".into() } else { label }
}

/// A subagent's system prompt: what it is, where it works, what it has.
pub fn system_prompt(workspace: &Workspace, tools: &[&str]) -> String {
    let tools = if tools.is_empty() { "(none)".to_string() } else { tools.join(", ") };
    format!(
        "# Subagent\n\n\
         You are a subagent: the main agent gave you one task (the next message). Work on it with your tools and \
         end with a final answer. That answer is all the main agent receives; the user does not see your messages.\n\n\
         - Stay on the task; do not start other work.\n\
         - You have no memory of the conversation that led to the task: what you know is the task and what your \
         tools show you.\n\
         - Be concise but complete: say what you did, what you found, and anything left undone.\n\n\
         ## Workspace\n\n\
         Your workspace is `{ws}`. File tools take paths relative to it.\n\n\
         ## Tools\n\n\
         {tools}\n\n\
         Current time: {now}",
        ws = workspace.root().display(),
        now = Utc::now().format("%Y-%m-%d %H:%M UTC"),
    )
}

/// The `system` inbound message announcing a subagent's answer to `origin`.
pub fn announcement(origin: &Origin, id: &str, label: &str, task: &str, state: SubagentState, answer: &str) -> InboundMessage {
    let status = match state {
        SubagentState::Failed => "failed",
        _ => "completed successfully",
    };
    let task = crate::text::clip(task, 2000, "task");
    let content = format!(
        "[Subagent '{label}' {status}]\n\nTask: {task}\n\nResult:\n{answer}\n\n\
         Summarize this naturally for the user. Keep it brief (1-2 sentences). Do not mention technical details like \"subagent\" or task IDs."
    );
    // The chat id only names the origin chat for the turn's prompt; the
    // reply is routed by the typed origin.
    let from = crate::bus::Origin::Subagent { task_id: id.to_string(), reply_to: crate::bus::ChatRef::new(&origin.channel, &origin.chat_id) };
    let mut message = InboundMessage::from_origin(SYSTEM_CHANNEL, format!("{}:{}", origin.channel, origin.chat_id), from, content);
    message.session_key_override = Some(origin.session_key.clone());
    message
}

/// The engine's view of the subagents (`/stop`, `/status`, keep-alive,
/// shutdown).
impl crate::agent::hooks::Subagents for SubagentManager {
    fn has_running(&self, session_key: &str) -> bool {
        SubagentManager::has_running(self, session_key)
    }
    fn cancel_session(&self, session_key: &str) -> usize {
        SubagentManager::cancel_session(self, session_key)
    }
    fn cancel_all(&self) -> usize {
        SubagentManager::cancel_all(self)
    }
    fn status_lines(&self, session_key: &str) -> Option<String> {
        SubagentManager::status_lines(self, session_key)
    }
}

/// The subagent task id of a `system` announcement (read by the engine too,
/// so declared in `bus`).
pub use crate::bus::subagent_task_id as task_id;

/// Whether `session` already holds the announcement of task `id`.
pub use crate::session::holds_subagent_result as already_delivered;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::Session;

    #[test]
    fn labels_are_one_clipped_safe_line() {
        assert_eq!(label_for(Some("prices"), "x"), "prices");
        assert_eq!(label_for(None, "find the\nbest   price"), "find the best price");
        assert_eq!(label_for(Some("  "), "t"), "t");
        let long = label_for(None, &"é".repeat(100));
        assert!(long.len() <= MAX_LABEL_BYTES + 3 && long.ends_with('…'), "{long}");
        assert!(!label_for(Some("a\u{1b}[31mred"), "t").contains('\u{1b}'));
    }

    #[test]
    fn an_announcement_targets_the_origin_and_is_recognised() {
        let origin = Origin { session_key: "telegram:5".into(), channel: "telegram".into(), chat_id: "5".into() };
        let m = announcement(&origin, "ab12cd34", "prices", "find prices", SubagentState::Completed, "42 EUR");
        assert_eq!((m.channel.as_str(), m.sender_id(), m.chat_id.as_str()), ("system", "subagent", "telegram:5"));
        assert_eq!(m.session_key(), "telegram:5");
        assert_eq!(task_id(&m), Some("ab12cd34"));
        assert!(m.content.starts_with("[Subagent 'prices' completed successfully]") && m.content.contains("42 EUR"), "{}", m.content);
        let mut user = m.clone();
        user.channel = "telegram".into();
        assert_eq!(task_id(&user), None, "only a system message is an announcement");

        let mut session = Session::new("telegram:5");
        assert!(!already_delivered(&session, "ab12cd34"));
        session.push(crate::agent::pending::user_message(&m));
        assert!(already_delivered(&session, "ab12cd34"));
    }
}
