//! The sandbox's environment: a minimal one of its own (`PATH`, `HOME` =
//! the workspace, `LANG`, `TERM`) plus the policy's variables; nothing of
//! the host's environment (API keys live there).

use std::path::Path;

use super::SandboxError;

const PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// The variables, in order (a later one wins in bubblewrap).
pub(super) fn environment(
    workspace: &Path,
    extra: &[(String, String)],
) -> Result<Vec<(String, String)>, SandboxError> {
    // LANG and TERM are copied when they look like what they claim to be
    // (they choose the encoding and escape sequences the program prints),
    // otherwise a safe default.
    let lang = host_var("LANG", b"._-@", "C.UTF-8");
    let term = host_var("TERM", b"._-+", "dumb");
    let mut vars = vec![
        ("PATH".to_string(), PATH.to_string()),
        ("HOME".to_string(), workspace.display().to_string()),
        ("LANG".to_string(), lang),
        ("TERM".to_string(), term),
    ];
    for (name, value) in extra {
        if name.is_empty() || name.contains('=') || name.contains('\0') || value.contains('\0') {
            return Err(SandboxError::Policy(format!(
                "bad environment variable name or value: {name:?}"
            )));
        }
        vars.push((name.clone(), value.clone()));
    }
    Ok(vars)
}

/// The host's `name` when it is a short word of letters, digits and
/// `extra`, as LANG and TERM values are; `default` otherwise.
fn host_var(name: &str, extra: &[u8], default: &str) -> String {
    std::env::var(name)
        .ok()
        .filter(|v| !v.is_empty() && v.len() < 64 && v.bytes().all(|b| b.is_ascii_alphanumeric() || extra.contains(&b)))
        .unwrap_or_else(|| default.into())
}
