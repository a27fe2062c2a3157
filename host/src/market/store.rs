//! Content-addressed plugin files, `plugins/<name>/<sha256>.wasm`, and
//! loading them at start-up against `chitin.lock`.
//!
//! Only the file the lock names is loaded, and only if its bytes still have
//! the locked digest; a staged update's file sits beside it unused until
//! approved. Anything wrong (no lock, a changed file, another name inside)
//! skips that plugin with a recorded reason: the host still starts.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::lock::{Lock, Locked};
use super::MarketError;
use crate::plugins::catalog::LoadFailure;
use crate::plugins::{GrantConfig, PluginCatalog, PluginError, PluginRuntime, PluginSource};

/// The directory of plugin `name`'s files.
pub fn dir(plugins_dir: &Path, name: &str) -> PathBuf {
    plugins_dir.join(name)
}

/// The file of plugin `name` with digest `sha256`.
pub fn file(plugins_dir: &Path, name: &str, sha256: &str) -> PathBuf {
    dir(plugins_dir, name).join(format!("{sha256}.wasm"))
}

/// Writes `bytes` as plugin `name`'s file with digest `sha256`, through a
/// temporary file (not `*.wasm`) and a rename; returns its path.
pub fn write(plugins_dir: &Path, name: &str, sha256: &str, bytes: &[u8]) -> Result<PathBuf, MarketError> {
    let dir = dir(plugins_dir, name);
    std::fs::create_dir_all(&dir).map_err(MarketError::io(&dir))?;
    let dest = file(plugins_dir, name, sha256);
    let mut temp = tempfile::Builder::new().prefix(".install-").suffix(".tmp").tempfile_in(&dir).map_err(MarketError::io(&dir))?;
    temp.write_all(bytes).map_err(MarketError::io(temp.path()))?;
    temp.as_file().sync_all().map_err(MarketError::io(temp.path()))?;
    temp.persist(&dest).map_err(|e| MarketError::Io { path: dest.clone(), source: e.error })?;
    Ok(dest)
}

/// Removes plugin `name`'s files other than those with a digest in `keep`.
pub fn prune(plugins_dir: &Path, name: &str, keep: &[&str]) -> Result<(), MarketError> {
    let dir = dir(plugins_dir, name);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(MarketError::Io { path: dir, source }),
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
        if path.extension().is_some_and(|e| e == "wasm") && !keep.contains(&stem) {
            std::fs::remove_file(&path).map_err(MarketError::io(&path))?;
        }
    }
    if keep.is_empty() {
        // Only our own files lived here; anything else stays (and keeps
        // the directory).
        let _ = std::fs::remove_dir(&dir);
    }
    Ok(())
}

/// Loads every plugin the lock at `lock_path` names into `catalog`, with
/// the grant `grant_for(name, approved)` gives it. Never fails: each
/// problem is one recorded skip.
pub fn load_locked(
    runtime: &PluginRuntime,
    catalog: &mut PluginCatalog,
    plugins_dir: &Path,
    lock_path: &Path,
    grant_for: impl Fn(&str, &Locked) -> GrantConfig,
) {
    let lock = match Lock::load(lock_path) {
        Ok(lock) => lock,
        Err(e) => {
            catalog.failures.push(LoadFailure {
                path: lock_path.to_path_buf(),
                error: PluginError::Installed { path: lock_path.to_path_buf(), message: format!("{e}; plugins installed from an index are not loaded") },
            });
            return;
        }
    };
    for (name, locked) in &lock.plugins {
        let path = file(plugins_dir, name, &locked.sha256);
        let grant = grant_for(name, locked);
        if !grant.enabled {
            continue;
        }
        let loaded = read_checked(&path, name, locked).and_then(|bytes| runtime.load(PluginSource::File(path.clone()), bytes, &grant));
        catalog.add_installed(path, loaded);
    }
}

/// The bytes of `path` if they are what the lock says `name` is.
pub fn read_checked(path: &Path, name: &str, locked: &Locked) -> Result<Arc<[u8]>, PluginError> {
    let bytes = std::fs::read(path).map_err(|source| PluginError::Io { path: path.to_path_buf(), source })?;
    let digest = super::sha256_hex(&bytes);
    if digest != locked.sha256 {
        return Err(PluginError::Installed {
            path: path.to_path_buf(),
            message: format!("{name} does not match chitin.lock (SHA-256 {digest}, locked {}); it was changed after install: run `chitin plugin verify`, then reinstall it", locked.sha256),
        });
    }
    let manifest = crate::plugins::Manifest::from_component(&bytes).map_err(|source| PluginError::Manifest { plugin: path.display().to_string(), source })?;
    if manifest.name != name {
        return Err(PluginError::Installed { path: path.to_path_buf(), message: format!("its manifest names it `{}`, the lock `{name}`", manifest.name) });
    }
    Ok(bytes.into())
}
