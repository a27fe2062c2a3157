//! `chitin mcp`: the MCP servers the agent uses (`list`, `tools`, `doctor`:
//! [`client`]; `login`: [`login`]), and chitin's tools as an MCP server
//! (`serve`: [`serve`]).

mod client;
mod edit;
mod login;
mod serve;

use std::process::ExitCode;

use clap::Subcommand;

use chitin::app::AppOptions;
use chitin::mcp::config::{McpConfigError, McpServerConfig, SandboxMode};
use chitin::text::for_terminal;
use chitin::config::DataDir;

/// `chitin mcp ...`
#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// The configured MCP servers: transport, sandbox, whether enabled.
    List,
    /// Add a server to config.toml: `--url URL` for a remote one, or
    /// `-- COMMAND [ARGS]...` for a local one (run in the OS sandbox unless
    /// `--no-sandbox`). The rest of the file is kept as it is.
    Add(edit::AddArgs),
    /// Remove a server from config.toml.
    Remove {
        /// The server's name.
        name: String,
    },
    /// Connect to a server (every enabled one without NAME) and list its tools.
    Tools {
        /// The server's name.
        name: Option<String>,
    },
    /// Check servers end to end: config, sandbox, connection, tools; exits
    /// non-zero when one fails.
    Doctor {
        /// The server's name (every enabled one without it).
        name: Option<String>,
    },
    /// Sign in to a server that needs OAuth (authorization code with PKCE).
    Login {
        /// The server's name.
        name: String,
    },
    /// Serve the plugins' tools to an MCP client over stdin/stdout (the
    /// command an MCP client's config runs); each call is a fresh sandboxed
    /// instance with the plugin's grant and the configured workspace.
    Serve(serve::ServeArgs),
}

pub(super) async fn run(cmd: McpCommand, data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    match cmd {
        McpCommand::Login { name } => login::run(&name, data, options).await,
        McpCommand::Serve(args) => serve::run(args, data, options).await,
        McpCommand::Add(args) => edit::add(args, &data, &options),
        McpCommand::Remove { name } => edit::remove(&name, &data, &options),
        other => client::run(other, data, options).await,
    }
}

/// The lines `chitin mcp list` and `chitin status` show for the servers,
/// each starting with `indent`: name, how it runs, a red warning for an
/// unsandboxed one, and the entries that do not parse.
pub(super) fn server_lines(servers: &[(String, McpServerConfig)], errors: &[McpConfigError], indent: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for (name, config) in servers {
        let enabled = if config.enabled { "" } else { " (disabled)" };
        lines.push(format!("{indent}{:<12} {}{enabled}", super::shown(name, 64, "name"), for_terminal(&config.describe())));
        if config.command.is_some() && config.sandbox == SandboxMode::None {
            lines.push(format!("{indent}{:<12} {}", "", super::status::red("runs WITHOUT the OS sandbox, with your rights (sandbox = \"none\")")));
        }
    }
    for error in errors {
        lines.push(format!("{indent}INVALID — {}", for_terminal(&error.to_string())));
    }
    lines
}
