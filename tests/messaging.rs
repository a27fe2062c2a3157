//! The `message` tool over the privileged `messaging` interface (issue 11):
//! the built-in `agent` component asks the host to send; the host checks
//! the grant, queues the message like a reply, and applies the RESPOND rule
//! (a send to the current chat replaces the turn's final reply, unless the
//! user said more after it).

use std::sync::Arc;
use std::time::Duration;

use chitin::agent::services::VIA_MESSAGE_TOOL;
use chitin::bus::{InboundMessage, OutboundKind, OutboundMessage};
use chitin::testing::{MockLlm, MockReply};
use chitin_tests::agent::{TestAgent, request_messages, wait_until};
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
    events.iter().filter(|e| matches!(e.kind, OutboundKind::Message { .. })).collect()
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
    assert_eq!(sent[0].metadata[VIA_MESSAGE_TOOL], true);
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
