//! Recovery (`AgentLoop::recover`) finishes what a dead process left, and
//! only that: it runs once per process, before any intake. A gateway used
//! to recover inside its loop task while the HTTP server and the channels
//! were already taking messages; under load the pass came late, took the
//! first API rows this very process had accepted for a dead one's and
//! closed them unanswered (the clients got an empty completion).

use std::sync::Arc;

use chitin::agent::recovery::Recovery;
use chitin::bus::{API_CHANNEL, InboundMessage, MessageBus, Origin};
use chitin::durable::{FsyncPolicy, Inbox, InboxRef};
use chitin_testing::MockLlm;
use chitin_testing::agent::TestAgent;

fn api_message(id: &str) -> InboundMessage {
    InboundMessage::from_origin(API_CHANNEL, id, Origin::Api { user: None }, "are you there?")
}

#[tokio::test(flavor = "multi_thread")]
async fn recovery_runs_once_so_a_row_this_process_accepted_is_not_taken_for_a_dead_ones() {
    let dir = tempfile::tempdir().unwrap();
    let inbox = Inbox::open(dir.path(), FsyncPolicy::Batch).unwrap();
    // A dead process's API request: its client is gone.
    let mut dead = api_message("dead");
    inbox.accept(&mut dead, None).unwrap();
    let dead_id = InboxRef::of(&dead).unwrap().id;
    let bus = Arc::new(MessageBus::durable(inbox.clone()));
    let t = TestAgent::customized(MockLlm::start(vec![]), "", |core| core.bus = bus.clone());

    // The first pass closes an open API row: what it would do to ours.
    let first = t.agent.recover();
    assert_eq!(first.abandoned, 1, "{first:?}");
    assert!(!inbox.is_open(dead_id), "the dead process's API row is closed");

    // This process accepts a request; a later pass (from the loop's own
    // start, or a clone of the loop) must leave it alone.
    let mut mine = api_message("mine");
    inbox.accept(&mut mine, None).unwrap();
    let mine_id = InboxRef::of(&mine).unwrap().id;
    assert_eq!(t.agent.recover(), Recovery::default());
    assert_eq!(t.agent.clone().recover(), Recovery::default());
    assert!(inbox.is_open(mine_id), "the row this process accepted is still open, to be answered");
}
