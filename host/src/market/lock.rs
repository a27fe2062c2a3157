//! `chitin.lock`, next to `config.toml`: every plugin installed from an
//! index or URL — version, source, digest, size, world, publisher and key —
//! and the capability snapshot the user approved, which is also the grant
//! source for that plugin (see [`super::snapshot::Snapshot::grant`]).
//! An update waiting for approval is kept under `staged`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::snapshot::Snapshot;
use super::MarketError;

/// The lock format this host writes.
pub const LOCK_VERSION: u32 = 1;

/// The file name, beside `config.toml`.
pub const FILE_NAME: &str = "chitin.lock";

/// The lock path for a config file.
pub fn path_for(config_file: &Path) -> PathBuf {
    config_file.with_file_name(FILE_NAME)
}

/// The whole lock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    /// [`LOCK_VERSION`].
    pub version: u32,
    /// Installed plugins, by name.
    #[serde(default)]
    pub plugins: BTreeMap<String, Locked>,
    /// Updates waiting for approval, by name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub staged: BTreeMap<String, Locked>,
}

impl Default for Lock {
    fn default() -> Self {
        Lock { version: LOCK_VERSION, plugins: BTreeMap::new(), staged: BTreeMap::new() }
    }
}

/// One locked plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Locked {
    /// Its manifest version.
    pub version: String,
    /// `index:<name>` or the URL it came from.
    pub source: String,
    /// The artifact URL it was fetched from.
    pub url: String,
    /// Hex SHA-256 of the component.
    pub sha256: String,
    /// Bytes.
    pub size: u64,
    /// The world it exports.
    pub world: String,
    /// The publisher (a key of `[publishers]`).
    pub publisher: String,
    /// The id of the key that signed it.
    pub key_id: String,
    /// When the user approved it (RFC 3339).
    pub approved_at: String,
    /// What it may touch, as approved.
    pub approved: Snapshot,
    /// Why it is staged (only under `staged`): the escalations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub escalations: Vec<String>,
}

impl Lock {
    /// Reads the lock at `path`; a missing file is an empty lock.
    pub fn load(path: &Path) -> Result<Lock, MarketError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Lock::default()),
            Err(source) => return Err(MarketError::Io { path: path.to_path_buf(), source }),
        };
        let lock: Lock = toml::from_str(&text).map_err(|e| MarketError::Lock { path: path.to_path_buf(), message: format!("not a valid lock file: {e}") })?;
        if lock.version != LOCK_VERSION {
            return Err(MarketError::Lock { path: path.to_path_buf(), message: format!("lock version {} (this host reads {LOCK_VERSION})", lock.version) });
        }
        Ok(lock)
    }

    /// Writes the lock to `path` atomically (a crash leaves the old or the
    /// new lock).
    pub fn save(&self, path: &Path) -> Result<(), MarketError> {
        let body = toml::to_string(self).map_err(|e| MarketError::Lock { path: path.to_path_buf(), message: format!("cannot serialize: {e}") })?;
        let text = format!("# Written by `chitin plugin install/update/approve/remove`: what is installed and what you approved.\n# Do not edit; `chitin plugin verify` checks the installed files against it.\n{body}");
        crate::fsutil::write_atomic(path, text.as_bytes()).map_err(|(step, source)| MarketError::Lock { path: path.to_path_buf(), message: format!("{step}: {source}") })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lock_round_trips_and_a_bad_one_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        assert_eq!(Lock::load(&path).unwrap(), Lock::default());
        let mut lock = Lock::default();
        lock.plugins.insert(
            "hello".into(),
            Locked {
                version: "1.0.0".into(),
                source: "index:main".into(),
                url: "https://x/hello.wasm".into(),
                sha256: "ab".into(),
                size: 3,
                world: "chitin:plugin/tool@0.2.0".into(),
                publisher: "acme".into(),
                key_id: "0011".into(),
                approved_at: "2026-01-01T00:00:00Z".into(),
                approved: Snapshot { world: "chitin:plugin/tool@0.2.0".into(), network: vec!["a.example".into()], ..Snapshot::default() },
                escalations: vec![],
            },
        );
        lock.save(&path).unwrap();
        assert_eq!(Lock::load(&path).unwrap(), lock);
        std::fs::write(&path, "version = 1\n[plugins.x]\nversion = 3\n").unwrap();
        let e = Lock::load(&path).unwrap_err().to_string();
        assert!(e.contains("chitin.lock") && e.contains("not a valid lock file"), "{e}");
    }
}
