//! The turns running right now, one per session: where their pending queue
//! is, and how to stop them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
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
}

/// Running turns by session key.
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
