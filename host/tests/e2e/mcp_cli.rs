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
