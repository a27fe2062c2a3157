//! [`Inbox`]: the append-only log of message states and their replies,
//! `<data>/inbox/inbox.log` (see the module docs of [`crate::durable`]).
//!
//! One JSON object per line, tagged by `t`:
//! - `h` `{next}`: the next id (written by compaction, so ids are never
//!   reused: a session may still name an old one in `answered_inbox`);
//! - `a` `{id, at, dedup?, msg}`: accepted;
//! - `r` `{id}`: a turn started on it (one more attempt);
//! - `d` `{id, also?, reply?, delivered}`: done, with its reply (the
//!   outbox row); `also` are messages injected into the same turn;
//! - `x` `{id}`: its reply was delivered;
//! - `m` `{id, handle}`: its reply is being streamed into the platform
//!   message `handle` (so a resumed turn, or a resent reply, edits that
//!   message instead of sending a second one);
//! - `k` `{dedup, id, at}` and `s` (a whole row): written by compaction.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::bus::{InboundMessage, OutboundMessage};

/// The key a message's inbox id is stored under: in an inbox line's
/// metadata (typed as [`InboundMessage::inbox`] in memory), and on the
/// session's user row of its turn.
pub const INBOX_ID: &str = "_inbox_id";

/// Attempts after which a message is answered with a failure instead of
/// being run again (a *poison* message: one that kills its process).
pub const MAX_ATTEMPTS: u32 = 3;

/// How long the dedup key of a finished message is kept (a channel's
/// re-sent event is recognised that long).
pub const DEDUP_TTL_HOURS: i64 = 24;

/// Dedup keys kept at most (oldest forgotten first).
pub(super) const DEDUP_MAX: usize = 50_000;

/// The log is compacted when it grew past this since the last compaction.
pub const COMPACT_AFTER_BYTES: u64 = 8 << 20;

/// How long a write may wait for its `fdatasync` under [`FsyncPolicy::Batch`].
pub const BATCH_SYNC: Duration = Duration::from_secs(1);

const LOG_FILE: &str = "inbox.log";

/// When the log reaches stable storage (see the module docs of
/// [`crate::durable`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsyncPolicy {
    /// Write-through to the kernel per transition; `fdatasync` within
    /// [`BATCH_SYNC`] and at shutdown.
    #[default]
    Batch,
    /// `fdatasync` before each transition returns.
    Always,
}

/// Which inbox row a turn answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct InboxRef {
    /// The row's id.
    pub id: u64,
}

impl InboxRef {
    /// The row `message` was accepted as, if any.
    pub fn of(message: &InboundMessage) -> Option<InboxRef> {
        message.inbox
    }
}

/// Where a row stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RowState {
    /// Durable, not started.
    Accepted,
    /// A turn started on it (maybe in a process that died).
    Running,
    /// Answered (or given up on); its reply, if any, is in the outbox.
    Done,
}

/// One accepted message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// The row's number in the log.
    pub id: u64,
    /// Where the message stands.
    pub state: RowState,
    /// Turns started on it.
    pub attempts: u32,
    /// When it was accepted.
    pub at: DateTime<Utc>,
    /// The key that recognises a re-sent copy, if the message has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup: Option<String>,
    /// The message itself.
    pub msg: InboundMessage,
    /// The outbox: its reply, once done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<OutboundMessage>,
    /// Whether the reply was delivered.
    #[serde(default)]
    pub delivered: bool,
    /// The platform message its reply streams into, once one was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_handle: Option<String>,
}

/// What [`Inbox::accept`] made of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accepted {
    /// A new row: publish the message.
    New(InboxRef),
    /// Its dedup key is known (a channel's re-sent event, a republished
    /// leftover of a crash): do not publish it again.
    Duplicate(InboxRef),
}

/// The inbox log could not be read or written.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum InboxError {
    /// Reading or writing the log file failed.
    #[error("inbox log {path}: {what}: {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    /// Another process (a gateway, an interactive `chitin agent`) has this
    /// data dir's inbox open.
    #[error("already running (pid {pid}): the inbox {path} is in use by another chitin process (a gateway or an interactive agent on this data dir)")]
    Busy { path: PathBuf, pid: String },
}

#[derive(Deserialize)]
#[serde(tag = "t")]
enum Record {
    #[serde(rename = "h")]
    Head { next: u64 },
    #[serde(rename = "a")]
    Accept {
        id: u64,
        at: DateTime<Utc>,
        #[serde(default)]
        dedup: Option<String>,
        msg: InboundMessage,
    },
    #[serde(rename = "r")]
    Run { id: u64 },
    #[serde(rename = "d")]
    Done {
        id: u64,
        #[serde(default)]
        also: Vec<u64>,
        #[serde(default)]
        reply: Option<OutboundMessage>,
        #[serde(default)]
        delivered: bool,
    },
    #[serde(rename = "x")]
    Delivered { id: u64 },
    #[serde(rename = "m")]
    Stream { id: u64, handle: String },
    #[serde(rename = "o")]
    Handoff { id: u64 },
    #[serde(rename = "k")]
    Key { dedup: String, id: u64, at: DateTime<Utc> },
    #[serde(rename = "s")]
    Snap(Box<Row>),
}

/// The same records, borrowed, for writing without copies.
#[derive(Serialize)]
#[serde(tag = "t")]
enum RecordOut<'a> {
    #[serde(rename = "h")]
    Head { next: u64 },
    #[serde(rename = "a")]
    Accept {
        id: u64,
        at: DateTime<Utc>,
        #[serde(skip_serializing_if = "Option::is_none")]
        dedup: Option<&'a str>,
        msg: &'a InboundMessage,
    },
    #[serde(rename = "r")]
    Run { id: u64 },
    #[serde(rename = "d")]
    Done {
        id: u64,
        #[serde(skip_serializing_if = "<[u64]>::is_empty")]
        also: &'a [u64],
        #[serde(skip_serializing_if = "Option::is_none")]
        reply: Option<&'a OutboundMessage>,
        delivered: bool,
    },
    #[serde(rename = "x")]
    Delivered { id: u64 },
    #[serde(rename = "m")]
    Stream { id: u64, handle: &'a str },
    #[serde(rename = "o")]
    Handoff { id: u64 },
    #[serde(rename = "k")]
    Key { dedup: &'a str, id: u64, at: DateTime<Utc> },
    #[serde(rename = "s")]
    Snap(&'a Row),
}

/// What the background syncer shares with the inbox.
struct Shared {
    file: Mutex<Arc<File>>,
    dirty: AtomicBool,
}

struct State {
    file: Arc<File>,
    /// Bytes appended since the last compaction.
    written: u64,
    /// Rows not done, and done rows whose reply is not delivered.
    rows: BTreeMap<u64, Row>,
    /// Dedup key → (id, accepted at), for open and recent rows.
    dedup: HashMap<String, (u64, DateTime<Utc>)>,
    next: u64,
}

/// The durable inbox and outbox of one data dir. Shared behind an `Arc`.
pub struct Inbox {
    /// `flock`ed for the inbox's life: one writer per log. The kernel drops
    /// it when the process dies, so a crash never blocks the restart.
    _lock: File,
    path: PathBuf,
    policy: FsyncPolicy,
    state: Mutex<State>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox").field("path", &self.path).field("policy", &self.policy).finish()
    }
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> InboxError + 'a {
    move |source| InboxError::Io { what, path: path.to_path_buf(), source }
}

impl Inbox {
    /// The inbox of `dir` (`<data>/inbox`): reads the log, folds it,
    /// compacts it, and opens it for appending.
    pub fn open(dir: &Path, policy: FsyncPolicy) -> Result<Arc<Inbox>, InboxError> {
        std::fs::create_dir_all(dir).map_err(io("creating the inbox directory", dir))?;
        let lock_path = dir.join("inbox.lock");
        let mut lock = OpenOptions::new().create(true).truncate(false).read(true).write(true).open(&lock_path).map_err(io("opening the lock", &lock_path))?;
        // SAFETY: flock(2) on a descriptor we own.
        if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let error = std::io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
                // The holder wrote its pid when it took the lock; only
                // shown, never trusted for anything.
                let pid = std::fs::read_to_string(&lock_path).map(|s| s.trim().chars().take(20).collect::<String>()).unwrap_or_default();
                let pid = if pid.is_empty() { "unknown".to_string() } else { pid };
                return Err(InboxError::Busy { path: dir.to_path_buf(), pid });
            }
            return Err(io("locking", &lock_path)(error));
        }
        // Ours now: say who holds it, for the error a second process shows.
        lock.set_len(0).map_err(io("writing the lock", &lock_path))?;
        lock.write_all(std::process::id().to_string().as_bytes()).map_err(io("writing the lock", &lock_path))?;
        let path = dir.join(LOG_FILE);
        let mut rows = BTreeMap::new();
        let mut dedup = HashMap::new();
        let mut next = 1;
        match File::open(&path) {
            Ok(file) => {
                for (number, line) in BufReader::new(file).split(b'\n').enumerate() {
                    let line = line.map_err(io("reading", &path))?;
                    if line.iter().all(u8::is_ascii_whitespace) {
                        continue;
                    }
                    match serde_json::from_slice::<Record>(&line) {
                        Ok(record) => fold(&mut rows, &mut dedup, &mut next, record),
                        // A torn last line (a crash mid-write) or damage:
                        // that transition did not happen.
                        Err(e) => tracing::warn!(path = %path.display(), line = number + 1, "skipping an unreadable inbox line: {e}"),
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io("opening", &path)(e)),
        }
        let file = Arc::new(compact(&path, &rows, &mut dedup, next, Utc::now())?);
        let shared = Arc::new(Shared { file: Mutex::new(file.clone()), dirty: AtomicBool::new(false) });
        if policy == FsyncPolicy::Batch {
            spawn_syncer(Arc::downgrade(&shared));
        }
        Ok(Arc::new(Inbox { _lock: lock, path, policy, state: Mutex::new(State { file, written: 0, rows, dedup, next }), shared }))
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn append(&self, state: &mut State, record: &RecordOut<'_>) -> Result<(), InboxError> {
        let mut line = serde_json::to_vec(record).expect("inbox records serialise");
        line.push(b'\n');
        // One write on an O_APPEND file: concurrent appends never interleave
        // within a line, and a crash tears at most this last line.
        (&*state.file).write_all(&line).map_err(io("appending", &self.path))?;
        state.written += line.len() as u64;
        match self.policy {
            FsyncPolicy::Always => state.file.sync_data().map_err(io("syncing", &self.path))?,
            FsyncPolicy::Batch => self.shared.dirty.store(true, Ordering::Release),
        }
        if state.written > COMPACT_AFTER_BYTES {
            let file = compact(&self.path, &state.rows, &mut state.dedup, state.next, Utc::now())?;
            state.file = Arc::new(file);
            *self.shared.file.lock().expect("inbox sync lock") = state.file.clone();
            state.written = 0;
        }
        Ok(())
    }

    /// Records `message` as accepted, before it is published, and stamps
    /// its id into it ([`InboundMessage::inbox`]). `dedup` names the message
    /// across re-sends (a channel's event id); a known key is a
    /// [`Accepted::Duplicate`] and nothing is written.
    pub fn accept(&self, message: &mut InboundMessage, dedup: Option<String>) -> Result<Accepted, InboxError> {
        let mut state = self.state.lock().expect("inbox lock");
        if let Some((id, _)) = dedup.as_ref().and_then(|key| state.dedup.get(key)) {
            let inbox = InboxRef { id: *id };
            message.inbox = Some(inbox);
            return Ok(Accepted::Duplicate(inbox));
        }
        let id = state.next;
        let at = Utc::now();
        message.inbox = Some(InboxRef { id });
        self.append(&mut state, &RecordOut::Accept { id, at, dedup: dedup.as_deref(), msg: message })?;
        state.next = id + 1;
        if let Some(key) = &dedup {
            state.dedup.insert(key.clone(), (id, at));
        }
        state.rows.insert(id, Row { id, state: RowState::Accepted, attempts: 0, at, dedup, msg: message.clone(), reply: None, delivered: false, stream_handle: None });
        Ok(Accepted::New(InboxRef { id }))
    }

    /// A turn starts on `inbox`: the row is `running`, one attempt more.
    /// `None` when the row is already done (or unknown): the message was
    /// answered, and must not be run again.
    pub fn start(&self, inbox: InboxRef) -> Result<Option<u32>, InboxError> {
        let mut state = self.state.lock().expect("inbox lock");
        match state.rows.get(&inbox.id) {
            Some(row) if row.state != RowState::Done => {}
            _ => return Ok(None),
        }
        self.append(&mut state, &RecordOut::Run { id: inbox.id })?;
        let row = state.rows.get_mut(&inbox.id).expect("checked above");
        row.state = RowState::Running;
        row.attempts += 1;
        Ok(Some(row.attempts))
    }

    /// Marks `inbox` (and the messages injected into its turn, `also`) done
    /// with `reply` in the outbox, in one line. `delivered`: the reply needs
    /// no delivery mark (its front end reads it from the session, or it has
    /// no reply). False when the row was done already: the caller must not
    /// send `reply` (at most one reply per message).
    pub fn done(&self, inbox: InboxRef, also: &[u64], reply: Option<&OutboundMessage>, delivered: bool) -> Result<bool, InboxError> {
        let mut state = self.state.lock().expect("inbox lock");
        if !state.rows.get(&inbox.id).is_some_and(|row| row.state != RowState::Done) {
            return Ok(false);
        }
        let also: Vec<u64> = also.iter().copied().filter(|id| *id != inbox.id && state.rows.contains_key(id)).collect();
        let delivered = delivered || reply.is_none();
        self.append(&mut state, &RecordOut::Done { id: inbox.id, also: &also, reply, delivered })?;
        for id in also {
            state.rows.remove(&id);
        }
        if delivered {
            state.rows.remove(&inbox.id);
        } else if let Some(row) = state.rows.get_mut(&inbox.id) {
            row.state = RowState::Done;
            row.reply = reply.cloned();
        }
        Ok(true)
    }

    /// The reply of `id` reached its platform.
    pub fn delivered(&self, id: u64) -> Result<(), InboxError> {
        let mut state = self.state.lock().expect("inbox lock");
        if !state.rows.get(&id).is_some_and(|row| row.state == RowState::Done) {
            return Ok(());
        }
        self.append(&mut state, &RecordOut::Delivered { id })?;
        state.rows.remove(&id);
        Ok(())
    }

    /// The reply of `id` streams into the platform message `handle` (a
    /// stream's first update created it). Kept while the row is open or its
    /// reply undelivered; the latest stream wins (a goal's interim answers
    /// stream before the final reply does).
    pub fn stream_started(&self, id: u64, handle: &str) -> Result<(), InboxError> {
        let mut state = self.state.lock().expect("inbox lock");
        if !state.rows.get(&id).is_some_and(|row| row.stream_handle.as_deref() != Some(handle)) {
            return Ok(());
        }
        self.append(&mut state, &RecordOut::Stream { id, handle })?;
        if let Some(row) = state.rows.get_mut(&id) {
            row.stream_handle = Some(handle.to_string());
        }
        Ok(())
    }

    /// The platform message the reply of `id` streams into, if any.
    pub fn stream_handle(&self, id: u64) -> Option<String> {
        self.state.lock().expect("inbox lock").rows.get(&id).and_then(|row| row.stream_handle.clone())
    }

    /// The turn on `inbox` was stopped by a shutdown, not by a crash: the
    /// attempt it started does not count towards [`MAX_ATTEMPTS`].
    pub fn handoff(&self, inbox: InboxRef) -> Result<(), InboxError> {
        let mut state = self.state.lock().expect("inbox lock");
        if !state.rows.get(&inbox.id).is_some_and(|row| row.state == RowState::Running) {
            return Ok(());
        }
        self.append(&mut state, &RecordOut::Handoff { id: inbox.id })?;
        let row = state.rows.get_mut(&inbox.id).expect("checked above");
        row.attempts = row.attempts.saturating_sub(1);
        Ok(())
    }

    /// Whether `id` is accepted or running.
    pub fn is_open(&self, id: u64) -> bool {
        self.state.lock().expect("inbox lock").rows.get(&id).is_some_and(|row| row.state != RowState::Done)
    }

    /// The rows not done, oldest first.
    pub fn open_rows(&self) -> Vec<Row> {
        self.state.lock().expect("inbox lock").rows.values().filter(|row| row.state != RowState::Done).cloned().collect()
    }

    /// The replies recorded and not delivered, oldest first, as (id, reply).
    pub fn undelivered(&self) -> Vec<(u64, OutboundMessage)> {
        let state = self.state.lock().expect("inbox lock");
        state.rows.values().filter(|row| row.state == RowState::Done).filter_map(|row| Some((row.id, row.reply.clone()?))).collect()
    }

    /// Flushes the log to stable storage (shutdown).
    pub fn sync(&self) -> Result<(), InboxError> {
        let file = self.state.lock().expect("inbox lock").file.clone();
        self.shared.dirty.store(false, Ordering::Release);
        file.sync_data().map_err(io("syncing", &self.path))
    }
}

fn fold(rows: &mut BTreeMap<u64, Row>, dedup: &mut HashMap<String, (u64, DateTime<Utc>)>, next: &mut u64, record: Record) {
    match record {
        Record::Head { next: n } => *next = (*next).max(n),
        Record::Accept { id, at, dedup: key, mut msg } => {
            msg.inbox = Some(InboxRef { id });
            if let Some(key) = &key {
                dedup.insert(key.clone(), (id, at));
            }
            rows.insert(id, Row { id, state: RowState::Accepted, attempts: 0, at, dedup: key, msg, reply: None, delivered: false, stream_handle: None });
            *next = (*next).max(id + 1);
        }
        Record::Run { id } => {
            if let Some(row) = rows.get_mut(&id) {
                row.state = RowState::Running;
                row.attempts += 1;
            }
        }
        Record::Done { id, also, reply, delivered } => {
            for id in also {
                rows.remove(&id);
            }
            if delivered || reply.is_none() {
                rows.remove(&id);
            } else if let Some(row) = rows.get_mut(&id) {
                row.state = RowState::Done;
                row.reply = reply;
            }
        }
        Record::Delivered { id } => {
            rows.remove(&id);
        }
        Record::Stream { id, handle } => {
            if let Some(row) = rows.get_mut(&id) {
                row.stream_handle = Some(handle);
            }
        }
        Record::Handoff { id } => {
            if let Some(row) = rows.get_mut(&id) {
                row.attempts = row.attempts.saturating_sub(1);
            }
        }
        Record::Key { dedup: key, id, at } => {
            dedup.insert(key, (id, at));
        }
        Record::Snap(row) => {
            let mut row = *row;
            row.msg.inbox = Some(InboxRef { id: row.id });
            if let Some(key) = &row.dedup {
                dedup.insert(key.clone(), (row.id, row.at));
            }
            *next = (*next).max(row.id + 1);
            rows.insert(row.id, row);
        }
    }
}

/// Rewrites the log with only what is live (the next id, the recent dedup
/// keys, the open and undelivered rows), atomically, and opens it for
/// appending.
fn compact(path: &Path, rows: &BTreeMap<u64, Row>, dedup: &mut HashMap<String, (u64, DateTime<Utc>)>, next: u64, now: DateTime<Utc>) -> Result<File, InboxError> {
    let cutoff = now - chrono::Duration::hours(DEDUP_TTL_HOURS);
    dedup.retain(|_, (id, at)| *at >= cutoff || rows.contains_key(id));
    if dedup.len() > DEDUP_MAX {
        let mut by_age: Vec<(DateTime<Utc>, String)> = dedup.iter().filter(|(_, (id, _))| !rows.contains_key(id)).map(|(k, (_, at))| (*at, k.clone())).collect();
        by_age.sort();
        for (_, key) in by_age.into_iter().take(dedup.len() - DEDUP_MAX) {
            dedup.remove(&key);
        }
    }
    let mut out = Vec::new();
    let mut line = |record: &RecordOut<'_>| {
        serde_json::to_writer(&mut out, record).expect("inbox records serialise");
        out.push(b'\n');
    };
    line(&RecordOut::Head { next });
    for (key, (id, at)) in dedup.iter() {
        if !rows.contains_key(id) {
            line(&RecordOut::Key { dedup: key, id: *id, at: *at });
        }
    }
    for row in rows.values() {
        line(&RecordOut::Snap(row));
    }
    crate::fsutil::write_atomic(path, &out).map_err(|(what, source)| InboxError::Io { what, path: path.to_path_buf(), source })?;
    OpenOptions::new().append(true).open(path).map_err(io("opening for appending", path))
}

/// `fdatasync`s the log at most [`BATCH_SYNC`] after a write, until the
/// inbox is dropped.
fn spawn_syncer(shared: Weak<Shared>) {
    let spawned = std::thread::Builder::new().name("chitin-inbox-sync".into()).spawn(move || {
        loop {
            std::thread::sleep(BATCH_SYNC);
            let Some(shared) = shared.upgrade() else { return };
            if shared.dirty.swap(false, Ordering::AcqRel) {
                let file = shared.file.lock().expect("inbox sync lock").clone();
                if let Err(e) = file.sync_data() {
                    tracing::warn!("syncing the inbox log failed: {e}");
                }
            }
        }
    });
    if let Err(e) = spawned {
        tracing::warn!("no background sync for the inbox log (it is synced at shutdown): {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str) -> InboundMessage {
        InboundMessage::new("telegram", "u", "1", text)
    }

    #[test]
    fn rows_go_accepted_running_done_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = Inbox::open(dir.path(), FsyncPolicy::Always).unwrap();
        let mut a = msg("a");
        let Accepted::New(ra) = inbox.accept(&mut a, Some("ch:telegram:1".into())).unwrap() else { panic!() };
        assert_eq!(InboxRef::of(&a), Some(ra));
        let mut b = msg("b");
        let Accepted::New(rb) = inbox.accept(&mut b, None).unwrap() else { panic!() };
        assert_eq!(inbox.start(ra).unwrap(), Some(1));
        let reply = OutboundMessage::reply("telegram", "1", "answer a");
        assert!(inbox.done(ra, &[], Some(&reply), false).unwrap());
        assert!(!inbox.done(ra, &[], Some(&reply), false).unwrap(), "a second reply is refused");
        assert_eq!(inbox.start(ra).unwrap(), None, "a done row is not run again");
        drop(inbox);

        let inbox = Inbox::open(dir.path(), FsyncPolicy::Always).unwrap();
        let open = inbox.open_rows();
        assert_eq!(open.len(), 1);
        assert_eq!((open[0].id, open[0].msg.content.as_str()), (rb.id, "b"));
        assert_eq!(InboxRef::of(&open[0].msg), Some(rb));
        assert_eq!(inbox.undelivered(), vec![(ra.id, reply.clone())]);
        let mut again = msg("a re-sent");
        assert_eq!(inbox.accept(&mut again, Some("ch:telegram:1".into())).unwrap(), Accepted::Duplicate(ra));
        inbox.delivered(ra.id).unwrap();
        let mut c = msg("c");
        let Accepted::New(rc) = inbox.accept(&mut c, None).unwrap() else { panic!() };
        assert!(rc.id > rb.id, "ids are never reused");
        drop(inbox);

        let inbox = Inbox::open(dir.path(), FsyncPolicy::Batch).unwrap();
        assert!(inbox.undelivered().is_empty(), "a delivered reply is not sent again");
        assert_eq!(inbox.open_rows().iter().map(|r| r.id).collect::<Vec<_>>(), [rb.id, rc.id]);
    }

    #[test]
    fn attempts_count_across_restarts_and_injected_rows_end_with_their_turn() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = msg("poison");
        let mut injected = msg("more");
        let (r, i) = {
            let inbox = Inbox::open(dir.path(), FsyncPolicy::Batch).unwrap();
            let Accepted::New(r) = inbox.accept(&mut m, None).unwrap() else { panic!() };
            let Accepted::New(i) = inbox.accept(&mut injected, None).unwrap() else { panic!() };
            inbox.start(r).unwrap();
            (r, i)
        };
        for expected in 2..=3 {
            let inbox = Inbox::open(dir.path(), FsyncPolicy::Batch).unwrap();
            assert_eq!(inbox.start(r).unwrap(), Some(expected));
        }
        let inbox = Inbox::open(dir.path(), FsyncPolicy::Batch).unwrap();
        assert_eq!(inbox.start(r).unwrap(), Some(4));
        inbox.handoff(r).unwrap();
        drop(inbox);
        let inbox = Inbox::open(dir.path(), FsyncPolicy::Batch).unwrap();
        assert_eq!(inbox.open_rows()[0].attempts, 3, "a shutdown handoff is not a failed attempt");
        assert!(inbox.done(r, &[i.id], None, true).unwrap());
        assert!(!inbox.is_open(i.id));
        drop(inbox);
        assert!(Inbox::open(dir.path(), FsyncPolicy::Batch).unwrap().open_rows().is_empty());
    }

    /// A hostile text cannot forge a transition: whatever it holds is one
    /// JSON string in the accept line; a torn line (a crash mid-write) is
    /// skipped and the rest of the log stands.
    #[test]
    fn a_hostile_text_and_a_torn_line_cannot_forge_or_break_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let forged = "x\"}\n{\"t\":\"d\",\"id\":1,\"delivered\":true}\n";
        let inbox = Inbox::open(dir.path(), FsyncPolicy::Batch).unwrap();
        let mut m = msg(forged);
        let Accepted::New(r) = inbox.accept(&mut m, None).unwrap() else { panic!() };
        let text = std::fs::read_to_string(inbox.path()).unwrap();
        assert!(text.contains("\\\"t\\\":\\\"d\\\""), "the sentinel reached the log, escaped: {text}");
        drop(inbox);
        let mut file = OpenOptions::new().append(true).open(dir.path().join(LOG_FILE)).unwrap();
        file.write_all(b"{\"t\":\"d\",\"id\":1,\"deliv").unwrap();
        drop(file);
        let inbox = Inbox::open(dir.path(), FsyncPolicy::Batch).unwrap();
        let open = inbox.open_rows();
        assert_eq!(open.len(), 1, "neither the forged nor the torn line marked it done");
        assert_eq!((open[0].id, open[0].msg.content.as_str()), (r.id, forged));
    }

    #[test]
    fn one_process_at_a_time() {
        let dir = tempfile::tempdir().unwrap();
        let first = Inbox::open(dir.path(), FsyncPolicy::Batch).unwrap();
        assert!(matches!(Inbox::open(dir.path(), FsyncPolicy::Batch), Err(InboxError::Busy { .. })));
        drop(first);
        assert!(Inbox::open(dir.path(), FsyncPolicy::Batch).is_ok(), "released on drop");
    }

    #[test]
    fn compaction_keeps_only_what_is_live_and_old_dedup_keys_expire() {
        let dir = tempfile::tempdir().unwrap();
        let inbox = Inbox::open(dir.path(), FsyncPolicy::Batch).unwrap();
        for i in 0..200 {
            let mut m = msg(&"x".repeat(1000));
            let Accepted::New(r) = inbox.accept(&mut m, Some(format!("ch:t:{i}"))).unwrap() else { panic!() };
            inbox.start(r).unwrap();
            inbox.done(r, &[], None, true).unwrap();
        }
        let before = std::fs::metadata(inbox.path()).unwrap().len();
        drop(inbox);
        let inbox = Inbox::open(dir.path(), FsyncPolicy::Batch).unwrap();
        let after = std::fs::metadata(inbox.path()).unwrap().len();
        assert!(after * 10 < before, "{before} → {after}");
        let mut m = msg("again");
        assert!(matches!(inbox.accept(&mut m, Some("ch:t:7".into())).unwrap(), Accepted::Duplicate(_)), "recent keys are kept");
        // A key older than the TTL is forgotten at the next compaction.
        let rows: BTreeMap<u64, Row> = BTreeMap::new();
        let mut dedup = HashMap::from([("old".to_string(), (1, Utc::now() - chrono::Duration::hours(DEDUP_TTL_HOURS + 1)))]);
        compact(&dir.path().join("other.log"), &rows, &mut dedup, 2, Utc::now()).unwrap();
        assert!(dedup.is_empty());
    }
}
