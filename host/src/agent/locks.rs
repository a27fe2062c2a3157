//! [`KeyedLocks`]: one async mutex per session key, shared by the agent loop
//! and the gateway's API, forgotten when nobody holds or waits for it.
//!
//! Before, the loop kept a map that only grew (one entry per session ever
//! seen) and the API kept a second, pruned one: two locks for one session.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// Locks by key. Shared behind an `Arc`.
#[derive(Default)]
pub struct KeyedLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A held lock; dropping it releases the key and prunes the entry when no
/// one else holds or waits for it.
pub struct KeyGuard {
    owner: Arc<KeyedLocks>,
    key: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl KeyedLocks {
    /// No locks yet.
    pub fn new() -> Arc<Self> {
        Arc::new(KeyedLocks::default())
    }

    fn entry(&self, key: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.locks.lock().expect("keyed locks").entry(key.to_string()).or_default().clone()
    }

    /// Waits for `key`'s lock.
    pub async fn lock(self: &Arc<Self>, key: &str) -> KeyGuard {
        let guard = self.entry(key).lock_owned().await;
        KeyGuard { owner: self.clone(), key: key.to_string(), guard: Some(guard) }
    }

    /// `key`'s lock if it is free now.
    pub fn try_lock(self: &Arc<Self>, key: &str) -> Option<KeyGuard> {
        match self.entry(key).try_lock_owned() {
            Ok(guard) => Some(KeyGuard { owner: self.clone(), key: key.to_string(), guard: Some(guard) }),
            // The failed attempt's `Arc` is gone: prune if nobody holds it.
            Err(_) => {
                self.prune(key);
                None
            }
        }
    }

    /// Keys with an entry (held, or waited for).
    pub fn len(&self) -> usize {
        self.locks.lock().expect("keyed locks").len()
    }

    /// True when no key is held or waited for.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn prune(&self, key: &str) {
        let mut locks = self.locks.lock().expect("keyed locks");
        // Only the map holds it: nobody holds the lock or waits for it
        // (a waiter holds a clone of the `Arc`).
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
}
