//! Session persistence: the `SessionStore` trait and the embedded JSONL store.
//!
//! File format (one file per session, `<sessions dir>/<encoded key>.jsonl`):
//! line 1 is a metadata record `{"_type":"metadata", key, created_at,
//! updated_at, metadata, last_consolidated}`, then one message per line.
//!
//! Why appends: a turn must cost O(new messages) to write, not O(history).
//! A save appends the new messages and a fresh metadata record in one write;
//! on load the last metadata record wins. A whole-file rewrite (temp file +
//! rename, so a crash leaves the old or the new file, never half of one)
//! happens only when the session was cleared or after
//! [`METADATA_RECORDS_BEFORE_REWRITE`] appends, to drop stale records.
//! A crash in the middle of an append leaves at most one partial last line,
//! which the next load skips like any corrupt line.

use std::collections::{HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::message::Message;
use super::session::Session;

/// Appended metadata records tolerated before the file is rewritten compactly.
pub const METADATA_RECORDS_BEFORE_REWRITE: usize = 256;

/// Sessions kept in memory between turns.
const CACHED_SESSIONS: usize = 512;

/// A session could not be read or written.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum SessionError {
    /// File I/O failed.
    #[error("session file {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

/// Where sessions live. A deployment that outgrows one machine implements
/// this over a shared database; the turn logic does not change.
pub trait SessionStore: Send + Sync {
    /// The session for `key`, loaded or new. The caller owns it until it
    /// hands it back with [`SessionStore::release`].
    fn load(&self, key: &str) -> Result<Session, SessionError>;
    /// Persists what changed since the last save.
    fn save(&self, session: &mut Session) -> Result<(), SessionError>;
    /// Returns a session after a turn, so the next turn needs no disk read.
    fn release(&self, session: Session);
    /// A read-only copy of the session for `key` as it stands (a new one
    /// when none is stored), for display (the web chat's history). Unlike
    /// [`SessionStore::load`] it leaves ownership alone: taking the cached
    /// copy and handing it back would race a turn that starts meanwhile and
    /// put a stale session back in its place.
    fn snapshot(&self, key: &str) -> Result<Session, SessionError>;
    /// Keys of all stored sessions.
    fn list(&self) -> Result<Vec<String>, SessionError>;
    /// Flushes files to stable storage (called at shutdown).
    fn sync(&self) -> Result<(), SessionError>;
    /// Persists the end of a turn: the session, and (in a store that holds
    /// the inbox too, SCALE_OUT §9) the inbox row done with its reply in the
    /// same transaction. The JSONL store holds sessions only: a plain save;
    /// `AgentCore::commit_turn` writes the row to the durable inbox after it.
    fn commit_turn(&self, session: &mut Session, _inbox: Option<crate::durable::InboxRef>, _reply: Option<&crate::bus::OutboundMessage>) -> Result<(), SessionError> {
        self.save(session)
    }
}

#[derive(Deserialize)]
struct MetadataRecord {
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    #[serde(default)]
    metadata: Map<String, Value>,
    #[serde(default)]
    last_consolidated: usize,
}

const METADATA: &str = "metadata";

/// The metadata record as written: borrows from the session, so a save does
/// not clone its metadata (which holds the runner's checkpoint mid-turn).
#[derive(Serialize)]
struct MetadataLine<'a> {
    #[serde(rename = "_type")]
    kind: &'static str,
    key: &'a str,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
    metadata: &'a Map<String, Value>,
    last_consolidated: usize,
}

impl<'a> MetadataLine<'a> {
    fn of(session: &'a Session) -> Self {
        MetadataLine {
            kind: METADATA,
            key: &session.key,
            created_at: session.created_at,
            updated_at: session.updated_at,
            metadata: &session.metadata,
            last_consolidated: session.last_consolidated,
        }
    }
}

/// The embedded store: JSONL files in one directory.
pub struct JsonlStore {
    dir: PathBuf,
    state: Mutex<StoreState>,
}

#[derive(Default)]
struct StoreState {
    cache: HashMap<String, Session>,
    /// Metadata records appended per session since its last rewrite.
    appended_records: HashMap<String, usize>,
    /// Sessions written since the last sync. A set of keys: with hundreds
    /// of live sessions, a list of paths scanned on every save showed up in
    /// profiles (path comparison walks components).
    dirty: HashSet<String>,
}

impl JsonlStore {
    /// A store in `dir` (created on first save).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        JsonlStore { dir: dir.into(), state: Mutex::new(StoreState::default()) }
    }

    /// The file of `key`.
    pub fn path_of(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{}.jsonl", encode_key(key)))
    }

    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> SessionError + '_ {
        move |source| SessionError::Io { path: path.to_path_buf(), source }
    }

    fn read(&self, key: &str) -> Result<Session, SessionError> {
        let path = self.path_of(key);
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Session::new(key)),
            Err(e) => return Err(Self::io(&path)(e)),
        };
        let mut session = Session::new(key);
        let mut records = 0;
        for (number, line) in BufReader::new(file).lines().enumerate() {
            let line = line.map_err(Self::io(&path))?;
            if line.trim().is_empty() {
                continue;
            }
            match parse_line(&line) {
                Some(Line::Metadata(m)) => {
                    records += 1;
                    session.created_at = m.created_at;
                    session.updated_at = m.updated_at;
                    session.metadata = m.metadata;
                    session.last_consolidated = m.last_consolidated;
                }
                Some(Line::Message(message)) => session.messages.push(*message),
                None => tracing::warn!(path = %path.display(), line = number + 1, "skipping corrupt session line"),
            }
        }
        session.last_consolidated = session.last_consolidated.min(session.messages.len());
        session.persisted = session.messages.len();
        session.needs_rewrite = false;
        self.state.lock().expect("store lock").appended_records.insert(key.to_string(), records);
        Ok(session)
    }

    fn rewrite(&self, session: &Session, path: &Path) -> Result<(), SessionError> {
        std::fs::create_dir_all(&self.dir).map_err(Self::io(&self.dir))?;
        let mut tmp = tempfile::NamedTempFile::new_in(&self.dir).map_err(Self::io(&self.dir))?;
        let mut out = std::io::BufWriter::new(tmp.as_file_mut());
        write_json_line(&mut out, &MetadataLine::of(session)).map_err(Self::io(path))?;
        for message in &session.messages {
            write_json_line(&mut out, message).map_err(Self::io(path))?;
        }
        out.flush().map_err(Self::io(path))?;
        drop(out);
        tmp.persist(path).map_err(|e| Self::io(path)(e.error))?;
        Ok(())
    }

    fn append(&self, session: &Session, path: &Path) -> Result<(), SessionError> {
        let mut buf = Vec::new();
        for message in &session.messages[session.persisted..] {
            write_json_line(&mut buf, message).map_err(Self::io(path))?;
        }
        write_json_line(&mut buf, &MetadataLine::of(session)).map_err(Self::io(path))?;
        let mut file = OpenOptions::new().read(true).append(true).open(path).map_err(Self::io(path))?;
        if !ends_with_newline(&mut file).map_err(Self::io(path))? {
            // A crash cut the last append short: start on a fresh line so the
            // partial one stays a single skippable corrupt line.
            buf.insert(0, b'\n');
        }
        file.write_all(&buf).map_err(Self::io(path))
    }
}

impl SessionStore for JsonlStore {
    fn load(&self, key: &str) -> Result<Session, SessionError> {
        if let Some(session) = self.state.lock().expect("store lock").cache.remove(key) {
            return Ok(session);
        }
        self.read(key)
    }

    fn save(&self, session: &mut Session) -> Result<(), SessionError> {
        let path = self.path_of(&session.key);
        let records = self.state.lock().expect("store lock").appended_records.get(&session.key).copied().unwrap_or(0);
        let rewrite = session.needs_rewrite || !path.exists() || records >= METADATA_RECORDS_BEFORE_REWRITE;
        if rewrite {
            self.rewrite(session, &path)?;
        } else {
            self.append(session, &path)?;
        }
        let mut state = self.state.lock().expect("store lock");
        *state.appended_records.entry(session.key.clone()).or_default() = if rewrite { 1 } else { records + 1 };
        if !state.dirty.contains(&session.key) {
            state.dirty.insert(session.key.clone());
        }
        session.persisted = session.messages.len();
        session.needs_rewrite = false;
        Ok(())
    }

    fn release(&self, session: Session) {
        let mut state = self.state.lock().expect("store lock");
        if state.cache.len() >= CACHED_SESSIONS {
            if let Some(evict) = state.cache.keys().next().cloned() {
                state.cache.remove(&evict);
            }
        }
        state.cache.insert(session.key.clone(), session);
    }

    fn snapshot(&self, key: &str) -> Result<Session, SessionError> {
        if let Some(session) = self.state.lock().expect("store lock").cache.get(key) {
            return Ok(session.clone());
        }
        // Not cached: on disk, or owned by a running turn, whose saved
        // messages are on disk too.
        self.read(key)
    }

    fn list(&self) -> Result<Vec<String>, SessionError> {
        let entries = match std::fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Self::io(&self.dir)(e)),
        };
        let mut keys: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.strip_suffix(".jsonl").and_then(decode_key))
            .collect();
        keys.sort();
        Ok(keys)
    }

    fn sync(&self) -> Result<(), SessionError> {
        let dirty = std::mem::take(&mut self.state.lock().expect("store lock").dirty);
        for key in dirty {
            let path = self.path_of(&key);
            if let Ok(file) = File::open(&path) {
                file.sync_all().map_err(Self::io(&path))?;
            }
        }
        Ok(())
    }
}

enum Line {
    Metadata(MetadataRecord),
    Message(Box<Message>),
}

fn parse_line(line: &str) -> Option<Line> {
    let value: Value = serde_json::from_str(line).ok()?;
    if value.get("_type").and_then(Value::as_str) == Some(METADATA) {
        serde_json::from_value(value).ok().map(Line::Metadata)
    } else {
        serde_json::from_value(value).ok().map(|m| Line::Message(Box::new(m)))
    }
}

fn write_json_line(out: &mut impl Write, value: &impl Serialize) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, value)?;
    out.write_all(b"\n")
}

fn ends_with_newline(file: &mut File) -> std::io::Result<bool> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(true);
    }
    file.seek(SeekFrom::Start(len - 1))?;
    let mut last = [0u8];
    file.read_exact(&mut last)?;
    Ok(last[0] == b'\n')
}

/// Reversible file-name encoding: `[A-Za-z0-9_.-]` stay, every other byte
/// becomes `%XX`. `telegram:42` → `telegram%3A42`.
pub fn encode_key(key: &str) -> String {
    key.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' => (b as char).to_string(),
            b'.' => ".".to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The inverse of [`encode_key`].
pub fn decode_key(name: &str) -> Option<String> {
    let bytes = name.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        for key in ["telegram:42", "cli:direct", "a/b\\c..", "ünï:✓", "%41"] {
            let encoded = encode_key(key);
            assert!(!encoded.contains(['/', ':', '\\']), "{encoded}");
            assert_eq!(decode_key(&encoded).as_deref(), Some(key));
        }
    }

    #[test]
    fn save_appends_and_load_restores() {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(dir.path());
        let mut s = store.load("cli:1").unwrap();
        s.push(Message::user("one"));
        store.save(&mut s).unwrap();
        let size_after_first = std::fs::metadata(store.path_of("cli:1")).unwrap().len();
        s.push(Message::assistant("two"));
        s.last_consolidated = 1;
        store.save(&mut s).unwrap();
        assert!(std::fs::metadata(store.path_of("cli:1")).unwrap().len() > size_after_first);
        let fresh = JsonlStore::new(dir.path());
        let loaded = fresh.load("cli:1").unwrap();
        assert_eq!(loaded.messages, s.messages);
        assert_eq!(loaded.last_consolidated, 1);
        assert_eq!(fresh.list().unwrap(), ["cli:1"]);
    }

    #[test]
    fn corrupt_lines_are_skipped_and_a_torn_append_is_contained() {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(dir.path());
        let mut s = store.load("k").unwrap();
        s.push(Message::user("kept"));
        store.save(&mut s).unwrap();
        let path = store.path_of("k");
        // A torn write: half a line, no newline.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"role\":\"assis").unwrap();
        drop(f);
        let fresh = JsonlStore::new(dir.path());
        let mut s = fresh.load("k").unwrap();
        assert_eq!(s.messages.len(), 1);
        s.push(Message::assistant("after the crash"));
        fresh.save(&mut s).unwrap();
        let again = JsonlStore::new(dir.path()).load("k").unwrap();
        let texts: Vec<&str> = again.messages.iter().map(Message::text).collect();
        assert_eq!(texts, ["kept", "after the crash"]);
    }

    #[test]
    fn clearing_rewrites_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(dir.path());
        let mut s = store.load("k").unwrap();
        s.push(Message::user("old"));
        store.save(&mut s).unwrap();
        s.clear();
        s.push(Message::user("new"));
        store.save(&mut s).unwrap();
        let loaded = JsonlStore::new(dir.path()).load("k").unwrap();
        assert_eq!(loaded.messages.len(), 1);
        assert_eq!(loaded.messages[0].text(), "new");
    }
}
