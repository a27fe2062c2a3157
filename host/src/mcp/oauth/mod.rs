//! OAuth 2.1 for MCP servers that need it: `chitin mcp login NAME`
//! (authorization code with PKCE), tokens kept in the data dir (mode 600)
//! and refreshed before they expire.
//!
//! Concerns: [`fetch`] is the only HTTP (redirects off; every URL a server
//! or its metadata names is hostile input and passes [`fetch::admit`]),
//! [`store`] the token file, [`login`] discovery, registration and the
//! authorization code flow.

mod fetch;
mod login;
mod store;

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

pub use login::{LoginSettings, login, settings};

/// Why a token could not be had.
#[derive(Debug, thiserror::Error)]
pub enum OAuthError {
    /// A URL the server or its metadata named is refused.
    #[error("refused URL {url}: {reason}")]
    Refused {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// An HTTP exchange failed.
    #[error("{what}: {reason}")]
    Http {
        /// The exchange.
        what: String,
        /// What went wrong.
        reason: String,
    },
    /// The authorization server's answer is not what OAuth says.
    #[error("{0}")]
    Protocol(String),
    /// The redirect carried another `state` than the one sent.
    #[error(
        "the redirect's state does not match the login's: refused (another page may be trying to log you in)"
    )]
    StateMismatch,
    /// The user (or the server) denied the authorization.
    #[error("authorization denied: {0}")]
    Denied(String),
    /// The token file could not be read or written.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
    /// The stored tokens belong to another URL or cannot be refreshed.
    #[error("{0}: run `chitin mcp login` again")]
    LoginNeeded(String),
}

/// Refresh this long before the access token expires.
const REFRESH_MARGIN_SECS: u64 = 60;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The access token to send to server `name` (refreshed first when it is
/// about to expire), or `None` when the user never logged in to it.
pub async fn access_token(
    data_root: &Path,
    name: &str,
    server_url: &str,
) -> Result<Option<String>, OAuthError> {
    let path = store::path(data_root, name)?;
    let Some(mut tokens) = store::load(&path)? else {
        return Ok(None);
    };
    if tokens.server_url != server_url {
        return Err(OAuthError::LoginNeeded(format!(
            "the tokens of `{name}` were issued for {}, not {server_url}",
            tokens.server_url
        )));
    }
    let fresh = |t: &store::Tokens| {
        t.expires_at
            .is_none_or(|at| at > now_secs() + REFRESH_MARGIN_SECS)
    };
    if fresh(&tokens) {
        return Ok(Some(tokens.access_token));
    }
    // One refresh at a time in this process: a second caller waits, then
    // finds the new pair (a refresh token may be good for one use only).
    static REFRESHING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _guard = REFRESHING.lock().await;
    let Some(reloaded) = store::load(&path)? else {
        return Ok(None);
    };
    tokens = reloaded;
    if fresh(&tokens) {
        return Ok(Some(tokens.access_token));
    }
    let Some(refresh) = tokens.refresh_token.clone() else {
        return Err(OAuthError::LoginNeeded(format!(
            "the access token of `{name}` expired and there is no refresh token"
        )));
    };
    let client = fetch::Client::new(server_url)?;
    let mut form = vec![
        ("grant_type", "refresh_token".to_string()),
        ("refresh_token", refresh),
        ("client_id", tokens.client_id.clone()),
        ("resource", tokens.resource.clone()),
    ];
    if let Some(secret) = &tokens.client_secret {
        form.push(("client_secret", secret.clone()));
    }
    let answer = client.token(&tokens.token_endpoint, &form).await?;
    tokens.access_token = answer.access_token;
    // A server may rotate the refresh token (OAuth 2.1 for public clients).
    if let Some(rotated) = answer.refresh_token {
        tokens.refresh_token = Some(rotated);
    }
    tokens.expires_at = answer.expires_in.map(|s| now_secs() + s);
    store::save(&path, &tokens)?;
    tracing::info!(server = name, "refreshed the MCP server's access token");
    Ok(Some(tokens.access_token))
}
