//! The signed static index: `index.json` and its detached minisign
//! signature `index.json.minisig`, and the rollback/freeze checks.
//!
//! An index is accepted only if one of the keys pinned for it in the config
//! verifies its signature, its signed comment names the same index name and
//! version as the document, it has not expired, and its `version` is not
//! lower than the last one this host accepted from that index (persisted in
//! `<data>/market/<index>.json`). The same version with other content is
//! refused too: an index raises its version on every change.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::sign;
use super::MarketError;
use crate::plugins::manifest::Capabilities;

/// The index format this host reads.
pub const SCHEMA: u32 = 1;

/// `[[plugin_index]]` in config.toml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexSource {
    /// What the user calls it (`--index NAME`); also the `name` the index
    /// document and its signature must carry.
    pub name: String,
    /// Where `index.json` is: `https://…/index.json`, `file:///…/index.json`
    /// (plain `http://` only on a loopback address).
    pub url: String,
    /// The pinned index signing keys (minisign public keys, `RW…`).
    #[serde(default)]
    pub keys: Vec<String>,
    /// Seconds one fetch (index or artifact) may take.
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
}

fn default_timeout() -> u64 {
    60
}

/// `[publishers.<name>]` in config.toml.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublisherConfig {
    /// The publisher's pinned signing keys; an artifact signed by any of them
    /// is accepted (several keys: rotation).
    #[serde(default)]
    pub keys: Vec<String>,
}

/// `index.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Index {
    /// [`SCHEMA`].
    pub schema: u32,
    /// The index's name (what its signature names).
    pub name: String,
    /// Raised on every change; never lower than a version a client saw.
    pub version: u64,
    /// After this the index is refused until re-signed.
    pub expires: DateTime<Utc>,
    /// Publishers' keys as the index operator knows them: offered to the
    /// user by `--trust-publisher`, never trusted without it.
    #[serde(default)]
    pub publishers: BTreeMap<String, PublisherConfig>,
    /// The plugins, by name.
    #[serde(default)]
    pub plugins: BTreeMap<String, IndexPlugin>,
}

/// One plugin of an index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexPlugin {
    /// A key of `[publishers]` (the user's, not the index's).
    pub publisher: String,
    /// One line for `search`.
    #[serde(default)]
    pub description: String,
    /// Every published version.
    #[serde(default)]
    pub versions: Vec<IndexVersion>,
}

/// One published version of a plugin.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexVersion {
    /// Semver.
    pub version: String,
    /// The world it exports (`chitin:plugin/tool@0.2.0`).
    pub world: String,
    /// Where and what the component is.
    pub artifact: Artifact,
    /// The publisher's minisign signature over the component, whose signed
    /// comment is [`sign::artifact_comment`].
    pub signature: String,
    /// What its manifest asks for (shown by `search`; the installed
    /// component's own manifest is what is reviewed and approved).
    #[serde(default)]
    pub capabilities: Capabilities,
    /// Its import families (`wasi:http`, ...), for `search`.
    #[serde(default)]
    pub imports: Vec<String>,
    /// Withdrawn by its publisher: never installed.
    #[serde(default)]
    pub yanked: bool,
}

/// The artifact of a version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    /// Absolute, or relative to the index's URL.
    pub url: String,
    /// Hex SHA-256 of the component.
    pub sha256: String,
    /// Bytes.
    pub size: u64,
}

/// The last index version accepted, per index.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Seen {
    version: u64,
    sha256: String,
}

/// Where the last-seen versions are kept.
pub fn state_dir(data_root: &Path) -> PathBuf {
    data_root.join("market")
}

fn seen_file(state: &Path, index: &str) -> PathBuf {
    // Index names are config keys the user wrote; keep the file name tame.
    let safe: String = index.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    state.join(format!("{safe}.json"))
}

/// Checks `bytes` (the fetched `index.json`) and `signature` against
/// `source` and the persisted last-seen version, then records this version
/// as seen. `now` is injected so expiry is testable.
pub fn accept(source: &IndexSource, state: &Path, bytes: &[u8], signature: &str, now: DateTime<Utc>) -> Result<Index, MarketError> {
    let name = source.name.clone();
    let keys = || source.keys.iter().map(|k| sign::key_id(k).unwrap_or_else(|| format!("(not a key: {k})"))).collect::<Vec<_>>().join(", ");
    if source.keys.is_empty() {
        return Err(MarketError::IndexSignature { index: name, keys: "none".into(), message: "no key is pinned for it (add `keys = [\"RW…\"]` to its [[plugin_index]] table)".into() });
    }
    let verified = sign::verify(&source.keys, bytes, signature).map_err(|e| MarketError::IndexSignature { index: name.clone(), keys: keys(), message: e.to_string() })?;
    let index: Index = serde_json::from_slice(bytes).map_err(|e| MarketError::IndexFormat { index: name.clone(), message: e.to_string() })?;
    if index.schema != SCHEMA {
        return Err(MarketError::IndexFormat { index: name, message: format!("schema {} (this host reads schema {SCHEMA})", index.schema) });
    }
    // The comment is covered by the signature: it binds the signature to
    // this index's name and version, so an index signed for another name
    // (same operator key) is not accepted here.
    let expected = sign::index_comment(&index.name, index.version);
    if verified.trusted_comment != expected || index.name != source.name {
        return Err(MarketError::IndexFormat {
            index: name,
            message: format!("its signature signs `{}`, the document is `{expected}` and the config calls it `{}`", verified.trusted_comment, source.name),
        });
    }
    if index.expires <= now {
        return Err(MarketError::Expired { index: name, expires: index.expires.to_rfc3339() });
    }
    let digest = super::sha256_hex(bytes);
    let file = seen_file(state, &source.name);
    match std::fs::read(&file) {
        Ok(text) => {
            let seen: Seen = serde_json::from_slice(&text).map_err(|e| MarketError::Lock { path: file.clone(), message: format!("cannot read the last-seen index version ({e}); delete the file only if you trust the index") })?;
            if index.version < seen.version {
                return Err(MarketError::Rollback { index: name, seen: seen.version, got: index.version });
            }
            if index.version == seen.version && digest != seen.sha256 {
                return Err(MarketError::Replay { index: name, version: index.version });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => return Err(MarketError::Io { path: file, source }),
    }
    std::fs::create_dir_all(state).map_err(MarketError::io(state))?;
    let seen = serde_json::to_vec(&Seen { version: index.version, sha256: digest }).expect("serializable");
    crate::fsutil::write_atomic(&file, &seen).map_err(|(step, source)| MarketError::Lock { path: file.clone(), message: format!("{step}: {source}") })?;
    Ok(index)
}

impl Index {
    /// The newest version of `name` that `req` accepts and is not yanked; a
    /// requirement that only yanked versions meet says so.
    pub fn pick(&self, name: &str, req: &semver::VersionReq) -> Result<(&IndexPlugin, &IndexVersion), MarketError> {
        let plugin = self.plugins.get(name).ok_or_else(|| MarketError::NotFound { name: name.into(), searched: format!("the index `{}`", self.name) })?;
        let mut matching: Vec<(semver::Version, &IndexVersion)> =
            plugin.versions.iter().filter_map(|v| semver::Version::parse(&v.version).ok().map(|sv| (sv, v))).filter(|(sv, _)| req.matches(sv)).collect();
        matching.sort_by(|a, b| a.0.cmp(&b.0));
        if let Some((_, v)) = matching.iter().rev().find(|(_, v)| !v.yanked) {
            return Ok((plugin, v));
        }
        if let Some((_, v)) = matching.last() {
            return Err(MarketError::Yanked { name: name.into(), version: v.version.clone() });
        }
        let available: Vec<&str> = plugin.versions.iter().filter(|v| !v.yanked).map(|v| v.version.as_str()).collect();
        Err(MarketError::NoMatchingVersion { name: name.into(), req: req.to_string(), available: if available.is_empty() { "none".into() } else { available.join(", ") } })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(key: &Path, index: &Index) -> (Vec<u8>, String) {
        let bytes = serde_json::to_vec(index).unwrap();
        let sig = sign::sign(key, "", &bytes, &sign::index_comment(&index.name, index.version)).unwrap();
        (bytes, sig)
    }

    #[test]
    fn rollback_replay_expiry_and_wrong_keys_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (public, secret) = sign::generate("").unwrap();
        let (other, _) = sign::generate("").unwrap();
        let key = dir.path().join("i.key");
        std::fs::write(&key, secret).unwrap();
        let source = IndexSource { name: "main".into(), url: "file:///x".into(), keys: vec![public], timeout_secs: 5 };
        let now = Utc::now();
        let mut index = Index { schema: 1, name: "main".into(), version: 5, expires: now + chrono::Duration::days(1), publishers: BTreeMap::new(), plugins: BTreeMap::new() };
        let state = dir.path().join("state");
        let (b5, s5) = signed(&key, &index);
        accept(&source, &state, &b5, &s5, now).unwrap();
        accept(&source, &state, &b5, &s5, now).unwrap();
        index.version = 4;
        let (b4, s4) = signed(&key, &index);
        assert!(matches!(accept(&source, &state, &b4, &s4, now), Err(MarketError::Rollback { seen: 5, got: 4, .. })));
        index.version = 5;
        index.plugins.insert("x".into(), IndexPlugin { publisher: "p".into(), description: String::new(), versions: vec![] });
        let (b5b, s5b) = signed(&key, &index);
        assert!(matches!(accept(&source, &state, &b5b, &s5b, now), Err(MarketError::Replay { .. })));
        index.version = 6;
        let (b6, s6) = signed(&key, &index);
        assert!(matches!(accept(&source, &state, &b6, &s6, now + chrono::Duration::days(2)), Err(MarketError::Expired { .. })));
        let wrong = IndexSource { keys: vec![other], ..source.clone() };
        assert!(matches!(accept(&wrong, &state, &b6, &s6, now), Err(MarketError::IndexSignature { .. })));
        let mut flipped = b6.clone();
        flipped[10] ^= 1;
        assert!(matches!(accept(&source, &state, &flipped, &s6, now), Err(MarketError::IndexSignature { .. })));
        accept(&source, &state, &b6, &s6, now).unwrap();
    }
}
