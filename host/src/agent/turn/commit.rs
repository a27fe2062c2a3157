//! The end of a turn that answers an inbox row (SCALE_OUT §9 step 4): the
//! session is saved with the reply stamped into it (`answered_inbox`), then
//! the row is marked done with the reply in the outbox, in that order. A
//! crash between the two is finished on start from the stamp
//! (`AgentLoop::recover`), so the turn is never run twice and its reply is
//! recorded once.

use serde_json::{Value, json};

use super::{TurnContext, TurnError};
use crate::agent::core::AgentCore;
use crate::bus::{DeliveryAck, OutboundMessage};
use crate::durable::{INBOX_ID, Inbox, InboxRef};
use crate::session::{ANSWERED_INBOX, PENDING_INBOX, Role, Session};

/// Front ends that need no delivery mark: the web chat shows replies from
/// the session's history (a page that reconnects loads it), the API answers
/// only the request still waiting (a client gone after a crash is not
/// answered), the terminal prints the outcome, and `system` is internal.
const NO_DELIVERY_MARK: [&str; 4] = ["web", "api", "cli", crate::bus::SYSTEM_CHANNEL];

/// Whether `reply` must be marked delivered by the channel that sends it
/// (and re-sent after a restart until it is).
pub(crate) fn needs_delivery_mark(reply: &OutboundMessage) -> bool {
    !NO_DELIVERY_MARK.contains(&reply.channel.as_str()) && !(reply.content.trim().is_empty() && reply.media.is_empty())
}

/// The ack that marks `id` delivered in `inbox`.
pub(crate) fn delivery_ack(inbox: &std::sync::Arc<Inbox>, id: u64) -> DeliveryAck {
    let inbox = inbox.clone();
    DeliveryAck::new(move || {
        if let Err(e) = inbox.delivered(id) {
            tracing::warn!(inbox = id, "delivery not marked (the reply may be sent again after a restart): {e}");
        }
    })
}

/// Inbox ids of the messages injected into the turn of `inbox`: tagged user
/// messages after its own in the session.
pub(crate) fn injected_ids(session: &Session, inbox: InboxRef) -> Vec<u64> {
    let tag = |m: &crate::session::Message| m.meta.get(INBOX_ID).and_then(Value::as_u64);
    let Some(start) = session.messages.iter().rposition(|m| m.role == Role::User && tag(m) == Some(inbox.id)) else { return Vec::new() };
    session.messages[start + 1..].iter().filter(|m| m.role == Role::User).filter_map(tag).collect()
}

/// Commits the turn of `ctx` (see the module docs). Without an inbox row
/// (the CLI, internal runs) there is nothing to do: SAVE has saved.
pub(crate) fn run(core: &AgentCore, ctx: &mut TurnContext) -> Result<(), TurnError> {
    let (Some(inbox_ref), Some(inbox)) = (ctx.inbox, core.bus.inbox().cloned()) else { return Ok(()) };
    let reply = ctx.outbound.clone();
    let mut also = Vec::new();
    if !ctx.ephemeral
        && let Some(session) = ctx.session.as_mut()
    {
        also = injected_ids(session, inbox_ref);
        session.set_meta(PENDING_INBOX, None);
        session.set_meta(ANSWERED_INBOX, Some(json!({"id": inbox_ref.id, "also": also, "reply": reply})));
        core.sessions.commit_turn(session, Some(inbox_ref), reply.as_ref())?;
        crate::crash_point!("saved", &ctx.inbound.content);
    }
    let delivered = !reply.as_ref().is_some_and(needs_delivery_mark);
    match inbox.done(inbox_ref, &also, reply.as_ref(), delivered) {
        Ok(true) => {
            if !delivered && let Some(reply) = ctx.outbound.as_mut() {
                reply.ack = delivery_ack(&inbox, inbox_ref.id);
            }
        }
        Ok(false) => {
            // Another attempt answered it: one reply only.
            tracing::warn!(session = %ctx.session_key, inbox = inbox_ref.id, "message already answered; this reply is not sent");
            ctx.outbound = None;
        }
        Err(e) => tracing::error!(session = %ctx.session_key, inbox = inbox_ref.id, "reply sent without a durable record: {e}"),
    }
    Ok(())
}
