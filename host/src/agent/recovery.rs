//! Resume on start (deliverable 2 of issue 19): what a dead process left in
//! the durable inbox is finished before new messages are taken.
//!
//! - A reply recorded and not delivered is sent again (a channel marks it
//!   delivered once the platform took it; a delivered one is not resent).
//! - A row whose turn committed its session but died before the row was
//!   marked done is finished from the session's `answered_inbox` stamp:
//!   done, and its reply sent, without running the turn again.
//! - A row injected into another row's unfinished turn is left to that
//!   turn: its resume answers both.
//! - An API row is closed unanswered: its client's connection died with the
//!   process, and nobody could receive the answer.
//! - Every other row is queued again with its id: its turn resumes from the
//!   checkpoint when its user message was persisted (RESTORE), or runs from
//!   the start when it was not. A row tried [`crate::durable::MAX_ATTEMPTS`]
//!   times is answered with a failure instead (`AgentLoop::process`).

use serde_json::Value;

use super::AgentLoop;
use super::turn::commit::{delivery_ack, needs_delivery_mark};
use super::turn::restore::pending_inbox;
use crate::bus::{API_CHANNEL, OutboundMessage};
use crate::durable::{INBOX_ID, InboxRef};
use crate::session::{ANSWERED_INBOX, Role, Session};

/// What [`AgentLoop::recover`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Replies sent again (recorded, not delivered).
    pub resent: usize,
    /// Rows finished from their session's stamp.
    pub finished: usize,
    /// Rows queued again (resumed or run from the start).
    pub resumed: usize,
    /// Rows left to the unfinished turn they were injected into.
    pub injected: usize,
    /// API rows closed unanswered.
    pub abandoned: usize,
}

/// The `answered_inbox` stamp of `session`: (id, also, reply).
fn answered(session: &Session) -> Option<(u64, Vec<u64>, Option<OutboundMessage>)> {
    let stamp = session.metadata.get(ANSWERED_INBOX)?;
    let id = stamp.get("id")?.as_u64()?;
    let also = stamp.get("also").and_then(Value::as_array).map(|a| a.iter().filter_map(Value::as_u64).collect()).unwrap_or_default();
    let reply = stamp.get("reply").filter(|r| !r.is_null()).and_then(|r| serde_json::from_value(r.clone()).ok());
    Some((id, also, reply))
}

/// Whether `session` holds the user message of row `id`.
fn holds(session: &Session, id: u64) -> bool {
    session.messages.iter().any(|m| m.role == Role::User && m.meta.get(INBOX_ID).and_then(Value::as_u64) == Some(id))
}

/// Publishes `reply`, recorded for row `id` by an earlier process: with the
/// delivery mark when `mark`, and, when it was streamed, linked to the
/// platform message its stream created (so it becomes that message's
/// final edit, not a second message).
fn resend(bus: &crate::bus::MessageBus, inbox: &std::sync::Arc<crate::durable::Inbox>, id: u64, mut reply: OutboundMessage, mark: bool) {
    if mark {
        reply.ack = delivery_ack(inbox, id);
    }
    if reply.kind.reply().is_some_and(|r| r.streamed) {
        reply.stream = super::responder::stream_link(inbox, id);
    }
    bus.publish_outbound(reply);
}

impl AgentLoop {
    /// Finishes what a dead process left (see the module docs). Called by
    /// [`AgentLoop::run`] before it takes messages, and by the interactive
    /// `chitin agent`; a bus without an inbox has nothing to recover.
    ///
    /// Only the first call in a process does anything: it must run before
    /// any intake (a channel, the HTTP server) accepts a message, or it
    /// would take a row this process just accepted for a dead one's (an API
    /// row closed unanswered, a channel's message run twice).
    pub fn recover(&self) -> Recovery {
        let mut report = Recovery::default();
        if self.recovered.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return report;
        }
        let core = self.core();
        let Some(inbox) = core.bus.inbox().cloned() else { return report };
        for (id, reply) in inbox.undelivered() {
            resend(&core.bus, &inbox, id, reply, true);
            report.resent += 1;
        }
        for row in inbox.open_rows() {
            if !inbox.is_open(row.id) {
                continue; // closed by an earlier row's stamp (`also`)
            }
            let inbox_ref = InboxRef { id: row.id };
            if row.msg.channel == API_CHANNEL {
                if let Err(e) = inbox.done(inbox_ref, &[], None, true) {
                    tracing::warn!(inbox = row.id, "closing an API row: {e}");
                }
                report.abandoned += 1;
                continue;
            }
            if let Ok(session) = core.sessions.snapshot(&row.msg.session_key()) {
                if let Some((id, also, reply)) = answered(&session).filter(|(id, _, _)| *id == row.id) {
                    let needs_mark = reply.as_ref().is_some_and(needs_delivery_mark);
                    match inbox.done(InboxRef { id }, &also, reply.as_ref(), !needs_mark) {
                        Ok(true) => {
                            if let Some(reply) = reply {
                                resend(&core.bus, &inbox, id, reply, needs_mark);
                            }
                        }
                        Ok(false) => {}
                        Err(e) => tracing::warn!(inbox = id, "finishing a committed turn: {e}"),
                    }
                    report.finished += 1;
                    continue;
                }
                let pending = pending_inbox(&session);
                if holds(&session, row.id) && pending != Some(row.id) {
                    match pending {
                        Some(host) if inbox.is_open(host) => report.injected += 1,
                        // Injected into a turn that finished: answered there.
                        _ => {
                            if let Err(e) = inbox.done(inbox_ref, &[], None, true) {
                                tracing::warn!(inbox = row.id, "closing an injected row: {e}");
                            }
                            report.finished += 1;
                        }
                    }
                    continue;
                }
            }
            core.bus.publish_inbound(row.msg);
            report.resumed += 1;
        }
        if report != Recovery::default() {
            tracing::info!(?report, "recovered what the previous run left unfinished");
        }
        report
    }
}
