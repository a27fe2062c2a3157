//! What the plugin can make the host print, store or send on: tool errors,
//! progress and log lines of any size and number (and any bytes, escape
//! sequences included), and how it ends a call.

use serde::Deserialize;

use crate::ToolError;
use crate::chitin::plugin::host::{self, LogLevel};

#[derive(Deserialize)]
pub struct FailArgs {
    text: String,
    repeat: u64,
}

/// `fail {text, repeat}`. Attacks the (missing) cap on error text: the
/// error goes to the model, the session and the terminal. `text` may carry
/// terminal escape sequences (OSC 52, cursor movement).
pub fn fail(args: FailArgs) -> Result<String, ToolError> {
    Err(ToolError::Failed(args.text.repeat(to_usize(args.repeat)?)))
}

#[derive(Deserialize)]
pub struct FloodArgs {
    text: String,
    count: u64,
}

/// `progress_flood {text, count}`. Attacks the progress channel: `count`
/// calls of `host.progress(text)`, as fast as the host takes them.
pub fn progress_flood(args: FloodArgs) -> Result<String, ToolError> {
    for _ in 0..args.count {
        host::progress(&args.text);
    }
    Ok(format!("sent {}", args.count))
}

/// `log_flood {text, count}`. Attacks the log budget: `count` info lines of
/// `text` (a budget by lines lets long lines through).
pub fn log_flood(args: FloodArgs) -> Result<String, ToolError> {
    for _ in 0..args.count {
        host::log(LogLevel::Info, &args.text);
    }
    Ok(format!("sent {}", args.count))
}

#[derive(Deserialize)]
pub struct ExitArgs {
    code: i32,
}

/// `exit {code}`. Ends the instance through `wasi:cli/exit` instead of
/// returning: the host must report it as an exit, not a crash, and survive.
pub fn exit(args: ExitArgs) -> Result<String, ToolError> {
    std::process::exit(args.code)
}

fn to_usize(n: u64) -> Result<usize, ToolError> {
    usize::try_from(n).map_err(|_| ToolError::InvalidArgs(format!("{n} does not fit in usize")))
}
