//! BUILD: (1) token consolidation when the prompt estimate reached the
//! budget, (2) history, (3) the prompt (system prompt, history, current
//! message); the user message is persisted before the model is called.

use serde_json::Value;

use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::core::AgentCore;
use crate::agent::pending::user_message;
use crate::compact::PromptOverhead;
use crate::session::{ANSWERED_INBOX, LAST_PROMPT_TOKENS, LAST_PROMPT_TOKENS_BOUND, Message, PENDING_INBOX, PENDING_USER_TURN, Role};
use crate::tokens::{Counted, estimate_message, message_bound};

pub(super) async fn run(core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    let budget = core.input_budget();
    let current = user_message(&ctx.inbound);
    let ((channel, chat_id), key) = (ctx.inbound.reply_route(), ctx.session_key.clone());
    let summary = ctx.pending_summary.clone();
    let mut system_prompt = core.system_prompt(&channel, &chat_id, &key, summary.clone());
    let overhead = PromptOverhead::new(&system_prompt, ctx.tools(core), &current);

    if ctx.resume {
        return resume(core, ctx, system_prompt, overhead, budget);
    }
    let ephemeral = ctx.ephemeral;
    let session = ctx.session_mut()?;
    // An ephemeral turn archives nothing: consolidation would append to
    // `memory/history.jsonl` on behalf of a conversation that is not kept.
    if !ephemeral && core.consolidator.needs_consolidation(session, &overhead) {
        match core.consolidator.maybe_consolidate(session, &system_prompt, overhead.exact()).await {
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
    if let Some(goal) = crate::agent::goal::goal_of(session).filter(|g| g.is_active()) {
        system_prompt.push_str(&crate::agent::goal::prompt_block(&goal));
    }
    ctx.history = session.get_history_bounded(core.settings.history_max_messages, budget, &message_bound, &estimate_message);
    let prompt_tokens = prompt_tokens(&overhead, &ctx.history);
    // The prompt's copy carries the image bytes; the session keeps the paths.
    let mut shown = current.clone();
    crate::agent::images::attach(&mut shown, &core.media_root, core.settings.max_image_kb.saturating_mul(1024) as u64);
    ctx.initial_messages = core.context.build_messages(system_prompt, ctx.history.clone(), shown);

    let inbox = ctx.inbox;
    let session = ctx.session.as_mut().ok_or(TurnError::Missing { turn: ctx.session_key.clone(), state: ctx.state, missing: "a session" })?;
    session.set_meta(LAST_PROMPT_TOKENS, Some(Value::from(prompt_tokens.value)));
    session.set_meta(LAST_PROMPT_TOKENS_BOUND, prompt_tokens.bound_only.then_some(Value::Bool(true)));
    if !ephemeral {
        // Persisted before the model is called: a crash mid-run must not
        // lose what the user said. With an inbox row the restart resumes
        // the turn from here (RESTORE); without, it answers it as
        // interrupted.
        session.push(current);
        session.set_meta(PENDING_USER_TURN, Some(Value::Bool(true)));
        session.set_meta(PENDING_INBOX, inbox.map(|r| Value::from(r.id)));
        session.set_meta(ANSWERED_INBOX, None);
        core.sessions.save(session)?;
        crate::crash_point!("build", &ctx.inbound.content);
    }
    ctx.prompt_overhead = Some(overhead);
    Ok(TurnEvent::Ok)
}

/// BUILD of a resumed turn: the user message and what the dead process's
/// run did are the session's tail already; the prompt is rebuilt around
/// them (nothing is persisted again, no consolidation runs mid-turn).
fn resume(core: &AgentCore, ctx: &mut TurnContext, mut system_prompt: String, overhead: PromptOverhead, budget: usize) -> Result<TurnEvent, TurnError> {
    let id = ctx.inbox.map(|r| r.id);
    let (turn, state) = (ctx.session_key.clone(), ctx.state);
    let session = ctx.session.as_mut().ok_or(TurnError::Missing { turn: turn.clone(), state, missing: "a session" })?;
    let tagged = |m: &Message| m.role == Role::User && m.meta.get(crate::durable::INBOX_ID).and_then(Value::as_u64) == id;
    let Some(start) = session.messages.iter().rposition(tagged) else {
        return Err(TurnError::Missing { turn, state, missing: "the resumed turn's user message" });
    };
    let tail: Vec<Message> = session.messages[start..].to_vec();
    if let Some(goal) = crate::agent::goal::goal_of(session).filter(|g| g.is_active()) {
        system_prompt.push_str(&crate::agent::goal::prompt_block(&goal));
    }
    let mut history = session.get_history_bounded(core.settings.history_max_messages, budget, &message_bound, &estimate_message);
    // History is a suffix of the session: cut it where the turn starts.
    match history.iter().rposition(tagged) {
        Some(at) => history.truncate(at),
        None => history.clear(),
    }
    let prompt_tokens = prompt_tokens(&overhead, &history);
    session.set_meta(LAST_PROMPT_TOKENS, Some(Value::from(prompt_tokens.value)));
    session.set_meta(LAST_PROMPT_TOKENS_BOUND, prompt_tokens.bound_only.then_some(Value::Bool(true)));
    let mut shown = tail[0].clone();
    crate::agent::images::attach(&mut shown, &core.media_root, core.settings.max_image_kb.saturating_mul(1024) as u64);
    let mut initial = core.context.build_messages(system_prompt, history.clone(), shown);
    initial.extend(tail[1..].iter().cloned());
    ctx.history = history;
    ctx.initial_messages = initial;
    ctx.prompt_overhead = Some(overhead);
    Ok(TurnEvent::Ok)
}

/// The prompt's size for `/status`.
struct PromptTokens {
    value: usize,
    /// `value` is an upper bound: counting exactly would have loaded the
    /// tokenizer for a figure no decision needed.
    bound_only: bool,
}

fn prompt_tokens(overhead: &PromptOverhead, history: &[Message]) -> PromptTokens {
    if crate::tokens::is_loaded() {
        // History counts are remembered per message.
        PromptTokens { value: overhead.exact() + history.iter().map(estimate_message).sum::<usize>(), bound_only: false }
    } else {
        PromptTokens { value: overhead.bound() + history.iter().map(message_bound).sum::<usize>(), bound_only: true }
    }
}
