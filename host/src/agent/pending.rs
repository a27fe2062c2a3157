//! The pending queue of a running turn: messages for the same session that
//! arrive mid-turn wait here and are injected into the running loop instead
//! of starting a competing turn (spec §3).
//!
//! A turn whose session still has subagents running does not end while
//! their results may come: when the run has nothing more to do, it waits
//! here ([`InjectionSource::wait_for_more`]) for a result, up to
//! `[agent.subagents] keep_alive_secs`, and goes on with it.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use super::runner::InjectionSource;
use crate::bus::InboundMessage;
use crate::session::Message;

/// Whether the turn should keep waiting for messages (subagents of its
/// session still run), and for how long at most.
pub struct KeepAlive {
    /// Keep waiting while this returns true.
    pub while_: Arc<dyn Fn() -> bool + Send + Sync>,
    /// The longest the turn waits.
    pub bound: Duration,
}

/// A bounded queue of inbound messages.
pub struct PendingQueue {
    queue: Mutex<VecDeque<InboundMessage>>,
    capacity: usize,
    /// Messages injected into the run so far.
    drained: AtomicUsize,
    /// Set by [`PendingQueue::take_all`] when the turn ends: a push after it
    /// is refused (and goes to the bus instead), never left in a dead queue.
    closed: AtomicBool,
    /// Woken on every push, and by [`PendingQueue::wake`].
    arrived: Notify,
    keep_alive: Option<KeepAlive>,
}

impl PendingQueue {
    /// An empty queue holding at most `capacity` messages.
    pub fn new(capacity: usize) -> Self {
        PendingQueue { queue: Mutex::new(VecDeque::new()), capacity, drained: AtomicUsize::new(0), closed: AtomicBool::new(false), arrived: Notify::new(), keep_alive: None }
    }

    /// The run waits for more messages while `keep_alive` says so.
    pub fn with_keep_alive(mut self, keep_alive: KeepAlive) -> Self {
        self.keep_alive = Some(keep_alive);
        self
    }

    /// Queues `message`; gives it back when the queue is full or the turn
    /// has ended.
    pub fn try_push(&self, message: InboundMessage) -> Result<(), InboundMessage> {
        let mut queue = self.queue.lock().expect("pending lock");
        if queue.len() >= self.capacity || self.closed.load(Ordering::SeqCst) {
            return Err(message);
        }
        queue.push_back(message);
        drop(queue);
        self.arrived.notify_waiters();
        Ok(())
    }

    /// Takes everything still queued (re-published when the turn ends) and
    /// closes the queue.
    pub fn take_all(&self) -> Vec<InboundMessage> {
        let mut queue = self.queue.lock().expect("pending lock");
        self.closed.store(true, Ordering::SeqCst);
        queue.drain(..).collect()
    }

    /// Wakes a run waiting for messages, to look at its keep-alive again
    /// (a subagent ended).
    pub fn wake(&self) {
        self.arrived.notify_waiters();
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

    async fn wait(&self) -> bool {
        let Some(keep_alive) = &self.keep_alive else { return false };
        let deadline = tokio::time::Instant::now() + keep_alive.bound;
        loop {
            let arrived = self.arrived.notified();
            if !self.is_empty() {
                return true;
            }
            if !(keep_alive.while_)() || tokio::time::Instant::now() >= deadline {
                return false;
            }
            // The poll bounds a missed wake-up; pushes and subagent ends wake it.
            let _ = tokio::time::timeout_at(deadline.min(tokio::time::Instant::now() + Duration::from_millis(250)), arrived).await;
        }
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
    // A subagent's announcement keeps its task id, so the session holds it
    // once (see `session::holds_subagent_result`).
    if let Some(task_id) = crate::bus::subagent_task_id(inbound) {
        message = message.with_meta(crate::bus::INJECTED_EVENT, crate::bus::SUBAGENT_RESULT).with_meta(crate::bus::TASK_ID, task_id);
    }
    if !images.is_empty() {
        message = message.with_meta("media", images);
    }
    // Its inbox row, so a restart can tell which turn a persisted message
    // belongs to (`turn::commit::injected_ids`, RESTORE's resume).
    if let Some(inbox) = inbound.inbox {
        message = message.with_meta(crate::durable::INBOX_ID, inbox.id);
    }
    message
}

/// Whether an attachment is shown to the model as an image: by its magic
/// bytes, never its name (a text file called `x.png` is a document).
pub fn is_image(path: &std::path::Path) -> bool {
    crate::agent::images::is_image(path)
}

impl InjectionSource for PendingQueue {
    fn drain(&self, max: usize) -> Vec<Message> {
        let mut queue = self.queue.lock().expect("pending lock");
        let n = queue.len().min(max);
        self.drained.fetch_add(n, Ordering::SeqCst);
        queue.drain(..n).map(|m| user_message(&m)).collect()
    }

    fn wait_for_more(&self) -> Pin<Box<dyn Future<Output = bool> + Send + '_>> {
        Box::pin(self.wait())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    fn msg(text: &str) -> InboundMessage {
        InboundMessage::new("chat", "u", "1", text)
    }

    #[test]
    fn a_push_after_the_turn_ended_is_given_back() {
        let queue = PendingQueue::new(2);
        queue.try_push(msg("a")).unwrap();
        assert_eq!(queue.take_all().len(), 1);
        assert_eq!(queue.try_push(msg("late")).unwrap_err().content, "late", "never left in a dead queue");
    }

    #[tokio::test]
    async fn the_run_waits_while_kept_alive_and_only_that_long() {
        let alive = Arc::new(AtomicBool::new(true));
        let flag = alive.clone();
        let keep = |bound| KeepAlive { while_: Arc::new({ let f = flag.clone(); move || f.load(Ordering::SeqCst) }), bound };
        // Nothing to wait for without a keep-alive.
        assert!(!PendingQueue::new(4).wait_for_more().await);

        // A message that arrives while waiting ends the wait at once.
        let queue = Arc::new(PendingQueue::new(4).with_keep_alive(keep(Duration::from_secs(10))));
        let pusher = queue.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            pusher.try_push(msg("result")).unwrap();
        });
        let started = Instant::now();
        assert!(queue.wait_for_more().await);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(queue.drain(3).len(), 1);

        // Bounded: nothing comes, the wait gives up at the bound.
        let queue = PendingQueue::new(4).with_keep_alive(keep(Duration::from_millis(120)));
        let started = Instant::now();
        assert!(!queue.wait_for_more().await);
        assert!(started.elapsed() >= Duration::from_millis(120));

        // When the subagents are done (and say so with a wake), it stops.
        let queue = Arc::new(PendingQueue::new(4).with_keep_alive(keep(Duration::from_secs(10))));
        let waker = queue.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            alive.store(false, Ordering::SeqCst);
            waker.wake();
        });
        let started = Instant::now();
        assert!(!queue.wait_for_more().await);
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
