//! RESPOND: the reply as an `OutboundMessage`, with the user-perceived
//! latency; nothing when a `message` tool already answered this chat and
//! the user said nothing more since (see `ActiveTurn::reply_suppressed`).


use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::core::AgentCore;
use crate::bus::{OutboundKind, OutboundMessage, Reply, TokenUsage};

/// The reply of a SYSTEM turn (a subagent's result) that produced no text.
pub(super) const BACKGROUND_DONE: &str = "Background task completed.";

pub(super) async fn run(core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    // The `message` tool marks the running turn (features::services).
    ctx.sent_to_chat = core.active.get(&ctx.session_key).is_some_and(|turn| turn.reply_suppressed());
    if ctx.sent_to_chat {
        return Ok(TurnEvent::Ok);
    }
    let mut text = ctx.final_content.clone().unwrap_or_default();
    if ctx.inbound.channel == crate::bus::SYSTEM_CHANNEL && text.trim().is_empty() {
        text = BACKGROUND_DONE.to_string();
    }
    let (channel, chat_id) = ctx.inbound.reply_route();
    let mut reply = OutboundMessage::reply(channel, chat_id, text);
    if let Some(thread) = ctx.inbound.metadata.get(crate::bus::THREAD) {
        reply.metadata.insert(crate::bus::THREAD.into(), thread.clone());
    }
    // An error reply was never streamed, even when streaming was on.
    let streamed = ctx.sink.streams_text() && ctx.stop_reason != Some(crate::agent::runner::StopReason::Error);
    let usage = ctx
        .usage
        .filter(|u| u.prompt_tokens + u.completion_tokens > 0)
        .map(|u| TokenUsage { prompt_tokens: u.prompt_tokens, completion_tokens: u.completion_tokens });
    let latency_ms = Some(ctx.started.elapsed().as_millis() as u64);
    reply.kind = OutboundKind::Message(Reply { streamed, stop: Some(ctx.stop()), usage, latency_ms, ..Reply::default() });
    if let Some(id) = ctx.inbound.metadata.get("message_id") {
        reply.reply_to = id.as_str().map(str::to_string).or_else(|| Some(id.to_string()));
    }
    ctx.outbound = Some(reply);
    Ok(TurnEvent::Ok)
}
