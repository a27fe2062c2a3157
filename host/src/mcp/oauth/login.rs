//! `chitin mcp login NAME`: discovery (RFC 9728 protected-resource metadata,
//! then RFC 8414 or OpenID authorization-server metadata), dynamic client
//! registration (RFC 7591) when no client id is configured, the
//! authorization code flow with PKCE S256 and `state`, a one-shot loopback
//! redirect listener, and the `resource` parameter (RFC 8707).

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use serde::Deserialize;
use sha2::Digest as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::fetch::Client;
use super::store::{self, Tokens};
use super::{OAuthError, now_secs};
use crate::config::Config;

/// How long the redirect listener waits for the browser.
const LOGIN_WAIT: Duration = Duration::from_secs(300);

/// `[mcp_servers.NAME.oauth]`: `client_id` (skip registration), `client_secret`,
/// `scopes` (list of strings).
#[derive(Debug, Clone, Default)]
pub struct LoginSettings {
    /// A client id registered beforehand (no dynamic registration then).
    pub client_id: Option<String>,
    /// Its secret, for a confidential client.
    pub client_secret: Option<String>,
    /// The scopes to ask for.
    pub scopes: Vec<String>,
}

/// The OAuth settings of server `name` and its URL (`url`), read from the
/// raw `[mcp_servers.NAME]` table.
pub fn settings(config: &Config, name: &str) -> Result<(String, LoginSettings), OAuthError> {
    let table = config
        .mcp_servers
        .get(name)
        .ok_or_else(|| OAuthError::Protocol(format!("no [mcp_servers.{name}] in the config")))?;
    let url = table.get("url").and_then(|v| v.as_str()).ok_or_else(|| {
        OAuthError::Protocol(format!(
            "[mcp_servers.{name}] has no `url`: OAuth is for servers over HTTP"
        ))
    })?;
    let oauth = table.get("oauth");
    let text = |key: &str| {
        oauth
            .and_then(|o| o.get(key))
            .and_then(|v| v.as_str())
            .map(str::to_string)
    };
    let scopes = match oauth.and_then(|o| o.get("scopes")) {
        None => Vec::new(),
        Some(v) => v
            .as_array()
            .and_then(|a| {
                a.iter()
                    .map(|s| s.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>()
            })
            .ok_or_else(|| {
                OAuthError::Protocol(format!(
                    "[mcp_servers.{name}.oauth] scopes must be a list of strings"
                ))
            })?,
    };
    Ok((
        url.to_string(),
        LoginSettings {
            client_id: text("client_id"),
            client_secret: text("client_secret"),
            scopes,
        },
    ))
}

#[derive(Deserialize)]
struct ResourceMetadata {
    #[serde(default)]
    resource: Option<String>,
    #[serde(default)]
    authorization_servers: Vec<String>,
}

#[derive(Deserialize)]
struct ServerMetadata {
    authorization_endpoint: String,
    token_endpoint: String,
    #[serde(default)]
    registration_endpoint: Option<String>,
    #[serde(default)]
    code_challenge_methods_supported: Option<Vec<String>>,
}

/// `resource_metadata="URL"` from a `WWW-Authenticate: Bearer ...` header.
fn resource_metadata_url(header: &str) -> Option<String> {
    let at = header.find("resource_metadata=")? + "resource_metadata=".len();
    let rest = &header[at..];
    let value = match rest.strip_prefix('"') {
        Some(quoted) => &quoted[..quoted.find('"')?],
        None => rest.split([',', ' ']).next()?,
    };
    Some(value.to_string())
}

/// The well-known URL for `base` (RFC 8414 §3: inserted between host and path).
fn well_known(base: &url::Url, suffix: &str) -> String {
    let path = base.path().trim_end_matches('/');
    format!(
        "{}/.well-known/{suffix}{path}",
        base.origin().ascii_serialization()
    )
}

fn random_b64(bytes: usize) -> Result<String, OAuthError> {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).map_err(|e| OAuthError::Protocol(format!("no randomness: {e}")))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(buf))
}

/// Logs in to server `name` at `server_url`: `show_url` receives the URL the
/// user must open; returns once the tokens are saved.
pub async fn login(
    data_root: &Path,
    name: &str,
    server_url: &str,
    settings: &LoginSettings,
    show_url: impl FnOnce(&str),
) -> Result<(), OAuthError> {
    let path = store::path(data_root, name)?;
    let client = Client::new(server_url)?;
    let server = url::Url::parse(server_url)
        .map_err(|e| OAuthError::Protocol(format!("bad server URL {server_url}: {e}")))?;

    // 1. The protected resource's metadata: from the 401's header, else the
    //    well-known URLs (with the path, then at the root).
    let probe = client.get(server_url).await?;
    let mut candidates = Vec::new();
    if let Some(url) = probe
        .www_authenticate
        .as_deref()
        .and_then(resource_metadata_url)
    {
        candidates.push(url);
    }
    candidates.push(well_known(&server, "oauth-protected-resource"));
    candidates.push(format!(
        "{}/.well-known/oauth-protected-resource",
        server.origin().ascii_serialization()
    ));
    let resource_meta = client.first_json::<ResourceMetadata>(&candidates).await?.ok_or_else(|| {
        OAuthError::Protocol(format!(
            "{server_url} publishes no OAuth protected-resource metadata"
        ))
    })?;
    let issuer = resource_meta.authorization_servers.first().ok_or_else(|| {
        OAuthError::Protocol("the protected-resource metadata names no authorization server".into())
    })?;
    let resource = resource_meta
        .resource
        .unwrap_or_else(|| server_url.to_string());

    // 2. The authorization server's metadata.
    let issuer_url = url::Url::parse(issuer)
        .map_err(|e| OAuthError::Protocol(format!("bad authorization server {issuer}: {e}")))?;
    let meta = client
        .first_json::<ServerMetadata>(&[
            well_known(&issuer_url, "oauth-authorization-server"),
            well_known(&issuer_url, "openid-configuration"),
        ])
        .await?
        .ok_or_else(|| {
        OAuthError::Protocol(format!(
            "{issuer} publishes no authorization server metadata"
        ))
    })?;
    if let Some(methods) = &meta.code_challenge_methods_supported
        && !methods.iter().any(|m| m == "S256")
    {
        return Err(OAuthError::Protocol(
            "the authorization server does not support PKCE S256".into(),
        ));
    }
    // Every endpoint is checked now, before the user is sent anywhere.
    client.admit(&meta.authorization_endpoint).await?;
    client.admit(&meta.token_endpoint).await?;

    // 3. The loopback redirect listener (a random port), then the client.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| OAuthError::Io {
            context: "binding the redirect listener on 127.0.0.1".into(),
            source: e,
        })?;
    let port = listener
        .local_addr()
        .map_err(|e| OAuthError::Io {
            context: "the redirect listener".into(),
            source: e,
        })?
        .port();
    let redirect_uri = format!("http://127.0.0.1:{port}/callback");
    let (client_id, client_secret) = match &settings.client_id {
        Some(id) => (id.clone(), settings.client_secret.clone()),
        None => register(&client, &meta, &redirect_uri, &settings.scopes).await?,
    };

    // 4. PKCE and state, the URL.
    let verifier = random_b64(32)?;
    let challenge = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(sha2::Sha256::digest(verifier.as_bytes()));
    let state = random_b64(16)?;
    let mut authorize = url::Url::parse(&meta.authorization_endpoint)
        .map_err(|e| OAuthError::Protocol(format!("bad authorization endpoint: {e}")))?;
    {
        let mut q = authorize.query_pairs_mut();
        q.append_pair("response_type", "code")
            .append_pair("client_id", &client_id)
            .append_pair("redirect_uri", &redirect_uri)
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", &state)
            .append_pair("resource", &resource);
        if !settings.scopes.is_empty() {
            q.append_pair("scope", &settings.scopes.join(" "));
        }
    }
    show_url(authorize.as_str());

    // 5. One redirect, then the exchange.
    let code = tokio::time::timeout(LOGIN_WAIT, redirect(&listener, &state))
        .await
        .map_err(|_| {
            OAuthError::Protocol(format!(
                "no redirect reached 127.0.0.1:{port} within {} s",
                LOGIN_WAIT.as_secs()
            ))
        })??;
    drop(listener);
    let mut form = vec![
        ("grant_type", "authorization_code".to_string()),
        ("code", code),
        ("redirect_uri", redirect_uri),
        ("client_id", client_id.clone()),
        ("code_verifier", verifier),
        ("resource", resource.clone()),
    ];
    if let Some(secret) = &client_secret {
        form.push(("client_secret", secret.clone()));
    }
    let answer = client.token(&meta.token_endpoint, &form).await?;
    let tokens = Tokens {
        server_url: server_url.to_string(),
        resource,
        token_endpoint: meta.token_endpoint,
        client_id,
        client_secret,
        access_token: answer.access_token,
        refresh_token: answer.refresh_token,
        expires_at: answer.expires_in.map(|s| now_secs() + s),
    };
    store::save(&path, &tokens)?;
    tracing::info!(server = name, "logged in to the MCP server");
    Ok(())
}

/// Dynamic client registration (RFC 7591) as a public client.
async fn register(
    client: &Client,
    meta: &ServerMetadata,
    redirect_uri: &str,
    scopes: &[String],
) -> Result<(String, Option<String>), OAuthError> {
    let endpoint = meta.registration_endpoint.as_deref().ok_or_else(|| {
        OAuthError::Protocol("the authorization server offers no client registration: set [mcp_servers.NAME.oauth] client_id".into())
    })?;
    let mut body = serde_json::json!({
        "client_name": "chitin",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    });
    if !scopes.is_empty() {
        body["scope"] = scopes.join(" ").into();
    }
    let answer = client.post_json(endpoint, &body).await?;
    if !(200..300).contains(&answer.status) {
        return Err(OAuthError::Http {
            what: "client registration".into(),
            reason: format!("status {}", answer.status),
        });
    }
    #[derive(Deserialize)]
    struct Registered {
        client_id: String,
        #[serde(default)]
        client_secret: Option<String>,
    }
    let r: Registered = serde_json::from_slice(&answer.body).map_err(|e| {
        OAuthError::Protocol(format!("the registration answer has no client_id: {e}"))
    })?;
    Ok((r.client_id, r.client_secret))
}

/// Answers the first request on the listener: the code when `state`
/// matches, an error otherwise. Only one request is ever answered.
async fn redirect(listener: &tokio::net::TcpListener, state: &str) -> Result<String, OAuthError> {
    let (mut stream, _) = listener.accept().await.map_err(|e| OAuthError::Io {
        context: "accepting the redirect".into(),
        source: e,
    })?;
    let mut buf = vec![0u8; 8192];
    let mut len = 0;
    while !buf[..len].windows(4).any(|w| w == b"\r\n\r\n") && len < buf.len() {
        let n = stream
            .read(&mut buf[len..])
            .await
            .map_err(|e| OAuthError::Io {
                context: "reading the redirect".into(),
                source: e,
            })?;
        if n == 0 {
            break;
        }
        len += n;
    }
    let head = String::from_utf8_lossy(&buf[..len]);
    let target = head
        .lines()
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .unwrap_or("");
    let url = url::Url::parse(&format!("http://127.0.0.1{target}")).ok();
    let get = |key: &str| {
        url.as_ref().and_then(|u| {
            u.query_pairs()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.into_owned())
        })
    };
    let result = if get("state").as_deref() != Some(state) {
        Err(OAuthError::StateMismatch)
    } else if let Some(error) = get("error") {
        let detail: String = format!("{error} {}", get("error_description").unwrap_or_default())
            .chars()
            .filter(|c| !c.is_control())
            .take(200)
            .collect();
        Err(OAuthError::Denied(detail))
    } else {
        get("code").ok_or_else(|| OAuthError::Protocol("the redirect carries no code".into()))
    };
    let (status, text) = match &result {
        Ok(_) => ("200 OK", "chitin is logged in. You can close this page."),
        Err(_) => (
            "400 Bad Request",
            "chitin refused this login. Return to the terminal.",
        ),
    };
    let page = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.write_all(page.as_bytes()).await;
    let _ = stream.shutdown().await;
    result
}
