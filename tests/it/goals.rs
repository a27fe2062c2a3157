//! Sustained goals (issue 11 §4): `/goal`, the `create_goal`/`update_goal`
//! tools over the privileged `goals` interface, the runner's continuation
//! while a goal is active, its bounds (time budget, iteration limit), and
//! the resume of a goal whose turn was interrupted.

use std::sync::Arc;

use chitin::features::goals::{GOAL_CONTINUATION, GOAL_STATE, Goal, goal_of};
use chitin::plugins::GoalStatus;
use chitin::session::{JsonlStore, Message, PENDING_USER_TURN, Role, SessionStore};
use chitin_testing::{MockLlm, MockReply};
use chitin_testing::agent::{TestAgent, next_reply, request_messages};
use serde_json::json;

fn call(name: &str, args: serde_json::Value) -> MockReply {
    MockReply::tool_call(name, args.to_string())
}

fn complete(recap: &str) -> MockReply {
    call("update_goal", json!({"action": "complete", "recap": recap}))
}

/// The user messages of request `index`.
fn user_texts(mock: &MockLlm, index: usize) -> Vec<String> {
    request_messages(mock, index).into_iter().filter(|(role, _)| role == "user").map(|(_, text)| text).collect()
}

fn tool_result(mock: &MockLlm, index: usize) -> String {
    request_messages(mock, index).into_iter().rev().find(|(role, _)| role == "tool").expect("a tool result").1
}

#[tokio::test(flavor = "multi_thread")]
async fn a_goal_continues_over_several_passes_and_stops_on_complete() {
    let mock = MockLlm::start(vec![
        MockReply::text("Step one is done."),
        MockReply::text("Step two is done."),
        complete("three steps written"),
        MockReply::text("All three steps are done."),
        MockReply::text("Hello."),
    ]);
    let t = TestAgent::new(mock);
    assert_eq!(t.ask("/goal write the three steps").await, "All three steps are done.");
    assert_eq!(t.mock.request_count(), 4, "two continuations, the update, the final answer");

    // The goal is in the system prompt; each continuation reminds the model
    // of it and names update_goal.
    let system = &request_messages(&t.mock, 0)[0].1;
    assert!(system.contains("# Active goal") && system.contains("write the three steps"), "{system}");
    for index in [1, 2] {
        let last = user_texts(&t.mock, index).pop().unwrap();
        assert!(last.starts_with("[Goal continuation]") && last.contains("write the three steps") && last.contains("update_goal"), "{last}");
    }
    assert!(tool_result(&t.mock, 3).starts_with("Goal complete: write the three steps"), "{}", tool_result(&t.mock, 3));

    // The interim answers reached the sink as they came, the final one is the reply.
    let interim: Vec<String> = t.recorder.events().into_iter().filter(|e| e.starts_with("interim:")).collect();
    assert_eq!(interim, ["interim:Step one is done.", "interim:Step two is done."]);

    // Stored: the goal, complete with its recap; the conversation with its
    // continuation boundaries, in order.
    let stored = t.stored("cli:test");
    let goal = goal_of(&stored).expect("a goal");
    assert_eq!((goal.status, goal.recap.as_deref(), goal.objective.as_str()), (GoalStatus::Complete, Some("three steps written"), "write the three steps"));
    let shape: Vec<(Role, bool)> = stored.messages.iter().map(|m| (m.role, m.meta.contains_key(GOAL_CONTINUATION))).collect();
    assert_eq!(
        shape,
        [
            (Role::User, false),
            (Role::Assistant, false),
            (Role::User, true),
            (Role::Assistant, false),
            (Role::User, true),
            (Role::Assistant, false),
            (Role::Tool, false),
            (Role::Assistant, false),
        ]
    );
    assert!(!stored.metadata.contains_key(PENDING_USER_TURN));

    // A completed goal no longer continues: the next message is one pass.
    assert_eq!(t.ask("hi").await, "Hello.");
    assert_eq!(t.mock.request_count(), 5);
    let system = &request_messages(&t.mock, 4)[0].1;
    assert!(!system.contains("# Active goal"), "a finished goal is not in the prompt");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_model_starts_a_goal_with_create_goal() {
    let mock = MockLlm::start(vec![
        call("create_goal", json!({"objective": "Tidy the notes folder", "ui_summary": "tidy notes"})),
        MockReply::text("I started."),
        complete("tidied"),
        MockReply::text("Tidied."),
    ]);
    let t = TestAgent::new(mock);
    assert_eq!(t.ask("tidy my notes, take your time").await, "Tidied.");
    assert!(tool_result(&t.mock, 1).starts_with("Goal active: Tidy the notes folder"), "{}", tool_result(&t.mock, 1));
    assert!(user_texts(&t.mock, 2).last().unwrap().contains("Tidy the notes folder"));
    let goal = goal_of(&t.stored("cli:test")).unwrap();
    assert_eq!((goal.status, goal.ui_summary.as_deref()), (GoalStatus::Complete, Some("tidy notes")));

    // A second create while one is active is refused with the way out.
    let mock = MockLlm::start(vec![
        call("create_goal", json!({"objective": "A"})),
        call("create_goal", json!({"objective": "B"})),
        call("update_goal", json!({"action": "cancel", "recap": "not needed"})),
        MockReply::text("Cancelled."),
    ]);
    let t = TestAgent::new(mock);
    assert_eq!(t.ask("go").await, "Cancelled.");
    let refusal = tool_result(&t.mock, 2);
    assert!(refusal.contains("already active") && refusal.contains("replace"), "{refusal}");
    let goal = goal_of(&t.stored("cli:test")).unwrap();
    assert_eq!((goal.objective.as_str(), goal.status), ("A", GoalStatus::Cancelled));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_iteration_limit_stops_a_goal_that_never_completes() {
    let mock = MockLlm::start(vec![
        MockReply::text("Working."),
        MockReply::text("Still working."),
        MockReply::text("Working more."),
        MockReply::text("Summary: two of five parts done."),
    ]);
    let t = TestAgent::with_config(mock, "max_iterations = 3\n");
    let reply = t.ask("/goal translate the five parts").await;
    assert!(reply.starts_with("Summary: two of five parts done."), "{reply}");
    assert!(reply.contains("stopped working on the goal after 3 iterations") && reply.contains("marked blocked"), "{reply}");
    assert_eq!(t.mock.request_count(), 4, "three passes and the summary request");
    let goal = goal_of(&t.stored("cli:test")).unwrap();
    assert_eq!(goal.status, GoalStatus::Blocked);
    assert!(goal.recap.as_deref().unwrap().contains("max_iterations"), "{:?}", goal.recap);
    // The stored reply says it too.
    assert_eq!(t.stored("cli:test").messages.last().unwrap().text(), reply);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_time_budget_stops_a_goal_with_a_clear_message() {
    let mock = MockLlm::start(vec![call("slow_echo", json!({"text": "x", "ms": 1200})), MockReply::text("Half done.")]);
    let t = TestAgent::with_config(mock, "goal_budget_secs = 1\n");
    let reply = t.ask("/goal do the long thing").await;
    assert!(reply.starts_with("Half done.") && reply.contains("time budget of 1 s ran out"), "{reply}");
    assert_eq!(t.mock.request_count(), 2, "no continuation after the budget");
    let goal = goal_of(&t.stored("cli:test")).unwrap();
    assert_eq!(goal.status, GoalStatus::Blocked);
    assert!(goal.recap.unwrap().contains("goal_budget_secs"));
}

#[tokio::test(flavor = "multi_thread")]
async fn goal_and_status_commands_show_the_goal() {
    let mock = MockLlm::start(vec![call("update_goal", json!({"action": "block", "recap": "need the API key"})), MockReply::text("I need the API key.")]);
    let t = TestAgent::new(mock);
    let none = t.ask("/goal").await;
    assert!(none.starts_with("No goal is set. Usage: /goal <long-running task description>"), "{none}");
    assert!(!t.ask("/status").await.contains("Goal"), "no goal line without a goal");
    let bad = t.ask("/goal \u{1b}[2J").await;
    assert!(bad.contains("control character") && bad.contains("Usage"), "{bad}");
    assert_eq!(t.mock.request_count(), 0, "commands never reach the model");

    assert_eq!(t.ask("/goal deploy the site").await, "I need the API key.");
    let shown = t.ask("/goal").await;
    assert!(shown.starts_with("Goal (blocked): deploy the site\nRecap: need the API key\nSet "), "{shown}");
    let status = t.ask("/status").await;
    assert!(status.contains("Model: mock-model") && status.contains("Goal (blocked): deploy the site"), "{status}");
    assert!(t.agent.core().commands.help_text().contains("/goal"));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_goals_capability_is_refused_when_not_granted() {
    let mock = MockLlm::start(vec![call("create_goal", json!({"objective": "Take over"})), MockReply::text("I could not set a goal.")]);
    let t = TestAgent::with_plugin_grant(mock, "\n[plugins.agent]\nhost = [\"messaging\"]\n");
    assert_eq!(t.ask("set a goal").await, "I could not set a goal.");
    let result = tool_result(&t.mock, 1);
    assert!(result.contains("capability not granted: goals") && result.contains("[plugins.agent]"), "{result}");
    assert_eq!(t.mock.request_count(), 2, "no goal, no continuation");
    assert!(!t.stored("cli:test").metadata.contains_key(GOAL_STATE));
    let plugin = t.app.catalog.get("agent").expect("built-in agent plugin");
    assert!(plugin.grant.host.iter().all(|i| i.name() != "goals"));

    // By default the built-in plugin has it.
    let t = TestAgent::new(MockLlm::start(vec![]));
    let names: Vec<&str> = t.app.catalog.get("agent").unwrap().grant.host.iter().map(|i| i.name()).collect();
    assert_eq!(names, ["messaging", "schedule", "goals", "agents"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_interrupted_goal_resumes_when_the_loop_starts() {
    let mock = MockLlm::start(vec![complete("finished after the restart"), MockReply::text("Done after the restart.")]);
    let t = Arc::new(TestAgent::new(mock));
    // What a process killed mid-goal leaves: the goal active, the user
    // message persisted and unanswered.
    let store = JsonlStore::new(t.app.data.sessions_dir());
    let mut session = store.load("chat:5").unwrap();
    session.push(Message::user("/goal sort the photos"));
    session.push(Message::assistant("Sorted half."));
    session.push(Message::user("[Goal continuation] …").with_meta(GOAL_CONTINUATION, true));
    chitin::features::goals::set_goal(&mut session, Some(&Goal::new("sort the photos".into(), None)));
    session.set_meta(PENDING_USER_TURN, Some(json!(true)));
    store.save(&mut session).unwrap();
    // And a session whose goal finished normally is left alone.
    let mut quiet = store.load("chat:6").unwrap();
    chitin::features::goals::set_goal(&mut quiet, Some(&Goal::new("other".into(), None)));
    store.save(&mut quiet).unwrap();

    let running = t.start_loop();
    assert_eq!(next_reply(&t).await, "Done after the restart.");
    let first = user_texts(&t.mock, 0);
    assert!(first.last().unwrap().starts_with("[Goal resumed after a restart]") && first.last().unwrap().contains("sort the photos"), "{first:?}");
    running.stop().await;
    assert_eq!(t.mock.request_count(), 2, "only the interrupted session resumed");
    let stored = t.stored("chat:5");
    assert_eq!(goal_of(&stored).unwrap().status, GoalStatus::Complete);
    assert!(stored.messages.iter().any(|m| m.text().contains("interrupted")), "RESTORE closed the interrupted pass");
    assert!(goal_of(&t.stored("chat:6")).unwrap().is_active());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_gets_the_interim_answers_as_messages_then_the_reply() {
    use chitin::bus::{InboundMessage, OutboundKind};
    let mock = MockLlm::start(vec![MockReply::text("Found 3 of 5."), complete("all 5 found"), MockReply::text("Found all 5.")]);
    let t = Arc::new(TestAgent::new(mock));
    let running = t.start_loop();
    t.bus.publish_inbound(InboundMessage::new("chat", "u1", "9", "/goal find the five files"));
    let mut messages = Vec::new();
    loop {
        let event = tokio::time::timeout(std::time::Duration::from_secs(20), t.bus.consume_outbound()).await.expect("in time").expect("bus open");
        if event.kind == OutboundKind::TurnEnd {
            break;
        }
        if matches!(event.kind, OutboundKind::Message(_)) {
            messages.push((event.content.clone(), event.kind.reply().is_some_and(|r| r.interim)));
        }
    }
    assert_eq!(messages, [("Found 3 of 5.".to_string(), true), ("Found all 5.".to_string(), false)]);
    running.stop().await;
}
