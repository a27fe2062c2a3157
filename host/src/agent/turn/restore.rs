//! RESTORE: load or create the session and recover from an interrupted turn.

use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::core::AgentCore;
use crate::agent::runner::Checkpoint;
use crate::agent::runner::governance::INTERRUPTED_RESULT;
use crate::session::{Message, PENDING_INBOX, PENDING_USER_TURN, RUNTIME_CHECKPOINT, Role, Session, ToolCall};

/// Assistant text stored when a persisted user message was never answered.
pub(crate) const INTERRUPTED_TURN: &str = "(The previous request was interrupted before it finished. Ask again to continue.)";

/// The result of a call that was in flight when the process died and is not
/// read-only: it may or may not have taken effect, so it is not run again
/// behind the model's back; the model decides.
pub const INTERRUPTED_ON_RESUME: &str = "Interrupted: the host stopped while this call was running, so it may or may not have taken effect. Check its effect if it matters, and call it again if it is still needed.";

pub(crate) async fn run(core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    if !ctx.ephemeral
        && let Some(inbox) = ctx.inbox
    {
        let mut session = core.sessions.load(&ctx.session_key)?;
        if pending_inbox(&session) == Some(inbox.id) {
            // A dead process persisted this message and left its turn
            // unfinished: go on from its checkpoint, no "ask again".
            let tools = ctx.tools(core);
            let resumed = resume_checkpoint(&mut session, |name| tools.spec(name).is_some_and(|s| s.read_only));
            tracing::info!(session = %ctx.session_key, inbox = inbox.id, rerun = resumed.rerun.len(), answered = resumed.answer.is_some(), "resuming an interrupted turn");
            ctx.rerun_calls = resumed.rerun;
            ctx.resumed_answer = resumed.answer;
            ctx.resume = true;
            core.sessions.save(&mut session)?;
            ctx.session = Some(session);
            return Ok(TurnEvent::Ok);
        }
        // Not this message's turn: whatever else was interrupted is closed
        // as before, then the message runs from the start.
        core.sessions.release(session);
    }
    if ctx.inbound.media.iter().any(|p| !crate::agent::pending::is_image(p)) {
        // Documents become text here (in the fs component's sandbox), so
        // BUILD persists and sends the message with it.
        let max = core.settings.max_attachment_kb.saturating_mul(1024);
        crate::agent::attachments::inline_documents(&core.tools, &mut ctx.inbound, &ctx.session_key, max).await;
    }
    if let Some(history) = ctx.inbound.ephemeral_history.as_ref() {
        // A one-off with the caller's history: nothing is loaded or saved.
        let mut session = Session::new(&ctx.session_key);
        match serde_json::from_value::<Vec<Message>>(history.clone()) {
            Ok(messages) => messages.into_iter().for_each(|m| session.push(m)),
            Err(e) => tracing::warn!(session = %ctx.session_key, "ignoring an unreadable ephemeral history: {e}"),
        }
        ctx.session = Some(session);
        return Ok(TurnEvent::Ok);
    }
    if ctx.ephemeral {
        // An internal run (Dream, heartbeat) starts from nothing and never
        // touches the session store.
        ctx.session = Some(Session::new(&ctx.session_key));
        return Ok(TurnEvent::Ok);
    }
    let mut session = core.sessions.load(&ctx.session_key)?;
    let recovered = materialize_checkpoint(&mut session);
    if recovered && !ctx.ephemeral {
        core.sessions.save(&mut session)?;
    }
    ctx.session = Some(session);
    Ok(TurnEvent::Ok)
}

/// Writes an interrupted turn's progress into the session: the runner's
/// checkpointed messages (only those the tail does not already hold), an
/// "interrupted" result for each unfinished call, and an assistant note if
/// the user message was never answered. Returns whether anything changed.
pub fn materialize_checkpoint(session: &mut Session) -> bool {
    let mut changed = false;
    if let Some(raw) = session.metadata.get(RUNTIME_CHECKPOINT).cloned() {
        changed = true;
        match serde_json::from_value::<Checkpoint>(raw) {
            Ok(checkpoint) => {
                let overlap = overlap(&session.messages, &checkpoint.messages);
                for message in &checkpoint.messages[overlap..] {
                    session.push(message.clone());
                }
                for call in &checkpoint.pending_tool_calls {
                    let answered = session.messages.iter().any(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some(call.id.as_str()));
                    if !answered {
                        session.push(Message::tool_result(&call.id, &call.function.name, INTERRUPTED_RESULT));
                    }
                }
            }
            Err(e) => tracing::warn!(session = %session.key, "dropping an unreadable runtime checkpoint: {e}"),
        }
        session.set_meta(RUNTIME_CHECKPOINT, None);
    }
    if session.metadata.contains_key(PENDING_USER_TURN) {
        changed = true;
        let answered = session.messages.last().is_some_and(|m| m.role == Role::Assistant && m.tool_calls.is_empty());
        if !answered {
            session.push(Message::assistant(INTERRUPTED_TURN));
        }
        session.set_meta(PENDING_USER_TURN, None);
        session.set_meta(PENDING_INBOX, None);
    }
    changed
}

/// The inbox id of the user message a session's unfinished turn persisted.
pub(crate) fn pending_inbox(session: &Session) -> Option<u64> {
    session.metadata.get(PENDING_INBOX).and_then(serde_json::Value::as_u64).filter(|_| session.metadata.contains_key(PENDING_USER_TURN))
}

/// What [`resume_checkpoint`] found.
#[derive(Debug, Default)]
pub struct Resumed {
    /// In-flight calls of read-only tools, with their arguments: run them
    /// again before asking the model.
    pub rerun: Vec<ToolCall>,
    /// The final answer was already checkpointed: the turn only has to
    /// save and send it.
    pub answer: Option<String>,
}

/// Like [`materialize_checkpoint`], for the turn that resumes: the run's
/// messages are kept, each in-flight call of a read-only tool is left open
/// to run again, every other in-flight call gets [`INTERRUPTED_ON_RESUME`],
/// and no "interrupted" note is added: the pending user turn stays pending.
pub fn resume_checkpoint(session: &mut Session, read_only: impl Fn(&str) -> bool) -> Resumed {
    let mut resumed = Resumed::default();
    let mut phase = None;
    if let Some(raw) = session.metadata.get(RUNTIME_CHECKPOINT).cloned() {
        match serde_json::from_value::<Checkpoint>(raw) {
            Ok(checkpoint) => {
                phase = Some(checkpoint.phase);
                let overlap = overlap(&session.messages, &checkpoint.messages);
                for message in &checkpoint.messages[overlap..] {
                    session.push(message.clone());
                }
                for call in &checkpoint.pending_tool_calls {
                    let answered = session.messages.iter().any(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some(call.id.as_str()));
                    if answered {
                        continue;
                    }
                    // The record names the call; its arguments are in the
                    // assistant message the session holds.
                    let full = session.messages.iter().rev().flat_map(|m| m.tool_calls.iter()).find(|c| c.id == call.id).cloned();
                    match full.filter(|c| read_only(&c.function.name)) {
                        Some(full) => resumed.rerun.push(full),
                        None => session.push(Message::tool_result(&call.id, &call.function.name, INTERRUPTED_ON_RESUME)),
                    }
                }
            }
            Err(e) => tracing::warn!(session = %session.key, "dropping an unreadable runtime checkpoint: {e}"),
        }
        session.set_meta(RUNTIME_CHECKPOINT, None);
    }
    if phase == Some(crate::agent::runner::CheckpointPhase::FinalResponse)
        && let Some(last) = session.messages.last().filter(|m| m.role == Role::Assistant && m.tool_calls.is_empty())
    {
        resumed.answer = Some(last.text().to_string());
    }
    resumed
}

/// The length of the longest suffix of `tail` that is a prefix of `new`.
fn overlap(tail: &[crate::session::Message], new: &[crate::session::Message]) -> usize {
    (1..=tail.len().min(new.len())).rev().find(|&k| tail[tail.len() - k..] == new[..k]).unwrap_or(0)
}
