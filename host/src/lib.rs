//! # chitin
//!
//! A personal AI agent host whose every tool is a sandboxed WebAssembly
//! component. The host is native (tokio); plugins are untrusted WASI Preview 2
//! components loaded through the `chitin:plugin` WIT package (`wit/`).
//!
//! Modules, in the order a tool call flows through them:
//! - [`config`]: the data dir and `config.toml` (grants, limits);
//! - [`app`]: builds the runtime, catalog and registry from a config;
//! - [`tools`]: `ToolRegistry`, which repairs and validates arguments;
//! - [`plugins`]: the wasmtime runtime, manifest, grants and sandbox.
//!
//! Where this differs from `DESIGN.md`, and why:
//! - Plugins are compiled lazily, on their first call, not at startup: startup
//!   reads manifests only (a parser pass), so fifty installed plugins cost
//!   milliseconds, and a plugin never called is never compiled.
//! - `wasi:sockets` is linked, with every address and lookup denied in the
//!   WASI context, instead of left unlinked: components from componentize-py
//!   and componentize-js import it unconditionally and would not instantiate.
//! - The Rust SDK writes the manifest from a compile-time JSON Schema (its own
//!   derive) rather than schemars, because the manifest must be a constant in
//!   the binary to be readable without running the plugin.

pub mod agent;
pub mod app;
pub mod bus;
pub mod compact;
pub mod config;
pub mod plugins;
pub mod provider;
pub mod session;
pub mod testing;
pub mod tokens;
pub mod tools;
