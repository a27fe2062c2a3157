//! `chitin mcp`: the MCP servers the agent uses (`list`, `add`, `remove`,
//! `tools`, `doctor`: [`client`]; `login`: [`login`]) and chitin as an MCP
//! server (`serve`: [`serve`]).

mod client;
mod login;
mod serve;

use std::process::ExitCode;

use clap::Subcommand;

use chitin::app::AppOptions;
use chitin::config::DataDir;

/// `chitin mcp ...`
#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// The configured MCP servers: transport, sandbox, whether enabled.
    List,
    /// Add a server to config.toml (`--url URL`, or `-- COMMAND ARGS...`).
    Add(client::AddArgs),
    /// Remove a server from config.toml.
    Remove {
        /// The server's name (`[mcp_servers.NAME]`).
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
    /// Serve the plugins' tools to an MCP client over stdio.
    Serve(serve::ServeArgs),
}

pub(super) async fn run(cmd: McpCommand, data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    match cmd {
        McpCommand::Serve(args) => serve::run(args, data, options).await,
        McpCommand::Login { name } => login::run(&name, data, options).await,
        other => client::run(other, data, options).await,
    }
}
