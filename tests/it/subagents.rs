//! Subagents (issue 11 §3): the `spawn` tool of the built-in `agent`
//! component over the privileged `agents` interface. A subagent is its own
//! runner run (own prompt, scoped tools, nothing persisted); a background
//! result comes back to the origin session exactly once: injected into its
//! running turn (which waits for it) or as a SYSTEM turn that answers in the
//! origin chat.
//!
//! The mock tells the two conversations apart by the system prompt: a
//! subagent's starts with `# Subagent`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chitin::features::subagents::{Origin, TASK_ID, announcement};
use chitin::bus::{InboundMessage, OutboundKind, OutboundMessage};
use chitin::plugins::services::SubagentState;
use chitin_testing::{MockLlm, MockReply};
use chitin_testing::agent::{TestAgent, next_reply, wait_until};
use serde_json::{Value, json};

fn calls(list: &[(&str, Value)]) -> MockReply {
    MockReply::ToolCalls(list.iter().map(|(n, a)| (n.to_string(), a.to_string())).collect())
}

fn is_subagent(request: &Value) -> bool {
    request["messages"][0]["content"].as_str().is_some_and(|s| s.starts_with("# Subagent"))
}

/// A mock with one script for the main agent and one for subagents, each
/// consumed in order (the main script's last reply repeats).
fn two_scripts(main: Vec<MockReply>, sub: Vec<MockReply>) -> MockLlm {
    let (m, s) = (AtomicUsize::new(0), AtomicUsize::new(0));
    MockLlm::with_handler(move |request, _| {
        let (script, n) = if is_subagent(request) { (&sub, &s) } else { (&main, &m) };
        let i = n.fetch_add(1, Ordering::SeqCst);
        script.get(i).or(script.last()).cloned().unwrap_or(MockReply::text("(none)"))
    })
}

/// Requests of the main agent / of subagents, in order.
fn requests(mock: &MockLlm, subagent: bool) -> Vec<Value> {
    mock.requests().into_iter().filter(|r| is_subagent(r) == subagent).collect()
}

fn texts(request: &Value) -> Vec<(String, String)> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap_or_default().to_string(), m["content"].as_str().unwrap_or_default().to_string()))
        .collect()
}

fn last_tool_result(request: &Value) -> String {
    texts(request).into_iter().rev().find(|(role, _)| role == "tool").expect("a tool result").1
}

/// Session messages carrying a subagent task id.
fn announcements(t: &TestAgent, key: &str) -> Vec<String> {
    t.stored(key).messages.iter().filter(|m| m.meta.contains_key(TASK_ID)).map(|m| m.text().to_string()).collect()
}

/// Reply messages (not progress) published until the bus is quiet for `quiet`.
async fn replies_until_quiet(t: &TestAgent, quiet: Duration) -> Vec<OutboundMessage> {
    let mut out = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(quiet, t.bus.consume_outbound()).await {
        if matches!(m.kind, OutboundKind::Message(_)) {
            out.push(m);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_is_injected_into_the_running_turn_which_waits_for_it() {
    // The subagent works 400 ms; the main agent answers at once, so only
    // the keep-alive holds the turn open until the result arrives.
    let mock = two_scripts(
        vec![
            calls(&[("spawn", json!({"task": "count the files", "label": "counter"}))]),
            MockReply::text("Started the counter."),
            MockReply::text("The counter found 3 files."),
        ],
        vec![calls(&[("slow_echo", json!({"text": "x", "ms": 400}))]), MockReply::text("There are 3 files.")],
    );
    let t = Arc::new(TestAgent::new(mock));
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "1", "how many files?"));
    let replies = replies_until_quiet(&t, Duration::from_secs(2)).await;
    let texts_out: Vec<&str> = replies.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(texts_out, ["The counter found 3 files."], "one turn, one reply, after the result");
    assert_eq!(replies[0].chat_id, "1");

    let main = requests(&t.mock, false);
    assert_eq!(main.len(), 3, "spawn, the first answer, then the injected result; no second turn");
    let started = last_tool_result(&main[1]);
    assert!(started.starts_with("Subagent [counter] started (id: ") && started.ends_with("I'll notify you when it completes."), "{started}");
    let injected = texts(&main[2]);
    let (role, text) = injected.last().unwrap();
    assert_eq!(role, "user");
    assert!(text.starts_with("[Subagent 'counter' completed successfully]") && text.contains("There are 3 files."), "{text}");
    assert_eq!(injected.iter().filter(|(_, x)| x.contains("[Subagent 'counter'")).count(), 1);

    // Stored once, with its task id; nothing left running.
    let stored = announcements(&t, "chat:1");
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(!t.services.subagents().unwrap().has_running("chat:1"));
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_result_after_the_turn_ended_starts_a_system_turn_in_the_origin_chat_once() {
    let mock = two_scripts(
        vec![
            calls(&[("spawn", json!({"task": "count the files", "label": "counter"}))]),
            MockReply::text("Started the counter."),
            MockReply::text("The counter found 3 files."),
        ],
        vec![calls(&[("slow_echo", json!({"text": "x", "ms": 300}))]), MockReply::text("There are 3 files.")],
    );
    // No keep-alive: the turn ends at once.
    let t = Arc::new(TestAgent::with_config(mock, "\n[agent.subagents]\nkeep_alive_secs = 0\n"));
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "1", "how many files?"));
    let first = replies_until_quiet(&t, Duration::from_secs(3)).await;
    let out: Vec<(&str, &str, &str)> = first.iter().map(|m| (m.channel.as_str(), m.chat_id.as_str(), m.content.as_str())).collect();
    assert_eq!(out, [("chat", "1", "Started the counter."), ("chat", "1", "The counter found 3 files.")], "the SYSTEM turn answers in the origin chat");

    let main = requests(&t.mock, false);
    assert_eq!(main.len(), 3);
    let system_turn = texts(&main[2]);
    assert!(system_turn.iter().any(|(r, x)| r == "user" && x == "how many files?"), "the origin session's history: {system_turn:?}");
    let (role, text) = system_turn.last().unwrap();
    assert!(role == "user" && text.contains("[Subagent 'counter' completed successfully]") && text.contains("There are 3 files."), "{text}");
    assert_eq!(announcements(&t, "chat:1").len(), 1);

    // The same result delivered again (a duplicate on the bus) is not
    // handled twice: no model request, no reply, nothing stored.
    let stored = t.stored("chat:1");
    let id = stored.messages.iter().find_map(|m| m.meta.get(TASK_ID)).and_then(Value::as_str).unwrap().to_string();
    let origin = Origin { session_key: "chat:1".into(), channel: "chat".into(), chat_id: "1".into() };
    t.bus.publish_inbound(announcement(&origin, &id, "counter", "count the files", SubagentState::Completed, "There are 3 files."));
    let again = replies_until_quiet(&t, Duration::from_millis(800)).await;
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(requests(&t.mock, false).len(), 3);
    assert_eq!(t.stored("chat:1").messages.len(), stored.messages.len());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn past_the_concurrency_limit_a_spawn_is_refused() {
    let mock = two_scripts(
        vec![
            calls(&[("spawn", json!({"task": "first job", "label": "one"})), ("spawn", json!({"task": "second job", "label": "two"}))]),
            MockReply::text("One started, one refused."),
            MockReply::text("Done."),
        ],
        vec![calls(&[("slow_echo", json!({"text": "x", "ms": 200}))]), MockReply::text("first done")],
    );
    let t = TestAgent::new(mock);
    assert_eq!(t.ask("two jobs").await, "Done.");
    let main = requests(&t.mock, false);
    let results: Vec<String> = texts(&main[1]).into_iter().filter(|(r, _)| r == "tool").map(|(_, x)| x).collect();
    assert!(results[0].starts_with("Subagent [one] started"), "{results:?}");
    assert!(results[1].contains("Cannot spawn subagent: concurrency limit reached (1/1 running)."), "{results:?}");
    assert_eq!(requests(&t.mock, true).len(), 2, "only one subagent ran");
}

#[tokio::test(flavor = "multi_thread")]
async fn wait_runs_inline_with_its_own_prompt_and_tools_and_nothing_of_the_session() {
    let mock = two_scripts(
        vec![calls(&[("spawn", json!({"task": "What is 6*7? Answer with the number.", "wait": true}))]), MockReply::text("It is 42.")],
        vec![MockReply::text("42")],
    );
    let t = TestAgent::new(mock);
    assert_eq!(t.ask("secret-word-banana: what is 6*7?").await, "It is 42.");
    let main = requests(&t.mock, false);
    assert_eq!(last_tool_result(&main[1]), "42", "the answer is the tool result");
    let sub = requests(&t.mock, true);
    assert_eq!(sub.len(), 1);
    let seen = texts(&sub[0]);
    assert_eq!(seen.len(), 2, "its prompt and the task: {seen:?}");
    assert_eq!(seen[1], ("user".to_string(), "What is 6*7? Answer with the number.".to_string()));
    assert!(!sub[0].to_string().contains("secret-word-banana"), "nothing of the session reaches a subagent");
    let tools: Vec<&str> = sub[0]["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert!(tools.contains(&"read_file") && tools.contains(&"slow_echo"), "{tools:?}");
    assert!(!tools.contains(&"spawn") && !tools.contains(&"message") && !tools.contains(&"subagents"), "{tools:?}");
    assert!(announcements(&t, "cli:test").is_empty(), "an inline result is not announced");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_subagents_tool_lists_this_conversations_running_subagents() {
    // `agents.status` through the built-in plugin's `subagents` tool.
    let mock = two_scripts(
        vec![
            calls(&[("subagents", json!({}))]),
            calls(&[("spawn", json!({"task": "count the files", "label": "counter"}))]),
            calls(&[("subagents", json!({}))]),
            MockReply::text("It is running."),
        ],
        vec![calls(&[("slow_echo", json!({"text": "x", "ms": 1500}))]), MockReply::text("There are 3 files.")],
    );
    let t = TestAgent::with_config(mock, "\n[agent.subagents]\nkeep_alive_secs = 0\n");
    assert_eq!(t.ask("count in the background").await, "It is running.");
    let main = requests(&t.mock, false);
    assert_eq!(last_tool_result(&main[1]), "No subagents are running in this conversation.");
    let listed = last_tool_result(&main[3]);
    assert!(listed.starts_with("Subagents running: 1\n- [counter] (id: ") && listed.contains(") running for "), "{listed}");
    // Another conversation sees none of them.
    let other = TestAgent::new(two_scripts(vec![calls(&[("subagents", json!({}))]), MockReply::text("none")], vec![]));
    assert_eq!(other.ask("any?").await, "none");
    assert_eq!(last_tool_result(&requests(&other.mock, false)[1]), "No subagents are running in this conversation.");
}

#[tokio::test(flavor = "multi_thread")]
async fn waiting_for_a_subagent_does_not_count_against_the_plugin_timeout() {
    // Every model request takes 3 s: the subagent's two take 6 s, past the
    // test config's `[limits] timeout_ms = 5000` for the spawning call.
    let mock = two_scripts(
        vec![calls(&[("spawn", json!({"task": "slow job", "wait": true}))]), MockReply::text("Finished.")],
        vec![calls(&[("counter", json!({}))]), MockReply::text("slow answer")],
    )
    .with_latency(Duration::from_secs(3));
    let t = TestAgent::new(mock);
    assert_eq!(t.ask("go").await, "Finished.");
    assert_eq!(last_tool_result(&requests(&t.mock, false)[1]), "slow answer");
}

#[tokio::test(flavor = "multi_thread")]
async fn status_lists_and_stop_cancels_a_running_subagent() {
    // The subagent's model request never answers (until the 10 s timeout).
    let mock = two_scripts(vec![calls(&[("spawn", json!({"task": "wait forever", "label": "sleeper"}))]), MockReply::text("Started.")], vec![MockReply::Hang]);
    let t = Arc::new(TestAgent::with_config(mock, "\n[agent.subagents]\nkeep_alive_secs = 0\n"));
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "1", "start it"));
    assert_eq!(next_reply(&t).await, "Started.");
    let manager = t.services.subagents().unwrap().clone();
    wait_until(|| t.mock.requests().iter().any(is_subagent)).await;
    assert!(manager.has_running("chat:1"));

    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "1", "/status"));
    let status = next_reply(&t).await;
    assert!(status.contains("Subagents running: 1") && status.contains("- [sleeper] (id: ") && status.contains("running for "), "{status}");

    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "1", "/stop"));
    assert_eq!(next_reply(&t).await, "Stopped 1 subagent(s).");
    wait_until(|| !manager.has_running("chat:1")).await;
    // Cancelled: no announcement, no turn for it.
    let after = replies_until_quiet(&t, Duration::from_millis(800)).await;
    assert!(after.is_empty(), "{after:?}");
    assert_eq!(requests(&t.mock, false).len(), 2);
    assert!(announcements(&t, "chat:1").is_empty());
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn without_the_agents_grant_spawn_is_refused_by_the_host() {
    let mock = two_scripts(vec![calls(&[("spawn", json!({"task": "x"}))]), MockReply::text("Could not.")], vec![MockReply::text("never")]);
    let t = TestAgent::with_plugin_grant(mock, "\n[plugins.agent]\nhost = [\"messaging\"]\n");
    assert_eq!(t.ask("spawn one").await, "Could not.");
    let result = last_tool_result(&requests(&t.mock, false)[1]);
    assert!(result.contains("capability not granted: agents") && result.contains("[plugins.agent]"), "{result}");
    assert!(requests(&t.mock, true).is_empty(), "no subagent ran");
    let plugin = t.app.catalog.get("agent").unwrap();
    assert!(plugin.grant_notes.iter().any(|n| n.contains("host interface `agents`")), "{:?}", plugin.grant_notes);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_crashing_tool_ends_a_subagent_but_its_own_error_does_not() {
    // First spawn: the tool's own error result, then an answer. Second: a
    // panic in the plugin ends the run there (`fail_on_tool_error`).
    let mock = two_scripts(
        vec![
            calls(&[("spawn", json!({"task": "one", "wait": true}))]),
            calls(&[("spawn", json!({"task": "two", "label": "crasher", "wait": true}))]),
            MockReply::text("Done."),
        ],
        vec![
            calls(&[("fail", json!({"text": "nope", "repeat": 1}))]),
            MockReply::text("recovered"),
            calls(&[("panic", json!({"message": "kaboom"}))]),
            MockReply::text("never asked"),
        ],
    );
    let t = TestAgent::new(mock);
    assert_eq!(t.ask("go").await, "Done.");
    let main = requests(&t.mock, false);
    assert_eq!(last_tool_result(&main[1]), "recovered", "an error result is the subagent model's to handle");
    let crashed = last_tool_result(&main[2]);
    assert!(crashed.starts_with("Subagent [crasher] failed: Error: ") && crashed.contains("kaboom"), "{crashed}");
    assert_eq!(requests(&t.mock, true).len(), 3, "no model request after the crash");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_config_sets_a_subagents_tools_and_whether_it_may_spawn() {
    let mock = two_scripts(
        vec![calls(&[("spawn", json!({"task": "look", "wait": true}))]), MockReply::text("Done.")],
        vec![calls(&[("spawn", json!({"task": "nested"}))]), MockReply::text("could not nest")],
    );
    // `spawn` listed but not allowed: left out, and refused if called anyway.
    let t = TestAgent::with_config(mock, "\n[agent.subagents]\ntools = [\"read_file\", \"spawn\"]\n");
    assert_eq!(t.ask("go").await, "Done.");
    let sub = requests(&t.mock, true);
    let tools: Vec<&str> = sub[0]["tools"].as_array().unwrap().iter().filter_map(|t| t["function"]["name"].as_str()).collect();
    assert_eq!(tools, ["read_file"]);
    let refused = last_tool_result(&sub[1]);
    assert!(refused.contains("unknown tool `spawn`"), "not in its registry: {refused}");
    assert!(t.services.subagents().unwrap().tools().spec("spawn").is_none());
}
