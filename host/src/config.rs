//! Configuration: the data dir and `config.toml`.
//!
//! The data dir is `~/.chitin`, or `$CHITIN_HOME` when set. It holds
//! `config.toml`, `plugins/` (installed components), `cache/` (compiled
//! components) and, by default, `workspace/`. A missing config file means
//! defaults; a present but invalid one is an error naming the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::plugins::{GrantConfig, Limits};
// `[providers.<name>]` is the provider's own section (`provider::config`);
// its checks stay here, for they answer with this module's `ConfigError`.
pub use crate::provider::config::{ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_MODEL, ProviderApi, ProviderConfig};

pub use crate::env::expand_env;

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("cannot read config {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The file is not valid TOML or a key has the wrong shape.
    #[error("invalid config {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// `${VAR}` in a config value names an unset variable.
    #[error("config key `{field}` uses ${{{variable}}}, but the environment variable {variable} is not set")]
    MissingVariable { field: String, variable: String },
    /// `[agent] provider` names no `[providers.<name>]` table.
    #[error("config key `{key}` names provider \"{name}\", but there is no [providers.{name}] table (configured: {known}); run `chitin onboard` for an example")]
    MissingProvider { key: &'static str, name: String, known: String },
    /// The workspace overlaps what only the host may write.
    #[error("the workspace {workspace} overlaps {what}: a plugin could then rewrite the host's config, cache or sessions. Use a workspace outside the data dir (or the default <data dir>/workspace)")]
    WorkspaceOverlap { workspace: PathBuf, what: String },
    /// The gateway would serve its API without a token it needs.
    #[error("the gateway needs a token for its API: set the environment variable {variable} (config [gateway] auth_token = \"${{{variable}}}\"), or, with a loopback listen address only, set auth_token = \"\" to serve without authentication")]
    GatewayNoToken { variable: String },
    /// `auth_token = ""` on an address other machines can reach.
    #[error("config [gateway] auth_token = \"\" turns authentication off, which is allowed only on a loopback listen address; listen is {listen}. Set a token (auth_token = \"${{CHITIN_GATEWAY_TOKEN}}\")")]
    GatewayOpen { listen: std::net::SocketAddr },
    /// A `[gateway]` server limit or allowed host is out of range.
    #[error("config [gateway] {key}: {message}")]
    GatewayLimit { key: &'static str, message: String },
    /// Neither `$CHITIN_HOME` nor a home directory is known.
    #[error("cannot find a data dir: set CHITIN_HOME or HOME")]
    NoHome,
    /// No `[providers]` table and no provider variable in the environment:
    /// there is no model to talk to.
    #[error("no model provider is configured: set OPENAI_API_KEY (and OPENAI_BASE_URL for another OpenAI-compatible endpoint, e.g. http://localhost:11434/v1), or ANTHROPIC_API_KEY, or run `chitin onboard` and edit [providers] in the config")]
    NoProvider,
    /// A provider whose API always needs a key has none.
    #[error("provider `{name}` ({base_url}) needs an API key and has none: set {variable}, or set api_key = \"${{{variable}}}\" in [providers.{name}] (`chitin onboard` writes an example)")]
    NoApiKey { name: String, base_url: String, variable: String },
    /// A provider's `base_url` is empty or not an http(s) URL.
    #[error("provider `{name}` has no usable endpoint: base_url = {base_url:?} (expected http://… or https://…; set [providers.{name}] base_url, or OPENAI_BASE_URL)")]
    NoEndpoint { name: String, base_url: String },
}

impl From<crate::env::MissingVariable> for ConfigError {
    fn from(e: crate::env::MissingVariable) -> Self {
        ConfigError::MissingVariable { field: e.field, variable: e.variable }
    }
}

impl ConfigError {
    /// The model provider is not set up (no provider, key or endpoint):
    /// the CLI exits with status 2 for these, before any request, so a
    /// script can tell "not configured" from "the model failed".
    pub fn is_provider_setup(&self) -> bool {
        match self {
            ConfigError::NoProvider | ConfigError::NoApiKey { .. } | ConfigError::NoEndpoint { .. } | ConfigError::MissingProvider { .. } => true,
            ConfigError::MissingVariable { field, .. } => field.starts_with("providers."),
            _ => false,
        }
    }
}

/// The data dir layout.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// `$CHITIN_HOME`, else `~/.chitin`.
    pub fn from_env() -> Result<DataDir, ConfigError> {
        if let Some(home) = std::env::var_os("CHITIN_HOME").filter(|v| !v.is_empty()) {
            return Ok(DataDir { root: PathBuf::from(home) });
        }
        std::env::home_dir().map(|h| DataDir { root: h.join(".chitin") }).ok_or(ConfigError::NoHome)
    }

    /// A data dir at `root`.
    pub fn at(root: impl Into<PathBuf>) -> DataDir {
        DataDir { root: root.into() }
    }

    /// The data dir itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `config.toml`.
    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// Installed plugin components.
    pub fn plugins_dir(&self) -> PathBuf {
        self.root.join("plugins")
    }

    /// Compiled-component cache.
    pub fn cache_dir(&self) -> PathBuf {
        self.root.join("cache").join("components")
    }

    /// Session files (outside the agent's workspace, which plugins see).
    pub fn sessions_dir(&self) -> PathBuf {
        self.root.join("sessions")
    }

    /// Line-editor history of the interactive CLI.
    pub fn cli_history_file(&self) -> PathBuf {
        self.root.join("cli_history.txt")
    }

    /// The default agent workspace.
    pub fn default_workspace(&self) -> PathBuf {
        self.root.join("workspace")
    }

    /// What only the host may write: everything in the data dir but the
    /// default workspace. A plugin that could reach one of these would own
    /// the host (grant itself capabilities in `config.toml`, replace a
    /// compiled plugin in the cache, rewrite sessions).
    fn host_only(&self) -> [PathBuf; 5] {
        [self.config_file(), self.plugins_dir(), self.root.join("cache"), self.sessions_dir(), self.cli_history_file()]
    }

    /// Refuses a workspace that overlaps what only the host may write: the
    /// data dir itself or any of its parts (see [`DataDir::host_only`]), and
    /// `config_file` when it is given. Compared after resolving symlinks and
    /// relative spellings, so `--workspace ~/.chitin/.` or a link to the data
    /// dir is caught too. Creates the data dir if it is missing.
    pub fn check_workspace(&self, workspace: &Path, config_file: &Path) -> Result<(), ConfigError> {
        std::fs::create_dir_all(&self.root).map_err(|source| ConfigError::Io { path: self.root.clone(), source })?;
        let ws = resolve(workspace);
        let root = resolve(&self.root);
        let overlap = |a: &Path, b: &Path| a.starts_with(b) || b.starts_with(a);
        if root.starts_with(&ws) {
            return Err(ConfigError::WorkspaceOverlap { workspace: ws, what: format!("the data dir {}", root.display()) });
        }
        let mut guarded: Vec<PathBuf> = self.host_only().iter().map(|p| resolve(p)).collect();
        guarded.push(resolve(config_file));
        match guarded.into_iter().find(|p| overlap(&ws, p)) {
            Some(p) => Err(ConfigError::WorkspaceOverlap { workspace: ws, what: format!("{} of the data dir", p.display()) }),
            None => Ok(()),
        }
    }
}

/// `path` made absolute with symlinks resolved as far as it exists; the
/// missing rest is appended as spelled (`..` and `.` removed lexically).
fn resolve(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                match part {
                    std::path::Component::ParentDir => {
                        out.pop();
                    }
                    std::path::Component::CurDir => {}
                    other => out.push(other),
                }
            }
            return out;
        }
        match (existing.parent(), existing.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

/// The contents of `config.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The agent's workspace directory; default `<data dir>/workspace`.
    pub workspace: Option<PathBuf>,
    /// The agent: model, budgets, concurrency.
    pub agent: AgentConfig,
    /// LLM endpoints by name; `agent.provider` picks one.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Per-call plugin limits.
    pub limits: Limits,
    /// Grants per plugin name (`[plugins.<name>]`).
    pub plugins: BTreeMap<String, GrantConfig>,
    /// `chitin gateway`: where it listens and its API token.
    pub gateway: GatewayConfig,
    /// Chat channels the gateway starts (`[channels.<name>]`). Their shape
    /// belongs to the channel runtime (not built yet): kept as raw TOML so a
    /// config written for it already loads.
    pub channels: BTreeMap<String, toml::Value>,
    /// MCP servers the agent uses (`[mcp_servers.<name>]`). Their shape
    /// belongs to `crate::mcp::config`, which parses and checks them (a
    /// bad entry is reported for that server alone).
    pub mcp_servers: BTreeMap<String, toml::Value>,
    /// Plugin indexes `chitin plugin search/install/update` read
    /// (`[[plugin_index]]`: name, url, pinned keys).
    pub plugin_index: Vec<crate::market::index::IndexSource>,
    /// Publishers whose plugins may be installed, with their pinned keys
    /// (`[publishers.<name>] keys = [...]`).
    pub publishers: BTreeMap<String, crate::market::index::PublisherConfig>,
}

/// The environment variable the default `[gateway] auth_token` names.
pub const GATEWAY_TOKEN_VAR: &str = "CHITIN_GATEWAY_TOKEN";

/// `[gateway]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// Address the HTTP server binds; port 0 picks a free one (the bound
    /// address is printed).
    pub listen: std::net::SocketAddr,
    /// Bearer token the API requires; `${VAR}` is expanded. The default
    /// names `$CHITIN_GATEWAY_TOKEN`, and the gateway refuses to start when
    /// it is unset. `""` turns authentication off, accepted only when
    /// `listen` is a loopback address.
    pub auth_token: String,
    /// Seconds a client has to send a whole request head, counted from the
    /// connection's open or, on a keep-alive connection, from the end of
    /// the previous response: it is also the keep-alive idle limit (hyper
    /// runs its header timer from the moment a connection goes idle).
    pub header_timeout_secs: u64,
    /// Seconds a request body may take to arrive in full (API, web chat
    /// and webhook bodies alike); 408 and the connection closed past it.
    pub body_timeout_secs: u64,
    /// Connections open at once; lowered further when the open-file limit
    /// (`ulimit -n`) would not hold them. One over the cap is closed at once.
    pub max_connections: usize,
    /// Connections open at once from one remote address.
    pub max_connections_per_address: usize,
    /// With `auth_token = ""` only: `Host` values served besides the listen
    /// address and `localhost:PORT` (`name` matches any port, `name:port`
    /// that port only). Guards against DNS rebinding.
    pub allowed_hosts: Vec<String>,
    /// The tools `/mcp` serves to MCP clients (with a token only): absent,
    /// every tool of a plugin that needs nothing of the agent; a list, only
    /// those; `[]`, no `/mcp` at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_tools: Option<Vec<String>>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            listen: std::net::SocketAddr::from(([127, 0, 0, 1], 8790)),
            auth_token: format!("${{{GATEWAY_TOKEN_VAR}}}"),
            header_timeout_secs: 10,
            body_timeout_secs: 30,
            max_connections: 256,
            max_connections_per_address: 32,
            allowed_hosts: Vec::new(),
            mcp_tools: None,
        }
    }
}

/// The gateway server's limits, checked ([`GatewayConfig::server_limits`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLimits {
    /// How long a client may take to send the request headers.
    pub header_timeout: std::time::Duration,
    /// How long a client may take to send the request body.
    pub body_timeout: std::time::Duration,
    /// Open connections at most.
    pub max_connections: usize,
    /// Open connections at most from one client address.
    pub max_connections_per_address: usize,
    /// Lowercased `allowed_hosts`.
    pub allowed_hosts: Vec<String>,
}

/// Longest timeout a `[gateway]` key accepts.
pub const MAX_GATEWAY_TIMEOUT_SECS: u64 = 3600;

/// How the gateway's API authenticates.
#[derive(Clone, PartialEq, Eq)]
pub enum GatewayAuth {
    /// `Authorization: Bearer <token>` is required.
    Token(String),
    /// No authentication (loopback only, `auth_token = ""`).
    Disabled,
}

impl std::fmt::Debug for GatewayAuth {
    // Never prints the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GatewayAuth::Token(_) => f.write_str("Token(..)"),
            GatewayAuth::Disabled => f.write_str("Disabled"),
        }
    }
}

impl GatewayConfig {
    /// The API's authentication: the token with `${VAR}` expanded, or
    /// `Disabled` for an explicit `""` on a loopback address. A token that
    /// names an unset variable, or `""` on another address, is an error:
    /// an always-on agent with tools must not be reachable without one.
    pub fn auth(&self) -> Result<GatewayAuth, ConfigError> {
        if self.auth_token.is_empty() {
            return if self.listen.ip().is_loopback() { Ok(GatewayAuth::Disabled) } else { Err(ConfigError::GatewayOpen { listen: self.listen }) };
        }
        match expand_env(&self.auth_token, "gateway.auth_token").map_err(ConfigError::from) {
            Ok(token) if !token.is_empty() => Ok(GatewayAuth::Token(token)),
            Ok(_) => Err(ConfigError::GatewayNoToken { variable: GATEWAY_TOKEN_VAR.into() }),
            Err(ConfigError::MissingVariable { variable, .. }) => Err(ConfigError::GatewayNoToken { variable }),
            Err(e) => Err(e),
        }
    }

    /// The server limits, each in range: timeouts 1 to
    /// [`MAX_GATEWAY_TIMEOUT_SECS`], connection caps at least 1 (the
    /// per-address cap at most the total), allowed hosts bare `name` or
    /// `name:port` (no scheme, path or spaces).
    pub fn server_limits(&self) -> Result<ServerLimits, ConfigError> {
        let timeout = |key: &'static str, secs: u64| {
            if (1..=MAX_GATEWAY_TIMEOUT_SECS).contains(&secs) {
                Ok(std::time::Duration::from_secs(secs))
            } else {
                Err(ConfigError::GatewayLimit { key, message: format!("{secs} is out of range; use 1 to {MAX_GATEWAY_TIMEOUT_SECS} seconds") })
            }
        };
        if self.max_connections == 0 {
            return Err(ConfigError::GatewayLimit { key: "max_connections", message: "must be at least 1".into() });
        }
        if self.max_connections_per_address == 0 || self.max_connections_per_address > self.max_connections {
            return Err(ConfigError::GatewayLimit {
                key: "max_connections_per_address",
                message: format!("{} is out of range; use 1 to max_connections ({})", self.max_connections_per_address, self.max_connections),
            });
        }
        let mut allowed_hosts = Vec::with_capacity(self.allowed_hosts.len());
        for host in &self.allowed_hosts {
            let valid = !host.is_empty() && host.len() <= 255 && host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-.:[]_".contains(&b));
            if !valid {
                return Err(ConfigError::GatewayLimit {
                    key: "allowed_hosts",
                    message: format!("{host:?} is not a host name: write `name` or `name:port` as a browser sends it in `Host` (no scheme, no path)"),
                });
            }
            allowed_hosts.push(host.to_ascii_lowercase());
        }
        Ok(ServerLimits {
            header_timeout: timeout("header_timeout_secs", self.header_timeout_secs)?,
            body_timeout: timeout("body_timeout_secs", self.body_timeout_secs)?,
            max_connections: self.max_connections,
            max_connections_per_address: self.max_connections_per_address,
            allowed_hosts,
        })
    }
}

/// `[agent]`: every number of the runtime spec is a key here.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// Model name sent to the provider.
    pub model: String,
    /// Key of `[providers]` to use.
    pub provider: String,
    /// Completion token cap per request.
    pub max_tokens: u32,
    /// The model's context window, in tokens.
    pub context_window: usize,
    /// Model requests with tools per turn.
    pub max_iterations: usize,
    /// Tool results longer than this are saved to the workspace.
    pub max_tool_result_chars: usize,
    /// A tool call whose arguments are longer than this many KiB is not
    /// run: the model gets an error asking for smaller calls, and history
    /// keeps only a short prefix of the arguments.
    pub max_tool_args_kb: usize,
    /// KiB of text one non-image attachment (PDF, DOCX, text) adds to its
    /// message at most; the rest is cut with a note.
    pub max_attachment_kb: usize,
    /// KiB an image attachment may have to be shown to the model; a bigger
    /// one becomes a note in the message.
    pub max_image_kb: usize,
    /// Sampling temperature; unset means the provider's default.
    pub temperature: Option<f32>,
    /// Seconds one model request may take.
    pub llm_timeout_secs: u64,
    /// Turns running at once across sessions; 0 = unlimited.
    pub max_concurrent_turns: usize,
    /// Messages a running turn's pending queue holds.
    pub pending_queue_size: usize,
    /// History messages replayed at most.
    pub history_max_messages: usize,
    /// Minutes a session must be idle before it is summarised; 0 = off.
    pub idle_compact_after_minutes: u64,
    /// Stream answers as they are generated.
    pub stream: bool,
    /// Wall-clock seconds one turn may keep working on an active goal
    /// (continuing after answers without tools) before it stops and marks
    /// the goal blocked.
    pub goal_budget_secs: u64,
    /// Models tried in order when a request to the main one fails for a
    /// reason on the provider's side (down, overloaded after its retries,
    /// refused key or quota), not for a request the API rejects.
    pub fallback_models: Vec<FallbackModel>,
    /// `[agent.subagents]`: the `spawn` tool.
    pub subagents: SubagentConfig,
    /// `[agent.dream]`: memory consolidation from the history archive.
    pub dream: DreamConfig,
    /// `[agent.heartbeat]`: periodic tasks from `HEARTBEAT.md`.
    pub heartbeat: HeartbeatConfig,
}

/// `[agent.dream]`: Dream turns new `memory/history.jsonl` entries into
/// edits of the memory files (`features::dream`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DreamConfig {
    /// Run Dream periodically in `chitin gateway` (`/dream` works anyway).
    pub enabled: bool,
    /// Seconds between periodic runs (nanobot: every 2 hours). At least 1.
    pub interval_secs: u64,
    /// Model requests one Dream run may make.
    pub max_iterations: usize,
    /// History entries one run reads at most (nanobot: 20).
    pub max_entries: usize,
}

impl Default for DreamConfig {
    fn default() -> Self {
        DreamConfig { enabled: true, interval_secs: 7200, max_iterations: 30, max_entries: 20 }
    }
}

/// `[agent.heartbeat]`: every `interval_secs` the gateway reads
/// `HEARTBEAT.md`; when it lists tasks, an internal turn does them and its
/// answer goes to `chat` (`features::heartbeat`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeartbeatConfig {
    /// Off unless set.
    pub enabled: bool,
    /// Seconds between checks (nanobot: 1800). At least 1.
    pub interval_secs: u64,
    /// Where results go, `channel:chat_id` (`telegram:12345`); unset: the
    /// chat that last wrote to the gateway.
    pub chat: Option<String>,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        HeartbeatConfig { enabled: false, interval_secs: 1800, chat: None }
    }
}

/// One entry of `[agent] fallback_models`:
/// `{ model = "gpt-4o-mini" }` (the same provider) or
/// `{ provider = "claude", model = "claude-haiku-4-5", max_tokens = 4096 }`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackModel {
    /// Model name sent to the provider.
    pub model: String,
    /// Key of `[providers]`; unset means `[agent] provider`.
    #[serde(default)]
    pub provider: Option<String>,
    /// Completion token cap for this model, when below `[agent] max_tokens`.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// This model's context window in tokens; unset means
    /// `[agent] context_window`. Compaction and the prompt budget use it
    /// while this model answers.
    #[serde(default)]
    pub context_window: Option<usize>,
}

/// `[agent.subagents]`: what a subagent (the `spawn` tool) may do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SubagentConfig {
    /// Subagents running at once, over all sessions; a spawn past it is
    /// refused with a message saying so. At least 1.
    pub max_concurrent: usize,
    /// The tools a subagent gets, by name; unset: every tool of the main
    /// agent except `spawn` (unless `allow_spawn`) and `message` (a subagent
    /// reports to the agent, not to the user).
    pub tools: Option<Vec<String>>,
    /// A subagent may spawn subagents of its own.
    pub allow_spawn: bool,
    /// While subagents of a session run, its turn waits up to this many
    /// seconds for their results before it ends (a result that comes later
    /// starts a turn of its own); 0 = never wait.
    pub keep_alive_secs: u64,
}

impl Default for SubagentConfig {
    fn default() -> Self {
        SubagentConfig { max_concurrent: 1, tools: None, allow_spawn: false, keep_alive_secs: 300 }
    }
}

/// `[agent] max_image_kb` when the config does not say.
pub const DEFAULT_MAX_IMAGE_KB: usize = 5120;

impl Default for AgentConfig {
    fn default() -> Self {
        AgentConfig {
            model: "gpt-4o-mini".into(),
            provider: "openai".into(),
            max_tokens: 8192,
            context_window: 65_536,
            max_iterations: 200,
            max_tool_result_chars: 16_000,
            max_tool_args_kb: 1024,
            max_attachment_kb: 64,
            max_image_kb: DEFAULT_MAX_IMAGE_KB,
            temperature: None,
            llm_timeout_secs: 300,
            max_concurrent_turns: 3,
            pending_queue_size: 20,
            history_max_messages: 500,
            idle_compact_after_minutes: 0,
            stream: true,
            subagents: SubagentConfig::default(),
            goal_budget_secs: 1800,
            dream: DreamConfig::default(),
            heartbeat: HeartbeatConfig::default(),
            fallback_models: Vec::new(),
        }
    }
}

impl AgentConfig {
    /// The configured model with its limits, as a run takes it.
    pub fn model_handle(&self) -> crate::provider::ModelHandle {
        crate::provider::ModelHandle {
            provider: self.provider.clone(),
            model: self.model.clone(),
            context_window: self.context_window,
            max_output_tokens: self.max_tokens,
        }
    }

    /// [`AgentConfig::max_tool_args_kb`] in bytes (at least 1 KiB, so a
    /// zero does not refuse every call).
    pub fn max_tool_args_bytes(&self) -> usize {
        self.max_tool_args_kb.max(1).saturating_mul(1024)
    }
}

/// Hosts whose API refuses every request without a key: a missing key
/// there is reported before any request is made. Other endpoints (local
/// servers, proxies) may well need none.
const KEYED_HOSTS: &[&str] = &[
    "api.openai.com",
    "api.anthropic.com",
    "openrouter.ai",
    "api.deepseek.com",
    "api.groq.com",
    "api.mistral.ai",
    "api.together.xyz",
    "generativelanguage.googleapis.com",
    "dashscope.aliyuncs.com",
    "api.moonshot.ai",
];

impl ProviderConfig {
    /// Checks that requests can be made at all: an http(s) endpoint, and a
    /// key where the API always needs one. Returns the resolved key.
    pub fn check(&self, name: &str) -> Result<Option<String>, ConfigError> {
        let url = self.endpoint();
        let lower = url.to_ascii_lowercase();
        let rest = lower.strip_prefix("https://").or_else(|| lower.strip_prefix("http://")).filter(|r| !r.is_empty());
        let Some(rest) = rest else {
            return Err(ConfigError::NoEndpoint { name: name.to_string(), base_url: self.base_url.clone() });
        };
        let key = self.resolved_api_key(name)?.filter(|k| !k.trim().is_empty());
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
        let host = host.split(':').next().unwrap_or_default();
        let keyed = self.api == ProviderApi::Anthropic || KEYED_HOSTS.iter().any(|k| host == *k || host.ends_with(&format!(".{k}")));
        if key.is_none() && keyed {
            return Err(ConfigError::NoApiKey { name: name.to_string(), base_url: url.to_string(), variable: self.api.key_variable().to_string() });
        }
        Ok(key)
    }

    /// The API key with `${VAR}` expanded; a missing variable is an error
    /// naming the key and the variable.
    pub fn resolved_api_key(&self, provider: &str) -> Result<Option<String>, ConfigError> {
        self.api_key.as_deref().map(|raw| expand_env(raw, &format!("providers.{provider}.api_key"))).transpose().map_err(ConfigError::from)
    }
}

impl Config {
    /// The provider `[agent] provider` names. With no `[providers]` at all,
    /// the environment names one: `OPENAI_BASE_URL` (default
    /// `https://api.openai.com/v1`) and `OPENAI_API_KEY`, so a fresh machine
    /// needs no config file to talk to any OpenAI-compatible endpoint.
    pub fn provider(&self) -> Result<(String, ProviderConfig), ConfigError> {
        self.provider_named(&self.agent.provider, "agent.provider")
    }

    /// The provider `[providers.<name>]` (or the environment's default, as
    /// for [`Config::provider`]).
    /// `key` is the config key that named it, for the error.
    pub fn provider_named(&self, name: &str, key: &'static str) -> Result<(String, ProviderConfig), ConfigError> {
        if let Some(provider) = self.providers.get(name) {
            return Ok((name.to_string(), provider.clone()));
        }
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if self.providers.is_empty() && name == "openai" {
            let (base_url, key) = (var("OPENAI_BASE_URL"), var("OPENAI_API_KEY"));
            if base_url.is_none() && key.is_none() {
                return Err(ConfigError::NoProvider);
            }
            let base_url = base_url.unwrap_or_else(|| "https://api.openai.com/v1".into());
            let api_key = key.map(|_| "${OPENAI_API_KEY}".to_string());
            return Ok((name.to_string(), ProviderConfig { base_url, api_key, api: ProviderApi::OpenAi, thinking_budget: None, vision: true }));
        }
        if self.providers.is_empty() && name == "anthropic" {
            if var("ANTHROPIC_API_KEY").is_none() {
                return Err(ConfigError::NoProvider);
            }
            let base_url = var("ANTHROPIC_BASE_URL").unwrap_or_else(|| ANTHROPIC_BASE_URL.into());
            return Ok((name.to_string(), ProviderConfig { base_url, api_key: Some("${ANTHROPIC_API_KEY}".into()), api: ProviderApi::Anthropic, thinking_budget: None, vision: true }));
        }
        Err(ConfigError::MissingProvider { key, name: name.to_string(), known: self.providers.keys().cloned().collect::<Vec<_>>().join(", ") })
    }

    /// Applies environment overrides: `CHITIN_MODEL` replaces `agent.model`.
    pub fn with_env_overrides(mut self) -> Config {
        // A fresh machine with only an Anthropic key: talk to Anthropic
        // (with a Claude model unless one was chosen) rather than fail for
        // want of an OpenAI key.
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if self.providers.is_empty()
            && self.agent.provider == "openai"
            && var("OPENAI_API_KEY").is_none()
            && var("OPENAI_BASE_URL").is_none()
            && var("ANTHROPIC_API_KEY").is_some()
        {
            self.agent.provider = "anthropic".into();
            if self.agent.model == AgentConfig::default().model {
                self.agent.model = DEFAULT_ANTHROPIC_MODEL.into();
            }
        }
        if let Some(model) = std::env::var("CHITIN_MODEL").ok().filter(|v| !v.is_empty()) {
            self.agent.model = model;
        }
        self
    }

    /// Reads `path`; a missing file yields the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text, path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(source) => Err(ConfigError::Io { path: path.to_path_buf(), source }),
        }
    }

    /// Parses config text; `path` only names the file in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Invalid { path: path.to_path_buf(), message: e.to_string() })
    }

    /// The workspace directory, relative paths taken from the data dir.
    pub fn workspace_dir(&self, data: &DataDir) -> PathBuf {
        match &self.workspace {
            Some(p) if p.is_absolute() => p.clone(),
            Some(p) => data.root().join(p),
            None => data.default_workspace(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::WorkspaceAccess;

    #[test]
    fn gateway_auth_needs_a_token_unless_loopback_and_explicitly_off() {
        let parse = |text: &str| Config::parse(text, Path::new("c.toml")).unwrap().gateway;
        let default = parse("");
        assert_eq!(default.listen.to_string(), "127.0.0.1:8790");
        assert_eq!(default.auth_token, "${CHITIN_GATEWAY_TOKEN}");
        let unset = parse("[gateway]\nauth_token = \"${CHITIN_TEST_UNSET_GW1}\"\n").auth().unwrap_err().to_string();
        assert!(unset.contains("CHITIN_TEST_UNSET_GW1") && unset.contains("auth_token = \"\""), "{unset}");
        assert_eq!(parse("[gateway]\nauth_token = \"\"\n").auth().unwrap(), GatewayAuth::Disabled);
        let open = parse("[gateway]\nlisten = \"0.0.0.0:8790\"\nauth_token = \"\"\n").auth().unwrap_err().to_string();
        assert!(open.contains("loopback") && open.contains("0.0.0.0:8790"), "{open}");
        assert_eq!(parse("[gateway]\nlisten = \"[::1]:0\"\nauth_token = \"literal\"\n").auth().unwrap(), GatewayAuth::Token("literal".into()));
        assert!(Config::parse("[gateway]\nlisten = \"nowhere\"\n", Path::new("c.toml")).unwrap_err().to_string().contains("listen"));
        assert!(Config::parse("[channels.telegram]\nenabled = true\n", Path::new("c.toml")).is_ok(), "channels are kept for later");
    }

    #[test]
    fn gateway_server_limits_have_defaults_and_ranges() {
        let parse = |text: &str| Config::parse(text, Path::new("c.toml")).unwrap().gateway;
        let limits = parse("").server_limits().unwrap();
        assert_eq!((limits.header_timeout.as_secs(), limits.body_timeout.as_secs()), (10, 30));
        assert_eq!((limits.max_connections, limits.max_connections_per_address), (256, 32));
        let custom = parse("[gateway]\nheader_timeout_secs = 2\nmax_connections = 8\nmax_connections_per_address = 8\nallowed_hosts = [\"Chitin.Lan\", \"box:8790\"]\n");
        let limits = custom.server_limits().unwrap();
        assert_eq!(limits.header_timeout.as_secs(), 2);
        assert_eq!(limits.allowed_hosts, ["chitin.lan", "box:8790"]);
        for (text, key) in [
            ("header_timeout_secs = 0", "header_timeout_secs"),
            ("body_timeout_secs = 3601", "body_timeout_secs"),
            ("max_connections = 0", "max_connections"),
            ("max_connections_per_address = 300", "max_connections_per_address"),
            ("allowed_hosts = [\"http://evil\"]", "allowed_hosts"),
            ("allowed_hosts = [\"\"]", "allowed_hosts"),
        ] {
            let err = parse(&format!("[gateway]\n{text}\n")).server_limits().unwrap_err().to_string();
            assert!(err.contains(key), "{text}: {err}");
        }
        assert!(Config::parse("[gateway]\nidle_secs = 5\n", Path::new("c.toml")).is_err(), "unknown keys are refused");
    }

    #[test]
    fn grants_and_limits_parse() {
        let text = r#"
            [limits]
            timeout_ms = 500
            [plugins.fs]
            workspace = "read"
            [plugins.web]
            network = ["api.example.com"]
        "#;
        let config = Config::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(config.limits.timeout_ms, 500);
        assert_eq!(config.limits.memory_mb, Limits::default().memory_mb);
        assert_eq!(config.plugins["fs"].workspace, WorkspaceAccess::Read);
        assert_eq!(config.plugins["web"].network, ["api.example.com"]);
        assert!(config.plugins["web"].enabled);
    }

    #[test]
    fn env_vars_expand_and_a_missing_one_is_named() {
        // SAFETY: test-only variable with a unique name; no other thread reads it.
        unsafe { std::env::set_var("CHITIN_TEST_KEY_X1", "sk-123") };
        assert_eq!(expand_env("${CHITIN_TEST_KEY_X1}", "k").unwrap(), "sk-123");
        assert_eq!(expand_env("a-${CHITIN_TEST_KEY_X1}-b", "k").unwrap(), "a-sk-123-b");
        let err = expand_env("${CHITIN_TEST_UNSET_Y2}", "providers.openai.api_key").unwrap_err().to_string();
        assert!(err.contains("providers.openai.api_key") && err.contains("CHITIN_TEST_UNSET_Y2"), "{err}");
    }

    #[test]
    fn agent_defaults_and_missing_provider() {
        let config = Config::parse("[agent]\nmodel = \"m\"\nprovider = \"local\"\n[providers.other]\nbase_url = \"http://x\"\n", Path::new("c.toml")).unwrap();
        assert_eq!(config.agent.max_iterations, 200);
        assert_eq!(config.agent.context_window, 65_536);
        assert_eq!(config.agent.max_tool_args_bytes(), 1024 * 1024);
        let small = Config::parse("[agent]\nmax_tool_args_kb = 0\n", Path::new("c.toml")).unwrap();
        assert_eq!(small.agent.max_tool_args_bytes(), 1024, "0 is clamped, not a refusal of every call");
        let err = config.provider().unwrap_err().to_string();
        assert!(err.contains("agent.provider") && err.contains("[providers.local]") && err.contains("other"), "{err}");
        let config = Config::parse("[agent]\n[providers.other]\nbase_url = \"http://x\"\n", Path::new("c.toml")).unwrap();
        let err = config.provider().unwrap_err().to_string();
        assert!(err.contains("agent.provider") && err.contains("[providers.openai]"), "{err}");
    }

    #[test]
    fn a_bad_key_is_named() {
        let err = Config::parse("[plugins.fs]\nworkspace = \"all\"\n", Path::new("c.toml")).unwrap_err().to_string();
        assert!(err.contains("workspace") && err.contains("all"), "{err}");
        let err = Config::parse("[limits]\ntimeout = 5\n", Path::new("c.toml")).unwrap_err().to_string();
        assert!(err.contains("timeout"), "{err}");
    }

    #[test]
    fn a_workspace_overlapping_the_data_dir_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let data = DataDir::at(tmp.path().join("home"));
        let config = data.config_file();
        let refused = |ws: &Path| data.check_workspace(ws, &config).unwrap_err().to_string();
        std::fs::create_dir_all(data.root()).unwrap();
        std::os::unix::fs::symlink(data.root(), tmp.path().join("link")).unwrap();
        for ws in [
            data.root().to_path_buf(),
            data.root().join("."),
            data.root().join("workspace/.."),
            tmp.path().join("link"),
            tmp.path().to_path_buf(),
            data.root().join("cache"),
            data.root().join("cache/components/x"),
            data.root().join("sessions"),
            data.root().join("plugins"),
        ] {
            let err = refused(&ws);
            assert!(err.contains("overlaps"), "{ws:?}: {err}");
        }
        data.check_workspace(&data.default_workspace(), &config).unwrap();
        data.check_workspace(&tmp.path().join("elsewhere"), &config).unwrap();
        data.check_workspace(&tmp.path().join("link/workspace"), &config).unwrap();
        let err = data.check_workspace(&tmp.path().join("elsewhere"), &tmp.path().join("elsewhere/my.toml")).unwrap_err();
        assert!(err.to_string().contains("my.toml"), "{err}");
    }
}
