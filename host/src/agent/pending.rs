//! The pending queue of a running turn: messages for the same session that
//! arrive mid-turn wait here and are injected into the running loop instead
//! of starting a competing turn (spec §3).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::runner::InjectionSource;
use crate::bus::InboundMessage;
use crate::session::Message;

/// A bounded queue of inbound messages.
pub struct PendingQueue {
    queue: Mutex<VecDeque<InboundMessage>>,
    capacity: usize,
    /// Messages injected into the run so far.
    drained: AtomicUsize,
}

impl PendingQueue {
    /// An empty queue holding at most `capacity` messages.
    pub fn new(capacity: usize) -> Self {
        PendingQueue { queue: Mutex::new(VecDeque::new()), capacity, drained: AtomicUsize::new(0) }
    }

    /// Queues `message`; gives it back when the queue is full.
    pub fn try_push(&self, message: InboundMessage) -> Result<(), InboundMessage> {
        let mut queue = self.queue.lock().expect("pending lock");
        if queue.len() >= self.capacity {
            return Err(message);
        }
        queue.push_back(message);
        Ok(())
    }

    /// Takes everything still queued (re-published when the turn ends).
    pub fn take_all(&self) -> Vec<InboundMessage> {
        self.queue.lock().expect("pending lock").drain(..).collect()
    }

    /// How many messages the run has taken from the queue (injected).
    pub fn drained(&self) -> usize {
        self.drained.load(Ordering::SeqCst)
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.queue.lock().expect("pending lock").len()
    }

    /// True when nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The user message an inbound message becomes.
pub fn user_message(inbound: &InboundMessage) -> Message {
    let mut text = inbound.content.clone();
    let mut images = Vec::new();
    for path in &inbound.media {
        let shown = path.display().to_string();
        if is_image(path) {
            images.push(serde_json::Value::String(shown));
        } else {
            // Non-image attachments become references the model can open.
            text.push_str(&format!("\n[attachment: {shown}]"));
        }
    }
    let mut message = Message::user(text).with_meta("timestamp", inbound.timestamp.to_rfc3339());
    if !images.is_empty() {
        message = message.with_meta("media", images);
    }
    message
}

/// Whether an attachment is shown to the model as an image (by extension).
pub fn is_image(path: &std::path::Path) -> bool {
    let ext = path.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase);
    matches!(ext.as_deref(), Some("png" | "jpg" | "jpeg" | "gif" | "webp" | "bmp"))
}

impl InjectionSource for PendingQueue {
    fn drain(&self, max: usize) -> Vec<Message> {
        let mut queue = self.queue.lock().expect("pending lock");
        let n = queue.len().min(max);
        self.drained.fetch_add(n, Ordering::SeqCst);
        queue.drain(..n).map(|m| user_message(&m)).collect()
    }
}
