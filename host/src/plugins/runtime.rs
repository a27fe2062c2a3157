//! The plugin runtime: loads components, prepares them once, and runs every
//! call in a fresh, sandboxed instance.
//!
//! Lifecycle, cheapest first:
//! 1. [`PluginRuntime::load`] reads the manifest (a parser pass, no compile)
//!    and resolves the grant. Startup with many plugins costs only this.
//! 2. The first call to a plugin (or `chitin plugin install`) compiles it —
//!    in a child process with CPU and memory limits, see [`super::compile`] —
//!    or loads the artifact the host cached, and links an `InstancePre`; both
//!    are kept for the process lifetime. The call's deadline starts after.
//! 3. Every call: a new `Store` with its own WASI context, limits and
//!    deadline; instantiate from the `InstancePre` (pooling: microseconds);
//!    invoke; drop. Nothing survives to the next call.
//!
//! The world a component implements (`tool-plugin` of 0.1.0 or 0.2.0,
//! `channel-plugin` of 0.2.0) is read from its exports at load
//! ([`super::world`]); `prepare` links the matching `InstancePre`. Tool calls
//! are in [`super::tool`], channel callbacks in [`super::channel`]; both use
//! the store, limits and failure naming here.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;
use wasmtime::component::Linker;
use wasmtime::{Engine, Store, Trap, UpdateDeadline};

use super::bindings::{v0_1, v0_2};
use super::error::Call;
use super::cache::{ComponentCache, ContentHash, content_hash};
use super::compile::{self, Isolation};
use super::engine::{EpochTicker, build_engine};
use super::grants::{Grant, GrantConfig};
use super::limits::Limits;
use super::manifest::Manifest;
use super::sandbox::{self, ProgressSink, StoreState};
use super::world::World;
use super::PluginError;

/// Where a plugin came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PluginSource {
    /// Compiled into the `chitin` binary (first-party).
    Builtin,
    /// A `.wasm` file.
    File(PathBuf),
}

impl std::fmt::Display for PluginSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PluginSource::Builtin => f.write_str("built-in"),
            PluginSource::File(p) => write!(f, "{}", p.display()),
        }
    }
}

pub use super::tool::CallContext;

/// A loaded plugin: manifest, grant, and its compiled form once needed.
pub struct LoadedPlugin {
    /// The validated manifest.
    pub manifest: Manifest,
    /// Where it was loaded from.
    pub source: PluginSource,
    /// What it may do.
    pub grant: Grant,
    /// Capabilities it asked for and did not get, one note each.
    pub grant_notes: Vec<String>,
    /// The world it implements, read from its exports.
    pub world: World,
    name: Arc<str>,
    hash: ContentHash,
    bytes: ComponentBytes,
    prepared: tokio::sync::OnceCell<Result<Prepared, Arc<PluginError>>>,
    outbound: std::sync::OnceLock<Arc<super::http::Outbound>>,
    /// `[plugins.<name>.settings]` as JSON, for the component's environment.
    settings: Option<Arc<str>>,
}

/// A component linked for its world: what every call instantiates from.
pub(super) enum Prepared {
    ToolV0_1(v0_1::ToolPluginPre<StoreState>),
    ToolV0_2(v0_2::tool::ToolPluginPre<StoreState>),
    ChannelV0_2(v0_2::channel::ChannelPluginPre<StoreState>),
}

impl LoadedPlugin {
    /// Gives the plugin's own `wasi:http` requests `outbound` (secrets and
    /// the origin rewrite of the channel it serves); set once, by the channel
    /// manager when it starts the channel (a tool plugin's comes from its
    /// `[plugins.<name>]` table at load). Returns false if already set.
    pub fn set_outbound(&self, outbound: super::http::Outbound) -> bool {
        self.outbound.set(Arc::new(outbound)).is_ok()
    }

    /// For each secret of a tool plugin's manifest: its name, and why it
    /// has no value (`None` when the config gives one).
    pub fn secret_status(&self) -> Vec<(&str, Option<String>)> {
        let secrets = self.outbound.get().map(|o| &o.secrets);
        self.manifest
            .secrets
            .iter()
            .map(|s| (s.name.as_str(), secrets.map_or(Some("not configured".to_string()), |x| x.unavailable_reason(&s.name).map(str::to_string))))
            .collect()
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Size of the component in bytes.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }
}

/// A component's bytes: a built-in's are the binary's own, borrowed (never
/// copied: a process that does not compile it never reads them), any other
/// plugin's are read into memory.
#[derive(Clone)]
pub enum ComponentBytes {
    /// Embedded in the binary.
    Static(&'static [u8]),
    /// Read from a file.
    Shared(Arc<[u8]>),
}

impl std::ops::Deref for ComponentBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            ComponentBytes::Static(bytes) => bytes,
            ComponentBytes::Shared(bytes) => bytes,
        }
    }
}

impl From<Arc<[u8]>> for ComponentBytes {
    fn from(bytes: Arc<[u8]>) -> Self {
        ComponentBytes::Shared(bytes)
    }
}

/// Settings the runtime is built from.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// The directory preopened for plugins granted workspace access.
    pub workspace: PathBuf,
    /// Where compiled components are cached; `None` disables the cache.
    pub cache_dir: Option<PathBuf>,
    /// Per-call limits.
    pub limits: Limits,
}

/// The engine, linker and cache shared by all plugins of a process. Cheap to
/// share behind an `Arc`; all methods take `&self`.
pub struct PluginRuntime {
    engine: Engine,
    linker: Linker<StoreState>,
    cache: ComponentCache,
    workspace: PathBuf,
    limits: Limits,
    isolation: Isolation,
    slots: Semaphore,
    /// The agent behind the privileged interfaces, once it exists.
    services: std::sync::RwLock<Option<Arc<dyn super::services::HostServices>>>,
    _ticker: EpochTicker,
}

impl PluginRuntime {
    /// Builds the engine and linker and starts the epoch ticker; plugins are
    /// compiled in process (for tests and benchmarks over trusted components).
    pub fn new(config: RuntimeConfig) -> Result<PluginRuntime, PluginError> {
        Self::build(config, Isolation::InProcess)
    }

    /// [`PluginRuntime::new`] compiling in a child process running `program`
    /// (the `chitin` binary) under the `[limits]` compile caps, when given;
    /// the CLI's runtime. This engine then has no compiler at all: it only
    /// loads what the child compiled, and a process that compiles nothing
    /// does not pay for setting Cranelift up.
    pub fn with_isolation(config: RuntimeConfig, compile_child: Option<PathBuf>) -> Result<PluginRuntime, PluginError> {
        Self::build(config, compile_child.map_or(Isolation::InProcess, Isolation::Child))
    }

    fn build(config: RuntimeConfig, isolation: Isolation) -> Result<PluginRuntime, PluginError> {
        let engine = build_engine(&config.limits, matches!(isolation, Isolation::InProcess))?;
        let mut linker = Linker::new(&engine);
        sandbox::add_to_linker(&mut linker).map_err(|e| PluginError::Engine(format!("{e:#}")))?;
        Ok(PluginRuntime {
            cache: ComponentCache::new(&engine, config.cache_dir),
            _ticker: EpochTicker::start(&engine),
            slots: Semaphore::new(config.limits.max_concurrent_calls.max(1) as usize),
            workspace: config.workspace,
            limits: config.limits,
            isolation,
            services: std::sync::RwLock::new(None),
            engine,
            linker,
        })
    }

    /// Compiles components in a child process: `program` (the `chitin`
    /// binary) run as a compile child under the `[limits]` compile caps. The
    /// CLI always does this (through [`PluginRuntime::with_isolation`], whose
    /// engine has no compiler); in-process compiling is for trusted fixtures.
    pub fn with_compile_child(mut self, program: PathBuf) -> Self {
        self.isolation = Isolation::Child(program);
        self
    }

    /// Installs the agent that serves the privileged interfaces, when the
    /// agent is built (the latest one wins). Until then, and in a runtime
    /// without an agent, granted calls fail with
    /// [`super::services::NO_SERVICES`].
    pub fn set_services(&self, services: Arc<dyn super::services::HostServices>) {
        *self.services.write().expect("services lock") = Some(services);
    }

    /// The workspace preopened for granted plugins.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The per-call limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Deletes the compiled form of `bytes` from the cache (a plugin removed
    /// with `--purge`).
    pub fn forget_compiled(&self, bytes: &[u8]) {
        self.cache.remove(&content_hash(bytes));
    }

    /// Reads and validates a plugin without compiling it.
    pub fn load(&self, source: PluginSource, bytes: Arc<[u8]>, grants: &GrantConfig) -> Result<LoadedPlugin, PluginError> {
        let (manifest, world) = read_manifest(&source, &bytes)?;
        let hash = content_hash(&bytes);
        Self::loaded(source, bytes.into(), hash, manifest, world, grants)
    }

    /// Validates a first-party plugin without compiling it, or copying or
    /// hashing its bytes (the build script hashed them).
    pub fn load_builtin(&self, builtin: &'static super::catalog::Builtin, grants: &GrantConfig) -> Result<LoadedPlugin, PluginError> {
        let (manifest, world) = read_builtin_manifest(builtin.bytes)?;
        Self::loaded(PluginSource::Builtin, ComponentBytes::Static(builtin.bytes), builtin.hash, manifest, world, grants)
    }

    /// Reads a plugin file and loads it with the grant `grants` gives its name.
    pub fn load_file(&self, path: &Path, grants: impl FnOnce(&str) -> GrantConfig) -> Result<LoadedPlugin, PluginError> {
        let bytes: Arc<[u8]> = std::fs::read(path).map_err(|source| PluginError::Io { path: path.to_path_buf(), source })?.into();
        let source = PluginSource::File(path.to_path_buf());
        let (manifest, world) = read_manifest(&source, &bytes)?;
        let grant = grants(&manifest.name);
        let hash = content_hash(&bytes);
        Self::loaded(source, bytes.into(), hash, manifest, world, &grant)
    }

    /// A plugin of `manifest` under its `[plugins.<name>]` table `grants`;
    /// fails when that table's secrets, `api_base` or settings do not fit
    /// the plugin (see [`super::configured`]).
    fn loaded(
        source: PluginSource,
        bytes: ComponentBytes,
        hash: ContentHash,
        manifest: Manifest,
        world: World,
        grants: &GrantConfig,
    ) -> Result<LoadedPlugin, PluginError> {
        let (grant, grant_notes) = Grant::resolve(&manifest.name, &manifest.capabilities, grants);
        let outbound = std::sync::OnceLock::new();
        if let Some(tool_outbound) = super::configured::outbound(&manifest, grants)? {
            let _ = outbound.set(Arc::new(tool_outbound));
        }
        let settings = super::configured::settings_json(&manifest.name, grants)?.map(Arc::from);
        Ok(LoadedPlugin {
            name: manifest.name.as_str().into(),
            hash,
            manifest,
            source,
            grant,
            grant_notes,
            world,
            bytes,
            prepared: tokio::sync::OnceCell::new(),
            outbound,
            settings,
        })
    }

    /// Compiles (or loads from cache) and links `plugin`, once. Calls do this
    /// on demand; `chitin plugin install` and callers that want it off the
    /// call path invoke it up front.
    pub async fn prepare(&self, plugin: &LoadedPlugin) -> Result<(), PluginError> {
        self.prepared(plugin).await.map(|_| ())
    }

    /// Prepares `plugin`, then instantiates it once in a fresh sandbox (an
    /// empty workspace, no grant used) and drops the instance without
    /// calling any export (`chitin plugin install`): a component that links
    /// but cannot be instantiated (a data segment that does not fit its
    /// memory, a start function that traps) is refused at install, not at
    /// its first call. Under the call time limit, like any call.
    pub async fn check_instantiate(&self, plugin: &LoadedPlugin) -> Result<(), PluginError> {
        let pre = self.prepared(plugin).await?;
        let empty = tempfile::tempdir().map_err(|source| PluginError::Io { path: std::env::temp_dir(), source })?;
        let mut store = self.new_store_in(plugin, None, true, Some(empty.path()))?;
        let clock = store.data().clock.clone();
        let run = async {
            match pre {
                Prepared::ToolV0_1(pre) => pre.instantiate_async(&mut store).await.map(drop),
                Prepared::ToolV0_2(pre) => pre.instantiate_async(&mut store).await.map(drop),
                Prepared::ChannelV0_2(pre) => pre.instantiate_async(&mut store).await.map(drop),
            }
        };
        let outcome = sandbox::timeout_with_pauses(self.limits.timeout(), &clock, run).await;
        self.settle(plugin, &Call::Instantiate, outcome, &store)
    }

    pub(super) async fn prepared<'a>(&self, plugin: &'a LoadedPlugin) -> Result<&'a Prepared, PluginError> {
        // A failure is kept too: a component that does not compile (a bomb
        // stopped at its CPU limit) is not compiled again on every call.
        let prepared = plugin.prepared.get_or_init(|| async { self.compile_and_link(plugin).await.map_err(Arc::new) }).await;
        prepared.as_ref().map_err(|e| PluginError::Prepare(e.clone()))
    }

    /// The cached artifact if the host wrote one, else a fresh compile (then
    /// cached), linked against this runtime's interfaces.
    async fn compile_and_link(&self, plugin: &LoadedPlugin) -> Result<Prepared, PluginError> {
        let started = Instant::now();
        let (component, hit) = match self.cache.lookup(&self.engine, &plugin.hash) {
            Some(component) => (component, true),
            None => {
                let (component, artifact) = compile::compile(&self.engine, &self.isolation, &self.limits, &plugin.name, &plugin.bytes).await?;
                self.cache.store(&plugin.hash, &artifact);
                (component, false)
            }
        };
        let link = || -> wasmtime::Result<Prepared> {
            let pre = self.linker.instantiate_pre(&component)?;
            Ok(match plugin.world {
                World::ToolV0_1 => Prepared::ToolV0_1(v0_1::ToolPluginPre::new(pre)?),
                World::ToolV0_2 => Prepared::ToolV0_2(v0_2::tool::ToolPluginPre::new(pre)?),
                World::ChannelV0_2 => Prepared::ChannelV0_2(v0_2::channel::ChannelPluginPre::new(pre)?),
            })
        };
        let pre = link().map_err(|e| PluginError::Link { plugin: plugin.name.to_string(), message: format!("{e:#}") })?;
        tracing::debug!(plugin = %plugin.name, world = %plugin.world, cache_hit = hit, ms = started.elapsed().as_secs_f64() * 1e3, "plugin prepared");
        Ok(pre)
    }

    /// A fresh store for one call to `plugin`: its sandbox, the memory and
    /// table limiter, and the epoch deadline of `[limits] timeout_ms`.
    pub(super) fn new_store(&self, plugin: &LoadedPlugin, progress: Option<ProgressSink>, read_only: bool) -> Result<Store<StoreState>, PluginError> {
        self.new_store_in(plugin, progress, read_only, None)
    }

    /// [`PluginRuntime::new_store`] preopening `workspace` (default: the runtime's).
    pub(super) fn new_store_in(&self, plugin: &LoadedPlugin, progress: Option<ProgressSink>, read_only: bool, workspace: Option<&Path>) -> Result<Store<StoreState>, PluginError> {
        let workspace = workspace.unwrap_or(&self.workspace);
        let mut state = StoreState::new(
            &plugin.name,
            &plugin.grant,
            workspace,
            &self.limits,
            progress,
            read_only,
            plugin.outbound.get().cloned(),
            plugin.settings.as_deref(),
        )?;
        state.privileged = sandbox::Privileged {
            asked: plugin.manifest.capabilities.host.iter().filter_map(|n| super::services::HostInterface::parse(n).ok()).collect(),
            granted: plugin.grant.host.clone(),
            chats: plugin.grant.chats.clone(),
            services: self.services.read().expect("services lock").clone(),
            ..Default::default()
        };
        let clock = state.clock.clone();
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        let deadline = Instant::now() + self.limits.timeout();
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            Ok(if Instant::now() >= deadline + clock.extension() { UpdateDeadline::Interrupt } else { UpdateDeadline::Yield(1) })
        });
        Ok(store)
    }

    /// Waits for a call slot (`[limits] max_concurrent_calls`).
    pub(super) async fn slot(&self) -> tokio::sync::SemaphorePermit<'_> {
        self.slots.acquire().await.expect("the call semaphore is never closed")
    }

    /// The outcome of a guest call run under `tokio::time::timeout` (see
    /// [`PluginRuntime::call`]): the guest's value, or the trap or timeout
    /// named. Reports the text the guest's budget dropped.
    pub(super) fn settle<T>(
        &self,
        plugin: &LoadedPlugin,
        call: &Call,
        outcome: Result<wasmtime::Result<T>, tokio::time::error::Elapsed>,
        store: &Store<StoreState>,
    ) -> Result<T, PluginError> {
        store.data().report_dropped_text();
        match outcome {
            Err(_elapsed) => Err(Failure::Timeout.into_error(&plugin.name, call.clone(), &self.limits)),
            Ok(Err(trap)) => Err(classify(&trap, store.data()).into_error(&plugin.name, call.clone(), &self.limits)),
            Ok(Ok(value)) => Ok(value),
        }
    }
}

/// The manifest and the world of a component, checked against each other,
/// without compiling it.
fn read_manifest(source: &PluginSource, bytes: &[u8]) -> Result<(Manifest, World), PluginError> {
    let error = |e| PluginError::Manifest { plugin: source.to_string(), source: e };
    let manifest = Manifest::from_component(bytes).map_err(error)?;
    let world = World::detect(bytes).map_err(error)?;
    world.check(&manifest).map_err(error)?;
    Ok((manifest, world))
}

/// [`read_manifest`] for a first-party plugin (see
/// [`Manifest::from_builtin_component`]).
fn read_builtin_manifest(bytes: &[u8]) -> Result<(Manifest, World), PluginError> {
    let error = |e| PluginError::Manifest { plugin: PluginSource::Builtin.to_string(), source: e };
    let manifest = Manifest::from_builtin_component(bytes).map_err(error)?;
    let world = World::detect(bytes).map_err(error)?;
    world.check(&manifest).map_err(error)?;
    Ok((manifest, world))
}

/// Bytes of a plugin's own error text passed on (to the model, the session,
/// the terminal): enough for any useful message, never a flood.
pub const MAX_ERROR_BYTES: usize = 16 * 1024;

/// Why a call failed, before it is worded.
pub(super) enum Failure {
    Timeout,
    OutOfMemory,
    Resources,
    Exited(i32),
    StackOverflow,
    Panicked(String),
    Exception(String),
    Trap(String),
    OutputTooLarge(usize),
}

impl Failure {
    pub(super) fn into_error(self, plugin: &str, call: Call, limits: &Limits) -> PluginError {
        let (plugin, tool) = (plugin.to_string(), call);
        match self {
            Failure::Timeout => PluginError::Timeout { plugin, call: tool, limit_ms: limits.timeout_ms },
            Failure::OutOfMemory => PluginError::OutOfMemory { plugin, call: tool, limit_mb: limits.memory_mb },
            Failure::Resources => PluginError::TooManyResources { plugin, call: tool, limit: limits.max_resources },
            Failure::Exited(code) => PluginError::Exited { plugin, call: tool, code },
            Failure::StackOverflow => PluginError::StackOverflow { plugin, call: tool },
            Failure::Panicked(message) => PluginError::Panicked { plugin, call: tool, message },
            Failure::Exception(message) => PluginError::Exception { plugin, call: tool, message },
            Failure::Trap(message) => PluginError::Trap { plugin, call: tool, message },
            Failure::OutputTooLarge(size) => PluginError::OutputTooLarge { plugin, call: tool, size, limit: limits.max_output_bytes() },
        }
    }
}

/// Names the cause of a trap from the trap code, the limiter's record and
/// what the guest printed to stderr before dying.
fn classify(error: &wasmtime::Error, state: &StoreState) -> Failure {
    if state.limiter.memory_exhausted {
        return Failure::OutOfMemory;
    }
    if let Some(exit) = error.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return Failure::Exited(exit.0);
    }
    if error.chain().any(|e| matches!(e.downcast_ref::<wasmtime::component::ResourceTableError>(), Some(wasmtime::component::ResourceTableError::Full))) {
        return Failure::Resources;
    }
    let stderr = state.stderr.text();
    let exception = super::guest_errors::uncaught_exception(&stderr);
    match error.downcast_ref::<Trap>() {
        Some(Trap::Interrupt) => Failure::Timeout,
        Some(Trap::StackOverflow) => Failure::StackOverflow,
        _ if stderr.contains("memory allocation of") => Failure::OutOfMemory,
        // Language runtimes report an exception the plugin did not catch on
        // stderr and then abort; the exception is what the model needs.
        _ if exception.is_some() => Failure::Exception(exception.unwrap_or_default()),
        _ if stderr.contains("panicked") => Failure::Panicked(panic_message(&stderr)),
        Some(Trap::MemoryOutOfBounds) => Failure::Trap(with_stderr(
            "out of bounds memory access (a bug in the plugin, or its stack ran out in deep recursion)".into(),
            &stderr,
        )),
        Some(trap) => Failure::Trap(with_stderr(trap.to_string(), &stderr)),
        None => Failure::Trap(with_stderr(format!("{error:#}"), &stderr)),
    }
}

/// The lines of a Rust panic report after "panicked at ...".
fn panic_message(stderr: &str) -> String {
    let report = &stderr[stderr.find("panicked").unwrap_or(0)..];
    let mut lines = report.lines();
    let location = lines.next().unwrap_or_default().trim_start_matches("panicked at ").trim_end_matches(':');
    let message: Vec<&str> = lines.take_while(|l| !l.starts_with("note:")).collect();
    let message = message.join("\n");
    let text = if message.trim().is_empty() { location.to_string() } else { format!("{} (at {location})", message.trim()) };
    crate::text::clip_for_terminal(&text, MAX_ERROR_BYTES, "panic message")
}

fn with_stderr(message: String, stderr: &str) -> String {
    let tail = stderr.trim();
    if tail.is_empty() { message } else { format!("{message}; stderr: {}", crate::text::clip_for_terminal(tail, 500, "stderr")) }
}

