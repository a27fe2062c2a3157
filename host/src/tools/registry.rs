//! `ToolRegistry`: name lookup, argument repair and JSON Schema validation in
//! front of the plugin runtime.
//!
//! `prepare_call` is deliberately forgiving of how models send arguments and
//! strict about what reaches a plugin: every problem it finds goes back to the
//! model in one message, so the model can fix all of them in one retry.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};

use super::cast::cast;
use super::source::ToolSource;
use crate::plugins::{CallContext, LoadedPlugin, PluginCatalog, PluginError, PluginRuntime, PluginSource, ProgressSink, ToolSpec};

/// Why a tool call did not produce a result. Its text is written for the
/// model: it says what went wrong and how to do better.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum ToolError {
    /// No tool has this name.
    #[error("unknown tool `{name}`.{} Available tools: {}", suggestion.as_ref().map(|s| format!(" Did you mean `{s}`?")).unwrap_or_default(), available.join(", "))]
    NotFound { name: String, suggestion: Option<String>, available: Vec<String> },
    /// The arguments are not a JSON object or do not fit the schema.
    #[error("invalid arguments for `{tool}`: {}", problems.join("; "))]
    InvalidArguments { tool: String, problems: Vec<String> },
    /// The arguments are longer than `[agent] max_tool_args_kb` allows; the
    /// call was not run.
    #[error("the arguments of `{tool}` are {size} bytes, over the limit of {limit} (config [agent] max_tool_args_kb); split the work into smaller calls.")]
    ArgumentsTooLarge { tool: String, size: usize, limit: usize },
    /// The plugin failed, trapped, timed out, or returned its own error.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// The registry's call guard refused the call before it ran (a Dream
    /// run writing outside the memory files).
    #[error("`{tool}` refused: {reason}")]
    Refused { tool: String, reason: String },
    /// Two plugins export the same tool name.
    #[error("tool `{tool}` is defined by both {first} and {second}")]
    Duplicate { tool: String, first: String, second: String },
    /// A tool of a [`ToolSource`] (an MCP server) failed; the text comes
    /// from the source, already bounded and made safe.
    #[error("`{tool}` failed: {message}")]
    External { tool: String, message: String },
}

/// A call whose tool exists and whose arguments passed validation.
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedCall {
    /// The tool's name.
    pub tool: String,
    /// The repaired, validated arguments (a JSON object).
    pub args: Value,
}

struct Entry {
    spec: ToolSpec,
    backend: Backend,
    validator: OnceLock<Result<jsonschema::Validator, String>>,
}

/// What runs a tool: a plugin in the sandbox, or a [`ToolSource`].
#[derive(Clone)]
enum Backend {
    Plugin(Arc<LoadedPlugin>),
    Source(Arc<dyn ToolSource>),
}

impl Entry {
    fn new(spec: ToolSpec, backend: Backend) -> Entry {
        Entry { spec, backend, validator: OnceLock::new() }
    }

    fn plugin(&self) -> Option<&Arc<LoadedPlugin>> {
        match &self.backend {
            Backend::Plugin(plugin) => Some(plugin),
            Backend::Source(_) => None,
        }
    }

    fn owner(&self) -> String {
        match &self.backend {
            Backend::Plugin(plugin) => format!("plugin {}", plugin.name()),
            Backend::Source(source) => source.label().to_string(),
        }
    }
}

/// All tools of all loaded plugins. Cheap to clone (shared inside).
#[derive(Clone)]
pub struct ToolRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    runtime: Arc<PluginRuntime>,
    tools: BTreeMap<String, Entry>,
    /// OpenAI-style function definitions, sorted by name and built once, so
    /// the prompt prefix stays byte-identical for provider prompt caching.
    /// Shared: every model request sends the same allocation.
    definitions: Arc<[Value]>,
    /// Tools left out because another plugin had the name first.
    conflicts: Vec<ToolError>,
    /// Their token estimate, counted on first use (loading the tokenizer
    /// costs tens of milliseconds that a plain tool call should not pay).
    definitions_tokens: OnceLock<usize>,
    /// Their byte length, an upper bound of the count that needs no
    /// tokenizer (see `tokens::Counted`).
    definitions_bound: OnceLock<usize>,
    /// Every call of this registry runs with this directory preopened in
    /// place of the agent's workspace (Dream's staging copy).
    workspace: Option<std::path::PathBuf>,
    /// Checked before every call; an `Err` refuses it with that reason.
    guard: Option<CallGuard>,
    /// The plugin tools alone (the base every refresh starts from).
    plugin_tools: Arc<BTreeMap<String, PluginTool>>,
    /// The clashes between plugins (tool, kept plugin, plugin left out),
    /// reported again by every snapshot.
    plugin_clashes: Arc<[(String, String, String)]>,
    /// Sources followed by [`ToolRegistry::refreshed`], with the generation
    /// each had when this snapshot was built.
    sources: Vec<(Arc<dyn ToolSource>, u64)>,
    /// The newest snapshot built by `refreshed`, so that every turn after
    /// a change does not rebuild it again.
    latest: Mutex<Option<ToolRegistry>>,
    /// A scope's filter ([`ToolRegistry::scoped`]), applied again to every
    /// refreshed snapshot.
    keep: Option<Keep>,
}

/// A plugin's tool: its manifest entry and the plugin.
type PluginTool = (ToolSpec, Arc<LoadedPlugin>);

/// The filter of a scoped registry.
pub type Keep = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// A check every call of a registry passes before it runs: the tool's name
/// and its validated arguments; `Err(reason)` refuses the call.
pub type CallGuard = Arc<dyn Fn(&str, &Value) -> Result<(), String> + Send + Sync>;

impl ToolRegistry {
    /// Registers every tool of every plugin in `catalog`. A tool whose name
    /// is already taken is left out and reported in [`ToolRegistry::conflicts`]:
    /// built-in plugins come first, so an installed plugin can never shadow
    /// `read_file`, and one clash does not stop the host.
    pub fn new(runtime: Arc<PluginRuntime>, catalog: &PluginCatalog) -> Result<ToolRegistry, ToolError> {
        let mut plugin_tools: BTreeMap<String, PluginTool> = BTreeMap::new();
        let mut clashes = Vec::new();
        let ordered = catalog.iter().filter(|p| p.source == PluginSource::Builtin).chain(catalog.iter().filter(|p| p.source != PluginSource::Builtin));
        for plugin in ordered {
            for spec in &plugin.manifest.tools {
                if let Some((_, existing)) = plugin_tools.get(&spec.name) {
                    clashes.push((spec.name.clone(), format!("plugin {}", existing.name()), format!("plugin {} (left out)", plugin.name())));
                    continue;
                }
                plugin_tools.insert(spec.name.clone(), (spec.clone(), plugin.clone()));
            }
        }
        Ok(Self::build(runtime, Arc::new(plugin_tools), clashes.into(), Vec::new(), None))
    }

    /// The plugin tools plus each source's current tools. A source's tool
    /// whose name is taken (by a plugin or an earlier source) is left out
    /// and reported in [`ToolRegistry::conflicts`]: plugins always win.
    fn build(
        runtime: Arc<PluginRuntime>,
        plugin_tools: Arc<BTreeMap<String, PluginTool>>,
        plugin_clashes: Arc<[(String, String, String)]>,
        sources: Vec<Arc<dyn ToolSource>>,
        keep: Option<Keep>,
    ) -> ToolRegistry {
        let mut conflicts: Vec<ToolError> = plugin_clashes
            .iter()
            .map(|(tool, first, second)| ToolError::Duplicate { tool: tool.clone(), first: first.clone(), second: second.clone() })
            .collect();
        let mut tools: BTreeMap<String, Entry> =
            plugin_tools.iter().map(|(name, (spec, plugin))| (name.clone(), Entry::new(spec.clone(), Backend::Plugin(plugin.clone())))).collect();
        let mut followed = Vec::with_capacity(sources.len());
        for source in sources {
            // The generation is read before the list: a change in between
            // makes the next `refreshed` rebuild again, never miss it.
            let generation = source.generation();
            for spec in source.tools() {
                if let Some(existing) = tools.get(&spec.name) {
                    conflicts.push(ToolError::Duplicate {
                        tool: spec.name.clone(),
                        first: existing.owner(),
                        second: format!("{} (left out)", source.label()),
                    });
                    continue;
                }
                tools.insert(spec.name.clone(), Entry::new(spec, Backend::Source(source.clone())));
            }
            followed.push((source, generation));
        }
        if let Some(keep) = &keep {
            tools.retain(|name, _| keep(name));
        }
        let definitions: Arc<[Value]> = tools.values().map(|e| definition(&e.spec)).collect();
        ToolRegistry {
            inner: Arc::new(Inner {
                runtime,
                tools,
                definitions,
                definitions_tokens: OnceLock::new(),
                definitions_bound: OnceLock::new(),
                conflicts,
                workspace: None,
                guard: None,
                plugin_tools,
                plugin_clashes,
                sources: followed,
                latest: Mutex::new(None),
                keep,
            }),
        }
    }

    /// This registry with `sources` followed too (MCP servers' tools).
    pub fn with_sources(&self, sources: Vec<Arc<dyn ToolSource>>) -> ToolRegistry {
        self.rebuild(sources, self.inner.keep.clone())
    }

    /// A scope of this registry (a subagent's): only the tools `keep`
    /// admits, now and after every change of a source's list.
    pub fn scoped(&self, keep: Keep) -> ToolRegistry {
        self.rebuild(self.followed(), Some(keep))
    }

    /// The sources this registry follows.
    fn followed(&self) -> Vec<Arc<dyn ToolSource>> {
        self.inner.sources.iter().map(|(source, _)| source.clone()).collect()
    }

    /// A snapshot of the same plugins, confinement (workspace, guard) and
    /// runtime, over `sources`' current lists, filtered by `keep`.
    fn rebuild(&self, sources: Vec<Arc<dyn ToolSource>>, keep: Option<Keep>) -> ToolRegistry {
        let mut rebuilt = Self::build(self.inner.runtime.clone(), self.inner.plugin_tools.clone(), self.inner.plugin_clashes.clone(), sources, keep);
        let inner = Arc::get_mut(&mut rebuilt.inner).expect("a fresh registry has one owner");
        inner.workspace = self.inner.workspace.clone();
        inner.guard = self.inner.guard.clone();
        rebuilt
    }

    /// The registry as it should be now: this one when no source changed
    /// its tools since it was built, else a snapshot with their current
    /// lists (built once per change). The agent takes one per turn, so a
    /// turn sees one stable set of tools.
    pub fn refreshed(&self) -> ToolRegistry {
        let stale = |registry: &ToolRegistry| registry.inner.sources.iter().any(|(source, generation)| source.generation() != *generation);
        if !stale(self) {
            return self.clone();
        }
        let mut latest = self.inner.latest.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(newer) = latest.as_ref().filter(|newer| !stale(newer)) {
            return newer.clone();
        }
        let newer = self.rebuild(self.followed(), self.inner.keep.clone());
        *latest = Some(newer.clone());
        newer
    }

    /// A registry with only the tools `keep` admits (a subagent's scope):
    /// same plugins and runtime, its own definitions.
    pub fn restricted(&self, keep: impl Fn(&str) -> bool) -> ToolRegistry {
        let tools: BTreeMap<String, Entry> = self
            .inner
            .tools
            .iter()
            .filter(|(name, _)| keep(name))
            .map(|(name, e)| (name.clone(), Entry::new(e.spec.clone(), e.backend.clone())))
            .collect();
        let definitions: Arc<[Value]> = tools.values().map(|e| definition(&e.spec)).collect();
        let inner = Inner {
            runtime: self.inner.runtime.clone(),
            tools,
            definitions,
            conflicts: Vec::new(),
            definitions_tokens: OnceLock::new(),
            definitions_bound: OnceLock::new(),
            workspace: self.inner.workspace.clone(),
            guard: self.inner.guard.clone(),
            // A restricted registry is a fixed scope: it keeps the sources'
            // tools it was given and does not follow their changes.
            plugin_tools: self.inner.plugin_tools.clone(),
            plugin_clashes: self.inner.plugin_clashes.clone(),
            sources: Vec::new(),
            latest: Mutex::new(None),
            keep: None,
        };
        ToolRegistry { inner: Arc::new(inner) }
    }

    /// This registry confined: every call runs with `workspace` preopened
    /// instead of the agent's workspace (same grant level), after `guard`
    /// admitted it. The host enforces both, whatever the model was told.
    pub fn confined(&self, workspace: std::path::PathBuf, guard: CallGuard) -> ToolRegistry {
        let restricted = self.restricted(|_| true);
        let mut inner = Arc::try_unwrap(restricted.inner).unwrap_or_else(|_| unreachable!("a fresh registry has one owner"));
        inner.workspace = Some(workspace);
        inner.guard = Some(guard);
        ToolRegistry { inner: Arc::new(inner) }
    }

    /// Function definitions for the model, sorted by name.
    pub fn definitions(&self) -> &[Value] {
        &self.inner.definitions
    }

    /// Tools left out because their name was taken.
    pub fn conflicts(&self) -> &[ToolError] {
        &self.inner.conflicts
    }

    /// The definitions as a shared slice, for requests.
    pub fn shared_definitions(&self) -> Arc<[Value]> {
        self.inner.definitions.clone()
    }

    /// Token estimate of the definitions.
    pub fn definitions_tokens(&self) -> usize {
        *self.inner.definitions_tokens.get_or_init(|| crate::tokens::estimate_tools(&self.inner.definitions))
    }

    /// An upper bound of [`ToolRegistry::definitions_tokens`], for free.
    pub fn definitions_bound(&self) -> usize {
        *self.inner.definitions_bound.get_or_init(|| crate::tokens::tools_bound(&self.inner.definitions))
    }

    /// Tool names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.inner.tools.keys().map(String::as_str)
    }

    /// A tool's manifest entry.
    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.inner.tools.get(name).map(|e| &e.spec)
    }

    /// The plugin that provides `name` (`None` for a source's tool).
    pub fn plugin_of(&self, name: &str) -> Option<&Arc<LoadedPlugin>> {
        self.inner.tools.get(name).and_then(Entry::plugin)
    }

    /// Who provides `name`: `plugin fs`, `mcp:github`.
    pub fn owner_of(&self, name: &str) -> Option<String> {
        self.inner.tools.get(name).map(Entry::owner)
    }

    /// True when `name`'s results come from the network: a plugin with a
    /// network grant, or a source that says so (a remote MCP server).
    pub fn fetches_network(&self, name: &str) -> bool {
        match self.inner.tools.get(name).map(|e| &e.backend) {
            Some(Backend::Plugin(plugin)) => !plugin.grant.network.is_empty(),
            Some(Backend::Source(source)) => source.fetches_network(),
            None => false,
        }
    }

    /// True when `name` may run in parallel with other such calls.
    pub fn is_concurrency_safe(&self, name: &str) -> bool {
        self.spec(name).is_some_and(|s| s.concurrency_safe)
    }

    /// Looks the tool up and repairs and validates `raw_args`: a JSON string
    /// is parsed, a lone `{"arguments": ...}` wrapper is unwrapped, values are
    /// cast toward the schema, then the schema is checked.
    pub fn prepare_call(&self, name: &str, raw_args: &Value) -> Result<PreparedCall, ToolError> {
        let entry = self.inner.tools.get(name).ok_or_else(|| self.not_found(name))?;
        let invalid = |problems: Vec<String>| ToolError::InvalidArguments { tool: name.to_string(), problems };
        let mut args = match raw_args {
            Value::String(text) if text.trim().is_empty() => json!({}),
            Value::String(text) => serde_json::from_str(text)
                .map_err(|e| invalid(vec![format!("arguments are not valid JSON ({e})")]))?,
            Value::Null => json!({}),
            other => other.clone(),
        };
        args = unwrap_arguments(args);
        if !args.is_object() {
            return Err(invalid(vec![format!("arguments must be a JSON object, got {}", json_kind(&args))]));
        }
        cast(&mut args, &entry.spec.parameters);
        let validator = entry
            .validator
            .get_or_init(|| super::schema::compile(&entry.spec.parameters))
            .as_ref()
            .map_err(|e| invalid(vec![format!("the tool's schema is broken: {e}")]))?;
        let problems: Vec<String> = validator
            .iter_errors(&args)
            .map(|e| {
                let at = e.instance_path().to_string();
                if at.is_empty() { e.to_string() } else { format!("at {at}: {e}") }
            })
            .collect();
        if problems.is_empty() { Ok(PreparedCall { tool: name.to_string(), args }) } else { Err(invalid(problems)) }
    }

    /// Runs a prepared call in the plugin's sandbox.
    pub async fn execute(&self, call: &PreparedCall, ctx: &CallContext, progress: Option<ProgressSink>) -> Result<String, ToolError> {
        let entry = self.inner.tools.get(&call.tool).ok_or_else(|| self.not_found(&call.tool))?;
        if let Some(guard) = &self.inner.guard {
            guard(&call.tool, &call.args).map_err(|reason| ToolError::Refused { tool: call.tool.clone(), reason })?;
        }
        let plugin = match &entry.backend {
            Backend::Plugin(plugin) => plugin,
            Backend::Source(source) => return source.call(&call.tool, &call.args, ctx, progress).await,
        };
        let args = serde_json::to_string(&call.args).expect("a JSON value always serializes");
        let workspace = self.inner.workspace.as_deref();
        Ok(self.inner.runtime.call_in(plugin, &call.tool, &args, ctx, progress, workspace).await?)
    }

    /// `prepare_call`, then the call with `workspace` preopened in place of
    /// the agent's workspace (see [`PluginRuntime::call_in`]).
    pub async fn call_in_workspace(&self, name: &str, raw_args: &Value, ctx: &CallContext, workspace: &std::path::Path) -> Result<String, ToolError> {
        let call = self.prepare_call(name, raw_args)?;
        let entry = self.inner.tools.get(&call.tool).ok_or_else(|| self.not_found(&call.tool))?;
        let Some(plugin) = entry.plugin() else {
            return Err(ToolError::Refused { tool: call.tool.clone(), reason: "only a plugin's tool can run in another workspace".into() });
        };
        let args = serde_json::to_string(&call.args).expect("a JSON value always serializes");
        Ok(self.inner.runtime.call_in(plugin, &call.tool, &args, ctx, None, Some(workspace)).await?)
    }

    /// `prepare_call` then `execute`.
    pub async fn call(&self, name: &str, raw_args: &Value, ctx: &CallContext, progress: Option<ProgressSink>) -> Result<String, ToolError> {
        let call = self.prepare_call(name, raw_args)?;
        self.execute(&call, ctx, progress).await
    }

    fn not_found(&self, name: &str) -> ToolError {
        let available: Vec<String> = self.inner.tools.keys().cloned().collect();
        ToolError::NotFound { name: name.to_string(), suggestion: closest(name, &available), available }
    }
}

/// The one close name, if exactly one is close: two candidates would be a
/// guess, and a wrong guess costs the model a turn.
fn closest(name: &str, candidates: &[String]) -> Option<String> {
    let lower = name.to_ascii_lowercase();
    let close: Vec<&String> = candidates
        .iter()
        .filter(|c| {
            let c = c.to_ascii_lowercase();
            strsim::damerau_levenshtein(&lower, &c) <= 2.max(lower.len() / 4) || c.contains(&lower) || lower.contains(&c)
        })
        .collect();
    match close.as_slice() {
        [one] => Some((*one).clone()),
        _ => None,
    }
}

/// `{"arguments": {...}}` with nothing else is a wrapper some models add.
fn unwrap_arguments(args: Value) -> Value {
    match args {
        Value::Object(mut map) if map.len() == 1 && map.contains_key("arguments") => {
            match map.remove("arguments").expect("checked above") {
                Value::String(text) => serde_json::from_str(&text).unwrap_or(Value::String(text)),
                inner => inner,
            }
        }
        other => other,
    }
}

/// What a JSON value is, for messages: "a string", "an array", … (the
/// gateway's request validation words its errors the same way).
pub fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn definition(spec: &ToolSpec) -> Value {
    json!({
        "type": "function",
        "function": { "name": spec.name, "description": spec.description, "parameters": spec.parameters }
    })
}

/// The tool definitions sent with a request.
impl crate::tokens::Counted for ToolRegistry {
    fn bound(&self) -> usize {
        self.definitions_bound()
    }
    fn exact(&self) -> usize {
        self.definitions_tokens()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_only_a_single_close_name() {
        let names: Vec<String> = ["read_file", "write_file", "list_dir", "grep"].iter().map(|s| s.to_string()).collect();
        assert_eq!(closest("read_fle", &names).as_deref(), Some("read_file"));
        assert_eq!(closest("listdir", &names).as_deref(), Some("list_dir"));
        assert_eq!(closest("xyz_file", &names), None, "ambiguous or far: no guess");
        assert_eq!(closest("deploy", &names), None);
    }

    #[test]
    fn unwraps_a_lone_arguments_key() {
        assert_eq!(unwrap_arguments(json!({"arguments": {"a": 1}})), json!({"a": 1}));
        assert_eq!(unwrap_arguments(json!({"arguments": "{\"a\":1}"})), json!({"a": 1}));
        assert_eq!(unwrap_arguments(json!({"arguments": 1, "b": 2})), json!({"arguments": 1, "b": 2}));
    }
}
