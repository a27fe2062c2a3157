//! The `/new` archive, crash-safe: the cleared tail is stored in the
//! session's metadata ([`PENDING_ARCHIVES`]) in the same save that clears
//! the session, then archived by a task the agent's [`TaskTracker`] owns,
//! and removed from the metadata once `memory/history.jsonl` has it.
//!
//! Before, the session was cleared and the tail archived by a detached
//! task: a shutdown or crash in between lost the conversation from both.
//! Now a graceful shutdown waits for the task (the loop closes and awaits
//! the tracker), and after a crash the next start finds the tail still
//! pending and archives it then ([`AgentLoop::resume_goals`] shares its
//! pass over the sessions).
//!
//! [`TaskTracker`]: tokio_util::task::TaskTracker
//! [`AgentLoop::resume_goals`]: super::AgentLoop::resume_goals

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::core::AgentCore;
use crate::session::{Message, PENDING_ARCHIVES, Session};

/// One tail waiting for the archive.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingArchive {
    /// The session's length when it was cleared (the archive's cursor).
    pub cursor: usize,
    /// When it was cleared.
    pub at: DateTime<Utc>,
    /// The unarchived messages it held.
    pub messages: Vec<Message>,
}

/// The tails of `session` waiting for the archive.
pub fn pending(session: &Session) -> Vec<PendingArchive> {
    session.metadata.get(PENDING_ARCHIVES).and_then(|v| serde_json::from_value(v.clone()).ok()).unwrap_or_default()
}

fn set_pending(session: &mut Session, jobs: &[PendingArchive]) {
    let value = (!jobs.is_empty()).then(|| serde_json::to_value(jobs).expect("messages serialise"));
    session.set_meta(PENDING_ARCHIVES, value);
}

/// Records `tail` (cleared at `cursor`) as waiting for the archive; the
/// caller saves the session.
pub fn push(session: &mut Session, tail: Vec<Message>, cursor: usize) {
    if tail.is_empty() {
        return;
    }
    let mut jobs = pending(session);
    jobs.push(PendingArchive { cursor, at: Utc::now(), messages: tail });
    set_pending(session, &jobs);
}

/// Archives the pending tails of `key` in a task of the agent's tracker
/// (one task per session at a time).
pub fn spawn(core: &Arc<AgentCore>, key: &str) {
    if !core.archiving.lock().expect("archiving lock").insert(key.to_string()) {
        return;
    }
    let (core, key) = (core.clone(), key.to_string());
    core.tasks.clone().spawn(async move {
        archive_all(&core, &key).await;
        core.archiving.lock().expect("archiving lock").remove(&key);
    });
}

async fn archive_all(core: &AgentCore, key: &str) {
    loop {
        // Read under the session's lock, archive without it (a model
        // request), remove under it again.
        let job = {
            let _serial = core.locks.lock(key).await;
            let Ok(session) = core.sessions.load(key) else { return };
            let first = pending(&session).into_iter().next();
            core.sessions.release(session);
            first
        };
        let Some(job) = job else { return };
        crate::crash_point!("new_archive", key);
        if let Err(e) = core.consolidator.summariser().archive_chunk(key, &job.messages, job.cursor, "", job.at).await {
            // Kept pending: the next start tries again.
            tracing::warn!(session = %key, "archiving the cleared conversation failed: {e}");
            return;
        }
        let _serial = core.locks.lock(key).await;
        let Ok(mut session) = core.sessions.load(key) else { return };
        let mut jobs = pending(&session);
        jobs.retain(|j| !(j.cursor == job.cursor && j.at == job.at));
        set_pending(&mut session, &jobs);
        if let Err(e) = core.sessions.save(&mut session) {
            tracing::warn!(session = %key, "archived, but the pending mark was not removed (it may be archived twice): {e}");
        }
        core.sessions.release(session);
    }
}
