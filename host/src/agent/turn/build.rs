//! BUILD: (1) token consolidation when the prompt estimate reached the
//! budget, (2) history, (3) the prompt (system prompt, history, current
//! message); the user message is persisted before the model is called.

use serde_json::Value;

use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::core::AgentCore;
use crate::agent::pending::user_message;
use crate::compact::prompt_overhead;
use crate::session::PENDING_USER_TURN;
use crate::tokens::estimate_message;

pub async fn run(core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    let budget = core.input_budget();
    let current = user_message(&ctx.inbound);
    let (channel, chat_id, key) = (ctx.inbound.channel.clone(), ctx.inbound.chat_id.clone(), ctx.session_key.clone());
    let summary = ctx.pending_summary.clone();
    let mut system_prompt = core.system_prompt(&channel, &chat_id, &key, summary.clone());
    ctx.prompt_overhead = prompt_overhead(&system_prompt, core.tools.definitions_tokens(), &current);

    let (ephemeral, overhead) = (ctx.ephemeral, ctx.prompt_overhead);
    let session = ctx.session_mut()?;
    if core.consolidator.needs_consolidation(session, overhead) {
        match core.consolidator.maybe_consolidate(session, &system_prompt, overhead).await {
            Ok(report) if report.changed() => {
                if !ephemeral {
                    core.sessions.save(session)?;
                }
                // The archive gained entries the system prompt shows.
                system_prompt = core.system_prompt(&channel, &chat_id, &key, summary);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(session = %key, "consolidation failed: {e}"),
        }
    }

    let session = ctx.session_mut()?;
    ctx.history = session.get_history(core.settings.history_max_messages, budget, estimate_message);
    let history = ctx.history.clone();
    // The overhead already counts the system prompt, tools and the current
    // message; history counts are remembered per message.
    let prompt_tokens = ctx.prompt_overhead + history.iter().map(estimate_message).sum::<usize>();
    ctx.initial_messages = core.context.build_messages(system_prompt, history, current.clone());

    let session = ctx.session_mut()?;
    session.set_meta("last_prompt_tokens", Some(Value::from(prompt_tokens)));
    if !ephemeral {
        // Persisted before the model is called: a crash mid-run must not
        // lose what the user said (RESTORE answers it as interrupted).
        session.push(current);
        session.set_meta(PENDING_USER_TURN, Some(Value::Bool(true)));
        core.sessions.save(session)?;
    }
    Ok(TurnEvent::Ok)
}
