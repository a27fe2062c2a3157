//! Exactly one reply per accepted message, across `kill -9` anywhere
//! (issue 19): the real `chitin gateway` binary, built with the
//! `test-support` crash points (`chitin::durable::crash`), killed by
//! `SIGKILL` at each point of a turn, then started again; the web chat's
//! history and the session file must then hold exactly one reply per
//! message, no duplicate, no orphan tool call.
//!
//! The crash points are compiled only into test builds; `the_shipped_binary_has_no_crash_points`
//! in this file checks the other side.

mod common;
use common::*;

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chitin::session::{JsonlStore, Message, Role, SessionStore as _};
use chitin::testing::{MockLlm, MockReply};
use serde_json::{Value, json};

const TOKEN: &str = "once-token";

/// What the notes file holds: a read-only call that was re-run after the
/// crash shows it to the model.
const NOTES: &str = "NOTES-SENTINEL-41";

fn write_config(home: &Path) {
    std::fs::write(home.join("config.toml"), "[agent]\nmodel = \"test-model\"\n[gateway]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    std::fs::create_dir_all(home.join("workspace")).unwrap();
    std::fs::write(home.join("workspace/notes.txt"), NOTES).unwrap();
}

/// `chitin gateway` in `home`; with `crash`, it kills itself at that point
/// (`CHITIN_TEST_CRASH_AT`) in the turn whose text contains the match.
fn start(home: &Path, mock: &MockLlm, crash: Option<(&str, &str)>) -> Gateway {
    let mut cmd = chitin(home, &["gateway"]);
    cmd.env("OPENAI_BASE_URL", mock.base_url()).env("CHITIN_GATEWAY_TOKEN", TOKEN);
    if let Some((point, matching)) = crash {
        cmd.env("CHITIN_TEST_CRASH_AT", point).env("CHITIN_TEST_CRASH_MATCH", matching);
    }
    Gateway::spawn(cmd)
}

/// The last user text of a model request.
fn last_user(request: &Value) -> String {
    request["messages"].as_array().into_iter().flatten().filter(|m| m["role"] == "user").last().and_then(|m| m["content"].as_str()).unwrap_or_default().to_string()
}

/// The scripted model: `read please` reads the notes, `write please`
/// writes a file (and writes again when told the first call was
/// interrupted), a summary request gets a summary, anything else is
/// answered `ANSWER: <text>`.
fn mock() -> MockLlm {
    MockLlm::with_handler(|request, _| {
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        let last = messages.last().cloned().unwrap_or_default();
        let said = last_user(request);
        if last["role"] == "tool" {
            let result = last["content"].as_str().unwrap_or_default();
            if result.starts_with("Interrupted:") {
                return MockReply::tool_call("write_file", json!({"path": "out.txt", "content": "written again"}).to_string());
            }
            return MockReply::text(format!("TOOL-DONE: {said} / {}", result.chars().take(80).collect::<String>()));
        }
        if said.contains("Transcript to archive") {
            return MockReply::text("SUMMARY of the cleared conversation");
        }
        if said.contains("read please") {
            return MockReply::tool_call("read_file", json!({"path": "notes.txt"}).to_string());
        }
        if said.contains("write please") {
            return MockReply::tool_call("write_file", json!({"path": "out.txt", "content": "first"}).to_string());
        }
        MockReply::text(format!("ANSWER: {said}"))
    })
}

/// Sends `text` to web session `session`; `false` when the gateway died
/// before it answered (a crash right after accepting it).
async fn send(gw: &Gateway, session: &str, text: &str) -> bool {
    let sent = reqwest::Client::new().post(gw.url("/chat/send")).bearer_auth(TOKEN).json(&json!({"session": session, "text": text})).send().await;
    match sent {
        Ok(response) => {
            assert_eq!(response.status().as_u16(), 202);
            true
        }
        Err(_) => false,
    }
}

/// The web chat's history of `session`: (role, text).
async fn history(gw: &Gateway, session: &str) -> Vec<(String, String)> {
    let response = reqwest::Client::new().get(gw.url(&format!("/chat/history?session={session}"))).bearer_auth(TOKEN).send().await.unwrap();
    let body: Value = response.json().await.unwrap();
    body["messages"].as_array().unwrap().iter().map(|m| (m["role"].as_str().unwrap().to_string(), m["text"].as_str().unwrap().to_string())).collect()
}

/// Waits until the history of `session` holds `replies` assistant messages,
/// then a little longer, and returns it (a duplicate would show by then).
async fn settled(gw: &Gateway, session: &str, replies: usize) -> Vec<(String, String)> {
    for _ in 0..1500 {
        let shown = history(gw, session).await;
        if shown.iter().filter(|(role, _)| role == "assistant").count() >= replies {
            tokio::time::sleep(Duration::from_millis(700)).await;
            return history(gw, session).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{session}: never saw {replies} replies; stderr: {}", gw.stderr());
}

/// Waits for the gateway to die by its crash point.
fn died_by_sigkill(gw: &mut Gateway) {
    let status = gw.wait_exit();
    assert_eq!(status.signal(), Some(9), "expected the crash point's SIGKILL; {status:?}; stderr: {}", gw.stderr());
    assert!(gw.stderr().contains("crash point"), "{}", gw.stderr());
}

/// The session on disk is consistent: no turn left pending, every tool
/// call answered exactly once, every result answering a call.
fn assert_consistent(home: &Path, key: &str) -> Vec<Message> {
    let session = JsonlStore::new(home.join("sessions")).load(key).unwrap();
    for flag in ["pending_user_turn", "runtime_checkpoint", "pending_inbox"] {
        assert!(!session.metadata.contains_key(flag), "{key}: {flag} left: {:?}", session.metadata);
    }
    let calls: Vec<String> = session.messages.iter().flat_map(|m| m.tool_calls.iter().map(|c| c.id.clone())).collect();
    for call in &calls {
        let answers = session.messages.iter().filter(|m| m.role == Role::Tool && m.tool_call_id.as_deref() == Some(call.as_str())).count();
        assert_eq!(answers, 1, "{key}: call {call} answered {answers} times");
    }
    for result in session.messages.iter().filter(|m| m.role == Role::Tool) {
        assert!(calls.contains(result.tool_call_id.as_ref().unwrap()), "{key}: orphan result {result:?}");
    }
    session.messages
}

/// Exactly one user message with `text` and one reply after it.
fn assert_one_exchange(shown: &[(String, String)], text: &str, reply_has: &str) {
    let users = shown.iter().filter(|(role, t)| role == "user" && t == text).count();
    assert_eq!(users, 1, "{text}: {shown:?}");
    let replies: Vec<&String> = shown.iter().filter(|(role, _)| role == "assistant").map(|(_, t)| t).collect();
    assert_eq!(replies.len(), 1, "exactly one reply to {text}: {shown:?}");
    assert!(replies[0].contains(reply_has), "{text}: {shown:?}");
    assert!(!replies[0].contains("interrupted before it finished"), "no 'ask again' when the turn could be finished: {shown:?}");
}

/// The crash matrix: a kill -9 at each point of a turn, then a restart.
/// One data dir for all cases (the plugins compile once), one web session
/// per case.
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_at_any_point_of_a_turn_still_gives_exactly_one_reply() {
    let mock = mock();
    let home = tempfile::tempdir().unwrap();
    write_config(home.path());
    let cases: [(&str, &str, &str, &str); 8] = [
        // (crash point, session, message, what the one reply holds)
        ("accepted", "c-accepted", "hello accepted", "ANSWER: hello accepted"),
        ("build", "c-build", "hello build", "ANSWER: hello build"),
        ("model", "c-model", "hello model", "ANSWER: hello model"),
        ("saved", "c-saved", "hello saved", "ANSWER: hello saved"),
        ("committed", "c-committed", "hello committed", "ANSWER: hello committed"),
        // A read-only call in flight is run again: the model sees the notes.
        ("tool", "c-read", "read please", NOTES),
        // A writing call in flight is not: the model is told, and re-issues it.
        ("tool", "c-write", "write please", "TOOL-DONE"),
        // After the reply was recorded and handed to the web chat.
        ("committed", "c-tool-committed", "read please now", NOTES),
    ];
    for (point, session, text, reply_has) in cases {
        let matching = if point == "tool" { if text.starts_with("read") { "read_file" } else { "write_file" } } else { text };
        let mut gw = start(home.path(), &mock, Some((point, matching)));
        let requests_before = mock.request_count();
        send(&gw, session, text).await;
        died_by_sigkill(&mut gw);
        let gw = start(home.path(), &mock, None);
        let shown = settled(&gw, session, 1).await;
        assert_one_exchange(&shown, text, reply_has);
        gw.terminate();
        let messages = assert_consistent(home.path(), &format!("web:{session}"));
        let users = messages.iter().filter(|m| m.role == Role::User).count();
        assert_eq!(users, 1, "{point}: the user message is stored once: {messages:?}");
        match point {
            // The model was never asked before the crash, once after.
            "accepted" | "build" | "model" => assert_eq!(mock.request_count() - requests_before, 1, "{point}"),
            // The turn had finished: not run again.
            "saved" | "committed" if !text.contains("read") => assert_eq!(mock.request_count() - requests_before, 1, "{point}"),
            _ => {}
        }
        if text == "write please" {
            assert_eq!(std::fs::read_to_string(home.path().join("workspace/out.txt")).unwrap(), "written again", "the model re-issued the interrupted write");
            let interrupted = messages.iter().filter(|m| m.role == Role::Tool && m.text().starts_with("Interrupted:")).count();
            assert_eq!(interrupted, 1, "the model was told the first call was interrupted: {messages:?}");
        }
        if text == "read please" {
            assert!(!messages.iter().any(|m| m.role == Role::Tool && m.text().starts_with("Interrupted:")), "the read was re-run, not reported interrupted: {messages:?}");
        }
    }
}

/// A message that kills its process every time is answered, once, with a
/// failure after three attempts, and the session goes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_poison_message_is_answered_once_with_a_failure() {
    let mock = mock();
    let home = tempfile::tempdir().unwrap();
    write_config(home.path());
    let mut gw = start(home.path(), &mock, Some(("model", "poison pill")));
    assert!(send(&gw, "p", "poison pill").await);
    died_by_sigkill(&mut gw);
    // Each start resumes it, and it kills that process too.
    for _ in 0..2 {
        let mut gw = start(home.path(), &mock, Some(("model", "poison pill")));
        died_by_sigkill(&mut gw);
    }
    let gw = start(home.path(), &mock, Some(("model", "poison pill")));
    let shown = settled(&gw, "p", 1).await;
    assert_one_exchange(&shown, "poison pill", "will not try it again");
    assert_eq!(mock.request_count(), 0, "the crash came before every model request");
    assert!(send(&gw, "p", "and now?").await);
    let shown = settled(&gw, "p", 2).await;
    assert_eq!(shown.last().unwrap().1, "ANSWER: and now?", "{shown:?}");
    gw.terminate();
    assert_consistent(home.path(), "web:p");
}

/// `/new` killed after the session was cleared (before its reply was
/// recorded), and again while the cleared conversation was being archived:
/// one reply, an empty session, and the old conversation in the archive.
#[tokio::test(flavor = "multi_thread")]
async fn a_kill_during_new_loses_neither_the_reply_nor_the_conversation() {
    let mock = mock();
    let home = tempfile::tempdir().unwrap();
    write_config(home.path());
    for (point, session) in [("new", "n-clear"), ("new_archive", "n-archive")] {
        let gw = start(home.path(), &mock, None);
        assert!(send(&gw, session, &format!("remember {session} please")).await);
        settled(&gw, session, 1).await;
        gw.terminate();
        let matching = if point == "new" { "/new".to_string() } else { format!("web:{session}") };
        let mut gw = start(home.path(), &mock, Some((point, &matching)));
        send(&gw, session, "/new").await;
        died_by_sigkill(&mut gw);
        let gw = start(home.path(), &mock, None);
        let archive = home.path().join("workspace/memory/history.jsonl");
        gw.wait_for("the cleared conversation in the archive", || {
            std::fs::read_to_string(&archive).is_ok_and(|text| text.lines().any(|l| l.contains(&format!("web:{session}"))))
        });
        gw.terminate();
        let session_file = JsonlStore::new(home.path().join("sessions")).load(&format!("web:{session}")).unwrap();
        assert!(!session_file.messages.iter().any(|m| m.text().contains("remember")), "{point}: cleared: {:?}", session_file.messages);
        assert!(!session_file.metadata.contains_key("pending_archives"), "{point}: archived and unmarked");
        let entries = std::fs::read_to_string(&archive).unwrap().lines().filter(|l| l.contains(&format!("web:{session}"))).count();
        assert_eq!(entries, 1, "{point}: archived once");
        // The `/new` reply is a command's: not in the shown history, but
        // recorded once in the inbox (and the log says it was sent once).
    }
}

/// An accepted message whose gateway was stopped (SIGTERM) mid-turn is
/// resumed at the next start and answered once; the stop does not count
/// as a failed attempt.
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_stopped_by_shutdown_is_resumed_at_the_next_start() {
    let released = Arc::new(AtomicUsize::new(0));
    let hang = released.clone();
    let mock = MockLlm::with_handler(move |request, _| {
        let said = last_user(request);
        if said.contains("slow one") && hang.fetch_add(1, Ordering::SeqCst) == 0 {
            return MockReply::Hang;
        }
        MockReply::text(format!("ANSWER: {said}"))
    });
    let home = tempfile::tempdir().unwrap();
    write_config(home.path());
    let mut gw = start(home.path(), &mock, None);
    assert!(send(&gw, "s", "slow one").await);
    gw.wait_for("the model request", || mock.request_count() == 1);
    assert!(gw.sigterm().success(), "{}", gw.stderr());
    let gw = start(home.path(), &mock, None);
    let shown = settled(&gw, "s", 1).await;
    assert_one_exchange(&shown, "slow one", "ANSWER: slow one");
    gw.terminate();
    assert_consistent(home.path(), "web:s");
}

/// The crash points are compiled into test builds only: the binary these
/// tests run has them (the matrix above depends on it), and the source
/// gates every one behind the `test-support` feature, which is off by
/// default. (`strings target/release/chitin | grep CHITIN_TEST_CRASH_AT`
/// on a plain `cargo build --release` prints nothing; see the README.)
#[test]
fn crash_points_are_behind_an_off_by_default_feature() {
    let manifest = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let features = manifest.split("[features]").nth(1).and_then(|rest| rest.split("\n[").next()).unwrap();
    assert!(features.contains("test-support = []"), "{features}");
    assert!(!features.contains("default"), "test-support must not be a default feature: {features}");
    let tested = std::fs::read(CHITIN).unwrap();
    assert!(tested.windows(20).any(|w| w == b"CHITIN_TEST_CRASH_AT"), "the tested binary has the crash points");
}
