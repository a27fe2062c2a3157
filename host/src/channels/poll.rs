//! The poll side of a running channel: the [`Poller`] and its two commits,
//! [`accept`] and the intake budget.
//!
//! # The poll loop
//! `start(config, state)` once, then: `poll-request(state)` → the host runs
//! the request ([`super::transport`]: grant, secrets, redaction) → `poll-response`
//! → a step within bounds → **commit 1**: new state + the step's event ids
//! marked seen + accepted messages appended to the inbox, one atomic file
//! → publish the inbox on the bus → **commit 2**: inbox emptied. On start
//! the inbox left by a previous run is published first.
//!
//! Emits whose event id is already seen are dropped; senders not in
//! `allow_from` are logged (sender id only) and dropped in the same commit,
//! so they never reach the bus nor cost a model request.
//!
//! # The crash guarantee (exactly what holds)
//! - A crash **before commit 1** (during the poll, the callback, or after
//!   the step returned) keeps the old state: the next run polls the same
//!   offset, the platform re-sends the unconfirmed updates (Telegram confirms
//!   an update only when `getUpdates` is called with a higher offset), and
//!   nothing of them was seen or published: **nothing lost, nothing twice**.
//! - A crash **between commit 1 and the publish** leaves the messages in
//!   the inbox: the next run publishes them before polling; the new offset
//!   and the seen ids keep the platform's re-sends out: **nothing lost,
//!   nothing twice**.
//! - A crash **between the publish and commit 2** (no `.await` between
//!   them, only the write and `fsync` of commit 2) replays those messages on
//!   the next run: the agent may see them **twice**. The bus is in memory,
//!   so this window cannot be closed without an acknowledgement from the
//!   agent's session store; it is at-least-once there.
//!
//! A failed step (trap, timeout, bounds, `transient`, a transport error)
//! commits nothing and backs off 1, 2, 4 … 60 s (a 429's `retry_after`
//! when the response had one); `fatal` stops the channel with its reason,
//! no restart loop. The lock ([`super::record::ChannelLock`]) makes a second
//! gateway on the same channel stop with "already running (pid N)".

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::bus::{InboundMessage, MessageBus};
use crate::plugins::channel::{Action, Callback, Step};
use crate::plugins::ChannelFailure;
use crate::plugins::runtime::{LoadedPlugin, PluginRuntime};
use crate::plugins::secrets::Secrets;
use crate::plugins::PluginError;

use super::config::{AllowFrom, ChannelConfig, GroupPolicy, Mode};
use super::deliver::{deliver_loop, Outbox};
use super::record::{ChannelLock, ChannelRecord};
use super::transport::{self, Transport};
use super::{media, progress, webhook, ChannelContext, ChannelSetupError, ChannelStatus, ComponentChannel};

/// Longest backoff after failed steps.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The wait after the `n`th failed step in a row: 1, 2, 4 … 60 s.
pub fn backoff(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.saturating_sub(1).min(6)).min(MAX_BACKOFF)
}

/// One running channel's poll side.
pub(super) struct Poller {
    name: String,
    config: ChannelConfig,
    plugin: Arc<LoadedPlugin>,
    runtime: Arc<PluginRuntime>,
    transport: Arc<Transport>,
    record: ChannelRecord,
    path: PathBuf,
    bus: Arc<MessageBus>,
    shutdown: CancellationToken,
    outbound: Option<JoinHandle<()>>,
    /// Chats whose message went to the agent: the deliver loop shows
    /// "typing" there until the reply lands.
    typing: tokio::sync::mpsc::UnboundedSender<String>,
    /// Webhook mode: the mount path and its verified requests.
    webhook: Option<(String, tokio::sync::mpsc::Receiver<webhook::WebhookCall>)>,
    routes: Arc<webhook::Routes>,
    /// Where inbound media are stored.
    media_dir: PathBuf,
    /// `max_messages_per_min`.
    intake: Intake,
    _lock: ChannelLock,
}

/// What a committed step left for the caller.
#[derive(Default)]
struct Committed {
    poll_after: Option<u32>,
    respond: Option<crate::plugins::channel::WebhookResponse>,
}

impl Poller {
    pub(super) async fn open(channel: ComponentChannel, ctx: ChannelContext) -> Result<Poller, (ChannelContext, ChannelSetupError)> {
        let ComponentChannel { config, plugin, runtime, dir, media_dir } = channel;
        let name = config.name.clone();
        let setup = || -> Result<(ChannelLock, ChannelRecord, Transport), ChannelSetupError> {
            std::fs::create_dir_all(&dir).map_err(|source| ChannelSetupError::Io { what: "creating the channels directory", path: dir.clone(), source })?;
            let path = dir.join(format!("{name}.json"));
            let lock = match ChannelLock::acquire(&dir.join(format!("{name}.lock"))) {
                Ok(lock) => lock,
                Err(e) => {
                    // Say so in the record too, for `chitin status` (best effort).
                    return Err(e);
                }
            };
            let record = ChannelRecord::load(&path)?;
            let spec = plugin.manifest.channel.as_ref().expect("checked in build");
            let secrets = Secrets::new(&spec.secrets, |n| config.secrets.get(n).map(String::as_str))
                .map_err(|e| ChannelSetupError::Config { key: format!("channels.{name}"), message: e.to_string() })?;
            let platform = spec.secrets.iter().find_map(|s| s.audience.as_deref());
            let transport = Transport::new(plugin.name(), plugin.grant.network.clone(), secrets, platform, config.api_base.as_deref(), config.max_concurrent_requests);
            // The component's own requests (`deliver`) get the same secrets
            // and base; one channel per plugin, so the first start sets it.
            plugin.set_outbound(transport.outbound());
            Ok((lock, record, transport))
        };
        match setup() {
            Ok((lock, record, transport)) => {
                let transport = Arc::new(transport);
                let limits = plugin.manifest.channel.as_ref().map(|c| c.limits.clone()).unwrap_or_default();
                let (typing, typing_rx) = tokio::sync::mpsc::unbounded_channel();
                let spec = plugin.manifest.channel.as_ref().expect("checked in build");
                // Registered only once the lock is ours, so a second gateway
                // never answers for the first one's channel.
                let webhook = match (config.mode, &spec.webhook) {
                    (Mode::Webhook, Some(hook)) => {
                        let path = webhook::mount_path(&name, &hook.route);
                        let secret = hook.verify.secret().and_then(|s| config.secrets.get(s)).map(String::as_str);
                        let calls = ctx.webhooks.register(&path, &name, webhook::Verifier::new(hook.verify.clone(), secret));
                        tracing::info!(channel = %name, "webhook route {path}");
                        Some((path, calls))
                    }
                    _ => None,
                };
                let outbox = Outbox {
                    name: name.clone(),
                    plugin: plugin.clone(),
                    runtime: runtime.clone(),
                    transport: transport.clone(),
                    workspace: crate::workspace::Workspace::open(runtime.workspace())
                        .map_err(|e| tracing::warn!(channel = %name, "files cannot be sent to this channel: {e}"))
                        .ok(),
                    max_upload: config.max_upload_mb << 20,
                    show: progress::Show { tool_hints: config.send_tool_hints, progress: config.send_progress },
                    typing_busy: Arc::default(),
                };
                let outbound = tokio::spawn(deliver_loop(outbox, ctx.outbound, typing_rx, limits));
                let intake = Intake::new(config.max_messages_per_min);
                Ok(Poller {
                    path: dir.join(format!("{name}.json")),
                    name,
                    config,
                    plugin,
                    runtime,
                    transport,
                    record,
                    bus: ctx.bus,
                    shutdown: ctx.shutdown,
                    outbound: Some(outbound),
                    typing,
                    webhook,
                    routes: ctx.webhooks,
                    media_dir,
                    intake,
                    _lock: lock,
                })
            }
            Err(e) => Err((ctx, e)),
        }
    }

    fn set_status(&mut self, status: &ChannelStatus) {
        self.record.status = status.to_string();
        if let Err(e) = self.record.save(&self.path) {
            tracing::warn!(channel = %self.name, "{e}");
        }
    }

    /// Publishes the inbox and empties it (commit 2).
    fn flush_inbox(&mut self) -> Result<(), ChannelSetupError> {
        if self.record.inbox.is_empty() {
            return Ok(());
        }
        for message in self.record.inbox.drain(..) {
            let _ = self.typing.send(message.chat_id.clone());
            self.bus.publish_inbound(message);
        }
        self.record.save(&self.path)
    }

    /// Applies a valid step: commit 1, then publish, then commit 2. Returns
    /// the step's `poll-after` and `respond`.
    async fn commit(&mut self, step: Step) -> Result<Committed, ChannelSetupError> {
        let now = Utc::now();
        let mut out = Committed::default();
        let mut http = Vec::new();
        let mut emitted = false;
        for action in step.actions {
            match action {
                Action::Emit(inbound) => {
                    emitted = true;
                    if let Some(mut message) = accept(&mut self.record, &self.name, &self.config.allow_from, self.config.group_policy, &inbound, now)
                        && self.intake.admit(&self.name, Instant::now())
                    {
                        // Before commit 1: a crash here re-polls the update
                        // and downloads again; nothing half-done is kept.
                        if !inbound.media.is_empty() {
                            let (files, notes) =
                                media::fetch(&self.name, &self.runtime, &self.plugin, &self.transport, &inbound.media, self.config.max_media_mb, &self.media_dir).await;
                            message.media = files;
                            for note in notes {
                                if !message.content.is_empty() {
                                    message.content.push('\n');
                                }
                                message.content.push_str(&note);
                            }
                        }
                        self.record.inbox.push(message);
                    }
                }
                Action::PollAfter(ms) => out.poll_after = Some(ms),
                Action::Http(request) => http.push(request),
                // Only an on-webhook step may carry it (checked with the step).
                Action::Respond(response) => out.respond = Some(response),
                other => tracing::warn!(channel = %self.name, "action not supported yet, ignored: {}", action_name(&other)),
            }
        }
        if emitted {
            // Test builds only (`test-support`, see `durable::crash`): a
            // crash after a step with emits returned, before commit 1
            // (`host/tests/e2e/channels.rs`).
            crate::crash_point!("channel_commit", &self.name);
        }
        self.record.state = step.state;
        self.record.status = ChannelStatus::Running.to_string();
        self.record.save(&self.path)?;
        self.flush_inbox()?;
        for request in http {
            let (transport, name) = (self.transport.clone(), self.name.clone());
            tokio::spawn(async move {
                match transport.run_action(&request).await {
                    Ok(response) if (200..300).contains(&response.status) => {}
                    // `setWebhook` refused means no update will ever come:
                    // say so where the user looks.
                    Ok(response) if transport.may_warn() => tracing::warn!(
                        channel = %name,
                        "http action answered {}: {}",
                        response.status,
                        crate::text::clip_for_terminal(&String::from_utf8_lossy(&response.body), 512, "body")
                    ),
                    Err(e) if transport.may_warn() => tracing::warn!(channel = %name, "http action failed: {e}"),
                    _ => {}
                }
            });
        }
        Ok(out)
    }

    pub(super) async fn run(mut self) -> ChannelStatus {
        let status = self.poll_loop().await;
        if let Some((path, mut calls)) = self.webhook.take() {
            self.routes.unregister(&path);
            // Requests still queued: the platform retries a 503.
            calls.close();
            while let Ok(call) = calls.try_recv() {
                let _ = call.reply.send(webhook::empty(503));
            }
        }
        self.set_status(&status);
        if let Some(task) = self.outbound.take() {
            task.abort();
        }
        status
    }

    async fn poll_loop(&mut self) -> ChannelStatus {
        if let Err(e) = self.flush_inbox() {
            return ChannelStatus::Stopped(e.to_string());
        }
        let spec = self.plugin.manifest.channel.clone().expect("checked in build");
        let interval = Duration::from_millis(u64::from(spec.poll.as_ref().map_or(0, |p| p.interval_ms)));
        let mut failures: u32 = 0;
        let mut started = false;
        let mut wait = Duration::ZERO;
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return ChannelStatus::Stopped("gateway shut down".into()),
                _ = tokio::time::sleep(wait) => {}
            }
            let round = match (started, self.config.mode) {
                (false, _) => self.start_once().await,
                (true, Mode::Poll) => self.poll_once().await,
                (true, Mode::Webhook) => self.webhook_once().await,
            };
            match round {
                Ok(poll_after) => {
                    started = true;
                    if failures > 0 {
                        tracing::info!(channel = %self.name, "channel recovered after {failures} failed step(s)");
                        failures = 0;
                    }
                    wait = poll_after.map_or(interval, |ms| Duration::from_millis(u64::from(ms)));
                }
                Err(Failure::Fatal(reason)) => {
                    tracing::error!(channel = %self.name, "channel stopped: {reason}");
                    return ChannelStatus::Stopped(reason);
                }
                Err(Failure::Shutdown) => return ChannelStatus::Stopped("gateway shut down".into()),
                Err(Failure::Retry { reason, after }) => {
                    failures += 1;
                    wait = after.unwrap_or_else(|| backoff(failures));
                    tracing::warn!(channel = %self.name, "channel step failed ({failures} in a row), retrying in {wait:?}: {reason}");
                    self.set_status(&ChannelStatus::BackingOff(failures));
                }
            }
        }
    }

    async fn start_once(&mut self) -> Result<Option<u32>, Failure> {
        let config = self.config.start_json(self.webhook.as_ref().map(|(path, _)| path.as_str()));
        let step = self.runtime.channel_step(&self.plugin, Callback::Start { config: &config }, &self.record.state).await.map_err(|e| self.failure(e, None))?;
        Ok(self.commit(step).await.map_err(|e| Failure::Fatal(e.to_string()))?.poll_after)
    }

    /// One verified webhook request: `on-webhook`, commit as a poll step
    /// does, then answer with the step's `respond` (200 empty without one).
    /// A failed step answers 500 and commits nothing; the platform's retry
    /// is the backoff, so the channel takes the next request at once.
    async fn webhook_once(&mut self) -> Result<Option<u32>, Failure> {
        let call = {
            let Some((_, calls)) = self.webhook.as_mut() else { return Err(Failure::Fatal("webhook mode without a route".into())) };
            tokio::select! {
                _ = self.shutdown.cancelled() => return Err(Failure::Shutdown),
                call = calls.recv() => match call {
                    Some(call) => call,
                    None => return Err(Failure::Fatal("the webhook route was closed".into())),
                },
            }
        };
        let step = match self.runtime.channel_step(&self.plugin, Callback::Webhook(&call.request), &self.record.state).await {
            Ok(step) => step,
            Err(e) => {
                let failure = self.failure(e, None);
                let _ = call.reply.send(webhook::empty(500));
                return match failure {
                    Failure::Retry { reason, .. } => {
                        tracing::warn!(channel = %self.name, "webhook step failed, answered 500 (the platform retries): {reason}");
                        Ok(None)
                    }
                    other => Err(other),
                };
            }
        };
        match self.commit(step).await {
            Ok(committed) => {
                let _ = call.reply.send(committed.respond.unwrap_or_else(|| webhook::empty(200)));
                Ok(None)
            }
            Err(e) => {
                let _ = call.reply.send(webhook::empty(500));
                Err(Failure::Fatal(e.to_string()))
            }
        }
    }

    async fn poll_once(&mut self) -> Result<Option<u32>, Failure> {
        let request = self.runtime.channel_poll_request(&self.plugin, &self.record.state).await.map_err(|e| self.failure(e, None))?;
        let response = tokio::select! {
            _ = self.shutdown.cancelled() => return Err(Failure::Shutdown),
            response = self.transport.run(&request) => response,
        };
        let response = response.map_err(|e| Failure::Retry { reason: e.to_string(), after: None })?;
        let after = (response.status == 429).then(|| transport::retry_after(&response.headers, &response.body)).flatten();
        let step = self.runtime.channel_step(&self.plugin, Callback::PollResponse(&response), &self.record.state).await.map_err(|e| self.failure(e, after))?;
        Ok(self.commit(step).await.map_err(|e| Failure::Fatal(e.to_string()))?.poll_after)
    }

    fn failure(&self, error: PluginError, after: Option<Duration>) -> Failure {
        let reason = self.transport.secrets().redact(&error.to_string()).into_owned();
        match error {
            PluginError::Channel { kind: ChannelFailure::Fatal, .. } => Failure::Fatal(reason),
            _ => Failure::Retry { reason, after },
        }
    }
}

/// Takes one emit into the record: `None` for a duplicate event id or a
/// sender not in `allow_from` (logged, sender id only); the event id is
/// marked seen either way, so a re-sent refused message is not logged again.
pub fn accept(
    record: &mut ChannelRecord,
    channel: &str,
    allow: &AllowFrom,
    policy: GroupPolicy,
    inbound: &crate::plugins::channel::Inbound,
    now: chrono::DateTime<Utc>,
) -> Option<InboundMessage> {
    if record.is_seen(&inbound.event_id) {
        tracing::debug!(channel, event = %inbound.event_id, "duplicate event dropped");
        return None;
    }
    record.mark_seen(&inbound.event_id, now);
    if !allow.allows(&inbound.sender_id) {
        tracing::info!(channel, sender = %inbound.sender_id, "message from a sender not in allow_from dropped");
        return None;
    }
    if inbound.chat_kind != crate::plugins::channel::ChatKind::Direct && !policy.admits(inbound.trigger) {
        tracing::debug!(channel, chat = %inbound.chat_id, ?policy, "group message not addressed to the bot dropped (group_policy)");
        return None;
    }
    let mut message = InboundMessage::new(channel, &inbound.sender_id, &inbound.chat_id, &inbound.text);
    message.metadata.insert("event_id".into(), Value::from(inbound.event_id.clone()));
    if let Some(name) = &inbound.sender_name {
        message.metadata.insert("sender_name".into(), Value::from(name.clone()));
    }
    if let Some(thread) = &inbound.thread {
        message.metadata.insert(crate::bus::THREAD.into(), Value::from(thread.clone()));
        message.session_key_override = Some(format!("{channel}:{}:{thread}", inbound.chat_id));
    }
    Some(message)
}

/// `max_messages_per_min`: the messages one channel hands to the agent in
/// a minute (fixed windows). Past it, messages are dropped (their event ids
/// stay taken, so a re-send is not counted again) with one warning per
/// window and the count at its end: a channel that makes up chats and
/// senders cannot turn into unbounded model requests and sessions.
#[derive(Debug)]
pub struct Intake {
    per_min: u32,
    started: Option<Instant>,
    taken: u32,
    dropped: u64,
}

impl Intake {
    /// An intake of at most `per_min` messages a minute (at least 1).
    pub fn new(per_min: u32) -> Intake {
        Intake { per_min: per_min.max(1), started: None, taken: 0, dropped: 0 }
    }

    /// Whether one more message may go to the agent at `now`.
    pub fn admit(&mut self, channel: &str, now: Instant) -> bool {
        if self.started.is_none_or(|s| now.duration_since(s) >= Duration::from_secs(60)) {
            if self.dropped > 0 {
                tracing::warn!(channel, dropped = self.dropped, "{} messages over max_messages_per_min were dropped in the last window", self.dropped);
            }
            *self = Intake { started: Some(now), ..Intake::new(self.per_min) };
        }
        if self.taken < self.per_min {
            self.taken += 1;
            return true;
        }
        if self.dropped == 0 {
            tracing::warn!(
                channel,
                "more than {} messages in a minute: dropping the rest of this minute (config [channels.{channel}] max_messages_per_min)",
                self.per_min
            );
        }
        self.dropped += 1;
        false
    }
}

enum Failure {
    Fatal(String),
    Retry { reason: String, after: Option<Duration> },
    Shutdown,
}

fn action_name(action: &Action) -> &'static str {
    match action {
        Action::Emit(_) => "emit",
        Action::Respond(_) => "respond",
        Action::Http(_) => "http",
        Action::SocketOpen(_) => "socket-open",
        Action::SocketReplace(_) => "socket-replace",
        Action::SocketSend(_) => "socket-send",
        Action::SocketClose(_) => "socket-close",
        Action::SetTimer(_) => "set-timer",
        Action::CancelTimer(_) => "cancel-timer",
        Action::PollAfter(_) => "poll-after",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbound(event: &str, sender: &str, thread: Option<&str>) -> crate::plugins::channel::Inbound {
        crate::plugins::channel::Inbound {
            event_id: event.into(),
            sender_id: sender.into(),
            sender_name: None,
            chat_id: "c1".into(),
            chat_kind: crate::plugins::channel::ChatKind::Direct,
            thread: thread.map(str::to_string),
            text: "hi".into(),
            media: vec![],
            trigger: crate::plugins::channel::Trigger::empty(),
        }
    }

    #[test]
    fn accept_dedups_and_applies_allow_from() {
        let mut record = ChannelRecord::default();
        let allow = AllowFrom::Only(vec!["u1".into()]);
        let now = Utc::now();
        let first = accept(&mut record, "tg", &allow, GroupPolicy::Mention, &inbound("e1", "u1", None), now).expect("allowed");
        assert_eq!(first.session_key(), "tg:c1");
        assert_eq!(first.metadata["event_id"], "e1");
        assert!(accept(&mut record, "tg", &allow, GroupPolicy::Mention, &inbound("e1", "u1", None), now).is_none(), "same event id: dropped");
        assert!(accept(&mut record, "tg", &allow, GroupPolicy::Mention, &inbound("e2", "stranger", None), now).is_none(), "not in allow_from");
        assert!(record.is_seen("e2"), "a refused event is taken too");
        let topic = accept(&mut record, "tg", &AllowFrom::Anyone, GroupPolicy::Mention, &inbound("e3", "x", Some("7")), now).unwrap();
        assert_eq!(topic.session_key(), "tg:c1:7");
        assert_eq!(topic.metadata["thread"], "7");
    }

    #[test]
    fn backoff_doubles_to_a_minute() {
        let secs: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    }

    #[test]
    fn the_intake_takes_its_budget_a_minute() {
        let mut intake = Intake::new(3);
        let t0 = Instant::now();
        let taken = (0..100).filter(|_| intake.admit("tg", t0)).count();
        assert_eq!(taken, 3);
        assert_eq!(intake.dropped, 97);
        assert!(intake.admit("tg", t0 + Duration::from_secs(60)), "a new minute");
        assert_eq!(intake.dropped, 0);
    }

    #[test]
    fn group_messages_pass_only_as_the_policy_says() {
        use crate::plugins::channel::{ChatKind, Trigger};
        let group = |event: &str, trigger: Trigger| crate::plugins::channel::Inbound { chat_kind: ChatKind::Group, trigger, ..inbound(event, "u1", None) };
        let mut record = ChannelRecord::default();
        let now = Utc::now();
        let mut passes = |policy: GroupPolicy, event: &str, trigger: Trigger| accept(&mut record, "tg", &AllowFrom::Anyone, policy, &group(event, trigger), now).is_some();
        assert!(!passes(GroupPolicy::Mention, "g1", Trigger::empty()), "chatter costs nothing");
        assert!(passes(GroupPolicy::Mention, "g2", Trigger::MENTION));
        assert!(passes(GroupPolicy::Mention, "g3", Trigger::REPLY_TO_BOT));
        assert!(passes(GroupPolicy::Mention, "g4", Trigger::COMMAND));
        assert!(!passes(GroupPolicy::Command, "g5", Trigger::MENTION));
        assert!(passes(GroupPolicy::Command, "g6", Trigger::COMMAND));
        assert!(passes(GroupPolicy::Ambient, "g7", Trigger::empty()));
        assert!(!passes(GroupPolicy::Off, "g8", Trigger::COMMAND));
        // Direct chats are never filtered by the group policy.
        assert!(accept(&mut record, "tg", &AllowFrom::Anyone, GroupPolicy::Off, &inbound("d1", "u1", None), now).is_some());
    }
}
