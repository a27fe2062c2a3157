//! Compaction and memory inside the running agent (spec §7, §4 COMPACT /
//! BUILD / SAVE): consolidation keeps a long session inside the window with
//! nothing deleted, idle compaction hands its summary to BUILD, `/new`
//! archives, and archived history reaches the system prompt.

use std::sync::Arc;
use std::time::Duration;

use chitin::compact::{AutoCompact, HistoryArchive, ManualClock};
use chitin::session::{JsonlStore, Message, SessionStore};
use chitin_testing::{MockLlm, MockReply};
use chitin::tokens::estimate_request;
use chitin_testing::agent::{TestAgent, wait_until};
use serde_json::Value;

/// Answers summary requests with notes, everything else with "ok".
fn mock() -> MockLlm {
    MockLlm::with_handler(|request, _| {
        let system = request["messages"][0]["content"].as_str().unwrap_or_default();
        if system.contains("# Archiving task") { MockReply::text("- the user talked about item numbers") } else { MockReply::text("ok") }
    })
}

fn is_summary_request(request: &Value) -> bool {
    request["messages"][0]["content"].as_str().unwrap_or_default().contains("# Archiving task")
}

fn messages_of(request: &Value) -> Vec<Message> {
    serde_json::from_value(request["messages"].clone()).expect("request messages parse")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_5000_message_session_stays_inside_the_window_for_50_turns() {
    let t = TestAgent::with_config(mock(), "context_window = 8192\nmax_tokens = 1024");
    let budget = 8192 - 1024 - 1024;
    // A long history written by an earlier host.
    let store = JsonlStore::new(t.app.data.sessions_dir());
    let mut session = store.load("cli:long").unwrap();
    for i in 0..2500 {
        session.push(Message::user(format!("item {i}: please remember the number {}", i * 7)));
        session.push(Message::assistant(format!("noted item {i}")));
    }
    store.save(&mut session).unwrap();

    for turn in 0..50 {
        assert_eq!(t.ask_in("cli:long", &format!("turn {turn}")).await, "ok");
    }
    let requests = t.mock.requests();
    let turns: Vec<&Value> = requests.iter().filter(|r| !is_summary_request(r)).collect();
    assert_eq!(turns.len(), 50);
    let tools: Vec<Value> = t.app.tools.definitions().to_vec();
    for request in &turns {
        let tokens = estimate_request(&messages_of(request), &tools);
        assert!(tokens <= budget, "a request of {tokens} tokens exceeds the {budget} budget");
    }
    assert!(requests.iter().any(is_summary_request), "consolidation ran");
    let stored = t.stored("cli:long");
    assert_eq!(stored.messages.len(), 5000 + 100, "nothing deleted");
    assert!(stored.last_consolidated > 0);
    assert_eq!(stored.messages[0].text(), "item 0: please remember the number 0");
    let archive = HistoryArchive::new(&chitin::workspace::Workspace::open(t.workspace()).unwrap()).entries().unwrap();
    assert!(archive.iter().all(|e| e.session_key == "cli:long"));
    assert!(!archive.is_empty());
    // The archive reaches the system prompt of later turns.
    let last = messages_of(turns.last().unwrap());
    assert!(last[0].text().contains("the user talked about item numbers"), "archived history in the system prompt");
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_sessions_are_summarised_and_the_summary_reaches_build() {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let auto_clock = clock.clone();
    let t = TestAgent::customized(mock(), "", move |core| {
        let provider = core.runner.provider().clone();
        let archive = HistoryArchive::new(&core.workspace);
        core.auto_compact = AutoCompact::new(provider, "mock-model".into(), archive, Duration::from_secs(30 * 60), auto_clock);
    });
    for i in 0..6 {
        t.ask_in("cli:idle", &format!("message {i}")).await;
    }
    assert_eq!(t.agent.compact_idle_sessions().await, 0, "not idle yet");
    clock.advance(Duration::from_secs(31 * 60));
    // Sessions are stamped by the wall clock; the manual clock is now past them.
    assert_eq!(t.agent.compact_idle_sessions().await, 1);
    let stored = t.stored("cli:idle");
    assert_eq!(stored.last_consolidated, stored.messages.len());
    assert_eq!(stored.metadata["last_summary"]["text"], "- the user talked about item numbers");
    assert_eq!(t.agent.compact_idle_sessions().await, 0, "nothing new to summarise");

    t.ask_in("cli:idle", "and now?").await;
    let last = messages_of(&t.mock.last_request().unwrap());
    assert!(last[0].text().contains("the user talked about item numbers"), "BUILD injects the summary");
    // The last 8 messages still replay after the archive cursor moved.
    let replayed: Vec<&str> = last[1..].iter().map(Message::text).collect();
    assert_eq!(replayed.len(), 9, "{replayed:?}");
    assert_eq!(*replayed.last().unwrap(), "and now?");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_with_a_running_turn_is_not_compacted() {
    let clock = Arc::new(ManualClock::new(chrono::Utc::now() + chrono::Duration::hours(2)));
    let slow = MockLlm::with_handler(|_, _| MockReply::text("slow")).with_latency(Duration::from_millis(600));
    let t = Arc::new(TestAgent::customized(slow, "", move |core| {
        let provider = core.runner.provider().clone();
        let archive = HistoryArchive::new(&core.workspace);
        core.auto_compact = AutoCompact::new(provider, "mock-model".into(), archive, Duration::from_secs(60), clock);
    }));
    t.ask_in("cli:busy", "first").await;
    let asker = t.clone();
    let turn = tokio::spawn(async move { asker.ask_in("cli:busy", "second").await });
    wait_until(|| t.agent.core().active.count() == 1).await;
    assert_eq!(t.agent.compact_idle_sessions().await, 0, "the running session is skipped");
    turn.await.unwrap();
    assert_eq!(t.agent.compact_idle_sessions().await, 1, "and compacted once idle");
}

#[tokio::test(flavor = "multi_thread")]
async fn new_archives_the_conversation_it_clears() {
    let t = TestAgent::new(mock());
    t.ask("my cat is called Miso").await;
    t.ask("/new").await;
    assert!(t.stored("cli:test").messages.is_empty());
    let archive = HistoryArchive::new(&chitin::workspace::Workspace::open(t.workspace()).unwrap());
    wait_until(|| archive.entries().map(|e| !e.is_empty()).unwrap_or(false)).await;
    let entries = archive.entries().unwrap();
    assert_eq!(entries[0].session_key, "cli:test");
    assert!(entries[0].content.contains("item numbers"), "the model's summary was archived");
}
