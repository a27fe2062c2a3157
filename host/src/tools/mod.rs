//! Tools as the agent sees them: one flat, sorted set of functions over all
//! loaded plugins, with argument repair and validation in front of every call.

mod cast;
mod registry;

pub use registry::{CallGuard, json_kind, PreparedCall, ToolError, ToolRegistry};
