//! The OAuth client's HTTP: the host's reqwest with redirects off, every URL
//! admitted first. A server's metadata is hostile input: it could point the
//! token endpoint (which receives the code, the verifier and refresh
//! tokens) at a service inside the user's network. So: `https` only, `http`
//! only to loopback; a private or loopback address only when it is the
//! host the server's own URL names (the user chose that one); and the
//! connection pinned to the address that was checked (no DNS rebinding).

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::OAuthError;
use crate::plugins::grants::is_private;

/// The largest answer read (metadata, registration, tokens are small).
const MAX_BODY: usize = 1 << 20;
const TIMEOUT: Duration = Duration::from_secs(30);

pub(super) struct Client {
    /// The host the server's URL names (lowercase).
    server_host: String,
}

/// An answer from a token endpoint.
#[derive(Deserialize)]
pub(super) struct TokenAnswer {
    pub access_token: String,
    #[serde(default)]
    pub refresh_token: Option<String>,
    #[serde(default)]
    pub expires_in: Option<u64>,
}

pub(super) struct Answer {
    pub status: u16,
    pub www_authenticate: Option<String>,
    pub body: Vec<u8>,
}

fn refused(url: &str, reason: impl Into<String>) -> OAuthError {
    OAuthError::Refused {
        url: url.to_string(),
        reason: reason.into(),
    }
}

impl Client {
    pub(super) fn new(server_url: &str) -> Result<Client, OAuthError> {
        let parsed = url::Url::parse(server_url).map_err(|e| refused(server_url, e.to_string()))?;
        let host = parsed
            .host_str()
            .ok_or_else(|| refused(server_url, "no host"))?;
        Ok(Client {
            server_host: host.to_ascii_lowercase(),
        })
    }

    /// The address to connect to for `url`, or why not.
    pub(super) async fn admit(&self, url: &str) -> Result<(url::Url, SocketAddr), OAuthError> {
        let parsed = url::Url::parse(url).map_err(|e| refused(url, e.to_string()))?;
        let host = parsed
            .host_str()
            .ok_or_else(|| refused(url, "no host"))?
            .to_ascii_lowercase();
        let port = parsed
            .port_or_known_default()
            .ok_or_else(|| refused(url, "no port"))?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let loopback_name = bare == "localhost"
            || bare
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        match parsed.scheme() {
            "https" => {}
            "http" if loopback_name => {}
            other => {
                return Err(refused(
                    url,
                    format!("scheme {other}: only https (http to loopback)"),
                ));
            }
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(refused(url, "credentials in the URL"));
        }
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare, port))
            .await
            .map_err(|e| refused(url, format!("cannot resolve {bare}: {e}")))?
            .collect();
        let addr = *addrs
            .first()
            .ok_or_else(|| refused(url, format!("{bare} has no address")))?;
        if addrs.iter().any(|a| is_private(a.ip())) && host != self.server_host {
            return Err(refused(
                url,
                format!(
                    "{host} is a private or loopback address and not the MCP server's own host ({})",
                    self.server_host
                ),
            ));
        }
        Ok((parsed, addr))
    }

    async fn send(
        &self,
        url: &str,
        build: impl FnOnce(&reqwest::Client, url::Url) -> reqwest::RequestBuilder,
    ) -> Result<Answer, OAuthError> {
        let (parsed, addr) = self.admit(url).await?;
        let host = parsed
            .host_str()
            .unwrap_or_default()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let http = |reason: String| OAuthError::Http {
            what: format!("request to {}", strip_query(&parsed)),
            reason,
        };
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TIMEOUT)
            .resolve(&host, addr)
            .build()
            .map_err(|e| http(e.to_string()))?;
        let mut response = build(&client, parsed.clone())
            .send()
            .await
            .map_err(|e| http(e.without_url().to_string()))?;
        let status = response.status().as_u16();
        let www_authenticate = response
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| http(e.without_url().to_string()))?
        {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(http(format!("answer larger than {MAX_BODY} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer {
            status,
            www_authenticate,
            body,
        })
    }

    pub(super) async fn get(&self, url: &str) -> Result<Answer, OAuthError> {
        self.send(url, |c, u| c.get(u).header("accept", "application/json"))
            .await
    }

    /// The first of `urls` that answers with a document (metadata is
    /// looked for at several well-known places, in order).
    pub(super) async fn first_json<T: serde::de::DeserializeOwned>(&self, urls: &[String]) -> Result<Option<T>, OAuthError> {
        for url in urls {
            if let Some(document) = self.get_json::<T>(url).await? {
                return Ok(Some(document));
            }
        }
        Ok(None)
    }

    /// A GET whose answer must be a 200 with JSON.
    pub(super) async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        url: &str,
    ) -> Result<Option<T>, OAuthError> {
        let answer = self.get(url).await?;
        if answer.status != 200 {
            return Ok(None);
        }
        serde_json::from_slice(&answer.body).map(Some).map_err(|e| {
            OAuthError::Protocol(format!(
                "{url} answered JSON that is not OAuth metadata: {e}"
            ))
        })
    }

    pub(super) async fn post_json(
        &self,
        url: &str,
        body: &serde_json::Value,
    ) -> Result<Answer, OAuthError> {
        self.send(url, |c, u| {
            c.post(u).header("accept", "application/json").json(body)
        })
        .await
    }

    /// A token request (`application/x-www-form-urlencoded`, RFC 6749 §4.1.3).
    pub(super) async fn token(
        &self,
        endpoint: &str,
        form: &[(&str, String)],
    ) -> Result<TokenAnswer, OAuthError> {
        let answer = self
            .send(endpoint, |c, u| {
                c.post(u).header("accept", "application/json").form(form)
            })
            .await?;
        if answer.status != 200 {
            // Only the error code and description: never echo the body
            // (it might carry token material).
            #[derive(Deserialize)]
            struct Failure {
                error: Option<String>,
                error_description: Option<String>,
            }
            let detail = serde_json::from_slice::<Failure>(&answer.body)
                .ok()
                .map(|f| {
                    format!(
                        "{} {}",
                        f.error.unwrap_or_default(),
                        f.error_description.unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            let detail: String = detail
                .trim()
                .chars()
                .filter(|c| !c.is_control())
                .take(200)
                .collect();
            return Err(OAuthError::Http {
                what: "the token endpoint".into(),
                reason: format!("status {}: {detail}", answer.status),
            });
        }
        serde_json::from_slice(&answer.body).map_err(|e| {
            OAuthError::Protocol(format!("the token endpoint's answer is not a token: {e}"))
        })
    }
}

/// A URL without its query (for errors: a query may carry a code).
fn strip_query(url: &url::Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.to_string()
}
