//! Host-side bindings of `chitin:plugin@0.2.0` (`wit/v0.2/`): the
//! `tool-plugin` world (unchanged from 0.1.0 but its own package version) and
//! the `channel-plugin` world. Both worlds share one `host` and one `types`
//! interface, so the channel bindings reuse the tool bindings' modules for
//! them (`with`) and the host implements each 0.2.0 interface once.

/// The 0.2.0 `tool-plugin` world; owns the 0.2.0 `types` and `host` modules.
pub mod tool {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2",
        world: "tool-plugin",
        exports: { default: async },
    });
}

/// The `channel-plugin` world.
pub mod channel {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2",
        world: "channel-plugin",
        exports: { default: async },
        with: {
            "chitin:plugin/host": super::tool::chitin::plugin::host,
        },
    });
}

/// The `agent-plugin` world: `tool-plugin` plus the privileged interfaces
/// (`privileged.wit`). Only its imports are used: such a component exports
/// the same `tool` interface and runs as a 0.2.0 tool plugin; the host
/// links the privileged interfaces for every tool plugin and checks the
/// grant on each call.
pub mod agent {
    wasmtime::component::bindgen!({
        path: "../wit/v0.2",
        world: "agent-plugin",
        // A `wait` spawn runs a whole subagent before it returns.
        imports: { "chitin:plugin/agents.spawn": async },
        exports: { default: async },
        with: {
            "chitin:plugin/host": super::tool::chitin::plugin::host,
            "chitin:plugin/types": super::tool::chitin::plugin::types,
        },
    });
}

pub use self::agent::chitin::plugin::agents;
pub use self::agent::chitin::plugin::goals;
pub use self::agent::chitin::plugin::messaging;
pub use self::agent::chitin::plugin::schedule;
pub use self::channel::exports::chitin::plugin::channel as wit;
pub use self::tool::chitin::plugin::host::LogLevel;
pub use self::tool::chitin::plugin::types::{CallContext as WitCallContext, ToolError as WitToolError};
