//! RESTORE: load or create the session and recover from an interrupted turn.

use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::core::AgentCore;
use crate::agent::runner::Checkpoint;
use crate::agent::runner::governance::INTERRUPTED_RESULT;
use crate::session::{Message, PENDING_USER_TURN, RUNTIME_CHECKPOINT, Role, Session};

/// Assistant text stored when a persisted user message was never answered.
pub const INTERRUPTED_TURN: &str = "(The previous request was interrupted before it finished. Ask again to continue.)";

pub async fn run(core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    if ctx.inbound.media.iter().any(|p| !crate::agent::pending::is_image(p)) {
        // Documents become text here (in the fs component's sandbox), so
        // BUILD persists and sends the message with it.
        let max = core.settings.max_attachment_kb.saturating_mul(1024);
        crate::agent::attachments::inline_documents(&core.tools, &mut ctx.inbound, &ctx.session_key, max).await;
    }
    if let Some(history) = ctx.inbound.metadata.get(crate::bus::EPHEMERAL_HISTORY) {
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
    }
    changed
}

/// The length of the longest suffix of `tail` that is a prefix of `new`.
fn overlap(tail: &[crate::session::Message], new: &[crate::session::Message]) -> usize {
    (1..=tail.len().min(new.len())).rev().find(|&k| tail[tail.len() - k..] == new[..k]).unwrap_or(0)
}
