//! The turns running right now, one per session: where their pending queue
//! is, and how to stop them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::pending::PendingQueue;

/// A running turn.
pub struct ActiveTurn {
    /// Where same-session messages wait to be injected.
    pub pending: Arc<PendingQueue>,
    /// Cancelled by `/stop` (or Ctrl-C in the CLI).
    pub cancel: CancellationToken,
    /// When the turn started.
    pub started: Instant,
    /// The session's sustained goal while the turn runs (`agent::goal`).
    pub goal: Arc<super::goal::GoalSlot>,
    /// How many messages had been injected when a plugin last sent to this
    /// turn's own chat (`messaging`), plus one; 0 = no such send.
    sent_at: AtomicUsize,
}

impl ActiveTurn {
    /// A turn starting now, with `pending` as its queue.
    pub fn new(pending: Arc<PendingQueue>) -> Self {
        ActiveTurn { pending, cancel: CancellationToken::new(), started: Instant::now(), goal: Default::default(), sent_at: AtomicUsize::new(0) }
    }

    /// A message went to this turn's chat through the `message` tool.
    pub fn note_sent_to_chat(&self) {
        self.sent_at.store(self.pending.drained() + 1, Ordering::SeqCst);
    }

    /// The RESPOND rule: the turn's final reply is dropped when the
    /// `message` tool already answered this chat and nothing was injected
    /// into the turn after that send (a later message from the user deserves
    /// its own answer).
    pub fn reply_suppressed(&self) -> bool {
        let sent_at = self.sent_at.load(Ordering::SeqCst);
        sent_at != 0 && sent_at == self.pending.drained() + 1
    }
}

/// Running turns by session key. Shared (behind an `Arc`) by the loop and
/// the privileged interfaces, which mark a turn when a plugin sends to its
/// chat.
#[derive(Default)]
pub struct ActiveTurns {
    turns: Mutex<HashMap<String, Arc<ActiveTurn>>>,
}

impl ActiveTurns {
    /// Registers a turn for `key`.
    pub fn insert(&self, key: &str, turn: Arc<ActiveTurn>) {
        self.turns.lock().expect("active lock").insert(key.to_string(), turn);
    }

    /// Unregisters `key`'s turn if it is still `turn`.
    pub fn remove(&self, key: &str, turn: &Arc<ActiveTurn>) {
        let mut turns = self.turns.lock().expect("active lock");
        if turns.get(key).is_some_and(|t| Arc::ptr_eq(t, turn)) {
            turns.remove(key);
        }
    }

    /// The running turn of `key`.
    pub fn get(&self, key: &str) -> Option<Arc<ActiveTurn>> {
        self.turns.lock().expect("active lock").get(key).cloned()
    }

    /// Number of running turns.
    pub fn count(&self) -> usize {
        self.turns.lock().expect("active lock").len()
    }
}
