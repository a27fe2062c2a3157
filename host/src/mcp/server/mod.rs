//! The MCP server: chitin's plugin tools for any MCP client (Claude
//! Desktop, Cursor, Codex, an SDK's client).
//!
//! [`ToolServer`] answers `tools/list` and `tools/call` from a
//! [`ToolRegistry`], so a call from an MCP client takes exactly the path an
//! agent's call takes: the registry repairs and validates the arguments,
//! and the plugin runtime runs the tool in a fresh sandboxed instance with
//! the plugin's grant, the configured workspace and `[limits]`. Served two
//! ways: [`serve_stdio`] (`chitin mcp serve`) and [`http::McpEndpoint`]
//! (the gateway's `/mcp`, streamable HTTP behind the gateway token).
//!
//! What a client sees of a call:
//! - the result as text content, or `isError` with the tool's error, a
//!   trap, a time limit or invalid arguments as text (the client's model
//!   reads it and can retry); an unknown tool is a protocol error;
//! - the plugin's `host.progress` lines as `notifications/progress` when the
//!   request carries a progress token (already bounded and rate-limited by
//!   the runtime, and dropped rather than queued when the client is slow);
//! - `notifications/cancelled` stops the call: the instance is dropped
//!   mid-run, as `/stop` drops an agent's call.
//!
//! Only plugins that need nothing of the agent are served: a plugin asking
//! for a privileged host interface (`messaging`, `schedule`, `goals`,
//! `agents`: the built-in `message`, `cron`, `spawn`, …) acts on a
//! conversation, which an MCP client does not have.

pub mod http;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, InitializeResult, JsonObject, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use rmcp::{ErrorData as McpError, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::sync::{Semaphore, mpsc};

use crate::plugins::{CallContext, ProgressSink};
use crate::tools::{ToolError, ToolRegistry};

/// How many calls run at once by default (`--max-calls`); the others wait
/// their turn. Each is a wasm instance with up to `[limits]`' memory.
pub const DEFAULT_MAX_CALLS: usize = 8;

/// Progress lines waiting to be sent to a slow client; more are dropped.
const PROGRESS_QUEUE: usize = 64;

/// Why the tools could not be served.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum ServeError {
    /// `--tools` named a tool no plugin has.
    #[error("no tool `{name}` to serve; the plugins offer: {}", available.join(", "))]
    UnknownTool { name: String, available: Vec<String> },
    /// `--tools` named a tool that acts on a conversation.
    #[error("`{name}` is not served over MCP: its plugin {plugin} needs the agent (host interface {needs}), and an MCP client has no conversation for it to act on")]
    NeedsAgent { name: String, plugin: String, needs: String },
    /// Nothing would be served.
    #[error("no tool to serve: no installed or built-in plugin offers one that runs without the agent")]
    Nothing,
    /// The transport failed.
    #[error("serving MCP on {transport}: {message}")]
    Transport { transport: &'static str, message: String },
}

/// The tools of `registry` an MCP client may call: every plugin tool that
/// needs nothing of the agent, or only those named in `only`. MCP servers'
/// tools are never passed on (chitin is not a proxy for them).
pub fn served_tools(registry: &ToolRegistry, only: &[String]) -> Result<ToolRegistry, ServeError> {
    let servable = |name: &str| registry.plugin_of(name).is_some_and(|plugin| plugin.manifest.capabilities.host.is_empty());
    for name in only {
        match registry.plugin_of(name) {
            None => {
                let available = registry.names().filter(|n| servable(n)).map(str::to_string).collect();
                return Err(ServeError::UnknownTool { name: name.clone(), available });
            }
            Some(plugin) if !servable(name) => {
                return Err(ServeError::NeedsAgent {
                    name: name.clone(),
                    plugin: plugin.name().to_string(),
                    needs: plugin.manifest.capabilities.host.join(", "),
                });
            }
            Some(_) => {}
        }
    }
    let served = registry.restricted(|name| servable(name) && (only.is_empty() || only.iter().any(|o| o == name)));
    if served.names().next().is_none() {
        return Err(ServeError::Nothing);
    }
    Ok(served)
}

/// An MCP server over a registry's tools. Cheap to clone: the HTTP
/// endpoint makes one per session, all sharing the call limit.
#[derive(Clone)]
pub struct ToolServer {
    inner: Arc<Inner>,
}

struct Inner {
    registry: ToolRegistry,
    /// The `tools/list` answer, built once.
    tools: Vec<Tool>,
    /// Calls running at once, across every session.
    calls: Arc<Semaphore>,
    /// `stdio` or `http`: the calls' chat id, so plugins and logs can tell.
    transport: &'static str,
    next_call: AtomicU64,
}

impl ToolServer {
    /// Serves `registry`'s tools (see [`served_tools`] for choosing them),
    /// at most `max_calls` at once.
    pub fn new(registry: ToolRegistry, max_calls: usize, transport: &'static str) -> ToolServer {
        let tools = registry.names().filter_map(|name| registry.spec(name)).map(mcp_tool).collect();
        let inner = Inner { registry, tools, calls: Arc::new(Semaphore::new(max_calls.max(1))), transport, next_call: AtomicU64::new(1) };
        ToolServer { inner: Arc::new(inner) }
    }

    /// The names of the served tools, sorted.
    pub fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.inner.registry.names()
    }

    /// Runs one call as a client asked for it; `Err` only for what is the
    /// client's mistake (an unknown tool) or a cancellation.
    async fn run(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResult, McpError> {
        let args = Value::Object(request.arguments.unwrap_or_default());
        let call = match self.inner.registry.prepare_call(&request.name, &args) {
            Ok(call) => call,
            Err(e @ ToolError::NotFound { .. }) => return Err(McpError::invalid_params(e.to_string(), None)),
            Err(e) => return Ok(tool_error(&e)),
        };
        let cancelled = context.ct.clone();
        let _permit = tokio::select! {
            permit = self.inner.calls.clone().acquire_owned() => permit.expect("the call limit is never closed"),
            () = cancelled.cancelled() => return Err(cancelled_error(&call.tool)),
        };
        let number = self.inner.next_call.fetch_add(1, Ordering::Relaxed);
        let ctx = CallContext {
            session_key: format!("mcp:{}", self.inner.transport),
            channel: "mcp".into(),
            chat_id: self.inner.transport.into(),
            call_id: format!("mcp-{number}"),
        };
        let (sink, forwarder) = match context.meta.get_progress_token() {
            Some(token) => {
                let (sink, forwarder) = progress_to(context.peer.clone(), token);
                (Some(sink), Some(forwarder))
            }
            None => (None, None),
        };
        let outcome = tokio::select! {
            outcome = self.inner.registry.execute(&call, &ctx, sink) => outcome,
            () = cancelled.cancelled() => {
                // Dropping the call's future drops its instance mid-run.
                tracing::info!(tool = %call.tool, "MCP: call cancelled by the client; its instance was stopped");
                return Err(cancelled_error(&call.tool));
            }
        };
        // Every progress line goes out before the result that ends them.
        if let Some(forwarder) = forwarder {
            let _ = forwarder.await;
        }
        Ok(match outcome {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(e) => {
                tracing::debug!(tool = %call.tool, "MCP: call failed: {e}");
                tool_error(&e)
            }
        })
    }
}

/// A plugin's tool as MCP lists it: `readOnlyHint` from `read_only`, and a
/// tool that writes is not claimed to be harmless (MCP's default for a
/// tool that is not read-only is `destructiveHint: true`).
fn mcp_tool(spec: &crate::plugins::ToolSpec) -> Tool {
    let schema: JsonObject = match &spec.parameters {
        Value::Object(map) => map.clone(),
        _ => JsonObject::from_iter([("type".to_string(), Value::String("object".into()))]),
    };
    Tool::new(spec.name.clone(), spec.description.clone(), Arc::new(schema)).with_annotations(ToolAnnotations::new().read_only(spec.read_only))
}

/// A failed call as an MCP tool error: the client's model reads the text.
fn tool_error(error: &ToolError) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(error.to_string())])
}

fn cancelled_error(tool: &str) -> McpError {
    McpError::internal_error(format!("the call of `{tool}` was cancelled"), None)
}

/// A progress sink for one call that forwards each line as a
/// `notifications/progress` with `token`, and the task doing it, which
/// ends once the sink is dropped (when the call ends) and the queue is
/// sent. A client that reads slowly loses lines, never holds the call.
fn progress_to(peer: rmcp::Peer<RoleServer>, token: rmcp::model::ProgressToken) -> (ProgressSink, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<String>(PROGRESS_QUEUE);
    let forwarder = tokio::spawn(async move {
        let mut step = 0u64;
        while let Some(text) = rx.recv().await {
            step += 1;
            let mut note = ProgressNotificationParam::new(token.clone(), step as f64);
            note.message = Some(text);
            if peer.notify_progress(note).await.is_err() {
                return;
            }
        }
    });
    let sink: ProgressSink = Arc::new(move |text: &str| {
        let _ = tx.try_send(text.to_string());
    });
    (sink, forwarder)
}

impl ServerHandler for ToolServer {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("chitin", env!("CARGO_PKG_VERSION")))
            .with_instructions("chitin's plugin tools. Each call runs in a fresh WebAssembly sandbox with only the files and hosts the user granted the plugin.")
    }

    async fn list_tools(&self, _request: Option<PaginatedRequestParams>, _context: RequestContext<RoleServer>) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.inner.tools.clone()))
    }

    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResponse, McpError> {
        self.run(request, context).await.map(CallToolResponse::from)
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.inner.tools.iter().find(|tool| tool.name == name).cloned()
    }
}

/// Serves `server` on this process's stdin and stdout until the client
/// closes stdin. Nothing else may write to stdout meanwhile (logs go to
/// stderr).
pub async fn serve_stdio(server: ToolServer) -> Result<(), ServeError> {
    let failed = |e: &dyn std::fmt::Display| ServeError::Transport { transport: "stdio", message: e.to_string() };
    let running = server.serve(rmcp::transport::stdio()).await.map_err(|e| failed(&e))?;
    running.waiting().await.map_err(|e| failed(&e))?;
    Ok(())
}
