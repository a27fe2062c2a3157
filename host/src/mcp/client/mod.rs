//! The MCP client: every `[mcp_servers.NAME]` a [`ToolSource`] whose tools
//! join the agent's `ToolRegistry` as `mcp_<server>_<tool>`.
//!
//! Each server has a supervisor task ([`supervise`]): it connects (a stdio
//! process, [`stdio`], or a remote server through the host's HTTP policy,
//! [`http`]), lists the tools, and waits for the connection to end; then it
//! drops the server's tools (the registry's next snapshot has none) and
//! connects again with exponential backoff. A failure is logged once, not
//! at every retry; a server never blocks the agent or another server.
//! `notifications/tools/list_changed` lists the tools again.

pub mod http;
pub mod results;
pub mod sse;
pub mod stdio;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::{NotificationContext, Peer, RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::config::{McpServerConfig, RemoteTransport};
use crate::plugins::secrets::Secrets;
use crate::plugins::{CallContext, ProgressSink, ToolSpec};
use crate::tools::{ToolError, ToolFuture, ToolSource};

/// The longest wait between two connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// The longest description a tool keeps (a server could send megabytes of
/// instructions to the model).
const MAX_DESCRIPTION_BYTES: usize = 2048;

/// The largest input schema a tool may declare.
const MAX_SCHEMA_BYTES: usize = 64 * 1024;

/// What the host gives every server.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// The agent's workspace (a stdio server's working directory and, in
    /// the sandbox, the one directory it may write).
    pub workspace: std::path::PathBuf,
    /// The bound of one tool result, in bytes (`[limits]`, as plugin output).
    pub max_output_bytes: usize,
    /// The data dir: OAuth tokens are kept there, and a sandboxed server
    /// never sees it (nor the other `hidden_paths`).
    pub data_root: std::path::PathBuf,
    /// Paths a sandboxed server must not see (the data dir, the config).
    pub hidden_paths: Vec<std::path::PathBuf>,
}

/// All configured servers, each supervised. Dropping it stops them all
/// (stdio processes are killed).
pub struct McpClients {
    servers: Vec<Arc<ServerSource>>,
    stop: CancellationToken,
}

impl Drop for McpClients {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl McpClients {
    /// Starts a supervisor for every enabled server in `servers`. Returns at
    /// once; connections come up in the background.
    pub fn start(servers: Vec<(String, McpServerConfig)>, settings: ClientSettings) -> McpClients {
        let stop = CancellationToken::new();
        let servers: Vec<Arc<ServerSource>> = servers
            .into_iter()
            .filter(|(_, config)| config.enabled)
            .map(|(name, config)| {
                let source = Arc::new(ServerSource::new(name, config, settings.clone()));
                tokio::spawn(supervise(source.clone(), stop.clone()));
                source
            })
            .collect();
        McpClients { servers, stop }
    }

    /// The servers as tool sources, for `AgentBuilder::tool_sources`.
    pub fn sources(&self) -> Vec<Arc<dyn ToolSource>> {
        self.servers.iter().map(|s| s.clone() as Arc<dyn ToolSource>).collect()
    }

    /// The servers.
    pub fn servers(&self) -> &[Arc<ServerSource>] {
        &self.servers
    }

    /// Waits until every server's first connection attempt has ended
    /// (connected or failed), at most `limit`: a one-shot `chitin agent -m`
    /// starts its turn with the tools that came up in time.
    pub async fn first_attempts(&self, limit: Duration) {
        let all = futures::future::join_all(self.servers.iter().map(|s| s.first_attempt.cancelled()));
        let _ = tokio::time::timeout(limit, all).await;
    }
}

/// One server's state as the agent sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// Not connected yet.
    Starting,
    /// Connected, with this many tools.
    Connected {
        /// Tools offered (after the allow-list and schema checks).
        tools: usize,
        /// The protocol revision agreed on (`2026-07-28` is the stateless
        /// one, reached by `server/discover`; older ones by `initialize`).
        protocol: String,
    },
    /// The last attempt failed (or the connection ended); retried.
    Down {
        /// Why, redacted.
        reason: String,
    },
}

/// A server's tools as a [`ToolSource`].
pub struct ServerSource {
    name: String,
    label: String,
    config: McpServerConfig,
    settings: ClientSettings,
    generation: AtomicU64,
    live: Mutex<Live>,
    /// Cancelled once the first connection attempt has ended, either way.
    first_attempt: CancellationToken,
    /// This server's secrets: filled into its headers, and redacted from
    /// everything it sends back and every log line about it.
    secrets: Secrets,
    /// Why the secrets could not be set up (a `${VAR}` that is not set):
    /// every connection attempt fails with it.
    secrets_error: Option<String>,
}

struct Live {
    state: ServerState,
    peer: Option<Peer<RoleClient>>,
    /// (the name the model sees, the spec, the server's own name).
    tools: Vec<(ToolSpec, String)>,
}

impl ServerSource {
    fn new(name: String, config: McpServerConfig, settings: ClientSettings) -> ServerSource {
        let secrets = config
            .secrets
            .iter()
            .map(|(key, raw)| Ok((key.clone(), crate::env::expand_env(raw, &format!("mcp_servers.{name}.secrets.{key}")).map_err(|e| e.to_string())?)))
            .collect::<Result<Vec<_>, String>>()
            .and_then(|values| http::server_secrets(config.url.as_deref(), config.headers.keys(), &values));
        let (secrets, secrets_error) = match secrets {
            Ok(secrets) => (secrets, None),
            Err(e) => (Secrets::default(), Some(e)),
        };
        ServerSource {
            label: format!("mcp:{name}"),
            name,
            config,
            settings,
            generation: AtomicU64::new(0),
            live: Mutex::new(Live { state: ServerState::Starting, peer: None, tools: Vec::new() }),
            first_attempt: CancellationToken::new(),
            secrets,
            secrets_error,
        }
    }

    /// The server's name (`[mcp_servers.NAME]`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its config.
    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    /// Its state now.
    pub fn state(&self) -> ServerState {
        self.lock().state.clone()
    }

    /// Its tools now: (the name the model sees, the server's name, spec).
    pub fn tool_list(&self) -> Vec<(String, String, ToolSpec)> {
        self.lock().tools.iter().map(|(spec, own)| (spec.name.clone(), own.clone(), spec.clone())).collect()
    }

    /// `text` with this server's secret values written as placeholders.
    fn redact(&self, text: &str) -> String {
        self.secrets.redact(text).into_owned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn end_first_attempt(&self) {
        self.first_attempt.cancel();
    }

    fn set_tools(&self, peer: Option<Peer<RoleClient>>, tools: Vec<(ToolSpec, String)>, state: ServerState) {
        let mut live = self.lock();
        live.peer = peer;
        live.tools = tools;
        live.state = state;
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// The server's tools as the model will see them: allow-listed, named
    /// `mcp_<server>_<tool>`, schemas that compile, descriptions bounded.
    fn adopt(&self, listed: Vec<Tool>) -> Vec<(ToolSpec, String)> {
        let mut taken = std::collections::BTreeSet::new();
        let mut out = Vec::new();
        for tool in listed {
            let own = tool.name.to_string();
            if self.config.tools.as_ref().is_some_and(|allowed| !allowed.contains(&own)) {
                continue;
            }
            let schema = Value::Object((*tool.input_schema).clone());
            let shown = crate::text::for_terminal(&own).into_owned();
            let schema_size = schema.to_string().len();
            if schema_size > MAX_SCHEMA_BYTES {
                tracing::warn!(server = %self.name, tool = %shown, bytes = schema_size, "MCP tool left out: its input schema is over {MAX_SCHEMA_BYTES} bytes");
                continue;
            }
            if schema.get("type").and_then(Value::as_str) != Some("object") {
                tracing::warn!(server = %self.name, tool = %shown, "MCP tool left out: its input schema is not of \"type\": \"object\"");
                continue;
            }
            if let Err(e) = crate::tools::schema::compile(&schema) {
                tracing::warn!(server = %self.name, tool = %shown, "MCP tool left out: its input schema does not compile: {}", crate::text::clip_for_terminal(&e, 300, "error"));
                continue;
            }
            let name = unique(tool_name(&self.name, &own), &mut taken);
            let description = tool.description.as_deref().unwrap_or_default();
            let description = crate::text::clip_for_terminal(description, MAX_DESCRIPTION_BYTES, "description");
            let annotations = tool.annotations.as_ref();
            let read_only = annotations.and_then(|a| a.read_only_hint).unwrap_or(false);
            let destructive = annotations.and_then(|a| a.destructive_hint).unwrap_or(!read_only);
            out.push((
                ToolSpec { name, description, parameters: schema, read_only, concurrency_safe: read_only && !destructive },
                own,
            ));
        }
        out
    }

    async fn call_tool(&self, tool: &str, args: &Value) -> Result<String, ToolError> {
        let failed = |message: String| ToolError::External { tool: tool.to_string(), message };
        let (peer, own) = {
            let live = self.lock();
            let own = live.tools.iter().find(|(spec, _)| spec.name == tool).map(|(_, own)| own.clone());
            match (&live.peer, own) {
                (Some(peer), Some(own)) => (peer.clone(), own),
                (None, _) => return Err(failed(format!("the MCP server `{}` is not connected right now; try again later", self.name))),
                (_, None) => return Err(failed(format!("the MCP server `{}` no longer offers this tool", self.name))),
            }
        };
        let arguments = match args {
            Value::Object(map) => map.clone(),
            _ => serde_json::Map::new(),
        };
        let params = CallToolRequestParams::new(own).with_arguments(arguments);
        // Dropping this future (a timeout here, `/stop` above) drops the
        // request, and rmcp tells the server with `notifications/cancelled`.
        let result = match tokio::time::timeout(self.config.timeout(), peer.call_tool(params)).await {
            Err(_) => return Err(failed(format!("no answer from the MCP server within {} s (config [mcp_servers.{}] timeout_secs)", self.config.timeout_secs, self.name))),
            Ok(Err(e)) => return Err(failed(self.redact(&crate::text::clip_for_terminal(&e.to_string(), 1000, "error")))),
            Ok(Ok(result)) => result,
        };
        let text = results::to_text(&result, self.settings.max_output_bytes, &|text| self.redact(text));
        if result.is_error == Some(true) { Err(failed(text)) } else { Ok(text) }
    }
}

impl ToolSource for ServerSource {
    fn label(&self) -> &str {
        &self.label
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn tools(&self) -> Vec<ToolSpec> {
        self.lock().tools.iter().map(|(spec, _)| spec.clone()).collect()
    }

    fn call<'a>(&'a self, tool: &'a str, args: &'a Value, _ctx: &'a CallContext, _progress: Option<ProgressSink>) -> ToolFuture<'a> {
        Box::pin(self.call_tool(tool, args))
    }
}

/// `mcp_<server>_<tool>`, of `[A-Za-z0-9_-]`, at most 64 characters (the
/// function-name limit of the model APIs).
pub fn tool_name(server: &str, tool: &str) -> String {
    let clean: String = format!("mcp_{server}_{tool}").chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).collect();
    clean.chars().take(64).collect()
}

/// `name`, or `name` with a number that makes it unique among `taken`.
fn unique(name: String, taken: &mut std::collections::BTreeSet<String>) -> String {
    let mut candidate = name.clone();
    let mut n = 2;
    while taken.contains(&candidate) {
        let suffix = format!("_{n}");
        candidate = format!("{}{suffix}", name.chars().take(64 - suffix.len()).collect::<String>());
        n += 1;
    }
    taken.insert(candidate.clone());
    candidate
}

/// A failed handshake in words: both attempts when discover fell back to
/// `initialize` and that failed too (rmcp's own text names neither).
fn handshake_error(error: &rmcp::service::ClientInitializeError) -> String {
    match error {
        rmcp::service::ClientInitializeError::LegacyFallbackFailed { discover, fallback } => {
            format!("the handshake failed: server/discover: {discover}; then initialize: {fallback}")
        }
        other => other.to_string(),
    }
}

/// The protocol revision a connection agreed on.
fn protocol_of(peer: &rmcp::Peer<RoleClient>) -> String {
    peer.peer_info().map(|info| info.protocol_version.to_string()).unwrap_or_else(|| "unknown".into())
}

/// The client side of one connection: hears `tools/list_changed`.
#[derive(Clone)]
struct Listener {
    source: std::sync::Weak<ServerSource>,
}

impl rmcp::ClientHandler for Listener {
    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let Some(source) = self.source.upgrade() else { return };
        match context.peer.list_all_tools().await {
            Ok(listed) => {
                let tools = source.adopt(listed);
                tracing::info!(server = %source.name, tools = tools.len(), "MCP server changed its tools");
                let count = tools.len();
                source.set_tools(Some(context.peer.clone()), tools, ServerState::Connected { tools: count, protocol: protocol_of(&context.peer) });
            }
            Err(e) => tracing::warn!(server = %source.name, "listing the MCP server's changed tools failed: {}", source.redact(&e.to_string())),
        }
    }
}

/// A live connection and what keeps it alive (a stdio child).
struct Connection {
    service: RunningService<RoleClient, Listener>,
    _child: Option<tokio::process::Child>,
}

/// Connects once: starts the process or reaches the URL, does the MCP
/// handshake, within the startup limit.
async fn connect(source: &Arc<ServerSource>) -> Result<Connection, String> {
    let listener = Listener { source: Arc::downgrade(source) };
    let config = &source.config;
    let attempt = async {
        if let Some(error) = &source.secrets_error {
            return Err(error.clone());
        }
        match (&config.url, &config.command) {
            (Some(url), _) => {
                let headers: Vec<(String, String)> = config.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                let client = http::PolicyHttp::new(&source.label, url, &headers, source.secrets.clone())?;
                // A server the user logged in to (`chitin mcp login`) gets
                // its token, refreshed first when it is about to expire.
                let access_token = super::oauth::access_token(&source.settings.data_root, &source.name, url).await.map_err(|e| source.redact(&e.to_string()))?;
                if config.transport == RemoteTransport::Sse {
                    let transport = sse::SseTransport::connect(client, url, access_token).await.map_err(|e| source.redact(&e))?;
                    let service = rmcp::serve_client(listener, transport).await.map_err(|e| source.redact(&e.to_string()))?;
                    return Ok(Connection { service, _child: None });
                }
                let mut transport_config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                transport_config.auth_header = access_token;
                let transport = StreamableHttpClientTransport::with_client(client, transport_config);
                // The stateless revision (2026-07-28: `server/discover`, no
                // session) when the server speaks it, else `initialize`.
                let lifecycle = rmcp::ClientLifecycleMode::Auto { preferred_versions: vec![rmcp::model::ProtocolVersion::V_2026_07_28], legacy_version: None };
                let service = rmcp::service::serve_client_with_lifecycle(listener, transport, lifecycle).await.map_err(|e| source.redact(&handshake_error(&e)))?;
                Ok(Connection { service, _child: None })
            }
            (None, Some(command)) => {
                let (child, transport) = stdio::spawn(&source.name, command, config, &source.settings.workspace, &source.settings.hidden_paths)?;
                let service = rmcp::serve_client(listener, transport).await.map_err(|e| format!("the MCP handshake failed: {e}"))?;
                Ok(Connection { service, _child: Some(child) })
            }
            (None, None) => Err("no `url` or `command`".to_string()),
        }
    };
    match tokio::time::timeout(config.startup_timeout(), attempt).await {
        Ok(result) => result,
        Err(_) => Err(format!("it did not come up within {} s (startup_timeout_secs)", config.startup_timeout_secs)),
    }
}

/// One server's life: connect, list, wait for the end, again with backoff.
async fn supervise(source: Arc<ServerSource>, stop: CancellationToken) {
    let mut backoff = Duration::from_secs(1);
    let mut reported = false;
    loop {
        let outcome = tokio::select! {
            _ = stop.cancelled() => return,
            outcome = connect(&source) => outcome,
        };
        match outcome {
            Ok(connection) => {
                let peer = connection.service.peer().clone();
                let listed = tokio::select! {
                    _ = stop.cancelled() => return,
                    listed = tokio::time::timeout(source.config.startup_timeout(), peer.list_all_tools()) => listed,
                };
                match listed {
                    Ok(Ok(listed)) => {
                        let tools = source.adopt(listed);
                        let count = tools.len();
                        if reported {
                            tracing::info!(server = %source.name, tools = count, "MCP server is back");
                        } else {
                            tracing::debug!(server = %source.name, tools = count, "MCP server connected");
                        }
                        backoff = Duration::from_secs(1);
                        let protocol = protocol_of(&peer);
                        source.set_tools(Some(peer), tools, ServerState::Connected { tools: count, protocol });
                        source.end_first_attempt();
                        let Connection { service, _child } = connection;
                        // Stopping drops the service (its guard ends the
                        // connection) and the child (killed).
                        tokio::select! {
                            _ = stop.cancelled() => return,
                            _ = service.waiting() => {}
                        }
                        drop(_child);
                        let reason = "the connection ended".to_string();
                        tracing::warn!(server = %source.name, "MCP server disconnected; its tools are gone until it is back");
                        reported = true;
                        source.set_tools(None, Vec::new(), ServerState::Down { reason });
                        continue;
                    }
                    Ok(Err(e)) => fail(&source, &mut reported, format!("listing its tools failed: {}", source.redact(&e.to_string()))),
                    Err(_) => fail(&source, &mut reported, "listing its tools took too long".to_string()),
                }
            }
            Err(reason) => fail(&source, &mut reported, reason),
        }
        source.end_first_attempt();
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Records a failed attempt; only the first of a run of failures is logged
/// as a warning.
fn fail(source: &ServerSource, reported: &mut bool, reason: String) {
    let reason = source.redact(&crate::text::clip_for_terminal(&reason, 1000, "error"));
    if !*reported {
        tracing::warn!(server = %source.name, "MCP server unavailable (retried in the background): {reason}");
        *reported = true;
    } else {
        tracing::debug!(server = %source.name, "MCP server still unavailable: {reason}");
    }
    source.set_tools(None, Vec::new(), ServerState::Down { reason });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_are_clean_bounded_and_unique() {
        assert_eq!(tool_name("gh", "search issues"), "mcp_gh_search_issues");
        assert_eq!(tool_name("gh", &"x".repeat(100)).len(), 64);
        let mut taken = Default::default();
        let a = unique(tool_name("s", "a.b"), &mut taken);
        let b = unique(tool_name("s", "a b"), &mut taken);
        assert_eq!((a.as_str(), b.as_str()), ("mcp_s_a_b", "mcp_s_a_b_2"));
    }
}
