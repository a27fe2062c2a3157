//! Exactly one reply per accepted message, across `kill -9` anywhere
//! (issue 19): the real `chitin gateway` binary, built with the
//! `test-support` crash points (`chitin::durable::crash`), killed by
//! `SIGKILL` at each point of a turn, then started again; the web chat's
//! history and the session file must then hold exactly one reply per
//! message, no duplicate, no orphan tool call.
//!
//! The crash points are compiled only into test builds; `the_shipped_binary_has_no_crash_points`
//! in this file checks the other side.

use crate::common::*;

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chitin::session::{JsonlStore, Message, Role, SessionStore as _};
use chitin_testing::{MockLlm, MockReply, MockTelegram, MockUpdate};
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
    cmd.env("OPENAI_BASE_URL", mock.base_url()).env("CHITIN_GATEWAY_TOKEN", TOKEN).env("RUST_LOG", "chitin=info");
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

const TG_TOKEN: &str = "777019:ONCE-tg-token";

/// `chitin gateway` in `home` with the Telegram channel at `telegram` (the
/// config written by [`write_telegram_config`]).
fn start_telegram(home: &Path, mock: &MockLlm, crash: Option<(&str, &str)>) -> Gateway {
    let mut cmd = chitin(home, &["gateway"]);
    cmd.env("OPENAI_BASE_URL", mock.base_url()).env("CHITIN_GATEWAY_TOKEN", TOKEN).env("TG_TEST_TOKEN", TG_TOKEN).env("RUST_LOG", "chitin=info");
    if let Some((point, matching)) = crash {
        cmd.env("CHITIN_TEST_CRASH_AT", point).env("CHITIN_TEST_CRASH_MATCH", matching);
    }
    Gateway::spawn(cmd)
}

fn write_telegram_config(home: &Path, telegram: &MockTelegram) {
    std::fs::create_dir_all(home.join("workspace")).unwrap();
    std::fs::write(home.join("workspace/notes.txt"), NOTES).unwrap();
    std::fs::write(
        home.join("config.toml"),
        format!(
            "[agent]\nmodel = \"test-model\"\nstream = false\n[gateway]\nlisten = \"127.0.0.1:0\"\n\
             [channels.telegram]\nenabled = true\nallow_from = [\"555\"]\napi_base = \"{}\"\nbot_token = \"${{TG_TEST_TOKEN}}\"\nbot_username = \"chitinbot\"\n",
            telegram.api_base()
        ),
    )
    .unwrap();
}

/// The texts sent to Telegram chat `chat`, once at least `at_least` are
/// there and nothing more came for a second (a duplicate would show).
fn telegram_settled(gw: &Gateway, telegram: &MockTelegram, chat: i64, at_least: usize) -> Vec<String> {
    let sent = || telegram.sent_messages().into_iter().filter(|m| m.chat_id == chat).map(|m| m.text).collect::<Vec<_>>();
    gw.wait_for("the replies in the Telegram chat", || sent().len() >= at_least);
    std::thread::sleep(Duration::from_millis(1000));
    sent()
}

/// The crash matrix through a real chat channel: Telegram (the mock speaks
/// its Bot API byte for byte), a kill -9 at each point of a turn, then a
/// restart. The chat gets exactly one reply per message; the update is not
/// fetched twice (its offset was committed with the inbox row) and the
/// model is asked once where the turn had not run.
#[tokio::test(flavor = "multi_thread")]
async fn telegram_a_kill_at_any_point_of_a_turn_still_gives_exactly_one_reply() {
    let mock = mock();
    let telegram = MockTelegram::with_token(TG_TOKEN, "chitinbot");
    let home = tempfile::tempdir().unwrap();
    write_telegram_config(home.path(), &telegram);
    let cases = [
        ("accepted", 701, "tg hello accepted", "ANSWER: tg hello accepted"),
        ("build", 702, "tg hello build", "ANSWER: tg hello build"),
        ("model", 703, "tg hello model", "ANSWER: tg hello model"),
        ("saved", 704, "tg hello saved", "ANSWER: tg hello saved"),
        ("committed", 705, "tg hello committed", "ANSWER: tg hello committed"),
        ("tool", 706, "read please", NOTES),
    ];
    for (point, chat, text, reply_has) in cases {
        let matching = if point == "tool" { "read_file" } else { text };
        let mut gw = start_telegram(home.path(), &mock, Some((point, matching)));
        let requests_before = mock.request_count();
        telegram.push(MockUpdate::text(chat, 555, text));
        died_by_sigkill(&mut gw);
        // Tool hints (`↳ read_file(…)`) are progress, not replies.
        let replies = |sent: Vec<String>| sent.into_iter().filter(|t| !t.starts_with('↳')).collect::<Vec<_>>();
        let before: Vec<String> = telegram.sent_messages().into_iter().filter(|m| m.chat_id == chat).map(|m| m.text).collect();
        assert!(replies(before).is_empty(), "{point}: no reply was sent before the crash");
        let gw = start_telegram(home.path(), &mock, None);
        gw.wait_for("the reply", || !replies(telegram.sent_messages().into_iter().filter(|m| m.chat_id == chat).map(|m| m.text).collect()).is_empty());
        let sent = replies(telegram_settled(&gw, &telegram, chat, 1));
        assert_eq!(sent.len(), 1, "{point}: exactly one reply: {sent:?}\n{}", gw.stderr());
        assert!(sent[0].contains(reply_has), "{point}: {sent:?}");
        gw.terminate();
        if matches!(point, "accepted" | "build" | "model") {
            assert_eq!(mock.request_count() - requests_before, 1, "{point}: the model was asked once");
        }
        if matches!(point, "saved" | "committed") {
            assert_eq!(mock.request_count() - requests_before, 1, "{point}: the finished turn was not run again");
        }
        assert_consistent(home.path(), &format!("telegram:{chat}"));
    }
}

/// A reply the channel gave up on after its retries (the platform kept
/// failing) is not counted delivered: it stays in the outbox and the next
/// start sends it, once.
#[tokio::test(flavor = "multi_thread")]
async fn telegram_a_reply_given_up_on_is_sent_at_the_next_start() {
    let mock = mock();
    let telegram = MockTelegram::with_token(TG_TOKEN, "chitinbot");
    let home = tempfile::tempdir().unwrap();
    write_telegram_config(home.path(), &telegram);
    let gw = start_telegram(home.path(), &mock, None);
    gw.wait_for("the long poll", || telegram.is_polling());
    // The first attempt and its three retries all fail.
    for _ in 0..4 {
        telegram.fail_next("sendMessage", 502, None);
    }
    telegram.push(MockUpdate::text(801, 555, "unlucky one"));
    gw.wait_for("the retries given up", || gw.stderr().contains("reply kept in the outbox"));
    assert_eq!(telegram.requests_for("sendMessage").len(), 4, "the attack ran: four failed sends");
    assert!(telegram.sent_messages().iter().all(|m| m.chat_id != 801));
    gw.terminate();

    let gw = start_telegram(home.path(), &mock, None);
    let sent = telegram_settled(&gw, &telegram, 801, 1);
    assert_eq!(sent, vec!["ANSWER: unlucky one".to_string()]);
    gw.terminate();
    // Delivered now: a third start sends nothing.
    let gw = start_telegram(home.path(), &mock, None);
    gw.wait_for("the long poll", || telegram.is_polling());
    let sent = telegram_settled(&gw, &telegram, 801, 1);
    assert_eq!(sent.len(), 1, "{sent:?}");
    gw.terminate();
    assert_eq!(mock.request_count(), 1, "the turn ran once");
}

/// An API client whose gateway died mid-turn is not answered after the
/// restart (its connection died with the process; a retry is a new
/// request): the turn is not run again, and its row is closed.
#[tokio::test(flavor = "multi_thread")]
async fn an_api_request_cut_by_a_crash_is_closed_not_run_again() {
    let mock = mock();
    let home = tempfile::tempdir().unwrap();
    write_config(home.path());
    let mut gw = start(home.path(), &mock, Some(("model", "api hello")));
    let body = json!({"model": "chitin", "user": "api-once", "messages": [{"role": "user", "content": "api hello"}]});
    // The head may come early (the API keeps a slow answer's connection
    // alive); the answer itself never comes.
    let answer = match reqwest::Client::new().post(gw.url("/v1/chat/completions")).bearer_auth(TOKEN).json(&body).send().await {
        Ok(response) => response.json::<Value>().await.ok(),
        Err(_) => None,
    };
    assert!(answer.as_ref().is_none_or(|a| a["choices"][0]["message"]["content"].as_str().is_none()), "the client's connection died with the gateway: {answer:?}");
    died_by_sigkill(&mut gw);
    let requests_before = mock.request_count();
    let gw = start(home.path(), &mock, None);
    gw.wait_for("the recovery report", || gw.stderr().contains("abandoned: 1"));
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(mock.request_count(), requests_before, "the API turn was not run again");
    gw.terminate();
    // A later start finds nothing left to recover.
    let gw = start(home.path(), &mock, None);
    std::thread::sleep(Duration::from_millis(500));
    assert!(!gw.stderr().contains("abandoned"), "{}", gw.stderr());
    gw.terminate();
}

/// The web chat takes a retried send (same message id) once: the client
/// that lost its connection before the answer may send again safely.
#[tokio::test(flavor = "multi_thread")]
async fn a_web_chat_send_retried_with_its_id_is_taken_once() {
    let mock = mock();
    let home = tempfile::tempdir().unwrap();
    write_config(home.path());
    let gw = start(home.path(), &mock, None);
    let client = reqwest::Client::new();
    let post = |body: Value| client.post(gw.url("/chat/send")).bearer_auth(TOKEN).json(&body).send();
    let first = post(json!({"session": "r", "text": "only once", "id": "m-1"})).await.unwrap();
    assert_eq!(first.status().as_u16(), 202);
    // The retry: the same id, sent again (and again after the reply).
    let again: Value = post(json!({"session": "r", "text": "only once", "id": "m-1"})).await.unwrap().json().await.unwrap();
    assert_eq!(again["queued"], false, "{again}");
    let shown = settled(&gw, "r", 1).await;
    let again: Value = post(json!({"session": "r", "text": "only once", "id": "m-1"})).await.unwrap().json().await.unwrap();
    assert_eq!(again["queued"], false, "{again}");
    assert_one_exchange(&shown, "only once", "ANSWER: only once");
    // An id from another session is another message; a bad id is refused.
    assert_eq!(post(json!({"session": "r2", "text": "only once", "id": "m-1"})).await.unwrap().status().as_u16(), 202);
    let bad = post(json!({"session": "r", "text": "x", "id": "../m 1"})).await.unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    settled(&gw, "r2", 1).await;
    gw.terminate();
    assert_eq!(mock.request_count(), 2, "one turn per message");
}

/// The soak: 1 000 messages over 50 web chat sessions (each session's
/// messages one after another, half a second apart, as a person writes),
/// while the gateway is killed with SIGKILL every 0.3 to 1.2 s of its life
/// and started again. The clients
/// retry a send that got no answer with the same message id. At the end
/// every session holds its 20 messages once each and exactly one reply to
/// each, in order, with nothing left pending.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "slow: soak, 1 000 messages with kill -9 every few seconds"]
async fn soak_1000_messages_over_50_chats_with_kills_counts_match_exactly() {
    const CHATS: usize = 50;
    const PER_CHAT: usize = 20;
    let mock = mock();
    let home = tempfile::tempdir().unwrap();
    write_config(home.path());
    let base = Arc::new(std::sync::Mutex::new(String::new()));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let kills = Arc::new(AtomicUsize::new(0));
    // The killer: start, let it run a while, SIGKILL, start again.
    let killer = {
        let (home, base, done, kills, url) = (home.path().to_path_buf(), base.clone(), done.clone(), kills.clone(), mock.base_url());
        std::thread::spawn(move || {
            let mut seed = 0x9e37_79b9_u64;
            loop {
                let mut cmd = chitin(&home, &["gateway"]);
                cmd.env("OPENAI_BASE_URL", &url).env("CHITIN_GATEWAY_TOKEN", TOKEN);
                let mut gw = Gateway::spawn(cmd);
                *base.lock().unwrap() = gw.base();
                if done.load(Ordering::SeqCst) {
                    return gw;
                }
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                std::thread::sleep(Duration::from_millis(300 + seed % 900));
                if done.load(Ordering::SeqCst) {
                    return gw;
                }
                gw.child.kill().unwrap();
                gw.wait_exit();
                kills.fetch_add(1, Ordering::SeqCst);
            }
        })
    };
    let client = reqwest::Client::builder().timeout(Duration::from_secs(5)).build().unwrap();
    let current = |base: &Arc<std::sync::Mutex<String>>| base.lock().unwrap().clone();
    while current(&base).is_empty() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut chats = tokio::task::JoinSet::new();
    for chat in 0..CHATS {
        let (client, base) = (client.clone(), base.clone());
        chats.spawn(async move {
            let session = format!("soak{chat}");
            for n in 0..PER_CHAT {
                let text = format!("soak {chat}-{n}");
                let body = json!({"session": session, "text": text, "id": format!("m{n}")});
                loop {
                    let url = format!("{}/chat/send", current(&base));
                    match client.post(url).bearer_auth(TOKEN).json(&body).send().await {
                        Ok(r) if r.status().as_u16() == 202 => break,
                        _ => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
                // Then wait for its reply before writing the next one.
                loop {
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    let url = format!("{}/chat/history?session={session}", current(&base));
                    let Ok(response) = client.get(url).bearer_auth(TOKEN).send().await else { continue };
                    let Ok(shown) = response.json::<Value>().await else { continue };
                    let replies = shown["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count());
                    if replies > n {
                        break;
                    }
                }
                // As a person writes: a pause before the next message, so
                // the soak lasts (and is killed) the same on a fast machine.
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
    }
    let all = async {
        while let Some(joined) = chats.join_next().await {
            joined.unwrap();
        }
    };
    tokio::time::timeout(Duration::from_secs(900), all).await.expect("the soak finished within 15 minutes");
    done.store(true, Ordering::SeqCst);
    let gw = tokio::task::spawn_blocking(move || killer.join().unwrap()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    gw.terminate();
    let kills = kills.load(Ordering::SeqCst);
    let mut total = 0;
    for chat in 0..CHATS {
        let messages = assert_consistent(home.path(), &format!("web:soak{chat}"));
        let users: Vec<String> = messages.iter().filter(|m| m.role == Role::User).map(|m| m.text().to_string()).collect();
        let replies: Vec<String> = messages.iter().filter(|m| m.role == Role::Assistant && !m.text().is_empty()).map(|m| m.text().to_string()).collect();
        let expected: Vec<String> = (0..PER_CHAT).map(|n| format!("soak {chat}-{n}")).collect();
        assert_eq!(users, expected, "chat {chat}: each message once, in order");
        let answers: Vec<String> = expected.iter().map(|t| format!("ANSWER: {t}")).collect();
        assert_eq!(replies, answers, "chat {chat}: exactly one reply to each");
        total += replies.len();
    }
    assert_eq!(total, CHATS * PER_CHAT);
    assert!(kills >= 6, "the attack ran: only {kills} kills");
    eprintln!("soak: {total} messages answered once each across {kills} kills");
}

/// The streamed reply of the Telegram tests below: deltas 40 ms apart, so
/// the whole reply is in well within Telegram's 1 s edit interval: at a
/// crash right after the commit, the chat still shows the first piece.
fn streaming_mock() -> MockLlm {
    MockLlm::with_handler(|request, _| MockReply::text(format!("STREAMED reply to {} with a few more words to stream along", last_user(request))))
        .with_stream_pieces(6)
        .with_chunk_delay(Duration::from_millis(40))
}

/// The message a Telegram chat finally shows for a streamed reply: the
/// chat's messages, each with its last edit applied.
fn telegram_shown(telegram: &MockTelegram, chat: i64) -> Vec<(i64, String)> {
    let edits = telegram.edits();
    telegram
        .sent_messages()
        .into_iter()
        .filter(|m| m.chat_id == chat && !m.text.starts_with('↳'))
        .map(|m| {
            let last = edits.iter().filter(|e| e.chat_id == chat && e.message_id == m.message_id).last().map(|e| e.text.clone());
            (m.message_id, last.unwrap_or(m.text))
        })
        .collect()
}

/// A streamed reply across kill -9: killed right after its stream created
/// the platform message (the turn resumes and its stream goes on in that
/// message), and killed after the turn committed while the stream was
/// still being edited (the re-sent reply is the final edit of that
/// message). Either way the chat shows one message holding the whole reply.
#[tokio::test(flavor = "multi_thread")]
async fn telegram_a_streamed_reply_cut_by_a_crash_is_finished_in_the_same_message() {
    let mock = streaming_mock();
    let telegram = MockTelegram::with_token(TG_TOKEN, "chitinbot");
    let home = tempfile::tempdir().unwrap();
    write_telegram_config(home.path(), &telegram);
    let config = std::fs::read_to_string(home.path().join("config.toml")).unwrap().replace("stream = false", "stream = true");
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    for (point, matching, chat, text, model_requests) in [("streaming", "STREAMED", 901, "stream one", 2), ("committed", "stream two", 902, "stream two", 1)] {
        let before = mock.request_count();
        let mut gw = start_telegram(home.path(), &mock, Some((point, matching)));
        telegram.push(MockUpdate::text(chat, 555, text));
        died_by_sigkill(&mut gw);
        let partial = telegram_shown(&telegram, chat);
        assert_eq!(partial.len(), 1, "{point}: the attack ran: the stream had created its message before the crash: {partial:?}");
        let full = format!("STREAMED reply to {text} with a few more words to stream along");
        assert_ne!(partial[0].1, full, "{point}: the crash cut the stream short");
        let gw = start_telegram(home.path(), &mock, None);
        gw.wait_for("the streamed reply finished", || telegram_shown(&telegram, chat).first().is_some_and(|(_, t)| *t == full));
        std::thread::sleep(Duration::from_millis(1000));
        let shown = telegram_shown(&telegram, chat);
        assert_eq!(shown, vec![(partial[0].0, full.clone())], "{point}: one message, the same one, holding the whole reply\n{}", gw.stderr());
        gw.terminate();
        assert_eq!(mock.request_count() - before, model_requests, "{point}");
        assert_consistent(home.path(), &format!("telegram:{chat}"));
    }
}
