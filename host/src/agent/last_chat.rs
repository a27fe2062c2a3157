//! The chat a person last wrote from (nanobot's "last active chat"): the
//! loop records it for every message from a person, in memory and in
//! `<data>/heartbeat/last_chat.json` (written atomically when it changes),
//! so the heartbeat (`crate::features::heartbeat`) knows where to answer,
//! also after a restart before anyone writes again.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Bytes of a channel name or chat id kept as the last chat; a longer one
/// (no real chat has one) is not remembered.
const MAX_CHAT_FIELD: usize = 256;

/// `<data>/heartbeat/last_chat.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LastChatRecord {
    channel: String,
    chat_id: String,
}

/// The chat a person last wrote from, in memory and in the data dir.
pub struct LastChat {
    file: PathBuf,
    current: Mutex<Option<(String, String)>>,
}

impl LastChat {
    /// The record under data dir `data_root`, loaded now; a missing file is
    /// no chat yet, an unreadable or malformed one is logged and ignored.
    pub fn open(data_root: &Path) -> Self {
        let file = data_root.join("heartbeat").join("last_chat.json");
        let current = match std::fs::read(&file) {
            Ok(bytes) => match serde_json::from_slice::<LastChatRecord>(&bytes) {
                Ok(r) if valid(&r.channel) && valid(&r.chat_id) => Some((r.channel, r.chat_id)),
                Ok(_) => {
                    tracing::warn!(file = %file.display(), "heartbeat: the last chat record holds an empty or oversized field; ignored");
                    None
                }
                Err(e) => {
                    tracing::warn!(file = %file.display(), "heartbeat: the last chat record is malformed, ignored: {e}");
                    None
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(file = %file.display(), "heartbeat: cannot read the last chat record: {e}");
                None
            }
        };
        LastChat { file, current: Mutex::new(current) }
    }

    /// The record's file.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The last chat, as (channel, chat id).
    pub fn get(&self) -> Option<(String, String)> {
        self.current.lock().expect("last chat").clone()
    }

    /// Remembers `channel:chat_id`; writes the file only when it changed
    /// (a busy chat costs no write per message). A failed write is logged:
    /// the memory copy still serves this process.
    pub fn set(&self, channel: &str, chat_id: &str) {
        if !valid(channel) || !valid(chat_id) {
            return;
        }
        {
            let mut current = self.current.lock().expect("last chat");
            if current.as_ref().is_some_and(|(c, t)| c == channel && t == chat_id) {
                return;
            }
            *current = Some((channel.to_string(), chat_id.to_string()));
        }
        let file = &self.file;
        let record = LastChatRecord { channel: channel.to_string(), chat_id: chat_id.to_string() };
        let bytes = serde_json::to_vec(&record).expect("a record serialises");
        let written = file
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .map_err(|e| ("creating the directory", e))
            .and_then(|()| crate::fsutil::write_atomic(file, &bytes));
        if let Err((step, e)) = written {
            tracing::warn!(file = %file.display(), "heartbeat: last chat not saved ({step}): {e}");
        }
    }
}

fn valid(field: &str) -> bool {
    !field.is_empty() && field.len() <= MAX_CHAT_FIELD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_chat_survives_a_reopen_and_bad_records_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let last = LastChat::open(dir.path());
        assert_eq!(last.get(), None);
        last.set("telegram", "42");
        assert_eq!(LastChat::open(dir.path()).get(), Some(("telegram".into(), "42".into())));
        last.set("", "x");
        last.set("web", &"x".repeat(MAX_CHAT_FIELD + 1));
        assert_eq!(LastChat::open(dir.path()).get(), Some(("telegram".into(), "42".into())), "invalid fields are not kept");
        let file = last.file().to_path_buf();
        std::fs::write(&file, "{oops").unwrap();
        assert_eq!(LastChat::open(dir.path()).get(), None, "malformed: ignored");
        std::fs::write(&file, r#"{"channel":"","chat_id":"1"}"#).unwrap();
        assert_eq!(LastChat::open(dir.path()).get(), None, "empty channel: ignored");
    }
}
