//! A mock OAuth authorization server and MCP protected resource on
//! 127.0.0.1 (`chitin mcp login`'s tests, tests/it/mcp_oauth.rs and the
//! binary's e2e): metadata, dynamic registration, an authorize endpoint
//! that redirects at once (the user "consented"), a token endpoint that
//! checks the code, the PKCE verifier and `resource`, and refreshes.
//! [`browse`] plays the browser.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use reqwest::Url;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

/// The first access token the mock issues.
pub const ACCESS_1: &str = "AT-SENTINEL-first-9921";
/// The access token a refresh gives.
pub const ACCESS_2: &str = "AT-SENTINEL-second-9921";

#[derive(Default)]
pub struct OAuthSeen {
    /// "METHOD path" of every request.
    pub requests: Vec<String>,
    /// The form of every token request.
    pub token_forms: Vec<HashMap<String, String>>,
    /// The authorize request's query.
    pub authorize: HashMap<String, String>,
}

/// A running mock.
pub struct MockOAuth {
    /// `http://127.0.0.1:PORT`; the MCP endpoint is `{base}/mcp`.
    pub base: String,
    /// What it saw.
    pub seen: Arc<Mutex<OAuthSeen>>,
}

/// How the mock misbehaves.
#[derive(Clone, Default)]
pub struct Behaviour {
    /// Where the metadata says the token endpoint is (default: the mock's own).
    pub token_endpoint: Option<String>,
    /// Send the browser back with this state instead of the one received.
    pub wrong_state: bool,
}

fn form(body: &str) -> HashMap<String, String> {
    Url::parse(&format!("http://x/?{body}"))
        .unwrap()
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

fn s256(verifier: &str) -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys,hashlib,base64; print(base64.urlsafe_b64encode(hashlib.sha256(sys.argv[1].encode()).digest()).decode().rstrip('='))", verifier])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Starts the mock.
pub async fn start(behaviour: Behaviour) -> MockOAuth {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let seen = Arc::new(Mutex::new(OAuthSeen::default()));
    let (b, s) = (base.clone(), seen.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let (base, seen, behaviour) = (b.clone(), s.clone(), behaviour.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                let (head, body) = loop {
                    let n = stream.read(&mut chunk).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&buf[..at]).into_owned();
                        let len: usize = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse().unwrap())
                            })
                            .unwrap_or(0);
                        while buf.len() < at + 4 + len {
                            let n = stream.read(&mut chunk).await.unwrap_or(0);
                            if n == 0 {
                                break;
                            }
                            buf.extend_from_slice(&chunk[..n]);
                        }
                        break (head, String::from_utf8_lossy(&buf[at + 4..]).into_owned());
                    }
                };
                let mut words = head.lines().next().unwrap().split(' ');
                let (method, target) = (
                    words.next().unwrap().to_string(),
                    words.next().unwrap().to_string(),
                );
                let url = Url::parse(&format!("{base}{target}")).unwrap();
                let query: HashMap<String, String> = url
                    .query_pairs()
                    .map(|(k, v)| (k.into_owned(), v.into_owned()))
                    .collect();
                seen.lock()
                    .unwrap()
                    .requests
                    .push(format!("{method} {}", url.path()));
                let json = |v: serde_json::Value| {
                    (
                        "200 OK",
                        vec![("content-type".to_string(), "application/json".to_string())],
                        v.to_string(),
                    )
                };
                let (status, headers, body) = match (method.as_str(), url.path()) {
                    ("GET", "/mcp") => (
                        "401 Unauthorized",
                        vec![(
                            "www-authenticate".to_string(),
                            format!(
                                "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
                            ),
                        )],
                        String::new(),
                    ),
                    ("GET", "/.well-known/oauth-protected-resource/mcp") => json(
                        serde_json::json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]}),
                    ),
                    ("GET", "/.well-known/oauth-authorization-server") => json(serde_json::json!({
                        "issuer": base,
                        "authorization_endpoint": format!("{base}/authorize"),
                        "token_endpoint": behaviour.token_endpoint.clone().unwrap_or(format!("{base}/token")),
                        "registration_endpoint": format!("{base}/register"),
                        "code_challenge_methods_supported": ["S256"],
                    })),
                    ("POST", "/register") => {
                        let reg: serde_json::Value = serde_json::from_str(&body).unwrap();
                        assert_eq!(reg["token_endpoint_auth_method"], "none");
                        (
                            "201 Created",
                            vec![("content-type".into(), "application/json".into())],
                            r#"{"client_id":"client-77"}"#.into(),
                        )
                    }
                    ("GET", "/authorize") => {
                        seen.lock().unwrap().authorize = query.clone();
                        let state = if behaviour.wrong_state {
                            "forged".to_string()
                        } else {
                            query["state"].clone()
                        };
                        let mut back = Url::parse(&query["redirect_uri"]).unwrap();
                        back.query_pairs_mut()
                            .append_pair("code", "CODE-1")
                            .append_pair("state", &state);
                        (
                            "302 Found",
                            vec![("location".into(), back.to_string())],
                            String::new(),
                        )
                    }
                    ("POST", "/token") => {
                        let f = form(&body);
                        seen.lock().unwrap().token_forms.push(f.clone());
                        let challenge = seen
                            .lock()
                            .unwrap()
                            .authorize
                            .get("code_challenge")
                            .cloned()
                            .unwrap_or_default();
                        match f.get("grant_type").map(String::as_str) {
                            Some("authorization_code")
                                if f.get("code").map(String::as_str) == Some("CODE-1")
                                    && s256(&f["code_verifier"]) == challenge
                                    && f.get("resource") == Some(&format!("{base}/mcp")) =>
                            {
                                // 30 s: inside the refresh margin, so the
                                // first access_token refreshes.
                                json(
                                    serde_json::json!({"access_token": ACCESS_1, "refresh_token": "RT-1", "expires_in": 30, "token_type": "Bearer"}),
                                )
                            }
                            Some("refresh_token")
                                if f.get("refresh_token").map(String::as_str) == Some("RT-1") =>
                            {
                                json(
                                    serde_json::json!({"access_token": ACCESS_2, "refresh_token": "RT-2", "expires_in": 3600, "token_type": "Bearer"}),
                                )
                            }
                            _ => (
                                "400 Bad Request",
                                vec![("content-type".into(), "application/json".into())],
                                r#"{"error":"invalid_grant"}"#.into(),
                            ),
                        }
                    }
                    _ => ("404 Not Found", vec![], String::new()),
                };
                let mut out = format!(
                    "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n",
                    body.len()
                );
                for (k, v) in headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                out.push_str(&body);
                let _ = stream.write_all(out.as_bytes()).await;
            });
        }
    });
    MockOAuth { base, seen }
}

/// The browser: follows the authorize URL to its redirect, then delivers
/// it to the loopback listener. Returns the listener's status.
pub async fn browse(authorize: String) -> u16 {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let answer = http.get(&authorize).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 302);
    let back = answer.headers()["location"].to_str().unwrap().to_string();
    assert!(back.starts_with("http://127.0.0.1:"), "{back}");
    http.get(&back).send().await.unwrap().status().as_u16()
}
