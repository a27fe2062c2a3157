//! The process cap for a host running as root: a `pids` cgroup.
//!
//! RLIMIT_NPROC ([`super::limits`]) does not bind uid 0 (the kernel exempts
//! the root user whatever the namespace), so a root host's sandbox could
//! fork without end until its PID namespace died. As root the host can make
//! cgroups, and a `pids` cgroup counts every task of the sandbox, whatever
//! its uid. So when the host is root, each sandboxed command is started in a
//! fresh `chitin/<pid>-<n>` cgroup under the `pids` hierarchy (cgroup v1's
//! `/sys/fs/cgroup/pids`, or a cgroup v2 mount with the `pids` controller)
//! with `pids.max` set to the process limit; the child moves itself into it
//! before it runs bubblewrap, so everything it starts is counted.
//!
//! A cgroup can only be removed once empty; each new one first removes
//! the empty ones left by earlier commands. Where no `pids` hierarchy is
//! writable, the command runs as before and one warning says so.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};


static NEXT: AtomicU64 = AtomicU64::new(0);
static WARNED: std::sync::Once = std::sync::Once::new();

/// A cgroup for one command, made by the child itself between fork and
/// exec (so it is never empty before its process is in it, and a sweep by
/// another command cannot take it away first).
pub(super) struct PidsCgroup {
    dir: CString,
    pids_max: CString,
    procs: CString,
    max: Vec<u8>,
}

impl PidsCgroup {
    /// A cgroup to be capped at `max` tasks, when the host is root and a
    /// `pids` hierarchy is writable; `None` otherwise.
    pub(super) fn create(max: u64) -> Option<PidsCgroup> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return None;
        }
        match pids_hierarchies().iter().find_map(|root| Self::prepare_in(root, max).ok()) {
            Some(cgroup) => Some(cgroup),
            None => {
                WARNED.call_once(|| tracing::warn!("the host runs as root and no pids cgroup is writable: a sandboxed command's processes are bounded only by its PID namespace"));
                None
            }
        }
    }

    /// Makes `chitin/` under `root` (with `pids` handed down on cgroup v2),
    /// removes the empty cgroups of earlier commands, and names a new one.
    fn prepare_in(root: &Path, max: u64) -> std::io::Result<PidsCgroup> {
        let parent = root.join("chitin");
        std::fs::create_dir_all(&parent)?;
        if parent.join("cgroup.subtree_control").exists() {
            std::fs::write(parent.join("cgroup.subtree_control"), "+pids")?;
        }
        sweep(&parent);
        let dir = parent.join(format!("{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
        let c = |path: PathBuf| CString::new(path.into_os_string().into_encoded_bytes()).map_err(std::io::Error::other);
        Ok(PidsCgroup { pids_max: c(dir.join("pids.max"))?, procs: c(dir.join("cgroup.procs"))?, dir: c(dir)?, max: max.to_string().into_bytes() })
    }

    /// Makes the cgroup, caps it and moves the calling process into it. Runs
    /// in the child between fork and exec, so it only calls
    /// async-signal-safe functions and allocates nothing. A failure fails
    /// the spawn: the command never runs uncapped.
    pub(super) fn join_from_child(&self) -> std::io::Result<()> {
        // Another command's sweep may remove the fresh, empty cgroup in
        // the instant before this process is in it: make it again.
        let mut tries = 0;
        loop {
            tries += 1;
            // SAFETY: a NUL-terminated path; mkdir is async-signal-safe.
            if unsafe { libc::mkdir(self.dir.as_ptr(), 0o755) } != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EEXIST) {
                return Err(std::io::Error::last_os_error());
            }
            match write_file(&self.pids_max, &self.max).and_then(|()| write_file(&self.procs, b"0")) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && tries < 5 => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// open + write + close, async-signal-safe.
fn write_file(path: &CString, bytes: &[u8]) -> std::io::Result<()> {
    // SAFETY: a NUL-terminated path and a live buffer; open, write and
    // close are async-signal-safe.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let error = std::io::Error::last_os_error();
        libc::close(fd);
        if written != bytes.len() as isize {
            return Err(error);
        }
    }
    Ok(())
}

/// The mount points of hierarchies with the `pids` controller: cgroup v1
/// mounts with `pids` among their options, then cgroup v2 mounts that offer
/// it (`cgroup.controllers`).
fn pids_hierarchies() -> Vec<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut v1 = Vec::new();
    let mut v2 = Vec::new();
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, point, kind, options, ..] = fields[..] else { continue };
        let point = PathBuf::from(point);
        match kind {
            "cgroup" if options.split(',').any(|o| o == "pids") => v1.push(point),
            "cgroup2" if std::fs::read_to_string(point.join("cgroup.controllers")).unwrap_or_default().split_whitespace().any(|c| c == "pids") => v2.push(point),
            _ => {}
        }
    }
    v1.extend(v2);
    v1
}

/// Removes the empty cgroups earlier commands left (`rmdir` fails on one
/// with processes, which is what keeps a live one).
fn sweep(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    for entry in entries.flatten() {
        let path: PathBuf = entry.path();
        if path.is_dir() {
            let _ = std::fs::remove_dir(&path);
        }
    }
}
