//! Assembles a ready host from the config: runtime, plugins, tool registry.
//! The CLI, the tests and the benchmarks all start here, so they exercise the
//! same path.

use std::path::PathBuf;
use std::sync::Arc;

use crate::agent::AgentCore;
use crate::agent::context::ContextBuilder;
use crate::agent::commands::CommandRegistry;
use crate::agent::hooks::CommandHandler;
use crate::agent::runner::AgentRunner;
use crate::features::dream::Dream;
use crate::features::dream::commands::handlers as dream_commands;
use crate::features::goals::GoalCommand;
use crate::features::services::AgentServices;
use crate::features::subagents::SubagentManager;
use crate::bus::MessageBus;
use crate::compact::{AutoCompact, ConsolidationSettings, Consolidator, HistoryArchive, SummaryLimits, SystemClock};
use crate::config::{Config, ConfigError, DataDir, ProviderApi};
use crate::provider::{Anthropic, AnthropicProvider, FallbackEntry, FallbackProvider, ModelHandle, OpenAiProvider, Provider, ProviderOptions, RetryPolicy};
use crate::session::JsonlStore;
use crate::plugins::{PluginCatalog, PluginError, PluginRuntime, RuntimeConfig};
use crate::tools::{ToolError, ToolRegistry};
use crate::workspace::{Workspace, WorkspaceError};

/// What to open beyond the config file.
#[derive(Debug, Clone, Default)]
pub struct AppOptions {
    /// Use this config file instead of `<data dir>/config.toml`.
    pub config_file: Option<PathBuf>,
    /// Use this workspace instead of the configured one.
    pub workspace: Option<PathBuf>,
    /// Plugin files to load in addition to the built-in and installed ones.
    pub extra_plugins: Vec<PathBuf>,
    /// Compile plugins in a child process running this program (the
    /// `chitin` binary), under the `[limits]` compile caps. `None` compiles
    /// in process: for tests and benchmarks over trusted components.
    pub compile_child: Option<PathBuf>,
}

/// Why the host could not be assembled.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum AppError {
    /// The config is unusable.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A plugin could not be loaded.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// The tools of two plugins clash.
    #[error(transparent)]
    Tool(#[from] ToolError),
    /// The provider could not be set up.
    #[error("provider `{name}`: {message}")]
    Provider { name: String, message: String },
    /// The workspace directory could not be created.
    #[error("cannot create workspace {path}: {source}")]
    Workspace { path: PathBuf, source: std::io::Error },
    /// The workspace could not be opened.
    #[error(transparent)]
    WorkspaceOpen(#[from] WorkspaceError),
    /// The durable inbox could not be opened.
    #[error(transparent)]
    Inbox(#[from] crate::durable::InboxError),
}

/// A ready host.
pub struct App {
    /// The data dir.
    pub data: DataDir,
    /// The config in force.
    pub config: Config,
    /// The workspace plugins see, and the host's only door into it.
    pub workspace: Workspace,
    /// The plugin runtime.
    pub runtime: Arc<PluginRuntime>,
    /// The loaded plugins.
    pub catalog: PluginCatalog,
    /// All their tools.
    pub tools: ToolRegistry,
}

/// An agent as [`AgentBuilder::build`] wires it: the engine's core, and
/// the handles to the features a host still drives itself (the gateway
/// runs Dream periodically).
pub struct WiredAgent {
    /// The engine's shared services, the features plugged in.
    pub core: AgentCore,
    /// The privileged plugin interfaces.
    pub services: Arc<AgentServices>,
    /// The subagents (also the core's `subagents`).
    pub subagents: Arc<SubagentManager>,
    /// Memory consolidation (also behind the core's `/dream*` commands).
    pub dream: Arc<Dream>,
    /// The MCP servers of `[mcp_servers]`, connecting in the background
    /// (their tools are in the core's registry as they come up). Keep it
    /// for as long as the agent runs: dropping it stops them.
    pub mcp: Arc<crate::mcp::client::McpClients>,
}

impl AppError {
    /// The model provider is not set up (see [`ConfigError::is_provider_setup`]).
    pub fn is_provider_setup(&self) -> bool {
        matches!(self, AppError::Config(e) if e.is_provider_setup())
    }
}

impl App {
    /// Opens the host in `data` with `options`.
    pub fn open(data: DataDir, options: AppOptions) -> Result<App, AppError> {
        let config_file = options.config_file.clone().unwrap_or_else(|| data.config_file());
        let config = Config::load(&config_file)?.with_env_overrides();
        let workspace = options.workspace.clone().unwrap_or_else(|| config.workspace_dir(&data));
        data.check_workspace(&workspace, &config_file)?;
        std::fs::create_dir_all(&workspace).map_err(|source| AppError::Workspace { path: workspace.clone(), source })?;
        let workspace = workspace.canonicalize().map_err(|source| AppError::Workspace { path: workspace.clone(), source })?;
        let workspace = Workspace::open(workspace)?;
        let runtime = PluginRuntime::with_isolation(
            RuntimeConfig { workspace: workspace.root().to_path_buf(), cache_dir: Some(data.cache_dir()), limits: config.limits.clone() },
            options.compile_child.clone(),
        )?;
        let runtime = Arc::new(runtime);
        let mut catalog = PluginCatalog::load(&runtime, &config.plugins, Some(&data.plugins_dir()), &options.extra_plugins)?;
        // Plugins installed from an index: what the lock names, granted what
        // the user approved (a `[plugins.<name>]` table replaces that, and
        // can still not exceed it: the plugin gets the lesser of what its
        // locked manifest asks and what it is granted).
        crate::market::store::load_locked(&runtime, &mut catalog, &data.plugins_dir(), &crate::market::lock::path_for(&config_file), |name, locked| {
            config.plugins.get(name).cloned().unwrap_or_else(|| locked.approved.grant())
        });
        let tools = ToolRegistry::new(runtime.clone(), &catalog)?;
        Ok(App { data, config, workspace, runtime, catalog, tools })
    }
}

impl App {
    /// The provider `[agent] provider` names, from `[providers.<name>]`.
    pub fn provider(&self) -> Result<Arc<dyn Provider>, AppError> {
        let (name, config) = self.config.provider()?;
        let primary = self.build_provider(&name, &config)?;
        let agent = &self.config.agent;
        if agent.fallback_models.is_empty() {
            return Ok(primary);
        }
        // Every fallback is checked now, like the main provider: a typo in
        // the list is said at start, not at the first outage.
        let mut fallbacks = Vec::new();
        for entry in &agent.fallback_models {
            let provider_name = entry.provider.clone().unwrap_or_else(|| name.clone());
            let provider = if provider_name == name {
                primary.clone()
            } else {
                let (fallback_name, fallback_config) = self.config.provider_named(&provider_name, "agent.fallback_models")?;
                self.build_provider(&fallback_name, &fallback_config)?
            };
            let handle = ModelHandle {
                provider: provider_name,
                model: entry.model.clone(),
                context_window: entry.context_window.unwrap_or(agent.context_window),
                max_output_tokens: entry.max_tokens.unwrap_or(agent.max_tokens),
            };
            fallbacks.push(FallbackEntry { handle, provider });
        }
        Ok(Arc::new(FallbackProvider::new(primary, format!("{name}/{}", agent.model), fallbacks)))
    }

    /// The provider `[providers.<name>]` describes, checked (endpoint, key).
    fn build_provider(&self, name: &str, config: &crate::config::ProviderConfig) -> Result<Arc<dyn Provider>, AppError> {
        // Missing endpoint or key: said now, before any request is made.
        let api_key = config.check(name)?;
        let options = ProviderOptions {
            base_url: config.endpoint().to_string(),
            api_key,
            request_timeout: std::time::Duration::from_secs(self.config.agent.llm_timeout_secs.max(1)),
            retry: RetryPolicy::default(),
            stream: self.config.agent.stream,
            vision: config.vision,
        };
        let cap = crate::provider::openai::response_cap(self.config.agent.max_tool_args_bytes());
        let setup = |e: crate::provider::ProviderSetupError| AppError::Provider { name: name.into(), message: e.to_string() };
        Ok(match config.api {
            ProviderApi::OpenAi => Arc::new(OpenAiProvider::new(options).map_err(setup)?.with_max_response_bytes(cap)),
            ProviderApi::Anthropic => {
                let wire = Anthropic { thinking_budget: config.thinking_budget };
                Arc::new(AnthropicProvider::anthropic(wire, options).map_err(setup)?.with_max_response_bytes(cap))
            }
        })
    }

    /// The agent's shared services over `provider`, its features wired in
    /// ([`App::agent`] without the handles to them).
    pub fn agent_core(&self, provider: Arc<dyn Provider>, bus: Arc<MessageBus>) -> AgentCore {
        self.agent(provider, bus).core
    }

    /// The agent over `provider`: the engine's shared services with the
    /// features wired in (the plugin services, subagents, `/goal` and
    /// Dream's commands), and the handles to the features a host drives
    /// itself. What a turn shows while it runs goes to the sink its caller
    /// passes (`AgentLoop::process`).
    pub fn agent(&self, provider: Arc<dyn Provider>, bus: Arc<MessageBus>) -> WiredAgent {
        self.agent_builder(provider, bus).build()
    }

    /// A builder for the agent over `provider`, for a host that knows more
    /// than [`App::agent`] assumes: which channels a `message` can reach,
    /// and the scheduled jobs it fires. Everything is wired in
    /// [`AgentBuilder::build`]; nothing is set on the agent afterwards.
    pub fn agent_builder(&self, provider: Arc<dyn Provider>, bus: Arc<MessageBus>) -> AgentBuilder<'_> {
        AgentBuilder { app: self, provider, bus, reachable: None, cron: None, sources: Vec::new() }
    }

    /// Starts a client for every enabled `[mcp_servers.NAME]` (in the
    /// background; see [`crate::mcp::client`]). An entry that does not
    /// parse is reported and left out; the others start.
    pub fn start_mcp_servers(&self) -> crate::mcp::client::McpClients {
        let (servers, errors) = crate::mcp::config::parse_all(&self.config.mcp_servers);
        for error in errors {
            tracing::warn!("MCP server left out: {error}");
        }
        crate::mcp::client::McpClients::start(servers, self.mcp_client_settings())
    }

    /// What every MCP server of this host is given: the workspace, the
    /// output bound, the data dir (OAuth tokens), and what a sandboxed one
    /// must never see (the data dir, the config).
    pub fn mcp_client_settings(&self) -> crate::mcp::client::ClientSettings {
        crate::mcp::client::ClientSettings {
            workspace: self.workspace.root().to_path_buf(),
            max_output_bytes: self.config.limits.max_output_bytes(),
            data_root: self.data.root().to_path_buf(),
            hidden_paths: vec![self.data.root().to_path_buf(), self.data.config_file()],
        }
    }

    /// The bus of a long-lived host: durable, over `<data>/inbox` (see
    /// [`crate::durable`]), so every message it accepts is answered once,
    /// across crashes.
    pub fn durable_bus(&self) -> Result<Arc<MessageBus>, AppError> {
        let inbox = crate::durable::Inbox::open(&self.data.root().join("inbox"), crate::durable::FsyncPolicy::Batch)?;
        Ok(Arc::new(MessageBus::durable(inbox)))
    }
}

/// Wires an agent ([`App::agent_builder`]): what the host knows before the
/// agent exists is given here, so the agent is complete when built.
pub struct AgentBuilder<'a> {
    app: &'a App,
    provider: Arc<dyn Provider>,
    bus: Arc<MessageBus>,
    reachable: Option<Vec<String>>,
    cron: Option<Arc<crate::features::cron::CronService>>,
    sources: Vec<Arc<dyn crate::tools::ToolSource>>,
}

impl AgentBuilder<'_> {
    /// Only `channels` can be reached by the `message` tool (default: any).
    pub fn reachable(mut self, channels: Vec<String>) -> Self {
        self.reachable = Some(channels);
        self
    }

    /// The `schedule` tool is served from `cron` (default: it explains
    /// that scheduled jobs run in `chitin gateway`).
    pub fn cron(mut self, cron: Arc<crate::features::cron::CronService>) -> Self {
        self.cron = Some(cron);
        self
    }

    /// Tools from outside the plugins (MCP servers, `crate::mcp::client`)
    /// join the agent's registry, followed as their lists change.
    pub fn tool_sources(mut self, sources: Vec<Arc<dyn crate::tools::ToolSource>>) -> Self {
        self.sources = sources;
        self
    }

    /// The wired agent: the engine's shared services with the features
    /// plugged in (the plugin services, subagents, `/goal` and Dream's
    /// commands), and the handles to them.
    pub fn build(self) -> WiredAgent {
        let app = self.app;
        let (provider, bus) = (self.provider, self.bus);
        let agent = &app.config.agent;
        let archive = HistoryArchive::new(&app.workspace);
        let consolidator = Consolidator::new(provider.clone(), agent.model.clone(), archive.clone(), ConsolidationSettings::from_config(agent));
        let idle_after = std::time::Duration::from_secs(agent.idle_compact_after_minutes.saturating_mul(60));
        let auto_compact = AutoCompact::new(provider.clone(), agent.model.clone(), archive, idle_after, Arc::new(SystemClock))
            .with_limits(SummaryLimits::from_config(agent));
        // The privileged interfaces (the `message` tool, ...) act on this
        // agent: its bus and its running turns.
        let active = Arc::new(crate::agent::active::ActiveTurns::default());
        let runner = AgentRunner::new(provider);
        // One tracker owns what turns leave running: subagents,
        // consolidation, `/new` archives (closed and awaited by the loop).
        let tasks = tokio_util::task::TaskTracker::new();
        // The MCP servers of the config are tool sources like any other.
        let mcp = Arc::new(app.start_mcp_servers());
        let mut sources = self.sources;
        sources.extend(mcp.sources());
        let tools = if sources.is_empty() { app.tools.clone() } else { app.tools.with_sources(sources) };
        let subagents = Arc::new(SubagentManager::new(agent.clone(), runner.clone(), &tools, app.workspace.clone(), bus.clone(), active.clone()).with_tasks(tasks.clone()));
        let mut services = AgentServices::new(bus.clone(), active.clone(), app.workspace.clone()).with_subagents(subagents.clone());
        if let Some(channels) = self.reachable {
            services = services.with_reachable(channels);
        }
        if let Some(cron) = self.cron {
            services = services.with_cron(cron);
        }
        let services = Arc::new(services);
        // The privileged interfaces of every plugin act on this agent.
        app.runtime.set_services(services.clone());
        let dream = Arc::new(Dream::new(agent.dream.clone(), app.workspace.clone(), app.data.root()));
        // The features' commands, in `/help` order.
        let mut commands = CommandRegistry::default();
        let handlers: Vec<Arc<dyn CommandHandler>> = std::iter::once(Arc::new(GoalCommand) as Arc<dyn CommandHandler>).chain(dream_commands(&dream)).collect();
        for handler in handlers {
            commands.register(handler).expect("the features' command names are distinct");
        }
        let core = AgentCore {
            consolidator,
            auto_compact,
            settings: app.config.agent.clone(),
            runner,
            tools,
            sessions: Arc::new(JsonlStore::new(app.data.sessions_dir())),
            context: ContextBuilder::new(app.workspace.clone()),
            workspace: app.workspace.clone(),
            bus,
            started_at: std::time::Instant::now(),
            active,
            subagents: Some(subagents.clone() as Arc<dyn crate::agent::hooks::Subagents>),
            commands,
            media_root: app.data.root().join("media"),
            last_chat: Arc::new(crate::agent::last_chat::LastChat::open(app.data.root())),
            locks: crate::agent::locks::KeyedLocks::new(),
            tasks,
            archiving: Default::default(),
        };
        WiredAgent { core, services, subagents, dream, mcp }
    }
}
