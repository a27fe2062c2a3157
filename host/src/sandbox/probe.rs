//! Finding bubblewrap and checking, once per binary, that it can create the
//! namespaces here (a container or a kernel may forbid unprivileged user
//! namespaces; bubblewrap then fails at every start).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};

use super::{BWRAP_ENV, SandboxError};

const INSTALL: &str = "install the Debian package `bubblewrap` (apt-get install bubblewrap)";

/// The probe's answer per bubblewrap path, so that it runs once.
fn cache() -> &'static Mutex<HashMap<PathBuf, Result<(), String>>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Result<(), String>>>> = OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// The bubblewrap binary to run, checked to work.
pub(super) fn available(configured: Option<&Path>) -> Result<PathBuf, SandboxError> {
    let bwrap = locate(configured)?;
    let mut cache = cache().lock().unwrap_or_else(|e| e.into_inner());
    let answer = cache
        .entry(bwrap.clone())
        .or_insert_with(|| probe(&bwrap))
        .clone();
    drop(cache);
    answer.map(|()| bwrap).map_err(SandboxError::Unavailable)
}

fn locate(configured: Option<&Path>) -> Result<PathBuf, SandboxError> {
    let named = configured.map(Path::to_path_buf).or_else(|| {
        std::env::var_os(BWRAP_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    if let Some(path) = named {
        return if path.is_file() {
            Ok(path)
        } else {
            Err(SandboxError::Unavailable(format!(
                "bubblewrap is not at {} ({BWRAP_ENV}): {INSTALL}",
                path.display()
            )))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("bwrap"))
        .find(|p| is_executable(p))
        .ok_or_else(|| {
            SandboxError::Unavailable(format!("bubblewrap (`bwrap`) is not installed: {INSTALL}"))
        })
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Runs bubblewrap once with the namespaces the sandbox uses.
fn probe(bwrap: &Path) -> Result<(), String> {
    let out = std::process::Command::new(bwrap)
        .env_clear()
        .args([
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-net",
            "--disable-userns",
        ])
        .args([
            "--cap-drop",
            "ALL",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
        ])
        .args(["--setenv", "PATH", "/usr/bin:/bin", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    match out {
        Err(e) => Err(format!(
            "bubblewrap at {} does not run ({e}): {INSTALL}",
            bwrap.display()
        )),
        Ok(out) if out.status.success() => {
            tracing::debug!(bwrap = %bwrap.display(), "bubblewrap works here");
            Ok(())
        }
        Ok(out) => {
            let stderr = String::from_utf8_lossy(&out.stderr);
            Err(format!(
                "bubblewrap at {} cannot create its namespaces here ({}): allow unprivileged user namespaces \
                 (sysctl kernel.unprivileged_userns_clone=1, or the AppArmor restriction \
                 kernel.apparmor_restrict_unprivileged_userns=0), or run bubblewrap 0.8 or later ({INSTALL})",
                bwrap.display(),
                stderr.trim()
            ))
        }
    }
}
