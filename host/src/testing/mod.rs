//! Test support shared by the unit tests, the integration tests (`tests/`)
//! and the benchmarks: [`MockLlm`], a scripted OpenAI-compatible server, so
//! nothing that exercises a provider or the agent loop needs the network;
//! [`bomb`], a component that is expensive to compile.
//!
//! Compiled into the library (not `cfg(test)`) because integration tests and
//! benchmarks link the library as an ordinary dependency.

pub mod bomb;
mod mock_llm;

pub use mock_llm::{MockLlm, MockReply, SCRIPT_EXHAUSTED, Script};
