//! `chitin mcp login NAME` end to end against the mock OAuth server on
//! 127.0.0.1, the test as the browser: the login works, the tokens land in
//! a 600 file, and no token, code or refresh token reaches stdout, stderr
//! or the logs (at trace level).

use std::os::unix::fs::PermissionsExt as _;
use std::process::Stdio;
use std::time::Duration;

use chitin_testing::mock_oauth::{ACCESS_1, Behaviour, browse, start};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};

use crate::common::chitin;

#[tokio::test]
async fn login_prints_the_url_saves_tokens_600_and_never_shows_them() {
    let mock = start(Behaviour::default()).await;
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!("[mcp_servers.remote]\nurl = \"{}/mcp\"\n\n[mcp_servers.remote.oauth]\nscopes = [\"notes.read\"]\n", mock.base),
    )
    .unwrap();
    let mut cmd = tokio::process::Command::from(chitin(home.path(), &["mcp", "login", "remote"]));
    cmd.env("CHITIN_NO_BROWSER", "1")
        .env("RUST_LOG", "trace")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.kill_on_drop(true).spawn().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let errors = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stdout = String::new();
    let url = loop {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("the URL is printed")
            .unwrap()
            .unwrap_or_else(|| panic!("stdout ended without a URL: {stdout}"));
        stdout.push_str(&line);
        stdout.push('\n');
        if let Some(url) = line
            .trim()
            .strip_prefix(&format!("{}/authorize?", mock.base))
        {
            break format!("{}/authorize?{url}", mock.base);
        }
    };
    assert_eq!(browse(url).await, 200);
    while let Some(line) = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .unwrap()
        .unwrap()
    {
        stdout.push_str(&line);
        stdout.push('\n');
    }
    let status = child.wait().await.unwrap();
    let stderr = errors.await.unwrap();
    assert!(status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("Logged in to `remote`"), "{stdout}");
    assert_eq!(mock.seen.lock().unwrap().authorize["scope"], "notes.read");
    let file = home.path().join("mcp/oauth/remote.json");
    assert!(
        std::fs::read_to_string(&file).unwrap().contains(ACCESS_1),
        "the token was saved"
    );
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    for secret in [ACCESS_1, "RT-1", "CODE-1"] {
        assert!(
            !stdout.contains(secret) && !stderr.contains(secret),
            "{secret} leaked:\n{stdout}\n{stderr}"
        );
    }
}
