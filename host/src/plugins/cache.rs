//! Compiled components cached on disk, and only ever read back when the
//! host itself wrote them.
//!
//! Compiling a component (Cranelift) costs hundreds of milliseconds; loading
//! its serialized form costs a fraction of one. Entries are keyed by the
//! component's content hash *and* the engine's compatibility hash (wasmtime
//! version and engine config), so a new host or a changed config never loads
//! a stale artifact.
//!
//! `Component::deserialize` trusts its input completely: serialized bytes are
//! native code. A cache file written by anyone but this host would run as
//! the plugin it claims to be, with that plugin's grant. So every entry
//! carries a keyed hash (blake3, keyed with 32 random bytes the host keeps in
//! `<cache dir>.key`, beside the directory rather than in it) over the
//! engine key, the component hash and the artifact, in a trailer after the
//! artifact. On load the entry is opened once; the hash is checked by
//! streaming that open file through a small buffer, and only then is *that
//! same open file* (by `/proc/self/fd`, so a rename or a new file at the
//! path between check and load changes nothing) mapped by wasmtime. Mapping
//! instead of copying matters: the artifact of `fs` is 6.8 MB, and a mapped
//! file costs resident memory only for the pages a call touches, where a
//! copy (plus wasmtime's own copy) cost all of it twice. A file that fails
//! the check is discarded and the component compiled again.
//!
//! What the check cannot cover: a process running as the host's own user
//! writing *into* the entry after the check. That process can read the key
//! too (and replace the `chitin` binary); plugins cannot reach the cache
//! directory at all (the workspace may not overlap the data dir).

use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use wasmtime::Engine;
use wasmtime::component::Component;

/// Content hash of a component: the first half of its cache key.
pub type ContentHash = [u8; 32];

/// Hashes component bytes.
pub fn content_hash(bytes: &[u8]) -> ContentHash {
    *blake3::hash(bytes).as_bytes()
}

/// Names the format; the last bytes of every entry but the keyed hash.
const MAGIC: &[u8; 8] = b"chitinc2";

/// Magic + keyed hash, after the artifact. A trailer, not a header: wasmtime
/// maps the file from its first byte as the artifact.
const TRAILER: usize = MAGIC.len() + 32;

/// A directory of serialized components.
#[derive(Clone)]
pub struct ComponentCache {
    dir: Option<PathBuf>,
    engine_key: String,
    mac_key: [u8; 32],
}

impl std::fmt::Debug for ComponentCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ComponentCache").field("dir", &self.dir).field("engine_key", &self.engine_key).finish_non_exhaustive()
    }
}

impl ComponentCache {
    /// A cache in `dir`; `None` disables caching (every load compiles). The
    /// key is read from (or created in) `<dir>.key`; if that fails the cache
    /// is disabled with a warning rather than trusted.
    pub fn new(engine: &Engine, dir: Option<PathBuf>) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_key = format!("{:016x}", hasher.finish());
        let keyed = dir.and_then(|dir| match load_or_create_key(&key_file(&dir)) {
            Ok(key) => Some((dir, key)),
            Err(e) => {
                tracing::warn!(dir = %dir.display(), "compile cache disabled: cannot keep its key: {e}");
                None
            }
        });
        match keyed {
            Some((dir, mac_key)) => ComponentCache { dir: Some(dir), engine_key, mac_key },
            None => ComponentCache { dir: None, engine_key, mac_key: [0; 32] },
        }
    }

    fn entry(&self, hash: &ContentHash) -> Option<PathBuf> {
        let hex: String = hash[..16].iter().map(|b| format!("{b:02x}")).collect();
        self.dir.as_ref().map(|d| d.join(format!("{hex}-{}.cwasm", self.engine_key)))
    }

    /// The keyed hasher, fed with what precedes the artifact.
    fn mac_hasher(&self, hash: &ContentHash) -> blake3::Hasher {
        let mut hasher = blake3::Hasher::new_keyed(&self.mac_key);
        hasher.update(self.engine_key.as_bytes());
        hasher.update(hash);
        hasher
    }

    fn mac(&self, hash: &ContentHash, artifact: &[u8]) -> [u8; 32] {
        *self.mac_hasher(hash).update(artifact).finalize().as_bytes()
    }

    /// The compiled form of `hash` if this host cached it, already loaded.
    /// Anything else found at the entry's path (missing, foreign, damaged,
    /// for another engine, not a regular file) is a miss.
    pub fn lookup(&self, engine: &Engine, hash: &ContentHash) -> Option<Component> {
        let path = self.entry(hash)?;
        let file = match open_entry(&path) {
            Ok(Some(file)) => file,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!(path = %path.display(), "cannot read cache entry: {e}");
                return None;
            }
        };
        match self.authentic(&file, hash) {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(path = %path.display(), "discarding a cache entry this host did not write");
                let _ = std::fs::remove_file(&path);
                return None;
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), "cannot read cache entry: {e}");
                return None;
            }
        }
        // The file just checked, not whatever the path names by now: the
        // open file's own link. wasmtime maps it whole, the trailer too, and
        // reads the artifact from the start (an ELF image ignores bytes after
        // its end).
        let same_file = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        // SAFETY: the file carries a keyed hash only this host can make (the
        // key never leaves the data dir), over this engine's key, this
        // component's hash and these exact bytes: the host serialized them
        // itself from `Component::serialize` with this engine configuration.
        // See the module comment for the one case the check cannot cover.
        match unsafe { Component::deserialize_file(engine, &same_file) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(path = %path.display(), "discarding unusable cache entry: {e:#}");
                None
            }
        }
    }

    /// Deletes the entry of `hash`, if any (`chitin plugin remove --purge`).
    pub fn remove(&self, hash: &ContentHash) {
        if let Some(path) = self.entry(hash)
            && let Err(e) = std::fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), "could not remove cache entry: {e}");
        }
    }

    /// Whether `file` ends in this host's keyed hash over its artifact: read
    /// through a small buffer, so checking costs no memory for the artifact.
    fn authentic(&self, file: &File, hash: &ContentHash) -> std::io::Result<bool> {
        let len = file.metadata()?.len();
        let Some(artifact_len) = len.checked_sub(TRAILER as u64).filter(|n| *n > 0) else {
            return Ok(false);
        };
        let mut reader = std::io::BufReader::with_capacity(64 * 1024, file);
        let mut hasher = self.mac_hasher(hash);
        let hashed = std::io::copy(&mut (&mut reader).take(artifact_len), &mut HashWriter(&mut hasher))?;
        let mut trailer = [0u8; TRAILER];
        if hashed != artifact_len || reader.read_exact(&mut trailer).is_err() {
            return Ok(false);
        }
        let (magic, mac) = trailer.split_at(MAGIC.len());
        let mac = <[u8; 32]>::try_from(mac).expect("32 bytes");
        // `blake3::Hash` compares in constant time.
        Ok(magic == MAGIC && blake3::Hash::from(mac) == hasher.finalize())
    }

    /// Stores `artifact` (the output of `Component::serialize`, or of the
    /// compile child) for `hash`. Failures are logged: a cache that cannot be
    /// written only costs a recompile next time.
    pub fn store(&self, hash: &ContentHash, artifact: &[u8]) {
        let Some(path) = self.entry(hash) else { return };
        if let Err(e) = self.write_entry(&path, hash, artifact) {
            tracing::warn!(path = %path.display(), "could not cache compiled plugin: {e}");
        }
    }

    /// Writes atomically (temp file + rename) so a concurrent reader never
    /// sees half an entry.
    fn write_entry(&self, path: &Path, hash: &ContentHash, artifact: &[u8]) -> std::io::Result<()> {
        let dir = path.parent().expect("cache entries live in a directory");
        std::fs::create_dir_all(dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
        tmp.write_all(artifact)?;
        tmp.write_all(MAGIC)?;
        tmp.write_all(&self.mac(hash, artifact))?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }
}

/// Opens an entry for reading, or `None` when there is none. Non-blocking
/// and checked on the open handle, so a FIFO or device planted at the path
/// cannot hang or feed the load.
fn open_entry(path: &Path) -> std::io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(Some(file))
}

/// Feeds what is written into a hasher (`std::io::copy` wants a writer).
struct HashWriter<'a>(&'a mut blake3::Hasher);

impl Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where the key of the cache in `dir` lives: beside it, not in it.
fn key_file(dir: &Path) -> PathBuf {
    let mut name = dir.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "cache".into());
    name.push(".key");
    dir.with_file_name(name)
}

/// Reads the 32-byte key, or makes one (mode 0600, created exclusively so two
/// processes starting together agree on one key).
fn load_or_create_key(path: &Path) -> std::io::Result<[u8; 32]> {
    if let Ok(bytes) = std::fs::read(path)
        && let Ok(key) = <[u8; 32]>::try_from(bytes.as_slice())
    {
        return Ok(key);
    }
    let mut key = [0u8; 32];
    getrandom::fill(&mut key).map_err(|e| std::io::Error::other(format!("no randomness for the cache key: {e}")))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = tempfile::NamedTempFile::new_in(path.parent().unwrap_or(Path::new(".")))?;
    use std::os::unix::fs::PermissionsExt;
    tmp.as_file().set_permissions(std::fs::Permissions::from_mode(0o600))?;
    tmp.write_all(&key)?;
    match tmp.persist_noclobber(path) {
        Ok(_) => Ok(key),
        // Another process won the race, or a damaged key file is there: a
        // damaged one is replaced (its entries simply stop verifying).
        Err(e) => match std::fs::read(path).ok().and_then(|b| <[u8; 32]>::try_from(b.as_slice()).ok()) {
            Some(theirs) => Ok(theirs),
            None => e.file.persist(path).map(|_| key).map_err(|e| e.error),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        Engine::new(wasmtime::Config::new().wasm_component_model(true)).unwrap()
    }

    /// The smallest component there is.
    const EMPTY_COMPONENT: &[u8] = b"\0asm\x0d\0\x01\0";

    #[test]
    fn only_entries_this_host_wrote_are_loaded() {
        let engine = engine();
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("components");
        let cache = ComponentCache::new(&engine, Some(dir.clone()));
        let hash = content_hash(EMPTY_COMPONENT);
        assert!(cache.lookup(&engine, &hash).is_none());
        let artifact = Component::new(&engine, EMPTY_COMPONENT).unwrap().serialize().unwrap();
        cache.store(&hash, &artifact);
        assert!(cache.lookup(&engine, &hash).is_some(), "the host's own entry loads");
        assert!(tmp.path().join("components.key").exists() && !dir.join("components.key").exists());

        // A plugin-made file at the entry's path: a valid serialized
        // component, but without the host's keyed hash.
        let path = cache.entry(&hash).unwrap();
        let foreign = Component::new(&engine, EMPTY_COMPONENT).unwrap().serialize().unwrap();
        std::fs::write(&path, &foreign).unwrap();
        assert!(cache.lookup(&engine, &hash).is_none());
        assert!(!path.exists(), "the foreign entry is discarded");

        // The same with a forged trailer: right magic, wrong hash.
        let mut forged = foreign.clone();
        forged.extend_from_slice(MAGIC);
        forged.extend_from_slice(&[7u8; 32]);
        std::fs::write(&path, &forged).unwrap();
        assert!(cache.lookup(&engine, &hash).is_none());

        // A cache with another key does not trust this host's entries.
        cache.store(&hash, &foreign);
        std::fs::write(tmp.path().join("components.key"), [9u8; 32]).unwrap();
        let other = ComponentCache::new(&engine, Some(dir));
        assert!(other.lookup(&engine, &hash).is_none());
    }

    #[test]
    fn an_entry_changed_after_it_was_written_or_not_a_file_is_a_miss() {
        let engine = engine();
        let tmp = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(&engine, Some(tmp.path().join("components")));
        let hash = content_hash(EMPTY_COMPONENT);
        let artifact = Component::new(&engine, EMPTY_COMPONENT).unwrap().serialize().unwrap();
        cache.store(&hash, &artifact);
        let path = cache.entry(&hash).unwrap();

        // One byte of the artifact changed: the keyed hash no longer fits.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[artifact.len() / 2] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        assert!(cache.lookup(&engine, &hash).is_none());
        assert!(!path.exists());

        // Cut short: no trailer left to check.
        cache.store(&hash, &artifact);
        std::fs::write(&path, &std::fs::read(&path).unwrap()[..artifact.len()]).unwrap();
        assert!(cache.lookup(&engine, &hash).is_none());

        // A FIFO at the path: refused at once instead of blocking the load.
        let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        assert!(cache.lookup(&engine, &hash).is_none());
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
    }
}
