//! BUILD: history, then the prompt (system prompt, history, current message),
//! and the user message persisted before the model is called.

use chrono::Utc;
use serde_json::Value;

use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::context::{ArchiveContext, RuntimeFacts};
use crate::agent::core::AgentCore;
use crate::agent::pending::user_message;
use crate::session::PENDING_USER_TURN;
use crate::tokens::{estimate_message, estimate_request};

pub async fn run(core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    let budget = core.input_budget();
    let current = user_message(&ctx.inbound);
    let facts = RuntimeFacts {
        model: core.settings.model.clone(),
        channel: ctx.inbound.channel.clone(),
        chat_id: ctx.inbound.chat_id.clone(),
        now: Utc::now(),
        tool_names: core.tools.names().map(str::to_string).collect(),
    };
    let archive = ArchiveContext { recent_history: Vec::new(), last_summary: ctx.pending_summary.clone() };
    let system_prompt = core.context.system_prompt(&facts, &archive);

    let session = ctx.session_mut()?;
    ctx.history = session.get_history(core.settings.history_max_messages, budget, estimate_message);
    let history = ctx.history.clone();
    ctx.initial_messages = core.context.build_messages(system_prompt, history, current.clone());
    let prompt_tokens = estimate_request(&ctx.initial_messages, core.tools.definitions());

    let ephemeral = ctx.ephemeral;
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
