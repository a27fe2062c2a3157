//! What the plugin can do to the host's resources: CPU, memory, stack, time,
//! output size, and state across calls.

use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::ToolError;

/// `spin {}`. Attacks the CPU time limit: a loop that never calls the host,
/// so only epoch/fuel interruption can stop it.
pub fn spin() -> Result<String, ToolError> {
    let mut counter = 0u64;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

#[derive(Deserialize)]
pub struct BytesArgs {
    bytes: u64,
}

/// The largest single allocation: a `Vec` may not exceed `isize::MAX` bytes,
/// so 4 GiB is requested as several chunks.
const ALLOC_CHUNK: u64 = 1 << 30;

/// `alloc {bytes}`. Attacks the memory limit: plain `vec!` with a non-zero
/// fill (so every page is touched); a refused `memory.grow` aborts the
/// plugin, and the host must survive that.
pub fn alloc(args: BytesArgs) -> Result<String, ToolError> {
    let mut chunks = Vec::new();
    let mut left = args.bytes;
    while left > 0 {
        let len = left.min(ALLOC_CHUNK);
        chunks.push(vec![1u8; to_usize(len)?]);
        left -= len;
    }
    let total: usize = black_box(&chunks).iter().map(Vec::len).sum();
    Ok(total.to_string())
}

#[derive(Deserialize)]
pub struct DepthArgs {
    depth: u64,
}

/// `recurse {depth}`. Attacks the stack limit: a huge depth overflows the
/// stack and must trap, not crash the host.
pub fn recurse(args: DepthArgs) -> Result<String, ToolError> {
    Ok(format!("depth {}", descend(args.depth)))
}

/// Not a tail call: the frame's buffer is used after the recursive call, so
/// every level keeps its frame (on the wasm stack and the shadow stack).
#[inline(never)]
fn descend(depth: u64) -> u64 {
    if depth == 0 {
        return 0;
    }
    let frame = [depth as u8; 64];
    let below = descend(black_box(depth - 1));
    black_box(&frame);
    below + 1
}

#[derive(Deserialize)]
pub struct PanicArgs {
    message: String,
}

/// `panic {message}`. Attacks error containment: a panic (an abort, then a
/// trap, under the plugin profile) must become a tool error for this call.
pub fn panic(args: PanicArgs) -> Result<String, ToolError> {
    panic!("{}", args.message);
}

/// `big_output {bytes}`. Attacks the result size limit.
pub fn big_output(args: BytesArgs) -> Result<String, ToolError> {
    Ok("x".repeat(to_usize(args.bytes)?))
}

#[derive(Deserialize)]
pub struct SleepArgs {
    ms: u64,
}

/// `sleep {ms}`. Attacks the wall-clock limit while blocked inside a host
/// call (a `wasi:clocks` pollable), where CPU-time interruption does not fire.
pub fn sleep(args: SleepArgs) -> Result<String, ToolError> {
    std::thread::sleep(Duration::from_millis(args.ms));
    Ok("slept".to_string())
}

#[derive(Deserialize)]
pub struct SlowEchoArgs {
    text: String,
    ms: u64,
}

/// `slow_echo {text, ms}`. Busy for `ms` then echoes: parallel calls must
/// each get their own text back (isolation of concurrent instances).
pub fn slow_echo(args: SlowEchoArgs) -> Result<String, ToolError> {
    let start = Instant::now();
    let busy = Duration::from_millis(args.ms);
    while start.elapsed() < busy {
        black_box(());
    }
    Ok(args.text)
}

static CALLS: AtomicU32 = AtomicU32::new(0);

/// `counter {}`. Attacks "a fresh instance per call": state kept in a global
/// must not survive, so this always returns 1.
pub fn counter() -> Result<String, ToolError> {
    Ok((CALLS.fetch_add(1, Ordering::Relaxed) + 1).to_string())
}

/// A byte count from the arguments as a `usize` (32 bits on wasm32).
fn to_usize(bytes: u64) -> Result<usize, ToolError> {
    usize::try_from(bytes)
        .map_err(|_| ToolError::InvalidArgs(format!("{bytes} bytes do not fit in usize")))
}
