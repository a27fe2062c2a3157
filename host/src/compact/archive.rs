//! [`HistoryArchive`]: `memory/history.jsonl` under the workspace, one JSON
//! object per line, `{cursor, timestamp, session_key, content}`.
//!
//! Append-only and shared by every session of the workspace. Each entry goes
//! out in a single `write` on a file opened with `O_APPEND`, so entries that
//! several sessions archive at the same moment never interleave, and a crash
//! leaves at most one torn last line, which readers skip like any corrupt
//! line. The model reads the file too (the system prompt points at it), so
//! it stays plain JSONL with readable content.
//!
//! BUILD needs only the latest entries of one session, on every turn, and the
//! file only grows: [`HistoryArchive::recent`] therefore reads a bounded tail
//! ([`TAIL_BYTES`]), never the whole file.
//!
//! The file lives in the workspace, which plugins write: it is reached only
//! through [`Workspace`], so a plugin that replaces it with a symlink out or
//! a FIFO gets an error logged, never an append to a file outside.

use std::path::{Path, PathBuf};

use chrono::{DateTime, SubsecRound, Utc};
use serde::{Deserialize, Serialize};

use super::CompactError;
use crate::tokens::estimate_text;
use crate::workspace::Workspace;

/// The archive of consolidated history, relative to the workspace.
pub const HISTORY_FILE: &str = "memory/history.jsonl";

/// [`HistoryArchive::entries`] reads at most this much of the file.
pub const MAX_READ_BYTES: usize = 64 << 20;

/// How much of the end of the file [`HistoryArchive::recent`] reads.
pub const TAIL_BYTES: u64 = 256 * 1024;

/// One archived piece of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryEntry {
    /// The session's `last_consolidated` after this archive step: the entry
    /// covers messages before this index (and after the previous entry's).
    pub cursor: usize,
    /// When it was archived (RFC 3339).
    pub timestamp: DateTime<Utc>,
    /// The session it came from.
    pub session_key: String,
    /// A summary, or a raw transcript when summarising failed.
    pub content: String,
}

impl HistoryEntry {
    /// An entry stamped `at`, to the second (the file is read by people and
    /// models; sub-second precision is noise there).
    pub fn new(session_key: impl Into<String>, cursor: usize, content: impl Into<String>, at: DateTime<Utc>) -> Self {
        HistoryEntry { cursor, timestamp: at.trunc_subsecs(0), session_key: session_key.into(), content: content.into() }
    }
}

/// The archive file of one workspace. Cheap to clone; holds no file
/// handle, so it never keeps the file open between entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryArchive {
    workspace: Workspace,
    path: PathBuf,
}

impl HistoryArchive {
    /// The archive of `workspace`: `<workspace>/memory/history.jsonl`.
    pub fn new(workspace: &Workspace) -> Self {
        HistoryArchive { workspace: workspace.clone(), path: workspace.root().join(HISTORY_FILE) }
    }

    /// The file (for messages and the system prompt).
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn rel() -> &'static Path {
        Path::new(HISTORY_FILE)
    }

    /// Appends one entry (creating the file and its directory).
    pub fn append(&self, entry: &HistoryEntry) -> Result<(), CompactError> {
        let mut line = serde_json::to_vec(entry)?;
        line.push(b'\n');
        // One buffer, one write: with O_APPEND the line lands whole at the
        // end even when another session appends at the same time.
        Ok(self.workspace.append(Self::rel(), &line)?)
    }

    /// The latest entries of `session_key`, oldest first: at most
    /// `max_entries`, and as many of the newest as fit `max_tokens` together
    /// (an entry that does not fit ends the list, so what is returned is
    /// always a contiguous, most recent run). Only the last [`TAIL_BYTES`] of
    /// the file are read; corrupt lines are skipped. A missing file is
    /// simply empty; an unreadable one is logged and treated as empty, since
    /// a turn must not fail over its archive.
    pub fn recent(&self, session_key: &str, max_entries: usize, max_tokens: usize) -> Vec<String> {
        let tail = match self.read_tail(TAIL_BYTES) {
            Ok(tail) => tail,
            Err(e) => {
                tracing::warn!(error = %e, "history archive unreadable; no archived history in the prompt");
                return Vec::new();
            }
        };
        let mut picked = Vec::new();
        let mut used = 0usize;
        for entry in tail.lines().rev().filter_map(parse_line) {
            if picked.len() >= max_entries {
                break;
            }
            if entry.session_key != session_key {
                continue;
            }
            let cost = estimate_text(&entry.content);
            if used + cost > max_tokens {
                break;
            }
            used += cost;
            picked.push(entry.content);
        }
        picked.reverse();
        picked
    }

    /// Every readable entry of the whole file, in file order (for tools,
    /// tests and maintenance; BUILD uses [`HistoryArchive::recent`]).
    pub fn entries(&self) -> Result<Vec<HistoryEntry>, CompactError> {
        match self.workspace.read_capped(Self::rel(), MAX_READ_BYTES)? {
            Some(read) => Ok(String::from_utf8_lossy(&read.bytes).lines().filter_map(parse_line).collect()),
            None => Ok(Vec::new()),
        }
    }

    /// The last `bytes` of the file, starting at a line boundary.
    fn read_tail(&self, bytes: u64) -> Result<String, CompactError> {
        let (mut buf, cut) = self.workspace.read_tail(Self::rel(), bytes)?;
        if cut {
            // The read most likely started inside a line: drop its remainder
            // (a line that starts exactly there is lost too; it is old).
            let skip = buf.iter().position(|&b| b == b'\n').map_or(buf.len(), |i| i + 1);
            buf.drain(..skip);
        }
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
}

fn parse_line(line: &str) -> Option<HistoryEntry> {
    let line = line.trim();
    if line.is_empty() {
        return None;
    }
    serde_json::from_str(line).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, OpenOptions};
    use std::io::Write;

    fn entry(key: &str, cursor: usize, content: &str) -> HistoryEntry {
        HistoryEntry::new(key, cursor, content, Utc::now())
    }

    #[test]
    fn append_creates_the_directory_and_writes_one_line_per_entry() {
        let dir = tempfile::tempdir().unwrap();
        let archive = HistoryArchive::new(&Workspace::open(dir.path()).unwrap());
        archive.append(&entry("a:1", 4, "first\nwith a newline")).unwrap();
        archive.append(&entry("b:1", 2, "other")).unwrap();
        let text = fs::read_to_string(dir.path().join("memory/history.jsonl")).unwrap();
        assert_eq!(text.lines().count(), 2);
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        for key in ["cursor", "timestamp", "session_key", "content"] {
            assert!(first.get(key).is_some(), "missing {key}");
        }
        assert_eq!(archive.entries().unwrap().len(), 2);
    }

    #[test]
    fn recent_filters_by_session_orders_oldest_first_and_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let archive = HistoryArchive::new(&Workspace::open(dir.path()).unwrap());
        assert!(archive.recent("a:1", 10, 1000).is_empty());
        for i in 0..6 {
            archive.append(&entry("a:1", i, &format!("a{i}"))).unwrap();
            archive.append(&entry("b:1", i, &format!("b{i}"))).unwrap();
        }
        assert_eq!(archive.recent("a:1", 3, usize::MAX), ["a3", "a4", "a5"]);
        let two = estimate_text("a4") + estimate_text("a5");
        assert_eq!(archive.recent("a:1", 10, two), ["a4", "a5"]);
        assert!(archive.recent("a:1", 10, 0).is_empty());
        assert!(archive.recent("c:1", 10, usize::MAX).is_empty());
    }

    #[test]
    fn corrupt_and_torn_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let archive = HistoryArchive::new(&Workspace::open(dir.path()).unwrap());
        archive.append(&entry("a:1", 1, "one")).unwrap();
        let mut file = OpenOptions::new().append(true).open(archive.path()).unwrap();
        file.write_all(b"not json\n{\"cursor\": 3, \"trunc").unwrap();
        file.write_all(b"\n").unwrap();
        archive.append(&entry("a:1", 2, "two")).unwrap();
        assert_eq!(archive.recent("a:1", 10, usize::MAX), ["one", "two"]);
        assert_eq!(archive.entries().unwrap().len(), 2);
    }

    #[test]
    fn only_the_tail_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let archive = HistoryArchive::new(&Workspace::open(dir.path()).unwrap());
        // An old entry, then more than TAIL_BYTES of another session.
        archive.append(&entry("a:1", 1, "old")).unwrap();
        let filler = "x".repeat(10_000);
        let mut written = 0;
        while written <= TAIL_BYTES as usize {
            archive.append(&entry("b:1", 1, &filler)).unwrap();
            written += filler.len();
        }
        archive.append(&entry("a:1", 2, "new")).unwrap();
        assert_eq!(archive.recent("a:1", 10, usize::MAX), ["new"]);
        assert!(archive.read_tail(TAIL_BYTES).unwrap().len() as u64 <= TAIL_BYTES);
    }
}
