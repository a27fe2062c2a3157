//! Tools as the agent sees them: one flat, sorted set of functions over all
//! loaded plugins and any [`ToolSource`] (an MCP server), with argument repair and validation in front of every call.

mod cast;
mod registry;
pub mod schema;
mod source;

pub use registry::{CallGuard, Keep, json_kind, PreparedCall, ToolError, ToolRegistry};
pub use source::{ToolFuture, ToolSource};
