//! What the binary's tests share: the `chitin` binary under test (known
//! only here, to the test crate of the package that has the binary) and a
//! command over a fresh data dir; the rest of the driver (running with a
//! time limit, a running gateway) and the guest paths come from
//! `chitin_testing`.

#![allow(dead_code)] // each test module uses its own subset

use std::path::Path;
use std::process::Command;

pub(crate) use chitin_testing::binary::*;
pub(crate) use chitin_testing::{ECHO_CHANNEL_WASM, HELLO_WASM, HOSTILE_WASM};

pub(crate) const CHITIN: &str = env!("CARGO_BIN_EXE_chitin");

/// `chitin ARGS` with `CHITIN_HOME=home` and none of the provider variables
/// of the environment the tests run in.
pub(crate) fn chitin(home: &Path, args: &[&str]) -> Command {
    command(CHITIN, home, args)
}
