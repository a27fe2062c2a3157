//! The turn's output seam (`TurnSink`): what a turn reports while it runs
//! (its start, tool starts, the plugin's `host.progress` texts, tool ends)
//! reaches the bus as `Progress` events addressed to the inbound chat when
//! the turn came from the bus, and only the caller's sink when it did not.
//! The progress is the hostile guest's: escaped and budgeted on the way.

use std::sync::Arc;
use std::time::Duration;

use chitin::bus::{InboundMessage, OutboundKind, OutboundMessage, Reply, ToolProgress};
use chitin_testing::{MockLlm, MockReply};
use chitin_testing::agent::TestAgent;
use serde_json::json;

/// Terminal controls a plugin might send: window title (OSC 0), clipboard
/// (OSC 52), carriage return, cursor up, a C1 CSI, a right-to-left override.
const HOSTILE_TEXT: &str = "ok\x1b]0;owned\x07\x1b]52;c;cGF3bmVk\x07\r\x1b[2A\u{9b}31m\u{202e}txt";
/// The same, as `chitin::text::for_terminal` shows it.
const HOSTILE_SHOWN: &str = "ok\\x1b]0;owned\\x07\\x1b]52;c;cGF3bmVk\\x07\\x0d\\x1b[2A\\x9b31m\\u{202e}txt";

fn is_raw_control(c: char) -> bool {
    (c.is_control() && c != '\n' && c != '\t') || c == '\u{202e}'
}

/// The outbound events of one turn, up to and including its `TurnEnd`.
async fn events_until_turn_end(t: &TestAgent) -> Vec<OutboundMessage> {
    let mut events = Vec::new();
    loop {
        let event = tokio::time::timeout(Duration::from_secs(20), t.bus.consume_outbound()).await.expect("events in time").expect("bus open");
        let end = event.kind == OutboundKind::TurnEnd;
        events.push(event);
        if end {
            return events;
        }
    }
}

/// The tool call an event reports on, if it is a tool event.
fn tool(event: &OutboundMessage) -> Option<&ToolProgress> {
    match &event.kind {
        OutboundKind::Tool(progress) => Some(progress),
        _ => None,
    }
}

fn phase_of(event: &OutboundMessage) -> Option<&'static str> {
    tool(event).map(|t| t.phase.as_str())
}

/// The tool events of the call `call_id`, as (phase, content).
fn tool_events(events: &[OutboundMessage], call_id: &str) -> Vec<(String, String)> {
    events
        .iter()
        .filter(|e| tool(e).is_some_and(|t| t.call_id == call_id))
        .map(|e| (phase_of(e).unwrap_or_default().to_string(), e.content.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn plugin_progress_reaches_the_bus_as_progress_events_naming_the_call() {
    let flood_text = format!("{HOSTILE_TEXT}{}", "x".repeat(5000));
    let mock = MockLlm::start(vec![
        MockReply::ToolCalls(vec![
            ("echo".into(), json!({"text": "hi"}).to_string()),
            ("progress_flood".into(), json!({"text": flood_text, "count": 500}).to_string()),
        ]),
        MockReply::text("done"),
    ]);
    let t = Arc::new(TestAgent::new(mock));
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "p1", "use the tools"));
    let events = events_until_turn_end(&t).await;
    running.stop().await;

    assert!(events.iter().all(|e| e.channel == "chat" && e.chat_id == "p1"), "addressed to the inbound chat: {events:#?}");
    // The turn's own hint first, without a call.
    assert_eq!((&events[0].kind, events[0].content.as_str()), (&OutboundKind::Progress, "running"));
    assert!(tool(&events[0]).is_none());

    let started: Vec<&OutboundMessage> = events.iter().filter(|e| phase_of(e) == Some("started")).collect();
    assert_eq!(started.len(), 2, "{events:#?}");
    let call_of = |name: &str| {
        let event = started.iter().find(|e| tool(e).is_some_and(|t| t.tool == name)).unwrap_or_else(|| panic!("{name} started"));
        tool(event).unwrap().call_id.clone()
    };

    // The well-behaved tool: start with an arguments preview, its one
    // progress text, a successful end, in that order.
    let echo = tool_events(&events, &call_of("echo"));
    assert_eq!(echo.len(), 3, "{echo:?}");
    assert_eq!(echo[0], ("started".into(), r#"echo({"text":"hi"})"#.into()));
    assert_eq!(echo[1], ("progress".into(), "echoing".into()));
    assert_eq!(echo[2].0, "finished");
    let finished = events.iter().find(|e| phase_of(e) == Some("finished") && tool(e).is_some_and(|t| t.tool == "echo")).unwrap();
    assert_eq!(tool(finished).unwrap().ok, Some(true));

    // The flood: 500 texts of 5 KB with terminal controls. What arrives is
    // one text, cut to a line and escaped, then the note of what was dropped.
    let flood = tool_events(&events, &call_of("progress_flood"));
    let progress: Vec<&String> = flood.iter().filter(|(phase, _)| phase == "progress").map(|(_, text)| text).collect();
    assert_eq!(progress.len(), 2, "budgeted: {progress:?}");
    assert!(progress[0].starts_with(HOSTILE_SHOWN), "{}", progress[0]);
    assert!(progress[0].len() < 1300 && progress[0].contains("cut"), "one line of at most 1 KiB: {} bytes", progress[0].len());
    assert_eq!(progress[1], "[progress cut: 499 updates dropped]");
    for event in &events {
        assert!(!event.content.chars().any(is_raw_control), "raw control characters on the bus: {:?}", event.content);
    }
    // The started hint of the flood holds only a preview of its 5 KB.
    assert!(flood[0].1.len() < 200 && flood[0].1.starts_with("progress_flood(") && flood[0].1.ends_with("…)"), "{}", flood[0].1);

    // Then the reply and the end, last.
    let kinds: Vec<&OutboundKind> = events.iter().map(|e| &e.kind).collect();
    assert!(matches!(kinds[kinds.len() - 2], OutboundKind::Message(Reply { streamed: false, .. })), "{kinds:?}");
    assert_eq!(kinds[kinds.len() - 1], &OutboundKind::TurnEnd);
    assert_eq!(events[events.len() - 2].content, "done");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_direct_turn_reports_to_its_sink_and_leaves_nothing_on_the_bus() {
    let mock = MockLlm::start(vec![MockReply::tool_call("echo", json!({"text": "hi"}).to_string()), MockReply::text("done")]);
    let t = TestAgent::new(mock);
    assert_eq!(t.ask("echo hi").await, "done");
    assert_eq!(t.recorder.events(), ["run", "before:echo:call_1", "progress:echo:call_1:echoing", "after:echo:call_1:true"]);
    // `chitin agent` builds its core with a bus nobody reads: a direct turn
    // must not fill it.
    assert!(t.bus.try_consume_outbound().is_none(), "a direct turn published on the bus");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_or_failing_call_starts_and_finishes_not_ok() {
    let mock = MockLlm::start(vec![MockReply::tool_call("read_fle", json!({"path": "a"}).to_string()), MockReply::text("ok")]);
    let t = TestAgent::new(mock);
    t.ask("read").await;
    assert_eq!(t.recorder.events(), ["run", "before:read_fle:call_1", "after:read_fle:call_1:false"]);
}
