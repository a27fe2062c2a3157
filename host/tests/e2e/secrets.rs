//! Issue 18, "what was seen 0": most Telegram replies never arrived when the
//! Bot API sent a response's head and body in separate writes (as HTTP/2
//! servers do): every send that carries the token hung to the call's limit.
//! Through the real `chitin gateway`, against a MockTelegram that splits
//! every response, ten messages over three chats are each answered exactly
//! once within a few seconds.

use crate::common::*;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use chitin_testing::{MockLlm, MockReply, MockTelegram, MockUpdate, SentMessage};

/// The replies a chat got: sent messages other than the turn's progress
/// message (its lines start with `↳` or `…`, see `channels::progress`).
fn replies(telegram: &MockTelegram) -> Vec<SentMessage> {
    telegram.sent_messages().into_iter().filter(|m| !m.text.starts_with('↳') && !m.text.starts_with('…')).collect()
}

fn config(ws: &Path, telegram: &MockTelegram) -> String {
    format!(
        "workspace = \"{ws}\"\n[agent]\nmodel = \"test-model\"\nstream = false\n[gateway]\nlisten = \"127.0.0.1:0\"\nauth_token = \"\"\n\
         [channels.telegram]\nenabled = true\nallow_from = [\"555\"]\napi_base = \"{base}\"\nbot_token = \"${{TG_TEST_TOKEN}}\"\nbot_username = \"chitinbot\"\n",
        ws = ws.display(),
        base = telegram.api_base(),
    )
}

/// Waits up to `limit` for `cond`; false if it never held.
fn within(limit: Duration, cond: impl Fn() -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < limit {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

#[test]
fn telegram_answers_every_message_once_when_head_and_body_come_apart() {
    let tg_token = "606060:SPLIT-tg-distinctive";
    let telegram = MockTelegram::with_token(tg_token, "chitinbot");
    telegram.split_head_and_body();
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let mock = MockLlm::start((0..10).map(|i| MockReply::text(format!("answer {i}"))).collect::<Vec<_>>());
    std::fs::write(home.path().join("config.toml"), config(&ws, &telegram)).unwrap();
    let mut cmd = chitin(home.path(), &["gateway"]);
    cmd.env("OPENAI_BASE_URL", mock.base_url()).env("TG_TEST_TOKEN", tg_token).env("RUST_LOG", "chitin=info");
    let gw = Gateway::spawn(cmd);
    gw.wait_for("the poll", || telegram.is_polling());

    // Rounds of one message to each chat (a chat's next message waits for
    // its answer, so none is merged into a running turn): 4 + 3 + 3.
    let chats = [701_i64, 702, 703];
    let started = Instant::now();
    let mut sent = 0;
    let mut per_chat: BTreeMap<i64, usize> = BTreeMap::new();
    while sent < 10 {
        for chat in chats {
            if sent == 10 {
                break;
            }
            telegram.push(MockUpdate::text(chat, 555, format!("message {sent}")));
            *per_chat.entry(chat).or_default() += 1;
            sent += 1;
        }
        let answered = within(Duration::from_secs(20), || replies(&telegram).len() >= sent);
        assert!(answered, "after {sent} messages only {} answered in {:?}; stderr: {}", replies(&telegram).len(), started.elapsed(), gw.stderr());
    }
    let took = started.elapsed();
    // Late duplicates would show up now.
    std::thread::sleep(Duration::from_millis(1_500));
    let err = gw.terminate();
    let sent_replies = replies(&telegram);
    assert_eq!(sent_replies.len(), 10, "each message answered exactly once: {sent_replies:?}");
    let mut got: BTreeMap<i64, usize> = BTreeMap::new();
    for reply in &sent_replies {
        *got.entry(reply.chat_id).or_default() += 1;
    }
    assert_eq!(got, per_chat, "answers by chat");
    let mut texts: Vec<&str> = sent_replies.iter().map(|m| m.text.as_str()).collect();
    texts.sort();
    texts.dedup();
    assert_eq!(texts.len(), 10, "no answer sent twice: {texts:?}");
    assert!(took < Duration::from_secs(20), "ten answers took {took:?}");
    // The sends that carry the token went through the split responses:
    // typing and replies, each authorized (the host filled in the token).
    assert!(!telegram.chat_actions().is_empty(), "typing was shown");
    assert!(telegram.requests_for("sendMessage").iter().all(|r| r.authorized));
    assert!(!err.contains("stopped after"), "a callback hit its time limit: {err}");
    assert!(!err.contains(tg_token), "the token leaked into the log");
}
