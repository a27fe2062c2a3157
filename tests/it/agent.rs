//! The agent runtime (spec §3–§6, §8) against a scripted mock LLM.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chitin::agent::TurnState;
use chitin::agent::runner::ERROR_PLACEHOLDER;
use chitin::agent::TurnOutcome;
use chitin::bus::InboundMessage;
use chitin::session::Role;
use chitin_testing::{MockLlm, MockReply};
use chitin_testing::agent::{TestAgent, next_reply, request_messages, wait_until};
use serde_json::json;

fn call(name: &str, args: serde_json::Value) -> MockReply {
    MockReply::ToolCalls(vec![(name.to_string(), args.to_string())])
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_turn_through_the_real_fs_plugin() {
    let mock = MockLlm::start(vec![
        call("write_file", json!({"path": "notes/todo.txt", "content": "buy milk\n"})),
        call("read_file", json!({"path": "notes/todo.txt"})),
        MockReply::text("Saved and checked."),
    ]);
    let t = TestAgent::new(mock);
    assert_eq!(t.ask("note: buy milk").await, "Saved and checked.");
    assert_eq!(std::fs::read_to_string(t.workspace().join("notes/todo.txt")).unwrap(), "buy milk\n");

    let third = request_messages(&t.mock, 2);
    let read_result = &third.iter().rev().find(|(role, _)| role == "tool").unwrap().1;
    assert!(read_result.contains("buy milk") && read_result.contains('1'), "numbered lines: {read_result}");
    // The system prompt comes first, the user message is in every request.
    assert_eq!(third[0].0, "system");
    assert!(third.iter().any(|(role, text)| role == "user" && text == "note: buy milk"));
    assert!(t.mock.requests()[0]["tools"].as_array().unwrap().iter().any(|d| d["function"]["name"] == "read_file"));

    let session = t.stored("cli:test");
    let roles: Vec<Role> = session.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool, Role::Assistant, Role::Tool, Role::Assistant]);
    assert!(!session.metadata.contains_key("pending_user_turn"));
    assert!(!session.metadata.contains_key("runtime_checkpoint"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_trace_records_every_state() {
    let t = TestAgent::new(MockLlm::start(vec![MockReply::text("hi")]));
    let TurnOutcome::Done(ctx) = t.agent.process_direct("hello", "cli:test", t.recorder.clone()).await else { panic!("turn failed") };
    let states: Vec<TurnState> = ctx.trace.iter().map(|e| e.state).collect();
    use TurnState::*;
    assert_eq!(states, [Restore, Compact, Command, Build, Run, Save, Respond]);
    assert!(ctx.trace.iter().all(|e| e.error.is_none() && e.duration_ms >= 0.0));
    let reply = ctx.outbound.unwrap();
    assert!(reply.kind.reply().and_then(|r| r.latency_ms).is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn history_is_replayed_on_the_next_turn() {
    let t = TestAgent::new(MockLlm::start(vec![MockReply::text("Nice to meet you, Ada."), MockReply::text("You are Ada.")]));
    t.ask("I am Ada").await;
    assert_eq!(t.ask("who am I?").await, "You are Ada.");
    let second = request_messages(&t.mock, 1);
    let texts: Vec<&str> = second.iter().skip(1).map(|(_, text)| text.as_str()).collect();
    assert_eq!(texts, ["I am Ada", "Nice to meet you, Ada.", "who am I?"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn blank_answers_are_retried_then_asked_without_tools() {
    let t = TestAgent::new(MockLlm::start(vec![MockReply::Blank, MockReply::Blank, MockReply::text("Here you go.")]));
    assert_eq!(t.ask("hello").await, "Here you go.");
    let requests = t.mock.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1]["tools"].is_array(), "the retry keeps tools");
    assert!(requests[2].get("tools").is_none(), "the last try has no tools");
    let last = request_messages(&t.mock, 2);
    assert!(last.last().unwrap().1.contains("conversation above"));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_answer_that_stays_blank_gets_the_fixed_text() {
    let t = TestAgent::new(MockLlm::start(vec![MockReply::Blank, MockReply::Blank, MockReply::Blank]));
    let reply = t.ask("hello").await;
    assert!(reply.contains("no final answer"), "{reply}");
    assert_eq!(t.stored("cli:test").messages.last().unwrap().text(), reply);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_length_cut_answer_is_continued_and_joined() {
    let t = TestAgent::new(MockLlm::start(vec![MockReply::Length("The answer is ".into()), MockReply::Length("forty".into()), MockReply::text("-two.")]));
    assert_eq!(t.ask("what is it?").await, "The answer is forty-two.");
    let third = request_messages(&t.mock, 2);
    let (role, text) = &third[third.len() - 2];
    assert_eq!((role.as_str(), text.as_str()), ("assistant", "The answer is forty"));
    assert!(third.last().unwrap().1.contains("Continue exactly"));
    let stored = t.stored("cli:test");
    assert_eq!(stored.messages.last().unwrap().text(), "The answer is forty-two.");
}

#[tokio::test(flavor = "multi_thread")]
async fn transient_provider_errors_are_retried() {
    let t = TestAgent::new(MockLlm::start(vec![
        MockReply::api_error(429, "slow down"),
        MockReply::api_error(500, "oops"),
        MockReply::text("fine now"),
    ]));
    assert_eq!(t.ask("hi").await, "fine now");
    assert_eq!(t.mock.request_count(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn quota_errors_are_shown_but_history_keeps_a_placeholder() {
    let t = TestAgent::new(MockLlm::start(vec![MockReply::api_error(402, "insufficient_quota: you exceeded your quota")]));
    let reply = t.ask("hi").await;
    assert!(reply.to_lowercase().contains("billing") || reply.to_lowercase().contains("quota"), "{reply}");
    assert_eq!(t.mock.request_count(), 1, "not retried");
    let stored = t.stored("cli:test");
    assert_eq!(stored.messages.last().unwrap().text(), ERROR_PLACEHOLDER);
    assert!(!stored.messages.iter().any(|m| m.text().contains("quota")), "the error text is not replayed to the model");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_request_times_out_with_a_clear_error() {
    let t = TestAgent::with_config(MockLlm::start(vec![MockReply::Hang, MockReply::Hang, MockReply::Hang, MockReply::Hang]), "llm_timeout_secs = 1");
    let started = Instant::now();
    let reply = t.ask("hi").await;
    assert!(reply.contains("failed"), "{reply}");
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_tool_calls_go_back_to_the_model() {
    let mock = MockLlm::start(vec![
        MockReply::ToolCalls(vec![("read_file".into(), "{\"path\": ".into()), ("".into(), "{}".into())]),
        MockReply::text("I will fix that."),
    ]);
    let t = TestAgent::new(mock);
    assert_eq!(t.ask("read it").await, "I will fix that.");
    let second = request_messages(&t.mock, 1);
    let tools: Vec<&(String, String)> = second.iter().filter(|(role, _)| role == "tool").collect();
    assert_eq!(tools.len(), 1, "the call without a name was dropped");
    assert!(tools[0].1.contains("not valid JSON") && tools[0].1.contains("different approach"), "{}", tools[0].1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_near_miss_tool_name_gets_a_suggestion() {
    let t = TestAgent::new(MockLlm::start(vec![call("read_fle", json!({"path": "a"})), MockReply::text("ok")]));
    t.ask("read a").await;
    let result = request_messages(&t.mock, 1).into_iter().rev().find(|(r, _)| r == "tool").unwrap().1;
    assert!(result.contains("unknown tool `read_fle`") && result.contains("Did you mean `read_file`?"), "{result}");
}

#[tokio::test(flavor = "multi_thread")]
async fn schema_violations_are_explained_to_the_model() {
    let t = TestAgent::new(MockLlm::start(vec![call("write_file", json!({"path": 5})), MockReply::text("ok")]));
    t.ask("write").await;
    let result = request_messages(&t.mock, 1).into_iter().rev().find(|(r, _)| r == "tool").unwrap().1;
    assert!(result.contains("invalid arguments for `write_file`"), "{result}");
    assert!(result.contains("\"content\" is a required property"), "{result}");
    assert!(!t.workspace().join("5").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrency_safe_calls_run_together_and_results_keep_call_order() {
    let slow = |text: &str| ("slow_echo".to_string(), json!({"text": text, "ms": 60}).to_string());
    let mock = MockLlm::start(vec![
        MockReply::ToolCalls(vec![slow("a"), slow("b"), ("write_path".into(), json!({"path": "w.txt", "content": "w"}).to_string()), slow("c")]),
        MockReply::text("done"),
    ]);
    let t = TestAgent::new(mock);
    t.ask("go").await;
    let events = t.recorder.events.lock().unwrap().clone();
    let pos = |e: &str| events.iter().position(|x| x.starts_with(e)).unwrap_or_else(|| panic!("{e} in {events:?}"));
    // a and b form one parallel batch: both start before either ends.
    assert!(pos("before:slow_echo:call_2") < pos("after:slow_echo:call_1"), "{events:?}");
    // write_path runs alone, after the batch, before c.
    assert!(pos("after:slow_echo:call_1") < pos("before:write_path") && pos("after:slow_echo:call_2") < pos("before:write_path"));
    assert!(pos("after:write_path") < pos("before:slow_echo:call_4"), "{events:?}");
    let results: Vec<String> = request_messages(&t.mock, 1).into_iter().filter(|(r, _)| r == "tool").map(|(_, t)| t).collect();
    assert_eq!(results, ["a", "b", "wrote", "c"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn max_iterations_ends_with_a_summary_without_tools() {
    let mock = MockLlm::with_handler(|request, _| {
        if request.get("tools").is_some() { MockReply::tool_call("echo", json!({"text": "again"}).to_string()) } else { MockReply::text("I echoed twice; nothing remains.") }
    });
    let t = TestAgent::with_config(mock, "max_iterations = 2");
    let TurnOutcome::Done(ctx) = t.agent.process_direct("loop", "cli:test", t.recorder.clone()).await else { panic!() };
    assert_eq!(ctx.outbound.unwrap().content, "I echoed twice; nothing remains.");
    assert_eq!(ctx.stop_reason, Some(chitin::agent::StopReason::MaxIterations));
    assert_eq!(t.mock.request_count(), 3);
    let last = request_messages(&t.mock, 2);
    assert!(last.last().unwrap().1.contains("all 2 tool iterations"));
}

#[tokio::test(flavor = "multi_thread")]
async fn same_session_turns_never_overlap_while_sessions_run_in_parallel() {
    let arrivals: Arc<Mutex<Vec<(String, Instant)>>> = Default::default();
    let log = arrivals.clone();
    let mock = MockLlm::with_handler(move |request, _| {
        let last = request["messages"].as_array().unwrap().last().unwrap()["content"].as_str().unwrap_or_default().to_string();
        log.lock().unwrap().push((last.clone(), Instant::now()));
        MockReply::text(format!("re: {last}"))
    })
    .with_latency(Duration::from_millis(400));
    let t = Arc::new(TestAgent::new(mock));
    let turns = [("cli:a", "A1"), ("cli:a", "A2"), ("cli:b", "B1")].map(|(session, text)| {
        let t = t.clone();
        tokio::spawn(async move { t.ask_in(session, text).await })
    });
    for turn in turns {
        turn.await.unwrap();
    }
    let arrivals = arrivals.lock().unwrap().clone();
    let at = |text: &str| arrivals.iter().find(|(t, _)| t == text).map(|(_, i)| *i).unwrap();
    let (a1, a2, b1) = (at("A1"), at("A2"), at("B1"));
    let (first_a, second_a) = if a1 < a2 { (a1, a2) } else { (a2, a1) };
    assert!(second_a.duration_since(first_a) >= Duration::from_millis(350), "same session ran serially");
    let gap = if b1 > first_a { b1.duration_since(first_a) } else { first_a.duration_since(b1) };
    assert!(gap < Duration::from_millis(300), "another session ran concurrently ({gap:?})");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_sent_mid_turn_is_injected() {
    let mock = MockLlm::start(vec![call("slow_echo", json!({"text": "x", "ms": 400})), MockReply::text("Got both.")]);
    let t = Arc::new(TestAgent::new(mock));
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "1", "first"));
    wait_until(|| t.mock.request_count() >= 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "1", "second, while busy"));
    let reply = next_reply(&t).await;
    assert_eq!(reply, "Got both.");
    assert_eq!(t.mock.request_count(), 2, "one turn, not two");
    let second = request_messages(&t.mock, 1);
    assert_eq!(second.last().unwrap(), &("user".to_string(), "second, while busy".to_string()));
    let stored = t.stored("chat:1");
    assert!(stored.messages.iter().any(|m| m.text() == "second, while busy"), "the injected message is saved");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_keeps_completed_tool_results() {
    let mock = MockLlm::start(vec![call("write_path", json!({"path": "done.txt", "content": "ok"})), MockReply::Hang]);
    let t = Arc::new(TestAgent::new(mock));
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "7", "make the file"));
    wait_until(|| t.mock.request_count() >= 2).await;
    let started = Instant::now();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "7", "/stop"));
    assert!(next_reply(&t).await.starts_with("Stopped"));
    assert!(started.elapsed() < Duration::from_secs(2), "/stop is answered at once");
    wait_until(|| t.agent.core().active.count() == 0).await;
    let stored = t.stored("chat:7");
    let texts: Vec<(Role, String)> = stored.messages.iter().map(|m| (m.role, m.text().to_string())).collect();
    assert_eq!(texts[0], (Role::User, "make the file".into()));
    assert_eq!(texts[1].0, Role::Assistant);
    assert_eq!(texts[2], (Role::Tool, "wrote".into()));
    assert!(!stored.metadata.contains_key("runtime_checkpoint"));
    assert!(t.workspace().join("done.txt").exists());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn status_is_answered_while_a_turn_runs() {
    let mock = MockLlm::start(vec![MockReply::text("slow answer")]).with_latency(Duration::from_millis(800));
    let t = Arc::new(TestAgent::new(mock));
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "3", "question"));
    wait_until(|| t.mock.request_count() >= 1).await;
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "3", "/status"));
    let status = next_reply(&t).await;
    assert!(status.contains("Model: mock-model") && status.contains("Active tasks: 1"), "{status}");
    assert_eq!(next_reply(&t).await, "slow answer");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn commands_are_answered_without_the_model() {
    let t = TestAgent::new(MockLlm::start(vec![MockReply::text("answer")]));
    let reply = t.ask("/stats").await;
    assert!(reply.contains("Unknown command /stats") && reply.contains("/status"), "{reply}");
    assert!(t.ask("/help").await.contains("/new"));
    assert!(t.ask("/status@chitin_bot").await.contains("Messages in session"));
    assert_eq!(t.mock.request_count(), 0);
    t.ask("hello").await;
    // Commands were saved with their marker and are not replayed.
    let stored = t.stored("cli:test");
    assert_eq!(stored.messages.iter().filter(|m| m.is_command()).count(), 6);
    let replayed = request_messages(&t.mock, 0);
    assert_eq!(replayed.len(), 2, "system + the user message only: {replayed:?}");
    assert!(t.ask("/new").await.contains("new conversation"));
    assert!(t.stored("cli:test").messages.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_corrupt_session_line_is_skipped() {
    let t = TestAgent::new(MockLlm::start(vec![MockReply::text("one"), MockReply::text("two")]));
    t.ask("first").await;
    let path = chitin::session::JsonlStore::new(t.app.data.sessions_dir()).path_of("cli:test");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{this is not json\n");
    std::fs::write(&path, text).unwrap();
    let t2 = TestAgent::with_config(MockLlm::start(vec![MockReply::text("still works")]), "");
    // A second host over the same data dir reads the damaged file.
    std::fs::create_dir_all(t2.app.data.sessions_dir()).unwrap();
    std::fs::copy(&path, chitin::session::JsonlStore::new(t2.app.data.sessions_dir()).path_of("cli:test")).unwrap();
    assert_eq!(t2.ask("second").await, "still works");
    let texts: Vec<String> = t2.stored("cli:test").messages.iter().map(|m| m.text().to_string()).collect();
    assert_eq!(texts, ["first", "one", "second", "still works"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn leftover_pending_messages_are_republished() {
    // The turn fails (provider down) while a second message waits in its
    // pending queue: that message must come back as its own turn.
    let mock = MockLlm::start(vec![
        MockReply::api_error(500, "down"), MockReply::api_error(500, "down"), MockReply::api_error(500, "down"), MockReply::api_error(500, "down"),
        MockReply::text("answer to the second"),
    ])
    .with_latency(Duration::from_millis(150));
    let t = Arc::new(TestAgent::new(mock));
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "9", "first"));
    wait_until(|| t.mock.request_count() >= 1).await;
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "9", "second"));
    let first = next_reply(&t).await;
    assert!(first.contains("failed"), "{first}");
    assert_eq!(next_reply(&t).await, "answer to the second");
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn oversized_tool_results_are_saved_to_the_workspace() {
    let mock = MockLlm::start(vec![call("big_output", json!({"bytes": 5000})), MockReply::text("ok")]);
    let t = TestAgent::with_config(mock, "max_tool_result_chars = 2000");
    t.ask("big").await;
    let result = request_messages(&t.mock, 1).into_iter().rev().find(|(r, _)| r == "tool").unwrap().1;
    assert!(result.contains("5000 characters") && result.contains(".chitin/tool-results"), "{}", &result[..200]);
    assert!(result.len() < 2000);
    let dir = t.workspace().join(".chitin/tool-results");
    let saved: Vec<_> = walk(&dir);
    assert_eq!(saved.len(), 1);
    assert_eq!(std::fs::read_to_string(&saved[0]).unwrap().len(), 5000);
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() { out.extend(walk(&path)) } else { out.push(path) }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn the_third_attempt_outside_the_workspace_is_refused_firmly() {
    let outside = || call("read_file", json!({"path": "/etc/passwd"}));
    let t = TestAgent::new(MockLlm::start(vec![outside(), outside(), outside(), MockReply::text("giving up")]));
    t.ask("read the password file").await;
    let results: Vec<String> = request_messages(&t.mock, 3).into_iter().filter(|(r, _)| r == "tool").map(|(_, t)| t).collect();
    assert_eq!(results.len(), 3);
    assert!(!results[0].contains("Refused") && !results[1].contains("Refused"), "{results:?}");
    assert!(results[2].starts_with("Refused") && results[2].contains("outside the workspace"), "{}", results[2]);
    assert!(results.iter().all(|r| !r.contains("root:")));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_third_identical_fetch_is_refused() {
    let server = chitin_testing::serve_http(|_| (200, vec![], "page".into())).await;
    let fetch = move || call("http_get", json!({"url": format!("http://{server}/")}));
    let mock = MockLlm::start(vec![fetch(), fetch(), fetch(), MockReply::text("ok")]);
    let t = TestAgent::with_plugin_grant(mock, "network = [\"127.0.0.1\"]");
    t.ask("fetch it three times").await;
    let results: Vec<String> = request_messages(&t.mock, 3).into_iter().filter(|(r, _)| r == "tool").map(|(_, t)| t).collect();
    assert_eq!(&results[..2], ["200\npage", "200\npage"]);
    assert!(results[2].starts_with("Refused") && results[2].contains("attempt 3"), "{}", results[2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn other_commands_mid_turn_are_answered_inline() {
    let mock = MockLlm::start(vec![MockReply::text("slow answer")]).with_latency(Duration::from_millis(800));
    let t = Arc::new(TestAgent::new(mock));
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "4", "question"));
    wait_until(|| t.mock.request_count() >= 1).await;
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "4", "/new"));
    assert!(next_reply(&t).await.contains("still running"));
    assert_eq!(next_reply(&t).await, "slow answer");
    assert_eq!(t.mock.request_count(), 1, "/new was not injected into the turn");
    assert_eq!(t.stored("chat:4").messages.len(), 2, "and did not clear it");
    running.stop().await;
}
