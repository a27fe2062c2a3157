//! `chitin mcp`: the MCP servers the agent uses (`list`, `tools`, `doctor`:
//! [`client`]; `login`: [`login`]).

mod client;
mod login;

use std::process::ExitCode;

use clap::Subcommand;

use chitin::app::AppOptions;
use chitin::config::DataDir;

/// `chitin mcp ...`
#[derive(Debug, Subcommand)]
pub(crate) enum McpCommand {
    /// The configured MCP servers: transport, sandbox, whether enabled.
    List,
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
}

pub(super) async fn run(cmd: McpCommand, data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    match cmd {
        McpCommand::Login { name } => login::run(&name, data, options).await,
        other => client::run(other, data, options).await,
    }
}
