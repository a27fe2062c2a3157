//! Compaction (spec §7): token consolidation and idle compaction against the
//! scripted mock LLM, offline, with a hand-moved clock (no sleeps).
//!
//! Token figures are always computed with chitin's own estimator
//! (`chitin::tokens`, `estimate_unarchived`), never assumed, so these tests
//! hold whatever tokenizer sits behind it.

use std::sync::Arc;
use std::time::Duration;

use chitin::compact::{
    AutoCompact, Clock, ConsolidationReport, ConsolidationSettings, Consolidator, HistoryArchive, LAST_SUMMARY,
    ManualClock, estimate_unarchived, prompt_overhead,
};
use chitin::provider::{OpenAiOptions, OpenAiProvider, Provider, RetryPolicy};
use chitin::session::{Message, Role, Session, ToolCall};
use chitin_testing::{MockLlm, MockReply};
use chitin::tokens::estimate_message;
use serde_json::Value;

/// A 4 096-token model answering with up to 512: budget 2 560, target 1 280.
const CONTEXT_WINDOW: usize = 4096;
const MAX_TOKENS: u32 = 512;
const SYSTEM_PROMPT: &str = "You are chitin, a careful personal assistant.";

fn provider(mock: &MockLlm, retry: RetryPolicy) -> Arc<dyn Provider> {
    Arc::new(
        OpenAiProvider::new(OpenAiOptions {
            base_url: mock.base_url(),
            api_key: None,
            request_timeout: Duration::from_secs(10),
            retry,
            stream: false,
            vision: true,
        })
        .expect("provider"),
    )
}

/// A consolidator over `mock`, archiving into a fresh workspace.
fn make_consolidator(mock: &MockLlm, retry: RetryPolicy) -> (Consolidator, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let archive = HistoryArchive::new(&chitin::workspace::Workspace::open(dir.path()).unwrap());
    let settings = ConsolidationSettings::new(CONTEXT_WINDOW, MAX_TOKENS);
    (Consolidator::new(provider(mock, retry), "mock-model".into(), archive, settings), dir)
}

/// A mock that numbers its summaries.
fn summarising_mock() -> MockLlm {
    MockLlm::with_handler(|_, i| MockReply::text(format!("summary {i}")))
}

/// Pushes one turn: a question, a tool call and its result, an answer.
fn push_turn(session: &mut Session, i: usize, words: usize) {
    let filler = " lorem ipsum".repeat(words);
    session.push(Message::user(format!("question {i}{filler}")));
    session.push(Message::assistant_calls(None, vec![ToolCall::new(format!("call{i}"), "read_file", "{\"path\":\"a\"}")]));
    session.push(Message::tool_result(format!("call{i}"), "read_file", format!("result {i}{filler}")));
    session.push(Message::assistant(format!("answer {i}{filler}")));
}

fn session_with(turns: usize, words: usize) -> Session {
    let mut session = Session::new("cli:test");
    for i in 0..turns {
        push_turn(&mut session, i, words);
    }
    session
}

/// The overhead of a prompt with `SYSTEM_PROMPT`, no tools and a probe.
fn overhead() -> usize {
    prompt_overhead(SYSTEM_PROMPT, 0, &Message::user("probe"))
}

/// The text of message `n` of request `i` to the mock.
fn request_text(mock: &MockLlm, i: usize, n: usize) -> String {
    mock.requests()[i]["messages"][n]["content"].as_str().unwrap_or_default().to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn consolidation_triggers_exactly_at_the_budget() {
    let mock = summarising_mock();
    let (consolidator, _dir) = make_consolidator(&mock, RetryPolicy::none());
    let budget = consolidator.budget();
    assert_eq!(budget, CONTEXT_WINDOW - MAX_TOKENS as usize - 1024);
    let mut session = session_with(6, 10);
    let tail = estimate_unarchived(&session);
    assert!(tail < budget, "the session alone must stay under the budget");

    // One token below: nothing happens, the model is not asked.
    let below = budget - tail - 1;
    assert!(!consolidator.needs_consolidation(&session, &below));
    let report = consolidator.maybe_consolidate(&mut session, SYSTEM_PROMPT, below).await.unwrap();
    assert!(!report.triggered && !report.changed());
    assert_eq!((report.tokens_before, report.rounds, report.chunks), (budget - 1, 0, 0));
    assert_eq!(mock.request_count(), 0);
    assert_eq!(session.last_consolidated, 0);

    // Exactly at the budget: consolidation runs.
    let at = budget - tail;
    assert!(consolidator.needs_consolidation(&session, &at));
    let report = consolidator.maybe_consolidate(&mut session, SYSTEM_PROMPT, at).await.unwrap();
    assert!(report.triggered && report.changed(), "{report:?}");
    assert_eq!(report.tokens_before, budget);
    assert!(report.rounds >= 1 && mock.request_count() == report.rounds);
    assert!(session.last_consolidated > 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn chunks_end_just_before_user_messages_and_keep_the_last_turn() {
    let mock = summarising_mock();
    let (consolidator, _dir) = make_consolidator(&mock, RetryPolicy::none());
    let mut session = session_with(30, 12);
    // The current turn: a user message not answered yet.
    session.push(Message::user("the current question"));
    let last_user = session.messages.len() - 1;
    let report = consolidator.maybe_consolidate(&mut session, SYSTEM_PROMPT, consolidator.budget()).await.unwrap();
    assert!(report.chunks >= 1, "{report:?}");

    let entries = consolidator.archive().entries().unwrap();
    assert_eq!(entries.len(), report.summaries);
    let mut previous = 0;
    for entry in &entries {
        assert!(entry.cursor > previous, "cursors grow: {entries:?}");
        assert_eq!(session.messages[entry.cursor].role, Role::User, "a chunk ends just before a user message");
        previous = entry.cursor;
    }
    assert_eq!(previous, session.last_consolidated);
    assert!(session.last_consolidated <= last_user, "the last user message is never archived");
    assert_eq!(session.messages.len(), 30 * 4 + 1, "nothing deleted");

    // The summary request: the system prompt as prefix, the chunk as a
    // transcript in a user message, no tools.
    let first = &mock.requests()[0];
    assert!(first.get("tools").is_none_or(|t| t.as_array().is_some_and(Vec::is_empty)), "no tools: {first}");
    let system = request_text(&mock, 0, 0);
    assert!(system.starts_with(SYSTEM_PROMPT) && system.contains("NOTHING"), "{system}");
    let transcript = request_text(&mock, 0, 1);
    assert!(transcript.contains("USER: question 0") && transcript.contains("ASSISTANT called read_file"));
    let first_cursor = entries[0].cursor;
    let next_question = session.messages[first_cursor].text().split_whitespace().take(2).collect::<Vec<_>>().join(" ");
    assert!(!transcript.contains(&format!("USER: {next_question} ")), "the chunk stops before {next_question}");
}

#[tokio::test(flavor = "multi_thread")]
async fn consolidation_stops_at_half_the_budget_within_five_rounds() {
    let mock = summarising_mock();
    let (consolidator, _dir) = make_consolidator(&mock, RetryPolicy::none());
    let budget = consolidator.budget();
    let mut session = session_with(20, 8);
    // Grow the session until the prompt is just over the budget.
    let mut i = 20;
    while overhead() + estimate_unarchived(&session) < budget + 200 {
        push_turn(&mut session, i, 8);
        i += 1;
    }
    let report: ConsolidationReport = consolidator.maybe_consolidate(&mut session, SYSTEM_PROMPT, overhead()).await.unwrap();
    assert!(report.triggered);
    assert!(report.rounds <= 5, "{report:?}");
    assert!(report.tokens_after <= budget / 2, "{report:?}");
    assert_eq!(report.tokens_after, overhead() + estimate_unarchived(&session));
    assert_eq!(report.target, budget / 2);
    assert_eq!((report.summaries, report.raw, report.nothing), (report.chunks, 0, 0));
    assert_eq!(report.archived_messages, session.last_consolidated);
    // Right after, the next turn does not consolidate again.
    assert!(!consolidator.needs_consolidation(&session, &overhead()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_model_archives_the_chunk_raw_and_still_advances() {
    // Every request fails, not only the first.
    let mock = MockLlm::with_handler(|_, _| MockReply::api_error(500, "the model is down"));
    let (consolidator, _dir) = make_consolidator(&mock, RetryPolicy::none());
    let mut session = session_with(30, 12);
    let report = consolidator.maybe_consolidate(&mut session, SYSTEM_PROMPT, overhead()).await.unwrap();
    assert!(report.chunks >= 1 && report.raw == report.chunks && report.summaries == 0, "{report:?}");
    assert!(session.last_consolidated > 0);
    assert!(report.tokens_after <= report.target);

    let entries = consolidator.archive().entries().unwrap();
    assert_eq!(entries.len(), report.raw);
    let raw = &entries[0].content;
    assert!(raw.contains("summarising failed"), "{raw}");
    assert!(raw.contains("USER: question 0") && raw.contains("TOOL read_file: result 0"), "a readable transcript: {raw}");
    assert!(raw.chars().count() <= 8_200, "bounded");
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_worth_keeping_writes_nothing_but_advances() {
    let mock = MockLlm::with_handler(|_, _| MockReply::text("  nothing\n"));
    let (consolidator, _dir) = make_consolidator(&mock, RetryPolicy::none());
    let mut session = session_with(30, 12);
    let report = consolidator.maybe_consolidate(&mut session, SYSTEM_PROMPT, overhead()).await.unwrap();
    assert!(report.chunks >= 1 && report.nothing == report.chunks, "{report:?}");
    assert!(session.last_consolidated > 0);
    assert!(consolidator.archive().entries().unwrap().is_empty());
    assert!(!consolidator.archive().path().exists(), "not even an empty file");
}

#[tokio::test(flavor = "multi_thread")]
async fn archive_entries_carry_cursor_timestamp_session_and_content() {
    let mock = summarising_mock();
    let (consolidator, dir) = make_consolidator(&mock, RetryPolicy::none());
    let mut session = session_with(30, 12);
    consolidator.maybe_consolidate(&mut session, SYSTEM_PROMPT, overhead()).await.unwrap();

    let text = std::fs::read_to_string(dir.path().join("memory/history.jsonl")).unwrap();
    let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("one JSON object per line")).collect();
    assert!(!lines.is_empty());
    for (i, line) in lines.iter().enumerate() {
        assert!(line["cursor"].as_u64().is_some_and(|c| c > 0));
        let stamp = line["timestamp"].as_str().unwrap();
        assert!(stamp.len() >= 20 && stamp.as_bytes()[10] == b'T' && stamp.ends_with('Z'), "RFC 3339: {stamp}");
        assert_eq!(line["session_key"], "cli:test");
        assert_eq!(line["content"], format!("summary {i}"));
    }
    // BUILD's view: this session's latest entries, oldest first, bounded.
    let recent = consolidator.archive().recent("cli:test", 2, 10_000);
    let expected: Vec<String> = (lines.len().saturating_sub(2)..lines.len()).map(|i| format!("summary {i}")).collect();
    assert_eq!(recent, expected);
    assert!(consolidator.archive().recent("telegram:other", 10, 10_000).is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_single_oversized_turn_is_left_alone() {
    let mock = summarising_mock();
    let (consolidator, _dir) = make_consolidator(&mock, RetryPolicy::none());
    let mut session = Session::new("cli:test");
    push_turn(&mut session, 0, 2_000);
    let report = consolidator.maybe_consolidate(&mut session, SYSTEM_PROMPT, overhead()).await.unwrap();
    assert!(report.triggered && report.rounds == 0 && !report.changed(), "{report:?}");
    assert_eq!(mock.request_count(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn five_thousand_messages_stay_inside_the_window_and_all_stay_on_the_session() {
    let mock = summarising_mock();
    let (consolidator, _dir) = make_consolidator(&mock, RetryPolicy::none());
    let budget = consolidator.budget();
    let mut session = Session::new("cli:test");
    let mut consolidations = 0;
    for i in 0..1250 {
        push_turn(&mut session, i, i % 7);
        let report = consolidator.maybe_consolidate(&mut session, SYSTEM_PROMPT, overhead()).await.unwrap();
        if report.triggered {
            consolidations += 1;
            assert!(report.rounds <= 5 && report.tokens_after <= budget / 2, "turn {i}: {report:?}");
        }
        assert!(overhead() + estimate_unarchived(&session) < budget, "turn {i}");
    }
    assert_eq!(session.messages.len(), 5000, "nothing deleted");
    assert!(consolidations > 10, "consolidated repeatedly ({consolidations})");
    // Hysteresis: far fewer consolidations than turns.
    assert!(consolidations < 1250 / 5, "{consolidations}");
    // What BUILD would send fits the window.
    let history = session.get_history(500, budget, estimate_message);
    let history_tokens: usize = history.iter().map(estimate_message).sum();
    assert!(overhead() + history_tokens <= CONTEXT_WINDOW - MAX_TOKENS as usize);
    let entries = consolidator.archive().entries().unwrap();
    assert_eq!(entries.last().unwrap().cursor, session.last_consolidated);
    assert!(entries.windows(2).all(|w| w[0].cursor < w[1].cursor));

    // The same backlog all at once: repeated calls (≤5 rounds each) bring it
    // under the target, one call at a time.
    let mock = summarising_mock();
    let (consolidator, _dir) = make_consolidator(&mock, RetryPolicy::fast());
    let mut session = Session::new("cli:bulk");
    for i in 0..1250 {
        push_turn(&mut session, i, i % 7);
    }
    let mut calls = 0;
    loop {
        let report = consolidator.maybe_consolidate(&mut session, SYSTEM_PROMPT, overhead()).await.unwrap();
        calls += 1;
        assert!(report.rounds <= 5);
        if report.tokens_after <= budget / 2 {
            break;
        }
        assert!(report.changed(), "progress on every call: {report:?}");
        assert!(calls < 200);
    }
    assert!(calls > 1);
    assert_eq!(session.messages.len(), 5000);
    assert!(overhead() + estimate_unarchived(&session) <= budget / 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_sessions_are_compacted_and_fresh_ones_are_not() {
    let mock = MockLlm::with_handler(|_, _| MockReply::text("Ada likes tea; she asked about notes.txt."));
    let dir = tempfile::tempdir().unwrap();
    let mut idle = session_with(5, 3);
    let clock = Arc::new(ManualClock::new(idle.updated_at));
    let auto = AutoCompact::new(
        provider(&mock, RetryPolicy::none()),
        "mock-model".into(),
        HistoryArchive::new(&chitin::workspace::Workspace::open(dir.path()).unwrap()),
        Duration::from_secs(30 * 60),
        clock.clone(),
    );
    assert!(auto.should_scan(), "the first scan");
    assert!(!auto.should_scan(), "at most once a minute");

    clock.advance(Duration::from_secs(29 * 60));
    let mut fresh = session_with(5, 3);
    fresh.key = "cli:fresh".into();
    fresh.updated_at = clock.now();
    assert!(!auto.is_expired(&idle), "29 minutes is not idle yet");
    clock.advance(Duration::from_secs(60));
    assert!(auto.should_scan());
    assert!(auto.is_expired(&idle), "30 minutes is");
    assert!(!auto.is_expired(&fresh), "touched a minute ago");

    let summary = auto.compact(&mut idle, SYSTEM_PROMPT).await.unwrap();
    assert_eq!(summary.as_deref(), Some("Ada likes tea; she asked about notes.txt."));
    assert_eq!(idle.last_consolidated, idle.messages.len());
    assert_eq!(idle.messages.len(), 20, "nothing deleted");
    let stored = &idle.metadata[LAST_SUMMARY];
    assert_eq!(stored["text"], "Ada likes tea; she asked about notes.txt.");
    assert_eq!(stored["cursor"], 20);
    assert!(stored["at"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert!(!auto.is_expired(&idle), "nothing left to summarise");
    // The whole tail went into one request, with the system prompt first.
    assert_eq!(mock.request_count(), 1);
    let transcript = request_text(&mock, 0, 1);
    assert!(transcript.contains("USER: question 0") && transcript.contains("ASSISTANT: answer 4"));
    // The last 8 messages still replay.
    let history = idle.get_history(500, usize::MAX, estimate_message);
    assert_eq!(history.len(), 8);
    assert!(history[0].text().starts_with("question 3 "));

    let entries = auto.summariser().archive().entries().unwrap();
    assert_eq!(entries.len(), 1);
    assert_eq!((entries[0].cursor, entries[0].session_key.as_str()), (20, "cli:test"));
    assert_eq!(entries[0].timestamp.timestamp(), clock.now().timestamp());

    // Later messages make it expirable again, once idle.
    idle.push(Message::user("back again"));
    idle.updated_at = clock.now();
    assert!(!auto.is_expired(&idle));
    clock.advance(Duration::from_secs(30 * 60));
    assert!(auto.is_expired(&idle));
}

#[tokio::test(flavor = "multi_thread")]
async fn idle_compaction_off_and_failures() {
    let mock = MockLlm::with_handler(|_, _| MockReply::api_error(503, "overloaded"));
    let dir = tempfile::tempdir().unwrap();
    let mut session = session_with(3, 3);
    let clock = Arc::new(ManualClock::new(session.updated_at));
    let off = AutoCompact::new(
        provider(&mock, RetryPolicy::none()),
        "mock-model".into(),
        HistoryArchive::new(&chitin::workspace::Workspace::open(dir.path()).unwrap()),
        Duration::ZERO,
        clock.clone(),
    );
    clock.advance(Duration::from_secs(365 * 24 * 3600));
    assert!(!off.is_expired(&session) && !off.should_scan(), "0 = off");

    let on = AutoCompact::new(
        provider(&mock, RetryPolicy::none()),
        "mock-model".into(),
        HistoryArchive::new(&chitin::workspace::Workspace::open(dir.path()).unwrap()),
        Duration::from_secs(60),
        clock.clone(),
    );
    assert!(on.is_expired(&session));
    assert_eq!(on.compact(&mut session, SYSTEM_PROMPT).await.unwrap(), None);
    assert_eq!(session.last_consolidated, 12, "the cursor advances on failure");
    assert!(!session.metadata.contains_key(LAST_SUMMARY));
    let entries = on.summariser().archive().entries().unwrap();
    assert_eq!(entries.len(), 1);
    assert!(entries[0].content.contains("summarising failed") && entries[0].content.contains("USER: question 2"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cleared_tail_can_be_archived_from_a_snapshot() {
    // What `/new` does: snapshot the unarchived tail, clear, archive later.
    let mock = summarising_mock();
    let (consolidator, _dir) = make_consolidator(&mock, RetryPolicy::none());
    let mut session = session_with(2, 1);
    let snapshot: Vec<Message> = session.recent().to_vec();
    let cursor = session.messages.len();
    session.clear();
    let at = ManualClock::default().now();
    let outcome =
        consolidator.summariser().archive_chunk(&session.key, &snapshot, cursor, SYSTEM_PROMPT, at).await.unwrap();
    assert_eq!(outcome, chitin::compact::ChunkOutcome::Summary("summary 0".into()));
    assert_eq!(consolidator.archive().recent("cli:test", 5, 1000), ["summary 0"]);
}
