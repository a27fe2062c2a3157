//! Resource limits of the sandboxed process: CPU time, address space,
//! processes, open files, file size.
//!
//! They are set by util-linux's `prlimit` *inside* the sandbox, as the
//! first program bubblewrap runs (`prlimit --cpu=N ... -- PROGRAM ARGS`),
//! rather than on bubblewrap itself (a `pre_exec` setrlimit): the process
//! limit (RLIMIT_NPROC) counts the processes of a user *in a user
//! namespace*, so set inside the new namespace it counts the sandbox's own
//! processes only, while set on bubblewrap, before the namespace exists, it
//! would count every process of the host's user and could stop bubblewrap
//! itself from forking. prlimit sets soft and hard limits alike, and with
//! no capabilities left the sandbox cannot raise them again.
//!
//! One caveat, from the kernel: processes of uid 0 are exempt from
//! RLIMIT_NPROC, and a host running as root stays uid 0 (mapped) inside the
//! sandbox; there the process count is bounded by the PID namespace's
//! teardown only (everything dies with the sandbox's first process).

use std::ffi::OsString;
use std::path::Path;

use super::SandboxError;

/// Where prlimit may be; inside the sandbox the same path is visible
/// (/usr is bound).
const PRLIMIT: &[&str] = &["/usr/bin/prlimit", "/bin/prlimit"];

/// The limits; `None` leaves the host's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxLimits {
    /// CPU seconds (RLIMIT_CPU): SIGXCPU then SIGKILL past it.
    pub cpu_seconds: Option<u64>,
    /// Address space in bytes (RLIMIT_AS): allocations past it fail.
    pub address_space_bytes: Option<u64>,
    /// Processes and threads of the sandbox's user (RLIMIT_NPROC).
    pub processes: Option<u64>,
    /// Open file descriptors (RLIMIT_NOFILE).
    pub open_files: Option<u64>,
    /// The largest file the process may write (RLIMIT_FSIZE): SIGXFSZ past it.
    pub file_size_bytes: Option<u64>,
}

impl Default for SandboxLimits {
    /// Generous enough for a language runtime serving MCP all day (node's
    /// V8 reserves gigabytes of address space it never touches), tight
    /// enough that a runaway cannot take the machine.
    fn default() -> Self {
        Self {
            cpu_seconds: Some(3_600),
            address_space_bytes: Some(16 << 30),
            processes: Some(512),
            open_files: Some(1_024),
            file_size_bytes: Some(1 << 30),
        }
    }
}

/// The arguments that run the program under the limits (empty when there
/// are none).
pub(super) fn prefix(limits: &SandboxLimits) -> Result<Vec<OsString>, SandboxError> {
    let pairs = [
        ("--cpu", limits.cpu_seconds),
        ("--as", limits.address_space_bytes),
        ("--nproc", limits.processes),
        ("--nofile", limits.open_files),
        ("--fsize", limits.file_size_bytes),
    ];
    let set: Vec<OsString> = pairs
        .iter()
        .filter_map(|(flag, v)| v.map(|v| format!("{flag}={v}").into()))
        .collect();
    if set.is_empty() {
        return Ok(Vec::new());
    }
    let prlimit = PRLIMIT.iter().map(Path::new).find(|p| p.is_file()).ok_or_else(|| {
        SandboxError::Unavailable("`prlimit` is missing (it sets the sandbox's resource limits): install the Debian package `util-linux`".into())
    })?;
    let mut a = vec![prlimit.as_os_str().to_owned()];
    a.extend(set);
    a.push("--".into());
    Ok(a)
}
