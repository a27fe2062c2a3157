//! # chitin
//!
//! A personal AI agent host whose every tool is a sandboxed WebAssembly
//! component. The host is native (tokio); plugins are untrusted WASI Preview 2
//! components loaded through the `chitin:plugin` WIT package (`wit/`).
//!
//! Modules, in the order a message flows through them
//! (`../shared/spec/RUNTIME.md` is the behaviour spec; the names match it):
//! - [`config`] and [`app`]: the data dir, `config.toml`, and assembling a
//!   host (runtime, plugins, registry, agent core) from them;
//! - [`bus`]: `InboundMessage`/`OutboundMessage` and the `MessageBus`;
//! - [`agent`]: the engine: `AgentLoop` (dispatch, locks, pending
//!   injection), the turn state machine, prompt assembly, the `AgentRunner`
//!   ReAct loop, and the traits features implement (`agent::hooks`);
//! - [`features`]: what the engine runs but does not know: goals' `/goal`,
//!   subagents, the plugin services, the heartbeat, cron and Dream; they
//!   import the engine, never the other way round;
//! - [`provider`]: LLM providers (OpenAI-compatible chat completions);
//! - [`tools`]: `ToolRegistry`, which repairs and validates arguments;
//! - [`plugins`]: the wasmtime runtime, manifest, grants and sandbox (the
//!   only module that knows wasmtime);
//! - [`market`]: installing third-party plugins from signed indexes (minisign
//!   signatures, rollback and expiry checks, import audit, `chitin.lock`);
//! - [`session`]: `Session`, history rules and the JSONL `SessionStore`;
//! - [`compact`] and [`tokens`]: consolidation, idle compaction, the archive,
//!   token estimates;
//! - [`workspace`] and [`text`]: the host's only doors to what a plugin can
//!   write: workspace files through a capability handle, plugin text made
//!   safe to show and bounded in size;
//! - [`gateway`]: `chitin gateway`, the always-on host: the agent loop over
//!   the bus, the OpenAI-compatible API, the outbound router every front end
//!   reads its answers from, and the place the chat channels will start;
//! - [`channels`]: the channel manager: poll loops of channel components,
//!   committed state, dedup, allow-lists, the per-channel lock and delivery.
//!
//! Test support (mock servers, test guests, the binary driver) lives in the
//! `chitin-testing` crate, a dev-dependency: none of it ships.
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
//! - Session files append per turn (new messages plus a metadata record)
//!   instead of rewriting the file: a turn costs O(new messages); the last
//!   metadata record wins on load, and the file is rewritten compactly now
//!   and then (see `session::store`).
//! - The CLI is not a bus channel: it calls `AgentLoop::process_direct`, as
//!   the spec says, with its own `TurnSink` (stderr hints) instead of the
//!   bus responder, and Ctrl-C maps to the same stop as `/stop`.

pub mod agent;
pub mod app;
pub mod bus;
pub mod channels;
pub mod compact;
pub mod config;
pub mod durable;
pub mod env;
pub mod features;
pub mod fsutil;
pub mod gateway;
pub mod market;
pub mod mcp;
pub mod plugins;
pub mod provider;
pub mod sandbox;
pub mod session;
pub mod text;
pub mod tokens;
pub mod tools;
pub mod workspace;

/// The DAG rule over the modules above (a test).
#[cfg(test)]
mod module_graph;
