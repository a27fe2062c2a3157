//! Issue 9, item 8, through the real binary: the model is untrusted input.
//! A tool call whose arguments are far over `[agent] max_tool_args_kb` is
//! refused with a clear error the model sees, the session file does not
//! keep the arguments, the process stays within a memory bound, and the
//! session goes on working. Checkpoints write each message once.

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};

use chitin::session::{JsonlStore, Role, SessionStore as _};
use chitin_testing::{MockLlm, MockReply};
use serde_json::{Value, json};
use crate::common;

const MIB: usize = 1024 * 1024;

/// `chitin ARGS` talking to `mock`.
fn chitin(home: &Path, mock: &MockLlm, args: &[&str]) -> Command {
    let mut cmd = common::chitin(home, args);
    cmd.env("OPENAI_BASE_URL", mock.base_url()).env_remove("RUST_LOG");
    cmd
}

/// What a finished child did, with its peak resident set size.
struct Measured {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    /// `ru_maxrss` of this child alone (wait4), in KiB.
    peak_rss_kib: u64,
}

/// Runs `cmd` to its end and reaps it with `wait4`, which reports the peak
/// RSS of exactly this child (not of other tests' children).
fn run_measured(mut cmd: Command) -> Measured {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("chitin starts");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_thread = std::thread::spawn(move || {
        let mut text = String::new();
        out.read_to_string(&mut text).ok();
        text
    });
    let err_thread = std::thread::spawn(move || {
        let mut text = String::new();
        err.read_to_string(&mut text).ok();
        text
    });
    let pid = child.id() as libc::pid_t;
    let mut raw_status = 0;
    // SAFETY: plain syscall on our own child with valid out-pointers.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let reaped = unsafe { libc::wait4(pid, &mut raw_status, 0, &mut usage) };
    assert_eq!(reaped, pid, "wait4: {}", std::io::Error::last_os_error());
    std::mem::forget(child); // reaped above; `Child` must not wait again
    Measured {
        status: ExitStatus::from_raw(raw_status),
        stdout: out_thread.join().unwrap(),
        stderr: err_thread.join().unwrap(),
        peak_rss_kib: usage.ru_maxrss as u64,
    }
}

fn session_file(home: &Path, key: &str) -> PathBuf {
    JsonlStore::new(home.join("sessions")).path_of(key)
}

/// `{"path": path, "content": "xxxx…"}` of exactly `total` bytes.
fn write_file_args(path: &str, total: usize) -> String {
    let empty = json!({"path": path, "content": ""}).to_string();
    let args = json!({"path": path, "content": "x".repeat(total - empty.len())}).to_string();
    assert_eq!(args.len(), total);
    args
}

/// The tool messages of one recorded request.
fn tool_messages(request: &Value) -> Vec<&Value> {
    request["messages"].as_array().expect("messages").iter().filter(|m| m["role"] == "tool").collect()
}

#[test]
fn a_50_mib_tool_call_is_refused_clearly_kept_out_of_the_session_and_memory_stays_bounded() {
    let size = 50 * MIB;
    let mock = MockLlm::start(vec![
        MockReply::tool_call("write_file", write_file_args("big.txt", size)),
        MockReply::text("That was too big; I will write it in parts."),
        MockReply::text("Still here."),
    ]);
    let home = tempfile::tempdir().unwrap();
    let first = run_measured(chitin(home.path(), &mock, &["agent", "-m", "write a big file", "-s", "cli:big"]));
    eprintln!("peak RSS of `chitin agent -m` with a {} MiB tool call: {} MiB", size / MIB, first.peak_rss_kib / 1024);
    assert!(first.status.success(), "{:?}\n{}", first.status, first.stderr);
    assert_eq!(first.stdout.trim(), "That was too big; I will write it in parts.");
    assert!(!home.path().join("workspace/big.txt").exists(), "the oversized call was not executed");

    // The model got the clear error as the call's result.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let results = tool_messages(&requests[1]);
    assert_eq!(results.len(), 1);
    let text = results[0]["content"].as_str().unwrap();
    let expected = format!(
        "Error: the arguments of `write_file` are {size} bytes, over the limit of {} (config [agent] max_tool_args_kb); split the work into smaller calls.",
        1024 * 1024
    );
    assert_eq!(text, expected);
    // The assistant message replayed with it holds a bounded form that is
    // still a JSON string (OpenAI requires one), here a JSON object.
    let assistant = requests[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "assistant").expect("assistant message");
    let replayed = assistant["tool_calls"][0]["function"]["arguments"].as_str().expect("arguments stay a string");
    assert!(replayed.len() < 4096, "{} bytes replayed", replayed.len());
    let replayed: Value = serde_json::from_str(replayed).expect("the bounded form is JSON");
    assert!(replayed.is_object(), "{replayed}");
    assert!(mock.request_sizes()[1] < 256 * 1024, "second request: {} bytes", mock.request_sizes()[1]);

    // The session file does not hold the arguments (it was 250 MiB).
    let file = session_file(home.path(), "cli:big");
    let file_size = std::fs::metadata(&file).unwrap().len() as usize;
    eprintln!("session file after the turn: {file_size} bytes");
    assert!(file_size < 256 * 1024, "session file is {file_size} bytes");

    // Peak RSS was 535-562 MiB before the cap; the bound leaves room for noise.
    assert!(first.peak_rss_kib < 400 * 1024, "peak RSS {} MiB", first.peak_rss_kib / 1024);
    // The same turn with a 2 KiB call over a 1 KiB cap (same path: refused,
    // not run), in a fresh data dir, for comparison (printed, not asserted:
    // it is a figure).
    let tiny = MockLlm::start(vec![MockReply::tool_call("write_file", write_file_args("big.txt", 2048)), MockReply::text("ok")]);
    let fresh = tempfile::tempdir().unwrap();
    std::fs::write(fresh.path().join("config.toml"), "[agent]\nmax_tool_args_kb = 1\n").unwrap();
    let baseline = run_measured(chitin(fresh.path(), &tiny, &["agent", "-m", "write a small file", "-s", "cli:big"]));
    assert!(baseline.status.success(), "{}", baseline.stderr);
    assert!(tool_messages(&tiny.requests()[1])[0]["content"].as_str().unwrap().contains("over the limit of 1024"));
    eprintln!("peak RSS of the same turn with a 2 KiB call (cap 1 KiB): {} MiB", baseline.peak_rss_kib / 1024);

    // The session goes on, with a small request.
    let second = run_measured(chitin(home.path(), &mock, &["agent", "-m", "are you there?", "-s", "cli:big"]));
    eprintln!("peak RSS of the next, small turn (the baseline): {} MiB", second.peak_rss_kib / 1024);
    assert!(second.status.success(), "{}", second.stderr);
    assert_eq!(second.stdout.trim(), "Still here.");
    let sizes = mock.request_sizes();
    assert_eq!(sizes.len(), 3);
    assert!(sizes[2] < 256 * 1024, "third request: {} bytes", sizes[2]);
    let history = mock.requests()[2]["messages"].as_array().unwrap().clone();
    assert!(history.iter().any(|m| m["role"] == "tool" && m["content"].as_str().unwrap().contains("max_tool_args_kb")), "the refusal is history");
    let session = JsonlStore::new(home.path().join("sessions")).load("cli:big").unwrap();
    let roles: Vec<Role> = session.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Assistant, Role::User, Role::Assistant]);
}

#[test]
fn a_one_mib_call_under_the_cap_is_written_to_the_session_once() {
    // Three checkpoints (awaiting_tools, tools_completed, final_response)
    // and the final save: each used to repeat the arguments.
    let size = 1000 * 1024;
    let args = write_file_args("one.txt", size);
    let mock = MockLlm::start(vec![MockReply::tool_call("write_file", args.clone()), MockReply::text("Written.")]);
    let home = tempfile::tempdir().unwrap();
    let out = run_measured(chitin(home.path(), &mock, &["agent", "-m", "write one file", "-s", "cli:one"]));
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "Written.");
    assert_eq!(std::fs::metadata(home.path().join("workspace/one.txt")).unwrap().len() as usize, size - 31, "executed");
    let file_size = std::fs::metadata(session_file(home.path(), "cli:one")).unwrap().len() as usize;
    eprintln!("session file after a turn with a {size}-byte call and 3 checkpoints: {file_size} bytes ({:.2}x the arguments)", file_size as f64 / size as f64);
    assert!(file_size < size + size / 4, "session file {file_size} bytes for {size} bytes of arguments");
    let session = JsonlStore::new(home.path().join("sessions")).load("cli:one").unwrap();
    assert_eq!(session.messages[1].tool_calls[0].function.arguments, args, "kept whole when under the cap");
    assert!(session.metadata.get("runtime_checkpoint").is_none());
}

/// Issue 9, item 6, at the agent level: an 8 MB tool **error** from a
/// plugin reaches the model cut (the plugin runtime caps errors at 16 KiB)
/// with a marker, and neither the request nor the session carries 8 MB.
#[test]
fn an_8_mb_tool_error_reaches_the_model_cut_and_the_session_stays_small() {
    let mock = MockLlm::start(vec![
        MockReply::tool_call("fail", json!({"text": "E", "repeat": 8_000_000}).to_string()),
        MockReply::text("The tool failed."),
    ]);
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), "[plugins.hostile]\nworkspace = \"read-write\"\n").unwrap();
    let install = run_measured({
        let mut cmd = chitin(home.path(), &mock, &["plugin", "install", common::HOSTILE_WASM]);
        cmd.env_remove("OPENAI_BASE_URL");
        cmd
    });
    assert!(install.status.success(), "{}", install.stderr);

    let out = run_measured(chitin(home.path(), &mock, &["agent", "-m", "try the failing tool", "-s", "cli:fail"]));
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "The tool failed.");
    assert!(out.stderr.len() < 64 * 1024, "stderr: {} bytes", out.stderr.len());
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let results = tool_messages(&requests[1]);
    let text = results[0]["content"].as_str().unwrap();
    eprintln!("tool message for an 8 MB error: {} bytes", text.len());
    assert!(text.len() < 64 * 1024, "{} bytes reached the model", text.len());
    assert!(text.starts_with("Error:") && text.contains("EEEE"), "{}", &text[..200.min(text.len())]);
    assert!(text.contains("8000000 bytes in all"), "the cut is marked: …{}", &text[text.len().saturating_sub(300)..]);
    assert!(mock.request_sizes()[1] < 128 * 1024, "request: {} bytes", mock.request_sizes()[1]);
    let file_size = std::fs::metadata(session_file(home.path(), "cli:fail")).unwrap().len();
    eprintln!("session file after it: {file_size} bytes");
    assert!(file_size < 128 * 1024, "session file {file_size} bytes");
}
