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
//! That file is a snapshot plus a journal, `<data>/channels/<name>.journal`,
//! so a step does not rewrite the whole dedup set (up to [`SEEN_MAX`] ids):
//! a save appends one line (the state, the status, the inbox and only the
//! event ids taken since the last save) and `fsync`s it; the line is the
//! commit, a torn last line (a crash mid-write) is ignored on load and cut
//! off before the next append. Once the journal is longer than the snapshot
//! (and at least [`COMPACT_MIN_BYTES`]), the next save writes a new snapshot
//! atomically instead, stamped with the journal sequence it includes, and
//! empties the journal: a crash between the two replays nothing twice. So
//! the bytes written per step stay proportional to what the step changed,
//! amortised. An event id is kept as itself up to [`SEEN_ID_MAX_BYTES`],
//! else as its BLAKE3 hash, so a component's 4 KiB ids cannot make the set
//! 40 MB.
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
/// Longest event id kept as itself; a longer one is kept as its hash.
pub const SEEN_ID_MAX_BYTES: usize = 64;
/// The journal is never compacted below this size.
pub const COMPACT_MIN_BYTES: u64 = 256 * 1024;

/// The key an event id is kept under (itself, or `b3:` and its hash).
fn seen_key(id: &str) -> String {
    if id.len() <= SEEN_ID_MAX_BYTES && !id.starts_with("b3:") {
        id.to_string()
    } else {
        format!("b3:{}", &blake3::hash(id.as_bytes()).to_hex()[..32])
    }
}

/// The journal beside the snapshot at `path`.
pub fn journal_path(path: &Path) -> PathBuf {
    path.with_extension("journal")
}

/// One journal line: what a save changed.
#[derive(Serialize, Deserialize)]
struct Entry {
    seq: u64,
    #[serde(with = "b64")]
    state: Vec<u8>,
    #[serde(default)]
    status: String,
    #[serde(default)]
    inbox: Vec<InboundMessage>,
    #[serde(default)]
    seen: Vec<Seen>,
}

/// An event id taken, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Seen {
    /// The platform's event id.
    pub id: String,
    /// When it was taken.
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
    /// The last journal entry this snapshot includes.
    #[serde(default)]
    seq: u64,
    #[serde(skip)]
    index: HashSet<String>,
    /// Ids taken since the last save: the next journal line's.
    #[serde(skip)]
    fresh: Vec<Seen>,
    /// Journal bytes since the last snapshot.
    #[serde(skip)]
    journal_bytes: u64,
    /// The snapshot's size when last written or read.
    #[serde(skip)]
    snapshot_bytes: u64,
    /// Where the journal's last whole line ends, to cut a torn one off
    /// before the first append (never done by a reader such as `status`).
    #[serde(skip)]
    cut_at: Option<u64>,
}

mod b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

impl ChannelRecord {
    /// The record at `path` (its snapshot, then its journal replayed); a
    /// missing file is a fresh channel.
    pub fn load(path: &Path) -> Result<ChannelRecord, ChannelSetupError> {
        let corrupt = |path: &Path, message: String| ChannelSetupError::Corrupt { path: path.to_path_buf(), message };
        let mut record = match std::fs::read(path) {
            Ok(bytes) => {
                let mut record: ChannelRecord = serde_json::from_slice(&bytes).map_err(|e| corrupt(path, e.to_string()))?;
                record.snapshot_bytes = bytes.len() as u64;
                record
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ChannelRecord::default(),
            Err(source) => return Err(ChannelSetupError::Io { what: "reading the channel record", path: path.to_path_buf(), source }),
        };
        let seen = std::mem::take(&mut record.seen);
        for s in seen {
            // Kept keys: a hash is kept as is (a raw id starting with `b3:`
            // is always hashed, so this is one); a long raw id of an older
            // record becomes its key.
            let id = if s.id.starts_with("b3:") { s.id } else { seen_key(&s.id) };
            record.take(Seen { id, at: s.at });
        }
        let journal = journal_path(path);
        let bytes = match std::fs::read(&journal) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => return Err(ChannelSetupError::Io { what: "reading the channel journal", path: journal, source }),
        };
        let mut whole = 0usize;
        while let Some(end) = bytes[whole..].iter().position(|b| *b == b'\n').map(|i| whole + i) {
            let line = &bytes[whole..end];
            match serde_json::from_slice::<Entry>(line) {
                Ok(entry) => record.apply(entry),
                // A torn write leaves only the last line short; a bad line
                // with whole lines after it is damage, not a crash.
                Err(_) if bytes[end + 1..].iter().all(|b| *b != b'\n') => break,
                Err(e) => return Err(corrupt(&journal, format!("line at byte {whole}: {e}"))),
            }
            whole = end + 1;
        }
        record.journal_bytes = whole as u64;
        record.cut_at = (whole < bytes.len()).then_some(whole as u64);
        Ok(record)
    }

    /// Replays one journal line (skipped if the snapshot has it).
    fn apply(&mut self, entry: Entry) {
        if entry.seq <= self.seq {
            return;
        }
        self.seq = entry.seq;
        self.state = entry.state;
        self.status = entry.status;
        self.inbox = entry.inbox;
        for s in entry.seen {
            self.take(s);
        }
    }

    /// Commits the record: one journal line appended and `fsync`ed, or,
    /// once the journal outgrew the snapshot, a new snapshot written
    /// atomically and the journal emptied.
    pub fn save(&mut self, path: &Path) -> Result<(), ChannelSetupError> {
        let journal = journal_path(path);
        let io = |what: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| ChannelSetupError::Io { what, path, source }
        };
        let entry = Entry { seq: self.seq + 1, state: self.state.clone(), status: self.status.clone(), inbox: self.inbox.clone(), seen: std::mem::take(&mut self.fresh) };
        let mut line = serde_json::to_vec(&entry).expect("a journal entry serialises");
        line.push(b'\n');
        if self.journal_bytes + line.len() as u64 > COMPACT_MIN_BYTES.max(self.snapshot_bytes) {
            self.seq += 1;
            let bytes = serde_json::to_vec(&*self).expect("a record serialises");
            crate::fsutil::write_atomic(path, &bytes).map_err(|(what, source)| ChannelSetupError::Io { what, path: path.to_path_buf(), source })?;
            self.snapshot_bytes = bytes.len() as u64;
            // The snapshot holds every line: an old line left by a crash
            // here is skipped by its sequence number.
            match std::fs::OpenOptions::new().write(true).open(&journal) {
                Ok(file) => {
                    file.set_len(0).map_err(io("emptying the channel journal", &journal))?;
                    file.sync_all().map_err(io("syncing the channel journal", &journal))?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io("opening the channel journal", &journal)(e)),
            }
            self.journal_bytes = 0;
            self.cut_at = None;
            return Ok(());
        }
        let created = !journal.exists();
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&journal).map_err(io("opening the channel journal", &journal))?;
        if let Some(len) = self.cut_at.take() {
            file.set_len(len).map_err(io("cutting a torn line off the channel journal", &journal))?;
        }
        file.write_all(&line).map_err(io("appending to the channel journal", &journal))?;
        file.sync_data().map_err(io("syncing the channel journal", &journal))?;
        if created {
            let dir = path.parent().unwrap_or(Path::new("."));
            File::open(dir).and_then(|d| d.sync_all()).map_err(io("syncing the channels directory", dir))?;
        }
        self.journal_bytes += line.len() as u64;
        self.seq += 1;
        Ok(())
    }

    /// Whether `id` was taken already.
    pub fn is_seen(&self, id: &str) -> bool {
        self.index.contains(&seen_key(id))
    }

    /// Takes `id` at `now` and forgets ids past [`SEEN_MAX`] or older than
    /// [`SEEN_TTL_HOURS`].
    pub fn mark_seen(&mut self, id: &str, now: DateTime<Utc>) {
        let seen = Seen { id: seen_key(id), at: now };
        if !self.index.contains(&seen.id) {
            self.fresh.push(seen.clone());
        }
        self.take(seen);
    }

    /// Adds a kept id, then forgets the ones past the bounds.
    fn take(&mut self, seen: Seen) {
        let now = seen.at;
        if self.index.insert(seen.id.clone()) {
            self.seen.push_back(seen);
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
    fn a_save_appends_what_changed_and_a_torn_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let mut record = ChannelRecord::load(&path).unwrap();
        let now = Utc::now();
        // A full dedup set of long ids (the attack: 4 KiB ids, 40 MB a step).
        for i in 0..SEEN_MAX {
            record.mark_seen(&format!("{i}-{}", "x".repeat(4000)), now);
        }
        record.save(&path).unwrap();
        let snapshot = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(snapshot < 1 << 20, "long ids are kept as hashes: {snapshot} bytes");
        let journal = journal_path(&path);
        let mut written = 0u64;
        for step in 0..50 {
            let before = std::fs::metadata(&journal).map(|m| m.len()).unwrap_or(0) + std::fs::metadata(&path).unwrap().len();
            record.state = format!("offset-{step}").into_bytes();
            for i in 0..60 {
                record.mark_seen(&format!("s{step}-{i}"), now);
            }
            record.save(&path).unwrap();
            let after = std::fs::metadata(&journal).map(|m| m.len()).unwrap_or(0) + std::fs::metadata(&path).unwrap().len();
            written += after.abs_diff(before).max(1);
        }
        assert!(written < 50 * 8 * 1024, "a step writes what it changed: {written} bytes over 50 steps");
        let back = ChannelRecord::load(&path).unwrap();
        assert_eq!(back.state, b"offset-49");
        assert!(back.is_seen("s49-59") && back.is_seen("s0-0") && back.is_seen(&format!("{}-{}", SEEN_MAX - 1, "x".repeat(4000))));
        // A crash mid-append: the torn line is ignored, then cut off.
        let whole = std::fs::metadata(&journal).unwrap().len();
        std::fs::OpenOptions::new().append(true).open(&journal).unwrap().write_all(br#"{"seq":999,"state":"#).unwrap();
        let mut back = ChannelRecord::load(&path).unwrap();
        assert_eq!(back.state, b"offset-49", "the torn line is not a commit");
        back.state = b"next".to_vec();
        back.save(&path).unwrap();
        assert!(std::fs::metadata(&journal).unwrap().len() > whole);
        assert_eq!(ChannelRecord::load(&path).unwrap().state, b"next");
        // Damage before the last line is an error, not silently skipped.
        let mut text = std::fs::read(&journal).unwrap();
        text.splice(0..0, b"garbage\n".iter().copied());
        std::fs::write(&journal, text).unwrap();
        assert!(matches!(ChannelRecord::load(&path), Err(ChannelSetupError::Corrupt { .. })));
    }

    #[test]
    fn compaction_keeps_everything_and_replays_nothing_twice() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.json");
        let mut record = ChannelRecord::default();
        let now = Utc::now();
        let mut compactions = 0;
        for step in 0..400 {
            record.inbox = vec![InboundMessage::new("c", "u", "1", &format!("m{step}"))];
            record.state = vec![b'z'; 4000];
            record.mark_seen(&format!("e{step}"), now);
            let seq = record.seq;
            record.save(&path).unwrap();
            assert_eq!(record.seq, seq + 1);
            if record.journal_bytes == 0 {
                compactions += 1;
            }
        }
        assert!(compactions >= 2, "the journal was compacted ({compactions})");
        // A crash after a snapshot but before the journal was emptied: the
        // old lines are skipped by their sequence numbers.
        let journal = journal_path(&path);
        let old_lines = std::fs::read(&journal).unwrap();
        record.journal_bytes = u64::MAX / 2;
        record.save(&path).unwrap();
        std::fs::write(&journal, &old_lines).unwrap();
        let back = ChannelRecord::load(&path).unwrap();
        assert_eq!(back.inbox.len(), 1);
        assert_eq!(back.inbox[0].content, "m399");
        assert!(back.is_seen("e0") && back.is_seen("e399"));
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
