//! Tools that do not come from a plugin: a source outside the sandbox (an
//! MCP server) offers a list of tools that may change while the host runs.
//!
//! The registry declares this trait and the feature implements it
//! (`crate::mcp::client`), so the module graph stays one-way: `tools` knows
//! nothing of MCP.

use std::future::Future;
use std::pin::Pin;

use serde_json::Value;

use super::ToolError;
use crate::plugins::{CallContext, ProgressSink, ToolSpec};

/// A call's future, boxed so the trait stays object-safe.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = Result<String, ToolError>> + Send + 'a>>;

/// A set of tools served by something other than a plugin.
///
/// The registry snapshots [`ToolSource::tools`] and rebuilds its snapshot
/// when [`ToolSource::generation`] moves (a server's `tools/list_changed`),
/// so one turn sees one stable list and the prompt prefix stays cacheable.
pub trait ToolSource: Send + Sync {
    /// Who serves these tools, for conflicts and `chitin tool list`
    /// (`mcp:github`).
    fn label(&self) -> &str;

    /// Moves whenever [`ToolSource::tools`] would answer differently.
    fn generation(&self) -> u64;

    /// The tools offered now, with the names the model sees (already
    /// unique to this source, e.g. `mcp_github_search`), and schemas that
    /// compile (a source leaves out a tool whose schema does not, with a
    /// warning).
    fn tools(&self) -> Vec<ToolSpec>;

    /// Whether results carry content from outside the host (a remote
    /// server's): the runner then applies its repeat limit to the tool as
    /// it does to a plugin with a network grant.
    fn fetches_network(&self) -> bool {
        true
    }

    /// Runs `tool` with arguments the registry already repaired and
    /// validated against the tool's schema. The result is text for the
    /// model, already bounded and made safe by the source. Dropping the
    /// future cancels the call (`/stop`).
    fn call<'a>(&'a self, tool: &'a str, args: &'a Value, ctx: &'a CallContext, progress: Option<ProgressSink>) -> ToolFuture<'a>;
}
