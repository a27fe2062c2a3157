//! Errors of the plugin runtime.
//!
//! A guest misbehaving (trap, timeout, out of memory, panic, oversized output)
//! is an ordinary error value whose message is written for the model and the
//! user: what happened, which limit, what to try. The host itself never panics
//! on plugin input.

use std::path::PathBuf;

/// Everything that can go wrong loading or calling a plugin.
#[derive(Debug, thiserror::Error)]
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
    /// Two plugins define the same plugin or tool name.
    #[error("{0}")]
    Conflict(String),
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
    #[error("tool `{tool}` of plugin {plugin} was stopped after {limit_ms} ms (time limit; config [limits] timeout_ms)")]
    Timeout { plugin: String, tool: String, limit_ms: u64 },
    /// The guest tried to grow its memory past the cap.
    #[error("tool `{tool}` of plugin {plugin} ran out of memory (limit {limit_mb} MiB; config [limits] memory_mb)")]
    OutOfMemory { plugin: String, tool: String, limit_mb: u64 },
    /// The guest held more host resources than the call may.
    #[error("tool `{tool}` of plugin {plugin} opened more than {limit} host resources at once (files, streams, HTTP requests and headers; config [limits] max_resources)")]
    TooManyResources { plugin: String, tool: String, limit: u32 },
    /// The guest called `exit` instead of returning.
    #[error("tool `{tool}` of plugin {plugin} exited with status {code} instead of returning a result")]
    Exited { plugin: String, tool: String, code: i32 },
    /// The guest recursed too deep.
    #[error("tool `{tool}` of plugin {plugin} overflowed its stack (recursion too deep)")]
    StackOverflow { plugin: String, tool: String },
    /// The guest panicked; `message` is its panic text when it printed one.
    #[error("tool `{tool}` of plugin {plugin} panicked: {message}")]
    Panicked { plugin: String, tool: String, message: String },
    /// Any other trap.
    #[error("tool `{tool}` of plugin {plugin} crashed: {message}")]
    Trap { plugin: String, tool: String, message: String },
    /// The result was larger than the output cap.
    #[error("tool `{tool}` of plugin {plugin} returned {size} bytes, over the {limit} byte limit (config [limits] max_output_kb); ask for less output")]
    OutputTooLarge { plugin: String, tool: String, size: usize, limit: usize },
    /// The tool ran and returned its own typed error.
    #[error("{kind}: {message}")]
    Tool { kind: ToolFailure, message: String },
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
