//! OAuth login to an MCP server against a mock authorization server and
//! protected resource on 127.0.0.1 (`chitin_testing::mock_oauth`); the test
//! plays the browser.

use std::os::unix::fs::PermissionsExt as _;
use std::time::Duration;

use chitin::mcp::oauth::{LoginSettings, OAuthError, access_token, login};
use chitin_testing::mock_oauth::{ACCESS_1, ACCESS_2, Behaviour, browse, start as mock};

/// Runs a login while playing the browser; returns the login's result and
/// the redirect listener's status.
async fn login_with_browser(
    data: &std::path::Path,
    server_url: &str,
) -> (Result<(), OAuthError>, Option<u16>) {
    let (tx, rx) = tokio::sync::oneshot::channel::<String>();
    let browser = tokio::spawn(async move {
        match rx.await {
            Ok(url) => Some(browse(url).await),
            Err(_) => None,
        }
    });
    let result = tokio::time::timeout(
        Duration::from_secs(30),
        login(
            data,
            "remote",
            server_url,
            &LoginSettings::default(),
            move |url| {
                tx.send(url.to_string()).unwrap();
            },
        ),
    )
    .await
    .expect("the login ends");
    (result, browser.await.unwrap())
}

#[tokio::test]
async fn login_stores_tokens_600_and_refreshes_before_expiry() {
    let mock = mock(Behaviour {
        token_endpoint: None,
        wrong_state: false,
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let server_url = format!("{}/mcp", mock.base);
    assert!(
        access_token(data.path(), "remote", &server_url)
            .await
            .unwrap()
            .is_none(),
        "no login yet"
    );

    let (result, status) = login_with_browser(data.path(), &server_url).await;
    result.expect("the login succeeds");
    assert_eq!(status, Some(200));
    {
        let seen = mock.seen.lock().unwrap();
        assert!(
            seen.requests.contains(&"POST /register".to_string()),
            "dynamic registration: {:?}",
            seen.requests
        );
        assert_eq!(seen.authorize["code_challenge_method"], "S256");
        assert_eq!(seen.authorize["client_id"], "client-77");
        assert_eq!(seen.authorize["resource"], server_url);
        assert_eq!(seen.token_forms.len(), 1);
    }
    let file = data.path().join("mcp/oauth/remote.json");
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(file.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o700
    );
    assert!(std::fs::read_to_string(&file).unwrap().contains(ACCESS_1));

    // 30 s left is inside the margin: refreshed once (three callers at
    // the same time), and the new pair saved.
    let (a, b, c) = tokio::join!(
        access_token(data.path(), "remote", &server_url),
        access_token(data.path(), "remote", &server_url),
        access_token(data.path(), "remote", &server_url),
    );
    for token in [a, b, c] {
        assert_eq!(token.unwrap().as_deref(), Some(ACCESS_2));
    }
    let saved = std::fs::read_to_string(&file).unwrap();
    assert!(
        saved.contains(ACCESS_2) && saved.contains("RT-2") && !saved.contains(ACCESS_1),
        "{saved}"
    );
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    {
        let seen = mock.seen.lock().unwrap();
        let refresh = &seen.token_forms[1];
        assert_eq!(refresh["grant_type"], "refresh_token");
        assert_eq!(refresh["resource"], server_url);
    }
    // Fresh now: no further token request.
    assert_eq!(
        access_token(data.path(), "remote", &server_url)
            .await
            .unwrap()
            .as_deref(),
        Some(ACCESS_2)
    );
    assert_eq!(mock.seen.lock().unwrap().token_forms.len(), 2);
    // Tokens issued for one URL are not sent to another.
    let err = access_token(data.path(), "remote", "https://elsewhere.example/mcp")
        .await
        .unwrap_err();
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

    let mock = mock(Behaviour {
        token_endpoint: Some(format!("http://127.0.0.2:{port}/token")),
        wrong_state: false,
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let (result, status) = login_with_browser(data.path(), &format!("{}/mcp", mock.base)).await;
    let err = result.unwrap_err();
    assert!(
        matches!(err, OAuthError::Refused { ref url, .. } if url.contains("127.0.0.2")),
        "{err}"
    );
    assert!(
        mock.seen
            .lock()
            .unwrap()
            .requests
            .contains(&"GET /.well-known/oauth-authorization-server".to_string()),
        "the hostile metadata was served"
    );
    assert_eq!(status, None, "the user was never sent to log in");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(accepted(), 0, "nothing reached 127.0.0.2");
    assert!(!data.path().join("mcp/oauth/remote.json").exists());
}

#[tokio::test]
async fn a_redirect_with_the_wrong_state_is_refused() {
    let mock = mock(Behaviour {
        token_endpoint: None,
        wrong_state: true,
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let (result, status) = login_with_browser(data.path(), &format!("{}/mcp", mock.base)).await;
    assert!(
        matches!(result, Err(OAuthError::StateMismatch)),
        "{result:?}"
    );
    assert_eq!(
        status,
        Some(400),
        "the redirect reached the listener and was refused"
    );
    assert!(
        mock.seen.lock().unwrap().token_forms.is_empty(),
        "the code was never exchanged"
    );
    assert!(!data.path().join("mcp/oauth/remote.json").exists());
}

#[tokio::test]
async fn metadata_urls_must_be_https_unless_loopback() {
    // A server whose metadata names a plain-http authorization server on a
    // public name: refused before any request is made to it.
    let mock = mock(Behaviour {
        token_endpoint: Some("http://auth.example/token".into()),
        wrong_state: false,
    })
    .await;
    let data = tempfile::tempdir().unwrap();
    let (result, _) = login_with_browser(data.path(), &format!("{}/mcp", mock.base)).await;
    assert!(
        matches!(result, Err(OAuthError::Refused { ref reason, .. }) if reason.contains("https")),
        "{result:?}"
    );
}
