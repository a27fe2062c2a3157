//! `[channels.<name>]`: what the user says about one channel.
//!
//! The gateway keeps `[channels]` as raw TOML because which keys are secrets
//! depends on the plugin: a key named like one of the manifest's declared
//! secrets (`bot_token`) is a secret, its `${VAR}`s expanded, and it never
//! reaches the component; the host keys (`enabled`, `plugin`, `allow_from`,
//! `group_policy`, `mode`, `public_url`, `api_base`) are the host's; everything else is a free-form
//! setting passed to the component's `start(config)` as JSON. A setting that
//! uses `${VAR}` is refused, since an expanded variable in a setting would be
//! a secret handed to the sandbox.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::ChannelSetupError;
use crate::env::expand_env;

/// Who may talk to the channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AllowFrom {
    /// `["*"]`: anyone.
    Anyone,
    /// These sender ids only (empty: nobody).
    Only(Vec<String>),
}

impl AllowFrom {
    /// Whether `sender` may reach the agent.
    pub fn allows(&self, sender: &str) -> bool {
        match self {
            AllowFrom::Anyone => true,
            AllowFrom::Only(ids) => ids.iter().any(|id| id == sender),
        }
    }
}

/// Which group messages reach the agent (`group_policy`); direct chats
/// always do. Read from the adapter's `trigger` flags, so every platform
/// means the same by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupPolicy {
    /// `"mention"` (default): the bot is @-mentioned, replied to, or given a
    /// command; the rest of a group's chatter never costs a model request.
    #[default]
    Mention,
    /// `"command"`: bot commands only.
    Command,
    /// `"ambient"`: every message of the group.
    Ambient,
    /// `"off"`: no group messages at all.
    Off,
}

impl GroupPolicy {
    /// Whether a group message with `trigger` passes.
    pub fn admits(self, trigger: crate::plugins::channel::Trigger) -> bool {
        use crate::plugins::channel::Trigger;
        match self {
            GroupPolicy::Mention => trigger.intersects(Trigger::MENTION | Trigger::REPLY_TO_BOT | Trigger::COMMAND),
            GroupPolicy::Command => trigger.contains(Trigger::COMMAND),
            GroupPolicy::Ambient => true,
            GroupPolicy::Off => false,
        }
    }
}

/// How the platform's events reach the host (`mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// `"poll"` (default): the host runs the component's long poll.
    #[default]
    Poll,
    /// `"webhook"`: the platform calls the gateway at `public_url` +
    /// `/webhooks/<name><route>`.
    Webhook,
}

/// One `[channels.<name>]` table, resolved against the plugin's declared
/// secrets.
#[derive(Clone)]
pub struct ChannelConfig {
    /// The channel's name (the table key, and the bus channel).
    pub name: String,
    /// `enabled` (default false).
    pub enabled: bool,
    /// `plugin` (default: the channel name).
    pub plugin: String,
    /// `allow_from` (default: nobody).
    pub allow_from: AllowFrom,
    /// `group_policy` (default `"mention"`).
    pub group_policy: GroupPolicy,
    /// `mode` (default `"poll"`).
    pub mode: Mode,
    /// `public_url` (webhook mode): the gateway's address as the platform
    /// reaches it, e.g. `https://bot.example.com` (a reverse proxy or tunnel
    /// in front of `[gateway] listen`); no trailing `/`.
    pub public_url: Option<String>,
    /// `max_media_mb` (default 20): the largest inbound file downloaded.
    pub max_media_mb: u64,
    /// `max_upload_mb` (default 50): the largest workspace file sent.
    pub max_upload_mb: u64,
    /// `send_progress` (default true, as nanobot): show the plugins'
    /// progress texts in the chat while a turn runs.
    pub send_progress: bool,
    /// `send_tool_hints` (default true, as nanobot): show each tool call
    /// (`↳ read_file(…)`) in the chat while a turn runs.
    pub send_tool_hints: bool,
    /// `api_base`: where the platform's API is served instead of its public
    /// host (a local Bot API server, a mock in tests).
    pub api_base: Option<String>,
    /// `max_messages_per_min` (default [`DEFAULT_MAX_MESSAGES_PER_MIN`]):
    /// the most inbound messages the channel hands to the agent in any
    /// minute; past it, messages are dropped with one warning per minute.
    pub max_messages_per_min: u32,
    /// `max_concurrent_requests` (default [`DEFAULT_MAX_CONCURRENT_REQUESTS`]):
    /// the most `http` actions of the channel the host runs at once; past
    /// it, an action is dropped with a warning (so a component cannot hold
    /// the host's descriptors).
    pub max_concurrent_requests: u32,
    /// Secret values by declared name, `${VAR}` expanded.
    pub secrets: BTreeMap<String, String>,
    /// The rest, for the component's `start(config)`.
    pub settings: Map<String, Value>,
}

/// Secret values are never printed.
impl std::fmt::Debug for ChannelConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelConfig")
            .field("name", &self.name)
            .field("enabled", &self.enabled)
            .field("plugin", &self.plugin)
            .field("allow_from", &self.allow_from)
            .field("mode", &self.mode)
            .field("max_media_mb", &self.max_media_mb)
            .field("max_upload_mb", &self.max_upload_mb)
            .field("send_progress", &self.send_progress)
            .field("send_tool_hints", &self.send_tool_hints)
            .field("public_url", &self.public_url)
            .field("api_base", &self.api_base)
            .field("max_messages_per_min", &self.max_messages_per_min)
            .field("max_concurrent_requests", &self.max_concurrent_requests)
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .field("settings", &self.settings)
            .finish()
    }
}

/// `max_messages_per_min` when the config does not say: a busy group
/// chat's pace, far above what one person types.
pub const DEFAULT_MAX_MESSAGES_PER_MIN: u32 = 60;
/// `max_concurrent_requests` when the config does not say.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: u32 = 8;
/// Largest `max_messages_per_min` / `max_concurrent_requests` accepted.
const MAX_MESSAGES_PER_MIN: i64 = 100_000;
const MAX_CONCURRENT_REQUESTS: i64 = 256;

const HOST_KEYS: [&str; 13] = [
    "enabled",
    "plugin",
    "allow_from",
    "group_policy",
    "mode",
    "api_base",
    "public_url",
    "max_media_mb",
    "max_upload_mb",
    "send_progress",
    "send_tool_hints",
    "max_messages_per_min",
    "max_concurrent_requests",
];

fn table<'a>(name: &str, raw: &'a toml::Value) -> Result<&'a toml::Table, ChannelSetupError> {
    raw.as_table().ok_or_else(|| ChannelSetupError::Config { key: format!("channels.{name}"), message: "must be a table".into() })
}

/// `enabled` and `plugin` of a table, read before the plugin is known.
pub fn plugin_of(name: &str, raw: &toml::Value) -> Result<(bool, String), ChannelSetupError> {
    let t = table(name, raw)?;
    let bad = |key: &str, what: &str| ChannelSetupError::Config { key: format!("channels.{name}.{key}"), message: format!("must be {what}") };
    let enabled = match t.get("enabled") {
        None => false,
        Some(v) => v.as_bool().ok_or_else(|| bad("enabled", "true or false"))?,
    };
    let plugin = match t.get("plugin") {
        None => name.to_string(),
        Some(v) => v.as_str().ok_or_else(|| bad("plugin", "a plugin name"))?.to_string(),
    };
    Ok((enabled, plugin))
}

impl ChannelConfig {
    /// Reads `[channels.<name>]`; `secret_names` are the secrets the plugin
    /// declares (those keys are secrets).
    pub fn parse(name: &str, raw: &toml::Value, secret_names: &[&str]) -> Result<ChannelConfig, ChannelSetupError> {
        let is_secret = |k: &str| secret_names.contains(&k);
        let (enabled, plugin) = plugin_of(name, raw)?;
        let t = table(name, raw)?;
        let key = |k: &str| format!("channels.{name}.{k}");
        let bad = |k: &str, message: String| ChannelSetupError::Config { key: key(k), message };
        let allow_from = match t.get("allow_from") {
            None => AllowFrom::Only(Vec::new()),
            Some(toml::Value::Array(items)) => {
                let ids: Vec<String> = items
                    .iter()
                    .map(|v| match v {
                        toml::Value::String(s) => Ok(s.clone()),
                        toml::Value::Integer(i) => Ok(i.to_string()),
                        _ => Err(bad("allow_from", "must list sender ids (strings) or \"*\"".into())),
                    })
                    .collect::<Result<_, _>>()?;
                if ids.iter().any(|id| id == "*") { AllowFrom::Anyone } else { AllowFrom::Only(ids) }
            }
            Some(_) => return Err(bad("allow_from", "must be a list: [\"*\"] or [\"123\", ...]".into())),
        };
        let group_policy = match t.get("group_policy").map(|v| v.as_str()) {
            None | Some(Some("mention")) => GroupPolicy::Mention,
            Some(Some("command")) => GroupPolicy::Command,
            Some(Some("ambient")) => GroupPolicy::Ambient,
            Some(Some("off")) => GroupPolicy::Off,
            Some(other) => return Err(bad("group_policy", format!("must be \"mention\", \"command\", \"ambient\" or \"off\", not {other:?}"))),
        };
        let mode = match t.get("mode").map(|v| v.as_str()) {
            None | Some(Some("poll")) => Mode::Poll,
            Some(Some("webhook")) => Mode::Webhook,
            Some(other) => return Err(bad("mode", format!("must be \"poll\" or \"webhook\", not {other:?}"))),
        };
        let http_url = |k: &str| -> Result<Option<String>, ChannelSetupError> {
            let Some(v) = t.get(k) else { return Ok(None) };
            let raw = v.as_str().ok_or_else(|| bad(k, "must be a URL".into()))?;
            let text = expand_env(raw, &key(k)).map_err(|e| ChannelSetupError::Env(e.into()))?;
            let url = reqwest::Url::parse(&text).map_err(|e| bad(k, format!("`{text}` is not a URL: {e}")))?;
            if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
                return Err(bad(k, format!("`{text}` must be an http or https URL")));
            }
            Ok(Some(text.trim_end_matches('/').to_string()))
        };
        let public_url = http_url("public_url")?;
        if public_url.as_ref().is_some_and(|u| u.contains(['?', '#'])) {
            return Err(bad("public_url", "must not carry a query or fragment (the webhook path is appended to it)".into()));
        }
        if mode == Mode::Webhook && public_url.is_none() {
            return Err(bad("public_url", "mode = \"webhook\" needs the gateway's public address, e.g. public_url = \"https://bot.example.com\" (the platform calls public_url + /webhooks/<channel><route>)".into()));
        }
        let api_base = http_url("api_base")?;
        let max_media_mb = match t.get("max_media_mb") {
            None => super::media::DEFAULT_MAX_MEDIA_MB,
            Some(toml::Value::Integer(n)) if (1..=super::media::MAX_MEDIA_MB as i64).contains(n) => *n as u64,
            Some(other) => return Err(bad("max_media_mb", format!("must be a whole number of megabytes, 1 to {}, not {other}", super::media::MAX_MEDIA_MB))),
        };
        let max_upload_mb = match t.get("max_upload_mb") {
            None => super::upload::DEFAULT_MAX_UPLOAD_MB,
            Some(toml::Value::Integer(n)) if (1..=super::upload::MAX_UPLOAD_MB as i64).contains(n) => *n as u64,
            Some(other) => return Err(bad("max_upload_mb", format!("must be a whole number of megabytes, 1 to {}, not {other}", super::upload::MAX_UPLOAD_MB))),
        };
        let flag = |k: &str| match t.get(k) {
            None => Ok(true),
            Some(toml::Value::Boolean(b)) => Ok(*b),
            Some(other) => Err(bad(k, format!("must be true or false, not {other}"))),
        };
        let (send_progress, send_tool_hints) = (flag("send_progress")?, flag("send_tool_hints")?);
        let count = |k: &str, default: u32, max: i64| match t.get(k) {
            None => Ok(default),
            Some(toml::Value::Integer(n)) if (1..=max).contains(n) => Ok(*n as u32),
            Some(other) => Err(bad(k, format!("must be a whole number, 1 to {max}, not {other}"))),
        };
        let max_messages_per_min = count("max_messages_per_min", DEFAULT_MAX_MESSAGES_PER_MIN, MAX_MESSAGES_PER_MIN)?;
        let max_concurrent_requests = count("max_concurrent_requests", DEFAULT_MAX_CONCURRENT_REQUESTS, MAX_CONCURRENT_REQUESTS)?;
        let mut secrets = BTreeMap::new();
        let mut settings = Map::new();
        for (k, v) in t {
            if HOST_KEYS.contains(&k.as_str()) {
                continue;
            }
            if is_secret(k) {
                let raw = v.as_str().ok_or_else(|| bad(k, "a secret must be a string, e.g. \"${TELEGRAM_BOT_TOKEN}\"".into()))?;
                let value = expand_env(raw, &key(k)).map_err(|e| ChannelSetupError::Env(e.into()))?;
                if value.is_empty() {
                    return Err(bad(k, "the secret is empty".into()));
                }
                secrets.insert(k.clone(), value);
            } else {
                let json = serde_json::to_value(v).map_err(|e| bad(k, e.to_string()))?;
                if json.to_string().contains("${") {
                    let hint = lookalike(k, secret_names).map(|s| format!("; did you mean `{s}`, the secret the plugin declares?")).unwrap_or_default();
                    return Err(bad(k, format!("uses ${{VAR}}, but is not a secret the plugin declares (only declared secrets are expanded; settings are visible to the component){hint}")));
                }
                settings.insert(k.clone(), json);
            }
        }
        Ok(ChannelConfig {
            name: name.to_string(),
            enabled,
            plugin,
            allow_from,
            group_policy,
            mode,
            public_url,
            max_media_mb,
            max_upload_mb,
            send_progress,
            send_tool_hints,
            api_base,
            max_messages_per_min,
            max_concurrent_requests,
            secrets,
            settings,
        })
    }

    /// The JSON for `start(config)`: the settings, never a secret value,
    /// plus `mode` (`"poll"` or `"webhook"`) and, in webhook mode,
    /// `webhook_url` (the public URL of the channel's route, `webhook_path`
    /// appended to `public_url`), which the component registers with the
    /// platform (Telegram's `setWebhook`).
    pub fn start_json(&self, webhook_path: Option<&str>) -> String {
        let mut settings = self.settings.clone();
        let mode = match self.mode {
            Mode::Poll => "poll",
            Mode::Webhook => "webhook",
        };
        settings.insert("mode".into(), Value::from(mode));
        if let (Mode::Webhook, Some(base), Some(path)) = (self.mode, &self.public_url, webhook_path) {
            settings.insert("webhook_url".into(), Value::from(format!("{base}{path}")));
        }
        Value::Object(settings).to_string()
    }
}

/// The declared secret that the setting key `key` looks like a mistyped
/// name of (`token` for `bot_token`, `bot_tokn`, `BOT_TOKEN`), if any: a
/// secret written under the wrong key would be handed to the component as a
/// setting, and the channel would fail later with the platform's 401.
pub fn lookalike<'a>(key: &str, secret_names: &[&'a str]) -> Option<&'a str> {
    let norm = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let key = norm(key);
    let words = |s: &str| s.split('_').filter(|w| w.len() >= 3).map(str::to_string).collect::<Vec<_>>();
    secret_names.iter().copied().find(|secret| {
        let secret = norm(secret);
        key == secret
            || key.replace('_', "") == secret.replace('_', "")
            || strsim::levenshtein(&key, &secret) <= 2
            || (key.len() >= 3 && (secret.ends_with(&key) || secret.starts_with(&key)))
            || words(&key).iter().any(|w| words(&secret).contains(w) && matches!(w.as_str(), "token" | "secret" | "key" | "password" | "pass"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ChannelConfig, ChannelSetupError> {
        let value: toml::Value = toml::from_str(text).unwrap();
        ChannelConfig::parse("tg", &value, &["bot_token"])
    }

    #[test]
    fn host_keys_secrets_and_settings_are_told_apart() {
        // SAFETY: a variable only this test uses.
        unsafe { std::env::set_var("CHITIN_TEST_CHAN_TOKEN_Q7", "s3cr3t-v4lue") };
        let c = parse("enabled = true\nallow_from = [\"*\"]\nbot_token = \"${CHITIN_TEST_CHAN_TOKEN_Q7}\"\ngreeting = \"hi\"\napi_base = \"http://127.0.0.1:9/\"\n").unwrap();
        assert!(c.enabled);
        assert_eq!(c.plugin, "tg");
        assert_eq!(c.allow_from, AllowFrom::Anyone);
        assert_eq!(c.api_base.as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(c.secrets["bot_token"], "s3cr3t-v4lue");
        assert_eq!(c.start_json(None), r#"{"greeting":"hi","mode":"poll"}"#);
        assert!(!format!("{c:?}").contains("s3cr3t"), "Debug never shows a secret");
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse("bot_token = \"${CHITIN_TEST_UNSET_CHAN_Z9}\"").unwrap_err().to_string();
        assert!(e.contains("channels.tg.bot_token") && e.contains("CHITIN_TEST_UNSET_CHAN_Z9"), "{e}");
        let e = parse("mode = \"webhook\"").unwrap_err().to_string();
        assert!(e.contains("channels.tg.public_url") && e.contains("webhook"), "{e}");
        let e = parse("mode = \"push\"").unwrap_err().to_string();
        assert!(e.contains("channels.tg.mode") && e.contains("push"), "{e}");
        let e = parse("mode = \"webhook\"\npublic_url = \"ftp://x\"").unwrap_err().to_string();
        assert!(e.contains("channels.tg.public_url"), "{e}");
        let e = parse("other = \"${HOME}\"").unwrap_err().to_string();
        assert!(e.contains("channels.tg.other"), "{e}");
        let e = parse("max_media_mb = 0").unwrap_err().to_string();
        assert!(e.contains("channels.tg.max_media_mb"), "{e}");
        assert_eq!(parse("max_media_mb = 5").unwrap().max_media_mb, 5);
        assert_eq!(parse("").unwrap().max_media_mb, 20);
        let e = parse("max_upload_mb = 4096").unwrap_err().to_string();
        assert!(e.contains("channels.tg.max_upload_mb") && e.contains("1 to 2048"), "{e}");
        assert_eq!(parse("max_upload_mb = 1").unwrap().max_upload_mb, 1);
        assert_eq!(parse("").unwrap().max_upload_mb, 50);
        let defaults = parse("").unwrap();
        assert!(defaults.send_progress && defaults.send_tool_hints, "on by default, as nanobot");
        let off = parse("send_progress = false\nsend_tool_hints = false").unwrap();
        assert!(!off.send_progress && !off.send_tool_hints);
        assert!(!off.settings.contains_key("send_progress"), "host keys are not the component's settings");
        let e = parse("send_tool_hints = \"yes\"").unwrap_err().to_string();
        assert!(e.contains("channels.tg.send_tool_hints") && e.contains("true or false"), "{e}");
        let e = parse("allow_from = \"*\"").unwrap_err().to_string();
        assert!(e.contains("channels.tg.allow_from"), "{e}");
    }

    #[test]
    fn webhook_mode_gives_the_component_its_public_url() {
        let c = parse("mode = \"webhook\"\npublic_url = \"https://bot.example.com/\"\nbot_username = \"b\"").unwrap();
        assert_eq!(c.mode, Mode::Webhook);
        assert_eq!(c.public_url.as_deref(), Some("https://bot.example.com"));
        let start: Value = serde_json::from_str(&c.start_json(Some("/webhooks/tg/telegram"))).unwrap();
        assert_eq!(start["mode"], "webhook");
        assert_eq!(start["webhook_url"], "https://bot.example.com/webhooks/tg/telegram");
        assert_eq!(start["bot_username"], "b");
        assert!(start.get("public_url").is_none(), "a host key");
    }

    #[test]
    fn allow_from_lists_ids_and_defaults_to_nobody() {
        let c = parse("allow_from = [\"123\", 456]").unwrap();
        assert!(c.allow_from.allows("123") && c.allow_from.allows("456") && !c.allow_from.allows("789"));
        assert!(!parse("").unwrap().allow_from.allows("123"), "no allow_from: nobody");
    }

    #[test]
    fn group_policy_is_read_and_a_bad_one_named() {
        let read = |text: &str| ChannelConfig::parse("tg", &toml::from_str::<toml::Value>(text).unwrap(), &[]);
        assert_eq!(read("enabled = true").unwrap().group_policy, GroupPolicy::Mention);
        assert_eq!(read("group_policy = \"ambient\"").unwrap().group_policy, GroupPolicy::Ambient);
        assert!(!read("group_policy = \"off\"").unwrap().settings.contains_key("group_policy"), "a host key, not a setting");
        let err = read("group_policy = \"everyone\"").unwrap_err().to_string();
        assert!(err.contains("channels.tg.group_policy") && err.contains("everyone"), "{err}");
    }

    #[test]
    fn settings_named_like_a_secret_are_recognised() {
        let secrets = ["bot_token", "webhook_secret"];
        assert_eq!(lookalike("token", &secrets), Some("bot_token"));
        assert_eq!(lookalike("bot_tokn", &secrets), Some("bot_token"));
        assert_eq!(lookalike("BOT-TOKEN", &secrets), Some("bot_token"));
        assert_eq!(lookalike("bottoken", &secrets), Some("bot_token"));
        assert_eq!(lookalike("secret", &secrets), Some("webhook_secret"));
        assert_eq!(lookalike("api_token", &secrets), Some("bot_token"));
        assert_eq!(lookalike("bot_username", &secrets), None);
        assert_eq!(lookalike("greeting", &secrets), None);
        assert_eq!(lookalike("mode", &secrets), None);
        let e = parse("token = \"${HOME}\"").unwrap_err().to_string();
        assert!(e.contains("channels.tg.token") && e.contains("did you mean `bot_token`"), "{e}");
    }

    #[test]
    fn budgets_have_defaults_and_bounds() {
        let c = parse("").unwrap();
        assert_eq!((c.max_messages_per_min, c.max_concurrent_requests), (DEFAULT_MAX_MESSAGES_PER_MIN, DEFAULT_MAX_CONCURRENT_REQUESTS));
        let c = parse("max_messages_per_min = 5\nmax_concurrent_requests = 2").unwrap();
        assert_eq!((c.max_messages_per_min, c.max_concurrent_requests), (5, 2));
        assert!(!c.settings.contains_key("max_messages_per_min"), "a host key");
        let e = parse("max_concurrent_requests = 0").unwrap_err().to_string();
        assert!(e.contains("channels.tg.max_concurrent_requests") && e.contains("1 to 256"), "{e}");
    }
}
