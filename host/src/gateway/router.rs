//! The gateway's output seam: one consumer of the bus's outbound queue that
//! hands each event to whoever waits for it.
//!
//! The bus has a single outbound queue and [`crate::agent::AgentLoop`] does
//! not know who asked; it addresses every event by `(channel, chat_id)`.
//! A front end that serves many conversations at once (an HTTP request per
//! turn for the API, a chat per user for a channel) therefore needs one
//! demultiplexer, not one reader per front end racing for the queue. Routes
//! are looked up in this order:
//! 1. a **chat route** `(channel, chat_id)`: the API registers one per
//!    request (its `chat_id` is the request id), so its SSE writer sees only
//!    its own turn's `StreamDelta`/`StreamEnd`/`Message`/`TurnEnd`;
//! 2. a **channel route** `channel`: a chat channel (Telegram, …) registers
//!    one for all of its chats;
//! 3. otherwise the event is dropped with a debug log (e.g. the `TurnEnd`
//!    of a request whose client already went away).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::bus::{MessageBus, OutboundMessage};

type Key = (String, String);

/// Routes outbound events to their receivers. Shared behind an `Arc`.
#[derive(Default)]
pub struct OutboundRouter {
    chats: Mutex<HashMap<Key, mpsc::UnboundedSender<OutboundMessage>>>,
    channels: Mutex<HashMap<String, mpsc::UnboundedSender<OutboundMessage>>>,
}

/// A chat route; dropping it unregisters the route.
pub struct ChatRoute {
    router: Arc<OutboundRouter>,
    key: Key,
    /// The events of this chat, in bus order.
    pub events: mpsc::UnboundedReceiver<OutboundMessage>,
}

impl Drop for ChatRoute {
    fn drop(&mut self) {
        self.router.chats.lock().expect("router lock").remove(&self.key);
    }
}

impl OutboundRouter {
    /// An empty router.
    pub fn new() -> Arc<Self> {
        Arc::new(OutboundRouter::default())
    }

    /// Receives the events for `chat_id` on `channel` until the route is
    /// dropped. Register before publishing the inbound message, so no event
    /// can arrive before the route exists.
    pub fn route_chat(self: &Arc<Self>, channel: &str, chat_id: &str) -> ChatRoute {
        let (tx, events) = mpsc::unbounded_channel();
        let key = (channel.to_string(), chat_id.to_string());
        self.chats.lock().expect("router lock").insert(key.clone(), tx);
        ChatRoute { router: self.clone(), key, events }
    }

    /// Receives every event for `channel` that no chat route claims.
    pub fn route_channel(&self, channel: &str) -> mpsc::UnboundedReceiver<OutboundMessage> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.channels.lock().expect("router lock").insert(channel.to_string(), tx);
        rx
    }

    /// Hands `event` to its route; false when nobody waits for it.
    pub fn deliver(&self, event: OutboundMessage) -> bool {
        let key = (event.channel.clone(), event.chat_id.clone());
        let chat = self.chats.lock().expect("router lock").get(&key).cloned();
        let target = chat.or_else(|| self.channels.lock().expect("router lock").get(&event.channel).cloned());
        match target {
            Some(tx) => tx.send(event).is_ok(),
            None => {
                tracing::debug!(channel = %key.0, chat = %key.1, kind = ?event.kind, "outbound event with no route dropped");
                false
            }
        }
    }

    /// Consumes the bus's outbound queue forever (the gateway aborts it at
    /// shutdown, after the agent loop has stopped).
    pub async fn run(self: Arc<Self>, bus: Arc<MessageBus>) {
        while let Some(event) = bus.consume_outbound().await {
            self.deliver(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bus::{InboundMessage, OutboundKind};

    #[test]
    fn chat_routes_win_over_channel_routes_and_unregister_on_drop() {
        let router = OutboundRouter::new();
        let mut channel = router.route_channel("api");
        let mut a = router.route_chat("api", "req-a");
        let to_a = InboundMessage::new("api", "u", "req-a", "hi");
        assert!(router.deliver(OutboundMessage::event(&to_a, OutboundKind::StreamDelta, "x")));
        assert_eq!(a.events.try_recv().unwrap().content, "x");
        assert!(channel.try_recv().is_err(), "a chat route claims its events");
        drop(a);
        assert!(router.deliver(OutboundMessage::reply("api", "req-a", "late")));
        assert_eq!(channel.try_recv().unwrap().content, "late", "falls back to the channel route");
        assert!(!router.deliver(OutboundMessage::reply("telegram", "1", "nobody")));
    }
}
