//! Command-line front end: parses arguments into plain structs, calls the
//! library, prints results. User-facing output is written here and nowhere
//! else; diagnostics go through `tracing` (`RUST_LOG`, default `warn`).
//!
//! Two rules for everything printed:
//! - **Through [`outln!`] / [`errln!`], never `println!`.** A closed stdout
//!   (`chitin plugin list | head -1`) is an `io::Error` of kind `BrokenPipe`
//!   that ends the command quietly with exit code 0, as ripgrep does; a
//!   closed stderr is ignored. `println!` would panic on both.
//! - **Text a plugin or the model controls goes through
//!   [`chitin::text::for_terminal`]** (or [`shown`]): manifest fields,
//!   progress, tool errors, replies, load warnings. A result written to a
//!   pipe or file is the exception where raw bytes are the point.

/// `println!` that returns the write's `io::Result` instead of panicking.
macro_rules! outln {
    () => { $crate::cli::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `eprintln!` that ignores a closed stderr instead of panicking.
macro_rules! errln {
    ($($arg:tt)*) => { $crate::cli::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}

mod agent;
mod gateway;
mod market;
mod mcp;
mod onboard;
mod plugin;
mod scaffold;
mod status;
mod tool;

use std::borrow::Cow;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use chitin::app::{App, AppOptions};
use chitin::config::DataDir;

/// chitin: an AI agent host whose tools are sandboxed WebAssembly components.
#[derive(Debug, Parser)]
#[command(name = "chitin", version, about)]
struct Cli {
    /// Config file to use instead of `$CHITIN_HOME/config.toml`.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Write a commented config and a workspace to start from.
    Onboard {
        /// Overwrite an existing config.
        #[arg(long)]
        force: bool,
    },
    /// Chat with the agent: one message with -m, or interactively.
    Agent(agent::AgentArgs),
    /// Run the always-on host: the agent over the bus and the OpenAI-compatible API.
    Gateway(gateway::GatewayArgs),
    /// Show config, provider, plugins and grants.
    Status,
    /// Inspect, list, pack, install, create and build plugins.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Call tools directly, through the same registry and sandbox the agent uses.
    #[command(subcommand)]
    Tool(tool::ToolCommand),
    /// MCP: the servers the agent uses, and chitin's tools as an MCP server.
    #[command(subcommand)]
    Mcp(mcp::McpCommand),
}

/// Parses the command line and runs it; errors are printed to stderr.
pub(crate) fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        // Colour codes only for a person at a terminal, never into a file,
        // a pipe or a service's journal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match run(cli) {
        Ok(code) => code,
        // The reader of stdout went away (`| head`): it has what it wanted.
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            errln!("error: {}", for_terminal(&error_text(&e)));
            if is_provider_setup(&e) { ExitCode::from(2) } else { ExitCode::FAILURE }
        }
    }
}

/// Writes to stdout; the error of a closed pipe is returned, not a panic.
pub(crate) fn write_out(args: std::fmt::Arguments<'_>) -> std::io::Result<()> {
    std::io::stdout().lock().write_fmt(args)
}

/// Writes to stderr; if stderr itself is gone there is nobody to tell.
pub(crate) fn write_err(args: std::fmt::Arguments<'_>) {
    let _ = std::io::stderr().lock().write_fmt(args);
}

/// Writes raw bytes to stdout (a tool result going to a file keeps them).
pub(crate) fn write_out_bytes(bytes: &[u8]) -> std::io::Result<()> {
    std::io::stdout().lock().write_all(bytes)
}

/// No model provider, key or endpoint: exit status 2, so a script can tell
/// "not set up" from "the model failed" (1).
fn is_provider_setup(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause.downcast_ref::<chitin::app::AppError>().is_some_and(|a| a.is_provider_setup())
            || cause.downcast_ref::<chitin::config::ConfigError>().is_some_and(|c| c.is_provider_setup())
            || cause.downcast_ref::<chitin::gateway::GatewayError>().is_some_and(|g| g.is_provider_setup())
    })
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| cause.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}

/// An error and its causes on one line, `outer: inner`, each cause once:
/// a message that already quotes its source (thiserror's `{source}` in the
/// text) does not get it appended a second time.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(part.as_str()) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// Plugin- or model-controlled text, safe for a terminal (see `chitin::text`).
pub(crate) fn for_terminal(text: &str) -> Cow<'_, str> {
    chitin::text::for_terminal(text)
}

/// One line of plugin- or model-controlled text for the terminal: at most
/// `max_bytes` (with a marker saying what was cut), control characters and
/// newlines shown as escapes, so it cannot rewrite or fake other lines.
pub(crate) fn shown(text: &str, max_bytes: usize, what: &str) -> String {
    chitin::text::clip_for_terminal(text, max_bytes, what).replace('\n', "\\n")
}

/// JSON text with the characters a terminal would obey, which serde_json
/// leaves as they are (DEL, C1 controls, bidirectional overrides), written
/// as `\u` escapes: the same JSON value, safe to print.
pub(crate) fn json_for_terminal(json: &str) -> Cow<'_, str> {
    if matches!(for_terminal(json), Cow::Borrowed(_)) {
        return Cow::Borrowed(json);
    }
    let mut out = String::with_capacity(json.len() + 16);
    let mut buf = [0u8; 4];
    for c in json.chars() {
        // Control characters only occur inside JSON strings, where `\uXXXX`
        // means the same character. All of them are in the BMP.
        if matches!(for_terminal(c.encode_utf8(&mut buf)), Cow::Owned(_)) {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let data = DataDir::from_env()?;
    // Plugins are compiled by this same binary in a child process with CPU
    // and memory limits (`plugins::compile`).
    let compile_child = std::env::current_exe().ok();
    let options = AppOptions { config_file: cli.config, compile_child, ..AppOptions::default() };
    let result = match cli.command {
        Command::Onboard { force } => onboard::run(&data, force),
        Command::Agent(args) => runtime.block_on(agent::run(args, data, options)),
        Command::Gateway(args) => runtime.block_on(gateway::run(args, data, options)),
        Command::Status => status::run(data, options),
        Command::Plugin(cmd) => runtime.block_on(plugin::run(cmd, data, options)),
        Command::Tool(cmd) => runtime.block_on(tool::run(cmd, data, options)),
        Command::Mcp(cmd) => runtime.block_on(mcp::run(cmd, data, options)),
    };
    // Dropping a runtime waits for every blocking thread; one stuck in a
    // system call on a plugin's behalf (a filesystem that never answers)
    // must not keep the process alive after its work is done.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    result
}

/// How long the process waits for blocking threads at exit.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Opens the host, reporting plugins that failed to load (on stderr, once)
/// without stopping.
fn open_app(data: DataDir, options: AppOptions) -> anyhow::Result<App> {
    let app = open_app_quietly(data, options)?;
    for line in load_problems(&app) {
        errln!("warning: {line}");
    }
    Ok(app)
}

/// Opens the host without the load warnings, for commands that list the
/// problems in their own output (`status`, `plugin list`).
fn open_app_quietly(data: DataDir, options: AppOptions) -> anyhow::Result<App> {
    Ok(App::open(data, options)?)
}

/// Skipped plugins and left-out tools, one terminal-safe line each.
fn load_problems(app: &App) -> Vec<String> {
    let skipped = app.catalog.failures.iter().map(|f| format!("skipped installed plugin: {}", for_terminal(&f.to_string())));
    let left_out = app.tools.conflicts().iter().map(|c| for_terminal(&c.to_string()).into_owned());
    skipped.chain(left_out).collect()
}
