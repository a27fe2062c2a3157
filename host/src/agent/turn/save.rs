//! SAVE: append what the run added to the session, clear the turn's
//! crash-recovery flags, and write it all at once.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::core::AgentCore;
use crate::session::{Message, PENDING_USER_TURN, RUNTIME_CHECKPOINT, Role, Session};

/// Stored and sent when the run ended without an answer.
pub(super) const NO_FINAL_ANSWER: &str = "I completed the tool steps but have no final answer to give. Ask me to summarise if you need one.";

pub(super) async fn run(core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    let result = ctx.run_result.take().ok_or(TurnError::Missing { turn: ctx.session_key.clone(), state: ctx.state, missing: "a run result" })?;
    let blank = ctx.final_content.as_deref().is_none_or(|t| t.trim().is_empty());
    // The checkpoints already appended the first `checkpointed_messages`
    // of what the run added.
    let added = result.messages.get(ctx.initial_messages.len() + ctx.checkpointed_messages..).unwrap_or_default();
    let mut added: Vec<Message> = added.to_vec();
    if blank {
        ctx.final_content = Some(NO_FINAL_ANSWER.to_string());
        added.push(Message::assistant(NO_FINAL_ANSWER));
    }
    ctx.usage = Some(result.usage);
    let limit = core.settings.max_tool_result_chars;
    let (ephemeral, overhead, has_inbox) = (ctx.ephemeral, ctx.prompt_overhead.take(), ctx.inbox.is_some() && core.bus.inbox().is_some());
    let session = ctx.session_mut()?;
    append_run_messages(session, added, limit);
    session.set_meta(PENDING_USER_TURN, None);
    session.set_meta(RUNTIME_CHECKPOINT, None);
    let usage = session.metadata.get("usage").cloned().unwrap_or(Value::Null);
    let total = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
    let usage = json!({
        "prompt_tokens": total("prompt_tokens") + result.usage.prompt_tokens,
        "completion_tokens": total("completion_tokens") + result.usage.completion_tokens,
    });
    session.set_meta("usage", Some(usage));
    // With an inbox row, the save is the commit's (`commit::run`), with the
    // reply stamped in: one write per turn, not two.
    if !ephemeral && !has_inbox {
        core.sessions.save(session)?;
    }
    let needs = overhead.is_some_and(|overhead| core.consolidator.needs_consolidation(session, &overhead));
    ctx.consolidate_after = needs && !ephemeral;
    Ok(TurnEvent::Ok)
}

/// Appends messages of the run to the session as history keeps them:
/// empty assistant rows and tool results whose call is unknown or already
/// answered are dropped, results over `limit` characters are truncated.
/// Used by SAVE and by each checkpoint (which appends as the run goes).
pub(super) fn append_run_messages(session: &mut Session, added: impl IntoIterator<Item = Message>, limit: usize) {
    // Calls and results of this turn only: they start at its user message
    // (persisted in BUILD), so the scan costs O(turn), not O(history).
    let turn_start = session.messages.iter().rposition(|m| m.role == Role::User && !m.is_command()).unwrap_or(0);
    let this_turn = &session.messages[turn_start..];
    let mut answered: HashSet<String> = this_turn.iter().filter_map(|m| m.tool_call_id.clone()).collect();
    let mut known: HashSet<String> = this_turn.iter().flat_map(|m| m.tool_calls.iter().map(|c| c.id.clone())).collect();
    for mut message in added {
        // A subagent's result is held once, however it arrived.
        if let Some(id) = message.meta.get(crate::bus::TASK_ID).and_then(Value::as_str)
            && crate::session::holds_subagent_result(session, id)
        {
            continue;
        }
        match message.role {
            Role::Assistant if message.text().trim().is_empty() && message.tool_calls.is_empty() => continue,
            Role::Tool => {
                let id = message.tool_call_id.clone().unwrap_or_default();
                if !known.contains(&id) || !answered.insert(id) {
                    continue;
                }
                truncate(&mut message, limit);
            }
            _ => known.extend(message.tool_calls.iter().map(|c| c.id.clone())),
        }
        session.push(message);
    }
}

fn truncate(message: &mut Message, limit: usize) {
    let text = message.text();
    if text.chars().count() > limit {
        let head: String = text.chars().take(limit).collect();
        message.content = Some(format!("{head}\n[truncated to {limit} characters]"));
    }
}
