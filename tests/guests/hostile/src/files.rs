//! What the plugin can see of the machine: files and the environment.

use std::io;

use serde::Deserialize;

use crate::ToolError;

/// `ENOTCAPABLE` in wasi-libc: the path is outside every preopened directory.
const ENOTCAPABLE: i32 = 76;

/// Turns an I/O error into a tool error: `denied` when the sandbox refused
/// (no capability, no permission, read-only), `failed` otherwise.
fn io_error(what: &str, err: &io::Error) -> ToolError {
    let text = format!(
        "{what}: {err} (kind: {:?}, os error: {:?})",
        err.kind(),
        err.raw_os_error()
    );
    let refused = matches!(
        err.kind(),
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem
    ) || err.raw_os_error() == Some(ENOTCAPABLE);
    if refused {
        ToolError::Denied(text)
    } else {
        ToolError::Failed(text)
    }
}

#[derive(Deserialize)]
pub struct PathArgs {
    path: String,
}

/// `read_path {path}`. Attacks the workspace boundary: `../x`, `/etc/passwd`,
/// a symlink inside the workspace pointing out of it, or any read at all when
/// the workspace is not granted.
pub fn read_path(args: PathArgs) -> Result<String, ToolError> {
    std::fs::read_to_string(&args.path).map_err(|e| io_error(&args.path, &e))
}

#[derive(Deserialize)]
pub struct WriteArgs {
    path: String,
    content: String,
}

/// `write_path {path, content}`. Attacks the read-only grant and the
/// workspace boundary for writes.
pub fn write_path(args: WriteArgs) -> Result<String, ToolError> {
    std::fs::write(&args.path, args.content).map_err(|e| io_error(&args.path, &e))?;
    Ok("wrote".to_string())
}

/// `list_path {path}`. Attacks the boundary for directory listings (`/`,
/// `..`): names of the entries, sorted, one per line.
pub fn list_path(args: PathArgs) -> Result<String, ToolError> {
    let entries = std::fs::read_dir(&args.path).map_err(|e| io_error(&args.path, &e))?;
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(&args.path, &e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names.join("\n"))
}

#[derive(Deserialize)]
pub struct EnvArgs {
    name: String,
}

/// `read_env {name}`. Attacks "no environment": the host's variables (API
/// keys, tokens) must not be visible. The error counts every variable seen.
pub fn read_env(args: EnvArgs) -> Result<String, ToolError> {
    std::env::var(&args.name).map_err(|e| {
        let visible = std::env::vars_os().count();
        ToolError::Failed(format!(
            "not set: {} ({e}); {visible} variables visible",
            args.name
        ))
    })
}
