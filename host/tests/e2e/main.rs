//! The tests that drive the `chitin` binary (`CARGO_BIN_EXE_chitin`), one
//! module per concern, in one test binary (so wasmtime is linked once for
//! all of them; ripgrep's `tests/tests.rs` is the model). The library's
//! integration tests are the other binary, `tests/it`.
//!
//! Cargo builds the binary these tests run with the dev-dependencies'
//! features, so it has the `test-support` crash points; the shipped binary
//! (`cargo build --release`) does not, which `host/tests/shipped.rs` checks.

mod common;

mod agent_hardening;
mod channels;
mod cli;
mod cli_hardening;
mod exactly_once;
mod gateway;
mod market;
mod mcp_cli;
mod mcp_login;
mod mcp_serve;
mod providers;
mod sandbox_cli;
mod sdk;
mod secrets;
mod web;
mod webchat;
