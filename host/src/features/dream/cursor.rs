//! Where Dream stopped reading the archive: the cursor, checked against the
//! bytes before it, and the next batch of entries after it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{Dream, MAX_BATCH_BYTES, MAX_ENTRY_CHARS};
use crate::agent::context::HISTORY_FILE;

/// Bytes before the cursor whose hash is kept with it.
pub(super) const CHECK_BYTES: u64 = 256;


/// Where Dream stopped reading the archive.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// Bytes of `memory/history.jsonl` already processed.
    pub offset: u64,
    /// blake3 (hex) of the `check_len` bytes before `offset`.
    pub check: String,
    /// How many bytes before `offset` `check` covers.
    pub check_len: u64,
}


/// One batch of the archive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Batch {
    /// `[timestamp] content` per entry, content cut to [`MAX_ENTRY_CHARS`].
    pub(super) entries: Vec<String>,
    /// The cursor after the batch.
    pub(super) next: Cursor,
    /// The cursor was stale (the file was rewritten): read from the start.
    pub(super) restarted: bool,
}

impl Dream {
    /// The entries after `cursor`, at most `max_entries` of them.
    pub(super) fn read_batch(&self, cursor: &Cursor) -> Result<Batch, crate::workspace::WorkspaceError> {
        let check_len = cursor.check_len.min(cursor.offset);
        let start = cursor.offset - check_len;
        let Some((bytes, len)) = self.workspace.read_from(Path::new(HISTORY_FILE), start, MAX_BATCH_BYTES)? else {
            let restarted = cursor.offset > 0;
            return Ok(Batch { entries: Vec::new(), next: Cursor::default(), restarted });
        };
        let valid = len >= cursor.offset && bytes.len() as u64 >= check_len && hash(&bytes[..check_len as usize]) == cursor.check;
        if !valid && cursor.offset > 0 {
            let mut batch = self.read_batch(&Cursor::default())?;
            batch.restarted = true;
            return Ok(batch);
        }
        let body = &bytes[check_len as usize..];
        let mut entries = Vec::new();
        let mut consumed = 0usize;
        let max = self.settings.max_entries.max(1);
        while entries.len() < max {
            let Some(end) = body[consumed..].iter().position(|&b| b == b'\n') else { break };
            let line = String::from_utf8_lossy(&body[consumed..consumed + end]).into_owned();
            consumed += end + 1;
            if let Ok(entry) = serde_json::from_str::<crate::compact::HistoryEntry>(line.trim()) {
                let content: String = entry.content.chars().take(MAX_ENTRY_CHARS).collect();
                entries.push(format!("[{}] {content}", entry.timestamp.format("%Y-%m-%d %H:%M")));
            }
        }
        if consumed == 0 && entries.is_empty() && body.len() >= MAX_BATCH_BYTES {
            // One line longer than a whole batch: step over the chunk (the
            // rest of that line then fails to parse and is skipped too).
            consumed = body.len();
        }
        let offset = cursor.offset + consumed as u64;
        let upto = check_len as usize + consumed;
        let next_len = CHECK_BYTES.min(offset) as usize;
        let next = Cursor { offset, check: hash(&bytes[upto - next_len..upto]), check_len: next_len as u64 };
        Ok(Batch { entries, next, restarted: false })
    }

}

pub(super) fn hash(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}
