//! The OS sandbox for native processes the host starts for someone it does
//! not trust: an MCP server over stdio (issue 21) and, next, the shell's
//! `exec` (issue 22). On Linux it is bubblewrap (`bwrap`): new user, mount,
//! PID, IPC and UTS namespaces, the workspace bound at its own path, the
//! system read-only, a private `/tmp`, no network unless granted, nothing of
//! the data dir, `~/.chitin`, the config or its secrets.
//!
//! There is no silent fallback: when bubblewrap is missing, [`command`]
//! fails and says what to install; running unsandboxed is the caller's
//! explicit, loudly shown opt-out (`sandbox = "none"`), never decided here.
//!
//! Concerns: [`bwrap`] builds bubblewrap's arguments (the exact list is in
//! the book, security/os-sandbox.md), [`probe`] finds bubblewrap and checks
//! once that it can create namespaces here, [`limits`] the resource limits,
//! [`env`] the sandbox's environment, [`cgroup`] the process cap of a
//! host running as root.

mod bwrap;
mod cgroup;
mod env;
mod limits;
mod probe;

use std::path::PathBuf;

pub use limits::SandboxLimits;

/// The environment variable that names the bubblewrap binary to use instead
/// of `bwrap` on `PATH` (tests point it at a missing file).
pub const BWRAP_ENV: &str = "CHITIN_BWRAP";

/// What a sandboxed process may see and do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// The agent's workspace: bound read-write (read-only when
    /// `workspace_read_only`) at the same path, and the working directory
    /// unless `cwd` names a directory inside it.
    pub workspace: PathBuf,
    /// Bind the workspace read-only.
    pub workspace_read_only: bool,
    /// More directories or files bound read-only at their own paths (an MCP
    /// server's install directory, a venv).
    pub read_only_paths: Vec<PathBuf>,
    /// Share the host's network namespace. `false`: no network at all
    /// (loopback of its own only).
    pub network: bool,
    /// The environment beyond the minimal one (`PATH`, `HOME` = workspace,
    /// `LANG`, `TERM`); nothing of the host's own environment leaks in.
    pub env: Vec<(String, String)>,
    /// Working directory (inside the workspace); default the workspace.
    pub cwd: Option<PathBuf>,
    /// Paths that stay invisible even when a bound directory contains them
    /// (the data dir, `~/.chitin`, the config): each is covered by an empty
    /// read-only directory. A bound path inside one of them (the default
    /// workspace, `<data>/workspace`) is still bound, and then alone: its
    /// parent is not.
    pub hidden_paths: Vec<PathBuf>,
    /// The resource limits of the sandboxed process and its children.
    pub limits: SandboxLimits,
    /// The bubblewrap binary; default [`BWRAP_ENV`], then `bwrap` on `PATH`.
    pub bwrap: Option<PathBuf>,
}

/// Why a sandboxed process cannot be started.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// bubblewrap is not installed (or does not run here).
    #[error("the OS sandbox is unavailable: {0}")]
    Unavailable(String),
    /// The policy names something that cannot be bound.
    #[error("bad sandbox policy: {0}")]
    Policy(String),
}

/// A command that runs `program args` inside the sandbox `policy` describes
/// (stdin, stdout and stderr are the caller's to set). The process is
/// killed when the returned command's child is dropped (`kill_on_drop`), and
/// with the host (`--die-with-parent`).
pub fn command(
    program: &str,
    args: &[String],
    policy: &SandboxPolicy,
) -> Result<tokio::process::Command, SandboxError> {
    if program.is_empty() {
        return Err(SandboxError::Policy("the program to run is empty".into()));
    }
    let bwrap = probe::available(policy.bwrap.as_deref())?;
    let mut argv = bwrap::arguments(policy)?;
    argv.extend(limits::prefix(&policy.limits)?);
    argv.push(program.into());
    argv.extend(args.iter().map(Into::into));
    let mut cmd = tokio::process::Command::new(&bwrap);
    // bwrap's own environment must be empty too: the sandbox's PID 1 is a
    // fork of bwrap, and its /proc/1/environ is readable from inside.
    cmd.env_clear().args(argv).kill_on_drop(true);
    // A root host is exempt from RLIMIT_NPROC: a pids cgroup caps it.
    if let Some(cgroup) = policy.limits.processes.and_then(cgroup::PidsCgroup::create) {
        // SAFETY: the closure only calls async-signal-safe functions (see
        // `join_from_child`) and allocates nothing.
        unsafe {
            cmd.pre_exec(move || cgroup.join_from_child());
        }
    }
    tracing::debug!(bwrap = %bwrap.display(), program, "sandboxed command");
    Ok(cmd)
}
