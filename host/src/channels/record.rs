//! The committed record of one channel, `<data>/channels/<name>.json`, and
//! its lock, `<data>/channels/<name>.lock`.
//!
//! Everything that must survive a crash together is in one file written
//! atomically (temp file, `fsync`, rename, `fsync` of the directory): the
//! component's opaque state, the event ids already taken (the dedup set) and
//! the inbox of messages accepted but not yet handed to the agent. One file
//! means one rename decides: either a step's new state, its seen ids and its
//! inbox entries are all on disk, or none of them is.
//!
//! The lock is `flock(LOCK_EX | LOCK_NB)` on the lock file, which holds the
//! owner's pid: the kernel drops the lock when the process dies (even by
//! `kill -9`), so a stale file never blocks a restart, and a second gateway
//! on the same bot account is told who holds it.

use std::collections::{HashSet, VecDeque};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use base64::Engine;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use super::ChannelSetupError;
use crate::bus::InboundMessage;

/// Most event ids kept for dedup.
pub const SEEN_MAX: usize = 10_000;
/// How long an event id is kept for dedup.
pub const SEEN_TTL_HOURS: i64 = 24;

/// An event id taken, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Seen {
    pub id: String,
    pub at: DateTime<Utc>,
}

/// What is committed for a channel.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ChannelRecord {
    /// The component's state, base64.
    #[serde(with = "b64")]
    pub state: Vec<u8>,
    /// Event ids taken, oldest first.
    #[serde(default)]
    pub seen: VecDeque<Seen>,
    /// Accepted messages not yet handed to the agent.
    #[serde(default)]
    pub inbox: Vec<InboundMessage>,
    /// The last status line (`running`, `stopped: …`), for `chitin status`.
    #[serde(default)]
    pub status: String,
    #[serde(skip)]
    index: HashSet<String>,
}

mod b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

impl ChannelRecord {
    /// The record at `path`; a missing file is a fresh channel.
    pub fn load(path: &Path) -> Result<ChannelRecord, ChannelSetupError> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(ChannelRecord::default()),
            Err(source) => return Err(ChannelSetupError::Io { what: "reading the channel record", path: path.to_path_buf(), source }),
        };
        let mut record: ChannelRecord = serde_json::from_slice(&bytes)
            .map_err(|e| ChannelSetupError::Corrupt { path: path.to_path_buf(), message: e.to_string() })?;
        record.index = record.seen.iter().map(|s| s.id.clone()).collect();
        Ok(record)
    }

    /// Writes the record atomically: temp file, `fsync`, rename, `fsync`
    /// of the directory.
    pub fn save(&self, path: &Path) -> Result<(), ChannelSetupError> {
        let bytes = serde_json::to_vec(self).expect("a record serialises");
        crate::fsutil::write_atomic(path, &bytes).map_err(|(what, source)| ChannelSetupError::Io { what, path: path.to_path_buf(), source })
    }

    /// Whether `id` was taken already.
    pub fn is_seen(&self, id: &str) -> bool {
        self.index.contains(id)
    }

    /// Takes `id` at `now` and forgets ids past [`SEEN_MAX`] or older than
    /// [`SEEN_TTL_HOURS`].
    pub fn mark_seen(&mut self, id: &str, now: DateTime<Utc>) {
        if self.index.insert(id.to_string()) {
            self.seen.push_back(Seen { id: id.to_string(), at: now });
        }
        let cutoff = now - Duration::hours(SEEN_TTL_HOURS);
        while self.seen.front().is_some_and(|s| self.seen.len() > SEEN_MAX || s.at < cutoff) {
            let old = self.seen.pop_front().expect("front exists");
            self.index.remove(&old.id);
        }
    }

    /// The state as base64 (for logs: its length and a prefix only).
    pub fn state_b64(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.state)
    }
}

/// The lock of one bot account; released when dropped or the process dies.
#[derive(Debug)]
pub struct ChannelLock {
    _file: File,
    path: PathBuf,
}

impl ChannelLock {
    /// Takes `path`'s lock and writes our pid into it.
    pub fn acquire(path: &Path) -> Result<ChannelLock, ChannelSetupError> {
        let io = |what, source| ChannelSetupError::Io { what, path: path.to_path_buf(), source };
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io("opening the channel lock", e))?;
        // SAFETY: flock(2) on a descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                return Err(ChannelSetupError::AlreadyRunning { pid: pid.trim().to_string(), path: path.to_path_buf() });
            }
            return Err(io("locking the channel", error));
        }
        file.set_len(0).map_err(|e| io("clearing the channel lock", e))?;
        file.rewind().map_err(|e| io("rewinding the channel lock", e))?;
        write!(file, "{}", std::process::id()).map_err(|e| io("writing the pid into the channel lock", e))?;
        Ok(ChannelLock { _file: file, path: path.to_path_buf() })
    }

    /// Who holds `path`'s lock, if anyone (for `chitin status`): the pid
    /// written in it when a live process holds the lock.
    pub fn holder(path: &Path) -> Option<String> {
        match ChannelLock::acquire(path) {
            Err(ChannelSetupError::AlreadyRunning { pid, .. }) => Some(pid),
            _ => None,
        }
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_round_trips_and_keeps_its_dedup_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let mut record = ChannelRecord::load(&path).unwrap();
        assert!(record.state.is_empty() && record.inbox.is_empty());
        record.state = vec![0, 159, 255, b'7'];
        record.mark_seen("upd-1", Utc::now());
        record.inbox.push(InboundMessage::new("c", "u", "1", "hi"));
        record.save(&path).unwrap();
        let back = ChannelRecord::load(&path).unwrap();
        assert_eq!(back.state, vec![0, 159, 255, b'7']);
        assert!(back.is_seen("upd-1") && !back.is_seen("upd-2"));
        assert_eq!(back.inbox[0].content, "hi");
        assert!(!dir.path().join("c.tmp").exists(), "the temp file was renamed");
        std::fs::write(&path, "{not json").unwrap();
        assert!(matches!(ChannelRecord::load(&path), Err(ChannelSetupError::Corrupt { .. })));
    }

    #[test]
    fn the_seen_set_is_bounded_by_count_and_age() {
        let mut record = ChannelRecord::default();
        let now = Utc::now();
        record.mark_seen("old", now - Duration::hours(25));
        record.mark_seen("new", now);
        assert!(!record.is_seen("old"), "older than 24 h is forgotten");
        for i in 0..SEEN_MAX + 5 {
            record.mark_seen(&format!("e{i}"), now);
        }
        assert_eq!(record.seen.len(), SEEN_MAX);
        assert!(!record.is_seen("e0") && record.is_seen(&format!("e{}", SEEN_MAX + 4)));
    }

    #[test]
    fn a_second_holder_is_told_the_pid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.lock");
        let first = ChannelLock::acquire(&path).unwrap();
        // flock locks belong to the open file description: a second open in
        // this process conflicts as a second process would.
        match ChannelLock::acquire(&path) {
            Err(ChannelSetupError::AlreadyRunning { pid, .. }) => assert_eq!(pid, std::process::id().to_string()),
            other => panic!("expected AlreadyRunning, got {other:?}"),
        }
        assert_eq!(ChannelLock::holder(&path), Some(std::process::id().to_string()));
        drop(first);
        assert!(ChannelLock::acquire(&path).is_ok(), "released on drop");
    }
}
