//! RUN: hand the prepared messages to the `AgentRunner`, persisting each
//! checkpoint as it comes, and keep the result for SAVE. The turn's sink
//! goes with them: the runner reports the run's start, streamed text and
//! tool progress to it.
//!
//! A checkpoint writes only what is new: the run's messages are appended
//! to the session as they appear (the JSONL store appends just those lines),
//! and the checkpoint record in the metadata holds the phase, the iteration
//! and the ids and names of the unfinished calls, never a message the
//! session already holds. Before, every checkpoint line repeated the whole
//! run, arguments included, and a 50 MiB call made a 250 MiB session file.

use std::sync::{Arc, Mutex};

use super::save::append_run_messages;
use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::core::AgentCore;
use crate::agent::goal::{self as goals, TurnGoal};
use crate::agent::runner::{AgentRunSpec, Checkpoint, CheckpointView, GoalDriver, InjectionSource};
use crate::plugins::CallContext;
use crate::session::{RUNTIME_CHECKPOINT, Session, SessionStore, ToolCall};

pub(super) async fn run(core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    if let Some(answer) = ctx.resumed_answer.take() {
        // A resumed turn whose answer the dead process had checkpointed:
        // the session holds it; SAVE and RESPOND finish the turn.
        ctx.final_content = Some(answer.clone());
        ctx.stop_reason = Some(crate::agent::runner::StopReason::Completed);
        ctx.run_result = Some(crate::agent::runner::AgentRunResult {
            final_content: Some(answer),
            messages: ctx.initial_messages.clone(),
            tools_used: Vec::new(),
            usage: Default::default(),
            stop_reason: crate::agent::runner::StopReason::Completed,
            error: None,
            tool_events: Vec::new(),
            had_injections: false,
        });
        return Ok(TurnEvent::Ok);
    }
    let session = ctx.session.take().ok_or(TurnError::Missing { turn: ctx.session_key.clone(), state: ctx.state, missing: "a session" })?;
    // The goal lives in the turn's slot while it runs (the `goals`
    // interface changes it there); each checkpoint and the end of the run
    // copy it back into the session.
    let slot = core.active.get(&ctx.session_key).map(|t| t.goal.clone()).unwrap_or_default();
    slot.load(goals::goal_of(&session));
    // The checkpoint callback persists into the session while the runner
    // owns the turn; the session comes back out afterwards.
    let shared = Arc::new(Mutex::new((session, CheckpointWriter::new(core.settings.max_tool_result_chars))));
    let checkpoint = (!ctx.ephemeral).then(|| {
        let shared = shared.clone();
        let sessions = core.sessions.clone();
        let slot = slot.clone();
        Arc::new(move |checkpoint: &CheckpointView<'_>| {
            let mut guard = shared.lock().expect("session lock");
            let (session, writer) = &mut *guard;
            slot.store_into(session);
            if let Err(e) = writer.write(sessions.as_ref(), session, checkpoint) {
                tracing::warn!("checkpoint not saved: {e}");
            }
        }) as Arc<dyn Fn(&CheckpointView<'_>) + Send + Sync>
    });
    let mut spec = AgentRunSpec {
        initial_messages: ctx.initial_messages.clone(),
        tools: ctx.tools(core),
        model: core.settings.model_handle(),
        max_iterations: ctx.scope.max_iterations.unwrap_or(core.settings.max_iterations),
        max_tool_result_chars: core.settings.max_tool_result_chars,
        max_tool_args_bytes: core.settings.max_tool_args_bytes(),
        temperature: core.settings.temperature,
        llm_timeout: core.llm_timeout(),
        workspace: core.workspace.clone(),
        call_context: {
            // A SYSTEM turn acts in its origin chat.
            let (channel, chat_id) = ctx.inbound.reply_route();
            CallContext { session_key: ctx.session_key.clone(), channel, chat_id, call_id: String::new() }
        },
        checkpoint,
        injections: ctx.pending.clone().map(|p| p as Arc<dyn InjectionSource>),
        sink: ctx.sink.clone(),
        fail_on_tool_error: false,
        goal: Some(Arc::new(TurnGoal::new(slot.clone(), std::time::Duration::from_secs(core.settings.goal_budget_secs))) as Arc<dyn GoalDriver>),
    };
    if !ctx.rerun_calls.is_empty() {
        // Read-only calls the dead process had in flight: run again, so the
        // model gets their results, not an "interrupted".
        let results = core.runner.rerun_calls(&spec, &ctx.rerun_calls).await;
        let mut guard = shared.lock().expect("session lock");
        append_run_messages(&mut guard.0, results.iter().cloned(), core.settings.max_tool_result_chars);
        if let Err(e) = core.sessions.save(&mut guard.0) {
            tracing::warn!(session = %ctx.session_key, "re-run tool results not saved: {e}");
        }
        drop(guard);
        spec.initial_messages.extend(results.iter().cloned());
        ctx.initial_messages.extend(results);
        ctx.rerun_calls.clear();
    }
    crate::crash_point!("model", &ctx.inbound.content);
    let result = core.runner.run(&spec).await;
    drop(spec);
    let (session, writer) = match Arc::try_unwrap(shared) {
        Ok(mutex) => mutex.into_inner().expect("session lock"),
        Err(shared) => {
            let guard = shared.lock().expect("session lock");
            (guard.0.clone(), guard.1.clone())
        }
    };
    let mut session = session;
    slot.store_into(&mut session);
    ctx.session = Some(session);
    ctx.checkpointed_messages = writer.written;
    ctx.final_content = result.final_content.clone();
    ctx.tools_used = result.tools_used.clone();
    ctx.stop_reason = Some(result.stop_reason);
    ctx.run_error = result.error.clone();
    ctx.had_injections = result.had_injections;
    ctx.run_result = Some(result);
    Ok(TurnEvent::Ok)
}

/// Persists checkpoints as deltas (see the module docs).
#[derive(Debug, Clone)]
pub(super) struct CheckpointWriter {
    /// How many of the run's messages are already in the session.
    pub written: usize,
    /// Tool results are stored truncated to this, as SAVE stores them.
    max_tool_result_chars: usize,
}

impl CheckpointWriter {
    /// A writer for a run that has persisted nothing yet.
    pub(super) fn new(max_tool_result_chars: usize) -> Self {
        CheckpointWriter { written: 0, max_tool_result_chars }
    }

    /// Appends the run's messages not yet in `session`, records the
    /// checkpoint without them, and saves (one append of the new lines).
    pub(super) fn write(&mut self, sessions: &dyn SessionStore, session: &mut Session, checkpoint: &CheckpointView<'_>) -> Result<(), crate::session::SessionError> {
        // The run only appends, so what was handed over before is unchanged.
        let new = checkpoint.messages.get(self.written..).unwrap_or_default();
        append_run_messages(session, new.iter().cloned(), self.max_tool_result_chars);
        self.written = checkpoint.messages.len();
        let record = Checkpoint {
            phase: checkpoint.phase,
            iteration: checkpoint.iteration,
            messages: Vec::new(),
            pending_tool_calls: checkpoint.pending_tool_calls.iter().map(|c| ToolCall::new(&c.id, &c.function.name, "")).collect(),
        };
        match serde_json::to_value(&record) {
            Ok(value) => session.set_meta(RUNTIME_CHECKPOINT, Some(value)),
            Err(e) => tracing::warn!("checkpoint not serializable: {e}"),
        }
        sessions.save(session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::runner::CheckpointPhase;
    use crate::agent::turn::materialize_checkpoint;
    use crate::agent::turn::restore::INTERRUPTED_TURN;
    use crate::agent::runner::governance::INTERRUPTED_RESULT;
    use crate::session::{JsonlStore, Message, PENDING_USER_TURN};
    use serde_json::Value;

    /// What RESTORE made of a checkpoint before checkpoints were deltas:
    /// the session's messages, the run's messages, an interrupted result
    /// per pending call, and the interrupted note if the turn has no answer.
    fn old_recovery(before: &[Message], run: &[Message], pending: &[ToolCall]) -> Vec<Message> {
        let mut out: Vec<Message> = before.iter().chain(run).cloned().collect();
        for call in pending {
            out.push(Message::tool_result(&call.id, &call.function.name, INTERRUPTED_RESULT));
        }
        if !out.last().is_some_and(|m| m.role == crate::session::Role::Assistant && m.tool_calls.is_empty()) {
            out.push(Message::assistant(INTERRUPTED_TURN));
        }
        out
    }

    #[test]
    fn checkpoints_write_each_message_once_and_recover_as_before() {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(dir.path());
        let mut session = store.load("cli:cp").unwrap();
        session.push(Message::user("write it"));
        session.set_meta(PENDING_USER_TURN, Some(Value::Bool(true)));
        store.save(&mut session).unwrap();
        let before = session.messages.clone();
        let size_before = std::fs::metadata(store.path_of("cli:cp")).unwrap().len() as usize;

        let marker = "MARKER-7f3a";
        let args = serde_json::json!({"path": "a.txt", "content": format!("{marker}{}", "y".repeat(1 << 20))}).to_string();
        let call = ToolCall::new("call_1", "write_file", args.clone());
        let mut run = vec![Message::assistant_calls(None, vec![call.clone()])];
        let mut writer = CheckpointWriter::new(16_000);
        let steps: [(CheckpointPhase, Option<Message>, Vec<ToolCall>); 3] = [
            (CheckpointPhase::AwaitingTools, None, vec![call.clone()]),
            (CheckpointPhase::ToolsCompleted, Some(Message::tool_result("call_1", "write_file", "wrote")), vec![]),
            (CheckpointPhase::FinalResponse, Some(Message::assistant("Done.")), vec![]),
        ];
        for (phase, added, pending) in steps {
            run.extend(added);
            let view = CheckpointView { phase, iteration: 0, messages: &run, pending_tool_calls: &pending };
            writer.write(&store, &mut session, &view).unwrap();
            assert_eq!(writer.written, run.len());

            // A crash now: a fresh process loads the file and recovers
            // exactly what it recovered when checkpoints held everything.
            let mut recovered = JsonlStore::new(dir.path()).load("cli:cp").unwrap();
            assert!(materialize_checkpoint(&mut recovered));
            assert_eq!(recovered.messages, old_recovery(&before, &run, &pending), "{phase:?}");
            assert!(!recovered.metadata.contains_key(RUNTIME_CHECKPOINT));
        }
        let text = std::fs::read_to_string(store.path_of("cli:cp")).unwrap();
        assert_eq!(text.matches(marker).count(), 1, "the arguments are written once");
        let growth = text.len() - size_before;
        assert!(growth < args.len() + 4096, "{growth} bytes written for {} bytes of arguments", args.len());
        // The pending call in the record carries no arguments.
        let record: Checkpoint = serde_json::from_value(session.metadata[RUNTIME_CHECKPOINT].clone()).unwrap();
        assert!(record.messages.is_empty());
    }

    #[test]
    fn a_pending_call_is_recorded_without_its_arguments() {
        let dir = tempfile::tempdir().unwrap();
        let store = JsonlStore::new(dir.path());
        let mut session = store.load("k").unwrap();
        session.push(Message::user("q"));
        let call = ToolCall::new("c", "write_file", "{\"content\":\"long\"}");
        let run = vec![Message::assistant_calls(None, vec![call.clone()])];
        let view = CheckpointView { phase: CheckpointPhase::AwaitingTools, iteration: 2, messages: &run, pending_tool_calls: std::slice::from_ref(&call) };
        CheckpointWriter::new(100).write(&store, &mut session, &view).unwrap();
        let record: Checkpoint = serde_json::from_value(session.metadata[RUNTIME_CHECKPOINT].clone()).unwrap();
        assert_eq!(record.pending_tool_calls, [ToolCall::new("c", "write_file", "")]);
        assert_eq!((record.phase, record.iteration), (CheckpointPhase::AwaitingTools, 2));
        assert_eq!(session.messages.len(), 2, "the call itself is in the session");
    }
}
