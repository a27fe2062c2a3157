//! The heartbeat (nanobot's `HeartbeatService`): every `[agent.heartbeat]
//! interval_secs`, `chitin gateway` reads `HEARTBEAT.md` in the workspace;
//! when it lists tasks, an internal run ([`AgentLoop::run_internal`],
//! nothing stored) does them, and its answer goes to a chat: `chat` from the
//! config, else the chat that last wrote to the gateway. An answer that
//! says `HEARTBEAT_OK` (nothing needed attention) is not delivered.
//!
//! The file is the user's (and, since plugins write the workspace, possibly
//! a plugin's): it is read through [`Workspace`] (no links out, regular file
//! only) and capped at [`MAX_HEARTBEAT_BYTES`]; its text goes to the model
//! as a task list, with the run's ordinary tools and limits. A file with
//! only headings, comments and empty checkboxes (the template) is no task,
//! so a fresh workspace costs no model request.
//!
//! A delivered answer is also mirrored into the target chat's session as an
//! assistant row marked `_channel_delivery` ([`AgentLoop::record_delivery`]),
//! so when the user answers it the model sees what it is answering. The last
//! active chat is kept in the data dir ([`LastChat`], `<data>/heartbeat/
//! last_chat.json`, written atomically when it changes), so a restarted
//! gateway still knows where to answer before anyone writes again.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::agent::agent_loop::{AgentLoop, InternalRun};
use crate::agent::turn::RunScope;
use crate::bus::{OutboundKind, OutboundMessage, Reply, StopReason};
use crate::compact::Clock;
use crate::workspace::Workspace;

/// Kept by the engine (the loop records who wrote last); the heartbeat reads it.
pub use crate::agent::last_chat::LastChat;

/// The file in the workspace.
pub const HEARTBEAT_FILE: &str = "HEARTBEAT.md";

/// Bytes of it read at most.
pub const MAX_HEARTBEAT_BYTES: usize = 16 * 1024;

/// What the model answers when nothing needs attention (nanobot's token).
pub const HEARTBEAT_OK: &str = "HEARTBEAT_OK";

/// The template `chitin onboard` writes.
pub const HEARTBEAT_TEMPLATE: &str = "# Heartbeat tasks\n\n<!-- chitin gateway reads this file every [agent.heartbeat] interval_secs\n     when [agent.heartbeat] enabled = true. List tasks below, one per line;\n     leave it empty to do nothing. -->\n\n- [ ]\n";

/// The tasks of `HEARTBEAT.md`, `None` when it is missing, unreadable or
/// has none (blank lines, headings, `<!-- -->` comments and empty
/// checkboxes do not count).
pub fn tasks(workspace: &Workspace) -> Option<String> {
    let read = match workspace.read_capped(Path::new(HEARTBEAT_FILE), MAX_HEARTBEAT_BYTES) {
        Ok(Some(read)) => read,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!("heartbeat: {HEARTBEAT_FILE} unreadable: {e}");
            return None;
        }
    };
    let text = String::from_utf8_lossy(&read.bytes).into_owned();
    let mut in_comment = false;
    let has_task = text.lines().any(|line| {
        let line = line.trim();
        if in_comment {
            in_comment = !line.contains("-->");
            return false;
        }
        if line.starts_with("<!--") {
            in_comment = !line.contains("-->");
            return false;
        }
        !(line.is_empty() || line.starts_with('#') || matches!(line, "- [ ]" | "* [ ]" | "- [x]" | "* [x]" | "-" | "*"))
    });
    has_task.then(|| if read.truncated { format!("{text}\n[… {HEARTBEAT_FILE} cut at {MAX_HEARTBEAT_BYTES} bytes]") } else { text })
}

/// The prompt of a heartbeat run.
pub fn prompt(tasks: &str, now: DateTime<Utc>) -> String {
    format!(
        "[Heartbeat {}] This is a periodic check, not a message from the user. Your workspace's {HEARTBEAT_FILE} lists these tasks:\n\n{tasks}\n\n\
         Do what is due now and report the result in a short message for the user. If nothing needs attention, answer with exactly {HEARTBEAT_OK}.",
        now.format("%Y-%m-%d %H:%M UTC")
    )
}

/// Where a heartbeat's answer goes: `chat` (`channel:chat_id`) when the
/// config names one, else the last active chat; `None`: nowhere to go.
pub fn target(configured: Option<&str>, last_chat: Option<(String, String)>) -> Option<(String, String)> {
    match configured.and_then(|c| c.split_once(':')) {
        Some((channel, chat)) if !channel.is_empty() && !chat.is_empty() => Some((channel.to_string(), chat.to_string())),
        _ => last_chat,
    }
}

/// One heartbeat: reads the file, runs the tasks, delivers the answer.
/// Returns the delivered message (for logs and tests).
pub async fn beat(agent: &AgentLoop, now: DateTime<Utc>) -> Option<OutboundMessage> {
    let core = agent.core();
    let tasks = tasks(&core.workspace)?;
    let Some((channel, chat_id)) = target(core.settings.heartbeat.chat.as_deref(), agent.last_chat()) else {
        tracing::info!("heartbeat: {HEARTBEAT_FILE} has tasks but no chat to answer in yet (set [agent.heartbeat] chat)");
        return None;
    };
    let run = InternalRun {
        content: prompt(&tasks, now),
        session_key: format!("heartbeat:{}", now.format("%Y%m%d-%H%M%S")),
        channel: channel.clone(),
        chat_id: chat_id.clone(),
        scope: RunScope::default(),
        sink: crate::agent::sink::silent(),
    };
    let reply = agent.run_internal(run).await;
    if !matches!(reply.stop, StopReason::Completed | StopReason::MaxIterations) {
        tracing::warn!(stop_reason = %reply.stop, "heartbeat run did not complete: {}", reply.text);
        return None;
    }
    if reply.text.trim().is_empty() || reply.text.contains(HEARTBEAT_OK) {
        tracing::debug!("heartbeat: nothing needed attention");
        return None;
    }
    let mut message = OutboundMessage::reply(&channel, &chat_id, reply.text);
    message.kind = OutboundKind::Message(Reply { stop: Some(reply.stop), ..Reply::default() });
    tracing::info!(channel = %channel, "heartbeat: delivering the result");
    core.bus.publish_outbound(message.clone());
    agent.record_delivery(&channel, &chat_id, &message.content).await;
    Some(message)
}

/// Beats every `[agent.heartbeat] interval_secs` by `clock`, looking every
/// `tick`, until `stop` (the gateway, with its cron tick). The first beat
/// comes one interval after the start.
pub async fn run_periodically(agent: AgentLoop, clock: Arc<dyn Clock>, tick: Duration, stop: CancellationToken) {
    let interval = chrono::Duration::seconds(agent.core().settings.heartbeat.interval_secs.max(1) as i64);
    let mut next = clock.now() + interval;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(tick) => {}
        }
        let now = clock.now();
        if now < next {
            continue;
        }
        next = now + interval;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = beat(&agent, now) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_real_lines_are_tasks() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        assert_eq!(tasks(&ws), None, "no file");
        ws.write(Path::new(HEARTBEAT_FILE), HEARTBEAT_TEMPLATE.as_bytes()).unwrap();
        assert_eq!(tasks(&ws), None, "the template");
        ws.write(Path::new(HEARTBEAT_FILE), b"# Tasks\n<!--\n- hidden\n-->\n\n- [ ] water the plants\n").unwrap();
        assert!(tasks(&ws).unwrap().contains("water the plants"));
        ws.write(Path::new(HEARTBEAT_FILE), "x".repeat(MAX_HEARTBEAT_BYTES * 2).as_bytes()).unwrap();
        assert!(tasks(&ws).unwrap().len() < MAX_HEARTBEAT_BYTES + 100, "capped");
    }

    #[test]
    fn the_configured_chat_wins_over_the_last_one() {
        let last = Some(("web".to_string(), "abc".to_string()));
        assert_eq!(target(Some("telegram:42"), last.clone()), Some(("telegram".into(), "42".into())));
        assert_eq!(target(None, last.clone()), last);
        assert_eq!(target(Some("nonsense"), None), None);
    }
}
