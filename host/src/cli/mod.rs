//! Command-line front end: parses arguments into plain structs, calls the
//! library, prints results. User-facing output is written here and nowhere
//! else; diagnostics go through `tracing` (`RUST_LOG`, default `warn`).

mod agent;
mod onboard;
mod plugin;
mod status;
mod tool;

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
    /// Show config, provider, plugins and grants.
    Status,
    /// Inspect, list, pack and install plugins.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Call tools directly, through the same registry and sandbox the agent uses.
    #[command(subcommand)]
    Tool(tool::ToolCommand),
}

/// Parses the command line and runs it; errors are printed to stderr.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let data = DataDir::from_env()?;
    // Plugins are compiled by this same binary in a child process with CPU
    // and memory limits (`plugins::compile`).
    let compile_child = std::env::current_exe().ok();
    let options = AppOptions { config_file: cli.config, compile_child, ..AppOptions::default() };
    match cli.command {
        Command::Onboard { force } => onboard::run(&data, force),
        Command::Agent(args) => runtime.block_on(agent::run(args, data, options)),
        Command::Status => status::run(data, options),
        Command::Plugin(cmd) => plugin::run(cmd, data, options),
        Command::Tool(cmd) => runtime.block_on(tool::run(cmd, data, options)),
    }
}

/// Opens the host, reporting plugins that failed to load without stopping.
fn open_app(data: DataDir, options: AppOptions) -> anyhow::Result<App> {
    let app = App::open(data, options)?;
    for failure in &app.catalog.failures {
        eprintln!("warning: {failure}");
    }
    for conflict in app.tools.conflicts() {
        eprintln!("warning: {conflict}");
    }
    Ok(app)
}
