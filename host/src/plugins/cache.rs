//! Compiled components cached on disk.
//!
//! Compiling a component (Cranelift) costs hundreds of milliseconds; loading
//! its serialized form costs a fraction of one. Entries are keyed by the
//! component's content hash *and* the engine's compatibility hash (wasmtime
//! version and engine config), so a new host or a changed config never loads a
//! stale artifact. `Component::deserialize_file` trusts its input, which is
//! why only files this module wrote, in the host's own data dir, are read.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

use super::PluginError;

/// Content hash of a component: the first half of its cache key.
pub type ContentHash = [u8; 32];

/// Hashes component bytes.
pub fn content_hash(bytes: &[u8]) -> ContentHash {
    *blake3::hash(bytes).as_bytes()
}

/// A directory of serialized components.
#[derive(Debug, Clone)]
pub struct ComponentCache {
    dir: Option<PathBuf>,
    engine_key: String,
}

impl ComponentCache {
    /// A cache in `dir`; `None` disables caching (every load compiles).
    pub fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        ComponentCache { dir, engine_key: format!("{:016x}", hasher.finish()) }
    }

    fn entry(&self, hash: &ContentHash) -> Option<PathBuf> {
        let hex: String = hash[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.as_ref().map(|d| d.join(format!("{hex}-{}.cwasm", self.engine_key)))
    }

    /// Loads the compiled form of `bytes`, compiling and storing it on a miss.
    /// `name` is only used in error messages. Returns whether it was a hit.
    pub fn load(&self, engine: &Engine, name: &str, hash: &ContentHash, bytes: &[u8]) -> Result<(Component, bool), PluginError> {
        if let Some(path) = self.entry(hash) {
            if path.exists() {
                // SAFETY: the cache dir is private to this host and entries are
                // written only by `store` below from `Component::serialize`; the
                // engine key makes an incompatible entry unreachable, and a
                // damaged one fails to deserialize cleanly and is replaced.
                match unsafe { Component::deserialize_file(engine, &path) } {
                    Ok(component) => return Ok((component, true)),
                    Err(e) => tracing::warn!(path = %path.display(), "discarding unusable cache entry: {e:#}"),
                }
            }
        }
        let component = Component::new(engine, bytes)
            .map_err(|e| PluginError::Compile { plugin: name.to_string(), message: format!("{e:#}") })?;
        if let Some(path) = self.entry(hash) {
            if let Err(e) = store(&component, &path) {
                tracing::warn!(path = %path.display(), "could not cache compiled plugin: {e}");
            }
        }
        Ok((component, false))
    }
}

/// Writes atomically (temp file + rename) so a concurrent reader never sees
/// half an artifact.
fn store(component: &Component, path: &Path) -> std::io::Result<()> {
    let bytes = component.serialize().map_err(|e| std::io::Error::other(format!("{e:#}")))?;
    let dir = path.parent().expect("cache entries live in a directory");
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut tmp, &bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
