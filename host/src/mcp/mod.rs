//! The Model Context Protocol, both ways (issue 21), over the official Rust
//! SDK (`rmcp`).
//!
//! - [`client`]: the agent uses MCP servers' tools. Each `[mcp_servers.NAME]`
//!   ([`config`]) is a [`crate::tools::ToolSource`] whose tools join the
//!   `ToolRegistry` as `mcp_<server>_<tool>`. Remote servers are reached
//!   through the host's HTTP policy (the server's URL is the allow-list, no
//!   redirects, private addresses only when named, secrets injected by the
//!   host as headers); a stdio server is a native process in the OS sandbox.
//! - [`server`]: `chitin mcp serve` (stdio) and the gateway's `/mcp`
//!   (streamable HTTP behind the gateway token) offer the plugins' tools to
//!   any MCP client, each call a fresh sandboxed instance.
//!
//! The module graph: `mcp` uses `tools`, `plugins` and `config`; the engine
//! (`agent`) knows only the `ToolSource` trait it declares.

pub mod client;
pub mod config;
pub mod edit;
pub mod oauth;
pub mod server;
