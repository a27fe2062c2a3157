//! The channel manager end to end: the real `chitin gateway` with the
//! echo-channel installed, a MockLlm, and a scripted toy-Telegram server on
//! 127.0.0.1 (`api_base`) that re-sends every update at or past the polled
//! offset until a higher offset confirms it, as Telegram does.

use crate::common::{self, *};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chitin_testing::{MockLlm, MockReply};

const TOKEN: &str = "tok987654ZZdistinctive";

/// The scripted platform: updates by id; `polls` logs each poll's path.
/// A hostile one too: a request for a file (`/file/`) or to `/redir…` is
/// answered with a 302 to `redirect_private` when its path says `private`,
/// else to `redirect_other`, and logged in `redirected`.
#[derive(Default)]
struct Platform {
    updates: Vec<(u64, String)>,
    polls: Vec<String>,
    redirect_private: String,
    redirect_other: String,
    redirected: Vec<String>,
}

struct Server {
    port: u16,
    state: Arc<Mutex<Platform>>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(Platform::default()));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let state = shared.clone();
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(stream.try_clone().unwrap());
                    let mut line = String::new();
                    if reader.read_line(&mut line).is_err() {
                        return;
                    }
                    let path = line.split_whitespace().nth(1).unwrap_or_default().to_string();
                    loop {
                        let mut h = String::new();
                        if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                            break;
                        }
                    }
                    if path.contains("/file/") || path.starts_with("/redir") {
                        let location = {
                            let mut s = state.lock().unwrap();
                            s.redirected.push(path.clone());
                            if path.contains("private") { s.redirect_private.clone() } else { s.redirect_other.clone() }
                        };
                        let mut stream = stream;
                        let _ = write!(stream, "HTTP/1.1 302 Found\r\nlocation: {location}\r\ncontent-length: 5\r\nconnection: close\r\n\r\nmoved");
                        let _ = stream.flush();
                        return;
                    }
                    let offset: u64 = path.split("offset=").nth(1).and_then(|r| r.split('&').next()).and_then(|n| n.parse().ok()).unwrap_or(0);
                    // Hold an empty poll a little, as a long poll would.
                    let mut body = String::new();
                    for _ in 0..20 {
                        let mut s = state.lock().unwrap();
                        let pending: Vec<_> = s.updates.iter().filter(|(id, _)| *id >= offset).cloned().collect();
                        if !pending.is_empty() {
                            s.polls.push(path.clone());
                            let items: Vec<String> = pending
                                .iter()
                                .map(|(id, text)| {
                                    let text = text.replace("{PATH}", &path);
                                    format!("{{\"id\":{id},\"text\":{}}}", serde_json::Value::from(text))
                                })
                                .collect();
                            body = format!("{{\"updates\":[{}]}}", items.join(","));
                            break;
                        }
                        drop(s);
                        std::thread::sleep(Duration::from_millis(25));
                    }
                    if body.is_empty() {
                        state.lock().unwrap().polls.push(path.clone());
                        body = "{\"updates\":[]}".into();
                    }
                    let mut stream = stream;
                    let _ = write!(stream, "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                    let _ = stream.flush();
                    let _ = stream.read(&mut [0u8; 1]);
                });
            }
        });
        Server { port, state }
    }

    fn push(&self, id: u64, text: &str) {
        self.state.lock().unwrap().updates.push((id, text.into()));
    }

    /// Offsets of the polls so far.
    fn offsets(&self) -> Vec<u64> {
        self.state.lock().unwrap().polls.iter().filter_map(|p| p.split("offset=").nth(1)?.split('&').next()?.parse().ok()).collect()
    }

    fn polls(&self) -> Vec<String> {
        self.state.lock().unwrap().polls.clone()
    }
}

fn install(home: &Path) {
    std::fs::create_dir_all(home.join("plugins")).unwrap();
    std::fs::copy(ECHO_CHANNEL_WASM, home.join("plugins/echo-channel.wasm")).unwrap();
}

fn config(port: u16, allow: &str) -> String {
    format!(
        "[agent]\nmodel = \"test-model\"\nstream = false\n[gateway]\nlisten = \"127.0.0.1:0\"\nauth_token = \"\"\n\
         [plugins.echo-channel]\nnetwork = [\"127.0.0.1:{port}\", \"api.example.test\"]\n\
         [channels.echo]\nenabled = true\nplugin = \"echo-channel\"\nallow_from = [{allow}]\napi_base = \"http://127.0.0.1:{port}\"\ntoken = \"${{ECHO_TEST_TOKEN}}\"\ngreeting = \"hi\"\n"
    )
}

/// This module's way to start a gateway (a trait: `Gateway` comes from
/// chitin-testing and every module of the binary adds its own).
trait Start {
    fn start(home: &Path, mock: &MockLlm, config: &str, crash: bool) -> Gateway;
}

impl Start for Gateway {
    fn start(home: &Path, mock: &MockLlm, config: &str, crash: bool) -> Gateway {
        std::fs::write(home.join("config.toml"), config).unwrap();
        let mut cmd = chitin(home, &["gateway"]);
        cmd.env("OPENAI_BASE_URL", mock.base_url()).env("ECHO_TEST_TOKEN", TOKEN).env("RUST_LOG", "chitin=info");
        if crash {
            cmd.env("CHITIN_TEST_CRASH_AT", "channel_commit");
        }
        Gateway::spawn(cmd)
    }
}

/// A channel's committed record as text: its snapshot and its journal
/// (either may be absent).
fn record_text(home: &Path, channel: &str) -> String {
    let read = |ext: &str| std::fs::read_to_string(home.join(format!("channels/{channel}.{ext}"))).unwrap_or_default();
    let text = read("json") + &read("journal");
    assert!(!text.is_empty(), "no record of channel {channel}");
    text
}

fn delivered(stderr: &str) -> usize {
    stderr.matches("reply delivered").count()
}

/// (a) + (e): an update reaches the agent, the reply is delivered through
/// the component; the token the server echoes back reaches neither the
/// component (so not the agent) nor the logs.
#[test]
fn round_trip_and_the_token_never_reaches_the_component_or_logs() {
    let home = tempfile::tempdir().unwrap();
    install(home.path());
    let server = Server::start();
    server.push(0, "hello via {PATH}");
    let mock = MockLlm::start(vec![MockReply::text("pong")]);
    let gw = Gateway::start(home.path(), &mock, &config(server.port, "\"*\""), false);
    gw.wait_for("the reply delivered", || delivered(&gw.stderr()) == 1);
    let err = gw.terminate();
    assert!(err.contains("chat-1:4"), "the echo component's deliver got the 4-byte reply: {err}");
    assert!(server.polls()[0].contains(TOKEN), "the host substituted the token for the audience: {:?}", server.polls());
    let asked = serde_json::to_string(&mock.requests()).unwrap();
    assert!(asked.contains("hello via /bot{{secret:token}}/getUpdates"), "the agent got the redacted echo: {asked}");
    assert!(!asked.contains(TOKEN), "the token reached the component's emit: {asked}");
    assert!(!err.contains(TOKEN), "the token is in the gateway's log");
    let record = record_text(home.path(), "echo");
    assert!(!record.contains(TOKEN));
    assert_eq!(mock.request_count(), 1);
}

/// (b): SIGKILL after the step returned and before its commit; the restart
/// polls the same offset, the platform re-sends, and the agent answers
/// exactly once. The crash point is the one that proves the guarantee: the
/// update was fetched and translated but nothing was committed, so only the
/// platform's re-send can bring it back (nothing lost), and the earlier run
/// never published it (nothing twice).
#[test]
fn kill_between_poll_and_commit_loses_nothing_and_duplicates_nothing() {
    let home = tempfile::tempdir().unwrap();
    install(home.path());
    let server = Server::start();
    server.push(0, "remember me");
    let mock = MockLlm::start(vec![MockReply::text("once"), MockReply::text("twice?!")]);
    let mut crashed = Gateway::start(home.path(), &mock, &config(server.port, "\"*\""), true);
    let status = crashed.child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL), "killed at the crash point; stderr: {}", crashed.stderr());
    assert_eq!(mock.request_count(), 0, "nothing reached the agent before the commit");
    assert_eq!(server.offsets(), vec![0]);
    let gw = Gateway::start(home.path(), &mock, &config(server.port, "\"*\""), false);
    gw.wait_for("the reply delivered", || delivered(&gw.stderr()) == 1);
    gw.wait_for("a poll past the update", || server.offsets().contains(&1));
    let err = gw.terminate();
    assert_eq!(mock.request_count(), 1, "exactly one model request: {err}");
    assert_eq!(delivered(&err), 1);
    let asked = serde_json::to_string(&mock.requests()).unwrap();
    assert!(asked.contains("remember me"));
}

/// (c) + (d): offsets never go back across a graceful restart, and an
/// unlisted sender gets nothing and costs no model request.
#[test]
fn offsets_are_monotonic_across_restarts_and_strangers_cost_nothing() {
    let home = tempfile::tempdir().unwrap();
    install(home.path());
    let server = Server::start();
    server.push(0, "from a stranger");
    server.push(1, "another");
    let mock = MockLlm::start(vec![MockReply::text("no")]);
    // The echo component's sender is `user-1`; allow someone else only.
    let cfg = config(server.port, "\"someone-else\"");
    let gw = Gateway::start(home.path(), &mock, &cfg, false);
    gw.wait_for("a poll past both updates", || server.offsets().contains(&2));
    let err = gw.terminate();
    assert!(err.contains("sender not in allow_from") && err.contains("user-1"), "{err}");
    let gw = Gateway::start(home.path(), &mock, &cfg, false);
    let before = server.offsets().len();
    gw.wait_for("a poll after the restart", || server.offsets().len() > before + 1);
    gw.terminate();
    let offsets = server.offsets();
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "offsets went back: {offsets:?}");
    assert!(offsets[before..].iter().all(|&o| o == 2), "the restart resumed at the committed offset: {offsets:?}");
    assert_eq!(mock.request_count(), 0, "refused senders never reach the model");
}

/// (f): a trapping step and a huge state are contained: the channel backs
/// off, recovers, and the next update still gets its answer.
#[test]
fn hostile_steps_back_off_and_recover() {
    let home = tempfile::tempdir().unwrap();
    install(home.path());
    let server = Server::start();
    server.push(0, "trap");
    let mock = MockLlm::start(vec![MockReply::text("survived")]);
    let gw = Gateway::start(home.path(), &mock, &config(server.port, "\"*\""), false);
    gw.wait_for("a backoff", || gw.stderr().contains("channel step failed (1 in a row)"));
    // The platform drops the poisonous update; the next one is normal.
    {
        let mut s = server.state.lock().unwrap();
        s.updates = vec![(1, "huge-state".into())];
    }
    gw.wait_for("a second backoff", || gw.stderr().contains("channel step failed (2 in a row)"));
    server.state.lock().unwrap().updates = vec![(2, "after the storm".into())];
    gw.wait_for("the reply delivered", || delivered(&gw.stderr()) == 1);
    let err = gw.terminate();
    assert!(err.contains("channel recovered"), "{err}");
    assert!(err.contains("state") , "{err}");
    assert_eq!(mock.request_count(), 1);
}

/// The first-party Telegram channel, end to end: a message sent to the bot
/// (the scripted Bot API on 127.0.0.1 stands in for api.telegram.org through
/// `api_base`) reaches the agent, which uses the built-in fs tool, and the
/// reply goes back through the component's own `deliver` (its `wasi:http`
/// request, with the token substituted by the host for the platform and
/// the platform origin pointed at the base). The token appears nowhere the
/// component or a log could show it.
#[test]
fn telegram_round_trip_through_the_agent_and_the_fs_tool() {
    let tg_token = "424242:SECRET-tg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    telegram.push(chitin_testing::MockUpdate::text(777, 555, "save a note saying hi"));
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let mock = MockLlm::start(vec![
        MockReply::tool_call("write_file", serde_json::json!({"path": "note.txt", "content": "hi from telegram"}).to_string()),
        MockReply::text("Saved **note.txt** for you."),
    ]);
    std::fs::write(home.path().join("config.toml"), telegram_config(&ws, &telegram)).unwrap();
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    gw.wait_for("the reply sent to the chat", || !replies(&telegram).is_empty());
    let err = gw.terminate();
    let sent = replies(&telegram);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].chat_id, 777);
    assert!(sent[0].text.contains("<b>note.txt</b>"), "rendered for Telegram: {:?}", sent[0].text);
    let hints: Vec<_> = telegram.sent_messages().into_iter().filter(|m| m.text.starts_with('↳')).collect();
    assert!(hints.len() == 1 && hints[0].text.starts_with("↳ write_file("), "the tool call was shown: {hints:?}");
    assert_eq!(std::fs::read_to_string(ws.join("note.txt")).unwrap(), "hi from telegram");
    assert_eq!(telegram.requests_for("deleteWebhook").len(), 1, "poll mode deletes any webhook first");
    // "typing" was shown in the chat while the agent worked (set-status,
    // through the component's own request, token filled in by the host).
    let typing = telegram.chat_actions();
    assert!(typing.iter().any(|a| a.chat_id == 777 && a.action == "typing"), "{typing:?}");
    let asked = serde_json::to_string(&mock.requests()).unwrap();
    assert!(asked.contains("save a note saying hi"), "{asked}");
    assert!(!asked.contains(tg_token) && !err.contains(tg_token), "the token leaked");
    let record = record_text(home.path(), "telegram");
    assert!(!record.contains(tg_token));
}


/// `[channels.telegram]` against `telegram` (the built-in channel), the
/// token from `TG_TEST_TOKEN`, sender 555 allowed.
fn telegram_config(ws: &Path, telegram: &chitin_testing::MockTelegram) -> String {
    format!(
        "workspace = \"{ws}\"\n[agent]\nmodel = \"test-model\"\nstream = false\n[gateway]\nlisten = \"127.0.0.1:0\"\nauth_token = \"\"\n\
         [channels.telegram]\nenabled = true\nallow_from = [\"555\"]\napi_base = \"{base}\"\nbot_token = \"${{TG_TEST_TOKEN}}\"\nbot_username = \"chitinbot\"\n",
        ws = ws.display(),
        base = telegram.api_base(),
    )
}

/// `chitin gateway` (or another subcommand) on `home` with the model at
/// `mock` and the bot token in the environment.
fn telegram_command(home: &Path, mock: &MockLlm, tg_token: &str, args: &[&str]) -> std::process::Command {
    let mut cmd = chitin(home, args);
    cmd.env("OPENAI_BASE_URL", mock.base_url()).env("TG_TEST_TOKEN", tg_token).env("RUST_LOG", "chitin=info");
    cmd
}

fn telegram_gateway(home: &Path, mock: &MockLlm, tg_token: &str) -> std::process::Command {
    telegram_command(home, mock, tg_token, &["gateway"])
}

/// Blocking GET through reqwest on a throwaway runtime: (status, body).
fn http_get(url: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let response = reqwest::get(url).await.expect("GET");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    })
}

/// Checks `what` holds on every one of 100 looks 10 ms apart (about a
/// second of waiting; a slow machine only waits longer, it cannot pass
/// something that is false).
fn holds_throughout(what: &str, cond: impl Fn() -> Result<(), String>) {
    for look in 0..100 {
        if let Err(e) = cond() {
            panic!("{what} stopped holding at look {look}: {e}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Issue 10, item 9: "409 stops the poller". A second consumer of the bot
/// token makes Telegram answer the gateway's held `getUpdates` with 409;
/// the channel stops with that reason instead of retrying (no restart loop
/// fighting the other instance), the rest of the gateway keeps serving, and
/// `chitin status` shows why the channel is down.
#[test]
fn telegram_409_stops_the_poller_with_a_clear_status() {
    let tg_token = "777001:CONFLICT-tg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let mock = MockLlm::start(vec![MockReply::text("unused")]);
    std::fs::write(home.path().join("config.toml"), telegram_config(&ws, &telegram)).unwrap();
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    gw.wait_for("the gateway's long poll held by the platform", || telegram.is_polling());

    // The other instance: a direct getUpdates with the same token. The
    // mock, like Telegram, ends the held poll with 409.
    let (status, body) = http_get(&format!("{}/bot{tg_token}/getUpdates?timeout=0", telegram.api_base()));
    assert_eq!(status, 200, "the newer poller is served: {body}");
    gw.wait_for("the channel stopped on the 409", || gw.stderr().contains("channel stopped"));
    let err = gw.stderr();
    let stop = err.lines().find(|l| l.contains("channel stopped")).unwrap().to_string();
    assert!(stop.contains("telegram") && stop.contains("409 Conflict") && stop.contains("another bot instance is polling"), "the stop names the reason: {stop}");
    assert!(!err.contains("channel step failed"), "a 409 is not retried: {err}");

    // No more polls: the count stays where it is.
    let polls = telegram.requests_for("getUpdates").len();
    holds_throughout("no getUpdates after the stop", || {
        let now = telegram.requests_for("getUpdates").len();
        if now == polls { Ok(()) } else { Err(format!("{now} polls, {polls} at the stop")) }
    });
    assert!(!telegram.is_polling(), "nobody holds a poll");

    // The rest of the gateway still answers.
    let (status, models) = http_get(&format!("{}/v1/models", gw.base()));
    assert_eq!(status, 200, "{models}");
    assert!(models.contains("\"data\""), "{models}");

    // `chitin status` on the same home shows the channel stopped, with why.
    let out = run(telegram_command(home.path(), &mock, tg_token, &["status"]));
    let shown = stdout(&out);
    let line = shown.lines().find(|l| l.trim_start().starts_with("telegram")).unwrap_or_else(|| panic!("no telegram line: {shown}"));
    assert!(line.contains("stopped") && line.contains("409 Conflict"), "status shows the stop and its reason: {line}");
    assert!(!shown.contains(tg_token) && !err.contains(tg_token), "the token leaked");

    let err = gw.terminate();
    assert_eq!(mock.request_count(), 0, "{err}");
}

/// Issue 10, item 3/4: one consumer per bot account. A second gateway on
/// the same CHITIN_HOME finds the data dir's inbox held (issue 19: one
/// process per data dir) and exits with "already running (pid N)" naming
/// the first gateway, without ever polling, so the first keeps its long
/// poll (a second `getUpdates` would have ended it with 409) and keeps
/// answering. (The channel's own lock still guards the channel below it.)
#[test]
fn a_second_gateway_on_the_same_channel_stops_with_already_running() {
    let tg_token = "777002:TWICE-tg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let mock = MockLlm::start(vec![MockReply::text("still the first")]);
    std::fs::write(home.path().join("config.toml"), telegram_config(&ws, &telegram)).unwrap();
    let first = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    first.wait_for("the first gateway's long poll", || telegram.is_polling());
    let polls = telegram.requests_for("getUpdates").len();

    // A second gateway on the same data dir is refused as a whole (the
    // durable inbox takes one process per data dir), naming the first.
    let second = common::run_within(&mut telegram_gateway(home.path(), &mock, tg_token), Duration::from_secs(60));
    assert!(!second.status.success(), "the second gateway must fail");
    let err = common::stderr(&second);
    let running = format!("already running (pid {}", first.child.id());
    assert!(err.contains(&running), "{err}");
    assert!(!err.contains("listening on"), "{err}");

    holds_throughout("the second gateway never polls", || {
        let now = telegram.requests_for("getUpdates").len();
        if now != polls {
            return Err(format!("{now} getUpdates, {polls} before the second gateway"));
        }
        if !telegram.is_polling() {
            return Err("the first gateway's poll was ended".into());
        }
        Ok(())
    });
    assert!(!first.stderr().contains("channel stopped"), "the first gateway's channel is untouched: {}", first.stderr());

    // The first still serves the chat.
    telegram.push(chitin_testing::MockUpdate::text(778, 555, "are you there?"));
    first.wait_for("the reply from the first gateway", || !telegram.sent_messages().is_empty());
    assert_eq!(telegram.sent_messages()[0].text, "still the first");
    first.terminate();
    assert_eq!(mock.request_count(), 1);
}

/// The `message` tool from a Telegram chat: the send goes out through the
/// channel's queue (rendered, token filled in by the host) and the turn's
/// own final reply is not sent after it.
#[test]
fn the_message_tool_answers_a_telegram_chat_through_the_channel_queue() {
    let tg_token = "515151:SECRET-msg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    telegram.push(chitin_testing::MockUpdate::text(777, 555, "send me the status"));
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let mock = MockLlm::start(vec![
        MockReply::tool_call("message", serde_json::json!({"content": "Status: **all good**"}).to_string()),
        MockReply::text("I sent the status."),
    ]);
    std::fs::write(home.path().join("config.toml"), telegram_config(&ws, &telegram)).unwrap();
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    gw.wait_for("the model's second request", || mock.request_count() >= 2);
    gw.wait_for("the message sent to the chat", || !replies(&telegram).is_empty());
    // Give a (wrong) second send time to happen before looking.
    std::thread::sleep(Duration::from_millis(700));
    let err = gw.terminate();
    let sent = replies(&telegram);
    assert_eq!(sent.len(), 1, "only the message tool's send: {sent:?}");
    assert_eq!(sent[0].chat_id, 777);
    assert!(sent[0].text.contains("<b>all good</b>"), "{:?}", sent[0].text);
    let result = mock.requests()[1]["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap()["content"].clone();
    assert_eq!(result, "Message sent to telegram:777");
    assert!(!err.contains(tg_token));
}

/// A one-shot cron job added from a Telegram chat survives a gateway
/// restart: its time passes while the gateway is down, it fires once when
/// the gateway starts again, and the answer goes to that chat.
#[test]
fn a_missed_cron_job_fires_once_after_a_restart_into_its_chat() {
    let tg_token = "616161:SECRET-cron-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    telegram.push(chitin_testing::MockUpdate::text(888, 555, "remind me to stretch in a few seconds"));
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let at = (chrono::Utc::now() + chrono::Duration::seconds(4)).to_rfc3339();
    let mock = MockLlm::start(vec![
        MockReply::tool_call("cron", serde_json::json!({"action": "add", "name": "stretch", "message": "tell me to stretch", "at": at}).to_string()),
        MockReply::text("Reminder set."),
    ]);
    std::fs::write(home.path().join("config.toml"), telegram_config(&ws, &telegram)).unwrap();
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    gw.wait_for("the confirmation", || !replies(&telegram).is_empty());
    gw.terminate();
    let jobs: serde_json::Value = serde_json::from_slice(&std::fs::read(home.path().join("cron/jobs.json")).unwrap()).unwrap();
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 1, "{jobs}");
    assert_eq!(jobs["jobs"][0]["session_key"], "telegram:888");

    // Down past the job's time.
    std::thread::sleep(Duration::from_secs(5));
    let mock = MockLlm::start(vec![MockReply::text("Time to stretch!")]);
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    gw.wait_for("the reminder", || replies(&telegram).len() >= 2);
    // That it fires only once after the restart is `cron::tests::
    // jobs_survive_a_restart_and_a_missed_one_fires_once`, on a manual
    // clock; here, no fixed wait for a second firing.
    gw.terminate();
    let sent: Vec<String> = replies(&telegram).into_iter().map(|m| m.text).collect();
    assert_eq!(sent, ["Reminder set.", "Time to stretch!"], "fired once, answered in its chat");
    assert_eq!(mock.request_count(), 1);
    let asked = serde_json::to_string(&mock.requests()[0]).unwrap();
    assert!(asked.contains("tell me to stretch") && asked.contains("Scheduled task"), "{asked}");
    let jobs: serde_json::Value = serde_json::from_slice(&std::fs::read(home.path().join("cron/jobs.json")).unwrap()).unwrap();
    assert!(jobs["jobs"].as_array().unwrap().is_empty(), "the one-shot is gone: {jobs}");
}

/// Runs `future` on a throwaway runtime (the mock's client calls are async).
fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(future)
}

const WEBHOOK_SECRET: &str = "whsec_Distinctive-42";

/// The gateway's public address in webhook tests. The gateway itself
/// listens on port 0 and prints the port it got; the mock platform is told
/// where the public URL is really served (`route_public_url`), as a tunnel
/// in front of the gateway would be: no port is picked before the gateway
/// binds it, so none can be taken meanwhile.
const PUBLIC_URL: &str = "https://bot.example.test";

/// `[channels.telegram]` in webhook mode behind [`PUBLIC_URL`].
fn webhook_config(ws: &Path, telegram: &chitin_testing::MockTelegram) -> String {
    format!(
        "workspace = \"{ws}\"\n[agent]\nmodel = \"test-model\"\nstream = false\n[gateway]\nlisten = \"127.0.0.1:0\"\nauth_token = \"\"\n\
         [channels.telegram]\nenabled = true\nmode = \"webhook\"\npublic_url = \"{PUBLIC_URL}\"\nallow_from = [\"555\"]\napi_base = \"{base}\"\n\
         bot_token = \"${{TG_TEST_TOKEN}}\"\nwebhook_secret = \"${{TG_TEST_WEBHOOK_SECRET}}\"\nbot_username = \"chitinbot\"\n",
        ws = ws.display(),
        base = telegram.api_base(),
    )
}

/// Issue 10: webhook mode through the real gateway. `start` registers the
/// route with `setWebhook`, whose `secret_token` the component wrote as a
/// placeholder and the host filled in; a request with a wrong or missing
/// secret header gets 401 and costs nothing; a verified update is answered
/// through the agent; the same update again is answered 200 and not twice.
#[test]
fn telegram_webhook_round_trip_refuses_bad_secrets_and_dedups() {
    let tg_token = "888001:HOOK-tg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let mock = MockLlm::start(vec![MockReply::text("hooked"), MockReply::text("twice?!")]);
    std::fs::write(home.path().join("config.toml"), webhook_config(&ws, &telegram)).unwrap();
    let mut cmd = telegram_gateway(home.path(), &mock, tg_token);
    cmd.env("TG_TEST_WEBHOOK_SECRET", WEBHOOK_SECRET);
    let gw = Gateway::spawn(cmd);
    telegram.route_public_url(PUBLIC_URL, &gw.base());
    gw.wait_for("setWebhook", || telegram.webhook().is_some());
    let hook = telegram.webhook().unwrap();
    assert_eq!(hook.url, format!("{PUBLIC_URL}/webhooks/telegram/telegram"));
    assert_eq!(hook.secret_token.as_deref(), Some(WEBHOOK_SECRET), "the host substituted the placeholder in the body");
    assert!(telegram.requests_for("getUpdates").is_empty(), "no polling in webhook mode");
    assert!(telegram.requests_for("deleteWebhook").is_empty());
    let set = telegram.requests_for("setWebhook");
    assert_eq!(set.len(), 1);
    assert_eq!(set[0].params["secret_token"], WEBHOOK_SECRET, "sent substituted; the component wrote the placeholder");

    let mut update = telegram.update_json(&chitin_testing::MockUpdate::text(777, 555, "hello by webhook"));
    // One id for every delivery below, as Telegram's redelivery keeps it.
    update["update_id"] = serde_json::json!(424_242);
    assert_eq!(block_on(telegram.deliver_webhook_with_secret(update.clone(), Some("wrong-secret"))).unwrap(), 401);
    assert_eq!(block_on(telegram.deliver_webhook_with_secret(update.clone(), None)).unwrap(), 401);
    // Too big: refused before verification or the component.
    let big = serde_json::json!({"update_id": 1, "pad": "x".repeat(2 << 20)});
    assert_eq!(block_on(telegram.deliver_webhook(big)).unwrap(), 413);
    assert_eq!(mock.request_count(), 0, "a refused request never reaches the model");
    assert!(telegram.sent_messages().is_empty());
    assert!(gw.stderr().matches("webhook request refused (401)").count() == 2, "{}", gw.stderr());

    assert_eq!(block_on(telegram.deliver_webhook(update.clone())).unwrap(), 200);
    gw.wait_for("the reply", || !telegram.sent_messages().is_empty());
    assert_eq!(telegram.sent_messages()[0].text, "hooked");
    assert_eq!(telegram.sent_messages()[0].chat_id, 777);
    // Telegram redelivers an update it thinks was lost: answered, not replied to.
    assert_eq!(block_on(telegram.deliver_webhook(update)).unwrap(), 200);
    holds_throughout("one reply only", || {
        let sent = telegram.sent_messages().len();
        if sent == 1 && mock.request_count() == 1 { Ok(()) } else { Err(format!("{sent} sent, {} model requests", mock.request_count())) }
    });
    let err = gw.terminate();
    let asked = serde_json::to_string(&mock.requests()).unwrap();
    assert!(asked.contains("hello by webhook"));
    for secret in [tg_token, WEBHOOK_SECRET] {
        assert!(!err.contains(secret) && !asked.contains(secret), "a secret leaked");
        assert!(!record_text(home.path(), "telegram").contains(secret));
    }
}

/// Webhook mode without its secret configured is refused at start, naming
/// the key, instead of accepting unverified requests.
#[test]
fn webhook_mode_needs_its_secret() {
    let telegram = chitin_testing::MockTelegram::with_token("888002:x", "chitinbot");
    let home = tempfile::tempdir().unwrap();
    let config = webhook_config(&home.path().join("ws"), &telegram).replace("webhook_secret = \"${TG_TEST_WEBHOOK_SECRET}\"\n", "");
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let mock = MockLlm::start(vec![]);
    let out = run_within(&mut telegram_gateway(home.path(), &mock, "888002:x"), Duration::from_secs(60));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("channels.telegram.webhook_secret"), "{err}");
}

/// Issue 10: edit throttling. A reply streamed in 24 deltas over ~3.5 s is
/// shown by one sendMessage and edits no closer together than the
/// manifest's `edit_interval_ms` (1000 ms for Telegram), coalesced (far
/// fewer edits than deltas), ending with the whole reply; the final
/// message is not delivered again.
#[test]
fn telegram_streamed_reply_edits_no_faster_than_the_interval() {
    let tg_token = "888003:STREAM-tg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let reply: String = (1..=48).map(|i| format!("word{i} ")).collect::<String>().trim_end().to_string();
    let mock = MockLlm::start(vec![MockReply::text(reply.clone())]).with_stream_pieces(24).with_chunk_delay(Duration::from_millis(150));
    let config = telegram_config(&ws, &telegram).replace("stream = false", "stream = true");
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    telegram.push(chitin_testing::MockUpdate::text(777, 555, "stream to me"));
    gw.wait_for("the streamed reply finished", || gw.stderr().contains("reply delivered (streamed)"));
    let err = gw.terminate();
    let sent = telegram.sent_messages();
    assert_eq!(sent.len(), 1, "one message, edited; the final reply not sent again: {sent:?}");
    let edits = telegram.edits();
    assert!(edits.len() >= 2, "the reply grew by edits: {edits:?}");
    assert!(edits.len() < 24, "deltas were coalesced: {} edits", edits.len());
    assert_eq!(edits.last().unwrap().text, reply, "the final edit is the whole reply");
    assert!(edits.iter().all(|e| e.message_id == sent[0].message_id));
    // Every request of the stream, accepted or not, kept the interval.
    let mut times: Vec<std::time::Instant> = telegram.requests_for("sendMessage").iter().map(|r| r.at).collect();
    times.extend(telegram.requests_for("editMessageText").iter().map(|r| r.at));
    times.sort();
    let gaps: Vec<Duration> = times.windows(2).map(|pair| pair[1] - pair[0]).collect();
    eprintln!("stream: 24 deltas, 1 sendMessage + {} edits, gaps {gaps:?}", edits.len());
    for gap in gaps {
        assert!(gap >= Duration::from_millis(1000), "two stream requests {gap:?} apart: {err}");
    }
}

/// A failed stream-update never loses the reply: the first sendMessage of
/// the stream fails, so the whole reply goes out by one plain delivery.
#[test]
fn a_failed_stream_update_falls_back_to_a_plain_delivery() {
    let tg_token = "888004:FALLBACK-tg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let mock = MockLlm::start(vec![MockReply::text("all of it arrives")]).with_chunk_delay(Duration::from_millis(50));
    let config = telegram_config(&ws, &telegram).replace("stream = false", "stream = true");
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    telegram.fail_next("sendMessage", 500, None);
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    telegram.push(chitin_testing::MockUpdate::text(777, 555, "stream to me"));
    gw.wait_for("the reply delivered", || gw.stderr().contains("reply delivered"));
    let err = gw.terminate();
    assert!(err.contains("stream-update failed"), "{err}");
    let sent = telegram.sent_messages();
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].text, "all of it arrives");
    assert!(telegram.edits().is_empty());
}

/// Issue 10: media download with a size cap. A photo arrives as a file in
/// `<data>/media/telegram/` (named by its content hash, not by anything the
/// platform said); a document over `max_media_mb` is refused from its
/// content-length, leaves no file, and the message still reaches the agent
/// with a note in its text. The bytes are fetched by the host (the
/// component only did `getFile`), with the token filled in by the host.
#[test]
fn telegram_media_is_downloaded_within_the_cap() {
    let tg_token = "888005:MEDIA-tg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    let jpeg: Vec<u8> = [&[0xff, 0xd8, 0xff][..], &b"tiny-jpeg-body".repeat(64)].concat();
    let photo = telegram.add_file("photos/file_1.jpg", jpeg.clone());
    let huge = telegram.add_file("documents/file_2.bin", vec![7u8; 2 * 1024 * 1024 + 10]);
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let mock = MockLlm::start(vec![MockReply::text("nice photo"), MockReply::text("too big")]);
    let config = format!("{}max_media_mb = 1\n", telegram_config(&ws, &telegram));
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    telegram.push(chitin_testing::MockUpdate::photo(777, 555, photo).caption("look"));
    gw.wait_for("the first reply", || telegram.sent_messages().len() == 1);
    telegram.push(chitin_testing::MockUpdate::document(777, 555, huge, "../../evil.sh").caption("and this"));
    gw.wait_for("the second reply", || telegram.sent_messages().len() == 2);
    let err = gw.terminate();

    let dir = home.path().join("media/telegram");
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 1, "the photo only, no partial file: {files:?}");
    let name = files[0].file_name().unwrap().to_str().unwrap().to_string();
    assert!(name.ends_with(".jpg") && name.len() == 36 && name[..32].chars().all(|c| c.is_ascii_hexdigit()), "{name}");
    assert_eq!(std::fs::read(&files[0]).unwrap(), jpeg);
    assert!(!ws.exists() || std::fs::read_dir(&ws).unwrap().next().is_none(), "nothing in the workspace");
    assert_eq!(telegram.requests_for("getFile").len(), 2, "the component asked where each file is");
    assert_eq!(telegram.requests_for("file").len(), 2, "the host fetched each (the second stopped at its length)");
    assert!(telegram.requests_for("file").iter().all(|r| r.authorized), "the host substituted the token");

    let requests = mock.requests();
    let first = serde_json::to_string(&requests[0]).unwrap();
    assert!(first.contains("look"), "{first}");
    let second = serde_json::to_string(&requests[1]).unwrap();
    assert!(second.contains("and this") && second.contains("[document not downloaded: larger than 1 MB]"), "{second}");
    assert!(!second.contains("evil.sh"), "the platform's file name is not used");
    assert!(!err.contains(tg_token), "the token leaked");
}

/// A streamed reply past Telegram's 4096 in a forum topic: the first
/// message is finished where the split falls and the reply goes on in a
/// second one, both in the topic the question came from, and the final
/// texts are exactly the parts of the whole reply.
#[test]
fn a_long_streamed_reply_in_a_topic_continues_in_a_new_message_there() {
    let tg_token = "888006:TOPIC-tg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let (a, b) = ("a".repeat(4000), "b".repeat(600));
    let reply = format!("{a}\n\n{b}");
    let mock = MockLlm::start(vec![MockReply::text(reply)]).with_stream_pieces(12).with_chunk_delay(Duration::from_millis(120));
    let config = telegram_config(&ws, &telegram).replace("stream = false", "stream = true");
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    telegram.push(chitin_testing::MockUpdate::text(-100_777, 555, "@chitinbot tell me a long story").topic(9));
    gw.wait_for("the streamed reply finished", || gw.stderr().contains("reply delivered (streamed)"));
    let err = gw.terminate();
    let sent = telegram.sent_messages();
    assert_eq!(sent.len(), 2, "{err}");
    assert!(sent.iter().all(|m| m.chat_id == -100_777 && m.message_thread_id == Some(9)), "in the topic: {sent:?}");
    let edits = telegram.edits();
    let last_text = |id: i64, sent: &str| edits.iter().rev().find(|e| e.message_id == id).map_or(sent.to_string(), |e| e.text.clone());
    assert_eq!(last_text(sent[0].message_id, &sent[0].text), a);
    assert_eq!(last_text(sent[1].message_id, &sent[1].text), b);
}

/// A "poison" update the adapter cannot parse is passed over with a
/// warning (the offset moves past it) instead of failing every poll from
/// then on; the message after it is answered.
#[test]
fn a_poison_update_is_skipped_and_the_next_one_answered() {
    let tg_token = "888007:POISON-tg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let mock = MockLlm::start(vec![MockReply::text("still here")]);
    std::fs::write(home.path().join("config.toml"), telegram_config(&ws, &telegram)).unwrap();
    let poison = telegram.push_update(serde_json::json!({"message": {"message_id": "NaN", "chat": "not a chat"}}));
    telegram.push(chitin_testing::MockUpdate::text(777, 555, "after the poison"));
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    gw.wait_for("the reply", || !telegram.sent_messages().is_empty());
    gw.wait_for("a poll past both", || {
        telegram.requests_for("getUpdates").iter().any(|r| r.params.get("offset").and_then(|o| o.as_str()?.parse::<i64>().ok()).is_some_and(|o| o > poison + 1))
    });
    let err = gw.terminate();
    assert!(err.contains(&format!("update {poison} could not be parsed")), "{err}");
    assert!(!err.contains("channel step failed"), "no failed step, no backoff: {err}");
    assert_eq!(telegram.sent_messages()[0].text, "still here");
    assert_eq!(mock.request_count(), 1);
}

/// A hostile channel's flood of emits (10 000 in one step) is refused past
/// the step's bounds and that channel backs off, while another channel of
/// the same gateway keeps answering; once the platform stops sending the
/// flood, the hostile channel recovers.
#[test]
fn an_emit_flood_is_contained_and_the_other_channel_keeps_working() {
    let tg_token = "888008:FLOOD-tg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    let home = tempfile::tempdir().unwrap();
    install(home.path());
    let ws = home.path().join("ws");
    let server = Server::start();
    server.push(0, "flood");
    let mock = MockLlm::with_handler(|request, _| {
        let text = request.to_string();
        MockReply::text(if text.contains("after the flood") { "echo ok" } else { "telegram ok" })
    });
    let echo = config(server.port, "\"*\"");
    let echo = echo[echo.find("[plugins.echo-channel]").unwrap()..].to_string();
    let config = format!("{}{echo}", telegram_config(&ws, &telegram));
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let mut cmd = telegram_gateway(home.path(), &mock, tg_token);
    cmd.env("ECHO_TEST_TOKEN", TOKEN);
    let gw = Gateway::spawn(cmd);
    gw.wait_for("the flood refused", || gw.stderr().contains("channel step failed (1 in a row)"));
    telegram.push(chitin_testing::MockUpdate::text(777, 555, "are you alive?"));
    gw.wait_for("telegram's reply during the flood", || !telegram.sent_messages().is_empty());
    assert_eq!(telegram.sent_messages()[0].text, "telegram ok");
    assert!(!gw.stderr().contains("flood-"), "no flooded message got through: {}", gw.stderr());
    server.state.lock().unwrap().updates = vec![(1, "after the flood".into())];
    gw.wait_for("the echo channel recovered", || gw.stderr().contains("channel recovered"));
    gw.wait_for("echo's reply", || delivered(&gw.stderr()) >= 2);
    let err = gw.terminate();
    let refusal = err.lines().find(|l| l.contains("channel step failed (1 in a row)")).unwrap();
    assert!(refusal.contains("echo") && refusal.contains("actions"), "the refusal names the bound: {refusal}");
    assert_eq!(mock.request_count(), 2, "one model request per channel, none for the flood: {err}");
}

/// Webhook mode with the echo channel: a step that fails is answered 500
/// (the platform retries) and commits nothing; the retry is answered with
/// the component's own `respond` (status and body) and reaches the agent
/// once; a request to the route without the secret never reaches it.
#[test]
fn a_failed_webhook_step_answers_500_and_the_retry_the_components_respond() {
    let home = tempfile::tempdir().unwrap();
    install(home.path());
    let mock = MockLlm::start(vec![MockReply::text("pong")]);
    let config = config(1, "\"*\"").replace(
        "greeting = \"hi\"\n",
        &format!("greeting = \"hi\"\nmode = \"webhook\"\npublic_url = \"{PUBLIC_URL}\"\nwebhook_secret = \"${{ECHO_TEST_WEBHOOK_SECRET}}\"\n"),
    );
    std::fs::write(home.path().join("config.toml"), &config).unwrap();
    let mut cmd = chitin(home.path(), &["gateway"]);
    cmd.env("OPENAI_BASE_URL", mock.base_url()).env("ECHO_TEST_TOKEN", TOKEN).env("ECHO_TEST_WEBHOOK_SECRET", "echo-secret-77").env("RUST_LOG", "chitin=info");
    let gw = Gateway::spawn(cmd);
    gw.wait_for("the webhook route", || gw.stderr().contains("webhook route /webhooks/echo/echo"));
    let post = |body: &str, secret: Option<&str>| -> (u16, String) {
        block_on(async {
            let mut request = reqwest::Client::new().post(gw.url("/webhooks/echo/echo")).body(body.to_string());
            if let Some(secret) = secret {
                request = request.header("X-Echo-Secret", secret);
            }
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        })
    };
    assert_eq!(post(r#"{"updates":[{"id":5,"text":"hello"}]}"#, None).0, 401);
    let (status, _) = post(r#"{"updates":[{"id":5,"text":"fail"}]}"#, Some("echo-secret-77"));
    assert_eq!(status, 500, "a failed step: the platform retries");
    assert_eq!(mock.request_count(), 0);
    let (status, body) = post(r#"{"updates":[{"id":5,"text":"hello"}]}"#, Some("echo-secret-77"));
    assert_eq!((status, body.as_str()), (200, "ok"), "the component's respond");
    gw.wait_for("the reply delivered", || delivered(&gw.stderr()) == 1);
    let (status, _) = post(r#"{"updates":[{"id":5,"text":"hello"}]}"#, Some("echo-secret-77"));
    assert_eq!(status, 200);
    let err = gw.terminate();
    assert!(err.contains("webhook step failed, answered 500"), "{err}");
    assert_eq!(mock.request_count(), 1, "the retried update reached the agent once: {err}");
    assert_eq!(delivered(&err), 1);
    assert!(!err.contains("echo-secret-77"), "the secret is in the log");
}

/// Sends `head`, then `body` a byte a second, over plain TCP; returns what
/// the server answered, how many body bytes went in, and when it closed.
fn trickle_request(addr: &str, head: &str, body: &[u8]) -> (String, usize, Duration) {
    use std::io::{Read, Write};
    let started = std::time::Instant::now();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(head.as_bytes()).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let (mut answer, mut sent, mut buf) = (Vec::new(), 0, [0u8; 4096]);
    loop {
        assert!(started.elapsed() < Duration::from_secs(30), "the server held the trickled request");
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                if sent < body.len() && stream.write_all(&body[sent..sent + 1]).is_ok() {
                    sent += 1;
                }
            }
            Err(_) => break,
        }
    }
    (String::from_utf8_lossy(&answer).into_owned(), sent, started.elapsed())
}

/// Issue 18 (5): a webhook body is unauthenticated until it is whole, so it
/// must arrive within the body timeout. First a request sent at once
/// reaches the component and the model; then the same kind of request,
/// with the right secret, whose body trickles in a byte a second is cut off
/// with 408 within the timeout and never reaches the component; a request
/// after it is served (so the cut-off one would have run before it).
#[test]
fn a_webhook_body_trickled_slowly_is_cut_off_before_the_component() {
    const BODY_TIMEOUT: u64 = 2;
    let home = tempfile::tempdir().unwrap();
    install(home.path());
    let mock = MockLlm::with_handler(|_, _| MockReply::text("pong"));
    let config = config(1, "\"*\"")
        .replace("[gateway]\n", &format!("[gateway]\nbody_timeout_secs = {BODY_TIMEOUT}\n"))
        .replace("greeting = \"hi\"\n", &format!("greeting = \"hi\"\nmode = \"webhook\"\npublic_url = \"{PUBLIC_URL}\"\nwebhook_secret = \"${{ECHO_TEST_WEBHOOK_SECRET}}\"\n"));
    std::fs::write(home.path().join("config.toml"), &config).unwrap();
    let mut cmd = chitin(home.path(), &["gateway"]);
    cmd.env("OPENAI_BASE_URL", mock.base_url()).env("ECHO_TEST_TOKEN", TOKEN).env("ECHO_TEST_WEBHOOK_SECRET", "echo-secret-77").env("RUST_LOG", "chitin=info");
    let gw = Gateway::spawn(cmd);
    gw.wait_for("the webhook route", || gw.stderr().contains("webhook route /webhooks/echo/echo"));
    let seen = |sentinel: &str| mock.requests().iter().any(|r| r.to_string().contains(sentinel));
    let post = |body: &str| -> u16 {
        block_on(async { reqwest::Client::new().post(gw.url("/webhooks/echo/echo")).header("X-Echo-Secret", "echo-secret-77").body(body.to_string()).send().await.unwrap().status().as_u16() })
    };
    assert_eq!(post(r#"{"updates":[{"id":5,"text":"TRICKLE-1"}]}"#), 200);
    gw.wait_for("the prompt request's turn", || seen("TRICKLE-1"));

    let addr = gw.base().strip_prefix("http://").unwrap().to_string();
    let body = br#"{"updates":[{"id":6,"text":"TRICKLE-2"}]}"#;
    let head = format!("POST /webhooks/echo/echo HTTP/1.1\r\nHost: {addr}\r\nX-Echo-Secret: echo-secret-77\r\nContent-Length: {}\r\n\r\n", body.len());
    let (answer, sent, after) = trickle_request(&addr, &head, body);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(sent > 0 && sent < body.len(), "part of the body went in, not all: {sent} of {}", body.len());
    assert!(after >= Duration::from_secs(BODY_TIMEOUT) && after <= Duration::from_secs(BODY_TIMEOUT + 3), "{after:?}");

    assert_eq!(post(r#"{"updates":[{"id":7,"text":"TRICKLE-3"}]}"#), 200);
    gw.wait_for("the request after it", || seen("TRICKLE-3"));
    let err = gw.terminate();
    assert!(!seen("TRICKLE-2"), "the trickled body never reached the component or the model");
    assert!(err.contains("webhook request refused (408)"), "{err}");
    assert_eq!(mock.request_count(), 2, "{err}");
}

/// The replies a chat got: sent messages other than the turn's progress
/// message (its lines start with `↳` or `…`, see `channels::progress`).
fn replies(telegram: &chitin_testing::MockTelegram) -> Vec<chitin_testing::SentMessage> {
    telegram.sent_messages().into_iter().filter(|m| !m.text.starts_with('↳') && !m.text.starts_with('…')).collect()
}

/// Issue 10, "sending files to channels": the `message` tool's media go to
/// the Telegram chat as uploads the host streams from the workspace (the
/// component only names the method and the chat): a PDF as a document, a
/// PNG as a photo, each with its exact bytes and name; a file over the
/// channel's `max_upload_mb` is not sent and the chat is told so in the
/// message's text.
#[test]
fn the_message_tool_sends_workspace_files_to_a_telegram_chat() {
    let tg_token = "525252:SECRET-files-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    telegram.push(chitin_testing::MockUpdate::text(777, 555, "send me the report"));
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    std::fs::create_dir_all(ws.join("out")).unwrap();
    let pdf: Vec<u8> = b"%PDF-1.4\n".iter().copied().chain((0..200_000u32).map(|i| (i % 251) as u8)).collect();
    std::fs::write(ws.join("out/report.pdf"), &pdf).unwrap();
    let png = b"\x89PNG\r\n\x1a\n not really a picture".to_vec();
    std::fs::write(ws.join("chart.png"), &png).unwrap();
    std::fs::write(ws.join("big.bin"), vec![7u8; 2 << 20]).unwrap();
    let mock = MockLlm::start(vec![
        MockReply::tool_call("message", serde_json::json!({"content": "Here is the **report**", "media": ["out/report.pdf", "chart.png", "big.bin"]}).to_string()),
        MockReply::text("Sent."),
    ]);
    let config = telegram_config(&ws, &telegram) + "max_upload_mb = 1\n";
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    gw.wait_for("two files sent and the note", || telegram.sent_media().len() >= 2 && replies(&telegram).len() >= 2);
    gw.wait_for("the model's second request", || mock.request_count() >= 2);
    std::thread::sleep(Duration::from_millis(500));
    let err = gw.terminate();
    let media = telegram.sent_media();
    assert_eq!(media.len(), 2, "{media:?}");
    assert_eq!((media[0].kind.as_str(), media[0].chat_id), ("document", 777));
    let document = media[0].upload.as_ref().expect("uploaded, not named by id");
    assert_eq!((document.field.as_str(), document.filename.as_deref()), ("document", Some("report.pdf")));
    assert!(document.bytes == pdf, "the exact bytes: {} of {}", document.bytes.len(), pdf.len());
    assert_eq!(media[1].kind, "photo");
    assert_eq!(media[1].upload.as_ref().unwrap().bytes, png);
    let sent = replies(&telegram);
    assert_eq!(sent.len(), 2, "the text, then the note; the final reply suppressed: {sent:?}");
    assert_eq!(sent[0].text, "Here is the <b>report</b>");
    assert_eq!(
        sent[1].text, "[not sent: big.bin (2 MB, over the channel's upload limit of 1 MB (config [channels.<name>] max_upload_mb))]",
        "the oversize file is named"
    );
    assert!(err.contains("file delivered") && err.contains("file not sent"), "{err}");
    assert!(!err.contains(tg_token), "the token leaked into the log");
    let uploads = telegram.requests_for("sendDocument");
    assert!(uploads.iter().all(|r| r.authorized), "the host filled in the token");
}

/// Files the `message` tool must not send: a FIFO and a link that leads out
/// of the workspace are refused at the call with a message saying why;
/// nothing is uploaded and the outside file's bytes go nowhere.
#[test]
fn a_fifo_or_a_link_out_is_never_sent_to_a_chat() {
    let tg_token = "535353:SECRET-refuse-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    telegram.push(chitin_testing::MockUpdate::text(777, 555, "send me the secret"));
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(home.path().join("outside.txt"), "OUTSIDE-SECRET-BYTES").unwrap();
    std::os::unix::fs::symlink(home.path().join("outside.txt"), ws.join("leak.txt")).unwrap();
    let fifo = std::ffi::CString::new(ws.join("pipe").as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let mock = MockLlm::start(vec![
        MockReply::tool_call("message", serde_json::json!({"content": "a", "media": ["pipe"]}).to_string()),
        MockReply::tool_call("message", serde_json::json!({"content": "b", "media": ["leak.txt"]}).to_string()),
        MockReply::text("I could not send those."),
    ]);
    std::fs::write(home.path().join("config.toml"), telegram_config(&ws, &telegram)).unwrap();
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    gw.wait_for("the final reply", || replies(&telegram).iter().any(|m| m.text.contains("could not send")));
    gw.terminate();
    assert!(telegram.sent_media().is_empty(), "{:?}", telegram.sent_media());
    let results: Vec<String> = mock.requests()[1..]
        .iter()
        .map(|r| r["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool").unwrap()["content"].as_str().unwrap().to_string())
        .collect();
    assert!(results[0].contains("pipe") && results[0].contains("FIFO"), "{results:?}");
    assert!(results[1].contains("leak.txt") && !results[1].contains("OUTSIDE-SECRET"), "{results:?}");
    let all: String = telegram.sent_messages().iter().map(|m| m.text.clone()).collect();
    assert!(!all.contains("OUTSIDE-SECRET"));
    assert_eq!(replies(&telegram).len(), 1, "neither refused send went out: {:?}", telegram.sent_messages());
}

/// Issue 10, "channels and tool progress": while a turn runs, its tool
/// calls show in the chat as one progress message (`send_tool_hints`, on by
/// default as in nanobot) that is edited as calls start and end, never
/// faster than the platform's edit interval; the reply is its own message.
/// With `send_tool_hints = false` and `send_progress = false` the chat sees
/// only the reply.
#[test]
fn tool_hints_are_one_progress_message_edited_no_faster_than_the_interval() {
    let tg_token = "545454:SECRET-hints-distinctive";
    let run = |hints_on: bool| {
        let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
        telegram.push(chitin_testing::MockUpdate::text(777, 555, "tidy up my notes"));
        let home = tempfile::tempdir().unwrap();
        let ws = home.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("my_notes_*draft*.md"), "alpha").unwrap();
        let mock = MockLlm::start(vec![
            MockReply::tool_call("list_dir", serde_json::json!({"path": "."}).to_string()),
            MockReply::tool_call("read_file", serde_json::json!({"path": "my_notes_*draft*.md"}).to_string()),
            MockReply::tool_call("write_file", serde_json::json!({"path": "b.md", "content": "beta"}).to_string()),
            MockReply::text("Tidied."),
        ])
        .with_latency(Duration::from_millis(600));
        let mut config = telegram_config(&ws, &telegram);
        if !hints_on {
            config += "send_tool_hints = false\nsend_progress = false\n";
        }
        std::fs::write(home.path().join("config.toml"), config).unwrap();
        let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
        gw.wait_for("the reply", || replies(&telegram).iter().any(|m| m.text == "Tidied."));
        std::thread::sleep(Duration::from_millis(300));
        gw.terminate();
        telegram
    };

    let telegram = run(true);
    let sent = telegram.sent_messages();
    let progress: Vec<_> = sent.iter().filter(|m| m.text.starts_with('↳')).collect();
    assert_eq!(progress.len(), 1, "one progress message for the turn: {sent:?}");
    assert!(progress[0].text.starts_with("↳ list_dir("), "{:?}", progress[0].text);
    let edits = telegram.edits();
    assert!(!edits.is_empty() && edits.iter().all(|e| e.message_id == progress[0].message_id), "{edits:?}");
    let last = &edits.last().unwrap().text;
    assert!(last.contains("list_dir(") && last.contains(" ✓") && last.contains("read_file("), "later calls and outcomes shown: {last:?}");
    assert!(last.contains("my_notes_*draft*.md") && !last.contains("<i>"), "Markdown in the arguments stays literal: {last:?}");
    assert_eq!(replies(&telegram).len(), 1);
    // The progress message's requests kept the interval.
    let mut times: Vec<std::time::Instant> = telegram.requests_for("editMessageText").iter().map(|r| r.at).collect();
    times.extend(telegram.requests_for("sendMessage").iter().filter(|r| r.params.get("text").and_then(|t| t.as_str()).is_some_and(|t| t.starts_with('↳'))).map(|r| r.at));
    times.sort();
    let gaps: Vec<Duration> = times.windows(2).map(|pair| pair[1] - pair[0]).collect();
    eprintln!("tool hints: 3 calls, 1 progress message + {} edits, gaps {gaps:?}", edits.len());
    assert!(gaps.iter().all(|gap| *gap >= Duration::from_millis(1000)), "{gaps:?}");

    let quiet = run(false);
    let sent = quiet.sent_messages();
    assert_eq!(sent.len(), 1, "only the reply: {sent:?}");
    assert_eq!(sent[0].text, "Tidied.");
    assert!(quiet.edits().is_empty());
}

/// The echo channel repacked under `name` with a manifest whose webhook is
/// verified by `verify` (and `secrets` besides the token), installed in
/// `home`'s plugins directory: the channel code is the same, only the recipe
/// the host applies differs. A top-level manifest wins over the embedded one.
fn install_echo_variant(home: &Path, name: &str, verify: serde_json::Value, extra_secrets: serde_json::Value) {
    let component = std::fs::read(ECHO_CHANNEL_WASM).unwrap();
    let mut manifest: serde_json::Value = serde_json::from_slice(chitin::plugins::manifest::find_section(&component).unwrap().unwrap()).unwrap();
    manifest["name"] = name.into();
    manifest["channel"]["receive"] = serde_json::json!(["webhook"]);
    manifest["channel"].as_object_mut().unwrap().remove("poll");
    let mut secrets = vec![serde_json::json!({"name": "token", "audience": "api.example.test", "inject": ["path"]})];
    secrets.extend(extra_secrets.as_array().unwrap().iter().cloned());
    manifest["channel"]["secrets"] = secrets.into();
    manifest["channel"]["webhook"]["verify"] = verify;
    let manifest = chitin::plugins::manifest::Manifest::from_json(manifest.to_string().as_bytes()).expect("a valid manifest");
    let packed = chitin::plugins::manifest::pack(&component, &manifest).unwrap();
    std::fs::create_dir_all(home.join("plugins")).unwrap();
    std::fs::write(home.join(format!("plugins/{name}.wasm")), packed).unwrap();
}

/// Issue 10: the `hmac-sha256` (Slack-style) and `ed25519` (Discord-style)
/// recipes through the real `chitin gateway`, each on a channel whose
/// manifest asks for it. A correctly signed request gets through to the
/// component and the agent; a forged signature, a stale timestamp, a body
/// changed after signing, a timestamp changed under an Ed25519 signature,
/// or a missing header gets 401 and reaches neither the component nor the
/// model.
#[test]
fn hmac_and_ed25519_signed_webhooks_through_the_gateway() {
    use ed25519_dalek::Signer;
    use hmac::Mac;
    const SIGNING_SECRET: &str = "slack-signing-Distinctive-99";
    let home = tempfile::tempdir().unwrap();
    let signer = ed25519_dalek::SigningKey::from_bytes(&[42u8; 32]);
    let public_key: String = signer.verifying_key().to_bytes().iter().map(|b| format!("{b:02x}")).collect();
    install_echo_variant(
        home.path(),
        "echo-hmac",
        serde_json::json!({"kind": "hmac-sha256", "header": "X-Slack-Signature", "timestamp_header": "X-Slack-Request-Timestamp",
            "basestring": "v0:{timestamp}:{body}", "window_secs": 300, "secret": "signing_secret", "signature_prefix": "v0="}),
        serde_json::json!([{"name": "signing_secret"}]),
    );
    install_echo_variant(
        home.path(),
        "echo-ed",
        serde_json::json!({"kind": "ed25519", "header": "X-Signature-Ed25519", "timestamp_header": "X-Signature-Timestamp",
            "basestring": "{timestamp}{body}", "public_key": public_key}),
        serde_json::json!([]),
    );
    let mock = MockLlm::start(vec![MockReply::text("pong from hmac"), MockReply::text("pong from ed25519")]);
    let channel = |name: &str, plugin: &str, extra: &str| {
        format!(
            "[plugins.{plugin}]\nnetwork = [\"api.example.test\"]\n\
             [channels.{name}]\nenabled = true\nplugin = \"{plugin}\"\nmode = \"webhook\"\npublic_url = \"{PUBLIC_URL}\"\nallow_from = [\"*\"]\ntoken = \"${{ECHO_TEST_TOKEN}}\"\n{extra}"
        )
    };
    let config = format!(
        "[agent]\nmodel = \"test-model\"\nstream = false\n[gateway]\nlisten = \"127.0.0.1:0\"\nauth_token = \"\"\n{}{}",
        channel("slacky", "echo-hmac", "signing_secret = \"${ECHO_SIGNING_SECRET}\"\n"),
        channel("discordy", "echo-ed", ""),
    );
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let mut cmd = chitin(home.path(), &["gateway"]);
    cmd.env("OPENAI_BASE_URL", mock.base_url()).env("ECHO_TEST_TOKEN", TOKEN).env("ECHO_SIGNING_SECRET", SIGNING_SECRET).env("RUST_LOG", "chitin=info");
    let gw = Gateway::spawn(cmd);
    gw.wait_for("both webhook routes", || gw.stderr().contains("webhook route /webhooks/slacky/echo") && gw.stderr().contains("webhook route /webhooks/discordy/echo"));
    let post = |path: &str, body: &str, headers: Vec<(&str, String)>| -> (u16, String) {
        block_on(async {
            let mut request = reqwest::Client::new().post(gw.url(path)).body(body.to_string());
            for (name, value) in headers {
                request = request.header(name, value);
            }
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        })
    };
    let now = chrono::Utc::now().timestamp();
    let hmac = |secret: &str, timestamp: i64, body: &str| {
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("v0:{timestamp}:{body}").as_bytes());
        let hex: String = mac.finalize().into_bytes().iter().map(|b| format!("{b:02x}")).collect();
        format!("v0={hex}")
    };
    let slack = |signature: String, timestamp: i64| vec![("X-Slack-Signature", signature), ("X-Slack-Request-Timestamp", timestamp.to_string())];
    let body = r#"{"updates":[{"id":1,"text":"signed hello"}]}"#;

    // HMAC-SHA256: forged, stale, tampered, unsigned: 401, nothing further.
    assert_eq!(post("/webhooks/slacky/echo", body, slack(hmac("not-the-secret", now, body), now)).0, 401, "forged");
    assert_eq!(post("/webhooks/slacky/echo", body, slack(hmac(SIGNING_SECRET, now - 600, body), now - 600)).0, 401, "stale");
    let tampered = body.replace("signed hello", "tampered");
    assert_eq!(post("/webhooks/slacky/echo", &tampered, slack(hmac(SIGNING_SECRET, now, body), now)).0, 401, "body changed after signing");
    assert_eq!(post("/webhooks/slacky/echo", body, vec![("X-Slack-Request-Timestamp", now.to_string())]).0, 401, "no signature");
    assert_eq!(mock.request_count(), 0, "a refused request never reaches the model");
    assert_eq!(delivered(&gw.stderr()), 0);
    let (status, answer) = post("/webhooks/slacky/echo", body, slack(hmac(SIGNING_SECRET, now, body), now));
    assert_eq!((status, answer.as_str()), (200, "ok"), "signed: the component's own answer");
    gw.wait_for("the hmac channel's reply", || delivered(&gw.stderr()) == 1);

    // Ed25519: signed by another key, a timestamp changed under the
    // signature, a malformed signature: 401.
    let ed = |key: &ed25519_dalek::SigningKey, timestamp: i64, body: &str| {
        let signature: String = key.sign(format!("{timestamp}{body}").as_bytes()).to_bytes().iter().map(|b| format!("{b:02x}")).collect();
        vec![("X-Signature-Ed25519", signature), ("X-Signature-Timestamp", timestamp.to_string())]
    };
    let body = r#"{"updates":[{"id":1,"text":"signed by ed25519"}]}"#;
    let stranger = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    assert_eq!(post("/webhooks/discordy/echo", body, ed(&stranger, now, body)).0, 401, "another key");
    let mut replayed = ed(&signer, now, body);
    replayed[1].1 = (now + 5).to_string();
    assert_eq!(post("/webhooks/discordy/echo", body, replayed).0, 401, "the timestamp is signed too");
    assert_eq!(post("/webhooks/discordy/echo", body, vec![("X-Signature-Ed25519", "zz".into()), ("X-Signature-Timestamp", now.to_string())]).0, 401);
    // Issue 18 (7): correctly signed, but two days ago (the manifest names
    // no window: 300 s by default).
    let two_days = now - 2 * 86_400;
    assert_eq!(post("/webhooks/discordy/echo", body, ed(&signer, two_days, body)).0, 401, "a replay of an old signed request");
    assert_eq!(mock.request_count(), 1, "only the signed hmac request reached the model");
    let (status, answer) = post("/webhooks/discordy/echo", body, ed(&signer, now, body));
    assert_eq!((status, answer.as_str()), (200, "ok"));
    gw.wait_for("the ed25519 channel's reply", || delivered(&gw.stderr()) == 2);

    // Replays inside the window: answered 200, passed on to nobody.
    let hmac_body = r#"{"updates":[{"id":1,"text":"signed hello"}]}"#;
    assert_eq!(post("/webhooks/slacky/echo", hmac_body, slack(hmac(SIGNING_SECRET, now, hmac_body), now)), (200, String::new()));
    let upper: Vec<(&str, String)> = ed(&signer, now, body).into_iter().map(|(n, v)| (n, v.to_uppercase())).collect();
    assert_eq!(post("/webhooks/discordy/echo", body, upper), (200, String::new()), "the same signature in upper-case hex");
    let err = gw.terminate();
    assert_eq!(err.matches("replay of one already answered").count(), 2, "{err}");
    assert_eq!(delivered(&err), 2, "the replays reached no component: {err}");

    assert_eq!(mock.request_count(), 2);
    let asked = serde_json::to_string(&mock.requests()).unwrap();
    assert!(asked.contains("signed hello") && asked.contains("signed by ed25519") && !asked.contains("tampered"), "{asked}");
    assert_eq!(err.matches("webhook request refused (401)").count(), 8, "{err}");
    assert!(err.contains("timestamp outside the 300 s window"), "{err}");
    assert!(!err.contains(SIGNING_SECRET), "the signing secret leaked into the log");
}

/// The file is checked again when it is sent, not only when the `message`
/// tool was called: here the text's first delivery fails (the channel
/// retries it a second later), and meanwhile the checked file is replaced
/// by a link to a file outside the workspace. The upload refuses it and the
/// chat is told; the outside bytes go nowhere.
#[test]
fn a_file_swapped_for_a_link_after_the_check_is_not_sent() {
    let tg_token = "555555:SECRET-swap-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    telegram.push(chitin_testing::MockUpdate::text(777, 555, "send me the report"));
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("report.txt"), "the report").unwrap();
    std::fs::write(home.path().join("outside.txt"), "OUTSIDE-SECRET-BYTES").unwrap();
    let mock = MockLlm::start(vec![
        MockReply::tool_call("message", serde_json::json!({"content": "Here it is", "media": ["report.txt"]}).to_string()),
        MockReply::text("Sent."),
    ]);
    let config = telegram_config(&ws, &telegram) + "send_tool_hints = false\nsend_progress = false\n";
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    telegram.fail_next("sendMessage", 500, None);
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    gw.wait_for("the text's first, failed delivery", || !telegram.requests_for("sendMessage").is_empty());
    std::fs::remove_file(ws.join("report.txt")).unwrap();
    std::os::unix::fs::symlink(home.path().join("outside.txt"), ws.join("report.txt")).unwrap();
    gw.wait_for("the note", || replies(&telegram).len() >= 2);
    let err = gw.terminate();
    assert!(telegram.sent_media().is_empty(), "{:?}", telegram.sent_media());
    let sent: Vec<String> = replies(&telegram).into_iter().map(|m| m.text).collect();
    assert_eq!(sent[0], "Here it is");
    assert!(sent[1].starts_with("[not sent: report.txt (cannot open it inside the workspace"), "{sent:?}");
    assert!(!sent.concat().contains("OUTSIDE-SECRET") && !err.contains("OUTSIDE-SECRET"));
    assert!(err.contains("delivery failed, retrying"), "{err}");
}

/// The images of a request body as (media type, base64), in either API's
/// shape: OpenAI `image_url` parts with a `data:` URL, Anthropic `image`
/// blocks with a base64 source.
fn image_parts(body: &serde_json::Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for message in body["messages"].as_array().into_iter().flatten() {
        for part in message["content"].as_array().into_iter().flatten() {
            match part["type"].as_str() {
                Some("image_url") => {
                    let url = part["image_url"]["url"].as_str().unwrap();
                    let (head, data) = url.strip_prefix("data:").unwrap().split_once(";base64,").unwrap();
                    out.push((head.to_string(), data.to_string()));
                }
                Some("image") => {
                    assert_eq!(part["source"]["type"], "base64", "{part}");
                    out.push((part["source"]["media_type"].as_str().unwrap().into(), part["source"]["data"].as_str().unwrap().into()));
                }
                _ => {}
            }
        }
    }
    out
}

/// Issues 10 and 13: a photo from Telegram reaches the model as an image
/// part of the user message, through both APIs, with the file's exact
/// bytes; a "photo" whose bytes are not an image is not sent as one; an
/// image over `max_image_kb` becomes a note; the session keeps the file's
/// path, never its base64.
#[test]
fn telegram_photos_reach_the_model_as_images_through_both_apis() {
    use base64::Engine as _;
    for api in ["openai", "anthropic"] {
        let tg_token = "888006:IMAGE-tg-distinctive";
        let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
        let png: Vec<u8> = [&b"\x89PNG\r\n\x1a\n"[..], &b"small-png-body".repeat(20)].concat();
        let photo = telegram.add_file("photos/file_1.png", png.clone());
        let fake = telegram.add_file("photos/file_2.png", b"just some text, not an image".to_vec());
        let big = telegram.add_file("photos/file_3.png", [&b"\x89PNG\r\n\x1a\n"[..], &[0u8; 2000]].concat());
        let home = tempfile::tempdir().unwrap();
        let ws = home.path().join("ws");
        let mock = MockLlm::start(vec![MockReply::text("a small png"), MockReply::text("no image"), MockReply::text("too big")]);
        let config = telegram_config(&ws, &telegram).replace("[agent]\n", "[agent]\nprovider = \"p\"\nmax_image_kb = 1\n")
            + &format!("[providers.p]\napi = \"{api}\"\nbase_url = \"{}\"\napi_key = \"test-key\"\n", mock.base_url());
        std::fs::write(home.path().join("config.toml"), config).unwrap();
        let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
        telegram.push(chitin_testing::MockUpdate::photo(777, 555, photo).caption("what is this?"));
        gw.wait_for("the first reply", || telegram.sent_messages().len() == 1);
        telegram.push(chitin_testing::MockUpdate::photo(777, 555, fake).caption("and this?"));
        gw.wait_for("the second reply", || telegram.sent_messages().len() == 2);
        telegram.push(chitin_testing::MockUpdate::photo(777, 555, big).caption("and this big one?"));
        gw.wait_for("the third reply", || telegram.sent_messages().len() == 3);
        let err = gw.terminate();

        let requests = mock.requests();
        assert_eq!(requests.len(), 3, "{api}: {err}");
        let encoded = base64::engine::general_purpose::STANDARD.encode(&png);
        assert_eq!(image_parts(&requests[0]), vec![("image/png".to_string(), encoded.clone())], "{api}: {}", requests[0]);
        assert!(requests[0].to_string().contains("what is this?"), "{api}");
        // Later turns show the earlier photo as a path, not again as bytes.
        assert!(image_parts(&requests[1]).is_empty(), "{api}: not an image, so not sent as one: {}", requests[1]);
        assert!(requests[1].to_string().contains("and this?"), "{api}");
        assert!(image_parts(&requests[2]).is_empty(), "{api}: {}", requests[2]);
        let third = requests[2].to_string();
        assert!(third.contains("not shown: it is 2008 bytes, over the limit of 1024 bytes ([agent] max_image_kb)"), "{api}: {third}");

        let sessions: String = std::fs::read_dir(home.path().join("sessions"))
            .unwrap()
            .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
            .collect();
        assert!(sessions.contains("what is this?") && sessions.contains("media/telegram/"), "{api}: {sessions}");
        assert!(!sessions.contains(&encoded[..40]) && !sessions.contains("base64"), "{api}: the session holds no image bytes");
    }
}

/// A listener on `ip` that counts the connections it accepts and holds
/// them without ever answering: a host a redirect must not reach, or a
/// platform that stalls.
fn counting_listener(ip: &str) -> (std::net::SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind((ip, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().map_while(Result::ok) {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            held.push(stream);
        }
    });
    (addr, accepted)
}

/// Issue 18, point 3: the granted platform answers a media download and an
/// `http` action with a 302 to an ungranted host and to a private address.
/// The first hops are served (with the token, as the platform's own
/// requests), the redirects are not followed: neither other host is ever
/// contacted (so the token never goes there), the download is refused with
/// a note the model sees, and nothing of the other hosts reaches the model.
#[test]
fn platform_redirects_reach_neither_other_hosts_nor_the_model() {
    let home = tempfile::tempdir().unwrap();
    install(home.path());
    let (private, private_hits) = counting_listener("127.0.0.2");
    let (other, other_hits) = counting_listener("127.0.0.1");
    let server = Server::start();
    {
        let mut s = server.state.lock().unwrap();
        s.redirect_private = format!("http://{private}/stolen-sentinel");
        s.redirect_other = format!("http://{other}/stolen-sentinel");
    }
    server.push(0, &format!("http-flood http://127.0.0.1:{}/redir-other 1", server.port));
    server.push(1, "media photo-private");
    server.push(2, "media photo-other");
    let mock = MockLlm::with_handler(|_, _| MockReply::text("seen"));
    let gw = Gateway::start(home.path(), &mock, &config(server.port, "\"*\""), false);
    gw.wait_for("both photos reached the model", || mock.request_count() >= 2);
    gw.wait_for("the action's redirect logged", || gw.stderr().contains("http action answered 302"));
    std::thread::sleep(Duration::from_millis(300));
    let err = gw.terminate();
    let redirected = server.state.lock().unwrap().redirected.clone();
    assert_eq!(redirected.len(), 3, "every first hop was served: {redirected:?}");
    assert!(redirected.iter().filter(|p| p.contains("/file/")).all(|p| p.contains(TOKEN)), "the platform's own requests carry the token: {redirected:?}");
    assert_eq!(private_hits.load(std::sync::atomic::Ordering::SeqCst), 0, "the private address was contacted");
    assert_eq!(other_hits.load(std::sync::atomic::Ordering::SeqCst), 0, "the ungranted host was contacted");
    let asked = serde_json::to_string(&mock.requests()).unwrap();
    // The second turn's request holds both messages (one session).
    let last = serde_json::to_string(mock.requests().last().unwrap()).unwrap();
    assert_eq!(last.matches("[photo not downloaded: the server answered a redirect (302)").count(), 2, "{last}");
    assert!(asked.contains(&format!("to http://{private}")), "{asked}");
    assert!(!asked.contains(TOKEN) && !err.contains(TOKEN), "the token leaked");
    assert!(!std::fs::read_dir(home.path().join("media/echo")).map(|d| d.count() > 0).unwrap_or(false), "nothing was stored");
}

/// Issue 18, point 4: a hostile channel floods under `ulimit -n 256`: `http`
/// actions (60 a step) to a server that accepts and never answers, and
/// emits (60 a step) from made-up chats and senders, step after step. The
/// descriptors it holds stay at `max_concurrent_requests`, the messages it
/// hands to the agent at `max_messages_per_min`, its warnings bounded, its
/// record small; and a user's turn on the web API beside it is answered.
#[test]
fn a_channel_flood_under_a_low_descriptor_limit_never_costs_another_turn() {
    let home = tempfile::tempdir().unwrap();
    install(home.path());
    let (silent, held) = counting_listener("127.0.0.1");
    let server = Server::start();
    for id in 0..3000u64 {
        if id % 2 == 0 {
            server.push(id, &format!("http-flood http://{silent}/x 60"));
        } else {
            server.push(id, "emit-flood 60");
        }
    }
    let mock = MockLlm::with_handler(|request, _| {
        MockReply::text(if request.to_string().contains("web turn beside the flood") { "web ok" } else { "flood answered" })
    });
    let config = config(server.port, "\"*\"")
        .replace("network = [\"127.0.0.1:", &format!("network = [\"{silent}\", \"127.0.0.1:"))
        .replace("[channels.echo]\n", "[channels.echo]\nmax_messages_per_min = 5\n");
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "ulimit -n 256 && exec \"$0\" gateway", CHITIN])
        .env("CHITIN_HOME", home.path())
        .env_remove("OPENAI_API_KEY")
        .env_remove("CHITIN_MODEL")
        .env("OPENAI_BASE_URL", mock.base_url())
        .env("ECHO_TEST_TOKEN", TOKEN)
        .env("RUST_LOG", "chitin=info");
    let gw = Gateway::spawn(cmd);
    gw.wait_for("the http flood ran", || held.load(std::sync::atomic::Ordering::SeqCst) >= 1);
    gw.wait_for("the emit flood ran into its budget", || gw.stderr().contains("more than 5 messages in a minute"));
    gw.wait_for("the flood going on (many steps)", || server.offsets().last().is_some_and(|o| *o >= 40));
    let started = std::time::Instant::now();
    let (status, body) = block_on(async {
        let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "web turn beside the flood"}]});
        let response = reqwest::Client::new().post(gw.url("/v1/chat/completions")).json(&body).send().await.expect("the gateway answers");
        let status = response.status().as_u16();
        (status, response.text().await.unwrap())
    });
    let took = started.elapsed();
    let offset_after = server.offsets().last().copied().unwrap_or(0);
    let err = gw.terminate();
    assert_eq!(status, 200, "{body}\n{err}");
    assert!(body.contains("web ok"), "{body}");
    assert!(offset_after < 2999, "the flood was still going when the turn was answered (offset {offset_after})");
    eprintln!("web turn beside the flood: {took:?}; flood at update {offset_after}");
    let held = held.load(std::sync::atomic::Ordering::SeqCst);
    assert!((1..=8).contains(&held), "connections the silent server holds: {held} (max_concurrent_requests = 8)");
    assert!(!err.contains("Too many open files"), "{err}");
    let flood_turns = mock.requests().iter().filter(|r| r.to_string().contains("flood message")).count();
    assert!((1..=5).contains(&flood_turns), "flood messages that reached the model: {flood_turns}");
    let action_lines = err.lines().filter(|l| l.contains("http action failed")).count();
    assert!(action_lines <= 20, "{action_lines} warning lines about dropped actions");
    assert_eq!(err.matches("more than 5 messages in a minute").count(), 1, "one warning per window");
    let record = std::fs::metadata(home.path().join("channels/echo.json")).map(|m| m.len()).unwrap_or(0)
        + std::fs::metadata(home.path().join("channels/echo.journal")).map(|m| m.len()).unwrap_or(0);
    assert!(record < 4 << 20, "the channel record grew to {record} bytes");
}

/// Issue 18, point 8: the platform never answers `sendChatAction`; the
/// typing indicator runs off the reply's path under its own deadline, so
/// the reply is sent as soon as the agent has it.
#[test]
fn a_typing_indicator_that_never_answers_does_not_delay_the_reply() {
    let tg_token = "515151:HANG-tg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    telegram.hang("sendChatAction");
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let mock = MockLlm::start(vec![MockReply::text("prompt reply")]);
    std::fs::write(home.path().join("config.toml"), telegram_config(&ws, &telegram)).unwrap();
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    gw.wait_for("polling", || telegram.is_polling());
    telegram.push(chitin_testing::MockUpdate::text(777, 555, "are you there?"));
    gw.wait_for("the reply", || !replies(&telegram).is_empty());
    let typing = telegram.requests_for("sendChatAction");
    let sent = telegram.requests_for("sendMessage");
    let err = gw.terminate();
    assert!(!typing.is_empty(), "the hung indicator was asked for: {err}");
    let waited = sent[0].at.duration_since(typing[0].at);
    eprintln!("reply sent {waited:?} after the hung sendChatAction");
    assert!(waited < Duration::from_secs(4), "the reply waited {waited:?} behind the typing indicator");
    assert_eq!(replies(&telegram)[0].text, "prompt reply");
}

/// Issue 18, point 10: `api_base` holds with a `[plugins.telegram]` table
/// (one that grants only a local server, as for a self-hosted Bot API):
/// every request reaches the mock, none is denied. A mistyped `token =`
/// for `bot_token` stops the start with the key to set and names `token`.
#[test]
fn api_base_holds_with_a_plugins_table_and_a_missing_secret_stops_the_start() {
    let tg_token = "616161:TABLE-tg-distinctive";
    let telegram = chitin_testing::MockTelegram::with_token(tg_token, "chitinbot");
    telegram.push(chitin_testing::MockUpdate::text(777, 555, "hello through my own server"));
    let home = tempfile::tempdir().unwrap();
    let ws = home.path().join("ws");
    let mock = MockLlm::start(vec![MockReply::text("answered locally")]);
    let table = format!("[plugins.telegram]\nnetwork = [\"{}\"]\n", telegram.addr());
    std::fs::write(home.path().join("config.toml"), format!("{}{table}", telegram_config(&ws, &telegram))).unwrap();
    let gw = Gateway::spawn(telegram_gateway(home.path(), &mock, tg_token));
    gw.wait_for("the reply through api_base", || !replies(&telegram).is_empty());
    let err = gw.terminate();
    assert_eq!(replies(&telegram)[0].text, "answered locally");
    assert!(!err.contains("denied"), "{err}");
    assert!(telegram.requests().iter().all(|r| r.authorized), "the token was filled in for the platform");

    // `token` instead of `bot_token`: named, and the start stops.
    let mistyped = telegram_config(&ws, &telegram).replace("bot_token = ", "token = ").replace("${TG_TEST_TOKEN}", tg_token);
    std::fs::write(home.path().join("config.toml"), mistyped).unwrap();
    let out = run_within(&mut telegram_gateway(home.path(), &mock, tg_token), Duration::from_secs(60));
    let text = stderr(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("channels.telegram.bot_token") && text.contains("`token` is set: did you mean `bot_token`?"), "{text}");
    assert!(text.contains("channels.telegram.token is not a key chitin knows"), "the warning names the key: {text}");
    assert!(!text.contains(tg_token), "the mistyped secret's value is not logged: {text}");
}
