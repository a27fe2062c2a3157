//! `BusResponder`: the [`TurnSink`] of a turn that came from the bus.
//!
//! Everything it receives goes back on the bus addressed to the inbound
//! message's `(channel, chat_id)`, where the gateway's router hands it to
//! whoever serves that chat (the web chat, an API request, a channel):
//! - the start of the run: `Progress` "running";
//! - reply text: `StreamDelta` (only when `[agent] stream` is on);
//! - a tool starting, its plugin's `host.progress` texts, and its end:
//!   [`OutboundKind::Tool`] (`tool`, `call_id`, `phase`, and `ok` at the end);
//! - an interim answer of a sustained goal: a `Message` with
//!   [`crate::bus::Reply::interim`] (after `StreamEnd` when streamed);
//! - the outcome ([`BusResponder::finish`]): `StreamEnd` after a streamed
//!   reply, the reply (or the apology of a failed turn), then `TurnEnd`,
//!   always last, so a front end knows the turn is over.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::agent_loop::{APOLOGY, POISON_TEXT, TurnOutcome};
use super::turn::TurnError;
use super::sink::{TurnSink, args_preview, tool_name};
use crate::bus::{self, DeliveryAck, InboundMessage, MessageBus, OutboundKind, OutboundMessage, Reply, StopReason, ToolPhase, ToolProgress};
use crate::session::ToolCall;

/// Publishes one turn's output on the bus.
pub struct BusResponder {
    bus: Arc<MessageBus>,
    channel: String,
    chat_id: String,
    /// The inbound's thread or topic: every event goes back to it.
    thread: Option<Value>,
    stream: bool,
    /// The turn's inbox row's stream link, on its deltas and its reply.
    link: bus::StreamLink,
}

impl BusResponder {
    /// A responder for the turn of `to`; `stream` asks for reply deltas.
    pub fn new(bus: Arc<MessageBus>, to: &InboundMessage, stream: bool) -> Arc<Self> {
        // A `system` message (a subagent's result) is answered in its origin chat.
        let (channel, chat_id) = to.reply_route();
        let thread = to.metadata.get(bus::THREAD).cloned();
        let link = match (bus.inbox(), crate::durable::InboxRef::of(to)) {
            (Some(inbox), Some(row)) if stream => stream_link(inbox, row.id),
            _ => bus::StreamLink::default(),
        };
        Arc::new(BusResponder { bus, channel, chat_id, thread, stream, link })
    }

    fn publish(&self, kind: OutboundKind, content: impl Into<String>, metadata: Map<String, Value>) {
        let mut event = OutboundMessage::reply(&self.channel, &self.chat_id, content);
        if matches!(kind, OutboundKind::StreamDelta) || kind.reply().is_some_and(|r| r.streamed) {
            event.stream = self.link.clone();
        }
        event.kind = kind;
        event.metadata = metadata;
        if let Some(thread) = &self.thread {
            event.metadata.insert(bus::THREAD.into(), thread.clone());
        }
        self.bus.publish_outbound(event);
    }

    fn tool_event(&self, call: &ToolCall, phase: ToolPhase, content: String, ok: Option<bool>) {
        let progress = ToolProgress { tool: tool_name(call).to_string(), call_id: crate::text::clip_for_terminal(&call.id, 64, "id"), phase, ok };
        self.publish(OutboundKind::Tool(progress), content, Map::new());
    }

    /// Publishes how the turn ended: the reply (after `StreamEnd` when it
    /// was streamed), the apology of a failed turn, nothing for a stopped
    /// one; then `TurnEnd`.
    pub fn finish(&self, outcome: &TurnOutcome) {
        self.finish_with(outcome, DeliveryAck::default());
    }

    /// [`BusResponder::finish`]; `ack` goes with a failed turn's apology
    /// (a reply carries its own, from the turn's commit).
    pub fn finish_with(&self, outcome: &TurnOutcome, ack: DeliveryAck) {
        match outcome {
            TurnOutcome::Done(ctx) => {
                if let Some(reply) = &ctx.outbound {
                    let mut reply = reply.clone();
                    if self.stream && reply.kind.reply().is_some_and(|r| r.streamed) {
                        self.publish(OutboundKind::StreamEnd, "", Map::new());
                        reply.stream = self.link.clone();
                    }
                    self.bus.publish_outbound(reply);
                }
            }
            TurnOutcome::Cancelled => {}
            TurnOutcome::Failed(e) => {
                let mut apology = self.apology(e);
                apology.ack = ack;
                self.bus.publish_outbound(apology);
            }
        }
        self.turn_end();
    }

    /// Only `TurnEnd` (a message answered already: nothing else to say).
    pub fn turn_end(&self) {
        self.publish(OutboundKind::TurnEnd, "", Map::new());
    }

    fn apology(&self, error: &TurnError) -> OutboundMessage {
        apology_to(&self.channel, &self.chat_id, self.thread.as_ref(), error)
    }

    /// What [`BusResponder::finish`] will send for a failed turn of `to`,
    /// computed before the turn runs, so the outbox records the very message
    /// that is sent.
    pub fn apology_for(to: &InboundMessage) -> impl Fn(&TurnError) -> OutboundMessage + use<> {
        let (channel, chat_id) = to.reply_route();
        let thread = to.metadata.get(bus::THREAD).cloned();
        move |error: &TurnError| apology_to(&channel, &chat_id, thread.as_ref(), error)
    }
}

/// The reply to a turn that failed with `error`: [`APOLOGY`], or for a
/// poison message the reason it is not tried again.
fn apology_to(channel: &str, chat_id: &str, thread: Option<&Value>, error: &TurnError) -> OutboundMessage {
    let text = match error {
        TurnError::Poison { attempts } => format!("{POISON_TEXT} (tried {attempts} times)"),
        _ => APOLOGY.to_string(),
    };
    let mut apology = OutboundMessage::reply(channel, chat_id, text);
    apology.kind = OutboundKind::Message(Reply { failed: true, stop: Some(StopReason::Error), ..Reply::default() });
    if let Some(thread) = thread {
        apology.metadata.insert(bus::THREAD.into(), thread.clone());
    }
    apology
}

/// The link of row `id`'s streamed reply: the platform message an earlier
/// attempt streamed into, and how to record a new one.
pub fn stream_link(inbox: &Arc<crate::durable::Inbox>, id: u64) -> bus::StreamLink {
    let recorder = inbox.clone();
    bus::StreamLink::new(inbox.stream_handle(id), move |handle| {
        if let Err(e) = recorder.stream_started(id, handle) {
            tracing::warn!(inbox = id, "stream message not recorded (a crash may show this reply twice): {e}");
        }
    })
}

impl TurnSink for BusResponder {
    fn streams_text(&self) -> bool {
        self.stream
    }

    fn run_started(&self) {
        self.publish(OutboundKind::Progress, "running", Map::new());
    }

    fn text_delta(&self, delta: &str) {
        self.publish(OutboundKind::StreamDelta, delta, Map::new());
    }

    fn tool_started(&self, call: &ToolCall) {
        self.tool_event(call, ToolPhase::Started, format!("{}({})", tool_name(call), args_preview(call)), None);
    }

    fn tool_progress(&self, call: &ToolCall, text: &str) {
        self.tool_event(call, ToolPhase::Progress, text.to_string(), None);
    }

    fn tool_finished(&self, call: &ToolCall, ok: bool) {
        self.tool_event(call, ToolPhase::Finished, String::new(), Some(ok));
    }

    /// An interim answer of a goal run is delivered like a reply (after
    /// `StreamEnd` when it was streamed), marked with
    /// [`Reply::interim`], so the chat sees the
    /// progress while the goal goes on; `TurnEnd` comes only with the turn.
    fn interim_answer(&self, text: &str) {
        if self.stream {
            self.publish(OutboundKind::StreamEnd, "", Map::new());
        }
        self.publish(OutboundKind::Message(Reply { streamed: self.stream, interim: true, ..Reply::default() }), text, Map::new());
    }

    /// Sent as a message of its own, before the reply.
    fn notice(&self, text: &str) {
        self.publish(OutboundKind::message(false), text, Map::new());
    }
}
