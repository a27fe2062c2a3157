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
//! # Layout
//! - this file: setting a channel up from `[channels.<name>]` ([`build`]),
//!   the errors, the [`Channel`] trait the gateway starts, `chitin status`;
//! - `poll`: the poll side, its two commits and the crash guarantee,
//!   `accept` (dedup, allow-lists, group policy) and the intake budget;
//! - `deliver`: the outbound side, the outbox's `deliver_loop` with its
//!   per-chat rate limit, typing, streamed edits and file uploads.

pub mod config;
mod deliver;
pub mod media;
mod poll;
pub mod progress;
pub mod record;
pub mod stream;
pub mod transport;
pub mod upload;
pub mod webhook;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::bus::{MessageBus, OutboundMessage};
use crate::config::ConfigError;
use crate::plugins::runtime::{LoadedPlugin, PluginRuntime};
use crate::plugins::PluginCatalog;
use crate::plugins::world::World;

pub use config::{AllowFrom, ChannelConfig, GroupPolicy, Mode};
pub use deliver::{RateLimit, TYPING_DEADLINE};
pub use poll::{accept, backoff, Intake, MAX_BACKOFF};
use poll::Poller;
use record::{ChannelLock, ChannelRecord};

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

/// Why a channel could not be set up or had to stop.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
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
    /// The channel's task runs.
    Running,
    /// The task ended, for this reason.
    Stopped(String),
    /// Waiting before a retry, after this many failures in a row.
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
