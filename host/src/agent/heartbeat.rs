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

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::agent_loop::{AgentLoop, InternalRun};
use super::turn::RunScope;
use crate::bus::{OutboundKind, OutboundMessage, Reply, StopReason};
use crate::compact::Clock;
use crate::workspace::Workspace;

/// The file in the workspace.
pub const HEARTBEAT_FILE: &str = "HEARTBEAT.md";

/// Bytes of it read at most.
pub const MAX_HEARTBEAT_BYTES: usize = 16 * 1024;

/// What the model answers when nothing needs attention (nanobot's token).
pub const HEARTBEAT_OK: &str = "HEARTBEAT_OK";

/// The template `chitin onboard` writes.
pub const HEARTBEAT_TEMPLATE: &str = "# Heartbeat tasks\n\n<!-- chitin gateway reads this file every [agent.heartbeat] interval_secs\n     when [agent.heartbeat] enabled = true. List tasks below, one per line;\n     leave it empty to do nothing. -->\n\n- [ ]\n";

/// Bytes of a channel name or chat id kept as the last chat; a longer one
/// (no real chat has one) is not remembered.
const MAX_CHAT_FIELD: usize = 256;

/// `<data>/heartbeat/last_chat.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LastChatRecord {
    channel: String,
    chat_id: String,
}

/// The chat a person last wrote from, in memory and in the data dir.
pub struct LastChat {
    file: PathBuf,
    current: Mutex<Option<(String, String)>>,
}

impl LastChat {
    /// The record under data dir `data_root`, loaded now; a missing file is
    /// no chat yet, an unreadable or malformed one is logged and ignored.
    pub fn open(data_root: &Path) -> Self {
        let file = data_root.join("heartbeat").join("last_chat.json");
        let current = match std::fs::read(&file) {
            Ok(bytes) => match serde_json::from_slice::<LastChatRecord>(&bytes) {
                Ok(r) if valid(&r.channel) && valid(&r.chat_id) => Some((r.channel, r.chat_id)),
                Ok(_) => {
                    tracing::warn!(file = %file.display(), "heartbeat: the last chat record holds an empty or oversized field; ignored");
                    None
                }
                Err(e) => {
                    tracing::warn!(file = %file.display(), "heartbeat: the last chat record is malformed, ignored: {e}");
                    None
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(file = %file.display(), "heartbeat: cannot read the last chat record: {e}");
                None
            }
        };
        LastChat { file, current: Mutex::new(current) }
    }

    /// The record's file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The last chat, as (channel, chat id).
    pub fn get(&self) -> Option<(String, String)> {
        self.current.lock().expect("last chat").clone()
    }

    /// Remembers `channel:chat_id`; writes the file only when it changed
    /// (a busy chat costs no write per message). A failed write is logged:
    /// the memory copy still serves this process.
    pub fn set(&self, channel: &str, chat_id: &str) {
        if !valid(channel) || !valid(chat_id) {
            return;
        }
        {
            let mut current = self.current.lock().expect("last chat");
            if current.as_ref().is_some_and(|(c, t)| c == channel && t == chat_id) {
                return;
            }
            *current = Some((channel.to_string(), chat_id.to_string()));
        }
        let file = &self.file;
        let record = LastChatRecord { channel: channel.to_string(), chat_id: chat_id.to_string() };
        let bytes = serde_json::to_vec(&record).expect("a record serialises");
        let written = file
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .map_err(|e| ("creating the directory", e))
            .and_then(|()| crate::fsutil::write_atomic(file, &bytes));
        if let Err((step, e)) = written {
            tracing::warn!(file = %file.display(), "heartbeat: last chat not saved ({step}): {e}");
        }
    }
}

fn valid(field: &str) -> bool {
    !field.is_empty() && field.len() <= MAX_CHAT_FIELD
}

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
        sink: super::sink::silent(),
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
    fn the_last_chat_survives_a_reopen_and_bad_records_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let last = LastChat::open(dir.path());
        assert_eq!(last.get(), None);
        last.set("telegram", "42");
        assert_eq!(LastChat::open(dir.path()).get(), Some(("telegram".into(), "42".into())));
        last.set("", "x");
        last.set("web", &"x".repeat(MAX_CHAT_FIELD + 1));
        assert_eq!(LastChat::open(dir.path()).get(), Some(("telegram".into(), "42".into())), "invalid fields are not kept");
        let file = last.file().to_path_buf();
        std::fs::write(&file, "{oops").unwrap();
        assert_eq!(LastChat::open(dir.path()).get(), None, "malformed: ignored");
        std::fs::write(&file, r#"{"channel":"","chat_id":"1"}"#).unwrap();
        assert_eq!(LastChat::open(dir.path()).get(), None, "empty channel: ignored");
    }

    #[test]
    fn the_configured_chat_wins_over_the_last_one() {
        let last = Some(("web".to_string(), "abc".to_string()));
        assert_eq!(target(Some("telegram:42"), last.clone()), Some(("telegram".into(), "42".into())));
        assert_eq!(target(None, last.clone()), last);
        assert_eq!(target(Some("nonsense"), None), None);
    }
}
