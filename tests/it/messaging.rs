//! The `message` tool over the privileged `messaging` interface (issue 11):
//! the built-in `agent` component asks the host to send; the host checks
//! the grant, queues the message like a reply, and applies the RESPOND rule
//! (a send to the current chat replaces the turn's final reply, unless the
//! user said more after it).

use std::sync::Arc;
use std::time::Duration;

use chitin::bus::{InboundMessage, OutboundKind, OutboundMessage};
use chitin_testing::{MockLlm, MockReply};
use chitin_testing::agent::{TestAgent, request_messages, wait_until};
use serde_json::json;

fn calls(list: &[(&str, serde_json::Value)]) -> MockReply {
    MockReply::ToolCalls(list.iter().map(|(n, a)| (n.to_string(), a.to_string())).collect())
}

/// Every outbound event for chat `chat` until its turn ends.
async fn events_until_turn_end(t: &TestAgent) -> Vec<OutboundMessage> {
    let mut out = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(20), t.bus.consume_outbound()).await.expect("events in time").expect("bus open");
        let end = event.kind == OutboundKind::TurnEnd;
        out.push(event);
        if end {
            return out;
        }
    }
}

fn messages(events: &[OutboundMessage]) -> Vec<&OutboundMessage> {
    events.iter().filter(|e| matches!(e.kind, OutboundKind::Message(_))).collect()
}

/// The tool result the model got in request `index`.
fn tool_result(mock: &MockLlm, index: usize) -> String {
    request_messages(mock, index).into_iter().rev().find(|(role, _)| role == "tool").expect("a tool result").1
}

#[tokio::test(flavor = "multi_thread")]
async fn a_send_to_the_current_chat_replaces_the_final_reply() {
    let mock = MockLlm::start(vec![calls(&[("message", json!({"content": "Here is the summary.", "media": ["report.txt"]}))]), MockReply::text("Sent.")]);
    let t = Arc::new(TestAgent::new(mock));
    std::fs::write(t.workspace().join("report.txt"), "r").unwrap();
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "7", "summarise it"));
    let events = events_until_turn_end(&t).await;
    let sent = messages(&events);
    assert_eq!(sent.len(), 1, "the message tool's send and nothing else: {events:?}");
    assert_eq!((sent[0].channel.as_str(), sent[0].chat_id.as_str(), sent[0].content.as_str()), ("chat", "7", "Here is the summary."));
    assert!(sent[0].kind.reply().unwrap().via_tool, "marked as sent by the message tool");
    assert_eq!(sent[0].media, [t.workspace().join("report.txt")]);
    assert_eq!(tool_result(&t.mock, 1), "Message sent to chat:7 with 1 attachment");
    // The turn itself is saved as usual, final answer included.
    let stored = t.stored("chat:7");
    assert_eq!(stored.messages.last().unwrap().text(), "Sent.");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_injected_after_the_send_gets_the_final_reply() {
    // The send happens first; the user's second message arrives while the
    // slow tool runs and is injected after the send: it needs an answer.
    let mock = MockLlm::start(vec![
        calls(&[("message", json!({"content": "Working on it."})), ("slow_echo", json!({"text": "x", "ms": 600}))]),
        MockReply::text("Both done."),
    ]);
    let t = Arc::new(TestAgent::new(mock));
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "8", "do it"));
    wait_until(|| t.mock.request_count() >= 1).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "8", "and tell me when done"));
    let events = events_until_turn_end(&t).await;
    let texts: Vec<&str> = messages(&events).iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts, ["Working on it.", "Both done."]);
    assert_eq!(t.mock.request_count(), 2, "one turn");
    assert!(request_messages(&t.mock, 1).iter().any(|(role, text)| role == "user" && text == "and tell me when done"));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sending_elsewhere_keeps_the_reply_and_needs_the_chats_grant() {
    let mock = MockLlm::start(vec![
        calls(&[("message", json!({"content": "ping", "channel": "chat", "chat_id": "99"}))]),
        MockReply::text("Could not."),
        calls(&[("message", json!({"content": "ping", "channel": "chat", "chat_id": "99"}))]),
        MockReply::text("Pinged."),
    ]);
    // With the chat in `chats`: sent there, and this chat still gets its reply.
    let t = Arc::new(TestAgent::with_plugin_grant(mock, "\n[plugins.agent]\nhost = [\"messaging\"]\nchats = [\"chat:99\"]\n"));
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "1", "ping 99"));
    let events = events_until_turn_end(&t).await;
    let sent: Vec<(&str, &str)> = messages(&events).iter().map(|m| (m.chat_id.as_str(), m.content.as_str())).collect();
    assert_eq!(sent, [("99", "ping"), ("1", "Could not.")], "a send to another chat does not suppress this chat's reply");
    assert_eq!(tool_result(&t.mock, 1), "Message sent to chat:99");
    running.stop().await;

    // Without the grant of that chat: refused with the config key named.
    let mock = MockLlm::start(vec![calls(&[("message", json!({"content": "ping", "channel": "chat", "chat_id": "99"}))]), MockReply::text("Could not.")]);
    let t = TestAgent::new(mock);
    assert_eq!(t.ask("ping 99").await, "Could not.");
    let result = tool_result(&t.mock, 1);
    assert!(result.contains("not allowed to send to chat:99") && result.contains("chats"), "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_messaging_grant_the_call_is_refused_by_the_host() {
    let mock = MockLlm::start(vec![calls(&[("message", json!({"content": "hello"}))]), MockReply::text("I could not send it.")]);
    let t = TestAgent::with_plugin_grant(mock, "\n[plugins.agent]\nhost = []\n");
    assert_eq!(t.ask("say hello").await, "I could not send it.", "nothing was sent, so the reply is not suppressed");
    let result = tool_result(&t.mock, 1);
    assert!(result.contains("capability not granted: messaging") && result.contains("[plugins.agent]"), "{result}");
    let plugin = t.app.catalog.get("agent").expect("built-in agent plugin");
    assert!(plugin.grant.host.is_empty());
    assert!(plugin.grant_notes.iter().any(|n| n.contains("host interface `messaging`")), "{:?}", plugin.grant_notes);
}

#[tokio::test(flavor = "multi_thread")]
async fn attachments_outside_the_workspace_are_refused() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "s").unwrap();
    let mock = MockLlm::start(vec![
        calls(&[("message", json!({"content": "x", "media": [outside.path().join("secret.txt")]}))]),
        calls(&[("message", json!({"content": "x", "media": ["../secret.txt"]}))]),
        MockReply::text("Refused twice."),
    ]);
    let t = TestAgent::new(mock);
    assert_eq!(t.ask("send the secret").await, "Refused twice.");
    assert!(tool_result(&t.mock, 1).contains("relative to the workspace"), "{}", tool_result(&t.mock, 1));
    assert!(tool_result(&t.mock, 2).contains("attachment"), "{}", tool_result(&t.mock, 2));
}

mod cron {
    use super::*;
    use chitin::compact::ManualClock;
    use chitin::features::cron::CronService;

    /// `t`'s agent built with a cron service on a manual clock, as the
    /// gateway builds it.
    fn with_cron(t: TestAgent) -> (TestAgent, Arc<ManualClock>, Arc<CronService>) {
        let clock = Arc::new(ManualClock::new("2026-05-04T08:00:00Z".parse().unwrap()));
        let cron = Arc::new(CronService::open(CronService::jobs_file(t.home.path()), clock.clone()).unwrap());
        let t = t.rewired(|builder| builder.cron(cron.clone()));
        (t, clock, cron)
    }

    async fn next_message(t: &TestAgent) -> OutboundMessage {
        loop {
            let event = tokio::time::timeout(Duration::from_secs(20), t.bus.consume_outbound()).await.expect("in time").expect("open");
            if matches!(event.kind, OutboundKind::Message(_)) {
                return event;
            }
        }
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_job_the_model_adds_fires_into_its_session_and_is_answered_there() {
        let mock = MockLlm::start(vec![
            calls(&[("cron", json!({"action": "add", "name": "water", "message": "remind me to drink water", "every_seconds": 60}))]),
            MockReply::text("I'll remind you every minute."),
            MockReply::text("Time to drink some water!"),
            calls(&[("cron", json!({"action": "list"}))]),
            MockReply::text("You have one job."),
        ]);
        let (t, clock, cron) = with_cron(TestAgent::new(mock));
        let t = Arc::new(t);
        let running = t.start_loop();
        t.bus.publish_inbound(InboundMessage::new("chat", "u1", "5", "remind me to drink water every minute"));
        assert_eq!(next_message(&t).await.content, "I'll remind you every minute.");
        let added = tool_result(&t.mock, 1);
        assert!(added.starts_with("Scheduled job ") && added.contains("\"water\" (every 1 min); next run 2026-05-04T08:01:00+00:00"), "{added}");

        let active = t.agent.core().active.clone();
        assert!(cron.fire_due(&t.bus, |k| active.get(k).is_some()).unwrap().is_empty(), "not due yet");
        clock.advance(Duration::from_secs(60));
        assert_eq!(cron.fire_due(&t.bus, |k| active.get(k).is_some()).unwrap().len(), 1);
        let reminder = next_message(&t).await;
        assert_eq!((reminder.chat_id.as_str(), reminder.content.as_str()), ("5", "Time to drink some water!"));
        let asked = request_messages(&t.mock, 2);
        let (role, text) = asked.last().unwrap();
        assert_eq!(role, "user");
        assert!(text.contains("[Scheduled task \"water\"") && text.contains("remind me to drink water"), "{text}");

        t.bus.publish_inbound(InboundMessage::new("chat", "u1", "5", "what jobs do I have?"));
        assert_eq!(next_message(&t).await.content, "You have one job.");
        let listed = tool_result(&t.mock, 4);
        assert!(listed.starts_with("1 scheduled job(s):") && listed.contains("water"), "{listed}");
        // Another conversation sees none of them.
        assert!(cron.list("chat:6").is_empty());
        running.stop().await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn a_due_job_waits_while_its_session_is_busy() {
        let mock = MockLlm::start(vec![
            calls(&[("slow_echo", json!({"text": "x", "ms": 800}))]),
            MockReply::text("Slow work done."),
            MockReply::text("Reminder handled."),
        ]);
        let (t, clock, cron) = with_cron(TestAgent::new(mock));
        let t = Arc::new(t);
        let origin = chitin::features::cron::Origin { session_key: "chat:9".into(), channel: "chat".into(), chat_id: "9".into() };
        let spec = chitin::features::cron::JobSpec { name: "r".into(), message: "ping".into(), schedule: chitin::features::cron::Schedule::every(60).unwrap() };
        cron.add(spec, &origin).unwrap();
        clock.advance(Duration::from_secs(61));
        let running = t.start_loop();
        t.bus.publish_inbound(InboundMessage::new("chat", "u1", "9", "do the slow thing"));
        wait_until(|| t.mock.request_count() >= 1).await;
        let active = t.agent.core().active.clone();
        assert!(cron.fire_due(&t.bus, |k| active.get(k).is_some()).unwrap().is_empty(), "deferred while the turn runs");
        assert_eq!(next_message(&t).await.content, "Slow work done.");
        wait_until(|| active.get("chat:9").is_none()).await;
        assert_eq!(cron.fire_due(&t.bus, |k| active.get(k).is_some()).unwrap().len(), 1, "fired once the session is idle");
        assert_eq!(next_message(&t).await.content, "Reminder handled.");
        assert_eq!(t.mock.request_count(), 3, "its own turn, not injected into the slow one");
        running.stop().await;
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn without_the_grant_or_a_gateway_the_tool_says_why() {
        let mock = MockLlm::start(vec![
            calls(&[("cron", json!({"action": "add", "message": "x", "every_seconds": 60}))]),
            MockReply::text("No."),
        ]);
        let (t, _, _) = with_cron(TestAgent::with_plugin_grant(mock, "\n[plugins.agent]\nhost = [\"messaging\"]\n"));
        t.ask("schedule it").await;
        let result = tool_result(&t.mock, 1);
        assert!(result.contains("capability not granted: schedule"), "{result}");

        // Granted, but no cron service (as in `chitin agent`).
        let mock = MockLlm::start(vec![calls(&[("cron", json!({"action": "list"}))]), MockReply::text("No.")]);
        let t = TestAgent::new(mock);
        t.ask("list jobs").await;
        let result = tool_result(&t.mock, 1);
        assert!(result.contains("run in `chitin gateway`"), "{result}");

        // A bad schedule is the host's clear refusal.
        let mock = MockLlm::start(vec![
            calls(&[("cron", json!({"action": "add", "message": "x", "cron_expr": "0 9 * *"}))]),
            calls(&[("cron", json!({"action": "add", "message": "x", "at": "2020-01-01T00:00:00Z"}))]),
            MockReply::text("No."),
        ]);
        let (t, _, _) = with_cron(TestAgent::new(mock));
        t.ask("schedule").await;
        assert!(tool_result(&t.mock, 1).contains("has 4 fields"), "{}", tool_result(&t.mock, 1));
        assert!(tool_result(&t.mock, 2).contains("in the past"), "{}", tool_result(&t.mock, 2));
    }
}
