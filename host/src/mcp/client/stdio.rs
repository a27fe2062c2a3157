//! A stdio MCP server: a native process, in the OS sandbox unless the user
//! set `sandbox = "none"` for it. Its stdout is the protocol (one JSON-RPC
//! message per line, each at most rmcp's 16 MiB line limit); its stderr is
//! logged, bounded; nothing of the host's environment is passed to it
//! beyond what its `env` names.

use std::path::Path;
use std::process::Stdio;

use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::mcp::config::{McpServerConfig, SandboxMode};
use crate::sandbox::SandboxPolicy;

/// Lines of a server's stderr logged as warnings; the rest at debug level.
const STDERR_WARN_LINES: usize = 5;

/// The longest stderr line logged.
const STDERR_LINE_BYTES: usize = 500;

/// Starts `command` for server `name`: the process (killed when dropped:
/// `kill_on_drop`), and its stdout/stdin as the MCP transport.
pub fn spawn(name: &str, command: &str, config: &McpServerConfig, workspace: &Path, hidden: &[std::path::PathBuf]) -> Result<(Child, (ChildStdout, ChildStdin)), String> {
    let mut env = Vec::new();
    for (key, raw) in &config.env {
        let value = crate::env::expand_env(raw, &format!("mcp_servers.{name}.env.{key}")).map_err(|e| e.to_string())?;
        env.push((key.clone(), value));
    }
    let mut cmd = match config.sandbox {
        SandboxMode::Bwrap => {
            let policy = SandboxPolicy {
                workspace: workspace.to_path_buf(),
                workspace_read_only: false,
                read_only_paths: config.read_only_paths.clone(),
                network: config.network,
                env,
                cwd: None,
                // The data dir and the config stay out of sight even when
                // the workspace lies inside the data dir.
                hidden_paths: hidden.to_vec(),
                ..SandboxPolicy::default()
            };
            crate::sandbox::command(command, &config.args, &policy).map_err(|e| {
                format!("{e}; to run this server without the OS sandbox, set `sandbox = \"none\"` under [mcp_servers.{name}] (it then runs with your rights)")
            })?
        }
        SandboxMode::None => {
            let mut cmd = Command::new(command);
            cmd.args(&config.args).env_clear().current_dir(workspace);
            // A program is found on the usual PATH, and a server may need
            // to know where it is: nothing else of the host's environment.
            cmd.env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()));
            cmd.env("HOME", workspace);
            for (key, value) in env {
                cmd.env(key, value);
            }
            cmd
        }
    };
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|e| format!("starting `{command}` failed: {e}"))?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let stdin = child.stdin.take().ok_or("no stdin")?;
    if let Some(stderr) = child.stderr.take() {
        let server = name.to_string();
        tokio::spawn(async move {
            // Read in chunks and keep at most one bounded line: a server
            // that writes a gigabyte without a newline costs no memory.
            use tokio::io::AsyncReadExt;
            let mut stderr = stderr;
            let mut chunk = [0u8; 4096];
            let mut line: Vec<u8> = Vec::new();
            let mut seen = 0usize;
            while let Ok(n) = stderr.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                for &byte in &chunk[..n] {
                    if byte == b'\n' {
                        log_line(&server, &line, seen);
                        seen += 1;
                        line.clear();
                    } else if line.len() < STDERR_LINE_BYTES {
                        line.push(byte);
                    }
                }
            }
            if !line.is_empty() {
                log_line(&server, &line, seen);
            }
        });
    }
    Ok((child, (stdout, stdin)))
}

fn log_line(server: &str, line: &[u8], seen: usize) {
    let line = crate::text::clip_for_terminal(&String::from_utf8_lossy(line), STDERR_LINE_BYTES, "line");
    if seen < STDERR_WARN_LINES {
        tracing::info!(server, "MCP server stderr: {line}");
    } else {
        tracing::debug!(server, "MCP server stderr: {line}");
    }
}
