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
//! Streaming the whole artifact through the keyed hash costs about 5 ms per
//! process start for `fs` (6.8 MB), a fifth of a one-shot `chitin agent -m`.
//! So once an entry has been checked in full, a **stamp** is written beside
//! it (in `<cache dir>.stamps/`): a keyed hash over what identifies that file on disk
//! and changes with any write to it (device, inode, size, modification and
//! status-change times) plus the entry's names. A later load whose open file
//! still has exactly that identity trusts the earlier check; any other
//! stamp (missing, forged, for another file or another state of this one)
//! falls back to the full check. The status-change time (ctime) is the
//! anchor: the kernel sets it on every write, truncate or metadata change
//! and user space cannot set it back. Its clock is coarse (a scheduler tick),
//! so a write within the same tick as the one the entry was written in
//! could keep it: a stamp is only written for an entry whose ctime is at
//! least [`STAMP_MIN_AGE`] old, and any later write gets a later ctime.
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

/// How old an entry's ctime must be before a stamp may vouch for it: far
/// above the kernel's timestamp granularity (a tick, at most 10 ms), so a
/// write after the stamp always moves the ctime.
const STAMP_MIN_AGE: std::time::Duration = std::time::Duration::from_secs(1);

/// What a stamp file holds: a keyed hash, nothing else.
const STAMP_LEN: usize = 32;

/// A directory of serialized components.
#[derive(Clone)]
pub struct ComponentCache {
    dir: Option<PathBuf>,
    engine_key: String,
    mac_key: [u8; 32],
    /// Entries checked in full (streamed through the keyed hash), for tests
    /// that tell a stamped load from a full one.
    full_checks: std::sync::Arc<std::sync::atomic::AtomicUsize>,
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
            Some((dir, mac_key)) => ComponentCache { dir: Some(dir), engine_key, mac_key, full_checks: Default::default() },
            None => ComponentCache { dir: None, engine_key, mac_key: [0; 32], full_checks: Default::default() },
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
        let stamp = stamp_path(&path);
        match self.stamped(&file, &stamp, hash).or_else(|_| self.checked_in_full(&file, &stamp, hash)) {
            Ok(true) => {}
            Ok(false) => {
                tracing::warn!(path = %path.display(), "discarding a cache entry this host did not write");
                let _ = std::fs::remove_file(&path);
                let _ = std::fs::remove_file(&stamp);
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
        let Some(path) = self.entry(hash) else { return };
        for path in [stamp_path(&path), path] {
            if let Err(e) = std::fs::remove_file(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(path = %path.display(), "could not remove cache entry: {e}");
            }
        }
    }

    /// The stamp `file` would have if it was checked in full in the state it
    /// is in now: a keyed hash over the entry's names and the open file's
    /// identity and times.
    fn stamp_for(&self, file: &File, hash: &ContentHash) -> std::io::Result<[u8; STAMP_LEN]> {
        use std::os::unix::fs::MetadataExt;
        let m = file.metadata()?;
        let mut hasher = self.mac_hasher(hash);
        hasher.update(b"chitin cache stamp v1");
        for field in [m.dev(), m.ino(), m.size(), m.mtime() as u64, m.mtime_nsec() as u64, m.ctime() as u64, m.ctime_nsec() as u64] {
            hasher.update(&field.to_le_bytes());
        }
        Ok(*hasher.finalize().as_bytes())
    }

    /// Whether a stamp vouches for `file` as it is now (see the module
    /// comment). `Err` when there is no usable stamp: check in full.
    fn stamped(&self, file: &File, stamp: &Path, hash: &ContentHash) -> std::io::Result<bool> {
        let Some(found) = open_entry(stamp)? else { return Err(std::io::ErrorKind::NotFound.into()) };
        let mut bytes = Vec::with_capacity(STAMP_LEN);
        (&found).take(STAMP_LEN as u64 + 1).read_to_end(&mut bytes)?;
        let found = <[u8; STAMP_LEN]>::try_from(bytes.as_slice()).map_err(|_| std::io::Error::other("not a stamp"))?;
        // `blake3::Hash` compares in constant time.
        match blake3::Hash::from(found) == blake3::Hash::from(self.stamp_for(file, hash)?) {
            true => Ok(true),
            false => Err(std::io::Error::other("the stamp is for another file or state")),
        }
    }

    /// The full check of `file`; when it passes and the file is old enough,
    /// a stamp for it is written so the next load can skip the full check.
    /// The identity stamped is read before the check, so a write during or
    /// after it leaves a stamp that no longer fits.
    fn checked_in_full(&self, file: &File, stamp: &Path, hash: &ContentHash) -> std::io::Result<bool> {
        let before = self.stamp_for(file, hash)?;
        let changed = file.metadata()?.modified()?;
        self.full_checks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if !self.authentic(file, hash)? {
            return Ok(false);
        }
        let old_enough = std::time::SystemTime::now().duration_since(status_changed(file)?.max(changed)).is_ok_and(|age| age >= STAMP_MIN_AGE);
        if old_enough && let Err(e) = write_atomically(stamp, &before) {
            tracing::debug!(path = %stamp.display(), "could not stamp a cache entry: {e}");
        }
        Ok(true)
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
        // A stamp names the file it was made for; the new one has none yet.
        match std::fs::remove_file(stamp_path(path)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
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

/// Where the stamp of the entry at `path` lives: `<cache dir>.stamps/`, a
/// directory beside the cache (as its key is), so the cache directory holds
/// entries only.
fn stamp_path(path: &Path) -> PathBuf {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut stamps = dir.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "cache".into());
    stamps.push(".stamps");
    dir.with_file_name(stamps).join(path.file_name().unwrap_or_default())
}

/// The status-change time (ctime) of `file`.
fn status_changed(file: &File) -> std::io::Result<std::time::SystemTime> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata()?;
    let since_epoch = std::time::Duration::new(u64::try_from(m.ctime()).unwrap_or(0), u32::try_from(m.ctime_nsec()).unwrap_or(0));
    Ok(std::time::UNIX_EPOCH + since_epoch)
}

/// Writes `bytes` to `path` by temp file and rename, so a reader never sees
/// half of it.
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
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

    /// The stamp path is a host surface: an attacker who can change cache
    /// files (the threat the keyed hash exists for) now also meets a
    /// shortcut. Both ways to abuse it are refused: changing a stamped entry
    /// in place, and putting another file under a stamp.
    #[test]
    fn a_stamp_spares_the_full_check_only_for_the_very_file_it_was_made_for() {
        use std::os::unix::fs::FileExt;
        use std::sync::atomic::Ordering::Relaxed;
        let engine = engine();
        let tmp = tempfile::tempdir().unwrap();
        let cache = ComponentCache::new(&engine, Some(tmp.path().join("components")));
        let artifact = Component::new(&engine, EMPTY_COMPONENT).unwrap().serialize().unwrap();
        let (a, b) = (content_hash(b"component a"), content_hash(b"component b"));
        cache.store(&a, &artifact);
        cache.store(&b, &artifact);
        let (path_a, path_b) = (cache.entry(&a).unwrap(), cache.entry(&b).unwrap());
        let full = || cache.full_checks.load(Relaxed);

        // Fresh entries are checked in full and not stamped (their ctime is
        // within STAMP_MIN_AGE).
        assert!(cache.lookup(&engine, &a).is_some() && cache.lookup(&engine, &b).is_some());
        assert_eq!(full(), 2);
        assert!(!stamp_path(&path_a).exists());
        // The age is the filesystem's clock, which a test cannot drive.
        std::thread::sleep(STAMP_MIN_AGE + std::time::Duration::from_millis(50));
        assert!(cache.lookup(&engine, &a).is_some() && cache.lookup(&engine, &b).is_some());
        assert_eq!(full(), 4);
        assert!(stamp_path(&path_a).exists() && stamp_path(&path_b).exists(), "old enough: stamped");
        assert!(cache.lookup(&engine, &a).is_some() && cache.lookup(&engine, &b).is_some());
        assert_eq!(full(), 4, "the stamps spared the full checks");
        assert_eq!(stamp_path(&path_a).parent().unwrap(), tmp.path().join("components.stamps"));

        // Attack 1: one byte of a stamped entry changed in place (same file,
        // same size), its modification time put back.
        let before = std::fs::read(&path_a).unwrap();
        let modified = std::fs::metadata(&path_a).unwrap().modified().unwrap();
        let file = std::fs::OpenOptions::new().write(true).open(&path_a).unwrap();
        file.write_all_at(&[before[artifact.len() / 2] ^ 1], (artifact.len() / 2) as u64).unwrap();
        file.set_modified(modified).unwrap();
        drop(file);
        assert_ne!(std::fs::read(&path_a).unwrap(), before, "the attack changed the entry");
        assert_eq!(std::fs::metadata(&path_a).unwrap().modified().unwrap(), modified);
        assert!(cache.lookup(&engine, &a).is_none(), "the changed entry is refused");
        assert_eq!(full(), 5, "its stamp no longer fitted: checked in full");
        assert!(!path_a.exists() && !stamp_path(&path_a).exists(), "entry and stamp discarded");

        // Attack 2: another file (a valid artifact without the host's keyed
        // hash) put in place of a stamped entry; the stamp is left as it was.
        let planted = tmp.path().join("planted");
        std::fs::write(&planted, &artifact).unwrap();
        std::fs::rename(&planted, &path_b).unwrap();
        assert!(stamp_path(&path_b).exists());
        assert!(cache.lookup(&engine, &b).is_none(), "the planted file is refused");
        assert_eq!(full(), 6);
        assert!(!path_b.exists());

        // Attack 3: a stamp copied from another entry, or garbage, for a
        // genuine entry only costs a full check.
        cache.store(&b, &artifact);
        std::fs::write(stamp_path(&path_b), [7u8; STAMP_LEN]).unwrap();
        assert!(cache.lookup(&engine, &b).is_some());
        assert_eq!(full(), 7);
    }
}
