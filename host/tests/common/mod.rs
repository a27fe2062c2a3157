//! What the binary's tests share: the `chitin` binary and guest paths, a
//! command over a fresh data dir with no provider in the environment, and
//! running it to completion (or failing the test if it hangs).

#![allow(dead_code)] // each test file uses its own subset

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub const CHITIN: &str = env!("CARGO_BIN_EXE_chitin");
pub const HELLO_WASM: &str = env!("CHITIN_HELLO_WASM");
pub const HOSTILE_WASM: &str = env!("CHITIN_HOSTILE_WASM");
pub const ECHO_CHANNEL_WASM: &str = env!("CHITIN_ECHO_CHANNEL_WASM");

/// `chitin ARGS` with `CHITIN_HOME=home` and none of the provider variables
/// of the environment the tests run in.
pub fn chitin(home: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(CHITIN);
    cmd.args(args).env("CHITIN_HOME", home).env_remove("OPENAI_API_KEY").env_remove("OPENAI_BASE_URL").env_remove("CHITIN_MODEL");
    cmd
}

/// Runs `cmd` to completion (`Command::output`: stdin closed, output kept).
pub fn run(mut cmd: impl std::borrow::BorrowMut<Command>) -> Output {
    cmd.borrow_mut().output().expect("chitin runs")
}

/// Runs `cmd` to completion, but fails the test (and kills the process) if
/// it is still running after `limit`: some attacks are about hangs.
pub fn run_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child: Child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("chitin runs");
    // Read both pipes while waiting, so a chatty child never blocks on a full pipe.
    let mut out_pipe = child.stdout.take().expect("piped");
    let mut err_pipe = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut out_pipe, &mut buf).map(|_| buf).unwrap_or_default()
    });
    let err = std::thread::spawn(move || {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut err_pipe, &mut buf).map(|_| buf).unwrap_or_default()
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            let stderr = String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned();
            panic!("chitin did not exit within {limit:?}; stderr: {stderr}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output { status, stdout: out.join().unwrap_or_default(), stderr: err.join().unwrap_or_default() }
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}
