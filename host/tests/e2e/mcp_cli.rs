//! `chitin mcp list|tools|doctor` and the MCP lines of `chitin status`.

use crate::common::chitin;

#[test]
fn list_status_and_doctor_show_servers_their_sandbox_and_failures() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[mcp_servers.local]\ncommand = \"/nonexistent/mcp-server\"\nsandbox = \"none\"\nstartup_timeout_secs = 3\n\
         [mcp_servers.remote]\nurl = \"https://mcp.example.com/mcp\"\nenabled = false\n\
         [mcp_servers.bad]\nurl = \"ftp://x\"\n",
    )
    .unwrap();
    let list = chitin(home.path(), &["mcp", "list"]).output().unwrap();
    let out = String::from_utf8_lossy(&list.stdout);
    assert!(out.contains("local") && out.contains("sandbox = \"none\"") && out.contains("WITHOUT the OS sandbox"), "{out}");
    assert!(out.contains("remote") && out.contains("(disabled)"), "{out}");
    assert!(out.contains("[mcp_servers.bad]"), "{out}");
    assert!(!out.contains('\x1b'), "no colour codes into a pipe: {out:?}");
    assert!(!list.status.success(), "an invalid entry fails the command");

    let status = chitin(home.path(), &["status"]).output().unwrap();
    let out = String::from_utf8_lossy(&status.stdout);
    assert!(out.contains("mcp:") && out.contains("WITHOUT the OS sandbox"), "{out}");

    let doctor = chitin(home.path(), &["mcp", "doctor", "local"]).output().unwrap();
    let out = String::from_utf8_lossy(&doctor.stdout);
    assert!(out.contains("local: FAILED") && out.contains("/nonexistent/mcp-server"), "{out}");
    assert!(!doctor.status.success());
    let unknown = chitin(home.path(), &["mcp", "tools", "nope"]).output().unwrap();
    assert!(!unknown.status.success() && String::from_utf8_lossy(&unknown.stderr).contains("no MCP server `nope`"));
}

/// A stdio server that floods its stderr with one endless line of
/// terminal escapes: the host logs a bounded, escaped line of it and goes
/// on (the first bytes reach the log: the flood was read).
#[test]
fn a_server_s_stderr_flood_is_logged_bounded_and_escaped() {
    let home = tempfile::tempdir().unwrap();
    let script = "{ printf '\\033]0;owned\\007FLOOD'; head -c 4000000 /dev/zero | tr '\\0' 'x'; printf '\\n'; } >&2; sleep 5";
    std::fs::write(
        home.path().join("config.toml"),
        format!("[mcp_servers.noisy]\ncommand = \"sh\"\nargs = [\"-c\", {script:?}]\nsandbox = \"none\"\nstartup_timeout_secs = 2\n"),
    )
    .unwrap();
    let doctor = chitin(home.path(), &["mcp", "doctor", "noisy"]).env("RUST_LOG", "info").output().unwrap();
    let err = String::from_utf8_lossy(&doctor.stderr);
    assert!(!doctor.status.success());
    let line = err.lines().find(|l| l.contains("MCP server stderr")).unwrap_or_else(|| panic!("no stderr line logged: {err}"));
    assert!(line.contains("FLOOD"), "the flood's start is logged: {line}");
    assert!(line.len() < 2_000, "one bounded line, not 4 MB: {} bytes", line.len());
    assert!(!err.contains('\x1b') && !err.contains('\x07'), "no escape reaches the log");
    assert!(err.len() < 20_000, "{} bytes of logs", err.len());
}

/// `chitin mcp add|remove` edit config.toml in place: comments kept, a bad
/// entry refused without touching the file, the result read back by `list`.
#[test]
fn add_and_remove_edit_the_config_and_keep_the_rest() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    let original = "# my settings\n[agent]\nmodel = \"m\"  # the model I pay for\n";
    std::fs::write(&config, original).unwrap();
    let run = |args: &[&str]| chitin(home.path(), args).output().unwrap();

    let added = run(&["mcp", "add", "files", "--env", "ROOT=/tmp", "--", "npx", "-y", "@modelcontextprotocol/server-filesystem"]);
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let added = run(&["mcp", "add", "gh", "--url", "https://api.example.com/mcp", "--header", "Authorization: Bearer {{secret:token}}", "--secret", "token=${GH_TOKEN}"]);
    assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
    let raw = run(&["mcp", "add", "raw", "--no-sandbox", "--", "/usr/bin/my-server"]);
    assert!(String::from_utf8_lossy(&raw.stdout).contains("WITHOUT the OS sandbox"));
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.starts_with(original), "the user's lines are kept: {text}");
    assert!(text.contains("[mcp_servers.files]\ncommand = \"npx\"\nargs = [\"-y\", \"@modelcontextprotocol/server-filesystem\"]\nenv = { ROOT = \"/tmp\" }\n"), "{text}");
    assert!(text.contains("secrets = { token = \"${GH_TOKEN}\" }"), "the secret stays a reference: {text}");

    let list = run(&["mcp", "list"]);
    let out = String::from_utf8_lossy(&list.stdout);
    assert!(list.status.success() && out.contains("files") && out.contains("gh") && out.contains("raw"), "{out}");

    // Refused, and the file is as it was.
    for bad in [
        &["mcp", "add", "files", "--", "other"][..],
        &["mcp", "add", "Bad Name", "--url", "https://x/mcp"],
        &["mcp", "add", "ftp", "--url", "ftp://x"],
        &["mcp", "add", "nothing"],
        &["mcp", "remove", "nope"],
    ] {
        let out = run(bad);
        assert!(!out.status.success(), "{bad:?} succeeded");
        assert!(!String::from_utf8_lossy(&out.stderr).is_empty());
        assert_eq!(std::fs::read_to_string(&config).unwrap(), text, "{bad:?} changed the file");
    }
    assert!(run(&["mcp", "add", "files", "--force", "--", "other"]).status.success());

    for name in ["files", "gh", "raw"] {
        assert!(run(&["mcp", "remove", name]).status.success());
    }
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.starts_with(original) && !text.contains("[mcp_servers"), "{text}");
}

/// A remote server that reflects the bearer token it was sent in every
/// error it answers: `chitin mcp doctor` at debug level shows the failure,
/// and neither its output nor its log holds the token.
#[test]
fn a_server_reflecting_the_bearer_token_never_gets_it_into_output_or_logs() {
    use std::io::{BufRead, BufReader, Read, Write};
    const TOKEN: &str = "sk-REFLECT-90210";
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let received = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let seen = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut auth, mut length) = (String::new(), 0usize);
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if lower.starts_with("authorization:") {
                    auth = line["authorization:".len()..].trim().to_string();
                }
                if let Some(n) = lower.strip_prefix("content-length:") {
                    length = n.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0u8; length];
            let _ = reader.read_exact(&mut body);
            seen.lock().unwrap().push_str(&auth);
            let id = serde_json::from_slice::<serde_json::Value>(&body).ok().and_then(|v| v.get("id").cloned()).unwrap_or(serde_json::Value::Null);
            let answer = serde_json::json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": format!("you sent {auth}, which is not welcome")}}).to_string();
            let mut stream = stream;
            let _ = write!(stream, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{answer}", answer.len());
        }
    });
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!("[mcp_servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\nheaders = {{ Authorization = \"Bearer {{{{secret:token}}}}\" }}\nsecrets = {{ token = \"${{MCP_TEST_TOKEN}}\" }}\nstartup_timeout_secs = 5\n"),
    )
    .unwrap();
    let out = chitin(home.path(), &["mcp", "doctor", "web"]).env("MCP_TEST_TOKEN", TOKEN).env("RUST_LOG", "debug").output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(received.lock().unwrap().contains(TOKEN), "the attack ran: the server got the token");
    assert!(!out.status.success());
    assert!(stdout.contains("web: FAILED") && stdout.contains("{{secret:token}}"), "the reflection shows as the placeholder: {stdout}");
    assert!(!stdout.contains(TOKEN) && !stderr.contains(TOKEN), "the token leaked:\n{stdout}\n{stderr}");
    assert!(stderr.contains("DEBUG"), "the log was at debug level");
}
