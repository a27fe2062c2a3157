//! [`KeyedLocks`]: one async mutex per (namespace, session key), shared by
//! the agent loop and the gateway's API, forgotten when nobody holds or
//! waits for it.
//!
//! Before, the loop kept a map that only grew (one entry per session ever
//! seen) and the API kept a second, pruned one: two maps for one session.
//!
//! Two namespaces ([`LockSpace`]), because the two holders nest: the API
//! holds a session for a whole request (so a second request on it waits
//! instead of being injected into the first's turn), and meanwhile the
//! loop takes the same session for the turn. One key for both would
//! deadlock; a namespace in the key (not a string prefix, which a session
//! name could forge) keeps them apart in one map.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// Which holder a lock serialises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockSpace {
    /// A turn (or background work: consolidation, compaction, archives) on
    /// the session: the loop's lock.
    Turn,
    /// An API request on the session, held from its publish to its answer.
    Request,
}

type Key = (LockSpace, String);

/// Locks by key. Shared behind an `Arc`.
#[derive(Default)]
pub struct KeyedLocks {
    locks: Mutex<HashMap<Key, Arc<tokio::sync::Mutex<()>>>>,
}

/// A held lock; dropping it releases the key and prunes the entry when no
/// one else holds or waits for it.
pub struct KeyGuard {
    owner: Arc<KeyedLocks>,
    key: Key,
    guard: Option<OwnedMutexGuard<()>>,
}

/// A claim on an entry while waiting for it: dropped (the waiter gave up,
/// e.g. its HTTP client went away) it prunes the entry too, so a
/// cancelled wait never leaves one behind.
struct Claim {
    owner: Arc<KeyedLocks>,
    key: Key,
    lock: Option<Arc<tokio::sync::Mutex<()>>>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            drop(lock);
            self.owner.prune(&self.key);
        }
    }
}

impl KeyedLocks {
    /// No locks yet.
    pub fn new() -> Arc<Self> {
        Arc::new(KeyedLocks::default())
    }

    fn claim(self: &Arc<Self>, key: Key) -> Claim {
        let lock = self.locks.lock().expect("keyed locks").entry(key.clone()).or_default().clone();
        Claim { owner: self.clone(), key, lock: Some(lock) }
    }

    /// Waits for the turn lock of `key`.
    pub async fn lock(self: &Arc<Self>, key: &str) -> KeyGuard {
        self.lock_in(LockSpace::Turn, key).await
    }

    /// Waits for `key`'s lock in `space`.
    pub async fn lock_in(self: &Arc<Self>, space: LockSpace, key: &str) -> KeyGuard {
        let mut claim = self.claim((space, key.to_string()));
        // Declared after the claim, so a cancelled wait drops this `Arc`
        // first and the claim's drop then sees only the map's.
        let lock = claim.lock.clone().expect("claimed");
        let guard = lock.lock_owned().await;
        // The guard now keeps the entry alive; the claim's own count goes
        // without pruning (the guard's drop prunes).
        claim.lock = None;
        KeyGuard { owner: self.clone(), key: (space, key.to_string()), guard: Some(guard) }
    }

    /// The turn lock of `key` if it is free now.
    pub fn try_lock(self: &Arc<Self>, key: &str) -> Option<KeyGuard> {
        let mut claim = self.claim((LockSpace::Turn, key.to_string()));
        let lock = claim.lock.clone().expect("claimed");
        let guard = lock.try_lock_owned().ok()?;
        claim.lock = None;
        Some(KeyGuard { owner: self.clone(), key: (LockSpace::Turn, key.to_string()), guard: Some(guard) })
    }

    /// Keys with an entry (held, or waited for), over both spaces.
    pub fn len(&self) -> usize {
        self.locks.lock().expect("keyed locks").len()
    }

    /// True when no key is held or waited for.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn prune(&self, key: &Key) {
        let mut locks = self.locks.lock().expect("keyed locks");
        // Only the map holds it: nobody holds the lock or waits for it
        // (a holder and a waiter each hold a clone of the `Arc`).
        if locks.get(key).is_some_and(|lock| Arc::strong_count(lock) == 1) {
            locks.remove(key);
        }
    }
}

impl Drop for KeyGuard {
    fn drop(&mut self) {
        drop(self.guard.take());
        self.owner.prune(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn one_holder_per_key_and_idle_keys_are_pruned() {
        let locks = KeyedLocks::new();
        let a = locks.lock("a").await;
        assert!(locks.try_lock("a").is_none(), "held");
        let b = locks.try_lock("b").expect("another key is free");
        let waiter = {
            let locks = locks.clone();
            tokio::spawn(async move {
                let _g = locks.lock("a").await;
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(locks.len(), 2);
        drop(a);
        waiter.await.unwrap();
        drop(b);
        assert!(locks.is_empty(), "nothing held, nothing kept");
        for i in 0..1000 {
            drop(locks.lock(&format!("s{i}")).await);
        }
        assert!(locks.is_empty(), "the map does not grow with the sessions seen");
    }

    /// The API's request lock and the loop's turn lock on one session nest
    /// without deadlock; a waiter that gives up leaves no entry behind.
    #[tokio::test]
    async fn spaces_nest_and_an_abandoned_wait_is_pruned() {
        let locks = KeyedLocks::new();
        let request = locks.lock_in(LockSpace::Request, "api:s").await;
        let turn = tokio::time::timeout(Duration::from_secs(5), locks.lock("api:s")).await.expect("the turn lock is another key");
        assert_eq!(locks.len(), 2);
        let abandoned = tokio::time::timeout(Duration::from_millis(20), locks.lock_in(LockSpace::Request, "api:s")).await;
        assert!(abandoned.is_err(), "the second request waits");
        let gone = tokio::time::timeout(Duration::from_millis(20), locks.lock_in(LockSpace::Request, "api:other")).await;
        assert!(gone.is_ok());
        drop(gone);
        drop((turn, request));
        assert!(locks.is_empty(), "held, waited for and abandoned keys are all pruned");
    }
}
