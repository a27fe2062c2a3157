//! The channel manager: runs chat-channel components (`channel-plugin` of
//! `chitin:plugin@0.2.0`) in poll mode, owning every transport, the state,
//! dedup, allow-lists and the lock, so the component stays a pure step
//! function (`../shared/spec/CHANNELS.md`).
//!
//! Why the host owns all of this: the one other host that let a component
//! hold its long poll lost offsets (state written in a throwaway instance),
//! sent 2–4 duplicate replies per message, and let two pollers share a
//! token. Here the component never sees a socket or a token, and its state
//! moves only through [`record::ChannelRecord`] commits.
//!
//! # The poll loop
//! `start(config, state)` once, then: `poll-request(state)` → the host runs
//! the request ([`transport`]: grant, secrets, redaction) → `poll-response`
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
//! no restart loop. The lock ([`record::ChannelLock`]) makes a second
//! gateway on the same channel stop with "already running (pid N)".
//!
//! # Outbound
//! The channel's route in the router is read by one task: final `Message`s
//! are passed to `deliver` one at a time, at most
//! `limits.rate_per_chat_per_min` per chat per minute, a `transient` error
//! or trap retried after 1, 2 and 4 s. `deliver` runs the component's own
//! `wasi:http` requests under its grant. A reply's files follow its text,
//! each uploaded by the host with its bytes streamed in ([`upload`]).
//! Streamed replies are edited in place ([`stream`]), and the turn's tool
//! hints and plugin progress ([`progress`]) are one more message edited
//! the same way, paced with the reply.

pub mod config;
pub mod media;
pub mod progress;
pub mod record;
pub mod stream;
pub mod transport;
pub mod upload;
pub mod webhook;

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::Value;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::bus::{InboundMessage, MessageBus, OutboundKind, OutboundMessage, Reply};
use crate::config::ConfigError;
use crate::plugins::channel::{Action, Callback, ChatStatus, Outgoing, Step};
use crate::plugins::manifest::channel::PlatformLimits;
use crate::plugins::ChannelFailure;
use crate::plugins::runtime::{LoadedPlugin, PluginRuntime};
use crate::plugins::secrets::Secrets;
use crate::plugins::{PluginCatalog, PluginError};
use crate::plugins::world::World;

pub use config::{AllowFrom, ChannelConfig, GroupPolicy, Mode};
use record::{ChannelLock, ChannelRecord};
use transport::Transport;

/// A chat channel the gateway runs next to the API; `gateway::channels`
/// builds them from `[channels.<name>]` ([`ComponentChannel`]).
pub trait Channel: Send + 'static {
    /// The bus channel name (`telegram`).
    fn name(&self) -> &str;
    /// Starts the channel: it publishes inbound messages on `ctx.bus`,
    /// answers from `ctx.outbound`, and returns when `ctx.shutdown` fires.
    fn start(self: Box<Self>, ctx: ChannelContext) -> JoinHandle<()>;
}

/// What a started channel gets.
pub struct ChannelContext {
    /// Where it publishes what users say.
    pub bus: Arc<MessageBus>,
    /// The outbound events of its channel name (its route in the router).
    pub outbound: tokio::sync::mpsc::UnboundedReceiver<OutboundMessage>,
    /// Fires at shutdown, after intake stopped.
    pub shutdown: CancellationToken,
    /// Where a channel in webhook mode registers its route.
    pub webhooks: Arc<webhook::Routes>,
}

/// Longest backoff after failed steps.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Why a channel could not be set up or had to stop.
#[derive(Debug, thiserror::Error)]
pub enum ChannelSetupError {
    /// A key of `[channels.<name>]` is wrong.
    #[error("config key `{key}`: {message}")]
    Config { key: String, message: String },
    /// A `${VAR}` is not set.
    #[error(transparent)]
    Env(ConfigError),
    /// The plugin is not loaded or not a channel.
    #[error("channel `{channel}`: {message}")]
    Plugin { channel: String, message: String },
    /// Reading or writing the record or lock failed.
    #[error("{what} ({path}): {source}")]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    /// The record does not parse.
    #[error("channel record {path} is corrupt: {message} (move it away to start the channel afresh)")]
    Corrupt { path: PathBuf, message: String },
    /// Another process polls this channel.
    #[error("already running (pid {pid}; lock {path})")]
    AlreadyRunning { pid: String, path: PathBuf },
}

/// Where a channel stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelStatus {
    Running,
    Stopped(String),
    BackingOff(u32),
}

impl std::fmt::Display for ChannelStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChannelStatus::Running => write!(f, "running"),
            ChannelStatus::Stopped(reason) => write!(f, "stopped: {reason}"),
            ChannelStatus::BackingOff(n) => write!(f, "backing off ({n})"),
        }
    }
}

/// The wait after the `n`th failed step in a row: 1, 2, 4 … 60 s.
pub fn backoff(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.saturating_sub(1).min(6)).min(MAX_BACKOFF)
}

/// The directory of the channel records.
pub fn channels_dir(data_root: &Path) -> PathBuf {
    data_root.join("channels")
}

/// A channel plugin from the catalog, configured, ready to start.
pub struct ComponentChannel {
    config: ChannelConfig,
    plugin: Arc<LoadedPlugin>,
    runtime: Arc<PluginRuntime>,
    dir: PathBuf,
    media_dir: PathBuf,
}

/// Builds a [`ComponentChannel`] for every enabled `[channels.*]`.
pub fn build(
    channels: &std::collections::BTreeMap<String, toml::Value>,
    catalog: &PluginCatalog,
    runtime: &Arc<PluginRuntime>,
    data_root: &Path,
) -> Result<Vec<ComponentChannel>, ChannelSetupError> {
    let mut out = Vec::new();
    for (name, raw) in channels {
        let (enabled, plugin_name) = config::plugin_of(name, raw)?;
        if !enabled {
            continue;
        }
        let bad = |message: String| ChannelSetupError::Plugin { channel: name.clone(), message };
        let plugin = catalog.get(&plugin_name).ok_or_else(|| bad(format!("no plugin `{plugin_name}` is loaded (config key channels.{name}.plugin; install it under the plugins directory)")))?;
        if plugin.world != World::ChannelV0_2 {
            return Err(bad(format!("plugin `{plugin_name}` is not a channel plugin (its world is {})", plugin.world)));
        }
        let spec = plugin.manifest.channel.as_ref().ok_or_else(|| bad(format!("plugin `{plugin_name}` has no `channel` section")))?;
        let secret_names: Vec<&str> = spec.secrets.iter().map(|s| s.name.as_str()).collect();
        let config = ChannelConfig::parse(name, raw, &secret_names)?;
        // A setting named like a secret is most likely the secret under a
        // mistyped key: say so, since its value goes to the component.
        let mut mistyped = std::collections::BTreeMap::new();
        for key in config.settings.keys() {
            if let Some(secret) = config::lookalike(key, &secret_names) {
                tracing::warn!(channel = %name, "channels.{name}.{key} is not a key chitin knows; it looks like the plugin's secret `{secret}` (set {secret} = \"${{...}}\" instead); it is passed to the component as a setting");
                mistyped.entry(secret).or_insert(key.as_str());
            }
        }
        // Every declared secret must be set, but the webhook's verification
        // secret only in webhook mode (checked below): a channel without its
        // token would only fail later with the platform's 401.
        let verify_secret = spec.webhook.as_ref().and_then(|w| w.verify.secret());
        if let Some(missing) = spec.secrets.iter().map(|s| s.name.as_str()).find(|s| Some(*s) != verify_secret && !config.secrets.contains_key(*s)) {
            let hint = mistyped.get(missing).map(|key| format!(" (`{key}` is set: did you mean `{missing}`?)")).unwrap_or_default();
            return Err(ChannelSetupError::Config {
                key: format!("channels.{name}.{missing}"),
                message: format!("plugin `{plugin_name}` needs this secret and it is not set; set it, e.g. {missing} = \"${{{}}}\"{hint}", missing.to_uppercase()),
            });
        }
        if config.mode == Mode::Webhook {
            let key = |k: &str| format!("channels.{name}.{k}");
            // The name is a segment of the route's URL path.
            if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
                return Err(ChannelSetupError::Config { key: key("mode"), message: format!("a webhook channel's name is part of its URL (/webhooks/{name}/...): use letters, digits, `_` and `-` only") });
            }
            let Some(hook) = spec.webhook.as_ref().filter(|_| spec.receive.contains(&crate::plugins::manifest::channel::ReceiveMode::Webhook)) else {
                return Err(ChannelSetupError::Config { key: key("mode"), message: format!("plugin `{plugin_name}` does not receive by webhook (its manifest's channel.receive)") });
            };
            if let Some(secret) = hook.verify.secret()
                && !config.secrets.contains_key(secret)
            {
                return Err(ChannelSetupError::Config {
                    key: key(secret),
                    message: format!("webhook mode verifies every request with this secret; set it, e.g. {secret} = \"${{{}}}\"", secret.to_uppercase()),
                });
            }
        }
        if config.allow_from == AllowFrom::Only(Vec::new()) {
            tracing::warn!(channel = %name, "channels.{name}.allow_from is empty: nobody can talk to this channel (set [\"*\"] or sender ids)");
        }
        out.push(ComponentChannel { config, plugin: plugin.clone(), runtime: runtime.clone(), dir: channels_dir(data_root), media_dir: media::media_dir(data_root, name) });
    }
    Ok(out)
}

impl Channel for ComponentChannel {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn start(self: Box<Self>, ctx: ChannelContext) -> JoinHandle<()> {
        tokio::spawn(async move {
            let name = self.config.name.clone();
            let status = match Poller::open(*self, ctx).await {
                Ok(poller) => poller.run().await,
                Err((mut ctx, e)) => {
                    tracing::error!(channel = %name, "channel stopped: {e}");
                    // Keep reading the route so replies are not queued forever.
                    ctx.outbound.close();
                    ChannelStatus::Stopped(e.to_string())
                }
            };
            tracing::info!(channel = %name, "channel {status}");
        })
    }
}

/// One running channel's poll side.
struct Poller {
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
    async fn open(channel: ComponentChannel, ctx: ChannelContext) -> Result<Poller, (ChannelContext, ChannelSetupError)> {
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

    async fn run(mut self) -> ChannelStatus {
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

/// Per-chat sliding-window rate limit: at most `per_min` sends in any 60 s.
/// Chats whose sends all left the window are forgotten, so the map holds
/// only the chats of the last minute, however many chats a channel makes up.
#[derive(Debug, Default)]
pub struct RateLimit {
    per_min: usize,
    sent: HashMap<String, VecDeque<Instant>>,
    /// The map's size that triggers the next sweep of idle chats.
    sweep_at: usize,
}

/// The fewest chats [`RateLimit`] holds before it sweeps idle ones.
const RATE_SWEEP_MIN: usize = 64;

impl RateLimit {
    pub fn new(per_min: u32) -> Self {
        RateLimit { per_min: per_min.max(1) as usize, sent: HashMap::new(), sweep_at: RATE_SWEEP_MIN }
    }

    /// Chats held (for tests and the bound).
    pub fn chats(&self) -> usize {
        self.sent.len()
    }

    /// How long to wait before sending to `chat` at `now` (zero: go), and
    /// records the send when zero.
    pub fn check(&mut self, chat: &str, now: Instant) -> Duration {
        let window = Duration::from_secs(60);
        if self.sent.len() >= self.sweep_at {
            // Amortised: the next sweep waits until the map doubles again.
            self.sent.retain(|_, sent| sent.back().is_some_and(|t| now.duration_since(*t) < window));
            self.sweep_at = (self.sent.len() * 2).max(RATE_SWEEP_MIN);
        }
        let sent = self.sent.entry(chat.to_string()).or_default();
        while sent.front().is_some_and(|t| now.duration_since(*t) >= window) {
            sent.pop_front();
        }
        if sent.len() >= self.per_min {
            return window - now.duration_since(sent[0]);
        }
        sent.push_back(now);
        Duration::ZERO
    }
}

/// Delivery retry waits: 1, 2, 4 s.
const DELIVER_RETRIES: [Duration; 3] = [Duration::from_secs(1), Duration::from_secs(2), Duration::from_secs(4)];

/// How long "typing" is kept up for a message whose reply never comes.
const TYPING_AT_MOST: Duration = Duration::from_secs(120);

/// How long one typing indicator may take before it is given up.
pub const TYPING_DEADLINE: Duration = Duration::from_secs(5);

/// Typing indicators of one channel in flight at once.
const TYPING_IN_FLIGHT: usize = 4;

/// Most chats "typing" is kept up in at once.
const TYPING_CHATS_MAX: usize = 1024;

/// What the deliver loop sends with.
struct Outbox {
    name: String,
    plugin: Arc<LoadedPlugin>,
    runtime: Arc<PluginRuntime>,
    /// For uploads: the same grant, secrets and `api_base` as the polls.
    transport: Arc<Transport>,
    /// Where a reply's files are read; `None` when it cannot be opened
    /// (each file is then named in a note).
    workspace: Option<crate::workspace::Workspace>,
    /// `max_upload_mb` in bytes.
    max_upload: u64,
    /// Which hints of a running turn the chat sees.
    show: progress::Show,
    /// Chats whose typing indicator is in flight.
    typing_busy: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
}

async fn deliver_loop(
    outbox: Outbox,
    mut outbound: tokio::sync::mpsc::UnboundedReceiver<OutboundMessage>,
    mut typing_requests: tokio::sync::mpsc::UnboundedReceiver<String>,
    limits: PlatformLimits,
) {
    let name = outbox.name.as_str();
    let mut rate = RateLimit::new(limits.rate_per_chat_per_min);
    let refresh = Duration::from_millis(u64::from(limits.typing_refresh_ms));
    let mut streams = stream::Streams::new(Duration::from_millis(u64::from(limits.edit_interval_ms)));
    let mut hints = progress::Hints::default();
    // The inbox links of the reply streams under way (see `StreamLink`),
    // and the earlier processes' messages already taken over (each once).
    let mut links: HashMap<stream::Key, crate::bus::StreamLink> = HashMap::new();
    let mut adopted: HashSet<String> = HashSet::new();
    // Chat → (next refresh, give up at). Empty when the platform has no
    // typing indicator (`typing_refresh_ms = 0`).
    let mut typing: HashMap<String, (Instant, Instant)> = HashMap::new();
    loop {
        let next_refresh = typing.values().map(|(next, _)| *next).min();
        let tick = async {
            match next_refresh {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let next_edit = streams.next_due();
        let edit_tick = async {
            match next_edit {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let message = tokio::select! {
            message = outbound.recv() => match message {
                Some(message) => message,
                None => break,
            },
            Some(chat) = typing_requests.recv() => {
                if !refresh.is_zero() {
                    let now = Instant::now();
                    outbox.show_typing(&chat);
                    // Bounded: one entry per chat of the last two minutes,
                    // and the chats a channel hands in are rate-limited.
                    if typing.len() < TYPING_CHATS_MAX || typing.contains_key(&chat) {
                        typing.insert(chat, (now + refresh, now + TYPING_AT_MOST));
                    }
                }
                continue;
            }
            () = tick => {
                let now = Instant::now();
                typing.retain(|_, (_, until)| *until > now);
                let due: Vec<String> = typing.iter().filter(|(_, (next, _))| *next <= now).map(|(chat, _)| chat.clone()).collect();
                for chat in due {
                    outbox.show_typing(&chat);
                    if let Some((next, _)) = typing.get_mut(&chat) {
                        *next = Instant::now() + refresh;
                    }
                }
                continue;
            }
            () = edit_tick => {
                outbox.show_streams(&mut streams, &links).await;
                continue;
            }
        };
        if matches!(message.kind, OutboundKind::Message(_) | OutboundKind::TurnEnd) {
            typing.remove(&message.chat_id);
        }
        let key: stream::Key = (message.chat_id.clone(), thread_of(&message));
        match message.kind {
            OutboundKind::StreamDelta => {
                let now = Instant::now();
                let new = !streams.has_reply(&key);
                streams.delta(&key, &message.content, now, || rate.check(&message.chat_id, now));
                if new {
                    // A resumed turn's reply goes on in the message its first
                    // attempt streamed into.
                    if let Some(handle) = message.stream.existing().filter(|h| !adopted.contains(*h)) {
                        streams.adopt(&key, handle);
                        adopted.insert(handle.to_string());
                    }
                    links.insert(key.clone(), message.stream.clone());
                }
                outbox.show_streams(&mut streams, &links).await;
                continue;
            }
            OutboundKind::Progress => continue,
            OutboundKind::Tool(ref progress) => {
                if let Some(text) = hints.event(&key, progress, &message.content, outbox.show) {
                    let now = Instant::now();
                    streams.progress(&key, text, now, || rate.check(&message.chat_id, now));
                    outbox.show_streams(&mut streams, &links).await;
                }
                continue;
            }
            OutboundKind::TurnEnd => {
                streams.forget(&key);
                hints.forget(&key);
                links.remove(&key);
                continue;
            }
            OutboundKind::Message(Reply { streamed, .. }) => {
                // Hints after this reply start a new progress message below it.
                streams.end_progress(&key);
                hints.forget(&key);
                links.remove(&key);
                let mut finish = if streamed { streams.finish(&key) } else { stream::Finish::Deliver };
                // A reply re-sent after a restart whose stream an earlier
                // process created: the final edit goes to that message.
                if streamed
                    && finish == stream::Finish::Deliver
                    && let Some(handle) = message.stream.existing().filter(|h| !adopted.contains(*h))
                {
                    adopted.insert(handle.to_string());
                    finish = stream::Finish::Update { handle: Some(handle.to_string()), at: None };
                }
                if let stream::Finish::Update { handle, at } = finish {
                    if let Some(at) = at {
                        tokio::time::sleep_until(at.into()).await;
                    }
                    match outbox.runtime.channel_stream_update(&outbox.plugin, &message.chat_id, key.1.as_deref(), handle.as_deref(), &message.content, true).await {
                        Ok(handle) => {
                            tracing::info!(channel = %name, chat = %message.chat_id, handle = %handle, "reply delivered (streamed)");
                            outbox.send_files(&mut rate, &message).await;
                            message.ack.delivered();
                            continue;
                        }
                        // The reply must not be lost: send it whole.
                        Err(e) => tracing::warn!(channel = %name, chat = %message.chat_id, "final stream-update failed, delivering the reply instead: {e}"),
                    }
                }
            }
            OutboundKind::StreamEnd => continue,
        }
        if message.content.is_empty() && message.media.is_empty() {
            continue;
        }
        // A reply the platform took (or refused for good) is marked
        // delivered; one given up on after the retries stays in the outbox,
        // and the next start sends it again.
        if outbox.deliver_reply(&mut rate, &message).await == Delivery::Settled {
            message.ack.delivered();
        } else if message.ack.is_set() {
            tracing::warn!(channel = %name, chat = %message.chat_id, "reply kept in the outbox: the next start sends it again");
        }
    }
}

/// How a delivery ended, for the outbox's delivered mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Delivery {
    /// The platform took it, or refused it for good (a fatal error: sending
    /// it again would be refused again).
    Settled,
    /// Every retry failed (the platform was unreachable or kept failing).
    GaveUp,
}

/// The thread or topic an outbound event belongs to.
fn thread_of(message: &OutboundMessage) -> Option<String> {
    message.metadata.get(crate::bus::THREAD).and_then(Value::as_str).map(str::to_string)
}

/// Waits until `chat` may be sent to again.
async fn wait_for_rate(name: &str, rate: &mut RateLimit, chat: &str) {
    loop {
        let wait = rate.check(chat, Instant::now());
        if wait.is_zero() {
            return;
        }
        tracing::debug!(channel = %name, chat, "rate limit: waiting {wait:?}");
        tokio::time::sleep(wait).await;
    }
}

impl Outbox {
    /// Shows every stream that is due (coalesced text, one call per chat).
    async fn show_streams(&self, streams: &mut stream::Streams, links: &HashMap<stream::Key, crate::bus::StreamLink>) {
        for (key, lane, handle, text) in streams.due(Instant::now()) {
            let result = self.runtime.channel_stream_update(&self.plugin, &key.0, key.1.as_deref(), handle.as_deref(), &text, false).await;
            if lane == stream::Lane::Reply
                && let Ok(new) = &result
                && handle.as_deref() != Some(new.as_str())
                && let Some(link) = links.get(&key)
            {
                // Recorded before anything else happens to the stream: a
                // crash from here on edits this message, never a second.
                link.started(new);
                crate::crash_point!("streaming", &text);
            }
            if let Err(e) = &result {
                match lane {
                    stream::Lane::Reply => tracing::warn!(channel = %self.name, chat = %key.0, "stream-update failed; the reply will be delivered whole: {e}"),
                    stream::Lane::Progress => tracing::warn!(channel = %self.name, chat = %key.0, "progress message failed; no more hints this turn: {e}"),
                }
            }
            streams.shown(&key, lane, text, result.map_err(|_| ()), Instant::now());
        }
    }

    /// Delivers one reply: the text through `deliver` with retries, then
    /// each file through `upload-request`, opened only right before its
    /// upload (so what is checked is what is sent, however long the text
    /// took); the files that could not be sent are named in one note after.
    async fn deliver_reply(&self, rate: &mut RateLimit, message: &OutboundMessage) -> Delivery {
        let mut outcome = Delivery::Settled;
        if !message.content.trim().is_empty() {
            outcome = self.deliver_text(rate, message, message.content.clone(), message.reply_to.clone()).await;
        }
        // Files go only with their text: a text kept for the next start
        // takes its files along then.
        if outcome == Delivery::Settled {
            self.send_files(rate, message).await;
        }
        outcome
    }

    /// Uploads the message's files one by one; those that fail are named in
    /// one note.
    async fn send_files(&self, rate: &mut RateLimit, message: &OutboundMessage) {
        let thread = thread_of(message);
        let mut notes = Vec::new();
        for path in &message.media {
            let name = upload::shown_name(path);
            let sent = match upload::open(self.workspace.as_ref(), path, self.max_upload) {
                Ok(file) => {
                    wait_for_rate(&self.name, rate, &message.chat_id).await;
                    upload::send(&self.name, &self.plugin, &self.runtime, &self.transport, &message.chat_id, thread.as_deref(), &file).await
                }
                Err(reason) => Err(reason),
            };
            if let Err(reason) = sent {
                tracing::warn!(channel = %self.name, chat = %message.chat_id, file = %name, "file not sent: {reason}");
                notes.push(upload::note(&name, &reason));
            }
        }
        if !notes.is_empty() {
            self.deliver_text(rate, message, notes.join("\n"), None).await;
        }
    }

    /// Sends `text` to the message's chat: the rate limit, then `deliver`
    /// with retries.
    async fn deliver_text(&self, rate: &mut RateLimit, message: &OutboundMessage, text: String, reply_to: Option<String>) -> Delivery {
        let name = self.name.as_str();
        wait_for_rate(name, rate, &message.chat_id).await;
        let outgoing = Outgoing { chat_id: message.chat_id.clone(), thread: thread_of(message), text, reply_to, media: Vec::new() };
        let mut attempt = 0;
        loop {
            match self.runtime.channel_deliver(&self.plugin, &outgoing).await {
                Ok(ids) => {
                    tracing::info!(channel = %name, chat = %outgoing.chat_id, ids = ?ids, "reply delivered");
                    return Delivery::Settled;
                }
                Err(PluginError::Channel { kind: ChannelFailure::Fatal, message, .. }) => {
                    tracing::error!(channel = %name, chat = %outgoing.chat_id, "delivery refused (fatal), reply dropped: {message}");
                    return Delivery::Settled;
                }
                Err(e) if attempt < DELIVER_RETRIES.len() => {
                    tracing::warn!(channel = %name, chat = %outgoing.chat_id, "delivery failed, retrying in {:?}: {e}", DELIVER_RETRIES[attempt]);
                    tokio::time::sleep(DELIVER_RETRIES[attempt]).await;
                    attempt += 1;
                }
                Err(e) => {
                    tracing::error!(channel = %name, chat = %outgoing.chat_id, "delivery failed {} times: {e}", attempt + 1);
                    return Delivery::GaveUp;
                }
            }
        }
    }

    /// One "typing" indicator, off the reply's path: spawned, under its own
    /// [`TYPING_DEADLINE`], at most one per chat and [`TYPING_IN_FLIGHT`]
    /// per channel at once; a failure or a platform that never answers only
    /// costs the indicator, never the reply.
    fn show_typing(&self, chat: &str) {
        {
            let mut busy = self.typing_busy.lock().unwrap_or_else(|p| p.into_inner());
            if busy.len() >= TYPING_IN_FLIGHT || !busy.insert(chat.to_string()) {
                return;
            }
        }
        let (runtime, plugin, name, busy, chat) = (self.runtime.clone(), self.plugin.clone(), self.name.clone(), self.typing_busy.clone(), chat.to_string());
        tokio::spawn(async move {
            match tokio::time::timeout(TYPING_DEADLINE, runtime.channel_set_status(&plugin, &chat, ChatStatus::Typing)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(channel = %name, chat = %chat, "typing indicator failed: {e}"),
                Err(_) => tracing::debug!(channel = %name, chat = %chat, "typing indicator not answered within {TYPING_DEADLINE:?}; given up"),
            }
            busy.lock().unwrap_or_else(|p| p.into_inner()).remove(&chat);
        });
    }
}

/// A line for `chitin status` about channel `name`, read without a gateway:
/// the lock says whether a process runs it, the record its last status.
pub fn status_line(data_root: &Path, name: &str, enabled: bool) -> String {
    if !enabled {
        return "disabled".into();
    }
    let dir = channels_dir(data_root);
    let last = ChannelRecord::load(&dir.join(format!("{name}.json"))).map(|r| r.status).unwrap_or_default();
    match ChannelLock::holder(&dir.join(format!("{name}.lock"))) {
        Some(pid) => format!("{} (pid {pid})", if last.is_empty() { "starting" } else { &last }),
        None if last.is_empty() => "configured, not running".into(),
        None => format!("configured, not running (last: {last})"),
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
    fn the_rate_limit_is_per_chat_over_a_sliding_minute() {
        let mut rate = RateLimit::new(2);
        let t0 = Instant::now();
        assert!(rate.check("a", t0).is_zero());
        assert!(rate.check("a", t0 + Duration::from_secs(1)).is_zero());
        assert_eq!(rate.check("a", t0 + Duration::from_secs(2)), Duration::from_secs(58));
        assert!(rate.check("b", t0 + Duration::from_secs(2)).is_zero(), "another chat has its own bucket");
        assert!(rate.check("a", t0 + Duration::from_secs(60)).is_zero(), "the first send left the window");
    }

    #[test]
    fn made_up_chats_are_forgotten_once_idle() {
        // 1 000 new chats a minute for 100 minutes: unbounded, 100 000 held.
        let mut rate = RateLimit::new(20);
        let t0 = Instant::now();
        let mut most = 0;
        for minute in 0..100u64 {
            for i in 0..1000u64 {
                rate.check(&format!("made-up-{minute}-{i}"), t0 + Duration::from_secs(minute * 60) + Duration::from_millis(i * 50));
                most = most.max(rate.chats());
            }
        }
        assert!(most <= 4 * 1000 + RATE_SWEEP_MIN, "{most} chats held at most");
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
