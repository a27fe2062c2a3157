//! `hostile`: a tool plugin that attacks the chitin sandbox, for the host's
//! tests. Each tool tries one thing a plugin must not be able to do (or must
//! not be able to do to the host) and reports what happened:
//! `Ok(text)` when the operation went through, `Err(ToolError)` carrying the
//! OS/WASI error when the sandbox refused it.
//!
//! Modules by target: `files` (the workspace boundary, symlinks for host
//! code to follow, descriptors, a lying `read_only`), `net` (sockets,
//! `wasi:http` grants and host-side HTTP resources), `limits` (CPU, memory,
//! stack, time, output), `flood` (error, progress and log text; exit).
//!
//! Independent of the chitin SDK on purpose: bindings come straight from
//! `wit/chitin.wit` and the manifest is embedded by hand.

mod files;
mod flood;
mod limits;
mod net;

use serde::Deserialize;
use serde::de::DeserializeOwned;

wit_bindgen::generate!({ path: "../../../wit", world: "tool-plugin" });

use chitin::plugin::host::{self, LogLevel};
use exports::chitin::plugin::tool::{CallContext, Guest, ToolError};

/// The manifest the host reads without running any code (see wit/README.md).
/// It asks for everything; the tests grant less through the config.
#[used]
#[unsafe(link_section = "chitin:manifest")]
static MANIFEST: [u8; include_bytes!("../manifest.json").len()] =
    *include_bytes!("../manifest.json");

struct Hostile;

impl Guest for Hostile {
    fn invoke(name: String, args_json: String, _ctx: CallContext) -> Result<String, ToolError> {
        let args = args_json.as_str();
        match name.as_str() {
            "echo" => echo(parse(args)?),
            "read_path" => files::read_path(parse(args)?),
            "write_path" => files::write_path(parse(args)?),
            "list_path" => files::list_path(parse(args)?),
            "read_env" => files::read_env(parse(args)?),
            "open_socket" => net::open_socket(parse(args)?),
            "http_get" => net::http_get(parse(args)?),
            "spin" => limits::spin(),
            "alloc" => limits::alloc(parse(args)?),
            "recurse" => limits::recurse(parse(args)?),
            "panic" => limits::panic(parse(args)?),
            "big_output" => limits::big_output(parse(args)?),
            "sleep" => limits::sleep(parse(args)?),
            "slow_echo" => limits::slow_echo(parse(args)?),
            "counter" => limits::counter(),
            "symlink" => files::symlink(parse(args)?),
            "sneaky_write" => files::sneaky_write(parse(args)?),
            "open_files" => files::open_files(parse(args)?),
            "fail" => flood::fail(parse(args)?),
            "progress_flood" => flood::progress_flood(parse(args)?),
            "log_flood" => flood::log_flood(parse(args)?),
            "exit" => flood::exit(parse(args)?),
            "http_flood" => net::http_flood(parse(args)?),
            "http_request" => net::http_request(parse(args)?),
            other => Err(ToolError::UnknownTool(format!("no tool named {other:?}"))),
        }
    }
}

export!(Hostile);

/// Deserializes a tool's arguments; the host has validated them already, so
/// a failure here means the host let through something its schema forbids.
fn parse<T: DeserializeOwned>(args_json: &str) -> Result<T, ToolError> {
    serde_json::from_str(args_json).map_err(|e| ToolError::InvalidArgs(e.to_string()))
}

#[derive(Deserialize)]
struct EchoArgs {
    text: String,
}

/// `echo {text}`: the well-behaved baseline. Uses both host imports, so the
/// tests see a log line and a progress update go through the host.
fn echo(args: EchoArgs) -> Result<String, ToolError> {
    host::log(LogLevel::Info, &format!("echo: {} bytes", args.text.len()));
    host::progress("echoing");
    Ok(args.text)
}
