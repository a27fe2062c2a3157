//! The token file `<data>/mcp/oauth/<NAME>.json`: created with mode 600
//! (never readable by others, not even between create and chmod), replaced
//! atomically (a temporary file in the same directory, then rename).

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::OAuthError;

/// What a login leaves behind.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Tokens {
    pub server_url: String,
    pub resource: String,
    pub token_endpoint: String,
    pub client_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_secret: Option<String>,
    pub access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_token: Option<String>,
    /// Unix seconds; `None`: the server gave no lifetime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> OAuthError {
    move |source| OAuthError::Io { context, source }
}

/// The file of server `name` (the name is a config key: checked so that it
/// cannot name another path).
pub(super) fn path(data_root: &Path, name: &str) -> Result<PathBuf, OAuthError> {
    if name.is_empty()
        || name.len() > 128
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        || name.starts_with('.')
    {
        return Err(OAuthError::Protocol(format!(
            "bad MCP server name for a token file: {name:?}"
        )));
    }
    Ok(data_root
        .join("mcp")
        .join("oauth")
        .join(format!("{name}.json")))
}

pub(super) fn load(path: &Path) -> Result<Option<Tokens>, OAuthError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(format!("reading {}", path.display()))(e)),
    };
    serde_json::from_str(&text).map(Some).map_err(|e| {
        OAuthError::LoginNeeded(format!("{} is not a token file ({e})", path.display()))
    })
}

pub(super) fn save(path: &Path, tokens: &Tokens) -> Result<(), OAuthError> {
    let dir = path.parent().expect("a token file has a directory");
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io(format!("securing {}", dir.display())))?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap().to_string_lossy(),
        std::process::id()
    ));
    let json = serde_json::to_vec_pretty(tokens).expect("tokens serialize");
    let result = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&json)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io(format!("writing {}", path.display())))
}
