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

use std::path::PathBuf;

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
/// (stdin, stdout and stderr are the caller's to set).
pub fn command(program: &str, args: &[String], policy: &SandboxPolicy) -> Result<tokio::process::Command, SandboxError> {
    let _ = (program, args, policy);
    Err(SandboxError::Unavailable("not built yet".into()))
}
