//! `AgentLoop`: the long-lived orchestrator (spec §3).
//!
//! - `run` consumes the bus; each ordinary message gets its own task, so a
//!   session waiting on the model never blocks the others.
//! - `/stop` and `/status` are answered at once, without the session lock.
//! - A message for a session with a running turn goes to that turn's pending
//!   queue (injected by the runner); a full queue falls back to a task that
//!   waits for the lock.
//! - `dispatch`: a [`BusResponder`] as the turn's sink, so its output goes
//!   back to the message's chat; then `process`: per-session lock (serial
//!   within a session), then the global semaphore (concurrency across
//!   sessions). On `/stop` it writes the
//!   runner's checkpoint into the session; on error it apologises; on every
//!   exit it re-publishes what is left in the pending queue.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::active::ActiveTurn;
use super::commands::{self, Command, Parsed};
use super::core::AgentCore;
use super::pending::{KeepAlive, PendingQueue};
use super::turn::{self, FollowUp, RunScope, TurnContext, TurnError, materialize_checkpoint};
use super::responder::BusResponder;
use super::sink::TurnSink;
use crate::bus::{InboundMessage, Origin, OutboundKind, OutboundMessage, Reply, SYSTEM_CHANNEL, SessionKey, StopReason};
use crate::durable::{InboxRef, MAX_ATTEMPTS};

/// How long `run` waits on the bus before doing housekeeping.
const INBOUND_POLL: Duration = Duration::from_secs(1);

/// Published when a turn fails.
pub const APOLOGY: &str = "Sorry, something went wrong while handling your message. Please try again.";

/// The reply to a poison message (one whose every attempt ended its
/// process): it is not tried again.
pub const POISON_TEXT: &str = "Sorry, I could not handle this message: every attempt stopped the host before it finished, so I will not try it again. Try rephrasing it or splitting it into smaller steps.";

/// Reply to a command that cannot run while a turn runs (`/new`).
pub const BUSY_TEXT: &str = "A task is still running. Wait for it, or /stop it first.";

/// Reply to a `/stop` that stopped a turn.
pub const STOPPED_TEXT: &str = "Stopped. Finished tool steps are kept.";

/// An internal run for [`AgentLoop::run_internal`].
pub struct InternalRun {
    /// The prompt, as the turn's user message.
    pub content: String,
    /// A key of its own (`dream:20260301-101500`): it is never stored, and
    /// the key keeps it apart from every conversation's lock.
    pub session_key: String,
    /// The chat it acts in (what a plugin call sees as the current chat).
    pub channel: String,
    /// The chat id on that channel.
    pub chat_id: String,
    /// Its tools and iteration limit.
    pub scope: RunScope,
    /// Where its progress goes.
    pub sink: Arc<dyn TurnSink>,
}

/// What [`AgentLoop::run_internal`] returns: the run's answer and how
/// the run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct InternalReply {
    /// The final answer (empty when a `message` tool answered instead).
    pub text: String,
    /// Why the run ended.
    pub stop: StopReason,
}

/// How a turn ended, for the caller of `process`.
pub enum TurnOutcome {
    /// It ran to DONE; the context holds the reply and the trace.
    Done(Box<TurnContext>),
    /// `/stop` cancelled it; its checkpoint was written into the session.
    Cancelled,
    /// It failed; the error was logged.
    Failed(TurnError),
}

/// The orchestrator. Cheap to clone.
#[derive(Clone)]
pub struct AgentLoop {
    core: Arc<AgentCore>,
    semaphore: Option<Arc<Semaphore>>,
    /// Set by [`AgentLoop::stop_for_shutdown`]: a turn cancelled now is
    /// handed over to the next start, not answered.
    shutting_down: Arc<AtomicBool>,
    /// Set by the first [`AgentLoop::recover`]: what a dead process left
    /// is finished once per process, before any intake starts (a second
    /// pass would take this process's own open rows for a dead one's).
    pub(super) recovered: Arc<AtomicBool>,
}

impl AgentLoop {
    /// A loop over `core`.
    pub fn new(core: Arc<AgentCore>) -> Self {
        let limit = core.settings.max_concurrent_turns;
        AgentLoop { semaphore: (limit > 0).then(|| Arc::new(Semaphore::new(limit))), core, shutting_down: Default::default(), recovered: Default::default() }
    }

    /// The chat a person last wrote to this loop from, as (channel, chat id).
    pub fn last_chat(&self) -> Option<(String, String)> {
        self.core.last_chat.get()
    }

    /// Mirrors a message the host sent on its own (a heartbeat answer) into
    /// the session of its chat as an assistant row marked
    /// `_channel_delivery`, so the conversation knows what was said when
    /// the user answers it (nanobot's `_deliver_to_channel`). Taken under
    /// the session's lock, so it lands after a running turn, never inside.
    pub async fn record_delivery(&self, channel: &str, chat_id: &str, text: &str) {
        let key = format!("{channel}:{chat_id}");
        let _serial = self.core.locks.lock(&key).await;
        let mut session = match self.core.sessions.load(&key) {
            Ok(session) => session,
            Err(e) => {
                tracing::warn!(session = %key, "delivery not recorded: {e}");
                return;
            }
        };
        let mut row = crate::session::Message::assistant(text);
        row.meta.insert(crate::session::CHANNEL_DELIVERY.into(), serde_json::Value::Bool(true));
        row.meta.insert("timestamp".into(), chrono::Utc::now().to_rfc3339().into());
        session.push(row);
        if let Err(e) = self.core.sessions.save(&mut session) {
            tracing::warn!(session = %key, "delivery not recorded: {e}");
        }
        self.core.sessions.release(session);
    }

    /// The shared services.
    pub fn core(&self) -> &Arc<AgentCore> {
        &self.core
    }

    /// Consumes the bus until `shutdown` resolves (or the bus closes), then
    /// waits for the running turns to finish. It recovers first, unless the
    /// owner did so before starting its intake (the gateway does).
    pub async fn run(&self, shutdown: impl Future<Output = ()>) {
        let mut tasks = JoinSet::new();
        self.recover();
        self.resume_goals();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                next = tokio::time::timeout(INBOUND_POLL, self.core.bus.consume_inbound()) => match next {
                    Ok(Some(message)) => self.accept(message, &mut tasks),
                    Ok(None) => break,
                    Err(_) => self.idle_check(&mut tasks),
                },
            }
            while tasks.try_join_next().is_some() {}
        }
        while tasks.join_next().await.is_some() {}
        // Shutdown, in phases: (1) intake stopped (the loop left), (2) the
        // turns finished (above), (3) subagents cancelled (a result nobody
        // would receive is not worth waiting for), (4) background work the
        // turns left (consolidation, `/new` archives) finished, (5) flush.
        if let Some(manager) = &self.core.subagents {
            let n = manager.cancel_all();
            if n > 0 {
                tracing::info!(count = n, "shutdown: subagents cancelled");
            }
        }
        self.core.tasks.close();
        self.core.tasks.wait().await;
        if let Err(e) = self.core.sessions.sync() {
            tracing::warn!("syncing sessions at shutdown failed: {e}");
        }
        if let Some(inbox) = self.core.bus.inbox()
            && let Err(e) = inbox.sync()
        {
            tracing::warn!("syncing the inbox at shutdown failed: {e}");
        }
    }

    /// A goal that was active when the process died goes on: each such
    /// session gets a resume message on the bus (from sender `goal`), whose
    /// turn recovers the interrupted one (RESTORE) and continues the goal.
    pub fn resume_goals(&self) -> usize {
        let mut archives = Vec::new();
        let mut found = super::goal::interrupted_goals_and(self.core.sessions.as_ref(), |session| {
            if session.metadata.contains_key(crate::session::PENDING_ARCHIVES) {
                archives.push(session.key.clone());
            }
        });
        for key in archives {
            // A `/new` whose archive a crash interrupted.
            tracing::info!(session = %key, "archiving a conversation cleared before the last stop");
            super::archives::spawn(&self.core, &key);
        }
        // A goal whose turn has an open inbox row is resumed with that row.
        if let Some(inbox) = self.core.bus.inbox() {
            found.retain(|(key, _)| {
                let pending = self.core.sessions.snapshot(key).ok().and_then(|s| super::turn::restore::pending_inbox(&s));
                !pending.is_some_and(|id| inbox.is_open(id))
            });
        }
        for (key, goal) in &found {
            let chat = SessionKey::new(key.as_str()).chat_hint();
            let mut message = InboundMessage::from_origin(chat.channel, chat.chat_id, Origin::GoalResume, super::goal::resume_message(goal));
            message.session_key_override = Some(key.clone());
            tracing::info!(session = %key, "resuming an interrupted goal");
            self.core.bus.publish_inbound(message);
        }
        found.len()
    }

    /// Idle compaction: at most once a minute (by the compactor's clock),
    /// summarise sessions idle past the TTL. Runs as a task; sessions with a
    /// running turn, or whose lock is taken, are skipped until the next scan.
    pub fn idle_check(&self, tasks: &mut JoinSet<()>) {
        let auto = &self.core.auto_compact;
        if !auto.enabled() || !auto.should_scan() {
            return;
        }
        let this = self.clone();
        tasks.spawn(async move {
            this.compact_idle_sessions().await;
        });
    }

    /// One idle-compaction scan over every stored session; returns how many
    /// were compacted.
    pub async fn compact_idle_sessions(&self) -> usize {
        let keys = match self.core.sessions.list() {
            Ok(keys) => keys,
            Err(e) => {
                tracing::warn!("idle compaction: cannot list sessions: {e}");
                return 0;
            }
        };
        let mut compacted = 0;
        for key in keys {
            if self.core.active.get(&key).is_some() {
                continue;
            }
            let Some(_serial) = self.core.locks.try_lock(&key) else { continue };
            let Ok(mut session) = self.core.sessions.load(&key) else { continue };
            if self.core.auto_compact.is_expired(&session) {
                let chat = SessionKey::new(key.as_str()).chat_hint();
                let prompt = self.core.system_prompt(&chat.channel, &chat.chat_id, &key, None);
                match self.core.auto_compact.compact(&mut session, &prompt).await {
                    Ok(_) => match self.core.sessions.save(&mut session) {
                        Ok(()) => compacted += 1,
                        Err(e) => tracing::warn!(session = %key, "idle compaction not saved: {e}"),
                    },
                    Err(e) => tracing::warn!(session = %key, "idle compaction failed: {e}"),
                }
            }
            self.core.sessions.release(session);
        }
        compacted
    }

    /// Token consolidation after a turn, off the reply path, under the
    /// session lock so it never races the next turn.
    async fn consolidate_in_background(&self, key: String, channel: String, chat_id: String) {
        let _serial = self.core.locks.lock(&key).await;
        let Ok(mut session) = self.core.sessions.load(&key) else { return };
        let prompt = self.core.system_prompt(&channel, &chat_id, &key, crate::compact::last_summary(&session));
        let overhead = crate::compact::prompt_overhead(&prompt, self.core.tools.definitions_tokens(), &crate::session::Message::user(""));
        match self.core.consolidator.maybe_consolidate(&mut session, &prompt, overhead).await {
            Ok(report) if report.changed() => {
                if let Err(e) = self.core.sessions.save(&mut session) {
                    tracing::warn!(session = %key, "consolidation not saved: {e}");
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(session = %key, "background consolidation failed: {e}"),
        }
        self.core.sessions.release(session);
    }

    fn accept(&self, message: InboundMessage, tasks: &mut JoinSet<()>) {
        let key = message.session_key();
        // Only a person's chat can take a message nobody asked for: not the
        // host's own messages, not the API (a reply goes only to the
        // request that asked), whatever their sender is called.
        if message.origin.is_person() && message.channel != SYSTEM_CHANNEL {
            self.core.last_chat.set(&message.channel, &message.chat_id);
        }
        // A `system` message (a subagent's result) is never a command.
        let system = matches!(message.origin, Origin::Subagent { .. }) || message.channel == SYSTEM_CHANNEL;
        if !system && commands::is_priority(&message.content) {
            self.answer_priority(&message, &key);
            return;
        }
        if let Some(active) = self.core.active.get(&key) {
            // Other commands are answered inline: they must not be injected
            // into the running turn as if the user had said them to the model.
            let inline = match self.core.commands.parse(&message.content) {
                _ if system => None,
                Parsed::NotACommand => None,
                Parsed::Unknown { name, suggestion } => Some(commands::unknown_text(&name, suggestion)),
                Parsed::Known(Command::Help) => Some(self.core.commands.help_text()),
                Parsed::Known(_) | Parsed::Registered(_) => Some(BUSY_TEXT.to_string()),
            };
            if let Some(text) = inline {
                self.answer_inline(&message, OutboundMessage::reply(&message.channel, &message.chat_id, text));
                return;
            }
            // Queued for injection; a full queue falls back to a task that
            // waits for the lock.
            let Err(message) = active.pending.try_push(message) else { return };
            return self.spawn_dispatch(message, tasks);
        }
        self.spawn_dispatch(message, tasks);
    }

    fn spawn_dispatch(&self, message: InboundMessage, tasks: &mut JoinSet<()>) {
        let this = self.clone();
        tasks.spawn(async move { this.dispatch(message).await });
    }

    /// `/stop` and `/status`, answered without the session lock.
    fn answer_priority(&self, message: &InboundMessage, key: &str) {
        let text = match commands::parse(&message.content) {
            Parsed::Known(Command::Stop) => {
                let (turn, subagents) = self.stop_counted(key);
                match (turn, subagents) {
                    (true, 0) => STOPPED_TEXT.to_string(),
                    (true, n) => format!("{STOPPED_TEXT} Stopped {n} subagent(s)."),
                    (false, 0) => "No task is running.".to_string(),
                    (false, n) => format!("Stopped {n} subagent(s)."),
                }
            }
            _ => match self.core.sessions.load(key) {
                Ok(session) => {
                    let text = self.core.status_text(&session);
                    if self.core.active.get(key).is_none() {
                        self.core.sessions.release(session);
                    }
                    text
                }
                Err(e) => format!("Status unavailable: {e}"),
            },
        };
        self.answer_inline(message, OutboundMessage::reply(&message.channel, &message.chat_id, text));
    }

    /// Sends `reply` to a message answered without a turn (`/stop`,
    /// `/status`, a command refused while a turn runs), its inbox row done
    /// with it first.
    fn answer_inline(&self, message: &InboundMessage, mut reply: OutboundMessage) {
        if let Some(inbox_ref) = InboxRef::of(message) {
            match self.record_done(inbox_ref, Some(&reply)) {
                Some(ack) => reply.ack = ack,
                None => return,
            }
        }
        self.core.bus.publish_outbound(reply);
    }

    /// Marks `inbox_ref` done with `reply` (no turn, so no session to
    /// stamp). `None` when it was answered already: send nothing. The ack
    /// to attach when the reply needs a delivery mark otherwise.
    fn record_done(&self, inbox_ref: InboxRef, reply: Option<&OutboundMessage>) -> Option<crate::bus::DeliveryAck> {
        let Some(inbox) = self.core.bus.inbox() else { return Some(Default::default()) };
        let needs_mark = reply.is_some_and(super::turn::commit::needs_delivery_mark);
        match inbox.done(inbox_ref, &[], reply, !needs_mark) {
            Ok(true) => Some(if needs_mark { super::turn::commit::delivery_ack(inbox, inbox_ref.id) } else { Default::default() }),
            Ok(false) => None,
            Err(e) => {
                tracing::error!(inbox = inbox_ref.id, "reply sent without a durable record: {e}");
                Some(Default::default())
            }
        }
    }

    /// Stops the running turn of `key` because the host is shutting down:
    /// its checkpoint is kept and its inbox row stays open, so the next
    /// start resumes it (not counted as a failed attempt).
    pub fn stop_for_shutdown(&self, key: &str) -> bool {
        self.shutting_down.store(true, Ordering::Release);
        self.stop(key)
    }

    /// Cancels the running turn of `key` and its subagents; false when
    /// nothing ran.
    pub fn stop(&self, key: &str) -> bool {
        let (turn, subagents) = self.stop_counted(key);
        turn || subagents > 0
    }

    /// [`AgentLoop::stop`]: whether a turn ran, and how many subagents.
    pub fn stop_counted(&self, key: &str) -> (bool, usize) {
        let subagents = self.core.subagents.as_ref().map(|m| m.cancel_session(key)).unwrap_or(0);
        match self.core.active.get(key) {
            Some(turn) => {
                turn.cancel.cancel();
                (true, subagents)
            }
            None => (false, subagents),
        }
    }

    /// Handles one message from the bus: runs the turn with a
    /// [`BusResponder`] as its sink, so the progress, the reply (or an
    /// apology) and `TurnEnd` go back to the message's chat.
    pub async fn dispatch(&self, message: InboundMessage) {
        let responder = BusResponder::new(self.core.bus.clone(), &message, self.core.settings.stream);
        let inbox_ref = InboxRef::of(&message);
        let apology = BusResponder::apology_for(&message);
        #[cfg(feature = "test-support")]
        let text = message.content.clone();
        let outcome = self.process(message, responder.clone()).await;
        let Some(ack) = self.settle(inbox_ref, &outcome, apology) else { return responder.turn_end() };
        // Committed, not yet handed to delivery.
        crate::crash_point!("committed", &text);
        responder.finish_with(&outcome, ack);
    }

    /// Records how the turn of `inbox_ref` ended, when the turn itself did
    /// not (it commits a `Done` outcome): a failure is done with its
    /// apology, a stop by the user done unanswered, a stop by shutdown
    /// handed over to the next start. `None` when the row was answered
    /// already (send nothing); else the ack for a failure's apology.
    fn settle(&self, inbox_ref: Option<InboxRef>, outcome: &TurnOutcome, apology: impl Fn(&super::turn::TurnError) -> OutboundMessage) -> Option<crate::bus::DeliveryAck> {
        let Some(inbox_ref) = inbox_ref else { return Some(Default::default()) };
        match outcome {
            // Committed by the turn (`turn::commit`), ack attached.
            TurnOutcome::Done(_) => Some(Default::default()),
            TurnOutcome::Failed(e) => self.record_done(inbox_ref, Some(&apology(e))),
            TurnOutcome::Cancelled if self.shutting_down.load(Ordering::Acquire) => {
                if let Some(inbox) = self.core.bus.inbox()
                    && let Err(e) = inbox.handoff(inbox_ref)
                {
                    tracing::warn!(inbox = inbox_ref.id, "handoff not recorded: {e}");
                }
                Some(Default::default())
            }
            TurnOutcome::Cancelled => {
                self.record_done(inbox_ref, None);
                Some(Default::default())
            }
        }
    }

    /// [`AgentLoop::process`] for a message taken from the bus by a front end
    /// that shows the outcome itself (the terminal): its inbox row is
    /// settled as [`AgentLoop::dispatch`] settles it.
    pub async fn process_accepted(&self, message: InboundMessage, sink: Arc<dyn TurnSink>) -> TurnOutcome {
        let inbox_ref = InboxRef::of(&message);
        let apology = BusResponder::apology_for(&message);
        let outcome = self.process(message, sink).await;
        self.settle(inbox_ref, &outcome, apology);
        outcome
    }

    /// Builds the inbound message for `content` and runs the same turn under
    /// the same lock as bus messages, its output going to `sink` only. Used
    /// by the CLI.
    pub async fn process_direct(&self, content: &str, session_key: &str, sink: Arc<dyn TurnSink>) -> TurnOutcome {
        // The key is what the person typed (`--session telegram:42`).
        let chat = SessionKey::new(session_key).chat_hint();
        let mut message = InboundMessage::new(chat.channel, "user", chat.chat_id, content);
        message.session_key_override = Some(session_key.to_string());
        // On a durable bus (the interactive `chitin agent`) the message is
        // accepted like any other, so a restart finishes it.
        if let Some(inbox) = self.core.bus.inbox()
            && let Err(e) = inbox.accept(&mut message, None)
        {
            tracing::error!(session = %session_key, "message handled without a durable record: {e}");
        }
        let inbox_ref = InboxRef::of(&message);
        let apology = BusResponder::apology_for(&message);
        let outcome = self.process(message, sink).await;
        self.settle(inbox_ref, &outcome, apology);
        outcome
    }

    /// Runs an internal turn (nanobot's `process_direct(..., ephemeral=True)`,
    /// used by Dream and the heartbeat): nothing is persisted (no session
    /// file, no checkpoint, no consolidation), its output goes to
    /// `run.sink` only, and the returned reply always says how the run
    /// ended ([`InternalReply::stop`]: `Completed`, `MaxIterations`,
    /// `Error`, `Stopped`, …), also when the turn was stopped or failed. Its
    /// tools and iteration limit are `run.scope`'s. The reply is returned,
    /// not published: the caller decides where it goes.
    pub async fn run_internal(&self, run: InternalRun) -> InternalReply {
        let mut message = InboundMessage::from_origin(&run.channel, &run.chat_id, Origin::Internal, run.content);
        message.session_key_override = Some(run.session_key);
        match self.process_scoped(message, run.sink, Some(run.scope)).await {
            // A `message` tool answered the chat itself: an empty reply.
            TurnOutcome::Done(ctx) => InternalReply { text: ctx.outbound.as_ref().map(|o| o.content.clone()).unwrap_or_default(), stop: ctx.stop() },
            TurnOutcome::Cancelled => InternalReply { text: STOPPED_TEXT.to_string(), stop: StopReason::Stopped },
            TurnOutcome::Failed(e) => InternalReply { text: format!("The internal run failed: {e}"), stop: StopReason::Error },
        }
    }

    /// Runs one turn under the session lock and the global semaphore; its
    /// output goes to `sink` as it happens.
    pub async fn process(&self, message: InboundMessage, sink: Arc<dyn TurnSink>) -> TurnOutcome {
        self.process_scoped(message, sink, None).await
    }

    /// [`AgentLoop::process`]; with a `scope`, the turn is an ephemeral
    /// internal run with those tools and limits.
    async fn process_scoped(&self, message: InboundMessage, sink: Arc<dyn TurnSink>, scope: Option<RunScope>) -> TurnOutcome {
        let key = message.session_key();
        let serial = self.core.locks.lock(&key).await;
        let _permit = match &self.semaphore {
            Some(s) => Some(s.clone().acquire_owned().await.expect("the semaphore is never closed")),
            None => None,
        };
        let inbox_ref = InboxRef::of(&message).filter(|_| scope.is_none());
        if let (Some(inbox_ref), Some(inbox)) = (inbox_ref, self.core.bus.inbox()) {
            match inbox.start(inbox_ref) {
                // Answered already (a duplicate delivery of the message).
                Ok(None) => {
                    tracing::info!(session = %key, inbox = inbox_ref.id, "message already answered; not run again");
                    return TurnOutcome::Cancelled;
                }
                Ok(Some(attempts)) if attempts > MAX_ATTEMPTS => {
                    tracing::error!(session = %key, inbox = inbox_ref.id, attempts, "poison message: answered with a failure, not run again");
                    let error = super::turn::TurnError::Poison { attempts: attempts - 1 };
                    self.close_poisoned(&key, &BusResponder::apology_for(&message)(&error).content);
                    return TurnOutcome::Failed(error);
                }
                Ok(Some(_)) => {}
                Err(e) => tracing::error!(session = %key, inbox = inbox_ref.id, "turn start not recorded: {e}"),
            }
        }
        let mut pending = PendingQueue::new(self.core.settings.pending_queue_size.max(1));
        let keep_alive = std::time::Duration::from_secs(self.core.settings.subagents.keep_alive_secs);
        if let Some(manager) = self.core.subagents.as_ref().filter(|_| !keep_alive.is_zero()) {
            // While subagents of this session run, the turn waits for their
            // results instead of ending (each would start a turn of its own).
            let (manager, session) = (manager.clone(), key.clone());
            pending = pending.with_keep_alive(KeepAlive { while_: Arc::new(move || manager.has_running(&session)), bound: keep_alive });
        }
        let active = Arc::new(ActiveTurn::new(Arc::new(pending)));
        self.core.active.insert(&key, active.clone());
        let mut ctx = TurnContext::new(message);
        ctx.pending = Some(active.pending.clone());
        ctx.sink = sink;
        if let Some(scope) = scope {
            ctx.ephemeral = true;
            ctx.internal = true;
            ctx.scope = scope;
        }
        let outcome = tokio::select! {
            result = turn::drive(&self.core, &mut ctx) => match result {
                Ok(()) => match super::turn::commit::run(&self.core, &mut ctx) {
                    Ok(()) => {
                        // An ephemeral session is thrown away, not cached: its
                        // key is never used again.
                        if let Some(session) = ctx.session.take().filter(|_| !ctx.ephemeral) {
                            self.core.sessions.release(session);
                        }
                        if ctx.consolidate_after {
                            let this = self.clone();
                            let (channel, chat_id) = (ctx.inbound.channel.clone(), ctx.inbound.chat_id.clone());
                            let key = key.clone();
                            self.core.tasks.spawn(async move { this.consolidate_in_background(key, channel, chat_id).await });
                        }
                        TurnOutcome::Done(Box::new(ctx))
                    }
                    Err(e) => {
                        tracing::error!(session = %key, "turn not committed: {e}");
                        TurnOutcome::Failed(e)
                    }
                },
                Err(e) => {
                    tracing::error!(session = %key, "turn failed: {e}");
                    TurnOutcome::Failed(e)
                }
            },
            _ = active.cancel.cancelled() => {
                let ephemeral = ctx.ephemeral;
                drop(ctx);
                // Stopped by a shutdown, a turn with an inbox row stays as
                // its checkpoint left it: the next start resumes it.
                let handed_over = inbox_ref.is_some() && self.shutting_down.load(Ordering::Acquire);
                if !ephemeral && !handed_over {
                    self.restore_after_cancel(&key);
                }
                TurnOutcome::Cancelled
            }
        };
        self.core.active.remove(&key, &active);
        drop(serial);
        // Nothing is lost: whatever the turn did not inject goes back on the
        // bus, to be handled as ordinary messages.
        for leftover in active.pending.take_all() {
            self.core.bus.publish_inbound(leftover);
        }
        match outcome {
            TurnOutcome::Done(mut ctx) => match ctx.follow_up.take() {
                Some(FollowUp::Archive) => {
                    super::archives::spawn(&self.core, &key);
                    TurnOutcome::Done(ctx)
                }
                Some(FollowUp::Command(work)) => {
                    // A registered command's work (`/dream`): its answer is
                    // this turn's reply.
                    let answer = work(self.clone(), ctx.sink.clone()).await;
                    let (channel, chat_id) = ctx.inbound.reply_route();
                    let mut reply = OutboundMessage::reply(channel, chat_id, answer.text);
                    reply.kind = OutboundKind::Message(Reply { stop: Some(answer.stop), ..Reply::default() });
                    ctx.outbound = Some(reply);
                    TurnOutcome::Done(ctx)
                }
                None => TurnOutcome::Done(ctx),
            },
            other => other,
        }
    }

    /// Before a poison message is answered with a failure: its session is
    /// closed (finished tool steps kept, unfinished calls answered as
    /// interrupted) and the failure stored as the turn's answer, so the
    /// next message starts clean and the history shows what the user got.
    fn close_poisoned(&self, key: &str, answer: &str) {
        let closed = self.core.sessions.load(key).and_then(|mut session| {
            super::turn::resume_checkpoint(&mut session, |_| false);
            if session.metadata.contains_key(crate::session::PENDING_USER_TURN) {
                session.push(crate::session::Message::assistant(answer));
            }
            session.set_meta(crate::session::PENDING_USER_TURN, None);
            session.set_meta(crate::session::PENDING_INBOX, None);
            self.core.sessions.save(&mut session)?;
            self.core.sessions.release(session);
            Ok(())
        });
        if let Err(e) = closed {
            tracing::error!(session = %key, "could not close the session of a poison message: {e}");
        }
    }

    /// After `/stop`: the session on disk holds the user message and the last
    /// checkpoint; materialise it so finished tool results survive.
    fn restore_after_cancel(&self, key: &str) {
        let restored = self.core.sessions.load(key).and_then(|mut session| {
            if materialize_checkpoint(&mut session) {
                self.core.sessions.save(&mut session)?;
            }
            self.core.sessions.release(session);
            Ok(())
        });
        if let Err(e) = restored {
            tracing::error!(session = %key, "could not restore the checkpoint after /stop: {e}");
        }
    }
}
