//! Errors of the plugin runtime.
//!
//! A guest misbehaving (trap, timeout, out of memory, panic, oversized output)
//! is an ordinary error value whose message is written for the model and the
//! user: what happened, which limit, what to try. The host itself never panics
//! on plugin input.

use std::path::PathBuf;

/// Everything that can go wrong loading or calling a plugin.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum PluginError {
    /// The engine could not be configured (a host problem, not a plugin's).
    #[error("cannot start the plugin engine: {0}")]
    Engine(String),
    /// A plugin file could not be read.
    #[error("cannot read plugin {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// The file is not a component, or its manifest is missing or invalid.
    #[error("plugin {plugin}: {source}")]
    Manifest { plugin: String, source: super::manifest::ManifestError },
    /// The plugin's `[plugins.<name>]` table is wrong for it (a secret it
    /// does not declare, a bad `api_base`, `${VAR}` in a setting).
    #[error("plugin {plugin}: {message}")]
    Config { plugin: String, message: String },
    /// Two plugins define the same plugin or tool name.
    #[error("{0}")]
    Conflict(String),
    /// A plugin installed from an index does not match `chitin.lock` (a
    /// changed or missing file, another name inside).
    #[error("{}: {message}", path.display())]
    Installed { path: PathBuf, message: String },
    /// Preparing the plugin failed earlier in this process (the first
    /// failure is kept, so a bad component is not recompiled on every call).
    #[error(transparent)]
    Prepare(std::sync::Arc<PluginError>),
    /// The component is past a size or complexity cap and is not compiled.
    #[error("plugin {plugin} is refused: {message}")]
    TooComplex { plugin: String, message: String },
    /// Cranelift could not compile the component.
    #[error("plugin {plugin} does not compile: {message}")]
    Compile { plugin: String, message: String },
    /// The component's imports cannot be satisfied (wrong WIT version, an
    /// interface the host does not offer).
    #[error("plugin {plugin} cannot be linked: {message}")]
    Link { plugin: String, message: String },
    /// The workspace could not be opened for the sandbox.
    #[error("cannot open workspace {path} for plugin {plugin}: {message}")]
    Workspace { plugin: String, path: PathBuf, message: String },
    /// The call ran past its deadline and was stopped.
    #[error("{call} of plugin {plugin} was stopped after {limit_ms} ms (time limit; config [limits] timeout_ms)")]
    Timeout { plugin: String, call: Call, limit_ms: u64 },
    /// The guest tried to grow its memory past the cap.
    #[error("{call} of plugin {plugin} ran out of memory (limit {limit_mb} MiB; config [limits] memory_mb)")]
    OutOfMemory { plugin: String, call: Call, limit_mb: u64 },
    /// The guest held more host resources than the call may.
    #[error("{call} of plugin {plugin} opened more than {limit} host resources at once (files, streams, HTTP requests and headers; config [limits] max_resources)")]
    TooManyResources { plugin: String, call: Call, limit: u32 },
    /// The guest called `exit` instead of returning.
    #[error("{call} of plugin {plugin} exited with status {code} instead of returning a result")]
    Exited { plugin: String, call: Call, code: i32 },
    /// The guest recursed too deep.
    #[error("{call} of plugin {plugin} overflowed its stack (recursion too deep)")]
    StackOverflow { plugin: String, call: Call },
    /// The guest panicked; `message` is its panic text when it printed one.
    #[error("{call} of plugin {plugin} panicked: {message}")]
    Panicked { plugin: String, call: Call, message: String },
    /// The guest's language runtime (Python, JavaScript) aborted on an
    /// exception the plugin did not catch; `message` is the exception.
    #[error("{call} of plugin {plugin} raised an uncaught exception: {message}")]
    Exception { plugin: String, call: Call, message: String },
    /// Any other trap.
    #[error("{call} of plugin {plugin} crashed: {message}")]
    Trap { plugin: String, call: Call, message: String },
    /// The result was larger than the output cap.
    #[error("{call} of plugin {plugin} returned {size} bytes, over the {limit} byte limit (config [limits] max_output_kb); ask for less output")]
    OutputTooLarge { plugin: String, call: Call, size: usize, limit: usize },
    /// The tool ran and returned its own typed error.
    #[error("{kind}: {message}")]
    Tool { kind: ToolFailure, message: String },
    /// The plugin was asked for something its world does not export (a tool
    /// call to a channel plugin, a channel callback to a tool plugin).
    #[error("plugin {plugin} is a {world} plugin; it has no {wanted}")]
    WrongWorld { plugin: String, world: super::world::World, wanted: &'static str },
    /// A channel callback returned a state blob past the cap; the state is
    /// not committed.
    #[error("{call} of plugin {plugin} returned a state of {size} bytes, over the {limit} byte limit; the state is not committed")]
    StateTooLarge { plugin: String, call: Call, size: usize, limit: usize },
    /// A channel callback returned more actions than a step may carry.
    #[error("{call} of plugin {plugin} returned {count} actions, over the limit of {limit} per step; nothing of the step is kept")]
    TooManyActions { plugin: String, call: Call, count: usize, limit: usize },
    /// A text or byte field of a channel callback's result is past its cap.
    #[error("{call} of plugin {plugin} returned {field} of {size} bytes, over the {limit} byte limit; nothing of the step is kept")]
    FieldTooLarge { plugin: String, call: Call, field: String, size: usize, limit: usize },
    /// A channel callback's result breaks a rule of the step (a `respond`
    /// outside `on-webhook`, a URL that is not http(s), too many headers).
    #[error("{call} of plugin {plugin} returned an invalid {field}: {message}; nothing of the step is kept")]
    InvalidStep { plugin: String, call: Call, field: String, message: String },
    /// The channel callback ran and returned its own error.
    #[error("{call} of plugin {plugin} failed ({kind}): {message}")]
    Channel { plugin: String, call: Call, kind: ChannelFailure, message: String },
}

/// What a failed call was, for the error text: a tool or a channel callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `tool.invoke` of this tool.
    Tool(String),
    /// A callback of the `channel` interface (`poll-response`, ...).
    Channel(&'static str),
    /// Instantiating the component once at install, calling nothing.
    Instantiate,
}

impl std::fmt::Display for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Call::Tool(name) => write!(f, "tool `{name}`"),
            Call::Channel(callback) => write!(f, "channel callback `{callback}`"),
            Call::Instantiate => f.write_str("instantiating the component"),
        }
    }
}

/// The cases of the WIT `channel-error` variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelFailure {
    /// Try again later.
    Transient,
    /// Stop the channel; do not restart it.
    Fatal,
}

impl std::fmt::Display for ChannelFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ChannelFailure::Transient => "transient",
            ChannelFailure::Fatal => "fatal",
        })
    }
}

/// The cases of the WIT `tool-error` variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFailure {
    /// The plugin has no such tool.
    UnknownTool,
    /// The plugin rejected the arguments.
    InvalidArgs,
    /// The tool failed.
    Failed,
    /// The sandbox refused the tool something.
    Denied,
}

impl std::fmt::Display for ToolFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ToolFailure::UnknownTool => "unknown tool",
            ToolFailure::InvalidArgs => "invalid arguments",
            ToolFailure::Failed => "error",
            ToolFailure::Denied => "denied",
        })
    }
}
