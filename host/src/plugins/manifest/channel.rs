//! The manifest's `channel` section: how a channel plugin receives, which
//! secrets it names and where they may go, how its webhook is verified, and
//! the platform's limits.
//!
//! All of it is read before the component runs, because the host acts on it
//! before the component sees a byte: it opens the long poll or the route,
//! checks a webhook's signature, and substitutes `{{secret:NAME}}` only where
//! a secret is declared to go. Every rule names its field
//! (`channel.secrets[0].audience`), like the rest of the manifest.

use serde::{Deserialize, Serialize};

use super::{Capabilities, ManifestError};
use crate::plugins::grants::HostPattern;

/// The `channel` section of a channel plugin's manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelSpec {
    /// How the platform's events reach the host; at least one.
    pub receive: Vec<ReceiveMode>,
    /// Secrets the component refers to as `{{secret:NAME}}`.
    #[serde(default)]
    pub secrets: Vec<SecretSpec>,
    /// The webhook route and its verification; required with `webhook`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhook: Option<WebhookSpec>,
    /// The platform's limits the host enforces for the channel.
    #[serde(default)]
    pub limits: PlatformLimits,
    /// Long-poll timing; only with `poll` (defaults apply when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll: Option<PollSpec>,
}

/// A way events reach the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReceiveMode {
    /// The host runs the component's `poll-request` in a loop.
    Poll,
    /// The platform calls the host's listener on `webhook.route`.
    Webhook,
    /// The component opens WebSockets the host holds.
    Socket,
}

/// A secret and where its value may be substituted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretSpec {
    /// `[a-z][a-z0-9_]*`, at most 64 chars: the NAME of `{{secret:NAME}}`
    /// and the key in the channel's config.
    pub name: String,
    /// The only host (`host` or `host:port`, one of `capabilities.network`)
    /// whose requests get the value; required when `inject` is not empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audience: Option<String>,
    /// The parts of a request the placeholder is replaced in.
    #[serde(default)]
    pub inject: Vec<Injection>,
}

/// The one place of an outgoing request (or socket frame) a secret may be
/// written into. Named precisely so a plugin cannot aim a placeholder at a
/// part the platform stores and shows to people (a message text, a query
/// parameter the plugin chose): anywhere else it goes out as written.
///
/// In manifest JSON: `"path"`, `{"header": NAME}`, `{"query": NAME}`,
/// `{"field": NAME}`, `"frame"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Injection {
    /// Inside a path segment of the URL (Telegram's `/bot<token>/getMe`).
    Path,
    /// The value of the named header (matched without regard to case).
    Header(String),
    /// The value of the named query parameter.
    Query(String),
    /// The value of the named field of the request body: a top-level
    /// member of a JSON object, a pair of an
    /// `application/x-www-form-urlencoded` body, or a multipart text field.
    /// Only in requests the host runs for a channel (`wasi:http` bodies
    /// stream through and are never rewritten).
    Field(String),
    /// A socket text frame (Discord's Identify); needs receive mode `socket`.
    Frame,
}

/// The forms [`Injection`] is written in, for error messages.
pub const INJECTION_FORMS: &str = r#""path", {"header": NAME}, {"query": NAME}, {"field": NAME} or "frame""#;

impl Injection {
    /// Reads one place from its manifest JSON; an old catch-all form
    /// (`"url"`, `"header"`, `"body"`) is refused naming its precise ones.
    pub fn from_json(value: &serde_json::Value) -> Result<Injection, String> {
        use serde_json::Value;
        let retired = |old: &str, new: &str| format!("`\"{old}\"` is no longer an injection place: name the place precisely, {new}");
        match value {
            Value::String(s) => match s.as_str() {
                "path" => Ok(Injection::Path),
                "frame" => Ok(Injection::Frame),
                "url" => Err(retired("url", r#""path" (inside a path segment) or {"query": NAME} (one query parameter's value)"#)),
                "header" => Err(retired("header", r#"{"header": NAME} (that header's value only)"#)),
                "body" => Err(retired("body", r#"{"field": NAME} (one field of a JSON, form or multipart body)"#)),
                other => Err(format!("unknown injection place `{other}`; expected {INJECTION_FORMS}")),
            },
            Value::Object(map) if map.len() == 1 => {
                let (kind, name) = map.iter().next().expect("one entry");
                let Some(name) = name.as_str() else {
                    return Err(format!("`{kind}` must name a {kind} as a string, e.g. {{\"{kind}\": \"x-api-key\"}}"));
                };
                match kind.as_str() {
                    "header" => Ok(Injection::Header(name.to_string())),
                    "query" => Ok(Injection::Query(name.to_string())),
                    "field" => Ok(Injection::Field(name.to_string())),
                    other => Err(format!("unknown injection place `{other}`; expected {INJECTION_FORMS}")),
                }
            }
            _ => Err(format!("an injection place is one of {INJECTION_FORMS}")),
        }
    }

    /// The place as manifest JSON.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Injection::Path => json!("path"),
            Injection::Header(name) => json!({ "header": name }),
            Injection::Query(name) => json!({ "query": name }),
            Injection::Field(name) => json!({ "field": name }),
            Injection::Frame => json!("frame"),
        }
    }

    /// The named part (header, query parameter, field), if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            Injection::Header(n) | Injection::Query(n) | Injection::Field(n) => Some(n),
            Injection::Path | Injection::Frame => None,
        }
    }
}

/// `path`, `header x-api-key`, `query key`, `field secret_token`, `frame`:
/// how reviews, `plugin inspect` and `chitin.lock` name a place.
impl std::fmt::Display for Injection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Injection::Path => f.write_str("path"),
            Injection::Header(n) => write!(f, "header {n}"),
            Injection::Query(n) => write!(f, "query {n}"),
            Injection::Field(n) => write!(f, "field {n}"),
            Injection::Frame => f.write_str("frame"),
        }
    }
}

impl std::str::FromStr for Injection {
    type Err = String;

    /// The [`Display`](std::fmt::Display) form back.
    fn from_str(text: &str) -> Result<Injection, String> {
        match text.split_once(' ') {
            None if text == "path" => Ok(Injection::Path),
            None if text == "frame" => Ok(Injection::Frame),
            Some(("header", n)) => Ok(Injection::Header(n.to_string())),
            Some(("query", n)) => Ok(Injection::Query(n.to_string())),
            Some(("field", n)) => Ok(Injection::Field(n.to_string())),
            _ => Err(format!("`{text}` is not an injection place")),
        }
    }
}

impl Serialize for Injection {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_json().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Injection {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Injection, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Injection::from_json(&value).map_err(serde::de::Error::custom)
    }
}

/// Longest header, query parameter or field name a secret is injected in.
const MAX_PLACE_NAME: usize = 64;

/// Checks the name an injection place carries: a header name is an HTTP
/// token; a query parameter or field name is `[A-Za-z0-9_.\-\[\]]`, so it
/// reads unambiguously in a review and in `chitin.lock`.
fn check_place_name(field: &str, place: &Injection) -> Result<(), ManifestError> {
    match place {
        Injection::Header(name) => check_header_name(field, name),
        Injection::Query(name) | Injection::Field(name) => {
            let ok = |c: char| c.is_ascii_alphanumeric() || "_.-[]".contains(c);
            if name.is_empty() || name.len() > MAX_PLACE_NAME || !name.chars().all(ok) {
                return Err(err(field, format!("`{name}` must be 1 to {MAX_PLACE_NAME} characters of A-Z a-z 0-9 _ . - [ ]")));
            }
            Ok(())
        }
        Injection::Path | Injection::Frame => Ok(()),
    }
}

/// The webhook route and how the host verifies a request before the
/// component sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSpec {
    /// Path on the host's listener, e.g. `/telegram`: `/` then
    /// `[a-z0-9_-]` segments, at most 64 chars.
    pub route: String,
    /// The verification recipe.
    pub verify: Verify,
}

/// A webhook verification recipe. A request that fails it gets 401 and
/// never reaches the component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Verify {
    /// `header` must equal the secret (Telegram's
    /// `X-Telegram-Bot-Api-Secret-Token`).
    HeaderSecret {
        /// The header carrying the secret.
        header: String,
        /// A declared secret's name.
        secret: String,
    },
    /// `header` is `signature_prefix` + hex HMAC-SHA256 of `basestring`
    /// (with `{timestamp}` and `{body}` filled in) keyed by the secret, and
    /// `timestamp_header` is within `window_secs` of now (Slack's
    /// `v0:{timestamp}:{body}`, 300 s).
    ///
    /// `header-secret` has no timestamp by design (Telegram's), and none
    /// could help: whoever replays the request holds the secret itself. Its
    /// replays are caught by the channel's dedup of event ids.
    HmacSha256 {
        /// The header carrying the signature.
        header: String,
        /// The header carrying the Unix timestamp.
        timestamp_header: String,
        /// What is signed; must contain `{timestamp}` and `{body}`.
        basestring: String,
        /// Largest age (either way) of the timestamp, 1 to 3600 s; 300 when
        /// left out (Slack's and Discord's documented window).
        #[serde(default = "default_window_secs")]
        window_secs: u32,
        /// A declared secret's name: the HMAC key.
        secret: String,
        /// Text before the hex signature, e.g. `v0=`.
        #[serde(default)]
        signature_prefix: String,
    },
    /// `header` is the hex Ed25519 signature of `basestring` by
    /// `public_key` (Discord's `X-Signature-Ed25519` over `{timestamp}{body}`),
    /// and `timestamp_header` (Unix seconds) is within `window_secs` of now.
    Ed25519 {
        /// The header carrying the signature.
        header: String,
        /// The header carrying the Unix timestamp.
        timestamp_header: String,
        /// What is signed; must contain `{timestamp}` and `{body}` (an
        /// unsigned timestamp would make the window worthless).
        basestring: String,
        /// Largest age (either way) of the timestamp, 1 to 3600 s; 300 when
        /// left out.
        #[serde(default = "default_window_secs")]
        window_secs: u32,
        /// The application's public key, 64 hex digits (not a secret).
        public_key: String,
    },
}

/// The platform's limits, enforced by the host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PlatformLimits {
    /// Longest message text the platform takes, in characters (1 to 65536);
    /// the adapter splits, the host checks.
    pub max_text: u32,
    /// Least time between two `stream-update` calls for one reply (100 to
    /// 60000 ms).
    pub edit_interval_ms: u32,
    /// How often `set-status(typing)` is re-sent while a reply is pending;
    /// 0 = the platform has no typing indicator, else 500 to 60000 ms.
    pub typing_refresh_ms: u32,
    /// Messages per chat per minute the host sends at most (1 to 600).
    pub rate_per_chat_per_min: u32,
}

impl Default for PlatformLimits {
    fn default() -> Self {
        PlatformLimits { max_text: 4096, edit_interval_ms: 1000, typing_refresh_ms: 0, rate_per_chat_per_min: 20 }
    }
}

/// Long-poll timing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PollSpec {
    /// Pause between the end of one poll and the next (0 to 3600000 ms);
    /// a `poll-after` action overrides it for one round.
    pub interval_ms: u32,
    /// How long the server holds a long poll (1 to 120 s); the host waits
    /// this plus a margin before it calls the poll stalled.
    pub timeout_secs: u32,
}

impl Default for PollSpec {
    fn default() -> Self {
        PollSpec { interval_ms: 0, timeout_secs: 30 }
    }
}

/// Longest secret name.
const MAX_SECRET_NAME: usize = 64;
/// Longest webhook route.
const MAX_ROUTE: usize = 64;
/// Longest header name in a verification recipe.
const MAX_HEADER_NAME: usize = 64;

fn err(field: impl Into<String>, message: impl Into<String>) -> ManifestError {
    ManifestError::new(field, message)
}

/// Checks that `value` is within `min..=max`.
fn in_range(field: &str, value: u32, min: u32, max: u32) -> Result<(), ManifestError> {
    if value < min || value > max {
        return Err(err(field, format!("{value} is out of range ({min} to {max})")));
    }
    Ok(())
}

fn check_header_name(field: &str, name: &str) -> Result<(), ManifestError> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || name.len() > MAX_HEADER_NAME || !name.chars().all(token) {
        return Err(err(field, format!("`{name}` is not an HTTP header name (1 to {MAX_HEADER_NAME} token characters)")));
    }
    Ok(())
}

impl ChannelSpec {
    /// Checks every rule of the `channel` section (see `wit/README.md`);
    /// `capabilities` is the manifest's, since a secret's audience must be a
    /// host the plugin asks to reach.
    pub fn validate(&self, capabilities: &Capabilities) -> Result<(), ManifestError> {
        if self.receive.is_empty() {
            return Err(err("channel.receive", "a channel must receive somehow: poll, webhook or socket"));
        }
        for (i, mode) in self.receive.iter().enumerate() {
            if self.receive[..i].contains(mode) {
                return Err(err(format!("channel.receive[{i}]"), format!("duplicate receive mode `{mode:?}`")));
            }
        }
        let has = |mode| self.receive.contains(&mode);
        let frame = (!has(ReceiveMode::Socket)).then_some("`frame` needs receive mode `socket`");
        validate_secrets("channel.secrets", &self.secrets, capabilities, frame)?;
        match (&self.webhook, has(ReceiveMode::Webhook)) {
            (None, true) => return Err(err("channel.webhook", "receive mode `webhook` needs a route and a verification recipe")),
            (Some(_), false) => return Err(err("channel.webhook", "given, but `receive` has no `webhook`")),
            (Some(webhook), true) => self.validate_webhook(webhook)?,
            (None, false) => {}
        }
        for (i, secret) in self.secrets.iter().enumerate() {
            let verifies = self.webhook.as_ref().and_then(|w| w.verify.secret()) == Some(secret.name.as_str());
            if secret.inject.is_empty() && !verifies {
                return Err(err(format!("channel.secrets[{i}]"), format!("secret `{}` is neither injected nor used by webhook.verify", secret.name)));
            }
        }
        let limits = &self.limits;
        in_range("channel.limits.max_text", limits.max_text, 1, 65_536)?;
        in_range("channel.limits.edit_interval_ms", limits.edit_interval_ms, 100, 60_000)?;
        if limits.typing_refresh_ms != 0 {
            in_range("channel.limits.typing_refresh_ms", limits.typing_refresh_ms, 500, 60_000)?;
        }
        in_range("channel.limits.rate_per_chat_per_min", limits.rate_per_chat_per_min, 1, 600)?;
        if let Some(poll) = &self.poll {
            if !has(ReceiveMode::Poll) {
                return Err(err("channel.poll", "given, but `receive` has no `poll`"));
            }
            in_range("channel.poll.interval_ms", poll.interval_ms, 0, 3_600_000)?;
            in_range("channel.poll.timeout_secs", poll.timeout_secs, 1, 120)?;
        }
        Ok(())
    }

    fn validate_webhook(&self, webhook: &WebhookSpec) -> Result<(), ManifestError> {
        let route = &webhook.route;
        let segment_ok = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-');
        if route.len() > MAX_ROUTE || !route.starts_with('/') || !route[1..].split('/').all(segment_ok) {
            return Err(err("channel.webhook.route", format!("`{route}` must be `/` then [a-z0-9_-] segments, at most {MAX_ROUTE} characters")));
        }
        let field = "channel.webhook.verify";
        let secret_declared = |name: &str| -> Result<(), ManifestError> {
            if self.secrets.iter().any(|s| s.name == name) {
                Ok(())
            } else {
                Err(err(format!("{field}.secret"), format!("`{name}` is not declared in channel.secrets")))
            }
        };
        let basestring_ok = |text: &str, needs_timestamp: bool| -> Result<(), ManifestError> {
            if !text.contains("{body}") || (needs_timestamp && !text.contains("{timestamp}")) {
                let what = if needs_timestamp { "`{timestamp}` and `{body}`" } else { "`{body}`" };
                return Err(err(format!("{field}.basestring"), format!("`{text}` must contain {what}")));
            }
            Ok(())
        };
        match &webhook.verify {
            Verify::HeaderSecret { header, secret } => {
                check_header_name(&format!("{field}.header"), header)?;
                secret_declared(secret)?;
            }
            Verify::HmacSha256 { header, timestamp_header, basestring, window_secs, secret, signature_prefix } => {
                check_header_name(&format!("{field}.header"), header)?;
                check_header_name(&format!("{field}.timestamp_header"), timestamp_header)?;
                basestring_ok(basestring, true)?;
                in_range(&format!("{field}.window_secs"), *window_secs, 1, 3600)?;
                secret_declared(secret)?;
                if signature_prefix.len() > 16 || signature_prefix.chars().any(|c| c.is_control()) {
                    return Err(err(format!("{field}.signature_prefix"), "at most 16 printable characters"));
                }
            }
            Verify::Ed25519 { header, timestamp_header, basestring, window_secs, public_key } => {
                check_header_name(&format!("{field}.header"), header)?;
                check_header_name(&format!("{field}.timestamp_header"), timestamp_header)?;
                basestring_ok(basestring, true)?;
                in_range(&format!("{field}.window_secs"), *window_secs, 1, 3600)?;
                if public_key.len() != 64 || !public_key.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(err(format!("{field}.public_key"), "must be 64 hex digits (a 32-byte Ed25519 key)"));
                }
            }
        }
        Ok(())
    }
}

/// Checks declared secrets (a channel's `channel.secrets`, a tool plugin's
/// top-level `secrets`), named `{section}[i]` in errors: names
/// `[a-z][a-z0-9_]*` and unique, injection places unique, and a secret that
/// is injected has one audience host from `capabilities.network` (never a
/// wildcard). `frame_refused` is the error for an `inject: ["frame"]` where
/// there are no socket frames. Whether a secret may be left uninjected is
/// the caller's rule.
pub(crate) fn validate_secrets(
    section: &str,
    secrets: &[SecretSpec],
    capabilities: &Capabilities,
    frame_refused: Option<&str>,
) -> Result<(), ManifestError> {
    let network: Vec<String> =
        capabilities.network.iter().filter_map(|h| HostPattern::parse(h).ok()).map(|h| h.to_string()).collect();
    let mut names = std::collections::HashSet::new();
    for (i, secret) in secrets.iter().enumerate() {
        let field = format!("{section}[{i}]");
        let name = &secret.name;
        let valid = name.len() <= MAX_SECRET_NAME
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(err(format!("{field}.name"), format!("`{name}` must be [a-z][a-z0-9_]*, at most {MAX_SECRET_NAME} characters")));
        }
        if !names.insert(name.as_str()) {
            return Err(err(format!("{field}.name"), format!("duplicate secret `{name}`")));
        }
        for (j, place) in secret.inject.iter().enumerate() {
            if secret.inject[..j].iter().any(|p| same_place(p, place)) {
                return Err(err(format!("{field}.inject[{j}]"), format!("duplicate injection place `{place}`")));
            }
            check_place_name(&format!("{field}.inject[{j}]"), place)?;
            if *place == Injection::Frame
                && let Some(refusal) = frame_refused
            {
                return Err(err(format!("{field}.inject[{j}]"), refusal));
            }
        }
        match (&secret.audience, secret.inject.is_empty()) {
            (None, false) => {
                return Err(err(format!("{field}.audience"), "a secret that is injected needs the one host it may be sent to"));
            }
            (Some(audience), _) => {
                let pattern = HostPattern::parse(audience).map_err(|e| err(format!("{field}.audience"), e))?;
                if pattern.to_string().starts_with('*') {
                    return Err(err(format!("{field}.audience"), format!("`{audience}` must be one host, not a wildcard")));
                }
                if !network.contains(&pattern.to_string()) {
                    return Err(err(format!("{field}.audience"), format!("`{audience}` is not in capabilities.network")));
                }
                if secret.inject.is_empty() {
                    return Err(err(format!("{field}.inject"), format!("a secret with an audience must say where it is injected: {INJECTION_FORMS}")));
                }
            }
            (None, true) => {}
        }
    }
    Ok(())
}

/// A signed recipe's timestamp window when the manifest names none.
pub const DEFAULT_WINDOW_SECS: u32 = 300;

fn default_window_secs() -> u32 {
    DEFAULT_WINDOW_SECS
}

/// Two places that are the same (header names compared without case).
fn same_place(a: &Injection, b: &Injection) -> bool {
    match (a, b) {
        (Injection::Header(x), Injection::Header(y)) => x.eq_ignore_ascii_case(y),
        _ => a == b,
    }
}

impl Verify {
    /// The secret the recipe is keyed by, if any.
    pub fn secret(&self) -> Option<&str> {
        match self {
            Verify::HeaderSecret { secret, .. } | Verify::HmacSha256 { secret, .. } => Some(secret),
            Verify::Ed25519 { .. } => None,
        }
    }
}
