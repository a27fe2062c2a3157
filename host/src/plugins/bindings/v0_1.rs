//! Host-side bindings of `chitin:plugin@0.1.0` (`wit/chitin.wit`): the
//! `tool-plugin` world. A released version is never edited, so neither is
//! this module; it stays linked so a plugin built against 0.1.0 keeps loading.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "tool-plugin",
    exports: { default: async },
});

pub use self::chitin::plugin::host::LogLevel;
pub use self::chitin::plugin::types::{CallContext as WitCallContext, ToolError as WitToolError};
