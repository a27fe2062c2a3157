//! OAuth login to an MCP server against a mock authorization server and
//! protected resource on 127.0.0.1; the test plays the browser.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chitin::mcp::oauth::{LoginSettings, OAuthError, access_token, login};
use reqwest::Url;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

const ACCESS_1: &str = "AT-SENTINEL-first-9921";
const ACCESS_2: &str = "AT-SENTINEL-second-9921";

#[derive(Default)]
struct Seen {
    /// "METHOD path" of every request.
    requests: Vec<String>,
    /// The form of every token request.
    token_forms: Vec<HashMap<String, String>>,
    /// The authorize request's query.
    authorize: HashMap<String, String>,
}

struct Mock {
    base: String,
    seen: Arc<Mutex<Seen>>,
}

#[derive(Clone)]
struct Behaviour {
    /// Where the metadata says the token endpoint is (default: the mock's own).
    token_endpoint: Option<String>,
    /// Send the browser back with this state instead of the one received.
    wrong_state: bool,
}

fn form(body: &str) -> HashMap<String, String> {
    Url::parse(&format!("http://x/?{body}")).unwrap().query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect()
}

fn s256(verifier: &str) -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys,hashlib,base64; print(base64.urlsafe_b64encode(hashlib.sha256(sys.argv[1].encode()).digest()).decode().rstrip('='))", verifier])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

async fn mock(behaviour: Behaviour) -> Mock {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (b, s) = (base.clone(), seen.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else { return };
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
                            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap()))
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
                let (method, target) = (words.next().unwrap().to_string(), words.next().unwrap().to_string());
                let url = Url::parse(&format!("{base}{target}")).unwrap();
                let query: HashMap<String, String> = url.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect();
                seen.lock().unwrap().requests.push(format!("{method} {}", url.path()));
                let json = |v: serde_json::Value| ("200 OK", vec![("content-type".to_string(), "application/json".to_string())], v.to_string());
                let (status, headers, body) = match (method.as_str(), url.path()) {
                    ("GET", "/mcp") => (
                        "401 Unauthorized",
                        vec![(
                            "www-authenticate".to_string(),
                            format!("Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""),
                        )],
                        String::new(),
                    ),
                    ("GET", "/.well-known/oauth-protected-resource/mcp") => {
                        json(serde_json::json!({"resource": format!("{base}/mcp"), "authorization_servers": [base]}))
                    }
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
                        ("201 Created", vec![("content-type".into(), "application/json".into())], r#"{"client_id":"client-77"}"#.into())
                    }
                    ("GET", "/authorize") => {
                        seen.lock().unwrap().authorize = query.clone();
                        let state = if behaviour.wrong_state { "forged".to_string() } else { query["state"].clone() };
                        let mut back = Url::parse(&query["redirect_uri"]).unwrap();
                        back.query_pairs_mut().append_pair("code", "CODE-1").append_pair("state", &state);
                        ("302 Found", vec![("location".into(), back.to_string())], String::new())
                    }
                    ("POST", "/token") => {
                        let f = form(&body);
                        seen.lock().unwrap().token_forms.push(f.clone());
                        let challenge = seen.lock().unwrap().authorize.get("code_challenge").cloned().unwrap_or_default();
                        match f.get("grant_type").map(String::as_str) {
                            Some("authorization_code")
                                if f.get("code").map(String::as_str) == Some("CODE-1")
                                    && s256(&f["code_verifier"]) == challenge
                                    && f.get("resource") == Some(&format!("{base}/mcp")) =>
                            {
                                // 30 s: inside the refresh margin, so the
                                // first access_token refreshes.
                                json(serde_json::json!({"access_token": ACCESS_1, "refresh_token": "RT-1", "expires_in": 30, "token_type": "Bearer"}))
                            }
                            Some("refresh_token") if f.get("refresh_token").map(String::as_str) == Some("RT-1") => {
                                json(serde_json::json!({"access_token": ACCESS_2, "refresh_token": "RT-2", "expires_in": 3600, "token_type": "Bearer"}))
                            }
                            _ => ("400 Bad Request", vec![("content-type".into(), "application/json".into())], r#"{"error":"invalid_grant"}"#.into()),
                        }
                    }
                    _ => ("404 Not Found", vec![], String::new()),
                };
                let mut out = format!("HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
                for (k, v) in headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                out.push_str(&body);
                let _ = stream.write_all(out.as_bytes()).await;
            });
        }
    });
    Mock { base, seen }
}

/// The browser: follows the authorize URL to its redirect, then delivers
/// it to the loopback listener. Returns the listener's status.
async fn browse(authorize: String) -> u16 {
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let answer = http.get(&authorize).send().await.unwrap();
    assert_eq!(answer.status().as_u16(), 302);
    let back = answer.headers()["location"].to_str().unwrap().to_string();
    assert!(back.starts_with("http://127.0.0.1:"), "{back}");
    http.get(&back).send().await.unwrap().status().as_u16()
}

/// Runs a login while playing the browser; returns the login's result and
/// the redirect listener's status.
async fn login_with_browser(data: &std::path::Path, server_url: &str) -> (Result<(), OAuthError>, Option<u16>) {
    let (tx, rx) = tokio::sync::oneshot::channel::<String>();
    let browser = tokio::spawn(async move {
        match rx.await {
            Ok(url) => Some(browse(url).await),
            Err(_) => None,
        }
    });
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        login(data, "remote", server_url, &LoginSettings::default(), move |url| {
            tx.send(url.to_string()).unwrap();
        }),
    )
    .await
    .expect("the login ends");
    (result, browser.await.unwrap())
}

#[tokio::test]
async fn login_stores_tokens_600_and_refreshes_before_expiry() {
    let mock = mock(Behaviour { token_endpoint: None, wrong_state: false }).await;
    let data = tempfile::tempdir().unwrap();
    let server_url = format!("{}/mcp", mock.base);
    assert!(access_token(data.path(), "remote", &server_url).await.unwrap().is_none(), "no login yet");

    let (result, status) = login_with_browser(data.path(), &server_url).await;
    result.expect("the login succeeds");
    assert_eq!(status, Some(200));
    {
        let seen = mock.seen.lock().unwrap();
        assert!(seen.requests.contains(&"POST /register".to_string()), "dynamic registration: {:?}", seen.requests);
        assert_eq!(seen.authorize["code_challenge_method"], "S256");
        assert_eq!(seen.authorize["client_id"], "client-77");
        assert_eq!(seen.authorize["resource"], server_url);
        assert_eq!(seen.token_forms.len(), 1);
    }
    let file = data.path().join("mcp/oauth/remote.json");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::metadata(file.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
    assert!(std::fs::read_to_string(&file).unwrap().contains(ACCESS_1));

    // 30 s left is inside the margin: refreshed, and the new pair saved.
    let token = access_token(data.path(), "remote", &server_url).await.unwrap();
    assert_eq!(token.as_deref(), Some(ACCESS_2));
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(saved.contains(ACCESS_2) && saved.contains("RT-2") && !saved.contains(ACCESS_1), "{saved}");
    assert_eq!(std::fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
    {
        let seen = mock.seen.lock().unwrap();
        let refresh = &seen.token_forms[1];
        assert_eq!(refresh["grant_type"], "refresh_token");
        assert_eq!(refresh["resource"], server_url);
    }
    // Fresh now: no further token request.
    assert_eq!(access_token(data.path(), "remote", &server_url).await.unwrap().as_deref(), Some(ACCESS_2));
    assert_eq!(mock.seen.lock().unwrap().token_forms.len(), 2);
    // Tokens issued for one URL are not sent to another.
    let err = access_token(data.path(), "remote", "https://elsewhere.example/mcp").await.unwrap_err();
    assert!(matches!(err, OAuthError::LoginNeeded(_)), "{err}");
    assert!(!err.to_string().contains("AT-SENTINEL"));
}

#[tokio::test]
async fn a_token_endpoint_at_another_private_address_is_refused() {
    // The hostile metadata's target: 127.0.0.2, reachable (shown first), not
    // the host the server's URL names.
    let victim = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
    victim.set_nonblocking(true).unwrap();
    let port = victim.local_addr().unwrap().port();
    drop(std::net::TcpStream::connect(("127.0.0.2", port)).unwrap());
    let accepted = || std::iter::from_fn(|| victim.accept().ok()).count();
    assert_eq!(accepted(), 1, "the victim is reachable from here");

    let mock = mock(Behaviour { token_endpoint: Some(format!("http://127.0.0.2:{port}/token")), wrong_state: false }).await;
    let data = tempfile::tempdir().unwrap();
    let (result, status) = login_with_browser(data.path(), &format!("{}/mcp", mock.base)).await;
    let err = result.unwrap_err();
    assert!(matches!(err, OAuthError::Refused { ref url, .. } if url.contains("127.0.0.2")), "{err}");
    assert!(
        mock.seen.lock().unwrap().requests.contains(&"GET /.well-known/oauth-authorization-server".to_string()),
        "the hostile metadata was served"
    );
    assert_eq!(status, None, "the user was never sent to log in");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(accepted(), 0, "nothing reached 127.0.0.2");
    assert!(!data.path().join("mcp/oauth/remote.json").exists());
}

#[tokio::test]
async fn a_redirect_with_the_wrong_state_is_refused() {
    let mock = mock(Behaviour { token_endpoint: None, wrong_state: true }).await;
    let data = tempfile::tempdir().unwrap();
    let (result, status) = login_with_browser(data.path(), &format!("{}/mcp", mock.base)).await;
    assert!(matches!(result, Err(OAuthError::StateMismatch)), "{result:?}");
    assert_eq!(status, Some(400), "the redirect reached the listener and was refused");
    assert!(mock.seen.lock().unwrap().token_forms.is_empty(), "the code was never exchanged");
    assert!(!data.path().join("mcp/oauth/remote.json").exists());
}

#[tokio::test]
async fn metadata_urls_must_be_https_unless_loopback() {
    // A server whose metadata names a plain-http authorization server on a
    // public name: refused before any request is made to it.
    let mock = mock(Behaviour { token_endpoint: Some("http://auth.example/token".into()), wrong_state: false }).await;
    let data = tempfile::tempdir().unwrap();
    let (result, _) = login_with_browser(data.path(), &format!("{}/mcp", mock.base)).await;
    assert!(matches!(result, Err(OAuthError::Refused { ref reason, .. }) if reason.contains("https")), "{result:?}");
}
