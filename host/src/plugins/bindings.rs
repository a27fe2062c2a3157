//! Host-side bindings generated from `wit/chitin.wit`.
//!
//! Exports are async so a guest call can yield to tokio at every epoch tick;
//! the `host` imports are synchronous because they only record a line.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "tool-plugin",
    exports: { default: async },
});

pub use self::chitin::plugin::host::LogLevel;
pub use self::chitin::plugin::types::{CallContext as WitCallContext, ToolError as WitToolError};
