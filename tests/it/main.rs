//! The tests that drive the `chitin` library, one module per concern, in
//! one test binary (so wasmtime is linked once for all of them; ripgrep's
//! `tests/tests.rs` is the model). The binary's tests are the other one,
//! `host/tests/e2e`. Shared helpers (mocks, a one-plugin host, a whole
//! agent over a mock model, the guest components) are `chitin_testing`.

mod agent;
mod channel_runtime;
mod compaction;
mod documents;
mod docs;
mod dream;
mod goals;
mod manifest;
mod mcp_client;
mod memory;
mod mcp_oauth;
mod messaging;
mod os_sandbox;
mod provider;
mod providers;
mod recovery;
mod registry;
mod sandbox;
mod secrets;
mod subagents;
mod telegram_channel;
mod telegram_protocol;
mod turn_sink;
mod typed_bus;
